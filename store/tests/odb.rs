//! The object database through its public API, on disk and in memory. The
//! behaviour tests run on a local store and on a remote one
//! (`name::local`, `name::remote`); the tests of the local layout on disk
//! (journal frames and segments, torn tails, packs, bytes on disk) run
//! locally only and say so.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
mod support;
use backends::Backend;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;
use sessctl_store::odb::journal::{FRAME_HEADER_LEN, SEGMENT_HEADER_LEN};
use sessctl_store::{
    Durability, Error, MessageDelta, ObjectId, Odb, OpenOptions, RepackOptions, Session, WriteBatch,
};
use support::{message, write_chain, Rng};

fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    Odb::init(&path).unwrap();
    (dir, path)
}

fn open(path: &Path) -> Odb {
    Odb::open(path, &OpenOptions::default()).unwrap()
}

/// Opens the store and does what the next write does first: takes the
/// write lock, under which a torn tail is cut.
fn open_and_repair(path: &Path) -> Odb {
    let odb = open(path);
    drop(odb.backend().write_lock().unwrap());
    odb
}

fn only_segment(path: &Path) -> PathBuf {
    let mut segs: Vec<PathBuf> = fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    segs.sort();
    segs.pop().unwrap()
}

fn exercise_backend(odb: &Odb) {
    let ids = write_chain(odb, 7, 20, 3, Durability::Sync);
    let history = odb.history(ids.last().unwrap()).unwrap();
    assert_eq!(history.len(), 60);
    let mut rng = Rng::new(7);
    for (i, id) in history.iter().enumerate() {
        assert_eq!(odb.blob(id).unwrap(), message(&mut rng, i));
    }
    // Writing the same objects again stores nothing new.
    let mut b = WriteBatch::new();
    b.blob(&odb.blob(&history[0]).unwrap()).unwrap();
    assert_eq!(odb.write(&b, Durability::Sync).unwrap(), 0);
    // Kinds are checked.
    assert!(matches!(
        odb.session(&history[0]),
        Err(Error::WrongKind { .. })
    ));
    assert!(matches!(odb.blob(&ids[0]), Err(Error::WrongKind { .. })));
    let missing = ObjectId::from_bytes([0xee; 32]);
    assert!(matches!(odb.read(&missing), Err(Error::NotFound { .. })));
}

fn memory_and_disk_backends_behave_alike(b: &Backend) {
    exercise_backend(&Odb::in_memory());
    exercise_backend(b.open().odb());
}

// Local only: counts the packs, journal objects and bytes of a store
// directory (and 10,000 turns, each its own write).
#[test]
fn ten_thousand_turns_read_back_after_reopen_and_repack() {
    let (_d, path) = new_store();
    let odb = open(&path);
    let ids = write_chain(&odb, 1, 10_000, 1, Durability::NoSync);
    let tip = *ids.last().unwrap();
    let before = odb.load_messages(&tip).unwrap();
    assert_eq!(before.len(), 10_000);
    drop(odb);

    let odb = open(&path);
    assert_eq!(odb.load_messages(&tip).unwrap(), before);
    let stats = odb.repack(&RepackOptions::default()).unwrap();
    assert_eq!(stats.objects, 20_000);
    assert!(stats.bytes_after < stats.bytes_before, "{stats:?}");
    assert_eq!(odb.load_messages(&tip).unwrap(), before);
    drop(odb);

    let odb = open(&path);
    assert_eq!(odb.load_messages(&tip).unwrap(), before);
    let s = odb.stats().unwrap();
    assert_eq!((s.packs, s.journal_objects, s.pack_objects), (1, 0, 20_000));

    // A fork at message 5,000 that adds 10 messages costs those 10 messages.
    let fork_base = ids[4_999];
    let before_bytes = s.disk_bytes();
    let mut rng = Rng::new(99);
    let mut b = WriteBatch::new();
    let mut fork = Session::new_root(1_800_000_000_000);
    fork.parents = vec![fork_base];
    let added: Vec<ObjectId> = (0..10)
        .map(|i| b.blob(&message(&mut rng, i)).unwrap())
        .collect();
    let added_bytes: usize = added.len() * 1700;
    fork.messages = MessageDelta { base: 5_000, added };
    let fork_id = b.session(&fork).unwrap();
    odb.write(&b, Durability::Sync).unwrap();
    let grown = odb.stats().unwrap().disk_bytes() - before_bytes;
    eprintln!("fork of 10 messages grew the store by {grown} bytes (journal)");
    assert!(
        grown < 2 * added_bytes as u64 + 4096,
        "fork grew the store by {grown} bytes"
    );
    let h = odb.load_messages(&fork_id).unwrap();
    assert_eq!(h.len(), 5_010);
    assert_eq!(h[..5_000], before[..5_000]);
}

