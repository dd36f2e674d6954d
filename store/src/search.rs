//! Search and usage reports over what sessions hold: `grep` over message
//! text, the filters of `log` and `ls` (time bounds, actor, source, working
//! directory, pattern), and `stats`.
//!
//! The work is reading blobs, so every scan here collects the ids it needs
//! first and reads each blob once, however many histories share it (a
//! fork's first messages are its source's), in storage order when there
//! are many (a pack's blocks one after another), on a few threads. A
//! message's text is what [`message::search_text`] reads from it, so tool
//! calls, tool results and structured content are searched too.
//!
//! This module only reads: it never writes, and takes no lock.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use serde_json::Value;

use crate::error::{Error, OdbError, Result};
use crate::hash::ObjectId;
use crate::index::ConversationInfo;
use crate::message::{self, TokenUsage};
use crate::object::{MessageDelta, RunSummary, Session};
use crate::odb::Odb;
use crate::refs::RefTarget;
use crate::store::Store;

// ---- patterns and times ----

/// A compiled search pattern: a regular expression (the `regex` crate's
/// syntax), matched line by line.
#[derive(Debug, Clone)]
pub struct Pattern {
    re: Regex,
}

impl Pattern {
    /// Compiles `pattern`; an invalid one is [`Error::BadPattern`] with a
    /// one-line reason.
    pub fn new(pattern: &str, ignore_case: bool) -> Result<Pattern> {
        // Matched line by line: ^ and $ hold at each line's ends, also
        // when a whole text is tested at once.
        RegexBuilder::new(pattern)
            .case_insensitive(ignore_case)
            .multi_line(true)
            .crlf(true)
            .build()
            .map(|re| Pattern { re })
            .map_err(|e| Error::BadPattern {
                pattern: pattern.to_owned(),
                reason: one_line_reason(&e),
            })
    }

    /// Whether the pattern matches anywhere in `text`.
    pub fn is_match(&self, text: &str) -> bool {
        self.re.is_match(text)
    }

    /// The lines of `text` that match, with where (byte ranges in the line).
    pub fn matching_lines(&self, text: &str) -> Vec<MatchedLine> {
        if !self.re.is_match(text) {
            return Vec::new();
        }
        text.lines()
            .enumerate()
            .filter_map(|(n, line)| {
                let spans: Vec<(usize, usize)> = self
                    .re
                    .find_iter(line)
                    .map(|m| (m.start(), m.end()))
                    .collect();
                (!spans.is_empty()).then(|| MatchedLine {
                    number: n + 1,
                    text: line.to_owned(),
                    spans,
                })
            })
            .collect()
    }
}

/// The regex crate's syntax errors draw the pattern with a caret over
/// several lines; the last line says what is wrong.
fn one_line_reason(e: &regex::Error) -> String {
    match e {
        regex::Error::Syntax(text) => text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().trim_start_matches("error: ").to_owned())
            .unwrap_or_else(|| text.clone()),
        regex::Error::CompiledTooBig(limit) => {
            format!("it compiles to more than {limit} bytes")
        }
        other => other.to_string().replace('\n', " "),
    }
}

/// A point in time for the lower bound of a time filter (ms since the
/// epoch): `now`, `yesterday` (24 hours ago), a date (`2025-11-01`,
/// midnight UTC at its start), an RFC 3339 time, a time without a zone
/// (`2025-11-01T12:00:00`, UTC), or `N.minutes.ago` (also hours, days,
/// weeks; N not negative), as `gc --prune` reads them.
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64> {
    use crate::gc::{parse_prune, Prune};
    let text = text.trim();
    if text == "yesterday" {
        return Ok(now_ms - 86_400_000);
    }
    if text.len() == 19 {
        if let Some(ms) = crate::time::parse_rfc3339_ms(&format!("{text}Z")) {
            return Ok(ms);
        }
    }
    match parse_prune(text) {
        Ok(Prune::Now) => Ok(now_ms),
        Ok(Prune::Before(ms)) => Ok(ms),
        Ok(Prune::OlderThan(ago)) => Ok(now_ms.saturating_sub(ago)),
        Err(_) => Err(Error::BadTime {
            text: text.to_owned(),
        }),
    }
}

