//! Scenarios 2 and 5: one long session (generated), loaded whole and
//! measured on disk with a fork at its middle; and the real transcripts of
//! `../shared/data`, imported, loaded and measured against their JSONL.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;
use sessctl_store::import::{import_paths, Format, ImportOptions};
use sessctl_store::{Cut, Durability, ForkOptions, ObjectId, RepackOptions, Store};

use crate::anchors::{jsonl_fork, jsonl_load, Jsonl, Snapshots, Sqlite, Thread};
use crate::report::{Better, Group, Row};
use crate::{dir_size, git, messages, ms, turn, Ctx, PER_TURN, R, T0};

/// The long session in every system, each loaded back once to check it.
struct Long {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    msgs: Vec<Value>,
    store: Store,
    head: ObjectId,
    jsonl: PathBuf,
    sqlite: Sqlite,
}

impl Long {
    fn build(ctx: &Ctx) -> R<Long> {
        let msgs = messages(2, ctx.s.messages);
        let tmp = tempfile::tempdir_in(&ctx.tmp)?;
        let dir = tmp.path().to_path_buf();

        let store = Store::init(&dir.join("sessctl"))?;
        let mut chunks = msgs.chunks(PER_TURN);
        let first = chunks.next().unwrap_or(&[]);
        let (_, mut head) = store.create(Some("c"), turn(first), Durability::NoSync)?;
        for ch in chunks {
            head = store.commit("c", None, turn(ch), Durability::NoSync)?;
        }
        store.repack(&RepackOptions::default())?;

        let jsonl = dir.join("s.jsonl");
        let mut j = Jsonl::create(&jsonl, false)?;
        for ch in msgs.chunks(PER_TURN) {
            j.append(ch)?;
        }
        drop(j);

        let mut sqlite = Sqlite::open(&dir.join("s.db"), false)?;
        sqlite.create_session("c", T0)?;
        let tx = sqlite.conn.transaction()?;
        for (i, m) in msgs.iter().enumerate() {
            tx.execute(
                "INSERT INTO messages(session_id, seq, message) VALUES ('c', ?1, ?2)",
                rusqlite::params![i as i64, serde_json::to_string(m)?],
            )?;
        }
        tx.commit()?;

        if store.odb().load_messages(&head)? != msgs
            || jsonl_load(&jsonl)? != msgs
            || sqlite.load("c")? != msgs
        {
            return Err("a loaded history differs from the one written".into());
        }
        Ok(Long {
            _dir: tmp,
            dir,
            msgs,
            store,
            head,
            jsonl,
            sqlite,
        })
    }
}

/// Times `f` `n` times in ms; every call must return `want` items.
fn time_n(n: usize, want: usize, f: &mut dyn FnMut() -> R<usize>) -> R<Vec<f64>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let got = f()?;
        v.push(ms(t));
        if got != want {
            return Err(format!("loaded {got} messages, not {want}").into());
        }
    }
    Ok(v)
}

