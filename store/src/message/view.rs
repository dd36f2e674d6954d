//! The normalized view of one message: what every reader of the store asks
//! of a message (whose it is, what it says, which tools it called or
//! answered, what the model thought, what it cost), computed from the
//! message as it was written. The stored message is never changed: a view
//! is derived on every read, so a better reading of a format improves old
//! stores too.
//!
//! Shapes read (see [`Shape`]): Claude Code transcript lines, Codex rollout
//! lines (`{timestamp, type, payload}`), OpenAI chat messages, OpenAI Agents
//! SDK / Responses API items (`{"role", "content"}` with `input_text` parts,
//! `function_call`, `function_call_output`, `reasoning`), SWE-agent history
//! messages (OpenAI chat with `agent`, `thought`, `action`, `tool_call_ids`),
//! LangChain's serialized messages, and bare Anthropic messages (`tool_use`
//! and `tool_result` parts).

use serde_json::{json, Value};

use super::{content_text, langchain, ToolCall, ToolResult};

/// The key a compaction checkpoint message carries
/// (`compact::CHECKPOINT_MESSAGE_KEY` is this one): defined here because
/// `compact.rs` reads messages through this module, not the other way.
pub(crate) const CHECKPOINT_MESSAGE_KEY: &str = "sessctl_checkpoint";

/// Who speaks in a message, as chat APIs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Instructions: system and developer messages, compaction summaries,
    /// and lines that are not messages (see [`MessageView::meta`]).
    System,
    User,
    Assistant,
    /// A tool's answer on its own (OpenAI `role: "tool"`, Codex
    /// `function_call_output`). Claude Code puts tool results in user lines;
    /// those keep role `User` and carry [`MessageView::tool_results`].
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The format a message was recognised as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    ClaudeCode,
    Codex,
    OpenAiChat,
    /// An OpenAI Agents SDK / Responses API item.
    AgentsSdk,
    SweAgent,
    LangChain,
    /// Anything else: read as well as it can be (`role`, `content`).
    Unknown,
}

/// Tokens one line reports, in the source's own split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MessageUsage {
    /// Prompt tokens not read from a cache.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Prompt tokens read from a cache (Anthropic `cache_read_input_tokens`,
    /// OpenAI `cached_input_tokens`).
    pub cache_read_tokens: u64,
    /// Prompt tokens written to a cache (Anthropic
    /// `cache_creation_input_tokens`).
    pub cache_write_tokens: u64,
}

/// One message, normalized. See the module's documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageView {
    pub shape: Shape,
    pub role: Role,
    /// The text a person reads: text parts joined with newlines; empty for
    /// a message that only calls tools or answers them.
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub tool_results: Vec<ToolResult>,
    /// The model's reasoning as text: Claude `thinking` parts, a Codex or
    /// Responses `reasoning` item's summary. Never an encrypted blob or a
    /// signature; `None` when there is no readable text.
    pub reasoning: Option<String>,
    /// The model that wrote it, when the line says.
    pub model: Option<String>,
    /// What the line reports it cost, when it does (Claude Code
    /// `message.usage`, a Codex `token_count` event).
    pub usage: Option<MessageUsage>,
    /// Not part of the conversation a model sees: Claude Code `isMeta`,
    /// `summary`, `file-history-snapshot` and other non-message lines, Codex
    /// `event_msg`, `turn_context` and `session_meta` lines.
    pub meta: bool,
    /// A user-role message the agent wrote, not a person: Codex's
    /// `<environment_context>` and AGENTS.md, Claude Code's
    /// `<command-name>` / `<local-command-stdout>` lines and compaction
    /// summaries. The model sees it; previews and titles skip it.
    pub injected: bool,
    /// The id of the API response the message belongs to (Claude Code
    /// `message.id`): lines of one response share it.
    pub response_id: Option<String>,
}

impl MessageView {
    fn new(shape: Shape, role: Role) -> MessageView {
        MessageView {
            shape,
            role,
            text: String::new(),
            tool_calls: Vec::new(),
            tool_results: Vec::new(),
            reasoning: None,
            model: None,
            usage: None,
            meta: false,
            injected: false,
            response_id: None,
        }
    }

