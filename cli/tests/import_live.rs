//! End to end: what `sessctl import` makes of real session files
//! (`../shared/data`) as their agents write them: token usage carried into
//! run summaries, format detection, files read while they grow (every
//! prefix lands as the whole file does, every ref move a fast-forward),
//! conversations the user continued, archived or removed. Each on a local
//! store and on a remote one (`name::local`, `name::remote`); a store a
//! test compares with is a local one.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::data;
use support::{Run, Target, TestStore};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

fn sessctl<T: Target + ?Sized>(store: &T, args: &[&str]) -> Run {
    support::sessctl(store, args, None)
}

fn ok<T: Target + ?Sized>(store: &T, args: &[&str]) -> Run {
    let r = sessctl(store, args);
    assert_eq!(r.code, 0, "sessctl {args:?}: {}{}", r.stdout, r.stderr);
    r
}

two_backends!(
    token_totals_equal_the_sources_in_ls_log_and_show,
    every_prefix_of_a_growing_file_lands_as_the_whole_file_does,
    formats_are_detected_and_a_wrong_from_is_one_clear_error,
    skipped_lines_name_their_line_and_say_invalid_json_once,
    a_half_written_last_line_is_left_for_later_and_reported_once,
    commit_usage_takes_anthropic_names,
    a_conversation_continued_here_keeps_its_sessions_and_the_import_follows_name_imported,
    a_renamed_conversation_is_followed_under_its_new_name,
    archived_and_removed_conversations_stay_so,
    imports_of_one_growing_file_at_once_all_land,
    an_older_copy_of_a_file_moves_nothing_back,
    a_conversation_compacted_here_keeps_its_compaction,
    a_rewritten_transcript_moves_nothing_back_with_or_without_finished,
);

fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if p.extension().and_then(|x| x.to_str()) == Some(ext) {
            out.push(p);
        }
    }
    out.sort();
}

/// Every real file: (format, path).
fn real_files() -> Vec<(&'static str, PathBuf)> {
    let mut out = Vec::new();
    for (format, sub, ext) in [
        ("claude-code", "claude-code", "jsonl"),
        ("codex", "codex", "jsonl"),
        ("swe-agent", "swe-agent", "traj"),
    ] {
        if let Some(dir) = data(sub) {
            let mut files = Vec::new();
            files_under(&dir, ext, &mut files);
            out.extend(files.into_iter().map(|f| (format, f)));
        }
    }
    out
}

fn json(r: &Run) -> Value {
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

/// (prompt, completion, total, requests)
type Tokens = (u64, u64, u64, u64);

fn tokens_of(u: &Value) -> Tokens {
    let n = |k: &str| u[k].as_u64().unwrap();
    (
        n("prompt_tokens"),
        n("completion_tokens"),
        n("total_tokens"),
        n("requests"),
    )
}

fn add(a: Tokens, b: Tokens) -> Tokens {
    (a.0 + b.0, a.1 + b.1, a.2 + b.2, a.3 + b.3)
}

/// What the source file says it cost, read straight from its JSON.
fn source_tokens(format: &str, path: &Path) -> Tokens {
    let text = std::fs::read_to_string(path).unwrap();
    match format {
        // One API response is several lines sharing `message.id`, each with
        // the usage as it stood: the last line of each response, once.
        "claude-code" => {
            let mut last: BTreeMap<String, Value> = BTreeMap::new();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: Value = serde_json::from_str(line).unwrap();
                if v["type"] != "assistant" {
                    continue;
                }
                if let Some(id) = v["message"]["id"].as_str() {
                    last.insert(id.to_owned(), v["message"].clone());
                }
            }
            last.values().fold((0, 0, 0, 0), |acc, m| {
                let u = &m["usage"];
                let n = |k: &str| u[k].as_u64().unwrap_or(0);
                let prompt = n("input_tokens")
                    + n("cache_creation_input_tokens")
                    + n("cache_read_input_tokens");
                let out = n("output_tokens");
                let req = u64::from(m["model"] != "<synthetic>");
                add(acc, (prompt, out, prompt + out, req))
            })
        }
        // Running totals: the last one is the rollout's.
        "codex" => {
            let mut total = (0, 0, 0, 0);
            let mut requests = 0;
            let mut before = Value::Null;
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: Value = serde_json::from_str(line).unwrap();
                let t = &v["payload"]["info"]["total_token_usage"];
                if v["payload"]["type"] == "token_count" && t.is_object() {
                    let n = |k: &str| t[k].as_u64().unwrap();
                    total = (n("input_tokens"), n("output_tokens"), n("total_tokens"), 0);
                    requests += u64::from(*t != before);
                    before = t.clone();
                }
            }
            (total.0, total.1, total.2, requests)
        }
        _ => {
            let v: Value = serde_json::from_str(&text).unwrap();
            let s = &v["info"]["model_stats"];
            let n = |k: &str| s[k].as_u64().unwrap_or(0);
            let (sent, received) = (n("tokens_sent"), n("tokens_received"));
            (sent, received, sent + received, n("api_calls"))
        }
    }
}

