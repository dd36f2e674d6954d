//! End to end: the normalized view of imported messages, as the real binary
//! prints it, on the real session files in `../shared/data` (each test
//! skips, saying why, when they are absent): `show`, `log --oneline` and
//! `ls` read as conversations, `replay` counts a Codex rollout's answers and
//! tool calls, `resume` counts roles, and `checkout -o` writes a
//! `message_history` an OpenAI-compatible chat API accepts.
//! Each on a local store and on a remote one (`name::local`,
//! `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::{Run, Target, TestStore};

two_backends!(
    show_log_and_ls_read_every_codex_and_claude_code_session,
    only_a_summary_of_its_own_messages_titles_a_conversation,
    replay_of_a_codex_rollout_reports_its_answers_and_tool_calls,
    checkout_output_is_a_history_a_chat_api_accepts,
    checkout_output_of_every_swe_agent_trajectory_is_a_history_a_chat_api_accepts,
    a_session_without_times_sorts_by_when_it_was_imported,
    large_source_fields_are_blobs_and_ls_json_stays_small,
);

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data");

fn sessctl<T: Target + ?Sized>(store: &T, args: &[&str]) -> Run {
    support::sessctl(store, args, None)
}

fn ok<T: Target + ?Sized>(store: &T, args: &[&str]) -> String {
    let r = sessctl(store, args);
    assert_eq!(r.code, 0, "sessctl {args:?}: {}", r.stderr);
    r.stdout
}

/// The Codex and Claude Code files imported into `store`; `None` when the
/// data is absent.
fn imported(store: &TestStore) -> Option<(PathBuf, &TestStore)> {
    let data = Path::new(DATA);
    for sub in ["codex", "claude-code"] {
        if !data.join(sub).exists() {
            eprintln!("note: {} is absent; skipping", data.join(sub).display());
            return None;
        }
    }
    for (format, sub) in [("codex", "codex"), ("claude-code", "claude-code")] {
        let p = data.join(sub);
        ok(
            store,
            &["import", "--from", format, "--no-sync", p.to_str().unwrap()],
        );
    }
    Some((store.scratch(), store))
}

/// Conversations of `ls --json` whose name starts with `prefix`.
fn conversations<T: Target + ?Sized>(store: &T, prefix: &str) -> Vec<Value> {
    let all: Value = serde_json::from_str(&ok(store, &["ls", "--json"])).unwrap();
    all.as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"].as_str().unwrap().starts_with(prefix))
        .cloned()
        .collect()
}

/// What no readable view prints: a message as raw Codex or Claude Code
/// JSON (a line of text that is a whole line of the source), an encrypted
/// reasoning blob, the `isMeta` caveat as if it were said. (Tool output may
/// quote such JSON; it is printed deeper than a message's text.)
fn assert_no_raw_json(text: &str, what: &str) {
    for line in text.lines() {
        let body = line.strip_prefix("    ").unwrap_or(line);
        let body = body.split_once(' ').map_or(body, |(head, rest)| {
            // `log --oneline` lines: "<id> <text>".
            if head.len() == 12 && head.chars().all(|c| c.is_ascii_hexdigit()) {
                rest
            } else {
                body
            }
        });
        // As serde_json writes it: no blanks.
        for raw in [
            "{\"payload\":{",
            "{\"timestamp\":\"",
            "{\"parentUuid\":",
            "{\"type\":\"",
        ] {
            assert!(!body.starts_with(raw), "{what} prints raw JSON: {line}");
        }
        assert!(
            !line.contains("\"encrypted_content\":\"gAAAA"),
            "{what}: {line}"
        );
    }
}

/// A summary line (`log`, `ls`, `replay`) never is a meta line's text.
fn assert_no_meta(text: &str, what: &str) {
    assert!(
        !text.contains("Caveat: The messages below"),
        "{what}: {text}"
    );
}

