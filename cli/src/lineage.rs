//! Lineage: `log`, `merge-base`, `rev-parse`, `graph`, `show`, `diff`.
//!
//! Walks go through `sessctl_store::graph`, which reads parents and times
//! from the index and never a message body; bodies are read only for what
//! is printed (a log entry's line, `show`'s and `diff`'s messages). Every
//! revision's syntax is checked before the store is opened.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};

use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};
use sessctl_store::diff::{json_diff, Change, ChangeOp};
use sessctl_store::graph::{self, Follow, Lanes, Node, SessionGraph, TopoWalk};
use sessctl_store::index::SessionInfo;
use sessctl_store::message::{content_text, inner, role_of, user_text};
use sessctl_store::rev::RevSpec;
use sessctl_store::time::format_rfc3339_ms;
use sessctl_store::{Error, ObjectId, RefName, RefTarget, Session, Store, Usage};

use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

/// Refuses a malformed revision (exit 2) before anything is opened.
fn check_revs<'a>(revs: impl IntoIterator<Item = &'a String>) -> CmdResult {
    for r in revs {
        RevSpec::parse(r).map_err(Error::from)?;
    }
    Ok(())
}

fn resolve_all(store: &Store, revs: &[String]) -> CmdResult<Vec<ObjectId>> {
    Ok(revs
        .iter()
        .map(|r| store.resolve_rev(r))
        .collect::<Result<_, _>>()?)
}

/// Every session a ref names, `HEAD` included (`--all`).
fn all_starts(store: &Store) -> CmdResult<Vec<ObjectId>> {
    let mut out = Vec::new();
    if let Some(h) = store.resolve_ref(&RefName::Head)? {
        out.push(h);
    }
    for (_, t) in store.refs()? {
        if let RefTarget::Session(id) = t {
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    Ok(out)
}

// ---- stdout that stops at a closed pipe ----

/// Buffered stdout for long listings: once the reader has gone
/// (`sessctl log | head`), the listing stops quietly.
struct Out {
    w: BufWriter<io::StdoutLock<'static>>,
    closed: bool,
}

impl Out {
    fn new() -> Out {
        Out {
            w: BufWriter::with_capacity(64 << 10, io::stdout().lock()),
            closed: false,
        }
    }

    /// Writes `text`; false once the reader is gone.
    fn put(&mut self, text: &str) -> CmdResult<bool> {
        if self.closed {
            return Ok(false);
        }
        match self.w.write_all(text.as_bytes()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(false)
            }
            Err(e) => Err(CommandError::Failed(format!("writing to stdout: {e}"))),
        }
    }

    fn finish(mut self) -> CmdResult {
        match self.w.flush() {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            Err(e) => Err(CommandError::Failed(format!("writing to stdout: {e}"))),
        }
    }
}

// ---- what is known of a session for printing ----

/// One name of a session in a decoration.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Decoration {
    /// HEAD first, then conversations, archived ones, tags.
    rank: u8,
    /// `HEAD -> fix`, `fix`, `archive/old`, `tag: golden`.
    text: String,
    /// The same without HEAD (empty for a detached HEAD).
    name: String,
    /// The full ref names it stands for.
    refs: Vec<String>,
}

/// The refs that name each session, for `(HEAD -> fix, tag: golden)`.
struct Decorations {
    by_id: HashMap<ObjectId, Vec<Decoration>>,
}

