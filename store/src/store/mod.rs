//! The store: objects, refs, conversations and runs, as an agent runtime
//! embeds them.
//!
//! Every change is an [`Operation`] appended to the journal in the same
//! frame as its objects. The compare-and-swap of refs, the append and the
//! update of the derived index happen under one lock, in sequence order; the
//! `fdatasync` happens after it is released, so concurrent commits to
//! different conversations share syncs and never wait on each other's CAS.
//!
//! One file per concern: this one opens and recovers a store and holds its
//! state and read accessors; `transaction.rs` applies changes;
//! `conversation.rs` and `builder.rs` turn turns into sessions and
//! conversations; `run.rs` claims conversations for running agents;
//! `hook.rs` runs work after a commit (auto-compaction plugs in there).
//! Verbs built on top (revisions, gc, compaction, fsck, import, transfer)
//! live in their own modules and use only what this module makes public.

mod builder;
mod conversation;
mod hook;
mod kept_lineage;
mod put;
mod ref_moves;
mod run;
mod transaction;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::graph::{Lineage, Node};
use crate::hash::ObjectId;
use crate::index::{CatchUp, Index};
use crate::lineage_index::{LineageIndex, WriteStats};
use crate::odb::{Odb, OpenOptions, RepackOptions, RepackStats};
use crate::refs::{Hash, Operation, RefName, RefTarget, ReflogEntry};

pub use conversation::{Cut, ForkOptions, Messages, Turn};
pub use hook::{AfterCommit, AfterCommitError};
pub use put::{Expect, Put, PutConversation};
pub use run::Run;
pub use transaction::{Committed, Transaction};

#[derive(Debug)]
struct OpState {
    seq: u64,
    hash: Option<Hash>,
}

/// The store's handle on its lineage index: loaded on first use, dropped
/// when the store rewrites the file.
#[derive(Debug, Default)]
struct LineageSlot(Mutex<Option<Option<Arc<LineageIndex>>>>);

/// A sessctl store.
///
/// # Many processes, one store
///
/// Any number of handles, in any number of processes, may open one store
/// and write to it at the same time; none holds a lock for its lifetime,
/// so a handle kept open for days costs the others nothing. Each write
/// ([`Store::transact`] and everything built on it) takes the store's
/// write lock for a few syscalls: it catches up with what others appended,
/// checks its compare-and-swaps against that, appends one journal frame
/// and releases the lock; the `fdatasync` follows outside it. A lost
/// compare-and-swap is [`Error::RefOutOfDate`] whichever process won. A
/// write waits for the lock as long as [`OpenOptions::wait`] says, then
/// fails with [`Error::Locked`], naming the holder's pid.
///
/// Reads take no lock and never wait: before answering, a handle reads the
/// frames appended since it last looked (O(new frames)), and the derived
/// index is a stack of immutable, memory-mapped tables shared by every
/// process, under what this handle applied from the journal tail.
/// `Store` is `Send + Sync`; one handle may serve many threads.
#[derive(Debug)]
pub struct Store {
    root: Option<std::path::PathBuf>,
    odb: Odb,
    index: Arc<Index>,
    state: Mutex<OpState>,
    actor: String,
    notes: Mutex<Vec<String>>,
    /// Work run after each commit (see `hook.rs`).
    after_commit: RwLock<Option<Arc<dyn AfterCommit>>>,
    after_commit_errors: Mutex<Vec<AfterCommitError>>,
    /// The lineage index, loaded on first use.
    lineage: LineageSlot,
    /// The lineage rows the backend keeps, as walks fetched them.
    kept_lineage: kept_lineage::KeptLineage,
    /// Whether this handle may write.
    writable: bool,
    /// Run claims this handle holds: the lock file of each, kept locked
    /// while the run is open (see `run.rs`); none on a store in memory, or
    /// on a remote one, whose backend holds the claim.
    runs: Mutex<std::collections::HashMap<u64, Option<std::fs::File>>>,
    /// Upkeep on a thread of its own (see [`Store::set_background_upkeep`]).
    upkeeper: Upkeeper,
}

/// The upkeep thread of a handle that keeps up in the background.
#[derive(Debug, Default)]
struct Upkeeper {
    on: AtomicBool,
    /// The thread, and the process that started it: a process forked
    /// meanwhile has no such thread (nothing to wait for, nothing to join).
    running: Mutex<Option<(u32, UpkeepThread)>>,
}

