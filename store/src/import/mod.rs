//! Import of other agents' session files: Claude Code, Codex, OpenAI chat
//! JSON and SWE-agent trajectories.
//!
//! Each format's parser turns its files into [`Tree`]s: one per source
//! conversation, each a tree of [`Node`]s (a message exactly as the source
//! wrote it, its source id, its parent's). The builder (`builder.rs`) turns a tree into
//! sessions the same way for every format:
//!
//! - a session starts at a root, at a user prompt, at a compaction boundary,
//!   at every child of a node with several children (a fork point), where a
//!   subagent's lines begin, and after the last message of a session the
//!   store already holds for this conversation, found by that message, the
//!   history length and the compactions before it (so a longer snapshot of a
//!   file appends to what an earlier import wrote instead of rewriting it,
//!   and a line repeated after a compaction is not taken for its twin);
//! - the main line is the branch holding the newest leaf; each other child of
//!   a fork point starts a conversation `<name>.fork-<k>`; subagents get a tag
//!   `<name>.agent-<key>` so their sessions stay reachable, and carry their
//!   spawner's conversation id.
//!
//! `write.rs` then writes each tree's sessions onto what earlier imports of
//! the same source wrote; this file holds the types, reading the files,
//! format detection ([`detect`]) and the entry points.
//!
//! # Live files
//!
//! Files are imported while their agent writes them, so that importing a
//! file at any prefix of its lines writes only sessions importing it whole
//! writes too, and every ref move is a fast-forward:
//!
//! - a last line without its newline that does not parse is not written
//!   yet: left out, noted in [`ImportReport::unfinished_lines`];
//! - each parser marks the last message of a finished turn
//!   ([`Node::turn_end`]; a session ends after it) and a message whose turn
//!   goes on ([`Node::open`]); the builder holds back the session holding an
//!   open message and every session after it ([`ImportReport::held_back`]),
//!   unless [`ImportOptions::finished`];
//! - a ref the import does not fast-forward is never moved: one the user
//!   moved elsewhere stays theirs, one an import wrote that the file no
//!   longer continues (rewritten since) stays as imported, and the import
//!   follows `<name>.imported` ([`Redirect`]); an archived or removed
//!   conversation is left so (objects-format.md, "Imported sessions");
//! - a watcher catching a file up again and again goes on from where its
//!   last catch-up left ([`tail`]): it parses and writes only the new
//!   lines, with the same result as importing the file whole.
//!
//! This module must never use the clock: every time comes from the source, so
//! importing the same files twice yields the same ids, and a second import
//! writes nothing at all.

pub mod claude_code;
pub mod codex;
pub mod openai;
pub mod swe_agent;

mod builder;
pub mod tail;
mod write;

use write::import_trees;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::object::Usage;
use crate::store::Store;

/// The formats `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    ClaudeCode,
    Codex,
    OpenAi,
    SweAgent,
}

impl Format {
    pub const ALL: [Format; 4] = [
        Format::ClaudeCode,
        Format::Codex,
        Format::OpenAi,
        Format::SweAgent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::ClaudeCode => "claude-code",
            Format::Codex => "codex",
            Format::OpenAi => "openai",
            Format::SweAgent => "swe-agent",
        }
    }

    /// What a file of this format is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Format::ClaudeCode => "a Claude Code session log (claude-code)",
            Format::Codex => "a Codex rollout (codex)",
            Format::OpenAi => "OpenAI chat messages (openai)",
            Format::SweAgent => "a SWE-agent trajectory (swe-agent)",
        }
    }

    pub fn parse(s: &str) -> Option<Format> {
        Format::ALL.into_iter().find(|f| f.as_str() == s)
    }

    /// Whether a file found while walking a directory is one of this
    /// format's (a file named on the command line is always read).
    fn accepts(self, path: &Path) -> bool {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match self {
            Format::ClaudeCode | Format::Codex => name.ends_with(".jsonl"),
            Format::OpenAi => name.ends_with(".json") || name.ends_with(".jsonl"),
            Format::SweAgent => name.ends_with(".traj"),
        }
    }
}

