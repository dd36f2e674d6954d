//! Scenario 8: the remote store (operations and refs in PostgreSQL, packs
//! in S3) against the two ways agent frameworks keep sessions in the same
//! PostgreSQL, on servers this run starts for itself (store/tests/support/
//! servers.rs: a throwaway `initdb` cluster with `fsync` and
//! `synchronous_commit` on, as a default server has them, and moto's S3
//! server, both on loopback). Skipped with a note when the servers are
//! absent (`SESSCTL_PG_BIN`, `SESSCTL_MOTO_SERVER`, as for the tests).
//!
//! The systems, each written by `writers` threads at once, one connection
//! or handle each, every writer continuing its own conversation for the
//! same `turns` turns of two real messages (from `../shared/data`: Claude
//! Code, Codex and SWE-agent messages, each writer its own slice):
//! - sessctl: a `Store::open_remote_with` handle per thread, `create` then
//!   `commit` with `Durability::Sync` (threads rather than processes: a
//!   handle holds its own PostgreSQL connections and S3 client, so 16
//!   handles in one process reach the servers exactly as 16 worker
//!   processes would, without 16 process starts in the figure).
//! - the delta table: `delta_messages(session_id, seq, message jsonb)`,
//!   primary key (session_id, seq), and `delta_sessions(session_id,
//!   created_at, updated_at)` with an index on `updated_at` for listing,
//!   the layout of the OpenAI Agents SDK's SQLAlchemySession (a sessions
//!   table and a messages table). A turn is what its `add_items` does: one
//!   transaction holding one INSERT of the turn's messages and the UPDATE
//!   of the session's `updated_at`.
//! - full snapshots: LangGraph's PostgresSaver `checkpoints` table
//!   (langgraph-checkpoint-postgres, `MIGRATIONS` in
//!   langgraph/checkpoint/postgres/base.py: thread_id, checkpoint_ns,
//!   checkpoint_id, parent_checkpoint_id, type, checkpoint jsonb, metadata
//!   jsonb, primary key (thread_id, checkpoint_ns, checkpoint_id), an index
//!   on thread_id), one row per turn holding the whole message list so far
//!   in `checkpoint`, keyed by a time-ordered id and naming its parent,
//!   written by one autocommitted INSERT. (Newer PostgresSaver versions
//!   keep channel values in `checkpoint_blobs`, a row per changed channel:
//!   for a message list that is still the whole list per turn.)
//!
//! Figures: commits/s of the 16 writers (all commits over the time from
//! the start signal to the last writer's end); bytes per turn
//! (`pg_total_relation_size` of the tables involved, after minus before,
//! plus for sessctl the sizes of the bucket's objects); round trips per
//! commit of one writer (statements PostgreSQL logged with
//! `log_statement = all`, S3 requests moto logged) and that writer's
//! commit latency; and listing the 20 newest of `conversations`
//! conversations, built in bulk (sessctl: `bulk::Writer` and
//! `bulk::register`, a pack per 4,096 objects and an operation per 512
//! conversations; the delta tables: multi-row INSERTs in one transaction),
//! by a new handle or connection and by a fresh process (`sessctl ls`
//! against `psql`). Every system is checked to hold what was written and
//! to list the same names in the same order.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Barrier;
use std::time::Instant;

use postgres::{Client, NoTls};
use serde_json::{json, Value};
use sessctl_store::odb::{RemoteBackend, S3Settings};
use sessctl_store::{Durability, OpenOptions, Store};

use crate::bulk::{self, Spec, Writer};
use crate::report::{Better, Group, Row};
use crate::servers::{Servers, OPT_OUT};
use crate::support::Rng;
use crate::{ms, secs, small_message, spawn, turn, Ctx, R, T0};

mod skeleton;

/// Messages per turn: the user's and the agent's.
const TURN: usize = 2;

/// The three systems, in the order each run writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    Sessctl,
    /// sessctl with `inline=` in its URL: a turn's pack stays in
    /// PostgreSQL until the writer past 2 MiB of them seals them into S3.
    SessctlInline,
    Delta,
    Snapshot,
}

/// The `inline=` of [`System::SessctlInline`]: more than a turn's pack.
const INLINE: u64 = 64 << 10;

impl System {
    const ALL: [System; 4] = [
        System::Sessctl,
        System::SessctlInline,
        System::Delta,
        System::Snapshot,
    ];

