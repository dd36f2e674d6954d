//! Pack format 2 (objects-format.md, "Packs" and "Pack index"): zstd
//! dictionaries. A golden store written by version 2, read back and
//! checked; a damaged dictionary named by fsck; gc carrying the
//! dictionaries of the blocks it copies; and a store of version-1 packs and
//! version-2 op-log files that still opens, reads, fscks, and turns into
//! version-2 packs when repacked or swept.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use sessctl_store::fsck::FsckOptions;
use sessctl_store::hash::IdSet;
use sessctl_store::odb::pack::{write_pack, IndexView, PackOptions};
use sessctl_store::{Durability, Odb, OpenOptions, RepackOptions, Store};
use support::{message, write_chain, Rng};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
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

/// The fixture's writer settings: small blocks and a small dictionary, so
/// that a small store holds several blocks naming one dictionary.
fn fixture_options() -> RepackOptions {
    RepackOptions {
        pack: PackOptions {
            block_target: 8 << 10,
            zstd_level: 3,
            dictionary_size: 2 << 10,
        },
    }
}

const FIXTURE_TURNS: usize = 24;
const FIXTURE_SEED: u64 = 17;

fn fixture() -> PathBuf {
    root().join("tests/fixtures/store-pack-v2")
}

/// Writes `tests/fixtures/store-pack-v2/`: a chain of 24 turns of 4
/// generated messages, repacked by the version-2 writer. Run by hand when
/// the fixture must be made again (it never should: it pins what version 2
/// wrote).
#[test]
#[ignore]
fn write_pack_v2_fixture() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let odb = Odb::init(&path).unwrap();
    write_chain(&odb, FIXTURE_SEED, FIXTURE_TURNS, 4, Durability::NoSync);
    odb.repack(&fixture_options()).unwrap();
    drop(odb);
    let out = fixture();
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(out.join("packs")).unwrap();
    fs::copy(path.join("FORMAT"), out.join("FORMAT")).unwrap();
    for entry in fs::read_dir(path.join("packs")).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_owned();
        if name.starts_with("pack-") {
            fs::copy(&p, out.join("packs").join(name)).unwrap();
        }
    }
}

fn pack_files(store: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for entry in fs::read_dir(store.join("packs")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "idx") {
            out.push((p.with_extension("pack"), p));
        }
    }
    out.sort();
    out
}

#[test]
fn the_version_2_fixture_reads_back_and_fscks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    copy_dir(&fixture(), &path);
    // git keeps no empty directory: the journal's comes here.
    fs::create_dir_all(path.join("journal")).unwrap();
    let packs = pack_files(&path);
    assert_eq!(packs.len(), 1);
    let (pack, idx) = &packs[0];
    let pack_bytes = fs::read(pack).unwrap();
    let idx_bytes = fs::read(idx).unwrap();
    assert_eq!(pack_bytes[4..8], 2u32.to_le_bytes());
    let view = IndexView::parse(&idx_bytes).unwrap();
    view.verify().unwrap();
    assert_eq!(view.layout().version, 2);
    assert_eq!(view.object_count(), FIXTURE_TURNS * 5);
    // One dictionary, named by every block, hashing to its checksum.
    assert_eq!(view.dictionary_count(), 1);
    assert!(view.block_count() > 4);
    for n in 0..view.block_count() as u32 {
        assert_eq!(view.block_dictionary(n), Some(1), "block {n}");
    }
    let (offset, len, sum) = view.dictionary_entry(0).unwrap();
    let dict = &pack_bytes[offset as usize..offset as usize + len as usize];
    assert_eq!(blake3::hash(dict).as_bytes()[..], *sum);

    // Every object reads back as the generator wrote it.
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    let mut rng = Rng::new(FIXTURE_SEED);
    let want: Vec<_> = (0..FIXTURE_TURNS * 4)
        .map(|i| message(&mut rng, i))
        .collect();
    let ids = odb.backend().ids().unwrap();
    assert_eq!(ids.len(), FIXTURE_TURNS * 5);
    let head = ids
        .iter()
        .copied()
        .find(|id| {
            odb.session(id)
                .is_ok_and(|s| s.messages.len() == want.len() as u64)
        })
        .unwrap();
    assert_eq!(odb.load_messages(&head).unwrap(), want);
    for id in &ids {
        odb.read(id).unwrap();
    }
    assert!(odb.backend().verify_storage().is_empty());
}

#[test]
fn fsck_names_a_damaged_dictionary_and_its_pack() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    copy_dir(&fixture(), &path);
    // git keeps no empty directory: the journal's comes here.
    fs::create_dir_all(path.join("journal")).unwrap();
    let (pack, idx) = pack_files(&path).remove(0);
    let idx_bytes = fs::read(&idx).unwrap();
    let (offset, len, _) = IndexView::parse(&idx_bytes)
        .unwrap()
        .dictionary_entry(0)
        .unwrap();
    let mut bytes = fs::read(&pack).unwrap();
    bytes[(offset + u64::from(len) / 2) as usize] ^= 0x20;
    fs::write(&pack, &bytes).unwrap();
    let name = pack.file_stem().unwrap().to_str().unwrap().to_owned();

    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    let problems = odb.backend().verify_storage();
    let damaged = format!("{name}: dictionary 0 is damaged (its checksum does not match)");
    assert!(problems.iter().any(|p| p == &damaged), "{problems:#?}");
    // Every read of a block that names it fails, naming it; none panics.
    for id in odb.backend().ids().unwrap() {
        let e = odb.read(&id).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        assert!(e.to_string().contains(&damaged), "{e}");
    }
}

