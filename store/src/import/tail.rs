//! Catching up in O(new lines): `import --watch` and the hooks import a
//! file again and again as its agent appends to it. Read whole each time,
//! an agent writing a long transcript would make that quadratic; instead a
//! catch-up leaves a [`Resume`] (where its files' written lines end, the
//! parser's state there, and the main line's last session) and the next
//! one reads, parses, plans and writes only what follows:
//!
//! - per file, the lines after the last one a written session holds are
//!   kept (the held-back turn, and entries after the last message), and
//!   the next catch-up parses them with the new lines only;
//! - the tree those lines make goes on from the main line's last written
//!   session (its id, history length and compactions, the conversation's
//!   id and times), so nothing the store holds is walked: only the refs the
//!   tree moves are read, each a fast-forward over the new sessions; while
//!   nothing of a conversation new to the store is written (its first turn
//!   goes on), its lines are all held and read as a whole import reads
//!   them, only the new ones parsed;
//! - a turn held back is planned again with each catch-up (its lines are
//!   not parsed or hashed again): a catch-up costs its new lines and the
//!   turn in progress;
//! - everything else the whole file's parse would tell (a line that repeats
//!   one already written, an answer split over the last written line, a
//!   summary, a fork, a subagent's sessions written, a compaction right
//!   at the start, a changed `session_meta`, a token count for the last
//!   written message) makes [`import_more`] answer `None`:
//!   the caller then imports the files whole, which is correct by
//!   construction. So is a file that shrank or was replaced, or a ref
//!   someone else moved (the caller's checks).
//!
//! The sessions, refs and records a catch-up writes are byte for byte the
//! ones importing the files whole writes (`cli/tests/import_live.rs`).

use std::collections::{HashMap, HashSet};

use super::builder::Graft;
use super::write::{import_tail_tree, import_trees, Written};
use super::*;

/// Where a catch-up left a unit of files (see the module docs). Opaque;
/// held in memory by the one who catches up (a watcher).
#[derive(Debug, Clone)]
pub struct Resume {
    format: Format,
    files: Vec<TailFile>,
    /// The conversation's name (the tree's).
    name: String,
    /// The main line's last written session, and what its tree goes on
    /// with; none while nothing of the conversation is written (its lines
    /// are then all held, and read as a whole import reads them).
    head: Option<Graft>,
    /// The source ids a next line may name as parent to go on from it:
    /// the last written node's and (Claude Code) its merged lines'.
    head_ids: HashSet<String>,
    metadata: BTreeMap<String, Value>,
    title: Option<String>,
    /// Entries kept under written messages (`extra.events`), as digests of
    /// their text: a trailing entry equal to one is not kept again.
    attached: HashSet<[u8; 32]>,
    codex: Option<CodexResume>,
    claude: Option<ClaudeResume>,
    /// The held lines, parsed: a catch-up parses only the new ones.
    cache: LineCache,
    /// Subagent keys of written nodes: a new line naming one's spawner
    /// would change its sessions.
    agents: HashSet<String>,
}

#[derive(Debug, Clone)]
struct TailFile {
    path: PathBuf,
    /// Lines before `held`.
    lines_before: usize,
    /// The text after the last line a written session holds.
    held: String,
}

#[derive(Debug, Clone)]
struct CodexResume {
    carry: codex::Carry,
    /// The last written node's usage, cache reads and model as written.
    head_usage: (Option<crate::object::Usage>, u64, Option<String>),
}

#[derive(Debug, Clone)]
struct ClaudeResume {
    /// The session id every line of the unit is grouped under.
    key: String,
    /// Uuids of the lines written sessions hold (messages and entries).
    known: HashSet<String>,
    /// `message.id`s of written messages.
    message_ids: HashSet<String>,
    /// Leaves of summaries among written entries that no line has yet.
    leaves: HashSet<String>,
}

impl Resume {
    /// The files, in the order [`import_more`] takes their new text.
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|f| f.path.as_path())
    }

    pub fn format(&self) -> Format {
        self.format
    }
}

