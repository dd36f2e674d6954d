//! Bundles and remotes: `bundle create|verify|unbundle`, `clone`, `push`,
//! `pull`. Every transfer goes through `sessctl_store::remote::apply`; this
//! module reads arguments and prints what moved.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};
use serde_json::{json, Value};
use sessctl_store::bundle::{Bundle, ProblemKind, Selection};
use sessctl_store::remote::{self, RefOutcome, TransferReport};
use sessctl_store::{Durability, Error, OpenOptions, RefName, Store};

use crate::output::print;
use crate::progress::Bar;
use crate::{
    init_remote_store, open_any_store, remote_url, show_store, CmdResult, CommandError, Ctx,
};

#[derive(Debug, Args)]
pub struct BundleArgs {
    #[command(subcommand)]
    command: BundleCommand,
}

#[derive(Debug, Subcommand)]
enum BundleCommand {
    /// Write the objects the REVs reach (minus what --since reaches), their
    /// refs and conversation records to FILE.
    Create(CreateArgs),
    /// Check a bundle's checksum, objects and closure, and (in a store)
    /// its prerequisites; print what it holds. Exit 3 corrupt, 1 missing
    /// prerequisites.
    Verify(VerifyArgs),
    /// Check a bundle, then write its objects and move its refs (new,
    /// fast-forward or unchanged; a diverged ref refuses the whole bundle).
    Unbundle(UnbundleArgs),
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// The bundle file to write.
    file: PathBuf,
    /// Conversations (their refs and records come along) or any revision.
    #[arg(required_unless_present = "all", conflicts_with = "all", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    revs: Vec<String>,
    /// Every ref but HEAD, and every conversation record.
    #[arg(long)]
    all: bool,
    /// Leave out what these revisions reach: the receiver has it.
    #[arg(long, value_name = "REV", num_args = 1.., action = clap::ArgAction::Append)]
    since: Vec<String>,
    /// Print one JSON object: the file, its refs and counts.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    /// The bundle file to check.
    file: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct UnbundleArgs {
    /// The bundle file to read.
    file: PathBuf,
    /// Print one JSON object: every ref and what became of it, and the
    /// totals (a refusal exits 1, and the refs it kept back are
    /// "not-updated").
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct CloneArgs {
    /// The store to copy (opened read-only): a directory or a remote
    /// store's URL (postgres://...?objects=s3://...).
    path: PathBuf,
    /// The new store: a directory that must not exist, or be empty (a
    /// clone that fails removes what it made there); or a remote store's
    /// URL (created if need be; it must hold no conversation yet).
    dest: PathBuf,
    /// Print one JSON object: every ref and what became of it, and the
    /// totals.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RemoteArgs {
    /// The other store: a directory or a remote store's URL.
    remote: PathBuf,
    /// Conversations to transfer (default: every ref).
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::complete::conversations))]
    conversations: Vec<String>,
    /// Print one JSON object: every ref and what became of it, and the
    /// totals (a refusal still exits 1, and the refs it kept back are
    /// "not-updated").
    #[arg(long)]
    json: bool,
}

pub fn bundle(ctx: &Ctx, args: BundleArgs) -> CmdResult {
    match args.command {
        BundleCommand::Create(a) => create(ctx, a),
        BundleCommand::Verify(a) => verify(ctx, a),
        BundleCommand::Unbundle(a) => unbundle(ctx, a),
    }
}

fn create(ctx: &Ctx, args: CreateArgs) -> CmdResult {
    let store = ctx.open_store_read()?;
    let selection = if args.all {
        Selection::All
    } else {
        Selection::Revs(args.revs)
    };
    let bundle = Bundle::create(&store, &selection, &args.since)?;
    let size = bundle.write(&args.file)?;
    if args.json {
        let v = json!({
            "file": args.file.display().to_string(),
            "refs": bundle.refs.iter().map(|(n, id)| json!({"name": n.to_string(), "target": id.to_hex()})).collect::<Vec<_>>(),
            "objects": bundle.objects.len(),
            "sessions": bundle.session_count(),
            "prerequisites": bundle.prerequisites.iter().map(|id| id.to_hex()).collect::<Vec<_>>(),
            "bytes": size,
        });
        return print(&format!("{v}\n"));
    }
    print(&format!(
        "wrote {}: {} refs, {} objects ({} sessions), {} prerequisites, {size} bytes\n",
        args.file.display(),
        bundle.refs.len(),
        bundle.objects.len(),
        bundle.session_count(),
        bundle.prerequisites.len(),
    ))
}

