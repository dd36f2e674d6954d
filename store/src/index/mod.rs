//! The derived index: what listing and lookup need without reading object
//! bodies (current refs, per-session and per-conversation summaries, reflog
//! entries, open run claims), readable by every process at once
//! (objects-format.md, "Index").
//!
//! It is never the only copy of anything: every entry is a function of the
//! operations (journal and op log) and the objects they name. It is a stack
//! of immutable, memory-mapped tables, each holding what a run of
//! operations changed (`stack.rs`, the file format in `table.rs`), under an
//! overlay in memory that this handle builds from the operations appended
//! since the newest table: catching up reads only those, never the whole
//! history. Every so many operations a writer folds its overlay into a new
//! table; tables merge geometrically, so there are about log(n) of them.
//!
//! Keys: `r:<ref>` a ref's target, `h:<ref>` the hash of its newest reflog
//! entry (the ref log itself is the operations); `s:<id>` session summaries;
//! `c:<name>` conversation summaries, `i:<conversation id>` the name it goes
//! by, `a:<time><name>` activity order; `u:<name>` open run claims.

mod apply;
mod conversations;
mod encoding;
mod refs;
mod runs;
mod stack;
mod summary;
pub mod table;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use crate::error::{Error, IndexError, Result};
use crate::odb::lock::LockFile;
use crate::odb::{prefix_end, Odb};
use crate::refs::{ConversationRecord, Hash, Operation};

/// How long a rebuild waits for another process's table write.
const REBUILD_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// `index/REBUILD`: a rebuild is due (see [`Index::mark_rebuild`]).
const REBUILD_MARKER: &str = "REBUILD";

pub use crate::message::{content_text, user_text};
pub use stack::{TABLE_EVERY, TABLE_KEYS};
pub use summary::{ConversationInfo, RunClaim, SessionInfo};

use stack::Stack;

fn key(prefix: &str, rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + rest.len());
    k.extend_from_slice(prefix.as_bytes());
    k.extend_from_slice(rest);
    k
}

/// What one handle sees: tables (the operations up to `stack.covered`)
/// and, over them, the overlay of the operations applied since.
#[derive(Debug, Default)]
struct View {
    stack: Stack,
    /// Keys the operations after the tables changed: a value, or `None`
    /// for a key they removed.
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The last operation applied (by the tables or the overlay).
    applied: Option<(u64, Hash)>,
    /// What operations after `applied` do to refs and run claims, applied
    /// ahead of the rest under the write lock (see [`Index::catch_up_refs`]),
    /// up to `ahead_of`; cleared once they are applied in full.
    ahead: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    ahead_of: Option<(u64, Hash)>,
}

impl View {
    /// Whether the overlay holds enough to fold into a table.
    fn overlay_due(&self) -> bool {
        self.overlay_ops() >= TABLE_EVERY || self.overlay.len() >= TABLE_KEYS
    }

    fn overlay_ops(&self) -> u64 {
        let applied = self.applied.map_or(0, |a| a.0);
        applied.saturating_sub(self.stack.covered().map_or(0, |c| c.0))
    }

    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.ahead.get(k) {
            return Ok(v.clone());
        }
        if let Some(v) = self.overlay.get(k) {
            return Ok(v.clone());
        }
        self.stack.get(k).map(|v| v.map(<[u8]>::to_vec))
    }
}

/// The derived index of one store, as one handle sees it.
#[derive(Debug)]
pub struct Index {
    /// `index/` of a store on disk; `None` for a store in memory.
    dir: Option<PathBuf>,
    /// `index/LOCK`: one table writer at a time. `None` when this handle
    /// never writes tables (in memory, read-only).
    lock: Option<LockFile>,
    view: RwLock<View>,
    /// A table that did not open, reported once.
    problem: std::sync::Mutex<Option<String>>,
    /// Held while operations are applied, so that each is applied once and
    /// in order however many threads catch up at once.
    apply_lock: std::sync::Mutex<()>,
    /// Whether the tables were checked against the stored operations.
    checked: std::sync::atomic::AtomicBool,
    /// The operation applied when this handle last looked for newer tables
    /// (see [`Index::follow_tables`]).
    looked_for_tables: std::sync::atomic::AtomicU64,
    /// Operations this handle appended and has not applied yet, with the
    /// sessions their writers decoded (see [`Index::appended`]): applied
    /// from here, in sequence order, instead of being read back from the
    /// journal.
    appended: std::sync::Mutex<BTreeMap<u64, Appended>>,
    /// A backend that keeps the keys itself (the remote one, see
    /// [`crate::odb::KeptIndex`]): every read goes there, nothing is
    /// applied here, and a writer computes its operation's keys for the
    /// backend to write with it ([`Index::effects`]).
    kept: Option<std::sync::Arc<dyn crate::odb::ObjectBackend>>,
    /// Keys a backend that keeps them read ahead for a walk (see
    /// [`Index::read_ahead_sessions`]), as of the head they were read at.
    ahead_reads: std::sync::Mutex<AheadReads>,
    /// Where the previews of sessions this handle wrote or read under the
    /// write lock come from (see [`Index::ahead_keys`]).
    origins: std::sync::Mutex<Origins>,
}

/// Keys read ahead, valid while this handle's view stays at `head`.
#[derive(Debug, Default)]
struct AheadReads {
    head: Option<(u64, Hash)>,
    keys: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>>,
}

/// Reads those of `keys` not read ahead yet, in one round trip, into
/// `ahead` (absent ones as absent).
fn fetch_ahead(
    kept: &dyn crate::odb::KeptIndex,
    keys: Vec<Vec<u8>>,
    ahead: &mut AheadReads,
) -> Result<()> {
    let keys: Vec<Vec<u8>> = keys
        .into_iter()
        .filter(|k| !ahead.keys.contains_key(k))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if keys.is_empty() {
        return Ok(());
    }
    let mut found: std::collections::HashMap<Vec<u8>, Vec<u8>> =
        kept.index_get_many(&keys)?.into_iter().collect();
    for k in keys {
        let v = found.remove(&k);
        ahead.keys.insert(k, v);
    }
    Ok(())
}

/// Keys kept read ahead at most: a longer walk reads ahead again.
const AHEAD_READS: usize = 65_536;

