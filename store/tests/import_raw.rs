//! Imported lines kept byte for byte (objects-format.md, "raw" and
//! "Imported sessions"): the real files of `../shared/data` imported,
//! exported back and compared line by line with their sources; importing
//! again writes nothing; a store an older sessctl imported into keeps its
//! sessions and fast-forwards; a fork written back for Claude Code resumes
//! under one sessionId, every source line otherwise as it was. The
//! behaviour tests run on a local store and on a remote one
//! (`name::local`, `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
mod support;
use backends::Backend;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use sessctl_store::export::{claude_code_session, codex_rollout, export, ExportFormat};
use sessctl_store::import::{import_paths, Format, ImportOptions, ImportReport};
use sessctl_store::{
    Cut, Durability, ForkOptions, Messages, ObjectId, ObjectKind, OpenOptions, RefName, RefTarget,
    Store, Turn,
};
use support::data;

fn opts() -> ImportOptions {
    ImportOptions {
        no_sync: true,
        finished: true,
        ..ImportOptions::default()
    }
}

fn import(store: &Store, format: Format, path: &Path, opts: &ImportOptions) -> ImportReport {
    import_paths(store, format, &[path.to_path_buf()], opts).unwrap()
}

/// The source's non-blank lines, each as its bytes (without `\n`).
fn source_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

fn counts(lines: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for l in lines {
        *m.entry(l.as_str()).or_insert(0) += 1;
    }
    m
}

fn head(store: &Store, name: &str) -> ObjectId {
    match store
        .get_ref(&RefName::conversation(name).unwrap())
        .unwrap()
    {
        Some(RefTarget::Session(id)) => id,
        other => panic!("{name}: {other:?}"),
    }
}

/// The one conversation (refs/heads/) the store has.
fn only_conversation(store: &Store) -> String {
    let names: Vec<String> = store
        .refs()
        .unwrap()
        .into_iter()
        .filter_map(|(r, _)| match r {
            RefName::Conversation(n) => Some(n),
            _ => None,
        })
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].clone()
}

fn format_file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("FORMAT")).unwrap()
}

/// The kinds of the messages a session's history names.
fn history_kinds(store: &Store, id: &ObjectId) -> Vec<ObjectKind> {
    let odb = store.odb();
    odb.history(id)
        .unwrap()
        .iter()
        .map(|m| odb.read(m).unwrap().kind())
        .collect()
}

fn claude_code_sessions_export_back_byte_for_byte(b: &Backend) {
    // Linear sessions: their whole history is every line of the file.
    for file in ["session-3fe1b6bc.jsonl", "session-196820da.jsonl"] {
        let Some(path) = data(&format!("claude-code/{file}")) else {
            return;
        };
        let b = b.another();
        let store = b.open();
        // A local store's FORMAT file: the first raw object raises it to 3.
        if let Some(dir) = b.path() {
            assert_eq!(format_file(dir), "sessctl store format 1\n");
        }
        import(&store, Format::ClaudeCode, &path, &opts());
        if let Some(dir) = b.path() {
            assert_eq!(format_file(dir), "sessctl store format 3\n");
        }
        let name = only_conversation(&store);
        let at = head(&store, &name);
        assert!(history_kinds(&store, &at)
            .iter()
            .all(|k| *k == ObjectKind::Raw));
        let source = source_lines(&path);
        // Exported under the conversation's id: each line that came from
        // the source is its bytes, but for the sessionId, which is the
        // export's.
        let text = export(&store, at, ExportFormat::ClaudeCode).unwrap();
        let sid = serde_json::from_str::<Value>(&source[0]).unwrap()["sessionId"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| {
                source
                    .iter()
                    .find_map(|l| {
                        serde_json::from_str::<Value>(l).unwrap()["sessionId"]
                            .as_str()
                            .map(str::to_owned)
                    })
                    .unwrap()
            });
        let conv = store
            .odb()
            .session(&at)
            .unwrap()
            .conversation_id(at)
            .to_hex();
        let back: Vec<String> = text
            .lines()
            .map(|l| {
                l.replace(
                    &format!("\"sessionId\":\"{conv}\""),
                    &format!("\"sessionId\":\"{sid}\""),
                )
            })
            .collect();
        assert!(
            counts(&back) == counts(&source),
            "{file}: the same lines, byte for byte"
        );
        // Written back for Claude Code under the source's own sessionId:
        // the file's lines exactly, no byte changed.
        let out = claude_code_session(&store, at, &sid, &[], None).unwrap();
        let lines: Vec<String> = out.text.lines().map(str::to_owned).collect();
        assert!(counts(&lines) == counts(&source), "{file}: no byte changed");
        // And the messages read as the lines' values.
        let values = store.odb().load_messages(&at).unwrap();
        assert!(values.iter().all(|v| v["sessionId"] == json!(sid)));
        let report = store.fsck(&Default::default(), &mut |_, _| {}).unwrap();
        assert!(report.is_clean(), "{:?}", report.problems);
        assert_eq!(report.raws, values.len());
        assert_eq!(report.blobs, 0);
    }
}

