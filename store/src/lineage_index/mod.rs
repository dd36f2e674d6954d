//! The lineage index: a memory-mapped file of every session's parents,
//! generation number, conversation, creation time and message count, in the
//! spirit of git's commit-graph (objects-format.md, "Lineage index").
//!
//! It owns `<store>/lineage/graph.lgi`: writing it (`write.rs`: from the
//! session objects, reusing the records of the previous file), reading it in
//! place, and checking it (here). Not to be confused with `graph`, the walks
//! that read it, nor with the CLI's history commands. It is derived data: deleting it loses nothing, and a damaged
//! one is ignored (with a note) and rewritten by the next repack or gc. It
//! must never answer differently from the session objects, so a session
//! whose ancestry is incomplete in the store is left out of it (walks read
//! such sessions from their objects).

mod write;

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::hash::{ObjectId, ID_LEN};
use crate::object::Session;

/// First 4 bytes of the file (objects-format.md, "Lineage index").
pub const LINEAGE_MAGIC: [u8; 4] = *b"SLGI";
/// Version of the lineage index layout written (objects-format.md,
/// "Versioning"): 2 puts records in generation order, with an id-order
/// table for lookups.
pub const LINEAGE_FORMAT_VERSION: u32 = 2;
/// The first layout, still read: records in id order, no id-order table.
pub const LINEAGE_FORMAT_VERSION_1: u32 = 1;
/// The directory, under the store, and the file's name in it.
pub const LINEAGE_DIR: &str = "lineage";
pub const LINEAGE_FILE: &str = "graph.lgi";
/// magic, version, N sessions, C conversations, E extra edges, reserved.
pub const HEADER_LEN: usize = 24;
pub const FANOUT_LEN: usize = 256 * 4;
/// u32 first parent, u32 second parent, u32 generation, u32 conversation,
/// i64 created_at, u64 messages.
pub const RECORD_LEN: usize = 32;
pub const CHECKSUM_LEN: usize = 32;
/// "No parent" in a parent field.
pub const NO_PARENT: u32 = u32::MAX;
/// In the second-parent field: the rest is an index into the extra-edge
/// list (3 or more parents). In an extra edge: the session's last parent.
pub const EXTRA_FLAG: u32 = 0x8000_0000;
/// Positions and edge indexes stay below this, so that neither collides
/// with [`NO_PARENT`] or [`EXTRA_FLAG`].
pub const MAX_ENTRIES: usize = (EXTRA_FLAG - 1) as usize;

/// What the index records of one session: everything fixed by its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFacts {
    pub parents: Vec<ObjectId>,
    pub created_at: i64,
    /// The conversation id, resolved (a root's own id).
    pub conversation: ObjectId,
    /// The length of the full message history: `messages.base + messages.added.len()`.
    pub messages: u64,
}

impl SessionFacts {
    pub fn of(id: &ObjectId, s: &Session) -> SessionFacts {
        SessionFacts {
            parents: s.parents.clone(),
            created_at: s.created_at,
            conversation: s.conversation_id(*id),
            messages: s.messages.len(),
        }
    }
}

/// The path of a store's lineage index.
pub fn path_in(store_root: &Path) -> PathBuf {
    store_root.join(LINEAGE_DIR).join(LINEAGE_FILE)
}

pub use write::{
    build, collect, collect_from, filtered, rebuild, write_file, write_for, write_from, write_kept,
    WriteStats,
};

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// An open lineage index. Opening checks the header, the size and the
/// fan-out only, so that it costs the same however many sessions the file
/// holds; each record is checked when a walk first reads it
/// ([`LineageIndex::parents`]), which keeps every walk in bounds and
/// finite, and [`LineageIndex::check`] checks the whole structure (fsck,
/// and a writer reusing the file's records). Every accessor is
/// bounds-checked as well and never panics.
pub struct LineageIndex {
    path: PathBuf,
    bytes: Bytes,
    n: usize,
    conversations: usize,
    extra: usize,
    ids_at: usize,
    records_at: usize,
    conversations_at: usize,
    extra_at: usize,
    /// Version 2: where the id-order table starts (`None`: version 1,
    /// whose records are in id order).
    order_at: Option<usize>,
}

