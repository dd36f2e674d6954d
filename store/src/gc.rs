//! Garbage collection: keep what refs, recent ref-log entries and open runs
//! can reach; drop what nothing reaches once it is past the grace period;
//! sweep the packs that held what goes, copying the blocks that lose
//! nothing (objects-format.md, "Garbage collection").
//!
//! Marking reads sessions only, never a blob's content: a session names its
//! blobs, and a blob is known by its kind byte and size. Writers, in this process and others, go on while gc runs. What
//! they could come to use of the objects gc drops is caught at the end:
//! gc replaces its files under the write lock, and just before, it walks
//! what was written since it marked (new ref targets, new sessions) and
//! writes back to the journal every dropped object those reach (git's rule
//! is the grace period alone; this closes the window it leaves for
//! `--prune=now` and for content a writer stored again, deduplicated
//! against an object gc had found unreachable).

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::hash::{IdMap, IdSet, ObjectId};
use crate::object::{ObjectKind, Session};
use crate::odb::atomic_file::AtomicFile;
use crate::odb::pack::PackOptions;
use crate::odb::{Durability, RepackOptions};
use crate::refs::{large_fields, RefName, RefTarget};
use crate::store::Store;
use crate::time::now_ms;

/// Ref-log entries younger than this keep their sessions alive (90 days).
pub const DEFAULT_REFLOG_EXPIRY_MS: i64 = 90 * 24 * 3600 * 1000;
/// Unreachable objects younger than this survive (2 weeks).
pub const DEFAULT_GRACE_MS: i64 = 14 * 24 * 3600 * 1000;
/// `gc.ledger` entries: 32-byte id, i64 LE ms.
const LEDGER_ENTRY: usize = 40;

/// Which unreachable objects go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prune {
    /// Those unreachable for longer than this many milliseconds.
    OlderThan(i64),
    /// Those unreachable since before this time (ms since the epoch).
    Before(i64),
    /// All of them.
    Now,
}

/// How to collect.
#[derive(Debug, Clone, Copy)]
pub struct GcOptions {
    pub dry_run: bool,
    pub prune: Prune,
    pub reflog_expiry_ms: i64,
    pub pack: PackOptions,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            dry_run: false,
            prune: Prune::OlderThan(DEFAULT_GRACE_MS),
            reflog_expiry_ms: DEFAULT_REFLOG_EXPIRY_MS,
            pack: PackOptions::default(),
        }
    }
}

/// What a gc found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    pub objects: usize,
    pub reachable: usize,
    pub unreachable: usize,
    /// Unreachable objects kept because they are within the grace period.
    pub kept_young: usize,
    /// Objects dropped (or, in a dry run, that would be).
    pub pruned: usize,
    /// Canonical payload bytes of the dropped objects.
    pub pruned_bytes: u64,
    /// Dropped objects and bytes by the conversation they belonged to.
    pub by_conversation: BTreeMap<String, (usize, u64)>,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Stored things deleted past the grace period once nothing named them
    /// (a remote store's orphan and retired packs, from its bucket); 0 for
    /// a store on disk, whose sweep replaces its files itself.
    pub storage_deleted: usize,
}

impl GcReport {
    /// The JSON form of the report (the Python binding's `gc()`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "objects": self.objects,
            "reachable": self.reachable,
            "unreachable": self.unreachable,
            "kept_young": self.kept_young,
            "pruned": self.pruned,
            "pruned_bytes": self.pruned_bytes,
            "by_conversation": self.by_conversation.iter()
                .map(|(c, (n, b))| (c.clone(), serde_json::json!({"objects": n, "bytes": b})))
                .collect::<serde_json::Map<_, _>>(),
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "storage_deleted": self.storage_deleted,
        })
    }
}

