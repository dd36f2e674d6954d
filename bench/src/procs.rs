//! Scenario 7: N processes commit at once, each to its own conversation of
//! one store, durable and not. The processes are this binary re-run as
//! children (`--proc-child`): each opens the store, starts its
//! conversation, says it is ready, waits for a "go" line on standard input
//! and commits its turns (a user and an assistant message each). The
//! anchor is SQLite in WAL mode, a connection per process. A commit that
//! fails because another process held the store too long (sessctl's
//! `Error::Locked`, SQLite's `SQLITE_BUSY`, both after a 5 s wait) is
//! counted and retried, so every conversation ends with all its turns; the
//! check afterwards loads them back. Throughput is all commits over the
//! time from "go" to the last process's result; the failures are a second
//! row per system (median per run, p99 the worst run). When the `sessctl`
//! binary is built, the no-sync runs add a row of `sessctl commit`
//! processes, one per commit: it measures process start-up more than the
//! store, so it makes at most `CLI_CAP` commits per process.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sessctl_store::{graph, Error, OpenOptions, Store, Turn};

use crate::anchors::Sqlite;
use crate::report::{Better, Group, Row};
use crate::{durability, messages, secs, turn, Ctx, R, T0};

/// How long a commit waits for another process before it fails: sessctl's
/// default `OpenOptions::wait`, and SQLite's `busy_timeout` to match.
const WAIT: Duration = Duration::from_secs(5);

/// The `sessctl` binary pays a process start per commit, so its row makes
/// at most this many commits per process.
const CLI_CAP: usize = 50;

/// Messages per turn.
const TURN: usize = 2;

pub fn run(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    for &n in &ctx.s.procs {
        for sync in [true, false] {
            at_once(ctx, n, sync, out)?;
        }
    }
    Ok(())
}

fn conv(k: usize) -> String {
    format!("p{k:02}")
}

/// Process `k`'s messages, the same for every system.
fn conv_messages(k: usize, commits: usize) -> Vec<Value> {
    messages(700 + k as u64, commits * TURN)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Sessctl,
    Sqlite,
    Cli,
}

