//! The version-1 wire form of a session (objects-format.md, "session"): a
//! CBOR map with text keys in canonical order; optional fields are absent,
//! never null. The only code that turns a [`Session`] into bytes and back.

use super::*;
use crate::object::wire::{id, id_list, map};
use crate::object::CborError;

// Keys of each map, in canonical order (length, then bytes). The test
// `key_lists_are_canonical` keeps them so.
pub(super) const SESSION_KEYS: [&str; 12] = [
    "run",
    "title",
    "status",
    "parents",
    "messages",
    "metadata",
    "compaction",
    "created_at",
    "conversation",
    "context_state",
    "display_messages",
    "environment_state",
];
pub(super) const RUN_KEYS: [&str; 2] = ["usage", "duration_ms"];
pub(super) const USAGE_KEYS: [&str; 4] = [
    "requests",
    "total_tokens",
    "prompt_tokens",
    "completion_tokens",
];
pub(super) const DELTA_KEYS: [&str; 2] = ["base", "added"];
pub(super) const METADATA_KEYS: [&str; 5] = [
    "extra",
    "preset_id",
    "transport",
    "spawned_by",
    "session_type",
];
pub(super) const COMPACTION_KEYS: [&str; 3] = ["session", "summary", "messages"];

pub(super) fn encode(s: &Session) -> Result<Vec<u8>, CborError> {
    let mut e = Encoder::with_capacity(
        256 + 34 * (s.parents.len() + s.messages.added.len() + s.display_messages.added.len()),
    );
    let fields = 7
        + s.title.is_some() as usize
        + s.conversation.is_some() as usize
        + s.compaction.is_some() as usize
        + s.context_state.is_some() as usize
        + s.environment_state.is_some() as usize;
    e.map(fields);

    e.text("run");
    e.map(2);
    e.text("usage");
    e.map(4);
    e.text("requests");
    e.uint(s.run.usage.requests);
    e.text("total_tokens");
    e.uint(s.run.usage.total_tokens);
    e.text("prompt_tokens");
    e.uint(s.run.usage.prompt_tokens);
    e.text("completion_tokens");
    e.uint(s.run.usage.completion_tokens);
    e.text("duration_ms");
    e.uint(s.run.duration_ms);

    if let Some(title) = &s.title {
        e.text("title");
        e.text(title);
    }
    e.text("status");
    e.text(s.status.as_str());
    e.text("parents");
    ids(&mut e, &s.parents);
    e.text("messages");
    delta(&mut e, &s.messages);

    e.text("metadata");
    let m = &s.metadata;
    e.map(
        1 + (!m.extra.is_empty()) as usize
            + m.preset_id.is_some() as usize
            + m.transport.is_some() as usize
            + m.spawned_by.is_some() as usize,
    );
    if !m.extra.is_empty() {
        e.text("extra");
        let mut entries: Vec<(&String, &Value)> = m.extra.iter().collect();
        entries.sort_by(|a, b| canonical_key_cmp(a.0, b.0));
        e.map(entries.len());
        for (k, v) in entries {
            e.text(k);
            e.json(v)?;
        }
    }
    if let Some(p) = &m.preset_id {
        e.text("preset_id");
        e.text(p);
    }
    if let Some(t) = &m.transport {
        e.text("transport");
        e.text(t);
    }
    if let Some(id) = &m.spawned_by {
        e.text("spawned_by");
        e.bytes(id.as_bytes());
    }
    e.text("session_type");
    e.text(m.session_type.as_str());

    if let Some(c) = &s.compaction {
        e.text("compaction");
        e.map(3);
        e.text("session");
        e.bytes(c.session.as_bytes());
        e.text("summary");
        e.bytes(c.summary.as_bytes());
        e.text("messages");
        e.uint(c.messages);
    }
    e.text("created_at");
    e.int(s.created_at);
    if let Some(c) = &s.conversation {
        e.text("conversation");
        e.bytes(c.as_bytes());
    }
    if let Some(c) = &s.context_state {
        e.text("context_state");
        e.bytes(c.as_bytes());
    }
    e.text("display_messages");
    delta(&mut e, &s.display_messages);
    if let Some(c) = &s.environment_state {
        e.text("environment_state");
        e.bytes(c.as_bytes());
    }
    Ok(e.into_bytes())
}

fn ids(e: &mut Encoder, ids: &[ObjectId]) {
    e.array(ids.len());
    for id in ids {
        e.bytes(id.as_bytes());
    }
}

fn delta(e: &mut Encoder, d: &MessageDelta) {
    e.map(2);
    e.text("base");
    e.uint(d.base);
    e.text("added");
    ids(e, &d.added);
}

fn delta_field(d: &mut Decoder<'_>, what: &str) -> Result<MessageDelta, CborError> {
    let mut out = MessageDelta::default();
    let mut seen = 0;
    map(d, what, &DELTA_KEYS, |d, k| {
        seen += 1;
        match k {
            "base" => out.base = d.uint()?,
            _ => out.added = id_list(d)?,
        }
        Ok(())
    })?;
    if seen != DELTA_KEYS.len() {
        return Err(d.error(format!("{what} needs both base and added")));
    }
    Ok(out)
}

