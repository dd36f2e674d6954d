//! Reading a pack a block at a time, for the passes over every object (gc's
//! marking and sweep, fsck): the index's entries grouped by block, each
//! block inflated once and its records checked as [`Pack::read`] checks
//! them, with the same errors. Blocks are independent, so callers may read
//! different blocks on different threads.

use super::{Pack, CHECKSUM_LEN};
use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::object::{object_id, ObjectKind};
use crate::odb::journal::STREAM_VERIFY_ABOVE;

/// One object of a block, as the pack's index has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRecord {
    pub id: ObjectId,
    /// Offset of its record in the decompressed block.
    pub offset: u32,
    /// Length of its record, kind byte included.
    pub len: u32,
}

/// A pack's index entries grouped by block, each block's in offset order.
#[derive(Debug, Default)]
pub struct BlockDirectory {
    /// `records[starts[n]..starts[n + 1]]` are block `n`'s.
    starts: Vec<usize>,
    records: Vec<BlockRecord>,
    /// Entries naming a block the block table does not have (a damaged
    /// index): reading them is an error, as [`Pack::read`] says.
    strays: Vec<BlockRecord>,
}

impl BlockDirectory {
    /// Blocks in the pack's block table.
    pub fn blocks(&self) -> u32 {
        self.starts.len().saturating_sub(1) as u32
    }

    /// Block `n`'s objects, in offset order.
    pub fn records(&self, n: u32) -> &[BlockRecord] {
        let n = n as usize;
        match (self.starts.get(n), self.starts.get(n + 1)) {
            (Some(&a), Some(&b)) => &self.records[a..b],
            _ => &[],
        }
    }

    /// Entries whose block does not exist.
    pub fn strays(&self) -> &[BlockRecord] {
        &self.strays
    }

    /// Every object, in pack order (block, offset), strays last.
    pub fn ids(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.records.iter().chain(&self.strays).map(|r| r.id)
    }
}

/// What gc's sweep does with a pack's blocks ([`Pack::sweep_plan`]): those
/// with an object to leave out are "dirty" (inflated, their other objects
/// written again), the rest are copied as they are.
#[derive(Debug, Default)]
pub struct SweepPlan {
    /// Per block: 0 no object, 1 clean, 2 dirty.
    state: Vec<u8>,
    /// The objects to keep of dirty blocks, by block, in offset order.
    dirty: std::collections::BTreeMap<u32, Vec<BlockRecord>>,
    /// The objects of clean blocks, with their block, in id order.
    clean: Vec<(u32, BlockRecord)>,
    /// Entries (not left out) whose block does not exist.
    strays: Vec<BlockRecord>,
}

impl SweepPlan {
    /// Blocks in the pack's block table.
    pub fn blocks(&self) -> usize {
        self.state.len()
    }
    /// Whether any index entry names block `n`.
    pub fn used(&self, n: u32) -> bool {
        self.state.get(n as usize).is_some_and(|s| *s != 0)
    }
    /// Whether block `n` holds an object to leave out.
    pub fn is_dirty(&self, n: u32) -> bool {
        self.state.get(n as usize) == Some(&2)
    }
    /// The objects to keep of dirty block `n`, in offset order.
    pub fn records(&self, n: u32) -> &[BlockRecord] {
        self.dirty.get(&n).map_or(&[], Vec::as_slice)
    }
    /// The objects of clean blocks, with their block, in id order.
    pub fn clean_records(&self) -> impl Iterator<Item = (u32, &BlockRecord)> + '_ {
        self.clean.iter().map(|(b, r)| (*b, r))
    }
    /// Entries whose block does not exist (a damaged index).
    pub fn strays(&self) -> &[BlockRecord] {
        &self.strays
    }
}

/// An object of a block as read: its kind, the length of its payload and,
/// when wanted, the payload itself, verified.
pub type Record<'a> = (ObjectKind, usize, Option<&'a [u8]>);

/// An object of a block: its id, and its [`Record`] or why it does not read.
pub type ScanItem<'a> = (ObjectId, Result<Record<'a>>);

