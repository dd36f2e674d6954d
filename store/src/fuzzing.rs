//! Fuzzing entry points, one per on-disk format, shared by the cargo-fuzz
//! targets in `fuzz/` and the stable-toolchain tests in
//! `store/tests/fuzz_entry.rs`.
//!
//! Each takes arbitrary bytes and asserts the format's oracle: what decodes
//! re-encodes to exactly the same bytes, what a reader returns is
//! self-consistent, lookups over corrupt bytes stay in bounds. A panic out of
//! any of them, whether from an assertion here or from the code under test,
//! is a finding. Not a stable API: it exists for the fuzzers.

mod foreign;

pub use foreign::*;

use crate::hash::{ObjectId, Prefix, ID_LEN};
use crate::object::{object_id, Blob, EncodedObject, ObjectKind, Session};
use crate::odb::journal::{
    entries, parse_frame, parse_object_entry, FrameBuilder, ENTRY_OBJECT, FRAME_HEADER_LEN,
    OBJECT_ENTRY_FIXED, SEGMENT_HEADER_LEN, SEGMENT_MAGIC,
};
use crate::odb::pack::{parse_index, verify_index, IndexView, CHECKSUM_LEN};

/// Objects taken out of one input for the frame round trip, at most.
const MAX_ROUND_TRIP_OBJECTS: usize = 64;

/// The first byte picks the kind (even: blob, odd: session), the rest is the
/// payload. A payload that decodes must re-encode to exactly the same bytes
/// (the canonical encoding is a bijection); a blob's JSON value must also
/// survive JSON text and back to the same bytes.
pub fn object_decode(data: &[u8]) {
    let Some((&selector, payload)) = data.split_first() else {
        return;
    };
    if selector % 2 == 0 {
        let Ok(blob) = Blob::decode(payload) else {
            return;
        };
        let encoded = blob.encode();
        assert_eq!(
            encoded.payload(),
            payload,
            "a decoded blob re-encodes differently"
        );
        assert_eq!(encoded.id(), object_id(ObjectKind::Blob, payload));
        let rewrapped = Blob::new(blob.value().clone())
            .unwrap_or_else(|e| panic!("a decoded blob's value is refused: {e}"));
        assert_eq!(
            rewrapped.encode().payload(),
            payload,
            "the blob's value re-encodes differently"
        );
        let text = serde_json::to_string(blob.value()).expect("a JSON value always prints");
        let reparsed = Blob::from_json_str(&text)
            .unwrap_or_else(|e| panic!("a decoded blob prints as JSON it refuses ({e}): {text}"));
        assert_eq!(
            reparsed.encode().payload(),
            payload,
            "the blob changed through JSON text: {text}"
        );
    } else {
        let Ok(session) = Session::decode(payload) else {
            return;
        };
        let encoded = session
            .encode()
            .unwrap_or_else(|e| panic!("a decoded session does not encode: {e}"));
        assert_eq!(
            encoded.payload(),
            payload,
            "a decoded session re-encodes differently"
        );
        assert_eq!(encoded.id(), object_id(ObjectKind::Session, payload));
        assert_eq!(Session::decode(encoded.payload()).as_ref(), Ok(&session));
    }
}

/// Walks the input as a journal segment's frames (after the segment header,
/// if the input starts with one), stopping at the first error, and reads
/// every entry of every frame. Since a mutated body rarely keeps its
/// checksum, the whole input is also read as one frame body, the way
/// recovery reads a frame damaged in place. Whatever is returned must be
/// self-consistent; the objects found are then written with [`FrameBuilder`]
/// and must parse back unchanged.
pub fn journal_frames(data: &[u8]) {
    let mut found = Vec::new();
    // A whole segment file is welcome too: its header is skipped.
    let mut rest = match data.get(..SEGMENT_HEADER_LEN as usize) {
        Some(header) if header.starts_with(&SEGMENT_MAGIC) => &data[header.len()..],
        _ => data,
    };
    while !rest.is_empty() {
        let Ok(frame) = parse_frame(rest) else {
            break;
        };
        let len = frame.total_len();
        assert!(
            len <= rest.len(),
            "a frame of {len} bytes in {} bytes",
            rest.len()
        );
        assert!(std::ptr::eq(frame.body, &rest[FRAME_HEADER_LEN..len]));
        check_body(frame.body, &mut found);
        rest = &rest[len..];
    }
    check_body(data, &mut found);
    if found.is_empty() {
        // Still exercise the writer: the input as the payload of each kind.
        found.push(EncodedObject::new(ObjectKind::Blob, data.to_vec()));
        found.push(EncodedObject::new(ObjectKind::Session, data.to_vec()));
    }
    found.truncate(MAX_ROUND_TRIP_OBJECTS);
    frame_round_trip(&found);
}