fn repack_keeps_every_object_byte_identical(b: &Backend) {
    let store = b.open();
    let odb = store.odb();
    write_chain(odb, 3, 50, 2, Durability::NoSync);
    write_chain(odb, 4, 30, 3, Durability::NoSync);
    let ids = odb.backend().ids().unwrap();
    let originals: Vec<_> = ids.iter().map(|id| odb.read(id).unwrap()).collect();
    odb.repack(&RepackOptions::default()).unwrap();
    write_chain(odb, 5, 10, 1, Durability::NoSync);
    odb.repack(&RepackOptions::default()).unwrap();
    drop(store);
    let store = b.open();
    let odb = store.odb();
    for o in &originals {
        assert_eq!(&odb.read(&o.id()).unwrap(), o);
    }
    assert_eq!(odb.stats().unwrap().packs, 1);
}

// Local only: cuts the journal segment on disk at every offset.
#[test]
fn torn_tail_at_every_offset_keeps_every_earlier_record() {
    let (_d, path) = new_store();
    let odb = open(&path);
    let ids = write_chain(&odb, 11, 5, 2, Durability::Sync);
    drop(odb);
    let seg = only_segment(&path);
    let full = frames_only(&fs::read(&seg).unwrap());
    // Find where the last frame starts by walking the frames.
    let mut pos = SEGMENT_HEADER_LEN as usize;
    let mut last_start = pos;
    while pos < full.len() {
        last_start = pos;
        let len = u32::from_le_bytes(full[pos..pos + 4].try_into().unwrap()) as usize;
        pos += FRAME_HEADER_LEN + len;
    }
    assert_eq!(pos, full.len());
    for cut in last_start..full.len() {
        fs::write(&seg, &full[..cut]).unwrap();
        let odb = open_and_repair(&path);
        let notes = odb.take_recovery_notes();
        if cut > last_start {
            assert!(
                notes.iter().any(|n| n.contains("torn write")),
                "cut {cut}: {notes:?}"
            );
        }
        for id in &ids[..4] {
            odb.session(id).unwrap();
            for m in odb.history(id).unwrap() {
                odb.blob(&m).unwrap();
            }
        }
        assert!(!odb.contains(&ids[4]).unwrap(), "cut {cut}");
        // The store accepts new writes where the torn frame was.
        let id = odb
            .put_blob(&json!({"after": cut}), Durability::Sync)
            .unwrap();
        drop(odb);
        let odb = open(&path);
        assert!(odb.take_recovery_notes().is_empty());
        assert_eq!(odb.blob(&id).unwrap(), json!({"after": cut}));
        drop(odb);
    }
    // Nothing was deleted on a guess: every cut tail was set aside.
    let torn = fs::read_dir(path.join("journal"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("torn-")
        })
        .count();
    assert!(torn >= 1);
}

