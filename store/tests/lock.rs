//! The writer lock across processes: a SIGKILLed holder never leaves the
//! store locked. The test re-runs its own binary as the child process.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sessctl_store::{Durability, Error, Odb, OpenOptions};

const CHILD_ENV: &str = "SESSCTL_TEST_LOCK_CHILD";

/// In the child: open the store for writing, say so, and hold it forever.
#[test]
fn lock_child_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let odb = Odb::open(Path::new(&path), &OpenOptions::default()).unwrap();
    odb.put_blob(&serde_json::json!("held"), Durability::Sync)
        .unwrap();
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
        match Odb::open(&path, &OpenOptions::default()) {
            Err(Error::Locked { pid, .. }) => assert_eq!(pid, Some(child.id()), "round {round}"),
            other => panic!("round {round}: expected Locked, got {other:?}"),
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
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
