//! Export of a session's history in other tools' formats: a JSON array, JSON
//! lines, OpenAI chat (`{"messages": [...]}`) and Claude Code JSONL.
//!
//! Exports are made so that importing them back with the same format gives
//! the same sessions: OpenAI-shaped messages are written unchanged, and
//! Claude Code and Codex lines that were imported from their agent are
//! written back as they were, with the lines merged into them and the
//! non-message lines before them (`extra.events`) restored in place. A line
//! the store keeps raw (objects-format.md, "raw") is written byte for byte,
//! but for the fields a session file written back must change (a Claude
//! Code line's `sessionId`, and a `parentUuid` or `uuid` a fork cut or
//! repeated), which are edited in place, every other byte kept. It reads
//! only; it never writes to the store.

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::message;
use crate::object::{Raw, Session};
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
    /// A Codex rollout (`session_meta`, then `response_item` lines).
    Codex,
}

impl ExportFormat {
    pub fn parse(s: &str) -> Option<ExportFormat> {
        Some(match s {
            "json" => ExportFormat::Json,
            "jsonl" => ExportFormat::Jsonl,
            "openai" => ExportFormat::OpenAi,
            "claude-code" => ExportFormat::ClaudeCode,
            "codex" => ExportFormat::Codex,
            _ => return None,
        })
    }
}

/// A message of a history: its value and, when the store keeps it raw, its
/// source lines.
struct Message {
    value: Value,
    raw: Option<Raw>,
}

/// Whether a history read for an export goes on past a compaction to the
/// messages it summarised: a session file an agent keeps across its own
/// compactions holds them (Claude Code's, before its `compact_boundary`
/// line), so its export must too, where a history given to a model is
/// what the compaction left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compactions {
    End,
    Through,
}

/// The history of `id` with, for each message, the session that added it.
fn history_with_owners(
    store: &Store,
    id: ObjectId,
    compactions: Compactions,
) -> Result<Vec<(Message, Session)>> {
    let Owned(history, owners) = history_with_owner_index(store, id, compactions)?;
    Ok(history
        .into_iter()
        .map(|(m, k)| (m, owners[k].clone()))
        .collect())
}

/// A history's messages, each with the index in [`Owned::1`] of the
/// session that added it, and those sessions.
struct Owned(Vec<(Message, usize)>, Vec<Session>);

