//! The lineage rows a backend keeps (the remote one's `sessctl.lineage`:
//! objects-format.md, "Lineage rows"), as this handle's walks have fetched
//! them: a closure of up to [`CLOSURE_ROWS`] ancestors in one round trip
//! on a miss, kept for the handle's life. Rows never change (a session id
//! fixes its parents), so nothing here goes stale.
//!
//! It owns no answer of its own: a session it holds no row for is read
//! as before (the derived index, then the object), never guessed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::error::Result;
use crate::graph::Node;
use crate::hash::{IdMap, IdSet, ObjectId};
use crate::odb::{ObjectBackend, CLOSURE_ROWS};

#[derive(Debug, Default)]
pub(super) struct KeptLineage {
    rows: Mutex<Fetched>,
    /// Set once the backend has said it keeps no lineage.
    unkept: AtomicBool,
}

#[derive(Debug, Default)]
struct Fetched {
    nodes: IdMap<Node>,
    /// Sessions a closure came back without (no row: stored before the
    /// table, until a reindex): read as before from now on, without asking
    /// again.
    rowless: IdSet,
}

impl KeptLineage {
    /// The session's row, fetched with its closure on a miss; `None`: no
    /// row (or none kept), the caller reads the session another way.
    pub(super) fn node(&self, backend: &dyn ObjectBackend, id: &ObjectId) -> Result<Option<Node>> {
        if self.unkept.load(Ordering::Relaxed) {
            return Ok(None);
        }
        {
            let f = self.rows.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = f.nodes.get(id) {
                return Ok(Some(n.clone()));
            }
            if f.rowless.contains(id) {
                return Ok(None);
            }
        }
        let Some(rows) = backend.lineage_closure(id, CLOSURE_ROWS)? else {
            self.unkept.store(true, Ordering::Relaxed);
            return Ok(None);
        };
        let mut f = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        for r in rows {
            f.nodes.insert(
                r.id,
                Node {
                    id: r.id,
                    parents: r.parents,
                    created_at: r.created_at,
                },
            );
        }
        match f.nodes.get(id) {
            Some(n) => Ok(Some(n.clone())),
            None => {
                f.rowless.insert(*id);
                Ok(None)
            }
        }
    }

    /// Forgets the sessions known to have no row (a reindex wrote them).
    pub(super) fn forget_rowless(&self) {
        self.rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rowless
            .clear();
    }
}
