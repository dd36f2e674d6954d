//! `sessctl`: git-like storage for AI-agent sessions.
//!
//! This file parses arguments, dispatches to one module per command family,
//! and turns errors into one line on stderr and an exit code. It holds no
//! storage logic: everything it does goes through `sessctl_store`.

mod checkout;
mod compact;
mod complete;
mod conversations;
mod history;
mod hook;
mod import;
mod into_agent;
mod maintenance;
mod output;
mod pager;
mod paint;
mod plumbing;
mod porcelain;
mod progress;
mod purge;
mod refs;
mod remote;
mod replay;
mod search;
mod summarizer;
mod watch;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use sessctl_store::{Error, Odb, OpenOptions, Store};

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  the command failed (not found, invalid input, refused)
  2  usage error (unknown command or flag, bad argument)
  3  corruption detected: stored bytes do not match their ids or checksums
  4  the store is in use: another process held its write lock for longer than --wait";

/// The heading of the options every command takes.
const GLOBAL: &str = "Global options";

/// Git-like, content-addressed storage for AI-agent sessions.
#[derive(Debug, Parser)]
#[command(name = "sessctl", version, after_help = EXIT_CODES, max_term_width = 100)]
struct Cli {
    /// The store to use (default: the nearest .sessctl in this directory or
    /// a parent; init creates ./.sessctl): a directory, or a remote store
    /// 'postgres://USER@HOST:PORT/DB?objects=s3://BUCKET/PREFIX' (S3 settings
    /// from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_REGION, AWS_ALLOW_HTTP).
    #[arg(long, global = true, env = "SESSCTL_STORE", value_name = "DIR|URL", help_heading = GLOBAL)]
    store: Option<PathBuf>,
    /// How many seconds a write waits for another process's short hold of the
    /// store's write lock (default 5; 0: fail at once). Reads never wait.
    #[arg(long, global = true, value_name = "SECONDS", help_heading = GLOBAL)]
    wait: Option<f64>,
    /// Do not page log, show and diff (on a terminal they go through
    /// $SESSCTL_PAGER, $PAGER or less -FRX).
    #[arg(long, global = true, help_heading = GLOBAL)]
    no_pager: bool,
    /// Colour ids, refs and diff lines: auto (on a terminal, unless
    /// NO_COLOR is set), always or never.
    #[arg(long, global = true, value_name = "WHEN", value_enum, default_value = "auto", help_heading = GLOBAL)]
    color: paint::ColorWhen,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create an empty store.
    Init,
    /// Compute the blob id of a JSON value, and optionally store it.
    HashObject(plumbing::HashObjectArgs),
    /// Show an object: its type, size, content or JSON form.
    CatObject(plumbing::CatObjectArgs),
    /// Move journal segments and packs into one new pack.
    Repack(plumbing::RepackArgs),
    /// Record a turn: start a conversation (--new) or continue one.
    Commit(conversations::CommitArgs),
    /// Start a new conversation from any session, optionally cut short.
    Fork(conversations::ForkArgs),
    /// Move a conversation to refs/archive/ (it stays readable).
    Archive(conversations::NameArgs),
    /// Move an archived conversation back to refs/heads/.
    Unarchive(conversations::ArchivedNameArgs),
    /// Delete a conversation's ref and record (its objects stay for gc).
    Rm(conversations::NameArgs),
    /// List conversations, most recently active first.
    Ls(conversations::LsArgs),
    /// Archive (or delete) all but the N most recently active conversations.
    Prune(conversations::PruneArgs),
    /// Show how refs moved, newest first.
    Reflog(refs::ReflogArgs),
    /// Rebuild every derived index from the objects and operations: the index
    /// tables and the lineage index ("reindexed N operations").
    Reindex(refs::ReindexArgs),
    /// Drop what no ref, recent ref-log entry or open run reaches, past the
    /// grace period; repack what is kept.
    Gc(maintenance::GcArgs),
    /// Check every object, reference, history length and chain; exit 0 only
    /// when clean, 3 when something is damaged or missing, 1 when a remote
    /// store's server cannot be read (that is no problem of the data).
    Fsck(maintenance::FsckArgs),
    /// Print the script that wires a shell's completion to sessctl: it
    /// completes commands, flags, conversation names and format values.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Move HEAD to a conversation or session; -o DIR also writes the seed files.
    Checkout(checkout::CheckoutArgs),
    /// Print what a runtime resumes from: a summary, or with --json the history too.
    Resume(checkout::ResumeArgs),
    /// Replace a conversation's early messages with a summary (the old head stays a parent).
    Compact(compact::CompactArgs),
    /// Show a conversation turn by turn: inputs, answers, tool calls and results.
    Replay(replay::ReplayArgs),
    /// Set or delete one ref, optionally only if it holds an expected value.
    UpdateRef(refs::UpdateRefArgs),
    /// List every ref and what it points at.
    ForEachRef(refs::ForEachRefArgs),
    /// Show sessions newest first, never a session after its ancestors.
    Log(history::LogArgs),
    /// Print the best common ancestor of two sessions (--all: every one), or
    /// with --is-ancestor answer by exit status alone.
    MergeBase(history::MergeBaseArgs),
    /// Print the full id of each revision (fix, HEAD~2, 7f3a^2, tag~1^2).
    RevParse(history::RevParseArgs),
    /// Draw the session DAG: lanes as text, or a Graphviz digraph.
    Graph(history::GraphArgs),
    /// Show a session: metadata, run, parents and the messages it added.
    Show(history::ShowArgs),
    /// Compare two sessions: the messages each has that the other lacks, and
    /// what changed in title, metadata and states.
    Diff(history::DiffArgs),
    /// Import other agents' session files (Claude Code, Codex, OpenAI chat,
    /// SWE-agent); importing them again writes nothing.
    Import(import::ImportArgs),
    /// Print a session's history as JSON, JSONL, OpenAI chat, Claude Code JSONL or a
    /// Codex rollout; or write it back as a session Claude Code or Codex resumes.
    Export(import::ExportArgs),
    /// Capture an agent as it runs: import the transcript a Claude Code hook
    /// (JSON on stdin) or Codex's notify (JSON argument) names. Fails with
    /// exit 1, never 2 (which Claude Code takes as "block").
    Hook(hook::HookArgs),
    /// Write, check or apply a bundle: sessions, their objects and refs in one file.
    Bundle(remote::BundleArgs),
    /// Copy a store (every ref, record and object) into a new directory or
    /// an empty remote store.
    Clone(remote::CloneArgs),
    /// Send conversations to another store: only the objects it lacks;
    /// refs are created or fast-forwarded, a diverged one refuses all
    /// (unless --force or --force-with-lease).
    Push(remote::PushArgs),
    /// Fetch conversations from another store, as push does the other way.
    Pull(remote::RemoteArgs),
    /// Rewrite every session whose text matches PATTERN, and all that descend
    /// from them, as new sessions; move the refs (recorded in the ref log).
    Redact(purge::RedactArgs),
    /// Record a merge: a session on CONV whose parents are its head and REV.
    Merge(porcelain::MergeArgs),
    /// List tags, or create (-f: move) or delete (-d) one.
    Tag(porcelain::TagArgs),
    /// Rename a conversation: its ref and record move, HEAD follows.
    Rename(porcelain::RenameArgs),
    /// Move a conversation to another session (recorded in the ref log).
    Reset(porcelain::ResetArgs),
    /// Search message text (content, tool calls and results) with a regular
    /// expression; as grep(1): exit 1 when nothing matches, 2 on an error.
    Grep(search::GrepArgs),
    /// Report usage: sessions, messages, tokens, requests, time and tool
    /// calls, in total or by conversation, model, day or source.
    Stats(search::StatsArgs),
}