/// Reads the entries of a frame body; pushes onto `found` the objects read
/// back verified, and, with a fresh id, the stored bytes of the others.
fn check_body(body: &[u8], found: &mut Vec<EncodedObject>) {
    for entry in entries(body) {
        let Ok(entry) = entry else {
            break;
        };
        let end = entry.offset + entry.payload.len();
        assert!(std::ptr::eq(entry.payload, &body[entry.offset..end]));
        if entry.entry_type != ENTRY_OBJECT {
            continue;
        }
        let Ok(object) = parse_object_entry(entry.payload) else {
            continue;
        };
        assert_eq!(OBJECT_ENTRY_FIXED + object.data.len(), entry.payload.len());
        match object.to_object() {
            Ok(read) => {
                assert_eq!(read.id(), object.id);
                assert_eq!(read.kind(), object.kind);
                assert_eq!(read.payload().len(), object.raw_len as usize);
                assert_eq!(read.id(), object_id(read.kind(), read.payload()));
                found.push(read);
            }
            Err(_) => found.push(EncodedObject::new(object.kind, object.data.to_vec())),
        }
    }
}

/// Writes `objects` as one frame and reads them back.
fn frame_round_trip(objects: &[EncodedObject]) {
    let mut builder = FrameBuilder::new();
    for object in objects {
        builder.push_object(object);
    }
    assert_eq!(builder.objects_len(), objects.len());
    let bytes = builder.finish();
    let frame = parse_frame(&bytes).unwrap_or_else(|e| panic!("a built frame does not parse: {e}"));
    assert_eq!(frame.total_len(), bytes.len());
    assert_eq!(frame.entry_count as usize, objects.len());
    let mut back = Vec::with_capacity(objects.len());
    for entry in entries(frame.body) {
        let entry = entry.unwrap_or_else(|e| panic!("a built frame has a bad entry: {e}"));
        assert_eq!(entry.entry_type, ENTRY_OBJECT);
        let object = parse_object_entry(entry.payload)
            .unwrap_or_else(|e| panic!("a built object entry does not parse: {e}"));
        let read = object
            .to_object()
            .unwrap_or_else(|e| panic!("a built object entry does not read back: {e}"));
        back.push(read);
    }
    assert!(back == objects, "a frame round trip changed its objects");
}

