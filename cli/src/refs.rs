//! Refs: `reflog`, `reindex`, `update-ref`, `for-each-ref`.
//!
//! The ref log is read from the durable operations, never from the index,
//! so it is what a crash left, whatever the index says.

use clap::Args;
use serde_json::{json, Value};
use sessctl_store::refs::{PreviousValue, RefEdit, ReflogEntry};
use sessctl_store::time::format_rfc3339_ms;
use sessctl_store::{Error, RefName, RefTarget, Store, Transaction};

use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

/// A ref given on the command line: `HEAD`, a full name, or a conversation
/// name (its `refs/heads/` ref).
fn parse_ref(text: &str) -> CmdResult<RefName> {
    let name = if text == "HEAD" || text.starts_with("refs/") {
        RefName::parse(text)
    } else {
        RefName::conversation(text)
    };
    name.map_err(|e| Error::from(e).into())
}

/// A full ref name (or `HEAD`), for plumbing that must not guess.
fn parse_full_ref(text: &str) -> CmdResult<RefName> {
    RefName::parse(text).map_err(|e| Error::from(e).into())
}

// ---- reflog ----

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, disable_help_subcommand = true)]
pub struct ReflogArgs {
    #[command(subcommand)]
    action: Option<crate::purge::ReflogAction>,
    /// HEAD, a full ref name or a conversation name (default: every ref).
    #[arg(value_name = "REF", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::ref_names))]
    name: Option<String>,
    /// One JSON array, newest entry first.
    #[arg(long)]
    json: bool,
}

/// A target in one line: 12 hex digits, `ref: NAME`, or `-` for none.
fn short_target(t: &Option<RefTarget>) -> String {
    match t {
        Some(RefTarget::Session(id)) => id.to_hex_prefix(12),
        Some(t @ RefTarget::Symbolic(_)) => t.to_string(),
        None => "-".to_owned(),
    }
}

pub fn reflog(ctx: &Ctx, args: ReflogArgs) -> CmdResult {
    if let Some(action) = args.action {
        return crate::purge::reflog_action(ctx, action);
    }
    let wanted = args.name.as_deref().map(parse_ref).transpose()?;
    let store = ctx.open_store_read()?;
    let mut entries: Vec<ReflogEntry> = store
        .live_reflog_entries()?
        .into_iter()
        .filter(|e| wanted.as_ref().is_none_or(|w| e.name == *w))
        .collect();
    if let (Some(w), true) = (&wanted, entries.is_empty()) {
        return Err(CommandError::Failed(format!("{w} has no ref log")));
    }
    entries.reverse();
    if args.json {
        let all: Vec<Value> = entries.iter().map(ReflogEntry::to_json).collect();
        return print(&format!("{}\n", Value::Array(all)));
    }
    let mut out = String::new();
    for e in &entries {
        out.push_str(&format!(
            "{} {} {}: {}: {} -> {} ({})\n",
            e.op,
            format_rfc3339_ms(e.time),
            e.name,
            e.reason,
            short_target(&e.old),
            short_target(&e.new),
            e.actor
        ));
    }
    print(&out)
}

// ---- reindex ----

#[derive(Debug, Args)]
pub struct ReindexArgs {
    /// Print one JSON object: {"operations": N}.
    #[arg(long)]
    json: bool,
}

pub fn reindex(ctx: &Ctx, args: ReindexArgs) -> CmdResult {
    let store = ctx.open_store()?;
    let bar = crate::progress::Bar::new("reindex");
    let n = store.reindex_with(&bar);
    drop(bar);
    let n = n?;
    if args.json {
        return print(&format!("{}\n", json!({ "operations": n })));
    }
    print(&format!("reindexed {n} operations\n"))
}

// ---- update-ref ----

const ABSENT: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, Args)]
#[command(
    override_usage = "sessctl update-ref REF NEW [OLD]\n       sessctl update-ref -d REF [OLD]"
)]
pub struct UpdateRefArgs {
    /// Delete REF instead of setting it.
    #[arg(short = 'd')]
    delete: bool,
    /// The full ref name (HEAD, refs/heads/NAME, refs/archive/NAME,
    /// refs/tags/NAME).
    #[arg(value_name = "REF")]
    name: String,
    /// NEW then OLD, or with -d only OLD. NEW is a revision, or for HEAD
    /// `ref: refs/heads/NAME`. OLD is what REF must hold now; 64 zeros or ""
    /// mean it must not exist.
    #[arg(value_name = "NEW|OLD", num_args = 0..=2)]
    values: Vec<String>,
}

/// A value REF may hold: `ref: NAME` (symbolic) or a revision.
fn parse_target(store: &Store, text: &str) -> CmdResult<RefTarget> {
    match text.strip_prefix("ref: ") {
        Some(r) => Ok(RefTarget::Symbolic(parse_full_ref(r.trim())?)),
        None => Ok(RefTarget::Session(store.resolve_rev(text)?)),
    }
}

pub fn update_ref(ctx: &Ctx, args: UpdateRefArgs) -> CmdResult {
    let name = parse_full_ref(&args.name)?;
    let (new, old) = match (args.delete, args.values.as_slice()) {
        (true, []) => (None, None),
        (true, [old]) => (None, Some(old)),
        (false, [new]) => (Some(new), None),
        (false, [new, old]) => (Some(new), Some(old)),
        (true, _) => {
            return Err(CommandError::Usage(
                "update-ref -d takes REF and at most OLD".into(),
            ))
        }
        (false, _) => {
            return Err(CommandError::Usage(
                "update-ref takes REF NEW [OLD], or -d REF [OLD]".into(),
            ))
        }
    };
    let store = ctx.open_store()?;
    let new = new.map(|t| parse_target(&store, t)).transpose()?;
    let expected = match old.map(String::as_str) {
        None => PreviousValue::Any,
        Some("") | Some(ABSENT) => PreviousValue::MustNotExist,
        Some(t) => PreviousValue::MustMatch(parse_target(&store, t)?),
    };
    store.transact(
        Transaction {
            reason: "update-ref".into(),
            edits: vec![RefEdit {
                name,
                expected,
                new,
            }],
            ..Transaction::default()
        },
        sessctl_store::Durability::Sync,
    )?;
    Ok(())
}

// ---- for-each-ref ----

#[derive(Debug, Args)]
pub struct ForEachRefArgs {
    /// One JSON array of {"ref", "target", "symbolic"}.
    #[arg(long)]
    json: bool,
}

pub fn for_each_ref(ctx: &Ctx, args: ForEachRefArgs) -> CmdResult {
    let store = ctx.open_store_read()?;
    let mut refs = store.refs()?;
    refs.sort_by_cached_key(|(name, _)| name.to_string());
    if args.json {
        let all: Vec<Value> = refs
            .iter()
            .map(|(name, target)| {
                json!({
                    "ref": name.to_string(),
                    "target": target.to_string(),
                    "symbolic": matches!(target, RefTarget::Symbolic(_)),
                })
            })
            .collect();
        return print(&format!("{}\n", Value::Array(all)));
    }
    let mut out = String::new();
    for (name, target) in &refs {
        out.push_str(&format!("{target} {name}\n"));
    }
    print(&out)
}
