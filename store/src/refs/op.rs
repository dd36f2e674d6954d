// Over 600 lines on purpose: an operation's types and their canonical encoding and decoding change together.
//! Operations: every change to refs, conversation records and run claims,
//! as one journaled record (objects-format.md, "Operations").
//!
//! An operation is written in the same journal frame as the objects it
//! refers to, so one `fdatasync` makes a commit's session and its ref move
//! durable together. Operations chain by hash (`prev`), and each ref update
//! carries the hash of that ref's previous reflog entry, so a ref's history
//! can be audited offline and an edit to it shows.

use std::collections::BTreeMap;

use serde_json::Value;

use super::name::RefName;
use crate::hash::ObjectId;
use crate::object::cbor::{canonical_key_cmp, Decoder, Encoder};
use crate::object::wire::{id, map};
use crate::object::CborError;

/// Version hashed into operation and reflog-entry hashes.
pub const OP_FORMAT_VERSION: u32 = 1;

/// A 32-byte blake3 hash of an operation or a reflog entry.
pub type Hash = [u8; 32];

/// What a ref points at.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RefTarget {
    Session(ObjectId),
    /// Another ref (only `HEAD` is symbolic).
    Symbolic(RefName),
}

impl std::fmt::Display for RefTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefTarget::Session(id) => write!(f, "{id}"),
            RefTarget::Symbolic(r) => write!(f, "ref: {r}"),
        }
    }
}

/// One ref's move within an operation; with the operation's time, actor and
/// reason it is one reflog entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub name: RefName,
    pub old: Option<RefTarget>,
    /// `None` deletes the ref.
    pub new: Option<RefTarget>,
    /// The hash of this ref's previous reflog entry; `None` for its first.
    pub prev: Option<Hash>,
}

/// Whether a conversation is live or archived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConversationStatus {
    Active,
    Archived,
}

impl ConversationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConversationStatus::Active => "active",
            ConversationStatus::Archived => "archived",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "active" => Some(ConversationStatus::Active),
            "archived" => Some(ConversationStatus::Archived),
            _ => None,
        }
    }
}

/// The mutable record of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationRecord {
    /// The id its sessions carry; `None` for a fork until its first commit.
    pub conversation_id: Option<ObjectId>,
    pub title: Option<String>,
    pub default_preset_id: Option<String>,
    pub metadata: BTreeMap<String, Value>,
    pub status: ConversationStatus,
    pub created_at: i64,
    pub updated_at: i64,
}

/// A conversation record set (or, with `None`, removed) by an operation.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationUpdate {
    pub name: String,
    pub record: Option<ConversationRecord>,
}

/// What happened to a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEventKind {
    /// A run claimed the conversation.
    Begin { pid: u32 },
    /// The run wrote its session and released the claim.
    Commit { session: ObjectId },
    /// The run failed (or its process died); nothing was written.
    Fail { error: String },
}

/// An event of the run lifecycle. A run is named by the sequence number of
/// the operation that began it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEvent {
    pub conversation: String,
    pub run: u64,
    pub kind: RunEventKind,
}

/// One atomic change of refs, conversation records and runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Operation {
    /// 1 for the first operation of a store, then consecutive.
    pub seq: u64,
    /// The hash of operation `seq - 1`; `None` for the first.
    pub prev: Option<Hash>,
    /// Milliseconds since the Unix epoch.
    pub time: i64,
    /// Who made the change (e.g. "sessctl", "user@host", a runtime's name).
    pub actor: String,
    /// Why: commit, fork, archive, unarchive, delete, compact, import, ...
    pub reason: String,
    pub refs: Vec<RefUpdate>,
    pub conversations: Vec<ConversationUpdate>,
    pub runs: Vec<RunEvent>,
    /// Ref-log expiries this operation records (`reflog expire`); empty in
    /// every other operation, and then absent from its bytes.
    pub expire: Vec<ReflogExpiry>,
}

