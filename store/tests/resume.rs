//! Checkout, the seed layout and the resume payload, through the public API.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sessctl_store::compact::{compact, Checkpoint, Summary};
use sessctl_store::refs::RefTarget;
use sessctl_store::resume::{checkout, resume, Seed};
use sessctl_store::{Durability, Error, Messages, RefName, Turn};

fn msg(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

fn turn(msgs: Vec<Value>, at: i64) -> Turn {
    Turn {
        messages: Messages::Added(msgs),
        created_at: Some(at),
        ..Turn::default()
    }
}

fn checkout_makes_head_symbolic_or_detached(b: &Backend) {
    let store = b.open();
    let (_, a0) = store
        .create(Some("a"), turn(vec![msg("user", "a")], 1), Durability::Sync)
        .unwrap();
    let (_, b0) = store
        .create(Some("b"), turn(vec![msg("user", "b")], 2), Durability::Sync)
        .unwrap();
    assert_eq!(store.head_conversation().unwrap().as_deref(), Some("b"));

    let out = checkout(&store, "a", Durability::Sync).unwrap();
    assert_eq!((out.session, out.conversation.as_deref()), (a0, Some("a")));
    assert_eq!(
        store.get_ref(&RefName::Head).unwrap(),
        Some(RefTarget::Symbolic(RefName::conversation("a").unwrap()))
    );
    let last = store.reflog_entries().unwrap().pop().unwrap();
    assert_eq!(
        (last.name, last.reason.as_str()),
        (RefName::Head, "checkout")
    );

    checkout(&store, "refs/heads/b", Durability::Sync).unwrap();
    assert_eq!(store.head_conversation().unwrap().as_deref(), Some("b"));
    // Checking out where HEAD is writes no operation.
    let ops = || store.odb().backend().ops_after(0).unwrap().len();
    let before = ops();
    checkout(&store, "b", Durability::Sync).unwrap();
    assert_eq!(ops(), before);

    // An id (or prefix) detaches HEAD; a commit then needs a conversation.
    let out = checkout(&store, &a0.to_hex()[..10], Durability::Sync).unwrap();
    assert_eq!((out.session, out.conversation), (a0, None));
    assert_eq!(
        store.get_ref(&RefName::Head).unwrap(),
        Some(RefTarget::Session(a0))
    );
    assert_eq!(store.head_conversation().unwrap(), None);
    // HEAD stays where it is, detached or not.
    assert_eq!(
        checkout(&store, "HEAD", Durability::Sync)
            .unwrap()
            .conversation,
        None
    );
    assert_eq!(
        store.get_ref(&RefName::Head).unwrap(),
        Some(RefTarget::Session(a0))
    );

    // An archived conversation's name detaches at its tip.
    store.archive("b", Durability::Sync).unwrap();
    let out = checkout(&store, "b", Durability::Sync).unwrap();
    assert_eq!((out.session, out.conversation), (b0, None));

    // Unknown revisions change nothing.
    let before = store.get_ref(&RefName::Head).unwrap();
    let err = checkout(&store, "nope", Durability::Sync).unwrap_err();
    assert!(err.to_string().contains("unknown revision 'nope'"), "{err}");
    assert!(checkout(&store, "refs/heads/nope", Durability::Sync).is_err());
    assert_eq!(store.get_ref(&RefName::Head).unwrap(), before);
}

fn the_seed_is_byte_exact_and_written_atomically(b: &Backend) {
    let store = b.open();
    let (_, root) = store
        .create(
            Some("c"),
            Turn {
                context_state: Some(json!({"z": 1, "a": [true]})),
                display: Some(Messages::Added(vec![msg("user", "hi (shown)")])),
                ..turn(vec![msg("user", "hi")], 5)
            },
            Durability::Sync,
        )
        .unwrap();
    let seed = Seed::load(&store, &root).unwrap();
    assert_eq!(
        seed.state_json(),
        "{\n  \"context_state\": {\n    \"a\": [\n      true\n    ],\n    \"z\": 1\n  },\n  \
         \"environment_state\": null,\n  \"message_history\": [\n    {\n      \
         \"content\": \"hi\",\n      \"role\": \"user\"\n    }\n  ]\n}\n"
    );
    assert_eq!(
        seed.display_json(),
        "[\n  {\n    \"content\": \"hi (shown)\",\n    \"role\": \"user\"\n  }\n]\n"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new/seed");
    let [state, display] = seed.write(&out).unwrap();
    assert_eq!(std::fs::read_to_string(&state).unwrap(), seed.state_json());
    assert_eq!(
        std::fs::read_to_string(&display).unwrap(),
        seed.display_json()
    );
    // Rewriting replaces; no temporary file stays behind.
    seed.write(&out).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["display_messages.json", "state.json"]);
}

fn resume_gives_the_history_and_a_summary_for_people(b: &Backend) {
    let store = b.open();
    let long = format!("{}\nsecond line", "word ".repeat(60));
    store
        .create(
            Some("c"),
            turn(vec![msg("system", "be good"), msg("user", &long)], 1000),
            Durability::Sync,
        )
        .unwrap();
    let head = store
        .commit(
            "c",
            None,
            turn(
                vec![
                    msg("assistant", "ok"),
                    json!({"role": "tool", "tool_call_id": "1", "content": "x"}),
                    json!({"no_role": true}),
                ],
                2000,
            ),
            Durability::Sync,
        )
        .unwrap();
    let r = resume(&store, &head).unwrap();
    // One stored message is no chat message: the history given to the
    // model is converted, as checkout's is, the stored lines beside it.
    let stored = store.odb().load_messages(&head).unwrap();
    assert_eq!(r.raw_history.as_ref(), Some(&stored));
    assert_eq!(
        r.history,
        Seed::load(&store, &head).unwrap().message_history
    );
    let s = &r.summary;
    assert_eq!((s.created, s.last_activity), (1000, 2000));
    assert_eq!(s.message_count, 5);
    let by_role: BTreeMap<String, u64> = [
        ("assistant", 1),
        ("system", 1),
        ("tool", 1),
        ("unknown", 1),
        ("user", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(s.messages, by_role);
    assert_eq!(s.title, None);
    assert_eq!(s.description.chars().count(), 200);
    assert!(long.trim().starts_with(&s.description));
    assert_eq!(
        s.first_topic,
        "word ".repeat(16).trim_end().to_owned() + " "
    );
    assert_eq!(s.first_topic.chars().count(), 80);
    assert_eq!(s.compaction, None);

    // A title wins as the description.
    let titled = store
        .commit(
            "c",
            None,
            Turn {
                title: Some("Fix CI".into()),
                ..turn(vec![], 3000)
            },
            Durability::Sync,
        )
        .unwrap();
    let later = store
        .commit(
            "c",
            None,
            turn(vec![msg("user", "go on")], 4000),
            Durability::Sync,
        )
        .unwrap();
    let r = resume(&store, &later).unwrap();
    assert_eq!(r.summary.title.as_deref(), Some("Fix CI"));
    assert_eq!(r.summary.description, "Fix CI");
    assert_eq!(r.summary.first_topic.chars().count(), 80);
    assert_ne!(titled, later);
}

fn a_compacted_session_resumes_from_its_checkpoint(b: &Backend) {
    let store = b.open();
    let (_, root) = store
        .create(
            Some("c"),
            turn(vec![msg("user", "Fix the flaky test\nplease")], 1000),
            Durability::Sync,
        )
        .unwrap();
    store
        .commit(
            "c",
            None,
            turn(
                vec![msg("assistant", "found it"), msg("user", "ship it")],
                2000,
            ),
            Durability::Sync,
        )
        .unwrap();
    let compacted = compact(
        &store,
        "c",
        &|_: &[Value]| {
            Ok(Summary::Checkpoint(Checkpoint {
                completed: vec!["found it".into()],
                ..Checkpoint::default()
            }))
        },
        1,
    )
    .unwrap();
    let head = store
        .commit(
            "c",
            None,
            turn(vec![msg("assistant", "shipped")], 9000),
            Durability::Sync,
        )
        .unwrap();
    let r = resume(&store, &head).unwrap();
    // The history is the checkpoint, the kept tail and what came after;
    // given to the model as checkout gives it (the checkpoint a chat
    // message of its summary), the stored lines beside it.
    let raw = r.raw_history.as_ref().unwrap();
    assert_eq!(raw.len(), 3);
    assert!(raw[0]["sessctl_checkpoint"].is_object());
    assert_eq!(raw[1], msg("user", "ship it"));
    assert_eq!(raw[2], msg("assistant", "shipped"));
    assert_eq!(
        r.history,
        Seed::load(&store, &head).unwrap().message_history
    );
    assert_eq!(r.history.len(), 3);
    assert!(r.history[0].get("sessctl_checkpoint").is_none());
    assert_eq!(r.history[1], msg("user", "ship it"));
    assert_eq!(r.history[2], msg("assistant", "shipped"));
    let s = &r.summary;
    let c = s.compaction.unwrap();
    assert_eq!(
        c,
        store.odb().session(&compacted).unwrap().compaction.unwrap()
    );
    assert_eq!(c.messages, 2);
    // People see where the conversation began, not the checkpoint.
    assert_eq!(s.first_topic, "Fix the flaky test");
    assert_eq!(s.description, "Fix the flaky test\nplease");
    assert_eq!((s.created, s.last_activity), (1000, 9000));
    assert_eq!(s.conversation, root);
    assert_eq!(s.messages["user"], 2);

    let err = resume(&store, &sessctl_store::ObjectId::from_bytes([7; 32])).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
}

two_backends!(
    checkout_makes_head_symbolic_or_detached,
    the_seed_is_byte_exact_and_written_atomically,
    resume_gives_the_history_and_a_summary_for_people,
    a_compacted_session_resumes_from_its_checkpoint,
);
