//! Writing a pack: objects gathered into blocks in the order given, each
//! block zstd-compressed (with the pack's dictionary, when it has one), or
//! whole blocks of another pack copied as they are (gc), with the
//! dictionary they name; then the index of sorted ids; both files durable
//! before the index makes the pack visible.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::dictionary::{self, BlockCompressor};
use super::{BlockRecord, Pack};
use super::{
    BLOCK_ENTRY_LEN, CHECKSUM_LEN, COLD_BLOCK_TARGET, COLD_DICTIONARY_SIZE, COLD_ZSTD_LEVEL,
    DEFAULT_BLOCK_TARGET, DEFAULT_DICTIONARY_SIZE, DEFAULT_ZSTD_LEVEL, DICTIONARY_ENTRY_LEN,
    FANOUT_LEN, INDEX_ENTRY_LEN, INDEX_HEADER_LEN, INDEX_MAGIC, PACK_FORMAT_VERSION,
    PACK_HEADER_LEN, PACK_MAGIC,
};
use crate::error::{Error, IoResultExt, OdbError, Result};
use crate::hash::{hex, IdSet, ObjectId, ID_LEN};
use crate::object::{EncodedObject, ObjectKind};
use crate::odb::atomic_file::AtomicFile;

/// How packs are written (objects-format.md, "Packs").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackOptions {
    pub block_target: usize,
    pub zstd_level: i32,
    /// The largest dictionary a pack trains on its own records (0: none).
    pub dictionary_size: usize,
}

impl PackOptions {
    /// A hot pack's settings (auto-pack of sealed segments, gc): fast.
    pub fn hot() -> Self {
        PackOptions {
            block_target: DEFAULT_BLOCK_TARGET,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            dictionary_size: DEFAULT_DICTIONARY_SIZE,
        }
    }

    /// A cold pack's (a full repack's): larger blocks, a higher level and a
    /// larger dictionary, for bytes that will stay as they are.
    pub fn cold() -> Self {
        PackOptions {
            block_target: COLD_BLOCK_TARGET,
            zstd_level: COLD_ZSTD_LEVEL,
            dictionary_size: COLD_DICTIONARY_SIZE,
        }
    }
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions::hot()
    }
}

/// Dictionary `d` of `pack` and its checksum, checked; a damaged one is
/// `CorruptFile` naming the pack.
fn checked_dictionary(pack: &Pack, d: usize) -> Result<(&[u8], [u8; 32])> {
    pack.dictionary_bytes(d)
        .map_err(|reason| Error::CorruptFile {
            path: pack.paths()[0].to_path_buf(),
            offset: 0,
            reason,
        })
}

/// What a pack write produced.
#[derive(Debug, Clone)]
pub struct WrittenPack {
    pub name: String,
    pub pack_path: PathBuf,
    pub index_path: PathBuf,
    pub objects: usize,
    pub blocks: usize,
    /// Of those, how many were copied from other packs as they were.
    pub copied_blocks: usize,
    pub bytes: u64,
}

/// Writes `objects` (in the given order; duplicates skipped) as a new pack in
/// `dir`. The pack is durable and visible under its final name on return.
pub fn write_pack(dir: &Path, objects: &[EncodedObject], opts: PackOptions) -> Result<WrittenPack> {
    let mut w = PackWriter::create(dir, opts)?;
    let records: Vec<&[u8]> = objects.iter().map(EncodedObject::payload).collect();
    w.train_dictionary(&records)?;
    for obj in objects {
        w.push(obj.id(), obj.kind(), obj.payload())?;
    }
    w.finish()
}

