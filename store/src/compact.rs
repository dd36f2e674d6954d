//! Lossless compaction: a conversation's early messages replaced by a
//! summary, in a new session whose first parent is the old head.
//!
//! This module owns the summarizer interface, the checkpoint format, one-shot
//! compaction and auto-compaction after commits. It never rewrites or drops a
//! session: a compaction is a commit like any other (objects-format.md,
//! "History": `base` 0, the summary and the kept tail, a `compaction` record),
//! checked against the head it summarised, so `log` and `diff` still reach
//! every message through the parent.
//!
//! # The checkpoint message
//!
//! A structured checkpoint becomes one message of the new history:
//!
//! ```json
//! {"role": "user", "content": "<rendered text>", "sessctl_checkpoint": {"completed": [...], ...}}
//! ```
//!
//! The rendered text ([`Checkpoint::render`]) is, byte for byte, the line
//! `[sessctl checkpoint] Summary of the conversation so far:` followed, for
//! each of Completed, In progress, Pending, Blockers and Decisions in that
//! order, by a blank line, the line `## <heading>`, and one line `- <item>`
//! per item, or the line `(none)` when there is none. There is no trailing
//! newline. `sessctl_checkpoint` holds the checkpoint object with all five
//! keys; a runtime whose model API refuses unknown message keys strips it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::message::is_tool_result;
use crate::object::{Blob, Compaction, RunSummary, SessionMetadata};
use crate::odb::Durability;
use crate::store::{AfterCommit, AfterCommitError, Messages, Store, Turn};

/// The keys of a checkpoint object, in the order they are rendered.
pub const CHECKPOINT_KEYS: [&str; 5] = [
    "completed",
    "in_progress",
    "pending",
    "blockers",
    "decisions",
];

const CHECKPOINT_HEADINGS: [&str; 5] = [
    "Completed",
    "In progress",
    "Pending",
    "Blockers",
    "Decisions",
];

/// The first line of a rendered checkpoint.
pub const CHECKPOINT_TITLE: &str = "[sessctl checkpoint] Summary of the conversation so far:";

/// The message key that carries the checkpoint object.
pub const CHECKPOINT_MESSAGE_KEY: &str = crate::message::CHECKPOINT_MESSAGE_KEY;

/// Where the work stood when the conversation was compacted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checkpoint {
    pub completed: Vec<String>,
    pub in_progress: Vec<String>,
    pub pending: Vec<String>,
    pub blockers: Vec<String>,
    pub decisions: Vec<String>,
}

impl Checkpoint {
    fn lists(&self) -> [&Vec<String>; 5] {
        [
            &self.completed,
            &self.in_progress,
            &self.pending,
            &self.blockers,
            &self.decisions,
        ]
    }

    /// Reads a checkpoint object: any of [`CHECKPOINT_KEYS`], each an array of
    /// strings; missing keys are empty, other keys are refused.
    pub fn from_value(v: &Value) -> std::result::Result<Checkpoint, String> {
        let Value::Object(map) = v else {
            return Err("a checkpoint must be a JSON object".into());
        };
        let mut c = Checkpoint::default();
        for (k, items) in map {
            let slot = match k.as_str() {
                "completed" => &mut c.completed,
                "in_progress" => &mut c.in_progress,
                "pending" => &mut c.pending,
                "blockers" => &mut c.blockers,
                "decisions" => &mut c.decisions,
                _ => {
                    return Err(format!(
                        "unknown checkpoint key {k:?} (expected any of {})",
                        CHECKPOINT_KEYS.join(", ")
                    ))
                }
            };
            let Value::Array(items) = items else {
                return Err(format!("checkpoint key {k} must be an array of strings"));
            };
            for item in items {
                match item {
                    Value::String(s) => slot.push(s.clone()),
                    _ => return Err(format!("checkpoint key {k} must be an array of strings")),
                }
            }
        }
        Ok(c)
    }

