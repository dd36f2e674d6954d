//! `hook`: capture agents as they run. Claude Code's hooks send a JSON
//! object on stdin naming the transcript; Codex's `notify` program gets a
//! JSON object as its last argument naming the thread. Either way the
//! transcript's new lines are imported (the import is idempotent: what the
//! store holds is written again as nothing).
//!
//! This file also owns what `import --watch` shares with the hooks: the
//! **unit** of files one source conversation lives in (a Claude Code session
//! and its subagents' files), and **catching up** a unit: import its
//! complete lines, skipping the work when a cursor says nothing changed.
//! The watcher keeps a [`Memo`] per unit, with which a catch-up reads,
//! parses and writes only the lines its files gained since the last one
//! (O(new lines); see `sessctl_store::import::tail` for when it reads them
//! whole instead). A hook, a new process each time, reads its unit whole.
//!
//! Cursors live in `<store>/capture/` (a remote store's in this machine's
//! cache directory, see [`Cursors::of_store`]), one small JSON file per
//! unit: the length, inode and mtime of each file at its last import, and a
//! digest of the refs that import left for the unit's conversation. They
//! are derived: deleting them costs one full re-read; a cursor is trusted
//! only when the files and those refs are exactly as it recorded, never
//! over the store (another process, or another machine sharing a remote
//! store, that moves the refs makes the next catch-up read the files).
//!
//! A hook must never break the agent. Claude Code treats exit 2 from a hook
//! as "blocking": for `Stop` it feeds stderr back to the model and keeps it
//! working. So every failure here, bad stdin included, is one line on
//! stderr and exit 1, which Claude Code shows the user and otherwise
//! ignores; never 2.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use sessctl_store::import::tail::{import_more, import_resumable, Resume};
use sessctl_store::import::SourceFile;
use sessctl_store::import::{import_sources, sanitize_name, Format, ImportOptions, ImportReport};
use sessctl_store::{Error, Store};

use crate::output::print;
use crate::{message, CmdResult, CommandError, Ctx};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Agent {
    /// A Claude Code hook: the hook's JSON on stdin.
    #[value(name = "claude-code")]
    ClaudeCode,
    /// Codex's `notify` program: the JSON as the last argument.
    Codex,
}

#[derive(Debug, Args)]
pub struct HookArgs {
    /// Which agent calls: claude-code (hook JSON on stdin: transcript_path,
    /// session_id, cwd, hook_event_name) or codex (notify JSON as the last
    /// argument: thread-id, cwd, ...).
    #[arg(value_enum)]
    agent: Agent,
    /// The payload, for codex (Codex appends it to the notify command).
    #[arg(value_name = "JSON")]
    payload: Option<String>,
    /// Where Codex keeps its rollouts (default: $CODEX_HOME, or ~/.codex).
    #[arg(long, value_name = "DIR")]
    codex_home: Option<PathBuf>,
    /// Do not sync (by default each capture is durable when the hook returns).
    #[arg(long)]
    no_sync: bool,
}

/// Runs a hook. Every error is exit 1 (see the module's note on exit 2).
pub fn hook(ctx: &Ctx, args: HookArgs) -> CmdResult {
    run(ctx, args).map_err(as_exit_1)
}

fn as_exit_1(e: CommandError) -> CommandError {
    match e {
        CommandError::Store(e) => CommandError::Failed(format!("hook: {}", message(&e))),
        CommandError::Usage(m) | CommandError::Failed(m) => {
            CommandError::Failed(format!("hook: {m}"))
        }
        CommandError::NoStore => {
            CommandError::Failed(format!("hook: {}", crate::no_store_message()))
        }
        CommandError::Silent(_) => CommandError::Silent(1),
        CommandError::NotANo(inner) => as_exit_1(*inner),
    }
}