/// The store a command may check a bundle against, when there is one.
fn optional_store(ctx: &Ctx) -> CmdResult<Option<Store>> {
    match ctx.open_store_read() {
        Ok(s) => Ok(Some(s)),
        Err(CommandError::Store(Error::NotAStore { .. }) | CommandError::NoStore) => Ok(None),
        Err(e) => Err(e),
    }
}

fn verify(ctx: &Ctx, args: VerifyArgs) -> CmdResult {
    let file = args.file.display().to_string();
    let bundle = match Bundle::read(&args.file) {
        Ok(b) => b,
        Err(e) if args.json => {
            let code = if e.is_corruption() { 3 } else { 1 };
            print(&format!(
                "{}\n",
                json!({"file": file, "ok": false, "problems": [e.to_string()]})
            ))?;
            return Err(CommandError::Silent(code));
        }
        Err(e) => return Err(e.into()),
    };
    let store = optional_store(ctx)?;
    let problems = bundle.problems(store.as_ref())?;
    let code = if problems.iter().any(|p| p.kind == ProblemKind::Corrupt) {
        3
    } else if problems.is_empty() {
        0
    } else {
        1
    };
    if args.json {
        let v = json!({
            "file": file,
            "ok": problems.is_empty(),
            "refs": bundle.refs.iter().map(|(n, id)| json!({"name": n.to_string(), "target": id.to_hex()})).collect::<Vec<_>>(),
            "conversations": bundle.conversations.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            "prerequisites": bundle.prerequisites.iter().map(|id| id.to_hex()).collect::<Vec<_>>(),
            "objects": bundle.objects.len(),
            "sessions": bundle.session_count(),
            "blobs": bundle.objects.len() - bundle.session_count(),
            "bytes": bundle.payload_bytes(),
            "problems": problems.iter().map(|p| Value::String(p.to_string())).collect::<Vec<_>>(),
        });
        print(&format!("{v}\n"))?;
    } else if problems.is_empty() {
        let mut out = String::new();
        for (name, id) in &bundle.refs {
            out.push_str(&format!("{id} {name}\n"));
        }
        out.push_str(&format!(
            "{} objects ({} sessions, {} blobs, {} bytes), {} conversation records, {} prerequisites\n",
            bundle.objects.len(),
            bundle.session_count(),
            bundle.objects.len() - bundle.session_count(),
            bundle.payload_bytes(),
            bundle.conversations.len(),
            bundle.prerequisites.len(),
        ));
        print(&out)?;
    } else {
        for p in &problems {
            eprintln!("sessctl: {file}: {p}");
        }
    }
    match code {
        0 => Ok(()),
        c => Err(CommandError::Silent(c)),
    }
}

fn unbundle(ctx: &Ctx, args: UnbundleArgs) -> CmdResult {
    let bundle = Bundle::read(&args.file)?;
    let store = ctx.open_store()?;
    let bar = Bar::new("unbundle");
    let report = remote::apply_with(
        &store,
        &bundle,
        "unbundle",
        "the bundle",
        Durability::Sync,
        &bar,
    );
    drop(bar);
    let report = report?;
    finish(&report, "unbundled", args.json)
}

