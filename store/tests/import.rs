//! Import of real agent session files (`../shared/data`) and export back:
//! counts checked against numbers computed here from the raw JSON, lineage
//! checked against `parentUuid`, idempotence, incremental snapshots,
//! malformed lines, dangling parents, and round trips; each on a local
//! store and on a remote one (`name::local`, `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
mod support;
use backends::Backend;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use support::data;

use serde_json::Value;
use sessctl_store::export::{export, ExportFormat};
use sessctl_store::import::{import_paths, Format, ImportOptions, ImportReport, Redirect};
use sessctl_store::{ObjectId, RefName, RefTarget, Store};

/// Another new store on `b`'s backend, for a test that compares two.
fn new_store(b: &Backend) -> (Backend, Store) {
    let other = b.another();
    let store = other.open();
    (other, store)
}

fn opts() -> ImportOptions {
    ImportOptions {
        no_sync: true,
        progress: None,
        // These files are whole: what they hold is what the import must take.
        finished: true,
    }
}

fn import(store: &Store, format: Format, paths: &[PathBuf]) -> ImportReport {
    import_paths(store, format, paths, &opts()).unwrap()
}

fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if p.to_string_lossy().ends_with(ext) {
            out.push(p);
        }
    }
    out.sort();
}

fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn heads(store: &Store) -> Vec<(RefName, ObjectId)> {
    store
        .refs()
        .unwrap()
        .into_iter()
        .filter_map(|(n, t)| match t {
            RefTarget::Session(id) => Some((n, id)),
            _ => None,
        })
        .collect()
}

fn ops(store: &Store) -> usize {
    store.odb().backend().ops_after(0).unwrap().len()
}

/// Raw Claude Code lines of one session, read once per uuid.
struct RawCc {
    lines: Vec<Value>,
}

fn raw_claude(dir: &Path) -> HashMap<String, RawCc> {
    let mut files = Vec::new();
    files_under(dir, ".jsonl", &mut files);
    let mut out: HashMap<String, RawCc> = HashMap::new();
    let mut seen = HashSet::new();
    for f in files {
        let lines = jsonl(&f);
        let sid = lines
            .iter()
            .find_map(|l| l["sessionId"].as_str())
            .unwrap()
            .to_owned();
        let raw = out.entry(sid).or_insert(RawCc { lines: Vec::new() });
        for l in lines {
            if let Some(u) = l["uuid"].as_str() {
                if !seen.insert(u.to_owned()) {
                    continue;
                }
            }
            raw.lines.push(l);
        }
    }
    out
}

/// Messages a Claude Code session should become, counted without the
/// importer's parent walk: one per human/other user line, one per API
/// response (`message.id`), one per set of tool results answering one API
/// response (found through `tool_use_id`), one per compact boundary.
fn expected_claude_messages(raw: &RawCc) -> usize {
    let mut tool_owner: HashMap<String, String> = HashMap::new();
    let mut responses = BTreeSet::new();
    let mut n = 0;
    for l in &raw.lines {
        if l["type"] == "assistant" {
            let mid = l["message"]["id"].as_str().unwrap().to_owned();
            for p in l["message"]["content"].as_array().into_iter().flatten() {
                if p["type"] == "tool_use" {
                    tool_owner.insert(p["id"].as_str().unwrap().to_owned(), mid.clone());
                }
            }
            responses.insert(mid);
        }
    }
    let mut answered = BTreeSet::new();
    for l in &raw.lines {
        match (l["type"].as_str(), l["subtype"].as_str()) {
            (Some("user"), _) => {
                let parts = l["message"]["content"].as_array();
                let results: Vec<&Value> = parts
                    .into_iter()
                    .flatten()
                    .filter(|p| p["type"] == "tool_result")
                    .collect();
                if results.is_empty() {
                    n += 1;
                } else {
                    let owner = &tool_owner[results[0]["tool_use_id"].as_str().unwrap()];
                    if answered.insert(owner.clone()) {
                        n += 1;
                    }
                }
            }
            (Some("system"), Some("compact_boundary")) => n += 1,
            _ => {}
        }
    }
    n + responses.len()
}

/// Forks a Claude Code session holds: a message line with several children
/// that are neither more lines of its API response, nor tool results
/// answering that response (found through `tool_use_id`), nor subagent lines.
fn expected_claude_forks(raw: &RawCc) -> usize {
    let mut tool_owner: HashMap<&str, &str> = HashMap::new();
    let mut through: HashMap<&str, Option<&str>> = HashMap::new();
    let mut by_uuid: HashMap<&str, &Value> = HashMap::new();
    for l in &raw.lines {
        let Some(u) = l["uuid"].as_str() else {
            continue;
        };
        by_uuid.insert(u, l);
        if l["type"] == "assistant" {
            for p in l["message"]["content"].as_array().into_iter().flatten() {
                if p["type"] == "tool_use" {
                    tool_owner.insert(
                        p["id"].as_str().unwrap(),
                        l["message"]["id"].as_str().unwrap(),
                    );
                }
            }
        } else if l["type"] != "user" && l["subtype"] != "compact_boundary" {
            through.insert(u, l["parentUuid"].as_str());
        }
    }
    // The API response a line belongs to or answers.
    let response = |l: &Value| -> Option<String> {
        if l["type"] == "assistant" {
            return l["message"]["id"].as_str().map(str::to_owned);
        }
        let first = l["message"]["content"].as_array()?.first()?;
        (first["type"] == "tool_result")
            .then(|| {
                tool_owner
                    .get(first["tool_use_id"].as_str()?)
                    .map(|s| s.to_string())
            })
            .flatten()
    };
    let mut children: HashMap<&str, usize> = HashMap::new();
    for l in &raw.lines {
        let is_msg = l["type"] == "user" || l["type"] == "assistant";
        let (Some(mut p), true) = (l["parentUuid"].as_str(), is_msg) else {
            continue;
        };
        while let Some(up) = through.get(p) {
            match up {
                Some(up) => p = up,
                None => break,
            }
        }
        let Some(pl) = by_uuid.get(p) else { continue };
        if pl["isSidechain"] != l["isSidechain"] {
            continue;
        }
        let same = response(l).is_some() && response(l) == response(pl);
        if !same {
            *children.entry(p).or_default() += 1;
        }
    }
    children.values().map(|&c| c.saturating_sub(1)).sum()
}