/// One message of a source conversation.
#[derive(Debug, Clone)]
pub struct Node {
    /// The source's id for it (a Claude Code uuid, a line number, ...).
    pub id: String,
    /// The parent's source id; `None` for a root. For a compaction boundary,
    /// the last node before it (its history is cut there).
    pub parent: Option<String>,
    /// The message as the source wrote it.
    pub message: Value,
    /// The source lines it is, exactly as written (without their `\n`),
    /// when `message` is what they read as (objects-format.md, "raw"): one
    /// line, or the lines of one response merged into it. The import keeps
    /// them byte for byte in a raw object. `None` for a message that is no
    /// line of its own (an element of a JSON document).
    pub raw: Option<Vec<String>>,
    /// Milliseconds since the Unix epoch, from the source; 0 when it has none.
    pub timestamp: i64,
    /// Real human text (not a tool result): starts a session.
    pub user_prompt: bool,
    /// A compaction boundary: starts a session with base 0.
    pub compaction: bool,
    /// For a subagent's messages, the subagent's key (Claude Code agentId).
    pub subagent: Option<String>,
    /// Entries of the source that are not messages and came just before this
    /// node; kept in the session's metadata (`extra.events`).
    pub events: Vec<SourceLine>,
    /// Source lines merged into this message (`extra.merged_lines`, only
    /// where the message is kept as a blob: a raw object holds them).
    pub merged: Vec<Value>,
    /// What producing this message cost, when the source says.
    pub usage: Option<Usage>,
    /// Of its prompt tokens, those read from the provider's prompt cache and
    /// those written to it (0 when the source does not say).
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// The model that wrote it, when the source says.
    pub model: Option<String>,
    /// The last message of a finished turn: a session ends after it, so that
    /// a later snapshot of the file appends the next turn as sessions of its
    /// own (see "Live files" in the module docs).
    pub turn_end: bool,
    /// A message the source is still writing (its turn has not ended): it
    /// and the rest of its session are held back until a later import.
    pub open: bool,
    /// File and line it came from, for reports.
    pub file: String,
    /// The bytes of its file its lines take (from the first's start to the
    /// last's end), when the parser knows them and they are in one file: a
    /// catch-up goes on after the last written node's (`tail.rs`).
    pub(crate) span: Option<(usize, usize)>,
}

impl Node {
    pub fn new(id: String, parent: Option<String>, message: Value, file: &str) -> Node {
        Node {
            id,
            parent,
            message,
            raw: None,
            timestamp: 0,
            user_prompt: false,
            compaction: false,
            subagent: None,
            events: Vec::new(),
            merged: Vec::new(),
            usage: None,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            model: None,
            turn_end: false,
            open: false,
            file: file.to_owned(),
            span: None,
        }
    }
}

/// A source entry that is not a message: its value and, from a JSON-lines
/// file, its line exactly as written, which the import keeps (as a JSON
/// string, byte for byte) where the conversation keeps raw messages.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceLine {
    pub value: Value,
    pub text: Option<String>,
}

impl SourceLine {
    pub fn new(value: Value, text: Option<&str>) -> SourceLine {
        SourceLine {
            value,
            text: text.map(str::to_owned),
        }
    }

    /// How a session's `extra.events` or a record's `trailing_events` keep
    /// it: the line's text when `exact` and known, else its value.
    pub(crate) fn kept(&self, exact: bool) -> Value {
        match (&self.text, exact) {
            (Some(t), true) => Value::String(t.clone()),
            _ => self.value.clone(),
        }
    }
}

/// A kept source entry as its value: an entry kept as its line's exact text
/// (a JSON string, see [`SourceLine`]) parsed, one kept as a value as it is.
/// A text that does not parse reads as itself.
pub fn event_value(kept: &Value) -> std::borrow::Cow<'_, Value> {
    match kept {
        Value::String(s) => match parse_json(s) {
            Ok(v) => std::borrow::Cow::Owned(v),
            Err(_) => std::borrow::Cow::Borrowed(kept),
        },
        v => std::borrow::Cow::Borrowed(v),
    }
}

/// One source conversation.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// The conversation's name in the store.
    pub name: String,
    /// The source's id for the conversation (`extra.source_session`).
    pub source_session: Option<String>,
    /// Nodes in source order.
    pub nodes: Vec<Node>,
    pub title: Option<String>,
    /// The conversation record's metadata.
    pub metadata: BTreeMap<String, Value>,
    /// Entries after the last message of its files, kept in the record's
    /// `trailing_events`.
    pub trailing: Vec<SourceLine>,
    /// Subagent key -> the source id of the message that spawned it.
    pub spawners: BTreeMap<String, String>,
    /// Metadata of the first session only (SWE-agent's `info`, ...).
    pub root_extra: BTreeMap<String, Value>,
    /// The conversation this one was forked from (Codex `forked_from_id`),
    /// when its copy of the source's messages should be shared, not stored
    /// again. Only for linear trees.
    pub forked_from: Option<String>,
}