/// Parses the input as a pack index, verifies it, and looks things up in it
/// whether or not it verified: every position, ids taken from the input, the
/// smallest and largest ids, prefix scans. Nothing may panic or leave the
/// index's bounds; a returned position must hold the id asked for, a prefix
/// scan must return only matching ids. When the ids are in order (the
/// checksum aside), lookups must agree with a linear search.
pub fn pack_index(data: &[u8]) {
    let Ok(view) = IndexView::parse(data) else {
        assert!(parse_index(data).is_err());
        return;
    };
    let layout = parse_index(data).unwrap_or_else(|e| panic!("parse and view disagree: {e}"));
    let verified = view.verify();
    assert_eq!(verify_index(data, &layout), verified);
    let ordered = view.verify_order().is_ok();
    if verified.is_ok() {
        assert!(ordered);
    }
    let n = view.object_count();
    assert_eq!(view.ids().count(), n);
    assert_eq!(view.pack_checksum().len(), CHECKSUM_LEN);
    assert_eq!(view.id(n), None);
    assert_eq!(view.entry(n), None);
    assert_eq!(view.block_entry(u32::MAX), None);
    assert_eq!(view.block_dictionary(u32::MAX), None);
    // The dictionary table: every entry in bounds or absent, none past D;
    // a verified index's blocks name only dictionaries the table has.
    let dictionaries = view.dictionary_count();
    assert_eq!(view.dictionary_entry(dictionaries), None);
    for d in 0..dictionaries.min(1 << 16) {
        if let Some((_, _, sum)) = view.dictionary_entry(d) {
            assert_eq!(sum.len(), CHECKSUM_LEN);
        }
    }
    if let Ok(blocks) = u32::try_from(view.block_count()) {
        assert_eq!(view.block_entry(blocks), None);
        for b in 0..blocks {
            assert!(
                view.block_entry(b).is_some(),
                "block {b} of {blocks} is missing"
            );
            let d = view
                .block_dictionary(b)
                .unwrap_or_else(|| panic!("block {b} of {blocks} names no dictionary field"));
            if verified.is_ok() {
                assert!(
                    d as usize <= dictionaries,
                    "a verified index names dictionary {d}"
                );
            }
        }
    }
    for (i, id) in view.ids().enumerate() {
        assert_eq!(view.id(i), Some(id));
        let (block, _, _) = view
            .entry(i)
            .unwrap_or_else(|| panic!("entry {i} of {n} is missing"));
        let _ = view.block_entry(block);
        match view.position(&id) {
            Some(p) => assert_eq!(view.id(p), Some(id)),
            None => assert!(!ordered, "id at position {i} of an ordered index not found"),
        }
        if ordered {
            assert_eq!(view.position(&id), Some(i));
        }
    }

    let mut probes = vec![
        ObjectId::from_bytes([0; ID_LEN]),
        ObjectId::from_bytes([0xff; ID_LEN]),
    ];
    for at in [
        0,
        data.len() / 2,
        data.len().saturating_sub(2 * ID_LEN),
        data.len().saturating_sub(ID_LEN),
    ] {
        if let Some(id) = data.get(at..at + ID_LEN).and_then(ObjectId::from_slice) {
            probes.push(id);
        }
    }
    for i in [0, n / 2, n.saturating_sub(1)] {
        if let Some(id) = view.id(i) {
            let mut next = *id.as_bytes();
            next[ID_LEN - 1] ^= 1;
            probes.extend([id, ObjectId::from_bytes(next)]);
        }
    }
    for probe in &probes {
        let found = view.position(probe);
        if let Some(p) = found {
            assert_eq!(view.id(p).as_ref(), Some(probe));
        }
        if ordered {
            assert_eq!(found, view.ids().position(|id| id == *probe));
        }
        let hex = probe.to_hex();
        for digits in [4, 5, 12, 63, 64] {
            let prefix = Prefix::from_hex(&hex[..digits]).expect("hex digits of an id");
            let mut matches = Vec::new();
            view.ids_with_prefix(&prefix, &mut matches);
            assert!(matches.len() <= n);
            assert!(
                matches.iter().all(|id| prefix.matches(id)),
                "{prefix} scan strays"
            );
            if ordered {
                let expected: Vec<ObjectId> = view.ids().filter(|id| prefix.matches(id)).collect();
                assert_eq!(matches, expected, "{prefix} scan misses ids");
            }
        }
    }
}

/// An operation (objects-format.md, "Operations"). One that decodes is
/// canonical: it re-encodes to exactly the input, its hash is the hash of
/// the input's bytes, and its reflog entries carry its refs' moves with its
/// time, actor and reason, each entry's hash covering every field.
pub fn operation_decode(data: &[u8]) {
    use crate::refs::op::OP_FORMAT_VERSION;
    use crate::refs::Operation;
    let Ok(op) = Operation::decode(data) else {
        return;
    };
    assert_eq!(
        op.encode(),
        data,
        "a decoded operation re-encodes differently"
    );
    let mut h = blake3::Hasher::new();
    h.update(format!("op {OP_FORMAT_VERSION} {}\0", data.len()).as_bytes());
    h.update(data);
    assert_eq!(
        &op.hash(),
        h.finalize().as_bytes(),
        "the hash is not of the bytes"
    );
    assert_eq!(Operation::decode(&op.encode()).as_ref(), Ok(&op));
    let entries = op.reflog_entries();
    assert_eq!(entries.len(), op.refs.len());
    for (e, u) in entries.iter().zip(&op.refs) {
        assert_eq!(
            (&e.name, &e.old, &e.new, &e.prev),
            (&u.name, &u.old, &u.new, &u.prev)
        );
        assert_eq!((e.op, e.time), (op.seq, op.time));
        assert_eq!((&e.actor, &e.reason), (&op.actor, &op.reason));
        let mut other = e.clone();
        other.time = other.time.wrapping_add(1);
        assert_ne!(
            other.hash(),
            e.hash(),
            "a reflog entry's hash ignores its time"
        );
    }
}

