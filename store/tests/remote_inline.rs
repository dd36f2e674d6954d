//! Inline packs on a remote store (`inline=BYTES` in the store URL, schema
//! version 6; objects-format.md, "Inline packs"), against real servers on
//! loopback: a write whose pack is small enough keeps it in PostgreSQL and
//! makes no S3 request; the writer that brings the inline packs to the
//! seal size moves them into one pack in the bucket, and every reader,
//! one that knew their old place included, reads on; gc and repack leave
//! no inline pack; a bad parameter is one clear error.
#![cfg(feature = "remote")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/servers.rs"]
mod servers;
mod support;

use serde_json::{json, Value};
use sessctl_store::fsck::FsckOptions;
use sessctl_store::odb::{RemoteBackend, RepackOptions, S3Settings, REMOTE_SEAL_BYTES};
use sessctl_store::{Durability, Error, Messages, ObjectId, OpenOptions, Store, Turn};

/// The test's store URL asking for packs up to `bytes` to stay inline.
fn inline_url(r: &servers::Remote, bytes: u64) -> String {
    format!("{}&inline={bytes}", r.url)
}

fn init(r: &servers::Remote) {
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
}

/// A handle on `url` with no pack cache: every body it reads comes from
/// PostgreSQL or the bucket.
fn open_at(r: &servers::Remote, url: &str) -> Store {
    let uncached = S3Settings {
        cache_dir: None,
        ..r.s3_settings()
    };
    Store::open_remote_with(url, &OpenOptions::default(), &uncached).unwrap()
}

fn sql(r: &servers::Remote, q: &str) -> String {
    r.servers.psql(&r.name, q).trim().to_owned()
}

fn inline_packs(r: &servers::Remote) -> i64 {
    sql(
        r,
        "SELECT count(*) FROM sessctl.packs WHERE body IS NOT NULL",
    )
    .parse()
    .unwrap()
}

fn bucket_packs(r: &servers::Remote) -> Vec<String> {
    r.servers.list_keys(&r.name, "store/packs/")
}

fn turn(texts: &[String]) -> Turn {
    Turn {
        messages: Messages::Added(
            texts
                .iter()
                .enumerate()
                .map(|(i, t)| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": t}))
                .collect(),
        ),
        ..Turn::default()
    }
}

fn texts(store: &Store, id: &ObjectId) -> Vec<String> {
    store
        .odb()
        .load_messages(id)
        .unwrap()
        .iter()
        .map(|m: &Value| m["content"].as_str().unwrap().to_owned())
        .collect()
}

/// `n` characters that zstd cannot shrink much (hex of a xorshift stream):
/// packs of a known size.
fn noise(seed: u64, n: usize) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut s = String::with_capacity(n + 16);
    while s.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{x:016x}"));
    }
    s.truncate(n);
    s
}

/// Every object a fresh handle lists reads and verifies, and a full fsck
/// is clean.
fn all_reads_and_verifies(r: &servers::Remote) {
    let fresh = open_at(r, &r.url);
    for id in fresh.odb().backend().ids().unwrap() {
        fresh
            .odb()
            .read(&id)
            .unwrap_or_else(|e| panic!("object {id}: {e}"));
    }
    let report = fresh
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

/// With the bucket's server stopped, writes whose packs stay inline still
/// commit, and another handle reads them back from PostgreSQL alone; the
/// same write through the plain URL fails, as it must, naming the bucket.
#[test]
fn an_inline_write_makes_no_s3_request() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    init(&r);
    let url = inline_url(&r, 64 << 10);
    let writer = open_at(&r, &url);
    r.servers.stop_moto();
    let one = |t: &str| vec![t.to_owned(), format!("{t}, answered")];
    let (name, root) = writer
        .create(Some("offline"), turn(&one("first")), Durability::Sync)
        .unwrap();
    let mut head = root;
    for t in ["second", "third"] {
        head = writer
            .commit(&name, Some(head), turn(&one(t)), Durability::Sync)
            .unwrap();
    }
    let reader = open_at(&r, &r.url);
    assert_eq!(
        texts(&reader, &head),
        [
            "first",
            "first, answered",
            "second",
            "second, answered",
            "third",
            "third, answered"
        ]
    );
    assert_eq!(inline_packs(&r), 3);
    assert_eq!(
        sql(&r, "SELECT count(*) FROM sessctl.packs WHERE body IS NULL"),
        "0"
    );
    assert_eq!(
        sql(
            &r,
            "SELECT (SELECT inline_bytes FROM sessctl.chain_head) =
                    (SELECT sum(bytes) FROM sessctl.packs WHERE body IS NOT NULL)"
        ),
        "t"
    );
    let report = reader
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // The plain URL uploads, and the bucket is out of reach.
    let plain = open_at(&r, &r.url);
    let err = plain
        .commit(&name, Some(head), turn(&one("fourth")), Durability::Sync)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Remote { what, .. } if what.starts_with("s3://")),
        "{err}"
    );
    assert_eq!(
        reader.conversation(&name).unwrap().unwrap().head.unwrap(),
        head
    );
}

