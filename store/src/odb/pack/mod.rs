//! Packs: sealed, immutable files of zstd-compressed blocks of objects, with
//! an index of sorted ids (objects-format.md, "Packs" and "Pack index").
//!
//! Neighbouring objects share a block and so a compression context; the
//! writer is given objects in the order they should sit (one conversation's
//! chain together). Both files are read through memmap2; this file holds
//! the crate's only `unsafe` (`map_immutable`). A pack is never modified after
//! it is renamed into place; it is only ever deleted whole.
//!
//! Here: the format's constants, the reader ([`Pack`]) and the listing of a
//! directory's packs; the writer is in `write.rs`, the index's parser and
//! lookups in `index.rs`, block-at-a-time reading in `scan.rs`.

mod dictionary;
mod index;
mod scan;
mod write;

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use memmap2::Mmap;
use zstd::dict::DecoderDictionary;

use crate::error::{Error, IoResultExt, Result};
use crate::hash::{ObjectId, Prefix};
use crate::object::id_batch::IdBatch;
use crate::object::{mismatch, EncodedObject, ObjectKind};
use crate::odb::journal::STREAM_VERIFY_ABOVE;

pub use index::{parse_index, verify_index, IndexLayout, IndexView};
pub use scan::{BlockDirectory, BlockRecord, Record, ScanItem, SweepPlan};
pub use write::{write_pack, PackOptions, PackWriter, WrittenPack};

/// First 4 bytes of a `.pack` file (objects-format.md, "Packs").
pub const PACK_MAGIC: [u8; 4] = *b"SPAK";
/// First 4 bytes of an `.idx` file (objects-format.md, "Pack index").
pub const INDEX_MAGIC: [u8; 4] = *b"SIDX";
/// Version of the pack and index layout written (objects-format.md,
/// "Packs", "Pack index" and "Versioning"): 2 adds zstd dictionaries.
pub const PACK_FORMAT_VERSION: u32 = 2;
/// The first pack version, still read: no dictionaries.
pub const PACK_FORMAT_V1: u32 = 1;
pub const PACK_HEADER_LEN: usize = 16;
/// Bytes of an index header (version 2): magic, version, objects, blocks,
/// dictionaries, reserved.
pub const INDEX_HEADER_LEN: usize = 24;
/// Bytes of a version-1 index header: magic, version, objects, blocks.
pub const INDEX_HEADER_LEN_V1: usize = 16;
pub const FANOUT_LEN: usize = 256 * 4;
/// Bytes of an index entry: block, offset within the block, length.
pub const INDEX_ENTRY_LEN: usize = 12;
/// Bytes of a block table entry (version 2): pack offset, compressed
/// length, raw length, dictionary.
pub const BLOCK_ENTRY_LEN: usize = 20;
/// Bytes of a version-1 block table entry: no dictionary.
pub const BLOCK_ENTRY_LEN_V1: usize = 16;
/// Bytes of a dictionary table entry: pack offset, length, reserved, blake3.
pub const DICTIONARY_ENTRY_LEN: usize = 48;
pub const CHECKSUM_LEN: usize = 32;
/// Uncompressed bytes gathered into one block before it is cut (hot packs).
pub const DEFAULT_BLOCK_TARGET: usize = 64 << 10;
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// The largest dictionary a hot pack trains: none. A pack that loses an
/// object to gc keeps none of its dictionaries, so every block of it is
/// written again (objects-format.md, "Garbage collection"), where a pack
/// without one has its surviving blocks copied as they are.
pub const DEFAULT_DICTIONARY_SIZE: usize = 0;
/// A cold pack's (a full repack's): larger blocks and a higher level
/// (objects-format.md, "Packs").
pub const COLD_BLOCK_TARGET: usize = 128 << 10;
pub const COLD_ZSTD_LEVEL: i32 = 11;
/// A cold pack trains no dictionary either, by default: at 128 KiB blocks
/// one saves about 2% of a long session's bytes (12% of real transcripts'),
/// and would make every gc that drops one of its objects write the whole
/// pack again. [`PackOptions::dictionary_size`] asks for one.
pub const COLD_DICTIONARY_SIZE: usize = 0;
/// Decompressed blocks kept per pack for the next read.
const BLOCK_CACHE: usize = 4;
/// A batch read verifies records once this many bytes of them are
/// gathered: enough records of each shape to fill the hashing kernel's
/// lanes, few enough to stay in a core's cache.
const VERIFY_BATCH_BYTES: usize = 1 << 20;

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    let bytes = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// What the batch read loop hands each verified record to: its position
/// among the ids, its kind, the buffer it was verified in and its
/// payload's range there.
type VisitBuffer<'a> = dyn FnMut(usize, ObjectKind, &[u8], Range<usize>) -> Result<()> + 'a;

