#![allow(clippy::unwrap_used)] // tests: a panic is the failure report
//! The lineage index (objects-format.md, "Lineage index"): walks answer the
//! same with the file as without it, on random DAGs with merges and forks,
//! past the file (the journal tail), after gc, and with a damaged file; an
//! incremental rewrite is byte-identical to a fresh one.

mod support;

use std::collections::BTreeSet;
use std::path::Path;

use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::{GcOptions, Prune};
use sessctl_store::graph::{self, Follow, Lineage};
use sessctl_store::lineage_index::{self as lineage, LineageIndex, LINEAGE_FORMAT_VERSION};
use sessctl_store::{
    Durability, Error, MessageDelta, ObjectId, OpenOptions, RepackOptions, Session, Store,
    WriteBatch,
};
use support::Rng;

/// Appends `n` random sessions to `ids`: mostly continuations, some forks of
/// old sessions, some merges (up to 3 parents), a few new roots; skewed
/// clocks; messages kept of the first parent.
fn grow(store: &Store, rng: &mut Rng, ids: &mut Vec<ObjectId>, lens: &mut Vec<u64>, n: usize) {
    let mut batch = WriteBatch::new();
    for _ in 0..n {
        let k = ids.len();
        let mut s = Session::new_root(1_763_000_000_000 + rng.below(1_000_000) as i64);
        let mut base = 0;
        if k > 0 && rng.below(10) != 0 {
            let first = if rng.below(10) < 7 {
                k - 1 - rng.below(k.min(4) as u64) as usize
            } else {
                rng.below(k as u64) as usize
            };
            s.parents.push(ids[first]);
            s.conversation = Some(ids[first]);
            base = rng.below(lens[first] + 1);
            for _ in 0..[2, 1, 1, 0, 0, 0, 0, 0, 0, 0][rng.below(10) as usize] {
                let p = ids[rng.below(k as u64) as usize];
                if !s.parents.contains(&p) {
                    s.parents.push(p);
                }
            }
        }
        let m = batch
            .blob(&serde_json::json!({"role": "user", "content": format!("m{k}")}))
            .unwrap();
        s.messages = MessageDelta {
            base,
            added: vec![m; rng.below(3) as usize],
        };
        lens.push(s.messages.len());
        ids.push(batch.session(&s).unwrap());
    }
    store.odb().write(&batch, Durability::NoSync).unwrap();
}

/// Every walk, through `l`, on some sessions.
#[allow(clippy::type_complexity)]
fn answers(
    l: &dyn Lineage,
    ids: &[ObjectId],
    rng: &mut Rng,
) -> Vec<(
    Vec<ObjectId>,
    Vec<ObjectId>,
    usize,
    usize,
    BTreeSet<ObjectId>,
    bool,
    Vec<ObjectId>,
)> {
    let mut out = Vec::new();
    for _ in 0..25 {
        let a = ids[rng.below(ids.len() as u64) as usize];
        let b = ids[rng.below(ids.len() as u64) as usize];
        let log: Vec<ObjectId> = graph::log_order(l, &[a, b], Follow::All, None)
            .unwrap()
            .into_iter()
            .map(|n| n.id)
            .collect();
        let fp: Vec<ObjectId> = graph::log_order(l, &[a], Follow::FirstParent, None)
            .unwrap()
            .into_iter()
            .map(|n| n.id)
            .collect();
        out.push((
            log,
            fp,
            graph::count(l, &[a, b], Follow::All).unwrap(),
            graph::count(l, &[b], Follow::FirstParent).unwrap(),
            graph::ancestors(l, &[a], Follow::All)
                .unwrap()
                .into_iter()
                .collect(),
            graph::is_ancestor(l, a, b).unwrap(),
            graph::merge_bases_all(l, a, b).unwrap(),
        ));
        // Ancestry both ways, and with itself.
        assert!(graph::is_ancestor(l, a, a).unwrap());
        assert_eq!(graph::merge_bases_all(l, a, a).unwrap(), vec![a]);
    }
    out
}

fn check_same(store: &Store, ids: &[ObjectId], seed: u64, what: &str) {
    let with = answers(store, ids, &mut Rng::new(seed));
    let without = answers(store.odb(), ids, &mut Rng::new(seed));
    assert_eq!(with, without, "seed {seed}: {what}");
}

fn tag_all(store: &Store, ids: &[ObjectId], from: usize) {
    support::tag(
        store,
        ids[from..]
            .iter()
            .enumerate()
            .map(|(k, id)| (from + k, *id)),
    );
}

