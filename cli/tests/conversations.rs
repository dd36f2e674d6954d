//! End to end: the conversation and ref commands of the real `sessctl`
//! binary on temporary stores; stdout, stderr and exit codes compared as a
//! user or a script sees them.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{sessctl, Target, TestStore};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use sessctl_store::time::format_rfc3339_ms;

two_backends!(
    commit_starts_and_continues_a_conversation_storing_only_new_messages,
    fork_cuts_history_and_a_plain_fork_writes_no_session,
    ls_lists_newest_first_in_text_and_json,
    archive_unarchive_rm_are_silent_and_ls_filters_by_status,
    prune_keeps_the_most_recent_and_says_what_it_does,
    reflog_shows_every_move_newest_first,
    update_ref_is_a_compare_and_swap,
    bad_input_gets_one_line_and_the_right_exit_code,
    commit_new_without_a_name_names_it_after_its_root,
    display_messages_and_states_are_given_as_files,
);

/// Runs a command that must succeed silently on stderr; returns stdout.
fn ok<T: Target + ?Sized>(store: &T, args: &[&str], stdin: Option<&str>) -> String {
    let r = sessctl(store, args, stdin);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout
}

/// Runs a command that must fail; returns (exit code, stderr).
fn fails<T: Target + ?Sized>(store: &T, args: &[&str], stdin: Option<&str>) -> (i32, String) {
    let r = sessctl(store, args, stdin);
    assert_ne!(r.code, 0, "{args:?} succeeded: {}", r.stdout);
    assert_eq!(r.stdout, "", "{args:?}");
    assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {:?}", r.stderr);
    (r.code, r.stderr)
}

fn json<T: Target + ?Sized>(store: &T, args: &[&str]) -> Value {
    let out = ok(store, args, None);
    assert!(out.ends_with('\n') && out.lines().count() == 1, "{out:?}");
    serde_json::from_str(&out).unwrap()
}

fn store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    ok(&path, &["init"], None);
    (dir, path)
}

/// Writes `content` next to the store; returns the path as a string.
fn file<T: Target + ?Sized>(store: &T, name: &str, content: &str) -> String {
    let p = store.scratch().join(name);
    std::fs::write(&p, content).unwrap();
    p.to_str().unwrap().to_owned()
}

/// A printed session id: 64 hex digits and a newline, nothing else.
fn id_of(out: &str) -> String {
    let id = out.strip_suffix('\n').unwrap();
    assert!(
        id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{out:?}"
    );
    id.to_owned()
}

fn session<T: Target + ?Sized>(store: &T, id: &str) -> Value {
    json(store, &["cat-object", "--json", id])
}

