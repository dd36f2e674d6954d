//! `show` and `diff`: what sessions hold, and how two differ.

use super::*;

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The session (default: HEAD).
    #[arg(value_name = "REV", default_value = "HEAD", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: String,
    /// Show the whole history, not only the messages this session added.
    #[arg(long)]
    messages: bool,
    /// One JSON object: the session's JSON form plus conversation_name,
    /// refs, history_length and shown_messages ([{index, id, value}]).
    #[arg(long)]
    pub(crate) json: bool,
}

/// How many lines of a tool result `show` prints.
const RESULT_LINES: usize = 10;

/// A message's role and text, as people read it, through the normalized
/// view: the role (`(meta)` after it for a line that is not part of the
/// conversation), then its text, its reasoning, its tool calls and the
/// first lines of its tool results.
fn message_text(v: &Value) -> (String, String) {
    let m = view(v);
    let role = match (m.meta, m.shape) {
        (true, Shape::Unknown) => "message".to_owned(),
        (true, _) => format!("{} (meta)", m.role),
        (false, _) => m.role.to_string(),
    };
    let mut parts: Vec<String> = Vec::new();
    if let Some(r) = &m.reasoning {
        parts.push(format!("(reasoning) {r}"));
    }
    if !m.text.trim().is_empty() {
        parts.push(m.text.clone());
    }
    for c in &m.tool_calls {
        let args = match &c.arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let id =
            c.id.as_deref()
                .map(|i| format!(" [{i}]"))
                .unwrap_or_default();
        parts.push(format!("-> {}{id} {args}", c.name));
    }
    for r in &m.tool_results {
        let id = r.call_id.as_deref().unwrap_or("?");
        let error = if r.is_error { " (error)" } else { "" };
        let lines: Vec<&str> = r.text.lines().collect();
        let mut s = format!("<- [{id}]{error}");
        for l in lines.iter().take(RESULT_LINES) {
            s.push('\n');
            s.push_str("  ");
            s.push_str(l);
        }
        if lines.len() > RESULT_LINES {
            s.push_str(&format!("\n  … {} more lines", lines.len() - RESULT_LINES));
        }
        parts.push(s);
    }
    let text = if parts.is_empty() && m.shape == Shape::Unknown {
        // A line no shape explains: its JSON.
        v.to_string()
    } else if parts.is_empty() {
        // An item with nothing to read (encrypted reasoning, an empty
        // message): what kind it is.
        let kind = v
            .pointer("/payload/type")
            .or_else(|| v.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("empty");
        format!("({kind})")
    } else {
        parts.join("\n")
    };
    (role, text)
}

/// The one line `diff` prints for a message: its text's first line, else
/// what it does.
fn message_line(v: &Value) -> (String, String) {
    let m = view(v);
    let (role, text) = message_text(v);
    let line = match first_line(&m.text) {
        l if !l.is_empty() => l,
        _ => match m.label() {
            l if !l.is_empty() => l,
            _ => first_line(&text),
        },
    };
    (role, line)
}

/// How long a metadata value `show` prints whole may be.
const METADATA_CHARS: usize = 200;

/// A metadata value as `show` and `diff` print it: whole when short, else
/// its kind and size (`--json` has it whole).
fn abridged(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= METADATA_CHARS {
        return text;
    }
    let what = match v {
        Value::Object(o) => plural(o.len() as u64, "key", "keys"),
        Value::Array(a) => plural(a.len() as u64, "item", "items"),
        _ => "a value".to_owned(),
    };
    format!("({what}, {} bytes of JSON; see --json)", text.len())
}

/// The messages at `from..` of a history, with their positions: read as
/// one batch (on a remote store, one lookup of where they live for the
/// lot, not one a message).
fn listed(
    store: &Store,
    history: &[ObjectId],
    from: usize,
) -> CmdResult<Vec<(usize, ObjectId, Value)>> {
    let shown = &history[from.min(history.len())..];
    let values = store.odb().blobs(shown)?;
    Ok(shown
        .iter()
        .zip(values)
        .enumerate()
        .map(|(k, (m, v))| (from + k, *m, v))
        .collect())
}

pub fn show(ctx: &Ctx, args: ShowArgs) -> CmdResult {
    check_revs([&args.rev])?;
    let store = ctx.open_store_read()?;
    let id = store.resolve_rev(&args.rev)?;
    let s = store.odb().session(&id)?;
    let history = store.odb().history(&id)?;
    let from = if args.messages {
        0
    } else {
        s.messages.base as usize
    };
    let messages = listed(&store, &history, from)?;
    let deco = Decorations::for_ids(&store, &[id])?;
    let name = store.index().conversation_name(&s.conversation_id(id))?;
    if args.json {
        let mut v = s.to_json(id);
        v["conversation_name"] = json!(name);
        v["refs"] = json!(deco.refs(&id));
        v["history_length"] = json!(history.len());
        v["shown_messages"] = Value::Array(
            messages
                .iter()
                .map(|(k, m, value)| {
                    json!({"index": k, "id": m.to_hex(), "value": value,
                           "view": view(value).to_json()})
                })
                .collect(),
        );
        return print(&format!("{v}\n"));
    }
    print(&crate::paint::show(&show_text(
        &id,
        &s,
        name,
        &deco,
        history.len(),
        &messages,
        args.messages,
    )))
}

fn show_text(
    id: &ObjectId,
    s: &Session,
    name: Option<String>,
    deco: &Decorations,
    history_len: usize,
    messages: &[(usize, ObjectId, Value)],
    whole: bool,
) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "session {id}{}", deco.text(id));
    for p in &s.parents {
        let _ = writeln!(t, "Parent:       {p}");
    }
    let conv = s.conversation_id(*id);
    match name {
        Some(n) => {
            let _ = writeln!(t, "Conversation: {n} ({conv})");
        }
        None => {
            let _ = writeln!(t, "Conversation: {conv}");
        }
    }
    let _ = writeln!(t, "Date:         {}", format_rfc3339_ms(s.created_at));
    let _ = writeln!(t, "Status:       {}", s.status);
    if let Some(title) = &s.title {
        let _ = writeln!(t, "Title:        {title}");
    }
    let m = &s.metadata;
    let _ = writeln!(t, "Type:         {}", m.session_type.as_str());
    if let Some(v) = &m.transport {
        let _ = writeln!(t, "Transport:    {v}");
    }
    if let Some(v) = &m.preset_id {
        let _ = writeln!(t, "Preset:       {v}");
    }
    if let Some(v) = &m.spawned_by {
        let _ = writeln!(t, "Spawned by:   {v}");
    }
    for (k, v) in &m.extra {
        let _ = writeln!(t, "Metadata:     {k} = {}", abridged(v));
    }
    let _ = writeln!(
        t,
        "Run:          {} ms, {}",
        s.run.duration_ms,
        plural(s.run.usage.requests, "request", "requests")
    );
    let u = &s.run.usage;
    let _ = writeln!(
        t,
        "Usage:        {} ({} prompt, {} completion)",
        plural(u.total_tokens, "token", "tokens"),
        u.prompt_tokens,
        u.completion_tokens
    );
    if let Some(v) = &s.context_state {
        let _ = writeln!(t, "Context:      {v}");
    }
    if let Some(v) = &s.environment_state {
        let _ = writeln!(t, "Environment:  {v}");
    }
    if let Some(c) = &s.compaction {
        let _ = writeln!(
            t,
            "Compaction:   {} of {} summarised in {}",
            plural(c.messages, "message", "messages"),
            c.session,
            c.summary
        );
    }
    let _ = writeln!(
        t,
        "Messages:     {} kept from the parent, {} added, {} in all",
        s.messages.base,
        s.messages.added.len(),
        history_len
    );
    if !messages.is_empty() {
        let _ = writeln!(t);
        let _ = writeln!(t, "{}:", if whole { "History" } else { "Added" });
    }
    for (k, _, v) in messages {
        let (role, text) = message_text(v);
        let _ = writeln!(t, "[{k}] {role}");
        for line in text.lines() {
            let _ = writeln!(t, "{}", format!("    {line}").trim_end());
        }
    }
    t
}

