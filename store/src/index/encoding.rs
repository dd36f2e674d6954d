//! The binary encoding of index values: session and conversation
//! summaries.
//!
//! Values are a compact binary form led by a tag byte (parsing and printing
//! the JSON that sled's index held was a quarter of a commit's cost).

use serde_json::Value;

use super::summary::{ConversationInfo, RunClaim, SessionInfo};
use crate::hash::ObjectId;
use crate::object::{SessionStatus, SessionType, Usage};
use crate::refs::{ConversationRecord, ConversationStatus};

/// A session's value as index format 1 wrote it: fixed-width integers,
/// its preview always inline. Still read.
const SESSION_TAG_V1: u8 = 0xB1;
/// A session's value since index format 2: LEB128 integers, and its preview
/// held once per run of sessions that share it (objects-format.md, "Index").
const SESSION_TAG: u8 = 0xB2;
const CONVERSATION_TAG: u8 = 0xC1;

#[derive(Default)]
struct Bin(Vec<u8>);

impl Bin {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn id(&mut self, v: &ObjectId) -> &mut Self {
        self.0.extend_from_slice(v.as_bytes());
        self
    }
    fn str(&mut self, v: &str) -> &mut Self {
        self.u64(v.len() as u64);
        self.0.extend_from_slice(v.as_bytes());
        self
    }
    fn opt_str(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(v) => self.u8(1).str(v),
            None => self.u8(0),
        }
    }
    fn opt_id(&mut self, v: Option<&ObjectId>) -> &mut Self {
        match v {
            Some(v) => self.u8(1).id(v),
            None => self.u8(0),
        }
    }
    #[cfg(test)]
    fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(v) => self.u8(1).u64(v),
            None => self.u8(0),
        }
    }
    fn usage(&mut self, u: &Usage) -> &mut Self {
        self.u64(u.total_tokens)
            .u64(u.prompt_tokens)
            .u64(u.completion_tokens)
            .u64(u.requests)
    }
    /// Unsigned LEB128.
    fn var(&mut self, mut v: u64) -> &mut Self {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return self;
            }
            self.0.push(byte | 0x80);
        }
    }
    fn var_str(&mut self, v: &str) -> &mut Self {
        self.var(v.len() as u64);
        self.0.extend_from_slice(v.as_bytes());
        self
    }
}

struct Unbin<'a>(&'a [u8]);

impl<'a> Unbin<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn id(&mut self) -> Option<ObjectId> {
        Some(ObjectId::from_bytes(self.take(32)?.try_into().ok()?))
    }
    fn str(&mut self) -> Option<&'a str> {
        let n = usize::try_from(self.u64()?).ok()?;
        std::str::from_utf8(self.take(n)?).ok()
    }
    fn opt<T>(&mut self, f: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(f(self)?)),
            _ => None,
        }
    }
    fn usage(&mut self) -> Option<Usage> {
        Some(Usage {
            total_tokens: self.u64()?,
            prompt_tokens: self.u64()?,
            completion_tokens: self.u64()?,
            requests: self.u64()?,
        })
    }
    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
    /// Unsigned LEB128, shortest form only (at most 10 bytes).
    fn var(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if i == 9 && bits > 1 {
                return None;
            }
            v |= bits << (7 * i);
            if byte & 0x80 == 0 {
                // A zero last byte after the first would be a longer form.
                return (i == 0 || byte != 0).then_some(v);
            }
        }
        None
    }
    fn var_str(&mut self) -> Option<&'a str> {
        let n = usize::try_from(self.var()?).ok()?;
        std::str::from_utf8(self.take(n)?).ok()
    }
}

/// Reads one key's value.
pub(super) type KeyReader<'a> = dyn FnMut(&[u8]) -> crate::error::Result<Option<Vec<u8>>> + 'a;

