//! Sessions: the commits of the session DAG (objects-format.md, "session").
//!
//! A session never holds a full message list. Its history is its first
//! parent's history cut to `messages.base`, followed by `messages.added`; the
//! same holds for `display_messages`. Storage therefore grows with new
//! messages only, and a fork costs only its new turns.

use std::collections::BTreeMap;

use serde_json::Value;

use super::cbor::{canonical_key_cmp, Decoder, Encoder};
use super::{DecodeError, EncodeError, EncodedObject, ObjectKind};
use crate::hash::ObjectId;

/// Where a session is in its run lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionStatus {
    /// A run has claimed the conversation and not yet ended.
    Created,
    /// The run ended and its turns are final.
    Committed,
    /// The run ended with deferred tool calls whose results are pending.
    AwaitingToolResults,
    /// The run failed.
    Failed,
    /// The session was archived.
    Archived,
}

impl SessionStatus {
    pub const ALL: [SessionStatus; 5] = [
        SessionStatus::Created,
        SessionStatus::Committed,
        SessionStatus::AwaitingToolResults,
        SessionStatus::Failed,
        SessionStatus::Archived,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Created => "created",
            SessionStatus::Committed => "committed",
            SessionStatus::AwaitingToolResults => "awaiting_tool_results",
            SessionStatus::Failed => "failed",
            SessionStatus::Archived => "archived",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl std::fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who ran the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SessionType {
    /// A top-level agent turn.
    #[default]
    Agent,
    /// A subagent spawned in the background by another session.
    AsyncSubagent,
}

impl SessionType {
    pub const fn as_str(self) -> &'static str {
        match self {
            SessionType::Agent => "agent",
            SessionType::AsyncSubagent => "async_subagent",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "agent" => Some(SessionType::Agent),
            "async_subagent" => Some(SessionType::AsyncSubagent),
            _ => None,
        }
    }
}

/// Token usage of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub total_tokens: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Number of model requests made.
    pub requests: u64,
}

/// What a run cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunSummary {
    pub duration_ms: u64,
    pub usage: Usage,
}

/// A list of messages as an edit of the first parent's list: keep the first
/// `base`, then append `added` (ids of blobs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MessageDelta {
    pub base: u64,
    pub added: Vec<ObjectId>,
}

impl MessageDelta {
    /// The delta that turns `parent` into `new`: keeps their common prefix.
    /// This is how a caller that holds a *full* new history commits it.
    pub fn between(parent: &[ObjectId], new: &[ObjectId]) -> Self {
        let common = parent.iter().zip(new).take_while(|(a, b)| a == b).count();
        MessageDelta {
            base: common as u64,
            added: new[common..].to_vec(),
        }
    }

    /// Applies the delta to the parent's list.
    ///
    /// Returns `None` when `base` is longer than the parent's list, which no
    /// valid store holds.
    pub fn apply(&self, parent: &[ObjectId]) -> Option<Vec<ObjectId>> {
        let base = usize::try_from(self.base).ok()?;
        if base > parent.len() {
            return None;
        }
        let mut out = Vec::with_capacity(base + self.added.len());
        out.extend_from_slice(&parent[..base]);
        out.extend_from_slice(&self.added);
        Some(out)
    }

    /// The length of the resulting list.
    pub fn len(&self) -> u64 {
        self.base + self.added.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Descriptive metadata of a session.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionMetadata {
    pub session_type: SessionType,
    /// How the session reached the agent (e.g. "cli", "http", "import").
    pub transport: Option<String>,
    /// The session that spawned this one (for subagents).
    pub spawned_by: Option<ObjectId>,
    pub preset_id: Option<String>,
    /// Free metadata. Keys are kept in canonical order.
    pub extra: BTreeMap<String, Value>,
}

/// A record that this session replaced earlier history with a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// The session whose history was summarised (the pre-compaction head).
    pub session: ObjectId,
    /// How many of its messages the summary covers.
    pub messages: u64,
    /// The summary, a blob.
    pub summary: ObjectId,
}

/// A session: the commit of a conversation.
///
/// A plain domain type; [`Session::encode`] and [`Session::decode`] are the
/// only way to its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// Parent sessions; the first is the lineage parent. Empty for a root.
    pub parents: Vec<ObjectId>,
    /// The conversation this session belongs to. `None` means the session
    /// starts a conversation of its own, whose id is the session's id (it
    /// cannot name itself: its id is the hash of these bytes).
    pub conversation: Option<ObjectId>,
    pub status: SessionStatus,
    /// Milliseconds since the Unix epoch, UTC.
    pub created_at: i64,
    pub title: Option<String>,
    pub run: RunSummary,
    pub messages: MessageDelta,
    pub display_messages: MessageDelta,
    pub context_state: Option<ObjectId>,
    pub environment_state: Option<ObjectId>,
    pub metadata: SessionMetadata,
    pub compaction: Option<Compaction>,
}

