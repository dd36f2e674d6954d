//! Claude Code session logs: `~/.claude/projects/<cwd>/<session>.jsonl` and
//! `<session>/subagents/agent-*.jsonl` (older versions: `agent-*.jsonl`
//! beside the session).
//!
//! Lineage comes from `parentUuid`, never from line order, and across the
//! files of one session (a subagent file names parents in the main file), so
//! every file is read before any tree is built; lines are grouped by their
//! `sessionId`, and a uuid seen twice (a later snapshot of the same file) is
//! read once.
//!
//! What becomes of each line:
//! - `user` and `assistant` lines are messages. The message is the whole
//!   line as written (uuid, timestamps and fields no spec lists included),
//!   kept byte for byte as a raw object.
//! - Lines of one API response (assistant lines sharing `message.id`, each the
//!   parent of the next) are **merged**: the message is the first line, whose
//!   `message.content` becomes the concatenation, in order, of every merged
//!   line's content parts (a string content counts as one `text` part). The
//!   same is done for the tool results that answer one merged response
//!   (Claude Code writes one line per result, each a child of the tool_use
//!   line it answers, so without this parallel tool calls would look like
//!   forks). The raw object holds every line of the group, in order (where
//!   a conversation keeps blobs, from an older import, the other lines are
//!   kept in the session's `extra.merged_lines` under the first line's uuid).
//! - A `system` line with subtype `compact_boundary` is a compaction boundary
//!   whose history continues from `logicalParentUuid`.
//! - Every other line (other `system` lines, `summary`,
//!   `file-history-snapshot`, `queue-operation`, `progress`, ...) is kept in
//!   `extra.events` under the uuid of the next message in its file; lines after
//!   a file's last message go to the conversation record's
//!   `trailing_events`. Other system lines may be parents: their children hang
//!   on the nearest message above them.
//! - A `summary` whose `leafUuid` is one of this conversation's messages is its
//!   title (the last such line wins); with none, the last `summary` line of
//!   its files is (a resumed session's file opens with the summaries of the
//!   conversation it continues, whose leaves are in older files).
//! - `isSidechain` lines are subagents; a tool result whose `toolUseResult`
//!   names an `agentId` tells which message spawned that agent.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{json, Value};

use super::{sanitize_name, ImportReport, Skipped, SourceFile, SourceLine, Tree};
use crate::object::raw;
use crate::object::Usage;
use crate::time::parse_rfc3339_ms;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Message,
    Compaction,
    /// A line with a uuid that is not a message: children skip over it.
    Transparent,
}

#[derive(Debug)]
struct Line {
    uuid: String,
    parent: Option<String>,
    entry: Value,
    /// The line exactly as written.
    text: String,
    kind: Kind,
    file: String,
    /// Where it is in its file's text.
    span: (usize, usize),
    /// Whether a user or assistant line of its file follows it (a tool
    /// result, the next response, the next prompt), which tells that the
    /// agent finished writing it.
    followed: bool,
}

#[derive(Debug)]
enum Item {
    /// A message line (or a repeat of one): where pending events attach.
    Message(String),
    Event(SourceLine),
    FileEnd,
}

#[derive(Debug, Default)]
struct Group {
    lines: Vec<Line>,
    by_uuid: HashMap<String, usize>,
    items: Vec<Item>,
    files: Vec<String>,
    /// Turn ends marked by a line after the message (`system` lines
    /// `turn_duration` and `stop_hook_summary`): the uuid of the line they
    /// follow.
    ended: HashSet<String>,
}

fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

pub(super) fn parse(sources: &[SourceFile], report: &mut ImportReport) -> Vec<Tree> {
    parse_after(sources, &[], None, None, report)
}

