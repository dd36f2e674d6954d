//! The object database: where objects live and how they are verified.
//!
//! [`Odb`] is the typed front (blobs, sessions, histories, prefixes); behind
//! it sits an [`ObjectBackend`]: [`DiskBackend`] (journal + packs, one
//! writer process per store) or [`MemoryBackend`] (tests, embedding without
//! a disk). Every read re-hashes what it returns; bytes that do not hash to
//! the id asked for are `Error::Corrupt`, never data.

pub mod journal;
pub mod lock;
pub mod pack;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;

use journal::{FrameBuilder, Journal};
use lock::StoreLock;
use pack::{Pack, PackOptions};

use crate::error::{Error, IoResultExt, Result};
use crate::hash::{ObjectId, Prefix};
use crate::object::{blob, Blob, EncodedObject, Object, ObjectKind, Session};

/// Version of the store layout, written to `FORMAT` (objects-format.md, "Versioning").
pub const STORE_FORMAT_VERSION: u32 = 1;
/// The first line of `FORMAT`, before the version number.
pub const FORMAT_PREFIX: &str = "sessctl store format ";

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

/// Where objects and operations are kept. Implementations verify every
/// object they return.
pub trait ObjectBackend: Send + Sync + std::fmt::Debug {
    /// Appends the objects not stored yet and the operations, as one atomic
    /// batch, without waiting for the disk; returns how many objects were
    /// new and what to wait on.
    fn append(&self, objects: &[EncodedObject], ops: &[RawOp]) -> Result<(usize, SyncTicket)>;
    /// Returns once everything appended up to `ticket` is durable.
    fn sync(&self, ticket: SyncTicket) -> Result<()>;
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
    /// The object, verified; `None` when absent.
    fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>>;
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
        self.repack_filtered(opts, None)
    }
    /// Compacts storage, keeping only the objects `keep` accepts (all,
    /// without a filter). Objects written while it runs are kept.
    fn repack_filtered(
        &self,
        opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
    ) -> Result<RepackStats>;
    /// Incremental upkeep after a write: packs journal segments sealed by
    /// rotation into a new pack (merging the packs that are not much bigger,
    /// so that their number stays logarithmic), so that opening the store
    /// scans no more than the newest segment. Cheap when there is nothing to
    /// do; skipped while another repack runs.
    fn maintain(&self) -> Result<Option<RepackStats>> {
        Ok(None)
    }
    /// When each object was stored, as far as the storage can tell (ms since
    /// the epoch): the modification time of the file that holds it, which
    /// is never earlier than the write.
    fn stored_at(&self) -> Result<HashMap<ObjectId, i64>>;
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

/// How to repack.
#[derive(Debug, Clone, Copy, Default)]
pub struct RepackOptions {
    pub pack: PackOptions,
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
    /// After a full repack that wrote a pack: the sessions in it, which are
    /// then every session the store holds but those written since the
    /// repack began (and any left in place as damaged). `None` otherwise.
    pub sessions: Option<Vec<ObjectId>>,
}

