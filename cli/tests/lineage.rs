//! End to end: `log`, `graph`, `merge-base`, `rev-parse`, `show` and `diff`
//! run as the real binary on a store with a fork and a merge, built through
//! the library with fixed times so that ids and output are exact.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{Run, Target, TestStore};

use serde_json::{json, Value};
use sessctl_store::refs::{PreviousValue, RefEdit};
use sessctl_store::{
    Cut, Durability, ForkOptions, Messages, ObjectId, RefName, RefTarget, RunSummary,
    SessionMetadata, Transaction, Turn, Usage,
};

two_backends!(
    log_oneline_graph_draws_the_fork_and_the_merge,
    log_prints_entries_like_git,
    log_json_has_the_documented_shape,
    the_dot_graph_is_deterministic_and_labelled,
    merge_base_answers_like_git,
    rev_parse_resolves_steps_and_reports_why_not,
    show_prints_a_session_and_its_messages,
    diff_shows_messages_and_state_each_side_lacks,
);

/// The lineage commands read no standard input.
fn sessctl<T: Target + ?Sized>(store: &T, args: &[&str]) -> Run {
    support::sessctl(store, args, None)
}

fn ok<T: Target + ?Sized>(store: &T, args: &[&str]) -> String {
    let r = sessctl(store, args);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout
}

const T0: i64 = 1_763_000_000_000;

fn turn(at: i64, texts: &[(&str, &str)]) -> Turn {
    Turn {
        messages: Messages::Added(
            texts
                .iter()
                .map(|(role, text)| json!({"role": role, "content": text}))
                .collect(),
        ),
        created_at: Some(T0 + at),
        ..Turn::default()
    }
}

/// The sessions of the fixture.
struct Ids {
    r: ObjectId,
    s1: ObjectId,
    f1: ObjectId,
    s2: ObjectId,
    m: ObjectId,
    f2: ObjectId,
    o: ObjectId,
}

/// fix:   R - S1 - S2 - M (M merges F1); the tag golden at S1
/// retry:        \- F1 - F2 (a fork of S1 that keeps its first 3 messages)
/// other: O, unrelated. HEAD names fix.
fn fixture(s: &TestStore) -> Ids {
    let store = s.library();
    let d = Durability::NoSync;
    let mut t = turn(
        0,
        &[("user", "Fix the flaky test"), ("assistant", "Looking.")],
    );
    t.title = Some("Fix CI".into());
    let (_, r) = store.create(Some("fix"), t, d).unwrap();
    let mut t = turn(
        1000,
        &[("user", "Run it again\nwith -v"), ("assistant", "Passes.")],
    );
    t.run = RunSummary {
        duration_ms: 1500,
        usage: Usage {
            total_tokens: 42,
            prompt_tokens: 30,
            completion_tokens: 12,
            requests: 1,
        },
    };
    let s1 = store.commit("fix", None, t, d).unwrap();
    let (_, f1) = store
        .fork(
            s1,
            ForkOptions {
                name: Some("retry".into()),
                cut: Some(Cut::AtMessage(3)),
                turn: Some(turn(2000, &[("user", "Try another way")])),
            },
            d,
        )
        .unwrap();
    let mut t = turn(3000, &[("user", "Add a test"), ("assistant", "Added.")]);
    t.context_state = Some(json!({"files": ["a.rs"]}));
    let s2 = store.commit("fix", None, t, d).unwrap();
    let mut t = turn(4000, &[("user", "Merge the retry")]);
    t.title = Some("Merge retry".into());
    t.metadata = SessionMetadata {
        transport: Some("cli".into()),
        extra: [("cwd".to_owned(), json!("/src"))].into_iter().collect(),
        ..SessionMetadata::default()
    };
    let m = store.merge("fix", &[f1], t, d).unwrap();
    let mut t = turn(5000, &[("user", "Still trying")]);
    t.context_state = Some(json!({"files": ["b.rs", "c.rs"]}));
    t.metadata.extra = [("cwd".to_owned(), json!("/tmp"))].into_iter().collect();
    let f2 = store.commit("retry", None, t, d).unwrap();
    let (_, o) = store
        .create(Some("other"), turn(6000, &[("user", "Unrelated")]), d)
        .unwrap();
    store
        .transact(
            Transaction {
                reason: "tag".into(),
                edits: vec![
                    RefEdit {
                        name: RefName::tag("golden").unwrap(),
                        expected: PreviousValue::MustNotExist,
                        new: Some(RefTarget::Session(s1)),
                    },
                    RefEdit {
                        name: RefName::Head,
                        expected: PreviousValue::Any,
                        new: Some(RefTarget::Symbolic(RefName::conversation("fix").unwrap())),
                    },
                ],
                ..Transaction::default()
            },
            d,
        )
        .unwrap();
    drop(store);
    Ids {
        r,
        s1,
        f1,
        s2,
        m,
        f2,
        o,
    }
}

