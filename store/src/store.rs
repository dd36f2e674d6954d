//! The store: objects, refs, conversations and runs, as an agent runtime
//! embeds them.
//!
//! Every change is an [`Operation`] appended to the journal in the same
//! frame as its objects. The compare-and-swap of refs, the append and the
//! update of the derived index happen under one lock, in sequence order; the
//! `fdatasync` happens after it is released, so concurrent commits to
//! different conversations share syncs and never wait on each other's CAS.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

use crate::compact::{AutoCompaction, AutoCompactionError};
use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::index::{CatchUp, ConversationInfo, Index, RunClaim, SessionInfo};
use crate::object::{
    blob, Compaction, EncodedObject, MessageDelta, ObjectKind, RunSummary, Session,
    SessionMetadata, SessionStatus,
};
use crate::odb::{Durability, Odb, OpenOptions};
use crate::refs::{
    validate_name, ConversationRecord, ConversationStatus, ConversationUpdate, Hash, Operation,
    PreviousValue, RefEdit, RefName, RefTarget, RefUpdate, ReflogEntry, RunEvent, RunEventKind,
};
use crate::time::now_ms;

/// A set of changes applied atomically.
#[derive(Debug, Clone, Default)]
pub struct Transaction {
    /// Why (recorded in the ref log): commit, fork, archive, ...
    pub reason: String,
    pub edits: Vec<RefEdit>,
    pub conversations: Vec<ConversationUpdate>,
    pub runs: Vec<RunEvent>,
    /// Objects written in the same frame.
    pub objects: Vec<EncodedObject>,
    /// Conversations that must have no open run claim.
    pub require_unclaimed: Vec<String>,
    /// (conversation, run) claims that must be open.
    pub require_claim: Vec<(String, u64)>,
}

/// What a committed transaction became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// The operation's sequence number.
    pub op: u64,
}

/// How messages are given to a commit.
#[derive(Debug, Clone)]
pub enum Messages {
    /// Messages appended to the parent's history.
    Added(Vec<Value>),
    /// The full new history; the common prefix with the parent's is kept.
    History(Vec<Value>),
}

impl Default for Messages {
    fn default() -> Self {
        Messages::Added(Vec::new())
    }
}

/// What one turn (one session) adds.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub messages: Messages,
    /// Display messages; `None` mirrors `messages`.
    pub display: Option<Messages>,
    /// New context state; `None` keeps the parent's.
    pub context_state: Option<Value>,
    /// New environment state; `None` keeps the parent's.
    pub environment_state: Option<Value>,
    /// The session's title; also becomes the conversation's title.
    pub title: Option<String>,
    /// `None` means committed.
    pub status: Option<SessionStatus>,
    pub run: RunSummary,
    pub metadata: SessionMetadata,
    /// `None` means now.
    pub created_at: Option<i64>,
}

/// Where a fork cuts its source's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Keep the first N messages.
    AtMessage(u64),
    /// Keep messages up to and including this one.
    AtMessageId(ObjectId),
}

/// A fork request.
#[derive(Debug, Clone, Default)]
pub struct ForkOptions {
    /// The new conversation's name (default: `fork-<12 hex of the source>`).
    pub name: Option<String>,
    pub cut: Option<Cut>,
    /// Messages the fork adds right away (a fork with neither a cut nor
    /// messages writes no object: it is a new ref at the source).
    pub turn: Option<Turn>,
}

/// A run in progress on a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub conversation: String,
    pub id: u64,
    /// The head when the run began; its commit must continue it.
    pub head: Option<ObjectId>,
}

#[derive(Debug)]
struct OpState {
    seq: u64,
    hash: Option<Hash>,
}

/// A sessctl store.
#[derive(Debug)]
pub struct Store {
    root: Option<std::path::PathBuf>,
    odb: Odb,
    index: Index,
    state: Mutex<OpState>,
    actor: String,
    notes: Mutex<Vec<String>>,
    /// Compaction applied after commits (see `compact.rs`).
    pub(crate) auto_compaction: std::sync::RwLock<Option<AutoCompaction>>,
    pub(crate) auto_compaction_errors: Mutex<Vec<AutoCompactionError>>,
    /// The lineage index, loaded on first use (see `lineage.rs`).
    pub(crate) lineage: crate::lineage::Slot,
    /// Whether this handle may write (holds the writer lock).
    writable: bool,
    /// The last operation applied when the store was opened.
    opened_seq: u64,
}

/// A writer leaves a listing of the newest conversations behind for the
/// next `ls` (see `listing.rs`).
impl Drop for Store {
    fn drop(&mut self) {
        if self.writable {
            let _ = self.write_listing();
        }
    }
}

impl Store {
    /// Creates a store at `path` and opens it.
    pub fn init(path: &Path) -> Result<Store> {
        crate::odb::init_layout(path)?;
        Store::open(path, &OpenOptions::default())
    }