/// [`import_sources`], and where it left the files for [`import_more`]
/// when it can be gone on from (a Claude Code or Codex conversation whose
/// refs all went where they are named, no forks, nothing skipped, not
/// `finished`). `sources` must be the files' complete lines, read whole
/// (valid UTF-8: offsets are the files').
pub fn import_resumable(
    store: &Store,
    format: Format,
    sources: &[SourceFile],
    opts: &ImportOptions,
    report: ImportReport,
) -> Result<(ImportReport, Option<Resume>)> {
    let mut attempt = 0;
    loop {
        let mut r = report.clone();
        let mut cache = LineCache::default();
        let (trees, carries) = match format {
            Format::ClaudeCode => (
                claude_code::parse_after(sources, &[], None, Some(&mut cache), &mut r),
                Vec::new(),
            ),
            Format::Codex if sources.len() == 1 => {
                let (tree, carries, _) =
                    codex::parse_file(&sources[0], 0, None, Some(&mut cache), &mut r);
                (tree.into_iter().collect(), vec![carries])
            }
            Format::Codex => codex::parse(sources, &mut r),
            Format::OpenAi => (openai::parse(sources, &mut r), Vec::new()),
            Format::SweAgent => (swe_agent::parse(sources, &mut r), Vec::new()),
        };
        let mut written = Vec::new();
        match import_trees(store, format, trees, opts, &mut r, Some(&mut written)) {
            Err(Error::RefOutOfDate { .. }) if attempt < 8 => attempt += 1,
            Err(e) => return Err(e),
            Ok(()) => {
                let resume = if opts.finished || !r.skipped.is_empty() || written.len() != 1 {
                    None
                } else {
                    let w = written.pop().expect("one tree");
                    let carry = carries.first().map(Vec::as_slice).unwrap_or_default();
                    resume_of(format, sources, &[], w, carry, cache.seen)
                };
                return Ok((r, resume));
            }
        }
    }
}

/// Imports the new complete lines of each of the resume's files (`more`,
/// in [`Resume::files`] order; empty for a file that did not grow) on top
/// of what the catch-up that left `resume` wrote. `None`, having written
/// nothing, when the new lines need the files read whole (see the module
/// docs); else the report and where this catch-up leaves the files (none
/// when the next must read them whole).
pub fn import_more(
    store: &Store,
    mut resume: Resume,
    more: &[&str],
    opts: &ImportOptions,
    report: ImportReport,
) -> Result<Option<(ImportReport, Option<Resume>)>> {
    if more.len() != resume.files.len() || opts.finished {
        return Ok(None);
    }
    let mut r = report;
    r.resumed = true;
    if more.iter().all(|m| m.is_empty()) {
        return Ok(Some((r, Some(resume))));
    }
    let sources: Vec<SourceFile> = resume
        .files
        .iter()
        .zip(more)
        .map(|(f, m)| SourceFile {
            path: f.path.clone(),
            text: format!("{}{m}", f.held),
        })
        .collect();
    let before: Vec<usize> = resume.files.iter().map(|f| f.lines_before).collect();
    let mut cache = LineCache {
        known: std::mem::take(&mut resume.cache.known),
        seen: HashMap::new(),
    };
    if resume.head.is_none() {
        return from_start(store, resume, &sources, cache, opts, r);
    }
    let (mut tree, carries) = match (resume.format, &resume.codex, &resume.claude) {
        (Format::Codex, Some(c), _) => {
            let (tree, carries, head) = codex::parse_file(
                &sources[0],
                before[0],
                Some(&c.carry),
                Some(&mut cache),
                &mut r,
            );
            // The events after the last written message must leave it as
            // it was written.
            if head.as_ref() != Some(&c.head_usage) {
                return Ok(None);
            }
            let Some(tree) = tree else { return Ok(None) };
            (tree, carries)
        }
        (Format::ClaudeCode, _, Some(c)) => {
            let mut trees =
                claude_code::parse_after(&sources, &before, Some(&c.key), Some(&mut cache), &mut r);
            if trees.len() != 1 || !claude_goes_on(&trees[0], &resume, c) {
                return Ok(None);
            }
            (trees.pop().expect("one tree"), Vec::new())
        }
        _ => return Ok(None),
    };
    if !r.skipped.is_empty() || tree.name != resume.name || !linear(&tree, &resume) {
        return Ok(None);
    }
    if let Some(first) = tree.nodes.first_mut() {
        first.parent = None;
    }
    tree.metadata.clone_from(&resume.metadata);
    if resume.format == Format::ClaudeCode {
        tree.title.clone_from(&resume.title);
        tree.trailing
            .retain(|e| !resume.attached.contains(&digest(&e.value)));
    }
    let copy = tree.clone();
    let Some(tail) = import_tail_tree(store, resume.format, tree, resume.head, opts, &mut r)?
    else {
        return Ok(None);
    };
    let next = match tail {
        // Nothing new written on the main line: all is held back still.
        None => Some(Resume {
            files: resume
                .files
                .iter()
                .zip(&sources)
                .map(|(f, s)| TailFile {
                    path: f.path.clone(),
                    lines_before: f.lines_before,
                    held: s.text.clone(),
                })
                .collect(),
            title: copy.title.clone().or(resume.title.take()),
            cache: LineCache {
                known: cache.seen,
                seen: HashMap::new(),
            },
            ..resume
        }),
        Some(tail) => resume_of(
            resume.format,
            &sources,
            &before,
            Written {
                tree: copy,
                tail: Some(tail),
                own: true,
                fresh: false,
            },
            &carries,
            cache.seen,
        )
        .map(|mut next| {
            // What was written before, and what this catch-up wrote (the
            // new ones go into the old set).
            resume.attached.extend(std::mem::take(&mut next.attached));
            next.attached = resume.attached;
            next.agents = union(resume.agents, std::mem::take(&mut next.agents));
            if let (Some(n), Some(old)) = (&mut next.claude, resume.claude) {
                n.known = union(old.known, std::mem::take(&mut n.known));
                n.message_ids = union(old.message_ids, std::mem::take(&mut n.message_ids));
                n.leaves = union(old.leaves, std::mem::take(&mut n.leaves));
                let known = &n.known;
                n.leaves.retain(|l| !known.contains(l));
            }
            next
        }),
    };
    Ok(Some((r, next)))
}