/// An index table (objects-format.md, "Index tables"). The first byte is a
/// selector: odd, the table's trailing blake3 is recomputed first, so that
/// the checks `verify` makes behind the checksum are reached. Every read of
/// a table that opens stays in bounds; one that verifies answers as a linear
/// scan of its entries does: lookups, lower bounds, prefix scans both ways,
/// and its merge with itself.
pub fn index_table(data: &[u8]) {
    use crate::index::table::{merge, Table};
    let Some((&selector, file)) = data.split_first() else {
        return;
    };
    let mut bytes = file.to_vec();
    if selector % 2 == 1 {
        fix_trailing_checksum(&mut bytes);
    }
    let Ok(table) = Table::from_bytes(bytes) else {
        return;
    };
    let verified = table.verify().is_ok();
    let n = table.len();
    assert!(
        n as u64 * 8 <= table.file_len(),
        "more entries than the file holds"
    );
    let entries: Vec<_> = (0..n).map(|i| table.entry(i)).collect();
    assert!(table.entry(n).is_err());

    // Probes: slices of the input, and (a bounded number of) keys, their
    // prefixes and their successors.
    let mut probes: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0xff; 3]];
    for at in [0, 1, 7, 64, data.len() / 2, data.len().saturating_sub(6)] {
        probes.push(
            data.get(at..(at + 5).min(data.len()))
                .unwrap_or_default()
                .to_vec(),
        );
    }
    for (k, _) in entries.iter().take(64).flatten() {
        probes.push(k.to_vec());
        probes.push(k[..k.len() / 2].to_vec());
        probes.push([*k, &[0]].concat());
    }

    // A verified table's entries: what every answer must agree with.
    let all: Option<Vec<_>> = verified.then(|| {
        let read = entries
            .iter()
            .map(|e| e.clone().expect("a verified entry reads"));
        read.collect()
    });
    for p in &probes {
        let got = table.get(p);
        let lower = table.lower_bound(p);
        let forward: Vec<_> = table.prefix(p).into_iter().flatten().collect();
        let backward: Vec<_> = table.prefix(p).into_iter().flat_map(|r| r.rev()).collect();
        assert!(forward.len() <= n && backward.len() <= n);
        if let Ok(i) = lower {
            assert!(i <= n, "lower bound {i} past the end");
        }
        let Some(all) = &all else { continue };
        let want = all
            .iter()
            .find(|(k, _)| *k == p.as_slice())
            .map(|&(_, v)| v);
        assert_eq!(got.expect("a verified table answers"), want);
        let before = all.iter().filter(|(k, _)| *k < p.as_slice()).count();
        assert_eq!(lower.expect("a verified table answers"), before);
        let scan: Vec<_> = all
            .iter()
            .filter(|(k, _)| k.starts_with(p))
            .cloned()
            .collect();
        let forward: Vec<_> = forward
            .into_iter()
            .map(|e| e.expect("a verified entry reads"))
            .collect();
        let mut backward: Vec<_> = backward
            .into_iter()
            .map(|e| e.expect("a verified entry reads"))
            .collect();
        backward.reverse();
        assert_eq!(forward, scan);
        assert_eq!(backward, scan);
    }

    let merged: Vec<_> = merge(&[&table, &table], false).collect();
    let live = merge(&[&table], true).count();
    assert!(merged.len() <= n && live <= n);
    if let Some(all) = all {
        let merged: Vec<_> = merged
            .into_iter()
            .map(|e| e.expect("a verified merge reads"))
            .collect();
        assert_eq!(merged, all);
        assert_eq!(live, all.iter().filter(|(_, v)| v.is_some()).count());
    }
}