/// Sessions a Claude Code session should become when it has no forks: one
/// per root, human prompt, compact boundary and start of a subagent.
fn expected_claude_sessions(raw: &RawCc) -> usize {
    let mut through: HashMap<&str, Option<&str>> = HashMap::new();
    let mut sidechain: HashMap<&str, bool> = HashMap::new();
    for l in &raw.lines {
        let Some(u) = l["uuid"].as_str() else {
            continue;
        };
        sidechain.insert(u, l["isSidechain"] == true);
        if l["type"] != "user" && l["type"] != "assistant" && l["subtype"] != "compact_boundary" {
            through.insert(u, l["parentUuid"].as_str());
        }
    }
    let mut starts = 0;
    for l in &raw.lines {
        let ty = l["type"].as_str().unwrap_or("");
        if l["subtype"] == "compact_boundary" {
            starts += 1;
            continue;
        }
        if ty != "user" && ty != "assistant" {
            continue;
        }
        let mut parent = l["parentUuid"].as_str();
        while let Some(Some(up)) = parent.and_then(|p| through.get(p)) {
            parent = Some(up);
        }
        if let Some(p) = parent {
            if through.get(p) == Some(&None) {
                parent = None;
            }
        }
        let root = parent.is_none();
        let subagent_start =
            l["isSidechain"] == true && parent.is_some_and(|p| sidechain.get(p) != Some(&true));
        let content = &l["message"]["content"];
        let prompt = ty == "user"
            && l["isMeta"] != true
            && l["isCompactSummary"] != true
            && (content.as_str().is_some_and(|s| !s.trim().is_empty())
                || content.as_array().is_some_and(|a| {
                    a.iter().any(|p| p["type"] == "text")
                        && !a.iter().any(|p| p["type"] == "tool_result")
                }));
        starts += usize::from(root || prompt || subagent_start);
    }
    starts
}

/// Checks that, along every ref's history, each Claude Code message's
/// predecessor is the message its `parentUuid` names (through merged lines
/// and non-message lines). Returns how many messages were checked.
fn check_claude_lineage(store: &Store, raw: &HashMap<String, RawCc>) -> usize {
    // Non-message lines with a uuid hand their children to their parent.
    let mut through: HashMap<String, Option<String>> = HashMap::new();
    for r in raw.values() {
        for l in &r.lines {
            let is_msg = matches!(l["type"].as_str(), Some("user" | "assistant"))
                || l["subtype"] == "compact_boundary";
            if let (Some(u), false) = (l["uuid"].as_str(), is_msg) {
                through.insert(u.to_owned(), l["parentUuid"].as_str().map(str::to_owned));
            }
        }
    }
    let resolve = |mut u: String| -> Option<String> {
        while let Some(p) = through.get(&u) {
            u = p.clone()?;
        }
        Some(u)
    };
    let mut checked = 0;
    for (_, head) in heads(store) {
        // uuid of every line merged into a message -> the message's uuid.
        let mut group: HashMap<String, String> = HashMap::new();
        let mut cur = Some(head);
        while let Some(c) = cur {
            let s = store.odb().session(&c).unwrap();
            // A merged response's lines are in its raw object.
            for m in &s.messages.added {
                let Some(raw) = store.odb().raw(m).unwrap() else {
                    continue;
                };
                let lines: Vec<Value> = raw
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
                let first = lines[0]["uuid"].as_str().unwrap().to_owned();
                for l in &lines[1..] {
                    group.insert(l["uuid"].as_str().unwrap().to_owned(), first.clone());
                }
            }
            cur = s.first_parent();
        }
        let history = store.odb().load_messages(&head).unwrap();
        for (i, m) in history.iter().enumerate() {
            if m["subtype"] == "compact_boundary" || i == 0 {
                continue;
            }
            let Some(parent) = m["parentUuid"].as_str() else {
                continue;
            };
            let parent = resolve(parent.to_owned()).unwrap();
            let parent = group.get(&parent).cloned().unwrap_or(parent);
            assert_eq!(
                history[i - 1]["uuid"].as_str(),
                Some(parent.as_str()),
                "message {} follows the wrong message",
                m["uuid"]
            );
            checked += 1;
        }
    }
    checked
}