    fn label(self) -> &'static str {
        match self {
            System::Sessctl => "sessctl remote (PostgreSQL + S3)",
            System::SessctlInline => "sessctl remote, inline packs (inline=65536)",
            System::Delta => "delta table (PostgreSQL)",
            System::Snapshot => "full snapshots (PostgreSQL)",
        }
    }

    fn is_sessctl(self) -> bool {
        matches!(self, System::Sessctl | System::SessctlInline)
    }
}

fn conv(k: usize) -> String {
    format!("w{k:02}")
}

/// The databases and buckets of one run: the baselines' tables and the
/// first sessctl store in `main`, the inline one's store in `inline` (a
/// store of its own: in one store its writers would find the other's
/// messages stored already, and write less).
struct Places<'s> {
    main: Place<'s>,
    inline: Place<'s>,
}

impl<'s> Places<'s> {
    fn new(srv: &'s Servers, name: &str) -> R<Places<'s>> {
        let places = Places {
            main: Place::new(srv, name),
            inline: Place::new(srv, &format!("{name}inline")),
        };
        places.main.init_store()?;
        places.main.init_tables()?;
        places.inline.init_store()?;
        Ok(places)
    }

    fn of(&self, system: System) -> &Place<'s> {
        match system {
            System::SessctlInline => &self.inline,
            _ => &self.main,
        }
    }
}

/// sessctl's database and bucket (of the same name, 3 characters at least
/// as S3 wants) and the baselines' database `NAME_base`, on the run's
/// servers. (The baselines keep their own database: PostgreSQL's default
/// `search_path` starts with `"$user"`, here `sessctl`, the store's
/// schema, so one database would mix their tables.)
struct Place<'s> {
    srv: &'s Servers,
    name: String,
}

impl<'s> Place<'s> {
    fn new(srv: &'s Servers, name: &str) -> Place<'s> {
        srv.psql("postgres", &format!("CREATE DATABASE {name}"));
        srv.psql("postgres", &format!("CREATE DATABASE {name}_base"));
        srv.create_bucket(name);
        Place {
            srv,
            name: name.to_owned(),
        }
    }

    /// The baselines' database.
    fn base(&self) -> String {
        format!("{}_base", self.name)
    }

    fn connect_to(&self, db: &str) -> R<Client> {
        let info = format!(
            "host=127.0.0.1 port={} user=sessctl dbname={db}",
            self.srv.pg_port
        );
        Ok(Client::connect(&info, NoTls)?)
    }

    /// A connection to the baselines' database.
    fn connect(&self) -> R<Client> {
        self.connect_to(&self.base())
    }

    fn url(&self) -> String {
        format!(
            "postgres://sessctl@127.0.0.1:{}/{}?objects=s3://{}/store",
            self.srv.pg_port, self.name, self.name
        )
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.srv.moto_port)
    }

    fn cache(&self) -> PathBuf {
        self.srv.dir().join("pack-cache").join(&self.name)
    }

    fn s3(&self) -> S3Settings {
        S3Settings {
            endpoint: Some(self.endpoint()),
            access_key_id: Some("testing".into()),
            secret_access_key: Some("testing".into()),
            region: Some("us-east-1".into()),
            allow_http: true,
            cache_dir: Some(self.cache()),
        }
    }

