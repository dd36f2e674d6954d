//! What the index keeps per session and per conversation, and the JSON
//! form of those summaries (written by earlier versions of the index, and
//! still the form a conversation takes in the listing file).

use serde_json::{json, Value};

use crate::hash::ObjectId;
use crate::object::{SessionStatus, SessionType, Usage};
use crate::refs::{ConversationRecord, ConversationStatus};

/// What the index knows of a session without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    pub id: ObjectId,
    pub conversation: ObjectId,
    pub parents: Vec<ObjectId>,
    pub status: SessionStatus,
    pub created_at: i64,
    /// Length of its full message history.
    pub messages: u64,
    pub display_messages: u64,
    pub usage: Usage,
    pub duration_ms: u64,
    /// The first user message of its history, at most 200 characters.
    pub preview: String,
    /// Where in the history the preview came from.
    pub preview_at: Option<u64>,
    pub title: Option<String>,
    pub session_type: SessionType,
}

/// An open run claim on a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunClaim {
    /// The run's id: the sequence number of the operation that began it.
    pub run: u64,
    pub pid: u32,
    pub started_at: i64,
}

/// A conversation: its record plus what the index derives.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationInfo {
    pub name: String,
    pub record: ConversationRecord,
    /// Its tip (from `refs/heads/` or, when archived, `refs/archive/`).
    pub head: Option<ObjectId>,
    pub last_activity: i64,
    /// Length of the head's history.
    pub messages: u64,
    /// Sessions of this conversation (by conversation id) and their usage.
    pub sessions: u64,
    pub usage: Usage,
    pub preview: String,
    pub running: Option<RunClaim>,
}

fn usage_json(u: &Usage) -> Value {
    json!({"total_tokens": u.total_tokens, "prompt_tokens": u.prompt_tokens,
           "completion_tokens": u.completion_tokens, "requests": u.requests})
}

fn usage_from(v: &Value) -> Usage {
    let g = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        total_tokens: g("total_tokens"),
        prompt_tokens: g("prompt_tokens"),
        completion_tokens: g("completion_tokens"),
        requests: g("requests"),
    }
}

fn id_from(v: &Value) -> Option<ObjectId> {
    v.as_str().and_then(|s| ObjectId::from_hex(s).ok())
}

impl SessionInfo {
    /// The JSON form earlier versions wrote to the index (still read).
    #[cfg(test)]
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "conversation": self.conversation.to_hex(),
            "parents": self.parents.iter().map(|p| p.to_hex()).collect::<Vec<_>>(),
            "status": self.status.as_str(),
            "created_at": self.created_at,
            "messages": self.messages,
            "display_messages": self.display_messages,
            "usage": usage_json(&self.usage),
            "duration_ms": self.duration_ms,
            "preview": self.preview,
            "preview_at": self.preview_at,
            "title": self.title,
            "session_type": self.session_type.as_str(),
        }))
        .expect("a JSON value serializes")
    }

    pub(super) fn from_bytes(id: ObjectId, b: &[u8]) -> Option<SessionInfo> {
        let v: Value = serde_json::from_slice(b).ok()?;
        Some(SessionInfo {
            id,
            conversation: id_from(&v["conversation"])?,
            parents: v["parents"]
                .as_array()?
                .iter()
                .filter_map(id_from)
                .collect(),
            status: SessionStatus::parse(v["status"].as_str()?)?,
            created_at: v["created_at"].as_i64()?,
            messages: v["messages"].as_u64()?,
            display_messages: v["display_messages"].as_u64()?,
            usage: usage_from(&v["usage"]),
            duration_ms: v["duration_ms"].as_u64().unwrap_or(0),
            preview: v["preview"].as_str().unwrap_or("").to_owned(),
            preview_at: v["preview_at"].as_u64(),
            title: v["title"].as_str().map(str::to_owned),
            session_type: SessionType::parse(v["session_type"].as_str()?)?,
        })
    }
}

fn record_json(r: &ConversationRecord) -> Value {
    json!({
        "conversation_id": r.conversation_id.map(|c| c.to_hex()),
        "title": r.title,
        "default_preset_id": r.default_preset_id,
        "metadata": Value::Object(r.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
        "status": r.status.as_str(),
        "created_at": r.created_at,
        "updated_at": r.updated_at,
    })
}

fn record_from(v: &Value) -> Option<ConversationRecord> {
    Some(ConversationRecord {
        conversation_id: id_from(&v["conversation_id"]),
        title: v["title"].as_str().map(str::to_owned),
        default_preset_id: v["default_preset_id"].as_str().map(str::to_owned),
        metadata: v["metadata"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default(),
        status: ConversationStatus::parse(v["status"].as_str()?)?,
        created_at: v["created_at"].as_i64()?,
        updated_at: v["updated_at"].as_i64()?,
    })
}

impl ConversationInfo {
    pub(super) fn new(name: &str, record: ConversationRecord) -> Self {
        ConversationInfo {
            name: name.to_owned(),
            last_activity: record.updated_at,
            record,
            head: None,
            messages: 0,
            sessions: 0,
            usage: Usage::default(),
            preview: String::new(),
            running: None,
        }
    }

    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "record": record_json(&self.record),
            "head": self.head.map(|h| h.to_hex()),
            "last_activity": self.last_activity,
            "messages": self.messages,
            "sessions": self.sessions,
            "usage": usage_json(&self.usage),
            "preview": self.preview,
            "running": self.running.as_ref().map(|r| json!({"run": r.run, "pid": r.pid, "started_at": r.started_at})),
        }))
        .expect("a JSON value serializes")
    }

    pub(crate) fn from_bytes(name: &str, b: &[u8]) -> Option<ConversationInfo> {
        let v: Value = serde_json::from_slice(b).ok()?;
        Some(ConversationInfo {
            name: name.to_owned(),
            record: record_from(&v["record"])?,
            head: id_from(&v["head"]),
            last_activity: v["last_activity"].as_i64()?,
            messages: v["messages"].as_u64()?,
            sessions: v["sessions"].as_u64()?,
            usage: usage_from(&v["usage"]),
            preview: v["preview"].as_str().unwrap_or("").to_owned(),
            running: v["running"].as_object().and_then(|r| {
                Some(RunClaim {
                    run: r.get("run")?.as_u64()?,
                    pid: u32::try_from(r.get("pid")?.as_u64()?).ok()?,
                    started_at: r.get("started_at")?.as_i64()?,
                })
            }),
        })
    }
}
