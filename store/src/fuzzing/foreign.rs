// Over 600 lines on purpose: each format's oracle (what "imported" means) sits beside the entry point it checks.
//! Entry points for the code that reads the most foreign bytes: bundles
//! (files from another machine) and the four import parsers (files another
//! program wrote). Shared by the cargo-fuzz targets `bundle_decode` and
//! `import_*` and by `store/tests/fuzz_foreign.rs`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::bundle::Bundle;
use crate::fsck::FsckOptions;
use crate::hash::ID_LEN;
use crate::import::{import_sources, parse_json, Format, ImportOptions, ImportReport, SourceFile};
use crate::object::{object_id, Blob, ObjectKind, Session};
use crate::odb::Durability;
use crate::refs::{RefName, RefTarget};
use crate::store::Store;

/// Flag bit of `bundle_decode`'s first byte: recompute the bundle's
/// checksum (its last 32 bytes) before decoding, so that mutations get past
/// it to the structure.
pub const BUNDLE_FIX_CHECKSUM: u8 = 1;
/// Flag bit of `bundle_decode`'s first byte: in raw blocks, set the
/// inflated length to the stored one and every record's id to the hash of
/// its kind and payload, so that mutated objects get past their hash to the
/// decoding, closure and apply checks. Applied before the checksum fix.
pub const BUNDLE_FIX_IDS: u8 = 2;

/// Where a bundle input comes from in errors.
const BUNDLE_PATH: &str = "fuzz.bundle";

/// The first byte is a set of flags ([`BUNDLE_FIX_CHECKSUM`],
/// [`BUNDLE_FIX_IDS`]); the rest is a bundle file. Whatever decodes must:
/// hold only objects that hash to their ids; re-encode to bytes that decode
/// to the same refs, records, prerequisites and objects; and, when its
/// problems against an empty store are none, apply to that store, after
/// which every ref it carried holds the bundle's value and no conversation
/// is both live and archived. A refusal must be
/// corruption (exit 3), never another kind of error.
pub fn bundle_decode(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if flags & BUNDLE_FIX_IDS != 0 {
        fix_bundle_ids(&mut bytes);
    }
    if flags & BUNDLE_FIX_CHECKSUM != 0 {
        super::fix_trailing_checksum(&mut bytes);
    }
    let path = Path::new(BUNDLE_PATH);
    let bundle = match Bundle::decode(&bytes, path) {
        Ok(b) => b,
        Err(e) => {
            assert!(e.is_corruption(), "a bundle refused as not corrupt: {e}");
            return;
        }
    };
    for o in &bundle.objects {
        assert_eq!(
            o.id(),
            object_id(o.kind(), o.payload()),
            "a decoded object does not hash to its id"
        );
    }
    let encoded = bundle.encode();
    let again = Bundle::decode(&encoded, path)
        .unwrap_or_else(|e| panic!("a decoded bundle re-encodes to bytes it refuses: {e}"));
    assert_eq!(again.refs, bundle.refs, "refs changed through encode");
    assert_eq!(
        again.conversations, bundle.conversations,
        "conversation records changed through encode"
    );
    assert_eq!(
        again.prerequisites, bundle.prerequisites,
        "prerequisites changed through encode"
    );
    assert!(
        again.objects == bundle.objects,
        "objects changed through encode"
    );
    assert_eq!(
        again.encode(),
        encoded,
        "encoding is not a function of the bundle"
    );

    let _ = bundle
        .problems(None)
        .unwrap_or_else(|e| panic!("problems without a store failed: {e}"));
    let store = Store::in_memory().expect("an in-memory store opens");
    let problems = bundle
        .problems(Some(&store))
        .unwrap_or_else(|e| panic!("problems against an empty store failed: {e}"));
    if !problems.is_empty() {
        return;
    }
    let report = crate::remote::apply(
        &store,
        &bundle,
        "unbundle",
        "the bundle",
        Durability::NoSync,
    )
    .unwrap_or_else(|e| panic!("a bundle with no problems does not apply to an empty store: {e}"));
    assert!(
        report.applied,
        "refused on an empty store: {:?}",
        report.refusals()
    );
    let refs = store
        .refs()
        .unwrap_or_else(|e| panic!("listing refs after apply failed: {e}"));
    for (name, _) in &refs {
        if let RefName::Conversation(n) = name {
            assert!(
                !refs.iter().any(|(r, _)| *r == RefName::Archived(n.clone())),
                "conversation {n} is both live and archived after apply"
            );
        }
    }
    for (name, id) in &bundle.refs {
        let now = store
            .get_ref(name)
            .unwrap_or_else(|e| panic!("reading {name} after apply failed: {e}"));
        assert_eq!(
            now,
            Some(RefTarget::Session(*id)),
            "{name} does not hold the bundle's value after apply"
        );
    }
}

