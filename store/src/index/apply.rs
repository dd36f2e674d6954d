//! Applying an operation: the conversation records, refs, reflog entries
//! and run claims it changes, the sessions it makes reachable, and the
//! conversation summaries derived from them, written as one batch.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::conversations::activity_key;
use super::encoding::{read_session, PreviewAt};
use super::refs::{reverse_key, target_bytes, target_from};
use super::runs::claim_bytes;
use super::summary::{ConversationInfo, RunClaim, SessionInfo};
use super::{key, Index};
use crate::error::Result;
use crate::hash::ObjectId;
use crate::message::user_text;
use crate::object::{EncodedObject, Session, SessionStatus, SessionType, Usage};
use crate::odb::Odb;
use crate::refs::{Operation, RefName, RefTarget, RunEventKind};

const PREVIEW_CHARS: usize = 200;

/// Writes of one operation, readable before they are applied.
struct Overlay<'a> {
    index: &'a Index,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl<'a> Overlay<'a> {
    fn new(index: &'a Index) -> Self {
        Overlay {
            index,
            writes: BTreeMap::new(),
        }
    }
    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.writes.get(k) {
            return Ok(v.clone());
        }
        self.index.get(k)
    }
    fn put(&mut self, k: Vec<u8>, v: Vec<u8>) {
        self.writes.insert(k, Some(v));
    }
    fn del(&mut self, k: Vec<u8>) {
        self.writes.insert(k, None);
    }
    /// Puts the operation's writes in the index's overlay, with the
    /// operation as the last one applied.
    fn commit(self, applied: (u64, crate::refs::Hash)) -> Result<()> {
        let mut v = self.index.view_mut();
        v.overlay.extend(self.writes);
        v.applied = Some(applied);
        // Applied in full as far as the refs were ahead: the overlay says
        // all the ahead map said.
        if v.ahead_of.is_some_and(|a| a.0 <= applied.0) {
            v.ahead.clear();
            v.ahead_of = None;
        }
        Ok(())
    }
}

impl Index {
    /// Applies one operation atomically.
    pub fn apply(&self, op: &Operation, odb: &Odb) -> Result<()> {
        self.apply_with(op, odb, &[])
    }

    /// As [`Index::apply`], given sessions the caller has decoded already
    /// (a commit's own), which are then not read back from the journal.
    pub fn apply_with(
        &self,
        op: &Operation,
        odb: &Odb,
        fresh: &[(ObjectId, Session)],
    ) -> Result<()> {
        let _one_at_a_time = self.applying();
        self.apply_locked(op, odb, fresh)
    }

    /// [`Index::apply_with`] for a caller that holds the apply lock. An
    /// operation applied already (by another thread catching up) is
    /// skipped: applying one twice would count its sessions twice.
    pub(super) fn apply_locked(
        &self,
        op: &Operation,
        odb: &Odb,
        fresh: &[(ObjectId, Session)],
    ) -> Result<()> {
        if self.view().applied.is_some_and(|(seq, _)| op.seq <= seq) {
            return Ok(());
        }
        let o = self.overlay_of(op, odb, fresh, &[])?;
        o.commit((op.seq, op.hash()))
    }

    /// The keys `op` changes, over the index as it stands, without
    /// applying them: what a writer to a backend that keeps the keys
    /// itself hands it to write in the operation's transaction, under the
    /// write lock (so that the state read cannot move meanwhile).
    /// `pending` holds the objects written with the operation, not stored
    /// yet (their messages give the previews).
    pub fn effects(
        &self,
        op: &Operation,
        odb: &Odb,
        fresh: &[(ObjectId, Session)],
        pending: &[EncodedObject],
    ) -> Result<Vec<crate::odb::KeyWrite>> {
        if let Some(kept) = self.kept() {
            // Read ahead with the write's checks: the parents' summaries.
            // Their previews' origins are a second read ahead.
            // Read with the lock's round trip when a summary this handle
            // wrote or read names it (see `Index::ahead_keys`).
            let mut origins = Vec::new();
            for p in fresh.iter().flat_map(|(_, s)| &s.parents) {
                let Some(v) = self.get(&key("s:", p.as_bytes()))? else {
                    continue;
                };
                self.note_origin(*p, &v);
                if let Some((_, PreviewAt::In(o))) = SessionInfo::from_index_value(*p, &v) {
                    origins.push(key("s:", o.as_bytes()));
                }
            }
            if !origins.is_empty() {
                kept.read_ahead_locked(&origins, &[])?;
            }
        }
        let writes = self.overlay_of(op, odb, fresh, pending)?.writes;
        if self.kept().is_some() {
            for (k, v) in &writes {
                let (Some(id), Some(v)) = (k.strip_prefix(b"s:"), v) else {
                    continue;
                };
                if let Some(id) = ObjectId::from_slice(id) {
                    self.note_origin(id, v);
                }
            }
        }
        Ok(writes.into_iter().collect())
    }

