//! The object database: where objects live and how they are verified.
//!
//! [`Odb`] is the typed front (blobs, sessions, histories, prefixes); behind
//! it sits an [`ObjectBackend`]: [`DiskBackend`] (journal + packs, shared
//! by any number of processes) or [`MemoryBackend`] (tests, embedding
//! without a disk). Every read re-hashes what it returns; bytes that do not hash to
//! the id asked for are `Error::Corrupt`, never data.

pub(crate) mod atomic_file;
pub mod journal;
pub mod lock;
pub mod pack;

mod disk;
mod layout;
mod memory;
mod oplog;
#[cfg(feature = "remote")]
pub mod remote;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use pack::PackOptions;

use crate::error::{Error, OdbError, Result};
use crate::hash::{IdMap, IdSet, ObjectId, Prefix};
use crate::object::{blob, Blob, EncodedObject, Object, ObjectKind, Raw, Session};

pub use disk::DiskBackend;
pub(crate) use layout::raise_format;
pub use layout::{
    check_format, init_layout, may_init, FORMAT_PREFIX, INIT_ENTRIES, STORE_FORMAT_EXPIRE,
    STORE_FORMAT_INITIAL, STORE_FORMAT_RAW, STORE_FORMAT_VERSION,
};
pub use memory::MemoryBackend;
#[cfg(feature = "remote")]
pub use remote::{
    RemoteBackend, S3Settings, SCHEMA_VERSION as REMOTE_SCHEMA_VERSION,
    SEAL_BYTES as REMOTE_SEAL_BYTES,
};

/// How many lineage rows one closure fetches at most
/// ([`ObjectBackend::lineage_closure`]): a walk of N sessions costs about N
/// / this many queries (objects-format.md, "Lineage rows").
pub const CLOSURE_ROWS: usize = 4096;

/// How long a write waits for the write lock by default: far longer than
/// any write holds it (a commit holds it for well under a millisecond; gc
/// and repack for the rename and unlink of their files).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// How a write must reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Return once an `fdatasync` covers the write (shared with concurrent writers).
    #[default]
    Sync,
    /// Return once the bytes are written to the OS; a power loss may lose
    /// them. For bulk import and benchmarks.
    NoSync,
}

/// A position a caller can wait on to know its append is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SyncTicket(journal::Pos);

/// An operation as stored: its sequence number and canonical bytes.
pub type RawOp = (u64, Vec<u8>);

/// The store's write lock, held: while it lives, no other handle (thread or
/// process) appends, and this one's view of the journal and packs is
/// current. Hold it for a few syscalls, never across a wait for the disk or
/// a person. Dropping it releases the lock.
#[derive(Debug)]
pub struct WriteLock<'a>(Held<'a>);

/// What a [`WriteLock`] holds, by backend.
#[derive(Debug)]
enum Held<'a> {
    /// Nothing: one process, whose store state lock orders its writers.
    InProcess,
    /// The store's lock file (the disk backend).
    File(lock::LockGuard<'a>),
    /// An open PostgreSQL transaction holding the chain-head row (the
    /// remote backend); dropped uncommitted, it rolls back.
    #[cfg(feature = "remote")]
    Remote(remote::RemoteLock<'a>),
}

impl WriteLock<'_> {
    /// A lock for a backend that shares nothing across processes.
    pub fn in_process<'a>() -> WriteLock<'a> {
        WriteLock(Held::InProcess)
    }

    /// The lock file's guard, when this is the disk backend's lock.
    fn file(&self) -> Option<&lock::LockGuard<'_>> {
        match &self.0 {
            Held::File(g) => Some(g),
            _ => None,
        }
    }
}

/// What a batch read ([`ObjectBackend::read_many`]) hands each object to:
/// its position among the ids asked for, its kind and its canonical
/// payload, verified (borrowed: copy what must outlive the call). An error
/// stops the read and is its result.
pub type Visit<'a> = dyn FnMut(usize, ObjectKind, &[u8]) -> Result<()> + 'a;

/// What [`ObjectBackend::read_many_into`] hands each object to: its
/// position among the ids asked for, its kind, and where its verified
/// payload lies in the caller's buffer.
pub type VisitInto<'a> = dyn FnMut(usize, ObjectKind, std::ops::Range<usize>) -> Result<()> + 'a;

/// Called by a repack that drops objects (gc), under the write lock, just
/// before it deletes the files that held them: the ids among the dropped
/// that writers have come to use since the objects to keep were chosen.
/// They are written back to the journal.
pub type Rescue<'a> = dyn Fn() -> Result<Vec<ObjectId>> + 'a;

/// One object of a [`ObjectBackend::scan`]: its id, and its kind with its
/// payload (when wanted), or why it does not read.
pub use pack::ScanItem;
/// What [`ObjectBackend::scan`] calls with each batch, and the batch's
/// place in storage order (batches may come out of order).
pub type ScanFn<'a> = dyn Fn(usize, &[ScanItem<'_>]) + Sync + 'a;

/// One change to a derived-index key: its new value, or `None` to remove it.
pub type KeyWrite = (Vec<u8>, Option<Vec<u8>>);

/// One session's lineage as a backend that keeps it holds it (the remote
/// one, in PostgreSQL: objects-format.md, "Lineage rows"): derived from the
/// session object when it was stored, and never changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineageRow {
    pub id: ObjectId,
    /// In the session's order: the first is the lineage parent.
    pub parents: Vec<ObjectId>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
}

/// The smallest key greater than every key that starts with `prefix`
/// (`None`: there is none, the prefix is all 0xFF): the end of a prefix
/// range, for the index's scans wherever its keys are kept.
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// What [`KeptIndex::index_head_reading`] read: the head, whether the keys
/// are built, and the keys asked for that are there, with their values.
pub type HeadReading = (
    Option<(u64, crate::refs::Hash)>,
    bool,
    Vec<(Vec<u8>, Vec<u8>)>,
);