    /// The checkpoint object with all five keys.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        for (k, items) in CHECKPOINT_KEYS.iter().zip(self.lists()) {
            map.insert((*k).to_owned(), json!(items));
        }
        Value::Object(map)
    }

    /// The text a model reads (see the module documentation).
    pub fn render(&self) -> String {
        let mut t = String::from(CHECKPOINT_TITLE);
        for (heading, items) in CHECKPOINT_HEADINGS.iter().zip(self.lists()) {
            t.push_str("\n\n## ");
            t.push_str(heading);
            if items.is_empty() {
                t.push_str("\n(none)");
            }
            for item in items {
                t.push_str("\n- ");
                t.push_str(item);
            }
        }
        t
    }

    /// The one message that stands for the checkpoint in the history.
    pub fn to_message(&self) -> Value {
        json!({
            "role": "user",
            "content": self.render(),
            CHECKPOINT_MESSAGE_KEY: self.to_value(),
        })
    }
}

/// What a summarizer returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Summary {
    /// A structured checkpoint; becomes one message.
    Checkpoint(Checkpoint),
    /// Summary messages, used as they are (never empty).
    Messages(Vec<Value>),
}

impl Summary {
    /// Reads a summarizer's answer: a checkpoint object or a non-empty array
    /// of message objects.
    pub fn from_value(v: Value) -> std::result::Result<Summary, String> {
        match v {
            Value::Object(_) => Checkpoint::from_value(&v).map(Summary::Checkpoint),
            Value::Array(items) => {
                if items.is_empty() {
                    return Err("an empty array of summary messages".into());
                }
                if let Some(k) = items.iter().position(|m| !m.is_object()) {
                    return Err(format!("summary message {} is not a JSON object", k + 1));
                }
                Ok(Summary::Messages(items))
            }
            _ => Err("expected a checkpoint object or an array of messages".into()),
        }
    }

    /// The value recorded as the compaction's summary blob: the checkpoint
    /// object (all five keys) or the array of messages.
    pub fn to_value(&self) -> Value {
        match self {
            Summary::Checkpoint(c) => c.to_value(),
            Summary::Messages(m) => Value::Array(m.clone()),
        }
    }

    /// The messages that open the compacted history.
    pub fn messages(&self) -> Vec<Value> {
        match self {
            Summary::Checkpoint(c) => vec![c.to_message()],
            Summary::Messages(m) => m.clone(),
        }
    }
}

/// Summarises the part of a history being compacted. The library runs no
/// program itself: the CLI's `--summarizer COMMAND` is a summarizer of its
/// own, and a runtime passes a closure that calls its model.
pub trait Summarizer {
    /// `history` is the messages to replace, oldest first. An error is one
    /// line saying what went wrong.
    fn summarize(&self, history: &[Value]) -> std::result::Result<Summary, String>;
}

impl<F> Summarizer for F
where
    F: Fn(&[Value]) -> std::result::Result<Summary, String>,
{
    fn summarize(&self, history: &[Value]) -> std::result::Result<Summary, String> {
        self(history)
    }
}

/// The estimated prompt size of a history in tokens: the bytes of its
/// canonical JSON (compact, keys sorted) divided by 4.
pub fn estimate_tokens(history: &[Value]) -> u64 {
    let bytes = serde_json::to_vec(history).map_or(0, |b| b.len());
    bytes as u64 / 4
}

/// Whether an estimate has reached `threshold` × `max_tokens`.
pub fn threshold_reached(estimate: u64, max_tokens: u64, threshold: f64) -> bool {
    estimate as f64 >= threshold * max_tokens as f64
}

/// How many leading messages a compaction that keeps `keep_last` summarises.
///
/// The cut moves earlier while the kept tail would start with a tool
/// result: a result without the call that asked for it is refused by model
/// APIs, so the call and its results stay together in the tail.
pub fn cut_point(history: &[Value], keep_last: usize) -> usize {
    let mut cut = history.len().saturating_sub(keep_last);
    while cut > 0 && cut < history.len() && is_tool_result(&history[cut]) {
        cut -= 1;
    }
    cut
}

/// Compacts a conversation's head: its first messages (all but the last
/// `keep_last`, see [`cut_point`]) are replaced by `summarizer`'s summary.
/// Returns the new session. A summarizer that fails or answers garbage
/// leaves the conversation as it was.
pub fn compact(
    store: &Store,
    conversation: &str,
    summarizer: &dyn Summarizer,
    keep_last: usize,
) -> Result<ObjectId> {
    let info = store
        .conversation(conversation)?
        .ok_or_else(|| Error::NoSuchConversation {
            name: conversation.to_owned(),
        })?;
    let head = info.head.ok_or_else(|| Error::NoHeadYet {
        name: conversation.to_owned(),
    })?;
    compact_at(
        store,
        conversation,
        head,
        summarizer,
        keep_last,
        Durability::Sync,
    )
}