/// The sessions gc keeps alive: every ref (HEAD included) and the old and
/// new values of ref-log entries younger than `expiry_ms`.
pub(crate) fn roots(store: &Store, expiry_ms: Option<i64>) -> Result<Vec<ObjectId>> {
    let mut roots = Vec::new();
    for (_, target) in store.refs()? {
        if let RefTarget::Session(id) = target {
            roots.push(id);
        }
    }
    if let Some(r) = store.resolve_ref(&RefName::Head)? {
        roots.push(r);
    }
    if let Some(expiry) = expiry_ms {
        let now = now_ms();
        for e in store.live_reflog_entries()? {
            // Younger than the expiry, strictly: an expiry of 0 keeps none.
            if now.saturating_sub(e.time) < expiry {
                for t in [&e.old, &e.new].into_iter().flatten() {
                    if let RefTarget::Session(id) = t {
                        roots.push(*id);
                    }
                }
            }
        }
    }
    // Objects a root names that are gone are fsck's to report.
    let odb = store.odb();
    roots.retain(|id| odb.contains(id).unwrap_or(false));
    roots.sort_unstable();
    roots.dedup();
    Ok(roots)
}

fn ledger_path(root: &Path) -> PathBuf {
    root.join("gc.ledger")
}

fn read_ledger(path: &Path) -> HashMap<ObjectId, i64> {
    let Ok(bytes) = fs::read(path) else {
        return HashMap::new();
    };
    bytes
        .chunks_exact(LEDGER_ENTRY)
        .filter_map(|c| {
            let id = ObjectId::from_slice(&c[..32])?;
            let t = i64::from_le_bytes(c[32..].try_into().ok()?);
            Some((id, t))
        })
        .collect()
}

fn write_ledger(path: &Path, entries: &HashMap<ObjectId, i64>) -> Result<()> {
    let mut sorted: Vec<_> = entries.iter().collect();
    sorted.sort_unstable();
    let mut bytes = Vec::with_capacity(sorted.len() * LEDGER_ENTRY);
    for (id, t) in sorted {
        bytes.extend_from_slice(id.as_bytes());
        bytes.extend_from_slice(&t.to_le_bytes());
    }
    AtomicFile::replace(path, &bytes, Durability::Sync)
}

/// What one pass over every stored object found (gc's marking): each
/// object's kind and payload size, and what each session names. Sessions
/// are hashed and decoded; blobs are known by their kind byte and size
/// alone, never hashed or decoded.
#[derive(Default)]
struct Census {
    objects: IdMap<(ObjectKind, u64)>,
    sessions: IdMap<Named>,
    /// The ids sessions name, `Named` ranges into it.
    names: Vec<ObjectId>,
    /// Objects that did not read or decode.
    broken: IdSet,
}

/// What a session names: `names[at..at + sessions]` its parents and
/// compaction source, then `blobs` blob ids.
#[derive(Clone, Copy)]
struct Named {
    conversation: ObjectId,
    at: usize,
    sessions: u32,
    blobs: u32,
}

impl Census {
    fn take(odb: &crate::odb::Odb) -> Result<Census> {
        let stats = odb.stats()?;
        let mut census = Census::default();
        // Grown once, not doubled a dozen times over fresh pages.
        census
            .objects
            .reserve(stats.pack_objects + stats.journal_objects);
        let census = std::sync::Mutex::new(census);
        let wanted = |k: ObjectKind| k == ObjectKind::Session;
        odb.backend().scan(&wanted, &|_, items| {
            // Decoded on this thread, outside the lock.
            let mut decoded: Vec<(ObjectId, ObjectId, Vec<ObjectId>, usize)> = Vec::new();
            let mut broken = Vec::new();
            for (id, read) in items {
                let Ok((ObjectKind::Session, _, Some(payload))) = read else {
                    if read.is_err() {
                        broken.push(*id);
                    }
                    continue;
                };
                // Read, but undecodable: a session marking cannot enter
                // (fatal if reachable, see `closure`).
                if let Ok(s) = Session::decode(payload) {
                    let mut names: Vec<ObjectId> = s.sessions().collect();
                    let n = names.len();
                    // Display messages mostly repeat the messages.
                    let mut blobs: Vec<ObjectId> = s.blobs().collect();
                    blobs.sort_unstable();
                    blobs.dedup();
                    names.extend(blobs);
                    decoded.push((*id, s.conversation_id(*id), names, n));
                }
            }
            let mut c = census.lock().unwrap_or_else(|p| p.into_inner());
            for (id, read) in items {
                if let Ok((kind, size, _)) = read {
                    c.objects.insert(*id, (*kind, *size as u64));
                }
            }
            c.broken.extend(broken);
            for (id, conversation, names, n) in decoded {
                let named = Named {
                    conversation,
                    at: c.names.len(),
                    sessions: n as u32,
                    blobs: (names.len() - n) as u32,
                };
                c.names.extend(names);
                c.sessions.insert(id, named);
            }
        })?;
        Ok(census.into_inner().unwrap_or_else(|p| p.into_inner()))
    }

