//! Search and reports: `grep` over message text and `stats`, the usage
//! report; `log` and `ls` take their filters from here too
//! ([`TimeArg`], [`pattern`]).
//!
//! The scanning is the library's (`sessctl_store::search`): this module
//! checks arguments before the store is opened, picks what to search, and
//! prints.

use std::collections::HashSet;
use std::fmt::Write as _;

use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use sessctl_store::graph::{self, Follow};
use sessctl_store::import::Format;
use sessctl_store::index::ConversationInfo;
use sessctl_store::refs::{ConversationStatus, RefTarget};
use sessctl_store::rev::RevSpec;
use sessctl_store::search::{self, Pattern, StatsBy, Totals};
use sessctl_store::time::now_ms;
use sessctl_store::{Error, ObjectId, RefName, Store};

use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

/// Compiles a pattern given to `FLAG`; an invalid one is a usage error.
pub fn pattern(text: &str, ignore_case: bool) -> CmdResult<Pattern> {
    Pattern::new(text, ignore_case).map_err(|e| CommandError::Usage(e.to_string()))
}

/// Reads a `--since` / `--until` value: a usage error names the flag. An
/// `--until` date alone is the end of that day (the bound is included).
pub fn time_arg(flag: &str, text: Option<&str>) -> CmdResult<Option<i64>> {
    let Some(text) = text else { return Ok(None) };
    let parsed = if flag == "--until" {
        search::parse_time_end(text, now_ms())
    } else {
        search::parse_time(text, now_ms())
    };
    match parsed {
        Ok(ms) => Ok(Some(ms)),
        Err(Error::BadTime { text }) => Err(CommandError::Usage(format!(
            "{flag} takes a date (2025-11-01), a time (2025-11-01T12:00:00, RFC 3339 with a \
             zone, UTC without), now, yesterday or N.days.ago (also minutes, hours, weeks), \
             not '{text}'"
        ))),
        Err(e) => Err(e.into()),
    }
}

fn check_revs(revs: &[String]) -> CmdResult {
    for r in revs {
        RevSpec::parse(r).map_err(Error::from)?;
    }
    Ok(())
}

// ---- grep ----

#[derive(Debug, Args)]
pub struct GrepArgs {
    /// A regular expression (Rust regex syntax), matched against each line
    /// of every message's text: its content, thinking, tool calls (name and
    /// arguments) and tool results.
    #[arg(value_name = "PATTERN")]
    pattern: String,
    /// Where to search: the message history of each revision (conversation
    /// names, tags, ids, fix~2). Default: every active conversation.
    #[arg(value_name = "REV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    revs: Vec<String>,
    /// Without REV: archived conversations too.
    #[arg(long, conflicts_with = "revs")]
    all: bool,
    /// Match regardless of case.
    #[arg(short = 'i', long = "ignore-case")]
    ignore_case: bool,
    /// Only messages of this role (user, assistant, tool, system; Codex
    /// items also function_call, function_call_output, reasoning).
    #[arg(long, value_name = "ROLE")]
    role: Option<String>,
    /// Print only the conversations (or revisions) with a match, one a line.
    #[arg(short = 'l', long = "files-with-matches")]
    list: bool,
    /// One JSON array: one object per matching message (with -l, per
    /// conversation).
    #[arg(long)]
    json: bool,
}

/// One searched history.
struct Target {
    /// How the output names it: the conversation's name, or the revision
    /// as given.
    label: String,
    /// The conversation its head belongs to, by name, when one carries it.
    conversation: Option<String>,
    head: ObjectId,
}

fn conversation_targets(store: &Store, all: bool) -> CmdResult<Vec<Target>> {
    let mut list = store.conversations_where(None, |c| {
        all || c.record.status == ConversationStatus::Active
    })?;
    list.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(list
        .into_iter()
        .filter_map(|c| {
            c.head.map(|head| Target {
                label: c.name.clone(),
                conversation: Some(c.name),
                head,
            })
        })
        .collect())
}

