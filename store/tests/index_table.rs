//! Index tables (`store/src/index/table.rs`, objects-format.md "Index
//! tables"): round trips, the file on disk, a model check against
//! `BTreeMap` for lookups, prefix scans and merges, hostile bytes, and the
//! spec's golden example.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/mutation.rs"]
mod mutation;
mod support;
use sessctl_store::index::table;

use std::collections::BTreeMap;
use std::fs;

use mutation::{apply_edit, config, edit, overwrite, Edit};
use proptest::prelude::*;
use proptest::sample::Index;
use table::{
    encode_table, merge, parse_table_file_name, table_file_name, write_table_file, Entry, Table,
    TableMeta, TABLE_HEADER_LEN,
};

type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

fn meta(first: u64, last: u64) -> TableMeta {
    TableMeta {
        first,
        last,
        last_hash: if last == 0 { [0; 32] } else { [7; 32] },
    }
}

fn encode(meta: &TableMeta, model: &Model) -> Vec<u8> {
    encode_table(
        meta,
        model.iter().map(|(k, v)| (k.as_slice(), v.as_deref())),
    )
    .unwrap()
}

fn owned(e: Entry<'_>) -> (Vec<u8>, Option<Vec<u8>>) {
    (e.0.to_vec(), e.1.map(<[u8]>::to_vec))
}

fn scan(t: &Table, prefix: &[u8], reverse: bool) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let range = t.prefix(prefix).unwrap();
    let items: Vec<_> = if reverse {
        range.rev().collect()
    } else {
        range.collect()
    };
    items.into_iter().map(|e| owned(e.unwrap())).collect()
}

fn model_scan(m: &Model, prefix: &[u8], reverse: bool) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut v: Vec<_> = m
        .range(prefix.to_vec()..)
        .take_while(|(k, _)| k.starts_with(prefix))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if reverse {
        v.reverse();
    }
    v
}

fn sample() -> Model {
    let mut m = Model::new();
    for (k, v) in [
        (&b"a:1"[..], Some(&b"one"[..])),
        (b"c:fix", Some(b"")),
        (b"c:fix-2", None),
        (b"c:fiz", Some(b"z")),
        (b"r:refs/heads/main", Some(b"\x01\x02")),
        (b"s:\xff", Some(b"x")),
        (b"\x00", Some(b"low")),
        (b"\xff\xff", Some(b"high")),
    ] {
        m.insert(k.to_vec(), v.map(<[u8]>::to_vec));
    }
    m
}

#[test]
fn a_table_round_trips_through_its_bytes() {
    let m = sample();
    let bytes = encode(&meta(1, 9), &m);
    let t = Table::from_bytes(bytes.clone()).unwrap();
    t.verify().unwrap();
    assert_eq!(
        (t.len(), t.is_empty(), t.file_len()),
        (8, false, bytes.len() as u64)
    );
    assert_eq!(*t.meta(), meta(1, 9));
    for (i, (k, v)) in m.iter().enumerate() {
        assert_eq!(t.get(k).unwrap(), Some(v.as_deref()));
        assert_eq!(owned(t.entry(i).unwrap()), (k.clone(), v.clone()));
    }
    assert_eq!(t.get(b"c:fix-2").unwrap(), Some(None), "a tombstone");
    for absent in [
        &b""[..],
        b"\x00\x00",
        b"a",
        b"c:fi",
        b"c:fix-",
        b"zz",
        b"\xff",
        b"\xff\xff\xff",
    ] {
        assert_eq!(t.get(absent).unwrap(), None, "{absent:?}");
    }
    assert!(t.entry(8).is_err());

    let keys = |v: Vec<(Vec<u8>, Option<Vec<u8>>)>| v.into_iter().map(|e| e.0).collect::<Vec<_>>();
    assert_eq!(
        keys(scan(&t, b"c:fi", false)),
        [&b"c:fix"[..], b"c:fix-2", b"c:fiz"]
    );
    assert_eq!(
        keys(scan(&t, b"c:fi", true)),
        [&b"c:fiz"[..], b"c:fix-2", b"c:fix"]
    );
    assert_eq!(keys(scan(&t, b"c:fix", false)), [&b"c:fix"[..], b"c:fix-2"]);
    assert_eq!(scan(&t, b"", false).len(), 8);
    assert_eq!(keys(scan(&t, b"", true))[0], b"\xff\xff");
    assert!(scan(&t, b"b", false).is_empty());
    assert!(scan(&t, b"\xff\xff\xff", true).is_empty());
    let mut both = t.prefix(b"c:").unwrap();
    assert_eq!(both.next().unwrap().unwrap().0, b"c:fix");
    assert_eq!(both.next_back().unwrap().unwrap().0, b"c:fiz");
    assert_eq!(both.next().unwrap().unwrap().0, b"c:fix-2");
    assert!(both.next_back().is_none() && both.next().is_none());

    assert_eq!(t.lower_bound(b"").unwrap(), 0);
    assert_eq!(t.lower_bound(b"\x00").unwrap(), 0);
    assert_eq!(t.lower_bound(b"\x00\x00").unwrap(), 1);
    assert_eq!(t.lower_bound(b"c:fix-").unwrap(), 3);
    assert_eq!(t.lower_bound(b"b").unwrap(), 2);
    assert_eq!(t.lower_bound(b"\xff\xff").unwrap(), 7);
    assert_eq!(t.lower_bound(b"\xff\xff\x00").unwrap(), 8);

    let empty = Table::from_bytes(encode(&meta(1, 0), &Model::new())).unwrap();
    empty.verify().unwrap();
    assert_eq!((empty.len(), empty.is_empty()), (0, true));
    assert_eq!(empty.file_len(), (TABLE_HEADER_LEN + 32) as u64);
    assert_eq!(empty.get(b"a").unwrap(), None);
    assert_eq!(empty.lower_bound(b"a").unwrap(), 0);
    assert_eq!(empty.lower_bound(b"").unwrap(), 0);
    assert_eq!(empty.prefix(b"").unwrap().count(), 0);
}