impl std::fmt::Debug for LineageIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineageIndex")
            .field("path", &self.path)
            .field("sessions", &self.n)
            .finish()
    }
}

impl LineageIndex {
    /// Opens `<store_root>/lineage/graph.lgi`, checking its header, size and
    /// fan-out; `None` when there is none.
    pub fn open(store_root: &Path) -> Result<Option<LineageIndex>> {
        let path = path_in(store_root);
        let map = match crate::odb::pack::map_file(&path) {
            Ok(m) => m,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        LineageIndex::parse(path, Bytes::Mapped(map)).map(Some)
    }

    /// Reads bytes held in memory (`path` names them in errors), checking
    /// what [`LineageIndex::open`] checks.
    pub fn from_bytes(path: PathBuf, bytes: Vec<u8>) -> Result<LineageIndex> {
        LineageIndex::parse(path, Bytes::Owned(bytes))
    }

    fn parse(path: PathBuf, bytes: Bytes) -> Result<LineageIndex> {
        let corrupt = |offset: usize, reason: String| Error::CorruptFile {
            path: path.clone(),
            offset: offset as u64,
            reason,
        };
        let b: &[u8] = &bytes;
        if b.len() < HEADER_LEN + FANOUT_LEN + CHECKSUM_LEN {
            return Err(corrupt(
                0,
                format!("{} bytes is too short for a lineage index", b.len()),
            ));
        }
        if b[..4] != LINEAGE_MAGIC {
            return Err(corrupt(0, "not a lineage index (bad magic)".into()));
        }
        let header = |at| u32_at(b, at).unwrap_or(0) as usize;
        let version = header(4);
        if version != LINEAGE_FORMAT_VERSION as usize
            && version != LINEAGE_FORMAT_VERSION_1 as usize
        {
            return Err(corrupt(
                4,
                format!(
                    "lineage index version {version}, expected {LINEAGE_FORMAT_VERSION_1} or {LINEAGE_FORMAT_VERSION}"
                ),
            ));
        }
        let ordered = version == LINEAGE_FORMAT_VERSION as usize;
        let (n, c, e) = (header(8), header(12), header(16));
        if header(20) != 0 {
            return Err(corrupt(20, "reserved header bytes are not zero".into()));
        }
        let ids_at = HEADER_LEN + FANOUT_LEN;
        let size = (|| {
            let records_at = ids_at.checked_add(n.checked_mul(ID_LEN)?)?;
            let conversations_at = records_at.checked_add(n.checked_mul(RECORD_LEN)?)?;
            let extra_at = conversations_at.checked_add(c.checked_mul(ID_LEN)?)?;
            let order_at = extra_at.checked_add(e.checked_mul(4)?)?;
            let end = if ordered {
                order_at.checked_add(n.checked_mul(4)?)?
            } else {
                order_at
            };
            Some((records_at, conversations_at, extra_at, order_at, end))
        })();
        let Some((records_at, conversations_at, extra_at, order_at, end)) = size else {
            return Err(corrupt(8, "counts too large".into()));
        };
        if n > MAX_ENTRIES || e > MAX_ENTRIES || end.checked_add(CHECKSUM_LEN) != Some(b.len()) {
            return Err(corrupt(
                8,
                format!(
                    "{n} sessions, {c} conversations and {e} edges do not fit {} bytes",
                    b.len()
                ),
            ));
        }
        // Neither the checksum nor the records are read here: opening would
        // then cost every process the whole file. Records are checked as
        // walks read them (`record`); `check` and `verify` read everything.
        let ix = LineageIndex {
            path: path.clone(),
            bytes,
            n,
            conversations: c,
            extra: e,
            ids_at,
            records_at,
            conversations_at,
            extra_at,
            order_at: ordered.then_some(order_at),
        };
        ix.check_fanout()
            .map_err(|(offset, reason)| corrupt(offset, reason))?;
        Ok(ix)
    }

    /// The whole structure and the trailing checksum (fsck): bit rot in a
    /// record that leaves the structure sound (a parent moved to another
    /// valid position, a time) is found here, not by readers.
    pub fn verify(&self) -> Result<()> {
        self.check()?;
        let b: &[u8] = &self.bytes;
        let end = b.len() - CHECKSUM_LEN;
        if blake3::hash(&b[..end]).as_bytes()[..] != b[end..] {
            return Err(Error::CorruptFile {
                path: self.path.clone(),
                offset: end as u64,
                reason: "checksum mismatch".into(),
            });
        }
        Ok(())
    }

    fn corrupt(&self, (offset, reason): (usize, String)) -> Error {
        Error::CorruptFile {
            path: self.path.clone(),
            offset: offset as u64,
            reason,
        }
    }

    /// Whether `e` is this file failing a check (as opposed to an error of
    /// the walk that read it).
    pub fn is_own_error(&self, e: &Error) -> bool {
        matches!(e, Error::CorruptFile { path, .. } if *path == self.path)
    }

    fn check_fanout(&self) -> Result<(), (usize, String)> {
        let mut prev = 0usize;
        for byte in 0..256 {
            let f = self.fanout(byte);
            if f < prev {
                return Err((HEADER_LEN + byte * 4, "fan-out decreases".into()));
            }
            prev = f;
        }
        if prev != self.n {
            return Err((HEADER_LEN + 255 * 4, "fan-out total is not N".into()));
        }
        Ok(())
    }

    /// The structure a checksum cannot vouch for (a writer's bug), over the
    /// whole file: fan-out, id order, conversation order, and every record
    /// as [`LineageIndex::parents`] checks it. O(sessions): for fsck and
    /// for a writer about to reuse the records, never on a reader's path.
    pub fn check(&self) -> Result<()> {
        self.check_fanout().map_err(|e| self.corrupt(e))?;
        // In id order: N entries, each in range, ids strictly increasing,
        // so no position twice (a permutation, in version 2).
        for k in 0..self.n {
            let at = self.order_entry_at(k);
            let Some(id) = self.sorted_id_bytes(k) else {
                return Err(self.corrupt((at, format!("id order entry {k} is out of range"))));
            };
            if k > 0 && self.sorted_id_bytes(k - 1).is_none_or(|p| p >= id) {
                return Err(self.corrupt((at, format!("ids out of order at {k} in id order"))));
            }
            let (lo, hi) = self.fanout_range(id.first().copied().unwrap_or(0));
            if k < lo || k >= hi {
                return Err(self.corrupt((
                    at,
                    format!("id {k} in id order is outside its fan-out range"),
                )));
            }
        }
        for k in 1..self.conversations {
            if self.conversation_bytes(k as u32 - 1) >= self.conversation_bytes(k as u32) {
                return Err(self.corrupt((
                    self.conversations_at + k * ID_LEN,
                    format!("conversation ids out of order at {k}"),
                )));
            }
        }
        for pos in 0..self.n as u32 {
            self.record(pos)?;
        }
        // Version 2: records by generation, descending, then by id; so the
        // bytes depend only on the set of sessions.
        if self.order_at.is_some() {
            for pos in 1..self.n as u32 {
                let key = |p: u32| (Reverse(self.generation(p)), self.id_bytes(p));
                if key(pos - 1) >= key(pos) {
                    return Err(self.corrupt((
                        self.records_at + pos as usize * RECORD_LEN,
                        format!("records out of generation order at position {pos}"),
                    )));
                }
            }
        }
        Ok(())
    }

    /// Checks the record at `pos` (a position in range): a second parent
    /// only after a first, parents at positions in range, a 3+-parent list
    /// that ends inside the extra-edge list, the generation as defined from
    /// the parents' (so that it is larger than each: every walk down
    /// parents ends), the conversation in range. O(its parents), so walks
    /// check each record they read; a parent's own record is checked when
    /// it is read in turn.
    fn record(&self, pos: u32) -> Result<()> {
        self.check_record(pos).map_err(|e| self.corrupt(e))
    }

    fn check_record(&self, pos: u32) -> Result<(), (usize, String)> {
        if self.sound_with_one_parent_at_most(pos) {
            return Ok(());
        }
        let at = self.records_at + pos as usize * RECORD_LEN;
        if pos as usize >= self.n {
            return Err((at, format!("position {pos} is out of range")));
        }
        let field = |k: usize| u32_at(&self.bytes, at + 4 * k).unwrap_or(NO_PARENT);
        let (first, second) = (field(0), field(1));
        if first == NO_PARENT && second != NO_PARENT {
            return Err((at, format!("record {pos} has a second parent but no first")));
        }
        if second != NO_PARENT && second & EXTRA_FLAG != 0 {
            let start = (second & !EXTRA_FLAG) as usize;
            let mut k = start;
            loop {
                let Some(v) = self.edge(k) else {
                    return Err((at + 4, format!("record {pos}: extra edges out of range")));
                };
                if v & EXTRA_FLAG != 0 {
                    break;
                }
                k += 1;
            }
        }
        let mut expect = 1u32;
        let mut count = 0;
        for p in self.parents_unchecked(pos) {
            count += 1;
            if p as usize >= self.n {
                return Err((
                    at,
                    format!("record {pos}: parent position {p} out of range"),
                ));
            }
            // A parent at u32::MAX leaves no younger generation: with a
            // saturating add, a session could be its own parent and every
            // walk of its parents would never end.
            let Some(g) = self.generation(p).checked_add(1) else {
                return Err((at + 8, format!("record {pos}: generation overflows")));
            };
            expect = expect.max(g);
        }
        let declared = usize::from(first != NO_PARENT) + if second == NO_PARENT { 0 } else { 1 };
        if count < declared {
            return Err((at, format!("record {pos}: bad parent list")));
        }
        if self.generation(pos) != expect {
            return Err((
                at + 8,
                format!(
                    "record {pos}: generation {} should be {expect}",
                    self.generation(pos)
                ),
            ));
        }
        if field(3) as usize >= self.conversations {
            return Err((at + 12, format!("record {pos}: conversation out of range")));
        }
        Ok(())
    }

    /// [`LineageIndex::check_record`] for the common record (no parent or
    /// one, every check passing), in a few reads: walks check every record
    /// they read. `false` sends the record to the full check, which says
    /// what is wrong, if anything.
    #[inline]
    fn sound_with_one_parent_at_most(&self, pos: u32) -> bool {
        if pos as usize >= self.n {
            return false;
        }
        let at = self.records_at + pos as usize * RECORD_LEN;
        let Some(r) = self.bytes.get(at..at + 16) else {
            return false;
        };
        let field =
            |k: usize| u32::from_le_bytes([r[4 * k], r[4 * k + 1], r[4 * k + 2], r[4 * k + 3]]);
        if field(1) != NO_PARENT {
            return false;
        }
        let expect = match field(0) {
            NO_PARENT => 1,
            p if (p as usize) < self.n => match self.generation(p).checked_add(1) {
                Some(g) => g,
                None => return false,
            },
            _ => return false,
        };
        field(2) == expect && (field(3) as usize) < self.conversations
    }

    /// The file this index was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn fanout(&self, byte: usize) -> usize {
        u32_at(&self.bytes, HEADER_LEN + byte * 4).unwrap_or(0) as usize
    }