fn run(ctx: &Ctx, args: HookArgs) -> CmdResult {
    let finished;
    let unit = match args.agent {
        Agent::ClaudeCode => {
            if args.payload.is_some() {
                return Err(CommandError::Failed(
                    "claude-code sends its JSON on stdin, not as an argument".into(),
                ));
            }
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CommandError::Failed(format!("reading stdin: {e}")))?;
            let payload = payload_object(&text, "stdin")?;
            let path = field(&payload, &["transcript_path"]).ok_or_else(|| {
                CommandError::Failed(
                    "stdin has no \"transcript_path\": not a Claude Code hook's JSON".into(),
                )
            })?;
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(CommandError::Failed(format!(
                    "{}: no such transcript",
                    path.display()
                )));
            }
            // Stop and SessionEnd fire once the main turn (or the session)
            // has ended, so its last answer is imported even when nothing in
            // the file marks the end (Claude Code often writes no
            // stop_reason). But Claude Code may fire Stop before the answer
            // is flushed: the turn is taken as ended only when the file's
            // last answer is the one the payload names. SubagentStop says
            // nothing of the main turn, which may still be running.
            finished = match field(&payload, &["hook_event_name"]) {
                Some("Stop" | "SessionEnd") => payload
                    .get("last_assistant_message")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                _ => None,
            };
            claude_unit(
                &path,
                field(&payload, &["session_id"]),
                &mut SessionIds::default(),
            )
        }
        Agent::Codex => {
            let text = args.payload.ok_or_else(|| {
                CommandError::Failed(
                    "codex passes its JSON as the last argument; none given".into(),
                )
            })?;
            let payload = payload_object(&text, "the argument")?;
            let path = codex_rollout(&payload, args.codex_home.as_deref())?;
            // Codex notifies after a turn has completed, and its rollout
            // marks that end itself (`task_complete`) once flushed: nothing
            // to force.
            finished = None;
            Unit::single(Format::Codex, path)
        }
    };
    // Before the store is opened: a remote store's cursors need a usable
    // cache directory, and without one nothing is written.
    let cursors = Cursors::of_store(ctx)?;
    let store = ctx.open_store()?;
    let outcome = catch_up(
        &store,
        &cursors,
        &unit,
        args.no_sync,
        finished.as_deref(),
        None,
    )?;
    report(&unit, outcome.as_ref())
}

/// Prints what a catch-up did (nothing when there was nothing new); the
/// lines it could not read go to stderr and make the exit 1.
pub fn report(unit: &Unit, outcome: Option<&ImportReport>) -> CmdResult {
    let Some(r) = outcome else {
        return Ok(());
    };
    if r.sessions_written > 0 || r.refs_moved > 0 {
        print(&format!(
            "{}: {} new sessions, {} messages, {} refs moved\n",
            unit.primary.display(),
            r.sessions_written,
            r.messages,
            r.refs_moved
        ))?;
    }
    for s in &r.skipped {
        eprintln!("sessctl: {}:{}: {}", s.file.display(), s.line, s.reason);
    }
    if r.skipped.is_empty() {
        Ok(())
    } else {
        Err(CommandError::Silent(1))
    }
}

fn payload_object(text: &str, from: &str) -> CmdResult<Value> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err(CommandError::Failed(format!("{from} is not a JSON object"))),
        Err(e) => Err(CommandError::Failed(format!(
            "{from} is not valid JSON ({e})"
        ))),
    }
}

/// The first of `names` that `v` has as a non-empty string.
fn field<'a>(v: &'a Value, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| v.get(*n).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
}

/// The files one source conversation lives in, imported together (Claude
/// Code lines name parents across a session's files; importing one of them
/// alone would take its lines for roots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub format: Format,
    /// The main file: the unit's name and its cursor's key.
    pub primary: PathBuf,
    /// All its files, the primary first.
    pub files: Vec<PathBuf>,
    /// The store's name for its conversation, when known (for the cursor's
    /// check of the store).
    pub conversation: Option<String>,
}

impl Unit {
    /// A unit of one file (Codex, OpenAI, SWE-agent).
    pub fn single(format: Format, path: PathBuf) -> Unit {
        let conversation = match format {
            Format::Codex => first_lines(&path, 1)
                .into_iter()
                .find(|v| v.get("type").and_then(Value::as_str) == Some("session_meta"))
                .and_then(|v| field(&v["payload"], &["id"]).map(str::to_owned))
                .map(|id| conversation_name("codex", &id)),
            _ => None,
        };
        Unit {
            format,
            primary: path.clone(),
            files: vec![path],
            conversation,
        }
    }
}

fn conversation_name(prefix: &str, source_id: &str) -> String {
    let short: String = source_id.chars().take(12).collect();
    format!("{prefix}-{}", sanitize_name(&short, 12))
}

