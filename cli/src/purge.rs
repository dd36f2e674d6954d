//! Purging: `reflog expire`, `redact`, and what `gc --expire-reflog` and
//! `gc --dry-run --why` add to gc.
//!
//! The work is the library's (`sessctl_store::purge`); this module reads
//! flags, compiles the pattern and prints what was done. It never prints
//! or records the pattern: it may be the secret itself.

use clap::{Args, Subcommand};
use serde_json::json;
use sessctl_store::gc::{parse_prune, GcOptions, Prune};
use sessctl_store::purge::{default_expiry, expiry_cutoff, RedactOptions, WhyStep};
use sessctl_store::time::{format_rfc3339_ms, now_ms};
use sessctl_store::{Durability, Error, RefName, Store};

use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

/// Parses an expiry time (`--expire`, `--expire-reflog`), naming the flag.
fn parse_when(flag: &str, text: &str) -> CmdResult<Prune> {
    parse_prune(text).map_err(|_| {
        CommandError::Usage(format!(
            "{flag} takes now, a date (2025-11-01), an RFC 3339 time or N.days.ago \
             (also minutes, hours, weeks), not '{text}'"
        ))
    })
}

/// A ref given on the command line: `HEAD`, a full name, or a name looked
/// up as a conversation, an archived conversation, then a tag.
fn find_ref(store: &Store, text: &str) -> CmdResult<RefName> {
    if text == "HEAD" || text.starts_with("refs/") {
        return RefName::parse(text).map_err(|e| Error::from(e).into());
    }
    let candidates = [
        RefName::conversation(text),
        RefName::parse(&format!("refs/archive/{text}")),
        RefName::parse(&format!("refs/tags/{text}")),
    ];
    for c in candidates {
        let c = c.map_err(Error::from)?;
        if store.get_ref(&c)?.is_some() {
            return Ok(c);
        }
    }
    Err(CommandError::Failed(format!(
        "no conversation, archived conversation or tag named {text}"
    )))
}

/// `1 session`, `2 sessions`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

// ---- reflog expire ----

#[derive(Debug, Subcommand)]
pub enum ReflogAction {
    /// Expire old ref-log entries: they no longer show, and no longer keep
    /// the sessions they name from gc (the chains stay verifiable).
    Expire(ExpireArgs),
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["all", "name"])))]
pub struct ExpireArgs {
    /// Expire entries older than this: now, a date (2025-11-01), an RFC
    /// 3339 time, or N.days.ago (minutes, hours, weeks). Default:
    /// 90.days.ago.
    #[arg(long, value_name = "WHEN")]
    expire: Option<String>,
    /// Every ref's log, deleted refs' included.
    #[arg(long)]
    all: bool,
    /// HEAD, a full ref name or a conversation name.
    #[arg(value_name = "REF", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::ref_names))]
    name: Option<String>,
    /// Say what would expire; change nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Print a JSON report.
    #[arg(long)]
    json: bool,
}

pub fn reflog_action(ctx: &Ctx, action: ReflogAction) -> CmdResult {
    let ReflogAction::Expire(args) = action;
    let when = match &args.expire {
        Some(t) => parse_when("--expire", t)?,
        None => default_expiry(),
    };
    let store = if args.dry_run {
        ctx.open_store_read()?
    } else {
        ctx.open_store()?
    };
    let names = match &args.name {
        Some(n) => {
            let r = if n == "HEAD" || n.starts_with("refs/") {
                RefName::parse(n).map_err(Error::from)?
            } else {
                RefName::conversation(n).map_err(Error::from)?
            };
            if !store.reflog_entries()?.iter().any(|e| e.name == r) {
                return Err(CommandError::Failed(format!("{r} has no ref log")));
            }
            Some(vec![r])
        }
        None => None,
    };
    let r = store.expire_reflog(
        names.as_deref(),
        expiry_cutoff(when),
        args.dry_run,
        Durability::Sync,
    )?;
    if args.json {
        let mut v = r.to_json();
        v["dry_run"] = json!(args.dry_run);
        return print(&format!("{v}\n"));
    }
    let verb = if args.dry_run {
        "would expire"
    } else {
        "expired"
    };
    let mut out = String::new();
    for (name, (expired, kept)) in &r.refs {
        if *expired > 0 {
            out.push_str(&format!(
                "{verb} {} of {name}, {kept} kept\n",
                count(*expired, "entry", "entries")
            ));
        }
    }
    let refs = r.refs.values().filter(|(e, _)| *e > 0).count();
    out.push_str(&format!(
        "{verb} {} of {}\n",
        count(r.expired(), "entry", "entries"),
        count(refs, "ref", "refs")
    ));
    print(&out)
}

