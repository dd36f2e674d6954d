//! End to end: the real `sessctl` binary on temporary stores; stdout,
//! stderr and exit codes compared as a user or a script sees them. The
//! behaviour tests run on a local store and on a remote one
//! (`name::local`, `name::remote`); the tests of a store directory's files
//! run locally only and say so.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{sessctl, Target, TestStore};

two_backends!(
    hash_object_prints_the_id_and_writes_only_with_w,
    bad_input_gets_one_line_and_the_right_exit_code,
    a_closed_pipe_is_not_an_error,
);

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let r = sessctl(&path, &["init"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout,
        format!("Initialized empty sessctl store in {}\n", path.display())
    );
    (dir, path)
}

const HELLO: &str = r#"{"role": "user", "content": "Hello"}"#;
const HELLO_ID: &str = "00ffdccff9a461873897cd0a40c829c259faba08458bcf2be5b99e430c6edbaf";

fn hash_object_prints_the_id_and_writes_only_with_w(s: &TestStore) {
    let r = sessctl(s, &["hash-object", "--stdin"], Some(HELLO));
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (0, &*format!("{HELLO_ID}\n"), "")
    );
    let r = sessctl(s, &["cat-object", "-t", HELLO_ID], None);
    assert_eq!(r.code, 1);
    assert_eq!(r.stderr, format!("sessctl: object {HELLO_ID} not found\n"));

    // Whitespace and key order do not matter; -w stores it.
    let r = sessctl(
        s,
        &["hash-object", "-w", "--stdin"],
        Some("{\n  \"content\" : \"Hello\",\"role\":\"user\"}\n"),
    );
    assert_eq!((r.code, r.stdout.as_str()), (0, &*format!("{HELLO_ID}\n")));
    let file = s.scratch().join("m.json");
    std::fs::write(&file, HELLO).unwrap();
    let r = sessctl(s, &["hash-object", file.to_str().unwrap()], None);
    assert_eq!(r.stdout, format!("{HELLO_ID}\n"));

    let r = sessctl(s, &["cat-object", "-t", &HELLO_ID[..6]], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, "blob\n"));
    let r = sessctl(s, &["cat-object", "-s", HELLO_ID], None);
    assert_eq!(r.stdout, "25\n");
    let r = sessctl(s, &["cat-object", "--json", HELLO_ID], None);
    assert_eq!(r.stdout, "{\"content\":\"Hello\",\"role\":\"user\"}\n");
    let r = sessctl(s, &["cat-object", "-p", HELLO_ID], None);
    assert_eq!(
        r.stdout,
        "{\n  \"content\": \"Hello\",\n  \"role\": \"user\"\n}\n"
    );
}