    fn overlay_of(
        &self,
        op: &Operation,
        odb: &Odb,
        fresh: &[(ObjectId, Session)],
        pending: &[EncodedObject],
    ) -> Result<Overlay<'_>> {
        let mut o = Overlay::new(self);
        let mut touched: BTreeSet<String> = BTreeSet::new();
        // A rename (the new name's record written, the old one's removed, in
        // one operation): the new name takes the old one's figures.
        let removed: BTreeSet<&str> = op
            .conversations
            .iter()
            .filter(|cu| cu.record.is_none())
            .map(|cu| cu.name.as_str())
            .collect();
        for cu in &op.conversations {
            let k = key("c:", cu.name.as_bytes());
            let old = o
                .get(&k)?
                .and_then(|b| ConversationInfo::from_index_bytes(&cu.name, &b));
            if let Some(old) = &old {
                o.del(activity_key(old.last_activity, &old.name));
                if let Some(cid) = old.record.conversation_id {
                    let ik = key("i:", cid.as_bytes());
                    // Only its own mapping: another record may hold the id
                    // (a rename's new name, an async subagent's spawner).
                    if cu.record.as_ref().and_then(|r| r.conversation_id) != Some(cid)
                        && o.get(&ik)?.as_deref() == Some(cu.name.as_bytes())
                    {
                        o.del(ik);
                    }
                }
            }
            match &cu.record {
                Some(r) => {
                    let renamed_from = match (&old, r.conversation_id) {
                        (None, Some(cid)) => o
                            .get(&key("i:", cid.as_bytes()))?
                            .and_then(|v| String::from_utf8(v).ok())
                            .filter(|n| removed.contains(n.as_str()))
                            .and_then(|n| {
                                o.get(&key("c:", n.as_bytes()))
                                    .ok()
                                    .flatten()
                                    .and_then(|b| ConversationInfo::from_index_bytes(&n, &b))
                            }),
                        _ => None,
                    };
                    let mut info = match (old, renamed_from) {
                        (Some(mut i), _) => {
                            i.record = r.clone();
                            i
                        }
                        (None, Some(from)) => {
                            let mut i = ConversationInfo::new(&cu.name, r.clone());
                            i.sessions = from.sessions;
                            i.usage = from.usage;
                            i.last_activity = from.last_activity;
                            i
                        }
                        (None, None) => ConversationInfo::new(&cu.name, r.clone()),
                    };
                    info.last_activity = info.last_activity.max(r.updated_at);
                    if let Some(cid) = r.conversation_id {
                        // An id a live record holds already stays with it
                        // (an async subagent carries its spawner's id), unless
                        // that record goes in this operation (a rename).
                        let ik = key("i:", cid.as_bytes());
                        let holder = o.get(&ik)?.and_then(|v| String::from_utf8(v).ok());
                        let held = match &holder {
                            Some(h) if *h != cu.name && !removed.contains(h.as_str()) => o
                                .get(&key("c:", h.as_bytes()))?
                                .and_then(|b| ConversationInfo::from_index_bytes(h, &b))
                                .is_some_and(|i| i.record.conversation_id == Some(cid)),
                            _ => false,
                        };
                        if !held {
                            o.put(ik, cu.name.as_bytes().to_vec());
                        }
                    }
                    o.put(k, info.to_index_bytes());
                    o.put(activity_key(info.last_activity, &info.name), Vec::new());
                    touched.insert(cu.name.clone());
                }
                None => o.del(k),
            }
        }
        o.writes.extend(ref_effects(op));
        let replaces = replacements(op, odb, fresh);
        for u in &op.refs {
            if let Some(RefTarget::Session(id)) = &u.new {
                index_sessions(&mut o, odb, *id, fresh, pending, &replaces)?;
            }
            if let RefName::Conversation(n) | RefName::Archived(n) = &u.name {
                touched.insert(n.clone());
            }
        }
        for r in &op.runs {
            touched.insert(r.conversation.clone());
        }
        // Receiving a conversation from another store or importing it from
        // an agent's files is not activity on it: the record's times, taken
        // from the source, carry over (remote.rs, import/). Nor is renaming
        // it: the new name takes the old one's last activity.
        let activity = match op.reason.as_str() {
            "unbundle" | "clone" | "push" | "pull" | "import" | "rename" => i64::MIN,
            _ => op.time,
        };
        for name in &touched {
            summarize(&mut o, name, activity, op.time)?;
        }
        Ok(o)
    }
}