/// Scenario 2.
pub fn load(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    let l = Long::build(ctx)?;
    let n = l.msgs.len();
    // Only the newest snapshot matters to a load (the primary key finds
    // it); the steps before it would hold n²/2 messages.
    let snaps = Snapshots::open(&l.dir.join("snap.db"), false)?;
    let mut th = Thread::default();
    snaps.step("c", &mut th, &l.msgs, T0)?;
    if snaps.load("c")? != l.msgs {
        return Err("2: the snapshot loads back differently".into());
    }

    // The bytes a caller that passes messages on gets: each verified
    // against its id, the canonical bytes of the messages written.
    let bytes = l.store.load_message_bytes(&l.head)?;
    if bytes.len() != n
        || bytes
            .iter()
            .zip(&l.msgs)
            .any(|(m, want)| m.value().ok().as_ref() != Some(want))
    {
        return Err("2: the verified bytes decode to other messages".into());
    }

    let loads = ctx.s.loads;
    let mut g = Group::new(format!("2 load {n}-message history"), "ms", Better::Lower).p99();
    g.add(
        "sessctl (packed)",
        time_n(loads, n, &mut || Ok(l.store.load_messages(&l.head)?.len()))?,
    );
    let jsonl = time_n(loads, n, &mut || Ok(jsonl_load(&l.jsonl)?.len()))?;
    g.add("jsonl", jsonl.clone());
    g.add(
        "sqlite delta",
        time_n(loads, n, &mut || Ok(l.sqlite.load("c")?.len()))?,
    );
    g.add(
        "sqlite snapshots (newest)",
        time_n(loads, n, &mut || Ok(snaps.load("c")?.len()))?,
    );
    crate::report::emit(out, g);

    // The representation a caller that only passes messages on chooses
    // (replay, export, a binding that parses JSON itself): every message's
    // canonical bytes, each hash-verified, no serde_json::Value built;
    // against the same JSONL anchor, parsed with serde_json.
    let mut g = Group::new(
        format!("2 load {n}-message history, verified bytes"),
        "ms",
        Better::Lower,
    )
    .p99();
    g.add(
        "sessctl (packed, verified bytes)",
        time_n(loads, n, &mut || {
            Ok(l.store.load_message_bytes(&l.head)?.len())
        })?,
    );
    g.add("jsonl", jsonl);
    crate::report::emit(out, g);

    let real = Real::import(ctx)?;
    let mut g = Group::new(
        format!(
            "2 load {} real transcripts ({} files)",
            real.heads.len(),
            real.files.len()
        ),
        "ms",
        Better::Lower,
    )
    .p99();
    let want: usize = real.messages;
    g.add(
        "sessctl (packed, every conv)",
        time_n(loads, want, &mut || {
            let mut got = 0;
            for h in &real.heads {
                got += real.store.load_messages(h)?.len();
            }
            Ok(got)
        })?,
    );
    let lines = real.lines;
    g.add(
        "jsonl (source files)",
        time_n(loads, lines, &mut || {
            let mut got = 0;
            for f in &real.files {
                got += jsonl_load(f)?.len();
            }
            Ok(got)
        })?,
    );
    crate::report::emit(out, g);
    crate::catchup::rows(ctx, out)
}

