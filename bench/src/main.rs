//! sessctl-bench: sessctl against the anchors a user would otherwise pick
//! (a JSONL file per session, SQLite in WAL mode), side by side in one run.
//! Prints a table of medians (and p99 where it matters) and the ratio
//! sessctl/anchor; `--json FILE` writes the same rows. Timings are never
//! asserted: CI runs `--quick` to check that the harness works.

mod anchors;
mod report;
#[allow(clippy::unwrap_used)] // the shared test generator; a panic is the report
#[path = "../../store/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use serde_json::{json, Value};
use sessctl_store::{Cut, Durability, ForkOptions, Messages, RepackOptions, Store, Turn};

use anchors::{jsonl_fork, jsonl_load, Jsonl, Sqlite};
use report::{Better, Group, Row};
use support::{message, Rng};

pub type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A scenario: measures in a temporary directory under the path, appends its rows.
type Scenario = fn(&Path, Sizes, &mut Vec<Row>) -> R<()>;

/// Benchmarks sessctl against JSONL files and SQLite, in one run.
#[derive(Debug, Parser)]
#[command(name = "sessctl-bench")]
struct Args {
    /// Shrink every size so the whole run takes seconds (checks the harness,
    /// not the timings).
    #[arg(long)]
    quick: bool,
    /// Also write the table as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Durable commits per measurement (no-sync: ten times as many)
    /// [default: 500; quick: 10].
    #[arg(long, value_name = "N")]
    commits: Option<usize>,
    /// Repetitions of each throughput measurement [default: 5; quick: 2].
    #[arg(long, value_name = "N")]
    reps: Option<usize>,
    /// Messages in the session that is loaded [default: 10000; quick: 500].
    #[arg(long, value_name = "N")]
    messages: Option<usize>,
    /// Loads of that session per system [default: 20; quick: 3].
    #[arg(long, value_name = "N")]
    loads: Option<usize>,
    /// Conversations in the store that is listed [default: 10000; quick: 200].
    #[arg(long, value_name = "N")]
    conversations: Option<usize>,
    /// Fresh processes that list it, per system [default: 10; quick: 2].
    #[arg(long, value_name = "N")]
    spawns: Option<usize>,
    /// Concurrent conversations (threads) in the last scenario [default: 16].
    #[arg(long, value_name = "N", default_value_t = 16)]
    threads: usize,
    /// Where the temporary stores go [default: the system temp dir].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Internal: list the newest sessions of a SQLite file and exit (the
    /// anchor's fresh process).
    #[arg(long, hide = true, value_name = "DB")]
    sqlite_ls: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy)]
struct Sizes {
    commits: usize,
    reps: usize,
    messages: usize,
    loads: usize,
    conversations: usize,
    spawns: usize,
    threads: usize,
}

impl Sizes {
    fn from(a: &Args) -> Sizes {
        let q = a.quick;
        let pick = |v: Option<usize>, full: usize, quick: usize| {
            v.unwrap_or(if q { quick } else { full }).max(1)
        };
        Sizes {
            commits: pick(a.commits, 500, 10),
            reps: pick(a.reps, 5, 2),
            messages: pick(a.messages, 10_000, 500),
            loads: pick(a.loads, 20, 3),
            conversations: pick(a.conversations, 10_000, 200),
            spawns: pick(a.spawns, 10, 2),
            threads: a.threads.max(1),
        }
    }

    fn to_json(self) -> Value {
        json!({
            "commits": self.commits, "reps": self.reps, "messages": self.messages,
            "loads": self.loads, "conversations": self.conversations,
            "spawns": self.spawns, "threads": self.threads,
        })
    }
}

const PER_TURN: usize = 4;
const T0: i64 = 1_763_000_000_000;

fn messages(seed: u64, n: usize) -> Vec<Value> {
    let mut rng = Rng::new(seed);
    (0..n).map(|i| message(&mut rng, i)).collect()
}