/// A pack being written: objects go into blocks in the order pushed, and
/// whole blocks of other packs can be copied in as they are
/// ([`PackWriter::copy_block`]). Nothing is visible until
/// [`PackWriter::finish`]; dropping the writer deletes its files.
pub struct PackWriter {
    opts: PackOptions,
    dir: PathBuf,
    tmp_pack: PathBuf,
    out: HashingWriter<BufWriter<AtomicFile>>,
    index_file: AtomicFile,
    /// Compresses pushed blocks, with the pack's own dictionary once set.
    compressor: BlockCompressor,
    /// The dictionary table entry of `compressor`'s dictionary, plus one
    /// (0: none), as pushed blocks name it.
    own_dictionary: u32,
    /// (pack offset, length, blake3) per dictionary written.
    dictionaries: Vec<(u64, u32, [u8; 32])>,
    /// The objects pushed (not those of copied blocks).
    seen: IdSet,
    /// (id, block, offset, len) per object.
    entries: Vec<(ObjectId, u32, u32, u32)>,
    /// (pack offset, compressed length, raw length, dictionary) per block.
    blocks: Vec<(u64, u32, u32, u32)>,
    /// A compressed block, reused.
    frame: Vec<u8>,
    /// The block being gathered, not compressed yet.
    block: Vec<u8>,
    offset: u64,
    /// Blocks copied as they were, for the caller's report.
    copied: usize,
}

impl std::fmt::Debug for PackWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackWriter")
            .field("tmp_pack", &self.tmp_pack)
            .field("objects", &self.entries.len())
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

impl PackWriter {
    /// Starts a pack in `dir` (under a `.tmp-` name).
    pub fn create(dir: &Path, opts: PackOptions) -> Result<PackWriter> {
        // Both files are named after the pack's checksum, known once it is
        // written; should anything fail, dropping them deletes them.
        let pack_file = AtomicFile::create(&dir.join("new.pack"))?;
        let index_file = AtomicFile::create(&dir.join("new.idx"))?;
        let tmp_pack = pack_file.path().to_path_buf();
        let compressor =
            BlockCompressor::new(opts.zstd_level, None).map_err(OdbError::Compression)?;
        let mut out = HashingWriter::new(BufWriter::with_capacity(1 << 20, pack_file));
        let mut header = [0u8; PACK_HEADER_LEN];
        header[..4].copy_from_slice(&PACK_MAGIC);
        header[4..8].copy_from_slice(&PACK_FORMAT_VERSION.to_le_bytes());
        // The block count is not known yet; it lives in the index, and the
        // header keeps it zero so that the pack can be streamed.
        out.write_all(&header).at(&tmp_pack)?;
        Ok(PackWriter {
            opts,
            dir: dir.to_path_buf(),
            tmp_pack,
            out,
            index_file,
            compressor,
            own_dictionary: 0,
            dictionaries: Vec::new(),
            seen: IdSet::default(),
            entries: Vec::new(),
            blocks: Vec::new(),
            frame: Vec::new(),
            block: Vec::with_capacity(opts.block_target * 2),
            offset: PACK_HEADER_LEN as u64,
            copied: 0,
        })
    }

