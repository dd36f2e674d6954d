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
    /// The length of the history this delta makes: the `base` messages kept
    /// of the first parent's history, then the added ones.
    pub fn history_len(&self) -> u64 {
        self.base + self.added.len() as u64
    }

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

/// The version-1 wire form (objects-format.md, "session"): a CBOR map with
/// text keys in canonical order; optional fields are absent, never null.
mod wire {
    use super::*;
    use crate::object::wire::{id, id_list, map};
    use crate::object::CborError;

    // Keys of each map, in canonical order (length, then bytes). The test
    // `key_lists_are_canonical` keeps them so.
    pub(super) const SESSION_KEYS: [&str; 12] = [
        "run",
        "title",
        "status",
        "parents",
        "messages",
        "metadata",
        "compaction",
        "created_at",
        "conversation",
        "context_state",
        "display_messages",
        "environment_state",
    ];
    pub(super) const RUN_KEYS: [&str; 2] = ["usage", "duration_ms"];
    pub(super) const USAGE_KEYS: [&str; 4] = [
        "requests",
        "total_tokens",
        "prompt_tokens",
        "completion_tokens",
    ];
    pub(super) const DELTA_KEYS: [&str; 2] = ["base", "added"];
    pub(super) const METADATA_KEYS: [&str; 5] = [
        "extra",
        "preset_id",
        "transport",
        "spawned_by",
        "session_type",
    ];
    pub(super) const COMPACTION_KEYS: [&str; 3] = ["session", "summary", "messages"];

    pub(super) fn encode(s: &Session) -> Result<Vec<u8>, CborError> {
        let mut e = Encoder::with_capacity(
            256 + 34 * (s.parents.len() + s.messages.added.len() + s.display_messages.added.len()),
        );
        let fields = 7
            + s.title.is_some() as usize
            + s.conversation.is_some() as usize
            + s.compaction.is_some() as usize
            + s.context_state.is_some() as usize
            + s.environment_state.is_some() as usize;
        e.map(fields);

        e.text("run");
        e.map(2);
        e.text("usage");
        e.map(4);
        e.text("requests");
        e.uint(s.run.usage.requests);
        e.text("total_tokens");
        e.uint(s.run.usage.total_tokens);
        e.text("prompt_tokens");
        e.uint(s.run.usage.prompt_tokens);
        e.text("completion_tokens");
        e.uint(s.run.usage.completion_tokens);
        e.text("duration_ms");
        e.uint(s.run.duration_ms);

        if let Some(title) = &s.title {
            e.text("title");
            e.text(title);
        }
        e.text("status");
        e.text(s.status.as_str());
        e.text("parents");
        ids(&mut e, &s.parents);
        e.text("messages");
        delta(&mut e, &s.messages);

        e.text("metadata");
        let m = &s.metadata;
        e.map(
            1 + (!m.extra.is_empty()) as usize
                + m.preset_id.is_some() as usize
                + m.transport.is_some() as usize
                + m.spawned_by.is_some() as usize,
        );
        if !m.extra.is_empty() {
            e.text("extra");
            let mut entries: Vec<(&String, &Value)> = m.extra.iter().collect();
            entries.sort_by(|a, b| canonical_key_cmp(a.0, b.0));
            e.map(entries.len());
            for (k, v) in entries {
                e.text(k);
                e.json(v)?;
            }
        }
        if let Some(p) = &m.preset_id {
            e.text("preset_id");
            e.text(p);
        }
        if let Some(t) = &m.transport {
            e.text("transport");
            e.text(t);
        }
        if let Some(id) = &m.spawned_by {
            e.text("spawned_by");
            e.bytes(id.as_bytes());
        }
        e.text("session_type");
        e.text(m.session_type.as_str());

        if let Some(c) = &s.compaction {
            e.text("compaction");
            e.map(3);
            e.text("session");
            e.bytes(c.session.as_bytes());
            e.text("summary");
            e.bytes(c.summary.as_bytes());
            e.text("messages");
            e.uint(c.messages);
        }
        e.text("created_at");
        e.int(s.created_at);
        if let Some(c) = &s.conversation {
            e.text("conversation");
            e.bytes(c.as_bytes());
        }
        if let Some(c) = &s.context_state {
            e.text("context_state");
            e.bytes(c.as_bytes());
        }
        e.text("display_messages");
        delta(&mut e, &s.display_messages);
        if let Some(c) = &s.environment_state {
            e.text("environment_state");
            e.bytes(c.as_bytes());
        }
        Ok(e.into_bytes())
    }

    fn ids(e: &mut Encoder, ids: &[ObjectId]) {
        e.array(ids.len());
        for id in ids {
            e.bytes(id.as_bytes());
        }
    }

    fn delta(e: &mut Encoder, d: &MessageDelta) {
        e.map(2);
        e.text("base");
        e.uint(d.base);
        e.text("added");
        ids(e, &d.added);
    }

    fn delta_field(d: &mut Decoder<'_>, what: &str) -> Result<MessageDelta, CborError> {
        let mut out = MessageDelta::default();
        let mut seen = 0;
        map(d, what, &DELTA_KEYS, |d, k| {
            seen += 1;
            match k {
                "base" => out.base = d.uint()?,
                _ => out.added = id_list(d)?,
            }
            Ok(())
        })?;
        if seen != DELTA_KEYS.len() {
            return Err(d.error(format!("{what} needs both base and added")));
        }
        Ok(out)
    }