/// What [`CommandError::NoStore`] prints.
pub fn no_store_message() -> String {
    format!(
        "not in a sessctl store: no {STORE_DIR} in this directory or any parent; \
         run sessctl init to create one here, or give --store DIR or set SESSCTL_STORE"
    )
}

/// A command's failure: what to print and how to exit.
#[derive(Debug)]
pub enum CommandError {
    Store(Error),
    /// Bad input the user can fix.
    Usage(String),
    /// Anything else, already phrased for the user.
    Failed(String),
    /// A plain "no" (merge-base): exit with this code, print nothing.
    Silent(u8),
    /// No `--store`, no `SESSCTL_STORE`, and no `.sessctl` here or above.
    NoStore,
    /// An error of a command whose exit 1 means "no" (`grep`: nothing
    /// found): it exits 2 instead, as grep(1) does (corruption still 3).
    NotANo(Box<CommandError>),
}

impl From<Error> for CommandError {
    fn from(e: Error) -> Self {
        CommandError::Store(e)
    }
}

impl From<std::io::Error> for CommandError {
    fn from(e: std::io::Error) -> Self {
        CommandError::Failed(e.to_string())
    }
}

pub type CmdResult<T = ()> = Result<T, CommandError>;

/// See [`Ctx::writer_wait`].
const DEFAULT_WRITER_WAIT: Duration = sessctl_store::odb::DEFAULT_WAIT;