/// What an operation does to the keys a compare-and-swap reads: each ref's
/// target and the hash of its newest reflog entry (the ref log itself is
/// the operations, `Store::reflog_entries`), and the run claims. Cheap: no
/// object is read, so a writer applies only this under the write lock
/// ([`Index::catch_up_refs`]) and the rest after it.
pub(super) fn ref_effects(op: &Operation) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::with_capacity(4 * op.refs.len() + op.runs.len());
    for (u, entry) in op.refs.iter().zip(op.reflog_entries()) {
        let full = u.name.to_string();
        // The reverse keys (`t:`, see `refs_to`): the old target's goes,
        // the new one's comes (in that order, for a move onto itself).
        if let Some(RefTarget::Session(old)) = &u.old {
            out.push((reverse_key(old, full.as_bytes()), None));
        }
        if let Some(RefTarget::Session(new)) = &u.new {
            out.push((reverse_key(new, full.as_bytes()), Some(Vec::new())));
        }
        out.push((key("r:", full.as_bytes()), u.new.as_ref().map(target_bytes)));
        out.push((key("h:", full.as_bytes()), Some(entry.hash().to_vec())));
    }
    for r in &op.runs {
        let claim = match &r.kind {
            RunEventKind::Begin { pid } => Some(claim_bytes(&RunClaim {
                run: r.run,
                pid: *pid,
                started_at: op.time,
            })),
            RunEventKind::Commit { .. } | RunEventKind::Fail { .. } => None,
        };
        out.push((key("u:", r.conversation.as_bytes()), claim));
    }
    out
}

/// What an operation does to the conversation records, for a writer's
/// compare-and-swap on a record under the write lock: kept ahead only
/// (key `q:`), never in the overlay or the tables (see
/// [`Index::current_record`]).
pub(super) fn record_effects(op: &Operation) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    op.conversations
        .iter()
        .map(|cu| {
            (
                key("q:", cu.name.as_bytes()),
                cu.record
                    .as_ref()
                    .map(|r| ConversationInfo::new(&cu.name, r.clone()).to_index_bytes()),
            )
        })
        .collect()
}

