//! Lossless compaction and auto-compaction, through the public API.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use sessctl_store::compact::{
    compact, compact_at, cut_point, estimate_tokens, AutoCompaction, Checkpoint, Summarizer,
    Summary,
};
use sessctl_store::{Durability, Error, Messages, ObjectId, RefName, Store, Turn};

fn msg(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

fn added(msgs: Vec<Value>) -> Turn {
    Turn {
        messages: Messages::Added(msgs),
        ..Turn::default()
    }
}

/// A conversation "c" of 6 messages in 3 sessions.
fn conversation(store: &Store) -> ObjectId {
    store
        .create(
            Some("c"),
            added(vec![
                msg("user", "fix the test"),
                msg("assistant", "looking"),
            ]),
            Durability::Sync,
        )
        .unwrap();
    store
        .commit(
            "c",
            None,
            added(vec![msg("user", "and?"), msg("assistant", "found it")]),
            Durability::Sync,
        )
        .unwrap();
    store
        .commit(
            "c",
            None,
            added(vec![msg("user", "fix it"), msg("assistant", "fixed")]),
            Durability::Sync,
        )
        .unwrap()
}

fn head(store: &Store, name: &str) -> ObjectId {
    store.conversation(name).unwrap().unwrap().head.unwrap()
}

fn checkpoint_summarizer(seen: Arc<Mutex<Vec<Value>>>) -> impl Summarizer {
    move |h: &[Value]| {
        seen.lock().unwrap().extend_from_slice(h);
        Ok(Summary::Checkpoint(Checkpoint {
            completed: vec!["found the bug".into()],
            pending: vec!["fix it".into()],
            ..Checkpoint::default()
        }))
    }
}

fn compaction_summarises_the_start_and_keeps_everything_reachable(b: &Backend) {
    let store = b.open();
    let old = conversation(&store);
    let old_history = store.odb().load_messages(&old).unwrap();
    let old_display = store.odb().display_history(&old).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let id = compact(&store, "c", &checkpoint_summarizer(seen.clone()), 2).unwrap();

    // The summarizer saw exactly the first 4 messages.
    assert_eq!(*seen.lock().unwrap(), old_history[..4]);
    let s = store.odb().session(&id).unwrap();
    assert_eq!(s.parents, vec![old]);
    assert_eq!(s.messages.base, 0);
    assert_eq!(
        s.conversation,
        store.odb().session(&old).unwrap().conversation
    );
    let c = s.compaction.unwrap();
    assert_eq!((c.session, c.messages), (old, 4));
    assert_eq!(
        store.odb().blob(&c.summary).unwrap(),
        json!({"completed": ["found the bug"], "in_progress": [], "pending": ["fix it"],
               "blockers": [], "decisions": []})
    );
    // Listings still show what the conversation is about, not the summary.
    let info = store.conversation("c").unwrap().unwrap();
    assert_eq!(info.head, Some(id));
    assert!(!info.preview.contains("checkpoint"), "{}", info.preview);
    assert_eq!(
        info.preview,
        store.session_info(&old).unwrap().unwrap().preview
    );
    // The display history is untouched.
    assert_eq!(s.display_messages.base, old_display.len() as u64);
    assert!(s.display_messages.added.is_empty());
    assert_eq!(store.odb().display_history(&id).unwrap(), old_display);

    // The new history: the checkpoint message, then the kept tail.
    let history = store.odb().load_messages(&id).unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[1..], old_history[4..]);
    assert_eq!(
        history[0],
        json!({
            "role": "user",
            "content": "[sessctl checkpoint] Summary of the conversation so far:\n\n## Completed\n\
                        - found the bug\n\n## In progress\n(none)\n\n## Pending\n- fix it\n\n\
                        ## Blockers\n(none)\n\n## Decisions\n(none)",
            "sessctl_checkpoint": store.odb().blob(&c.summary).unwrap(),
        })
    );
    // Nothing is lost: the old head still reads whole, and the ref moved.
    assert_eq!(store.odb().load_messages(&old).unwrap(), old_history);
    assert_eq!(head(&store, "c"), id);
    let last = store.reflog_entries().unwrap().pop().unwrap();
    assert_eq!(last.reason, "compact");
}