    /// The variables a `sessctl` process reaches this store with.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("SESSCTL_CACHE_DIR", self.cache().display().to_string()),
        ]
    }

    fn init_store(&self) -> R<()> {
        if !RemoteBackend::init(&self.url(), &self.s3())? {
            return Err(format!("8: {} was already initialised", self.name).into());
        }
        Ok(())
    }

    fn open_store(&self) -> R<Store> {
        self.open_store_at(&self.url())
    }

    fn open_store_at(&self, url: &str) -> R<Store> {
        Ok(Store::open_remote_with(
            url,
            &OpenOptions::default(),
            &self.s3(),
        )?)
    }

    /// The baselines' tables.
    fn init_tables(&self) -> R<()> {
        self.connect()?.batch_execute(
            "CREATE TABLE delta_sessions (
                 session_id text PRIMARY KEY,
                 created_at timestamptz NOT NULL DEFAULT now(),
                 updated_at timestamptz NOT NULL DEFAULT now());
             CREATE INDEX delta_sessions_updated_at ON delta_sessions (updated_at);
             CREATE TABLE delta_messages (
                 session_id text NOT NULL REFERENCES delta_sessions (session_id),
                 seq bigint NOT NULL,
                 message jsonb NOT NULL,
                 PRIMARY KEY (session_id, seq));
             CREATE TABLE checkpoints (
                 thread_id text NOT NULL,
                 checkpoint_ns text NOT NULL DEFAULT '',
                 checkpoint_id text NOT NULL,
                 parent_checkpoint_id text,
                 type text,
                 checkpoint jsonb NOT NULL,
                 metadata jsonb NOT NULL DEFAULT '{}',
                 PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
             CREATE INDEX checkpoints_thread_id_idx ON checkpoints (thread_id);",
        )?;
        Ok(())
    }

    /// Where sessctl's bytes are: each table of the `sessctl` schema
    /// (heap, indexes, TOAST), then the bucket's packs.
    fn sessctl_parts(&self) -> R<Vec<(String, u64)>> {
        let mut parts: Vec<(String, u64)> = self
            .connect_to(&self.name)?
            .query(
                "SELECT c.relname::text, pg_total_relation_size(c.oid)::int8
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relkind = 'r' AND n.nspname = 'sessctl' ORDER BY 1",
                &[],
            )?
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1).max(0) as u64))
            .collect();
        let s3 = self
            .srv
            .list_objects(&self.name, "store/")
            .iter()
            .map(|(_, n)| n)
            .sum();
        parts.push(("S3 packs".into(), s3));
        Ok(parts)
    }

    /// Bytes a system keeps: its tables in PostgreSQL (heap, indexes,
    /// TOAST) and, for sessctl, the bucket's objects.
    fn bytes(&self, system: System) -> R<u64> {
        let tables: &[&str] = match system {
            System::Sessctl | System::SessctlInline => &[],
            System::Delta => &["public.delta_sessions", "public.delta_messages"],
            System::Snapshot => &["public.checkpoints"],
        };
        let row = if tables.is_empty() {
            self.connect_to(&self.name)?.query_one(
                "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::int8
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.relkind = 'r' AND n.nspname = 'sessctl'",
                &[],
            )?
        } else {
            let tables: Vec<String> = tables.iter().map(|t| t.to_string()).collect();
            self.connect()?.query_one(
                "SELECT COALESCE(sum(pg_total_relation_size(t::regclass)), 0)::int8
                 FROM unnest($1::text[]) AS t",
                &[&tables],
            )?
        };
        let pg: i64 = row.get(0);
        let s3: u64 = if system.is_sessctl() {
            self.srv
                .list_objects(&self.name, "store/")
                .iter()
                .map(|(_, n)| n)
                .sum()
        } else {
            0
        };
        Ok(pg.max(0) as u64 + s3)
    }
}

/// The real messages of `../shared/data`, each once (by its JSON text), in
/// file order: Claude Code's `message` objects, Codex's `response_item`
/// payloads, SWE-agent's `history` entries.
fn real_messages() -> R<Vec<Value>> {
    let data = Path::new(crate::support::DATA);
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut keep = |m: Value| {
        if seen.insert(m.to_string()) {
            out.push(m);
        }
    };
    for (sub, ext) in [
        ("claude-code", "jsonl"),
        ("codex", "jsonl"),
        ("swe-agent", "traj"),
    ] {
        let dir = data.join(sub);
        if !dir.is_dir() {
            return Err(format!("{}: no such directory (the real messages)", dir.display()).into());
        }
        let mut files = Vec::new();
        collect(&dir, ext, &mut files)?;
        files.sort();
        for f in files {
            let err = |e: &dyn std::fmt::Display| format!("{}: {e}", f.display());
            if ext == "traj" {
                let v: Value = serde_json::from_slice(&std::fs::read(&f).map_err(|e| err(&e))?)
                    .map_err(|e| err(&e))?;
                for m in v["history"].as_array().into_iter().flatten() {
                    keep(m.clone());
                }
                continue;
            }
            let file = std::fs::File::open(&f).map_err(|e| err(&e))?;
            for line in BufReader::new(file).lines() {
                let Ok(v) = serde_json::from_str::<Value>(&line.map_err(|e| err(&e))?) else {
                    continue;
                };
                if sub == "codex" {
                    if v["type"] == "response_item" && v["payload"].is_object() {
                        keep(v["payload"].clone());
                    }
                } else if v["message"].get("role").is_some() {
                    keep(v["message"].clone());
                }
            }
        }
    }
    if out.is_empty() {
        return Err("8: ../shared/data holds no messages".into());
    }
    Ok(out)
}

fn collect(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) -> R<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            collect(&p, ext, out)?;
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
    Ok(())
}

/// What the writers write: writer `k`'s messages are the pool's slice from
/// `k * turns * TURN` on (wrapping round when the pool is shorter, which
/// the run says).
struct Work {
    turns: usize,
    msgs: Vec<Vec<Value>>,
}