fn turn(messages: &[Value]) -> Turn {
    Turn {
        messages: Messages::Added(messages.to_vec()),
        ..Turn::default()
    }
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

fn durability(sync: bool) -> Durability {
    if sync {
        Durability::Sync
    } else {
        Durability::NoSync
    }
}

/// Scenario 1: one writer, one message per turn.
fn commit_throughput(tmp: &Path, s: Sizes, out: &mut Vec<Row>) -> R<()> {
    for sync in [true, false] {
        let n = if sync { s.commits } else { s.commits * 10 };
        let label = if sync { "durable" } else { "no-sync" };
        let msgs = messages(1, n);
        let mut g = Group::new(
            format!("1 commit, 1 writer, {label}"),
            "commits/s",
            Better::Higher,
        );
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..s.reps {
            let dir = tempfile::tempdir_in(tmp)?;
            let store = Store::init(&dir.path().join("sessctl"))?;
            store.create(Some("c"), Turn::default(), durability(sync))?;
            let turns: Vec<Turn> = msgs.iter().map(|m| turn(std::slice::from_ref(m))).collect();
            let t = Instant::now();
            for tu in turns {
                store.commit("c", None, tu, durability(sync))?;
            }
            a.push(n as f64 / secs(t));

            let mut j = Jsonl::create(&dir.path().join("s.jsonl"), sync)?;
            let t = Instant::now();
            for m in &msgs {
                j.append(std::slice::from_ref(m))?;
            }
            b.push(n as f64 / secs(t));

            let mut q = Sqlite::open(&dir.path().join("s.db"), sync)?;
            q.create_session("c", T0)?;
            let t = Instant::now();
            for (i, m) in msgs.iter().enumerate() {
                q.append("c", i as i64, std::slice::from_ref(m), T0 + i as i64)?;
            }
            c.push(n as f64 / secs(t));
        }
        g.add("sessctl", a);
        g.add(
            if sync {
                "jsonl (fdatasync)"
            } else {
                "jsonl (no sync)"
            },
            b,
        );
        g.add(
            if sync {
                "sqlite (FULL)"
            } else {
                "sqlite (NORMAL)"
            },
            c,
        );
        out.extend(g.rows());
    }
    Ok(())
}

/// Scenarios 2 and 3: one long session, loaded, measured on disk, forked.
fn long_session(tmp: &Path, s: Sizes, out: &mut Vec<Row>) -> R<()> {
    let n = s.messages;
    let msgs = messages(2, n);
    let turns = n.div_ceil(PER_TURN);
    let dir = tempfile::tempdir_in(tmp)?;

    let store = Store::init(&dir.path().join("sessctl"))?;
    let mut chunks = msgs.chunks(PER_TURN);
    let first = chunks.next().unwrap_or(&[]);
    let (_, mut head) = store.create(Some("c"), turn(first), Durability::NoSync)?;
    for ch in chunks {
        head = store.commit("c", None, turn(ch), Durability::NoSync)?;
    }
    store.odb().repack(&RepackOptions::default())?;

    let jpath = dir.path().join("s.jsonl");
    let mut j = Jsonl::create(&jpath, false)?;
    for ch in msgs.chunks(PER_TURN) {
        j.append(ch)?;
    }
    drop(j);

    let mut q = Sqlite::open(&dir.path().join("s.db"), false)?;
    q.create_session("c", T0)?;
    q.conn.execute_batch("BEGIN")?;
    for (i, m) in msgs.iter().enumerate() {
        q.conn.execute(
            "INSERT INTO messages(session_id, seq, message) VALUES ('c', ?1, ?2)",
            rusqlite::params![i as i64, serde_json::to_string(m)?],
        )?;
    }
    q.conn.execute_batch("COMMIT")?;

    // The harness's own check: all three give back the same history.
    if store.odb().load_messages(&head)? != msgs
        || jsonl_load(&jpath)? != msgs
        || q.load("c")? != msgs
    {
        return Err("a loaded history differs from the one written".into());
    }

    let mut g = Group::new(format!("2 load {n}-message history"), "ms", Better::Lower).p99();
    let time = |f: &mut dyn FnMut() -> R<usize>| -> R<Vec<f64>> {
        let mut v = Vec::new();
        for _ in 0..s.loads {
            let t = Instant::now();
            let got = f()?;
            v.push(secs(t) * 1e3);
            if got != n {
                return Err(format!("loaded {got} messages, not {n}").into());
            }
        }
        Ok(v)
    };
    g.add(
        "sessctl (packed)",
        time(&mut || Ok(store.odb().load_messages(&head)?.len()))?,
    );
    g.add("jsonl", time(&mut || Ok(jsonl_load(&jpath)?.len()))?);
    g.add("sqlite", time(&mut || Ok(q.load("c")?.len()))?);
    out.extend(g.rows());

    // Bytes on disk per turn.
    q.checkpoint()?;
    let db_size = |dir: &Path| -> R<u64> {
        let mut total = 0;
        for f in ["s.db", "s.db-wal"] {
            if let Ok(m) = std::fs::metadata(dir.join(f)) {
                total += m.len();
            }
        }
        Ok(total)
    };
    let per = |b: u64| vec![b as f64 / turns as f64];
    let mut g = Group::new(
        format!("3 disk per turn ({PER_TURN} msgs/turn)"),
        "bytes/turn",
        Better::Lower,
    );
    let sessctl_before = store.odb().stats()?.disk_bytes();
    let sqlite_before = db_size(dir.path())?;
    g.add("sessctl (objects)", per(sessctl_before));
    g.add("jsonl", per(std::fs::metadata(&jpath)?.len()));
    g.add("sqlite (checkpointed)", per(sqlite_before));
    g.add(
        "sessctl (whole dir)",
        per(dir_size(&dir.path().join("sessctl"))?),
    );
    out.extend(g.rows());

    // A fork at the middle that adds 10 messages.
    let mid = n / 2;
    let added = messages(3, 10);
    let mut g = Group::new("3 fork at middle, +10 msgs", "bytes grown", Better::Lower);
    store.fork(
        head,
        ForkOptions {
            name: Some("fork".into()),
            cut: Some(Cut::AtMessage(mid as u64)),
            turn: Some(turn(&added)),
        },
        Durability::Sync,
    )?;
    g.add(
        "sessctl (objects)",
        vec![(store.odb().stats()?.disk_bytes() - sessctl_before) as f64],
    );
    let jsize = jsonl_fork(&jpath, &dir.path().join("fork.jsonl"), mid, &added)?;
    g.add("jsonl (copy prefix)", vec![jsize as f64]);
    q.conn.execute_batch("BEGIN")?;
    q.conn.execute(
        "INSERT INTO messages SELECT 'fork', seq, message FROM messages
         WHERE session_id='c' AND seq < ?1",
        [mid as i64],
    )?;
    q.conn.execute_batch("COMMIT")?;
    q.create_session("fork", T0)?;
    q.append("fork", mid as i64, &added, T0)?;
    q.checkpoint()?;
    g.add(
        "sqlite (copy rows)",
        vec![db_size(dir.path())?.saturating_sub(sqlite_before) as f64],
    );
    out.extend(g.rows());
    Ok(())
}

/// Bytes of every file under `path`: objects, refs, the index.
fn dir_size(path: &Path) -> R<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(path)? {
        let e = e?;
        let m = e.metadata()?;
        total += if m.is_dir() {
            dir_size(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(total)
}

/// Scenario 4: a fresh process opens a store of many conversations and lists
/// the 20 newest.
fn list_newest(tmp: &Path, s: Sizes, out: &mut Vec<Row>) -> R<()> {
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().ok_or("the bench binary has no directory")?;
    let sessctl = bin_dir.join(format!("sessctl{}", std::env::consts::EXE_SUFFIX));
    let n = s.conversations;
    let dir = tempfile::tempdir_in(tmp)?;
    let spath = dir.path().join("sessctl");
    let dbpath = dir.path().join("s.db");
    {
        let store = Store::init(&spath)?;
        let q = Sqlite::open(&dbpath, false)?;
        let mut rng = Rng::new(4);
        q.conn.execute_batch("BEGIN")?;
        for i in 0..n {
            let msgs: Vec<Value> = (0..PER_TURN).map(|k| message(&mut rng, k)).collect();
            let name = format!("c{i:06}");
            store.create(Some(&name), turn(&msgs), Durability::NoSync)?;
            q.conn.execute(
                "INSERT INTO sessions VALUES (?1, ?2, ?2)",
                rusqlite::params![name, T0 + i as i64],
            )?;
            for (k, m) in msgs.iter().enumerate() {
                q.conn.execute(
                    "INSERT INTO messages VALUES (?1, ?2, ?3)",
                    rusqlite::params![name, k as i64, serde_json::to_string(m)?],
                )?;
            }
        }
        q.conn.execute_batch("COMMIT")?;
        q.checkpoint()?;
    }
    let want = n.min(20);
    let spawn = |cmd: &mut Command| -> R<f64> {
        let t = Instant::now();
        let o = cmd.output()?;
        let dt = secs(t) * 1e3;
        if !o.status.success() {
            return Err(format!(
                "{cmd:?} failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )
            .into());
        }
        let v: Value = serde_json::from_slice(&o.stdout)?;
        let got = v.as_array().map_or(0, Vec::len);
        if got != want {
            return Err(format!("{cmd:?} listed {got} conversations, not {want}").into());
        }
        Ok(dt)
    };
    let mut g = Group::new(
        format!("4 open + ls 20 newest of {n}"),
        "ms per process",
        Better::Lower,
    )
    .p99();
    if sessctl.exists() {
        let mut v = Vec::new();
        for _ in 0..s.spawns {
            v.push(spawn(
                Command::new(&sessctl)
                    .arg("--store")
                    .arg(&spath)
                    .args(["ls", "--limit", "20", "--json"]),
            )?);
        }
        g.add("sessctl ls (process)", v);
    } else {
        eprintln!(
            "sessctl-bench: {} not found, scenario 4 has no sessctl row \
             (build it first: cargo build -p sessctl, with --release for a release run)",
            sessctl.display()
        );
    }
    let mut v = Vec::new();
    for _ in 0..s.spawns {
        v.push(spawn(Command::new(&exe).arg("--sqlite-ls").arg(&dbpath))?);
    }
    g.add("sqlite (process)", v);
    out.extend(g.rows());
    Ok(())
}

/// Scenario 5: durable commits on many conversations at once, a thread each.
fn concurrent_commits(tmp: &Path, s: Sizes, out: &mut Vec<Row>) -> R<()> {
    let threads = s.threads;
    let per = s.commits.div_ceil(4).max(2);
    let mut g = Group::new(
        format!("5 commit, {threads} threads, durable"),
        "commits/s",
        Better::Higher,
    );
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..s.reps {
        let dir = tempfile::tempdir_in(tmp)?;
        let store = Arc::new(Store::init(&dir.path().join("sessctl"))?);
        for t in 0..threads {
            store.create(Some(&format!("c{t}")), Turn::default(), Durability::Sync)?;
        }
        let t0 = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let store = store.clone();
                let msgs = messages(10 + t as u64, per);
                std::thread::spawn(move || -> R<()> {
                    for m in &msgs {
                        let tu = turn(std::slice::from_ref(m));
                        store.commit(&format!("c{t}"), None, tu, Durability::Sync)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a writer thread panicked")??;
        }
        a.push((per * threads) as f64 / secs(t0));

        let db = dir.path().join("s.db");
        {
            let q = Sqlite::open(&db, true)?;
            for t in 0..threads {
                q.create_session(&format!("c{t}"), T0)?;
            }
        }
        // One connection behind a mutex, as SQLiteSession shares one with a
        // lock: a connection per thread would spend its time in SQLite's
        // busy handler, sleeping.
        let q = Arc::new(std::sync::Mutex::new(Sqlite::open(&db, true)?));
        let t0 = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let q = q.clone();
                let msgs = messages(10 + t as u64, per);
                std::thread::spawn(move || -> R<()> {
                    for (i, m) in msgs.iter().enumerate() {
                        q.lock()
                            .map_err(|_| "the connection's lock is poisoned")?
                            .append(&format!("c{t}"), i as i64, std::slice::from_ref(m), T0)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a writer thread panicked")??;
        }
        b.push((per * threads) as f64 / secs(t0));
    }
    g.add("sessctl", a);
    g.add("sqlite (FULL, shared conn)", b);
    out.extend(g.rows());
    Ok(())
}

fn run(args: Args) -> R<()> {
    if let Some(db) = &args.sqlite_ls {
        let q = Sqlite::open(db, false)?;
        println!("{}", Value::Array(q.newest(20)?));
        return Ok(());
    }
    let sizes = Sizes::from(&args);
    let tmp = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut rows: Vec<Row> = Vec::new();
    let steps: [(&str, Scenario); 4] = [
        ("commit throughput", commit_throughput),
        ("long session", long_session),
        ("list newest", list_newest),
        ("concurrent commits", concurrent_commits),
    ];
    for (name, step) in steps {
        let t = Instant::now();
        step(&tmp, sizes, &mut rows)?;
        eprintln!("sessctl-bench: {name} done in {:.1}s", secs(t));
    }
    report::print(&rows);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report::to_json(&rows, sizes.to_json()))?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("sessctl-bench: {e}");
        std::process::exit(1);
    }
}
