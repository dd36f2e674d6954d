//! Conversations: starting one (create, fork), continuing it (commit,
//! merge), and moving it between active, archived and gone. Each verb
//! builds its sessions (`builder.rs`) and applies one transaction.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::index::{ConversationInfo, Index, SessionInfo};
use crate::object::{Compaction, RunSummary, SessionMetadata, SessionStatus, SessionType};
use crate::odb::Durability;
use crate::refs::{
    validate_name, ConversationRecord, ConversationStatus, ConversationUpdate, PreviousValue,
    RefEdit, RefName, RefTarget, RunEvent, RunEventKind,
};
use crate::time::now_ms;

use super::builder::Built;
use super::{Run, Store, Transaction};

/// The messages of each session whose places [`Store::read_ahead_sessions`]
/// looks up ahead, newest first: a summary line reads back to the last
/// prompt, which is nearly always among the last few (the rest, when it
/// reads further, are looked up as it reads them).
const SUMMARY_MESSAGES_AHEAD: usize = 8;

/// How messages are given to a commit.
#[derive(Debug, Clone)]
pub enum Messages {
    /// Messages appended to the parent's history.
    Added(Vec<Value>),
    /// The full new history; the common prefix with the parent's is kept.
    History(Vec<Value>),
}

impl Default for Messages {
    fn default() -> Self {
        Messages::Added(Vec::new())
    }
}

/// What one turn (one session) adds.
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub messages: Messages,
    /// Display messages; `None` mirrors `messages`.
    pub display: Option<Messages>,
    /// New context state; `None` keeps the parent's.
    pub context_state: Option<Value>,
    /// New environment state; `None` keeps the parent's.
    pub environment_state: Option<Value>,
    /// The session's title; also becomes the conversation's title.
    pub title: Option<String>,
    /// `None` means committed.
    pub status: Option<SessionStatus>,
    pub run: RunSummary,
    pub metadata: SessionMetadata,
    /// `None` means now.
    pub created_at: Option<i64>,
}

/// Where a fork cuts its source's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Keep the first N messages.
    AtMessage(u64),
    /// Keep messages up to and including this one.
    AtMessageId(ObjectId),
}

/// A fork request.
#[derive(Debug, Clone, Default)]
pub struct ForkOptions {
    /// The new conversation's name (default: `fork-<12 hex of the source>`).
    pub name: Option<String>,
    pub cut: Option<Cut>,
    /// Messages the fork adds right away (a fork with neither a cut nor
    /// messages writes no object: it is a new ref at the source).
    pub turn: Option<Turn>,
}

impl Store {
    /// A conversation's summary; its `running` claim only while the
    /// process that made it is alive.
    pub fn conversation(&self, name: &str) -> Result<Option<ConversationInfo>> {
        self.catch_up_reading(&Index::conversation_keys(name))?;
        self.index
            .conversation(name)?
            .map(|i| self.live(i))
            .transpose()
    }

    pub(super) fn require_conversation(&self, name: &str) -> Result<ConversationInfo> {
        validate_name(name)?;
        let info = self
            .conversation(name)?
            .ok_or_else(|| Error::NoSuchConversation {
                name: name.to_owned(),
            })?;
        #[cfg(test)]
        tests::after_record_read();
        Ok(info)
    }

    /// Conversations, newest activity first.
    pub fn conversations(&self, limit: Option<usize>) -> Result<Vec<ConversationInfo>> {
        self.conversations_where(limit, |_| true)
    }

    /// The conversations `keep` accepts, newest activity first, stopping
    /// after `limit` (reads no more records than that takes).
    pub fn conversations_where(
        &self,
        limit: Option<usize>,
        keep: impl Fn(&ConversationInfo) -> bool,
    ) -> Result<Vec<ConversationInfo>> {
        self.catch_up()?;
        self.index
            .conversations_where(limit, keep)?
            .into_iter()
            .map(|i| self.live(i))
            .collect()
    }

    fn live(&self, mut info: ConversationInfo) -> Result<ConversationInfo> {
        if let Some(c) = &info.running {
            if !self.claim_alive(c)? {
                info.running = None;
            }
        }
        Ok(info)
    }

