//! Bundles: the objects reachable from some sessions, minus what the receiver
//! is known to have, with the refs and conversation records that name them,
//! in one checksummed file (objects-format.md, "Bundles").
//!
//! A [`Bundle`] is also the in-memory unit of every transfer: `push`, `pull`
//! and `clone` build one and apply it exactly as `unbundle` does (see
//! `remote.rs`). This module reads and writes bundles and checks them; it
//! never moves a ref. Reading trusts no byte: the checksum, every object's
//! hash, decoding and the closure are checked before anything is applied.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::Path;

use crate::atomic_file::AtomicFile;
use crate::error::{Error, IoResultExt, Result};
use crate::gc::session_blobs;
use crate::hash::{ObjectId, ID_LEN};
use crate::object::{Blob, EncodedObject, ObjectKind, Session};
use crate::odb::journal::decompress;
use crate::odb::{Durability, Odb};
use crate::refs::op::{record_bytes, record_from_bytes};
use crate::refs::{ConversationRecord, ConversationStatus, RefName, RefTarget};
use crate::store::Store;

/// The first four bytes of a bundle (objects-format.md, "Bundles").
pub const BUNDLE_MAGIC: &[u8; 4] = b"SBDL";
/// The bundle format's version (objects-format.md, "Bundles").
pub const BUNDLE_FORMAT_VERSION: u32 = 1;
/// A block is closed once it holds this many uncompressed bytes.
const BLOCK_TARGET: usize = 64 * 1024;
/// zstd level of bundle blocks, as for packs.
const ZSTD_LEVEL: i32 = 3;
/// Block codecs.
const CODEC_RAW: u8 = 0;
const CODEC_ZSTD: u8 = 1;
/// An object record inside a block: kind, id, length.
const RECORD_HEADER: usize = 1 + ID_LEN + 4;
const CHECKSUM_LEN: usize = 32;

/// Objects, refs and conversation records to hand to another store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bundle {
    /// Full ref names (never `HEAD`) and the sessions they point at, by name.
    pub refs: Vec<(RefName, ObjectId)>,
    /// Records of the conversations the refs name, by name.
    pub conversations: Vec<(String, ConversationRecord)>,
    /// Objects the bundle's sessions name but leave out: the receiver must
    /// hold them already. Sorted.
    pub prerequisites: Vec<ObjectId>,
    /// The objects, sorted by id.
    pub objects: Vec<EncodedObject>,
}

/// How serious a problem found in a bundle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// The bundle itself is damaged or not closed.
    Corrupt,
    /// The receiving store lacks a prerequisite.
    MissingPrerequisite,
}

/// One thing wrong with a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub kind: ProblemKind,
    /// The object concerned.
    pub id: ObjectId,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Problem {
    /// The problem as the store's error: corruption stays corruption.
    pub fn into_error(self) -> Error {
        match self.kind {
            ProblemKind::Corrupt => Error::Corrupt {
                id: self.id,
                reason: self.message,
            },
            ProblemKind::MissingPrerequisite => Error::Invalid(self.message),
        }
    }
}

/// The objects reachable from `tips` (parents, compaction sources and the
/// blobs sessions name) that `have` says the receiver lacks, and the ids
/// where the walk stopped because the receiver has them (the
/// prerequisites). A session the receiver has is not entered: its closure
/// is the receiver's already.
pub fn collect(
    source: &Odb,
    tips: &[ObjectId],
    have: &mut dyn FnMut(&ObjectId) -> Result<bool>,
) -> Result<(Vec<EncodedObject>, Vec<ObjectId>)> {
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut objects = Vec::new();
    let mut prerequisites = BTreeSet::new();
    let mut stack: Vec<ObjectId> = tips.to_vec();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        if have(&id)? {
            prerequisites.insert(id);
            continue;
        }
        let obj = read_kind(source, &id, ObjectKind::Session)?;
        let session = Session::decode(obj.payload()).map_err(|e| Error::decode(id, e))?;
        for blob in session_blobs(&session) {
            if !seen.insert(blob) {
                continue;
            }
            if have(&blob)? {
                prerequisites.insert(blob);
            } else {
                objects.push(read_kind(source, &blob, ObjectKind::Blob)?);
            }
        }
        stack.extend(session_edges(&session));
        objects.push(obj);
    }
    Ok((objects, prerequisites.into_iter().collect()))
}

