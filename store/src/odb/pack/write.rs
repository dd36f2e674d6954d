//! Writing a pack: objects gathered into blocks in the order given, each
//! block zstd-compressed, then the index of sorted ids; both files durable
//! before the index makes the pack visible.

use std::collections::HashSet;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{
    BLOCK_ENTRY_LEN, CHECKSUM_LEN, DEFAULT_BLOCK_TARGET, DEFAULT_ZSTD_LEVEL, FANOUT_LEN,
    INDEX_ENTRY_LEN, INDEX_HEADER_LEN, INDEX_MAGIC, PACK_FORMAT_VERSION, PACK_HEADER_LEN,
    PACK_MAGIC,
};
use crate::error::{Error, IoResultExt, OdbError, Result};
use crate::hash::{hex, ObjectId, ID_LEN};
use crate::object::EncodedObject;
use crate::odb::atomic_file::AtomicFile;

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
    // Both files are named after the pack's checksum, known once it is
    // written; should anything fail, dropping them deletes them.
    let mut pack_file = AtomicFile::create(&dir.join("new.pack"))?;
    let mut index_file = AtomicFile::create(&dir.join("new.idx"))?;
    let tmp_pack_path = pack_file.path().to_path_buf();
    let tmp_pack = tmp_pack_path.as_path();
    let mut seen = HashSet::with_capacity(objects.len());
    // (id, block, offset, len) per object; (pack offset, compressed, raw) per block.
    let mut entries: Vec<(ObjectId, u32, u32, u32)> = Vec::with_capacity(objects.len());
    let mut blocks: Vec<(u64, u32, u32)> = Vec::new();
    let mut compressor = zstd::bulk::Compressor::new(opts.zstd_level)
        .map_err(|e| OdbError::Compression(e.to_string()))?;
    compressor
        .include_checksum(true)
        .map_err(|e| OdbError::Compression(e.to_string()))?;

    let mut out = HashingWriter::new(BufWriter::with_capacity(1 << 20, &mut pack_file));
    let mut header = [0u8; PACK_HEADER_LEN];
    header[..4].copy_from_slice(&PACK_MAGIC);
    header[4..8].copy_from_slice(&PACK_FORMAT_VERSION.to_le_bytes());
    // The block count is not known yet; it lives in the index, and the
    // header keeps it zero so that the pack can be streamed.
    out.write_all(&header).at(tmp_pack)?;
    let mut offset = PACK_HEADER_LEN as u64;

    let mut block: Vec<u8> = Vec::with_capacity(opts.block_target * 2);
    let mut flush = |block: &mut Vec<u8>,
                     out: &mut HashingWriter<BufWriter<&mut AtomicFile>>,
                     offset: &mut u64,
                     blocks: &mut Vec<(u64, u32, u32)>|
     -> Result<()> {
        if block.is_empty() {
            return Ok(());
        }
        let c = compressor
            .compress(block)
            .map_err(|e| OdbError::Compression(e.to_string()))?;
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
        let len = u32::try_from(record_len).map_err(|_| OdbError::ObjectTooLarge {
            id: obj.id(),
            size: obj.payload().len() as u64,
            limit: u64::from(u32::MAX),
        })?;
        entries.push((obj.id(), blocks.len() as u32, block.len() as u32, len));
        block.push(obj.kind().code());
        block.extend_from_slice(obj.payload());
    }
    flush(&mut block, &mut out, &mut offset, &mut blocks)?;
    let pack_sum = out.hasher.finalize();
    out.write_all(pack_sum.as_bytes()).at(tmp_pack)?;
    let bytes = offset + CHECKSUM_LEN as u64;
    // Flushes the buffer; the pack file is synced when committed.
    out.into_inner()
        .into_inner()
        .map_err(|e| Error::io(tmp_pack, e.into_error()))?;

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