/// Reads every object; returns how many failed. A read that succeeds must
/// return the original bytes.
fn read_all_checked(odb: &Odb, originals: &[sessctl_store::EncodedObject]) -> usize {
    let mut failed = 0;
    for o in originals {
        match odb.read(&o.id()) {
            Ok(got) => assert_eq!(&got, o, "wrong data returned for {}", o.id()),
            Err(_) => failed += 1,
        }
    }
    failed
}

// Local only: flips a byte of a journal segment on disk.
#[test]
fn a_flipped_byte_in_the_journal_is_detected_never_returned() {
    let (_d, path) = new_store();
    let odb = open(&path);
    write_chain(&odb, 21, 6, 2, Durability::Sync);
    let originals: Vec<_> = odb
        .backend()
        .ids()
        .unwrap()
        .iter()
        .map(|id| odb.read(id).unwrap())
        .collect();
    drop(odb);
    let seg = only_segment(&path);
    // The frames; the zeros written ahead after them are the next test's.
    let full = frames_only(&fs::read(&seg).unwrap());
    for at in 0..full.len() {
        let mut bad = full.clone();
        bad[at] ^= 0x40;
        fs::write(&seg, &bad).unwrap();
        let detected = match Odb::open(&path, &OpenOptions::default()) {
            Err(e) => {
                assert!(e.is_corruption(), "byte {at}: {e}");
                true
            }
            Ok(odb) => {
                let notes = odb.take_recovery_notes();
                let failed = read_all_checked(&odb, &originals);
                !notes.is_empty() || failed > 0
            }
        };
        assert!(
            detected,
            "flipped byte {at} of {} went unnoticed",
            full.len()
        );
        // Recovery may have set the tail aside; restore for the next round.
        fs::write(&seg, &full).unwrap();
    }
}

