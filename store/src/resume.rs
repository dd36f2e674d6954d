//! Picking a conversation back up: `checkout` (moving `HEAD`), the seed
//! files a runtime starts from, and the resume payload: the history to give
//! the model and a summary for people.
//!
//! The summary is for display only; it is never put into the history. A
//! compacted history already starts with its checkpoint (see `compact.rs`),
//! so the history to give the model is the session's history as it is.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::compact::CHECKPOINT_MESSAGE_KEY;
use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::message::{chat_history, needs_conversion, user_text, view, Shape};
use crate::object::{Compaction, Usage};
use crate::odb::atomic_file::AtomicFile;
use crate::odb::{Durability, Odb};
use crate::refs::{validate_name, PreviousValue, RefEdit, RefName, RefTarget};
use crate::store::{Store, Transaction};

// ---- checkout ----

/// Where `HEAD` went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedOut {
    /// The session `HEAD` leads to.
    pub session: ObjectId,
    /// The conversation `HEAD` names; `None` when it is detached.
    pub conversation: Option<String>,
}

/// What `HEAD` would point at after checking out `rev`: a conversation name
/// (or `refs/heads/NAME`) of a live conversation makes it symbolic;
/// `HEAD`/`@` keep it as it is; anything else ([`Store::resolve_rev`])
/// detaches it at the session.
pub fn checkout_target(store: &Store, rev: &str) -> Result<(RefTarget, CheckedOut)> {
    if rev == "HEAD" || rev == "@" {
        let session = store.resolve_rev(rev)?;
        return Ok(match store.head_conversation()? {
            Some(name) => (
                RefTarget::Symbolic(RefName::conversation(&name)?),
                CheckedOut {
                    session,
                    conversation: Some(name),
                },
            ),
            None => (
                RefTarget::Session(session),
                CheckedOut {
                    session,
                    conversation: None,
                },
            ),
        });
    }
    let name = rev.strip_prefix("refs/heads/").unwrap_or(rev);
    if validate_name(name).is_ok() {
        let conv_ref = RefName::conversation(name)?;
        if let Some(RefTarget::Session(session)) = store.get_ref(&conv_ref)? {
            return Ok((
                RefTarget::Symbolic(conv_ref),
                CheckedOut {
                    session,
                    conversation: Some(name.to_owned()),
                },
            ));
        }
    }
    let session = store.resolve_rev(rev)?;
    Ok((
        RefTarget::Session(session),
        CheckedOut {
            session,
            conversation: None,
        },
    ))
}

/// Moves `HEAD` to `rev` (see [`checkout_target`]) in one operation with
/// reason `checkout`; writes nothing when `HEAD` is there already.
pub fn checkout(store: &Store, rev: &str, durability: Durability) -> Result<CheckedOut> {
    let (target, out) = checkout_target(store, rev)?;
    if store.get_ref(&RefName::Head)?.as_ref() == Some(&target) {
        return Ok(out);
    }
    store.transact(
        Transaction {
            reason: "checkout".into(),
            edits: vec![RefEdit {
                name: RefName::Head,
                expected: PreviousValue::Any,
                new: Some(target),
            }],
            ..Transaction::default()
        },
        durability,
    )?;
    Ok(out)
}

// ---- the seed layout ----

/// The file holding the context state, the message history and the
/// environment state.
pub const STATE_FILE: &str = "state.json";
/// The file holding the display history.
pub const DISPLAY_FILE: &str = "display_messages.json";
/// The file holding the history as stored, when `message_history` is a
/// conversion of it (see [`Seed::raw_history`]).
pub const RAW_FILE: &str = "raw_messages.json";

/// What a runtime needs to start from a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Seed {
    pub context_state: Option<Value>,
    /// The full message history, model-ready: as stored when every message
    /// is already an OpenAI chat message; else (imported Claude Code, Codex,
    /// Agents SDK, ... messages) its conversion by
    /// [`message::chat_history`](crate::message::chat_history).
    pub message_history: Vec<Value>,
    pub environment_state: Option<Value>,
    /// The full display history.
    pub display_messages: Vec<Value>,
    /// The history as stored, byte for byte the same values, when
    /// `message_history` is a conversion of it; `None` when it is not.
    pub raw_history: Option<Vec<Value>>,
}

/// Pretty JSON (2-space indent, keys sorted) and one newline: the same
/// value always gives the same bytes.
fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("a JSON value serializes");
    s.push('\n');
    s
}

