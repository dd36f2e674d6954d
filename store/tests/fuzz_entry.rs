//! The fuzzing entry points of `sessctl_store::fuzzing`, on the stable
//! toolchain: the same oracles the cargo-fuzz targets in `fuzz/` run, fed
//! random bytes and, mostly, mutations of valid encodings (blob and session
//! payloads, real journal segments, real pack indexes): bit flips,
//! truncations, splices, duplicated ranges, length fields overwritten with
//! large values. Mutated journal frames and indexes are also tried with their
//! checksums fixed up, so that the code behind each checksum is reached too.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/mutation.rs"]
mod mutation;
mod support;

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use mutation::{apply_edit, config, edit, overwrite, Edit};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};
use sessctl_store::fuzzing;
use sessctl_store::odb::journal::{
    entries, frame_checksum, parse_frame, parse_object_entry, FRAME_CHECKSUM_AT, FRAME_HEADER_LEN,
    OBJECT_ENTRY_FIXED, SEGMENT_HEADER_LEN,
};
use sessctl_store::odb::pack::{
    parse_index, verify_index, write_pack, IndexView, PackOptions, CHECKSUM_LEN, INDEX_HEADER_LEN,
};
use sessctl_store::{
    Blob, Compaction, Durability, MessageDelta, ObjectId, Odb, OpenOptions, RepackOptions, Session,
    SessionStatus, SessionType, WriteBatch,
};
use support::{message, write_chain, Rng};

/// Valid encodings to mutate, and where their length fields sit.
struct Seeds {
    blobs: Vec<Vec<u8>>,
    sessions: Vec<Vec<u8>>,
    /// Journal segments without their 16-byte header: frames back to back.
    journals: Vec<Seed>,
    indexes: Vec<Seed>,
}

struct Seed {
    bytes: Vec<u8>,
    /// Offsets of length and count fields, the places a large value hurts most.
    length_fields: Vec<usize>,
}

fn seeds() -> &'static Seeds {
    static SEEDS: OnceLock<Seeds> = OnceLock::new();
    SEEDS.get_or_init(build_seeds)
}

fn build_seeds() -> Seeds {
    let mut blobs: Vec<Vec<u8>> = blob_values()
        .into_iter()
        .map(|v| Blob::new(v).unwrap().encode().into_payload())
        .collect();
    let mut rng = Rng::new(11);
    blobs.extend((0..4).map(|i| {
        Blob::new(message(&mut rng, i))
            .unwrap()
            .encode()
            .into_payload()
    }));
    let sessions = sessions()
        .iter()
        .map(|s| s.encode().unwrap().into_payload())
        .collect();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let odb = Odb::init(&path).unwrap();
    let chain = write_chain(&odb, 3, 4, 2, Durability::NoSync);
    let mut b = WriteBatch::new();
    for s in sessions_over(&chain) {
        b.session(&s).unwrap();
    }
    b.blob(&json!("x".repeat(4000))).unwrap(); // compressed in the journal
    odb.write(&b, Durability::NoSync).unwrap();
    let journals = segment_files(&path)
        .iter()
        .map(|p| {
            let mut bytes = fs::read(p).unwrap()[SEGMENT_HEADER_LEN as usize..].to_vec();
            // The frames: the zeros written ahead after them are no seed.
            let mut end = 0;
            while let Ok(frame) = parse_frame(&bytes[end..]) {
                end += frame.total_len();
            }
            assert!(bytes[end..].iter().all(|b| *b == 0));
            bytes.truncate(end);
            let length_fields = journal_length_fields(&bytes);
            Seed {
                bytes,
                length_fields,
            }
        })
        .collect();

    // Sessions as the store holds them, read back through the public API.
    let mut sessions: Vec<Vec<u8>> = sessions;
    sessions.extend(chain.iter().map(|id| odb.read(id).unwrap().into_payload()));

    odb.repack(&RepackOptions::default()).unwrap();
    drop(odb);
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    let objects: Vec<_> = odb
        .backend()
        .ids()
        .unwrap()
        .iter()
        .map(|id| odb.read(id).unwrap())
        .collect();
    // The same objects in one block per object, and an empty pack.
    let extra = dir.path().join("extra-packs");
    fs::create_dir(&extra).unwrap();
    let small_blocks = PackOptions {
        block_target: 1,
        ..PackOptions::default()
    };
    write_pack(&extra, &objects, small_blocks).unwrap();
    write_pack(&extra, &objects[..1], PackOptions::default()).unwrap();
    write_pack(&extra, &[], PackOptions::default()).unwrap();
    // Enough messages to train a dictionary: a dictionary table, and
    // blocks that name it.
    let mut rng = Rng::new(12);
    let messages: Vec<_> = (0..64)
        .map(|i| Blob::new(message(&mut rng, i)).unwrap().encode())
        .collect();
    let with_dictionary = PackOptions {
        block_target: 4096,
        zstd_level: 1,
        dictionary_size: 2048,
    };
    let w = write_pack(&extra, &messages, with_dictionary).unwrap();
    let idx = fs::read(&w.index_path).unwrap();
    assert_eq!(IndexView::parse(&idx).unwrap().dictionary_count(), 1);
    let mut indexes = Vec::new();
    for packs in [path.join("packs"), extra] {
        for entry in fs::read_dir(&packs).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "idx") {
                let bytes = fs::read(&p).unwrap();
                let length_fields = index_length_fields(&bytes);
                indexes.push(Seed {
                    bytes,
                    length_fields,
                });
            }
        }
    }
    assert_eq!(indexes.len(), 5);
    blobs.sort();
    Seeds {
        blobs,
        sessions,
        journals,
        indexes,
    }
}

