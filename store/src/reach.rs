//! Reachability: what a set of sessions names, transitively (parents,
//! compaction sources and the blobs each session adds).
//!
//! gc marks with [`closure`]; bundles, `push` and `clone` send what
//! [`missing_from`] finds. Both read session objects only, never a message
//! body, and both verify every object they read. This module decides
//! nothing: what to keep, drop or send is its callers'.

use std::collections::{BTreeSet, HashSet};

use petgraph::graphmap::DiGraphMap;

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::object::{EncodedObject, ObjectKind, Session};
use crate::odb::Odb;
use crate::refs::{large_fields, ConversationRecord};

/// Everything reachable from `roots` (sessions and blobs), and the session
/// graph (child -> parent, compaction -> source) they form.
///
/// A reachable session that cannot be read is an error, not a gap: it
/// hides what it reaches, and a caller that sweeps what it did not reach
/// would drop live history.
pub fn closure(
    odb: &Odb,
    roots: &[ObjectId],
) -> Result<(HashSet<ObjectId>, DiGraphMap<ObjectId, ()>)> {
    let mut graph: DiGraphMap<ObjectId, ()> = DiGraphMap::new();
    let mut live: HashSet<ObjectId> = HashSet::new();
    let mut stack: Vec<ObjectId> = roots.to_vec();
    while let Some(id) = stack.pop() {
        if !live.insert(id) {
            continue;
        }
        graph.add_node(id);
        let s = odb
            .session(&id)
            .map_err(|e| Error::unreadable_reachable(id, e))?;
        live.extend(s.blobs());
        for p in s.sessions() {
            graph.add_edge(id, p, ());
            stack.push(p);
        }
    }
    Ok((live, graph))
}

/// The objects reachable from `tips` that `have` says the receiver lacks,
/// and the ids where the walk stopped because the receiver has them (the
/// prerequisites). A session the receiver has is not entered: its closure
/// is the receiver's already.
pub fn missing_from(
    source: &Odb,
    tips: &[ObjectId],
    have: &mut dyn FnMut(&ObjectId) -> Result<bool>,
) -> Result<(Vec<EncodedObject>, Vec<ObjectId>)> {
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut objects = Vec::new();
    let mut prerequisites = BTreeSet::new();
    let mut stack: Vec<ObjectId> = tips.to_vec();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        if have(&id)? {
            prerequisites.insert(id);
            continue;
        }
        let obj = read_kind(source, &id, ObjectKind::Session)?;
        let session = Session::decode(obj.payload()).map_err(|e| Error::decode(id, e))?;
        for blob in session.blobs() {
            if !seen.insert(blob) {
                continue;
            }
            if have(&blob)? {
                prerequisites.insert(blob);
            } else {
                objects.push(read_kind(source, &blob, ObjectKind::Blob)?);
            }
        }
        stack.extend(session.sessions());
        objects.push(obj);
    }
    Ok((objects, prerequisites.into_iter().collect()))
}

/// The blobs `records` keep their large metadata fields in
/// (`refs::large_fields`) that `have` says the receiver lacks, read from
/// `source`; a transfer sends them with the records.
pub fn record_blobs_missing(
    source: &Odb,
    records: &[(String, ConversationRecord)],
    have: &mut dyn FnMut(&ObjectId) -> Result<bool>,
) -> Result<Vec<EncodedObject>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (_, r) in records {
        for id in large_fields::metadata_blobs(&r.metadata) {
            if seen.insert(id) && !have(&id)? {
                out.push(read_kind(source, &id, ObjectKind::Blob)?);
            }
        }
    }
    Ok(out)
}

/// Reads an object that must be of `kind`.
pub(crate) fn read_kind(odb: &Odb, id: &ObjectId, kind: ObjectKind) -> Result<EncodedObject> {
    let obj = odb.read(id)?;
    if !obj.kind().serves_as(kind) {
        return Err(Error::WrongKind {
            id: *id,
            expected: kind,
            actual: obj.kind(),
        });
    }
    Ok(obj)
}
