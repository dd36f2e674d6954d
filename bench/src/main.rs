//! sessctl-bench: sessctl against the anchors a user would otherwise pick
//! (a JSONL file per session, SQLite in WAL mode as a delta table or as
//! full snapshots, git), side by side in one run. Prints a table of medians
//! (and p99 where it matters) and the ratio sessctl/anchor; `--json FILE`
//! writes the same rows. Timings are never asserted: CI runs `--quick` to
//! check that the harness works and that every system gives back the same
//! answers.
//!
//! The scenarios, numbered as in the table: 1 commit throughput, 2 loading
//! a history (and catching up a growing transcript), 3 lineage queries, 4 gc and fsck, 5 bytes on disk, 6 a fresh
//! process listing the newest conversations, 7 N processes committing at
//! once, 8 the remote store against PostgreSQL delta and snapshot tables
//! (servers started by the run, skipped with a note when absent), 9 flat
//! cost at scale.

mod anchors;
mod bulk;
mod catchup;
mod commit;
mod git;
mod history;
mod lineage;
mod list;
mod maintenance;
mod procs;
mod remote;
mod report;
mod scale;
// The remote tests' servers (a throwaway PostgreSQL cluster and moto),
// shared with store/tests and cli/tests.
// (It allows clippy::unwrap_used itself: a panic is the report.)
#[allow(missing_debug_implementations)]
#[path = "../../store/tests/support/servers.rs"]
mod servers;
#[allow(clippy::unwrap_used, missing_debug_implementations)] // the shared test generator; a panic is the report
#[path = "../../store/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use clap::Parser;
use serde_json::{json, Value};
use sessctl_store::{Durability, Messages, Turn};

use anchors::Sqlite;
use report::Row;
use support::{message, Rng};

pub type R<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A scenario: measures in temporary directories under `ctx.tmp`, appends
/// its rows.
type Scenario = fn(&Ctx, &mut Vec<Row>) -> R<()>;