#[test]
fn walks_answer_the_same_with_the_file_as_without_it() {
    for seed in [1, 2, 3, 4, 5, 6] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::init(&dir.path().join("s")).unwrap();
        let mut rng = Rng::new(seed);
        let (mut ids, mut lens) = (Vec::new(), Vec::new());
        let n = 60 + rng.below(60) as usize;
        grow(&store, &mut rng, &mut ids, &mut lens, n);
        assert!(store.lineage_index().is_none());
        check_same(&store, &ids, seed, "no file yet");
        store.repack(&RepackOptions::default()).unwrap();
        let ix = store.lineage_index().unwrap();
        assert_eq!(ix.len(), ids.len());
        for (k, id) in ids.iter().enumerate() {
            let pos = ix.position(id).unwrap();
            assert_eq!(ix.id(pos), Some(*id));
            let s = store.odb().session(id).unwrap();
            let parents: Vec<ObjectId> = ix
                .parents(pos)
                .unwrap()
                .map(|p| ix.id(p).unwrap())
                .collect();
            assert_eq!(parents, s.parents);
            assert_eq!(ix.created_at(pos), s.created_at);
            assert_eq!(ix.conversation(pos), Some(s.conversation_id(*id)));
            assert_eq!(ix.messages(pos), lens[k]);
            assert_eq!(
                ix.messages(pos),
                store.odb().history(id).unwrap().len() as u64
            );
            let want = 1 + ix
                .parents(pos)
                .unwrap()
                .map(|p| ix.generation(p))
                .max()
                .unwrap_or(0);
            assert_eq!(ix.generation(pos), want);
            assert_eq!(store.generation(id).unwrap(), Some(want));
        }
        assert_eq!(ix.position(&ObjectId::from_bytes([0xab; 32])), None);
        check_same(&store, &ids, seed, "all in the file");
        // The journal tail: sessions written after the file.
        let before = ids.len();
        grow(&store, &mut rng, &mut ids, &mut lens, 40);
        assert_eq!(store.generation(&ids[before]).unwrap(), None);
        check_same(&store, &ids, seed, "with a journal tail");
        // Reopened, the file is read from disk.
        drop(ix);
        drop(store);
        let store = Store::open(&dir.path().join("s"), &OpenOptions::default()).unwrap();
        check_same(&store, &ids, seed, "reopened");
        tag_all(&store, &ids, 0);
        store.repack(&RepackOptions::default()).unwrap();
        assert_eq!(store.lineage_index().unwrap().len(), ids.len());
        check_same(&store, &ids, seed, "rewritten");
        let r = store
            .fsck(&FsckOptions { full: true }, &mut |_, _| {})
            .unwrap();
        assert!(r.is_clean(), "{:?}", r.problems);
    }
}

#[test]
fn an_incremental_rewrite_equals_a_fresh_one_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let store = Store::init(&root).unwrap();
    let mut rng = Rng::new(42);
    let (mut ids, mut lens) = (Vec::new(), Vec::new());
    grow(&store, &mut rng, &mut ids, &mut lens, 80);
    let first = store.refresh_lineage().unwrap().unwrap();
    assert_eq!((first.sessions, first.reused, first.decoded), (80, 0, 80));
    assert!(first.written);
    grow(&store, &mut rng, &mut ids, &mut lens, 30);
    let next = store.refresh_lineage().unwrap().unwrap();
    assert_eq!((next.sessions, next.reused, next.decoded), (110, 80, 30));
    let on_disk = std::fs::read(lineage::path_in(&root)).unwrap();
    let (facts, _) = lineage::collect(store.odb(), None).unwrap();
    assert_eq!(lineage::build(&facts).unwrap(), on_disk);
    // Nothing new: the file is left alone.
    let same = store.refresh_lineage().unwrap().unwrap();
    assert!(!same.written);
    assert_eq!(std::fs::read(lineage::path_in(&root)).unwrap(), on_disk);
}