fn short(id: &ObjectId) -> String {
    id.to_hex_prefix(12)
}

fn log_oneline_graph_draws_the_fork_and_the_merge(s: &TestStore) {
    let i = fixture(s);
    let (o, f2, m, s2, f1, s1, r) = (
        short(&i.o),
        short(&i.f2),
        short(&i.m),
        short(&i.s2),
        short(&i.f1),
        short(&i.s1),
        short(&i.r),
    );
    assert_eq!(
        ok(s, &["log", "--oneline", "--graph", "--all"]),
        format!(
            "* {o} (other) Unrelated\n\
             \n\
             * {f2} (retry) Still trying\n\
             | * {m} (HEAD -> fix) Merge retry\n\
             |/|\n\
             | * {s2} Add a test\n\
             * | {f1} Try another way\n\
             |/\n\
             * {s1} (tag: golden) Run it again\n\
             * {r} Fix CI\n"
        )
    );
    // `graph` is the same picture by default.
    assert_eq!(
        ok(s, &["graph"]),
        ok(s, &["log", "--oneline", "--graph", "--all"])
    );
    // From HEAD only, without lanes; --first-parent skips the merged line.
    assert_eq!(
        ok(s, &["log", "--oneline"]),
        format!(
            "{m} (HEAD -> fix) Merge retry\n{s2} Add a test\n{f1} Try another way\n\
             {s1} (tag: golden) Run it again\n{r} Fix CI\n"
        )
    );
    assert_eq!(
        ok(s, &["log", "--oneline", "--first-parent", "-n", "3", "fix"]),
        format!(
            "{m} (HEAD -> fix) Merge retry\n{s2} Add a test\n{s1} (tag: golden) Run it again\n"
        )
    );
    assert_eq!(
        ok(s, &["log", "--oneline", "--graph", "retry", "golden"]),
        format!(
            "* {f2} (retry) Still trying\n* {f1} Try another way\n\
             * {s1} (tag: golden) Run it again\n* {r} Fix CI\n"
        )
    );
}

fn log_prints_entries_like_git(s: &TestStore) {
    let i = fixture(s);
    let (m, s2, f1) = (i.m, short(&i.s2), short(&i.f1));
    assert_eq!(
        ok(s, &["log", "-n", "2", "fix"]),
        format!(
            "session {m} (HEAD -> fix)\n\
             Merge:        {s2} {f1}\n\
             Conversation: fix\n\
             Date:         2025-11-13T02:13:24.000Z\n\
             Status:       committed\n\
             Messages:     7\n\
             Usage:        0 tokens (0 prompt, 0 completion), 0 requests\n\
             \n    Merge retry\n\
             \n\
             session {}\n\
             Conversation: fix\n\
             Date:         2025-11-13T02:13:23.000Z\n\
             Status:       committed\n\
             Messages:     6\n\
             Usage:        0 tokens (0 prompt, 0 completion), 0 requests\n\
             \n    Add a test\n",
            i.s2
        )
    );
    // The last user message this session added, first line only.
    let golden = ok(s, &["log", "-n", "1", "golden"]);
    assert!(golden.contains(
        "Usage:        42 tokens (30 prompt, 12 completion), 1 request\n\n    Run it again\n"
    ));
    // With lanes: the entry's further lines carry them.
    let graph = ok(s, &["log", "--graph", "-n", "3"]);
    let lines: Vec<&str> = graph.lines().collect();
    assert_eq!(lines[0], format!("* session {m} (HEAD -> fix)"));
    assert_eq!(lines[1], format!("| Merge:        {s2} {f1}"));
    assert_eq!(lines[7], "|");
    assert_eq!(lines[8], "|     Merge retry");
    assert_eq!(lines[9], "|\\");
    assert_eq!(lines[10], "| |");
    assert_eq!(lines[11], format!("* | session {}", i.s2));
}

