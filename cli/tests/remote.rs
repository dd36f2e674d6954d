//! End to end: `bundle create|verify|unbundle`, `clone`, `push` and `pull`
//! of the real `sessctl` binary on temporary stores.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::sessctl;

use std::path::{Path, PathBuf};

use serde_json::Value;

fn ok(store: &Path, args: &[&str]) -> String {
    let r = sessctl(store, args, None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout
}

/// Commits one user message to `conv` (`--new` starts it); returns the id.
fn say(store: &Path, conv: &str, new: bool, text: &str) -> String {
    let msgs = format!(r#"[{{"role": "user", "content": "{text}"}}]"#);
    let mut args = vec!["commit"];
    if new {
        args.push("--new");
    }
    args.extend([conv, "--messages", "-"]);
    let r = sessctl(store, &args, Some(&msgs));
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout.trim().to_owned()
}

fn short(id: &str) -> &str {
    &id[..12]
}

/// A store with a two-turn `fix` and an archived `old`.
fn source(dir: &Path) -> PathBuf {
    let s = dir.join("a");
    ok(&s, &["init"]);
    say(&s, "fix", true, "one");
    say(&s, "fix", false, "two");
    say(&s, "old", true, "three");
    ok(&s, &["archive", "old"]);
    s
}

/// `ls --all --json` without `last_activity`: that counts this store's own
/// operations, and receiving a conversation is not activity on it.
fn ls(store: &Path) -> Value {
    let mut v: Value = serde_json::from_str(&ok(store, &["ls", "--all", "--json"])).unwrap();
    for c in v.as_array_mut().unwrap() {
        let activity = c.as_object_mut().unwrap().remove("last_activity").unwrap();
        assert!(activity.as_i64().unwrap() >= c["updated_at"].as_i64().unwrap());
    }
    v
}

fn refs(store: &Path) -> String {
    ok(store, &["for-each-ref"])
}

#[test]
fn bundle_verify_unbundle_recreates_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let a = source(dir.path());
    let file = dir.path().join("all.bundle");
    let f = file.to_str().unwrap();
    let out = ok(&a, &["bundle", "create", f, "--all"]);
    assert!(
        out.starts_with(&format!(
            "wrote {f}: 2 refs, 6 objects (3 sessions), 0 prerequisites"
        )),
        "{out}"
    );
    let fix = ok(&a, &["rev-parse", "fix"]).trim().to_owned();
    let old = ok(&a, &["rev-parse", "archive/old"]).trim().to_owned();
    let nowhere = dir.path().join("none");
    let v = ok(&nowhere, &["bundle", "verify", f]);
    assert_eq!(
        v.lines().take(2).collect::<Vec<_>>(),
        vec![
            format!("{old} refs/archive/old"),
            format!("{fix} refs/heads/fix")
        ]
    );
    assert!(v
        .lines()
        .nth(2)
        .unwrap()
        .starts_with("6 objects (3 sessions, 3 blobs"));
    let j: Value = serde_json::from_str(&ok(&nowhere, &["bundle", "verify", "--json", f])).unwrap();
    assert_eq!(
        (j["ok"].clone(), j["objects"].clone()),
        (Value::Bool(true), 6.into())
    );

    let b = dir.path().join("b");
    ok(&b, &["init"]);
    let out = ok(&b, &["bundle", "unbundle", f]);
    assert_eq!(
        out,
        format!(
            "refs/archive/old: created {}\nrefs/heads/fix: created {}\nunbundled 6 objects ",
            short(&old),
            short(&fix)
        ) + &out[out.find("(").unwrap()..]
    );
    assert_eq!(ls(&b), ls(&a));
    // The same sessions and refs; a bundle carries no HEAD.
    assert_eq!(
        ok(&b, &["log", "--all", "--json"]),
        ok(&a, &["log", "--all", "--json"]).replace(r#""HEAD","#, "")
    );
    // fsck is silent and exits 0 when clean.
    let r = sessctl(&b, &["fsck"], None);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    let v: serde_json::Value = serde_json::from_str(&ok(&b, &["fsck", "--json"])).unwrap();
    assert_eq!(
        (
            v["objects"].as_u64(),
            v["sessions"].as_u64(),
            v["operations"].as_u64()
        ),
        (Some(6), Some(3), Some(1))
    );
}

#[test]
fn a_since_bundle_needs_its_prerequisites() {
    let dir = tempfile::tempdir().unwrap();
    let a = source(dir.path());
    let b = dir.path().join("b");
    ok(&b, &["clone", a.to_str().unwrap(), b.to_str().unwrap()]);
    let before = ok(&a, &["rev-parse", "fix"]).trim().to_owned();
    let after = say(&a, "fix", false, "four");
    let file = dir.path().join("new.bundle");
    let f = file.to_str().unwrap();
    let out = ok(&a, &["bundle", "create", f, "fix", "--since", &before]);
    assert!(
        out.contains(": 1 refs, 2 objects (1 sessions), 1 prerequisites"),
        "{out}"
    );

    // A store without the prerequisite: refused before anything moves.
    let empty = dir.path().join("e");
    ok(&empty, &["init"]);
    let r = sessctl(&empty, &["bundle", "verify", f], None);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(&format!("missing prerequisite {before}")),
        "{}",
        r.stderr
    );
    let r = sessctl(&empty, &["bundle", "unbundle", f], None);
    assert_eq!((r.code, r.stdout.as_str()), (1, ""));
    assert!(
        r.stderr.starts_with("sessctl: missing prerequisite"),
        "{}",
        r.stderr
    );
    assert_eq!(refs(&empty), "");

    // One that has it fast-forwards.
    assert_eq!(
        ok(&b, &["bundle", "unbundle", f]).lines().next().unwrap(),
        format!(
            "refs/heads/fix: fast-forward {}..{}",
            short(&before),
            short(&after)
        )
    );
    assert_eq!(ls(&b), ls(&a));
}

#[test]
fn a_corrupt_bundle_exits_3_and_moves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let a = source(dir.path());
    let file = dir.path().join("all.bundle");
    let f = file.to_str().unwrap();
    ok(&a, &["bundle", "create", f, "--all"]);
    let bytes = std::fs::read(&file).unwrap();
    let b = dir.path().join("b");
    ok(&b, &["init"]);
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    for bad in [flipped, bytes[..bytes.len() - 7].to_vec()] {
        std::fs::write(&file, &bad).unwrap();
        let r = sessctl(&b, &["bundle", "verify", f], None);
        assert_eq!(r.code, 3, "{}", r.stderr);
        assert!(r.stderr.contains("checksum mismatch"), "{}", r.stderr);
        let r = sessctl(&b, &["bundle", "unbundle", f], None);
        assert_eq!((r.code, r.stdout.as_str()), (3, ""), "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1);
        assert_eq!(refs(&b), "");
        let j: Value =
            serde_json::from_str(&sessctl(&b, &["bundle", "verify", "--json", f], None).stdout)
                .unwrap();
        assert_eq!(j["ok"], Value::Bool(false));
    }
}

#[test]
fn clone_push_pull_and_divergence() {
    let dir = tempfile::tempdir().unwrap();
    let a = source(dir.path());
    let b = dir.path().join("b");
    let (ap, bp) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = ok(&dir.path().join("unused"), &["clone", ap, bp]);
    assert_eq!(
        out.lines().count(),
        1,
        "one summary, not a line per ref: {out}"
    );
    assert!(
        out.starts_with(&format!(
            "cloned {ap} into {bp}: 2 conversations, 2 refs, 6 objects ("
        )),
        "{out}"
    );
    assert_eq!(ls(&b), ls(&a));
    let r = sessctl(&a, &["clone", ap, ap], None);
    assert_eq!(r.code, 1, "{}", r.stderr);

    // Fast-forward a -> b by push, then b -> a by pull; again sends nothing.
    let before = ok(&a, &["rev-parse", "fix"]).trim().to_owned();
    let after = say(&a, "fix", false, "four");
    let out = ok(&a, &["push", bp]);
    assert!(
        out.contains(&format!(
            "refs/heads/fix: fast-forward {}..{}\n",
            short(&before),
            short(&after)
        )),
        "{out}"
    );
    assert!(out.contains("refs/archive/old: up to date\n"), "{out}");
    assert!(
        out.lines().last().unwrap().starts_with("sent 2 objects ("),
        "{out}"
    );
    assert!(ok(&a, &["push", bp]).ends_with("sent 0 objects (0 bytes)\n"));
    let from_b = say(&b, "fix", false, "five");
    let out = ok(&a, &["pull", bp, "fix"]);
    assert_eq!(
        out.lines().next().unwrap(),
        format!(
            "refs/heads/fix: fast-forward {}..{}",
            short(&after),
            short(&from_b)
        )
    );
    assert!(ok(&a, &["pull", bp]).ends_with("sent 0 objects (0 bytes)\n"));
    assert_eq!(ls(&b), ls(&a));

    // Both sides commit: refused both ways, both heads named, nothing moves.
    let ours = say(&a, "fix", false, "six");
    let theirs = say(&b, "fix", false, "seven");
    say(&a, "extra", true, "x");
    let (refs_a, refs_b) = (refs(&a), refs(&b));
    for (store, verb) in [(&a, "push"), (&a, "pull")] {
        let r = sessctl(store, &[verb, bp], None);
        assert_eq!(r.code, 1, "{verb}: {}", r.stderr);
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with("refs/heads/fix:"))
            .unwrap();
        assert!(
            line.starts_with(
                "refs/heads/fix: refused: refusing to update refs/heads/fix: it is at "
            ),
            "{line}"
        );
        assert!(
            line.contains(short(&ours)) && line.contains(short(&theirs)),
            "{line}"
        );
        assert!(line.ends_with("and neither contains the other"), "{line}");
        assert_eq!(r.stderr, "sessctl: 1 ref refused; nothing was updated\n");
        assert_eq!((refs(&a), refs(&b)), (refs_a.clone(), refs_b.clone()));
    }
}