#[test]
fn a_file_filtered_by_gc_equals_one_built_from_the_sessions_kept() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let store = Store::init(&root).unwrap();
    let mut rng = Rng::new(44);
    let (mut ids, mut lens) = (Vec::new(), Vec::new());
    grow(&store, &mut rng, &mut ids, &mut lens, 200);
    store.refresh_lineage().unwrap().unwrap();
    let ix = store.lineage_index().unwrap();
    let (facts, _) = lineage::collect(store.odb(), None).unwrap();
    // Drop the sessions whose ancestry holds an early one, and with them
    // (so that what is kept keeps its parents) their descendants.
    let mut dropped: BTreeSet<ObjectId> = BTreeSet::new();
    for id in facts.keys() {
        let mut stack = vec![*id];
        let mut hit = false;
        while let Some(s) = stack.pop() {
            if ids[5..9].contains(&s) {
                hit = true;
                break;
            }
            stack.extend(facts[&s].parents.iter().copied());
        }
        if hit {
            dropped.insert(*id);
        }
    }
    assert!(!dropped.is_empty() && dropped.len() < facts.len());
    let kept: std::collections::BTreeMap<ObjectId, lineage::SessionFacts> = facts
        .iter()
        .filter(|(id, _)| !dropped.contains(id))
        .map(|(id, f)| (*id, f.clone()))
        .collect();
    let filtered = lineage::filtered(&ix, &|id| !dropped.contains(id)).unwrap();
    assert_eq!(filtered, lineage::build(&kept).unwrap());
    // A kept session whose parent goes: not a filter's to decide.
    let orphan = facts
        .iter()
        .find(|(_, f)| f.parents.first().is_some_and(|p| dropped.contains(p)))
        .map(|(id, _)| *id)
        .unwrap();
    assert!(lineage::filtered(&ix, &|id| !dropped.contains(id) || *id == orphan).is_none());
}

#[test]
fn a_repack_writes_the_file_from_the_sessions_it_packed_reading_no_blob() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let store = Store::init(&root).unwrap();
    let mut rng = Rng::new(43);
    let (mut ids, mut lens) = (Vec::new(), Vec::new());
    grow(&store, &mut rng, &mut ids, &mut lens, 60);
    let stats = store.repack(&RepackOptions::default()).unwrap();
    let mut packed = stats.sessions.clone().unwrap();
    packed.sort();
    let mut want = ids.clone();
    want.sort();
    want.dedup();
    assert_eq!(packed, want, "the repack names every session it packed");
    // The file it wrote is the one a scan of every object gives.
    let on_disk = std::fs::read(lineage::path_in(&root)).unwrap();
    let (facts, scan) = lineage::collect(store.odb(), None).unwrap();
    assert_eq!(lineage::build(&facts).unwrap(), on_disk);
    let (_, from_list) = lineage::collect_from(store.odb(), None, packed).unwrap();
    assert_eq!(from_list.decoded, scan.decoded);
    // A repack with nothing to do names no sessions; the file stays.
    let again = store.repack(&RepackOptions::default()).unwrap();
    assert_eq!(again.sessions, None);
    assert_eq!(std::fs::read(lineage::path_in(&root)).unwrap(), on_disk);
}

#[test]
fn gc_drops_the_sessions_it_drops_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::init(&dir.path().join("s")).unwrap();
    let mut rng = Rng::new(7);
    let (mut ids, mut lens) = (Vec::new(), Vec::new());
    grow(&store, &mut rng, &mut ids, &mut lens, 50);
    tag_all(&store, &ids, 0);
    store.repack(&RepackOptions::default()).unwrap();
    // A branch nothing names.
    let mut loose = Session::new_root(1);
    loose.parents = vec![ids[10]];
    let mut b = WriteBatch::new();
    let loose = b.session(&loose).unwrap();
    store.odb().write(&b, Durability::NoSync).unwrap();
    store.repack(&RepackOptions::default()).unwrap();
    assert!(store.lineage_index().unwrap().position(&loose).is_some());
    store
        .gc(&GcOptions {
            prune: Prune::Now,
            ..GcOptions::default()
        })
        .unwrap();
    let ix = store.lineage_index().unwrap();
    assert_eq!(ix.position(&loose), None);
    assert_eq!(ix.len(), ids.len());
    check_same(&store, &ids, 7, "after gc");
}

