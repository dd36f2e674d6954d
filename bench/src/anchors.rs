//! The anchors, each written the way a competent user would: one JSONL file
//! per session; SQLite in WAL mode with a delta table of messages (the
//! OpenAI Agents SDK's SQLiteSession layout) or a table of full snapshots,
//! one per step (LangGraph's SqliteSaver); the disk's own fdatasync rate.
//! git is in `git.rs`. Never times anything itself.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use rusqlite::{params, Connection};
use serde_json::Value;

use crate::R;

/// A session as one JSONL file: a line per message.
#[derive(Debug)]
pub struct Jsonl {
    file: File,
    sync: bool,
}

impl Jsonl {
    pub fn create(path: &Path, sync: bool) -> R<Jsonl> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Jsonl { file, sync })
    }

    /// One turn: its lines in one write, then `fdatasync` when durable.
    pub fn append(&mut self, messages: &[Value]) -> R<()> {
        let mut buf = Vec::new();
        for m in messages {
            serde_json::to_writer(&mut buf, m)?;
            buf.push(b'\n');
        }
        self.file.write_all(&buf)?;
        if self.sync {
            self.file.sync_data()?;
        }
        Ok(())
    }
}

pub fn jsonl_load(path: &Path) -> R<Vec<Value>> {
    let text = std::fs::read_to_string(path)?;
    let mut out = Vec::new();
    for line in text.lines() {
        out.push(serde_json::from_str(line)?);
    }
    Ok(out)
}

/// Forks a JSONL session: the first `keep` lines copied into a new file,
/// then `added` (synced when `sync`). Returns the new file's size.
pub fn jsonl_fork(from: &Path, to: &Path, keep: usize, added: &[Value], sync: bool) -> R<u64> {
    let bytes = std::fs::read(from)?;
    let end = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(keep.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    let mut out = File::create(to)?;
    out.write_all(&bytes[..if keep == 0 { 0 } else { end }])?;
    let mut j = Jsonl { file: out, sync };
    j.append(added)?;
    Ok(std::fs::metadata(to)?.len())
}

/// A connection in WAL mode that waits up to 30 s for a busy database.
fn wal_connection(path: &Path) -> R<Connection> {
    let conn = Connection::open(path)?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    if mode != "wal" {
        return Err(format!("sqlite: journal_mode is {mode}, not wal").into());
    }
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    Ok(conn)
}

/// A SQLite store of sessions in WAL mode.
#[derive(Debug)]
pub struct Sqlite {
    pub conn: Connection,
}

impl Sqlite {
    /// `full`: `synchronous=FULL` (durable) or `NORMAL`.
    pub fn open(path: &Path, full: bool) -> R<Sqlite> {
        let conn = wal_connection(path)?;
        conn.execute_batch(&format!(
            "PRAGMA synchronous={};
             CREATE TABLE IF NOT EXISTS sessions(
                 session_id TEXT PRIMARY KEY, created_at INTEGER, updated_at INTEGER);
             CREATE INDEX IF NOT EXISTS sessions_updated ON sessions(updated_at);
             CREATE TABLE IF NOT EXISTS messages(
                 session_id TEXT, seq INTEGER, message TEXT,
                 PRIMARY KEY(session_id, seq));",
            if full { "FULL" } else { "NORMAL" }
        ))?;
        Ok(Sqlite { conn })
    }

    pub fn create_session(&self, id: &str, at: i64) -> R<()> {
        self.conn.execute(
            "INSERT INTO sessions(session_id, created_at, updated_at) VALUES (?1, ?2, ?2)",
            params![id, at],
        )?;
        Ok(())
    }

    /// One turn: its messages and the session's `updated_at` in one
    /// transaction (as SQLiteSession.add_items does).
    pub fn append(&mut self, id: &str, seq: i64, messages: &[Value], at: i64) -> R<()> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        {
            let mut ins = tx.prepare_cached(
                "INSERT INTO messages(session_id, seq, message) VALUES (?1, ?2, ?3)",
            )?;
            for (k, m) in messages.iter().enumerate() {
                ins.execute(params![id, seq + k as i64, serde_json::to_string(m)?])?;
            }
            tx.prepare_cached("UPDATE sessions SET updated_at=?2 WHERE session_id=?1")?
                .execute(params![id, at])?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn load(&self, id: &str) -> R<Vec<Value>> {
        let mut q = self
            .conn
            .prepare_cached("SELECT message FROM messages WHERE session_id=?1 ORDER BY seq")?;
        let mut rows = q.query(params![id])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let text: String = row.get(0)?;
            out.push(serde_json::from_str(&text)?);
        }
        Ok(out)
    }

    /// Folds the WAL back into the database file.
    pub fn checkpoint(&self) -> R<()> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// The 20 most recently updated sessions, with their message count and
    /// a preview of the last message: what a `ls` shows.
    pub fn newest(&self, limit: usize) -> R<Vec<Value>> {
        let mut q = self.conn.prepare(
            "SELECT s.session_id, s.updated_at,
                    (SELECT count(*) FROM messages m WHERE m.session_id = s.session_id),
                    (SELECT message FROM messages m WHERE m.session_id = s.session_id
                     ORDER BY seq DESC LIMIT 1)
             FROM sessions s ORDER BY s.updated_at DESC LIMIT ?1",
        )?;
        let mut rows = q.query(params![limit as i64])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let last: Option<String> = row.get(3)?;
            let preview = match last {
                Some(text) => {
                    let v: Value = serde_json::from_str(&text)?;
                    let c = v["content"].as_str().unwrap_or_default();
                    c.chars().take(60).collect::<String>()
                }
                None => String::new(),
            };
            out.push(serde_json::json!({
                "name": row.get::<_, String>(0)?,
                "updated_at": row.get::<_, i64>(1)?,
                "messages": row.get::<_, i64>(2)?,
                "preview": preview,
            }));
        }
        Ok(out)
    }
}

