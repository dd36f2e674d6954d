//! gc and fsck through the public API: each behaviour test on a local
//! store and on a remote one (`name::local`, `name::remote`); the tests of
//! the local layout on disk (pack blocks, the gc ledger) run locally only
//! and say so.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

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
fn populated(b: &Backend) -> (Store, Vec<ObjectId>, Vec<ObjectId>) {
    let store = b.open();
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

fn recent_ref_log_entries_keep_deleted_work_alive(b: &Backend) {
    let (store, live, deleted) = populated(b);
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

fn unreachable_objects_go_only_past_the_grace_period(b: &Backend) {
    let (store, live, deleted) = populated(b);
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
    let store = b.open();
    assert_eq!(store.conversation("main").unwrap().unwrap().messages, 4);
}

fn the_grace_period_counts_from_when_gc_first_saw_the_object(b: &Backend) {
    let (store, _, deleted) = populated(b);
    let opts = GcOptions {
        reflog_expiry_ms: 0,
        prune: Prune::OlderThan(3_600_000),
        ..GcOptions::default()
    };
    assert_eq!(store.gc(&opts).unwrap().kept_young, 4);
    // gc rewrote the pack; the objects are not younger for it. (A local
    // store keeps when gc first saw each in the file gc.ledger.)
    if let Some(path) = b.path() {
        let ledger = std::fs::read(path.join("gc.ledger")).unwrap();
        assert_eq!(ledger.len(), 4 * 40);
    }
    let report = store
        .gc(&GcOptions {
            prune: Prune::Before(sessctl_store::time::now_ms() + 1),
            ..opts
        })
        .unwrap();
    assert_eq!(report.pruned, 4, "{report:?}");
    assert!(!store.odb().contains(&deleted[0]).unwrap());
}

fn fsck_names_what_is_wrong_and_lists_dangling_sessions(b: &Backend) {
    let store = b.open();
    store
        .create(Some("main"), turn("hello"), Durability::Sync)
        .unwrap();
    let report = fsck(&store, true);
    assert!(report.is_clean(), "{:?}", report.problems);
    assert!(report.dangling.is_empty());

    // A session written without a ref is dangling, not a problem.
    let mut batch = WriteBatch::new();
    let lonely = batch.session(&Session::new_root(5)).unwrap();
    // One that names a parent and a message the store lacks is a problem.
    let mut broken = Session::new_root(6);
    let ghost = ObjectId::from_bytes([7; 32]);
    broken.parents = vec![ghost];
    broken.messages.base = 0;
    broken.messages.added = vec![ObjectId::from_bytes([8; 32])];
    let broken = batch.session(&broken).unwrap();
    store.odb().write(&batch, Durability::Sync).unwrap();
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
}

// Local only: flips a byte of a pack file on disk.
#[test]
fn fsck_names_a_flipped_byte_in_a_pack() {
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

fn a_kept_young_session_keeps_the_old_blobs_it_names(b: &Backend) {
    let store = b.open();
    store
        .create(Some("main"), turn("hello"), Durability::Sync)
        .unwrap();
    let mut batch = WriteBatch::new();
    let old_blob = batch.blob(&json!("an old, unreachable message")).unwrap();
    store.odb().write(&batch, Durability::Sync).unwrap();
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
    let mut batch = WriteBatch::new();
    let young = batch.session(&s).unwrap();
    store.odb().write(&batch, Durability::Sync).unwrap();
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

/// The blocks of every pack in `store/packs`: (pack file, compressed bytes,
/// decompressed bytes), read by the layout of objects-format.md ("Pack
/// index"), not through the library.
fn pack_blocks(store: &Path) -> Vec<(PathBuf, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(store.join("packs")).unwrap() {
        let idx_path = e.unwrap().path();
        if idx_path.extension().is_none_or(|e| e != "idx") {
            continue;
        }
        let pack_path = idx_path.with_extension("pack");
        let (idx, pack) = (
            std::fs::read(&idx_path).unwrap(),
            std::fs::read(&pack_path).unwrap(),
        );
        let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let version = u32_at(&idx, 4);
        let (n, k) = (u32_at(&idx, 8) as usize, u32_at(&idx, 12) as usize);
        // Version 1: a 16-byte header and 16-byte block entries; version 2:
        // a 24-byte header, 20-byte block entries naming a dictionary, and
        // the dictionary table after them.
        let (header, entry) = if version == 1 { (16, 16) } else { (24, 20) };
        let blocks_at = header + 1024 + 44 * n;
        let dictionary = |d: usize| -> Vec<u8> {
            let at = blocks_at + entry * k + 48 * d;
            let (offset, len) = (u64_at(&idx, at) as usize, u32_at(&idx, at + 8) as usize);
            pack[offset..offset + len].to_vec()
        };
        for b in 0..k {
            let at = blocks_at + entry * b;
            let offset = u64_at(&idx, at) as usize;
            let (clen, rlen) = (
                u32_at(&idx, at + 8) as usize,
                u32_at(&idx, at + 12) as usize,
            );
            let dict = if version == 1 {
                0
            } else {
                u32_at(&idx, at + 16) as usize
            };
            let compressed = pack[offset..offset + clen].to_vec();
            let raw = if dict == 0 {
                zstd::bulk::decompress(&compressed, rlen).unwrap()
            } else {
                zstd::bulk::Decompressor::with_dictionary(&dictionary(dict - 1))
                    .unwrap()
                    .decompress(&compressed, rlen)
                    .unwrap()
            };
            out.push((pack_path.clone(), compressed, raw));
        }
    }
    out
}

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Many conversations packed in small blocks; some deleted. gc keeps
/// exactly what the others reach and no file of the store, pack blocks
/// inflated, holds a byte of a dropped message. Packed without a
/// dictionary, the blocks that lose nothing are copied as they were (their
/// compressed bytes, byte for byte); packed with one, which holds pieces
/// of the pack's records, every block of the pack is written again.
// Local only: reads the pack files' blocks on disk.
#[test]
fn gc_copies_clean_blocks_and_keeps_exactly_what_is_reachable() {
    gc_keeps_exactly_what_is_reachable(0);
    gc_keeps_exactly_what_is_reachable(4096);
}

fn gc_keeps_exactly_what_is_reachable(dictionary_size: usize) {
    use sessctl_store::odb::pack::PackOptions;
    let (_d, path) = new_store();
    let store = open(&path);
    let small = PackOptions {
        block_target: 2048,
        dictionary_size,
        ..PackOptions::default()
    };
    let text = |c: usize, t: usize| {
        let tag = if c % 4 == 1 { "DROPPEDTEXT" } else { "kept" };
        {
            let words: String = (0..24)
                .map(|k| format!("w{} ", (c * 31 + t * 7 + k * 13) % 97))
                .collect();
            format!("{tag} c{c} t{t} {words}{}", "lorem ipsum ".repeat(8))
        }
    };
    for c in 0..24 {
        let name = format!("c{c:02}");
        store
            .create(Some(&name), turn(&text(c, 0)), Durability::NoSync)
            .unwrap();
        for t in 1..12 {
            store
                .commit(&name, None, turn(&text(c, t)), Durability::NoSync)
                .unwrap();
        }
    }
    store
        .repack(&sessctl_store::RepackOptions { pack: small })
        .unwrap();
    let before: std::collections::BTreeSet<ObjectId> =
        store.odb().backend().ids().unwrap().into_iter().collect();
    let old_blocks = pack_blocks(&path);
    // The repack trained a dictionary when asked to (the version-2 index's
    // header says how many).
    let dictionaries: u32 = std::fs::read_dir(path.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .map(|p| {
            let idx = std::fs::read(p).unwrap();
            u32::from_le_bytes(idx[16..20].try_into().unwrap())
        })
        .sum();
    assert_eq!(dictionaries > 0, dictionary_size > 0);
    // What the deleted conversations alone hold: their sessions and blobs.
    let mut doomed = std::collections::BTreeSet::new();
    for c in (0..24).filter(|c| c % 4 == 1) {
        let name = format!("c{c:02}");
        let mut at = Some(store.conversation(&name).unwrap().unwrap().head.unwrap());
        while let Some(id) = at {
            doomed.insert(id);
            let s = store.odb().session(&id).unwrap();
            doomed.extend(s.blobs());
            at = s.first_parent();
        }
        store.delete(&name, Durability::NoSync).unwrap();
    }
    let r = store
        .gc(&GcOptions {
            prune: Prune::Now,
            reflog_expiry_ms: 0,
            pack: small,
            ..GcOptions::default()
        })
        .unwrap();
    assert_eq!(r.pruned, doomed.len());
    let after: std::collections::BTreeSet<ObjectId> =
        store.odb().backend().ids().unwrap().into_iter().collect();
    let want: std::collections::BTreeSet<ObjectId> = before.difference(&doomed).copied().collect();
    assert_eq!(after, want);
    for id in &after {
        store.odb().read(id).unwrap();
    }
    let report = fsck(&store, true);
    assert!(report.is_clean(), "{:?}", report.problems);
    // Blocks copied as they were, and blocks written again.
    let new_blocks = pack_blocks(&path);
    let copied = old_blocks
        .iter()
        .filter(|(_, c, _)| new_blocks.iter().any(|(_, n, _)| n == c))
        .count();
    if dictionary_size == 0 {
        assert!(
            copied > 0 && copied < old_blocks.len(),
            "{copied} of {}",
            old_blocks.len()
        );
    } else {
        assert_eq!(copied, 0, "of {}", old_blocks.len());
    }
    assert!(old_blocks
        .iter()
        .any(|(_, _, raw)| holds(raw, b"DROPPEDTEXT")));
    for (pack, _, raw) in &new_blocks {
        assert!(
            !holds(raw, b"DROPPEDTEXT"),
            "{} keeps dropped text",
            pack.display()
        );
    }
    for dir in ["index", "lineage", "packs", "oplog"] {
        for e in std::fs::read_dir(path.join(dir)).into_iter().flatten() {
            let p = e.unwrap().path();
            if p.is_file() {
                assert!(
                    !holds(&std::fs::read(&p).unwrap(), b"DROPPEDTEXT"),
                    "{}",
                    p.display()
                );
            }
        }
    }
}

/// A gc that drops nothing leaves a pack much larger than what is new
/// alone, and packs the new objects (geometric, as packing as writes go);
/// a second gc with nothing to do writes nothing.
// Local only: counts the pack files on disk.
#[test]
fn gc_leaves_a_large_pack_alone_when_it_drops_nothing_from_it() {
    let (_d, path) = new_store();
    let store = open(&path);
    store
        .create(Some("big"), turn("start"), Durability::NoSync)
        .unwrap();
    for t in 0..300 {
        store
            .commit("big", None, turn(&format!("turn {t}")), Durability::NoSync)
            .unwrap();
    }
    store.repack(&Default::default()).unwrap();
    let packs = |p: &Path| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(p.join("packs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".pack"))
            .collect()
    };
    let big = packs(&path);
    assert_eq!(big.len(), 1);
    store
        .commit("big", None, turn("one more"), Durability::NoSync)
        .unwrap();
    let opts = GcOptions {
        prune: Prune::Now,
        ..GcOptions::default()
    };
    let r = store.gc(&opts).unwrap();
    assert_eq!(r.pruned, 0);
    let now = packs(&path);
    assert_eq!(now.len(), 2, "{now:?}");
    assert!(big.is_subset(&now));
    let r = store.gc(&opts).unwrap();
    assert_eq!((r.pruned, r.bytes_after), (0, r.bytes_before));
    assert_eq!(packs(&path), now);
    assert!(fsck(&store, true).is_clean());
}

/// fsck reads blocks in parallel and still names each damaged object as a
/// read of it would, in two different blocks.
// Local only: flips bytes of a pack file on disk.
#[test]
fn fsck_names_damage_in_two_blocks_as_reads_do() {
    use sessctl_store::odb::pack::PackOptions;
    let (_d, path) = new_store();
    let store = open(&path);
    for t in 0..4 {
        let name = format!("c{t}");
        store
            .create(Some(&name), turn(&"words ".repeat(300)), Durability::NoSync)
            .unwrap();
        for k in 0..20 {
            store
                .commit(
                    &name,
                    None,
                    turn(&format!("{k} {}", "more ".repeat(200))),
                    Durability::NoSync,
                )
                .unwrap();
        }
    }
    store
        .repack(&sessctl_store::RepackOptions {
            pack: PackOptions {
                block_target: 4096,
                ..PackOptions::default()
            },
        })
        .unwrap();
    drop(store);
    let blocks = pack_blocks(&path);
    assert!(blocks.len() >= 4);
    let pack = blocks[0].0.clone();
    let mut bytes = std::fs::read(&pack).unwrap();
    // A byte in the middle of the second block and of the second to last.
    for (_, c, _) in [&blocks[1], &blocks[blocks.len() - 2]] {
        let at = bytes.windows(c.len()).position(|w| w == &c[..]).unwrap();
        bytes[at + c.len() / 2] ^= 0x10;
    }
    std::fs::write(&pack, bytes).unwrap();
    let store = open(&path);
    let report = fsck(&store, false);
    // Each problem a read of the object gives, word for word.
    let mut expected: Vec<String> = Vec::new();
    for id in store.odb().backend().ids_in_storage_order().unwrap() {
        if let Err(e) = store.odb().read(&id) {
            expected.push(e.to_string());
        }
    }
    assert!(expected.len() >= 2, "{expected:?}");
    let found: Vec<&String> = report
        .problems
        .iter()
        .filter(|p| p.contains("is corrupt"))
        .collect();
    let mut a: Vec<&String> = expected.iter().collect();
    let mut b = found.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert!(report
        .problems
        .iter()
        .any(|p| p.contains("block 1:") || p.contains("block 1 ")));
}

two_backends!(
    recent_ref_log_entries_keep_deleted_work_alive,
    unreachable_objects_go_only_past_the_grace_period,
    the_grace_period_counts_from_when_gc_first_saw_the_object,
    fsck_names_what_is_wrong_and_lists_dangling_sessions,
    a_kept_young_session_keeps_the_old_blobs_it_names,
);