/// A line that could not be imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub file: PathBuf,
    /// 1-based; 0 when the whole file was refused.
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    /// `FILE:LINE: reason`, or `FILE: reason` for a whole file.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            0 => write!(f, "{}: {}", self.file.display(), self.reason),
            n => write!(f, "{}:{n}: {}", self.file.display(), self.reason),
        }
    }
}

/// What an import did.
#[derive(Debug, Clone, Default)]
pub struct ImportReport {
    pub files: usize,
    /// Sessions the imported files make.
    pub sessions_total: usize,
    /// Of those, sessions the store did not have.
    pub sessions_written: usize,
    pub messages: usize,
    pub forks: usize,
    pub compactions: usize,
    pub conversations: usize,
    pub objects_written: usize,
    pub refs_moved: usize,
    pub skipped: Vec<Skipped>,
    /// (file, parent id) of entries whose parent no line has; kept as roots.
    pub dangling: Vec<(String, String)>,
    pub bytes_read: u64,
    /// Source lines parsed (a catch-up parses only the lines after the
    /// last it wrote).
    pub lines_parsed: usize,
    /// Objects the import made and looked up in the store (a catch-up
    /// makes only the new sessions' ones).
    pub objects_considered: usize,
    /// Whether a catch-up went on from where the last one left (reading
    /// only the new lines) rather than reading its files whole.
    pub resumed: bool,
    /// The conversation HEAD was pointed at: HEAD named nothing usable, so
    /// it now names the most recently active conversation the import wrote.
    pub head: Option<String>,
    /// Files whose last line the agent is still writing (no newline yet, not
    /// JSON yet): that line is left for a later import.
    pub unfinished_lines: Vec<PathBuf>,
    /// Messages of turns that have not ended yet, left for a later import
    /// (see "Live files" in the module docs).
    pub held_back: usize,
    /// (name, ref the import follows instead, why): conversations whose
    /// ref the import would not fast-forward, whose import goes on under
    /// `<name>.imported`.
    pub redirected: Vec<(String, String, Redirect)>,
    /// (name, why): conversations the user archived or removed, which the
    /// import leaves as they are.
    pub left_alone: Vec<(String, String)>,
}

impl ImportReport {
    /// The report as JSON (the CLI's `--json`).
    pub fn to_json(&self) -> Value {
        json!({
            "files": self.files,
            "sessions_total": self.sessions_total,
            "sessions_written": self.sessions_written,
            "messages": self.messages,
            "forks": self.forks,
            "compactions": self.compactions,
            "conversations": self.conversations,
            "objects_written": self.objects_written,
            "refs_moved": self.refs_moved,
            "bytes_read": self.bytes_read,
            "lines_parsed": self.lines_parsed,
            "objects_considered": self.objects_considered,
            "resumed": self.resumed,
            "head": self.head,
            "skipped": self.skipped.iter().map(|s| json!({
                "file": s.file.display().to_string(), "line": s.line, "reason": s.reason,
            })).collect::<Vec<_>>(),
            "dangling": self.dangling.iter().map(|(f, u)| json!({"file": f, "parent": u}))
                .collect::<Vec<_>>(),
            "unfinished_lines": self.unfinished_lines.iter()
                .map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "held_back": self.held_back,
            "redirected": self.redirected.iter()
                .map(|(n, r, why)| json!({"name": n, "follows": r, "why": why.as_str()}))
                .collect::<Vec<_>>(),
            "left_alone": self.left_alone.iter().map(|(n, why)| json!({"name": n, "why": why}))
                .collect::<Vec<_>>(),
        })
    }
}

/// Why an import follows `<name>.imported` instead of a conversation's
/// own ref, which does not lie on the line the import would move it to
/// (objects-format.md, "Imported sessions").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirect {
    /// The user moved the ref there: a local commit, fork or compaction, or
    /// a conversation of that name made by hand.
    Moved,
    /// An import put the ref there, and the source no longer continues it:
    /// the file was rewritten, or a turn an import with
    /// [`ImportOptions::finished`] took went on otherwise.
    Rewritten,
}