impl Work {
    fn new(pool: &[Value], writers: usize, turns: usize) -> Work {
        let per = turns * TURN;
        let msgs = (0..writers)
            .map(|k| {
                (0..per)
                    .map(|i| pool[(k * per + i) % pool.len()].clone())
                    .collect()
            })
            .collect();
        Work { turns, msgs }
    }

    fn turn(&self, k: usize, t: usize) -> &[Value] {
        &self.msgs[k][t * TURN..(t + 1) * TURN]
    }
}

/// A LangGraph-shaped checkpoint id: time-ordered, 36 characters like the
/// uuid6 PostgresSaver stores.
fn checkpoint_id(k: usize, t: usize) -> String {
    format!(
        "1f0c5a2e-{k:04x}-6{:03x}-8000-{:012x}",
        (t >> 12) & 0xfff,
        t
    )
}

/// One writer of one system: its connection or handle and where it is.
enum Writer1 {
    Sessctl(Box<Store>),
    Delta(Client),
    Snapshot {
        c: Client,
        history: Vec<Value>,
        parent: Option<String>,
    },
}

impl Writer1 {
    fn open(system: System, place: &Place<'_>) -> R<Writer1> {
        Ok(match system {
            System::Sessctl => Writer1::Sessctl(Box::new(place.open_store()?)),
            System::SessctlInline => Writer1::Sessctl(Box::new(
                place.open_store_at(&format!("{}&inline={INLINE}", place.url()))?,
            )),
            System::Delta => Writer1::Delta(place.connect()?),
            System::Snapshot => Writer1::Snapshot {
                c: place.connect()?,
                history: Vec::new(),
                parent: None,
            },
        })
    }

    /// Writer `k`'s turn `t`, durable.
    fn turn(&mut self, work: &Work, k: usize, t: usize) -> R<()> {
        let msgs = work.turn(k, t);
        let name = conv(k);
        match self {
            Writer1::Sessctl(store) => {
                if t == 0 {
                    store.create(Some(&name), turn(msgs), Durability::Sync)?;
                } else {
                    store.commit(&name, None, turn(msgs), Durability::Sync)?;
                }
            }
            Writer1::Delta(c) => {
                let mut tx = c.transaction()?;
                if t == 0 {
                    tx.execute(
                        "INSERT INTO delta_sessions (session_id) VALUES ($1)",
                        &[&name],
                    )?;
                }
                // One INSERT of the turn's messages.
                let texts: Vec<String> = msgs.iter().map(Value::to_string).collect();
                let seqs: Vec<i64> = (0..msgs.len()).map(|i| (t * TURN + i) as i64).collect();
                tx.execute(
                    "INSERT INTO delta_messages (session_id, seq, message)
                     SELECT $1, s, m::jsonb FROM unnest($2::int8[], $3::text[]) AS u(s, m)",
                    &[&name, &seqs, &texts],
                )?;
                tx.execute(
                    "UPDATE delta_sessions SET updated_at = now() WHERE session_id = $1",
                    &[&name],
                )?;
                tx.commit()?;
            }
            Writer1::Snapshot { c, history, parent } => {
                history.extend_from_slice(msgs);
                let id = checkpoint_id(k, t);
                let checkpoint = json!({
                    "v": 1,
                    "id": id,
                    "ts": T0 + t as i64,
                    "channel_values": {"messages": history},
                    "channel_versions": {"messages": t + 1},
                    "versions_seen": {},
                })
                .to_string();
                let metadata = json!({"source": "loop", "step": t, "parents": {}}).to_string();
                c.execute(
                    "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id,
                         parent_checkpoint_id, type, checkpoint, metadata)
                     VALUES ($1, '', $2, $3, 'json', $4::text::jsonb, $5::text::jsonb)",
                    &[&name, &id, parent, &checkpoint, &metadata],
                )?;
                *parent = Some(id);
            }
        }
        Ok(())
    }
}

/// `n` threads, each preparing (`prepare(k)`, not timed), then all starting
/// at once and running `run(k, prepared)`; returns the wall time from the
/// start to the last thread's end and what they returned, in order.
fn at_once<P, T: Send>(
    n: usize,
    prepare: impl Fn(usize) -> R<P> + Sync,
    run: impl Fn(usize, P) -> R<Vec<T>> + Sync,
) -> R<(f64, Vec<T>)> {
    let go = Barrier::new(n + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|k| {
                let (go, prepare, run) = (&go, &prepare, &run);
                s.spawn(move || -> R<Vec<T>> {
                    let prepared = prepare(k);
                    go.wait();
                    run(k, prepared?)
                })
            })
            .collect();
        go.wait();
        let t = Instant::now();
        let mut out = Vec::new();
        let mut first_err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(v)) => out.extend(v),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert_with(|| "8: a thread panicked".into());
                }
            }
        }
        let dt = secs(t);
        match first_err {
            Some(e) => Err(e),
            None => Ok((dt, out)),
        }
    })
}

