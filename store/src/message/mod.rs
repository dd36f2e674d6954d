//! Message shapes: how sessctl reads a message's JSON. Agents write
//! messages in several shapes, and the store keeps each as it was written:
//! OpenAI chat (`role`, `content` as a string or parts, `tool_calls`, role
//! `tool`; SWE-agent's history adds `thought`, `action`, `tool_call_ids`),
//! Anthropic / Claude (`tool_use` and `tool_result` content parts), Claude
//! Code lines (`type`, `uuid` and the message inside `message`), Codex
//! rollout lines (`{timestamp, type, payload}`), OpenAI Agents SDK /
//! Responses items (`function_call`, `function_call_output`, `reasoning`,
//! `input_text` parts), and LangChain's serialized messages (`type` `human`,
//! `ai`, `system`, `tool` with the message in `data`, as LangGraph
//! checkpoints store them through `sessctl.langgraph`). Everything that asks
//! "whose message is this, what does it say, which tools did it call" asks
//! here: the index's previews, replay, compaction's cut, resume, checkout,
//! export and the CLI's views.
//!
//! The API, small on purpose:
//! - [`view`] reads any message into one normalized [`MessageView`]: its
//!   [`Role`], `text`, tool calls and results, reasoning (never an
//!   encrypted blob), model, usage, and whether it is a `meta` line (not
//!   part of the conversation) or `injected` context. A reader that wants a
//!   message's words (search, previews) reads `view(v).text`.
//! - [`user_text`] is the text of a prompt a person wrote, or `None`.
//! - [`chat_history`] turns a history into model-ready OpenAI chat messages.
//! - The small functions below (`role_of`, `tool_calls`, ...) answer one
//!   question each, most through the view.
//!
//! Plain functions over `&serde_json::Value`. This module never writes,
//! stores or changes a message.

use serde_json::Value;

mod chat;
mod view;

pub use chat::{chat_history, needs_conversion, NO_RESULT};
pub(crate) use view::CHECKPOINT_MESSAGE_KEY;
pub use view::{view, MessageUsage, MessageView, Role, Shape};

/// A LangChain message (`message_to_dict`): its role and the message.
fn langchain(v: &Value) -> Option<(&str, &Value)> {
    let data = v.get("data").filter(|d| d.is_object())?;
    let role = match v.get("type")?.as_str()? {
        "human" | "HumanMessageChunk" => "user",
        "ai" | "AIMessageChunk" => "assistant",
        "system" | "SystemMessageChunk" => "system",
        "tool" | "ToolMessageChunk" => "tool",
        "function" | "FunctionMessageChunk" => "function",
        "chat" | "ChatMessageChunk" => data.get("role")?.as_str()?,
        _ => return None,
    };
    Some((role, data))
}

/// The message object itself (Claude Code lines wrap it in `message`,
/// LangChain's in `data`).
pub fn inner(v: &Value) -> &Value {
    if let Some(m) = v.get("message").filter(|m| m.is_object()) {
        return m;
    }
    langchain(v).map_or(v, |(_, data)| data)
}

/// A message's role: `role` (of the wrapped message, then of the line), else
/// its `type` (LangChain's `human` and `ai` read as `user` and `assistant`).
pub fn role_of(v: &Value) -> Option<&str> {
    if let Some((role, _)) = langchain(v) {
        return Some(role);
    }
    inner(v)
        .get("role")
        .or_else(|| v.get("role"))
        .or_else(|| v.get("type"))
        .and_then(Value::as_str)
}

/// A content part's or a Codex item's `type`.
pub fn item_type(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

/// The content parts of a message whose content is a list (none otherwise).
pub fn content_parts(v: &Value) -> &[Value] {
    match inner(v).get("content") {
        Some(Value::Array(parts)) => parts,
        _ => &[],
    }
}

/// Whether the model wrote this message: an assistant message, a Codex or
/// Responses `function_call` / `reasoning` item (see [`MessageView`]).
pub fn is_model_output(v: &Value) -> bool {
    view(v).is_model_output()
}

/// Whether this message carries tool results: role `tool`, a Codex
/// `function_call_output`, or `tool_result` content parts.
pub fn is_tool_result(v: &Value) -> bool {
    !view(v).tool_results.is_empty()
}

/// A tool call a model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id, when the format gives one.
    pub id: Option<String>,
    pub name: String,
    /// As written: an object (Anthropic `input`) or a JSON string (OpenAI
    /// `function.arguments`).
    pub arguments: Value,
}

