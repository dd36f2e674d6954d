//! The derived index: what listing and lookup need without reading object
//! bodies (current refs, per-session and per-conversation summaries, reflog
//! entries, open run claims), kept in sled.
//!
//! It is never the only copy of anything. Every entry is a function of the
//! operations (journal and op log) and the objects they name; the index
//! records the sequence number and hash of the last operation it applied,
//! catches up from there on open, and rebuilds from scratch when that
//! operation is gone or differs (sled's flush is not a durable fsync, so the
//! index may have seen an operation whose frame a crash tore off). Each
//! operation is applied as one atomic sled batch.
//!
//! Keys: `m:applied` the last operation applied; `r:<ref>` a ref's target,
//! `l:<ref>\0<seq><i>` its reflog entries, `h:<ref>` the hash of its newest
//! one; `s:<id>` session summaries; `c:<name>` conversation summaries,
//! `i:<conversation id>` the name it goes by, `a:<time><name>` activity
//! order; `u:<name>` open run claims.

mod apply;
mod conversations;
mod encoding;
mod refs;
mod runs;
mod summary;
pub mod table;

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, IndexError, Result};
use crate::odb::Odb;
use crate::refs::{Hash, Operation};

pub use crate::message::{content_text, user_text};
pub use summary::{ConversationInfo, RunClaim, SessionInfo};

const APPLIED: &[u8] = b"m:applied";

fn sled_err(e: sled::Error) -> Error {
    IndexError::Backend(e.to_string()).into()
}

fn key(prefix: &str, rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + rest.len());
    k.extend_from_slice(prefix.as_bytes());
    k.extend_from_slice(rest);
    k
}

/// Applied operations are written to sled in one batch every this many
/// operations (or keys): sled's per-batch cost is its IO threads waking,
/// and the index may lag the journal by design.
const FLUSH_EVERY_OPS: usize = 512;
const FLUSH_EVERY_KEYS: usize = 100_000;

#[derive(Debug, Default)]
struct Pending {
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    ops: usize,
}

/// The derived index of one store.
///
/// Recently applied operations sit in memory (read through, in order) and
/// reach sled together, as one atomic batch that ends with the marker of
/// the last operation it holds; a crash before that costs nothing, since
/// the next open catches up from the journal.
#[derive(Debug)]
pub struct Index {
    /// `None` only while the index is being dropped.
    db: Option<sled::Db>,
    pending: std::sync::Mutex<Pending>,
}

impl Drop for Index {
    fn drop(&mut self) {
        let _ = self.flush_pending();
        // sled 0.34 closes a database with a flush that loads its current
        // IO buffer and only then takes a reference to it, without pinning
        // the epoch that defers the buffer's free; an IO thread can swap the
        // buffer out in between, and AddressSanitizer then reports a
        // use-after-free (fuzz/README.md). A pin of the same collector, held
        // while sled closes, keeps every buffer retired meanwhile alive.
        let _pin = sled::pin();
        drop(self.db.take());
    }
}

/// Where catching up started from, for the open report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Applied this many operations from the journal tail.
    Applied(usize),
    /// The index was missing or disagreed with the journal and was rebuilt.
    Rebuilt(usize),
}

impl Index {
    /// Opens the index at `dir` (created if absent).
    pub fn open(dir: &Path) -> Result<Index> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(64 << 20)
            .open()
            .map_err(sled_err)?;
        Ok(Index {
            db: Some(db),
            pending: Default::default(),
        })
    }

    /// An index in a temporary directory, for stores that live in memory.
    pub fn temporary() -> Result<Index> {
        let db = sled::Config::new()
            .temporary(true)
            .open()
            .map_err(sled_err)?;
        Ok(Index {
            db: Some(db),
            pending: Default::default(),
        })
    }

    fn db(&self) -> &sled::Db {
        self.db
            .as_ref()
            .expect("the index is open until it is dropped")
    }

    /// One key, pending writes first.
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self
            .pending
            .lock()
            .expect("index pending lock")
            .writes
            .get(k)
        {
            return Ok(v.clone());
        }
        Ok(self.db().get(k).map_err(sled_err)?.map(|v| v.to_vec()))
    }

    /// Writes pending operations to sled as one atomic batch.
    pub fn flush_pending(&self) -> Result<()> {
        let mut p = self.pending.lock().expect("index pending lock");
        if p.writes.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        for (k, v) in std::mem::take(&mut p.writes) {
            match v {
                Some(v) => batch.insert(k, v),
                None => batch.remove(k),
            }
        }
        p.ops = 0;
        self.db().apply_batch(batch).map_err(sled_err)
    }

    /// Iterates a prefix after writing pending operations, so scans see them.
    fn scan(&self, prefix: &[u8]) -> Result<sled::Iter> {
        self.flush_pending()?;
        Ok(self.db().scan_prefix(prefix))
    }

    /// The last operation applied: (sequence number, hash).
    pub fn applied(&self) -> Result<Option<(u64, Hash)>> {
        let Some(v) = self.get(APPLIED)? else {
            return Ok(None);
        };
        if v.len() != 40 {
            return Ok(None);
        }
        let seq = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
        let hash: Hash = v[8..].try_into().expect("32 bytes");
        Ok(Some((seq, hash)))
    }

    /// Brings the index up to date with the durable operations, rebuilding
    /// it when it does not agree with them.
    pub fn catch_up(&self, odb: &Odb) -> Result<CatchUp> {
        let applied = self.applied()?;
        let from = applied.map(|a| a.0.saturating_sub(1)).unwrap_or(0);
        let raw = odb.backend().ops_after(from)?;
        let mut rest = raw.as_slice();
        if let Some((seq, hash)) = applied {
            match rest.first() {
                Some((s, bytes)) if *s == seq => {
                    let op = decode_op(*s, bytes)?;
                    if op.hash() != hash {
                        return self.rebuild(odb).map(CatchUp::Rebuilt);
                    }
                    rest = &rest[1..];
                }
                _ => return self.rebuild(odb).map(CatchUp::Rebuilt),
            }
        } else if self.db().first().map_err(sled_err)?.is_some() {
            // Entries but no applied marker: not ours to trust.
            return self.rebuild(odb).map(CatchUp::Rebuilt);
        }
        for (seq, bytes) in rest {
            self.apply(&decode_op(*seq, bytes)?, odb)?;
        }
        Ok(CatchUp::Applied(rest.len()))
    }

    /// Clears the index and applies every operation from the first.
    pub fn rebuild(&self, odb: &Odb) -> Result<usize> {
        *self.pending.lock().expect("index pending lock") = Pending::default();
        self.db().clear().map_err(sled_err)?;
        let ops = odb.backend().ops_after(0)?;
        for (seq, bytes) in &ops {
            self.apply(&decode_op(*seq, bytes)?, odb)?;
        }
        self.flush()?;
        Ok(ops.len())
    }

    /// Writes pending operations and asks sled to flush (not a durable
    /// fsync, spacejam/sled#1452: durability comes from the journal).
    pub fn flush(&self) -> Result<()> {
        self.flush_pending()?;
        self.db().flush().map_err(sled_err).map(|_| ())
    }
}

fn decode_op(seq: u64, bytes: &[u8]) -> Result<Operation> {
    let op = Operation::decode(bytes).map_err(|e| Error::CorruptOperation {
        seq,
        reason: e.to_string(),
    })?;
    if op.seq != seq {
        return Err(IndexError::MisplacedOperation { seq, found: op.seq }.into());
    }
    Ok(op)
}
