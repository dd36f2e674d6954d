//! Purging: expiring the ref log, redacting sessions, and explaining why
//! gc keeps an object (objects-format.md, "Expiring the ref log" and
//! "Redaction").
//!
//! Nothing here deletes bytes: an expiry is an operation that says which
//! ref-log entries no longer count, and a redaction writes new sessions and
//! moves refs to them. The bytes go when gc, which no longer finds them
//! reachable, sweeps them. This module never rewrites an operation: the
//! operation and ref-log chains stay verifiable.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::gc::{Prune, DEFAULT_REFLOG_EXPIRY_MS};
use crate::hash::ObjectId;
use crate::object::{blob, Blob, EncodedObject, ObjectKind, Session};
use crate::odb::Durability;
use crate::refs::{
    large_fields, ConversationUpdate, Operation, PreviousValue, RefEdit, RefName, RefTarget,
    ReflogEntry, ReflogExpiry,
};
use crate::store::{Store, Transaction};
use crate::time::now_ms;

/// The reason recorded by the operation that expires ref-log entries.
pub const EXPIRE_REASON: &str = "reflog-expire";

/// Every ref-log entry with whether an expiry recorded before it was read
/// covers it, oldest first.
fn entries_with_expiry(store: &Store) -> Result<Vec<(ReflogEntry, bool)>> {
    let backend = store.odb().backend();
    backend.refresh()?;
    let mut out: Vec<(ReflogEntry, bool)> = Vec::new();
    // Per ref, the positions in `out` of its entries, oldest first.
    let mut by_ref: HashMap<RefName, Vec<usize>> = HashMap::new();
    for (seq, bytes) in backend.ops_after(0)? {
        let op = Operation::decode(&bytes).map_err(|e| Error::CorruptOperation {
            seq,
            reason: e.to_string(),
        })?;
        for x in &op.expire {
            let Some(list) = by_ref.get(&x.name) else {
                continue;
            };
            // Hashes are computed only for refs an expiry names.
            if let Some(at) = list.iter().rposition(|&i| out[i].0.hash() == x.through) {
                for &i in &list[..=at] {
                    out[i].1 = true;
                }
            }
        }
        for e in op.reflog_entries() {
            by_ref.entry(e.name.clone()).or_default().push(out.len());
            out.push((e, false));
        }
    }
    Ok(out)
}

/// The time before which [`Store::expire_reflog`] expires entries (an
/// entry expires when its time is below it), from a `--expire` value.
pub fn expiry_cutoff(when: Prune) -> i64 {
    match when {
        Prune::Now => i64::MAX,
        Prune::Before(t) => t,
        Prune::OlderThan(age) => now_ms().saturating_sub(age).saturating_add(1),
    }
}

/// The default `--expire` of `reflog expire`: entries older than gc's
/// ref-log expiry (90 days).
pub fn default_expiry() -> Prune {
    Prune::OlderThan(DEFAULT_REFLOG_EXPIRY_MS)
}

/// What [`Store::expire_reflog`] expired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpireReport {
    /// Per ref, how many of its entries were expired, and how many remain.
    pub refs: BTreeMap<String, (usize, usize)>,
    /// The operation that recorded it (none in a dry run or when nothing
    /// expired).
    pub op: Option<u64>,
}

impl ExpireReport {
    /// How many entries were expired in all.
    pub fn expired(&self) -> usize {
        self.refs.values().map(|(e, _)| e).sum()
    }

    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "expired": self.expired(),
            "op": self.op,
            "refs": self.refs.iter()
                .map(|(n, (e, k))| (n.clone(), serde_json::json!({"expired": e, "kept": k})))
                .collect::<serde_json::Map<_, _>>(),
        })
    }
}

impl Store {
    /// The ref log without the entries an expiry covers, oldest first: what
    /// `reflog` shows and what keeps objects alive.
    pub fn live_reflog_entries(&self) -> Result<Vec<ReflogEntry>> {
        Ok(entries_with_expiry(self)?
            .into_iter()
            .filter(|(_, expired)| !expired)
            .map(|(e, _)| e)
            .collect())
    }