fn blob_values() -> Vec<Value> {
    vec![
        json!(null),
        json!(true),
        json!(0),
        json!(23),
        json!(24),
        json!(-1),
        json!(-25),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(1.0),
        json!(-0.0),
        json!(1.5),
        json!(0.1),
        json!(1e300),
        json!(65504.0),
        json!(f32::MAX as f64),
        json!(""),
        json!("héllo ☃ 𝄞"),
        json!([]),
        json!({}),
        json!({"b": 1, "aa": 2, "a": [null, false, 2.5, {"k": "v"}]}),
        json!([[[[[[[[[[{"deep": [1, -2, 3.25]}]]]]]]]]]]),
        json!({"role": "user", "content": "Hello"}),
    ]
}

fn id(n: u8) -> ObjectId {
    ObjectId::from_bytes([n; 32])
}

/// Sessions using every field, alone and together.
fn sessions() -> Vec<Session> {
    sessions_over(&[id(1), id(2), id(3)])
}

fn sessions_over(parents: &[ObjectId]) -> Vec<Session> {
    let mut out = Vec::new();
    let mut root = Session::new_root(1_763_000_000_000);
    root.messages.added = vec![id(7), id(8)];
    root.display_messages.added = vec![id(7)];
    out.push(root.clone());

    let mut full = Session::new_root(-5);
    full.parents = parents.to_vec();
    full.conversation = Some(parents[0]);
    full.status = SessionStatus::AwaitingToolResults;
    full.title = Some("A title with ünïcode".into());
    full.run.duration_ms = u64::MAX;
    full.run.usage.total_tokens = 1 << 40;
    full.run.usage.prompt_tokens = 300;
    full.run.usage.completion_tokens = 24;
    full.run.usage.requests = 1;
    full.messages = MessageDelta {
        base: 2,
        added: vec![id(9)],
    };
    full.display_messages = MessageDelta {
        base: 1,
        added: Vec::new(),
    };
    full.context_state = Some(id(10));
    full.environment_state = Some(id(11));
    full.metadata.session_type = SessionType::AsyncSubagent;
    full.metadata.transport = Some("cli".into());
    full.metadata.spawned_by = Some(id(12));
    full.metadata.preset_id = Some("preset".into());
    full.metadata
        .extra
        .insert("k".into(), json!({"nested": [1, 2.5, null]}));
    full.metadata.extra.insert("aa".into(), json!("v"));
    full.compaction = Some(Compaction {
        session: id(13),
        messages: 40,
        summary: id(14),
    });
    out.push(full);

    for status in SessionStatus::ALL {
        let mut s = Session::new_root(i64::MIN);
        s.status = status;
        s.parents = vec![parents[parents.len() - 1]];
        s.messages.base = u64::MAX;
        out.push(s);
    }
    out
}

fn segment_files(store: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = fs::read_dir(store.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "journal"))
        .collect();
    v.sort();
    v
}

