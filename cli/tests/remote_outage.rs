//! End to end: a remote store whose S3 server is gone. What fails to read
//! because a server cannot be reached is that server's one error and exit 1,
//! never objects reported missing or corrupt (exit 3); and a clone it stops
//! leaves nothing behind, so the same command works once the server is back.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::servers::{self, Remote};
use support::{sessctl, Run, Target};

use std::ffi::OsString;
use std::path::PathBuf;

/// The remote store of `r` as a process with an empty pack cache of its own
/// sees it: every pack it reads is fetched from the bucket.
struct Uncached<'a> {
    r: &'a Remote,
    cache: tempfile::TempDir,
}

impl<'a> Uncached<'a> {
    fn new(r: &'a Remote) -> Self {
        Uncached {
            r,
            cache: tempfile::tempdir().unwrap(),
        }
    }
}

impl Target for Uncached<'_> {
    fn arg(&self) -> OsString {
        self.r.url.clone().into()
    }
    fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<_> = self
            .r
            .env
            .iter()
            .filter(|(k, _)| k != "SESSCTL_CACHE_DIR")
            .cloned()
            .collect();
        env.push((
            "SESSCTL_CACHE_DIR".into(),
            self.cache.path().display().to_string(),
        ));
        env
    }
    fn scratch(&self) -> PathBuf {
        self.cache.path().to_owned()
    }
}

fn ok<T: Target + ?Sized>(store: &T, args: &[&str], stdin: Option<&str>) -> String {
    let run = sessctl(store, args, stdin);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{args:?}");
    run.stdout
}

/// A remote store, on servers of its own, with two conversations of a few
/// turns (in several packs); `None` when the developer opted out.
fn remote_with_history() -> Option<Remote> {
    let r = servers::remote_private()?;
    let s = Uncached::new(&r);
    ok(&s, &["init"], None);
    for (conv, texts) in [("a", ["one", "two"]), ("b", ["three", "four"])] {
        for (i, t) in texts.iter().enumerate() {
            let msgs = format!(r#"[{{"role": "user", "content": "{t}"}}]"#);
            let mut args = vec!["commit"];
            if i == 0 {
                args.push("--new");
            }
            args.extend([conv, "--messages", "-"]);
            ok(&s, &args, Some(&msgs));
        }
    }
    Some(r)
}

/// One line on stderr naming the bucket, exit 1, nothing on stdout.
fn assert_s3_error(r: &Remote, run: &Run, what: &str) {
    assert_eq!(
        (run.code, run.stdout.as_str()),
        (1, ""),
        "{what}: {}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "{what}: {}", run.stderr);
    assert!(
        run.stderr
            .starts_with(&format!("sessctl: s3://{}/store: ", r.name)),
        "{what}: {}",
        run.stderr
    );
    for wrong in ["missing", "corrupt", "fsck"] {
        assert!(!run.stderr.contains(wrong), "{what}: {}", run.stderr);
    }
}

#[test]
fn fsck_and_gc_with_s3_gone_are_its_error_not_missing_objects() {
    let Some(r) = remote_with_history() else {
        return;
    };
    let s = Uncached::new(&r);
    assert_eq!(ok(&s, &["fsck", "--full"], None), "");
    r.servers.stop_moto();
    for args in [
        &["fsck"][..],
        &["fsck", "--full"],
        &["fsck", "--json"],
        &["gc", "--dry-run"],
        &["gc"],
    ] {
        let run = sessctl(&Uncached::new(&r), args, None);
        assert_s3_error(&r, &run, &args.join(" "));
    }
}

/// A clone of a remote store that its bucket fails removes the directory
/// it made; run again once the packs can be read (here from a pack cache
/// filled before the outage), the same command works.
#[test]
fn a_clone_the_bucket_fails_leaves_nothing_behind_and_runs_again() {
    let Some(r) = remote_with_history() else {
        return;
    };
    // Every pack fetched into this one's cache.
    let cached = Uncached::new(&r);
    assert_eq!(ok(&cached, &["fsck"], None), "");
    let refs = ok(&cached, &["for-each-ref"], None);
    r.servers.stop_moto();

    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("copy");
    let dest = dest.to_str().unwrap();
    let run = sessctl(&Uncached::new(&r), &["clone", &r.url, dest], None);
    assert_s3_error(&r, &run, "clone");
    assert!(!dir.path().join("copy").exists());

    let out = ok(&cached, &["clone", &r.url, dest], None);
    assert!(out.starts_with("cloned postgres://"), "{out}");
    assert_eq!(ok(&PathBuf::from(dest), &["for-each-ref"], None), refs);
}
