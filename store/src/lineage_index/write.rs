//! Writing the lineage index: its bytes from the facts of the sessions
//! (deterministic), and the file, replaced atomically.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::Path;

use crate::error::{Error, IoResultExt, Result};
use crate::hash::{IdSet, ObjectId};
use crate::object::{ObjectKind, Session};
use crate::odb::atomic_file::AtomicFile;
use crate::odb::{Durability, Odb};

use super::*;

/// Builds the file's bytes from the facts of some sessions. Deterministic:
/// the same sessions give the same bytes, whatever their order or history.
///
/// Sessions with a parent that is absent (or itself left out) are left out,
/// so that the file is closed under parents.
pub fn build(sessions: &BTreeMap<ObjectId, SessionFacts>) -> Result<Vec<u8>> {
    // Generations, depth first; `None` marks a session left out.
    let mut generation: HashMap<ObjectId, Option<u32>> = HashMap::with_capacity(sessions.len());
    for start in sessions.keys() {
        if generation.contains_key(start) {
            continue;
        }
        let mut stack: Vec<(ObjectId, bool)> = vec![(*start, false)];
        let mut on_stack: BTreeSet<ObjectId> = BTreeSet::new();
        while let Some((id, expanded)) = stack.pop() {
            if generation.contains_key(&id) {
                continue;
            }
            let Some(facts) = sessions.get(&id) else {
                generation.insert(id, None);
                continue;
            };
            if !expanded {
                if !on_stack.insert(id) {
                    // A cycle (ids cannot make one): leave it out.
                    generation.insert(id, None);
                    continue;
                }
                stack.push((id, true));
                for p in &facts.parents {
                    if !generation.contains_key(p) {
                        stack.push((*p, false));
                    }
                }
                continue;
            }
            on_stack.remove(&id);
            let mut g = Some(1u32);
            for p in &facts.parents {
                g = match (g, generation.get(p).copied().flatten()) {
                    (Some(g), Some(pg)) => pg.checked_add(1).map(|pg| g.max(pg)),
                    _ => None,
                };
            }
            generation.insert(id, g);
        }
    }
    // In id order here; the records go in generation order (descending,
    // then by id), so that a walk down parents moves forward in the file.
    let by_id: Vec<(&ObjectId, &SessionFacts, u32)> = sessions
        .iter()
        .filter_map(|(id, f)| Some((id, f, generation.get(id).copied().flatten()?)))
        .collect();
    let mut kept = by_id.clone();
    kept.sort_by_key(|(id, _, g)| (std::cmp::Reverse(*g), **id));
    let n = kept.len();
    let position: HashMap<ObjectId, u32> = kept
        .iter()
        .enumerate()
        .map(|(k, (id, _, _))| (**id, k as u32))
        .collect();
    let conversations: Vec<ObjectId> = kept
        .iter()
        .map(|(_, f, _)| f.conversation)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut records = Vec::with_capacity(n * RECORD_LEN);
    let mut extra: Vec<u32> = Vec::new();
    for (_, f, g) in &kept {
        let pos = |p: &ObjectId| position.get(p).copied().unwrap_or(NO_PARENT);
        let first = f.parents.first().map_or(NO_PARENT, pos);
        let second = match f.parents.len() {
            0 | 1 => NO_PARENT,
            2 => pos(&f.parents[1]),
            _ => {
                let start = extra.len() as u32 | EXTRA_FLAG;
                let rest = &f.parents[1..];
                for (k, p) in rest.iter().enumerate() {
                    let last = if k + 1 == rest.len() { EXTRA_FLAG } else { 0 };
                    extra.push(pos(p) | last);
                }
                start
            }
        };
        let conv = conversations
            .binary_search(&f.conversation)
            .map_or(u32::MAX, |c| c as u32);
        records.extend_from_slice(&first.to_le_bytes());
        records.extend_from_slice(&second.to_le_bytes());
        records.extend_from_slice(&g.to_le_bytes());
        records.extend_from_slice(&conv.to_le_bytes());
        records.extend_from_slice(&f.created_at.to_le_bytes());
        records.extend_from_slice(&f.messages.to_le_bytes());
    }
    if n > MAX_ENTRIES || extra.len() > MAX_ENTRIES || conversations.len() > MAX_ENTRIES {
        return Err(Error::LimitExceeded {
            what: "a lineage index holds fewer than 2^31 - 1 sessions and edges",
        });
    }
    let mut out = Vec::with_capacity(
        HEADER_LEN
            + FANOUT_LEN
            + n * (ID_LEN + RECORD_LEN + 4)
            + conversations.len() * ID_LEN
            + extra.len() * 4
            + CHECKSUM_LEN,
    );
    out.extend_from_slice(&LINEAGE_MAGIC);
    for v in [
        LINEAGE_FORMAT_VERSION,
        n as u32,
        conversations.len() as u32,
        extra.len() as u32,
        0,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut fanout = [0u32; 256];
    for (id, _, _) in &kept {
        fanout[id.as_bytes()[0] as usize] += 1;
    }
    let mut total = 0u32;
    for f in fanout {
        total += f;
        out.extend_from_slice(&total.to_le_bytes());
    }
    for (id, _, _) in &kept {
        out.extend_from_slice(id.as_bytes());
    }
    out.extend_from_slice(&records);
    for c in &conversations {
        out.extend_from_slice(c.as_bytes());
    }
    for e in &extra {
        out.extend_from_slice(&e.to_le_bytes());
    }
    for (id, _, _) in &by_id {
        out.extend_from_slice(&position[*id].to_le_bytes());
    }
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    Ok(out)
}

/// The bytes [`build`] gives for the sessions of `previous` that `keep`
/// accepts, made from `previous` alone: records copied with their positions
/// renumbered, nothing decoded, no id looked up (gc, which drops sessions
/// and keeps the rest). `None` when a kept session's parent is not kept:
/// then [`build`] would leave it out, and the caller builds.
pub fn filtered(previous: &LineageIndex, keep: &dyn Fn(&ObjectId) -> bool) -> Option<Vec<u8>> {
    // Records are copied, not re-derived: the whole file is checked first
    // (readers check only the records a walk touches). A version-1 file's
    // records are in id order: [`build`] puts them in generation order.
    previous.order_at?;
    previous.check().ok()?;
    let n_old = previous.len();
    let mut new_pos: Vec<u32> = vec![NO_PARENT; n_old];
    let mut kept: Vec<u32> = Vec::new();
    for pos in 0..n_old as u32 {
        if keep(&previous.id(pos)?) {
            new_pos[pos as usize] = kept.len() as u32;
            kept.push(pos);
        }
    }
    let mut conv_used = vec![false; previous.conversations];
    for &pos in &kept {
        if previous
            .parents(pos)
            .ok()?
            .any(|p| new_pos.get(p as usize) == Some(&NO_PARENT))
        {
            return None;
        }
        conv_used[previous.field(pos, 3)? as usize] = true;
    }
    let mut conv_new: Vec<u32> = vec![u32::MAX; conv_used.len()];
    let mut conversations = 0u32;
    for (k, used) in conv_used.iter().enumerate() {
        if *used {
            conv_new[k] = conversations;
            conversations += 1;
        }
    }
    let n = kept.len();
    let mut records = Vec::with_capacity(n * RECORD_LEN);
    let mut extra: Vec<u32> = Vec::new();
    for &pos in &kept {
        let parents: Vec<u32> = previous
            .parents(pos)
            .ok()?
            .map(|p| new_pos[p as usize])
            .collect();
        let first = parents.first().copied().unwrap_or(NO_PARENT);
        let second = match parents.len() {
            0 | 1 => NO_PARENT,
            2 => parents[1],
            _ => {
                let start = extra.len() as u32 | EXTRA_FLAG;
                let rest = &parents[1..];
                for (k, p) in rest.iter().enumerate() {
                    let last = if k + 1 == rest.len() { EXTRA_FLAG } else { 0 };
                    extra.push(p | last);
                }
                start
            }
        };
        records.extend_from_slice(&first.to_le_bytes());
        records.extend_from_slice(&second.to_le_bytes());
        records.extend_from_slice(&previous.generation(pos).to_le_bytes());
        records.extend_from_slice(&conv_new[previous.field(pos, 3)? as usize].to_le_bytes());
        records.extend_from_slice(&previous.created_at(pos).to_le_bytes());
        records.extend_from_slice(&previous.messages(pos).to_le_bytes());
    }
    let mut out = Vec::with_capacity(
        HEADER_LEN
            + FANOUT_LEN
            + n * (ID_LEN + RECORD_LEN + 4)
            + conversations as usize * ID_LEN
            + extra.len() * 4
            + CHECKSUM_LEN,
    );
    out.extend_from_slice(&LINEAGE_MAGIC);
    for v in [
        LINEAGE_FORMAT_VERSION,
        n as u32,
        conversations,
        extra.len() as u32,
        0,
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut fanout = [0u32; 256];
    for &pos in &kept {
        fanout[previous.id_bytes(pos)?[0] as usize] += 1;
    }
    let mut total = 0u32;
    for f in fanout {
        total += f;
        out.extend_from_slice(&total.to_le_bytes());
    }
    for &pos in &kept {
        out.extend_from_slice(previous.id_bytes(pos)?);
    }
    out.extend_from_slice(&records);
    for (k, used) in conv_used.iter().enumerate() {
        if *used {
            out.extend_from_slice(previous.conversation_bytes(k as u32)?);
        }
    }
    for e in &extra {
        out.extend_from_slice(&e.to_le_bytes());
    }
    // The kept sessions keep their generations (their parents are kept),
    // so their records stay in order, and so do their ids.
    for k in 0..n_old {
        let pos = previous.sorted(k)?;
        if new_pos[pos as usize] != NO_PARENT {
            out.extend_from_slice(&new_pos[pos as usize].to_le_bytes());
        }
    }
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    Some(out)
}

/// Rewrites `<store_root>/lineage/graph.lgi` to hold the sessions `kept`
/// (gc's: what it keeps of the sessions it found): filtered from the
/// previous file when that holds every one of them ([`filtered`]), else
/// built as [`write_from`] does.
pub fn write_kept(odb: &Odb, store_root: &Path, kept: &IdSet) -> Result<WriteStats> {
    if let Some(previous) = LineageIndex::open(store_root).ok().flatten() {
        let held = (0..previous.len() as u32)
            .filter_map(|p| previous.id(p))
            .filter(|id| kept.contains(id))
            .count();
        if held == kept.len() {
            if let Some(bytes) = filtered(&previous, &|id| kept.contains(id)) {
                let mut stats = WriteStats {
                    sessions: u32_at(&bytes, 8).unwrap_or(0) as usize,
                    reused: held,
                    ..WriteStats::default()
                };
                if previous.bytes() != &bytes[..] {
                    drop(previous);
                    write_file(store_root, &bytes)?;
                    stats.written = true;
                }
                return Ok(stats);
            }
        }
    }
    write_from(odb, store_root, Some(kept.iter().copied().collect()))
}

/// What a rewrite did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Sessions in the new file.
    pub sessions: usize,
    /// Of those, how many were taken from the previous file.
    pub reused: usize,
    /// Session objects decoded (the new ones).
    pub decoded: usize,
    /// Whether the file changed (an identical one is left alone).
    pub written: bool,
}

/// The facts of every session in `odb`: taken from `previous` where it has
/// the session, decoded otherwise. Objects that do not read are skipped (the
/// walks and fsck report them).
pub fn collect(
    odb: &Odb,
    previous: Option<&LineageIndex>,
) -> Result<(BTreeMap<ObjectId, SessionFacts>, WriteStats)> {
    collect_from(odb, previous, odb.backend().ids_in_storage_order()?)
}

/// As [`collect`], over `candidates` only: a full repack names the sessions
/// it packed, so that blobs (most objects) are not read again just to learn
/// that they are not sessions. Candidates the odb lacks are skipped.
pub fn collect_from(
    odb: &Odb,
    previous: Option<&LineageIndex>,
    candidates: Vec<ObjectId>,
) -> Result<(BTreeMap<ObjectId, SessionFacts>, WriteStats)> {
    let mut stats = WriteStats::default();
    let mut out = BTreeMap::new();
    for id in candidates {
        if let Some((ix, pos)) = previous.and_then(|ix| Some((ix, ix.position(&id)?))) {
            if let Ok(Some(f)) = ix.facts(pos) {
                stats.reused += 1;
                out.insert(id, f);
                continue;
            }
        }
        let Ok(obj) = odb.read(&id) else { continue };
        if obj.kind() != ObjectKind::Session {
            continue;
        }
        let Ok(s) = Session::decode(obj.payload()) else {
            continue;
        };
        stats.decoded += 1;
        out.insert(id, SessionFacts::of(&id, &s));
    }
    Ok((out, stats))
}

/// Rewrites `<store_root>/lineage/graph.lgi` from the sessions in `odb`,
/// reusing the previous file's records (a damaged previous file is ignored).
/// Two processes writing it at once each rename a whole file into place;
/// either describes sessions the store holds.
pub fn write_for(odb: &Odb, store_root: &Path) -> Result<WriteStats> {
    write_from(odb, store_root, None)
}

/// Rewrites `<store_root>/lineage/graph.lgi` from every session object in
/// `odb`, reusing nothing of the previous file (`reindex`).
pub fn rebuild(odb: &Odb, store_root: &Path) -> Result<WriteStats> {
    let (sessions, mut stats) = collect(odb, None)?;
    let bytes = build(&sessions)?;
    stats.sessions = u32_at(&bytes, 8).unwrap_or(0) as usize;
    write_file(store_root, &bytes)?;
    stats.written = true;
    Ok(stats)
}

/// As [`write_for`]; with `sessions` (what a full repack reports), only
/// those are considered (see [`collect_from`]).
pub fn write_from(
    odb: &Odb,
    store_root: &Path,
    sessions: Option<Vec<ObjectId>>,
) -> Result<WriteStats> {
    // Reused records must be sound: readers check only what they read, so
    // the whole file is checked here (the rewrite is O(sessions) anyway).
    let previous = LineageIndex::open(store_root)
        .ok()
        .flatten()
        .filter(|ix| ix.check().is_ok());
    let (sessions, mut stats) = match sessions {
        Some(c) => collect_from(odb, previous.as_ref(), c)?,
        None => collect(odb, previous.as_ref())?,
    };
    let bytes = build(&sessions)?;
    stats.sessions = u32_at(&bytes, 8).unwrap_or(0) as usize;
    if previous.as_ref().is_some_and(|p| p.bytes() == &bytes[..]) {
        return Ok(stats);
    }
    drop(previous);
    write_file(store_root, &bytes)?;
    stats.written = true;
    Ok(stats)
}

/// Writes `bytes` as the store's lineage index: a temporary file, fsynced,
/// renamed over the old one, the directory fsynced.
pub fn write_file(store_root: &Path, bytes: &[u8]) -> Result<()> {
    let dir = store_root.join(LINEAGE_DIR);
    fs::create_dir_all(&dir).at(&dir)?;
    AtomicFile::replace(&dir.join(LINEAGE_FILE), bytes, Durability::Sync)
}