// ---- diff ----

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The first session: a conversation, HEAD, a ref, an id or a prefix,
    /// with ~N and ^N steps.
    #[arg(value_name = "A", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    a: String,
    /// The session to compare it with, written as A is.
    #[arg(value_name = "B", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    b: String,
    /// One JSON object: a, b, merge_base(s), common_prefix, each side's
    /// messages, only_in_a, only_in_b, and the changes to title, metadata
    /// and states ({path, op, old, new}).
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `diff` compares besides messages: the title, the metadata (named
/// fields and extra; absent ones left out) and the two states' values.
fn state_docs(store: &Store, s: &Session) -> CmdResult<[(&'static str, Value); 4]> {
    let m = &s.metadata;
    let mut meta = Map::new();
    meta.insert("session_type".into(), json!(m.session_type.as_str()));
    if let Some(v) = &m.transport {
        meta.insert("transport".into(), json!(v));
    }
    if let Some(v) = &m.preset_id {
        meta.insert("preset_id".into(), json!(v));
    }
    if let Some(v) = &m.spawned_by {
        meta.insert("spawned_by".into(), json!(v.to_hex()));
    }
    if !m.extra.is_empty() {
        meta.insert(
            "extra".into(),
            Value::Object(
                m.extra
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
        );
    }
    let blob = |b: &Option<ObjectId>| -> CmdResult<Value> {
        Ok(match b {
            Some(id) => store.odb().blob(id)?,
            None => Value::Null,
        })
    };
    Ok([
        ("title", json!(s.title)),
        ("metadata", Value::Object(meta)),
        ("context_state", blob(&s.context_state)?),
        ("environment_state", blob(&s.environment_state)?),
    ])
}

pub fn diff(ctx: &Ctx, args: DiffArgs) -> CmdResult {
    check_revs([&args.a, &args.b])?;
    let store = ctx.open_store_read()?;
    let a = store.resolve_rev(&args.a)?;
    let b = store.resolve_rev(&args.b)?;
    let bases = graph::merge_bases_all(&store, a, b)?;
    let (sa, sb) = (store.odb().session(&a)?, store.odb().session(&b)?);
    let (ha, hb) = (store.odb().history(&a)?, store.odb().history(&b)?);
    let common = ha.iter().zip(&hb).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (listed(&store, &ha, common)?, listed(&store, &hb, common)?);
    let first_at = |h: &[ObjectId]| -> HashMap<ObjectId, usize> {
        let mut at = HashMap::new();
        for (k, m) in h.iter().enumerate() {
            at.entry(*m).or_insert(k);
        }
        at
    };
    let (at_a, at_b) = (first_at(&ha), first_at(&hb));
    let only = |h: &[ObjectId], other: &HashMap<ObjectId, usize>| -> Vec<ObjectId> {
        let mut seen = HashSet::new();
        h.iter()
            .filter(|m| !other.contains_key(m) && seen.insert(**m))
            .copied()
            .collect()
    };
    let (only_a, only_b) = (only(&ha, &at_b), only(&hb, &at_a));
    let (da, db) = (state_docs(&store, &sa)?, state_docs(&store, &sb)?);
    let changes: Vec<(&str, Vec<Change>)> = da
        .iter()
        .zip(&db)
        .map(|((k, x), (_, y))| (*k, json_diff(x, y)))
        .collect();
    if args.json {
        let side = |ms: &[(usize, ObjectId, Value)], other: &HashMap<ObjectId, usize>| -> Value {
            Value::Array(
                ms.iter()
                    .map(|(k, m, v)| {
                        json!({"index": k, "id": m.to_hex(), "in_other": other.get(m), "value": v})
                    })
                    .collect(),
            )
        };
        let mut v = json!({
            "a": a.to_hex(),
            "b": b.to_hex(),
            "merge_base": bases.first().map(ObjectId::to_hex),
            "merge_bases": hexes(&bases),
            "common_prefix": common,
            "messages": {"a": side(&ma, &at_b), "b": side(&mb, &at_a)},
            "only_in_a": hexes(&only_a),
            "only_in_b": hexes(&only_b),
        });
        for (k, c) in &changes {
            v[*k] = Value::Array(c.iter().map(Change::to_json).collect());
        }
        return print(&format!("{v}\n"));
    }
    let mut t = String::new();
    let _ = writeln!(t, "a:          {a}");
    let _ = writeln!(t, "b:          {b}");
    match bases.first() {
        Some(base) => {
            let _ = writeln!(t, "merge base: {base}");
        }
        None => {
            let _ = writeln!(t, "merge base: none (no common history)");
        }
    }
    let _ = writeln!(
        t,
        "common:     {}; then a has {}, b has {}",
        plural(common as u64, "message", "messages"),
        ma.len(),
        mb.len()
    );
    if !ma.is_empty() || !mb.is_empty() {
        let _ = writeln!(t);
    }
    for (sign, ms, other, other_name) in [("-", &ma, &at_b, "b"), ("+", &mb, &at_a, "a")] {
        for (k, m, v) in ms {
            let (role, line) = message_line(v);
            let also = match other.get(m) {
                Some(j) => format!(" (also in {other_name} at [{j}])"),
                None => String::new(),
            };
            let _ = writeln!(t, "{sign} [{k}] {role}: {line}{also}");
        }
    }
    for (k, c) in &changes {
        if c.is_empty() {
            continue;
        }
        let _ = writeln!(t);
        let _ = writeln!(t, "{k}:");
        for ch in c {
            let path = if ch.path.is_empty() {
                "(value)"
            } else {
                &ch.path
            };
            let show = |v: &Option<Value>| v.as_ref().map(abridged).unwrap_or_default();
            let _ = match ch.op {
                ChangeOp::Added => writeln!(t, "  + {path}: {}", show(&ch.new)),
                ChangeOp::Removed => writeln!(t, "  - {path}: {}", show(&ch.old)),
                ChangeOp::Changed => {
                    writeln!(t, "  ~ {path}: {} -> {}", show(&ch.old), show(&ch.new))
                }
            };
        }
    }
    print(&crate::paint::diff(&t))
}