impl Pack {
    /// The index's entries grouped by block (a counting sort: no id is
    /// compared). Checks the index first, as every read does.
    pub fn directory(&self) -> Result<BlockDirectory> {
        self.ensure_index()?;
        let view = self.view();
        let blocks = self.layout.blocks;
        let mut counts = vec![0usize; blocks + 1];
        let mut strays = Vec::new();
        let mut all = Vec::with_capacity(self.layout.objects);
        for (i, id) in view.ids().enumerate() {
            let Some((block, offset, len)) = view.entry(i) else {
                continue;
            };
            let r = BlockRecord { id, offset, len };
            if (block as usize) < blocks {
                counts[block as usize + 1] += 1;
                all.push((block, r));
            } else {
                strays.push(r);
            }
        }
        for n in 1..counts.len() {
            counts[n] += counts[n - 1];
        }
        let starts = counts.clone();
        let mut records = vec![
            BlockRecord {
                id: ObjectId::from_bytes([0; 32]),
                offset: 0,
                len: 0,
            };
            all.len()
        ];
        let mut next = counts;
        for (block, r) in all {
            records[next[block as usize]] = r;
            next[block as usize] += 1;
        }
        for n in 0..blocks {
            records[starts[n]..starts[n + 1]].sort_unstable_by_key(|r| r.offset);
        }
        Ok(BlockDirectory {
            starts,
            records,
            strays,
        })
    }

    /// Appends to `out` the payloads of objects `keep` accepts, from blocks
    /// spread evenly over the pack, about `budget` bytes of them: samples a
    /// new dictionary is trained on. Objects that do not read are passed
    /// over (the caller meets them again, and reports them, as it copies).
    pub fn sample_records(
        &self,
        keep: &dyn Fn(&ObjectId) -> bool,
        budget: usize,
        out: &mut Vec<Vec<u8>>,
    ) -> Result<()> {
        let dir = self.directory()?;
        let blocks = dir.blocks();
        if blocks == 0 || budget == 0 {
            return Ok(());
        }
        let raw: u64 = (0..blocks)
            .filter_map(|n| self.view().block_entry(n).map(|(_, _, r)| u64::from(r)))
            .sum();
        // Every k-th block, so that about `budget` bytes are read.
        let step = (raw / budget as u64).max(1) as usize;
        let mut taken = 0;
        for n in (0..blocks).step_by(step) {
            if taken >= budget {
                break;
            }
            let records: Vec<BlockRecord> = dir
                .records(n)
                .iter()
                .filter(|r| keep(&r.id))
                .cloned()
                .collect();
            self.read_block(n, &records, &|_| true, &mut |items| {
                for (_, read) in items {
                    if let Ok((_, _, Some(payload))) = read {
                        taken += payload.len();
                        out.push(payload.to_vec());
                    }
                }
            });
        }
        Ok(())
    }

    /// Reads the objects `records` of block `n` (from [`Pack::directory`])
    /// with the block inflated once, and hands them to `f` in one batch,
    /// each as [`Pack::read`] would return it: its kind and payload,
    /// re-hashed, or the error `read` would give, word for word. Only the
    /// payloads of kinds `wanted` accepts are hashed and handed over (gc's
    /// marking reads sessions and never hashes a message); the others come
    /// with their kind alone, unverified. A block too large to inflate on
    /// trust is read record by record, streaming, as `read` does.
    pub fn read_block(
        &self,
        n: u32,
        records: &[BlockRecord],
        wanted: &dyn Fn(ObjectKind) -> bool,
        f: &mut dyn FnMut(&[ScanItem<'_>]),
    ) {
        if records.is_empty() {
            return;
        }
        if self
            .view()
            .block_entry(n)
            .is_some_and(|(_, _, rlen)| rlen as usize > STREAM_VERIFY_ABOVE)
        {
            for r in records {
                match self.read(&r.id) {
                    Ok(Some(o)) => {
                        let payload = wanted(o.kind()).then_some(o.payload());
                        f(&[(r.id, Ok((o.kind(), o.payload().len(), payload)))]);
                    }
                    Ok(None) => f(&[(r.id, Err(Error::NotFound { id: r.id }))]),
                    Err(e) => f(&[(r.id, Err(e))]),
                }
            }
            return;
        }
        let data = match self.inflate(n) {
            Ok(d) => d,
            Err(reason) => {
                let items: Vec<ScanItem<'_>> = records
                    .iter()
                    .map(|r| (r.id, Err(Error::corrupt(r.id, reason.clone()))))
                    .collect();
                f(&items);
                return;
            }
        };
        let items: Vec<ScanItem<'_>> = records
            .iter()
            .map(|r| (r.id, self.record(n, r, &data, wanted)))
            .collect();
        f(&items);
    }

    /// One record of inflated block `n`, checked as [`Pack::read`] checks it.
    fn record<'a>(
        &self,
        n: u32,
        r: &BlockRecord,
        data: &'a [u8],
        wanted: &dyn Fn(ObjectKind) -> bool,
    ) -> Result<Record<'a>> {
        let (offset, len) = (r.offset as usize, r.len as usize);
        let corrupt = |reason: String| Err(Error::corrupt(r.id, reason));
        let Some(record) = offset
            .checked_add(len)
            .and_then(|end| data.get(offset..end))
        else {
            return corrupt(format!("{}: record lies outside block {n}", self.name));
        };
        let Some((&code, payload)) = record.split_first() else {
            return corrupt(format!("{}: empty record", self.name));
        };
        let Some(kind) = ObjectKind::from_code(code) else {
            return corrupt(format!("{}: unknown object kind code {code}", self.name));
        };
        if !wanted(kind) {
            return Ok((kind, payload.len(), None));
        }
        let actual = object_id(kind, payload);
        if actual != r.id {
            return corrupt(format!(
                "in {}: content hashes to {actual} ({kind}, {} bytes), not to its id",
                self.name,
                payload.len()
            ));
        }
        Ok((kind, payload.len(), Some(payload)))
    }

