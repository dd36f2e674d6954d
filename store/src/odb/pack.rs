//! Packs: sealed, immutable files of zstd-compressed blocks of objects, with
//! an index of sorted ids (objects-format.md, "Packs" and "Pack index").
//!
//! Neighbouring objects share a block and so a compression context; the
//! writer is given objects in the order they should sit (one conversation's
//! chain together). Both files are read through memmap2; this module holds
//! the crate's only `unsafe`. A pack is never modified after it is renamed
//! into place; it is only ever deleted whole.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use memmap2::Mmap;

use crate::error::{Error, IoResultExt, Result};
use crate::hash::{hex, ObjectId, Prefix, ID_LEN};
use crate::object::{EncodedObject, ObjectKind};

/// First 4 bytes of a `.pack` file (objects-format.md, "Packs").
pub const PACK_MAGIC: [u8; 4] = *b"SPAK";
/// First 4 bytes of an `.idx` file (objects-format.md, "Pack index").
pub const INDEX_MAGIC: [u8; 4] = *b"SIDX";
/// Version of the pack and index layout (objects-format.md, "Versioning").
pub const PACK_FORMAT_VERSION: u32 = 1;
pub const PACK_HEADER_LEN: usize = 16;
pub const INDEX_HEADER_LEN: usize = 16;
pub const FANOUT_LEN: usize = 256 * 4;
/// Bytes of an index entry: block, offset within the block, length.
pub const INDEX_ENTRY_LEN: usize = 12;
/// Bytes of a block table entry: pack offset, compressed length, raw length.
pub const BLOCK_ENTRY_LEN: usize = 16;
pub const CHECKSUM_LEN: usize = 32;
/// Uncompressed bytes gathered into one block before it is cut.
pub const DEFAULT_BLOCK_TARGET: usize = 64 << 10;
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;
/// Decompressed blocks kept per pack for the next read.
const BLOCK_CACHE: usize = 4;

/// How packs are written.
#[derive(Debug, Clone, Copy)]
pub struct PackOptions {
    pub block_target: usize,
    pub zstd_level: i32,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            block_target: DEFAULT_BLOCK_TARGET,
            zstd_level: DEFAULT_ZSTD_LEVEL,
        }
    }
}

/// What a pack write produced.
#[derive(Debug, Clone)]
pub struct WrittenPack {
    pub name: String,
    pub pack_path: PathBuf,
    pub index_path: PathBuf,
    pub objects: usize,
    pub blocks: usize,
    pub bytes: u64,
}

/// Writes `objects` (in the given order; duplicates skipped) as a new pack in
/// `dir`. The pack is durable and visible under its final name on return.
pub fn write_pack(dir: &Path, objects: &[EncodedObject], opts: PackOptions) -> Result<WrittenPack> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp_pack = dir.join(format!(".tmp-{}-{n}.pack", std::process::id()));
    let tmp_index = tmp_pack.with_extension("idx");
    let result = write_pack_files(dir, objects, opts, &tmp_pack, &tmp_index);
    if result.is_err() {
        let _ = fs::remove_file(&tmp_pack);
        let _ = fs::remove_file(&tmp_index);
    }
    result
}