#[test]
fn a_damaged_file_is_refused_ignored_with_a_note_and_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let store = Store::init(&root).unwrap();
    let mut rng = Rng::new(9);
    let (mut ids, mut lens) = (Vec::new(), Vec::new());
    grow(&store, &mut rng, &mut ids, &mut lens, 60);
    tag_all(&store, &ids, 0);
    store.repack(&RepackOptions::default()).unwrap();
    drop(store);
    let path = lineage::path_in(&root);
    let good = std::fs::read(&path).unwrap();
    // Every byte flipped in turn (a sample), and cuts: a clear error, no
    // panic. Opening checks the structure only (its cost must not grow with
    // the file); what leaves the structure sound, the checksum catches.
    for at in (0..good.len()).step_by(7).chain([good.len() - 1]) {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        match LineageIndex::from_bytes(path.clone(), bad).and_then(|ix| ix.verify()) {
            Err(Error::CorruptFile { path: p, .. }) => assert_eq!(p, path),
            other => panic!("byte {at}: {other:?}"),
        }
    }
    for len in [0, 3, 100, good.len() - 1] {
        assert!(matches!(
            LineageIndex::from_bytes(path.clone(), good[..len].to_vec()),
            Err(Error::CorruptFile { .. })
        ));
    }
    let mut bad = good.clone();
    bad[200] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    let err = LineageIndex::open(&root).unwrap_err();
    assert!(err.to_string().contains("fan-out"), "{err}");
    assert!(err.to_string().contains("graph.lgi"), "{err}");
    let store = Store::open(&root, &OpenOptions::default()).unwrap();
    check_same(&store, &ids, 9, "damaged file");
    let notes = store.take_recovery_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("ignoring the lineage index")),
        "{notes:?}"
    );
    let r = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains("graph.lgi")),
        "{:?}",
        r.problems
    );
    store.repack(&RepackOptions::default()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), good);
    assert_eq!(store.lineage_index().unwrap().len(), ids.len());
    // A well-formed file that disagrees with the objects is fsck's to report.
    let (mut facts, _) = lineage::collect(store.odb(), None).unwrap();
    facts.get_mut(&ids[5]).unwrap().messages += 1;
    lineage::write_file(&root, &lineage::build(&facts).unwrap()).unwrap();
    let r = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains("graph.lgi")
            && p.contains("message count")
            && p.contains(&ids[5].to_hex())),
        "{:?}",
        r.problems
    );
}

#[test]
fn sessions_whose_ancestry_is_missing_stay_out_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let store = Store::init(&root).unwrap();
    let ghost = ObjectId::from_bytes([7; 32]);
    let mut b = WriteBatch::new();
    let base = b.session(&Session::new_root(1)).unwrap();
    let mut orphan = Session::new_root(2);
    orphan.parents = vec![base, ghost];
    let orphan = b.session(&orphan).unwrap();
    let mut child = Session::new_root(3);
    child.parents = vec![orphan];
    let child = b.session(&child).unwrap();
    // An octopus: four parents.
    let mut kids = Vec::new();
    for t in 4..8 {
        let mut s = Session::new_root(t);
        s.parents = vec![base];
        kids.push(b.session(&s).unwrap());
    }
    let mut octopus = Session::new_root(9);
    octopus.parents = kids.clone();
    let octopus = b.session(&octopus).unwrap();
    store.odb().write(&b, Durability::NoSync).unwrap();
    store.refresh_lineage().unwrap();
    let ix = store.lineage_index().unwrap();
    assert_eq!(ix.len(), 6);
    assert_eq!(ix.position(&orphan), None);
    assert_eq!(ix.position(&child), None);
    let pos = ix.position(&octopus).unwrap();
    let parents: Vec<ObjectId> = ix
        .parents(pos)
        .unwrap()
        .map(|p| ix.id(p).unwrap())
        .collect();
    assert_eq!(parents, kids);
    assert_eq!(ix.generation(pos), 3);
    // Walks through the orphan fail as they do without the file.
    assert!(matches!(
        graph::count(&store, &[child], Follow::All),
        Err(Error::NotFound { id }) if id == ghost
    ));
    assert_eq!(
        graph::count(&store, &[child], Follow::FirstParent).unwrap(),
        3
    );
    assert_eq!(graph::count(&store, &[octopus], Follow::All).unwrap(), 6);
    assert!(graph::is_ancestor(&store, base, octopus).unwrap());
    assert!(!graph::is_ancestor(&store, ghost, octopus).unwrap());
    assert_eq!(
        graph::merge_bases_all(&store, octopus, kids[0]).unwrap(),
        vec![kids[0]]
    );
    assert_eq!(LINEAGE_FORMAT_VERSION, 2);
    let _ = Path::new("");
}

/// `reindex` rebuilds every derived file from the objects: a lost lineage
/// index comes back byte-identical to a fresh build, damaged index tables
/// are replaced by one that holds every operation.
#[test]
fn reindex_rebuilds_the_lineage_index_and_the_index_tables() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let store = Store::init(&root).unwrap();
    let mut rng = Rng::new(7);
    let (mut ids, mut lens) = (Vec::new(), Vec::new());
    grow(&store, &mut rng, &mut ids, &mut lens, 40);
    support::tag(&store, [(0, ids[39])]);
    store.refresh_lineage().unwrap();
    let fresh = std::fs::read(lineage::path_in(&root)).unwrap();
    std::fs::remove_file(lineage::path_in(&root)).unwrap();
    std::fs::write(
        root.join("index")
            .join("0000000000000001-0000000000000002.sit"),
        b"garbage",
    )
    .unwrap();
    let applied = store.reindex().unwrap();
    assert_eq!(std::fs::read(lineage::path_in(&root)).unwrap(), fresh);
    let tables = store.index().tables();
    assert_eq!(tables.len(), 1, "{tables:?}");
    assert_eq!((tables[0].1, tables[0].2), (1, applied as u64));
    assert!(!root
        .join("index")
        .join("0000000000000001-0000000000000002.sit")
        .exists());
    assert_eq!(store.lineage_index().unwrap().len(), 40);
}

