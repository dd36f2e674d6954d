//! Scenario 9: flat cost at scale. A store of 100k sessions (with
//! `--huge`, 1M and 10M too), ten sessions to a conversation, built in bulk
//! (unsynced batches of objects, conversations registered 512 to an
//! operation, then a repack: the store as a user's is after maintenance,
//! with its lineage index and index tables). Then each query a user types
//! runs as a fresh `sessctl` process: open + `ls` of the 20 newest, `show`
//! of a session, `log -n 20`, `merge-base --is-ancestor`, and one durable
//! `commit`. Each size's rows carry the smallest size's as the anchor, so
//! the ratio is how much the cost grew with the store.
//!
//! The shape: conversation `c` holds ten sessions in a chain, each adding
//! two small messages (about 100 bytes: the store's bookkeeping is what is
//! measured, not message bytes); every odd conversation is a fork of the
//! one before it (its root's parent is that one's head), so its history
//! is 20 sessions deep and `log -n 20` shows 20.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::Value;
use sessctl_store::{ObjectId, RepackOptions, Store};

use crate::bulk::{self, Spec, Writer};
use crate::report::{Better, Group, Row};
use crate::support::Rng;
use crate::{dir_size, ms, secs, small_message, spawn, Ctx, R, T0};

/// Sessions per conversation.
const PER_CONVERSATION: usize = 10;
/// Messages each session adds.
const ADDED: usize = 2;

/// "100k", "1M", "10M".
pub fn label(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n.is_multiple_of(1_000_000) => format!("{}M", n / 1_000_000),
        n if n >= 1000 && n.is_multiple_of(1000) => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}