/// Benchmarks sessctl against JSONL files, SQLite and git, in one run.
#[derive(Debug, Parser)]
#[command(name = "sessctl-bench")]
struct Args {
    /// Shrink every size so the whole run takes seconds (checks the harness
    /// and that all systems agree, not the timings).
    #[arg(long)]
    quick: bool,
    /// Also write the table as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run only these scenarios (1-9, comma-separated) [default: all].
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    only: Vec<u32>,
    /// Where the temporary stores go [default: the system temp dir].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Repetitions of each throughput and in-process measurement
    /// [default: 5; quick: 2].
    #[arg(long, value_name = "N")]
    reps: Option<usize>,
    /// 1: durable commits by one writer on one conversation [default: 500;
    /// quick: 10].
    #[arg(long, value_name = "N")]
    commits: Option<usize>,
    /// 1: no-sync commits by one writer on one conversation [default: 10000;
    /// quick: 100].
    #[arg(long, value_name = "N")]
    turns: Option<usize>,
    /// 1: concurrent conversations, a writer thread each (comma-separated)
    /// [default: 16,64].
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    threads: Vec<usize>,
    /// 1: conversations in the many-conversations workload (20% of them
    /// forks) [default: 1000; quick: 20].
    #[arg(long, value_name = "N")]
    convs: Option<usize>,
    /// 1: turns per conversation in that workload [default: 20; quick: 5].
    #[arg(long, value_name = "N")]
    conv_turns: Option<usize>,
    /// 1: commits made by git plumbing (about 4 processes each)
    /// [default: 20; quick: 3].
    #[arg(long, value_name = "N")]
    git_commits: Option<usize>,
    /// 2, 5: messages in the session that is loaded and measured on disk
    /// [default: 10000; quick: 500].
    #[arg(long, value_name = "N")]
    messages: Option<usize>,
    /// 2: loads of that session per system [default: 20; quick: 3].
    #[arg(long, value_name = "N")]
    loads: Option<usize>,
    /// 3: sessions in the chain [default: 100000; quick: 2000].
    #[arg(long, value_name = "N")]
    chain: Option<usize>,
    /// 3: sessions in the forest [default: 200000; quick: 4000].
    #[arg(long, value_name = "N")]
    forest: Option<usize>,
    /// 3: root conversations of the forest [default: 2000; quick: 40].
    #[arg(long, value_name = "N")]
    roots: Option<usize>,
    /// 3: runs of each lineage query per system, fresh processes and
    /// library calls [default: 3; quick: 1].
    #[arg(long, value_name = "N")]
    lineage_runs: Option<usize>,
    /// 4: objects in the store that gc and fsck go over [default: 1000000;
    /// quick: 5000].
    #[arg(long, value_name = "N")]
    gc_objects: Option<usize>,
    /// 6, 8: conversations in the store that is listed [default: 100000;
    /// quick: 200].
    #[arg(long, value_name = "N")]
    conversations: Option<usize>,
    /// 6, 8: fresh processes (8: and new handles) per system [default: 10;
    /// quick: 2].
    #[arg(long, value_name = "N")]
    spawns: Option<usize>,
    /// 7: processes committing at once, each to its own conversation
    /// (comma-separated) [default: 4,16; quick: 2,4].
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    procs: Vec<usize>,
    /// 7: durable commits per process [default: 200; quick: 10].
    #[arg(long, value_name = "N")]
    proc_commits: Option<usize>,
    /// 7: no-sync commits per process [default: 1000; quick: 10].
    #[arg(long, value_name = "N")]
    proc_turns: Option<usize>,
    /// 8: writer threads committing at once, a conversation each
    /// [default: 16].
    #[arg(long, value_name = "N")]
    remote_writers: Option<usize>,
    /// 8: durable turns (two messages each) per writer [default: 40;
    /// quick: 2].
    #[arg(long, value_name = "N")]
    remote_turns: Option<usize>,
    /// 9: also build and measure stores of 1 and 10 million sessions (the
    /// 1M store takes about 7 minutes to build here and 0.7 GB, the 10M one
    /// about ten times that; not for CI).
    #[arg(long)]
    huge: bool,
    /// 9: the store sizes, in sessions (comma-separated; ten to a
    /// conversation) [default: 100000; --huge: 100000,1000000,10000000;
    /// quick: 1000,10000].
    #[arg(long, value_name = "N,...", value_delimiter = ',')]
    scale: Vec<usize>,
    /// 9: keep each store in --dir after measuring it and print its path
    /// (to profile a query on it), instead of deleting it.
    #[arg(long)]
    keep_stores: bool,
    /// Internal: list the newest sessions of a SQLite file and exit (the
    /// anchor's fresh process).
    #[arg(long, hide = true, value_name = "DB")]
    sqlite_ls: Option<PathBuf>,
    /// Internal: be one of scenario 7's committing processes, as the JSON
    /// spec says.
    #[arg(long, hide = true, value_name = "JSON")]
    proc_child: Option<String>,
}

/// Every size, after defaults.
#[derive(Debug, Clone)]
pub struct Sizes {
    pub quick: bool,
    pub reps: usize,
    pub commits: usize,
    pub turns: usize,
    pub threads: Vec<usize>,
    pub convs: usize,
    pub conv_turns: usize,
    pub git_commits: usize,
    pub messages: usize,
    pub loads: usize,
    pub chain: usize,
    pub forest: usize,
    pub roots: usize,
    pub lineage_runs: usize,
    pub gc_objects: usize,
    pub conversations: usize,
    pub spawns: usize,
    pub procs: Vec<usize>,
    pub proc_commits: usize,
    pub proc_turns: usize,
    pub remote_writers: usize,
    pub remote_turns: usize,
    pub scale: Vec<usize>,
    pub keep_stores: bool,
}

