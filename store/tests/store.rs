//! Conversations, refs, runs and the derived index, through the public API:
//! each behaviour test runs on a local store and on a remote one
//! (`name::local`, `name::remote`, see support/backends.rs); the tests of
//! the local layout on disk run locally only and say so.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use sessctl_store::index::ConversationInfo;
use sessctl_store::refs::{ConversationStatus, PreviousValue, RefEdit};
#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use sessctl_store::{
    Cut, Durability, Error, ForkOptions, Messages, OpenOptions, RefName, RefTarget, RepackOptions,
    SessionStatus, Store, Transaction, Turn,
};

fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    drop(Store::init(&path).unwrap());
    (dir, path)
}

fn open(path: &Path) -> Store {
    Store::open(path, &OpenOptions::default()).unwrap()
}

two_backends!(
    a_conversation_lives_forks_and_is_archived,
    names_are_checked_and_listing_is_by_activity,
    full_histories_commit_only_their_new_messages,
    states_carry_over_until_replaced,
    one_run_at_a_time_and_dead_runs_are_failed_on_open,
    racing_writers_on_one_conversation_lose_cleanly,
    different_conversations_never_block_each_other,
    update_ref_transactions_check_their_expectations,
    a_fork_names_the_parent_true_to_its_cut,
    tag_rename_and_reset_move_refs_and_records,
    a_subagent_session_takes_its_spawners_conversation_id,
    refs_to_names_exactly_the_refs_at_those_sessions,
);

fn msgs(texts: &[&str]) -> Vec<Value> {
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t}))
        .collect()
}

fn turn(texts: &[&str]) -> Turn {
    Turn {
        messages: Messages::Added(msgs(texts)),
        ..Turn::default()
    }
}

