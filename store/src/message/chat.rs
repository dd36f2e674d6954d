//! A history as model-ready OpenAI chat messages: what `checkout -o` puts
//! in `message_history`, so that a runtime can send it to any
//! OpenAI-compatible API as it is.
//!
//! Built from each message's [`view`](super::view): meta lines are left
//! out; system, user and assistant messages become `{role, content}` with
//! string content; tool calls become `tool_calls` (`{id, type: "function",
//! function: {name, arguments}}`, arguments the text of a JSON object, free
//! text wrapped as `{"input": ...}`); tool results
//! become `{role: "tool", tool_call_id, content}`. Then the API's rules are
//! made to hold:
//!
//! - a run of consecutive assistant messages is one message (Claude Code
//!   writes one API response over several lines sharing `message.id`; Codex
//!   writes each call of a response as its own item);
//! - every assistant message with tool calls is followed by one tool message
//!   per call, in the calls' order: a result recorded later is moved up, a
//!   call with no result recorded gets `"(no result recorded)"`;
//! - a call id used before in the history gets a suffix (`ID_2`), with its
//!   result;
//! - a tool result that answers no open call becomes a user message
//!   (`[tool result ID] TEXT`), so nothing the model saw is lost;
//! - an assistant message with neither text nor calls (reasoning only) is
//!   left out.

use std::collections::{HashMap, HashSet, VecDeque};

use serde_json::{json, Map, Value};

use super::view::{view, MessageView, Role};
use super::ToolCall;

/// The content a call with no recorded result is answered with.
pub const NO_RESULT: &str = "(no result recorded)";

/// Whether a history needs [`chat_history`] to be model-ready: false when
/// every message is already a plain OpenAI chat message (no key an API does
/// not take, see [`is_plain_chat`](super::is_plain_chat)), as runtimes that
/// write through sessctl store them. SWE-agent's messages have a role too,
/// but keys of their own (`agent`, `thought`, `tool_call_ids`): converted.
pub fn needs_conversion(history: &[Value]) -> bool {
    !history.iter().all(super::is_plain_chat)
}

/// A call's arguments as the JSON object text chat APIs expect: a JSON
/// string as written, an object as its JSON; anything else (a Codex custom
/// tool's free-text `input`) wrapped as `{"input": ...}`.
fn arguments_text(a: &Value) -> String {
    match a {
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(_)) => s.clone(),
            _ => json!({ "input": s }).to_string(),
        },
        Value::Null => "{}".to_owned(),
        Value::Object(_) => a.to_string(),
        other => json!({ "input": other }).to_string(),
    }
}

/// One entry before the API's rules are applied.
enum Entry {
    Plain(Role, String),
    Assistant(String, Vec<ToolCall>),
    Tool(Option<String>, String),
}

fn entries(v: &MessageView, out: &mut Vec<Entry>) {
    if v.meta {
        return;
    }
    match v.role {
        Role::Assistant => {
            if !v.text.is_empty() || !v.tool_calls.is_empty() {
                out.push(Entry::Assistant(v.text.clone(), v.tool_calls.clone()));
            }
        }
        Role::Tool | Role::User | Role::System => {
            for r in &v.tool_results {
                out.push(Entry::Tool(r.call_id.clone(), r.text.clone()));
            }
            if !v.text.is_empty() || (v.tool_results.is_empty() && v.role != Role::Tool) {
                let role = if v.role == Role::Tool {
                    Role::User
                } else {
                    v.role
                };
                out.push(Entry::Plain(role, v.text.clone()));
            }
        }
    }
}

/// The history as model-ready OpenAI chat messages (see the module's
/// documentation for the rules).
pub fn chat_history(history: &[Value]) -> Vec<Value> {
    let mut es = Vec::new();
    for m in history {
        entries(&view(m), &mut es);
    }
    // Merge runs of assistant entries.
    let mut merged: Vec<Entry> = Vec::with_capacity(es.len());
    for e in es {
        if let (Entry::Assistant(t, calls), Some(Entry::Assistant(pt, pcalls))) =
            (&e, merged.last_mut())
        {
            if !t.is_empty() {
                if !pt.is_empty() {
                    pt.push('\n');
                }
                pt.push_str(t);
            }
            pcalls.extend(calls.iter().cloned());
            continue;
        }
        merged.push(e);
    }
    // Results by call id, in order, so a call can take its result from
    // further on.
    let mut results: HashMap<String, VecDeque<usize>> = HashMap::new();
    for (i, e) in merged.iter().enumerate() {
        if let Entry::Tool(Some(id), _) = e {
            results.entry(id.clone()).or_default().push_back(i);
        }
    }
    let mut used = vec![false; merged.len()];
    let mut out = Vec::with_capacity(merged.len());
    let mut generated = 0usize;
    // Call ids given out: a source that uses one twice (a replayed
    // trajectory) gets a fresh one the second time, as APIs want each
    // call's id unique in a conversation.
    let mut given: HashSet<String> = HashSet::new();
    for i in 0..merged.len() {
        if used[i] {
            continue;
        }
        used[i] = true;
        match &merged[i] {
            Entry::Plain(role, text) => {
                out.push(json!({"role": role.as_str(), "content": text}));
            }
            Entry::Tool(id, text) => {
                let id = id.as_deref().unwrap_or("?");
                out.push(json!({"role": "user", "content": format!("[tool result {id}] {text}")}));
            }
            Entry::Assistant(text, calls) => {
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                msg.insert(
                    "content".into(),
                    if text.is_empty() {
                        Value::Null
                    } else {
                        json!(text)
                    },
                );
                let mut answers = Vec::new();
                let mut listed = Vec::new();
                for c in calls {
                    let id = match &c.id {
                        Some(id) => id.clone(),
                        None => {
                            generated += 1;
                            format!("call_sessctl_{generated}")
                        }
                    };
                    let mut unique = id.clone();
                    let mut k = 1;
                    while !given.insert(unique.clone()) {
                        k += 1;
                        unique = format!("{id}_{k}");
                    }
                    listed.push(json!({
                        "id": unique,
                        "type": "function",
                        "function": {"name": c.name, "arguments": arguments_text(&c.arguments)},
                    }));
                    let found = results.get_mut(&id).and_then(|q| {
                        while let Some(&j) = q.front() {
                            q.pop_front();
                            if j > i && !used[j] {
                                return Some(j);
                            }
                        }
                        None
                    });
                    let text = match found {
                        Some(j) => {
                            used[j] = true;
                            match &merged[j] {
                                Entry::Tool(_, t) => t.clone(),
                                _ => String::new(),
                            }
                        }
                        None => NO_RESULT.to_owned(),
                    };
                    answers.push(json!({"role": "tool", "tool_call_id": unique, "content": text}));
                }
                if !listed.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(listed));
                }
                out.push(Value::Object(msg));
                out.extend(answers);
            }
        }
    }
    out
}