fn claude_code_counts_lineage_and_idempotence(b: &Backend) {
    let Some(dir) = data("claude-code") else {
        return;
    };
    let store = b.open();
    let report = import(&store, Format::ClaudeCode, std::slice::from_ref(&dir));
    eprintln!("{}", report.to_json());
    let raw = raw_claude(&dir);
    let mut files = Vec::new();
    files_under(&dir, ".jsonl", &mut files);
    assert_eq!(report.files, files.len());
    assert_eq!(report.conversations, raw.len());
    let expected: usize = raw.values().map(expected_claude_messages).sum();
    assert_eq!(report.messages, expected);
    let boundaries = raw
        .values()
        .flat_map(|r| &r.lines)
        .filter(|l| l["subtype"] == "compact_boundary")
        .count();
    assert_eq!(report.compactions, boundaries);
    let forks: usize = raw.values().map(expected_claude_forks).sum();
    assert_eq!(report.forks, forks);
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    let sessions: usize = raw.values().map(expected_claude_sessions).sum();
    assert_eq!(report.sessions_total, sessions + report.forks);
    assert_eq!(report.sessions_written, report.sessions_total);
    let checked = check_claude_lineage(&store, &raw);
    assert!(checked > report.messages / 2, "only {checked} checked");

    // A compaction session: base 0, its record names the head before it.
    let compacted: Vec<_> = heads(&store)
        .into_iter()
        .flat_map(|(_, h)| {
            let mut out = Vec::new();
            let mut cur = Some(h);
            while let Some(c) = cur {
                let s = store.odb().session(&c).unwrap();
                if s.compaction.is_some() {
                    out.push(s.clone());
                }
                cur = s.first_parent();
            }
            out
        })
        .collect();
    assert_eq!(compacted.len(), boundaries);
    for s in &compacted {
        let c = s.compaction.unwrap();
        assert_eq!(s.messages.base, 0);
        assert_eq!(s.parents, vec![c.session]);
        assert_eq!(
            store.odb().history(&c.session).unwrap().len() as u64,
            c.messages
        );
    }

    // Subagents: async_subagent sessions carrying their spawner's conversation.
    let agent = store
        .resolve_rev("tags/cc-e9fb405b-169.agent-a485154")
        .unwrap();
    let s = store.odb().session(&agent).unwrap();
    assert_eq!(s.metadata.session_type.as_str(), "async_subagent");
    let spawner = s.metadata.spawned_by.expect("the Task call is known");
    let main = store.resolve_rev("cc-e9fb405b-169").unwrap();
    let main_conv = store.odb().session(&main).unwrap().conversation_id(main);
    assert_eq!(s.conversation, Some(main_conv));
    assert!(store.odb().history(&main).unwrap().len() > 1);
    assert!(store.odb().contains(&spawner).unwrap());

    // A second import writes nothing at all.
    let before = ops(&store);
    let again = import(&store, Format::ClaudeCode, &[dir]);
    assert_eq!((again.objects_written, again.refs_moved), (0, 0));
    assert_eq!(again.sessions_written, 0);
    assert_eq!(again.sessions_total, report.sessions_total);
    assert_eq!(ops(&store), before);
}

fn claude_code_later_snapshot_appends_only(b: &Backend) {
    let Some(dir) = data("claude-code/claude/incremental-subagents") else {
        return;
    };
    let store = b.open();
    let first = import(
        &store,
        Format::ClaudeCode,
        &[dir.join("turn-1.jsonl"), dir.join("turn-1")],
    );
    let old = heads(&store);
    let old_sessions = first.sessions_total;
    let second = import(
        &store,
        Format::ClaudeCode,
        &[dir.join("turn-2.jsonl"), dir.join("turn-2")],
    );
    assert!(second.sessions_written > 0);
    // turn-2's subagent file has a `progress` line inside the range turn-1
    // already had (an event of the agent's session, so that one session is
    // rewritten); everything else of the first import is kept as it was.
    assert_eq!(old_sessions, 2);
    assert_eq!(second.sessions_total - second.sessions_written, 1);
    for (name, old_head) in old {
        let new_head = store.resolve_rev(&name.to_string()).unwrap();
        let (a, b) = (
            store.odb().history(&old_head).unwrap(),
            store.odb().history(&new_head).unwrap(),
        );
        assert!(b.starts_with(&a), "{name}: messages are only appended");
        if name.to_string().starts_with("refs/tags/") {
            continue;
        }
        // The conversation moved forward: its old head is an ancestor.
        let mut cur = Some(new_head);
        let mut found = false;
        while let Some(c) = cur {
            if c == old_head {
                found = true;
                break;
            }
            cur = store.odb().session(&c).unwrap().first_parent();
        }
        assert!(found, "{name} did not move forward");
    }
    // The same as importing turn-2 alone, message for message.
    let (_d2, fresh) = new_store(b);
    import(
        &fresh,
        Format::ClaudeCode,
        &[dir.join("turn-2.jsonl"), dir.join("turn-2")],
    );
    for (name, h) in heads(&fresh) {
        let a = fresh.odb().history(&h).unwrap();
        let b = store
            .odb()
            .history(&store.resolve_rev(&name.to_string()).unwrap())
            .unwrap();
        assert_eq!(a, b, "{name}");
    }
}

fn malformed_line_is_reported_and_the_rest_imported(b: &Backend) {
    let Some(src) = data("claude-code/session-9eda1058.jsonl") else {
        return;
    };
    let store = b.open();
    let clean = import(&store, Format::ClaudeCode, std::slice::from_ref(&src));
    let text = std::fs::read_to_string(&src).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    // Line 3 is a `summary` line; line 20 a message.
    assert!(lines[2].contains("\"summary\""));
    lines[2] = "{\"type\": \"summary\", broken";
    let tmp = tempfile::tempdir().unwrap();
    let broken = tmp.path().join("session-9eda1058.jsonl");
    std::fs::write(&broken, lines.join("\n")).unwrap();
    let (_d2, store2) = new_store(b);
    let r = import(&store2, Format::ClaudeCode, std::slice::from_ref(&broken));
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(
        (r.skipped[0].file.as_path(), r.skipped[0].line),
        (broken.as_path(), 3)
    );
    assert!(
        r.skipped[0].reason.starts_with("invalid JSON"),
        "{}",
        r.skipped[0].reason
    );
    assert_eq!(r.messages, clean.messages);
    assert_eq!(r.sessions_total, clean.sessions_total);
}

