//! The write lock across processes: a writer SIGKILLed while it holds it
//! (in the middle of a write) never leaves the store locked. The test
//! re-runs its own binary as the child process.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sessctl_store::{Durability, Error, Odb, OpenOptions};

const CHILD_ENV: &str = "SESSCTL_TEST_LOCK_CHILD";

/// In the child: write, then take the write lock, say so, and hold it
/// forever, as a writer stopped in the middle of a write would.
#[test]
fn lock_child_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let odb = Odb::open(Path::new(&path), &OpenOptions::default()).unwrap();
    odb.put_blob(&serde_json::json!("held"), Durability::Sync)
        .unwrap();
    let _held = odb.backend().write_lock().unwrap();
    println!("locked");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn a_sigkilled_writer_never_leaves_the_store_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    Odb::init(&path).unwrap();
    for round in 0..3 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "lock_child_entry",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        while !line.contains("locked") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
        }
        // Opening and reading need no lock; a write waits, then names the
        // holder.
        let quick = OpenOptions {
            wait: Some(Duration::from_millis(100)),
            ..OpenOptions::default()
        };
        let odb = Odb::open(&path, &quick).unwrap();
        match odb.put_blob(&serde_json::json!(round), Durability::Sync) {
            Err(Error::Locked { pid, .. }) => assert_eq!(pid, Some(child.id()), "round {round}"),
            other => panic!("round {round}: expected Locked, got {other:?}"),
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        odb.put_blob(&serde_json::json!(round), Durability::Sync)
            .unwrap();
        assert_eq!(
            odb.blob(
                &sessctl_store::Blob::new(serde_json::json!("held"))
                    .unwrap()
                    .encode()
                    .id()
            )
            .unwrap(),
            serde_json::json!("held")
        );
    }
}
