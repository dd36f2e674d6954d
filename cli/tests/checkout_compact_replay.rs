//! End to end: `checkout`, `resume`, `compact` and `replay` run as the real
//! binary on temporary stores; stdout, stderr, exit codes and files compared
//! as a user or a script sees them.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{sessctl, Target, TestStore};

use std::path::Path;

use serde_json::{json, Value};
use sessctl_store::replay::Cassette;
use sessctl_store::ObjectId;

two_backends!(
    checkout_moves_head_and_writes_a_byte_exact_seed,
    resume_prints_a_summary_or_the_history,
    compact_keeps_the_old_head_as_parent_and_refuses_bad_summaries,
    compact_with_max_tokens_runs_only_at_the_threshold,
    replay_prints_one_line_per_turn,
    a_cassette_replays_a_loop_recorded_by_the_binary,
);

/// Runs and expects success with nothing on stderr; returns stdout.
fn ok<T: Target + ?Sized>(store: &T, args: &[&str], stdin: Option<&str>) -> String {
    let r = sessctl(store, args, stdin);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout
}

/// Commits messages (a JSON array) to a conversation; returns the session id.
fn commit<T: Target + ?Sized>(
    store: &T,
    conv: &str,
    new: bool,
    messages: &Value,
    extra: &[&str],
) -> String {
    let mut args = vec!["commit", conv, "--messages", "-"];
    if new {
        args.push("--new");
    }
    args.extend_from_slice(extra);
    let out = ok(store, &args, Some(&messages.to_string()));
    out.trim().to_owned()
}

fn head_ref<T: Target + ?Sized>(store: &T) -> String {
    let out = ok(store, &["for-each-ref"], None);
    out.lines()
        .find(|l| l.ends_with(" HEAD"))
        .unwrap()
        .trim_end_matches(" HEAD")
        .to_owned()
}

fn conv_head<T: Target + ?Sized>(store: &T, conv: &str) -> String {
    let out = ok(store, &["for-each-ref"], None);
    let suffix = format!(" refs/heads/{conv}");
    out.lines()
        .find(|l| l.ends_with(&suffix))
        .unwrap()
        .trim_end_matches(&suffix)
        .to_owned()
}

fn cat_json<T: Target + ?Sized>(store: &T, id: &str) -> Value {
    serde_json::from_str(&ok(store, &["cat-object", "--json", id], None)).unwrap()
}