/// [`import_more`] of a conversation nothing of which is written yet:
/// its files (all held) and the new lines, read as a whole import reads
/// them (only the new lines parsed), on a store without the conversation.
fn from_start(
    store: &Store,
    resume: Resume,
    sources: &[SourceFile],
    mut cache: LineCache,
    opts: &ImportOptions,
    mut r: ImportReport,
) -> Result<Option<(ImportReport, Option<Resume>)>> {
    let (mut trees, carries) = match resume.format {
        Format::Codex => {
            let (tree, carries, _) =
                codex::parse_file(&sources[0], 0, None, Some(&mut cache), &mut r);
            (tree.into_iter().collect::<Vec<_>>(), carries)
        }
        Format::ClaudeCode => (
            claude_code::parse_after(sources, &[], None, Some(&mut cache), &mut r),
            Vec::new(),
        ),
        Format::OpenAi | Format::SweAgent => return Ok(None),
    };
    if !r.skipped.is_empty() || trees.len() > 1 {
        return Ok(None);
    }
    let Some(tree) = trees.pop() else {
        // No message yet.
        let next = Resume {
            files: resume
                .files
                .iter()
                .zip(sources)
                .map(|(f, s)| TailFile {
                    path: f.path.clone(),
                    lines_before: 0,
                    held: s.text.clone(),
                })
                .collect(),
            cache: LineCache {
                known: cache.seen,
                seen: HashMap::new(),
            },
            ..resume
        };
        return Ok(Some((r, Some(next))));
    };
    if tree.name != resume.name || tree.forked_from.is_some() {
        return Ok(None);
    }
    let copy = tree.clone();
    let Some(tail) = import_tail_tree(store, resume.format, tree, None, opts, &mut r)? else {
        return Ok(None);
    };
    let fresh = tail.is_none();
    let next = resume_of(
        resume.format,
        sources,
        &[],
        Written {
            tree: copy,
            tail,
            own: true,
            fresh,
        },
        &carries,
        cache.seen,
    );
    Ok(Some((r, next)))
}

/// An entry's digest, for [`Resume::attached`].
fn digest(v: &Value) -> [u8; 32] {
    *blake3::hash(v.to_string().as_bytes()).as_bytes()
}

fn union(mut old: HashSet<String>, new: HashSet<String>) -> HashSet<String> {
    old.extend(new);
    old
}

