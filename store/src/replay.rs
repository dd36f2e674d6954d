//! Replay: a conversation read back turn by turn, and cassettes that answer
//! a re-run of an agent loop from what was recorded.
//!
//! A **turn** is one session along the first-parent chain from the root. What
//! the model saw in it is its parent's history cut to `messages.base`,
//! followed by the turn's new inputs: the messages it added before the
//! model's first answer (a user message, the results of deferred tool calls).
//!
//! A **cassette** keys each model request by the canonical hash of the
//! history the model was given (the id of that JSON array as a blob:
//! `Blob::new(Value::Array(history)).encode().id()`), and maps it to what the
//! model answered. A request is one run of consecutive model messages
//! (assistant messages, Codex function calls) in a turn: it was asked with
//! everything before it. A loop that calls the model once per user message
//! makes one request per turn; a tool loop makes one per round trip.
//! Compaction sessions are skipped: no model answered there.
//!
//! Message shapes understood: OpenAI chat (`role`, `tool_calls`, role `tool`),
//! Anthropic / Claude (`tool_use` and `tool_result` content parts, Claude
//! Code lines with `type` and `message`), and Codex items (`function_call`,
//! `function_call_output`). This module only reads the store.

use std::collections::HashMap;

use serde_json::Value;

use crate::error::Result;
use crate::hash::ObjectId;
use crate::object::{Blob, Compaction, SessionStatus, Usage};
use crate::store::Store;

pub use crate::message::{
    is_model_output, is_tool_result, role_of, tool_calls, tool_results, ToolCall, ToolResult,
};

// ---- replay ----

/// One turn: a session of the first-parent chain.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayTurn {
    /// 1 for the root.
    pub number: usize,
    pub session: ObjectId,
    pub parent: Option<ObjectId>,
    /// How many of the parent's messages the model saw.
    pub base: u64,
    /// The messages the turn added before the model's first answer.
    pub input: Vec<Value>,
    /// The length of the history the model saw: `base` + the inputs.
    pub request_len: u64,
    /// The messages the model produced (see [`is_model_output`]).
    pub output: Vec<Value>,
    pub tool_calls: Vec<ToolCall>,
    pub tool_results: Vec<ToolResult>,
    pub usage: Usage,
    pub duration_ms: u64,
    pub status: SessionStatus,
    pub created_at: i64,
    /// Set on a compaction session: its messages are a summary, not a turn.
    pub compaction: Option<Compaction>,
    added: Vec<ObjectId>,
    input_len: usize,
}

/// The turns from the root to a session, along first parents.
#[derive(Debug, Clone)]
pub struct Replay {
    pub turns: Vec<ReplayTurn>,
    messages: HashMap<ObjectId, Value>,
}

impl Replay {
    /// Reads the chain of `id` back to its root, and every message it adds.
    pub fn load(store: &Store, id: &ObjectId) -> Result<Replay> {
        let odb = store.odb();
        let mut chain = Vec::new();
        let mut at = Some(*id);
        while let Some(sid) = at {
            let s = odb.session(&sid)?;
            at = s.first_parent();
            chain.push((sid, s));
        }
        chain.reverse();
        let mut messages: HashMap<ObjectId, Value> = HashMap::new();
        let mut turns = Vec::with_capacity(chain.len());
        for (k, (sid, s)) in chain.into_iter().enumerate() {
            for m in &s.messages.added {
                if !messages.contains_key(m) {
                    messages.insert(*m, odb.blob(m)?);
                }
            }
            let added: Vec<&Value> = s.messages.added.iter().map(|m| &messages[m]).collect();
            let input_len = added
                .iter()
                .position(|m| is_model_output(m))
                .unwrap_or(added.len());
            let output: Vec<Value> = added
                .iter()
                .filter(|m| is_model_output(m))
                .map(|m| (*m).clone())
                .collect();
            let tool_calls = added.iter().flat_map(|m| tool_calls(m)).collect();
            let tool_results = added.iter().flat_map(|m| tool_results(m)).collect();
            let input = added[..input_len].iter().map(|m| (*m).clone()).collect();
            turns.push(ReplayTurn {
                number: k + 1,
                session: sid,
                parent: s.first_parent(),
                base: s.messages.base,
                input,
                request_len: s.messages.base + input_len as u64,
                output,
                tool_calls,
                tool_results,
                usage: s.run.usage,
                duration_ms: s.run.duration_ms,
                status: s.status,
                created_at: s.created_at,
                compaction: s.compaction,
                added: s.messages.added.clone(),
                input_len,
            });
        }
        Ok(Replay { turns, messages })
    }

    fn value(&self, id: &ObjectId) -> Value {
        self.messages
            .get(id)
            .cloned()
            .expect("every message of the chain was loaded")
    }

    /// The full history the model saw at turn `index` (0-based into
    /// `turns`): the parent's history cut to `base`, then the turn's inputs.
    pub fn request(&self, index: usize) -> Vec<Value> {
        let mut history: Vec<ObjectId> = Vec::new();
        for t in &self.turns[..index] {
            history.truncate(t.base as usize);
            history.extend_from_slice(&t.added);
        }
        let t = &self.turns[index];
        history.truncate(t.base as usize);
        history.extend_from_slice(&t.added[..t.input_len]);
        history.iter().map(|m| self.value(m)).collect()
    }

