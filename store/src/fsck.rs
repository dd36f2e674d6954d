//! Integrity check: every object re-hashed and decoded, every session's
//! parents and blobs present and of the right kind, every history length
//! consistent, the operation and ref-log chains intact, and the index in
//! agreement with the operations. Each problem is one line naming the object
//! or ref. Unreachable ("dangling") sessions are listed, not counted as
//! problems.

use std::collections::{BTreeMap, HashMap, HashSet};

use petgraph::algo::is_cyclic_directed;
use petgraph::graphmap::DiGraphMap;
use petgraph::visit::Dfs;

use crate::error::{Error, Result};
use crate::hash::{IdMap, IdSet, ObjectId};
use crate::object::{Blob, ObjectKind, Raw, Session};
use crate::refs::{Hash, Operation, RefName, RefTarget};
use crate::store::Store;

/// How thorough to be.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsckOptions {
    /// Also verify pack and index checksums and report damaged journal frames.
    pub full: bool,
}

/// What fsck found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsckReport {
    pub objects: usize,
    pub sessions: usize,
    pub blobs: usize,
    /// Raw messages: source lines kept byte for byte.
    pub raws: usize,
    pub operations: usize,
    /// One line per problem; empty means clean.
    pub problems: Vec<String>,
    /// Unreachable sessions that no other unreachable session names as a
    /// parent (the tips of what gc would drop).
    pub dangling: Vec<ObjectId>,
    /// Worth a look but not problems: bytes recovery set aside.
    pub notes: Vec<String>,
}

impl FsckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The JSON form of the report (`sessctl fsck --json`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "clean": self.is_clean(),
            "objects": self.objects,
            "sessions": self.sessions,
            "blobs": self.blobs,
            "raws": self.raws,
            "operations": self.operations,
            "problems": self.problems,
            "dangling": self.dangling.iter().map(|d| d.to_hex()).collect::<Vec<_>>(),
            "notes": self.notes,
        })
    }
}