/// The ids `LogIds` yields, and those of the log walk, from `starts`.
fn both_logs(
    l: &dyn Lineage,
    starts: &[ObjectId],
    follow: Follow,
) -> (Vec<ObjectId>, Vec<ObjectId>) {
    let ids: Vec<ObjectId> = graph::LogIds::new(l, starts, follow)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let nodes: Vec<ObjectId> = graph::log_order(l, starts, follow, None)
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect();
    (ids, nodes)
}

/// `LogIds` yields exactly the log walk's ids, in its order: on random DAGs
/// (chains, forks, merges of up to three), without a lineage index, with
/// one, with a journal tail after it, by every parent and by first parents.
#[test]
fn log_ids_are_the_log_walks_ids_in_its_order() {
    for seed in [11, 12, 13, 14] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::init(&dir.path().join("s")).unwrap();
        let mut rng = Rng::new(seed);
        let (mut ids, mut lens) = (Vec::new(), Vec::new());
        grow(&store, &mut rng, &mut ids, &mut lens, 80);
        let check = |store: &Store, ids: &[ObjectId], rng: &mut Rng, what: &str| {
            for _ in 0..20 {
                let a = ids[rng.below(ids.len() as u64) as usize];
                let b = ids[rng.below(ids.len() as u64) as usize];
                for starts in [vec![a], vec![a, b]] {
                    for follow in [Follow::All, Follow::FirstParent] {
                        let (by_ids, by_nodes) = both_logs(store, &starts, follow);
                        assert_eq!(by_ids, by_nodes, "seed {seed}, {what}, {follow:?}");
                        let (plain, _) = both_logs(store.odb(), &starts, follow);
                        assert_eq!(by_ids, plain, "seed {seed}, {what}: the objects' order");
                    }
                }
            }
        };
        assert!(store.lineage_index().is_none());
        check(&store, &ids, &mut rng, "no file");
        store.repack(&RepackOptions::default()).unwrap();
        assert_eq!(store.lineage_index().unwrap().len(), ids.len());
        check(&store, &ids, &mut rng, "all in the file");
        grow(&store, &mut rng, &mut ids, &mut lens, 30);
        check(&store, &ids, &mut rng, "a journal tail");
        assert!(store.take_recovery_notes().is_empty());
    }
    // A long chain: the streaming path from end to end, and a limit.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::init(&dir.path().join("s")).unwrap();
    let mut b = WriteBatch::new();
    let mut chain = Vec::new();
    for t in 0..500 {
        let mut s = Session::new_root(t);
        s.parents = chain.last().copied().into_iter().collect();
        chain.push(b.session(&s).unwrap());
    }
    store.odb().write(&b, Durability::NoSync).unwrap();
    store.refresh_lineage().unwrap();
    let tip = *chain.last().unwrap();
    let (by_ids, by_nodes) = both_logs(&store, &[tip], Follow::All);
    let mut want = chain.clone();
    want.reverse();
    assert_eq!(by_ids, want);
    assert_eq!(by_nodes, want);
    let first: Vec<ObjectId> = graph::LogIds::new(&store, &[tip], Follow::All)
        .unwrap()
        .take(3)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(first, want[..3]);
}