fn contents(store: &Store, id: &sessctl_store::ObjectId) -> Vec<String> {
    store
        .odb()
        .load_messages(id)
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

fn a_conversation_lives_forks_and_is_archived(b: &Backend) {
    let store = b.open();
    let (name, root) = store
        .create(Some("fix"), turn(&["hi", "hello"]), Durability::Sync)
        .unwrap();
    assert_eq!(name, "fix");
    let s1 = store
        .commit("fix", Some(root), turn(&["more", "sure"]), Durability::Sync)
        .unwrap();
    let s2 = store
        .commit("fix", None, turn(&["last", "done"]), Durability::Sync)
        .unwrap();
    assert_eq!(
        contents(&store, &s2),
        ["hi", "hello", "more", "sure", "last", "done"]
    );
    // Conversation ids: root -> its own id, continuation -> the parent's.
    assert_eq!(store.odb().session(&root).unwrap().conversation, None);
    assert_eq!(store.odb().session(&s2).unwrap().conversation, Some(root));
    let info = store.conversation("fix").unwrap().unwrap();
    assert_eq!((info.head, info.messages, info.sessions), (Some(s2), 6, 3));
    assert_eq!(info.record.conversation_id, Some(root));
    assert_eq!(info.preview, "hi");
    assert_eq!(store.head_conversation().unwrap().as_deref(), Some("fix"));

    // A stale expected head is a lost compare-and-swap.
    let err = store
        .commit("fix", Some(s1), turn(&["x"]), Durability::Sync)
        .unwrap_err();
    assert!(matches!(err, Error::RefOutOfDate { .. }), "{err}");

    // A plain fork is a branch: no object, a new ref at the source.
    let objects_before = store.odb().backend().ids().unwrap().len();
    let (fork, head) = store
        .fork(s1, ForkOptions::default(), Durability::Sync)
        .unwrap();
    assert_eq!(head, s1);
    assert_eq!(store.odb().backend().ids().unwrap().len(), objects_before);
    assert_eq!(
        store
            .conversation(&fork)
            .unwrap()
            .unwrap()
            .record
            .conversation_id,
        None
    );
    // Its first commit starts the new conversation (fork -> new id).
    let f1 = store
        .commit(&fork, None, turn(&["branch"]), Durability::Sync)
        .unwrap();
    assert_eq!(store.odb().session(&f1).unwrap().conversation, None);
    assert_eq!(
        store
            .conversation(&fork)
            .unwrap()
            .unwrap()
            .record
            .conversation_id,
        Some(f1)
    );
    let f2 = store
        .commit(&fork, None, turn(&["again"]), Durability::Sync)
        .unwrap();
    assert_eq!(store.odb().session(&f2).unwrap().conversation, Some(f1));
    assert_eq!(
        contents(&store, &f2),
        ["hi", "hello", "more", "sure", "branch", "again"]
    );
    assert_eq!(store.conversation(&fork).unwrap().unwrap().sessions, 2);

    // A fork mid-conversation keeps k messages and adds its own.
    let (cut, c1) = store
        .fork(
            s2,
            ForkOptions {
                name: Some("cut".into()),
                cut: Some(Cut::AtMessage(3)),
                turn: Some(turn(&["other way"])),
            },
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(cut, "cut");
    assert_eq!(contents(&store, &c1), ["hi", "hello", "more", "other way"]);
    let s = store.odb().session(&c1).unwrap();
    assert_eq!((s.messages.base, s.messages.added.len()), (3, 1));
    // ... or up to a message id.
    let third = store.odb().history(&s2).unwrap()[1];
    let (_, c2) = store
        .fork(
            s2,
            ForkOptions {
                name: None,
                cut: Some(Cut::AtMessageId(third)),
                turn: Some(turn(&[])),
            },
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(contents(&store, &c2), ["hi", "hello"]);
    assert!(store
        .fork(
            s2,
            ForkOptions {
                cut: Some(Cut::AtMessage(99)),
                ..ForkOptions::default()
            },
            Durability::Sync
        )
        .is_err());

    // Archive is a ref move; an archived conversation cannot be continued.
    store.archive("fix", Durability::Sync).unwrap();
    assert_eq!(
        store
            .get_ref(&RefName::conversation("fix").unwrap())
            .unwrap(),
        None
    );
    assert_eq!(
        store.get_ref(&RefName::archived("fix").unwrap()).unwrap(),
        Some(RefTarget::Session(s2))
    );
    assert_eq!(
        store.conversation("fix").unwrap().unwrap().record.status,
        ConversationStatus::Archived
    );
    assert!(store
        .commit("fix", None, turn(&["no"]), Durability::Sync)
        .is_err());
    assert!(store.archive("fix", Durability::Sync).is_err());
    store.unarchive("fix", Durability::Sync).unwrap();
    store
        .commit("fix", None, turn(&["back"]), Durability::Sync)
        .unwrap();

    // Merge: a session with several parents.
    let m = store
        .merge("fix", &[f2], turn(&["merged"]), Durability::Sync)
        .unwrap();
    assert_eq!(store.odb().session(&m).unwrap().parents.len(), 2);

    // Delete: the ref and record go, the objects stay.
    store.delete("cut", Durability::Sync).unwrap();
    assert!(store.conversation("cut").unwrap().is_none());
    assert!(store.odb().contains(&c1).unwrap());
    assert!(matches!(
        store.commit("cut", None, turn(&["x"]), Durability::Sync),
        Err(Error::NoSuchConversation { .. })
    ));
}

fn names_are_checked_and_listing_is_by_activity(b: &Backend) {
    let store = b.open();
    assert!(matches!(
        store.create(Some("a b"), turn(&["x"]), Durability::Sync),
        Err(Error::BadName(_))
    ));
    assert!(matches!(
        store.create(Some("nul"), turn(&["x"]), Durability::Sync),
        Err(Error::BadName(_))
    ));
    let (auto, root) = store.create(None, turn(&["x"]), Durability::Sync).unwrap();
    assert_eq!(auto, root.to_hex_prefix(12));
    store
        .create(Some("b"), turn(&["y"]), Durability::Sync)
        .unwrap();
    assert!(matches!(
        store.create(Some("b"), turn(&["z"]), Durability::Sync),
        Err(Error::ConversationExists { .. })
    ));
    std::thread::sleep(std::time::Duration::from_millis(5));
    store
        .commit(&auto, None, turn(&["newer"]), Durability::Sync)
        .unwrap();
    let names: Vec<String> = store
        .conversations(None)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, [auto.clone(), "b".to_owned()]);
    assert_eq!(store.conversations(Some(1)).unwrap().len(), 1);
}

fn full_histories_commit_only_their_new_messages(b: &Backend) {
    let store = b.open();
    store
        .create(Some("c"), turn(&["a", "b"]), Durability::Sync)
        .unwrap();
    let id = store
        .commit(
            "c",
            None,
            Turn {
                messages: Messages::History(msgs(&["a", "b", "c"])),
                ..Turn::default()
            },
            Durability::Sync,
        )
        .unwrap();
    let s = store.odb().session(&id).unwrap();
    assert_eq!((s.messages.base, s.messages.added.len()), (2, 1));
    // A rewritten history keeps only the common prefix.
    let id = store
        .commit(
            "c",
            None,
            Turn {
                messages: Messages::History(msgs(&["a", "x"])),
                ..Turn::default()
            },
            Durability::Sync,
        )
        .unwrap();
    let s = store.odb().session(&id).unwrap();
    assert_eq!((s.messages.base, s.messages.added.len()), (1, 1));
}

fn states_carry_over_until_replaced(b: &Backend) {
    let store = b.open();
    let (_, root) = store
        .create(
            Some("c"),
            Turn {
                context_state: Some(json!({"files": ["a.rs"]})),
                ..turn(&["x"])
            },
            Durability::Sync,
        )
        .unwrap();
    let next = store
        .commit("c", None, turn(&["y"]), Durability::Sync)
        .unwrap();
    let a = store.odb().session(&root).unwrap().context_state;
    assert!(a.is_some());
    assert_eq!(store.odb().session(&next).unwrap().context_state, a);
}

fn one_run_at_a_time_and_dead_runs_are_failed_on_open(b: &Backend) {
    let store = b.open();
    let (_, root) = store
        .create(Some("c"), turn(&["go"]), Durability::Sync)
        .unwrap();
    let run = store.begin_run("c").unwrap();
    match store.begin_run("c") {
        Err(Error::Busy {
            conversation,
            run: r,
            pid,
        }) => {
            assert_eq!(
                (conversation.as_str(), r, pid),
                ("c", run.id, std::process::id())
            );
        }
        other => panic!("{other:?}"),
    }
    // A plain commit does not slip past a running agent either.
    assert!(matches!(
        store.commit("c", None, turn(&["x"]), Durability::Sync),
        Err(Error::Busy { .. })
    ));
    let id = store
        .commit_run(&run, turn(&["ran"]), true, Durability::Sync)
        .unwrap();
    let s = store.odb().session(&id).unwrap();
    assert_eq!(s.status, SessionStatus::AwaitingToolResults);
    assert_eq!(s.parents, vec![root]);
    assert!(store.running("c").unwrap().is_none());
    // A failed run writes nothing.
    let run = store.begin_run("c").unwrap();
    store.fail_run(&run, "model error").unwrap();
    assert_eq!(store.conversation("c").unwrap().unwrap().head, Some(id));
    assert!(store
        .commit_run(&run, turn(&["late"]), false, Durability::Sync)
        .is_err());
    // A run left open by a process that is gone.
    let run = store.begin_run("c").unwrap();
    drop(store);
    let store = b.open();
    let notes = store.take_recovery_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&format!("run {} on c", run.id))),
        "{notes:?}"
    );
    assert!(store.running("c").unwrap().is_none());
    let reasons: Vec<String> = store
        .reflog_entries()
        .unwrap()
        .into_iter()
        .map(|e| e.reason)
        .collect();
    assert!(reasons.contains(&"commit".to_owned()));
}