// Local only: flips a byte of a pack file on disk.
#[test]
fn a_flipped_byte_in_a_pack_is_detected_never_returned() {
    let (_d, path) = new_store();
    let odb = open(&path);
    write_chain(&odb, 31, 12, 2, Durability::NoSync);
    odb.repack(&RepackOptions::default()).unwrap();
    let originals: Vec<_> = odb
        .backend()
        .ids()
        .unwrap()
        .iter()
        .map(|id| odb.read(id).unwrap())
        .collect();
    drop(odb);
    let packs: Vec<PathBuf> = fs::read_dir(path.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(packs.len(), 2);
    for file in packs {
        let full = fs::read(&file).unwrap();
        for at in 0..full.len() {
            let mut bad = full.clone();
            bad[at] ^= 0x01;
            fs::write(&file, &bad).unwrap();
            let detected = match Odb::open(&path, &OpenOptions::default()) {
                Err(e) => {
                    assert!(e.is_corruption(), "{}: byte {at}: {e}", file.display());
                    true
                }
                Ok(odb) => {
                    let failed = read_all_checked(&odb, &originals);
                    failed > 0 || !pack_problems(&path).is_empty()
                }
            };
            assert!(
                detected,
                "{}: flipped byte {at} went unnoticed",
                file.display()
            );
        }
        fs::write(&file, &full).unwrap();
    }
}

fn pack_problems(path: &Path) -> Vec<String> {
    let dir = path.join("packs");
    let mut problems = Vec::new();
    for name in sessctl_store::odb::pack::list_packs(&dir).unwrap() {
        match sessctl_store::odb::pack::Pack::open(&dir, &name) {
            Ok(p) => problems.extend(p.verify()),
            Err(e) => problems.push(e.to_string()),
        }
    }
    problems
}

#[test]
fn prefixes_resolve_or_say_why_not() {
    let odb = Odb::in_memory();
    let mut ids = Vec::new();
    for i in 0..5000 {
        ids.push(odb.put_blob(&json!(i), Durability::NoSync).unwrap());
    }
    let id = ids[0];
    assert_eq!(odb.resolve(&id.to_hex()).unwrap(), id);
    assert_eq!(odb.resolve(&id.to_hex()[..12]).unwrap(), id);
    assert_eq!(odb.resolve(&id.to_hex().to_uppercase()[..12]).unwrap(), id);
    // With 5000 ids some 4-digit prefix is shared.
    let mut by4 = std::collections::HashMap::<String, Vec<ObjectId>>::new();
    for i in &ids {
        by4.entry(i.to_hex()[..4].to_owned()).or_default().push(*i);
    }
    let (p, shared) = by4.iter().find(|(_, v)| v.len() > 1).unwrap();
    match odb.resolve(p) {
        Err(e @ Error::AmbiguousPrefix { .. }) => {
            let msg = e.to_string();
            for c in shared {
                assert!(msg.contains(&c.to_hex()), "{msg}");
            }
        }
        other => panic!("{other:?}"),
    }
    let unknown = (0..=0xffffu32)
        .map(|n| format!("{n:04x}"))
        .find(|p| !by4.contains_key(p))
        .unwrap();
    assert!(matches!(
        odb.resolve(&unknown),
        Err(Error::UnknownPrefix { .. })
    ));
    assert!(odb
        .resolve("abc")
        .unwrap_err()
        .to_string()
        .contains("at least 4"));
    assert!(odb
        .resolve("wxyz")
        .unwrap_err()
        .to_string()
        .contains("hex digits"));
}

fn prefixes_resolve_across_journal_and_packs(be: &Backend) {
    let store = be.open();
    let odb = store.odb();
    let a = odb.put_blob(&json!("in a pack"), Durability::Sync).unwrap();
    odb.repack(&RepackOptions::default()).unwrap();
    let b = odb
        .put_blob(&json!("in the journal"), Durability::Sync)
        .unwrap();
    assert_eq!(odb.resolve(&a.to_hex()[..8]).unwrap(), a);
    assert_eq!(odb.resolve(&b.to_hex()[..8]).unwrap(), b);
}

fn handles_write_side_by_side_and_readers_need_no_lock(b: &Backend) {
    let (s1, s2) = (b.open(), b.open());
    let (odb, other) = (s1.odb(), s2.odb());
    let id = odb.put_blob(&json!({"x": 1}), Durability::Sync).unwrap();
    // The other handle reads what this one wrote, and writes beside it.
    assert_eq!(other.blob(&id).unwrap(), json!({"x": 1}));
    let id2 = other.put_blob(&json!({"x": 2}), Durability::Sync).unwrap();
    assert_eq!(odb.blob(&id2).unwrap(), json!({"x": 2}));
    // Both frames are in the one journal, in order, and a fresh open sees
    // them.
    let fresh = b.open();
    assert_eq!(fresh.odb().blob(&id).unwrap(), json!({"x": 1}));
    assert_eq!(fresh.odb().blob(&id2).unwrap(), json!({"x": 2}));
    let reader = b.open_with(&OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    });
    let reader = reader.odb();
    assert_eq!(reader.blob(&id).unwrap(), json!({"x": 1}));
    assert!(matches!(
        reader.put_blob(&json!(2), Durability::Sync),
        Err(Error::ReadOnly)
    ));
}