/// [`parse`] of the lines after the first `before[i]` of each source (a
/// catch-up reads only the rest), all of one session `key` when given (the
/// lines before told it). With a key, the tree is kept even without nodes
/// (its trailing entries are new).
pub(crate) fn parse_after(
    sources: &[SourceFile],
    before: &[usize],
    key: Option<&str>,
    mut cache: Option<&mut super::LineCache>,
    report: &mut ImportReport,
) -> Vec<Tree> {
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    for (k, src) in sources.iter().enumerate() {
        let name = src.name();
        let mut parsed = Vec::new();
        let skip = before.get(k).copied().unwrap_or(0);
        for (line, v, text) in super::jsonl_lines_after(src, skip, cache.as_deref_mut(), report) {
            match v {
                Ok(v) if v.is_object() => parsed.push((v, text)),
                Ok(_) => report.skipped.push(Skipped {
                    file: src.path.clone(),
                    line,
                    reason: "not a JSON object".into(),
                }),
                Err(e) => report.skipped.push(Skipped {
                    file: src.path.clone(),
                    line,
                    reason: e,
                }),
            }
        }
        let session = match key {
            Some(k) => k.to_owned(),
            None => parsed
                .iter()
                .find_map(|(v, _)| str_of(v, "sessionId"))
                .map(str::to_owned)
                .unwrap_or_else(|| name.trim_end_matches(".jsonl").to_owned()),
        };
        let g = groups.entry(session).or_default();
        g.files.push(name.clone());
        // Lines other processes write into the file (`summary`,
        // `file-history-snapshot`, ...) can come between two lines of one
        // response: only a later user or assistant line tells that a line
        // was written whole.
        let last_message = parsed
            .iter()
            .rposition(|(v, _)| matches!(str_of(v, "type"), Some("user" | "assistant")));
        let mut last_uuid: Option<String> = None;
        for (pos, (v, text)) in parsed.into_iter().enumerate() {
            let followed = last_message.is_some_and(|m| pos < m);
            if matches!(
                (str_of(&v, "type"), str_of(&v, "subtype")),
                (Some("system"), Some("turn_duration" | "stop_hook_summary"))
            ) {
                if let Some(u) = &last_uuid {
                    g.ended.insert(u.clone());
                }
            }
            if matches!(str_of(&v, "type"), Some("user" | "assistant")) {
                last_uuid = str_of(&v, "uuid").map(str::to_owned);
            }
            let uuid = str_of(&v, "uuid").map(str::to_owned);
            let ty = str_of(&v, "type").unwrap_or("");
            let kind = match (ty, str_of(&v, "subtype")) {
                ("user" | "assistant", _) if v.get("message").is_some_and(Value::is_object) => {
                    Kind::Message
                }
                ("system", Some("compact_boundary")) => Kind::Compaction,
                _ => Kind::Transparent,
            };
            let Some(uuid) = uuid else {
                g.items.push(Item::Event(SourceLine::new(v, Some(text))));
                continue;
            };
            if let Some(&i) = g.by_uuid.get(&uuid) {
                g.lines[i].followed |= followed;
                // A later snapshot repeats the line: read once.
                match kind {
                    Kind::Transparent => g.items.push(Item::Event(SourceLine::new(v, Some(text)))),
                    _ => g.items.push(Item::Message(uuid)),
                }
                continue;
            }
            let parent = if kind == Kind::Compaction {
                str_of(&v, "logicalParentUuid").or_else(|| str_of(&v, "parentUuid"))
            } else {
                str_of(&v, "parentUuid")
            }
            .map(str::to_owned);
            match kind {
                Kind::Transparent => {
                    g.items
                        .push(Item::Event(SourceLine::new(v.clone(), Some(text))));
                }
                _ => g.items.push(Item::Message(uuid.clone())),
            }
            g.by_uuid.insert(uuid.clone(), g.lines.len());
            g.lines.push(Line {
                uuid,
                parent,
                entry: v,
                text: text.to_owned(),
                kind,
                file: name.clone(),
                span: super::span_in(&src.text, text),
                followed,
            });
        }
        g.items.push(Item::FileEnd);
    }
    groups
        .into_iter()
        .filter_map(|(session, g)| build_tree(session, g, key.is_some()))
        .collect()
}