/// Indexes `id` and every session it reaches that is not indexed yet,
/// parents before children. A session that cannot be read is indexed as a
/// placeholder (fsck reports it) so that one damaged object cannot stop
/// the index from opening.
fn index_sessions(
    o: &mut Overlay<'_>,
    odb: &Odb,
    id: ObjectId,
    fresh: &[(ObjectId, Session)],
    unstored: &[EncodedObject],
    replaces: &HashMap<ObjectId, ObjectId>,
) -> Result<()> {
    let mut pending = vec![id];
    while let Some(start) = pending.pop() {
        let mut chain: Vec<(ObjectId, Option<Session>)> = Vec::new();
        let mut on_chain: HashSet<ObjectId> = HashSet::new();
        let mut at = Some(start);
        while let Some(cur) = at {
            // `on_chain` guards against a cycle, which only an edited store has.
            if o.get(&key("s:", cur.as_bytes()))?.is_some() || !on_chain.insert(cur) {
                break;
            }
            let s = match fresh.iter().find(|(f, _)| *f == cur) {
                Some((_, s)) => Some(s.clone()),
                None => match odb.session(&cur) {
                    Ok(s) => Some(s),
                    // Gone, not damaged: gc pruned it (a ref-log entry
                    // that named it expired). Nothing to list or count.
                    Err(crate::error::Error::NotFound { .. }) => break,
                    Err(_) => None,
                },
            };
            at = s.as_ref().and_then(|s| s.first_parent());
            chain.push((cur, s));
        }
        for (sid, s) in chain.into_iter().rev() {
            let info = match &s {
                Some(s) => session_info(o, odb, unstored, sid, s)?,
                None => (
                    SessionInfo {
                        id: sid,
                        conversation: sid,
                        parents: Vec::new(),
                        status: SessionStatus::Failed,
                        created_at: 0,
                        messages: 0,
                        display_messages: 0,
                        usage: Usage::default(),
                        duration_ms: 0,
                        preview: "(unreadable session)".into(),
                        preview_at: None,
                        title: None,
                        session_type: SessionType::Agent,
                    },
                    PreviewAt::Here,
                ),
            };
            let (info, shared) = info;
            o.put(key("s:", sid.as_bytes()), info.to_index_value(&shared));
            // A redaction's rewrite of a session counted already is the
            // same session to the conversation's figures: not counted
            // again (it counts once the old one is pruned).
            let replaced_counted = match replaces.get(&sid) {
                Some(old) => o.get(&key("s:", old.as_bytes()))?.is_some(),
                None => false,
            };
            let counted_in = if replaced_counted {
                None
            } else {
                o.get(&key("i:", info.conversation.as_bytes()))?
                    .and_then(|v| String::from_utf8(v).ok())
            };
            if let Some(name) = counted_in {
                let ck = key("c:", name.as_bytes());
                if let Some(mut c) = o
                    .get(&ck)?
                    .and_then(|b| ConversationInfo::from_index_bytes(&name, &b))
                {
                    c.sessions += 1;
                    c.usage.total_tokens += info.usage.total_tokens;
                    c.usage.prompt_tokens += info.usage.prompt_tokens;
                    c.usage.completion_tokens += info.usage.completion_tokens;
                    c.usage.requests += info.usage.requests;
                    o.put(ck, c.to_index_bytes());
                }
            }
            if let Some(s) = &s {
                for p in s.parents.iter().skip(1) {
                    if o.get(&key("s:", p.as_bytes()))?.is_none() {
                        pending.push(*p);
                    }
                }
            }
        }
    }
    Ok(())
}

/// For a redaction's operation (reason `redact:`), each rewritten session
/// with the one it replaces: found by walking each moved ref's new and old
/// targets side by side (parents by position, compaction sources, spawners),
/// as long as the two are the same session but for the redacted text (same
/// conversation, time, parent and message counts). Old sessions gc pruned
/// are not found: then the new ones replace nothing.
fn replacements(
    op: &Operation,
    odb: &Odb,
    fresh: &[(ObjectId, Session)],
) -> HashMap<ObjectId, ObjectId> {
    let mut map = HashMap::new();
    if !op.reason.starts_with("redact:") {
        return map;
    }
    let read = |id: &ObjectId| match fresh.iter().find(|(f, _)| f == id) {
        Some((_, s)) => Some(s.clone()),
        None => odb.session(id).ok(),
    };
    let mut stack: Vec<(ObjectId, ObjectId)> = op
        .refs
        .iter()
        .filter_map(|u| match (&u.new, &u.old) {
            (Some(RefTarget::Session(n)), Some(RefTarget::Session(o))) => Some((*n, *o)),
            _ => None,
        })
        .collect();
    while let Some((new, old)) = stack.pop() {
        if new == old || map.contains_key(&new) {
            continue;
        }
        let (Some(n), Some(o)) = (read(&new), read(&old)) else {
            continue;
        };
        let same = n.conversation_id(new) == o.conversation_id(old)
            && n.created_at == o.created_at
            && n.parents.len() == o.parents.len()
            && n.messages.len() == o.messages.len()
            && n.compaction.is_some() == o.compaction.is_some()
            && n.metadata.spawned_by.is_some() == o.metadata.spawned_by.is_some();
        if !same {
            continue;
        }
        map.insert(new, old);
        stack.extend(n.parents.iter().copied().zip(o.parents.iter().copied()));
        if let (Some(a), Some(b)) = (&n.compaction, &o.compaction) {
            stack.push((a.session, b.session));
        }
        if let (Some(a), Some(b)) = (n.metadata.spawned_by, o.metadata.spawned_by) {
            stack.push((a, b));
        }
    }
    map
}