/// The write that brings the inline packs to the seal size seals them:
/// one pack in the bucket, no inline row left, the running figure back to
/// zero. A reader that had read where the objects lived before (their
/// inline rows, gone now) reads them from the new pack.
#[test]
fn the_seal_moves_the_inline_packs_into_one_pack_in_the_bucket() {
    let Some(r) = servers::remote() else {
        return;
    };
    init(&r);
    let url = inline_url(&r, 1 << 20);
    let writer = open_at(&r, &url);
    let big = |t: u64| vec![noise(t, 150_000), format!("turn {t}")];
    let (name, root) = writer
        .create(Some("big"), turn(&big(0)), Durability::Sync)
        .unwrap();
    // Another process that looked the first session up before the seal.
    let reader = open_at(&r, &r.url);
    assert!(reader.odb().contains(&root).unwrap());
    let mut head = root;
    let mut turns = 1;
    while inline_packs(&r) > 0 {
        assert!(
            turns * 75_000 < 4 * REMOTE_SEAL_BYTES as usize,
            "{turns} turns of about 75 KB each, and nothing sealed"
        );
        head = writer
            .commit(
                &name,
                Some(head),
                turn(&big(turns as u64)),
                Durability::Sync,
            )
            .unwrap();
        turns += 1;
    }
    assert!(turns > 2, "sealed after {turns} turns");
    assert_eq!(bucket_packs(&r).len(), 1, "{:?}", bucket_packs(&r));
    assert_eq!(sql(&r, "SELECT inline_bytes FROM sessctl.chain_head"), "0");
    // Nothing was retired: the inline packs had nothing in the bucket.
    assert_eq!(sql(&r, "SELECT count(*) FROM sessctl.retired_packs"), "0");
    let first = texts(&reader, &root);
    assert_eq!(first, big(0));
    let all = texts(&open_at(&r, &r.url), &head);
    assert_eq!(all.len(), 2 * turns);
    assert_eq!(all[all.len() - 1], format!("turn {}", turns - 1));
    // The next write starts the next run of inline packs.
    writer
        .commit(&name, Some(head), turn(&big(99)), Durability::Sync)
        .unwrap();
    assert_eq!(inline_packs(&r), 1);
    all_reads_and_verifies(&r);
}

/// gc and repack move every inline pack into the bucket, however few.
#[test]
fn repack_leaves_no_inline_pack() {
    let Some(r) = servers::remote() else {
        return;
    };
    init(&r);
    let url = inline_url(&r, 64 << 10);
    let store = open_at(&r, &url);
    let (name, mut head) = store
        .create(Some("a"), turn(&["one".into()]), Durability::Sync)
        .unwrap();
    head = store
        .commit(&name, Some(head), turn(&["two".into()]), Durability::Sync)
        .unwrap();
    assert_eq!(inline_packs(&r), 2);
    assert!(bucket_packs(&r).is_empty());
    let stats = store.repack(&RepackOptions::default()).unwrap();
    assert_eq!(stats.packs_before, 2);
    assert_eq!(inline_packs(&r), 0);
    assert_eq!(bucket_packs(&r).len(), 1);
    assert_eq!(texts(&store, &head), ["one", "two"]);
    // A lone inline pack moves too.
    store
        .commit(&name, Some(head), turn(&["three".into()]), Durability::Sync)
        .unwrap();
    assert_eq!(inline_packs(&r), 1);
    store.repack(&RepackOptions::default()).unwrap();
    assert_eq!(inline_packs(&r), 0);
    all_reads_and_verifies(&r);
}

/// `inline=` takes a number of bytes up to 64 MiB: anything else is one
/// error naming the parameter, before any connection.
#[test]
fn a_bad_inline_parameter_is_one_clear_error() {
    let base = "postgres://u@127.0.0.1:1/db?objects=s3://b/p";
    for bad in ["abc", "-1", "", "67108865", "1e3"] {
        let err = Store::open_remote_with(
            &format!("{base}&inline={bad}"),
            &OpenOptions::default(),
            &S3Settings::default(),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("inline= takes a number of bytes from 0 to 67108864"),
            "{bad}: {text}"
        );
        assert!(matches!(err, Error::Invalid(_)), "{bad}: {err:?}");
    }
}