fn show_log_and_ls_read_every_codex_and_claude_code_session(s: &TestStore) {
    let Some((_dir, store)) = imported(s) else {
        return;
    };
    let roles: BTreeSet<&str> = ["system", "user", "assistant", "tool"].into();
    let mut seen = 0;
    for prefix in ["codex-", "cc-"] {
        let convs = conversations(&store, prefix);
        assert!(!convs.is_empty(), "no {prefix} conversations");
        for c in convs {
            let name = c["name"].as_str().unwrap();
            seen += 1;
            // ls: a preview, the text of a prompt.
            let preview = c["preview"].as_str().unwrap();
            assert!(!preview.is_empty(), "{name} has no preview");
            assert!(!preview.starts_with('<') && !preview.starts_with("Caveat:"));
            // show: every message a role and readable text (a meta line
            // marked so).
            let shown = ok(&store, &["show", "--messages", name]);
            let history = shown.split("\nHistory:\n").nth(1).unwrap();
            assert_no_raw_json(history, &format!("show {name}"));
            let mut headers = 0;
            let mut header = "";
            for line in history.lines() {
                if line.starts_with("    Caveat: The messages below") {
                    assert!(header.ends_with(" (meta)"), "show {name}: {header}");
                }
                if !line.starts_with('[') {
                    continue;
                }
                header = line;
                let role = line.split_once("] ").unwrap().1;
                let role = role.strip_suffix(" (meta)").unwrap_or(role);
                assert!(roles.contains(role), "show {name}: {line}");
                headers += 1;
            }
            assert_eq!(headers, c["messages"].as_u64().unwrap(), "show {name}");
            // log --oneline: every session of the conversation a line of
            // text (a session of context alone says what it holds).
            let log = ok(&store, &["log", "--oneline", name]);
            assert_no_raw_json(&log, &format!("log {name}"));
            assert_no_meta(&log, &format!("log {name}"));
            let texts: Vec<&str> = log
                .lines()
                .map(|l| l.split_once(' ').map_or("", |(_, t)| t))
                .collect();
            assert!(
                texts.iter().all(|t| !t.is_empty()),
                "log {name} has a line without text:\n{log}"
            );
            // ls's text form prints the same preview.
        }
    }
    let table = ok(&store, &["ls"]);
    assert_eq!(table.lines().count(), seen + 1);
    for row in table.lines().skip(1) {
        assert!(!row.ends_with("  -"), "a row without a preview: {row}");
    }
    assert_no_raw_json(&table, "ls");
    assert_no_meta(&table, "ls");
}

fn only_a_summary_of_its_own_messages_titles_a_conversation(s: &TestStore) {
    let Some((_dir, store)) = imported(s) else {
        return;
    };
    let c = &conversations(&store, "cc-9eda1058")[0];
    // The `summary` lines of session-9eda1058.jsonl summarize other
    // conversations (their leaves are none of its messages): no title.
    assert!(c["title"].is_null(), "{c}");
    let table = ok(&store, &["ls"]);
    let row = table
        .lines()
        .find(|l| l.contains("cc-9eda1058"))
        .unwrap_or_default();
    assert!(!row.contains("Cleared conversation history"), "{table}");
}

/// (function calls, custom tool calls, assistant messages with text) of
/// a rollout.
fn rollout_counts(file: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(file).unwrap();
    let (mut calls, mut answers) = (0, 0);
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        let p = &v["payload"];
        if v["type"] != "response_item" {
            continue;
        }
        match p["type"].as_str() {
            Some("function_call" | "custom_tool_call") => calls += 1,
            Some("message") if p["role"] == "assistant" => answers += 1,
            _ => {}
        }
    }
    (calls, answers)
}

