//! Revisions through `Store::resolve_rev`: names, prefixes, `~N`, `^N`,
//! chains, and errors that say what did not resolve and why.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
use backends::Backend;

use std::collections::HashMap;

use serde_json::json;
use sessctl_store::refs::{PreviousValue, RefEdit};
use sessctl_store::rev::{RevParseError, RevSpec, Step};
use sessctl_store::{
    Durability, Error, ForkOptions, Messages, ObjectId, RefName, RefTarget, Session, Store,
    Transaction, Turn, WriteBatch,
};

fn turn(at: i64, text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        created_at: Some(1_763_000_000_000 + at),
        ..Turn::default()
    }
}

struct Ids {
    r: ObjectId,
    s1: ObjectId,
    s2: ObjectId,
    f1: ObjectId,
    m: ObjectId,
}

/// fix: R - S1 - S2 - M, where M also has F1 (on side, forked from S1).
fn store(b: &Backend) -> (Store, Ids) {
    let store = b.open();
    let d = Durability::NoSync;
    let (_, r) = store.create(Some("fix"), turn(0, "a"), d).unwrap();
    let s1 = store.commit("fix", None, turn(1, "b"), d).unwrap();
    let (_, _) = store
        .fork(
            s1,
            ForkOptions {
                name: Some("side".into()),
                ..ForkOptions::default()
            },
            d,
        )
        .unwrap();
    let f1 = store.commit("side", None, turn(2, "c"), d).unwrap();
    let s2 = store.commit("fix", None, turn(3, "d"), d).unwrap();
    let m = store.merge("fix", &[f1], turn(4, "e"), d).unwrap();
    (store, Ids { r, s1, s2, f1, m })
}

fn steps_walk_first_parents_and_pick_parents(b: &Backend) {
    let (store, i) = store(b);
    let cases: &[(&str, ObjectId)] = &[
        ("fix", i.m),
        ("fix~0", i.m),
        ("fix^0", i.m),
        ("fix~", i.s2),
        ("fix~1", i.s2),
        ("fix^", i.s2),
        ("fix^1", i.s2),
        ("fix^2", i.f1),
        ("fix~2", i.s1),
        ("fix~3", i.r),
        ("fix^2~1", i.s1),
        ("fix^2^", i.s1),
        ("fix~~", i.s1),
        ("fix~1~1~1", i.r),
        ("fix^^^", i.r),
        ("fix^2~1^0~1", i.r),
        ("HEAD", i.m),
        ("HEAD~3", i.r),
        ("@^2", i.f1),
        ("refs/heads/fix~2", i.s1),
        ("side~1", i.s1),
    ];
    for (rev, want) in cases {
        assert_eq!(store.resolve_rev(rev).unwrap(), *want, "{rev}");
    }
    let m = i.m.to_hex();
    assert_eq!(store.resolve_rev(&format!("{}^2", &m[..8])).unwrap(), i.f1);
    assert_eq!(store.resolve_rev(&format!("{m}~3")).unwrap(), i.r);
    // Tags and archived conversations take steps too.
    store
        .transact(
            Transaction {
                reason: "tag".into(),
                edits: vec![RefEdit {
                    name: RefName::tag("golden").unwrap(),
                    expected: PreviousValue::MustNotExist,
                    new: Some(RefTarget::Session(i.s2)),
                }],
                ..Transaction::default()
            },
            Durability::NoSync,
        )
        .unwrap();
    assert_eq!(store.resolve_rev("golden~1").unwrap(), i.s1);
    assert_eq!(store.resolve_rev("tags/golden^").unwrap(), i.s1);
    store.archive("side", Durability::NoSync).unwrap();
    assert_eq!(store.resolve_rev("archive/side~1").unwrap(), i.s1);
    assert_eq!(
        store.resolve_rev("side").unwrap(),
        i.f1,
        "an archived name still resolves"
    );
}

fn out_of_range_steps_say_how_far_history_goes(b: &Backend) {
    let (store, _) = store(b);
    let err = |rev: &str| store.resolve_rev(rev).unwrap_err().to_string();
    assert_eq!(err("fix~5"), "fix~5: fix has only 3 first-parent ancestors");
    assert_eq!(
        err("fix~1~3"),
        "fix~1~3: fix~1 has only 2 first-parent ancestors"
    );
    assert_eq!(
        err("fix~2~2"),
        "fix~2~2: fix~2 has only 1 first-parent ancestor"
    );
    assert_eq!(err("fix~3~"), "fix~3~: fix~3 has no parents");
    assert_eq!(err("fix^3"), "fix^3: session fix has 2 parents");
    assert_eq!(err("fix~^2"), "fix~^2: session fix~ has 1 parent");
    assert_eq!(err("fix~3^"), "fix~3^: session fix~3 has no parents");
    assert!(matches!(store.resolve_rev("fix^3"), Err(Error::Invalid(_))));
}

