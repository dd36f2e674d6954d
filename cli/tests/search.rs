//! End to end: `grep`, the filters of `log` and `ls`, and `stats`, run by
//! the real binary on temporary stores: a native store with a fork and an
//! archived conversation, a Claude Code file written here (known times,
//! usage, model, tool calls), and the real files of `../shared/data`.
//! Each on a local store and on a remote one (`name::local`,
//! `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{sessctl, Run, Target, TestStore};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

two_backends!(
    grep_reports_a_shared_message_once_per_conversation,
    grep_searches_tool_calls_results_and_each_matching_line,
    grep_ignore_case_role_and_revisions,
    grep_lists_and_json,
    bad_patterns_times_and_revisions_are_usage_errors,
    log_grep_shows_the_sessions_that_added_a_match,
    log_since_until_and_author,
    log_graph_draws_the_filtered_sessions_joined_up,
    ls_filters_by_source_cwd_since_and_grep,
    ls_grep_matches_titles,
    stats_totals_groups_and_tool_calls,
    grep_and_stats_on_real_claude_code_files,
    stats_on_real_codex_files_match_their_token_counts,
    grep_ls_and_log_find_what_came_before_a_compaction,
    stats_count_a_compaction_once,
);

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data");

/// Runs a command that must succeed silently on stderr; returns stdout.
fn ok<T: Target + ?Sized>(store: &T, args: &[&str]) -> String {
    let r = sessctl(store, args, None);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    r.stdout
}

/// Runs a command that must fail with `code` and one line on stderr.
fn fails<T: Target + ?Sized>(store: &T, args: &[&str], code: i32) -> String {
    let r = sessctl(store, args, None);
    assert_eq!(r.code, code, "{args:?}: {}{}", r.stdout, r.stderr);
    assert_eq!(r.stdout, "", "{args:?}");
    assert_eq!(r.stderr.lines().count(), 1, "{args:?}: {:?}", r.stderr);
    assert!(r.stderr.starts_with("sessctl: "), "{:?}", r.stderr);
    r.stderr
}

