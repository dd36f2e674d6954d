//! Torn write or damage, when every commit is made by a handle of its own,
//! as `sessctl commit` makes them: one process a commit, each with a
//! durable sync (objects-format.md, "Recovery"). A frame that a later
//! frame's watermark proves durable is damage: reported, naming its segment
//! and offset, and never cut. Only bytes after the last such proof may be
//! cut as a torn write, and they are set aside first.
// Local only: reads and damages journal segments on disk.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::odb::journal::FRAME_HEADER_LEN;
use sessctl_store::{Durability, Messages, ObjectId, OpenOptions, Store, Turn};

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

/// Conversations `c1`..`c5`, each created by a fresh handle with a durable
/// commit, as five `sessctl commit --new` processes would; returns the
/// sessions.
fn five_commits_by_five_handles() -> (tempfile::TempDir, PathBuf, Vec<ObjectId>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    Store::init(&path).unwrap();
    let ids = (1..=5)
        .map(|i| {
            let store = Store::open(&path, &OpenOptions::default()).unwrap();
            let name = format!("c{i}");
            let (_, id) = store
                .create(Some(&name), turn(&format!("turn {i}")), Durability::Sync)
                .unwrap();
            id
        })
        .collect();
    (dir, path, ids)
}

fn only_segment(path: &Path) -> PathBuf {
    let segs: Vec<PathBuf> = fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    assert_eq!(segs.len(), 1, "{segs:?}");
    segs.into_iter().next().unwrap()
}

fn body_len(bytes: &[u8], frame: usize) -> usize {
    u32::from_le_bytes(bytes[frame..frame + 4].try_into().unwrap()) as usize
}

fn watermark(bytes: &[u8], frame: usize) -> usize {
    u64::from_le_bytes(bytes[frame + 8..frame + 16].try_into().unwrap()) as usize
}

fn frames_end(bytes: &[u8]) -> usize {
    let last = *support::frame_starts(bytes).last().unwrap();
    last + FRAME_HEADER_LEN + body_len(bytes, last)
}

fn set_aside(path: &Path) -> Vec<String> {
    fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("torn-"))
        .collect()
}

/// Commits through a fresh handle, as the next `sessctl commit` would: it
/// takes the write lock, under which a torn tail is cut.
fn commit_after(path: &Path) -> (Vec<String>, ObjectId) {
    let store = Store::open(path, &OpenOptions::default()).unwrap();
    let mut notes = store.take_recovery_notes();
    let (_, id) = store
        .create(Some("after"), turn("after"), Durability::Sync)
        .unwrap();
    notes.extend(store.take_recovery_notes());
    (notes, id)
}

fn conversations(store: &Store) -> Vec<String> {
    let mut names: Vec<String> = store
        .conversations(None)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    names.sort();
    names
}

#[test]
fn each_handles_frame_claims_every_frame_it_found_as_durable() {
    let (_d, path, _) = five_commits_by_five_handles();
    let bytes = fs::read(only_segment(&path)).unwrap();
    let starts = support::frame_starts(&bytes);
    assert_eq!(starts.len(), 5);
    // Each handle synced what it found before it appended: its frame's
    // watermark is the frame's own start.
    let marks: Vec<usize> = starts.iter().map(|&s| watermark(&bytes, s)).collect();
    assert_eq!(marks, starts);
}

