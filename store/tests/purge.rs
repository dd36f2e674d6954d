//! Expiring the ref log, redaction and gc's why, through the public API:
//! each behaviour test on a local store and on a remote one
//! (`name::local`, `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use std::path::{Path, PathBuf};

use serde_json::json;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::{GcOptions, Prune};
use sessctl_store::purge::{expiry_cutoff, RedactOptions, WhyStep};
use sessctl_store::{
    Durability, ForkOptions, Messages, ObjectId, OpenOptions, RefName, Store, Turn,
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

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

fn heads(store: &Store) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for e in store.live_reflog_entries().unwrap() {
        let name = e.name.to_string();
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(x) => x.1 += 1,
            None => out.push((name, 1)),
        }
    }
    out.sort();
    out
}

/// "[REDACTED]" for every "SECRET".
fn redactor(text: &str) -> Option<(String, usize)> {
    let n = text.matches("SECRET").count();
    (n > 0).then(|| (text.replace("SECRET", "[REDACTED]"), n))
}

fn opts() -> RedactOptions {
    RedactOptions {
        reason: "test".into(),
        dry_run: false,
        durability: Durability::Sync,
    }
}

fn an_expiry_is_an_operation_that_keeps_every_chain_whole(b: &Backend) {
    let store = b.open();
    store
        .create(Some("a"), turn("one"), Durability::NoSync)
        .unwrap();
    store
        .commit("a", None, turn("two"), Durability::NoSync)
        .unwrap();
    store
        .create(Some("b"), turn("bee"), Durability::Sync)
        .unwrap();
    let before = heads(&store);
    assert_eq!(
        before,
        vec![
            ("HEAD".into(), 2),
            ("refs/heads/a".into(), 2),
            ("refs/heads/b".into(), 1)
        ]
    );
    // A cutoff before everything expires nothing, and writes nothing.
    let r = store
        .expire_reflog(None, 0, false, Durability::Sync)
        .unwrap();
    assert_eq!((r.expired(), r.op), (0, None));
    let a = RefName::conversation("a").unwrap();
    let r = store
        .expire_reflog(
            Some(std::slice::from_ref(&a)),
            expiry_cutoff(Prune::Now),
            false,
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(r.expired(), 2);
    assert!(r.op.is_some());
    assert_eq!(
        heads(&store),
        vec![("HEAD".into(), 2), ("refs/heads/b".into(), 1)]
    );
    // Every entry is still in the operations; the chains verify.
    assert_eq!(store.reflog_entries().unwrap().len(), 5);
    assert_eq!(store.verify_chains().unwrap(), Vec::<String>::new());
    // A new move chains on to the expired entries and is live.
    store
        .commit("a", None, turn("three"), Durability::Sync)
        .unwrap();
    assert!(heads(&store).contains(&("refs/heads/a".into(), 1)));
    assert_eq!(store.verify_chains().unwrap(), Vec::<String>::new());
    // Reopened (the op log as written), the same.
    drop(store);
    let store = b.open();
    assert!(heads(&store).contains(&("refs/heads/a".into(), 1)));
    let fsck = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(fsck.is_clean(), "{:?}", fsck.problems);
}

fn redact_rewrites_descendants_and_keeps_what_never_held_the_text(b: &Backend) {
    let store = b.open();
    let (_, root) = store
        .create(Some("main"), turn("hello"), Durability::NoSync)
        .unwrap();
    let leak = store
        .commit("main", None, turn("key SECRET here"), Durability::NoSync)
        .unwrap();
    let after = store
        .commit("main", None, turn("later"), Durability::NoSync)
        .unwrap();
    store
        .fork(
            leak,
            ForkOptions {
                name: Some("side".into()),
                ..ForkOptions::default()
            },
            Durability::NoSync,
        )
        .unwrap();
    let side = store
        .commit("side", None, turn("side"), Durability::NoSync)
        .unwrap();
    let (_, other) = store
        .create(Some("other"), turn("SECRE T is not it"), Durability::Sync)
        .unwrap();

    let dry = store
        .redact(
            None,
            &redactor,
            &RedactOptions {
                dry_run: true,
                ..opts()
            },
        )
        .unwrap();
    assert_eq!(dry.op, None);
    assert_eq!(
        store
            .resolve_ref(&RefName::conversation("main").unwrap())
            .unwrap(),
        Some(after)
    );

    let r = store.redact(None, &redactor, &opts()).unwrap();
    assert_eq!(r.matches, 1);
    assert_eq!(r.blobs.len(), 1);
    let old: Vec<ObjectId> = r.sessions.iter().map(|s| s.old).collect();
    // The leaking session and its descendants; not the root, not other.
    for id in [leak, after, side] {
        assert!(old.contains(&id), "{id} not rewritten");
    }
    assert!(!old.contains(&root) && !old.contains(&other));
    // Parents before children.
    let pos = |id| old.iter().position(|x| *x == id).unwrap();
    assert!(pos(leak) < pos(after) && pos(leak) < pos(side));
    let main = store
        .resolve_ref(&RefName::conversation("main").unwrap())
        .unwrap()
        .unwrap();
    assert_ne!(main, after);
    let history = store.odb().load_messages(&main).unwrap();
    assert_eq!(history[1]["content"], "key [REDACTED] here");
    assert_eq!(history.len(), 3);
    // Same conversation id, same root.
    let s = store.odb().session(&main).unwrap();
    assert_eq!(s.conversation_id(main), root);
    assert_eq!(store.odb().history(&main).unwrap().len(), 3);
    // The ref log says why and how much, and the chains verify.
    let newest = store.live_reflog_entries().unwrap().pop().unwrap();
    assert_eq!(
        newest.reason,
        "redact: test (1 match, 3 sessions rewritten)"
    );
    assert_eq!(store.verify_chains().unwrap(), Vec::<String>::new());

    // Why is the old leaking session kept? A ref-log entry.
    let why = store.why_reachable(&leak, i64::MAX).unwrap().unwrap();
    assert!(matches!(why[0], WhyStep::Reflog { .. }), "{why:?}");
    // Expire and prune: gone, and nothing reaches it any more.
    store
        .expire_reflog(None, expiry_cutoff(Prune::Now), false, Durability::Sync)
        .unwrap();
    let gc = store
        .gc(&GcOptions {
            prune: Prune::Now,
            ..GcOptions::default()
        })
        .unwrap();
    assert!(gc.pruned >= 4, "{gc:?}");
    assert!(!store.odb().contains(&leak).unwrap());
    assert_eq!(store.why_reachable(&leak, i64::MAX).unwrap(), None);
    let why = store.why_reachable(&root, i64::MAX).unwrap().unwrap();
    assert!(matches!(why[0], WhyStep::Ref(_)), "{why:?}");
    let fsck = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(fsck.is_clean(), "{:?}", fsck.problems);
    // The conversation still counts its sessions right after the index
    // rebuild: the pruned ones are not indexed.
    let info = store.conversation("main").unwrap().unwrap();
    assert_eq!(info.sessions, 3);
}

fn a_ref_moved_during_a_redaction_fails_it_whole(b: &Backend) {
    let store = b.open();
    store
        .create(Some("main"), turn("key SECRET"), Durability::Sync)
        .unwrap();
    store
        .create(Some("two"), turn("SECRET again"), Durability::Sync)
        .unwrap();
    // Another process commits on main while the redaction reads (the
    // redactor runs between reading the refs and writing).
    let other = b.open();
    let moved = std::cell::Cell::new(false);
    let racing = |text: &str| {
        if !moved.replace(true) {
            other
                .commit("main", None, turn("meanwhile"), Durability::Sync)
                .unwrap();
        }
        redactor(text)
    };
    let e = store.redact(None, &racing, &opts()).unwrap_err();
    assert!(
        matches!(e, sessctl_store::Error::RefOutOfDate { .. }),
        "{e}"
    );
    // Nothing of it was written: no redact entry, and both conversations
    // still hold the text.
    assert!(!store
        .reflog_entries()
        .unwrap()
        .iter()
        .any(|e| e.reason.starts_with("redact")));
    for conv in ["main", "two"] {
        let head = store
            .resolve_ref(&RefName::conversation(conv).unwrap())
            .unwrap()
            .unwrap();
        let text = serde_json::to_string(&store.odb().load_messages(&head).unwrap()).unwrap();
        assert!(text.contains("SECRET"), "{conv}: {text}");
    }
    // Run again: it goes through, the new turn included.
    let r = store.redact(None, &redactor, &opts()).unwrap();
    assert_eq!(r.matches, 2);
    let head = store
        .resolve_ref(&RefName::conversation("main").unwrap())
        .unwrap()
        .unwrap();
    let text = serde_json::to_string(&store.odb().load_messages(&head).unwrap()).unwrap();
    assert!(
        !text.contains("SECRET") && text.contains("meanwhile"),
        "{text}"
    );
}

fn a_conversation_with_a_run_in_progress_is_not_redacted(b: &Backend) {
    let store = b.open();
    store
        .create(Some("main"), turn("key SECRET"), Durability::Sync)
        .unwrap();
    let run = store.begin_run("main").unwrap();
    let e = store.redact(None, &redactor, &opts()).unwrap_err();
    assert!(matches!(e, sessctl_store::Error::Busy { .. }), "{e}");
    store.fail_run(&run, "stopped").unwrap();
    let r = store.redact(None, &redactor, &opts()).unwrap();
    assert_eq!(r.refs.len(), 1);
}

fn a_record_changed_during_a_redaction_is_not_written_back(b: &Backend) {
    let store = b.open();
    let (_, root) = store
        .create(Some("main"), turn("hello"), Durability::Sync)
        .unwrap();
    // A fork not committed on yet: its record names no conversation id.
    store
        .fork(
            root,
            ForkOptions {
                name: Some("f".into()),
                ..ForkOptions::default()
            },
            Durability::Sync,
        )
        .unwrap();
    let mut note = std::collections::BTreeMap::new();
    note.insert("note".to_owned(), Some(json!("key SECRET")));
    store
        .set_conversation_metadata("f", note, Durability::Sync)
        .unwrap();
    // Only f's record holds the text: redact moves no ref. Another process
    // makes the fork's first commit while the redaction reads the record.
    let other = b.open();
    let moved = std::cell::Cell::new(false);
    let racing = |text: &str| {
        if text.contains("SECRET") && !moved.replace(true) {
            other
                .commit("f", None, turn("first on the fork"), Durability::Sync)
                .unwrap();
        }
        redactor(text)
    };
    let e = store.redact(None, &racing, &opts()).unwrap_err();
    assert!(
        matches!(e, sessctl_store::Error::RecordOutOfDate { .. }),
        "{e}"
    );
    // The commit's record stands: the fork has its conversation id.
    let f = store.conversation("f").unwrap().unwrap();
    assert!(f.record.conversation_id.is_some());
    assert_eq!(f.record.metadata["note"], json!("key SECRET"));
    // Run again: it goes through and keeps the conversation id.
    let r = store.redact(None, &redactor, &opts()).unwrap();
    assert_eq!(r.records, vec!["f".to_owned()]);
    let g = store.conversation("f").unwrap().unwrap();
    assert_eq!(g.record.conversation_id, f.record.conversation_id);
    assert_eq!(g.record.metadata["note"], json!("key [REDACTED]"));
}

fn a_redaction_leaves_session_counts_and_usage_as_they_were(b: &Backend) {
    let store = b.open();
    let used = |text: &str, tokens: u64| Turn {
        run: sessctl_store::RunSummary {
            duration_ms: 5,
            usage: sessctl_store::Usage {
                total_tokens: tokens,
                prompt_tokens: tokens / 2,
                completion_tokens: tokens - tokens / 2,
                requests: 1,
            },
        },
        ..turn(text)
    };
    store
        .create(Some("main"), used("hello", 10), Durability::Sync)
        .unwrap();
    let leak = store
        .commit("main", None, used("key SECRET", 20), Durability::Sync)
        .unwrap();
    store
        .commit("main", None, used("later", 40), Durability::Sync)
        .unwrap();
    store
        .fork(
            leak,
            ForkOptions {
                name: Some("side".into()),
                ..ForkOptions::default()
            },
            Durability::Sync,
        )
        .unwrap();
    store
        .commit("side", None, used("side", 80), Durability::Sync)
        .unwrap();
    let figures = |store: &Store| {
        ["main", "side"]
            .map(|c| {
                let i = store.conversation(c).unwrap().unwrap();
                (
                    i.sessions,
                    i.usage.total_tokens,
                    i.usage.requests,
                    i.messages,
                )
            })
            .to_vec()
    };
    let before = figures(&store);
    let r = store.redact(None, &redactor, &opts()).unwrap();
    assert_eq!(r.sessions.len(), 3);
    assert_eq!(figures(&store), before);
    // The same from a rebuilt index, and from a handle that opened after.
    store.reindex().unwrap();
    assert_eq!(figures(&store), before);
    drop(store);
    let store = b.open();
    assert_eq!(figures(&store), before);
    // Once the old sessions are pruned, the new ones count in their place.
    store
        .expire_reflog(None, expiry_cutoff(Prune::Now), false, Durability::Sync)
        .unwrap();
    store
        .gc(&GcOptions {
            prune: Prune::Now,
            ..GcOptions::default()
        })
        .unwrap();
    assert_eq!(figures(&store), before);
}

fn keys_that_redaction_would_merge_fail_it_whole(b: &Backend) {
    let store = b.open();
    let keys = Turn {
        messages: Messages::Added(vec![json!({
            "role": "user",
            "content": "keys",
            "env": {"SECRET-A": "prod", "SECRET-B": "staging"},
        })]),
        ..Turn::default()
    };
    store.create(Some("main"), keys, Durability::Sync).unwrap();
    let head = store
        .resolve_ref(&RefName::conversation("main").unwrap())
        .unwrap()
        .unwrap();
    let whole = |text: &str| {
        text.contains("SECRET")
            .then(|| ("[REDACTED]".to_owned(), 1))
    };
    let ops = store.reflog_entries().unwrap().len();
    let e = store.redact(None, &whole, &opts()).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, sessctl_store::Error::Invalid(_)), "{msg}");
    assert!(msg.contains("[REDACTED]") && msg.contains("blob "), "{msg}");
    assert!(!msg.contains("SECRET"), "{msg}");
    // Nothing written.
    assert_eq!(store.reflog_entries().unwrap().len(), ops);
    assert_eq!(
        store
            .resolve_ref(&RefName::conversation("main").unwrap())
            .unwrap(),
        Some(head)
    );
    // A replacement that keeps them apart goes through, values kept.
    store.redact(None, &redactor, &opts()).unwrap();
    let head = store
        .resolve_ref(&RefName::conversation("main").unwrap())
        .unwrap()
        .unwrap();
    let m = store.odb().load_messages(&head).unwrap();
    assert_eq!(
        m[0]["env"],
        json!({"[REDACTED]-A": "prod", "[REDACTED]-B": "staging"})
    );
}