/// Body lengths and entry counts of frames, entry lengths, object raw lengths.
fn journal_length_fields(frames: &[u8]) -> Vec<usize> {
    let mut fields = Vec::new();
    let mut pos = 0;
    while let Ok(frame) = parse_frame(&frames[pos..]) {
        fields.extend([pos, pos + 4]);
        let body_at = pos + FRAME_HEADER_LEN;
        for entry in entries(frame.body) {
            let entry = entry.unwrap();
            fields.push(body_at + entry.offset - 4);
            fields.push(body_at + entry.offset + OBJECT_ENTRY_FIXED - 4);
        }
        pos += frame.total_len();
    }
    assert_eq!(pos, frames.len(), "a seed segment holds only whole frames");
    fields
}

/// Object and block counts, fan-out, record lengths, block table.
fn index_length_fields(idx: &[u8]) -> Vec<usize> {
    let view = IndexView::parse(idx).unwrap();
    view.verify().unwrap();
    // Version 2 (all the seeds): a 24-byte header with the dictionary
    // count, 20-byte block entries naming a dictionary, the dictionary table.
    assert_eq!(view.layout().version, 2);
    let mut fields = vec![8, 12, 16];
    fields.extend((0..256).map(|b| INDEX_HEADER_LEN + 4 * b));
    let n = view.object_count();
    let entries_at = INDEX_HEADER_LEN + 1024 + 32 * n;
    fields.extend((0..n).flat_map(|i| [entries_at + 12 * i, entries_at + 12 * i + 8]));
    let blocks_at = entries_at + 12 * n;
    fields.extend((0..view.block_count()).flat_map(|k| {
        [
            blocks_at + 20 * k,
            blocks_at + 20 * k + 8,
            blocks_at + 20 * k + 12,
            blocks_at + 20 * k + 16,
        ]
    }));
    let dicts_at = blocks_at + 20 * view.block_count();
    fields.extend(
        (0..view.dictionary_count()).flat_map(|d| [dicts_at + 48 * d, dicts_at + 48 * d + 8]),
    );
    fields
}

/// Recomputes every frame checksum that a whole frame is there for, so that
/// mutated bodies get past `parse_frame`.
fn fix_frame_checksums(frames: &mut [u8]) {
    let mut pos = 0;
    while pos + FRAME_HEADER_LEN <= frames.len() {
        let len = u32::from_le_bytes(frames[pos..pos + 4].try_into().unwrap()) as usize;
        let Some(end) = (pos + FRAME_HEADER_LEN)
            .checked_add(len)
            .filter(|&e| e <= frames.len())
        else {
            break;
        };
        let sum = frame_checksum(
            &frames[pos..pos + FRAME_CHECKSUM_AT],
            &frames[pos + FRAME_HEADER_LEN..end],
        );
        frames[pos + FRAME_CHECKSUM_AT..pos + FRAME_HEADER_LEN].copy_from_slice(&sum);
        pos = end;
    }
}

/// Recomputes an index's own checksum (its last 32 bytes).
fn fix_index_checksum(idx: &mut [u8]) {
    if idx.len() >= CHECKSUM_LEN {
        let at = idx.len() - CHECKSUM_LEN;
        let sum = blake3::hash(&idx[..at]);
        idx[at..].copy_from_slice(sum.as_bytes());
    }
}

/// One edit of a valid encoding.
#[derive(Debug, Clone)]
enum Mutation {
    Edit(Edit),
    /// Overwrites a length field of the format with a large value.
    LargeLength(Index, u32),
    /// Overwrites any 4 or 8 bytes with a large little-endian value.
    LargeAt(Index, u64, bool),
    /// Inserts a CBOR head of some major type with a huge argument.
    CborHead(Index, u8, bool),
}

fn large_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(u32::MAX),
        Just(u32::MAX - 1),
        Just(1 << 31),
        Just(1 << 30),
        Just((1 << 30) + 1),
        Just(0x0100_0000),
        Just(0),
        any::<u32>(),
    ]
}

fn large_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(1 << 63),
        Just(u64::from(u32::MAX)),
        Just(1 << 32),
        any::<u64>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        8 => edit().prop_map(Mutation::Edit),
        3 => (any::<Index>(), large_u32()).prop_map(|(i, v)| Mutation::LargeLength(i, v)),
        1 => (any::<Index>(), large_u64(), any::<bool>()).prop_map(|(i, v, w)| Mutation::LargeAt(i, v, w)),
        1 => (any::<Index>(), 0u8..8, any::<bool>()).prop_map(|(i, m, w)| Mutation::CborHead(i, m, w)),
    ]
}