/// [`compact`] of a given head: the commit fails with `RefOutOfDate` when the
/// conversation has moved on since.
pub fn compact_at(
    store: &Store,
    conversation: &str,
    head: ObjectId,
    summarizer: &dyn Summarizer,
    keep_last: usize,
    durability: Durability,
) -> Result<ObjectId> {
    let session = store.odb().session(&head)?;
    let history = store.load_messages(&head)?;
    let cut = cut_point(&history, keep_last);
    if cut == 0 {
        return Err(Error::NothingToCompact {
            conversation: conversation.to_owned(),
            messages: history.len() as u64,
            keep_last,
        });
    }
    let started = Instant::now();
    let summary =
        summarizer
            .summarize(&history[..cut])
            .map_err(|reason| Error::SummarizerFailed {
                conversation: conversation.to_owned(),
                reason,
            })?;
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let summary_value = Blob::new(summary.to_value())?.into_value();
    let mut messages = summary.messages();
    messages.extend_from_slice(&history[cut..]);
    // The summary is written first: should the commit fail, it is an
    // unreferenced blob, which gc collects.
    let summary_id = store.odb().put_blob(&summary_value, durability)?;
    let turn = Turn {
        messages: Messages::Added(messages),
        // The display history stays as it was: people still see every turn.
        display: Some(Messages::Added(Vec::new())),
        run: RunSummary {
            duration_ms,
            ..RunSummary::default()
        },
        metadata: SessionMetadata {
            session_type: session.metadata.session_type,
            preset_id: session.metadata.preset_id.clone(),
            ..SessionMetadata::default()
        },
        ..Turn::default()
    };
    store.commit_with(
        conversation,
        Some(head),
        turn,
        &[],
        None,
        Some(Compaction {
            session: head,
            messages: cut as u64,
            summary: summary_id,
        }),
        durability,
    )
}

/// Compaction a store applies after each commit, continuation, merge or run
/// commit, when the new head's estimated prompt size ([`estimate_tokens`])
/// reaches `threshold` × `max_tokens`. It is the store's after-commit hook
/// ([`AfterCommit`]).
#[derive(Clone)]
pub struct AutoCompaction {
    pub max_tokens: u64,
    /// A fraction of `max_tokens`; 0.9 by default.
    pub threshold: f64,
    pub keep_last: usize,
    pub summarizer: Arc<dyn Summarizer + Send + Sync>,
    estimates: Arc<Estimates>,
}

impl AutoCompaction {
    pub const DEFAULT_THRESHOLD: f64 = 0.9;

    pub fn new(
        max_tokens: u64,
        keep_last: usize,
        summarizer: Arc<dyn Summarizer + Send + Sync>,
    ) -> Self {
        AutoCompaction {
            max_tokens,
            threshold: Self::DEFAULT_THRESHOLD,
            keep_last,
            summarizer,
            estimates: Arc::default(),
        }
    }

    /// [`estimate_tokens`] of `session`'s history, from its parent's
    /// estimate and its new messages when this auto-compaction has seen the
    /// parent (a whole-history load otherwise).
    pub fn estimated_tokens(&self, store: &Store, session: &ObjectId) -> Result<u64> {
        Ok(self.estimates.history_bytes(store, session)? / 4)
    }

    /// Whether `session`'s history has reached the threshold.
    fn due(&self, store: &Store, session: &ObjectId) -> Result<bool> {
        let estimate = self.estimated_tokens(store, session)?;
        Ok(threshold_reached(estimate, self.max_tokens, self.threshold))
    }
}

impl std::fmt::Debug for AutoCompaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AutoCompaction")
            .field("max_tokens", &self.max_tokens)
            .field("threshold", &self.threshold)
            .field("keep_last", &self.keep_last)
            .finish_non_exhaustive()
    }
}

impl AfterCommit for AutoCompaction {
    fn name(&self) -> &'static str {
        "auto-compaction"
    }

    fn after_commit(
        &self,
        store: &Store,
        conversation: &str,
        session: ObjectId,
        durability: Durability,
    ) -> Option<Result<ObjectId>> {
        match self.due(store, &session) {
            Ok(false) => None,
            Ok(true) => Some(compact_at(
                store,
                conversation,
                session,
                &*self.summarizer,
                self.keep_last,
                durability,
            )),
            Err(e) => Some(Err(e)),
        }
    }
}