impl Redirect {
    /// Its name in the report's JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Redirect::Moved => "moved",
            Redirect::Rewritten => "rewritten",
        }
    }
}

/// How to import.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Write without syncing at all (tests, throwaway stores). By default
    /// every batch but the last is written unsynced and the last is synced,
    /// which makes them all durable with one `fdatasync`.
    pub no_sync: bool,
    /// Told of the files read (N of M) and the conversations written.
    pub progress: Option<std::sync::Arc<dyn crate::progress::Progress>>,
    /// The files are finished: import a last turn that nothing marks as
    /// ended too (an agent that never wrote its end). It moves refs as any
    /// import does: only by fast-forwards.
    pub finished: bool,
}

/// Reads `paths` (files, or directories walked recursively for the
/// format's files), in sorted order, and imports them. A file named in
/// `paths` that is not in `format` is refused before anything is written
/// ([`Error::ImportFormat`]); one found in a directory is skipped and
/// reported.
pub fn import_paths(
    store: &Store,
    format: Format,
    paths: &[PathBuf],
    opts: &ImportOptions,
) -> Result<ImportReport> {
    import_paths_as(store, Some(format), paths, opts)
}

/// [`import_paths`] with the format of each file detected when `format` is
/// `None` (directories are then walked for `*.jsonl`, `*.json` and
/// `*.traj`). A file named in `paths` that matches no format, or not
/// `format`, is refused before anything is written
/// ([`Error::ImportFormat`]); one found in a directory is reported in
/// `skipped` (line 0) and the rest imported. An empty file is read as
/// nothing.
pub fn import_paths_as(
    store: &Store,
    format: Option<Format>,
    paths: &[PathBuf],
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let mut files = Vec::new();
    let mut named = std::collections::HashSet::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        if meta.is_dir() {
            walk(p, format, &mut files)?;
        } else {
            files.push(p.clone());
            named.insert(p.clone());
        }
    }
    files.sort();
    files.dedup();
    let mut report = ImportReport::default();
    let mut groups: BTreeMap<usize, Vec<SourceFile>> = BTreeMap::new();
    // A file named on the command line in the wrong format refuses the
    // import before anything is written; one found in a directory is
    // skipped and reported, and the rest imported.
    let mut refused = Vec::new();
    if let Some(p) = &opts.progress {
        p.phase("reading files", Some(files.len() as u64));
    }
    for f in &files {
        if let Some(p) = &opts.progress {
            p.advance(1);
        }
        let bytes = std::fs::read(f).map_err(|e| Error::io(f, e))?;
        report.files += 1;
        report.bytes_read += bytes.len() as u64;
        let src = SourceFile {
            path: f.clone(),
            text: String::from_utf8_lossy(&bytes).into_owned(),
        };
        let wrong = |found: String| Error::ImportFormat {
            path: f.clone(),
            expected: format.map(|f| f.as_str().to_owned()),
            found,
        };
        let found = match detect(&src) {
            Detected::Empty => match format {
                Some(f) => f,
                None => continue,
            },
            Detected::Format(found) if format.is_none_or(|f| f == found) => found,
            // Nothing whole yet: as the format named, its parser leaves the
            // line for later.
            Detected::Unfinished if format.is_some() => format.expect("matched is_some"),
            Detected::Unfinished => {
                refused.push((
                    f,
                    wrong("a first line not written whole yet: its format cannot be told".into()),
                ));
                continue;
            }
            Detected::Format(found) => {
                refused.push((f, wrong(found.describe().to_owned())));
                continue;
            }
            Detected::Unknown(what) => {
                refused.push((f, wrong(what)));
                continue;
            }
        };
        let k = Format::ALL
            .iter()
            .position(|&f| f == found)
            .expect("ALL holds every format");
        groups.entry(k).or_default().push(src);
    }
    for (f, e) in refused {
        if named.contains(f) {
            return Err(e);
        }
        let reason = e.to_string();
        let reason = reason
            .strip_prefix(&format!("{}: ", f.display()))
            .unwrap_or(&reason)
            .to_owned();
        report.skipped.push(Skipped {
            file: f.clone(),
            line: 0,
            reason,
        });
    }
    // One phase over every group, so that its count covers the whole
    // import: each group's own count (conversations) is scaled to its share
    // of the files.
    let overall = opts.progress.clone().map(|inner| {
        let files = groups.values().map(|g| g.len() as u64).sum();
        inner.phase("importing files", Some(files));
        std::sync::Arc::new(Overall {
            inner,
            state: std::sync::Mutex::new(OverallState::default()),
        })
    });
    let mut group_opts = opts.clone();
    if let Some(o) = &overall {
        group_opts.progress = Some(o.clone());
    }
    for (k, sources) in groups {
        if let Some(o) = &overall {
            o.next_group(sources.len() as u64);
        }
        report = import_sources(store, Format::ALL[k], &sources, &group_opts, report)?;
    }
    Ok(report)
}