    fn fanout_range(&self, first: u8) -> (usize, usize) {
        let hi = self.fanout(first as usize).min(self.n);
        let lo = if first == 0 {
            0
        } else {
            self.fanout(first as usize - 1).min(hi)
        };
        (lo, hi)
    }

    fn id_bytes(&self, pos: u32) -> Option<&[u8]> {
        if pos as usize >= self.n {
            return None;
        }
        let at = self.ids_at + pos as usize * ID_LEN;
        self.bytes.get(at..at + ID_LEN)
    }

    /// The position of the `k`th id in id order: the id-order table's
    /// entry (version 2), `k` itself (version 1); `None` out of range.
    fn sorted(&self, k: usize) -> Option<u32> {
        if k >= self.n {
            return None;
        }
        let pos = match self.order_at {
            None => k as u32,
            Some(at) => u32_at(&self.bytes, at + k * 4)?,
        };
        ((pos as usize) < self.n).then_some(pos)
    }

    fn sorted_id_bytes(&self, k: usize) -> Option<&[u8]> {
        self.id_bytes(self.sorted(k)?)
    }

    /// Where the `k`th entry in id order lies, for errors.
    fn order_entry_at(&self, k: usize) -> usize {
        match self.order_at {
            None => self.ids_at + k * ID_LEN,
            Some(at) => at + k * 4,
        }
    }