/// A transfer report as one JSON object: `refs` (name, outcome: created,
/// fast-forward, forced, up-to-date or refused; old and new ids; the refusal's
/// message), `objects`, `bytes`, `applied`. When a refusal kept everything
/// back, a ref that would have moved has outcome `not-updated`, and `would`
/// says how (created, fast-forward or forced).
fn report_json(report: &TransferReport) -> Value {
    let refs: Vec<Value> = report
        .refs
        .iter()
        .map(|(name, outcome)| {
            let name = name.to_string();
            let mut v = match outcome {
                RefOutcome::Created(id) => {
                    json!({"name": name, "outcome": "created", "new": id.to_hex()})
                }
                RefOutcome::FastForward { from, to } => json!({
                    "name": name, "outcome": "fast-forward", "old": from.to_hex(), "new": to.to_hex()
                }),
                RefOutcome::Forced { from, to } => json!({
                    "name": name, "outcome": "forced", "old": from.to_hex(), "new": to.to_hex()
                }),
                RefOutcome::UpToDate => return json!({"name": name, "outcome": "up-to-date"}),
                RefOutcome::Refused(m) => {
                    return json!({"name": name, "outcome": "refused", "message": m})
                }
            };
            if !report.applied {
                v["would"] = v["outcome"].take();
                v["outcome"] = "not-updated".into();
            }
            v
        })
        .collect();
    json!({
        "refs": refs,
        "objects": report.objects,
        "bytes": report.bytes,
        "applied": report.applied,
    })
}

/// A refusal exits 1, whatever was printed.
fn refused(report: &TransferReport) -> CmdResult {
    match report.refusals().len() {
        0 => Ok(()),
        n => Err(CommandError::Failed(format!(
            "{n} ref{} refused; nothing was updated",
            if n == 1 { "" } else { "s" }
        ))),
    }
}

/// What a transfer that a refusal kept back would have done to a ref, in
/// words that do not say it was done.
fn held_back(outcome: &RefOutcome) -> String {
    match outcome {
        RefOutcome::Created(id) => format!("would have been created at {}", id.to_hex_prefix(12)),
        RefOutcome::FastForward { from, to } => format!(
            "would have fast-forwarded {}..{}",
            from.to_hex_prefix(12),
            to.to_hex_prefix(12)
        ),
        RefOutcome::Forced { from, to } => format!(
            "would have been forced {}...{}",
            from.to_hex_prefix(12),
            to.to_hex_prefix(12)
        ),
        RefOutcome::UpToDate | RefOutcome::Refused(_) => outcome.to_string(),
    }
}

/// Prints one line per ref and the summary (or, with `json`, one JSON
/// object); a refusal exits 1.
fn finish(report: &TransferReport, verb: &str, json: bool) -> CmdResult {
    if json {
        print(&format!("{}\n", report_json(report)))?;
        return refused(report);
    }
    let mut out = String::new();
    for (name, outcome) in &report.refs {
        if report.applied {
            out.push_str(&format!("{name}: {outcome}\n"));
        } else {
            out.push_str(&format!("{name}: {}\n", held_back(outcome)));
        }
    }
    if report.applied {
        out.push_str(&format!(
            "{verb} {} objects ({} bytes)\n",
            report.objects, report.bytes
        ));
    }
    print(&out)?;
    refused(report)
}

/// Copies a store, then prints one summary (a store may hold thousands of
/// refs): conversations, refs, objects, bytes and time.
pub fn clone(ctx: &Ctx, args: CloneArgs) -> CmdResult {
    let started = Instant::now();
    let bar = Bar::new("clone");
    let source = show_store(&args.path);
    let cloned = match (remote_url(&args.path), remote_url(&args.dest)) {
        (None, None) => remote::clone_with(&args.path, &args.dest, &bar).map(|(_, r)| r),
        // Into a remote store: created if need be, and refused unless it
        // holds no conversation yet.
        (_, Some(url)) => {
            let from = open_remote(ctx, &args.path, false)?;
            let into = init_remote_store(
                url,
                &OpenOptions {
                    wait: Some(ctx.writer_wait()),
                    ..OpenOptions::default()
                },
            )?;
            remote::clone_into(&from, &into, &source, &bar)
        }
        (Some(_), None) => {
            let from = open_remote(ctx, &args.path, false)?;
            remote::clone_from(&from, &source, &args.dest, &bar).map(|(_, r)| r)
        }
    };
    drop(bar);
    let report = cloned?;
    let elapsed = started.elapsed();
    let conversations = report
        .refs
        .iter()
        .filter(|(n, _)| matches!(n, RefName::Conversation(_) | RefName::Archived(_)))
        .count();
    if args.json {
        let mut v = report_json(&report);
        v["conversations"] = json!(conversations);
        v["seconds"] = json!(elapsed.as_secs_f64());
        print(&format!("{v}\n"))?;
        return refused(&report);
    }
    print(&format!(
        "cloned {} into {}: {conversations} conversation{}, {} ref{}, {} objects ({} bytes) in {:.1}s\n",
        source,
        show_store(&args.dest),
        if conversations == 1 { "" } else { "s" },
        report.refs.len(),
        if report.refs.len() == 1 { "" } else { "s" },
        report.objects,
        report.bytes,
        elapsed.as_secs_f64(),
    ))?;
    refused(&report)
}