impl Store {
    /// Checks the whole store. `progress(done, total)` is called as objects
    /// are checked.
    pub fn fsck(
        &self,
        opts: &FsckOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<FsckReport> {
        let odb = self.odb();
        let mut report = FsckReport::default();
        // What the refs and records say, read before the objects: a write
        // stores its objects before the operation that names them, so
        // every object these name is found by the scan that follows,
        // whatever other processes write meanwhile (read after it, a ref
        // could name an object written since: missing for this fsck).
        let mut index_problems = Vec::new();
        let refs = or_index_problem(self.refs(), &mut index_problems)?;
        let refs_at = self.index().head().map_or(0, |(seq, _)| seq);
        let conversations = or_index_problem(self.conversations(None), &mut index_problems)?;
        let (kinds, sessions, problems, objects) = check_objects(odb, progress)?;
        report.objects = objects;
        report.problems = problems;
        report.problems.extend(index_problems);
        report.blobs = kinds.values().filter(|k| **k == ObjectKind::Blob).count();
        report.raws = kinds.values().filter(|k| **k == ObjectKind::Raw).count();
        report.sessions = kinds
            .values()
            .filter(|k| **k == ObjectKind::Session)
            .count();

        // Every session's references, and the session graph.
        let mut graph: DiGraphMap<ObjectId, ()> = DiGraphMap::new();
        for (id, s) in &sessions {
            graph.add_node(*id);
            let expect = |what: &str,
                          target: &ObjectId,
                          kind: ObjectKind,
                          problems: &mut Vec<String>| {
                match kinds.get(target) {
                    Some(k) if k.serves_as(kind) => {}
                    Some(k) => problems.push(format!(
                        "session {id}: its {what} {target} is a {k}, not a {kind}"
                    )),
                    None => problems.push(format!("session {id}: its {what} {target} is missing")),
                }
            };
            for p in &s.parents {
                expect("parent", p, ObjectKind::Session, &mut report.problems);
                graph.add_edge(*id, *p, ());
            }
            for m in &s.messages.added {
                expect("message", m, ObjectKind::Blob, &mut report.problems);
            }
            for m in &s.display_messages.added {
                expect("display message", m, ObjectKind::Blob, &mut report.problems);
            }
            for (what, b) in [
                ("context state", &s.context_state),
                ("environment state", &s.environment_state),
            ] {
                if let Some(b) = b {
                    expect(what, b, ObjectKind::Blob, &mut report.problems);
                }
            }
            if let Some(c) = &s.compaction {
                expect(
                    "compacted session",
                    &c.session,
                    ObjectKind::Session,
                    &mut report.problems,
                );
                expect(
                    "compaction summary",
                    &c.summary,
                    ObjectKind::Blob,
                    &mut report.problems,
                );
            }
        }
        if is_cyclic_directed(&graph) {
            report.problems.push(
                "the session graph has a cycle (ids cannot do that: the store was edited)".into(),
            );
        }

        // History lengths: a session keeps no more than its parent has.
        let mut lengths: IdMap<(u64, u64)> = IdMap::default();
        lengths.reserve(sessions.len());
        for id in sessions.keys() {
            let mut chain = vec![*id];
            while let Some(&top) = chain.last() {
                if lengths.contains_key(&top) {
                    chain.pop();
                    continue;
                }
                let s = &sessions[&top];
                match s.first_parent() {
                    Some(p) if sessions.contains_key(&p) && !lengths.contains_key(&p) => {
                        if chain.contains(&p) {
                            break; // a cycle, reported above
                        }
                        chain.push(p);
                        continue;
                    }
                    _ => {}
                }
                let (plen, pdisp) = s
                    .first_parent()
                    .and_then(|p| lengths.get(&p).copied())
                    .unwrap_or((0, 0));
                let parent_known = s.first_parent().is_none_or(|p| sessions.contains_key(&p));
                if parent_known && s.messages.base > plen {
                    report.problems.push(format!(
                        "session {top}: keeps {} messages of its parent, which has {plen}",
                        s.messages.base
                    ));
                }
                if parent_known && s.display_messages.base > pdisp {
                    report.problems.push(format!(
                        "session {top}: keeps {} display messages of its parent, which has {pdisp}",
                        s.display_messages.base
                    ));
                }
                lengths.insert(top, (s.messages.len(), s.display_messages.len()));
                chain.pop();
            }
        }

        // Refs point at sessions that exist.
        for (name, target) in &refs {
            match target {
                RefTarget::Session(id) => match kinds.get(id) {
                    Some(ObjectKind::Session) => {}
                    Some(k) => report
                        .problems
                        .push(format!("{name}: points at {id}, a {k}")),
                    None => report
                        .problems
                        .push(format!("{name}: points at {id}, which is missing")),
                },
                RefTarget::Symbolic(r) => {
                    if *name != RefName::Head {
                        report
                            .problems
                            .push(format!("{name}: only HEAD may be symbolic"));
                    } else if !refs.iter().any(|(n, _)| n == r) {
                        report
                            .problems
                            .push(format!("HEAD: points at {r}, which does not exist"));
                    }
                }
            }
        }

        // Records name the blobs their large metadata fields are in.
        for c in conversations {
            for id in crate::refs::large_fields::metadata_blobs(&c.record.metadata) {
                match kinds.get(&id) {
                    Some(ObjectKind::Blob) => {}
                    Some(k) => report.problems.push(format!(
                        "conversation {}: its metadata names {id}, a {k}",
                        c.name
                    )),
                    None => report.problems.push(format!(
                        "conversation {}: its metadata names blob {id}, which is missing",
                        c.name
                    )),
                }
            }
        }

        // The operation and ref-log chains, and the index against them.
        report.problems.extend(self.verify_chains()?);
        let entries = self.reflog_entries()?;
        report.operations = entries.iter().map(|e| e.op).collect::<HashSet<_>>().len();
        let mut folded: BTreeMap<String, Option<RefTarget>> = BTreeMap::new();
        // The operations up to the one the refs were read at: later ones
        // (a writer's, since) moved refs this fsck did not read.
        for e in entries.iter().filter(|e| e.op <= refs_at) {
            folded.insert(e.name.to_string(), e.new.clone());
        }
        let indexed: BTreeMap<String, RefTarget> = refs
            .iter()
            .map(|(n, t)| (n.to_string(), t.clone()))
            .collect();
        for (name, value) in &folded {
            if indexed.get(name) != value.as_ref() {
                report.problems.push(format!(
                    "index: {name} is {}, the operations say {}; a reindex rebuilds it",
                    indexed
                        .get(name)
                        .map_or("absent".to_owned(), |t| t.to_string()),
                    value
                        .as_ref()
                        .map_or("absent".to_owned(), |t| t.to_string())
                ));
            }
        }
        for name in indexed.keys() {
            if !folded.contains_key(name) {
                report.problems.push(format!(
                    "index: {name} exists, but no operation made it; a reindex rebuilds it"
                ));
            }
        }

        // Dangling sessions: unreachable from every ref, as read before
        // the objects and again now (a session a writer stored during the
        // scan is reachable from the refs as they are now).
        let mut reachable = IdSet::default();
        let refs_now = self.refs().unwrap_or_default();
        for (_, t) in refs.iter().chain(&refs_now) {
            if let RefTarget::Session(id) = t {
                if graph.contains_node(*id) {
                    let mut dfs = Dfs::new(&graph, *id);
                    while let Some(n) = dfs.next(&graph) {
                        if !reachable.insert(n) {
                            continue;
                        }
                    }
                }
            }
        }
        let unreachable: IdSet = sessions
            .keys()
            .filter(|id| !reachable.contains(id))
            .copied()
            .collect();
        let named_by_unreachable: IdSet = unreachable
            .iter()
            .flat_map(|id| sessions[id].parents.iter().copied())
            .collect();
        report.dangling = unreachable
            .into_iter()
            .filter(|id| !named_by_unreachable.contains(id))
            .collect();
        report.dangling.sort_unstable();

        report.problems.extend(odb.backend().damage());
        // The index tables: derived, so readers do not read their checksums
        // on open; fsck does, every time.
        report.problems.extend(self.index().verify_tables());
        report.notes = odb.backend().set_aside();
        if opts.full {
            report.problems.extend(odb.backend().verify_storage());
            // Index keys a backend keeps (PostgreSQL), against a replay.
            match self.index().verify_kept(odb) {
                Ok(p) => report.problems.extend(p),
                Err(e) if e.is_server_failure() => return Err(e),
                Err(e) => report.problems.push(e.to_string()),
            }
        }
        // The lineage index: its structure on open and its checksum (a
        // reader does not read it, for speed: fsck does, every time), then,
        // with --full, every record against its session. A missing file
        // is fine.
        if let Some(root) = self.root() {
            match crate::lineage_index::LineageIndex::open(root)
                .and_then(|ix| ix.map(|ix| ix.verify().map(|()| ix)).transpose())
            {
                Ok(Some(ix)) if opts.full => report.problems.extend(ix.verify_against(&sessions)),
                Ok(_) => {}
                Err(e) => report.problems.push(format!(
                    "{e} (the lineage index is ignored until the next repack or gc rewrites it)"
                )),
            }
        }
        Ok(report)
    }
}

/// What an index read gives, or, when the index (a derived file) is what
/// failed, nothing and a problem: fsck reports it and checks the rest
/// around it.
fn or_index_problem<T>(r: Result<Vec<T>>, problems: &mut Vec<String>) -> Result<Vec<T>> {
    match r {
        Err(e @ Error::Index(_)) => {
            problems.push(format!("{e}; a reindex rebuilds it"));
            Ok(Vec::new())
        }
        r => r,
    }
}

/// Every object's kind, the sessions decoded, the problems found (in
/// storage order, each as a read or a decode gives it) and the number of
/// objects: every object read, re-hashed and decoded strictly, the blocks
/// of the packs on as many threads as there are cores (each block inflated
/// once). `progress(done, total)` is told from this thread as they go.
#[allow(clippy::type_complexity)]
fn check_objects(
    odb: &crate::odb::Odb,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(
    IdMap<ObjectKind>,
    BTreeMap<ObjectId, Session>,
    Vec<String>,
    usize,
)> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Mutex;
    #[derive(Default)]
    struct Found {
        kinds: IdMap<ObjectKind>,
        sessions: BTreeMap<ObjectId, Session>,
        /// (batch, place in it, problem): sorted into storage order at the end.
        problems: Vec<(usize, usize, String)>,
        objects: usize,
    }
    let stats = odb.stats()?;
    let total = stats.pack_objects + stats.journal_objects;
    let mut found = Found::default();
    found.kinds.reserve(total);
    let found = Mutex::new(found);
    let done = AtomicUsize::new(0);
    let finished = AtomicBool::new(false);
    // A server that failed a read (unreachable, refusing): fsck stops with
    // its error, as what did not read is not known to be missing or damaged.
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let check = |batch: usize, items: &[crate::odb::ScanItem<'_>]| {
        let mut problems = Vec::new();
        let mut decoded = Vec::new();
        for (k, (id, read)) in items.iter().enumerate() {
            match read {
                // The one kind of server failure (`Error::is_server_failure`).
                Err(Error::Remote { what, reason }) => {
                    failed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .get_or_insert_with(|| Error::Remote {
                            what: what.clone(),
                            reason: reason.clone(),
                        });
                }
                Err(e) => problems.push((batch, k, e.to_string())),
                Ok((ObjectKind::Blob, _, Some(payload))) => {
                    if let Err(e) = Blob::decode(payload) {
                        problems.push((batch, k, format!("blob {id}: {e}")));
                    }
                }
                Ok((ObjectKind::Raw, _, Some(payload))) => {
                    if let Err(e) = Raw::decode(payload) {
                        problems.push((batch, k, format!("raw {id}: {e}")));
                    }
                }
                Ok((ObjectKind::Session, _, Some(payload))) => match Session::decode(payload) {
                    Ok(s) => decoded.push((*id, s)),
                    Err(e) => problems.push((batch, k, format!("session {id}: {e}"))),
                },
                Ok((_, _, None)) => {}
            }
        }
        let mut f = found.lock().unwrap_or_else(|p| p.into_inner());
        f.objects += items.len();
        for (id, read) in items {
            if let Ok((kind, _, _)) = read {
                f.kinds.insert(*id, *kind);
            }
        }
        f.sessions.extend(decoded);
        f.problems.extend(problems);
        done.fetch_add(items.len(), Ordering::Relaxed);
    };
    progress(0, total);
    let scanned = std::thread::scope(|s| {
        let scan = s.spawn(|| {
            let r = odb.backend().scan(&|_| true, &check);
            finished.store(true, Ordering::Release);
            r
        });
        while !finished.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            progress(done.load(Ordering::Relaxed).min(total), total);
        }
        scan.join()
    });
    match scanned {
        Ok(r) => r?,
        Err(panic) => std::panic::resume_unwind(panic),
    }
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut f = found.into_inner().unwrap_or_else(|p| p.into_inner());
    progress(f.objects, f.objects);
    f.problems.sort_unstable_by_key(|p| (p.0, p.1));
    let problems = f.problems.into_iter().map(|p| p.2).collect();
    Ok((f.kinds, f.sessions, problems, f.objects))
}

