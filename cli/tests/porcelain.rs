//! End to end: the porcelain a git user expects (`merge`, `tag`, `rename`,
//! `reset`, `NAME@{n}`, `push --force`, `fork --no-checkout`, HEAD after
//! import) and forks whose lineage is true to their cut, on the real
//! `sessctl` binary and temporary stores.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{new_store, sessctl, Target, TestStore};

use serde_json::Value;

two_backends!(
    a_fork_that_drops_messages_is_not_a_fast_forward,
    a_fork_that_keeps_nothing_is_a_root,
    merge_records_both_parents_and_refuses_what_is_merged_already,
    tags_are_created_listed_moved_resolved_and_deleted_like_git,
    rename_moves_the_ref_the_record_and_head,
    reset_moves_a_conversation_and_at_n_reads_the_ref_log,
    head_at_n_undoes_a_reset_of_this_conversation_as_in_git,
    at_n_counts_across_archive_unarchive_and_a_rename_back,
    an_import_points_a_head_that_names_nothing_at_what_it_imported,
    a_subagent_created_with_spawned_by_joins_its_spawners_conversation,
);

/// Runs a command that must succeed silently on stderr; returns stdout.
fn ok<T: Target + ?Sized>(store: &T, args: &[&str]) -> String {
    let r = sessctl(store, args, None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout
}

/// Runs a command that must fail with one line on stderr; returns (exit
/// code, stderr).
fn fails<T: Target + ?Sized>(store: &T, args: &[&str]) -> (i32, String) {
    let r = sessctl(store, args, None);
    assert_ne!(r.code, 0, "{args:?} succeeded: {}", r.stdout);
    assert_eq!(r.stdout, "", "{args:?}");
    assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {:?}", r.stderr);
    (r.code, r.stderr)
}

fn json<T: Target + ?Sized>(store: &T, args: &[&str]) -> Value {
    serde_json::from_str(&ok(store, args)).unwrap()
}

/// Commits one turn of `texts` (user, assistant, ...) on `conv` (with
/// `--new` when `new`); returns the session id.
fn turn<T: Target + ?Sized>(store: &T, conv: &str, new: bool, texts: &[&str]) -> String {
    let msgs: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t})
        })
        .collect();
    let mut args = vec!["commit", "--messages", "-"];
    if !conv.is_empty() {
        args.insert(1, conv);
    }
    if new {
        args.push("--new");
    }
    let r = sessctl(store, &args, Some(&Value::Array(msgs).to_string()));
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout.trim().to_owned()
}

fn rev<T: Target + ?Sized>(store: &T, rev: &str) -> String {
    ok(store, &["rev-parse", rev]).trim().to_owned()
}

fn is_ancestor<T: Target + ?Sized>(store: &T, a: &str, b: &str) -> i32 {
    let r = sessctl(store, &["merge-base", "--is-ancestor", a, b], None);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""));
    r.code
}

// ---- lineage true to the cut ----