/// Whether the tree of the new lines goes on from the last written node
/// as one line: its first node's parent is that node (or it has no nodes),
/// every other node's parent is one of its nodes, with one child each, no
/// compaction first. Subagents' lines may start anew (parent none), as
/// long as their sessions are all held back (`import_tail_tree` checks):
/// their names and spawners are the whole tree's.
fn linear(tree: &Tree, resume: &Resume) -> bool {
    let Some(first) = tree.nodes.first() else {
        return true;
    };
    if first.compaction
        || first.subagent.is_some()
        || !first
            .parent
            .as_ref()
            .is_some_and(|p| resume.head_ids.contains(p))
    {
        return false;
    }
    let ids: HashSet<&str> = tree.nodes.iter().map(|n| n.id.as_str()).collect();
    let mut children: HashMap<&str, usize> = HashMap::new();
    for n in &tree.nodes[1..] {
        match n.parent.as_deref() {
            Some(p) if ids.contains(p) && p != n.id => *children.entry(p).or_default() += 1,
            None if n.subagent.is_some() => {}
            _ => return false,
        }
    }
    ids.len() == tree.nodes.len()
        && children.values().all(|&c| c == 1)
        && tree.spawners.keys().all(|k| !resume.agents.contains(k))
}

fn str_at<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// A Claude Code message's `message.id`.
fn message_id(v: &Value) -> Option<&str> {
    v.get("message").and_then(|m| str_at(m, "id"))
}

/// Every line a node is (its message's and its merged lines' values).
fn node_lines(n: &Node) -> impl Iterator<Item = &Value> {
    std::iter::once(&n.message).chain(&n.merged)
}

/// What the whole file's parse would read differently in the new Claude
/// Code lines: none may repeat a written line's uuid, continue a written
/// response, be a summary, or be a leaf a written summary waits for; the
/// first may not be a tool result (it could belong with written ones).
fn claude_goes_on(tree: &Tree, resume: &Resume, c: &ClaudeResume) -> bool {
    let entries = tree
        .nodes
        .iter()
        .flat_map(|n| n.events.iter().map(|e| &e.value))
        .chain(tree.trailing.iter().map(|e| &e.value));
    for e in entries {
        if str_at(e, "type") == Some("summary") {
            return false;
        }
        if let Some(u) = str_at(e, "uuid") {
            if c.known.contains(u) || c.leaves.contains(u) {
                return false;
            }
        }
    }
    for n in &tree.nodes {
        for v in node_lines(n) {
            if let Some(u) = str_at(v, "uuid") {
                if c.known.contains(u) || c.leaves.contains(u) {
                    return false;
                }
            }
            if message_id(v).is_some_and(|m| c.message_ids.contains(m)) {
                return false;
            }
        }
    }
    let first_is_result = tree.nodes.first().is_some_and(|n| {
        matches!(
            n.message.get("message").and_then(|m| m.get("content")),
            Some(Value::Array(a)) if a.iter().any(|p| str_at(p, "type") == Some("tool_result"))
        )
    });
    !first_is_result && tree.name == resume.name
}