/// How to open a store.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Read without taking the writer lock; never repairs, never writes.
    pub read_only: bool,
    /// How long to wait for another process to release the store.
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
            wait: None,
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

    /// The JSON value of a blob.
    pub fn blob(&self, id: &ObjectId) -> Result<Value> {
        let obj = self.read_kind(id, ObjectKind::Blob)?;
        Blob::decode(obj.payload())
            .map(Blob::into_value)
            .map_err(|e| Error::decode(*id, e))
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

    /// The ids of a session's full display-message history.
    pub fn display_history(&self, id: &ObjectId) -> Result<Vec<ObjectId>> {
        self.resolve_deltas(id, |s| &s.display_messages)
    }

    /// The messages of a session's full history, in order.
    ///
    /// A long history is read by a few threads, each taking a contiguous
    /// run of it: reading a message is re-hashing and decoding it (and
    /// inflating its pack block), all CPU, and runs stay in pack order.
    pub fn load_messages(&self, id: &ObjectId) -> Result<Vec<Value>> {
        self.blobs(&self.history(id)?)
    }

    /// The blobs `ids` name, in order, each verified.
    pub fn blobs(&self, ids: &[ObjectId]) -> Result<Vec<Value>> {
        const PER_THREAD: usize = 512;
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(ids.len() / PER_THREAD)
            .min(8);
        if threads <= 1 {
            return ids.iter().map(|m| self.blob(m)).collect();
        }
        let chunk = ids.len().div_ceil(threads);
        std::thread::scope(|scope| {
            let parts: Vec<_> = ids
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        part.iter()
                            .map(|m| self.blob(m))
                            .collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(ids.len());
            for p in parts {
                out.extend(
                    p.join().map_err(|_| {
                        Error::Invalid("a thread reading messages panicked".into())
                    })??,
                );
            }
            Ok(out)
        })
    }

    /// Walks first parents back to a session that keeps nothing of its
    /// parent, then replays the deltas forward.
    fn resolve_deltas(
        &self,
        id: &ObjectId,
        delta: impl Fn(&Session) -> &crate::object::MessageDelta,
    ) -> Result<Vec<ObjectId>> {
        let mut chain: Vec<(ObjectId, crate::object::MessageDelta)> = Vec::new();
        let mut at = *id;
        loop {
            let s = self.session(&at)?;
            let d = delta(&s).clone();
            let stop = d.base == 0;
            let parent = s.first_parent();
            chain.push((at, d));
            match (stop, parent) {
                (true, _) | (_, None) => break,
                (false, Some(p)) => at = p,
            }
        }
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

/// Creates an empty store layout at `path`: `journal/`, `packs/` and, last,
/// `FORMAT`, whose presence is what makes the directory a store.
pub fn init_layout(path: &Path) -> Result<()> {
    let format = path.join("FORMAT");
    if format.exists() {
        return Err(Error::AlreadyExists {
            path: path.to_path_buf(),
        });
    }
    fs::create_dir_all(path.join("journal")).at(path)?;
    fs::create_dir_all(path.join("packs")).at(path)?;
    let tmp = path.join("FORMAT.tmp");
    fs::write(&tmp, format!("{FORMAT_PREFIX}{STORE_FORMAT_VERSION}\n")).at(&tmp)?;
    fs::File::open(&tmp).and_then(|f| f.sync_all()).at(&tmp)?;
    fs::rename(&tmp, &format).at(&format)?;
    journal::sync_dir(path)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        journal::sync_dir(parent)?;
    }
    Ok(())
}

fn check_format(path: &Path) -> Result<()> {
    let format = path.join("FORMAT");
    let text = match fs::read_to_string(&format) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotAStore {
                path: path.to_path_buf(),
                exists: path.exists(),
            })
        }
        Err(e) => return Err(Error::io(&format, e)),
    };
    let found = text
        .trim()
        .strip_prefix(FORMAT_PREFIX)
        .unwrap_or(text.trim());
    if found != STORE_FORMAT_VERSION.to_string() {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: found.to_owned(),
            supported: STORE_FORMAT_VERSION,
        });
    }
    Ok(())
}

/// Journal and packs on disk.
#[derive(Debug)]
pub struct DiskBackend {
    root: PathBuf,
    journal: Journal,
    packs: RwLock<Vec<Arc<Pack>>>,
    repacking: Mutex<()>,
    auto_pack: bool,
    notes: Mutex<Vec<String>>,
    /// What the journal scan found damaged, kept for fsck.
    damage: Vec<String>,
    _lock: Option<StoreLock>,
}

