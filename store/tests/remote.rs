//! Push, pull and clone between stores on disk: only missing objects
//! travel, refs move by compare-and-swap, a diverged ref moves nothing.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;

use serde_json::json;
use sessctl_store::remote::{clone, pull, push, RefOutcome};
use sessctl_store::{Durability, Error, Messages, ObjectId, OpenOptions, RefName, Store, Turn};

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

fn open(p: &Path) -> Store {
    Store::open(p, &OpenOptions::default()).unwrap()
}

fn head(s: &Store, name: &str) -> ObjectId {
    s.resolve_rev(name).unwrap()
}

#[test]
fn clone_push_and_pull_send_only_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let (a_path, b_path) = (dir.path().join("a"), dir.path().join("b"));
    {
        let a = Store::init(&a_path).unwrap();
        a.create(Some("fix"), turn("one"), Durability::Sync)
            .unwrap();
        a.commit("fix", None, turn("two"), Durability::Sync)
            .unwrap();
        a.create(Some("other"), turn("three"), Durability::Sync)
            .unwrap();
    }
    let (b, report) = clone(&a_path, &b_path).unwrap();
    assert_eq!(report.objects, 6);
    let a = open(&a_path);
    assert_eq!(head(&b, "fix"), head(&a, "fix"));
    assert_eq!(
        b.get_ref(&RefName::Head).unwrap(),
        a.get_ref(&RefName::Head).unwrap()
    );
    // A clone into a directory that holds something is refused.
    assert!(matches!(clone(&a_path, &a_path), Err(Error::Invalid(_))));

    // Fast-forward from a to b: one session and one blob travel.
    let old = head(&a, "fix");
    let new = a
        .commit("fix", None, turn("four"), Durability::Sync)
        .unwrap();
    let r = push(&a, &b, &["fix".into()], Durability::Sync).unwrap();
    assert_eq!(
        r.refs,
        vec![(
            RefName::conversation("fix").unwrap(),
            RefOutcome::FastForward { from: old, to: new }
        )]
    );
    assert_eq!(r.objects, 2);
    assert_eq!(push(&a, &b, &[], Durability::Sync).unwrap().objects, 0);
    assert_eq!(b.odb().load_messages(&new).unwrap().len(), 3);

    // And back from b to a by pull.
    let from_b = b
        .commit("other", None, turn("five"), Durability::Sync)
        .unwrap();
    let r = pull(&a, &b, &[], Durability::Sync).unwrap();
    assert_eq!(r.objects, 2);
    assert_eq!(head(&a, "other"), from_b);
    assert_eq!(pull(&a, &b, &[], Durability::Sync).unwrap().objects, 0);
}

#[test]
fn a_diverged_conversation_moves_nothing_on_either_side() {
    let dir = tempfile::tempdir().unwrap();
    let (a_path, b_path) = (dir.path().join("a"), dir.path().join("b"));
    let a = Store::init(&a_path).unwrap();
    a.create(Some("fix"), turn("one"), Durability::Sync)
        .unwrap();
    let (b, _) = clone(&a_path, &b_path).unwrap();
    let ours = a.commit("fix", None, turn("a"), Durability::Sync).unwrap();
    let theirs = b.commit("fix", None, turn("b"), Durability::Sync).unwrap();
    a.create(Some("extra"), turn("x"), Durability::Sync)
        .unwrap();
    let r = push(&a, &b, &[], Durability::Sync).unwrap();
    assert!(!r.applied);
    assert_eq!(r.objects, 0);
    let m = r.refusals()[0].to_owned();
    assert!(
        m.contains(&ours.to_hex_prefix(12)) && m.contains(&theirs.to_hex_prefix(12)),
        "{m}"
    );
    assert!(b.conversation("extra").unwrap().is_none());
    assert!(!b.odb().contains(&ours).unwrap());
    let r = pull(&a, &b, &["fix".into()], Durability::Sync).unwrap();
    assert!(!r.applied);
    assert_eq!((head(&a, "fix"), head(&b, "fix")), (ours, theirs));
    // Naming a conversation the sender lacks is an error.
    assert!(matches!(
        push(&a, &b, &["nope".into()], Durability::Sync),
        Err(Error::NoSuchConversation { .. })
    ));
}

/// A forced push overwrites a diverged ref; a lease only while the
/// receiver's ref holds what it expects, and a failed lease moves nothing.
#[test]
fn a_forced_push_overwrites_a_diverged_ref_as_its_lease_allows() {
    use sessctl_store::remote::{push_forced, Force, Lease, LeaseExpect};
    let dir = tempfile::tempdir().unwrap();
    let (a_path, b_path) = (dir.path().join("a"), dir.path().join("b"));
    {
        let a = Store::init(&a_path).unwrap();
        a.create(Some("fix"), turn("one"), Durability::Sync)
            .unwrap();
        a.create(Some("other"), turn("x"), Durability::Sync)
            .unwrap();
    }
    let (b, _) = clone(&a_path, &b_path).unwrap();
    let a = open(&a_path);
    let ours = a.commit("fix", None, turn("a"), Durability::Sync).unwrap();
    let theirs = b.commit("fix", None, turn("b"), Durability::Sync).unwrap();
    let fix = RefName::conversation("fix").unwrap();
    let lease = |expect| {
        Force::Leases(vec![Lease {
            name: Some(fix.clone()),
            expect,
        }])
    };
    // The bare lease: b's value is not one a's log shows for fix.
    for force in [
        Force::No,
        lease(LeaseExpect::Seen),
        lease(LeaseExpect::At(ours)),
        lease(LeaseExpect::Absent),
    ] {
        let r = push_forced(&a, &b, &[], &force, Durability::Sync).unwrap();
        assert!(!r.applied, "{force:?}");
        assert_eq!(head(&b, "fix"), theirs);
    }
    // A lease on what b holds forces; other refs are not forced.
    let r = push_forced(
        &a,
        &b,
        &[],
        &lease(LeaseExpect::At(theirs)),
        Durability::Sync,
    )
    .unwrap();
    assert!(r.applied);
    assert!(r.refs.contains(&(
        fix.clone(),
        RefOutcome::Forced {
            from: theirs,
            to: ours
        }
    )));
    assert_eq!(head(&b, "fix"), ours);
    // --force: b went on from a's value; forced back to it.
    b.commit("fix", None, turn("more"), Durability::Sync)
        .unwrap();
    let r = push_forced(&a, &b, &[], &Force::All, Durability::Sync).unwrap();
    assert!(r.applied);
    assert_eq!(head(&b, "fix"), ours);
}