/// An expiry of the oldest entries of one ref's log: every entry of `name`
/// up to and including the one whose hash is `through` no longer counts
/// (objects-format.md, "Expiring the ref log"). The entries stay in their
/// operations, so every chain still verifies; they no longer keep objects
/// alive, and the ref log no longer shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReflogExpiry {
    pub name: RefName,
    /// The hash of the newest entry expired.
    pub through: Hash,
}

fn hash_with_header(kind: &str, payload: &[u8]) -> Hash {
    let mut h = blake3::Hasher::new();
    h.update(format!("{kind} {OP_FORMAT_VERSION} {}\0", payload.len()).as_bytes());
    h.update(payload);
    *h.finalize().as_bytes()
}

fn target(e: &mut Encoder, t: &RefTarget) {
    match t {
        RefTarget::Session(id) => e.bytes(id.as_bytes()),
        RefTarget::Symbolic(r) => e.text(&r.to_string()),
    }
}

/// Opens a map for one ref move and writes the keys an operation's update
/// and a reflog entry share (`new`, `old`, `name`, `prev`: first in
/// canonical order); `more` counts the keys the caller writes after them.
fn encode_move(
    e: &mut Encoder,
    name: &RefName,
    old: Option<&RefTarget>,
    new: Option<&RefTarget>,
    prev: Option<&Hash>,
    more: usize,
) {
    e.map(2 + more + new.is_some() as usize + old.is_some() as usize);
    if let Some(t) = new {
        e.text("new");
        target(e, t);
    }
    if let Some(t) = old {
        e.text("old");
        target(e, t);
    }
    e.text("name");
    e.text(&name.to_string());
    e.text("prev");
    match prev {
        Some(p) => e.bytes(p),
        None => e.null(),
    }
}

fn read_target(d: &mut Decoder<'_>) -> Result<RefTarget, CborError> {
    if d.peek_major()? == 2 {
        return Ok(RefTarget::Session(id(d)?));
    }
    let t = d.text()?;
    RefName::parse(t)
        .map(RefTarget::Symbolic)
        .map_err(|e| d.error(format!("bad symbolic target: {e}")))
}

fn ref_name(d: &mut Decoder<'_>) -> Result<RefName, CborError> {
    let t = d.text()?;
    RefName::parse(t).map_err(|e| d.error(e.to_string()))
}