fn log_json_has_the_documented_shape(s: &TestStore) {
    let i = fixture(s);
    let v: Value = serde_json::from_str(&ok(s, &["log", "--json", "-n", "2"])).unwrap();
    let entries = v.as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(
        entries[0],
        json!({
            "id": i.m.to_hex(),
            "parents": [i.s2.to_hex(), i.f1.to_hex()],
            "conversation": i.r.to_hex(),
            "conversation_name": "fix",
            "status": "committed",
            "created_at": T0 + 4000,
            "messages": 7,
            "usage": {"total_tokens": 0, "prompt_tokens": 0, "completion_tokens": 0, "requests": 0},
            "title": "Merge retry",
            "summary": "Merge retry",
            "refs": ["HEAD", "refs/heads/fix"],
        })
    );
    assert_eq!(entries[1]["summary"], "Add a test");
    assert_eq!(entries[1]["title"], Value::Null);
    assert_eq!(entries[1]["refs"], json!([]));
    let all: Value = serde_json::from_str(&ok(s, &["log", "--json", "--all"])).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 7);
    assert_eq!(all[3]["refs"], json!([]), "{all}");
    assert_eq!(all[5]["refs"], json!(["refs/tags/golden"]));
    // An empty walk is an empty array.
    assert_eq!(ok(s, &["log", "--json", "-n", "0"]), "[]\n");
    // --json and the text forms exclude each other.
    assert_eq!(sessctl(s, &["log", "--json", "--oneline"]).code, 2);
}

fn the_dot_graph_is_deterministic_and_labelled(s: &TestStore) {
    let i = fixture(s);
    let dot = ok(s, &["graph", "--format", "dot", "fix"]);
    assert_eq!(dot, ok(s, &["graph", "--format", "dot", "fix"]));
    let (m, s2, f1, s1, r) = (i.m, i.s2, i.f1, i.s1, i.r);
    let node =
        |id: &ObjectId, label: &str| format!("  \"{id}\" [label=\"{}\\n{label}\"];\n", short(id));
    assert_eq!(
        dot,
        format!(
            "digraph sessions {{\n  node [shape=box, fontname=\"monospace\"];\n{}{}{}{}{}\
             \x20 \"{m}\" -> \"{s2}\";\n  \"{m}\" -> \"{f1}\" [style=dashed];\n\
             \x20 \"{s2}\" -> \"{s1}\";\n  \"{f1}\" -> \"{s1}\";\n  \"{s1}\" -> \"{r}\";\n}}\n",
            node(&m, "fix\\n7 messages"),
            node(&s2, "6 messages"),
            node(&f1, "4 messages"),
            node(&s1, "tag: golden\\n4 messages"),
            node(&r, "2 messages"),
        )
    );
    let r = sessctl(s, &["graph", "--format", "svg"]);
    assert_eq!(r.code, 2);
}

fn merge_base_answers_like_git(s: &TestStore) {
    let i = fixture(s);
    assert_eq!(
        ok(s, &["merge-base", "fix", "retry"]),
        format!("{}\n", i.f1)
    );
    assert_eq!(
        ok(s, &["merge-base", "fix~1", "retry"]),
        format!("{}\n", i.s1)
    );
    assert_eq!(
        ok(s, &["merge-base", "--all", "fix~1", "retry~1"]),
        format!("{}\n", i.s1)
    );
    // No common history: exit 1, nothing printed.
    let r = sessctl(s, &["merge-base", "fix", "other"]);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (1, "", ""));
    let r = sessctl(s, &["merge-base", "--all", "fix", "other"]);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (1, "", ""));
    for (a, b, code) in [
        ("golden", "fix", 0),
        ("retry~1", "fix", 0),
        ("fix", "fix", 0),
        ("retry", "fix", 1),
        ("fix", "golden", 1),
        ("other", "fix", 1),
    ] {
        let r = sessctl(s, &["merge-base", "--is-ancestor", a, b]);
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (code, "", ""),
            "{a} {b}"
        );
    }
    // A revision that does not resolve is an error, not a "no".
    let r = sessctl(s, &["merge-base", "--is-ancestor", "nope", "fix"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.starts_with("sessctl: unknown revision 'nope'"));
}

