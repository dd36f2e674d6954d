//! Several handles on one store, as several processes hold them: each
//! `Store::open` has its own lock files, journal view and index overlay, so
//! two handles in one test process behave as two processes do (the
//! multi-process tests with the real binary are in cli/tests/concurrency.rs).
//! The behaviour tests run on a local store and on a remote one
//! (`name::local`, `name::remote`); the tests of a local store's journal
//! segments and index tables run locally only and say so.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use std::path::{Path, PathBuf};

use serde_json::json;
use sessctl_store::index::TABLE_EVERY;
use sessctl_store::{Durability, Error, Messages, OpenOptions, Store, Turn};

fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    Store::init(&path).unwrap();
    (dir, path)
}

fn open(path: &Path) -> Store {
    Store::open(path, &OpenOptions::default()).unwrap()
}

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

/// Two handles commit to one conversation, each continuing the head it
/// read: the second to write loses its compare-and-swap, as it would in
/// another process, and wins once it reads the new head.
fn a_race_between_handles_is_lost_by_one_with_ref_out_of_date(be: &Backend) {
    let (a, b) = (be.open(), be.open());
    let (_, root) = a.create(Some("c"), turn("hi"), Durability::Sync).unwrap();
    // b reads the head a wrote, without reopening.
    assert_eq!(b.resolve_rev("c").unwrap(), root);
    let from_a = a
        .commit("c", Some(root), turn("a"), Durability::Sync)
        .unwrap();
    let err = b
        .commit("c", Some(root), turn("b"), Durability::Sync)
        .unwrap_err();
    assert!(matches!(err, Error::RefOutOfDate { .. }), "{err}");
    let from_b = b
        .commit("c", Some(from_a), turn("b"), Durability::Sync)
        .unwrap();
    for s in [&a, &b, &be.open()] {
        assert_eq!(s.resolve_rev("c").unwrap(), from_b);
        let info = s.conversation("c").unwrap().unwrap();
        assert_eq!((info.sessions, info.messages), (3, 3));
    }
}

/// A handle that only reads, kept open while another writes many
/// operations, answers as a fresh one does, and takes up the tables the
/// writer folded its operations into instead of holding them all itself.
fn a_long_lived_reader_follows_the_writers_tables(b: &Backend) {
    let reader = b.open_with(&OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    });
    let writer = b.open();
    let n = TABLE_EVERY as usize * 3;
    for i in 0..n {
        writer
            .create(
                Some(&format!("c{i:04}")),
                turn(&format!("m{i}")),
                Durability::NoSync,
            )
            .unwrap();
        if i % 100 == 0 {
            // The reader looks now and then, as a runtime would.
            reader.conversations(Some(1)).unwrap();
        }
    }
    // A local store's index folds operations into table files (a remote
    // one keeps its index keys in PostgreSQL).
    if !b.is_remote() {
        assert!(
            !writer.index().tables().is_empty(),
            "the writer wrote tables"
        );
    }
    let newest = reader.conversations(Some(5)).unwrap();
    assert_eq!(newest, writer.conversations(Some(5)).unwrap());
    assert_eq!(newest[0].name, format!("c{:04}", n - 1));
    if !b.is_remote() {
        assert!(
            !reader.index().tables().is_empty(),
            "the reader took up the writer's tables"
        );
    }
    assert_eq!(reader.conversations(None).unwrap().len(), n);
}

/// A run claimed through one handle is busy for every other; once the
/// claiming handle is gone (as a process that died), the claim is stale:
/// the next claim fails it in the same operation, and a writable open
/// fails the rest.
fn a_run_claim_lives_as_long_as_its_holder(be: &Backend) {
    let a = be.open();
    a.create(Some("c"), turn("hi"), Durability::Sync).unwrap();
    a.create(Some("d"), turn("hi"), Durability::Sync).unwrap();
    let run = a.begin_run("c").unwrap();
    let _other = a.begin_run("d").unwrap();
    let b = be.open();
    assert!(matches!(b.begin_run("c"), Err(Error::Busy { .. })));
    assert_eq!(b.running("c").unwrap().map(|c| c.run), Some(run.id));
    // A local claim is a lock file (a remote one an advisory lock).
    let lock = |id| be.path().map(|p| p.join("runs").join(format!("{id}.lock")));
    if let Some(l) = lock(run.id) {
        assert!(l.exists());
    }
    drop(a);
    // Its process is gone: nothing holds the claim's lock.
    assert_eq!(b.running("c").unwrap(), None);
    let next = b.begin_run("c").unwrap();
    assert_ne!(next.id, run.id);
    b.commit_run(&next, turn("done"), false, Durability::Sync)
        .unwrap();
    assert_eq!(b.running("c").unwrap(), None);
    if let Some(l) = lock(next.id) {
        assert!(!l.exists());
    }
    // The claim on d: failed by the next writable open, with a note.
    let c = be.open();
    let notes = c.take_recovery_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("on d") && n.contains("marked failed")),
        "{notes:?}"
    );
    assert_eq!(c.index().claims().unwrap(), vec![]);
}