/// What was measured of one store: build figures and, per query, the
/// fresh-process times in ms.
#[derive(Debug, Clone)]
struct Measured {
    sessions: usize,
    build_s: f64,
    /// Seconds writing objects, registering conversations, repacking.
    phases: [f64; 3],
    /// CPU seconds (user and system, this process) of the same phases: on
    /// a machine shared with other work, what the wall clock cannot tell.
    cpu: [f64; 3],
    bytes: u64,
    queries: Vec<(&'static str, Vec<f64>)>,
}

/// The queries, in the order they run (the commit last: it changes what
/// `ls` lists first).
const QUERIES: [(&str, &str); 5] = [
    ("open + ls 20 newest", "sessctl ls --limit 20 --json"),
    ("show a session", "sessctl show ID"),
    ("log -n 20", "sessctl log -n 20 --oneline CONV"),
    (
        "merge-base --is-ancestor",
        "sessctl merge-base --is-ancestor A B",
    ),
    ("durable commit", "sessctl commit CONV --messages FILE"),
];

pub fn run(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    let Some(cli) = ctx.sessctl(9) else {
        return Ok(());
    };
    let mut done: Vec<Measured> = Vec::new();
    for &n in &ctx.s.scale {
        if let Some(prev) = done.last() {
            // Each store is deleted before the next is built; the next one
            // needs about n / prev times the bytes, twice over while the
            // repack writes its pack beside the journal.
            let need = prev.bytes as f64 / prev.sessions as f64 * n as f64 * 2.0;
            let free = free_bytes(&ctx.tmp).unwrap_or(u64::MAX) as f64;
            if need > 0.8 * free {
                ctx.note(&format!(
                    "9: a store of {} sessions needs about {:.1} GB while it is built, \
                     and {} has {:.1} GB free: skipped",
                    label(n),
                    need / 1e9,
                    ctx.tmp.display(),
                    free / 1e9
                ));
                continue;
            }
            eprintln!(
                "sessctl-bench: 9 {}: expecting about {:.2} GB on disk ({:.0} bytes a session at {})",
                label(n),
                need / 2e9,
                prev.bytes as f64 / prev.sessions as f64,
                label(prev.sessions)
            );
        }
        let m = measure(ctx, cli, n)?;
        emit(out, &m, done.first());
        done.push(m);
    }
    if let Some(first) = done.first() {
        let mut g = Group::new("9 scale: build (bulk, no-sync, repack)", "s", Better::Lower);
        for m in &done {
            g.add(
                format!("sessctl, {} sessions", label(m.sessions)),
                vec![m.build_s],
            );
        }
        crate::report::emit(out, g);
        let mut g = Group::new("9 scale: store bytes per session", "bytes", Better::Lower);
        for m in &done {
            g.add(
                format!("sessctl, {} sessions", label(m.sessions)),
                vec![m.bytes as f64 / m.sessions as f64],
            );
        }
        crate::report::emit(out, g);
        print_table(&done, first);
    }
    Ok(())
}

/// One size's rows: each query, with the first size's as its anchor.
fn emit(out: &mut Vec<Row>, m: &Measured, anchor: Option<&Measured>) {
    for (k, (what, samples)) in m.queries.iter().enumerate() {
        let mut g = Group::new(
            format!("9 scale {}: {what}", label(m.sessions)),
            "ms per process",
            Better::Lower,
        )
        .p99();
        g.add(format!("{} (process)", QUERIES[k].1), samples.clone());
        if let Some(a) = anchor {
            g.add(
                format!("the same on {} sessions", label(a.sessions)),
                a.queries[k].1.clone(),
            );
        }
        crate::report::emit(out, g);
    }
}

/// The table the issue asks for, on stderr: a row per size.
fn print_table(done: &[Measured], first: &Measured) {
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n == 0 {
            0.0
        } else if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    eprintln!(
        "sessctl-bench: 9 scale (median ms per fresh process; x: over the {} store)",
        label(first.sessions)
    );
    let mut head = format!(
        "{:>8} {:>10} {:>24} {:>24} {:>10}",
        "sessions", "build s", "(objects/refs/repack s)", "(cpu s)", "bytes/sess"
    );
    for (what, _) in QUERIES {
        head.push_str(&format!(" {what:>26}"));
    }
    eprintln!("{head}");
    for m in done {
        let mut line = format!(
            "{:>8} {:>10.1} {:>24} {:>24} {:>10.0}",
            label(m.sessions),
            m.build_s,
            format!("{:.1}/{:.1}/{:.1}", m.phases[0], m.phases[1], m.phases[2]),
            format!("{:.1}/{:.1}/{:.1}", m.cpu[0], m.cpu[1], m.cpu[2]),
            m.bytes as f64 / m.sessions as f64
        );
        for (k, (_, v)) in m.queries.iter().enumerate() {
            let t = median(v);
            let base = median(&first.queries[k].1);
            line.push_str(&format!(" {:>18.2} ({:>4.2}x)", t, t / base));
        }
        eprintln!("{line}");
    }
}

/// This process's CPU time so far, user and system, in seconds (Linux:
/// `/proc/self/stat`, in ticks of 1/100 s); 0 where it cannot be read.
fn cpu_secs() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // The fields after the command name, which is in parentheses: utime
    // and stime are the 14th and 15th of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let ticks: f64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// Free bytes on the file system holding `dir` (`df -Pk`).
fn free_bytes(dir: &Path) -> Option<u64> {
    let o = Command::new("df").arg("-Pk").arg(dir).output().ok()?;
    let text = String::from_utf8(o.stdout).ok()?;
    let kb: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// The generated store: every conversation's root and head.
struct Built {
    roots: Vec<ObjectId>,
    heads: Vec<ObjectId>,
}

fn name(c: usize) -> String {
    format!("c{c:07}")
}

/// Builds a store of `n` sessions at `path` (see the module docs).
fn build(path: &Path, n: usize, phases: &mut [f64; 3], cpu: &mut [f64; 3]) -> R<Built> {
    let store = Store::init(path)?;
    let convs = n.div_ceil(PER_CONVERSATION);
    let mut rng = Rng::new(9);
    let mut w = Writer::new(&store);
    let mut roots = Vec::with_capacity(convs);
    let mut heads: Vec<ObjectId> = Vec::with_capacity(convs);
    let t = Instant::now();
    let c0 = cpu_secs();
    let mut msgs: Vec<Value> = Vec::with_capacity(ADDED);
    for c in 0..convs {
        let tag = name(c);
        // An odd conversation forks the head of the one before it.
        let fork_of = (c % 2 == 1).then(|| heads[c - 1]);
        let mut base = if fork_of.is_some() {
            (PER_CONVERSATION * ADDED) as u64
        } else {
            0
        };
        let mut root = None;
        let mut at = fork_of;
        let here = PER_CONVERSATION.min(n - c * PER_CONVERSATION);
        for k in 0..here {
            msgs.clear();
            msgs.extend((0..ADDED).map(|i| small_message(&tag, k * ADDED + i, &mut rng)));
            let id = w.session(Spec {
                parents: at.into_iter().collect(),
                created_at: T0 + ((c * PER_CONVERSATION + k) as i64) * 1000,
                conversation: root,
                base,
                added: &msgs,
            })?;
            root = root.or(Some(id));
            at = Some(id);
            base += ADDED as u64;
        }
        roots.push(root.ok_or("a conversation without sessions")?);
        heads.push(at.ok_or("a conversation without sessions")?);
    }
    w.flush()?;
    phases[0] = secs(t);
    let c1 = cpu_secs();
    cpu[0] = c1 - c0;
    let t = Instant::now();
    let regs: Vec<bulk::Conversation> = (0..convs)
        .map(|c| {
            let first = T0 + ((c * PER_CONVERSATION) as i64) * 1000;
            bulk::Conversation {
                name: name(c),
                head: heads[c],
                id: roots[c],
                created_at: first,
                updated_at: first + (PER_CONVERSATION as i64 - 1) * 1000,
            }
        })
        .collect();
    bulk::register(&store, &regs)?;
    phases[1] = secs(t);
    let c2 = cpu_secs();
    cpu[1] = c2 - c1;
    let t = Instant::now();
    // Merged into one pack as packing as writes go merges (blocks copied):
    // a cold repack would write every block of 10M sessions again.
    store.repack(&RepackOptions::hot())?;
    phases[2] = secs(t);
    cpu[2] = cpu_secs() - c2;
    Ok(Built { roots, heads })
}

fn measure(ctx: &Ctx, cli: &Path, n: usize) -> R<Measured> {
    let tmp = tempfile::tempdir_in(&ctx.tmp)?;
    let spath = tmp.path().join("sessctl");
    let t = Instant::now();
    let mut phases = [0.0; 3];
    let mut cpu = [0.0; 3];
    let built = build(&spath, n, &mut phases, &mut cpu)?;
    let build_s = secs(t);
    let bytes = dir_size(&spath)?;
    eprintln!(
        "sessctl-bench: 9 {}: built in {build_s:.1}s (objects {:.1}s, conversations {:.1}s, \
         repack {:.1}s; CPU {:.1}/{:.1}/{:.1}s), {:.0} bytes a session",
        label(n),
        phases[0],
        phases[1],
        phases[2],
        cpu[0],
        cpu[1],
        cpu[2],
        bytes as f64 / n as f64
    );
    let convs = built.heads.len();
    // A fork in the middle of the store: its history is 20 deep.
    let m = (convs / 2) | 1;
    let m = if m < convs { m } else { convs - 1 };
    let cmd = |args: &[&str]| -> Command {
        let mut c = Command::new(cli);
        c.arg("--store").arg(&spath).args(args);
        c
    };
    let runs = ctx.s.spawns;
    let mut queries: Vec<(&'static str, Vec<f64>)> = Vec::new();

    // ls: the 20 most recently active conversations.
    let want: Vec<String> = (0..convs).rev().take(20).map(name).collect();
    let mut v = Vec::new();
    for _ in 0..runs {
        let (dt, o) = spawn(&mut cmd(&["ls", "--limit", "20", "--json"]), &[0])?;
        let listed: Value = serde_json::from_slice(&o.stdout)?;
        let got: Vec<String> = listed
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        if got != want {
            return Err(format!("9 {}: ls listed {got:?}, not {want:?}", label(n)).into());
        }
        v.push(dt);
    }
    queries.push((QUERIES[0].0, v));

    // show: the middle conversation's head, by its full id.
    let head = built.heads[m].to_string();
    let mut v = Vec::new();
    for _ in 0..runs {
        let (dt, o) = spawn(&mut cmd(&["show", &head]), &[0])?;
        if !String::from_utf8_lossy(&o.stdout).contains(&head[..12]) {
            return Err(format!("9 {}: show did not name {head}", label(n)).into());
        }
        v.push(dt);
    }
    queries.push((QUERIES[1].0, v));

    // log -n 20: the fork's ten and the ten before it.
    let conv = name(m);
    let mut v = Vec::new();
    for _ in 0..runs {
        let (dt, o) = spawn(&mut cmd(&["log", "-n", "20", "--oneline", &conv]), &[0])?;
        let lines = o
            .stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count();
        let deep = if m % 2 == 1 { 20 } else { PER_CONVERSATION };
        if lines != deep.min(20) {
            return Err(format!("9 {}: log showed {lines} sessions", label(n)).into());
        }
        v.push(dt);
    }
    queries.push((QUERIES[2].0, v));

    // merge-base --is-ancestor: the root of the conversation forked, and
    // the fork's head (true: the walk covers the whole line).
    let a = built.roots[m.saturating_sub(1)].to_string();
    let mut v = Vec::new();
    for _ in 0..runs {
        v.push(spawn(&mut cmd(&["merge-base", "--is-ancestor", &a, &head]), &[0])?.0);
    }
    queries.push((QUERIES[3].0, v));

    // One durable commit a process, each continuing the conversation.
    let file = tmp.path().join("turn.json");
    std::fs::write(
        &file,
        r#"[{"role":"user","content":"one more question"},{"role":"assistant","content":"one more answer"}]"#,
    )?;
    let file = file.to_string_lossy().into_owned();
    let mut v = Vec::new();
    for _ in 0..runs {
        v.push(spawn(&mut cmd(&["commit", &conv, "--messages", &file]), &[0])?.0);
    }
    queries.push((QUERIES[4].0, v));

    if ctx.s.keep_stores {
        eprintln!(
            "sessctl-bench: 9 {}: measured; the store is kept at {}",
            label(n),
            tmp.keep().join("sessctl").display()
        );
    } else {
        let t = Instant::now();
        drop(tmp);
        eprintln!(
            "sessctl-bench: 9 {}: measured; store deleted in {:.0} ms",
            label(n),
            ms(t)
        );
    }
    Ok(Measured {
        sessions: n,
        build_s,
        phases,
        cpu,
        bytes,
        queries,
    })
}
