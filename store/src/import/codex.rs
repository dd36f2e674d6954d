//! OpenAI Codex CLI rollouts (`rollout-*.jsonl`): every line is
//! `{timestamp, type, payload}`.
//!
//! - `response_item` lines (messages, reasoning, function and custom tool
//!   calls and their outputs, web searches) are the messages, in line order;
//!   the blob is the whole line. A user message whose text does not start
//!   with `<` or `# AGENTS.md` (injected context) is a prompt. A Desktop
//!   rollout that logs prompts only as `event_msg` `user_message` gets those
//!   lines as its prompts instead.
//! - `compacted` lines are compaction boundaries.
//! - `session_meta` goes to the conversation record's metadata; a thread
//!   name (`session_meta.thread_name`, or the last `event_msg`
//!   `thread_name_updated`) is the conversation's title. With
//!   `forked_from_id`, when the store holds that rollout's conversation, the
//!   messages the fork copied from it (its longest common prefix with the
//!   source's history) are not stored again: the fork's first session names
//!   the source's session that added the last shared message as parent,
//!   with `base` = the number shared, and starts a conversation of its own.
//! - `event_msg` `token_count` adds its `last_token_usage` to the message
//!   before it (the request it measured); every `event_msg` and
//!   `turn_context` line is kept in `extra.events` under the next message.
//!
//! Source ids are `L<line number>`, so a longer snapshot of a rollout keeps
//! the ids of its prefix.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{sanitize_name, ImportReport, Node, Skipped, SourceFile, SourceLine, Tree};
use crate::object::Usage;
use crate::time::parse_rfc3339_ms;

/// Adds one `token_count` event's usage to the message it follows. Codex
/// writes running totals (`total_token_usage`): a request's usage is the
/// difference from the total before, so an event repeated with the same
/// totals adds nothing. The first event, and one whose total is below the
/// one before (a restarted process), count their `last_token_usage`.
/// Prompt tokens are `input_tokens` (cached ones included, as OpenAI counts
/// them), of which `cached_input_tokens` are cache reads.
fn add_token_count(node: &mut Node, info: &Value, total_before: &mut Option<(Usage, u64)>) {
    let read = |u: Option<&Value>| {
        u.filter(|u| u.is_object()).map(|u| {
            let g = |key: &str| u.get(key).and_then(Value::as_u64).unwrap_or(0);
            (
                Usage {
                    prompt_tokens: g("input_tokens"),
                    completion_tokens: g("output_tokens"),
                    total_tokens: g("total_tokens"),
                    requests: 1,
                },
                g("cached_input_tokens"),
            )
        })
    };
    let total = read(info.get("total_token_usage"));
    let last = read(info.get("last_token_usage"));
    let step = match (total, *total_before) {
        (Some((t, cached)), Some((b, cached_before)))
            if t.prompt_tokens >= b.prompt_tokens
                && t.completion_tokens >= b.completion_tokens
                && t.total_tokens >= b.total_tokens
                && cached >= cached_before =>
        {
            let d = Usage {
                prompt_tokens: t.prompt_tokens - b.prompt_tokens,
                completion_tokens: t.completion_tokens - b.completion_tokens,
                total_tokens: t.total_tokens - b.total_tokens,
                requests: 0,
            };
            Some((d, cached - cached_before))
        }
        _ => last,
    };
    if total.is_some() {
        *total_before = total;
    }
    let Some((d, cached)) = step else {
        return;
    };
    if d.total_tokens == 0 && d.prompt_tokens == 0 && d.completion_tokens == 0 {
        return;
    }
    let acc = node.usage.get_or_insert(Usage::default());
    acc.prompt_tokens = acc.prompt_tokens.saturating_add(d.prompt_tokens);
    acc.completion_tokens = acc.completion_tokens.saturating_add(d.completion_tokens);
    acc.total_tokens = acc.total_tokens.saturating_add(d.total_tokens);
    acc.requests += 1;
    node.cache_read_tokens = node.cache_read_tokens.saturating_add(cached);
}

fn text_of(payload: &Value) -> String {
    match payload.get("content") {
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    }
}

