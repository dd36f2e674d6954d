//! The derived index: what listing and lookup need without reading object
//! bodies (current refs, per-session and per-conversation summaries, reflog
//! entries, open run claims), kept in sled.
//!
//! It is never the only copy of anything. Every entry is a function of the
//! operations (journal and op log) and the objects they name; the index
//! records the sequence number and hash of the last operation it applied,
//! catches up from there on open, and rebuilds from scratch when that
//! operation is gone or differs (sled's flush is not a durable fsync, so the
//! index may have seen an operation whose frame a crash tore off). Each
//! operation is applied as one atomic sled batch.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::object::{Session, SessionStatus, SessionType, Usage};
use crate::odb::Odb;
use crate::refs::{
    ConversationRecord, ConversationStatus, Hash, Operation, RefName, RefTarget, ReflogEntry,
    RunEventKind,
};

const APPLIED: &[u8] = b"m:applied";
const PREVIEW_CHARS: usize = 200;

fn sled_err(e: sled::Error) -> Error {
    Error::Invalid(format!("index: {e}"))
}

fn key(prefix: &str, rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + rest.len());
    k.extend_from_slice(prefix.as_bytes());
    k.extend_from_slice(rest);
    k
}

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
    fn to_bytes(&self) -> Vec<u8> {
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

    fn from_bytes(id: ObjectId, b: &[u8]) -> Option<SessionInfo> {
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
    fn new(name: &str, record: ConversationRecord) -> Self {
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

// ---- the index's binary encoding ----
//
// Index values were JSON; parsing and printing them was a quarter of a
// commit's cost. Values are now written in a compact binary form that
// starts with a tag byte no JSON text starts with; values written as JSON
// by an earlier version are still read.

const SESSION_TAG: u8 = 0xB1;
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
}

impl SessionInfo {
    fn to_index_bytes(&self) -> Vec<u8> {
        let mut b = Bin::default();
        b.u8(SESSION_TAG)
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

    fn from_index_bytes(id: ObjectId, b: &[u8]) -> Option<SessionInfo> {
        if b.first() != Some(&SESSION_TAG) {
            return SessionInfo::from_bytes(id, b);
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
    fn to_index_bytes(&self) -> Vec<u8> {
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

    fn from_index_bytes(name: &str, b: &[u8]) -> Option<ConversationInfo> {
        if b.first() != Some(&CONVERSATION_TAG) {
            return ConversationInfo::from_bytes(name, b);
        }
        let mut r = Unbin(&b[1..]);
        let conversation_id = r.opt(Unbin::id)?;
        let title = r.opt(|r| r.str().map(str::to_owned))?;
        let default_preset_id = r.opt(|r| r.str().map(str::to_owned))?;
        let metadata = match r.str()? {
            "" => Default::default(),
            text => {
                // Metadata nests as deep as a blob (256), past serde_json's
                // default limit (128): parse what the record encoder took.
                let mut de = serde_json::Deserializer::from_str(text);
                de.disable_recursion_limit();
                match <Value as serde::Deserialize>::deserialize(&mut de).ok()? {
                    Value::Object(m) => m.into_iter().collect(),
                    _ => return None,
                }
            }
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

fn target_bytes(t: &RefTarget) -> Vec<u8> {
    match t {
        RefTarget::Session(id) => {
            let mut v = vec![1u8];
            v.extend_from_slice(id.as_bytes());
            v
        }
        RefTarget::Symbolic(r) => {
            let mut v = vec![2u8];
            v.extend_from_slice(r.to_string().as_bytes());
            v
        }
    }
}

fn target_from(b: &[u8]) -> Option<RefTarget> {
    match b.split_first()? {
        (1, id) => ObjectId::from_slice(id).map(RefTarget::Session),
        (2, name) => RefName::parse(std::str::from_utf8(name).ok()?)
            .ok()
            .map(RefTarget::Symbolic),
        _ => None,
    }
}

fn reflog_json(e: &ReflogEntry) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "op": e.op,
        "old": e.old.as_ref().map(|t| t.to_string()),
        "new": e.new.as_ref().map(|t| t.to_string()),
        "time": e.time,
        "actor": e.actor,
        "reason": e.reason,
        "prev": e.prev.map(|p| crate::hash::hex(&p)),
        "hash": crate::hash::hex(&e.hash()),
    }))
    .expect("a JSON value serializes")
}

/// Activity keys sort by time; the bias makes negative times sort first.
fn activity_key(time: i64, name: &str) -> Vec<u8> {
    let mut k = key("a:", &((time as u64) ^ (1 << 63)).to_be_bytes());
    k.extend_from_slice(name.as_bytes());
    k
}

/// Writes of one operation, readable before they are applied.
struct Overlay<'a> {
    index: &'a Index,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl<'a> Overlay<'a> {
    fn new(index: &'a Index) -> Self {
        Overlay {
            index,
            writes: BTreeMap::new(),
        }
    }
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.writes.get(k) {
            return Ok(v.clone());
        }
        self.index.get(k)
    }
    fn put(&mut self, k: Vec<u8>, v: Vec<u8>) {
        self.writes.insert(k, Some(v));
    }
    fn del(&mut self, k: Vec<u8>) {
        self.writes.insert(k, None);
    }
    /// Hands the operation's writes to the index's pending set.
    fn commit(self) -> Result<()> {
        let flush = {
            let mut p = self.index.pending.lock().expect("index pending lock");
            p.ops += 1;
            p.writes.extend(self.writes);
            p.ops >= FLUSH_EVERY_OPS || p.writes.len() >= FLUSH_EVERY_KEYS
        };
        if flush {
            self.index.flush_pending()?;
        }
        Ok(())
    }
}

/// Applied operations are written to sled in one batch every this many
/// operations (or keys): sled's per-batch cost is its IO threads waking,
/// and the index may lag the journal by design.
const FLUSH_EVERY_OPS: usize = 512;
const FLUSH_EVERY_KEYS: usize = 100_000;

#[derive(Debug, Default)]
struct Pending {
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    ops: usize,
}

/// The derived index of one store.
///
/// Recently applied operations sit in memory (read through, in order) and
/// reach sled together, as one atomic batch that ends with the marker of
/// the last operation it holds; a crash before that costs nothing, since
/// the next open catches up from the journal.
#[derive(Debug)]
pub struct Index {
    db: sled::Db,
    pending: std::sync::Mutex<Pending>,
}

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.flush_pending();
    }
}

/// Where catching up started from, for the open report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Applied this many operations from the journal tail.
    Applied(usize),
    /// The index was missing or disagreed with the journal and was rebuilt.
    Rebuilt(usize),
}