// ---- gc --expire-reflog, gc --why ----

/// `gc --expire-reflog=WHEN`: expires every ref's entries older than WHEN
/// (recorded, as `reflog expire --all`, unless this is a dry run) and
/// makes gc's marking keep none of them.
pub fn gc_expire_reflog(
    store: &Store,
    when: &str,
    dry_run: bool,
    opts: &mut GcOptions,
) -> CmdResult {
    let cutoff = expiry_cutoff(parse_when("--expire-reflog", when)?);
    if !dry_run {
        store.expire_reflog(None, cutoff, false, Durability::Sync)?;
    }
    // Entries at or after the cutoff stay roots; in a dry run nothing was
    // recorded, so the age does the expiring.
    let age = now_ms().saturating_sub(cutoff).max(0);
    opts.reflog_expiry_ms = opts.reflog_expiry_ms.min(age);
    Ok(())
}

/// Parses `--expire-reflog` before the store is opened.
pub fn check_expire_reflog(when: &str) -> CmdResult {
    parse_when("--expire-reflog", when).map(|_| ())
}

/// `gc --dry-run --why ID`: the path from a root to the object.
pub fn gc_why(store: &Store, id: &str, opts: &GcOptions, json: bool) -> CmdResult {
    let id = store.odb().resolve(id)?;
    let steps = store.why_reachable(&id, opts.reflog_expiry_ms)?;
    if json {
        return print(&format!("{}\n", why_json(&id, steps.as_deref())));
    }
    let Some(steps) = steps else {
        return print(&format!(
            "{id} is unreachable: no ref, live ref-log entry or run reaches it, \
             so gc drops it once it is past the grace period\n"
        ));
    };
    let mut out = format!("{id} is reachable:\n");
    for (k, step) in steps.iter().enumerate() {
        let line = match step {
            WhyStep::Ref(name) => format!("ref {name}"),
            WhyStep::Reflog { name, op, time } => format!(
                "ref-log entry of {name} (operation {op}, {}; expires with reflog expire or gc --expire-reflog)",
                format_rfc3339_ms(*time)
            ),
            WhyStep::Session { id, via: None } => format!("session {id}"),
            WhyStep::Session { id, via: Some(via) } => format!("{via} session {id}"),
            WhyStep::Blob { id, via } => format!("{via} blob {id}"),
        };
        let lead = if k == 0 { "  " } else { "  -> " };
        out.push_str(&format!("{lead}{line}\n"));
    }
    print(&out)
}

/// `gc --dry-run --why ID --json`: `{"id", "reachable", "path"}`, the path
/// a list of steps from the root that keeps the object (`kind` ref,
/// reflog, session or blob; `via`: how the step before names it).
fn why_json(id: &sessctl_store::ObjectId, steps: Option<&[WhyStep]>) -> serde_json::Value {
    use serde_json::json;
    let path: Vec<serde_json::Value> = steps
        .unwrap_or_default()
        .iter()
        .map(|step| match step {
            WhyStep::Ref(name) => json!({"kind": "ref", "name": name.to_string()}),
            WhyStep::Reflog { name, op, time } => json!({
                "kind": "reflog", "name": name.to_string(), "op": op, "time": time,
            }),
            WhyStep::Session { id, via } => {
                json!({"kind": "session", "id": id.to_hex(), "via": via})
            }
            WhyStep::Blob { id, via } => json!({"kind": "blob", "id": id.to_hex(), "via": via}),
        })
        .collect();
    json!({"id": id.to_hex(), "reachable": steps.is_some(), "path": path})
}

// ---- redact ----

#[derive(Debug, Args)]
pub struct RedactArgs {
    /// A regular expression (Rust regex syntax) matched against every string
    /// of every message, display message, state, compaction summary, title
    /// and metadata value. It is never printed or recorded.
    #[arg(value_name = "PATTERN")]
    pattern: String,
    /// What each match becomes (taken literally: no $1 expansion).
    #[arg(long, value_name = "TEXT", default_value = "[REDACTED]")]
    replace: String,
    /// Conversations, archived conversations, tags, full ref names or HEAD
    /// to rewrite (default: every ref).
    #[arg(value_name = "REV", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    revs: Vec<String>,
    /// Match case-insensitively.
    #[arg(short = 'i', long)]
    ignore_case: bool,
    /// Why, in the ref log; never put the secret here.
    #[arg(long, value_name = "TEXT", default_value = "secret removed")]
    reason: String,
    /// List what would be rewritten; change nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Print a JSON report.
    #[arg(long)]
    json: bool,
}

