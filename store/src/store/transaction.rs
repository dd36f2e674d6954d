//! Transactions: the one way a store changes. Every ref edit is checked
//! against its expected value (a compare-and-swap), then the objects and
//! the operation are appended in one journal frame, the index follows, and
//! the journal is synced as the caller's durability asks.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::object::{EncodedObject, ObjectKind, Session};
use crate::odb::Durability;
use crate::refs::{
    ConversationRecord, ConversationUpdate, Operation, RefEdit, RefName, RefTarget, RefUpdate,
    ReflogExpiry, RunEvent,
};
use crate::time::now_ms;

use super::Store;

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
    /// (conversation, record) pairs: each conversation's record must still
    /// be this one (`None`: no record), checked under the write lock. A
    /// writer that read a record and writes it back changed sets it, so
    /// that it never writes back what another process replaced meanwhile
    /// (`RecordOutOfDate`).
    pub expect_records: Vec<(String, Option<ConversationRecord>)>,
}

/// Run under the write lock once a transaction's operation is appended,
/// with its sequence number (a run claim puts its lock file in place
/// there, so that no process sees the claim without it).
#[derive(Clone)]
pub(crate) struct UnderLock(pub(crate) Arc<dyn Fn(u64) + Send + Sync>);

impl std::ops::Deref for UnderLock {
    type Target = dyn Fn(u64) + Send + Sync;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl std::fmt::Debug for UnderLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnderLock")
    }
}

/// What a committed transaction became.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    /// The operation's sequence number.
    pub op: u64,
}

impl Store {
    /// Applies a transaction atomically: every edit's expected value is
    /// checked, then objects and the operation are appended in one frame,
    /// then (with [`Durability::Sync`]) synced.
    pub fn transact(&self, tx: Transaction, durability: Durability) -> Result<Committed> {
        self.transact_hooked(tx, None, durability)
    }

    /// [`Store::transact`] with work to do under the write lock.
    pub(super) fn transact_hooked(
        &self,
        tx: Transaction,
        under_lock: Option<UnderLock>,
        durability: Durability,
    ) -> Result<Committed> {
        let mut decoded = Vec::new();
        for o in &tx.objects {
            if o.kind() == ObjectKind::Session {
                // Decoding proves the bytes are a session; the index takes it
                // as decoded here.
                let s = Session::decode(o.payload()).map_err(|e| Error::decode(o.id(), e))?;
                decoded.push((o.id(), s));
            }
        }
        self.transact_locked(tx, &decoded, under_lock, Vec::new(), durability)
    }

    /// [`Store::transact`] for a caller that built the transaction's
    /// sessions itself: `decoded` holds each session object of `tx.objects`
    /// with its id, as [`Session::encode`] encoded it.
    pub(super) fn transact_decoded(
        &self,
        tx: Transaction,
        decoded: &[(ObjectId, Session)],
        durability: Durability,
    ) -> Result<Committed> {
        self.transact_locked(tx, decoded, None, Vec::new(), durability)
    }

    /// [`Store::transact`] recording ref-log expiries in its operation
    /// (`reflog expire`).
    pub(crate) fn transact_expiring(
        &self,
        tx: Transaction,
        expire: Vec<ReflogExpiry>,
        durability: Durability,
    ) -> Result<Committed> {
        self.transact_locked(tx, &[], None, expire, durability)
    }