/// The first `n` JSON lines of a file (fewer when it is shorter or a line
/// does not parse).
fn first_lines(path: &Path, n: usize) -> Vec<Value> {
    use std::io::BufRead;
    let Ok(f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    std::io::BufReader::new(f)
        .lines()
        .take(n)
        .map_while(|l| l.ok().and_then(|l| serde_json::from_str(&l).ok()))
        .collect()
}

/// The sessionId a Claude Code file's lines carry (the first that has one,
/// among its first lines).
fn claude_session_id(path: &Path) -> Option<String> {
    first_lines(path, 20)
        .iter()
        .find_map(|v| field(v, &["sessionId"]).map(str::to_owned))
}

/// The sessionIds of Claude Code files read so far: a file's never changes
/// once it has one, and a watcher over a folder of many older-layout
/// `agent-*.jsonl` files would otherwise read them all for every unit.
#[derive(Debug, Default)]
pub struct SessionIds(HashMap<PathBuf, String>);

impl SessionIds {
    fn of(&mut self, path: &Path) -> Option<String> {
        if let Some(s) = self.0.get(path) {
            return Some(s.clone());
        }
        let s = claude_session_id(path)?;
        self.0.insert(path.to_path_buf(), s.clone());
        Some(s)
    }
}

/// How far above a file its session's folder can be
/// (`<session>/subagents/agent-*.jsonl`, and one more for what may come).
const SESSION_FOLDER_DEPTH: usize = 3;

/// The unit a Claude Code file belongs to: its session's main file
/// (`<dir>/<session>.jsonl`), the subagents under `<dir>/<session>/`, and
/// older versions' `agent-*.jsonl` beside it with the same sessionId.
pub fn claude_unit(path: &Path, session_id: Option<&str>, ids: &mut SessionIds) -> Unit {
    // A file under <dir>/<session>/... belongs to <dir>/<session>.jsonl.
    let mut primary = path.to_path_buf();
    for dir in path.ancestors().skip(1).take(SESSION_FOLDER_DEPTH) {
        let main = dir.with_extension("jsonl");
        if dir.file_name().is_some() && main.is_file() {
            primary = main;
            break;
        }
    }
    let dir = primary.parent().unwrap_or(Path::new(".")).to_path_buf();
    let name = primary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut session = session_id.map(str::to_owned);
    if primary == path && name.starts_with("agent-") {
        // An older version's subagent file: its session's main file.
        if let Some(sid) = ids.of(path) {
            let main = dir.join(format!("{sid}.jsonl"));
            if main.is_file() {
                primary = main;
            }
            session = Some(sid);
        }
    }
    let session = session.or_else(|| ids.of(&primary));
    let mut files = vec![primary.clone()];
    let sub = primary.with_extension("");
    if sub.is_dir() {
        let mut found = Vec::new();
        walk_jsonl(&sub, &mut found);
        found.sort();
        files.extend(found);
    }
    if let (Some(sid), Ok(rd)) = (&session, std::fs::read_dir(&dir)) {
        let mut agents: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p != &primary
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("agent-") && n.ends_with(".jsonl"))
                    && ids.of(p).as_deref() == Some(sid.as_str())
            })
            .collect();
        agents.sort();
        files.extend(agents);
    }
    Unit {
        format: Format::ClaudeCode,
        primary,
        files,
        conversation: session.map(|s| conversation_name("cc", &s)),
    }
}

fn walk_jsonl(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk_jsonl(&p, out);
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            out.push(p);
        }
    }
}

/// The rollout file of the thread a Codex notify payload names: its own
/// path when the payload has one, else the newest
/// `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*-<thread id>.jsonl`.
fn codex_rollout(payload: &Value, codex_home: Option<&Path>) -> CmdResult<PathBuf> {
    if let Some(p) = field(
        payload,
        &["rollout_path", "rollout-path", "transcript_path"],
    ) {
        return Ok(PathBuf::from(p));
    }
    let id = field(
        payload,
        &[
            "thread-id",
            "thread_id",
            "session_id",
            "session-id",
            "conversation_id",
        ],
    )
    .ok_or_else(|| {
        CommandError::Failed(
            "the JSON names no thread (\"thread-id\"): not a Codex notify payload".into(),
        )
    })?;
    let home = match codex_home {
        Some(h) => h.to_path_buf(),
        None => codex_home_dir()?,
    };
    let sessions = home.join("sessions");
    let suffix = format!("-{id}.jsonl");
    let mut found = Vec::new();
    find_rollouts(&sessions, &suffix, &mut found);
    found.sort();
    found.pop().ok_or_else(|| {
        CommandError::Failed(format!(
            "no rollout of thread {id} under {}",
            sessions.display()
        ))
    })
}

/// `$CODEX_HOME`, or `~/.codex`.
pub fn codex_home_dir() -> CmdResult<PathBuf> {
    if let Some(h) = std::env::var_os("CODEX_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    Ok(home_dir()?.join(".codex"))
}

pub fn home_dir() -> CmdResult<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| CommandError::Failed("$HOME is not set".into()))
}

fn find_rollouts(dir: &Path, suffix: &str, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            find_rollouts(&p, suffix, out);
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(suffix))
        {
            out.push(p);
        }
    }
}

/// The cursors of one store: `<store>/capture/` for a store directory; for
/// a remote store, `capture/<store>/` in this machine's cache directory
/// (objects-format.md, "Remote store").
#[derive(Debug)]
pub struct Cursors {
    dir: PathBuf,
    /// Whether a lock file that cannot be taken is an error rather than a
    /// catch-up without taking turns (see [`Cursors::lock`]).
    strict: bool,
}

