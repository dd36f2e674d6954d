//! End to end: what `sessctl import` makes of real session files
//! (`../shared/data`) as their agents write them: token usage carried into
//! run summaries, format detection, files read while they grow (every
//! prefix lands as the whole file does, every ref move a fast-forward),
//! conversations the user continued, archived or removed.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;
use support::Run;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data");

fn sessctl(store: &Path, args: &[&str]) -> Run {
    support::sessctl(store, args, None)
}

fn ok(store: &Path, args: &[&str]) -> Run {
    let r = sessctl(store, args);
    assert_eq!(r.code, 0, "sessctl {args:?}: {}{}", r.stdout, r.stderr);
    r
}

/// The data folder `sub`, or `None` (with a note) when it is absent.
fn data(sub: &str) -> Option<PathBuf> {
    let p = Path::new(DATA).join(sub);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("note: {} is absent; skipping", p.display());
        None
    }
}

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

#[test]
fn token_totals_equal_the_sources_in_ls_log_and_show() {
    let files = real_files();
    let mut nonzero = 0;
    for (format, path) in &files {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("s");
        ok(&store, &["init"]);
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

/// Refs and the ids of every session they reach.
fn state(store: &Path) -> (Vec<(String, String)>, BTreeSet<String>) {
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
    (refs, ids)
}

/// Every move the ref log holds goes from a session to one descending
/// from it; nothing was deleted.
fn assert_fast_forwards(store: &Path, what: &str) {
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

#[test]
fn every_prefix_of_a_growing_file_lands_as_the_whole_file_does() {
    for (format, path) in real_files() {
        let bytes = std::fs::read(&path).unwrap();
        let what = path.display().to_string();
        let dir = tempfile::tempdir().unwrap();
        let whole_store = dir.path().join("whole");
        let live_store = dir.path().join("live");
        ok(&whole_store, &["init"]);
        ok(&live_store, &["init"]);
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
        // its end), and once in the middle of a line.
        let mut cuts: Vec<usize> = if format == "swe-agent" {
            vec![bytes.len()]
        } else {
            (0..bytes.len())
                .filter(|&i| bytes[i] == b'\n')
                .map(|i| i + 1)
                .collect()
        };
        let mid = cuts.get(cuts.len() / 2).map_or(bytes.len() / 2, |&c| c - 1) / 2 + 1;
        let mid = (mid..bytes.len())
            .find(|&i| bytes[i - 1] != b'\n' && bytes[i] != b'\n')
            .unwrap();
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
