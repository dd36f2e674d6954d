//! `export --into-claude` and `--into-codex`: a fork written back as a
//! session file its agent resumes, under a fresh session id, and the
//! command that resumes it.
//!
//! Where the files go is the agents' own layout: Claude Code keeps a
//! project's sessions in `~/.claude/projects/<cwd with every character but
//! ASCII letters and digits as '-'>/<sessionId>.jsonl` (`$CLAUDE_CONFIG_DIR`
//! instead of `~/.claude` when set); Codex keeps rollouts in
//! `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<YYYY-MM-DDThh-mm-ss>-<id>.jsonl`
//! (`~/.codex` by default). A file is created, never replaced.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sessctl_store::export::{claude_code_session, codex_rollout, AgentSession};
use sessctl_store::time::{format_rfc3339_ms, now_ms};
use sessctl_store::{ObjectId, Store};

use crate::hook::{codex_home_dir, home_dir};
use crate::output::print;
use crate::{CmdResult, CommandError};

/// A fresh random uuid: version 7 (the time in its first 48 bits, as Codex
/// makes its thread ids) or version 4. The randomness is blake3 of what
/// differs between two calls: the time, the process, the session, a
/// counter.
fn fresh_uuid(v7: bool, seed: &ObjectId) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut h = blake3::Hasher::new();
    h.update(&nanos.to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.update(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.update(seed.to_hex().as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h.finalize().as_bytes()[..16]);
    if v7 {
        let ms = u64::try_from(now_ms()).unwrap_or(0);
        b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    }
    b[6] = (b[6] & 0x0f) | if v7 { 0x70 } else { 0x40 };
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    uuid_form(&hex)
}

/// The first 32 hex digits of `hex` in the 8-4-4-4-12 form of a UUID.
fn uuid_form(hex: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Claude Code's directory name for a project: its path with every
/// character that is not an ASCII letter or digit as `-` (JavaScript's
/// `/[^a-zA-Z0-9]/g`, which sees UTF-16 units: a character beyond the
/// Basic Multilingual Plane is two).
pub fn claude_project_dir_name(cwd: &str) -> String {
    let mut out = String::with_capacity(cwd.len());
    for c in cwd.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.extend(std::iter::repeat_n('-', c.len_utf16()));
        }
    }
    out
}

fn write_new(path: &Path, text: &str) -> CmdResult {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| CommandError::Failed(format!("{}: {e}", dir.display())))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| CommandError::Failed(format!("{}: {e}", path.display())))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| CommandError::Failed(format!("{}: {e}", path.display())))
}

fn current_dir() -> CmdResult<String> {
    std::env::current_dir()
        .map(|d| d.display().to_string())
        .map_err(|e| CommandError::Failed(format!("the current directory: {e}")))
}

/// A shell word for `s` (quoted when it needs to be).
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Prints where the file went and the command that resumes it (run from
/// the session's directory when that is not this one).
fn print_resume(path: &Path, cwd: &str, command: &str) -> CmdResult {
    let here = current_dir().unwrap_or_default();
    let cd = if here == cwd {
        String::new()
    } else {
        format!("cd {} && ", shell_word(cwd))
    };
    print(&format!("wrote {}\n{cd}{command}\n", path.display()))
}

/// `export REV --into-claude [DIR]`.
pub fn into_claude(store: &Store, id: ObjectId, dir: Option<&Path>, source: &Source) -> CmdResult {
    let session_id = fresh_uuid(false, &id);
    // A history from another agent runs where its source ran, or here.
    let fallback = match source
        .meta
        .as_ref()
        .and_then(|m| m.get("cwd"))
        .and_then(Value::as_str)
    {
        Some(c) => c.to_owned(),
        None => current_dir()?,
    };
    let AgentSession { text, cwd, .. } = claude_code_session(
        store,
        id,
        &session_id,
        source.trailing_for("claude-code"),
        Some(&fallback),
    )?;
    let cwd = cwd.unwrap_or(fallback);
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => {
            let config = match std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
                Some(d) => PathBuf::from(d),
                None => home_dir()?.join(".claude"),
            };
            config.join("projects").join(claude_project_dir_name(&cwd))
        }
    };
    let path = dir.join(format!("{session_id}.jsonl"));
    write_new(&path, &text)?;
    print_resume(&path, &cwd, &format!("claude --resume {session_id}"))
}