    /// Opens a store. A writable open catches the index up with the journal
    /// and marks runs left open by a dead process failed. A read-only open
    /// takes no lock and builds a temporary index.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Store> {
        let odb = Odb::open(path, opts)?;
        let mut set_aside = None;
        let index = if opts.read_only {
            Index::temporary()?
        } else {
            let dir = path.join("index");
            match Index::open(&dir) {
                Ok(i) => i,
                // The index is derived: a damaged one is set aside (never
                // deleted on a guess) and rebuilt from the journal.
                Err(e) if dir.exists() => {
                    let aside = path.join(format!("index.broken-{}", now_ms()));
                    std::fs::rename(&dir, &aside).map_err(|io| Error::io(&dir, io))?;
                    set_aside = Some(format!(
                        "the index did not open ({e}); moved it to {} and rebuilt it",
                        aside.display()
                    ));
                    Index::open(&dir)?
                }
                Err(e) => return Err(e),
            }
        };
        let mut store = Store::assemble(odb, index, !opts.read_only)?;
        if let Some(n) = set_aside {
            store.note(n);
        }
        store.root = Some(path.to_path_buf());
        Ok(store)
    }

    /// A store in memory only.
    pub fn in_memory() -> Result<Store> {
        Store::assemble(Odb::in_memory(), Index::temporary()?, true)
    }

    fn assemble(odb: Odb, index: Index, writable: bool) -> Result<Store> {
        let mut notes = odb.take_recovery_notes();
        match index.catch_up(&odb)? {
            CatchUp::Rebuilt(n) if n > 0 => notes.push(format!(
                "the index did not match the journal; rebuilt it from {n} operations"
            )),
            _ => {}
        }
        let (seq, hash) = match index.applied()? {
            Some((s, h)) => (s, Some(h)),
            None => (0, None),
        };
        let store = Store {
            root: None,
            odb,
            index,
            state: Mutex::new(OpState { seq, hash }),
            actor: default_actor(),
            notes: Mutex::new(notes),
            auto_compaction: std::sync::RwLock::new(None),
            auto_compaction_errors: Mutex::new(Vec::new()),
            lineage: crate::lineage::Slot::default(),
            writable,
            opened_seq: seq,
        };
        if writable {
            store.recover_runs()?;
        }
        Ok(store)
    }

    /// Syncs the journal and writes the listing of the newest
    /// conversations, unless the one on disk is current already.
    fn write_listing(&self) -> Result<()> {
        let Some(root) = &self.root else {
            return Ok(());
        };
        let (seq, hash) = {
            let st = self.state.lock().expect("state lock");
            (st.seq, st.hash)
        };
        if seq == self.opened_seq && crate::listing::read_current(root).is_some() {
            return Ok(());
        }
        if !self.index.claims()?.is_empty() {
            // A run is open: `ls` must ask the index, which knows whether
            // its process is still alive.
            crate::listing::remove(root);
            return Ok(());
        }
        let (_, end) = self.odb.backend().append(&[], &[])?;
        self.odb.backend().sync(end)?;
        let newest = self
            .index
            .conversations_where(Some(crate::listing::LISTING_LIMIT + 1), |_| true)?;
        crate::listing::write(root, hash.map(|h| (seq, h)), newest)
    }

    /// Packs journal segments sealed by rotation (see
    /// `ObjectBackend::maintain`). The commit is durable already, so a
    /// failure here is not the commit's: it is noted, and the next write
    /// or repack tries again.
    fn upkeep(&self) {
        if let Err(e) = self.odb.backend().maintain() {
            self.note(format!("packing sealed journal segments failed: {e}"));
        }
    }

    /// Runs left open by a process that is gone are marked failed.
    fn recover_runs(&self) -> Result<()> {
        let claims = self.index.claims()?;
        if claims.is_empty() {
            return Ok(());
        }
        let mut tx = Transaction {
            reason: "recover".into(),
            ..Transaction::default()
        };
        for (conv, c) in &claims {
            tx.runs.push(RunEvent {
                conversation: conv.clone(),
                run: c.run,
                kind: RunEventKind::Fail {
                    error: format!("process {} ended without committing", c.pid),
                },
            });
            self.note(format!(
                "run {} on {conv} (pid {}) was left open by a process that is gone; marked failed",
                c.run, c.pid
            ));
        }
        self.transact(tx, Durability::Sync)?;
        Ok(())
    }

    pub(crate) fn note(&self, n: String) {
        self.notes.lock().expect("notes lock").push(n);
    }

    /// What opening the store repaired, one line each.
    pub fn take_recovery_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().expect("notes lock"))
    }

    /// Names the actor recorded in the ref log.
    pub fn set_actor(&mut self, actor: impl Into<String>) {
        self.actor = actor.into();
    }

    pub fn odb(&self) -> &Odb {
        &self.odb
    }

    /// The store's directory; `None` for a store in memory.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Holds off every transaction while maintenance (gc) runs.
    pub(crate) fn lock_state(&self) -> impl Drop + '_ {
        self.state.lock().expect("state lock")
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Rebuilds the index from the journal, the op log and the objects.
    pub fn reindex(&self) -> Result<usize> {
        let _st = self.state.lock().expect("state lock");
        self.index.rebuild(&self.odb)
    }

    // ---- refs ----

    pub fn get_ref(&self, name: &RefName) -> Result<Option<RefTarget>> {
        self.index.get_ref(name)
    }

    /// The session a ref leads to, following `HEAD`'s symbolic link.
    pub fn resolve_ref(&self, name: &RefName) -> Result<Option<ObjectId>> {
        match self.index.get_ref(name)? {
            Some(RefTarget::Session(id)) => Ok(Some(id)),
            Some(RefTarget::Symbolic(r)) if r != *name => match self.index.get_ref(&r)? {
                Some(RefTarget::Session(id)) => Ok(Some(id)),
                _ => Ok(None),
            },
            _ => Ok(None),
        }
    }

    pub fn refs(&self) -> Result<Vec<(RefName, RefTarget)>> {
        self.index.refs()
    }

    /// Applies a transaction atomically: every edit's expected value is
    /// checked, then objects and the operation are appended in one frame,
    /// then (with [`Durability::Sync`]) synced.
    pub fn transact(&self, tx: Transaction, durability: Durability) -> Result<Committed> {
        let mut named: Vec<(ObjectId, ObjectId)> = Vec::new();
        let mut fresh: Vec<(ObjectId, Session)> = Vec::new();
        for o in &tx.objects {
            if o.kind() == ObjectKind::Session {
                // Decoding proves the bytes are a session; the index takes it
                // as decoded here.
                let s = Session::decode(o.payload()).map_err(|e| Error::decode(o.id(), e))?;
                for r in s.blobs().chain(s.sessions()) {
                    named.push((o.id(), r));
                }
                fresh.push((o.id(), s));
            }
        }
        let mut st = self.state.lock().expect("state lock");
        // Under the lock gc also holds: nothing a new session names can be
        // swept between this check and the append.
        for (session, r) in &named {
            if !tx.objects.iter().any(|o| o.id() == *r) && !self.odb.contains(r)? {
                return Err(Error::Invalid(format!(
                    "session {session} names {r}, which the store does not have"
                )));
            }
        }
        for conv in &tx.require_unclaimed {
            if let Some(c) = self.index.claim(conv)? {
                return Err(Error::Busy {
                    conversation: conv.clone(),
                    run: c.run,
                    pid: c.pid,
                });
            }
        }
        for (conv, run) in &tx.require_claim {
            match self.index.claim(conv)? {
                Some(c) if c.run == *run => {}
                _ => {
                    return Err(Error::Invalid(format!(
                        "run {run} on {conv} is not open (it ended, or the store was reopened)"
                    )))
                }
            }
        }
        let mut updates = Vec::with_capacity(tx.edits.len());
        for e in &tx.edits {
            let current = self.index.get_ref(&e.name)?;
            let ok = match &e.expected {
                PreviousValue::Any => true,
                PreviousValue::MustNotExist => current.is_none(),
                PreviousValue::MustExist => current.is_some(),
                PreviousValue::MustMatch(t) => current.as_ref() == Some(t),
            };
            if !ok {
                return Err(Error::RefOutOfDate {
                    name: e.name.to_string(),
                    expected: match &e.expected {
                        PreviousValue::MustMatch(t) => Some(t.to_string()),
                        PreviousValue::MustExist => Some("a value".into()),
                        _ => None,
                    },
                    actual: current.map(|t| t.to_string()),
                });
            }
            if let Some(RefTarget::Session(id)) = &e.new {
                let in_tx = tx.objects.iter().any(|o| o.id() == *id);
                if !in_tx {
                    match self.odb.read(id) {
                        Ok(o) if o.kind() == ObjectKind::Session => {}
                        Ok(o) => {
                            return Err(Error::WrongKind {
                                id: *id,
                                expected: ObjectKind::Session,
                                actual: o.kind(),
                            })
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            if let Some(RefTarget::Symbolic(r)) = &e.new {
                if e.name != RefName::Head || *r == RefName::Head {
                    return Err(Error::Invalid(format!(
                        "only HEAD may point at another ref, and not at itself ({} -> {r})",
                        e.name
                    )));
                }
            }
            // An edit that changes nothing was a check only: it is not a
            // move, so it leaves no reflog entry.
            if current == e.new {
                continue;
            }
            updates.push(RefUpdate {
                name: e.name.clone(),
                old: current,
                new: e.new.clone(),
                prev: self.index.reflog_head(&e.name)?,
            });
        }
        let new_objects = tx
            .objects
            .iter()
            .map(|o| self.odb.contains(&o.id()).map(|has| !has))
            .collect::<Result<Vec<bool>>>()?
            .into_iter()
            .any(|new| new);
        if updates.is_empty() && tx.conversations.is_empty() && tx.runs.is_empty() && !new_objects {
            // Nothing would change: no operation, nothing to sync.
            return Ok(Committed { op: st.seq });
        }
        let op = Operation {
            seq: st.seq + 1,
            prev: st.hash,
            time: now_ms(),
            actor: self.actor.clone(),
            reason: tx.reason,
            refs: updates,
            conversations: tx.conversations,
            runs: tx.runs,
        };
        let bytes = op.encode();
        let (_, ticket) = self.odb.backend().append(&tx.objects, &[(op.seq, bytes)])?;
        st.seq = op.seq;
        st.hash = Some(op.hash());
        // The operation is in the journal: the index follows it. Should this
        // fail, the next open catches the index up from the journal.
        self.index.apply_with(&op, &self.odb, &fresh)?;
        drop(st);
        if durability == Durability::Sync {
            self.odb.backend().sync(ticket)?;
        }
        self.upkeep();
        Ok(Committed { op: op.seq })
    }

    /// Resolves a revision to a session: a name as [`Store::resolve_name`]
    /// takes it, then any number of `~N` (N-th first-parent ancestor) and
    /// `^N` (N-th parent) steps, as in git (see [`crate::rev`]).
    pub fn resolve_rev(&self, rev: &str) -> Result<ObjectId> {
        crate::rev::resolve(self, rev)
    }

    /// Resolves a name to a session: `HEAD` or `@`, a conversation
    /// name (its head), `archive/<name>`, `tags/<name>` or a tag name, a
    /// full ref name, a full id or a unique prefix of 4+ hex digits. Names
    /// win over prefixes, as in git.
    pub fn resolve_name(&self, rev: &str) -> Result<ObjectId> {
        let unknown = || {
            Error::Invalid(format!(
                "unknown revision '{rev}': not a conversation, ref, tag or object id"
            ))
        };
        if rev == "HEAD" || rev == "@" {
            return self.resolve_ref(&RefName::Head)?.ok_or(Error::NoHead);
        }
        let mut candidates: Vec<RefName> = Vec::new();
        if rev.starts_with("refs/") {
            candidates.push(RefName::parse(rev)?);
        } else if let Some(n) = rev.strip_prefix("archive/") {
            candidates.push(RefName::archived(n)?);
        } else if let Some(n) = rev.strip_prefix("tags/") {
            candidates.push(RefName::tag(n)?);
        } else if validate_name(rev).is_ok() {
            candidates.push(RefName::conversation(rev)?);
            candidates.push(RefName::tag(rev)?);
            candidates.push(RefName::archived(rev)?);
        }
        for c in &candidates {
            if let Some(RefTarget::Session(id)) = self.index.get_ref(c)? {
                return Ok(id);
            }
        }
        if rev.len() >= crate::hash::MIN_PREFIX_LEN && rev.bytes().all(|b| b.is_ascii_hexdigit()) {
            let id = self.odb.resolve(rev)?;
            let obj = self.odb.read(&id)?;
            if obj.kind() != ObjectKind::Session {
                return Err(Error::Invalid(format!(
                    "{rev} names {id}, a {}, not a session",
                    obj.kind()
                )));
            }
            return Ok(id);
        }
        if !candidates.is_empty() || rev.starts_with("refs/") {
            if let Some(RefName::Conversation(n)) = candidates.first() {
                if self.index.conversation(n)?.is_some() {
                    return Err(Error::Invalid(format!("conversation {n} has no head")));
                }
            }
        }
        Err(unknown())
    }

    // ---- the ref log ----

    /// Every ref's log entries, oldest first, read from the durable
    /// operations (journal and op log), not the index.
    pub fn reflog_entries(&self) -> Result<Vec<ReflogEntry>> {
        let mut out = Vec::new();
        for (seq, bytes) in self.odb.backend().ops_after(0)? {
            let op = Operation::decode(&bytes)
                .map_err(|e| Error::Invalid(format!("operation {seq} does not decode: {e}")))?;
            out.extend(op.reflog_entries());
        }
        Ok(out)
    }

    /// Walks the operation chain and every ref's log chain; returns the
    /// problems found, one line each (empty when all chains hold).
    pub fn verify_chains(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let mut prev_op: Option<Hash> = None;
        let mut expect_seq = 1;
        let mut heads: BTreeMap<String, Hash> = BTreeMap::new();
        for (seq, bytes) in self.odb.backend().ops_after(0)? {
            let op = match Operation::decode(&bytes) {
                Ok(op) => op,
                Err(e) => {
                    problems.push(format!("operation {seq}: does not decode: {e}"));
                    prev_op = None;
                    expect_seq = seq + 1;
                    continue;
                }
            };
            if seq != expect_seq {
                problems.push(format!(
                    "operation {seq}: expected operation {expect_seq} (operations are missing)"
                ));
            }
            if op.prev != prev_op && seq == expect_seq {
                problems.push(format!(
                    "operation {seq}: names a previous operation that is not the one before it"
                ));
            }
            for entry in op.reflog_entries() {
                let name = entry.name.to_string();
                let expected = heads.get(&name).copied();
                if entry.prev != expected {
                    problems.push(format!(
                        "{name}: reflog entry of operation {seq} does not chain to the entry before it"
                    ));
                }
                heads.insert(name, entry.hash());
            }
            prev_op = Some(op.hash());
            expect_seq = seq + 1;
        }
        Ok(problems)
    }

    // ---- conversations ----

    pub fn conversation(&self, name: &str) -> Result<Option<ConversationInfo>> {
        self.index.conversation(name)
    }

    fn require_conversation(&self, name: &str) -> Result<ConversationInfo> {
        validate_name(name)?;
        self.index
            .conversation(name)?
            .ok_or_else(|| Error::NoSuchConversation {
                name: name.to_owned(),
            })
    }

    /// Conversations, newest activity first.
    pub fn conversations(&self, limit: Option<usize>) -> Result<Vec<ConversationInfo>> {
        self.index.conversations_by_activity(limit)
    }

    /// The conversations `keep` accepts, newest activity first, stopping
    /// after `limit` (reads no more records than that takes).
    pub fn conversations_where(
        &self,
        limit: Option<usize>,
        keep: impl Fn(&ConversationInfo) -> bool,
    ) -> Result<Vec<ConversationInfo>> {
        self.index.conversations_where(limit, keep)
    }

    pub fn session_info(&self, id: &ObjectId) -> Result<Option<SessionInfo>> {
        self.index.session(id)
    }

    /// The conversation `HEAD` names, if it names one.
    pub fn head_conversation(&self) -> Result<Option<String>> {
        Ok(match self.index.get_ref(&RefName::Head)? {
            Some(RefTarget::Symbolic(RefName::Conversation(n))) => Some(n),
            _ => None,
        })
    }

    /// Builds a session continuing `parent` (or a root) from a turn; returns
    /// the session and the objects to write.
    fn build_session(
        &self,
        parent: Option<ObjectId>,
        conversation: Option<ObjectId>,
        turn: Turn,
        extra_parents: &[ObjectId],
        cut: Option<(u64, u64)>,
        compaction: Option<Compaction>,
    ) -> Result<(Session, Vec<EncodedObject>)> {
        let mut objects = Vec::new();
        let mut put = |v: &Value| -> Result<ObjectId> {
            let o = EncodedObject::new(ObjectKind::Blob, blob::encode_value(v)?);
            let id = o.id();
            objects.push(o);
            Ok(id)
        };
        let parent_session = match parent {
            Some(p) => Some(self.odb.session(&p)?),
            None => None,
        };
        let delta = |given: &Messages,
                     history: &dyn Fn() -> Result<Vec<ObjectId>>,
                     parent_len: u64,
                     put: &mut dyn FnMut(&Value) -> Result<ObjectId>|
         -> Result<MessageDelta> {
            match given {
                Messages::Added(msgs) => Ok(MessageDelta {
                    base: parent_len,
                    added: msgs.iter().map(&mut *put).collect::<Result<_>>()?,
                }),
                Messages::History(msgs) => {
                    let new: Vec<ObjectId> = msgs.iter().map(&mut *put).collect::<Result<_>>()?;
                    Ok(MessageDelta::between(&history()?, &new))
                }
            }
        };
        let (parent_len, parent_display_len) = match (&parent, &parent_session) {
            (Some(p), Some(_)) => match self.index.session(p)? {
                Some(i) => (i.messages, i.display_messages),
                None => (
                    self.odb.history(p)?.len() as u64,
                    self.odb.display_history(p)?.len() as u64,
                ),
            },
            _ => (0, 0),
        };
        let (parent_len, parent_display_len) = cut.unwrap_or((parent_len, parent_display_len));
        let messages = match compaction {
            // A compaction replaces the whole history (objects-format.md, "History").
            Some(_) => delta(&turn.messages, &|| Ok(Vec::new()), 0, &mut put)?,
            None => delta(
                &turn.messages,
                &|| parent.map_or(Ok(Vec::new()), |p| self.odb.history(&p)),
                parent_len,
                &mut put,
            )?,
        };
        let display_messages = match &turn.display {
            Some(d) => delta(
                d,
                &|| parent.map_or(Ok(Vec::new()), |p| self.odb.display_history(&p)),
                parent_display_len,
                &mut put,
            )?,
            None => match &turn.messages {
                Messages::Added(_) => MessageDelta {
                    base: parent_display_len,
                    added: messages.added.clone(),
                },
                Messages::History(_) => messages.clone(),
            },
        };
        let context_state = match &turn.context_state {
            Some(v) => Some(put(v)?),
            None => parent_session.as_ref().and_then(|s| s.context_state),
        };
        let environment_state = match &turn.environment_state {
            Some(v) => Some(put(v)?),
            None => parent_session.as_ref().and_then(|s| s.environment_state),
        };
        let mut parents: Vec<ObjectId> = parent.into_iter().collect();
        parents.extend_from_slice(extra_parents);
        let session = Session {
            parents,
            conversation,
            status: turn.status.unwrap_or(SessionStatus::Committed),
            created_at: turn.created_at.unwrap_or_else(now_ms),
            title: turn.title,
            run: turn.run,
            messages,
            display_messages,
            context_state,
            environment_state,
            metadata: turn.metadata,
            compaction,
        };
        let encoded = session.encode()?;
        objects.push(encoded);
        Ok((session, objects))
    }

    /// Starts a conversation with a root session; returns its name and the
    /// session. The name defaults to the first 12 hex digits of the root's
    /// id. `HEAD` moves to it.
    pub fn create(
        &self,
        name: Option<&str>,
        turn: Turn,
        durability: Durability,
    ) -> Result<(String, ObjectId)> {
        if let Some(n) = name {
            validate_name(n)?;
        }
        let title = turn.title.clone();
        let preset = turn.metadata.preset_id.clone();
        let (session, objects) = self.build_session(None, None, turn, &[], None, None)?;
        let id = objects.last().expect("the session is last").id();
        let name = name
            .map(str::to_owned)
            .unwrap_or_else(|| id.to_hex_prefix(12));
        if self.index.conversation(&name)?.is_some() {
            return Err(Error::ConversationExists { name });
        }
        let record = ConversationRecord {
            conversation_id: Some(id),
            title,
            default_preset_id: preset,
            metadata: BTreeMap::new(),
            status: ConversationStatus::Active,
            created_at: session.created_at,
            updated_at: session.created_at,
        };
        self.start_conversation("create", &name, id, record, objects, durability)?;
        Ok((name, id))
    }

    /// Commits a turn on a conversation's head (a continuation). With
    /// `expected_head`, the head must still be that session.
    pub fn commit(
        &self,
        name: &str,
        expected_head: Option<ObjectId>,
        turn: Turn,
        durability: Durability,
    ) -> Result<ObjectId> {
        let id = self.commit_with(name, expected_head, turn, &[], None, None, durability)?;
        self.auto_compact_after_commit(name, id);
        Ok(id)
    }

    /// Commits a session with several parents: the head and `others` (for
    /// example a subagent's result merged back).
    pub fn merge(
        &self,
        name: &str,
        others: &[ObjectId],
        turn: Turn,
        durability: Durability,
    ) -> Result<ObjectId> {
        let id = self.commit_with(name, None, turn, others, None, None, durability)?;
        self.auto_compact_after_commit(name, id);
        Ok(id)
    }

    /// With `compaction`, the session replaces the whole history (base 0)
    /// and records what it summarised; the operation's reason is `compact`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn commit_with(
        &self,
        name: &str,
        expected_head: Option<ObjectId>,
        turn: Turn,
        extra_parents: &[ObjectId],
        run: Option<&Run>,
        compaction: Option<Compaction>,
        durability: Durability,
    ) -> Result<ObjectId> {
        let info = self.require_conversation(name)?;
        if info.record.status == ConversationStatus::Archived {
            return Err(Error::Invalid(format!(
                "conversation {name} is archived; unarchive it to continue it"
            )));
        }
        let head = info.head.ok_or_else(|| Error::NoSuchConversation {
            name: name.to_owned(),
        })?;
        if let Some(e) = expected_head {
            if e != head {
                return Err(Error::RefOutOfDate {
                    name: format!("refs/heads/{name}"),
                    expected: Some(e.to_string()),
                    actual: Some(head.to_string()),
                });
            }
        }
        let mut record = info.record.clone();
        // A fork's first commit starts its conversation: the session names
        // none, so its own id becomes the conversation's.
        let conversation = record.conversation_id;
        if let Some(t) = &turn.title {
            record.title = Some(t.clone());
        }
        let (session, objects) = self.build_session(
            Some(head),
            conversation,
            turn,
            extra_parents,
            None,
            compaction,
        )?;
        let id = objects.last().expect("the session is last").id();
        if record.conversation_id.is_none() {
            record.conversation_id = Some(id);
        }
        record.updated_at = session.created_at.max(record.updated_at);
        let conv_ref = RefName::conversation(name)?;
        let mut tx = Transaction {
            reason: if compaction.is_some() {
                "compact"
            } else if extra_parents.is_empty() {
                "commit"
            } else {
                "merge"
            }
            .into(),
            edits: vec![
                RefEdit {
                    name: conv_ref.clone(),
                    expected: PreviousValue::MustMatch(RefTarget::Session(head)),
                    new: Some(RefTarget::Session(id)),
                },
                RefEdit {
                    name: RefName::Head,
                    expected: PreviousValue::Any,
                    new: Some(RefTarget::Symbolic(conv_ref)),
                },
            ],
            conversations: vec![ConversationUpdate {
                name: name.to_owned(),
                record: Some(record),
            }],
            objects,
            ..Transaction::default()
        };
        match run {
            Some(r) => {
                tx.require_claim.push((r.conversation.clone(), r.id));
                tx.runs.push(RunEvent {
                    conversation: r.conversation.clone(),
                    run: r.id,
                    kind: RunEventKind::Commit { session: id },
                });
            }
            None => tx.require_unclaimed.push(name.to_owned()),
        }
        self.transact(tx, durability)?;
        Ok(id)
    }

    /// Forks a new conversation from any session. A plain fork (no cut, no
    /// turn) writes no object: it is a new ref at `from`, and the first
    /// commit on it starts the new conversation. `HEAD` moves to the fork.
    pub fn fork(
        &self,
        from: ObjectId,
        opts: ForkOptions,
        durability: Durability,
    ) -> Result<(String, ObjectId)> {
        let source = self.odb.session(&from)?;
        let name = match opts.name {
            Some(n) => {
                validate_name(&n)?;
                if self.index.conversation(&n)?.is_some() {
                    return Err(Error::ConversationExists { name: n });
                }
                n
            }
            None => self.free_name(&format!("fork-{}", from.to_hex_prefix(12)))?,
        };
        let now = now_ms();
        // A fork is about what its source was about: the session's title, or
        // else its conversation's.
        let title = match &source.title {
            Some(t) => Some(t.clone()),
            None => self
                .index
                .conversation_name(&source.conversation_id(from))?
                .and_then(|n| self.index.conversation(&n).ok().flatten())
                .and_then(|c| c.record.title),
        };
        let mut record = ConversationRecord {
            conversation_id: None,
            title,
            default_preset_id: source.metadata.preset_id.clone(),
            metadata: BTreeMap::new(),
            status: ConversationStatus::Active,
            created_at: now,
            updated_at: now,
        };
        let (head, objects) = if opts.cut.is_none() && opts.turn.is_none() {
            (from, Vec::new())
        } else {
            let history = self.odb.history(&from)?;
            let display = self.odb.display_history(&from)?;
            let keep = match opts.cut {
                None => history.len() as u64,
                Some(Cut::AtMessage(k)) => {
                    if k > history.len() as u64 {
                        return Err(Error::Invalid(format!(
                            "cannot cut at message {k}: session {from} has {} messages",
                            history.len()
                        )));
                    }
                    k
                }
                Some(Cut::AtMessageId(m)) => {
                    let pos = history.iter().position(|h| *h == m).ok_or_else(|| {
                        Error::Invalid(format!(
                            "message {m} is not in the history of session {from}"
                        ))
                    })?;
                    pos as u64 + 1
                }
            };
            // Display messages are cut at the same place when they mirror
            // the messages, and kept whole when the cut keeps everything.
            let display_keep = if keep == history.len() as u64 {
                display.len() as u64
            } else {
                keep.min(display.len() as u64)
            };
            let turn = opts.turn.unwrap_or_default();
            if let Messages::History(_) = turn.messages {
                return Err(Error::Invalid(
                    "a fork takes the messages it adds, not a full history".into(),
                ));
            }
            if let Some(t) = &turn.title {
                record.title = Some(t.clone());
            }
            let (_, objects) = self.build_session(
                Some(from),
                None,
                turn,
                &[],
                Some((keep, display_keep)),
                None,
            )?;
            let id = objects.last().expect("the session is last").id();
            record.conversation_id = Some(id);
            (id, objects)
        };
        self.start_conversation("fork", &name, head, record, objects, durability)?;
        Ok((name, head))
    }

    /// Creates `refs/heads/<name>` at `head` (neither it nor an archived
    /// conversation of that name may exist), records the conversation and
    /// points `HEAD` at it, in one transaction.
    fn start_conversation(
        &self,
        reason: &str,
        name: &str,
        head: ObjectId,
        record: ConversationRecord,
        objects: Vec<EncodedObject>,
        durability: Durability,
    ) -> Result<()> {
        let conv_ref = RefName::conversation(name)?;
        self.transact(
            Transaction {
                reason: reason.into(),
                edits: vec![
                    RefEdit {
                        name: conv_ref.clone(),
                        expected: PreviousValue::MustNotExist,
                        new: Some(RefTarget::Session(head)),
                    },
                    RefEdit {
                        name: RefName::archived(name)?,
                        expected: PreviousValue::MustNotExist,
                        new: None,
                    },
                    RefEdit {
                        name: RefName::Head,
                        expected: PreviousValue::Any,
                        new: Some(RefTarget::Symbolic(conv_ref)),
                    },
                ],
                conversations: vec![ConversationUpdate {
                    name: name.to_owned(),
                    record: Some(record),
                }],
                objects,
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(())
    }

    fn free_name(&self, base: &str) -> Result<String> {
        if self.index.conversation(base)?.is_none() {
            return Ok(base.to_owned());
        }
        for n in 2.. {
            let candidate = format!("{base}-{n}");
            if self.index.conversation(&candidate)?.is_none() {
                return Ok(candidate);
            }
        }
        unreachable!("some suffix is free")
    }

    /// Moves `refs/heads/<name>` to `refs/archive/<name>`.
    pub fn archive(&self, name: &str, durability: Durability) -> Result<ObjectId> {
        self.move_between(name, true, durability)
    }

    /// Moves `refs/archive/<name>` back to `refs/heads/<name>`.
    pub fn unarchive(&self, name: &str, durability: Durability) -> Result<ObjectId> {
        self.move_between(name, false, durability)
    }

    fn move_between(&self, name: &str, archive: bool, durability: Durability) -> Result<ObjectId> {
        let info = self.require_conversation(name)?;
        let (from, to) = if archive {
            (RefName::conversation(name)?, RefName::archived(name)?)
        } else {
            (RefName::archived(name)?, RefName::conversation(name)?)
        };
        let Some(RefTarget::Session(head)) = self.index.get_ref(&from)? else {
            return Err(Error::Invalid(format!(
                "conversation {name} is {} already",
                if archive { "archived" } else { "active" }
            )));
        };
        let mut record = info.record.clone();
        record.status = if archive {
            ConversationStatus::Archived
        } else {
            ConversationStatus::Active
        };
        record.updated_at = now_ms().max(record.updated_at);
        let mut edits = vec![
            RefEdit {
                name: from,
                expected: PreviousValue::MustMatch(RefTarget::Session(head)),
                new: None,
            },
            RefEdit {
                name: to,
                expected: PreviousValue::MustNotExist,
                new: Some(RefTarget::Session(head)),
            },
        ];
        if archive {
            edits.extend(self.detach_head_edit(name, head)?);
        }
        self.transact(
            Transaction {
                reason: if archive { "archive" } else { "unarchive" }.into(),
                edits,
                conversations: vec![ConversationUpdate {
                    name: name.to_owned(),
                    record: Some(record),
                }],
                require_unclaimed: vec![name.to_owned()],
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(head)
    }

    /// If `HEAD` names the conversation, it is detached at its head.
    fn detach_head_edit(&self, name: &str, head: ObjectId) -> Result<Option<RefEdit>> {
        let conv_ref = RefName::conversation(name)?;
        Ok(match self.index.get_ref(&RefName::Head)? {
            Some(RefTarget::Symbolic(r)) if r == conv_ref => Some(RefEdit {
                name: RefName::Head,
                expected: PreviousValue::MustMatch(RefTarget::Symbolic(r)),
                new: Some(RefTarget::Session(head)),
            }),
            _ => None,
        })
    }

    /// Removes a conversation: its ref and record go, its objects stay for
    /// gc to judge.
    pub fn delete(&self, name: &str, durability: Durability) -> Result<ObjectId> {
        self.require_conversation(name)?;
        let mut edits = Vec::new();
        let mut head = None;
        for r in [RefName::conversation(name)?, RefName::archived(name)?] {
            if let Some(RefTarget::Session(h)) = self.index.get_ref(&r)? {
                head = Some(h);
                edits.push(RefEdit {
                    name: r,
                    expected: PreviousValue::MustMatch(RefTarget::Session(h)),
                    new: None,
                });
            }
        }
        let head = head.ok_or_else(|| Error::NoSuchConversation {
            name: name.to_owned(),
        })?;
        edits.extend(self.detach_head_edit(name, head)?);
        self.transact(
            Transaction {
                reason: "delete".into(),
                edits,
                conversations: vec![ConversationUpdate {
                    name: name.to_owned(),
                    record: None,
                }],
                require_unclaimed: vec![name.to_owned()],
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(head)
    }

    // ---- runs ----

    /// Claims a conversation for one running agent session. A second claim
    /// while one is open is `Busy`, naming the running one.
    pub fn begin_run(&self, name: &str) -> Result<Run> {
        let info = self.require_conversation(name)?;
        if let Some(c) = &info.running {
            return Err(Error::Busy {
                conversation: name.to_owned(),
                run: c.run,
                pid: c.pid,
            });
        }
        let seq = {
            // The run's id is the sequence number of its begin operation.
            let st = self.state.lock().expect("state lock");
            st.seq + 1
        };
        let committed = self.transact(
            Transaction {
                reason: "begin-run".into(),
                runs: vec![RunEvent {
                    conversation: name.to_owned(),
                    run: seq,
                    kind: RunEventKind::Begin {
                        pid: std::process::id(),
                    },
                }],
                require_unclaimed: vec![name.to_owned()],
                ..Transaction::default()
            },
            Durability::Sync,
        );
        match committed {
            Ok(c) if c.op == seq => Ok(Run {
                conversation: name.to_owned(),
                id: seq,
                head: info.head,
            }),
            Ok(c) => {
                // Another operation slipped in between: the claim names a
                // run id that is not its own sequence number. Release it.
                self.fail_run_id(name, seq, "claim raced; released")?;
                Err(Error::Invalid(format!(
                    "run claim on {name} raced with operation {}; try again",
                    c.op
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Writes the run's session on the head it began from and releases the
    /// claim. With `awaiting_tool_results`, the session says deferred tool
    /// calls are pending.
    pub fn commit_run(
        &self,
        run: &Run,
        mut turn: Turn,
        awaiting_tool_results: bool,
        durability: Durability,
    ) -> Result<ObjectId> {
        turn.status = Some(if awaiting_tool_results {
            SessionStatus::AwaitingToolResults
        } else {
            SessionStatus::Committed
        });
        let id = self.commit_with(
            &run.conversation,
            run.head,
            turn,
            &[],
            Some(run),
            None,
            durability,
        )?;
        self.auto_compact_after_commit(&run.conversation, id);
        Ok(id)
    }

    /// Records that the run failed; writes no session.
    pub fn fail_run(&self, run: &Run, error: &str) -> Result<()> {
        self.fail_run_id(&run.conversation, run.id, error)
    }

    fn fail_run_id(&self, name: &str, run: u64, error: &str) -> Result<()> {
        self.transact(
            Transaction {
                reason: "fail-run".into(),
                runs: vec![RunEvent {
                    conversation: name.to_owned(),
                    run,
                    kind: RunEventKind::Fail {
                        error: error.to_owned(),
                    },
                }],
                require_claim: vec![(name.to_owned(), run)],
                ..Transaction::default()
            },
            Durability::Sync,
        )?;
        Ok(())
    }

    /// The open claim on a conversation.
    pub fn running(&self, name: &str) -> Result<Option<RunClaim>> {
        self.index.claim(name)
    }
}

/// Who the ref log says made a change: `$SESSCTL_ACTOR`, else the user's
/// login name, else "sessctl".
fn default_actor() -> String {
    ["SESSCTL_ACTOR", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "sessctl".to_owned())
}