/// A tool's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The id of the call it answers.
    pub call_id: Option<String>,
    /// As written.
    pub content: Value,
    /// The content as text: a string, its text parts joined, or its JSON.
    pub text: String,
    /// Anthropic's `is_error`; false when absent.
    pub is_error: bool,
}

/// The tool calls of one message.
pub fn tool_calls(v: &Value) -> Vec<ToolCall> {
    view(v).tool_calls
}

/// The tool results of one message.
pub fn tool_results(v: &Value) -> Vec<ToolResult> {
    view(v).tool_results
}

/// The first non-blank line of `text`, without trailing blanks.
pub fn first_line(text: &str) -> String {
    text.trim()
        .lines()
        .next()
        .unwrap_or("")
        .trim_end()
        .to_owned()
}

/// The text of a prompt a person wrote, in every shape [`view`] reads:
/// a user message's text, trimmed, neither meta (Claude Code `isMeta`) nor
/// injected by the agent (Codex environment context, Claude Code command
/// lines); `None` otherwise.
pub fn user_text(v: &Value) -> Option<String> {
    view(v).prompt_text()
}

/// Text of a message content: a string, or the text parts of a list.
pub fn content_text(c: &Value) -> Option<String> {
    match c {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str()))
                .collect();
            (!texts.is_empty()).then(|| texts.join(" "))
        }
        _ => None,
    }
}

/// Whether `v` is a Claude Code transcript line (a `uuid` and a `type` of
/// user, assistant or system).
pub fn is_claude_code_line(v: &Value) -> bool {
    v.get("uuid").is_some_and(Value::is_string)
        && matches!(
            v.get("type").and_then(Value::as_str),
            Some("user" | "assistant" | "system")
        )
}

/// Whether a message is already in OpenAI chat shape: a `role`, and none of
/// the wrappers other shapes use (it may carry keys of its own: SWE-agent's
/// `agent`, `thought`, `tool_call_ids`).
pub fn is_openai_chat(v: &Value) -> bool {
    v.get("role").is_some_and(Value::is_string)
        && v.get("message").is_none()
        && v.get("payload").is_none()
        && v.get("type").is_none()
}

/// The keys a chat completions API takes in a message.
const CHAT_KEYS: [&str; 5] = ["role", "content", "name", "tool_calls", "tool_call_id"];

/// Whether a message is a plain OpenAI chat message an API takes as it is:
/// a role, no key but [`CHAT_KEYS`], and a tool message answering a call
/// (`tool_call_id`).
pub fn is_plain_chat(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    let role = o.get("role").and_then(Value::as_str);
    matches!(
        role,
        Some("system" | "developer" | "user" | "assistant" | "tool")
    ) && o.keys().all(|k| CHAT_KEYS.contains(&k.as_str()))
        && (role != Some("tool") || o.get("tool_call_id").is_some_and(Value::is_string))
}

/// The item a Codex rollout line carries (`{"type": "response_item",
/// "payload": {...}}`, also `event_msg` and `compacted`); any other message
/// is its own item. The other functions here read the item.
pub fn rollout_item(v: &Value) -> &Value {
    match (item_type(v), v.get("payload")) {
        (Some("response_item" | "event_msg" | "compacted"), Some(p)) if p.is_object() => p,
        _ => v,
    }
}

