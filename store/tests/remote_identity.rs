//! A remote store's identity (schema version 7; objects-format.md, "Store
//! identity"), against real servers on loopback: the database records
//! where its objects are and the bucket's `sessctl-store` object names the
//! store, so a URL whose `objects=` names another bucket or prefix (a
//! typo, or another store's) is refused before anything is read, written
//! or swept there, and `init` will not give one prefix to two stores.
#![cfg(feature = "remote")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/servers.rs"]
mod servers;

use serde_json::json;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::GcOptions;
use sessctl_store::odb::{RemoteBackend, REMOTE_SCHEMA_VERSION};
use sessctl_store::{Durability, Error, Messages, OpenOptions, Store, Turn};

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

fn open_at(r: &servers::Remote, url: &str, read_only: bool) -> Result<Store, Error> {
    Store::open_remote_with(
        url,
        &OpenOptions {
            read_only,
            ..OpenOptions::default()
        },
        &r.s3_settings(),
    )
}

/// `r`'s URL with its `objects=` replaced.
fn with_objects(r: &servers::Remote, objects: &str) -> String {
    let (base, _) = r.url.split_once("?objects=").unwrap();
    format!("{base}?objects={objects}")
}

/// A store with one conversation, its head, and a fsck that says so.
fn store_with_a_turn(r: &servers::Remote) -> sessctl_store::ObjectId {
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let s = open_at(r, &r.url, false).unwrap();
    s.create(Some("precious"), turn("keep me"), Durability::Sync)
        .unwrap()
        .1
}