fn racing_writers_on_one_conversation_lose_cleanly(b: &Backend) {
    let store = Arc::new(b.open());
    store
        .create(Some("race"), turn(&["start"]), Durability::Sync)
        .unwrap();
    let rounds = 20;
    let threads = 6;
    let mut total_wins = 0;
    for round in 0..rounds {
        let head = store.conversation("race").unwrap().unwrap().head.unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let store = store.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    store.commit(
                        "race",
                        Some(head),
                        turn(&[&format!("round {round} thread {t}")]),
                        Durability::Sync,
                    )
                })
            })
            .collect();
        let mut wins = 0;
        for h in handles {
            match h.join().unwrap() {
                Ok(_) => wins += 1,
                Err(Error::RefOutOfDate { .. } | Error::Busy { .. }) => {}
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert_eq!(wins, 1, "round {round}: exactly one writer wins");
        total_wins += wins;
    }
    // No turn lost or duplicated: the history has one message per win.
    let info = store.conversation("race").unwrap().unwrap();
    assert_eq!(info.messages, 1 + total_wins as u64);
    assert_eq!(info.sessions, 1 + total_wins as u64);
    let history = contents(&store, &info.head.unwrap());
    for round in 0..rounds {
        assert_eq!(
            history
                .iter()
                .filter(|m| m.starts_with(&format!("round {round} ")))
                .count(),
            1
        );
    }
}

fn different_conversations_never_block_each_other(b: &Backend) {
    let store = Arc::new(b.open());
    for t in 0..8 {
        store
            .create(Some(&format!("c{t}")), turn(&["x"]), Durability::Sync)
            .unwrap();
    }
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    store
                        .commit(
                            &format!("c{t}"),
                            None,
                            turn(&[&format!("{i}")]),
                            Durability::Sync,
                        )
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for t in 0..8 {
        assert_eq!(
            store
                .conversation(&format!("c{t}"))
                .unwrap()
                .unwrap()
                .messages,
            26
        );
    }
    assert!(store.verify_chains().unwrap().is_empty());
}

fn snapshot(store: &Store) -> (Vec<String>, Vec<String>) {
    let convs = store
        .conversations(None)
        .unwrap()
        .iter()
        .map(|c: &ConversationInfo| format!("{c:?}"))
        .collect();
    let log = store
        .reflog_entries()
        .unwrap()
        .iter()
        .map(|e| format!("{e:?} {}", sessctl_store::hash::hex(&e.hash())))
        .collect();
    (convs, log)
}

fn populate(store: &Store) {
    store
        .create(Some("a"), turn(&["one", "two"]), Durability::NoSync)
        .unwrap();
    store
        .create(Some("b"), turn(&["three"]), Durability::NoSync)
        .unwrap();
    let s = store
        .commit("a", None, turn(&["four"]), Durability::NoSync)
        .unwrap();
    store
        .fork(
            s,
            ForkOptions {
                name: Some("f".into()),
                ..ForkOptions::default()
            },
            Durability::NoSync,
        )
        .unwrap();
    store
        .commit("f", None, turn(&["five"]), Durability::NoSync)
        .unwrap();
    store.archive("b", Durability::NoSync).unwrap();
    let run = store.begin_run("a").unwrap();
    store
        .commit_run(&run, turn(&["six"]), false, Durability::Sync)
        .unwrap();
}