    fn conversation_bytes(&self, k: u32) -> Option<&[u8]> {
        if k as usize >= self.conversations {
            return None;
        }
        let at = self.conversations_at + k as usize * ID_LEN;
        self.bytes.get(at..at + ID_LEN)
    }

    fn edge(&self, k: usize) -> Option<u32> {
        if k >= self.extra {
            return None;
        }
        u32_at(&self.bytes, self.extra_at + k * 4)
    }

    fn field(&self, pos: u32, k: usize) -> Option<u32> {
        if pos as usize >= self.n {
            return None;
        }
        u32_at(
            &self.bytes,
            self.records_at + pos as usize * RECORD_LEN + 4 * k,
        )
    }

    /// The session's position: fan-out, then a binary search. Unchecked
    /// beyond that: a position found holds exactly `id`, but ids out of
    /// order (a damaged file) can hide one; [`LineageIndex::lookup`] checks
    /// the neighbours of what it finds.
    pub fn position(&self, id: &ObjectId) -> Option<u32> {
        self.find(id).map(|(_, pos)| pos)
    }

    /// The id's place in id order and its position: an interpolation
    /// search ([`crate::hash::interpolated_lower_bound`]), each probe of
    /// which reads the id-order list and then an id, two places of the
    /// file.
    fn find(&self, id: &ObjectId) -> Option<(usize, u32)> {
        let want = id.as_bytes();
        let (lo, hi) = self.fanout_range(want[0]);
        let k = crate::hash::interpolated_lower_bound(lo, hi, want, |k| {
            self.sorted(k).and_then(|pos| self.id_bytes(pos))
        });
        if k >= hi {
            return None;
        }
        let pos = self.sorted(k)?;
        (self.id_bytes(pos)? == &want[..]).then_some((k, pos))
    }

