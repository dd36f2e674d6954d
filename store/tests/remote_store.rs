//! The remote backend (operations and refs in PostgreSQL, objects in S3)
//! against real servers on loopback (see support/servers.rs): the same
//! behaviour as the local backends, the compare-and-swap kept in
//! PostgreSQL, hashes verified on every read, one clear error for a bad
//! URL or an unreachable server.
#![cfg(feature = "remote")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/servers.rs"]
mod servers;

use serde_json::{json, Value};
use sessctl_store::fsck::FsckOptions;
use sessctl_store::graph::{log_order, Follow};
use sessctl_store::odb::ObjectBackend;
use sessctl_store::odb::{RemoteBackend, S3Settings, REMOTE_SCHEMA_VERSION};
use sessctl_store::{
    Durability, Error, ForkOptions, Messages, ObjectId, OpenOptions, RefName, RefTarget, Store,
    Turn, WriteBatch,
};

/// A fresh, initialised remote store; `None` when the developer opted out.
fn remote_store() -> Option<(servers::Remote, Store)> {
    let r = servers::remote()?;
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    Some((r, store))
}

fn open(r: &servers::Remote) -> Store {
    Store::open_remote_with(&r.url, &OpenOptions::default(), &r.s3_settings()).unwrap()
}

/// A full fsck of `store` finds nothing (its problems shown otherwise).
fn assert_fsck_clean(store: &Store) {
    let report = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

fn turn(texts: &[&str]) -> Turn {
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

fn contents(store: &Store, id: &ObjectId) -> Vec<String> {
    store
        .odb()
        .load_messages(id)
        .unwrap()
        .iter()
        .map(|m: &Value| m["content"].as_str().unwrap().to_owned())
        .collect()
}

/// What a user of either backend sees, as one script: create, commit, a
/// lost compare-and-swap, fork, log, a second handle's view, fsck. Returns
/// the refs and the ref log's length for comparison across backends.
fn behaviour(store: &Store, reopen: &dyn Fn() -> Store) -> (Vec<(RefName, RefTarget)>, usize) {
    let (name, root) = store
        .create(Some("fix"), turn(&["hi", "hello"]), Durability::Sync)
        .unwrap();
    assert_eq!(name, "fix");
    let s1 = store
        .commit("fix", Some(root), turn(&["more", "sure"]), Durability::Sync)
        .unwrap();
    let s2 = store
        .commit("fix", None, turn(&["last", "done"]), Durability::Sync)
        .unwrap();
    assert_eq!(
        contents(store, &s2),
        ["hi", "hello", "more", "sure", "last", "done"]
    );
    let err = store
        .commit("fix", Some(s1), turn(&["x"]), Durability::Sync)
        .unwrap_err();
    assert!(matches!(err, Error::RefOutOfDate { .. }), "{err}");
    let (fork, head) = store
        .fork(s1, ForkOptions::default(), Durability::Sync)
        .unwrap();
    assert_eq!(head, s1);
    let f1 = store
        .commit(&fork, None, turn(&["branch"]), Durability::Sync)
        .unwrap();
    assert_eq!(
        contents(store, &f1),
        ["hi", "hello", "more", "sure", "branch"]
    );
    let log: Vec<ObjectId> = log_order(store, &[s2], Follow::All, None)
        .unwrap()
        .into_iter()
        .map(|n| n.id)
        .collect();
    assert_eq!(log, [s2, s1, root]);

    // Another handle (another process, another machine) sees it all, and
    // its stale write loses the compare-and-swap.
    let other = reopen();
    assert_eq!(
        other
            .resolve_ref(&RefName::conversation("fix").unwrap())
            .unwrap(),
        Some(s2)
    );
    assert_eq!(contents(&other, &f1), contents(store, &f1));
    let o3 = other
        .commit("fix", Some(s2), turn(&["from the other"]), Durability::Sync)
        .unwrap();
    let err = store
        .commit("fix", Some(s2), turn(&["stale"]), Durability::Sync)
        .unwrap_err();
    assert!(matches!(err, Error::RefOutOfDate { .. }), "{err}");
    assert_eq!(
        store
            .resolve_ref(&RefName::conversation("fix").unwrap())
            .unwrap(),
        Some(o3)
    );

    // The other verbs that move refs and records: merge, tag, rename,
    // archive and back, a run claimed and committed, reset, delete.
    let m = store
        .merge("fix", &[f1], turn(&["merged"]), Durability::Sync)
        .unwrap();
    assert_eq!(store.odb().session(&m).unwrap().parents, [o3, f1]);
    store.tag("v1", s1, false, Durability::Sync).unwrap();
    store.rename(&fork, "side", Durability::Sync).unwrap();
    store.archive("side", Durability::Sync).unwrap();
    let side = RefName::conversation("side").unwrap();
    assert_eq!(store.resolve_ref(&side).unwrap(), None);
    store.unarchive("side", Durability::Sync).unwrap();
    let run = store.begin_run("fix").unwrap();
    let busy = other
        .commit("fix", Some(m), turn(&["while running"]), Durability::Sync)
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    let r1 = store
        .commit_run(&run, turn(&["ran"]), false, Durability::Sync)
        .unwrap();
    store.reset("side", root, Durability::Sync).unwrap();
    store.delete("side", Durability::Sync).unwrap();
    assert_eq!(
        other
            .resolve_ref(&RefName::conversation("fix").unwrap())
            .unwrap(),
        Some(r1)
    );
    assert_eq!(other.tags().unwrap(), [("v1".to_owned(), s1)]);

    let report = store.fsck(&FsckOptions::default(), &mut |_, _| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    (store.refs().unwrap(), store.reflog_entries().unwrap().len())
}

/// One script, two backends: the remote store answers as the local one.
#[test]
fn the_remote_store_behaves_as_the_local_one() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    drop(Store::init(&path).unwrap());
    let local = Store::open(&path, &OpenOptions::default()).unwrap();
    let (local_refs, local_log) = behaviour(&local, &|| {
        Store::open(&path, &OpenOptions::default()).unwrap()
    });
    let (remote_refs, remote_log) = behaviour(&store, &|| open(&r));
    // Same names, same kinds of target, same ref-log length (ids differ:
    // sessions carry their creation time).
    let shape = |refs: &[(RefName, RefTarget)]| {
        refs.iter()
            .map(|(n, t)| {
                // A fork's default name holds its session's id.
                let n = n.to_string();
                let n = if n.starts_with("refs/heads/fork-") {
                    "fork".into()
                } else {
                    n
                };
                (n, matches!(t, RefTarget::Session(_)))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&remote_refs), shape(&local_refs));
    assert_eq!(remote_log, local_log);

    // PostgreSQL holds the refs the operations left, and the chain head.
    let db = &r.name;
    let rows = r.servers.psql(
        db,
        "SELECT name || ' ' || target FROM sessctl.refs ORDER BY name",
    );
    let want: Vec<String> = remote_refs
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect();
    assert_eq!(rows.lines().collect::<Vec<_>>(), want);
    let ops = r
        .servers
        .psql(db, "SELECT count(*) || ' ' || max(seq) FROM sessctl.ops");
    let head = r.servers.psql(db, "SELECT seq FROM sessctl.chain_head");
    let n = ops.split_whitespace().next().unwrap();
    assert_eq!(ops.trim(), format!("{n} {n}"));
    assert_eq!(head.trim(), n);
}

/// A pack altered in the bucket is an error naming it, never data.
#[test]
fn a_pack_altered_in_the_bucket_is_corruption() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, root) = store
        .create(Some("c"), turn(&["secret", "kept"]), Durability::Sync)
        .unwrap();
    let bucket = &r.name;
    let keys = r.servers.list_keys(bucket, "store/packs/");
    assert_eq!(keys.len(), 1, "{keys:?}");
    // Overwrite the pack with other bytes (a plain PUT: moto reads the
    // access key from the header and checks no signature).
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", r.servers.moto_port)).unwrap();
        let body = b"SRPK\x01\0\0\0not a pack at all";
        write!(
            s,
            "PUT /{bucket}/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
            keys[0],
            body.len(),
            servers::MOTO_AUTH,
        )
        .unwrap();
        s.write_all(body).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    // A fresh handle without the pack cache (this process may have cached
    // the pack before it was altered) reads it.
    let uncached = S3Settings {
        cache_dir: None,
        ..r.s3_settings()
    };
    let fresh = Store::open_remote_with(&r.url, &OpenOptions::default(), &uncached).unwrap();
    let err = fresh.odb().read(&root).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains(&keys[0]), "{err}");
    let report = fresh.fsck(&FsckOptions::default(), &mut |_, _| {}).unwrap();
    assert!(!report.problems.is_empty());

    // The same database with another prefix is a wrong URL, not damage:
    // refused when it opens (objects-format.md, "Store identity").
    let elsewhere = r.url.replace("/store", "/elsewhere");
    let err = Store::open_remote_with(&elsewhere, &OpenOptions::default(), &uncached)
        .err()
        .unwrap();
    assert!(!err.is_corruption(), "{err}");
    assert!(
        err.to_string().contains(&format!(
            "keeps its objects in s3://{bucket}/store, not in s3://{bucket}/elsewhere"
        )),
        "{err}"
    );
}

/// A store that was never initialised, a server that is not there and a
/// malformed URL: one clear error each.
#[test]
fn bad_urls_and_absent_servers_are_one_clear_error() {
    let Some(r) = servers::remote() else {
        return;
    };
    let s3 = r.s3_settings();
    let opts = OpenOptions::default();
    let err = Store::open_remote_with(&r.url, &opts, &s3).unwrap_err();
    assert!(err.to_string().ends_with("holds no sessctl store"), "{err}");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = format!("postgres://sessctl:pw@127.0.0.1:{port}/x?objects=s3://b/p");
    let err = Store::open_remote_with(&gone, &opts, &s3).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Remote { .. }), "{err}");
    assert!(
        text.starts_with(&format!("postgres://sessctl@127.0.0.1:{port}/x: ")),
        "{text}"
    );
    assert!(!text.contains("pw") && !text.contains('\n'), "{text}");

    for (url, says) in [
        ("postgres://u@h/db", "names no bucket"),
        ("postgres://u@h/db?objects=gs://b", "objects= takes s3://"),
        ("postgres://u@h:notaport/db?objects=s3://b", "bad store URL"),
    ] {
        let err = Store::open_remote_with(url, &opts, &s3).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
        assert!(err.to_string().contains(says), "{url}: {err}");
    }

    // init against an S3 endpoint that is not there, or a bucket that
    // does not exist: one error naming the bucket, and no schema made.
    let mut no_s3 = s3.clone();
    no_s3.endpoint = Some(format!("http://127.0.0.1:{port}"));
    let err = RemoteBackend::init(&r.url, &no_s3).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(&format!("s3://{}/store: ", r.name)),
        "{err}"
    );
    let no_bucket = r.url.replace("s3://", "s3://not-");
    let err = RemoteBackend::init(&no_bucket, &s3).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "s3://not-{}/store: there is no bucket not-{} (sessctl does not create buckets)",
            r.name, r.name
        )
    );
    let err = Store::open_remote_with(&r.url, &opts, &s3).unwrap_err();
    assert!(err.to_string().ends_with("holds no sessctl store"), "{err}");
}