fn concurrent_durable_batches_share_syncs_and_all_land(b: &Backend) {
    let store = b.open();
    let odb = store.odb().clone();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let odb = odb.clone();
            std::thread::spawn(move || {
                (0..100)
                    .map(|i| {
                        odb.put_blob(&json!({"t": t, "i": i}), Durability::Sync)
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let ids: Vec<ObjectId> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    drop((odb, store));
    let store = b.open();
    let odb = store.odb();
    assert_eq!(odb.backend().ids().unwrap().len(), 800);
    for id in ids {
        odb.blob(&id).unwrap();
    }
}

// Local only: journal segments of a store directory.
#[test]
fn segments_rotate_and_stay_readable() {
    let (_d, path) = new_store();
    let opts = OpenOptions {
        segment_target: 8 << 10,
        auto_pack: false,
        ..OpenOptions::default()
    };
    let odb = Odb::open(&path, &opts).unwrap();
    let ids = write_chain(&odb, 41, 60, 2, Durability::NoSync);
    assert!(odb.stats().unwrap().journal_segments > 3);
    drop(odb);
    let odb = Odb::open(&path, &opts).unwrap();
    assert_eq!(odb.history(ids.last().unwrap()).unwrap().len(), 120);
    odb.repack(&RepackOptions::default()).unwrap();
    assert_eq!(odb.stats().unwrap().journal_segments, 1);
    assert_eq!(odb.load_messages(ids.last().unwrap()).unwrap().len(), 120);
}

// Local only: a directory that is not a store, and its FORMAT file.
#[test]
fn opening_what_is_not_a_store_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let err = Odb::open(&dir.path().join("nope"), &OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("is not a sessctl store"), "{err}");
    let (_d, path) = new_store();
    assert!(matches!(Odb::init(&path), Err(Error::AlreadyExists { .. })));
    fs::write(path.join("FORMAT"), "sessctl store format 99\n").unwrap();
    let err = Odb::open(&path, &OpenOptions::default()).unwrap_err();
    assert!(err.to_string().contains("format 99"), "{err}");
}

fn a_session_that_keeps_more_than_its_parent_has_is_corrupt_not_a_panic(be: &Backend) {
    let store = be.open();
    let odb = store.odb();
    let mut b = WriteBatch::new();
    let root = b.session(&Session::new_root(0)).unwrap();
    let mut child = Session::new_root(1);
    child.parents = vec![root];
    child.messages.base = 3;
    let child = b.session(&child).unwrap();
    odb.write(&b, Durability::Sync).unwrap();
    let err = odb.history(&child).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains(&child.to_hex()), "{err}");
}

// Local only: damages a frame of a journal segment on disk.
#[test]
fn a_damaged_frame_in_a_sealed_segment_costs_only_its_own_objects() {
    let (_d, path) = new_store();
    let opts = OpenOptions {
        segment_target: 1 << 10,
        auto_pack: false,
        ..OpenOptions::default()
    };
    let odb = Odb::open(&path, &opts).unwrap();
    let mut ids = Vec::new();
    for i in 0..40 {
        let mut b = WriteBatch::new();
        ids.push(b.blob(&json!({"i": i, "pad": "x".repeat(300)})).unwrap());
        odb.write(&b, Durability::NoSync).unwrap();
    }
    drop(odb);
    let mut segs: Vec<PathBuf> = fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segs.sort();
    assert!(segs.len() > 2);
    // Flip the last byte of the first frame's body in the first (sealed) segment.
    let mut bytes = fs::read(&segs[0]).unwrap();
    let body = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    bytes[16 + FRAME_HEADER_LEN + body - 1] ^= 0x55;
    fs::write(&segs[0], bytes).unwrap();
    let odb = Odb::open(&path, &opts).unwrap();
    let notes = odb.take_recovery_notes();
    assert!(
        notes.iter().any(|n| n.contains("verified one by one")),
        "{notes:?}"
    );
    let err = odb.read(&ids[0]).unwrap_err();
    assert!(
        err.is_corruption() && err.to_string().contains(&ids[0].to_hex()),
        "{err}"
    );
    for id in &ids[1..] {
        odb.read(id).unwrap();
    }
}

/// A segment file without the zeros written ahead after its frames.
fn frames_only(bytes: &[u8]) -> Vec<u8> {
    let end = support::frame_starts(bytes)
        .last()
        .map_or(SEGMENT_HEADER_LEN as usize, |&p| {
            p + FRAME_HEADER_LEN + u32::from_le_bytes(bytes[p..p + 4].try_into().unwrap()) as usize
        });
    assert!(bytes[end..].iter().all(|b| *b == 0));
    bytes[..end].to_vec()
}

// Local only: flips a bit of a journal segment on disk.
#[test]
fn a_flipped_bit_in_a_synced_frame_never_cuts_later_commits() {
    let (_d, path) = new_store();
    let odb = open(&path);
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            odb.put_blob(&json!({"i": i, "pad": "y".repeat(200)}), Durability::Sync)
                .unwrap(),
        );
    }
    drop(odb);
    let seg = only_segment(&path);
    let mut bytes = fs::read(&seg).unwrap();
    let starts = support::frame_starts(&bytes);
    // A bit of the second frame's body: it was synced before the third was written.
    bytes[starts[1] + FRAME_HEADER_LEN + 40] ^= 0x01;
    fs::write(&seg, &bytes).unwrap();
    let odb = open(&path);
    let notes = odb.take_recovery_notes();
    assert!(notes.iter().any(|n| n.contains("damaged")), "{notes:?}");
    assert!(!notes.iter().any(|n| n.contains("torn")), "{notes:?}");
    assert_eq!(
        fs::read(&seg).unwrap().len(),
        bytes.len(),
        "nothing was cut"
    );
    assert!(odb.read(&ids[1]).unwrap_err().is_corruption());
    for i in [0, 2, 3, 4] {
        odb.read(&ids[i]).unwrap();
    }
    // The store keeps working, and repack keeps the damaged segment.
    odb.put_blob(&json!("after"), Durability::Sync).unwrap();
    odb.repack(&RepackOptions::default()).unwrap();
    assert!(seg.exists(), "a segment with damage is never deleted");
    for i in [0, 2, 3, 4] {
        odb.read(&ids[i]).unwrap();
    }
}