/// A lineage-index file (objects-format.md, "Lineage index"). The first
/// byte is a selector: odd, the file's trailing blake3 is recomputed first,
/// so that the checks behind the checksum are reached. A file that opens
/// (header, size and fan-out checked) answers within bounds whatever its
/// records hold: every accessor of every position, checked or not, returns
/// without panicking, and a walk down checked parents ends (each parent's
/// generation is smaller). A file that passes the whole check answers
/// consistently: ids sorted, each found at its position through the
/// fan-out, parents at valid positions with smaller generations,
/// generations as defined, every record's facts present; a lookup of an
/// id it lacks finds nothing.
pub fn lineage_index(data: &[u8]) {
    use crate::lineage_index::LineageIndex;
    let Some(bytes) = with_trailer(data) else {
        return;
    };
    let Ok(ix) = LineageIndex::from_bytes("fuzz.lgi".into(), bytes) else {
        return;
    };
    let n = ix.len();
    assert!(n < 1 << 31);
    // Unchecked: every answer in bounds, every error the file's.
    for pos in 0..n as u32 {
        if let Some(id) = ix.id(pos) {
            if let Err(e) = ix.lookup(&id) {
                assert!(ix.is_own_error(&e), "{e}");
            }
        }
        // Down first parents as a walk does: each step checks the record
        // and lowers the generation, so the walk ends within `n` steps.
        let mut at = pos;
        let mut steps = 0usize;
        loop {
            match ix.first_parent(at) {
                Ok(Some(p)) => {
                    assert!(
                        ix.generation(p) < ix.generation(at),
                        "a checked parent is not older"
                    );
                    at = p;
                    steps += 1;
                    assert!(steps <= n, "a walk down first parents does not end");
                }
                Ok(None) => break,
                Err(e) => {
                    assert!(ix.is_own_error(&e), "{e}");
                    break;
                }
            }
        }
        let _ = (
            ix.facts(pos),
            ix.conversation(pos),
            ix.created_at(pos),
            ix.messages(pos),
        );
    }
    if ix.check().is_err() {
        return;
    }
    // Records in generation order, then id order (version 2), or in id
    // order (version 1).
    let by_generation = ix.bytes()[4..8] != 1u32.to_le_bytes();
    let order = |pos: u32| {
        let g = if by_generation { ix.generation(pos) } else { 0 };
        (std::cmp::Reverse(g), ix.id(pos))
    };
    let mut previous: Option<ObjectId> = None;
    for pos in 0..n as u32 {
        let id = ix.id(pos).expect("every position has an id");
        assert!(
            pos == 0 || order(pos - 1) < order(pos),
            "records are not in order at {pos}"
        );
        previous = previous.max(Some(id));
        assert_eq!(ix.position(&id), Some(pos), "the fan-out misleads for {id}");
        assert_eq!(ix.lookup(&id).ok(), Some(Some(pos)));
        let parents: Vec<u32> = ix.parents(pos).expect("a checked record").collect();
        assert!(parents.len() <= n, "more parents than sessions at {pos}");
        let mut generation = 1;
        for &p in &parents {
            assert!((p as usize) < n, "parent {p} of {pos} is out of range");
            assert!(
                ix.generation(p) < ix.generation(pos),
                "a parent is not older at {pos}"
            );
            generation = generation.max(ix.generation(p) + 1);
        }
        assert_eq!(ix.generation(pos), generation, "generation of {pos}");
        assert_eq!(ix.first_parent(pos).ok(), Some(parents.first().copied()));
        let facts = ix
            .facts(pos)
            .expect("a checked record")
            .expect("every record has its facts");
        assert_eq!(facts.parents.len(), parents.len());
        assert_eq!(facts.created_at, ix.created_at(pos));
        assert_eq!(facts.messages, ix.messages(pos));
        assert_eq!(Some(facts.conversation), ix.conversation(pos));
    }
    assert_eq!(ix.id(n as u32), None);
    assert!(ix.parents(n as u32).is_err());
    let mut absent = previous.map_or([0u8; ID_LEN], |id| *id.as_bytes());
    absent[ID_LEN - 1] ^= 0x55;
    if let Some(p) = ix.position(&ObjectId::from_bytes(absent)) {
        assert_eq!(ix.id(p), Some(ObjectId::from_bytes(absent)));
    }
}

/// The file in a fuzz input whose first byte is a selector: odd, the
/// file's trailing checksum is recomputed ([`fix_trailing_checksum`]), so
/// that what lies behind it is reached. `None` for an empty input.
fn with_trailer(data: &[u8]) -> Option<Vec<u8>> {
    let (&selector, file) = data.split_first()?;
    let mut bytes = file.to_vec();
    if selector % 2 == 1 {
        fix_trailing_checksum(&mut bytes);
    }
    Some(bytes)
}

/// Recomputes the trailing 32-byte blake3 of everything before it, the
/// checksum lineage files and bundles end with (nothing for a shorter input).
pub fn fix_trailing_checksum(bytes: &mut [u8]) {
    if let Some(body) = bytes.len().checked_sub(32) {
        let sum = blake3::hash(&bytes[..body]);
        bytes[body..].copy_from_slice(sum.as_bytes());
    }
}