fn token_totals_equal_the_sources_in_ls_log_and_show(s: &TestStore) {
    let files = real_files();
    let mut nonzero = 0;
    for (format, path) in &files {
        // A store of its own for each file, on the test's backend.
        let store = s.another();
        let r = ok(
            &store,
            &["import", "--finished", "--json", path.to_str().unwrap()],
        );
        assert_eq!(json(&r)["held_back"], 0, "{}", path.display());
        let want = source_tokens(format, path);
        // Every session once.
        let log = json(&ok(&store, &["log", "--all", "--json"]));
        let sessions = log.as_array().unwrap();
        let from_log = sessions
            .iter()
            .fold((0, 0, 0, 0), |a, s| add(a, tokens_of(&s["usage"])));
        assert_eq!(from_log, want, "log of {}", path.display());
        // Per conversation, for the sessions that belong to one.
        let ls = json(&ok(&store, &["ls", "--json"]));
        for c in ls.as_array().unwrap() {
            let name = c["name"].as_str().unwrap();
            let own = sessions
                .iter()
                .filter(|s| s["conversation"] == c["conversation_id"])
                .fold((0, 0, 0, 0), |a, s| add(a, tokens_of(&s["usage"])));
            assert_eq!(
                tokens_of(&c["usage"]),
                own,
                "ls {name} of {}",
                path.display()
            );
            // `resume` sums the conversation's line: its first-parent chain.
            let chain = json(&ok(&store, &["log", "--first-parent", "--json", name]));
            let line = chain
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["conversation"] == c["conversation_id"])
                .fold((0, 0, 0, 0), |a, s| add(a, tokens_of(&s["usage"])));
            let resumed = json(&ok(&store, &["resume", "--json", name]));
            assert_eq!(
                tokens_of(&resumed["summary"]["usage"]),
                line,
                "resume {name}"
            );
            // `show` prints a session's own usage.
            let head = c["head"].as_str().unwrap();
            let s = sessions.iter().find(|s| s["id"] == head).unwrap();
            let shown = ok(&store, &["show", head]).stdout;
            let total = tokens_of(&s["usage"]).2;
            if total > 0 {
                assert!(
                    shown.contains(&format!("Usage:        {total} tokens")),
                    "{shown}"
                );
            }
        }
        if want.2 > 0 {
            nonzero += 1;
        }
    }
    if !files.is_empty() {
        assert!(nonzero >= 10, "only {nonzero} files with tokens");
    }
}

/// `path` cut to its first `len` bytes, written as `dir/<its name>`.
fn write_prefix(dir: &Path, path: &Path, bytes: &[u8], len: usize) -> PathBuf {
    let out = dir.join(path.file_name().unwrap());
    std::fs::write(&out, &bytes[..len]).unwrap();
    out
}