/// A conversation "fix" of 6 messages in 2 sessions, with a context state;
/// returns the two session ids.
fn fix_conversation<T: Target + ?Sized>(dir: &Path, s: &T) -> (String, String) {
    let state = dir.join("ctx.json");
    std::fs::write(&state, r#"{"plan": ["read", "fix"], "cwd": "/src"}"#).unwrap();
    let a = commit(
        s,
        "fix",
        true,
        &json!([{"role": "user", "content": "Fix the flaky test\nin CI"},
                {"role": "assistant", "content": "Looking."}]),
        &[
            "--context-state",
            state.to_str().unwrap(),
            "--title",
            "Flaky",
        ],
    );
    let b = commit(
        s,
        "fix",
        false,
        &json!([{"role": "user", "content": "go"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                 "function": {"name": "ls", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.rs"},
                {"role": "assistant", "content": "Done."}]),
        &[
            "--usage",
            r#"{"prompt_tokens":10,"completion_tokens":5}"#,
            "--duration-ms",
            "300",
        ],
    );
    (a, b)
}

const STATE_JSON: &str = r#"{
  "context_state": {
    "cwd": "/src",
    "plan": [
      "read",
      "fix"
    ]
  },
  "environment_state": null,
  "message_history": [
    {
      "content": "Fix the flaky test\nin CI",
      "role": "user"
    },
    {
      "content": "Looking.",
      "role": "assistant"
    },
    {
      "content": "go",
      "role": "user"
    },
    {
      "content": null,
      "role": "assistant",
      "tool_calls": [
        {
          "function": {
            "arguments": "{}",
            "name": "ls"
          },
          "id": "c1",
          "type": "function"
        }
      ]
    },
    {
      "content": "a.rs",
      "role": "tool",
      "tool_call_id": "c1"
    },
    {
      "content": "Done.",
      "role": "assistant"
    }
  ]
}
"#;

fn checkout_moves_head_and_writes_a_byte_exact_seed(s: &TestStore) {
    let dir = s.scratch();
    let (a, b) = fix_conversation(&dir, s);
    commit(
        s,
        "other",
        true,
        &json!([{"role": "user", "content": "x"}]),
        &[],
    );
    assert_eq!(head_ref(s), "ref: refs/heads/other");

    // Quiet by default; HEAD names the conversation.
    assert_eq!(ok(s, &["checkout", "fix"], None), "");
    assert_eq!(head_ref(s), "ref: refs/heads/fix");

    // With -o: one line, and the same bytes on every run.
    let mut seeds = Vec::new();
    for out in ["seed1", "seed2/nested"] {
        let d = dir.join(out);
        let d_text = d.to_str().unwrap();
        let stdout = ok(s, &["checkout", "refs/heads/fix", "-o", d_text], None);
        assert_eq!(
            stdout,
            format!("wrote {d_text}/state.json and {d_text}/display_messages.json\n")
        );
        let state = std::fs::read_to_string(d.join("state.json")).unwrap();
        let display = std::fs::read_to_string(d.join("display_messages.json")).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["display_messages.json", "state.json"]);
        seeds.push((state, display));
    }
    assert_eq!(seeds[0], seeds[1]);
    assert_eq!(seeds[0].0, STATE_JSON);
    // The display history mirrors the messages here.
    let state: Value = serde_json::from_str(&seeds[0].0).unwrap();
    assert_eq!(
        seeds[0].1,
        format!(
            "{}\n",
            serde_json::to_string_pretty(&state["message_history"]).unwrap()
        )
    );

    // A session id detaches HEAD; the seed is that session's.
    let d = dir.join("old");
    ok(s, &["checkout", &a[..12], "-o", d.to_str().unwrap()], None);
    assert_eq!(head_ref(s), a);
    let old: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("state.json")).unwrap()).unwrap();
    assert_eq!(old["message_history"].as_array().unwrap().len(), 2);
    // ... and the library sees the same HEAD.
    {
        let store = s.library();
        assert_eq!(
            store.resolve_rev("HEAD").unwrap(),
            ObjectId::from_hex(&a).unwrap()
        );
        assert_eq!(store.head_conversation().unwrap(), None);
    }

    // An unknown revision: one line, exit 1, HEAD unchanged, no files.
    let d = dir.join("never");
    let r = sessctl(s, &["checkout", "nope", "-o", d.to_str().unwrap()], None);
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            1,
            "",
            "sessctl: unknown revision 'nope': not a conversation, ref, tag or object id\n"
        )
    );
    assert_eq!(head_ref(s), a);
    assert!(!d.exists());
    assert_eq!(conv_head(s, "fix"), b);
}

fn resume_prints_a_summary_or_the_history(s: &TestStore) {
    let dir = s.scratch();
    let (a, b) = fix_conversation(&dir, s);
    let out = ok(s, &["resume", "fix"], None);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], format!("session {b}"));
    assert_eq!(lines[1], format!("conversation {a}"));
    assert_eq!(lines[2], "description Flaky");
    assert_eq!(lines[3], "first-topic Fix the flaky test");
    assert!(lines[4].starts_with("created "));
    assert!(lines[5].starts_with("last-activity "));
    assert_eq!(lines[6], "messages 6 (assistant 3, tool 1, user 2)");
    // What its line of sessions cost, summed over the first-parent chain.
    assert!(lines[7].starts_with("usage ") && lines[7].ends_with(" requests"));
    assert_eq!(lines.len(), 8);

    let v: Value = serde_json::from_str(&ok(s, &["resume", "--json", &b[..8]], None)).unwrap();
    let state: Value = serde_json::from_str(STATE_JSON).unwrap();
    assert_eq!(v["history"], state["message_history"]);
    let summary = &v["summary"];
    assert_eq!(summary["session"], b.as_str());
    assert_eq!(summary["title"], "Flaky");
    assert_eq!(summary["description"], "Flaky");
    assert_eq!(summary["first_topic"], "Fix the flaky test");
    assert_eq!(summary["message_count"], 6);
    assert_eq!(
        summary["messages"],
        json!({"assistant": 3, "tool": 1, "user": 2})
    );
    assert_eq!(summary["compaction"], Value::Null);
    let a_created = cat_json(s, &a)["created_at"].clone();
    assert_eq!(summary["created"], a_created);
    assert_eq!(summary["last_activity"], cat_json(s, &b)["created_at"]);
}

