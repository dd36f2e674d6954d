//! Scenario 1: commit throughput. One writer on one conversation, durable
//! (one fdatasync per commit) and not; 16 and 64 conversations written at
//! once by a thread each (sessctl shares syncs between them); many short
//! conversations of which a fifth are forks. Anchors: JSONL, SQLite as a
//! delta table and as full snapshots, git plumbing, and the disk's own
//! fdatasync rate.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use sessctl_store::{Cut, Durability, ForkOptions, ObjectId, Store, Turn};

use crate::anchors::{
    fdatasync_overwrite_rate, fdatasync_rate, jsonl_fork, jsonl_load, thread_cpu, Jsonl, Snapshots,
    Sqlite, Thread,
};
use crate::report::{Better, Group, Row};
use crate::support::Rng;
use crate::{durability, git, messages, secs, turn, Ctx, R, T0};

/// Snapshots grow with the history (the table holds n²/2 messages), so the
/// snapshot anchor writes at most this many steps of a long conversation.
const SNAPSHOT_CAP: usize = 500;

pub fn run(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    for sync in [true, false] {
        one_writer(ctx, sync, out)?;
    }
    for &threads in &ctx.s.threads {
        for sync in [true, false] {
            concurrent(ctx, threads, sync, out)?;
        }
    }
    many_conversations(ctx, out)
}

fn label(sync: bool) -> &'static str {
    if sync {
        "durable"
    } else {
        "no-sync"
    }
}

/// One conversation, one message per commit.
fn one_writer(ctx: &Ctx, sync: bool, out: &mut Vec<Row>) -> R<()> {
    let s = &ctx.s;
    let n = if sync { s.commits } else { s.turns };
    let snap_n = n.min(SNAPSHOT_CAP);
    let msgs = messages(1, n);
    let mut g = Group::new(
        format!("1 commit, 1 conv x {n} turns, {}", label(sync)),
        "commits/s",
        Better::Higher,
    );
    let mut rows: [Vec<f64>; 7] = Default::default();
    // CPU per commit on the committing thread (every commit runs there):
    // sessctl, then SQLite delta.
    let mut cpu: [Vec<f64>; 2] = Default::default();
    let use_git = ctx.git(1);
    for rep in 0..s.reps {
        let dir = tempfile::tempdir_in(&ctx.tmp)?;
        let store = Store::init(&dir.path().join("sessctl"))?;
        store.create(Some("c"), Turn::default(), durability(sync))?;
        let turns: Vec<Turn> = msgs.iter().map(|m| turn(std::slice::from_ref(m))).collect();
        let c0 = thread_cpu();
        let t = Instant::now();
        let mut head = None;
        for tu in turns {
            head = Some(store.commit("c", None, tu, durability(sync))?);
        }
        rows[0].push(n as f64 / secs(t));
        if let (Some(a), Some(b)) = (c0, thread_cpu()) {
            cpu[0].push((b - a) / n as f64 * 1e6);
        }

        let jpath = dir.path().join("s.jsonl");
        let mut j = Jsonl::create(&jpath, sync)?;
        let t = Instant::now();
        for m in &msgs {
            j.append(std::slice::from_ref(m))?;
        }
        rows[1].push(n as f64 / secs(t));

        let mut q = Sqlite::open(&dir.path().join("s.db"), sync)?;
        q.create_session("c", T0)?;
        let c0 = thread_cpu();
        let t = Instant::now();
        for (i, m) in msgs.iter().enumerate() {
            q.append("c", i as i64, std::slice::from_ref(m), T0 + i as i64)?;
        }
        rows[2].push(n as f64 / secs(t));
        if let (Some(a), Some(b)) = (c0, thread_cpu()) {
            cpu[1].push((b - a) / n as f64 * 1e6);
        }

        let snaps = Snapshots::open(&dir.path().join("snap.db"), sync)?;
        let mut thread = Thread::default();
        let t = Instant::now();
        for (i, m) in msgs[..snap_n].iter().enumerate() {
            snaps.step("c", &mut thread, std::slice::from_ref(m), T0 + i as i64)?;
        }
        rows[3].push(snap_n as f64 / secs(t));

        if sync {
            rows[4].push(fdatasync_rate(&dir.path().join("sync.log"), n)?);
            rows[6].push(fdatasync_overwrite_rate(&dir.path().join("sync.over"), n)?);
        }
        if use_git {
            let repo = git::Repo::init(&dir.path().join("git"))?;
            let k = s.git_commits;
            let mut parent: Option<String> = None;
            let t = Instant::now();
            for m in &msgs[..k.min(n)] {
                let bytes = serde_json::to_vec(m)?;
                parent = Some(git::plumbing_commit(
                    &repo,
                    &bytes,
                    parent.as_deref(),
                    sync,
                )?);
            }
            rows[5].push(k.min(n) as f64 / secs(t));
            if rep == 0 {
                let count = repo.run(&["rev-list", "--count", "main"])?;
                if count != k.min(n).to_string() {
                    return Err(format!("git holds {count} commits, not {}", k.min(n)).into());
                }
            }
        }
        if rep == 0 {
            let head = head.ok_or("no commit was made")?;
            if store.odb().load_messages(&head)? != msgs
                || jsonl_load(&jpath)? != msgs
                || q.load("c")? != msgs
                || snaps.load("c")? != msgs[..snap_n]
            {
                return Err("1: a loaded history differs from the one written".into());
            }
        }
    }
    let [a, b, c, d, e, f, over] = rows;
    g.add("sessctl", a);
    g.add(if sync { "jsonl (fdatasync)" } else { "jsonl" }, b);
    g.add(
        if sync {
            "sqlite delta (FULL)"
        } else {
            "sqlite delta (NORMAL)"
        },
        c,
    );
    let snap_label = if sync {
        "sqlite snapshots (FULL)"
    } else {
        "sqlite snapshots (NORMAL)"
    };
    g.add(
        if snap_n < n {
            format!("{snap_label}, {snap_n} turns")
        } else {
            snap_label.to_owned()
        },
        d,
    );
    g.add("fdatasync loop (the disk)", e);
    let git_label = if sync {
        "git plumbing (fsync=all)"
    } else {
        "git plumbing (fsync=none)"
    };
    g.add(format!("{git_label}, {} turns", s.git_commits.min(n)), f);
    g.add("fdatasync loop, overwriting written blocks", over);
    crate::report::emit(out, g);
    let [cs, cq] = cpu;
    if !cs.is_empty() {
        let mut g = Group::new(
            format!("1 commit, 1 conv x {n} turns, {}: CPU", label(sync)),
            "us CPU/commit",
            Better::Lower,
        );
        g.add("sessctl (the committing thread)", cs);
        g.add(
            if sync {
                "sqlite delta (FULL)"
            } else {
                "sqlite delta (NORMAL)"
            },
            cq,
        );
        crate::report::emit(out, g);
    }
    Ok(())
}

