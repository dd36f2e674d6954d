//! Replay and cassettes, through the public API: a scripted agent loop
//! recorded with a fake model, replayed from the cassette, and caught when a
//! changed run diverges.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use serde_json::{json, Value};
use sessctl_store::compact::{compact, Checkpoint, Summary};
use sessctl_store::replay::{Cassette, Divergence, Replay, ToolCall};
use sessctl_store::{
    Durability, Messages, ObjectId, RunSummary, SessionStatus, Store, Turn, Usage,
};

fn msg(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

/// The agent loop under test: one model request per user message, one
/// session per turn. `model` answers a history with the messages to add.
fn agent_loop(
    store: &Store,
    name: &str,
    user_messages: &[&str],
    mut model: impl FnMut(&[Value]) -> Result<Vec<Value>, Divergence>,
) -> Result<(Vec<Value>, ObjectId), Divergence> {
    let mut history: Vec<Value> = Vec::new();
    let mut head = None;
    for (k, text) in user_messages.iter().enumerate() {
        let user = msg("user", text);
        history.push(user.clone());
        let answer = model(&history)?;
        history.extend(answer.iter().cloned());
        let mut added = vec![user];
        added.extend(answer);
        let turn = Turn {
            messages: Messages::Added(added),
            created_at: Some(1_000 + k as i64),
            ..Turn::default()
        };
        head = Some(if k == 0 {
            store.create(Some(name), turn, Durability::Sync).unwrap().1
        } else {
            store.commit(name, head, turn, Durability::Sync).unwrap()
        });
    }
    Ok((history, head.unwrap()))
}

/// A fake model: deterministic, and it remembers how often it was asked.
fn fake_model(calls: &mut usize, h: &[Value]) -> Vec<Value> {
    *calls += 1;
    let last = h.last().unwrap()["content"].as_str().unwrap();
    vec![msg(
        "assistant",
        &format!("answer {} to {last} after {} messages", calls, h.len()),
    )]
}

const SCRIPT: [&str; 4] = ["hello", "list the files", "read main.rs", "fix it"];

fn a_cassette_replays_a_recorded_loop_and_catches_a_divergence(b: &Backend) {
    let store = b.open();
    let mut calls = 0;
    let (recorded, head) =
        agent_loop(&store, "rec", &SCRIPT, |h| Ok(fake_model(&mut calls, h))).unwrap();
    assert_eq!(calls, 4);
    let cassette = Cassette::from_session(&store, &head).unwrap();
    assert_eq!(cassette.len(), 4);
    assert!(!cassette.is_empty());
    // Keys are canonical hashes of the request histories.
    assert_eq!(
        cassette.entries()[0].request,
        Cassette::request_id(&[msg("user", "hello")]).unwrap()
    );
    assert_eq!(
        cassette.answer(&recorded[..5]).unwrap(),
        &recorded[5..6],
        "the third request: 2 turns of 2 messages, then the user's"
    );
    assert_eq!(cassette.answer(&[msg("user", "never asked")]), None);

    // The replay run asks the cassette instead of the model: same answers,
    // no model calls, and the record is played to the end.
    let mut player = cassette.player();
    let (replayed, replay_head) = agent_loop(&store, "replay", &SCRIPT, |h| {
        player.answer(h).map(<[Value]>::to_vec)
    })
    .unwrap();
    assert_eq!(replayed, recorded);
    assert!(player.finished());
    assert_eq!(player.answered(), 4);
    // Same messages, same deltas, same timestamps: the same session ids.
    assert_eq!(replay_head, head);

    // A run whose third user message differs diverges at turn 3.
    let mut changed = SCRIPT;
    changed[2] = "read lib.rs";
    let mut player = cassette.player();
    let mut asked = Vec::new();
    let err = agent_loop(&store, "changed", &changed, |h| {
        asked.push(h.to_vec());
        player.answer(h).map(<[Value]>::to_vec)
    })
    .unwrap_err();
    assert_eq!(err.turn, 3);
    assert_eq!(
        err.expected,
        Some(Cassette::request_id(&recorded[..5]).unwrap())
    );
    assert_eq!(err.actual, Some(Cassette::request_id(&asked[2]).unwrap()));
    assert_ne!(err.expected, err.actual);
    assert_eq!(err.session, Some(cassette.entries()[2].session));
    assert!(err.to_string().contains("at turn 3"), "{err}");
    assert_eq!(player.divergence(), Some(&err));
    assert_eq!(player.answered(), 2);
    // Sticky: once diverged, the player answers nothing more.
    assert_eq!(player.answer(&recorded[..1]).unwrap_err(), err);

    // A run that goes on past the record diverges after its last turn.
    let mut player = cassette.player();
    let mut longer = SCRIPT.to_vec();
    longer.push("and more");
    let err = agent_loop(&store, "longer", &longer, |h| {
        player.answer(h).map(<[Value]>::to_vec)
    })
    .unwrap_err();
    assert_eq!((err.turn, err.expected), (5, None));
}

fn replay_lists_turns_with_tool_calls_and_results(b: &Backend) {
    let store = b.open();
    let openai_call = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{\"dir\":\".\"}"}}]});
    let openai_result = json!({"role": "tool", "tool_call_id": "call_1", "content": "main.rs"});
    let claude_call = json!({"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "text", "text": "reading"},
        {"type": "tool_use", "id": "tu_1", "name": "read", "input": {"path": "main.rs"}}]}});
    let claude_result = json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "tu_1", "content": "fn main() {}", "is_error": true}]}});
    let (_, root) = store
        .create(
            Some("c"),
            Turn {
                messages: Messages::Added(vec![msg("system", "sys"), msg("user", "go")]),
                created_at: Some(10),
                ..Turn::default()
            },
            Durability::Sync,
        )
        .unwrap();
    let t2 = store
        .commit(
            "c",
            None,
            Turn {
                messages: Messages::Added(vec![
                    openai_call.clone(),
                    openai_result.clone(),
                    claude_call.clone(),
                    claude_result.clone(),
                    msg("assistant", "done"),
                ]),
                run: RunSummary {
                    duration_ms: 1500,
                    usage: Usage {
                        total_tokens: 42,
                        prompt_tokens: 30,
                        completion_tokens: 12,
                        requests: 3,
                    },
                },
                status: Some(SessionStatus::AwaitingToolResults),
                ..Turn::default()
            },
            Durability::Sync,
        )
        .unwrap();
    let t3 = store
        .commit(
            "c",
            None,
            Turn {
                messages: Messages::Added(vec![msg("user", "thanks"), msg("assistant", "bye")]),
                ..Turn::default()
            },
            Durability::Sync,
        )
        .unwrap();

    let replay = Replay::load(&store, &t3).unwrap();
    assert_eq!(replay.turns.len(), 3);
    let [a, b, c] = &replay.turns[..] else {
        unreachable!()
    };
    assert_eq!((a.number, a.session, a.parent), (1, root, None));
    assert_eq!(a.input, [msg("system", "sys"), msg("user", "go")]);
    assert!(a.output.is_empty());
    assert_eq!(a.request_len, 2);

    assert_eq!((b.number, b.session, b.parent), (2, t2, Some(root)));
    assert!(b.input.is_empty());
    assert_eq!((b.base, b.request_len), (2, 2));
    assert_eq!(
        b.output,
        [openai_call, claude_call, msg("assistant", "done")]
    );
    assert_eq!(
        b.tool_calls,
        [
            ToolCall {
                id: Some("call_1".into()),
                name: "ls".into(),
                arguments: json!("{\"dir\":\".\"}"),
            },
            ToolCall {
                id: Some("tu_1".into()),
                name: "read".into(),
                arguments: json!({"path": "main.rs"}),
            },
        ]
    );
    let results: Vec<(Option<&str>, &Value, bool)> = b
        .tool_results
        .iter()
        .map(|r| (r.call_id.as_deref(), &r.content, r.is_error))
        .collect();
    assert_eq!(
        results,
        [
            (Some("call_1"), &json!("main.rs"), false),
            (Some("tu_1"), &json!("fn main() {}"), true),
        ]
    );
    assert_eq!((b.usage.total_tokens, b.duration_ms), (42, 1500));
    assert_eq!(b.status, SessionStatus::AwaitingToolResults);

    assert_eq!(c.input, [msg("user", "thanks")]);
    assert_eq!(c.request_len, 8);
    // The request is the parent's history cut to base, then the inputs.
    let request = replay.request(2);
    let mut expected = store.odb().load_messages(&t2).unwrap();
    expected.push(msg("user", "thanks"));
    assert_eq!(request, expected);
    assert_eq!(replay.request(0), a.input);

    // One cassette entry per model request: three in the tool loop, one after.
    let cassette = Cassette::from_replay(&replay).unwrap();
    let lens: Vec<usize> = cassette.entries().iter().map(|e| e.request_len).collect();
    assert_eq!(lens, [2, 4, 6, 8]);
    let h = store.odb().load_messages(&t3).unwrap();
    assert_eq!(cassette.answer(&h[..4]).unwrap(), &h[4..5]);
    assert_eq!(cassette.answer(&h[..8]).unwrap(), &h[8..9]);
}