const CHILD_URL: &str = "SESSCTL_REMOTE_TEST_CHILD_URL";

/// The child side of the multi-process tests: commits `COMMITS` turns
/// alternately to conversations a and b, each with a compare-and-swap on
/// the head it read, and prints `ack CONV ID` or `lost CONV` for each (any
/// other failure: `error ...`). In a normal run it returns at once.
#[test]
fn remote_writer_child() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let var = |n: &str| std::env::var(n).unwrap();
    let (writer, commits): (usize, usize) = (
        var("SESSCTL_REMOTE_TEST_WRITER").parse().unwrap(),
        var("SESSCTL_REMOTE_TEST_COMMITS").parse().unwrap(),
    );
    let opts = OpenOptions {
        wait: Some(std::time::Duration::from_secs(120)),
        ..OpenOptions::default()
    };
    let store = Store::open_remote_with(&url, &opts, &S3Settings::from_env()).unwrap();
    for i in 0..commits {
        let conv = ["a", "b"][i % 2];
        let head = store
            .resolve_ref(&RefName::conversation(conv).unwrap())
            .unwrap();
        let text = format!("writer {writer} turn {i}");
        match store.commit(conv, head, turn(&[&text]), Durability::Sync) {
            Ok(id) => println!("ack {conv} {id}"),
            Err(Error::RefOutOfDate { .. }) => println!("lost {conv}"),
            Err(e) => println!("error {e}"),
        }
    }
}

/// Starts this test binary as a writer child of `r`'s store.
fn spawn_writer(
    r: &servers::Remote,
    writer: usize,
    commits: usize,
    extra: &[(&str, &str)],
) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "remote_writer_child",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CHILD_URL, &r.url)
        .env("SESSCTL_REMOTE_TEST_WRITER", writer.to_string())
        .env("SESSCTL_REMOTE_TEST_COMMITS", commits.to_string())
        .envs(r.env.iter().map(|(k, v)| (k, v)))
        .envs(extra.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Starts a writer child that uploads its pack and takes the write lock,
/// then, when it says it is before sending its rows and PostgreSQL's
/// commit, kills it with SIGKILL; returns what it left.
fn writer_killed_before_commit(r: &servers::Remote) -> std::process::Output {
    let mut child = spawn_writer(
        r,
        0,
        1,
        &[(sessctl_store::odb::remote::CRASH_BEFORE_COMMIT_VAR, "1")],
    );
    let stderr = child.stderr.take().unwrap();
    let mut said = String::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if line == sessctl_store::odb::remote::STOPPED_BEFORE_COMMIT {
            break;
        }
    }
    assert!(
        said.contains(sessctl_store::odb::remote::STOPPED_BEFORE_COMMIT),
        "the writer never reached the commit: {said}"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait_with_output().unwrap()
}

/// 8 processes × 50 commits over 2 conversations: every acknowledged
/// commit is in its conversation's history, every other was told it lost,
/// the ref-log chains are intact, fsck is clean, and PostgreSQL's refs
/// and chain head agree with the operations.
#[test]
fn eight_processes_commit_fifty_turns_each_over_two_conversations() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, a0) = store
        .create(Some("a"), turn(&["start a"]), Durability::Sync)
        .unwrap();
    let (_, b0) = store
        .create(Some("b"), turn(&["start b"]), Durability::Sync)
        .unwrap();
    let children: Vec<_> = (0..8).map(|w| spawn_writer(&r, w, 50, &[])).collect();
    let mut acked: std::collections::BTreeMap<&str, Vec<ObjectId>> = Default::default();
    let mut lost = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut told = 0;
        for line in stdout.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[..] {
                ["ack", conv, id] => {
                    let conv = if conv == "a" { "a" } else { "b" };
                    acked
                        .entry(conv)
                        .or_default()
                        .push(ObjectId::from_hex(id).unwrap());
                    told += 1;
                }
                ["lost", _] => {
                    lost += 1;
                    told += 1;
                }
                ["error", ..] => panic!("a writer failed: {line}"),
                _ => {}
            }
        }
        assert_eq!(told, 50, "{stdout}");
    }
    let n_acked: usize = acked.values().map(Vec::len).sum();
    assert_eq!(n_acked + lost, 400);
    eprintln!("8 writers x 50 commits: {n_acked} acknowledged, {lost} lost their race");

    // A fresh handle: each conversation's history is its root and exactly
    // the commits acknowledged for it.
    let fresh = open(&r);
    for (conv, root) in [("a", a0), ("b", b0)] {
        let head = fresh
            .resolve_ref(&RefName::conversation(conv).unwrap())
            .unwrap()
            .unwrap();
        let chain = sessctl_store::graph::first_parent_chain(&fresh, head).unwrap();
        let mut want: Vec<ObjectId> = acked.get(conv).cloned().unwrap_or_default();
        want.push(root);
        let mut got = chain.clone();
        got.sort();
        want.sort();
        assert_eq!(got, want, "conversation {conv}");
        assert_eq!(contents(&fresh, &head).len(), chain.len());
    }
    assert_fsck_clean(&fresh);
    // Ops: two creates and one per acknowledged commit; the chain head is
    // the last; the refs table is what the operations left.
    let ops = r.servers.psql(&r.name, "SELECT count(*) FROM sessctl.ops");
    let head = r
        .servers
        .psql(&r.name, "SELECT seq FROM sessctl.chain_head");
    assert_eq!(ops.trim(), (n_acked + 2).to_string());
    assert_eq!(head.trim(), ops.trim());
    let rows = r.servers.psql(
        &r.name,
        "SELECT name || ' ' || target FROM sessctl.refs ORDER BY name",
    );
    let want: Vec<String> = fresh
        .refs()
        .unwrap()
        .iter()
        .map(|(n, t)| format!("{n} {t}"))
        .collect();
    assert_eq!(rows.lines().collect::<Vec<_>>(), want);
}

/// A writer killed (SIGKILL) between its upload and PostgreSQL's commit
/// leaves an unreferenced pack and nothing else: no ref names a missing
/// object, fsck is clean, the next commit works.
#[test]
fn a_writer_killed_before_the_database_commit_leaves_only_an_orphan_pack() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, root) = store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    store
        .create(Some("b"), turn(&["other"]), Durability::Sync)
        .unwrap();
    let packs_before = r.servers.list_keys(&r.name, "store/packs/").len();
    let out = writer_killed_before_commit(&r);
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ack "));
    // Its pack is in the bucket; PostgreSQL has no row for it.
    let keys = r.servers.list_keys(&r.name, "store/packs/");
    assert_eq!(keys.len(), packs_before + 1, "{keys:?}");
    let rows = r
        .servers
        .psql(&r.name, "SELECT count(*) FROM sessctl.packs");
    assert_eq!(rows.trim(), packs_before.to_string());

    let fresh = open(&r);
    for (name, target) in fresh.refs().unwrap() {
        if let RefTarget::Session(id) = target {
            fresh
                .odb()
                .load_messages(&id)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    assert_eq!(
        fresh
            .resolve_ref(&RefName::conversation("a").unwrap())
            .unwrap(),
        Some(root)
    );
    assert_fsck_clean(&fresh);
    let next = fresh
        .commit(
            "a",
            Some(root),
            turn(&["after the crash"]),
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(contents(&open(&r), &next), ["start", "after the crash"]);

    // gc within the grace period keeps the orphan (a writer uploads before
    // it takes the lock: a young orphan may be one about to commit) ...
    let orphan: Vec<String> = keys
        .iter()
        .filter(|k| {
            let name = k.rsplit('/').next().unwrap().trim_end_matches(".srpk");
            r.servers
                .psql(
                    &r.name,
                    &format!("SELECT count(*) FROM sessctl.packs WHERE key = '{name}'"),
                )
                .trim()
                == "0"
        })
        .cloned()
        .collect();
    assert_eq!(orphan.len(), 1, "{orphan:?}");
    fresh.gc(&sessctl_store::gc::GcOptions::default()).unwrap();
    assert!(packs_in_bucket(&r).contains(&orphan[0]));
    // ... and --prune=now deletes it.
    fresh.gc(&prune_now()).unwrap();
    assert!(!packs_in_bucket(&r).contains(&orphan[0]));
    assert_eq!(contents(&open(&r), &next), ["start", "after the crash"]);
    all_reads_and_verifies(&r);
}

/// The compare-and-swap is PostgreSQL's own, not only the store's: an
/// operation that reaches the backend with a stale expected target (a
/// store whose index was wrong) changes nothing and is `RefOutOfDate`,
/// whether it comes with its index keys (the one statement of a write) or
/// without them (refused, its moves tried one by one first); a move of
/// another ref in the same operation, which alone would have succeeded,
/// does not land either.
#[test]
fn postgres_refuses_a_ref_move_from_a_stale_target() {
    use sessctl_store::odb::ObjectBackend as _;
    use sessctl_store::refs::{Operation, RefUpdate};
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, root) = store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    let s1 = store
        .commit("a", Some(root), turn(&["more"]), Durability::Sync)
        .unwrap();
    let backend =
        RemoteBackend::open_with(&r.url, &OpenOptions::default(), &r.s3_settings()).unwrap();
    let ops = backend.ops_after(0).unwrap();
    let (last_seq, last) = ops.last().unwrap();
    let last = Operation::decode(last).unwrap();
    let name = RefName::conversation("a").unwrap();
    let fresh = RefName::conversation("fresh").unwrap();
    let forged = Operation {
        seq: last_seq + 1,
        prev: Some(last.hash()),
        time: 1,
        actor: "test".into(),
        reason: "commit".into(),
        refs: vec![
            RefUpdate {
                name: fresh.clone(),
                old: None,
                new: Some(RefTarget::Session(root)),
                prev: None,
            },
            RefUpdate {
                name: name.clone(),
                // a points at s1 now: root is stale.
                old: Some(RefTarget::Session(root)),
                new: Some(RefTarget::Session(root)),
                prev: None,
            },
        ],
        conversations: Vec::new(),
        runs: Vec::new(),
        expire: Vec::new(),
    };
    for with_keys in [true, false] {
        let lock = backend.write_lock().unwrap();
        if with_keys {
            backend.kept_index().unwrap().index_stage(Vec::new());
        }
        let err = backend
            .append_locked(&lock, &[], &[(forged.seq, forged.encode())])
            .unwrap_err();
        drop(lock);
        match &err {
            Error::RefOutOfDate {
                name: n,
                expected,
                actual,
            } => {
                assert_eq!(n, &name);
                assert_eq!(expected.as_deref(), Some(root.to_hex().as_str()));
                assert_eq!(actual.as_deref(), Some(s1.to_hex().as_str()));
            }
            e => panic!("with keys: {with_keys}: {e}"),
        }
        // Nothing of it landed.
        assert_eq!(backend.ops_after(0).unwrap().len(), ops.len());
        assert_eq!(open(&r).resolve_ref(&fresh).unwrap(), None);
    }
    // The store writes on.
    let s2 = store
        .commit("a", Some(s1), turn(&["on"]), Durability::Sync)
        .unwrap();
    assert_eq!(open(&r).resolve_ref(&name).unwrap(), Some(s2));
}

/// A store on private servers whose WAL writer flushes only every 10 s: a
/// commit not waited for stays in PostgreSQL's memory, which an immediate
/// stop loses.
fn private_with_slow_wal_writer(r: &servers::Remote) {
    r.servers
        .psql("postgres", "ALTER SYSTEM SET wal_writer_delay = '10s'");
    r.servers.psql("postgres", "SELECT pg_reload_conf()");
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
}

/// A commit lets the write lock go before the WAL holding it is flushed,
/// and waits for the flush after: once acknowledged, it survives the
/// server's crash at once after (an immediate stop, which loses the WAL
/// not yet written). The WAL writer is slowed so that it never flushes
/// for the commit in the meantime: only the commit's own wait can.
#[test]
fn an_acknowledged_commit_survives_a_crash_right_after() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    private_with_slow_wal_writer(&r);
    let (_, mut head) = open(&r)
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    for t in 0..4 {
        let store = open(&r);
        head = store
            .commit(
                "a",
                Some(head),
                turn(&[&format!("turn {t}")]),
                Durability::Sync,
            )
            .unwrap();
        r.servers.stop_postgres();
        r.servers.start_postgres();
        let after = open(&r);
        assert_eq!(after.resolve_rev("a").unwrap(), head, "turn {t}");
    }
    assert_fsck_clean(&open(&r));
}