/// The sizes [`estimate_tokens`] starts from (the bytes of a history's
/// canonical JSON) of heads auto-compaction has seen, so that a
/// continuation costs only its new messages rather than a load of its whole
/// history. Bounded: it forgets everything when full.
#[derive(Debug, Default)]
struct Estimates(Mutex<HashMap<ObjectId, (u64, u64)>>);

impl Estimates {
    const CAPACITY: usize = 4096;

    /// The bytes of `serde_json::to_vec(history)` for `session`'s history:
    /// its parent's known size plus its added messages when it continues a
    /// head seen before, else measured from the whole history.
    fn history_bytes(&self, store: &Store, session: &ObjectId) -> Result<u64> {
        let s = store.odb().session(session)?;
        let known = match (s.first_parent(), &s.compaction) {
            (Some(p), None) => self.get(&p),
            _ => None,
        };
        let bytes = match known {
            // A JSON array of n values is 2 + their sizes + (n - 1) commas.
            Some((len, bytes)) if len == s.messages.base => {
                let mut total = bytes;
                for (k, value) in store.odb().blobs(&s.messages.added)?.iter().enumerate() {
                    let comma = u64::from(len > 0 || k > 0);
                    total += json_len(value) + comma;
                }
                total
            }
            _ => json_len(&Value::Array(store.odb().load_messages(session)?)),
        };
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= Self::CAPACITY {
            map.clear();
        }
        map.insert(*session, (s.messages.len(), bytes));
        Ok(bytes)
    }

    fn get(&self, id: &ObjectId) -> Option<(u64, u64)> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .copied()
    }
}

fn json_len(v: &Value) -> u64 {
    serde_json::to_vec(v).map_or(0, |b| b.len() as u64)
}

/// An auto-compaction that failed after a commit that stands.
pub type AutoCompactionError = AfterCommitError;

/// What [`Store::commit_and_compact`] did.
#[derive(Debug)]
pub struct CommitOutcome {
    /// The committed session.
    pub session: ObjectId,
    /// `None`: no compaction was due (or none is configured); otherwise the
    /// compaction session, or why compacting failed (the commit stands).
    pub compaction: Option<Result<ObjectId>>,
}

impl CommitOutcome {
    /// The conversation's head after the call: the compaction when it
    /// succeeded, else the committed session.
    pub fn head(&self) -> ObjectId {
        match &self.compaction {
            Some(Ok(id)) => *id,
            _ => self.session,
        }
    }
}

impl Store {
    /// Sets (or with `None` clears) the compaction applied after commits.
    ///
    /// [`Store::commit`], [`Store::merge`] and [`Store::commit_run`] return
    /// the committed session either way; a compaction that fails leaves that
    /// commit in place and is reported by
    /// [`Store::take_auto_compaction_errors`]. [`Store::commit_and_compact`]
    /// returns both outcomes instead.
    pub fn set_auto_compaction(&self, auto: Option<AutoCompaction>) {
        self.set_after_commit(auto.map(|a| Arc::new(a) as Arc<dyn AfterCommit>));
    }

    /// The compaction applied after commits, if that is the store's
    /// after-commit hook.
    pub fn auto_compaction(&self) -> Option<AutoCompaction> {
        let hook: Arc<dyn std::any::Any + Send + Sync> = self.after_commit_hook()?;
        hook.downcast::<AutoCompaction>().ok().map(|a| (*a).clone())
    }

    /// Auto-compactions that failed since the last call, oldest first.
    pub fn take_auto_compaction_errors(&self) -> Vec<AutoCompactionError> {
        self.take_after_commit_errors()
    }

    /// Commits a turn like [`Store::commit`], then applies auto-compaction
    /// and returns both outcomes (a failed compaction is returned here, not
    /// kept for [`Store::take_auto_compaction_errors`]).
    pub fn commit_and_compact(
        &self,
        name: &str,
        expected_head: Option<ObjectId>,
        turn: Turn,
        durability: Durability,
    ) -> Result<CommitOutcome> {
        let session = self.commit_with(name, expected_head, turn, &[], None, None, durability)?;
        Ok(CommitOutcome {
            session,
            compaction: self.run_after_commit(name, session, durability),
        })
    }
}