/// The rows objects-format.md ("Inline packs") shows: the example objects
/// written inline, where each lives in the pack and the pack's header, as
/// PostgreSQL prints them (`tests/fixtures/remote-inline-v6/rows.txt`);
/// the pack's name is the blake3 of its bytes, and the columns are the
/// spec's.
#[test]
fn the_example_objects_inline_rows_match_the_golden_fixture() {
    let Some(r) = servers::remote() else {
        return;
    };
    init(&r);
    let store = open_at(&r, &inline_url(&r, 1 << 16));
    let ex = support::examples();
    store
        .odb()
        .backend()
        .write_batch(&[ex.hello, ex.root, ex.reply, ex.cont], Durability::Sync)
        .unwrap();
    let rows = r.servers.psql(
        &r.name,
        "SELECT encode(o.id, 'hex'), o.kind, o.off, o.len, encode(substring(p.body FROM 1 FOR 20), 'hex')
         FROM sessctl.objects o JOIN sessctl.packs p ON p.id = o.pack ORDER BY o.id",
    );
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/remote-inline-v6/rows.txt");
    let fixture = std::fs::read_to_string(fixture).unwrap();
    assert_eq!(rows, fixture);
    let spec = support::spec();
    for line in fixture.lines() {
        assert!(spec.contains(line), "objects-format.md lacks {line}");
    }
    let (key, body) = {
        let out = sql(
            &r,
            "SELECT key || ' ' || encode(body, 'hex') FROM sessctl.packs",
        );
        let (k, b) = out.split_once(' ').unwrap();
        (k.to_owned(), b.to_owned())
    };
    let bytes: Vec<u8> = (0..body.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&body[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(key, blake3::hash(&bytes).to_hex().to_string());
    assert_eq!(
        sql(
            &r,
            "SELECT string_agg(column_name || ' ' || udt_name || ' ' || is_nullable, ', '
                               ORDER BY ordinal_position)
             FROM information_schema.columns
             WHERE table_schema = 'sessctl' AND table_name = 'packs'"
        ),
        "id int8 NO, key text NO, bytes int8 NO, created_at int8 NO, body bytea YES"
    );
    assert_eq!(
        sql(
            &r,
            "SELECT attstorage FROM pg_attribute
             WHERE attrelid = 'sessctl.packs'::regclass AND attname = 'body'"
        ),
        "e"
    );
}

/// A turn whose pack goes inline is packed whole without first asking
/// which of its objects are stored: before its lock, a commit reads only
/// the head with its conversation's keys. What another conversation
/// stored already still gets no second row, and its copy in the pack goes
/// when the inline packs are sealed; everything reads back and verifies.
#[test]
fn an_inline_turn_asks_nothing_before_its_lock_but_the_head() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    init(&r);
    let url = inline_url(&r, 64 << 10);
    let store = open_at(&r, &url);
    let shared = "the same system prompt in every conversation".to_owned();
    let (_, other) = store
        .create(
            Some("other"),
            turn(&[shared.clone(), "other".into()]),
            Durability::Sync,
        )
        .unwrap();
    // A fresh handle, which does not know what "other" stored.
    let writer = open_at(&r, &url);
    let (name, mut head) = writer
        .create(
            Some("mine"),
            turn(&["start".into(), "ok".into()]),
            Durability::Sync,
        )
        .unwrap();
    servers::StatementLog::enable(&r);
    let writer = open_at(&r, &url);
    head = writer
        .commit(
            &name,
            Some(head),
            turn(&["warm up".into()]),
            Durability::Sync,
        )
        .unwrap();
    let rows_before: i64 = sql(&r, "SELECT count(*) FROM sessctl.objects")
        .parse()
        .unwrap();
    let count = servers::StatementLog::start(&r);
    head = writer
        .commit(
            &name,
            Some(head),
            turn(&[shared.clone(), "mine".into()]),
            Durability::Sync,
        )
        .unwrap();
    let commit = count.since();
    let lock = commit
        .iter()
        .position(|s| s.starts_with("statement: BEGIN;"))
        .unwrap_or_else(|| panic!("no lock taken: {commit:#?}"));
    assert_eq!(lock, 1, "{commit:#?}");
    assert!(commit[0].contains("sessctl.chain_head"), "{commit:#?}");
    // The shared message was stored by "other": rows for the session and
    // the new message only.
    let rows_after: i64 = sql(&r, "SELECT count(*) FROM sessctl.objects")
        .parse()
        .unwrap();
    assert_eq!(rows_after - rows_before, 2);
    assert_eq!(
        texts(&writer, &head),
        ["start", "ok", "warm up", shared.as_str(), "mine"]
    );
    assert_eq!(texts(&writer, &other), [shared.as_str(), "other"]);
    // Sealed: every object lives on, once.
    store.repack(&RepackOptions::default()).unwrap();
    assert_eq!(inline_packs(&r), 0);
    all_reads_and_verifies(&r);
}