/// Walks a bundle's structure as far as it holds together (ignoring the
/// checksum) and, in every raw block, sets the inflated length to the stored
/// one and each record's id to the hash of its kind and payload.
pub fn fix_bundle_ids(bytes: &mut [u8]) {
    const RECORD_HEADER: usize = 1 + ID_LEN + 4;
    let body_end = bytes.len().saturating_sub(32);
    let mut c = Cursor {
        buf: &bytes[..body_end],
        pos: 8,
    };
    let mut raw_blocks = Vec::new();
    let walked = (|| -> Option<()> {
        for _ in 0..c.u32()? {
            let n = c.u16()? as usize;
            c.take(n + ID_LEN)?;
        }
        for _ in 0..c.u32()? {
            let n = c.u16()? as usize;
            c.take(n)?;
            let m = c.u32()? as usize;
            c.take(m)?;
        }
        let p = c.u32()? as usize;
        c.take(p.checked_mul(ID_LEN)?)?;
        c.take(8)?;
        for _ in 0..c.u32()? {
            let at = c.pos;
            let codec = c.take(1)?[0];
            let stored = c.u32()? as usize;
            c.take(4)?;
            c.take(stored)?;
            if codec == 0 {
                raw_blocks.push((at, stored));
            }
        }
        Some(())
    })();
    let _ = walked; // a structure that ends early still has its first blocks fixed
    for (at, stored) in raw_blocks {
        bytes[at + 5..at + 9].copy_from_slice(&(stored as u32).to_le_bytes());
        let block = &mut bytes[at + 9..at + 9 + stored];
        let mut pos = 0;
        while block.len() - pos >= RECORD_HEADER {
            let len = u32::from_le_bytes(
                block[pos + 1 + ID_LEN..pos + RECORD_HEADER]
                    .try_into()
                    .expect("4 bytes"),
            ) as usize;
            let payload_at = pos + RECORD_HEADER;
            if len > block.len() - payload_at {
                break;
            }
            if let Some(kind) = ObjectKind::from_code(block[pos]) {
                let id = object_id(kind, &block[payload_at..payload_at + len]);
                block[pos + 1..pos + 1 + ID_LEN].copy_from_slice(id.as_bytes());
            }
            pos = payload_at + len;
        }
    }
}

/// A bounds-checked little-endian reader for the fix-ups.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len())?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
}

/// Separates the files of one import input.
pub const IMPORT_FILE_SEPARATOR: u8 = 0;
/// At most this many files per import input; the rest joins the last one.
const MAX_IMPORT_FILES: usize = 8;
/// For `import_openai`: a file whose first byte is this (dropped) is named
/// `.json`, one conversation in the whole file; other files are `.jsonl`,
/// one conversation a line.
pub const OPENAI_WHOLE_FILE: u8 = 1;

/// Claude Code session logs; see [`import`].
pub fn import_claude_code(data: &[u8]) {
    import(Format::ClaudeCode, data);
}

/// Codex rollouts; see [`import`].
pub fn import_codex(data: &[u8]) {
    import(Format::Codex, data);
}

/// OpenAI chat JSON and JSONL; see [`import`].
pub fn import_openai(data: &[u8]) {
    import(Format::OpenAi, data);
}

/// SWE-agent trajectories; see [`import`].
pub fn import_swe_agent(data: &[u8]) {
    import(Format::SweAgent, data);
}

