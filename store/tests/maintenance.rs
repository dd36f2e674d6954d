//! gc and fsck through the public API.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};

use serde_json::json;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::{GcOptions, Prune};
use sessctl_store::{
    Durability, ForkOptions, Messages, ObjectId, OpenOptions, Session, Store, Turn, WriteBatch,
};

fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    drop(Store::init(&path).unwrap());
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

fn fsck(store: &Store, full: bool) -> sessctl_store::fsck::FsckReport {
    store.fsck(&FsckOptions { full }, &mut |_, _| {}).unwrap()
}

/// A store with a live conversation and a deleted fork whose sessions only
/// the ref log still names.
fn populated(path: &Path) -> (Store, Vec<ObjectId>, Vec<ObjectId>) {
    let store = open(path);
    let (_, root) = store
        .create(Some("main"), turn("hello"), Durability::NoSync)
        .unwrap();
    let a = store
        .commit("main", None, turn("more"), Durability::NoSync)
        .unwrap();
    store
        .fork(
            a,
            ForkOptions {
                name: Some("side".into()),
                ..ForkOptions::default()
            },
            Durability::NoSync,
        )
        .unwrap();
    let s1 = store
        .commit("side", None, turn("side one"), Durability::NoSync)
        .unwrap();
    let s2 = store
        .commit("side", None, turn("side two"), Durability::NoSync)
        .unwrap();
    store.delete("side", Durability::Sync).unwrap();
    // Deleting detached HEAD at side's head, which keeps it alive; move on.
    let b = store
        .commit("main", None, turn("back"), Durability::Sync)
        .unwrap();
    (store, vec![root, a, b], vec![s1, s2])
}

#[test]
fn recent_ref_log_entries_keep_deleted_work_alive() {
    let (_d, path) = new_store();
    let (store, live, deleted) = populated(&path);
    let report = store
        .gc(&GcOptions {
            prune: Prune::Now,
            ..GcOptions::default()
        })
        .unwrap();
    assert_eq!(report.pruned, 0, "{report:?}");
    for id in live.iter().chain(&deleted) {
        store.odb().load_messages(id).unwrap();
    }
    assert!(fsck(&store, true).is_clean());
}

#[test]
fn unreachable_objects_go_only_past_the_grace_period() {
    let (_d, path) = new_store();
    let (store, live, deleted) = populated(&path);
    let expired = GcOptions {
        reflog_expiry_ms: 0,
        ..GcOptions::default()
    };
    // Young: kept by the grace period.
    let report = store.gc(&expired).unwrap();
    assert_eq!((report.pruned, report.kept_young), (0, 4), "{report:?}");
    // A dry run with --prune=now says what would go and changes nothing.
    let dry = store
        .gc(&GcOptions {
            dry_run: true,
            prune: Prune::Now,
            ..expired
        })
        .unwrap();
    // Two sessions and their two messages.
    assert_eq!((dry.unreachable, dry.pruned), (4, 4), "{dry:?}");
    assert_eq!(dry.by_conversation.len(), 1, "{dry:?}");
    let (name, (n, bytes)) = dry.by_conversation.iter().next().unwrap();
    assert!(name.starts_with("(deleted) "), "{name}");
    assert_eq!((*n, *bytes), (4, dry.pruned_bytes));
    for id in &deleted {
        assert!(store.odb().contains(id).unwrap());
    }
    // For real.
    let report = store
        .gc(&GcOptions {
            prune: Prune::Now,
            ..expired
        })
        .unwrap();
    assert_eq!(report.pruned, 4);
    for id in &deleted {
        assert!(!store.odb().contains(id).unwrap());
    }
    for id in &live {
        store.odb().load_messages(id).unwrap();
    }
    let again = store
        .gc(&GcOptions {
            prune: Prune::Now,
            ..expired
        })
        .unwrap();
    assert_eq!((again.unreachable, again.pruned), (0, 0));
    let clean = fsck(&store, true);
    assert!(clean.is_clean(), "{:?}", clean.problems);
    // The store still works after gc, and reopens.
    store
        .commit("main", None, turn("after gc"), Durability::Sync)
        .unwrap();
    drop(store);
    let store = open(&path);
    assert_eq!(store.conversation("main").unwrap().unwrap().messages, 4);
}

#[test]
fn the_grace_period_counts_from_when_gc_first_saw_the_object() {
    let (_d, path) = new_store();
    let (store, _, deleted) = populated(&path);
    let opts = GcOptions {
        reflog_expiry_ms: 0,
        prune: Prune::OlderThan(3_600_000),
        ..GcOptions::default()
    };
    assert_eq!(store.gc(&opts).unwrap().kept_young, 4);
    // gc rewrote the pack; the objects are not younger for it.
    let ledger = std::fs::read(path.join("gc.ledger")).unwrap();
    assert_eq!(ledger.len(), 4 * 40);
    let report = store
        .gc(&GcOptions {
            prune: Prune::Before(sessctl_store::time::now_ms() + 1),
            ..opts
        })
        .unwrap();
    assert_eq!(report.pruned, 4, "{report:?}");
    assert!(!store.odb().contains(&deleted[0]).unwrap());
}