// Local only: damages a journal segment on disk.
#[test]
fn a_bad_frame_in_an_unsynced_group_is_torn_with_everything_after_it() {
    let (_d, path) = new_store();
    let odb = open(&path);
    let first = odb.put_blob(&json!("synced"), Durability::Sync).unwrap();
    let mut later = Vec::new();
    for i in 0..4 {
        later.push(
            odb.put_blob(&json!({"unsynced": i}), Durability::NoSync)
                .unwrap(),
        );
    }
    drop(odb);
    let seg = only_segment(&path);
    let mut bytes = fs::read(&seg).unwrap();
    let starts = support::frame_starts(&bytes);
    assert_eq!(starts.len(), 5);
    // Damage the second frame: no later frame's watermark passes it (none
    // of them was synced), so it and all after it are a torn write.
    bytes[starts[1] + FRAME_HEADER_LEN + 2] ^= 0x01;
    fs::write(&seg, &bytes).unwrap();
    // A reader leaves the tail alone: it may be a write in progress.
    let reader = open(&path);
    assert!(!reader.contains(&later[0]).unwrap());
    assert_eq!(fs::read(&seg).unwrap().len(), bytes.len());
    let odb = open_and_repair(&path);
    let notes = odb.take_recovery_notes();
    assert!(notes.iter().any(|n| n.contains("torn write")), "{notes:?}");
    odb.read(&first).unwrap();
    for id in &later {
        assert!(!odb.contains(id).unwrap());
    }
    assert_eq!(fs::read(&seg).unwrap().len(), starts[1]);
}

// Local only: journal segments of a store directory.
#[test]
fn writes_pack_sealed_segments_so_the_journal_stays_one_segment() {
    let (_d, path) = new_store();
    let opts = OpenOptions {
        segment_target: 4 << 10,
        ..OpenOptions::default()
    };
    let odb = Odb::open(&path, &opts).unwrap();
    let ids = write_chain(&odb, 43, 400, 2, Durability::NoSync);
    let stats = odb.stats().unwrap();
    // Every write packed what rotation sealed before it.
    assert_eq!(stats.journal_segments, 1, "{stats:?}");
    // Geometric merging: a few packs, not one per segment.
    let total = stats.pack_objects + stats.journal_objects;
    assert!(
        stats.packs >= 2 && stats.packs <= 2 + (total as f64).log2() as usize,
        "{stats:?}"
    );
    drop(odb);
    let odb = Odb::open(&path, &opts).unwrap();
    assert_eq!(odb.load_messages(ids.last().unwrap()).unwrap().len(), 800);
    for id in &ids {
        odb.session(id).unwrap();
    }
}