fn codex_rollouts_export_back_byte_for_byte_but_their_session_meta(b: &Backend) {
    let Some(dir_in) = data("codex") else {
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir_in)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for path in files {
        let b = b.another();
        let store = b.open();
        import(&store, Format::Codex, &path, &opts());
        let name = only_conversation(&store);
        let at = head(&store, &name);
        let source = source_lines(&path);
        let record = store.conversation(&name).unwrap().unwrap().record;
        let trailing = match record.metadata.get("trailing_events") {
            Some(Value::Array(a)) => a.clone(),
            _ => Vec::new(),
        };
        let out = codex_rollout(&store, at, "thread", None, &trailing, 0).unwrap();
        let lines: Vec<String> = out.text.lines().map(str::to_owned).collect();
        // The session_meta line is the export's own (a new thread id);
        // every other line is the source's, in the source's order.
        assert!(lines[0].contains("\"session_meta\""));
        assert!(source[0].contains("\"session_meta\""));
        assert_eq!(lines.len(), source.len(), "{}", path.display());
        if let Some(k) = (1..lines.len()).find(|&k| lines[k] != source[k]) {
            panic!("{}: line {} differs", path.display(), k + 1);
        }
    }
}

fn importing_again_writes_nothing_and_identical_lines_are_one_object(b: &Backend) {
    let Some(path) = data("claude-code/session-3fe1b6bc.jsonl") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let store = b.open();
    let first = import(&store, Format::ClaudeCode, &path, &opts());
    assert!(first.objects_written > 0);
    let objects = store.odb().stats().unwrap();
    let again = import(&store, Format::ClaudeCode, &path, &opts());
    assert_eq!((again.objects_written, again.refs_moved), (0, 0));
    assert_eq!(again.sessions_total, first.sessions_total);
    let after = store.odb().stats().unwrap();
    assert_eq!(
        after.journal_objects + after.pack_objects,
        objects.journal_objects + objects.pack_objects
    );
    // The same file under another name is another conversation's source
    // only by its sessionId, which is the same: nothing new either.
    let copy = dir.path().join("copy.jsonl");
    std::fs::copy(&path, &copy).unwrap();
    let third = import(&store, Format::ClaudeCode, &copy, &opts());
    assert_eq!(third.objects_written, 0);
}

/// Whether `old` is on `new`'s first-parent chain.
fn descends(store: &Store, new: ObjectId, old: ObjectId) -> bool {
    let mut at = Some(new);
    while let Some(id) = at {
        if id == old {
            return true;
        }
        at = store.odb().session(&id).unwrap().first_parent();
    }
    false
}