fn compaction_sessions_are_turns_but_not_model_requests(b: &Backend) {
    let store = b.open();
    let mut calls = 0;
    let (_, head) =
        agent_loop(&store, "c", &SCRIPT[..2], |h| Ok(fake_model(&mut calls, h))).unwrap();
    let compacted = compact(
        &store,
        "c",
        &|_: &[Value]| Ok(Summary::Checkpoint(Checkpoint::default())),
        2,
    )
    .unwrap();
    let after = store
        .commit(
            "c",
            None,
            Turn {
                messages: Messages::Added(vec![msg("user", "next"), msg("assistant", "ok")]),
                ..Turn::default()
            },
            Durability::Sync,
        )
        .unwrap();
    let replay = Replay::load(&store, &after).unwrap();
    let sessions: Vec<ObjectId> = replay.turns.iter().map(|t| t.session).collect();
    assert_eq!(sessions[1..], [head, compacted, after]);
    assert!(replay.turns[2].compaction.is_some());
    let cassette = Cassette::from_replay(&replay).unwrap();
    assert_eq!(cassette.len(), 3);
    // The last request starts from the checkpoint.
    let last = &cassette.entries()[2];
    assert_eq!(last.request_len, 4);
    let h = store.odb().load_messages(&after).unwrap();
    assert_eq!(last.request, Cassette::request_id(&h[..4]).unwrap());
}

two_backends!(
    a_cassette_replays_a_recorded_loop_and_catches_a_divergence,
    replay_lists_turns_with_tool_calls_and_results,
    compaction_sessions_are_turns_but_not_model_requests,
);