#[test]
fn a_write_batch_refuses_values_too_deep_for_a_blob() {
    let mut v = serde_json::Value::Null;
    for _ in 0..300 {
        v = serde_json::Value::Array(vec![v]);
    }
    let mut b = sessctl_store::WriteBatch::new();
    assert!(b.blob(&v).is_err());
}

// Local only: the zeros written ahead in a journal segment.
#[test]
fn appends_write_into_the_zeros_written_ahead_without_growing_the_file() {
    let (_d, path) = new_store();
    let odb = open(&path);
    let first = odb.put_blob(&json!("first"), Durability::Sync).unwrap();
    let seg = only_segment(&path);
    let len = fs::metadata(&seg).unwrap().len();
    let bytes = fs::read(&seg).unwrap();
    assert!(
        frames_only(&bytes).len() < bytes.len(),
        "zeros follow the frame"
    );
    let later: Vec<ObjectId> = (0..20)
        .map(|i| {
            odb.put_blob(&json!({"later": i}), Durability::Sync)
                .unwrap()
        })
        .collect();
    // Each sync wrote blocks the file already had: its size stayed.
    assert_eq!(fs::metadata(&seg).unwrap().len(), len);
    drop(odb);
    let odb = open_and_repair(&path);
    assert!(odb.take_recovery_notes().is_empty());
    assert_eq!(fs::metadata(&seg).unwrap().len(), len, "nothing was cut");
    odb.read(&first).unwrap();
    for id in &later {
        odb.read(id).unwrap();
    }
    assert_eq!(support::frame_starts(&fs::read(&seg).unwrap()).len(), 21);
}

/// A frame can end fewer bytes before the end of the space written ahead
/// than a frame header takes: those zeros end the frames too, and the next
/// writer cuts nothing and sets nothing aside.
// Local only: writes into a journal segment on disk.
#[test]
fn fewer_zeros_than_a_header_after_the_last_frame_are_no_torn_write() {
    let (_d, path) = new_store();
    let odb = open(&path);
    let kept: Vec<ObjectId> = (0..3)
        .map(|i| odb.put_blob(&json!({"kept": i}), Durability::Sync).unwrap())
        .collect();
    drop(odb);
    let seg = only_segment(&path);
    let bytes = fs::read(&seg).unwrap();
    let end = frames_only(&bytes).len();
    for zeros in [1, 23] {
        fs::write(&seg, &bytes[..end + zeros]).unwrap();
        let odb = open_and_repair(&path);
        assert_eq!(
            odb.take_recovery_notes(),
            Vec::<String>::new(),
            "{zeros} zeros"
        );
        for id in &kept {
            odb.read(id).unwrap();
        }
        assert!(
            !fs::read_dir(path.join("journal")).unwrap().any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("torn-")),
            "{zeros} zeros: nothing set aside"
        );
        let after = odb
            .put_blob(&json!({"after": zeros}), Durability::Sync)
            .unwrap();
        drop(odb);
        let odb = open(&path);
        odb.read(&after).unwrap();
        for id in &kept {
            odb.read(id).unwrap();
        }
    }
}