impl System {
    fn as_str(self) -> &'static str {
        match self {
            System::Sessctl => "sessctl",
            System::Sqlite => "sqlite",
            System::Cli => "cli",
        }
    }

    fn parse(s: &str) -> Option<System> {
        [System::Sessctl, System::Sqlite, System::Cli]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// What one run of N processes measured.
#[derive(Debug)]
struct Outcome {
    commits_per_sec: f64,
    failed: usize,
}

fn at_once(ctx: &Ctx, n: usize, sync: bool, out: &mut Vec<Row>) -> R<()> {
    let s = &ctx.s;
    let m = if sync { s.proc_commits } else { s.proc_turns };
    let label = if sync { "durable" } else { "no-sync" };
    let scenario = format!("7 {n} procs x {m} commits, {label}");
    let cli = if sync { None } else { ctx.sessctl(7) };
    let cli_m = m.min(CLI_CAP);
    let mut rate: [Vec<f64>; 3] = Default::default();
    let mut failed: [Vec<f64>; 3] = Default::default();
    for rep in 0..s.reps {
        let dir = tempfile::tempdir_in(&ctx.tmp)?;
        let store = dir.path().join("sessctl");
        Store::init(&store)?;
        let o = spawn_all(ctx, System::Sessctl, &store, n, m, sync, None)?;
        check_store(&store, n, m, rep == 0).map_err(|e| format!("{scenario}: {e}"))?;
        rate[0].push(o.commits_per_sec);
        failed[0].push(o.failed as f64);

        let db = dir.path().join("s.db");
        // The schema, made before the processes start.
        Sqlite::open(&db, sync)?;
        let o = spawn_all(ctx, System::Sqlite, &db, n, m, sync, None)?;
        check_sqlite(&db, n, m, rep == 0).map_err(|e| format!("{scenario}: {e}"))?;
        rate[1].push(o.commits_per_sec);
        failed[1].push(o.failed as f64);

        if let Some(bin) = cli {
            let store = dir.path().join("sessctl-cli");
            Store::init(&store)?;
            let o = spawn_all(ctx, System::Cli, &store, n, cli_m, sync, Some(bin))?;
            check_store(&store, n, cli_m, rep == 0)
                .map_err(|e| format!("{scenario}, sessctl CLI: {e}"))?;
            rate[2].push(o.commits_per_sec);
            failed[2].push(o.failed as f64);
        }
    }
    let names = [
        "sessctl (library)".to_owned(),
        format!("sqlite delta ({})", if sync { "FULL" } else { "NORMAL" }),
        format!("sessctl CLI, a process per commit, {cli_m} each"),
    ];
    let mut g = Group::new(scenario.clone(), "commits/s", Better::Higher);
    let mut f = Group::new(scenario, "failures/run", Better::Lower).p99();
    for ((name, r), fl) in names.iter().zip(rate).zip(failed) {
        g.add(name.as_str(), r);
        f.add(name.as_str(), fl);
    }
    crate::report::emit(out, g);
    crate::report::emit(out, f);
    Ok(())
}

/// The children of one run; any still running when this drops (a failed
/// run) are killed, so none outlives the harness.
#[derive(Debug, Default)]
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// Starts `n` children, waits until each is ready, tells them all to go,
/// and times them from "go" to the last one's result. `sessctl`: the
/// binary the CLI children run.
fn spawn_all(
    ctx: &Ctx,
    system: System,
    path: &Path,
    n: usize,
    m: usize,
    sync: bool,
    sessctl: Option<&Path>,
) -> R<Outcome> {
    let mut children = Children::default();
    let mut pipes: Vec<(ChildStdin, BufReader<ChildStdout>)> = Vec::with_capacity(n);
    for k in 0..n {
        let spec = json!({
            "system": system.as_str(),
            "path": path.to_str().ok_or("7: a temporary path is not UTF-8")?,
            "proc": k,
            "commits": m,
            "sync": sync,
            "sessctl": sessctl.and_then(Path::to_str),
        });
        let mut child = Command::new(&ctx.exe)
            .arg("--proc-child")
            .arg(spec.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("7: a child has no stdin")?;
        let stdout = child.stdout.take().ok_or("7: a child has no stdout")?;
        children.0.push(child);
        pipes.push((stdin, BufReader::new(stdout)));
    }
    let mut line = String::new();
    for (k, (_, stdout)) in pipes.iter_mut().enumerate() {
        line.clear();
        stdout.read_line(&mut line)?;
        if line.trim() != "ready" {
            return Err(format!("7: {} process {k} did not start", system.as_str()).into());
        }
    }
    let t = Instant::now();
    for (stdin, _) in &mut pipes {
        stdin.write_all(b"go\n")?;
        stdin.flush()?;
    }
    let mut failed = 0;
    for (k, (_, stdout)) in pipes.iter_mut().enumerate() {
        line.clear();
        stdout.read_line(&mut line)?;
        let v: Value = serde_json::from_str(&line).map_err(|_| {
            format!(
                "7: {} process {k} ended without a result (its error is above)",
                system.as_str()
            )
        })?;
        failed += v["failed"].as_u64().ok_or("7: a result without failed")? as usize;
    }
    let dt = secs(t);
    for (k, c) in children.0.iter_mut().enumerate() {
        let status = c.wait()?;
        if !status.success() {
            return Err(format!("7: {} process {k} failed ({status})", system.as_str()).into());
        }
    }
    Ok(Outcome {
        commits_per_sec: (n * m) as f64 / dt,
        failed,
    })
}

/// Every conversation holds exactly its `m` turns; with `full`, their
/// messages load back as written.
fn check_store(path: &Path, n: usize, m: usize, full: bool) -> R<()> {
    let store = Store::open(
        path,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )?;
    for k in 0..n {
        let info = store
            .conversation(&conv(k))?
            .ok_or_else(|| format!("conversation {} is missing", conv(k)))?;
        let head = info.head.ok_or("a conversation without a head")?;
        // The empty root, then a session per turn.
        let turns = graph::first_parent_chain(&store, head)?.len() - 1;
        if turns != m || info.messages != (m * TURN) as u64 {
            return Err(format!(
                "conversation {} holds {turns} turns and {} messages, not {m} and {}",
                conv(k),
                info.messages,
                m * TURN
            )
            .into());
        }
        if full && store.odb().load_messages(&head)? != conv_messages(k, m) {
            return Err(format!("conversation {} loads back differently", conv(k)).into());
        }
    }
    Ok(())
}

/// The table holds `n` x `m` turns; with `full`, each session's messages
/// load back as written.
fn check_sqlite(path: &Path, n: usize, m: usize, full: bool) -> R<()> {
    let q = Sqlite::open(path, false)?;
    let rows: i64 = q
        .conn
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))?;
    if rows != (n * m * TURN) as i64 {
        return Err(format!("sqlite holds {rows} messages, not {n} x {m} turns of {TURN}").into());
    }
    if full {
        for k in 0..n {
            if q.load(&conv(k))? != conv_messages(k, m) {
                return Err(format!("sqlite session {} loads back differently", conv(k)).into());
            }
        }
    }
    Ok(())
}