fn write_pack_files(
    dir: &Path,
    objects: &[EncodedObject],
    opts: PackOptions,
    tmp_pack: &Path,
    tmp_index: &Path,
) -> Result<WrittenPack> {
    let mut seen = std::collections::HashSet::with_capacity(objects.len());
    // (id, block, offset, len) per object; (pack offset, compressed, raw) per block.
    let mut entries: Vec<(ObjectId, u32, u32, u32)> = Vec::with_capacity(objects.len());
    let mut blocks: Vec<(u64, u32, u32)> = Vec::new();
    let mut compressor = zstd::bulk::Compressor::new(opts.zstd_level)
        .map_err(|e| Error::Invalid(format!("zstd: {e}")))?;
    compressor
        .include_checksum(true)
        .map_err(|e| Error::Invalid(format!("zstd: {e}")))?;

    let file = File::create(tmp_pack).at(tmp_pack)?;
    let mut out = HashingWriter::new(BufWriter::with_capacity(1 << 20, file));
    let mut header = [0u8; PACK_HEADER_LEN];
    header[..4].copy_from_slice(&PACK_MAGIC);
    header[4..8].copy_from_slice(&PACK_FORMAT_VERSION.to_le_bytes());
    // The block count is not known yet; it lives in the index, and the
    // header keeps it zero so that the pack can be streamed.
    out.write_all(&header).at(tmp_pack)?;
    let mut offset = PACK_HEADER_LEN as u64;

    let mut block: Vec<u8> = Vec::with_capacity(opts.block_target * 2);
    let mut flush = |block: &mut Vec<u8>,
                     out: &mut HashingWriter<BufWriter<File>>,
                     offset: &mut u64,
                     blocks: &mut Vec<(u64, u32, u32)>|
     -> Result<()> {
        if block.is_empty() {
            return Ok(());
        }
        let c = compressor
            .compress(block)
            .map_err(|e| Error::Invalid(format!("zstd: {e}")))?;
        out.write_all(&c).at(tmp_pack)?;
        blocks.push((*offset, c.len() as u32, block.len() as u32));
        *offset += c.len() as u64;
        block.clear();
        Ok(())
    };
    for obj in objects {
        if !seen.insert(obj.id()) {
            continue;
        }
        let record_len = 1 + obj.payload().len();
        if !block.is_empty() && block.len() + record_len > opts.block_target {
            flush(&mut block, &mut out, &mut offset, &mut blocks)?;
        }
        let len = u32::try_from(record_len)
            .map_err(|_| Error::Invalid(format!("object {} is larger than 4 GiB", obj.id())))?;
        entries.push((obj.id(), blocks.len() as u32, block.len() as u32, len));
        block.push(obj.kind().code());
        block.extend_from_slice(obj.payload());
    }
    flush(&mut block, &mut out, &mut offset, &mut blocks)?;
    let pack_sum = out.hasher.finalize();
    out.write_all(pack_sum.as_bytes()).at(tmp_pack)?;
    let bytes = offset + CHECKSUM_LEN as u64;
    let file = out
        .inner
        .into_inner()
        .map_err(|e| Error::io(tmp_pack, e.into_error()))?;
    file.sync_all().at(tmp_pack)?;

    entries.sort_unstable_by_key(|e| e.0);
    let mut idx = Vec::with_capacity(
        INDEX_HEADER_LEN
            + FANOUT_LEN
            + entries.len() * (ID_LEN + INDEX_ENTRY_LEN)
            + blocks.len() * BLOCK_ENTRY_LEN
            + 2 * CHECKSUM_LEN,
    );
    idx.extend_from_slice(&INDEX_MAGIC);
    idx.extend_from_slice(&PACK_FORMAT_VERSION.to_le_bytes());
    idx.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    idx.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    let mut fanout = [0u32; 256];
    for e in &entries {
        fanout[e.0.as_bytes()[0] as usize] += 1;
    }
    let mut total = 0u32;
    for f in fanout {
        total += f;
        idx.extend_from_slice(&total.to_le_bytes());
    }
    for e in &entries {
        idx.extend_from_slice(e.0.as_bytes());
    }
    for e in &entries {
        idx.extend_from_slice(&e.1.to_le_bytes());
        idx.extend_from_slice(&e.2.to_le_bytes());
        idx.extend_from_slice(&e.3.to_le_bytes());
    }
    for b in &blocks {
        idx.extend_from_slice(&b.0.to_le_bytes());
        idx.extend_from_slice(&b.1.to_le_bytes());
        idx.extend_from_slice(&b.2.to_le_bytes());
    }
    idx.extend_from_slice(pack_sum.as_bytes());
    let idx_sum = blake3::hash(&idx);
    idx.extend_from_slice(idx_sum.as_bytes());
    {
        let mut f = File::create(tmp_index).at(tmp_index)?;
        f.write_all(&idx).at(tmp_index)?;
        f.sync_all().at(tmp_index)?;
    }

    let name = format!("pack-{}", hex(pack_sum.as_bytes()));
    let pack_path = dir.join(format!("{name}.pack"));
    let index_path = dir.join(format!("{name}.idx"));
    // The index is renamed last: a pack is visible once its index exists.
    fs::rename(tmp_pack, &pack_path).at(&pack_path)?;
    fs::rename(tmp_index, &index_path).at(&index_path)?;
    super::journal::sync_dir(dir)?;
    Ok(WrittenPack {
        name,
        pack_path,
        index_path,
        objects: entries.len(),
        blocks: blocks.len(),
        bytes,
    })
}