// Local only: opens a store directory an older sessctl wrote (a fixture).
#[test]
fn a_store_an_older_sessctl_imported_into_imports_again_and_fast_forwards() {
    let (Some(turn1), Some(turn2), Some(rollout)) = (
        data("claude-code/claude/incremental-simple/turn-1.jsonl"),
        data("claude-code/claude/incremental-simple/turn-2.jsonl"),
        data("codex/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl"),
    ) else {
        return;
    };
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-import-blobs");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    support::copy_dir(&fixture, &path);
    // The rollout's first 60 lines, as the older sessctl read it.
    let prefix = dir.path().join("rollout-prefix.jsonl");
    let text = std::fs::read_to_string(&rollout).unwrap();
    let cut: String = text.split_inclusive('\n').take(60).collect();
    std::fs::write(&prefix, cut).unwrap();
    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    let before: BTreeMap<String, ObjectId> = ["cc-3fb74381-1bf", "codex-019e1695-052"]
        .iter()
        .map(|n| (n.to_string(), head(&store, n)))
        .collect();
    for id in before.values() {
        assert!(history_kinds(&store, id)
            .iter()
            .all(|k| *k == ObjectKind::Blob));
    }
    // The same files again, as a hook or watcher would: nothing to write,
    // and the store stays at the format it was.
    let live = ImportOptions {
        no_sync: true,
        ..ImportOptions::default()
    };
    let r = import(&store, Format::ClaudeCode, &turn1, &live);
    assert_eq!((r.objects_written, r.refs_moved), (0, 0), "{r:?}");
    let r = import(&store, Format::Codex, &prefix, &live);
    assert_eq!((r.objects_written, r.refs_moved), (0, 0), "{r:?}");
    assert_eq!(format_file(&path), "sessctl store format 1\n");
    // The longer files: each conversation fast-forwards on its own ref.
    let r = import(&store, Format::ClaudeCode, &turn2, &live);
    assert!(r.redirected.is_empty() && r.left_alone.is_empty(), "{r:?}");
    let r = import(&store, Format::Codex, &rollout, &live);
    assert!(r.redirected.is_empty() && r.left_alone.is_empty(), "{r:?}");
    for (name, old) in &before {
        let new = head(&store, name);
        assert_ne!(new, *old, "{name} moved on");
        assert!(descends(&store, new, *old), "{name}: a fast-forward");
        // What the older sessctl wrote stays blobs; what came after is raw.
        let old_len = history_kinds(&store, old).len();
        let kinds = history_kinds(&store, &new);
        assert!(
            kinds[..old_len].iter().all(|k| *k == ObjectKind::Blob),
            "{name}"
        );
        assert!(
            kinds[old_len..].iter().all(|k| *k == ObjectKind::Raw),
            "{name}"
        );
        assert!(kinds.len() > old_len);
    }
    assert!(!store
        .refs()
        .unwrap()
        .iter()
        .any(|(r, _)| r.to_string().ends_with(".imported")));
    assert_eq!(format_file(&path), "sessctl store format 3\n");
    // And once more: nothing.
    let r = import(&store, Format::ClaudeCode, &turn2, &live);
    assert_eq!((r.objects_written, r.refs_moved), (0, 0), "{r:?}");
    let r = import(&store, Format::Codex, &rollout, &live);
    assert_eq!((r.objects_written, r.refs_moved), (0, 0), "{r:?}");
    let report = store.fsck(&Default::default(), &mut |_, _| {}).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}

fn a_fork_written_back_for_claude_code_resumes_under_one_session_id(b: &Backend) {
    let Some(path) = data("claude-code/session-3fe1b6bc.jsonl") else {
        return;
    };
    let store = b.open();
    import(&store, Format::ClaudeCode, &path, &opts());
    let name = only_conversation(&store);
    let source = source_lines(&path);
    let sid = "3fe1b6bc-dbd0-4320-b980-4f147befa187";
    let (_, at) = store
        .fork(
            head(&store, &name),
            ForkOptions {
                name: Some("f".into()),
                cut: Some(Cut::AtMessage(40)),
                turn: Some(Turn {
                    messages: Messages::Added(vec![json!({"role": "user", "content": "and now?"})]),
                    ..Turn::default()
                }),
            },
            Durability::NoSync,
        )
        .unwrap();
    let out = claude_code_session(
        &store,
        at,
        "11111111-2222-4333-8444-555555555555",
        &[],
        None,
    )
    .unwrap();
    let lines: Vec<&str> = out.text.lines().collect();
    let values: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // One sessionId, in every line that has one.
    let ids: std::collections::HashSet<&str> = values
        .iter()
        .filter_map(|v| v.get("sessionId").and_then(Value::as_str))
        .collect();
    assert_eq!(
        ids.into_iter().collect::<Vec<_>>(),
        vec!["11111111-2222-4333-8444-555555555555"]
    );
    // A whole parentUuid chain: every parent is an earlier line's uuid.
    let mut seen = std::collections::HashSet::new();
    for v in &values {
        if let Some(p) = v.get("parentUuid").and_then(Value::as_str) {
            assert!(seen.contains(p), "parent {p} comes before its child");
        }
        if let Some(u) = v.get("uuid").and_then(Value::as_str) {
            assert!(seen.insert(u.to_owned()), "uuid {u} once");
        }
    }
    // Every line but the new message is a source line, byte for byte, but
    // for the sessionId.
    let from_source: Vec<String> = lines[..lines.len() - 1]
        .iter()
        .map(|l| l.replace("11111111-2222-4333-8444-555555555555", sid))
        .collect();
    let src = counts(&source);
    for l in &from_source {
        assert!(
            src.contains_key(l.as_str()),
            "not a source line: {}",
            &l[..l.len().min(200)]
        );
    }
    let last = values.last().unwrap();
    assert_eq!(last["message"]["content"], "and now?");
    let cwd = values.iter().find_map(|v| v.get("cwd")).unwrap();
    assert_eq!(&last["cwd"], cwd);
}

two_backends!(
    claude_code_sessions_export_back_byte_for_byte,
    codex_rollouts_export_back_byte_for_byte_but_their_session_meta,
    importing_again_writes_nothing_and_identical_lines_are_one_object,
    a_fork_written_back_for_claude_code_resumes_under_one_session_id,
);
