//! Refs as the index holds them: each ref's target, its reflog entries and
//! the hash of its newest entry.

use serde_json::{json, Value};

use super::{key, Index};
use crate::error::Result;
use crate::hash::ObjectId;
use crate::refs::{Hash, RefName, RefTarget, ReflogEntry};

pub(super) fn target_bytes(t: &RefTarget) -> Vec<u8> {
    match t {
        RefTarget::Session(id) => {
            let mut v = vec![1u8];
            v.extend_from_slice(id.as_bytes());
            v
        }
        RefTarget::Symbolic(r) => {
            let mut v = vec![2u8];
            v.extend_from_slice(r.to_string().as_bytes());
            v
        }
    }
}

pub(super) fn target_from(b: &[u8]) -> Option<RefTarget> {
    match b.split_first()? {
        (1, id) => ObjectId::from_slice(id).map(RefTarget::Session),
        (2, name) => RefName::parse(std::str::from_utf8(name).ok()?)
            .ok()
            .map(RefTarget::Symbolic),
        _ => None,
    }
}

pub(super) fn reflog_json(e: &ReflogEntry) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "op": e.op,
        "old": e.old.as_ref().map(|t| t.to_string()),
        "new": e.new.as_ref().map(|t| t.to_string()),
        "time": e.time,
        "actor": e.actor,
        "reason": e.reason,
        "prev": e.prev.map(|p| crate::hash::hex(&p)),
        "hash": crate::hash::hex(&e.hash()),
    }))
    .expect("a JSON value serializes")
}

impl Index {
    pub fn get_ref(&self, name: &RefName) -> Result<Option<RefTarget>> {
        Ok(self
            .get(&key("r:", name.to_string().as_bytes()))?
            .and_then(|v| target_from(&v)))
    }

    /// Every ref, sorted by name.
    pub fn refs(&self) -> Result<Vec<(RefName, RefTarget)>> {
        let mut out = Vec::new();
        for (k, v) in self.scan(b"r:")? {
            let name = std::str::from_utf8(&k[2..])
                .ok()
                .and_then(|n| RefName::parse(n).ok());
            if let (Some(n), Some(t)) = (name, target_from(&v)) {
                out.push((n, t));
            }
        }
        out.sort_by_key(|a| a.0.to_string());
        Ok(out)
    }

    /// The hash of a ref's newest reflog entry.
    pub fn reflog_head(&self, name: &RefName) -> Result<Option<Hash>> {
        Ok(self
            .get(&key("h:", name.to_string().as_bytes()))?
            .and_then(|v| v.as_slice().try_into().ok()))
    }

    /// A ref's log as the index holds it (JSON objects, oldest first).
    pub fn reflog(&self, name: &RefName) -> Result<Vec<Value>> {
        let mut prefix = key("l:", name.to_string().as_bytes());
        prefix.push(0);
        let mut out = Vec::new();
        for (_, v) in self.scan(&prefix)? {
            if let Ok(j) = serde_json::from_slice(&v) {
                out.push(j);
            }
        }
        Ok(out)
    }
}