/// A point in time for the upper bound of a time filter, which includes
/// it: as [`parse_time`], except that a date alone means the whole of that
/// day (its last millisecond, UTC), so that a bound of `2025-11-01` keeps
/// what happened on the first of November.
pub fn parse_time_end(text: &str, now_ms: i64) -> Result<i64> {
    let start = parse_time(text, now_ms)?;
    Ok(if is_date_only(text.trim()) {
        start.saturating_add(86_400_000 - 1)
    } else {
        start
    })
}

/// `YYYY-MM-DD` and nothing else.
fn is_date_only(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

// ---- reading blobs once ----

/// Below this many blobs, reading them in the order asked costs less than
/// listing the whole store's storage order.
const STORAGE_ORDER_ABOVE: usize = 2048;
/// Blobs each reading thread takes at least.
const PER_THREAD: usize = 256;

/// Reads each blob of `ids` once (duplicates are read once), in storage
/// order when there are many, on a few threads, and keeps what `f` makes
/// of it. A blob that is missing or corrupt fails the scan.
pub fn scan_blobs<T: Send>(
    odb: &Odb,
    ids: &[ObjectId],
    f: impl Fn(&ObjectId, &Value) -> Option<T> + Sync,
) -> Result<HashMap<ObjectId, T>> {
    let mut wanted: HashSet<ObjectId> = ids.iter().copied().collect();
    let mut order: Vec<ObjectId> = Vec::with_capacity(wanted.len());
    if wanted.len() > STORAGE_ORDER_ABOVE {
        for id in odb.backend().ids_in_storage_order()? {
            if wanted.remove(&id) {
                order.push(id);
            }
        }
        // What storage does not list fails below, naming the blob.
        order.extend(wanted);
    } else {
        let mut seen = HashSet::with_capacity(wanted.len());
        order.extend(ids.iter().filter(|id| seen.insert(**id)));
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(order.len() / PER_THREAD)
        .clamp(1, 8);
    let read = |part: &[ObjectId]| -> Result<Vec<(ObjectId, T)>> {
        let mut out = Vec::new();
        for id in part {
            let v = odb.blob(id)?;
            if let Some(t) = f(id, &v) {
                out.push((*id, t));
            }
        }
        Ok(out)
    };
    if threads == 1 {
        return Ok(read(&order)?.into_iter().collect());
    }
    let chunk = order.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = order
            .chunks(chunk)
            .map(|part| scope.spawn(move || read(part)))
            .collect();
        let mut out = HashMap::new();
        for p in parts {
            out.extend(p.join().map_err(|_| OdbError::ReaderPanicked)??);
        }
        Ok(out)
    })
}

// ---- histories ----

/// What a history walk needs of a session: its first parent and message
/// delta. Sessions are read once for several walks (forks share their
/// ancestors), and only this is kept: imported sessions can carry large
/// metadata.
#[derive(Debug, Default)]
pub struct SessionCache {
    sessions: HashMap<ObjectId, Arc<Link>>,
}

/// A session's place in history walks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub first_parent: Option<ObjectId>,
    pub messages: MessageDelta,
    /// For a compaction: the session it summarised and how many of that
    /// session's messages the summary covers.
    pub compaction: Option<(ObjectId, u64)>,
}

impl SessionCache {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&mut self, odb: &Odb, id: &ObjectId) -> Result<Arc<Link>> {
        if let Some(s) = self.sessions.get(id) {
            return Ok(s.clone());
        }
        let s = odb.session(id)?;
        let link = Arc::new(Link {
            first_parent: s.first_parent(),
            compaction: s.compaction.as_ref().map(|c| (c.session, c.messages)),
            messages: s.messages,
        });
        self.sessions.insert(*id, link.clone());
        Ok(link)
    }
}

/// One position of a history: the message's blob and the session (on the
/// first-parent chain) that added it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub message: ObjectId,
    pub session: ObjectId,
}