impl DiskBackend {
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<DiskBackend> {
        check_format(path)?;
        let lock = if opts.read_only {
            None
        } else {
            Some(StoreLock::acquire(&path.join("LOCK"), opts.wait)?)
        };
        let packs_dir = path.join("packs");
        if !opts.read_only {
            // Leftovers of a repack that died before its rename.
            for entry in fs::read_dir(&packs_dir).at(&packs_dir)? {
                let entry = entry.at(&packs_dir)?;
                if entry.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
        let journal = Journal::open(&path.join("journal"), opts.read_only, opts.segment_target)?;
        let mut packs = Vec::new();
        for name in pack::list_packs(&packs_dir)? {
            packs.push(Arc::new(Pack::open(&packs_dir, &name)?));
        }
        let notes = journal.take_notes();
        if !notes.is_empty() && !opts.read_only {
            append_recovery_log(path, &notes);
        }
        Ok(DiskBackend {
            root: path.to_path_buf(),
            journal,
            packs: RwLock::new(packs),
            repacking: Mutex::new(()),
            auto_pack: opts.auto_pack,
            damage: notes
                .iter()
                .filter(|n| !n.contains("torn write"))
                .cloned()
                .collect(),
            notes: Mutex::new(notes),
            _lock: lock,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn packs(&self) -> Vec<Arc<Pack>> {
        self.packs.read().expect("pack list lock").clone()
    }

    /// Packs the objects of `old` packs and `sealed` segments (those `keep`
    /// accepts) into one new pack, moves the segments' operations to the
    /// op log, and deletes what the new pack replaces. The caller holds the
    /// repack lock.
    fn repack_these(
        &self,
        opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
        before: OdbStats,
        sealed: Vec<u64>,
        old: Vec<Arc<Pack>>,
    ) -> Result<RepackStats> {
        let mut objects = Vec::new();
        let kept = |id: &ObjectId| keep.is_none_or(|k| k(id));
        // A damaged object is not carried into the new pack, and the file
        // holding it is not deleted: its bytes may still be salvaged.
        let mut corrupt = Vec::new();
        let mut keep_packs: HashSet<String> = HashSet::new();
        for p in &old {
            for id in p.ids_in_pack_order()? {
                if kept(&id) {
                    match p.read(&id) {
                        Ok(Some(o)) => objects.push(o),
                        Ok(None) => return Err(Error::NotFound { id }),
                        Err(e) if e.is_corruption() => {
                            corrupt.push(e.to_string());
                            keep_packs.insert(p.name().to_owned());
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        for id in self.journal.ids_in(&sealed) {
            if kept(&id) {
                match self.journal.read(&id) {
                    Ok(Some(o)) => objects.push(o),
                    Ok(None) => return Err(Error::NotFound { id }),
                    // Its segment holds damage, and damaged segments stay.
                    Err(e) if e.is_corruption() => corrupt.push(e.to_string()),
                    Err(e) => return Err(e),
                }
            }
        }
        let ordered = Self::pack_order(objects);
        let sessions: Vec<ObjectId> = ordered
            .iter()
            .filter(|o| o.kind() == ObjectKind::Session)
            .map(EncodedObject::id)
            .collect();
        let packs_dir = self.root.join("packs");
        let written = if ordered.is_empty() {
            None
        } else {
            Some(pack::write_pack(&packs_dir, &ordered, opts.pack)?)
        };
        {
            let new_pack = match &written {
                Some(w) => Some(Arc::new(Pack::open(&packs_dir, &w.name)?)),
                None => None,
            };
            let mut packs = self.packs.write().expect("pack list lock");
            packs.retain(|p| {
                keep_packs.contains(p.name()) || !old.iter().any(|o| Arc::ptr_eq(o, p))
            });
            packs.extend(new_pack);
        }
        // Operations are history: they move to the op-log archive before
        // their segments go.
        let ops = self.journal.ops_in(&sealed)?;
        if !ops.is_empty() {
            write_oplog_file(&self.root.join("oplog"), &ops)?;
        }
        self.journal.retire(&sealed)?;
        for p in &old {
            if written.as_ref().is_some_and(|w| w.name == p.name()) || keep_packs.contains(p.name())
            {
                continue;
            }
            // Index first: without it the pack is no longer listed.
            let [pack_path, index_path] = p.paths();
            fs::remove_file(index_path).at(index_path)?;
            fs::remove_file(pack_path).at(pack_path)?;
        }
        journal::sync_dir(&packs_dir)?;
        let after = self.stats()?;
        Ok(RepackStats {
            objects: written.as_ref().map_or(0, |w| w.objects),
            packs_before: old.len(),
            segments_packed: sealed.len(),
            bytes_before: before.disk_bytes(),
            bytes_after: after.disk_bytes(),
            pack_name: written.map(|w| w.name),
            corrupt,
            sessions: Some(sessions),
        })
    }

    /// Objects in the order a new pack should hold them: each conversation's
    /// sessions together, then the blobs they reference in first-use order,
    /// then whatever no session references.
    fn pack_order(objects: Vec<EncodedObject>) -> Vec<EncodedObject> {
        let mut by_id: HashMap<ObjectId, EncodedObject> = HashMap::with_capacity(objects.len());
        let mut input: Vec<ObjectId> = Vec::with_capacity(objects.len());
        for o in objects {
            let id = o.id();
            if by_id.insert(id, o).is_none() {
                input.push(id);
            }
        }
        let mut groups: Vec<(Vec<ObjectId>, Vec<ObjectId>)> = Vec::new();
        let mut group_of: HashMap<ObjectId, usize> = HashMap::new();
        let mut placed: HashSet<ObjectId> = HashSet::new();
        for id in &input {
            let obj = &by_id[id];
            if obj.kind() != ObjectKind::Session {
                continue;
            }
            // An undecodable session is still packed, byte for byte, at the end.
            let Ok(s) = Session::decode(obj.payload()) else {
                continue;
            };
            let conv = s.conversation_id(*id);
            let g = *group_of.entry(conv).or_insert_with(|| {
                groups.push((Vec::new(), Vec::new()));
                groups.len() - 1
            });
            groups[g].0.push(*id);
            placed.insert(*id);
            let refs = s
                .messages
                .added
                .iter()
                .chain(&s.display_messages.added)
                .chain(s.context_state.iter())
                .chain(s.environment_state.iter())
                .chain(s.compaction.as_ref().map(|c| &c.summary));
            for r in refs {
                if by_id.contains_key(r) && placed.insert(*r) {
                    groups[g].1.push(*r);
                }
            }
        }
        let mut out = Vec::with_capacity(input.len());
        for (sessions, blobs) in groups {
            for id in sessions.into_iter().chain(blobs) {
                if let Some(o) = by_id.remove(&id) {
                    out.push(o);
                }
            }
        }
        for id in input {
            if let Some(o) = by_id.remove(&id) {
                out.push(o);
            }
        }
        out
    }
}

/// Which packs an incremental pack of `new_objects` objects merges: the
/// smallest ones, as long as each is no bigger than twice what is merged
/// so far, so that pack sizes grow geometrically and their number stays
/// about log2 of the store's objects.
fn geometric_merge(new_objects: usize, mut packs: Vec<Arc<Pack>>) -> Vec<Arc<Pack>> {
    packs.sort_by_key(|p| p.object_count());
    let mut merged = new_objects.max(1);
    let mut out = Vec::new();
    for p in packs {
        if p.object_count() > 2 * merged {
            break;
        }
        merged += p.object_count();
        out.push(p);
    }
    out
}

/// `oplog/<first>-<last>.ops` files, sorted: (first, last, path).
fn oplog_files(dir: &Path) -> Result<Vec<(u64, u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".ops")) else {
            continue;
        };
        let Some((a, b)) = stem.split_once('-') else {
            continue;
        };
        if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
            out.push((a, b, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Writes archived operations as one sealed, synced file in the journal's
/// frame format (objects-format.md, "Operation log").
fn write_oplog_file(dir: &Path, ops: &[RawOp]) -> Result<()> {
    fs::create_dir_all(dir).at(dir)?;
    let (first, last) = (ops[0].0, ops[ops.len() - 1].0);
    let path = dir.join(format!("{first:016}-{last:016}.ops"));
    let tmp = dir.join(format!(".tmp-{first:016}-{last:016}.ops"));
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&journal::OPLOG_MAGIC);
    bytes.extend_from_slice(&journal::JOURNAL_FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&first.to_le_bytes());
    for chunk in ops.chunks(4096) {
        let mut frame = FrameBuilder::new();
        for (seq, op) in chunk {
            frame.push_op(*seq, op);
        }
        bytes.extend_from_slice(&frame.finish());
    }
    fs::write(&tmp, &bytes).at(&tmp)?;
    fs::File::open(&tmp).and_then(|f| f.sync_all()).at(&tmp)?;
    fs::rename(&tmp, &path).at(&path)?;
    journal::sync_dir(dir)?;
    if let Some(parent) = dir.parent() {
        journal::sync_dir(parent)?;
    }
    Ok(())
}

fn read_oplog_file(path: &Path) -> Result<Vec<RawOp>> {
    let buf = fs::read(path).at(path)?;
    let bad = |offset: usize, reason: String| Error::CorruptFile {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    if buf.len() < 16 || buf[..4] != journal::OPLOG_MAGIC {
        return Err(bad(0, "not an operation log file".into()));
    }
    let mut pos = 16;
    let mut out = Vec::new();
    while pos < buf.len() {
        let frame = journal::parse_frame(&buf[pos..]).map_err(|e| bad(pos, e.to_string()))?;
        for entry in journal::entries(frame.body) {
            let entry = entry.map_err(|r| bad(pos, r))?;
            if entry.entry_type == journal::ENTRY_OP {
                let (seq, op) = journal::parse_op_entry(entry.payload).map_err(|r| bad(pos, r))?;
                out.push((seq, op.to_vec()));
            }
        }
        pos += frame.total_len();
    }
    Ok(out)
}

fn append_recovery_log(root: &Path, notes: &[String]) {
    use std::io::Write;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if let Ok(mut f) = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join("recovery.log"))
    {
        for n in notes {
            let _ = writeln!(f, "{now} {n}");
        }
        let _ = f.sync_all();
    }
}

impl ObjectBackend for DiskBackend {
    fn append(&self, objects: &[EncodedObject], ops: &[RawOp]) -> Result<(usize, SyncTicket)> {
        let mut frame = FrameBuilder::new();
        let mut seen = HashSet::with_capacity(objects.len());
        for obj in objects {
            if obj.payload().len() > journal::MAX_OBJECT_SIZE {
                return Err(Error::Invalid(format!(
                    "object {} is {} bytes; the limit is {} bytes",
                    obj.id(),
                    obj.payload().len(),
                    journal::MAX_OBJECT_SIZE
                )));
            }
            if seen.insert(obj.id()) && !self.contains(&obj.id())? {
                frame.push_object(obj);
            }
        }
        for (seq, op) in ops {
            frame.push_op(*seq, op);
        }
        let n = frame.objects_len();
        let end = self.journal.append_nowait(&frame)?;
        Ok((n, SyncTicket(end)))
    }

    fn sync(&self, ticket: SyncTicket) -> Result<()> {
        self.journal.sync_to(ticket.0)
    }

    fn ops_after(&self, after: u64) -> Result<Vec<RawOp>> {
        let mut out = Vec::new();
        let journal_first = self.journal.op_range().map(|r| r.0);
        // Archived operations are read only when the journal does not reach
        // back far enough: a normal open reads none of them.
        if journal_first.is_none_or(|first| first > after + 1) {
            for (_, last, path) in oplog_files(&self.root.join("oplog"))? {
                if last > after {
                    out.extend(
                        read_oplog_file(&path)?
                            .into_iter()
                            .filter(|(s, _)| *s > after),
                    );
                }
            }
        }
        let max = out.last().map(|o| o.0).unwrap_or(after);
        out.extend(
            self.journal
                .ops_after(after)?
                .into_iter()
                .filter(|(s, _)| *s > max),
        );
        Ok(out)
    }

    fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        if let Some(o) = self.journal.read(id)? {
            return Ok(Some(o));
        }
        for p in self.packs() {
            if let Some(o) = p.read(id)? {
                return Ok(Some(o));
            }
        }
        Ok(None)
    }

    fn contains(&self, id: &ObjectId) -> Result<bool> {
        if self.journal.contains(id) {
            return Ok(true);
        }
        for p in self.packs() {
            if p.contains(id)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn ids_with_prefix(&self, prefix: &Prefix) -> Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        self.journal.ids_with_prefix(prefix, &mut out);
        for p in self.packs() {
            p.ids_with_prefix(prefix, &mut out)?;
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    fn ids(&self) -> Result<Vec<ObjectId>> {
        let mut out = self.journal.ids();
        for p in self.packs() {
            out.extend(p.ids()?);
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    fn ids_in_storage_order(&self) -> Result<Vec<ObjectId>> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for p in self.packs() {
            out.extend(
                p.ids_in_pack_order()?
                    .into_iter()
                    .filter(|id| seen.insert(*id)),
            );
        }
        let mut journal: Vec<(ObjectId, u64)> = self.journal.ids_with_segments();
        journal.sort_unstable_by_key(|e| e.1);
        out.extend(
            journal
                .into_iter()
                .map(|e| e.0)
                .filter(|id| seen.insert(*id)),
        );
        Ok(out)
    }

    fn repack_filtered(
        &self,
        opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
    ) -> Result<RepackStats> {
        let _one_at_a_time = self.repacking.lock().expect("repack lock");
        let before = self.stats()?;
        let sealed = self.journal.seal()?;
        let old = self.packs();
        if keep.is_none() && old.len() <= 1 && sealed.is_empty() {
            return Ok(RepackStats {
                objects: before.pack_objects,
                packs_before: old.len(),
                segments_packed: 0,
                bytes_before: before.disk_bytes(),
                bytes_after: before.disk_bytes(),
                pack_name: old.first().map(|p| p.name().to_owned()),
                corrupt: Vec::new(),
                sessions: None,
            });
        }
        self.repack_these(opts, keep, before, sealed, old)
    }

    fn maintain(&self) -> Result<Option<RepackStats>> {
        if !self.auto_pack || self.journal.sealed_segments().is_empty() {
            return Ok(None);
        }
        // Someone else is repacking: they take these segments too, or the
        // next write after them does.
        let Ok(_one_at_a_time) = self.repacking.try_lock() else {
            return Ok(None);
        };
        let sealed = self.journal.sealed_segments();
        if sealed.is_empty() {
            return Ok(None);
        }
        let before = self.stats()?;
        let merge = geometric_merge(self.journal.ids_in(&sealed).len(), self.packs());
        let mut stats =
            self.repack_these(&RepackOptions::default(), None, before, sealed, merge)?;
        // Only part of the store: not every session.
        stats.sessions = None;
        Ok(Some(stats))
    }

    fn stored_at(&self) -> Result<HashMap<ObjectId, i64>> {
        let mtime = |path: &Path| -> i64 {
            fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(i64::MAX, |d| d.as_millis() as i64)
        };
        let mut out = HashMap::new();
        for p in self.packs() {
            let t = mtime(p.paths()[0]);
            for id in p.ids()? {
                out.insert(id, t);
            }
        }
        for (id, seq) in self.journal.ids_with_segments() {
            let t = mtime(&self.root.join("journal").join(journal::segment_name(seq)));
            // An object in both: the later time is the safe one.
            let e = out.entry(id).or_insert(t);
            *e = (*e).max(t);
        }
        Ok(out)
    }

    fn stats(&self) -> Result<OdbStats> {
        let packs = self.packs();
        let journal_dir = self.root.join("journal");
        let segments = fs::read_dir(&journal_dir)
            .at(&journal_dir)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".journal"))
            .count();
        Ok(OdbStats {
            journal_segments: segments,
            journal_objects: self.journal.object_count(),
            journal_bytes: self.journal.disk_bytes(),
            packs: packs.len(),
            pack_objects: packs.iter().map(|p| p.object_count()).sum(),
            pack_bytes: packs.iter().map(|p| p.disk_bytes()).sum(),
        })
    }

    fn take_recovery_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().expect("notes lock"))
    }

    fn verify_storage(&self) -> Vec<String> {
        self.packs().iter().flat_map(|p| p.verify()).collect()
    }

    fn damage(&self) -> Vec<String> {
        self.damage.clone()
    }

    fn set_aside(&self) -> Vec<String> {
        let dir = self.root.join("journal");
        let mut out: Vec<String> = fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("torn-"))
            .map(|e| {
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                format!(
                    "{} holds {len} bytes cut from a torn write; delete it once inspected",
                    e.path().display()
                )
            })
            .collect();
        out.sort();
        out
    }
}

/// Objects in a map: for tests and for embedding without a disk. Reads
/// verify like the disk backend's, so the two behave alike.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    objects: RwLock<HashMap<ObjectId, EncodedObject>>,
    ops: RwLock<Vec<RawOp>>,
}

impl ObjectBackend for MemoryBackend {
    fn append(&self, objects: &[EncodedObject], ops: &[RawOp]) -> Result<(usize, SyncTicket)> {
        let n = self.write_batch(objects, Durability::NoSync)?;
        let mut log = self.ops.write().expect("memory backend lock");
        log.extend(ops.iter().cloned());
        Ok((n, SyncTicket((0, log.len() as u64))))
    }

    fn sync(&self, _ticket: SyncTicket) -> Result<()> {
        Ok(())
    }

    fn ops_after(&self, after: u64) -> Result<Vec<RawOp>> {
        Ok(self
            .ops
            .read()
            .expect("memory backend lock")
            .iter()
            .filter(|(s, _)| *s > after)
            .cloned()
            .collect())
    }

    fn write_batch(&self, objects: &[EncodedObject], _durability: Durability) -> Result<usize> {
        let mut map = self.objects.write().expect("memory backend lock");
        let mut n = 0;
        for o in objects {
            if let std::collections::hash_map::Entry::Vacant(slot) = map.entry(o.id()) {
                slot.insert(o.clone());
                n += 1;
            }
        }
        Ok(n)
    }

    fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        let Some(obj) = self
            .objects
            .read()
            .expect("memory backend lock")
            .get(id)
            .cloned()
        else {
            return Ok(None);
        };
        EncodedObject::verified(*id, obj.kind(), obj.into_payload())
            .map(Some)
            .map_err(|r| Error::corrupt(*id, r))
    }

    fn contains(&self, id: &ObjectId) -> Result<bool> {
        Ok(self
            .objects
            .read()
            .expect("memory backend lock")
            .contains_key(id))
    }

    fn ids_with_prefix(&self, prefix: &Prefix) -> Result<Vec<ObjectId>> {
        let mut v: Vec<ObjectId> = self
            .objects
            .read()
            .expect("memory backend lock")
            .keys()
            .filter(|id| prefix.matches(id))
            .copied()
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    fn ids(&self) -> Result<Vec<ObjectId>> {
        let mut v: Vec<ObjectId> = self
            .objects
            .read()
            .expect("memory backend lock")
            .keys()
            .copied()
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    fn repack_filtered(
        &self,
        _opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
    ) -> Result<RepackStats> {
        let mut map = self.objects.write().expect("memory backend lock");
        if let Some(keep) = keep {
            map.retain(|id, _| keep(id));
        }
        Ok(RepackStats {
            objects: map.len(),
            ..RepackStats::default()
        })
    }

    fn stored_at(&self) -> Result<HashMap<ObjectId, i64>> {
        let now = crate::time::now_ms();
        Ok(self
            .objects
            .read()
            .expect("memory backend lock")
            .keys()
            .map(|id| (*id, now))
            .collect())
    }

    fn stats(&self) -> Result<OdbStats> {
        let map = self.objects.read().expect("memory backend lock");
        Ok(OdbStats {
            journal_objects: map.len(),
            journal_bytes: map.values().map(|o| o.payload().len() as u64).sum(),
            ..OdbStats::default()
        })
    }
}