/// The derived index's keys as a backend that keeps them itself holds them
/// (the remote one, in PostgreSQL: objects-format.md, "Remote store"):
/// written in the same transaction as the operation that changes them, so
/// that they always describe the head of the operation chain, and read
/// from there by every handle without replaying any operation.
pub trait KeptIndex: Send + Sync {
    /// The operation the keys describe (`None`: none yet) and whether
    /// they describe the head of the chain; keys not built yet (a store
    /// upgraded from an older schema) do not.
    fn index_head(&self) -> Result<(Option<(u64, crate::refs::Hash)>, bool)>;
    /// [`KeptIndex::index_head`] and the values of those of `keys` that
    /// are there, read together: one round trip, and the values are those
    /// of that head (a reader about to read them asks with its catch-up).
    fn index_head_reading(&self, keys: &[Vec<u8>]) -> Result<HeadReading>;
    /// One key's value.
    fn index_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// The values of those of `keys` that are there (one round trip where
    /// each read is one).
    fn index_get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for k in keys {
            if let Some(v) = self.index_get(k)? {
                out.push((k.clone(), v));
            }
        }
        Ok(out)
    }
    /// Told, by a writer holding the write lock, the keys it is about to
    /// read and the objects it is about to ask about (`contains`): a
    /// backend whose every read is a round trip reads them all in one and
    /// answers from that until the lock is let go. A hint only: what was
    /// not read ahead is read when asked for.
    fn read_ahead_locked(&self, _keys: &[Vec<u8>], _ids: &[ObjectId]) -> Result<()> {
        Ok(())
    }
    /// Told, by a writer about to take the write lock, what it will read
    /// ahead under it ([`KeptIndex::read_ahead_locked`]): a backend may
    /// read them in the round trip that takes the lock, and answer from
    /// that as from a read ahead. A hint only, for the next lock this
    /// handle takes.
    fn read_with_lock(&self, _keys: &[Vec<u8>], _ids: &[ObjectId]) {}
    /// Up to `n` keys starting with `prefix` past `cursor` (exclusive),
    /// descending with `reverse`.
    fn index_scan(
        &self,
        prefix: &[u8],
        cursor: Option<&[u8]>,
        reverse: bool,
        n: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
    /// Every key under each of `prefixes` (none of them empty), with its
    /// value, ascending within each prefix: one round trip where each
    /// [`KeptIndex::index_scan`] is one.
    fn index_scan_prefixes(&self, prefixes: &[Vec<u8>]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        for p in prefixes {
            out.extend(self.index_scan(p, None, false, usize::MAX)?);
        }
        Ok(out)
    }
    /// The key changes of the operations the next
    /// [`ObjectBackend::append_locked`] appends, written in its
    /// transaction: all of it or none.
    fn index_stage(&self, writes: Vec<KeyWrite>);
    /// Replaces every key with `keys`, which describe the chain's head as
    /// of `lock` (a reindex, or building the keys of an upgraded store),
    /// and commits.
    fn index_replace(&self, lock: WriteLock<'_>, keys: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()>;
    /// gc's part, after its sweep committed, under the write lock, in one
    /// transaction: deletes each `s:<id>` key unless its session is stored
    /// again (a writer committed the same session after gc dropped it),
    /// and each other `(key, value)` whose value is still `value`. Returns
    /// how many keys went.
    fn index_forget(&self, lock: WriteLock<'_>, doomed: Vec<(Vec<u8>, Vec<u8>)>) -> Result<usize>;
}

/// Where objects and operations are kept. Implementations verify every
/// object they return.
pub trait ObjectBackend: Send + Sync + std::fmt::Debug {
    /// Takes the store's write lock (waiting as the store was opened to)
    /// and catches up with what other handles wrote.
    fn write_lock(&self) -> Result<WriteLock<'_>>;
    /// Appends the objects not stored yet and the operations, as one atomic
    /// batch, without waiting for the disk; returns how many objects were
    /// new and what to wait on. The caller holds `lock`.
    fn append_locked(
        &self,
        lock: &WriteLock<'_>,
        objects: &[EncodedObject],
        ops: &[RawOp],
    ) -> Result<(usize, SyncTicket)>;
    /// Prepares to append `objects` before the write lock is taken (the
    /// remote backend uploads them as one pack here, so that the lock is
    /// held for the database transaction only); a no-op for the others.
    /// Harmless when the write then fails: what it stores is unreferenced.
    fn stage(&self, _objects: &[EncodedObject]) -> Result<()> {
        Ok(())
    }
    /// Ties run `run`'s claim to this handle, where the backend tells
    /// liveness itself: the remote backend takes a PostgreSQL advisory lock
    /// that the server lets go when the handle's connection ends. Called
    /// under the write lock, before the operation that begins the run is
    /// appended. The other backends leave it to the store's lock files.
    fn hold_claim(&self, _run: u64) -> Result<()> {
        Ok(())
    }
    /// Lets go of what [`ObjectBackend::hold_claim`] took, if anything.
    fn release_claim(&self, _run: u64) {}
    /// Whether a live handle, on any machine, holds run `run`'s claim;
    /// `None` where the store's lock files tell instead.
    fn claim_held(&self, _run: u64) -> Result<Option<bool>> {
        Ok(None)
    }
    /// [`ObjectBackend::append_locked`] under a lock of its own.
    fn append(&self, objects: &[EncodedObject], ops: &[RawOp]) -> Result<(usize, SyncTicket)> {
        let lock = self.write_lock()?;
        self.append_locked(&lock, objects, ops)
    }
    /// The derived index's keys, when this backend keeps them itself
    /// (see [`KeptIndex`]); `None`: the index derives them (tables and an
    /// overlay, or memory).
    fn kept_index(&self) -> Option<&dyn KeptIndex> {
        None
    }
    /// Up to `n` lineage rows of session `id` and its ancestors (every
    /// parent), nearest first, each once, in one round trip, when this
    /// backend keeps lineage (see [`LineageRow`]); `None`: it keeps none,
    /// and walks read each session as before. The rows stop at a session
    /// that has none (stored before the backend kept them, until a
    /// reindex), which may be `id` itself: a walk then reads that session
    /// as before. Rows are never stale: a session id fixes its parents.
    fn lineage_closure(&self, _id: &ObjectId, _n: usize) -> Result<Option<Vec<LineageRow>>> {
        Ok(None)
    }
    /// Writes every stored session's lineage row from its object,
    /// correcting a wrong one, and deletes the rows of sessions not stored
    /// (a reindex); returns how many rows it wrote, `None` where lineage is
    /// not kept.
    fn lineage_rebuild(&self) -> Result<Option<usize>> {
        Ok(None)
    }
    /// Catches up with what other handles appended since this one last
    /// looked (O(what is new)); takes no lock.
    fn refresh(&self) -> Result<()> {
        Ok(())
    }
    /// Returns once everything appended up to `ticket` is durable.
    fn sync(&self, ticket: SyncTicket) -> Result<()>;
    /// Returns once everything this handle has seen appended, by anyone,
    /// is durable.
    fn sync_all(&self) -> Result<()> {
        Ok(())
    }
    /// Stores the objects not stored yet, as one atomic batch; returns how
    /// many were new.
    fn write_batch(&self, objects: &[EncodedObject], durability: Durability) -> Result<usize> {
        let (n, ticket) = self.append(objects, &[])?;
        if durability == Durability::Sync {
            self.sync(ticket)?;
        }
        Ok(n)
    }
    /// Every operation with a sequence number above `after`, in order.
    fn ops_after(&self, after: u64) -> Result<Vec<RawOp>>;
    /// Whether operation `seq` is stored: `Some(bytes)` when it is at hand
    /// cheaply (in the journal), `Some(empty)` when it is stored elsewhere
    /// (an op-log file says it holds it), `None` when it is not stored.
    fn op_at(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        Ok(self
            .ops_after(seq.saturating_sub(1))?
            .into_iter()
            .find(|(s, _)| *s == seq)
            .map(|(_, b)| b))
    }
    /// The object, verified; `None` when absent.
    fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>>;
    /// Reads the objects `ids` names, each verified, and hands each to
    /// `visit` with its position in `ids`: every position once, in the
    /// order reading them is cheapest (storage order: a block inflated once
    /// for all the objects it holds), not in the order of `ids`. Stops at
    /// the first error: `NotFound` for an absent object, `Corrupt` naming a
    /// damaged one, or `visit`'s own.
    fn read_many(&self, ids: &[ObjectId], visit: &mut Visit<'_>) -> Result<()> {
        for (i, id) in ids.iter().enumerate() {
            let obj = self.read(id)?.ok_or(Error::NotFound { id: *id })?;
            visit(i, obj.kind(), obj.payload())?;
        }
        Ok(())
    }
    /// [`ObjectBackend::read_many`] for a caller that keeps the payloads:
    /// each verified payload is appended to `out` (which may hold other
    /// bytes as well: the bytes between payloads are unspecified) and
    /// `visit` is given its range there. Saves a copy of every payload
    /// where a backend verifies into the buffer it returns.
    fn read_many_into(
        &self,
        ids: &[ObjectId],
        out: &mut Vec<u8>,
        visit: &mut VisitInto<'_>,
    ) -> Result<()> {
        self.read_many(ids, &mut |i, kind, payload| {
            let start = out.len();
            out.extend_from_slice(payload);
            visit(i, kind, start..out.len())
        })
    }
    /// Told that the objects `ids` are about to be read, one by one (the
    /// sessions a log shows, the messages their summaries read): a backend
    /// that looks up where each object lives in a round trip (the remote
    /// one) looks them all up in one. A hint only: nothing is read, and
    /// what is not there is not remembered as absent.
    fn locate_ahead(&self, _ids: &[ObjectId]) -> Result<()> {
        Ok(())
    }
    fn contains(&self, id: &ObjectId) -> Result<bool>;
    /// Ids that start with `prefix` (deduplicated, sorted).
    fn ids_with_prefix(&self, prefix: &Prefix) -> Result<Vec<ObjectId>>;
    /// Every id, deduplicated, sorted.
    fn ids(&self) -> Result<Vec<ObjectId>>;
    /// Every id once, in the order reading them is cheapest (storage
    /// order: a pack's blocks one after another, then the journal).
    fn ids_in_storage_order(&self) -> Result<Vec<ObjectId>> {
        self.ids()
    }
    /// Compacts storage; a no-op where there is nothing to compact.
    fn repack(&self, opts: &RepackOptions) -> Result<RepackStats> {
        self.repack_filtered(opts, None, None)
    }
    /// Compacts storage, keeping only the objects `keep` accepts (all,
    /// without a filter), and those `rescue` names at the last moment.
    /// Objects written while it runs are kept. Writers are not held off:
    /// only the final replacement of files takes the write lock.
    fn repack_filtered(
        &self,
        opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
        rescue: Option<&Rescue<'_>>,
    ) -> Result<RepackStats>;
    /// gc's sweep: stores the objects but those in `doomed` (and those
    /// `rescue` names back at the last moment), costing in proportion to
    /// what changes, not to the store (see [`DiskBackend`]'s, which copies
    /// whole blocks and leaves large packs without dropped objects alone).
    /// Objects written while it runs are kept; writers are not held off.
    fn sweep(
        &self,
        opts: &RepackOptions,
        doomed: &IdSet,
        rescue: Option<&Rescue<'_>>,
    ) -> Result<RepackStats> {
        let keep = |id: &ObjectId| !doomed.contains(id);
        self.repack_filtered(opts, Some(&keep), rescue)
    }
    /// gc's last step, after [`ObjectBackend::sweep`]: deletes storage that
    /// nothing names any more and that is older than `before_ms` (ms since
    /// the epoch; `i64::MAX`: all of it). The remote backend's orphan and
    /// retired packs in the bucket; nothing elsewhere (the disk backend's
    /// sweep deletes what it replaces). Returns how many it deleted.
    fn prune_storage(&self, before_ms: i64) -> Result<usize> {
        let _ = before_ms;
        Ok(0)
    }
    /// Hands every stored object to `f`, a batch at a time, in storage
    /// order: its id and, read as [`ObjectBackend::read`] reads it, its
    /// kind and (for the kinds `wanted` accepts, verified) its payload, or
    /// the error `read` gives for it. Each object once (the copy `read`
    /// would return). `f` may be called from several threads at once; each
    /// pack block is inflated once. A server's failure
    /// ([`Error::is_server_failure`]) is no object's: the scan stops with it.
    fn scan(&self, wanted: &(dyn Fn(ObjectKind) -> bool + Sync), f: &ScanFn<'_>) -> Result<()> {
        for (n, id) in self.ids_in_storage_order()?.into_iter().enumerate() {
            let item = match self.read(&id) {
                Ok(Some(o)) => {
                    let payload = wanted(o.kind()).then_some(o.payload());
                    f(n, &[(id, Ok((o.kind(), o.payload().len(), payload)))]);
                    continue;
                }
                Ok(None) => Err(Error::NotFound { id }),
                // Every read after it would wait out the same failure.
                Err(e) if e.is_server_failure() => return Err(e),
                Err(e) => Err(e),
            };
            f(n, &[(id, item)]);
        }
        Ok(())
    }
    /// Incremental upkeep after a write: packs journal segments sealed by
    /// rotation into a new pack (merging the packs that are not much bigger,
    /// so that their number stays logarithmic), so that opening the store
    /// scans no more than the newest segment. Cheap when there is nothing to
    /// do; skipped while another repack runs.
    fn maintain(&self) -> Result<Option<RepackStats>> {
        Ok(None)
    }
    /// Whether [`ObjectBackend::maintain`] has segments to pack (a cheap
    /// look, no lock): what a writer that packs on another thread asks
    /// before starting one.
    fn maintenance_due(&self) -> bool {
        false
    }
    /// When each object was stored, as far as the storage can tell (ms since
    /// the epoch): the modification time of the file that holds it, which
    /// is never earlier than the write.
    fn stored_at(&self) -> Result<HashMap<ObjectId, i64>>;
    /// [`ObjectBackend::stored_at`] of `ids` only (those stored).
    fn stored_at_of(&self, ids: &[ObjectId]) -> Result<IdMap<i64>> {
        let all = self.stored_at()?;
        Ok(ids
            .iter()
            .filter_map(|id| Some((*id, *all.get(id)?)))
            .collect())
    }
    /// Ids of the objects not in a pack (the journal's): where everything
    /// written since a packer took `pack.lock` is.
    fn unpacked_ids(&self) -> Result<Vec<ObjectId>> {
        self.ids()
    }
    fn stats(&self) -> Result<OdbStats>;
    /// What opening the backend had to repair or could not read.
    fn take_recovery_notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Checks the storage files themselves (checksums of packs and
    /// indexes); one line per problem.
    fn verify_storage(&self) -> Vec<String> {
        Vec::new()
    }
    /// Damage found when the storage was opened; one line each.
    fn damage(&self) -> Vec<String> {
        Vec::new()
    }
    /// What recovery set aside earlier (torn writes), for a person to look at.
    fn set_aside(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Sizes of a store's storage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OdbStats {
    pub journal_segments: usize,
    pub journal_objects: usize,
    pub journal_bytes: u64,
    pub packs: usize,
    pub pack_objects: usize,
    pub pack_bytes: u64,
}

impl OdbStats {
    pub fn disk_bytes(&self) -> u64 {
        self.journal_bytes + self.pack_bytes
    }
}

/// How to repack. The default writes a cold pack ([`PackOptions::cold`]):
/// a full repack gathers what will mostly stay as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepackOptions {
    pub pack: PackOptions,
}

impl Default for RepackOptions {
    fn default() -> Self {
        RepackOptions {
            pack: PackOptions::cold(),
        }
    }
}

impl RepackOptions {
    /// Fast settings, for packing as writes go ([`PackOptions::hot`]).
    pub fn hot() -> Self {
        RepackOptions {
            pack: PackOptions::hot(),
        }
    }
}

/// What a repack did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepackStats {
    pub objects: usize,
    pub packs_before: usize,
    pub segments_packed: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub pack_name: Option<String>,
    /// Objects that failed verification: left where they were (their pack
    /// or segment is kept), one line each.
    pub corrupt: Vec<String>,
    /// Dropped objects that writers had come to use, written back to the
    /// journal at the last moment (gc's sweep).
    pub rescued: Vec<ObjectId>,
    /// Blocks copied into the new pack as they were (gc's sweep).
    pub copied_blocks: usize,
    /// Blocks inflated and written again (gc's sweep).
    pub rewritten_blocks: usize,
    /// After a full repack that wrote a pack: the sessions in it, which are
    /// then every session the store holds but those written since the
    /// repack began (and any left in place as damaged). `None` otherwise.
    pub sessions: Option<Vec<ObjectId>>,
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Never write, repair or lock anything (an auditor's copy, a
    /// read-only mount). Other handles lock nothing for their lifetime
    /// either; this only promises that this one writes nothing.
    pub read_only: bool,
    /// How long a write waits for another process's short write lock
    /// (`None`: not at all).
    pub wait: Option<Duration>,
    /// Journal segments are sealed past this size.
    pub segment_target: u64,
    /// Whether writes pack sealed segments as they go
    /// ([`ObjectBackend::maintain`]); off only to look at segments as written.
    pub auto_pack: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            wait: Some(DEFAULT_WAIT),
            segment_target: journal::DEFAULT_SEGMENT_TARGET,
            auto_pack: true,
        }
    }
}

/// Objects to write together: one journal frame, one sync.
#[derive(Debug, Default)]
pub struct WriteBatch {
    objects: Vec<EncodedObject>,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a JSON value as a blob; returns its id. Refuses a value nested
    /// deeper than a blob may be.
    pub fn blob(&mut self, value: &Value) -> Result<ObjectId> {
        let payload = blob::encode_value(value)?;
        Ok(self.object(EncodedObject::new(ObjectKind::Blob, payload)))
    }

    /// Adds a session; returns its id.
    pub fn session(&mut self, session: &Session) -> Result<ObjectId> {
        Ok(self.object(session.encode()?))
    }

    /// Adds an encoded object; returns its id.
    pub fn object(&mut self, obj: EncodedObject) -> ObjectId {
        let id = obj.id();
        self.objects.push(obj);
        id
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// The typed object database.
#[derive(Debug, Clone)]
pub struct Odb {
    backend: Arc<dyn ObjectBackend>,
}

impl Odb {
    /// A store in memory only.
    pub fn in_memory() -> Odb {
        Odb::with_backend(Arc::new(MemoryBackend::default()))
    }

    pub fn with_backend(backend: Arc<dyn ObjectBackend>) -> Odb {
        Odb { backend }
    }

    /// Creates a new store at `path` and opens it.
    pub fn init(path: &Path) -> Result<Odb> {
        init_layout(path)?;
        Odb::open(path, &OpenOptions::default())
    }

    /// Opens the store at `path`.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Odb> {
        Ok(Odb::with_backend(Arc::new(DiskBackend::open(path, opts)?)))
    }

    pub fn backend(&self) -> &Arc<dyn ObjectBackend> {
        &self.backend
    }

    /// Writes a batch atomically; returns how many objects were new.
    pub fn write(&self, batch: &WriteBatch, durability: Durability) -> Result<usize> {
        let n = self.backend.write_batch(&batch.objects, durability)?;
        // The batch is stored; packing sealed segments is upkeep that the
        // next write retries should it fail.
        let _ = self.backend.maintain();
        Ok(n)
    }

    /// Stores one JSON value; returns its id.
    pub fn put_blob(&self, value: &Value, durability: Durability) -> Result<ObjectId> {
        let mut b = WriteBatch::new();
        let id = b.blob(value)?;
        self.write(&b, durability)?;
        Ok(id)
    }

    /// The verified object; `NotFound` when absent.
    pub fn read(&self, id: &ObjectId) -> Result<EncodedObject> {
        self.backend.read(id)?.ok_or(Error::NotFound { id: *id })
    }

    pub fn contains(&self, id: &ObjectId) -> Result<bool> {
        self.backend.contains(id)
    }

    /// The decoded object.
    pub fn get(&self, id: &ObjectId) -> Result<Object> {
        self.read(id)?.decode().map_err(|e| Error::decode(*id, e))
    }

    fn read_kind(&self, id: &ObjectId, expected: ObjectKind) -> Result<EncodedObject> {
        let obj = self.read(id)?;
        if obj.kind() != expected {
            return Err(Error::WrongKind {
                id: *id,
                expected,
                actual: obj.kind(),
            });
        }
        Ok(obj)
    }

    /// The JSON value of a blob, or of a raw message (the value its lines
    /// read as: objects-format.md, "raw").
    pub fn blob(&self, id: &ObjectId) -> Result<Value> {
        let obj = self.read(id)?;
        message_value(id, obj.kind(), obj.payload())
    }

    /// A message's value and, when the store keeps it as its source wrote
    /// it (a raw object), its lines; one read either way.
    pub fn message(&self, id: &ObjectId) -> Result<(Value, Option<Raw>)> {
        let obj = self.read(id)?;
        match obj.kind() {
            ObjectKind::Raw => Raw::decode(obj.payload())
                .and_then(|r| Ok((r.value()?, Some(r))))
                .map_err(|e| Error::decode(*id, e)),
            kind => message_value(id, kind, obj.payload()).map(|v| (v, None)),
        }
    }

    /// A message as its source wrote it, when the store keeps it so (a raw
    /// object); `None` for a blob, which keeps the value only.
    pub fn raw(&self, id: &ObjectId) -> Result<Option<Raw>> {
        let obj = self.read(id)?;
        match obj.kind() {
            ObjectKind::Blob => Ok(None),
            ObjectKind::Raw => Raw::decode(obj.payload())
                .map(Some)
                .map_err(|e| Error::decode(*id, e)),
            actual => Err(Error::WrongKind {
                id: *id,
                expected: ObjectKind::Blob,
                actual,
            }),
        }
    }

    pub fn session(&self, id: &ObjectId) -> Result<Session> {
        let obj = self.read_kind(id, ObjectKind::Session)?;
        Session::decode(obj.payload()).map_err(|e| Error::decode(*id, e))
    }

    /// Resolves a full id or a unique prefix of 4 or more hex digits.
    pub fn resolve(&self, text: &str) -> Result<ObjectId> {
        let prefix = Prefix::from_hex(text)?;
        if let Some(id) = prefix.as_full_id() {
            return if self.backend.contains(&id)? {
                Ok(id)
            } else {
                Err(Error::NotFound { id })
            };
        }
        let mut found = self.backend.ids_with_prefix(&prefix)?;
        match found.len() {
            0 => Err(Error::UnknownPrefix { prefix }),
            1 => Ok(found[0]),
            _ => {
                found.truncate(16);
                Err(Error::AmbiguousPrefix {
                    prefix,
                    candidates: found,
                })
            }
        }
    }

    /// The ids of a session's full message history.
    pub fn history(&self, id: &ObjectId) -> Result<Vec<ObjectId>> {
        self.resolve_deltas(id, |s| &s.messages)
    }

    /// The ids at positions `start..end` of a session's message history
    /// (clamped to its length), reading only the sessions that added them:
    /// the walk back from `id` stops once every wanted position is found, so
    /// the newest 50 of a 10,000-session chain cost about 50 reads.
    pub fn history_range(&self, id: &ObjectId, start: u64, end: u64) -> Result<Vec<ObjectId>> {
        let mut s = self.session(id)?;
        let mut at = *id;
        let mut hi = end.min(s.messages.len());
        // Collected newest first, one session's run at a time.
        let mut runs: Vec<Vec<ObjectId>> = Vec::new();
        while start < hi {
            let d = &s.messages;
            let lo = start.max(d.base);
            if lo < hi {
                runs.push(d.added[(lo - d.base) as usize..(hi - d.base) as usize].to_vec());
            }
            hi = hi.min(d.base);
            if start >= hi {
                break;
            }
            let parent = s.first_parent().ok_or_else(|| {
                Error::corrupt(at, "keeps messages of a parent it does not name".to_owned())
            })?;
            let p = self.session(&parent)?;
            if d.base > p.messages.len() {
                return Err(Error::corrupt(
                    at,
                    format!(
                        "keeps {} messages of its parent, which has only {}",
                        d.base,
                        p.messages.len()
                    ),
                ));
            }
            (at, s) = (parent, p);
        }
        Ok(runs.into_iter().rev().flatten().collect())
    }

    /// The ids of a session's full display-message history.
    pub fn display_history(&self, id: &ObjectId) -> Result<Vec<ObjectId>> {
        self.resolve_deltas(id, |s| &s.display_messages)
    }

    /// The messages of a session's full history, in order, as JSON values.
    ///
    /// A caller that needs only bytes (to replay, export or hand them on)
    /// pays less with [`Odb::load_message_bytes`], which skips building
    /// the values.
    pub fn load_messages(&self, id: &ObjectId) -> Result<Vec<Value>> {
        self.blobs(&self.history(id)?)
    }

    /// The blobs `ids` names, in order, each verified, as JSON values.
    ///
    /// Read as [`Odb::blob_bytes`] reads them; each is decoded while its
    /// bytes are at hand.
    pub fn blobs(&self, ids: &[ObjectId]) -> Result<Vec<Value>> {
        let parts = self.in_parts(ids, |part| {
            let mut out = vec![Value::Null; part.len()];
            let mut seen = 0;
            self.backend.read_many(part, &mut |i, kind, payload| {
                out[i] = message_value(&part[i], kind, payload)?;
                seen += 1;
                Ok(())
            })?;
            check_every_position(seen, part)?;
            Ok(out)
        })?;
        Ok(parts.into_iter().flatten().collect())
    }

    /// The messages of a session's full history, in order, as their
    /// canonical bytes, each verified against its id: what
    /// [`Odb::load_messages`] decodes, without decoding it. For callers
    /// that pass messages on (replay, export, checkout, a binding that
    /// parses JSON itself); [`MessageBytes::write_json`] gives a message's
    /// JSON text without building a `serde_json::Value`.
    pub fn load_message_bytes(&self, id: &ObjectId) -> Result<MessageBytes> {
        self.blob_bytes(&self.history(id)?)
    }

    /// The canonical bytes of the blobs `ids` names, in order, each
    /// verified against its id.
    ///
    /// A long run is read by a few threads, each taking a contiguous part
    /// of it: reading is inflating pack blocks and re-hashing, all CPU, and
    /// parts stay in pack order.
    pub fn blob_bytes(&self, ids: &[ObjectId]) -> Result<MessageBytes> {
        let parts = self.in_parts(ids, |part| {
            let mut data = Vec::new();
            let mut spans = vec![(0usize, 0usize); part.len()];
            let mut seen = 0;
            // Not a blob: read first, made canonical (or refused) below.
            let mut others = Vec::new();
            self.backend
                .read_many_into(part, &mut data, &mut |i, kind, at| {
                    spans[i] = (at.start, at.end);
                    if kind != ObjectKind::Blob {
                        others.push((i, kind));
                    }
                    seen += 1;
                    Ok(())
                })?;
            check_every_position(seen, part)?;
            for (i, kind) in others {
                // An imported line kept verbatim: the canonical bytes of
                // the value it reads as.
                let (start, end) = spans[i];
                let value = message_value(&part[i], kind, &data[start..end])?;
                let canonical = blob::encode_value(&value)
                    .map_err(|e| Error::corrupt(part[i], e.to_string()))?;
                let start = data.len();
                data.extend_from_slice(&canonical);
                spans[i] = (start, data.len());
            }
            Ok((data, spans))
        })?;
        let mut bytes = MessageBytes {
            ids: ids.to_vec(),
            chunks: Vec::with_capacity(parts.len()),
            spans: Vec::with_capacity(ids.len()),
        };
        for (chunk, (data, spans)) in parts.into_iter().enumerate() {
            let chunk = u32::try_from(chunk).expect("a few parts, one per thread");
            bytes
                .spans
                .extend(spans.into_iter().map(|(start, end)| (chunk, start, end)));
            bytes.chunks.push(data);
        }
        Ok(bytes)
    }

    /// Runs `work` on contiguous parts of `ids`, on a few threads when
    /// there are enough ids to pay for them; the results, in order.
    fn in_parts<T: Send>(
        &self,
        ids: &[ObjectId],
        work: impl Fn(&[ObjectId]) -> Result<T> + Sync,
    ) -> Result<Vec<T>> {
        const PER_THREAD: usize = 512;
        // Asked only when there is work to share: on Linux the answer reads
        // cgroup files (tens of µs), which a read of a few messages, as an
        // adapter makes after each append, must not pay. Kept once asked.
        static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let threads = if ids.len() < 2 * PER_THREAD {
            1
        } else {
            let cpus =
                *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            cpus.min(ids.len() / PER_THREAD).min(8)
        };
        if threads <= 1 {
            return Ok(vec![work(ids)?]);
        }
        let chunk = ids.len().div_ceil(threads);
        let work = &work;
        std::thread::scope(|scope| {
            // The first part is this thread's own.
            let mut parts = ids.chunks(chunk);
            let first = parts.next().unwrap_or_default();
            let others: Vec<_> = parts.map(|part| scope.spawn(move || work(part))).collect();
            let mut out = Vec::with_capacity(others.len() + 1);
            out.push(work(first)?);
            for p in others {
                out.push(p.join().map_err(|_| OdbError::ReaderPanicked)??);
            }
            Ok(out)
        })
    }

    /// [`Odb::history`] told where the walk will go: `chain` is what the
    /// caller believes the first-parent chain from `id` to be (`id` first;
    /// the lineage index knows it). Its sessions are then read a batch at a
    /// time in storage order (each verified as any read is) instead of one
    /// by one. The sessions stay the truth: where one names another first
    /// parent than `chain` says, or `chain` ends early, the walk goes on
    /// one session at a time; the result is [`Odb::history`]'s.
    pub fn history_along(&self, id: &ObjectId, chain: &[ObjectId]) -> Result<Vec<ObjectId>> {
        let deltas = self.chain_deltas(id, chain, |s| &s.messages)?;
        replay_deltas(&deltas)
    }

    /// Walks first parents back to a session that keeps nothing of its
    /// parent, then replays the deltas forward.
    fn resolve_deltas(
        &self,
        id: &ObjectId,
        delta: impl Fn(&Session) -> &crate::object::MessageDelta,
    ) -> Result<Vec<ObjectId>> {
        replay_deltas(&self.chain_deltas(id, &[], delta)?)
    }

    /// The deltas from `id` back along first parents to a session that
    /// keeps nothing of its parent (or has none), newest first; `hint` as
    /// in [`Odb::history_along`].
    fn chain_deltas(
        &self,
        id: &ObjectId,
        hint: &[ObjectId],
        delta: impl Fn(&Session) -> &crate::object::MessageDelta,
    ) -> Result<Vec<(ObjectId, crate::object::MessageDelta)>> {
        let mut chain = Vec::new();
        self.walk_first_parents(id, hint, &delta, |at, s| {
            chain.push((at, delta(&s).clone()));
        })?;
        Ok(chain)
    }

    /// Hands `visit` the sessions from `id` back along first parents to
    /// one that keeps nothing of its parent by `delta` (or has none),
    /// newest first, each verified: the sessions a history is made of.
    /// `hint` is what the caller believes the chain to be (`id` first), as
    /// in [`Odb::history_along`]; once it is spent (or when there is none),
    /// a backend that keeps lineage rows names the rest, a closure at a time
    /// ([`Odb::lineage_stretch`]). Sessions the chain names are read a batch
    /// at a time; the sessions, not the names, decide where it goes.
    pub fn walk_first_parents(
        &self,
        id: &ObjectId,
        hint: &[ObjectId],
        delta: impl Fn(&Session) -> &crate::object::MessageDelta,
        mut visit: impl FnMut(ObjectId, Session),
    ) -> Result<()> {
        // Sessions read per batch: 1,024 at first (long enough for
        // `in_parts` to read and decode it on two threads), doubling, so
        // that a chain that stops early (a session that keeps nothing of its
        // parent) costs at most 1,024 sessions or its own length more.
        let mut batch = 1024;
        // The next session to read: always the true first parent of the
        // last one read, which `hint[from]` names while the hint agrees.
        let mut at = *id;
        let mut hint = std::borrow::Cow::Borrowed(hint);
        let mut from = 0;
        // Whether the backend's lineage rows may name more of the chain:
        // asked once the walk has left `id` (a session that keeps nothing
        // of its parent needs no walk), and again only where the last
        // stretch was cut short by the closure's size, not by its end.
        let mut ask_lineage = true;
        let mut left_id = false;
        loop {
            if hint.get(from) != Some(&at) && ask_lineage && left_id {
                let (stretch, more) = self.lineage_stretch(&at)?;
                ask_lineage = more;
                if stretch.len() > 1 {
                    hint = std::borrow::Cow::Owned(stretch);
                    from = 0;
                }
            }
            left_id = true;
            if hint.get(from) != Some(&at) {
                // One session, as the hint does not name it.
                let s = self.session(&at)?;
                let stop = delta(&s).base == 0;
                let parent = s.first_parent();
                visit(at, s);
                match (stop, parent) {
                    (true, _) | (_, None) => return Ok(()),
                    (false, Some(p)) => at = p,
                }
                continue;
            }
            let part = &hint[from..hint.len().min(from + batch)];
            batch = (batch * 2).min(1 << 14);
            let read = self.in_parts(part, |p| {
                let mut sessions: Vec<Option<Session>> = vec![None; p.len()];
                self.backend.read_many(p, &mut |i, kind, payload| {
                    if kind != ObjectKind::Session {
                        return Err(Error::WrongKind {
                            id: p[i],
                            expected: ObjectKind::Session,
                            actual: kind,
                        });
                    }
                    let s = Session::decode(payload).map_err(|e| Error::decode(p[i], e))?;
                    sessions[i] = Some(s);
                    Ok(())
                })?;
                Ok(sessions)
            });
            let Ok(parts) = read else {
                // Something the hint names does not read as a session (it
                // may not be on the chain at all): the walk reads the chain
                // itself, one session at a time, and reports what is really
                // wrong, if anything.
                hint = std::borrow::Cow::Borrowed(&[]);
                ask_lineage = false;
                continue;
            };
            let sessions = parts.into_iter().flatten();
            for (i, s) in sessions.enumerate() {
                let s = s.ok_or(Error::NotFound { id: part[i] })?;
                let stop = delta(&s).base == 0;
                let parent = s.first_parent();
                visit(part[i], s);
                match (stop, parent) {
                    (true, _) | (_, None) => return Ok(()),
                    (false, Some(p)) => at = p,
                }
                if hint.get(from + i + 1) != Some(&at) {
                    break;
                }
            }
            from += part.len();
        }
    }

    /// The first-parent chain from `id` (`id` first) as far as the lineage
    /// rows the backend keeps name it, read in one round trip (a closure:
    /// see [`ObjectBackend::lineage_closure`]), and whether they may name
    /// more past its end (the closure was cut at its size). Empty where
    /// the backend keeps no lineage or `id` has no row. Derived data: the
    /// sessions, read next, decide.
    fn lineage_stretch(&self, id: &ObjectId) -> Result<(Vec<ObjectId>, bool)> {
        let limit = CLOSURE_ROWS;
        let Some(rows) = self.backend.lineage_closure(id, limit)? else {
            return Ok((Vec::new(), false));
        };
        let first_parent: IdMap<Option<ObjectId>> = rows
            .iter()
            .map(|r| (r.id, r.parents.first().copied()))
            .collect();
        let mut chain = Vec::new();
        let mut next = Some(*id);
        while let Some(at) = next {
            // Bounded by the rows: a cycle (damage) cannot loop.
            if chain.len() >= rows.len() {
                break;
            }
            let Some(parent) = first_parent.get(&at) else {
                break;
            };
            chain.push(at);
            next = *parent;
        }
        Ok((chain, rows.len() >= limit))
    }

    pub fn repack(&self, opts: &RepackOptions) -> Result<RepackStats> {
        self.backend.repack(opts)
    }

    pub fn stats(&self) -> Result<OdbStats> {
        self.backend.stats()
    }

    /// What opening the store had to repair; each line is one event.
    pub fn take_recovery_notes(&self) -> Vec<String> {
        self.backend.take_recovery_notes()
    }
}

/// Replays deltas (newest first, as [`Odb::chain_deltas`] gives them)
/// forward: the ids of the history they make.
fn replay_deltas(chain: &[(ObjectId, crate::object::MessageDelta)]) -> Result<Vec<ObjectId>> {
    let mut list: Vec<ObjectId> = Vec::new();
    for (sid, d) in chain.iter().rev() {
        if d.base > list.len() as u64 {
            return Err(Error::corrupt(
                *sid,
                format!(
                    "keeps {} messages of its parent, which has only {}",
                    d.base,
                    list.len()
                ),
            ));
        }
        list.truncate(d.base as usize);
        list.extend_from_slice(&d.added);
    }
    Ok(list)
}

/// The JSON value of a message read as `kind` and `payload` (verified
/// against `id`): a blob's value, or the value a raw object's lines read
/// as; any other kind is `WrongKind`.
pub(crate) fn message_value(id: &ObjectId, kind: ObjectKind, payload: &[u8]) -> Result<Value> {
    match kind {
        ObjectKind::Blob => Blob::decode(payload).map(Blob::into_value),
        ObjectKind::Raw => Raw::decode(payload).and_then(Raw::into_value),
        actual => {
            return Err(Error::WrongKind {
                id: *id,
                expected: ObjectKind::Blob,
                actual,
            })
        }
    }
    .map_err(|e| Error::decode(*id, e))
}

/// A backend hands every position of a batch read to its visitor once; a
/// position it skipped would otherwise come back as a message it never read.
fn check_every_position(seen: usize, ids: &[ObjectId]) -> Result<()> {
    if seen == ids.len() {
        return Ok(());
    }
    Err(OdbError::IncompleteRead {
        asked: ids.len(),
        read: seen,
    }
    .into())
}

/// The canonical bytes (deterministic CBOR, objects-format.md, "blob") of
/// a run of messages, in order, each verified against its id when read:
/// what [`Odb::load_message_bytes`] and [`Odb::blob_bytes`] return.
///
/// The bytes are held in a few buffers (one per reader thread), not one
/// allocation per message, where other bytes may lie between messages
/// (those they were verified with). Each [`RawMessage`] turns into its
/// JSON text or a `serde_json::Value` on demand. Two are equal when they
/// hold the same messages, however their buffers are laid out.
#[derive(Clone)]
pub struct MessageBytes {
    ids: Vec<ObjectId>,
    chunks: Vec<Vec<u8>>,
    /// Per message: its buffer and its range there.
    spans: Vec<(u32, usize, usize)>,
}

impl MessageBytes {
    /// How many messages.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Message `i`; `None` past the end.
    pub fn get(&self, i: usize) -> Option<RawMessage<'_>> {
        let &(chunk, start, end) = self.spans.get(i)?;
        Some(RawMessage {
            id: self.ids[i],
            bytes: &self.chunks[chunk as usize][start..end],
        })
    }

    /// The messages, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = RawMessage<'_>> + '_ {
        self.ids
            .iter()
            .zip(&self.spans)
            .map(|(id, &(chunk, start, end))| RawMessage {
                id: *id,
                bytes: &self.chunks[chunk as usize][start..end],
            })
    }

    /// Every message as a line of JSON text (JSON Lines), in order: the
    /// lines `serde_json::to_string` gives for [`Odb::load_messages`].
    pub fn to_jsonl(&self) -> Result<Vec<u8>> {
        let total: usize = self.spans.iter().map(|(_, s, e)| e - s).sum();
        let mut out = Vec::with_capacity(total + total / 4);
        for m in self.iter() {
            m.write_json(&mut out)?;
            out.push(b'\n');
        }
        Ok(out)
    }
}

