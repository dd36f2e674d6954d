//! The fuzz targets for foreign bytes (bundles; Claude Code, Codex, OpenAI
//! chat and SWE-agent files) on the stable toolchain: every committed seed
//! and crash artifact under `fuzz/seeds/`, every real file in
//! `../shared/data`, random bytes, and mutations of valid inputs go through
//! the same entry points the cargo-fuzz targets run.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{json, Value};
use sessctl_store::bundle::{Bundle, Selection};
use sessctl_store::fuzzing;
use sessctl_store::{Cut, Durability, ForkOptions, Messages, RefName, Store, Turn};

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 5] = [
    ("bundle_decode", fuzzing::bundle_decode),
    ("import_claude_code", fuzzing::import_claude_code),
    ("import_codex", fuzzing::import_codex),
    ("import_openai", fuzzing::import_openai),
    ("import_swe_agent", fuzzing::import_swe_agent),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn seed_dir(target: &str) -> PathBuf {
    repo().join("fuzz/seeds").join(target)
}

/// Files under `dir` (recursively) whose names end with one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, exts, out);
        } else if exts.iter().any(|x| p.to_string_lossy().ends_with(x)) {
            out.push(p);
        }
    }
    out.sort();
}

/// The real files in ../shared/data a target reads; none (with a note)
/// when the folder is not there.
fn real_files(target: &str) -> Vec<PathBuf> {
    let data = repo().join("../shared/data");
    if !data.exists() {
        eprintln!("note: {} is absent; real files skipped", data.display());
        return Vec::new();
    }
    let mut out = Vec::new();
    match target {
        "import_claude_code" => files(&data.join("claude-code"), &[".jsonl"], &mut out),
        "import_codex" => files(&data.join("codex"), &[".jsonl"], &mut out),
        "import_swe_agent" => files(&data.join("swe-agent"), &[".traj"], &mut out),
        _ => {}
    }
    out
}

/// Bundles of the spec's example objects and of a real store with a fork,
/// as fuzz inputs (selector byte 0: the file's own checksum).
fn bundles() -> &'static [Vec<u8>] {
    static B: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    B.get_or_init(|| {
        let e = support::examples();
        let example = Bundle::new(
            vec![(RefName::conversation("greeting").unwrap(), e.cont.id())],
            vec![],
            vec![],
            vec![e.hello, e.root, e.reply, e.cont],
        );
        let store = Store::in_memory().unwrap();
        let turn = |m: Value| Turn {
            messages: Messages::Added(vec![m]),
            ..Turn::default()
        };
        let sync = Durability::NoSync;
        store
            .create(
                Some("fix"),
                turn(json!({"role": "user", "content": "hi"})),
                sync,
            )
            .unwrap();
        let reply = store
            .commit(
                "fix",
                None,
                turn(json!({"role": "assistant", "content": "yo"})),
                sync,
            )
            .unwrap();
        store
            .fork(
                reply,
                ForkOptions {
                    name: Some("retry".into()),
                    cut: Some(Cut::AtMessage(1)),
                    turn: Some(turn(json!({"role": "user", "content": "again"}))),
                },
                sync,
            )
            .unwrap();
        let real = Bundle::create(&store, &Selection::All, &[]).unwrap();
        [example, real]
            .iter()
            .map(|b| [&[0u8][..], &b.encode()].concat())
            .collect()
    })
}

/// Small self-made files of each import format.
fn import_seeds(target: &str) -> Vec<Vec<u8>> {
    let lines = |v: &[Value]| {
        v.iter()
            .map(|l| l.to_string() + "\n")
            .collect::<String>()
            .into_bytes()
    };
    match target {
        "import_claude_code" => vec![lines(&[
            json!({"type": "summary", "summary": "Fix the test", "leafUuid": "b"}),
            json!({"type": "user", "uuid": "a", "parentUuid": null, "sessionId": "s",
                   "timestamp": "2026-01-01T00:00:00Z",
                   "message": {"role": "user", "content": "fix the flaky test"}}),
            json!({"type": "assistant", "uuid": "b", "parentUuid": "a", "sessionId": "s",
                   "timestamp": "2026-01-01T00:00:01Z",
                   "message": {"id": "m1", "role": "assistant", "content": [
                       {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}}),
            json!({"type": "user", "uuid": "c", "parentUuid": "b", "sessionId": "s",
                   "timestamp": "2026-01-01T00:00:02Z",
                   "message": {"role": "user", "content": [
                       {"type": "tool_result", "tool_use_id": "t1", "content": "a.rs"}]}}),
        ])],
        "import_codex" => vec![lines(&[
            json!({"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta",
                   "payload": {"id": "x1", "timestamp": "2026-01-01T00:00:00Z", "cwd": "/src"}}),
            json!({"timestamp": "2026-01-01T00:00:01Z", "type": "response_item",
                   "payload": {"type": "message", "role": "user",
                               "content": [{"type": "input_text", "text": "hi"}]}}),
            json!({"timestamp": "2026-01-01T00:00:02Z", "type": "response_item",
                   "payload": {"type": "function_call", "name": "shell", "call_id": "c1",
                               "arguments": "{}"}}),
            json!({"timestamp": "2026-01-01T00:00:03Z", "type": "response_item",
                   "payload": {"type": "function_call_output", "call_id": "c1", "output": "ok"}}),
        ])],
        "import_openai" => vec![
            serde_json::to_vec(&json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "t", "type": "function",
                    "function": {"name": "ls", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "t", "content": "a.rs"}
            ]))
            .unwrap(),
            lines(&[json!({"messages": [{"role": "user", "content": "one"}]})]),
        ],
        "import_swe_agent" => vec![serde_json::to_vec(&json!({"history": [
            {"role": "system", "content": "you are an agent"},
            {"role": "user", "content": "fix it"},
            {"role": "assistant", "content": "ok", "thought": "look", "action": "ls"}
        ], "info": {"model_stats": {"tokens_sent": 10, "tokens_received": 2}}}))
        .unwrap()],
        _ => bundles().to_vec(),
    }
}