#[test]
fn encoding_refuses_what_the_format_cannot_hold() {
    let ok = meta(1, 1);
    let enc = |m: &TableMeta, e: &[Entry<'_>]| encode_table(m, e.iter().copied());
    let long = vec![b'k'; 65_536];
    for (what, entries) in [
        ("out of order", vec![(&b"b"[..], None), (b"a", None)]),
        ("duplicate", vec![(&b"a"[..], None), (b"a", Some(&b""[..]))]),
        ("empty key", vec![(&b""[..], None)]),
        ("key too long", vec![(long.as_slice(), None)]),
    ] {
        assert!(enc(&ok, &entries).is_err(), "{what}");
    }
    assert!(enc(&ok, &[(&long[..65_535], None)]).is_ok());
    for bad in [
        meta(0, 0),
        meta(3, 1),
        TableMeta {
            first: 1,
            last: 0,
            last_hash: [1; 32],
        },
    ] {
        let err = enc(&bad, &[]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot encode an index table: "),
            "{err}"
        );
    }
    // A table may cover no operation; past operation 0 it still names the
    // hash of the one before it.
    assert_eq!(meta(5, 4).last_hash, [7; 32]);
    assert!(enc(&meta(5, 4), &[]).is_ok());
    assert!(enc(&meta(1, 0), &[]).is_ok());
}

#[test]
fn a_written_table_opens_through_mmap_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let m = sample();
    let meta = meta(3, 17);
    let bytes = encode(&meta, &m);
    let path = write_table_file(dir.path(), &meta, &bytes).unwrap();
    assert_eq!(
        path,
        dir.path().join("0000000000000003-0000000000000017.sit")
    );
    let names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        [path.file_name().unwrap()],
        "no temporary file is left"
    );
    assert_eq!(fs::read(&path).unwrap(), bytes);

    let t = Table::open(&path).unwrap();
    t.verify().unwrap();
    assert_eq!(
        (*t.meta(), t.len(), t.file_len()),
        (meta, 8, bytes.len() as u64)
    );
    assert_eq!(t.path(), Some(path.as_path()));
    assert_eq!(
        t.get(b"r:refs/heads/main").unwrap(),
        Some(Some(&b"\x01\x02"[..]))
    );
    assert!(format!("{t:?}").contains("0000000000000003-0000000000000017.sit"));

    // Bytes that are not the meta's table, or do not verify, are not written.
    assert!(write_table_file(dir.path(), &self::meta(4, 17), &bytes).is_err());
    let mut damaged = bytes.clone();
    let last = damaged.len() - 40;
    damaged[last] ^= 1;
    let err = write_table_file(dir.path(), &meta, &damaged).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    assert_eq!(fs::read(&path).unwrap(), bytes);

    // A table replaced under a reader: the reader keeps the bytes it mapped.
    let mut newer = m.clone();
    newer.insert(b"c:new".to_vec(), Some(b"n".to_vec()));
    write_table_file(dir.path(), &meta, &encode(&meta, &newer)).unwrap();
    assert_eq!(t.get(b"c:new").unwrap(), None);
    t.verify().unwrap();
    assert_eq!(
        Table::open(&path).unwrap().get(b"c:new").unwrap(),
        Some(Some(&b"n"[..]))
    );
    write_table_file(dir.path(), &meta, &bytes).unwrap();

    // A rename that fails (the name is taken by a directory) leaves no
    // temporary file behind.
    let blocked = self::meta(40, 41);
    let blocker = dir.path().join(table_file_name(&blocked));
    fs::create_dir(&blocker).unwrap();
    fs::write(blocker.join("x"), b"x").unwrap();
    let err = write_table_file(dir.path(), &blocked, &encode(&blocked, &m)).unwrap_err();
    assert!(
        err.to_string().contains("cannot rename into place"),
        "{err}"
    );
    let mut names: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [path.file_name().unwrap(), blocker.file_name().unwrap()]
    );
    fs::remove_dir_all(&blocker).unwrap();

    // Errors on open name the file.
    fs::write(dir.path().join("short.sit"), b"SITB").unwrap();
    let err = Table::open(&dir.path().join("short.sit"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("short.sit") && err.contains("shorter"),
        "{err}"
    );
    let err = Table::open(&dir.path().join("missing.sit"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing.sit"), "{err}");
    fs::write(&path, &damaged).unwrap();
    let err = Table::open(&path)
        .unwrap()
        .verify()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&*path.to_string_lossy()) && err.contains("checksum"),
        "{err}"
    );
}

