//! Golden fixtures: the examples of objects-format.md, byte for byte, and a
//! store written by format version 1 that every later version must read.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::fs;

use std::path::{Path, PathBuf};
use support::{dump, dump_squeezed, examples, spec};

use serde_json::json;
use sessctl_store::{Durability, ObjectId, Odb, OpenOptions, WriteBatch};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

const HELLO_ID: &str = "00ffdccff9a461873897cd0a40c829c259faba08458bcf2be5b99e430c6edbaf";
const ROOT_ID: &str = "2ee3266abfb3ca0e724f807c33e480ba92a352e29af4c5786e090565294f91b7";
const REPLY_ID: &str = "cabf92e0414ae10b11d45fc2f37fd6ed32a34551b7b6976c54479ee13076af74";
const CONT_ID: &str = "f196d7d40477112bc8ba254286581f9f17f0382243e934cb87cdefc1da5d8a12";

#[test]
fn spec_examples_have_the_pinned_ids() {
    let e = examples();
    assert_eq!(e.hello.id().to_hex(), HELLO_ID);
    assert_eq!(e.root.id().to_hex(), ROOT_ID);
    assert_eq!(e.reply.id().to_hex(), REPLY_ID);
    assert_eq!(e.cont.id().to_hex(), CONT_ID);
}