impl Cursors {
    pub fn new(store: &Path) -> Cursors {
        Cursors {
            dir: store.join("capture"),
            strict: false,
        }
    }

    /// The cursors of the store `ctx` names. A remote store keeps them in
    /// this machine's cache directory (the pack cache's:
    /// [`S3Settings::from_env`](sessctl_store::odb::S3Settings::from_env)),
    /// in a subdirectory named by a hash of the store's identity
    /// (`store_identity`: its servers, database, bucket and prefix, never
    /// the password): the files a cursor describes are this machine's, and
    /// a cursor is a cache. That directory must be usable, checked here
    /// before anything is written: it holds the lock files with which this
    /// machine's captures of one session take turns, and a remote store has
    /// no directory of its own to fall back on.
    pub fn of_store(ctx: &Ctx) -> CmdResult<Cursors> {
        match ctx.remote_url() {
            None => Ok(Cursors::new(&ctx.store)),
            Some(url) => Cursors::in_cache(url),
        }
    }

    #[cfg(feature = "remote")]
    fn in_cache(url: &str) -> CmdResult<Cursors> {
        use std::os::unix::fs::DirBuilderExt;
        let name = cache_name(url)?;
        let base = sessctl_store::odb::S3Settings::from_env()
            .cache_dir
            .ok_or_else(|| {
                CommandError::Failed(
                    "a remote store's capture cursors live in this machine's cache directory, \
                     and there is none: set SESSCTL_CACHE_DIR (or XDG_CACHE_HOME, or HOME)"
                        .into(),
                )
            })?;
        let dir = base.join("capture").join(name);
        let unusable = |e: std::io::Error| {
            CommandError::Failed(format!(
                "cannot keep capture cursors in {} ({e}); a remote store's live in this \
                 machine's cache directory: set SESSCTL_CACHE_DIR to one this user may write",
                dir.display()
            ))
        };
        // Only this user reads what its transcripts are called.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(unusable)?;
        // A directory that exists may still refuse new files (its mode, a
        // read-only mount): found now, not after the import.
        let probe = dir.join(format!(".probe-{}", std::process::id()));
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&probe)
            .map_err(unusable)?;
        let _ = std::fs::remove_file(&probe);
        Ok(Cursors { dir, strict: true })
    }

    #[cfg(not(feature = "remote"))]
    fn in_cache(_url: &str) -> CmdResult<Cursors> {
        Err(crate::no_remote())
    }

    /// The unit's cursor: named by its main file's canonical path, so that
    /// a hook and a watcher given the path differently share it.
    fn path(&self, unit: &Unit) -> PathBuf {
        let canonical =
            std::fs::canonicalize(&unit.primary).unwrap_or_else(|_| unit.primary.clone());
        let key = blake3::hash(canonical.as_os_str().as_encoded_bytes()).to_hex();
        self.dir.join(format!("{}.json", &key.as_str()[..32]))
    }

    /// Waits for this unit's turn: an exclusive `flock` on
    /// `<key>.lock` beside its cursor, released when the file is dropped
    /// (or the process dies). Without it (a read-only store directory)
    /// catch-ups on a local store still work, only without taking turns;
    /// on a remote store it is an error, before anything is written.
    fn lock(&self, unit: &Unit) -> CmdResult<Option<std::fs::File>> {
        let path = self.path(unit).with_extension("lock");
        let taken = std::fs::create_dir_all(&self.dir)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
            })
            .and_then(|f| f.lock().map(|()| f));
        match taken {
            Ok(f) => Ok(Some(f)),
            Err(e) if self.strict => Err(CommandError::Failed(format!(
                "cannot lock {}: {e}",
                path.display()
            ))),
            Err(_) => Ok(None),
        }
    }

    /// What the cursor recorded, or nothing when it is absent or unreadable
    /// (it is only a shortcut).
    fn get(&self, unit: &Unit) -> Option<Value> {
        let text = std::fs::read(self.path(unit)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Replaces the cursor whole (a temporary file renamed over it), so a
    /// reader sees the old one or the new one. A cursor that cannot be
    /// written is no error: the next catch-up reads the files again.
    fn put(&self, unit: &Unit, value: &Value) {
        let _ = std::fs::create_dir_all(&self.dir);
        let path = self.path(unit);
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
        if std::fs::write(&tmp, value.to_string()).is_ok() && std::fs::rename(&tmp, &path).is_err()
        {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// The name of a remote store's directory in a machine's cache: 32 hex
/// digits of the hash of its identity, so that URLs that differ only in the
/// password, the user or connection parameters name one directory.
#[cfg(feature = "remote")]
fn cache_name(url: &str) -> CmdResult<String> {
    let identity = sessctl_store::odb::remote::store_identity(url)?;
    Ok(blake3::hash(identity.as_bytes()).to_hex()[..32].to_owned())
}

/// Each file's length, inode and mtime: what a cursor compares.
fn file_states(unit: &Unit) -> CmdResult<Value> {
    let mut out = Vec::new();
    for f in &unit.files {
        let m = std::fs::metadata(f)
            .map_err(|e| CommandError::Failed(format!("{}: {e}", f.display())))?;
        out.push(json!([
            f.display().to_string(),
            m.len(),
            m.dev(),
            m.ino(),
            m.mtime(),
            m.mtime_nsec()
        ]));
    }
    Ok(Value::Array(out))
}

/// A digest of the refs of the unit's conversation (its forks' and
/// subagents' too), as the store holds them now.
fn refs_digest(store: &Store, unit: &Unit) -> CmdResult<Option<String>> {
    let Some(name) = &unit.conversation else {
        return Ok(None);
    };
    let mut h = blake3::Hasher::new();
    for ns in ["refs/heads/", "refs/tags/", "refs/archive/"] {
        for (r, t) in store.refs_with_prefix(&format!("{ns}{name}"))? {
            h.update(format!("{r:?}\0{t:?}\n").as_bytes());
        }
    }
    Ok(Some(h.finalize().to_hex().to_string()))
}

/// Imports the unit's complete lines, unless its cursor shows that neither
/// its files nor its refs moved since the last catch-up (`None` then). A
/// half-written last line is left for the next catch-up; a file gone since
/// the unit was made is left out.
///
/// Catch-ups of one unit take turns (a lock file beside its cursor, held
/// while reading and importing): files only grow, so each import reads at
/// least what the one before it did, and none moves the conversation back
/// to a shorter snapshot read before the other landed. A lost race with any
/// other writer of the same refs is retried on a fresh read of the files:
/// the import is idempotent, so the retry writes what the winner did not.
/// With `finished`, the agent says it ended its turn with that answer: when
/// the primary file's last answer is it, a last turn nothing in the file
/// marks as ended is imported too (`ImportOptions::finished`); otherwise
/// (the answer not flushed yet) it is held back as usual. Never does a
/// catch-up move a conversation to a line that does not descend from it.
///
/// With `memo` (a watcher's memory of the unit), a catch-up goes on from
/// where the last one left when the files only grew and the refs are as it
/// left them: it reads, parses and writes only the new lines (see
/// `sessctl_store::import::tail`), and reads the files whole otherwise. A
/// hook, a new process each time, reads them whole.
pub fn catch_up(
    store: &Store,
    cursors: &Cursors,
    unit: &Unit,
    no_sync: bool,
    finished: Option<&str>,
    mut memo: Option<&mut Memo>,
) -> CmdResult<Option<ImportReport>> {
    let unit = &Unit {
        files: unit.files.iter().filter(|f| f.is_file()).cloned().collect(),
        ..unit.clone()
    };
    if !unit.files.contains(&unit.primary) {
        return Ok(None);
    }
    let _turn = cursors.lock(unit)?;
    let mut attempt = 0;
    loop {
        let states = file_states(unit)?;
        if let Some(c) = cursors.get(unit) {
            // A catch-up that held turns back did not import everything:
            // asked to finish, its cursor says nothing.
            let held_back = c.get("held_back").and_then(Value::as_u64).unwrap_or(0);
            if c.get("files") == Some(&states)
                && c.get("refs") == Some(&json!(refs_digest(store, unit)?))
                && (finished.is_none() || held_back == 0)
            {
                return Ok(None);
            }
        }
        if let (Some(m), None) = (memo.as_deref_mut(), finished) {
            if let Some(report) = go_on(store, unit, m, no_sync)? {
                put_cursor(store, cursors, unit, states, &report)?;
                return Ok(Some(report));
            }
        }
        let (sources, base, ends) = read_complete_lines(unit)?;
        let opts = ImportOptions {
            no_sync,
            progress: None,
            finished: finished.is_some_and(|answer| {
                unit.format == Format::ClaudeCode
                    && sources
                        .first()
                        .and_then(|s| last_answer(&s.text))
                        .as_deref()
                        == Some(answer.trim())
            }),
        };
        let result = match (memo.as_deref_mut(), &ends) {
            (Some(m), Some(ends)) => import_resumable(store, unit.format, &sources, &opts, base)
                .map(|(r, resume)| {
                    m.0 = resume.map(|resume| Left {
                        resume,
                        ends: ends.clone(),
                        refs: None,
                    });
                    r
                }),
            _ => import_sources(store, unit.format, &sources, &opts, base),
        };
        let report = match result {
            Err(Error::RefOutOfDate { .. }) if attempt < 50 => {
                attempt += 1;
                continue;
            }
            r => r?,
        };
        if let Some(Memo(Some(left))) = memo.as_deref_mut() {
            left.refs = refs_digest(store, unit)?;
        }
        put_cursor(store, cursors, unit, states, &report)?;
        return Ok(Some(report));
    }
}

/// Records what a catch-up left (the files' states, the refs' digest, the
/// turns held back) as the unit's cursor, unless it skipped lines: those
/// are read again next time.
fn put_cursor(
    store: &Store,
    cursors: &Cursors,
    unit: &Unit,
    states: Value,
    report: &ImportReport,
) -> CmdResult<()> {
    let mut record = BTreeMap::new();
    record.insert("files", states);
    record.insert("refs", json!(refs_digest(store, unit)?));
    record.insert("held_back", json!(report.held_back));
    if report.skipped.is_empty() {
        cursors.put(unit, &json!(record));
    }
    Ok(())
}

/// The text of the last assistant message of a Claude Code transcript (its
/// text blocks, which Claude Code may write one line each, joined), trimmed;
/// `None` when the last assistant line has no text (a tool call: the turn
/// goes on).
fn last_answer(text: &str) -> Option<String> {
    let mut id: Option<Value> = None;
    let mut parts: Vec<String> = Vec::new();
    for line in text.lines().rev() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v.get("type").and_then(Value::as_str) != Some("assistant") {
            if id.is_some() {
                break;
            }
            continue;
        }
        let message = v.get("message")?;
        let this = message.get("id").cloned().unwrap_or(Value::Null);
        match &id {
            None => id = Some(this),
            Some(first) if *first != this || this.is_null() => break,
            Some(_) => {}
        }
        let mut texts: Vec<String> = match message.get("content") {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|b| b.get("text").and_then(Value::as_str).map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        if parts.is_empty() && texts.is_empty() {
            // The last assistant line is no answer (a tool call).
            return None;
        }
        texts.append(&mut parts);
        parts = texts;
    }
    (!parts.is_empty()).then(|| parts.join("\n\n").trim().to_owned())
}

/// What a watcher remembers of a unit between catch-ups: where the last
/// one left its files, when it can be gone on from.
#[derive(Debug, Default)]
pub struct Memo(Option<Left>);

#[derive(Debug)]
struct Left {
    resume: Resume,
    /// Per file: its device and inode, the length read (its complete
    /// lines), and the last bytes of that (a file rewritten in place reads
    /// otherwise there).
    ends: Vec<End>,
    /// The unit's refs as that catch-up left them.
    refs: Option<String>,
}

#[derive(Debug, Clone)]
struct End {
    dev: u64,
    ino: u64,
    len: u64,
    last: Vec<u8>,
}

/// How many bytes before where a catch-up left a file the next checks.
const CHECKED: u64 = 256;

impl End {
    fn new(meta: &std::fs::Metadata, complete: &[u8], before: u64) -> End {
        let tail = complete.len().saturating_sub(CHECKED as usize);
        End {
            dev: meta.dev(),
            ino: meta.ino(),
            len: before + complete.len() as u64,
            last: complete[tail..].to_vec(),
        }
    }
}

/// Catches up from where the memo says the last catch-up left, reading
/// only what the files gained; `None` (the memo then forgotten) when the
/// files must be read whole: one shrank or was replaced, the unit's files
/// changed, someone else moved its refs, or the new lines need it.
fn go_on(
    store: &Store,
    unit: &Unit,
    memo: &mut Memo,
    no_sync: bool,
) -> CmdResult<Option<ImportReport>> {
    use std::io::{Read, Seek, SeekFrom};
    let Some(left) = memo.0.take() else {
        return Ok(None);
    };
    if unit.conversation.is_none()
        || left.refs.is_none()
        || !left
            .resume
            .files()
            .eq(unit.files.iter().map(PathBuf::as_path))
        || refs_digest(store, unit)? != left.refs
    {
        return Ok(None);
    }
    let mut texts = Vec::with_capacity(unit.files.len());
    let mut ends = Vec::with_capacity(unit.files.len());
    let mut base = ImportReport::default();
    for (f, end) in unit.files.iter().zip(&left.ends) {
        let Ok(mut file) = std::fs::File::open(f) else {
            return Ok(None);
        };
        let Ok(m) = file.metadata() else {
            return Ok(None);
        };
        if m.dev() != end.dev || m.ino() != end.ino || m.len() < end.len {
            return Ok(None);
        }
        // The bytes before the new ones must be the ones read last time.
        let from = end.len - end.last.len() as u64;
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(from)).is_err() || file.read_to_end(&mut bytes).is_err() {
            return Ok(None);
        }
        if !bytes.starts_with(&end.last) {
            return Ok(None);
        }
        let mut bytes = bytes.split_off(end.last.len());
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(complete);
        let next = if complete == 0 {
            end.clone()
        } else {
            End::new(&m, &bytes, end.len)
        };
        let Ok(text) = String::from_utf8(bytes) else {
            return Ok(None);
        };
        base.files += 1;
        base.bytes_read += complete as u64;
        ends.push(next);
        texts.push(text);
    }
    let opts = ImportOptions {
        no_sync,
        ..ImportOptions::default()
    };
    let more: Vec<&str> = texts.iter().map(String::as_str).collect();
    match import_more(store, left.resume, &more, &opts, base) {
        Ok(Some((report, next))) => {
            memo.0 = next.map(|resume| Left {
                resume,
                ends,
                refs: None,
            });
            if let Some(l) = &mut memo.0 {
                l.refs = refs_digest(store, unit)?;
            }
            Ok(Some(report))
        }
        // Another writer won a ref: read whole, which retries.
        Ok(None) | Err(Error::RefOutOfDate { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The unit's files up to their last newline, and, when every one is
/// valid UTF-8, each one's device, inode and length read (what a catch-up
/// going on from this one checks and reads after).
#[allow(clippy::type_complexity)]
fn read_complete_lines(
    unit: &Unit,
) -> CmdResult<(Vec<SourceFile>, ImportReport, Option<Vec<End>>)> {
    let mut sources = Vec::with_capacity(unit.files.len());
    let mut base = ImportReport::default();
    let mut ends = Some(Vec::with_capacity(unit.files.len()));
    for f in &unit.files {
        let mut file = std::fs::File::open(f)
            .map_err(|e| CommandError::Failed(format!("{}: {e}", f.display())))?;
        let meta = file
            .metadata()
            .map_err(|e| CommandError::Failed(format!("{}: {e}", f.display())))?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes)
            .map_err(|e| CommandError::Failed(format!("{}: {e}", f.display())))?;
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        base.files += 1;
        base.bytes_read += complete as u64;
        bytes.truncate(complete);
        if let Some(ends) = &mut ends {
            ends.push(End::new(&meta, &bytes, 0));
        }
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                ends = None;
                String::from_utf8_lossy(e.as_bytes()).into_owned()
            }
        };
        sources.push(SourceFile {
            path: f.clone(),
            text,
        });
    }
    Ok((sources, base, ends))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report
    use super::*;
    use std::io::Write;

    fn data(sub: &str) -> Option<PathBuf> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/data")
            .join(sub);
        if p.exists() {
            Some(p)
        } else {
            eprintln!("note: {} is absent; skipping", p.display());
            None
        }
    }

    /// Refs and conversation records, as text.
    fn state(store: &Store) -> (Vec<String>, Vec<String>) {
        let mut refs: Vec<String> = store
            .refs()
            .unwrap()
            .iter()
            .map(|(r, t)| format!("{r:?} {t:?}"))
            .collect();
        refs.sort();
        let mut convs: Vec<String> = store
            .conversations(None)
            .unwrap()
            .iter()
            .map(|c| format!("{} {:?} {:?}", c.name, c.head, c.record))
            .collect();
        convs.sort();
        (refs, convs)
    }

    fn append(path: &Path, lines: &[String]) {
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(lines.concat().as_bytes()).unwrap();
    }

    /// One remote store, one cache directory, however its URL is spelt;
    /// another database, bucket, prefix, host or port, another one.
    #[cfg(feature = "remote")]
    #[test]
    fn a_remote_store_has_one_cache_directory_whatever_its_url_says_besides() {
        let name = |url: &str| cache_name(url).unwrap();
        let base = name("postgres://agent@db:5432/sessions?objects=s3://bucket/team");
        for same in [
            "postgres://agent:hunter2@db:5432/sessions?objects=s3://bucket/team",
            "postgres://other:pw@db/sessions?sslmode=require&objects=s3://bucket/team/",
            "postgresql://agent@DB:5432/sessions?objects=s3://bucket/team&connect_timeout=3",
        ] {
            assert_eq!(name(same), base, "{same}");
        }
        for other in [
            "postgres://agent@db:5432/archive?objects=s3://bucket/team",
            "postgres://agent@db:5432/sessions?objects=s3://bucket2/team",
            "postgres://agent@db:5432/sessions?objects=s3://bucket/team2",
            "postgres://agent@db:5432/sessions?objects=s3://bucket",
            "postgres://agent@db2:5432/sessions?objects=s3://bucket/team",
            "postgres://agent@db:5433/sessions?objects=s3://bucket/team",
        ] {
            assert_ne!(name(other), base, "{other}");
        }
        assert!(base.len() == 32 && base.bytes().all(|b| b.is_ascii_hexdigit()));
        // A bad URL is the store's own error, its password left out.
        let e = cache_name("postgres://u:secret@h/db").unwrap_err();
        let CommandError::Store(e) = e else {
            panic!("{e:?}")
        };
        let m = crate::message(&e);
        assert!(
            m.contains("names no bucket") && !m.contains("secret"),
            "{m}"
        );
    }

    /// A watcher's catch-ups of a growing transcript read only the bytes
    /// and parse only the lines it gained; one shrunk in place, rewritten
    /// in place or replaced by another file is read whole again; and the
    /// store ends as the whole file imported at once leaves it.
    #[test]
    fn a_watcher_reads_only_what_a_file_gained_and_whole_a_file_shrunk_or_replaced() {
        let files = [
            (Format::ClaudeCode, "claude-code/session-3fe1b6bc.jsonl"),
            (
                Format::Codex,
                "codex/rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
            ),
        ];
        for (format, sub) in files {
            let Some(src) = data(sub) else { return };
            let text = std::fs::read_to_string(&src).unwrap();
            let lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
            let n = lines.len();
            let dir = tempfile::tempdir().unwrap();
            let store_dir = dir.path().join("s");
            let store = Store::init(&store_dir).unwrap();
            let cursors = Cursors::new(&store_dir);
            let file = dir.path().join(src.file_name().unwrap());
            std::fs::write(&file, lines[..n / 2].concat()).unwrap();
            let unit = match format {
                Format::ClaudeCode => claude_unit(&file, None, &mut SessionIds::default()),
                _ => Unit::single(format, file.clone()),
            };
            let mut memo = Memo::default();
            let catch = |memo: &mut Memo| {
                catch_up(&store, &cursors, &unit, true, None, Some(memo))
                    .unwrap()
                    .unwrap()
            };
            assert!(!catch(&mut memo).resumed, "{sub}: the first reads whole");
            // Grown a few lines at a time (half a line left for later).
            let mut at = n / 2;
            while at < n * 3 / 4 {
                let next = (at + 5).min(n);
                append(&file, &lines[at..next]);
                let half = &lines[next][..lines[next].len() / 2];
                append(&file, &[half.to_owned()]);
                let r = catch(&mut memo);
                assert!(r.resumed, "{sub}: lines {at}..{next} read whole");
                // The lines, and the one whose first half came last time.
                let first = if at == n / 2 { at } else { at - 1 };
                let gained: usize = lines[first..next].iter().map(String::len).sum();
                assert_eq!(r.bytes_read as usize, gained, "{sub}");
                assert_eq!(r.lines_parsed, next - first, "{sub}: lines {at}..{next}");
                // The rest of the half line comes with the next lines.
                let rest = &lines[next][lines[next].len() / 2..];
                append(&file, &[rest.to_owned()]);
                at = next + 1;
            }
            // Shrunk in place (same inode): read whole.
            std::fs::write(&file, lines[..at - 7].concat()).unwrap();
            assert!(!catch(&mut memo).resumed, "{sub}: shrunk");
            append(&file, &lines[at - 7..at]);
            assert!(catch(&mut memo).resumed, "{sub}: grown again");
            // Rewritten in place, as long and longer: read whole.
            let mut changed = lines[..at].concat().into_bytes();
            let k = changed.len() - 20;
            changed[k] = if changed[k] == b'a' { b'b' } else { b'a' };
            std::fs::write(&file, &changed).unwrap();
            append(&file, &lines[at..at + 2]);
            assert!(!catch(&mut memo).resumed, "{sub}: rewritten in place");
            // Replaced by another file (a new inode): read whole.
            let other = dir.path().join("other");
            std::fs::write(&other, lines[..at + 4].concat()).unwrap();
            std::fs::rename(&other, &file).unwrap();
            assert!(!catch(&mut memo).resumed, "{sub}: replaced");
            append(&file, &lines[at + 4..]);
            assert!(catch(&mut memo).resumed, "{sub}: the rest");
            // The store holds what the whole file imported at once makes.
            let whole_dir = dir.path().join("w");
            let whole = Store::init(&whole_dir).unwrap();
            let opts = ImportOptions {
                no_sync: true,
                ..ImportOptions::default()
            };
            let src_file = SourceFile {
                path: file.clone(),
                text: text.clone(),
            };
            import_sources(&whole, format, &[src_file], &opts, ImportReport::default()).unwrap();
            assert_eq!(state(&store), state(&whole), "{sub}");
        }
    }
}
