//! The foreign-input entry points of `sessctl_store::fuzzing` (bundles and
//! the four importers) on the stable toolchain: every committed seed and
//! regression input under `fuzz/seeds/`, every real session file in
//! `../shared/data` (skipped with a note when the folder is absent), the
//! bundles the project's own tests build, then proptest random bytes and
//! mutations of all of them. Bounded to a few seconds in debug;
//! `SESSCTL_FUZZ_SCALE=N` runs N times as many random cases.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/mutation.rs"]
mod mutation;
mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use mutation::{apply_edit, config, edit, overwrite, Edit};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::json;
use sessctl_store::bundle::{Bundle, Selection};
use sessctl_store::fuzzing::{
    self, BUNDLE_FIX_CHECKSUM, BUNDLE_FIX_IDS, IMPORT_FILE_SEPARATOR, OPENAI_WHOLE_FILE,
};
use sessctl_store::import::Format;
use sessctl_store::remote::apply;
use sessctl_store::{Durability, Messages, Store, Turn};

const TARGETS: [&str; 5] = [
    "bundle_decode",
    "import_claude_code",
    "import_codex",
    "import_openai",
    "import_swe_agent",
];

fn entry(target: &str) -> fn(&[u8]) {
    match target {
        "bundle_decode" => fuzzing::bundle_decode,
        "import_claude_code" => fuzzing::import_claude_code,
        "import_codex" => fuzzing::import_codex,
        "import_openai" => fuzzing::import_openai,
        "import_swe_agent" => fuzzing::import_swe_agent,
        _ => panic!("no target {target}"),
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The committed seeds and regression inputs of a target.
fn committed(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = root().join("fuzz/seeds").join(target);
    let mut out: Vec<(PathBuf, Vec<u8>)> = match fs::read_dir(&dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .map(|p| {
                let bytes = fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

/// `../shared/data`, or `None` with a note.
fn shared_data() -> Option<PathBuf> {
    let dir = root().join("../shared/data");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "note: {} is absent; real session files not replayed",
            dir.display()
        );
        None
    }
}

fn files_under(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, ext, out);
        } else if p.to_string_lossy().ends_with(ext) {
            out.push(p);
        }
    }
    out.sort();
}

/// The real files of an import target, one input each.
fn real_files(target: &str) -> Vec<PathBuf> {
    let Some(data) = shared_data() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match target {
        "import_claude_code" => files_under(&data.join("claude-code"), ".jsonl", &mut out),
        "import_codex" => files_under(&data.join("codex"), ".jsonl", &mut out),
        "import_swe_agent" => files_under(&data.join("swe-agent"), ".traj", &mut out),
        _ => {}
    }
    out
}

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

/// Bundles as the project writes them: the golden example of
/// objects-format.md, all of a store with a live and an archived
/// conversation, one with prerequisites (`--since`), and an empty one.
fn bundles() -> Vec<Bundle> {
    let golden = support::example_bundle();
    let s = Store::in_memory().unwrap();
    let (_, first) = s.create(Some("fix"), turn("a"), Durability::Sync).unwrap();
    s.commit("fix", None, turn("b"), Durability::Sync).unwrap();
    s.create(Some("old"), turn("c"), Durability::Sync).unwrap();
    s.archive("old", Durability::Sync).unwrap();
    let all = Bundle::create(&s, &Selection::All, &[]).unwrap();
    let since =
        Bundle::create(&s, &Selection::Revs(vec!["fix".into()]), &[first.to_hex()]).unwrap();
    assert!(!since.prerequisites.is_empty());
    vec![golden, all, since, Bundle::default()]
}

/// The same bundle with every block stored raw, the form the fuzzer can
/// mutate object by object (with [`BUNDLE_FIX_IDS`]).
fn with_raw_blocks(encoded: &[u8]) -> Vec<u8> {
    let mut pos = 8;
    let u16_at = |b: &[u8], p: usize| u16::from_le_bytes(b[p..p + 2].try_into().unwrap()) as usize;
    let u32_at = |b: &[u8], p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) as usize;
    let refs = u32_at(encoded, pos);
    pos += 4;
    for _ in 0..refs {
        pos += 2 + u16_at(encoded, pos) + 32;
    }
    let records = u32_at(encoded, pos);
    pos += 4;
    for _ in 0..records {
        pos += 2 + u16_at(encoded, pos);
        pos += 4 + u32_at(encoded, pos);
    }
    pos += 4 + 32 * u32_at(encoded, pos);
    pos += 8;
    let blocks = u32_at(encoded, pos);
    pos += 4;
    let mut out = encoded[..pos].to_vec();
    for _ in 0..blocks {
        let codec = encoded[pos];
        let stored = u32_at(encoded, pos + 1);
        let raw_len = u32_at(encoded, pos + 5);
        let data = &encoded[pos + 9..pos + 9 + stored];
        let raw = match codec {
            0 => data.to_vec(),
            _ => zstd::bulk::decompress(data, raw_len).unwrap(),
        };
        out.push(0);
        out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        out.extend_from_slice(&raw);
        pos += 9 + stored;
    }
    assert_eq!(pos, encoded.len() - 32);
    out.extend_from_slice(&[0; 32]);
    fuzzing::fix_trailing_checksum(&mut out);
    out
}