/// Applies `m` to `bytes`; `fields` are the seed's length fields (which
/// may lie past the end of an already shortened input), `others` the seeds
/// to splice from.
fn apply(bytes: &mut Vec<u8>, m: &Mutation, fields: &[usize], others: &[&[u8]]) {
    let len = bytes.len();
    let at = |i: &Index| if len == 0 { 0 } else { i.index(len) };
    let upto = |i: &Index| i.index(len + 1);
    match m {
        Mutation::Edit(e) => apply_edit(bytes, e, others),
        Mutation::LargeLength(i, v) => {
            let pos = if fields.is_empty() {
                at(i)
            } else {
                fields[i.index(fields.len())]
            };
            overwrite(bytes, pos, &v.to_le_bytes());
        }
        Mutation::LargeAt(i, v, wide) => {
            let pos = at(i);
            if *wide {
                overwrite(bytes, pos, &v.to_le_bytes());
            } else {
                overwrite(bytes, pos, &(*v as u32).to_le_bytes());
            }
        }
        Mutation::CborHead(i, major, wide) => {
            let to = upto(i);
            let head: Vec<u8> = if *wide {
                [vec![major << 5 | 27], vec![0xff; 8]].concat()
            } else {
                [vec![major << 5 | 26], vec![0x7f, 0xff, 0xff, 0xff]].concat()
            };
            bytes.splice(to..to, head);
        }
    }
}

fn mutated(seed: &[u8], fields: &[usize], mutations: &[Mutation], others: &[&[u8]]) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for m in mutations {
        apply(&mut bytes, m, fields, others);
    }
    bytes
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..5)
}

/// Edits that keep the length, for formats that check their size first.
fn in_place_mutations() -> impl Strategy<Value = Vec<Mutation>> {
    let m = prop_oneof![
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::Edit(Edit::FlipBit(i, b))),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| Mutation::Edit(Edit::SetByte(i, v))),
        2 => (any::<Index>(), large_u32()).prop_map(|(i, v)| Mutation::LargeLength(i, v)),
        1 => (any::<Index>(), large_u64(), any::<bool>())
            .prop_map(|(i, v, w)| Mutation::LargeAt(i, v, w)),
    ];
    prop::collection::vec(m, 1..4)
}

fn all(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(Vec::as_slice).collect()
}

proptest! {
    #![proptest_config(config(4096))]

    #[test]
    fn object_decode_survives_random_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzzing::object_decode(&data);
    }

    #[test]
    fn journal_frames_survive_random_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzzing::journal_frames(&data);
    }

    #[test]
    fn pack_index_survives_random_bytes(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        fuzzing::pack_index(&data);
    }

    /// Random bytes are almost never an index: these are headers and a
    /// fan-out that fit a random id table, to reach the lookups.
    #[test]
    fn pack_index_lookups_survive_random_tables(
        objects in 0usize..40,
        blocks in 0usize..4,
        fanout_cuts in prop::collection::vec(any::<Index>(), 0..40),
        body in prop::collection::vec(any::<u8>(), 0..(40 * 44 + 4 * 16 + 64)),
        sorted in any::<bool>(),
        fix in any::<bool>(),
    ) {
        let mut idx = Vec::new();
        idx.extend_from_slice(b"SIDX");
        idx.extend_from_slice(&1u32.to_le_bytes());
        idx.extend_from_slice(&(objects as u32).to_le_bytes());
        idx.extend_from_slice(&(blocks as u32).to_le_bytes());
        let mut ids: Vec<[u8; 32]> = (0..objects)
            .map(|i| std::array::from_fn(|k| body.get(i * 32 + k).copied().unwrap_or(k as u8)))
            .collect();
        if sorted {
            ids.sort();
            ids.dedup();
            ids.resize_with(objects, || [0xff; 32]);
        }
        let mut counts = [0u32; 256];
        if sorted {
            for id in &ids {
                counts[id[0] as usize] += 1;
            }
        } else {
            // A monotone fan-out with arbitrary steps.
            let mut cuts: Vec<usize> = fanout_cuts.iter().map(|c| c.index(256)).collect();
            cuts.truncate(objects);
            cuts.resize(objects, 255);
            for c in cuts {
                counts[c] += 1;
            }
        }
        let mut total = 0u32;
        for c in counts {
            total += c;
            idx.extend_from_slice(&total.to_le_bytes());
        }
        for id in &ids {
            idx.extend_from_slice(id);
        }
        let rest = objects * 12 + blocks * 16 + 2 * CHECKSUM_LEN;
        idx.extend((0..rest).map(|k| body.get(k).copied().unwrap_or(0)));
        if fix {
            fix_index_checksum(&mut idx);
        }
        prop_assert!(IndexView::parse(&idx).is_ok());
        fuzzing::pack_index(&idx);
    }
}

