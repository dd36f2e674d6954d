//! Maintenance: `gc` and `fsck`.

use std::io::IsTerminal;

use clap::Args;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::{parse_prune, GcOptions};

use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Say what would go, and from which conversations; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Drop unreachable objects older than this: now, a date (2025-11-01),
    /// an RFC 3339 time, or N.days.ago (minutes, hours, weeks). Default:
    /// 2.weeks.ago. On a remote store, the bucket's packs that nothing
    /// names any more (retired by gc, or left by a killed writer) go too
    /// once older than this.
    #[arg(long, value_name = "WHEN")]
    prune: Option<String>,
    /// First expire every ref's log entries older than WHEN (as reflog
    /// expire --all --expire=WHEN), so that they keep nothing alive.
    /// Default: entries older than 90 days keep nothing, and stay listed.
    #[arg(long, value_name = "WHEN")]
    expire_reflog: Option<String>,
    /// With --dry-run: explain why the object ID is kept (the path from a
    /// ref or ref-log entry to it), and do nothing else; with --json, as
    /// {"id", "reachable", "path": [{"kind", ...}]}.
    #[arg(long, value_name = "ID", requires = "dry_run")]
    why: Option<String>,
    /// Print one JSON object: the counts, bytes and what went from each
    /// conversation ("dry_run" says whether anything did).
    #[arg(long)]
    json: bool,
}

pub fn gc(ctx: &Ctx, args: GcArgs) -> CmdResult {
    let mut opts = GcOptions {
        dry_run: args.dry_run,
        ..GcOptions::default()
    };
    if let Some(p) = &args.prune {
        opts.prune = parse_prune(p).map_err(|e| CommandError::Usage(crate::message(&e)))?;
    }
    if let Some(w) = &args.expire_reflog {
        crate::purge::check_expire_reflog(w)?;
    }
    let store = ctx.open_store()?;
    if let Some(w) = &args.expire_reflog {
        crate::purge::gc_expire_reflog(&store, w, args.dry_run, &mut opts)?;
    }
    if let Some(id) = &args.why {
        return crate::purge::gc_why(&store, id, &opts, args.json);
    }
    let bar = crate::progress::Bar::new("gc");
    let r = store.gc_with(&opts, &bar);
    drop(bar);
    let r = r?;
    if args.json {
        let mut v = r.to_json();
        v["dry_run"] = args.dry_run.into();
        return print(&format!("{v}\n"));
    }
    let mut out = String::new();
    if args.dry_run {
        out.push_str(&format!(
            "would prune {} of {} objects ({} bytes); {} reachable, {} unreachable kept within the grace period\n",
            r.pruned, r.objects, r.pruned_bytes, r.reachable, r.kept_young
        ));
    } else {
        out.push_str(&format!(
            "pruned {} of {} objects ({} bytes); {} reachable, {} unreachable kept within the grace period; {} -> {} bytes on disk\n",
            r.pruned, r.objects, r.pruned_bytes, r.reachable, r.kept_young, r.bytes_before, r.bytes_after
        ));
        if r.storage_deleted > 0 {
            out.push_str(&format!(
                "deleted {} packs from the bucket that nothing named any more\n",
                r.storage_deleted
            ));
        }
    }
    for (conv, (n, bytes)) in &r.by_conversation {
        out.push_str(&format!("  {conv}: {n} objects, {bytes} bytes\n"));
    }
    print(&out)
}

#[derive(Debug, Args)]
pub struct FsckArgs {
    /// Also verify pack and index checksums and report journal damage.
    #[arg(long)]
    full: bool,
    /// Print a JSON report instead of one line per problem.
    #[arg(long)]
    json: bool,
}

pub fn fsck(ctx: &Ctx, args: FsckArgs) -> CmdResult {
    let store = ctx.open_store_read()?;
    let tty = std::io::stderr().is_terminal();
    let bar = crate::progress::Bar::new("fsck");
    let mut progress = |done: usize, total: usize| bar.set(done as u64, total as u64);
    let r = store.fsck(&FsckOptions { full: args.full }, &mut progress);
    drop(bar);
    let r = r?;
    let text = if args.json {
        format!("{}\n", r.to_json())
    } else {
        let mut t = String::new();
        for p in &r.problems {
            t.push_str(p);
            t.push('\n');
        }
        for d in &r.dangling {
            t.push_str(&format!("dangling session {d}\n"));
        }
        t
    };
    print(&text)?;
    for n in &r.notes {
        eprintln!("sessctl: note: {n}");
    }
    // Silent when clean in a pipe; a person at a terminal gets a summary.
    if !args.json && (tty || !r.is_clean()) {
        eprintln!(
            "sessctl: fsck: {} objects ({} sessions, {} blobs{}), {} operations: {}",
            r.objects,
            r.sessions,
            r.blobs,
            if r.raws > 0 {
                format!(", {} raw messages", r.raws)
            } else {
                String::new()
            },
            r.operations,
            if r.is_clean() {
                "clean".to_owned()
            } else {
                format!("{} problems", r.problems.len())
            }
        );
    }
    if r.is_clean() {
        Ok(())
    } else {
        Err(CommandError::Silent(3))
    }
}
