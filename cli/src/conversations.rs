//! Conversations: `commit`, `fork`, `archive`, `unarchive`, `rm`, `ls`,
//! `prune`.
//!
//! Arguments are checked before the store is opened, so a typo never waits
//! for the lock or touches the store. Every change goes through the
//! library's `Store`; this module only reads input and prints results.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args};
use serde_json::Value;
use sessctl_store::index::ConversationInfo;
use sessctl_store::refs::{ConversationStatus, RefTarget};
use sessctl_store::time::format_rfc3339_ms;
use sessctl_store::{
    Blob, Cut, Durability, Error, ForkOptions, Messages, ObjectId, RefName, RunSummary,
    SessionMetadata, SessionStatus, SessionType, Turn, Usage,
};

use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

/// Help text shared by every command that writes.
pub(crate) const NO_SYNC_HELP: &str =
    "Return before the write is synced to disk: a crash of this process \
                            loses nothing, a power loss may lose the last writes";

pub(crate) fn durability(no_sync: bool) -> Durability {
    if no_sync {
        Durability::NoSync
    } else {
        Durability::Sync
    }
}

// ---- reading JSON input ----

/// Reads FILE, or standard input for `-`; returns the bytes and how to name
/// their source in an error.
fn read_source(path: &Path) -> CmdResult<(Vec<u8>, String)> {
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| CommandError::Failed(format!("reading standard input: {e}")))?;
        return Ok((buf, "standard input".to_owned()));
    }
    let bytes = std::fs::read(path)
        .map_err(|e| CommandError::Failed(format!("{}: {e}", path.display())))?;
    Ok((bytes, path.display().to_string()))
}

/// Parses a file's JSON, refusing duplicate keys as blobs do.
fn read_json(path: &Path) -> CmdResult<(Value, String)> {
    let (bytes, source) = read_source(path)?;
    let value = Blob::from_json_slice(&bytes)
        .map_err(|e| CommandError::Failed(format!("{source}: {e}")))?
        .into_value();
    Ok((value, source))
}

/// Parses a file holding a JSON array of messages.
pub(crate) fn read_messages(path: &Path) -> CmdResult<Vec<Value>> {
    match read_json(path)? {
        (Value::Array(items), source) => {
            // Every view reads a message as an object (its role, content,
            // tool calls): anything else would be stored and then shown
            // differently by each.
            match items.iter().position(|m| !m.is_object()) {
                Some(i) => Err(CommandError::Failed(format!(
                    "{source}: message {i} is {}, not a JSON object \
                     (a message is an object such as {{\"role\": \"user\", \"content\": \"...\"}})",
                    json_kind(&items[i])
                ))),
                None => Ok(items),
            }
        }
        (other, source) => Err(CommandError::Failed(format!(
            "{source}: expected a JSON array of messages, found {}",
            json_kind(&other)
        ))),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Standard input can be read once: refuse two `-` arguments.
fn check_stdin(files: &[(&str, &Option<PathBuf>)]) -> CmdResult {
    let readers: Vec<&str> = files
        .iter()
        .filter(|(_, p)| p.as_ref().is_some_and(|p| p.as_os_str() == "-"))
        .map(|(flag, _)| *flag)
        .collect();
    if readers.len() > 1 {
        return Err(CommandError::Usage(format!(
            "only one of {} can read standard input",
            readers.join(", ")
        )));
    }
    Ok(())
}

// ---- commit ----

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("input").required(true).args(["messages", "history"])))]
pub struct CommitArgs {
    /// The conversation to continue (default: the one HEAD names), or with
    /// --new the name of the new one (default: the first 12 hex digits of
    /// its first session's id).
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::complete::conversations))]
    conv: Option<String>,
    /// Start a new conversation.
    #[arg(long)]
    new: bool,
    /// A JSON array of the messages this turn adds ("-" for standard input).
    #[arg(long, value_name = "FILE")]
    messages: Option<PathBuf>,
    /// A JSON array of the full new history; only what differs from the
    /// parent's history is stored.
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// The session's title (it becomes the conversation's title too).
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// A JSON array of display messages, given the same way as the messages
    /// (added, or a full history with --history); default: the messages.
    #[arg(long, value_name = "FILE")]
    display: Option<PathBuf>,
    /// A JSON value: the agent's context state (default: the parent's).
    #[arg(long, value_name = "FILE")]
    context_state: Option<PathBuf>,
    /// A JSON value: the environment's state (default: the parent's).
    #[arg(long, value_name = "FILE")]
    environment_state: Option<PathBuf>,
    /// Token usage as a JSON object with any of total_tokens, prompt_tokens,
    /// completion_tokens, requests (total defaults to prompt + completion),
    /// or Anthropic's input_tokens, output_tokens,
    /// cache_creation_input_tokens, cache_read_input_tokens (prompt tokens
    /// are then input plus cache writes and reads).
    #[arg(long, value_name = "JSON")]
    usage: Option<String>,
    /// How long the run took.
    #[arg(long, value_name = "N")]
    duration_ms: Option<u64>,
    /// The session's status: created, committed, awaiting_tool_results,
    /// failed or archived (default: committed).
    #[arg(long, value_name = "STATUS")]
    status: Option<String>,
    /// Session metadata, repeatable: session_type, transport, preset_id and
    /// spawned_by set those fields, any other key is free metadata. The
    /// value is JSON: quote strings (--meta cwd='"/tmp"').
    #[arg(long = "meta", value_name = "KEY=JSON")]
    meta: Vec<String>,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
}