/// A child: `spec` says which system, where, which process and how many
/// commits. Prints "ready", waits for "go", commits, prints its result.
pub fn child(spec: &str) -> R<()> {
    let v: Value = serde_json::from_str(spec)?;
    let system = v["system"]
        .as_str()
        .and_then(System::parse)
        .ok_or("--proc-child: no system")?;
    let path = Path::new(v["path"].as_str().ok_or("--proc-child: no path")?);
    let k = v["proc"].as_u64().ok_or("--proc-child: no proc")? as usize;
    let m = v["commits"].as_u64().ok_or("--proc-child: no commits")? as usize;
    let sync = v["sync"].as_bool().ok_or("--proc-child: no sync")?;
    let msgs = conv_messages(k, m);
    let name = conv(k);
    let opts = OpenOptions {
        wait: Some(WAIT),
        ..OpenOptions::default()
    };
    let failed = match system {
        System::Sessctl => {
            let store = Store::open(path, &opts)?;
            store.create(Some(&name), Turn::default(), durability(sync))?;
            let turns: Vec<Turn> = msgs.chunks(TURN).map(turn).collect();
            wait_for_go()?;
            let mut failed = 0;
            for tu in turns {
                failed += retry(m, || {
                    match store.commit(&name, None, tu.clone(), durability(sync)) {
                        Ok(_) => Ok(true),
                        Err(Error::Locked { .. }) => Ok(false),
                        Err(e) => Err(e.into()),
                    }
                })?;
            }
            failed
        }
        System::Sqlite => {
            let mut q = Sqlite::open(path, sync)?;
            q.conn.busy_timeout(WAIT)?;
            q.create_session(&name, T0)?;
            wait_for_go()?;
            let mut failed = 0;
            for (i, tu) in msgs.chunks(TURN).enumerate() {
                let seq = (i * TURN) as i64;
                failed += retry(m, || match q.append(&name, seq, tu, T0 + i as i64) {
                    Ok(()) => Ok(true),
                    Err(e) if sqlite_busy(&*e) => Ok(false),
                    Err(e) => Err(e),
                })?;
            }
            failed
        }
        System::Cli => {
            let bin = v["sessctl"].as_str().ok_or("--proc-child: no sessctl")?;
            Store::open(path, &opts)?.create(Some(&name), Turn::default(), durability(sync))?;
            let bodies: Vec<Vec<u8>> = msgs
                .chunks(TURN)
                .map(serde_json::to_vec)
                .collect::<Result<_, _>>()?;
            wait_for_go()?;
            let mut failed = 0;
            for body in &bodies {
                failed += retry(m, || cli_commit(bin, path, &name, body, sync))?;
            }
            failed
        }
    };
    println!("{}", json!({"failed": failed}));
    Ok(())
}

/// Says "ready", then blocks until the parent says "go" (end of input: the
/// parent gave up, so this child does too).
fn wait_for_go() -> R<()> {
    println!("ready");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    if line.trim() != "go" {
        return Err("--proc-child: the parent did not say go".into());
    }
    Ok(())
}

/// Runs `commit` until it succeeds (`Ok(true)`); returns how many times it
/// failed for want of the lock (`Ok(false)`). More than `cap` failures for
/// one commit is an error: the store is stuck, not busy.
fn retry(cap: usize, mut commit: impl FnMut() -> R<bool>) -> R<usize> {
    let mut failed = 0;
    while !commit()? {
        failed += 1;
        if failed > cap {
            return Err(
                format!("--proc-child: a commit failed {failed} times for the lock").into(),
            );
        }
    }
    Ok(failed)
}

fn sqlite_busy(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        e.downcast_ref::<rusqlite::Error>(),
        Some(rusqlite::Error::SqliteFailure(f, _)) if f.code == rusqlite::ErrorCode::DatabaseBusy
    )
}

/// One `sessctl commit`; exit 4 is the lock's timeout.
fn cli_commit(bin: &str, store: &Path, name: &str, body: &[u8], sync: bool) -> R<bool> {
    let mut cmd = Command::new(bin);
    cmd.arg("--store")
        .arg(store)
        .arg("--wait")
        .arg(WAIT.as_secs().to_string())
        .args(["commit", name, "--messages", "-"]);
    if !sync {
        cmd.arg("--no-sync");
    }
    let mut c = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    c.stdin
        .take()
        .ok_or("sessctl commit has no stdin")?
        .write_all(body)?;
    let o = c.wait_with_output()?;
    match o.status.code() {
        Some(0) => Ok(true),
        Some(4) => Ok(false),
        _ => Err(format!(
            "sessctl commit failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )
        .into()),
    }
}