#[test]
fn file_names_round_trip_and_nothing_else_parses() {
    for (first, last) in [
        (1, 0),
        (1, 2),
        (42, 9_999),
        (9_999_999_999_999_999, 9_999_999_999_999_999),
    ] {
        let name = table_file_name(&meta(first, last));
        assert_eq!(name.len(), 37);
        assert_eq!(parse_table_file_name(&name), Some((first, last)));
    }
    assert_eq!(
        table_file_name(&meta(1, 2)),
        "0000000000000001-0000000000000002.sit"
    );
    for bad in [
        "",
        "0000000000000001-0000000000000002",
        "0000000000000001-0000000000000002.sit.tmp",
        ".tmp-1-0-0000000000000001-0000000000000002.sit",
        "000000000000001-0000000000000002.sit",
        "00000000000000001-000000000000002.sit",
        "0000000000000001_0000000000000002.sit",
        "000000000000000+-0000000000000002.sit",
        "0000000000000001-000000000000000a.sit",
        "0000000000000001-0000000000000002.SIT",
        "0000000000000001-0000000000000002.sot",
        "０000000000000001-0000000000000002.sit",
    ] {
        assert_eq!(parse_table_file_name(bad), None, "{bad:?}");
    }
}

/// The header field `at` set to `v`, the checksum fixed up.
fn with_field(bytes: &[u8], at: usize, v: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at..at + v.len()].copy_from_slice(v);
    fix_checksum(&mut b);
    b
}

fn fix_checksum(b: &mut [u8]) {
    if b.len() >= 32 {
        let end = b.len() - 32;
        let sum = *blake3::hash(&b[..end]).as_bytes();
        b[end..].copy_from_slice(&sum);
    }
}

fn open_error(b: Vec<u8>) -> String {
    Table::from_bytes(b).unwrap_err().to_string()
}