/// The parser's state after one node's line: where a catch-up reading
/// only the lines after it starts from (`tail.rs`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Carry {
    /// The node's id (the next node's parent).
    pub(crate) last: Option<String>,
    pub(crate) total_before: Option<(Usage, u64)>,
    pub(crate) model: Option<String>,
    pub(crate) title: Option<String>,
    /// Of the whole file read before (they change how every line reads).
    pub(crate) has_user_items: bool,
    pub(crate) marks_turns: bool,
    pub(crate) metadata: BTreeMap<String, Value>,
    pub(crate) source_session: Option<String>,
    /// The node's usage, cache reads and model right after its line.
    pub(crate) usage: (Option<Usage>, u64, Option<String>),
}

/// What a parse that went on from a [`Carry`] says of the node before its
/// lines: its usage, cache reads and model after the events that follow
/// it; `None` when the new lines change how the lines before read (they
/// must then be read again whole).
pub(crate) type Before = Option<(Option<Usage>, u64, Option<String>)>;

pub(super) fn parse(
    sources: &[SourceFile],
    report: &mut ImportReport,
) -> (Vec<Tree>, Vec<Vec<Carry>>) {
    let mut trees = Vec::new();
    let mut carries = Vec::new();
    for s in sources {
        if let (Some(t), c, _) = parse_file(s, 0, None, None, report) {
            trees.push(t);
            carries.push(c);
        }
    }
    (trees, carries)
}