/// What commands need from the global flags.
#[derive(Debug)]
pub struct Ctx {
    /// `--store`, `SESSCTL_STORE`, the `.sessctl` found in the working
    /// directory or a parent, or (none found) `.sessctl`, where `init`
    /// creates one.
    pub store: PathBuf,
    /// No store was given and none was found: opening one fails with a
    /// message that says how to get one.
    pub store_missing: bool,
    pub wait: Option<Duration>,
}

/// The directory a store found by discovery has.
const STORE_DIR: &str = ".sessctl";

/// The nearest `.sessctl` holding a store, in `dir` or a parent, as git
/// looks for `.git`: a `.sessctl` without a FORMAT file is not one. A store
/// whose directory another user owns is passed over (see [`owned_here`]);
/// with `warn`, one line on stderr names it.
fn discover_store(dir: &std::path::Path, warn: bool) -> Option<PathBuf> {
    discover_store_as(dir, effective_uid(), warn)
}

/// This process's effective user id.
fn effective_uid() -> u32 {
    // SAFETY: geteuid takes nothing, touches no memory and cannot fail.
    unsafe { libc::geteuid() }
}

/// [`discover_store`] for the user `euid`.
fn discover_store_as(dir: &std::path::Path, euid: u32, warn: bool) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    for store in dir.ancestors().map(|d| d.join(STORE_DIR)) {
        if !store.join("FORMAT").is_file() {
            continue;
        }
        let owner = std::fs::metadata(&store).map(|m| m.uid()).ok();
        if owned_here(owner, euid) {
            return Some(store);
        }
        if warn {
            eprintln!(
                "sessctl: warning: skipping {}: owned by another user (give --store to use it)",
                store.display()
            );
        }
    }
    None
}

/// Whether a store found by discovery, whose directory `owner` owns, is
/// this user's: another user's `.sessctl` in a shared parent (a
/// world-writable /tmp) would otherwise receive this user's transcripts, the
/// hole git closed for `.git` (CVE-2022-24765). `--store` and
/// `SESSCTL_STORE` name a store whoever owns it.
fn owned_here(owner: Option<u32>, euid: u32) -> bool {
    owner == Some(euid)
}

impl Ctx {
    /// The store's path, or the error that says how to get a store.
    pub fn store_path(&self) -> CmdResult<&std::path::Path> {
        if self.store_missing {
            return Err(CommandError::NoStore);
        }
        not_a_foreign_url(&self.store)?;
        Ok(&self.store)
    }

    /// The remote store's URL, when the store given is one
    /// (`postgres://...`) rather than a directory.
    pub fn remote_url(&self) -> Option<&str> {
        remote_url(&self.store)
    }

    /// Opens the store for writing, printing what recovery did.
    pub fn open_write(&self) -> CmdResult<Odb> {
        self.open(false)
    }

    /// Opens the store for reading only: no lock, no repair.
    pub fn open_read(&self) -> CmdResult<Odb> {
        self.open(true)
    }

    /// Opens the store for a command that writes: runs left open by dead
    /// processes are recovered, and each write waits up to `--wait` for the
    /// store's short write lock. Prints what recovery did.
    pub fn open_store(&self) -> CmdResult<Store> {
        self.open_store_with(false, Some(self.writer_wait()))
    }

    /// How long a write waits for the write lock: `--wait`, or a default far
    /// longer than any write holds it.
    pub fn writer_wait(&self) -> Duration {
        self.wait.unwrap_or(DEFAULT_WRITER_WAIT)
    }