fn summary_messages_are_used_as_given_and_recorded_as_an_array(b: &Backend) {
    let store = b.open();
    let old = conversation(&store);
    let summary = vec![msg("system", "be brief"), msg("user", "summary: found it")];
    let given = summary.clone();
    let id = compact(
        &store,
        "c",
        &move |_: &[Value]| Ok(Summary::Messages(given.clone())),
        1,
    )
    .unwrap();
    let history = store.odb().load_messages(&id).unwrap();
    assert_eq!(history[..2], summary[..]);
    assert_eq!(history.len(), 3);
    let s = store.odb().session(&id).unwrap();
    // base 0 even though nothing forced the first message to differ.
    assert_eq!(s.messages.base, 0);
    let c = s.compaction.unwrap();
    assert_eq!((c.session, c.messages), (old, 5));
    assert_eq!(store.odb().blob(&c.summary).unwrap(), Value::Array(summary));
}

#[test]
fn the_kept_tail_never_starts_with_an_orphaned_tool_result() {
    let call = json!({"role": "assistant", "tool_calls": [{"id": "t1", "type": "function",
                      "function": {"name": "ls", "arguments": "{}"}}]});
    let result = json!({"role": "tool", "tool_call_id": "t1", "content": "a.rs"});
    let claude_result = json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t2", "content": "ok"}]}});
    let h = vec![
        msg("user", "list"),
        call.clone(),
        result.clone(),
        claude_result,
        msg("assistant", "done"),
    ];
    assert_eq!(cut_point(&h, 1), 4);
    // Keeping 2 or 3 would start with a result: the call comes along.
    assert_eq!(cut_point(&h, 2), 1);
    assert_eq!(cut_point(&h, 3), 1);
    assert_eq!(cut_point(&h, 4), 1);
    assert_eq!(cut_point(&h, 5), 0);
    assert_eq!(cut_point(&h, 9), 0);
    assert_eq!(cut_point(&h[..3], 1), 1);
}

fn assert_unchanged(store: &Store, old: ObjectId, err: &Error, wanted: &str) {
    assert!(err.to_string().contains(wanted), "{err}");
    assert_eq!(head(store, "c"), old);
    assert_eq!(
        store
            .resolve_ref(&RefName::conversation("c").unwrap())
            .unwrap(),
        Some(old)
    );
}

fn a_failing_or_garbage_summarizer_changes_nothing(b: &Backend) {
    // The CLI's command summarizer has its own cases (cli/src/summarizer.rs).
    let store = b.open();
    let old = conversation(&store);
    let ops = store.reflog_entries().unwrap().len();
    let err = compact(
        &store,
        "c",
        &|_: &[Value]| Err::<Summary, _>("model unavailable".to_owned()),
        2,
    )
    .unwrap_err();
    assert_unchanged(&store, old, &err, "cannot compact c: model unavailable");
    let err = compact(
        &store,
        "c",
        &|_: &[Value]| Summary::from_value(json!(42)),
        2,
    )
    .unwrap_err();
    assert_unchanged(&store, old, &err, "cannot compact c: ");
    assert_eq!(store.reflog_entries().unwrap().len(), ops);
}

fn compaction_loses_a_race_with_a_commit_cleanly(b: &Backend) {
    let store = b.open();
    let old = conversation(&store);
    let newer = store
        .commit(
            "c",
            None,
            added(vec![msg("user", "more")]),
            Durability::Sync,
        )
        .unwrap();
    let err = compact_at(
        &store,
        "c",
        old,
        &checkpoint_summarizer(Arc::default()),
        2,
        Durability::Sync,
    )
    .unwrap_err();
    assert!(matches!(err, Error::RefOutOfDate { .. }), "{err}");
    assert_eq!(head(&store, "c"), newer);
}

fn nothing_to_compact_is_an_error(b: &Backend) {
    let store = b.open();
    let old = conversation(&store);
    let calls = AtomicUsize::new(0);
    let s = |_: &[Value]| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(Summary::Checkpoint(Checkpoint::default()))
    };
    let err = compact(&store, "c", &s, 6).unwrap_err();
    assert_unchanged(&store, old, &err, "nothing to compact in c");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let err = compact(&store, "nope", &s, 1).unwrap_err();
    assert!(matches!(err, Error::NoSuchConversation { .. }), "{err}");
}