impl Operation {
    /// The canonical bytes (objects-format.md, "Operations").
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::with_capacity(256);
        e.map(
            6 + self.prev.is_some() as usize
                + !self.conversations.is_empty() as usize
                + !self.expire.is_empty() as usize,
        );
        e.text("seq");
        e.uint(self.seq);
        if let Some(p) = &self.prev {
            e.text("prev");
            e.bytes(p);
        }
        e.text("refs");
        e.array(self.refs.len());
        for r in &self.refs {
            encode_move(
                &mut e,
                &r.name,
                r.old.as_ref(),
                r.new.as_ref(),
                r.prev.as_ref(),
                0,
            );
        }
        e.text("runs");
        e.array(self.runs.len());
        for r in &self.runs {
            e.map(4);
            match &r.kind {
                RunEventKind::Begin { pid } => {
                    e.text("pid");
                    e.uint(u64::from(*pid));
                }
                RunEventKind::Commit { .. } | RunEventKind::Fail { .. } => {}
            }
            e.text("run");
            e.uint(r.run);
            e.text("kind");
            e.text(match r.kind {
                RunEventKind::Begin { .. } => "begin",
                RunEventKind::Commit { .. } => "commit",
                RunEventKind::Fail { .. } => "fail",
            });
            match &r.kind {
                RunEventKind::Fail { error } => {
                    e.text("error");
                    e.text(error);
                }
                RunEventKind::Commit { session } => {
                    e.text("session");
                    e.bytes(session.as_bytes());
                }
                RunEventKind::Begin { .. } => {}
            }
            e.text("conversation");
            e.text(&r.conversation);
        }
        e.text("time");
        e.int(self.time);
        e.text("actor");
        e.text(&self.actor);
        if !self.expire.is_empty() {
            e.text("expire");
            e.array(self.expire.len());
            for x in &self.expire {
                e.map(2);
                e.text("name");
                e.text(&x.name.to_string());
                e.text("through");
                e.bytes(&x.through);
            }
        }
        e.text("reason");
        e.text(&self.reason);
        if !self.conversations.is_empty() {
            e.text("conversations");
            e.array(self.conversations.len());
            for c in &self.conversations {
                e.map(2);
                e.text("name");
                e.text(&c.name);
                e.text("record");
                match &c.record {
                    None => e.null(),
                    Some(r) => encode_record(&mut e, r),
                }
            }
        }
        e.into_bytes()
    }

    /// The operation's hash: what the next operation's `prev` names.
    pub fn hash(&self) -> Hash {
        hash_with_header("op", &self.encode())
    }

    /// Strictly decodes canonical bytes.
    pub fn decode(bytes: &[u8]) -> Result<Operation, CborError> {
        let mut d = Decoder::new(bytes);
        let mut op = Operation {
            seq: 0,
            prev: None,
            time: 0,
            actor: String::new(),
            reason: String::new(),
            refs: Vec::new(),
            conversations: Vec::new(),
            runs: Vec::new(),
            expire: Vec::new(),
        };
        let mut seen = 0u32;
        map(&mut d, "operation", &OP_KEYS, |d, k| {
            match k {
                "seq" => {
                    seen |= 1;
                    op.seq = d.uint()?;
                }
                "prev" => op.prev = Some(hash32(d)?),
                "refs" => {
                    seen |= 2;
                    let n = d.array()?;
                    for _ in 0..n {
                        op.refs.push(decode_update(d)?);
                    }
                }
                "runs" => {
                    seen |= 4;
                    let n = d.array()?;
                    for _ in 0..n {
                        op.runs.push(decode_run(d)?);
                    }
                }
                "time" => {
                    seen |= 8;
                    op.time = d.int()?;
                }
                "actor" => {
                    seen |= 16;
                    op.actor = d.text()?.to_owned();
                }
                "reason" => {
                    seen |= 32;
                    op.reason = d.text()?.to_owned();
                }
                "expire" => {
                    let n = d.array()?;
                    if n == 0 {
                        return Err(d.error("an empty expire list must be absent"));
                    }
                    for _ in 0..n {
                        let (mut name, mut through) = (None, None);
                        map(d, "reflog expiry", &["name", "through"], |d, k| {
                            if k == "name" {
                                name = Some(ref_name(d)?);
                            } else {
                                through = Some(hash32(d)?);
                            }
                            Ok(())
                        })?;
                        match (name, through) {
                            (Some(name), Some(through)) => {
                                op.expire.push(ReflogExpiry { name, through })
                            }
                            _ => return Err(d.error("a reflog expiry needs name and through")),
                        }
                    }
                }
                _ => {
                    let n = d.array()?;
                    if n == 0 {
                        return Err(d.error("an empty conversations list must be absent"));
                    }
                    for _ in 0..n {
                        let mut name = None;
                        let mut record = None;
                        map(d, "conversation update", &["name", "record"], |d, k| {
                            if k == "name" {
                                name = Some(d.text()?.to_owned());
                            } else if d.peek_is_null() {
                                d.null()?;
                                record = Some(None);
                            } else {
                                record = Some(Some(decode_record(d)?));
                            }
                            Ok(())
                        })?;
                        match (name, record) {
                            (Some(name), Some(record)) => {
                                op.conversations.push(ConversationUpdate { name, record })
                            }
                            _ => return Err(d.error("conversation update needs name and record")),
                        }
                    }
                }
            }
            Ok(())
        })?;
        if seen != 63 {
            return Err(d.error("operation lacks seq, refs, runs, time, actor or reason"));
        }
        d.finish()?;
        Ok(op)
    }

    /// The reflog entry of each ref update, with its hash.
    pub fn reflog_entries(&self) -> Vec<ReflogEntry> {
        self.refs
            .iter()
            .map(|u| ReflogEntry {
                op: self.seq,
                name: u.name.clone(),
                old: u.old.clone(),
                new: u.new.clone(),
                time: self.time,
                actor: self.actor.clone(),
                reason: self.reason.clone(),
                prev: u.prev,
            })
            .collect()
    }
}

