//! `compact`: a conversation's early messages replaced by a summary, in a
//! new session whose parent is the old head (nothing is lost).
//!
//! Arguments are checked before the store is opened. The store stays locked
//! while the summarizer runs (at most `--timeout`).

use std::time::Duration;

use clap::Args;
use serde_json::json;
use sessctl_store::compact::{compact_at, estimate_tokens, threshold_reached, AutoCompaction};
use sessctl_store::{Durability, Error};

use crate::output::print;
use crate::summarizer::CommandSummarizer;
use crate::{CmdResult, CommandError, Ctx};

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// The conversation to compact.
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::complete::conversations))]
    conv: String,
    /// The summarizer, a shell command (run with sh -c): it reads the
    /// messages to summarise as a JSON array on stdin and prints a
    /// checkpoint object ({"completed", "in_progress", "pending",
    /// "blockers", "decisions"}: arrays of strings) or a non-empty JSON
    /// array of summary messages.
    #[arg(long, value_name = "CMD")]
    summarizer: String,
    /// Keep the last N messages as they are (more when the cut would part a
    /// tool call from its results).
    #[arg(long, value_name = "N", default_value_t = 4)]
    keep_last: usize,
    /// Compact only when the estimated prompt size (bytes of the history's
    /// JSON / 4) reaches --threshold of N tokens; otherwise print
    /// "no compaction needed: ~EST of N tokens".
    #[arg(long, value_name = "N")]
    max_tokens: Option<u64>,
    /// With --max-tokens: the fraction of it that triggers compaction
    /// [default: 0.9].
    #[arg(long, value_name = "FRACTION", requires = "max_tokens")]
    threshold: Option<f64>,
    /// Kill the summarizer (and what it started) after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = CommandSummarizer::DEFAULT_TIMEOUT.as_secs_f64())]
    timeout: f64,
    /// Print one JSON object: "compacted", the conversation, the old and
    /// new heads (or, under --max-tokens, the estimate that made it wait).
    #[arg(long)]
    json: bool,
}

/// Prints the new session's id.
pub fn compact(ctx: &Ctx, args: CompactArgs) -> CmdResult {
    let threshold = args.threshold.unwrap_or(AutoCompaction::DEFAULT_THRESHOLD);
    if !(threshold.is_finite() && threshold > 0.0 && threshold <= 1.0) {
        return Err(CommandError::Usage(format!(
            "--threshold takes a fraction above 0 and at most 1, not {threshold}"
        )));
    }
    if args.max_tokens == Some(0) {
        return Err(CommandError::Usage(
            "--max-tokens takes a number of tokens above 0".into(),
        ));
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(CommandError::Usage(format!(
            "--timeout takes a number of seconds above 0, not {}",
            args.timeout
        )));
    }
    if args.summarizer.trim().is_empty() {
        return Err(CommandError::Usage("--summarizer needs a command".into()));
    }
    let store = ctx.open_store()?;
    let info = store
        .conversation(&args.conv)?
        .ok_or_else(|| Error::NoSuchConversation {
            name: args.conv.clone(),
        })?;
    let head = info.head.ok_or_else(|| {
        CommandError::Failed(format!("conversation {} has no head to compact", args.conv))
    })?;
    if let Some(max) = args.max_tokens {
        let estimate = estimate_tokens(&store.load_messages(&head)?);
        if !threshold_reached(estimate, max, threshold) {
            if args.json {
                let v = json!({
                    "compacted": false, "conversation": args.conv, "head": head.to_hex(),
                    "estimated_tokens": estimate, "max_tokens": max, "threshold": threshold,
                });
                return print(&format!("{v}\n"));
            }
            return print(&format!(
                "no compaction needed: ~{estimate} of {max} tokens\n"
            ));
        }
    }
    let summarizer = CommandSummarizer {
        command: args.summarizer,
        timeout: Duration::from_secs_f64(args.timeout),
    };
    let conv = args.conv;
    let id = compact_at(
        &store,
        &conv,
        head,
        &summarizer,
        args.keep_last,
        Durability::Sync,
    )?;
    if args.json {
        let v = json!({"compacted": true, "conversation": conv, "old_head": head.to_hex(), "head": id.to_hex()});
        return print(&format!("{v}\n"));
    }
    print(&format!("{id}\n"))
}
