//! `log` and `graph`: sessions in log order, as text, lanes, JSON or Graphviz.

use super::*;

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Where to start (default: HEAD): conversation names, tags, ids or
    /// prefixes, with ~N and ^N steps (fix~2, HEAD^2).
    #[arg(value_name = "REV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    revs: Vec<String>,
    /// Start from every ref (conversations, archived ones, tags) and HEAD.
    #[arg(long)]
    all: bool,
    /// Show at most N sessions.
    #[arg(short = 'n', long = "max-count", value_name = "N")]
    max_count: Option<usize>,
    /// Follow only first (lineage) parents.
    #[arg(long)]
    first_parent: bool,
    /// One line a session: `<12 hex> (<refs>) <title or line>`.
    #[arg(long)]
    oneline: bool,
    /// Draw the lines of history beside the sessions.
    #[arg(long)]
    graph: bool,
    /// One JSON array, an object a session: id, parents, conversation,
    /// conversation_name, status, created_at, messages, title, usage,
    /// summary and refs.
    #[arg(long, conflicts_with_all = ["oneline", "graph"])]
    pub(crate) json: bool,
    /// Only sessions whose title or added messages (their text, tool calls
    /// and results) match this regular expression.
    #[arg(long, value_name = "PATTERN")]
    grep: Option<String>,
    /// Only sessions created at or after DATE (2025-11-01, an RFC 3339
    /// time, yesterday, 2.weeks.ago).
    #[arg(long, value_name = "DATE")]
    since: Option<String>,
    /// Only sessions created at or before DATE (a date alone: the end of
    /// that day, UTC).
    #[arg(long, value_name = "DATE")]
    until: Option<String>,
    /// Only sessions made by an actor matching this regular expression: the
    /// session's `actor` metadata, else who the ref log says wrote it.
    #[arg(long, value_name = "ACTOR")]
    author: Option<String>,
    /// --grep and --author match regardless of case.
    #[arg(short = 'i', long = "regexp-ignore-case")]
    ignore_case: bool,
}

/// How `log` and `graph` print.
#[derive(Debug, Clone, Copy)]
struct LogFormat {
    oneline: bool,
    graph: bool,
    json: bool,
}

pub fn log(ctx: &Ctx, args: LogArgs) -> CmdResult {
    check_revs(&args.revs)?;
    let filter = crate::search::LogFilter::new(
        args.grep.as_deref(),
        args.author.as_deref(),
        args.since.as_deref(),
        args.until.as_deref(),
        args.ignore_case,
    )?;
    let store = ctx.open_store_read()?;
    let mut starts = resolve_all(&store, &args.revs)?;
    if args.all {
        starts.extend(all_starts(&store)?);
    } else if args.revs.is_empty() {
        starts.push(store.resolve_rev("HEAD")?);
    }
    let follow = if args.first_parent {
        Follow::FirstParent
    } else {
        Follow::All
    };
    let format = LogFormat {
        oneline: args.oneline,
        graph: args.graph,
        json: args.json,
    };
    write_log(&store, &starts, follow, args.max_count, format, filter)
}