impl Seed {
    pub fn load(store: &Store, id: &ObjectId) -> Result<Seed> {
        let odb = store.odb();
        let s = odb.session(id)?;
        let state = |b: Option<ObjectId>| b.map(|b| odb.blob(&b)).transpose();
        let raw = odb.load_messages(id)?;
        let (message_history, raw_history) = if needs_conversion(&raw) {
            (chat_history(&raw), Some(raw))
        } else {
            (raw, None)
        };
        Ok(Seed {
            context_state: state(s.context_state)?,
            message_history,
            raw_history,
            environment_state: state(s.environment_state)?,
            display_messages: odb
                .display_history(id)?
                .iter()
                .map(|m| odb.blob(m))
                .collect::<Result<_>>()?,
        })
    }

    /// The bytes of `state.json`: `{"context_state", "environment_state",
    /// "message_history"}`, absent states as `null`.
    pub fn state_json(&self) -> String {
        pretty(&json!({
            "context_state": self.context_state,
            "message_history": self.message_history,
            "environment_state": self.environment_state,
        }))
    }

    /// The bytes of `display_messages.json`: the display history as an array.
    pub fn display_json(&self) -> String {
        pretty(&Value::Array(self.display_messages.clone()))
    }

    /// Writes `DIR/state.json` and `DIR/display_messages.json` (see
    /// [`Seed::write_all`]) and returns their paths.
    pub fn write(&self, dir: &Path) -> Result<[PathBuf; 2]> {
        self.write_all(dir)?;
        Ok([dir.join(STATE_FILE), dir.join(DISPLAY_FILE)])
    }

    /// Writes `DIR/state.json`, `DIR/display_messages.json` and, when the
    /// history was converted, `DIR/raw_messages.json` (the stored history
    /// as a pretty array), each atomically (a temporary file, synced,
    /// renamed over the old one); removes a `raw_messages.json` an earlier
    /// seed left when this one has none; creates `DIR` when missing.
    /// Returns the paths written.
    pub fn write_all(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let state = dir.join(STATE_FILE);
        let display = dir.join(DISPLAY_FILE);
        let raw = dir.join(RAW_FILE);
        AtomicFile::replace(&state, self.state_json().as_bytes(), Durability::Sync)?;
        AtomicFile::replace(&display, self.display_json().as_bytes(), Durability::Sync)?;
        let mut out = vec![state, display];
        match &self.raw_history {
            Some(h) => {
                let bytes = pretty(&Value::Array(h.clone()));
                AtomicFile::replace(&raw, bytes.as_bytes(), Durability::Sync)?;
                out.push(raw);
            }
            None => match fs::remove_file(&raw) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&raw, e)),
            },
        }
        Ok(out)
    }
}

// ---- resume ----

/// How much of the first user message a description keeps.
pub const DESCRIPTION_CHARS: usize = 200;
/// How much of its first line a first topic keeps.
pub const FIRST_TOPIC_CHARS: usize = 80;

/// What a runtime resumes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// The history to give the model: the session's history, which after a
    /// compaction starts with the checkpoint summary; model-ready chat as
    /// `state.json`'s `message_history` is (converted through the
    /// normalized view when its messages are not all chat messages).
    pub history: Vec<Value>,
    /// The history as stored, when `history` is a conversion of it (an
    /// imported session): what `raw_messages.json` holds.
    pub raw_history: Option<Vec<Value>>,
    /// For display only.
    pub summary: ResumeSummary,
}

/// A conversation at a glance, for people.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeSummary {
    pub session: ObjectId,
    pub conversation: ObjectId,
    /// The newest title along the first-parent chain.
    pub title: Option<String>,
    /// When the conversation's first session was created (ms since the
    /// epoch): its root, or the first session of the chain.
    pub created: i64,
    /// When the session was created.
    pub last_activity: i64,
    /// Messages of `history` by role, as [`view`] reads them: `system`,
    /// `user`, `assistant`, `tool`, and `meta` for lines that are not part
    /// of the conversation
    /// (`unknown` for a message of no shape sessctl reads).
    pub messages: BTreeMap<String, u64>,
    pub message_count: u64,
    /// The title, or else the first user message cut to 200 characters.
    pub description: String,
    /// The first line of the first user message, cut to 80 characters.
    pub first_topic: String,
    /// The compaction the history starts from, if it was compacted.
    pub compaction: Option<Compaction>,
    /// What the sessions of its line cost: the first-parent chain back to
    /// the conversation's first session.
    pub usage: Usage,
}