impl PartialEq for MessageBytes {
    fn eq(&self, other: &Self) -> bool {
        self.ids == other.ids
            && self
                .iter()
                .zip(other.iter())
                .all(|(a, b)| a.bytes() == b.bytes())
    }
}

impl Eq for MessageBytes {}

impl std::fmt::Debug for MessageBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageBytes")
            .field("messages", &self.len())
            .field(
                "bytes",
                &self.spans.iter().map(|(_, s, e)| e - s).sum::<usize>(),
            )
            .finish()
    }
}

/// One message of a [`MessageBytes`]: its id and its canonical bytes,
/// which hashed to that id when they were read (for a raw object, an
/// imported line kept verbatim, the canonical bytes of the value its lines
/// read as, made after its own bytes were verified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawMessage<'a> {
    id: ObjectId,
    bytes: &'a [u8],
}

impl<'a> RawMessage<'a> {
    pub fn id(&self) -> ObjectId {
        self.id
    }

    /// The canonical bytes (deterministic CBOR).
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Appends the message's JSON text to `out`: the text
    /// `serde_json::to_string` gives for [`RawMessage::value`] (compact,
    /// object keys in bytewise order), made straight from the canonical
    /// bytes. Bytes that are not a canonical blob are `Corrupt`, naming
    /// the message, as [`Odb::blob`] says; `out` is then as it was.
    pub fn write_json(&self, out: &mut Vec<u8>) -> Result<()> {
        let mark = out.len();
        crate::object::cbor::write_json_text(self.bytes, out).map_err(|e| {
            out.truncate(mark);
            Error::decode(self.id, e.into())
        })
    }

