//! Run claims on a remote store, alive exactly as long as the handle that
//! made them, on whatever machine it runs (objects-format.md, "Remote run
//! claims").
//!
//! A local store ties a claim to its process with a locked file in `runs/`,
//! which the kernel unlocks when the process dies. Across machines the
//! same job falls to PostgreSQL: the claiming handle takes a session-level
//! advisory lock on a connection of its own, before the operation that
//! makes the claim commits, and the server lets it go when that connection
//! ends (the process exits or dies, its machine goes away, or the handle is
//! dropped). Another handle that finds the claim in the index asks the
//! server whether the lock is still held.

use std::collections::BTreeSet;

use super::conn::Conn;

use super::RemoteBackend;
use crate::error::Result;

/// The connection that holds this handle's claims, and the runs it holds.
#[derive(Default)]
pub(super) struct Claims {
    conn: Option<Conn>,
    held: BTreeSet<u64>,
}

impl std::fmt::Debug for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claims").field("held", &self.held).finish()
    }
}

/// A handle let go: its claims go with it before the drop returns. The
/// server would let them go when the connection ends, but only once it has
/// noticed, a moment after the client hung up, when another handle may
/// already have asked and found them held.
impl Drop for Claims {
    fn drop(&mut self) {
        if let Some(c) = self.conn.as_mut().filter(|_| !self.held.is_empty()) {
            let _ = c.batch_execute("SELECT pg_advisory_unlock_all()");
        }
    }
}

/// Run `run`'s advisory lock, in PostgreSQL's two-key space (apart from
/// the one-key locks `init` takes): its sequence number's high and low 32
/// bits.
fn key(run: u64) -> (i32, i32) {
    ((run >> 32) as u32 as i32, run as u32 as i32)
}

impl RemoteBackend {
    /// Takes run `run`'s advisory lock on this handle's claims connection
    /// (connecting as needed). A run id is the sequence number of the
    /// operation that begins it, which is not committed yet: nobody else
    /// can hold it, and not getting it means the database is not the one
    /// this handle thinks it is.
    pub(super) fn hold_claim_lock(&self, run: u64) -> Result<()> {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        if claims.conn.as_ref().is_some_and(|c| c.is_closed()) {
            // The server dropped it (a restart): the locks it held are
            // gone, and other handles may already have failed those runs.
            claims.held.clear();
        }
        let client = self.client(&mut claims.conn)?;
        let (hi, lo) = key(run);
        let got: bool = client
            .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&hi, &lo])
            .map_err(|e| self.pg_error(e))?
            .get(0);
        if !got {
            return Err(crate::error::Error::Remote {
                what: self.url.shown.clone(),
                reason: format!("run {run}'s claim is held by another session already"),
            });
        }
        claims.held.insert(run);
        Ok(())
    }

    /// Lets go of run `run`'s advisory lock, if this handle holds it. A
    /// connection that fails here has lost its locks anyway.
    pub(super) fn release_claim_lock(&self, run: u64) {
        let mut claims = self.claims.lock().unwrap_or_else(|p| p.into_inner());
        if !claims.held.remove(&run) {
            return;
        }
        if let Some(c) = claims.conn.as_mut() {
            let (hi, lo) = key(run);
            let _ = c.execute("SELECT pg_advisory_unlock($1, $2)", &[&hi, &lo]);
        }
    }

    /// Whether some session holds run `run`'s advisory lock: asked by
    /// trying to take it on the reader connection, and letting go at once
    /// when that succeeds (its holder is gone). Two handles asking at once
    /// may see each other's brief hold and answer "held": the cautious
    /// answer, never the wrong one for a live holder, which took its lock
    /// before its claim could be seen.
    pub(super) fn claim_lock_held(&self, run: u64) -> Result<bool> {
        if self
            .claims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .held
            .contains(&run)
        {
            return Ok(true);
        }
        let (hi, lo) = key(run);
        self.with_reader(|c| {
            let got: bool = c
                .query_one("SELECT pg_try_advisory_lock($1, $2)", &[&hi, &lo])?
                .get(0);
            if got {
                c.execute("SELECT pg_advisory_unlock($1, $2)", &[&hi, &lo])?;
            }
            Ok(!got)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn a_run_id_splits_into_two_keys_without_loss() {
        for run in [1u64, 0xffff_ffff, 0x1_0000_0000, u64::MAX >> 1] {
            let (hi, lo) = key(run);
            assert_eq!(((hi as u32 as u64) << 32) | lo as u32 as u64, run);
        }
        assert_ne!(key(1), key(1 << 32));
    }
}