impl Decorations {
    fn load(store: &Store) -> CmdResult<Decorations> {
        let refs = store.refs()?;
        let head = refs
            .iter()
            .find(|(n, _)| *n == RefName::Head)
            .map(|(_, t)| t.clone());
        let mut by_id: HashMap<ObjectId, Vec<Decoration>> = HashMap::new();
        if let Some(RefTarget::Session(id)) = head {
            by_id.entry(id).or_default().push(Decoration {
                rank: 0,
                text: "HEAD".into(),
                name: String::new(),
                refs: vec!["HEAD".into()],
            });
        }
        for (name, target) in &refs {
            let RefTarget::Session(id) = target else {
                continue;
            };
            let (rank, text) = match name {
                RefName::Head => continue,
                RefName::Conversation(n) => (2, n.clone()),
                RefName::Archived(n) => (3, format!("archive/{n}")),
                RefName::Tag(n) => (4, format!("tag: {n}")),
            };
            let d = if head == Some(RefTarget::Symbolic(name.clone())) {
                let label = text.clone();
                let to = match name {
                    RefName::Tag(n) => format!("tags/{n}"),
                    _ => text,
                };
                Decoration {
                    rank: 1,
                    text: format!("HEAD -> {to}"),
                    name: label,
                    refs: vec!["HEAD".into(), name.to_string()],
                }
            } else {
                Decoration {
                    rank,
                    name: text.clone(),
                    text,
                    refs: vec![name.to_string()],
                }
            };
            by_id.entry(*id).or_default().push(d);
        }
        for list in by_id.values_mut() {
            list.sort();
        }
        Ok(Decorations { by_id })
    }

    fn of(&self, id: &ObjectId) -> &[Decoration] {
        self.by_id.get(id).map_or(&[], Vec::as_slice)
    }

    /// ` (HEAD -> fix, tag: golden)`, or nothing.
    fn text(&self, id: &ObjectId) -> String {
        let names: Vec<&str> = self.of(id).iter().map(|d| d.text.as_str()).collect();
        if names.is_empty() {
            String::new()
        } else {
            format!(" ({})", names.join(", "))
        }
    }

    /// Full names, `HEAD` first: `["HEAD", "refs/heads/fix"]`.
    fn refs(&self, id: &ObjectId) -> Vec<String> {
        let mut out: Vec<String> = self.of(id).iter().flat_map(|d| d.refs.clone()).collect();
        out.sort_by_key(|r| (r != "HEAD", r.clone()));
        out
    }

    /// The names other than HEAD, for graph labels.
    fn names(&self, id: &ObjectId) -> Vec<String> {
        self.of(id)
            .iter()
            .filter(|d| !d.name.is_empty())
            .map(|d| d.name.clone())
            .collect()
    }
}

/// What the index knows of a session; for one it has not seen, the same
/// figures from the object (no preview).
fn info(store: &Store, id: &ObjectId) -> CmdResult<SessionInfo> {
    if let Some(i) = store.session_info(id)? {
        return Ok(i);
    }
    let s = store.odb().session(id)?;
    Ok(SessionInfo {
        id: *id,
        conversation: s.conversation_id(*id),
        parents: s.parents.clone(),
        status: s.status,
        created_at: s.created_at,
        messages: store.odb().history(id)?.len() as u64,
        display_messages: store.odb().display_history(id)?.len() as u64,
        usage: s.run.usage,
        duration_ms: s.run.duration_ms,
        preview: String::new(),
        preview_at: None,
        title: s.title.clone(),
        session_type: s.metadata.session_type,
    })
}

fn first_line(text: &str) -> String {
    text.trim()
        .lines()
        .next()
        .unwrap_or("")
        .trim_end()
        .to_owned()
}

/// The line a log entry shows: the title, else the first line of the last
/// user message the session added, else of its history's first one.
fn summary(store: &Store, info: &SessionInfo) -> CmdResult<String> {
    if let Some(t) = &info.title {
        return Ok(first_line(t));
    }
    let s = store.odb().session(&info.id)?;
    for m in s.messages.added.iter().rev() {
        if let Some(text) = user_text(&store.odb().blob(m)?) {
            return Ok(first_line(&text));
        }
    }
    Ok(first_line(&info.preview))
}