/// A role that may not run `pg_logical_emit_message` (a server that
/// revoked it from PUBLIC) commits with its flush under the lock, as
/// before: its writes are acknowledged, and nothing asks for the flush
/// after.
#[test]
fn a_role_without_the_flush_function_commits_with_its_flush() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    for sql in [
        "CREATE ROLE plain LOGIN".to_string(),
        format!("GRANT ALL ON DATABASE {} TO plain", r.name),
    ] {
        r.servers.psql("postgres", &sql);
    }
    for sql in [
        // Functions are each database's own. Only the overload the flush
        // calls: the other one left executable must not fool the check.
        "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC",
        "GRANT USAGE ON SCHEMA sessctl TO plain",
        "GRANT ALL ON ALL TABLES IN SCHEMA sessctl TO plain",
        "GRANT ALL ON ALL SEQUENCES IN SCHEMA sessctl TO plain",
    ] {
        r.servers.psql(&r.name, sql);
    }
    r.servers.psql(
        "postgres",
        &format!("ALTER DATABASE {} SET log_statement = 'all'", r.name),
    );
    let url = r.url.replacen("://sessctl@", "://plain@", 1);
    assert_ne!(url, r.url);
    let store = Store::open_remote_with(&url, &OpenOptions::default(), &r.s3_settings()).unwrap();
    let (_, mut head) = store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    for t in 0..3 {
        head = store
            .commit(
                "a",
                Some(head),
                turn(&[&format!("turn {t}")]),
                Durability::Sync,
            )
            .unwrap();
    }
    assert_eq!(open(&r).resolve_rev("a").unwrap(), head);
    let log = std::fs::read_to_string(r.servers.dir().join("postgres.log")).unwrap();
    assert!(log.contains("EXECUTE sessctl_write("));
    assert!(!log.contains("synchronous_commit = off"));
    assert!(!log.contains("SELECT pg_logical_emit_message"));
}

/// A crash of the server that loses a commit another handle had already
/// seen (one made without waiting for its flush): the handle that saw it
/// writes on, its next operation continuing the server's chain.
#[test]
fn a_handle_that_saw_a_commit_the_crash_lost_writes_on() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    private_with_slow_wal_writer(&r);
    let seer = open(&r);
    let (_, root) = seer
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    let lost = open(&r)
        .commit(
            "a",
            Some(root),
            turn(&["never flushed"]),
            Durability::NoSync,
        )
        .unwrap();
    assert_eq!(seer.resolve_rev("a").unwrap(), lost);
    r.servers.stop_postgres();
    r.servers.start_postgres();
    assert_eq!(
        open(&r).resolve_rev("a").unwrap(),
        root,
        "the commit made without its flush was lost by the crash"
    );
    let on = seer
        .commit(
            "a",
            Some(root),
            turn(&["after the crash"]),
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(seer.resolve_rev("a").unwrap(), on);
    assert_eq!(open(&r).resolve_rev("a").unwrap(), on);
    assert_fsck_clean(&open(&r));
}

/// PostgreSQL stopped and started again under an open handle: the write
/// meanwhile is one clear error that changes nothing; the handle connects
/// again and the next write and reads work.
#[test]
fn a_postgres_restart_is_one_error_then_writes_go_on() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    let (_, root) = store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    r.servers.stop_postgres();
    let err = store
        .commit("a", Some(root), turn(&["while down"]), Durability::Sync)
        .unwrap_err();
    assert!(matches!(err, Error::Remote { .. }), "{err}");
    let text = err.to_string();
    assert!(text.starts_with("postgres://sessctl@127.0.0.1:"), "{text}");
    assert!(!text.contains('\n'), "{text}");
    r.servers.start_postgres();
    let s1 = store
        .commit("a", Some(root), turn(&["after"]), Durability::Sync)
        .unwrap();
    let fresh = open(&r);
    assert_eq!(contents(&fresh, &s1), ["start", "after"]);
    let entries = fresh.reflog_entries().unwrap();
    assert_eq!(entries.len(), 3, "create (a, HEAD) and one commit");
}

/// The S3 server gone at commit time: one clear error naming the bucket,
/// nothing in PostgreSQL; once it is back, the next commit works.
#[test]
fn an_s3_outage_is_one_error_and_leaves_nothing_half_visible() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    let (_, root) = store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    let ops = || r.servers.psql(&r.name, "SELECT count(*) FROM sessctl.ops");
    let before = ops();
    // This handle reads the parent now (its pack is kept), as a commit on
    // top of it will need it once moto has lost everything.
    assert_eq!(contents(&store, &root), ["start"]);
    r.servers.stop_moto();
    let err = store
        .commit("a", Some(root), turn(&["while down"]), Durability::Sync)
        .unwrap_err();
    assert!(matches!(err, Error::Remote { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("s3://{}/store: ", r.name)),
        "{text}"
    );
    assert!(!text.contains('\n'), "{text}");
    assert_eq!(ops(), before);
    assert_eq!(
        open(&r)
            .resolve_ref(&RefName::conversation("a").unwrap())
            .unwrap(),
        Some(root)
    );
    // moto keeps nothing across a restart: the bucket is made again, and
    // this handle still holds the parent it read.
    r.servers.start_moto();
    r.servers.create_bucket(&r.name);
    let s1 = store
        .commit("a", Some(root), turn(&["after"]), Durability::Sync)
        .unwrap();
    assert_eq!(contents(&store, &s1), ["start", "after"]);
    assert_eq!(open(&r).odb().session(&s1).unwrap().parents, [root]);
}

/// Fetched packs are kept on disk, named by their hash: a new handle reads
/// them with the S3 server gone; a cached file that no longer hashes to its
/// name is never read as data (it is dropped and fetched again).
#[test]
fn fetched_packs_are_cached_and_a_damaged_cache_file_is_never_data() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    let (_, root) = store
        .create(Some("a"), turn(&["kept", "here"]), Durability::Sync)
        .unwrap();
    assert_eq!(contents(&open(&r), &root), ["kept", "here"]);
    let cache = std::path::PathBuf::from(r.var("SESSCTL_CACHE_DIR").unwrap());
    let files: Vec<_> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let keys = r.servers.list_keys(&r.name, "store/packs/");
    assert!(keys[0].ends_with(files[0].file_name().unwrap().to_str().unwrap()));

    r.servers.stop_moto();
    assert_eq!(contents(&open(&r), &root), ["kept", "here"]);
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&files[0], bytes).unwrap();
    let err = open(&r).odb().read(&root).unwrap_err();
    assert!(matches!(err, Error::Remote { .. }), "{err}");
    assert!(!files[0].exists());
}