    /// Block `n` inflated, bypassing the cache (a pass over every block
    /// would only churn it). The errors are [`Pack::read`]'s.
    fn inflate(&self, n: u32) -> Result<Vec<u8>, String> {
        let mut data = Vec::new();
        self.inflate_block(n, &mut data)?;
        let rlen = self.compressed_block(n)?.1;
        if data.len() != rlen {
            return Err(format!(
                "{}: block {n} decompressed to {} bytes, not {rlen}",
                self.name,
                data.len()
            ));
        }
        Ok(data)
    }

    /// How many of the pack's objects `set` holds.
    /// The sessions among `records` of block `n`, by each record's kind
    /// byte: a repack that copies the block whole names the sessions it
    /// packed (for the lineage index) without checking their hashes, which
    /// whoever reads one does. A record outside the block is left out.
    pub fn sessions_among(&self, n: u32, records: &[&BlockRecord]) -> Result<Vec<ObjectId>> {
        let data = self.inflate(n).map_err(Error::Invalid)?;
        Ok(records
            .iter()
            .filter(|r| data.get(r.offset as usize) == Some(&ObjectKind::Session.code()))
            .map(|r| r.id)
            .collect())
    }

    pub fn count_in(&self, set: &crate::hash::IdSet) -> Result<usize> {
        self.ensure_index()?;
        Ok(self.view().ids().filter(|id| set.contains(id)).count())
    }

    /// Sorts the pack's blocks for gc's sweep: a block is dirty when
    /// `leave_out` accepts one of its objects (every used block, with
    /// `all_dirty`). One pass over the index, in id order; only dirty
    /// blocks' entries are grouped.
    pub fn sweep_plan(
        &self,
        leave_out: &dyn Fn(&ObjectId) -> Result<bool>,
        all_dirty: bool,
    ) -> Result<SweepPlan> {
        self.ensure_index()?;
        let view = self.view();
        let blocks = self.layout.blocks;
        let mut plan = SweepPlan {
            state: vec![0; blocks],
            ..SweepPlan::default()
        };
        let mut kept: Vec<(u32, BlockRecord)> = Vec::with_capacity(self.layout.objects);
        for (i, id) in view.ids().enumerate() {
            let Some((block, offset, len)) = view.entry(i) else {
                continue;
            };
            let out = leave_out(&id)?;
            let r = BlockRecord { id, offset, len };
            match plan.state.get_mut(block as usize) {
                None if !out => plan.strays.push(r),
                None => {}
                Some(state) => {
                    *state = if out || all_dirty { 2 } else { (*state).max(1) };
                    if !out {
                        kept.push((block, r));
                    }
                }
            }
        }
        for (block, r) in kept {
            if plan.state[block as usize] == 2 {
                plan.dirty.entry(block).or_default().push(r);
            } else {
                plan.clean.push((block, r));
            }
        }
        for records in plan.dirty.values_mut() {
            records.sort_unstable_by_key(|r| r.offset);
        }
        Ok(plan)
    }

    /// Whether the pack's bytes hash to its trailer and to the checksum its
    /// index names: then every block is the one its writer wrote, and may be
    /// copied into another pack without being inflated.
    pub fn checksum_holds(&self) -> bool {
        let Some(body_len) = self.pack.len().checked_sub(CHECKSUM_LEN) else {
            return false;
        };
        let sum = blake3::hash(&self.pack[..body_len]);
        sum.as_bytes()[..] == self.pack[body_len..]
            && self.ensure_index().is_ok()
            && sum.as_bytes()[..] == *self.view().pack_checksum()
    }
}
