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

// ---- --json on every report verb ----

#[test]
fn gc_prune_repack_reindex_and_merge_base_speak_json() {
    let (_d, s) = two_conversations();
    let fix = ok(&s, &["rev-parse", "fix"], None).trim().to_owned();
    let alt = ok(&s, &["rev-parse", "alt"], None).trim().to_owned();
    let base = ok(&s, &["rev-parse", "fix~1"], None).trim().to_owned();

    let v = json(&ok(&s, &["merge-base", "--json", "fix", "alt"], None));
    assert_eq!(v["a"], fix.as_str());
    assert_eq!(v["b"], alt.as_str());
    assert_eq!(v["bases"], serde_json::json!([base]));
    let v = json(&ok(
        &s,
        &["merge-base", "--all", "--json", "fix", "alt"],
        None,
    ));
    assert_eq!(v["bases"], serde_json::json!([base]));
    let v = json(&ok(
        &s,
        &["merge-base", "--is-ancestor", "--json", "fix~1", "fix"],
        None,
    ));
    assert_eq!(v["is_ancestor"], true);
    let r = sessctl(
        &s,
        &["merge-base", "--is-ancestor", "--json", "fix", "alt"],
        None,
    );
    assert_eq!(r.code, 1, "the exit status says no, as without --json");
    assert_eq!(json(&r.stdout)["is_ancestor"], false);

    let v = json(&ok(&s, &["gc", "--dry-run", "--json"], None));
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["pruned"], 0);
    assert!(v["objects"].as_u64().unwrap() > 0, "{v}");
    let v = json(&ok(&s, &["gc", "--json"], None));
    assert_eq!(v["dry_run"], false);
    assert!(v["bytes_after"].is_u64(), "{v}");

    let v = json(&ok(&s, &["repack", "--json"], None));
    assert!(v["objects"].as_u64().unwrap() > 0, "{v}");
    let v = json(&ok(&s, &["reindex", "--json"], None));
    assert!(v["operations"].as_u64().unwrap() >= 3, "{v}");

    // prune: what would go, then what went, oldest first.
    let v = json(&ok(
        &s,
        &["prune", "--keep", "0", "--dry-run", "--json"],
        None,
    ));
    assert_eq!(
        v,
        serde_json::json!({"action": "archive", "dry_run": true, "conversations": ["fix", "alt"]})
    );
    let v = json(&ok(&s, &["prune", "--keep", "1", "--json"], None));
    assert_eq!(
        v,
        serde_json::json!({"action": "archive", "dry_run": false, "conversations": ["fix"]})
    );
    let ls = json(&ok(&s, &["ls", "--json"], None));
    assert_eq!(ls.as_array().unwrap().len(), 1, "{ls}");
}

#[test]
fn clone_push_and_pull_speak_json_and_clone_prints_one_summary() {
    let (d, a) = two_conversations();
    let b = d.path().join("b");
    let (ap, bp) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = ok(&a, &["clone", ap, bp], None);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with(&format!("cloned {ap} into {bp}: 2 conversations, 2 refs, ")),
        "{out}"
    );
    assert!(out.ends_with("s\n"), "the time it took: {out}");

    let c = d.path().join("c");
    let v = json(&ok(&a, &["clone", "--json", ap, c.to_str().unwrap()], None));
    assert_eq!(v["conversations"], 2);
    assert_eq!(v["applied"], true);
    assert!(v["objects"].as_u64().unwrap() > 0);
    assert!(v["seconds"].is_f64(), "{v}");
    let names: Vec<&str> = v["refs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["outcome"], "created", "{r}");
            r["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"refs/heads/fix"), "{names:?}");

    let old = ok(&a, &["rev-parse", "fix"], None).trim().to_owned();
    ok(
        &a,
        &["commit", "fix", "--messages", "-"],
        Some(r#"[{"role":"user","content":"again"}]"#),
    );
    let new = ok(&a, &["rev-parse", "fix"], None).trim().to_owned();
    let v = json(&ok(&a, &["push", "--json", bp, "fix"], None));
    assert_eq!(
        v["refs"],
        serde_json::json!([{"name": "refs/heads/fix", "outcome": "fast-forward", "old": old, "new": new}])
    );
    assert_eq!(v["objects"], 2, "{v}");
    let v = json(&ok(&a, &["pull", "--json", bp, "fix"], None));
    assert_eq!(
        v["refs"],
        serde_json::json!([{"name": "refs/heads/fix", "outcome": "up-to-date"}])
    );
    assert_eq!(v["objects"], 0);

    // A diverged ref: the JSON says refused, and the exit status is 1.
    ok(
        &b,
        &["commit", "fix", "--messages", "-"],
        Some(r#"[{"role":"user","content":"b's own"}]"#),
    );
    ok(
        &a,
        &["commit", "fix", "--messages", "-"],
        Some(r#"[{"role":"user","content":"a's own"}]"#),
    );
    let r = sessctl(&a, &["push", "--json", bp, "fix"], None);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let v = json(&r.stdout);
    assert_eq!(v["applied"], false);
    assert_eq!(v["refs"][0]["outcome"], "refused");
    assert!(v["refs"][0]["message"].is_string(), "{v}");
}

#[test]
fn compact_speaks_json() {
    let (_d, s) = two_conversations();
    let head = ok(&s, &["rev-parse", "fix"], None).trim().to_owned();
    let summarizer = r#"cat >/dev/null; echo '[{"role":"system","content":"summary"}]'"#;
    let v = json(&ok(
        &s,
        &[
            "compact",
            "fix",
            "--summarizer",
            summarizer,
            "--keep-last",
            "1",
            "--json",
        ],
        None,
    ));
    let new = ok(&s, &["rev-parse", "fix"], None).trim().to_owned();
    assert_eq!(
        v,
        serde_json::json!({"compacted": true, "conversation": "fix", "old_head": head, "head": new})
    );
    let v = json(&ok(
        &s,
        &[
            "compact",
            "fix",
            "--summarizer",
            summarizer,
            "--max-tokens",
            "100000",
            "--json",
        ],
        None,
    ));
    assert_eq!(v["compacted"], false);
    assert_eq!(v["head"], new.as_str());
    assert!(v["estimated_tokens"].is_u64(), "{v}");
}