    /// Expires the entries of `refs` (every ref with a log, deleted refs
    /// included, when `None`) whose time is below `cutoff` (see
    /// [`expiry_cutoff`]): of each ref's live entries, the longest run from
    /// the oldest on that is all older than the cutoff, so that each ref's
    /// log still starts at an entry of its chain. One operation records it
    /// (reason [`EXPIRE_REASON`]); with `dry_run` nothing is written.
    pub fn expire_reflog(
        &self,
        refs: Option<&[RefName]>,
        cutoff: i64,
        dry_run: bool,
        durability: Durability,
    ) -> Result<ExpireReport> {
        let mut live: BTreeMap<String, (RefName, Vec<ReflogEntry>)> = BTreeMap::new();
        for (e, expired) in entries_with_expiry(self)? {
            if !expired {
                live.entry(e.name.to_string())
                    .or_insert_with(|| (e.name.clone(), Vec::new()))
                    .1
                    .push(e);
            }
        }
        let mut report = ExpireReport::default();
        let mut expire = Vec::new();
        let wanted: Option<BTreeSet<String>> =
            refs.map(|r| r.iter().map(ToString::to_string).collect());
        for (full, (name, entries)) in &live {
            if wanted.as_ref().is_some_and(|w| !w.contains(full)) {
                continue;
            }
            let n = entries.iter().take_while(|e| e.time < cutoff).count();
            report
                .refs
                .insert(full.clone(), (n, entries.len().saturating_sub(n)));
            if n > 0 {
                expire.push(ReflogExpiry {
                    name: name.clone(),
                    through: entries[n - 1].hash(),
                });
            }
        }
        if let Some(w) = &wanted {
            for full in w {
                report.refs.entry(full.clone()).or_insert((0, 0));
            }
        }
        if dry_run || expire.is_empty() {
            return Ok(report);
        }
        let committed = self.transact_expiring(
            Transaction {
                reason: EXPIRE_REASON.into(),
                ..Transaction::default()
            },
            expire,
            durability,
        )?;
        report.op = Some(committed.op);
        Ok(report)
    }
}

// ---- redaction ----

/// Rewrites text: `Some((new text, matches))` when it matched, `None` when
/// it did not. The library knows no pattern syntax; the caller brings it.
pub type Redactor<'a> = dyn Fn(&str) -> Option<(String, usize)> + 'a;

/// How to redact.
#[derive(Debug, Clone)]
pub struct RedactOptions {
    /// Why, in the ref log (never the secret: the caller's words).
    pub reason: String,
    /// Find and report only.
    pub dry_run: bool,
    pub durability: Durability,
}

/// One session rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    pub old: ObjectId,
    pub new: ObjectId,
    /// Matches in this session's own text (its title, metadata and the
    /// blobs it adds); 0 for a session rewritten only because a session it
    /// names was.
    pub matches: usize,
}

/// What [`Store::redact`] did (or, in a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedactReport {
    /// Sessions rewritten, parents before children.
    pub sessions: Vec<Rewritten>,
    /// Blobs rewritten: (old, new, matches).
    pub blobs: Vec<(ObjectId, ObjectId, usize)>,
    /// Refs moved: (ref, old, new).
    pub refs: Vec<(RefName, ObjectId, ObjectId)>,
    /// Conversation records whose title or metadata were redacted.
    pub records: Vec<String>,
    /// Matches found in all.
    pub matches: usize,
    /// Refs not selected that still reach a rewritten session.
    pub still_reachable_from: Vec<RefName>,
    /// Operations (sequence numbers) whose text still matches: a record's
    /// title, preset or metadata, a run's error, a reason, actor or name.
    /// Operations are never rewritten (objects-format.md, "Redaction").
    pub operations: Vec<u64>,
    /// The operation that moved the refs.
    pub op: Option<u64>,
}