/// Adds an Anthropic `message.usage` to a node: prompt tokens are every
/// input token the request read (`input_tokens` plus cache writes and
/// reads, as OpenAI counts them), completion tokens `output_tokens`.
/// Claude Code's `<synthetic>` messages (written without a request) count
/// no request.
fn add_response_usage(node: &mut super::Node, entry: &Value) {
    let Some(m) = entry.get("message") else {
        return;
    };
    let model = m.get("model").and_then(Value::as_str);
    if let Some(u) = m.get("usage").filter(|u| u.is_object()) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        let (input, output) = (n("input_tokens"), n("output_tokens"));
        let (write, read) = (
            n("cache_creation_input_tokens"),
            n("cache_read_input_tokens"),
        );
        let prompt = input.saturating_add(write).saturating_add(read);
        let acc = node.usage.get_or_insert(Usage::default());
        acc.prompt_tokens = acc.prompt_tokens.saturating_add(prompt);
        acc.completion_tokens = acc.completion_tokens.saturating_add(output);
        acc.total_tokens = acc
            .total_tokens
            .saturating_add(prompt.saturating_add(output));
        acc.requests += u64::from(model != Some("<synthetic>"));
        node.cache_write_tokens = node.cache_write_tokens.saturating_add(write);
        node.cache_read_tokens = node.cache_read_tokens.saturating_add(read);
    }
    if let Some(model) = model.filter(|m| *m != "<synthetic>") {
        node.model = Some(model.to_owned());
    }
}

use raw::content_parts;

fn is_tool_result(entry: &Value) -> bool {
    match entry.get("message").and_then(|m| m.get("content")) {
        Some(Value::Array(a)) => {
            !a.is_empty()
                && a.iter()
                    .all(|p| p.get("type").and_then(Value::as_str) == Some("tool_result"))
        }
        _ => false,
    }
}

fn is_user_prompt(entry: &Value) -> bool {
    if str_of(entry, "type") != Some("user")
        || entry.get("isMeta").and_then(Value::as_bool) == Some(true)
        || entry.get("isCompactSummary").and_then(Value::as_bool) == Some(true)
    {
        return false;
    }
    match entry.get("message").and_then(|m| m.get("content")) {
        Some(Value::String(s)) => !s.trim().is_empty(),
        Some(Value::Array(a)) => {
            a.iter()
                .any(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                && !a
                    .iter()
                    .any(|p| p.get("type").and_then(Value::as_str) == Some("tool_result"))
        }
        _ => false,
    }
}

fn part_ids(entry: &Value, ty: &str, key: &str) -> Vec<String> {
    content_parts(entry)
        .iter()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some(ty))
        .filter_map(|p| p.get(key).and_then(Value::as_str).map(str::to_owned))
        .collect()
}

fn tool_use_ids(entry: &Value) -> Vec<String> {
    part_ids(entry, "tool_use", "id")
}

fn tool_result_ids(entry: &Value) -> Vec<String> {
    part_ids(entry, "tool_result", "tool_use_id")
}

fn message_id(entry: &Value) -> Option<&str> {
    if str_of(entry, "type") != Some("assistant") {
        return None;
    }
    entry
        .get("message")
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
}