/// A record that fails its check (here a generation the checksum would
/// catch, but readers do not read the checksum) is found by the walk that
/// reads it, not on open: the walk answers as without the file, the store
/// notes that it ignores the file, fsck reports it, and a repack rewrites
/// it. Mid-stream, `log` starts again by id and skips what it yielded.
#[test]
fn a_record_that_fails_its_check_midway_is_ignored_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let store = Store::init(&root).unwrap();
    let mut b = WriteBatch::new();
    let mut chain = Vec::new();
    for t in 0..100 {
        let mut s = Session::new_root(t);
        s.parents = chain.last().copied().into_iter().collect();
        chain.push(b.session(&s).unwrap());
    }
    store.odb().write(&b, Durability::NoSync).unwrap();
    tag_all(&store, &chain, 99);
    store.repack(&RepackOptions::default()).unwrap();
    let good = std::fs::read(lineage::path_in(&root)).unwrap();
    let ix = store.lineage_index().unwrap();
    let victim = ix.position(&chain[40]).unwrap() as usize;
    drop(ix);
    drop(store);
    let mut bad = good.clone();
    let at =
        lineage::HEADER_LEN + lineage::FANOUT_LEN + 100 * 32 + victim * lineage::RECORD_LEN + 8;
    bad[at..at + 4].copy_from_slice(&7u32.to_le_bytes());
    std::fs::write(lineage::path_in(&root), &bad).unwrap();
    let mut want = chain.clone();
    want.reverse();
    let tip = chain[99];

    // Opening reads no record.
    let store = Store::open(&root, &OpenOptions::default()).unwrap();
    assert!(store.lineage_index().is_some());
    assert!(store.take_recovery_notes().is_empty());
    // Streaming: 59 sessions come from the file, then the walk starts again.
    let (by_ids, by_nodes) = both_logs(&store, &[tip], Follow::All);
    assert_eq!(by_ids, want);
    assert_eq!(by_nodes, want);
    let notes = store.take_recovery_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("ignoring the lineage index") && n.contains("graph.lgi")),
        "{notes:?}"
    );
    assert!(store.lineage_index().is_none());
    // Each walk, on a fresh handle, finds it and answers as without it.
    type Walk = fn(&Store, &[ObjectId]) -> String;
    let walks: [Walk; 5] = [
        |s, c| graph::count(s, &[c[99]], Follow::All).unwrap().to_string(),
        |s, c| {
            graph::ancestors(s, &[c[99]], Follow::All)
                .unwrap()
                .len()
                .to_string()
        },
        |s, c| graph::is_ancestor(s, c[3], c[99]).unwrap().to_string(),
        |s, c| format!("{:?}", graph::merge_base(s, c[99], c[30]).unwrap()),
        |s, c| {
            let ids: Vec<ObjectId> = graph::LogIds::new(s, &[c[99]], Follow::FirstParent)
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            ids.len().to_string()
        },
    ];
    let plain = Store::open(&root, &OpenOptions::default()).unwrap();
    plain.lineage_index_failed(&Error::CorruptFile {
        path: lineage::path_in(&root),
        offset: 0,
        reason: "set aside by the test".into(),
    });
    for (k, walk) in walks.iter().enumerate() {
        let store = Store::open(&root, &OpenOptions::default()).unwrap();
        assert_eq!(walk(&store, &chain), walk(&plain, &chain), "walk {k}");
        let notes = store.take_recovery_notes();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("ignoring the lineage index")),
            "walk {k}: {notes:?}"
        );
    }
    assert_eq!(walks[0](&plain, &chain), "100");
    assert_eq!(walks[2](&plain, &chain), "true");
    assert_eq!(walks[3](&plain, &chain), format!("{:?}", Some(chain[30])));
    let r = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("graph.lgi") && p.contains("generation")),
        "{:?}",
        r.problems
    );
    // The next repack rewrites it whole.
    let store = Store::open(&root, &OpenOptions::default()).unwrap();
    store.refresh_lineage().unwrap();
    assert_eq!(std::fs::read(lineage::path_in(&root)).unwrap(), good);
}

/// Version 2 lays records out in generation order (descending, then by
/// id): every parent comes after its children, so a walk down a line of
/// history reads the file forward; the id-order list finds each id.
#[test]
fn records_are_in_generation_order_and_found_through_the_id_order() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    let store = Store::init(&root).unwrap();
    let mut rng = Rng::new(21);
    let (mut ids, mut lens) = (Vec::new(), Vec::new());
    grow(&store, &mut rng, &mut ids, &mut lens, 150);
    store.refresh_lineage().unwrap();
    let ix = store.lineage_index().unwrap();
    assert_eq!(ix.bytes()[4..8], 2u32.to_le_bytes());
    ix.verify().unwrap();
    let n = ix.len() as u32;
    let mut seen = BTreeSet::new();
    for pos in 0..n {
        let id = ix.id(pos).unwrap();
        assert!(seen.insert(id));
        assert_eq!(ix.lookup(&id).unwrap(), Some(pos));
        for p in ix.parents(pos).unwrap() {
            assert!(p > pos, "parent {p} of {pos} comes before it");
        }
        if pos > 0 {
            let prev = ix.id(pos - 1).unwrap();
            let g = (ix.generation(pos - 1), ix.generation(pos));
            assert!(g.0 > g.1 || (g.0 == g.1 && prev < id), "order at {pos}");
        }
    }
    // The id-order list is the ids sorted.
    let list_at = ix.bytes().len() - 32 - 4 * n as usize;
    let listed: Vec<ObjectId> = ix.bytes()[list_at..list_at + 4 * n as usize]
        .chunks(4)
        .map(|c| ix.id(u32::from_le_bytes(c.try_into().unwrap())).unwrap())
        .collect();
    assert_eq!(listed, seen.into_iter().collect::<Vec<_>>());
    // Damaged where a lookup lands: an entry of the id order repeats its
    // neighbour. The lookup reports the file, the walks answer as without
    // it, with a note, and fsck finds the disorder.
    drop(ix);
    drop(store);
    let good = std::fs::read(lineage::path_in(&root)).unwrap();
    let mut bad = good.clone();
    let k = list_at + 4 * (n as usize / 2);
    let a = bad[k..k + 4].to_vec();
    bad[k + 4..k + 8].copy_from_slice(&a);
    std::fs::write(lineage::path_in(&root), &bad).unwrap();
    let ix = LineageIndex::open(&root).unwrap().unwrap();
    let swapped = ix.id(u32::from_le_bytes(a.try_into().unwrap())).unwrap();
    let err = ix.lookup(&swapped).unwrap_err();
    assert!(ix.is_own_error(&err), "{err}");
    assert!(ix.check().unwrap_err().to_string().contains("id order"));
    let store = Store::open(&root, &OpenOptions::default()).unwrap();
    let tip = ids[ids.len() - 1];
    let (with, _) = both_logs(&store, &[tip, swapped], Follow::All);
    let (plain, _) = both_logs(store.odb(), &[tip, swapped], Follow::All);
    assert_eq!(with, plain);
    assert!(store
        .take_recovery_notes()
        .iter()
        .any(|n| n.contains("ignoring the lineage index")));
    check_same(&store, &ids, 21, "a damaged id order");
    let r = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains("graph.lgi")),
        "{:?}",
        r.problems
    );
}