    fn parents(&self, n: &Named) -> &[ObjectId] {
        &self.names[n.at..n.at + n.sessions as usize]
    }

    fn blobs(&self, n: &Named) -> &[ObjectId] {
        let start = n.at + n.sessions as usize;
        &self.names[start..start + n.blobs as usize]
    }

    /// Everything reachable from `roots`: sessions through their parents
    /// and compaction sources, and the blobs they name. A reachable session
    /// that does not read is an error, not a gap: it hides what it reaches,
    /// and a sweep of what was not reached would drop live history.
    fn closure(&self, odb: &crate::odb::Odb, roots: &[ObjectId]) -> Result<IdSet> {
        let mut live = IdSet::default();
        live.reserve(self.objects.len());
        let mut stack: Vec<ObjectId> = roots.to_vec();
        while let Some(id) = stack.pop() {
            if !live.insert(id) {
                continue;
            }
            if let Some(n) = self.sessions.get(&id) {
                live.extend(self.blobs(n).iter().copied());
                stack.extend(self.parents(n).iter().copied());
                continue;
            }
            // Not a session the pass read: what reading it says (written
            // since the pass, or damaged, missing, or not a session).
            let s = odb
                .session(&id)
                .map_err(|e| Error::unreadable_reachable(id, e))?;
            live.extend(s.blobs());
            stack.extend(s.sessions());
        }
        Ok(live)
    }
}

/// The dropped objects that what was written since gc marked (operation
/// `marked_at`; `known` the objects then) reaches: from every session a ref
/// moved to and every session stored since, through parents, compaction
/// sources and blobs, stopping at what was live when gc marked (all it
/// reaches was kept). Runs under the write lock, before the files that
/// hold the dropped objects are deleted.
fn rescued(
    store: &Store,
    marked_at: u64,
    known: &dyn Fn(&ObjectId) -> bool,
    live: &IdSet,
    doomed: &IdSet,
) -> Result<Vec<ObjectId>> {
    let backend = store.odb().backend();
    backend.refresh()?;
    let mut stack: Vec<ObjectId> = Vec::new();
    for (seq, bytes) in backend.ops_after(marked_at)? {
        let op = crate::refs::Operation::decode(&bytes).map_err(|e| Error::CorruptOperation {
            seq,
            reason: e.to_string(),
        })?;
        for u in &op.refs {
            if let Some(RefTarget::Session(id)) = &u.new {
                stack.push(*id);
            }
        }
        for c in &op.conversations {
            if let Some(r) = &c.record {
                stack.extend(large_fields::metadata_blobs(&r.metadata));
            }
        }
    }
    // gc holds `pack.lock`: what was stored since it marked is in the journal.
    for id in backend.unpacked_ids()? {
        if !known(&id) {
            stack.push(id);
        }
    }
    let mut seen = IdSet::default();
    let mut out = Vec::new();
    while let Some(id) = stack.pop() {
        if !seen.insert(id) || live.contains(&id) {
            continue;
        }
        if doomed.contains(&id) {
            out.push(id);
        }
        let obj = match store.odb().read(&id) {
            Ok(o) => o,
            Err(Error::NotFound { .. }) => continue,
            Err(e) => return Err(e),
        };
        if obj.kind() != ObjectKind::Session {
            continue;
        }
        let s = Session::decode(obj.payload()).map_err(|e| Error::decode(id, e))?;
        stack.extend(s.blobs());
        stack.extend(s.sessions());
    }
    Ok(out)
}