fn replay_of_a_codex_rollout_reports_its_answers_and_tool_calls(s: &TestStore) {
    let Some((_dir, store)) = imported(s) else {
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(DATA).join("codex"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for file in files {
        let (calls, answers) = rollout_counts(&file);
        let conv = conversations(&store, "codex-")
            .into_iter()
            .find(|c| c["metadata"]["source_file"].as_str() == file.file_name().unwrap().to_str())
            .unwrap();
        let name = conv["name"].as_str().unwrap();
        let turns: Vec<Value> = ok(&store, &["replay", "--json", name])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let replay_calls: usize = turns
            .iter()
            .map(|t| t["tool_calls"].as_array().unwrap().len())
            .sum();
        let replay_results: usize = turns
            .iter()
            .map(|t| t["tool_results"].as_array().unwrap().len())
            .sum();
        assert_eq!(replay_calls, calls, "{name}");
        assert_eq!(replay_results, calls, "{name}");
        let replay_answers: usize = turns
            .iter()
            .flat_map(|t| t["output"].as_array().unwrap().iter())
            .filter(|m| m["payload"]["type"] == "message")
            .count();
        assert_eq!(replay_answers, answers, "{name}");
        assert!(calls > 0 && answers > 0);
        // The text form says so, and ends a turn with the answer's text.
        let text = ok(&store, &["replay", name]);
        let said: usize = text
            .lines()
            .filter_map(|l| {
                l.split(", ")
                    .find(|p| p.ends_with("tool calls") || p.ends_with("tool call"))
            })
            .map(|p| p.split(' ').next().unwrap().parse::<usize>().unwrap())
            .sum();
        assert_eq!(said, calls, "{text}");
        assert_no_raw_json(&text, "replay");
        // resume counts roles, not line types.
        let resume = ok(&store, &["resume", name]);
        let line = resume.lines().find(|l| l.starts_with("messages ")).unwrap();
        assert!(
            line.contains("assistant ") && line.contains("tool ") && line.contains("user "),
            "{line}"
        );
        assert!(
            !line.contains("response_item") && !line.contains("event_msg"),
            "{line}"
        );
    }
}

/// A strict reading of the OpenAI chat completions request's `messages`:
/// the roles and keys each may have, string contents, tool calls of type
/// `function` whose arguments are the text of a JSON object, and every call
/// answered, in order, by the tool messages right after it.
fn check_openai_chat(messages: &Value) {
    let messages = messages.as_array().expect("an array");
    assert!(!messages.is_empty());
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.len() <= 64
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    let mut open: Vec<String> = Vec::new();
    let mut ids = BTreeSet::new();
    for (k, m) in messages.iter().enumerate() {
        let o = m
            .as_object()
            .unwrap_or_else(|| panic!("[{k}] not an object"));
        let role = o["role"]
            .as_str()
            .unwrap_or_else(|| panic!("[{k}] no role"));
        if role != "tool" {
            assert!(open.is_empty(), "[{k}] calls {open:?} are not answered");
        }
        let keys: BTreeSet<&str> = o.keys().map(String::as_str).collect();
        let allowed: BTreeSet<&str> = match role {
            "system" | "user" => ["role", "content", "name"].into(),
            "assistant" => ["role", "content", "tool_calls", "name"].into(),
            "tool" => ["role", "content", "tool_call_id"].into(),
            other => panic!("[{k}] role {other}"),
        };
        assert!(keys.is_subset(&allowed), "[{k}] keys {keys:?}");
        match role {
            "system" | "user" => assert!(o["content"].is_string(), "[{k}] {m}"),
            "assistant" => {
                let calls = o.get("tool_calls");
                match &o["content"] {
                    Value::String(_) => {}
                    Value::Null => assert!(calls.is_some(), "[{k}] neither content nor calls"),
                    other => panic!("[{k}] content {other}"),
                }
                if let Some(calls) = calls {
                    let calls = calls.as_array().unwrap();
                    assert!(!calls.is_empty(), "[{k}] empty tool_calls");
                    for c in calls {
                        let c = c.as_object().unwrap();
                        let keys: BTreeSet<&str> = c.keys().map(String::as_str).collect();
                        assert_eq!(keys, ["function", "id", "type"].into(), "[{k}]");
                        assert_eq!(c["type"], "function");
                        let id = c["id"].as_str().unwrap();
                        assert!(!id.is_empty() && ids.insert(id.to_owned()), "[{k}] id {id}");
                        let f = c["function"].as_object().unwrap();
                        assert!(name_ok(f["name"].as_str().unwrap()), "[{k}] {f:?}");
                        let args: Value =
                            serde_json::from_str(f["arguments"].as_str().unwrap()).unwrap();
                        assert!(args.is_object(), "[{k}] arguments {args}");
                        open.push(id.to_owned());
                    }
                }
            }
            "tool" => {
                assert!(o["content"].is_string(), "[{k}] {m}");
                let id = o["tool_call_id"].as_str().unwrap();
                assert_eq!(
                    open.first().map(String::as_str),
                    Some(id),
                    "[{k}] answers {id}, the next open call is {open:?}"
                );
                open.remove(0);
            }
            _ => unreachable!(),
        }
    }
    assert!(open.is_empty(), "calls {open:?} are not answered");
}

fn checkout_output_is_a_history_a_chat_api_accepts(s: &TestStore) {
    let Some((dir, store)) = imported(s) else {
        return;
    };
    let mut convs = conversations(&store, "codex-");
    convs.extend(conversations(&store, "cc-"));
    for c in convs {
        let name = c["name"].as_str().unwrap();
        let out = dir.as_path().join("seed").join(name);
        let said = ok(&store, &["checkout", name, "-o", out.to_str().unwrap()]);
        let o = out.display();
        assert_eq!(
            said,
            format!("wrote {o}/state.json, {o}/display_messages.json and {o}/raw_messages.json\n")
        );
        let state: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("state.json")).unwrap())
                .unwrap();
        check_openai_chat(&state["message_history"]);
        // The raw lines stay reachable: raw_messages.json is the history as
        // stored, as `export --format json` prints it.
        let raw: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("raw_messages.json")).unwrap())
                .unwrap();
        let exported: Value =
            serde_json::from_str(&ok(&store, &["export", "--format", "json", name])).unwrap();
        assert_eq!(raw, exported, "{name}");
        assert_eq!(
            raw.as_array().unwrap().len() as u64,
            c["messages"].as_u64().unwrap()
        );
        // resume --json gives the model the same history, the stored lines
        // beside it.
        let resumed: Value =
            serde_json::from_str(&ok(&store, &["resume", "--json", name])).unwrap();
        assert_eq!(resumed["history"], state["message_history"], "{name}");
        assert_eq!(resumed["raw_history"], raw, "{name}");
        // So does export --format openai.
        let openai: Value =
            serde_json::from_str(&ok(&store, &["export", "--format", "openai", name])).unwrap();
        assert_eq!(openai["messages"], state["message_history"], "{name}");
        // Every tool call the stored history makes is in the chat history.
        let history = state["message_history"].as_array().unwrap();
        let calls = history
            .iter()
            .filter_map(|m| m["tool_calls"].as_array())
            .map(Vec::len)
            .sum::<usize>();
        let tools = history.iter().filter(|m| m["role"] == "tool").count();
        assert_eq!(calls, tools, "{name}");
    }
}