/// The summary of session `id` from its `s:` value (`get` reads a key), its
/// preview read from the session that holds it as text; and that session
/// (`id` itself when its value holds the text).
pub(super) fn read_session(
    id: ObjectId,
    get: &mut KeyReader<'_>,
) -> crate::error::Result<Option<(SessionInfo, ObjectId)>> {
    let Some(v) = get(&super::key("s:", id.as_bytes()))? else {
        return Ok(None);
    };
    let Some((mut info, at)) = SessionInfo::from_index_value(id, &v) else {
        return Ok(None);
    };
    let origin = match at {
        PreviewAt::Here => id,
        PreviewAt::In(origin) => {
            // Gone only with its text (gc drops a session's value when it
            // drops the session, and an origin is an ancestor of every
            // session naming it): then there is no preview to show.
            if let Some(v) = get(&super::key("s:", origin.as_bytes()))? {
                if let Some((o, PreviewAt::Here)) = SessionInfo::from_index_value(origin, &v) {
                    info.preview = o.preview;
                }
            }
            origin
        }
    };
    Ok(Some((info, origin)))
}

/// Where a session value's preview is: its own text, or that of the
/// session named (which holds it as text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PreviewAt {
    Here,
    In(ObjectId),
}

fn status_code(s: SessionStatus) -> u8 {
    match s {
        SessionStatus::Created => 0,
        SessionStatus::Committed => 1,
        SessionStatus::AwaitingToolResults => 2,
        SessionStatus::Failed => 3,
        SessionStatus::Archived => 4,
    }
}

fn status_of(code: u8) -> Option<SessionStatus> {
    [
        SessionStatus::Created,
        SessionStatus::Committed,
        SessionStatus::AwaitingToolResults,
        SessionStatus::Failed,
        SessionStatus::Archived,
    ]
    .into_iter()
    .find(|s| status_code(*s) == code)
}

fn type_code(t: SessionType) -> u8 {
    match t {
        SessionType::Agent => 0,
        SessionType::AsyncSubagent => 1,
    }
}

fn type_of(code: u8) -> Option<SessionType> {
    [SessionType::Agent, SessionType::AsyncSubagent]
        .into_iter()
        .find(|t| type_code(*t) == code)
}

impl SessionInfo {
    /// The value of its `s:` key: its preview held as text (`PreviewAt::Here`)
    /// or as the id of the session whose value holds it as text, the one
    /// where the history's first prompt was found.
    pub(super) fn to_index_value(&self, preview: &PreviewAt) -> Vec<u8> {
        let mut b = Bin::default();
        b.u8(SESSION_TAG)
            .id(&self.conversation)
            .var(self.parents.len() as u64);
        for p in &self.parents {
            b.id(p);
        }
        b.u8(status_code(self.status))
            .u8(type_code(self.session_type))
            .i64(self.created_at)
            .var(self.messages)
            .var(self.display_messages)
            .var(self.usage.total_tokens)
            .var(self.usage.prompt_tokens)
            .var(self.usage.completion_tokens)
            .var(self.usage.requests)
            .var(self.duration_ms);
        match self.preview_at {
            Some(at) => b.u8(1).var(at),
            None => b.u8(0),
        };
        match self.title.as_deref() {
            Some(t) => b.u8(1).var_str(t),
            None => b.u8(0),
        };
        match preview {
            PreviewAt::In(origin) => b.u8(1).id(origin),
            PreviewAt::Here => b.u8(0).var_str(&self.preview),
        };
        b.0
    }

    /// A value of an `s:` key, of either tag, and where its preview is
    /// (with `PreviewAt::In`, `preview` is left empty: the caller reads it
    /// from the session named).
    pub(super) fn from_index_value(id: ObjectId, b: &[u8]) -> Option<(SessionInfo, PreviewAt)> {
        match b.first() {
            Some(&SESSION_TAG_V1) => {
                Self::from_index_bytes_v1(id, b).map(|info| (info, PreviewAt::Here))
            }
            Some(&SESSION_TAG) => {
                let mut r = Unbin(&b[1..]);
                let conversation = r.id()?;
                let n = usize::try_from(r.var()?).ok()?;
                let mut parents = Vec::with_capacity(n.min(64));
                for _ in 0..n {
                    parents.push(r.id()?);
                }
                let mut info = SessionInfo {
                    id,
                    conversation,
                    parents,
                    status: status_of(r.u8()?)?,
                    session_type: type_of(r.u8()?)?,
                    created_at: r.i64()?,
                    messages: r.var()?,
                    display_messages: r.var()?,
                    usage: Usage {
                        total_tokens: r.var()?,
                        prompt_tokens: r.var()?,
                        completion_tokens: r.var()?,
                        requests: r.var()?,
                    },
                    duration_ms: r.var()?,
                    preview_at: r.opt(Unbin::var)?,
                    title: r.opt(|r| r.var_str().map(str::to_owned))?,
                    preview: String::new(),
                };
                let at = match r.u8()? {
                    0 => {
                        info.preview = r.var_str()?.to_owned();
                        PreviewAt::Here
                    }
                    1 => PreviewAt::In(r.id()?),
                    _ => return None,
                };
                r.end()?;
                Some((info, at))
            }
            _ => None,
        }
    }