/// Inputs for `bundle_decode` made from [`bundles`]: each as written
/// (flags 0) and with raw blocks (flags asking for both fix-ups).
fn bundle_inputs() -> &'static Vec<Vec<u8>> {
    static INPUTS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    INPUTS.get_or_init(|| {
        let mut out = Vec::new();
        for b in bundles() {
            let bytes = b.encode();
            out.push([&[0u8][..], &bytes].concat());
            let raw = with_raw_blocks(&bytes);
            assert_eq!(Bundle::decode(&raw, Path::new("b")).unwrap(), b);
            out.push([&[BUNDLE_FIX_CHECKSUM | BUNDLE_FIX_IDS][..], &raw].concat());
        }
        out.extend(committed("bundle_decode").into_iter().map(|(_, b)| b));
        out
    })
}

/// Seeds to mutate for an import target: the committed ones, and the first
/// lines of each real file (whole files are replayed once, not mutated).
fn import_inputs(target: &str) -> &'static Vec<Vec<u8>> {
    static INPUTS: OnceLock<Vec<(String, Vec<Vec<u8>>)>> = OnceLock::new();
    let all = INPUTS.get_or_init(|| {
        TARGETS[1..]
            .iter()
            .map(|t| {
                let mut seeds: Vec<Vec<u8>> = committed(t).into_iter().map(|(_, b)| b).collect();
                for p in real_files(t) {
                    let text = fs::read(&p).unwrap();
                    if t == &"import_swe_agent" {
                        continue; // one JSON value: a prefix is not valid JSON
                    }
                    let head: Vec<u8> = text
                        .split(|&b| b == b'\n')
                        .take(12)
                        .flat_map(|l| l.iter().copied().chain([b'\n']))
                        .collect();
                    seeds.push(head);
                }
                (t.to_string(), seeds)
            })
            .collect()
    });
    &all.iter().find(|(t, _)| t == target).unwrap().1
}

#[test]
fn committed_seeds_and_artifacts_pass() {
    for target in TARGETS {
        let seeds = committed(target);
        assert!(!seeds.is_empty(), "no committed seeds for {target}");
        for (path, bytes) in seeds {
            eprintln!("{}", path.display());
            entry(target)(&bytes);
        }
    }
}