// Local only: deletes the index directory of a store on disk.
#[test]
fn reindex_and_a_deleted_index_give_the_same_answers() {
    let (_d, path) = new_store();
    let store = open(&path);
    populate(&store);
    let before = snapshot(&store);
    assert_eq!(
        store.reindex().unwrap(),
        store
            .reflog_entries()
            .unwrap()
            .iter()
            .map(|e| e.op)
            .max()
            .unwrap() as usize
    );
    assert_eq!(snapshot(&store), before);
    drop(store);
    std::fs::remove_dir_all(path.join("index")).unwrap();
    let store = open(&path);
    assert_eq!(snapshot(&store), before);
    // After a repack the operations live in the op log, and still rebuild.
    store.odb().repack(&RepackOptions::default()).unwrap();
    assert!(std::fs::read_dir(path.join("oplog")).unwrap().count() >= 1);
    store
        .commit("a", None, turn(&["seven"]), Durability::Sync)
        .unwrap();
    let after = snapshot(&store);
    drop(store);
    std::fs::remove_dir_all(path.join("index")).unwrap();
    let store = open(&path);
    assert_eq!(snapshot(&store), after);
    assert!(store.verify_chains().unwrap().is_empty());
    // A read-only opener (a second process while a writer holds the lock)
    // builds the same answers without the lock.
    let reader = Store::open(
        &path,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    assert_eq!(snapshot(&reader), after);
}

// Local only: truncates a journal segment on disk.
#[test]
fn index_tables_ahead_of_the_journal_are_not_trusted() {
    let (_d, path) = new_store();
    let store = open(&path);
    store
        .create(Some("a"), turn(&["one"]), Durability::Sync)
        .unwrap();
    let before = snapshot(&store);
    // An operation the index tables hold but the journal lost (a table is
    // written only after a sync, so only a disk that lies can do this).
    store
        .commit("a", None, turn(&["two"]), Durability::Sync)
        .unwrap();
    store.reindex().unwrap();
    drop(store);
    let seg = std::fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "journal"))
        .unwrap();
    let bytes = std::fs::read(&seg).unwrap();
    // Cut into the last frame (before the zeros written ahead after it).
    let end = bytes.iter().rposition(|b| *b != 0).unwrap() + 1;
    std::fs::write(&seg, &bytes[..end - 10]).unwrap();
    let store = open(&path);
    let notes = store.take_recovery_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("did not continue the operations")),
        "{notes:?}"
    );
    assert_eq!(snapshot(&store), before);
    // The next write cuts the torn tail, and the one after it replaces the
    // tables.
    store
        .commit("a", None, turn(&["three"]), Durability::Sync)
        .unwrap();
    let notes = store.take_recovery_notes();
    assert!(notes.iter().any(|n| n.contains("torn write")), "{notes:?}");
    store.reindex().unwrap();
    drop(store);
    let store = open(&path);
    assert_eq!(store.take_recovery_notes(), Vec::<String>::new());
    assert_eq!(
        store
            .odb()
            .load_messages(&store.resolve_rev("a").unwrap())
            .unwrap()
            .len(),
        2
    );
}