/// `writers` threads, each opening its writer, then all starting at once
/// and writing their turns; returns the wall time from the start to the
/// last writer's end, and each commit's latency in ms.
fn race(system: System, place: &Place<'_>, work: &Work) -> R<(f64, Vec<f64>)> {
    at_once(
        work.msgs.len(),
        |_| Writer1::open(system, place),
        |k, mut w| {
            let mut lat = Vec::with_capacity(work.turns);
            for t in 0..work.turns {
                let t0 = Instant::now();
                w.turn(work, k, t).map_err(|e| {
                    format!(
                        "8: {}, writer {k}, turn {t}: {}",
                        system.label(),
                        explain(e)
                    )
                })?;
                lat.push(ms(t0));
            }
            Ok(lat)
        },
    )
}

/// The ceiling of any store that uploads one object per commit, as
/// sessctl's remote writes do: the same writers each making one
/// create-only PUT per turn of its turn's messages (as JSON, about a
/// pack's size), on the client sessctl uses, and nothing else. Returns
/// the wall time from the start to the last writer's end.
fn put_ceiling(place: &Place<'_>, work: &Work) -> R<f64> {
    use object_store::aws::AmazonS3Builder;
    use object_store::path::Path as S3Path;
    use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
    let prepare = |_| -> R<_> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let s3 = AmazonS3Builder::new()
            .with_endpoint(place.endpoint())
            .with_bucket_name(&place.name)
            .with_access_key_id("testing")
            .with_secret_access_key("testing")
            .with_region("us-east-1")
            .with_allow_http(true)
            .build()?;
        Ok((rt, s3))
    };
    let (dt, _) = at_once(work.msgs.len(), prepare, |k, (rt, s3)| -> R<Vec<()>> {
        for t in 0..work.turns {
            let body = serde_json::to_vec(work.turn(k, t))?;
            let key = S3Path::from(format!("ceiling/{k}-{t}"));
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            rt.block_on(s3.put_opts(&key, PutPayload::from(body), opts))?;
        }
        Ok(Vec::new())
    })?;
    Ok(dt)
}

/// Every writer's conversation holds its turns, in every system.
fn check(system: System, place: &Place<'_>, work: &Work) -> R<()> {
    let n = work.turns * TURN;
    let fail = |k: usize, what: String| -> R<()> {
        Err(format!("8: {}: conversation {}: {what}", system.label(), conv(k)).into())
    };
    match system {
        System::Sessctl | System::SessctlInline => {
            let store = place.open_store()?;
            for (k, want) in work.msgs.iter().enumerate() {
                let Some(head) = store.conversation(&conv(k))?.and_then(|i| i.head) else {
                    return fail(k, "missing".into());
                };
                if &store.odb().load_messages(&head)? != want {
                    return fail(k, "loads back differently".into());
                }
            }
        }
        System::Delta => {
            let mut c = place.connect()?;
            for (k, want) in work.msgs.iter().enumerate() {
                let rows = c.query(
                    "SELECT message::text FROM delta_messages WHERE session_id = $1 ORDER BY seq",
                    &[&conv(k)],
                )?;
                let got: Vec<Value> = rows
                    .iter()
                    .map(|r| serde_json::from_str(r.get::<_, &str>(0)))
                    .collect::<Result<_, _>>()?;
                if got.len() != n || &got != want {
                    return fail(k, format!("{} messages, not the {n} written", got.len()));
                }
            }
        }
        System::Snapshot => {
            let mut c = place.connect()?;
            for (k, want) in work.msgs.iter().enumerate() {
                let row = c.query_one(
                    "SELECT count(*), (SELECT checkpoint->'channel_values'->>'messages'
                         FROM checkpoints WHERE thread_id = $1
                         ORDER BY checkpoint_id DESC LIMIT 1)
                     FROM checkpoints WHERE thread_id = $1",
                    &[&conv(k)],
                )?;
                let count: i64 = row.get(0);
                let last: Option<&str> = row.get(1);
                let got: Vec<Value> = serde_json::from_str(last.unwrap_or("[]"))?;
                if count as usize != work.turns || &got != want {
                    return fail(
                        k,
                        format!("{count} checkpoints, the last of {} messages", got.len()),
                    );
                }
            }
        }
    }
    Ok(())
}