/// Where a record lies in a pack: its block, its offset in the inflated
/// block, its length (the kind code and the payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordLoc {
    pub block: u32,
    pub offset: u32,
    pub len: u32,
}

/// An open pack and its index.
pub struct Pack {
    name: String,
    pack_path: PathBuf,
    index_path: PathBuf,
    pack: Mmap,
    index: Mmap,
    layout: IndexLayout,
    /// Whether the index's checksum and id order were checked: done before
    /// the ids are listed (repack, gc, fsck), never for a lookup, so that
    /// reading one object costs the same however many the pack holds.
    index_verified: OnceLock<Result<(), String>>,
    cache: Mutex<Vec<(u32, Arc<Vec<u8>>)>>,
    /// Each dictionary, checked against its checksum and prepared for
    /// decompression once, when a block first names it.
    dictionaries: Vec<OnceLock<Result<Arc<DecoderDictionary<'static>>, String>>>,
}

impl std::fmt::Debug for Pack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pack")
            .field("name", &self.name)
            .field("objects", &self.layout.objects)
            .field("blocks", &self.layout.blocks)
            .finish()
    }
}

pub(crate) fn map_file(path: &Path) -> Result<Mmap> {
    let file = OpenOptions::new().read(true).open(path).at(path)?;
    map_immutable(&file).at(path)
}

/// Maps a file that no one writes any more: a pack or pack index, the
/// lineage index, an index table.
pub(crate) fn map_immutable(file: &std::fs::File) -> std::io::Result<Mmap> {
    // SAFETY: these files are immutable once renamed into place: written
    // under temporary names and never reopened for writing, replaced only by
    // renaming a new file over them and deleted whole, and a mapping keeps
    // the old inode alive (objects-format.md, "Concurrency"). A foreign
    // process truncating one would be outside that contract.
    unsafe { Mmap::map(file) }
}

impl Pack {
    /// Opens `<dir>/<name>.pack` and `<dir>/<name>.idx`; checks headers and
    /// sizes only.
    pub fn open(dir: &Path, name: &str) -> Result<Pack> {
        let pack_path = dir.join(format!("{name}.pack"));
        let index_path = dir.join(format!("{name}.idx"));
        let index = map_file(&index_path)?;
        let pack = map_file(&pack_path)?;
        let layout = parse_index(&index).map_err(|reason| Error::CorruptFile {
            path: index_path.clone(),
            offset: 0,
            reason,
        })?;
        if pack.len() < PACK_HEADER_LEN + CHECKSUM_LEN
            || pack[..4] != PACK_MAGIC
            || !matches!(le_u32(&pack, 4), Some(PACK_FORMAT_V1 | PACK_FORMAT_VERSION))
            || pack[8..16] != [0u8; 8]
        {
            return Err(Error::CorruptFile {
                path: pack_path,
                offset: 0,
                reason: format!(
                    "not a version-{PACK_FORMAT_V1} or version-{PACK_FORMAT_VERSION} pack"
                ),
            });
        }
        if le_u32(&pack, 4) != Some(layout.version) {
            return Err(Error::CorruptFile {
                path: index_path,
                offset: 0,
                reason: format!(
                    "index of pack version {}, its pack is of another",
                    layout.version
                ),
            });
        }
        let dictionaries = (0..layout.dictionaries).map(|_| OnceLock::new()).collect();
        Ok(Pack {
            name: name.to_owned(),
            pack_path,
            index_path,
            pack,
            index,
            layout,
            index_verified: OnceLock::new(),
            cache: Mutex::new(Vec::with_capacity(BLOCK_CACHE)),
            dictionaries,
        })
    }

    /// The pack format version of this pack (1 or 2).
    pub fn version(&self) -> u32 {
        self.layout.version
    }