#[test]
fn real_session_files_pass() {
    for target in &TARGETS[1..] {
        for path in real_files(target) {
            entry(target)(&fs::read(&path).unwrap());
        }
    }
    // A session file and its subagents' files, read together as `import`
    // reads a directory.
    if let Some(data) = shared_data() {
        let dir = data.join("claude-code/claude/incremental-subagents");
        let mut files = Vec::new();
        files_under(&dir, ".jsonl", &mut files);
        let sources: Vec<_> = files
            .iter()
            .filter(|p| p.to_string_lossy().contains("turn-2"))
            .map(|p| sessctl_store::import::SourceFile {
                path: p.clone(),
                text: fs::read_to_string(p).unwrap(),
            })
            .collect();
        assert!(sources.len() >= 2);
        fuzzing::import_sources_checked(Format::ClaudeCode, &sources);
    }
}

/// The project's bundles pass every oracle, and reach the apply step:
/// the fix-ups do not turn them away at the door.
#[test]
fn project_bundles_pass_and_apply() {
    for input in bundle_inputs() {
        fuzzing::bundle_decode(input);
    }
    for b in bundles() {
        let store = Store::in_memory().unwrap();
        if b.problems(Some(&store)).unwrap().is_empty() {
            assert!(
                apply(&store, &b, "unbundle", "the bundle", Durability::NoSync)
                    .unwrap()
                    .applied
            );
        }
    }
}

/// The committed import seeds are not turned away at the door: they make
/// conversations and messages, and skip what they were written to skip.
#[test]
fn import_seeds_reach_the_store() {
    use sessctl_store::import::{import_sources, ImportOptions, ImportReport};
    let formats = [
        ("import_claude_code", Format::ClaudeCode),
        ("import_codex", Format::Codex),
        ("import_openai", Format::OpenAi),
        ("import_swe_agent", Format::SweAgent),
    ];
    for (target, format) in formats {
        for (path, bytes) in committed(target) {
            let store = Store::in_memory().unwrap();
            let files = fuzzing::import_files(format, &bytes);
            // Seeds are whole inputs: a turn they leave open is imported too.
            let opts = ImportOptions {
                no_sync: true,
                finished: true,
                ..ImportOptions::default()
            };
            let r = import_sources(&store, format, &files, &opts, ImportReport::default()).unwrap();
            eprintln!(
                "{}: {} files, {} conversations, {} sessions, {} messages, {} forks, {} compactions, {} skipped",
                path.display(),
                files.len(),
                r.conversations,
                r.sessions_total,
                r.messages,
                r.forks,
                r.compactions,
                r.skipped.len()
            );
            assert!(r.conversations > 0 && r.messages > 0, "{}", path.display());
        }
    }
}

/// An import input split into files at the separator, with the OpenAI
/// whole-file marker, names files as the target expects.
#[test]
fn import_inputs_split_into_named_files() {
    let data = [
        &b"a\n"[..],
        &[IMPORT_FILE_SEPARATOR],
        &[OPENAI_WHOLE_FILE],
        b"[]",
    ]
    .concat();
    let files = fuzzing::import_files(Format::OpenAi, &data);
    let names: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
    assert_eq!(names, ["d0/chat-0.jsonl", "d1/chat-0.json"]);
    assert_eq!(files[1].text, "[]");
}

/// One edit of a seed.
#[derive(Debug, Clone)]
enum Mutation {
    Edit(Edit),
    /// Overwrites 4 bytes with a large little-endian value.
    Large(Index, u32),
    /// Inserts a JSON-ish token: what text formats are made of.
    Token(Index, Index),
}

const TOKENS: &[&[u8]] = &[
    b"\n",
    b"\0",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b"\"",
    b":",
    b"null",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"\"uuid\":\"u1\",",
    b"\"parentUuid\":\"u2\",",
    b"\"type\":\"user\",",
    b"\"type\":\"assistant\",",
    b"\"isSidechain\":true,",
    b"\"agentId\":\"a1\",",
    b"\"sessionId\":\"x.fork-1\",",
    b"\"type\":\"response_item\",",
    b"\"type\":\"session_meta\",",
    b"\"forked_from_id\":\"019e1625-789d\",",
    b"\"messages\":[],",
    b"\"history\":[{}],",
    b"\"a\":1,\"a\":2,",
    b"\\ud800",
    b"\xff\xfe",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        8 => edit().prop_map(Mutation::Edit),
        1 => (any::<Index>(), prop_oneof![Just(u32::MAX), Just(1 << 31), any::<u32>()])
            .prop_map(|(i, v)| Mutation::Large(i, v)),
        2 => (any::<Index>(), any::<Index>()).prop_map(|(i, t)| Mutation::Token(i, t)),
    ]
}