/// A write as `actor` (the ref log's actor comes from $SESSCTL_ACTOR).
fn as_actor<T: Target + ?Sized>(store: &T, actor: &str, args: &[&str], stdin: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(store.arg())
        .args(args)
        .env_remove("SESSCTL_STORE")
        .envs(store.env())
        .env("SESSCTL_ACTOR", actor)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(stdin.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The native store:
/// - `fix` (by alice): a user prompt, an assistant tool call, its result, an
///   answer; cwd /src/app, usage 900 in / 120 out / 2 requests, 5.3 s.
/// - `retry` (by bob): a fork of fix at message 2, plus "Try again with a
///   Mutex" (actor metadata agent-7).
/// - `old`: archived.
struct Native<'a> {
    /// The test's own files' directory.
    dir: PathBuf,
    store: &'a TestStore,
    /// fix's root session (it added messages 0..4).
    root: String,
    /// retry's head.
    retry: String,
}

fn native(store: &TestStore) -> Native<'_> {
    let dir = store.scratch();
    let first = json!([
        {"role": "user", "content": "Fix the flaky test in parser.rs"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\":\"src/parser.rs\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "fn parse() { SECRET_TOKEN }"},
        {"role": "assistant", "content": "Done: the race\nis fixed"},
    ]);
    let root = as_actor(
        &store,
        "alice",
        &[
            "commit",
            "--new",
            "fix",
            "--messages",
            "-",
            "--usage",
            r#"{"prompt_tokens":900,"completion_tokens":120,"requests":2}"#,
            "--duration-ms",
            "5300",
            "--meta",
            r#"cwd="/src/app""#,
        ],
        &first.to_string(),
    )
    .trim()
    .to_owned();
    as_actor(
        &store,
        "bob",
        &["fork", "fix", "--at-message", "2", "--as", "retry"],
        "",
    );
    let retry = as_actor(
        &store,
        "bob",
        &[
            "commit",
            "retry",
            "--messages",
            "-",
            "--meta",
            r#"actor="agent-7""#,
        ],
        &json!([{"role": "user", "content": "Try again with a Mutex"}]).to_string(),
    )
    .trim()
    .to_owned();
    as_actor(
        &store,
        "carol",
        &["commit", "--new", "old", "--messages", "-"],
        &json!([{"role": "user", "content": "an old flaky memory"}]).to_string(),
    );
    ok(&store, &["archive", "old"]);
    Native {
        dir,
        store,
        root,
        retry,
    }
}

/// A Claude Code transcript from 2025-01-02 in /work/app: a prompt, a Glob
/// call by model claude-test-1, its result, an answer; usage on the
/// assistant lines (300 in, 50 out, 800 cache reads, 40 cache writes).
fn claude_file(dir: &Path) -> PathBuf {
    let lines = [
        json!({"type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "aaaabbbb-1111",
            "timestamp": "2025-01-02T10:00:00.000Z", "cwd": "/work/app",
            "message": {"role": "user", "content": "List the rust files"}}),
        json!({"type": "assistant", "uuid": "u2", "parentUuid": "u1", "sessionId": "aaaabbbb-1111",
            "timestamp": "2025-01-02T10:00:05.000Z", "cwd": "/work/app",
            "message": {"role": "assistant", "model": "claude-test-1",
                "usage": {"input_tokens": 100, "output_tokens": 20,
                          "cache_read_input_tokens": 300, "cache_creation_input_tokens": 40},
                "content": [{"type": "tool_use", "id": "t1", "name": "Glob",
                             "input": {"pattern": "**/*.rs"}}]}}),
        json!({"type": "user", "uuid": "u3", "parentUuid": "u2", "sessionId": "aaaabbbb-1111",
            "timestamp": "2025-01-02T10:00:06.000Z", "cwd": "/work/app",
            "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                "content": "src/main.rs\nsrc/lib.rs"}]}}),
        json!({"type": "assistant", "uuid": "u4", "parentUuid": "u3", "sessionId": "aaaabbbb-1111",
            "timestamp": "2025-01-02T10:00:09.000Z", "cwd": "/work/app",
            "message": {"role": "assistant", "model": "claude-test-1",
                "usage": {"input_tokens": 200, "output_tokens": 30,
                          "cache_read_input_tokens": 500, "cache_creation_input_tokens": 0},
                "content": [{"type": "text", "text": "Two files: main.rs and lib.rs"}]}}),
    ];
    let d = dir.join("claude-in");
    std::fs::create_dir_all(&d).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(d.join("s1.jsonl"), text).unwrap();
    d
}

/// The native store plus the Claude Code file imported (`cc-aaaabbbb-111`).
fn mixed(store: &TestStore) -> Native<'_> {
    let n = native(store);
    let src = claude_file(&n.dir);
    let r = sessctl(
        &n.store,
        &[
            "import",
            "--from",
            "claude-code",
            "--finished",
            src.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    n
}

fn short(id: &str) -> &str {
    &id[..12]
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

// ---- grep ----

fn grep_reports_a_shared_message_once_per_conversation(s: &TestStore) {
    let n = native(s);
    let out = ok(&n.store, &["grep", "flaky"]);
    let s = short(&n.root);
    // Message 0 is in fix's history and, through the fork, in retry's: once
    // for each, both naming the session that added it. The archived "old"
    // is not searched by default.
    assert_eq!(
        lines(&out),
        vec![
            format!("fix:{s}:0:user:Fix the flaky test in parser.rs"),
            format!("retry:{s}:0:user:Fix the flaky test in parser.rs"),
        ]
    );
    let all = ok(&n.store, &["grep", "--all", "flaky"]);
    assert_eq!(all.lines().count(), 3, "{all}");
    assert!(all.lines().next().unwrap().starts_with("fix:"), "{all}");
    assert!(
        all.contains(":0:user:an old flaky memory"),
        "archived with --all: {all}"
    );
}

fn grep_searches_tool_calls_results_and_each_matching_line(s: &TestStore) {
    let n = native(s);
    let s = short(&n.root);
    let out = ok(&n.store, &["grep", "parser\\.rs", "fix"]);
    assert_eq!(
        lines(&out),
        vec![
            format!("fix:{s}:0:user:Fix the flaky test in parser.rs"),
            format!("fix:{s}:1:assistant:read_file {{\"path\":\"src/parser.rs\"}}"),
        ]
    );
    let out = ok(&n.store, &["grep", "SECRET", "fix"]);
    assert_eq!(
        out,
        format!("fix:{s}:2:tool:fn parse() {{ SECRET_TOKEN }}\n")
    );
    // Only the matching line of a message of several lines; ^ and $ anchor
    // at each line.
    let out = ok(&n.store, &["grep", "fixed$"]);
    assert_eq!(out, format!("fix:{s}:3:assistant:is fixed\n"));
    let out = ok(&n.store, &["grep", "^is"]);
    assert_eq!(out, format!("fix:{s}:3:assistant:is fixed\n"));
}

fn grep_ignore_case_role_and_revisions(s: &TestStore) {
    let n = native(s);
    // Case matters unless -i; nothing found is exit 1 and prints nothing.
    let r = sessctl(&n.store, &["grep", "FLAKY"], None);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (1, "", ""));
    assert_eq!(ok(&n.store, &["grep", "-i", "FLAKY"]).lines().count(), 2);
    // --role keeps that role's messages only.
    // retry was forked at message 2: the tool result is fix's alone.
    assert_eq!(
        ok(&n.store, &["grep", "--role", "tool", "SECRET"]),
        format!(
            "fix:{}:2:tool:fn parse() {{ SECRET_TOKEN }}\n",
            short(&n.root)
        )
    );
    let r = sessctl(&n.store, &["grep", "--role", "user", "SECRET"], None);
    assert_eq!((r.code, r.stdout.as_str()), (1, ""));
    // A revision is searched as given, and named as given.
    let out = ok(&n.store, &["grep", "Mutex", "retry", "fix"]);
    assert_eq!(
        out,
        format!("retry:{}:2:user:Try again with a Mutex\n", short(&n.retry))
    );
    let out = ok(&n.store, &["grep", "flaky", &n.retry[..10]]);
    assert!(out.starts_with(&format!("{}:{}:0:user:", &n.retry[..10], short(&n.root))));
    assert_eq!(
        sessctl(&n.store, &["grep", "Mutex", "fix"], None).code,
        1,
        "fix's history lacks retry's message"
    );
}

fn grep_lists_and_json(s: &TestStore) {
    let n = native(s);
    assert_eq!(ok(&n.store, &["grep", "-l", "flaky"]), "fix\nretry\n");
    assert_eq!(ok(&n.store, &["grep", "-l", "Mutex"]), "retry\n");
    let v: Value = serde_json::from_str(&ok(&n.store, &["grep", "--json", "-l", "r"])).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["conversation"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fix", "retry"]);
    assert_eq!(v[1]["head"], json!(n.retry));
    let v: Value = serde_json::from_str(&ok(&n.store, &["grep", "--json", "race"])).unwrap();
    assert_eq!(
        v,
        json!([{
            "rev": "fix", "conversation": "fix", "session": n.root, "index": 3,
            "message": v[0]["message"], "role": "assistant",
            "lines": [{"number": 1, "text": "Done: the race", "matches": [[10, 14]]}],
        }])
    );
    assert_eq!(v[0]["message"].as_str().unwrap().len(), 64);
    let r = sessctl(&n.store, &["grep", "--json", "nothing-here"], None);
    assert_eq!((r.code, r.stdout.as_str()), (1, "[]\n"));
}

fn bad_patterns_times_and_revisions_are_usage_errors(s: &TestStore) {
    let n = native(s);
    let e = fails(&n.store, &["grep", "a("], 2);
    assert_eq!(
        e,
        "sessctl: invalid regular expression 'a(': unclosed group\n"
    );
    fails(&n.store, &["log", "--grep", "a("], 2);
    fails(&n.store, &["log", "--author", "[z-a]"], 2);
    fails(&n.store, &["ls", "--grep", "a("], 2);
    let e = fails(&n.store, &["log", "--since", "soon"], 2);
    assert!(e.starts_with("sessctl: --since takes a date"), "{e}");
    assert!(e.ends_with("not 'soon'\n"), "{e}");
    let e = fails(&n.store, &["ls", "--since", "3.fortnights.ago"], 2);
    assert!(e.contains("--since"), "{e}");
    let e = fails(&n.store, &["ls", "--source", "claude"], 2);
    assert_eq!(
        e,
        "sessctl: --source takes claude-code, codex, openai, swe-agent or native, not 'claude'\n"
    );
    let e = fails(&n.store, &["stats", "--until", "2025-13-01"], 2);
    assert!(e.contains("--until"), "{e}");
    fails(&n.store, &["grep", "x", "fix~x"], 2);
    // grep exits 1 only for "nothing found": an unknown revision, or no
    // store at all, is an error, exit 2 as grep(1)'s.
    fails(&n.store, &["grep", "x", "nosuch"], 2);
    // (No store: a directory that is none.)
    fails(&n.dir.join("nowhere"), &["grep", "x"], 2);
    let r = sessctl(&n.store, &["grep", "nothing-says-this"], None);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (1, "", ""));
    // Elsewhere an unknown revision stays exit 1.
    fails(&n.store, &["log", "nosuch"], 1);
    // Time runs one way.
    let e = fails(&n.store, &["ls", "--since=-1.days.ago"], 2);
    assert!(e.contains("--since"), "{e}");
    // Nothing was written by any of it.
    assert_eq!(ok(&n.store, &["grep", "-l", "flaky"]), "fix\nretry\n");
}

// ---- log ----

fn log_grep_shows_the_sessions_that_added_a_match(s: &TestStore) {
    let n = native(s);
    let out = ok(&n.store, &["log", "--all"]);
    assert_eq!(out.matches("session ").count(), 4, "{out}");
    let out = ok(&n.store, &["log", "--all", "--oneline", "--grep", "Mutex"]);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with(short(&n.retry)), "{out}");
    // The root added the prompt; retry's fork session and head did not.
    let out = ok(&n.store, &["log", "--oneline", "--grep", "flaky", "retry"]);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with(short(&n.root)), "{out}");
    let out = ok(
        &n.store,
        &["log", "--oneline", "-i", "--grep", "secret_token", "fix"],
    );
    assert!(out.starts_with(short(&n.root)), "{out}");
    // -n counts what is shown, after the filter.
    let out = ok(
        &n.store,
        &["log", "--all", "--oneline", "--grep", "a", "-n", "1"],
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    let r = sessctl(&n.store, &["log", "--all", "--grep", "nowhere"], None);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
}

fn log_since_until_and_author(s: &TestStore) {
    let n = mixed(s);
    let count = |args: &[&str]| ok(&n.store, args).lines().count();
    let all = count(&["log", "--all", "--oneline"]);
    assert_eq!(all, 5, "fix, the fork, retry's turn, old, the import");
    // The import's session is from 2025-01-02; the others from now.
    assert_eq!(
        count(&["log", "--all", "--oneline", "--until", "2025-01-03"]),
        1
    );
    assert_eq!(
        count(&["log", "--all", "--oneline", "--since", "2025-01-03"]),
        4
    );
    assert_eq!(
        count(&[
            "log",
            "--all",
            "--oneline",
            "--since",
            "2025-01-02T10:00:00Z",
            "--until",
            "2025-01-02T10:00:00"
        ]),
        1,
        "both bounds are inclusive"
    );
    assert_eq!(
        count(&["log", "--all", "--oneline", "--since", "1.hours.ago"]),
        4
    );
    assert_eq!(
        count(&["log", "--all", "--oneline", "--since", "yesterday"]),
        4
    );
    assert_eq!(
        count(&["log", "--all", "--oneline", "--since", "2999-01-01"]),
        0
    );
    // Actors: the ref log's for alice's commit; bob's fork session; the
    // session's own actor metadata for retry's turn.
    let alice = ok(
        &n.store,
        &["log", "--all", "--oneline", "--author", "^alice$"],
    );
    assert_eq!(lines(&alice).len(), 1, "{alice}");
    assert!(alice.starts_with(short(&n.root)), "{alice}");
    assert_eq!(
        count(&["log", "--all", "--oneline", "--author", "bob"]),
        1,
        "the fork session"
    );
    let agent = ok(
        &n.store,
        &["log", "--all", "--oneline", "--author", "agent-7"],
    );
    assert!(agent.starts_with(short(&n.retry)), "{agent}");
    assert_eq!(
        count(&["log", "--all", "--oneline", "-i", "--author", "CAROL"]),
        1
    );
    // Filters combine: all of them must hold.
    assert_eq!(
        count(&[
            "log",
            "--all",
            "--oneline",
            "--author",
            "alice",
            "--grep",
            "Mutex"
        ]),
        0
    );
    let v: Value = serde_json::from_str(&ok(
        &n.store,
        &["log", "--all", "--json", "--author", "agent-7"],
    ))
    .unwrap();
    assert_eq!(v[0]["id"], json!(n.retry));
}

fn log_graph_draws_the_filtered_sessions_joined_up(s: &TestStore) {
    let store = s;
    let commit = |args: &[&str], text: &str| {
        let msgs = json!([{"role": "user", "content": text}]).to_string();
        let r = sessctl(&store, args, Some(&msgs));
        assert_eq!(r.code, 0, "{}", r.stderr);
    };
    commit(&["commit", "--new", "m", "--messages", "-"], "alpha one");
    commit(&["commit", "m", "--messages", "-"], "beta");
    commit(&["commit", "m", "--messages", "-"], "alpha two");
    commit(&["fork", "m~1", "--as", "side", "--messages", "-"], "gamma");
    commit(&["commit", "side", "--messages", "-"], "alpha side");
    let out = ok(
        &store,
        &["log", "--all", "--oneline", "--graph", "--grep", "alpha"],
    );
    let shape: Vec<String> = out
        .lines()
        .map(|l| {
            let cut = l.find(|c: char| c.is_ascii_hexdigit()).unwrap_or(l.len());
            let words: Vec<&str> = l[cut..].split_whitespace().collect();
            format!("{}{}", &l[..cut], words.last().copied().unwrap_or(""))
        })
        .collect();
    // beta and gamma are dropped; both alphas of the tips join the root.
    assert_eq!(shape, ["* side", "| * two", "|/", "* one"], "{out}");
}

// ---- ls ----

fn names(out: &str) -> Vec<&str> {
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect()
}

fn ls_filters_by_source_cwd_since_and_grep(s: &TestStore) {
    let n = mixed(s);
    let native_out = ok(&n.store, &["ls", "--source", "native"]);
    let mut native = names(&native_out);
    native.sort();
    assert_eq!(native, ["fix", "retry"]);
    assert_eq!(
        names(&ok(&n.store, &["ls", "--source", "claude-code"])),
        ["cc-aaaabbbb-111"]
    );
    assert_eq!(ok(&n.store, &["ls", "--source", "codex"]), "");
    assert_eq!(
        names(&ok(&n.store, &["ls", "--all", "--source", "native"])).len(),
        3
    );
    // cwd: fix's head recorded /src/app; the import's record /work/app.
    assert_eq!(names(&ok(&n.store, &["ls", "--cwd", "/src"])), ["fix"]);
    assert_eq!(names(&ok(&n.store, &["ls", "--cwd", "/src/app/"])), ["fix"]);
    assert_eq!(ok(&n.store, &["ls", "--cwd", "/src/app/deeper"]), "");
    assert_eq!(ok(&n.store, &["ls", "--cwd", "/sr"]), "");
    assert_eq!(
        names(&ok(&n.store, &["ls", "--cwd", "/src/app/x/../."])),
        ["fix"]
    );
    assert_eq!(
        names(&ok(&n.store, &["ls", "--cwd", "/work"])),
        ["cc-aaaabbbb-111"]
    );
    // since: by last activity.
    assert_eq!(
        names(&ok(&n.store, &["ls", "--since", "2025-01-02T10:00:09Z"])).len(),
        3
    );
    assert_eq!(
        names(&ok(&n.store, &["ls", "--since", "2025-06-01"])).len(),
        2
    );
    // grep: any message of the history, or the title.
    assert_eq!(names(&ok(&n.store, &["ls", "--grep", "Mutex"])), ["retry"]);
    let flaky_out = ok(&n.store, &["ls", "--grep", "flaky"]);
    let mut flaky = names(&flaky_out);
    flaky.sort();
    assert_eq!(flaky, ["fix", "retry"]);
    assert_eq!(
        names(&ok(&n.store, &["ls", "-i", "--grep", "GLOB"])),
        ["cc-aaaabbbb-111"]
    );
    // Filters combine, and --limit counts what they keep.
    assert_eq!(
        names(&ok(
            &n.store,
            &["ls", "--grep", "flaky", "--source", "native", "--limit", "1"]
        ))
        .len(),
        1
    );
    let v: Value =
        serde_json::from_str(&ok(&n.store, &["ls", "--json", "--cwd", "/work/app"])).unwrap();
    assert_eq!(v[0]["name"], "cc-aaaabbbb-111");
}

fn ls_grep_matches_titles(s: &TestStore) {
    let n = native(s);
    let r = sessctl(
        &n.store,
        &["commit", "fix", "--messages", "-", "--title", "Quartz plan"],
        Some("[]"),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(names(&ok(&n.store, &["ls", "--grep", "Quartz"])), ["fix"]);
    assert_eq!(ok(&n.store, &["ls", "--grep", "quartz"]), "");
}

// ---- stats ----

fn stats_totals_groups_and_tool_calls(s: &TestStore) {
    let n = mixed(s);
    let v: Value = serde_json::from_str(&ok(&n.store, &["stats", "--json"])).unwrap();
    // fix (4 messages, its run's usage), the fork (0), retry's turn (1),
    // old (1), the import (4 messages, usage from its messages).
    assert_eq!(
        v,
        json!({"by": null, "rows": [], "total": {
            "sessions": 5, "messages": 10,
            "tokens": {"input": 1200, "output": 170, "cache_read": 800, "cache_write": 40,
                       "total": 1020 + 1190},
            "requests": 4, "duration_ms": 5300 + 9000,
            "tool_calls": {"Glob": 1, "read_file": 1},
        }})
    );
    let v: Value =
        serde_json::from_str(&ok(&n.store, &["stats", "--json", "--by", "source"])).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["key"], "claude-code");
    assert_eq!(rows[0]["sessions"], 1);
    assert_eq!(rows[0]["tokens"]["cache_read"], 800);
    assert_eq!(rows[1]["key"], "native");
    assert_eq!(rows[1]["sessions"], 4);
    let v: Value =
        serde_json::from_str(&ok(&n.store, &["stats", "--json", "--by", "model"])).unwrap();
    let keys: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["claude-test-1", "unknown"]);
    let v: Value =
        serde_json::from_str(&ok(&n.store, &["stats", "--json", "--by", "day"])).unwrap();
    assert_eq!(v["rows"][0]["key"], "2025-01-02");
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    let v: Value =
        serde_json::from_str(&ok(&n.store, &["stats", "--json", "--by", "conversation"])).unwrap();
    let convs: Vec<(&str, u64)> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["key"].as_str().unwrap(), r["sessions"].as_u64().unwrap()))
        .collect();
    // The fork's session starts conversation retry; its turn continues it.
    assert_eq!(
        convs,
        [("cc-aaaabbbb-111", 1), ("fix", 1), ("old", 1), ("retry", 2)]
    );
    // REVs and --since narrow what is counted.
    let v: Value = serde_json::from_str(&ok(&n.store, &["stats", "--json", "fix"])).unwrap();
    assert_eq!(v["total"]["sessions"], 1);
    let v: Value =
        serde_json::from_str(&ok(&n.store, &["stats", "--json", "--since", "2025-06-01"])).unwrap();
    assert_eq!(v["total"]["sessions"], 4);
    assert_eq!(v["total"]["tool_calls"], json!({"read_file": 1}));
    // --until with a date alone is the whole of that day: the import's
    // session (2025-01-02T10:00Z) is in it, the native ones (now) not.
    let v: Value =
        serde_json::from_str(&ok(&n.store, &["stats", "--json", "--until", "2025-01-02"])).unwrap();
    assert_eq!(v["total"]["sessions"], 1);
    let v: Value = serde_json::from_str(&ok(
        &n.store,
        &["stats", "--json", "--until", "2025-01-02T00:00:00"],
    ))
    .unwrap();
    assert_eq!(v["total"]["sessions"], 0);
    // A table when not asked for JSON.
    let table = ok(&n.store, &["stats", "--by", "source"]);
    let first: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(first[..3], ["SOURCE", "SESSIONS", "MESSAGES"]);
    assert!(table.lines().any(|l| l.starts_with("total ")), "{table}");
    assert!(table.contains("\ntool calls:\n"), "{table}");
    let r: Run = sessctl(&n.store, &["stats", "--by", "weather"], None);
    assert_eq!(r.code, 2);
}