    /// The message's JSON text (see [`RawMessage::write_json`]).
    pub fn json(&self) -> Result<String> {
        let mut out = Vec::with_capacity(self.bytes.len() + self.bytes.len() / 4);
        self.write_json(&mut out)?;
        Ok(String::from_utf8(out).expect("JSON text from a canonical blob is UTF-8"))
    }

    /// The message, decoded as [`Odb::blob`] decodes it.
    pub fn value(&self) -> Result<Value> {
        Blob::decode(self.bytes)
            .map(Blob::into_value)
            .map_err(|e| Error::decode(self.id, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A stored raw object that does not parse is corruption of that
    /// object, named by its id, wherever it is read as a value.
    #[test]
    fn a_stored_raw_object_that_does_not_parse_is_corrupt() {
        let odb = Odb::in_memory();
        let mut batch = WriteBatch::new();
        let bad = batch.object(EncodedObject::new(
            ObjectKind::Raw,
            br#"{"a":1,"a":2}"#.to_vec(),
        ));
        let good = batch.object(Raw::from_lines(&[r#"{"b": 2}"#]).unwrap().encode());
        odb.write(&batch, Durability::NoSync).unwrap();
        let err = odb.blob(&bad).unwrap_err();
        assert!(
            matches!(err, Error::Corrupt { id, .. } if id == bad),
            "{err}"
        );
        assert!(err.to_string().contains("duplicate object key"), "{err}");
        assert!(odb.message(&bad).is_err() && odb.raw(&bad).is_err());
        assert_eq!(odb.blob(&good).unwrap(), json!({"b": 2}));
        let (v, raw) = odb.message(&good).unwrap();
        assert_eq!(v, json!({"b": 2}));
        assert_eq!(raw.unwrap().payload(), br#"{"b": 2}"#);
    }
}