const OP_KEYS: [&str; 9] = [
    "seq",
    "prev",
    "refs",
    "runs",
    "time",
    "actor",
    "expire",
    "reason",
    "conversations",
];
const UPDATE_KEYS: [&str; 4] = ["new", "old", "name", "prev"];
const RUN_KEYS: [&str; 6] = ["pid", "run", "kind", "error", "session", "conversation"];
const RECORD_KEYS: [&str; 7] = [
    "title",
    "status",
    "metadata",
    "created_at",
    "updated_at",
    "conversation",
    "default_preset_id",
];
const REFLOG_KEYS: [&str; 7] = ["new", "old", "name", "prev", "time", "actor", "reason"];

fn hash32(d: &mut Decoder<'_>) -> Result<Hash, CborError> {
    let b = d.bytes()?;
    b.try_into()
        .map_err(|_| d.error(format!("a hash is 32 bytes, not {}", b.len())))
}

fn decode_update(d: &mut Decoder<'_>) -> Result<RefUpdate, CborError> {
    let (mut name, mut old, mut new, mut prev) = (None, None, None, None);
    map(d, "ref update", &UPDATE_KEYS, |d, k| {
        match k {
            "new" => new = Some(read_target(d)?),
            "old" => old = Some(read_target(d)?),
            "name" => name = Some(ref_name(d)?),
            _ => {
                prev = Some(if d.peek_is_null() {
                    d.null()?;
                    None
                } else {
                    Some(hash32(d)?)
                })
            }
        }
        Ok(())
    })?;
    match (name, prev) {
        (Some(name), Some(prev)) => Ok(RefUpdate {
            name,
            old,
            new,
            prev,
        }),
        _ => Err(d.error("ref update needs name and prev")),
    }
}

fn decode_run(d: &mut Decoder<'_>) -> Result<RunEvent, CborError> {
    let (mut pid, mut run, mut kind, mut error, mut session, mut conversation) =
        (None, None, None, None, None, None);
    map(d, "run event", &RUN_KEYS, |d, k| {
        match k {
            "pid" => pid = Some(d.uint()?),
            "run" => run = Some(d.uint()?),
            "kind" => kind = Some(d.text()?.to_owned()),
            "error" => error = Some(d.text()?.to_owned()),
            "session" => session = Some(id(d)?),
            _ => conversation = Some(d.text()?.to_owned()),
        }
        Ok(())
    })?;
    let kind = match (kind.as_deref(), pid, error, session) {
        (Some("begin"), Some(pid), None, None) => RunEventKind::Begin {
            pid: u32::try_from(pid).map_err(|_| d.error("pid out of range"))?,
        },
        (Some("commit"), None, None, Some(session)) => RunEventKind::Commit { session },
        (Some("fail"), None, Some(error), None) => RunEventKind::Fail { error },
        _ => return Err(d.error("run event fields do not match its kind")),
    };
    match (run, conversation) {
        (Some(run), Some(conversation)) => Ok(RunEvent {
            conversation,
            run,
            kind,
        }),
        _ => Err(d.error("run event needs run and conversation")),
    }
}

/// A conversation record's canonical bytes, as inside an operation (bundles
/// carry records in this form: objects-format.md, "Bundles").
pub(crate) fn record_bytes(r: &ConversationRecord) -> Vec<u8> {
    let mut e = Encoder::with_capacity(128);
    encode_record(&mut e, r);
    e.into_bytes()
}

/// Strictly decodes [`record_bytes`].
pub(crate) fn record_from_bytes(bytes: &[u8]) -> Result<ConversationRecord, CborError> {
    let mut d = Decoder::new(bytes);
    let r = decode_record(&mut d)?;
    d.finish()?;
    Ok(r)
}