fn build_tree(session: String, g: Group, keep_empty: bool) -> Option<Tree> {
    let lines = &g.lines;
    // A uuid's nearest message: transparent lines hand over to their parent.
    let resolve = |start: Option<&str>| -> Option<String> {
        let mut u = start?.to_owned();
        for _ in 0..=lines.len() {
            match g.by_uuid.get(&u).map(|&i| &lines[i]) {
                Some(l) if l.kind == Kind::Transparent => u = l.parent.clone()?,
                _ => return Some(u),
            }
        }
        None
    };
    // Merge groups: uuid -> representative's uuid.
    let mut group_of: HashMap<String, String> = HashMap::new();
    let mut members: HashMap<String, Vec<usize>> = HashMap::new();
    // Assistant group -> the tool_use ids it asked for, and the group of
    // results answering it; result group -> the assistant group it answers.
    let mut tools_of: HashMap<String, HashSet<String>> = HashMap::new();
    let mut results_of: HashMap<String, String> = HashMap::new();
    let mut answers: HashMap<String, String> = HashMap::new();
    let mut reps: Vec<usize> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if l.kind == Kind::Transparent {
            continue;
        }
        let parent = resolve(l.parent.as_deref());
        let parent_line = parent
            .as_deref()
            .and_then(|p| g.by_uuid.get(p))
            .map(|&j| &lines[j]);
        let mut rep = None;
        if l.kind == Kind::Message {
            if let (Some(pl), Some(mid)) = (parent_line, message_id(&l.entry)) {
                if message_id(&pl.entry) == Some(mid) {
                    rep = group_of.get(&pl.uuid).cloned();
                }
            }
            if rep.is_none() && is_tool_result(&l.entry) {
                // The assistant group these results answer: the parent's, or
                // (results written as a chain) the one the parent answers.
                let answered = parent_line.and_then(|pl| {
                    let pg = group_of.get(&pl.uuid)?;
                    if message_id(&pl.entry).is_some() {
                        Some(pg.clone())
                    } else {
                        answers.get(pg).cloned()
                    }
                });
                let asked = answered.as_ref().and_then(|a| tools_of.get(a));
                if let (Some(answered), Some(asked)) = (answered.clone(), asked) {
                    if tool_result_ids(&l.entry).iter().all(|t| asked.contains(t)) {
                        match results_of.get(&answered) {
                            Some(r) => rep = Some(r.clone()),
                            None => {
                                results_of.insert(answered.clone(), l.uuid.clone());
                                answers.insert(l.uuid.clone(), answered);
                            }
                        }
                    }
                }
            }
        }
        let rep = rep.unwrap_or_else(|| {
            reps.push(i);
            l.uuid.clone()
        });
        if message_id(&l.entry).is_some() {
            tools_of
                .entry(rep.clone())
                .or_default()
                .extend(tool_use_ids(&l.entry));
        }
        members.entry(rep.clone()).or_default().push(i);
        group_of.insert(l.uuid.clone(), rep);
    }
    let node_of = |u: Option<&str>| -> Option<String> {
        let r = resolve(u)?;
        Some(group_of.get(&r).cloned().unwrap_or(r))
    };
    let mut nodes = Vec::with_capacity(reps.len());
    let mut index: HashMap<String, usize> = HashMap::new();
    // One API response is several lines sharing `message.id`, each with the
    // usage as it stood when written: its last line's counts, once.
    let mut last_of_response: HashMap<&str, usize> = HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(id) = message_id(&l.entry) {
            last_of_response.insert(id, i);
        }
    }
    let mut counted: HashSet<&str> = HashSet::new();
    // Per file, the node holding its last message line.
    let mut last_in_file: HashMap<&str, (usize, usize)> = HashMap::new();
    for &i in &reps {
        let l = &lines[i];
        let ms = &members[&l.uuid];
        // The merge is the one a raw object of these lines reads as, so
        // that the message and its raw lines are one value.
        let message = raw::merge_lines(ms.iter().map(|&j| lines[j].entry.clone()).collect());
        let merged = ms[1..].iter().map(|&j| lines[j].entry.clone()).collect();
        let mut node = super::Node::new(
            l.uuid.clone(),
            node_of(l.parent.as_deref()),
            message,
            &l.file,
        );
        node.raw = Some(ms.iter().map(|&j| lines[j].text.clone()).collect());
        node.span = ms.iter().all(|&j| lines[j].file == l.file).then(|| {
            let start = ms.iter().map(|&j| lines[j].span.0).min().unwrap_or(0);
            let end = ms.iter().map(|&j| lines[j].span.1).max().unwrap_or(0);
            (start, end)
        });
        node.timestamp = str_of(&l.entry, "timestamp")
            .and_then(parse_rfc3339_ms)
            .unwrap_or(0);
        node.user_prompt = l.kind == Kind::Message && is_user_prompt(&l.entry);
        node.compaction = l.kind == Kind::Compaction;
        if l.entry.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            node.subagent = Some(
                str_of(&l.entry, "agentId")
                    .unwrap_or("sidechain")
                    .to_owned(),
            );
        }
        node.merged = merged;
        for &j in ms {
            if let Some(id) = message_id(&lines[j].entry) {
                if counted.insert(id) {
                    add_response_usage(&mut node, &lines[last_of_response[id]].entry);
                }
            }
            let at = last_in_file
                .entry(lines[j].file.as_str())
                .or_insert((j, nodes.len()));
            if j >= at.0 {
                *at = (j, nodes.len());
            }
        }
        let last = &lines[*ms.last().expect("a group has its representative")];
        let stop = last
            .entry
            .get("message")
            .and_then(|m| m.get("stop_reason"))
            .and_then(Value::as_str);
        let settled = last.followed
            || g.ended.contains(&last.uuid)
            || matches!(
                stop,
                Some("end_turn" | "stop_sequence" | "max_tokens" | "refusal")
            );
        node.turn_end = message_id(&l.entry).is_some()
            && settled
            && !ms
                .iter()
                .any(|&j| !tool_use_ids(&lines[j].entry).is_empty());
        index.insert(l.uuid.clone(), nodes.len());
        nodes.push(node);
    }
    if nodes.is_empty() && !keep_empty {
        return None;
    }
    // Events attach to the next message of their file.
    let mut pending: Vec<SourceLine> = Vec::new();
    let mut trailing: Vec<SourceLine> = Vec::new();
    let mut title = None;
    for item in &g.items {
        match item {
            Item::Event(e) => {
                let v = &e.value;
                if str_of(v, "type") == Some("summary") {
                    if let (Some(leaf), Some(s)) = (str_of(v, "leafUuid"), str_of(v, "summary")) {
                        if node_of(Some(leaf)).is_some_and(|n| index.contains_key(&n)) {
                            title = Some(s.to_owned());
                        }
                    }
                }
                pending.push(e.clone());
            }
            Item::Message(u) => {
                let Some(&ni) = group_of.get(u).and_then(|r| index.get(r)) else {
                    continue;
                };
                let events = &mut nodes[ni].events;
                for e in pending.drain(..) {
                    if !events.iter().any(|x| x.value == e.value) {
                        events.push(e);
                    }
                }
            }
            Item::FileEnd => trailing.append(&mut pending),
        }
    }
    // Claude Code opens a resumed session's file with the summaries of
    // other conversations (their leaves live in older files): those name
    // no title here. Only a summary of one of this conversation's messages
    // does.
    let attached: HashSet<String> = nodes
        .iter()
        .flat_map(|n| n.events.iter().map(|e| e.value.to_string()))
        .collect();
    let mut seen = HashSet::new();
    trailing.retain(|e| {
        let k = e.value.to_string();
        !attached.contains(&k) && seen.insert(k)
    });
    let mut spawners = BTreeMap::new();
    for l in lines {
        if let Some(agent) = l
            .entry
            .get("toolUseResult")
            .and_then(|r| r.get("agentId"))
            .and_then(Value::as_str)
        {
            if let Some(n) = node_of(l.parent.as_deref()) {
                spawners.entry(agent.to_owned()).or_insert(n);
            }
        }
    }
    // A file's last message, when nothing answers it yet, is still being
    // written or its turn goes on, unless it ends a turn; a subagent's,
    // unless its result is in.
    let has_child: HashSet<String> = nodes.iter().filter_map(|n| n.parent.clone()).collect();
    for &(_, ni) in last_in_file.values() {
        let node = &mut nodes[ni];
        let answered = node
            .subagent
            .as_ref()
            .is_some_and(|k| spawners.contains_key(k));
        node.open = !node.turn_end && !answered && !has_child.contains(&node.id);
    }
    let mut metadata = BTreeMap::new();
    metadata.insert("source".to_owned(), json!("claude-code"));
    metadata.insert("source_session".to_owned(), json!(session));
    metadata.insert("source_files".to_owned(), json!(g.files));
    if let Some(first) = lines.iter().find(|l| l.kind == Kind::Message) {
        for k in ["cwd", "gitBranch", "version"] {
            if let Some(v) = first.entry.get(k) {
                metadata.insert(k.to_owned(), v.clone());
            }
        }
    }

    let short: String = session.chars().take(12).collect();
    Some(Tree {
        name: format!("cc-{}", sanitize_name(&short, 12)),
        source_session: Some(session),
        nodes,
        title,
        metadata,
        trailing,
        spawners,
        root_extra: BTreeMap::new(),
        forked_from: None,
    })
}