fn bad_input_gets_one_line_and_the_right_exit_code(s: &TestStore) {
    let cases: &[(&[&str], Option<&str>, i32, &str)] = &[
        (
            &["hash-object", "--stdin"],
            Some(r#"{"a":1,"a":2}"#),
            1,
            "sessctl: standard input: invalid JSON: duplicate object key \"a\"",
        ),
        (
            &["hash-object", "--stdin"],
            Some("{"),
            1,
            "sessctl: standard input: invalid JSON: ",
        ),
        (
            &["hash-object", "--stdin"],
            Some("[1] [2]"),
            1,
            "sessctl: standard input: invalid JSON: trailing characters",
        ),
        (
            &["hash-object"],
            None,
            2,
            "sessctl: hash-object needs a FILE or --stdin",
        ),
        (
            &["hash-object", "/no/such/file.json"],
            None,
            1,
            "sessctl: /no/such/file.json: ",
        ),
        (
            &["cat-object", "-p", "ab"],
            None,
            2,
            "sessctl: 'ab' is too short to name an object: give at least 4 hex digits",
        ),
        (
            &["cat-object", "-p", "zzzz"],
            None,
            2,
            "sessctl: 'zzzz' is not an object id: only the hex digits",
        ),
        (
            &["cat-object", "-p", "abcd"],
            None,
            1,
            "sessctl: no object id starts with abcd",
        ),
    ];
    for (args, stdin, code, prefix) in cases {
        let r = sessctl(s, args, *stdin);
        assert_eq!(r.code, *code, "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with(prefix), "{args:?}: {:?}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {:?}", r.stderr);
        assert_eq!(r.stdout, "");
    }
    let r = sessctl(s, &["cat-object", HELLO_ID], None);
    assert_eq!(r.code, 2, "a missing mode is a usage error");
    // `init` on a store directory that is there is refused; on a remote
    // store it adds the migrations the schema lacks, as designed (it says
    // "Reinitialized": tests/remote_store.rs).
    if !s.is_remote() {
        let r = sessctl(s, &["init"], None);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(r.stderr.starts_with("sessctl: "), "{:?}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{:?}", r.stderr);
        assert_eq!(r.stdout, "");
    }
}

// Local only: a directory that is not a store.
#[test]
fn a_directory_that_is_not_a_store_says_so() {
    let (_d, s) = store();
    let r = sessctl(&s.join("nope"), &["cat-object", "-t", "abcd"], None);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "sessctl: {} is not a sessctl store\n",
            s.join("nope").display()
        )
    );
}

// Local only: flips a byte of a pack file on disk.
#[test]
fn corruption_exits_with_its_own_code_and_names_the_object() {
    let (_d, s) = store();
    sessctl(&s, &["hash-object", "-w", "--stdin"], Some(HELLO));
    let r = sessctl(&s, &["repack"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("1 objects in pack-"), "{}", r.stdout);
    // Corrupt the one object's compressed block in the pack.
    let pack = std::fs::read_dir(s.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let mut bytes = std::fs::read(&pack).unwrap();
    let mid = 16 + (bytes.len() - 16 - 32) / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&pack, bytes).unwrap();
    let r = sessctl(&s, &["cat-object", "-p", HELLO_ID], None);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr
            .starts_with(&format!("sessctl: object {HELLO_ID} is corrupt: ")),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, "");
}

// Local only: holds a store directory's LOCK file (a remote store's write
// lock: tests/remote_store.rs).
#[test]
fn a_second_writer_is_told_who_holds_the_store() {
    let (_d, s) = store();
    // Hold the lock from this process, the way a running agent would.
    let lock = support::hold_lock(&s, "4242");
    let r = sessctl(
        &s,
        &["--wait", "0", "hash-object", "-w", "--stdin"],
        Some(HELLO),
    );
    assert_eq!(r.code, 4);
    assert_eq!(
        r.stderr,
        format!(
            "sessctl: store {} is in use by pid 4242: it held the store's write lock for longer than this write waits (give it longer with --wait)\n",
            s.display()
        )
    );
    // Readers need no lock.
    let r = sessctl(&s, &["hash-object", "--stdin"], Some(HELLO));
    assert_eq!(r.code, 0);
    let r = sessctl(&s, &["--wait", "0.2", "repack"], None);
    assert_eq!(r.code, 4);
    drop(lock);
    let r = sessctl(&s, &["--wait", "5", "repack"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

fn a_closed_pipe_is_not_an_error(s: &TestStore) {
    sessctl(s, &["hash-object", "-w", "--stdin"], Some(HELLO));
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(s.arg())
        .env_remove("SESSCTL_STORE")
        .envs(s.env())
        .args(["cat-object", "-p", HELLO_ID])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

#[test]
fn help_documents_the_exit_codes() {
    let (_d, s) = store();
    let r = sessctl(&s, &["--help"], None);
    assert_eq!(r.code, 0);
    for line in [
        "0  success",
        "2  usage error",
        "3  corruption detected",
        "4  the store is in use",
    ] {
        assert!(r.stdout.contains(line), "{}", r.stdout);
    }
}
