//! Garbage collection: keep what refs, recent ref-log entries and open runs
//! can reach; drop what nothing reaches once it is past the grace period;
//! repack what is kept (objects-format.md, "Garbage collection").
//!
//! Marking reads sessions only, never a blob's content: a session names its
//! blobs. Writers, in this process and others, go on while gc runs. What
//! they could come to use of the objects gc drops is caught at the end:
//! gc replaces its files under the write lock, and just before, it walks
//! what was written since it marked (new ref targets, new sessions) and
//! writes back to the journal every dropped object those reach (git's rule
//! is the grace period alone; this closes the window it leaves for
//! `--prune=now` and for content a writer stored again, deduplicated
//! against an object gc had found unreachable).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::object::{ObjectKind, Session};
use crate::odb::atomic_file::AtomicFile;
use crate::odb::pack::PackOptions;
use crate::odb::{Durability, RepackOptions};
use crate::reach;
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

/// The dropped objects that what was written since gc marked (operation
/// `marked_at`; `known` the objects then) reaches: from every session a ref
/// moved to and every session stored since, through parents, compaction
/// sources and blobs, stopping at what was live when gc marked (all it
/// reaches was kept). Runs under the write lock, before the files that
/// hold the dropped objects are deleted.
fn rescued(
    store: &Store,
    marked_at: u64,
    known: &HashSet<ObjectId>,
    live: &HashSet<ObjectId>,
    doomed: &HashSet<ObjectId>,
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
    for id in backend.ids()? {
        if !known.contains(&id) {
            stack.push(id);
        }
    }
    let mut seen: HashSet<ObjectId> = HashSet::new();
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
        let marked_at = self.index().applied()?.map_or(0, |a| a.0);
        let odb = self.odb();
        let before = odb.stats()?;
        let all = odb.backend().ids()?;
        let roots = roots(self, Some(opts.reflog_expiry_ms))?;
        progress.phase("marking reachable objects", None);
        let (mut live, _) = reach::closure(self.odb(), &roots)?;
        // The blobs conversation records keep their large fields in.
        for c in self.conversations(None)? {
            live.extend(large_fields::metadata_blobs(&c.record.metadata));
        }
        progress.advance(live.len() as u64);
        let now = now_ms();
        let stored = odb.backend().stored_at()?;
        let root_dir = self.root().map(Path::to_path_buf);
        let mut ledger = root_dir
            .as_deref()
            .map(|r| read_ledger(&ledger_path(r)))
            .unwrap_or_default();
        let mut report = GcReport {
            objects: all.len(),
            bytes_before: before.disk_bytes(),
            ..GcReport::default()
        };
        let mut doomed: HashSet<ObjectId> = HashSet::new();
        let mut next_ledger = HashMap::new();
        progress.phase("sweeping", Some(all.len() as u64));
        for id in &all {
            progress.advance(1);
            if live.contains(id) {
                report.reachable += 1;
                continue;
            }
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
        // A young unreachable session is kept, and so must be everything it
        // names, however old: keeping the session alone would leave it
        // broken.
        let young_sessions: Vec<ObjectId> = next_ledger
            .keys()
            .filter(|id| matches!(odb.read(id), Ok(o) if o.kind() == ObjectKind::Session))
            .copied()
            .collect();
        if !young_sessions.is_empty() {
            let mut stack = young_sessions;
            let mut seen: HashSet<ObjectId> = HashSet::new();
            while let Some(id) = stack.pop() {
                if !seen.insert(id) || live.contains(&id) {
                    continue;
                }
                if doomed.remove(&id) {
                    report.kept_young += 1;
                    next_ledger.insert(id, now);
                }
                let Ok(s) = odb.session(&id) else { continue };
                for b in s.blobs() {
                    if doomed.remove(&b) {
                        report.kept_young += 1;
                        next_ledger.insert(b, now);
                    }
                }
                stack.extend(s.sessions());
            }
        }
        report.pruned = doomed.len();
        self.attribute(&doomed, &mut report)?;
        if opts.dry_run {
            report.bytes_after = report.bytes_before;
            return Ok(report);
        }
        let prunes_sessions = doomed
            .iter()
            .any(|id| matches!(odb.read(id), Ok(o) if o.kind() == ObjectKind::Session));
        if prunes_sessions {
            // Before the sweep: until the index is rebuilt, its tables may
            // hold text of what is dropped. A gc killed before its rebuild,
            // or whose rebuild fails, leaves the mark for the next gc.
            self.index().mark_rebuild()?;
        }
        let keep = |id: &ObjectId| !doomed.contains(id);
        let known: HashSet<ObjectId> = all.iter().copied().collect();
        let rescue = || rescued(self, marked_at, &known, &live, &doomed);
        progress.phase("repacking", Some((all.len() - doomed.len()) as u64));
        let repacked = odb.backend().repack_filtered(
            &RepackOptions { pack: opts.pack },
            if doomed.is_empty() { None } else { Some(&keep) },
            if doomed.is_empty() {
                None
            } else {
                Some(&rescue)
            },
        )?;
        progress.advance((all.len() - doomed.len()) as u64);
        if let Some(r) = &root_dir {
            write_ledger(&ledger_path(r), &next_ledger)?;
        }
        progress.phase("writing indexes", None);
        self.refresh_lineage_from(repacked.sessions)?;
        self.catch_up()?;
        if prunes_sessions || self.index().rebuild_pending() {
            // The index tables hold each session's title and preview (text
            // of its first user message): rebuilt without the dropped
            // sessions, so that no table keeps what gc removed
            // (objects-format.md, "Garbage collection"), this gc's or an
            // earlier one's that did not get to it.
            let rebuild = || -> Result<usize> {
                #[cfg(test)]
                tests::before_rebuild()?;
                self.index().rebuild(self.odb())
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
    fn attribute(&self, doomed: &HashSet<ObjectId>, report: &mut GcReport) -> Result<()> {
        let odb = self.odb();
        let mut owner: HashMap<ObjectId, String> = HashMap::new();
        let mut sizes: HashMap<ObjectId, u64> = HashMap::new();
        // In storage order: each pack block is inflated once, not once per
        // object (a set's order would inflate a block for every object).
        let in_order: Vec<ObjectId> = odb
            .backend()
            .ids_in_storage_order()?
            .into_iter()
            .filter(|id| doomed.contains(id))
            .collect();
        for id in &in_order {
            let obj = match odb.read(id) {
                Ok(o) => o,
                Err(e) if e.is_corruption() => {
                    owner.insert(*id, "(corrupt)".into());
                    continue;
                }
                Err(e) => return Err(e),
            };
            sizes.insert(*id, obj.payload().len() as u64);
            if obj.kind() != ObjectKind::Session {
                continue;
            }
            let Ok(s) = Session::decode(obj.payload()) else {
                continue;
            };
            let conv = s.conversation_id(*id);
            let name = self
                .index()
                .conversation_name(&conv)?
                .unwrap_or_else(|| format!("(deleted) {}", conv.to_hex_prefix(12)));
            for b in s.blobs() {
                if doomed.contains(&b) {
                    owner.entry(b).or_insert_with(|| name.clone());
                }
            }
            owner.insert(*id, name);
        }
        for id in doomed {
            let bytes = sizes.get(id).copied().unwrap_or(0);
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