fn dangling_parent_is_reported_and_kept_as_root(b: &Backend) {
    let Some(src) = data("claude-code/claude/incremental-simple/turn-2.jsonl") else {
        return;
    };
    let store = b.open();
    let clean = import(&store, Format::ClaudeCode, std::slice::from_ref(&src));
    let text = std::fs::read_to_string(&src).unwrap();
    // Drop the first message: its child's parent dangles.
    let mut dropped = None;
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            if dropped.is_none() && v["type"] == "user" {
                dropped = Some(v["uuid"].as_str().unwrap().to_owned());
                return false;
            }
            true
        })
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("turn-2.jsonl");
    std::fs::write(&f, kept.join("\n")).unwrap();
    let (_d2, store2) = new_store(b);
    let r = import(&store2, Format::ClaudeCode, &[f]);
    assert_eq!(
        r.dangling,
        vec![("turn-2.jsonl".to_owned(), dropped.unwrap())]
    );
    assert_eq!(r.messages, clean.messages - 1);
}

fn claude_code_fork_becomes_a_conversation(b: &Backend) {
    let Some(src) = data("claude-code/claude/incremental-simple/turn-2.jsonl") else {
        return;
    };
    let clean = b.open();
    import(&clean, Format::ClaudeCode, std::slice::from_ref(&src));
    let (main_name, main_head) = heads(&clean).into_iter().next().unwrap();
    // A second answer to the first prompt's reply, older than the newest
    // leaf: a fork beside the main line.
    let mut text = std::fs::read_to_string(&src).unwrap();
    let first: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["type"] == "user")
        .unwrap();
    let mut fork = first.clone();
    fork["uuid"] = "00000000-fork-0000-0000-000000000001".into();
    fork["parentUuid"] = "b5d93735-".into();
    let reply = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| {
            v["uuid"]
                .as_str()
                .is_some_and(|u| u.starts_with("b5d93735"))
        })
        .unwrap();
    fork["parentUuid"] = reply["uuid"].clone();
    fork["timestamp"] = "2026-01-15T17:30:00.000Z".into();
    fork["message"]["content"] = "try another way".into();
    text.push_str(&serde_json::to_string(&fork).unwrap());
    text.push('\n');
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("turn-2.jsonl");
    std::fs::write(&f, text).unwrap();
    let (_d2, store) = new_store(b);
    let r = import(&store, Format::ClaudeCode, &[f]);
    assert_eq!(r.forks, 1);
    assert_eq!(
        store.resolve_rev(&main_name.to_string()).unwrap(),
        main_head
    );
    let fork_name = format!("{}.fork-1", main_name.short());
    let fork_head = store.resolve_rev(&fork_name).unwrap();
    let history = store.odb().load_messages(&fork_head).unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(
        history[1]["message"]["id"], reply["message"]["id"],
        "the merged reply"
    );
    assert_eq!(history[2]["message"]["content"], "try another way");
    let info = store.conversation(&fork_name).unwrap().unwrap();
    assert_eq!(info.record.conversation_id, Some(fork_head));
    let s = store.odb().session(&fork_head).unwrap();
    assert_eq!(s.messages.base, 2);
    assert_eq!(s.conversation, None);
}

fn codex_counts_and_usage(b: &Backend) {
    let Some(dir) = data("codex") else {
        return;
    };
    let store = b.open();
    let r = import(&store, Format::Codex, std::slice::from_ref(&dir));
    let mut files = Vec::new();
    files_under(&dir, ".jsonl", &mut files);
    let mut messages = 0;
    let mut compactions = 0;
    let mut requests = 0;
    for f in &files {
        let lines = jsonl(f);
        let has_user = lines
            .iter()
            .any(|l| l["type"] == "response_item" && l["payload"]["role"] == "user");
        for l in &lines {
            let t = l["type"].as_str().unwrap();
            let pt = l["payload"]["type"].as_str().unwrap_or("");
            if t == "response_item" || t == "compacted" || (!has_user && pt == "user_message") {
                messages += 1;
            }
            compactions += usize::from(t == "compacted");
            requests += usize::from(pt == "token_count" && !l["payload"]["info"].is_null());
        }
    }
    assert_eq!(r.files, files.len());
    assert_eq!(r.conversations, files.len());
    assert_eq!(
        (r.messages, r.compactions, r.forks),
        (messages, compactions, 0)
    );
    assert!(r.skipped.is_empty());
    // Usage: the requests of every session add up to the token_count events.
    let mut total = 0;
    for (_, h) in heads(&store) {
        let mut cur = Some(h);
        while let Some(c) = cur {
            let s = store.odb().session(&c).unwrap();
            total += s.run.usage.requests;
            cur = s.first_parent();
        }
    }
    assert_eq!(total as usize, requests);
    let again = import(&store, Format::Codex, &[dir]);
    assert_eq!((again.objects_written, again.refs_moved), (0, 0));
}

