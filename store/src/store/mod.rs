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
mod run;
mod transaction;

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::graph::{Lineage, Node};
use crate::hash::ObjectId;
use crate::index::{CatchUp, Index};
use crate::lineage_index::{LineageIndex, WriteStats};
use crate::odb::{Odb, OpenOptions, RepackOptions, RepackStats};
use crate::refs::{Hash, Operation, RefName, RefTarget, ReflogEntry};
use crate::time::now_ms;

pub use conversation::{Cut, ForkOptions, Messages, Turn};
pub use hook::{AfterCommit, AfterCommitError};
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
#[derive(Debug)]
pub struct Store {
    root: Option<std::path::PathBuf>,
    odb: Odb,
    index: Index,
    state: Mutex<OpState>,
    actor: String,
    notes: Mutex<Vec<String>>,
    /// Work run after each commit (see `hook.rs`).
    after_commit: RwLock<Option<Arc<dyn AfterCommit>>>,
    after_commit_errors: Mutex<Vec<AfterCommitError>>,
    /// The lineage index, loaded on first use.
    lineage: LineageSlot,
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
            after_commit: RwLock::new(None),
            after_commit_errors: Mutex::new(Vec::new()),
            lineage: LineageSlot::default(),
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

    /// Holds off every transaction while maintenance (gc, repack) runs.
    pub(crate) fn lock_state(&self) -> impl Drop + '_ {
        self.state.lock().expect("state lock")
    }

    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Rebuilds every derived index from the objects and operations, as
    /// if none existed: the index (every operation applied again), the
    /// lineage index (every session object decoded again, none of the old
    /// file's records reused) and the listing of the newest conversations.
    /// Returns how many operations the index applied.
    pub fn reindex(&self) -> Result<usize> {
        let applied = {
            let _st = self.state.lock().expect("state lock");
            self.index.rebuild(&self.odb)?
        };
        // A read-only handle rebuilds its own (temporary) index only: the
        // files are a writer's to replace.
        if let (Some(root), true) = (&self.root, self.writable) {
            {
                let _writers_wait = self.lock_state();
                crate::lineage_index::rebuild(&self.odb, root)?;
            }
            *self.lineage.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
            crate::listing::remove(root);
            self.write_listing()?;
        }
        Ok(applied)
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

    /// Repacks the object database, then rewrites the lineage index.
    pub fn repack(&self, opts: &RepackOptions) -> Result<RepackStats> {
        let _writers_wait = self.lock_state();
        let stats = self.odb().repack(opts)?;
        self.refresh_lineage_from(stats.sessions.clone())?;
        Ok(stats)
    }

    // ---- refs and the ref log ----

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

    /// Every ref's log entries, oldest first, read from the durable
    /// operations (journal and op log), not the index.
    pub fn reflog_entries(&self) -> Result<Vec<ReflogEntry>> {
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

/// The lineage index first, then the derived index; the session object only
/// when both lack it.
impl Lineage for Store {
    fn node(&self, id: &ObjectId) -> Result<Node> {
        if let Some(ix) = Store::lineage_index(self) {
            if let Some(node) = ix.position(id).and_then(|p| Node::at(&ix, p)) {
                return Ok(node);
            }
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
}

/// Who the ref log says made a change: `$SESSCTL_ACTOR`, else the user's
/// login name, else "sessctl".
fn default_actor() -> String {
    ["SESSCTL_ACTOR", "USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "sessctl".to_owned())
}
