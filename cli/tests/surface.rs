//! The command line's surface: where the store is found, the pager and
//! colour, `--json` on the report verbs, progress, `--help` and completions.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::{new_store, sessctl, Run};

/// Runs `sessctl ARGS` in `dir` with no `--store` and no `SESSCTL_STORE`,
/// with extra environment variables.
fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessctl"));
    cmd.current_dir(dir)
        .args(args)
        .env_remove("SESSCTL_STORE")
        .env_remove("NO_COLOR")
        .env_remove("PAGER")
        .env_remove("SESSCTL_PAGER")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn ok(store: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let r = sessctl(store, args, stdin);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

const TURN: &str = r#"[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]"#;

/// A store with conversations `fix` (two turns) and `alt` (forked from
/// fix~1).
fn two_conversations() -> (tempfile::TempDir, std::path::PathBuf) {
    let (d, s) = new_store();
    ok(
        &s,
        &["commit", "--new", "fix", "--messages", "-"],
        Some(TURN),
    );
    ok(
        &s,
        &["commit", "fix", "--messages", "-"],
        Some(r#"[{"role":"user","content":"more"}]"#),
    );
    ok(
        &s,
        &["fork", "fix~1", "--as", "alt", "--messages", "-"],
        Some(r#"[{"role":"user","content":"other"}]"#),
    );
    (d, s)
}

// ---- store discovery ----

#[test]
fn the_store_is_found_in_a_parent_directory_as_git_finds_dot_git() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_in(dir.path(), &["init"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "Initialized empty sessctl store in .sessctl\n");
    assert!(dir.path().join(".sessctl/FORMAT").is_file());
    let s = dir.path().join(".sessctl");
    ok(
        &s,
        &["commit", "--new", "fix", "--messages", "-"],
        Some(TURN),
    );

    let deep = dir.path().join("a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    let r = run_in(&deep, &["ls", "--json"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r.stdout)[0]["name"], "fix", "{}", r.stdout);

    // A nearer .sessctl that is not a store is passed over.
    std::fs::create_dir_all(dir.path().join("a/.sessctl")).unwrap();
    let r = run_in(&deep, &["rev-parse", "fix"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);

    // init in a subdirectory creates a store there, as git init does, and
    // the nearer store wins from then on.
    let r = run_in(&deep, &["init"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(deep.join(".sessctl/FORMAT").is_file());
    let r = run_in(&deep, &["ls", "--json"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r.stdout), json("[]"));

    // --store and SESSCTL_STORE still win over discovery.
    let r = run_in(
        &deep,
        &["ls", "--json"],
        &[("SESSCTL_STORE", s.to_str().unwrap())],
    );
    assert_eq!(json(&r.stdout)[0]["name"], "fix", "{}", r.stdout);
    let r = run_in(
        &deep,
        &["--store", s.to_str().unwrap(), "ls", "--json"],
        &[],
    );
    assert_eq!(json(&r.stdout)[0]["name"], "fix", "{}", r.stdout);
}

#[test]
fn without_a_store_one_error_names_init_store_and_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["ls"][..], &["log"], &["gc"], &["fsck"], &["rm", "x"]] {
        let r = run_in(dir.path(), args, &[]);
        assert_eq!(r.code, 1, "{args:?}: {r:?}");
        assert_eq!(r.stdout, "");
        assert_eq!(
            r.stderr,
            "sessctl: not in a sessctl store: no .sessctl in this directory or any parent; \
             run sessctl init to create one here, or give --store DIR or set SESSCTL_STORE\n",
            "{args:?}"
        );
    }
    // A command that needs no store still runs.
    let r = run_in(dir.path(), &["completions", "bash"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}