const CHECKPOINT_CMD: &str = r#"cat >/dev/null; echo '{"completed":["x"]}'"#;

fn compact_keeps_the_old_head_as_parent_and_refuses_bad_summaries(s: &TestStore) {
    let dir = s.scratch();
    let (_, b) = fix_conversation(&dir, s);
    let old_display = cat_json(s, &b)["display_messages"].clone();

    // Failing and garbage summarizers change nothing.
    let cases: &[(&str, &str)] = &[
        (
            "cat >/dev/null; echo oops >&2; exit 3",
            "sessctl: cannot compact fix: the summarizer exited with status 3; stderr: \"oops\"\n",
        ),
        (
            "exit 3",
            "sessctl: cannot compact fix: the summarizer exited with status 3\n",
        ),
        (
            "echo nope",
            "sessctl: cannot compact fix: the summarizer's output is not JSON \
             (invalid JSON: expected ident at line 1 column 2); stdout: \"nope\"\n",
        ),
    ];
    for (cmd, stderr) in cases {
        let r = sessctl(
            s,
            &["compact", "fix", "--summarizer", cmd, "--keep-last", "1"],
            None,
        );
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (1, "", *stderr),
            "{cmd}"
        );
        assert_eq!(conv_head(s, "fix"), b);
    }

    // Nothing to summarise when everything is kept.
    let r = sessctl(
        s,
        &[
            "compact",
            "fix",
            "--summarizer",
            CHECKPOINT_CMD,
            "--keep-last",
            "6",
        ],
        None,
    );
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        "sessctl: nothing to compact in fix: its 6 messages are all kept (keep-last 6)\n"
    );
    assert_eq!(conv_head(s, "fix"), b);

    // Keep 2: the tool result would start the tail, so its call comes too.
    let out = ok(
        s,
        &[
            "compact",
            "fix",
            "--summarizer",
            CHECKPOINT_CMD,
            "--keep-last",
            "2",
        ],
        None,
    );
    let id = out.trim();
    assert_eq!(out, format!("{id}\n"));
    assert_eq!(conv_head(s, "fix"), id);
    let c = cat_json(s, id);
    assert_eq!(c["parents"], json!([b]));
    assert_eq!(c["messages"]["base"], 0);
    assert_eq!(c["messages"]["added"].as_array().unwrap().len(), 4);
    assert_eq!(c["compaction"]["session"], b.as_str());
    assert_eq!(c["compaction"]["messages"], 3);
    assert_eq!(c["conversation"], cat_json(s, &b)["conversation"]);
    assert_eq!(c["display_messages"]["base"], 6);
    assert_eq!(c["display_messages"]["added"], json!([]));
    assert_eq!(old_display["added"].as_array().unwrap().len(), 4);
    let summary = c["compaction"]["summary"].as_str().unwrap();
    assert_eq!(
        cat_json(s, summary),
        json!({"completed": ["x"], "in_progress": [], "pending": [], "blockers": [], "decisions": []})
    );
    let first = cat_json(s, c["messages"]["added"][0].as_str().unwrap());
    assert_eq!(first["role"], "user");
    assert_eq!(first["sessctl_checkpoint"]["completed"], json!(["x"]));
    assert!(first["content"].as_str().unwrap().starts_with(
        "[sessctl checkpoint] Summary of the conversation so far:\n\n## Completed\n- x\n"
    ));

    // The old history is still there, through the parent.
    let v: Value = serde_json::from_str(&ok(s, &["resume", "--json", &b], None)).unwrap();
    assert_eq!(v["history"].as_array().unwrap().len(), 6);
    let v: Value = serde_json::from_str(&ok(s, &["resume", "--json", "fix"], None)).unwrap();
    assert_eq!(v["history"].as_array().unwrap().len(), 4);
    assert_eq!(v["summary"]["first_topic"], "Fix the flaky test");
    assert_eq!(v["summary"]["compaction"]["session"], b.as_str());
    let reflog = ok(s, &["reflog", "fix"], None);
    assert!(
        reflog.lines().next().unwrap().contains(": compact: "),
        "{reflog}"
    );
}