/// `threads` conversations, each written by its own thread.
fn concurrent(ctx: &Ctx, threads: usize, sync: bool, out: &mut Vec<Row>) -> R<()> {
    let s = &ctx.s;
    let total = if sync { s.commits * 2 } else { s.turns };
    let per = (total / threads).max(2);
    let mut g = Group::new(
        format!("1 commit, {threads} convs at once, {}", label(sync)),
        "commits/s",
        Better::Higher,
    );
    let d = durability(sync);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..s.reps {
        let dir = tempfile::tempdir_in(&ctx.tmp)?;
        let store = Arc::new(Store::init(&dir.path().join("sessctl"))?);
        for t in 0..threads {
            store.create(Some(&format!("c{t}")), Turn::default(), d)?;
        }
        let per_thread: Vec<Vec<Value>> =
            (0..threads).map(|t| messages(10 + t as u64, per)).collect();
        let t0 = Instant::now();
        let hs: Vec<_> = per_thread
            .iter()
            .cloned()
            .enumerate()
            .map(|(t, msgs)| {
                let store = store.clone();
                std::thread::spawn(move || -> R<ObjectId> {
                    let mut head = None;
                    for m in &msgs {
                        let tu = turn(std::slice::from_ref(m));
                        head = Some(store.commit(&format!("c{t}"), None, tu, d)?);
                    }
                    Ok(head.ok_or("no commit")?)
                })
            })
            .collect();
        let mut heads = Vec::new();
        for h in hs {
            heads.push(h.join().map_err(|_| "a writer thread panicked")??);
        }
        a.push((per * threads) as f64 / secs(t0));

        // A file per conversation, each appended (and synced) by its thread.
        let t0 = Instant::now();
        let hs: Vec<_> = per_thread
            .iter()
            .cloned()
            .enumerate()
            .map(|(t, msgs)| {
                let path = dir.path().join(format!("c{t}.jsonl"));
                std::thread::spawn(move || -> R<()> {
                    let mut j = Jsonl::create(&path, sync)?;
                    for m in &msgs {
                        j.append(std::slice::from_ref(m))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().map_err(|_| "a writer thread panicked")??;
        }
        b.push((per * threads) as f64 / secs(t0));

        let db = dir.path().join("s.db");
        {
            let q = Sqlite::open(&db, sync)?;
            for t in 0..threads {
                q.create_session(&format!("c{t}"), T0)?;
            }
        }
        // One connection behind a mutex, as SQLiteSession shares one with a
        // lock: a connection per thread would spend its time in SQLite's
        // busy handler, sleeping.
        let q = Arc::new(Mutex::new(Sqlite::open(&db, sync)?));
        let t0 = Instant::now();
        let hs: Vec<_> = per_thread
            .iter()
            .cloned()
            .enumerate()
            .map(|(t, msgs)| {
                let q = q.clone();
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
        c.push((per * threads) as f64 / secs(t0));

        if rep == 0 {
            let q = q.lock().map_err(|_| "the connection's lock is poisoned")?;
            for (t, msgs) in per_thread.iter().enumerate() {
                if store.odb().load_messages(&heads[t])? != *msgs
                    || jsonl_load(&dir.path().join(format!("c{t}.jsonl")))? != *msgs
                    || q.load(&format!("c{t}"))? != *msgs
                {
                    return Err(format!("1: conversation c{t} loads back differently").into());
                }
            }
        }
    }
    g.add("sessctl", a);
    g.add(
        if sync {
            "jsonl (fdatasync), file each"
        } else {
            "jsonl, file each"
        },
        b,
    );
    g.add(
        if sync {
            "sqlite delta (FULL), 1 conn"
        } else {
            "sqlite delta (NORMAL), 1 conn"
        },
        c,
    );
    crate::report::emit(out, g);
    Ok(())
}

/// What conversation `c` of the many-conversations workload is.
#[derive(Debug, Clone, Copy)]
enum Start {
    New,
    /// A fork of conversation `from` keeping its first `keep` messages.
    Fork {
        from: usize,
        keep: usize,
    },
}

/// Many short conversations, one after another; a fifth of them fork an
/// earlier one at a random message. Unsynced: its point is the work per
/// commit and per fork, not the disk.
fn many_conversations(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    let s = &ctx.s;
    let (n, k) = (s.convs, s.conv_turns);
    let mut rng = Rng::new(7);
    let mut plan = Vec::with_capacity(n);
    let mut lens: Vec<usize> = Vec::with_capacity(n);
    // Each history as (conversation, message index) pairs, to check loads.
    let mut expect: Vec<Vec<(usize, usize)>> = Vec::with_capacity(n);
    for c in 0..n {
        let start = if c > 0 && rng.below(5) == 0 {
            let from = rng.below(c as u64) as usize;
            let keep = 1 + rng.below(lens[from] as u64) as usize;
            Start::Fork { from, keep }
        } else {
            Start::New
        };
        let mut e = match start {
            Start::New => Vec::new(),
            Start::Fork { from, keep } => expect[from][..keep].to_vec(),
        };
        e.extend((0..k).map(|i| (c, i)));
        lens.push(e.len());
        expect.push(e);
        plan.push(start);
    }
    let msgs: Vec<Vec<Value>> = (0..n).map(|c| messages(1000 + c as u64, k)).collect();
    let history = |c: usize| -> Vec<Value> {
        expect[c]
            .iter()
            .map(|&(cc, i)| msgs[cc][i].clone())
            .collect()
    };
    let forks = plan
        .iter()
        .filter(|p| matches!(p, Start::Fork { .. }))
        .count();
    let mut g = Group::new(
        format!("1 commit, {n} convs x {k} turns, {forks} forks, no-sync"),
        "commits/s",
        Better::Higher,
    );
    let total = (n * k) as f64;
    let check_every = if s.quick { 1 } else { 97 };
    let mut rows: [Vec<f64>; 4] = Default::default();
    for rep in 0..s.reps {
        let dir = tempfile::tempdir_in(&ctx.tmp)?;
        let name = |c: usize| format!("c{c:05}");

        let store = Store::init(&dir.path().join("sessctl"))?;
        let mut heads: Vec<ObjectId> = Vec::with_capacity(n);
        let t = Instant::now();
        for (c, start) in plan.iter().enumerate() {
            let first = turn(&msgs[c][..1]);
            let mut head = match *start {
                Start::New => store.create(Some(&name(c)), first, Durability::NoSync)?.1,
                Start::Fork { from, keep } => {
                    let opts = ForkOptions {
                        name: Some(name(c)),
                        cut: Some(Cut::AtMessage(keep as u64)),
                        turn: Some(first),
                    };
                    store.fork(heads[from], opts, Durability::NoSync)?.1
                }
            };
            for m in &msgs[c][1..] {
                let tu = turn(std::slice::from_ref(m));
                head = store.commit(&name(c), None, tu, Durability::NoSync)?;
            }
            heads.push(head);
        }
        rows[0].push(total / secs(t));

        let path = |c: usize| dir.path().join(format!("{}.jsonl", name(c)));
        let t = Instant::now();
        for (c, start) in plan.iter().enumerate() {
            if let Start::Fork { from, keep } = *start {
                jsonl_fork(&path(from), &path(c), keep, &msgs[c][..1], false)?;
            } else {
                Jsonl::create(&path(c), false)?.append(&msgs[c][..1])?;
            }
            let mut j = Jsonl::create(&path(c), false)?;
            for m in &msgs[c][1..] {
                j.append(std::slice::from_ref(m))?;
            }
        }
        rows[1].push(total / secs(t));

        let mut q = Sqlite::open(&dir.path().join("s.db"), false)?;
        let t = Instant::now();
        for (c, start) in plan.iter().enumerate() {
            let mut seq = 0;
            if let Start::Fork { from, keep } = *start {
                let tx = q.conn.transaction()?;
                tx.execute(
                    "INSERT INTO sessions(session_id, created_at, updated_at) VALUES (?1, ?2, ?2)",
                    rusqlite::params![name(c), T0],
                )?;
                tx.execute(
                    "INSERT INTO messages(session_id, seq, message)
                     SELECT ?1, seq, message FROM messages WHERE session_id=?2 AND seq < ?3",
                    rusqlite::params![name(c), name(from), keep as i64],
                )?;
                tx.commit()?;
                seq = keep as i64;
            } else {
                q.create_session(&name(c), T0)?;
            }
            for (i, m) in msgs[c].iter().enumerate() {
                q.append(&name(c), seq + i as i64, std::slice::from_ref(m), T0)?;
            }
        }
        rows[2].push(total / secs(t));

        let snaps = Snapshots::open(&dir.path().join("snap.db"), false)?;
        let t = Instant::now();
        for (c, start) in plan.iter().enumerate() {
            let mut th = match *start {
                Start::Fork { from, keep } => {
                    snaps.fork(&name(from), &name(c), keep, &msgs[c][..1], T0)?
                }
                Start::New => {
                    let mut th = Thread::default();
                    snaps.step(&name(c), &mut th, &msgs[c][..1], T0)?;
                    th
                }
            };
            for m in &msgs[c][1..] {
                snaps.step(&name(c), &mut th, std::slice::from_ref(m), T0)?;
            }
        }
        rows[3].push(total / secs(t));

        if rep == 0 {
            for c in (0..n).step_by(check_every) {
                let want = history(c);
                if store.odb().load_messages(&heads[c])? != want
                    || jsonl_load(&path(c))? != want
                    || q.load(&name(c))? != want
                    || snaps.load(&name(c))? != want
                {
                    return Err(
                        format!("1: conversation {} loads back differently", name(c)).into(),
                    );
                }
            }
        }
    }
    let [a, b, c, d] = rows;
    g.add("sessctl (fork: Store::fork)", a);
    g.add("jsonl (fork: copy prefix)", b);
    g.add("sqlite delta (fork: copy rows)", c);
    g.add("sqlite snapshots (fork: cut)", d);
    crate::report::emit(out, g);
    Ok(())
}