/// Scenario 5: bytes per turn, and what a fork at the middle adds.
pub fn disk(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    let l = Long::build(ctx)?;
    let n = l.msgs.len();
    let turns = n.div_ceil(PER_TURN);
    let dir = l.dir.as_path();
    let q = &l.sqlite;
    q.checkpoint()?;
    let db_size = |name: &str| -> u64 {
        [name.to_owned(), format!("{name}-wal")]
            .iter()
            .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
            .map(|m| m.len())
            .sum()
    };
    // Snapshots hold n²/2 messages: a long session's would not fit, so
    // they are measured over the first turns of it only.
    let snap_msgs = n.min(1000);
    let snap_turns = snap_msgs.div_ceil(PER_TURN);
    let snaps = Snapshots::open(&dir.join("snap.db"), false)?;
    let mut th = Thread::default();
    {
        let tx = snaps.conn.unchecked_transaction()?;
        for (i, ch) in l.msgs[..snap_msgs].chunks(PER_TURN).enumerate() {
            snaps.step("c", &mut th, ch, T0 + i as i64)?;
        }
        tx.commit()?;
    }
    snaps.checkpoint()?;

    let git_repo = if ctx.git(5) {
        Some(git_history(&dir.join("git"), &l.msgs)?)
    } else {
        None
    };

    let per = |b: u64, turns: usize| vec![b as f64 / turns as f64];
    let mut g = Group::new(
        format!("5 disk per turn, {n} msgs ({PER_TURN}/turn)"),
        "bytes/turn",
        Better::Lower,
    );
    let sessctl_before = l.store.odb().stats()?.disk_bytes();
    let sqlite_before = db_size("s.db");
    g.add("sessctl (objects, packed)", per(sessctl_before, turns));
    g.add("jsonl", per(std::fs::metadata(&l.jsonl)?.len(), turns));
    g.add("sqlite delta (checkpointed)", per(sqlite_before, turns));
    g.add(
        format!("sqlite snapshots, {snap_msgs} msgs"),
        per(db_size("snap.db"), snap_turns),
    );
    let git_before = match &git_repo {
        Some(r) => {
            let b = r.objects_bytes()?;
            g.add("git (repack -adf)", per(b, turns));
            b
        }
        None => 0,
    };
    let whole = dir_size(&dir.join("sessctl"))?;
    g.add("sessctl (whole dir)", per(whole, turns));
    crate::report::emit(out, g);

    // The two targets, each as its own ratio.
    let mut g = Group::new(
        "5 objects per turn vs a git pack",
        "bytes/turn",
        Better::Lower,
    );
    g.add("sessctl (objects alone)", per(sessctl_before, turns));
    if git_repo.is_some() {
        g.add("git pack (repack -adf)", per(git_before, turns));
    }
    crate::report::emit(out, g);
    let mut g = Group::new(
        "5 whole store dir per turn vs JSONL",
        "bytes/turn",
        Better::Lower,
    );
    g.add("sessctl (whole store dir)", per(whole, turns));
    g.add("jsonl", per(std::fs::metadata(&l.jsonl)?.len(), turns));
    crate::report::emit(out, g);
    breakdown(
        out,
        "5 whole dir breakdown",
        "bytes/turn",
        &dir.join("sessctl"),
        turns,
    )?;

    // A fork at the middle that adds 10 messages.
    let mid = n / 2;
    let added = messages(3, 10);
    let mut g = Group::new("5 fork at middle, +10 msgs", "bytes grown", Better::Lower);
    let (_, fork) = l.store.fork(
        l.head,
        ForkOptions {
            name: Some("fork".into()),
            cut: Some(Cut::AtMessage(mid as u64)),
            turn: Some(turn(&added)),
        },
        Durability::Sync,
    )?;
    let mut want = l.msgs[..mid].to_vec();
    want.extend(added.iter().cloned());
    if l.store.odb().load_messages(&fork)? != want {
        return Err("5: the sessctl fork loads back differently".into());
    }
    g.add(
        "sessctl (objects)",
        vec![(l.store.odb().stats()?.disk_bytes() - sessctl_before) as f64],
    );
    let fork_path = dir.join("fork.jsonl");
    let jsize = jsonl_fork(&l.jsonl, &fork_path, mid, &added, true)?;
    if jsonl_load(&fork_path)? != want {
        return Err("5: the JSONL fork loads back differently".into());
    }
    g.add("jsonl (copy prefix)", vec![jsize as f64]);
    {
        let tx = q.conn.unchecked_transaction()?;
        tx.execute(
            "INSERT INTO messages SELECT 'fork', seq, message FROM messages
             WHERE session_id='c' AND seq < ?1",
            [mid as i64],
        )?;
        tx.commit()?;
    }
    q.create_session("fork", T0)?;
    {
        let tx = q.conn.unchecked_transaction()?;
        for (k, m) in added.iter().enumerate() {
            tx.execute(
                "INSERT INTO messages(session_id, seq, message) VALUES ('fork', ?1, ?2)",
                rusqlite::params![(mid + k) as i64, serde_json::to_string(m)?],
            )?;
        }
        tx.commit()?;
    }
    if q.load("fork")? != want {
        return Err("5: the SQLite fork loads back differently".into());
    }
    q.checkpoint()?;
    g.add(
        "sqlite delta (copy rows)",
        vec![db_size("s.db").saturating_sub(sqlite_before) as f64],
    );
    let snap_before = db_size("snap.db");
    let snap_mid = snap_msgs / 2;
    snaps.fork("c", "fork", snap_mid, &added, T0)?;
    snaps.checkpoint()?;
    g.add(
        format!("sqlite snapshots (cut at {snap_mid})"),
        vec![db_size("snap.db").saturating_sub(snap_before) as f64],
    );
    if let Some(r) = &git_repo {
        let base = r.run(&["rev-parse", &format!("main~{}", turns - mid / PER_TURN)])?;
        r.fast_import(None, |w| {
            writeln!(w, "commit refs/heads/fork")?;
            git::committer(w, T0 / 1000 + turns as i64)?;
            git::data(w, b"fork")?;
            writeln!(w, "from {base}")?;
            for (k, m) in added.iter().enumerate() {
                file(w, mid + k, m)?;
            }
            writeln!(w)?;
            Ok(())
        })?;
        r.run(&["repack", "-adf", "-q"])?;
        g.add(
            "git (repack -adf)",
            vec![r.objects_bytes()?.saturating_sub(git_before) as f64],
        );
    }
    crate::report::emit(out, g);

    let real = Real::import(ctx)?;
    let mut g = Group::new(
        format!("5 disk per message, {} real messages", real.report_messages),
        "bytes/message",
        Better::Lower,
    );
    let per_msg = |b: u64| vec![b as f64 / real.report_messages.max(1) as f64];
    g.add(
        "sessctl (objects, packed)",
        per_msg(real.store.odb().stats()?.disk_bytes()),
    );
    g.add("jsonl (source files)", per_msg(real.bytes));
    g.add("sessctl (whole dir)", per_msg(dir_size(&real.path)?));
    crate::report::emit(out, g);
    let mut g = Group::new(
        "5 real: whole store dir per message vs JSONL",
        "bytes/message",
        Better::Lower,
    );
    g.add("sessctl (whole store dir)", per_msg(dir_size(&real.path)?));
    g.add("jsonl (source files)", per_msg(real.bytes));
    crate::report::emit(out, g);
    breakdown(
        out,
        "5 real: whole dir breakdown",
        "bytes/message",
        &real.path,
        real.report_messages.max(1),
    )?;
    Ok(())
}