/// Sessions whose preview another session's summary holds (`s:` values
/// with [`encoding::PreviewAt::In`]), by session: what a write that
/// continues one of them reads second, under the lock, for its own
/// summary. A session's summary never changes once written, so this is
/// only ever a hint of which keys to read ahead; the values are still read
/// under the lock. Forgotten whole past [`ORIGINS`] entries.
#[derive(Debug, Default)]
struct Origins(std::collections::HashMap<crate::hash::ObjectId, crate::hash::ObjectId>);

/// Sessions [`Origins`] keeps at most.
const ORIGINS: usize = 65_536;

impl Origins {
    /// Notes where `summary`, the `s:` value of `id`, takes its preview
    /// from, when that is another session.
    fn note(&mut self, id: crate::hash::ObjectId, summary: &[u8]) {
        if let Some((_, encoding::PreviewAt::In(o))) = SessionInfo::from_index_value(id, summary) {
            if self.0.len() >= ORIGINS {
                self.0.clear();
            }
            self.0.insert(id, o);
        }
    }
}

/// An operation this handle appended, waiting to be applied.
#[derive(Debug)]
struct Appended {
    op: Operation,
    fresh: Vec<(crate::hash::ObjectId, crate::object::Session)>,
}

/// Where catching up started from, for the open report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Applied this many operations from the journal tail.
    Applied(usize),
    /// The tables did not continue the operations; this many operations
    /// were applied from the first.
    Rebuilt(usize),
}

impl Index {
    /// The index of the store at `root`: its tables mapped (no checksum is
    /// read; `fsck` verifies them), nothing applied yet (see
    /// [`Index::catch_up`]). A read-only handle never writes tables.
    pub fn open(root: &Path, read_only: bool) -> Result<Index> {
        let dir = root.join("index");
        // A damaged table is derived data: read around it (everything is
        // applied from the operations) and say so.
        let (stack, problem) = match Stack::load(&dir) {
            Ok(s) => (s, None),
            Err(e @ Error::CorruptFile { .. }) => (
                Stack::default(),
                Some(format!(
                    "{e}; ignoring the index tables (sessctl reindex replaces them)"
                )),
            ),
            Err(e) => return Err(e),
        };
        let lock = if read_only {
            None
        } else {
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            Some(LockFile::open(&dir.join("LOCK"), root)?)
        };
        let applied = stack.covered();
        Ok(Index {
            dir: Some(dir),
            lock,
            view: RwLock::new(View {
                stack,
                applied,
                ..View::default()
            }),
            problem: std::sync::Mutex::new(problem),
            apply_lock: Default::default(),
            checked: Default::default(),
            looked_for_tables: Default::default(),
            appended: Default::default(),
            kept: None,
            ahead_reads: Default::default(),
            origins: Default::default(),
        })
    }

    /// The index of a store whose backend keeps the keys itself (see
    /// [`crate::odb::KeptIndex`]): nothing is held or applied here.
    pub fn kept_by(backend: std::sync::Arc<dyn crate::odb::ObjectBackend>) -> Result<Index> {
        let mut ix = Index::temporary()?;
        ix.kept = Some(backend);
        Ok(ix)
    }