#[test]
fn checkpoints_parse_strictly() {
    let c = Summary::from_value(json!({"pending": ["a"]})).unwrap();
    assert_eq!(
        c,
        Summary::Checkpoint(Checkpoint {
            pending: vec!["a".into()],
            ..Checkpoint::default()
        })
    );
    assert_eq!(
        c.to_value(),
        json!({"completed": [], "in_progress": [], "pending": ["a"], "blockers": [], "decisions": []})
    );
    assert!(Summary::from_value(json!({"pending": "a"})).is_err());
    assert!(Summary::from_value(json!("text")).is_err());
    assert!(Summary::from_value(json!(null)).is_err());
}

/// A message that makes `prefix` + it exactly `bytes` long as canonical JSON.
fn padded(prefix: &[Value], bytes: usize) -> Value {
    let mut h = prefix.to_vec();
    h.push(msg("user", ""));
    let base = serde_json::to_vec(&h).unwrap().len();
    let m = msg("user", &"x".repeat(bytes - base));
    h.pop();
    h.push(m.clone());
    assert_eq!(serde_json::to_vec(&h).unwrap().len(), bytes);
    m
}

fn counting_summarizer(calls: Arc<AtomicUsize>) -> Arc<dyn Summarizer + Send + Sync> {
    Arc::new(move |_: &[Value]| {
        calls.fetch_add(1, Ordering::SeqCst);
        Ok(Summary::Checkpoint(Checkpoint {
            completed: vec!["earlier work".into()],
            ..Checkpoint::default()
        }))
    })
}

fn auto_compaction_triggers_at_the_threshold_and_not_below(b: &Backend) {
    let store = b.open();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut auto = AutoCompaction::new(100, 1, counting_summarizer(calls.clone()));
    auto.threshold = 0.5; // compact at 50 estimated tokens, 200 bytes
    store.set_auto_compaction(Some(auto));
    let first = vec![msg("user", "start"), msg("assistant", "ok")];
    for name in ["below", "at"] {
        store
            .create(Some(name), added(first.clone()), Durability::Sync)
            .unwrap();
    }

    // 199 bytes: 49 tokens. The commit is the head; nothing was summarised.
    let m = padded(&first, 199);
    let below = store
        .commit("below", None, added(vec![m.clone()]), Durability::Sync)
        .unwrap();
    let mut h = first.clone();
    h.push(m);
    assert_eq!(estimate_tokens(&h), 49);
    assert_eq!(head(&store, "below"), below);
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    // 200 bytes: 50 tokens. A compaction follows the commit.
    let m = padded(&first, 200);
    let at = store
        .commit("at", None, added(vec![m.clone()]), Durability::Sync)
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let compacted = head(&store, "at");
    assert_ne!(compacted, at);
    let s = store.odb().session(&compacted).unwrap();
    assert_eq!(s.parents, vec![at]);
    assert_eq!(s.compaction.unwrap().messages, 2);
    let history = store.odb().load_messages(&compacted).unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(history[1], m);
    assert!(store.take_auto_compaction_errors().is_empty());

    // Cleared, commits are plain again.
    store.set_auto_compaction(None);
    let plain = store
        .commit("at", None, added(vec![msg("user", "x")]), Durability::Sync)
        .unwrap();
    assert_eq!(head(&store, "at"), plain);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

fn a_failed_auto_compaction_leaves_the_commit_and_reports(b: &Backend) {
    let store = b.open();
    let failing: Arc<dyn Summarizer + Send + Sync> =
        Arc::new(|_: &[Value]| Err::<Summary, _>("no model".to_owned()));
    store.set_auto_compaction(Some(AutoCompaction::new(1, 1, failing)));
    store
        .create(Some("c"), added(vec![msg("user", "hi")]), Durability::Sync)
        .unwrap();
    let id = store
        .commit(
            "c",
            None,
            added(vec![msg("assistant", "hello")]),
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(head(&store, "c"), id);
    let errors = store.take_auto_compaction_errors();
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].conversation.as_str(), errors[0].session),
        ("c", id)
    );
    assert!(errors[0].to_string().contains("no model"), "{}", errors[0]);
    assert!(store.take_auto_compaction_errors().is_empty());

    // commit_and_compact hands back both outcomes instead.
    let out = store
        .commit_and_compact(
            "c",
            Some(id),
            added(vec![msg("user", "again")]),
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(out.head(), out.session);
    assert!(matches!(out.compaction, Some(Err(_))));
    assert!(store.take_auto_compaction_errors().is_empty());

    let calls = Arc::new(AtomicUsize::new(0));
    store.set_auto_compaction(Some(AutoCompaction::new(1, 1, counting_summarizer(calls))));
    let out = store
        .commit_and_compact(
            "c",
            Some(out.session),
            added(vec![msg("assistant", "sure")]),
            Durability::Sync,
        )
        .unwrap();
    let compacted = out.compaction.as_ref().unwrap().as_ref().unwrap();
    assert_eq!(out.head(), *compacted);
    assert_eq!(head(&store, "c"), *compacted);
    // The runtime continues from the head it was given.
    store
        .commit("c", Some(out.head()), added(vec![]), Durability::Sync)
        .unwrap();
}