    /// Index format 1's encoding, kept for the tests that read its values.
    #[cfg(test)]
    fn to_index_bytes_v1(&self) -> Vec<u8> {
        let mut b = Bin::default();
        b.u8(SESSION_TAG_V1)
            .id(&self.conversation)
            .u64(self.parents.len() as u64);
        for p in &self.parents {
            b.id(p);
        }
        b.str(self.status.as_str())
            .i64(self.created_at)
            .u64(self.messages)
            .u64(self.display_messages)
            .usage(&self.usage)
            .u64(self.duration_ms)
            .str(&self.preview)
            .opt_u64(self.preview_at)
            .opt_str(self.title.as_deref())
            .str(self.session_type.as_str());
        b.0
    }

    fn from_index_bytes_v1(id: ObjectId, b: &[u8]) -> Option<SessionInfo> {
        if b.first() != Some(&SESSION_TAG_V1) {
            return None;
        }
        let mut r = Unbin(&b[1..]);
        let conversation = r.id()?;
        let n = usize::try_from(r.u64()?).ok()?;
        let mut parents = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            parents.push(r.id()?);
        }
        let info = SessionInfo {
            id,
            conversation,
            parents,
            status: SessionStatus::parse(r.str()?)?,
            created_at: r.i64()?,
            messages: r.u64()?,
            display_messages: r.u64()?,
            usage: r.usage()?,
            duration_ms: r.u64()?,
            preview: r.str()?.to_owned(),
            preview_at: r.opt(Unbin::u64)?,
            title: r.opt(|r| r.str().map(str::to_owned))?,
            session_type: SessionType::parse(r.str()?)?,
        };
        r.end()?;
        Some(info)
    }
}

impl ConversationInfo {
    pub(super) fn to_index_bytes(&self) -> Vec<u8> {
        let r = &self.record;
        let mut b = Bin::default();
        let metadata = if r.metadata.is_empty() {
            String::new()
        } else {
            Value::Object(
                r.metadata
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )
            .to_string()
        };
        b.u8(CONVERSATION_TAG)
            .opt_id(r.conversation_id.as_ref())
            .opt_str(r.title.as_deref())
            .opt_str(r.default_preset_id.as_deref())
            .str(&metadata)
            .str(r.status.as_str())
            .i64(r.created_at)
            .i64(r.updated_at)
            .opt_id(self.head.as_ref())
            .i64(self.last_activity)
            .u64(self.messages)
            .u64(self.sessions)
            .usage(&self.usage)
            .str(&self.preview);
        match &self.running {
            Some(c) => b.u8(1).u64(c.run).u64(u64::from(c.pid)).i64(c.started_at),
            None => b.u8(0),
        };
        b.0
    }

