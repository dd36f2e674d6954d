//! End to end: capture as agents write (`sessctl hook`, `import --watch`)
//! and the way back (`export --into-claude`, `--into-codex`), on copies of
//! real session files (`../shared/data`). Each on a local store and on a
//! remote one (`name::local`, `name::remote`), the stores it compares with
//! local; the tests of a store directory's files run locally only and say
//! so.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::data;
use support::{Run, Target, TestStore};

two_backends!(
    hook_claude_code_imports_the_transcript_with_its_subagents,
    hook_takes_the_subagents_under_the_session_folder,
    hook_imports_a_growing_transcript_and_leaves_a_half_written_line,
    a_stop_before_the_answer_is_flushed_ends_no_turn,
    a_hook_never_moves_a_conversation_back,
    bad_hook_input_is_one_line_and_exit_1_never_2,
    two_hooks_at_once_both_land,
    a_cursor_is_distrusted_once_another_machine_moves_the_refs,
    hooks_on_two_machines_at_once_neither_lose_nor_duplicate_turns,
    hook_codex_imports_the_thread_the_notify_payload_names,
    watch_follows_a_growing_transcript_and_new_files_and_stops_on_sigterm,
    export_into_claude_writes_a_session_claude_code_resumes,
    export_into_codex_writes_a_rollout_codex_resumes,
);

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The Claude Code session with subagents in older versions' layout.
const CC_DIR: &str = "claude-code/claude/-tmp-private";
const CC_SESSION: &str = "4c2ddfdc-b619-4525-8d03-1950fb1b0257";
const CC_NAME: &str = "cc-4c2ddfdc-b61";
const CODEX_FILE: &str =
    "codex/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl";
const CODEX_THREAD: &str = "019e1625-789d-76c0-80ab-3724b5ddb799";
const CODEX_NAME: &str = "codex-019e1625-789";

fn sessctl<T: Target + ?Sized>(store: &T, args: &[&str]) -> Run {
    support::sessctl(store, args, None)
}

/// `sessctl` with extra environment (HOME, CODEX_HOME, ...).
fn sessctl_env<T: Target + ?Sized>(
    store: &T,
    args: &[&str],
    env: &[(&str, &Path)],
    stdin: Option<&str>,
) -> Run {
    finish(start(command(store, args, env, &[]), stdin))
}

/// The command `sessctl --store STORE ARGS...`, with `env` added to the
/// store's environment (and winning over it) and the variables `unset`
/// taken out.
fn command<T: Target + ?Sized>(
    store: &T,
    args: &[&str],
    env: &[(&str, &Path)],
    unset: &[&str],
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessctl"));
    cmd.arg("--store")
        .arg(store.arg())
        .args(args)
        .env_remove("SESSCTL_STORE")
        .envs(store.env())
        .env_remove("CODEX_HOME")
        .env_remove("CLAUDE_CONFIG_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    for k in unset {
        cmd.env_remove(k);
    }
    cmd
}

/// Starts `cmd`, `stdin` written to it (else its stdin is empty).
fn start(mut cmd: Command, stdin: Option<&str>) -> std::process::Child {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    }
    child
}