impl Store {
    /// Collects garbage; see [`GcOptions`]. In a dry run nothing changes.
    pub fn gc(&self, opts: &GcOptions) -> Result<GcReport> {
        self.gc_with(opts, &crate::progress::Silent)
    }

    /// [`Store::gc`], telling `progress` of its phases and the objects swept.
    pub fn gc_with(
        &self,
        opts: &GcOptions,
        progress: &dyn crate::progress::Progress,
    ) -> Result<GcReport> {
        self.catch_up()?;
        // A rebuild an earlier gc left due: done in full at the end, as
        // what that gc dropped is not known here.
        let rebuild_due = self.index().rebuild_pending();
        let marked_at = self.index().applied()?.map_or(0, |a| a.0);
        let odb = self.odb();
        let before = odb.stats()?;
        let roots = roots(self, Some(opts.reflog_expiry_ms))?;
        progress.phase("marking reachable objects", None);
        let census = Census::take(odb)?;
        let mut live = census.closure(odb, &roots)?;
        // The blobs conversation records keep their large fields in.
        for c in self.conversations(None)? {
            live.extend(large_fields::metadata_blobs(&c.record.metadata));
        }
        progress.advance(live.len() as u64);
        let now = now_ms();
        let all = census.objects.len() + census.broken.len();
        let unreachable: Vec<ObjectId> = census
            .objects
            .keys()
            .chain(&census.broken)
            .filter(|id| !live.contains(*id))
            .copied()
            .collect();
        let stored = odb.backend().stored_at_of(&unreachable)?;
        let root_dir = self.root().map(Path::to_path_buf);
        let mut ledger = root_dir
            .as_deref()
            .map(|r| read_ledger(&ledger_path(r)))
            .unwrap_or_default();
        let mut report = GcReport {
            objects: all,
            reachable: all - unreachable.len(),
            bytes_before: before.disk_bytes(),
            ..GcReport::default()
        };
        let mut doomed = IdSet::default();
        let mut next_ledger = HashMap::new();
        progress.phase("sweeping", Some(all as u64));
        for id in &unreachable {
            report.unreachable += 1;
            let seen = stored.get(id).copied().unwrap_or(now);
            let first = ledger.remove(id).map_or(seen, |l| l.min(seen));
            let goes = match opts.prune {
                Prune::Now => true,
                Prune::Before(t) => first < t,
                Prune::OlderThan(g) => first <= now.saturating_sub(g),
            };
            if goes {
                doomed.insert(*id);
            } else {
                report.kept_young += 1;
                next_ledger.insert(*id, first);
            }
        }
        let is_session =
            |id: &ObjectId| matches!(census.objects.get(id), Some((ObjectKind::Session, _)));
        // A young unreachable session is kept, and so must be everything it
        // names, however old: keeping the session alone would leave it
        // broken.
        let young_sessions: Vec<ObjectId> = next_ledger
            .keys()
            .filter(|id| is_session(id))
            .copied()
            .collect();
        if !young_sessions.is_empty() {
            let mut stack = young_sessions;
            let mut seen = IdSet::default();
            while let Some(id) = stack.pop() {
                if !seen.insert(id) || live.contains(&id) {
                    continue;
                }
                if doomed.remove(&id) {
                    report.kept_young += 1;
                    next_ledger.insert(id, now);
                }
                let Some(n) = census.sessions.get(&id) else {
                    continue;
                };
                for b in census.blobs(n) {
                    if doomed.remove(b) {
                        report.kept_young += 1;
                        next_ledger.insert(*b, now);
                    }
                }
                stack.extend(census.parents(n).iter().copied());
            }
        }
        progress.advance(all as u64);
        report.pruned = doomed.len();
        self.attribute(&census, &doomed, &mut report)?;
        if opts.dry_run {
            report.bytes_after = report.bytes_before;
            return Ok(report);
        }
        let dropped_sessions: IdSet = doomed.iter().filter(|id| is_session(id)).copied().collect();
        if !dropped_sessions.is_empty() {
            // Before the sweep: until the index is rid of them, its tables
            // may hold text of what is dropped. A gc killed before that, or
            // that fails at it, leaves the mark for the next gc.
            self.index().mark_rebuild()?;
        }
        let known = |id: &ObjectId| census.objects.contains_key(id) || census.broken.contains(id);
        let rescue = || rescued(self, marked_at, &known, &live, &doomed);
        progress.phase("repacking", Some((all - doomed.len()) as u64));
        let swept = odb.backend().sweep(
            &RepackOptions { pack: opts.pack },
            &doomed,
            if doomed.is_empty() {
                None
            } else {
                Some(&rescue)
            },
        )?;
        progress.advance((all - doomed.len()) as u64);
        // After the sweep committed: what no longer names a remote pack,
        // and the orphans writers left, go once past the grace period.
        let cutoff = match opts.prune {
            Prune::Now => i64::MAX,
            Prune::Before(t) => t,
            Prune::OlderThan(g) => now.saturating_sub(g),
        };
        report.storage_deleted = odb.backend().prune_storage(cutoff)?;
        if let Some(r) = &root_dir {
            write_ledger(&ledger_path(r), &next_ledger)?;
        }
        progress.phase("writing indexes", None);
        // The lineage index: the sessions the store keeps, its records of
        // them reused (sessions stored since marking join it later).
        let rescued: IdSet = swept.rescued.iter().copied().collect();
        let sessions: IdSet = census
            .sessions
            .keys()
            .filter(|id| !doomed.contains(*id) || rescued.contains(*id))
            .copied()
            .collect();
        self.refresh_lineage_kept(&sessions)?;
        self.catch_up()?;
        let dropped_sessions: IdSet = dropped_sessions
            .into_iter()
            .filter(|id| !rescued.contains(id))
            .collect();
        if rebuild_due || !dropped_sessions.is_empty() {
            // The index tables hold each session's title and preview (text
            // of its first user message): none may keep those of a dropped
            // session (objects-format.md, "Garbage collection"). An earlier
            // gc's that did not get to it: rebuilt whole.
            let rebuild = || -> Result<()> {
                #[cfg(test)]
                tests::before_rebuild()?;
                if rebuild_due {
                    self.index().rebuild(self.odb())?;
                } else {
                    self.index().drop_sessions(self.odb(), &dropped_sessions)?;
                }
                Ok(())
            };
            rebuild().map_err(|e| Error::IndexRebuildPending {
                pruned: report.pruned,
                source: Box::new(e),
            })?;
        } else {
            self.index().write_tables(self.odb(), true)?;
        }
        report.bytes_after = odb.stats()?.disk_bytes();
        Ok(report)
    }