    fn meta_line(shape: Shape) -> MessageView {
        MessageView {
            meta: true,
            ..MessageView::new(shape, Role::System)
        }
    }

    /// The text of a prompt a person wrote: a user message's non-blank
    /// text, neither meta nor injected; for a slash command Claude Code
    /// logged as `<command-name>` tags, the command and its arguments
    /// (`/review src`).
    pub fn prompt_text(&self) -> Option<String> {
        if self.role != Role::User || self.meta {
            return None;
        }
        if let Some(name) = tag(&self.text, "command-name") {
            let args = tag(&self.text, "command-args").unwrap_or("");
            let t = format!("{name} {args}");
            let t = t.trim();
            return (!t.is_empty()).then(|| t.to_owned());
        }
        let t = self.text.trim();
        (!self.injected && !t.is_empty()).then(|| t.to_owned())
    }

    /// Whether the model wrote it: an assistant message (text, tool calls
    /// or reasoning).
    pub fn is_model_output(&self) -> bool {
        self.role == Role::Assistant && !self.meta
    }

    /// The view as JSON (`sessctl show --json`'s `view`): `role`, `text`,
    /// `tool_calls` (`id`, `name`, `arguments`), `tool_results` (`call_id`,
    /// `text`, `is_error`), `reasoning`, `model`, `usage`, `meta`,
    /// `injected`.
    pub fn to_json(&self) -> Value {
        json!({
            "role": self.role.as_str(),
            "text": self.text,
            "tool_calls": self.tool_calls.iter().map(|c| json!({
                "id": c.id, "name": c.name, "arguments": c.arguments,
            })).collect::<Vec<_>>(),
            "tool_results": self.tool_results.iter().map(|r| json!({
                "call_id": r.call_id, "text": r.text, "is_error": r.is_error,
            })).collect::<Vec<_>>(),
            "reasoning": self.reasoning,
            "model": self.model,
            "usage": self.usage.map(|u| json!({
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "cache_read_tokens": u.cache_read_tokens,
                "cache_write_tokens": u.cache_write_tokens,
            })),
            "meta": self.meta,
            "injected": self.injected,
        })
    }

    /// A one-line label for a message with no text: its tool calls, its
    /// results, its reasoning, or what kind of line it is.
    pub fn label(&self) -> String {
        if !self.tool_calls.is_empty() {
            let names: Vec<&str> = self.tool_calls.iter().map(|c| c.name.as_str()).collect();
            return format!("calls {}", names.join(", "));
        }
        if !self.tool_results.is_empty() {
            return format!(
                "{} tool result{}",
                self.tool_results.len(),
                if self.tool_results.len() == 1 {
                    ""
                } else {
                    "s"
                }
            );
        }
        if self.reasoning.is_some() {
            return "reasoning".to_owned();
        }
        String::new()
    }
}

/// The trimmed text between `<name>` and `</name>` in `text`.
fn tag<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find(&format!("</{name}>"))?;
    Some(text[start..start + len].trim())
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

fn owned(v: &Value, k: &str) -> Option<String> {
    s(v, k).map(str::to_owned)
}

fn role_named(name: &str) -> Option<Role> {
    Some(match name {
        "system" | "developer" => Role::System,
        "user" | "human" => Role::User,
        "assistant" | "ai" | "model" => Role::Assistant,
        "tool" | "function" | "ipython" => Role::Tool,
        _ => return None,
    })
}

/// Text of a tool result's or output's content: a string, text parts, or
/// else the JSON itself.
fn result_text(c: &Value) -> String {
    match c {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => content_text_nl(other).unwrap_or_else(|| other.to_string()),
    }
}

/// Like [`content_text`], parts joined with newlines (for display).
fn content_text_nl(c: &Value) -> Option<String> {
    match c {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| !matches!(s(p, "type"), Some("thinking" | "redacted_thinking")))
                .filter_map(|p| s(p, "text").or_else(|| p.as_str()))
                .collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => content_text(c),
    }
}