fn msg(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

fn array(items: &[Value]) -> String {
    Value::Array(items.to_vec()).to_string()
}

/// Starts conversation `name` with one user message.
fn create<T: Target + ?Sized>(store: &T, name: &str, text: &str) -> String {
    id_of(&ok(
        store,
        &["commit", "--new", name, "--messages", "-"],
        Some(&array(&[msg("user", text)])),
    ))
}

fn commit_starts_and_continues_a_conversation_storing_only_new_messages(s: &TestStore) {
    let first = [
        msg("user", "Fix the flaky test"),
        msg("assistant", "Looking"),
    ];
    let id1 = id_of(&ok(
        s,
        &["commit", "--new", "demo", "--messages", "-"],
        Some(&array(&first)),
    ));
    let root = session(s, &id1);
    assert_eq!(root["parents"], json!([]));
    assert_eq!(root["messages"]["base"], 0);
    assert_eq!(root["messages"]["added"].as_array().unwrap().len(), 2);

    // Continue by name, then twice through HEAD.
    let one = file(s, "one.json", &array(&[msg("user", "go on")]));
    let id2 = id_of(&ok(s, &["commit", "demo", "--messages", &one], None));
    let id3 = id_of(&ok(s, &["commit", "--messages", &one], None));
    let two = file(
        s,
        "two.json",
        &array(&[msg("assistant", "done"), msg("user", "thanks")]),
    );
    let id4 = id_of(&ok(
        s,
        &[
            "commit",
            "--messages",
            &two,
            "--title",
            "Fix it",
            "--usage",
            r#"{"prompt_tokens":5,"completion_tokens":3,"requests":1}"#,
            "--duration-ms",
            "1200",
            "--status",
            "awaiting_tool_results",
            "--meta",
            r#"cwd="/tmp""#,
            "--meta",
            r#"transport="cli""#,
            "--meta",
            r#"preset_id="fast""#,
            "--meta",
            &format!(r#"spawned_by="{id1}""#),
            "--meta",
            r#"session_type="async_subagent""#,
            "--no-sync",
        ],
        None,
    ));
    for (id, parent, base, added) in [(&id2, &id1, 2, 1), (&id3, &id2, 3, 1), (&id4, &id3, 4, 2)] {
        let s = session(s, id);
        assert_eq!(s["parents"], json!([parent]), "{id}");
        assert_eq!(s["conversation"], json!(id1), "{id}");
        assert_eq!(s["messages"]["base"], base, "{id}");
        assert_eq!(
            s["messages"]["added"].as_array().unwrap().len(),
            added,
            "{id}"
        );
    }
    let s4 = session(s, &id4);
    assert_eq!(s4["title"], "Fix it");
    assert_eq!(s4["status"], "awaiting_tool_results");
    assert_eq!(
        s4["run"],
        json!({"duration_ms": 1200, "usage": {"total_tokens": 8, "prompt_tokens": 5,
               "completion_tokens": 3, "requests": 1}})
    );
    assert_eq!(
        s4["metadata"],
        json!({"session_type": "async_subagent", "transport": "cli", "spawned_by": id1,
               "preset_id": "fast", "extra": {"cwd": "/tmp"}})
    );

    // A full history that extends the head's stores only what is new.
    let mut full = first.to_vec();
    full.extend([
        msg("user", "go on"),
        msg("user", "go on"),
        msg("assistant", "done"),
        msg("user", "thanks"),
        msg("assistant", "welcome"),
    ]);
    let hist = file(s, "full.json", &array(&full));
    let ctx = file(s, "ctx.json", r#"{"files": ["a.rs"]}"#);
    let id5 = id_of(&ok(
        s,
        &["commit", "--history", &hist, "--context-state", &ctx],
        None,
    ));
    let s5 = session(s, &id5);
    assert_eq!(s5["parents"], json!([id4]));
    assert_eq!(s5["messages"]["base"], 6);
    assert_eq!(s5["messages"]["added"].as_array().unwrap().len(), 1);
    let ctx_id = s5["context_state"].as_str().unwrap();
    assert_eq!(
        ok(s, &["cat-object", "--json", ctx_id], None),
        "{\"files\":[\"a.rs\"]}\n"
    );
    // A history that rewrites the past keeps only the common prefix.
    let rewritten = file(s, "rw.json", &array(&[first[0].clone()]));
    let id6 = id_of(&ok(s, &["commit", "demo", "--history", &rewritten], None));
    assert_eq!(
        session(s, &id6)["messages"],
        json!({"base": 1, "added": []})
    );
}

fn fork_cuts_history_and_a_plain_fork_writes_no_session(s: &TestStore) {
    let msgs = [
        msg("user", "one"),
        msg("assistant", "two"),
        msg("user", "three"),
    ];
    let src = id_of(&ok(
        s,
        &["commit", "--new", "src", "--messages", "-"],
        Some(&array(&msgs)),
    ));

    let out = ok(
        s,
        &["fork", "src", "--at-message", "2", "--as", "cut"],
        None,
    );
    let (name, head) = out.trim_end().split_once(' ').unwrap();
    assert_eq!(name, "cut");
    let head = id_of(&format!("{head}\n"));
    let forked = session(s, &head);
    assert_eq!(forked["parents"], json!([src]));
    assert_eq!(forked["messages"], json!({"base": 2, "added": []}));
    assert_eq!(
        forked["conversation"],
        json!(head),
        "the fork starts its own"
    );

    // --at-message-id takes a prefix of the message's blob id.
    let two = ok(s, &["hash-object", "--stdin"], Some(&msgs[1].to_string()));
    let out = ok(
        s,
        &[
            "fork",
            &src[..10],
            "--at-message-id",
            &two[..8],
            "--as",
            "by-id",
        ],
        None,
    );
    let by_id = out.trim_end().split_once(' ').unwrap().1.to_owned();
    assert_eq!(session(s, &by_id)["messages"]["base"], 2);

    // With messages, the fork adds them on the cut.
    let out = ok(
        s,
        &[
            "fork",
            "src",
            "--at-message",
            "1",
            "--as",
            "more",
            "--messages",
            "-",
        ],
        Some(&array(&[msg("user", "instead")])),
    );
    let more = out.trim_end().split_once(' ').unwrap().1.to_owned();
    assert_eq!(session(s, &more)["messages"]["base"], 1);
    assert_eq!(
        session(s, &more)["messages"]["added"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // A plain fork is a new ref at the source: the printed id is the
    // source's, and its default name comes from it.
    let out = ok(s, &["fork", "src"], None);
    assert_eq!(out, format!("fork-{} {src}\n", &src[..12]));
    assert_eq!(
        ok(s, &["for-each-ref"], None)
            .lines()
            .filter(|l| l.starts_with(&src))
            .count(),
        2,
        "refs/heads/src and the fork"
    );
    // HEAD followed the fork; committing on it starts its own history.
    let next = id_of(&ok(
        s,
        &["commit", "--messages", "-"],
        Some(&array(&[msg("user", "four")])),
    ));
    let n = session(s, &next);
    assert_eq!(n["parents"], json!([src]));
    assert_eq!(n["messages"]["base"], 3);

    let (code, err) = fails(s, &["fork", "src", "--at-message", "9"], None);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!("sessctl: cannot cut at message 9: session {src} has 3 messages\n")
    );
    let (code, err) = fails(s, &["fork", "src", "--as", "cut"], None);
    assert_eq!(
        (code, err.as_str()),
        (1, "sessctl: a conversation named cut exists already\n")
    );
    let r = sessctl(
        s,
        &[
            "fork",
            "src",
            "--at-message",
            "1",
            "--at-message-id",
            "abcd",
        ],
        None,
    );
    assert_eq!(r.code, 2, "the cuts conflict: {}", r.stderr);
}

/// `ls`'s expected text for rows of (name, title, sessions, messages,
/// last_activity, preview), already cut.
fn ls_text(rows: &[(&str, &str, u64, u64, i64, &str)]) -> String {
    let mut cells = vec![[
        "NAME".to_owned(),
        "TITLE".to_owned(),
        "SESSIONS".to_owned(),
        "MESSAGES".to_owned(),
        "LAST ACTIVITY".to_owned(),
        "PREVIEW".to_owned(),
    ]];
    for (name, title, sessions, messages, at, preview) in rows {
        let t = format_rfc3339_ms(*at);
        cells.push([
            name.to_string(),
            title.to_string(),
            sessions.to_string(),
            messages.to_string(),
            format!("{}Z", &t[..19]),
            preview.to_string(),
        ]);
    }
    let width = |i: usize| cells.iter().map(|r| r[i].chars().count()).max().unwrap();
    let widths: Vec<usize> = (0..5).map(width).collect();
    let mut out = String::new();
    for r in &cells {
        for (i, w) in widths.iter().enumerate() {
            out.push_str(&format!("{:<w$}  ", r[i]));
        }
        out.push_str(&r[5]);
        out.push('\n');
    }
    out
}

fn ls_lists_newest_first_in_text_and_json(s: &TestStore) {
    assert_eq!(ok(s, &["ls"], None), "", "an empty store lists nothing");
    assert_eq!(ok(s, &["ls", "--all", "--json"], None), "[]\n");

    let long =
        "Please fix\nthe flaky\ttest in the CI pipeline, it fails one run in ten and blocks merges";
    let alpha = id_of(&ok(
        s,
        &[
            "commit",
            "--new",
            "alpha",
            "--messages",
            "-",
            "--title",
            "A title that is much longer than thirty characters",
            "--usage",
            r#"{"total_tokens":10,"prompt_tokens":7}"#,
            "--meta",
            r#"preset_id="p1""#,
        ],
        Some(&array(&[msg("user", long), msg("assistant", "ok")])),
    ));
    let beta = id_of(&ok(
        s,
        &["commit", "--new", "beta", "--messages", "-"],
        Some(&array(&[msg("assistant", "no user here")])),
    ));
    let beta2 = id_of(&ok(
        s,
        &["commit", "beta", "--messages", "-"],
        Some(&array(&[msg("user", "now")])),
    ));

    let all = json(s, &["ls", "--json"]);
    let list = all.as_array().unwrap();
    assert_eq!(list.len(), 2);
    for c in list {
        let mut keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "conversation_id",
                "created_at",
                "default_preset_id",
                "head",
                "last_activity",
                "messages",
                "metadata",
                "name",
                "preview",
                "running",
                "sessions",
                "status",
                "title",
                "updated_at",
                "usage"
            ]
        );
    }
    let (b, a) = (&list[0], &list[1]);
    assert_eq!(b["name"], "beta", "newest activity first");
    assert_eq!(b["title"], Value::Null);
    assert_eq!(b["status"], "active");
    assert_eq!(b["conversation_id"], json!(beta));
    assert_eq!(b["head"], json!(beta2));
    assert_eq!(
        (b["sessions"].as_u64(), b["messages"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(b["preview"], "now");
    assert_eq!(b["running"], Value::Null);
    assert_eq!(b["metadata"], json!({}));
    assert_eq!(a["name"], "alpha");
    assert_eq!(a["head"], json!(alpha));
    assert_eq!(a["default_preset_id"], "p1");
    assert_eq!(
        a["usage"],
        json!({"total_tokens": 10, "prompt_tokens": 7, "completion_tokens": 0, "requests": 0})
    );
    assert_eq!(a["preview"], long, "JSON keeps the preview as it is");
    assert!(a["created_at"].as_i64().unwrap() <= a["last_activity"].as_i64().unwrap());
    assert!(a["last_activity"].as_i64().unwrap() <= b["last_activity"].as_i64().unwrap());

    let at = |c: &Value| c["last_activity"].as_i64().unwrap();
    let expected = ls_text(&[
        ("beta", "-", 2, 2, at(b), "now"),
        (
            "alpha",
            "A title that is much longer t…",
            1,
            2,
            at(a),
            "Please fix the flaky test in the CI pipeline, it fails one …",
        ),
    ]);
    assert_eq!(ok(s, &["ls"], None), expected);
    assert_eq!(
        ok(s, &["ls", "--limit", "1"], None),
        ls_text(&[("beta", "-", 2, 2, at(b), "now")])
    );
    // A conversation whose history has no user message has no preview.
    ok(
        s,
        &["commit", "--new", "quiet", "--messages", "-"],
        Some("[]"),
    );
    assert!(ok(s, &["ls", "--limit", "1"], None).contains("\nquiet  -      1         0  "));
}

fn archive_unarchive_rm_are_silent_and_ls_filters_by_status(s: &TestStore) {
    for n in ["a", "b", "c"] {
        create(s, n, n);
    }
    let names = |args: &[&str]| -> Vec<String> {
        json(s, args)
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{}:{}",
                    c["name"].as_str().unwrap(),
                    c["status"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(ok(s, &["archive", "b"], None), "");
    assert_eq!(names(&["ls", "--json"]), ["c:active", "a:active"]);
    assert_eq!(names(&["ls", "--archived", "--json"]), ["b:archived"]);
    assert_eq!(
        names(&["ls", "--all", "--json"]),
        ["b:archived", "c:active", "a:active"]
    );
    assert_eq!(
        names(&["ls", "--all", "--json", "--limit", "2"]),
        ["b:archived", "c:active"]
    );
    assert_eq!(ok(s, &["unarchive", "b", "--no-sync"], None), "");
    assert_eq!(
        names(&["ls", "--json"]),
        ["b:active", "c:active", "a:active"]
    );
    assert_eq!(ok(s, &["rm", "a"], None), "");
    assert_eq!(names(&["ls", "--all", "--json"]), ["b:active", "c:active"]);
    let r = sessctl(s, &["ls", "--all", "--archived"], None);
    assert_eq!(r.code, 2, "--all and --archived conflict");

    let cases: &[(&[&str], i32, &str)] = &[
        (&["rm", "a"], 1, "sessctl: no conversation named a\n"),
        (&["archive", "zz"], 1, "sessctl: no conversation named zz\n"),
        (&["unarchive", "b"], 1, "sessctl: conversation b is active already\n"),
        (
            &["archive", "a/b"],
            2,
            "sessctl: name 'a/b' contains '/'; only letters, digits, '.', '_' and '-' are allowed\n",
        ),
    ];
    for (args, code, err) in cases {
        assert_eq!(fails(s, args, None), (*code, err.to_string()), "{args:?}");
    }
    ok(s, &["archive", "c"], None);
    assert_eq!(
        fails(s, &["archive", "c"], None),
        (1, "sessctl: conversation c is archived already\n".into())
    );
    assert_eq!(
        fails(s, &["commit", "c", "--messages", "-"], Some("[]")),
        (
            1,
            "sessctl: conversation c is archived; unarchive it to continue it\n".into()
        )
    );
}

fn prune_keeps_the_most_recent_and_says_what_it_does(s: &TestStore) {
    for n in ["a", "b", "c"] {
        create(s, n, n);
    }
    let before = ok(s, &["ls", "--all", "--json"], None);
    assert_eq!(
        ok(s, &["prune", "--keep", "1", "--dry-run"], None),
        "would archive a\nwould archive b\n"
    );
    assert_eq!(
        ok(s, &["ls", "--all", "--json"], None),
        before,
        "a dry run changes nothing"
    );
    assert_eq!(
        ok(s, &["prune", "--keep", "1"], None),
        "archive a\narchive b\n"
    );
    let active = json(s, &["ls", "--json"]);
    assert_eq!(active.as_array().unwrap().len(), 1);
    assert_eq!(active[0]["name"], "c");
    assert_eq!(
        json(s, &["ls", "--archived", "--json"])
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(ok(s, &["prune", "--keep", "1"], None), "", "nothing to do");
    assert_eq!(
        ok(s, &["prune", "--keep", "0", "--delete", "--dry-run"], None),
        "would delete c\n"
    );
    assert_eq!(
        ok(s, &["prune", "--keep", "0", "--delete"], None),
        "delete c\n"
    );
    assert_eq!(ok(s, &["ls"], None), "");
    assert_eq!(sessctl(s, &["prune"], None).code, 2, "--keep is required");
}

fn reflog_shows_every_move_newest_first(s: &TestStore) {
    let id1 = create(s, "demo", "hi");
    let id2 = id_of(&ok(s, &["commit", "--messages", "-"], Some("[]")));
    let out = ok(s, &["fork", "demo", "--as", "f"], None);
    assert_eq!(out, format!("f {id2}\n"));
    ok(s, &["archive", "demo"], None);

    let log = json(s, &["reflog", "--json", "demo"]);
    let entries = log.as_array().unwrap();
    let reasons: Vec<&str> = entries
        .iter()
        .map(|e| e["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["archive", "commit", "create"]);
    let moves: Vec<(Value, Value)> = entries
        .iter()
        .map(|e| (e["old"].clone(), e["new"].clone()))
        .collect();
    assert_eq!(
        moves,
        [
            (json!(id2), Value::Null),
            (json!(id1), json!(id2)),
            (Value::Null, json!(id1)),
        ]
    );
    let ops: Vec<u64> = entries.iter().map(|e| e["op"].as_u64().unwrap()).collect();
    assert_eq!(ops, [4, 2, 1]);
    for e in entries {
        let mut keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["actor", "hash", "new", "old", "op", "prev", "reason", "ref", "time"]
        );
        assert_eq!(e["ref"], "refs/heads/demo");
    }
    // Each entry names the one before it, by hash.
    assert_eq!(entries[0]["prev"], entries[1]["hash"]);
    assert_eq!(entries[1]["prev"], entries[2]["hash"]);
    assert_eq!(entries[2]["prev"], Value::Null);

    // The text form says the same, one line each.
    let text: String = entries
        .iter()
        .map(|e| {
            let short = |v: &Value| v.as_str().map_or("-".to_owned(), |h| h[..12].to_owned());
            format!(
                "{} {} refs/heads/demo: {}: {} -> {} ({})\n",
                e["op"],
                format_rfc3339_ms(e["time"].as_i64().unwrap()),
                e["reason"].as_str().unwrap(),
                short(&e["old"]),
                short(&e["new"]),
                e["actor"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(ok(s, &["reflog", "demo"], None), text);
    assert_eq!(ok(s, &["reflog", "refs/heads/demo"], None), text);

    // HEAD: symbolic targets print as "ref: NAME"; archiving detached it.
    let head = json(s, &["reflog", "--json", "HEAD"]);
    let head: Vec<(&str, Value)> = head
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["reason"].as_str().unwrap(), e["new"].clone()))
        .collect();
    assert_eq!(
        head,
        // A commit that leaves HEAD where it was is no move and logs nothing.
        [
            ("fork", json!("ref: refs/heads/f")),
            ("create", json!("ref: refs/heads/demo")),
        ]
    );
    let head_text = ok(s, &["reflog", "HEAD"], None);
    assert!(
        head_text
            .lines()
            .next()
            .unwrap()
            .contains(" HEAD: fork: ref: refs/heads/demo -> ref: refs/heads/f ("),
        "{head_text}"
    );

    // Without a ref: every entry, newest operation first.
    let every = json(s, &["reflog", "--json"]);
    let ops: Vec<u64> = every
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["op"].as_u64().unwrap())
        .collect();
    assert!(ops.windows(2).all(|w| w[0] >= w[1]), "{ops:?}");
    assert_eq!((ops[0], ops[ops.len() - 1]), (4, 1));
    assert!(every
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["ref"] == "refs/archive/demo" && e["reason"] == "archive"));
    assert_eq!(
        ok(s, &["reflog"], None).lines().count(),
        ops.len(),
        "one line per entry"
    );

    assert_eq!(
        fails(s, &["reflog", "nope"], None),
        (1, "sessctl: refs/heads/nope has no ref log\n".into())
    );
    assert_eq!(
        fails(s, &["reflog", "refs/remotes/x"], None).0,
        2,
        "not a ref name"
    );
}

fn update_ref_is_a_compare_and_swap(s: &TestStore) {
    let id1 = create(s, "demo", "hi");
    let id2 = id_of(&ok(s, &["commit", "--messages", "-"], Some("[]")));

    let (code, err) = fails(s, &["update-ref", "refs/heads/demo", &id1, &id1], None);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        format!("sessctl: refs/heads/demo moved: expected {id1}, found {id2}\n")
    );
    assert_eq!(
        ok(s, &["update-ref", "refs/heads/demo", &id1[..8], &id2], None),
        ""
    );
    assert_eq!(
        ok(s, &["for-each-ref"], None),
        format!("ref: refs/heads/demo HEAD\n{id1} refs/heads/demo\n")
    );

    // Create-only with "" or 64 zeros; a tag by name; delete with -d.
    let zeros = "0".repeat(64);
    assert_eq!(ok(s, &["update-ref", "refs/tags/v1", "demo", ""], None), "");
    assert_eq!(
        fails(s, &["update-ref", "refs/tags/v1", &id2, &zeros], None),
        (
            1,
            format!("sessctl: refs/tags/v1 moved: expected nothing, found {id1}\n")
        )
    );
    assert_eq!(ok(s, &["update-ref", "HEAD", &id2], None), "");
    assert_eq!(
        ok(s, &["for-each-ref"], None),
        format!("{id2} HEAD\n{id1} refs/heads/demo\n{id1} refs/tags/v1\n")
    );
    assert_eq!(
        ok(
            s,
            &["update-ref", "HEAD", "ref: refs/heads/demo", &id2],
            None
        ),
        ""
    );
    assert_eq!(
        fails(s, &["update-ref", "-d", "refs/tags/v1", &id2], None).0,
        1
    );
    assert_eq!(ok(s, &["update-ref", "-d", "refs/tags/v1", "v1"], None), "");
    assert_eq!(
        json(s, &["for-each-ref", "--json"]),
        json!([
            {"ref": "HEAD", "target": "ref: refs/heads/demo", "symbolic": true},
            {"ref": "refs/heads/demo", "target": id1, "symbolic": false},
        ])
    );
    let reasons: Vec<String> = json(s, &["reflog", "--json", "refs/tags/v1"])
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(reasons, ["update-ref", "update-ref"]);

    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["update-ref", "demo", &id1],
            2,
            "sessctl: 'demo' is not a ref: expected HEAD, refs/heads/NAME, refs/archive/NAME or refs/tags/NAME\n",
        ),
        (
            &["update-ref", "refs/heads/demo"],
            2,
            "sessctl: update-ref takes REF NEW [OLD], or -d REF [OLD]\n",
        ),
        (
            &["update-ref", "-d", "refs/heads/demo", &id1, &id1],
            2,
            "sessctl: update-ref -d takes REF and at most OLD\n",
        ),
        (
            &["update-ref", "refs/heads/demo", "ref: refs/heads/x"],
            1,
            "sessctl: only HEAD may point at another ref, and not at itself (refs/heads/demo -> refs/heads/x)\n",
        ),
    ];
    for (args, code, err) in cases {
        assert_eq!(fails(s, args, None), (*code, err.to_string()), "{args:?}");
    }
}

fn bad_input_gets_one_line_and_the_right_exit_code(s: &TestStore) {
    let obj = file(s, "obj.json", r#"{"role":"user"}"#);
    let dup = file(s, "dup.json", r#"[{"a":1,"a":2}]"#);
    let cases: &[(&[&str], Option<&str>, i32, &str)] = &[
        (
            &["commit", "--messages", "-"],
            Some("[]"),
            1,
            "sessctl: HEAD names no session yet: give a conversation, or start one with --new\n",
        ),
        (
            &["commit", "--new", "a b", "--messages", "-"],
            Some("[]"),
            2,
            "sessctl: name 'a b' contains ' '; only letters, digits, '.', '_' and '-' are allowed\n",
        ),
        (
            &["commit", "--new", "HEAD", "--messages", "-"],
            Some("[]"),
            2,
            "sessctl: name 'HEAD' is reserved\n",
        ),
        (
            &["commit", "nope", "--messages", "-"],
            Some("[]"),
            1,
            "sessctl: no conversation named nope\n",
        ),
        (
            &["commit", "--new", "--messages", &obj],
            None,
            1,
            &format!("sessctl: {obj}: expected a JSON array of messages, found an object\n"),
        ),
        (
            &["commit", "--new", "--messages", "-"],
            Some(r#"[{"role": "user", "content": "hi"}, 2]"#),
            1,
            "sessctl: standard input: message 1 is a number, not a JSON object (a message is an object such as {\"role\": \"user\", \"content\": \"...\"})\n",
        ),
        (
            &["commit", "--new", "--messages", &dup],
            None,
            1,
            &format!("sessctl: {dup}: invalid JSON: duplicate object key \"a\""),
        ),
        (
            &["commit", "--new", "--messages", "-"],
            Some("[1,"),
            1,
            "sessctl: standard input: invalid JSON: ",
        ),
        (
            &["commit", "--new", "--messages", "/no/such.json"],
            None,
            1,
            "sessctl: /no/such.json: ",
        ),
        (
            &["commit", "--new", "--messages", "-", "--status", "done"],
            Some("[]"),
            2,
            "sessctl: --status 'done' is not a status: expected one of created, committed, awaiting_tool_results, failed, archived\n",
        ),
        (
            &["commit", "--new", "--messages", "-", "--meta", "cwd=/tmp"],
            Some("[]"),
            2,
            "sessctl: --meta cwd: '/tmp' is not JSON; quote strings as JSON, e.g. --meta cwd='\"/tmp\"'\n",
        ),
        (
            &["commit", "--new", "--messages", "-", "--meta", "cwd"],
            Some("[]"),
            2,
            "sessctl: --meta takes KEY=JSON, not 'cwd'\n",
        ),
        (
            &["commit", "--new", "--messages", "-", "--meta", "session_type=\"robot\""],
            Some("[]"),
            2,
            "sessctl: --meta session_type must be \"agent\" or \"async_subagent\", not \"robot\"\n",
        ),
        (
            &["commit", "--new", "--messages", "-", "--meta", "a=1", "--meta", "a=2"],
            Some("[]"),
            2,
            "sessctl: --meta a is given twice\n",
        ),
        (
            &["commit", "--new", "--messages", "-", "--usage", r#"{"tokens":1}"#],
            Some("[]"),
            2,
            "sessctl: --usage: unknown key 'tokens': expected any of total_tokens, prompt_tokens, completion_tokens, requests, input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens\n",
        ),
        (
            &["commit", "--new", "--messages", "-", "--usage", r#"{"requests":-1}"#],
            Some("[]"),
            2,
            "sessctl: --usage: requests must be a whole number of at least 0, not -1\n",
        ),
        (
            &["commit", "--new", "--messages", "-", "--display", "-"],
            Some("[]"),
            2,
            "sessctl: only one of --messages, --display can read standard input\n",
        ),
        (
            &["fork", "nowhere"],
            None,
            1,
            "sessctl: unknown revision 'nowhere': not a conversation, ref, tag or object id\n",
        ),
    ];
    for (args, stdin, code, prefix) in cases {
        let r = sessctl(s, args, *stdin);
        assert_eq!(r.code, *code, "{args:?}: {}", r.stderr);
        assert!(r.stderr.starts_with(prefix), "{args:?}: {:?}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {:?}", r.stderr);
        assert_eq!(r.stdout, "", "{args:?}");
    }
    // Exactly one of --messages and --history (a clap usage error).
    assert_eq!(sessctl(s, &["commit", "--new"], None).code, 2);
    let r = sessctl(
        s,
        &["commit", "--new", "--messages", &obj, "--history", &obj],
        None,
    );
    assert_eq!(r.code, 2);
    assert_eq!(
        ok(s, &["ls", "--all", "--json"], None),
        "[]\n",
        "nothing was written"
    );

    // HEAD detached by archiving its conversation: say so.
    let id = create(s, "gone", "x");
    ok(s, &["archive", "gone"], None);
    assert_eq!(
        fails(s, &["commit", "--messages", "-"], Some("[]")),
        (
            1,
            format!(
                "sessctl: HEAD is detached at {}, not on a conversation: give a conversation, or start one with --new\n",
                &id[..12]
            )
        )
    );
}

fn commit_new_without_a_name_names_it_after_its_root(s: &TestStore) {
    let id = id_of(&ok(
        s,
        &["commit", "--new", "--history", "-"],
        Some(&array(&[msg("user", "hi")])),
    ));
    assert_eq!(session(s, &id)["messages"]["base"], 0);
    let list = json(s, &["ls", "--json"]);
    assert_eq!(list[0]["name"], json!(&id[..12]));
    assert_eq!(
        fails(
            s,
            &["commit", "--new", &id[..12], "--messages", "-"],
            Some("[]")
        ),
        (
            1,
            format!(
                "sessctl: a conversation named {} exists already\n",
                &id[..12]
            )
        )
    );
}

/// Enough history for the index to have something to get wrong.
fn busy_store() -> (tempfile::TempDir, PathBuf) {
    let (d, s) = store();
    create(&s, "one", "first");
    ok(
        &s,
        &["commit", "--messages", "-"],
        Some(&array(&[msg("assistant", "a")])),
    );
    create(&s, "two", "second");
    ok(
        &s,
        &["fork", "one", "--at-message", "1", "--as", "three"],
        None,
    );
    ok(
        &s,
        &["commit", "three", "--messages", "-"],
        Some(&array(&[msg("user", "b")])),
    );
    ok(&s, &["archive", "two"], None);
    ok(&s, &["fork", "one"], None);
    ok(&s, &["rm", "one"], None);
    (d, s)
}

// Local only: deletes the index directory on disk.
#[test]
fn reindex_after_losing_the_index_gives_identical_output() {
    let (_d, s) = busy_store();
    let ls = ok(&s, &["ls", "--all", "--json"], None);
    let ls_text = ok(&s, &["ls", "--all"], None);
    let reflog = ok(&s, &["reflog", "--json"], None);
    let refs = ok(&s, &["for-each-ref"], None);
    let ops = json(&s, &["reflog", "--json"])[0]["op"].as_u64().unwrap();

    std::fs::remove_dir_all(s.join("index")).unwrap();
    assert_eq!(
        ok(&s, &["reindex"], None),
        format!("reindexed {ops} operations\n")
    );
    assert_eq!(ok(&s, &["ls", "--all", "--json"], None), ls);
    assert_eq!(ok(&s, &["ls", "--all"], None), ls_text);
    assert_eq!(ok(&s, &["reflog", "--json"], None), reflog);
    assert_eq!(ok(&s, &["for-each-ref"], None), refs);
    // And a reindex of an intact index changes nothing either.
    assert_eq!(
        ok(&s, &["reindex"], None),
        format!("reindexed {ops} operations\n")
    );
    assert_eq!(ok(&s, &["ls", "--all", "--json"], None), ls);
}

// Local only: holds the store directory's LOCK file.
#[test]
fn readers_work_while_another_process_holds_the_store() {
    let (_d, s) = busy_store();
    let ls = ok(&s, &["ls", "--all", "--json"], None);
    let reflog = ok(&s, &["reflog", "--json"], None);
    let refs = ok(&s, &["for-each-ref", "--json"], None);
    let dry = ok(&s, &["prune", "--keep", "0", "--dry-run"], None);

    let lock = support::hold_lock(&s, "4242");

    // Readers take no lock: the same answers, no extra output.
    assert_eq!(ok(&s, &["ls", "--all", "--json"], None), ls);
    assert_eq!(ok(&s, &["reflog", "--json"], None), reflog);
    assert_eq!(ok(&s, &["for-each-ref", "--json"], None), refs);
    assert_eq!(ok(&s, &["prune", "--keep", "0", "--dry-run"], None), dry);
    let in_use = format!(
        "sessctl: store {} is in use by pid 4242: it held the store's write lock for longer than this write waits (give it longer with --wait)\n",
        s.display()
    );
    for args in [
        &["commit", "three", "--messages", "-"][..],
        &["archive", "three"],
        &["prune", "--keep", "0"],
        &["update-ref", "-d", "refs/heads/three"],
    ] {
        // Without waiting: each would otherwise wait the default 5 seconds.
        let args = [&["--wait", "0"][..], args].concat();
        assert_eq!(
            fails(&s, &args, Some("[]")),
            (4, in_use.clone()),
            "{args:?}"
        );
    }
    assert_eq!(
        sessctl(
            &s,
            &["--wait", "0.2", "commit", "three", "--messages", "-"],
            Some("[]")
        )
        .code,
        4
    );
    // Derived data is not the write lock's: reindex goes on beside a writer.
    ok(&s, &["reindex"], None);
    drop(lock);
    id_of(&ok(&s, &["commit", "three", "--messages", "-"], Some("[]")));
}

#[test]
fn a_closed_pipe_is_not_an_error() {
    let (_d, s) = busy_store();
    for args in [&["ls", "--all"][..], &["reflog"], &["for-each-ref"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
            .arg("--store")
            .arg(&s)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
    }
}

fn display_messages_and_states_are_given_as_files(s: &TestStore) {
    let display = file(
        s,
        "display.json",
        &array(&[msg("user", "hi"), msg("system", "(tool output hidden)")]),
    );
    let env = file(s, "env.json", r#"{"cwd": "/src", "branch": "main"}"#);
    let id1 = id_of(&ok(
        s,
        &[
            "commit",
            "--new",
            "d",
            "--messages",
            "-",
            "--display",
            &display,
            "--environment-state",
            &env,
        ],
        Some(&array(&[msg("user", "hi")])),
    ));
    let s1 = session(s, &id1);
    assert_eq!(s1["messages"]["added"].as_array().unwrap().len(), 1);
    assert_eq!(s1["display_messages"]["added"].as_array().unwrap().len(), 2);
    let env_id = s1["environment_state"].as_str().unwrap().to_owned();
    assert_eq!(
        ok(s, &["cat-object", "--json", &env_id], None),
        "{\"branch\":\"main\",\"cwd\":\"/src\"}\n"
    );
    // Without the flags, the next session mirrors its messages and keeps
    // the parent's states.
    let id2 = id_of(&ok(
        s,
        &["commit", "d", "--messages", "-"],
        Some(&array(&[msg("assistant", "hello")])),
    ));
    let s2 = session(s, &id2);
    assert_eq!(s2["display_messages"]["base"], 2);
    assert_eq!(s2["display_messages"]["added"], s2["messages"]["added"]);
    assert_eq!(s2["environment_state"], json!(env_id));
    assert_eq!(s2["context_state"], Value::Null);
}

/// The index tables in a store's `index/`.
fn tables(s: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(s.join("index"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sit"))
        .collect();
    out.sort();
    out
}

/// Every `ls` variant, answered from whatever tables there are, then after
/// `reindex` (one table of everything), then with no index at all (every
/// operation applied in memory): the same each time.
fn ls_three_ways(s: &Path, variants: &[&[&str]]) {
    for args in variants {
        let before = ok(s, args, None);
        ok(s, &["reindex"], None);
        assert_eq!(tables(s).len(), 1, "reindex leaves one table");
        assert_eq!(ok(s, args, None), before, "{args:?} after reindex");
        std::fs::remove_dir_all(s.join("index")).unwrap();
        assert_eq!(ok(s, args, None), before, "{args:?} without an index");
    }
}

// Local only: removes index tables on disk.
#[test]
fn ls_answers_the_same_from_tables_from_the_journal_and_after_reindex() {
    let (_d, s) = busy_store();
    let variants: &[&[&str]] = &[
        &["ls"],
        &["ls", "--json"],
        &["ls", "--all", "--json"],
        &["ls", "--archived"],
        &["ls", "--all", "--limit", "2"],
        &["ls", "--limit", "0", "--json"],
    ];
    ls_three_ways(&s, variants);

    // A write after the tables: the newest comes from the journal tail.
    ok(
        &s,
        &["commit", "three", "--messages", "-", "--no-sync"],
        Some(&array(&[msg("user", "later")])),
    );
    let newest = json(&s, &["ls", "--json", "--limit", "1"]);
    assert_eq!(newest[0]["name"], "three");

    // Enough operations that writers fold them into tables as they go.
    let n = sessctl_store::index::TABLE_EVERY as usize * 2 + 10;
    {
        let store = sessctl_store::Store::open(&s, &Default::default()).unwrap();
        for i in 0..n {
            let turn = sessctl_store::Turn {
                messages: sessctl_store::Messages::Added(vec![msg("user", &format!("m{i}"))]),
                ..Default::default()
            };
            store
                .create(
                    Some(&format!("bulk{i:04}")),
                    turn,
                    sessctl_store::Durability::NoSync,
                )
                .unwrap();
        }
    }
    assert!(!tables(&s).is_empty(), "writers wrote tables");
    let all = json(&s, &["ls", "--all", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), n + 3);
    assert_eq!(all[0]["name"], format!("bulk{:04}", n - 1));
    ls_three_ways(&s, &[&["ls", "--limit", "20", "--json"], &["ls", "--all"]]);
    let r = sessctl(&s, &["fsck"], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
}

// Local only: damages an index table file on disk.
#[test]
fn fsck_reports_a_damaged_index_table_and_reindex_replaces_it() {
    let (_d, s) = busy_store();
    let want = ok(&s, &["ls", "--all", "--json"], None);
    ok(&s, &["reindex"], None);
    let table = tables(&s).pop().unwrap();
    let mut bytes = std::fs::read(&table).unwrap();
    // A flipped bit in the middle of the records: opening does not read
    // the checksum (that would cost every process the whole file); fsck
    // does.
    let mid = bytes.len() - 200;
    bytes[mid] ^= 0x01;
    std::fs::write(&table, &bytes).unwrap();
    let r = sessctl(&s, &["fsck"], None);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stdout
            .contains(&table.file_name().unwrap().to_string_lossy().to_string()),
        "{r:?}"
    );
    ok(&s, &["reindex"], None);
    let r = sessctl(&s, &["fsck"], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
    assert_eq!(ok(&s, &["ls", "--all", "--json"], None), want);

    // A file that does not even open, named as the longest table: readers
    // read around it with a warning, fsck names it, reindex removes it.
    let garbage = s
        .join("index")
        .join("0000000000000001-0000000000009999.sit");
    std::fs::write(&garbage, b"not a table").unwrap();
    let r = sessctl(&s, &["ls", "--all", "--json"], None);
    assert_eq!(r.stdout, want);
    assert!(r.stderr.contains("ignoring the index tables"), "{r:?}");
    let r = sessctl(&s, &["fsck"], None);
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stdout.contains("0000000000000001-0000000000009999.sit"),
        "{r:?}"
    );
    // (It opens the store, which warns once more.)
    assert_eq!(sessctl(&s, &["reindex"], None).code, 0);
    assert!(!garbage.exists());
    let r = sessctl(&s, &["fsck"], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
}