/// Refs, the ids of every session they reach, and the conversations as
/// `ls --json` shows them (records, counts, usage).
fn state<T: Target + ?Sized>(store: &T) -> (Vec<(String, String)>, BTreeSet<String>, Value) {
    let refs = json(&ok(store, &["for-each-ref", "--json"]));
    let refs = refs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["ref"].as_str().unwrap().to_owned(),
                r["target"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let log = json(&ok(store, &["log", "--all", "--json"]));
    let ids = log
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    let mut ls = json(&ok(store, &["ls", "--all", "--json"]));
    // A source without times (SWE-agent, OpenAI chat) is active as of the
    // import that last touched it: that time is the import's, not the file's.
    for c in ls.as_array_mut().unwrap() {
        if c["created_at"] == 0 {
            c["last_activity"] = Value::Null;
        }
    }
    (refs, ids, ls)
}

/// Every move the ref log holds goes from a session to one descending
/// from it; nothing was deleted.
fn assert_fast_forwards<T: Target + ?Sized>(store: &T, what: &str) {
    let log = json(&ok(store, &["reflog", "--json"]));
    for e in log.as_array().unwrap() {
        let (old, new) = (&e["old"], &e["new"]);
        assert!(!new.is_null(), "{what}: {e} deletes a ref");
        if let (Some(old), Some(new)) = (old.as_str(), new.as_str()) {
            let r = sessctl(store, &["merge-base", "--is-ancestor", old, new]);
            assert_eq!(r.code, 0, "{what}: {e} is not a fast-forward");
        }
    }
}

fn every_prefix_of_a_growing_file_lands_as_the_whole_file_does(s: &TestStore) {
    for (format, path) in real_files() {
        let bytes = std::fs::read(&path).unwrap();
        let what = path.display().to_string();
        let dir = tempfile::tempdir().unwrap();
        // The store the file grows into is on the test's backend; the one
        // it is compared with is local.
        let whole_store = dir.path().join("whole");
        let live_store = s.another();
        ok(&whole_store, &["init"]);
        let whole_dir = dir.path().join("w");
        let live_dir = dir.path().join("l");
        std::fs::create_dir(&whole_dir).unwrap();
        std::fs::create_dir(&live_dir).unwrap();
        let f = write_prefix(&whole_dir, &path, &bytes, bytes.len());
        ok(
            &whole_store,
            &["import", "--from", format, f.to_str().unwrap()],
        );
        // Cut at every line end (a trajectory is one document: only at
        // its end), and once in the middle of a line. On a remote store at
        // every fourth line end: each import there is a process that reads
        // the store from PostgreSQL and S3, and every line end of every
        // file would add minutes to the suite.
        let stride = if s.is_remote() { 4 } else { 1 };
        let ends: Vec<usize> = if format == "swe-agent" {
            vec![bytes.len()]
        } else {
            (0..bytes.len())
                .filter(|&i| bytes[i] == b'\n')
                .map(|i| i + 1)
                .collect()
        };
        let mid = ends.get(ends.len() / 2).map_or(bytes.len() / 2, |&c| c - 1) / 2 + 1;
        let mid = (mid..bytes.len())
            .find(|&i| bytes[i - 1] != b'\n' && bytes[i] != b'\n')
            .unwrap();
        let mut cuts: Vec<usize> = ends.into_iter().step_by(stride).collect();
        cuts.push(mid);
        cuts.sort_unstable();
        if cuts.last() != Some(&bytes.len()) {
            cuts.push(bytes.len());
        }
        for len in cuts {
            let f = write_prefix(&live_dir, &path, &bytes, len);
            let r = sessctl(&live_store, &["import", f.to_str().unwrap()]);
            assert_eq!(r.code, 0, "{what} cut at {len}: {}", r.stderr);
            assert!(!r.stderr.contains("sessctl:"), "{}", r.stderr);
            if len == mid {
                assert!(
                    r.stderr
                        .contains(&format!("{}: last line not written yet", f.display())),
                    "{what} cut at {len}: {}",
                    r.stderr
                );
            }
        }
        assert_eq!(state(&live_store), state(&whole_store), "{what}");
        assert_fast_forwards(&live_store, &what);
    }
}

/// The store `s`, and a directory with copies of the real files named.
fn store_and_copies<'a>(
    s: &'a TestStore,
    files: &[&str],
) -> Option<(PathBuf, &'a TestStore, Vec<PathBuf>)> {
    let src = data("")?;
    let mut copies = Vec::new();
    let dir = s.scratch();
    let into = dir.join("in");
    std::fs::create_dir(&into).unwrap();
    for f in files {
        let p = src.join(f);
        if !p.exists() {
            eprintln!("note: {} is absent; skipping", p.display());
            return None;
        }
        let to = into.join(p.file_name().unwrap());
        std::fs::copy(&p, &to).unwrap();
        copies.push(to);
    }
    Some((dir, s, copies))
}