fn assert_intact(r: &servers::Remote, head: sessctl_store::ObjectId) {
    let s = open_at(r, &r.url, true).unwrap();
    assert_eq!(
        s.conversation("precious").unwrap().unwrap().head,
        Some(head)
    );
    assert_eq!(
        s.odb().load_messages(&head).unwrap(),
        [json!({"role": "user", "content": "keep me"})]
    );
    let report = s.fsck(&FsckOptions { full: true }, &mut |_, _| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

fn assert_refused(got: Result<Store, Error>, words: &str) {
    match got {
        Ok(_) => panic!("opened; expected an error saying {words:?}"),
        Err(e) => {
            assert!(matches!(e, Error::Remote { .. }), "{e:?}");
            assert!(e.to_string().contains(words), "{e}");
        }
    }
}

/// A typo in the prefix (its case, a `./`, a suffix) is refused by every
/// open, read-only or not, naming where the objects are; nothing is
/// written there, and the store reads on through its own URL.
#[test]
fn a_url_naming_another_prefix_is_refused_before_anything_moves() {
    let Some(r) = servers::remote() else {
        return;
    };
    let head = store_with_a_turn(&r);
    for typo in ["STORE", "./store", "store2", "store/sub", ""] {
        let bucket = if typo.is_empty() {
            format!("s3://{}", r.name)
        } else {
            format!("s3://{}/{typo}", r.name)
        };
        let url = with_objects(&r, &bucket);
        for read_only in [false, true] {
            assert_refused(
                open_at(&r, &url, read_only),
                &format!("keeps its objects in s3://{}/store", r.name),
            );
        }
        assert_refused(
            RemoteBackend::init(&url, &r.s3_settings()).map(|_| unreachable!()),
            "keeps its objects in",
        );
    }
    // Nothing but the store's own prefix in the bucket.
    let keys = r.servers.list_keys(&r.name, "");
    assert!(keys.iter().all(|k| k.starts_with("store/")), "{keys:?}");
    assert_intact(&r, head);
}

/// `init` of a second store on a prefix that holds the first's objects is
/// refused and leaves no schema; a gc there is therefore impossible, and
/// the first store loses nothing. The same for a prefix a store of an
/// older version keeps (its `sessctl-store` object has no id).
#[test]
fn init_refuses_a_prefix_another_store_keeps_its_objects_in() {
    let Some(first) = servers::remote() else {
        return;
    };
    let head = store_with_a_turn(&first);
    let second = servers::remote().unwrap();
    let url = with_objects(&second, &format!("s3://{}/store", first.name));
    let err = RemoteBackend::init(&url, &second.s3_settings()).unwrap_err();
    assert!(
        err.to_string()
            .contains("holds the objects of another store"),
        "{err}"
    );
    let err = open_at(&second, &url, false).err().unwrap();
    assert!(err.to_string().contains("holds no sessctl store"), "{err}");
    assert_eq!(
        second
            .servers
            .psql(
                &second.name,
                "SELECT count(*) FROM pg_namespace WHERE nspname = 'sessctl'"
            )
            .trim(),
        "0"
    );
    assert_intact(&first, head);
    // gc on the first store, as its URL names it, still keeps everything.
    let s = open_at(&first, &first.url, false).unwrap();
    s.gc(&GcOptions::default()).unwrap();
    assert_intact(&first, head);

    // An older store's prefix: its sessctl-store object names no store.
    let old = servers::remote().unwrap();
    assert!(RemoteBackend::init_at_version(&old.url, &old.s3_settings(), 6).unwrap());
    let third = servers::remote().unwrap();
    let url = with_objects(&third, &format!("s3://{}/store", old.name));
    let err = RemoteBackend::init(&url, &third.s3_settings()).unwrap_err();
    assert!(
        err.to_string().contains("written by an older sessctl"),
        "{err}"
    );
}

/// `init` again with another `objects=` is refused and writes nothing
/// there; with the same one it is a no-op that says the store was there.
#[test]
fn init_again_with_another_prefix_is_refused() {
    let Some(r) = servers::remote() else {
        return;
    };
    let head = store_with_a_turn(&r);
    let other = with_objects(&r, &format!("s3://{}/elsewhere", r.name));
    let err = RemoteBackend::init(&other, &r.s3_settings()).unwrap_err();
    assert!(err.to_string().contains("keeps its objects in"), "{err}");
    assert!(r.servers.list_keys(&r.name, "elsewhere/").is_empty());
    assert!(!RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    assert_intact(&r, head);
}

/// A store of an older version takes the prefix its URL names at its
/// first writable open only if its `sessctl-store` object is there: a
/// typo there leaves it at its version, refused, and its own URL then
/// upgrades it and records its objects' place.
#[test]
fn an_older_store_records_its_prefix_only_where_its_marker_is() {
    let Some(r) = servers::remote() else {
        return;
    };
    assert!(RemoteBackend::init_at_version(&r.url, &r.s3_settings(), 6).unwrap());
    let version = || {
        r.servers
            .psql(&r.name, "SELECT max(version) FROM sessctl.schema_version")
            .trim()
            .to_owned()
    };
    let typo = with_objects(&r, &format!("s3://{}/Store", r.name));
    assert_refused(open_at(&r, &typo, false), "holds no sessctl-store object");
    assert_eq!(version(), "6");
    let s = open_at(&r, &r.url, false).unwrap();
    assert_eq!(version(), REMOTE_SCHEMA_VERSION.to_string());
    s.create(Some("precious"), turn("keep me"), Durability::Sync)
        .unwrap();
    assert_eq!(
        r.servers
            .psql(&r.name, "SELECT objects FROM sessctl.store")
            .trim(),
        format!("s3://{}/store", r.name)
    );
    assert_refused(open_at(&r, &typo, true), "keeps its objects in");
}

/// The bucket's `sessctl-store` object, byte for byte, is the golden
/// fixture's (`tests/fixtures/remote-store-v7/sessctl-store`) with the
/// store's id, which `sessctl.store` records: what a reader of any later
/// version must understand.
#[test]
fn the_marker_matches_the_golden_fixture() {
    let Some(r) = servers::remote() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let id = r
        .servers
        .psql(&r.name, "SELECT id FROM sessctl.store")
        .trim()
        .to_owned();
    assert_eq!(id.len(), 32, "{id}");
    let fixture = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/remote-store-v7/sessctl-store"),
    )
    .unwrap();
    let fixture_id = "5e55c7100000000000000000000c0ffe";
    assert!(fixture.contains(fixture_id));
    let marker = r
        .servers
        .get_key(&r.name, "store/sessctl-store")
        .expect("init writes the marker");
    assert_eq!(
        String::from_utf8(marker).unwrap(),
        fixture.replace(fixture_id, &id)
    );
    // A lost marker is written again by the next init, with the same id.
    let answer = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", r.servers.moto_port)).unwrap();
        write!(
            s,
            "DELETE /{}/store/sessctl-store HTTP/1.1\r\nHost: 127.0.0.1\r\n{}Content-Length: 0\r\nConnection: close\r\n\r\n",
            r.name,
            servers::MOTO_AUTH,
        )
        .unwrap();
        let mut a = String::new();
        s.read_to_string(&mut a).unwrap();
        a
    };
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
    assert!(!RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    assert_eq!(
        String::from_utf8(r.servers.get_key(&r.name, "store/sessctl-store").unwrap()).unwrap(),
        fixture.replace(fixture_id, &id)
    );
}

/// A role granted the tables before the upgrade that added
/// `sessctl.store` (`GRANT SELECT ON ALL TABLES` covers only tables that
/// exist then) still opens the store and reads it, unchecked.
#[test]
fn a_role_that_may_not_read_the_identity_still_reads_the_store() {
    let Some(r) = servers::remote() else {
        return;
    };
    let head = store_with_a_turn(&r);
    let role = format!("{}_reader", r.name);
    r.servers
        .psql("postgres", &format!("CREATE ROLE {role} LOGIN"));
    for sql in [
        format!("GRANT USAGE ON SCHEMA sessctl TO {role}"),
        format!("GRANT SELECT ON ALL TABLES IN SCHEMA sessctl TO {role}"),
        format!("REVOKE SELECT ON sessctl.store FROM {role}"),
    ] {
        r.servers.psql(&r.name, &sql);
    }
    let url = r.url.replacen("://sessctl@", &format!("://{role}@"), 1);
    let s = open_at(&r, &url, true).unwrap();
    assert_eq!(
        s.odb().load_messages(&head).unwrap(),
        [json!({"role": "user", "content": "keep me"})]
    );
}
