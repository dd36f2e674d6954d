//! fsck and damaged derived files (the lineage index, index tables): a
//! reader does not read their checksums, for speed, so fsck must, every
//! time and not only with --full; and a record that does not decode is a
//! problem fsck lists (exit 3, "a reindex rebuilds it"), with the rest
//! checked around it, not an error that ends the check (exit 1).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::path::Path;

use serde_json::json;
use sessctl_store::fsck::{FsckOptions, FsckReport};
use sessctl_store::odb::RepackOptions;
use sessctl_store::{Durability, Error, Messages, OpenOptions, Store, Turn};

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

/// A store of a few conversations, repacked (a lineage index) and
/// reindexed (an index table).
fn store(root: &Path) {
    let s = Store::init(root).unwrap();
    for c in 0..6 {
        let name = format!("conversation-{c}");
        let (_, mut head) = s
            .create(Some(&name), turn(&format!("{c} start")), Durability::NoSync)
            .unwrap();
        for t in 0..4 {
            head = s
                .commit(
                    &name,
                    Some(head),
                    turn(&format!("{c} {t}")),
                    Durability::NoSync,
                )
                .unwrap();
        }
    }
    s.repack(&RepackOptions::default()).unwrap();
    s.reindex().unwrap();
}

fn fsck(root: &Path) -> sessctl_store::Result<FsckReport> {
    Store::open(root, &OpenOptions::default())
        .unwrap()
        .fsck(&FsckOptions { full: false }, &mut |_, _| {})
}

#[test]
fn a_flipped_bit_in_the_lineage_index_is_found_without_full() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    store(&root);
    assert!(fsck(&root).unwrap().problems.is_empty());
    let path = root.join("lineage/graph.lgi");
    let good = std::fs::read(&path).unwrap();
    // A byte of the records, past the structure a reader checks on open.
    let mut bad = good.clone();
    let at = good.len() - 40;
    bad[at] ^= 2;
    std::fs::write(&path, &bad).unwrap();
    let r = fsck(&root).unwrap();
    assert!(
        r.problems.iter().any(|p| p.contains("graph.lgi")),
        "{:?}",
        r.problems
    );
}

#[test]
fn an_unreadable_index_record_is_a_problem_not_the_end_of_fsck() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("s");
    store(&root);
    let table = std::fs::read_dir(root.join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "sit"))
        .expect("an index table");
    let good = std::fs::read(&table).unwrap();
    // Find a flipped bit that leaves a record undecodable (which bytes
    // hold records depends on what the store holds).
    let probe = dir.path().join("probe");
    for at in (64..good.len()).step_by(7) {
        let _ = std::fs::remove_dir_all(&probe);
        support::copy_dir(&root, &probe);
        let mut bad = good.clone();
        bad[at] ^= 1;
        std::fs::write(probe.join("index").join(table.file_name().unwrap()), &bad).unwrap();
        let s = Store::open(&probe, &OpenOptions::default()).unwrap();
        if !matches!(s.conversations(None), Err(Error::Index(_))) {
            continue;
        }
        let r = fsck(&probe).unwrap_or_else(|e| panic!("byte {at}: fsck ended with {e}"));
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("a reindex rebuilds it")),
            "byte {at}: {:?}",
            r.problems
        );
        return;
    }
    panic!("no flipped bit of the table left a record undecodable: the test tests nothing");
}