fn update_ref_transactions_check_their_expectations(b: &Backend) {
    let store = b.open();
    let (_, a) = store
        .create(Some("a"), turn(&["x"]), Durability::Sync)
        .unwrap();
    let (_, b) = store
        .create(Some("b"), turn(&["y"]), Durability::Sync)
        .unwrap();
    let tag = RefName::tag("golden").unwrap();
    let edit = |expected, new| Transaction {
        reason: "update-ref".into(),
        edits: vec![RefEdit {
            name: tag.clone(),
            expected,
            new,
        }],
        ..Transaction::default()
    };
    store
        .transact(
            edit(PreviousValue::MustNotExist, Some(RefTarget::Session(a))),
            Durability::Sync,
        )
        .unwrap();
    let err = store
        .transact(
            edit(PreviousValue::MustNotExist, Some(RefTarget::Session(b))),
            Durability::Sync,
        )
        .unwrap_err();
    match &err {
        Error::RefOutOfDate {
            name,
            expected,
            actual,
        } => {
            assert_eq!(name, "refs/tags/golden");
            assert_eq!(expected, &None);
            assert_eq!(actual.as_deref(), Some(a.to_hex().as_str()));
        }
        other => panic!("{other:?}"),
    }
    store
        .transact(
            edit(
                PreviousValue::MustMatch(RefTarget::Session(a)),
                Some(RefTarget::Session(b)),
            ),
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(store.resolve_rev("golden").unwrap(), b);
    assert_eq!(store.resolve_rev("tags/golden").unwrap(), b);
    // Several refs move together or not at all.
    let both = Transaction {
        reason: "update-ref".into(),
        edits: vec![
            RefEdit {
                name: RefName::conversation("a").unwrap(),
                expected: PreviousValue::Any,
                new: Some(RefTarget::Session(b)),
            },
            RefEdit {
                name: tag.clone(),
                expected: PreviousValue::MustMatch(RefTarget::Session(a)),
                new: None,
            },
        ],
        ..Transaction::default()
    };
    assert!(store.transact(both, Durability::Sync).is_err());
    assert_eq!(store.resolve_rev("a").unwrap(), a);
    // Refs must point at sessions that exist.
    let blob = store.odb().put_blob(&json!(1), Durability::Sync).unwrap();
    assert!(matches!(
        store.transact(
            edit(PreviousValue::Any, Some(RefTarget::Session(blob))),
            Durability::Sync
        ),
        Err(Error::WrongKind { .. })
    ));
    assert_eq!(store.resolve_rev("HEAD").unwrap(), b);
    assert_eq!(store.resolve_rev(&a.to_hex()[..10]).unwrap(), a);
    assert!(store.resolve_rev("nope").is_err());
}

// Local only: rewrites a journal frame on disk.
#[test]
fn the_reflog_is_a_hash_chain_and_tampering_shows() {
    let (_d, path) = new_store();
    let mut store = open(&path);
    store.set_actor("tamper-test-actor");
    populate(&store);
    assert!(store.verify_chains().unwrap().is_empty());
    let entries = store.reflog_entries().unwrap();
    let heads_a: Vec<_> = entries
        .iter()
        .filter(|e| e.name == RefName::conversation("a").unwrap())
        .collect();
    assert!(heads_a.len() >= 3);
    for w in heads_a.windows(2) {
        assert_eq!(w[1].prev, Some(w[0].hash()));
    }
    drop(store);
    // Rewrite one operation in the journal: change its actor, keep the
    // frame checksum valid (as a tamperer with write access would).
    let seg = std::fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "journal"))
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let needle = "tamper-test-actor";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .expect("an actor string in the journal");
    bytes[at] ^= 0x20; // change the case of the first letter
                       // Recompute the checksum of the frame holding it.
    let mut pos = 16;
    loop {
        let len = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        let hl = sessctl_store::odb::journal::FRAME_HEADER_LEN;
        let ck = sessctl_store::odb::journal::FRAME_CHECKSUM_AT;
        if at < pos + hl + len {
            let sum = sessctl_store::odb::journal::frame_checksum(
                &bytes[pos..pos + ck],
                &bytes[pos + hl..pos + hl + len],
            );
            bytes[pos + ck..pos + hl].copy_from_slice(&sum);
            break;
        }
        pos += hl + len;
    }
    std::fs::write(&seg, &bytes).unwrap();
    std::fs::remove_dir_all(path.join("index")).unwrap();
    let store = open(&path);
    let problems = store.verify_chains().unwrap();
    assert!(!problems.is_empty(), "the edit went unnoticed");
    assert!(problems[0].contains("operation"), "{problems:?}");
}

// Local only: garbles the index table files on disk.
#[test]
fn a_damaged_index_table_is_read_around_and_replaced() {
    let (_d, path) = new_store();
    let store = open(&path);
    populate(&store);
    let before = snapshot(&store);
    store.reindex().unwrap();
    drop(store);
    // Garble every file of the index.
    for e in std::fs::read_dir(path.join("index")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::write(&p, b"not a table at all").unwrap();
        }
    }
    let store = open(&path);
    assert_eq!(snapshot(&store), before);
    let notes = store.take_recovery_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("ignoring the index tables")),
        "{notes:?}"
    );
    // reindex replaces what is damaged.
    store.reindex().unwrap();
    drop(store);
    let store = open(&path);
    assert_eq!(snapshot(&store), before);
    assert_eq!(store.take_recovery_notes(), Vec::<String>::new());
}

