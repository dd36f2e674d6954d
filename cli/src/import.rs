//! `import` and `export`: other agents' session files in, a session's history
//! out in their formats (see `sessctl_store::import` and `::export`).

use std::path::{Path, PathBuf};

use clap::Args;
use sessctl_store::export::{export as export_history, ExportFormat};
use sessctl_store::import::{import_paths_as, Format, ImportOptions};

use crate::output::{print, progress, progress_done};
use crate::{CmdResult, CommandError, Ctx};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The files' format: claude-code, codex, openai or swe-agent (default:
    /// detected for each file from its content). A file in another format
    /// is refused, naming what it looks like, before anything is written.
    #[arg(long = "from", value_name = "FORMAT", value_parser = parse_format)]
    from: Option<Format>,
    /// Files, or directories searched recursively for the format's files
    /// (claude-code and codex: *.jsonl; openai: *.json and *.jsonl;
    /// swe-agent: *.traj; without --from: all of these).
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// The files are finished: also import a last turn nothing marks as
    /// ended (by default it is held back until the agent ends it, so that
    /// importing a file as it grows only ever fast-forwards).
    #[arg(long)]
    finished: bool,
    /// Do not sync at all (by default the import is made durable with one
    /// sync at its end).
    #[arg(long)]
    no_sync: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| {
        format!("unknown format '{s}' (expected claude-code, codex, openai or swe-agent)")
    })
}

fn show_progress(path: &Path) {
    progress(&format!("importing {}", path.display()));
}

/// Prints the summary; exits 1 when lines were skipped (all else is
/// imported and durable). A last line still being written and turns not
/// ended yet are noted on stderr and left for a later import (exit 0).
pub fn import(ctx: &Ctx, args: ImportArgs) -> CmdResult {
    let store = ctx.open_store()?;
    let report = import_paths_as(
        &store,
        args.from,
        &args.paths,
        &ImportOptions {
            no_sync: args.no_sync,
            progress: Some(show_progress),
            finished: args.finished,
        },
    );
    progress_done();
    let r = report?;
    if args.json {
        print(&format!("{}\n", r.to_json()))?;
    } else {
        print(&format!(
            "imported {} files: {} sessions ({} new), {} messages, {} forks, {} compactions, \
             {} objects written, {} refs moved; {} lines skipped\n",
            r.files,
            r.sessions_total,
            r.sessions_written,
            r.messages,
            r.forks,
            r.compactions,
            r.objects_written,
            r.refs_moved,
            r.skipped.len()
        ))?;
    }
    for s in &r.skipped {
        eprintln!("{s}");
    }
    for f in &r.unfinished_lines {
        eprintln!(
            "{}: last line not written yet; left for a later import",
            f.display()
        );
    }
    if r.held_back > 0 {
        eprintln!(
            "{} messages held back: their turn has not ended yet (--finished imports them)",
            r.held_back
        );
    }
    for (name, follows) in &r.redirected {
        eprintln!(
            "{name} holds sessions this import did not write (a local commit, fork or \
             compaction): it stays as it is, and the import follows {follows}"
        );
    }
    for (name, why) in &r.left_alone {
        eprintln!("{name} was {why}: the import leaves it so");
    }
    for (file, uuid) in &r.dangling {
        eprintln!("dangling parent: {file}: {uuid}");
    }
    if r.skipped.is_empty() {
        Ok(())
    } else {
        Err(CommandError::Silent(1))
    }
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The session (a conversation name, id, HEAD~2, ...).
    rev: String,
    /// json (a JSON array), jsonl (a message a line), openai
    /// ({"messages": [...]}, chat shape) or claude-code (session JSONL).
    #[arg(long, value_name = "FORMAT", default_value = "json", value_parser = parse_export_format)]
    format: ExportFormat,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
}

fn parse_export_format(s: &str) -> Result<ExportFormat, String> {
    ExportFormat::parse(s).ok_or_else(|| {
        format!("unknown format '{s}' (expected json, jsonl, openai or claude-code)")
    })
}

pub fn export(ctx: &Ctx, args: ExportArgs) -> CmdResult {
    let store = ctx.open_store_read()?;
    let id = store.resolve_rev(&args.rev)?;
    let text = export_history(&store, id, args.format)?;
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| CommandError::Failed(format!("{}: {e}", path.display()))),
        None => print(&text),
    }
}
