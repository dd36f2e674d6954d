//! End to end on a remote store (`--store postgres://...?objects=s3://...`)
//! against real PostgreSQL and S3 servers on loopback (see
//! store/tests/support/servers.rs): the real binary, its stdout, stderr and
//! exit codes, as on a local store.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "../../store/tests/support/servers.rs"]
mod servers;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `sessctl --store STORE ARGS...` with the S3 variables of `r`.
fn sessctl_at(r: &servers::Remote, store: &str, args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("SESSCTL_STORE")
        .envs(r.env.iter().map(|(k, v)| (k, v)))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn ok(r: &servers::Remote, args: &[&str], stdin: Option<&str>) -> String {
    let run = sessctl_at(r, &r.url, args, stdin);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{args:?}");
    run.stdout
}

fn id_of(out: &str) -> String {
    let id = out.strip_suffix('\n').unwrap();
    assert!(
        id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{out:?}"
    );
    id.to_owned()
}

fn msgs(items: &[(&str, &str)]) -> String {
    Value::Array(
        items
            .iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect(),
    )
    .to_string()
}

#[test]
fn every_verb_of_a_session_works_on_a_remote_store() {
    let Some(r) = servers::remote() else {
        return;
    };
    let out = ok(&r, &["init"], None);
    assert!(
        out.starts_with("Initialized empty sessctl store in postgres://sessctl@127.0.0.1:"),
        "{out}"
    );
    let out = ok(&r, &["init"], None);
    assert!(
        out.starts_with("Reinitialized existing sessctl store"),
        "{out}"
    );

    let id1 = id_of(&ok(
        &r,
        &["commit", "--new", "demo", "--messages", "-"],
        Some(&msgs(&[
            ("user", "Fix the flaky test"),
            ("assistant", "Looking"),
        ])),
    ));
    let id2 = id_of(&ok(
        &r,
        &["commit", "demo", "--messages", "-"],
        Some(&msgs(&[("user", "go on"), ("assistant", "done")])),
    ));
    // Through HEAD, as on a local store.
    let id3 = id_of(&ok(
        &r,
        &["commit", "--messages", "-"],
        Some(&msgs(&[("user", "thanks")])),
    ));

    assert_eq!(log_ids(&r, &r.url), [id3.clone(), id2.clone(), id1.clone()]);
    let show: Value = serde_json::from_str(&ok(&r, &["show", "--json", "demo"], None)).unwrap();
    assert_eq!(show["id"], id3.as_str());
    assert_eq!(show["history_length"], 5);
    assert_eq!(
        show["shown_messages"][0]["value"]["content"], "thanks",
        "{show}"
    );
    let ls = ok(&r, &["ls", "--json"], None);
    let ls: Value = serde_json::from_str(&ls).unwrap();
    assert_eq!(ls.as_array().unwrap().len(), 1, "{ls}");
    assert_eq!(ls[0]["name"], "demo");

    // A second start of the same conversation is refused: exit 1, one line.
    let stale = sessctl_at(
        &r,
        &r.url,
        &["commit", "--new", "demo", "--messages", "-"],
        Some(&msgs(&[("user", "late")])),
    );
    assert_eq!(stale.code, 1, "{}", stale.stderr);
    assert_eq!(stale.stderr.lines().count(), 1, "{}", stale.stderr);
    assert!(stale.stderr.starts_with("sessctl: "), "{}", stale.stderr);

    // checkout -o writes the runtime layout.
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("seed");
    ok(
        &r,
        &["checkout", "demo", "-o", out_dir.to_str().unwrap()],
        None,
    );
    let display: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("display_messages.json")).unwrap())
            .unwrap();
    assert_eq!(display.as_array().unwrap().len(), 5, "{display}");
    assert!(out_dir.join("state.json").is_file());

    assert_eq!(ok(&r, &["fsck", "--full"], None), "");
    let fsck: Value = serde_json::from_str(&ok(&r, &["fsck", "--full", "--json"], None)).unwrap();
    assert_eq!(fsck["problems"], json!([]), "{fsck}");
    assert_eq!(fsck["sessions"], 3, "{fsck}");

    // import: an OpenAI chat file becomes a conversation; importing it
    // again writes nothing.
    let chat = dir.path().join("chat.json");
    std::fs::write(
        &chat,
        json!({"messages": [
            {"role": "user", "content": "imported question"},
            {"role": "assistant", "content": "imported answer"},
        ]})
        .to_string(),
    )
    .unwrap();
    let chat = chat.to_str().unwrap();
    let import = |what: &str| -> Value {
        let out = ok(&r, &["import", "--from", "openai", "--json", chat], None);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: {e}: {out}"))
    };
    let first = import("first");
    assert_eq!(first["sessions_written"], 1, "{first}");
    let ls: Value = serde_json::from_str(&ok(&r, &["ls", "--json"], None)).unwrap();
    let names: Vec<String> = ls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names.len(), 2, "{ls}");
    let name = names.iter().find(|n| n.starts_with("openai-")).unwrap();
    let show: Value = serde_json::from_str(&ok(&r, &["show", "--json", name], None)).unwrap();
    assert_eq!(show["history_length"], 2, "{show}");
    assert_eq!(
        show["shown_messages"][1]["value"]["content"], "imported answer",
        "{show}"
    );
    let again = import("again");
    assert_eq!(again["sessions_written"], 0, "{again}");
    assert_eq!(again["refs_moved"], 0, "{again}");

    // gc marks as locally and sweeps the bucket: an object nothing
    // reaches is kept within the grace period, dropped by --prune=now, and
    // the pack that held it leaves the bucket.
    let gc = ok(&r, &["gc", "--prune", "now"], None);
    assert!(gc.starts_with("pruned 0 of "), "{gc}");
    let before = r.servers.list_keys(&r.name, "store/packs/");
    let loose = id_of(&ok(
        &r,
        &["hash-object", "-w", "--stdin"],
        Some(r#"{"loose":true}"#),
    ));
    let loose_pack: Vec<String> = r
        .servers
        .list_keys(&r.name, "store/packs/")
        .into_iter()
        .filter(|k| !before.contains(k))
        .collect();
    assert_eq!(loose_pack.len(), 1, "{loose_pack:?}");
    let gc = ok(&r, &["gc"], None);
    assert!(gc.starts_with("pruned 0 of "), "{gc}");
    assert!(
        gc.contains(" reachable, 1 unreachable kept within the grace period;"),
        "{gc}"
    );
    let kept: Value = serde_json::from_str(&ok(&r, &["cat-object", "-p", &loose], None)).unwrap();
    assert_eq!(kept, json!({"loose": true}));
    let gc = ok(&r, &["gc", "--prune", "now"], None);
    assert!(gc.starts_with("pruned 1 of "), "{gc}");
    let gone = sessctl_at(&r, &r.url, &["cat-object", "-p", &loose], None);
    assert_ne!(gone.code, 0, "{}", gone.stdout);
    let after = r.servers.list_keys(&r.name, "store/packs/");
    assert!(!after.contains(&loose_pack[0]), "{after:?}");
    let fsck = ok(&r, &["fsck", "--full"], None);
    assert!(!fsck.contains("problem"), "{fsck}");
    assert_eq!(log_ids(&r, &r.url), [id3.clone(), id2.clone(), id1.clone()]);

    // SESSCTL_STORE names it as well as --store does.
    let out = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .args(["log", "--json", "-n", "1"])
        .env("SESSCTL_STORE", &r.url)
        .envs(r.env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let log: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(log[0]["id"], id3.as_str());
}

/// The ids `log --all` prints, newest first.
fn log_ids_all(r: &servers::Remote, store: &str) -> Vec<String> {
    let run = sessctl_at(r, store, &["log", "--all", "--json"], None);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""));
    let log: Value = serde_json::from_str(&run.stdout).unwrap();
    log.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The ids `log` prints, newest first.