fn parse_status(text: &str) -> CmdResult<SessionStatus> {
    SessionStatus::parse(text).ok_or_else(|| {
        let allowed: Vec<&str> = SessionStatus::ALL.iter().map(|s| s.as_str()).collect();
        CommandError::Usage(format!(
            "--status '{text}' is not a status: expected one of {}",
            allowed.join(", ")
        ))
    })
}

/// `--usage`: OpenAI's names (`prompt_tokens`, `completion_tokens`,
/// `total_tokens`) or Anthropic's (`input_tokens`, `output_tokens`,
/// `cache_creation_input_tokens`, `cache_read_input_tokens`), and
/// `requests`. Anthropic's input tokens leave out cache writes and reads;
/// prompt tokens count them, as an import does. Cache counts also go to the
/// session's `extra.usage` (objects-format.md, "Imported sessions").
fn parse_usage(text: &str) -> CmdResult<(Usage, serde_json::Map<String, Value>)> {
    const KEYS: &str = "total_tokens, prompt_tokens, completion_tokens, requests, \
                        input_tokens, output_tokens, cache_creation_input_tokens, \
                        cache_read_input_tokens";
    let bad = |m: String| CommandError::Usage(format!("--usage: {m}"));
    let value = Blob::from_json_str(text)
        .map_err(|e| bad(e.to_string()))?
        .into_value();
    let Value::Object(map) = value else {
        return Err(bad(format!(
            "expected a JSON object with any of {KEYS}, found {}",
            json_kind(&value)
        )));
    };
    let mut usage = Usage::default();
    let mut total = None;
    let (mut input, mut output) = (None, None);
    let (mut cache_write, mut cache_read) = (0u64, 0u64);
    for (k, v) in &map {
        // Parts of Anthropic's usage object that are no token counts.
        if matches!(
            k.as_str(),
            "cache_creation" | "service_tier" | "server_tool_use"
        ) {
            continue;
        }
        let n = v
            .as_u64()
            .ok_or_else(|| bad(format!("{k} must be a whole number of at least 0, not {v}")))?;
        match k.as_str() {
            "total_tokens" => total = Some(n),
            "prompt_tokens" => usage.prompt_tokens = n,
            "completion_tokens" => usage.completion_tokens = n,
            "requests" => usage.requests = n,
            "input_tokens" => input = Some(n),
            "output_tokens" => output = Some(n),
            "cache_creation_input_tokens" => cache_write = n,
            "cache_read_input_tokens" => cache_read = n,
            _ => return Err(bad(format!("unknown key '{k}': expected any of {KEYS}"))),
        }
    }
    let overflow = || bad("the token counts overflow".into());
    let anthropic = input.is_some() || cache_write > 0 || cache_read > 0;
    if anthropic {
        if map.contains_key("prompt_tokens") {
            return Err(bad(
                "give prompt_tokens (OpenAI) or input_tokens and the cache counts \
                 (Anthropic), not both"
                    .into(),
            ));
        }
        usage.prompt_tokens = input
            .unwrap_or(0)
            .checked_add(cache_write)
            .and_then(|n| n.checked_add(cache_read))
            .ok_or_else(overflow)?;
    }
    if let Some(o) = output {
        if map.contains_key("completion_tokens") {
            return Err(bad(
                "give completion_tokens (OpenAI) or output_tokens (Anthropic), not both".into(),
            ));
        }
        usage.completion_tokens = o;
    }
    usage.total_tokens = match total {
        Some(t) => t,
        None => usage
            .prompt_tokens
            .checked_add(usage.completion_tokens)
            .ok_or_else(overflow)?,
    };
    let mut detail = serde_json::Map::new();
    if cache_read > 0 {
        detail.insert("cache_read_tokens".into(), Value::from(cache_read));
    }
    if cache_write > 0 {
        detail.insert("cache_write_tokens".into(), Value::from(cache_write));
    }
    Ok((usage, detail))
}