pub fn run(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    if std::env::var(OPT_OUT).is_ok_and(|v| v == "skip") {
        ctx.note(&format!(
            "scenario 8 (remote store) skipped: {OPT_OUT}=skip"
        ));
        return Ok(());
    }
    let t = Instant::now();
    let srv = match Servers::try_start(true) {
        Ok(s) => s,
        Err(e) => {
            ctx.note(&format!("scenario 8 (remote store) skipped: {e}"));
            return Ok(());
        }
    };
    eprintln!(
        "sessctl-bench: 8: PostgreSQL (fsync on) and moto started in {:.0} ms",
        ms(t)
    );
    let pool = real_messages()?;
    commits(ctx, &srv, &pool, out).map_err(explain)?;
    round_trips(ctx, &srv, &pool, out).map_err(explain)?;
    listing(ctx, &srv, out).map_err(explain)?;
    Ok(())
}

/// A PostgreSQL error with the server's message (the client's own text is
/// only "db error").
fn explain(
    e: Box<dyn std::error::Error + Send + Sync>,
) -> Box<dyn std::error::Error + Send + Sync> {
    match e
        .downcast_ref::<postgres::Error>()
        .and_then(|p| p.as_db_error())
    {
        Some(db) => format!("8: PostgreSQL: {db}").into(),
        None => e,
    }
}

fn commits(ctx: &Ctx, srv: &Servers, pool: &[Value], out: &mut Vec<Row>) -> R<()> {
    let (writers, turns) = (ctx.s.remote_writers, ctx.s.remote_turns);
    let work = Work::new(pool, writers, turns);
    if writers * turns * TURN > pool.len() {
        ctx.note(&format!(
            "8: {writers} writers x {turns} turns take {} messages, the real data holds {} \
             distinct ones: writers share some (sessctl stores a shared message once)",
            writers * turns * TURN,
            pool.len()
        ));
    }
    let total = writers * turns;
    let mut ceiling = Vec::new();
    let mut skeletons: [Vec<f64>; 3] = Default::default();
    let mut rate: [Vec<f64>; 4] = Default::default();
    let mut bytes: [Vec<f64>; 4] = Default::default();
    for rep in 0..ctx.s.reps {
        let places = Places::new(srv, &format!("run{rep}"))?;
        for (i, system) in System::ALL.into_iter().enumerate() {
            let place = places.of(system);
            let parts_before = place.sessctl_parts()?;
            let before = place.bytes(system)?;
            let (dt, _) = race(system, place, &work)?;
            let after = place.bytes(system)?;
            if rep == 0 {
                check(system, place, &work)?;
                if system.is_sessctl() {
                    // Where a turn's bytes go.
                    let shares: Vec<String> = place
                        .sessctl_parts()?
                        .into_iter()
                        .map(|(name, n)| {
                            let was = parts_before
                                .iter()
                                .find(|(b, _)| *b == name)
                                .map_or(0, |(_, n)| *n);
                            format!("{name} {}", n.saturating_sub(was) / total as u64)
                        })
                        .collect();
                    eprintln!(
                        "sessctl-bench: 8: {}: bytes per turn: {}",
                        system.label(),
                        shares.join(", ")
                    );
                }
            }
            rate[i].push(total as f64 / dt);
            bytes[i].push(after.saturating_sub(before) as f64 / total as f64);
        }
        ceiling.push(total as f64 / put_ceiling(&places.main, &work)?);
        for (i, shape) in skeleton::Shape::ALL.into_iter().enumerate() {
            skeletons[i].push(skeleton::rate(shape, &places.main, &work)?);
        }
    }
    let scenario = format!("8 {writers} writers x {turns} turns, durable");
    let mut g = Group::new(scenario.clone(), "commits/s", Better::Higher);
    for (i, system) in System::ALL.into_iter().enumerate() {
        g.add(system.label(), std::mem::take(&mut rate[i]));
    }
    g.add(
        "S3 create-only PUTs alone (one per commit: the ceiling)",
        ceiling,
    );
    for (i, shape) in skeleton::Shape::ALL.into_iter().enumerate() {
        g.add(shape.label(), std::mem::take(&mut skeletons[i]));
    }
    crate::report::emit(out, g);
    let mut g = Group::new(
        format!("{scenario}: bytes"),
        "bytes per turn",
        Better::Lower,
    );
    for (i, system) in System::ALL.into_iter().enumerate() {
        g.add(system.label(), std::mem::take(&mut bytes[i]));
    }
    g.add(
        "the messages alone, zstd -19, a stream per writer (a floor)",
        vec![content_floor(&work)?],
    );
    crate::report::emit(out, g);
    Ok(())
}