impl Store {
    /// Walks the operation chain and every ref's log chain; returns the
    /// problems found, one line each (empty when all chains hold).
    pub fn verify_chains(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let mut prev_op: Option<Hash> = None;
        let mut expect_seq = 1;
        let mut heads: BTreeMap<String, Hash> = BTreeMap::new();
        let mut seen: HashMap<String, HashSet<Hash>> = HashMap::new();
        for (seq, bytes) in self.odb().backend().ops_after(0)? {
            let op = match Operation::decode(&bytes) {
                Ok(op) => op,
                Err(e) => {
                    problems.push(format!("operation {seq}: does not decode: {e}"));
                    prev_op = None;
                    expect_seq = seq + 1;
                    continue;
                }
            };
            if seq != expect_seq {
                problems.push(format!(
                    "operation {seq}: expected operation {expect_seq} (operations are missing)"
                ));
            }
            if op.prev != prev_op && seq == expect_seq {
                problems.push(format!(
                    "operation {seq}: names a previous operation that is not the one before it"
                ));
            }
            // An expiry names an entry its ref's chain holds already.
            for x in &op.expire {
                let name = x.name.to_string();
                if !seen.get(&name).is_some_and(|h| h.contains(&x.through)) {
                    problems.push(format!(
                        "{name}: operation {seq} expires its ref log through an entry it does not have"
                    ));
                }
            }
            for entry in op.reflog_entries() {
                let name = entry.name.to_string();
                seen.entry(name.clone()).or_default().insert(entry.hash());
                let expected = heads.get(&name).copied();
                if entry.prev != expected {
                    problems.push(format!(
                        "{name}: reflog entry of operation {seq} does not chain to the entry before it"
                    ));
                }
                heads.insert(name, entry.hash());
            }
            prev_op = Some(op.hash());
            expect_seq = seq + 1;
        }
        Ok(problems)
    }
}