fn conversation_name(store: &Store, info: &SessionInfo) -> CmdResult<Option<String>> {
    Ok(store.index().conversation_name(&info.conversation)?)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn usage_text(u: &Usage) -> String {
    format!(
        "{} ({} prompt, {} completion), {}",
        plural(u.total_tokens, "token", "tokens"),
        u.prompt_tokens,
        u.completion_tokens,
        plural(u.requests, "request", "requests")
    )
}

fn usage_json(u: &Usage) -> Value {
    json!({"total_tokens": u.total_tokens, "prompt_tokens": u.prompt_tokens,
           "completion_tokens": u.completion_tokens, "requests": u.requests})
}

fn hexes(ids: &[ObjectId]) -> Vec<String> {
    ids.iter().map(ObjectId::to_hex).collect()
}

// ---- log ----

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Where to start (default: HEAD): conversation names, tags, ids or
    /// prefixes, with ~N and ^N steps (fix~2, HEAD^2).
    #[arg(value_name = "REV")]
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
    /// One JSON array of objects (see README, "Lineage JSON").
    #[arg(long, conflicts_with_all = ["oneline", "graph"])]
    json: bool,
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
    write_log(&store, &starts, follow, args.max_count, format)
}

fn write_log(
    store: &Store,
    starts: &[ObjectId],
    follow: Follow,
    limit: Option<usize>,
    format: LogFormat,
) -> CmdResult {
    let decorations = Decorations::load(store)?;
    let walk = TopoWalk::new(store, starts, follow)?.take(limit.unwrap_or(usize::MAX));
    let mut out = Out::new();
    let mut lanes = Lanes::new();
    let mut first = true;
    if format.json && !out.put("[")? {
        return out.finish();
    }
    for node in walk {
        let node = node?;
        let text = if format.json {
            let v = entry_json(store, &decorations, &node.id)?;
            format!("{}{v}", if first { "" } else { "," })
        } else if format.oneline {
            let line = oneline(store, &decorations, &node.id)?;
            if format.graph {
                let rows = lanes.next(node.id, &node.parents);
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
            let lines = entry_lines(store, &decorations, &node.id)?;
            let mut t = String::new();
            if format.graph {
                let sep = lanes.passing();
                let rows = lanes.next(node.id, &node.parents);
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
        if !out.put(&text)? {
            return out.finish();
        }
    }
    if format.json {
        out.put("]\n")?;
    }
    out.finish()
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
    let i = info(store, id)?;
    Ok(json!({
        "id": id.to_hex(),
        "parents": hexes(&i.parents),
        "conversation": i.conversation.to_hex(),
        "conversation_name": conversation_name(store, &i)?,
        "status": i.status.as_str(),
        "created_at": i.created_at,
        "messages": i.messages,
        "usage": usage_json(&i.usage),
        "title": i.title,
        "summary": summary(store, &i)?,
        "refs": deco.refs(id),
    }))
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
    /// Where to start (default: every ref and HEAD).
    #[arg(value_name = "REV")]
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

// ---- merge-base, rev-parse ----

#[derive(Debug, Args)]
pub struct MergeBaseArgs {
    /// Print every best common ancestor, newest first, not only the newest.
    #[arg(long, conflicts_with = "is_ancestor")]
    all: bool,
    /// Print nothing; exit 0 if A is B or one of its ancestors, else 1.
    #[arg(long)]
    is_ancestor: bool,
    #[arg(value_name = "A")]
    a: String,
    #[arg(value_name = "B")]
    b: String,
}

pub fn merge_base(ctx: &Ctx, args: MergeBaseArgs) -> CmdResult {
    check_revs([&args.a, &args.b])?;
    let store = ctx.open_store_read()?;
    let a = store.resolve_rev(&args.a)?;
    let b = store.resolve_rev(&args.b)?;
    if args.is_ancestor {
        return if graph::is_ancestor(&store, a, b)? {
            Ok(())
        } else {
            Err(CommandError::Silent(1))
        };
    }
    let mut bases = graph::merge_bases_all(&store, a, b)?;
    if bases.is_empty() {
        return Err(CommandError::Silent(1));
    }
    if !args.all {
        bases.truncate(1);
    }
    let text: String = bases.iter().map(|b| format!("{b}\n")).collect();
    print(&text)
}

#[derive(Debug, Args)]
pub struct RevParseArgs {
    /// Revisions: names, tags, ids or prefixes, with ~N and ^N steps.
    #[arg(value_name = "REV", required = true)]
    revs: Vec<String>,
}

pub fn rev_parse(ctx: &Ctx, args: RevParseArgs) -> CmdResult {
    check_revs(&args.revs)?;
    let store = ctx.open_store_read()?;
    let ids = resolve_all(&store, &args.revs)?;
    let text: String = ids.iter().map(|i| format!("{i}\n")).collect();
    print(&text)
}

// ---- show ----

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The session (default: HEAD).
    #[arg(value_name = "REV", default_value = "HEAD")]
    rev: String,
    /// Show the whole history, not only the messages this session added.
    #[arg(long)]
    messages: bool,
    /// One JSON object (see README, "Lineage JSON").
    #[arg(long)]
    json: bool,
}

/// A message's role and text, as people read it.
fn message_text(v: &Value) -> (String, String) {
    let role = role_of(v).unwrap_or("message").to_owned();
    let text = inner(v)
        .get("content")
        .and_then(content_text)
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| v.to_string());
    (role, text)
}

/// The messages at `from..` of a history, with their positions.
fn listed(
    store: &Store,
    history: &[ObjectId],
    from: usize,
) -> CmdResult<Vec<(usize, ObjectId, Value)>> {
    history[from.min(history.len())..]
        .iter()
        .enumerate()
        .map(|(k, m)| Ok((from + k, *m, store.odb().blob(m)?)))
        .collect()
}

pub fn show(ctx: &Ctx, args: ShowArgs) -> CmdResult {
    check_revs([&args.rev])?;
    let store = ctx.open_store_read()?;
    let id = store.resolve_rev(&args.rev)?;
    let s = store.odb().session(&id)?;
    let history = store.odb().history(&id)?;
    let from = if args.messages {
        0
    } else {
        s.messages.base as usize
    };
    let messages = listed(&store, &history, from)?;
    let deco = Decorations::load(&store)?;
    let name = store.index().conversation_name(&s.conversation_id(id))?;
    if args.json {
        let mut v = crate::plumbing::session_json(&id, &s);
        v["conversation_name"] = json!(name);
        v["refs"] = json!(deco.refs(&id));
        v["history_length"] = json!(history.len());
        v["shown_messages"] = Value::Array(
            messages
                .iter()
                .map(|(k, m, value)| json!({"index": k, "id": m.to_hex(), "value": value}))
                .collect(),
        );
        return print(&format!("{v}\n"));
    }
    print(&show_text(
        &id,
        &s,
        name,
        &deco,
        history.len(),
        &messages,
        args.messages,
    ))
}

fn show_text(
    id: &ObjectId,
    s: &Session,
    name: Option<String>,
    deco: &Decorations,
    history_len: usize,
    messages: &[(usize, ObjectId, Value)],
    whole: bool,
) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "session {id}{}", deco.text(id));
    for p in &s.parents {
        let _ = writeln!(t, "Parent:       {p}");
    }
    let conv = s.conversation_id(*id);
    match name {
        Some(n) => {
            let _ = writeln!(t, "Conversation: {n} ({conv})");
        }
        None => {
            let _ = writeln!(t, "Conversation: {conv}");
        }
    }
    let _ = writeln!(t, "Date:         {}", format_rfc3339_ms(s.created_at));
    let _ = writeln!(t, "Status:       {}", s.status);
    if let Some(title) = &s.title {
        let _ = writeln!(t, "Title:        {title}");
    }
    let m = &s.metadata;
    let _ = writeln!(t, "Type:         {}", m.session_type.as_str());
    if let Some(v) = &m.transport {
        let _ = writeln!(t, "Transport:    {v}");
    }
    if let Some(v) = &m.preset_id {
        let _ = writeln!(t, "Preset:       {v}");
    }
    if let Some(v) = &m.spawned_by {
        let _ = writeln!(t, "Spawned by:   {v}");
    }
    for (k, v) in &m.extra {
        let _ = writeln!(t, "Metadata:     {k} = {v}");
    }
    let _ = writeln!(
        t,
        "Run:          {} ms, {}",
        s.run.duration_ms,
        plural(s.run.usage.requests, "request", "requests")
    );
    let u = &s.run.usage;
    let _ = writeln!(
        t,
        "Usage:        {} ({} prompt, {} completion)",
        plural(u.total_tokens, "token", "tokens"),
        u.prompt_tokens,
        u.completion_tokens
    );
    if let Some(v) = &s.context_state {
        let _ = writeln!(t, "Context:      {v}");
    }
    if let Some(v) = &s.environment_state {
        let _ = writeln!(t, "Environment:  {v}");
    }
    if let Some(c) = &s.compaction {
        let _ = writeln!(
            t,
            "Compaction:   {} of {} summarised in {}",
            plural(c.messages, "message", "messages"),
            c.session,
            c.summary
        );
    }
    let _ = writeln!(
        t,
        "Messages:     {} kept from the parent, {} added, {} in all",
        s.messages.base,
        s.messages.added.len(),
        history_len
    );
    if !messages.is_empty() {
        let _ = writeln!(t);
        let _ = writeln!(t, "{}:", if whole { "History" } else { "Added" });
    }
    for (k, _, v) in messages {
        let (role, text) = message_text(v);
        let _ = writeln!(t, "[{k}] {role}");
        for line in text.lines() {
            let _ = writeln!(t, "{}", format!("    {line}").trim_end());
        }
    }
    t
}