/// fsck --full checks PostgreSQL's own records against the operations: a
/// refs row, an operation's hash column and the chain head, each altered
/// behind the store's back, is one problem line naming it.
#[test]
fn fsck_full_checks_the_postgres_records_against_the_operations() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, root) = store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    store
        .commit("a", Some(root), turn(&["more"]), Durability::Sync)
        .unwrap();
    let full = FsckOptions { full: true };
    let problems = |s: &Store| s.fsck(&full, &mut |_, _| {}).unwrap().problems;
    assert_eq!(problems(&open(&r)), Vec::<String>::new());
    r.servers.psql(
        &r.name,
        &format!("UPDATE sessctl.refs SET target = '{root}' WHERE name = 'refs/heads/a'"),
    );
    r.servers.psql(
        &r.name,
        "UPDATE sessctl.ops SET hash = decode(repeat('00', 32), 'hex') WHERE seq = 1",
    );
    r.servers
        .psql(&r.name, "UPDATE sessctl.chain_head SET seq = 7");
    let found = problems(&open(&r));
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found
            .iter()
            .any(|p| p.contains("the refs table says refs/heads/a is")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("operation row 1's hash column")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.contains("the chain head names operation 7")),
        "{found:#?}"
    );
}

const CLAIMER_URL: &str = "SESSCTL_REMOTE_TEST_CLAIMER_URL";

/// The child side of the claim test: claims conversation c, says so, and
/// waits to be killed. In a normal run it returns at once.
#[test]
fn remote_claimer_child() {
    let Ok(url) = std::env::var(CLAIMER_URL) else {
        return;
    };
    let store =
        Store::open_remote_with(&url, &OpenOptions::default(), &S3Settings::from_env()).unwrap();
    let run = store.begin_run("c").unwrap();
    println!("claimed {}", run.id);
    loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

/// A run claimed on a remote store lives exactly as long as the handle
/// that claimed it, wherever it runs: busy for every other handle while it
/// lives; once it is dropped, or its process killed, the claim is stale,
/// the next claim fails it in the same operation, and a writable open
/// fails the rest.
#[test]
fn a_remote_run_claim_lives_as_long_as_its_holder() {
    let Some((r, a)) = remote_store() else { return };
    a.create(Some("c"), turn(&["hi"]), Durability::Sync)
        .unwrap();
    a.create(Some("d"), turn(&["hi"]), Durability::Sync)
        .unwrap();
    let run = a.begin_run("d").unwrap();
    let b = open(&r);
    assert!(matches!(b.begin_run("d"), Err(Error::Busy { .. })));
    assert_eq!(b.running("d").unwrap().map(|c| c.run), Some(run.id));
    drop(a);
    // Its handle is gone, and its connection with it: nothing holds the
    // claim's advisory lock.
    assert_eq!(b.running("d").unwrap(), None);
    let next = b.begin_run("d").unwrap();
    assert_ne!(next.id, run.id);
    b.commit_run(&next, turn(&["done"]), false, Durability::Sync)
        .unwrap();
    assert_eq!(b.running("d").unwrap(), None);

    // A process that claims c and is killed with SIGKILL.
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "remote_claimer_child",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(CLAIMER_URL, &r.url)
        .envs(r.env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The test harness speaks first; the claim's line follows.
    let mut out = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let claimed: u64 = out
        .by_ref()
        .map(Result::unwrap)
        .find_map(|l| l.trim().strip_prefix("claimed ").map(str::to_owned))
        .expect("the child claims c")
        .parse()
        .unwrap();
    assert!(matches!(b.begin_run("c"), Err(Error::Busy { .. })));
    assert_eq!(b.running("c").unwrap().map(|c| c.run), Some(claimed));
    child.kill().unwrap();
    child.wait().unwrap();
    drop(out);
    // The server notices the dead connection; the claim goes stale then.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while b.running("c").unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the killed claimer's claim never went stale"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A writable open fails it, with a note, and the next claim is free.
    let c = open(&r);
    let notes = c.take_recovery_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&format!("run {claimed} on c"))),
        "{notes:?}"
    );
    let again = c.begin_run("c").unwrap();
    c.fail_run(&again, "test over").unwrap();
}

// ---- gc on a remote store (objects-format.md, "Remote gc") ----

fn prune_now() -> sessctl_store::gc::GcOptions {
    sessctl_store::gc::GcOptions {
        prune: sessctl_store::gc::Prune::Now,
        ..sessctl_store::gc::GcOptions::default()
    }
}

fn packs_in_bucket(r: &servers::Remote) -> std::collections::BTreeSet<String> {
    r.servers
        .list_keys(&r.name, "store/packs/")
        .into_iter()
        .collect()
}

/// A handle that keeps no pack cache on disk: it reads the bucket.
fn open_uncached(r: &servers::Remote) -> Store {
    let uncached = S3Settings {
        cache_dir: None,
        ..r.s3_settings()
    };
    Store::open_remote_with(&r.url, &OpenOptions::default(), &uncached).unwrap()
}

