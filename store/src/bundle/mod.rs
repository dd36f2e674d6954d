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

use crate::error::{Error, IoResultExt, Result};
use crate::hash::{ObjectId, ID_LEN};
use crate::object::{Blob, EncodedObject, ObjectKind, Raw, Session};
use crate::odb::atomic_file::AtomicFile;
use crate::odb::Durability;
use crate::reach;
use crate::refs::op::record_bytes;
use crate::refs::{ConversationRecord, ConversationStatus, RefName, RefTarget};
use crate::store::Store;

mod decode;

/// The first four bytes of a bundle (objects-format.md, "Bundles").
pub const BUNDLE_MAGIC: &[u8; 4] = b"SBDL";
/// The newest bundle format (objects-format.md, "Bundles"): 2, a bundle that
/// holds a raw object. This sessctl reads formats 1 and 2.
pub const BUNDLE_FORMAT_VERSION: u32 = 2;
/// The format of a bundle without raw objects, which every sessctl reads.
pub const BUNDLE_FORMAT_INITIAL: u32 = 1;
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
                        .ok_or_else(|| Error::NoHeadYet { name: rev.clone() })?;
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
        let (known, _) = reach::closure(store.odb(), &boundary)?;
        let (mut objects, prerequisites) =
            reach::missing_from(store.odb(), &tips, &mut |id| Ok(known.contains(id)))?;
        // A record's large fields travel with it: the receiver may not
        // have them even when it has the sessions.
        objects.extend(reach::record_blobs_missing(
            store.odb(),
            &records,
            &mut |_| Ok(false),
        )?);
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
        // Format 2 only when it holds what an older sessctl cannot read (a
        // raw object), which it then refuses as newer, not as damage.
        let version = if self.objects.iter().any(|o| o.kind() == ObjectKind::Raw) {
            BUNDLE_FORMAT_VERSION
        } else {
            BUNDLE_FORMAT_INITIAL
        };
        out.extend_from_slice(&version.to_le_bytes());
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
        self.problems_with(store, &crate::progress::Silent)
    }

    /// [`Bundle::problems`], telling `progress` of the objects checked.
    pub fn problems_with(
        &self,
        store: Option<&Store>,
        progress: &dyn crate::progress::Progress,
    ) -> Result<Vec<Problem>> {
        progress.phase("checking objects", Some(self.objects.len() as u64));
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
                Some(k) if k.serves_as(kind) => None,
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
            progress.advance(1);
            match o.kind() {
                ObjectKind::Blob => {
                    if let Err(e) = Blob::decode(o.payload()) {
                        problems.push(corrupt(
                            o.id(),
                            format!("blob {} does not decode: {e}", o.id()),
                        ));
                    }
                }
                ObjectKind::Raw => {
                    if let Err(e) = Raw::decode(o.payload()) {
                        problems.push(corrupt(
                            o.id(),
                            format!("raw message {} does not decode: {e}", o.id()),
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
                        for p in s.sessions() {
                            problems.extend(check(&owner, o.id(), p, ObjectKind::Session));
                        }
                        for b in s.blobs() {
                            problems.extend(check(&owner, o.id(), b, ObjectKind::Blob));
                        }
                    }
                },
            }
        }
        // By conversation for its live and archived refs, by name for others.
        let mut seen: HashMap<std::result::Result<&str, &RefName>, &RefName> = HashMap::new();
        for (name, target) in &self.refs {
            problems.extend(check(
                &name.to_string(),
                *target,
                *target,
                ObjectKind::Session,
            ));
            // No ref twice, and a conversation live or archived, never both:
            // applied, such a pair could be neither archived nor unarchived.
            let key = match name {
                RefName::Conversation(n) | RefName::Archived(n) => Ok(n.as_str()),
                other => Err(other),
            };
            if let Some(first) = seen.insert(key, name) {
                let message = if first == name {
                    format!("the bundle carries {name} twice")
                } else {
                    format!(
                        "the bundle carries both {first} and {name}: a conversation is live or archived, never both"
                    )
                };
                problems.push(corrupt(*target, message));
            }
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
