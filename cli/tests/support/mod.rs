//! What every end-to-end test needs: run the real `sessctl` binary on a
//! store and capture its exit code, stdout and stderr.
#![allow(dead_code)] // each test file uses its own part of this
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::ffi::OsString;
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

/// What `--store` names: a directory (a `Path`) or a [`TestStore`].
pub trait Target {
    /// The `--store` argument.
    fn arg(&self) -> OsString;
    /// Variables the child needs to reach the store (S3's for a remote one).
    fn env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
    /// A directory for the test's own files: beside a store directory, or
    /// [`TestStore::scratch`].
    fn scratch(&self) -> PathBuf;
}

impl Target for Path {
    fn arg(&self) -> OsString {
        self.as_os_str().to_owned()
    }
    fn scratch(&self) -> PathBuf {
        self.parent().unwrap().to_owned()
    }
}

impl Target for PathBuf {
    fn arg(&self) -> OsString {
        self.as_os_str().to_owned()
    }
    fn scratch(&self) -> PathBuf {
        self.as_path().scratch()
    }
}

/// A reference to a target is that target (a test helper may hold a
/// `&TestStore` where another holds a `PathBuf`).
impl<T: Target + ?Sized> Target for &T {
    fn arg(&self) -> OsString {
        (**self).arg()
    }
    fn env(&self) -> Vec<(String, String)> {
        (**self).env()
    }
    fn scratch(&self) -> PathBuf {
        (**self).scratch()
    }
}

/// Runs `sessctl --store STORE ARGS...`, feeding `stdin` if given.
pub fn sessctl<T: Target + ?Sized>(store: &T, args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(store.arg())
        .args(args)
        .env_remove("SESSCTL_STORE")
        .envs(store.env())
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

#[path = "../../../store/tests/support/servers.rs"]
pub mod servers;

/// One end-to-end test's store, on either backend: a directory
/// (`--store DIR`) or a database and bucket of its own on the loopback
/// servers (`--store postgres://...?objects=s3://...`), initialised by
/// `sessctl init` either way. [`two_backends!`] runs a test on both.
pub enum TestStore {
    Local {
        dir: tempfile::TempDir,
        path: PathBuf,
    },
    Remote(servers::Remote),
}

impl TestStore {
    pub fn local() -> TestStore {
        let (dir, path) = new_store();
        TestStore::Local { dir, path }
    }

    /// `None` only when the developer opted out (`SESSCTL_REMOTE_TESTS=skip`).
    pub fn remote() -> Option<TestStore> {
        let s = TestStore::Remote(servers::remote()?);
        let r = sessctl(&s, &["init"], None);
        assert_eq!(r.code, 0, "remote init: {}", r.stderr);
        Some(s)
    }

    /// Another new store on the same backend (for a test that needs
    /// several).
    pub fn another(&self) -> TestStore {
        match self {
            TestStore::Local { .. } => TestStore::local(),
            TestStore::Remote(_) => TestStore::remote().expect("the first remote store was made"),
        }
    }

    /// The directory of a local store; `None` on the remote backend.
    pub fn path(&self) -> Option<&Path> {
        match self {
            TestStore::Local { path, .. } => Some(path),
            TestStore::Remote(_) => None,
        }
    }

    /// "local" or "remote", for failure messages.
    pub fn name(&self) -> &'static str {
        match self {
            TestStore::Local { .. } => "local",
            TestStore::Remote(_) => "remote",
        }
    }

    pub fn is_remote(&self) -> bool {
        matches!(self, TestStore::Remote(_))
    }

    /// A library handle on the same store (as another process would open it).
    pub fn library(&self) -> sessctl_store::Store {
        let opts = sessctl_store::OpenOptions::default();
        match self {
            TestStore::Local { path, .. } => sessctl_store::Store::open(path, &opts).unwrap(),
            TestStore::Remote(r) => {
                sessctl_store::Store::open_remote_with(&r.url, &opts, &r.s3_settings()).unwrap()
            }
        }
    }
}

impl Target for TestStore {
    fn arg(&self) -> OsString {
        match self {
            TestStore::Local { path, .. } => path.as_os_str().to_owned(),
            TestStore::Remote(r) => r.url.clone().into(),
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        match self {
            TestStore::Local { .. } => Vec::new(),
            TestStore::Remote(r) => r.env.clone(),
        }
    }

    /// Beside the store directory, or beside the servers' data (a
    /// directory per test).
    fn scratch(&self) -> PathBuf {
        let d = match self {
            TestStore::Local { dir, .. } => dir.path().to_owned(),
            TestStore::Remote(r) => r.servers.dir().join(format!("scratch-{}", r.name)),
        };
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

impl std::fmt::Display for TestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} store {}", self.name(), self.arg().to_string_lossy())
    }
}

/// Runs `f` on `s`; when it panics, a line names the backend (the test's
/// name does too: `name::local`, `name::remote`).
pub fn run_on(s: &TestStore, f: fn(&TestStore)) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(s)));
    if let Err(e) = r {
        eprintln!("^ failed on the {s}");
        std::panic::resume_unwind(e);
    }
}

/// `two_backends!(a, b, ...)`: for each `fn a(s: &TestStore)` in scope,
/// the tests `a::local` and `a::remote`. `a => remote_ignored("why")`
/// marks a known failure of the remote backend: its remote test is
/// `#[ignore]`d with that reason, shown in every run.
#[macro_export]
macro_rules! two_backends {
    ($($name:ident $(=> remote_ignored($why:literal))?),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn local() {
                let s = $crate::support::TestStore::local();
                $crate::support::run_on(&s, super::$name);
            }
            #[test]
            $(#[ignore = $why])?
            fn remote() {
                let Some(s) = $crate::support::TestStore::remote() else {
                    return;
                };
                $crate::support::run_on(&s, super::$name);
            }
        }
    )+};
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
