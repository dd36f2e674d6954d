//! fsck beside writers: a store other handles (other processes) write to
//! while fsck runs is checked as of one moment, and found clean. fsck
//! read the refs after the objects, so a ref moved during the scan named a
//! session the scan had not seen ("which is missing", exit 3), and the
//! ref log folded up to a later operation than the refs were read at ("the
//! operations say ...").
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::{Durability, Messages, OpenOptions, Store, Turn};

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

#[test]
fn fsck_beside_writers_finds_nothing_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let store = Store::init(&path).unwrap();
    for name in ["one", "two"] {
        store
            .create(Some(name), turn("start"), Durability::NoSync)
            .unwrap();
    }
    // Each writer makes a fixed number of commits; fsck runs over and over
    // until both are done (and at least a few times while they write).
    const COMMITS: usize = 150;
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for name in ["one", "two"] {
            let (path, done) = (&path, &done);
            s.spawn(move || {
                let w = Store::open(path, &OpenOptions::default()).unwrap();
                for n in 0..COMMITS {
                    w.commit(name, None, turn(&format!("{name} {n}")), Durability::NoSync)
                        .unwrap();
                }
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        let checker = Store::open(&path, &OpenOptions::default()).unwrap();
        let mut round = 0;
        while done.load(Ordering::SeqCst) < 2 || round < 3 {
            let report = checker
                .fsck(&FsckOptions::default(), &mut |_, _| {})
                .unwrap();
            assert!(
                report.problems.is_empty(),
                "round {round}: {:?}",
                report.problems
            );
            // A session a writer has stored and not yet named (its
            // operation not yet written) is dangling at that moment, and
            // may be listed: that is no problem.
            round += 1;
        }
    });
    let last = store.conversation("one").unwrap().unwrap();
    assert_eq!(
        store
            .odb()
            .load_messages(&last.head.unwrap())
            .unwrap()
            .len(),
        COMMITS + 1
    );
}