    /// Dictionaries this pack holds.
    pub fn dictionary_count(&self) -> usize {
        self.layout.dictionaries
    }

    /// Dictionary `d`'s bytes in the mapped pack, checked to lie inside the
    /// pack and to hash to the checksum the index gives; and that checksum.
    pub(crate) fn dictionary_bytes(&self, d: usize) -> Result<(&[u8], [u8; 32]), String> {
        let Some((offset, len, sum)) = self.view().dictionary_entry(d) else {
            return Err(format!("{}: dictionary {d} does not exist", self.name));
        };
        let body_end = self.pack.len() - CHECKSUM_LEN;
        let bytes = usize::try_from(offset)
            .ok()
            .filter(|&o| o >= PACK_HEADER_LEN)
            .and_then(|o| Some(o..o.checked_add(len as usize)?))
            .filter(|r| r.end <= body_end)
            .map(|r| &self.pack[r])
            .ok_or_else(|| format!("{}: dictionary {d} lies outside the pack", self.name))?;
        let sum: [u8; 32] = sum
            .try_into()
            .map_err(|_| format!("{}: dictionary {d} has no checksum", self.name))?;
        if *blake3::hash(bytes).as_bytes() != sum {
            return Err(format!(
                "{}: dictionary {d} is damaged (its checksum does not match)",
                self.name
            ));
        }
        Ok((bytes, sum))
    }