/// What an upkeep thread did: packing, then the index tables.
type UpkeepThread = JoinHandle<(Result<Option<RepackStats>>, Result<bool>)>;

impl Upkeeper {
    /// The running thread of this process, if any.
    fn take_own(slot: &mut Option<(u32, UpkeepThread)>) -> Option<UpkeepThread> {
        let (pid, h) = slot.take()?;
        if pid == std::process::id() {
            Some(h)
        } else {
            std::mem::forget(h); // the parent's thread, which this process never had
            None
        }
    }
}

impl Store {
    /// Creates a store at `path` and opens it.
    pub fn init(path: &Path) -> Result<Store> {
        crate::odb::init_layout(path)?;
        Store::open(path, &OpenOptions::default())
    }

    /// Opens a store: maps its packs and index tables, reads the journal,
    /// and applies the operations the tables do not cover. Takes no lock
    /// and writes nothing (see [`Store`] for the concurrency model): a torn
    /// journal tail is cut by the next write, under the write lock. A
    /// writable open also marks failed the runs whose process is gone.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Store> {
        let odb = Odb::open(path, opts)?;
        let index = Index::open(path, opts.read_only)?;
        let mut store = Store::assemble(odb, index, !opts.read_only, Some(path))?;
        store.root = Some(path.to_path_buf());
        if store.writable {
            store.recover_runs()?;
        }
        Ok(store)
    }

    /// Opens the remote store `url`
    /// (`postgres://USER@HOST:PORT/DB?objects=s3://BUCKET/PREFIX`:
    /// operations and refs in PostgreSQL, objects in an S3 bucket;
    /// objects-format.md, "Remote store"), with the S3 settings of the
    /// standard AWS variables. Its index is derived in memory from the
    /// operations, as for a store in memory; writes take the remote write
    /// lock (see [`crate::odb::RemoteBackend`]).
    #[cfg(feature = "remote")]
    pub fn open_remote(url: &str, opts: &OpenOptions) -> Result<Store> {
        Store::open_remote_with(url, opts, &crate::odb::S3Settings::from_env())
    }

    /// [`Store::open_remote`] with explicit S3 settings.
    #[cfg(feature = "remote")]
    pub fn open_remote_with(
        url: &str,
        opts: &OpenOptions,
        s3: &crate::odb::S3Settings,
    ) -> Result<Store> {
        let backend: Arc<dyn crate::odb::ObjectBackend> =
            Arc::new(crate::odb::RemoteBackend::open_with(url, opts, s3)?);
        let odb = Odb::with_backend(Arc::clone(&backend));
        let index = match backend.kept_index() {
            Some(kept) => {
                let index = Index::kept_by(Arc::clone(&backend))?;
                if !kept.index_head()?.1 {
                    if opts.read_only {
                        // Keys not built yet (a store upgraded from schema
                        // version 1): read as before, from the operations.
                        Index::temporary()?
                    } else {
                        index.rebuild(&odb)?;
                        index
                    }
                } else {
                    index
                }
            }
            // A version-1 store opened read-only: replayed in memory.
            None => Index::temporary()?,
        };
        let store = Store::assemble(odb, index, !opts.read_only, None)?;
        if store.writable {
            store.recover_runs()?;
        }
        Ok(store)
    }

    /// A store in memory only.
    pub fn in_memory() -> Result<Store> {
        Store::assemble(Odb::in_memory(), Index::temporary()?, true, None)
    }

    fn assemble(odb: Odb, index: Index, writable: bool, root: Option<&Path>) -> Result<Store> {
        let notes = index.take_problem().into_iter().collect();
        let store = Store {
            root: root.map(Path::to_path_buf),
            odb,
            index: Arc::new(index),
            state: Mutex::new(OpState { seq: 0, hash: None }),
            actor: default_actor(),
            notes: Mutex::new(notes),
            after_commit: RwLock::new(None),
            after_commit_errors: Mutex::new(Vec::new()),
            lineage: LineageSlot::default(),
            kept_lineage: kept_lineage::KeptLineage::default(),
            writable,
            runs: Mutex::new(Default::default()),
            upkeeper: Upkeeper::default(),
        };
        store.catch_up()?;
        Ok(store)
    }

    /// Catches up with what other handles wrote since this one last looked:
    /// the journal's new frames, then the index applies their operations.
    /// Every read of refs and summaries starts here; it costs a `stat` or
    /// two when nothing is new.
    pub fn catch_up(&self) -> Result<()> {
        self.catch_up_reading(&[])
    }

    /// [`Store::catch_up`] by a reader about to read `keys` of the index: a
    /// backend that keeps the keys (a remote store) reads them with its
    /// head, in one round trip.
    pub(crate) fn catch_up_reading(&self, keys: &[Vec<u8>]) -> Result<()> {
        self.odb.backend().refresh()?;
        self.absorb_notes();
        match self.index.catch_up_reading(&self.odb, keys) {
            Ok(CatchUp::Rebuilt(n)) => self.note(format!(
                "the index tables did not continue the operations; applied all {n} of them in memory (sessctl reindex replaces the tables)"
            )),
            Ok(CatchUp::Applied(_)) => {}
            // A damaged table: derived data, so it is set aside for this
            // handle and everything is applied from the operations.
            Err(e @ Error::CorruptFile { .. }) if self.index.is_table_error(&e) => {
                let n = self.index.rebuild_in_memory(&self.odb)?;
                self.note(format!(
                    "{e}; ignoring the index tables and applying all {n} operations in memory (sessctl reindex replaces them)"
                ));
            }
            Err(e) => return Err(e),
        }
        self.index.follow_tables(&self.odb)?;
        let applied = self.index.applied()?;
        let mut st = self.state.lock().expect("state lock");
        if applied.map_or(0, |a| a.0) >= st.seq {
            (st.seq, st.hash) = match applied {
                Some((s, h)) => (s, Some(h)),
                None => (0, None),
            };
        }
        Ok(())
    }

    /// Moves what the object database noted (repairs, damage) to the
    /// store's notes.
    fn absorb_notes(&self) {
        let notes = self.odb.take_recovery_notes();
        if !notes.is_empty() {
            self.notes.lock().expect("notes lock").extend(notes);
        }
    }

    /// Packs journal segments sealed by rotation (see
    /// `ObjectBackend::maintain`). The commit is durable already, so a
    /// failure here is not the commit's: it is noted, and the next write
    /// or repack tries again.
    fn upkeep(&self) {
        if self.upkeeper.on.load(Ordering::Relaxed) {
            return self.upkeep_in_background();
        }
        let packed = self.packed(self.odb.backend().maintain());
        // Derived: should it fail, the next write tries again, and until
        // then readers apply a few more operations.
        if let Err(e) = self.index.write_tables(&self.odb, packed) {
            self.note(format!("writing an index table failed: {e}"));
        }
    }

    /// Whether packing packed; a failure is noted (the next write or
    /// repack tries again).
    fn packed(&self, outcome: Result<Option<RepackStats>>) -> bool {
        match outcome {
            Ok(p) => p.is_some(),
            Err(e) => {
                self.note(format!("packing after a write failed: {e}"));
                false
            }
        }
    }

    /// Does the upkeep of writes (packing sealed journal segments, then
    /// folding the index's overlay into a table) on a thread of its own
    /// instead of in the write that made it due (`on`), or in the writes
    /// again (`false`, after waiting for an upkeep thread to end). Packing
    /// a segment and merging packs with it takes up to a few hundred
    /// milliseconds every 2 MiB of journal, a table write a few syncs every
    /// 256 operations: in the background, no single write waits for them.
    /// It is the work a second writer thread's upkeep would do, under the
    /// same locks, so nothing else changes; a write that finds the thread
    /// still busy leaves its due work to the next one. A handle dropped
    /// waits for its upkeep thread.
    pub fn set_background_upkeep(&self, on: bool) {
        self.upkeeper.on.store(on, Ordering::Relaxed);
        if !on {
            self.finish_upkeep();
        }
    }

    /// Waits for an upkeep thread started by a write (see
    /// [`Store::set_background_upkeep`]) to end.
    pub fn finish_upkeep(&self) {
        let running = Upkeeper::take_own(
            &mut self
                .upkeeper
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if let Some(h) = running {
            self.joined(h);
        }
    }

    /// Notes what an upkeep thread failed at.
    fn joined(&self, h: UpkeepThread) {
        match h.join() {
            Ok((packed, tables)) => {
                self.packed(packed);
                if let Err(e) = tables {
                    self.note(format!("writing an index table failed: {e}"));
                }
            }
            Err(_) => self.note("the upkeep thread panicked".into()),
        }
    }

    /// Starts an upkeep thread when work is due and none runs.
    fn upkeep_in_background(&self) {
        let mut running = self
            .upkeeper
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let forked = running
            .as_ref()
            .is_some_and(|(pid, _)| *pid != std::process::id());
        if forked || running.as_ref().is_some_and(|(_, h)| h.is_finished()) {
            if let Some(h) = Upkeeper::take_own(&mut running) {
                self.joined(h);
            }
        }
        if running.is_some() || !(self.odb.backend().maintenance_due() || self.index.tables_due()) {
            return;
        }
        let (odb, index) = (self.odb.clone(), Arc::clone(&self.index));
        let work = move || {
            let packed = odb.backend().maintain();
            let tables = index.write_tables(&odb, matches!(packed, Ok(Some(_))));
            (packed, tables)
        };
        match std::thread::Builder::new()
            .name("sessctl-upkeep".into())
            .spawn(work)
        {
            Ok(h) => *running = Some((std::process::id(), h)),
            Err(e) => {
                // No thread to be had: done here, as without one.
                drop(running);
                self.note(format!("no upkeep thread ({e}): upkeep in the write"));
                let packed = self.packed(self.odb.backend().maintain());
                if let Err(e) = self.index.write_tables(&self.odb, packed) {
                    self.note(format!("writing an index table failed: {e}"));
                }
            }
        }
    }

    pub(crate) fn note(&self, n: String) {
        self.notes.lock().expect("notes lock").push(n);
    }

    /// What opening the store (or catching up since) repaired or found,
    /// one line each.
    pub fn take_recovery_notes(&self) -> Vec<String> {
        self.absorb_notes();
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

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Rebuilds every derived index from the objects and operations, as
    /// if none existed: the index (every operation applied again, its
    /// tables replaced by one) and the lineage index (every session object
    /// decoded again, none of the old file's records reused). Returns how
    /// many operations the index applied.
    pub fn reindex(&self) -> Result<usize> {
        self.reindex_with(&crate::progress::Silent)
    }

    /// [`Store::reindex`], telling `progress` of its phases.
    pub fn reindex_with(&self, progress: &dyn crate::progress::Progress) -> Result<usize> {
        self.catch_up()?;
        progress.phase("applying operations", None);
        if !self.writable {
            // A read-only handle rebuilds what it holds in memory only.
            return self.index.rebuild_in_memory(&self.odb);
        }
        let applied = self.index.rebuild(&self.odb)?;
        progress.advance(applied as u64);
        // Lineage rows a backend keeps (PostgreSQL), from the objects.
        if self.odb.backend().lineage_rebuild()?.is_some() {
            self.kept_lineage.forget_rowless();
        }
        if let Some(root) = &self.root {
            progress.phase("rebuilding the lineage index", None);
            crate::lineage_index::rebuild(&self.odb, root)?;
            *self.lineage.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        Ok(applied)
    }

    // ---- histories ----

    /// The ids of a session's full message history: [`Odb::history`],
    /// with the first-parent chain taken from the lineage index when it
    /// holds the session, so that the chain's sessions are read in
    /// batches (each still verified; the sessions, not the index, decide).
    pub fn history(&self, id: &ObjectId) -> Result<Vec<ObjectId>> {
        let chain = self.first_parent_chain(id);
        self.odb.history_along(id, &chain)
    }

    /// The sessions a history is made of ([`Odb::walk_first_parents`] by
    /// their messages): from `id` back along first parents to the first
    /// that keeps nothing of its parent, newest first, read as
    /// [`Store::history`] reads them.
    pub(crate) fn history_sessions(
        &self,
        id: &ObjectId,
    ) -> Result<Vec<(ObjectId, crate::object::Session)>> {
        let chain = self.first_parent_chain(id);
        let mut sessions = Vec::new();
        self.odb
            .walk_first_parents(id, &chain, |s| &s.messages, |at, s| sessions.push((at, s)))?;
        Ok(sessions)
    }

    /// The messages of a session's full history, in order, as JSON values
    /// ([`Odb::load_messages`], its chain read as [`Store::history`] reads it).
    pub fn load_messages(&self, id: &ObjectId) -> Result<Vec<serde_json::Value>> {
        self.odb.blobs(&self.history(id)?)
    }

    /// The messages of a session's full history as their canonical bytes,
    /// each verified ([`Odb::load_message_bytes`], its chain read as
    /// [`Store::history`] reads it).
    pub fn load_message_bytes(&self, id: &ObjectId) -> Result<crate::odb::MessageBytes> {
        self.odb.blob_bytes(&self.history(id)?)
    }

    /// What the lineage index says the first-parent chain from `id` is
    /// (`id` first); empty when it does not hold `id`. Derived data: a
    /// damaged record ends the chain early, which costs only speed.
    fn first_parent_chain(&self, id: &ObjectId) -> Vec<ObjectId> {
        let Some(ix) = self.lineage_index() else {
            return Vec::new();
        };
        let Ok(Some(mut pos)) = ix.lookup(id) else {
            return Vec::new();
        };
        let mut chain = Vec::new();
        while chain.len() < ix.len() {
            let Some(at) = ix.id(pos) else { break };
            chain.push(at);
            match ix.first_parent(pos) {
                Ok(Some(p)) => pos = p,
                _ => break,
            }
        }
        chain
    }

    // ---- the lineage index ----

    /// The lineage index, loaded on first use; `None` for a store in memory,
    /// when there is no file, or when it is damaged (then with a recovery
    /// note: it is ignored until the next repack or gc rewrites it).
    pub fn lineage_index(&self) -> Option<Arc<LineageIndex>> {
        let mut slot = match self.lineage.0.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(loaded) = &*slot {
            return loaded.clone();
        }
        let loaded = match self.root() {
            None => None,
            Some(root) => match LineageIndex::open(root) {
                Ok(ix) => ix.map(Arc::new),
                Err(e) => {
                    self.note(format!(
                        "ignoring the lineage index ({e}); the next repack or gc rewrites it"
                    ));
                    None
                }
            },
        };
        *slot = Some(loaded.clone());
        loaded
    }

    /// Sets the lineage index aside for this handle, with a recovery note,
    /// when `error` is that file failing a check that a walk made (readers
    /// check each record as they first read it; see
    /// [`LineageIndex::parents`]). The next repack or gc rewrites it.
    pub fn lineage_index_failed(&self, error: &Error) {
        let mut slot = match self.lineage.0.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let holds_it = matches!(&*slot, Some(Some(ix)) if ix.is_own_error(error));
        if holds_it {
            *slot = Some(None);
            drop(slot);
            self.note(format!(
                "ignoring the lineage index ({error}); the next repack or gc rewrites it"
            ));
        }
    }

    /// Rewrites the lineage index from the objects (see
    /// [`crate::lineage_index::write_for`]) and reloads it. Nothing for a store in
    /// memory.
    pub fn refresh_lineage(&self) -> Result<Option<WriteStats>> {
        self.refresh_lineage_from(None)
    }

    /// As [`Store::refresh_lineage`], taking the sessions a full repack
    /// reported when there are any (see [`crate::lineage_index::write_from`]).
    pub fn refresh_lineage_from(
        &self,
        sessions: Option<Vec<ObjectId>>,
    ) -> Result<Option<WriteStats>> {
        let Some(root) = self.root() else {
            return Ok(None);
        };
        let stats = crate::lineage_index::write_from(self.odb(), root, sessions)?;
        let mut slot = match self.lineage.0.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        *slot = None;
        Ok(Some(stats))
    }

    /// Rewrites the lineage index to hold the sessions `kept` (gc's), from
    /// the previous file where it can ([`crate::lineage_index::write_kept`]).
    pub(crate) fn refresh_lineage_kept(
        &self,
        kept: &crate::hash::IdSet,
    ) -> Result<Option<WriteStats>> {
        let Some(root) = self.root() else {
            return Ok(None);
        };
        let stats = crate::lineage_index::write_kept(self.odb(), root, kept)?;
        let mut slot = match self.lineage.0.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        *slot = None;
        Ok(Some(stats))
    }

    /// Repacks the object database, then rewrites the lineage index and
    /// folds the index's overlay into a table. Writers in this and other
    /// processes go on meanwhile: only the final replacement of files takes
    /// the write lock.
    pub fn repack(&self, opts: &RepackOptions) -> Result<RepackStats> {
        self.repack_with(opts, &crate::progress::Silent)
    }

    /// [`Store::repack`], telling `progress` of its phases and the objects
    /// packed.
    pub fn repack_with(
        &self,
        opts: &RepackOptions,
        progress: &dyn crate::progress::Progress,
    ) -> Result<RepackStats> {
        progress.phase("repacking objects", None);
        let stats = self.odb().repack(opts)?;
        progress.advance(stats.objects as u64);
        progress.phase("writing indexes", None);
        self.refresh_lineage_from(stats.sessions.clone())?;
        self.catch_up()?;
        self.index.write_tables(&self.odb, true)?;
        Ok(stats)
    }

    // ---- refs and the ref log ----

    pub fn get_ref(&self, name: &RefName) -> Result<Option<RefTarget>> {
        self.catch_up()?;
        self.index.get_ref(name)
    }

    /// The session a ref leads to, following `HEAD`'s symbolic link.
    pub fn resolve_ref(&self, name: &RefName) -> Result<Option<ObjectId>> {
        self.catch_up()?;
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
        self.catch_up()?;
        self.index.refs()
    }

    /// The refs that point at one of `ids` (see [`Index::refs_to`]).
    pub fn refs_to(&self, ids: &[ObjectId]) -> Result<Vec<(RefName, ObjectId)>> {
        self.catch_up()?;
        self.index.refs_to(ids)
    }

    /// Whether [`Store::refs_to`] reads every ref whatever `ids` are (an
    /// index table written before the reverse keys is in the stack, until
    /// the tables are merged or rebuilt): a caller asking many times over
    /// had better read [`Store::refs`] once.
    pub fn refs_to_reads_every_ref(&self) -> bool {
        self.index.refs_to_reads_every_ref()
    }

    /// Every ref's log entries, oldest first, read from the durable
    /// operations (journal and op log), not the index; expired ones
    /// included (the chains are whole): [`Store::live_reflog_entries`] is
    /// the ref log as users see it.
    pub fn reflog_entries(&self) -> Result<Vec<ReflogEntry>> {
        self.odb.backend().refresh()?;
        let mut out = Vec::new();
        for (seq, bytes) in self.odb.backend().ops_after(0)? {
            let op = Operation::decode(&bytes).map_err(|e| Error::CorruptOperation {
                seq,
                reason: e.to_string(),
            })?;
            out.extend(op.reflog_entries());
        }
        Ok(out)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // An upkeep thread runs to its end (its work is safe to cut at any
        // point, but a closed handle leaves none behind).
        self.finish_upkeep();
    }
}

/// The lineage index first, then the lineage rows the backend keeps (a
/// closure fetched at a time), then the derived index; the session object
/// only when all lack it.
impl Lineage for Store {
    fn node(&self, id: &ObjectId) -> Result<Node> {
        if let Some(ix) = Store::lineage_index(self) {
            match ix
                .lookup(id)
                .and_then(|p| p.map_or(Ok(None), |p| Node::at(&ix, p)))
            {
                Ok(Some(node)) => return Ok(node),
                Ok(None) => {}
                Err(e) => self.lineage_index_failed(&e),
            }
        }
        if let Some(node) = self.kept_lineage.node(self.odb.backend().as_ref(), id)? {
            return Ok(node);
        }
        if let Some(info) = self.session_info(id)? {
            return Ok(Node {
                id: *id,
                parents: info.parents,
                created_at: info.created_at,
            });
        }
        self.odb().node(id)
    }

    fn generation(&self, id: &ObjectId) -> Result<Option<u32>> {
        Ok(Store::lineage_index(self).and_then(|ix| Some(ix.generation(ix.position(id)?))))
    }

    fn lineage_index(&self) -> Option<Arc<LineageIndex>> {
        Store::lineage_index(self)
    }

    fn lineage_index_failed(&self, error: &Error) {
        Store::lineage_index_failed(self, error)
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