#[test]
fn spec_text_matches_the_code_byte_for_byte() {
    let e = examples();
    let spec = spec();
    for (what, obj) in [
        ("blob", &e.hello),
        ("root session", &e.root),
        ("continuation", &e.cont),
    ] {
        assert!(
            spec.contains(&dump(obj.payload())),
            "objects-format.md lacks the hex dump of the {what} example:\n{}",
            dump(obj.payload())
        );
        assert!(
            spec.contains(&format!("({} bytes)", obj.payload().len()))
                || spec.contains(&format!("({} bytes):", obj.payload().len())),
            "objects-format.md gives a wrong size for the {what} example ({} bytes)",
            obj.payload().len()
        );
    }
    for id in [HELLO_ID, ROOT_ID, REPLY_ID, CONT_ID] {
        assert!(spec.contains(id), "objects-format.md lacks id {id}");
    }
    // The identity rule as the spec states it.
    let header = format!("blob 1 {}\0", e.hello.payload().len());
    let mut hashed = header.into_bytes();
    hashed.extend_from_slice(e.hello.payload());
    assert_eq!(blake3::hash(&hashed).as_bytes(), e.hello.id().as_bytes());
    assert!(spec.contains("`blob 1 25\\0`"));
    // Version constants named in the spec's table.
    assert!(spec.contains(&format!(
        "`OBJECT_FORMAT_VERSION` | {}",
        sessctl_store::OBJECT_FORMAT_VERSION
    )));
    assert!(spec.contains(&format!(
        "`STORE_FORMAT_VERSION` | {}",
        sessctl_store::STORE_FORMAT_VERSION
    )));
    assert!(spec.contains(&format!(
        "`JOURNAL_FORMAT_VERSION` | {}",
        sessctl_store::odb::journal::JOURNAL_FORMAT_VERSION
    )));
    assert!(spec.contains(&format!(
        "`PACK_FORMAT_VERSION` | {}",
        sessctl_store::odb::pack::PACK_FORMAT_VERSION
    )));
    assert!(spec.contains(&format!(
        "`OP_FORMAT_VERSION` | {}",
        sessctl_store::refs::op::OP_FORMAT_VERSION
    )));
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn second_batch() -> (WriteBatch, ObjectId, ObjectId) {
    let mut b = WriteBatch::new();
    let x = b
        .blob(&json!({"n": 1.5, "i": -7, "s": "\u{fc}\u{6c34}", "a": [true, null]}))
        .unwrap();
    let y = b.blob(&json!([1, 1.0, "1"])).unwrap();
    (b, x, y)
}

#[test]
fn a_version_1_store_reads_back() {
    let fixture = root().join("tests/fixtures/store-v1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    copy_dir(&fixture, &path);
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    assert!(odb.take_recovery_notes().is_empty());
    let stats = odb.stats().unwrap();
    assert_eq!(
        (stats.packs, stats.pack_objects, stats.journal_objects),
        (1, 4, 2)
    );
    let cont = ObjectId::from_hex(CONT_ID).unwrap();
    assert_eq!(
        odb.load_messages(&cont).unwrap(),
        vec![
            json!({"role": "user", "content": "Hello"}),
            json!({"role": "assistant", "content": "Hi!"})
        ]
    );
    let e = examples();
    for o in [&e.hello, &e.root, &e.reply, &e.cont] {
        assert_eq!(&odb.read(&o.id()).unwrap(), o);
    }
    let (_, x, y) = second_batch();
    assert_eq!(
        odb.blob(&x).unwrap(),
        json!({"a": [true, null], "i": -7, "n": 1.5, "s": "ü水"})
    );
    let y = odb.blob(&y).unwrap();
    assert_eq!(serde_json::to_string(&y).unwrap(), r#"[1,1.0,"1"]"#);
    // Opening it changes nothing: its FORMAT still says 1 (only a ref-log
    // expiry raises it to 2).
    drop(odb);
    assert_eq!(
        fs::read_to_string(path.join("FORMAT")).unwrap(),
        "sessctl store format 1\n"
    );
}

/// gc's sweep on a store version 1 wrote: its pack's blocks are copied or
/// written again, the journal packed, and every object kept reads back.
#[test]
fn a_version_1_store_is_swept() {
    let fixture = root().join("tests/fixtures/store-v1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    copy_dir(&fixture, &path);
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    let e = examples();
    let (_, x, y) = second_batch();
    let all = odb.backend().ids().unwrap();
    assert_eq!(all.len(), 6);
    // One object of the pack and one of the journal go.
    let doomed: sessctl_store::hash::IdSet = [e.reply.id(), y].into_iter().collect();
    let stats = odb
        .backend()
        .sweep(&Default::default(), &doomed, None)
        .unwrap();
    assert_eq!(stats.segments_packed, 1);
    let after = odb.stats().unwrap();
    assert_eq!(
        (after.packs, after.pack_objects, after.journal_objects),
        (1, 4, 0)
    );
    for o in [&e.hello, &e.root, &e.cont] {
        assert_eq!(&odb.read(&o.id()).unwrap(), o);
    }
    assert!(odb.blob(&x).is_ok());
    for id in doomed {
        assert!(matches!(
            odb.read(&id),
            Err(sessctl_store::Error::NotFound { .. })
        ));
    }
    drop(odb);
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    assert_eq!(odb.backend().ids().unwrap().len(), 4);
    assert!(odb.backend().verify_storage().is_empty());
}

#[test]
fn the_journal_writes_the_fixture_bytes() {
    let fixture = root().join("tests/fixtures/journal-v3/0000000000000001.journal");
    let expected = fs::read(fixture).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let odb = Odb::init(&path).unwrap();
    let (b, _, _) = second_batch();
    odb.write(&b, Durability::Sync).unwrap();
    drop(odb);
    let written = fs::read(path.join("journal/0000000000000001.journal")).unwrap();
    // The fixture's header and frame, then zeros written ahead to a block
    // boundary (objects-format.md, "Space written ahead").
    assert_eq!(written[..expected.len()], expected[..]);
    assert!(written[expected.len()..].iter().all(|b| *b == 0));
    assert!(written.len() > expected.len() && written.len().is_multiple_of(4096));
    assert_eq!(expected[4..8], 3u32.to_le_bytes());
    // The frame is the one version 2 wrote (only the header's version and
    // segment number differ).
    let v2 =
        fs::read(root().join("tests/fixtures/store-v1/journal/0000000000000002.journal")).unwrap();
    assert_eq!(expected[16..], v2[16..]);
    assert_eq!(v2[4..8], 2u32.to_le_bytes());
}

#[test]
fn a_version_2_segment_takes_appends_as_it_is() {
    let fixture = root().join("tests/fixtures/store-v1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    copy_dir(&fixture, &path);
    let seg = path.join("journal/0000000000000002.journal");
    let before = fs::read(&seg).unwrap();
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    let id = odb.put_blob(&json!("appended"), Durability::Sync).unwrap();
    drop(odb);
    let after = fs::read(&seg).unwrap();
    // Appended to, and nothing written ahead: a version-2 reader would take
    // zeros for a torn write.
    assert_eq!(after[..before.len()], before[..]);
    assert_ne!(after[after.len() - 1], 0);
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    assert!(odb.take_recovery_notes().is_empty());
    assert_eq!(odb.blob(&id).unwrap(), json!("appended"));
    let cont = ObjectId::from_hex(CONT_ID).unwrap();
    assert_eq!(odb.load_messages(&cont).unwrap().len(), 2);
    // A repack seals it; the next segment is of version 3.
    odb.repack(&sessctl_store::RepackOptions::default())
        .unwrap();
    odb.put_blob(&json!("next"), Durability::Sync).unwrap();
    drop(odb);
    let newest = fs::read(path.join("journal/0000000000000003.journal")).unwrap();
    assert_eq!(newest[4..8], 3u32.to_le_bytes());
}

#[test]
fn the_operation_example_is_pinned() {
    use sessctl_store::refs::Operation;
    let op = support::example_operation();
    assert_eq!(
        op.refs[0].new,
        Some(sessctl_store::RefTarget::Session(
            ObjectId::from_hex(ROOT_ID).unwrap()
        ))
    );
    let bytes = op.encode();
    let spec = spec();
    assert!(
        spec.contains(&dump(&bytes)),
        "objects-format.md lacks the operation's hex dump:\n{}",
        dump(&bytes)
    );
    assert!(spec.contains(&format!("({} bytes)", bytes.len())));
    let hash = sessctl_store::hash::hex(&op.hash());
    assert_eq!(
        hash,
        "a662416a138f93671e1dd7db5477c8aacaf3c29074e606b690546af46a8da0d7"
    );
    assert!(spec.contains(&hash));
    let entries = op.reflog_entries();
    for (e, h) in entries.iter().zip([
        "9ac2a7c363fd12cb7a5d83ea113828674e2abb6e73ca086951f8a9a9b52902bd",
        "2400d28cd6c51af9828fc5cc98111ac696a3b9caf11d458c7a486c3a08fb81e3",
    ]) {
        assert_eq!(sessctl_store::hash::hex(&e.hash()), h);
        assert!(spec.contains(h));
    }
    assert_eq!(Operation::decode(&bytes).unwrap(), op);
}

/// The expiry example of "Expiring the ref log": operation 2 expires the
/// first entry of `refs/heads/greeting` (the operation example's).
#[test]
fn the_expiry_example_is_pinned() {
    use sessctl_store::refs::{Operation, ReflogExpiry};
    let first = support::example_operation();
    let op = Operation {
        seq: 2,
        prev: Some(first.hash()),
        time: 1_763_000_002_000,
        actor: "alice".into(),
        reason: "reflog-expire".into(),
        refs: vec![],
        conversations: vec![],
        runs: vec![],
        expire: vec![ReflogExpiry {
            name: first.refs[0].name.clone(),
            through: first.reflog_entries()[0].hash(),
        }],
    };
    let bytes = op.encode();
    let spec = spec();
    assert!(
        spec.contains(&dump(&bytes)),
        "objects-format.md lacks the expiry's hex dump:\n{}",
        dump(&bytes)
    );
    assert!(spec.contains(&format!("({} bytes)", bytes.len())));
    let hash = sessctl_store::hash::hex(&op.hash());
    assert!(spec.contains(&hash), "objects-format.md lacks hash {hash}");
    assert_eq!(Operation::decode(&bytes).unwrap(), op);
}

/// The lineage index of the two example sessions.
#[test]
fn the_lineage_index_example_matches_the_spec() {
    use sessctl_store::lineage_index::{build, LineageIndex, SessionFacts, LINEAGE_FORMAT_VERSION};
    let e = examples();
    let mut facts = std::collections::BTreeMap::new();
    for obj in [&e.root, &e.cont] {
        let s = sessctl_store::Session::decode(obj.payload()).unwrap();
        facts.insert(obj.id(), SessionFacts::of(&obj.id(), &s));
    }
    let bytes = build(&facts).unwrap();
    let ix = LineageIndex::from_bytes("example.lgi".into(), bytes.clone()).unwrap();
    assert_eq!(ix.len(), 2);
    let spec = spec();
    assert!(
        spec.contains(&dump_squeezed(&bytes)),
        "objects-format.md lacks the hex dump of the lineage index example:\n{}",
        dump_squeezed(&bytes)
    );
    assert!(spec.contains(&format!("({} bytes;", bytes.len())));
    let sum = ObjectId::from_slice(&bytes[bytes.len() - 32..]).unwrap();
    assert!(spec.contains(&sum.to_hex()), "spec lacks checksum {sum}");
    assert!(spec.contains(&format!(
        "`LINEAGE_FORMAT_VERSION` | {LINEAGE_FORMAT_VERSION}"
    )));
}

/// The raw example of objects-format.md: the blob example's JSON text kept
/// as written, spaces and key order included.
const RAW_TEXT: &str = r#"{"role": "user", "content": "Hello"}"#;
const RAW_ID: &str = "d393721280796f022a911bbb3ee2c8ef06172891b2abbbea5311736ef85e738e";

#[test]
fn the_raw_example_is_pinned() {
    use sessctl_store::object::Raw;
    let raw = Raw::from_lines(&[RAW_TEXT]).unwrap();
    let o = raw.encode();
    assert_eq!(o.payload(), RAW_TEXT.as_bytes());
    assert_eq!(o.id().to_hex(), RAW_ID);
    // Hashed as the spec says: `raw 1 36\0` and the bytes.
    let mut hashed = format!("raw 1 {}\0", RAW_TEXT.len()).into_bytes();
    hashed.extend_from_slice(RAW_TEXT.as_bytes());
    assert_eq!(blake3::hash(&hashed).as_bytes(), o.id().as_bytes());
    let spec = spec();
    assert!(
        spec.contains(&dump(o.payload())),
        "objects-format.md lacks the raw example's dump"
    );
    assert!(
        spec.contains(RAW_ID),
        "objects-format.md lacks the raw example's id"
    );
    assert!(spec.contains("`raw 1 36\\0`"));
    // It reads as the blob example's value, and is another object.
    let e = examples();
    assert_eq!(
        raw.value().unwrap(),
        json!({"role": "user", "content": "Hello"})
    );
    assert_ne!(o.id(), e.hello.id());
    assert!(spec.contains(&format!(
        "`STORE_FORMAT_VERSION` | {}",
        sessctl_store::STORE_FORMAT_VERSION
    )));
}