    pub fn session_info(&self, id: &ObjectId) -> Result<Option<SessionInfo>> {
        self.index.session(id)
    }

    /// Tells the store that `ids` are about to be shown (a log's next
    /// entries): on a remote store, their summaries and conversation names
    /// are read in two round trips for the lot rather than one or more
    /// each, and where the objects their summary lines read live
    /// ([`Store::summary_line`]: the session, unless the index has its
    /// title, then the messages it added, newest first) in two more. The
    /// sessions are read here for that (each pack fetched once, as the
    /// entries would), so before the first of them is shown. Nothing for a
    /// local store.
    pub fn read_ahead_sessions(&self, ids: &[ObjectId]) -> Result<()> {
        self.index.read_ahead_sessions(ids)?;
        if !self.index.is_kept() {
            return Ok(());
        }
        let untitled: Vec<ObjectId> = ids
            .iter()
            .filter(|id| !matches!(self.index.session(id), Ok(Some(i)) if i.title.is_some()))
            .copied()
            .collect();
        if untitled.is_empty() {
            return Ok(());
        }
        // A hint: an absent or damaged session stops the reading here, and
        // is met again, and reported, when its entry is shown.
        let backend = self.odb.backend();
        let mut added = Vec::new();
        let _ = backend.read_many(&untitled, &mut |_, kind, payload| {
            if kind == crate::object::ObjectKind::Session {
                if let Ok(s) = crate::object::Session::decode(payload) {
                    let newest = s.messages.added.iter().rev();
                    added.extend(newest.take(SUMMARY_MESSAGES_AHEAD).copied());
                }
            }
            Ok(())
        });
        backend.locate_ahead(&added)
    }

    /// What the index knows of a session; for one it has not seen (not yet
    /// applied, or written by hand), the same figures read from the object,
    /// without a preview.
    pub fn describe_session(&self, id: &ObjectId) -> Result<SessionInfo> {
        if let Some(i) = self.index.session(id)? {
            return Ok(i);
        }
        let s = self.odb.session(id)?;
        Ok(SessionInfo {
            id: *id,
            conversation: s.conversation_id(*id),
            parents: s.parents.clone(),
            status: s.status,
            created_at: s.created_at,
            messages: self.odb.history(id)?.len() as u64,
            display_messages: self.odb.display_history(id)?.len() as u64,
            usage: s.run.usage,
            duration_ms: s.run.duration_ms,
            preview: String::new(),
            preview_at: None,
            title: s.title.clone(),
            session_type: s.metadata.session_type,
        })
    }

    /// The line a log entry shows: the title, else the first line of the
    /// last prompt the session added, else of its history's first one, else
    /// (a session of context alone) its messages counted by role, as
    /// `(1 system, 1 meta)`.
    pub fn summary_line(&self, info: &SessionInfo) -> Result<String> {
        if let Some(t) = &info.title {
            return Ok(crate::message::first_line(t));
        }
        let s = self.odb.session(&info.id)?;
        for m in s.messages.added.iter().rev() {
            if let Some(text) = crate::message::user_text(&self.odb.blob(m)?) {
                return Ok(crate::message::first_line(&text));
            }
        }
        let line = crate::message::first_line(&info.preview);
        if !line.is_empty() || s.messages.added.is_empty() {
            return Ok(line);
        }
        // No prompt anywhere yet (a session of context alone: system
        // instructions, Claude Code's caveat): what it holds, by role.
        let mut roles: std::collections::BTreeMap<&str, usize> = Default::default();
        for m in &s.messages.added {
            let v = crate::message::view(&self.odb.blob(m)?);
            *roles
                .entry(if v.meta { "meta" } else { v.role.as_str() })
                .or_default() += 1;
        }
        let parts: Vec<String> = roles.iter().map(|(r, n)| format!("{n} {r}")).collect();
        Ok(format!("({})", parts.join(", ")))
    }