/// The resume a written tree leaves, when it can be gone on from: each
/// file's lines after its last written node, none of its held-back nodes
/// before that. `before` are the lines the sources follow (a catch-up's),
/// `carries` the Codex parser's state after each node.
fn resume_of(
    format: Format,
    sources: &[SourceFile],
    before: &[usize],
    w: Written,
    carries: &[codex::Carry],
    mut seen: HashMap<(String, usize), Value>,
) -> Option<Resume> {
    let Written {
        tree,
        tail,
        own,
        fresh,
    } = w;
    if !own || tree.forked_from.is_some() || tail.as_ref().is_some_and(|t| !t.resumable) {
        return None;
    }
    let tail = match tail {
        Some(t) => t,
        // Nothing written: every line is held, read again (not parsed)
        // with the new ones.
        None if fresh && before.iter().all(|&b| b == 0) => {
            let names: HashSet<String> = sources.iter().map(SourceFile::name).collect();
            if names.len() != sources.len() || !matches!(format, Format::ClaudeCode | Format::Codex)
            {
                return None;
            }
            return Some(Resume {
                format,
                files: sources
                    .iter()
                    .map(|s| TailFile {
                        path: s.path.clone(),
                        lines_before: 0,
                        held: s.text.clone(),
                    })
                    .collect(),
                name: tree.name.clone(),
                head: None,
                head_ids: HashSet::new(),
                metadata: tree.metadata.clone(),
                title: tree.title.clone(),
                attached: HashSet::new(),
                codex: None,
                claude: None,
                cache: LineCache {
                    known: seen,
                    seen: HashMap::new(),
                },
                agents: HashSet::new(),
            });
        }
        None => return None,
    };
    let names: HashSet<String> = sources.iter().map(SourceFile::name).collect();
    if names.len() != sources.len() {
        return None;
    }
    let mut files = Vec::with_capacity(sources.len());
    for (k, src) in sources.iter().enumerate() {
        let name = src.name();
        let mut cut = 0;
        for (n, held) in tree.nodes.iter().zip(&tail.held) {
            if n.file != name || *held {
                continue;
            }
            cut = cut.max(n.span?.1);
        }
        for (n, held) in tree.nodes.iter().zip(&tail.held) {
            if n.file == name && *held && n.span?.0 < cut {
                return None;
            }
        }
        let (done, rest) = (src.text.get(..cut)?, src.text.get(cut..)?);
        files.push(TailFile {
            path: src.path.clone(),
            lines_before: before.get(k).copied().unwrap_or(0)
                + done.bytes().filter(|&b| b == b'\n').count(),
            held: rest.to_owned(),
        });
    }
    let head = &tree.nodes[tail.head_node];
    let written = || {
        tree.nodes
            .iter()
            .zip(&tail.held)
            .filter(|(_, h)| !**h)
            .map(|(n, _)| n)
    };
    let attached = written()
        .flat_map(|n| n.events.iter().map(|e| digest(&e.value)))
        .collect();
    let mut head_ids: HashSet<String> = HashSet::from([head.id.clone()]);
    let (mut codex, mut claude) = (None, None);
    match format {
        Format::Codex => {
            let mut carry = carries.get(tail.head_node)?.clone();
            carry.metadata.clone_from(&tree.metadata);
            carry.source_session.clone_from(&tree.source_session);
            codex = Some(CodexResume {
                carry,
                head_usage: (head.usage, head.cache_read_tokens, head.model.clone()),
            });
        }
        Format::ClaudeCode => {
            // Every file's lines in the one session (a file with none yet
            // would join the record's `source_files` later).
            let listed = tree
                .metadata
                .get("source_files")
                .and_then(Value::as_array)
                .map(Vec::len);
            if listed != Some(sources.len()) {
                return None;
            }
            head_ids.extend(
                head.merged
                    .iter()
                    .filter_map(|v| str_at(v, "uuid"))
                    .map(str::to_owned),
            );
            let all_ids: HashSet<&str> = tree
                .nodes
                .iter()
                .flat_map(node_lines)
                .filter_map(|v| str_at(v, "uuid"))
                .collect();
            let mut known = HashSet::new();
            let mut message_ids = HashSet::new();
            let mut leaves = HashSet::new();
            for n in written() {
                for v in node_lines(n) {
                    known.extend(str_at(v, "uuid").map(str::to_owned));
                    message_ids.extend(message_id(v).map(str::to_owned));
                }
                for e in &n.events {
                    known.extend(str_at(&e.value, "uuid").map(str::to_owned));
                    if str_at(&e.value, "type") == Some("summary") {
                        if let Some(leaf) = str_at(&e.value, "leafUuid") {
                            if !all_ids.contains(leaf) {
                                leaves.insert(leaf.to_owned());
                            }
                        }
                    }
                }
            }
            // A summary not under a written message would be read again
            // with the new lines, and may name one of them.
            let unwritten = tree
                .nodes
                .iter()
                .zip(&tail.held)
                .filter(|(_, h)| **h)
                .flat_map(|(n, _)| n.events.iter())
                .chain(&tree.trailing);
            for e in unwritten {
                if str_at(&e.value, "type") == Some("summary") {
                    return None;
                }
            }
            // A summary's leaf that is a written entry (not a message)
            // reads through entries the new lines do not have.
            if leaves.iter().any(|l| known.contains(l)) {
                return None;
            }
            claude = Some(ClaudeResume {
                key: tree.source_session.clone()?,
                known,
                message_ids,
                leaves,
            });
        }
        Format::OpenAi | Format::SweAgent => return None,
    }
    // Keep the held lines' values only.
    let after: HashMap<String, usize> = files
        .iter()
        .map(|f: &TailFile| {
            let name = f
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, f.lines_before)
        })
        .collect();
    seen.retain(|(name, line), _| after.get(name).is_some_and(|&b| *line > b));
    let agents = written().filter_map(|n| n.subagent.clone()).collect();
    Some(Resume {
        agents,
        cache: LineCache {
            known: seen,
            seen: HashMap::new(),
        },
        format,
        files,
        name: tree.name.clone(),
        head: Some(tail.head),
        head_ids,
        metadata: tree.metadata.clone(),
        title: tree.title.clone(),
        attached,
        codex,
        claude,
    })
}
