//! Export of a session's history in other tools' formats: a JSON array, JSON
//! lines, OpenAI chat (`{"messages": [...]}`) and Claude Code JSONL.
//!
//! Exports are made so that importing them back with the same format gives
//! the same sessions: OpenAI-shaped messages are written unchanged, and
//! Claude Code lines that were imported from Claude Code are written back as
//! they were, with the lines merged into them (`extra.merged_lines`) and the
//! non-message lines before them (`extra.events`) restored in place. It reads
//! only; it never writes to the store.

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::message;
use crate::object::Session;
use crate::store::Store;
use crate::time::format_rfc3339_ms;

/// What `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// A pretty JSON array of the messages.
    Json,
    /// One message a line.
    Jsonl,
    /// `{"messages": [...]}`, each message in OpenAI chat shape.
    OpenAi,
    /// Claude Code session JSONL.
    ClaudeCode,
}

impl ExportFormat {
    pub fn parse(s: &str) -> Option<ExportFormat> {
        Some(match s {
            "json" => ExportFormat::Json,
            "jsonl" => ExportFormat::Jsonl,
            "openai" => ExportFormat::OpenAi,
            "claude-code" => ExportFormat::ClaudeCode,
            _ => return None,
        })
    }
}

/// The history of `id` with, for each message, the session that added it.
fn history_with_owners(store: &Store, id: ObjectId) -> Result<Vec<(Value, Session)>> {
    let mut chain = Vec::new();
    let mut cur = Some(id);
    while let Some(c) = cur {
        let s = store.odb().session(&c)?;
        let stop = s.messages.base == 0;
        cur = if stop { None } else { s.first_parent() };
        chain.push((c, s));
    }
    let mut owned: Vec<(ObjectId, usize)> = Vec::new();
    for (k, (id, s)) in chain.iter().enumerate().rev() {
        let base = usize::try_from(s.messages.base).unwrap_or(usize::MAX);
        if base > owned.len() {
            return Err(Error::corrupt(
                *id,
                format!(
                    "it keeps {base} messages of a parent that has {}",
                    owned.len()
                ),
            ));
        }
        owned.truncate(base);
        owned.extend(s.messages.added.iter().map(|m| (*m, k)));
    }
    owned
        .into_iter()
        .map(|(m, k)| Ok((store.odb().blob(&m)?, chain[k].1.clone())))
        .collect()
}

/// Exports the history of session `id`.
pub fn export(store: &Store, id: ObjectId, format: ExportFormat) -> Result<String> {
    let history = history_with_owners(store, id)?;
    let line = |v: &Value| serde_json::to_string(v).expect("a JSON value serializes");
    Ok(match format {
        ExportFormat::Json => {
            let all: Vec<Value> = history.into_iter().map(|(v, _)| v).collect();
            let mut s = serde_json::to_string_pretty(&all).expect("a JSON value serializes");
            s.push('\n');
            s
        }
        ExportFormat::Jsonl => history.iter().map(|(v, _)| line(v) + "\n").collect(),
        ExportFormat::OpenAi => {
            let msgs: Vec<Value> = history.iter().flat_map(|(v, _)| to_openai(v)).collect();
            let mut s = serde_json::to_string_pretty(&json!({ "messages": msgs }))
                .expect("a JSON value serializes");
            s.push('\n');
            s
        }
        ExportFormat::ClaudeCode => {
            let session_id = store.odb().session(&id)?.conversation_id(id).to_hex();
            let mut out = String::new();
            let mut prev: Option<String> = None;
            for (pos, (v, owner)) in history.iter().enumerate() {
                if message::is_claude_code_line(v) {
                    let uuid = v["uuid"].as_str().unwrap_or_default().to_owned();
                    let extra = &owner.metadata.extra;
                    let listed = |key: &str| -> Vec<Value> {
                        extra
                            .get(key)
                            .and_then(|e| e.get(&uuid))
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default()
                    };
                    for e in listed("events") {
                        out += &(line(&e) + "\n");
                    }
                    let merged = listed("merged_lines");
                    out += &(line(&unmerge(v, &merged)) + "\n");
                    for m in &merged {
                        out += &(line(m) + "\n");
                    }
                    prev = Some(uuid);
                } else {
                    let uuid = synthetic_uuid(v, pos);
                    let (ty, message) = to_claude_message(v);
                    out += &(line(&json!({
                        "type": ty,
                        "uuid": uuid,
                        "parentUuid": prev,
                        "sessionId": session_id,
                        "isSidechain": false,
                        "timestamp": format_rfc3339_ms(owner.created_at),
                        "message": message,
                    })) + "\n");
                    prev = Some(uuid);
                }
            }
            out
        }
    })
}

/// The first line of a merged group as it was: its own content parts only.
fn unmerge(v: &Value, merged: &[Value]) -> Value {
    if merged.is_empty() {
        return v.clone();
    }
    let others: usize = merged
        .iter()
        .map(|m| match m.get("message").and_then(|x| x.get("content")) {
            Some(Value::Array(a)) => a.len(),
            Some(Value::String(_)) => 1,
            _ => 0,
        })
        .sum();
    let mut out = v.clone();
    if let Some(Value::Array(parts)) = out.get_mut("message").and_then(|m| m.get_mut("content")) {
        let own = parts.len().saturating_sub(others);
        parts.truncate(own);
    }
    out
}