impl RedactReport {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "matches": self.matches,
            "sessions": self.sessions.iter().map(|r| serde_json::json!({
                "old": r.old.to_string(), "new": r.new.to_string(), "matches": r.matches,
            })).collect::<Vec<_>>(),
            "blobs": self.blobs.iter().map(|(o, n, m)| serde_json::json!({
                "old": o.to_string(), "new": n.to_string(), "matches": m,
            })).collect::<Vec<_>>(),
            "refs": self.refs.iter().map(|(r, o, n)| serde_json::json!({
                "ref": r.to_string(), "old": o.to_string(), "new": n.to_string(),
            })).collect::<Vec<_>>(),
            "records": self.records,
            "still_reachable_from": self.still_reachable_from.iter()
                .map(ToString::to_string).collect::<Vec<_>>(),
            "operations": self.operations,
            "op": self.op,
        })
    }
}

/// Two keys of one JSON object that the replacement would make one (its
/// value would silently lose the other's): the key they would become.
struct KeyCollision(String);

impl KeyCollision {
    /// The error, naming what holds the object (`blob <id>`), never the
    /// keys as they were (they hold the text).
    fn error(self, holder: &str) -> Error {
        Error::Invalid(format!(
            "redacting {holder} would merge two keys of one JSON object into {:?}, losing a value: \
             nothing was rewritten (choose a --replace that keeps them apart)",
            self.0
        ))
    }
}

/// Inserts `k` (redacted to `new`, or kept) into `map`, failing when a key
/// already there is the same.
fn insert_key(
    map: &mut serde_json::Map<String, Value>,
    k: String,
    v: Value,
) -> std::result::Result<(), KeyCollision> {
    if map.contains_key(&k) {
        return Err(KeyCollision(k));
    }
    map.insert(k, v);
    Ok(())
}

