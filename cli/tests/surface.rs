//! The command line's surface: where the store is found, the pager and
//! colour, `--json` on the report verbs, progress, `--help` and completions.
//! The tests of what a store holds run on a local store and on a remote one
//! (`name::local`, `name::remote`); those of finding a store directory, of
//! copies between store directories and of a terminal run locally only and
//! say so.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

two_backends!(
    gc_prune_repack_reindex_and_merge_base_speak_json,
    graph_speaks_json,
    compact_speaks_json,
    completion_offers_the_right_names_to_every_verb_that_takes_one,
    a_foreign_complete_variable_changes_nothing_and_hook_never_exits_2,
    in_a_pipe_nothing_changes_and_color_always_paints,
);

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::{new_store, sessctl, Run, Target, TestStore};

/// Runs `sessctl ARGS` in `dir` with no `--store` and no `SESSCTL_STORE`,
/// with extra environment variables.
fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessctl"));
    cmd.current_dir(dir)
        .args(args)
        .env_remove("SESSCTL_STORE")
        .env_remove("NO_COLOR")
        .env_remove("PAGER")
        .env_remove("SESSCTL_PAGER")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// [`run_in`] in the test's scratch directory, with `SESSCTL_STORE` naming
/// the store `s` (and the variables that reach it).
fn run_at(s: &TestStore, args: &[&str], env: &[(&str, &str)]) -> Run {
    let store = s.arg();
    let reach = s.env();
    let mut all: Vec<(&str, &str)> = vec![("SESSCTL_STORE", store.to_str().unwrap())];
    all.extend(reach.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    all.extend_from_slice(env);
    run_in(&s.scratch(), args, &all)
}

fn ok<T: Target + ?Sized>(store: &T, args: &[&str], stdin: Option<&str>) -> String {
    let r = sessctl(store, args, stdin);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    r.stdout
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"))
}

const TURN: &str = r#"[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]"#;

/// A store with conversations `fix` (two turns) and `alt` (forked from
/// fix~1).
fn two_conversations() -> (tempfile::TempDir, std::path::PathBuf) {
    let (d, s) = new_store();
    fill(&s);
    (d, s)
}

/// [`two_conversations`] in the store `s`.
fn fill<T: Target + ?Sized>(s: &T) {
    ok(
        &s,
        &["commit", "--new", "fix", "--messages", "-"],
        Some(TURN),
    );
    ok(
        &s,
        &["commit", "fix", "--messages", "-"],
        Some(r#"[{"role":"user","content":"more"}]"#),
    );
    ok(
        &s,
        &["fork", "fix~1", "--as", "alt", "--messages", "-"],
        Some(r#"[{"role":"user","content":"other"}]"#),
    );
}

// ---- store discovery ----

// Local only: finds a store directory from the working directory.
#[test]
fn the_store_is_found_in_a_parent_directory_as_git_finds_dot_git() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_in(dir.path(), &["init"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout, "Initialized empty sessctl store in .sessctl\n");
    assert!(dir.path().join(".sessctl/FORMAT").is_file());
    let s = dir.path().join(".sessctl");
    ok(
        &s,
        &["commit", "--new", "fix", "--messages", "-"],
        Some(TURN),
    );

    let deep = dir.path().join("a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    let r = run_in(&deep, &["ls", "--json"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r.stdout)[0]["name"], "fix", "{}", r.stdout);

    // A nearer .sessctl that is not a store is passed over.
    std::fs::create_dir_all(dir.path().join("a/.sessctl")).unwrap();
    let r = run_in(&deep, &["rev-parse", "fix"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);

    // init in a subdirectory creates a store there, as git init does, and
    // the nearer store wins from then on.
    let r = run_in(&deep, &["init"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(deep.join(".sessctl/FORMAT").is_file());
    let r = run_in(&deep, &["ls", "--json"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r.stdout), json("[]"));

    // Not inside a store's own directory.
    let journal = s.join("journal");
    let r = run_in(&journal, &["init"], &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .starts_with("sessctl: .sessctl is inside the store "),
        "{}",
        r.stderr
    );
    assert!(!journal.join(".sessctl").exists());

    // --store and SESSCTL_STORE still win over discovery.
    let r = run_in(
        &deep,
        &["ls", "--json"],
        &[("SESSCTL_STORE", s.to_str().unwrap())],
    );
    assert_eq!(json(&r.stdout)[0]["name"], "fix", "{}", r.stdout);
    let r = run_in(
        &deep,
        &["--store", s.to_str().unwrap(), "ls", "--json"],
        &[],
    );
    assert_eq!(json(&r.stdout)[0]["name"], "fix", "{}", r.stdout);
    // An empty SESSCTL_STORE is none given.
    let r = run_in(&deep, &["ls", "--json"], &[("SESSCTL_STORE", "")]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(json(&r.stdout), json("[]"));
}

// Local only: the owner of a store directory.
#[test]
fn discovery_skips_a_store_another_user_owns_unless_it_is_named() {
    // Only root can give a directory to another user; the decision itself
    // is unit-tested in main.rs.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root, cannot chown a store to another user");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(run_in(dir.path(), &["init"], &[]).code, 0);
    let s = dir.path().join(".sessctl");
    ok(
        &s,
        &["commit", "--new", "theirs", "--messages", "-"],
        Some(TURN),
    );
    let deep = dir.path().join("work");
    std::fs::create_dir_all(&deep).unwrap();
    let c = std::ffi::CString::new(s.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);

    let r = run_in(&deep, &["ls"], &[]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr.lines().next().unwrap(),
        format!(
            "sessctl: warning: skipping {}: owned by another user (give --store to use it)",
            s.display()
        )
    );
    assert!(r.stderr.contains("not in a sessctl store"), "{}", r.stderr);
    // Its conversations are not offered either.
    let c = run_in(
        &deep,
        &["--", "sessctl", "log", "th"],
        &[("SESSCTL_COMPLETE", "fish")],
    );
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert!(!c.stdout.contains("theirs"), "{}", c.stdout);
    assert_eq!(c.stderr, "");
    // Named, it is used.
    let r = run_in(&deep, &["--store", s.to_str().unwrap(), "ls"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("theirs"), "{}", r.stdout);
}

// Local only: a working directory with no store directory.
#[test]
fn without_a_store_one_error_names_init_store_and_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["ls"][..], &["log"], &["gc"], &["fsck"], &["rm", "x"]] {
        let r = run_in(dir.path(), args, &[]);
        assert_eq!(r.code, 1, "{args:?}: {r:?}");
        assert_eq!(r.stdout, "");
        assert_eq!(
            r.stderr,
            "sessctl: not in a sessctl store: no .sessctl in this directory or any parent; \
             run sessctl init to create one here, or give --store DIR or set SESSCTL_STORE\n",
            "{args:?}"
        );
    }
    // A command that needs no store still runs.
    let r = run_in(dir.path(), &["completions", "bash"], &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

// ---- --json on every report verb ----

fn gc_prune_repack_reindex_and_merge_base_speak_json(s: &TestStore) {
    fill(s);
    let fix = ok(&s, &["rev-parse", "fix"], None).trim().to_owned();
    let alt = ok(&s, &["rev-parse", "alt"], None).trim().to_owned();
    let base = ok(&s, &["rev-parse", "fix~1"], None).trim().to_owned();

    let v = json(&ok(&s, &["rev-parse", "--json", "fix", "fix~1"], None));
    assert_eq!(
        v,
        serde_json::json!([{"rev": "fix", "id": fix}, {"rev": "fix~1", "id": base}])
    );
    let v = json(&ok(&s, &["merge-base", "--json", "fix", "alt"], None));
    assert_eq!(v["a"], fix.as_str());
    assert_eq!(v["b"], alt.as_str());
    assert_eq!(v["bases"], serde_json::json!([base]));
    let v = json(&ok(
        &s,
        &["merge-base", "--all", "--json", "fix", "alt"],
        None,
    ));
    assert_eq!(v["bases"], serde_json::json!([base]));
    let v = json(&ok(
        &s,
        &["merge-base", "--is-ancestor", "--json", "fix~1", "fix"],
        None,
    ));
    assert_eq!(v["is_ancestor"], true);
    let r = sessctl(
        &s,
        &["merge-base", "--is-ancestor", "--json", "fix", "alt"],
        None,
    );
    assert_eq!(r.code, 1, "the exit status says no, as without --json");
    assert_eq!(json(&r.stdout)["is_ancestor"], false);

    // repack before gc: a remote store's repack merges its small packs,
    // and after gc there is one.
    let v = json(&ok(&s, &["repack", "--json"], None));
    assert!(v["objects"].as_u64().unwrap() > 0, "{v}");
    let v = json(&ok(&s, &["reindex", "--json"], None));
    assert!(v["operations"].as_u64().unwrap() >= 3, "{v}");

    let v = json(&ok(&s, &["gc", "--dry-run", "--json"], None));
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["pruned"], 0);
    assert!(v["objects"].as_u64().unwrap() > 0, "{v}");
    let v = json(&ok(&s, &["gc", "--json"], None));
    assert_eq!(v["dry_run"], false);
    assert!(v["bytes_after"].is_u64(), "{v}");

    // prune: what would go, then what went, oldest first.
    let v = json(&ok(
        &s,
        &["prune", "--keep", "0", "--dry-run", "--json"],
        None,
    ));
    assert_eq!(
        v,
        serde_json::json!({"action": "archive", "dry_run": true, "conversations": ["fix", "alt"]})
    );
    let v = json(&ok(&s, &["prune", "--keep", "1", "--json"], None));
    assert_eq!(
        v,
        serde_json::json!({"action": "archive", "dry_run": false, "conversations": ["fix"]})
    );
    let ls = json(&ok(&s, &["ls", "--json"], None));
    assert_eq!(ls.as_array().unwrap().len(), 1, "{ls}");
}

fn graph_speaks_json(s: &TestStore) {
    fill(s);
    let v = json(&ok(&s, &["graph", "--json"], None));
    let nodes = v.as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{v}");
    let fix = ok(&s, &["rev-parse", "fix", "fix~1", "alt"], None);
    let ids: Vec<&str> = fix.lines().collect();
    let node = |id: &str| nodes.iter().find(|n| n["id"] == id).unwrap().clone();
    assert_eq!(node(ids[0])["parents"], json(&format!("[\"{}\"]", ids[1])));
    assert!(node(ids[0])["refs"]
        .as_array()
        .unwrap()
        .contains(&json("\"refs/heads/fix\"")));
    assert!(node(ids[2])["refs"]
        .as_array()
        .unwrap()
        .contains(&json("\"refs/heads/alt\"")));
    // Never a session before its descendants.
    let pos = |id: &str| nodes.iter().position(|n| n["id"] == id).unwrap();
    assert!(pos(ids[0]) < pos(ids[1]) && pos(ids[2]) < pos(ids[1]));
    // From REVs, as text and dot are.
    let only = json(&ok(&s, &["graph", "--json", "alt"], None));
    assert_eq!(only.as_array().unwrap().len(), 2, "{only}");
    assert_eq!(
        sessctl(&s, &["graph", "--json", "--format", "dot"], None).code,
        2
    );
}

// Local only: clone, push and pull between two store directories (to and
// from a remote store: tests/remote_store.rs).
#[test]
fn clone_push_and_pull_speak_json_and_clone_prints_one_summary() {
    let (d, a) = two_conversations();
    let b = d.path().join("b");
    let (ap, bp) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = ok(&a, &["clone", ap, bp], None);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with(&format!("cloned {ap} into {bp}: 2 conversations, 2 refs, ")),
        "{out}"
    );
    assert!(out.ends_with("s\n"), "the time it took: {out}");

    let c = d.path().join("c");
    let v = json(&ok(&a, &["clone", "--json", ap, c.to_str().unwrap()], None));
    assert_eq!(v["conversations"], 2);
    assert_eq!(v["applied"], true);
    assert!(v["objects"].as_u64().unwrap() > 0);
    assert!(v["seconds"].is_f64(), "{v}");
    let names: Vec<&str> = v["refs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["outcome"], "created", "{r}");
            r["name"].as_str().unwrap()
        })
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"refs/heads/fix"), "{names:?}");

    let old = ok(&a, &["rev-parse", "fix"], None).trim().to_owned();
    ok(
        &a,
        &["commit", "fix", "--messages", "-"],
        Some(r#"[{"role":"user","content":"again"}]"#),
    );
    let new = ok(&a, &["rev-parse", "fix"], None).trim().to_owned();
    let v = json(&ok(&a, &["push", "--json", bp, "fix"], None));
    assert_eq!(
        v["refs"],
        serde_json::json!([{"name": "refs/heads/fix", "outcome": "fast-forward", "old": old, "new": new}])
    );
    assert_eq!(v["objects"], 2, "{v}");
    let v = json(&ok(&a, &["pull", "--json", bp, "fix"], None));
    assert_eq!(
        v["refs"],
        serde_json::json!([{"name": "refs/heads/fix", "outcome": "up-to-date"}])
    );
    assert_eq!(v["objects"], 0);

    // A diverged ref: the JSON says refused, and the exit status is 1.
    ok(
        &b,
        &["commit", "fix", "--messages", "-"],
        Some(r#"[{"role":"user","content":"b's own"}]"#),
    );
    ok(
        &a,
        &["commit", "fix", "--messages", "-"],
        Some(r#"[{"role":"user","content":"a's own"}]"#),
    );
    let r = sessctl(&a, &["push", "--json", bp, "fix"], None);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let v = json(&r.stdout);
    assert_eq!(v["applied"], false);
    assert_eq!(v["refs"][0]["outcome"], "refused");
    assert!(v["refs"][0]["message"].is_string(), "{v}");
}

fn compact_speaks_json(s: &TestStore) {
    fill(s);
    let head = ok(&s, &["rev-parse", "fix"], None).trim().to_owned();
    let summarizer = r#"cat >/dev/null; echo '[{"role":"system","content":"summary"}]'"#;
    let v = json(&ok(
        &s,
        &[
            "compact",
            "fix",
            "--summarizer",
            summarizer,
            "--keep-last",
            "1",
            "--json",
        ],
        None,
    ));
    let new = ok(&s, &["rev-parse", "fix"], None).trim().to_owned();
    assert_eq!(
        v,
        serde_json::json!({"compacted": true, "conversation": "fix", "old_head": head, "head": new})
    );
    let v = json(&ok(
        &s,
        &[
            "compact",
            "fix",
            "--summarizer",
            summarizer,
            "--max-tokens",
            "100000",
            "--json",
        ],
        None,
    ));
    assert_eq!(v["compacted"], false);
    assert_eq!(v["head"], new.as_str());
    assert!(v["estimated_tokens"].is_u64(), "{v}");
}

// ---- completions ----

/// What `sessctl` answers a fish shell completing `line` (the last word is
/// the one being completed), run in `dir` with `env`.
fn complete(dir: &Path, line: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let mut args = vec!["--", "sessctl"];
    args.extend_from_slice(line);
    let mut all = vec![("SESSCTL_COMPLETE", "fish")];
    all.extend_from_slice(env);
    completions(run_in(dir, &args, &all))
}

/// [`complete`] with `SESSCTL_STORE` naming the store `s`.
fn complete_at(s: &TestStore, line: &[&str]) -> Vec<String> {
    let mut args = vec!["--", "sessctl"];
    args.extend_from_slice(line);
    completions(run_at(s, &args, &[("SESSCTL_COMPLETE", "fish")]))
}

fn completions(r: Run) -> Vec<String> {
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Flags are offered beside values; these tests look at the values.
    r.stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .filter(|c| !c.starts_with('-'))
        .collect()
}

// Local only: finds the store directory from a subdirectory and by
// --store DIR on the line being completed.
#[test]
fn completion_offers_the_stores_conversation_names_and_format_values() {
    let (d, s) = two_conversations();
    ok(&s, &["archive", "alt"], None);
    let sp = s.to_str().unwrap();
    let env = [("SESSCTL_STORE", sp)];

    assert_eq!(complete(d.path(), &["log", "f"], &env), ["fix"]);
    let all = complete(d.path(), &["show", ""], &env);
    assert!(all.contains(&"HEAD".to_owned()), "{all:?}");
    assert!(all.contains(&"fix".to_owned()), "{all:?}");
    assert!(all.contains(&"archive/alt".to_owned()), "{all:?}");
    assert_eq!(complete(d.path(), &["rm", ""], &env), ["fix"]);
    assert_eq!(
        complete(d.path(), &["diff", "fix", "arch"], &env),
        ["archive/alt"]
    );
    assert_eq!(
        complete(d.path(), &["merge-base", "--all", "f"], &env),
        ["fix"]
    );
    // --store on the line being completed names the store.
    assert_eq!(
        complete(d.path(), &["--store", sp, "checkout", "fi"], &[]),
        ["fix"]
    );
    // Found from a subdirectory as every command finds it.
    let root = tempfile::tempdir().unwrap();
    assert_eq!(run_in(root.path(), &["init"], &[]).code, 0);
    ok(
        &root.path().join(".sessctl"),
        &["commit", "--new", "deep-work", "--messages", "-"],
        Some(TURN),
    );
    let sub = root.path().join("src/x");
    std::fs::create_dir_all(&sub).unwrap();
    assert_eq!(complete(&sub, &["log", "d"], &[]), ["deep-work"]);
    // No store: no names, and no error.
    let none = tempfile::tempdir().unwrap();
    assert_eq!(
        complete(none.path(), &["log", "f"], &[]),
        Vec::<String>::new()
    );

    assert_eq!(
        complete(d.path(), &["import", "--from", ""], &env),
        ["claude-code", "codex", "openai", "swe-agent"]
    );
    assert_eq!(
        complete(d.path(), &["export", "fix", "--format", "js"], &env),
        ["json", "jsonl"]
    );
    assert_eq!(
        complete(d.path(), &["graph", "--format", ""], &env),
        ["text", "dot"]
    );
    let cmds = complete(d.path(), &["merge-"], &env);
    assert_eq!(cmds, ["merge-base"]);
}

fn completion_offers_the_right_names_to_every_verb_that_takes_one(s: &TestStore) {
    fill(s);
    ok(s, &["archive", "alt"], None);
    ok(s, &["tag", "golden", "fix~1"], None);
    let c = |line: &[&str]| complete_at(s, line);
    // unarchive takes an archived conversation; archive and rm live ones.
    assert_eq!(c(&["unarchive", ""]), ["alt"]);
    assert_eq!(c(&["archive", ""]), ["fix"]);
    assert_eq!(c(&["rm", ""]), ["fix"]);
    assert_eq!(c(&["merge", "f"]), ["fix"]);
    assert_eq!(c(&["merge", "fix", "arch"]), ["archive/alt"]);
    assert_eq!(c(&["reset", "f"]), ["fix"]);
    assert_eq!(c(&["reset", "fix", "gol"]), ["golden"]);
    assert_eq!(c(&["rename", "f"]), ["fix"]);
    assert_eq!(c(&["tag", "-d", "g"]), ["golden"]);
    assert_eq!(c(&["tag", "new", "f"]), ["fix"]);
    assert_eq!(c(&["grep", "x", "gol"]), ["golden"]);
    assert_eq!(c(&["stats", "arch"]), ["archive/alt"]);
    assert_eq!(c(&["redact", "x", "f"]), ["fix"]);
    assert_eq!(c(&["reflog", "expire", "HE"]), ["HEAD"]);
}

#[test]
fn the_completion_script_asks_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let r = run_in(dir.path(), &["completions", shell], &[]);
        assert_eq!(r.code, 0, "{shell}: {}", r.stderr);
        assert!(
            r.stdout.contains("SESSCTL_COMPLETE"),
            "{shell}: {}",
            r.stdout
        );
        assert!(r.stdout.contains("sessctl"), "{shell}: {}", r.stdout);
    }
}

fn a_foreign_complete_variable_changes_nothing_and_hook_never_exits_2(s: &TestStore) {
    fill(s);
    for v in ["1", "bash", "fish"] {
        let r = run_at(s, &["ls", "--json"], &[("COMPLETE", v)]);
        assert_eq!(r.code, 0, "COMPLETE={v}: {r:?}");
        assert_eq!(json(&r.stdout).as_array().unwrap().len(), 2, "{v}");
        let r = run_at(s, &["hook", "claude-code", "--bogus"], &[("COMPLETE", v)]);
        assert_eq!(r.code, 1, "COMPLETE={v}: {r:?}");
    }
    // A refused hook line exits 1 whatever global flags come first.
    for pre in [
        &["--color", "never"][..],
        &["--color=never"],
        &["--wait", "1", "--color", "always", "--no-pager"],
    ] {
        let mut args = pre.to_vec();
        args.extend_from_slice(&["hook", "claude-code", "--bogus"]);
        let r = run_at(s, &args, &[]);
        assert_eq!(r.code, 1, "{args:?}: {r:?}");
    }
}

// ---- --help ----

/// Every subcommand's name, nested ones as "bundle create".
fn subcommands(dir: &Path, prefix: &[&str]) -> Vec<Vec<String>> {
    let mut args: Vec<&str> = prefix.to_vec();
    args.push("--help");
    let r = run_in(dir, &args, &[]);
    assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
    let mut out = Vec::new();
    let mut in_cmds = false;
    for line in r.stdout.lines() {
        if line == "Commands:" {
            in_cmds = true;
            continue;
        }
        if in_cmds {
            let Some(name) = line
                .strip_prefix("  ")
                .and_then(|l| l.split_whitespace().next())
            else {
                break;
            };
            if name == "help" {
                continue;
            }
            let mut path: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
            path.push(name.to_owned());
            out.push(path.clone());
            let p: Vec<&str> = path.iter().map(String::as_str).collect();
            out.extend(subcommands(dir, &p));
        }
    }
    out
}

#[test]
fn help_sets_global_options_apart_and_describes_every_argument() {
    let dir = tempfile::tempdir().unwrap();
    let cmds = subcommands(dir.path(), &[]);
    assert!(cmds.len() > 30, "{cmds:?}");
    for cmd in &cmds {
        let mut args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        args.push("-h");
        let r = run_in(dir.path(), &args, &[]);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        let help = &r.stdout;
        // Global options under their own heading, after the command's own.
        let global = help
            .find("\nGlobal options:\n")
            .unwrap_or_else(|| panic!("{cmd:?}: {help}"));
        let own = help.find("\nOptions:\n").unwrap();
        assert!(own < global, "{cmd:?}: {help}");
        for flag in [
            "--store <DIR|URL>",
            "--wait <SECONDS>",
            "--no-pager",
            "--color <WHEN>",
        ] {
            assert!(
                help[global..].contains(flag),
                "{cmd:?} lacks {flag}: {help}"
            );
            assert!(!help[..global].contains(flag), "{cmd:?}: {help}");
        }
        // Every argument and option has a description: on its line, or
        // (when clap sets descriptions below the names, as it does once one
        // is long) on the next line, indented further.
        let lines: Vec<&str> = help.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if !(line.starts_with("  ")
                && (t.starts_with('-') || t.starts_with('<') || t.starts_with('[')))
            {
                continue;
            }
            let (name, desc) = t.split_once("  ").unwrap_or((t, ""));
            let indent = line.len() - t.len();
            let below = lines.get(i + 1).is_some_and(|next| {
                let n = next.trim_start();
                !n.is_empty() && next.len() - n.len() > indent
            });
            assert!(
                !desc.trim().is_empty() || below,
                "{cmd:?}: {name} has no description"
            );
        }
        // Nothing points to a file an installed binary does not have.
        assert!(!help.contains("README"), "{cmd:?}: {help}");
        assert!(!help.contains(".md"), "{cmd:?}: {help}");
    }
}

// ---- pager and colour ----

const YELLOW: &str = "\x1b[33m";

/// Whether `script` (util-linux) can give a child a pseudo-terminal here.
fn have_script() -> bool {
    Command::new("script")
        .args(["-qec", "true", "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `sessctl ARGS` with its stdin, stdout and stderr on a
/// pseudo-terminal (`script`), in `dir`, with `env`; returns what the
/// terminal showed.
fn run_on_terminal(dir: &Path, store: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut line = format!(
        "'{}' --store '{}'",
        env!("CARGO_BIN_EXE_sessctl"),
        store.display()
    );
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    let mut cmd = Command::new("script");
    cmd.current_dir(dir)
        .args(["-qec", &line, "/dev/null"])
        .env_remove("SESSCTL_STORE")
        .env_remove("NO_COLOR")
        .env_remove("PAGER")
        .env_remove("SESSCTL_PAGER")
        .env_remove("LESS")
        .env("TERM", "xterm")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    // `script -e` exits as sessctl did: only `show nope` fails here.
    assert!(out.status.code().is_some(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().replace("\r\n", "\n")
}

/// A pager that records what it was given, and its LESS, in `out`.
fn fake_pager(dir: &Path) -> (String, std::path::PathBuf) {
    let script = dir.join("pager.sh");
    let out = dir.join("paged");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n{{ echo \"LESS=$LESS\"; cat; }} > '{}'\n",
            out.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script.display().to_string(), out)
}

// Local only: a terminal through script(1), given --store DIR on its line.
#[test]
fn on_a_terminal_log_show_and_diff_are_paged_and_coloured() {
    if !have_script() {
        eprintln!("skipped: no `script` to give sessctl a terminal");
        return;
    }
    let (d, s) = two_conversations();
    let (pager, paged) = fake_pager(d.path());
    let plain = ok(&s, &["log", "--oneline", "--all"], None);
    for (args, shows) in [
        (&["log", "--oneline", "--all"][..], "(\x1b[m\x1b[1;32mfix"),
        (&["show", "fix"], "\x1b[33msession "),
        (&["diff", "fix", "alt"], "\x1b[32m+ [2] user: other\x1b[m"),
    ] {
        let _ = std::fs::remove_file(&paged);
        let term = run_on_terminal(d.path(), &s, args, &[("PAGER", &pager)]);
        assert_eq!(term, "", "{args:?}: all went to the pager");
        let text = std::fs::read_to_string(&paged).unwrap();
        assert!(text.starts_with("LESS=FRX\n"), "{args:?}: {text:?}");
        assert!(text.contains(shows), "{args:?}: {text:?}");
    }
    // SESSCTL_PAGER comes first; an empty one means none.
    let _ = std::fs::remove_file(&paged);
    let term = run_on_terminal(
        d.path(),
        &s,
        &["log", "--oneline", "--all"],
        &[("PAGER", "false"), ("SESSCTL_PAGER", &pager)],
    );
    assert_eq!(term, "");
    assert!(paged.exists());
    let term = run_on_terminal(
        d.path(),
        &s,
        &["log", "--oneline", "--all"],
        &[("PAGER", &pager), ("SESSCTL_PAGER", "")],
    );
    assert!(term.contains(YELLOW), "{term:?}");

    // --no-pager: on the terminal, still coloured.
    let _ = std::fs::remove_file(&paged);
    let term = run_on_terminal(
        d.path(),
        &s,
        &["--no-pager", "log", "--oneline", "--all"],
        &[("PAGER", &pager)],
    );
    assert!(!paged.exists(), "--no-pager ran the pager");
    assert!(term.contains(YELLOW), "{term:?}");
    // Without the escapes it is what a pipe gets.
    let stripped = strip_ansi(&term);
    assert_eq!(stripped, plain);
    // NO_COLOR and --color=never: no escapes; --color=always beats NO_COLOR.
    for (args, env) in [
        (
            &["--no-pager", "log", "--oneline", "--all"][..],
            &[("NO_COLOR", "1")][..],
        ),
        (
            &["--no-pager", "--color=never", "log", "--oneline", "--all"],
            &[],
        ),
    ] {
        let term = run_on_terminal(d.path(), &s, args, env);
        assert_eq!(term, plain, "{args:?} {env:?}");
    }
    let term = run_on_terminal(
        d.path(),
        &s,
        &["--no-pager", "--color=always", "log", "--oneline", "--all"],
        &[("NO_COLOR", "1")],
    );
    assert!(term.contains(YELLOW), "{term:?}");
    // Other commands are never paged.
    let _ = std::fs::remove_file(&paged);
    let term = run_on_terminal(d.path(), &s, &["ls"], &[("PAGER", &pager)]);
    assert!(!paged.exists());
    assert!(term.contains("fix"), "{term:?}");
    // A failure before any output starts no pager.
    let term = run_on_terminal(d.path(), &s, &["show", "nope"], &[("PAGER", &pager)]);
    assert!(!paged.exists());
    assert!(term.starts_with("sessctl: "), "{term:?}");
}

// Local only: a terminal through script(1), given --store DIR on its line.
#[test]
fn ctrl_c_while_paging_waits_for_the_pager_and_json_is_never_paged() {
    if !have_script() {
        eprintln!("skipped: no `script` to give sessctl a terminal");
        return;
    }
    let (d, s) = two_conversations();
    // A pager that, like less, survives Ctrl-C, sends one to the terminal's
    // foreground processes (sessctl among them), then reads all it is given
    // and only later exits, leaving a mark.
    let marker = d.path().join("pager-exited");
    let pager = d.path().join("interrupting-pager.sh");
    std::fs::write(
        &pager,
        format!(
            "#!/bin/sh\ntrap '' INT QUIT\nkill -INT 0\ncat > /dev/null\nsleep 1\ntouch '{}'\n",
            marker.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&pager, std::fs::Permissions::from_mode(0o755)).unwrap();
    // `exec`: no shell between the terminal and sessctl, or sessctl and
    // its pager, to take the interrupt in their place.
    let line = format!(
        "exec '{}' --store '{}' log --all",
        env!("CARGO_BIN_EXE_sessctl"),
        s.display()
    );
    let out = Command::new("script")
        .current_dir(d.path())
        .args(["-qec", &line, "/dev/null"])
        .env_remove("SESSCTL_STORE")
        .env_remove("SESSCTL_PAGER")
        .env("PAGER", format!("exec '{}'", pager.display()))
        .env("SHELL", "/bin/sh")
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    // sessctl exited only after its pager did, and as interrupted.
    assert!(marker.exists(), "sessctl left its pager running: {out:?}");
    assert_eq!(out.status.code(), Some(130), "{out:?}");

    // JSON goes straight to the terminal, never through a pager.
    let (pager, paged) = fake_pager(d.path());
    for args in [
        &["log", "--json"][..],
        &["show", "fix", "--json"],
        &["diff", "fix", "alt", "--json"],
        &["graph", "--json"],
    ] {
        let term = run_on_terminal(d.path(), &s, args, &[("PAGER", &pager)]);
        assert!(!paged.exists(), "{args:?} was paged");
        json(term.trim());
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut it = s.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn in_a_pipe_nothing_changes_and_color_always_paints(s: &TestStore) {
    fill(s);
    let (pager, paged) = fake_pager(&s.scratch());
    for args in [
        &["log", "--oneline", "--all"][..],
        &["log", "--graph", "--all"],
        &["show", "fix"],
        &["diff", "fix", "alt"],
    ] {
        let plain = sessctl(s, args, None);
        let r = run_at(s, args, &[("PAGER", &pager)]);
        assert_eq!(r.stdout, plain.stdout, "{args:?}");
        assert!(!r.stdout.contains('\x1b'), "{args:?}");
        assert!(!paged.exists(), "{args:?}: a pipe was paged");

        let mut coloured = vec!["--color", "always"];
        coloured.extend_from_slice(args);
        let c = ok(&s, &coloured, None);
        assert!(c.contains(YELLOW), "{args:?}: {c:?}");
        assert_eq!(strip_ansi(&c), plain.stdout, "{args:?}");
    }
    let c = ok(&s, &["--color=always", "diff", "fix", "alt"], None);
    assert!(c.contains("\x1b[31m- [2] user: more\x1b[m\n"), "{c:?}");
    assert!(c.contains("\x1b[32m+ [2] user: other\x1b[m\n"), "{c:?}");
    // JSON is never painted.
    let j = ok(&s, &["--color=always", "log", "--json"], None);
    assert!(!j.contains('\x1b'));
    let r = sessctl(&s, &["--color=sometimes", "log"], None);
    assert_eq!(r.code, 2);
}

// ---- progress ----

/// Three OpenAI chat files to import.
fn chat_files(dir: &Path) -> std::path::PathBuf {
    let files = dir.join("chats");
    std::fs::create_dir_all(&files).unwrap();
    for k in 1..=3 {
        std::fs::write(
            files.join(format!("c{k}.json")),
            format!(
                r#"{{"messages":[{{"role":"user","content":"q{k}"}},{{"role":"assistant","content":"a{k}"}}]}}"#
            ),
        )
        .unwrap();
    }
    files
}

// Local only: clones, pushes and pulls between store directories, and a
// terminal through script(1).
#[test]
fn long_commands_draw_progress_on_a_terminal_only() {
    let (d, s) = two_conversations();
    let files = chat_files(d.path());
    let f = files.to_str().unwrap();
    let b = d.path().join("b");
    let bp = b.to_str().unwrap();
    // In a pipe: not a byte of progress on stderr.
    for args in [
        &["import", "--from", "openai", f][..],
        &["clone", s.to_str().unwrap(), bp],
        &["push", bp],
        &["pull", bp],
        &["gc"],
        &["repack"],
        &["reindex"],
        &["fsck"],
    ] {
        let r = sessctl(&s, args, None);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stderr);
        assert_eq!(r.stderr, "", "{args:?}");
    }
    if !have_script() {
        eprintln!("skipped: no `script` to give sessctl a terminal");
        return;
    }
    let (d, s) = two_conversations();
    let files = chat_files(d.path());
    let term = run_on_terminal(
        d.path(),
        &s,
        &["import", "--from", "openai", files.to_str().unwrap()],
        &[],
    );
    // indicatif skips redraws that come too fast: which counts show
    // depends on timing; that there is a bar with N/M and a rate does not.
    assert!(term.contains("import: reading files ["), "{term:?}");
    assert!(term.contains("/3 "), "N/M: {term:?}");
    assert!(term.contains("/s "), "a rate: {term:?}");
    // Each redraw clears its line; the summary starts on a cleared line and
    // nothing of the bar follows it.
    let last = term.rsplit("\x1b[2K").next().unwrap();
    assert!(
        last.starts_with("imported 3 files: 3 sessions (3 new)"),
        "{last:?}"
    );
    assert_eq!(last.lines().count(), 1, "{last:?}");

    let c = d.path().join("c");
    let term = run_on_terminal(
        d.path(),
        &s,
        &["clone", s.to_str().unwrap(), c.to_str().unwrap()],
        &[],
    );
    assert!(term.contains("clone: counting objects "), "{term:?}");
    let last = term.rsplit("\x1b[2K").next().unwrap();
    assert!(last.starts_with("cloned "), "{last:?}");
    for (args, shows) in [
        (&["gc"][..], "gc: "),
        (&["fsck"], "fsck: "),
        (&["repack"], "repack: "),
        (&["reindex"], "reindex: "),
    ] {
        let term = run_on_terminal(d.path(), &s, args, &[]);
        assert!(term.contains(shows), "{args:?}: {term:?}");
    }
}