    /// Every model request of the chain, in order: (turn index, the history
    /// the model was given, what it answered).
    fn requests(&self) -> Vec<(usize, Vec<ObjectId>, Vec<ObjectId>)> {
        let mut out = Vec::new();
        let mut history: Vec<ObjectId> = Vec::new();
        for (k, t) in self.turns.iter().enumerate() {
            history.truncate(t.base as usize);
            if t.compaction.is_none() {
                let mut i = 0;
                while i < t.added.len() {
                    if !is_model_output(&self.messages[&t.added[i]]) {
                        i += 1;
                        continue;
                    }
                    let start = i;
                    while i < t.added.len() && is_model_output(&self.messages[&t.added[i]]) {
                        i += 1;
                    }
                    let mut request = history.clone();
                    request.extend_from_slice(&t.added[..start]);
                    out.push((k, request, t.added[start..i].to_vec()));
                }
            }
            history.extend_from_slice(&t.added);
        }
        out
    }
}

// ---- cassettes ----

/// One recorded model request.
#[derive(Debug, Clone, PartialEq)]
pub struct CassetteEntry {
    /// The canonical hash of the history the model was given.
    pub request: ObjectId,
    pub request_len: usize,
    pub answer: Vec<Value>,
    /// The session (turn) it was recorded in.
    pub session: ObjectId,
}

/// What a recorded run's model answered, keyed by the history it was asked
/// with.
#[derive(Debug, Clone, Default)]
pub struct Cassette {
    entries: Vec<CassetteEntry>,
    by_request: HashMap<ObjectId, usize>,
}

impl Cassette {
    /// The canonical hash of a request history: the id of the JSON array as
    /// a blob. Fails only for values nested deeper than a blob may be.
    pub fn request_id(history: &[Value]) -> Result<ObjectId> {
        Ok(Blob::new(Value::Array(history.to_vec()))?.encode().id())
    }

    /// Records the model requests of the chain from the root to `id`.
    pub fn from_session(store: &Store, id: &ObjectId) -> Result<Cassette> {
        let replay = Replay::load(store, id)?;
        Cassette::from_replay(&replay)
    }

    pub fn from_replay(replay: &Replay) -> Result<Cassette> {
        let mut c = Cassette::default();
        for (k, request, answer) in replay.requests() {
            let values: Vec<Value> = request.iter().map(|m| replay.value(m)).collect();
            let entry = CassetteEntry {
                request: Cassette::request_id(&values)?,
                request_len: values.len(),
                answer: answer.iter().map(|m| replay.value(m)).collect(),
                session: replay.turns[k].session,
            };
            // The first answer to a request wins, as a model would give it first.
            c.by_request.entry(entry.request).or_insert(c.entries.len());
            c.entries.push(entry);
        }
        Ok(c)
    }

    /// What the model answered to this history, if it was ever asked it.
    pub fn answer(&self, history: &[Value]) -> Option<&[Value]> {
        let id = Cassette::request_id(history).ok()?;
        self.by_request
            .get(&id)
            .map(|&k| self.entries[k].answer.as_slice())
    }

    /// The number of recorded model requests.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The recorded requests, in order.
    pub fn entries(&self) -> &[CassetteEntry] {
        &self.entries
    }

    /// A player for a re-run that must ask what the record asked, in order.
    pub fn player(&self) -> Player<'_> {
        Player {
            cassette: self,
            next: 0,
            diverged: None,
        }
    }
}

/// Where a re-run stopped asking what the record asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The model request (1-based) at which it diverged: in a loop that asks
    /// the model once per user message, the turn.
    pub turn: usize,
    /// The hash of the history the record asked with; `None` past the end of
    /// the record.
    pub expected: Option<ObjectId>,
    /// The hash of the history the re-run asked with; `None` when it cannot
    /// be hashed (nested deeper than a blob may be).
    pub actual: Option<ObjectId>,
    /// The session the expected request was recorded in.
    pub session: Option<ObjectId>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |id: &Option<ObjectId>| id.map_or("nothing".to_owned(), |i| i.to_string());
        write!(
            f,
            "the run diverged from the record at turn {}: expected history {}, found {}",
            self.turn,
            show(&self.expected),
            show(&self.actual)
        )
    }
}

impl std::error::Error for Divergence {}

/// Answers a re-run's model requests from a cassette, in order, and stops at
/// the first request that differs from the record.
#[derive(Debug, Clone)]
pub struct Player<'a> {
    cassette: &'a Cassette,
    next: usize,
    diverged: Option<Divergence>,
}

impl<'a> Player<'a> {
    /// The recorded answer when `history` is exactly what the record asked
    /// at this point; otherwise the divergence, which every later call
    /// returns too.
    pub fn answer(&mut self, history: &[Value]) -> std::result::Result<&'a [Value], Divergence> {
        if let Some(d) = &self.diverged {
            return Err(d.clone());
        }
        let actual = Cassette::request_id(history).ok();
        let expected = self.cassette.entries.get(self.next);
        match expected {
            Some(e) if Some(e.request) == actual => {
                self.next += 1;
                Ok(&e.answer)
            }
            _ => {
                let d = Divergence {
                    turn: self.next + 1,
                    expected: expected.map(|e| e.request),
                    actual,
                    session: expected.map(|e| e.session),
                };
                self.diverged = Some(d.clone());
                Err(d)
            }
        }
    }

    /// How many requests were answered.
    pub fn answered(&self) -> usize {
        self.next
    }

    /// Whether every recorded request was asked and answered.
    pub fn finished(&self) -> bool {
        self.diverged.is_none() && self.next == self.cassette.entries.len()
    }

    pub fn divergence(&self) -> Option<&Divergence> {
        self.diverged.as_ref()
    }
}