    fn opt_text(d: &mut Decoder<'_>) -> Result<String, CborError> {
        Ok(d.text()?.to_owned())
    }

    pub(super) fn decode(payload: &[u8]) -> Result<Session, CborError> {
        let mut d = Decoder::new(payload);
        let mut s = Session::new_root(0);
        let mut required = 0u32;
        map(&mut d, "session", &SESSION_KEYS, |d, key| {
            match key {
                "run" => {
                    required |= 1;
                    let mut have = 0;
                    map(d, "run", &RUN_KEYS, |d, k| {
                        have += 1;
                        match k {
                            "usage" => {
                                let mut u = Usage::default();
                                let mut n = 0;
                                map(d, "usage", &USAGE_KEYS, |d, k| {
                                    n += 1;
                                    let v = d.uint()?;
                                    match k {
                                        "requests" => u.requests = v,
                                        "total_tokens" => u.total_tokens = v,
                                        "prompt_tokens" => u.prompt_tokens = v,
                                        _ => u.completion_tokens = v,
                                    }
                                    Ok(())
                                })?;
                                if n != USAGE_KEYS.len() {
                                    return Err(d.error("usage needs all four counters"));
                                }
                                s.run.usage = u;
                            }
                            _ => s.run.duration_ms = d.uint()?,
                        }
                        Ok(())
                    })?;
                    if have != RUN_KEYS.len() {
                        return Err(d.error("run needs usage and duration_ms"));
                    }
                }
                "title" => s.title = Some(opt_text(d)?),
                "status" => {
                    required |= 2;
                    let t = d.text()?;
                    s.status = SessionStatus::parse(t)
                        .ok_or_else(|| d.error(format!("unknown session status {t:?}")))?;
                }
                "parents" => {
                    required |= 4;
                    s.parents = id_list(d)?;
                }
                "messages" => {
                    required |= 8;
                    s.messages = delta_field(d, "messages")?;
                }
                "metadata" => {
                    required |= 16;
                    let mut has_type = false;
                    let m = &mut s.metadata;
                    map(d, "metadata", &METADATA_KEYS, |d, k| {
                        match k {
                            "extra" => {
                                let n = d.map()?;
                                if n == 0 {
                                    return Err(d.error("empty extra metadata must be absent"));
                                }
                                let mut prev: Option<&str> = None;
                                for _ in 0..n {
                                    let key = d.text()?;
                                    if let Some(p) = prev {
                                        if canonical_key_cmp(p, key) != std::cmp::Ordering::Less {
                                            return Err(d.error(format!(
                                                "extra metadata key {key:?} is repeated or out of canonical order"
                                            )));
                                        }
                                    }
                                    prev = Some(key);
                                    let v = d.json()?;
                                    m.extra.insert(key.to_owned(), v);
                                }
                            }
                            "preset_id" => m.preset_id = Some(opt_text(d)?),
                            "transport" => m.transport = Some(opt_text(d)?),
                            "spawned_by" => m.spawned_by = Some(id(d)?),
                            _ => {
                                has_type = true;
                                let t = d.text()?;
                                m.session_type = SessionType::parse(t).ok_or_else(|| {
                                    d.error(format!("unknown session type {t:?}"))
                                })?;
                            }
                        }
                        Ok(())
                    })?;
                    if !has_type {
                        return Err(d.error("metadata needs session_type"));
                    }
                }
                "compaction" => {
                    let (mut session, mut summary, mut messages) = (None, None, None);
                    map(d, "compaction", &COMPACTION_KEYS, |d, k| {
                        match k {
                            "session" => session = Some(id(d)?),
                            "summary" => summary = Some(id(d)?),
                            _ => messages = Some(d.uint()?),
                        }
                        Ok(())
                    })?;
                    match (session, summary, messages) {
                        (Some(session), Some(summary), Some(messages)) => {
                            s.compaction = Some(Compaction {
                                session,
                                messages,
                                summary,
                            })
                        }
                        _ => return Err(d.error("compaction needs session, summary and messages")),
                    }
                }
                "created_at" => {
                    required |= 32;
                    s.created_at = d.int()?;
                }
                "conversation" => s.conversation = Some(id(d)?),
                "context_state" => s.context_state = Some(id(d)?),
                "display_messages" => {
                    required |= 64;
                    s.display_messages = delta_field(d, "display_messages")?;
                }
                _ => s.environment_state = Some(id(d)?),
            }
            Ok(())
        })?;
        if required != 127 {
            let names = [
                "run",
                "status",
                "parents",
                "messages",
                "metadata",
                "created_at",
                "display_messages",
            ];
            let missing: Vec<&str> = names
                .iter()
                .enumerate()
                .filter(|(i, _)| required & (1 << i) == 0)
                .map(|(_, n)| *n)
                .collect();
            return Err(d.error(format!("session lacks {}", missing.join(", "))));
        }
        d.finish()?;
        Ok(s)
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