/// SWE-agent's messages have roles but keys of their own (`agent`,
/// `thought`, `action`, `tool_call_ids`): `checkout -o` converts them too,
/// for every trajectory, and `export --format openai` keeps only the keys
/// an API takes.
fn checkout_output_of_every_swe_agent_trajectory_is_a_history_a_chat_api_accepts(s: &TestStore) {
    let src = Path::new(DATA).join("swe-agent");
    if !src.exists() {
        eprintln!("note: {} is absent; skipping", src.display());
        return;
    }
    let (dir, store) = (s.scratch(), s);
    ok(
        &store,
        &[
            "import",
            "--from",
            "swe-agent",
            "--no-sync",
            src.to_str().unwrap(),
        ],
    );
    let convs = conversations(&store, "swe-");
    assert!(convs.len() > 1, "{convs:?}");
    for c in convs {
        let name = c["name"].as_str().unwrap();
        let out = dir.as_path().join("seed").join(name);
        ok(&store, &["checkout", name, "-o", out.to_str().unwrap()]);
        let state: Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("state.json")).unwrap())
                .unwrap();
        check_openai_chat(&state["message_history"]);
        let exported: Value =
            serde_json::from_str(&ok(&store, &["export", "--format", "openai", name])).unwrap();
        for m in exported["messages"].as_array().unwrap() {
            let o = m.as_object().unwrap();
            assert!(
                o.keys().all(|k| {
                    ["role", "content", "name", "tool_calls", "tool_call_id"].contains(&k.as_str())
                }),
                "{name}: {m}"
            );
            if o["role"] == "tool" {
                assert!(o["tool_call_id"].is_string(), "{name}: {m}");
            }
        }
    }
}