/// A version-2 file made into the version-1 layout that sessctl wrote
/// before: records in id order (parents renumbered), no id-order list.
fn to_version_1(v2: &[u8]) -> Vec<u8> {
    use lineage::{CHECKSUM_LEN, EXTRA_FLAG, FANOUT_LEN, HEADER_LEN, NO_PARENT, RECORD_LEN};
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let (n, c, e) = (
        u32_at(v2, 8) as usize,
        u32_at(v2, 12) as usize,
        u32_at(v2, 16) as usize,
    );
    let ids_at = HEADER_LEN + FANOUT_LEN;
    let records_at = ids_at + 32 * n;
    let extra_at = records_at + RECORD_LEN * n + 32 * c;
    let list_at = extra_at + 4 * e;
    // Old position (id order) of each new one, and back.
    let sorted: Vec<usize> = (0..n)
        .map(|k| u32_at(v2, list_at + 4 * k) as usize)
        .collect();
    let mut rank = vec![0u32; n];
    for (k, &pos) in sorted.iter().enumerate() {
        rank[pos] = k as u32;
    }
    let renumber = |p: u32| {
        if p == NO_PARENT || p & EXTRA_FLAG != 0 {
            p
        } else {
            rank[p as usize]
        }
    };
    let mut out = v2[..ids_at].to_vec();
    out[4..8].copy_from_slice(&1u32.to_le_bytes());
    for &pos in &sorted {
        out.extend_from_slice(&v2[ids_at + 32 * pos..ids_at + 32 * (pos + 1)]);
    }
    // Extra edges, in the order of the records that own them.
    let mut extra = Vec::new();
    let mut records = Vec::new();
    for &pos in &sorted {
        let r = &v2[records_at + RECORD_LEN * pos..records_at + RECORD_LEN * (pos + 1)];
        let mut second = u32_at(r, 4);
        if second != NO_PARENT && second & EXTRA_FLAG != 0 {
            let mut k = (second & !EXTRA_FLAG) as usize;
            second = extra.len() as u32 | EXTRA_FLAG;
            loop {
                let v = u32_at(v2, extra_at + 4 * k);
                extra.push(rank[(v & !EXTRA_FLAG) as usize] | (v & EXTRA_FLAG));
                if v & EXTRA_FLAG != 0 {
                    break;
                }
                k += 1;
            }
        }
        records.extend_from_slice(&renumber(u32_at(r, 0)).to_le_bytes());
        records.extend_from_slice(&renumber(second).to_le_bytes());
        records.extend_from_slice(&r[8..]);
    }
    out.extend_from_slice(&records);
    out.extend_from_slice(&v2[records_at + RECORD_LEN * n..extra_at]);
    for v in extra {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    assert_eq!(out.len(), v2.len() - 4 * n);
    let _ = CHECKSUM_LEN;
    out
}

/// Files written before version 2 (records in id order) still read: walks
/// answer from one as from the objects, its checks pass, gc builds rather
/// than filters it, and the next rewrite makes it version 2.
#[test]
fn a_version_1_file_is_still_read_and_rewritten_as_version_2() {
    // The converter makes what sessctl wrote: the committed fixture's file.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-sled-index");
    let old = std::fs::read(lineage::path_in(&fixture)).unwrap();
    assert_eq!(old[4..8], 1u32.to_le_bytes());
    let ix = LineageIndex::open(&fixture).unwrap().unwrap();
    ix.verify().unwrap();
    let facts: std::collections::BTreeMap<ObjectId, lineage::SessionFacts> = (0..ix.len() as u32)
        .map(|pos| (ix.id(pos).unwrap(), ix.facts(pos).unwrap().unwrap()))
        .collect();
    assert_eq!(to_version_1(&lineage::build(&facts).unwrap()), old);

    for seed in [31, 32, 33] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let store = Store::init(&root).unwrap();
        let mut rng = Rng::new(seed);
        let (mut ids, mut lens) = (Vec::new(), Vec::new());
        grow(&store, &mut rng, &mut ids, &mut lens, 120);
        tag_all(&store, &ids, 0);
        store.repack(&RepackOptions::default()).unwrap();
        let v2 = std::fs::read(lineage::path_in(&root)).unwrap();
        drop(store);
        let v1 = to_version_1(&v2);
        lineage::write_file(&root, &v1).unwrap();
        let store = Store::open(&root, &OpenOptions::default()).unwrap();
        let ix = store.lineage_index().unwrap();
        assert_eq!(ix.bytes(), &v1[..]);
        ix.verify().unwrap();
        for (pos, id) in ids.iter().enumerate().take(30) {
            let p = ix.lookup(id).unwrap().unwrap();
            assert_eq!(ix.id(p), Some(*id), "{pos}");
        }
        // Gc's filter needs version 2.
        assert!(lineage::filtered(&ix, &|_| true).is_none());
        drop(ix);
        check_same(&store, &ids, seed, "a version-1 file");
        for _ in 0..10 {
            let a = ids[rng.below(ids.len() as u64) as usize];
            let (by_ids, by_nodes) = both_logs(&store, &[a], Follow::All);
            assert_eq!(by_ids, by_nodes);
            assert_eq!(by_ids, both_logs(store.odb(), &[a], Follow::All).0);
        }
        assert!(store.take_recovery_notes().is_empty());
        // The next rewrite: version 2, as a fresh build.
        let stats = store.refresh_lineage().unwrap().unwrap();
        assert!(stats.written);
        assert_eq!(stats.reused, ids.len());
        assert_eq!(std::fs::read(lineage::path_in(&root)).unwrap(), v2);
        // And gc, from a version-1 file, builds the same.
        lineage::write_file(&root, &v1).unwrap();
        let store = Store::open(&root, &OpenOptions::default()).unwrap();
        store
            .gc(&GcOptions {
                prune: Prune::Now,
                ..GcOptions::default()
            })
            .unwrap();
        assert_eq!(std::fs::read(lineage::path_in(&root)).unwrap(), v2);
    }
}