    /// One `sessctl log --json` entry; `refs` are the full names of the refs
    /// at the session (`HEAD` first).
    pub fn log_entry_json(&self, id: &ObjectId, refs: Vec<String>) -> Result<Value> {
        let i = self.describe_session(id)?;
        let u = &i.usage;
        Ok(serde_json::json!({
            "id": id.to_hex(),
            "parents": i.parents.iter().map(ObjectId::to_hex).collect::<Vec<_>>(),
            "conversation": i.conversation.to_hex(),
            "conversation_name": self.index.conversation_name(&i.conversation)?,
            "status": i.status.as_str(),
            "created_at": i.created_at,
            "messages": i.messages,
            "usage": {"total_tokens": u.total_tokens, "prompt_tokens": u.prompt_tokens,
                      "completion_tokens": u.completion_tokens, "requests": u.requests},
            "title": i.title,
            "summary": self.summary_line(&i)?,
            "refs": refs,
        }))
    }

    /// The conversation `HEAD` names, if it names one.
    pub fn head_conversation(&self) -> Result<Option<String>> {
        self.catch_up()?;
        Ok(match self.index.get_ref(&RefName::Head)? {
            Some(RefTarget::Symbolic(RefName::Conversation(n))) => Some(n),
            _ => None,
        })
    }

    /// Starts a conversation with a root session; returns its name and the
    /// session. The name defaults to the first 12 hex digits of the root's
    /// id. `HEAD` moves to it.
    ///
    /// An async subagent's session (metadata `session_type` async_subagent
    /// with `spawned_by`) belongs to its spawner's conversation
    /// (objects-format.md, "Conversation"): it carries the spawner's
    /// conversation id, and so do the sessions committed on it, which count
    /// for the spawner's conversation.
    pub fn create(
        &self,
        name: Option<&str>,
        turn: Turn,
        durability: Durability,
    ) -> Result<(String, ObjectId)> {
        if let Some(n) = name {
            validate_name(n)?;
        }
        let title = turn.title.clone();
        let preset = turn.metadata.preset_id.clone();
        let carried = match (turn.metadata.session_type, turn.metadata.spawned_by) {
            (SessionType::AsyncSubagent, Some(spawner)) => {
                Some(self.spawner_conversation(&spawner)?)
            }
            _ => None,
        };
        let built = self.build_session(None, carried, turn, &[], None, None)?;
        let id = built.id;
        let created_at = built.session.created_at;
        let name = name
            .map(str::to_owned)
            .unwrap_or_else(|| id.to_hex_prefix(12));
        if self.index.conversation(&name)?.is_some() {
            return Err(Error::ConversationExists { name });
        }
        let record = ConversationRecord {
            conversation_id: Some(carried.unwrap_or(id)),
            title,
            default_preset_id: preset,
            metadata: BTreeMap::new(),
            status: ConversationStatus::Active,
            created_at,
            updated_at: created_at,
        };
        self.start_conversation("create", &name, id, record, Some(built), true, durability)?;
        Ok((name, id))
    }

    /// The conversation id of the session that spawned a subagent.
    fn spawner_conversation(&self, spawner: &ObjectId) -> Result<ObjectId> {
        if let Some(ix) = self.lineage_index() {
            if let Some(c) = ix.position(spawner).and_then(|p| ix.conversation(p)) {
                return Ok(c);
            }
        }
        if let Some(info) = self.index.session(spawner)? {
            return Ok(info.conversation);
        }
        Ok(self.odb.session(spawner)?.conversation_id(*spawner))
    }

    /// Commits a turn on a conversation's head (a continuation). With
    /// `expected_head`, the head must still be that session.
    pub fn commit(
        &self,
        name: &str,
        expected_head: Option<ObjectId>,
        turn: Turn,
        durability: Durability,
    ) -> Result<ObjectId> {
        let id = self.commit_with(name, expected_head, turn, &[], None, None, durability)?;
        self.after_commit_recorded(name, id);
        Ok(id)
    }

    /// Commits a session with several parents: the head and `others` (for
    /// example a subagent's result merged back).
    pub fn merge(
        &self,
        name: &str,
        others: &[ObjectId],
        turn: Turn,
        durability: Durability,
    ) -> Result<ObjectId> {
        let id = self.commit_with(name, None, turn, others, None, None, durability)?;
        self.after_commit_recorded(name, id);
        Ok(id)
    }