/// What the conversation record keeps of its source, when REV names a
/// conversation.
#[derive(Debug, Default)]
pub struct Source {
    /// The Codex rollout's `session_meta` payload.
    pub meta: Option<Value>,
    /// The source's lines after its last message, when REV is the head.
    pub trailing: Vec<Value>,
    /// The format it was imported from (`claude-code`, `codex`, ...).
    pub format: Option<String>,
}

impl Source {
    /// The trailing lines, when the file written is of the source's format.
    fn trailing_for(&self, format: &str) -> &[Value] {
        if self.format.as_deref() == Some(format) {
            &self.trailing
        } else {
            &[]
        }
    }
}

impl Source {
    pub fn of(store: &Store, rev: &str, id: ObjectId) -> Source {
        let Some(c) = store.conversation(rev).ok().flatten() else {
            return Source::default();
        };
        // The record keeps large values (Codex's base_instructions) as
        // blobs: the file written holds the values themselves.
        let mut md = c.record.metadata.clone();
        sessctl_store::refs::large_fields::inline(&mut md, &mut |id| store.odb().blob(id).ok());
        Source {
            meta: md.get("session_meta").cloned(),
            trailing: match md.get("trailing_events") {
                Some(Value::Array(a)) if c.head == Some(id) => a.clone(),
                _ => Vec::new(),
            },
            format: md.get("source").and_then(Value::as_str).map(str::to_owned),
        }
    }
}

/// `export REV --format codex` to stdout or a file: the rollout
/// `--into-codex` writes, with the source's `session_meta` (cwd, model
/// provider, ...) when REV names a Codex conversation, but deterministic:
/// the conversation's id as the thread id, the head's time as the file's.
pub fn codex_text(store: &Store, id: ObjectId, source: &Source) -> CmdResult<String> {
    let head = store.odb().session(&id)?;
    let hex = head.conversation_id(id).to_hex();
    let thread = uuid_form(&hex);
    let out = codex_rollout(
        store,
        id,
        &thread,
        source.meta.as_ref(),
        source.trailing_for("codex"),
        head.created_at,
    )?;
    Ok(out.text)
}

/// `export REV --into-codex [CODEX_HOME]`.
pub fn into_codex(store: &Store, id: ObjectId, home: Option<&Path>, source: &Source) -> CmdResult {
    let thread = fresh_uuid(true, &id);
    let now = now_ms();
    let mut meta = source.meta.clone();
    let here = current_dir()?;
    if let Some(Value::Object(m)) = &mut meta {
        m.entry("cwd").or_insert(Value::String(here.clone()));
    } else {
        meta = Some(serde_json::json!({ "cwd": here }));
    }
    let AgentSession { text, cwd, .. } = codex_rollout(
        store,
        id,
        &thread,
        meta.as_ref(),
        source.trailing_for("codex"),
        now,
    )?;
    let home = match home {
        Some(h) => h.to_path_buf(),
        None => codex_home_dir()?,
    };
    // 2026-11-26T01:25:13.123Z
    let t = format_rfc3339_ms(now);
    let dir = home
        .join("sessions")
        .join(&t[0..4])
        .join(&t[5..7])
        .join(&t[8..10]);
    let stamp = t[0..19].replace(':', "-");
    let path = dir.join(format!("rollout-{stamp}-{thread}.jsonl"));
    write_new(&path, &text)?;
    print_resume(
        &path,
        cwd.as_deref().unwrap_or(&here),
        &format!("codex resume {thread}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_folder_names_are_claude_codes() {
        assert_eq!(claude_project_dir_name("/tmp/private"), "-tmp-private");
        assert_eq!(
            claude_project_dir_name("/home/me/my_repo.v2/a b"),
            "-home-me-my-repo-v2-a-b"
        );
        assert_eq!(
            claude_project_dir_name("/home/me/.agents"),
            "-home-me--agents"
        );
        assert_eq!(claude_project_dir_name("/p/Проект"), "-p-------");
        assert_eq!(claude_project_dir_name("/p/\u{1F600}"), "-p---");
    }

    #[test]
    fn fresh_ids_are_uuids_of_their_version() {
        let seed = ObjectId::from_bytes([7; 32]);
        let (a, b) = (fresh_uuid(false, &seed), fresh_uuid(false, &seed));
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        let v7 = fresh_uuid(true, &seed);
        assert_eq!(&v7[14..15], "7");
        assert!(matches!(&v7[19..20], "8" | "9" | "a" | "b"));
    }
}