// Local only: writes into a journal segment on disk.
#[test]
fn bytes_past_a_header_of_zeros_are_a_torn_write_cut_by_the_next_writer() {
    let (_d, path) = new_store();
    let odb = open(&path);
    let kept: Vec<ObjectId> = (0..3)
        .map(|i| odb.put_blob(&json!({"kept": i}), Durability::Sync).unwrap())
        .collect();
    drop(odb);
    let seg = only_segment(&path);
    let mut bytes = fs::read(&seg).unwrap();
    let end = frames_only(&bytes).len();
    // A power loss can keep a later block of a frame and lose its first:
    // zeros where its header was, its bytes further on.
    bytes[end + 5000] = 0x5a;
    fs::write(&seg, &bytes).unwrap();
    // A reader keeps to the frames and cuts nothing.
    let reader = open(&path);
    for id in &kept {
        reader.read(id).unwrap();
    }
    assert_eq!(fs::read(&seg).unwrap(), bytes);
    drop(reader);
    let odb = open_and_repair(&path);
    let notes = odb.take_recovery_notes();
    assert!(notes.iter().any(|n| n.contains("torn write")), "{notes:?}");
    assert_eq!(fs::metadata(&seg).unwrap().len(), end as u64);
    let set_aside = fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("torn-"))
        .unwrap();
    // Only the bytes up to the last that is not zero are kept.
    assert_eq!(
        fs::metadata(path.join("journal").join(set_aside))
            .unwrap()
            .len(),
        5001
    );
    for id in &kept {
        odb.read(id).unwrap();
    }
    let after = odb.put_blob(&json!("after"), Durability::Sync).unwrap();
    drop(odb);
    let odb = open(&path);
    assert!(odb.take_recovery_notes().is_empty());
    odb.read(&after).unwrap();
}

// Local only: zeroes a frame of a journal segment on disk.
#[test]
fn a_lost_synced_frame_before_zeros_is_damage_not_the_end() {
    let (_d, path) = new_store();
    let odb = open(&path);
    let ids: Vec<ObjectId> = (0..4)
        .map(|i| {
            odb.put_blob(&json!({"i": i, "pad": "z".repeat(300)}), Durability::Sync)
                .unwrap()
        })
        .collect();
    drop(odb);
    let seg = only_segment(&path);
    let mut bytes = fs::read(&seg).unwrap();
    let starts = support::frame_starts(&bytes);
    // The second frame reads back as zeros, as a block the disk lost would;
    // later frames say it had been synced.
    bytes[starts[1]..starts[2]].fill(0);
    fs::write(&seg, &bytes).unwrap();
    let odb = open_and_repair(&path);
    let notes = odb.take_recovery_notes();
    assert!(notes.iter().any(|n| n.contains("damaged")), "{notes:?}");
    assert!(!notes.iter().any(|n| n.contains("torn")), "{notes:?}");
    assert!(odb.read(&ids[1]).is_err());
    for i in [0, 2, 3] {
        odb.read(&ids[i]).unwrap();
    }
}

// Local only: journal segments of a store directory.
#[test]
fn a_sealed_segment_ends_with_its_last_frame() {
    let (_d, path) = new_store();
    let opts = OpenOptions {
        segment_target: 64 << 10,
        auto_pack: false,
        ..OpenOptions::default()
    };
    let odb = Odb::open(&path, &opts).unwrap();
    let ids = write_chain(&odb, 45, 100, 2, Durability::Sync);
    let mut segs: Vec<PathBuf> = fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    segs.sort();
    assert!(segs.len() > 2);
    for sealed in &segs[..segs.len() - 1] {
        let bytes = fs::read(sealed).unwrap();
        assert_eq!(frames_only(&bytes), bytes, "{}", sealed.display());
    }
    drop(odb);
    let odb = Odb::open(&path, &opts).unwrap();
    assert!(odb.take_recovery_notes().is_empty());
    assert_eq!(odb.history(ids.last().unwrap()).unwrap().len(), 200);
}

two_backends!(
    memory_and_disk_backends_behave_alike,
    repack_keeps_every_object_byte_identical,
    prefixes_resolve_across_journal_and_packs,
    handles_write_side_by_side_and_readers_need_no_lock,
    concurrent_durable_batches_share_syncs_and_all_land,
    a_session_that_keeps_more_than_its_parent_has_is_corrupt_not_a_panic,
);