fn write_log(
    store: &Store,
    starts: &[ObjectId],
    follow: Follow,
    limit: Option<usize>,
    format: LogFormat,
    mut filter: Option<crate::search::LogFilter>,
) -> CmdResult {
    let mut left = limit.unwrap_or(usize::MAX);
    // Each session's id, with its parents where lanes are drawn; every
    // other format needs the id only, which the walk gives without building
    // a node a session.
    type Walk<'s> = Box<dyn Iterator<Item = Result<(ObjectId, Vec<ObjectId>), Error>> + 's>;
    let with_parents = |n: Result<Node, Error>| n.map(|n| (n.id, n.parents));
    let walk: Walk<'_> = match filter.as_mut() {
        // The walk is filtered first, then parents are rewritten (as git's
        // --graph).
        Some(f) if format.graph => {
            let shown = crate::search::filter_with_parents(store, starts, follow, f)?;
            filter = None;
            Box::new(shown.into_iter().map(Ok).map(with_parents))
        }
        _ if format.graph => Box::new(TopoWalk::new(store, starts, follow)?.map(with_parents)),
        _ => Box::new(LogIds::new(store, starts, follow)?.map(|id| id.map(|id| (id, Vec::new())))),
    };
    // A limited log (`-n 20`) takes its sessions first and decorates only
    // those: decorating every ref would cost a store of a million
    // conversations more than the walk. A whole log decorates each step of
    // its read ahead as it goes, likewise.
    // (Unless the store's refs_to reads every ref: then once.)
    let lazy = limit.is_none() && !store.refs_to_reads_every_ref();
    let (walk, decorations): (Walk<'_>, Decorations) = match limit {
        Some(n) => {
            let mut shown = Vec::new();
            for step in walk {
                if shown.len() >= n {
                    break;
                }
                let (id, parents) = step?;
                if let Some(f) = filter.as_mut() {
                    if !f.accepts(store, &id)? {
                        continue;
                    }
                }
                shown.push((id, parents));
            }
            filter = None;
            let ids: Vec<ObjectId> = shown.iter().map(|(id, _)| *id).collect();
            let decorations = Decorations::for_ids(store, &ids)?;
            (Box::new(shown.into_iter().map(Ok)), decorations)
        }
        None if lazy => (walk, Decorations::at_head(store.get_ref(&RefName::Head)?)),
        None => (walk, Decorations::load(store)?),
    };
    let decorations = std::cell::RefCell::new(decorations);
    let walk = ReadAhead::new(store, walk, lazy.then_some(&decorations));
    let mut out = Out::new();
    let mut lanes = Lanes::new();
    let mut first = true;
    if format.json && !out.put("[")? {
        return out.finish();
    }
    for step in walk {
        if left == 0 {
            break;
        }
        let (id, parents) = step?;
        if let Some(f) = filter.as_mut() {
            if !f.accepts(store, &id)? {
                continue;
            }
        }
        left -= 1;
        let text = if format.json {
            let v = entry_json(store, &decorations.borrow(), &id)?;
            format!("{}{v}", if first { "" } else { "," })
        } else if format.oneline {
            let line = oneline(store, &decorations.borrow(), &id)?;
            if format.graph {
                let rows = lanes.next(id, &parents);
                let mut t = String::new();
                for b in &rows.before {
                    let _ = writeln!(t, "{b}");
                }
                let _ = writeln!(t, "{} {line}", rows.commit);
                for a in &rows.after {
                    let _ = writeln!(t, "{a}");
                }
                t
            } else {
                format!("{line}\n")
            }
        } else {
            let lines = entry_lines(store, &decorations.borrow(), &id)?;
            let mut t = String::new();
            if format.graph {
                let sep = lanes.passing();
                let rows = lanes.next(id, &parents);
                if !first {
                    let _ = writeln!(t, "{sep}");
                }
                for b in &rows.before {
                    let _ = writeln!(t, "{b}");
                }
                for (k, l) in lines.iter().enumerate() {
                    let prefix = if k == 0 { &rows.commit } else { &rows.padding };
                    let _ = writeln!(t, "{}", format!("{prefix} {l}").trim_end());
                }
                for a in &rows.after {
                    let _ = writeln!(t, "{a}");
                }
            } else {
                if !first {
                    t.push('\n');
                }
                for l in &lines {
                    let _ = writeln!(t, "{l}");
                }
            }
            t
        };
        first = false;
        let text = if format.json {
            text.into()
        } else {
            crate::paint::log(&text)
        };
        if !out.put(&text)? {
            return out.finish();
        }
    }
    if format.json {
        out.put("]\n")?;
    }
    out.finish()
}

/// Sessions read ahead per step of a log (see [`Store::read_ahead_sessions`]).
const READ_AHEAD: usize = 256;

/// A log's walk, taken [`READ_AHEAD`] sessions at a time, whose summaries
/// the store reads ahead before they are shown: on a remote store, two
/// round trips a step instead of one or more an entry. With `decorate`,
/// each step's decorations are read too (the refs at those sessions: a
/// few round trips a step, never a read of every ref).
struct ReadAhead<'s, 'd, I> {
    store: &'s Store,
    inner: I,
    step: std::collections::VecDeque<Result<(ObjectId, Vec<ObjectId>), Error>>,
    decorate: Option<&'d std::cell::RefCell<Decorations>>,
}

impl<'s, 'd, I> ReadAhead<'s, 'd, I> {
    fn new(
        store: &'s Store,
        inner: I,
        decorate: Option<&'d std::cell::RefCell<Decorations>>,
    ) -> Self {
        ReadAhead {
            store,
            inner,
            step: Default::default(),
            decorate,
        }
    }
}