/// Writes the committed seeds:
/// `cargo test -p sessctl-store --test fuzz_foreign -- --ignored write_foreign_seeds`.
#[test]
#[ignore = "writes fuzz/seeds; run by hand when the seeds should change"]
fn write_foreign_seeds() {
    for (target, _) in TARGETS {
        let dir = seed_dir(target);
        fs::create_dir_all(&dir).unwrap();
        for (k, bytes) in import_seeds(target).iter().enumerate() {
            fs::write(dir.join(format!("seed-{k}")), bytes).unwrap();
        }
    }
}

/// Every committed seed and artifact, and every real file, through its
/// target. The real files and the seeds are valid, so the import oracles
/// run whole on them.
#[test]
fn seeds_artifacts_and_real_files_replay() {
    for (target, run) in TARGETS {
        let mut inputs = Vec::new();
        files(&seed_dir(target), &[""], &mut inputs);
        assert!(!inputs.is_empty(), "no committed seeds for {target}");
        let real = real_files(target);
        if target != "bundle_decode"
            && target != "import_openai"
            && repo().join("../shared/data").exists()
        {
            assert!(!real.is_empty(), "no real files for {target}");
        }
        inputs.extend(real);
        for p in &inputs {
            run(&fs::read(p).unwrap());
        }
    }
}

/// A mutation that keeps a text format's shape: lines dropped, duplicated,
/// swapped or cut short, or a byte changed.
#[derive(Debug, Clone)]
enum Edit {
    DropLine(Index),
    DuplicateLine(Index),
    SwapLines(Index, Index),
    CutLine(Index, Index),
    SetByte(Index, u8),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<Index>().prop_map(Edit::DropLine),
        any::<Index>().prop_map(Edit::DuplicateLine),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Edit::CutLine(a, b)),
        (any::<Index>(), any::<u8>()).prop_map(|(a, b)| Edit::SetByte(a, b)),
    ]
}

fn apply(bytes: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    for e in edits {
        let n = lines.len();
        match e {
            Edit::DropLine(i) if n > 1 => {
                lines.remove(i.index(n));
            }
            Edit::DuplicateLine(i) => {
                let l = lines[i.index(n)].clone();
                lines.insert(i.index(n), l);
            }
            Edit::SwapLines(a, b) => lines.swap(a.index(n), b.index(n)),
            Edit::CutLine(i, at) => {
                let l = &mut lines[i.index(n)];
                let keep = at.index(l.len() + 1);
                l.truncate(keep);
            }
            Edit::SetByte(i, v) => {
                let l = &mut lines[i.index(n)];
                if !l.is_empty() {
                    let k = i.index(l.len());
                    l[k] = *v;
                }
            }
            Edit::DropLine(_) => {}
        }
    }
    lines.join(&b'\n')
}

fn cases(n: u32) -> ProptestConfig {
    let scale = std::env::var("SESSCTL_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1);
    ProptestConfig {
        cases: n.saturating_mul(scale),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(96))]

    #[test]
    fn random_bytes_through_every_target(
        t in 0..TARGETS.len(),
        data in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        (TARGETS[t].1)(&data);
    }

    #[test]
    fn edited_imports(
        t in 1..TARGETS.len(),
        k in any::<Index>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let (target, run) = TARGETS[t];
        let seeds = import_seeds(target);
        run(&apply(&seeds[k.index(seeds.len())], &edits));
    }

    /// Bytes changed behind a fixed-up checksum (selector 1), to reach the
    /// decoder's structure and blocks; or in front of it (selector 0).
    #[test]
    fn edited_bundles(
        k in any::<Index>(),
        fix in any::<bool>(),
        flips in prop::collection::vec((any::<Index>(), any::<u8>()), 1..4),
    ) {
        let b = bundles();
        let mut data = b[k.index(b.len())].clone();
        data[0] = u8::from(fix);
        for (i, v) in &flips {
            let at = 1 + i.index(data.len() - 1);
            data[at] ^= v | 1;
        }
        fuzzing::bundle_decode(&data);
    }
}