/// A session as rows of full snapshots, as LangGraph's SqliteSaver keeps
/// checkpoints: every step inserts the whole message list so far as one
/// JSON blob; a load reads the newest. Same connection settings as
/// [`Sqlite`].
#[derive(Debug)]
pub struct Snapshots {
    pub conn: Connection,
}

/// One thread's state as the writer keeps it between steps: the messages
/// serialized once, so a step costs its write, not a re-serialization.
#[derive(Debug, Default, Clone)]
pub struct Thread {
    /// `[m0,m1,...` without the closing bracket.
    json: Vec<u8>,
    pub len: usize,
    pub step: i64,
}

impl Thread {
    fn push(&mut self, messages: &[Value]) -> R<()> {
        for m in messages {
            self.json.push(if self.len == 0 { b'[' } else { b',' });
            serde_json::to_writer(&mut self.json, m)?;
            self.len += 1;
        }
        Ok(())
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.json.len() + 2);
        if self.len == 0 {
            out.push(b'[');
        } else {
            out.extend_from_slice(&self.json);
        }
        out.push(b']');
        out
    }
}

impl Snapshots {
    pub fn open(path: &Path, full: bool) -> R<Snapshots> {
        let conn = wal_connection(path)?;
        conn.execute_batch(&format!(
            "PRAGMA synchronous={};
             CREATE TABLE IF NOT EXISTS checkpoints(
                 thread_id TEXT, step INTEGER, parent_step INTEGER, created_at INTEGER,
                 state BLOB, PRIMARY KEY(thread_id, step));",
            if full { "FULL" } else { "NORMAL" }
        ))?;
        Ok(Snapshots { conn })
    }

    /// One step: the thread's messages plus `added`, as a new row.
    pub fn step(&self, thread: &str, state: &mut Thread, added: &[Value], at: i64) -> R<()> {
        state.push(added)?;
        state.step += 1;
        self.conn
            .prepare_cached(
                "INSERT INTO checkpoints(thread_id, step, parent_step, created_at, state)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                thread,
                state.step,
                state.step - 1,
                at,
                state.snapshot()
            ])?;
        Ok(())
    }

    /// A fork: a new thread whose first step is the source's newest snapshot
    /// cut at `keep` messages, plus `added`. Returns the new thread's state.
    pub fn fork(&self, from: &str, to: &str, keep: usize, added: &[Value], at: i64) -> R<Thread> {
        let mut all = self.load(from)?;
        all.truncate(keep);
        let mut t = Thread::default();
        t.push(&all)?;
        self.step(to, &mut t, added, at)?;
        Ok(t)
    }

    pub fn load(&self, thread: &str) -> R<Vec<Value>> {
        let bytes: Vec<u8> = self
            .conn
            .prepare_cached(
                "SELECT state FROM checkpoints WHERE thread_id=?1 ORDER BY step DESC LIMIT 1",
            )?
            .query_row(params![thread], |r| r.get(0))?;
        Ok(serde_json::from_slice(&bytes)?)
    }

    pub fn checkpoint(&self) -> R<()> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }
}

/// The disk's own rate: `n` small appends to one file, each followed by
/// `fdatasync`. Returns syncs per second. Each append changes the file's
/// size, so each sync writes the inode as well as the data block (as a
/// plain append-only log's would); [`fdatasync_overwrite_rate`] is the
/// disk's floor without that.
pub fn fdatasync_rate(path: &Path, n: usize) -> R<f64> {
    let mut f = OpenOptions::new().create(true).append(true).open(path)?;
    let line = [b'x'; 63];
    let t = std::time::Instant::now();
    for _ in 0..n {
        f.write_all(&line)?;
        f.write_all(b"\n")?;
        f.sync_data()?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// The disk's floor: `n` small writes, each followed by `fdatasync`, into
/// blocks of a file written (with zeros) and synced beforehand, so that no
/// sync changes the file's size or allocation: what a sync that writes one
/// data block costs. Returns syncs per second.
pub fn fdatasync_overwrite_rate(path: &Path, n: usize) -> R<f64> {
    use std::os::unix::fs::FileExt;
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)?;
    let line = [b'x'; 64];
    f.write_all_at(&vec![0u8; (n + 1) * line.len()], 0)?;
    f.sync_all()?;
    let t = std::time::Instant::now();
    for i in 0..n {
        f.write_all_at(&line, (i * line.len()) as u64)?;
        f.sync_data()?;
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// CPU time this thread has run, in seconds (Linux: `/proc/thread-self/
/// schedstat`); `None` where that is not available.
pub fn thread_cpu() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some(ns / 1e9)
}
