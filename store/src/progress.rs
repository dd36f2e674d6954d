//! Progress of the library's long operations (import, transfers, gc,
//! repack, reindex), reported to an observer the caller gives. The library
//! never prints: the `sessctl` command draws bars with these reports on a
//! terminal, and an embedding program may do as it likes or nothing.
//!
//! An operation runs in phases ("reading files", "checking objects", ...);
//! each has a total when one is known beforehand, and advances by units.
//! Every method has a default that does nothing.

use std::fmt::Debug;

/// Receives progress reports; see the module's documentation.
pub trait Progress: Debug + Send + Sync {
    /// A phase begins: what it does ("checking objects"), and how many units
    /// it will count, when that is known.
    fn phase(&self, _name: &str, _total: Option<u64>) {}
    /// `n` more units of the current phase are done.
    fn advance(&self, _n: u64) {}
    /// The operation is over (reported also when it failed).
    fn finish(&self) {}
}

/// Reports go nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {}