fn compact_with_max_tokens_runs_only_at_the_threshold(s: &TestStore) {
    let dir = s.scratch();
    let (_, b) = fix_conversation(&dir, s);
    let state: Value = serde_json::from_str(STATE_JSON).unwrap();
    let bytes = serde_json::to_vec(&state["message_history"]).unwrap().len() as u64;
    let estimate = bytes / 4;

    // One token short of the threshold: nothing happens.
    let above = (estimate + 1).to_string();
    let out = ok(
        s,
        &[
            "compact",
            "fix",
            "--summarizer",
            "exit 9",
            "--keep-last",
            "1",
            "--max-tokens",
            &above,
            "--threshold",
            "1",
        ],
        None,
    );
    assert_eq!(
        out,
        format!("no compaction needed: ~{estimate} of {above} tokens\n")
    );
    assert_eq!(conv_head(s, "fix"), b);
    // The default threshold is 0.9.
    let max = ((estimate as f64 / 0.9).floor() as u64 + 1).to_string();
    let out = ok(
        s,
        &[
            "compact",
            "fix",
            "--summarizer",
            "exit 9",
            "--keep-last",
            "1",
            "--max-tokens",
            &max,
        ],
        None,
    );
    assert_eq!(
        out,
        format!("no compaction needed: ~{estimate} of {max} tokens\n")
    );

    // At the threshold exactly, it compacts.
    let at = estimate.to_string();
    let out = ok(
        s,
        &[
            "compact",
            "fix",
            "--summarizer",
            CHECKPOINT_CMD,
            "--keep-last",
            "1",
            "--max-tokens",
            &at,
            "--threshold",
            "1",
        ],
        None,
    );
    let id = out.trim();
    assert_eq!(conv_head(s, "fix"), id);
    assert_eq!(cat_json(s, id)["compaction"]["messages"], 5);

    // Bad flags are usage errors, caught before the store is touched.
    for (args, msg) in [
        (
            &["--threshold", "0.5"][..],
            "the following required arguments were not provided",
        ),
        (
            &["--max-tokens", "10", "--threshold", "1.5"][..],
            "sessctl: --threshold takes a fraction above 0 and at most 1, not 1.5",
        ),
        (
            &["--max-tokens", "0"][..],
            "sessctl: --max-tokens takes a number of tokens above 0",
        ),
    ] {
        let mut all = vec!["compact", "fix", "--summarizer", "true"];
        all.extend_from_slice(args);
        let r = sessctl(s, &all, None);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(msg), "{args:?}: {}", r.stderr);
    }
    let r = sessctl(s, &["compact", "nope", "--summarizer", "true"], None);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (1, "sessctl: no conversation named nope\n")
    );
}