#[test]
fn fsck_names_what_is_wrong_and_lists_dangling_sessions() {
    let (_d, path) = new_store();
    let store = open(&path);
    store
        .create(Some("main"), turn("hello"), Durability::Sync)
        .unwrap();
    let report = fsck(&store, true);
    assert!(report.is_clean(), "{:?}", report.problems);
    assert!(report.dangling.is_empty());

    // A session written without a ref is dangling, not a problem.
    let mut b = WriteBatch::new();
    let lonely = b.session(&Session::new_root(5)).unwrap();
    // One that names a parent and a message the store lacks is a problem.
    let mut broken = Session::new_root(6);
    let ghost = ObjectId::from_bytes([7; 32]);
    broken.parents = vec![ghost];
    broken.messages.base = 0;
    broken.messages.added = vec![ObjectId::from_bytes([8; 32])];
    let broken = b.session(&broken).unwrap();
    store.odb().write(&b, Durability::Sync).unwrap();
    let report = fsck(&store, false);
    assert!(report.dangling.contains(&lonely), "{report:?}");
    assert!(report.dangling.contains(&broken), "{report:?}");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&broken.to_hex()) && p.contains("parent") && p.contains("missing")),
        "{:?}",
        report.problems
    );
    assert!(report
        .problems
        .iter()
        .any(|p| p.contains("message") && p.contains(&"08".repeat(32))));
    drop(store);

    // A flipped byte in a pack names the damaged object.
    let (_d2, path2) = new_store();
    let store = open(&path2);
    store
        .create(Some("main"), turn(&"words ".repeat(200)), Durability::Sync)
        .unwrap();
    store.odb().repack(&Default::default()).unwrap();
    drop(store);
    let pack = std::fs::read_dir(path2.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let mut bytes = std::fs::read(&pack).unwrap();
    let mid = 16 + (bytes.len() - 48) / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&pack, bytes).unwrap();
    let store = open(&path2);
    let report = fsck(&store, true);
    assert!(!report.is_clean());
    assert!(
        report.problems.iter().any(|p| p.contains("is corrupt")),
        "{:?}",
        report.problems
    );
}

#[test]
fn gc_in_memory_behaves_the_same() {
    let store = Store::in_memory().unwrap();
    store
        .create(Some("a"), turn("x"), Durability::Sync)
        .unwrap();
    let mut b = WriteBatch::new();
    b.blob(&json!("orphan")).unwrap();
    store.odb().write(&b, Durability::Sync).unwrap();
    let report = store
        .gc(&GcOptions {
            prune: Prune::Now,
            reflog_expiry_ms: 0,
            ..GcOptions::default()
        })
        .unwrap();
    assert_eq!(report.pruned, 1);
    assert_eq!(
        report.by_conversation.keys().collect::<Vec<_>>(),
        ["(no session)"]
    );
}

#[test]
fn a_kept_young_session_keeps_the_old_blobs_it_names() {
    let (_d, path) = new_store();
    let store = open(&path);
    store
        .create(Some("main"), turn("hello"), Durability::Sync)
        .unwrap();
    let mut b = WriteBatch::new();
    let old_blob = b.blob(&json!("an old, unreachable message")).unwrap();
    store.odb().write(&b, Durability::Sync).unwrap();
    let opts = GcOptions {
        reflog_expiry_ms: 0,
        prune: Prune::OlderThan(3_600_000),
        ..GcOptions::default()
    };
    assert_eq!(store.gc(&opts).unwrap().kept_young, 1);
    // Later a new (young) session names the old blob, with no ref yet.
    let t1 = sessctl_store::time::now_ms() + 1;
    std::thread::sleep(std::time::Duration::from_millis(20));
    let mut s = Session::new_root(9);
    s.messages.added = vec![old_blob];
    let mut b = WriteBatch::new();
    let young = b.session(&s).unwrap();
    store.odb().write(&b, Durability::Sync).unwrap();
    // Everything seen unreachable before t1 may go: the blob qualifies, but
    // the young session keeps it.
    let report = store
        .gc(&GcOptions {
            prune: Prune::Before(t1),
            ..opts
        })
        .unwrap();
    assert!(store.odb().contains(&young).unwrap(), "{report:?}");
    assert!(store.odb().contains(&old_blob).unwrap(), "{report:?}");
    assert!(fsck(&store, false).problems.is_empty());
}