impl Session {
    /// A root session with no messages, created at `created_at` (ms).
    pub fn new_root(created_at: i64) -> Self {
        Session {
            parents: Vec::new(),
            conversation: None,
            status: SessionStatus::Committed,
            created_at,
            title: None,
            run: RunSummary::default(),
            messages: MessageDelta::default(),
            display_messages: MessageDelta::default(),
            context_state: None,
            environment_state: None,
            metadata: SessionMetadata::default(),
            compaction: None,
        }
    }

    /// The conversation id, given the session's own id (a session with no
    /// `conversation` field roots its own conversation).
    pub fn conversation_id(&self, own_id: ObjectId) -> ObjectId {
        self.conversation.unwrap_or(own_id)
    }

    /// The first (lineage) parent.
    pub fn first_parent(&self) -> Option<ObjectId> {
        self.parents.first().copied()
    }

    /// The blobs the session names: its added messages and display
    /// messages, its context and environment states, and its compaction's
    /// summary. Only what this session adds: its parents name the rest.
    pub fn blobs(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.messages
            .added
            .iter()
            .chain(&self.display_messages.added)
            .chain(self.context_state.iter())
            .chain(self.environment_state.iter())
            .chain(self.compaction.as_ref().map(|c| &c.summary))
            .copied()
    }

    /// The sessions the session names: its parents (the first is its
    /// lineage parent), then its compaction's source.
    pub fn sessions(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.parents
            .iter()
            .chain(self.compaction.as_ref().map(|c| &c.session))
            .copied()
    }

    /// Checks what can be checked without other objects.
    pub fn validate(&self) -> Result<(), String> {
        for (i, p) in self.parents.iter().enumerate() {
            if self.parents[..i].contains(p) {
                return Err(format!("parent {p} is listed twice"));
            }
        }
        if self.parents.is_empty() {
            if self.messages.base != 0 {
                return Err(format!(
                    "a session without parents cannot keep {} messages of a parent (messages.base must be 0)",
                    self.messages.base
                ));
            }
            if self.display_messages.base != 0 {
                return Err(format!(
                    "a session without parents cannot keep {} display messages of a parent (display_messages.base must be 0)",
                    self.display_messages.base
                ));
            }
        }
        if let Some(title) = &self.title {
            if title.len() > MAX_TITLE_BYTES {
                return Err(format!(
                    "title is {} bytes long, at most {MAX_TITLE_BYTES} are allowed",
                    title.len()
                ));
            }
        }
        Ok(())
    }

    /// Canonical bytes and id.
    pub fn encode(&self) -> Result<EncodedObject, EncodeError> {
        self.validate().map_err(EncodeError::InvalidSession)?;
        Ok(EncodedObject::new(ObjectKind::Session, wire::encode(self)?))
    }

    /// Strictly decodes a canonical payload.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let s = wire::decode(payload)?;
        s.validate().map_err(DecodeError::Session)?;
        Ok(s)
    }
}

/// Titles are for people; a megabyte title is a bug upstream.
pub const MAX_TITLE_BYTES: usize = 4096;

mod wire;