fn rev_parse_resolves_steps_and_reports_why_not(s: &TestStore) {
    let i = fixture(s);
    assert_eq!(
        ok(
            s,
            &[
                "rev-parse",
                "fix",
                "fix~1",
                "fix^2",
                "fix^2~1",
                "fix~3",
                "HEAD^^",
                "@~0",
                "retry^0"
            ]
        ),
        [i.m, i.s2, i.f1, i.s1, i.r, i.s1, i.m, i.f2]
            .iter()
            .map(|x| format!("{x}\n"))
            .collect::<String>()
    );
    assert_eq!(
        ok(s, &["rev-parse", &i.m.to_hex()[..8], "tags/golden~"]),
        format!("{}\n{}\n", i.m, i.r)
    );
    let cases: &[(&str, i32, &str)] = &[
        ("fix~9", 1, "sessctl: fix~9: fix has only 3 first-parent ancestors\n"),
        ("fix^3", 1, "sessctl: fix^3: session fix has 2 parents\n"),
        ("fix~1^2", 1, "sessctl: fix~1^2: session fix~1 has 1 parent\n"),
        ("fix~3~", 1, "sessctl: fix~3~: fix~3 has no parents\n"),
        ("nope~1", 1, "sessctl: unknown revision 'nope': not a conversation, ref, tag or object id\n"),
        (
            "fix~x",
            2,
            "sessctl: 'fix~x' is not a revision: after '~' expected a number, '~' or '^', found 'x'\n",
        ),
        ("^2", 2, "sessctl: '^2' is not a revision: '^' needs a name or id before it\n"),
        ("", 2, "sessctl: a revision cannot be empty\n"),
    ];
    for (rev, code, err) in cases {
        let r = sessctl(s, &["rev-parse", "fix", rev]);
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (*code, "", *err),
            "{rev}"
        );
    }
    // Malformed revisions are refused before the store is opened.
    let missing = s.scratch().join("no-store");
    assert_eq!(sessctl(&missing, &["rev-parse", "a~b"]).code, 2);
    assert_eq!(sessctl(s, &["rev-parse"]).code, 2);
}