/// The history of `id`, each message with the session that added it;
/// with [`Compactions::Through`], each compaction's own messages come
/// after the first `compaction.messages` of the session it summarised.
fn history_with_owner_index(
    store: &Store,
    id: ObjectId,
    compactions: Compactions,
) -> Result<Owned> {
    let mut chain = store.history_sessions(&id)?;
    // Content addressing keeps this finite: a summarised session was
    // written before the compaction naming it.
    while let Some(summarised) = match (compactions, chain.last()) {
        (Compactions::Through, Some((_, s))) if s.messages.base == 0 => s
            .compaction
            .as_ref()
            .filter(|c| c.messages > 0)
            .map(|c| c.session),
        _ => None,
    } {
        chain.extend(store.history_sessions(&summarised)?);
    }
    let mut owned: Vec<(ObjectId, usize)> = Vec::new();
    // Where the current session's own list starts in `owned`: after what
    // the compactions before it summarised.
    let mut start = 0usize;
    for (k, (id, s)) in chain.iter().enumerate().rev() {
        let compaction = match (&s.compaction, compactions) {
            (Some(c), Compactions::Through) if s.messages.base == 0 && k + 1 < chain.len() => {
                Some(c.messages)
            }
            _ => None,
        };
        let kept = compaction.unwrap_or(s.messages.base);
        let kept = usize::try_from(kept).unwrap_or(usize::MAX);
        let own = owned.len() - start;
        if kept > own {
            return Err(Error::corrupt(
                *id,
                format!("it keeps {kept} messages of a parent that has {own}"),
            ));
        }
        owned.truncate(start + kept);
        if compaction.is_some() {
            start += kept;
        }
        owned.extend(s.messages.added.iter().map(|m| (*m, k)));
    }
    // Read one by one (each kept as its source wrote it, when it was):
    // where they live looked up first, for the lot.
    let ids: Vec<ObjectId> = owned.iter().map(|(m, _)| *m).collect();
    store.odb().backend().locate_ahead(&ids)?;
    let history = owned
        .into_iter()
        .map(|(m, k)| {
            let (value, raw) = store.odb().message(&m)?;
            Ok((Message { value, raw }, k))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Owned(history, chain.into_iter().map(|(_, s)| s).collect()))
}

/// A line of a session file being written: its value and, for a line the
/// source wrote, its exact text, which is what gets written. A change to a
/// source line's value goes through [`OutLine::set`], which edits the text
/// in place (or, should that fail, drops it: the value is written).
#[derive(Debug, Clone)]
struct OutLine {
    value: Value,
    text: Option<String>,
}

impl OutLine {
    fn made(value: Value) -> OutLine {
        OutLine { value, text: None }
    }

    fn exact(value: Value, text: &str) -> OutLine {
        OutLine {
            value,
            text: Some(text.to_owned()),
        }
    }

    /// An entry as a session's `extra.events` or a record's
    /// `trailing_events` keep it: a line's exact text (a string), or a
    /// value.
    fn kept(kept: &Value) -> OutLine {
        match crate::import::event_value(kept) {
            std::borrow::Cow::Owned(v) => OutLine {
                value: v,
                text: kept.as_str().map(str::to_owned),
            },
            std::borrow::Cow::Borrowed(v) => OutLine::made(v.clone()),
        }
    }

    /// Sets a top-level key of an object line to `new`.
    fn set(&mut self, key: &str, new: Value) {
        let Some(o) = self.value.as_object_mut() else {
            return;
        };
        if o.get(key) == Some(&new) {
            return;
        }
        if let Some(t) = &self.text {
            self.text = if o.contains_key(key) {
                replace_top_level(t, key, &new)
            } else {
                None
            };
        }
        o.insert(key.to_owned(), new);
    }

    fn write(&self, out: &mut String) {
        match &self.text {
            Some(t) => out.push_str(t),
            None => {
                out.push_str(&serde_json::to_string(&self.value).expect("a JSON value serializes"))
            }
        }
        out.push('\n');
    }
}

/// `text`, a JSON object, with the value of its top-level `key` replaced by
/// `new`, every other byte kept; `None` when the key is not found.
fn replace_top_level(text: &str, key: &str, new: &Value) -> Option<String> {
    let span = top_level_value(text, key)?;
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..span.start]);
    out.push_str(&serde_json::to_string(new).ok()?);
    out.push_str(&text[span.end..]);
    Some(out)
}