    /// Trains the pack's own dictionary on `records` (payloads of the
    /// objects about to be pushed; as many as the options' dictionary size
    /// calls for are sampled) and compresses every block pushed from here on
    /// with it. Returns whether one was trained: too few records, or a
    /// dictionary size of 0, train none, and blocks go without.
    pub fn train_dictionary(&mut self, records: &[&[u8]]) -> Result<bool> {
        match dictionary::train(records, self.opts.dictionary_size) {
            Some(dict) => {
                let d = self.write_dictionary(&dict)?;
                self.use_dictionary(d, &dict)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Takes dictionary `d` of `pack` as this pack's own: carried into this
    /// pack (see [`PackWriter::copy_block`]) and used for every block pushed
    /// from here on. gc takes the largest source pack's, which the blocks it
    /// copies from there name already.
    pub fn adopt_dictionary(&mut self, pack: &Pack, d: usize) -> Result<()> {
        let here = self.carry_dictionary(pack, d)?;
        let (bytes, _) = checked_dictionary(pack, d)?;
        self.use_dictionary(here, bytes)
    }

    /// Whether pushed blocks are compressed with a dictionary.
    pub fn has_dictionary(&self) -> bool {
        self.compressor.has_dictionary()
    }

    fn use_dictionary(&mut self, here: u32, bytes: &[u8]) -> Result<()> {
        // The block gathered so far goes with the dictionary it began under.
        self.cut()?;
        self.compressor = BlockCompressor::new(self.opts.zstd_level, Some(bytes))
            .map_err(OdbError::Compression)?;
        self.own_dictionary = here + 1;
        Ok(())
    }

    /// Writes `dict` into the pack as the next dictionary; its table index.
    fn write_dictionary(&mut self, dict: &[u8]) -> Result<u32> {
        self.cut()?;
        let len = u32::try_from(dict.len())
            .map_err(|_| OdbError::Compression("dictionary too large".into()))?;
        self.out.write_all(dict).at(&self.tmp_pack)?;
        self.dictionaries
            .push((self.offset, len, *blake3::hash(dict).as_bytes()));
        self.offset += dict.len() as u64;
        Ok(self.dictionaries.len() as u32 - 1)
    }

    /// Dictionary `d` of `pack` in this pack: written here unless a copy of
    /// it (the same checksum) is already; its table index here.
    fn carry_dictionary(&mut self, pack: &Pack, d: usize) -> Result<u32> {
        let (bytes, sum) = checked_dictionary(pack, d)?;
        if let Some(i) = self.dictionaries.iter().position(|e| e.2 == sum) {
            return Ok(i as u32);
        }
        self.write_dictionary(bytes)
    }

    /// Makes room for `objects` more objects at once.
    pub fn reserve(&mut self, objects: usize) {
        self.entries.reserve(objects);
    }

    /// Objects written so far.
    pub fn objects(&self) -> usize {
        self.entries.len()
    }

    /// Adds one object (skipped when it was pushed already) to the block
    /// being gathered, cutting the block once it is full.
    pub fn push(&mut self, id: ObjectId, kind: ObjectKind, payload: &[u8]) -> Result<()> {
        if !self.seen.insert(id) {
            return Ok(());
        }
        let record_len = 1 + payload.len();
        if !self.block.is_empty() && self.block.len() + record_len > self.opts.block_target {
            self.cut()?;
        }
        let len = u32::try_from(record_len).map_err(|_| OdbError::ObjectTooLarge {
            id,
            size: payload.len() as u64,
            limit: u64::from(u32::MAX),
        })?;
        self.entries
            .push((id, self.blocks.len() as u32, self.block.len() as u32, len));
        self.block.push(kind.code());
        self.block.extend_from_slice(payload);
        Ok(())
    }

    /// Compresses the block being gathered and writes it.
    fn cut(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let mut dict = self.own_dictionary;
        if self.block.len() > crate::odb::journal::STREAM_VERIFY_ABOVE && dict != 0 {
            // A block read as a stream (one huge object) gains nothing from
            // a dictionary: it goes without, as a version-1 pack's did.
            BlockCompressor::new(self.opts.zstd_level, None)
                .and_then(|mut plain| plain.compress(&self.block, &mut self.frame))
                .map_err(OdbError::Compression)?;
            dict = 0;
        } else {
            self.compressor
                .compress(&self.block, &mut self.frame)
                .map_err(OdbError::Compression)?;
        }
        let c = &self.frame;
        self.out.write_all(c).at(&self.tmp_pack)?;
        self.blocks
            .push((self.offset, c.len() as u32, self.block.len() as u32, dict));
        self.offset += c.len() as u64;
        self.block.clear();
        Ok(())
    }

    /// Copies block `n` of `pack` into this pack as it is: its compressed
    /// bytes verbatim and its block-table entry (at the new offset); returns
    /// its number here. Nothing is inflated or compressed. The caller then
    /// names the block's objects with [`PackWriter::copied_object`] (their
    /// offsets and lengths as `pack`'s index has them), and has checked
    /// `pack`'s checksum (so these are the bytes its writer wrote) and that
    /// no other copy of them is in this pack.
    ///
    /// This is the one place a block moves between packs: a block's
    /// compression context (its zstd frame, and whatever else a later pack
    /// version has a block refer to) travels with it from here.
    pub fn copy_block(&mut self, pack: &Pack, n: u32) -> Result<u32> {
        let corrupt = |reason: String| Error::CorruptFile {
            path: pack.paths()[0].to_path_buf(),
            offset: 0,
            reason,
        };
        let (bytes, rlen) = pack.compressed_block(n).map_err(corrupt)?;
        let rlen = u32::try_from(rlen).map_err(|_| corrupt(format!("block {n} is too large")))?;
        self.cut()?;
        // Its dictionary comes along (once per pack it comes from).
        let dict = match pack.block_dictionary_ref(n) {
            None => return Err(corrupt(format!("block {n} does not exist"))),
            Some(0) => 0,
            Some(d) => self.carry_dictionary(pack, d as usize - 1)? + 1,
        };
        let block = self.blocks.len() as u32;
        self.out.write_all(bytes).at(&self.tmp_pack)?;
        self.blocks
            .push((self.offset, bytes.len() as u32, rlen, dict));
        self.offset += bytes.len() as u64;
        self.copied += 1;
        Ok(block)
    }

    /// Names an object of a block copied here as `block`
    /// ([`PackWriter::copy_block`]): its record at `record.offset`, of
    /// `record.len` bytes, as the source's index said.
    pub fn copied_object(&mut self, block: u32, record: &BlockRecord) {
        self.entries
            .push((record.id, block, record.offset, record.len));
    }

    /// Writes the last block, the checksum and the index; makes both files
    /// durable and renames them into place (the index last: a pack is
    /// visible once its index exists).
    pub fn finish(mut self) -> Result<WrittenPack> {
        self.cut()?;
        let PackWriter {
            dir,
            tmp_pack,
            mut out,
            mut index_file,
            mut entries,
            blocks,
            dictionaries,
            offset,
            copied,
            ..
        } = self;
        let pack_sum = out.hasher.finalize();
        out.write_all(pack_sum.as_bytes()).at(&tmp_pack)?;
        let bytes = offset + CHECKSUM_LEN as u64;
        // Flushes the buffer; the pack file is synced when committed.
        let mut pack_file = out
            .into_inner()
            .into_inner()
            .map_err(|e| Error::io(&tmp_pack, e.into_error()))?;

        entries.sort_unstable_by_key(|e| e.0);
        if let Some(w) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
            // The caller's to prevent: an index names each id once.
            return Err(Error::Invalid(format!(
                "pack writer: {} written twice into one pack",
                w[0].0
            )));
        }
        let mut idx = Vec::with_capacity(
            INDEX_HEADER_LEN
                + FANOUT_LEN
                + entries.len() * (ID_LEN + INDEX_ENTRY_LEN)
                + blocks.len() * BLOCK_ENTRY_LEN
                + dictionaries.len() * DICTIONARY_ENTRY_LEN
                + 2 * CHECKSUM_LEN,
        );
        idx.extend_from_slice(&INDEX_MAGIC);
        idx.extend_from_slice(&PACK_FORMAT_VERSION.to_le_bytes());
        idx.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        idx.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
        idx.extend_from_slice(&(dictionaries.len() as u32).to_le_bytes());
        idx.extend_from_slice(&0u32.to_le_bytes());
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
            idx.extend_from_slice(&b.3.to_le_bytes());
        }
        for d in &dictionaries {
            idx.extend_from_slice(&d.0.to_le_bytes());
            idx.extend_from_slice(&d.1.to_le_bytes());
            idx.extend_from_slice(&0u32.to_le_bytes());
            idx.extend_from_slice(&d.2);
        }
        idx.extend_from_slice(pack_sum.as_bytes());
        let idx_sum = blake3::hash(&idx);
        idx.extend_from_slice(idx_sum.as_bytes());
        index_file.write_all(&idx).at(index_file.path())?;

        let name = format!("pack-{}", hex(pack_sum.as_bytes()));
        let pack_path = dir.join(format!("{name}.pack"));
        let index_path = dir.join(format!("{name}.idx"));
        pack_file.set_file_name(&format!("{name}.pack"));
        index_file.set_file_name(&format!("{name}.idx"));
        // Both are durable before either is renamed, and the index is renamed
        // last: a pack is visible once its index exists.
        AtomicFile::commit_all([pack_file, index_file])?;
        Ok(WrittenPack {
            name,
            pack_path,
            index_path,
            objects: entries.len(),
            blocks: blocks.len(),
            copied_blocks: copied,
            bytes,
        })
    }
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

    fn into_inner(self) -> W {
        self.inner
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
