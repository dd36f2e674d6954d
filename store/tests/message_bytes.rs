//! Loading a history as verified canonical bytes (`Odb::load_message_bytes`,
//! `Odb::blob_bytes`) gives exactly the messages `Odb::load_messages` gives,
//! from the journal, from packs and from both, along forks and compactions;
//! damage is an error naming the object, never other bytes. A history read
//! along a first-parent chain given beforehand (`Odb::history_along`, which
//! `Store::history` feeds from the lineage index) is the same history
//! whatever that chain says. The behaviour tests run on a local store and
//! on a remote one (`name::local`, `name::remote`); the tests of the local
//! layout on disk (journal segments, packs, the lineage index file) run
//! locally only and say so.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
mod support;
use backends::Backend;

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sessctl_store::odb::journal::FRAME_HEADER_LEN;
use sessctl_store::{
    Blob, Durability, Error, MessageDelta, ObjectId, Odb, OpenOptions, RepackOptions, Session,
    WriteBatch,
};
use support::{message, Rng};

fn new_store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    Odb::init(&path).unwrap();
    (dir, path)
}

/// Small segments, never packed on the way: a journal of many segments.
fn journal_only() -> OpenOptions {
    OpenOptions {
        segment_target: 64 << 10,
        auto_pack: false,
        ..OpenOptions::default()
    }
}

/// A session continuing `parent` (which has `base` messages it keeps),
/// adding `added`; written with its messages. Returns its id.
fn turn(odb: &Odb, parent: Option<ObjectId>, base: u64, added: &[Value], t: i64) -> ObjectId {
    let mut b = WriteBatch::new();
    let mut s = Session::new_root(1_763_000_000_000 + t);
    s.parents = parent.into_iter().collect();
    s.messages = MessageDelta {
        base,
        added: added.iter().map(|m| b.blob(m).unwrap()).collect(),
    };
    let id = b.session(&s).unwrap();
    odb.write(&b, Durability::NoSync).unwrap();
    id
}

/// A chain of `turns` turns of `per_turn` generated messages after
/// `parent` (which has `len` messages); returns the head and its length.
fn chain(
    odb: &Odb,
    rng: &mut Rng,
    mut parent: Option<ObjectId>,
    mut len: u64,
    turns: usize,
    per_turn: usize,
) -> (ObjectId, u64) {
    for t in 0..turns {
        let msgs: Vec<Value> = (0..per_turn)
            .map(|k| message(rng, len as usize + k))
            .collect();
        parent = Some(turn(odb, parent, len, &msgs, t as i64));
        len += per_turn as u64;
    }
    (parent.unwrap(), len)
}

/// The bytes API against the value API, message by message: the same ids,
/// the canonical bytes of the same values, the JSON text serde_json
/// writes for them.
fn assert_same_history(odb: &Odb, head: &ObjectId) -> usize {
    let values = odb.load_messages(head).unwrap();
    let ids = odb.history(head).unwrap();
    let bytes = odb.load_message_bytes(head).unwrap();
    assert_eq!(bytes.len(), values.len());
    assert_eq!(ids.len(), values.len());
    let mut jsonl = String::new();
    for (i, (m, v)) in bytes.iter().zip(&values).enumerate() {
        let canonical = Blob::new(v.clone()).unwrap().encode();
        assert_eq!(m.id(), ids[i], "message {i}");
        assert_eq!(canonical.id(), ids[i], "message {i}");
        assert_eq!(m.bytes(), canonical.payload(), "message {i}");
        let text = serde_json::to_string(v).unwrap();
        assert_eq!(m.json().unwrap(), text, "message {i}");
        assert_eq!(&m.value().unwrap(), v, "message {i}");
        assert_eq!(bytes.get(i), Some(m));
        jsonl.push_str(&text);
        jsonl.push('\n');
    }
    assert_eq!(bytes.get(values.len()), None);
    assert_eq!(String::from_utf8(bytes.to_jsonl().unwrap()).unwrap(), jsonl);
    let again = odb.blob_bytes(&ids).unwrap();
    assert_eq!(again, bytes);
    assert_eq!(odb.blobs(&ids).unwrap(), values);
    values.len()
}