    /// The keys a write's checks and its index effects read for `refs`,
    /// `conversations` and `sessions` (decoded, new), for
    /// [`Index::read_with_lock`] and [`Index::read_ahead`]. None for an
    /// index of its own, which reads nothing from a backend.
    pub(crate) fn ahead_keys<'a>(
        &self,
        refs: impl Iterator<Item = &'a crate::refs::RefName>,
        conversations: impl Iterator<Item = &'a str>,
        sessions: &[(crate::hash::ObjectId, crate::object::Session)],
    ) -> Option<Vec<Vec<u8>>> {
        self.kept()?;
        let mut keys = Vec::new();
        // HEAD's rule is kept under the lock by every write.
        let names = refs
            .map(ToString::to_string)
            .chain(std::iter::once(crate::refs::RefName::Head.to_string()));
        for name in names {
            keys.push(key("r:", name.as_bytes()));
            keys.push(key("h:", name.as_bytes()));
        }
        for c in conversations {
            keys.push(key("c:", c.as_bytes()));
            keys.push(key("u:", c.as_bytes()));
        }
        let origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        for (id, s) in sessions {
            keys.push(key("s:", id.as_bytes()));
            keys.push(key("i:", id.as_bytes()));
            for p in &s.parents {
                keys.push(key("s:", p.as_bytes()));
                // Its preview's origin, which the new summary reads next:
                // known when this handle wrote or read the parent's.
                if let Some(o) = origins.0.get(p) {
                    keys.push(key("s:", o.as_bytes()));
                }
            }
            if let Some(c) = s.conversation {
                keys.push(key("i:", c.as_bytes()));
            }
        }
        keys.sort_unstable();
        keys.dedup();
        Some(keys)
    }

    /// Tells a backend that keeps the keys, before the write lock is
    /// taken, what the write will read under it ([`Index::ahead_keys`],
    /// and whether `ids` are stored): it may read them in the round trip
    /// that takes the lock (see [`crate::odb::KeptIndex::read_with_lock`]).
    pub(crate) fn read_with_lock(
        &self,
        keys: &Option<Vec<Vec<u8>>>,
        ids: &[crate::hash::ObjectId],
    ) {
        if let (Some(kept), Some(keys)) = (self.kept(), keys) {
            kept.read_with_lock(keys, ids);
        }
    }

    /// Tells a backend that keeps the keys, under the write lock, what a
    /// write is about to read (see [`crate::odb::KeptIndex::read_ahead_locked`]):
    /// `keys` from [`Index::ahead_keys`], and whether `ids` are stored.
    /// Nothing for an index of its own.
    pub(crate) fn read_ahead(
        &self,
        keys: &Option<Vec<Vec<u8>>>,
        ids: &[crate::hash::ObjectId],
    ) -> Result<()> {
        match (self.kept(), keys) {
            (Some(kept), Some(keys)) => kept.read_ahead_locked(keys, ids),
            _ => Ok(()),
        }
    }

    /// Reads ahead, where the backend keeps the keys (a round trip each),
    /// what showing `ids` reads: their summaries (`s:`), then their
    /// previews' origins and their conversations' names (`i:`), two round
    /// trips for the lot. Kept while this handle's view stays where it is;
    /// a read of anything else asks the backend as before. Nothing for an
    /// index of its own.
    pub fn read_ahead_sessions(&self, ids: &[crate::hash::ObjectId]) -> Result<()> {
        let Some(kept) = self.kept() else {
            return Ok(());
        };
        let mut ahead = self.ahead_reads_at_head();
        let fetch = |keys: Vec<Vec<u8>>, ahead: &mut AheadReads| fetch_ahead(kept, keys, ahead);
        let first: Vec<Vec<u8>> = ids.iter().map(|id| key("s:", id.as_bytes())).collect();
        fetch(first, &mut ahead)?;
        let mut second = Vec::new();
        for id in ids {
            let Some(Some(v)) = ahead.keys.get(&key("s:", id.as_bytes())) else {
                continue;
            };
            let Some((info, at)) = SessionInfo::from_index_value(*id, v) else {
                continue;
            };
            if let encoding::PreviewAt::In(o) = at {
                second.push(key("s:", o.as_bytes()));
            }
            second.push(key("i:", info.conversation.as_bytes()));
        }
        fetch(second, &mut ahead)?;
        Ok(())
    }

    /// Reads ahead, where the backend keeps the keys, the records and run
    /// claims of conversations `names` (what [`Index::conversation`] reads
    /// of each), in one round trip: `ls` reads its page's that way. Kept
    /// as [`Index::read_ahead_sessions`] keeps what it reads.
    pub fn read_ahead_conversations(&self, names: &[String]) -> Result<()> {
        let Some(kept) = self.kept() else {
            return Ok(());
        };
        let keys = names
            .iter()
            .flat_map(|n| Index::conversation_keys(n))
            .collect();
        fetch_ahead(kept, keys, &mut self.ahead_reads_at_head())
    }

    /// What was read ahead, emptied first when this handle's view moved
    /// since (or when it grew past [`AHEAD_READS`]).
    fn ahead_reads_at_head(&self) -> std::sync::MutexGuard<'_, AheadReads> {
        self.ahead_reads_at(self.head())
    }

    /// What was read ahead at `head`, emptied first when it was read at
    /// another (or grew past [`AHEAD_READS`]).
    fn ahead_reads_at(&self, head: Option<(u64, Hash)>) -> std::sync::MutexGuard<'_, AheadReads> {
        let mut ahead = self.ahead_reads.lock().unwrap_or_else(|p| p.into_inner());
        if ahead.head != head || ahead.keys.len() > AHEAD_READS {
            ahead.keys.clear();
            ahead.head = head;
        }
        ahead
    }

    /// Notes where the summary `summary` of session `id` takes its
    /// preview from (see [`Origins`]).
    fn note_origin(&self, id: crate::hash::ObjectId, summary: &[u8]) {
        self.origins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note(id, summary);
    }

    /// The backend's keys, when it keeps them.
    fn kept(&self) -> Option<&dyn crate::odb::KeptIndex> {
        self.kept.as_ref().and_then(|b| b.kept_index())
    }

    /// Whether the keys live in the backend (a remote store).
    pub fn is_kept(&self) -> bool {
        self.kept().is_some()
    }

    /// What opening the index had to read around, once.
    pub fn take_problem(&self) -> Option<String> {
        self.problem
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// An index held in memory only, for stores that live in memory.
    pub fn temporary() -> Result<Index> {
        Ok(Index {
            dir: None,
            lock: None,
            view: RwLock::new(View::default()),
            problem: Default::default(),
            apply_lock: Default::default(),
            checked: Default::default(),
            looked_for_tables: Default::default(),
            appended: Default::default(),
            kept: None,
            ahead_reads: Default::default(),
            origins: Default::default(),
        })
    }

    fn view(&self) -> std::sync::RwLockReadGuard<'_, View> {
        self.view.read().unwrap_or_else(|p| p.into_inner())
    }

    fn applying(&self) -> std::sync::MutexGuard<'_, ()> {
        self.apply_lock.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn view_mut(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        self.view.write().unwrap_or_else(|p| p.into_inner())
    }

    /// One key: the overlay first, then the tables, newest first.
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(kept) = self.kept() {
            let ahead = self.ahead_reads.lock().unwrap_or_else(|p| p.into_inner());
            if ahead.head == self.head() {
                if let Some(v) = ahead.keys.get(k) {
                    return Ok(v.clone());
                }
            }
            drop(ahead);
            return kept.index_get(k);
        }
        self.view().get(k)
    }

    /// Every key that starts with `prefix` and its value, ascending.
    fn scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let batch = self.scan_batch(prefix, after.as_deref(), false, 4096)?;
            let done = batch.len() < 4096;
            after = batch.last().map(|(k, _)| k.clone());
            out.extend(batch);
            if done {
                return Ok(out);
            }
        }
    }

    /// Up to `n` live entries under `prefix` past `cursor` (exclusive) in
    /// the given direction: the overlay and the tables merged, the newest
    /// source of each key winning, removed keys left out.
    fn scan_batch(
        &self,
        prefix: &[u8],
        cursor: Option<&[u8]>,
        reverse: bool,
        n: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if let Some(kept) = self.kept() {
            return kept.index_scan(prefix, cursor, reverse, n);
        }
        let view = self.view();
        let lower = match (reverse, cursor) {
            (false, Some(c)) => Bound::Excluded(c.to_vec()),
            _ => Bound::Included(prefix.to_vec()),
        };
        let upper = match (reverse, cursor) {
            (true, Some(c)) => Bound::Excluded(c.to_vec()),
            _ => match prefix_end(prefix) {
                Some(end) => Bound::Excluded(end),
                None => Bound::Unbounded,
            },
        };
        let mut overlay = view.overlay.range((lower.clone(), upper.clone()));
        let mut sources: Vec<Source<'_>> = Vec::new();
        if reverse {
            sources.push(Box::new(
                std::iter::from_fn(move || overlay.next_back())
                    .map(|(k, v)| Ok((k.clone(), v.clone()))),
            ));
        } else {
            sources.push(Box::new(
                std::iter::from_fn(move || overlay.next()).map(|(k, v)| Ok((k.clone(), v.clone()))),
            ));
        }
        for t in view.stack.tables() {
            sources.push(t.range(prefix, cursor, reverse)?);
        }
        merge_sources(sources, reverse, n)
    }

    /// The last operation applied: (sequence number, hash).
    pub fn applied(&self) -> Result<Option<(u64, Hash)>> {
        Ok(self.view().applied)
    }

    /// The last operation whose effect on refs and run claims this handle
    /// knows: past [`Index::applied`] while a writer is between
    /// [`Index::catch_up_refs`] and its full catch-up.
    pub fn head(&self) -> Option<(u64, Hash)> {
        let v = self.view();
        match (v.ahead_of, v.applied) {
            (Some(a), Some(b)) if a.0 <= b.0 => Some(b),
            (Some(a), _) => Some(a),
            (None, b) => b,
        }
    }

    /// A conversation's record as the operations this handle knows leave
    /// it, those read ahead under the write lock included
    /// ([`Index::catch_up_refs`]): what a compare-and-swap on the record
    /// checks.
    pub fn current_record(&self, name: &str) -> Result<Option<ConversationRecord>> {
        let ahead = self.view().ahead.get(&key("q:", name.as_bytes())).cloned();
        match ahead {
            Some(None) => Ok(None),
            Some(Some(b)) => ConversationInfo::from_index_bytes(name, &b)
                .map(|i| Some(i.record))
                .ok_or_else(|| {
                    Error::from(IndexError::UnreadableRecord {
                        name: name.to_owned(),
                    })
                }),
            None => Ok(self.conversation(name)?.map(|i| i.record)),
        }
    }

    /// What a writer needs under the write lock: the refs, their newest
    /// reflog hashes and the run claims as the operations after this
    /// handle's leave them, read from the journal without reading any
    /// object (session summaries follow in [`Index::catch_up`], after the
    /// lock is released). Lookups of those keys see them at once.
    pub fn catch_up_refs(&self, odb: &Odb) -> Result<()> {
        if self.kept().is_some() {
            // The backend's keys are current under its write lock, and
            // its head is the store's.
            return self.catch_up_kept_reading(&[], true);
        }
        let guard = self.applying();
        let from = self.head();
        let raw = odb.backend().ops_after(from.map_or(0, |f| f.0))?;
        let Some((first, bytes)) = raw.first() else {
            return Ok(());
        };
        if from.is_some_and(|(_, h)| decode_op(*first, bytes).is_ok_and(|op| op.prev != Some(h))) {
            // Not a continuation: the full catch-up sorts it out.
            drop(guard);
            return self.catch_up(odb).map(|_| ());
        }
        let mut effects = Vec::new();
        let mut last = None;
        for (seq, bytes) in &raw {
            let op = decode_op(*seq, bytes)?;
            effects.extend(apply::ref_effects(&op));
            effects.extend(apply::record_effects(&op));
            last = Some((op.seq, op.hash()));
        }
        let mut v = self.view_mut();
        v.ahead.extend(effects);
        v.ahead_of = last;
        Ok(())
    }

    /// Records an operation this handle has just appended, under the
    /// store's write lock: its effect on refs, reflog heads, run claims and
    /// records at once (what the next writer's compare-and-swaps read, as
    /// [`Index::catch_up_refs`] would have it from the journal), and the
    /// operation itself with the sessions its writer decoded, for
    /// [`Index::apply_appended`] to apply after the lock, in order.
    pub fn appended(
        &self,
        op: Operation,
        fresh: Vec<(crate::hash::ObjectId, crate::object::Session)>,
    ) {
        if self.kept().is_some() {
            // Its keys were committed with it.
            let mut v = self.view_mut();
            if v.applied.is_none_or(|a| a.0 < op.seq) {
                v.applied = Some((op.seq, op.hash()));
            }
            return;
        }
        let mut effects = apply::ref_effects(&op);
        effects.extend(apply::record_effects(&op));
        {
            let mut v = self.view_mut();
            // Only on top of what this handle knows: a gap is the journal's
            // to fill (catch-up reads it).
            let head = match (v.ahead_of, v.applied) {
                (Some(a), Some(b)) if a.0 <= b.0 => Some(b),
                (Some(a), _) => Some(a),
                (None, b) => b,
            };
            if head.map_or(0, |h| h.0) + 1 == op.seq {
                v.ahead.extend(effects);
                v.ahead_of = Some((op.seq, op.hash()));
            }
        }
        self.appended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(op.seq, Appended { op, fresh });
    }

    /// Applies every operation up to `seq`, in order: those this handle
    /// appended from memory, the others' from the journal. Whichever thread
    /// holds the apply lock applies all that is waiting, so threads that
    /// commit at once do not each wait for their own turn.
    pub fn apply_appended(&self, odb: &Odb, seq: u64) -> Result<()> {
        if self.kept().is_some() || self.view().applied.is_some_and(|a| a.0 >= seq) {
            return Ok(());
        }
        self.catch_up_to(odb, seq).map(|_| ())
    }

    /// The waiting operation `seq` this handle appended, if any; those
    /// applied already are dropped.
    fn take_appended(&self, seq: u64) -> Option<Appended> {
        let mut waiting = self.appended.lock().unwrap_or_else(|p| p.into_inner());
        let out = waiting.remove(&seq);
        if waiting.first_key_value().is_some_and(|(s, _)| *s < seq) {
            waiting.retain(|s, _| *s > seq);
        }
        out
    }

    /// Brings the index up to date with the operations: applies those after
    /// the last one applied (the journal tail, normally). When they do not
    /// continue it (the tables were written from another history), every
    /// operation is applied again from the first, over no tables.
    pub fn catch_up(&self, odb: &Odb) -> Result<CatchUp> {
        self.catch_up_to(odb, u64::MAX)
    }

    /// [`Index::catch_up`] by a reader about to read `keys` (from
    /// [`Index::conversation_keys`]): where the backend keeps the keys, they
    /// are read with its head, in the same round trip, and answered from
    /// there while this handle's view stays at that head.
    pub fn catch_up_reading(&self, odb: &Odb, keys: &[Vec<u8>]) -> Result<CatchUp> {
        if self.kept().is_none() || keys.is_empty() {
            return self.catch_up(odb);
        }
        self.catch_up_kept_reading(keys, false)?;
        Ok(CatchUp::Applied(0))
    }

    /// Forgets the keys read ahead (see [`Index::read_ahead_sessions`]):
    /// for keys changed without a new operation (gc's, a rebuild's), or
    /// read at a head a crash of the server lost.
    pub(crate) fn forget_reads_ahead(&self) {
        let mut ahead = self.ahead_reads.lock().unwrap_or_else(|p| p.into_inner());
        ahead.keys.clear();
        ahead.head = None;
    }

    /// The keys [`Index::conversation`] reads of conversation `name`: its
    /// record and its run claim.
    pub fn conversation_keys(name: &str) -> Vec<Vec<u8>> {
        vec![key("c:", name.as_bytes()), key("u:", name.as_bytes())]
    }

    /// [`Index::catch_up`], applying no operation past `last`.
    pub fn catch_up_to(&self, odb: &Odb, last: u64) -> Result<CatchUp> {
        if self.kept().is_some() {
            self.catch_up_kept()?;
            return Ok(CatchUp::Applied(0));
        }
        let _one_at_a_time = self.applying();
        let applied = self.view().applied;
        // Operations this handle appended follow on from what is applied:
        // taken from memory, with no read of the journal.
        let mut from_memory = 0;
        let mut applied = applied;
        while applied.map_or(0, |a| a.0) < last {
            let Some(a) = self.take_appended(applied.map_or(0, |a| a.0) + 1) else {
                break;
            };
            if a.op.prev != applied.map(|a| a.1) {
                // Not a continuation of what is applied: the journal's
                // path below sorts it out.
                break;
            }
            self.apply_locked(&a.op, odb, &a.fresh)?;
            from_memory += 1;
            applied = self.view().applied;
        }
        if from_memory > 0 && applied.map_or(0, |a| a.0) >= last {
            return Ok(CatchUp::Applied(from_memory));
        }
        let mut raw = odb.backend().ops_after(applied.map_or(0, |a| a.0))?;
        raw.retain(|(s, _)| *s <= last);
        if let (Some((_, hash)), Some((seq, bytes))) = (applied, raw.first()) {
            let op = decode_op(*seq, bytes)?;
            if op.prev != Some(hash) {
                return self.rebuild_locked(odb).map(CatchUp::Rebuilt);
            }
        } else if let (Some((seq, hash)), None, false) = (
            applied,
            raw.first(),
            self.checked
                .swap(true, std::sync::atomic::Ordering::Relaxed),
        ) {
            // Nothing after the tables: do they describe an operation the
            // store holds (the journal's copy is compared; an op-log file
            // is trusted by its name, not read)? Once per handle.
            let same = match odb.backend().op_at(seq)? {
                None => false,
                Some(b) if b.is_empty() => true,
                Some(b) => decode_op(seq, &b)?.hash() == hash,
            };
            if !same {
                return self.rebuild_locked(odb).map(CatchUp::Rebuilt);
            }
        }
        for (seq, bytes) in &raw {
            match self.take_appended(*seq) {
                Some(a) => self.apply_locked(&a.op, odb, &a.fresh)?,
                None => self.apply_locked(&decode_op(*seq, bytes)?, odb, &[])?,
            }
        }
        Ok(CatchUp::Applied(from_memory + raw.len()))
    }

    /// Catching up, for keys the backend keeps: reading the operation they
    /// describe (one query; no operation is read).
    fn catch_up_kept(&self) -> Result<()> {
        self.catch_up_kept_reading(&[], false)
    }

    /// [`Index::catch_up_kept`], reading `keys` with the head (one query):
    /// kept with the reads ahead, as of that head.
    fn catch_up_kept_reading(&self, keys: &[Vec<u8>], locked: bool) -> Result<()> {
        let kept = self.kept().expect("called for kept keys");
        let (head, built, found) = kept.index_head_reading(keys)?;
        if !built {
            return Err(IndexError::KeptNotBuilt.into());
        }
        let lost = {
            let mut v = self.view_mut();
            let (server, mine) = (head.map_or(0, |h| h.0), v.applied.map_or(0, |a| a.0));
            // Under the write lock the head read is the store's. Behind
            // what this handle saw, or the same operation with another hash,
            // only when a crash of the server lost commits not yet flushed
            // (a writer lets the lock go before its flush: "Remote writes",
            // step 5): the next operation continues the server's chain, and
            // what was read at the lost head goes. Outside the lock, another
            // thread's older read may come back after this handle moved on:
            // only forward then, or the same operation with another hash.
            let lost = v.applied != head && (server == mine || (locked && server < mine));
            if server > mine || lost {
                v.applied = head;
            }
            lost
        };
        if lost {
            // After the view's lock is let go: a reader takes the two the
            // other way round.
            self.forget_reads_ahead();
        }
        if !keys.is_empty() {
            // Keyed by the head they were read at: answered only while this
            // handle's view is there.
            let mut ahead = self.ahead_reads_at(head);
            let mut found: std::collections::HashMap<Vec<u8>, Vec<u8>> =
                found.into_iter().collect();
            for k in keys {
                let v = found.remove(k);
                ahead.keys.insert(k.clone(), v);
            }
        }
        Ok(())
    }

    /// Rebuilds the keys a backend keeps: every operation applied again
    /// in memory under the store's write lock, then every key replaced in
    /// one transaction. Returns how many operations were applied.
    fn rebuild_kept(&self, odb: &Odb) -> Result<usize> {
        let kept = self.kept().expect("called for kept keys");
        let lock = odb.backend().write_lock()?;
        let (fresh, n) = Index::replayed(odb)?;
        let fresh = fresh.view.into_inner().unwrap_or_else(|p| p.into_inner());
        let keys = fresh
            .overlay
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        kept.index_replace(lock, keys)?;
        self.forget_reads_ahead();
        self.view_mut().applied = fresh.applied;
        Ok(n)
    }

    /// Every operation applied from the first into an index in memory.
    fn replayed(odb: &Odb) -> Result<(Index, usize)> {
        let fresh = Index::temporary()?;
        let ops = odb.backend().ops_after(0)?;
        for (seq, bytes) in &ops {
            fresh.apply(&decode_op(*seq, bytes)?, odb)?;
        }
        Ok((fresh, ops.len()))
    }

    /// For keys a backend keeps: each key whose value differs from what
    /// replaying every operation gives, one line per key (fsck --full).
    /// The replay and the keys are compared at one chain head; should the
    /// head move meanwhile, the comparison is run again.
    pub fn verify_kept(&self, odb: &Odb) -> Result<Vec<String>> {
        let Some(kept) = self.kept() else {
            return Ok(Vec::new());
        };
        for _ in 0..3 {
            let before = kept.index_head()?;
            let (fresh, _) = Index::replayed(odb)?;
            let stored = kept.index_scan(b"", None, false, usize::MAX)?;
            if kept.index_head()? != before {
                continue;
            }
            let replayed: BTreeMap<Vec<u8>, Vec<u8>> = fresh
                .view
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .overlay
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            let stored: BTreeMap<Vec<u8>, Vec<u8>> = stored.into_iter().collect();
            let mut problems = Vec::new();
            let show = |k: &[u8]| show_key(k);
            for (k, v) in &replayed {
                match stored.get(k) {
                    None => problems.push(format!(
                        "index: key {} is missing from PostgreSQL; a reindex rebuilds it",
                        show(k)
                    )),
                    Some(s) if s != v => problems.push(format!(
                        "index: key {} differs in PostgreSQL from what the operations give; a reindex rebuilds it",
                        show(k)
                    )),
                    Some(_) => {}
                }
            }
            for k in stored.keys().filter(|k| !replayed.contains_key(*k)) {
                problems.push(format!(
                    "index: key {} is in PostgreSQL, but no operation made it; a reindex rebuilds it",
                    show(k)
                ));
            }
            return Ok(problems);
        }
        Ok(vec![
            "index: the store kept changing; its keys were not compared (run fsck again)".into(),
        ])
    }

    /// Forgets the tables and applies every operation from the first into
    /// the overlay (nothing on disk changes).
    pub(crate) fn rebuild_in_memory(&self, odb: &Odb) -> Result<usize> {
        if self.kept().is_some() {
            return Err(Error::ReadOnly);
        }
        let _one_at_a_time = self.applying();
        self.rebuild_locked(odb)
    }

    /// Applies every operation into a fresh index, then swaps it in: other
    /// threads on this handle see the old index until then, never an empty
    /// one.
    fn rebuild_locked(&self, odb: &Odb) -> Result<usize> {
        let fresh = Index::temporary()?;
        let ops = odb.backend().ops_after(0)?;
        for (seq, bytes) in &ops {
            fresh.apply(&decode_op(*seq, bytes)?, odb)?;
        }
        let mut fresh = fresh.view.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut v = self.view_mut();
        // What a writer read ahead under the write lock past the last
        // operation applied stays ahead.
        if v.ahead_of
            .is_some_and(|a| fresh.applied.is_none_or(|f| a.0 > f.0))
        {
            fresh.ahead = std::mem::take(&mut v.ahead);
            fresh.ahead_of = v.ahead_of;
        }
        *v = fresh;
        Ok(ops.len())
    }

    /// Rebuilds the index from the first operation and, on disk, replaces
    /// every table with one that holds it all, then removes `index/REBUILD`
    /// (see [`Index::mark_rebuild`]). Returns how many operations were
    /// applied.
    pub fn rebuild(&self, odb: &Odb) -> Result<usize> {
        if self.kept().is_some() {
            return self.rebuild_kept(odb);
        }
        let n = self.rebuild_in_memory(odb)?;
        self.write_tables_from(odb, true, false)?;
        if let (Some(dir), Some(_)) = (&self.dir, &self.lock) {
            let marker = dir.join(REBUILD_MARKER);
            match std::fs::remove_file(&marker) {
                Ok(()) => crate::odb::atomic_file::sync_dir(dir)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&marker, e)),
            }
        }
        Ok(n)
    }

    /// After gc dropped the sessions `dropped`: removes from every table
    /// (and from this handle's overlay) each key that holds text of one of
    /// them: its `s:` entry (title, preview), and every `c:` value written
    /// while one of them was the conversation's head (its preview), which
    /// only older tables keep once the head moved on. Tables that hold none
    /// are left alone, the others are written again under their names;
    /// then `index/REBUILD` is removed (see [`Index::mark_rebuild`]).
    /// Conversation figures are left as they are: a dropped session stays
    /// counted, as it was before the gc.
    pub fn drop_sessions(&self, odb: &Odb, dropped: &crate::hash::IdSet) -> Result<usize> {
        let doomed = |k: &[u8], v: Option<&[u8]>| -> bool {
            if let Some(id) = k.strip_prefix(b"s:") {
                return crate::hash::ObjectId::from_slice(id)
                    .is_some_and(|id| dropped.contains(&id));
            }
            if let (Some(name), Some(v)) = (k.strip_prefix(b"c:"), v) {
                let name = String::from_utf8_lossy(name);
                return ConversationInfo::from_index_bytes(&name, v)
                    .and_then(|c| c.head)
                    .is_some_and(|h| dropped.contains(&h));
            }
            false
        };
        {
            let _one_at_a_time = self.applying();
            let mut v = self.view_mut();
            v.overlay.retain(|k, val| !doomed(k, val.as_deref()));
        }
        if let Some(kept) = self.kept() {
            // Kept in PostgreSQL: the dropped sessions' keys (named, not
            // scanned for) and the conversations whose head went.
            let mut gone: Vec<(Vec<u8>, Vec<u8>)> = dropped
                .iter()
                .map(|id| (key("s:", id.as_bytes()), Vec::new()))
                .collect();
            gone.extend(
                self.scan(b"c:")?
                    .into_iter()
                    .filter(|(k, v)| doomed(k, Some(v))),
            );
            if gone.is_empty() {
                return Ok(0);
            }
            let forgot = kept.index_forget(odb.backend().write_lock()?, gone);
            self.forget_reads_ahead();
            return forgot;
        }
        let (Some(dir), Some(lock)) = (&self.dir, &self.lock) else {
            return Ok(0);
        };
        // The overlay into a table first, so that the stack holds all there is.
        self.write_tables(odb, true)?;
        let _one_writer = lock.lock(Some(REBUILD_WAIT))?;
        // Tables another process wrote meanwhile are in the stack as stored.
        let stack = Stack::load(dir)?;
        let written = stack.rewrite_without(dir, &doomed)?;
        let stack = Stack::load(dir)?;
        {
            let _one_at_a_time = self.applying();
            let mut v = self.view_mut();
            if v.stack.covered() == stack.covered() {
                v.stack = stack.clone();
            } else {
                // Another process's tables: take them up as any writer does.
                drop(v);
                drop(_one_at_a_time);
                self.adopt_newer_tables(dir, odb)?;
            }
        }
        // Files outside the chain are never read again, but may hold text.
        stack::clear_leftovers(dir, &stack, true);
        let marker = dir.join(REBUILD_MARKER);
        match std::fs::remove_file(&marker) {
            Ok(()) => crate::odb::atomic_file::sync_dir(dir)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&marker, e)),
        }
        Ok(written)
    }

    /// Writes `index/REBUILD` (durably): the tables may hold text of
    /// objects about to be dropped, and must be rebuilt (by gc, or
    /// `reindex`) before it goes. gc writes it before its sweep and
    /// [`Index::rebuild`] removes it, so a gc killed between the two, or
    /// whose rebuild failed, leaves it for the next gc.
    pub fn mark_rebuild(&self) -> Result<()> {
        if let (Some(dir), Some(_)) = (&self.dir, &self.lock) {
            crate::odb::atomic_file::AtomicFile::replace(
                &dir.join(REBUILD_MARKER),
                b"",
                crate::odb::Durability::Sync,
            )?;
        }
        Ok(())
    }

    /// Whether `index/REBUILD` is there (see [`Index::mark_rebuild`]).
    pub fn rebuild_pending(&self) -> bool {
        self.dir
            .as_ref()
            .is_some_and(|d| d.join(REBUILD_MARKER).exists())
    }

    /// Folds the overlay into a new table once it holds [`TABLE_EVERY`]
    /// operations or [`TABLE_KEYS`] keys (or at all, with `force`), so that the next handle to
    /// open the store applies few operations. Skipped while another process
    /// writes one. The operations it holds are synced first: a table never
    /// describes an operation a crash could still take back.
    /// Whether [`Index::write_tables`] has an overlay to fold (a cheap
    /// look): what a writer that writes tables on another thread asks
    /// before starting one.
    pub fn tables_due(&self) -> bool {
        self.dir.is_some() && self.lock.is_some() && self.view().overlay_due()
    }

    pub fn write_tables(&self, odb: &Odb, force: bool) -> Result<bool> {
        self.write_tables_from(odb, force, true)
    }

    /// [`Index::write_tables`]; `adopt`: take up newer tables other
    /// processes wrote first (not when rebuilding, which distrusts them).
    fn write_tables_from(&self, odb: &Odb, force: bool, adopt: bool) -> Result<bool> {
        let (Some(dir), Some(lock)) = (&self.dir, &self.lock) else {
            return Ok(false);
        };
        if !force && !self.view().overlay_due() {
            return Ok(false);
        }
        // A rebuild waits for another table writer (a table write is short):
        // skipping it would leave the old tables, and gc rebuilds so that
        // none keeps the text of what it dropped.
        let one_writer = if adopt {
            lock.try_lock()?
        } else {
            Some(lock.lock(Some(REBUILD_WAIT))?)
        };
        let Some(_one_writer) = one_writer else {
            return Ok(false);
        };
        // Another process may have written tables since this one loaded.
        if adopt {
            self.adopt_newer_tables(dir, odb)?;
        }
        let (snapshot, applied, base) = {
            let v = self.view();
            if v.applied == v.stack.covered() || (!force && !v.overlay_due()) {
                stack::clear_leftovers(dir, &v.stack, false);
                return Ok(false);
            }
            (v.overlay.clone(), v.applied, v.stack.clone())
        };
        let Some(applied) = applied else {
            return Ok(false);
        };
        odb.backend().sync_all()?;
        let stack = base.push(dir, applied, &snapshot)?;
        let mut v = self.view_mut();
        // What later operations changed stays in the overlay; what the new
        // table holds as it is leaves it.
        v.overlay
            .retain(|k, val| snapshot.get(k).is_none_or(|s| s != val));
        v.stack = stack;
        stack::clear_leftovers(dir, &v.stack, !adopt);
        Ok(true)
    }

    /// Keeps a handle that never writes tables (a reader open for days)
    /// from holding every operation since it opened: once its overlay holds
    /// a few tables' worth, it takes up the tables writers have written
    /// since, every so many operations.
    pub fn follow_tables(&self, odb: &Odb) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let (ops, applied) = {
            let v = self.view();
            (v.overlay_ops(), v.applied.map_or(0, |a| a.0))
        };
        if ops < 2 * TABLE_EVERY || applied < self.looked_for_tables.load(Relaxed) + TABLE_EVERY {
            return Ok(());
        }
        self.looked_for_tables.store(applied, Relaxed);
        self.adopt_newer_tables(dir, odb)
    }

    /// Takes up tables another process wrote past this handle's, when they
    /// continue what it applied: the overlay is then rebuilt from the
    /// operations after them, which is less to hold.
    fn adopt_newer_tables(&self, dir: &Path, odb: &Odb) -> Result<()> {
        // A damaged newer table is fsck's to report; this handle keeps its own.
        let Ok(newer) = Stack::load(dir) else {
            return Ok(());
        };
        let (ours, applied) = {
            let v = self.view();
            (v.stack.covered(), v.applied)
        };
        let (Some(theirs), Some(applied)) = (newer.covered(), applied) else {
            return Ok(());
        };
        // Tables that cover as much as ours are taken up too when ours were
        // written again under their names since (gc dropping text).
        let behind = ours.is_none_or(|o| o.0 < theirs.0)
            || (ours.is_some_and(|o| o.0 == theirs.0) && !self.view().stack.is_current());
        if !behind || theirs.0 > applied.0 {
            return Ok(());
        }
        // Apply the operations after their tables over them, then swap.
        let fresh = Index {
            dir: None,
            lock: None,
            view: RwLock::new(View {
                applied: Some(theirs),
                stack: newer,
                ..View::default()
            }),
            problem: Default::default(),
            apply_lock: Default::default(),
            checked: Default::default(),
            looked_for_tables: Default::default(),
            appended: Default::default(),
            kept: None,
            ahead_reads: Default::default(),
            origins: Default::default(),
        };
        // Only tables that describe the operations as stored.
        match odb.backend().op_at(theirs.0)? {
            None => return Ok(()),
            Some(b) if !b.is_empty() && decode_op(theirs.0, &b)?.hash() != theirs.1 => {
                return Ok(())
            }
            Some(_) => {}
        }
        let raw = odb.backend().ops_after(theirs.0)?;
        if let Some((seq, bytes)) = raw.first() {
            if decode_op(*seq, bytes)?.prev != Some(theirs.1) {
                return Ok(());
            }
        }
        for (seq, bytes) in raw.iter().filter(|(s, _)| *s <= applied.0) {
            fresh.apply(&decode_op(*seq, bytes)?, odb)?;
        }
        let mut fresh = fresh.view.into_inner().unwrap_or_else(|p| p.into_inner());
        let _one_at_a_time = self.applying();
        let mut v = self.view_mut();
        if fresh.applied == v.applied {
            fresh.ahead = std::mem::take(&mut v.ahead);
            fresh.ahead_of = v.ahead_of;
            *v = fresh;
        }
        Ok(())
    }

    /// Whether `e` is about one of this index's table files.
    pub fn is_table_error(&self, e: &Error) -> bool {
        match (e, &self.dir) {
            (Error::CorruptFile { path, .. }, Some(dir)) => path.parent() == Some(dir.as_path()),
            _ => false,
        }
    }

    /// Checks every table in full (checksums, order); one line per problem.
    pub fn verify_tables(&self) -> Vec<String> {
        match &self.dir {
            Some(dir) => Stack::verify_dir(dir),
            None => Vec::new(),
        }
    }

    /// The tables this handle reads: (file name, first and last operation).
    pub fn tables(&self) -> Vec<(String, u64, u64)> {
        self.view().stack.describe()
    }
}