/// The files an import input stands for: split at
/// [`IMPORT_FILE_SEPARATOR`] bytes, read as UTF-8 (lossily, as `import`
/// reads files), named as the format's files are, two by two sharing a file
/// name in different directories (as a session file and a copy of it do).
pub fn import_files(format: Format, data: &[u8]) -> Vec<SourceFile> {
    let mut chunks: Vec<&[u8]> = data
        .splitn(MAX_IMPORT_FILES, |&b| b == IMPORT_FILE_SEPARATOR)
        .collect();
    if chunks.len() > 1 && chunks.last().is_some_and(|c| c.is_empty()) {
        chunks.pop();
    }
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, chunk)| {
            let (name, chunk) = match format {
                Format::ClaudeCode => (format!("session-{}.jsonl", i / 2), chunk),
                Format::Codex => (format!("rollout-{}.jsonl", i / 2), chunk),
                Format::OpenAi => match chunk.split_first() {
                    Some((&OPENAI_WHOLE_FILE, rest)) => (format!("chat-{}.json", i / 2), rest),
                    _ => (format!("chat-{}.jsonl", i / 2), chunk),
                },
                Format::SweAgent => (format!("task-{}.traj", i / 2), chunk),
            };
            SourceFile {
                path: PathBuf::from(format!("d{i}")).join(name),
                text: String::from_utf8_lossy(chunk).into_owned(),
            }
        })
        .collect()
}

/// Imports `data` (as [`import_files`] splits it) into an empty in-memory
/// store and checks what every import promises:
/// - it never fails on what the files hold (a bad line is skipped, not fatal);
/// - every `skipped` entry names one of the files, and a line of it that is
///   not blank (line 0: the whole file);
/// - every line (or file, for whole-file formats) that is not valid JSON is
///   skipped with its file and line; every other one is skipped too or is
///   imported: what it carries is in the store ([`check_accounted`] says
///   exactly what that means per format);
/// - importing the same files again writes no object and moves no ref;
/// - `fsck` finds nothing wrong.
pub fn import(format: Format, data: &[u8]) {
    let sources = import_files(format, data);
    import_sources_checked(format, &sources);
}

/// The checks of [`import`], on files already named and read.
pub fn import_sources_checked(format: Format, sources: &[SourceFile]) {
    let store = Store::in_memory().expect("an in-memory store opens");
    // Every line the sources hold must be accounted for: a turn the agent
    // has not ended is imported too.
    let opts = ImportOptions {
        no_sync: true,
        finished: true,
        ..ImportOptions::default()
    };
    let report = import_sources(&store, format, sources, &opts, ImportReport::default())
        .unwrap_or_else(|e| panic!("{} import failed: {e}", format.as_str()));
    check_skipped(format, sources, &report);
    check_accounted(format, &store, sources, &report);
    let objects = store
        .odb()
        .backend()
        .ids()
        .unwrap_or_else(|e| panic!("listing objects failed: {e}"))
        .len();
    assert_eq!(
        objects, report.objects_written,
        "the report's objects_written is not what the store holds"
    );

    let second = import_sources(&store, format, sources, &opts, ImportReport::default())
        .unwrap_or_else(|e| panic!("a second {} import failed: {e}", format.as_str()));
    assert_eq!(
        (second.objects_written, second.refs_moved),
        (0, 0),
        "a second import of the same files wrote objects or moved refs"
    );
    assert_eq!(
        second.skipped, report.skipped,
        "a second import skips differently"
    );
    assert_eq!(second.sessions_total, report.sessions_total);

    let fsck = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("fsck failed: {e}"));
    assert!(
        fsck.is_clean(),
        "fsck after a {} import: {:?}",
        format.as_str(),
        fsck.problems
    );
}

/// The non-blank lines of a text, numbered from 1, as the importers number them.
fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty())
}

fn is_line_format(format: Format, path: &Path) -> bool {
    match format {
        Format::ClaudeCode | Format::Codex => true,
        Format::OpenAi => path.extension().is_some_and(|e| e == "jsonl"),
        Format::SweAgent => false,
    }
}