fn read_kind(odb: &Odb, id: &ObjectId, kind: ObjectKind) -> Result<EncodedObject> {
    let obj = odb.read(id)?;
    if obj.kind() != kind {
        return Err(Error::WrongKind {
            id: *id,
            expected: kind,
            actual: obj.kind(),
        });
    }
    Ok(obj)
}

/// The sessions a session names: its parents and its compaction's source.
fn session_edges(s: &Session) -> impl Iterator<Item = ObjectId> + '_ {
    s.parents
        .iter()
        .chain(s.compaction.as_ref().map(|c| &c.session))
        .copied()
}

/// Which refs a bundle or a transfer carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every ref but `HEAD`, and every conversation record.
    All,
    /// Revisions: a conversation name brings its ref and record; anything
    /// else `resolve_rev` takes brings its session only.
    Revs(Vec<String>),
}

/// What a [`Selection`] names in a store.
#[derive(Debug, Clone, Default)]
pub struct Selected {
    pub refs: Vec<(RefName, ObjectId)>,
    pub records: Vec<(String, ConversationRecord)>,
    /// Where the walk for objects starts.
    pub tips: Vec<ObjectId>,
}

/// The refs, records and tip sessions `selection` names in `store`.
pub fn select(store: &Store, selection: &Selection) -> Result<Selected> {
    let mut refs = Vec::new();
    let mut records = Vec::new();
    let mut tips = Vec::new();
    match selection {
        Selection::All => {
            for (name, target) in store.refs()? {
                if let (false, RefTarget::Session(id)) = (name == RefName::Head, target) {
                    refs.push((name, id));
                    tips.push(id);
                }
            }
            for c in store.conversations(None)? {
                records.push((c.name, c.record));
            }
        }
        Selection::Revs(revs) => {
            for rev in revs {
                if let Some(c) = store.conversation(rev)? {
                    let name = match c.record.status {
                        ConversationStatus::Active => RefName::conversation(rev)?,
                        ConversationStatus::Archived => RefName::archived(rev)?,
                    };
                    let head = c
                        .head
                        .ok_or_else(|| Error::Invalid(format!("conversation {rev} has no head")))?;
                    refs.push((name, head));
                    records.push((c.name, c.record));
                    tips.push(head);
                } else {
                    tips.push(store.resolve_rev(rev)?);
                }
            }
        }
    }
    Ok(Selected {
        refs,
        records,
        tips,
    })
}

impl Bundle {
    /// A bundle of these parts, put in the canonical order (refs and
    /// records by name, prerequisites and objects by id, no duplicates).
    pub fn new(
        refs: Vec<(RefName, ObjectId)>,
        conversations: Vec<(String, ConversationRecord)>,
        prerequisites: Vec<ObjectId>,
        objects: Vec<EncodedObject>,
    ) -> Bundle {
        let refs: BTreeMap<String, (RefName, ObjectId)> = refs
            .into_iter()
            .map(|(n, id)| (n.to_string(), (n, id)))
            .collect();
        let conversations: BTreeMap<String, ConversationRecord> =
            conversations.into_iter().collect();
        let prerequisites: BTreeSet<ObjectId> = prerequisites.into_iter().collect();
        let objects: BTreeMap<ObjectId, EncodedObject> =
            objects.into_iter().map(|o| (o.id(), o)).collect();
        Bundle {
            refs: refs.into_values().collect(),
            conversations: conversations.into_iter().collect(),
            prerequisites: prerequisites.into_iter().collect(),
            objects: objects.into_values().collect(),
        }
    }

