//! The op-log archive: `oplog/<first>-<last>.ops`, the operations of packed
//! journal segments, each file sealed and written once in the journal's
//! frame format (objects-format.md, "Operation log").

use std::fs;
use std::path::{Path, PathBuf};

use super::journal::{self, FrameBuilder};
use super::{Durability, RawOp};
use crate::error::{Error, IoResultExt, Result};
use crate::odb::atomic_file::AtomicFile;

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
    for chunk in ops.chunks(4096) {
        let mut frame = FrameBuilder::new();
        for (seq, op) in chunk {
            frame.push_op(*seq, op);
        }
        bytes.extend_from_slice(&frame.finish());
    }
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