impl Sizes {
    fn from(a: &Args) -> Sizes {
        let q = a.quick;
        let pick = |v: Option<usize>, full: usize, quick: usize| {
            v.unwrap_or(if q { quick } else { full }).max(1)
        };
        let mut threads: Vec<usize> = a.threads.iter().map(|&t| t.max(1)).collect();
        if threads.is_empty() {
            threads = vec![16, 64];
        }
        let mut procs: Vec<usize> = a.procs.iter().map(|&p| p.max(1)).collect();
        if procs.is_empty() {
            procs = if q { vec![2, 4] } else { vec![4, 16] };
        }
        let mut scale: Vec<usize> = a.scale.iter().map(|&n| n.max(10)).collect();
        if scale.is_empty() {
            scale = match (q, a.huge) {
                (true, _) => vec![1000, 10_000],
                (false, false) => vec![100_000],
                (false, true) => vec![100_000, 1_000_000, 10_000_000],
            };
        }
        Sizes {
            quick: q,
            reps: pick(a.reps, 5, 2),
            commits: pick(a.commits, 500, 10),
            turns: pick(a.turns, 10_000, 100),
            threads,
            convs: pick(a.convs, 1000, 20),
            conv_turns: pick(a.conv_turns, 20, 5),
            git_commits: pick(a.git_commits, 20, 3),
            messages: pick(a.messages, 10_000, 500),
            loads: pick(a.loads, 20, 3),
            chain: pick(a.chain, 100_000, 2000).max(20),
            forest: pick(a.forest, 200_000, 4000),
            roots: pick(a.roots, 2000, 40),
            lineage_runs: pick(a.lineage_runs, 3, 1),
            gc_objects: pick(a.gc_objects, 1_000_000, 5000),
            conversations: pick(a.conversations, 100_000, 200),
            spawns: pick(a.spawns, 10, 2),
            procs,
            proc_commits: pick(a.proc_commits, 200, 10),
            proc_turns: pick(a.proc_turns, 1000, 10),
            remote_writers: a.remote_writers.unwrap_or(16).max(1),
            remote_turns: pick(a.remote_turns, 40, 2),
            scale,
            keep_stores: a.keep_stores,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "quick": self.quick, "reps": self.reps, "commits": self.commits,
            "turns": self.turns, "threads": self.threads, "convs": self.convs,
            "conv_turns": self.conv_turns, "git_commits": self.git_commits,
            "messages": self.messages, "loads": self.loads, "chain": self.chain,
            "forest": self.forest, "roots": self.roots,
            "lineage_runs": self.lineage_runs, "gc_objects": self.gc_objects,
            "conversations": self.conversations, "spawns": self.spawns,
            "procs": self.procs, "proc_commits": self.proc_commits,
            "proc_turns": self.proc_turns, "remote_writers": self.remote_writers,
            "remote_turns": self.remote_turns, "scale": self.scale,
        })
    }
}

/// What every scenario gets.
#[derive(Debug)]
pub struct Ctx {
    pub tmp: PathBuf,
    pub s: Sizes,
    /// The sessctl binary beside this one, when it has been built.
    pub sessctl: Option<PathBuf>,
    /// This binary (the SQLite anchor's fresh process, scenario 7's
    /// committing processes).
    pub exe: PathBuf,
    /// Whether git runs; its scenarios are skipped with a note when not.
    pub git: bool,
}

impl Ctx {
    /// Says on stderr why a row is missing.
    pub fn note(&self, text: &str) {
        eprintln!("sessctl-bench: note: {text}");
    }

    /// The sessctl binary, or a note that scenario `n` has no CLI row.
    pub fn sessctl(&self, scenario: u32) -> Option<&Path> {
        if self.sessctl.is_none() {
            self.note(&format!(
                "the sessctl binary is not beside this one: scenario {scenario} has no \
                 sessctl process rows (build it first: cargo build -p sessctl, with \
                 --release for a release run)"
            ));
        }
        self.sessctl.as_deref()
    }