const CODEX: &str = "codex/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl";
const CLAUDE: &str = "claude-code/session-9eda1058.jsonl";
const SWE: &str = "swe-agent/trajectories/demonstrations/function_calling_simple.traj";

fn formats_are_detected_and_a_wrong_from_is_one_clear_error(s: &TestStore) {
    let Some((_d, store, files)) = store_and_copies(s, &[CODEX, CLAUDE, SWE]) else {
        return;
    };
    let p: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    // The wrong --from: one line naming the file and what it is; nothing written.
    let r = sessctl(&store, &["import", "--from", "claude-code", p[0]]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "sessctl: {}: not a claude-code file: it looks like a Codex rollout (codex)\n",
            p[0]
        )
    );
    assert_eq!(r.stdout, "");
    let r = sessctl(&store, &["import", "--from", "codex", p[2]]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .ends_with("not a codex file: it looks like a SWE-agent trajectory (swe-agent)\n"),
        "{}",
        r.stderr
    );
    assert_eq!(ok(&store, &["ls"]).stdout, "");
    // A file in no format: refused, saying what it looks like.
    let other = files[0].with_file_name("notes.jsonl");
    std::fs::write(&other, "{\"level\":\"info\",\"msg\":\"started\"}\n").unwrap();
    let r = sessctl(&store, &["import", other.to_str().unwrap()]);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (
            1,
            format!(
                "sessctl: {}: not a format sessctl imports: it looks like JSON objects \
                 with keys level, msg\n",
                other.display()
            )
            .as_str()
        )
    );
    let text = files[0].with_file_name("notes.txt");
    std::fs::write(&text, "hello\n").unwrap();
    let r = sessctl(
        &store,
        &["import", "--from", "openai", text.to_str().unwrap()],
    );
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.ends_with("it looks like text, not JSON\n"),
        "{}",
        r.stderr
    );
    std::fs::remove_file(&other).unwrap();
    std::fs::remove_file(&text).unwrap();
    // Without --from, each file (and each file of a directory) in its own format.
    let r = ok(&store, &["import", "--json", p[0], p[1], p[2]]);
    let v = json(&r);
    assert_eq!(
        (v["files"].as_u64(), v["conversations"].as_u64()),
        (Some(3), Some(3))
    );
    let ls = ok(&store, &["ls"]).stdout;
    for name in [
        "codex-019e1625-789",
        "cc-9eda1058-970",
        "swe-function_calling_simple",
    ] {
        assert!(ls.contains(name), "{ls}");
    }
    let dir = files[0].parent().unwrap().to_str().unwrap();
    let again = ok(&store, &["import", dir]);
    assert!(again.stdout.contains("0 refs moved"), "{}", again.stdout);
    // Found in a directory, a file in no format is skipped and listed (exit
    // 1); the others are imported.
    let fresh = s.another();
    let notes = files[0].with_file_name("settings.json");
    std::fs::write(&notes, "{\"theme\": \"dark\"}\n").unwrap();
    let r = sessctl(&fresh, &["import", dir]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "{}: not a format sessctl imports: it looks like JSON objects with keys theme\n",
            notes.display()
        )
    );
    assert!(r.stdout.ends_with("; 1 lines skipped\n"), "{}", r.stdout);
    assert_eq!(ok(&fresh, &["ls"]).stdout.lines().count(), 4);
}