/// Parses the lines of `src`, which follow `before` lines that left the
/// parser at `carry` (none: the whole file). Returns the tree (with no
/// nodes when `carry` is given and the lines hold none), the state after
/// each node, and, with `carry`, what became of the node before.
pub(crate) fn parse_file(
    src: &SourceFile,
    before: usize,
    carry: Option<&Carry>,
    cache: Option<&mut super::LineCache>,
    report: &mut ImportReport,
) -> (Option<Tree>, Vec<Carry>, Before) {
    let file = src.name();
    let mut lines = Vec::new();
    for (line, v, text) in super::jsonl_lines_after(src, before, cache, report) {
        match v {
            Ok(v) if v.get("type").and_then(Value::as_str).is_some() => {
                lines.push((line, v, text));
            }
            Ok(_) => report.skipped.push(Skipped {
                file: src.path.clone(),
                line,
                reason: "not a rollout line (no \"type\")".into(),
            }),
            Err(e) => report.skipped.push(Skipped {
                file: src.path.clone(),
                line,
                reason: e,
            }),
        }
    }
    let kind = |v: &Value| {
        v.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let ptype = |v: &Value| {
        v.get("payload")
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let has_user_items = lines.iter().any(|(_, v, _)| {
        kind(v) == "response_item"
            && ptype(v) == "message"
            && v["payload"].get("role").and_then(Value::as_str) == Some("user")
    });
    // CLI rollouts mark each turn's start and end (`task_started`,
    // `task_complete`); Desktop ones log neither, and end a turn with an
    // assistant message of phase `final_answer`.
    let marks_turns = lines
        .iter()
        .any(|(_, v, _)| kind(v) == "event_msg" && ptype(v) == "task_started");
    let mut tree = Tree::default();
    let mut pending: Vec<SourceLine> = Vec::new();
    let mut last: Option<String> = None;
    let mut total_before: Option<(Usage, u64)> = None;
    let mut model: Option<String> = None;
    let mut carries = Vec::new();
    // Going on from a carry: the node before stands in as a node of its
    // own, so that the events after it do to it what a whole read does.
    let mut head: Option<Node> = None;
    let mut changed = false;
    if let Some(c) = carry {
        changed |= (has_user_items && !c.has_user_items) || (marks_turns && !c.marks_turns);
        last.clone_from(&c.last);
        total_before = c.total_before;
        model.clone_from(&c.model);
        tree.title.clone_from(&c.title);
        tree.metadata.clone_from(&c.metadata);
        tree.source_session.clone_from(&c.source_session);
        let mut h = Node::new(String::new(), None, Value::Null, &file);
        (h.usage, h.cache_read_tokens, h.model) = c.usage.clone();
        head = Some(h);
    }
    let has_user_items = has_user_items || carry.is_some_and(|c| c.has_user_items);
    let marks_turns = marks_turns || carry.is_some_and(|c| c.marks_turns);
    for (no, v, text) in lines {
        let ts = v
            .get("timestamp")
            .and_then(Value::as_str)
            .and_then(parse_rfc3339_ms)
            .unwrap_or(0);
        let k = kind(&v);
        let pt = ptype(&v);
        let is_message = k == "response_item"
            || k == "compacted"
            || (!has_user_items && k == "event_msg" && pt == "user_message");
        if k == "session_meta" {
            // Read again whole: it may name the conversation anew.
            changed |= carry.is_some();
            let p = v.get("payload").cloned().unwrap_or(Value::Null);
            if let Some(id) = p.get("id").and_then(Value::as_str) {
                tree.source_session.get_or_insert_with(|| id.to_owned());
            }
            if let Some(f) = p.get("forked_from_id") {
                tree.metadata.insert("forked_from".into(), f.clone());
                if let Some(f) = f.as_str() {
                    let short: String = f.chars().take(12).collect();
                    tree.forked_from = Some(format!("codex-{}", sanitize_name(&short, 12)));
                }
            }
            if let Some(name) = p
                .get("thread_name")
                .and_then(Value::as_str)
                .filter(|n| !n.trim().is_empty())
            {
                tree.title = Some(name.to_owned());
            }
            tree.metadata.insert("session_meta".into(), p);
            continue;
        }
        if pt == "thread_name_updated" {
            if let Some(name) = v["payload"]
                .get("thread_name")
                .and_then(Value::as_str)
                .filter(|n| !n.trim().is_empty())
            {
                tree.title = Some(name.to_owned());
            }
        }
        if !is_message {
            if k == "turn_context" {
                if let Some(m) = v["payload"].get("model").and_then(Value::as_str) {
                    model = Some(m.to_owned());
                }
            }
            if pt == "token_count" {
                if let (Some(l), Some(info)) = (
                    tree.nodes.last_mut().or(head.as_mut()),
                    v["payload"].get("info"),
                ) {
                    add_token_count(l, info, &mut total_before);
                    if l.model.is_none() {
                        l.model.clone_from(&model);
                    }
                }
            }
            if matches!(pt.as_str(), "task_complete" | "turn_aborted") {
                if let Some(l) = tree.nodes.last_mut().or(head.as_mut()) {
                    l.turn_end = true;
                }
            }
            pending.push(SourceLine::new(v, Some(text)));
            continue;
        }
        let id = format!("L{no}");
        let mut node = Node::new(id.clone(), last.clone(), v.clone(), &file);
        node.raw = Some(vec![text.to_owned()]);
        node.timestamp = ts;
        node.compaction = k == "compacted";
        node.user_prompt = if k == "event_msg" {
            true
        } else {
            pt == "message" && v["payload"].get("role").and_then(Value::as_str) == Some("user") && {
                let t = text_of(&v["payload"]);
                let t = t.trim_start();
                !t.is_empty() && !t.starts_with('<') && !t.starts_with("# AGENTS.md")
            }
        };
        node.turn_end = !marks_turns
            && pt == "message"
            && v["payload"].get("role").and_then(Value::as_str) == Some("assistant")
            && v["payload"].get("phase").and_then(Value::as_str) == Some("final_answer");
        node.events = std::mem::take(&mut pending);
        node.span = Some(super::span_in(&src.text, text));
        carries.push(Carry {
            last: Some(id.clone()),
            total_before,
            model: model.clone(),
            title: tree.title.clone(),
            has_user_items,
            marks_turns,
            metadata: BTreeMap::new(),
            source_session: None,
            usage: (node.usage, node.cache_read_tokens, node.model.clone()),
        });
        tree.nodes.push(node);
        last = Some(id);
    }
    let before = match head {
        Some(h) if !changed => Some((h.usage, h.cache_read_tokens, h.model)),
        _ => None,
    };
    if let Some(l) = tree.nodes.last_mut() {
        l.open = !l.turn_end;
    } else if carry.is_none() {
        return (None, carries, before);
    }
    tree.trailing = pending;
    tree.metadata.insert("source".into(), json!("codex"));
    tree.metadata.insert("source_file".into(), json!(file));
    let sid = tree
        .source_session
        .clone()
        .unwrap_or_else(|| file.trim_end_matches(".jsonl").to_owned());
    let short: String = sid.chars().take(12).collect();
    tree.name = format!("codex-{}", sanitize_name(&short, 12));
    tree.source_session = Some(sid);
    tree.spawners = BTreeMap::new();
    (Some(tree), carries, before)
}