/// Redacts every string in a JSON value (object keys included); returns
/// the matches.
fn redact_json(v: &mut Value, redact: &Redactor<'_>) -> std::result::Result<usize, KeyCollision> {
    Ok(match v {
        Value::String(s) => match redact(s) {
            Some((t, n)) => {
                *s = t;
                n
            }
            None => 0,
        },
        Value::Array(items) => {
            let mut n = 0;
            for i in items {
                n += redact_json(i, redact)?;
            }
            n
        }
        Value::Object(map) => {
            let mut n = 0;
            if !map.keys().any(|k| redact(k).is_some()) {
                for val in map.values_mut() {
                    n += redact_json(val, redact)?;
                }
                return Ok(n);
            }
            let old = std::mem::take(map);
            for (k, mut val) in old {
                n += redact_json(&mut val, redact)?;
                let k = match redact(&k) {
                    Some((t, m)) => {
                        n += m;
                        t
                    }
                    None => k,
                };
                insert_key(map, k, val)?;
            }
            n
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    })
}

/// Redacts the source lines an import kept as their exact text (JSON
/// strings in `extra.events` and `trailing_events`) as the values they
/// are: a line whose value matches is kept as its redacted value, since
/// its bytes hold the text (and a literal replacement in JSON text could
/// miss an escaped match, or break the line). Other strings are left to
/// the caller's [`redact_map`].
fn redact_line_texts(
    v: &mut Value,
    redact: &Redactor<'_>,
) -> std::result::Result<usize, KeyCollision> {
    match v {
        Value::String(_) => {
            let std::borrow::Cow::Owned(mut value) = crate::import::event_value(v) else {
                return Ok(0);
            };
            let n = redact_json(&mut value, redact)?;
            if n > 0 {
                *v = value;
            }
            Ok(n)
        }
        Value::Array(items) => {
            let mut n = 0;
            for i in items {
                n += redact_line_texts(i, redact)?;
            }
            Ok(n)
        }
        Value::Object(map) => {
            let mut n = 0;
            for i in map.values_mut() {
                n += redact_line_texts(i, redact)?;
            }
            Ok(n)
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => Ok(0),
    }
}

/// Redacts a metadata map: its values and its keys.
fn redact_map(
    map: &mut BTreeMap<String, Value>,
    redact: &Redactor<'_>,
) -> std::result::Result<usize, KeyCollision> {
    let mut n = 0;
    for v in map.values_mut() {
        n += redact_json(v, redact)?;
    }
    if map.keys().any(|k| redact(k).is_some()) {
        for (k, v) in std::mem::take(map) {
            let k = match redact(&k) {
                Some((t, m)) => {
                    n += m;
                    t
                }
                None => k,
            };
            if map.contains_key(&k) {
                return Err(KeyCollision(k));
            }
            map.insert(k, v);
        }
    }
    Ok(n)
}

fn redact_opt(s: &mut Option<String>, redact: &Redactor<'_>) -> usize {
    match s.as_deref().and_then(redact) {
        Some((t, n)) => {
            *s = Some(t);
            n
        }
        None => 0,
    }
}

/// The rewriting state: what each session and blob became.
struct Rewriter<'s, 'r> {
    store: &'s Store,
    redact: &'r Redactor<'r>,
    sessions: HashMap<ObjectId, ObjectId>,
    blobs: HashMap<ObjectId, ObjectId>,
    objects: Vec<EncodedObject>,
    report: RedactReport,
}

impl Rewriter<'_, '_> {
    fn blob(&mut self, id: ObjectId) -> Result<(ObjectId, usize)> {
        if let Some(n) = self.blobs.get(&id) {
            return Ok((*n, 0));
        }
        let mut v = self.store.odb().blob(&id)?;
        let n = redact_json(&mut v, self.redact).map_err(|c| c.error(&format!("blob {id}")))?;
        let new = if n == 0 {
            id
        } else {
            let enc = Blob::new(v)?.encode();
            let new = enc.id();
            self.objects.push(enc);
            self.report.blobs.push((id, new, n));
            new
        };
        self.blobs.insert(id, new);
        Ok((new, n))
    }

    fn blobs(&mut self, ids: &mut [ObjectId]) -> Result<usize> {
        let mut n = 0;
        for id in ids {
            let (new, m) = self.blob(*id)?;
            *id = new;
            n += m;
        }
        Ok(n)
    }

    /// Rewrites the sessions `roots` reach, each after every session it
    /// names (parents, compaction source, spawner).
    fn run(&mut self, roots: &[ObjectId]) -> Result<()> {
        let mut stack: Vec<(ObjectId, bool)> = roots.iter().map(|r| (*r, false)).collect();
        let mut decoded: HashMap<ObjectId, Session> = HashMap::new();
        while let Some((id, named_done)) = stack.pop() {
            if self.sessions.contains_key(&id) {
                continue;
            }
            if !named_done {
                let s = match decoded.get(&id) {
                    Some(s) => s.clone(),
                    None => {
                        let s = self.store.odb().session(&id)?;
                        decoded.insert(id, s.clone());
                        s
                    }
                };
                stack.push((id, true));
                for n in s.sessions() {
                    if !self.sessions.contains_key(&n) {
                        stack.push((n, false));
                    }
                }
                // The spawner too, if the store has it: what it became is
                // what this session names, whichever the walk met first.
                if let Some(sp) = s.metadata.spawned_by {
                    if !self.sessions.contains_key(&sp) && self.store.odb().contains(&sp)? {
                        stack.push((sp, false));
                    }
                }
                continue;
            }
            let Some(old) = decoded.remove(&id) else {
                continue;
            };
            let mut s = old.clone();
            let map = |x: &ObjectId, m: &HashMap<ObjectId, ObjectId>| *m.get(x).unwrap_or(x);
            for p in &mut s.parents {
                *p = map(p, &self.sessions);
            }
            if let Some(c) = &mut s.compaction {
                c.session = map(&c.session, &self.sessions);
            }
            if let Some(sp) = &mut s.metadata.spawned_by {
                *sp = map(sp, &self.sessions);
            }
            let mut n = 0;
            n += self.blobs(&mut s.messages.added)?;
            n += self.blobs(&mut s.display_messages.added)?;
            for b in [&mut s.context_state, &mut s.environment_state]
                .into_iter()
                .flatten()
            {
                let (new, m) = self.blob(*b)?;
                *b = new;
                n += m;
            }
            if let Some(c) = &mut s.compaction {
                let (new, m) = self.blob(c.summary)?;
                c.summary = new;
                n += m;
            }
            n += redact_opt(&mut s.title, self.redact);
            n += redact_opt(&mut s.metadata.transport, self.redact);
            n += redact_opt(&mut s.metadata.preset_id, self.redact);
            let holder = || format!("the metadata of session {id}");
            if let Some(events) = s.metadata.extra.get_mut("events") {
                n += redact_line_texts(events, self.redact).map_err(|c| c.error(&holder()))?;
            }
            n += redact_map(&mut s.metadata.extra, self.redact).map_err(|c| c.error(&holder()))?;
            let new = if s == old {
                id
            } else {
                // The rewritten session stays in its conversation, whose
                // id (its root's id) is kept: records and the index name
                // conversations by it.
                s.conversation = Some(old.conversation_id(id));
                let enc = s.encode()?;
                let new = enc.id();
                self.objects.push(enc);
                self.report.sessions.push(Rewritten {
                    old: id,
                    new,
                    matches: n,
                });
                new
            };
            self.report.matches += n;
            self.sessions.insert(id, new);
        }
        Ok(())
    }
}

impl Store {
    /// Rewrites every session that `refs` (every ref, HEAD included, when
    /// `None`) reach whose text `redact` changes (messages, display
    /// messages, states, compaction summaries, title, metadata), and every
    /// session that names one of them (children, forks, compactions of
    /// it), as new sessions; then moves the refs with compare-and-swap and
    /// redacts the conversations' records, in one operation whose reason
    /// says why and how much (never what). The old sessions stay until the
    /// ref log that names them expires and gc prunes them.
    pub fn redact(
        &self,
        refs: Option<&[RefName]>,
        redact: &Redactor<'_>,
        opts: &RedactOptions,
    ) -> Result<RedactReport> {
        self.catch_up()?;
        let mut all = self.refs()?;
        if !all.iter().any(|(n, _)| *n == RefName::Head) {
            if let Some(t) = self.get_ref(&RefName::Head)? {
                all.push((RefName::Head, t));
            }
        }
        // A symbolic HEAD asked for by name stands for the ref it follows.
        let wanted: Option<Vec<RefName>> = refs.map(|w| {
            w.iter()
                .map(|r| match all.iter().find(|(n, _)| n == r) {
                    Some((_, RefTarget::Symbolic(followed))) => followed.clone(),
                    _ => r.clone(),
                })
                .collect()
        });
        let selected: Vec<(RefName, ObjectId)> = all
            .iter()
            .filter(|(n, _)| wanted.as_ref().is_none_or(|w| w.contains(n)))
            .filter_map(|(n, t)| match t {
                RefTarget::Session(id) => Some((n.clone(), *id)),
                RefTarget::Symbolic(_) => None,
            })
            .collect();
        if let Some(w) = refs {
            for r in w {
                if !all.iter().any(|(n, _)| n == r) {
                    return Err(Error::Invalid(format!("{r} does not exist")));
                }
            }
        }
        let mut rw = Rewriter {
            store: self,
            redact,
            sessions: HashMap::new(),
            blobs: HashMap::new(),
            objects: Vec::new(),
            report: RedactReport::default(),
        };
        let roots: Vec<ObjectId> = selected.iter().map(|(_, id)| *id).collect();
        rw.run(&roots)?;
        let mut edits = Vec::new();
        for (name, old) in &selected {
            let new = rw.sessions.get(old).copied().unwrap_or(*old);
            if new != *old {
                edits.push(RefEdit {
                    name: name.clone(),
                    expected: PreviousValue::MustMatch(RefTarget::Session(*old)),
                    new: Some(RefTarget::Session(new)),
                });
                rw.report.refs.push((name.clone(), *old, new));
            }
        }
        // The conversations' records: title and metadata.
        let mut conversations = Vec::new();
        // Each record is written only if it is still the one read here.
        let mut expect_records = Vec::new();
        for (name, _) in &selected {
            let (RefName::Conversation(c) | RefName::Archived(c)) = name else {
                continue;
            };
            let Some(info) = self.conversation(c)? else {
                continue;
            };
            let mut record = info.record.clone();
            let mut n = redact_opt(&mut record.title, redact);
            n += redact_opt(&mut record.default_preset_id, redact);
            // Large values are blobs the record names: redacted as values,
            // then kept as blobs again (new ones where the text changed).
            let mut missing = None;
            large_fields::inline(&mut record.metadata, &mut |id| match self.odb().blob(id) {
                Ok(v) => Some(v),
                Err(e) => {
                    missing.get_or_insert(e);
                    None
                }
            });
            if let Some(e) = missing {
                return Err(e);
            }
            let holder = || format!("the record of conversation {c}");
            if let Some(trailing) = record.metadata.get_mut("trailing_events") {
                n += redact_line_texts(trailing, redact).map_err(|k| k.error(&holder()))?;
            }
            n += redact_map(&mut record.metadata, redact).map_err(|k| k.error(&holder()))?;
            let mut large = Vec::new();
            large_fields::externalize(&mut record.metadata, &mut |v| {
                let o = EncodedObject::new(ObjectKind::Blob, blob::encode_value(v).ok()?);
                let id = o.id();
                large.push(o);
                Some(id)
            });
            if n > 0 {
                for o in large {
                    if !self.odb().contains(&o.id())? {
                        rw.objects.push(o);
                    }
                }
                record.updated_at = now_ms().max(record.updated_at);
                rw.report.matches += n;
                rw.report.records.push(c.clone());
                expect_records.push((c.clone(), Some(info.record.clone())));
                conversations.push(ConversationUpdate {
                    name: c.clone(),
                    record: Some(record),
                });
            }
        }
        // Refs left out that still reach what was rewritten: the caller
        // should know the old text stays reachable from them.
        if refs.is_some() && !rw.report.sessions.is_empty() {
            let rewritten: HashSet<ObjectId> = rw
                .report
                .sessions
                .iter()
                .map(|r| r.old)
                .chain(rw.report.blobs.iter().map(|b| b.0))
                .collect();
            for (name, t) in &all {
                let RefTarget::Session(id) = t else { continue };
                if selected.iter().any(|(n, _)| n == name) {
                    continue;
                }
                if reaches_any(self, *id, &rewritten)? {
                    rw.report.still_reachable_from.push(name.clone());
                }
            }
        }
        let mut report = rw.report;
        report.operations = operations_holding(self, redact)?;
        if opts.dry_run || (edits.is_empty() && conversations.is_empty()) {
            return Ok(report);
        }
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let reason = format!(
            "redact: {} ({}, {} rewritten)",
            opts.reason,
            plural(report.matches, "match", "matches"),
            plural(report.sessions.len(), "session", "sessions")
        );
        // A run in progress on a conversation would commit onto the old
        // head: refused (`Busy`) rather than racing it.
        // So would one on a conversation whose record alone is redacted:
        // its commit would write the old record back.
        let mut require_unclaimed: Vec<String> = edits
            .iter()
            .filter_map(|e| match &e.name {
                RefName::Conversation(c) => Some(c.clone()),
                _ => None,
            })
            .collect();
        for c in &report.records {
            if !require_unclaimed.contains(c) {
                require_unclaimed.push(c.clone());
            }
        }
        let committed = self.transact(
            Transaction {
                reason,
                edits,
                conversations,
                objects: rw.objects,
                require_unclaimed,
                expect_records,
                ..Transaction::default()
            },
            opts.durability,
        )?;
        report.op = Some(committed.op);
        Ok(report)
    }
}

/// The operations whose own text `redact` matches (see
/// [`RedactReport::operations`]).
fn operations_holding(store: &Store, redact: &Redactor<'_>) -> Result<Vec<u64>> {
    let backend = store.odb().backend();
    backend.refresh()?;
    let mut out = Vec::new();
    for (seq, bytes) in backend.ops_after(0)? {
        let op = Operation::decode(&bytes).map_err(|e| Error::CorruptOperation {
            seq,
            reason: e.to_string(),
        })?;
        if op_holds(&op, redact) {
            out.push(seq);
        }
    }
    Ok(out)
}

fn op_holds(op: &Operation, redact: &Redactor<'_>) -> bool {
    let hit = |t: &str| redact(t).is_some();
    fn json_hit(v: &Value, hit: &dyn Fn(&str) -> bool) -> bool {
        match v {
            Value::String(s) => hit(s),
            Value::Array(a) => a.iter().any(|v| json_hit(v, hit)),
            Value::Object(m) => m.iter().any(|(k, v)| hit(k) || json_hit(v, hit)),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }
    if hit(&op.reason) || hit(&op.actor) {
        return true;
    }
    if op.refs.iter().any(|u| hit(&u.name.to_string())) {
        return true;
    }
    let record_hit = |r: &crate::refs::ConversationRecord| {
        r.title.as_deref().is_some_and(hit)
            || r.default_preset_id.as_deref().is_some_and(hit)
            || r.metadata.iter().any(|(k, v)| hit(k) || json_hit(v, &hit))
    };
    if op
        .conversations
        .iter()
        .any(|c| hit(&c.name) || c.record.as_ref().is_some_and(record_hit))
    {
        return true;
    }
    op.runs.iter().any(|r| {
        hit(&r.conversation)
            || matches!(&r.kind, crate::refs::RunEventKind::Fail { error } if hit(error))
    })
}

/// Whether `from` reaches (through parents and compaction sources, and the
/// blobs each session names) any of `targets`.
fn reaches_any(store: &Store, from: ObjectId, targets: &HashSet<ObjectId>) -> Result<bool> {
    let mut seen = HashSet::new();
    let mut stack = vec![from];
    while let Some(id) = stack.pop() {
        if targets.contains(&id) {
            return Ok(true);
        }
        if !seen.insert(id) {
            continue;
        }
        match store.odb().session(&id) {
            Ok(s) => {
                if s.blobs().any(|b| targets.contains(&b)) {
                    return Ok(true);
                }
                stack.extend(s.sessions());
            }
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

// ---- why ----

/// One step of the path that keeps an object alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhyStep {
    /// A ref (HEAD included) pointing at the session.
    Ref(RefName),
    /// A live ref-log entry naming the session (its old or new value).
    Reflog { name: RefName, op: u64, time: i64 },
    /// A session, and how the one before it names it (`None` for the
    /// first).
    Session {
        id: ObjectId,
        via: Option<&'static str>,
    },
    /// A blob, and how the session before it names it.
    Blob { id: ObjectId, via: &'static str },
}

impl Store {
    /// Why gc would keep `target`: the path from a root (a ref, or a ref-log
    /// entry younger than `reflog_expiry_ms` and not expired) to it, root
    /// first; `None` when nothing reaches it (gc would drop it once past the
    /// grace period). A path from a ref is preferred (a shortest one); only
    /// when no ref reaches the object, one from a ref-log entry.
    pub fn why_reachable(
        &self,
        target: &ObjectId,
        reflog_expiry_ms: i64,
    ) -> Result<Option<Vec<WhyStep>>> {
        let mut roots: Vec<(WhyStep, ObjectId)> = Vec::new();
        let mut refs = self.refs()?;
        if let Some(t) = self.get_ref(&RefName::Head)? {
            if !refs.iter().any(|(n, _)| *n == RefName::Head) {
                refs.push((RefName::Head, t));
            }
        }
        for (name, t) in refs {
            // A symbolic HEAD follows a ref that is a root already.
            if let RefTarget::Session(id) = t {
                roots.push((WhyStep::Ref(name), id));
            }
        }
        let now = now_ms();
        for e in self.live_reflog_entries()?.into_iter().rev() {
            if now.saturating_sub(e.time) >= reflog_expiry_ms {
                continue;
            }
            for t in [&e.new, &e.old].into_iter().flatten() {
                if let RefTarget::Session(id) = t {
                    roots.push((
                        WhyStep::Reflog {
                            name: e.name.clone(),
                            op: e.op,
                            time: e.time,
                        },
                        *id,
                    ));
                }
            }
        }
        let odb = self.odb();
        // Breadth first from the refs, then, if they do not reach it, from
        // the ref-log entries too: a path from a ref is the answer that
        // matters (expiring the ref log would not free the object).
        let mut from: HashMap<ObjectId, (Option<ObjectId>, usize, &'static str)> = HashMap::new();
        let mut queue: VecDeque<ObjectId> = VecDeque::new();
        for from_reflog in [false, true] {
            for (i, (step, id)) in roots.iter().enumerate() {
                if matches!(step, WhyStep::Reflog { .. }) != from_reflog {
                    continue;
                }
                if !from.contains_key(id) && odb.contains(id)? {
                    from.insert(*id, (None, i, ""));
                    queue.push_back(*id);
                }
            }
            while let Some(id) = queue.pop_front() {
                if id == *target {
                    break;
                }
                let obj = match odb.read(&id) {
                    Ok(o) => o,
                    Err(Error::NotFound { .. }) => continue,
                    Err(e) => return Err(e),
                };
                if obj.kind() != ObjectKind::Session {
                    continue;
                }
                let s = Session::decode(obj.payload()).map_err(|e| Error::decode(id, e))?;
                let root = from.get(&id).map_or(0, |f| f.1);
                let mut named: Vec<(ObjectId, &'static str)> = Vec::new();
                for (k, p) in s.parents.iter().enumerate() {
                    named.push((*p, if k == 0 { "parent" } else { "merged parent" }));
                }
                if let Some(c) = &s.compaction {
                    named.push((c.session, "compaction source"));
                    named.push((c.summary, "compaction summary"));
                }
                named.extend(s.messages.added.iter().map(|m| (*m, "message")));
                named.extend(
                    s.display_messages
                        .added
                        .iter()
                        .map(|m| (*m, "display message")),
                );
                named.extend(s.context_state.iter().map(|b| (*b, "context state")));
                named.extend(
                    s.environment_state
                        .iter()
                        .map(|b| (*b, "environment state")),
                );
                for (n, via) in named {
                    if let Entry::Vacant(slot) = from.entry(n) {
                        slot.insert((Some(id), root, via));
                        queue.push_back(n);
                    }
                }
            }
            if from.contains_key(target) {
                break;
            }
        }
        let Some(&(_, root, _)) = from.get(target) else {
            return Ok(None);
        };
        let mut path: Vec<(ObjectId, &'static str)> = Vec::new();
        let mut at = *target;
        loop {
            let (prev, _, via) = from[&at];
            path.push((at, via));
            match prev {
                Some(p) => at = p,
                None => break,
            }
        }
        path.reverse();
        let mut steps = vec![roots[root].0.clone()];
        for (k, (id, via)) in path.into_iter().enumerate() {
            let is_session = matches!(odb.read(&id), Ok(o) if o.kind() == ObjectKind::Session);
            steps.push(if is_session {
                WhyStep::Session {
                    id,
                    via: (k > 0).then_some(via),
                }
            } else {
                WhyStep::Blob { id, via }
            });
        }
        Ok(Some(steps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Messages, Turn};

    #[test]
    fn fsck_names_an_expiry_of_an_entry_its_chain_lacks() {
        let store = Store::in_memory().unwrap();
        let turn = Turn {
            messages: Messages::Added(vec![serde_json::json!({"role": "user", "content": "x"})]),
            ..Turn::default()
        };
        store.create(Some("a"), turn, Durability::Sync).unwrap();
        let a = RefName::conversation("a").unwrap();
        store
            .transact_expiring(
                Transaction {
                    reason: EXPIRE_REASON.into(),
                    ..Transaction::default()
                },
                vec![ReflogExpiry {
                    name: a.clone(),
                    through: [7; 32],
                }],
                Durability::Sync,
            )
            .unwrap();
        // Readers ignore it: nothing expired.
        assert_eq!(store.live_reflog_entries().unwrap().len(), 2);
        let problems = store.verify_chains().unwrap();
        assert_eq!(
            problems,
            vec![
                "refs/heads/a: operation 2 expires its ref log through an entry it does not have"
                    .to_owned()
            ]
        );
        // A real expiry is clean.
        store
            .expire_reflog(Some(&[a]), i64::MAX, false, Durability::Sync)
            .unwrap();
        assert_eq!(store.live_reflog_entries().unwrap().len(), 1);
        assert_eq!(store.verify_chains().unwrap().len(), 1);
    }
}