/// A session's summary, and where its value keeps its preview: kept from a
/// parent or a compacted session, the preview is named by the session
/// holding its text (stored once per run of sessions sharing it).
fn session_info(
    o: &Overlay<'_>,
    odb: &Odb,
    pending: &[EncodedObject],
    id: ObjectId,
    s: &Session,
) -> Result<(SessionInfo, PreviewAt)> {
    let parent = match s.first_parent() {
        Some(p) => read_session(p, &mut |k| o.get(k))?,
        None => None,
    };
    let mut shared = PreviewAt::Here;
    // The preview is the history's first prompt (a user message a person
    // wrote: meta lines and agent-injected context skipped, see
    // `message::user_text`): kept from the parent when the kept prefix
    // holds it, else found among the added.
    let (mut preview, mut preview_at) = (String::new(), None);
    if let Some((p, origin)) = &parent {
        if let Some(at) = p.preview_at.filter(|at| *at < s.messages.base) {
            preview = p.preview.clone();
            preview_at = Some(at);
            shared = PreviewAt::In(*origin);
        }
    }
    // A compaction's history opens with the summary; the conversation is
    // still about what the compacted session's preview says.
    if let Some(c) = &s.compaction {
        if let Some((before, origin)) =
            read_session(c.session, &mut |k| o.get(k))?.filter(|(i, _)| i.preview_at.is_some())
        {
            preview = before.preview;
            preview_at = Some(0);
            shared = PreviewAt::In(origin);
        }
    }
    if preview_at.is_none() {
        for (k, m) in s.messages.added.iter().enumerate() {
            let v = match pending.iter().find(|p| p.id() == *m) {
                Some(p) => crate::odb::message_value(m, p.kind(), p.payload()),
                None => odb.blob(m),
            };
            let Ok(v) = v else { continue };
            if let Some(text) = user_text(&v) {
                preview = text.chars().take(PREVIEW_CHARS).collect();
                preview_at = Some(s.messages.base + k as u64);
                shared = PreviewAt::Here;
                break;
            }
        }
    }
    let info = SessionInfo {
        id,
        conversation: s.conversation_id(id),
        parents: s.parents.clone(),
        status: s.status,
        created_at: s.created_at,
        messages: s.messages.len(),
        display_messages: s.display_messages.len(),
        usage: s.run.usage,
        duration_ms: s.run.duration_ms,
        preview,
        preview_at,
        title: s.title.clone(),
        session_type: s.metadata.session_type,
    };
    Ok((info, shared))
}

/// Recomputes what a conversation's summary derives from its refs. `time`
/// is the operation's activity (`i64::MIN` for none); `op_time` when it was
/// written, which stands in for a conversation with no time at all (a
/// source without timestamps, as SWE-agent and OpenAI chat files are), so
/// that it sorts by when it came into the store, not at 1970.
fn summarize(o: &mut Overlay<'_>, name: &str, time: i64, op_time: i64) -> Result<()> {
    let ck = key("c:", name.as_bytes());
    let Some(mut info) = o
        .get(&ck)?
        .and_then(|b| ConversationInfo::from_index_bytes(name, &b))
    else {
        return Ok(());
    };
    o.del(activity_key(info.last_activity, name));
    let head = [format!("refs/heads/{name}"), format!("refs/archive/{name}")]
        .iter()
        .find_map(|r| {
            o.get(&key("r:", r.as_bytes()))
                .ok()
                .flatten()
                .and_then(|b| target_from(&b))
        });
    info.head = match head {
        Some(RefTarget::Session(id)) => Some(id),
        _ => None,
    };
    if info.head.is_none() {
        info.messages = 0;
        info.preview = String::new();
    }
    if let Some(h) = info.head {
        if let Some((si, _)) = read_session(h, &mut |k| o.get(k))? {
            info.messages = si.messages;
            info.preview = si.preview;
        }
    }
    info.last_activity = info.last_activity.max(time);
    if info.last_activity <= 0 {
        info.last_activity = op_time;
    }
    o.put(activity_key(info.last_activity, name), Vec::new());
    o.put(ck, info.to_index_bytes());
    Ok(())
}