fn parse_meta(items: &[String]) -> CmdResult<SessionMetadata> {
    let mut meta = SessionMetadata::default();
    let mut seen = BTreeSet::new();
    for item in items {
        let Some((key, text)) = item.split_once('=').filter(|(k, _)| !k.is_empty()) else {
            return Err(CommandError::Usage(format!(
                "--meta takes KEY=JSON, not '{item}'"
            )));
        };
        if !seen.insert(key) {
            return Err(CommandError::Usage(format!("--meta {key} is given twice")));
        }
        let value = Blob::from_json_str(text)
            .map_err(|_| {
                let quoted = serde_json::to_string(text).expect("a string serializes");
                CommandError::Usage(format!(
                    "--meta {key}: '{text}' is not JSON; quote strings as JSON, e.g. --meta {key}='{quoted}'"
                ))
            })?
            .into_value();
        let string = |what: &str| -> CmdResult<String> {
            value.as_str().map(str::to_owned).ok_or_else(|| {
                CommandError::Usage(format!(
                    "--meta {key} must be {what} (a JSON string), not {value}"
                ))
            })
        };
        match key {
            "session_type" => {
                meta.session_type = SessionType::parse(&string("\"agent\" or \"async_subagent\"")?)
                    .ok_or_else(|| {
                        CommandError::Usage(format!(
                    "--meta session_type must be \"agent\" or \"async_subagent\", not {value}"
                ))
                    })?
            }
            "transport" => meta.transport = Some(string("a string")?),
            "preset_id" => meta.preset_id = Some(string("a string")?),
            "spawned_by" => {
                let hex = string("a session id")?;
                meta.spawned_by = Some(
                    ObjectId::from_hex(&hex)
                        .map_err(|e| CommandError::Usage(format!("--meta spawned_by: {e}")))?,
                );
            }
            _ => {
                meta.extra.insert(key.to_owned(), value);
            }
        }
    }
    Ok(meta)
}

pub fn commit(ctx: &Ctx, args: CommitArgs) -> CmdResult {
    let status = args.status.as_deref().map(parse_status).transpose()?;
    let (usage, usage_detail) = args
        .usage
        .as_deref()
        .map(parse_usage)
        .transpose()?
        .unwrap_or_default();
    let mut metadata = parse_meta(&args.meta)?;
    if !usage_detail.is_empty() {
        metadata
            .extra
            .entry("usage".to_owned())
            .or_insert(Value::Object(usage_detail));
    }
    check_stdin(&[
        ("--messages", &args.messages),
        ("--history", &args.history),
        ("--display", &args.display),
        ("--context-state", &args.context_state),
        ("--environment-state", &args.environment_state),
    ])?;
    let read_list = |p: &Path, full: bool| -> CmdResult<Messages> {
        let items = read_messages(p)?;
        Ok(if full {
            Messages::History(items)
        } else {
            Messages::Added(items)
        })
    };
    let (messages, full) = match (&args.messages, &args.history) {
        (Some(p), None) => (read_list(p, false)?, false),
        (None, Some(p)) => (read_list(p, true)?, true),
        _ => {
            return Err(CommandError::Usage(
                "commit takes exactly one of --messages and --history".into(),
            ))
        }
    };
    let display = args
        .display
        .as_deref()
        .map(|p| read_list(p, full))
        .transpose()?;
    let state = |p: &Option<PathBuf>| -> CmdResult<Option<Value>> {
        p.as_deref()
            .map(|p| read_json(p).map(|(v, _)| v))
            .transpose()
    };
    let turn = Turn {
        messages,
        display,
        context_state: state(&args.context_state)?,
        environment_state: state(&args.environment_state)?,
        title: args.title,
        status,
        run: RunSummary {
            duration_ms: args.duration_ms.unwrap_or(0),
            usage,
        },
        metadata,
        created_at: None,
    };
    let durability = durability(args.no_sync);
    let store = ctx.open_store()?;
    let id = if args.new {
        store.create(args.conv.as_deref(), turn, durability)?.1
    } else {
        let name = match args.conv {
            Some(name) => name,
            None => match store.head_conversation()? {
                Some(name) => name,
                None => match store.get_ref(&RefName::Head)? {
                    Some(RefTarget::Session(id)) => return Err(Error::HeadDetached { id }.into()),
                    _ => return Err(Error::NoHead.into()),
                },
            },
        };
        store.commit(&name, None, turn, durability)?
    };
    print(&format!("{id}\n"))
}