    /// Sizes the doomed objects and names the conversations they belonged
    /// to: a session's own, a blob's through the doomed session naming it.
    fn attribute(&self, census: &Census, doomed: &IdSet, report: &mut GcReport) -> Result<()> {
        let mut owner: IdMap<String> = IdMap::default();
        let mut names: IdMap<String> = IdMap::default();
        // Sessions in id order, so that a blob two of them name goes to
        // the same one every time.
        let mut sessions: Vec<(&ObjectId, &Named)> = doomed
            .iter()
            .filter_map(|id| Some((id, census.sessions.get(id)?)))
            .collect();
        sessions.sort_unstable_by_key(|s| *s.0);
        for (id, n) in sessions {
            let name = match names.get(&n.conversation) {
                Some(name) => name.clone(),
                None => {
                    let name = self
                        .index()
                        .conversation_name(&n.conversation)?
                        .unwrap_or_else(|| {
                            format!("(deleted) {}", n.conversation.to_hex_prefix(12))
                        });
                    names.insert(n.conversation, name.clone());
                    name
                }
            };
            for b in census.blobs(n) {
                if doomed.contains(b) {
                    owner.entry(*b).or_insert_with(|| name.clone());
                }
            }
            owner.insert(*id, name);
        }
        for id in doomed {
            if census.broken.contains(id) {
                owner.insert(*id, "(corrupt)".into());
            }
            let bytes = census.objects.get(id).map_or(0, |o| o.1);
            report.pruned_bytes += bytes;
            let name = owner
                .get(id)
                .cloned()
                .unwrap_or_else(|| "(no session)".into());
            let e = report.by_conversation.entry(name).or_insert((0, 0));
            e.0 += 1;
            e.1 += bytes;
        }
        Ok(())
    }
}

