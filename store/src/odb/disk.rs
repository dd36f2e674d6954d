//! The disk backend: journal segments and packs under one store directory,
//! shared by every process that opens it. It catches up with what others
//! appended (under the write lock before a write, cutting a torn tail;
//! without a lock before a read), reads through the journal then the packs,
//! and keeps the number of segments and packs small (maintain, repack,
//! under the packer's lock), moving the operations of packed segments to
//! the op log.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use super::journal::{self, FrameBuilder, Journal};
use super::layout::{check_format, raise_format, STORE_FORMAT_PACK2, STORE_FORMAT_RAW};
use super::lock::{LockFile, LockGuard};
use super::oplog::{oplog_files, read_oplog_file, write_oplog_file};
use super::pack::{self, Pack, PackOptions, RecordLoc};
use super::{
    ObjectBackend, OdbStats, OpenOptions, RawOp, RepackOptions, RepackStats, SyncTicket, WriteLock,
};
use crate::error::{Error, IoResultExt, OdbError, Result};
use crate::hash::{IdSet, ObjectId, Prefix};
use crate::object::{EncodedObject, ObjectKind, Session};

/// Journal and packs on disk, shared by every process that opens the store.
#[derive(Debug)]
pub struct DiskBackend {
    root: PathBuf,
    journal: Journal,
    packs: RwLock<Vec<Arc<Pack>>>,
    /// `LOCK`: held for each write's few syscalls. `None` when read-only.
    write_lock: Option<LockFile>,
    /// `pack.lock`: held while packs are written and replaced, so that two
    /// processes never pack the same segments. `None` when read-only.
    pack_lock: Option<LockFile>,
    /// How long a write waits for `LOCK`.
    wait: Option<std::time::Duration>,
    /// `LOCK`'s counter of pack replacements when this handle last read the
    /// pack directory (`u64::MAX`: never).
    packs_seen: std::sync::atomic::AtomicU64,
    auto_pack: bool,
    /// Whether `FORMAT` is known to say at least [`STORE_FORMAT_RAW`], so
    /// that a raw object may be appended without reading it.
    raw_format: std::sync::atomic::AtomicBool,
    /// Whether `FORMAT` is known to say at least [`STORE_FORMAT_PACK2`], so
    /// that a packer may write a version-2 pack without reading it.
    pack2_format: std::sync::atomic::AtomicBool,
    notes: Mutex<Vec<String>>,
    /// What the journal scan found damaged, kept for fsck.
    damage: Vec<String>,
}