// Local only: reads from journal segments and packs on disk, and both.
#[test]
fn bytes_and_values_agree_from_the_journal_packs_and_both() {
    let (_d, path) = new_store();
    let odb = Odb::open(&path, &journal_only()).unwrap();
    let mut rng = Rng::new(5);
    // Long enough to be read by more than one thread where there are cores.
    let (head, len) = chain(&odb, &mut rng, None, 0, 300, 4);
    // A message too large to be stored raw in the journal (compressed on
    // its own there).
    let big = json!({"role": "tool", "content": "lorem ipsum ".repeat(2000)});
    let head = turn(&odb, Some(head), len, std::slice::from_ref(&big), 1000);
    let len = len + 1;
    let s = odb.stats().unwrap();
    assert!(s.packs == 0 && s.journal_segments > 3, "{s:?}");
    assert_eq!(assert_same_history(&odb, &head), 1201);

    odb.repack(&RepackOptions::default()).unwrap();
    let s = odb.stats().unwrap();
    assert_eq!((s.packs, s.journal_objects), (1, 0), "{s:?}");
    assert_eq!(assert_same_history(&odb, &head), 1201);

    // More turns in the journal on top of the pack, and a fork of an older
    // session that keeps part of its history.
    let (mixed, _) = chain(&odb, &mut rng, Some(head), len, 40, 3);
    let s = odb.stats().unwrap();
    assert!(s.packs == 1 && s.journal_objects > 0, "{s:?}");
    assert_eq!(assert_same_history(&odb, &mixed), 1321);
    let history = odb.history(&mixed).unwrap();
    let fork = turn(
        &odb,
        Some(mixed),
        700,
        &[json!({"role": "user", "content": "again"})],
        2000,
    );
    assert_eq!(assert_same_history(&odb, &fork), 701);
    assert_eq!(odb.history(&fork).unwrap()[..700], history[..700]);

    // A handle opened afresh finds the same.
    drop(odb);
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    assert_eq!(assert_same_history(&odb, &fork), 701);
    assert_eq!(assert_same_history(&odb, &mixed), 1321);
}

fn bytes_and_values_agree_along_compactions_forks_and_repeats(b: &Backend) {
    let store = b.open();
    for odb in [&Odb::in_memory(), store.odb()] {
        let mut rng = Rng::new(9);
        let (head, len) = chain(odb, &mut rng, None, 0, 20, 3);
        // A compaction: a session that keeps nothing of its parent and
        // starts from a summary, then the last messages again (the same
        // blobs at new positions).
        let last: Vec<Value> = odb.load_messages(&head).unwrap()[len as usize - 3..].to_vec();
        let mut fresh = vec![json!({"role": "system", "content": "summary so far"})];
        fresh.extend(last.iter().cloned());
        let compacted = turn(odb, Some(head), 0, &fresh, 100);
        let (after, after_len) = chain(odb, &mut rng, Some(compacted), 4, 5, 2);
        assert_eq!(after_len, 14);
        assert_eq!(assert_same_history(odb, &after), 14);
        // One message repeated: one blob, four positions.
        let ok = json!({"role": "user", "content": "ok"});
        let repeats = turn(
            odb,
            Some(after),
            after_len,
            &[ok.clone(), ok.clone(), ok.clone(), ok],
            200,
        );
        assert_eq!(assert_same_history(odb, &repeats), 18);
        // A fork from the middle of the first chain.
        let fork = turn(
            odb,
            Some(head),
            30,
            &[json!({"role": "user", "content": "fork"})],
            300,
        );
        assert_eq!(assert_same_history(odb, &fork), 31);
        // Nothing at all.
        let empty = turn(odb, None, 0, &[], 400);
        assert_eq!(assert_same_history(odb, &empty), 0);
        assert!(odb.load_message_bytes(&empty).unwrap().is_empty());
    }
}