/// One request to the test's bucket behind the store's back (moto checks
/// no signature): `method` on `key` with `body`; returns moto's answer.
fn bucket_request(r: &servers::Remote, method: &str, key: &str, body: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", r.servers.moto_port)).unwrap();
    write!(
        s,
        "{method} /{}/{key} HTTP/1.1\r\nHost: 127.0.0.1\r\n{}Content-Length: {}\r\nConnection: close\r\n\r\n",
        r.name,
        servers::MOTO_AUTH,
        body.len(),
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
}

/// Deletes an object from the bucket behind the store's back.
fn delete_key(r: &servers::Remote, key: &str) {
    let answer = bucket_request(r, "DELETE", key, b"");
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
}

/// Every object the store lists reads back and re-hashes to its id, every
/// ref's messages load, and fsck --full is clean, on a handle without a
/// cache.
fn all_reads_and_verifies(r: &servers::Remote) {
    let fresh = open_uncached(r);
    for id in fresh.odb().backend().ids().unwrap() {
        fresh
            .odb()
            .read(&id)
            .unwrap_or_else(|e| panic!("object {id}: {e}"));
    }
    for (name, target) in fresh.refs().unwrap() {
        if let RefTarget::Session(id) = target {
            fresh
                .odb()
                .load_messages(&id)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    assert_fsck_clean(&fresh);
}

/// A conversation deleted and its ref log expired: a gc within the grace
/// period keeps all of it; `--prune=now` drops its rows in PostgreSQL and
/// deletes its pack from the bucket, and the other conversation reads on.
#[test]
fn gc_drops_an_abandoned_conversation_and_its_pack_leaves_the_bucket() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    // Created first: HEAD moves on to the other one.
    let (_, gone) = store
        .create(Some("gone"), turn(&["abandoned text"]), Durability::Sync)
        .unwrap();
    let gone_packs: Vec<String> = packs_in_bucket(&r).into_iter().collect();
    assert_eq!(gone_packs.len(), 1, "{gone_packs:?}");
    let (_, keep) = store
        .create(Some("keep"), turn(&["kept text"]), Durability::Sync)
        .unwrap();
    let mut before = packs_in_bucket(&r);
    before.remove(&gone_packs[0]);
    store.delete("gone", Durability::Sync).unwrap();
    store
        .expire_reflog(None, i64::MAX, false, Durability::Sync)
        .unwrap();

    let within = store.gc(&sessctl_store::gc::GcOptions::default()).unwrap();
    assert_eq!(within.pruned, 0);
    assert!(within.kept_young >= 2, "{within:?}");
    assert_eq!(within.storage_deleted, 0, "{within:?}");
    assert!(packs_in_bucket(&r).contains(&gone_packs[0]));

    let listed = packs_in_bucket(&r);
    let report = store.gc(&prune_now()).unwrap();
    assert!(report.pruned >= 2, "{report:?}");
    let after = packs_in_bucket(&r);
    // What left the bucket, the abandoned conversation's pack among it, is
    // what the report says.
    assert_eq!(
        report.storage_deleted,
        listed.difference(&after).count(),
        "{report:?}"
    );
    assert!(!after.contains(&gone_packs[0]), "{after:?}");
    assert_eq!(after, before);
    let rows = r.servers.psql(
        &r.name,
        &format!(
            "SELECT count(*) FROM sessctl.objects WHERE id = decode('{}', 'hex')",
            gone.to_hex()
        ),
    );
    assert_eq!(rows.trim(), "0");
    let fresh = open_uncached(&r);
    assert_eq!(contents(&fresh, &keep), ["kept text"]);
    assert!(matches!(
        fresh.odb().read(&gone),
        Err(Error::NotFound { .. })
    ));
    all_reads_and_verifies(&r);
}

/// Many small packs (one per write) are merged into one by gc: a handle
/// that found the objects' old places before still reads them while the
/// old packs are within the grace period; `--prune=now` deletes them, and
/// a handle still holding the old places finds the objects' new ones.
#[test]
fn gc_merges_small_packs_and_old_places_read_until_the_grace_period_ends() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let mut heads = Vec::new();
    for i in 0..6 {
        let text = format!("conversation {i}");
        let (_, h) = store
            .create(Some(&format!("c{i}")), turn(&[&text]), Durability::Sync)
            .unwrap();
        heads.push((h, text));
    }
    let before = packs_in_bucket(&r);
    assert_eq!(before.len(), 6, "{before:?}");
    // Two handles that know where every object was, neither has fetched a
    // pack yet.
    let within = open_uncached(&r);
    let stale = open_uncached(&r);

    let report = store.gc(&sessctl_store::gc::GcOptions::default()).unwrap();
    assert_eq!(report.pruned, 0);
    let rows = r
        .servers
        .psql(&r.name, "SELECT count(*) FROM sessctl.packs");
    assert_eq!(rows.trim(), "1");
    let merged: Vec<String> = packs_in_bucket(&r).difference(&before).cloned().collect();
    assert_eq!(merged.len(), 1, "{merged:?}");
    assert!(packs_in_bucket(&r).is_superset(&before));
    for (h, text) in &heads {
        assert_eq!(contents(&within, h), [text.as_str()]);
    }
    all_reads_and_verifies(&r);

    store.gc(&prune_now()).unwrap();
    assert_eq!(packs_in_bucket(&r).into_iter().collect::<Vec<_>>(), merged);
    for (h, text) in &heads {
        // The object read first, before anything makes the handle catch up.
        stale
            .odb()
            .read(h)
            .unwrap_or_else(|e| panic!("object {h}: {e}"));
        assert_eq!(contents(&stale, h), [text.as_str()]);
    }
    all_reads_and_verifies(&r);
}

/// A writer that staged its pack and then waited on the write lock while
/// a gc's sweep deleted the pack from the bucket (as it deletes an orphan
/// older than the grace period) uploads it again under the lock: it never
/// commits rows naming a pack that is gone. Here the sweep was under way
/// (announced, `chain_head.sweeps` odd) when the writer looked.
#[test]
fn a_writer_whose_staged_pack_was_swept_while_it_waited_uploads_it_again() {
    swept_while_waiting(
        "UPDATE sessctl.chain_head SET sweeps = (sweeps | 1) + 2",
        "BEGIN; SELECT seq FROM sessctl.chain_head FOR UPDATE; SELECT pg_sleep(600)",
    );
}

/// As above, the sweep announced, done and ended (an even value again)
/// while the writer waited: the value differs from the one it saw.
#[test]
fn a_writer_checks_its_pack_after_a_whole_sweep_ran_while_it_waited() {
    swept_while_waiting(
        "SELECT 1",
        "BEGIN; SELECT seq FROM sessctl.chain_head FOR UPDATE;
         UPDATE sessctl.chain_head SET sweeps = (sweeps | 1) + 3;
         DO $$ BEGIN PERFORM pg_sleep(600); EXCEPTION WHEN query_canceled THEN NULL; END $$;
         COMMIT",
    );
}

/// A writer stages its pack while `holder` (a psql session) holds the
/// write lock, after `before` ran; the pack is deleted; the holder is
/// cancelled (it commits what it did, or rolls back): the writer commits
/// and its pack is in the bucket.
fn swept_while_waiting(before: &str, holder: &str) {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, root) = store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    let packs_before = packs_in_bucket(&r);
    r.servers.psql(&r.name, before);
    // Another session holds the write lock.
    let mut holder = r.servers.psql_background(&r.name, holder);
    // This test's database only: tests run at once on one server.
    let holding = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(600)%' \
                   AND state = 'active' AND pid <> pg_backend_pid() \
                   AND datname = current_database()";
    while r.servers.psql(&r.name, holding).trim() != "1" {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let url = r.url.clone();
    let s3 = r.s3_settings();
    let writer = std::thread::spawn(move || {
        let opts = OpenOptions {
            wait: Some(std::time::Duration::from_secs(300)),
            ..OpenOptions::default()
        };
        let w = Store::open_remote_with(&url, &opts, &s3).unwrap();
        w.commit(
            "a",
            Some(root),
            turn(&["staged long ago"]),
            Durability::Sync,
        )
    });
    // Its pack is staged (uploaded before the lock) ...
    let staged = loop {
        let now = packs_in_bucket(&r);
        if let Some(k) = now.difference(&packs_before).next() {
            break k.clone();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // ... and swept while it waits.
    delete_key(&r, &staged);
    r.servers.psql(
        &r.name,
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity \
         WHERE query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid() \
         AND datname = current_database()",
    );
    let _ = holder.wait();
    let id = writer.join().unwrap().unwrap();
    assert!(packs_in_bucket(&r).contains(&staged));
    assert_eq!(
        contents(&open_uncached(&r), &id),
        ["start", "staged long ago"]
    );
    all_reads_and_verifies(&r);
}

/// A writer that found an object already stored (so left it out of its
/// pack) after a gc dropped it: the existence check under the lock asks
/// PostgreSQL, not the handle's memory, and the write stores it again.
#[test]
fn a_writer_deduplicating_against_an_object_gc_dropped_stores_it_again() {
    let Some((r, _store)) = remote_store() else {
        return;
    };
    let writer = open(&r);
    let (_, first) = writer
        .create(Some("old"), turn(&["the same words"]), Durability::Sync)
        .unwrap();
    // HEAD moves on to another conversation.
    writer
        .create(Some("other"), turn(&["other words"]), Durability::Sync)
        .unwrap();
    let blobs: Vec<ObjectId> = writer.odb().session(&first).unwrap().blobs().collect();
    assert!(!blobs.is_empty());
    writer.delete("old", Durability::Sync).unwrap();
    writer
        .expire_reflog(None, i64::MAX, false, Durability::Sync)
        .unwrap();
    // Another process collects: the message's blob goes.
    let report = open(&r).gc(&prune_now()).unwrap();
    assert!(report.pruned >= 2, "{report:?}");
    // The writer, which remembers the blob as stored, writes it again.
    let (_, again) = writer
        .create(Some("new"), turn(&["the same words"]), Durability::Sync)
        .unwrap();
    let named: Vec<ObjectId> = writer.odb().session(&again).unwrap().blobs().collect();
    assert!(named.iter().any(|b| blobs.contains(b)), "no shared blob");
    assert_eq!(contents(&open_uncached(&r), &again), ["the same words"]);
    all_reads_and_verifies(&r);
}

/// A process commits in a loop while gc (`--prune=now`, the shortest grace)
/// runs again and again, with abandoned conversations to drop and small
/// packs to merge: every acknowledged commit stays readable.
#[test]
fn gc_while_another_process_commits_keeps_every_acknowledged_commit() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    store
        .create(Some("a"), turn(&["start a"]), Durability::Sync)
        .unwrap();
    store
        .create(Some("b"), turn(&["start b"]), Durability::Sync)
        .unwrap();
    let mut child = spawn_writer(&r, 0, 40, &[]);
    let mut runs = 0;
    let mut pruned = 0;
    while child.try_wait().unwrap().is_none() {
        let name = format!("junk{runs}");
        store
            .create(Some(&name), turn(&[&name]), Durability::Sync)
            .unwrap();
        store.delete(&name, Durability::Sync).unwrap();
        store
            .expire_reflog(None, i64::MAX, false, Durability::Sync)
            .unwrap();
        pruned += store.gc(&prune_now()).unwrap().pruned;
        runs += 1;
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{runs} gc runs during the writer's 40 commits, {pruned} objects pruned");
    assert!(runs >= 1 && pruned >= 1);
    let fresh = open_uncached(&r);
    let mut acked = 0;
    for line in stdout.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        match f[..] {
            ["ack", _, id] => {
                let id = ObjectId::from_hex(id).unwrap();
                fresh
                    .odb()
                    .load_messages(&id)
                    .unwrap_or_else(|e| panic!("acknowledged {id}: {e}"));
                acked += 1;
            }
            ["error", ..] => panic!("the writer failed: {line}"),
            _ => {}
        }
    }
    assert!(acked >= 1, "{stdout}");
    all_reads_and_verifies(&r);
}

/// A store of schema version 2 (before `sessctl.retired_packs`) opens
/// read-only as it is; its first writable open applies migration 3, and
/// gc collects.
#[test]
fn a_version_2_store_reads_read_only_and_its_first_writable_open_lets_gc_work() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    store
        .create(Some("gone"), turn(&["gone"]), Durability::Sync)
        .unwrap();
    let (_, keep) = store
        .create(Some("keep"), turn(&["kept"]), Durability::Sync)
        .unwrap();
    store.delete("gone", Durability::Sync).unwrap();
    store
        .expire_reflog(None, i64::MAX, false, Durability::Sync)
        .unwrap();
    drop(store);
    r.servers.undo_identity(&r.name);
    r.servers.psql(
        &r.name,
        "DROP TABLE sessctl.retired_packs; DROP TABLE sessctl.lineage;
         ALTER TABLE sessctl.chain_head DROP COLUMN sweeps;
         ALTER TABLE sessctl.packs DROP COLUMN body;
         ALTER TABLE sessctl.chain_head DROP COLUMN inline_bytes;
         DELETE FROM sessctl.schema_version WHERE version >= 3",
    );
    let version = || {
        r.servers
            .psql(&r.name, "SELECT max(version) FROM sessctl.schema_version")
            .trim()
            .to_owned()
    };
    let ro = Store::open_remote_with(
        &r.url,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
        &r.s3_settings(),
    )
    .unwrap();
    assert_eq!(contents(&ro, &keep), ["kept"]);
    assert_eq!(version(), "2");
    let packs = packs_in_bucket(&r);
    // The first writable open applies the migrations it lacks; gc then prunes.
    let rw = open(&r);
    assert_eq!(version(), REMOTE_SCHEMA_VERSION.to_string());
    let next = rw
        .commit("keep", Some(keep), turn(&["more"]), Durability::Sync)
        .unwrap();
    assert!(packs_in_bucket(&r).len() > packs.len());
    let report = rw.gc(&prune_now()).unwrap();
    assert!(report.pruned >= 2, "{report:?}");
    assert_eq!(contents(&open_uncached(&r), &next), ["kept", "more"]);
    all_reads_and_verifies(&r);
}

/// Every key in PostgreSQL's index table with its value, as text.
fn index_keys(r: &servers::Remote) -> String {
    r.servers.psql(
        &r.name,
        "SELECT encode(key, 'hex') || ' ' || encode(value, 'hex') FROM sessctl.index_keys ORDER BY key",
    )
}

/// Makes every operation row unreadable, so that a handle that replayed
/// them would fail: what a handle reads from the index keys alone works.
fn garble_ops(r: &servers::Remote) {
    r.servers
        .psql(&r.name, "UPDATE sessctl.ops SET body = '\\x00'::bytea");
}

/// The index lives in PostgreSQL, kept in each write's transaction: a
/// handle opened afterwards (another process, another machine) reads refs,
/// summaries and the newest-first listing from there without replaying a
/// single operation, and one open already sees another's later commit the
/// same way. (With the operation rows unreadable, a replay would fail.)
#[test]
fn a_second_handle_reads_the_index_from_postgres_without_replaying() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, a0) = store
        .create(Some("a"), turn(&["first", "ok"]), Durability::Sync)
        .unwrap();
    let a1 = store
        .commit("a", Some(a0), turn(&["second", "ok"]), Durability::Sync)
        .unwrap();
    store
        .create(Some("b"), turn(&["other"]), Durability::Sync)
        .unwrap();
    let other = open(&r);
    let c0 = store
        .create(Some("c"), turn(&["newest"]), Durability::Sync)
        .unwrap()
        .1;
    let names = |s: &Store| -> Vec<String> {
        s.conversations(None)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect()
    };
    let expected = names(&store);
    assert_eq!(expected, ["c", "b", "a"]);
    garble_ops(&r);

    let fresh = open(&r);
    assert_eq!(names(&fresh), expected);
    let a = fresh.conversation("a").unwrap().unwrap();
    assert_eq!((a.head, a.sessions, a.messages), (Some(a1), 2, 4));
    assert_eq!(a.preview, "first");
    assert_eq!(
        fresh
            .resolve_ref(&RefName::conversation("c").unwrap())
            .unwrap(),
        Some(c0)
    );
    assert_eq!(fresh.session_info(&a1).unwrap().unwrap().messages, 4);
    // The handle opened before "c" sees it too, and writes on top of it.
    assert_eq!(names(&other), expected);
    other
        .commit("c", Some(c0), turn(&["from the other"]), Durability::Sync)
        .unwrap();
    assert_eq!(names(&fresh), ["c", "b", "a"]);
    assert_eq!(fresh.conversation("c").unwrap().unwrap().messages, 2);
}

