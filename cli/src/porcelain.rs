//! Porcelain over refs: `merge`, `tag`, `rename`, `reset`.
//!
//! Each verb is one library call (`Store::merge`, `Store::tag`,
//! `Store::rename`, `Store::reset`): a compare-and-swap transaction recorded
//! in the ref log. This module reads arguments and prints results.

use std::path::PathBuf;

use clap::Args;
use serde_json::{json, Value};
use sessctl_store::graph;
use sessctl_store::{Messages, Turn};

use crate::conversations::{durability, read_messages, NO_SYNC_HELP};
use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

// ---- merge ----

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The conversation to merge into: the new session continues its head.
    #[arg(value_name = "CONV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::conversations))]
    conv: String,
    /// The session to merge (a conversation, tag, id, HEAD~2, ...): it
    /// becomes the new session's second parent.
    #[arg(value_name = "REV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: String,
    /// A JSON array of the messages the merge session adds ("-" for
    /// standard input); default: none.
    #[arg(long, value_name = "FILE")]
    messages: Option<PathBuf>,
    /// The merge session's title (it becomes the conversation's title too).
    #[arg(long, value_name = "TEXT")]
    title: Option<String>,
    /// Print {"conversation", "id", "parents"} as JSON.
    #[arg(long)]
    json: bool,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
}

pub fn merge(ctx: &Ctx, args: MergeArgs) -> CmdResult {
    let added = match &args.messages {
        Some(p) => read_messages(p)?,
        None => Vec::new(),
    };
    let store = ctx.open_store()?;
    let other = store.resolve_rev(&args.rev)?;
    let head = store
        .conversation(&args.conv)?
        .ok_or_else(|| sessctl_store::Error::NoSuchConversation {
            name: args.conv.clone(),
        })?
        .head;
    if let Some(h) = head {
        if graph::is_ancestor(&store, other, h)? {
            return Err(CommandError::Failed(format!(
                "{} is already merged into {}: it is {} or an ancestor of it",
                args.rev,
                args.conv,
                h.to_hex_prefix(12)
            )));
        }
    }
    let turn = Turn {
        messages: Messages::Added(added),
        title: args.title,
        ..Turn::default()
    };
    let id = store.merge(&args.conv, &[other], turn, durability(args.no_sync))?;
    if args.json {
        let parents: Vec<String> = store
            .odb()
            .session(&id)?
            .parents
            .iter()
            .map(|p| p.to_hex())
            .collect();
        let v = json!({"conversation": args.conv, "id": id.to_hex(), "parents": parents});
        return print(&format!("{v}\n"));
    }
    print(&format!("{id}\n"))
}

// ---- tag ----

#[derive(Debug, Args)]
#[command(
    override_usage = "sessctl tag [--json]\n       sessctl tag [-f] NAME [REV]\n       sessctl tag -d NAME"
)]
pub struct TagArgs {
    /// The tag's name; without it, list the tags.
    #[arg(value_name = "NAME", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::tags))]
    name: Option<String>,
    /// The session to tag (default: HEAD).
    #[arg(value_name = "REV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: Option<String>,
    /// Delete the tag NAME.
    #[arg(short = 'd', long, conflicts_with_all = ["rev", "force"])]
    delete: bool,
    /// Move the tag if it exists already.
    #[arg(short = 'f', long)]
    force: bool,
    /// List the tags as one JSON array of {"name", "id"}.
    #[arg(long)]
    json: bool,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
}

pub fn tag(ctx: &Ctx, args: TagArgs) -> CmdResult {
    let Some(name) = args.name else {
        if args.delete || args.force {
            return Err(CommandError::Usage("tag -d and -f take a NAME".into()));
        }
        let tags = ctx.open_store_read()?.tags()?;
        if args.json {
            let all: Vec<Value> = tags
                .iter()
                .map(|(n, id)| json!({"name": n, "id": id.to_hex()}))
                .collect();
            return print(&format!("{}\n", Value::Array(all)));
        }
        return print(
            &tags
                .iter()
                .map(|(n, _)| format!("{n}\n"))
                .collect::<String>(),
        );
    };
    if args.json {
        return Err(CommandError::Usage(
            "tag --json lists; it takes no NAME".into(),
        ));
    }
    let store = ctx.open_store()?;
    let durability = durability(args.no_sync);
    if args.delete {
        let was = store.delete_tag(&name, durability)?;
        return print(&format!(
            "Deleted tag '{name}' (was {})\n",
            was.to_hex_prefix(12)
        ));
    }
    let target = store.resolve_rev(args.rev.as_deref().unwrap_or("HEAD"))?;
    match store.tag(&name, target, args.force, durability)? {
        Some(was) if was != target => print(&format!(
            "Updated tag '{name}' (was {})\n",
            was.to_hex_prefix(12)
        )),
        _ => Ok(()),
    }
}

// ---- rename ----

#[derive(Debug, Args)]
pub struct RenameArgs {
    /// The conversation to rename (live or archived).
    #[arg(value_name = "OLD", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::conversations))]
    old: String,
    /// Its new name; no conversation may have it.
    #[arg(value_name = "NEW")]
    new: String,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
}

pub fn rename(ctx: &Ctx, args: RenameArgs) -> CmdResult {
    ctx.open_store()?
        .rename(&args.old, &args.new, durability(args.no_sync))?;
    Ok(())
}

// ---- reset ----

#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The conversation to move.
    #[arg(value_name = "CONV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::conversations))]
    conv: String,
    /// The session it is to be at (fix~2, fix@{1}, a tag, an id, ...).
    #[arg(value_name = "REV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: String,
    /// Print {"conversation", "old", "new"} as JSON.
    #[arg(long)]
    json: bool,
    #[arg(long, help = NO_SYNC_HELP)]
    no_sync: bool,
}

pub fn reset(ctx: &Ctx, args: ResetArgs) -> CmdResult {
    let store = ctx.open_store()?;
    let target = store.resolve_rev(&args.rev)?;
    let old = store.reset(&args.conv, target, durability(args.no_sync))?;
    if args.json {
        let v = json!({"conversation": args.conv, "old": old.to_hex(), "new": target.to_hex()});
        return print(&format!("{v}\n"));
    }
    let summary = store.summary_line(&store.describe_session(&target)?)?;
    print(&format!(
        "{} is now at {} {summary}\n",
        args.conv,
        target.to_hex_prefix(12)
    ))
}