fn synthetic_uuid(v: &Value, pos: usize) -> String {
    let h = blake3::hash(format!("{pos}\0{v}").as_bytes()).to_hex();
    let h = h.as_str();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A message of another format as a Claude Code (Anthropic) message.
fn to_claude_message(v: &Value) -> (&'static str, Value) {
    let mut out = Vec::new();
    for m in to_openai(v) {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        let text = match m.get("content") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => None,
            Some(c) => message::content_text(c),
        };
        match role {
            "tool" => out.push((
                "user",
                json!({"role": "user", "content": [{
                    "type": "tool_result",
                    "tool_use_id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
                    "content": text.unwrap_or_default(),
                }]}),
            )),
            "assistant" => {
                let mut parts = Vec::new();
                if let Some(t) = text.filter(|t| !t.is_empty()) {
                    parts.push(json!({"type": "text", "text": t}));
                }
                for c in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let f = &c["function"];
                    let args = f.get("arguments").and_then(Value::as_str).unwrap_or("{}");
                    parts.push(json!({
                        "type": "tool_use",
                        "id": c.get("id").cloned().unwrap_or(Value::Null),
                        "name": f.get("name").cloned().unwrap_or(Value::Null),
                        "input": serde_json::from_str::<Value>(args)
                            .unwrap_or_else(|_| json!({"raw": args})),
                    }));
                }
                out.push(("assistant", json!({"role": "assistant", "content": parts})));
            }
            _ => out.push((
                "user",
                json!({"role": "user", "content": text.unwrap_or_default()}),
            )),
        }
    }
    match out.len() {
        0 => ("user", json!({"role": "user", "content": v.to_string()})),
        1 => out.remove(0),
        _ => {
            // Several OpenAI messages from one: keep the first's role, join
            // the content parts.
            let ty = out[0].0;
            let mut parts = Vec::new();
            for (_, m) in out {
                match &m["content"] {
                    Value::Array(a) => parts.extend(a.iter().cloned()),
                    Value::String(s) => parts.push(json!({"type": "text", "text": s})),
                    _ => {}
                }
            }
            (ty, json!({"role": ty, "content": parts}))
        }
    }
}

fn tool_call(id: &Value, name: &Value, arguments: &Value) -> Value {
    let args = match arguments {
        Value::String(s) => s.clone(),
        Value::Null => "{}".to_owned(),
        other => other.to_string(),
    };
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
}

fn text_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => message::content_text(other).unwrap_or_else(|| other.to_string()),
    }
}

/// A message reduced to OpenAI chat messages (one source message can
/// become several: Claude Code puts many tool results in one).
pub fn to_openai(v: &Value) -> Vec<Value> {
    if message::is_openai_chat(v) {
        return vec![v.clone()];
    }
    // Claude Code line.
    if let Some(m) = v.get("message").filter(|m| m.is_object()) {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        let parts = match m.get("content") {
            Some(Value::String(s)) => return vec![json!({"role": role, "content": s})],
            Some(Value::Array(a)) => a.as_slice(),
            _ => &[],
        };
        let mut out = Vec::new();
        let mut texts = Vec::new();
        let mut calls = Vec::new();
        for p in parts {
            match p.get("type").and_then(Value::as_str) {
                Some("text") => texts.push(text_value(&p["text"])),
                Some("tool_use") => calls.push(tool_call(
                    &p["id"],
                    &p["name"],
                    &Value::String(p.get("input").map(Value::to_string).unwrap_or_default()),
                )),
                Some("tool_result") => out.push(json!({
                    "role": "tool",
                    "tool_call_id": p.get("tool_use_id").cloned().unwrap_or(Value::Null),
                    "content": text_value(p.get("content").unwrap_or(&Value::Null)),
                })),
                _ => {}
            }
        }
        if role == "assistant" {
            let mut msg = Map::new();
            msg.insert("role".into(), json!("assistant"));
            msg.insert(
                "content".into(),
                if texts.is_empty() {
                    Value::Null
                } else {
                    json!(texts.join("\n"))
                },
            );
            if !calls.is_empty() {
                msg.insert("tool_calls".into(), Value::Array(calls));
            }
            if texts.is_empty() && msg.get("tool_calls").is_none() {
                return Vec::new();
            }
            return vec![Value::Object(msg)];
        }
        if !texts.is_empty() {
            out.push(json!({"role": role, "content": texts.join("\n")}));
        }
        return out;
    }
    // Claude Code system line (a compaction boundary).
    if v.get("uuid").is_some() && v.get("type").and_then(Value::as_str) == Some("system") {
        return vec![json!({"role": "system", "content": text_value(&v["content"])})];
    }
    // Codex rollout line.
    if let Some(p) = v.get("payload") {
        let ty = p.get("type").and_then(Value::as_str).unwrap_or("");
        return match ty {
            "message" => vec![json!({
                "role": p.get("role").cloned().unwrap_or(json!("user")),
                "content": text_value(p.get("content").unwrap_or(&Value::Null)),
            })],
            "function_call" | "custom_tool_call" => vec![json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [tool_call(
                    &p["call_id"],
                    &p["name"],
                    p.get("arguments").or_else(|| p.get("input")).unwrap_or(&Value::Null),
                )],
            })],
            "function_call_output" | "custom_tool_call_output" => vec![json!({
                "role": "tool",
                "tool_call_id": p["call_id"],
                "content": text_value(p.get("output").unwrap_or(&Value::Null)),
            })],
            "user_message" => vec![json!({"role": "user", "content": text_value(&p["message"])})],
            _ if v.get("type").and_then(Value::as_str) == Some("compacted") => {
                vec![json!({"role": "system", "content": text_value(&p["message"])})]
            }
            // Reasoning and web searches have no chat form.
            _ => Vec::new(),
        };
    }
    vec![json!({"role": "system", "content": v.to_string()})]
}