/// Every skipped entry names an input file and one of its non-blank lines,
/// or line 0 for the whole file.
fn check_skipped(format: Format, sources: &[SourceFile], report: &ImportReport) {
    let by_path: HashMap<&Path, &SourceFile> =
        sources.iter().map(|s| (s.path.as_path(), s)).collect();
    for s in &report.skipped {
        // A conversation left out whole (line 0) is named by its first
        // file's name, not its path.
        let src = by_path.get(s.file.as_path()).copied().or_else(|| {
            sources
                .iter()
                .find(|src| s.line == 0 && Path::new(&src.name()) == s.file)
        });
        let src = src.unwrap_or_else(|| panic!("skipped names no input file: {s:?}"));
        // A whole-file format's file is line 0, or 1 (OpenAI's `.json`
        // reports a conversation it refuses on line 1).
        if s.line != 0 && is_line_format(format, &src.path) {
            assert!(
                numbered_lines(&src.text).any(|(n, _)| n == s.line),
                "skipped names no non-blank line of its file: {s:?}"
            );
        }
        assert!(
            s.line <= 1 || is_line_format(format, &src.path),
            "skipped names line {} of a whole-file format: {s:?}",
            s.line
        );
    }
}

/// Everything the store holds that a source line may have become: message
/// blobs, the events and merged lines sessions keep, the values in their
/// `extra` and in conversation records' metadata, and the elements of the
/// arrays among them. As canonical JSON text, whole and (for Claude Code's
/// merged messages, whose content is rewritten) without `message.content`.
struct Stored {
    whole: HashSet<String>,
    without_content: HashSet<String>,
}

impl Stored {
    fn of(store: &Store) -> Stored {
        let mut values = Vec::new();
        let ids = store
            .odb()
            .backend()
            .ids()
            .unwrap_or_else(|e| panic!("listing objects failed: {e}"));
        for id in ids {
            let o = store
                .odb()
                .read(&id)
                .unwrap_or_else(|e| panic!("reading {id} failed: {e}"));
            match o.kind() {
                ObjectKind::Blob => {
                    let b = Blob::decode(o.payload())
                        .unwrap_or_else(|e| panic!("blob {id} does not decode: {e}"));
                    values.push(b.into_value());
                }
                ObjectKind::Raw => {
                    // The message, and each of its lines.
                    let r = crate::object::Raw::decode(o.payload())
                        .unwrap_or_else(|e| panic!("raw {id} does not decode: {e}"));
                    for line in r.lines() {
                        values.push(
                            crate::import::parse_json(line)
                                .unwrap_or_else(|e| panic!("raw {id} does not read: {e}")),
                        );
                    }
                    values.push(
                        r.into_value()
                            .unwrap_or_else(|e| panic!("raw {id} does not read: {e}")),
                    );
                }
                ObjectKind::Session => {
                    let s = Session::decode(o.payload())
                        .unwrap_or_else(|e| panic!("session {id} does not decode: {e}"));
                    for v in s.metadata.extra.into_values() {
                        push_nested(&mut values, v, 2);
                    }
                }
            }
        }
        let records = store
            .conversations(None)
            .unwrap_or_else(|e| panic!("listing conversations failed: {e}"));
        for c in records {
            let mut metadata = c.record.metadata;
            crate::refs::large_fields::inline(&mut metadata, &mut |id| store.odb().blob(id).ok());
            for v in metadata.into_values() {
                push_nested(&mut values, v, 1);
            }
        }
        let mut stored = Stored {
            whole: HashSet::new(),
            without_content: HashSet::new(),
        };
        for v in values {
            stored.without_content.insert(without_content(&v));
            stored.whole.insert(v.to_string());
        }
        stored
    }

    fn holds(&self, v: &Value) -> bool {
        self.whole.contains(&v.to_string())
    }
}

/// Pushes `v`, and the values inside its arrays and objects down to `depth`
/// levels (an event sits two levels down in `extra.events`: by uuid, then
/// in order).
fn push_nested(out: &mut Vec<Value>, v: Value, depth: usize) {
    // An entry kept as its line's exact text is also its value.
    if let (Value::String(_), std::borrow::Cow::Owned(parsed)) =
        (&v, crate::import::event_value(&v))
    {
        out.push(parsed);
    }
    if depth > 0 {
        match &v {
            Value::Array(a) => a
                .iter()
                .for_each(|x| push_nested(out, x.clone(), depth - 1)),
            Value::Object(o) => o
                .values()
                .for_each(|x| push_nested(out, x.clone(), depth - 1)),
            _ => {}
        }
    }
    out.push(v);
}

fn without_content(v: &Value) -> String {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("message").and_then(Value::as_object_mut) {
        m.remove("content");
    }
    v.to_string()
}