fn a_subagent_session_names_its_spawner_as_rewritten(b: &Backend) {
    let store = b.open();
    let (_, spawner) = store
        .create(Some("main"), turn("key SECRET"), Durability::Sync)
        .unwrap();
    // Listed after main, so read first by a walk that pops the last root.
    let mut sub = turn("sub work");
    sub.metadata.spawned_by = Some(spawner);
    store.create(Some("sub"), sub, Durability::Sync).unwrap();
    let r = store.redact(None, &redactor, &opts()).unwrap();
    assert_eq!(r.sessions.len(), 2, "{r:?}");
    let main = store
        .resolve_ref(&RefName::conversation("main").unwrap())
        .unwrap()
        .unwrap();
    assert_ne!(main, spawner);
    let sub = store
        .resolve_ref(&RefName::conversation("sub").unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(
        store.odb().session(&sub).unwrap().metadata.spawned_by,
        Some(main)
    );
}

fn redact_names_the_operations_that_still_hold_the_text(b: &Backend) {
    let store = b.open();
    let titled = Turn {
        title: Some("about SECRET".into()),
        ..turn("hello")
    };
    store
        .create(Some("main"), titled, Durability::Sync)
        .unwrap();
    let first = store.reflog_entries().unwrap().last().unwrap().op;
    let retitled = Turn {
        title: Some("about it".into()),
        ..turn("more")
    };
    store
        .commit("main", None, retitled, Durability::Sync)
        .unwrap();
    let run = store.begin_run("main").unwrap();
    store.fail_run(&run, "tool said SECRET").unwrap();
    let failed = store
        .odb()
        .backend()
        .ops_after(0)
        .unwrap()
        .last()
        .unwrap()
        .0;
    let r = store.redact(None, &redactor, &opts()).unwrap();
    // The current record is clean: the record stays; the first session's
    // title is rewritten; the operations are not.
    assert!(r.records.is_empty(), "{r:?}");
    assert_eq!(r.operations, vec![first, failed]);
    assert_eq!(r.to_json()["operations"], json!([first, failed]));
    // A second run: nothing to rewrite, the operations still named.
    let again = store.redact(None, &redactor, &opts()).unwrap();
    assert_eq!((again.matches, again.operations), (0, vec![first, failed]));
}

// Local only: reads and writes the FORMAT file of a store directory.
#[test]
fn the_first_expiry_raises_the_store_format_so_older_readers_refuse_it_as_newer() {
    let (_d, path) = new_store();
    let format = || std::fs::read_to_string(path.join("FORMAT")).unwrap();
    assert_eq!(format(), "sessctl store format 1\n");
    let store = open(&path);
    store
        .create(Some("a"), turn("one"), Durability::Sync)
        .unwrap();
    // Writes without an expiry leave it as it was.
    store
        .commit("a", None, turn("two"), Durability::Sync)
        .unwrap();
    assert_eq!(format(), "sessctl store format 1\n");
    // A dry run, or an expiry of nothing, writes nothing.
    store
        .expire_reflog(None, expiry_cutoff(Prune::Now), true, Durability::Sync)
        .unwrap();
    store
        .expire_reflog(None, 0, false, Durability::Sync)
        .unwrap();
    assert_eq!(format(), "sessctl store format 1\n");
    let r = store
        .expire_reflog(None, expiry_cutoff(Prune::Now), false, Durability::Sync)
        .unwrap();
    assert!(r.op.is_some());
    // Format 1 readers accept only format 1: they refuse this store as
    // newer instead of reading the expiry as damage.
    assert_eq!(format(), "sessctl store format 2\n");
    drop(store);
    let store = open(&path);
    store
        .commit("a", None, turn("three"), Durability::Sync)
        .unwrap();
    assert!(!store.live_reflog_entries().unwrap().is_empty());
    drop(store);
    // A format this sessctl does not know is refused, naming both.
    std::fs::write(path.join("FORMAT"), "sessctl store format 5\n").unwrap();
    let e = Store::open(&path, &OpenOptions::default()).unwrap_err();
    assert!(
        matches!(e, sessctl_store::Error::UnsupportedFormat { .. }),
        "{e}"
    );
}

two_backends!(
    an_expiry_is_an_operation_that_keeps_every_chain_whole,
    redact_rewrites_descendants_and_keeps_what_never_held_the_text,
    a_ref_moved_during_a_redaction_fails_it_whole,
    a_conversation_with_a_run_in_progress_is_not_redacted,
    a_record_changed_during_a_redaction_is_not_written_back,
    a_redaction_leaves_session_counts_and_usage_as_they_were,
    keys_that_redaction_would_merge_fail_it_whole,
    a_subagent_session_names_its_spawner_as_rewritten,
    redact_names_the_operations_that_still_hold_the_text,
);
