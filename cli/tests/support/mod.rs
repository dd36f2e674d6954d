//! What every end-to-end test needs: run the real `sessctl` binary on a
//! store and capture its exit code, stdout and stderr.
#![allow(dead_code)] // each test file uses its own part of this
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What a run printed and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `sessctl --store STORE ARGS...`, feeding `stdin` if given.
pub fn sessctl(store: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("SESSCTL_STORE")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        // A command that fails before reading its input closes the pipe.
        match child.stdin.take().unwrap().write_all(input.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r.unwrap(),
        }
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// A new, initialised store in a temporary directory.
pub fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let r = sessctl(&path, &["init"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    (dir, path)
}

/// Holds the store's writer lock from this process, as a running agent
/// would, with `pid` written where sessctl reads the holder's pid.
pub fn hold_lock(store: &Path, pid: &str) -> std::fs::File {
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(store.join("LOCK"))
        .unwrap();
    lock.try_lock().unwrap();
    (&lock).write_all(format!("{pid}\n").as_bytes()).unwrap();
    lock
}

/// The real agent files of `../shared/data` (beside the project's root).
pub const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data");

/// The data folder or file `sub`, or `None` (with a note on stderr) when it
/// is absent: a test that reads the real files skips, saying why.
pub fn data(sub: &str) -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(DATA).join(sub);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("note: {} is absent; skipping", p.display());
        None
    }
}