/// What each part of a store directory takes, per unit (turn or message):
/// pack files, pack indexes, the journal, index tables, the lineage index,
/// the op log and the rest. Rows only, no ratio (every row is sessctl's).
fn breakdown(
    out: &mut Vec<Row>,
    scenario: &str,
    unit: &'static str,
    store: &Path,
    units: usize,
) -> R<()> {
    let mut parts: Vec<(&str, u64)> = vec![
        ("packs/*.pack", 0),
        ("packs/*.idx", 0),
        ("journal/", 0),
        ("index/", 0),
        ("lineage/", 0),
        ("oplog/", 0),
        ("other", 0),
    ];
    let mut add = |part: &str, b: u64| {
        let i = parts
            .iter()
            .position(|p| p.0 == part)
            .unwrap_or(parts.len() - 1);
        parts[i].1 += b;
    };
    for e in std::fs::read_dir(store)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if e.metadata()?.is_dir() {
            if name == "packs" {
                for f in std::fs::read_dir(e.path())? {
                    let f = f?;
                    let fname = f.file_name().to_string_lossy().into_owned();
                    let part = if fname.ends_with(".pack") {
                        "packs/*.pack"
                    } else if fname.ends_with(".idx") {
                        "packs/*.idx"
                    } else {
                        "other"
                    };
                    add(part, f.metadata()?.len());
                }
            } else {
                add(&format!("{name}/"), dir_size(&e.path())?);
            }
        } else {
            add("other", e.metadata()?.len());
        }
    }
    let mut g = Group::new(scenario, unit, Better::Lower);
    for (part, b) in parts {
        g.add(format!("sessctl: {part}"), vec![b as f64 / units as f64]);
    }
    crate::report::emit(out, g);
    Ok(())
}

/// A message as a file of the git anchor's tree: `m/<hundreds>/<index>.json`
/// (a directory per hundred keeps each commit's new trees small).
fn file(w: &mut dyn Write, i: usize, m: &Value) -> R<()> {
    writeln!(w, "M 100644 inline m/{:03}/{i:05}.json", i / 100)?;
    git::data(w, &serde_json::to_vec(m)?)
}