fn opt_text(d: &mut Decoder<'_>) -> Result<String, CborError> {
    Ok(d.text()?.to_owned())
}

pub(super) fn decode(payload: &[u8]) -> Result<Session, CborError> {
    let mut d = Decoder::new(payload);
    let mut s = Session::new_root(0);
    let mut required = 0u32;
    map(&mut d, "session", &SESSION_KEYS, |d, key| {
        match key {
            "run" => {
                required |= 1;
                let mut have = 0;
                map(d, "run", &RUN_KEYS, |d, k| {
                    have += 1;
                    match k {
                        "usage" => {
                            let mut u = Usage::default();
                            let mut n = 0;
                            map(d, "usage", &USAGE_KEYS, |d, k| {
                                n += 1;
                                let v = d.uint()?;
                                match k {
                                    "requests" => u.requests = v,
                                    "total_tokens" => u.total_tokens = v,
                                    "prompt_tokens" => u.prompt_tokens = v,
                                    _ => u.completion_tokens = v,
                                }
                                Ok(())
                            })?;
                            if n != USAGE_KEYS.len() {
                                return Err(d.error("usage needs all four counters"));
                            }
                            s.run.usage = u;
                        }
                        _ => s.run.duration_ms = d.uint()?,
                    }
                    Ok(())
                })?;
                if have != RUN_KEYS.len() {
                    return Err(d.error("run needs usage and duration_ms"));
                }
            }
            "title" => s.title = Some(opt_text(d)?),
            "status" => {
                required |= 2;
                let t = d.text()?;
                s.status = SessionStatus::parse(t)
                    .ok_or_else(|| d.error(format!("unknown session status {t:?}")))?;
            }
            "parents" => {
                required |= 4;
                s.parents = id_list(d)?;
            }
            "messages" => {
                required |= 8;
                s.messages = delta_field(d, "messages")?;
            }
            "metadata" => {
                required |= 16;
                let mut has_type = false;
                let m = &mut s.metadata;
                map(d, "metadata", &METADATA_KEYS, |d, k| {
                    match k {
                        "extra" => {
                            let n = d.map()?;
                            if n == 0 {
                                return Err(d.error("empty extra metadata must be absent"));
                            }
                            let mut prev: Option<&str> = None;
                            for _ in 0..n {
                                let key = d.text()?;
                                if let Some(p) = prev {
                                    if canonical_key_cmp(p, key) != std::cmp::Ordering::Less {
                                        return Err(d.error(format!(
                                            "extra metadata key {key:?} is repeated or out of canonical order"
                                        )));
                                    }
                                }
                                prev = Some(key);
                                let v = d.json()?;
                                m.extra.insert(key.to_owned(), v);
                            }
                        }
                        "preset_id" => m.preset_id = Some(opt_text(d)?),
                        "transport" => m.transport = Some(opt_text(d)?),
                        "spawned_by" => m.spawned_by = Some(id(d)?),
                        _ => {
                            has_type = true;
                            let t = d.text()?;
                            m.session_type = SessionType::parse(t)
                                .ok_or_else(|| d.error(format!("unknown session type {t:?}")))?;
                        }
                    }
                    Ok(())
                })?;
                if !has_type {
                    return Err(d.error("metadata needs session_type"));
                }
            }
            "compaction" => {
                let (mut session, mut summary, mut messages) = (None, None, None);
                map(d, "compaction", &COMPACTION_KEYS, |d, k| {
                    match k {
                        "session" => session = Some(id(d)?),
                        "summary" => summary = Some(id(d)?),
                        _ => messages = Some(d.uint()?),
                    }
                    Ok(())
                })?;
                match (session, summary, messages) {
                    (Some(session), Some(summary), Some(messages)) => {
                        s.compaction = Some(Compaction {
                            session,
                            messages,
                            summary,
                        })
                    }
                    _ => return Err(d.error("compaction needs session, summary and messages")),
                }
            }
            "created_at" => {
                required |= 32;
                s.created_at = d.int()?;
            }
            "conversation" => s.conversation = Some(id(d)?),
            "context_state" => s.context_state = Some(id(d)?),
            "display_messages" => {
                required |= 64;
                s.display_messages = delta_field(d, "display_messages")?;
            }
            _ => s.environment_state = Some(id(d)?),
        }
        Ok(())
    })?;
    if required != 127 {
        let names = [
            "run",
            "status",
            "parents",
            "messages",
            "metadata",
            "created_at",
            "display_messages",
        ];
        let missing: Vec<&str> = names
            .iter()
            .enumerate()
            .filter(|(i, _)| required & (1 << i) == 0)
            .map(|(_, n)| *n)
            .collect();
        return Err(d.error(format!("session lacks {}", missing.join(", "))));
    }
    d.finish()?;
    Ok(s)
}