#[test]
fn push_to_a_busy_remote_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let a = source(dir.path());
    let b = dir.path().join("b");
    ok(&a, &["clone", a.to_str().unwrap(), b.to_str().unwrap()]);
    // Hold b's writer lock as another process would.
    let lock = support::hold_lock(&b, "4242");
    let r = sessctl(&a, &["--wait", "0.1", "push", b.to_str().unwrap()], None);
    drop(lock);
    assert_eq!(r.code, 4, "{}", r.stderr);
    assert_eq!(
        r.stderr,
        format!(
            "sessctl: store {} is in use by pid 4242: it held the store's write lock for longer than this write waits (give it longer with --wait)\n",
            b.display()
        )
    );
}

/// A clone that fails (here on a damaged pack of its source) removes what
/// it made, as git's does: the new directory and the parents it created,
/// or only what it put in a directory that was there, empty. Run again once
/// the source is mended, the same command works.
#[test]
fn a_failed_clone_leaves_nothing_behind_and_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let a = source(dir.path());
    ok(&a, &["repack"]);
    let pack = std::fs::read_dir(a.join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let good = std::fs::read(&pack).unwrap();
    let mut bad = good.clone();
    let middle = bad.len() / 2;
    bad[middle] ^= 0x01;
    std::fs::write(&pack, &bad).unwrap();

    let fresh = dir.path().join("new/deeper/b");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for dest in [&fresh, &empty] {
        let r = sessctl(
            &a,
            &["clone", a.to_str().unwrap(), dest.to_str().unwrap()],
            None,
        );
        assert_eq!(r.code, 3, "{}", r.stderr);
        assert!(r.stderr.contains("is corrupt"), "{}", r.stderr);
    }
    assert!(!dir.path().join("new").exists(), "the clone's parents stay");
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);

    std::fs::write(&pack, &good).unwrap();
    for dest in [&fresh, &empty] {
        ok(&a, &["clone", a.to_str().unwrap(), dest.to_str().unwrap()]);
        assert_eq!(ls(dest), ls(&a));
    }
}