/// A writer killed after running its statements but before PostgreSQL's
/// commit leaves the index keys as they were, byte for byte.
#[test]
fn a_writer_killed_before_commit_leaves_the_index_keys_unchanged() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    let before = index_keys(&r);
    assert!(before.lines().count() > 3, "{before}");
    writer_killed_before_commit(&r);
    assert_eq!(index_keys(&r), before);
    assert_fsck_clean(&open(&r));
}

/// A store written by schema version 1 (no index keys) still opens: read
/// only, from its operations as before; the first writable open upgrades
/// it, building the keys from the operations, and writes go on.
#[test]
fn a_schema_version_1_store_opens_and_is_upgraded_by_its_first_writable_open() {
    let Some(r) = servers::remote() else {
        return;
    };
    assert!(RemoteBackend::init_at_version(&r.url, &r.s3_settings(), 1).unwrap());
    let version = || {
        r.servers
            .psql(&r.name, "SELECT max(version) FROM sessctl.schema_version")
            .trim()
            .to_owned()
    };
    assert_eq!(version(), "1");
    // An empty one is upgraded at once.
    let store = open(&r);
    assert_eq!(version(), REMOTE_SCHEMA_VERSION.to_string());
    let (_, a0) = store
        .create(Some("a"), turn(&["old", "store"]), Durability::Sync)
        .unwrap();
    store
        .create(Some("b"), turn(&["newer"]), Durability::Sync)
        .unwrap();
    drop(store);
    // What a version-1 sessctl would have written: the same rows, less
    // those of the later migrations.
    r.servers.undo_identity(&r.name);
    r.servers.psql(
        &r.name,
        "DROP TABLE sessctl.index_keys;
         DROP TABLE sessctl.retired_packs;
         DROP TABLE sessctl.lineage;
         ALTER TABLE sessctl.chain_head DROP COLUMN index_seq;
         ALTER TABLE sessctl.chain_head DROP COLUMN sweeps;
         ALTER TABLE sessctl.packs DROP COLUMN body;
         ALTER TABLE sessctl.chain_head DROP COLUMN inline_bytes;
         DELETE FROM sessctl.schema_version WHERE version >= 2",
    );
    assert_eq!(version(), "1");

    let ro = Store::open_remote_with(
        &r.url,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
        &r.s3_settings(),
    )
    .unwrap();
    assert_eq!(ro.conversations(None).unwrap().len(), 2);
    assert_eq!(version(), "1");

    let rw = open(&r);
    assert_eq!(version(), REMOTE_SCHEMA_VERSION.to_string());
    assert_eq!(
        r.servers
            .psql(&r.name, "SELECT index_seq = seq FROM sessctl.chain_head")
            .trim(),
        "t"
    );
    let names: Vec<String> = rw
        .conversations(None)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["b", "a"]);
    rw.commit("a", Some(a0), turn(&["upgraded"]), Durability::Sync)
        .unwrap();
    garble_ops(&r);
    assert_eq!(open(&r).conversation("a").unwrap().unwrap().messages, 3);
}

/// fsck --full compares PostgreSQL's index keys with a replay of the
/// operations and names each key that differs; reindex rebuilds them.
#[test]
fn fsck_full_names_a_wrong_index_key_and_reindex_rebuilds_it() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, a0) = store
        .create(Some("a"), turn(&["start"]), Durability::Sync)
        .unwrap();
    store
        .commit("a", Some(a0), turn(&["more"]), Durability::Sync)
        .unwrap();
    let good = index_keys(&r);
    let full = FsckOptions { full: true };
    let problems = |s: &Store| s.fsck(&full, &mut |_, _| {}).unwrap().problems;
    assert_eq!(problems(&open(&r)), Vec::<String>::new());
    r.servers.psql(
        &r.name,
        "DELETE FROM sessctl.index_keys WHERE key = convert_to('c:a', 'UTF8');
         UPDATE sessctl.index_keys SET value = '\\x00'::bytea WHERE key = convert_to('r:refs/heads/a', 'UTF8');
         INSERT INTO sessctl.index_keys VALUES (convert_to('u:ghost', 'UTF8'), '\\x01'::bytea)",
    );
    let found = problems(&open(&r));
    for want in [
        "key c:a is missing from PostgreSQL",
        "key r:refs/heads/a differs",
        "key u:ghost is in PostgreSQL, but no operation made it",
    ] {
        assert!(found.iter().any(|p| p.contains(want)), "{want}: {found:#?}");
    }
    let fixed = open(&r);
    assert_eq!(fixed.reindex().unwrap(), 2);
    assert_eq!(index_keys(&r), good);
    assert_eq!(problems(&open(&r)), Vec::<String>::new());
}

/// Opening a remote store and listing it read no object row: where the
/// objects live is read once a handle first needs an object, so `ls` on a
/// store of any history costs a few statements. (With the table out of
/// reach, a handle that read it at open would fail.)
#[test]
fn opening_and_listing_read_no_object_row() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, a0) = store
        .create(Some("a"), turn(&["first"]), Durability::Sync)
        .unwrap();
    store
        .create(Some("b"), turn(&["second"]), Durability::Sync)
        .unwrap();
    r.servers.psql(
        &r.name,
        "ALTER TABLE sessctl.objects RENAME TO objects_out_of_reach",
    );
    let fresh = open(&r);
    let names: Vec<String> = fresh
        .conversations(None)
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["b", "a"]);
    assert_eq!(
        fresh
            .resolve_ref(&RefName::conversation("a").unwrap())
            .unwrap(),
        Some(a0)
    );
    // The first object read needs the table.
    assert!(fresh.odb().load_messages(&a0).is_err());
    r.servers.psql(
        &r.name,
        "ALTER TABLE sessctl.objects_out_of_reach RENAME TO objects",
    );
    assert_eq!(contents(&fresh, &a0), ["first"]);
}

/// A backend handle of its own on the store (where a `Store` keeps its
/// backend to itself), for the figures it counts.
fn open_backend(r: &servers::Remote) -> RemoteBackend {
    RemoteBackend::open_with(&r.url, &OpenOptions::default(), &r.s3_settings()).unwrap()
}

/// What a writer says it will read under the lock comes back with the
/// lock, in its round trip (objects-format.md, "Remote writes", step 2):
/// under the lock, every key and object asked about is answered, present
/// or absent, from that read, and as PostgreSQL holds it; and a lock taken
/// without it (by another hold of the same handle) reads as before.
#[test]
fn the_reads_a_writer_announces_come_back_with_the_lock() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, root) = store
        .create(Some("a"), turn(&["first", "ok"]), Durability::Sync)
        .unwrap();
    // Every key there is, as PostgreSQL holds it.
    let rows: Vec<(Vec<u8>, Vec<u8>)> = index_keys(&r)
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (hex(k), hex(v))
        })
        .collect();
    assert!(rows.len() > 4, "{rows:?}");
    let absent_key = b"c:no-such-conversation".to_vec();
    let absent_id = ObjectId::from_bytes([7; 32]);
    let mut keys: Vec<Vec<u8>> = rows.iter().map(|(k, _)| k.clone()).collect();
    keys.push(absent_key.clone());
    let ids = vec![root, absent_id];

    let backend = open_backend(&r);
    let kept = backend.kept_index().unwrap();
    kept.read_with_lock(&keys, &ids);
    let lock = backend.write_lock().unwrap();
    let asked = backend.counts().0;
    for (k, v) in &rows {
        assert_eq!(kept.index_get(k).unwrap().as_ref(), Some(v), "{k:?}");
    }
    assert_eq!(kept.index_get(&absent_key).unwrap(), None);
    assert!(backend.contains(&root).unwrap());
    assert!(!backend.contains(&absent_id).unwrap());
    // All of it from the lock's read: nothing asked on the reader.
    assert_eq!(backend.counts().0, asked);
    drop(lock);

    // The next hold was told nothing: it asks when asked.
    let lock = backend.write_lock().unwrap();
    let asked = backend.counts().0;
    assert_eq!(
        kept.index_get(&rows[0].0).unwrap().as_ref(),
        Some(&rows[0].1)
    );
    assert_eq!(backend.counts().0, asked + 1);
    drop(lock);
    // And the store writes on through it all.
    store
        .commit("a", Some(root), turn(&["more"]), Durability::Sync)
        .unwrap();
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A fresh handle on a store of many objects looks up where the objects
/// it reads live, a few rows for a few objects, never the whole table
/// (objects-format.md, "Object rows"): one object read is one row, a batch
/// read one statement for the batch, a prefix a range of the primary key;
/// only the verbs that need every object (here `ids`) read every row.
#[test]
fn a_fresh_handle_reads_the_object_rows_of_what_it_reads_only() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let mut batch = WriteBatch::new();
    let blobs: Vec<ObjectId> = (0..3000)
        .map(|i| {
            batch
                .blob(&json!({"role": "user", "content": format!("message {i}")}))
                .unwrap()
        })
        .collect();
    store.odb().write(&batch, Durability::Sync).unwrap();
    let (_, head) = store
        .create(Some("a"), turn(&["first", "ok"]), Durability::Sync)
        .unwrap();
    let total = 3000 + 3;

    let fresh = open_backend(&r);
    let rows = |b: &RemoteBackend| b.object_rows();
    let queries = |b: &RemoteBackend| b.counts().0;
    let obj = fresh.read(&blobs[1234]).unwrap().unwrap();
    assert_eq!(obj.id(), blobs[1234]);
    assert_eq!(rows(&fresh), 1);
    // Kept: read again, asked nothing.
    let asked = queries(&fresh);
    fresh.read(&blobs[1234]).unwrap().unwrap();
    assert!(fresh.contains(&blobs[1234]).unwrap());
    assert_eq!((rows(&fresh), queries(&fresh)), (1, asked));
    assert!(fresh.contains(&head).unwrap());
    assert_eq!(rows(&fresh), 2);

    // A batch: one statement, a row an object.
    let many: Vec<ObjectId> = blobs[..100].to_vec();
    let asked = queries(&fresh);
    let mut seen = 0;
    fresh
        .read_many(&many, &mut |i, kind, payload| {
            assert_eq!(kind, sessctl_store::ObjectKind::Blob);
            assert!(String::from_utf8_lossy(payload).contains(&format!("message {i}")));
            seen += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, 100);
    assert_eq!((rows(&fresh), queries(&fresh)), (102, asked + 1));

    // A prefix, even or odd in digits: the ids in its range.
    let hex = blobs[2000].to_hex();
    for digits in [6, 7, 64] {
        let before = rows(&fresh);
        let prefix = sessctl_store::Prefix::from_hex(&hex[..digits]).unwrap();
        let found = fresh.ids_with_prefix(&prefix).unwrap();
        assert!(found.contains(&blobs[2000]), "{digits} digits: {found:?}");
        assert!(found
            .iter()
            .all(|id| id.to_hex().starts_with(&hex[..digits])));
        assert!(rows(&fresh) - before <= 3, "{digits} digits");
    }
    // The store's figures are counted where they are: no row sent.
    let before = rows(&fresh);
    let stats = fresh.stats().unwrap();
    assert_eq!((stats.packs, stats.pack_objects), (2, total));
    assert_eq!(rows(&fresh), before);

    // The whole set, read only when asked for it.
    assert_eq!(fresh.ids().unwrap().len(), total);
    assert!(rows(&fresh) >= before + total as u64);
    assert_eq!(open(&r).odb().resolve(&hex[..7]).unwrap(), blobs[2000]);
}