    /// Opens the store for a command that only reads: no lock, no repair,
    /// nothing written; it never waits for writers.
    pub fn open_store_read(&self) -> CmdResult<Store> {
        self.open_store_with(true, None)
    }

    fn open_store_with(&self, read_only: bool, wait: Option<Duration>) -> CmdResult<Store> {
        let opts = OpenOptions {
            read_only,
            wait,
            ..OpenOptions::default()
        };
        let store = match self.remote_url() {
            Some(url) => open_remote_store(url, &opts)?,
            None => Store::open(self.store_path()?, &opts)?,
        };
        for note in store.take_recovery_notes() {
            eprintln!("sessctl: warning: {note}");
        }
        Ok(store)
    }

    fn open(&self, read_only: bool) -> CmdResult<Odb> {
        let opts = OpenOptions {
            read_only,
            wait: (!read_only).then(|| self.writer_wait()),
            ..OpenOptions::default()
        };
        let odb = match self.remote_url() {
            Some(url) => open_remote_odb(url, &opts)?,
            None => Odb::open(self.store_path()?, &opts)?,
        };
        for note in odb.take_recovery_notes() {
            eprintln!("sessctl: warning: {note}");
        }
        Ok(odb)
    }
}

/// The remote store's URL when `store` names one (`postgres://...`)
/// rather than a directory.
pub fn remote_url(store: &std::path::Path) -> Option<&str> {
    store
        .to_str()
        .filter(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// Refuses a store named by a URL of a scheme sessctl does not speak
/// (`mysql://...`, `s3://...`), which would otherwise be taken for a
/// directory of that name and reported as "not a sessctl store".
pub fn not_a_foreign_url(store: &std::path::Path) -> CmdResult<()> {
    let Some(text) = store.to_str() else {
        return Ok(());
    };
    let scheme = text.split_once("://").map(|(s, _)| s).filter(|s| {
        !s.is_empty()
            && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    match scheme {
        Some(s) if remote_url(store).is_none() => Err(CommandError::Usage(format!(
            "{}: a store is a directory or a postgres:// URL \
             (postgres://USER@HOST:PORT/DB?objects=s3://BUCKET/PREFIX), not a {s}:// URL",
            sessctl_store::url::redact_url(text)
        ))),
        _ => Ok(()),
    }
}

/// A store as messages and the ref log name it: a directory, or a remote
/// store's URL without its password.
pub fn show_store(store: &std::path::Path) -> String {
    match remote_url(store) {
        Some(url) => sessctl_store::url::redact_url(url),
        None => store.display().to_string(),
    }
}

/// Opens the store at a directory or a remote store's URL.
pub fn open_any_store(store: &std::path::Path, opts: &OpenOptions) -> CmdResult<Store> {
    not_a_foreign_url(store)?;
    match remote_url(store) {
        Some(url) => open_remote_store(url, opts),
        None => Ok(Store::open(store, opts)?),
    }
}

/// Creates the remote store `url` if it does not exist yet (its schema;
/// the bucket is checked) and opens it for writing.
#[cfg(feature = "remote")]
pub fn init_remote_store(url: &str, opts: &OpenOptions) -> CmdResult<Store> {
    let s3 = sessctl_store::odb::S3Settings::from_env();
    sessctl_store::odb::RemoteBackend::init(url, &s3)?;
    Ok(Store::open_remote_with(url, opts, &s3)?)
}

#[cfg(not(feature = "remote"))]
pub fn init_remote_store(_url: &str, _opts: &OpenOptions) -> CmdResult<Store> {
    Err(no_remote())
}

#[cfg(feature = "remote")]
fn open_remote_store(url: &str, opts: &OpenOptions) -> CmdResult<Store> {
    Ok(Store::open_remote(url, opts)?)
}

#[cfg(feature = "remote")]
fn open_remote_odb(url: &str, opts: &OpenOptions) -> CmdResult<Odb> {
    let backend = sessctl_store::odb::RemoteBackend::open(url, opts)?;
    Ok(Odb::with_backend(std::sync::Arc::new(backend)))
}

#[cfg(not(feature = "remote"))]
fn open_remote_store(_url: &str, _opts: &OpenOptions) -> CmdResult<Store> {
    Err(no_remote())
}

#[cfg(not(feature = "remote"))]
fn open_remote_odb(_url: &str, _opts: &OpenOptions) -> CmdResult<Odb> {
    Err(no_remote())
}

#[cfg(not(feature = "remote"))]
pub(crate) fn no_remote() -> CommandError {
    CommandError::Failed(
        "this sessctl was built without remote stores (cargo feature `remote`)".into(),
    )
}

fn main() -> ExitCode {
    // A shell asking for completions (see complete.rs) is answered here.
    clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command)
        .var(complete::VAR)
        .complete();
    // An empty SESSCTL_STORE is no store given, as an empty GIT_DIR is.
    if std::env::var_os("SESSCTL_STORE").is_some_and(|s| s.is_empty()) {
        std::env::remove_var("SESSCTL_STORE");
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if !e.use_stderr() {
                0
            } else if hook_invocation() {
                // Exit 2 from a hook blocks Claude Code (see hook.rs).
                1
            } else {
                2
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let wait = match cli.wait {
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            eprintln!("sessctl: --wait takes a number of seconds, not {s}");
            return ExitCode::from(if hook_invocation() { 1 } else { 2 });
        }
        // Beyond what a Duration holds is as good as forever.
        w => w.map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)),
    };
    let (store, store_missing) = match cli.store {
        Some(s) => (s, false),
        // Like git init: here, whatever store a parent holds.
        None if matches!(cli.command, Command::Init) => (PathBuf::from(STORE_DIR), false),
        None => match std::env::current_dir()
            .ok()
            .and_then(|d| discover_store(&d, true))
        {
            Some(s) => (s, false),
            None => (PathBuf::from(STORE_DIR), true),
        },
    };
    let ctx = Ctx {
        store,
        store_missing,
        wait,
    };
    {
        use std::io::IsTerminal;
        let tty = std::io::stdout().is_terminal();
        paint::set_enabled(paint::decide(cli.color, tty));
        // JSON is for programs: never paged.
        let pages = match &cli.command {
            Command::Log(a) => !a.json,
            Command::Show(a) => !a.json,
            Command::Diff(a) => !a.json,
            _ => false,
        };
        if let Some(cmd) = pager::command().filter(|_| pages && tty && !cli.no_pager) {
            pager::want(cmd);
        }
    }
    let result = match cli.command {
        Command::Init => plumbing::init(&ctx),
        Command::HashObject(args) => plumbing::hash_object(&ctx, args),
        Command::CatObject(args) => plumbing::cat_object(&ctx, args),
        Command::Repack(args) => plumbing::repack(&ctx, args),
        Command::Commit(args) => conversations::commit(&ctx, args),
        Command::Fork(args) => conversations::fork(&ctx, args),
        Command::Archive(args) => conversations::archive(&ctx, args),
        Command::Unarchive(args) => conversations::unarchive(&ctx, args),
        Command::Rm(args) => conversations::rm(&ctx, args),
        Command::Ls(args) => conversations::ls(&ctx, args),
        Command::Prune(args) => conversations::prune(&ctx, args),
        Command::Reflog(args) => refs::reflog(&ctx, args),
        Command::Reindex(args) => refs::reindex(&ctx, args),
        Command::Gc(args) => maintenance::gc(&ctx, args),
        Command::Fsck(args) => maintenance::fsck(&ctx, args),
        Command::Completions { shell } => {
            complete::registration(shell).and_then(|s| output::print(&s))
        }
        Command::Checkout(args) => checkout::checkout(&ctx, args),
        Command::Resume(args) => checkout::resume(&ctx, args),
        Command::Compact(args) => compact::compact(&ctx, args),
        Command::Replay(args) => replay::replay(&ctx, args),
        Command::UpdateRef(args) => refs::update_ref(&ctx, args),
        Command::ForEachRef(args) => refs::for_each_ref(&ctx, args),
        Command::Log(args) => history::log(&ctx, args),
        Command::MergeBase(args) => history::merge_base(&ctx, args),
        Command::RevParse(args) => history::rev_parse(&ctx, args),
        Command::Graph(args) => history::graph(&ctx, args),
        Command::Show(args) => history::show(&ctx, args),
        Command::Diff(args) => history::diff(&ctx, args),
        Command::Import(args) => import::import(&ctx, args),
        Command::Export(args) => import::export(&ctx, args),
        Command::Hook(args) => hook::hook(&ctx, args),
        Command::Bundle(args) => remote::bundle(&ctx, args),
        Command::Clone(args) => remote::clone(&ctx, args),
        Command::Push(args) => remote::push(&ctx, args),
        Command::Pull(args) => remote::pull(&ctx, args),
        Command::Redact(args) => purge::redact(&ctx, args),
        Command::Merge(args) => porcelain::merge(&ctx, args),
        Command::Tag(args) => porcelain::tag(&ctx, args),
        Command::Rename(args) => porcelain::rename(&ctx, args),
        Command::Reset(args) => porcelain::reset(&ctx, args),
        Command::Grep(args) => search::grep(&ctx, args),
        Command::Stats(args) => search::stats(&ctx, args),
    };
    pager::finish();
    if pager::interrupted() {
        // Ctrl-C while paging: the pager is gone now; exit as killed by it.
        return ExitCode::from(130);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report(e),
    }
}

/// Whether the command line runs `hook` (its first word that is no flag or
/// flag value), read without clap, for when clap refused it.
fn hook_invocation() -> bool {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--store" | "--wait" | "--color" => {
                args.next();
            }
            a if a.starts_with('-') => {}
            a => return a == "hook",
        }
    }
    false
}