// ---- diff ----

#[derive(Debug, Args)]
pub struct DiffArgs {
    #[arg(value_name = "A")]
    a: String,
    #[arg(value_name = "B")]
    b: String,
    /// One JSON object (see README, "Lineage JSON").
    #[arg(long)]
    json: bool,
}

/// What `diff` compares besides messages: the title, the metadata (named
/// fields and extra; absent ones left out) and the two states' values.
fn state_docs(store: &Store, s: &Session) -> CmdResult<[(&'static str, Value); 4]> {
    let m = &s.metadata;
    let mut meta = Map::new();
    meta.insert("session_type".into(), json!(m.session_type.as_str()));
    if let Some(v) = &m.transport {
        meta.insert("transport".into(), json!(v));
    }
    if let Some(v) = &m.preset_id {
        meta.insert("preset_id".into(), json!(v));
    }
    if let Some(v) = &m.spawned_by {
        meta.insert("spawned_by".into(), json!(v.to_hex()));
    }
    if !m.extra.is_empty() {
        meta.insert(
            "extra".into(),
            Value::Object(
                m.extra
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
        );
    }
    let blob = |b: &Option<ObjectId>| -> CmdResult<Value> {
        Ok(match b {
            Some(id) => store.odb().blob(id)?,
            None => Value::Null,
        })
    };
    Ok([
        ("title", json!(s.title)),
        ("metadata", Value::Object(meta)),
        ("context_state", blob(&s.context_state)?),
        ("environment_state", blob(&s.environment_state)?),
    ])
}

pub fn diff(ctx: &Ctx, args: DiffArgs) -> CmdResult {
    check_revs([&args.a, &args.b])?;
    let store = ctx.open_store_read()?;
    let a = store.resolve_rev(&args.a)?;
    let b = store.resolve_rev(&args.b)?;
    let bases = graph::merge_bases_all(&store, a, b)?;
    let (sa, sb) = (store.odb().session(&a)?, store.odb().session(&b)?);
    let (ha, hb) = (store.odb().history(&a)?, store.odb().history(&b)?);
    let common = ha.iter().zip(&hb).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (listed(&store, &ha, common)?, listed(&store, &hb, common)?);
    let first_at = |h: &[ObjectId]| -> HashMap<ObjectId, usize> {
        let mut at = HashMap::new();
        for (k, m) in h.iter().enumerate() {
            at.entry(*m).or_insert(k);
        }
        at
    };
    let (at_a, at_b) = (first_at(&ha), first_at(&hb));
    let only = |h: &[ObjectId], other: &HashMap<ObjectId, usize>| -> Vec<ObjectId> {
        let mut seen = HashSet::new();
        h.iter()
            .filter(|m| !other.contains_key(m) && seen.insert(**m))
            .copied()
            .collect()
    };
    let (only_a, only_b) = (only(&ha, &at_b), only(&hb, &at_a));
    let (da, db) = (state_docs(&store, &sa)?, state_docs(&store, &sb)?);
    let changes: Vec<(&str, Vec<Change>)> = da
        .iter()
        .zip(&db)
        .map(|((k, x), (_, y))| (*k, json_diff(x, y)))
        .collect();
    if args.json {
        let side = |ms: &[(usize, ObjectId, Value)], other: &HashMap<ObjectId, usize>| -> Value {
            Value::Array(
                ms.iter()
                    .map(|(k, m, v)| {
                        json!({"index": k, "id": m.to_hex(), "in_other": other.get(m), "value": v})
                    })
                    .collect(),
            )
        };
        let mut v = json!({
            "a": a.to_hex(),
            "b": b.to_hex(),
            "merge_base": bases.first().map(ObjectId::to_hex),
            "merge_bases": hexes(&bases),
            "common_prefix": common,
            "messages": {"a": side(&ma, &at_b), "b": side(&mb, &at_a)},
            "only_in_a": hexes(&only_a),
            "only_in_b": hexes(&only_b),
        });
        for (k, c) in &changes {
            v[*k] = Value::Array(c.iter().map(Change::to_json).collect());
        }
        return print(&format!("{v}\n"));
    }
    let mut t = String::new();
    let _ = writeln!(t, "a:          {a}");
    let _ = writeln!(t, "b:          {b}");
    match bases.first() {
        Some(base) => {
            let _ = writeln!(t, "merge base: {base}");
        }
        None => {
            let _ = writeln!(t, "merge base: none (no common history)");
        }
    }
    let _ = writeln!(
        t,
        "common:     {}; then a has {}, b has {}",
        plural(common as u64, "message", "messages"),
        ma.len(),
        mb.len()
    );
    if !ma.is_empty() || !mb.is_empty() {
        let _ = writeln!(t);
    }
    for (sign, ms, other, other_name) in [("-", &ma, &at_b, "b"), ("+", &mb, &at_a, "a")] {
        for (k, m, v) in ms {
            let (role, text) = message_text(v);
            let also = match other.get(m) {
                Some(j) => format!(" (also in {other_name} at [{j}])"),
                None => String::new(),
            };
            let _ = writeln!(t, "{sign} [{k}] {role}: {}{also}", first_line(&text));
        }
    }
    for (k, c) in &changes {
        if c.is_empty() {
            continue;
        }
        let _ = writeln!(t);
        let _ = writeln!(t, "{k}:");
        for ch in c {
            let path = if ch.path.is_empty() {
                "(value)"
            } else {
                &ch.path
            };
            let show = |v: &Option<Value>| v.as_ref().map(Value::to_string).unwrap_or_default();
            let _ = match ch.op {
                ChangeOp::Added => writeln!(t, "  + {path}: {}", show(&ch.new)),
                ChangeOp::Removed => writeln!(t, "  - {path}: {}", show(&ch.old)),
                ChangeOp::Changed => {
                    writeln!(t, "  ~ {path}: {} -> {}", show(&ch.old), show(&ch.new))
                }
            };
        }
    }
    print(&t)
}
