//! One behaviour test, two backends: [`two_backends!`] turns a function
//! `fn name(b: &Backend)` into the tests `name::local` (a store in a temp
//! directory) and `name::remote` (PostgreSQL + S3 on loopback, see
//! servers.rs: one server pair per test binary, a fresh database and
//! bucket per test). The remote half is built with the `remote` feature
//! only; it fails with one line when the servers are missing, and
//! `SESSCTL_REMOTE_TESTS=skip` opts out, as in servers.rs.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use sessctl_store::{OpenOptions, Store};

#[cfg(feature = "remote")]
#[path = "servers.rs"]
pub mod servers;

/// Where one test's store lives; each [`Backend::open`] is a new handle on
/// it (as another process would open it).
pub enum Backend {
    Local {
        _dir: tempfile::TempDir,
        path: PathBuf,
    },
    #[cfg(feature = "remote")]
    Remote(servers::Remote),
}

impl Backend {
    /// A new, initialised store in a temporary directory.
    pub fn local() -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        drop(Store::init(&path).unwrap());
        Backend::Local { _dir: dir, path }
    }

    /// A new, initialised store in a database and bucket of its own;
    /// `None` only when the developer opted out.
    #[cfg(feature = "remote")]
    pub fn remote() -> Option<Backend> {
        let r = servers::remote()?;
        assert!(
            sessctl_store::odb::RemoteBackend::init(&r.url, &r.s3_settings()).unwrap(),
            "remote init of {} found a store already there",
            r.url
        );
        Some(Backend::Remote(r))
    }

    /// Another new, initialised store on the same backend (for a test that
    /// compares two stores or copies between them).
    pub fn another(&self) -> Backend {
        match self {
            Backend::Local { .. } => Backend::local(),
            #[cfg(feature = "remote")]
            Backend::Remote(_) => Backend::remote().expect("the first remote store was made"),
        }
    }

    /// "local" or "remote", for failure messages.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Local { .. } => "local",
            #[cfg(feature = "remote")]
            Backend::Remote(_) => "remote",
        }
    }

    pub fn is_remote(&self) -> bool {
        !matches!(self, Backend::Local { .. })
    }

    /// The directory of a local store; `None` on the remote backend.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Backend::Local { path, .. } => Some(path),
            #[cfg(feature = "remote")]
            Backend::Remote(_) => None,
        }
    }

    /// A new handle with default options.
    pub fn open(&self) -> Store {
        self.open_with(&OpenOptions::default())
    }

    pub fn open_with(&self, opts: &OpenOptions) -> Store {
        let r = match self {
            Backend::Local { path, .. } => Store::open(path, opts),
            #[cfg(feature = "remote")]
            Backend::Remote(r) => Store::open_remote_with(&r.url, opts, &r.s3_settings()),
        };
        r.unwrap_or_else(|e| panic!("opening the {} store: {e}", self.name()))
    }
}

/// Runs `f` on `b`, and when it panics adds a line naming the backend (the
/// test's name says it too: `name::local`, `name::remote`).
pub fn run_on(b: &Backend, f: fn(&Backend)) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(b)));
    if let Err(e) = r {
        eprintln!("^ failed on the {} backend", b.name());
        std::panic::resume_unwind(e);
    }
}

/// `two_backends!(a, b, ...)`: for each `fn a(b: &Backend)` in scope, the
/// tests `a::local` and `a::remote`. `a => remote_ignored("why")` marks a
/// known failure of the remote backend: its remote test is `#[ignore]`d
/// with that reason, shown in every run (`cargo test -- --ignored` runs it).
#[macro_export]
macro_rules! two_backends {
    ($($name:ident $(=> remote_ignored($why:literal))?),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn local() {
                let b = $crate::backends::Backend::local();
                $crate::backends::run_on(&b, super::$name);
            }
            #[cfg(feature = "remote")]
            #[test]
            $(#[ignore = $why])?
            fn remote() {
                let Some(b) = $crate::backends::Backend::remote() else {
                    return;
                };
                $crate::backends::run_on(&b, super::$name);
            }
        }
    )+};
}