/// See [`import_paths_as`]: one format group's progress, in files of the
/// whole import.
#[derive(Debug)]
struct Overall {
    inner: std::sync::Arc<dyn crate::progress::Progress>,
    state: std::sync::Mutex<OverallState>,
}

#[derive(Debug, Default)]
struct OverallState {
    /// Files of the groups before this one.
    base: u64,
    /// This group's files.
    files: u64,
    /// This group's own total, and how much of it is done.
    total: u64,
    done: u64,
    /// What the display shows.
    shown: u64,
}

impl Overall {
    /// The next group, of `files` files, begins: the last one is done.
    fn next_group(&self, files: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.base += s.files;
            s.files = files;
            s.total = 0;
            s.done = 0;
            self.show(&mut s);
        }
    }

    fn show(&self, s: &mut OverallState) {
        let within = (s.done.min(s.total) * s.files)
            .checked_div(s.total)
            .unwrap_or(0);
        let target = s.base + within;
        if target > s.shown {
            self.inner.advance(target - s.shown);
            s.shown = target;
        }
    }
}

impl crate::progress::Progress for Overall {
    fn phase(&self, _name: &str, total: Option<u64>) {
        // A retried batch starts its count again; the display never goes
        // back.
        if let Ok(mut s) = self.state.lock() {
            s.total = total.unwrap_or(0);
            s.done = 0;
        }
    }

    fn advance(&self, n: u64) {
        if let Ok(mut s) = self.state.lock() {
            s.done += n;
            self.show(&mut s);
        }
    }
}

/// What a file looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detected {
    /// Nothing but blank lines.
    Empty,
    Format(Format),
    /// One line of JSON, not written whole yet: nothing tells its format.
    Unfinished,
    /// In no format import reads: what it looks like instead.
    Unknown(String),
}

/// Detects a file's format from its content: the first line that is JSON
/// (a JSONL format), else the whole text (a single JSON document). A
/// trajectory or chat file still being written (its JSON ends early) is
/// told by its name.
pub fn detect(src: &SourceFile) -> Detected {
    let text = src.text.trim_start_matches('\u{feff}');
    if text.trim().is_empty() {
        return Detected::Empty;
    }
    let mut first_json = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()).take(64) {
        if let Ok(v) = serde_json::from_str::<Value>(line) {
            first_json = Some(v);
            break;
        }
    }
    if let Some(v) = &first_json {
        if let Some(f) = line_format(v) {
            return Detected::Format(f);
        }
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) => match document_format(&v) {
            Some(f) => Detected::Format(f),
            None => Detected::Unknown(shape(&v)),
        },
        Err(e) if e.is_eof() => {
            let name = src.name();
            if name.ends_with(".traj") {
                Detected::Format(Format::SweAgent)
            } else if name.ends_with(".json") {
                Detected::Format(Format::OpenAi)
            } else if first_json.is_none() && !text.ends_with('\n') && !text.contains('\n') {
                Detected::Unfinished
            } else {
                Detected::Unknown("JSON that ends early".to_owned())
            }
        }
        Err(_) => match &first_json {
            Some(v) => Detected::Unknown(format!("JSON lines of another kind ({})", shape(v))),
            None => Detected::Unknown("text, not JSON".to_owned()),
        },
    }
}

