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

use super::{parse_json, sanitize_name, ImportReport, Node, Skipped, SourceFile, Tree};
use crate::object::Usage;
use crate::time::parse_rfc3339_ms;

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

pub(super) fn parse(sources: &[SourceFile], report: &mut ImportReport) -> Vec<Tree> {
    sources
        .iter()
        .filter_map(|s| parse_file(s, report))
        .collect()
}

fn parse_file(src: &SourceFile, report: &mut ImportReport) -> Option<Tree> {
    let file = src.name();
    let mut lines = Vec::new();
    for (i, text) in src.text.lines().enumerate() {
        if text.trim().is_empty() {
            continue;
        }
        match parse_json(text) {
            Ok(v) if v.get("type").and_then(Value::as_str).is_some() => lines.push((i + 1, v)),
            Ok(_) => report.skipped.push(Skipped {
                file: src.path.clone(),
                line: i + 1,
                reason: "not a rollout line (no \"type\")".into(),
            }),
            Err(e) => report.skipped.push(Skipped {
                file: src.path.clone(),
                line: i + 1,
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
    let has_user_items = lines.iter().any(|(_, v)| {
        kind(v) == "response_item"
            && ptype(v) == "message"
            && v["payload"].get("role").and_then(Value::as_str) == Some("user")
    });
    let mut tree = Tree::default();
    let mut pending: Vec<Value> = Vec::new();
    let mut last: Option<String> = None;
    for (no, v) in lines {
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
            if pt == "token_count" {
                if let (Some(l), Some(u)) = (
                    tree.nodes.last_mut(),
                    v["payload"]
                        .get("info")
                        .and_then(|i| i.get("last_token_usage")),
                ) {
                    let g = |key: &str| u.get(key).and_then(Value::as_u64).unwrap_or(0);
                    let acc = l.usage.get_or_insert(Usage::default());
                    acc.prompt_tokens += g("input_tokens");
                    acc.completion_tokens += g("output_tokens");
                    acc.total_tokens += g("total_tokens");
                    acc.requests += 1;
                }
            }
            pending.push(v);
            continue;
        }
        let id = format!("L{no}");
        let mut node = Node::new(id.clone(), last.clone(), v.clone(), &file);
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
        node.events = std::mem::take(&mut pending);
        tree.nodes.push(node);
        last = Some(id);
    }
    if tree.nodes.is_empty() {
        return None;
    }
    if !pending.is_empty() {
        tree.metadata
            .insert("trailing_events".into(), Value::Array(pending));
    }
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
    Some(tree)
}