/// A handle told an object is absent asks again the next time: an object
/// another handle stores meanwhile is then found (read, `contains`, a
/// prefix), and a write of it does not store it twice.
#[test]
fn an_object_stored_after_a_handle_was_told_it_is_absent_is_then_found() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    store
        .create(Some("a"), turn(&["first"]), Durability::Sync)
        .unwrap();
    let value = json!({"role": "user", "content": "stored later"});
    let mut batch = WriteBatch::new();
    let id = batch.blob(&value).unwrap();
    let prefix = sessctl_store::Prefix::from_hex(&id.to_hex()[..8]).unwrap();

    let reader = open_backend(&r);
    assert!(!reader.contains(&id).unwrap());
    assert!(reader.read(&id).unwrap().is_none());
    assert!(reader.ids_with_prefix(&prefix).unwrap().is_empty());
    let fresh = open(&r);
    assert!(matches!(fresh.odb().read(&id), Err(Error::NotFound { .. })));

    store.odb().write(&batch, Durability::Sync).unwrap();
    assert!(reader.contains(&id).unwrap());
    assert_eq!(reader.read(&id).unwrap().unwrap().id(), id);
    assert_eq!(reader.ids_with_prefix(&prefix).unwrap(), [id]);
    assert_eq!(fresh.odb().blob(&id).unwrap(), value);
    // The other store handle was told "absent" too; its write finds the
    // object stored and stores nothing.
    assert_eq!(fresh.odb().write(&batch, Durability::Sync).unwrap(), 0);
}

/// A batch read of objects kept in many inline packs (`inline=BYTES`,
/// "Inline packs") looks their rows up in one query and reads the packs'
/// bodies in one more, not one query a pack.
#[test]
fn a_batch_read_from_inline_packs_reads_their_bodies_in_one_query() {
    let Some((r, _)) = remote_store() else {
        return;
    };
    let url = format!("{}&inline=65536", r.url);
    let uncached = S3Settings {
        cache_dir: None,
        ..r.s3_settings()
    };
    let store = Store::open_remote_with(&url, &OpenOptions::default(), &uncached).unwrap();
    let (_, first) = store
        .create(Some("a"), turn(&["turn 0"]), Durability::Sync)
        .unwrap();
    let mut sessions = vec![first];
    for i in 1..40 {
        let at = store
            .commit("a", None, turn(&[&format!("turn {i}")]), Durability::Sync)
            .unwrap();
        sessions.push(at);
    }
    assert!(r.servers.list_keys(&r.name, "store/packs/").is_empty());

    let fresh = RemoteBackend::open_with(&url, &OpenOptions::default(), &uncached).unwrap();
    let asked = fresh.counts().0;
    let mut seen = 0;
    fresh
        .read_many(&sessions, &mut |_, kind, _| {
            assert_eq!(kind, sessctl_store::ObjectKind::Session);
            seen += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, 40);
    assert_eq!(fresh.counts().0 - asked, 2);
    assert_eq!(fresh.object_rows(), 40);
}

/// Puts `body` at `key` in the test's bucket (as `delete_key`, by hand).
fn put_key(r: &servers::Remote, key: &str, body: &[u8]) {
    r.servers.put_key(&r.name, key, body);
}

/// The golden fixture of a store at schema version 3
/// (`tests/fixtures/remote-store-v3`: `pg_dump --inserts` of its `sessctl`
/// schema, and its bucket's objects; written by the sessctl of version 5
/// with migrations 4 and 5 undone, which leaves what version 3 wrote: the
/// rows and packs the three versions write are the same):
/// it opens read-only as it is, every object verifying and every answer
/// the same; its first writable open upgrades it to this version, and it
/// then takes commits, its old sessions walking from their objects; fsck
/// is clean before and after.
#[test]
fn a_version_3_store_from_the_golden_fixture_opens_and_upgrades() {
    let Some(r) = servers::remote() else {
        return;
    };
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/remote-store-v3");
    r.servers.psql(
        &r.name,
        &std::fs::read_to_string(dir.join("schema.sql")).unwrap(),
    );
    let bucket = dir.join("bucket");
    let mut files = vec![bucket.join("store/sessctl-store")];
    for e in std::fs::read_dir(bucket.join("store/packs")).unwrap() {
        files.push(e.unwrap().path());
    }
    for f in files {
        let key = f
            .strip_prefix(&bucket)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        put_key(&r, &key, &std::fs::read(&f).unwrap());
    }
    let version = || {
        r.servers
            .psql(&r.name, "SELECT max(version) FROM sessctl.schema_version")
            .trim()
            .to_owned()
    };
    assert_eq!(version(), "3");
    let expect = |s: &Store| {
        let mut names: Vec<String> = s
            .conversations(None)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        names.sort();
        assert_eq!(names, ["europe", "geography", "poems"]);
        let head = |name: &str| s.conversation(name).unwrap().unwrap().head.unwrap();
        assert_eq!(
            s.odb().load_messages(&head("europe")).unwrap(),
            [
                json!({"role": "user", "content": "What is the capital of France?"}),
                json!({"role": "assistant", "content": "Paris."}),
                json!({"role": "user", "content": "And of Spain?"}),
                json!({"role": "assistant", "content": "Madrid."}),
            ]
        );
        assert_eq!(
            head("europe").to_hex(),
            "ebf167de35f873d42b7127789f7db1c5acfdaa8e6afdd5a4cdcf396f2026bb92"
        );
        let base = sessctl_store::graph::merge_base(s, head("europe"), head("geography")).unwrap();
        assert_eq!(
            base.map(|b| b.to_hex()).as_deref(),
            Some("2082e00b3ac4a29d3e04cce123f20a5cf3523cf82e569c91e84cc3eb841f1620")
        );
        assert_fsck_clean(s);
    };
    let ro = Store::open_remote_with(
        &r.url,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
        &r.s3_settings(),
    )
    .unwrap();
    expect(&ro);
    let geography = ro.conversation("geography").unwrap().unwrap().head.unwrap();
    assert_eq!(
        geography.to_hex(),
        "8ee3da3f3095da8b0d55c88255ad03132ef1b2d1b1f07969682bf54c34e4da89"
    );
    assert_eq!(version(), "3");
    let rw = open(&r);
    assert_eq!(version(), REMOTE_SCHEMA_VERSION.to_string());
    expect(&rw);
    let next = rw
        .commit(
            "geography",
            Some(geography),
            turn(&["and of Germany?"]),
            Durability::Sync,
        )
        .unwrap();
    assert_eq!(rw.odb().session(&next).unwrap().parents, [geography]);
    expect(&open(&r));
    all_reads_and_verifies(&r);
}

/// A continuing commit holds the write lock for two round trips
/// (objects-format.md, "Remote writes"): the one that takes it, which also
/// reads what the write announced, its parents' previews' origins
/// included once the handle has seen them; and the one that writes the
/// rows and commits. Nothing else runs while it is held.
#[test]
fn a_commit_holds_the_write_lock_for_two_round_trips() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    servers::StatementLog::enable(&r);
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    let (_, mut head) = store
        .create(Some("a"), turn(&["first", "ok"]), Durability::Sync)
        .unwrap();
    for t in 0..2 {
        head = store
            .commit(
                "a",
                Some(head),
                turn(&[&format!("turn {t}")]),
                Durability::Sync,
            )
            .unwrap();
    }
    let count = servers::StatementLog::start(&r);
    let last = store
        .commit("a", Some(head), turn(&["the last"]), Durability::Sync)
        .unwrap();
    let commit = count.since();
    let lock = commit
        .iter()
        .position(|s| s.contains("FOR UPDATE"))
        .unwrap_or_else(|| panic!("no lock taken: {commit:#?}"));
    assert!(commit[lock].starts_with("statement: BEGIN;"), "{commit:#?}");
    assert!(
        commit[lock].contains("EXECUTE sessctl_read_ahead("),
        "{commit:#?}"
    );
    assert_eq!(commit.len(), lock + 3, "{commit:#?}");
    let write = &commit[lock + 1];
    assert!(
        write.starts_with("statement: SET LOCAL synchronous_commit = off; EXECUTE sessctl_write(")
            && write.ends_with("; COMMIT"),
        "{commit:#?}"
    );
    // The flush, waited for after the lock.
    assert_eq!(
        commit[lock + 2],
        "statement: SELECT pg_logical_emit_message(true, 'sessctl', '')",
        "{commit:#?}"
    );
    // Before the lock: the head with the conversation's keys, and which
    // of the new objects are stored.
    assert_eq!(lock, 2, "{commit:#?}");
    // And it landed.
    assert_eq!(store.resolve_rev("a").unwrap(), last);
    assert_fsck_clean(&store);
}