impl DiskBackend {
    /// Opens the store's storage. Takes no lock and writes nothing: a torn
    /// tail is cut by the next write, under the write lock.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<DiskBackend> {
        check_format(path)?;
        let (write_lock, pack_lock) = if opts.read_only {
            (None, None)
        } else {
            (
                Some(LockFile::open(&path.join("LOCK"), path)?),
                Some(LockFile::open(&path.join("pack.lock"), path)?),
            )
        };
        let packs_dir = path.join("packs");
        let journal = Journal::open(&path.join("journal"), opts.read_only, opts.segment_target)?;
        let mut packs = Vec::new();
        for name in pack::list_packs(&packs_dir)? {
            match Pack::open(&packs_dir, &name) {
                Ok(p) => packs.push(Arc::new(p)),
                // Replaced by another process's repack since the listing.
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let notes = journal.take_notes();
        Ok(DiskBackend {
            root: path.to_path_buf(),
            journal,
            packs: RwLock::new(packs),
            write_lock,
            pack_lock,
            wait: opts.wait,
            packs_seen: std::sync::atomic::AtomicU64::new(u64::MAX),
            raw_format: std::sync::atomic::AtomicBool::new(false),
            pack2_format: std::sync::atomic::AtomicBool::new(false),
            auto_pack: opts.auto_pack,
            damage: notes
                .iter()
                .filter(|n| !n.contains("torn write"))
                .cloned()
                .collect(),
            notes: Mutex::new(notes),
        })
    }

    /// Re-reads the pack directory: opens packs written by other processes
    /// and lets go of those they replaced (a reader that still maps one
    /// keeps reading it; unlinking does not take it away). Then forgets
    /// journal segments packed and deleted meanwhile.
    fn refresh_packs(&self) -> Result<()> {
        let dir = self.root.join("packs");
        let names = pack::list_packs(&dir)?;
        let current = self.packs();
        let same = names.len() == current.len()
            && current.iter().all(|p| names.iter().any(|n| n == p.name()));
        if same {
            // The packs may be the same and segments gone all the same (gc
            // published its pack while this handle looked): an object that
            // was only in them must not count as stored.
            return self.journal.forget_missing();
        }
        let mut next = Vec::with_capacity(names.len());
        for name in &names {
            if let Some(p) = current.iter().find(|p| p.name() == name) {
                next.push(p.clone());
                continue;
            }
            match Pack::open(&dir, name) {
                Ok(p) => next.push(Arc::new(p)),
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        *self.packs.write().expect("pack list lock") = next;
        self.journal.forget_missing()
    }

    /// Notes what the journal scans found since the last call (torn tails
    /// cut under the write lock, damage), and logs repairs.
    fn collect_notes(&self) {
        let notes = self.journal.take_notes();
        if notes.is_empty() {
            return;
        }
        if notes.iter().any(|n| n.contains("torn write")) {
            append_recovery_log(&self.root, &notes);
        }
        self.notes.lock().expect("notes lock").extend(notes);
    }

    fn read_here(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        if let Some(o) = self.journal.read(id)? {
            return Ok(Some(o));
        }
        for p in self.packs() {
            if let Some(o) = p.read(id)? {
                return Ok(Some(o));
            }
        }
        Ok(None)
    }

    /// What every repack and sweep starts with: the pack lock (one packer
    /// at a time), leftovers of a dead packer cleared, this handle caught
    /// up, the storage's sizes before, and the journal's newest segments
    /// sealed (under the write lock, for a moment) so they can be packed.
    fn start_packing(&self) -> Result<(LockGuard<'_>, super::OdbStats, Vec<u64>)> {
        let pack_lock = self.pack_lock.as_ref().ok_or(Error::ReadOnly)?;
        let one_at_a_time = pack_lock.lock(self.wait)?;
        self.clear_leftovers();
        self.refresh()?;
        self.refresh_packs()?;
        self.journal.forget_missing()?;
        let before = self.stats()?;
        let sealed = {
            let guard = self.lock_write()?;
            self.journal.seal(&guard)?
        };
        Ok((one_at_a_time, before, sealed))
    }

    /// Raises `FORMAT` to [`STORE_FORMAT_PACK2`] before the first version-2
    /// pack or version-3 op-log file is written, so that an older sessctl
    /// refuses the store as newer instead of reading those files as damage
    /// (objects-format.md, "Versioning"). Under the write lock, as every
    /// raise is, so that two raises never race.
    fn raise_for_packs(&self) -> Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.pack2_format.load(Relaxed) {
            return Ok(());
        }
        let _guard = self.lock_write()?;
        raise_format(&self.root, STORE_FORMAT_PACK2)?;
        self.pack2_format.store(true, Relaxed);
        Ok(())
    }

    /// Removes what a packer that died left behind (`packs/.tmp-*`,
    /// `oplog/.tmp-*`). The caller holds the pack lock, so no one is writing
    /// one now.
    fn clear_leftovers(&self) {
        for dir in [self.root.join("packs"), self.root.join("oplog")] {
            for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
    }

    fn lock_write(&self) -> Result<LockGuard<'_>> {
        let lock = self.write_lock.as_ref().ok_or(Error::ReadOnly)?;
        lock.lock(self.wait)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn packs(&self) -> Vec<Arc<Pack>> {
        self.packs.read().expect("pack list lock").clone()
    }

    /// Packs the objects of `old` packs and `sealed` segments (those `keep`
    /// accepts) into one new pack, moves the segments' operations to the
    /// op log, and deletes what the new pack replaces. The caller holds the
    /// pack lock. The new pack is written without the write lock; it is
    /// published (and what it replaces deleted) under it, after `rescue`
    /// named the objects left out that writers have come to use meanwhile,
    /// which go back into the journal.
    #[allow(clippy::too_many_arguments)]
    fn repack_these(
        &self,
        opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
        rescue: Option<&super::Rescue<'_>>,
        before: OdbStats,
        sealed: Vec<u64>,
        old: Vec<Arc<Pack>>,
    ) -> Result<RepackStats> {
        self.raise_for_packs()?;
        let mut objects = Vec::new();
        let kept = |id: &ObjectId| keep.is_none_or(|k| k(id));
        // A damaged object is not carried into the new pack, and the file
        // holding it is not deleted: its bytes may still be salvaged.
        let mut corrupt = Vec::new();
        let mut keep_packs: HashSet<String> = HashSet::new();
        for p in &old {
            for id in p.ids_in_pack_order()? {
                if kept(&id) {
                    match p.read(&id) {
                        Ok(Some(o)) => objects.push(o),
                        Ok(None) => return Err(Error::NotFound { id }),
                        Err(e) if e.is_corruption() => {
                            corrupt.push(e.to_string());
                            keep_packs.insert(p.name().to_owned());
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        for id in self.journal.ids_in(&sealed) {
            if kept(&id) {
                match self.journal.read(&id) {
                    Ok(Some(o)) => objects.push(o),
                    Ok(None) => return Err(Error::NotFound { id }),
                    // Its segment holds damage, and damaged segments stay.
                    Err(e) if e.is_corruption() => corrupt.push(e.to_string()),
                    Err(e) => return Err(e),
                }
            }
        }
        let ordered = Self::pack_order(objects);
        let sessions: Vec<ObjectId> = ordered
            .iter()
            .filter(|o| o.kind() == ObjectKind::Session)
            .map(EncodedObject::id)
            .collect();
        let packs_dir = self.root.join("packs");
        let written = if ordered.is_empty() {
            None
        } else {
            Some(pack::write_pack(&packs_dir, &ordered, opts.pack)?)
        };
        let mut stats = self.publish(written, &old, &keep_packs, &sealed, rescue, before)?;
        stats.corrupt = corrupt;
        stats.sessions = Some(sessions);
        Ok(stats)
    }

    /// The end of every repack: moves the operations of `sealed` segments
    /// to the op log, then, under the write lock, writes back what `rescue`
    /// names, puts the `written` pack in the place of the `old` packs (but
    /// `keep_packs`, which hold damage) and the segments, and deletes those.
    fn publish(
        &self,
        written: Option<pack::WrittenPack>,
        old: &[Arc<Pack>],
        keep_packs: &HashSet<String>,
        sealed: &[u64],
        rescue: Option<&super::Rescue<'_>>,
        before: OdbStats,
    ) -> Result<RepackStats> {
        let packs_dir = self.root.join("packs");
        // Operations are history: they move to the op-log archive before
        // their segments go (readers skip sequence numbers seen twice).
        let ops = self.journal.ops_in(sealed)?;
        if !ops.is_empty() {
            write_oplog_file(&self.root.join("oplog"), &ops)?;
        }
        let new_pack = match &written {
            Some(w) => Some(Arc::new(Pack::open(&packs_dir, &w.name)?)),
            None => None,
        };
        let guard = self.lock_write()?;
        let mut rescued = Vec::new();
        if let Some(rescue) = rescue {
            rescued = rescue()?;
            if !rescued.is_empty() {
                let mut objects = Vec::with_capacity(rescued.len());
                for id in &rescued {
                    objects.push(self.read(id)?.ok_or(Error::NotFound { id: *id })?);
                }
                let (_, end) = self.append_frame(&guard, &objects, &[], false)?;
                self.journal.sync_to(end)?;
            }
        }
        {
            let mut packs = self.packs.write().expect("pack list lock");
            packs.retain(|p| {
                keep_packs.contains(p.name()) || !old.iter().any(|o| Arc::ptr_eq(o, p))
            });
            if let Some(n) = new_pack {
                if !packs.iter().any(|p| p.name() == n.name()) {
                    packs.push(n);
                }
            }
        }
        self.journal.retire(sealed)?;
        // Every writer re-reads the pack directory before its next write.
        guard.bump_counter()?;
        for p in old {
            if written.as_ref().is_some_and(|w| w.name == p.name()) || keep_packs.contains(p.name())
            {
                continue;
            }
            // Index first: without it the pack is no longer listed.
            for path in [p.paths()[1], p.paths()[0]] {
                match fs::remove_file(path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(path, e)),
                }
            }
        }
        drop(guard);
        journal::sync_dir(&packs_dir)?;
        let after = self.stats()?;
        Ok(RepackStats {
            objects: written.as_ref().map_or(0, |w| w.objects),
            packs_before: old.len(),
            segments_packed: sealed.len(),
            bytes_before: before.disk_bytes(),
            bytes_after: after.disk_bytes(),
            copied_blocks: written.as_ref().map_or(0, |w| w.copied_blocks),
            pack_name: written.map(|w| w.name),
            rescued,
            ..RepackStats::default()
        })
    }

    /// gc's sweep (objects-format.md, "Garbage collection"): writes one
    /// new pack from the packs that hold a doomed object, the sealed
    /// segments, and the small packs a geometric merge takes along; every
    /// other pack stays as it is. A block whose objects all survive is
    /// copied as it is (its compressed bytes and table entry); a block with
    /// a doomed object is inflated and its survivors written again. The
    /// caller holds the pack lock.
    /// With `every_pack` (a full repack), every pack is merged, not only
    /// those the geometric merge takes along; and when `opts` are not the
    /// hot ones (a cold repack: larger blocks, a higher level), every block
    /// is written again with them, one block at a time: memory for the
    /// segments' objects only, never for every object.
    fn sweep_these(
        &self,
        opts: &RepackOptions,
        doomed: &IdSet,
        rescue: Option<&super::Rescue<'_>>,
        before: OdbStats,
        sealed: Vec<u64>,
        every_pack: bool,
    ) -> Result<RepackStats> {
        let hot = PackOptions::hot();
        let recompress = every_pack
            && (opts.pack.block_target, opts.pack.zstd_level) != (hot.block_target, hot.zstd_level);
        let packs = self.packs();
        let (mut chosen, mut untouched) = (Vec::new(), Vec::new());
        let mut new_objects = 0;
        let mut dropping = false;
        // Packs that lose an object: their dictionaries may hold its text
        // (a dictionary is made of its pack's records), so none of their
        // dictionaries outlives them (see below).
        let mut losing: HashSet<String> = HashSet::new();
        for p in packs {
            // Nothing to drop (auto-pack): no pass over every pack's ids.
            let gone = if doomed.is_empty() {
                0
            } else {
                p.count_in(doomed)?
            };
            if gone > 0 {
                losing.insert(p.name().to_owned());
                dropping = true;
                new_objects += p.object_count() - gone;
                chosen.push(p);
            } else {
                untouched.push(p);
            }
        }
        let segment_ids: Vec<ObjectId> = self
            .journal
            .ids_in(&sealed)
            .into_iter()
            .filter(|id| !doomed.contains(id))
            .collect();
        new_objects += segment_ids.len();
        if every_pack {
            chosen.extend(untouched);
        } else {
            chosen.extend(geometric_merge(new_objects, untouched));
        }
        // Nothing dropped from a pack, no segment to pack, and at most one
        // small pack to "merge": writing it again would change nothing.
        let current = chosen
            .iter()
            .all(|p| p.version() == pack::PACK_FORMAT_VERSION);
        if !dropping && sealed.is_empty() && chosen.len() <= 1 && current {
            return Ok(RepackStats {
                objects: 0,
                packs_before: before.packs,
                bytes_before: before.disk_bytes(),
                bytes_after: before.disk_bytes(),
                ..RepackStats::default()
            });
        }
        // The largest first: its blocks keep their place at the front.
        chosen.sort_by_key(|p| std::cmp::Reverse(p.object_count()));
        self.raise_for_packs()?;
        let packs_dir = self.root.join("packs");
        let mut w = pack::PackWriter::create(&packs_dir, opts.pack)?;
        w.reserve(chosen.iter().map(|p| p.object_count()).sum::<usize>() + segment_ids.len());
        let mut corrupt = Vec::new();
        let mut keep_packs: HashSet<String> = HashSet::new();
        let mut rewritten = 0;
        // The segments' objects, read first: they train the new pack's
        // dictionary when no chosen pack has one to give.
        let mut objects = Vec::with_capacity(segment_ids.len());
        for id in segment_ids {
            let mut packed = false;
            for p in &chosen {
                packed |= p.contains(&id)?;
            }
            if packed {
                continue;
            }
            match self.journal.read(&id) {
                Ok(Some(o)) => objects.push(o),
                Ok(None) => return Err(Error::NotFound { id }),
                // Its segment holds damage, and damaged segments stay.
                Err(e) if e.is_corruption() => corrupt.push(e.to_string()),
                Err(e) => return Err(e),
            }
        }
        // A dictionary holds pieces of the records it was trained on, and
        // every dictionary is trained on records of the pack holding it
        // (a merge that drops nothing carries it along with all of them).
        // So a pack that loses an object keeps none of its dictionaries:
        // all its blocks are written again, and gc leaves no piece of a
        // dropped object's text behind (objects-format.md, "Garbage
        // collection"). The largest pack that loses nothing lends its
        // dictionary (its first, which its writer trained) to the blocks
        // written again and the new objects: its copied blocks name it
        // already. Else one is trained on what the new pack will hold. A
        // damaged dictionary is not adopted.
        let lender = chosen.iter().find(|p| {
            !losing.contains(p.name()) && p.dictionary_count() > 0 && p.dictionary_bytes(0).is_ok()
        });
        match lender {
            Some(p) => w.adopt_dictionary(p, 0)?,
            None => {
                let mut samples: Vec<Vec<u8>> = Vec::new();
                let budget = opts.pack.dictionary_size.saturating_mul(64);
                let mut taken: usize = objects.iter().map(|o| o.payload().len()).sum();
                for p in &chosen {
                    if taken >= budget {
                        break;
                    }
                    p.sample_records(&|id| !doomed.contains(id), budget - taken, &mut samples)?;
                    taken = objects.iter().map(|o| o.payload().len()).sum::<usize>()
                        + samples.iter().map(Vec::len).sum::<usize>();
                }
                let records: Vec<&[u8]> = objects
                    .iter()
                    .map(EncodedObject::payload)
                    .chain(samples.iter().map(Vec::as_slice))
                    .collect();
                w.train_dictionary(&records)?;
            }
        }
        // A full repack names the sessions it packed (`RepackStats::sessions`).
        let mut sessions: Vec<ObjectId> = Vec::new();
        for (i, p) in chosen.iter().enumerate() {
            // An object another chosen pack holds too (a packer that died
            // between its rename and its deletions) goes in once, the
            // larger pack's copy: here it counts as dropped.
            let earlier = &chosen[..i];
            let skip = |id: &ObjectId| -> Result<bool> {
                if doomed.contains(id) {
                    return Ok(true);
                }
                for e in earlier {
                    if e.contains(id)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            };
            // Blocks are copied unread only from a pack whose bytes are the
            // ones its writer wrote; any other is read object by object,
            // and what fails is left behind with its pack.
            let verbatim = p.checksum_holds();
            let keeps_no_dictionary = losing.contains(p.name()) && p.dictionary_count() > 0;
            let plan = p.sweep_plan(&skip, !verbatim || keeps_no_dictionary || recompress)?;
            let mut new_block = vec![u32::MAX; plan.blocks()];
            for n in 0..plan.blocks() as u32 {
                if !plan.used(n) {
                    continue;
                }
                if !plan.is_dirty(n) {
                    new_block[n as usize] = w.copy_block(p, n)?;
                    continue;
                }
                rewritten += 1;
                let mut failed = None;
                let records = plan.records(n);
                p.read_block(n, records, &|_| true, &mut |items| {
                    for (id, read) in items {
                        if failed.is_some() {
                            continue;
                        }
                        match read {
                            Ok((kind, _, Some(payload))) => {
                                if every_pack && *kind == ObjectKind::Session {
                                    sessions.push(*id);
                                }
                                if let Err(e) = w.push(*id, *kind, payload) {
                                    failed = Some(e);
                                }
                            }
                            Ok((_, _, None)) => {}
                            Err(e) if e.is_corruption() => {
                                corrupt.push(e.to_string());
                                keep_packs.insert(p.name().to_owned());
                            }
                            Err(e) => failed = Some(Error::Invalid(e.to_string())),
                        }
                    }
                });
                if let Some(e) = failed {
                    return Err(e);
                }
            }
            let mut copied: Vec<Vec<&pack::BlockRecord>> = Vec::new();
            if every_pack {
                copied.resize_with(plan.blocks(), Vec::new);
            }
            for (block, r) in plan.clean_records() {
                let nb = new_block[block as usize];
                if nb != u32::MAX {
                    w.copied_object(nb, r);
                    if let Some(c) = copied.get_mut(block as usize) {
                        c.push(r);
                    }
                }
            }
            for (n, records) in copied.iter().enumerate() {
                if !records.is_empty() {
                    sessions.extend(p.sessions_among(n as u32, records)?);
                }
            }
            for r in plan.strays() {
                match p.read(&r.id) {
                    Ok(Some(o)) => {
                        if every_pack && o.kind() == ObjectKind::Session {
                            sessions.push(o.id());
                        }
                        w.push(o.id(), o.kind(), o.payload())?
                    }
                    Ok(None) => return Err(Error::NotFound { id: r.id }),
                    Err(e) if e.is_corruption() => {
                        corrupt.push(e.to_string());
                        keep_packs.insert(p.name().to_owned());
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        for o in Self::pack_order(objects) {
            if every_pack && o.kind() == ObjectKind::Session {
                sessions.push(o.id());
            }
            w.push(o.id(), o.kind(), o.payload())?;
        }
        let written = if w.objects() == 0 {
            None
        } else {
            Some(w.finish()?)
        };
        let wrote = written.is_some();
        let mut stats = self.publish(written, &chosen, &keep_packs, &sealed, rescue, before)?;
        stats.corrupt = corrupt;
        stats.rewritten_blocks = rewritten;
        if every_pack && wrote {
            stats.sessions = Some(sessions);
        }
        Ok(stats)
    }

    /// Objects in the order a new pack should hold them: each conversation's
    /// sessions together, then the blobs they reference in first-use order,
    /// then whatever no session references.
    fn pack_order(objects: Vec<EncodedObject>) -> Vec<EncodedObject> {
        let mut by_id: HashMap<ObjectId, EncodedObject> = HashMap::with_capacity(objects.len());
        let mut input: Vec<ObjectId> = Vec::with_capacity(objects.len());
        for o in objects {
            let id = o.id();
            if by_id.insert(id, o).is_none() {
                input.push(id);
            }
        }
        let mut groups: Vec<(Vec<ObjectId>, Vec<ObjectId>)> = Vec::new();
        let mut group_of: HashMap<ObjectId, usize> = HashMap::new();
        let mut placed: HashSet<ObjectId> = HashSet::new();
        for id in &input {
            let obj = &by_id[id];
            if obj.kind() != ObjectKind::Session {
                continue;
            }
            // An undecodable session is still packed, byte for byte, at the end.
            let Ok(s) = Session::decode(obj.payload()) else {
                continue;
            };
            let conv = s.conversation_id(*id);
            let g = *group_of.entry(conv).or_insert_with(|| {
                groups.push((Vec::new(), Vec::new()));
                groups.len() - 1
            });
            groups[g].0.push(*id);
            placed.insert(*id);
            let refs = s
                .messages
                .added
                .iter()
                .chain(&s.display_messages.added)
                .chain(s.context_state.iter())
                .chain(s.environment_state.iter())
                .chain(s.compaction.as_ref().map(|c| &c.summary));
            for r in refs {
                if by_id.contains_key(r) && placed.insert(*r) {
                    groups[g].1.push(*r);
                }
            }
        }
        let mut out = Vec::with_capacity(input.len());
        for (sessions, blobs) in groups {
            for id in sessions.into_iter().chain(blobs) {
                if let Some(o) = by_id.remove(&id) {
                    out.push(o);
                }
            }
        }
        for id in input {
            if let Some(o) = by_id.remove(&id) {
                out.push(o);
            }
        }
        out
    }
}

/// Which packs an incremental pack of `new_objects` objects merges: the
/// smallest ones, as long as each is no bigger than twice what is merged
/// so far, so that pack sizes grow geometrically and their number stays
/// about log2 of the store's objects.
fn geometric_merge(new_objects: usize, mut packs: Vec<Arc<Pack>>) -> Vec<Arc<Pack>> {
    packs.sort_by_key(|p| p.object_count());
    let mut merged = new_objects.max(1);
    let mut out = Vec::new();
    for p in packs {
        if p.object_count() > 2 * merged {
            break;
        }
        merged += p.object_count();
        out.push(p);
    }
    out
}

fn append_recovery_log(root: &Path, notes: &[String]) {
    use std::io::Write;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if let Ok(mut f) = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join("recovery.log"))
    {
        for n in notes {
            let _ = writeln!(f, "{now} {n}");
        }
        let _ = f.sync_all();
    }
}

impl DiskBackend {
    /// Appends one frame of the objects not stored yet (all of them,
    /// without `dedupe`) and the operations. The caller holds the write
    /// lock, and with it a view of the journal and packs that is current.
    fn append_frame(
        &self,
        _lock: &LockGuard<'_>,
        objects: &[EncodedObject],
        ops: &[RawOp],
        dedupe: bool,
    ) -> Result<(usize, journal::Pos)> {
        let mut frame = FrameBuilder::new();
        let mut seen = HashSet::with_capacity(objects.len());
        let mut raw = false;
        for obj in objects {
            if obj.payload().len() > journal::MAX_OBJECT_SIZE {
                return Err(OdbError::ObjectTooLarge {
                    id: obj.id(),
                    size: obj.payload().len() as u64,
                    limit: journal::MAX_OBJECT_SIZE as u64,
                }
                .into());
            }
            if seen.insert(obj.id()) && !(dedupe && self.contains(&obj.id())?) {
                raw |= obj.kind() == ObjectKind::Raw;
                frame.push_object(obj);
            }
        }
        if raw && !self.raw_format.load(std::sync::atomic::Ordering::Relaxed) {
            // Format 3 before the first raw object: an older sessctl refuses
            // the store as newer rather than reading kind 3 as damage
            // (objects-format.md, "Versioning"). Under the write lock, as an
            // expiry's raise is.
            raise_format(&self.root, STORE_FORMAT_RAW)?;
            self.raw_format
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        for (seq, op) in ops {
            frame.push_op(*seq, op);
        }
        let n = frame.objects_len();
        let end = self.journal.append_locked(&frame, _lock)?;
        Ok((n, end))
    }
}

/// Where a batch read finds each of its objects: the packs at hand, the
/// journal's entries and each pack's records (each with its position among
/// the ids), and the positions found in neither (written or moved by
/// another process since this handle looked).
type Located = (
    Vec<Arc<Pack>>,
    Vec<(journal::EntryLoc, usize)>,
    Vec<Vec<(RecordLoc, usize)>>,
    Vec<usize>,
);

impl DiskBackend {
    /// Where `read` would find each of `ids`: the journal first, then the
    /// packs in order.
    fn locate_many(&self, ids: &[ObjectId]) -> Result<Located> {
        let packs = self.packs();
        let mut in_journal = Vec::new();
        let mut in_packs: Vec<Vec<(RecordLoc, usize)>> = vec![Vec::new(); packs.len()];
        let mut elsewhere = Vec::new();
        'ids: for (i, id) in ids.iter().enumerate() {
            if let Some(at) = self.journal.locate(id) {
                in_journal.push((at, i));
                continue;
            }
            for (p, wanted) in packs.iter().zip(&mut in_packs) {
                if let Some(at) = p.locate(id)? {
                    wanted.push((at, i));
                    continue 'ids;
                }
            }
            elsewhere.push(i);
        }
        Ok((packs, in_journal, in_packs, elsewhere))
    }
}

impl ObjectBackend for DiskBackend {
    fn write_lock(&self) -> Result<WriteLock<'_>> {
        let guard = self.lock_write()?;
        // Catch up under the lock: the journal's tail (a torn one is cut
        // now) and the pack list, so that "already stored" means stored in
        // files that still exist.
        // The pack directory is read again only when a packer replaced
        // packs since this handle last read it (LOCK's counter, bumped
        // under this lock): a write then costs no directory listing.
        let caught_up = self.journal.refresh_locked_now(&guard).and_then(|()| {
            use std::sync::atomic::Ordering::Relaxed;
            let replaced = guard.counter();
            if self.packs_seen.load(Relaxed) == replaced {
                return Ok(());
            }
            self.refresh_packs()?;
            self.packs_seen.store(replaced, Relaxed);
            Ok(())
        });
        self.collect_notes();
        caught_up?;
        Ok(WriteLock(super::Held::File(guard)))
    }

    fn append_locked(
        &self,
        lock: &WriteLock<'_>,
        objects: &[EncodedObject],
        ops: &[RawOp],
    ) -> Result<(usize, SyncTicket)> {
        let guard = lock.file().ok_or(Error::ReadOnly)?;
        let (n, end) = self.append_frame(guard, objects, ops, true)?;
        Ok((n, SyncTicket(end)))
    }

    fn refresh(&self) -> Result<()> {
        let r = self.journal.refresh();
        self.collect_notes();
        r
    }

    fn sync(&self, ticket: SyncTicket) -> Result<()> {
        self.journal.sync_to(ticket.0)
    }

    fn sync_all(&self) -> Result<()> {
        self.journal.sync_all()
    }

    fn ops_after(&self, after: u64) -> Result<Vec<RawOp>> {
        let journal = self.journal.ops_after(after)?;
        // The op log is read only when the journal's operations do not
        // follow on from `after` without a gap: they were packed before
        // this handle read them (by another process, or long ago), or the
        // journal holds none. A normal catch-up reads none of it.
        let continuous = journal
            .iter()
            .enumerate()
            .all(|(i, (s, _))| *s == after + 1 + i as u64);
        let reaches = !journal.is_empty()
            || self
                .journal
                .op_range()
                .is_some_and(|(_, last)| last >= after);
        if continuous && reaches {
            return Ok(journal);
        }
        let mut all: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
        for (_, last, path) in oplog_files(&self.root.join("oplog"))? {
            if last > after {
                for (s, op) in read_oplog_file(&path)? {
                    if s > after {
                        all.entry(s).or_insert(op);
                    }
                }
            }
        }
        // The journal's copy is the one read last; the same operation in
        // both (a crash between writing the op log and deleting the
        // segment) is the same bytes.
        for (s, op) in journal {
            all.insert(s, op);
        }
        Ok(all.into_iter().collect())
    }

    fn op_at(&self, seq: u64) -> Result<Option<Vec<u8>>> {
        if let Some(op) = self.journal.op(seq)? {
            return Ok(Some(op));
        }
        let stored = oplog_files(&self.root.join("oplog"))?
            .iter()
            .any(|(first, last, _)| (*first..=*last).contains(&seq));
        Ok(stored.then(Vec::new))
    }

    fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        if let Some(o) = self.read_here(id)? {
            return Ok(Some(o));
        }
        // Written, or moved into a pack, by another process since this
        // handle last looked.
        self.refresh()?;
        self.refresh_packs()?;
        self.read_here(id)
    }

    fn read_many(&self, ids: &[ObjectId], visit: &mut super::Visit<'_>) -> Result<()> {
        let (packs, mut in_journal, mut in_packs, mut elsewhere) = self.locate_many(ids)?;
        for (p, wanted) in packs.iter().zip(&mut in_packs) {
            if !wanted.is_empty() {
                p.read_records(wanted, ids, visit)?;
            }
        }
        elsewhere.extend(self.journal.read_records(&mut in_journal, ids, visit)?);
        // Written, or moved into a pack, by another process since this
        // handle last looked: found as `read` finds them.
        for i in elsewhere {
            let obj = self.read(&ids[i])?.ok_or(Error::NotFound { id: ids[i] })?;
            visit(i, obj.kind(), obj.payload())?;
        }
        Ok(())
    }

    fn read_many_into(
        &self,
        ids: &[ObjectId],
        out: &mut Vec<u8>,
        visit: &mut super::VisitInto<'_>,
    ) -> Result<()> {
        let (packs, mut in_journal, mut in_packs, mut elsewhere) = self.locate_many(ids)?;
        // Pack records are verified in `out` itself; the rest copied there.
        for (p, wanted) in packs.iter().zip(&mut in_packs) {
            if !wanted.is_empty() {
                p.read_records_into(wanted, ids, out, visit)?;
            }
        }
        let mut copy = |i: usize, kind: ObjectKind, payload: &[u8]| {
            let start = out.len();
            out.extend_from_slice(payload);
            visit(i, kind, start..out.len())
        };
        elsewhere.extend(self.journal.read_records(&mut in_journal, ids, &mut copy)?);
        for i in elsewhere {
            let obj = self.read(&ids[i])?.ok_or(Error::NotFound { id: ids[i] })?;
            copy(i, obj.kind(), obj.payload())?;
        }
        Ok(())
    }

    fn contains(&self, id: &ObjectId) -> Result<bool> {
        if self.journal.contains(id) {
            return Ok(true);
        }
        for p in self.packs() {
            if p.contains(id)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn ids_with_prefix(&self, prefix: &Prefix) -> Result<Vec<ObjectId>> {
        let mut out = Vec::new();
        self.journal.ids_with_prefix(prefix, &mut out);
        for p in self.packs() {
            p.ids_with_prefix(prefix, &mut out)?;
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    fn ids(&self) -> Result<Vec<ObjectId>> {
        let mut out = self.journal.ids();
        for p in self.packs() {
            out.extend(p.ids()?);
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    fn ids_in_storage_order(&self) -> Result<Vec<ObjectId>> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for p in self.packs() {
            out.extend(
                p.ids_in_pack_order()?
                    .into_iter()
                    .filter(|id| seen.insert(*id)),
            );
        }
        let mut journal: Vec<(ObjectId, u64)> = self.journal.ids_with_segments();
        journal.sort_unstable_by_key(|e| e.1);
        out.extend(
            journal
                .into_iter()
                .map(|e| e.0)
                .filter(|id| seen.insert(*id)),
        );
        Ok(out)
    }

    fn repack_filtered(
        &self,
        opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
        rescue: Option<&super::Rescue<'_>>,
    ) -> Result<RepackStats> {
        let (_one_at_a_time, before, sealed) = self.start_packing()?;
        let old = self.packs();
        // One pack of the current version is as packed as it gets; one of
        // an older version is written again (objects-format.md, "Versioning").
        let current = old.iter().all(|p| p.version() == pack::PACK_FORMAT_VERSION);
        if keep.is_none() && old.len() <= 1 && sealed.is_empty() && current {
            return Ok(RepackStats {
                objects: before.pack_objects,
                packs_before: old.len(),
                segments_packed: 0,
                bytes_before: before.disk_bytes(),
                bytes_after: before.disk_bytes(),
                pack_name: old.first().map(|p| p.name().to_owned()),
                ..RepackStats::default()
            });
        }
        if keep.is_none() {
            // Into one pack, each pack's blocks in the order its writer gave
            // them and the segments' objects in pack order: memory for the
            // segments' objects only, never for every object the store
            // holds (gigabytes at millions of sessions). With the hot
            // options the blocks of every sound pack are copied as they
            // are; with others (the default, cold) each block is inflated
            // and its objects written again with them, a block at a time.
            return self.sweep_these(opts, &IdSet::default(), rescue, before, sealed, true);
        }
        self.repack_these(opts, keep, rescue, before, sealed, old)
    }

    fn sweep(
        &self,
        opts: &RepackOptions,
        doomed: &IdSet,
        rescue: Option<&super::Rescue<'_>>,
    ) -> Result<RepackStats> {
        let (_one_at_a_time, before, sealed) = self.start_packing()?;
        self.sweep_these(opts, doomed, rescue, before, sealed, false)
    }

    fn scan(
        &self,
        wanted: &(dyn Fn(ObjectKind) -> bool + Sync),
        f: &super::ScanFn<'_>,
    ) -> Result<()> {
        let packs = self.packs();
        // Each object once, the copy `read` returns: the journal's, else
        // that of the first pack listed that holds it.
        let mut seen = IdSet::default();
        let mut work: Vec<(&Arc<Pack>, u32, Vec<pack::BlockRecord>)> = Vec::new();
        let mut strays: Vec<(&Arc<Pack>, ObjectId)> = Vec::new();
        for p in &packs {
            let dir = p.directory()?;
            let mut skip =
                |id: &ObjectId| self.journal.contains(id) || (packs.len() > 1 && !seen.insert(*id));
            for n in 0..dir.blocks() {
                let records: Vec<pack::BlockRecord> = dir
                    .records(n)
                    .iter()
                    .filter(|r| !skip(&r.id))
                    .copied()
                    .collect();
                if !records.is_empty() {
                    work.push((p, n, records));
                }
            }
            for r in dir.strays() {
                if !skip(&r.id) {
                    strays.push((p, r.id));
                }
            }
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let run = || loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some((p, n, records)) = work.get(i) else {
                return;
            };
            p.read_block(*n, records, wanted, &mut |items| f(i, items));
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 8)
            .min(work.len());
        if threads <= 1 {
            run();
        } else {
            std::thread::scope(|s| {
                for _ in 1..threads {
                    s.spawn(run);
                }
                run();
            });
        }
        let mut journal: Vec<(ObjectId, u64)> = self.journal.ids_with_segments();
        journal.sort_unstable_by_key(|e| e.1);
        let mut once = IdSet::default();
        let rest = strays
            .into_iter()
            .map(|(p, id)| (Some(p), id))
            .chain(journal.into_iter().map(|(id, _)| (None, id)))
            .filter(|(_, id)| once.insert(*id));
        for (k, (pack, id)) in rest.enumerate() {
            let read = match pack {
                Some(p) => p.read(&id),
                None => self.journal.read(&id),
            };
            let item = match read {
                Ok(Some(o)) => {
                    let payload = wanted(o.kind()).then_some(o.payload());
                    f(
                        work.len() + k,
                        &[(id, Ok((o.kind(), o.payload().len(), payload)))],
                    );
                    continue;
                }
                Ok(None) => Err(Error::NotFound { id }),
                Err(e) => Err(e),
            };
            f(work.len() + k, &[(id, item)]);
        }
        Ok(())
    }

    fn maintenance_due(&self) -> bool {
        self.auto_pack && self.pack_lock.is_some() && !self.journal.sealed_segments().is_empty()
    }

    fn maintain(&self) -> Result<Option<RepackStats>> {
        if !self.auto_pack || self.journal.sealed_segments().is_empty() {
            return Ok(None);
        }
        // Someone else is repacking: they take these segments too, or the
        // next write after them does.
        let Some(pack_lock) = &self.pack_lock else {
            return Ok(None);
        };
        let Some(_one_at_a_time) = pack_lock.try_lock()? else {
            return Ok(None);
        };
        self.refresh_packs()?;
        self.journal.forget_missing()?;
        let sealed = self.journal.sealed_segments();
        if sealed.is_empty() {
            return Ok(None);
        }
        let before = self.stats()?;
        // gc's sweep with nothing to drop: the sealed segments' objects
        // written anew, the packs the geometric merge takes along copied
        // block by block, never inflated. Rewriting them object by object
        // (as a full repack does) made a bulk import's cost grow with
        // n log n objects inflated, verified and compressed again.
        let stats = self.sweep_these(
            &RepackOptions::hot(),
            &IdSet::default(),
            None,
            before,
            sealed,
            false,
        )?;
        Ok(Some(stats))
    }

    fn stored_at(&self) -> Result<HashMap<ObjectId, i64>> {
        let mtime = |path: &Path| -> i64 {
            fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(i64::MAX, |d| d.as_millis() as i64)
        };
        let mut out = HashMap::new();
        for p in self.packs() {
            let t = mtime(p.paths()[0]);
            for id in p.ids()? {
                out.insert(id, t);
            }
        }
        for (id, seq) in self.journal.ids_with_segments() {
            let t = mtime(&self.root.join("journal").join(journal::segment_name(seq)));
            // An object in both: the later time is the safe one.
            let e = out.entry(id).or_insert(t);
            *e = (*e).max(t);
        }
        Ok(out)
    }

    fn stored_at_of(&self, ids: &[ObjectId]) -> Result<crate::hash::IdMap<i64>> {
        let mtime = |path: &Path| -> i64 {
            fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(i64::MAX, |d| d.as_millis() as i64)
        };
        let packs: Vec<(Arc<Pack>, i64)> = self
            .packs()
            .into_iter()
            .map(|p| {
                let t = mtime(p.paths()[0]);
                (p, t)
            })
            .collect();
        let mut segments: HashMap<u64, i64> = HashMap::new();
        let journal: crate::hash::IdMap<u64> =
            self.journal.ids_with_segments().into_iter().collect();
        let mut out = crate::hash::IdMap::default();
        for id in ids {
            let mut t = None;
            for (p, pt) in &packs {
                if p.contains(id)? {
                    t = Some(*pt);
                    break;
                }
            }
            if let Some(seq) = journal.get(id) {
                let st = *segments.entry(*seq).or_insert_with(|| {
                    mtime(&self.root.join("journal").join(journal::segment_name(*seq)))
                });
                // An object in both: the later time is the safe one.
                t = Some(t.map_or(st, |t: i64| t.max(st)));
            }
            if let Some(t) = t {
                out.insert(*id, t);
            }
        }
        Ok(out)
    }

    fn unpacked_ids(&self) -> Result<Vec<ObjectId>> {
        Ok(self.journal.ids())
    }

    fn stats(&self) -> Result<OdbStats> {
        let packs = self.packs();
        let journal_dir = self.root.join("journal");
        let segments = fs::read_dir(&journal_dir)
            .at(&journal_dir)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".journal"))
            .count();
        Ok(OdbStats {
            journal_segments: segments,
            journal_objects: self.journal.object_count(),
            journal_bytes: self.journal.disk_bytes(),
            packs: packs.len(),
            pack_objects: packs.iter().map(|p| p.object_count()).sum(),
            pack_bytes: packs.iter().map(|p| p.disk_bytes()).sum(),
        })
    }

    fn take_recovery_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().expect("notes lock"))
    }

    fn verify_storage(&self) -> Vec<String> {
        self.packs().iter().flat_map(|p| p.verify()).collect()
    }

    fn damage(&self) -> Vec<String> {
        self.damage.clone()
    }

    fn set_aside(&self) -> Vec<String> {
        let dir = self.root.join("journal");
        let mut out: Vec<String> = fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("torn-"))
            .map(|e| {
                let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                format!(
                    "{} holds {len} bytes cut from a torn write; delete it once inspected",
                    e.path().display()
                )
            })
            .collect();
        out.sort();
        out
    }
}