fn what_is_not_a_stored_blob_is_refused_by_name(b: &Backend) {
    let store = b.open();
    let odb = store.odb();
    let mut rng = Rng::new(3);
    let (head, _) = chain(odb, &mut rng, None, 0, 3, 2);
    let mut ids = odb.history(&head).unwrap();
    ids.push(head);
    let err = odb.blob_bytes(&ids).unwrap_err();
    assert!(
        matches!(err, Error::WrongKind { id, .. } if id == head),
        "{err}"
    );
    let missing = ObjectId::from_bytes([0xee; 32]);
    ids.pop();
    ids.insert(1, missing);
    for err in [
        odb.blob_bytes(&ids).unwrap_err(),
        odb.blobs(&ids).unwrap_err(),
    ] {
        assert!(
            matches!(err, Error::NotFound { id } if id == missing),
            "{err}"
        );
    }
}

/// Flips the last byte of the first frame's body in the first (sealed)
/// segment: the first object written, as the journal test of damage does.
fn damage_first_object(path: &Path) {
    let mut segs: Vec<PathBuf> = fs::read_dir(path.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    segs.sort();
    assert!(segs.len() > 2);
    let mut bytes = fs::read(&segs[0]).unwrap();
    let body = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    bytes[16 + FRAME_HEADER_LEN + body - 1] ^= 0x55;
    fs::write(&segs[0], bytes).unwrap();
}

// Local only: flips a byte of a journal segment on disk.
#[test]
fn a_damaged_message_in_the_journal_is_an_error_naming_it() {
    let (_d, path) = new_store();
    let opts = OpenOptions {
        segment_target: 1 << 10,
        auto_pack: false,
        ..OpenOptions::default()
    };
    let odb = Odb::open(&path, &opts).unwrap();
    // The first frame holds the first message alone.
    let first = json!({"role": "user", "content": "x".repeat(300)});
    let mut b = WriteBatch::new();
    let damaged = b.blob(&first).unwrap();
    odb.write(&b, Durability::NoSync).unwrap();
    let mut head = turn(&odb, None, 0, &[first], 0);
    for i in 0..30 {
        let m = json!({"role": "assistant", "i": i, "pad": "y".repeat(300)});
        head = turn(&odb, Some(head), 1 + i as u64, &[m], i + 1);
    }
    drop(odb);
    damage_first_object(&path);
    let odb = Odb::open(&path, &opts).unwrap();
    let history = odb.history(&head).unwrap();
    assert_eq!(history[0], damaged);
    let err = odb.load_message_bytes(&head).unwrap_err();
    assert!(
        err.is_corruption() && err.to_string().contains(&damaged.to_hex()),
        "{err}"
    );
    let err = odb.load_messages(&head).unwrap_err();
    assert!(
        err.is_corruption() && err.to_string().contains(&damaged.to_hex()),
        "{err}"
    );
    // The rest reads.
    assert_eq!(odb.blob_bytes(&history[1..]).unwrap().len(), 30);
}

// Local only: flips a byte of a pack file on disk.
#[test]
fn a_flipped_byte_in_a_pack_is_an_error_never_other_bytes() {
    let (_d, path) = new_store();
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    let mut rng = Rng::new(13);
    let (head, _) = chain(&odb, &mut rng, None, 0, 10, 2);
    odb.repack(&RepackOptions::default()).unwrap();
    let want = odb.load_message_bytes(&head).unwrap();
    let history = odb.history(&head).unwrap();
    drop(odb);
    let pack = fs::read_dir(path.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let full = fs::read(&pack).unwrap();
    // The last block holds messages (sessions come first in a pack); a
    // byte in it fails the block's checksum, and the error names a
    // message read from it.
    let mut bad = full.clone();
    let at = full.len() - 32 - 20;
    bad[at] ^= 0x01;
    fs::write(&pack, &bad).unwrap();
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    let err = odb.blob_bytes(&history).unwrap_err();
    assert!(
        err.is_corruption()
            && history
                .iter()
                .any(|id| err.to_string().contains(&id.to_hex())),
        "{err}"
    );
    drop(odb);
    // Every other byte: an error, or the very same bytes.
    for at in (0..full.len()).step_by(7) {
        let mut bad = full.clone();
        bad[at] ^= 0x01;
        fs::write(&pack, &bad).unwrap();
        let Ok(odb) = Odb::open(&path, &OpenOptions::default()) else {
            continue;
        };
        match odb.load_message_bytes(&head) {
            Ok(got) => assert_eq!(got, want, "byte {at}"),
            Err(e) => assert!(
                e.is_corruption() || matches!(e, Error::NotFound { .. }),
                "byte {at}: {e}"
            ),
        }
    }
    fs::write(&pack, &full).unwrap();
}

/// Points `victim`'s entry in the pack index at `donor`'s record: the
/// block inflates and passes its checksum, the index lookup succeeds, and
/// only re-hashing the record can tell that the bytes are not `victim`'s.
fn forge_index_entry(path: &Path, victim: &ObjectId, donor: &ObjectId) {
    let idx = fs::read_dir(path.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .unwrap();
    let mut bytes = fs::read(&idx).unwrap();
    // A version-2 index: header, fan-out, ids, entries (objects-format.md,
    // "Pack index").
    let objects = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let ids_at = 24 + 256 * 4;
    let entries_at = ids_at + objects * 32;
    let position = |id: &ObjectId| {
        (0..objects)
            .find(|&i| &bytes[ids_at + i * 32..ids_at + (i + 1) * 32] == id.as_bytes())
            .unwrap()
    };
    let (v, d) = (position(victim), position(donor));
    let entry = bytes[entries_at + d * 12..entries_at + (d + 1) * 12].to_vec();
    bytes[entries_at + v * 12..entries_at + (v + 1) * 12].copy_from_slice(&entry);
    fs::write(&idx, bytes).unwrap();
}

/// A record that inflates cleanly but is not the object asked for (an
/// index entry pointing at another message) is an error naming that
/// object on every batch read, wherever it sits in the batch: what only
/// verifying each message's bytes against its id catches.
// Local only: rewrites a record of a pack file on disk.
#[test]
fn a_packed_message_that_is_another_is_an_error_naming_it() {
    for victim_at in [0, 137, 299] {
        let (_d, path) = new_store();
        let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
        let mut rng = Rng::new(29);
        let (head, len) = chain(&odb, &mut rng, None, 0, 75, 4);
        assert_eq!(len, 300);
        odb.repack(&RepackOptions::default()).unwrap();
        let history = odb.history(&head).unwrap();
        drop(odb);
        let victim = history[victim_at];
        forge_index_entry(&path, &victim, &history[(victim_at + 1) % history.len()]);
        let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
        for err in [
            odb.load_message_bytes(&head).unwrap_err(),
            odb.load_messages(&head).unwrap_err(),
            odb.blob_bytes(&history).unwrap_err(),
        ] {
            assert!(
                err.is_corruption() && err.to_string().contains(&victim.to_hex()),
                "message {victim_at}: {err}"
            );
        }
        // Read alone, as `read` reads it, the same.
        let err = odb.blob(&victim).unwrap_err();
        assert!(err.is_corruption(), "{err}");
        // Every other message reads.
        let others: Vec<ObjectId> = history
            .iter()
            .filter(|id| **id != victim)
            .copied()
            .collect();
        assert_eq!(odb.blob_bytes(&others).unwrap().len(), 299);
    }
}

/// The first-parent chain from `id` to the root, as the sessions say.
fn true_chain(odb: &Odb, id: ObjectId) -> Vec<ObjectId> {
    let mut chain = vec![id];
    while let Some(p) = odb.session(chain.last().unwrap()).unwrap().first_parent() {
        chain.push(p);
    }
    chain
}

#[test]
fn a_history_read_along_a_hint_is_the_history_whatever_the_hint_says() {
    let odb = Odb::in_memory();
    let mut rng = Rng::new(17);
    // Long enough for batches of every size, some read by several threads.
    let (head, len) = chain(&odb, &mut rng, None, 0, 3000, 1);
    let (other, _) = chain(&odb, &mut rng, None, 0, 40, 1);
    let blob = odb.history(&head).unwrap()[7];
    let want = odb.history(&head).unwrap();
    assert_eq!(want.len() as u64, len);
    let truth = true_chain(&odb, head);
    let elsewhere = true_chain(&odb, other);
    let mut hints: Vec<(&str, Vec<ObjectId>)> = vec![
        ("none", vec![]),
        ("the chain", truth.clone()),
        ("cut short", truth[..1500].to_vec()),
        ("not starting at the head", truth[1..].to_vec()),
    ];
    for at in [1, 255, 256, 1000, 2999] {
        let mut h = truth.clone();
        h[at] = elsewhere[at % elsewhere.len()];
        hints.push(("a session of another chain", h));
        let mut h = truth.clone();
        h[at] = blob;
        hints.push(("a message", h));
        let mut h = truth.clone();
        h[at] = ObjectId::from_bytes([0xAB; 32]);
        hints.push(("nothing stored", h));
        let mut h = truth[..at].to_vec();
        h.extend(&elsewhere);
        hints.push(("going on elsewhere", h));
    }
    for (what, hint) in &hints {
        assert_eq!(
            &odb.history_along(&head, hint).unwrap(),
            &want,
            "hint: {what} ({} ids)",
            hint.len()
        );
    }
    // A compaction stops the walk before the hint ends.
    let last = odb.load_messages(&head).unwrap()[len as usize - 2..].to_vec();
    let compacted = turn(&odb, Some(head), 0, &last, 5000);
    let (after, _) = chain(&odb, &mut rng, Some(compacted), 2, 600, 1);
    let want = odb.history(&after).unwrap();
    assert_eq!(want.len(), 602);
    assert_eq!(
        odb.history_along(&after, &true_chain(&odb, after)).unwrap(),
        want
    );
}

// Local only: the lineage index is a file a local repack writes beside the
// packs.
#[test]
fn a_store_reads_histories_along_its_lineage_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = sessctl_store::Store::init(&dir.path().join("s")).unwrap();
    let mut rng = Rng::new(5);
    let turn = |msgs: Vec<Value>| sessctl_store::Turn {
        messages: sessctl_store::Messages::Added(msgs),
        ..Default::default()
    };
    let (_, mut head) = store
        .create(
            Some("c"),
            turn(vec![message(&mut rng, 0)]),
            Durability::NoSync,
        )
        .unwrap();
    for i in 1..700 {
        head = store
            .commit(
                "c",
                None,
                turn(vec![message(&mut rng, i)]),
                Durability::NoSync,
            )
            .unwrap();
    }
    store.repack(&RepackOptions::default()).unwrap();
    // Some of it after the lineage index was written.
    for i in 700..720 {
        head = store
            .commit(
                "c",
                None,
                turn(vec![message(&mut rng, i)]),
                Durability::NoSync,
            )
            .unwrap();
    }
    let index = store
        .lineage_index()
        .expect("repack writes a lineage index");
    assert!(index.len() >= 700);
    assert_eq!(
        store.history(&head).unwrap(),
        store.odb().history(&head).unwrap()
    );
    assert_eq!(
        store.load_messages(&head).unwrap(),
        store.odb().load_messages(&head).unwrap()
    );
    assert_eq!(
        store.load_message_bytes(&head).unwrap(),
        store.odb().load_message_bytes(&head).unwrap()
    );
    let mid = store.odb().session(&head).unwrap().first_parent().unwrap();
    assert_eq!(
        store.history(&mid).unwrap(),
        store.odb().history(&mid).unwrap()
    );
}

two_backends!(
    bytes_and_values_agree_along_compactions_forks_and_repeats,
    what_is_not_a_stored_blob_is_refused_by_name,
);
