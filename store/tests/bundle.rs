//! Bundles: the file round-trips ids and histories, `--since` leaves out
//! what the receiver has, damage is refused before any ref moves, and the
//! objects-format.md example bundle has a pinned checksum. What a bundle
//! does to a store runs on a local store and on a remote one
//! (`name::local`, `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
mod support;
use backends::Backend;

use std::path::Path;

use serde_json::json;
use sessctl_store::bundle::{Bundle, ProblemKind, Selection};
use sessctl_store::remote::{apply, RefOutcome};
use sessctl_store::{Durability, Error, Messages, ObjectId, RefName, Session, Store, Turn};

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

/// Two conversations, one of them archived; returns the store and `fix`'s head.
fn source(b: &Backend) -> (Store, ObjectId) {
    let s = b.open();
    s.create(Some("fix"), turn("a"), Durability::Sync).unwrap();
    let head = s.commit("fix", None, turn("b"), Durability::Sync).unwrap();
    s.create(Some("old"), turn("c"), Durability::Sync).unwrap();
    s.archive("old", Durability::Sync).unwrap();
    (s, head)
}

fn refs(s: &Store) -> Vec<(RefName, ObjectId)> {
    s.refs()
        .unwrap()
        .into_iter()
        .filter_map(|(n, t)| match t {
            sessctl_store::RefTarget::Session(id) if n != RefName::Head => Some((n, id)),
            _ => None,
        })
        .collect()
}

fn roundtrip(b: &Bundle) -> Bundle {
    Bundle::decode(&b.encode(), Path::new("b")).unwrap()
}

fn an_all_bundle_recreates_ids_histories_and_records(be: &Backend) {
    let (src, head) = source(be);
    let b = roundtrip(&Bundle::create(&src, &Selection::All, &[]).unwrap());
    assert_eq!(b.objects.len(), 6, "3 sessions, 3 blobs");
    assert!(b.prerequisites.is_empty());
    assert!(b.problems(None).unwrap().is_empty());
    let dst_b = be.another();
    let dst = dst_b.open();
    let r = apply(&dst, &b, "unbundle", "the bundle", Durability::Sync).unwrap();
    assert!(r.applied);
    assert_eq!(r.objects, 6);
    assert_eq!(refs(&dst), refs(&src));
    assert_eq!(
        dst.odb().load_messages(&head).unwrap(),
        src.odb().load_messages(&head).unwrap()
    );
    let names = |s: &Store| {
        let mut v: Vec<_> = s
            .conversations(None)
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.record, c.head, c.messages, c.sessions))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    assert_eq!(names(&dst), names(&src));
    // Again: everything is up to date and nothing is written.
    let r = apply(&dst, &b, "unbundle", "the bundle", Durability::Sync).unwrap();
    assert!(r.refs.iter().all(|(_, o)| *o == RefOutcome::UpToDate));
    assert_eq!(r.objects, 0);
}

fn a_since_bundle_holds_only_the_new_turns_and_needs_its_prerequisites(be: &Backend) {
    let (src, old_head) = source(be);
    let full = Bundle::create(&src, &Selection::Revs(vec!["fix".into()]), &[]).unwrap();
    let with_b = be.another();
    let with = with_b.open();
    apply(&with, &full, "unbundle", "the bundle", Durability::Sync).unwrap();
    let new_head = src
        .commit("fix", None, turn("d"), Durability::Sync)
        .unwrap();
    let b = roundtrip(
        &Bundle::create(
            &src,
            &Selection::Revs(vec!["fix".into()]),
            &[old_head.to_hex()],
        )
        .unwrap(),
    );
    assert_eq!(b.objects.len(), 2, "the new session and its message");
    assert_eq!(b.prerequisites, vec![old_head]);
    // A store without the prerequisite refuses it, and nothing moves.
    let without_b = be.another();
    let without = without_b.open();
    let problems = b.problems(Some(&without)).unwrap();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].kind, ProblemKind::MissingPrerequisite);
    let e = apply(&without, &b, "unbundle", "the bundle", Durability::Sync).unwrap_err();
    assert!(
        matches!(e, Error::Invalid(ref m) if m.contains("missing prerequisite")),
        "{e}"
    );
    assert!(without.refs().unwrap().is_empty());
    assert!(!without.odb().contains(&new_head).unwrap());
    // One that has it fast-forwards.
    let r = apply(&with, &b, "unbundle", "the bundle", Durability::Sync).unwrap();
    assert_eq!(
        r.refs,
        vec![(
            RefName::conversation("fix").unwrap(),
            RefOutcome::FastForward {
                from: old_head,
                to: new_head
            }
        )]
    );
    assert_eq!(r.objects, 2);
    assert_eq!(with.odb().load_messages(&new_head).unwrap().len(), 3);
}

fn damaged_bundles_are_corrupt_and_move_nothing(be: &Backend) {
    let (src, _) = source(be);
    let bytes = Bundle::create(&src, &Selection::All, &[]).unwrap().encode();
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    let truncated = &bytes[..bytes.len() - 10];
    for bad in [&flipped[..], truncated, &bytes[..3]] {
        let e = Bundle::decode(bad, Path::new("b")).unwrap_err();
        assert!(e.is_corruption(), "{e}");
    }
    // A bundle whose checksum is right but whose closure is not (a writer
    // bug): a session's parent is missing.
    let mut b = Bundle::decode(&bytes, Path::new("b")).unwrap();
    let root = b
        .objects
        .iter()
        .position(|o| {
            o.kind() == sessctl_store::ObjectKind::Session
                && Session::decode(o.payload()).unwrap().parents.is_empty()
                && src.resolve_rev("fix~1").unwrap() == o.id()
        })
        .unwrap();
    b.objects.remove(root);
    let b = roundtrip(&b);
    let dst_b = be.another();
    let dst = dst_b.open();
    let e = apply(&dst, &b, "unbundle", "the bundle", Durability::Sync).unwrap_err();
    assert!(e.is_corruption(), "{e}");
    assert!(dst.refs().unwrap().is_empty());
}