    /// The bundle `bundle create` writes: what `selection` reaches, minus
    /// what the `since` revisions reach (the receiver is known to have it).
    pub fn create(store: &Store, selection: &Selection, since: &[String]) -> Result<Bundle> {
        let Selected {
            refs,
            records,
            tips,
        } = select(store, selection)?;
        let mut boundary = Vec::new();
        for rev in since {
            boundary.push(store.resolve_rev(rev)?);
        }
        let (known, _) = crate::gc::mark(store, &boundary)?;
        let (objects, prerequisites) =
            collect(store.odb(), &tips, &mut |id| Ok(known.contains(id)))?;
        Ok(Bundle::new(refs, records, prerequisites, objects))
    }

    /// The canonical payload bytes of its objects.
    pub fn payload_bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.payload().len() as u64).sum()
    }

    /// How many of its objects are sessions.
    pub fn session_count(&self) -> usize {
        self.objects
            .iter()
            .filter(|o| o.kind() == ObjectKind::Session)
            .count()
    }

    /// The file's bytes (objects-format.md, "Bundles").
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(BUNDLE_MAGIC);
        out.extend_from_slice(&BUNDLE_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.refs.len() as u32).to_le_bytes());
        for (name, id) in &self.refs {
            let n = name.to_string();
            out.extend_from_slice(&(n.len() as u16).to_le_bytes());
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(id.as_bytes());
        }
        out.extend_from_slice(&(self.conversations.len() as u32).to_le_bytes());
        for (name, record) in &self.conversations {
            let r = record_bytes(record);
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&(r.len() as u32).to_le_bytes());
            out.extend_from_slice(&r);
        }
        out.extend_from_slice(&(self.prerequisites.len() as u32).to_le_bytes());
        for id in &self.prerequisites {
            out.extend_from_slice(id.as_bytes());
        }
        out.extend_from_slice(&(self.objects.len() as u64).to_le_bytes());
        let mut blocks: Vec<Vec<u8>> = Vec::new();
        let mut raw = Vec::new();
        for o in &self.objects {
            raw.push(o.kind().code());
            raw.extend_from_slice(o.id().as_bytes());
            raw.extend_from_slice(&(o.payload().len() as u32).to_le_bytes());
            raw.extend_from_slice(o.payload());
            if raw.len() >= BLOCK_TARGET {
                blocks.push(std::mem::take(&mut raw));
            }
        }
        if !raw.is_empty() {
            blocks.push(raw);
        }
        out.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
        for raw in &blocks {
            let packed = zstd::bulk::compress(raw, ZSTD_LEVEL)
                .ok()
                .filter(|c| c.len() < raw.len());
            let (codec, data) = match &packed {
                Some(c) => (CODEC_ZSTD, c.as_slice()),
                None => (CODEC_RAW, raw.as_slice()),
            };
            out.push(codec);
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        let sum = blake3::hash(&out);
        out.extend_from_slice(sum.as_bytes());
        out
    }

    /// Writes the bundle to `path` (through a temporary file, synced, then
    /// renamed, so a crash never leaves half a bundle under its name).
    pub fn write(&self, path: &Path) -> Result<u64> {
        let bytes = self.encode();
        AtomicFile::replace(path, &bytes, Durability::Sync)?;
        Ok(bytes.len() as u64)
    }

    /// Reads and decodes the bundle at `path`.
    pub fn read(path: &Path) -> Result<Bundle> {
        let bytes = fs::read(path).at(path)?;
        Bundle::decode(&bytes, path)
    }

    /// Decodes a bundle's bytes: the checksum first, then the structure,
    /// then every object's hash. `path` names the source in errors.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<Bundle> {
        let corrupt = |offset: usize, reason: String| Error::CorruptFile {
            path: path.to_path_buf(),
            offset: offset as u64,
            reason,
        };
        if bytes.len() < 8 || &bytes[..4] != BUNDLE_MAGIC {
            return Err(corrupt(0, "not a sessctl bundle (no SBDL magic)".into()));
        }
        let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
        if version != BUNDLE_FORMAT_VERSION {
            return Err(corrupt(
                4,
                format!(
                    "bundle format {version}; this sessctl reads format {BUNDLE_FORMAT_VERSION}"
                ),
            ));
        }
        if bytes.len() < 8 + CHECKSUM_LEN {
            return Err(corrupt(bytes.len(), "truncated: no checksum".into()));
        }
        let body_end = bytes.len() - CHECKSUM_LEN;
        let sum = blake3::hash(&bytes[..body_end]);
        if sum.as_bytes()[..] != bytes[body_end..] {
            return Err(corrupt(
                body_end,
                "checksum mismatch: the bundle is damaged or truncated".into(),
            ));
        }
        let mut r = Reader {
            buf: &bytes[..body_end],
            pos: 8,
            path,
        };
        let mut refs = Vec::new();
        for _ in 0..r.u32()? {
            let at = r.pos;
            let n = r.u16()? as usize;
            let name = r.text(n)?;
            let name = RefName::parse(name).map_err(|e| corrupt(at, e.to_string()))?;
            if name == RefName::Head {
                return Err(corrupt(at, "a bundle cannot carry HEAD".into()));
            }
            refs.push((name, r.id()?));
        }
        let mut conversations = Vec::new();
        for _ in 0..r.u32()? {
            let at = r.pos;
            let n = r.u16()? as usize;
            let name = r.text(n)?.to_owned();
            crate::refs::validate_name(&name).map_err(|e| corrupt(at, e.to_string()))?;
            let len = r.u32()? as usize;
            let record = record_from_bytes(r.take(len)?)
                .map_err(|e| corrupt(at, format!("conversation record {name}: {e}")))?;
            conversations.push((name, record));
        }
        let mut prerequisites = Vec::new();
        for _ in 0..r.u32()? {
            prerequisites.push(r.id()?);
        }
        let count = r.u64()?;
        let blocks = r.u32()?;
        let mut objects = Vec::new();
        for _ in 0..blocks {
            let at = r.pos;
            let codec = r.take(1)?[0];
            let stored = r.u32()? as usize;
            let raw_len = r.u32()? as usize;
            let data = r.take(stored)?;
            let raw = match codec {
                CODEC_RAW if stored == raw_len => data.to_vec(),
                CODEC_ZSTD => decompress(data, raw_len).map_err(|e| corrupt(at, e))?,
                _ => return Err(corrupt(at, format!("bad block codec {codec}"))),
            };
            let mut b = Reader {
                buf: &raw,
                pos: 0,
                path,
            };
            while b.pos < raw.len() {
                let head = b
                    .take(RECORD_HEADER)
                    .map_err(|_| corrupt(at, "a block ends inside an object record".into()))?;
                let kind = ObjectKind::from_code(head[0])
                    .ok_or_else(|| corrupt(at, format!("unknown object kind {}", head[0])))?;
                let id = ObjectId::from_slice(&head[1..1 + ID_LEN]).expect("32 bytes");
                let len =
                    u32::from_le_bytes(head[1 + ID_LEN..].try_into().expect("4 bytes")) as usize;
                let payload = b.take(len).map_err(|_| {
                    corrupt(at, format!("object {id} runs past the end of its block"))
                })?;
                let obj = EncodedObject::verified(id, kind, payload.to_vec())
                    .map_err(|reason| Error::Corrupt { id, reason })?;
                objects.push(obj);
            }
        }
        if r.pos != r.buf.len() {
            return Err(corrupt(r.pos, "bytes after the last block".into()));
        }
        if objects.len() as u64 != count {
            return Err(corrupt(
                8,
                format!(
                    "the header counts {count} objects, the blocks hold {}",
                    objects.len()
                ),
            ));
        }
        Ok(Bundle {
            refs,
            conversations,
            prerequisites,
            objects,
        })
    }

    /// The parents of the bundle's sessions (undecodable ones left out:
    /// [`Bundle::problems`] names them).
    pub fn session_parents(&self) -> HashMap<ObjectId, Vec<ObjectId>> {
        self.objects
            .iter()
            .filter(|o| o.kind() == ObjectKind::Session)
            .filter_map(|o| Some((o.id(), Session::decode(o.payload()).ok()?.parents)))
            .collect()
    }

    /// Everything wrong with the bundle: objects that do not decode, a
    /// session or ref naming what is neither in the bundle nor a
    /// prerequisite (or is of the wrong kind), and, given the receiving
    /// store, prerequisites it lacks. Empty when the bundle can be applied.
    pub fn problems(&self, store: Option<&Store>) -> Result<Vec<Problem>> {
        let mut problems = Vec::new();
        let kinds: HashMap<ObjectId, ObjectKind> =
            self.objects.iter().map(|o| (o.id(), o.kind())).collect();
        let prerequisites: HashSet<ObjectId> = self.prerequisites.iter().copied().collect();
        let corrupt = |id: ObjectId, message: String| Problem {
            kind: ProblemKind::Corrupt,
            id,
            message,
        };
        let check = |owner: &str, id: ObjectId, named: ObjectId, kind: ObjectKind| {
            match kinds.get(&named) {
                Some(k) if *k == kind => None,
                Some(k) => Some(corrupt(
                    id,
                    format!("{owner} names {named} as a {kind}, but it is a {k}"),
                )),
                None if prerequisites.contains(&named) => None,
                None => Some(corrupt(
                    id,
                    format!(
                        "{owner} names {kind} {named}, which is neither in the bundle nor a prerequisite"
                    ),
                )),
            }
        };
        for o in &self.objects {
            match o.kind() {
                ObjectKind::Blob => {
                    if let Err(e) = Blob::decode(o.payload()) {
                        problems.push(corrupt(
                            o.id(),
                            format!("blob {} does not decode: {e}", o.id()),
                        ));
                    }
                }
                ObjectKind::Session => match Session::decode(o.payload()) {
                    Err(e) => problems.push(corrupt(
                        o.id(),
                        format!("session {} does not decode: {e}", o.id()),
                    )),
                    Ok(s) => {
                        let owner = format!("session {}", o.id());
                        for p in session_edges(&s) {
                            problems.extend(check(&owner, o.id(), p, ObjectKind::Session));
                        }
                        for b in session_blobs(&s) {
                            problems.extend(check(&owner, o.id(), b, ObjectKind::Blob));
                        }
                    }
                },
            }
        }
        for (name, target) in &self.refs {
            problems.extend(check(
                &name.to_string(),
                *target,
                *target,
                ObjectKind::Session,
            ));
        }
        if let Some(store) = store {
            for p in &self.prerequisites {
                if !store.odb().contains(p)? {
                    problems.push(Problem {
                        kind: ProblemKind::MissingPrerequisite,
                        id: *p,
                        message: format!("missing prerequisite {p}: the store does not hold it"),
                    });
                }
            }
        }
        Ok(problems)
    }
}

/// A bounds-checked cursor over a bundle's bytes. It is only used after the
/// checksum matched, so running short means a writer bug or a forgery;
/// still, it never reads out of bounds.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() - self.pos < n {
            return Err(self.corrupt("the structure runs past its end".into()));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn corrupt(&self, reason: String) -> Error {
        Error::CorruptFile {
            path: self.path.to_path_buf(),
            offset: self.pos as u64,
            reason,
        }
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn id(&mut self) -> Result<ObjectId> {
        Ok(ObjectId::from_slice(self.take(ID_LEN)?).expect("32 bytes"))
    }
    fn text(&mut self, n: usize) -> Result<&'a str> {
        let at = self.pos;
        std::str::from_utf8(self.take(n)?).map_err(|_| {
            self.pos = at;
            self.corrupt("a name is not UTF-8".into())
        })
    }
}
