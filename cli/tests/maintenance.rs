//! End to end: gc, fsck and completions through the real binary.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{sessctl, Target, TestStore};

use std::path::PathBuf;

two_backends!(
    fsck_is_silent_and_zero_on_a_clean_store,
    gc_reports_and_prunes,
);

fn run<T: Target + ?Sized>(store: &T, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let r = sessctl(store, args, stdin);
    (r.code, r.stdout, r.stderr)
}

/// A store of one conversation, "main".
fn main_conversation<T: Target + ?Sized>(path: &T) {
    let msgs = r#"[{"role":"user","content":"hello"},{"role":"assistant","content":"hi"}]"#;
    let (code, _, err) = run(
        path,
        &["commit", "--new", "main", "--messages", "-"],
        Some(msgs),
    );
    assert_eq!(code, 0, "{err}");
}

fn store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    assert_eq!(run(&path, &["init"], None).0, 0);
    main_conversation(&path);
    (dir, path)
}

fn fsck_is_silent_and_zero_on_a_clean_store(s: &TestStore) {
    main_conversation(s);
    let (code, out, err) = run(s, &["fsck", "--full"], None);
    // Silent when clean (stderr is a pipe here, not a terminal).
    assert_eq!((code, out.as_str(), err.as_str()), (0, "", ""));
    let (code, out, _) = run(s, &["fsck", "--json"], None);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["clean"], true);
    assert_eq!(v["objects"], 3);
    assert_eq!(v["sessions"], 1);
    assert_eq!(v["problems"], serde_json::json!([]));
}

// Local only: flips a byte of a pack file on disk.
#[test]
fn fsck_names_corruption_and_exits_3() {
    let (_d, s) = store();
    assert_eq!(run(&s, &["repack"], None).0, 0);
    let pack = std::fs::read_dir(s.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let mut bytes = std::fs::read(&pack).unwrap();
    let n = bytes.len();
    bytes[n - 40] ^= 0x01;
    std::fs::write(&pack, bytes).unwrap();
    let (code, out, err) = run(&s, &["fsck", "--full"], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.lines().all(|l| !l.is_empty()));
    assert!(out.contains("is corrupt"), "{out}");
    assert!(err.contains("problems"), "{err}");
}

fn gc_reports_and_prunes(s: &TestStore) {
    main_conversation(s);
    let (code, _, err) = run(
        s,
        &["hash-object", "-w", "--stdin"],
        Some(r#"{"orphan":true}"#),
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(s, &["gc", "--dry-run", "--prune=now"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().next().unwrap(),
        "would prune 1 of 4 objects (9 bytes); 3 reachable, 0 unreachable kept within the grace period"
    );
    assert_eq!(
        out.lines().nth(1).unwrap(),
        "  (no session): 1 objects, 9 bytes"
    );
    let (code, out, _) = run(s, &["gc"], None);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("pruned 0 of 4 objects (0 bytes); 3 reachable, 1 unreachable kept"),
        "{out}"
    );
    let (code, out, err) = run(s, &["gc", "--prune=now"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("pruned 1 of 4 objects"), "{out}");
    let (code, _, err) = run(s, &["gc", "--prune=whenever"], None);
    assert_eq!(code, 2);
    assert!(err.starts_with("sessctl: --prune takes now"), "{err}");
    assert_eq!(run(s, &["fsck"], None).0, 0);
}

#[test]
fn completions_are_generated() {
    let (_d, s) = store();
    let (code, out, _) = run(&s, &["completions", "bash"], None);
    assert_eq!(code, 0);
    // The script asks the binary itself (surface.rs tests the answers).
    assert!(out.contains("COMPLETE=\"bash\""), "{out}");
    assert_eq!(run(&s, &["completions", "tcsh"], None).0, 2);
}