/// Opens the other store: for writing (each write waiting up to `--wait` for
/// its write lock) or read-only.
fn open_remote(ctx: &Ctx, path: &Path, write: bool) -> CmdResult<Store> {
    let store = open_any_store(
        path,
        &OpenOptions {
            read_only: !write,
            wait: write.then(|| ctx.writer_wait()),
            ..OpenOptions::default()
        },
    )?;
    for note in store.take_recovery_notes() {
        eprintln!("sessctl: warning: {}: {note}", show_store(path));
    }
    Ok(store)
}

#[derive(Debug, Args)]
pub struct PushArgs {
    #[command(flatten)]
    remote: RemoteArgs,
    /// Overwrite a conversation that has diverged in the other store (its
    /// sessions there that this one lacks are no longer on that ref).
    #[arg(short = 'f', long, conflicts_with = "force_with_lease")]
    force: bool,
    /// Overwrite a diverged conversation only while the other store's ref
    /// holds what is expected: alone, a value this store's ref log shows the
    /// ref held; =REF, the same for REF only; =REF:EXPECTED, exactly that
    /// revision (empty: REF must not exist there). Repeatable. A lease that
    /// fails refuses the push.
    #[arg(
        long,
        value_name = "REF[:EXPECTED]",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = ""
    )]
    force_with_lease: Vec<String>,
}

/// `--force-with-lease` values as the library's leases.
fn leases(local: &Store, values: &[String]) -> CmdResult<remote::Force> {
    use remote::{Force, Lease, LeaseExpect};
    let mut out = Vec::new();
    for v in values {
        if v.is_empty() {
            out.push(Lease {
                name: None,
                expect: LeaseExpect::Seen,
            });
            continue;
        }
        let (r, expected) = match v.split_once(':') {
            Some((r, e)) => (r, Some(e)),
            None => (v.as_str(), None),
        };
        let name = if r.starts_with("refs/") {
            sessctl_store::RefName::parse(r)
        } else {
            sessctl_store::RefName::conversation(r)
        }
        .map_err(|e| CommandError::Usage(format!("--force-with-lease={v}: {e}")))?;
        let expect = match expected {
            None => LeaseExpect::Seen,
            Some("") => LeaseExpect::Absent,
            // A full id may name a session only the other store has.
            Some(e) => match sessctl_store::ObjectId::from_hex(e) {
                Ok(id) => LeaseExpect::At(id),
                Err(_) => LeaseExpect::At(local.resolve_rev(e)?),
            },
        };
        out.push(Lease {
            name: Some(name),
            expect,
        });
    }
    Ok(Force::Leases(out))
}

pub fn push(ctx: &Ctx, args: PushArgs) -> CmdResult {
    let local = ctx.open_store_read()?;
    let force = if args.force {
        remote::Force::All
    } else if args.force_with_lease.is_empty() {
        remote::Force::No
    } else {
        leases(&local, &args.force_with_lease)?
    };
    let args_remote = args.remote;
    let remote_store = open_remote(ctx, &args_remote.remote, true)?;
    let bar = Bar::new("push");
    let report = remote::push_with(
        &local,
        &remote_store,
        &args_remote.conversations,
        &force,
        Durability::Sync,
        &bar,
    );
    drop(bar);
    let report = report?;
    finish(&report, "sent", args_remote.json)
}

pub fn pull(ctx: &Ctx, args: RemoteArgs) -> CmdResult {
    let local = ctx.open_store()?;
    let remote_store = open_remote(ctx, &args.remote, false)?;
    let bar = Bar::new("pull");
    let report = remote::pull_with(
        &local,
        &remote_store,
        &args.conversations,
        Durability::Sync,
        &bar,
    );
    drop(bar);
    let report = report?;
    finish(&report, "sent", args.json)
}