// ---- fork ----

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The session to fork from: a conversation name, HEAD, a ref, an id or
    /// a unique prefix.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: String,
    /// Keep only the first N messages of its history.
    #[arg(long, value_name = "N", conflicts_with = "at_message_id")]
    at_message: Option<u64>,
    /// Keep its history up to and including this message (blob id or unique
    /// prefix).
    #[arg(long, value_name = "ID")]
    at_message_id: Option<String>,
    /// The new conversation's name (default: fork-<12 hex digits of REV>).
    #[arg(long = "as", value_name = "NAME")]
    name: Option<String>,
    /// A JSON array of messages the fork adds right away ("-" for standard
    /// input).
    #[arg(long, value_name = "FILE")]
    messages: Option<PathBuf>,
    /// Leave HEAD where it is (as `git branch`); by default HEAD moves to
    /// the new conversation, as `git checkout -b` does.
    #[arg(long)]
    no_checkout: bool,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
}

pub fn fork(ctx: &Ctx, args: ForkArgs) -> CmdResult {
    let turn = match &args.messages {
        Some(p) => Some(Turn {
            messages: Messages::Added(read_messages(p)?),
            ..Turn::default()
        }),
        None => None,
    };
    let store = ctx.open_store()?;
    let from = store.resolve_rev(&args.rev)?;
    let cut = match (args.at_message, &args.at_message_id) {
        (Some(n), _) => Some(Cut::AtMessage(n)),
        (None, Some(m)) => Some(Cut::AtMessageId(store.odb().resolve(m)?)),
        (None, None) => None,
    };
    let opts = ForkOptions {
        name: args.name,
        cut,
        turn,
    };
    let durability = durability(args.no_sync);
    let (name, head) = if args.no_checkout {
        store.fork_without_checkout(from, opts, durability)?
    } else {
        store.fork(from, opts, durability)?
    };
    print(&format!("{name} {head}\n"))
}

// ---- archive, unarchive, rm ----

#[derive(Debug, Args)]
pub struct NameArgs {
    /// The conversation.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::complete::conversations))]
    conv: String,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
}

pub fn archive(ctx: &Ctx, args: NameArgs) -> CmdResult {
    ctx.open_store()?
        .archive(&args.conv, durability(args.no_sync))?;
    Ok(())
}

/// `unarchive`'s argument: an archived conversation.
#[derive(Debug, Args)]
pub struct ArchivedNameArgs {
    /// The archived conversation.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::complete::archived))]
    conv: String,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
}

pub fn unarchive(ctx: &Ctx, args: ArchivedNameArgs) -> CmdResult {
    ctx.open_store()?
        .unarchive(&args.conv, durability(args.no_sync))?;
    Ok(())
}

pub fn rm(ctx: &Ctx, args: NameArgs) -> CmdResult {
    ctx.open_store()?
        .delete(&args.conv, durability(args.no_sync))?;
    Ok(())
}

// ---- ls ----

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only archived conversations.
    #[arg(long, conflicts_with = "all")]
    archived: bool,
    /// Active and archived conversations.
    #[arg(long)]
    all: bool,
    /// At most N conversations (counted after --archived or --all).
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// One JSON array, an object a conversation: name, title, status,
    /// conversation_id, head, sessions, messages, usage, created_at,
    /// updated_at, last_activity, metadata, preview and running.
    #[arg(long)]
    json: bool,
    /// Only conversations active at or after DATE (2025-11-01, an RFC 3339
    /// time, yesterday, 2.weeks.ago).
    #[arg(long, value_name = "DATE")]
    since: Option<String>,
    /// Only conversations imported from SOURCE (claude-code, codex, openai,
    /// swe-agent), or native for those committed here.
    #[arg(long, value_name = "SOURCE")]
    source: Option<String>,
    /// Only conversations that ran in DIR or below it (their recorded
    /// working directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Only conversations whose title or a message of their history matches
    /// this regular expression.
    #[arg(long, value_name = "PATTERN")]
    grep: Option<String>,
    /// --grep matches regardless of case.
    #[arg(short = 'i', long = "ignore-case", requires = "grep")]
    ignore_case: bool,
}