fn codex_fork_shares_its_source_prefix(b: &Backend) {
    let Some(dir) = data("codex") else {
        return;
    };
    let mut files = Vec::new();
    files_under(&dir, ".jsonl", &mut files);
    let source = &files[0];
    let lines = jsonl(source);
    let meta = lines.iter().find(|l| l["type"] == "session_meta").unwrap();
    let source_id = meta["payload"]["id"].as_str().unwrap();
    // A fork: its own session_meta naming the source, a copy of the
    // source's first 40 lines, then a new prompt.
    let mut fork_meta = meta.clone();
    fork_meta["payload"]["id"] = "11111111-2222-3333-4444-555555555555".into();
    fork_meta["payload"]["forked_from_id"] = source_id.into();
    let mut out = vec![serde_json::to_string(&fork_meta).unwrap()];
    let copied: Vec<&Value> = lines
        .iter()
        .filter(|l| l["type"] != "session_meta")
        .take(40)
        .collect();
    out.extend(copied.iter().map(|l| serde_json::to_string(l).unwrap()));
    out.push(
        serde_json::json!({"timestamp": "2026-05-12T00:00:00.000Z", "type": "response_item",
            "payload": {"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "now the other way"}]}})
        .to_string(),
    );
    let tmp = tempfile::tempdir().unwrap();
    let fork_file = tmp.path().join("rollout-fork.jsonl");
    std::fs::write(&fork_file, out.join("\n") + "\n").unwrap();

    let store = b.open();
    import(&store, Format::Codex, std::slice::from_ref(source));
    let r = import(&store, Format::Codex, std::slice::from_ref(&fork_file));
    assert_eq!(
        (r.messages, r.forks),
        (1, 1),
        "only the new prompt is stored"
    );
    let src_head = store
        .resolve_rev(&format!("codex-{}", &source_id[..12]))
        .unwrap();
    let fork_head = store.resolve_rev("codex-11111111-222").unwrap();
    let (a, b) = (
        store.odb().history(&src_head).unwrap(),
        store.odb().history(&fork_head).unwrap(),
    );
    let shared = copied
        .iter()
        .filter(|l| l["type"] == "response_item")
        .count();
    assert_eq!(b.len(), shared + 1);
    assert_eq!(b[..shared], a[..shared]);
    let s = store.odb().session(&fork_head).unwrap();
    assert_eq!((s.messages.base, s.conversation), (shared as u64, None));
    // The source's session that added the last shared message.
    let p = store.odb().session(&s.parents[0]).unwrap();
    assert!(p.messages.base < shared as u64 && p.messages.len() >= shared as u64);
    let again = import(&store, Format::Codex, &[fork_file]);
    assert_eq!((again.objects_written, again.refs_moved), (0, 0));
}

fn swe_agent_counts(b: &Backend) {
    let Some(dir) = data("swe-agent") else {
        return;
    };
    let store = b.open();
    let r = import(&store, Format::SweAgent, std::slice::from_ref(&dir));
    let mut files = Vec::new();
    files_under(&dir, ".traj", &mut files);
    let mut messages = 0;
    let mut stems = BTreeSet::new();
    for f in &files {
        let v: Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        messages += v["history"].as_array().map_or(0, Vec::len);
        stems.insert(f.file_stem().unwrap().to_owned());
    }
    assert_eq!(r.files, files.len());
    assert_eq!(r.messages, messages);
    assert_eq!(r.sessions_total, files.len());
    assert!(r.skipped.is_empty());
    // Two files may share a stem (one conversation name): each is a root.
    assert_eq!(r.conversations, files.len());
    let again = import(&store, Format::SweAgent, &[dir]);
    assert_eq!((again.objects_written, again.refs_moved), (0, 0));
}

fn export_to(store: &Store, rev: &str, format: ExportFormat, path: &Path) {
    let id = store.resolve_rev(rev).unwrap();
    std::fs::write(path, export(store, id, format).unwrap()).unwrap();
}

fn claude_code_round_trip(b: &Backend) {
    let Some(src) = data("claude-code/claude/incremental-simple/turn-2.jsonl") else {
        return;
    };
    let a = b.open();
    import(&a, Format::ClaudeCode, &[src]);
    let (name, head) = heads(&a).into_iter().next().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("exported.jsonl");
    export_to(&a, &name.to_string(), ExportFormat::ClaudeCode, &out);
    let (_d2, b) = new_store(b);
    let r = import(&b, Format::ClaudeCode, &[out]);
    assert!(r.dangling.is_empty() && r.skipped.is_empty());
    assert_eq!(b.resolve_rev(&name.to_string()).unwrap(), head);
}

fn openai_round_trip_and_other_formats_through_openai(be: &Backend) {
    let Some(swe) = data("swe-agent/trajectories") else {
        return;
    };
    let mut trajs = Vec::new();
    files_under(&swe, ".traj", &mut trajs);
    let tmp = tempfile::tempdir().unwrap();
    // SWE-agent history is OpenAI chat with keys of its own (`agent`,
    // `thought`, `tool_call_ids`): exported as the chat an API takes.
    let a = be.open();
    import(&a, Format::SweAgent, &trajs[..1]);
    let (swe_name, swe_head) = heads(&a).into_iter().next().unwrap();
    let first = tmp.path().join("first.json");
    export_to(&a, &swe_name.to_string(), ExportFormat::OpenAi, &first);
    assert_eq!(
        a.odb().history(&swe_head).unwrap().len(),
        serde_json::from_slice::<Value>(&std::fs::read(&first).unwrap()).unwrap()["messages"]
            .as_array()
            .unwrap()
            .len()
    );
    let exported: Value = serde_json::from_slice(&std::fs::read(&first).unwrap()).unwrap();
    for m in exported["messages"].as_array().unwrap() {
        let keys: BTreeSet<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
        let chat: BTreeSet<&str> = ["role", "content", "name", "tool_calls", "tool_call_id"].into();
        assert!(keys.is_subset(&chat), "{m}");
    }
    // OpenAI -> export openai -> import openai: the same sessions.
    let (_d2, b) = new_store(be);
    import(&b, Format::OpenAi, std::slice::from_ref(&first));
    let (b_name, b_head) = heads(&b).into_iter().next().unwrap();
    assert_eq!(
        b.odb().history(&b_head).unwrap().len(),
        a.odb().history(&swe_head).unwrap().len(),
    );
    let second = tmp.path().join("second.json");
    export_to(&b, &b_name.to_string(), ExportFormat::OpenAi, &second);
    let (_d3, c) = new_store(be);
    import(&c, Format::OpenAi, std::slice::from_ref(&second));
    let (_, c_head) = heads(&c).into_iter().next().unwrap();
    assert_eq!(c_head, b_head);
    // JSONL (one conversation a line) reads the same conversation.
    let line = serde_json::to_string(
        &serde_json::from_slice::<Value>(&std::fs::read(&second).unwrap()).unwrap(),
    )
    .unwrap();
    let jl = tmp.path().join("convs.jsonl");
    std::fs::write(&jl, format!("{line}\nnot json\n")).unwrap();
    let (_d4, d) = new_store(be);
    let r = import(&d, Format::OpenAi, &[jl]);
    assert_eq!(r.skipped.len(), 1);
    assert_eq!(r.skipped[0].line, 2);
    assert_eq!(heads(&d)[0].1, b_head);

    // Codex -> openai -> import: every chat message arrives.
    if let Some(codex) = data("codex") {
        let (_d5, e) = new_store(be);
        import(&e, Format::Codex, &[codex]);
        for (name, _) in heads(&e) {
            let f = tmp.path().join("codex.json");
            export_to(&e, &name.to_string(), ExportFormat::OpenAi, &f);
            let n = serde_json::from_slice::<Value>(&std::fs::read(&f).unwrap()).unwrap()
                ["messages"]
                .as_array()
                .unwrap()
                .len();
            let (_d6, g) = new_store(be);
            let r = import(&g, Format::OpenAi, &[f]);
            assert_eq!(r.messages, n);
        }
    }
}

fn export_json_and_jsonl_hold_the_history(b: &Backend) {
    let Some(src) = data("claude-code/session-196820da.jsonl") else {
        return;
    };
    let store = b.open();
    import(&store, Format::ClaudeCode, &[src]);
    for (name, head) in heads(&store) {
        let history = store.odb().load_messages(&head).unwrap();
        let json: Vec<Value> =
            serde_json::from_str(&export(&store, head, ExportFormat::Json).unwrap()).unwrap();
        assert_eq!(json, history, "{name}");
        let lines: Vec<Value> = export(&store, head, ExportFormat::Jsonl)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, history, "{name}");
    }
}

fn no_line_is_lost_and_summaries_name_titles(b: &Backend) {
    let Some(src) = data("claude-code/claude/incremental-simple/turn-2.jsonl") else {
        return;
    };
    let mut text = std::fs::read_to_string(&src).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines
        .iter()
        .rev()
        .find(|l| l["type"] == "assistant")
        .unwrap();
    text.push_str(&format!(
        "{{\"type\":\"summary\",\"summary\":\"Tools tour\",\"leafUuid\":{}}}\n",
        last["uuid"]
    ));
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("turn-2.jsonl");
    std::fs::write(&f, &text).unwrap();
    let store = b.open();
    let r = import(&store, Format::ClaudeCode, &[f]);
    let (name, head) = heads(&store).into_iter().next().unwrap();
    let info = store.conversation(name.short()).unwrap().unwrap();
    assert_eq!(info.record.title.as_deref(), Some("Tools tour"));
    // Every line is somewhere: a message, a merged line, an event, or a
    // trailing event of the record.
    let mut kept = r.messages;
    let mut cur = Some(head);
    while let Some(c) = cur {
        let s = store.odb().session(&c).unwrap();
        if let Some(Value::Object(m)) = s.metadata.extra.get("events") {
            kept += m
                .values()
                .map(|v| v.as_array().unwrap().len())
                .sum::<usize>();
        }
        // A merged response's other lines are in its raw object.
        for m in &s.messages.added {
            kept += store
                .odb()
                .raw(m)
                .unwrap()
                .map_or(0, |r| r.lines().count() - 1);
        }
        cur = s.first_parent();
    }
    kept += info.record.metadata["trailing_events"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(kept, lines.len() + 1);
}

fn a_conversation_made_by_hand_is_not_overwritten(b: &Backend) {
    let Some(src) = data("claude-code/claude/incremental-simple/turn-2.jsonl") else {
        return;
    };
    let probe = b.open();
    import(&probe, Format::ClaudeCode, std::slice::from_ref(&src));
    let (name, _) = heads(&probe).into_iter().next().unwrap();
    let (_d2, store) = new_store(b);
    let turn = sessctl_store::Turn {
        messages: sessctl_store::Messages::Added(vec![
            serde_json::json!({"role": "user", "content": "mine"}),
        ]),
        created_at: Some(1),
        ..Default::default()
    };
    let (_, mine) = store
        .create(Some(name.short()), turn, sessctl_store::Durability::NoSync)
        .unwrap();
    let r = import(&store, Format::ClaudeCode, std::slice::from_ref(&src));
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    let alt = format!("{}.imported", name.short());
    assert_eq!(
        r.redirected,
        vec![(name.short().to_owned(), alt.clone(), Redirect::Moved)]
    );
    assert_eq!(store.resolve_rev(name.short()).unwrap(), mine);
    assert_eq!(
        store.resolve_rev(&alt).unwrap(),
        probe.resolve_rev(name.short()).unwrap()
    );
    // Once redirected, always: a second import writes nothing.
    let again = import(&store, Format::ClaudeCode, &[src]);
    assert!(again.redirected.is_empty());
    assert_eq!((again.objects_written, again.refs_moved), (0, 0));
}

fn import_survives_reopen(b: &Backend) {
    let Some(src) = data("claude-code/claude/incremental-simple/turn-2.jsonl") else {
        return;
    };
    let store = b.open();
    import_paths(
        &store,
        Format::ClaudeCode,
        std::slice::from_ref(&src),
        &ImportOptions::default(),
    )
    .unwrap();
    let before = heads(&store);
    drop(store);
    let store = b.open();
    assert_eq!(heads(&store), before);
    let r = import(&store, Format::ClaudeCode, &[src]);
    assert_eq!((r.objects_written, r.refs_moved), (0, 0));
}

#[test]
fn every_real_file_is_detected_as_its_format() {
    use sessctl_store::import::{detect, Detected, SourceFile};
    for (sub, ext, format) in [
        ("claude-code", ".jsonl", Format::ClaudeCode),
        ("codex", ".jsonl", Format::Codex),
        ("swe-agent", ".traj", Format::SweAgent),
    ] {
        let Some(dir) = data(sub) else {
            continue;
        };
        let mut files = Vec::new();
        files_under(&dir, ext, &mut files);
        for f in files {
            let src = SourceFile {
                text: std::fs::read_to_string(&f).unwrap(),
                path: f.clone(),
            };
            assert_eq!(detect(&src), Detected::Format(format), "{}", f.display());
            // Half of it, as an agent is writing it, too.
            let half = SourceFile {
                text: src.text[..src.text.len() / 2].to_owned(),
                path: f.clone(),
            };
            assert_eq!(detect(&half), Detected::Format(format), "{}", f.display());
        }
    }
}

/// The usage every session of the store holds, summed.
fn store_usage(store: &Store) -> (u64, u64, u64, u64) {
    let mut seen = HashSet::new();
    let mut out = (0, 0, 0, 0);
    for (_, h) in heads(store) {
        let mut cur = Some(h);
        while let Some(c) = cur {
            if !seen.insert(c) {
                break;
            }
            let s = store.odb().session(&c).unwrap();
            let u = s.run.usage;
            out = (
                out.0 + u.prompt_tokens,
                out.1 + u.completion_tokens,
                out.2 + u.total_tokens,
                out.3 + u.requests,
            );
            cur = s.first_parent();
        }
    }
    out
}

fn codex_token_counts_repeated_add_nothing_and_cache_reads_are_kept(b: &Backend) {
    let Some(dir) = data("codex") else {
        return;
    };
    let mut files = Vec::new();
    files_under(&dir, ".jsonl", &mut files);
    let f = files
        .into_iter()
        .find(|f| std::fs::read_to_string(f).unwrap().contains("token_count"))
        .unwrap();
    let store = b.open();
    import(&store, Format::Codex, std::slice::from_ref(&f));
    let once = store_usage(&store);
    // The last running total is the rollout's.
    let last = jsonl(&f)
        .into_iter()
        .rfind(|l| l["payload"]["type"] == "token_count")
        .unwrap();
    let t = &last["payload"]["info"]["total_token_usage"];
    assert_eq!(
        (once.0, once.1, once.2),
        (
            t["input_tokens"].as_u64().unwrap(),
            t["output_tokens"].as_u64().unwrap(),
            t["total_tokens"].as_u64().unwrap()
        )
    );
    // Every token_count line written twice: the same totals.
    let text = std::fs::read_to_string(&f).unwrap();
    let doubled: String = text
        .lines()
        .flat_map(|l| {
            let n = if l.contains("\"token_count\"") { 2 } else { 1 };
            std::iter::repeat_n(format!("{l}\n"), n)
        })
        .collect();
    let d = tempfile::tempdir().unwrap();
    let g = d.path().join(f.file_name().unwrap());
    std::fs::write(&g, doubled).unwrap();
    let (_d2, store2) = new_store(b);
    import(&store2, Format::Codex, &[g]);
    assert_eq!(store_usage(&store2), once);
    // Cache reads and the model are in `extra.usage`.
    let mut cached = 0;
    let mut models = BTreeSet::new();
    for (_, h) in heads(&store) {
        let mut cur = Some(h);
        while let Some(c) = cur {
            let s = store.odb().session(&c).unwrap();
            if let Some(u) = s.metadata.extra.get("usage") {
                cached += u["cache_read_tokens"].as_u64().unwrap_or(0);
                models.extend(u["model"].as_str().map(str::to_owned));
            }
            cur = s.first_parent();
        }
    }
    assert_eq!(cached, t["cached_input_tokens"].as_u64().unwrap());
    assert_eq!(models.len(), 1, "{models:?}");
}

fn an_open_turn_is_held_back_until_it_ends(b: &Backend) {
    let Some(f) = data("claude-code/claude/incremental-subagents/turn-1.jsonl") else {
        return;
    };
    // turn-1 ends on a tool call whose result is not written yet.
    let store = b.open();
    let live = ImportOptions {
        no_sync: true,
        ..ImportOptions::default()
    };
    let r = import_paths(&store, Format::ClaudeCode, std::slice::from_ref(&f), &live).unwrap();
    assert!(r.held_back > 0, "{r:?}");
    let (_d2, whole) = new_store(b);
    let r2 = import(&whole, Format::ClaudeCode, &[f]);
    assert_eq!(r2.held_back, 0);
    assert_eq!(r.messages + r.held_back, r2.messages);
    // What was written is a prefix of what --finished writes.
    let held: HashSet<ObjectId> = heads(&store).into_iter().map(|(_, h)| h).collect();
    for h in held {
        assert!(whole.odb().contains(&h).unwrap());
    }
}

/// A Claude Code line for the rewind test.
fn cc_line(uuid: &str, parent: Option<&str>, user: bool, minute: u32, text: &str) -> String {
    let message = if user {
        serde_json::json!({"role": "user", "content": text})
    } else {
        serde_json::json!({"role": "assistant", "id": format!("msg_{uuid}"),
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn"})
    };
    let v = serde_json::json!({
        "type": if user { "user" } else { "assistant" },
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": "5e55e55e-0000-4000-8000-000000000001",
        "timestamp": format!("2026-01-15T17:{minute:02}:00.000Z"),
        "message": message,
    });
    serde_json::to_string(&v).unwrap() + "\n"
}

/// A rewind (a new prompt on an earlier answer) makes a fork; the
/// conversation keeps its line and only fast-forwards. A first import of
/// the whole file takes the newest leaf for the main line.
fn a_rewind_keeps_the_conversation_on_its_line(b: &Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("rewind.jsonl");
    let mut text = cc_line("u1", None, true, 1, "first")
        + &cc_line("a1", Some("u1"), false, 2, "first answer")
        + &cc_line("u2", Some("a1"), true, 3, "second")
        + &cc_line("a2", Some("u2"), false, 4, "second answer");
    std::fs::write(&f, &text).unwrap();
    let store = b.open();
    import(&store, Format::ClaudeCode, std::slice::from_ref(&f));
    let (main, h1) = heads(&store).into_iter().next().unwrap();
    text += &cc_line("u3", Some("a1"), true, 5, "rewound");
    text += &cc_line("a3", Some("u3"), false, 6, "rewound answer");
    std::fs::write(&f, &text).unwrap();
    let r = import(&store, Format::ClaudeCode, std::slice::from_ref(&f));
    assert_eq!(r.redirected, vec![]);
    let h2 = store.resolve_rev(&main.to_string()).unwrap();
    assert!(sessctl_store::graph::is_ancestor(store.odb(), h1, h2).unwrap());
    let last = |rev: &str| {
        let h = store.resolve_rev(rev).unwrap();
        let m = store.odb().load_messages(&h).unwrap();
        m.last().unwrap()["message"]["content"][0]["text"].clone()
    };
    assert_eq!(last(main.short()), "second answer");
    let fork = format!("{}.fork-1", main.short());
    assert_eq!(last(&fork), "rewound answer");
    // The whole file at once: the newest leaf is the main line.
    let (_d2, fresh) = new_store(b);
    import(&fresh, Format::ClaudeCode, std::slice::from_ref(&f));
    let h = fresh.resolve_rev(main.short()).unwrap();
    let m = fresh.odb().load_messages(&h).unwrap();
    assert_eq!(
        m.last().unwrap()["message"]["content"][0]["text"],
        "rewound answer"
    );
    let h = fresh.resolve_rev(&fork).unwrap();
    let m = fresh.odb().load_messages(&h).unwrap();
    assert_eq!(
        m.last().unwrap()["message"]["content"][0]["text"],
        "second answer"
    );
}

/// A transcript rewritten in place (its first prompt replaced) no longer
/// continues what an import wrote: with `finished` or without, the
/// conversation stays where it is, and the import follows
/// `<name>.imported`, saying the source was rewritten.
fn a_rewritten_transcript_moves_nothing_back(b: &Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("s.jsonl");
    for finished in [false, true] {
        let (_d, store) = new_store(b);
        let opts = ImportOptions { finished, ..opts() };
        std::fs::write(
            &f,
            cc_line("u1", None, true, 1, "first") + &cc_line("a1", Some("u1"), false, 2, "answer"),
        )
        .unwrap();
        import_paths(&store, Format::ClaudeCode, std::slice::from_ref(&f), &opts).unwrap();
        let (main, h1) = heads(&store).into_iter().next().unwrap();
        std::fs::write(
            &f,
            cc_line("u9", None, true, 1, "other") + &cc_line("a9", Some("u9"), false, 2, "answer"),
        )
        .unwrap();
        let r = import_paths(&store, Format::ClaudeCode, std::slice::from_ref(&f), &opts).unwrap();
        let alt = format!("{}.imported", main.short());
        assert_eq!(
            r.redirected,
            vec![(main.short().to_owned(), alt.clone(), Redirect::Rewritten)],
            "finished: {finished}"
        );
        assert_eq!(store.resolve_rev(main.short()).unwrap(), h1);
        let (_d2, fresh) = new_store(b);
        import_paths(&fresh, Format::ClaudeCode, std::slice::from_ref(&f), &opts).unwrap();
        assert_eq!(
            store.resolve_rev(&alt).unwrap(),
            fresh.resolve_rev(main.short()).unwrap()
        );
    }
}

two_backends!(
    claude_code_counts_lineage_and_idempotence,
    claude_code_later_snapshot_appends_only,
    malformed_line_is_reported_and_the_rest_imported,
    dangling_parent_is_reported_and_kept_as_root,
    claude_code_fork_becomes_a_conversation,
    codex_counts_and_usage,
    codex_fork_shares_its_source_prefix,
    swe_agent_counts,
    claude_code_round_trip,
    openai_round_trip_and_other_formats_through_openai,
    export_json_and_jsonl_hold_the_history,
    no_line_is_lost_and_summaries_name_titles,
    a_conversation_made_by_hand_is_not_overwritten,
    import_survives_reopen,
    codex_token_counts_repeated_add_nothing_and_cache_reads_are_kept,
    an_open_turn_is_held_back_until_it_ends,
    a_rewind_keeps_the_conversation_on_its_line,
    a_rewritten_transcript_moves_nothing_back,
);