struct HashingWriter<W> {
    inner: W,
    hasher: blake3::Hasher,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: blake3::Hasher::new(),
        }
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The layout of a parsed index, with offsets into its bytes.
#[derive(Debug, Clone, Copy)]
pub struct IndexLayout {
    pub objects: usize,
    pub blocks: usize,
    ids_at: usize,
    entries_at: usize,
    blocks_at: usize,
    trailer_at: usize,
}

impl IndexLayout {
    /// The layout of an index of `objects` ids and `blocks` blocks, and the
    /// index's total size; `None` when that does not fit in a `usize`.
    fn of(objects: usize, blocks: usize) -> Option<(IndexLayout, usize)> {
        let ids_at = INDEX_HEADER_LEN + FANOUT_LEN;
        let entries_at = ids_at.checked_add(objects.checked_mul(ID_LEN)?)?;
        let blocks_at = entries_at.checked_add(objects.checked_mul(INDEX_ENTRY_LEN)?)?;
        let trailer_at = blocks_at.checked_add(blocks.checked_mul(BLOCK_ENTRY_LEN)?)?;
        let size = trailer_at.checked_add(2 * CHECKSUM_LEN)?;
        let layout = IndexLayout {
            objects,
            blocks,
            ids_at,
            entries_at,
            blocks_at,
            trailer_at,
        };
        Some((layout, size))
    }

    /// The size in bytes of the index this layout describes.
    fn index_len(&self) -> usize {
        self.trailer_at + 2 * CHECKSUM_LEN
    }
}

/// Checks an index's header, size and fan-out, without hashing it. Never panics.
pub fn parse_index(idx: &[u8]) -> Result<IndexLayout, String> {
    IndexView::parse(idx).map(|view| view.layout)
}

/// Checks the parts of an index that need a full pass: its checksum and the
/// order of its ids. Never panics, even when `layout` was parsed from other
/// bytes (that is an error).
pub fn verify_index(idx: &[u8], layout: &IndexLayout) -> Result<(), String> {
    if layout.index_len() != idx.len() {
        return Err(format!(
            "index layout is for {} bytes, the index has {}",
            layout.index_len(),
            idx.len()
        ));
    }
    IndexView {
        bytes: idx,
        layout: *layout,
    }
    .verify()
}

/// A pack index read in place: lookups over borrowed bytes (a mapped file,
/// or any slice), with no copy and no allocation.
///
/// [`IndexView::parse`] checks the header, the size and the fan-out table.
/// Every accessor is bounds-checked on its own as well, so a view over a
/// corrupt index answers "not found" or `None`, never panics and never
/// slices out of bounds, whether or not [`IndexView::verify`] passed. Until
/// it has, answers may be wrong (ids out of order defeat the binary search).
#[derive(Debug, Clone, Copy)]
pub struct IndexView<'a> {
    bytes: &'a [u8],
    layout: IndexLayout,
}

