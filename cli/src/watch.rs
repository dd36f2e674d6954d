//! `import --watch`: follow files and directories as agents write them.
//!
//! It first catches up every unit of files under the paths (one source
//! conversation each, see `hook.rs`), then imports a unit again whenever
//! the kernel reports one of its files written, created or moved in
//! (inotify on Linux, through the `notify` crate). Catching up skips the
//! units whose cursors show nothing new, so a restart over a large
//! directory re-reads only what changed. A unit caught up once is then
//! caught up in O(new lines): the watcher remembers where the last
//! catch-up left its files (`hook::Memo`) and reads, parses and writes only
//! what follows; it reads the files whole again only when a file shrank or
//! was replaced, the unit gained a file, someone else moved its refs, or
//! the new lines change how earlier ones read (see
//! `sessctl_store::import::tail`). SIGINT and SIGTERM end it after the
//! import under way, with exit 0.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};
use sessctl_store::import::Format;

use crate::hook::{catch_up, claude_unit, report, Cursors, Memo, SessionIds, Unit};
use crate::{CmdResult, CommandError, Ctx};

/// How long to wait for more events after one arrives, so that a burst of
/// appends is read once.
const SETTLE: Duration = Duration::from_millis(50);

/// How often the loop looks at the stop flag while no event arrives.
const TICK: Duration = Duration::from_millis(200);

/// Whether a file found in a watched directory is one of `format`'s.
fn accepts(format: Format, path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with('.') {
        return false;
    }
    match format {
        Format::ClaudeCode | Format::Codex => name.ends_with(".jsonl"),
        Format::OpenAi => name.ends_with(".json") || name.ends_with(".jsonl"),
        Format::SweAgent => name.ends_with(".traj"),
    }
}

fn unit_of(format: Format, path: &Path, ids: &mut SessionIds) -> Unit {
    match format {
        Format::ClaudeCode => claude_unit(path, None, ids),
        _ => Unit::single(format, path.to_path_buf()),
    }
}

/// The units `files` belong to, each once.
fn units_of<'a>(
    format: Format,
    files: impl IntoIterator<Item = &'a PathBuf>,
    ids: &mut SessionIds,
) -> Vec<Unit> {
    let mut out = BTreeMap::new();
    let mut covered = HashSet::new();
    for f in files {
        if covered.contains(f) {
            continue;
        }
        let u = unit_of(format, f, ids);
        covered.extend(u.files.iter().cloned());
        out.entry(u.primary.clone()).or_insert(u);
    }
    out.into_values().collect()
}

fn walk(dir: &Path, format: Format, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, format, out);
        } else if accepts(format, &p) {
            out.push(p);
        }
    }
}

/// Watches `paths` until SIGINT or SIGTERM.
pub fn watch(ctx: &Ctx, format: Format, paths: &[PathBuf], no_sync: bool) -> CmdResult {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| CommandError::Failed(format!("cannot catch signals: {e}")))?;
    }
    // Before the store is opened: a remote store's cursors need a usable
    // cache directory, and without one nothing is written.
    let cursors = Cursors::of_store(ctx)?;
    let store = ctx.open_store()?;
    // Watch first, then catch up: a line written between the two is seen
    // by one or the other.
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let _ = tx.send(ev);
    })
    .map_err(|e| CommandError::Failed(format!("cannot watch: {e}")))?;
    let mut files = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p)
            .map_err(|e| CommandError::Failed(format!("{}: {e}", p.display())))?;
        let mode = if meta.is_dir() {
            walk(p, format, &mut files);
            RecursiveMode::Recursive
        } else {
            files.push(p.clone());
            RecursiveMode::NonRecursive
        };
        watcher
            .watch(p, mode)
            .map_err(|e| CommandError::Failed(format!("cannot watch {}: {e}", p.display())))?;
    }
    let named: BTreeSet<PathBuf> = paths.iter().filter(|p| p.is_file()).cloned().collect();
    let mut state = State::default();
    let mut ids = SessionIds::default();
    for u in units_of(format, &files, &mut ids) {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        state.run(&store, &cursors, u, no_sync);
    }
    while !stop.load(Ordering::Relaxed) {
        let first = match rx.recv_timeout(TICK) {
            Ok(ev) => ev,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                state.retry(&store, &cursors, no_sync);
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut changed = BTreeSet::new();
        let mut take = |ev: notify::Result<notify::Event>| match ev {
            Ok(ev) if !ev.kind.is_access() && !ev.kind.is_remove() => {
                let made = matches!(
                    ev.kind,
                    notify::EventKind::Create(_)
                        | notify::EventKind::Modify(notify::event::ModifyKind::Name(_))
                );
                for p in ev.paths {
                    if made && p.is_dir() {
                        // A directory made (or moved in) before its watch
                        // was added: what is already in it.
                        let mut found = Vec::new();
                        walk(&p, format, &mut found);
                        changed.extend(found);
                    } else if (named.contains(&p) || accepts(format, &p)) && p.is_file() {
                        changed.insert(p);
                    }
                }
            }
            Ok(_) => {}
            Err(e) => eprintln!("sessctl: watch: {e}"),
        };
        take(first);
        while let Ok(ev) = rx.recv_timeout(SETTLE) {
            take(ev);
        }
        for u in units_of(format, &changed, &mut ids) {
            state.run(&store, &cursors, u, no_sync);
        }
        state.retry(&store, &cursors, no_sync);
    }
    drop(watcher);
    if state.lines_skipped || !state.failing.is_empty() {
        Err(CommandError::Silent(1))
    } else {
        Ok(())
    }
}