fn a_session_without_times_sorts_by_when_it_was_imported(s: &TestStore) {
    let src =
        Path::new(DATA).join("swe-agent/trajectories/demonstrations/function_calling_simple.traj");
    if !src.exists() {
        eprintln!("note: {} is absent; skipping", src.display());
        return;
    }
    let store = s;
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    ok(
        &store,
        &[
            "import",
            "--from",
            "swe-agent",
            "--no-sync",
            src.to_str().unwrap(),
        ],
    );
    let ls: Value = serde_json::from_str(&ok(&store, &["ls", "--json"])).unwrap();
    let at = ls[0]["last_activity"].as_i64().unwrap();
    // Clocks may step: only "not 1970, about now" is asserted.
    assert!(at >= before - 86_400_000, "{at} < {before}");
    assert!(!ok(&store, &["ls"]).contains("1970-01-01"));
    // Its history reads as chat too, and `show` prints roles.
    let shown = ok(
        &store,
        &["show", "--messages", "swe-function_calling_simple"],
    );
    assert!(shown.contains("] tool\n"), "{shown}");
    assert!(shown.contains("-> "), "{shown}");
}

fn large_source_fields_are_blobs_and_ls_json_stays_small(s: &TestStore) {
    let src = Path::new(DATA).join("codex");
    if !src.exists() {
        eprintln!("note: {} is absent; skipping", src.display());
        return;
    }
    let (dir, store) = (s.scratch(), s);
    ok(
        &store,
        &[
            "import",
            "--from",
            "codex",
            "--no-sync",
            src.to_str().unwrap(),
        ],
    );
    // Before: each record carried the ~21 KB base_instructions inline
    // (51,881 bytes of `ls --json` for the two rollouts).
    let listing = ok(&store, &["ls", "--json"]);
    assert!(
        listing.len() < 8 * 1024,
        "ls --json is {} bytes",
        listing.len()
    );
    let convs: Value = serde_json::from_str(&listing).unwrap();
    let mut rollouts: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    rollouts.sort();
    for c in convs.as_array().unwrap() {
        let file = c["metadata"]["source_file"].as_str().unwrap();
        let text = std::fs::read_to_string(src.join(file)).unwrap();
        let meta: Value = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|v| v["type"] == "session_meta")
            .unwrap();
        let reference = &c["metadata"]["session_meta"]["base_instructions"];
        let id = reference["sessctl_blob"].as_str().unwrap();
        // The blob holds the source's value as it was.
        let blob: Value = serde_json::from_str(&ok(&store, &["cat-object", "-p", id])).unwrap();
        assert_eq!(blob, meta["payload"]["base_instructions"]);
        // Small fields stay in place.
        assert_eq!(c["metadata"]["session_meta"]["id"], meta["payload"]["id"]);
        // gc keeps it; a clone carries it.
        ok(&store, &["gc", "--prune", "now"]);
        assert_eq!(ok(&store, &["cat-object", "-t", id]), "blob\n");
        let copy = dir.as_path().join(format!("copy-{id}"));
        let from = store.arg();
        ok(
            &store,
            &["clone", from.to_str().unwrap(), copy.to_str().unwrap()],
        );
        assert_eq!(ok(&copy, &["cat-object", "-t", id]), "blob\n");
    }
    assert_eq!(convs.as_array().unwrap().len(), rollouts.len());
    // Importing again writes nothing.
    let again = ok(
        &store,
        &[
            "import",
            "--from",
            "codex",
            "--no-sync",
            src.to_str().unwrap(),
        ],
    );
    assert!(
        again.contains(" 0 objects written, 0 refs moved"),
        "{again}"
    );
}
