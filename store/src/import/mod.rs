//! Import of other agents' session files: Claude Code, Codex, OpenAI chat
//! JSON and SWE-agent trajectories.
//!
//! Each format's parser turns its files into [`Tree`]s: one per source
//! conversation, each a tree of [`Node`]s (a message exactly as the source
//! wrote it, its source id, its parent's). The builder here turns a tree into
//! sessions the same way for every format:
//!
//! - a session starts at a root, at a user prompt, at a compaction boundary,
//!   at every child of a node with several children (a fork point), where a
//!   subagent's lines begin, and after the last message of a session the
//!   store already holds for this conversation (so a longer snapshot of a file
//!   appends to what an earlier import wrote instead of rewriting it);
//! - the main line is the branch holding the newest leaf; each other child of
//!   a fork point starts a conversation `<name>.fork-<k>`; subagents get a tag
//!   `<name>.agent-<key>` so their sessions stay reachable, and carry their
//!   spawner's conversation id.
//!
//! This module must never use the clock: every time comes from the source, so
//! importing the same files twice yields the same ids, and a second import
//! writes nothing at all.

pub mod claude_code;
pub mod codex;
pub mod openai;
pub mod swe_agent;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::object::{
    blob, Compaction, EncodedObject, MessageDelta, ObjectKind, RunSummary, Session,
    SessionMetadata, SessionStatus, SessionType, Usage,
};
use crate::odb::Durability;
use crate::refs::{
    ConversationRecord, ConversationStatus, ConversationUpdate, PreviousValue, RefEdit, RefName,
    RefTarget,
};
use crate::store::{Store, Transaction};

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
    /// Called with each file as it is read (progress display).
    pub progress: Option<fn(&Path)>,
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
    for f in &files {
        if let Some(cb) = opts.progress {
            cb(f);
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
/// and nesting deeper than [`MAX_LINE_DEPTH`].
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
const MAX_LINE_DEPTH: usize = 254;

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

fn blob_object(v: &Value) -> Result<EncodedObject> {
    Ok(EncodedObject::new(ObjectKind::Blob, blob::encode_value(v)?))
}

/// A session being planned: which nodes it adds, on which parent.
#[derive(Debug)]
struct Plan {
    nodes: Vec<usize>,
    parent: Option<usize>,
    base: u64,
    compaction: bool,
    branch: usize,
    spawned_by: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum BranchKind {
    Main,
    Fork,
    Agent(String),
}

#[derive(Debug)]
struct Branch {
    kind: BranchKind,
    first_node: usize,
    /// The branch's conversation id comes from this branch's (fork) or
    /// another's (agent: its spawner's).
    conv_from: Option<usize>,
}

/// A branch's ref, head, and (for a conversation) its name and record.
type BranchRef = (RefName, ObjectId, Option<(String, ConversationRecord)>);

/// Sessions (and their objects) one tree becomes.
#[derive(Debug, Default)]
struct Built {
    objects: Vec<EncodedObject>,
    sessions: usize,
    messages: usize,
    forks: usize,
    compactions: usize,
    /// (ref, head, record) per branch with a ref.
    refs: Vec<BranchRef>,
}

fn import_trees(
    store: &Store,
    format: Format,
    trees: Vec<Tree>,
    opts: &ImportOptions,
    report: &mut ImportReport,
) -> Result<()> {
    let mut pending: Option<(Transaction, usize)> = None;
    let existing_refs = store.refs()?;
    let mut names_used: HashSet<String> = HashSet::new();
    let mut queued: HashSet<ObjectId> = HashSet::new();
    let mut claimed: HashSet<RefName> = HashSet::new();
    for mut tree in sources_first(trees) {
        if tree.nodes.is_empty() {
            continue;
        }
        // Two sources with one name (two trajectories with one file name):
        // the later ones get a number, in path order.
        if !names_used.insert(tree.name.clone()) {
            let base = tree.name.clone();
            let mut k = 2;
            while !names_used.insert(format!("{base}-{k}")) {
                k += 1;
            }
            tree.name = format!("{base}-{k}");
        }
        let first_file = tree.nodes[0].file.clone();
        let boundaries = existing_boundaries(store, &existing_refs, &tree.name)?;
        let graft = match tree.forked_from.clone() {
            Some(source) => {
                // Its source may be in the batch not yet written: write it,
                // or only the next import would find the graft (and rewrite
                // the fork then).
                if let Some((prev, _)) = pending.take() {
                    store.transact(prev, Durability::NoSync)?;
                }
                graft_point(store, &source, &mut tree)?
            }
            None => None,
        };
        let built = build(format, tree, &boundaries, graft, report)?;
        // Never move a ref that holds someone else's sessions (a
        // conversation of the same name made by hand, or from another
        // format): the tree is left out and reported.
        let mut foreign = None;
        for (name, _, _) in &built.refs {
            if let Some(RefTarget::Session(cur)) = store.get_ref(name)? {
                let s = store.odb().session(&cur)?;
                if s.metadata.extra.get("source") != Some(&json!(format.as_str())) {
                    foreign = Some(name.clone());
                    break;
                }
            }
        }
        if let Some(name) = foreign {
            report.skipped.push(Skipped {
                file: PathBuf::from(&first_file),
                line: 0,
                reason: format!(
                    "{name} holds sessions that were not imported from {}; left as it is",
                    format.as_str()
                ),
            });
            continue;
        }
        // Nor one an earlier source of this import makes (`x.fork-1` is a
        // fork of `x` and maybe a conversation of its own): the first keeps it.
        if let Some(name) = built
            .refs
            .iter()
            .map(|r| &r.0)
            .find(|n| claimed.contains(*n))
        {
            report.skipped.push(Skipped {
                file: PathBuf::from(&first_file),
                line: 0,
                reason: format!(
                    "{name} is also made by an earlier source of this import; left to it"
                ),
            });
            continue;
        }
        claimed.extend(built.refs.iter().map(|r| r.0.clone()));
        report.sessions_total += built.sessions;
        report.messages += built.messages;
        report.forks += built.forks;
        report.compactions += built.compactions;
        report.conversations += 1;
        // A batch not yet committed is not in the store: an object two
        // sources share goes into both batches (the journal keeps one) but
        // counts once.
        let mut seen = HashSet::new();
        let mut objects = Vec::new();
        let mut new_objects = 0;
        for o in built.objects {
            if seen.insert(o.id()) && !store.odb().contains(&o.id())? {
                if queued.insert(o.id()) {
                    new_objects += 1;
                    if o.kind() == ObjectKind::Session {
                        report.sessions_written += 1;
                    }
                }
                objects.push(o);
            }
        }
        let mut tx = Transaction {
            reason: "import".into(),
            objects,
            ..Transaction::default()
        };
        for (name, head, record) in built.refs {
            let current = store.get_ref(&name)?;
            if current != Some(RefTarget::Session(head)) {
                tx.edits.push(RefEdit {
                    name: name.clone(),
                    expected: match current {
                        Some(t) => PreviousValue::MustMatch(t),
                        None => PreviousValue::MustNotExist,
                    },
                    new: Some(RefTarget::Session(head)),
                });
            }
            if let Some((conv, rec)) = record {
                let old = store.conversation(&conv)?.map(|c| c.record);
                if old.as_ref() != Some(&rec) {
                    tx.conversations.push(ConversationUpdate {
                        name: conv,
                        record: Some(rec),
                    });
                }
            }
        }
        if tx.objects.is_empty() && tx.edits.is_empty() && tx.conversations.is_empty() {
            continue;
        }
        let n_edits = tx.edits.len();
        if let Some((prev, _)) = pending.take() {
            store.transact(prev, Durability::NoSync)?;
        }
        pending = Some((tx, new_objects));
        report.objects_written += new_objects;
        report.refs_moved += n_edits;
    }
    if let Some((tx, _)) = pending {
        let d = if opts.no_sync {
            Durability::NoSync
        } else {
            Durability::Sync
        };
        store.transact(tx, d)?;
    }
    Ok(())
}

/// The trees in their order, except that a fork comes after the tree it was
/// forked from (its graft needs that tree in the store). Forks in a cycle
/// are imported as plain conversations, so a second import does the same.
fn sources_first(mut trees: Vec<Tree>) -> Vec<Tree> {
    let mut out = Vec::with_capacity(trees.len());
    while !trees.is_empty() {
        let waiting: HashSet<String> = trees.iter().map(|t| t.name.clone()).collect();
        let (ready, mut rest): (Vec<Tree>, Vec<Tree>) = trees.into_iter().partition(|t| {
            t.forked_from
                .as_ref()
                .is_none_or(|f| *f == t.name || !waiting.contains(f))
        });
        if ready.is_empty() {
            for t in &mut rest {
                t.forked_from = None;
            }
        }
        out.extend(ready);
        trees = rest;
    }
    out
}

/// Where a forked copy joins its source conversation: the source's
/// session that added the last message both share, and how many they share.
/// The shared nodes are dropped from the tree (their events move to the
/// first node kept). Chosen so that the source growing later does not move
/// it.
fn graft_point(store: &Store, source: &str, tree: &mut Tree) -> Result<Option<(ObjectId, u64)>> {
    let Some(head) = store.conversation(source)?.and_then(|c| c.head) else {
        return Ok(None);
    };
    let history = store.odb().history(&head)?;
    let mut k = 0;
    for (node, id) in tree.nodes.iter().zip(&history) {
        if blob_object(&node.message)?.id() != *id {
            break;
        }
        k += 1;
    }
    if k == 0 || k == tree.nodes.len() {
        return Ok(None);
    }
    let mut at = head;
    loop {
        let s = store.odb().session(&at)?;
        match s.first_parent() {
            Some(p) if s.messages.base >= k as u64 => at = p,
            _ => break,
        }
    }
    let shared: Vec<Node> = tree.nodes.drain(..k).collect();
    let mut events: Vec<Value> = shared.into_iter().flat_map(|n| n.events).collect();
    events.append(&mut tree.nodes[0].events);
    tree.nodes[0].events = events;
    tree.nodes[0].parent = None;
    Ok(Some((at, k as u64)))
}

/// (last message id, history length) of every session the store holds for
/// this conversation, its forks and its subagents: where an earlier import
/// ended its sessions.
fn existing_boundaries(
    store: &Store,
    refs: &[(RefName, RefTarget)],
    name: &str,
) -> Result<HashSet<(ObjectId, u64)>> {
    let mut out = HashSet::new();
    let mut seen = HashSet::new();
    for (r, t) in refs {
        let short = match r {
            RefName::Conversation(n) | RefName::Tag(n) => n.as_str(),
            _ => continue,
        };
        let ours = short == name
            || short
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(".fork-") || rest.starts_with(".agent-"));
        let RefTarget::Session(mut id) = t.clone() else {
            continue;
        };
        if !ours {
            continue;
        }
        loop {
            if !seen.insert(id) {
                break;
            }
            let s = store.odb().session(&id)?;
            if let Some(last) = s.messages.added.last() {
                out.insert((*last, s.messages.len()));
            }
            match s.first_parent() {
                Some(p) => id = p,
                None => break,
            }
        }
    }
    Ok(out)
}

/// Turns one tree into sessions.
fn build(
    format: Format,
    mut tree: Tree,
    boundaries: &HashSet<(ObjectId, u64)>,
    graft: Option<(ObjectId, u64)>,
    report: &mut ImportReport,
) -> Result<Built> {
    let n = tree.nodes.len();
    let mut by_id: HashMap<String, usize> = HashMap::with_capacity(n);
    for (i, node) in tree.nodes.iter().enumerate() {
        by_id.entry(node.id.clone()).or_insert(i);
    }
    let mut parent: Vec<Option<usize>> = vec![None; n];
    for (i, node) in tree.nodes.iter().enumerate() {
        if let Some(p) = &node.parent {
            match by_id.get(p) {
                Some(&j) if j != i => parent[i] = Some(j),
                _ => report.dangling.push((node.file.clone(), p.clone())),
            }
        }
    }
    // A cycle (a corrupt source) would hide its nodes from every root: cut
    // it where it is found, keeping the node as a root.
    for i in 0..n {
        let mut steps = 0;
        let mut j = i;
        while let Some(p) = parent[j] {
            steps += 1;
            if steps > n {
                parent[i] = None;
                break;
            }
            j = p;
        }
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = *p {
            children[p].push(i);
        }
    }
    // Order: parents before children.
    let roots: Vec<usize> = (0..n).filter(|&i| parent[i].is_none()).collect();
    let mut order = Vec::with_capacity(n);
    {
        let mut stack: Vec<usize> = roots.iter().rev().copied().collect();
        while let Some(i) = stack.pop() {
            order.push(i);
            stack.extend(children[i].iter().rev());
        }
    }
    // The newest leaf under each node: (timestamp, source order).
    let mut newest: Vec<(i64, usize)> = (0..n).map(|i| (tree.nodes[i].timestamp, i)).collect();
    for &i in order.iter().rev() {
        if let Some(&best) = children[i].iter().map(|&c| &newest[c]).max() {
            newest[i] = best;
        }
    }
    let mut depth = vec![0u64; n];
    let mut blob_ids = Vec::with_capacity(n);
    let mut blobs = Vec::with_capacity(n);
    for node in &tree.nodes {
        let o = blob_object(&node.message)?;
        blob_ids.push(o.id());
        blobs.push(o);
    }
    for &i in &order {
        depth[i] = match parent[i] {
            Some(p) if !tree.nodes[i].compaction => depth[p] + 1,
            None if i == 0 && !tree.nodes[i].compaction => graft.map_or(0, |g| g.1) + 1,
            _ => 1,
        };
    }
    // Partition into sessions and branches.
    let mut branches: Vec<Branch> = Vec::new();
    let mut plans: Vec<Plan> = Vec::new();
    let mut session_of = vec![usize::MAX; n];
    let main_root = roots
        .iter()
        .copied()
        .filter(|&r| tree.nodes[r].subagent.is_none())
        .max_by_key(|&r| newest[r]);
    // Roots: the main one first, then other roots, then subagents' roots
    // (whose spawner must have its session first).
    let mut root_order: Vec<usize> = main_root.into_iter().collect();
    root_order.extend(
        roots
            .iter()
            .copied()
            .filter(|&r| Some(r) != main_root && tree.nodes[r].subagent.is_none()),
    );
    root_order.extend(
        roots
            .iter()
            .copied()
            .filter(|&r| tree.nodes[r].subagent.is_some()),
    );
    let spawner_of = |key: &str, session_of: &[usize]| -> Option<usize> {
        tree.spawners
            .get(key)
            .and_then(|id| by_id.get(id))
            .map(|&j| session_of[j])
            .filter(|&s| s != usize::MAX)
    };
    for root in root_order {
        let mut stack = vec![root];
        while let Some(i) = stack.pop() {
            let node = &tree.nodes[i];
            let p = parent[i];
            let continues = match p {
                None => false,
                Some(p) => {
                    !node.user_prompt
                        && !node.compaction
                        && children[p].len() == 1
                        && tree.nodes[p].subagent == node.subagent
                        && !boundaries.contains(&(blob_ids[p], depth[p]))
                }
            };
            if continues {
                let s = session_of[p.expect("a continuation has a parent")];
                plans[s].nodes.push(i);
                session_of[i] = s;
            } else {
                let parent_session = p.map(|p| session_of[p]);
                let branch = match (p, &node.subagent) {
                    (Some(p), sub) if tree.nodes[p].subagent != *sub && sub.is_some() => {
                        let key = sub.clone().expect("matched is_some");
                        branches.push(Branch {
                            kind: BranchKind::Agent(key),
                            first_node: i,
                            conv_from: Some(plans[session_of[p]].branch),
                        });
                        branches.len() - 1
                    }
                    (Some(p), _) => {
                        let pb = plans[session_of[p]].branch;
                        let siblings: Vec<usize> = children[p]
                            .iter()
                            .copied()
                            .filter(|&c| tree.nodes[c].subagent == tree.nodes[p].subagent)
                            .collect();
                        let main_child = siblings.iter().copied().max_by_key(|&c| newest[c]);
                        if siblings.len() > 1 && main_child != Some(i) {
                            branches.push(Branch {
                                kind: BranchKind::Fork,
                                first_node: i,
                                conv_from: None,
                            });
                            branches.len() - 1
                        } else {
                            pb
                        }
                    }
                    (None, Some(key)) => {
                        let spawner = spawner_of(key, &session_of);
                        branches.push(Branch {
                            kind: BranchKind::Agent(key.clone()),
                            first_node: i,
                            conv_from: Some(spawner.map_or(0, |s| plans[s].branch)),
                        });
                        branches.len() - 1
                    }
                    (None, None) => {
                        branches.push(Branch {
                            kind: if branches.is_empty() {
                                BranchKind::Main
                            } else {
                                BranchKind::Fork
                            },
                            first_node: i,
                            conv_from: None,
                        });
                        branches.len() - 1
                    }
                };
                let spawned_by = match (&node.subagent, p) {
                    (Some(_), Some(p)) if tree.nodes[p].subagent != node.subagent => {
                        Some(session_of[p])
                    }
                    (Some(key), None) => spawner_of(key, &session_of),
                    _ => None,
                };
                plans.push(Plan {
                    nodes: vec![i],
                    parent: parent_session,
                    base: match p {
                        Some(p) if !node.compaction => depth[p],
                        None if i == 0 && !node.compaction => graft.map_or(0, |g| g.1),
                        _ => 0,
                    },
                    compaction: node.compaction && p.is_some(),
                    branch,
                    spawned_by,
                });
                session_of[i] = plans.len() - 1;
            }
            stack.extend(children[i].iter().rev());
        }
    }
    if branches.is_empty() {
        return Ok(Built::default());
    }
    // Fork names follow the order of their first node's source id.
    let mut fork_order: Vec<usize> = (0..branches.len())
        .filter(|&b| branches[b].kind == BranchKind::Fork)
        .collect();
    fork_order.sort_by(|&a, &b| {
        tree.nodes[branches[a].first_node]
            .id
            .cmp(&tree.nodes[branches[b].first_node].id)
    });
    let mut branch_name: Vec<String> = vec![tree.name.clone(); branches.len()];
    for (k, &b) in fork_order.iter().enumerate() {
        branch_name[b] = format!("{}.fork-{}", tree.name, k + 1);
    }
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for (b, br) in branches.iter().enumerate() {
        if let BranchKind::Agent(key) = &br.kind {
            // Several sidechains can share a key: number the later ones.
            let base = format!("{}.agent-{}", tree.name, sanitize_name(key, 64));
            let mut name = base.clone();
            let mut k = 2;
            while !taken.insert(name.clone()) {
                name = format!("{base}-{k}");
                k += 1;
            }
            branch_name[b] = name;
        }
    }
    // Encode in plan order: a plan's parent and spawner come before it.
    let mut built = Built {
        messages: n,
        forks: fork_order.len() + usize::from(graft.is_some()),
        ..Built::default()
    };
    let mut session_ids: Vec<ObjectId> = Vec::with_capacity(plans.len());
    let mut conv_id: Vec<Option<ObjectId>> = vec![None; branches.len()];
    let mut head: Vec<Option<usize>> = vec![None; branches.len()];
    let mut root_extra = std::mem::take(&mut tree.root_extra);
    for (pi, plan) in plans.iter().enumerate() {
        let nodes: Vec<&Node> = plan.nodes.iter().map(|&i| &tree.nodes[i]).collect();
        let added: Vec<ObjectId> = plan.nodes.iter().map(|&i| blob_ids[i]).collect();
        let mut extra = BTreeMap::new();
        extra.insert("source".to_owned(), json!(format.as_str()));
        if let Some(s) = &tree.source_session {
            extra.insert("source_session".to_owned(), json!(s));
        }
        let mut events = serde_json::Map::new();
        let mut merged = serde_json::Map::new();
        for node in &nodes {
            if !node.events.is_empty() {
                events.insert(node.id.clone(), Value::Array(node.events.clone()));
            }
            if !node.merged.is_empty() {
                merged.insert(node.id.clone(), Value::Array(node.merged.clone()));
            }
        }
        if !events.is_empty() {
            extra.insert("events".to_owned(), Value::Object(events));
        }
        if !merged.is_empty() {
            extra.insert("merged_lines".to_owned(), Value::Object(merged));
        }
        if pi == 0 {
            extra.append(&mut root_extra);
        }
        let mut usage = Usage::default();
        for node in &nodes {
            if let Some(u) = node.usage {
                usage.total_tokens += u.total_tokens;
                usage.prompt_tokens += u.prompt_tokens;
                usage.completion_tokens += u.completion_tokens;
                usage.requests += u.requests;
            }
        }
        let first_ts = nodes[0].timestamp;
        let last_ts = nodes.iter().map(|n| n.timestamp).max().unwrap_or(first_ts);
        let branch = &branches[plan.branch];
        let mut from = plan.branch;
        let mut hops = 0;
        while let Some(f) = branches[from].conv_from {
            if f == from || hops > branches.len() {
                break;
            }
            from = f;
            hops += 1;
        }
        let conversation = conv_id[from];
        // A grafted fork's first session continues the source's session.
        let parent_id = match (plan.parent, graft) {
            (Some(p), _) => Some(session_ids[p]),
            (None, Some((g, _))) if plan.nodes[0] == 0 => Some(g),
            _ => None,
        };
        let session = Session {
            parents: parent_id.into_iter().collect(),
            conversation,
            status: SessionStatus::Committed,
            created_at: first_ts,
            title: None,
            run: RunSummary {
                duration_ms: u64::try_from(last_ts - first_ts).unwrap_or(0),
                usage,
            },
            messages: MessageDelta {
                base: plan.base,
                added: added.clone(),
            },
            display_messages: MessageDelta {
                base: plan.base,
                added,
            },
            context_state: None,
            environment_state: None,
            metadata: SessionMetadata {
                session_type: if matches!(branch.kind, BranchKind::Agent(_)) {
                    SessionType::AsyncSubagent
                } else {
                    SessionType::Agent
                },
                transport: Some("import".to_owned()),
                spawned_by: plan.spawned_by.map(|s| session_ids[s]),
                preset_id: None,
                extra,
            },
            compaction: match (plan.compaction, parent_id, plan.parent) {
                (true, Some(pid), Some(pp)) => Some(Compaction {
                    session: pid,
                    messages: depth[*plans[pp].nodes.last().expect("plans are not empty")],
                    summary: blob_ids[plan.nodes[0]],
                }),
                _ => None,
            },
        };
        if session.compaction.is_some() {
            built.compactions += 1;
        }
        let o = session.encode()?;
        let id = o.id();
        built
            .objects
            .extend(plan.nodes.iter().map(|&i| blobs[i].clone()));
        built.objects.push(o);
        session_ids.push(id);
        if branch.conv_from.is_none() && conv_id[plan.branch].is_none() {
            conv_id[plan.branch] = Some(id);
        }
        // Plans of a branch follow its path, so the last is its head.
        head[plan.branch] = Some(pi);
    }
    built.sessions = plans.len();
    let first_ts = tree.nodes.iter().map(|n| n.timestamp).min().unwrap_or(0);
    for (b, br) in branches.iter().enumerate() {
        let Some(h) = head[b] else { continue };
        let name = &branch_name[b];
        let last_ts = plans
            .iter()
            .filter(|p| p.branch == b)
            .flat_map(|p| p.nodes.iter().map(|&i| tree.nodes[i].timestamp))
            .max()
            .unwrap_or(first_ts);
        match &br.kind {
            BranchKind::Agent(_) => built.refs.push((RefName::tag(name)?, session_ids[h], None)),
            kind => {
                let created_at = if *kind == BranchKind::Main {
                    first_ts
                } else {
                    tree.nodes[br.first_node].timestamp
                };
                let mut metadata = tree.metadata.clone();
                if *kind == BranchKind::Fork {
                    metadata.insert("forked_from".to_owned(), json!(tree.name));
                }
                let record = ConversationRecord {
                    conversation_id: conv_id[b],
                    title: tree.title.clone(),
                    default_preset_id: None,
                    metadata,
                    status: ConversationStatus::Active,
                    created_at,
                    updated_at: last_ts.max(created_at),
                };
                built.refs.push((
                    RefName::conversation(name)?,
                    session_ids[h],
                    Some((name.clone(), record)),
                ));
            }
        }
    }
    Ok(built)
}