// ---- the real files ----

/// A store with ../shared/data's Claude Code files imported; `None` (and a
/// note) when the data is absent.
fn shared_claude_store(store: &TestStore) -> Option<&TestStore> {
    let src = Path::new(DATA).join("claude-code");
    if !src.exists() {
        eprintln!("note: {} is absent; skipping", src.display());
        return None;
    }
    let r = sessctl(
        store,
        &[
            "import",
            "--from",
            "claude-code",
            "--finished",
            src.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    Some(store)
}

fn grep_and_stats_on_real_claude_code_files(s: &TestStore) {
    let Some(store) = shared_claude_store(s) else {
        return;
    };
    // The prompt of 4c2ddfdc...jsonl, and the tool results that followed.
    assert_eq!(
        ok(&store, &["grep", "-l", "create hello\\.py"]),
        "cc-4c2ddfdc-b61\n"
    );
    let out = ok(
        &store,
        &[
            "grep",
            "File created successfully at: /tmp/private/hello\\.py",
        ],
    );
    assert!(
        out.lines()
            .all(|l| l.starts_with("cc-4c2ddfdc-b61:") && l.contains(":user:")),
        "{out}"
    );
    assert!(!out.is_empty());
    // A tool call's arguments are searched: a Write of hello.py.
    let v: Value = serde_json::from_str(&ok(
        &store,
        &[
            "grep",
            "--json",
            "--role",
            "assistant",
            "^Write .*hello\\.py",
        ],
    ))
    .unwrap();
    assert!(!v.as_array().unwrap().is_empty());
    let v: Value =
        serde_json::from_str(&ok(&store, &["stats", "--json", "--by", "source"])).unwrap();
    let t = &v["total"];
    // As the import reports: 63 sessions, 432 messages.
    assert_eq!(
        (t["sessions"].as_u64(), t["messages"].as_u64()),
        (Some(63), Some(432))
    );
    assert_eq!(v["rows"][0]["key"], "claude-code");
    assert!(t["tokens"]["cache_read"].as_u64().unwrap() > 0, "{t}");
    assert!(t["requests"].as_u64().unwrap() > 0, "{t}");
    assert!(t["tool_calls"]["Bash"].as_u64().unwrap() > 0, "{t}");
    let calls: u64 = t["tool_calls"]
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(calls > 100, "{t}");
}

fn stats_on_real_codex_files_match_their_token_counts(s: &TestStore) {
    let src = Path::new(DATA).join("codex");
    if !src.exists() {
        eprintln!("note: {} is absent; skipping", src.display());
        return;
    }
    // What the rollouts say: each token_count's last_token_usage.
    let (mut input, mut cached, mut output, mut requests) = (0u64, 0u64, 0u64, 0u64);
    for f in std::fs::read_dir(&src).unwrap() {
        let f = f.unwrap().path();
        if f.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let u = &v["payload"]["info"]["last_token_usage"];
            if v["payload"]["type"] == "token_count" && u.is_object() {
                input += u["input_tokens"].as_u64().unwrap();
                cached += u["cached_input_tokens"].as_u64().unwrap();
                output += u["output_tokens"].as_u64().unwrap();
                requests += 1;
            }
        }
    }
    assert!(cached > 0 && requests > 0);
    let store = s;
    let r = sessctl(
        &store,
        &["import", "--from", "codex", src.to_str().unwrap()],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&ok(&store, &["stats", "--json"])).unwrap();
    let t = &v["total"];
    assert_eq!(
        (
            t["tokens"]["input"].as_u64().unwrap(),
            t["tokens"]["cache_read"].as_u64().unwrap(),
            t["tokens"]["output"].as_u64().unwrap(),
            t["requests"].as_u64().unwrap(),
        ),
        (input - cached, cached, output, requests),
        "{t}"
    );
    // Codex tool calls are read through the rollout line's payload.
    assert!(t["tool_calls"]["exec_command"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(
        ok(
            &store,
            &["grep", "-l", "--role", "function_call", "exec_command"]
        )
        .lines()
        .count(),
        2,
        "both rollouts run commands"
    );
}

// ---- a compacted conversation ----

/// A conversation `c` of four messages (usage on the two answers: 300 in,
/// 30 out, 2 requests), compacted keeping the last two.
fn compacted(store: &TestStore) -> &TestStore {
    let msgs = json!([
        {"role": "user", "content": "alpha early question"},
        {"role": "assistant", "content": "beta answer",
         "usage": {"prompt_tokens": 100, "completion_tokens": 10}},
        {"role": "user", "content": "gamma follow-up"},
        {"role": "assistant", "content": "delta late answer",
         "usage": {"prompt_tokens": 200, "completion_tokens": 20}},
    ]);
    let r = sessctl(
        &store,
        &["commit", "--new", "c", "--messages", "-"],
        Some(&msgs.to_string()),
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    let summary = r#"cat >/dev/null; echo '{"completed":["omega summary"],"in_progress":[],"pending":[],"blockers":[],"decisions":[]}'"#;
    ok(
        &store,
        &["compact", "c", "--summarizer", summary, "--keep-last", "2"],
    );
    store
}

fn grep_ls_and_log_find_what_came_before_a_compaction(s: &TestStore) {
    let store = compacted(s);
    let out = ok(&store, &["grep", "alpha"]);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with("c:") && out.contains(":0:user:alpha"),
        "{out}"
    );
    // The summary and the kept tail are found too, the tail once.
    assert_eq!(ok(&store, &["grep", "omega"]).lines().count(), 1);
    assert_eq!(ok(&store, &["grep", "delta"]).lines().count(), 1);
    assert_eq!(names(&ok(&store, &["ls", "--grep", "alpha"])), ["c"]);
    assert!(!ok(&store, &["log", "--oneline", "--grep", "alpha", "c"]).is_empty());
    // Still so once the conversation goes on after the compaction, and
    // after a second compaction: each message found once, where it was.
    let turn = |text: &str| {
        let msgs = json!([{"role": "user", "content": text}]).to_string();
        let r = sessctl(&store, &["commit", "c", "--messages", "-"], Some(&msgs));
        assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    };
    turn("epsilon after");
    for word in ["alpha", "beta", "omega", "delta", "epsilon"] {
        let out = ok(&store, &["grep", word]);
        assert_eq!(out.lines().count(), 1, "{word}: {out}");
    }
    assert!(ok(&store, &["grep", "alpha"]).contains(":0:user:alpha"));
    assert_eq!(names(&ok(&store, &["ls", "--grep", "alpha"])), ["c"]);
    let summary = r#"cat >/dev/null; echo '{"completed":["kappa summary"],"in_progress":[],"pending":[],"blockers":[],"decisions":[]}'"#;
    ok(
        &store,
        &["compact", "c", "--summarizer", summary, "--keep-last", "1"],
    );
    turn("zeta last");
    for word in [
        "alpha", "beta", "omega", "delta", "epsilon", "kappa", "zeta",
    ] {
        let out = ok(&store, &["grep", word]);
        assert_eq!(out.lines().count(), 1, "{word}: {out}");
    }
    assert!(ok(&store, &["grep", "alpha"]).contains(":0:user:alpha"));
}

fn stats_count_a_compaction_once(s: &TestStore) {
    let store = compacted(s);
    let v: Value = serde_json::from_str(&ok(&store, &["stats", "--json"])).unwrap();
    let t = &v["total"];
    // The four messages and their usage, plus the summary: not the kept
    // tail again.
    assert_eq!(
        (
            t["messages"].as_u64(),
            t["tokens"]["input"].as_u64(),
            t["tokens"]["output"].as_u64(),
            t["requests"].as_u64()
        ),
        (Some(5), Some(300), Some(30), Some(2)),
        "{t}"
    );
}