impl Index {
    /// Opens the index at `dir` (created if absent).
    pub fn open(dir: &Path) -> Result<Index> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(64 << 20)
            .open()
            .map_err(sled_err)?;
        Ok(Index {
            db,
            pending: Default::default(),
        })
    }

    /// An index in a temporary directory, for stores that live in memory.
    pub fn temporary() -> Result<Index> {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .map_err(sled_err)?;
        Ok(Index {
            db,
            pending: Default::default(),
        })
    }

    /// One key, pending writes first.
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self
            .pending
            .lock()
            .expect("index pending lock")
            .writes
            .get(k)
        {
            return Ok(v.clone());
        }
        Ok(self.db.get(k).map_err(sled_err)?.map(|v| v.to_vec()))
    }

    /// Writes pending operations to sled as one atomic batch.
    pub fn flush_pending(&self) -> Result<()> {
        let mut p = self.pending.lock().expect("index pending lock");
        if p.writes.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for (k, v) in std::mem::take(&mut p.writes) {
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        p.ops = 0;
        self.db.apply_batch(batch).map_err(sled_err)
    }

    /// Iterates a prefix after writing pending operations, so scans see them.
    fn scan(&self, prefix: &[u8]) -> Result<sled::Iter> {
        self.flush_pending()?;
        Ok(self.db.scan_prefix(prefix))
    }

    /// The last operation applied: (sequence number, hash).
    pub fn applied(&self) -> Result<Option<(u64, Hash)>> {
        let Some(v) = self.get(APPLIED)? else {
            return Ok(None);
        };
        if v.len() != 40 {
            return Ok(None);
        }
        let seq = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
        let hash: Hash = v[8..].try_into().expect("32 bytes");
        Ok(Some((seq, hash)))
    }

    /// Brings the index up to date with the durable operations, rebuilding
    /// it when it does not agree with them.
    pub fn catch_up(&self, odb: &Odb) -> Result<CatchUp> {
        let applied = self.applied()?;
        let from = applied.map(|a| a.0.saturating_sub(1)).unwrap_or(0);
        let raw = odb.backend().ops_after(from)?;
        let mut rest = raw.as_slice();
        if let Some((seq, hash)) = applied {
            match rest.first() {
                Some((s, bytes)) if *s == seq => {
                    let op = decode_op(*s, bytes)?;
                    if op.hash() != hash {
                        return self.rebuild(odb).map(CatchUp::Rebuilt);
                    }
                    rest = &rest[1..];
                }
                _ => return self.rebuild(odb).map(CatchUp::Rebuilt),
            }
        } else if self.db.first().map_err(sled_err)?.is_some() {
            // Entries but no applied marker: not ours to trust.
            return self.rebuild(odb).map(CatchUp::Rebuilt);
        }
        for (seq, bytes) in rest {
            self.apply(&decode_op(*seq, bytes)?, odb)?;
        }
        Ok(CatchUp::Applied(rest.len()))
    }

    /// Clears the index and applies every operation from the first.
    pub fn rebuild(&self, odb: &Odb) -> Result<usize> {
        *self.pending.lock().expect("index pending lock") = Pending::default();
        self.db.clear().map_err(sled_err)?;
        let ops = odb.backend().ops_after(0)?;
        for (seq, bytes) in &ops {
            self.apply(&decode_op(*seq, bytes)?, odb)?;
        }
        self.flush()?;
        Ok(ops.len())
    }

    /// Writes pending operations and asks sled to flush (not a durable
    /// fsync, spacejam/sled#1452: durability comes from the journal).
    pub fn flush(&self) -> Result<()> {
        self.flush_pending()?;
        self.db.flush().map_err(sled_err).map(|_| ())
    }

    /// Applies one operation atomically.
    pub fn apply(&self, op: &Operation, odb: &Odb) -> Result<()> {
        self.apply_with(op, odb, &[])
    }

    /// As [`Index::apply`], given sessions the caller has decoded already
    /// (a commit's own), which are then not read back from the journal.
    pub fn apply_with(
        &self,
        op: &Operation,
        odb: &Odb,
        fresh: &[(ObjectId, Session)],
    ) -> Result<()> {
        let mut o = Overlay::new(self);
        let mut touched: BTreeSet<String> = BTreeSet::new();
        for cu in &op.conversations {
            let k = key("c:", cu.name.as_bytes());
            let old = o
                .get(&k)?
                .and_then(|b| ConversationInfo::from_index_bytes(&cu.name, &b));
            if let Some(old) = &old {
                o.del(activity_key(old.last_activity, &old.name));
                if let Some(cid) = old.record.conversation_id {
                    if cu.record.as_ref().and_then(|r| r.conversation_id) != Some(cid) {
                        o.del(key("i:", cid.as_bytes()));
                    }
                }
            }
            match &cu.record {
                Some(r) => {
                    let mut info = match old {
                        Some(mut i) => {
                            i.record = r.clone();
                            i
                        }
                        None => ConversationInfo::new(&cu.name, r.clone()),
                    };
                    info.last_activity = info.last_activity.max(r.updated_at);
                    if let Some(cid) = r.conversation_id {
                        o.put(key("i:", cid.as_bytes()), cu.name.as_bytes().to_vec());
                    }
                    o.put(k, info.to_index_bytes());
                    o.put(activity_key(info.last_activity, &info.name), Vec::new());
                    touched.insert(cu.name.clone());
                }
                None => o.del(k),
            }
        }
        for (i, (u, entry)) in op.refs.iter().zip(op.reflog_entries()).enumerate() {
            let full = u.name.to_string();
            let rk = key("r:", full.as_bytes());
            match &u.new {
                Some(t) => o.put(rk, target_bytes(t)),
                None => o.del(rk),
            }
            let mut lk = key("l:", full.as_bytes());
            lk.push(0);
            lk.extend_from_slice(&op.seq.to_be_bytes());
            lk.extend_from_slice(&(i as u16).to_be_bytes());
            o.put(lk, reflog_json(&entry));
            o.put(key("h:", full.as_bytes()), entry.hash().to_vec());
            if let Some(RefTarget::Session(id)) = &u.new {
                index_sessions(&mut o, odb, *id, fresh)?;
            }
            if let RefName::Conversation(n) | RefName::Archived(n) = &u.name {
                touched.insert(n.clone());
            }
        }
        for r in &op.runs {
            let k = key("u:", r.conversation.as_bytes());
            match &r.kind {
                RunEventKind::Begin { pid } => o.put(
                    k,
                    serde_json::to_vec(&json!({"run": r.run, "pid": pid, "started_at": op.time}))
                        .expect("a JSON value serializes"),
                ),
                RunEventKind::Commit { .. } | RunEventKind::Fail { .. } => o.del(k),
            }
            touched.insert(r.conversation.clone());
        }
        // Receiving a conversation from another store or importing it from
        // an agent's files is not activity on it: the record's times, taken
        // from the source, carry over (remote.rs, import/).
        let activity = match op.reason.as_str() {
            "unbundle" | "clone" | "push" | "pull" | "import" => i64::MIN,
            _ => op.time,
        };
        for name in &touched {
            summarize(&mut o, name, activity)?;
        }
        let mut applied = op.seq.to_be_bytes().to_vec();
        applied.extend_from_slice(&op.hash());
        o.put(APPLIED.to_vec(), applied);
        o.commit()
    }

    // ---- reads ----

    pub fn get_ref(&self, name: &RefName) -> Result<Option<RefTarget>> {
        Ok(self
            .get(&key("r:", name.to_string().as_bytes()))?
            .and_then(|v| target_from(&v)))
    }

    /// Every ref, sorted by name.
    pub fn refs(&self) -> Result<Vec<(RefName, RefTarget)>> {
        let mut out = Vec::new();
        for kv in self.scan(b"r:")? {
            let (k, v) = kv.map_err(sled_err)?;
            let name = std::str::from_utf8(&k[2..])
                .ok()
                .and_then(|n| RefName::parse(n).ok());
            if let (Some(n), Some(t)) = (name, target_from(&v)) {
                out.push((n, t));
            }
        }
        out.sort_by_key(|a| a.0.to_string());
        Ok(out)
    }

    /// The hash of a ref's newest reflog entry.
    pub fn reflog_head(&self, name: &RefName) -> Result<Option<Hash>> {
        Ok(self
            .get(&key("h:", name.to_string().as_bytes()))?
            .and_then(|v| v.as_slice().try_into().ok()))
    }

    /// A ref's log as the index holds it (JSON objects, oldest first).
    pub fn reflog(&self, name: &RefName) -> Result<Vec<Value>> {
        let mut prefix = key("l:", name.to_string().as_bytes());
        prefix.push(0);
        let mut out = Vec::new();
        for kv in self.scan(&prefix)? {
            let (_, v) = kv.map_err(sled_err)?;
            if let Ok(j) = serde_json::from_slice(&v) {
                out.push(j);
            }
        }
        Ok(out)
    }

    pub fn session(&self, id: &ObjectId) -> Result<Option<SessionInfo>> {
        Ok(self
            .get(&key("s:", id.as_bytes()))?
            .and_then(|v| SessionInfo::from_index_bytes(*id, &v)))
    }

    pub fn conversation(&self, name: &str) -> Result<Option<ConversationInfo>> {
        let Some(v) = self.get(&key("c:", name.as_bytes()))? else {
            return Ok(None);
        };
        let mut info = ConversationInfo::from_index_bytes(name, &v).ok_or_else(|| {
            Error::Invalid(format!(
                "index: unreadable record of conversation {name}; run sessctl reindex"
            ))
        })?;
        info.running = self.claim(name)?;
        Ok(Some(info))
    }

    /// The name of the conversation whose sessions carry `id`.
    pub fn conversation_name(&self, id: &ObjectId) -> Result<Option<String>> {
        Ok(self
            .get(&key("i:", id.as_bytes()))?
            .and_then(|v| String::from_utf8(v).ok()))
    }

    /// Conversations, newest activity first, stopping after `limit`.
    pub fn conversations_by_activity(&self, limit: Option<usize>) -> Result<Vec<ConversationInfo>> {
        self.conversations_where(limit, |_| true)
    }

    /// The conversations `keep` accepts, newest activity first, stopping
    /// after `limit`: only as many records are read as it takes.
    pub fn conversations_where(
        &self,
        limit: Option<usize>,
        keep: impl Fn(&ConversationInfo) -> bool,
    ) -> Result<Vec<ConversationInfo>> {
        let mut out = Vec::new();
        if limit == Some(0) {
            return Ok(out);
        }
        for kv in self.scan(b"a:")?.rev() {
            let (k, _) = kv.map_err(sled_err)?;
            let name = String::from_utf8_lossy(&k[10..]).into_owned();
            if let Some(info) = self.conversation(&name)?.filter(|i| keep(i)) {
                out.push(info);
                if limit.is_some_and(|l| out.len() >= l) {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// The open run claim on a conversation.
    pub fn claim(&self, conversation: &str) -> Result<Option<RunClaim>> {
        let Some(v) = self.get(&key("u:", conversation.as_bytes()))? else {
            return Ok(None);
        };
        let v: Value = serde_json::from_slice(&v).unwrap_or(Value::Null);
        Ok((|| {
            Some(RunClaim {
                run: v["run"].as_u64()?,
                pid: u32::try_from(v["pid"].as_u64()?).ok()?,
                started_at: v["started_at"].as_i64()?,
            })
        })())
    }

    /// Every open run claim: (conversation, claim).
    pub fn claims(&self) -> Result<Vec<(String, RunClaim)>> {
        let mut out = Vec::new();
        let names: Vec<String> = self
            .scan(b"u:")?
            .keys()
            .filter_map(|k| k.ok())
            .map(|k| String::from_utf8_lossy(&k[2..]).into_owned())
            .collect();
        for n in names {
            if let Some(c) = self.claim(&n)? {
                out.push((n, c));
            }
        }
        Ok(out)
    }
}

fn decode_op(seq: u64, bytes: &[u8]) -> Result<Operation> {
    let op = Operation::decode(bytes).map_err(|e| {
        Error::Invalid(format!(
            "operation {seq} does not decode: {e}; run sessctl fsck"
        ))
    })?;
    if op.seq != seq {
        return Err(Error::Invalid(format!(
            "operation entry {seq} holds operation {}; run sessctl fsck",
            op.seq
        )));
    }
    Ok(op)
}

/// Indexes `id` and every session it reaches that is not indexed yet,
/// parents before children. A session that cannot be read is indexed as a
/// placeholder (fsck reports it) so that one damaged object cannot stop
/// the index from opening.
fn index_sessions(
    o: &mut Overlay<'_>,
    odb: &Odb,
    id: ObjectId,
    fresh: &[(ObjectId, Session)],
) -> Result<()> {
    let mut pending = vec![id];
    while let Some(start) = pending.pop() {
        let mut chain: Vec<(ObjectId, Option<Session>)> = Vec::new();
        let mut on_chain: HashSet<ObjectId> = HashSet::new();
        let mut at = Some(start);
        while let Some(cur) = at {
            // `on_chain` guards against a cycle, which only an edited store has.
            if o.get(&key("s:", cur.as_bytes()))?.is_some() || !on_chain.insert(cur) {
                break;
            }
            let s = match fresh.iter().find(|(f, _)| *f == cur) {
                Some((_, s)) => Some(s.clone()),
                None => odb.session(&cur).ok(),
            };
            at = s.as_ref().and_then(|s| s.first_parent());
            chain.push((cur, s));
        }
        for (sid, s) in chain.into_iter().rev() {
            let info = match &s {
                Some(s) => session_info(o, odb, sid, s)?,
                None => SessionInfo {
                    id: sid,
                    conversation: sid,
                    parents: Vec::new(),
                    status: SessionStatus::Failed,
                    created_at: 0,
                    messages: 0,
                    display_messages: 0,
                    usage: Usage::default(),
                    duration_ms: 0,
                    preview: "(unreadable session)".into(),
                    preview_at: None,
                    title: None,
                    session_type: SessionType::Agent,
                },
            };
            o.put(key("s:", sid.as_bytes()), info.to_index_bytes());
            if let Some(name) = o
                .get(&key("i:", info.conversation.as_bytes()))?
                .and_then(|v| String::from_utf8(v).ok())
            {
                let ck = key("c:", name.as_bytes());
                if let Some(mut c) = o
                    .get(&ck)?
                    .and_then(|b| ConversationInfo::from_index_bytes(&name, &b))
                {
                    c.sessions += 1;
                    c.usage.total_tokens += info.usage.total_tokens;
                    c.usage.prompt_tokens += info.usage.prompt_tokens;
                    c.usage.completion_tokens += info.usage.completion_tokens;
                    c.usage.requests += info.usage.requests;
                    o.put(ck, c.to_index_bytes());
                }
            }
            if let Some(s) = &s {
                for p in s.parents.iter().skip(1) {
                    if o.get(&key("s:", p.as_bytes()))?.is_none() {
                        pending.push(*p);
                    }
                }
            }
        }
    }
    Ok(())
}

fn session_info(o: &Overlay<'_>, odb: &Odb, id: ObjectId, s: &Session) -> Result<SessionInfo> {
    let parent = match s.first_parent() {
        Some(p) => o
            .get(&key("s:", p.as_bytes()))?
            .and_then(|b| SessionInfo::from_index_bytes(p, &b)),
        None => None,
    };
    // The preview is the history's first user message: kept from the
    // parent when the kept prefix holds it, else found among the added.
    let (mut preview, mut preview_at) = (String::new(), None);
    if let Some(at) = parent.as_ref().and_then(|p| p.preview_at) {
        if at < s.messages.base {
            preview = parent
                .as_ref()
                .map(|p| p.preview.clone())
                .unwrap_or_default();
            preview_at = Some(at);
        }
    }
    // A compaction's history opens with the summary; the conversation is
    // still about what the compacted session's preview says.
    if let Some(c) = &s.compaction {
        if let Some(before) = o
            .get(&key("s:", c.session.as_bytes()))?
            .and_then(|b| SessionInfo::from_index_bytes(c.session, &b))
            .filter(|i| i.preview_at.is_some())
        {
            preview = before.preview;
            preview_at = Some(0);
        }
    }
    if preview_at.is_none() {
        for (k, m) in s.messages.added.iter().enumerate() {
            let Ok(v) = odb.blob(m) else { continue };
            if let Some(text) = user_text(&v) {
                preview = text.chars().take(PREVIEW_CHARS).collect();
                preview_at = Some(s.messages.base + k as u64);
                break;
            }
        }
    }
    Ok(SessionInfo {
        id,
        conversation: s.conversation_id(id),
        parents: s.parents.clone(),
        status: s.status,
        created_at: s.created_at,
        messages: s.messages.len(),
        display_messages: s.display_messages.len(),
        usage: s.run.usage,
        duration_ms: s.run.duration_ms,
        preview,
        preview_at,
        title: s.title.clone(),
        session_type: s.metadata.session_type,
    })
}

/// The text of a user message in the shapes agents write: OpenAI chat
/// (`role`, `content` string or parts), Claude Code lines (`message`
/// inside, `type: "user"`), Codex items.
pub fn user_text(v: &Value) -> Option<String> {
    let inner = v.get("message").filter(|m| m.is_object()).unwrap_or(v);
    let role = inner
        .get("role")
        .or_else(|| v.get("role"))
        .or_else(|| v.get("type"))
        .and_then(Value::as_str)?;
    if role != "user" {
        return None;
    }
    let text = content_text(inner.get("content")?)?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
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

/// Recomputes what a conversation's summary derives from its refs.
fn summarize(o: &mut Overlay<'_>, name: &str, time: i64) -> Result<()> {
    let ck = key("c:", name.as_bytes());
    let Some(mut info) = o
        .get(&ck)?
        .and_then(|b| ConversationInfo::from_index_bytes(name, &b))
    else {
        return Ok(());
    };
    o.del(activity_key(info.last_activity, name));
    let head = [format!("refs/heads/{name}"), format!("refs/archive/{name}")]
        .iter()
        .find_map(|r| {
            o.get(&key("r:", r.as_bytes()))
                .ok()
                .flatten()
                .and_then(|b| target_from(&b))
        });
    info.head = match head {
        Some(RefTarget::Session(id)) => Some(id),
        _ => None,
    };
    if info.head.is_none() {
        info.messages = 0;
        info.preview = String::new();
    }
    if let Some(h) = info.head {
        if let Some(si) = o
            .get(&key("s:", h.as_bytes()))?
            .and_then(|b| SessionInfo::from_index_bytes(h, &b))
        {
            info.messages = si.messages;
            info.preview = si.preview;
        }
    }
    info.last_activity = info.last_activity.max(time);
    o.put(activity_key(info.last_activity, name), Vec::new());
    o.put(ck, info.to_index_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

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
    fn index_values_round_trip_and_json_ones_still_read() {
        let s = session();
        assert_eq!(
            SessionInfo::from_index_bytes(s.id, &s.to_index_bytes()),
            Some(s.clone())
        );
        assert_eq!(
            SessionInfo::from_index_bytes(s.id, &s.to_bytes()),
            Some(s.clone())
        );
        for running in [false, true] {
            let c = conversation(running);
            assert_eq!(
                ConversationInfo::from_index_bytes("fix", &c.to_index_bytes()),
                Some(c.clone())
            );
            assert_eq!(
                ConversationInfo::from_index_bytes("fix", &c.to_bytes()),
                Some(c.clone())
            );
        }
    }

    #[test]
    fn cut_or_padded_index_values_do_not_decode() {
        let s = session().to_index_bytes();
        let c = conversation(true).to_index_bytes();
        for n in 0..s.len() {
            assert!(SessionInfo::from_index_bytes(session().id, &s[..n]).is_none());
        }
        for n in 0..c.len() {
            assert!(ConversationInfo::from_index_bytes("fix", &c[..n]).is_none());
        }
        let mut long = s.clone();
        long.push(0);
        assert!(SessionInfo::from_index_bytes(session().id, &long).is_none());
    }
}