proptest! {
    #![proptest_config(config(4096))]

    #[test]
    fn object_decode_survives_mutated_objects(
        session in any::<bool>(),
        which in any::<Index>(),
        selector in any::<u8>(),
        ms in mutations(),
    ) {
        let s = seeds();
        let pool = if session { &s.sessions } else { &s.blobs };
        let seed = &pool[which.index(pool.len())];
        let others = all(if session { &s.blobs } else { &s.sessions });
        let mut data = vec![(selector & !1) | u8::from(session)];
        data.extend(mutated(seed, &[], &ms, &others));
        fuzzing::object_decode(&data);
    }
}

proptest! {
    #![proptest_config(config(1536))]

    #[test]
    fn journal_frames_survive_mutated_segments(
        which in any::<Index>(),
        ms in mutations(),
        fix in any::<bool>(),
    ) {
        let s = seeds();
        let seed = &s.journals[which.index(s.journals.len())];
        let others: Vec<&[u8]> = s.blobs.iter().chain(&s.sessions).map(Vec::as_slice).collect();
        let mut data = mutated(&seed.bytes, &seed.length_fields, &ms, &others);
        if fix {
            fix_frame_checksums(&mut data);
        }
        fuzzing::journal_frames(&data);
    }

    #[test]
    fn pack_index_survives_mutated_indexes(
        which in any::<Index>(),
        ms in mutations(),
        fix in any::<bool>(),
    ) {
        let s = seeds();
        let seed = &s.indexes[which.index(s.indexes.len())];
        let others: Vec<&[u8]> = s.indexes.iter().map(|i| i.bytes.as_slice()).collect();
        let mut data = mutated(&seed.bytes, &seed.length_fields, &ms, &others);
        if fix {
            fix_index_checksum(&mut data);
        }
        fuzzing::pack_index(&data);
    }

    #[test]
    fn pack_index_survives_mutations_in_place(
        which in any::<Index>(),
        ms in in_place_mutations(),
        fix in any::<bool>(),
    ) {
        let s = seeds();
        let seed = &s.indexes[which.index(s.indexes.len())];
        let mut data = mutated(&seed.bytes, &seed.length_fields, &ms, &[]);
        if fix {
            fix_index_checksum(&mut data);
        }
        fuzzing::pack_index(&data);
    }
}

/// The seeds themselves pass, and are what they should be: the oracles are
/// reached, not turned away at the door.
#[test]
fn valid_encodings_pass_every_oracle() {
    let s = seeds();
    for p in &s.blobs {
        assert!(Blob::decode(p).is_ok());
        fuzzing::object_decode(&[[0].as_slice(), p].concat());
    }
    for p in &s.sessions {
        assert!(Session::decode(p).is_ok());
        fuzzing::object_decode(&[[1].as_slice(), p].concat());
    }
    let mut objects = 0;
    for seed in &s.journals {
        fuzzing::journal_frames(&seed.bytes);
        let header = [&b"SJNL"[..], &1u32.to_le_bytes(), &1u64.to_le_bytes()].concat();
        fuzzing::journal_frames(&[header, seed.bytes.clone()].concat());
        let mut pos = 0;
        while let Ok(frame) = parse_frame(&seed.bytes[pos..]) {
            for entry in entries(frame.body) {
                parse_object_entry(entry.unwrap().payload)
                    .unwrap()
                    .to_object()
                    .unwrap();
                objects += 1;
            }
            pos += frame.total_len();
        }
    }
    assert!(objects >= 20, "{objects}");
    for seed in &s.indexes {
        let view = IndexView::parse(&seed.bytes).unwrap();
        view.verify().unwrap();
        fuzzing::pack_index(&seed.bytes);
    }
}

/// Blobs nest up to 256 levels, and JSON text of any blob reads back in;
/// 257 levels are refused either way.
#[test]
fn deep_blobs_decode_and_re_encode() {
    for depth in [126usize, 127, 128, 200, 255, 256] {
        let mut v = json!(1);
        for _ in 0..depth {
            v = json!([v]);
        }
        let payload = Blob::new(v.clone()).unwrap().encode().into_payload();
        fuzzing::object_decode(&[[0].as_slice(), &payload].concat());
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(
            Blob::from_json_str(&text).unwrap().encode().into_payload(),
            payload,
            "depth {depth}"
        );
    }
    let mut v = json!(1);
    for _ in 0..257 {
        v = json!([v]);
    }
    assert!(Blob::new(v.clone()).is_err());
    assert!(Blob::from_json_str(&serde_json::to_string(&v).unwrap()).is_err());
}

