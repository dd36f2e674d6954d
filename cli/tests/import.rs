//! End to end: `sessctl import` and `sessctl export` of the real binary on
//! copies of real session files (`../shared/data`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{Run, Target, TestStore};

use std::path::{Path, PathBuf};

use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data");

two_backends!(
    import_prints_a_summary_and_a_second_import_writes_nothing,
    skipped_lines_exit_1_and_are_listed,
    json_report,
    every_line_of_a_finished_claude_code_file_exports_back,
);

fn sessctl<T: Target + ?Sized>(store: &T, args: &[&str]) -> Run {
    support::sessctl(store, args, None)
}

/// Copies of a few data files beside the store; `None` when the data is
/// absent.
fn setup(s: &TestStore) -> Option<PathBuf> {
    let src = Path::new(DATA).join("claude-code");
    if !src.exists() {
        eprintln!("note: {} is absent; skipping", src.display());
        return None;
    }
    let files = s.scratch().join("in");
    std::fs::create_dir(&files).unwrap();
    for f in [
        "session-9eda1058.jsonl",
        "claude/-tmp-private/4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl",
    ] {
        let p = src.join(f);
        std::fs::copy(&p, files.join(p.file_name().unwrap())).unwrap();
    }
    Some(files)
}

fn import_prints_a_summary_and_a_second_import_writes_nothing(store: &TestStore) {
    let Some(files) = setup(store) else {
        return;
    };
    let dir = files.to_str().unwrap();
    let r = sessctl(store, &["import", "--from", "claude-code", dir]);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(
        r.stdout,
        "imported 2 files: 7 sessions (7 new), 26 messages, 0 forks, 0 compactions, \
         33 objects written, 2 refs moved; 0 lines skipped\n\
         HEAD now names cc-9eda1058-970, the most recently active conversation imported\n"
    );
    let again = sessctl(store, &["import", "--from", "claude-code", dir]);
    assert_eq!(again.code, 0);
    assert!(
        again.stdout.contains("(0 new)")
            && again.stdout.contains("0 objects written, 0 refs moved"),
        "{}",
        again.stdout
    );
    // The history exports back as Claude Code lines: importing them into a
    // new store gives the same head.
    let head = sessctl(store, &["rev-parse", "cc-4c2ddfdc-b61"]).stdout;
    let out = files.parent().unwrap().join("out.jsonl");
    let e = sessctl(
        store,
        &[
            "export",
            "cc-4c2ddfdc-b61",
            "--format",
            "claude-code",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!((e.code, e.stdout.as_str(), e.stderr.as_str()), (0, "", ""));
    let other = files.parent().unwrap().join("t");
    sessctl(&other, &["init"]);
    let r = sessctl(
        &other,
        &["import", "--from", "claude-code", out.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        sessctl(&other, &["rev-parse", "cc-4c2ddfdc-b61"]).stdout,
        head
    );
    // jsonl: one message a line.
    let jl = sessctl(store, &["export", "cc-4c2ddfdc-b61", "--format", "jsonl"]);
    assert_eq!(jl.code, 0);
    assert!(jl
        .stdout
        .lines()
        .all(|l| serde_json::from_str::<Value>(l).is_ok()));
    let bad = sessctl(store, &["export", "cc-4c2ddfdc-b61", "--format", "xml"]);
    assert_eq!(bad.code, 2);
}

fn skipped_lines_exit_1_and_are_listed(store: &TestStore) {
    let Some(files) = setup(store) else {
        return;
    };
    let f = files.join("session-9eda1058.jsonl");
    let text = std::fs::read_to_string(&f).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{not json";
    std::fs::write(&f, lines.join("\n") + "\n").unwrap();
    let r = sessctl(
        store,
        &["import", "--from", "claude-code", f.to_str().unwrap()],
    );
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("; 1 lines skipped\n"), "{}", r.stdout);
    let line = r.stderr.lines().next().unwrap();
    assert!(
        line.starts_with(&format!("{}:3: invalid JSON", f.display())),
        "{}",
        r.stderr
    );
    // The rest is in the store.
    let ls = sessctl(store, &["ls"]);
    assert!(ls.stdout.contains("cc-9eda1058-970"), "{}", ls.stdout);
}

fn json_report(store: &TestStore) {
    let Some(files) = setup(store) else {
        return;
    };
    let r = sessctl(
        store,
        &[
            "import",
            "--from",
            "claude-code",
            "--json",
            files.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(r.stdout.lines().count(), 1);
    for k in [
        "files",
        "sessions_total",
        "sessions_written",
        "messages",
        "forks",
        "compactions",
        "conversations",
        "objects_written",
        "refs_moved",
        "bytes_read",
    ] {
        assert!(v[k].is_u64(), "{k}: {v}");
    }
    assert_eq!(v["files"], 2);
    assert_eq!(v["skipped"], Value::Array(vec![]));
    assert_eq!(v["dangling"], Value::Array(vec![]));
    let bad = sessctl(store, &["import", "--from", "word", "x"]);
    assert_eq!(bad.code, 2);
}

/// The Claude Code files of the data that are one conversation's whole
/// line (no subagent files beside them).
const WHOLE_CLAUDE_FILES: [&str; 9] = [
    "session-196820da.jsonl",
    "session-3fe1b6bc.jsonl",
    "session-624a4a58.jsonl",
    "session-9eda1058.jsonl",
    "claude/-tmp-private/4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl",
    "claude/incremental-simple/turn-1.jsonl",
    "claude/incremental-simple/turn-2.jsonl",
    "claude/incremental-subagents/turn-1.jsonl",
    "claude/incremental-subagents/turn-2.jsonl",
];

/// Imported with --finished, a Claude Code file exports back as every one
/// of its lines, byte for byte: messages, the lines between them, and the
/// lines after its last message (`system` `stop_hook_summary` and
/// `turn_duration`, summaries), which the conversation's record keeps.
fn every_line_of_a_finished_claude_code_file_exports_back(s: &TestStore) {
    let src = Path::new(DATA).join("claude-code");
    if !src.exists() {
        eprintln!("note: {} is absent; skipping", src.display());
        return;
    }
    // The lines of `a` that `b` does not have (as many times), each cut
    // short for the failure report.
    let missing = |a: &str, b: &str| {
        let mut left: Vec<&str> = b.lines().collect();
        let mut out = Vec::new();
        for l in a.lines().filter(|l| !l.trim().is_empty()) {
            if let Some(i) = left.iter().position(|x| *x == l) {
                left.swap_remove(i);
            } else {
                out.push(l.chars().take(160).collect::<String>());
            }
        }
        out
    };
    for f in WHOLE_CLAUDE_FILES {
        let path = src.join(f);
        let store = s.another();
        let r = sessctl(
            &store,
            &["import", "--finished", "--json", path.to_str().unwrap()],
        );
        assert_eq!(r.code, 0, "{f}: {}", r.stderr);
        let ls: Value = serde_json::from_str(&sessctl(&store, &["ls", "--json"]).stdout).unwrap();
        let [conversation] = ls.as_array().unwrap().as_slice() else {
            panic!("{f}: one conversation, not {ls}");
        };
        let name = conversation["name"].as_str().unwrap();
        let e = sessctl(&store, &["export", name, "--format", "claude-code"]);
        assert_eq!((e.code, e.stderr.as_str()), (0, ""), "{f}");
        let source = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            missing(&source, &e.stdout),
            Vec::<String>::new(),
            "{f}: lost"
        );
        assert_eq!(
            missing(&e.stdout, &source),
            Vec::<String>::new(),
            "{f}: added"
        );
    }
}