fn apply_mutation(bytes: &mut Vec<u8>, m: &Mutation, others: &[Vec<u8>]) {
    let len = bytes.len();
    match m {
        Mutation::Edit(e) => {
            let others: Vec<&[u8]> = others.iter().map(Vec::as_slice).collect();
            apply_edit(bytes, e, &others);
        }
        Mutation::Large(i, v) if len > 0 => overwrite(bytes, i.index(len), &v.to_le_bytes()),
        Mutation::Token(i, t) => {
            let to = i.index(len + 1);
            bytes.splice(to..to, TOKENS[t.index(TOKENS.len())].iter().copied());
        }
        _ => {}
    }
}

fn mutated(seed: &[u8], ms: &[Mutation], others: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for m in ms {
        apply_mutation(&mut bytes, m, others);
    }
    bytes
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn random_bytes_pass(
        target in prop::sample::select(TARGETS.to_vec()),
        data in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        entry(target)(&data);
    }

    /// Random bytes behind a valid bundle header, resealed: the structure
    /// reader, not the magic check, gets them.
    #[test]
    fn random_bundle_bodies_pass(
        flags in any::<u8>(),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let input = [&[flags | BUNDLE_FIX_CHECKSUM][..], b"SBDL", &1u32.to_le_bytes(), &body, &[0; 32]].concat();
        fuzzing::bundle_decode(&input);
    }

    #[test]
    fn mutated_bundles_pass(
        which in any::<Index>(),
        flags in 0u8..4,
        ms in prop::collection::vec(mutation(), 1..4),
    ) {
        let inputs = bundle_inputs();
        let seed = &inputs[which.index(inputs.len())];
        let mut data = mutated(&seed[1..], &ms, inputs);
        data.insert(0, flags);
        fuzzing::bundle_decode(&data);
    }
}

proptest! {
    #![proptest_config(config(96))]

    #[test]
    fn mutated_import_files_pass(
        target in prop::sample::select(TARGETS[1..].to_vec()),
        which in any::<Index>(),
        ms in prop::collection::vec(mutation(), 1..5),
    ) {
        let seeds = import_inputs(target);
        let seed = &seeds[which.index(seeds.len())];
        entry(target)(&mutated(seed, &ms, seeds));
    }
}

/// Writes the corpus a fuzzing run starts from into `fuzz/corpus/<target>/`
/// (ignored by git): the committed seeds, the project's bundles, and the
/// real files of `../shared/data` (which keep their licences there, so they
/// are copied only into the ignored corpus). Run with
/// `cargo test -p sessctl-store --test fuzz_foreign -- --ignored write_fuzz_corpus`.
#[test]
#[ignore = "writes fuzz/corpus/ for a cargo-fuzz run"]
fn write_fuzz_corpus() {
    for target in TARGETS {
        let dir = root().join("fuzz/corpus").join(target);
        fs::create_dir_all(&dir).unwrap();
        let mut inputs: Vec<Vec<u8>> = if target == "bundle_decode" {
            bundle_inputs().clone()
        } else {
            import_inputs(target).clone()
        };
        for p in real_files(target) {
            inputs.push(fs::read(&p).unwrap());
        }
        if target == "import_openai" {
            // SWE-agent histories are OpenAI chat: as a JSON file and as a
            // JSONL line.
            for p in real_files("import_swe_agent") {
                let v: serde_json::Value = serde_json::from_slice(&fs::read(&p).unwrap()).unwrap();
                let messages = json!({"messages": v["history"]}).to_string();
                inputs.push([&[OPENAI_WHOLE_FILE][..], messages.as_bytes()].concat());
                inputs.push(format!("{messages}\n").into_bytes());
            }
        }
        for bytes in inputs {
            let name = blake3::hash(&bytes).to_hex();
            fs::write(dir.join(&name[..16]), bytes).unwrap();
        }
    }
}