/// A key as errors name it: its prefix, then the rest as text when it is
/// printable, in hex when not (`s:` ids, `a:` times).
fn show_key(k: &[u8]) -> String {
    let (head, rest) = k.split_at(k.len().min(2));
    let head = String::from_utf8_lossy(head);
    match std::str::from_utf8(rest) {
        Ok(t) if t.chars().all(|c| !c.is_control()) => format!("{head}{t}"),
        _ => format!(
            "{head}{}",
            rest.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    }
}

/// A key and its value, or `None` for a key removed.
type Entry = (Vec<u8>, Option<Vec<u8>>);

type Source<'a> = Box<dyn Iterator<Item = Result<Entry>> + 'a>;

/// Merges sources, each sorted in the scan's direction and given newest
/// first: each key once, from the newest source that has it; removed keys
/// left out; at most `n` entries.
fn merge_sources(
    mut sources: Vec<Source<'_>>,
    reverse: bool,
    n: usize,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut heads: Vec<Option<Entry>> = Vec::with_capacity(sources.len());
    for s in &mut sources {
        heads.push(s.next().transpose()?);
    }
    let mut out = Vec::new();
    while out.len() < n {
        // The next key in the scan's direction; the first (newest) source
        // holding it wins.
        let mut best: Option<usize> = None;
        for (i, h) in heads.iter().enumerate() {
            let Some((k, _)) = h else { continue };
            best = match best {
                None => Some(i),
                Some(b) => {
                    let bk = &heads[b].as_ref().expect("set").0;
                    let better = if reverse { k > bk } else { k < bk };
                    if better {
                        Some(i)
                    } else {
                        Some(b)
                    }
                }
            };
        }
        let Some(b) = best else { break };
        let (k, v) = heads[b].take().expect("set");
        for (i, h) in heads.iter_mut().enumerate() {
            if i == b || h.as_ref().is_some_and(|(hk, _)| *hk == k) {
                *h = sources[i].next().transpose()?;
            }
        }
        if let Some(v) = v {
            out.push((k, v));
        }
    }
    Ok(out)
}

fn decode_op(seq: u64, bytes: &[u8]) -> Result<Operation> {
    let op = Operation::decode(bytes).map_err(|e| Error::CorruptOperation {
        seq,
        reason: e.to_string(),
    })?;
    if op.seq != seq {
        return Err(IndexError::MisplacedOperation { seq, found: op.seq }.into());
    }
    Ok(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(items: &[(&str, Option<&str>)]) -> Source<'static> {
        let v: Vec<_> = items
            .iter()
            .map(|(k, v)| Ok((k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()))))
            .collect();
        Box::new(v.into_iter())
    }

    #[test]
    fn the_newest_source_of_a_key_wins_and_removals_hide_older_values() {
        let newest = src(&[("a", None), ("c", Some("c2"))]);
        let oldest = src(&[("a", Some("a1")), ("b", Some("b1")), ("c", Some("c1"))]);
        let got = merge_sources(vec![newest, oldest], false, 10).unwrap();
        let got: Vec<(String, String)> = got
            .into_iter()
            .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
            .collect();
        assert_eq!(
            got,
            vec![("b".into(), "b1".into()), ("c".into(), "c2".into())]
        );
        let newest = src(&[("c", Some("c2")), ("a", None)]);
        let oldest = src(&[("c", Some("c1")), ("b", Some("b1")), ("a", Some("a1"))]);
        let got = merge_sources(vec![newest, oldest], true, 1).unwrap();
        assert_eq!(got, vec![(b"c".to_vec(), b"c2".to_vec())]);
    }

    #[test]
    fn prefix_ends_carry_past_ff() {
        assert_eq!(prefix_end(b"a:"), Some(b"a;".to_vec()));
        assert_eq!(prefix_end(&[b'a', 0xFF]), Some(b"b".to_vec()));
        assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
    }
}