fn usage_of(u: &Value) -> Option<MessageUsage> {
    if !u.is_object() {
        return None;
    }
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("cached_input_tokens")
        + u.get("input_tokens_details").map_or(0, |d| {
            d.get("cached_tokens").and_then(Value::as_u64).unwrap_or(0)
        });
    let input = n("input_tokens").max(n("prompt_tokens"));
    Some(MessageUsage {
        // OpenAI counts cached tokens inside input; Anthropic apart.
        input_tokens: input.saturating_sub(cached),
        output_tokens: n("output_tokens").max(n("completion_tokens")),
        cache_read_tokens: n("cache_read_input_tokens") + cached,
        cache_write_tokens: n("cache_creation_input_tokens"),
    })
}

/// Whether a user text is one an agent injects.
fn injected_text(t: &str) -> bool {
    let t = t.trim_start();
    t.starts_with('<')
        || t.starts_with("# AGENTS.md")
        || t.starts_with("Caveat: The messages below")
        // Claude Code's note that the user stopped a turn.
        || t.starts_with("[Request interrupted by user")
}

/// Reads `content` (a string, or parts of any of the shapes) into `out`.
fn read_content(out: &mut MessageView, content: Option<&Value>) {
    let mut texts: Vec<String> = Vec::new();
    let mut thoughts: Vec<String> = Vec::new();
    match content {
        Some(Value::String(t)) => texts.push(t.clone()),
        Some(Value::Array(parts)) => {
            for p in parts {
                match s(p, "type") {
                    Some("text" | "input_text" | "output_text") | None => {
                        if let Some(t) = s(p, "text").or_else(|| p.as_str()) {
                            texts.push(t.to_owned());
                        }
                    }
                    Some("refusal") => texts.extend(owned(p, "refusal")),
                    Some("thinking") => thoughts.extend(owned(p, "thinking")),
                    Some("tool_use") => out.tool_calls.push(ToolCall {
                        id: owned(p, "id"),
                        name: owned(p, "name").unwrap_or_default(),
                        arguments: p.get("input").cloned().unwrap_or(Value::Null),
                    }),
                    Some("tool_result") => {
                        let c = p.get("content").cloned().unwrap_or(Value::Null);
                        out.tool_results.push(ToolResult {
                            call_id: owned(p, "tool_use_id"),
                            text: result_text(&c),
                            content: c,
                            is_error: p.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                        });
                    }
                    // Images, documents, redacted thinking: no text.
                    _ => {}
                }
            }
        }
        _ => {}
    }
    out.text = texts.join("\n");
    if !thoughts.is_empty() {
        out.reasoning = Some(thoughts.join("\n"));
    }
}

/// OpenAI chat `tool_calls` (and LangChain's, with `args`).
fn read_chat_tool_calls(out: &mut MessageView, m: &Value) {
    if let Some(Value::Array(calls)) = m.get("tool_calls") {
        for c in calls {
            let f = c.get("function").unwrap_or(c);
            out.tool_calls.push(ToolCall {
                id: owned(c, "id"),
                name: owned(f, "name").unwrap_or_default(),
                arguments: f
                    .get("arguments")
                    .or_else(|| f.get("args"))
                    .cloned()
                    .unwrap_or(Value::Null),
            });
        }
    }
}