/// Every line (or whole file) is accounted for: skipped with its number, or
/// imported. What "imported" means, per format:
/// - Claude Code: the line is in the store (as a message, an event, a
///   merged line, a trailing event), the first line of a merged message
///   with its content rewritten; or its source session has no message at
///   all (nothing to import it into: the importer drops such groups, e.g. a
///   file of `summary` lines alone); or the line is not a message and its
///   session got no conversation record (all its roots are subagent lines:
///   only tags are made, and the lines after its last message are lost).
/// - Codex: the line is in the store (a message, an event, a trailing
///   event); a `session_meta` line's payload is in the record's metadata,
///   unless a later `session_meta` line of the file replaced it; or the
///   file has no message at all.
/// - OpenAI: every message of the conversation is a blob in the store (a
///   conversation with no message has nothing to import).
/// - SWE-agent: every message of `history` is a blob in the store.
fn check_accounted(format: Format, store: &Store, sources: &[SourceFile], report: &ImportReport) {
    let skipped: HashSet<(&Path, usize)> = report
        .skipped
        .iter()
        .map(|s| (s.file.as_path(), s.line))
        .collect();
    let stored = Stored::of(store);
    // Files whose conversation was left out whole, by path or name, and (for
    // Claude Code, whose conversations span files) their sessions.
    let left_out = |src: &SourceFile| {
        skipped.contains(&(src.path.as_path(), 0)) || skipped.contains(&(Path::new(&src.name()), 0))
    };
    let claude_left_out: HashSet<String> = match format {
        Format::ClaudeCode => sources
            .iter()
            .filter(|s| left_out(s))
            .map(claude_session_of)
            .collect(),
        _ => HashSet::new(),
    };
    // Claude Code groups files by session id: a group's lines are dropped
    // together when none of them is a message.
    let claude_groups_with_messages = claude_sessions_with_messages(format, sources);
    // Claude Code sessions that got a conversation record (not only
    // subagent tags): the only place lines after the last message are kept.
    let claude_with_record: HashSet<String> = store
        .conversations(None)
        .unwrap_or_else(|e| panic!("listing conversations failed: {e}"))
        .into_iter()
        .filter_map(|c| {
            c.record
                .metadata
                .get("source_session")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    // Claude Code uuids already read, by session: a repeat is read once.
    let mut claude_uuids: HashSet<(String, String)> = HashSet::new();
    for src in sources {
        let path = src.path.as_path();
        if !is_line_format(format, path) {
            if skipped.contains(&(path, 0))
                || skipped.contains(&(path, 1))
                || report.unfinished_lines.iter().any(|f| f == path)
            {
                continue;
            }
            let v = parse_json(&src.text).unwrap_or_else(|e| {
                panic!("{}: invalid JSON ({e}) but not skipped", path.display())
            });
            let messages = match (format, &v) {
                (Format::SweAgent, _) => v.get("history").and_then(Value::as_array),
                (_, Value::Array(a)) => Some(a),
                (_, _) => v.get("messages").and_then(Value::as_array),
            };
            let messages = messages
                .unwrap_or_else(|| panic!("{}: no messages but not skipped", path.display()));
            for m in messages {
                assert!(
                    stored.holds(m),
                    "{}: a message was neither imported nor skipped: {m}",
                    path.display()
                );
            }
            continue;
        }
        if format == Format::Codex && left_out(src) {
            continue;
        }
        let lines: Vec<(usize, &str)> = numbered_lines(&src.text).collect();
        let mut later_session_meta = 0usize;
        if format == Format::Codex {
            later_session_meta = lines
                .iter()
                .filter(|(_, l)| {
                    parse_json(l).is_ok_and(|v| {
                        v.get("type").and_then(Value::as_str) == Some("session_meta")
                    })
                })
                .count();
        }
        let file_has_message = format == Format::Codex && codex_file_has_message(&lines);
        let claude_session = match format {
            Format::ClaudeCode => claude_session_of(src),
            _ => String::new(),
        };
        for (n, text) in &lines {
            let is_skipped = skipped.contains(&(path, *n));
            let v = match parse_json(text) {
                Ok(v) => v,
                Err(e) => {
                    // A last line still being written is left for later.
                    let unfinished = *n == lines.last().map_or(0, |l| l.0)
                        && !src.text.ends_with('\n')
                        && report.unfinished_lines.iter().any(|f| f == path);
                    assert!(
                        is_skipped || unfinished,
                        "{}:{n}: invalid JSON ({e}) but not skipped",
                        path.display()
                    );
                    continue;
                }
            };
            let is_session_meta = v.get("type").and_then(Value::as_str) == Some("session_meta");
            if is_session_meta {
                later_session_meta -= 1;
            }
            if is_skipped {
                continue;
            }
            let repeated_uuid = format == Format::ClaudeCode
                && v.get("uuid")
                    .and_then(Value::as_str)
                    .is_some_and(|u| !claude_uuids.insert((claude_session.clone(), u.to_owned())));
            let accounted = match format {
                Format::ClaudeCode => {
                    repeated_uuid
                        || claude_left_out.contains(&claude_session)
                        || stored.holds(&v)
                        || stored.without_content.contains(&without_content(&v))
                        || !claude_groups_with_messages.contains(&claude_session)
                        || (!is_claude_message(&v) && !claude_with_record.contains(&claude_session))
                }
                Format::Codex => {
                    !file_has_message
                        || stored.holds(&v)
                        || (is_session_meta
                            && (later_session_meta > 0
                                || stored.holds(v.get("payload").unwrap_or(&Value::Null))))
                }
                Format::OpenAi => {
                    let messages = match &v {
                        Value::Array(a) => Some(a),
                        _ => v.get("messages").and_then(Value::as_array),
                    };
                    messages.is_some_and(|ms| ms.iter().all(|m| stored.holds(m)))
                }
                Format::SweAgent => unreachable!("a whole-file format"),
            };
            assert!(
                accounted,
                "{}:{n}: neither imported nor skipped: {text}",
                path.display()
            );
        }
    }
}

/// The session id the Claude Code importer groups a file under: its first
/// `sessionId`, or its file name.
fn claude_session_of(src: &SourceFile) -> String {
    numbered_lines(&src.text)
        .filter_map(|(_, l)| parse_json(l).ok())
        .filter(Value::is_object)
        .find_map(|v| {
            v.get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| src.name().trim_end_matches(".jsonl").to_owned())
}

/// Claude Code sessions (as [`claude_session_of`] groups files) with at
/// least one message line.
fn claude_sessions_with_messages(format: Format, sources: &[SourceFile]) -> HashSet<String> {
    if format != Format::ClaudeCode {
        return HashSet::new();
    }
    sources
        .iter()
        .filter(|src| {
            numbered_lines(&src.text)
                .filter_map(|(_, l)| parse_json(l).ok())
                .any(|v| is_claude_message(&v))
        })
        .map(claude_session_of)
        .collect()
}

/// A line the Claude Code importer makes a message of: a `user` or
/// `assistant` line with a `uuid` and an object `message`, or a
/// `compact_boundary` with a `uuid`.
fn is_claude_message(v: &Value) -> bool {
    let ty = v.get("type").and_then(Value::as_str);
    let uuid = v.get("uuid").and_then(Value::as_str).is_some();
    let message = v.get("message").is_some_and(Value::is_object);
    let boundary = v.get("subtype").and_then(Value::as_str) == Some("compact_boundary");
    uuid && match ty {
        Some("user" | "assistant") => message,
        Some("system") => boundary,
        _ => false,
    }
}

/// Whether a rollout has a line the Codex importer makes a message of.
fn codex_file_has_message(lines: &[(usize, &str)]) -> bool {
    let values: Vec<Value> = lines
        .iter()
        .filter_map(|(_, l)| parse_json(l).ok())
        .collect();
    let kind = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_owned);
    let ptype = |v: &Value| {
        v.get("payload")
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let has_user_items = values.iter().any(|v| {
        kind(v).as_deref() == Some("response_item")
            && ptype(v).as_deref() == Some("message")
            && v["payload"].get("role").and_then(Value::as_str) == Some("user")
    });
    values.iter().any(|v| match kind(v).as_deref() {
        Some("response_item" | "compacted") => true,
        Some("event_msg") => !has_user_items && ptype(v).as_deref() == Some("user_message"),
        _ => false,
    })
}