/// A conversation both live and archived, or a ref carried twice, could be
/// neither archived nor unarchived once applied: the bundle is corrupt.
fn a_conversation_live_and_archived_in_one_bundle_is_corrupt(be: &Backend) {
    let (src, head) = source(be);
    let good = Bundle::create(&src, &Selection::All, &[]).unwrap();
    let both = RefName::Archived("fix".parse().unwrap());
    let twice = RefName::Conversation("fix".parse().unwrap());
    for (extra, says) in [
        (both, "both refs/heads/fix and refs/archive/fix"),
        (twice, "refs/heads/fix twice"),
    ] {
        let mut b = good.clone();
        b.refs.push((extra, head));
        let problems = b.problems(None).unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p.kind == ProblemKind::Corrupt && p.message.contains(says)),
            "{problems:?}"
        );
        let dst_b = be.another();
        let dst = dst_b.open();
        let e = apply(&dst, &b, "unbundle", "the bundle", Durability::Sync).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        assert!(dst.refs().unwrap().is_empty());
    }
}

fn a_diverged_ref_refuses_the_whole_bundle(be: &Backend) {
    let (src, _) = source(be);
    let dst_b = be.another();
    let dst = dst_b.open();
    let b = Bundle::create(&src, &Selection::All, &[]).unwrap();
    apply(&dst, &b, "unbundle", "the bundle", Durability::Sync).unwrap();
    let theirs = dst
        .commit("fix", None, turn("x"), Durability::Sync)
        .unwrap();
    let ours = src
        .commit("fix", None, turn("y"), Durability::Sync)
        .unwrap();
    src.create(Some("new"), turn("z"), Durability::Sync)
        .unwrap();
    let b = Bundle::create(&src, &Selection::All, &[]).unwrap();
    let before = refs(&dst);
    let r = apply(&dst, &b, "unbundle", "the bundle", Durability::Sync).unwrap();
    assert!(!r.applied);
    let msg = format!(
        "refusing to update refs/heads/fix: it is at {}, the bundle has {}, and neither contains the other",
        theirs.to_hex_prefix(12),
        ours.to_hex_prefix(12)
    );
    assert_eq!(r.refusals(), vec![msg.as_str()]);
    assert_eq!(refs(&dst), before, "nothing moved, not even the new ref");
    assert!(dst.conversation("new").unwrap().is_none());
}

// ---- the golden bundle of objects-format.md ----

#[test]
fn the_example_bundle_has_the_pinned_checksum() {
    let bytes = support::example_bundle().encode();
    let checksum = sessctl_store::hash::hex(&bytes[bytes.len() - 32..]);
    let spec =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../objects-format.md"))
            .unwrap();
    assert_eq!(
        checksum, "43e8a2c72dad10ee1ac42753ef82a5b9e4377b04f1034eb32d64546e85c2e0ae",
        "the example bundle's checksum changed"
    );
    assert!(
        spec.contains(&format!("({} bytes)", bytes.len())),
        "objects-format.md lacks the bundle's length {}",
        bytes.len()
    );
    assert!(spec.contains(&checksum));
    assert_eq!(
        Bundle::decode(&bytes, Path::new("b")).unwrap(),
        support::example_bundle()
    );
    let dst = Store::in_memory().unwrap();
    apply(
        &dst,
        &support::example_bundle(),
        "unbundle",
        "the bundle",
        Durability::Sync,
    )
    .unwrap();
    assert_eq!(
        dst.resolve_rev("greeting").unwrap().to_hex(),
        "f196d7d40477112bc8ba254286581f9f17f0382243e934cb87cdefc1da5d8a12"
    );
}

// ---- decoding never panics ----

/// Re-seals mutated bytes with a valid checksum, so that the structure
/// behind the checksum is exercised too.
fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.len() >= 40 {
        let end = bytes.len() - 32;
        let sum = *blake3::hash(&bytes[..end]).as_bytes();
        bytes[end..].copy_from_slice(&sum);
    }
    bytes
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]
    #[test]
    fn mutated_bundles_are_refused_not_panicked_on(
        at in 0usize..4096,
        byte in proptest::prelude::any::<u8>(),
        cut in 0usize..4096,
        resealed in proptest::prelude::any::<bool>(),
    ) {
        let valid = support::example_bundle().encode();
        let mut bytes = valid.clone();
        let i = at % bytes.len();
        bytes[i] = byte;
        if cut % 3 == 0 {
            bytes.truncate(cut % valid.len());
        }
        let bytes = if resealed { reseal(bytes) } else { bytes };
        match Bundle::decode(&bytes, Path::new("b")) {
            Ok(b) => {
                let _ = b.problems(None).unwrap();
                if bytes != valid && !resealed {
                    panic!("a damaged bundle decoded without its checksum being fixed");
                }
            }
            Err(e) => proptest::prop_assert!(e.is_corruption(), "{e}"),
        }
    }
}

two_backends!(
    an_all_bundle_recreates_ids_histories_and_records,
    a_since_bundle_holds_only_the_new_turns_and_needs_its_prerequisites,
    damaged_bundles_are_corrupt_and_move_nothing,
    a_conversation_live_and_archived_in_one_bundle_is_corrupt,
    a_diverged_ref_refuses_the_whole_bundle,
);