fn encode_record(e: &mut Encoder, r: &ConversationRecord) {
    e.map(
        3 + r.title.is_some() as usize
            + !r.metadata.is_empty() as usize
            + r.conversation_id.is_some() as usize
            + r.default_preset_id.is_some() as usize,
    );
    if let Some(t) = &r.title {
        e.text("title");
        e.text(t);
    }
    e.text("status");
    e.text(r.status.as_str());
    if !r.metadata.is_empty() {
        e.text("metadata");
        let mut entries: Vec<(&String, &Value)> = r.metadata.iter().collect();
        entries.sort_by(|a, b| canonical_key_cmp(a.0, b.0));
        e.map(entries.len());
        for (k, v) in entries {
            e.text(k);
            e.json(v)
                .expect("metadata values were checked when the record was made");
        }
    }
    e.text("created_at");
    e.int(r.created_at);
    e.text("updated_at");
    e.int(r.updated_at);
    if let Some(c) = &r.conversation_id {
        e.text("conversation");
        e.bytes(c.as_bytes());
    }
    if let Some(p) = &r.default_preset_id {
        e.text("default_preset_id");
        e.text(p);
    }
}

fn decode_record(d: &mut Decoder<'_>) -> Result<ConversationRecord, CborError> {
    let mut r = ConversationRecord {
        conversation_id: None,
        title: None,
        default_preset_id: None,
        metadata: BTreeMap::new(),
        status: ConversationStatus::Active,
        created_at: 0,
        updated_at: 0,
    };
    let mut seen = 0;
    map(d, "conversation record", &RECORD_KEYS, |d, k| {
        match k {
            "title" => r.title = Some(d.text()?.to_owned()),
            "status" => {
                seen |= 1;
                let t = d.text()?;
                r.status = ConversationStatus::parse(t)
                    .ok_or_else(|| d.error(format!("unknown conversation status {t:?}")))?;
            }
            "metadata" => {
                let n = d.map()?;
                if n == 0 {
                    return Err(d.error("empty metadata must be absent"));
                }
                let mut prev: Option<&str> = None;
                for _ in 0..n {
                    let key = d.text()?;
                    if prev.is_some_and(|p| canonical_key_cmp(p, key) != std::cmp::Ordering::Less) {
                        return Err(d.error("metadata keys repeated or out of canonical order"));
                    }
                    prev = Some(key);
                    let v = d.json()?;
                    r.metadata.insert(key.to_owned(), v);
                }
            }
            "created_at" => {
                seen |= 2;
                r.created_at = d.int()?;
            }
            "updated_at" => {
                seen |= 4;
                r.updated_at = d.int()?;
            }
            "conversation" => r.conversation_id = Some(id(d)?),
            _ => r.default_preset_id = Some(d.text()?.to_owned()),
        }
        Ok(())
    })?;
    if seen != 7 {
        return Err(d.error("conversation record needs status, created_at and updated_at"));
    }
    Ok(r)
}

/// One entry of a ref's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReflogEntry {
    /// The operation that made it.
    pub op: u64,
    pub name: RefName,
    pub old: Option<RefTarget>,
    pub new: Option<RefTarget>,
    pub time: i64,
    pub actor: String,
    pub reason: String,
    /// The hash of the ref's previous entry.
    pub prev: Option<Hash>,
}

impl ReflogEntry {
    /// `blake3("reflog 1 <len>\0" || canonical CBOR of the entry)`; the next
    /// entry of the same ref names it as `prev`.
    pub fn hash(&self) -> Hash {
        let mut e = Encoder::with_capacity(160);
        encode_move(
            &mut e,
            &self.name,
            self.old.as_ref(),
            self.new.as_ref(),
            self.prev.as_ref(),
            3,
        );
        e.text("time");
        e.int(self.time);
        e.text("actor");
        e.text(&self.actor);
        e.text("reason");
        e.text(&self.reason);
        debug_assert!(REFLOG_KEYS
            .windows(2)
            .all(|w| canonical_key_cmp(w[0], w[1]).is_lt()));
        hash_with_header("reflog", &e.into_bytes())
    }
}

