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
//! the same source wrote; this file holds the types, reading the files, and
//! the entry points.
//!
//! This module must never use the clock: every time comes from the source, so
//! importing the same files twice yields the same ids, and a second import
//! writes nothing at all.

pub mod claude_code;
pub mod codex;
pub mod openai;
pub mod swe_agent;

mod builder;
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
    pub events: Vec<Value>,
    /// Source lines merged into this message (`extra.merged_lines`).
    pub merged: Vec<Value>,
    /// What producing this message cost, when the source says.
    pub usage: Option<Usage>,
    /// File and line it came from, for reports.
    pub file: String,
}

impl Node {
    pub fn new(id: String, parent: Option<String>, message: Value, file: &str) -> Node {
        Node {
            id,
            parent,
            message,
            timestamp: 0,
            user_prompt: false,
            compaction: false,
            subagent: None,
            events: Vec::new(),
            merged: Vec::new(),
            usage: None,
            file: file.to_owned(),
        }
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
    /// The conversation HEAD was pointed at: HEAD named nothing usable, so
    /// it now names the most recently active conversation the import wrote.
    pub head: Option<String>,
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
            "head": self.head,
            "skipped": self.skipped.iter().map(|s| json!({
                "file": s.file.display().to_string(), "line": s.line, "reason": s.reason,
            })).collect::<Vec<_>>(),
            "dangling": self.dangling.iter().map(|(f, u)| json!({"file": f, "parent": u}))
                .collect::<Vec<_>>(),
        })
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
}

/// Reads `paths` (files, or directories walked recursively for the
/// format's files), in sorted order, and imports them.
pub fn import_paths(
    store: &Store,
    format: Format,
    paths: &[PathBuf],
    opts: &ImportOptions,
) -> Result<ImportReport> {
    let mut files = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        if meta.is_dir() {
            walk(p, format, &mut files)?;
        } else {
            files.push(p.clone());
        }
    }
    files.sort();
    files.dedup();
    let mut report = ImportReport::default();
    let mut sources = Vec::with_capacity(files.len());
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
        sources.push(SourceFile {
            path: f.clone(),
            text: String::from_utf8_lossy(&bytes).into_owned(),
        });
    }
    import_sources(store, format, &sources, opts, report)
}

/// Imports files already read (`report` counts what reading them found):
/// the path every import takes after reading, and the one fuzzing drives.
pub fn import_sources(
    store: &Store,
    format: Format,
    sources: &[SourceFile],
    opts: &ImportOptions,
    mut report: ImportReport,
) -> Result<ImportReport> {
    let trees = match format {
        Format::ClaudeCode => claude_code::parse(sources, &mut report),
        Format::Codex => codex::parse(sources, &mut report),
        Format::OpenAi => openai::parse(sources, &mut report),
        Format::SweAgent => swe_agent::parse(sources, &mut report),
    };
    import_trees(store, format, trees, opts, &mut report)?;
    Ok(report)
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

fn walk(dir: &Path, format: Format, out: &mut Vec<PathBuf>) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let ft = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if ft.is_dir() {
            walk(&path, format, out)?;
        } else if format.accepts(&path) {
            out.push(path);
        }
    }
    Ok(())
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