    /// With `compaction`, the session replaces the whole history (base 0)
    /// and records what it summarised; the operation's reason is `compact`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn commit_with(
        &self,
        name: &str,
        expected_head: Option<ObjectId>,
        turn: Turn,
        extra_parents: &[ObjectId],
        run: Option<&Run>,
        compaction: Option<Compaction>,
        durability: Durability,
    ) -> Result<ObjectId> {
        let info = self.require_conversation(name)?;
        if info.record.status == ConversationStatus::Archived {
            return Err(Error::ConversationArchived {
                name: name.to_owned(),
            });
        }
        let head = info.head.ok_or_else(|| Error::NoSuchConversation {
            name: name.to_owned(),
        })?;
        if let Some(e) = expected_head {
            let expected = PreviousValue::MustMatch(RefTarget::Session(e));
            let actual = RefTarget::Session(head);
            if !expected.matches(Some(&actual)) {
                return Err(Error::ref_out_of_date(
                    &RefName::conversation(name)?,
                    &expected,
                    Some(&actual),
                ));
            }
        }
        // A fork's first commit starts its conversation: the session names
        // none, so its own id becomes the conversation's.
        let conversation = info.record.conversation_id;
        let title = turn.title.clone();
        let built = self.build_session(
            Some(head),
            conversation,
            turn,
            extra_parents,
            None,
            compaction,
        )?;
        let id = built.id;
        let conv_ref = RefName::conversation(name)?;
        let created_at = built.session.created_at;
        let changed = |read: &ConversationRecord| {
            let mut record = read.clone();
            if let Some(t) = &title {
                record.title = Some(t.clone());
            }
            if record.conversation_id.is_none() {
                record.conversation_id = Some(id);
            }
            record.updated_at = created_at.max(record.updated_at);
            record
        };
        let mut tx = Transaction {
            reason: if compaction.is_some() {
                "compact"
            } else if extra_parents.is_empty() {
                "commit"
            } else {
                "merge"
            }
            .into(),
            edits: vec![
                RefEdit {
                    name: conv_ref.clone(),
                    expected: PreviousValue::MustMatch(RefTarget::Session(head)),
                    new: Some(RefTarget::Session(id)),
                },
                RefEdit::head_to(conv_ref),
            ],
            conversations: vec![ConversationUpdate {
                name: name.to_owned(),
                record: Some(changed(&info.record)),
            }],
            expect_records: vec![(name.to_owned(), Some(info.record))],
            objects: built.objects,
            ..Transaction::default()
        };
        match run {
            Some(r) => {
                tx.require_claim.push((r.conversation.clone(), r.id));
                tx.runs.push(RunEvent {
                    conversation: r.conversation.clone(),
                    run: r.id,
                    kind: RunEventKind::Commit { session: id },
                });
            }
            None => tx.require_unclaimed.push(name.to_owned()),
        }
        let decoded = [(id, built.session)];
        // The record read above is written back changed only if it is still
        // the current one (another process may have set its metadata or
        // redacted it meanwhile); if not, the change is made again on the
        // current record. The ref's compare-and-swap guards the rest.
        loop {
            match self.transact_decoded(tx.clone(), &decoded, durability) {
                Err(Error::RecordOutOfDate { .. }) => {
                    let current = self.index.current_record(name)?.ok_or_else(|| {
                        Error::NoSuchConversation {
                            name: name.to_owned(),
                        }
                    })?;
                    tx.conversations[0].record = Some(changed(&current));
                    tx.expect_records = vec![(name.to_owned(), Some(current))];
                }
                r => return r.map(|_| id),
            }
        }
    }

    /// Forks a new conversation from any session. A plain fork (no cut, no
    /// turn) writes no object: it is a new ref at `from`, and the first
    /// commit on it starts the new conversation. `HEAD` moves to the fork,
    /// as `git checkout -b` does ([`Store::fork_without_checkout`] leaves it).
    pub fn fork(
        &self,
        from: ObjectId,
        opts: ForkOptions,
        durability: Durability,
    ) -> Result<(String, ObjectId)> {
        self.fork_with(from, opts, true, durability)
    }

    /// [`Store::fork`], leaving `HEAD` where it is (as `git branch`).
    pub fn fork_without_checkout(
        &self,
        from: ObjectId,
        opts: ForkOptions,
        durability: Durability,
    ) -> Result<(String, ObjectId)> {
        self.fork_with(from, opts, false, durability)
    }

    fn fork_with(
        &self,
        from: ObjectId,
        opts: ForkOptions,
        checkout: bool,
        durability: Durability,
    ) -> Result<(String, ObjectId)> {
        let source = self.odb.session(&from)?;
        let name = match opts.name {
            Some(n) => {
                validate_name(&n)?;
                if self.index.conversation(&n)?.is_some() {
                    return Err(Error::ConversationExists { name: n });
                }
                n
            }
            None => self.free_name(&format!("fork-{}", from.to_hex_prefix(12)))?,
        };
        let now = now_ms();
        // A fork is about what its source was about: the session's title, or
        // else its conversation's.
        let title = match &source.title {
            Some(t) => Some(t.clone()),
            None => self
                .index
                .conversation_name(&source.conversation_id(from))?
                .and_then(|n| self.index.conversation(&n).ok().flatten())
                .and_then(|c| c.record.title),
        };
        let mut record = ConversationRecord {
            conversation_id: None,
            title,
            default_preset_id: source.metadata.preset_id.clone(),
            metadata: BTreeMap::new(),
            status: ConversationStatus::Active,
            created_at: now,
            updated_at: now,
        };
        let (head, built) = if opts.cut.is_none() && opts.turn.is_none() {
            (from, None)
        } else {
            let (len, display_len) = (source.messages.len(), source.display_messages.len());
            let keep = match opts.cut {
                None => len,
                Some(Cut::AtMessage(k)) => {
                    if k > len {
                        return Err(Error::CutOutOfRange {
                            at: k,
                            session: from,
                            messages: len,
                        });
                    }
                    k
                }
                Some(Cut::AtMessageId(m)) => {
                    let pos = self
                        .odb
                        .history(&from)?
                        .iter()
                        .position(|h| *h == m)
                        .ok_or(Error::NotInHistory {
                            message: m,
                            session: from,
                        })?;
                    pos as u64 + 1
                }
            };
            // Display messages are cut at the same place when they mirror
            // the messages, and kept whole when the cut keeps everything.
            let display_keep = if keep == len {
                display_len
            } else {
                keep.min(display_len)
            };
            // A fork that keeps nothing continues nothing: a root, as
            // git's orphan branch (objects-format.md, "Forks").
            let parent = if keep == 0 && display_keep == 0 {
                None
            } else {
                Some(self.fork_parent(from, source.clone(), keep, display_keep)?)
            };
            let turn = opts.turn.unwrap_or_default();
            if let Messages::History(_) = turn.messages {
                return Err(Error::ForkTakesAddedMessages);
            }
            if let Some(t) = &turn.title {
                record.title = Some(t.clone());
            }
            let built = self.build_session(
                parent,
                None,
                turn,
                &[],
                parent.map(|_| (keep, display_keep)),
                None,
            )?;
            record.conversation_id = Some(built.id);
            (built.id, Some(built))
        };
        self.start_conversation("fork", &name, head, record, built, checkout, durability)?;
        Ok((name, head))
    }

    /// The parent a fork of `from` that keeps `keep` messages (and
    /// `display_keep` display messages) names (objects-format.md, "Forks"):
    /// walking `from`'s first parents, the newest session whose history is
    /// exactly those first messages, or else the oldest one that still
    /// holds them as its first messages. The walk steps from a session to
    /// its first parent only while the session keeps at least that many of
    /// its parent's messages and display messages (`base`), so every session
    /// it visits starts with the very messages the fork keeps; it reads
    /// session objects (no message body), and skips reading a parent the
    /// lineage index already shows too short. The fork's histories are the
    /// same whichever parent is chosen: only its place in the DAG changes,
    /// so that `merge-base --is-ancestor` and `log --graph` tell the truth
    /// (a fork that drops messages is not a continuation of `from`).
    fn fork_parent(
        &self,
        from: ObjectId,
        source: crate::object::Session,
        keep: u64,
        display_keep: u64,
    ) -> Result<ObjectId> {
        let lineage = self.lineage_index();
        let (mut at, mut s) = (from, source);
        loop {
            if s.messages.len() == keep {
                return Ok(at);
            }
            let Some(parent) = s.first_parent() else {
                return Ok(at);
            };
            if s.messages.base < keep || s.display_messages.base < display_keep {
                return Ok(at);
            }
            // The index's count: a parent shorter than the cut cannot hold
            // it (a corrupt `base` is left for the read to report).
            if let Some(ix) = &lineage {
                if ix.position(&parent).is_some_and(|p| ix.messages(p) < keep) {
                    return Ok(at);
                }
            }
            s = self.odb.session(&parent)?;
            at = parent;
        }
    }

    /// Creates `refs/heads/<name>` at `head` (neither it nor an archived
    /// conversation of that name may exist), records the conversation and
    /// points `HEAD` at it (with `checkout`), in one transaction.
    #[allow(clippy::too_many_arguments)]
    fn start_conversation(
        &self,
        reason: &str,
        name: &str,
        head: ObjectId,
        record: ConversationRecord,
        built: Option<Built>,
        checkout: bool,
        durability: Durability,
    ) -> Result<()> {
        let conv_ref = RefName::conversation(name)?;
        let (objects, decoded) = match built {
            Some(b) => (b.objects, vec![(b.id, b.session)]),
            None => (Vec::new(), Vec::new()),
        };
        let mut edits = vec![
            RefEdit {
                name: conv_ref.clone(),
                expected: PreviousValue::MustNotExist,
                new: Some(RefTarget::Session(head)),
            },
            RefEdit {
                name: RefName::archived(name)?,
                expected: PreviousValue::MustNotExist,
                new: None,
            },
        ];
        if checkout {
            edits.push(RefEdit::head_to(conv_ref));
        }
        self.transact_decoded(
            Transaction {
                reason: reason.into(),
                edits,
                conversations: vec![ConversationUpdate {
                    name: name.to_owned(),
                    record: Some(record),
                }],
                objects,
                ..Transaction::default()
            },
            &decoded,
            durability,
        )?;
        Ok(())
    }

    fn free_name(&self, base: &str) -> Result<String> {
        if self.index.conversation(base)?.is_none() {
            return Ok(base.to_owned());
        }
        for n in 2.. {
            let candidate = format!("{base}-{n}");
            if self.index.conversation(&candidate)?.is_none() {
                return Ok(candidate);
            }
        }
        unreachable!("some suffix is free")
    }

    /// Moves `refs/heads/<name>` to `refs/archive/<name>`.
    pub fn archive(&self, name: &str, durability: Durability) -> Result<ObjectId> {
        self.move_between(name, true, durability)
    }

    /// Moves `refs/archive/<name>` back to `refs/heads/<name>`.
    pub fn unarchive(&self, name: &str, durability: Durability) -> Result<ObjectId> {
        self.move_between(name, false, durability)
    }

    /// Made again on the current record if another process replaced the
    /// one read meanwhile (`RecordOutOfDate`).
    fn move_between(&self, name: &str, archive: bool, durability: Durability) -> Result<ObjectId> {
        loop {
            match self.move_between_once(name, archive, durability) {
                Err(Error::RecordOutOfDate { .. }) => continue,
                r => return r,
            }
        }
    }

    fn move_between_once(
        &self,
        name: &str,
        archive: bool,
        durability: Durability,
    ) -> Result<ObjectId> {
        let info = self.require_conversation(name)?;
        let (from, to) = if archive {
            (RefName::conversation(name)?, RefName::archived(name)?)
        } else {
            (RefName::archived(name)?, RefName::conversation(name)?)
        };
        let Some(RefTarget::Session(head)) = self.index.get_ref(&from)? else {
            let name = name.to_owned();
            return Err(if archive {
                Error::AlreadyArchived { name }
            } else {
                Error::NotArchived { name }
            });
        };
        let mut record = info.record.clone();
        record.status = if archive {
            ConversationStatus::Archived
        } else {
            ConversationStatus::Active
        };
        record.updated_at = now_ms().max(record.updated_at);
        let edits = vec![
            RefEdit {
                name: from,
                expected: PreviousValue::MustMatch(RefTarget::Session(head)),
                new: None,
            },
            RefEdit {
                name: to,
                expected: PreviousValue::MustNotExist,
                new: Some(RefTarget::Session(head)),
            },
        ];
        // HEAD, if it follows the conversation, is detached under the
        // write lock (Store::keep_head_on_a_ref).
        self.transact(
            Transaction {
                reason: if archive { "archive" } else { "unarchive" }.into(),
                edits,
                conversations: vec![ConversationUpdate {
                    name: name.to_owned(),
                    record: Some(record),
                }],
                require_unclaimed: vec![name.to_owned()],
                expect_records: vec![(name.to_owned(), Some(info.record))],
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(head)
    }

    /// Removes a conversation: its ref and record go, its objects stay for
    /// gc to judge.
    pub fn delete(&self, name: &str, durability: Durability) -> Result<ObjectId> {
        self.require_conversation(name)?;
        let mut edits = Vec::new();
        let mut head = None;
        for r in [RefName::conversation(name)?, RefName::archived(name)?] {
            if let Some(RefTarget::Session(h)) = self.index.get_ref(&r)? {
                head = Some(h);
                edits.push(RefEdit {
                    name: r,
                    expected: PreviousValue::MustMatch(RefTarget::Session(h)),
                    new: None,
                });
            }
        }
        let head = head.ok_or_else(|| Error::NoSuchConversation {
            name: name.to_owned(),
        })?;
        // HEAD, if it follows the conversation, is detached under the
        // write lock (Store::keep_head_on_a_ref).
        self.transact(
            Transaction {
                reason: "delete".into(),
                edits,
                conversations: vec![ConversationUpdate {
                    name: name.to_owned(),
                    record: None,
                }],
                require_unclaimed: vec![name.to_owned()],
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(head)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::store::Messages;

    thread_local! {
        /// Run once, by the next write of this thread that read a
        /// conversation's record, between reading it and writing it.
        static AFTER_READ: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    pub(in crate::store) fn after_record_read() {
        if let Some(f) = AFTER_READ.with(|b| b.borrow_mut().take()) {
            f();
        }
    }

    fn race(f: impl FnOnce() + 'static) {
        AFTER_READ.with(|b| *b.borrow_mut() = Some(Box::new(f)));
    }

    fn note(store: &Store, name: &str, text: &str) {
        let mut m = BTreeMap::new();
        m.insert("note".to_owned(), Some(serde_json::json!(text)));
        store
            .set_conversation_metadata(name, m, Durability::Sync)
            .unwrap();
    }

    fn turn(text: &str) -> Turn {
        Turn {
            messages: Messages::Added(vec![serde_json::json!({"role": "user", "content": text})]),
            ..Turn::default()
        }
    }

    #[test]
    fn a_commit_never_writes_back_a_record_replaced_meanwhile() {
        let store = std::sync::Arc::new(Store::in_memory().unwrap());
        store
            .create(Some("a"), turn("hello"), Durability::Sync)
            .unwrap();
        let mut m = BTreeMap::new();
        m.insert("note".to_owned(), Some(serde_json::json!("key SECRET")));
        store
            .set_conversation_metadata("a", m, Durability::Sync)
            .unwrap();
        // Between the commit's read of the record and its write, the
        // record is cleaned (as a redaction of it alone would).
        let other = std::sync::Arc::clone(&store);
        race(move || note(&other, "a", "clean"));
        store
            .commit("a", None, turn("more"), Durability::Sync)
            .unwrap();
        let info = store.conversation("a").unwrap().unwrap();
        assert_eq!(info.record.metadata["note"], serde_json::json!("clean"));
        assert!(info.head.is_some());
    }

    #[test]
    fn archive_never_writes_back_a_record_replaced_meanwhile() {
        let store = std::sync::Arc::new(Store::in_memory().unwrap());
        store
            .create(Some("a"), turn("hello"), Durability::Sync)
            .unwrap();
        note(&store, "a", "key SECRET");
        let other = std::sync::Arc::clone(&store);
        race(move || note(&other, "a", "clean"));
        store.archive("a", Durability::Sync).unwrap();
        let info = store.conversation("a").unwrap().unwrap();
        assert_eq!(info.record.metadata["note"], serde_json::json!("clean"));
        assert_eq!(info.record.status, ConversationStatus::Archived);
    }

    #[test]
    fn a_put_never_writes_back_a_record_replaced_meanwhile() {
        let store = std::sync::Arc::new(Store::in_memory().unwrap());
        let (_, head) = store
            .create(Some("a"), turn("hello"), Durability::Sync)
            .unwrap();
        note(&store, "a", "key SECRET");
        let other = std::sync::Arc::clone(&store);
        race(move || note(&other, "a", "clean"));
        store
            .put(
                crate::store::Put {
                    reason: "put".into(),
                    parent: Some(head),
                    turn: turn("more"),
                    conversation: Some(crate::store::PutConversation {
                        name: "a".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Durability::Sync,
            )
            .unwrap();
        let info = store.conversation("a").unwrap().unwrap();
        assert_eq!(info.record.metadata["note"], serde_json::json!("clean"));
        assert_ne!(info.head, Some(head));
    }

    #[test]
    fn a_metadata_write_never_writes_back_a_record_replaced_meanwhile() {
        let store = std::sync::Arc::new(Store::in_memory().unwrap());
        store
            .create(Some("a"), turn("hello"), Durability::Sync)
            .unwrap();
        note(&store, "a", "key SECRET");
        let other = std::sync::Arc::clone(&store);
        race(move || note(&other, "a", "clean"));
        let mut m = BTreeMap::new();
        m.insert("more".to_owned(), Some(serde_json::json!(1)));
        store
            .set_conversation_metadata("a", m, Durability::Sync)
            .unwrap();
        let info = store.conversation("a").unwrap().unwrap();
        assert_eq!(info.record.metadata["note"], serde_json::json!("clean"));
        assert_eq!(info.record.metadata["more"], serde_json::json!(1));
    }

    #[test]
    fn a_rename_never_writes_back_a_record_replaced_meanwhile_nor_counts_as_activity() {
        let store = std::sync::Arc::new(Store::in_memory().unwrap());
        store
            .create(Some("a"), turn("hello"), Durability::Sync)
            .unwrap();
        note(&store, "a", "key SECRET");
        let other = std::sync::Arc::clone(&store);
        race(move || note(&other, "a", "clean"));
        let before = store.conversation("a").unwrap().unwrap().record.updated_at;
        store.rename("a", "b", Durability::Sync).unwrap();
        let info = store.conversation("b").unwrap().unwrap();
        assert_eq!(info.record.metadata["note"], serde_json::json!("clean"));
        assert!(store.conversation("a").unwrap().is_none());
        // The metadata write is the last activity; the rename is none.
        let after_note = info.record.updated_at;
        assert!(after_note >= before);
        let activity = info.last_activity;
        // Later than any activity so far, whatever the clock's grain.
        while now_ms() <= activity {
            std::thread::yield_now();
        }
        store.rename("b", "c", Durability::Sync).unwrap();
        let info = store.conversation("c").unwrap().unwrap();
        assert_eq!(info.record.updated_at, after_note);
        assert_eq!(info.last_activity, activity);
    }

    #[test]
    fn a_reset_never_writes_back_a_record_replaced_meanwhile() {
        let store = std::sync::Arc::new(Store::in_memory().unwrap());
        let (_, first) = store
            .create(Some("a"), turn("hello"), Durability::Sync)
            .unwrap();
        store
            .commit("a", None, turn("more"), Durability::Sync)
            .unwrap();
        note(&store, "a", "key SECRET");
        let other = std::sync::Arc::clone(&store);
        race(move || note(&other, "a", "clean"));
        store.reset("a", first, Durability::Sync).unwrap();
        let info = store.conversation("a").unwrap().unwrap();
        assert_eq!(info.record.metadata["note"], serde_json::json!("clean"));
        assert_eq!(info.head, Some(first));
    }
}