fn unknown_and_malformed_revisions_are_told_apart(b: &Backend) {
    let (store, _) = store(b);
    assert_eq!(
        store.resolve_rev("nope~2").unwrap_err().to_string(),
        "unknown revision 'nope': not a conversation, ref, tag or object id"
    );
    assert!(matches!(
        store.resolve_rev("0000000000~1"),
        Err(Error::UnknownPrefix { .. })
    ));
    for bad in [
        "", "~1", "^", "fix~a", "fix^{}", "fix~-1", "a b", "fix@{x}", "fix@{1", "fix@{}", "fix~1x",
    ] {
        match store.resolve_rev(bad) {
            Err(Error::BadRev(_)) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert_eq!(
        RevSpec::parse("fix~1x").unwrap_err(),
        RevParseError::BadStep {
            rev: "fix~1x".into(),
            op: '~',
            found: 'x'
        }
    );
    // NAME@{N} reads the ref log: @{0} is the current value.
    assert_eq!(
        store.resolve_rev("fix@{0}").unwrap(),
        store.resolve_rev("fix").unwrap()
    );
    assert_eq!(RevSpec::parse("fix@{12}~2").unwrap().reflog(), Some(12));
    assert_eq!(RevSpec::parse("fix@{12}~2").unwrap().name(), "fix");
    assert!(matches!(
        store.resolve_rev("fix@{999}"),
        Err(Error::ReflogTooShort { entries, .. }) if entries > 0
    ));
    assert_eq!(
        RevSpec::parse("x^3~^").unwrap().steps().collect::<Vec<_>>(),
        vec![Step::Parent(3), Step::Ancestor(1), Step::Parent(1)]
    );
}

fn an_ambiguous_prefix_lists_its_candidates_even_with_steps(b: &Backend) {
    let (store, i) = store(b);
    // Sessions until two ids share their first 4 hex digits.
    let mut by_prefix: HashMap<String, Session> = HashMap::new();
    let (a, b) = (0..)
        .find_map(|t| {
            let mut s = Session::new_root(t);
            s.parents = vec![i.r];
            let prefix = s.encode().unwrap().id().to_hex_prefix(4);
            by_prefix.insert(prefix, s.clone()).map(|other| (other, s))
        })
        .unwrap();
    let mut batch = WriteBatch::new();
    let (a, b) = (batch.session(&a).unwrap(), batch.session(&b).unwrap());
    store.odb().write(&batch, Durability::NoSync).unwrap();
    let prefix = a.to_hex_prefix(4);
    for rev in [prefix.clone(), format!("{prefix}~1"), format!("{prefix}^")] {
        match store.resolve_rev(&rev) {
            Err(Error::AmbiguousPrefix { candidates, .. }) => {
                let mut want = vec![a, b];
                want.sort();
                assert_eq!(candidates, want, "{rev}");
            }
            other => panic!("{rev}: {other:?}"),
        }
    }
    // Enough digits to tell them apart resolve, and then step.
    let n = (4..64)
        .find(|n| a.to_hex_prefix(*n) != b.to_hex_prefix(*n))
        .unwrap();
    assert_eq!(store.resolve_rev(&a.to_hex_prefix(n)).unwrap(), a);
    assert_eq!(
        store
            .resolve_rev(&format!("{}~1", b.to_hex_prefix(n)))
            .unwrap(),
        i.r
    );
}

fn a_name_wins_over_a_prefix(b: &Backend) {
    let (store, i) = store(b);
    let prefix = i.r.to_hex_prefix(6);
    store
        .fork(
            i.s2,
            ForkOptions {
                name: Some(prefix.clone()),
                ..ForkOptions::default()
            },
            Durability::NoSync,
        )
        .unwrap();
    assert_eq!(store.resolve_rev(&prefix).unwrap(), i.s2);
    assert_eq!(store.resolve_rev(&format!("{prefix}~1")).unwrap(), i.s1);
    assert_eq!(store.resolve_rev(&i.r.to_hex_prefix(7)).unwrap(), i.r);
}

fn at_n_goes_on_across_an_archive_and_an_unarchive(b: &Backend) {
    let store = b.open();
    let d = Durability::NoSync;
    let (_, r0) = store.create(Some("x"), turn(0, "a"), d).unwrap();
    let r1 = store.commit("x", None, turn(1, "b"), d).unwrap();
    store.archive("x", d).unwrap();
    assert_eq!(store.resolve_rev("x@{0}").unwrap(), r1);
    assert_eq!(store.resolve_rev("x@{1}").unwrap(), r1);
    assert_eq!(store.resolve_rev("x@{2}").unwrap(), r0);
    store.unarchive("x", d).unwrap();
    // unarchive, archive, commit, create: no deletion half counts.
    let values: Vec<ObjectId> = (0..4)
        .map(|n| store.resolve_rev(&format!("x@{{{n}}}")).unwrap())
        .collect();
    assert_eq!(values, vec![r1, r1, r1, r0]);
    assert!(matches!(
        store.resolve_rev("x@{4}"),
        Err(Error::ReflogTooShort { entries: 4, .. })
    ));
}

fn at_n_goes_on_across_a_rename_and_back(b: &Backend) {
    let store = b.open();
    let d = Durability::NoSync;
    let (_, r0) = store.create(Some("x"), turn(0, "a"), d).unwrap();
    let r1 = store.commit("x", None, turn(1, "b"), d).unwrap();
    store.rename("x", "y", d).unwrap();
    let r2 = store.commit("y", None, turn(2, "c"), d).unwrap();
    store.rename("y", "x", d).unwrap();
    // rename back, commit on y, rename, commit, create.
    let values: Vec<ObjectId> = (0..5)
        .map(|n| store.resolve_rev(&format!("x@{{{n}}}")).unwrap())
        .collect();
    assert_eq!(values, vec![r2, r2, r1, r1, r0]);
    assert!(matches!(
        store.resolve_rev("x@{5}"),
        Err(Error::ReflogTooShort { entries: 5, .. })
    ));
    // A conversation deleted and made again starts a new log, as git's.
    store.delete("x", d).unwrap();
    let (_, n0) = store.create(Some("x"), turn(3, "d"), d).unwrap();
    assert_eq!(store.resolve_rev("x@{0}").unwrap(), n0);
    assert!(matches!(
        store.resolve_rev("x@{1}"),
        Err(Error::ReflogTooShort { entries: 1, .. })
    ));
}

fn head_at_n_counts_as_gits_head_log(b: &Backend) {
    let store = b.open();
    let d = Durability::NoSync;
    // Creating and committing on a conversation points HEAD at it.
    let (_, o0) = store.create(Some("o"), turn(0, "o"), d).unwrap();
    let (_, a0) = store.create(Some("a"), turn(1, "a"), d).unwrap();
    let a1 = store.commit("a", None, turn(2, "b"), d).unwrap();
    // o moves while HEAD is on a: not a move of HEAD.
    store.reset("o", a1, d).unwrap();
    store.reset("a", a0, d).unwrap();
    // The reset of a, the commit, the creation of a, the creation of o.
    let values: Vec<ObjectId> = (0..4)
        .map(|n| store.resolve_rev(&format!("HEAD@{{{n}}}")).unwrap())
        .collect();
    assert_eq!(values, vec![a0, a1, a0, o0]);
    assert!(matches!(
        store.resolve_rev("HEAD@{4}"),
        Err(Error::ReflogTooShort { entries: 4, .. })
    ));
    // As git's `reset HEAD@{1}` undoes a reset: a goes back to a1, not to
    // another conversation's head.
    let back = store.resolve_rev("HEAD@{1}").unwrap();
    store.reset("a", back, d).unwrap();
    assert_eq!(store.resolve_rev("a").unwrap(), a1);
}

two_backends!(
    steps_walk_first_parents_and_pick_parents,
    out_of_range_steps_say_how_far_history_goes,
    unknown_and_malformed_revisions_are_told_apart,
    an_ambiguous_prefix_lists_its_candidates_even_with_steps,
    a_name_wins_over_a_prefix,
    at_n_goes_on_across_an_archive_and_an_unarchive,
    at_n_goes_on_across_a_rename_and_back,
    head_at_n_counts_as_gits_head_log,
);