/// A Responses API item (`type` plus fields), as Codex wraps it in
/// `payload` and the Agents SDK writes it bare. `None` when `item` is not
/// one.
fn responses_item(item: &Value, shape: Shape) -> Option<MessageView> {
    let ty = s(item, "type");
    let mut out = match ty {
        Some("message") | None => {
            let role = role_named(s(item, "role")?)?;
            let mut out = MessageView::new(shape, role);
            read_content(&mut out, item.get("content"));
            if role == Role::User && injected_text(&out.text) {
                out.injected = true;
            }
            out
        }
        Some("function_call" | "custom_tool_call" | "local_shell_call" | "tool_search_call") => {
            let mut out = MessageView::new(shape, Role::Assistant);
            out.tool_calls.push(ToolCall {
                id: owned(item, "call_id").or_else(|| owned(item, "id")),
                name: owned(item, "name").unwrap_or_else(|| ty.unwrap_or("").to_owned()),
                arguments: item
                    .get("arguments")
                    .or_else(|| item.get("input"))
                    .or_else(|| item.get("action"))
                    .cloned()
                    .unwrap_or(Value::Null),
            });
            out
        }
        Some(
            "function_call_output"
            | "custom_tool_call_output"
            | "local_shell_call_output"
            | "tool_search_output",
        ) => {
            let mut out = MessageView::new(shape, Role::Tool);
            let c = item.get("output").cloned().unwrap_or(Value::Null);
            out.tool_results.push(ToolResult {
                call_id: owned(item, "call_id"),
                text: result_text(&c),
                content: c,
                is_error: false,
            });
            out
        }
        Some("reasoning") => {
            let mut out = MessageView::new(shape, Role::Assistant);
            let mut texts: Vec<String> = Vec::new();
            for key in ["summary", "content"] {
                if let Some(Value::Array(parts)) = item.get(key) {
                    texts.extend(parts.iter().filter_map(|p| owned(p, "text")));
                }
            }
            if !texts.is_empty() {
                out.reasoning = Some(texts.join("\n"));
            }
            out
        }
        Some("web_search_call") => {
            // Searched and answered inside one response: no call to answer.
            let mut out = MessageView::new(shape, Role::Assistant);
            let a = item.get("action").unwrap_or(&Value::Null);
            if let Some(q) = s(a, "query") {
                out.reasoning = Some(format!("web search: {q}"));
            }
            out
        }
        _ => return None,
    };
    out.model = owned(item, "model");
    Some(out)
}

fn claude_code(v: &Value, ty: &str) -> MessageView {
    let meta = v.get("isMeta").and_then(Value::as_bool) == Some(true);
    let m = match v.get("message").filter(|m| m.is_object()) {
        Some(m) if matches!(ty, "user" | "assistant") => m,
        _ => {
            if ty == "system" && s(v, "subtype") == Some("compact_boundary") {
                let mut out = MessageView::new(Shape::ClaudeCode, Role::System);
                out.text = owned(v, "content").unwrap_or_default();
                out.injected = true;
                return out;
            }
            let mut out = MessageView::meta_line(Shape::ClaudeCode);
            out.text = owned(v, "summary")
                .or_else(|| owned(v, "content"))
                .unwrap_or_default();
            return out;
        }
    };
    let role = s(m, "role")
        .and_then(role_named)
        .unwrap_or(if ty == "assistant" {
            Role::Assistant
        } else {
            Role::User
        });
    let mut out = MessageView::new(Shape::ClaudeCode, role);
    read_content(&mut out, m.get("content"));
    out.meta = meta;
    out.injected = v.get("isCompactSummary").and_then(Value::as_bool) == Some(true)
        || (role == Role::User && injected_text(&out.text));
    out.model = owned(m, "model").filter(|m| m != "<synthetic>");
    out.usage = m.get("usage").and_then(usage_of);
    out.response_id = owned(m, "id");
    out
}

fn codex(ty: &str, p: &Value) -> MessageView {
    match ty {
        "response_item" => responses_item(p, Shape::Codex).unwrap_or_else(|| {
            let mut out = MessageView::meta_line(Shape::Codex);
            out.text = s(p, "type").unwrap_or("").to_owned();
            out
        }),
        "compacted" => {
            let mut out = MessageView::new(Shape::Codex, Role::System);
            out.text = owned(p, "message").unwrap_or_default();
            out.injected = true;
            out
        }
        "event_msg" if s(p, "type") == Some("user_message") => {
            // A Desktop rollout's only record of a prompt.
            let mut out = MessageView::new(Shape::Codex, Role::User);
            out.text = owned(p, "message").unwrap_or_default();
            out.injected = injected_text(&out.text);
            out
        }
        _ => {
            let mut out = MessageView::meta_line(Shape::Codex);
            out.model = owned(p, "model");
            if s(p, "type") == Some("token_count") {
                out.usage = p
                    .get("info")
                    .and_then(|i| i.get("last_token_usage"))
                    .and_then(usage_of);
            }
            out.text = owned(p, "message")
                .or_else(|| owned(p, "thread_name"))
                .unwrap_or_default();
            out
        }
    }
}