fn log_ids(r: &servers::Remote, store: &str) -> Vec<String> {
    let run = sessctl_at(r, store, &["log", "--json"], None);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""));
    let log: Value = serde_json::from_str(&run.stdout).unwrap();
    log.as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_unreachable_or_missing_remote_store_is_one_clear_error() {
    let Some(r) = servers::remote() else {
        return;
    };
    // Not initialised.
    let run = sessctl_at(&r, &r.url, &["log"], None);
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.ends_with("holds no sessctl store\n"),
        "{}",
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1);
    // No server on that port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = format!("postgres://sessctl:secret@127.0.0.1:{port}/db?objects=s3://b/p");
    let run = sessctl_at(&r, &gone, &["ls"], None);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.starts_with(&format!(
            "sessctl: postgres://sessctl@127.0.0.1:{port}/db: "
        )),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("secret"), "{}", run.stderr);
    // A URL without its bucket.
    let run = sessctl_at(&r, "postgres://u@127.0.0.1/db", &["ls"], None);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("names no bucket"), "{}", run.stderr);
    // Each part that is wrong is named, and a password never shows.
    for (url, words) in [
        (
            "postgres://u@127.0.0.1/db?password=secret&objects=s3://b&bogus=1",
            "bogus= is not a parameter",
        ),
        (
            "postgres://u@127.0.0.1:99999/db?password=secret&objects=s3://b",
            "is not a number from 0 to 65535",
        ),
        (
            "postgres://u@127.0.0.1/db?objects=s3://b/a&objects=s3://b/b&password=secret",
            "objects= is given twice",
        ),
    ] {
        let run = sessctl_at(&r, url, &["ls"], None);
        assert_eq!(run.code, 1, "{url}: {}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(run.stderr.contains(words), "{url}: {}", run.stderr);
        assert!(!run.stderr.contains("secret"), "{}", run.stderr);
    }
    // Another scheme is no directory of that name.
    let run = sessctl_at(&r, "mysql://u:secret@127.0.0.1/db", &["ls"], None);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("a store is a directory or a postgres:// URL"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("secret"), "{}", run.stderr);
}