fn rev_targets(store: &Store, revs: &[String]) -> CmdResult<Vec<Target>> {
    let mut out = Vec::with_capacity(revs.len());
    for r in revs {
        let head = store.resolve_rev(r)?;
        let conv = store.describe_session(&head)?.conversation;
        out.push(Target {
            label: r.clone(),
            conversation: store.index().conversation_name(&conv)?,
            head,
        });
    }
    Ok(out)
}

/// `grep`: exit 1 means only that nothing matched; any error (no store, an
/// unknown revision) exits 2, as grep(1)'s do.
pub fn grep(ctx: &Ctx, args: GrepArgs) -> CmdResult {
    grep_or_fail(ctx, args).map_err(|e| match e {
        CommandError::Silent(code) => CommandError::Silent(code),
        e => CommandError::NotANo(Box::new(e)),
    })
}

fn grep_or_fail(ctx: &Ctx, args: GrepArgs) -> CmdResult {
    let pat = pattern(&args.pattern, args.ignore_case)?;
    check_revs(&args.revs)?;
    let store = ctx.open_store_read()?;
    let targets = if args.revs.is_empty() {
        conversation_targets(&store, args.all)?
    } else {
        rev_targets(&store, &args.revs)?
    };
    let heads: Vec<ObjectId> = targets.iter().map(|t| t.head).collect();
    let hits = search::grep(store.odb(), &heads, &pat, args.role.as_deref())?;
    if hits.is_empty() {
        if args.json {
            print("[]\n")?;
        }
        // As grep: nothing found is exit 1, with nothing on stderr.
        return Err(CommandError::Silent(1));
    }
    let mut text = String::new();
    if args.list {
        let mut counts = vec![0u64; targets.len()];
        for h in &hits {
            counts[h.target] += 1;
        }
        if args.json {
            let rows: Vec<Value> = targets
                .iter()
                .zip(&counts)
                .filter(|(_, n)| **n > 0)
                .map(|(t, n)| {
                    json!({
                        "rev": t.label,
                        "conversation": t.conversation,
                        "head": t.head.to_hex(),
                        "messages": n,
                    })
                })
                .collect();
            return print(&format!("{}\n", Value::Array(rows)));
        }
        for (t, n) in targets.iter().zip(&counts) {
            if *n > 0 {
                let _ = writeln!(text, "{}", t.label);
            }
        }
        return print(&text);
    }
    if args.json {
        let rows: Vec<Value> = hits
            .iter()
            .map(|h| {
                let t = &targets[h.target];
                json!({
                    "rev": t.label,
                    "conversation": t.conversation,
                    "session": h.session.to_hex(),
                    "index": h.index,
                    "message": h.message.to_hex(),
                    "role": h.found.role,
                    "lines": h.found.lines.iter().map(|l| json!({
                        "number": l.number,
                        "text": l.text,
                        "matches": l.spans.iter().map(|(s, e)| json!([s, e])).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        return print(&format!("{}\n", Value::Array(rows)));
    }
    for h in &hits {
        let t = &targets[h.target];
        let role = h.found.role.as_deref().unwrap_or("-");
        for l in &h.found.lines {
            let _ = writeln!(
                text,
                "{}:{}:{}:{}:{}",
                t.label,
                h.session.to_hex_prefix(12),
                h.index,
                role,
                l.text
            );
        }
    }
    print(&text)
}

// ---- stats ----

/// How `stats` groups its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// One row per conversation (by the conversation id sessions carry).
    Conversation,
    /// One row per model (the session's `model` metadata, else the model
    /// its messages name).
    Model,
    /// One row per UTC day a session was created.
    Day,
    /// One row per source: claude-code, codex, openai, swe-agent or native.
    Source,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Count the sessions these revisions reach (conversation names, tags,
    /// ids). Default: every ref and HEAD, archived conversations and
    /// imported subagents included.
    #[arg(value_name = "REV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    revs: Vec<String>,
    /// Group the totals: conversation, model, day or source.
    #[arg(long, value_enum, value_name = "KEY")]
    by: Option<By>,
    /// Only sessions created at or after this time (2025-11-01,
    /// 2.weeks.ago, yesterday, an RFC 3339 time).
    #[arg(long, value_name = "DATE")]
    since: Option<String>,
    /// Only sessions created at or before this time (a date alone: the end
    /// of that day, UTC).
    #[arg(long, value_name = "DATE")]
    until: Option<String>,
    /// One JSON object: {"by", "rows": [{"key", ...totals}], "total"}.
    #[arg(long)]
    json: bool,
}

fn every_start(store: &Store) -> CmdResult<Vec<ObjectId>> {
    let mut out = Vec::new();
    if let Some(h) = store.resolve_ref(&RefName::Head)? {
        out.push(h);
    }
    for (_, t) in store.refs()? {
        if let RefTarget::Session(id) = t {
            out.push(id);
        }
    }
    Ok(out)
}

pub fn stats(ctx: &Ctx, args: StatsArgs) -> CmdResult {
    let since = time_arg("--since", args.since.as_deref())?;
    let until = time_arg("--until", args.until.as_deref())?;
    check_revs(&args.revs)?;
    let store = ctx.open_store_read()?;
    let starts = if args.revs.is_empty() {
        every_start(&store)?
    } else {
        args.revs
            .iter()
            .map(|r| store.resolve_rev(r))
            .collect::<Result<Vec<_>, _>>()?
    };
    let mut sessions: Vec<ObjectId> = graph::ancestors(&store, &starts, Follow::All)?
        .into_iter()
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    sessions.sort_unstable();
    let by = match args.by {
        None => StatsBy::Total,
        Some(By::Conversation) => StatsBy::Conversation,
        Some(By::Model) => StatsBy::Model,
        Some(By::Day) => StatsBy::Day,
        Some(By::Source) => StatsBy::Source,
    };
    let rows = search::stats(&store, &sessions, by, since, until)?;
    let mut total = Totals::default();
    for (_, t) in &rows {
        total.merge(t);
    }
    let by_name = args.by.map(|b| match b {
        By::Conversation => "conversation",
        By::Model => "model",
        By::Day => "day",
        By::Source => "source",
    });
    if args.json {
        let list: Vec<Value> = if args.by.is_some() {
            rows.iter()
                .map(|(k, t)| {
                    let mut v = t.to_json();
                    v["key"] = json!(k);
                    v
                })
                .collect()
        } else {
            Vec::new()
        };
        let out = json!({"by": by_name, "rows": list, "total": total.to_json()});
        return print(&format!("{out}\n"));
    }
    print(&stats_table(by_name, &rows, &total))
}

fn stats_table(by: Option<&str>, rows: &[(String, Totals)], total: &Totals) -> String {
    let header = [
        by.unwrap_or("").to_uppercase(),
        "SESSIONS".into(),
        "MESSAGES".into(),
        "IN".into(),
        "OUT".into(),
        "CACHE READ".into(),
        "CACHE WRITE".into(),
        "REQUESTS".into(),
        "DURATION".into(),
        "TOOL CALLS".into(),
    ];
    let cells = |key: &str, t: &Totals| -> Vec<String> {
        vec![
            key.to_owned(),
            t.sessions.to_string(),
            t.messages.to_string(),
            t.input_tokens.to_string(),
            t.output_tokens.to_string(),
            t.cache_read_tokens.to_string(),
            t.cache_write_tokens.to_string(),
            t.requests.to_string(),
            duration(t.duration_ms),
            t.tool_calls.values().sum::<u64>().to_string(),
        ]
    };
    let mut table: Vec<Vec<String>> = vec![header.to_vec()];
    if by.is_some() {
        for (k, t) in rows {
            table.push(cells(k, t));
        }
    }
    table.push(cells("total", total));
    if by.is_none() {
        // No grouping: the key column would be empty.
        for r in &mut table {
            r.remove(0);
        }
    }
    let widths: Vec<usize> = (0..table[0].len())
        .map(|c| {
            table
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in &table {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                // The key column reads left to right, numbers line up right.
                if by.is_some() && c == 0 {
                    format!("{cell:<w$}", w = widths[c])
                } else {
                    format!("{cell:>w$}", w = widths[c])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    if !total.tool_calls.is_empty() {
        let _ = writeln!(out, "\ntool calls:");
        let mut tools: Vec<(&String, &u64)> = total.tool_calls.iter().collect();
        tools.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let w = tools.iter().map(|t| t.0.chars().count()).max().unwrap_or(0);
        for (name, n) in tools {
            let _ = writeln!(out, "  {name:<w$}  {n}");
        }
    }
    out
}

/// `1h02m03s`, `4m05s`, `6s`, `0s`.
fn duration(ms: u64) -> String {
    let s = ms / 1000;
    let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
    if h > 0 {
        format!("{h}h{m:02}m{s:02}s")
    } else if m > 0 {
        format!("{m}m{s:02}s")
    } else {
        format!("{s}s")
    }
}

// ---- log's filters ----

/// `log --grep/--since/--until/--author`, checked before the store is
/// opened and applied to each session the walk yields.
#[derive(Debug)]
pub struct LogFilter {
    grep: Option<Pattern>,
    author: Option<Pattern>,
    since: Option<i64>,
    until: Option<i64>,
    actors: Option<search::Actors>,
}

impl LogFilter {
    /// `None` when no filter is asked for.
    pub fn new(
        grep: Option<&str>,
        author: Option<&str>,
        since: Option<&str>,
        until: Option<&str>,
        ignore_case: bool,
    ) -> CmdResult<Option<LogFilter>> {
        let f = LogFilter {
            grep: grep.map(|p| pattern(p, ignore_case)).transpose()?,
            author: author.map(|p| pattern(p, ignore_case)).transpose()?,
            since: time_arg("--since", since)?,
            until: time_arg("--until", until)?,
            actors: None,
        };
        let any = f.grep.is_some() || f.author.is_some() || f.since.is_some() || f.until.is_some();
        Ok(any.then_some(f))
    }

    /// Whether the session `id` is shown. Ask in log order (children
    /// before parents): an actor passes from a session to the ancestors
    /// written with it.
    pub fn accepts(&mut self, store: &Store, id: &ObjectId) -> CmdResult<bool> {
        let mut ok = true;
        if self.since.is_some() || self.until.is_some() {
            let t = store.describe_session(id)?.created_at;
            ok = self.since.is_none_or(|s| t >= s) && self.until.is_none_or(|u| t <= u);
        }
        if self.grep.is_none() && self.author.is_none() {
            return Ok(ok);
        }
        let session = store.odb().session(id)?;
        if let Some(a) = &self.author {
            if self.actors.is_none() {
                self.actors = Some(search::Actors::load(store)?);
            }
            let actors = self.actors.as_mut().expect("loaded just above");
            // Always asked, so that the actor passes on to the parents.
            let actor = actors.actor(id, &session);
            ok = ok && actor.is_some_and(|x| a.is_match(&x));
        }
        if ok {
            if let Some(g) = &self.grep {
                ok = search::session_matches(store.odb(), &session, g)?;
            }
        }
        Ok(ok)
    }
}

/// The sessions `filter` keeps of the walk from `starts`, in log order,
/// each with its nearest kept ancestors as parents (a dropped session's
/// place taken by the kept sessions behind it), so that lanes join up as
/// `git log --graph` draws a filtered history.
pub fn filter_with_parents(
    store: &Store,
    starts: &[ObjectId],
    follow: Follow,
    filter: &mut LogFilter,
) -> CmdResult<Vec<graph::Node>> {
    let mut nodes = Vec::new();
    let mut kept = HashSet::new();
    for n in graph::TopoWalk::new(store, starts, follow)? {
        let n = n?;
        if filter.accepts(store, &n.id)? {
            kept.insert(n.id);
        }
        nodes.push(n);
    }
    // Ancestors come after descendants: walking backwards, each session's
    // parents already know their nearest kept sessions.
    let mut nearest: std::collections::HashMap<ObjectId, Vec<ObjectId>> = Default::default();
    let mut out = Vec::with_capacity(kept.len());
    for n in nodes.into_iter().rev() {
        let mut behind: Vec<ObjectId> = Vec::new();
        for p in &n.parents {
            for q in nearest.get(p).map(Vec::as_slice).unwrap_or(&[]) {
                if !behind.contains(q) {
                    behind.push(*q);
                }
            }
        }
        if kept.contains(&n.id) {
            nearest.insert(n.id, vec![n.id]);
            out.push(graph::Node {
                parents: behind,
                ..n
            });
        } else {
            nearest.insert(n.id, behind);
        }
    }
    out.reverse();
    Ok(out)
}

// ---- ls's filters ----

/// `ls --since/--source/--cwd/--grep`, checked before the store is opened.
#[derive(Debug)]
pub struct LsFilter {
    since: Option<i64>,
    source: Option<String>,
    cwd: Option<String>,
    grep: Option<Pattern>,
}

impl LsFilter {
    /// `None` when no filter is asked for. A relative `--cwd` is taken from
    /// the working directory.
    pub fn new(
        since: Option<&str>,
        source: Option<&str>,
        cwd: Option<&std::path::Path>,
        grep: Option<&str>,
        ignore_case: bool,
    ) -> CmdResult<Option<LsFilter>> {
        if let Some(s) = source {
            let known: Vec<&str> = Format::ALL.iter().map(|f| f.as_str()).collect();
            if s != "native" && !known.contains(&s) {
                return Err(CommandError::Usage(format!(
                    "--source takes {} or native, not '{s}'",
                    known.join(", ")
                )));
            }
        }
        let cwd = match cwd {
            Some(d) => Some(
                normalized(d)
                    .map_err(|e| CommandError::Usage(format!("--cwd {}: {e}", d.display())))?,
            ),
            None => None,
        };
        let f = LsFilter {
            since: time_arg("--since", since)?,
            source: source.map(str::to_owned),
            cwd,
            grep: grep.map(|p| pattern(p, ignore_case)).transpose()?,
        };
        let any = f.since.is_some() || f.source.is_some() || f.cwd.is_some() || f.grep.is_some();
        Ok(any.then_some(f))
    }

    /// What the conversation's record and index summary decide alone.
    pub fn accepts_record(&self, c: &ConversationInfo) -> bool {
        self.since.is_none_or(|s| c.last_activity >= s)
            && self
                .source
                .as_ref()
                .is_none_or(|s| search::conversation_source(c) == *s)
    }

    /// Keeps the conversations whose working directory lies in `--cwd` and
    /// whose title or history matches `--grep`; every history is searched
    /// at once, each message read once.
    pub fn keep(
        &self,
        store: &Store,
        list: Vec<ConversationInfo>,
    ) -> CmdResult<Vec<ConversationInfo>> {
        let mut list = list;
        if let Some(dir) = &self.cwd {
            let mut kept = Vec::with_capacity(list.len());
            for c in list {
                if search::conversation_cwd(store.odb(), &c)?
                    .is_some_and(|cwd| search::path_within(&cwd, dir))
                {
                    kept.push(c);
                }
            }
            list = kept;
        }
        if let Some(p) = &self.grep {
            let mut by_title = Vec::with_capacity(list.len());
            let mut heads = Vec::new();
            for c in &list {
                let t = c.record.title.as_deref().is_some_and(|t| p.is_match(t));
                by_title.push(t);
                if !t {
                    if let Some(h) = c.head {
                        heads.push(h);
                    }
                }
            }
            let found = search::heads_matching(store.odb(), &heads, p)?;
            let mut found = found.into_iter();
            let mut kept = Vec::with_capacity(list.len());
            for (c, t) in list.into_iter().zip(by_title) {
                let hit = t || (c.head.is_some() && found.next().unwrap_or(false));
                if hit {
                    kept.push(c);
                }
            }
            list = kept;
        }
        Ok(list)
    }
}

/// `dir` made absolute from the working directory, with `.` and `..`
/// folded away as text (symbolic links are left as the recorded paths
/// may name them).
fn normalized(dir: &std::path::Path) -> std::io::Result<String> {
    use std::path::Component;
    let abs = std::path::absolute(dir)?;
    let mut out = std::path::PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    Ok(out.to_string_lossy().into_owned())
}