/// A session's searched history, each message with the session that added
/// it: the first-parent chain back to a session that keeps nothing of its
/// parent, replayed forward. A compaction does not end it: the messages its
/// summary covers (the first `compaction.messages` of the session it
/// summarised, where they were) come before what the compaction added (the
/// summary, then the kept tail), so that nothing said before a compaction
/// is out of `grep`'s reach, as it is not out of `log --grep`'s.
pub fn placed_history(odb: &Odb, cache: &mut SessionCache, head: &ObjectId) -> Result<Vec<Placed>> {
    let mut chain: Vec<(ObjectId, Arc<Link>)> = Vec::new();
    let mut at = *head;
    loop {
        let s = cache.get(odb, &at)?;
        let parent = s.first_parent;
        let next = if s.messages.base != 0 {
            parent
        } else {
            // Content addressing keeps this acyclic: the summarised
            // session was written before the compaction naming it.
            s.compaction.filter(|c| c.1 > 0).map(|c| c.0)
        };
        chain.push((at, s));
        match next {
            Some(p) => at = p,
            None => break,
        }
    }
    let mut list: Vec<Placed> = Vec::new();
    // Where the last session's own message list starts in `list`: after
    // what the compactions before it summarised.
    let mut start = 0usize;
    for (sid, s) in chain.iter().rev() {
        let d = &s.messages;
        let (kept, of) = match s.compaction {
            Some((_, cut)) if d.base == 0 => (cut, "the session it summarised"),
            _ => (d.base, "its parent"),
        };
        let own = list.len() - start;
        if kept > own as u64 {
            return Err(Error::corrupt(
                *sid,
                format!("keeps {kept} messages of {of}, which has only {own}"),
            ));
        }
        let keep = start + kept as usize;
        if s.compaction.is_some() && d.base == 0 {
            // The summarised messages stay before the compaction's own.
            start = keep;
        }
        list.truncate(keep);
        list.extend(d.added.iter().map(|m| Placed {
            message: *m,
            session: *sid,
        }));
    }
    Ok(list)
}

// ---- grep ----

/// One line of a message's text that matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedLine {
    /// From 1.
    pub number: usize,
    pub text: String,
    /// Byte ranges of the matches in `text`.
    pub spans: Vec<(usize, usize)>,
}

/// What one message blob says that matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobMatch {
    pub role: Option<String>,
    pub lines: Vec<MatchedLine>,
}

/// A message of one searched history that matched.
#[derive(Debug, Clone)]
pub struct GrepHit {
    /// Which of the searched heads (an index into `heads`).
    pub target: usize,
    /// The message's position in that head's history, from 0.
    pub index: u64,
    /// The session that added it there.
    pub session: ObjectId,
    /// The message's blob.
    pub message: ObjectId,
    pub found: Arc<BlobMatch>,
}

/// Searches the message histories of `heads` for `pattern`, keeping only
/// messages whose role is `role` when one is given. A message is reported
/// once for each head whose history holds it (a message two forks share is
/// found in both), in the order of `heads`, then of the history; each blob
/// is read once.
pub fn grep(
    odb: &Odb,
    heads: &[ObjectId],
    pattern: &Pattern,
    role: Option<&str>,
) -> Result<Vec<GrepHit>> {
    let mut cache = SessionCache::new();
    let mut histories = Vec::with_capacity(heads.len());
    let mut blobs = Vec::new();
    for h in heads {
        let hist = placed_history(odb, &mut cache, h)?;
        blobs.extend(hist.iter().map(|p| p.message));
        histories.push(hist);
    }
    drop(cache);
    let found = scan_blobs(odb, &blobs, |_, v| {
        let r = message::role_of(message::rollout_item(v));
        if role.is_some() && r != role {
            return None;
        }
        let lines = pattern.matching_lines(&message::search_text(v));
        (!lines.is_empty()).then(|| {
            Arc::new(BlobMatch {
                role: r.map(str::to_owned),
                lines,
            })
        })
    })?;
    let mut hits = Vec::new();
    for (target, hist) in histories.iter().enumerate() {
        for (index, p) in hist.iter().enumerate() {
            if let Some(m) = found.get(&p.message) {
                hits.push(GrepHit {
                    target,
                    index: index as u64,
                    session: p.session,
                    message: p.message,
                    found: m.clone(),
                });
            }
        }
    }
    Ok(hits)
}

/// Which of `heads` hold a message that matches `pattern` in their history
/// (`ls --grep`); each blob is read once.
pub fn heads_matching(odb: &Odb, heads: &[ObjectId], pattern: &Pattern) -> Result<Vec<bool>> {
    let hits = grep(odb, heads, pattern, None)?;
    let mut out = vec![false; heads.len()];
    for h in hits {
        out[h.target] = true;
    }
    Ok(out)
}