/// The normalized view of a message as stored. Never fails: a message of
/// no known shape reads as its `role` and `content` if it has them, else as
/// a system message holding its JSON.
pub fn view(v: &Value) -> MessageView {
    let ty = s(v, "type");
    // Codex rollout line.
    if let (Some(ty), Some(p)) = (ty, v.get("payload").filter(|p| p.is_object())) {
        if v.get("timestamp").is_some() || ty == "response_item" || ty == "event_msg" {
            return codex(ty, p);
        }
    }
    // Claude Code line.
    if v.get("uuid").is_some_and(Value::is_string)
        || (v.get("sessionId").is_some() && v.get("message").is_some())
        || matches!(
            ty,
            Some("summary" | "file-history-snapshot" | "queue-operation")
        )
        || (matches!(ty, Some("user" | "assistant"))
            && v.get("message").is_some_and(Value::is_object))
    {
        return claude_code(v, ty.unwrap_or(""));
    }
    // LangChain message.
    if let Some((role, data)) = langchain(v) {
        let mut out = MessageView::new(Shape::LangChain, role_named(role).unwrap_or(Role::User));
        read_content(&mut out, data.get("content"));
        read_chat_tool_calls(&mut out, data);
        if out.role == Role::Tool {
            let c = data.get("content").cloned().unwrap_or(Value::Null);
            out.tool_results.push(ToolResult {
                call_id: owned(data, "tool_call_id"),
                text: result_text(&c),
                content: c,
                is_error: s(data, "status") == Some("error"),
            });
            out.text.clear();
        }
        return out;
    }
    // A Responses API item (the Agents SDK's): `type` names the item, or a
    // message whose content parts are `input_text` / `output_text`.
    let responses_parts = v.get("content").and_then(Value::as_array).is_some_and(|a| {
        a.iter()
            .any(|p| matches!(s(p, "type"), Some("input_text" | "output_text")))
    });
    if ty.is_some() || responses_parts {
        if let Some(out) = responses_item(v, Shape::AgentsSdk) {
            return out;
        }
    }
    // OpenAI chat (SWE-agent's history too), or a bare Anthropic message.
    if let Some(role) = s(v, "role").and_then(role_named) {
        let shape = if v.get("agent").is_some() || v.get("tool_call_ids").is_some() {
            Shape::SweAgent
        } else if ty.is_none() {
            Shape::OpenAiChat
        } else {
            Shape::Unknown
        };
        let mut out = MessageView::new(shape, role);
        read_content(&mut out, v.get("content"));
        read_chat_tool_calls(&mut out, v);
        if role == Role::Tool {
            let c = v.get("content").cloned().unwrap_or(Value::Null);
            let text = result_text(&c);
            let ids: Vec<Option<String>> = match v.get("tool_call_ids") {
                Some(Value::Array(ids)) if !ids.is_empty() => {
                    ids.iter().map(|i| i.as_str().map(str::to_owned)).collect()
                }
                _ => vec![owned(v, "tool_call_id")],
            };
            for call_id in ids {
                out.tool_results.push(ToolResult {
                    call_id,
                    text: text.clone(),
                    content: c.clone(),
                    is_error: false,
                });
            }
            out.text.clear();
        }
        if let Some(t) = s(v, "thought").filter(|t| !t.trim().is_empty()) {
            // SWE-agent's `thought` is the text part of `content`.
            if out.text.is_empty() {
                out.text = t.to_owned();
            }
        }
        // A sessctl compaction checkpoint.
        out.injected |= v.get(CHECKPOINT_MESSAGE_KEY).is_some();
        out.model = owned(v, "model");
        out.usage = v.get("usage").and_then(usage_of);
        return out;
    }
    let mut out = MessageView::meta_line(Shape::Unknown);
    out.text = v.to_string();
    out
}