    /// The dictionary block `n` was compressed with, prepared (once per
    /// pack), or `None` for a block without one.
    fn block_dictionary(&self, n: u32) -> Result<Option<Arc<DecoderDictionary<'static>>>, String> {
        let d = match self.view().block_dictionary(n) {
            None => return Err(format!("{}: block {n} does not exist", self.name)),
            Some(0) => return Ok(None),
            Some(d) => d as usize - 1,
        };
        let Some(slot) = self.dictionaries.get(d) else {
            return Err(format!(
                "{}: block {n} names dictionary {d}, which does not exist",
                self.name
            ));
        };
        slot.get_or_init(|| {
            let (bytes, _) = self.dictionary_bytes(d)?;
            Ok(Arc::new(DecoderDictionary::copy(bytes)))
        })
        .clone()
        .map(Some)
    }

    /// The dictionary index (as the block table names it: 0 none, `d + 1`
    /// dictionary `d`) of block `n`.
    pub(crate) fn block_dictionary_ref(&self, n: u32) -> Option<u32> {
        self.view().block_dictionary(n)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn object_count(&self) -> usize {
        self.layout.objects
    }
    pub fn paths(&self) -> [&Path; 2] {
        [&self.pack_path, &self.index_path]
    }
    pub fn disk_bytes(&self) -> u64 {
        (self.pack.len() + self.index.len()) as u64
    }

    /// The index, read in place. `layout` was parsed from these very bytes,
    /// which never change while the map lives.
    fn view(&self) -> IndexView<'_> {
        IndexView {
            bytes: &self.index,
            layout: self.layout,
        }
    }

    fn ensure_index(&self) -> Result<()> {
        self.index_verified
            .get_or_init(|| self.view().verify())
            .clone()
            .map_err(|reason| Error::CorruptFile {
                path: self.index_path.clone(),
                offset: 0,
                reason,
            })
    }

    /// What a lookup relies on near `position`, instead of the whole id
    /// order: the ids there strictly ascend. O(1); a found object is
    /// re-hashed when read, so a damaged index can mislead a lookup into
    /// "not found" at worst, which fsck's full check reports.
    fn check_near(&self, lo: usize, hi: usize) -> Result<()> {
        let view = self.view();
        let from = lo.saturating_sub(1);
        let to = hi.saturating_add(1).min(self.layout.objects);
        for i in from.saturating_add(1)..to {
            if view.id(i - 1) >= view.id(i) {
                return Err(Error::CorruptFile {
                    path: self.index_path.clone(),
                    offset: 0,
                    reason: format!("ids out of order at position {i}"),
                });
            }
        }
        Ok(())
    }

    /// The position of `id`, its neighbours checked (see `check_near`).
    fn find(&self, id: &ObjectId) -> Result<Option<usize>> {
        let Some(i) = self.view().position(id) else {
            return Ok(None);
        };
        self.check_near(i, i + 1)?;
        Ok(Some(i))
    }

    pub fn contains(&self, id: &ObjectId) -> Result<bool> {
        Ok(self.find(id)?.is_some())
    }

    /// Ids in this pack that start with `prefix`.
    pub fn ids_with_prefix(&self, prefix: &Prefix, out: &mut Vec<ObjectId>) -> Result<()> {
        let from = out.len();
        self.view().ids_with_prefix(prefix, out);
        if let Some(first) = out.get(from) {
            let lo = self.view().position(first).unwrap_or(0);
            self.check_near(lo, lo + (out.len() - from))?;
        }
        Ok(())
    }

    /// Every id in the pack, sorted.
    pub fn ids(&self) -> Result<Vec<ObjectId>> {
        self.ensure_index()?;
        Ok(self.view().ids().collect())
    }

    /// Every id in the order the objects sit in the pack (block, offset),
    /// which is the order a repack should keep.
    pub fn ids_in_pack_order(&self) -> Result<Vec<ObjectId>> {
        self.ensure_index()?;
        let view = self.view();
        let mut v: Vec<(u32, u32, ObjectId)> = view
            .ids()
            .enumerate()
            .filter_map(|(i, id)| view.entry(i).map(|(block, offset, _)| (block, offset, id)))
            .collect();
        v.sort_unstable_by_key(|e| (e.0, e.1));
        Ok(v.into_iter().map(|e| e.2).collect())
    }

    /// Where `id`'s record lies, if this pack holds it.
    pub(crate) fn locate(&self, id: &ObjectId) -> Result<Option<RecordLoc>> {
        let view = self.view();
        Ok(self
            .find(id)?
            .and_then(|i| view.entry(i))
            .map(|(block, offset, len)| RecordLoc { block, offset, len }))
    }

    /// Reads and verifies an object.
    pub fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        let Some(at) = self.locate(id)? else {
            return Ok(None);
        };
        let large;
        let data;
        let block = match self.view().block_entry(at.block) {
            Some((_, _, rlen)) if rlen as usize > STREAM_VERIFY_ABOVE => {
                large = self
                    .large_record(id, at.block, at.offset as usize, at.len as usize)
                    .map_err(|r| Error::corrupt(*id, r))?
                    .ok_or_else(|| self.outside(id, at.block))?;
                // The record alone, as if it were a block of its own.
                (&large[..], RecordLoc { offset: 0, ..at })
            }
            _ => {
                data = self.block(at.block).map_err(|r| Error::corrupt(*id, r))?;
                (&data[..], at)
            }
        };
        let (kind, payload) = self.verified_record(id, block.0, block.1)?;
        Ok(Some(EncodedObject::from_verified(
            *id,
            kind,
            payload.to_vec(),
        )))
    }

    /// Reads and verifies the records `wanted` names (each with its
    /// position in `ids`, the ids they must hash to), handing each to
    /// `visit` with that position. Goes in pack order: each block is
    /// inflated once, into a buffer reused from block to block. Records
    /// are verified a batch at a time (`IdBatch`: hashed side by side,
    /// several times faster than one by one for messages of a few KB),
    /// and a batch is handed on only once every record in it is verified.
    pub(crate) fn read_records(
        &self,
        wanted: &mut [(RecordLoc, usize)],
        ids: &[ObjectId],
        visit: &mut super::Visit<'_>,
    ) -> Result<()> {
        let mut scratch = Vec::new();
        self.read_records_with(wanted, ids, &mut scratch, false, &mut |i, kind, buf, at| {
            visit(i, kind, &buf[at])
        })
    }

    /// [`Pack::read_records`] for a caller that keeps the payloads: each
    /// verified payload stays in `out` (appended, room made for all of them
    /// at once), and `visit` is given its range there instead.
    pub(crate) fn read_records_into(
        &self,
        wanted: &mut [(RecordLoc, usize)],
        ids: &[ObjectId],
        out: &mut Vec<u8>,
        visit: &mut super::VisitInto<'_>,
    ) -> Result<()> {
        self.read_records_with(wanted, ids, out, true, &mut |i, kind, _, at| {
            visit(i, kind, at)
        })
    }

    /// The loop of both: records gathered into `buf` (identity header and
    /// payload each, as `IdBatch` hashes them), verified a batch at a time,
    /// then handed to `visit` with the buffer and the payload's range in
    /// it; dropped from `buf` after, unless `keep`.
    fn read_records_with(
        &self,
        wanted: &mut [(RecordLoc, usize)],
        ids: &[ObjectId],
        buf: &mut Vec<u8>,
        keep: bool,
        visit: &mut VisitBuffer<'_>,
    ) -> Result<()> {
        wanted.sort_unstable_by_key(|(at, i)| (at.block, at.offset, *i));
        let mut batch = IdBatch::over(std::mem::take(buf));
        if keep {
            // Headers are a few bytes each: room for every record at once.
            let total: usize = wanted.iter().map(|(at, _)| at.len as usize + 24).sum();
            batch.reserve(total);
        }
        let read = self.gather(wanted, ids, &mut batch, keep, visit);
        *buf = batch.into_frames();
        read
    }

    fn gather(
        &self,
        wanted: &[(RecordLoc, usize)],
        ids: &[ObjectId],
        batch: &mut IdBatch,
        keep: bool,
        visit: &mut VisitBuffer<'_>,
    ) -> Result<()> {
        let mut block_buf = Vec::new();
        // The block at hand: from the cache (`held`), or inflated into `block_buf`.
        let mut held: Option<Arc<Vec<u8>>> = None;
        let mut inflated: Option<u32> = None;
        // Per record in `batch`: its position in `ids`, its kind.
        let mut pending: Vec<(usize, ObjectKind)> = Vec::new();
        for &(at, i) in wanted.iter() {
            let id = &ids[i];
            let large = match self.view().block_entry(at.block) {
                Some((_, _, rlen)) => rlen as usize > STREAM_VERIFY_ABOVE,
                None => false,
            };
            if large {
                // Never a whole huge block in memory: the record on its
                // own, verified as `read` verifies it.
                let o = self.read(id)?.ok_or(Error::NotFound { id: *id })?;
                if keep {
                    self.verify_and_visit(batch, &mut pending, ids, keep, visit)?;
                    batch.push(o.kind(), o.payload());
                    let at = batch.payload_range(0);
                    batch.forget();
                    visit(i, o.kind(), batch.frames(), at)?;
                } else {
                    visit(i, o.kind(), o.payload(), 0..o.payload().len())?;
                }
                continue;
            }
            if inflated != Some(at.block) {
                held = self.cached(at.block);
                if held.is_none() {
                    self.inflate_block(at.block, &mut block_buf)
                        .map_err(|r| Error::corrupt(*id, r))?;
                }
                inflated = Some(at.block);
            }
            let block = held.as_deref().map_or(&block_buf[..], |d| &d[..]);
            let (kind, payload) = self.unverified_record(id, block, at)?;
            batch.push(kind, payload);
            pending.push((i, kind));
            if batch.bytes() >= VERIFY_BATCH_BYTES {
                self.verify_and_visit(batch, &mut pending, ids, keep, visit)?;
            }
        }
        self.verify_and_visit(batch, &mut pending, ids, keep, visit)
    }

    /// Hashes the records gathered in `batch`, checks each against the id
    /// it must have (the first that does not is `Corrupt`, and nothing of
    /// the batch is handed on), then hands each to `visit`; empties
    /// `pending` and the batch (its bytes kept in its buffer when `keep`).
    fn verify_and_visit(
        &self,
        batch: &mut IdBatch,
        pending: &mut Vec<(usize, ObjectKind)>,
        ids: &[ObjectId],
        keep: bool,
        visit: &mut VisitBuffer<'_>,
    ) -> Result<()> {
        let actual = batch.ids();
        for (n, &(i, kind)) in pending.iter().enumerate() {
            if actual[n] != ids[i] {
                let reason = mismatch(&actual[n], kind, batch.payload(n).len());
                return Err(Error::corrupt(
                    ids[i],
                    format!("in {}: {reason}", self.name),
                ));
            }
        }
        for (n, &(i, kind)) in pending.iter().enumerate() {
            visit(i, kind, batch.frames(), batch.payload_range(n))?;
        }
        if keep {
            batch.forget();
        } else {
            batch.clear();
        }
        pending.clear();
        Ok(())
    }

    fn outside(&self, id: &ObjectId, block: u32) -> Error {
        Error::corrupt(
            *id,
            format!("{}: record lies outside block {block}", self.name),
        )
    }

    /// The record at `at` of `block` (inflated), checked to be object
    /// `id`: its kind and payload.
    fn verified_record<'b>(
        &self,
        id: &ObjectId,
        block: &'b [u8],
        at: RecordLoc,
    ) -> Result<(ObjectKind, &'b [u8])> {
        let (kind, payload) = self.unverified_record(id, block, at)?;
        crate::object::verify_id(id, kind, payload)
            .map_err(|r| Error::corrupt(*id, format!("in {}: {r}", self.name)))?;
        Ok((kind, payload))
    }

    /// The record at `at` of `block` (inflated), read as object `id`'s but
    /// not yet verified: its kind and payload, checked to lie in the block
    /// and to name a kind.
    fn unverified_record<'b>(
        &self,
        id: &ObjectId,
        block: &'b [u8],
        at: RecordLoc,
    ) -> Result<(ObjectKind, &'b [u8])> {
        let (offset, len) = (at.offset as usize, at.len as usize);
        let record = offset
            .checked_add(len)
            .and_then(|end| block.get(offset..end))
            .ok_or_else(|| self.outside(id, at.block))?;
        let Some((&code, payload)) = record.split_first() else {
            return Err(Error::corrupt(*id, format!("{}: empty record", self.name)));
        };
        let kind = ObjectKind::from_code(code).ok_or_else(|| {
            Error::corrupt(
                *id,
                format!("{}: unknown object kind code {code}", self.name),
            )
        })?;
        Ok((kind, payload))
    }

    /// The record at `offset..offset + len` of a block too large to inflate
    /// on trust: streamed twice, first to check that it hashes to `id` (so
    /// that a forged block or index costs 64 KiB), then to keep it. Never
    /// cached, never the whole block in memory. `None`: the record lies
    /// outside the block.
    fn large_record(
        &self,
        id: &ObjectId,
        n: u32,
        offset: usize,
        len: usize,
    ) -> Result<Option<Vec<u8>>, String> {
        let (compressed, rlen) = self.compressed_block(n)?;
        if len == 0 || offset.checked_add(len).is_none_or(|end| end > rlen) {
            return Ok(None);
        }
        let skip = |frame: &mut dyn Read| -> Result<(), String> {
            let skipped = std::io::copy(&mut frame.take(offset as u64), &mut std::io::sink())
                .map_err(|e| format!("{}: block {n}: zstd: {e}", self.name))?;
            if skipped != offset as u64 {
                return Err(format!("{}: block {n} is shorter than it says", self.name));
            }
            Ok(())
        };
        let dict = self.block_dictionary(n)?;
        let mut frame = dictionary::inflating(compressed, rlen, dict.as_deref())
            .map_err(|e| format!("{}: block {n}: {e}", self.name))?;
        skip(&mut frame)?;
        let mut code = [0u8; 1];
        frame
            .read_exact(&mut code)
            .map_err(|e| format!("{}: block {n}: {e}", self.name))?;
        let kind = ObjectKind::from_code(code[0])
            .ok_or_else(|| format!("{}: unknown object kind code {}", self.name, code[0]))?;
        let actual = super::journal::streamed_id(&mut frame, kind, len - 1)
            .map_err(|e| format!("{}: block {n}: {e}", self.name))?;
        if actual != *id {
            return Err(format!(
                "in {}: content hashes to {actual} ({kind}, {} bytes), not to its id",
                self.name,
                len - 1
            ));
        }
        let mut frame = dictionary::inflating(compressed, rlen, dict.as_deref())
            .map_err(|e| format!("{}: block {n}: {e}", self.name))?;
        skip(&mut frame)?;
        let mut record = vec![0u8; len];
        frame
            .read_exact(&mut record)
            .map_err(|e| format!("{}: block {n}: {e}", self.name))?;
        Ok(Some(record))
    }

    /// Block `n`'s compressed bytes in the mapped pack, and its inflated size.
    fn compressed_block(&self, n: u32) -> Result<(&[u8], usize), String> {
        let Some((offset, clen, rlen)) = self.view().block_entry(n) else {
            return Err(format!("{}: block {n} does not exist", self.name));
        };
        let body_end = self.pack.len() - CHECKSUM_LEN;
        usize::try_from(offset)
            .ok()
            .filter(|&o| o >= PACK_HEADER_LEN)
            .and_then(|o| Some(o..o.checked_add(clen as usize)?))
            .filter(|r| r.end <= body_end)
            .map(|r| (&self.pack[r], rlen as usize))
            .ok_or_else(|| format!("{}: block {n} lies outside the pack", self.name))
    }

    /// Block `n`, inflated, if the cache holds it.
    fn cached(&self, n: u32) -> Option<Arc<Vec<u8>>> {
        let cache = self.cache.lock().expect("block cache lock");
        cache.iter().find(|(b, _)| *b == n).map(|(_, d)| d.clone())
    }

    /// The decompressed bytes of block `n`, from the cache when recent.
    fn block(&self, n: u32) -> Result<Arc<Vec<u8>>, String> {
        {
            let mut cache = self.cache.lock().expect("block cache lock");
            if let Some(pos) = cache.iter().position(|(b, _)| *b == n) {
                let hit = cache.remove(pos);
                let data = hit.1.clone();
                cache.push(hit);
                return Ok(data);
            }
        }
        let mut data = Vec::new();
        self.inflate_block(n, &mut data)?;
        let data = Arc::new(data);
        let mut cache = self.cache.lock().expect("block cache lock");
        if cache.len() >= BLOCK_CACHE {
            cache.remove(0);
        }
        cache.push((n, data.clone()));
        Ok(data)
    }

    /// Inflates block `n` into `out` (its contents replaced): every read of
    /// a whole block goes through here.
    fn inflate_block(&self, n: u32, out: &mut Vec<u8>) -> Result<(), String> {
        let (compressed, rlen) = self.compressed_block(n)?;
        let dict = self.block_dictionary(n)?;
        dictionary::inflate_into(compressed, rlen, dict.as_deref(), out)
            .map_err(|e| format!("{}: block {n}: {e}", self.name))
    }

    /// Checks everything: both checksums, every block, every object's hash.
    /// Returns the problems found, one line each.
    pub fn verify(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(e) = self.ensure_index() {
            problems.push(e.to_string());
            return problems;
        }
        let body = &self.pack[..self.pack.len() - CHECKSUM_LEN];
        let sum = blake3::hash(body);
        if sum.as_bytes()[..] != self.pack[self.pack.len() - CHECKSUM_LEN..] {
            problems.push(format!(
                "{}: pack checksum mismatch",
                self.pack_path.display()
            ));
        }
        if sum.as_bytes()[..] != *self.view().pack_checksum() {
            problems.push(format!(
                "{}: index names a different pack checksum",
                self.index_path.display()
            ));
        }
        for d in 0..self.layout.dictionaries {
            if let Err(e) = self.dictionary_bytes(d) {
                problems.push(e);
            }
        }
        // Pack order, each block inflated once, blocks on every core.
        let dir = match self.directory() {
            Ok(d) => d,
            Err(e) => {
                problems.push(e.to_string());
                return problems;
            }
        };
        let found = Mutex::new(Vec::new());
        let next = std::sync::atomic::AtomicU32::new(0);
        let run = || loop {
            let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n >= dir.blocks() {
                return;
            }
            self.read_block(n, dir.records(n), &|_| true, &mut |items| {
                let mut f = found.lock().expect("problem list lock");
                for (k, (_, read)) in items.iter().enumerate() {
                    if let Err(e) = read {
                        f.push((n, k, e.to_string()));
                    }
                }
            });
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8)
            .min(dir.blocks() as usize);
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(run);
            }
            run();
        });
        let mut found = found.into_inner().expect("problem list lock");
        found.sort_unstable_by_key(|p| (p.0, p.1));
        problems.extend(found.into_iter().map(|p| p.2));
        for r in dir.strays() {
            if let Err(e) = self.read(&r.id) {
                problems.push(e.to_string());
            }
        }
        problems
    }
}

/// Names (`pack-<hex>`) of the complete packs in `dir`: those whose index exists.
pub fn list_packs(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str() else {
            continue;
        };
        if let Some(stem) = name.strip_suffix(".idx") {
            if stem.starts_with("pack-") {
                names.push(stem.to_owned());
            }
        }
    }
    names.sort();
    Ok(names)
}