fn show_prints_a_session_and_its_messages(s: &TestStore) {
    let i = fixture(s);
    assert_eq!(
        ok(s, &["show", "golden"]),
        format!(
            "session {} (tag: golden)\n\
             Parent:       {}\n\
             Conversation: fix ({})\n\
             Date:         2025-11-13T02:13:21.000Z\n\
             Status:       committed\n\
             Type:         agent\n\
             Run:          1500 ms, 1 request\n\
             Usage:        42 tokens (30 prompt, 12 completion)\n\
             Messages:     2 kept from the parent, 2 added, 4 in all\n\
             \n\
             Added:\n\
             [2] user\n    Run it again\n    with -v\n\
             [3] assistant\n    Passes.\n",
            i.s1, i.r, i.r
        )
    );
    let v: Value = serde_json::from_str(&ok(s, &["show", "--json"])).unwrap();
    assert_eq!(v["id"], i.m.to_hex());
    assert_eq!(v["kind"], "session");
    assert_eq!(v["parents"], json!([i.s2.to_hex(), i.f1.to_hex()]));
    assert_eq!(v["conversation_name"], "fix");
    assert_eq!(v["refs"], json!(["HEAD", "refs/heads/fix"]));
    assert_eq!(v["history_length"], 7);
    assert_eq!(v["messages"]["base"], 6);
    assert_eq!(v["metadata"]["extra"], json!({"cwd": "/src"}));
    assert_eq!(v["run"]["usage"]["total_tokens"], 0);
    let shown = v["shown_messages"].as_array().unwrap();
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0]["index"], 6);
    assert_eq!(
        shown[0]["value"],
        json!({"role": "user", "content": "Merge the retry"})
    );
    assert_eq!(shown[0]["id"], v["messages"]["added"][0]);
    let whole: Value =
        serde_json::from_str(&ok(s, &["show", "--json", "--messages", "fix"])).unwrap();
    let shown = whole["shown_messages"].as_array().unwrap();
    assert_eq!(shown.len(), 7);
    assert_eq!(shown[0]["value"]["content"], "Fix the flaky test");
    assert_eq!(
        shown
            .iter()
            .map(|m| m["index"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    let text = ok(s, &["show", "--messages", "fix"]);
    assert!(text.contains("\nHistory:\n[0] user\n    Fix the flaky test\n[1] assistant\n"));
    assert!(text.contains("Metadata:     cwd = \"/src\"\n"));
    assert!(text.contains("Transport:    cli\n"));
}

fn diff_shows_messages_and_state_each_side_lacks(s: &TestStore) {
    let i = fixture(s);
    let v: Value = serde_json::from_str(&ok(s, &["diff", "--json", "fix", "retry"])).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "a",
            "b",
            "common_prefix",
            "context_state",
            "environment_state",
            "merge_base",
            "merge_bases",
            "messages",
            "metadata",
            "only_in_a",
            "only_in_b",
            "title"
        ]
    );
    assert_eq!(v["a"], i.m.to_hex());
    assert_eq!(v["b"], i.f2.to_hex());
    assert_eq!(v["merge_base"], i.f1.to_hex());
    assert_eq!(v["merge_bases"], json!([i.f1.to_hex()]));
    assert_eq!(v["common_prefix"], 3);
    let a: Vec<(u64, Value)> = v["messages"]["a"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["index"].as_u64().unwrap(), m["value"]["content"].clone()))
        .collect();
    assert_eq!(
        a,
        vec![
            (3, json!("Passes.")),
            (4, json!("Add a test")),
            (5, json!("Added.")),
            (6, json!("Merge the retry")),
        ]
    );
    let b = v["messages"]["b"].as_array().unwrap();
    assert_eq!(b.len(), 2);
    assert_eq!(b[0]["value"]["content"], "Try another way");
    assert_eq!(b[0]["in_other"], Value::Null);
    assert_eq!(v["only_in_a"].as_array().unwrap().len(), 4);
    assert_eq!(v["only_in_b"], json!([b[0]["id"], b[1]["id"]]));
    assert_eq!(
        v["title"],
        json!([{"path": "", "op": "changed", "old": "Merge retry", "new": null}])
    );
    assert_eq!(
        v["metadata"],
        json!([
            {"path": "/extra/cwd", "op": "changed", "old": "/src", "new": "/tmp"},
            {"path": "/transport", "op": "removed", "old": "cli"},
        ])
    );
    assert_eq!(
        v["context_state"],
        json!([
            {"path": "/files/0", "op": "changed", "old": "a.rs", "new": "b.rs"},
            {"path": "/files/1", "op": "added", "new": "c.rs"},
        ])
    );
    assert_eq!(v["environment_state"], json!([]));

    // The same message at another position is found by id.
    let v: Value = serde_json::from_str(&ok(s, &["diff", "--json", "golden", "fix"])).unwrap();
    assert_eq!(v["common_prefix"], 4);
    assert_eq!(v["messages"]["a"], json!([]));
    assert_eq!(v["messages"]["b"].as_array().unwrap().len(), 3);
    assert_eq!(v["only_in_a"], json!([]));

    let text = ok(s, &["diff", "fix~1", "retry"]);
    assert_eq!(
        text,
        format!(
            "a:          {}\n\
             b:          {}\n\
             merge base: {}\n\
             common:     3 messages; then a has 3, b has 2\n\
             \n\
             - [3] assistant: Passes.\n\
             - [4] user: Add a test\n\
             - [5] assistant: Added.\n\
             + [3] user: Try another way\n\
             + [4] user: Still trying\n\
             \n\
             metadata:\n\
             \x20 + /extra: {{\"cwd\":\"/tmp\"}}\n\
             \n\
             context_state:\n\
             \x20 ~ /files/0: \"a.rs\" -> \"b.rs\"\n\
             \x20 + /files/1: \"c.rs\"\n",
            i.s2, i.f2, i.s1
        )
    );
    let r = sessctl(s, &["diff", "fix", "other"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("merge base: none (no common history)\n"));
}