fn finish(child: std::process::Child) -> Run {
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

fn init(store: &Path) {
    let r = sessctl(store, &["init"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// The messages of a conversation, one JSON value each (`None` when the
/// store has no such conversation).
fn messages<T: Target + ?Sized>(store: &T, rev: &str) -> Option<Vec<Value>> {
    let r = sessctl(store, &["export", rev, "--format", "jsonl"]);
    (r.code == 0).then(|| {
        r.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    })
}

/// The messages importing `files` into a new store gives (`None`: no such
/// conversation yet, its first turn not ended). With `finished`, as
/// `import --finished` does: what a hook at the end of a turn imports.
fn imported_messages(
    dir: &Path,
    format: &str,
    files: &[&Path],
    rev: &str,
    finished: bool,
) -> Option<Vec<Value>> {
    let store = dir.join(format!("scratch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    init(&store);
    let mut args = vec!["import", "--from", format];
    if finished {
        args.push("--finished");
    }
    args.extend(files.iter().map(|f| f.to_str().unwrap()));
    let r = sessctl(&store, &args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let m = messages(&store, rev);
    std::fs::remove_dir_all(&store).unwrap();
    m
}

/// The last answer of a Claude Code transcript as Stop hooks name it
/// (`last_assistant_message`): the text of its last assistant line.
fn last_answer(transcript: &Path) -> Option<String> {
    let text = std::fs::read_to_string(transcript).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "assistant")
        .and_then(|v| match &v["message"]["content"] {
            Value::String(t) => Some(t.clone()),
            Value::Array(b) => {
                let t: Vec<&str> = b
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                (!t.is_empty()).then(|| t.join("\n\n"))
            }
            _ => None,
        })
}

fn hook_json(transcript: &Path, event: &str) -> String {
    json!({
        "session_id": CC_SESSION,
        "transcript_path": transcript,
        "cwd": "/tmp/private",
        "hook_event_name": event,
        "stop_hook_active": false,
        "permission_mode": "default",
        "last_assistant_message": last_answer(transcript),
    })
    .to_string()
}

fn hook<T: Target + ?Sized>(store: &T, stdin: &str) -> Run {
    support::sessctl(store, &["hook", "claude-code"], Some(stdin))
}

fn hook_claude_code_imports_the_transcript_with_its_subagents(s: &TestStore) {
    let Some(src) = data(CC_DIR) else {
        return;
    };
    let dir = s.scratch();
    let files = dir.as_path().join("p");
    copy_dir(&src, &files);
    let store = s;
    let transcript = files.join(format!("{CC_SESSION}.jsonl"));
    let r = hook(&store, &hook_json(&transcript, "Stop"));
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert!(r.stdout.contains("new sessions"), "{}", r.stdout);
    // The same as importing the folder: the session and its subagents.
    let all = dir.as_path().join("all");
    init(&all);
    // A Stop hook: the turn has ended, as `import --finished` takes it.
    let i = sessctl(
        &all,
        &[
            "import",
            "--from",
            "claude-code",
            "--finished",
            files.to_str().unwrap(),
        ],
    );
    assert_eq!(i.code, 0, "{}", i.stderr);
    let refs = |t: &dyn Target| sessctl(t, &["for-each-ref"]).stdout;
    assert_eq!(refs(&store), refs(&all));
    assert!(refs(&store).contains(".agent-"), "{}", refs(&store));
    // Again: nothing new, nothing printed, nothing written.
    let ops = sessctl(&store, &["reflog"]).stdout;
    let again = hook(&store, &hook_json(&transcript, "SessionEnd"));
    assert_eq!(
        (again.code, again.stdout.as_str(), again.stderr.as_str()),
        (0, "", "")
    );
    assert_eq!(sessctl(&store, &["reflog"]).stdout, ops);
}

fn hook_takes_the_subagents_under_the_session_folder(s: &TestStore) {
    let Some(src) = data("claude-code/claude/incremental-subagents") else {
        return;
    };
    let dir = s.scratch();
    let files = dir.as_path().join("p");
    copy_dir(&src, &files);
    copy_dir(
        &src.join("turn-2/subagents"),
        &files.join("turn-2/subagents"),
    );
    let store = s;
    let transcript = files.join("turn-2.jsonl");
    let payload = json!({"transcript_path": transcript, "hook_event_name": "SubagentStop"});
    let r = hook(&store, &payload.to_string());
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let all = dir.as_path().join("all");
    init(&all);
    let agent = files.join("turn-2/subagents/agent-a485154.jsonl");
    // SubagentStop says nothing of the main turn: an import without
    // --finished.
    let i = sessctl(
        &all,
        &[
            "import",
            "--from",
            "claude-code",
            transcript.to_str().unwrap(),
            agent.to_str().unwrap(),
        ],
    );
    assert_eq!(i.code, 0, "{}", i.stderr);
    let refs = |t: &dyn Target| sessctl(t, &["for-each-ref"]).stdout;
    assert_eq!(refs(&store), refs(&all));
    assert!(refs(&store).contains(".agent-"), "{}", refs(&store));
}

// Local only: copies the cursors a store directory keeps (capture/).
#[test]
fn a_cursor_is_never_trusted_over_the_store() {
    let Some(src) = data(CC_DIR) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("p");
    copy_dir(&src, &files);
    let transcript = files.join(format!("{CC_SESSION}.jsonl"));
    let a = dir.path().join("a");
    init(&a);
    assert_eq!(hook(&a, &hook_json(&transcript, "Stop")).code, 0);
    // Another store given the first one's cursors (a copied directory, a
    // restored backup): they say "done", its refs say otherwise.
    let b = dir.path().join("b");
    init(&b);
    copy_dir(&a.join("capture"), &b.join("capture"));
    let r = hook(&b, &hook_json(&transcript, "Stop"));
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_eq!(messages(&b, CC_NAME), messages(&a, CC_NAME));
    assert!(messages(&b, CC_NAME).is_some());
}

fn hook_imports_a_growing_transcript_and_leaves_a_half_written_line(s: &TestStore) {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let dir = s.scratch();
    let store = s;
    let text = std::fs::read_to_string(&src).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let sid = lines
        .iter()
        .find_map(|l| {
            serde_json::from_str::<Value>(l).ok()?["sessionId"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap();
    let name = format!("cc-{}", &sid[..12]);
    let transcript = dir.as_path().join("t.jsonl");
    let n = lines.len();
    for k in [n / 3, n / 2, n - 1, n] {
        // The first k lines and half of the next, as an agent leaves a
        // file mid-write.
        let mut body = lines[..k].join("\n") + "\n";
        if k < n {
            body += &lines[k][..lines[k].len() / 2];
        }
        std::fs::write(&transcript, &body).unwrap();
        // A hook that fires mid-turn (a tool's end): an unended turn waits,
        // as in an import of the same prefix.
        let payload = json!({"session_id": sid, "transcript_path": transcript,
            "hook_event_name": "PostToolUse", "cwd": "/x"});
        let r = hook(&store, &payload.to_string());
        assert_eq!((r.code, r.stderr.as_str()), (0, ""), "at {k} lines");
        let prefix = dir.as_path().join("prefix.jsonl");
        std::fs::write(&prefix, lines[..k].join("\n") + "\n").unwrap();
        let want = imported_messages(dir.as_path(), "claude-code", &[&prefix], &name, false);
        assert_eq!(messages(&store, &name), want, "at {k} lines");
    }
    // The session ends: its last turn lands too, whether or not the file
    // marks its end, as with `import --finished`; every move a fast-forward.
    let payload = json!({"session_id": sid, "transcript_path": transcript,
        "hook_event_name": "SessionEnd", "cwd": "/x",
        "last_assistant_message": last_answer(&transcript)});
    let r = hook(&store, &payload.to_string());
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let want = imported_messages(dir.as_path(), "claude-code", &[&src], &name, true);
    assert!(want.is_some());
    assert_eq!(messages(&store, &name), want);
    let f = sessctl(&store, &["fsck"]);
    assert_eq!(f.code, 0, "{}{}", f.stdout, f.stderr);
}

/// Claude Code may fire Stop before the answer is in the file: the turn
/// waits until the file holds the answer the payload names, and every move
/// of the conversation is a fast-forward (`push` takes it).
fn a_stop_before_the_answer_is_flushed_ends_no_turn(s: &TestStore) {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let dir = s.scratch();
    let store = s;
    let text = std::fs::read_to_string(&src).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let name = "cc-9eda1058-970";
    let transcript = dir.as_path().join("t.jsonl");
    let answer = last_answer(&src);
    assert!(answer.is_some());
    let stop = |event: &str| {
        json!({"transcript_path": transcript, "hook_event_name": event,
            "last_assistant_message": answer})
        .to_string()
    };
    let mut heads = Vec::new();
    for k in [29, lines.len()] {
        std::fs::write(&transcript, lines[..k].join("\n") + "\n").unwrap();
        for event in ["SubagentStop", "Stop"] {
            let r = hook(&store, &stop(event));
            assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{event} at {k}");
        }
        let prefix = dir.as_path().join("prefix.jsonl");
        std::fs::write(&prefix, lines[..k].join("\n") + "\n").unwrap();
        let want = imported_messages(
            dir.as_path(),
            "claude-code",
            &[&prefix],
            name,
            k == lines.len(),
        );
        assert_eq!(messages(&store, name), want, "at {k} lines");
        let h = sessctl(&store, &["rev-parse", name]);
        if h.code == 0 {
            heads.push(h.stdout.trim().to_owned());
        }
    }
    assert_eq!(heads.len(), 2, "{heads:?}");
    let r = sessctl(
        &store,
        &["merge-base", "--is-ancestor", &heads[0], &heads[1]],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let refs = sessctl(&store, &["for-each-ref"]).stdout;
    assert!(!refs.contains(".imported"), "{refs}");
}

/// A hook never moves a conversation to a line that does not descend from
/// it, even one an explicit `import --finished` ended early.
fn a_hook_never_moves_a_conversation_back(s: &TestStore) {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let dir = s.scratch();
    let store = s;
    let text = std::fs::read_to_string(&src).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let name = "cc-9eda1058-970";
    let transcript = dir.as_path().join("t.jsonl");
    std::fs::write(&transcript, lines[..29].join("\n") + "\n").unwrap();
    let t = transcript.to_str().unwrap();
    let i = sessctl(
        &store,
        &["import", "--from", "claude-code", "--finished", t],
    );
    assert_eq!(i.code, 0, "{}", i.stderr);
    let before = sessctl(&store, &["rev-parse", name]).stdout;
    std::fs::copy(&src, &transcript).unwrap();
    let payload = json!({"transcript_path": transcript, "hook_event_name": "Stop",
        "last_assistant_message": last_answer(&src)});
    let r = hook(&store, &payload.to_string());
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let after = sessctl(&store, &["rev-parse", name]).stdout;
    let r = sessctl(
        &store,
        &["merge-base", "--is-ancestor", before.trim(), after.trim()],
    );
    assert_eq!(r.code, 0, "{before} {after}");
}

fn bad_hook_input_is_one_line_and_exit_1_never_2(store: &TestStore) {
    for (stdin, says) in [
        ("", "not valid JSON"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        (r#"{"session_id": "x"}"#, "no \"transcript_path\""),
        (
            r#"{"transcript_path": "/nonexistent/x.jsonl"}"#,
            "no such transcript",
        ),
    ] {
        let r = hook(&store, stdin);
        assert_eq!(r.code, 1, "{stdin}: {}", r.stderr);
        assert_eq!(r.stdout, "");
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(
            r.stderr.starts_with("sessctl: hook: ") && r.stderr.contains(says),
            "{stdin}: {}",
            r.stderr
        );
    }
    // What clap refuses is exit 1 too under `hook` (2 elsewhere).
    let r = support::sessctl(&store, &["hook", "claude"], Some("{}"));
    assert_eq!(r.code, 1, "{}", r.stderr);
    let r = support::sessctl(&store, &["hook", "claude-code", "--bogus"], Some("{}"));
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(sessctl(&store, &["nonsense"]).code, 2);
    // A store that is no store (a directory that is none): exit 1.
    if let Some(path) = store.path() {
        let r = support::sessctl(
            &path.join("nope"),
            &["hook", "claude-code"],
            Some(r#"{"transcript_path": "/etc/hostname"}"#),
        );
        assert_eq!(r.code, 1, "{}", r.stderr);
    }
}

fn two_hooks_at_once_both_land(s: &TestStore) {
    let Some(src) = data("claude-code") else {
        return;
    };
    let dir = s.scratch();
    let a = dir.as_path().join("session-9eda1058.jsonl");
    let b = dir.as_path().join("session-196820da.jsonl");
    std::fs::copy(src.join("session-9eda1058.jsonl"), &a).unwrap();
    std::fs::copy(src.join("session-196820da.jsonl"), &b).unwrap();
    // Stop: the turn ended, as `import --finished` (SubagentStop finishes
    // nothing, and Stop does not trust its cursor).
    let want_a = imported_messages(dir.as_path(), "claude-code", &[&a], "cc-9eda1058-970", true);
    assert!(want_a.is_some());
    let conv_b = {
        let all = dir.as_path().join("names");
        init(&all);
        sessctl(
            &all,
            &[
                "import",
                "--from",
                "claude-code",
                "--finished",
                b.to_str().unwrap(),
            ],
        );
        let out = sessctl(&all, &["ls", "--json"]).stdout;
        let v: Value = serde_json::from_str(&out).unwrap();
        v.as_array().unwrap()[0]["name"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let want_b = imported_messages(dir.as_path(), "claude-code", &[&b], &conv_b, true);
    assert!(want_b.is_some());
    let spawn = |store: &TestStore, t: &Path, event: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sessctl"))
            .arg("--store")
            .arg(store.arg())
            .args(["hook", "claude-code"])
            .env_remove("SESSCTL_STORE")
            .envs(store.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let payload = json!({"transcript_path": t, "hook_event_name": event,
            "last_assistant_message": last_answer(t)});
        c.stdin
            .take()
            .unwrap()
            .write_all(payload.to_string().as_bytes())
            .unwrap();
        c
    };
    for round in 0..12 {
        // A new store each round, on the test's backend.
        let store = s.another();
        // Two sessions' hooks, and the same session's Stop and
        // SubagentStop, all at once.
        let second = if round % 2 == 0 { &b } else { &a };
        let children = [
            spawn(&store, &a, "Stop"),
            spawn(&store, second, "SubagentStop"),
            spawn(&store, &b, "Stop"),
        ];
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "round {round}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(messages(&store, "cc-9eda1058-970"), want_a, "round {round}");
        assert_eq!(messages(&store, &conv_b), want_b, "round {round}");
    }
}

/// A hook's payload naming `transcript` for an event that finishes no turn
/// (as `import` without `--finished` takes it).
fn subagent_stop(transcript: &Path) -> String {
    json!({"transcript_path": transcript, "hook_event_name": "SubagentStop"}).to_string()
}

/// The copy of `src`'s lines without their sessionId, at `to`: a hook can
/// then not name the conversation before importing (its name comes from the
/// file's), so its cursor records no refs.
fn without_session_ids(src: &Path, to: &Path) {
    let text: String = std::fs::read_to_string(src)
        .unwrap()
        .lines()
        .map(|l| without_session_id(serde_json::from_str(l).unwrap()).to_string() + "\n")
        .collect();
    std::fs::write(to, text).unwrap();
}

/// The directories under `dir` (none when it is absent).
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

/// Every file under `dir`, with its bytes.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

/// A remote store through another spelling of its URL.
struct Spelt<'a> {
    url: String,
    store: &'a TestStore,
}

impl Target for Spelt<'_> {
    fn arg(&self) -> std::ffi::OsString {
        self.url.clone().into()
    }
    fn env(&self) -> Vec<(String, String)> {
        self.store.env()
    }
    fn scratch(&self) -> PathBuf {
        self.store.scratch()
    }
}

// Remote only: a local store's cursors are in its own directory.
#[test]
fn a_remote_store_never_takes_another_stores_cursor() {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let Some(a) = TestStore::remote() else {
        return;
    };
    let b = a.another();
    let dir = a.scratch();
    // This test's own cache (the servers' is every test's).
    let cache = dir.join("cache");
    // No sessionId: the cursor records no refs, so only where it lives
    // keeps the two stores' apart.
    let transcript = dir.join("t.jsonl");
    without_session_ids(&src, &transcript);
    let name = "cc-t";
    let want = imported_messages(&dir, "claude-code", &[&transcript], name, false);
    assert!(want.is_some());
    let payload = subagent_stop(&transcript);
    let hook_on = |s: &dyn Target| {
        sessctl_env(
            &s,
            &["hook", "claude-code"],
            &[("SESSCTL_CACHE_DIR", &cache)],
            Some(&payload),
        )
    };
    let r = hook_on(&a);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert!(r.stdout.contains("new sessions"), "{}", r.stdout);
    assert_eq!(messages(&a, name), want);
    // Again into A: its cursor says nothing changed.
    let r = hook_on(&a);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    // The same file into B, through the same cache: B has no cursor yet,
    // and A's is not B's.
    let r = hook_on(&b);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert!(r.stdout.contains("new sessions"), "{}", r.stdout);
    assert_eq!(messages(&b, name), want);
    let stores = subdirs(&cache.join("capture"));
    assert_eq!(stores.len(), 2, "{stores:?}");
    // A through its URL with a password, and sslmode: the same store, the
    // same directory, whose cursor says nothing changed. The password is
    // nowhere in the cache.
    let url = a.arg().into_string().unwrap();
    let spelt = Spelt {
        url: url.replacen("://sessctl@", "://sessctl:hunter2@", 1) + "&sslmode=disable",
        store: &a,
    };
    assert_ne!(spelt.url, url);
    let r = hook_on(&spelt);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    assert_eq!(subdirs(&cache.join("capture")), stores);
    for (path, bytes) in files_under(&cache) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("hunter2"), "{}", path.display());
    }
}

// Remote only: a local store keeps its cursors in its own directory.
#[test]
fn without_a_usable_cache_directory_a_remote_capture_says_so_and_writes_nothing() {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let Some(s) = TestStore::remote() else {
        return;
    };
    let dir = s.scratch();
    let transcript = dir.join("t.jsonl");
    std::fs::copy(&src, &transcript).unwrap();
    let payload = subagent_stop(&transcript);
    let not_a_dir = dir.join("not-a-dir");
    std::fs::write(&not_a_dir, "x").unwrap();
    let read_only = dir.join("read-only");
    std::fs::create_dir(&read_only).unwrap();
    std::fs::set_permissions(
        &read_only,
        std::os::unix::fs::PermissionsExt::from_mode(0o555),
    )
    .unwrap();
    // The cache directory as the environment leaves it: none, or
    // SESSCTL_CACHE_DIR naming one; and what the error then says.
    let none = "there is none";
    let unusable = "cannot keep capture cursors in";
    let mut cases = vec![(None, none), (Some(not_a_dir.as_path()), unusable)];
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // root writes in a directory of mode 0555 all the same.
        cases.push((Some(read_only.as_path()), unusable));
    }
    let before = (
        sessctl(&s, &["for-each-ref"]).stdout,
        sessctl(&s, &["reflog"]).stdout,
    );
    let watch = ["import", "--watch", "--from", "claude-code"];
    let watch: Vec<&str> = watch
        .into_iter()
        .chain([transcript.to_str().unwrap()])
        .collect();
    for (cache, says) in cases {
        let env: Vec<(&str, &Path)> = cache
            .map(|c| ("SESSCTL_CACHE_DIR", c))
            .into_iter()
            .collect();
        let unset: &[&str] = match cache {
            None => &["SESSCTL_CACHE_DIR", "XDG_CACHE_HOME", "HOME"],
            Some(_) => &[],
        };
        let env = env.as_slice();
        let r = finish(start(
            command(&s, &["hook", "claude-code"], env, unset),
            Some(&payload),
        ));
        assert_eq!(r.code, 1, "{says}: {}", r.stderr);
        assert_eq!(r.stdout, "");
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(
            r.stderr.starts_with("sessctl: hook: ") && r.stderr.contains(says),
            "{}",
            r.stderr
        );
        // The watcher stops before it watches anything.
        let mut child = start(command(&s, &watch, env, unset), None);
        eventually("the watcher to give up", || {
            child.try_wait().unwrap().is_some()
        });
        let r = finish(child);
        assert_eq!(r.code, 1, "{says}: {}", r.stderr);
        assert_eq!(r.stdout, "");
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
        assert!(
            r.stderr.starts_with("sessctl: ") && r.stderr.contains(says),
            "{}",
            r.stderr
        );
    }
    // Nothing written: not to the store, not beside the cache.
    let after = (
        sessctl(&s, &["for-each-ref"]).stdout,
        sessctl(&s, &["reflog"]).stdout,
    );
    assert_eq!(after, before);
    assert_eq!(std::fs::read(&not_a_dir).unwrap(), b"x");
    assert!(files_under(&read_only).is_empty());
    // With a cache directory it may use, the same hook imports.
    let r = sessctl_env(
        &s,
        &["hook", "claude-code"],
        &[("SESSCTL_CACHE_DIR", &dir.join("cache"))],
        Some(&payload),
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert!(r.stdout.contains("new sessions"), "{}", r.stdout);
}

/// A cursor is distrusted once the refs it recorded moved, whoever moved
/// them: here another machine (its own cache) moves the conversation back,
/// and the next hook on this one, the file unchanged, reads it again.
fn a_cursor_is_distrusted_once_another_machine_moves_the_refs(s: &TestStore) {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let dir = s.scratch();
    let transcript = dir.join("t.jsonl");
    std::fs::copy(&src, &transcript).unwrap();
    let name = "cc-9eda1058-970";
    let here = dir.join("cache-here");
    let there = dir.join("cache-there");
    let payload = subagent_stop(&transcript);
    let hook_here = || {
        sessctl_env(
            s,
            &["hook", "claude-code"],
            &[("SESSCTL_CACHE_DIR", &here)],
            Some(&payload),
        )
    };
    let r = hook_here();
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let head = sessctl(s, &["rev-parse", name]).stdout;
    let r = hook_here();
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    let back = format!("{name}~2");
    let r = sessctl_env(
        s,
        &["reset", name, &back],
        &[("SESSCTL_CACHE_DIR", &there)],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_ne!(sessctl(s, &["rev-parse", name]).stdout, head);
    let r = hook_here();
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert!(r.stdout.contains("1 refs moved"), "{}", r.stdout);
    assert_eq!(sessctl(s, &["rev-parse", name]).stdout, head);
}

/// Hooks of one session on two machines (two caches: they do not take
/// turns) at once, as the file grows: whoever loses a compare-and-swap
/// retries, and the store ends with every turn once, as one import of the
/// file leaves it.
fn hooks_on_two_machines_at_once_neither_lose_nor_duplicate_turns(s: &TestStore) {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let dir = s.scratch();
    let text = std::fs::read_to_string(&src).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    let name = "cc-9eda1058-970";
    let transcript = dir.join("t.jsonl");
    let machines = [dir.join("machine-1"), dir.join("machine-2")];
    let payload = subagent_stop(&transcript);
    for k in [n / 3, n * 2 / 3, n] {
        std::fs::write(&transcript, lines[..k].join("\n") + "\n").unwrap();
        let hooks: Vec<_> = machines
            .iter()
            .chain(&machines)
            .map(|cache| {
                start(
                    command(
                        s,
                        &["hook", "claude-code"],
                        &[("SESSCTL_CACHE_DIR", cache)],
                        &[],
                    ),
                    Some(&payload),
                )
            })
            .collect();
        for h in hooks {
            let r = finish(h);
            assert_eq!((r.code, r.stderr.as_str()), (0, ""), "at {k} lines");
        }
        let prefix = dir.join("prefix.jsonl");
        std::fs::write(&prefix, lines[..k].join("\n") + "\n").unwrap();
        let want = imported_messages(&dir, "claude-code", &[&prefix], name, false);
        assert_eq!(messages(s, name), want, "at {k} lines");
    }
    let refs = sessctl(s, &["for-each-ref"]).stdout;
    assert!(!refs.contains(".imported"), "{refs}");
    let f = sessctl(s, &["fsck"]);
    assert_eq!(f.code, 0, "{}{}", f.stdout, f.stderr);
}

fn hook_codex_imports_the_thread_the_notify_payload_names(s: &TestStore) {
    let Some(src) = data(CODEX_FILE) else {
        return;
    };
    let dir = s.scratch();
    let home = dir.as_path().join("codex");
    let day = home.join("sessions/2026/05/11");
    std::fs::create_dir_all(&day).unwrap();
    let rollout = day.join(src.file_name().unwrap());
    std::fs::copy(&src, &rollout).unwrap();
    let store = s;
    let payload = json!({
        "type": "agent-turn-complete",
        "thread-id": CODEX_THREAD,
        "turn-id": "1",
        "cwd": "/x",
        "input-messages": ["hi"],
        "last-assistant-message": "done",
    })
    .to_string();
    let r = sessctl_env(
        &store,
        &["hook", "codex", &payload],
        &[("CODEX_HOME", &home)],
        None,
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    // Codex notifies once a turn has completed, and the rollout marks it
    // (`task_complete`): as an import without --finished.
    let want = imported_messages(dir.as_path(), "codex", &[&rollout], CODEX_NAME, false);
    assert!(want.is_some());
    assert_eq!(messages(&store, CODEX_NAME), want);
    // A thread it cannot find, and no payload: exit 1, one line.
    let other = json!({"type": "agent-turn-complete", "thread-id": "nope"}).to_string();
    for args in [vec!["hook", "codex", other.as_str()], vec!["hook", "codex"]] {
        let r = sessctl_env(&store, &args, &[("CODEX_HOME", &home)], None);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    }
}

/// Polls until `f` holds, for at most a minute.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn watch_follows_a_growing_transcript_and_new_files_and_stops_on_sigterm(s: &TestStore) {
    let Some(src) = data("claude-code") else {
        return;
    };
    let dir = s.scratch();
    let store = s;
    let watched = dir.as_path().join("projects");
    std::fs::create_dir(&watched).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(store.arg())
        .args(["import", "--watch", "--from", "claude-code"])
        .env_remove("SESSCTL_STORE")
        .envs(store.env())
        .arg(&watched)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A transcript written line by line, in steps, the last step leaving
    // half a line.
    let text = std::fs::read_to_string(src.join("session-9eda1058.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let transcript = watched.join("session-9eda1058.jsonl");
    let mut f = std::fs::File::create(&transcript).unwrap();
    let n = lines.len();
    let mut written = 0;
    for k in [n / 4, n / 2, n] {
        for l in &lines[written..k] {
            f.write_all(l.as_bytes()).unwrap();
            f.write_all(b"\n").unwrap();
        }
        written = k;
        if k < n {
            f.write_all(&lines[k].as_bytes()[..lines[k].len() / 2])
                .unwrap();
        }
        f.flush().unwrap();
        let prefix = dir.as_path().join("prefix.jsonl");
        std::fs::write(&prefix, lines[..k].join("\n") + "\n").unwrap();
        // The watcher imports as `import` does: a turn not ended waits.
        let want = imported_messages(
            dir.as_path(),
            "claude-code",
            &[&prefix],
            "cc-9eda1058-970",
            false,
        );
        eventually(&format!("the first {k} lines"), || {
            messages(&store, "cc-9eda1058-970") == want
        });
        if k < n {
            // The rest of the half-written line comes with the next step.
            f.write_all(&lines[k].as_bytes()[lines[k].len() / 2..])
                .unwrap();
            f.write_all(b"\n").unwrap();
            written = k + 1;
        }
    }
    // A file created later, in a new subdirectory.
    let sub = watched.join("-tmp-private");
    copy_dir(&src.join("claude/-tmp-private"), &sub);
    let want = imported_messages(
        dir.as_path(),
        "claude-code",
        &[&sub.join(format!("{CC_SESSION}.jsonl"))],
        CC_NAME,
        false,
    )
    .expect("the session has an ended turn");
    eventually("the new session", || {
        messages(&store, CC_NAME).is_some_and(|m| m.len() >= want.len())
    });
    // SIGTERM: it ends cleanly.
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child, which has not been waited for.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let fsck = sessctl(&store, &["fsck"]);
    assert_eq!(fsck.code, 0, "{}", fsck.stdout);
}

// Local only: holds a store directory's LOCK file while the watcher writes.
#[test]
fn watch_retries_what_a_busy_store_refused() {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("s");
    init(&store);
    let watched = dir.path().join("w");
    std::fs::create_dir(&watched).unwrap();
    let text = std::fs::read_to_string(&src).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let transcript = watched.join("session-9eda1058.jsonl");
    // Enough lines for a turn that has ended (an unended one waits).
    let first = lines.len() * 3 / 4;
    std::fs::write(&transcript, lines[..first].join("\n") + "\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(&store)
        .args(["--wait", "0", "import", "--watch", "--from", "claude-code"])
        .arg(&watched)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stderr).lines() {
            tx.send(l.unwrap()).unwrap();
        }
    });
    eventually("the first lines", || {
        messages(&store, "cc-9eda1058-970").is_some()
    });
    // Another process holds the write lock while the agent writes on.
    let lock = support::hold_lock(&store, "4242");
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();
    let refused = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(refused.starts_with("sessctl: "), "{refused}");
    drop(lock);
    // No further write: the watcher tries again by itself.
    let want = imported_messages(dir.path(), "claude-code", &[&src], "cc-9eda1058-970", false);
    assert!(want.is_some());
    eventually("all lines", || messages(&store, "cc-9eda1058-970") == want);
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child, which has not been waited for.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    // What failed has since landed: exit 0.
    assert_eq!(child.wait().unwrap().code(), Some(0));
    reader.join().unwrap();
}

/// Checks what Claude Code expects of a session file: every line JSON, one
/// sessionId, the parentUuid chain intact. Returns the lines.
fn check_claude_file(path: &Path, id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if let Some(s) = v.get("sessionId") {
            assert_eq!(s, id, "{l}");
        }
        if matches!(v["type"].as_str(), Some("user" | "assistant")) {
            assert_eq!(v["sessionId"], id, "{l}");
            assert!(v["cwd"].is_string(), "{l}");
        }
        if let Some(u) = v.get("uuid").and_then(Value::as_str) {
            if let Some(p) = v["parentUuid"].as_str() {
                assert!(seen.contains(p), "parent {p} is no earlier line: {l}");
            }
            assert!(seen.insert(u.to_owned()), "uuid {u} twice");
        }
        out.push(v);
    }
    out
}

fn without_session_id(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("sessionId");
    }
    v
}

fn export_into_claude_writes_a_session_claude_code_resumes(s: &TestStore) {
    let Some(src) = data(CC_DIR) else {
        return;
    };
    let dir = s.scratch();
    let store = s;
    let r = sessctl(
        &store,
        &["import", "--from", "claude-code", src.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let source: Vec<Value> = std::fs::read_to_string(src.join(format!("{CC_SESSION}.jsonl")))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let by_uuid: HashMap<String, Value> = source
        .iter()
        .filter_map(|v| Some((v.get("uuid")?.as_str()?.to_owned(), v.clone())))
        .collect();
    // A fork cut two messages short, and the whole conversation into the
    // default place (HOME's ~/.claude/projects/<cwd encoded>/).
    let fork = sessctl(
        &store,
        &["fork", CC_NAME, "--as", "f", "--at-message", "10"],
    );
    assert_eq!(fork.code, 0, "{}", fork.stderr);
    let home = dir.as_path().join("home");
    for (rev, into) in [("f", Some(dir.as_path().join("out"))), (CC_NAME, None)] {
        let mut args = vec!["export", rev, "--format", "claude-code", "--into-claude"];
        if let Some(d) = &into {
            args.push(d.to_str().unwrap());
        }
        let r = sessctl_env(&store, &args, &[("HOME", &home)], None);
        assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{rev}");
        let out: Vec<&str> = r.stdout.lines().collect();
        assert_eq!(out.len(), 2, "{}", r.stdout);
        let path = PathBuf::from(out[0].strip_prefix("wrote ").unwrap());
        let id = out[1].rsplit(' ').next().unwrap();
        assert_eq!(out[1], format!("cd /tmp/private && claude --resume {id}"));
        let dir_want = into
            .clone()
            .unwrap_or_else(|| home.join(".claude/projects/-tmp-private"));
        assert_eq!(path, dir_want.join(format!("{id}.jsonl")));
        let lines = check_claude_file(&path, id);
        // Lines that came from the source are the source's, but for the
        // sessionId.
        let mut from_source = 0;
        for v in &lines {
            if let Some(orig) = v["uuid"].as_str().and_then(|u| by_uuid.get(u)) {
                assert_eq!(
                    without_session_id(v.clone()),
                    without_session_id(orig.clone())
                );
                assert_eq!(v["cwd"], orig["cwd"]);
                assert_eq!(v["version"], orig["version"]);
                from_source += 1;
            }
        }
        assert!(from_source >= 10, "{from_source}");
        // It imports back as the same messages, under the new id.
        let back = dir.as_path().join(format!("back-{rev}"));
        init(&back);
        // A session written whole: its last turn has ended.
        let r = sessctl(
            &back,
            &[
                "import",
                "--from",
                "claude-code",
                "--finished",
                path.to_str().unwrap(),
            ],
        );
        assert_eq!(r.code, 0, "{}", r.stderr);
        let name = format!("cc-{}", &id[..12]);
        let strip =
            |m: Vec<Value>| -> Vec<Value> { m.into_iter().map(without_session_id).collect() };
        assert_eq!(
            strip(messages(&back, &name).unwrap()),
            strip(messages(&store, rev).unwrap())
        );
        // Never over an existing file.
        if let Some(d) = &into {
            assert_eq!(std::fs::read_dir(d).unwrap().count(), 1);
        }
    }
    // --into-claude writes claude-code: another --format is a usage error.
    let r = sessctl(
        &store,
        &["export", "f", "--format", "openai", "--into-claude", "x"],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
}

fn export_into_codex_writes_a_rollout_codex_resumes(s: &TestStore) {
    let Some(src) = data(CODEX_FILE) else {
        return;
    };
    let dir = s.scratch();
    let store = s;
    let r = sessctl(
        &store,
        &["import", "--from", "codex", src.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let home = dir.as_path().join("codex");
    let r = sessctl_env(
        &store,
        &["export", CODEX_NAME, "--format", "codex", "--into-codex"],
        &[("CODEX_HOME", &home)],
        None,
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let out: Vec<&str> = r.stdout.lines().collect();
    let path = PathBuf::from(out[0].strip_prefix("wrote ").unwrap());
    let id = out[1].rsplit(' ').next().unwrap();
    assert!(
        out[1].ends_with(&format!("codex resume {id}")),
        "{}",
        out[1]
    );
    // $CODEX_HOME/sessions/YYYY/MM/DD/rollout-YYYY-MM-DDThh-mm-ss-<id>.jsonl
    let rel = path.strip_prefix(home.join("sessions")).unwrap();
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    assert_eq!(parts.len(), 4, "{rel:?}");
    let name = &parts[3];
    assert!(
        name.starts_with(&format!("rollout-{}-{}-{}T", parts[0], parts[1], parts[2]))
            && name.ends_with(&format!("-{id}.jsonl")),
        "{name}"
    );
    let lines: Vec<Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "session_meta");
    assert_eq!(lines[0]["payload"]["id"], id);
    assert_eq!(lines[0]["payload"]["forked_from_id"], CODEX_THREAD);
    assert!(lines
        .iter()
        .all(|l| l["timestamp"].is_string() && l["type"].is_string() && l["payload"].is_object()));
    // Every line after the session_meta is the source's, in its order.
    let source: Vec<Value> = std::fs::read_to_string(&src)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] != "session_meta")
        .collect();
    assert_eq!(lines[1..], source[..]);
    // --format codex alone prints the same lines, deterministically.
    let printed = sessctl(&store, &["export", CODEX_NAME, "--format", "codex"]);
    assert_eq!(printed.code, 0, "{}", printed.stderr);
    let again = sessctl(&store, &["export", CODEX_NAME, "--format", "codex"]);
    assert_eq!(printed.stdout, again.stdout);
    let printed: Vec<Value> = printed
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed[1..], lines[1..]);
    assert_eq!(printed[0]["payload"]["cwd"], lines[0]["payload"]["cwd"]);
    // The session_meta is the source's (its base_instructions, which the
    // store keeps as a blob, too), but for the new thread's id and time.
    let meta = std::fs::read_to_string(&src)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "session_meta")
        .unwrap();
    let meta = meta["payload"].as_object().unwrap();
    assert!(meta.contains_key("base_instructions"));
    for written in [&lines[0], &printed[0]] {
        for (k, v) in meta {
            if !["id", "timestamp", "forked_from_id"].contains(&k.as_str()) {
                assert_eq!(&written["payload"][k], v, "session_meta {k}");
            }
        }
        assert!(!written.to_string().contains("sessctl_blob"));
    }
    // It imports back as the same messages.
    let back = dir.as_path().join("back");
    init(&back);
    let r = sessctl(
        &back,
        &["import", "--from", "codex", path.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let name = format!("codex-{}", &id[..12]);
    assert_eq!(messages(&back, &name), messages(&store, CODEX_NAME));
    // A Claude Code conversation goes to Codex too, as response items.
    let Some(cc) = data(CC_DIR) else {
        return;
    };
    let r = sessctl(
        &store,
        &["import", "--from", "claude-code", cc.to_str().unwrap()],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = sessctl_env(
        &store,
        &["export", CC_NAME, "--into-codex", home.to_str().unwrap()],
        &[],
        None,
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let path = PathBuf::from(
        r.stdout
            .lines()
            .next()
            .unwrap()
            .strip_prefix("wrote ")
            .unwrap(),
    );
    let text = std::fs::read_to_string(path).unwrap();
    let items: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(items[1..].iter().all(|l| l["type"] == "response_item"));
    assert!(items
        .iter()
        .any(|l| l["payload"]["type"] == "function_call"));
    // And a Codex conversation to Claude Code, run where Codex ran.
    let out = dir.as_path().join("cc");
    let r = sessctl(
        &store,
        &["export", CODEX_NAME, "--into-claude", out.to_str().unwrap()],
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let cwd = source_meta_cwd(&src);
    let lines: Vec<&str> = r.stdout.lines().collect();
    let id = lines[1].rsplit(' ').next().unwrap();
    assert!(
        lines[1].starts_with(&format!("cd {cwd} && claude --resume")),
        "{}",
        lines[1]
    );
    let written = check_claude_file(&out.join(format!("{id}.jsonl")), id);
    assert!(written.iter().all(|l| l["cwd"] == cwd.as_str()));
}

fn source_meta_cwd(rollout: &Path) -> String {
    let first = std::fs::read_to_string(rollout).unwrap();
    let v: Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    v["payload"]["cwd"].as_str().unwrap().to_owned()
}
