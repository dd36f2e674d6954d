//! `Store::put`: a session under any parent with its refs moved atomically
//! (what checkpointers build on). Each on a local store and on a remote
//! one (`name::local`, `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use std::collections::BTreeMap;

use serde_json::json;
use sessctl_store::{
    Durability, Error, Expect, Messages, Put, PutConversation, RefName, RefTarget, Turn,
};

fn turn(msgs: Vec<serde_json::Value>) -> Turn {
    Turn {
        messages: Messages::Added(msgs),
        ..Turn::default()
    }
}

fn put(parent: Option<sessctl_store::ObjectId>, keep: Option<u64>, text: &str) -> Put {
    Put {
        reason: "test".into(),
        parent,
        keep,
        turn: turn(vec![json!({"role": "user", "content": text})]),
        ..Put::default()
    }
}

fn put_forks_inside_a_conversation_and_moves_tags_with_compare_and_swap(b: &Backend) {
    put_forks_inside_a_conversation_and_moves_tags_with_compare_and_swap_(b).unwrap();
}

fn put_forks_inside_a_conversation_and_moves_tags_with_compare_and_swap_(
    b: &Backend,
) -> Result<(), Error> {
    let store = b.open();
    let d = Durability::Sync;
    let conv = |expected| {
        Some(PutConversation {
            name: "lg.t".into(),
            expected,
            metadata: BTreeMap::from([("thread_id".into(), json!("t"))]),
        })
    };
    let root = store.put(
        Put {
            conversation: conv(Expect::Missing),
            tags: vec![("lg.t.1".into(), Expect::Missing)],
            ..put(None, None, "one")
        },
        d,
    )?;
    let two = store.put(
        Put {
            conversation: conv(Expect::Is(root)),
            tags: vec![("lg.t.2".into(), Expect::Missing)],
            ..put(Some(root), None, "two")
        },
        d,
    )?;
    assert_eq!(store.odb().load_messages(&two)?.len(), 2);
    // A sibling that keeps nothing of the parent: a fork; the head follows it.
    let other = store.put(
        Put {
            conversation: conv(Expect::Any),
            ..put(Some(root), Some(0), "other")
        },
        d,
    )?;
    assert_eq!(store.odb().session(&other)?.parents, vec![root]);
    assert_eq!(
        store.odb().load_messages(&other)?,
        vec![json!({"role": "user", "content": "other"})]
    );
    assert_eq!(store.resolve_rev("lg.t")?, other);
    let info = store.conversation("lg.t")?.expect("created");
    assert_eq!(info.record.metadata["thread_id"], json!("t"));

    // Lost races change nothing.
    let stale = store.put(
        Put {
            conversation: conv(Expect::Is(two)),
            ..put(Some(two), None, "late")
        },
        d,
    );
    assert!(
        matches!(stale, Err(Error::RefOutOfDate { .. })),
        "{stale:?}"
    );
    let taken = store.put(
        Put {
            tags: vec![("lg.t.1".into(), Expect::Missing)],
            ..put(Some(two), None, "again")
        },
        d,
    );
    assert!(
        matches!(taken, Err(Error::RefOutOfDate { .. })),
        "{taken:?}"
    );
    assert_eq!(store.resolve_rev("lg.t")?, other);
    let tags = store.refs_with_prefix("refs/tags/lg.t.")?;
    assert_eq!(
        tags,
        vec![
            (RefName::tag("lg.t.1")?, RefTarget::Session(root)),
            (RefName::tag("lg.t.2")?, RefTarget::Session(two)),
        ]
    );
    assert!(store.refs_with_prefix("refs/tags/lg.u.")?.is_empty());

    // Bad input: one clear error, nothing written.
    for bad in [put(None, Some(1), "x"), put(Some(root), Some(2), "x")] {
        assert!(matches!(store.put(bad, d), Err(Error::Invalid(_))));
    }
    let whole = Put {
        turn: Turn {
            messages: Messages::History(vec![]),
            ..Turn::default()
        },
        ..put(None, None, "x")
    };
    assert!(matches!(store.put(whole, d), Err(Error::Invalid(_))));
    store.archive("lg.t", d)?;
    let archived = store.put(
        Put {
            conversation: conv(Expect::Any),
            ..put(Some(root), None, "x")
        },
        d,
    );
    assert!(matches!(archived, Err(Error::ConversationArchived { .. })));
    Ok(())
}

fn set_conversation_metadata_merges_and_removes_keys(b: &Backend) {
    set_conversation_metadata_merges_and_removes_keys_(b).unwrap();
}

fn set_conversation_metadata_merges_and_removes_keys_(b: &Backend) -> Result<(), Error> {
    let store = b.open();
    let d = Durability::Sync;
    store.create(Some("c"), turn(vec![json!("hi")]), d)?;
    store.set_conversation_metadata(
        "c",
        BTreeMap::from([("a".into(), Some(json!(1))), ("b".into(), Some(json!([2])))]),
        d,
    )?;
    store.set_conversation_metadata("c", BTreeMap::from([("a".into(), None)]), d)?;
    let meta = store.conversation("c")?.expect("there").record.metadata;
    assert_eq!(meta, BTreeMap::from([("b".into(), json!([2]))]));
    let missing = store.set_conversation_metadata("nope", BTreeMap::new(), d);
    assert!(matches!(missing, Err(Error::NoSuchConversation { .. })));
    Ok(())
}

fn history_range_is_a_slice_of_history_read_from_the_newest_sessions(b: &Backend) {
    history_range_is_a_slice_of_history_read_from_the_newest_sessions_(b).unwrap();
}

fn history_range_is_a_slice_of_history_read_from_the_newest_sessions_(
    b: &Backend,
) -> Result<(), Error> {
    let store = b.open();
    let d = Durability::Sync;
    // A chain with cuts and forks: each session keeps some of its parent's
    // messages (all, a few, none) and adds 0..3.
    let mut sessions = Vec::new();
    let mut parent = None;
    for i in 0..60u64 {
        let len = match parent {
            Some(p) => store.odb().session(&p)?.messages.len(),
            None => 0,
        };
        let keep = parent.map(|_| match i % 7 {
            0 => 0,
            3 => len / 2,
            _ => len,
        });
        let msgs = (0..i % 4).map(|k| json!(format!("m{i}.{k}"))).collect();
        let id = store.put(
            Put {
                parent,
                keep,
                turn: turn(msgs),
                ..put(None, None, "")
            },
            d,
        )?;
        sessions.push(id);
        // Sometimes fork from an older session instead of the newest.
        parent = Some(if i % 5 == 4 {
            sessions[(i / 2) as usize]
        } else {
            id
        });
    }
    for id in &sessions {
        let whole = store.odb().history(id)?;
        let n = whole.len() as u64;
        for start in 0..=n + 1 {
            for end in [start, start + 1, n / 2, n, n + 3] {
                let want: Vec<_> = if start < end.min(n) {
                    whole[start as usize..end.min(n) as usize].to_vec()
                } else {
                    Vec::new()
                };
                assert_eq!(
                    store.odb().history_range(id, start, end)?,
                    want,
                    "{start}..{end} of {n}"
                );
            }
        }
    }
    Ok(())
}

two_backends!(
    put_forks_inside_a_conversation_and_moves_tags_with_compare_and_swap,
    set_conversation_metadata_merges_and_removes_keys,
    history_range_is_a_slice_of_history_read_from_the_newest_sessions,
);