/// `show` and `log -n` decorate what they print with the refs at those
/// sessions (`refs_to`): on a remote store that is three statements however
/// many sessions (the chain head, the reverse keys of all of them, the refs
/// those name), where it was one or two a session.
#[test]
fn the_refs_at_many_sessions_are_three_statements() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    let (_, mut head) = store
        .create(Some("a"), turn(&["first", "ok"]), Durability::Sync)
        .unwrap();
    let mut ids = vec![head];
    for t in 0..24 {
        head = store
            .commit(
                "a",
                Some(head),
                turn(&[&format!("turn {t}")]),
                Durability::Sync,
            )
            .unwrap();
        ids.push(head);
    }
    store.tag("early", ids[3], false, Durability::Sync).unwrap();
    store
        .tag("also-early", ids[3], false, Durability::Sync)
        .unwrap();
    store
        .tag("middle", ids[12], false, Durability::Sync)
        .unwrap();
    servers::StatementLog::enable(&r);
    let fresh = open(&r);
    fresh.catch_up().unwrap();
    let count = servers::StatementLog::start(&r);
    let refs = fresh.refs_to(&ids).unwrap();
    assert_eq!(count.since().len(), 3, "{:#?}", count.since());
    let names: Vec<(String, ObjectId)> = refs.iter().map(|(n, id)| (n.to_string(), *id)).collect();
    assert_eq!(
        names,
        vec![
            ("refs/heads/a".to_string(), head),
            ("refs/tags/also-early".to_string(), ids[3]),
            ("refs/tags/early".to_string(), ids[3]),
            ("refs/tags/middle".to_string(), ids[12]),
        ]
    );
    // Sessions no ref names: the head and the reverse keys, none found.
    let count = servers::StatementLog::start(&r);
    assert!(fresh.refs_to(&ids[4..12]).unwrap().is_empty());
    assert_eq!(count.since().len(), 2, "{:#?}", count.since());
}

/// `ls -n 20` on a remote store: the head, one page of `a:` keys, and the
/// page's records and run claims in one statement, not two a
/// conversation; newest first, as the local store lists them.
#[test]
fn listing_a_page_of_conversations_is_three_statements() {
    let Some(r) = servers::remote_private() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let store = open(&r);
    for k in 0..70 {
        store
            .create(
                Some(&format!("c{k:02}")),
                turn(&[&format!("hi {k}")]),
                Durability::Sync,
            )
            .unwrap();
    }
    servers::StatementLog::enable(&r);
    let fresh = open(&r);
    let count = servers::StatementLog::start(&r);
    let page = fresh.conversations(Some(20)).unwrap();
    assert_eq!(count.since().len(), 3, "{:#?}", count.since());
    let names: Vec<&str> = page.iter().map(|c| c.name.as_str()).collect();
    let want: Vec<String> = (50..70).rev().map(|k| format!("c{k:02}")).collect();
    assert_eq!(names, want);
    assert!(page.iter().all(|c| c.running.is_none() && c.head.is_some()));
    // Past one page of 64, whole or filtered: the same order.
    let names = |list: Vec<sessctl_store::index::ConversationInfo>| -> Vec<String> {
        list.into_iter().map(|c| c.name).collect()
    };
    let all: Vec<String> = (0..70).rev().map(|k| format!("c{k:02}")).collect();
    assert_eq!(names(fresh.conversations(None).unwrap()), all);
    assert_eq!(names(fresh.conversations(Some(70)).unwrap()), all);
    assert_eq!(names(fresh.conversations(Some(65)).unwrap()), all[..65]);
    let threes = fresh
        .conversations_where(Some(3), |c| c.name.ends_with('3'))
        .unwrap();
    assert_eq!(names(threes), ["c63", "c53", "c43"]);
    let other = open(&r);
    other.catch_up().unwrap();
    let count = servers::StatementLog::start(&r);
    let old = other
        .conversations_where(None, |c| c.name.as_str() < "c02")
        .unwrap();
    assert_eq!(names(old), ["c01", "c00"]);
    // The head, two pages of keys, their records.
    assert_eq!(count.since().len(), 5, "{:#?}", count.since());
}

/// A write whose compare-and-swap loses commits nothing, though its rows
/// and its commit travel together: the ref, the chain and the index are
/// as the winner left them, and the loser is told (exit 1's error).
#[test]
fn a_lost_compare_and_swap_commits_nothing_of_its_write() {
    let Some((r, store)) = remote_store() else {
        return;
    };
    let (_, root) = store
        .create(Some("a"), turn(&["first", "ok"]), Durability::Sync)
        .unwrap();
    let other = open(&r);
    let won = other
        .commit("a", Some(root), turn(&["the winner"]), Durability::Sync)
        .unwrap();
    let ops_before = psql_count(&r, "SELECT count(*) FROM sessctl.ops");
    let objects_before = psql_count(&r, "SELECT count(*) FROM sessctl.objects");
    let err = store
        .commit(
            "a",
            Some(root),
            turn(&["the loser, never stored"]),
            Durability::Sync,
        )
        .unwrap_err();
    assert!(matches!(err, Error::RefOutOfDate { .. }), "{err}");
    assert_eq!(
        psql_count(&r, "SELECT count(*) FROM sessctl.ops"),
        ops_before
    );
    assert_eq!(
        psql_count(&r, "SELECT count(*) FROM sessctl.objects"),
        objects_before
    );
    let fresh = open(&r);
    assert_eq!(fresh.resolve_rev("a").unwrap(), won);
    assert_fsck_clean(&fresh);
    // The loser's handle writes on from where the ref is.
    store
        .commit("a", Some(won), turn(&["after"]), Durability::Sync)
        .unwrap();
}

fn psql_count(r: &servers::Remote, sql: &str) -> i64 {
    r.servers.psql(&r.name, sql).trim().parse().unwrap()
}

/// The write's own statement checks its compare-and-swaps and writes
/// nothing when one does not hold, whether its rows travel with the
/// `COMMIT` (a commit's) or are bound as parameters (a write of more than
/// 1 MiB of them, here an inline pack of about 1.5 MiB): a ref moved in
/// PostgreSQL behind the index's back (which the store's own checks, made
/// against the index, cannot see) makes the commit `RefOutOfDate`, naming
/// what the ref holds, and leaves every row as it was.
#[test]
fn a_compare_and_swap_only_the_statement_sees_commits_nothing() {
    for big in [false, true] {
        let Some(r) = servers::remote() else {
            return;
        };
        assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
        let url = if big {
            format!("{}&inline=4194304", r.url)
        } else {
            r.url.clone()
        };
        let store =
            Store::open_remote_with(&url, &OpenOptions::default(), &r.s3_settings()).unwrap();
        let (_, root) = store
            .create(Some("a"), turn(&["first", "ok"]), Durability::Sync)
            .unwrap();
        let (_, other) = store
            .create(Some("b"), turn(&["another"]), Durability::Sync)
            .unwrap();
        r.servers.psql(
            &r.name,
            &format!("UPDATE sessctl.refs SET target = '{other}' WHERE name = 'refs/heads/a'"),
        );
        let rows = || {
            r.servers.psql(
                &r.name,
                "SELECT (SELECT count(*) FROM sessctl.ops), (SELECT count(*) FROM sessctl.objects),
                        (SELECT count(*) FROM sessctl.packs), (SELECT count(*) FROM sessctl.lineage),
                        (SELECT md5(string_agg(encode(key, 'hex') || encode(value, 'hex'), ',' ORDER BY key))
                         FROM sessctl.index_keys),
                        (SELECT seq || ' ' || encode(hash, 'hex') || ' ' || inline_bytes FROM sessctl.chain_head),
                        (SELECT string_agg(name || '=' || target, ',' ORDER BY name) FROM sessctl.refs)",
            )
        };
        let before = rows();
        let text = if big {
            // About 1.5 MiB that zstd cannot shrink much (random hex).
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            (0..1_500_000)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    char::from(b"0123456789abcdef"[(x % 16) as usize])
                })
                .collect::<String>()
        } else {
            "the loser".to_string()
        };
        let err = store
            .commit("a", Some(root), turn(&[&text]), Durability::Sync)
            .unwrap_err();
        match &err {
            Error::RefOutOfDate { actual, .. } => {
                assert_eq!(actual.as_deref(), Some(other.to_hex().as_str()), "{err}")
            }
            _ => panic!("big {big}: {err}"),
        }
        assert_eq!(rows(), before, "big {big}");
    }
}

/// Rows no write leaves (an object row of an unknown kind, the chain
/// head's row gone) are damage, which fsck and the CLI report as such
/// (exit 3), not a server that failed a request (exit 1).
#[test]
fn rows_no_write_leaves_are_damage_not_a_failed_server() {
    let Some(r) = servers::remote() else {
        return;
    };
    assert!(RemoteBackend::init(&r.url, &r.s3_settings()).unwrap());
    let (_, head) = open(&r)
        .create(Some("c"), turn(&["x"]), Durability::Sync)
        .unwrap();
    r.servers.psql(
        &r.name,
        &format!(
            "UPDATE sessctl.objects SET kind = 99 WHERE id = decode('{}', 'hex')",
            head.to_hex()
        ),
    );
    let fresh = open_uncached(&r);
    let err = fresh.odb().read(&head).unwrap_err();
    assert!(err.is_corruption(), "{err:?}");
    assert!(err.to_string().contains("unknown kind 99"), "{err}");
    match fresh.fsck(&FsckOptions::default(), &mut |_, _| {}) {
        Ok(report) => assert!(!report.problems.is_empty()),
        Err(e) => assert!(e.is_corruption(), "{e:?}"),
    }
    r.servers.psql(&r.name, "DELETE FROM sessctl.chain_head");
    let err = Store::open_remote_with(&r.url, &OpenOptions::default(), &r.s3_settings())
        .and_then(|s| s.conversations(None).map(|_| ()))
        .unwrap_err();
    assert!(err.is_corruption(), "{err:?}");
    assert!(
        err.to_string().contains("sessctl.chain_head is damaged"),
        "{err}"
    );
}