/// Lookups in large fan-out ranges (the search interpolates there): every
/// id is found at its position, and ids the file lacks are not, whether the
/// ids are uniform (hashes) or crowd the bytes interpolation reads.
#[test]
fn lookups_find_every_id_in_large_files() {
    for crowded in [false, true] {
        let mut facts = std::collections::BTreeMap::new();
        let mut prev: Option<ObjectId> = None;
        let id_of = |k: u32| {
            let mut b = *blake3::hash(&k.to_le_bytes()).as_bytes();
            if crowded {
                b[0] &= 0x03;
                b[1..9].fill(0x7f * (k % 3) as u8);
            }
            ObjectId::from_bytes(b)
        };
        for k in 0..20_000u32 {
            let id = id_of(k);
            let parents: Vec<ObjectId> = prev.filter(|_| k % 50 != 0).into_iter().collect();
            facts.insert(
                id,
                lineage::SessionFacts {
                    parents,
                    created_at: i64::from(k),
                    conversation: id,
                    messages: 0,
                },
            );
            prev = Some(id);
        }
        let ix =
            LineageIndex::from_bytes("big.lgi".into(), lineage::build(&facts).unwrap()).unwrap();
        assert_eq!(ix.len(), facts.len());
        for pos in 0..ix.len() as u32 {
            let id = ix.id(pos).unwrap();
            assert_eq!(ix.lookup(&id).unwrap(), Some(pos), "crowded {crowded}");
        }
        for k in 20_000..21_000u32 {
            assert_eq!(ix.lookup(&id_of(k)).unwrap(), None, "crowded {crowded}");
        }
    }
}
