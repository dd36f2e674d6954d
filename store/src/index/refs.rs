//! Refs as the index holds them: each ref's target and the hash of its
//! newest reflog entry.

use super::{key, Index};
use crate::error::Result;
use crate::hash::ObjectId;
use crate::refs::{Hash, RefName, RefTarget};

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

/// `t:<id><ref>`: the ref `name` (its full name's bytes) points at `id`
/// (objects-format.md, "Index"), so that the refs to a session are a
/// prefix scan, not a pass over every ref.
pub(super) fn reverse_key(id: &ObjectId, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + crate::hash::ID_LEN + name.len());
    k.extend_from_slice(b"t:");
    k.extend_from_slice(id.as_bytes());
    k.extend_from_slice(name);
    k
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

impl Index {
    pub fn get_ref(&self, name: &RefName) -> Result<Option<RefTarget>> {
        Ok(self
            .get(&key("r:", name.to_string().as_bytes()))?
            .and_then(|v| target_from(&v)))
    }

    /// Every ref, sorted by name.
    pub fn refs(&self) -> Result<Vec<(RefName, RefTarget)>> {
        self.refs_with_prefix("")
    }

    /// Every ref whose full name starts with `prefix`, sorted by name.
    pub fn refs_with_prefix(&self, prefix: &str) -> Result<Vec<(RefName, RefTarget)>> {
        let mut out = Vec::new();
        for (k, v) in self.scan(&key("r:", prefix.as_bytes()))? {
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

    /// The refs whose target is one of `ids` (`HEAD`'s symbolic link not
    /// followed), sorted by name: what `log -n` and `show` decorate with.
    /// Candidates come from the `t:` keys under each id (a prefix scan per
    /// id, whatever the number of refs), each confirmed against the newest
    /// `r:` entry of its name; with a version-1 table in the stack, whose
    /// `t:` keys are missing, from one pass over every ref's entry instead.
    pub fn refs_to(&self, ids: &[ObjectId]) -> Result<Vec<(RefName, ObjectId)>> {
        let candidates = if !self.refs_to_reads_every_ref() {
            self.reverse_candidates(ids)?
        } else {
            self.scanned_candidates(ids)?
        };
        // Where the backend keeps the keys, every candidate in one read.
        let kept: Option<std::collections::HashMap<Vec<u8>, Vec<u8>>> = match self.kept() {
            Some(kept) if !candidates.is_empty() => {
                let keys: Vec<Vec<u8>> = candidates.iter().cloned().collect();
                Some(kept.index_get_many(&keys)?.into_iter().collect())
            }
            _ => None,
        };
        let mut out = Vec::new();
        for k in candidates {
            let v = match &kept {
                Some(values) => values.get(&k).cloned(),
                None => self.get(&k)?,
            };
            let Some(v) = v else { continue };
            let name = std::str::from_utf8(&k[2..])
                .ok()
                .and_then(|n| RefName::parse(n).ok());
            if let (Some(n), Some(RefTarget::Session(id))) = (name, target_from(&v)) {
                if ids.contains(&id) {
                    out.push((n, id));
                }
            }
        }
        out.sort_by_key(|a| a.0.to_string());
        Ok(out)
    }

    /// Whether [`Index::refs_to`] reads every ref's entry (a version-1
    /// table, without reverse keys, in the stack).
    pub fn refs_to_reads_every_ref(&self) -> bool {
        !self.view().stack.reverse_refs_complete()
    }

    /// The `r:` keys that `t:` keys under one of `ids` name, in the
    /// operations read ahead, the overlay and every table (a stale one, of
    /// a ref moved since, is weeded out by the caller's check).
    fn reverse_candidates(&self, ids: &[ObjectId]) -> Result<std::collections::BTreeSet<Vec<u8>>> {
        let mut candidates = std::collections::BTreeSet::new();
        if let Some(kept) = self.kept() {
            // Every id's prefix in one read.
            let prefixes: Vec<Vec<u8>> = ids.iter().map(|id| reverse_key(id, b"")).collect();
            for (k, _) in kept.index_scan_prefixes(&prefixes)? {
                // t:<32-byte id><ref>
                if let Some(name) = k.get(2 + crate::hash::ID_LEN..) {
                    candidates.insert([&b"r:"[..], name].concat());
                }
            }
        }
        let view = self.view();
        for id in ids {
            let prefix = reverse_key(id, b"");
            let end = super::prefix_end(&prefix).expect("a t: prefix ends");
            let mut take = |k: &[u8]| {
                candidates.insert([&b"r:"[..], &k[prefix.len()..]].concat());
            };
            for map in [&view.ahead, &view.overlay] {
                for (k, v) in map.range(prefix.clone()..end.clone()) {
                    if v.is_some() {
                        take(k);
                    }
                }
            }
            for t in view.stack.tables() {
                t.each_under(&prefix, |k, v| {
                    if v.is_some() {
                        take(k);
                    }
                })?;
            }
        }
        Ok(candidates)
    }

    /// The `r:` keys whose entry, in any source, names one of `ids`: one
    /// pass over every ref's entry, read in place.
    fn scanned_candidates(&self, ids: &[ObjectId]) -> Result<std::collections::BTreeSet<Vec<u8>>> {
        let mut sorted: Vec<&[u8]> = ids.iter().map(|id| &id.as_bytes()[..]).collect();
        sorted.sort_unstable();
        let names_one = |v: &[u8]| {
            v.len() == 1 + crate::hash::ID_LEN
                && v[0] == 1
                && sorted.binary_search(&&v[1..]).is_ok()
        };
        let mut candidates: std::collections::BTreeSet<Vec<u8>> = Default::default();
        {
            let view = self.view();
            for map in [&view.ahead, &view.overlay] {
                for (k, v) in map.range(b"r:".to_vec()..b"r;".to_vec()) {
                    if v.as_deref().is_some_and(names_one) {
                        candidates.insert(k.clone());
                    }
                }
            }
            for t in view.stack.tables() {
                t.each_under(b"r:", |k, v| {
                    if v.is_some_and(names_one) {
                        candidates.insert(k.to_vec());
                    }
                })?;
            }
        }
        Ok(candidates)
    }

    /// The hash of a ref's newest reflog entry.
    pub fn reflog_head(&self, name: &RefName) -> Result<Option<Hash>> {
        Ok(self
            .get(&key("h:", name.to_string().as_bytes()))?
            .and_then(|v| v.as_slice().try_into().ok()))
    }
}