fn skipped_lines_name_their_line_and_say_invalid_json_once(s: &TestStore) {
    let Some((_d, store, files)) = store_and_copies(s, &[CLAUDE, SWE]) else {
        return;
    };
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[4] = "{\"type\": \"user\", \"oops";
    std::fs::write(&files[0], lines.join("\n") + "\n").unwrap();
    let r = sessctl(&store, &["import", files[0].to_str().unwrap()]);
    assert_eq!(r.code, 1);
    let first = r.stderr.lines().next().unwrap();
    assert!(
        first.starts_with(&format!(
            "{}:5: invalid JSON: EOF while parsing",
            files[0].display()
        )),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.matches("invalid JSON").count(), 1, "{}", r.stderr);
    // A trajectory is one document: its error names the file alone (no `:0`).
    let traj = std::fs::read_to_string(&files[1]).unwrap();
    std::fs::write(&files[1], traj.replacen('{', "{\"a\": 1, \"a\": 2, ", 1)).unwrap();
    let r = sessctl(&store, &["import", files[1].to_str().unwrap()]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr,
        format!(
            "{}: invalid JSON: duplicate object key \"a\" at line 1 column 12\n",
            files[1].display()
        )
    );
}

fn a_half_written_last_line_is_left_for_later_and_reported_once(s: &TestStore) {
    let Some((_d, store, files)) = store_and_copies(s, &[CODEX]) else {
        return;
    };
    let whole = std::fs::read(&files[0]).unwrap();
    let cut = whole.len() - 40;
    std::fs::write(&files[0], &whole[..cut]).unwrap();
    let f = files[0].to_str().unwrap();
    let r = sessctl(&store, &["import", f]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stderr.matches("last line not written yet").count(),
        1,
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("0 lines skipped\n"), "{}", r.stdout);
    // Its turn has not ended either: held back, and imported once it has.
    assert!(r.stderr.contains("messages held back"), "{}", r.stderr);
    std::fs::write(&files[0], &whole).unwrap();
    let r = sessctl(&store, &["import", f]);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert_fast_forwards(&store, f);
}

fn commit_usage_takes_anthropic_names(store: &TestStore) {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.json");
    std::fs::write(&m, r#"[{"role": "user", "content": "hi"}]"#).unwrap();
    let m = m.to_str().unwrap();
    let anthropic = r#"{"input_tokens": 3, "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 20, "output_tokens": 7,
        "cache_creation": {"ephemeral_5m_input_tokens": 100}, "service_tier": "standard"}"#;
    ok(
        &store,
        &[
            "commit",
            "--new",
            "a",
            "--messages",
            m,
            "--usage",
            anthropic,
        ],
    );
    let show = ok(&store, &["show", "a"]).stdout;
    assert!(
        show.contains("Usage:        130 tokens (123 prompt, 7 completion)"),
        "{show}"
    );
    assert!(
        show.contains(r#"usage = {"cache_read_tokens":20,"cache_write_tokens":100}"#),
        "{show}"
    );
    ok(
        &store,
        &[
            "commit",
            "a",
            "--messages",
            m,
            "--usage",
            r#"{"prompt_tokens": 5, "completion_tokens": 2, "requests": 1}"#,
        ],
    );
    let ls = json(&ok(&store, &["ls", "--json"]));
    assert_eq!(tokens_of(&ls[0]["usage"]), (128, 9, 137, 1));
    let r = sessctl(
        &store,
        &[
            "commit",
            "a",
            "--messages",
            m,
            "--usage",
            r#"{"input_tokens": 1, "prompt_tokens": 1}"#,
        ],
    );
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.starts_with("sessctl: --usage: give prompt_tokens"),
        "{}",
        r.stderr
    );
}