    /// As [`LineageIndex::position`], for walks: the id found must sort
    /// strictly between its neighbours (no id twice, no local disorder),
    /// else `CorruptFile`. O(log N), whatever the file holds.
    pub fn lookup(&self, id: &ObjectId) -> Result<Option<u32>> {
        let Some((k, pos)) = self.find(id) else {
            return Ok(None);
        };
        let here = self.id_bytes(pos);
        let before = k.checked_sub(1).and_then(|p| self.sorted_id_bytes(p));
        let after = self.sorted_id_bytes(k + 1);
        if before.is_some_and(|b| Some(b) >= here) || after.is_some_and(|a| Some(a) <= here) {
            return Err(self.corrupt((
                self.order_entry_at(k),
                format!("ids out of order around position {pos}"),
            )));
        }
        Ok(Some(pos))
    }

    /// The id at `pos`.
    pub fn id(&self, pos: u32) -> Option<ObjectId> {
        self.id_bytes(pos).and_then(ObjectId::from_slice)
    }

    /// The positions of the session's parents, first parent first, once
    /// its record is checked (see [`LineageIndex::check`]): every parent is
    /// in range and of a smaller generation, so a walk down parents ends.
    /// `CorruptFile` (naming the file) when the record fails.
    pub fn parents(&self, pos: u32) -> Result<Parents<'_>> {
        self.record(pos)?;
        Ok(self.parents_unchecked(pos))
    }

    fn parents_unchecked(&self, pos: u32) -> Parents<'_> {
        let first = self.field(pos, 0).unwrap_or(NO_PARENT);
        let second = self.field(pos, 1).unwrap_or(NO_PARENT);
        Parents {
            ix: self,
            first,
            second,
            stage: 0,
        }
    }

    /// The first parent's position, once the record is checked (as
    /// [`LineageIndex::parents`]).
    pub fn first_parent(&self, pos: u32) -> Result<Option<u32>> {
        self.record(pos)?;
        Ok(self.field(pos, 0).filter(|p| *p != NO_PARENT))
    }

    /// 1 for a session without parents, else 1 + the largest generation of
    /// its parents. 0 for a position out of range.
    pub fn generation(&self, pos: u32) -> u32 {
        self.field(pos, 2).unwrap_or(0)
    }

    /// The conversation id.
    pub fn conversation(&self, pos: u32) -> Option<ObjectId> {
        self.conversation_bytes(self.field(pos, 3)?)
            .and_then(ObjectId::from_slice)
    }

    /// Milliseconds since the Unix epoch (0 for a position out of range).
    pub fn created_at(&self, pos: u32) -> i64 {
        if pos as usize >= self.n {
            return 0;
        }
        u64_at(
            &self.bytes,
            self.records_at + pos as usize * RECORD_LEN + 16,
        )
        .unwrap_or(0) as i64
    }

    /// The length of the session's full message history.
    pub fn messages(&self, pos: u32) -> u64 {
        if pos as usize >= self.n {
            return 0;
        }
        u64_at(
            &self.bytes,
            self.records_at + pos as usize * RECORD_LEN + 24,
        )
        .unwrap_or(0)
    }

    /// Everything recorded of the session at `pos`, its record checked;
    /// `None` for a position out of range.
    pub fn facts(&self, pos: u32) -> Result<Option<SessionFacts>> {
        if pos as usize >= self.n {
            return Ok(None);
        }
        let parents = self.parents(pos)?.filter_map(|p| self.id(p)).collect();
        Ok(self.conversation(pos).map(|conversation| SessionFacts {
            parents,
            created_at: self.created_at(pos),
            conversation,
            messages: self.messages(pos),
        }))
    }

    /// Checks every record against the session object it names; one line
    /// per disagreement, each naming the file.
    pub fn verify_against(&self, sessions: &BTreeMap<ObjectId, Session>) -> Vec<String> {
        let mut problems = Vec::new();
        let path = self.path.display();
        for pos in 0..self.n as u32 {
            let Some(id) = self.id(pos) else { continue };
            let Some(s) = sessions.get(&id) else {
                problems.push(format!(
                    "{path}: names session {id}, which the store lacks; a repack rewrites it"
                ));
                continue;
            };
            let want = SessionFacts::of(&id, s);
            let have = self.facts(pos).ok().flatten();
            if have.as_ref() != Some(&want) {
                let what = match &have {
                    None => "its record",
                    Some(h) if h.parents != want.parents => "its parents",
                    Some(h) if h.created_at != want.created_at => "its creation time",
                    Some(h) if h.conversation != want.conversation => "its conversation",
                    Some(_) => "its message count",
                };
                problems.push(format!(
                    "{path}: {what} for session {id} disagree with the object"
                ));
            }
        }
        problems
    }
}

/// Parent positions of one session.
#[derive(Debug, Clone)]
pub struct Parents<'a> {
    ix: &'a LineageIndex,
    first: u32,
    second: u32,
    /// 0: first, 1: second, 2+: extra edge `second + stage - 2`, done at u32::MAX.
    stage: u32,
}

impl Iterator for Parents<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        loop {
            match self.stage {
                0 => {
                    self.stage = 1;
                    if self.first != NO_PARENT {
                        return Some(self.first);
                    }
                    self.stage = u32::MAX;
                }
                1 => {
                    if self.second == NO_PARENT {
                        self.stage = u32::MAX;
                    } else if self.second & EXTRA_FLAG == 0 {
                        self.stage = u32::MAX;
                        return Some(self.second);
                    } else {
                        self.stage = 2;
                    }
                }
                u32::MAX => return None,
                k => {
                    let at = (self.second & !EXTRA_FLAG) as usize + (k - 2) as usize;
                    let Some(v) = self.ix.edge(at) else {
                        self.stage = u32::MAX;
                        return None;
                    };
                    self.stage = if v & EXTRA_FLAG != 0 { u32::MAX } else { k + 1 };
                    return Some(v & !EXTRA_FLAG);
                }
            }
        }
    }
}