/// Where the value of `key` is in `text`, a JSON object (valid JSON: the
/// scan trusts it), if it has that key at the top level.
fn top_level_value(text: &str, key: &str) -> Option<std::ops::Range<usize>> {
    let b = text.as_bytes();
    let ws = |mut i: usize| {
        while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
            i += 1;
        }
        i
    };
    // The end of the string starting at `i` (its opening quote), past the
    // closing quote.
    let string_end = |mut i: usize| -> Option<usize> {
        i += 1;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
        None
    };
    let value_end = |i: usize| -> Option<usize> {
        match *b.get(i)? {
            b'"' => string_end(i),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut j = i;
                while j < b.len() {
                    match b[j] {
                        b'"' => {
                            j = string_end(j)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(j + 1);
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                }
                None
            }
            _ => {
                let mut j = i;
                while j < b.len()
                    && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    j += 1;
                }
                Some(j)
            }
        }
    };
    let mut i = ws(0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = ws(i + 1);
    while b.get(i) == Some(&b'"') {
        let end = string_end(i)?;
        let name: String = serde_json::from_str(&text[i..end]).ok()?;
        i = ws(end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = ws(i + 1);
        let stop = value_end(start)?;
        if name == key {
            return Some(start..stop);
        }
        i = ws(stop);
        if b.get(i) != Some(&b',') {
            return None;
        }
        i = ws(i + 1);
    }
    None
}

fn write_lines(lines: &[OutLine]) -> String {
    let mut out = String::new();
    for l in lines {
        l.write(&mut out);
    }
    out
}

/// Exports the history of session `id`.
pub fn export(store: &Store, id: ObjectId, format: ExportFormat) -> Result<String> {
    Ok(match format {
        // The lines as stored: each message's JSON text made straight from
        // its verified bytes, no value built.
        ExportFormat::Jsonl => String::from_utf8(store.load_message_bytes(&id)?.to_jsonl()?)
            .expect("JSON text is UTF-8"),
        ExportFormat::Json => {
            let all: Vec<Value> = history_with_owners(store, id, Compactions::End)?
                .into_iter()
                .map(|(m, _)| m.value)
                .collect();
            let mut s = serde_json::to_string_pretty(&all).expect("a JSON value serializes");
            s.push('\n');
            s
        }
        ExportFormat::OpenAi => {
            let stored: Vec<Value> = history_with_owners(store, id, Compactions::End)?
                .into_iter()
                .map(|(m, _)| m.value)
                .collect();
            // The history `checkout` gives a model (`state.json`'s
            // `message_history`): chat messages as they are, any other
            // history converted as a whole (meta lines left out, each
            // call's results right after it, one response's lines merged).
            let msgs: Vec<Value> = if crate::message::needs_conversion(&stored) {
                crate::message::chat_history(&stored)
            } else {
                stored.iter().flat_map(to_openai).collect()
            };
            let mut s = serde_json::to_string_pretty(&json!({ "messages": msgs }))
                .expect("a JSON value serializes");
            s.push('\n');
            s
        }
        ExportFormat::ClaudeCode => {
            let session_id = store.odb().session(&id)?.conversation_id(id).to_hex();
            write_lines(&claude_lines(
                &history_with_owners(store, id, Compactions::Through)?,
                &session_id,
            ))
        }
        ExportFormat::Codex => {
            // Deterministic: the conversation's id as the thread id, the
            // head's time as the rollout's.
            let head = store.odb().session(&id)?;
            let hex = head.conversation_id(id).to_hex();
            codex_rollout(store, id, &uuid_from_hex(&hex), None, &[], head.created_at)?.text
        }
    })
}

/// The history as Claude Code lines: lines imported from Claude Code as
/// they were (a raw message's lines byte for byte; a blob's merged lines
/// split again), the non-message lines before them restored, other messages
/// converted, chained by fresh uuids, with `session_id` as their sessionId.
fn claude_lines(history: &[(Message, Session)], session_id: &str) -> Vec<OutLine> {
    let mut out = Vec::new();
    let mut prev: Option<String> = None;
    for (pos, (m, owner)) in history.iter().enumerate() {
        let v = &m.value;
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
            out.extend(listed("events").iter().map(OutLine::kept));
            match &m.raw {
                Some(raw) => {
                    for line in raw.lines() {
                        match crate::object::raw::value_of_lines(&[line]) {
                            Ok(lv) => out.push(OutLine::exact(lv, line)),
                            Err(_) => out.push(OutLine::made(v.clone())),
                        }
                    }
                }
                None => {
                    let merged = listed("merged_lines");
                    out.push(OutLine::made(unmerge(v, &merged)));
                    out.extend(merged.into_iter().map(OutLine::made));
                }
            }
            prev = Some(uuid);
        } else {
            let uuid = synthetic_uuid(v, pos);
            let (ty, message) = to_claude_message(v);
            out.push(OutLine::made(json!({
                "type": ty,
                "uuid": uuid,
                "parentUuid": prev,
                "sessionId": session_id,
                "isSidechain": false,
                "timestamp": format_rfc3339_ms(owner.created_at),
                "message": message,
            })));
            prev = Some(uuid);
        }
    }
    out
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
    uuid_from_hex(h.as_str())
}