/// The compaction record of the session where `id`'s history starts (the
/// first session back along first parents that keeps nothing of its parent).
fn history_origin(odb: &Odb, id: &ObjectId) -> Result<Option<Compaction>> {
    let mut at = *id;
    loop {
        let s = odb.session(&at)?;
        match s.first_parent() {
            Some(p) if s.messages.base > 0 => at = p,
            _ => return Ok(s.compaction),
        }
    }
}

/// Compactions nested deeper than this are not followed for the first topic.
const MAX_COMPACTION_DEPTH: usize = 64;

/// The first user message of the conversation as it was written: before
/// any compaction, and never a checkpoint.
fn first_user_text(odb: &Odb, id: &ObjectId, depth: usize) -> Result<Option<String>> {
    if depth < MAX_COMPACTION_DEPTH {
        if let Some(c) = history_origin(odb, id)? {
            if let Some(t) = first_user_text(odb, &c.session, depth + 1)? {
                return Ok(Some(t));
            }
        }
    }
    for m in odb.history(id)? {
        let v = odb.blob(&m)?;
        if v.get(CHECKPOINT_MESSAGE_KEY).is_some() {
            continue;
        }
        if let Some(t) = user_text(&v) {
            return Ok(Some(t));
        }
    }
    Ok(None)
}

/// The resume payload of a session.
pub fn resume(store: &Store, id: &ObjectId) -> Result<Resume> {
    let odb = store.odb();
    let head = odb.session(id)?;
    let conversation = head.conversation_id(*id);
    let stored = odb.load_messages(id)?;

    let mut title = None;
    let mut at = *id;
    let mut usage = Usage::default();
    let created = loop {
        let s = odb.session(&at)?;
        if title.is_none() {
            title = s.title.clone();
        }
        let u = s.run.usage;
        usage.total_tokens = usage.total_tokens.saturating_add(u.total_tokens);
        usage.prompt_tokens = usage.prompt_tokens.saturating_add(u.prompt_tokens);
        usage.completion_tokens = usage.completion_tokens.saturating_add(u.completion_tokens);
        usage.requests = usage.requests.saturating_add(u.requests);
        match s.first_parent() {
            Some(p) if at != conversation => at = p,
            _ => break s.created_at,
        }
    };

    let mut messages: BTreeMap<String, u64> = BTreeMap::new();
    for m in &stored {
        let v = view(m);
        let role = match (v.meta, v.shape) {
            (true, Shape::Unknown) => "unknown",
            (true, _) => "meta",
            (false, _) => v.role.as_str(),
        };
        *messages.entry(role.to_owned()).or_default() += 1;
    }
    let first = first_user_text(odb, id, 0)?.unwrap_or_default();
    let description = match &title {
        Some(t) => t.clone(),
        None => first.chars().take(DESCRIPTION_CHARS).collect(),
    };
    let message_count = stored.len() as u64;
    let (history, raw_history) = if needs_conversion(&stored) {
        (chat_history(&stored), Some(stored))
    } else {
        (stored, None)
    };
    let first_topic = first
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(FIRST_TOPIC_CHARS)
        .collect();
    Ok(Resume {
        summary: ResumeSummary {
            session: *id,
            conversation,
            title,
            created,
            last_activity: head.created_at,
            message_count,
            messages,
            description,
            first_topic,
            compaction: history_origin(odb, id)?,
            usage,
        },
        history,
        raw_history,
    })
}

impl ResumeSummary {
    /// The JSON form of a resume summary (`sessctl resume --json`).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::{json, Map, Value};
        json!({
            "session": self.session.to_hex(),
            "conversation": self.conversation.to_hex(),
            "title": self.title,
            "created": self.created,
            "last_activity": self.last_activity,
            "messages": Value::Object(self.messages.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<Map<_, _>>()),
            "message_count": self.message_count,
            "description": self.description,
            "first_topic": self.first_topic,
            "compaction": self.compaction.map(|c| json!({
                "session": c.session.to_hex(),
                "messages": c.messages,
                "summary": c.summary.to_hex(),
            })),
            "usage": {
                "total_tokens": self.usage.total_tokens,
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
                "requests": self.usage.requests,
            },
        })
    }
}