impl<'a> IndexView<'a> {
    /// Checks an index's header, size and fan-out, without hashing it.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        if bytes.len() < INDEX_HEADER_LEN + FANOUT_LEN + 2 * CHECKSUM_LEN {
            return Err(format!("{} bytes is too short for an index", bytes.len()));
        }
        if bytes[..4] != INDEX_MAGIC {
            return Err("not a pack index (bad magic)".into());
        }
        let header = |at| le_u32(bytes, at).expect("the header is present");
        let version = header(4);
        if version != PACK_FORMAT_VERSION {
            return Err(format!(
                "pack index version {version}, expected {PACK_FORMAT_VERSION}"
            ));
        }
        let objects = header(8) as usize;
        let blocks = header(12) as usize;
        let (layout, size) = IndexLayout::of(objects, blocks).ok_or_else(|| {
            format!("index of {objects} objects and {blocks} blocks is too large")
        })?;
        if size != bytes.len() {
            return Err(format!(
                "index of {} objects and {} blocks should be {} bytes, not {}",
                objects,
                blocks,
                size,
                bytes.len()
            ));
        }
        let view = IndexView { bytes, layout };
        let mut prev = 0;
        for b in 0..=255u8 {
            let f = view.fanout(b);
            if f < prev {
                return Err(format!("fan-out table decreases at byte {b:#04x}"));
            }
            prev = f;
        }
        if prev != objects {
            return Err(format!(
                "fan-out table counts {prev} objects, header {objects}"
            ));
        }
        Ok(view)
    }

    pub fn layout(&self) -> IndexLayout {
        self.layout
    }

    /// Number of ids (objects) in the index.
    pub fn object_count(&self) -> usize {
        self.layout.objects
    }

    /// Number of entries in the block table.
    pub fn block_count(&self) -> usize {
        self.layout.blocks
    }

    /// Checks what needs a full pass: the checksum, then the id order.
    pub fn verify(&self) -> Result<(), String> {
        self.verify_checksum()?;
        self.verify_order()
    }

    /// Checks the index's own checksum, its last 32 bytes.
    pub fn verify_checksum(&self) -> Result<(), String> {
        let end = self.layout.trailer_at + CHECKSUM_LEN;
        let (Some(covered), Some(recorded)) = (self.bytes.get(..end), self.bytes.get(end..)) else {
            return Err("index checksum lies outside the index".into());
        };
        if blake3::hash(covered).as_bytes()[..] != *recorded {
            return Err("index checksum mismatch".into());
        }
        Ok(())
    }

    /// Checks that ids are strictly ascending and each sits inside the
    /// fan-out range of its first byte, which is what lookups rely on.
    pub fn verify_order(&self) -> Result<(), String> {
        let mut prev: Option<&[u8]> = None;
        for i in 0..self.layout.objects {
            let Some(id) = self.id_bytes(i) else {
                return Err(format!("id at position {i} lies outside the index"));
            };
            if prev.is_some_and(|p| p >= id) {
                return Err(format!("ids out of order at position {i}"));
            }
            let (lo, hi) = self.fanout_range(id[0]);
            if i < lo || i >= hi {
                return Err(format!("id at position {i} is outside its fan-out range"));
            }
            prev = Some(id);
        }
        Ok(())
    }

    /// The checksum of the pack this index describes (the trailer).
    pub fn pack_checksum(&self) -> &'a [u8] {
        let at = self.layout.trailer_at;
        self.bytes.get(at..at + CHECKSUM_LEN).unwrap_or(&[])
    }

    /// The id at `position` in sorted order.
    pub fn id(&self, position: usize) -> Option<ObjectId> {
        self.id_bytes(position).and_then(ObjectId::from_slice)
    }

    /// Every id, in index (sorted, once verified) order.
    pub fn ids(&self) -> impl Iterator<Item = ObjectId> + 'a {
        self.bytes
            .get(self.layout.ids_at..self.layout.entries_at)
            .unwrap_or(&[])
            .chunks_exact(ID_LEN)
            .filter_map(ObjectId::from_slice)
    }

    /// The position of `id`, if the index holds it.
    pub fn position(&self, id: &ObjectId) -> Option<usize> {
        let (i, hi) = self.lower_bound(id.as_bytes());
        (i < hi && self.id_bytes(i) == Some(&id.as_bytes()[..])).then_some(i)
    }

    /// Appends the ids that start with `prefix`, in sorted order.
    pub fn ids_with_prefix(&self, prefix: &Prefix, out: &mut Vec<ObjectId>) {
        let (lo, hi) = self.lower_bound(prefix.lower_bound().as_bytes());
        for i in lo..hi {
            match self.id(i) {
                Some(id) if prefix.matches(&id) => out.push(id),
                _ => break,
            }
        }
    }

    /// The entry at `position`: (block, offset of the record in the
    /// decompressed block, record length).
    pub fn entry(&self, position: usize) -> Option<(u32, u32, u32)> {
        if position >= self.layout.objects {
            return None;
        }
        let at = self.layout.entries_at + position * INDEX_ENTRY_LEN;
        Some((
            le_u32(self.bytes, at)?,
            le_u32(self.bytes, at + 4)?,
            le_u32(self.bytes, at + 8)?,
        ))
    }

    /// Block `n` of the block table: (offset in the pack, compressed length,
    /// decompressed length).
    pub fn block_entry(&self, n: u32) -> Option<(u64, u32, u32)> {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n < self.layout.blocks)?;
        let at = self.layout.blocks_at + n * BLOCK_ENTRY_LEN;
        Some((
            le_u64(self.bytes, at)?,
            le_u32(self.bytes, at + 8)?,
            le_u32(self.bytes, at + 12)?,
        ))
    }

    fn id_bytes(&self, position: usize) -> Option<&'a [u8]> {
        if position >= self.layout.objects {
            return None;
        }
        let at = self.layout.ids_at + position * ID_LEN;
        self.bytes.get(at..at + ID_LEN)
    }

    /// Fan-out entry `b`: the number of ids whose first byte is <= `b`.
    fn fanout(&self, b: u8) -> usize {
        le_u32(self.bytes, INDEX_HEADER_LEN + 4 * b as usize).map_or(0, |f| f as usize)
    }

    /// The positions of the ids whose first byte is `first`, clamped to the
    /// id table so that a corrupt fan-out cannot send a search outside it.
    fn fanout_range(&self, first: u8) -> (usize, usize) {
        let hi = self.fanout(first).min(self.layout.objects);
        let lo = match first {
            0 => 0,
            _ => self.fanout(first - 1),
        };
        (lo.min(hi), hi)
    }

    /// Position of the first id >= `key` within its fan-out range, and the
    /// range's end.
    fn lower_bound(&self, key: &[u8; ID_LEN]) -> (usize, usize) {
        let (mut lo, hi) = self.fanout_range(key[0]);
        let mut len = hi - lo;
        while len > 0 {
            let half = len / 2;
            if self.id_bytes(lo + half).is_some_and(|id| id < &key[..]) {
                lo += half + 1;
                len -= half + 1;
            } else {
                len = half;
            }
        }
        (lo, hi)
    }
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    let bytes = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// An open pack and its index.
pub struct Pack {
    name: String,
    pack_path: PathBuf,
    index_path: PathBuf,
    pack: Mmap,
    index: Mmap,
    layout: IndexLayout,
    /// Whether the index's checksum and id order were checked, done on first
    /// use so that opening a store costs the same however many packs it has.
    index_verified: OnceLock<Result<(), String>>,
    cache: Mutex<Vec<(u32, Arc<Vec<u8>>)>>,
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
    // SAFETY: packs and their indexes (and the lineage index, lineage_index/)
    // are immutable once renamed into place (they are written under
    // temporary names and never reopened for writing), and the store lock
    // keeps other sessctl writers out. A foreign process truncating the file
    // would be outside that contract.
    unsafe { Mmap::map(&file) }.at(path)
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
            || le_u32(&pack, 4) != Some(PACK_FORMAT_VERSION)
            || pack[8..16] != [0u8; 8]
        {
            return Err(Error::CorruptFile {
                path: pack_path,
                offset: 0,
                reason: format!("not a version-{PACK_FORMAT_VERSION} pack"),
            });
        }
        Ok(Pack {
            name: name.to_owned(),
            pack_path,
            index_path,
            pack,
            index,
            layout,
            index_verified: OnceLock::new(),
            cache: Mutex::new(Vec::with_capacity(BLOCK_CACHE)),
        })
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