/// Whether a session's title or a message it added matches (`log
/// --grep`).
pub fn session_matches(odb: &Odb, session: &Session, pattern: &Pattern) -> Result<bool> {
    if session
        .title
        .as_deref()
        .is_some_and(|t| pattern.is_match(t))
    {
        return Ok(true);
    }
    for m in &session.messages.added {
        if pattern.is_match(&message::search_text(&odb.blob(m)?)) {
            return Ok(true);
        }
    }
    Ok(false)
}

// ---- who made a session ----

/// Who made each session, for `log --author`, as the store records it: the
/// session's own `metadata.extra.actor` when it names one (a runtime that
/// commits for several people or agents), else the actor of the first
/// ref-log entry that moved a ref to it, else (a session written with its
/// descendants in one write, as an import or a run of several turns does)
/// that of the descendant whose entry brought it in. Ask in log order,
/// children before parents.
#[derive(Debug, Default)]
pub struct Actors {
    first_entry: HashMap<ObjectId, String>,
    inherited: HashMap<ObjectId, String>,
}

impl Actors {
    pub fn load(store: &Store) -> Result<Actors> {
        let mut first_entry = HashMap::new();
        let mut entries = store.reflog_entries()?;
        entries.sort_by_key(|e| e.op);
        for e in entries {
            if let Some(RefTarget::Session(id)) = e.new {
                first_entry.entry(id).or_insert(e.actor);
            }
        }
        Ok(Actors {
            first_entry,
            inherited: HashMap::new(),
        })
    }

    /// The actor of session `id` (decoded: `session`); passes it
    /// on to parents that have no entry of their own.
    pub fn actor(&mut self, id: &ObjectId, session: &Session) -> Option<String> {
        let own = session
            .metadata
            .extra
            .get("actor")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let recorded = self
            .first_entry
            .get(id)
            .or_else(|| self.inherited.get(id))
            .cloned();
        if let Some(r) = &recorded {
            for p in &session.parents {
                if !self.first_entry.contains_key(p) {
                    self.inherited.entry(*p).or_insert_with(|| r.clone());
                }
            }
        }
        own.or(recorded)
    }
}

// ---- what a conversation says of itself ----

/// Where a conversation came from: the import format its record names
/// (`claude-code`, `codex`, `openai`, `swe-agent`), else `native`.
pub fn conversation_source(c: &ConversationInfo) -> String {
    c.record
        .metadata
        .get("source")
        .and_then(Value::as_str)
        .unwrap_or("native")
        .to_owned()
}

/// A session's source, as [`conversation_source`] reads a record.
pub fn session_source(s: &Session) -> String {
    s.metadata
        .extra
        .get("source")
        .and_then(Value::as_str)
        .unwrap_or("native")
        .to_owned()
}

/// The directory a conversation ran in: its record's `cwd` (Claude Code),
/// its Codex `session_meta.cwd`, else its head session's `cwd` metadata
/// (`commit --meta cwd=...`).
pub fn conversation_cwd(odb: &Odb, c: &ConversationInfo) -> Result<Option<String>> {
    let md = &c.record.metadata;
    let from_record = md.get("cwd").and_then(Value::as_str).or_else(|| {
        md.get("session_meta")
            .and_then(|m| m.get("cwd"))
            .and_then(Value::as_str)
    });
    if let Some(cwd) = from_record {
        return Ok(Some(cwd.to_owned()));
    }
    let Some(head) = c.head else { return Ok(None) };
    Ok(odb
        .session(&head)?
        .metadata
        .extra
        .get("cwd")
        .and_then(Value::as_str)
        .map(str::to_owned))
}

/// Whether `cwd` is `dir` or lies under it (whole path components;
/// trailing slashes do not count).
pub fn path_within(cwd: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    let cwd = cwd.trim_end_matches('/');
    if dir.is_empty() {
        return cwd.starts_with('/') || cwd.is_empty();
    }
    cwd == dir
        || cwd
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

// ---- stats ----

/// How `stats` groups sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatsBy {
    /// One row for everything.
    Total,
    Conversation,
    Model,
    /// The UTC day the session was created.
    Day,
    Source,
}

/// Totals of one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub sessions: u64,
    /// Messages the sessions added (a message shared by a fork counts for
    /// the session that added it only).
    pub messages: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub total_tokens: u64,
    pub requests: u64,
    pub duration_ms: u64,
    /// Tool calls by tool name.
    pub tool_calls: std::collections::BTreeMap<String, u64>,
}

