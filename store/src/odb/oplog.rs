//! The op-log archive: `oplog/<first>-<last>.ops`, the operations of packed
//! journal segments, each file sealed and written once in the journal's
//! frame format (objects-format.md, "Operation log").

use std::fs;
use std::path::{Path, PathBuf};

use super::journal::{self, FrameBuilder};
use super::{Durability, RawOp};
use crate::error::{Error, IoResultExt, Result};
use crate::odb::atomic_file::AtomicFile;

/// The zstd level of an op-log file: written once by a repack, small.
const OPLOG_ZSTD_LEVEL: i32 = 12;

/// `oplog/<first>-<last>.ops` files, sorted: (first, last, path).
pub(super) fn oplog_files(dir: &Path) -> Result<Vec<(u64, u64, PathBuf)>> {
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
pub(super) fn write_oplog_file(dir: &Path, ops: &[RawOp]) -> Result<()> {
    fs::create_dir_all(dir).at(dir)?;
    let (first, last) = (ops[0].0, ops[ops.len() - 1].0);
    let path = dir.join(format!("{first:016}-{last:016}.ops"));
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&journal::OPLOG_MAGIC);
    bytes.extend_from_slice(&journal::OPLOG_FORMAT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&first.to_le_bytes());
    let mut frames = Vec::new();
    for chunk in ops.chunks(4096) {
        let mut frame = FrameBuilder::new();
        for (seq, op) in chunk {
            frame.push_op(*seq, op);
        }
        frames.extend_from_slice(&frame.finish());
    }
    // Written once, read rarely (the full history): worth a high level.
    let mut z = zstd::bulk::Compressor::new(OPLOG_ZSTD_LEVEL)
        .map_err(|e| crate::error::OdbError::Compression(e.to_string()))?;
    z.include_checksum(true)
        .and_then(|()| z.include_contentsize(true))
        .map_err(|e| crate::error::OdbError::Compression(e.to_string()))?;
    let compressed = z
        .compress(&frames)
        .map_err(|e| crate::error::OdbError::Compression(e.to_string()))?;
    bytes.extend_from_slice(&compressed);
    AtomicFile::replace(&path, &bytes, Durability::Sync)?;
    if let Some(parent) = dir.parent() {
        journal::sync_dir(parent)?;
    }
    Ok(())
}

pub(super) fn read_oplog_file(path: &Path) -> Result<Vec<RawOp>> {
    let buf = fs::read(path).at(path)?;
    let bad = |offset: usize, reason: String| Error::CorruptFile {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason,
    };
    if buf.len() < 16 || buf[..4] != journal::OPLOG_MAGIC {
        return Err(bad(0, "not an operation log file".into()));
    }
    let version = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    let buf = match version {
        journal::OPLOG_FORMAT_V2 => buf,
        journal::OPLOG_FORMAT_VERSION => {
            // One zstd frame of the frames, whose declared size bounds
            // what is allocated.
            let raw_len = match zstd::zstd_safe::get_frame_content_size(&buf[16..]) {
                Ok(Some(n)) if n <= journal::MAX_OBJECT_SIZE as u64 => n as usize,
                _ => return Err(bad(16, "damaged or oversized zstd frame".into())),
            };
            let mut frames = Vec::new();
            journal::decompress_into(&buf[16..], raw_len, &mut frames).map_err(|r| bad(16, r))?;
            let mut whole = buf[..16].to_vec();
            whole.extend_from_slice(&frames);
            whole
        }
        v => {
            return Err(bad(
                4,
                format!(
                    "operation log version {v}, expected {} or {}",
                    journal::OPLOG_FORMAT_V2,
                    journal::OPLOG_FORMAT_VERSION
                ),
            ))
        }
    };
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