/// The library's error in the words of this command line: where a flag or
/// another command is the way out, the message says so (the library never
/// names a flag).
pub(crate) fn message(e: &Error) -> String {
    match e {
        Error::NoHead | Error::HeadDetached { .. } => {
            format!("{e}: give a conversation, or start one with --new")
        }
        Error::BadPruneTime { text } => format!(
            "--prune takes now, a date (2025-11-01), an RFC 3339 time or N.days.ago \
             (also minutes, hours, weeks), not '{text}'"
        ),
        Error::UnreadableReachable { .. } => format!("{e}; run sessctl fsck"),
        Error::CorruptOperation { .. } => format!("{e}; run sessctl fsck"),
        Error::Index(_) => format!("{e}; run sessctl reindex"),
        // The library names its option; a command line has the flag.
        Error::Locked { .. } => e.to_string().replace(
            "(give it longer with OpenOptions::wait)",
            "(give it longer with --wait)",
        ),
        _ => e.to_string(),
    }
}

fn report(e: CommandError) -> ExitCode {
    let (e, not_a_no) = match e {
        CommandError::NotANo(inner) => (*inner, true),
        e => (e, false),
    };
    let (msg, code) = match e {
        CommandError::Store(Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            return ExitCode::SUCCESS
        }
        CommandError::Store(e) => {
            let code = if e.is_corruption() {
                3
            } else if matches!(e, Error::Locked { .. }) {
                4
            } else if matches!(e, Error::BadId(_) | Error::BadName(_) | Error::BadRev(_)) {
                // A malformed id or name on the command line.
                2
            } else {
                1
            };
            (message(&e), code)
        }
        CommandError::Usage(m) => (m, 2),
        CommandError::Failed(m) => (m, 1),
        CommandError::Silent(code) => return ExitCode::from(code),
        CommandError::NoStore => (no_store_message(), 1),
        CommandError::NotANo(inner) => return report(*inner),
    };
    let code = if not_a_no && code == 1 { 2 } else { code };
    eprintln!("sessctl: {msg}");
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report
    use super::*;

    #[test]
    fn discovery_passes_over_a_store_another_user_owns() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join(STORE_DIR);
        std::fs::create_dir_all(&store).unwrap();
        std::fs::write(store.join("FORMAT"), "1\n").unwrap();
        let deep = dir.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        let me = effective_uid();
        assert_eq!(discover_store_as(&deep, me, false), Some(store.clone()));
        assert_eq!(discover_store_as(&deep, me.wrapping_add(1), false), None);
        assert!(owned_here(Some(7), 7));
        assert!(!owned_here(Some(7), 8));
        assert!(!owned_here(None, 7));
    }
}