impl Totals {
    /// Adds another group's totals to these.
    pub fn merge(&mut self, o: &Totals) {
        self.sessions += o.sessions;
        self.messages += o.messages;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cache_read_tokens += o.cache_read_tokens;
        self.cache_write_tokens += o.cache_write_tokens;
        self.total_tokens += o.total_tokens;
        self.requests += o.requests;
        self.duration_ms += o.duration_ms;
        for (k, v) in &o.tool_calls {
            *self.tool_calls.entry(k.clone()).or_insert(0) += v;
        }
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "sessions": self.sessions,
            "messages": self.messages,
            "tokens": {
                "input": self.input_tokens,
                "output": self.output_tokens,
                "cache_read": self.cache_read_tokens,
                "cache_write": self.cache_write_tokens,
                "total": self.total_tokens,
            },
            "requests": self.requests,
            "duration_ms": self.duration_ms,
            "tool_calls": self.tool_calls,
        })
    }
}

/// What one message blob contributes to a report.
#[derive(Debug, Clone, Default)]
struct MessageFacts {
    model: Option<String>,
    usage: Option<TokenUsage>,
    tools: Vec<String>,
}

/// Adds up what `sessions` cost, grouped by `by`, keeping those created
/// from `since` to `until` (ms, both included) when given. Tokens, requests
/// and duration are the sessions' run summaries; a session whose run
/// recorded no usage counts what its added messages report, one request
/// each. Cache reads and writes, which run summaries have no field for,
/// are the session's `metadata.extra.usage` (`cache_read_tokens`,
/// `cache_write_tokens`, as an import records them per session), else
/// what its messages report. Input tokens mean the same for every source:
/// the prompt tokens neither read from nor written to the cache
/// (Anthropic's `input_tokens`; OpenAI's and Codex's prompt tokens less
/// their cached ones), so input, output, cache reads and cache writes add
/// up to the total. A session's model is its `metadata.extra.model`, else
/// `extra.usage.model`, else the first model its added messages name, else
/// a Codex `turn_context`'s, else `unknown`. Tool calls are counted from
/// the added messages' shapes. A compaction counts the messages it wrote
/// (its summary), not the kept tail it carries over from the session it
/// summarised, which counted there. Rows come sorted by key.
pub fn stats(
    store: &Store,
    sessions: &[ObjectId],
    by: StatsBy,
    since: Option<i64>,
    until: Option<i64>,
) -> Result<Vec<(String, Totals)>> {
    let odb = store.odb();
    let name_of = |c: &ObjectId| store.index().conversation_name(c);
    // Only what the report needs is kept of each session: imported ones can
    // carry large metadata.
    struct Counted {
        conversation: ObjectId,
        created_at: i64,
        run: RunSummary,
        added: Vec<ObjectId>,
        model: Option<String>,
        source: String,
        /// `extra.usage`'s cache reads and writes, when it names them.
        cache: Option<(u64, u64)>,
    }
    let mut read: Vec<Counted> = Vec::with_capacity(sessions.len());
    let mut seen = HashSet::new();
    for id in sessions {
        if !seen.insert(*id) {
            continue;
        }
        let s = odb.session(id)?;
        if since.is_some_and(|t| s.created_at < t) || until.is_some_and(|t| s.created_at > t) {
            continue;
        }
        let extra_usage = s.metadata.extra.get("usage").filter(|u| u.is_object());
        let figure = |k: &str| extra_usage.and_then(|u| u.get(k)).and_then(Value::as_u64);
        let cache = match (figure("cache_read_tokens"), figure("cache_write_tokens")) {
            (None, None) => None,
            (r, w) => Some((r.unwrap_or(0), w.unwrap_or(0))),
        };
        let mut added = s.messages.added.clone();
        if let Some(c) = &s.compaction {
            // The kept tail: the summarised session's messages from the
            // cut on, carried over after the summary.
            let source_len = odb.session(&c.session)?.messages.len();
            let tail = usize::try_from(source_len.saturating_sub(c.messages)).unwrap_or(usize::MAX);
            added.truncate(added.len().saturating_sub(tail));
        }
        read.push(Counted {
            conversation: s.conversation_id(*id),
            created_at: s.created_at,
            run: s.run,
            model: s
                .metadata
                .extra
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| {
                    extra_usage
                        .and_then(|u| u.get("model"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .or_else(|| codex_model(&s)),
            source: session_source(&s),
            cache,
            added,
        });
    }
    let blobs: Vec<ObjectId> = read.iter().flat_map(|s| s.added.iter().copied()).collect();
    let facts = scan_blobs(odb, &blobs, |_, v| {
        let f = MessageFacts {
            model: message::model_of(v).map(str::to_owned),
            usage: message::token_usage(v),
            tools: message::tool_calls(message::rollout_item(v))
                .into_iter()
                .map(|c| c.name)
                .collect(),
        };
        (f.model.is_some() || f.usage.is_some() || !f.tools.is_empty()).then_some(f)
    })?;
    let mut names: HashMap<ObjectId, String> = HashMap::new();
    let mut groups: std::collections::BTreeMap<String, Totals> = Default::default();
    for s in read {
        let mut t = Totals {
            sessions: 1,
            messages: s.added.len() as u64,
            duration_ms: s.run.duration_ms,
            ..Totals::default()
        };
        let mut from_messages = Totals::default();
        let mut model = s.model;
        for m in &s.added {
            let Some(f) = facts.get(m) else { continue };
            if model.is_none() {
                model.clone_from(&f.model);
            }
            if let Some(u) = f.usage {
                from_messages.input_tokens += u.input;
                from_messages.output_tokens += u.output;
                from_messages.requests += 1;
                from_messages.cache_read_tokens += u.cache_read;
                from_messages.cache_write_tokens += u.cache_write;
            }
            for tool in &f.tools {
                let name = if tool.is_empty() { "(unnamed)" } else { tool };
                *t.tool_calls.entry(name.to_owned()).or_insert(0) += 1;
            }
        }
        (t.cache_read_tokens, t.cache_write_tokens) = s.cache.unwrap_or((
            from_messages.cache_read_tokens,
            from_messages.cache_write_tokens,
        ));
        let u = &s.run.usage;
        if *u == crate::object::Usage::default() {
            t.input_tokens = from_messages.input_tokens;
            t.output_tokens = from_messages.output_tokens;
            t.requests = from_messages.requests;
            t.total_tokens =
                t.input_tokens + t.output_tokens + t.cache_read_tokens + t.cache_write_tokens;
        } else {
            // A run's prompt tokens hold the cached ones (OpenAI's and
            // Codex's count, and the Claude Code import's): input is
            // what is left, as Anthropic counts it.
            t.input_tokens = u
                .prompt_tokens
                .saturating_sub(t.cache_read_tokens.saturating_add(t.cache_write_tokens));
            t.output_tokens = u.completion_tokens;
            t.requests = u.requests;
            t.total_tokens = u.total_tokens;
        }
        let key = match by {
            StatsBy::Total => "total".to_owned(),
            StatsBy::Model => model.unwrap_or_else(|| "unknown".to_owned()),
            StatsBy::Day => crate::time::format_rfc3339_ms(s.created_at)[..10].to_owned(),
            StatsBy::Source => s.source,
            StatsBy::Conversation => {
                let conv = s.conversation;
                if let Some(n) = names.get(&conv) {
                    n.clone()
                } else {
                    let n = name_of(&conv)?.unwrap_or_else(|| conv.to_hex_prefix(12));
                    names.insert(conv, n.clone());
                    n
                }
            }
        };
        groups.entry(key).or_default().merge(&t);
    }
    Ok(groups.into_iter().collect())
}

/// The model a Codex `turn_context` entry names, among the events an
/// import kept in the session's metadata (`extra.events`).
fn codex_model(s: &Session) -> Option<String> {
    let Some(Value::Object(events)) = s.metadata.extra.get("events") else {
        return None;
    };
    // An entry is kept as a value or as its line's exact text.
    events
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .map(|e| crate::import::event_value(e))
        .filter(|e| e.get("type").and_then(Value::as_str) == Some("turn_context"))
        .find_map(|e| e.get("payload")?.get("model")?.as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_report_lines_and_one_line_errors() {
        let p = Pattern::new("b+", false).unwrap();
        let lines = p.matching_lines("abba\nno\nb");
        assert_eq!(
            lines,
            vec![
                MatchedLine {
                    number: 1,
                    text: "abba".into(),
                    spans: vec![(1, 3)]
                },
                MatchedLine {
                    number: 3,
                    text: "b".into(),
                    spans: vec![(0, 1)]
                },
            ]
        );
        assert!(Pattern::new("HELLO", true).unwrap().is_match("say hello"));
        let anchored = Pattern::new("^no$", false).unwrap();
        assert_eq!(anchored.matching_lines("abba\r\nno\r\nb").len(), 1);
        assert!(anchored.is_match("x\nno\ny"));
        assert!(!Pattern::new("HELLO", false).unwrap().is_match("say hello"));
        let e = Pattern::new("a(", false).unwrap_err().to_string();
        assert_eq!(e, "invalid regular expression 'a(': unclosed group");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn times_parse_like_prune_times() {
        let now = 1_763_000_000_000;
        assert_eq!(parse_time("now", now).unwrap(), now);
        assert_eq!(parse_time("yesterday", now).unwrap(), now - 86_400_000);
        assert_eq!(
            parse_time("2.weeks.ago", now).unwrap(),
            now - 14 * 86_400_000
        );
        assert_eq!(parse_time("1970-01-02", now).unwrap(), 86_400_000);
        assert_eq!(parse_time("1970-01-02T00:00:01", now).unwrap(), 86_401_000);
        assert_eq!(
            parse_time("1970-01-02T00:00:01+01:00", now).unwrap(),
            82_801_000
        );
        assert!(matches!(
            parse_time("soon", now),
            Err(Error::BadTime { .. })
        ));
        // A date alone, as an upper bound, is the whole day.
        assert_eq!(
            parse_time_end("1970-01-02", now).unwrap(),
            2 * 86_400_000 - 1
        );
        assert_eq!(
            parse_time_end("1970-01-02T00:00:01", now).unwrap(),
            86_401_000
        );
        assert_eq!(parse_time_end("now", now).unwrap(), now);
        // Time runs one way: no negative N.days.ago, here or in gc.
        for bad in ["-1.days.ago", "-3.weeks.ago"] {
            assert!(matches!(parse_time(bad, now), Err(Error::BadTime { .. })));
            assert!(matches!(
                parse_time_end(bad, now),
                Err(Error::BadTime { .. })
            ));
        }
    }

    #[test]
    fn grep_finds_a_shared_message_in_each_history_and_stats_add_up() {
        use crate::store::{Cut, ForkOptions, Messages, Turn};
        use crate::{Durability, Store};
        use serde_json::json;
        let store = Store::in_memory().unwrap();
        let turn = |m: Vec<Value>| Turn {
            messages: Messages::Added(m),
            ..Turn::default()
        };
        let (_, root) = store
            .create(
                Some("fix"),
                turn(vec![
                    json!({"role": "user", "content": "the flaky test"}),
                    json!({"role": "assistant", "content": null, "tool_calls": [{"id": "1",
                        "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
                ]),
                Durability::Sync,
            )
            .unwrap();
        let (_, fork) = store
            .fork(
                root,
                ForkOptions {
                    name: Some("retry".into()),
                    cut: Some(Cut::AtMessage(1)),
                    turn: Some(turn(vec![
                        json!({"role": "user", "content": "flaky again"}),
                    ])),
                },
                Durability::Sync,
            )
            .unwrap();
        let p = Pattern::new("flaky", false).unwrap();
        let hits = grep(store.odb(), &[root, fork], &p, None).unwrap();
        let seen: Vec<(usize, u64, ObjectId)> = hits
            .iter()
            .map(|h| (h.target, h.index, h.session))
            .collect();
        assert_eq!(seen, [(0, 0, root), (1, 0, root), (1, 1, fork)]);
        assert_eq!(
            grep(store.odb(), &[root, fork], &p, Some("assistant"))
                .unwrap()
                .len(),
            0
        );
        assert_eq!(
            heads_matching(
                store.odb(),
                &[root, fork],
                &Pattern::new("again", false).unwrap()
            )
            .unwrap(),
            [false, true]
        );
        let rows = stats(&store, &[root, fork, root], StatsBy::Total, None, None).unwrap();
        assert_eq!(rows.len(), 1);
        let t = &rows[0].1;
        assert_eq!((t.sessions, t.messages), (2, 3));
        assert_eq!(t.tool_calls.get("ls"), Some(&1));
    }

    #[test]
    fn paths_nest_by_component() {
        assert!(path_within("/src/app", "/src"));
        assert!(path_within("/src/app", "/src/app/"));
        assert!(path_within("/src", "/"));
        assert!(!path_within("/srcx", "/src"));
        assert!(!path_within("/src", "/src/app"));
    }
}