fn replay_prints_one_line_per_turn(s: &TestStore) {
    let dir = s.scratch();
    let (a, b) = fix_conversation(&dir, s);
    let out = ok(s, &["replay", "fix"], None);
    assert_eq!(
        out,
        format!(
            "turn 1 {} committed: 1 in, 1 out, 0 tool calls, 0 tool results; 0 tokens, 0 ms: Looking.\n\
             turn 2 {} committed: 1 in, 2 out, 1 tool call, 1 tool result; 15 tokens, 300 ms: Done.\n",
            &a[..12],
            &b[..12]
        )
    );
    let out = ok(s, &["replay", "--json", "fix"], None);
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["turn"], 1);
    assert_eq!(lines[0]["session"], a.as_str());
    assert_eq!(lines[0]["parent"], Value::Null);
    assert_eq!(
        lines[0]["input"],
        json!([{"role": "user", "content": "Fix the flaky test\nin CI"}])
    );
    assert_eq!(lines[1]["parent"], a.as_str());
    assert_eq!(
        (
            lines[1]["base"].clone(),
            lines[1]["request_messages"].clone()
        ),
        (json!(2), json!(3))
    );
    assert_eq!(
        lines[1]["input"],
        json!([{"role": "user", "content": "go"}])
    );
    assert_eq!(lines[1]["output"].as_array().unwrap().len(), 2);
    assert_eq!(
        lines[1]["tool_calls"],
        json!([{"id": "c1", "name": "ls", "arguments": "{}"}])
    );
    assert_eq!(
        lines[1]["tool_results"],
        json!([{"call_id": "c1", "content": "a.rs", "is_error": false}])
    );
    assert_eq!(lines[1]["usage"]["total_tokens"], 15);
    assert_eq!(lines[1]["duration_ms"], 300);
    assert_eq!(lines[1]["status"], "committed");
    assert_eq!(lines[1]["compaction"], Value::Null);

    // A compaction shows as its own turn.
    let id = ok(
        s,
        &[
            "compact",
            "fix",
            "--summarizer",
            CHECKPOINT_CMD,
            "--keep-last",
            "1",
        ],
        None,
    );
    let out = ok(s, &["replay"], None);
    assert_eq!(
        out.lines().last().unwrap(),
        format!(
            "turn 3 {} committed: compaction of 5 messages of {}",
            &id[..12],
            &b[..12]
        )
    );
    let r = sessctl(s, &["replay", "nope"], None);
    assert_eq!(r.code, 1);
}

/// The scripted agent loop: one model request and one `sessctl commit` per
/// user message. Returns the conversation's final history.
fn agent_loop<T: Target + ?Sized>(
    s: &T,
    conv: &str,
    script: &[&str],
    mut model: impl FnMut(&[Value]) -> Option<Vec<Value>>,
) -> Option<Vec<Value>> {
    let mut history = Vec::new();
    for (k, text) in script.iter().enumerate() {
        let user = json!({"role": "user", "content": text});
        history.push(user.clone());
        let answer = model(&history)?;
        history.extend(answer.iter().cloned());
        let mut added = vec![user];
        added.extend(answer);
        commit(s, conv, k == 0, &Value::Array(added), &[]);
    }
    Some(history)
}

fn a_cassette_replays_a_loop_recorded_by_the_binary(s: &TestStore) {
    let script = ["hello", "list files", "read main.rs", "fix it"];
    let mut calls = 0;
    let recorded = agent_loop(s, "rec", &script, |h| {
        calls += 1;
        Some(vec![
            json!({"role": "assistant", "content": format!("answer {calls} after {}", h.len())}),
        ])
    })
    .unwrap();
    let v: Value = serde_json::from_str(&ok(s, &["resume", "--json", "rec"], None)).unwrap();
    assert_eq!(v["history"], Value::Array(recorded.clone()));

    let cassette = {
        let store = s.library();
        let head = store.resolve_rev("rec").unwrap();
        Cassette::from_session(&store, &head).unwrap()
    };
    assert_eq!(cassette.len(), 4);

    // The replay asks the cassette, not the model, and gets the same run.
    let mut player = cassette.player();
    let replayed = agent_loop(s, "again", &script, |h| {
        player.answer(h).ok().map(<[Value]>::to_vec)
    })
    .unwrap();
    assert_eq!(replayed, recorded);
    assert!(player.finished());
    let v: Value = serde_json::from_str(&ok(s, &["resume", "--json", "again"], None)).unwrap();
    assert_eq!(v["history"], Value::Array(recorded.clone()));

    // A different third message: the player stops at turn 3.
    let mut changed = script;
    changed[2] = "read lib.rs";
    let mut player = cassette.player();
    assert!(agent_loop(s, "changed", &changed, |h| {
        player.answer(h).ok().map(<[Value]>::to_vec)
    })
    .is_none());
    let d = player.divergence().unwrap();
    assert_eq!(d.turn, 3);
    assert_eq!(
        d.expected,
        Some(Cassette::request_id(&recorded[..5]).unwrap())
    );
    assert_ne!(d.actual, d.expected);
    // Two turns were committed before it stopped.
    let out = ok(s, &["replay", "--json", "changed"], None);
    assert_eq!(out.lines().count(), 2);
}