#[test]
fn hostile_headers_and_records_are_errors() {
    let bytes = encode(&meta(1, 9), &sample());
    let heap = TABLE_HEADER_LEN + 8 * 8;

    let err = open_error(with_field(&bytes, 56, &(1u64 << 60).to_le_bytes()));
    assert!(
        err.contains("bytes long, but 1152921504606846976 entries"),
        "{err}"
    );
    let err = open_error(with_field(&bytes, 56, &u64::MAX.to_le_bytes()));
    assert!(err.contains("more than 2^64"), "{err}");
    let err = open_error(with_field(&bytes, 64, &u64::MAX.to_le_bytes()));
    assert!(err.contains("more than 2^64"), "{err}");
    let err = open_error(with_field(
        &bytes,
        72 + 4 * b'a' as usize,
        &9u32.to_le_bytes(),
    ));
    assert!(
        err.contains("fan-out entry 98 (2) is below entry 97 (9)"),
        "{err}"
    );
    let err = open_error(with_field(&bytes, 72 + 4 * 255, &7u32.to_le_bytes()));
    assert!(err.contains("fan-out ends at 7"), "{err}");
    assert!(open_error(with_field(&bytes, 0, b"SIDX")).contains("bad magic"));
    assert!(open_error(with_field(&bytes, 4, &3u32.to_le_bytes())).contains("format version 3"));
    assert!(open_error(with_field(&bytes, 4, &0u32.to_le_bytes())).contains("format version 0"));
    assert!(open_error(with_field(&bytes, 8, &0u64.to_le_bytes()))
        .contains("operations 0 to 9: that needs 1 <= first <= last + 1"));
    assert!(open_error(with_field(&bytes, 8, &11u64.to_le_bytes())).contains("operations 11 to 9"));
    assert!(open_error(bytes[..bytes.len() - 1].to_vec()).contains("bytes long"));
    assert!(open_error(with_field(&bytes, 16, &0u64.to_le_bytes())).contains("operation 0"));
    assert!(open_error(Vec::new()).contains("shorter"));

    // Entry 0 (`\0`) claims a key running past the heap.
    let b = with_field(&bytes, heap, &60_000u32.to_le_bytes());
    let t = Table::from_bytes(b).unwrap();
    let err = t.get(b"\x00").unwrap_err().to_string();
    assert!(
        err.contains("entry 0 ends at") && err.contains("past the heap"),
        "{err}"
    );
    assert!(t.verify().is_err());
    assert!(t.entry(0).is_err() && t.entry(1).is_ok());
    let mut all = merge(&[&t], false);
    assert!(all.next().unwrap().is_err());
    assert!(all.next().is_none(), "a merge ends after an error");
    let mut scan = t.prefix(b"").unwrap();
    assert!(scan.next().unwrap().is_err());
    assert!(scan.next().is_none(), "a scan ends after an error");

    for (at, v, what) in [
        (heap, 0u32, "key length 0"),
        (heap + 4, 1 << 31, "value length 2147483648"),
    ] {
        let t = Table::from_bytes(with_field(&bytes, at, &v.to_le_bytes())).unwrap();
        assert!(t.entry(0).unwrap_err().to_string().contains(what));
    }
    let t = Table::from_bytes(with_field(
        &bytes,
        TABLE_HEADER_LEN,
        &u64::MAX.to_le_bytes(),
    ))
    .unwrap();
    assert!(t
        .entry(0)
        .unwrap_err()
        .to_string()
        .contains("past the heap"));
    // Records that overlap, or keys out of order, are found by verify.
    let t = Table::from_bytes(with_field(
        &bytes,
        TABLE_HEADER_LEN + 8,
        &0u64.to_le_bytes(),
    ))
    .unwrap();
    assert!(t.entry(1).is_ok());
    assert!(t
        .verify()
        .unwrap_err()
        .to_string()
        .contains("entry 1 starts at 0, not at"));
    let mut swapped = bytes.clone();
    let at = swapped.windows(5).position(|w| w == b"c:fiz").unwrap();
    swapped[at + 4] = b'a';
    fix_checksum(&mut swapped);
    let t = Table::from_bytes(swapped).unwrap();
    assert!(t
        .verify()
        .unwrap_err()
        .to_string()
        .contains("entry 4's key is not after entry 3's"));
    assert!(
        merge(&[&t], false).any(|e| e.is_err()),
        "the merge checks the order too"
    );
}