/// The least any lossless store can keep of the turns: each writer's
/// messages (as the delta table's JSON text) compressed as one zstd frame
/// at level 19 (its 8 MiB window holds a writer's whole stream), so that a
/// turn compresses against every earlier turn of its conversation, as no
/// store can that makes each turn durable on its own; no id, ref, ref log,
/// index or PostgreSQL row. Bytes per turn. Against the delta table's bytes, it says
/// how low a ratio of bytes any design can reach on these messages.
fn content_floor(work: &Work) -> R<f64> {
    let mut total = 0usize;
    for msgs in &work.msgs {
        let mut stream = Vec::new();
        for m in msgs {
            stream.extend_from_slice(m.to_string().as_bytes());
        }
        total += zstd::bulk::compress(&stream, 19)?.len();
    }
    Ok(total as f64 / (work.msgs.len() * work.turns) as f64)
}

/// Where a commit's time goes: one writer alone, its latency, then the
/// statements PostgreSQL logs (`log_statement = all` on a database of its
/// own) and the requests moto logs, per commit.
fn round_trips(ctx: &Ctx, srv: &Servers, pool: &[Value], out: &mut Vec<Row>) -> R<()> {
    let turns = ctx.s.remote_turns;
    let work = Work::new(pool, 1, turns);
    let scenario = format!("8 1 writer x {turns} turns, durable");
    let mut lat = Group::new(scenario.clone(), "ms per commit", Better::Lower).p99();
    let places = Places::new(srv, "alone")?;
    for system in System::ALL {
        let (_, l) = race(system, places.of(system), &work)?;
        lat.add(system.label(), l);
    }
    crate::report::emit(out, lat);

    let places = Places::new(srv, "logged")?;
    for db in [&places.main.name, &places.main.base(), &places.inline.name] {
        srv.psql(
            "postgres",
            &format!("ALTER DATABASE {db} SET log_statement = 'all'"),
        );
    }
    let pg_log = srv.dir().join("postgres.log");
    let moto_log = srv.dir().join("moto.log");
    let lines = |p: &Path, pat: &str| -> R<usize> {
        Ok(std::fs::read_to_string(p)
            .map_err(|e| format!("{}: {e}", p.display()))?
            .lines()
            .filter(|l| l.contains(pat))
            .count())
    };
    // A statement or an executed prepared statement; both are a round
    // trip to the server (parse and bind travel with the execute).
    let statements =
        |p: &Path| -> R<usize> { Ok(lines(p, "LOG:  statement: ")? + lines(p, "LOG:  execute ")?) };
    let mut stmts = Group::new(
        format!("{scenario}: PostgreSQL statements"),
        "statements per commit",
        Better::Lower,
    );
    let mut s3 = Group::new(
        format!("{scenario}: S3 requests"),
        "requests per commit",
        Better::Lower,
    );
    for system in System::ALL {
        // The writer's connections are opened before the count starts.
        let (p0, m0) = (statements(&pg_log)?, lines(&moto_log, "HTTP/1.1\"")?);
        let mut w = Writer1::open(system, places.of(system))?;
        let (p1, m1) = (statements(&pg_log)?, lines(&moto_log, "HTTP/1.1\"")?);
        for t in 0..turns {
            w.turn(&work, 0, t)?;
        }
        drop(w);
        let (p2, m2) = (statements(&pg_log)?, lines(&moto_log, "HTTP/1.1\"")?);
        eprintln!(
            "sessctl-bench: 8: {}: opening took {} statements and {} S3 requests",
            system.label(),
            p1 - p0,
            m1 - m0
        );
        stmts.add(system.label(), vec![(p2 - p1) as f64 / turns as f64]);
        if system.is_sessctl() {
            s3.add(system.label(), vec![(m2 - m1) as f64 / turns as f64]);
        }
    }
    crate::report::emit(out, stmts);
    crate::report::emit(out, s3);
    Ok(())
}