#[test]
fn a_flipped_bit_in_an_acknowledged_frame_is_damage_and_nothing_is_cut() {
    let (_d, path, ids) = five_commits_by_five_handles();
    let seg = only_segment(&path);
    let seg_name = seg.file_name().unwrap().to_string_lossy().into_owned();
    let mut bytes = fs::read(&seg).unwrap();
    let starts = support::frame_starts(&bytes);
    let end = frames_end(&bytes);
    // Byte 1000, as the tester flipped it: in c2's frame, which c3's
    // handle found and synced before it appended.
    let bad = 1000;
    assert!(starts[1] + FRAME_HEADER_LEN <= bad && bad < starts[2]);
    bytes[bad] ^= 0x01;
    fs::write(&seg, &bytes).unwrap();

    // Opening says what is damaged, naming the segment and where.
    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    let notes = store.take_recovery_notes();
    assert!(
        notes.iter().any(|n| n.contains("damaged")
            && n.contains(&seg_name)
            && n.contains(&format!("at byte {}", starts[1]))),
        "{notes:?}"
    );
    assert!(!notes.iter().any(|n| n.contains("torn")), "{notes:?}");
    // Reading c2's session, which the flipped bit lies in, is an error
    // naming it and the segment.
    let err = store.odb().session(&ids[1]).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(
        err.to_string().contains(&ids[1].to_hex()) && err.to_string().contains(&seg_name),
        "{err}"
    );
    // The commits after it are all there.
    for (i, id) in ids.iter().enumerate().skip(2) {
        store.odb().session(id).unwrap();
        assert_eq!(store.resolve_rev(&format!("c{}", i + 1)).unwrap(), *id);
    }
    drop(store);

    // fsck reports it (the CLI exits 3), naming the segment.
    let store = Store::open(
        &path,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    let report = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.contains(&seg_name) && p.contains("damaged")),
        "{report:?}"
    );
    drop(store);

    // The next writer cuts nothing and sets nothing aside.
    let (notes, after) = commit_after(&path);
    assert!(!notes.iter().any(|n| n.contains("torn")), "{notes:?}");
    let now = fs::read(&seg).unwrap();
    assert_eq!(now[..end], bytes[..end], "nothing was cut or rewritten");
    assert_eq!(support::frame_starts(&now).len(), 6);
    assert!(set_aside(&path).is_empty());
    assert!(!path.join("recovery.log").exists());

    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    let names = conversations(&store);
    for want in ["after", "c1", "c3", "c4", "c5"] {
        assert!(names.iter().any(|n| n == want), "{want}: {names:?}");
    }
    store.odb().session(&after).unwrap();
    for id in ids.iter().skip(2) {
        store.odb().session(id).unwrap();
    }
    let report = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(!report.is_clean(), "{report:?}");
}

#[test]
fn a_last_frame_cut_short_is_still_a_torn_write() {
    let (_d, path, ids) = five_commits_by_five_handles();
    let seg = only_segment(&path);
    let bytes = fs::read(&seg).unwrap();
    let starts = support::frame_starts(&bytes);
    let end = frames_end(&bytes);
    // A crash during the last append: part of its frame reached the disk.
    let cut = starts[4] + (end - starts[4]) / 2;
    fs::write(&seg, &bytes[..cut]).unwrap();

    // A reader leaves it alone (it may be a write in progress).
    let reader = Store::open(&path, &OpenOptions::default()).unwrap();
    assert!(!reader.odb().contains(&ids[4]).unwrap());
    assert_eq!(fs::metadata(&seg).unwrap().len(), cut as u64);
    drop(reader);

    let (notes, after) = commit_after(&path);
    assert!(notes.iter().any(|n| n.contains("torn write")), "{notes:?}");
    let kept = set_aside(&path);
    assert_eq!(kept, [format!("torn-0000000000000001-{}.bin", starts[4])]);
    assert_eq!(
        fs::read(path.join("journal").join(&kept[0])).unwrap(),
        bytes[starts[4]..cut]
    );
    let now = fs::read(&seg).unwrap();
    assert_eq!(now[..starts[4]], bytes[..starts[4]]);
    assert_eq!(
        support::frame_starts(&now)[4],
        starts[4],
        "the new frame took its place"
    );

    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    assert!(store.take_recovery_notes().is_empty());
    assert_eq!(conversations(&store), ["after", "c1", "c2", "c3", "c4"]);
    for id in ids.iter().take(4).chain([&after]) {
        store.odb().session(id).unwrap();
    }
    assert!(!store.odb().contains(&ids[4]).unwrap());
}

#[test]
fn garbage_after_the_last_frame_is_still_a_torn_write() {
    // Where the next frame would go (a header that is not zeros), and
    // further on in the zeros written ahead (a later block of a frame whose
    // first never landed).
    for past_end in [0, 5000] {
        let (_d, path, ids) = five_commits_by_five_handles();
        let seg = only_segment(&path);
        let mut bytes = fs::read(&seg).unwrap();
        let end = frames_end(&bytes);
        let at = end + past_end;
        bytes[at..at + 24].copy_from_slice(&[0x5a; 24]);
        fs::write(&seg, &bytes).unwrap();

        let (notes, after) = commit_after(&path);
        assert!(
            notes.iter().any(|n| n.contains("torn write")),
            "at {at}: {notes:?}"
        );
        assert!(!notes.iter().any(|n| n.contains("damaged")), "{notes:?}");
        assert_eq!(set_aside(&path).len(), 1);
        let now = fs::read(&seg).unwrap();
        assert_eq!(now[..end], bytes[..end], "at {at}: the frames are intact");
        assert_eq!(support::frame_starts(&now)[5], end, "at {at}");

        let store = Store::open(&path, &OpenOptions::default()).unwrap();
        assert!(store.take_recovery_notes().is_empty());
        assert_eq!(
            conversations(&store),
            ["after", "c1", "c2", "c3", "c4", "c5"]
        );
        for id in ids.iter().chain([&after]) {
            store.odb().session(id).unwrap();
        }
    }
}