#[test]
fn merge_takes_the_newest_entry_and_drops_tombstones_on_request() {
    let build = |entries: &[(&str, Option<&str>)]| {
        let m: Model = entries
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect();
        Table::from_bytes(encode(&meta(1, 1), &m)).unwrap()
    };
    let newer = build(&[("a", Some("2")), ("b", None), ("d", Some("4"))]);
    let older = build(&[
        ("a", Some("1")),
        ("b", Some("1")),
        ("c", Some("1")),
        ("e", None),
    ]);
    let merged = |drop| -> Vec<(String, Option<String>)> {
        merge(&[&newer, &older], drop)
            .map(|e| {
                let (k, v) = e.unwrap();
                (
                    String::from_utf8(k.to_vec()).unwrap(),
                    v.map(|v| String::from_utf8(v.to_vec()).unwrap()),
                )
            })
            .collect()
    };
    let s = |k: &str, v: Option<&str>| (k.to_string(), v.map(str::to_string));
    assert_eq!(
        merged(false),
        [
            s("a", Some("2")),
            s("b", None),
            s("c", Some("1")),
            s("d", Some("4")),
            s("e", None)
        ]
    );
    assert_eq!(
        merged(true),
        [s("a", Some("2")), s("c", Some("1")), s("d", Some("4"))]
    );
    assert_eq!(merge(&[], false).count(), 0);
}

fn golden() -> Vec<u8> {
    let meta = TableMeta {
        first: 1,
        last: 2,
        last_hash: [0xab; 32],
    };
    let r_value = [&[1u8][..], &[0x11; 32]].concat();
    let s_key = [&b"s:"[..], &[0x22; 32]].concat();
    let t_key = [&b"t:"[..], &[0x11; 32], b"refs/heads/greeting"].concat();
    let entries: [Entry<'_>; 4] = [
        (b"c:greeting", Some(b"\x01\x02")),
        (b"r:refs/heads/greeting", Some(&r_value)),
        (&s_key, None),
        (&t_key, Some(b"")),
    ];
    encode_table(&meta, entries).unwrap()
}