/// The 20 newest of many conversations: sessctl's listing against the
/// delta table's `ORDER BY updated_at DESC LIMIT 20`.
fn listing(ctx: &Ctx, srv: &Servers, out: &mut Vec<Row>) -> R<()> {
    let n = ctx.s.conversations;
    let place = Place::new(srv, "listed");
    place.init_store()?;
    place.init_tables()?;
    let t = Instant::now();
    {
        let store = place.open_store()?;
        let mut w = Writer::new(&store);
        let mut rng = Rng::new(8);
        let mut regs = Vec::with_capacity(n);
        let mut c = place.connect()?;
        let mut tx = c.transaction()?;
        let mut rows: (Vec<String>, Vec<i64>, Vec<String>) = Default::default();
        let mut msgs_rows: (Vec<String>, Vec<i64>, Vec<String>) = Default::default();
        for i in 0..n {
            let name = format!("c{i:06}");
            let msgs: Vec<Value> = (0..2).map(|k| small_message(&name, k, &mut rng)).collect();
            let at = T0 + i as i64 * 1000;
            let id = w.session(Spec {
                parents: Vec::new(),
                created_at: at,
                conversation: None,
                base: 0,
                added: &msgs,
            })?;
            regs.push(bulk::Conversation {
                name: name.clone(),
                head: id,
                id,
                created_at: at,
                updated_at: at,
            });
            rows.0.push(name.clone());
            rows.1.push(at);
            for (k, m) in msgs.iter().enumerate() {
                msgs_rows.0.push(name.clone());
                msgs_rows.1.push(k as i64);
                msgs_rows.2.push(m.to_string());
            }
            if rows.0.len() == 5000 || i + 1 == n {
                tx.execute(
                    "INSERT INTO delta_sessions (session_id, created_at, updated_at)
                     SELECT s, to_timestamp(a / 1000.0), to_timestamp(a / 1000.0)
                     FROM unnest($1::text[], $2::int8[]) AS u(s, a)",
                    &[&rows.0, &rows.1],
                )?;
                tx.execute(
                    "INSERT INTO delta_messages (session_id, seq, message)
                     SELECT s, q, m::jsonb FROM unnest($1::text[], $2::int8[], $3::text[]) AS u(s, q, m)",
                    &[&msgs_rows.0, &msgs_rows.1, &msgs_rows.2],
                )?;
                rows = Default::default();
                msgs_rows = Default::default();
            }
        }
        tx.commit()?;
        c.batch_execute("VACUUM ANALYZE delta_sessions")?;
        w.flush()?;
        bulk::register(&store, &regs)?;
    }
    eprintln!(
        "sessctl-bench: 8: {n} conversations built in bulk in {:.0} ms",
        ms(t)
    );
    let want: Vec<String> = (0..n).rev().take(20).map(|i| format!("c{i:06}")).collect();
    let same = |got: Vec<String>, who: &str| -> R<()> {
        if got != want {
            return Err(format!("8: {who} listed {got:?}, not {want:?}").into());
        }
        Ok(())
    };
    let query = "SELECT session_id FROM delta_sessions ORDER BY updated_at DESC LIMIT 20";

    let mut g = Group::new(
        format!("8 open + ls 20 newest of {n}, in process"),
        "ms per listing",
        Better::Lower,
    )
    .p99();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..ctx.s.spawns {
        let t = Instant::now();
        let store = place.open_store()?;
        let got = store
            .conversations(Some(20))?
            .into_iter()
            .map(|c| c.name)
            .collect();
        a.push(ms(t));
        same(got, "sessctl (a new handle)")?;
        drop(store);

        let t = Instant::now();
        let mut c = place.connect()?;
        let got = c
            .query(query, &[])?
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect();
        b.push(ms(t));
        same(got, "the delta table (a new connection)")?;
    }
    g.add("sessctl remote, new handle", a);
    g.add("delta table, new connection", b);
    crate::report::emit(out, g);

    let mut g = Group::new(
        format!("8 open + ls 20 newest of {n}, fresh process"),
        "ms per process",
        Better::Lower,
    )
    .p99();
    if let Some(sessctl) = ctx.sessctl(8) {
        let mut v = Vec::new();
        for _ in 0..ctx.s.spawns {
            let (dt, o) = spawn(
                Command::new(sessctl)
                    .arg("--store")
                    .arg(place.url())
                    .args(["ls", "--limit", "20", "--json"])
                    .envs(place.env()),
                &[0],
            )?;
            let v2: Value = serde_json::from_slice(&o.stdout)?;
            let got = v2
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str().map(str::to_owned))
                .collect();
            same(got, "sessctl ls")?;
            v.push(dt);
        }
        g.add("sessctl ls (process)", v);
    }
    let mut v = Vec::new();
    for _ in 0..ctx.s.spawns {
        let t = Instant::now();
        let text = srv.psql(&place.base(), query);
        v.push(ms(t));
        same(text.lines().map(str::to_owned).collect(), "psql")?;
    }
    g.add("delta table, psql (process)", v);
    crate::report::emit(out, g);
    Ok(())
}
