//! Catching up in O(new lines) (`import::tail`): real transcripts fed a few
//! lines at a time, each catch-up going on from where the last left, leave
//! exactly the store a whole import does, reading and parsing only the new
//! lines; a file that shrank or was replaced is read whole again. Each on
//! a local store and on a remote one (`name::local`, `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
mod support;
use backends::Backend;

use std::path::{Path, PathBuf};
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
    let lines: Vec<(usize, String)> = lines.iter().map(|l| (0, l.clone())).collect();
    feed_files(store, format, &[path.to_path_buf()], &lines, chunk)
}

/// [`feed`] for several files: `lines` are (file, line) in the order they
/// are written.
fn feed_files(
    store: &Store,
    format: Format,
    paths: &[PathBuf],
    lines: &[(usize, String)],
    chunk: impl Fn(usize) -> usize,
) -> Fed {
    let mut fed = Fed::default();
    let mut resume: Option<Resume> = None;
    let mut texts = vec![String::new(); paths.len()];
    let mut at = 0;
    let mut k = 0;
    while at < lines.len() {
        let next = (at + chunk(k).max(1)).min(lines.len());
        k += 1;
        let mut more = vec![String::new(); paths.len()];
        for (f, l) in &lines[at..next] {
            more[*f].push_str(l);
            texts[*f].push_str(l);
        }
        let new_lines = lines[at..next]
            .iter()
            .filter(|(_, l)| !l.trim().is_empty())
            .count();
        let went_on = match resume.take() {
            Some(r) => {
                let base = ImportReport {
                    bytes_read: more.iter().map(|m| m.len() as u64).sum(),
                    ..ImportReport::default()
                };
                let more: Vec<&str> = more.iter().map(String::as_str).collect();
                import_more(store, r, &more, &opts(), base).unwrap()
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
                    paths[0].display(),
                    report.lines_parsed
                );
                assert!(report.skipped.is_empty(), "{:?}", report.skipped);
                fed.resumed += 1;
                resume = next_resume;
            }
            None => {
                let sources: Vec<SourceFile> = paths
                    .iter()
                    .zip(&texts)
                    .map(|(p, t)| source(p, t))
                    .collect();
                let (report, r) =
                    import_resumable(store, format, &sources, &opts(), ImportReport::default())
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

fn whole(b: &Backend, format: Format, path: &Path, lines: &[String]) -> (Backend, Store) {
    let b = b.another();
    let store = b.open();
    import_sources(
        &store,
        format,
        &[source(path, &lines.concat())],
        &opts(),
        ImportReport::default(),
    )
    .unwrap();
    (b, store)
}

/// The largest Claude Code transcripts and both Codex rollouts, fed 1 to 7
/// lines at a time: the same refs, ids and records as the whole file
/// imported at once, every move a fast-forward, and most catch-ups read
/// only their new lines.
fn a_transcript_fed_in_chunks_lands_as_the_whole_file_reading_only_new_lines(b: &Backend) {
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
        let (_w, whole_store) = whole(b, format, &path, &lines);
        for sizes in [&[1usize][..], &[3, 1, 7, 2]] {
            let _live = b.another();
            let live = _live.open();
            let fed = feed(&live, format, &path, &lines, |k| sizes[k % sizes.len()]);
            let what = format!("{sub} in chunks of {sizes:?}");
            eprintln!("{what}: {fed:?}");
            assert_eq!(state(&live), state(&whole_store), "{what}");
            assert_fast_forwards(&live, &what);
            // Reading whole is the exception: the first catch-up, and lines
            // that change how earlier ones read (a fork, a line continuing
            // a written answer).
            assert!(fed.resumed > 5 * fed.whole_reads, "{what}: {fed:?}");
            if largest {
                assert!(fed.whole_reads <= 3, "{what}: {fed:?}");
            }
        }
    }
}

/// A Claude Code session with its subagents' files (the older layout:
/// `agent-*.jsonl` beside it), their lines written in time order: the
/// unit's catch-ups go on across its files and land as the whole unit
/// imported at once.
fn a_session_and_its_subagents_fed_in_time_order_land_as_the_whole_unit(b: &Backend) {
    let Some(dir) = data("claude-code/claude/-tmp-private") else {
        return;
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // The main file first, as a unit lists them.
    paths.sort_by_key(|p| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("agent-")
    });
    let mut lines: Vec<(String, usize, String)> = Vec::new();
    for (f, p) in paths.iter().enumerate() {
        for l in lines_of(p) {
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            let t = v["timestamp"].as_str().unwrap_or("").to_owned();
            lines.push((t, f, l));
        }
    }
    // Time order; a line without a time stays after the one before it.
    let mut last = String::new();
    for l in &mut lines {
        if l.0.is_empty() {
            l.0.clone_from(&last);
        }
        last.clone_from(&l.0);
    }
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    let lines: Vec<(usize, String)> = lines.into_iter().map(|(_, f, l)| (f, l)).collect();
    let whole = b.open();
    let sources: Vec<SourceFile> = paths
        .iter()
        .map(|p| source(p, &lines_of(p).concat()))
        .collect();
    import_sources(
        &whole,
        Format::ClaudeCode,
        &sources,
        &opts(),
        ImportReport::default(),
    )
    .unwrap();
    for sizes in [&[1usize][..], &[2, 5]] {
        let _live = b.another();
        let live = _live.open();
        let fed = feed_files(&live, Format::ClaudeCode, &paths, &lines, |k| {
            sizes[k % sizes.len()]
        });
        let what = format!("-tmp-private in chunks of {sizes:?}");
        eprintln!("{what}: {fed:?}");
        assert_eq!(state(&live), state(&whole), "{what}");
        assert_fast_forwards(&live, &what);
        assert!(fed.resumed > 2 * fed.whole_reads, "{what}: {fed:?}");
    }
}

/// A Codex token count that comes after the last written message (here
/// after a Desktop rollout's `final_answer` ended its turn) would change
/// that message's usage if the file were read whole: the catch-up reads it
/// whole.
fn a_token_count_for_the_last_written_message_reads_the_file_whole(b: &Backend) {
    let line = |v: serde_json::Value| format!("{v}\n");
    let msg = |role: &str, text: &str, phase: Option<&str>| {
        let mut payload = serde_json::json!({
            "type": "message", "role": role,
            "content": [{"type": "input_text", "text": text}],
        });
        if let Some(p) = phase {
            payload["phase"] = serde_json::json!(p);
        }
        line(serde_json::json!({
            "timestamp": "2026-05-11T10:00:00.000Z", "type": "response_item", "payload": payload,
        }))
    };
    let lines = [
        line(serde_json::json!({
            "timestamp": "2026-05-11T10:00:00.000Z", "type": "session_meta",
            "payload": {"id": "019e0000-0000-7000-8000-000000000001"},
        })),
        msg("user", "hello", None),
        msg("assistant", "hi", Some("final_answer")),
        msg("user", "again", None),
        msg("assistant", "done", Some("final_answer")),
    ];
    let token_count = line(serde_json::json!({
        "timestamp": "2026-05-11T10:00:01.000Z", "type": "event_msg",
        "payload": {"type": "token_count", "info": {
            "total_token_usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            "last_token_usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        }},
    }));
    let store = b.open();
    let path = Path::new("rollout-x.jsonl");
    let (_, resume) = import_resumable(
        &store,
        Format::Codex,
        &[source(path, &lines.concat())],
        &opts(),
        ImportReport::default(),
    )
    .unwrap();
    let resume = resume.expect("its turns ended: it can be gone on from");
    // Another message goes on from it; the token count does not.
    let more = msg("user", "third", None);
    let (_, resume) = import_more(
        &store,
        resume,
        &[more.as_str()],
        &opts(),
        ImportReport::default(),
    )
    .unwrap()
    .expect("a new message is read alone");
    let resume = resume.expect("still resumable");
    let got = import_more(
        &store,
        resume.clone(),
        &[token_count.as_str()],
        &opts(),
        ImportReport::default(),
    )
    .unwrap();
    assert!(
        got.is_some(),
        "a token count after a held message is read alone"
    );
    let (_, resume) = import_more(
        &store,
        resume,
        &[msg("assistant", "3", Some("final_answer")).as_str()],
        &opts(),
        ImportReport::default(),
    )
    .unwrap()
    .unwrap();
    let got = import_more(
        &store,
        resume.unwrap(),
        &[token_count.as_str()],
        &opts(),
        ImportReport::default(),
    )
    .unwrap();
    assert!(got.is_none(), "a token count for the last written message");
}

/// Claude Code lines that would change how written ones read, were the file
/// read whole, make the catch-up read it whole: a line repeating a written
/// one (a later snapshot: read once, its entries then go to the written
/// message), and a summary (it may title the conversation by an earlier
/// message).
fn a_repeated_line_or_a_summary_reads_a_claude_code_file_whole(b: &Backend) {
    let Some(path) = data("claude-code/session-3fe1b6bc.jsonl") else {
        return;
    };
    let lines = lines_of(&path);
    let store = b.open();
    let (_, resume) = import_resumable(
        &store,
        Format::ClaudeCode,
        &[source(&path, &lines[..120].concat())],
        &opts(),
        ImportReport::default(),
    )
    .unwrap();
    let resume = resume.expect("written turns to go on from");
    let written = lines[..40]
        .iter()
        .find(|l| l.contains("\"type\":\"assistant\""))
        .unwrap();
    let summary = format!(
        "{}\n",
        serde_json::json!({"type": "summary", "summary": "a title", "leafUuid": "x"})
    );
    for (what, more) in [
        ("a repeated line", written.as_str()),
        ("a summary", &summary),
    ] {
        let got = import_more(
            &store,
            resume.clone(),
            &[more],
            &opts(),
            ImportReport::default(),
        )
        .unwrap();
        assert!(got.is_none(), "{what} was read alone");
    }
    // The next lines as written are read alone.
    let more = lines[120..125].concat();
    assert!(import_more(
        &store,
        resume,
        &[more.as_str()],
        &opts(),
        ImportReport::default()
    )
    .unwrap()
    .is_some());
}

two_backends!(
    a_transcript_fed_in_chunks_lands_as_the_whole_file_reading_only_new_lines,
    a_session_and_its_subagents_fed_in_time_order_land_as_the_whole_unit,
    a_token_count_for_the_last_written_message_reads_the_file_whole,
    a_repeated_line_or_a_summary_reads_a_claude_code_file_whole,
);