/// How long a unit whose import failed (the store's lock busy past
/// `--wait`, a file unreadable for a moment) waits before it is tried
/// again, events or not; each failure in a row doubles it, up to
/// [`RETRY_MAX`].
const RETRY: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What the watch loop remembers between events.
#[derive(Debug, Default)]
struct State {
    /// Units to catch up at a time of their own, events or not: failed
    /// ones, and ones written again before they may be read again.
    due: BTreeMap<PathBuf, (Unit, Instant)>,
    /// Units whose last catch-up failed, with the wait after their next
    /// failure.
    failing: HashMap<PathBuf, Duration>,
    /// When each unit may be read again after a catch-up that read it
    /// whole, so that one an agent writes without pause while it cannot be
    /// gone on from is read at most half the time (the pause is as long as
    /// that catch-up took). A catch-up of the new lines only sets none.
    not_before: HashMap<PathBuf, Instant>,
    /// Where the last catch-up of each unit left its files.
    memos: HashMap<PathBuf, Memo>,
    /// Whether some catch-up skipped lines it could not read (as `import`,
    /// the exit is then 1).
    lines_skipped: bool,
}

impl State {
    fn run(&mut self, store: &sessctl_store::Store, cursors: &Cursors, unit: Unit, no_sync: bool) {
        let key = unit.primary.clone();
        let start = Instant::now();
        if let Some(&at) = self.not_before.get(&key).filter(|at| **at > start) {
            let e = self.due.entry(key).or_insert((unit, at));
            e.1 = e.1.min(at);
            return;
        }
        self.due.remove(&key);
        let memo = self.memos.entry(key.clone()).or_default();
        let outcome = run_unit(store, cursors, &unit, no_sync, memo);
        let end = Instant::now();
        if outcome == Outcome::Resumed {
            self.not_before.remove(&key);
        } else {
            self.not_before.insert(key.clone(), end + (end - start));
        }
        match outcome {
            Outcome::Done | Outcome::Resumed => {
                self.failing.remove(&key);
            }
            Outcome::LinesSkipped => {
                self.failing.remove(&key);
                self.lines_skipped = true;
            }
            Outcome::Failed => {
                let wait = self.failing.get(&key).copied().unwrap_or(RETRY);
                self.failing.insert(key.clone(), (wait * 2).min(RETRY_MAX));
                self.due.insert(key, (unit, end + wait));
            }
        }
    }

    fn retry(&mut self, store: &sessctl_store::Store, cursors: &Cursors, no_sync: bool) {
        let now = Instant::now();
        let due: Vec<Unit> = self
            .due
            .values()
            .filter(|(_, at)| *at <= now)
            .map(|(u, _)| u.clone())
            .collect();
        for u in due {
            self.run(store, cursors, u, no_sync);
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Done,
    /// Done, reading only the new lines.
    Resumed,
    LinesSkipped,
    Failed,
}

/// Catches one unit up, printing what it did; an error is printed and the
/// watch goes on.
fn run_unit(
    store: &sessctl_store::Store,
    cursors: &Cursors,
    unit: &Unit,
    no_sync: bool,
    memo: &mut Memo,
) -> Outcome {
    let mut resumed = false;
    let result = catch_up(store, cursors, unit, no_sync, None, Some(memo)).and_then(|outcome| {
        resumed = outcome.as_ref().is_some_and(|r| r.resumed);
        report(unit, outcome.as_ref())
    });
    match result {
        Ok(()) if resumed => Outcome::Resumed,
        Ok(()) => Outcome::Done,
        Err(e) => failed(unit, e),
    }
}

/// Says why `unit` was not imported.
fn failed(unit: &Unit, e: CommandError) -> Outcome {
    match e {
        CommandError::Silent(_) => Outcome::LinesSkipped,
        CommandError::Store(e) => {
            eprintln!(
                "sessctl: {}: {}",
                unit.primary.display(),
                crate::message(&e)
            );
            Outcome::Failed
        }
        CommandError::Usage(m) | CommandError::Failed(m) => {
            eprintln!("sessctl: {}: {m}", unit.primary.display());
            Outcome::Failed
        }
        CommandError::NoStore => {
            eprintln!("sessctl: {}", crate::no_store_message());
            Outcome::Failed
        }
        CommandError::NotANo(e) => failed(unit, *e),
    }
}