/// The long session as git history: a commit per turn adding the turn's
/// messages as files, on `main`; then repacked as `git gc` would.
fn git_history(dir: &Path, msgs: &[Value]) -> R<git::Repo> {
    let repo = git::Repo::init(dir)?;
    repo.fast_import(None, |w| {
        for (t, ch) in msgs.chunks(PER_TURN).enumerate() {
            writeln!(w, "commit refs/heads/main")?;
            git::committer(w, T0 / 1000 + t as i64)?;
            git::data(w, format!("turn {t}").as_bytes())?;
            for (k, m) in ch.iter().enumerate() {
                file(w, t * PER_TURN + k, m)?;
            }
            writeln!(w)?;
        }
        Ok(())
    })?;
    repo.run(&["repack", "-adf", "-q"])?;
    let count = repo.run(&["rev-list", "--count", "main"])?;
    if count != msgs.len().div_ceil(PER_TURN).to_string() {
        return Err(format!("5: git holds {count} commits").into());
    }
    Ok(repo)
}

/// The JSONL transcripts of `../shared/data` (Claude Code and Codex)
/// imported into a packed store.
struct Real {
    _dir: tempfile::TempDir,
    path: PathBuf,
    store: Store,
    /// Every conversation's head.
    heads: Vec<ObjectId>,
    /// Messages in those heads' histories.
    messages: usize,
    /// Messages the import reported.
    report_messages: usize,
    files: Vec<PathBuf>,
    /// Lines of the source files.
    lines: usize,
    bytes: u64,
}

impl Real {
    fn import(ctx: &Ctx) -> R<Real> {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data");
        let sources = [
            (Format::ClaudeCode, data.join("claude-code")),
            (Format::Codex, data.join("codex")),
        ];
        let tmp = tempfile::tempdir_in(&ctx.tmp)?;
        let path = tmp.path().join("sessctl");
        let store = Store::init(&path)?;
        let mut files = Vec::new();
        let mut report_messages = 0;
        for (format, dir) in &sources {
            if !dir.is_dir() {
                return Err(format!(
                    "{}: no such directory (the real transcripts)",
                    dir.display()
                )
                .into());
            }
            // Whole files: every turn they hold, the last ones too.
            let opts = ImportOptions {
                no_sync: true,
                finished: true,
                ..ImportOptions::default()
            };
            let r = import_paths(&store, *format, std::slice::from_ref(dir), &opts)?;
            report_messages += r.messages;
            // The harness's check: importing the same files again writes nothing.
            let again = import_paths(&store, *format, std::slice::from_ref(dir), &opts)?;
            if again.objects_written != 0 || again.refs_moved != 0 {
                return Err(format!(
                    "importing {} again wrote {} objects",
                    dir.display(),
                    again.objects_written
                )
                .into());
            }
            collect_jsonl(dir, &mut files)?;
        }
        files.sort();
        store.repack(&RepackOptions::default())?;
        let mut heads = Vec::new();
        let mut messages = 0;
        for c in store.conversations(None)? {
            if let Some(h) = c.head {
                messages += store.odb().load_messages(&h)?.len();
                heads.push(h);
            }
        }
        let mut lines = 0;
        let mut bytes = 0;
        for f in &files {
            lines += jsonl_load(f)?.len();
            bytes += std::fs::metadata(f)?.len();
        }
        if heads.is_empty() || messages == 0 {
            return Err("the real transcripts imported no messages".into());
        }
        Ok(Real {
            _dir: tmp,
            path,
            store,
            heads,
            messages,
            report_messages,
            files,
            lines,
            bytes,
        })
    }
}

fn collect_jsonl(dir: &Path, out: &mut Vec<PathBuf>) -> R<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect_jsonl(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            out.push(p);
        }
    }
    Ok(())
}