fn a_fork_that_drops_messages_is_not_a_fast_forward(s: &TestStore) {
    let r = turn(s, "x", true, &["a", "b"]);
    let s1 = turn(s, "x", false, &["c", "d"]);
    let s2 = turn(s, "x", false, &["e", "f"]);
    // Keeping 2 of 6: the root, whose history is exactly those two.
    let out = ok(s, &["fork", "x", "--at-message", "2", "--as", "two"]);
    assert!(out.starts_with("two "), "{out}");
    assert_eq!(rev(s, "two^"), r);
    assert_eq!(is_ancestor(s, "x", "two"), 1);
    // Keeping 3: no session has exactly 3; S1 is the oldest with at least 3.
    let out = ok(
        s,
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
    assert_eq!(rev(s, "HEAD"), rev(s, "two"));
    assert_eq!(rev(s, "three^"), s1);
    assert_eq!(json(s, &["show", "--json", "three"])["history_length"], 3);
    // The tip is not an ancestor of a fork that dropped messages; the
    // session it continues is.
    assert_eq!(is_ancestor(s, "x", "three"), 1);
    assert_eq!(is_ancestor(s, &s1, "three"), 0);
    // Keeping everything (and adding) continues the tip: a fast-forward.
    let r2 = sessctl(
        s,
        &["fork", "x", "--as", "more", "--messages", "-"],
        Some(r#"[{"role":"user","content":"g"}]"#),
    );
    assert_eq!(r2.code, 0, "{}", r2.stderr);
    assert_eq!(is_ancestor(s, "x", "more"), 0);
    assert_eq!(rev(s, "more^"), s2);
    // log --graph draws the fork off S1, not as a continuation of the tip.
    let (three, s1s, s2s) = (&three[..12], &s1[..12], &s2[..12]);
    let graph = ok(s, &["log", "--oneline", "--graph", "x", "three"]);
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

fn a_fork_that_keeps_nothing_is_a_root(s: &TestStore) {
    let r = turn(s, "x", true, &["a", "b"]);
    ok(s, &["fork", "x", "--at-message", "0", "--as", "empty"]);
    let v = json(s, &["show", "--json", "empty"]);
    assert_eq!(v["history_length"], 0);
    assert_eq!(v["parents"], serde_json::json!([]), "{v}");
    // No session of x is its ancestor, as for git's orphan branch.
    assert_eq!(is_ancestor(s, &r, "empty"), 1);
    assert_eq!(is_ancestor(s, "x", "empty"), 1);
    let r = sessctl(s, &["rev-parse", "empty^"], None);
    assert_eq!(r.code, 1, "{}", r.stdout);
}

// ---- merge ----

fn merge_records_both_parents_and_refuses_what_is_merged_already(s: &TestStore) {
    turn(s, "x", true, &["a", "b"]);
    let x1 = turn(s, "x", false, &["c"]);
    ok(s, &["fork", "x~1", "--as", "y"]);
    let y1 = turn(s, "y", false, &["d"]);
    let v = json(s, &["merge", "x", "y", "--json"]);
    assert_eq!(v["conversation"], "x");
    assert_eq!(v["parents"], serde_json::json!([x1, y1]));
    let m = v["id"].as_str().unwrap().to_owned();
    assert_eq!(rev(s, "x"), m);
    assert_eq!(rev(s, "x^2"), y1);
    assert_eq!(is_ancestor(s, "y", "x"), 0);
    // The reflog says it was a merge.
    let log = json(s, &["reflog", "--json", "x"]);
    assert_eq!(log[0]["reason"], "merge");
    // Merging it again: nothing to merge, nothing written.
    let (code, err) = fails(s, &["merge", "x", "y"]);
    assert_eq!(code, 1);
    assert!(
        err.starts_with("sessctl: y is already merged into x"),
        "{err}"
    );
    assert_eq!(rev(s, "x"), m);
    // With messages: they follow the head's history; plain output is the id.
    let r = sessctl(
        s,
        &["merge", "y", "x", "--messages", "-"],
        Some(r#"[{"role":"user","content":"merged"}]"#),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.trim(), rev(s, "y"));
    assert_eq!(json(s, &["show", "--json", "y"])["history_length"], 4);
    // Unknown sides are refused.
    assert_eq!(fails(s, &["merge", "x", "nope"]).0, 1);
    assert_eq!(fails(s, &["merge", "nope", "x"]).0, 1);
}

// ---- tag ----

fn tags_are_created_listed_moved_resolved_and_deleted_like_git(s: &TestStore) {
    let a = turn(s, "x", true, &["a"]);
    let b = turn(s, "x", false, &["b"]);
    // Nothing to list prints nothing.
    assert_eq!(ok(s, &["tag"]), "");
    assert_eq!(ok(s, &["tag", "v2"]), "");
    assert_eq!(ok(s, &["tag", "v1", "x~1"]), "");
    assert_eq!(ok(s, &["tag"]), "v1\nv2\n");
    assert_eq!(
        json(s, &["tag", "--json"]),
        serde_json::json!([{"name": "v1", "id": a}, {"name": "v2", "id": b}])
    );
    // Revisions resolve tags, by name and as tags/NAME.
    assert_eq!(rev(s, "v1"), a);
    assert_eq!(rev(s, "tags/v2~1"), a);
    // An existing tag is refused, -f moves it.
    let (code, err) = fails(s, &["tag", "v1", "x"]);
    assert_eq!(
        (code, err.as_str()),
        (1, "sessctl: tag v1 exists already\n")
    );
    assert_eq!(
        ok(s, &["tag", "-f", "v1", "x"]),
        format!("Updated tag 'v1' (was {})\n", &a[..12])
    );
    assert_eq!(rev(s, "v1"), b);
    assert_eq!(
        ok(s, &["tag", "-d", "v2"]),
        format!("Deleted tag 'v2' (was {})\n", &b[..12])
    );
    assert_eq!(ok(s, &["tag"]), "v1\n");
    let (code, err) = fails(s, &["tag", "-d", "v2"]);
    assert_eq!((code, err.as_str()), (1, "sessctl: no tag named v2\n"));
    assert_eq!(fails(s, &["tag", "v3", "nope"]).0, 1);
    assert_eq!(fails(s, &["tag", "bad name"]).0, 2);
    // Every move is in the ref log.
    let log = json(s, &["reflog", "--json", "refs/tags/v1"]);
    assert_eq!(log.as_array().unwrap().len(), 2);
    assert_eq!(log[0]["reason"], "tag");
}

// ---- rename ----

fn rename_moves_the_ref_the_record_and_head(s: &TestStore) {
    turn(s, "x", true, &["a"]);
    let x1 = turn(s, "x", false, &["b"]);
    turn(s, "other", true, &["o"]);
    ok(s, &["checkout", "x"]);
    assert_eq!(ok(s, &["rename", "x", "y"]), "");
    assert_eq!(rev(s, "y"), x1);
    assert_eq!(fails(s, &["rev-parse", "x"]).0, 1);
    // HEAD followed: a bare commit continues y.
    let y2 = turn(s, "", false, &["c"]);
    assert_eq!(rev(s, "y"), y2);
    // The record moved with its figures.
    let ls = json(s, &["ls", "--json"]);
    let y = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "y")
        .unwrap();
    assert_eq!(y["sessions"], 3);
    assert_eq!(y["messages"], 3);
    assert!(ls.as_array().unwrap().iter().all(|c| c["name"] != "x"));
    // The reflog records both sides.
    let log = json(s, &["reflog", "--json"]);
    let renames: Vec<&Value> = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "rename")
        .collect();
    let refs: Vec<&str> = renames.iter().map(|e| e["ref"].as_str().unwrap()).collect();
    assert!(refs.contains(&"refs/heads/x") && refs.contains(&"refs/heads/y"));
    assert!(refs.contains(&"HEAD"), "{refs:?}");
    // HEAD is left alone when it named another conversation.
    ok(s, &["checkout", "other"]);
    ok(s, &["rename", "y", "z"]);
    assert_eq!(rev(s, "HEAD"), rev(s, "other"));
    // NEW must be free; OLD must exist.
    let (code, err) = fails(s, &["rename", "z", "other"]);
    assert_eq!(
        (code, err.as_str()),
        (1, "sessctl: a conversation named other exists already\n")
    );
    assert_eq!(fails(s, &["rename", "nope", "w"]).0, 1);
    assert_eq!(fails(s, &["rename", "z", "bad/name"]).0, 2);
    // An archived conversation stays archived under its new name.
    ok(s, &["archive", "z"]);
    ok(s, &["rename", "z", "old"]);
    assert_eq!(rev(s, "archive/old"), y2);
}

// ---- reset and NAME@{n} ----

fn reset_moves_a_conversation_and_at_n_reads_the_ref_log(s: &TestStore) {
    let a = turn(s, "x", true, &["a"]);
    let b = turn(s, "x", false, &["b"]);
    let c = turn(s, "x", false, &["c"]);
    assert_eq!(rev(s, "x@{0}"), c);
    assert_eq!(rev(s, "x@{1}"), b);
    assert_eq!(rev(s, "x@{2}"), a);
    assert_eq!(rev(s, "x@{1}~1"), a);
    // A bare @{n} reads the conversation HEAD is on.
    assert_eq!(rev(s, "@{1}"), b);
    let (code, err) = fails(s, &["rev-parse", "x@{3}"]);
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            "sessctl: x@{3}: the ref log of refs/heads/x has only 3 entries (@{0} to @{2})\n"
        )
    );
    assert_eq!(fails(s, &["rev-parse", "x@{one}"]).0, 2);
    // reset: the conversation moves, the reflog says why.
    assert_eq!(
        ok(s, &["reset", "x", "x~2"]),
        format!("x is now at {} a\n", &a[..12])
    );
    assert_eq!(rev(s, "x"), a);
    assert_eq!(json(s, &["reflog", "--json", "x"])[0]["reason"], "reset");
    // ... and back to where it was, by the ref log.
    let v = json(s, &["reset", "x", "x@{1}", "--json"]);
    assert_eq!(
        v,
        serde_json::json!({"conversation": "x", "old": a, "new": c})
    );
    assert_eq!(json(s, &["show", "--json", "x"])["history_length"], 3);
    // Unknown revisions and conversations are refused; nothing moves.
    let (code, err) = fails(s, &["reset", "x", "nope"]);
    assert_eq!(
        (code, err.as_str()),
        (
            1,
            "sessctl: unknown revision 'nope': not a conversation, ref, tag or object id\n"
        )
    );
    assert_eq!(fails(s, &["reset", "nope", "x"]).0, 1);
    assert_eq!(rev(s, "x"), c);
    // The log of a renamed conversation goes on with its old name's.
    ok(s, &["rename", "x", "y"]);
    assert_eq!(rev(s, "y@{0}"), c);
    assert_eq!(rev(s, "y@{2}"), a);
}

fn head_at_n_undoes_a_reset_of_this_conversation_as_in_git(s: &TestStore) {
    let o = turn(s, "o", true, &["o"]);
    let a0 = turn(s, "a", true, &["a"]);
    let a1 = turn(s, "a", false, &["b"]);
    ok(s, &["reset", "a", "a~1"]);
    assert_eq!(rev(s, "a"), a0);
    // HEAD@{1}: where HEAD was before the reset (a1), not o's head.
    assert_eq!(rev(s, "HEAD@{1}"), a1);
    ok(s, &["reset", "a", "HEAD@{1}"]);
    assert_eq!(rev(s, "a"), a1);
    assert_ne!(rev(s, "a"), o);
}

fn at_n_counts_across_archive_unarchive_and_a_rename_back(s: &TestStore) {
    let a = turn(s, "x", true, &["a"]);
    let b = turn(s, "x", false, &["b"]);
    ok(s, &["archive", "x"]);
    ok(s, &["unarchive", "x"]);
    // unarchive, archive, commit, create.
    assert_eq!(rev(s, "x@{1}"), b);
    assert_eq!(rev(s, "x@{2}"), b);
    assert_eq!(rev(s, "x@{3}"), a);
    ok(s, &["rename", "x", "y"]);
    ok(s, &["rename", "y", "x"]);
    assert_eq!(rev(s, "x@{5}"), a);
    assert_eq!(fails(s, &["rev-parse", "x@{6}"]).0, 1);
}

// ---- push --force, --force-with-lease ----

// Local only: pushes between two store directories (clone/push/pull to a
// remote store: tests/remote_store.rs).
#[test]
fn push_force_and_force_with_lease_follow_git() {
    let (_d, a) = new_store();
    let (_e, b) = new_store();
    let b_path = b.to_str().unwrap();
    turn(&a, "x", true, &["a"]);
    ok(&a, &["push", b_path]);
    // Both sides go on: the conversation diverges.
    let a1 = turn(&a, "x", false, &["from a"]);
    let b1 = turn(&b, "x", false, &["from b"]);
    let r = sessctl(&a, &["push", b_path], None);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("refs/heads/x: refused: "), "{}", r.stdout);
    assert_eq!(rev(&b, "x"), b1);
    // A bare lease: b's ref holds b1, which a's ref log never showed for x.
    let r = sessctl(&a, &["push", "--force-with-lease", b_path], None);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("(stale info)"), "{}", r.stdout);
    assert_eq!(rev(&b, "x"), b1);
    // A lease on another value fails too; on b1 it holds, and forces.
    let lease = format!("--force-with-lease=x:{}", &a1);
    assert_eq!(sessctl(&a, &["push", &lease, b_path], None).code, 1);
    assert_eq!(rev(&b, "x"), b1);
    let lease = format!("--force-with-lease=x:{b1}");
    let r = sessctl(&a, &["push", &lease, b_path], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{}", r.stdout);
    assert!(
        r.stdout.contains(&format!(
            "refs/heads/x: forced update {}...{}",
            &b1[..12],
            &a1[..12]
        )),
        "{}",
        r.stdout
    );
    assert_eq!(rev(&b, "x"), a1);
    // b moves on again: a plain push finds it up to date (b has more);
    // --force sets it back to a's value, as git's does.
    let b2 = turn(&b, "x", false, &["b again"]);
    let r = sessctl(&a, &["push", b_path, "x"], None);
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.contains("refs/heads/x: up to date"),
        "{}",
        r.stdout
    );
    assert_eq!(rev(&b, "x"), b2);
    let r = sessctl(&a, &["push", "--force", b_path, "x"], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{}", r.stdout);
    assert!(r.stdout.contains("forced update"), "{}", r.stdout);
    assert_eq!(rev(&b, "x"), a1);
    // What a pulled: a value a's ref log shows, so the bare lease holds.
    let b3 = turn(&b, "x", false, &["b3"]);
    ok(&a, &["pull", b_path]);
    assert_eq!(rev(&a, "x"), b3);
    ok(&a, &["reset", "x", "x~2"]);
    let a2 = turn(&a, "x", false, &["a2"]);
    let r = sessctl(&a, &["push", "--force-with-lease", b_path], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{}", r.stdout);
    assert_eq!(rev(&b, "x"), a2);
    // A bare lease is the newest value seen here, not any older one: b
    // rewound to a value a's log once showed is someone else's work.
    let old = rev(&a, "x~1");
    ok(&b, &["reset", "x", &old]);
    let a3 = turn(&a, "x", false, &["a3"]);
    let r = sessctl(&a, &["push", "--force-with-lease", b_path, "x"], None);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("(stale info)"), "{}", r.stdout);
    assert_eq!(rev(&b, "x"), old);
    assert_ne!(rev(&b, "x"), a3);
    // What a push from here put there still holds after a rewrite here
    // (as after git's commit --amend).
    let r = sessctl(&a, &["push", "--force", b_path, "x"], None);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(rev(&b, "x"), a3);
    ok(&a, &["reset", "x", "x~1"]);
    let a4 = turn(&a, "x", false, &["a4"]);
    let r = sessctl(&a, &["push", "--force-with-lease", b_path, "x"], None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{}", r.stdout);
    assert_eq!(rev(&b, "x"), a4);
    // REF: expects no such ref there.
    turn(&a, "new", true, &["n"]);
    let r = sessctl(
        &a,
        &["push", "--force-with-lease=new:", b_path, "new"],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stdout);
    let r = sessctl(&a, &["push", "--force-with-lease=x:", b_path, "x"], None);
    assert_eq!(r.code, 1, "{}", r.stdout);
    // Bad leases are usage errors.
    assert_eq!(
        fails(&a, &["push", "--force-with-lease=bad/name", b_path]).0,
        2
    );
    let r = sessctl(&a, &["push", "--force", "--force-with-lease", b_path], None);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

// ---- HEAD after import ----

fn an_import_points_a_head_that_names_nothing_at_what_it_imported(s: &TestStore) {
    let write = |name: &str, text: &str| {
        let p = s.scratch().join(name);
        let conv = serde_json::json!({"messages": [
            {"role": "user", "content": text},
            {"role": "assistant", "content": "ok"},
        ]});
        std::fs::write(&p, conv.to_string()).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let one = write("one.json", "first");
    // A fresh store: HEAD names nothing, so `log` has nothing to show.
    assert_eq!(fails(s, &["log"]).0, 1);
    let v = json(s, &["import", "--from", "openai", "--json", &one]);
    let name = v["head"].as_str().unwrap().to_owned();
    assert!(name.starts_with("openai-"), "{v}");
    // Bare log and show work at once.
    assert!(ok(s, &["log", "--oneline"]).contains(&format!("(HEAD -> {name}) first")));
    assert_eq!(rev(s, "HEAD"), rev(s, &name));
    // The text report says so.
    let two = write("two.json", "second");
    ok(s, &["checkout", &name]);
    let out = ok(s, &["import", "--from", "openai", &two]);
    // HEAD named a conversation: it is left alone.
    assert!(!out.contains("HEAD now names"), "{out}");
    assert_eq!(rev(s, "HEAD"), rev(s, &name));
    // Detached (its conversation removed) it still names a session: left.
    let at = rev(s, &name);
    ok(s, &["rm", &name]);
    let three = write("three.json", "third");
    let out = ok(s, &["import", "--from", "openai", &three]);
    assert!(!out.contains("HEAD now names"), "{out}");
    assert_eq!(rev(s, "HEAD"), at);
    // Gone: the next import that writes something takes it.
    ok(s, &["update-ref", "-d", "HEAD"]);
    let four = write("four.json", "fourth");
    let out = ok(s, &["import", "--from", "openai", &four]);
    assert!(out.contains("HEAD now names openai-"), "{out}");
    assert!(ok(s, &["log", "--oneline"]).contains("fourth"));
    // An import that writes nothing moves nothing.
    ok(s, &["update-ref", "-d", "HEAD"]);
    let v = json(s, &["import", "--from", "openai", "--json", &four]);
    assert_eq!(v["head"], Value::Null);
}

// ---- subagents ----

fn a_subagent_created_with_spawned_by_joins_its_spawners_conversation(s: &TestStore) {
    let root = turn(s, "main", true, &["go"]);
    let spawner = turn(s, "main", false, &["spawn one"]);
    let spawned_by = format!("spawned_by=\"{spawner}\"");
    let r = sessctl(
        s,
        &[
            "commit",
            "--new",
            "agent-1",
            "--messages",
            "-",
            "--meta",
            "session_type=\"async_subagent\"",
            "--meta",
            &spawned_by,
        ],
        Some(r#"[{"role":"user","content":"sub task"}]"#),
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let sub = r.stdout.trim().to_owned();
    let entry = &json(s, &["log", "--json", "-n", "1", "agent-1"])[0];
    assert_eq!(entry["id"], sub);
    assert_eq!(entry["conversation"], root);
    assert_eq!(entry["conversation_name"], "main");
    // Its continuation stays in the spawner's conversation.
    let next = turn(s, "agent-1", false, &["result"]);
    let entry = &json(s, &["log", "--json", "-n", "1", &next])[0];
    assert_eq!(entry["conversation"], root);
    // The spawner's conversation counts them.
    let ls = json(s, &["ls", "--json"]);
    let main = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "main")
        .unwrap();
    assert_eq!(main["sessions"], 4);
    // Without spawned_by an async_subagent session starts its own.
    let r = sessctl(
        s,
        &[
            "commit",
            "--new",
            "loose",
            "--messages",
            "-",
            "--meta",
            "session_type=\"async_subagent\"",
        ],
        Some(r#"[{"role":"user","content":"alone"}]"#),
    );
    assert_eq!(r.code, 0);
    let loose = r.stdout.trim().to_owned();
    assert_eq!(
        json(s, &["log", "--json", "-n", "1", "loose"])[0]["conversation"],
        loose
    );
}
