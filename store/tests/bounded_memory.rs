//! Reading outside bytes costs memory in proportion to what is proven to be
//! there (objects-format.md, "Reading with bounded memory"): a zstd frame
//! that claims a gigabyte is hashed as it streams and refused in constant
//! memory; a real large object still reads back whole, from the journal and
//! from a pack. One test per process: it measures this process's peak RSS.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::Write;

use serde_json::Value;
use sessctl_store::hash::ObjectId;
use sessctl_store::odb::journal::{parse_object_entry, CODEC_ZSTD};
use sessctl_store::{Durability, ObjectKind, Odb, RepackOptions, WriteBatch};

/// This process's peak resident memory since the last reset, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Resets the peak to the current resident size (Linux: clear_refs 5).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

#[test]
fn bounded_reads_of_large_and_lying_objects() {
    // A journal entry whose zstd frame inflates to 1 GiB of zeros under a
    // made-up id: refused on its hash, never inflated into memory.
    let raw_len: usize = 1 << 30;
    let mut z = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    z.set_pledged_src_size(Some(raw_len as u64)).unwrap();
    z.include_contentsize(true).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..raw_len / zeros.len() {
        z.write_all(&zeros).unwrap();
    }
    let frame = z.finish().unwrap();
    let mut entry = vec![ObjectKind::Blob.code(), CODEC_ZSTD];
    entry.extend_from_slice(ObjectId::from_bytes([7; 32]).as_bytes());
    entry.extend_from_slice(&(raw_len as u32).to_le_bytes());
    entry.extend_from_slice(&frame);
    reset_peak();
    let before = peak_rss();
    let err = parse_object_entry(&entry).unwrap().to_object().unwrap_err();
    assert!(err.contains("not to its id"), "{err}");
    let grew = peak_rss().saturating_sub(before);
    assert!(grew < 32 << 20, "refusing the bomb took {} MiB", grew >> 20);

    // A real object past the streaming threshold (20 MiB of JSON) reads back
    // whole from the journal, and from a pack after a repack.
    let dir = tempfile::tempdir().unwrap();
    let odb = Odb::init(&dir.path().join("s")).unwrap();
    let big = Value::String("sessctl ".repeat(20 << 17));
    let mut batch = WriteBatch::new();
    let id = batch.blob(&big).unwrap();
    odb.write(&batch, Durability::Sync).unwrap();
    assert_eq!(odb.blob(&id).unwrap(), big);
    odb.repack(&RepackOptions::default()).unwrap();
    assert!(odb.stats().unwrap().packs > 0);
    assert_eq!(odb.blob(&id).unwrap(), big);
}