/// The JSONL format one line belongs to.
fn line_format(v: &Value) -> Option<Format> {
    let ty = v.get("type").and_then(Value::as_str);
    match v {
        Value::Object(o) => {
            if ty.is_some() && o.get("payload").is_some_and(Value::is_object) {
                return Some(Format::Codex);
            }
            let claude_type = matches!(
                ty,
                Some(
                    "user"
                        | "assistant"
                        | "system"
                        | "summary"
                        | "file-history-snapshot"
                        | "queue-operation"
                        | "progress"
                )
            );
            if claude_type
                && (o.contains_key("sessionId")
                    || o.contains_key("uuid")
                    || o.contains_key("leafUuid")
                    || o.contains_key("messageId"))
            {
                return Some(Format::ClaudeCode);
            }
            if o.get("messages").is_some_and(Value::is_array) {
                return Some(Format::OpenAi);
            }
            None
        }
        Value::Array(a) if !a.is_empty() && a.iter().all(is_chat_message) => Some(Format::OpenAi),
        _ => None,
    }
}

/// The single-document format a whole file belongs to.
fn document_format(v: &Value) -> Option<Format> {
    if v.get("history").is_some_and(Value::is_array) {
        return Some(Format::SweAgent);
    }
    if v.get("messages").is_some_and(Value::is_array) {
        return Some(Format::OpenAi);
    }
    match v {
        Value::Array(a) if a.iter().all(is_chat_message) => Some(Format::OpenAi),
        _ => None,
    }
}

fn is_chat_message(m: &Value) -> bool {
    m.get("role").is_some_and(Value::is_string)
}

/// A few words on a JSON value's shape, for an error.
fn shape(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let keys: Vec<&str> = o.keys().take(6).map(String::as_str).collect();
            if keys.is_empty() {
                "an empty JSON object".to_owned()
            } else if is_chat_message(v) {
                "one chat message a line (a conversation needs a line of messages)".to_owned()
            } else {
                format!("JSON objects with keys {}", keys.join(", "))
            }
        }
        Value::Array(_) => "a JSON array of something other than chat messages".to_owned(),
        Value::String(_) => "a JSON string".to_owned(),
        Value::Number(_) => "a JSON number".to_owned(),
        Value::Bool(_) | Value::Null => "a JSON scalar".to_owned(),
    }
}

/// How many times an import starts over after another process moved a ref
/// it was moving (two hooks importing one transcript at once).
const CAS_RETRIES: usize = 8;

/// Imports files already read (`report` counts what reading them found):
/// the path every import takes after reading, and the one fuzzing drives.
///
/// A batch whose compare-and-swap another process won is not an error: the
/// import starts over on what the store holds now (what it already wrote
/// is found there, and the report counts only what the last attempt did),
/// up to a few times.
pub fn import_sources(
    store: &Store,
    format: Format,
    sources: &[SourceFile],
    opts: &ImportOptions,
    report: ImportReport,
) -> Result<ImportReport> {
    let mut attempt = 0;
    loop {
        let mut r = report.clone();
        let trees = match format {
            Format::ClaudeCode => claude_code::parse(sources, &mut r),
            Format::Codex => codex::parse(sources, &mut r).0,
            Format::OpenAi => openai::parse(sources, &mut r),
            Format::SweAgent => swe_agent::parse(sources, &mut r),
        };
        match import_trees(store, format, trees, opts, &mut r, None) {
            Err(Error::RefOutOfDate { .. }) if attempt < CAS_RETRIES => attempt += 1,
            Err(e) => return Err(e),
            Ok(()) => return Ok(r),
        }
    }
}

/// A file read for import.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub path: PathBuf,
    pub text: String,
}

impl SourceFile {
    /// The file name alone: paths differ between machines, names do not.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

fn walk(dir: &Path, format: Option<Format>, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let ft = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if ft.is_dir() {
            walk(&path, format, out)?;
        } else if format.map_or_else(
            || Format::ALL.iter().any(|f| f.accepts(&path)),
            |f| f.accepts(&path),
        ) {
            out.push(path);
        }
    }
    Ok(())
}

/// A parsed source line, or why it is skipped.
pub(crate) type ParsedLine = std::result::Result<Value, String>;

/// The lines of a JSONL source, numbered from 1, blank ones left out, each
/// parsed and with its exact text (without its `\n`; a `\r` before it
/// stays). A last line without its newline that does not parse is one the
/// agent is still writing: it is left out, and noted once in
/// `report.unfinished_lines`, for a later import to read whole.
pub(crate) fn jsonl_lines<'a>(
    src: &'a SourceFile,
    report: &mut ImportReport,
) -> Vec<(usize, ParsedLine, &'a str)> {
    jsonl_lines_after(src, 0, None, report)
}

