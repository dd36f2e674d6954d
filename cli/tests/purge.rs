//! End to end: a leaked secret is purged for good. `redact` rewrites what
//! holds it, `gc --prune=now --expire-reflog=now` drops the old objects,
//! and no byte of it is left anywhere in the store directory, zstd frames
//! decompressed; `reflog expire` and `gc --dry-run --why` on their own.
//! Each on a local store and on a remote one (`name::local`,
//! `name::remote`); the byte searches of the store directory are the local
//! store's only (a remote store's bytes are PostgreSQL's and S3's).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{sessctl, Target, TestStore};

use std::path::Path;

two_backends!(
    a_redacted_secret_leaves_no_byte_in_the_store,
    reflog_expire_hides_old_entries_and_keeps_chains_whole,
    redact_on_chosen_refs_warns_of_the_others_and_never_echoes_the_pattern,
    redact_refused_by_a_run_in_progress_says_nothing_was_rewritten,
    redact_names_operations_that_keep_an_earlier_title,
    redact_reaches_a_records_large_fields,
);

const SECRET: &str = "sk-live-4f9a8B7c6D5e4F3a2B1c";
const PATTERN: &str = "sk-live-[A-Za-z0-9]+";

fn ok<T: Target + ?Sized>(store: &T, args: &[&str], stdin: Option<&str>) -> String {
    let r = sessctl(store, args, stdin);
    assert_eq!(r.code, 0, "sessctl {args:?}: {}", r.stderr);
    r.stdout
}