/// A journal entry claiming a huge raw length is refused before anything
/// is allocated (found by fuzzing: it used to reserve 4 GiB).
#[test]
fn a_forged_raw_length_is_refused_before_allocating() {
    let frame = zstd::bulk::compress(b"hello hello hello", 1).unwrap();
    let mut entry = vec![1u8, 1];
    entry.extend_from_slice(&[0u8; 32]);
    entry.extend_from_slice(&u32::MAX.to_le_bytes());
    entry.extend_from_slice(&frame);
    let parsed = sessctl_store::odb::journal::parse_object_entry(&entry).unwrap();
    let err = parsed.to_object().unwrap_err();
    assert!(err.contains("declares 17 bytes"), "{err}");
}

#[test]
fn verify_index_refuses_a_layout_of_other_bytes() {
    let s = seeds();
    let big = s.indexes.iter().max_by_key(|i| i.bytes.len()).unwrap();
    let small = s.indexes.iter().min_by_key(|i| i.bytes.len()).unwrap();
    let layout = parse_index(&big.bytes).unwrap();
    assert!(verify_index(&small.bytes, &layout).is_err());
    assert!(verify_index(&big.bytes, &layout).is_ok());
}

/// An index whose fan-out sends every id to the last bucket while the ids
/// start with other bytes: lookups must miss, not stray.
#[test]
fn lookups_in_an_index_with_a_lying_fanout_stay_in_bounds() {
    let s = seeds();
    let seed = s.indexes.iter().max_by_key(|i| i.bytes.len()).unwrap();
    let mut idx = seed.bytes.clone();
    let view = IndexView::parse(&idx).unwrap();
    let ids: Vec<ObjectId> = view.ids().collect();
    let n = ids.len() as u32;
    for b in 0..255 {
        idx[INDEX_HEADER_LEN + 4 * b..INDEX_HEADER_LEN + 4 * b + 4]
            .copy_from_slice(&0u32.to_le_bytes());
    }
    idx[INDEX_HEADER_LEN + 4 * 255..INDEX_HEADER_LEN + 1024].copy_from_slice(&n.to_le_bytes());
    fix_index_checksum(&mut idx);
    let view = IndexView::parse(&idx).unwrap();
    assert!(view.verify().is_err());
    for id in &ids {
        assert!(view.position(id).is_none_or(|p| view.id(p) == Some(*id)));
    }
    fuzzing::pack_index(&idx);
}

/// A frame built from objects round-trips through `parse_frame`, including
/// a compressed one, and a frame with a tampered length is refused.
#[test]
fn built_frames_round_trip() {
    let s = seeds();
    let mut data = Vec::new();
    for p in s.blobs.iter().chain(&s.sessions) {
        data.extend_from_slice(p);
    }
    fuzzing::journal_frames(&data);
    let mut frames = s.journals[0].bytes.clone();
    frames[0] ^= 0x40;
    assert!(parse_frame(&frames).is_err());
    fix_frame_checksums(&mut frames);
    fuzzing::journal_frames(&frames);
}

// ---- operations and the lineage-index file ----

/// The operations a real store writes, of every kind (create, commit,
/// merge, fork, archive, delete, tags, runs begun, committed and failed),
/// read back from its journal.
fn real_operations() -> &'static [Vec<u8>] {
    static OPS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    OPS.get_or_init(|| {
        use sessctl_store::{Cut, ForkOptions, Messages, Store, Turn};
        let turn = |m: Value| Turn {
            messages: Messages::Added(vec![m]),
            title: Some("a title".into()),
            ..Turn::default()
        };
        let store = Store::in_memory().unwrap();
        let sync = Durability::NoSync;
        let (name, root) = store
            .create(
                Some("fix"),
                turn(json!({"role": "user", "content": "hi"})),
                sync,
            )
            .unwrap();
        let run = store.begin_run(&name).unwrap();
        let reply = store
            .commit_run(
                &run,
                turn(json!({"role": "assistant", "content": "yo"})),
                true,
                sync,
            )
            .unwrap();
        let failed = store.begin_run(&name).unwrap();
        store.fail_run(&failed, "the model went away").unwrap();
        let (fork, _) = store
            .fork(
                reply,
                ForkOptions {
                    name: Some("retry".into()),
                    cut: Some(Cut::AtMessage(1)),
                    turn: Some(turn(json!({"role": "user", "content": "again"}))),
                },
                sync,
            )
            .unwrap();
        store.merge(&name, &[root], Turn::default(), sync).unwrap();
        support::tag(&store, [(0, root)]);
        store.archive(&fork, sync).unwrap();
        store.unarchive(&fork, sync).unwrap();
        store.delete(&fork, sync).unwrap();
        store
            .odb()
            .backend()
            .ops_after(0)
            .unwrap()
            .into_iter()
            .map(|(_, bytes)| bytes)
            .collect()
    })
}