/// The head of `name`, or `None`.
fn head<T: Target + ?Sized>(store: &T, name: &str) -> Option<String> {
    let r = sessctl(store, &["rev-parse", name]);
    (r.code == 0).then(|| r.stdout.trim().to_owned())
}

fn a_conversation_continued_here_keeps_its_sessions_and_the_import_follows_name_imported(
    s: &TestStore,
) {
    let Some((_d, store, files)) = store_and_copies(
        s,
        &[
            "claude-code/claude/incremental-simple/turn-1.jsonl",
            "claude-code/claude/incremental-simple/turn-2.jsonl",
        ],
    ) else {
        return;
    };
    // The same session read twice, as a live file: turn-1 then turn-2.
    let live = files[0].with_file_name("live.jsonl");
    std::fs::copy(&files[0], &live).unwrap();
    let f = live.to_str().unwrap();
    ok(&store, &["import", f]);
    let name = "cc-3fb74381-1bf";
    let imported = head(&store, name).unwrap();
    let m = live.with_file_name("m.json");
    std::fs::write(&m, r#"[{"role": "user", "content": "and locally"}]"#).unwrap();
    ok(&store, &["commit", name, "--messages", m.to_str().unwrap()]);
    let mine = head(&store, name).unwrap();
    std::fs::copy(&files[1], &live).unwrap();
    let r = ok(&store, &["import", f]);
    assert_eq!(
        r.stderr,
        format!(
            "{name} holds sessions this import did not write (a local commit, fork or \
             compaction): it stays as it is, and the import follows {name}.imported\n"
        )
    );
    assert_eq!(head(&store, name).unwrap(), mine);
    let alt = head(&store, &format!("{name}.imported")).unwrap();
    let anc = sessctl(&store, &["merge-base", "--is-ancestor", &imported, &alt]);
    assert_eq!(anc.code, 0);
    // The whole file lands there as it would on a store of its own.
    let (_d2, fresh) = support::new_store();
    ok(&fresh, &["import", f]);
    assert_eq!(Some(alt), head(&fresh, name));
    // A second import: nothing to say, nothing to do.
    let again = ok(&store, &["import", f]);
    assert_eq!(again.stderr, "");
    assert!(again.stdout.contains("0 refs moved"), "{}", again.stdout);
    assert_fast_forwards(&store, f);
}

/// A conversation the user renamed goes on growing under its new name, by
/// fast-forwards, as it would have under the old one.
fn a_renamed_conversation_is_followed_under_its_new_name(s: &TestStore) {
    let Some((_d, store, files)) = store_and_copies(s, &[CLAUDE]) else {
        return;
    };
    let bytes = std::fs::read(&files[0]).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let cut: usize = text.lines().take(29).map(|l| l.len() + 1).sum();
    let dir = files[0].parent().unwrap().join("live");
    std::fs::create_dir(&dir).unwrap();
    let live = write_prefix(&dir, &files[0], &bytes, cut);
    let f = live.to_str().unwrap();
    ok(&store, &["import", f]);
    let before = head(&store, "cc-9eda1058-970").unwrap();
    ok(&store, &["rename", "cc-9eda1058-970", "mywork"]);
    write_prefix(&dir, &files[0], &bytes, bytes.len());
    let r = ok(&store, &["import", f]);
    assert_eq!(r.stderr, "");
    assert!(head(&store, "cc-9eda1058-970").is_none());
    let after = head(&store, "mywork").unwrap();
    assert_ne!(before, after);
    let anc = sessctl(&store, &["merge-base", "--is-ancestor", &before, &after]);
    assert_eq!(anc.code, 0);
    // What a store of its own makes of the whole file.
    let (_d2, fresh) = support::new_store();
    ok(&fresh, &["import", f]);
    assert_eq!(Some(after), head(&fresh, "cc-9eda1058-970"));
}

fn archived_and_removed_conversations_stay_so(s: &TestStore) {
    let Some((_d, store, files)) = store_and_copies(s, &[CLAUDE, CODEX]) else {
        return;
    };
    let (cc, codex) = (files[0].to_str().unwrap(), files[1].to_str().unwrap());
    ok(&store, &["import", cc, codex]);
    ok(&store, &["archive", "cc-9eda1058-970"]);
    ok(&store, &["rm", "codex-019e1625-789"]);
    let r = ok(&store, &["import", cc, codex]);
    assert_eq!(
        r.stderr,
        "cc-9eda1058-970 was archived: the import leaves it so\n\
         codex-019e1625-789 was removed: the import leaves it so\n"
    );
    assert!(r.stdout.contains("0 refs moved"), "{}", r.stdout);
    assert_eq!(ok(&store, &["ls"]).stdout, "");
    assert!(head(&store, "codex-019e1625-789").is_none());
    // Unarchived, it is followed again.
    ok(&store, &["unarchive", "cc-9eda1058-970"]);
    let r = ok(&store, &["import", cc]);
    assert_eq!(r.stderr, "");
}

fn imports_of_one_growing_file_at_once_all_land(s: &TestStore) {
    let Some((_d, store, files)) = store_and_copies(s, &[CLAUDE]) else {
        return;
    };
    let whole = std::fs::read(&files[0]).unwrap();
    let (_d2, reference) = support::new_store();
    ok(&reference, &["import", files[0].to_str().unwrap()]);
    // Four hooks fire at once on each of a few snapshots of the file.
    let ends: Vec<usize> = (0..whole.len())
        .filter(|&i| whole[i] == b'\n')
        .map(|i| i + 1)
        .collect();
    for &len in &[ends[ends.len() / 3], ends[2 * ends.len() / 3], whole.len()] {
        std::fs::write(&files[0], &whole[..len]).unwrap();
        let children: Vec<_> = (0..4)
            .map(|_| {
                std::process::Command::new(env!("CARGO_BIN_EXE_sessctl"))
                    .arg("--store")
                    .arg(store.arg())
                    .args(["import", files[0].to_str().unwrap()])
                    .env_remove("SESSCTL_STORE")
                    .envs(store.env())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    assert_eq!(state(&store), state(&reference));
    assert_fast_forwards(&store, "concurrent imports");
}

fn an_older_copy_of_a_file_moves_nothing_back(s: &TestStore) {
    let Some((_d, store, files)) = store_and_copies(
        s,
        &[
            "claude-code/claude/incremental-simple/turn-1.jsonl",
            "claude-code/claude/incremental-simple/turn-2.jsonl",
        ],
    ) else {
        return;
    };
    let live = files[0].with_file_name("live.jsonl");
    let f = live.to_str().unwrap();
    std::fs::copy(&files[1], &live).unwrap();
    ok(&store, &["import", f]);
    let before = state(&store);
    std::fs::copy(&files[0], &live).unwrap();
    let r = ok(&store, &["import", f]);
    assert_eq!(r.stderr, "");
    assert!(r.stdout.contains("0 refs moved"), "{}", r.stdout);
    assert_eq!(state(&store), before);
}

fn a_conversation_compacted_here_keeps_its_compaction(s: &TestStore) {
    let Some((_d, store, files)) = store_and_copies(
        s,
        &[
            "claude-code/claude/incremental-simple/turn-1.jsonl",
            "claude-code/claude/incremental-simple/turn-2.jsonl",
        ],
    ) else {
        return;
    };
    let live = files[0].with_file_name("live.jsonl");
    let f = live.to_str().unwrap();
    std::fs::copy(&files[0], &live).unwrap();
    ok(&store, &["import", "--finished", f]);
    let name = "cc-3fb74381-1bf";
    ok(
        &store,
        &[
            "compact",
            name,
            "--keep-last",
            "1",
            "--summarizer",
            r#"cat >/dev/null; echo '[{"role": "user", "content": "summary"}]'"#,
        ],
    );
    let compacted = head(&store, name).unwrap();
    std::fs::copy(&files[1], &live).unwrap();
    let r = ok(&store, &["import", f]);
    assert!(
        r.stderr
            .contains(&format!("the import follows {name}.imported")),
        "{}",
        r.stderr
    );
    assert_eq!(head(&store, name).unwrap(), compacted);
    let (_d2, fresh) = support::new_store();
    ok(&fresh, &["import", f]);
    assert_eq!(
        head(&store, &format!("{name}.imported")),
        head(&fresh, name)
    );
    assert_fast_forwards(&store, f);
}

/// A line of a made-up Claude Code session: a user prompt, or an answer
/// whose `end_turn` ends its turn.
fn claude_line(uuid: &str, parent: Option<&str>, text: &str) -> String {
    let user = uuid.starts_with('u');
    let message = if user {
        serde_json::json!({"role": "user", "content": text})
    } else {
        serde_json::json!({"id": format!("msg_{uuid}"), "type": "message", "role": "assistant",
            "model": "m", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1}})
    };
    let line = serde_json::json!({
        "uuid": uuid, "parentUuid": parent, "type": if user { "user" } else { "assistant" },
        "sessionId": "11111111-2222-3333-4444-555555555555", "isSidechain": false,
        "userType": "external", "cwd": "/x", "version": "2.1.4",
        "timestamp": "2026-01-01T00:00:00Z", "message": message,
    });
    format!("{line}\n")
}

/// `sessctl import FLAGS... FILE`, which must succeed.
fn import<T: Target + ?Sized>(store: &T, flags: &[&str], file: &str) -> Run {
    let args: Vec<&str> = ["import"]
        .iter()
        .chain(flags)
        .chain([&file])
        .copied()
        .collect();
    ok(store, &args)
}

/// A transcript rewritten in place no longer continues what an import
/// wrote: with or without `--finished`, its conversation stays where it is
/// (no move that is not a fast-forward), the rewritten one lands on
/// `<name>.imported` as on a store of its own, and stderr says so.
fn a_rewritten_transcript_moves_nothing_back_with_or_without_finished(s: &TestStore) {
    let name = "cc-11111111-222";
    let first =
        claude_line("u1", None, "first question") + &claude_line("a1", Some("u1"), "first answer");
    let rewritten = claude_line("u9", None, "different question")
        + &claude_line("a9", Some("u9"), "different answer");
    for finished in [&[][..], &["--finished"][..]] {
        let store = s.another();
        let dir = store.scratch().join("t");
        std::fs::create_dir_all(&dir).unwrap();
        let t = dir.join("s.jsonl");
        let f = t.to_str().unwrap();
        std::fs::write(&t, &first).unwrap();
        import(&store, finished, f);
        let before = head(&store, name).unwrap();
        std::fs::write(&t, &rewritten).unwrap();
        let r = import(&store, finished, f);
        assert_eq!(
            r.stderr,
            format!(
                "{name}: the transcript no longer continues what was imported before: it \
                 stays as it is, and the import follows {name}.imported\n"
            ),
            "{finished:?}"
        );
        assert_eq!(head(&store, name), Some(before), "{finished:?}");
        let (_d2, fresh) = support::new_store();
        import(&fresh, finished, f);
        assert_eq!(
            head(&store, &format!("{name}.imported")),
            head(&fresh, name),
            "{finished:?}"
        );
        assert_fast_forwards(&store, f);
        // Again: nothing to say, nothing to do.
        let again = import(&store, finished, f);
        assert_eq!(again.stderr, "", "{finished:?}");
        assert!(again.stdout.contains("0 refs moved"), "{}", again.stdout);
    }
}