fn commit<T: Target + ?Sized>(store: &T, args: &[&str], messages: &serde_json::Value) -> String {
    let mut a = vec!["commit"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--messages", "-"]);
    ok(store, &a, Some(&messages.to_string())).trim().to_owned()
}

fn user(text: &str) -> serde_json::Value {
    serde_json::json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> serde_json::Value {
    serde_json::json!({"role": "assistant", "content": text})
}

/// Every file under `dir` where `needle` occurs: in the raw bytes, or in
/// what any zstd frame found in them (by its magic, at any offset)
/// decompresses to. `path@offset` names a frame.
fn occurrences(dir: &Path, needle: &[u8]) -> Vec<String> {
    const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            if contains(&bytes, needle) {
                hits.push(path.display().to_string());
            }
            let mut at = 0;
            while let Some(i) = find(&bytes[at..], &ZSTD_MAGIC) {
                let start = at + i;
                let mut out = Vec::new();
                if let Ok(dec) = zstd::stream::read::Decoder::new(&bytes[start..]) {
                    use std::io::Read;
                    // A false magic or a cut frame: keep what inflated.
                    let _ = dec.single_frame().take(1 << 28).read_to_end(&mut out);
                }
                if contains(&out, needle) {
                    hits.push(format!("{}@{start}", path.display()));
                }
                at = start + 1;
            }
        }
    }
    hits
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

fn zstd_frames_in(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .map(|b| {
            b.windows(4)
                .filter(|w| *w == [0x28, 0xb5, 0x2f, 0xfd])
                .count()
        })
        .sum()
}

/// Per conversation (`ls --all --json`): sessions, messages and usage.
fn figures<T: Target + ?Sized>(store: &T) -> Vec<(String, serde_json::Value)> {
    let out = ok(store, &["ls", "--all", "--json"], None);
    let items: Vec<serde_json::Value> = match serde_json::from_str(&out) {
        Ok(serde_json::Value::Array(a)) => a,
        _ => out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    };
    let mut v: Vec<(String, serde_json::Value)> = items
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                serde_json::json!([c["sessions"], c["messages"], c["usage"]]),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn a_redacted_secret_leaves_no_byte_in_the_store(s: &TestStore) {
    // Conversations that never saw the secret.
    commit(
        &s,
        &["--new", "clean", "--title", "Clean chat"],
        &serde_json::json!([user("plan the release"), assistant("step one")]),
    );
    commit(
        &s,
        &["clean"],
        &serde_json::json!([user("and then?"), assistant("step two")]),
    );
    commit(
        &s,
        &["--new", "other"],
        &serde_json::json!([user("sk-test is not a live key"), assistant("right")]),
    );
    // The leak: once in a short message (stored raw in the journal), once
    // in a long one (compressed there), after a turn without it.
    let root = commit(
        &s,
        &["--new", "leak", "--title", "Deploy"],
        &serde_json::json!([user("deploy the app"), assistant("which key?")]),
    );
    let padding = "lorem ipsum dolor sit amet ".repeat(300);
    commit(
        &s,
        &["leak"],
        &serde_json::json!([
            user(&format!("use {SECRET}")),
            assistant(&format!("{padding} noted {SECRET} {padding}")),
        ]),
    );
    commit(
        &s,
        &["leak"],
        &serde_json::json!([user("thanks"), assistant("done")]),
    );
    // A conversation that opens with it: its preview (the first user
    // message) lands in the index tables.
    commit(
        &s,
        &["--new", "leak2"],
        &serde_json::json!([user(&format!("{SECRET} is my key")), assistant("noted")]),
    );
    // A fork that keeps the secret, one that cuts before it, a tag on the
    // leaking session, and a compaction whose summary quotes it (the
    // summarizer echoes the messages it is given).
    ok(
        &s,
        &["fork", "leak", "--at-message", "4", "--as", "leakfork"],
        None,
    );
    commit(
        &s,
        &["leakfork"],
        &serde_json::json!([user("forked"), assistant("yes")]),
    );
    ok(
        &s,
        &["fork", "leak", "--at-message", "2", "--as", "early"],
        None,
    );
    let leaking = ok(&s, &["rev-parse", "leak~1"], None).trim().to_owned();
    ok(&s, &["update-ref", "refs/tags/before", &leaking], None);
    ok(
        &s,
        &["compact", "leak", "--summarizer", "cat", "--keep-last", "2"],
        None,
    );
    ok(&s, &["checkout", "clean"], None);
    ok(&s, &["rm", "early"], None);
    let export_before: Vec<String> = ["clean", "other"]
        .iter()
        .map(|c| ok(&s, &["export", c], None))
        .collect();
    let leak_len = ok(&s, &["export", "leak"], None);
    let leak_len: serde_json::Value = serde_json::from_str(&leak_len).unwrap();
    let leaking_blob = {
        let show = ok(&s, &["cat-object", "--json", &leaking], None);
        let v: serde_json::Value = serde_json::from_str(&show).unwrap();
        v["messages"]["added"][0].as_str().unwrap().to_owned()
    };
    assert!(ok(&s, &["cat-object", "-p", &leaking_blob], None).contains(SECRET));

    // The search can fail: the secret is there, in the journal, raw and
    // compressed; and after a repack inside a pack's zstd frames, and in
    // the index table it writes (leak2's preview).
    if let Some(dir) = s.path() {
        let before = occurrences(dir, SECRET.as_bytes());
        assert!(before.iter().any(|h| h.contains("journal")), "{before:?}");
    }
    ok(&s, &["repack"], None);
    if let Some(dir) = s.path() {
        let packed = occurrences(dir, SECRET.as_bytes());
        assert!(packed.iter().any(|h| h.contains(".pack@")), "{packed:?}");
        assert!(packed.iter().any(|h| h.ends_with(".sit")), "{packed:?}");
        assert!(zstd_frames_in(&dir.join("packs")) > 0);
    }

    // A dry run lists and writes nothing.
    let reflog_before = ok(&s, &["reflog"], None);
    let dry = ok(&s, &["redact", PATTERN, "--dry-run", "--json"], None);
    let dry: serde_json::Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["op"], serde_json::Value::Null);
    let moved: Vec<&str> = dry["refs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["ref"].as_str().unwrap())
        .collect();
    // The tag, both conversations that hold the secret, and nothing else.
    assert_eq!(
        moved,
        [
            "refs/heads/leak",
            "refs/heads/leak2",
            "refs/heads/leakfork",
            "refs/tags/before"
        ]
    );
    // 2 in leak's messages, 2 in its summary (it quotes them), 1 in leak2.
    assert_eq!(dry["matches"], 5, "{dry}");
    assert_eq!(ok(&s, &["reflog"], None), reflog_before);

    // Redact: the pattern, never echoed; the reason and counts recorded.
    let figures_before = figures(&s);
    let r = sessctl(
        &s,
        &["redact", PATTERN, "--reason", "leaked deploy key"],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("rewrote "), "{}", r.stdout);
    assert!(r.stdout.contains("moved 4 refs"), "{}", r.stdout);
    assert!(!r.stdout.contains("sk-live") && !r.stderr.contains("sk-live"));
    let reflog = ok(&s, &["reflog", "leak"], None);
    let newest = reflog.lines().next().unwrap();
    assert!(
        newest.contains("redact: leaked deploy key (5 matches, "),
        "{newest}"
    );
    assert!(!ok(&s, &["reflog", "--json"], None).contains("sk-live"));
    // The same history: ls counts the same sessions and usage.
    assert_eq!(figures(&s), figures_before);
    // A second run finds nothing.
    let again = ok(&s, &["redact", PATTERN], None);
    assert_eq!(again, "no match: nothing to redact\n");

    // Redacted histories read as before, the secret replaced.
    for conv in ["leak", "leak2", "leakfork", "refs/tags/before"] {
        let text = ok(&s, &["export", conv], None);
        assert!(!text.contains("sk-live"), "{conv}: {text}");
        assert!(text.contains("[REDACTED]"), "{conv}");
    }
    let leak_after: serde_json::Value =
        serde_json::from_str(&ok(&s, &["export", "leak"], None)).unwrap();
    assert_eq!(
        leak_after.as_array().map(Vec::len),
        leak_len.as_array().map(Vec::len)
    );
    // The conversation keeps its id (its root, which had no secret, is
    // the same session).
    let log = ok(&s, &["log", "leak"], None);
    assert!(log.contains(&root[..12]), "{log}");

    // Still reachable from the ref log: why says so.
    let why = ok(&s, &["gc", "--dry-run", "--why", &leaking_blob], None);
    assert!(why.contains("is reachable"), "{why}");
    assert!(why.contains("ref-log entry of "), "{why}");
    let why: serde_json::Value = serde_json::from_str(&ok(
        &s,
        &["gc", "--dry-run", "--why", &leaking_blob, "--json"],
        None,
    ))
    .unwrap();
    assert_eq!(why["reachable"], true, "{why}");
    assert_eq!(why["path"][0]["kind"], "reflog", "{why}");
    assert_eq!(
        why["path"].as_array().unwrap().last().unwrap()["kind"],
        "blob"
    );
    assert!(ok(&s, &["cat-object", "-p", &leaking_blob], None).contains(SECRET));

    // Expire and prune: gone.
    let gc = ok(&s, &["gc", "--prune=now", "--expire-reflog=now"], None);
    assert!(gc.starts_with("pruned "), "{gc}");
    let r = sessctl(&s, &["cat-object", "-p", &leaking_blob], None);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let why = ok(&s, &["gc", "--dry-run", "--why", &root], None);
    assert!(why.contains("is reachable:\n  ref refs/"), "{why}");
    if let Some(dir) = s.path() {
        let hits = occurrences(dir, SECRET.as_bytes());
        assert_eq!(hits, Vec::<String>::new());
        assert_eq!(occurrences(dir, b"sk-live"), Vec::<String>::new());
    }
    // Every other conversation reads the same, and the store is clean.
    let export_after: Vec<String> = ["clean", "other"]
        .iter()
        .map(|c| ok(&s, &["export", c], None))
        .collect();
    assert_eq!(export_after, export_before);
    let r = sessctl(&s, &["fsck", "--full"], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
    // A reindex from the operations brings nothing back.
    ok(&s, &["reindex"], None);
    if let Some(dir) = s.path() {
        assert_eq!(occurrences(dir, b"sk-live"), Vec::<String>::new());
    }
    let ls = ok(&s, &["ls", "--all"], None);
    assert!(ls.contains("clean") && ls.contains("leakfork"), "{ls}");
}

fn reflog_expire_hides_old_entries_and_keeps_chains_whole(s: &TestStore) {
    commit(
        &s,
        &["--new", "a"],
        &serde_json::json!([user("one"), assistant("1")]),
    );
    let first = ok(&s, &["rev-parse", "a"], None).trim().to_owned();
    commit(&s, &["a"], &serde_json::json!([user("two")]));
    commit(
        &s,
        &["--new", "b"],
        &serde_json::json!([user("bee"), assistant("b")]),
    );
    // Usage errors, before anything is touched.
    let r = sessctl(&s, &["reflog", "expire"], None);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = sessctl(&s, &["reflog", "expire", "--all", "--expire=soon"], None);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.starts_with("sessctl: --expire takes now"),
        "{}",
        r.stderr
    );
    let r = sessctl(&s, &["gc", "--why", &first], None);
    assert_eq!(r.code, 2, "--why needs --dry-run");
    let r = sessctl(&s, &["reflog", "expire", "nosuch"], None);
    assert_eq!(r.code, 1);
    assert_eq!(r.stderr, "sessctl: refs/heads/nosuch has no ref log\n");

    // The default (90 days) expires nothing young.
    assert_eq!(
        ok(&s, &["reflog", "expire", "--all"], None),
        "expired 0 entries of 0 refs\n"
    );
    // A dry run says what, and changes nothing.
    assert_eq!(
        ok(&s, &["reflog", "expire", "--expire=now", "a", "-n"], None),
        "would expire 2 entries of refs/heads/a, 0 kept\nwould expire 2 entries of 1 ref\n"
    );
    assert_eq!(ok(&s, &["reflog", "a"], None).lines().count(), 2);
    // Reachable from the ref log only: the first session of a, once a
    // moves on and an unrelated reset drops it... here, a's log keeps it.
    ok(&s, &["update-ref", "refs/heads/a", &first], None);
    let second_gone = ok(&s, &["reflog", "a"], None);
    assert_eq!(second_gone.lines().count(), 3);
    let r = ok(
        &s,
        &["reflog", "expire", "--expire=now", "a", "--json"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&r).unwrap();
    assert_eq!(v["expired"], 3);
    assert_eq!(v["refs"]["refs/heads/a"]["kept"], 0);
    assert!(v["op"].is_u64());
    let r = sessctl(&s, &["reflog", "a"], None);
    assert_eq!(r.code, 1);
    assert_eq!(r.stderr, "sessctl: refs/heads/a has no ref log\n");
    // The other refs' logs stay, and every chain still verifies (a's
    // second session is dangling now: nothing keeps it).
    assert!(ok(&s, &["reflog", "b"], None).contains("refs/heads/b"));
    let r = sessctl(&s, &["fsck", "--full"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.lines().all(|l| l.starts_with("dangling session ")));
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);
    // The ref log no longer keeps a's second session: gc drops it.
    let gc = ok(&s, &["gc", "--prune=now", "--dry-run"], None);
    assert!(gc.starts_with("would prune 2 of "), "{gc}");
    // New moves log as before, chained to the expired entries.
    commit(&s, &["a"], &serde_json::json!([user("three")]));
    assert_eq!(ok(&s, &["reflog", "a"], None).lines().count(), 1);
    let r = sessctl(&s, &["fsck"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // gc --expire-reflog in a dry run expires nothing, but counts as if.
    let b_log = ok(&s, &["reflog"], None);
    let gc = ok(
        &s,
        &["gc", "--prune=now", "--dry-run", "--expire-reflog=now"],
        None,
    );
    assert!(gc.starts_with("would prune "), "{gc}");
    assert_eq!(ok(&s, &["reflog"], None), b_log);
    ok(&s, &["gc", "--prune=now"], None);
    let why = ok(&s, &["gc", "--dry-run", "--why", &first], None);
    assert!(why.contains("is reachable"), "{why}");
    assert!(why.contains("  ref refs/heads/a\n  -> session "), "{why}");
}

fn redact_on_chosen_refs_warns_of_the_others_and_never_echoes_the_pattern(s: &TestStore) {
    commit(
        &s,
        &["--new", "a"],
        &serde_json::json!([user(&format!("key {SECRET}")), assistant("ok")]),
    );
    ok(&s, &["fork", "a", "--as", "b"], None);
    commit(&s, &["b"], &serde_json::json!([user("more")]));
    commit(
        &s,
        &["--new", "c"],
        &serde_json::json!([user("nothing here")]),
    );
    // A pattern that does not compile: a usage error that does not quote it.
    let r = sessctl(&s, &["redact", "sk-live-(unclosed"], None);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stderr,
        "sessctl: PATTERN is not a valid regular expression\n"
    );
    let r = sessctl(&s, &["redact", "x*"], None);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = sessctl(&s, &["redact", PATTERN, "nosuch"], None);
    assert_eq!(r.code, 1);
    assert!(r
        .stderr
        .contains("no conversation, archived conversation or tag named nosuch"));
    // Nothing in c.
    assert_eq!(
        ok(&s, &["redact", PATTERN, "c"], None),
        "no match: nothing to redact\n"
    );
    // b alone: a still reaches the text, and is named.
    let r = sessctl(
        &s,
        &[
            "redact",
            "-i",
            "SK-LIVE-[a-z0-9]+",
            "b",
            "--replace",
            "<gone>",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("warning: refs/heads/a was not selected and still reaches"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("sk-live") && !r.stdout.contains("sk-live"));
    assert!(ok(&s, &["export", "b"], None).contains("<gone>"));
    assert!(ok(&s, &["export", "a"], None).contains(SECRET));
    // HEAD (following c, then a) stands for the ref it follows.
    ok(&s, &["checkout", "a"], None);
    let r = ok(&s, &["redact", PATTERN, "HEAD", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&r).unwrap();
    assert_eq!(v["refs"][0]["ref"], "refs/heads/a", "{v}");
    assert_eq!(v["still_reachable_from"], serde_json::json!([]));
    assert!(!ok(&s, &["export", "a"], None).contains("sk-live"));
    let r = sessctl(&s, &["fsck"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

fn redact_refused_by_a_run_in_progress_says_nothing_was_rewritten(s: &TestStore) {
    commit(
        &s,
        &["--new", "busy"],
        &serde_json::json!([user(&format!("key {SECRET}"))]),
    );
    // This test process holds a run on it (and stays alive).
    let store = s.library();
    let run = store.begin_run("busy").unwrap();
    let r = sessctl(&s, &["redact", PATTERN], None);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.starts_with("sessctl: conversation busy is busy"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("nothing was rewritten"), "{}", r.stderr);
    assert!(!r.stderr.contains(SECRET));
    store.fail_run(&run, "stopped").unwrap();
    drop(store);
    ok(&s, &["redact", PATTERN], None);
}

fn redact_names_operations_that_keep_an_earlier_title(s: &TestStore) {
    // The title held the secret, and was changed later: the current record
    // is clean, the operation that set the first title is not.
    commit(
        &s,
        &[
            "--new",
            "titled",
            "--title",
            &format!("deploy with {SECRET}"),
        ],
        &serde_json::json!([user("deploy"), assistant("ok")]),
    );
    commit(
        &s,
        &["titled", "--title", "Deploy"],
        &serde_json::json!([user("again"), assistant("ok")]),
    );
    let first_op = {
        let v: serde_json::Value =
            serde_json::from_str(&ok(&s, &["reflog", "--json", "titled"], None)).unwrap();
        let entries = v.as_array().cloned().unwrap_or_default();
        entries.last().unwrap()["op"].as_u64().unwrap()
    };
    let dry = ok(&s, &["redact", PATTERN, "--dry-run", "--json"], None);
    let dry: serde_json::Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(dry["operations"], serde_json::json!([first_op]), "{dry}");
    let r = sessctl(&s, &["redact", PATTERN], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "warning: 1 operation still holds the text (a conversation record's title or metadata, \
             or a run's error; operations are never rewritten): {first_op}\n"
        )),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("sk-live") && !r.stdout.contains("sk-live"));
    // Nothing left to rewrite; the warning stays, and so do the bytes, in
    // the operations only, after the purge.
    let r = sessctl(&s, &["redact", PATTERN], None);
    assert_eq!(r.stdout, "no match: nothing to redact\n");
    assert!(
        r.stderr
            .contains(&format!("never rewritten): {first_op}\n")),
        "{}",
        r.stderr
    );
    ok(&s, &["gc", "--prune=now", "--expire-reflog=now"], None);
    if let Some(dir) = s.path() {
        let hits = occurrences(dir, SECRET.as_bytes());
        assert!(!hits.is_empty());
        assert!(
            hits.iter()
                .all(|h| h.contains("journal") || h.contains("oplog")),
            "{hits:?}"
        );
    }
}

/// A record's large field (Codex's base_instructions) is a blob the record
/// names: redact rewrites it too, and after gc no byte of it is left.
fn redact_reaches_a_records_large_fields(s: &TestStore) {
    let src = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/codex"
    ))
    .join("rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl");
    if !src.exists() {
        eprintln!("note: {} is absent; skipping", src.display());
        return;
    }
    let text = std::fs::read_to_string(&src).unwrap();
    let copy = s.scratch().join("rollout.jsonl");
    std::fs::write(&copy, &text).unwrap();
    ok(
        &s,
        &["import", "--from", "codex", copy.to_str().unwrap()],
        None,
    );
    std::fs::remove_file(&copy).unwrap();
    let needle = b"vivid inner life";
    if let Some(dir) = s.path() {
        assert!(!occurrences(dir, needle).is_empty());
    }
    let r = sessctl(&s, &["redact", "vivid inner life"], None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stdout.contains("no match"), "{}", r.stdout);
    let exported = ok(
        &s,
        &["export", "codex-019e1695-052", "--format", "codex"],
        None,
    );
    assert!(exported.contains("[REDACTED]"), "{exported}");
    assert!(!exported.contains("vivid inner life"));
    ok(&s, &["gc", "--prune=now", "--expire-reflog=now"], None);
    if let Some(dir) = s.path() {
        assert_eq!(occurrences(dir, needle), Vec::<String>::new());
    }
    let r = sessctl(&s, &["fsck", "--full"], None);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
}