/// Parses `--prune`: `now`, an RFC 3339 time, a date (`YYYY-MM-DD`), or
/// `N.minutes.ago` / `N.hours.ago` / `N.days.ago` / `N.weeks.ago`.
pub fn parse_prune(text: &str) -> Result<Prune> {
    if text == "now" {
        return Ok(Prune::Now);
    }
    if let Some(ms) = crate::time::parse_rfc3339_ms(text) {
        return Ok(Prune::Before(ms));
    }
    if text.len() == 10 {
        if let Some(ms) = crate::time::parse_rfc3339_ms(&format!("{text}T00:00:00Z")) {
            return Ok(Prune::Before(ms));
        }
    }
    if let Some(rest) = text.strip_suffix(".ago") {
        if let Some((n, unit)) = rest.split_once('.') {
            let unit_ms: i64 = match unit.trim_end_matches('s') {
                "minute" => 60_000,
                "hour" => 3_600_000,
                "day" => 86_400_000,
                "week" => 7 * 86_400_000,
                _ => 0,
            };
            // Digits only: a negative (or signed) count is no time ago.
            let digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
            if let (Ok(n), true, true) = (n.parse::<i64>(), digits, unit_ms > 0) {
                return Ok(Prune::OlderThan(n.saturating_mul(unit_ms)));
            }
        }
    }
    Err(Error::BadPruneTime {
        text: text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Makes this thread's next gc rebuild fail, as one that timed out
        /// on `index/LOCK` (or was killed) would.
        static FAIL_REBUILD: Cell<bool> = const { Cell::new(false) };
    }

    pub(super) fn before_rebuild() -> Result<()> {
        if FAIL_REBUILD.with(|f| f.replace(false)) {
            return Err(Error::Invalid("rebuild failed (test)".into()));
        }
        Ok(())
    }

    fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_file()
                && fs::read(&p)
                    .unwrap()
                    .windows(needle.len())
                    .any(|w| w == needle)
            {
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn an_index_rebuild_that_failed_is_done_by_the_next_gc() {
        use crate::store::{Messages, Turn};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        drop(Store::init(&root).unwrap());
        let store = Store::open(&root, &crate::odb::OpenOptions::default()).unwrap();
        let turn = Turn {
            messages: Messages::Added(vec![
                serde_json::json!({"role": "user", "content": "PREVIEWSECRET here"}),
            ]),
            ..Turn::default()
        };
        store.create(Some("a"), turn, Durability::Sync).unwrap();
        let other = Turn {
            messages: Messages::Added(vec![serde_json::json!({"role": "user", "content": "b"})]),
            ..Turn::default()
        };
        store.create(Some("b"), other, Durability::Sync).unwrap();
        store.index().write_tables(store.odb(), true).unwrap();
        let index = root.join("index");
        assert!(!files_holding(&index, b"PREVIEWSECRET").is_empty());
        store.delete("a", Durability::Sync).unwrap();
        store
            .expire_reflog(None, i64::MAX, false, Durability::Sync)
            .unwrap();
        let opts = GcOptions {
            prune: Prune::Now,
            ..GcOptions::default()
        };
        FAIL_REBUILD.with(|f| f.set(true));
        let e = store.gc(&opts).unwrap_err();
        assert!(
            matches!(e, Error::IndexRebuildPending { pruned, .. } if pruned >= 2),
            "{e}"
        );
        assert!(e.to_string().starts_with("pruned "), "{e}");
        assert!(store.index().rebuild_pending());
        assert!(!files_holding(&index, b"PREVIEWSECRET").is_empty());
        // The next gc drops nothing, and rebuilds all the same.
        let r = store.gc(&opts).unwrap();
        assert_eq!(r.pruned, 0);
        assert!(!store.index().rebuild_pending());
        assert_eq!(
            files_holding(&index, b"PREVIEWSECRET"),
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn a_handle_that_mapped_tables_before_gc_never_writes_dropped_text_back() {
        use crate::store::{Messages, Turn};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        drop(Store::init(&root).unwrap());
        let open = || Store::open(&root, &crate::odb::OpenOptions::default()).unwrap();
        let turn = |text: &str| Turn {
            messages: Messages::Added(vec![serde_json::json!({"role": "user", "content": text})]),
            ..Turn::default()
        };
        let gc = open();
        gc.create(Some("a"), turn("PREVIEWSECRET here"), Durability::Sync)
            .unwrap();
        gc.create(Some("b"), turn("b"), Durability::Sync).unwrap();
        gc.delete("a", Durability::Sync).unwrap();
        gc.expire_reflog(None, i64::MAX, false, Durability::Sync)
            .unwrap();
        gc.index().write_tables(gc.odb(), true).unwrap();
        let index = root.join("index");
        assert!(!files_holding(&index, b"PREVIEWSECRET").is_empty());
        // Another process maps those tables before the gc...
        let other = open();
        assert!(other.conversation("b").unwrap().is_some());
        let opts = GcOptions {
            prune: Prune::Now,
            ..GcOptions::default()
        };
        assert!(gc.gc(&opts).unwrap().pruned >= 2);
        assert_eq!(
            files_holding(&index, b"PREVIEWSECRET"),
            Vec::<PathBuf>::new()
        );
        // ... and writes its own table after it, merging with what it mapped.
        for i in 0..3 {
            other
                .create(Some(&format!("c{i}")), turn("c"), Durability::Sync)
                .unwrap();
        }
        other.index().write_tables(other.odb(), true).unwrap();
        assert_eq!(
            files_holding(&index, b"PREVIEWSECRET"),
            Vec::<PathBuf>::new()
        );
        assert!(open().conversation("c2").unwrap().is_some());
    }

    #[test]
    fn prune_times_parse() {
        assert_eq!(parse_prune("now").unwrap(), Prune::Now);
        assert_eq!(
            parse_prune("2.weeks.ago").unwrap(),
            Prune::OlderThan(14 * 86_400_000)
        );
        assert_eq!(
            parse_prune("1.day.ago").unwrap(),
            Prune::OlderThan(86_400_000)
        );
        assert_eq!(
            parse_prune("1970-01-02").unwrap(),
            Prune::Before(86_400_000)
        );
        assert!(matches!(
            parse_prune("2025-11-13T02:13:20Z").unwrap(),
            Prune::Before(_)
        ));
        assert!(parse_prune("soon").is_err());
        assert!(parse_prune("3.fortnights.ago").is_err());
        assert!(parse_prune("-2.days.ago").is_err());
        assert!(parse_prune("+2.days.ago").is_err());
    }
}