/// `for-each-ref`'s lines.
fn refs_of(r: &servers::Remote, store: &str) -> String {
    let run = sessctl_at(r, store, &["for-each-ref"], None);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""));
    run.stdout
}

/// Local -> remote -> local: the same ids and refs at each step; a second
/// push sends nothing; a pull brings back what was pushed.
#[test]
fn clone_local_to_remote_to_local_keeps_ids_and_refs() {
    let Some(r) = servers::remote() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a").to_str().unwrap().to_owned();
    let b = dir.path().join("b").to_str().unwrap().to_owned();
    let at = |store: &str, args: &[&str], stdin: Option<&str>| {
        let run = sessctl_at(&r, store, args, stdin);
        assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{store} {args:?}");
        run.stdout
    };
    at(&a, &["init"], None);
    for (conv, texts) in [("one", ["a", "b"]), ("two", ["c", "d"])] {
        at(
            &a,
            &["commit", "--new", conv, "--messages", "-"],
            Some(&msgs(&[("user", texts[0])])),
        );
        at(
            &a,
            &["commit", conv, "--messages", "-"],
            Some(&msgs(&[("assistant", texts[1])])),
        );
    }
    at(&a, &["fork", "one~1", "--as", "side"], None);

    let out = at(&a, &["clone", &a, &r.url], None);
    assert!(
        out.starts_with(&format!("cloned {a} into postgres://")),
        "{out}"
    );
    assert!(out.contains(": 3 conversations, 3 refs,"), "{out}");
    at(&a, &["clone", &r.url, &b], None);
    let all = |store: &str| {
        let run = sessctl_at(&r, store, &["log", "--all", "--json"], None);
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.stdout
    };
    assert_eq!(refs_of(&r, &r.url), refs_of(&r, &a));
    assert_eq!(refs_of(&r, &b), refs_of(&r, &a));
    assert_eq!(all(&r.url), all(&a));
    assert_eq!(all(&b), all(&a));
    assert_eq!(at(&b, &["fsck", "--full"], None), "");

    // Cloning into it again is refused: it holds conversations now.
    let again = sessctl_at(&r, &a, &["clone", &a, &r.url], None);
    assert_eq!(again.code, 1, "{}", again.stderr);
    assert!(
        again.stderr.contains("already holds conversations"),
        "{}",
        again.stderr
    );

    // A new turn pushed; pushed again, nothing is sent.
    at(
        &a,
        &["commit", "one", "--messages", "-"],
        Some(&msgs(&[("user", "e")])),
    );
    let first: Value = serde_json::from_str(&at(&a, &["push", &r.url, "--json"], None)).unwrap();
    assert!(first["objects"].as_u64().unwrap() >= 2, "{first}");
    let second: Value = serde_json::from_str(&at(&a, &["push", &r.url, "--json"], None)).unwrap();
    assert_eq!(second["objects"], 0, "{second}");
    assert!(
        second["refs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["outcome"] == "up-to-date"),
        "{second}"
    );
    // Pulled back into b, whose conversations then match a's again (a
    // pull leaves HEAD where it is; a's commit moved a's).
    at(&b, &["pull", &r.url], None);
    let heads = |store: &str| {
        refs_of(&r, store)
            .lines()
            .filter(|l| !l.ends_with(" HEAD"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(heads(&b), heads(&a));
    assert_eq!(log_ids_all(&r, &b), log_ids_all(&r, &a));
}

/// A writer that holds the remote write lock (the chain-head row) longer
/// than --wait: the other write fails with exit 4, as on a local store, and
/// goes through once it is released.
#[test]
fn a_held_remote_write_lock_is_exit_4_after_wait() {
    let Some(r) = servers::remote() else {
        return;
    };
    ok(&r, &["init"], None);
    ok(
        &r,
        &["commit", "--new", "demo", "--messages", "-"],
        Some(&msgs(&[("user", "hi")])),
    );
    // Held for 3 s; psql's first statement takes the row.
    let mut holder = r.servers.psql_background(
        &r.name,
        "BEGIN; SELECT seq FROM sessctl.chain_head FOR UPDATE; SELECT pg_sleep(3); COMMIT;",
    );
    // Until the row is taken, a no-wait write may still pass: wait for the
    // holder to show in pg_locks.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let n = r.servers.psql(
            &r.name,
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3)%' AND state = 'active' AND pid <> pg_backend_pid()",
        );
        if n.trim() != "0" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the holder never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let run = sessctl_at(
        &r,
        &r.url,
        &["--wait", "0.2", "commit", "demo", "--messages", "-"],
        Some(&msgs(&[("user", "blocked")])),
    );
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("is in use by another process"),
        "{}",
        run.stderr
    );
    assert!(holder.wait().unwrap().success());
    ok(
        &r,
        &["commit", "demo", "--messages", "-"],
        Some(&msgs(&[("user", "after")])),
    );
    assert_eq!(log_ids(&r, &r.url).len(), 2);
}

/// `sessctl log` of a long conversation on a remote store reads its
/// lineage a closure at a time and its entries' summaries a stretch at a
/// time; reading one of its sessions, its whole history or one object
/// looks up where the objects live a batch at a time (the chain of
/// sessions, the messages shown), never a statement an object nor the
/// whole table. The statements PostgreSQL runs for each command (as its own
/// log counts them, `log_statement = all` on this test's database; one test
/// counts, so that no other database's lines mix in) do not grow with the
/// conversation, where one or more an entry or turn would be 300 and more.
#[test]
fn log_and_reads_of_a_long_conversation_run_a_bounded_number_of_statements() {
    let Some(r) = servers::remote() else {
        return;
    };
    ok(&r, &["init"], None);
    let store =
        sessctl_store::Store::open_remote_with(&r.url, &Default::default(), &r.s3_settings())
            .unwrap();
    let turn = |i: usize| sessctl_store::Turn {
        messages: sessctl_store::Messages::Added(vec![
            json!({"role": "user", "content": format!("question {i}")}),
            json!({"role": "assistant", "content": format!("answer {i}")}),
        ]),
        ..Default::default()
    };
    let durability = sessctl_store::Durability::Sync;
    store.create(Some("long"), turn(0), durability).unwrap();
    for i in 1..300 {
        store.commit("long", None, turn(i), durability).unwrap();
    }
    drop(store);
    let head = log_ids(&r, &r.url)[0].clone();
    r.servers.psql(
        "postgres",
        &format!("ALTER DATABASE {} SET log_statement = 'all'", r.name),
    );
    let log = r.servers.dir().join("postgres.log");
    let statements = |args: &[&str]| -> (String, usize) {
        let from = std::fs::metadata(&log).unwrap().len() as usize;
        let out = ok(&r, args, None);
        let text = std::fs::read(&log).unwrap();
        let n = String::from_utf8_lossy(&text[from..])
            .lines()
            .filter(|l| l.contains("LOG:  statement: ") || l.contains("LOG:  execute "))
            .count();
        (out, n)
    };
    let dir = tempfile::tempdir().unwrap();
    let seed = dir.path().join("seed");
    let seed = seed.to_str().unwrap();
    for (args, shows) in [
        (&["log", "long"][..], "question 0"),
        (&["log", "--oneline", "long"], "question 0"),
        (&["log", "--json", "long"], "question 0"),
        (&["show", "long"], "answer 299"),
        (&["show", "--messages", "long"], "question 0"),
        (&["show", "--json", "long"], "answer 299"),
        (&["cat-object", "-p", &head], "parent "),
        (&["cat-object", "-t", &head[..12]], "session"),
        (&["export", "long"], "question 150"),
        (&["export", "--format", "jsonl", "long"], "answer 0"),
        (&["resume", "--json", "long"], "question 0"),
        (&["checkout", "long", "-o", seed], ""),
    ] {
        let (out, n) = statements(args);
        assert!(out.contains(shows), "{args:?}: {out}");
        eprintln!("{args:?}: {n} statements");
        assert!(n <= 40, "{args:?} ran {n} statements for 300 turns");
    }
}