impl<I: Iterator<Item = Result<(ObjectId, Vec<ObjectId>), Error>>> Iterator
    for ReadAhead<'_, '_, I>
{
    type Item = Result<(ObjectId, Vec<ObjectId>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.step.is_empty() {
            self.step.extend(self.inner.by_ref().take(READ_AHEAD));
            let ids: Vec<ObjectId> = self
                .step
                .iter()
                .filter_map(|s| s.as_ref().ok().map(|(id, _)| *id))
                .collect();
            if let Err(e) = self.store.read_ahead_sessions(&ids) {
                return Some(Err(e));
            }
            if let (Some(deco), false) = (self.decorate, ids.is_empty()) {
                let mut deco = deco.borrow_mut();
                if let Err(e) = deco.add(self.store, &ids) {
                    return Some(Err(e));
                }
            }
        }
        self.step.pop_front()
    }
}

fn oneline(store: &Store, deco: &Decorations, id: &ObjectId) -> CmdResult<String> {
    let i = info(store, id)?;
    let line = format!(
        "{}{} {}",
        id.to_hex_prefix(12),
        deco.text(id),
        summary(store, &i)?
    );
    Ok(line.trim_end().to_owned())
}

/// A log entry's lines, as `git log` prints a commit.
fn entry_lines(store: &Store, deco: &Decorations, id: &ObjectId) -> CmdResult<Vec<String>> {
    let i = info(store, id)?;
    let mut lines = vec![format!("session {id}{}", deco.text(id))];
    if i.parents.len() > 1 {
        let short: Vec<String> = i.parents.iter().map(|p| p.to_hex_prefix(12)).collect();
        lines.push(format!("Merge:        {}", short.join(" ")));
    }
    let conv = conversation_name(store, &i)?.unwrap_or_else(|| i.conversation.to_hex());
    lines.push(format!("Conversation: {conv}"));
    lines.push(format!("Date:         {}", format_rfc3339_ms(i.created_at)));
    lines.push(format!("Status:       {}", i.status));
    lines.push(format!("Messages:     {}", i.messages));
    lines.push(format!("Usage:        {}", usage_text(&i.usage)));
    lines.push(String::new());
    lines.push(format!("    {}", summary(store, &i)?).trim_end().to_owned());
    Ok(lines)
}

fn entry_json(store: &Store, deco: &Decorations, id: &ObjectId) -> CmdResult<Value> {
    Ok(store.log_entry_json(id, deco.refs(id))?)
}

// ---- graph ----

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    /// Lanes beside one line a session, as `log --graph --oneline`.
    Text,
    /// A Graphviz digraph: `sessctl graph --format dot | dot -Tsvg`.
    Dot,
}

#[derive(Debug, Args)]
pub struct GraphArgs {
    /// text or dot.
    #[arg(long, value_enum, default_value = "text")]
    format: GraphFormat,
    /// One JSON array, a node a session in log order (never a session
    /// before its descendants): id, parents (the first parent first) and
    /// refs (full names, HEAD first).
    #[arg(long, conflicts_with = "format")]
    json: bool,
    /// Where to start (default: every ref and HEAD).
    #[arg(value_name = "REV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    revs: Vec<String>,
}

pub fn graph(ctx: &Ctx, args: GraphArgs) -> CmdResult {
    check_revs(&args.revs)?;
    let store = ctx.open_store_read()?;
    let starts = if args.revs.is_empty() {
        all_starts(&store)?
    } else {
        resolve_all(&store, &args.revs)?
    };
    if args.json {
        let deco = Decorations::load(&store)?;
        let mut nodes = Vec::new();
        for node in TopoWalk::new(&store, &starts, Follow::All)? {
            let n = node?;
            nodes.push(json!({
                "id": n.id.to_hex(),
                "parents": hexes(&n.parents),
                "refs": deco.refs(&n.id),
            }));
        }
        return print(&format!("{}\n", Value::Array(nodes)));
    }
    match args.format {
        GraphFormat::Text => write_log(
            &store,
            &starts,
            Follow::All,
            None,
            LogFormat {
                oneline: true,
                graph: true,
                json: false,
            },
            None,
        ),
        GraphFormat::Dot => {
            let deco = Decorations::load(&store)?;
            let g = SessionGraph::load(&store, &starts, Follow::All)?;
            let mut failed: Option<CommandError> = None;
            let dot = g.to_dot(|n: &Node| {
                let mut label = vec![n.id.to_hex_prefix(12)];
                let names = deco.names(&n.id);
                if !names.is_empty() {
                    label.push(names.join(", "));
                }
                match info(&store, &n.id) {
                    Ok(i) => label.push(plural(i.messages, "message", "messages")),
                    Err(e) => failed = Some(e),
                }
                label
            });
            if let Some(e) = failed {
                return Err(e);
            }
            print(&dot)
        }
    }
}