    /// Whether git runs, or a note that scenario `n` has no git rows.
    pub fn git(&self, scenario: u32) -> bool {
        if !self.git {
            self.note(&format!(
                "git --version failed: scenario {scenario} has no git rows"
            ));
        }
        self.git
    }
}

pub const PER_TURN: usize = 4;
pub const T0: i64 = 1_763_000_000_000;

pub fn messages(seed: u64, n: usize) -> Vec<Value> {
    let mut rng = Rng::new(seed);
    (0..n).map(|i| message(&mut rng, i)).collect()
}

/// Small unique messages (about 100 bytes) for stores of very many objects.
pub fn small_message(tag: &str, i: usize, rng: &mut Rng) -> Value {
    let role = if i.is_multiple_of(2) {
        "user"
    } else {
        "assistant"
    };
    json!({"role": role, "content": format!("{tag} message {i}: check {} then run the tests", rng.next())})
}

pub fn turn(messages: &[Value]) -> Turn {
    Turn {
        messages: Messages::Added(messages.to_vec()),
        ..Turn::default()
    }
}

pub fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

pub fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

pub fn durability(sync: bool) -> Durability {
    if sync {
        Durability::Sync
    } else {
        Durability::NoSync
    }
}

/// Bytes of every file under `path`.
pub fn dir_size(path: &Path) -> R<u64> {
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

/// Runs a fresh process; returns its wall time in ms and its output. Exit
/// codes other than `ok` are an error naming the command.
pub fn spawn(cmd: &mut Command, ok: &[i32]) -> R<(f64, std::process::Output)> {
    let t = Instant::now();
    let o = cmd.output()?;
    let dt = ms(t);
    if !o.status.code().is_some_and(|c| ok.contains(&c)) {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )
        .into());
    }
    Ok((dt, o))
}

fn run(args: Args) -> R<()> {
    if let Some(db) = &args.sqlite_ls {
        let q = Sqlite::open(db, false)?;
        println!("{}", Value::Array(q.newest(20)?));
        return Ok(());
    }
    if let Some(spec) = &args.proc_child {
        return procs::child(spec);
    }
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().ok_or("the bench binary has no directory")?;
    let sessctl = bin_dir.join(format!("sessctl{}", std::env::consts::EXE_SUFFIX));
    let git_version = git::version();
    match &git_version {
        Some(v) => eprintln!("sessctl-bench: {v}"),
        None => eprintln!("sessctl-bench: note: git --version failed: git's rows are skipped"),
    }
    let ctx = Ctx {
        tmp: args.dir.clone().unwrap_or_else(std::env::temp_dir),
        s: Sizes::from(&args),
        sessctl: sessctl.exists().then_some(sessctl),
        exe: exe.clone(),
        git: git_version.is_some(),
    };
    let mut rows: Vec<Row> = Vec::new();
    let steps: [(u32, &str, Scenario); 9] = [
        (1, "commit throughput", commit::run),
        (2, "load a history", history::load),
        (3, "lineage", lineage::run),
        (4, "gc and fsck", maintenance::run),
        (5, "bytes on disk", history::disk),
        (6, "list newest", list::run),
        (7, "processes at once", procs::run),
        (8, "remote store vs PostgreSQL", remote::run),
        (9, "flat cost at scale", scale::run),
    ];
    let total = Instant::now();
    for (n, name, step) in steps {
        if !args.only.is_empty() && !args.only.contains(&n) {
            continue;
        }
        let t = Instant::now();
        step(&ctx, &mut rows)?;
        eprintln!("sessctl-bench: {n} {name} done in {:.1}s", secs(t));
    }
    eprintln!("sessctl-bench: all done in {:.1}s", secs(total));
    // Scenarios 2 and 5 share a builder but print in their own places.
    rows.sort_by_key(|r| {
        r.scenario
            .split(' ')
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(u32::MAX)
    });
    report::print(&rows);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report::to_json(&rows, ctx.s.to_json()))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
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
