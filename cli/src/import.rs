//! `import` and `export`: other agents' session files in, a session's history
//! out in their formats (see `sessctl_store::import` and `::export`).

use std::path::PathBuf;

use clap::Args;
use serde_json::Value;
use sessctl_store::export::{export as export_history, ExportFormat};
use sessctl_store::import::{import_paths_as, Format, ImportOptions, Redirect};

use sessctl_store::progress::Progress as _;

use crate::output::print;
use crate::progress::Bar;
use crate::{CmdResult, CommandError, Ctx};

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The files' format: claude-code, codex, openai or swe-agent (default:
    /// detected for each file from its content). A file in another format
    /// is refused, naming what it looks like, before anything is written.
    #[arg(long = "from", value_name = "FORMAT", value_parser = parse_format, add = clap_complete::engine::ArgValueCandidates::new(crate::complete::import_formats))]
    from: Option<Format>,
    /// Files, or directories searched recursively for the format's files
    /// (claude-code and codex: *.jsonl; openai: *.json and *.jsonl;
    /// swe-agent: *.traj; without --from: all of these).
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// The files are finished: also import a last turn nothing marks as
    /// ended (by default it is held back until the agent ends it, so that
    /// importing a file as it grows only ever fast-forwards). Refs still
    /// move only by fast-forwards: a file that no longer continues what an
    /// earlier import wrote (rewritten, or a turn --finished took went on
    /// otherwise) is followed under NAME.imported, as without --finished.
    #[arg(long)]
    finished: bool,
    /// Do not sync at all (by default the import is made durable with one
    /// sync at its end).
    #[arg(long)]
    no_sync: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Keep running: import new lines as agents write them (files created
    /// later in a watched directory too), until Ctrl-C or SIGTERM.
    ///
    /// Each catch-up reads, parses and writes only what a file gained since
    /// the last; a file that shrank, was rewritten or replaced, refs another
    /// process moved, or new lines that change how earlier ones read make it
    /// read the file whole again.
    #[arg(long, conflicts_with = "json")]
    watch: bool,
}

fn parse_format(s: &str) -> Result<Format, String> {
    Format::parse(s).ok_or_else(|| {
        format!("unknown format '{s}' (expected claude-code, codex, openai or swe-agent)")
    })
}

/// Prints the summary; exits 1 when lines were skipped (all else is
/// imported and durable). A last line still being written and turns not
/// ended yet are noted on stderr and left for a later import (exit 0).
pub fn import(ctx: &Ctx, args: ImportArgs) -> CmdResult {
    if args.watch {
        // A watched directory's new files are read as the format named.
        let Some(format) = args.from else {
            return Err(CommandError::Usage(
                "--watch needs --from FORMAT: the files a watched directory will hold are read \
                 as that format"
                    .into(),
            ));
        };
        return crate::watch::watch(ctx, format, &args.paths, args.no_sync);
    }
    let store = ctx.open_store()?;
    let bar = std::sync::Arc::new(Bar::new("import"));
    let report = import_paths_as(
        &store,
        args.from,
        &args.paths,
        &ImportOptions {
            no_sync: args.no_sync,
            progress: Some(bar.clone()),
            finished: args.finished,
        },
    );
    bar.finish();
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
        if let Some(h) = &r.head {
            print(&format!(
                "HEAD now names {h}, the most recently active conversation imported\n"
            ))?;
        }
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
    for (name, follows, why) in &r.redirected {
        match why {
            Redirect::Moved => eprintln!(
                "{name} holds sessions this import did not write (a local commit, fork or \
                 compaction): it stays as it is, and the import follows {follows}"
            ),
            Redirect::Rewritten => eprintln!(
                "{name}: the transcript no longer continues what was imported before: it stays \
                 as it is, and the import follows {follows}"
            ),
        }
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
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: String,
    /// json (a JSON array), jsonl (a message a line), openai
    /// ({"messages": [...]}, chat shape), claude-code (session JSONL) or codex
    /// (a rollout). Default: json, or the format --into-claude/--into-codex
    /// write.
    #[arg(long, value_name = "FORMAT", value_parser = parse_export_format, add = clap_complete::engine::ArgValueCandidates::new(crate::complete::export_formats))]
    format: Option<ExportFormat>,
    /// Write to FILE instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write the history as a new Claude Code session, with a fresh
    /// sessionId, into DIR (default: ~/.claude/projects/<its cwd, encoded as
    /// Claude Code does>/), and print the `claude --resume ID` command.
    #[arg(long, value_name = "DIR", num_args = 0..=1, conflicts_with_all = ["output", "into_codex"])]
    into_claude: Option<Option<PathBuf>>,
    /// Write the history as a new Codex rollout under
    /// CODEX_HOME/sessions/YYYY/MM/DD/ (default: $CODEX_HOME, or ~/.codex),
    /// and print the `codex resume ID` command.
    #[arg(long, value_name = "CODEX_HOME", num_args = 0..=1, conflicts_with = "output")]
    into_codex: Option<Option<PathBuf>>,
}

fn parse_export_format(s: &str) -> Result<ExportFormat, String> {
    ExportFormat::parse(s).ok_or_else(|| {
        format!("unknown format '{s}' (expected json, jsonl, openai, claude-code or codex)")
    })
}

pub fn export(ctx: &Ctx, args: ExportArgs) -> CmdResult {
    let store = ctx.open_store_read()?;
    let id = store.resolve_rev(&args.rev)?;
    let (into, wants) = match (&args.into_claude, &args.into_codex) {
        (Some(_), _) => (true, ExportFormat::ClaudeCode),
        (_, Some(_)) => (true, ExportFormat::Codex),
        _ => (false, ExportFormat::Json),
    };
    let format = args.format.unwrap_or(wants);
    if into && format != wants {
        return Err(CommandError::Usage(format!(
            "--into-{} writes the {} format; drop --format or give --format {}",
            if wants == ExportFormat::Codex {
                "codex"
            } else {
                "claude"
            },
            if wants == ExportFormat::Codex {
                "codex"
            } else {
                "claude-code"
            },
            if wants == ExportFormat::Codex {
                "codex"
            } else {
                "claude-code"
            },
        )));
    }
    if into {
        let source = crate::into_agent::Source::of(&store, &args.rev, id);
        return match &args.into_claude {
            Some(dir) => crate::into_agent::into_claude(&store, id, dir.as_deref(), &source),
            None => {
                let home = args.into_codex.as_ref().and_then(|h| h.as_deref());
                crate::into_agent::into_codex(&store, id, home, &source)
            }
        };
    }
    let text = if format == ExportFormat::Codex {
        let source = crate::into_agent::Source::of(&store, &args.rev, id);
        crate::into_agent::codex_text(&store, id, &source)?
    } else {
        let mut text = export_history(&store, id, format)?;
        if format == ExportFormat::ClaudeCode {
            // The source's lines after its last message, which the record
            // keeps (`trailing_events`), end the file when REV is the
            // conversation's head, as they end `--format codex` and
            // `--into-claude`: a whole file exports back every line.
            let source = crate::into_agent::Source::of(&store, &args.rev, id);
            if source.format.as_deref() == Some("claude-code") {
                for kept in &source.trailing {
                    match kept {
                        Value::String(line) => text.push_str(line),
                        value => text.push_str(&value.to_string()),
                    }
                    text.push('\n');
                }
            }
        }
        text
    };
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| CommandError::Failed(format!("{}: {e}", path.display()))),
        None => print(&text),
    }
}