    fn transact_locked(
        &self,
        mut tx: Transaction,
        decoded: &[(ObjectId, Session)],
        under_lock: Option<UnderLock>,
        expire: Vec<ReflogExpiry>,
        durability: Durability,
    ) -> Result<Committed> {
        debug_assert_eq!(
            decoded.len(),
            tx.objects
                .iter()
                .filter(|o| o.kind() == ObjectKind::Session)
                .count()
        );
        if !self.writable {
            return Err(Error::ReadOnly);
        }
        // Before any lock: a remote backend uploads the objects now (a
        // content-addressed pack, harmless should the write then fail).
        self.odb.backend().stage(&tx.objects)?;
        let mut st = self.state.lock().expect("state lock");
        // What the checks below and the index's effects will read: a
        // remote store reads it in the round trip that takes the lock.
        let ahead = self.index.ahead_keys(
            tx.edits.iter().map(|e| &e.name),
            tx.conversations
                .iter()
                .map(|c| c.name.as_str())
                .chain(tx.require_unclaimed.iter().map(String::as_str))
                .chain(tx.require_claim.iter().map(|(c, _)| c.as_str()))
                .chain(tx.expect_records.iter().map(|(c, _)| c.as_str()))
                .chain(tx.runs.iter().map(|r| r.conversation.as_str())),
            decoded,
        );
        let ahead_ids: Vec<ObjectId> = if ahead.is_some() {
            tx.objects
                .iter()
                .map(|o| o.id())
                .chain(
                    decoded
                        .iter()
                        .flat_map(|(_, s)| s.blobs().chain(s.sessions())),
                )
                .collect()
        } else {
            Vec::new()
        };
        self.index.read_with_lock(&ahead, &ahead_ids);
        // The store's write lock, for the few syscalls from here to the
        // append: what other processes appended is read, only as far as
        // refs and run claims go (the rest is applied after the lock), so
        // the checks below see the current state. gc replaces files under
        // this lock too, and rescues what a write made use of before it.
        let lock = self.odb.backend().write_lock()?;
        self.index.catch_up_refs(&self.odb)?;
        // Whatever the lock's round trip did not read, in one more.
        self.index.read_ahead(&ahead, &ahead_ids)?;
        // The chain's head as the lock found it (a remote store's may be
        // behind what this handle saw, after a crash of its server lost
        // commits not yet flushed).
        (st.seq, st.hash) = match self.index.head() {
            Some((seq, hash)) => (seq, Some(hash)),
            None if self.index.is_kept() => (0, None),
            None => (st.seq, st.hash),
        };
        for (session, s) in decoded {
            for named in s.blobs().chain(s.sessions()) {
                if !tx.objects.iter().any(|o| o.id() == named) && !self.odb.contains(&named)? {
                    return Err(Error::MissingObject {
                        session: *session,
                        named,
                    });
                }
            }
        }
        // A record's large-field blobs likewise: the writer found them in
        // the store, and gc may have pruned them since.
        for c in &tx.conversations {
            let Some(r) = &c.record else { continue };
            for named in crate::refs::large_fields::metadata_blobs(&r.metadata) {
                if !tx.objects.iter().any(|o| o.id() == named) && !self.odb.contains(&named)? {
                    return Err(Error::MissingRecordBlob {
                        conversation: c.name.clone(),
                        named,
                    });
                }
            }
        }
        for conv in &tx.require_unclaimed {
            if let Some(c) = self.index.claim(conv)? {
                if self.claim_alive(&c)? {
                    return Err(Error::Busy {
                        conversation: conv.clone(),
                        run: c.run,
                        pid: c.pid,
                    });
                }
                // Its process is gone: the claim fails in this operation.
                tx.runs.insert(
                    0,
                    RunEvent {
                        conversation: conv.clone(),
                        run: c.run,
                        kind: crate::refs::RunEventKind::Fail {
                            error: format!("process {} ended without committing", c.pid),
                        },
                    },
                );
            }
        }
        for (conv, run) in &tx.require_claim {
            match self.index.claim(conv)? {
                Some(c) if c.run == *run => {}
                _ => {
                    return Err(Error::RunNotOpen {
                        conversation: conv.clone(),
                        run: *run,
                    })
                }
            }
        }
        for (name, expected) in &tx.expect_records {
            if self.index.current_record(name)? != *expected {
                return Err(Error::RecordOutOfDate { name: name.clone() });
            }
        }
        let mut updates = Vec::with_capacity(tx.edits.len());
        for e in &tx.edits {
            let current = self.index.get_ref(&e.name)?;
            if !e.expected.matches(current.as_ref()) {
                return Err(Error::ref_out_of_date(
                    &e.name,
                    &e.expected,
                    current.as_ref(),
                ));
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
                    return Err(Error::SymbolicRef {
                        name: e.name.clone(),
                        target: r.clone(),
                    });
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
        self.keep_head_on_a_ref(&mut updates)?;
        let new_objects = tx
            .objects
            .iter()
            .map(|o| self.odb.contains(&o.id()).map(|has| !has))
            .collect::<Result<Vec<bool>>>()?
            .into_iter()
            .any(|new| new);
        if updates.is_empty()
            && tx.conversations.is_empty()
            && tx.runs.is_empty()
            && expire.is_empty()
            && !new_objects
        {
            // Nothing would change: no operation, nothing to sync.
            return Ok(Committed { op: st.seq });
        }
        for r in &mut tx.runs {
            // A new claim's id is its operation's sequence number.
            if r.run == 0 && matches!(r.kind, crate::refs::RunEventKind::Begin { .. }) {
                r.run = st.seq + 1;
            }
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
            expire,
        };
        if !op.expire.is_empty() {
            // Format 2 before the first operation that needs it: an older
            // sessctl refuses the store as newer rather than reading this
            // operation as damage (objects-format.md, "Versioning").
            if let Some(root) = &self.root {
                crate::odb::raise_format(root, crate::odb::STORE_FORMAT_EXPIRE)?;
            }
        }
        // A claim this operation makes is held before anyone can see it
        // (where the backend holds claims: a remote store's advisory lock).
        let claims = op
            .runs
            .iter()
            .any(|r| r.run == op.seq && matches!(r.kind, crate::refs::RunEventKind::Begin { .. }));
        if claims {
            self.odb.backend().hold_claim(op.seq)?;
        }
        if let Some(kept) = self.odb.backend().kept_index() {
            // The backend keeps the index's keys: they go in the
            // operation's own transaction, computed now, under the lock,
            // over a state that cannot move meanwhile; staged last, so
            // that nothing can fail between staging and the append.
            let effects = self.index.effects(&op, &self.odb, decoded, &tx.objects);
            match effects {
                Ok(keys) => kept.index_stage(keys),
                Err(e) => {
                    if claims {
                        self.odb.backend().release_claim(op.seq);
                    }
                    return Err(e);
                }
            }
        }
        let bytes = op.encode();
        let appended = self
            .odb
            .backend()
            .append_locked(&lock, &tx.objects, &[(op.seq, bytes)]);
        let (_, ticket) = match appended {
            Ok(a) => a,
            Err(e) => {
                if claims {
                    self.odb.backend().release_claim(op.seq);
                }
                return Err(e);
            }
        };
        if let Some(hook) = under_lock.as_ref() {
            // Still under the lock: no other process can see the operation
            // without what the hook does (a run's lock file in place).
            hook(op.seq);
        }
        drop(lock);
        let seq = op.seq;
        st.seq = seq;
        st.hash = Some(op.hash());
        // The next writer's compare-and-swaps see the operation at once;
        // the rest of the index follows outside every lock but the index's
        // own, in sequence order (whichever thread gets there first applies
        // what this handle's other writers appended meanwhile too). Should
        // it fail, the next catch-up applies it from the journal.
        self.index.appended(op, decoded.to_vec());
        drop(st);
        self.index.apply_appended(&self.odb, seq)?;
        if durability == Durability::Sync {
            self.odb.backend().sync(ticket)?;
        }
        self.upkeep();
        Ok(Committed { op: seq })
    }

    /// The store's rule for `HEAD`, kept under the write lock: it never
    /// follows a ref that does not exist. A transaction that points it at
    /// a missing ref fails (`RefOutOfDate`: the conversation was deleted or
    /// archived meanwhile); one that removes the ref it follows detaches it
    /// at that ref's last session, in the same operation. Decided here, not
    /// by the caller, so that `rm` racing `checkout` in another process can
    /// leave neither a dangling `HEAD` nor a spurious conflict.
    fn keep_head_on_a_ref(&self, updates: &mut Vec<RefUpdate>) -> Result<()> {
        let after = |name: &RefName, updates: &[RefUpdate]| -> Result<Option<RefTarget>> {
            match updates.iter().rev().find(|u| u.name == *name) {
                Some(u) => Ok(u.new.clone()),
                None => self.index.get_ref(name),
            }
        };
        let Some(RefTarget::Symbolic(followed)) = after(&RefName::Head, updates)? else {
            return Ok(());
        };
        if after(&followed, updates)?.is_some() {
            return Ok(());
        }
        let head_moved_here = updates.iter().any(|u| u.name == RefName::Head);
        let removed_here = updates
            .iter()
            .find(|u| u.name == followed && u.new.is_none())
            .map(|u| u.old.clone());
        match (head_moved_here, removed_here) {
            // Neither moved here: a HEAD left dangling before is fsck's.
            (false, None) => Ok(()),
            (false, Some(Some(RefTarget::Session(last)))) => {
                let current = self.index.get_ref(&RefName::Head)?;
                updates.push(RefUpdate {
                    name: RefName::Head,
                    old: current,
                    new: Some(RefTarget::Session(last)),
                    prev: self.index.reflog_head(&RefName::Head)?,
                });
                Ok(())
            }
            // HEAD pointed here at a ref that is gone: refused, naming it.
            _ => Err(Error::ref_out_of_date(
                &followed,
                &crate::refs::PreviousValue::MustExist,
                None,
            )),
        }
    }
}