impl ReflogEntry {
    /// The JSON form of a ref-log entry (`sessctl reflog --json`).
    pub fn to_json(&self) -> serde_json::Value {
        use crate::hash::hex;
        serde_json::json!({
            "op": self.op,
            "ref": self.name.to_string(),
            "old": self.old.as_ref().map(|t| t.to_string()),
            "new": self.new.as_ref().map(|t| t.to_string()),
            "time": self.time,
            "actor": self.actor,
            "reason": self.reason,
            "prev": self.prev.map(|p| hex(&p)),
            "hash": hex(&self.hash()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Operation {
        let mut metadata = BTreeMap::new();
        metadata.insert("cwd".to_owned(), Value::from("/w"));
        Operation {
            seq: 7,
            prev: Some([3; 32]),
            time: 1_763_000_000_000,
            actor: "tester".into(),
            reason: "commit".into(),
            refs: vec![
                RefUpdate {
                    name: RefName::conversation("c1").unwrap(),
                    old: Some(RefTarget::Session(ObjectId::from_bytes([1; 32]))),
                    new: Some(RefTarget::Session(ObjectId::from_bytes([2; 32]))),
                    prev: Some([9; 32]),
                },
                RefUpdate {
                    name: RefName::Head,
                    old: None,
                    new: Some(RefTarget::Symbolic(RefName::conversation("c1").unwrap())),
                    prev: None,
                },
            ],
            conversations: vec![
                ConversationUpdate {
                    name: "c1".into(),
                    record: Some(ConversationRecord {
                        conversation_id: Some(ObjectId::from_bytes([4; 32])),
                        title: Some("t".into()),
                        default_preset_id: Some("p".into()),
                        metadata,
                        status: ConversationStatus::Archived,
                        created_at: 1,
                        updated_at: 2,
                    }),
                },
                ConversationUpdate {
                    name: "gone".into(),
                    record: None,
                },
            ],
            runs: vec![
                RunEvent {
                    conversation: "c1".into(),
                    run: 3,
                    kind: RunEventKind::Begin { pid: 42 },
                },
                RunEvent {
                    conversation: "c1".into(),
                    run: 3,
                    kind: RunEventKind::Commit {
                        session: ObjectId::from_bytes([2; 32]),
                    },
                },
                RunEvent {
                    conversation: "c2".into(),
                    run: 5,
                    kind: RunEventKind::Fail {
                        error: "boom".into(),
                    },
                },
            ],
            expire: vec![ReflogExpiry {
                name: RefName::conversation("c0").unwrap(),
                through: [5; 32],
            }],
        }
    }

    #[test]
    fn key_lists_are_canonical() {
        for keys in [
            &OP_KEYS[..],
            &UPDATE_KEYS[..],
            &RUN_KEYS,
            &RECORD_KEYS[..],
            &REFLOG_KEYS[..],
        ] {
            for w in keys.windows(2) {
                assert!(canonical_key_cmp(w[0], w[1]).is_lt(), "{w:?}");
            }
        }
    }

    #[test]
    fn operations_round_trip_and_never_alias() {
        let op = sample();
        let bytes = op.encode();
        assert_eq!(Operation::decode(&bytes).unwrap(), op);
        let minimal = Operation {
            prev: None,
            conversations: vec![],
            runs: vec![],
            refs: vec![],
            expire: vec![],
            ..sample()
        };
        assert_eq!(Operation::decode(&minimal.encode()).unwrap(), minimal);
        for cut in 0..bytes.len() {
            assert!(Operation::decode(&bytes[..cut]).is_err());
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x08;
            if let Ok(o) = Operation::decode(&b) {
                assert_eq!(o.encode(), b, "byte {i}");
            }
        }
    }

    #[test]
    fn reflog_hashes_cover_every_field() {
        let entries = sample().reflog_entries();
        let h = entries[0].hash();
        let mut e = entries[0].clone();
        e.reason = "fork".into();
        assert_ne!(e.hash(), h);
        let mut e = entries[0].clone();
        e.prev = None;
        assert_ne!(e.hash(), h);
        let mut e = entries[0].clone();
        e.time += 1;
        assert_ne!(e.hash(), h);
    }
}