// Local only: journal segments packed into the op log on disk.
#[test]
fn packing_sealed_segments_as_commits_go_loses_no_history() {
    let (_d, path) = new_store();
    let small = OpenOptions {
        segment_target: 16 << 10,
        ..OpenOptions::default()
    };
    let store = Store::open(&path, &small).unwrap();
    populate(&store);
    for i in 0..300 {
        let name = ["a", "f"][i % 2];
        let text = format!("turn {i}: {}", "words ".repeat(20));
        store
            .commit(name, None, turn(&[&text]), Durability::NoSync)
            .unwrap();
    }
    let stats = store.odb().stats().unwrap();
    assert_eq!(stats.journal_segments, 1, "{stats:?}");
    assert!(stats.packs >= 1, "{stats:?}");
    let before = snapshot(&store);
    let head = store.resolve_rev("a").unwrap();
    let history = store.odb().load_messages(&head).unwrap();
    assert_eq!(history.len(), 4 + 150);
    drop(store);
    // The operations of packed segments went to the op log: a rebuilt
    // index gives the same answers, and fsck finds nothing wrong.
    std::fs::remove_dir_all(path.join("index")).unwrap();
    let store = Store::open(&path, &small).unwrap();
    assert_eq!(snapshot(&store), before);
    assert_eq!(store.odb().load_messages(&head).unwrap(), history);
    assert!(store.verify_chains().unwrap().is_empty());
    let report = store
        .fsck(&sessctl_store::fsck::FsckOptions::default(), &mut |_, _| {})
        .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// A fork that drops messages names the session it really continues: the
/// newest first-parent ancestor whose history is exactly the kept messages,
/// else the oldest that still starts with them; never a session that
/// rewrote them (objects-format.md, "Forks").
fn a_fork_names_the_parent_true_to_its_cut(b: &Backend) {
    fork_true_to_its_cut(b, false);
}

/// The same after a repack (the lineage index answers the walk).
// Local only: the lineage index is a file a local repack writes beside the packs.
#[test]
fn a_fork_names_the_parent_true_to_its_cut_after_a_repack() {
    fork_true_to_its_cut(&Backend::local(), true);
}

fn fork_true_to_its_cut(b: &Backend, repacked: bool) {
    use sessctl_store::graph::is_ancestor;
    {
        let store = b.open();
        let d = Durability::NoSync;
        let (_, root) = store.create(Some("x"), turn(&["a", "b"]), d).unwrap();
        let s1 = store.commit("x", None, turn(&["c", "d"]), d).unwrap();
        let s2 = store.commit("x", None, turn(&["e", "f"]), d).unwrap();
        // A full rewrite (base 0), then a continuation of it.
        let rewrite = Turn {
            messages: Messages::History(msgs(&["z", "b", "c"])),
            ..Turn::default()
        };
        let r1 = store.commit("x", None, rewrite, d).unwrap();
        let r2 = store.commit("x", None, turn(&["y"]), d).unwrap();
        if repacked {
            store.repack(&RepackOptions::default()).unwrap();
            assert!(store.lineage_index().is_some());
        }
        let fork = |from, k, name: &str, add: &[&str]| {
            store
                .fork(
                    from,
                    ForkOptions {
                        name: Some(name.into()),
                        cut: Some(Cut::AtMessage(k)),
                        turn: Some(turn(add)),
                    },
                    d,
                )
                .unwrap()
                .1
        };
        let parent = |id| store.odb().session(&id).unwrap().parents[0];
        // Exactly the first 4 messages: s1.
        let f4 = fork(s2, 4, "f4", &["other"]);
        assert_eq!(parent(f4), s1);
        assert_eq!(contents(&store, &f4), ["a", "b", "c", "d", "other"]);
        assert!(!is_ancestor(&store, s2, f4).unwrap());
        assert!(is_ancestor(&store, s1, f4).unwrap());
        // 3: no ancestor has exactly 3; s1 is the oldest with at least 3
        // (the root has 2), and the fork keeps 3 of it.
        let f3 = fork(s2, 3, "f3", &[]);
        assert_eq!(parent(f3), s1);
        let s = store.odb().session(&f3).unwrap();
        assert_eq!((s.messages.base, s.messages.added.len()), (3, 0));
        assert_eq!(contents(&store, &f3), ["a", "b", "c"]);
        // 2: the root, which is exactly those.
        assert_eq!(parent(fork(s2, 2, "f2", &[])), root);
        // 1 from the rewritten line: r1 (3 messages) starts with "z", the
        // sessions before it do not: the walk stops at the rewrite.
        let g1 = fork(r2, 1, "g1", &[]);
        assert_eq!(parent(g1), r1);
        assert_eq!(contents(&store, &g1), ["z"]);
        assert!(!is_ancestor(&store, r2, g1).unwrap());
        // Keeping everything continues the source itself.
        assert_eq!(parent(fork(r2, 4, "g4", &["more"])), r2);
    }
}

/// Tags, renames and resets: ref moves with a reason in the ref log; a
/// renamed conversation keeps its figures, also after a reindex.
fn tag_rename_and_reset_move_refs_and_records(b: &Backend) {
    let store = b.open();
    let d = Durability::NoSync;
    let (_, a) = store.create(Some("x"), turn(&["a"]), d).unwrap();
    let b = store.commit("x", None, turn(&["b"]), d).unwrap();
    store.tag("v1", a, false, d).unwrap();
    assert!(matches!(
        store.tag("v1", b, false, d),
        Err(Error::TagExists { .. })
    ));
    assert_eq!(store.tag("v1", b, true, d).unwrap(), Some(a));
    assert_eq!(store.tags().unwrap(), vec![("v1".to_owned(), b)]);
    assert_eq!(store.delete_tag("v1", d).unwrap(), b);
    assert!(store.tags().unwrap().is_empty());

    store.rename("x", "y", d).unwrap();
    assert!(store.conversation("x").unwrap().is_none());
    let figures = |store: &Store| {
        let c = store.conversation("y").unwrap().unwrap();
        (c.sessions, c.messages, c.head, c.record.conversation_id)
    };
    assert_eq!(figures(&store), (2, 2, Some(b), Some(a)));
    assert_eq!(
        store.get_ref(&RefName::Head).unwrap(),
        Some(RefTarget::Symbolic(RefName::conversation("y").unwrap()))
    );
    // Its sessions still count for it.
    store.commit("y", None, turn(&["c"]), d).unwrap();
    assert_eq!(figures(&store).0, 3);
    assert_eq!(
        store.reset("y", a, d).unwrap(),
        store.resolve_rev("y@{1}").unwrap()
    );
    assert_eq!(figures(&store).1, 1);
    let reasons: Vec<String> = store
        .reflog_entries()
        .unwrap()
        .into_iter()
        .filter(|e| e.name == RefName::conversation("y").unwrap())
        .map(|e| e.reason)
        .collect();
    assert_eq!(reasons, ["rename", "commit", "reset"]);
    let before = figures(&store);
    store.reindex().unwrap();
    assert_eq!(figures(&store), before);
    assert!(matches!(
        store.rename("y", "y", d),
        Err(Error::ConversationExists { .. })
    ));
}

/// An async subagent's session belongs to its spawner's conversation: it
/// carries the spawner's conversation id, so do its continuations, and
/// they count for the spawner's conversation, which keeps its id.
fn a_subagent_session_takes_its_spawners_conversation_id(b: &Backend) {
    use sessctl_store::{SessionMetadata, SessionType};
    let store = b.open();
    let d = Durability::NoSync;
    let (_, root) = store.create(Some("main"), turn(&["go"]), d).unwrap();
    let spawner = store.commit("main", None, turn(&["spawn"]), d).unwrap();
    let mut t = turn(&["sub task"]);
    t.metadata = SessionMetadata {
        session_type: SessionType::AsyncSubagent,
        spawned_by: Some(spawner),
        ..SessionMetadata::default()
    };
    let (sub, s1) = store.create(Some("agent-1"), t, d).unwrap();
    let s = store.odb().session(&s1).unwrap();
    assert_eq!(s.conversation, Some(root));
    assert_eq!(s.conversation_id(s1), root);
    assert_eq!(s.metadata.spawned_by, Some(spawner));
    let s2 = store.commit(&sub, None, turn(&["done"]), d).unwrap();
    assert_eq!(store.odb().session(&s2).unwrap().conversation, Some(root));
    // The spawner's conversation keeps its id and counts the subagent's
    // sessions; the index names it for them.
    let main = store.conversation("main").unwrap().unwrap();
    assert_eq!(main.record.conversation_id, Some(root));
    assert_eq!(main.sessions, 4);
    assert_eq!(
        store.index().conversation_name(&root).unwrap().as_deref(),
        Some("main")
    );
    // Removing the subagent's ref leaves the spawner's conversation whole.
    store.delete(&sub, d).unwrap();
    assert_eq!(
        store.index().conversation_name(&root).unwrap().as_deref(),
        Some("main")
    );
    // A plain agent root starts its own conversation, as before.
    let (_, other) = store.create(Some("other"), turn(&["x"]), d).unwrap();
    assert_eq!(store.odb().session(&other).unwrap().conversation, None);
}

/// `refs_to` (what `show` and `log -n` decorate with) names exactly the
/// refs `refs` lists at those sessions, whether their entries sit in index
/// tables, in the overlay above them, or were moved since a table was
/// written (the newest entry wins).
fn refs_to_names_exactly_the_refs_at_those_sessions(b: &Backend) {
    let store = b.open();
    let turn = |t: &str| Turn {
        messages: Messages::Added(msgs(&[t])),
        ..Turn::default()
    };
    let mut ids = Vec::new();
    for k in 0..6 {
        // Texts of their own: sessions made in the same millisecond with
        // the same content would be one object.
        let (name, id) = store
            .create(
                Some(&format!("c{k}")),
                turn(&format!("hi {k}")),
                Durability::NoSync,
            )
            .unwrap();
        ids.push(id);
        ids.push(
            store
                .commit(&name, None, turn(&format!("more {k}")), Durability::NoSync)
                .unwrap(),
        );
    }
    let tag = |name: &str, id| {
        store
            .transact(
                Transaction {
                    reason: "test".into(),
                    edits: vec![RefEdit {
                        name: RefName::tag(name).unwrap(),
                        expected: PreviousValue::Any,
                        new: Some(RefTarget::Session(id)),
                    }],
                    ..Transaction::default()
                },
                Durability::NoSync,
            )
            .unwrap();
    };
    tag("a", ids[0]);
    tag("b", ids[3]);
    // Into a table, then moved above it: the table's entry is stale.
    store.repack(&RepackOptions::default()).unwrap();
    tag("a", ids[5]);
    tag("c", ids[3]);
    store
        .commit("c1", None, turn("again"), Durability::NoSync)
        .unwrap();
    let check = |store: &Store| {
        let all = store.refs().unwrap();
        for pick in [
            vec![ids[0]],
            vec![ids[3]],
            vec![ids[5], ids[3]],
            ids.clone(),
        ] {
            let mut want: Vec<(RefName, sessctl_store::ObjectId)> = all
                .iter()
                .filter_map(|(n, t)| match t {
                    RefTarget::Session(id) if pick.contains(id) => Some((n.clone(), *id)),
                    _ => None,
                })
                .collect();
            want.sort_by_key(|a| a.0.to_string());
            assert_eq!(store.refs_to(&pick).unwrap(), want, "{pick:?}");
        }
        assert!(store.refs_to(&[ids[0]]).unwrap().is_empty());
        let at3: Vec<String> = store
            .refs_to(&[ids[3]])
            .unwrap()
            .iter()
            .map(|(n, _)| n.to_string())
            .collect();
        // c1's head in the table; its newest entry (the overlay) moved on.
        assert_eq!(at3, ["refs/tags/b", "refs/tags/c"]);
        let at5: Vec<String> = store
            .refs_to(&[ids[5]])
            .unwrap()
            .iter()
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(at5, ["refs/heads/c2", "refs/tags/a"]);
    };
    check(&store);
    check(&b.open());
}

/// The index tables hold a `t:` key per ref target (format version 2), so
/// that `refs_to` is a prefix scan per session and not a pass over every
/// ref; a store whose tables were written before them (version 1, no `t:`
/// keys) still answers, from its `r:` entries, until `reindex` rewrites
/// its tables as version 2.
// Local only: reads and rewrites index table files on disk.
#[test]
fn refs_to_reads_reverse_keys_and_version_1_tables_still_answer() {
    use sessctl_store::index::table::{
        encode_table_as, Table, INDEX_FORMAT_V1, INDEX_FORMAT_VERSION,
    };
    let (_dir, path) = new_store();
    let turn = |t: &str| Turn {
        messages: Messages::Added(msgs(&[t])),
        ..Turn::default()
    };
    let tables = |path: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(path.join("index"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "sit"))
            .collect();
        v.sort();
        v
    };
    let reverse = |id: &sessctl_store::ObjectId, name: &str| {
        [&b"t:"[..], id.as_bytes(), name.as_bytes()].concat()
    };
    let (a, b) = {
        let store = open(&path);
        let (_, a) = store
            .create(Some("one"), turn("first"), Durability::NoSync)
            .unwrap();
        let (_, b) = store
            .create(Some("two"), turn("second"), Durability::NoSync)
            .unwrap();
        store.repack(&RepackOptions::default()).unwrap();
        (a, b)
    };
    let files = tables(&path);
    assert_eq!(files.len(), 1);
    let t = Table::open(&files[0]).unwrap();
    assert_eq!(t.version(), INDEX_FORMAT_VERSION);
    assert_eq!(
        t.get(&reverse(&a, "refs/heads/one")).unwrap(),
        Some(Some(&b""[..]))
    );
    assert_eq!(
        t.get(&reverse(&b, "refs/heads/two")).unwrap(),
        Some(Some(&b""[..]))
    );
    drop(t);

    // Moving a ref takes its old target's key away.
    {
        let store = open(&path);
        let c = store
            .commit("one", None, turn("more"), Durability::NoSync)
            .unwrap();
        store.repack(&RepackOptions::default()).unwrap();
        let stale = reverse(&a, "refs/heads/one");
        let fresh = reverse(&c, "refs/heads/one");
        let newest = Table::open(tables(&path).last().unwrap()).unwrap();
        assert!(matches!(newest.get(&stale).unwrap(), None | Some(None)));
        assert_eq!(newest.get(&fresh).unwrap(), Some(Some(&b""[..])));
        assert_eq!(
            store.refs_to(&[a, b, c]).unwrap(),
            [
                (RefName::conversation("one").unwrap(), c),
                (RefName::conversation("two").unwrap(), b)
            ]
        );
    }
    let want = open(&path).refs_to(&[b]).unwrap();
    assert_eq!(want.len(), 1);

    // The tables as a sessctl before version 2 wrote them: no `t:` keys.
    for f in tables(&path) {
        let t = Table::open(&f).unwrap();
        let entries: Vec<(Vec<u8>, Option<Vec<u8>>)> = t
            .prefix(b"")
            .unwrap()
            .map(Result::unwrap)
            .filter(|(k, _)| !k.starts_with(b"t:"))
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        let bytes = encode_table_as(
            t.meta(),
            INDEX_FORMAT_V1,
            entries.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
        )
        .unwrap();
        drop(t);
        std::fs::write(&f, bytes).unwrap();
    }
    let store = open(&path);
    assert_eq!(store.refs_to(&[b]).unwrap(), want);
    assert!(store.take_recovery_notes().is_empty());
    // A table that merges into the bottom of the stack makes its `t:` keys
    // from its `r:` entries: version 2 from then on.
    let d = store
        .commit("two", None, turn("and more"), Durability::NoSync)
        .unwrap();
    store.repack(&RepackOptions::default()).unwrap();
    let files = tables(&path);
    assert_eq!(files.len(), 1, "merged into one: {files:?}");
    let t = Table::open(&files[0]).unwrap();
    assert_eq!(t.version(), INDEX_FORMAT_VERSION);
    assert_eq!(
        t.get(&reverse(&d, "refs/heads/two")).unwrap(),
        Some(Some(&b""[..]))
    );
    drop(t);
    let want = open(&path).refs_to(&[d]).unwrap();
    assert_eq!(want, [(RefName::conversation("two").unwrap(), d)]);
    let b = d;
    // reindex writes version 2 again, `t:` keys and all.
    store.reindex().unwrap();
    for f in tables(&path) {
        assert_eq!(Table::open(&f).unwrap().version(), INDEX_FORMAT_VERSION);
    }
    assert_eq!(store.refs_to(&[b]).unwrap(), want);
    assert_eq!(open(&path).refs_to(&[b]).unwrap(), want);
}