    pub fn contains(&self, id: &ObjectId) -> Result<bool> {
        self.ensure_index()?;
        Ok(self.view().position(id).is_some())
    }

    /// Ids in this pack that start with `prefix`.
    pub fn ids_with_prefix(&self, prefix: &Prefix, out: &mut Vec<ObjectId>) -> Result<()> {
        self.ensure_index()?;
        self.view().ids_with_prefix(prefix, out);
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

    /// Reads and verifies an object.
    pub fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        self.ensure_index()?;
        let view = self.view();
        let Some((block, offset, len)) = view.position(id).and_then(|i| view.entry(i)) else {
            return Ok(None);
        };
        let (offset, len) = (offset as usize, len as usize);
        let data = self.block(block).map_err(|r| Error::corrupt(*id, r))?;
        let Some(record) = offset
            .checked_add(len)
            .and_then(|end| data.get(offset..end))
        else {
            return Err(Error::corrupt(
                *id,
                format!("{}: record lies outside block {block}", self.name),
            ));
        };
        let Some((&code, payload)) = record.split_first() else {
            return Err(Error::corrupt(*id, format!("{}: empty record", self.name)));
        };
        let kind = ObjectKind::from_code(code).ok_or_else(|| {
            Error::corrupt(
                *id,
                format!("{}: unknown object kind code {code}", self.name),
            )
        })?;
        EncodedObject::verified(*id, kind, payload.to_vec())
            .map(Some)
            .map_err(|r| Error::corrupt(*id, format!("in {}: {r}", self.name)))
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
        let Some((offset, clen, rlen)) = self.view().block_entry(n) else {
            return Err(format!("{}: block {n} does not exist", self.name));
        };
        let (clen, rlen) = (clen as usize, rlen as usize);
        let body_end = self.pack.len() - CHECKSUM_LEN;
        let Some(compressed) = usize::try_from(offset)
            .ok()
            .filter(|&o| o >= PACK_HEADER_LEN)
            .and_then(|o| Some(o..o.checked_add(clen)?))
            .filter(|r| r.end <= body_end)
            .map(|r| &self.pack[r])
        else {
            return Err(format!("{}: block {n} lies outside the pack", self.name));
        };
        let data = super::journal::decompress(compressed, rlen)
            .map_err(|e| format!("{}: block {n}: {e}", self.name))?;
        if data.len() != rlen {
            return Err(format!(
                "{}: block {n} decompressed to {} bytes, not {rlen}",
                self.name,
                data.len()
            ));
        }
        let data = Arc::new(data);
        let mut cache = self.cache.lock().expect("block cache lock");
        if cache.len() >= BLOCK_CACHE {
            cache.remove(0);
        }
        cache.push((n, data.clone()));
        Ok(data)
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
        // Pack order: each block is inflated once.
        let ids = match self.ids_in_pack_order() {
            Ok(ids) => ids,
            Err(e) => {
                problems.push(e.to_string());
                return problems;
            }
        };
        for id in ids {
            if let Err(e) = self.read(&id) {
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