    pub(super) fn from_index_bytes(name: &str, b: &[u8]) -> Option<ConversationInfo> {
        if b.first() != Some(&CONVERSATION_TAG) {
            return None;
        }
        let mut r = Unbin(&b[1..]);
        let conversation_id = r.opt(Unbin::id)?;
        let title = r.opt(|r| r.str().map(str::to_owned))?;
        let default_preset_id = r.opt(|r| r.str().map(str::to_owned))?;
        let metadata = match r.str()? {
            "" => Default::default(),
            // As deep as a blob (256), past serde_json's default (128): the
            // record encoder takes that much.
            text => match crate::object::blob::parse_json_strict(text.as_bytes()).ok()? {
                Value::Object(m) => m.into_iter().collect(),
                _ => return None,
            },
        };
        let record = ConversationRecord {
            conversation_id,
            title,
            default_preset_id,
            metadata,
            status: ConversationStatus::parse(r.str()?)?,
            created_at: r.i64()?,
            updated_at: r.i64()?,
        };
        let info = ConversationInfo {
            name: name.to_owned(),
            record,
            head: r.opt(Unbin::id)?,
            last_activity: r.i64()?,
            messages: r.u64()?,
            sessions: r.u64()?,
            usage: r.usage()?,
            preview: r.str()?.to_owned(),
            running: r.opt(|r| {
                Some(RunClaim {
                    run: r.u64()?,
                    pid: u32::try_from(r.u64()?).ok()?,
                    started_at: r.i64()?,
                })
            })?,
        };
        r.end()?;
        Some(info)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn session() -> SessionInfo {
        SessionInfo {
            id: ObjectId::from_bytes([1; 32]),
            conversation: ObjectId::from_bytes([2; 32]),
            parents: vec![ObjectId::from_bytes([3; 32]), ObjectId::from_bytes([4; 32])],
            status: SessionStatus::AwaitingToolResults,
            created_at: -5,
            messages: 7,
            display_messages: 6,
            usage: Usage {
                total_tokens: 1,
                prompt_tokens: 2,
                completion_tokens: 3,
                requests: 4,
            },
            duration_ms: 99,
            preview: "héllo".into(),
            preview_at: Some(2),
            title: Some("t".into()),
            session_type: SessionType::Agent,
        }
    }

    fn conversation(running: bool) -> ConversationInfo {
        let mut metadata = std::collections::BTreeMap::new();
        metadata.insert("cwd".to_owned(), json!("/src"));
        metadata.insert("n".to_owned(), json!([1, {"a": null}]));
        ConversationInfo {
            name: "fix".into(),
            record: ConversationRecord {
                conversation_id: Some(ObjectId::from_bytes([9; 32])),
                title: None,
                default_preset_id: Some("p".into()),
                metadata,
                status: ConversationStatus::Archived,
                created_at: 10,
                updated_at: 20,
            },
            head: None,
            last_activity: 30,
            messages: 4,
            sessions: 2,
            usage: Usage::default(),
            preview: String::new(),
            running: running.then_some(RunClaim {
                run: 8,
                pid: 4242,
                started_at: 11,
            }),
        }
    }

    #[test]
    fn index_values_round_trip() {
        let s = session();
        assert_eq!(
            SessionInfo::from_index_value(s.id, &s.to_index_value(&PreviewAt::Here)),
            Some((s.clone(), PreviewAt::Here))
        );
        let origin = PreviewAt::In(ObjectId::from_bytes([7; 32]));
        let shared = s.to_index_value(&origin);
        let without = SessionInfo {
            preview: String::new(),
            ..s.clone()
        };
        assert_eq!(
            SessionInfo::from_index_value(s.id, &shared),
            Some((without, origin))
        );
        // A value index format 1 wrote reads as it did.
        assert_eq!(
            SessionInfo::from_index_value(s.id, &s.to_index_bytes_v1()),
            Some((s.clone(), PreviewAt::Here))
        );
        // The shared preview is what makes a session's value small.
        let v1 = s.to_index_bytes_v1().len();
        assert!(
            shared.len() + 60 < v1,
            "{} bytes, {v1} in format 1",
            shared.len()
        );
        for running in [false, true] {
            let c = conversation(running);
            assert_eq!(
                ConversationInfo::from_index_bytes("fix", &c.to_index_bytes()),
                Some(c.clone())
            );
        }
    }

    #[test]
    fn cut_or_padded_index_values_do_not_decode() {
        let c = conversation(true).to_index_bytes();
        for s in [
            session().to_index_value(&PreviewAt::Here),
            session().to_index_value(&PreviewAt::In(ObjectId::from_bytes([7; 32]))),
            session().to_index_bytes_v1(),
        ] {
            for n in 0..s.len() {
                assert!(SessionInfo::from_index_value(session().id, &s[..n]).is_none());
            }
            let mut long = s.clone();
            long.push(0);
            assert!(SessionInfo::from_index_value(session().id, &long).is_none());
        }
        for n in 0..c.len() {
            assert!(ConversationInfo::from_index_bytes("fix", &c[..n]).is_none());
        }
    }
}