impl Session {
    /// The JSON form of a session with its id (objects-format.md, "JSON form").
    pub fn to_json(&self, id: ObjectId) -> serde_json::Value {
        use serde_json::{json, Map, Value};
        let ids =
            |v: &[ObjectId]| Value::Array(v.iter().map(|i| Value::from(i.to_hex())).collect());
        let opt_id =
            |v: &Option<ObjectId>| v.map(|i| Value::from(i.to_hex())).unwrap_or(Value::Null);
        let m = &self.metadata;
        json!({
            "id": id.to_hex(),
            "kind": "session",
            "parents": ids(&self.parents),
            "conversation": self.conversation_id(id).to_hex(),
            "status": self.status.as_str(),
            "created_at": self.created_at,
            "title": self.title,
            "run": {
                "duration_ms": self.run.duration_ms,
                "usage": {
                    "total_tokens": self.run.usage.total_tokens,
                    "prompt_tokens": self.run.usage.prompt_tokens,
                    "completion_tokens": self.run.usage.completion_tokens,
                    "requests": self.run.usage.requests,
                },
            },
            "messages": {"base": self.messages.base, "added": ids(&self.messages.added)},
            "display_messages": {"base": self.display_messages.base, "added": ids(&self.display_messages.added)},
            "context_state": opt_id(&self.context_state),
            "environment_state": opt_id(&self.environment_state),
            "metadata": {
                "session_type": m.session_type.as_str(),
                "transport": m.transport,
                "spawned_by": opt_id(&m.spawned_by),
                "preset_id": m.preset_id,
                "extra": Value::Object(m.extra.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Map<_, _>>()),
            },
            "compaction": self.compaction.map(|c| json!({
                "session": c.session.to_hex(),
                "messages": c.messages,
                "summary": c.summary.to_hex(),
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::wire::*;
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes([n; 32])
    }

    pub(super) fn full_session() -> Session {
        let mut extra = BTreeMap::new();
        extra.insert("cwd".to_owned(), Value::from("/tmp/x"));
        extra.insert(
            "b".to_owned(),
            serde_json::json!({"z": 1.5, "a": [true, null]}),
        );
        Session {
            parents: vec![id(1), id(2)],
            conversation: Some(id(3)),
            status: SessionStatus::AwaitingToolResults,
            created_at: 1_763_000_000_123,
            title: Some("Fix the flaky test".into()),
            run: RunSummary {
                duration_ms: 1234,
                usage: Usage {
                    total_tokens: 300,
                    prompt_tokens: 200,
                    completion_tokens: 100,
                    requests: 2,
                },
            },
            messages: MessageDelta {
                base: 4,
                added: vec![id(4), id(5)],
            },
            display_messages: MessageDelta {
                base: 2,
                added: vec![id(6)],
            },
            context_state: Some(id(7)),
            environment_state: Some(id(8)),
            metadata: SessionMetadata {
                session_type: SessionType::AsyncSubagent,
                transport: Some("cli".into()),
                spawned_by: Some(id(9)),
                preset_id: Some("coder".into()),
                extra,
            },
            compaction: Some(Compaction {
                session: id(10),
                messages: 40,
                summary: id(11),
            }),
        }
    }

    #[test]
    fn key_lists_are_canonical() {
        for keys in [
            &SESSION_KEYS[..],
            &RUN_KEYS[..],
            &USAGE_KEYS[..],
            &DELTA_KEYS[..],
            &METADATA_KEYS[..],
            &COMPACTION_KEYS[..],
        ] {
            for w in keys.windows(2) {
                assert_eq!(
                    canonical_key_cmp(w[0], w[1]),
                    std::cmp::Ordering::Less,
                    "{w:?}"
                );
            }
        }
    }

    #[test]
    fn round_trips_full_and_minimal() {
        for s in [full_session(), Session::new_root(0), Session::new_root(-5)] {
            let enc = s.encode().unwrap();
            let back = Session::decode(enc.payload()).unwrap();
            assert_eq!(back, s);
            assert_eq!(back.encode().unwrap().payload(), enc.payload());
            // An independent CBOR reader sees one well-formed map.
            let v: ciborium::Value = ciborium::de::from_reader(enc.payload()).unwrap();
            assert!(v.is_map());
        }
    }

    #[test]
    fn invalid_sessions_are_refused() {
        let mut s = Session::new_root(0);
        s.messages.base = 3;
        assert!(s
            .encode()
            .unwrap_err()
            .to_string()
            .contains("messages.base"));
        let mut s = full_session();
        s.parents = vec![id(1), id(1)];
        assert!(s.encode().unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn truncations_and_bit_flips_never_panic_and_never_alias() {
        let enc = full_session().encode().unwrap();
        let bytes = enc.payload();
        for cut in 0..bytes.len() {
            assert!(Session::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.to_vec();
                b[i] ^= 1 << bit;
                if let Ok(s) = Session::decode(&b) {
                    // Whatever decodes must be the canonical encoding of what it decodes to.
                    assert_eq!(s.encode().unwrap().payload(), &b[..]);
                }
            }
        }
    }

    #[test]
    fn delta_between_keeps_the_common_prefix() {
        let parent = [id(1), id(2), id(3)];
        let d = MessageDelta::between(&parent, &[id(1), id(2), id(3), id(4)]);
        assert_eq!((d.base, d.added.clone()), (3, vec![id(4)]));
        assert_eq!(d.apply(&parent).unwrap(), vec![id(1), id(2), id(3), id(4)]);
        let d = MessageDelta::between(&parent, &[id(1), id(9)]);
        assert_eq!((d.base, d.added.clone()), (1, vec![id(9)]));
        let d = MessageDelta::between(&parent, &[id(5)]);
        assert_eq!(d.base, 0);
        assert!(MessageDelta {
            base: 4,
            added: vec![]
        }
        .apply(&parent)
        .is_none());
    }
}