/// Lines parsed before, kept between catch-ups (`tail.rs`), by file name
/// and line number: `known` are read from, every line read goes to `seen`.
#[derive(Debug, Clone, Default)]
pub(crate) struct LineCache {
    pub(crate) known: std::collections::HashMap<(String, usize), Value>,
    pub(crate) seen: std::collections::HashMap<(String, usize), Value>,
}

/// [`jsonl_lines`] of a text that follows `before` lines of its file (a
/// catch-up reads only the rest): its lines are numbered from `before + 1`.
pub(crate) fn jsonl_lines_after<'a>(
    src: &'a SourceFile,
    before: usize,
    mut cache: Option<&mut LineCache>,
    report: &mut ImportReport,
) -> Vec<(usize, ParsedLine, &'a str)> {
    let name = if cache.is_some() {
        src.name()
    } else {
        String::new()
    };
    let mut out = Vec::new();
    let text = src.text.as_str();
    let unterminated = !text.is_empty() && !text.ends_with('\n');
    let body = text.strip_suffix('\n').unwrap_or(text);
    if body.is_empty() && !unterminated {
        return out;
    }
    let count = body.split('\n').count();
    for (i, line) in body.split('\n').enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let key = (name.clone(), before + i + 1);
        let parsed = match cache.as_deref().and_then(|c| c.known.get(&key)) {
            Some(v) => Ok(v.clone()),
            None => {
                report.lines_parsed += 1;
                parse_json(line)
            }
        };
        if let (Some(c), Ok(v)) = (cache.as_deref_mut(), &parsed) {
            c.seen.insert(key, v.clone());
        }
        if parsed.is_err() && unterminated && i + 1 == count {
            report.unfinished_lines.push(src.path.clone());
            continue;
        }
        out.push((before + i + 1, parsed, line));
    }
    out
}

/// Where `line` (a slice of `text`) starts and ends in it, its newline
/// included when it has one.
pub(crate) fn span_in(text: &str, line: &str) -> (usize, usize) {
    let start = (line.as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
    let end = (start + line.len() + 1).min(text.len());
    (start, end)
}

/// A source that is one JSON document, parsed; `None` when it ends early
/// and has no final newline: the agent is still writing it (noted in
/// `report.unfinished_lines`).
pub(crate) fn whole_json(src: &SourceFile, report: &mut ImportReport) -> Option<ParsedLine> {
    match parse_json(&src.text) {
        Ok(v) => Some(Ok(v)),
        Err(e) => {
            let early = serde_json::from_str::<serde::de::IgnoredAny>(&src.text)
                .err()
                .is_some_and(|e| e.is_eof());
            if early && !src.text.ends_with('\n') {
                report.unfinished_lines.push(src.path.clone());
                None
            } else {
                Some(Err(e))
            }
        }
    }
}

/// Parses one line (or file) of JSON, refusing duplicate keys as blobs do,
/// and nesting deeper than [`MAX_LINE_DEPTH`]. The error is the reason a
/// skipped line is reported with ("invalid JSON: ...", or the depth).
pub(crate) fn parse_json(text: &str) -> std::result::Result<Value, String> {
    let v = crate::object::Blob::from_json_str(text)
        .map(crate::object::Blob::into_value)
        .map_err(|e| e.to_string())?;
    if nesting(&v) > MAX_LINE_DEPTH {
        return Err(format!(
            "nested deeper than {MAX_LINE_DEPTH} levels, the most a line may be: \
             it is kept two levels down in a session's metadata"
        ));
    }
    Ok(v)
}

/// How deep a source line may nest: a blob's limit (256) less the two
/// levels `extra.events` and `extra.merged_lines` put around it. Deeper, a
/// line would fail its session's encoding (and the whole import) or, kept in
/// a record's `trailing_events`, panic the record's encoder.
const MAX_LINE_DEPTH: usize = crate::object::cbor::MAX_DEPTH - 2;

/// Arrays and objects nested in `v` (0 for a scalar).
fn nesting(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(nesting).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// A conversation name from source text: `[A-Za-z0-9._-]`, other
/// characters become `-`, no leading `.` or `-`, no `..`, at most `max`.
pub fn sanitize_name(s: &str, max: usize) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while out.contains("..") {
        out = out.replace("..", ".");
    }
    let out = out.trim_start_matches(['.', '-']);
    let mut out: String = out.chars().take(max).collect();
    if out.is_empty() {
        out.push('x');
    }
    out
}