/// Writes the small bundle seeds committed under `fuzz/seeds/bundle_decode/`:
/// the golden example as written and with raw blocks.
#[test]
#[ignore = "rewrites committed seeds"]
fn write_bundle_seeds() {
    let dir = root().join("fuzz/seeds/bundle_decode");
    fs::create_dir_all(&dir).unwrap();
    let inputs = bundle_inputs();
    fs::write(dir.join("golden"), &inputs[0]).unwrap();
    fs::write(dir.join("golden-raw"), &inputs[1]).unwrap();
}

/// Lines nested as deep as a blob may be, kept where the importers keep
/// what is not a message (a session's `extra`, a record's metadata).
#[test]
fn deeply_nested_lines_import_or_are_skipped() {
    let deep = |depth: usize| "[".repeat(depth) + &"]".repeat(depth);
    for depth in [200, 250, 254, 255, 256] {
        let d = deep(depth);
        let claude = format!(
            "{{\"type\":\"summary\",\"x\":{d}}}\n{{\"type\":\"user\",\"uuid\":\"u\",\"sessionId\":\"s\",\"message\":{{\"role\":\"user\",\"content\":\"hi\"}}}}\n{{\"type\":\"queue-operation\",\"x\":{d}}}\n"
        );
        fuzzing::import_claude_code(claude.as_bytes());
        let codex = format!(
            "{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"x\",\"d\":{d}}}}}\n{{\"type\":\"turn_context\",\"payload\":{d}}}\n{{\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"user\",\"content\":\"hi\"}}}}\n"
        );
        fuzzing::import_codex(codex.as_bytes());
        let openai =
            format!("{{\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}],\"x\":{d}}}\n");
        fuzzing::import_openai(openai.as_bytes());
        let swe =
            format!("{{\"history\":[{{\"role\":\"user\",\"content\":\"hi\"}}],\"info\":{d}}}");
        fuzzing::import_swe_agent(swe.as_bytes());
    }
}

/// Replays one input on stable, for debugging a cargo-fuzz artifact:
/// `SESSCTL_FUZZ_TARGET=import_codex SESSCTL_FUZZ_INPUT=fuzz/artifacts/... cargo
/// test -p sessctl-store --test fuzz_foreign -- --ignored replay_one_input`.
#[test]
#[ignore = "replays $SESSCTL_FUZZ_INPUT through $SESSCTL_FUZZ_TARGET"]
fn replay_one_input() {
    let target = std::env::var("SESSCTL_FUZZ_TARGET").unwrap();
    let input = std::env::var("SESSCTL_FUZZ_INPUT").unwrap();
    entry(&target)(&fs::read(input).unwrap());
}

/// Found by `import_codex`: a message line repeated word for word after a
/// compaction (same blob, same history length) matched the boundary the
/// first import left at its twin, so a second import split the sessions
/// there, wrote three objects and moved a ref. Boundaries now also count
/// the compactions on their chain.
#[test]
fn a_line_repeated_after_a_compaction_is_imported_idempotently() {
    let x =
        r#"{"timestamp":"2026-05-11T11:27:02.000Z","type":"compacted","payload":{"message":"s"}}"#;
    let lines = [
        r#"{"timestamp":"2026-05-11T11:27:01.000Z","type":"response_item","payload":{"type":"message","role":"user","content":"a"}}"#,
        x,
        r#"{"timestamp":"2026-05-11T11:27:03.000Z","type":"response_item","payload":{"type":"message","role":"assistant","content":"b"}}"#,
        x,
    ];
    fuzzing::import_codex((lines.join("\n") + "\n").as_bytes());
}