/// A real store's lineage-index file: a chain, forks, merges of two and
/// three parents, several conversations.
fn real_lineage_file() -> &'static [u8] {
    static FILE: OnceLock<Vec<u8>> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let odb = Odb::init(dir.path()).unwrap();
        let a = write_chain(&odb, 1, 12, 2, Durability::NoSync);
        let b = write_chain(&odb, 2, 6, 1, Durability::NoSync);
        let mut batch = WriteBatch::new();
        let mut merge = Session::new_root(1_763_000_100_000);
        merge.parents = vec![a[11], b[5], a[3]];
        merge.conversation = Some(a[0]);
        let merged = batch.session(&merge).unwrap();
        let mut two = Session::new_root(1_763_000_200_000);
        two.parents = vec![merged, b[2]];
        two.conversation = Some(a[0]);
        batch.session(&two).unwrap();
        odb.write(&batch, Durability::NoSync).unwrap();
        let stats = odb.repack(&RepackOptions::default()).unwrap();
        sessctl_store::lineage_index::write_from(&odb, dir.path(), stats.sessions).unwrap();
        fs::read(sessctl_store::lineage_index::path_in(dir.path())).unwrap()
    })
}

/// The lineage file of objects-format.md's example (1240 bytes).
fn golden_lineage_file() -> Vec<u8> {
    use sessctl_store::lineage_index::{build, SessionFacts};
    let e = support::examples();
    let mut facts = std::collections::BTreeMap::new();
    for o in [&e.root, &e.cont] {
        let s = Session::decode(o.payload()).unwrap();
        facts.insert(o.id(), SessionFacts::of(&o.id(), &s));
    }
    build(&facts).unwrap()
}

/// Where the committed seed corpora live (`fuzz/seeds/<target>/`).
fn seed_dir(target: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target)
}

fn committed_seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(seed_dir(target))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Writes the seed corpora from the golden examples and a real store:
/// `cargo test -p sessctl-store --test fuzz_entry -- --ignored write_fuzz_seeds`.
#[test]
#[ignore = "writes fuzz/seeds; run by hand when the formats' examples change"]
fn write_fuzz_seeds() {
    let ops = seed_dir("operation_decode");
    fs::create_dir_all(&ops).unwrap();
    fs::write(ops.join("golden.op"), support::example_operation().encode()).unwrap();
    for (k, bytes) in real_operations().iter().enumerate() {
        fs::write(ops.join(format!("store-{k:02}.op")), bytes).unwrap();
    }
    let lgi = seed_dir("lineage_index");
    fs::create_dir_all(&lgi).unwrap();
    // The fuzz input is a selector byte, then the file: 0 keeps the file's
    // own checksum.
    fs::write(
        lgi.join("golden.lgi"),
        [&[0u8][..], &golden_lineage_file()].concat(),
    )
    .unwrap();
    fs::write(
        lgi.join("store.lgi"),
        [&[0u8][..], real_lineage_file()].concat(),
    )
    .unwrap();
    fs::write(
        lgi.join("regress-self-parent-max-generation.lgi"),
        [&[0u8][..], &self_parent_at_max_generation()].concat(),
    )
    .unwrap();
}

/// A session that is its own parent, at generation u32::MAX. The generation
/// rule (one more than the oldest parent's) held only because `u32::MAX + 1`
/// saturated, and every walk of its parents never ended. Records are
/// checked as they are read: the file opens, its record does not.
#[test]
fn a_self_parent_at_the_largest_generation_is_refused() {
    use sessctl_store::lineage_index::LineageIndex;
    let lgi = self_parent_at_max_generation();
    let ix = LineageIndex::from_bytes("loop.lgi".into(), lgi.clone()).unwrap();
    let err = ix.parents(0).unwrap_err();
    assert!(err.to_string().contains("generation overflows"), "{err}");
    assert!(ix.is_own_error(&err));
    let err = ix.check().unwrap_err();
    assert!(err.to_string().contains("generation overflows"), "{err}");
    let input = [&[0u8][..], &lgi].concat();
    fuzzing::lineage_index(&input);
    let committed = seed_dir("lineage_index").join("regress-self-parent-max-generation.lgi");
    assert_eq!(
        fs::read(committed).unwrap(),
        input,
        "rerun write_fuzz_seeds"
    );
}