/// Auto-compaction sizes a continuation from its parent's known size plus
/// the new messages; it must decide exactly as a load of the whole history
/// would, turn after turn, across empty turns, unicode, a fork that cuts
/// and the compactions it makes itself.
fn auto_compaction_decides_as_the_whole_history_would(b: &Backend) {
    let store = b.open();
    let calls = Arc::new(AtomicUsize::new(0));
    let max_tokens = 400;
    let auto = AutoCompaction::new(max_tokens, 2, counting_summarizer(calls.clone()));
    let threshold = auto.threshold;
    store.set_auto_compaction(Some(auto));
    // The store's copy shares what the hook has learned.
    let auto = store.auto_compaction().unwrap();
    store
        .create(Some("c"), added(vec![msg("user", "go")]), Durability::Sync)
        .unwrap();
    let due = |store: &Store, id: &ObjectId| {
        let history = store.odb().load_messages(id).unwrap();
        let whole = estimate_tokens(&history);
        assert_eq!(auto.estimated_tokens(store, id).unwrap(), whole, "{id}");
        whole as f64 >= threshold * max_tokens as f64
    };
    for turn in 0..40 {
        let before = calls.load(Ordering::SeqCst);
        let msgs = match turn % 4 {
            0 => vec![],
            1 => vec![msg("assistant", &"é€".repeat(turn))],
            _ => vec![msg("user", &"x".repeat(turn * 3)), msg("assistant", "ok")],
        };
        let id = store
            .commit("c", None, added(msgs), Durability::Sync)
            .unwrap();
        let compacted = calls.load(Ordering::SeqCst) > before;
        assert_eq!(compacted, due(&store, &id), "turn {turn}");
        if turn == 20 {
            let (_, fork) = store
                .fork(
                    id,
                    sessctl_store::ForkOptions {
                        name: Some("f".into()),
                        cut: Some(sessctl_store::Cut::AtMessage(1)),
                        turn: Some(added(vec![msg("user", "other")])),
                    },
                    Durability::Sync,
                )
                .unwrap();
            let before = calls.load(Ordering::SeqCst);
            let next = store
                .commit(
                    "f",
                    Some(fork),
                    added(vec![msg("user", &"y".repeat(900))]),
                    Durability::Sync,
                )
                .unwrap();
            assert_eq!(calls.load(Ordering::SeqCst) > before, due(&store, &next));
        }
    }
    assert!(
        calls.load(Ordering::SeqCst) > 1,
        "the test never reached the threshold"
    );
    assert!(store.take_auto_compaction_errors().is_empty());
}

two_backends!(
    compaction_summarises_the_start_and_keeps_everything_reachable,
    summary_messages_are_used_as_given_and_recorded_as_an_array,
    a_failing_or_garbage_summarizer_changes_nothing,
    compaction_loses_a_race_with_a_commit_cleanly,
    nothing_to_compact_is_an_error,
    auto_compaction_triggers_at_the_threshold_and_not_below,
    a_failed_auto_compaction_leaves_the_commit_and_reports,
    auto_compaction_decides_as_the_whole_history_would,
);
