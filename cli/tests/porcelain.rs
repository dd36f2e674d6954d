//! End to end: the porcelain a git user expects (`merge`, `tag`, `rename`,
//! `reset`, `NAME@{n}`, `push --force`, `fork --no-checkout`, HEAD after
//! import) and forks whose lineage is true to their cut, on the real
//! `sessctl` binary and temporary stores.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{new_store, sessctl};

use std::path::Path;

use serde_json::Value;

/// Runs a command that must succeed silently on stderr; returns stdout.
fn ok(store: &Path, args: &[&str]) -> String {
    let r = sessctl(store, args, None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout
}

/// Runs a command that must fail with one line on stderr; returns (exit
/// code, stderr).
fn fails(store: &Path, args: &[&str]) -> (i32, String) {
    let r = sessctl(store, args, None);
    assert_ne!(r.code, 0, "{args:?} succeeded: {}", r.stdout);
    assert_eq!(r.stdout, "", "{args:?}");
    assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {:?}", r.stderr);
    (r.code, r.stderr)
}

fn json(store: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(store, args)).unwrap()
}

/// Commits one turn of `texts` (user, assistant, ...) on `conv` (with
/// `--new` when `new`); returns the session id.
fn turn(store: &Path, conv: &str, new: bool, texts: &[&str]) -> String {
    let msgs: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t})
        })
        .collect();
    let mut args = vec!["commit", conv, "--messages", "-"];
    if new {
        args.push("--new");
    }
    let r = sessctl(store, &args, Some(&Value::Array(msgs).to_string()));
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout.trim().to_owned()
}

fn rev(store: &Path, rev: &str) -> String {
    ok(store, &["rev-parse", rev]).trim().to_owned()
}

fn is_ancestor(store: &Path, a: &str, b: &str) -> i32 {
    let r = sessctl(store, &["merge-base", "--is-ancestor", a, b], None);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""));
    r.code
}

// ---- lineage true to the cut ----

#[test]
fn a_fork_that_drops_messages_is_not_a_fast_forward() {
    let (_d, s) = new_store();
    let r = turn(&s, "x", true, &["a", "b"]);
    let s1 = turn(&s, "x", false, &["c", "d"]);
    let s2 = turn(&s, "x", false, &["e", "f"]);
    // Keeping 2 of 6: the root, whose history is exactly those two.
    let out = ok(&s, &["fork", "x", "--at-message", "2", "--as", "two"]);
    assert!(out.starts_with("two "), "{out}");
    assert_eq!(rev(&s, "two^"), r);
    assert_eq!(is_ancestor(&s, "x", "two"), 1);
    // Keeping 3: no session has exactly 3; S1 is the oldest with at least 3.
    let out = ok(
        &s,
        &[
            "fork",
            "x",
            "--at-message",
            "3",
            "--as",
            "three",
            "--no-checkout",
        ],
    );
    let three = out.split_whitespace().nth(1).unwrap().to_owned();
    // --no-checkout left HEAD on the previous fork, as `git branch` would.
    assert_eq!(rev(&s, "HEAD"), rev(&s, "two"));
    assert_eq!(rev(&s, "three^"), s1);
    assert_eq!(json(&s, &["show", "--json", "three"])["history_length"], 3);
    // The tip is not an ancestor of a fork that dropped messages; the
    // session it continues is.
    assert_eq!(is_ancestor(&s, "x", "three"), 1);
    assert_eq!(is_ancestor(&s, &s1, "three"), 0);
    // Keeping everything (and adding) continues the tip: a fast-forward.
    let r2 = sessctl(
        &s,
        &["fork", "x", "--as", "more", "--messages", "-"],
        Some(r#"[{"role":"user","content":"g"}]"#),
    );
    assert_eq!(r2.code, 0, "{}", r2.stderr);
    assert_eq!(is_ancestor(&s, "x", "more"), 0);
    assert_eq!(rev(&s, "more^"), s2);
    // log --graph draws the fork off S1, not as a continuation of the tip.
    let (three, s1s, s2s) = (&three[..12], &s1[..12], &s2[..12]);
    let graph = ok(&s, &["log", "--oneline", "--graph", "x", "three"]);
    assert_eq!(
        graph,
        format!(
            "* {three} (three) a\n\
             | * {s2s} (x) e\n\
             |/\n\
             * {s1s} c\n\
             * {} a\n",
            &r[..12]
        )
    );
}