/// The first 32 of 64 hex digits in a uuid's 8-4-4-4-12 shape.
fn uuid_from_hex(h: &str) -> String {
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
    if message::is_plain_chat(v) {
        return vec![v.clone()];
    }
    // Chat with keys of its own (SWE-agent's `agent`, `thought`, `action`,
    // `tool_call_ids`): the keys an API takes, one tool message per call
    // answered.
    if message::is_openai_chat(v) {
        let mut msg = Map::new();
        for k in ["role", "content", "name", "tool_calls"] {
            if let Some(x) = v.get(k) {
                msg.insert(k.into(), x.clone());
            }
        }
        if msg.get("role").and_then(Value::as_str) != Some("tool") {
            return vec![Value::Object(msg)];
        }
        let ids: Vec<Value> = match (v.get("tool_call_ids"), v.get("tool_call_id")) {
            (Some(Value::Array(ids)), _) if !ids.is_empty() => ids.clone(),
            (_, Some(id)) if id.is_string() => vec![id.clone()],
            // Answering no call it names: a user message.
            _ => {
                let content = text_value(v.get("content").unwrap_or(&Value::Null));
                return vec![json!({"role": "user", "content": content})];
            }
        };
        return ids
            .into_iter()
            .map(|id| {
                let mut m = msg.clone();
                m.insert("tool_call_id".into(), id);
                Value::Object(m)
            })
            .collect();
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

/// A session file written back for its agent to resume (`claude --resume`,
/// `codex resume`).
#[derive(Debug, Clone)]
pub struct AgentSession {
    /// JSON lines, each ending in `\n`.
    pub text: String,
    /// The working directory the session ran in, from its lines (the last
    /// that names one) or the Codex `session_meta`.
    pub cwd: Option<String>,
    pub lines: usize,
}

impl AgentSession {
    /// `lines` as a JSON-lines file.
    fn from_lines(lines: &[OutLine], cwd: Option<String>) -> AgentSession {
        let text = write_lines(lines);
        AgentSession {
            text,
            cwd,
            lines: lines.len(),
        }
    }
}

/// The history of `id` as a Claude Code session file with sessionId
/// `session_id`: the lines [`export`] writes, each line that carries a
/// sessionId given this one, `cwd` and `version` kept (and given to
/// converted messages), and the `parentUuid` chain made whole: a uuid seen
/// twice (a line repeated after a compaction) gets a fresh one, and a
/// parent that is not an earlier line of the file (cut away by a fork or a
/// compaction) becomes the line before. A line the store keeps raw is
/// written as its source wrote it, those fields edited in place when they
/// change (so a whole conversation exported under its own sessionId is its
/// source's lines byte for byte); a line kept as a blob is written from its
/// value (keys in the store's order, not the source's). `trailing` are
/// lines to end with (the conversation's `trailing_events`, when `id` is
/// its head: values, or lines' exact text); `cwd` is the working directory
/// when no line names one (a history from another agent).
pub fn claude_code_session(
    store: &Store,
    id: ObjectId,
    session_id: &str,
    trailing: &[Value],
    cwd: Option<&str>,
) -> Result<AgentSession> {
    let history = history_with_owners(store, id, Compactions::Through)?;
    let mut lines = claude_lines(&history, session_id);
    lines.extend(trailing.iter().map(OutLine::kept));
    let last_str = |key: &str, lines: &[OutLine]| {
        lines
            .iter()
            .rev()
            .find_map(|l| l.value.get(key).and_then(Value::as_str).map(str::to_owned))
    };
    let cwd = last_str("cwd", &lines).or_else(|| cwd.map(str::to_owned));
    let version = last_str("version", &lines);
    let mut seen = std::collections::HashSet::new();
    let mut renamed = std::collections::HashMap::new();
    let mut last: Option<String> = None;
    for (pos, l) in lines.iter_mut().enumerate() {
        let fresh = synthetic_uuid(&l.value, pos);
        let Some(o) = l.value.as_object() else {
            continue;
        };
        let has_session = o.contains_key("sessionId");
        let uuid = o.get("uuid").and_then(Value::as_str).map(str::to_owned);
        let has_cwd = o.contains_key("cwd");
        let parent = o
            .get("parentUuid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if has_session {
            l.set("sessionId", json!(session_id));
        }
        let Some(uuid) = uuid else {
            continue;
        };
        // A line its agent wrote is valid as it is; only a converted one
        // needs these.
        if !has_cwd && l.text.is_none() {
            if let Some(c) = &cwd {
                l.set("cwd", json!(c));
            }
            if let Some(v) = &version {
                l.set("version", json!(v));
            }
            l.set("userType", json!("external"));
        }
        if let Some(p) = parent {
            let p = renamed.get(&p).cloned().unwrap_or(p);
            let p = if seen.contains(&p) {
                Some(p)
            } else {
                last.clone()
            };
            l.set("parentUuid", json!(p));
        }
        let uuid = if seen.contains(&uuid) {
            renamed.insert(uuid, fresh.clone());
            l.set("uuid", json!(fresh));
            fresh
        } else {
            renamed.remove(&uuid);
            uuid
        };
        seen.insert(uuid.clone());
        last = Some(uuid);
    }
    Ok(AgentSession::from_lines(&lines, cwd))
}

fn is_rollout_line(v: &Value) -> bool {
    v.get("type").is_some_and(Value::is_string) && v.get("payload").is_some_and(Value::is_object)
}

/// The history of `id` as a Codex rollout whose thread id is `thread_id`,
/// written at `now_ms`: a `session_meta` line first (the source's, from
/// `source_meta`, with the new id and time and `forked_from_id` naming the
/// source), then each message: lines imported from a rollout as they were,
/// with the `event_msg` and `turn_context` lines that came before them;
/// other messages as `response_item` lines (message, function_call,
/// function_call_output); then `trailing` (the conversation's
/// `trailing_events`, when `id` is its head).
pub fn codex_rollout(
    store: &Store,
    id: ObjectId,
    thread_id: &str,
    source_meta: Option<&Value>,
    trailing: &[Value],
    now_ms: i64,
) -> Result<AgentSession> {
    let Owned(history, owners) = history_with_owner_index(store, id, Compactions::End)?;
    let now = format_rfc3339_ms(now_ms);
    let mut meta = source_meta
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(src) = meta.get("id").cloned() {
        meta.insert("forked_from_id".into(), src);
    }
    meta.insert("id".into(), json!(thread_id));
    meta.insert("timestamp".into(), json!(now));
    let cwd = meta.get("cwd").and_then(Value::as_str).map(str::to_owned);
    meta.entry("originator").or_insert(json!("sessctl"));
    meta.entry("cli_version")
        .or_insert(json!(env!("CARGO_PKG_VERSION")));
    let mut lines = vec![OutLine::made(
        json!({"timestamp": now, "type": "session_meta", "payload": meta}),
    )];
    let mut k = 0;
    while k < history.len() {
        // The run of messages one session added (its events are keyed by
        // the source's line numbers).
        let owner = &owners[history[k].1];
        let mut end = k + 1;
        while end < history.len() && history[end].1 == history[k].1 {
            end += 1;
        }
        let run: Vec<&Message> = history[k..end].iter().map(|(m, _)| m).collect();
        let events = codex_events(owner, run.len());
        for (i, m) in run.iter().enumerate() {
            let v = &m.value;
            lines.extend(events[i].iter().map(OutLine::kept));
            if is_rollout_line(v) {
                // A raw rollout line is one line, written as it was.
                match m.raw.as_ref().map(|r| r.lines().collect::<Vec<_>>()) {
                    Some(l) if l.len() == 1 => lines.push(OutLine::exact(v.clone(), l[0])),
                    _ => lines.push(OutLine::made(v.clone())),
                }
            } else {
                let ts = format_rfc3339_ms(owner.created_at);
                for p in to_codex_items(v) {
                    lines.push(OutLine::made(
                        json!({"timestamp": ts, "type": "response_item", "payload": p}),
                    ));
                }
            }
        }
        k = end;
    }
    lines.extend(trailing.iter().map(OutLine::kept));
    Ok(AgentSession::from_lines(&lines, cwd))
}

/// The non-message lines before each of `run` (the messages one session
/// added), from the session's `extra.events`, which keys them by the
/// source line number `L<n>` of the message they precede. A rollout's
/// lines are consecutive, so the message after the one at line `p` is at
/// the next key `q` whose events fill the lines between (`q - p - 1` of
/// them), or else at `p + 1`; the first message's line is the one that
/// makes every key land on a message. When none does (blank or unreadable
/// lines in the source), all events go before the first message, in order.
fn codex_events(owner: &Session, run: usize) -> Vec<Vec<Value>> {
    let mut out = vec![Vec::new(); run];
    let Some(map) = owner
        .metadata
        .extra
        .get("events")
        .and_then(Value::as_object)
    else {
        return out;
    };
    let mut keyed: Vec<(u64, &Vec<Value>)> = map
        .iter()
        .filter_map(|(key, v)| {
            let n = key.strip_prefix('L')?.parse().ok()?;
            Some((n, v.as_array()?))
        })
        .collect();
    if keyed.is_empty() || run == 0 {
        return out;
    }
    keyed.sort_by_key(|(n, _)| *n);
    let (k1, e1) = (keyed[0].0, keyed[0].1.len() as u64);
    let below = k1.saturating_sub(e1 + 1);
    let starts = std::iter::once(k1).chain((below.saturating_sub(run as u64)..=below).rev());
    for start in starts {
        let mut p = start;
        let mut placed = vec![None; run];
        let mut next = keyed
            .iter()
            .position(|(n, _)| *n >= p)
            .unwrap_or(keyed.len());
        for (i, slot) in placed.iter_mut().enumerate() {
            if i > 0 {
                p = match keyed.get(next) {
                    Some((q, e)) if *q > p && q - p - 1 == e.len() as u64 => *q,
                    _ => p + 1,
                };
            }
            if let Some((q, e)) = keyed.get(next) {
                if *q == p {
                    *slot = Some(*e);
                    next += 1;
                }
            }
        }
        if next == keyed.len() {
            for (i, e) in placed.into_iter().enumerate() {
                if let Some(e) = e {
                    out[i] = e.clone();
                }
            }
            return out;
        }
    }
    out[0] = keyed.iter().flat_map(|(_, v)| v.iter().cloned()).collect();
    out
}

/// A message of another format as Codex `response_item` payloads.
fn to_codex_items(v: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for m in to_openai(v) {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        let text = match m.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(c) => message::content_text(c).unwrap_or_default(),
        };
        match role {
            "tool" => out.push(json!({
                "type": "function_call_output",
                "call_id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
                "output": text,
            })),
            _ => {
                if !text.is_empty() || m.get("tool_calls").is_none() {
                    let part = if role == "assistant" {
                        "output_text"
                    } else {
                        "input_text"
                    };
                    out.push(json!({
                        "type": "message",
                        "role": role,
                        "content": [{"type": part, "text": text}],
                    }));
                }
                for c in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    out.push(json!({
                        "type": "function_call",
                        "name": c["function"].get("name").cloned().unwrap_or(Value::Null),
                        "arguments": c["function"]
                            .get("arguments")
                            .cloned()
                            .unwrap_or(json!("{}")),
                        "call_id": c.get("id").cloned().unwrap_or(Value::Null),
                    }));
                }
            }
        }
    }
    out
}