/// Everything a message says, as text: its content (text, thinking and
/// refusal parts, tool results' content, Codex input and output text), each
/// tool call as `NAME ARGUMENTS` (arguments as written, objects as compact
/// JSON), a Codex tool output, user message or reasoning summary. A message
/// in none of the shapes above reads as all the strings it holds. Pieces are
/// separated by newlines; this is the text `grep` searches.
pub fn search_text(v: &Value) -> String {
    let item = rollout_item(v);
    let m = inner(item);
    let mut out: Vec<String> = Vec::new();
    if let Some(c) = m.get("content") {
        push_content(c, &mut out);
    }
    for call in tool_calls(item) {
        let args = match &call.arguments {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        out.push(format!("{} {args}", call.name).trim_end().to_owned());
    }
    if item_type(item) == Some("function_call_output") {
        if let Some(o) = item.get("output") {
            push_content(o, &mut out);
        }
    }
    if let Some(Value::String(s)) = item.get("message") {
        out.push(s.clone());
    }
    if let Some(Value::Array(parts)) = item.get("summary") {
        for p in parts {
            push_content(p, &mut out);
        }
    }
    if out.is_empty() {
        strings(v, &mut out);
    }
    out.retain(|s| !s.is_empty());
    out.join("\n")
}

/// The text of a content value: a string, text-like parts, the content of
/// tool results; tool-use parts are read by [`tool_calls`].
fn push_content(c: &Value, out: &mut Vec<String>) {
    match c {
        Value::String(s) => out.push(s.clone()),
        Value::Array(parts) => {
            for p in parts {
                push_content(p, out);
            }
        }
        Value::Object(o) => {
            if item_type(c) == Some("tool_use") {
                return;
            }
            for key in ["text", "thinking", "refusal"] {
                if let Some(Value::String(s)) = o.get(key) {
                    out.push(s.clone());
                }
            }
            if item_type(c) == Some("tool_result") {
                if let Some(inner) = o.get("content") {
                    push_content(inner, out);
                }
            }
        }
        _ => {}
    }
}

fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// The model that wrote a message, when it says (Claude's `message.model`,
/// an OpenAI response's `model`).
pub fn model_of(v: &Value) -> Option<&str> {
    let item = rollout_item(v);
    inner(item)
        .get("model")
        .or_else(|| item.get("model"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Token counts a model message reports about the request that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// The `usage` a message carries: Anthropic's (`input_tokens`,
/// `output_tokens`, `cache_read_input_tokens`,
/// `cache_creation_input_tokens`) or OpenAI's (`prompt_tokens`,
/// `completion_tokens`, `prompt_tokens_details.cached_tokens`, the cached
/// part counted in `prompt_tokens`).
pub fn token_usage(v: &Value) -> Option<TokenUsage> {
    let item = rollout_item(v);
    let u = inner(item)
        .get("usage")
        .or_else(|| item.get("usage"))
        .filter(|u| u.is_object())?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64);
    if let Some(input) = n("input_tokens") {
        return Some(TokenUsage {
            input,
            output: n("output_tokens").unwrap_or(0),
            cache_read: n("cache_read_input_tokens").unwrap_or(0),
            cache_write: n("cache_creation_input_tokens").unwrap_or(0),
        });
    }
    let prompt = n("prompt_tokens")?;
    let cached = u
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some(TokenUsage {
        input: prompt.saturating_sub(cached),
        output: n("completion_tokens").unwrap_or(0),
        cache_read: cached,
        cache_write: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn langchain_messages_read_as_chat_messages() {
        let human = json!({"type": "human", "data": {"content": "hi there", "type": "human"}});
        let ai = json!({"type": "ai", "data": {"content": "", "tool_calls": [
            {"name": "ls", "args": {"path": "."}, "id": "c1", "type": "tool_call"}]}});
        let tool = json!({"type": "tool", "data": {"content": "a b", "tool_call_id": "c1"}});
        assert_eq!(role_of(&human), Some("user"));
        assert_eq!(user_text(&human).as_deref(), Some("hi there"));
        assert_eq!(role_of(&ai), Some("assistant"));
        assert!(is_model_output(&ai));
        let calls = tool_calls(&ai);
        assert_eq!(
            (calls[0].name.as_str(), &calls[0].arguments),
            ("ls", &json!({"path": "."}))
        );
        assert!(is_tool_result(&tool));
        assert_eq!(tool_results(&tool)[0].call_id.as_deref(), Some("c1"));
        // A `type`/`data` pair that is not LangChain's stays what it was.
        let other = json!({"type": "event", "data": {"content": "x"}});
        assert_eq!(role_of(&other), Some("event"));
        assert_eq!(inner(&other), &other);
    }

    #[test]
    fn roles_and_texts_in_every_shape() {
        let openai = json!({"role": "user", "content": "  fix it "});
        let parts = json!({"role": "user", "content": [{"type": "text", "text": "a"}, "b"]});
        let claude = json!({"type": "user", "uuid": "u1",
                            "message": {"role": "user", "content": "hello"}});
        let codex = json!({"type": "function_call", "name": "ls", "call_id": "c1",
                           "arguments": "{}"});
        assert_eq!(role_of(&openai), Some("user"));
        assert_eq!(user_text(&openai).as_deref(), Some("fix it"));
        assert_eq!(user_text(&parts).as_deref(), Some("a\nb"));
        assert_eq!(user_text(&claude).as_deref(), Some("hello"));
        assert_eq!(role_of(&codex), Some("function_call"));
        assert!(is_model_output(&codex));
        assert_eq!(
            user_text(&json!({"role": "assistant", "content": "x"})),
            None
        );
        assert_eq!(user_text(&json!({"role": "user", "content": "   "})), None);
        assert!(is_claude_code_line(&claude) && !is_openai_chat(&claude));
        assert!(is_openai_chat(&openai) && !is_claude_code_line(&openai));
    }

    #[test]
    fn tool_calls_and_results_in_every_shape() {
        let openai_call = json!({"role": "assistant", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]});
        let openai_result = json!({"role": "tool", "tool_call_id": "t1", "content": "a.rs"});
        let anthropic = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "t2", "name": "cat", "input": {"path": "a"}}]});
        let anthropic_result = json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t2", "content": "ok", "is_error": true}]}});
        let codex_out = json!({"type": "function_call_output", "call_id": "c1", "output": "x"});
        assert_eq!(tool_calls(&openai_call)[0].name, "ls");
        assert_eq!(tool_calls(&anthropic)[0].id.as_deref(), Some("t2"));
        assert!(is_tool_result(&openai_result) && is_tool_result(&anthropic_result));
        assert!(is_tool_result(&codex_out) && !is_tool_result(&openai_call));
        let r = &tool_results(&anthropic_result)[0];
        assert_eq!((r.call_id.as_deref(), r.is_error), (Some("t2"), true));
        assert_eq!(tool_results(&codex_out)[0].content, json!("x"));
    }

    #[test]
    fn search_text_reads_every_shape() {
        let claude = json!({"type": "assistant", "uuid": "u", "message": {"role": "assistant",
            "model": "claude-x", "usage": {"input_tokens": 3, "output_tokens": 4,
            "cache_read_input_tokens": 5, "cache_creation_input_tokens": 6},
            "content": [{"type": "thinking", "thinking": "hmm"},
                        {"type": "text", "text": "line one\nline two"},
                        {"type": "tool_use", "id": "t", "name": "Bash", "input": {"cmd": "ls"}}]}});
        assert_eq!(
            search_text(&claude),
            "hmm\nline one\nline two\nBash {\"cmd\":\"ls\"}"
        );
        assert_eq!(model_of(&claude), Some("claude-x"));
        assert_eq!(
            token_usage(&claude),
            Some(TokenUsage {
                input: 3,
                output: 4,
                cache_read: 5,
                cache_write: 6
            })
        );
        let result = json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": "t", "content": [{"type": "text", "text": "a.rs"}]}]});
        assert_eq!(search_text(&result), "a.rs");
        let codex_call = json!({"type": "response_item", "payload": {"type": "function_call",
            "name": "exec", "arguments": "{\"cmd\":\"rg x\"}", "call_id": "c"}});
        assert_eq!(search_text(&codex_call), "exec {\"cmd\":\"rg x\"}");
        assert_eq!(tool_calls(rollout_item(&codex_call))[0].name, "exec");
        let codex_out = json!({"type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "c", "output": "found"}});
        assert_eq!(search_text(&codex_out), "found");
        let event = json!({"type": "event_msg", "payload": {"type": "user_message",
            "message": "hello codex"}});
        assert_eq!(search_text(&event), "hello codex");
        let openai = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2,
                      "prompt_tokens_details": {"cached_tokens": 4}}});
        assert_eq!(search_text(&openai), "f {}");
        assert_eq!(
            token_usage(&openai),
            Some(TokenUsage {
                input: 6,
                output: 2,
                cache_read: 4,
                cache_write: 0
            })
        );
        let odd = json!({"kind": "note", "body": {"words": ["x", 1, "y"]}});
        assert_eq!(search_text(&odd), "x\ny\nnote");
    }
}