pub fn redact(ctx: &Ctx, args: RedactArgs) -> CmdResult {
    let re = regex::RegexBuilder::new(&args.pattern)
        .case_insensitive(args.ignore_case)
        .size_limit(1 << 24)
        .build()
        // The error quotes the pattern: say only where it failed.
        .map_err(|e| match e {
            regex::Error::Syntax(_) => {
                CommandError::Usage("PATTERN is not a valid regular expression".into())
            }
            _ => CommandError::Usage("PATTERN is too large".into()),
        })?;
    if re.is_match("") {
        return Err(CommandError::Usage(
            "PATTERN matches the empty string: it would rewrite every text".into(),
        ));
    }
    let store = if args.dry_run {
        ctx.open_store_read()?
    } else {
        ctx.open_store()?
    };
    let refs = if args.revs.is_empty() {
        None
    } else {
        Some(
            args.revs
                .iter()
                .map(|r| find_ref(&store, r))
                .collect::<CmdResult<Vec<_>>>()?,
        )
    };
    let replace = args.replace.as_str();
    let redactor = |text: &str| -> Option<(String, usize)> {
        let n = re.find_iter(text).count();
        (n > 0).then(|| {
            (
                re.replace_all(text, regex::NoExpand(replace)).into_owned(),
                n,
            )
        })
    };
    let bar = crate::progress::Bar::new("redact");
    sessctl_store::progress::Progress::phase(&bar, "reading sessions", None);
    let r = store.redact(
        refs.as_deref(),
        &redactor,
        &RedactOptions {
            reason: args.reason.clone(),
            dry_run: args.dry_run,
            durability: Durability::Sync,
        },
    );
    drop(bar);
    let r = r.map_err(|e| match e {
        // Another process moved a ref or changed a record between the
        // read and the write.
        Error::RefOutOfDate { .. } | Error::RecordOutOfDate { .. } => {
            CommandError::Failed(format!(
                "{}; nothing was rewritten: run redact again",
                crate::message(&e)
            ))
        }
        Error::Busy { .. } => CommandError::Failed(format!(
            "{}; nothing was rewritten: run redact again once it ends",
            crate::message(&e)
        )),
        e => e.into(),
    })?;
    if args.json {
        let mut v = r.to_json();
        v["dry_run"] = json!(args.dry_run);
        return print(&format!("{v}\n"));
    }
    let mut out = String::new();
    if r.matches == 0 {
        out.push_str("no match: nothing to redact\n");
        print(&out)?;
        warn_operations(&r.operations);
        return Ok(());
    }
    let (verb, moved) = if args.dry_run {
        ("would rewrite", "would move")
    } else {
        ("rewrote", "moved")
    };
    out.push_str(&format!(
        "{verb} {} and {} ({}); {moved} {}\n",
        count(r.sessions.len(), "session", "sessions"),
        count(r.blobs.len(), "blob", "blobs"),
        count(r.matches, "match", "matches"),
        count(r.refs.len(), "ref", "refs")
    ));
    for (name, old, new) in &r.refs {
        out.push_str(&format!(
            "  {name}: {} -> {}\n",
            old.to_hex_prefix(12),
            new.to_hex_prefix(12)
        ));
    }
    for c in &r.records {
        out.push_str(&format!(
            "  conversation record {c}: title or metadata redacted\n"
        ));
    }
    for s in &r.sessions {
        let what = if s.matches > 0 {
            count(s.matches, "match", "matches")
        } else {
            "names a rewritten session".to_owned()
        };
        out.push_str(&format!(
            "  session {} -> {} ({what})\n",
            s.old.to_hex_prefix(12),
            s.new.to_hex_prefix(12)
        ));
    }
    print(&out)?;
    warn_operations(&r.operations);
    for name in &r.still_reachable_from {
        eprintln!(
            "sessctl: warning: {name} was not selected and still reaches a session that holds the text"
        );
    }
    if !args.dry_run {
        eprintln!(
            "sessctl: note: the old sessions stay until the ref log that names them expires; \
             sessctl gc --prune=now --expire-reflog=now removes them"
        );
    }
    Ok(())
}

/// Operations are never rewritten: says which still hold the text (a
/// record's earlier title or metadata, a run's error), by number only.
fn warn_operations(ops: &[u64]) {
    if ops.is_empty() {
        return;
    }
    let list: Vec<String> = ops.iter().map(ToString::to_string).collect();
    eprintln!(
        "sessctl: warning: {} still {} the text (a conversation record's title or metadata, or a \
         run's error; operations are never rewritten): {}",
        count(ops.len(), "operation", "operations"),
        if ops.len() == 1 { "holds" } else { "hold" },
        list.join(", ")
    );
}