/// A handle that sat idle while others wrote enough to seal its newest
/// segment and the next, and packed both away: its next write goes to the
/// newest segment, not to the file it still holds open (which no one reads
/// any more), and nothing another handle wrote meanwhile is missed.
// Local only: journal segments of a store directory.
#[test]
fn an_idle_handle_writes_to_the_newest_segment_after_others_packed_its_own() {
    let (_d, path) = new_store();
    let small = OpenOptions {
        segment_target: 4 << 10,
        ..OpenOptions::default()
    };
    let idle = Store::open(&path, &small).unwrap();
    let busy = Store::open(&path, &small).unwrap();
    idle.create(Some("idle"), turn("first"), Durability::NoSync)
        .unwrap();
    let mut last = None;
    for i in 0..200 {
        let text = format!("turn {i} {}", "x".repeat(300));
        last = Some(if i == 0 {
            busy.create(Some("busy"), turn(&text), Durability::NoSync)
                .unwrap()
                .1
        } else {
            busy.commit("busy", None, turn(&text), Durability::NoSync)
                .unwrap()
        });
    }
    let stats = busy.odb().stats().unwrap();
    assert!(stats.packs >= 1, "{stats:?}");
    let id = idle
        .commit("idle", None, turn("second"), Durability::Sync)
        .unwrap();
    let fresh = open(&path);
    assert_eq!(fresh.resolve_rev("idle").unwrap(), id);
    assert_eq!(fresh.resolve_rev("busy").unwrap(), last.unwrap());
    assert_eq!(fresh.odb().load_messages(&id).unwrap().len(), 2);
    assert_eq!(fresh.take_recovery_notes(), Vec::<String>::new());
    assert!(fresh.verify_chains().unwrap().is_empty());
}

/// A handle that keeps up in the background: the writes that seal
/// segments or make a table due leave that work to a thread, which does it
/// all in the end (once the handle waits for it, or is dropped); every
/// write stands, and a handle that goes back to upkeep in its writes
/// carries on.
// Local only: journal segments packed and index table files on disk.
#[test]
fn a_handle_that_keeps_up_in_the_background_packs_and_writes_tables() {
    let (_d, path) = new_store();
    let small = OpenOptions {
        segment_target: 4 << 10,
        ..OpenOptions::default()
    };
    let s = Store::open(&path, &small).unwrap();
    s.set_background_upkeep(true);
    let (_, mut last) = s
        .create(Some("bg"), turn("first"), Durability::Sync)
        .unwrap();
    for i in 0..200 {
        let text = format!("turn {i} {}", "x".repeat(300));
        last = s
            .commit("bg", Some(last), turn(&text), Durability::Sync)
            .unwrap();
    }
    s.finish_upkeep();
    // A write after the thread ended packs what is left.
    last = s
        .commit("bg", Some(last), turn("one more"), Durability::Sync)
        .unwrap();
    s.finish_upkeep();
    let stats = s.odb().stats().unwrap();
    assert!(stats.packs >= 1, "{stats:?}");
    assert!(
        stats.journal_segments <= 2,
        "every sealed segment is packed: {stats:?}"
    );
    assert_eq!(s.take_recovery_notes(), Vec::<String>::new());
    let tables = std::fs::read_dir(path.join("index"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "sit")
        })
        .count();
    assert!(
        tables >= 1,
        "the index's overlay went to tables ({TABLE_EVERY} ops each)"
    );

    // Dropped while a thread may still pack: the next handle finds it all.
    for i in 0..50 {
        let text = format!("late {i} {}", "y".repeat(300));
        last = s
            .commit("bg", Some(last), turn(&text), Durability::Sync)
            .unwrap();
    }
    drop(s);
    let fresh = open(&path);
    assert_eq!(fresh.resolve_rev("bg").unwrap(), last);
    assert_eq!(fresh.odb().load_messages(&last).unwrap().len(), 252);
    assert_eq!(fresh.take_recovery_notes(), Vec::<String>::new());
    assert!(fresh.verify_chains().unwrap().is_empty());
    fresh.set_background_upkeep(false);
    fresh
        .commit("bg", Some(last), turn("in the write"), Durability::Sync)
        .unwrap();
    assert!(fresh.odb().stats().unwrap().journal_segments <= 2);
}

two_backends!(
    a_race_between_handles_is_lost_by_one_with_ref_out_of_date,
    a_long_lived_reader_follows_the_writers_tables,
    a_run_claim_lives_as_long_as_its_holder,
);