const TITLE_CHARS: usize = 30;
const PREVIEW_CHARS: usize = 60;

/// Whitespace runs (newlines, tabs) become one space, so that a row stays
/// one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, the last one `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max - 1).collect();
    s.push('…');
    s
}

fn or_dash(s: String) -> String {
    if s.is_empty() {
        "-".to_owned()
    } else {
        s
    }
}

/// Rows of cells as columns two spaces apart; the last column is not padded.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == columns {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        out.push('\n');
    }
    out
}

pub fn ls(ctx: &Ctx, args: LsArgs) -> CmdResult {
    let wanted = |c: &ConversationInfo| match c.record.status {
        ConversationStatus::Active => !args.archived,
        ConversationStatus::Archived => args.archived || args.all,
    };
    let filter = crate::search::LsFilter::new(
        args.since.as_deref(),
        args.source.as_deref(),
        args.cwd.as_deref(),
        args.grep.as_deref(),
        args.ignore_case,
    )?;
    let store = ctx.open_store_read()?;
    let list: Vec<ConversationInfo> = match &filter {
        None => store.conversations_where(args.limit, wanted)?,
        Some(f) => {
            let mut list = f.keep(
                &store,
                store.conversations_where(None, |c| wanted(c) && f.accepts_record(c))?,
            )?;
            list.truncate(args.limit.unwrap_or(usize::MAX));
            list
        }
    };
    if args.json {
        let all: Vec<Value> = list.iter().map(ConversationInfo::to_json).collect();
        return print(&format!("{}\n", Value::Array(all)));
    }
    if list.is_empty() {
        // Not even the header: nothing to list prints nothing.
        return Ok(());
    }
    let mut rows = vec![[
        "NAME",
        "TITLE",
        "SESSIONS",
        "MESSAGES",
        "LAST ACTIVITY",
        "PREVIEW",
    ]
    .map(str::to_owned)
    .to_vec()];
    for c in &list {
        let mut when = format_rfc3339_ms(c.last_activity);
        // Seconds are precise enough for people: drop ".mmm" before "Z".
        when.replace_range(when.len() - 5..when.len() - 1, "");
        rows.push(vec![
            c.name.clone(),
            or_dash(cut(
                &one_line(c.record.title.as_deref().unwrap_or("")),
                TITLE_CHARS,
            )),
            c.sessions.to_string(),
            c.messages.to_string(),
            when,
            or_dash(cut(&one_line(&c.preview), PREVIEW_CHARS)),
        ]);
    }
    print(&table(&rows))
}

// ---- prune ----

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// How many of the most recently active conversations to keep.
    #[arg(long, value_name = "N", required = true)]
    keep: usize,
    /// Delete the others instead of archiving them.
    #[arg(long)]
    delete: bool,
    /// Print what would be done, and do nothing.
    #[arg(long)]
    dry_run: bool,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
    /// Print one JSON object: "action" (archive or delete), "dry_run", and
    /// "conversations", oldest first (on a failure, those done before it).
    #[arg(long)]
    json: bool,
}

pub fn prune(ctx: &Ctx, args: PruneArgs) -> CmdResult {
    let store = if args.dry_run {
        ctx.open_store_read()?
    } else {
        ctx.open_store()?
    };
    let active: Vec<ConversationInfo> = store
        .conversations(None)?
        .into_iter()
        .filter(|c| c.record.status == ConversationStatus::Active)
        .collect();
    let verb = if args.delete { "delete" } else { "archive" };
    let durability = durability(args.no_sync);
    let mut done = Vec::new();
    let mut result = Ok(());
    for c in active.iter().skip(args.keep).rev() {
        if !args.dry_run {
            let r = if args.delete {
                store.delete(&c.name, durability)
            } else {
                store.archive(&c.name, durability)
            };
            if let Err(e) = r {
                result = Err(e.into());
                break;
            }
        }
        if !args.json {
            let would = if args.dry_run { "would " } else { "" };
            print(&format!("{would}{verb} {}\n", c.name))?;
        }
        done.push(c.name.clone());
    }
    if args.json {
        let v = serde_json::json!({"action": verb, "dry_run": args.dry_run, "conversations": done});
        print(&format!("{v}\n"))?;
    }
    result
}