/// gc merges two packs with different dictionaries, one of which loses an
/// object: the blocks of the pack that loses nothing are copied with their
/// dictionary; the other pack's blocks are all written again with that
/// dictionary, and its own dictionary (made of its records, the dropped
/// one's among them) is not carried into the new pack. Every object kept
/// still reads.
#[test]
fn a_sweep_carries_only_the_dictionaries_of_packs_that_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let odb = Odb::init(&path).unwrap();
    write_chain(&odb, 1, 24, 4, Durability::NoSync);
    odb.repack(&fixture_options()).unwrap();
    // A second pack, of other messages, with a dictionary of its own.
    let mut rng = Rng::new(99);
    let others: Vec<_> = (0..96)
        .map(|i| {
            sessctl_store::Blob::new(message(&mut rng, i))
                .unwrap()
                .encode()
        })
        .collect();
    write_pack(&path.join("packs"), &others, fixture_options().pack).unwrap();
    drop(odb);
    let odb = Odb::open(&path, &OpenOptions::default()).unwrap();
    let all = odb.backend().ids().unwrap();
    assert_eq!(odb.stats().unwrap().packs, 2);
    let second = pack_files(&path)
        .into_iter()
        .find(|(_, idx)| {
            let bytes = fs::read(idx).unwrap();
            let view = IndexView::parse(&bytes).unwrap();
            view.position(&others[0].id()).is_some()
        })
        .unwrap();
    let second_dictionary = {
        let idx = fs::read(&second.1).unwrap();
        let (offset, len, _) = IndexView::parse(&idx).unwrap().dictionary_entry(0).unwrap();
        fs::read(&second.0).unwrap()[offset as usize..][..len as usize].to_vec()
    };
    // One object of the second pack goes.
    let doomed: IdSet = [others[5].id()].into_iter().collect();
    let stats = odb
        .backend()
        .sweep(&fixture_options(), &doomed, None)
        .unwrap();
    assert!(stats.copied_blocks > 4, "{stats:?}");
    let packs = pack_files(&path);
    assert_eq!(packs.len(), 1);
    let idx = fs::read(&packs[0].1).unwrap();
    let view = IndexView::parse(&idx).unwrap();
    view.verify().unwrap();
    assert_eq!(view.dictionary_count(), 1);
    let new_pack = fs::read(&packs[0].0).unwrap();
    assert!(!new_pack
        .windows(second_dictionary.len())
        .any(|w| w == second_dictionary.as_slice()));
    for id in &all {
        if doomed.contains(id) {
            assert!(odb.read(id).is_err());
        } else {
            odb.read(id).unwrap();
        }
    }
    assert!(odb.backend().verify_storage().is_empty());
}

/// `tests/fixtures/store-import-blobs/` holds a version-1 pack, a
/// version-2 op-log file and a version-1 index table: it opens, reads and
/// fscks as it is; a repack writes a version-2 pack, and its history and
/// answers stay.
#[test]
fn a_store_of_version_1_packs_and_version_2_ops_still_reads_and_is_repacked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    copy_dir(&root().join("tests/fixtures/store-import-blobs"), &path);
    let (pack, _) = pack_files(&path).remove(0);
    assert_eq!(fs::read(&pack).unwrap()[4..8], 1u32.to_le_bytes());
    let ops = fs::read_dir(path.join("oplog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();
    assert_eq!(fs::read(&ops).unwrap()[4..8], 2u32.to_le_bytes());

    let check = |store: &Store| {
        let report = store.fsck(&FsckOptions::default(), &mut |_, _| {}).unwrap();
        assert!(report.is_clean(), "{:#?}", report.problems);
        let odb = store.odb();
        for id in odb.backend().ids().unwrap() {
            odb.read(&id).unwrap();
        }
        (report.objects, store.reflog_entries().unwrap().len())
    };
    let format = || fs::read_to_string(path.join("FORMAT")).unwrap();
    let old_format = format();
    assert_ne!(old_format, "sessctl store format 4\n");
    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    let before = check(&store);
    assert!(before.0 > 0 && before.1 > 0);
    // Reading changes nothing on disk.
    assert_eq!(format(), old_format);

    store.repack(&RepackOptions::default()).unwrap();
    // The first version-2 pack raised the store's format: an older sessctl
    // refuses it as newer.
    assert_eq!(format(), "sessctl store format 4\n");
    let packs = pack_files(&path);
    assert_eq!(packs.len(), 1);
    assert_eq!(fs::read(&packs[0].0).unwrap()[4..8], 2u32.to_le_bytes());
    // The old op-log file is still read: the same history.
    assert!(ops.exists());
    assert_eq!(check(&store), before);
    drop(store);
    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    assert_eq!(check(&store), before);
}