/// The spec's example with its first record (the continuation) made its own
/// parent, both generations set to u32::MAX and the checksum made right
/// again.
fn self_parent_at_max_generation() -> Vec<u8> {
    use sessctl_store::lineage_index::{CHECKSUM_LEN, FANOUT_LEN, HEADER_LEN, RECORD_LEN};
    let mut lgi = golden_lineage_file();
    let records_at = HEADER_LEN + FANOUT_LEN + 2 * 32;
    lgi[records_at..records_at + 4].copy_from_slice(&0u32.to_le_bytes());
    for pos in 0..2 {
        let at = records_at + pos * RECORD_LEN + 8;
        lgi[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    }
    let body = lgi.len() - CHECKSUM_LEN;
    let sum = blake3::hash(&lgi[..body]);
    lgi[body..].copy_from_slice(sum.as_bytes());
    lgi
}

/// The committed seeds are valid inputs that reach every oracle, and stay
/// what the formats' examples and a real store produce today.
#[test]
fn committed_seeds_pass_and_stay_current() {
    use sessctl_store::lineage_index::LineageIndex;
    use sessctl_store::refs::Operation;
    let ops = committed_seeds("operation_decode");
    assert!(ops.len() >= 10, "{} operation seeds", ops.len());
    let kinds: std::collections::BTreeSet<String> = ops
        .iter()
        .map(|(name, bytes)| {
            fuzzing::operation_decode(bytes);
            Operation::decode(bytes)
                .unwrap_or_else(|e| panic!("seed {name} does not decode: {e}"))
                .reason
        })
        .collect();
    for reason in [
        "create",
        "commit",
        "fork",
        "merge",
        "archive",
        "delete",
        "begin-run",
    ] {
        assert!(
            kinds.contains(reason),
            "no {reason} operation among the seeds"
        );
    }
    let golden = ops.iter().find(|(name, _)| name == "golden.op").unwrap();
    assert_eq!(
        golden.1,
        support::example_operation().encode(),
        "the golden operation seed is not the spec's example any more"
    );
    assert_eq!(
        ops.len(),
        real_operations().len() + 1,
        "rerun write_fuzz_seeds"
    );
    for (name, bytes) in committed_seeds("lineage_index") {
        fuzzing::lineage_index(&bytes);
        if name.starts_with("regress-") {
            // Findings kept so that the fuzzer starts from them; each has
            // its own test below.
            continue;
        }
        let ix = LineageIndex::from_bytes(name.clone().into(), bytes[1..].to_vec())
            .unwrap_or_else(|e| panic!("seed {name} does not open: {e}"));
        assert!(ix.len() >= 2, "{name}");
    }
    assert_eq!(
        fs::read(seed_dir("lineage_index").join("golden.lgi")).unwrap()[1..],
        golden_lineage_file()[..],
        "the golden lineage seed is not the spec's example any more"
    );
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn operation_decode_survives_random_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzzing::operation_decode(&data);
    }

    #[test]
    fn operation_decode_survives_mutated_operations(
        k in any::<Index>(),
        mutations in mutations(),
    ) {
        let ops = real_operations();
        let seed = &ops[k.index(ops.len())];
        fuzzing::operation_decode(&mutated(seed, &[], &mutations, &[]));
    }

    #[test]
    fn lineage_index_survives_random_bytes(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        fuzzing::lineage_index(&data);
    }

    /// Mutations behind a fixed-up checksum (selector 1) reach the checks
    /// of the body; without it (selector 0), the checksum's.
    #[test]
    fn lineage_index_survives_mutated_files(
        fix in any::<bool>(),
        golden in any::<bool>(),
        mutations in in_place_mutations(),
    ) {
        let file = if golden { golden_lineage_file() } else { real_lineage_file().to_vec() };
        let fields: Vec<usize> = (8..24).step_by(4).collect();
        let data = mutated(&file, &fields, &mutations, &[]);
        fuzzing::lineage_index(&[[u8::from(fix)].as_slice(), &data].concat());
    }
}