/// A transfer that one diverged ref refuses updates nothing, and says so:
/// no line and no JSON entry claims a ref was created or moved; the refs
/// it kept back say what would have happened.
#[test]
fn a_refused_pull_or_push_says_nothing_was_created() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    ok(&a, &["init"]);
    ok(&b, &["init"]);
    say(&a, "x", true, "from a");
    say(&b, "x", true, "from b");
    let y = say(&b, "y", true, "only in b");
    let (refs_a, refs_b) = (refs(&a), refs(&b));
    for (store, args) in [
        (&a, ["pull", b.to_str().unwrap()]),
        (&b, ["push", a.to_str().unwrap()]),
    ] {
        let r = sessctl(store, &args, None);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert_eq!(r.stderr, "sessctl: 1 ref refused; nothing was updated\n");
        let lines: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{args:?}: {}", r.stdout);
        assert!(
            lines[0].starts_with("refs/heads/x: refused: refusing to update refs/heads/x: "),
            "{args:?}: {}",
            r.stdout
        );
        assert_eq!(
            lines[1],
            format!("refs/heads/y: would have been created at {}", short(&y)),
            "{args:?}"
        );

        let mut json_args = args.to_vec();
        json_args.push("--json");
        let r = sessctl(store, &json_args, None);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(v["applied"], false, "{v}");
        assert_eq!(v["objects"], 0, "{v}");
        assert_eq!(v["refs"][0]["outcome"], "refused", "{v}");
        assert_eq!(
            v["refs"][1],
            serde_json::json!({"name": "refs/heads/y", "outcome": "not-updated", "would": "created", "new": y}),
        );
        assert_eq!((refs(&a), refs(&b)), (refs_a.clone(), refs_b.clone()));
    }
}
