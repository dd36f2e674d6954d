//! What the index keeps per session and per conversation (their bytes in
//! `encoding.rs`).

use crate::hash::ObjectId;
use crate::object::{SessionStatus, SessionType, Usage};
use crate::refs::ConversationRecord;

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
}

impl ConversationInfo {
    /// The JSON form of a conversation (`sessctl ls --json`, README.md).
    pub fn to_json(&self) -> serde_json::Value {
        let r = &self.record;
        let u = &self.usage;
        serde_json::json!({
            "name": self.name,
            "title": r.title,
            "status": r.status.as_str(),
            "conversation_id": r.conversation_id.map(|i| i.to_hex()),
            "head": self.head.map(|i| i.to_hex()),
            "sessions": self.sessions,
            "messages": self.messages,
            "usage": {
                "total_tokens": u.total_tokens,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "requests": u.requests,
            },
            "created_at": r.created_at,
            "updated_at": r.updated_at,
            "last_activity": self.last_activity,
            "default_preset_id": r.default_preset_id,
            "metadata": serde_json::Value::Object(r.metadata.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<serde_json::Map<_, _>>()),
            "preview": self.preview,
            "running": self.running.as_ref().map(|r| serde_json::json!({
                "run": r.run,
                "pid": r.pid,
                "started_at": r.started_at,
            })),
        })
    }
}
