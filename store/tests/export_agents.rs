//! Session files written back for their agents (`claude_code_session`,
//! `codex_rollout`), on small rollouts and transcripts made here: every
//! source line comes back in place, sessionIds are one, the parentUuid
//! chain is whole.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use std::collections::HashSet;
use std::path::PathBuf;

use serde_json::{json, Value};
use sessctl_store::export::{claude_code_session, codex_rollout};
use sessctl_store::import::{import_sources, Format, ImportOptions, ImportReport, SourceFile};
use sessctl_store::{Cut, Durability, ForkOptions, Messages, Store, Turn};

fn import(store: &Store, format: Format, name: &str, text: &str) {
    let src = SourceFile {
        path: PathBuf::from(name),
        text: text.to_owned(),
    };
    let opts = ImportOptions {
        no_sync: true,
        progress: None,
        // The whole file: its last turn too.
        finished: true,
    };
    let r = import_sources(store, format, &[src], &opts, ImportReport::default()).unwrap();
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
}

fn head(store: &Store, name: &str) -> sessctl_store::ObjectId {
    store.conversation(name).unwrap().unwrap().head.unwrap()
}

fn rollout_line(ts: u32, ty: &str, payload: Value) -> Value {
    json!({"timestamp": format!("2026-05-11T08:00:{ts:02}.000Z"), "type": ty, "payload": payload})
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

fn event(kind: &str) -> Value {
    json!({"type": kind})
}

/// A rollout of three prompts (three sessions), events scattered before
/// messages: none, one, several.
fn rollout() -> Vec<Value> {
    let mut t = 0;
    let mut line = |ty: &str, p: Value| {
        t += 1;
        rollout_line(t, ty, p)
    };
    vec![
        line(
            "session_meta",
            json!({"id": "019e0000-0000-7000-8000-000000000001", "cwd": "/w",
                   "originator": "codex-tui", "cli_version": "0.125.0"}),
        ),
        line("turn_context", json!({"cwd": "/w"})),
        line("event_msg", event("task_started")),
        line("response_item", user("one")),
        line("event_msg", event("user_message")),
        line(
            "response_item",
            json!({"type": "function_call", "name": "sh", "arguments": "{}", "call_id": "c1"}),
        ),
        line(
            "response_item",
            json!({"type": "function_call_output", "call_id": "c1", "output": "ok"}),
        ),
        line("event_msg", event("token_count")),
        line("event_msg", event("agent_message")),
        line("event_msg", event("task_complete")),
        line("response_item", user("two")),
        line(
            "response_item",
            json!({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": "2"}]}),
        ),
        line("turn_context", json!({"cwd": "/w"})),
        line("response_item", user("three")),
        line(
            "response_item",
            json!({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": "3"}]}),
        ),
    ]
}

fn jsonl(lines: &[Value]) -> String {
    lines.iter().map(|l| l.to_string() + "\n").collect()
}

fn parse(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn a_rollout_comes_back_line_for_line_under_a_new_id(b: &Backend) {
    let store = b.open();
    let src = rollout();
    import(&store, Format::Codex, "rollout-x.jsonl", &jsonl(&src));
    let name = "codex-019e0000-000";
    let meta = store.conversation(name).unwrap().unwrap().record.metadata["session_meta"].clone();
    let new_id = "019e0000-0000-7000-8000-0000000000ff";
    let out = codex_rollout(
        &store,
        head(&store, name),
        new_id,
        Some(&meta),
        &[],
        1_800_000_000_000,
    )
    .unwrap();
    let lines = parse(&out.text);
    assert_eq!(out.lines, lines.len());
    assert_eq!(out.cwd.as_deref(), Some("/w"));
    assert_eq!(lines[0]["type"], "session_meta");
    assert_eq!(lines[0]["payload"]["id"], new_id);
    assert_eq!(
        lines[0]["payload"]["forked_from_id"],
        "019e0000-0000-7000-8000-000000000001"
    );
    assert_eq!(lines[0]["payload"]["cli_version"], "0.125.0");
    assert_eq!(lines[1..], src[1..]);
}

fn a_rollout_with_a_blank_line_keeps_every_line(b: &Backend) {
    let store = b.open();
    let src = rollout();
    let mut text = jsonl(&src[..5]);
    text.push('\n');
    text += &jsonl(&src[5..]);
    import(&store, Format::Codex, "rollout-x.jsonl", &text);
    let out = codex_rollout(
        &store,
        head(&store, "codex-019e0000-000"),
        "id",
        None,
        &[],
        0,
    )
    .unwrap();
    let lines = parse(&out.text);
    assert_eq!(lines.len(), src.len());
    let key = |v: &Value| v.to_string();
    let got: HashSet<String> = lines[1..].iter().map(key).collect();
    let want: HashSet<String> = src[1..].iter().map(key).collect();
    assert_eq!(got, want);
    // The messages, at least, are in their order.
    let msgs = |v: &[Value]| -> Vec<Value> {
        v.iter()
            .filter(|l| l["type"] == "response_item")
            .cloned()
            .collect()
    };
    assert_eq!(msgs(&lines), msgs(&src));
}

fn cc_line(uuid: &str, parent: Option<&str>, ty: &str, content: &str) -> Value {
    json!({"type": ty, "uuid": uuid, "parentUuid": parent, "sessionId": "old-session",
           "cwd": "/w", "version": "2.1.7", "isSidechain": false, "userType": "external",
           "timestamp": "2026-01-01T00:00:00.000Z",
           "message": {"role": ty, "content": content}})
}

fn a_claude_code_fork_comes_back_with_one_session_id_and_a_whole_chain(b: &Backend) {
    let store = b.open();
    let src = vec![
        cc_line("u1", None, "user", "one"),
        cc_line("a1", Some("u1"), "assistant", "1"),
        cc_line("u2", Some("a1"), "user", "two"),
        cc_line("a2", Some("u2"), "assistant", "2"),
    ];
    import(&store, Format::ClaudeCode, "s.jsonl", &jsonl(&src));
    let name = "cc-old-session";
    // A fork that keeps three messages and adds one in chat shape.
    let (fork, at) = store
        .fork(
            head(&store, name),
            ForkOptions {
                name: Some("f".into()),
                cut: Some(Cut::AtMessage(3)),
                turn: Some(Turn {
                    messages: Messages::Added(vec![json!({"role": "assistant", "content": "new"})]),
                    ..Turn::default()
                }),
            },
            Durability::NoSync,
        )
        .unwrap();
    assert_eq!(fork, "f");
    let out = claude_code_session(&store, at, "new-session", &[], None).unwrap();
    let lines = parse(&out.text);
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[..3], {
        let mut want = src[..3].to_vec();
        for l in &mut want {
            l["sessionId"] = json!("new-session");
        }
        want
    });
    let last = &lines[3];
    assert_eq!(last["parentUuid"], "u2");
    assert_eq!(last["sessionId"], "new-session");
    assert_eq!(
        (&last["cwd"], &last["version"]),
        (&json!("/w"), &json!("2.1.7"))
    );
    assert_eq!(last["message"]["content"][0]["text"], "new");
    assert_eq!(out.cwd.as_deref(), Some("/w"));
}

two_backends!(
    a_rollout_comes_back_line_for_line_under_a_new_id,
    a_rollout_with_a_blank_line_keeps_every_line,
    a_claude_code_fork_comes_back_with_one_session_id_and_a_whole_chain,
);
