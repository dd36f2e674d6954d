//! Catching up in O(new lines) (`import::tail`): real transcripts fed a few
//! lines at a time, each catch-up going on from where the last left, leave
//! exactly the store a whole import does, reading and parsing only the new
//! lines; a file that shrank or was replaced is read whole again.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::path::Path;
use support::data;

use sessctl_store::import::tail::{import_more, import_resumable, Resume};
use sessctl_store::import::{import_sources, Format, ImportOptions, ImportReport, SourceFile};
use sessctl_store::{ObjectId, RefTarget, Store};

fn opts() -> ImportOptions {
    ImportOptions {
        no_sync: true,
        ..ImportOptions::default()
    }
}

fn source(path: &Path, text: &str) -> SourceFile {
    SourceFile {
        path: path.to_path_buf(),
        text: text.to_owned(),
    }
}

/// Refs and conversation records, as text.
fn state(store: &Store) -> (Vec<String>, Vec<String>) {
    let mut refs: Vec<String> = store
        .refs()
        .unwrap()
        .iter()
        .map(|(r, t)| format!("{r:?} {t:?}"))
        .collect();
    refs.sort();
    let mut convs: Vec<String> = store
        .conversations(None)
        .unwrap()
        .iter()
        .map(|c| format!("{} {:?} {:?}", c.name, c.head, c.record))
        .collect();
    convs.sort();
    (refs, convs)
}

/// Every ref move the log holds is a fast-forward (first parents).
fn assert_fast_forwards(store: &Store, what: &str) {
    for e in store.reflog_entries().unwrap() {
        let (Some(RefTarget::Session(old)), Some(RefTarget::Session(new))) = (&e.old, &e.new)
        else {
            continue;
        };
        let mut at: Option<ObjectId> = Some(*new);
        let mut found = false;
        while let Some(id) = at {
            if id == *old {
                found = true;
                break;
            }
            at = store.odb().session(&id).unwrap().first_parent();
        }
        assert!(
            found,
            "{what}: {:?} moved {old} to {new}, not a fast-forward",
            e.name
        );
    }
}

/// The file's lines, each with its newline.
fn lines_of(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split_inclusive('\n').map(str::to_owned).collect()
}

#[derive(Debug, Default)]
struct Fed {
    whole_reads: usize,
    resumed: usize,
}

/// Feeds `lines` to a store `chunk(k)` lines at a time, each catch-up
/// going on from the last one's resume when it has one (else reading all
/// so far, as the watcher does), and checks each resumed catch-up read and
/// parsed only the new lines.
fn feed(
    store: &Store,
    format: Format,
    path: &Path,
    lines: &[String],
    chunk: impl Fn(usize) -> usize,
) -> Fed {
    let mut fed = Fed::default();
    let mut resume: Option<Resume> = None;
    let mut at = 0;
    let mut k = 0;
    while at < lines.len() {
        let next = (at + chunk(k).max(1)).min(lines.len());
        k += 1;
        let more = lines[at..next].concat();
        let new_lines = lines[at..next]
            .iter()
            .filter(|l| !l.trim().is_empty())
            .count();
        let went_on = match &resume {
            Some(r) => {
                let base = ImportReport {
                    bytes_read: more.len() as u64,
                    ..ImportReport::default()
                };
                import_more(store, r, &[more.as_str()], &opts(), base).unwrap()
            }
            None => None,
        };
        match went_on {
            Some((report, next_resume)) => {
                assert!(report.resumed);
                assert_eq!(
                    report.lines_parsed,
                    new_lines,
                    "{}: lines {at}..{next}: parsed {} lines for {new_lines} new",
                    path.display(),
                    report.lines_parsed
                );
                assert!(report.skipped.is_empty(), "{:?}", report.skipped);
                fed.resumed += 1;
                resume = next_resume;
            }
            None => {
                let all = lines[..next].concat();
                let (report, r) = import_resumable(
                    store,
                    format,
                    &[source(path, &all)],
                    &opts(),
                    ImportReport::default(),
                )
                .unwrap();
                assert!(!report.resumed);
                fed.whole_reads += 1;
                resume = r;
            }
        }
        at = next;
    }
    fed
}

fn whole(format: Format, path: &Path, lines: &[String]) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::init(&dir.path().join("s")).unwrap();
    import_sources(
        &store,
        format,
        &[source(path, &lines.concat())],
        &opts(),
        ImportReport::default(),
    )
    .unwrap();
    (dir, store)
}

/// The largest Claude Code transcripts and both Codex rollouts, fed 1 to 7
/// lines at a time: the same refs, ids and records as the whole file
/// imported at once, every move a fast-forward, and most catch-ups read
/// only their new lines.
#[test]
fn a_transcript_fed_in_chunks_lands_as_the_whole_file_reading_only_new_lines() {
    let files = [
        (Format::ClaudeCode, "claude-code/session-3fe1b6bc.jsonl"),
        (Format::ClaudeCode, "claude-code/session-196820da.jsonl"),
        (Format::ClaudeCode, "claude-code/session-624a4a58.jsonl"),
        (Format::ClaudeCode, "claude-code/session-9eda1058.jsonl"),
        (
            Format::Codex,
            "codex/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
        ),
        (
            Format::Codex,
            "codex/rollout-2026-05-11T13-28-45-019e1695-0522-7c83-8b39-0dd379793f80.jsonl",
        ),
    ];
    for (k, (format, sub)) in files.into_iter().enumerate() {
        // The largest of each format.
        let largest = k == 0 || k == 4;
        let Some(path) = data(sub) else {
            return;
        };
        let lines = lines_of(&path);
        let (_w, whole_store) = whole(format, &path, &lines);
        for sizes in [&[1usize][..], &[3, 1, 7, 2]] {
            let dir = tempfile::tempdir().unwrap();
            let live = Store::init(&dir.path().join("s")).unwrap();
            let fed = feed(&live, format, &path, &lines, |k| sizes[k % sizes.len()]);
            let what = format!("{sub} in chunks of {sizes:?}");
            eprintln!("{what}: {fed:?}");
            assert_eq!(state(&live), state(&whole_store), "{what}");
            assert_fast_forwards(&live, &what);
            // Reading whole is the exception: until the first turn is
            // written (nothing to go on from yet), and for lines that change
            // how earlier ones read (the summaries that open a resumed
            // session's file, until the message they come before is
            // written; a fork).
            assert!(fed.resumed >= 6, "{what}: {fed:?}");
            if largest {
                assert!(fed.whole_reads <= 6, "{what}: {fed:?}");
            }
        }
    }
}