const GOLDEN_LEN: usize = 1345;
const GOLDEN_CHECKSUM: &str = "f4a9d8b1ba18c7eeda41a4256cd66027e1ae0a428290683f1ff5467a7b3ab9f7";
const GOLDEN_DUMP: &str = "\
00000000  53 49 54 42 02 00 00 00 01 00 00 00 00 00 00 00  |SITB............|
00000010  02 00 00 00 00 00 00 00 ab ab ab ab ab ab ab ab  |................|
00000020  ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab  |................|
00000030  ab ab ab ab ab ab ab ab 04 00 00 00 00 00 00 00  |................|
00000040  b9 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  |................|
00000050  00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  |................|
*
000001d0  00 00 00 00 01 00 00 00 01 00 00 00 01 00 00 00  |................|
000001e0  01 00 00 00 01 00 00 00 01 00 00 00 01 00 00 00  |................|
*
00000210  02 00 00 00 03 00 00 00 04 00 00 00 04 00 00 00  |................|
00000220  04 00 00 00 04 00 00 00 04 00 00 00 04 00 00 00  |................|
*
00000440  04 00 00 00 04 00 00 00 00 00 00 00 00 00 00 00  |................|
00000450  14 00 00 00 00 00 00 00 52 00 00 00 00 00 00 00  |........R.......|
00000460  7c 00 00 00 00 00 00 00 0a 00 00 00 02 00 00 00  ||...............|
00000470  63 3a 67 72 65 65 74 69 6e 67 01 02 15 00 00 00  |c:greeting......|
00000480  21 00 00 00 72 3a 72 65 66 73 2f 68 65 61 64 73  |!...r:refs/heads|
00000490  2f 67 72 65 65 74 69 6e 67 01 11 11 11 11 11 11  |/greeting.......|
000004a0  11 11 11 11 11 11 11 11 11 11 11 11 11 11 11 11  |................|
000004b0  11 11 11 11 11 11 11 11 11 11 22 00 00 00 ff ff  |..........\".....|
000004c0  ff ff 73 3a 22 22 22 22 22 22 22 22 22 22 22 22  |..s:\"\"\"\"\"\"\"\"\"\"\"\"|
000004d0  22 22 22 22 22 22 22 22 22 22 22 22 22 22 22 22  |\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"|
000004e0  22 22 22 22 35 00 00 00 00 00 00 00 74 3a 11 11  |\"\"\"\"5.......t:..|
000004f0  11 11 11 11 11 11 11 11 11 11 11 11 11 11 11 11  |................|
00000500  11 11 11 11 11 11 11 11 11 11 11 11 11 11 72 65  |..............re|
00000510  66 73 2f 68 65 61 64 73 2f 67 72 65 65 74 69 6e  |fs/heads/greetin|
00000520  67 f4 a9 d8 b1 ba 18 c7 ee da 41 a4 25 6c d6 60  |g.........A.%l.`|
00000530  27 e1 ae 0a 42 82 90 68 3f 1f f5 46 7a 7b 3a b9  |'...B..h?..Fz{:.|
00000540  f7                                               |.|
00000541
";

/// The spec's example, byte for byte; a format change must update it, the
/// spec and `INDEX_FORMAT_VERSION` together.
#[test]
fn the_golden_table_has_not_changed() {
    let bytes = golden();
    let sum: String = bytes[bytes.len() - 32..]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let dump = support::dump_squeezed(&bytes);
    println!("{} bytes, checksum {sum}\n{dump}", bytes.len());
    assert_eq!(bytes.len(), GOLDEN_LEN);
    assert_eq!(sum, GOLDEN_CHECKSUM);
    assert_eq!(dump, GOLDEN_DUMP);
    let t = Table::from_bytes(bytes).unwrap();
    t.verify().unwrap();
    assert_eq!(t.get(b"s:").unwrap(), None);
    assert_eq!(t.prefix(b"s:").unwrap().next().unwrap().unwrap().1, None);

    // The spec shows the same bytes.
    let spec_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../objects-format.md");
    let spec = fs::read_to_string(spec_path).unwrap();
    assert!(
        spec.contains(GOLDEN_DUMP),
        "objects-format.md lacks:\n{GOLDEN_DUMP}"
    );
    assert!(spec.contains(GOLDEN_CHECKSUM) && spec.contains("1345 bytes"));
}

/// The fuzz target's committed seeds (`fuzz/seeds/index_table/`, a
/// selector byte then a table): the golden table as written, a table of
/// every kind of key, and the golden table cut short.
#[test]
fn the_fuzz_seeds_are_the_tables_they_claim_to_be() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/index_table");
    let seed = |name: &str| fs::read(format!("{dir}/{name}")).unwrap();
    assert_eq!(seed("golden.sit"), [&[0u8][..], &golden()].concat());
    // Written before version 2 (no `t:` keys): a version-1 table still reads.
    let kinds = Table::from_bytes(seed("kinds.sit")[1..].to_vec()).unwrap();
    kinds.verify().unwrap();
    assert_eq!(
        kinds.version(),
        sessctl_store::index::table::INDEX_FORMAT_V1
    );
    assert_eq!(kinds.meta().first, 3);
    for kind in b"acihlrsu" {
        assert_eq!(kinds.prefix(&[*kind, b':']).unwrap().count(), 3);
    }
    // Selector 1: the fuzzer recomputes its checksum; it still fails the
    // header's size check.
    let truncated = seed("truncated.sit");
    assert_eq!(truncated[0], 1);
    assert!(golden().starts_with(&truncated[1..]) && truncated.len() < golden().len());
    let mut cut = truncated[1..].to_vec();
    fix_checksum(&mut cut);
    assert!(open_error(cut).contains("bytes long, but 4 entries"));
    // Each seed replays through the fuzz target's oracle, as CI runs it.
    for name in ["golden.sit", "kinds.sit", "truncated.sit"] {
        sessctl_store::fuzzing::index_table(&seed(name));
    }
}

/// Keys that share first bytes and prefixes often: a first byte from a
/// few (0x00 and 0xff among them), then up to 5 bytes from a small
/// alphabet, or anything.
fn key() -> impl Strategy<Value = Vec<u8>> {
    let first = prop_oneof![Just(0u8), Just(0xff), Just(b'c'), Just(b's'), any::<u8>()];
    let rest = prop_oneof![
        3 => prop::collection::vec(prop_oneof![Just(0u8), Just(b'a'), Just(b'b'), Just(0xff)], 0..5),
        1 => prop::collection::vec(any::<u8>(), 0..8),
    ];
    (first, rest).prop_map(|(f, r)| [vec![f], r].concat())
}

fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(Vec::new())),
        2 => prop::collection::vec(any::<u8>(), 1..12).prop_map(Some),
    ]
}

fn model() -> impl Strategy<Value = Model> {
    prop::collection::btree_map(key(), value(), 0..48)
}

/// Probes: keys of the model, their prefixes and extensions, and others.
fn probes(m: &Model, extra: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut p: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0xff], vec![0xff, 0xff, 0xff]];
    for k in m.keys() {
        p.push(k.clone());
        p.push(k[..k.len() - 1].to_vec());
        p.push(k[..k.len().div_ceil(2)].to_vec());
        p.push([k.as_slice(), &[0]].concat());
    }
    p.extend_from_slice(extra);
    p
}

/// Everything a reader can do with the table, which must never panic;
/// with `oracle`, that the answers agree with a linear scan of its entries.
fn exercise(t: &Table, keys: &[Vec<u8>], oracle: bool) {
    let entries: Vec<_> = (0..t.len()).map(|i| t.entry(i)).collect();
    for k in keys {
        let got = t.get(k);
        let lb = t.lower_bound(k);
        let fwd: Vec<_> = t.prefix(k).into_iter().flatten().collect();
        let rev: Vec<_> = t
            .prefix(k)
            .into_iter()
            .flat_map(Iterator::rev)
            .take(3)
            .collect();
        if oracle {
            let entries: Vec<_> = entries.iter().map(|e| e.clone().unwrap()).collect();
            let want = entries.iter().find(|e| e.0 == k.as_slice()).map(|e| e.1);
            assert_eq!(got.unwrap(), want);
            assert_eq!(
                lb.unwrap(),
                entries.iter().filter(|e| e.0 < k.as_slice()).count()
            );
            let linear: Vec<_> = entries
                .iter()
                .filter(|e| e.0.starts_with(k))
                .cloned()
                .collect();
            assert_eq!(
                fwd.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
                linear
            );
            let rev: Vec<_> = rev.into_iter().map(Result::unwrap).collect();
            assert_eq!(
                rev,
                linear.iter().rev().take(3).cloned().collect::<Vec<_>>()
            );
        }
    }
    let merged: Vec<_> = merge(&[t, t], false).collect();
    let _ = merge(&[t], true).count();
    if oracle {
        let entries: Vec<_> = entries.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            merged.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
            entries
        );
    }
}

/// Byte edits, and numbers of the table set to large values: most edits
/// keep the length, which the header check compares first.
#[derive(Debug, Clone)]
enum Mutation {
    Edit(Edit),
    SetByte(Index, u8),
    /// A field: of the header (with the fan-out) or of the records (offsets,
    /// lengths); a new value; whether a u64 field gets all 8 bytes.
    Field(bool, Index, u64, bool),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let large = || {
        prop_oneof![
            Just(u64::MAX),
            Just(1 << 60),
            Just(1 << 31),
            Just(u64::from(u32::MAX)),
            Just(65_536),
            0u64..64,
            any::<u64>()
        ]
    };
    prop_oneof![
        1 => edit().prop_map(Mutation::Edit),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, v)| Mutation::SetByte(i, v)),
        1 => (any::<Index>(), large(), any::<bool>()).prop_map(|(i, v, w)| Mutation::Field(true, i, v, w)),
        4 => (any::<Index>(), large(), any::<bool>()).prop_map(|(i, v, w)| Mutation::Field(false, i, v, w)),
    ]
}

/// Positions of numbers in a table, each with whether it is a u64.
type Fields = Vec<(usize, bool)>;

/// Where a table of `m` holds numbers, and whether each is a u64: the
/// header's and the fan-out's; the offsets' and the records' lengths.
fn fields(m: &Model) -> (Fields, Fields) {
    let mut header = vec![(8, true), (16, true), (56, true), (64, true)];
    header.extend((0..256).map(|b| (72 + 4 * b, false)));
    let mut records = Vec::new();
    let mut at = TABLE_HEADER_LEN + 8 * m.len();
    for (i, (k, v)) in m.iter().enumerate() {
        records.extend([
            (TABLE_HEADER_LEN + 8 * i, true),
            (at, false),
            (at + 4, false),
        ]);
        at += 8 + k.len() + v.as_ref().map_or(0, Vec::len);
    }
    (header, records)
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn lookups_and_scans_agree_with_a_btreemap(m in model(), extra in prop::collection::vec(key(), 0..8)) {
        let bytes = encode(&meta(1, 5), &m);
        let t = Table::from_bytes(bytes.clone()).unwrap();
        t.verify().unwrap();
        prop_assert_eq!(t.len(), m.len());
        for p in probes(&m, &extra) {
            prop_assert_eq!(t.get(&p).unwrap(), m.get(&p).map(|v| v.as_deref()));
            prop_assert_eq!(t.lower_bound(&p).unwrap(), m.range(..p.clone()).count());
            prop_assert_eq!(scan(&t, &p, false), model_scan(&m, &p, false));
            prop_assert_eq!(scan(&t, &p, true), model_scan(&m, &p, true));
        }
        // Canonical: the entries read back encode to the same bytes.
        let entries: Vec<_> = (0..t.len()).map(|i| t.entry(i).unwrap()).collect();
        prop_assert_eq!(encode_table(&meta(1, 5), entries).unwrap(), bytes);
    }

    #[test]
    fn merges_agree_with_folded_btreemaps(ms in prop::collection::vec(model(), 1..5), drop in any::<bool>()) {
        let tables: Vec<Table> =
            ms.iter().map(|m| Table::from_bytes(encode(&meta(1, 1), m)).unwrap()).collect();
        let refs: Vec<&Table> = tables.iter().collect();
        let mut want = Model::new();
        for m in ms.iter().rev() {
            want.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if drop {
            want.retain(|_, v| v.is_some());
        }
        let got: Vec<_> = merge(&refs, drop).map(|e| owned(e.unwrap())).collect();
        prop_assert_eq!(got, want.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn hostile_bytes_are_errors_never_panics(
        m in model(),
        mutations in prop::collection::vec(mutation(), 1..4),
        fix in any::<bool>(),
    ) {
        let original = encode(&meta(2, 3), &m);
        let (header, records) = fields(&m);
        let mut bytes = original.clone();
        for mu in &mutations {
            match mu {
                Mutation::Edit(e) => apply_edit(&mut bytes, e, &[&original]),
                Mutation::SetByte(i, v) => {
                    let len = bytes.len();
                    if len > 0 {
                        bytes[i.index(len)] = *v;
                    }
                }
                Mutation::Field(in_header, i, v, wide) => {
                    let fields = if *in_header || records.is_empty() { &header } else { &records };
                    let (at, is_wide) = fields[i.index(fields.len())];
                    if *wide && is_wide {
                        overwrite(&mut bytes, at, &v.to_le_bytes());
                    } else {
                        overwrite(&mut bytes, at, &(*v as u32).to_le_bytes());
                    }
                }
            }
        }
        if fix {
            fix_checksum(&mut bytes);
        }
        let changed = bytes != original;
        // The fuzz target's oracle on the same bytes (both selectors).
        for selector in [0u8, 1] {
            sessctl_store::fuzzing::index_table(&[&[selector][..], &bytes].concat());
        }
        let Ok(t) = Table::from_bytes(bytes) else { return Ok(()) };
        let verified = t.verify().is_ok();
        prop_assert!(!(changed && !fix && verified), "a changed table verified");
        exercise(&t, &probes(&m, &[]), verified);
    }

    #[test]
    fn random_bytes_behind_a_valid_header_are_errors_never_panics(
        n in 0u64..6,
        body in prop::collection::vec(any::<u8>(), 0..160),
        fanout_at in any::<Index>(),
    ) {
        // A header that opens, over random offsets and records.
        let mut b = encode(&meta(1, 1), &Model::new());
        b.truncate(TABLE_HEADER_LEN);
        let heap = (body.len() as u64).saturating_sub(8 * n);
        if body.len() as u64 >= 8 * n {
            b[56..64].copy_from_slice(&n.to_le_bytes());
            b[64..72].copy_from_slice(&heap.to_le_bytes());
            let from = 72 + 4 * fanout_at.index(256);
            for at in (from..TABLE_HEADER_LEN).step_by(4) {
                b[at..at + 4].copy_from_slice(&(n as u32).to_le_bytes());
            }
        }
        b.extend_from_slice(&body);
        b.extend_from_slice(&[0; 32]);
        fix_checksum(&mut b);
        if let Ok(t) = Table::from_bytes(b) {
            let verified = t.verify().is_ok();
            exercise(&t, &[vec![], vec![0], b"a".to_vec(), vec![0xff; 3]], verified);
        }
    }
}
