//! The remote backend: operations, refs and where each object lives in
//! PostgreSQL; the objects themselves in an S3-compatible bucket, one small
//! immutable pack per write (objects-format.md, "Remote store").
//!
//! It owns the write protocol, and must never let PostgreSQL name an object
//! the bucket does not hold:
//!
//! 1. [`ObjectBackend::stage`] (before any lock) uploads the write's new
//!    objects as one content-addressed pack with a create-only PUT; one
//!    that is already there (412) is the same bytes. A pack no larger than
//!    the URL's `inline=BYTES` is uploaded nowhere: its row in step 4 holds
//!    it (an inline pack), and [`ObjectBackend::maintain`] seals the inline
//!    packs into one pack in the bucket once they reach [`SEAL_BYTES`].
//! 2. [`ObjectBackend::write_lock`] opens a PostgreSQL transaction and
//!    locks the one `chain_head` row (`FOR UPDATE`, waiting as the store was
//!    opened to): writers in every process on every machine queue there.
//! 3. The store checks its compare-and-swaps against its index, caught up
//!    from the `ops` table under that lock.
//! 4. [`ObjectBackend::append_locked`] records the pack and where each new
//!    object lives, moves each ref with `UPDATE ... WHERE target = $old`,
//!    appends the operation rows, advances the chain head, and commits, in
//!    one round trip: all of it or none (a compare-and-swap that does not
//!    hold writes nothing: `RefOutOfDate`). The commit lets the lock go
//!    without waiting for the WAL's flush.
//! 5. [`ObjectBackend::sync`], lock released, waits for that flush (one
//!    round trip whose own commit needs it: `write.rs`, [`write::FLUSH`]);
//!    only then is the write acknowledged.
//!
//! A crash between 1 and 4 leaves an unreferenced pack in the bucket and
//! nothing in PostgreSQL. Reads take no lock: a pack fetched once is kept
//! (immutable, so never stale), and every object read re-hashes to its id.

mod claims;
mod conn;
mod lineage;
mod literal;
mod locate;
mod locked;
mod pack;
mod sweep;
mod write;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as S3Path;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
};
use postgres::error::SqlState;
use postgres::types::Type;
use postgres::NoTls;

use conn::Conn;
use literal::{bytea_array, hex_bytes};
use locked::READ_AHEAD;

use super::{
    HeadReading, Held, KeptIndex, KeyWrite, LineageRow, ObjectBackend, OdbStats, OpenOptions,
    RawOp, RepackOptions, RepackStats, SyncTicket, WriteLock,
};
use crate::error::{Error, Result};
use crate::hash::{IdMap, IdSet, ObjectId, Prefix};
use crate::object::{EncodedObject, ObjectKind};
use crate::refs::Operation;

/// The schema version this sessctl writes and reads (the highest
/// migration); objects-format.md, "Remote store".
pub const SCHEMA_VERSION: i32 = 7;

/// The oldest schema version this sessctl opens: a version-1 store (no
/// index keys) is upgraded by its first writable open, and read by
/// replaying its operations until then; what version 3 adds (the table of
/// retired packs) only gc and repack need, and they say so; without what
/// version 4 adds (lineage rows), walks read each session as before.
pub const OLDEST_SCHEMA_VERSION: i32 = 1;

/// The migrations, in order: version and SQL (`store/migrations/`).
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../../../migrations/0001_init.sql")),
    (2, include_str!("../../../migrations/0002_index.sql")),
    (
        3,
        include_str!("../../../migrations/0003_retired_packs.sql"),
    ),
    (4, include_str!("../../../migrations/0004_sweeps.sql")),
    (5, include_str!("../../../migrations/0005_lineage.sql")),
    (6, include_str!("../../../migrations/0006_inline_packs.sql")),
    (7, include_str!("../../../migrations/0007_store.sql")),
];

/// How many bytes of inflated pack bodies a handle keeps in memory.
const BODIES_KEPT_BYTES: usize = 256 << 20;

/// The schema version that announces gc's sweeps (`chain_head.sweeps`).
const SWEEPS_SCHEMA: i32 = 4;

/// The schema version that keeps packs inline (`packs.body`,
/// `chain_head.inline_bytes`; objects-format.md, "Inline packs").
const INLINE_SCHEMA: i32 = 6;

/// The schema version that records the store's id and where its objects
/// are (`sessctl.store`; objects-format.md, "Store identity").
const IDENTITY_SCHEMA: i32 = 7;

/// The bucket object that says a prefix holds a store's objects.
const MARKER: &str = "sessctl-store";

/// Once the inline packs hold this many bytes, the writer that finds it so
/// seals them into one pack in the bucket, in its upkeep (as a local store
/// packs its journal segment once it is sealed at 2 MiB).
/// objects-format.md, "Inline packs".
pub const SEAL_BYTES: u64 = 2 << 20;

/// Test-only: a write that finds this variable set stops under the write
/// lock, after uploading its pack and before sending its rows and their
/// `COMMIT` (one round trip for a commit's write): it says
/// [`STOPPED_BEFORE_COMMIT`] on stderr and sleeps, for a test to `kill -9`
/// it there (the crash the protocol must survive).
pub const CRASH_BEFORE_COMMIT_VAR: &str = "SESSCTL_TEST_STOP_BEFORE_DB_COMMIT";

/// The line a write stopped by [`CRASH_BEFORE_COMMIT_VAR`] prints.
pub const STOPPED_BEFORE_COMMIT: &str = "sessctl-test: stopped before the database commit";

/// Where a remote store's S3 client connects, and as whom: the standard
/// AWS variables by default ([`S3Settings::from_env`]).
#[derive(Clone, Default)]
pub struct S3Settings {
    /// `AWS_ENDPOINT_URL`: an S3-compatible server (`None`: AWS itself).
    pub endpoint: Option<String>,
    /// `AWS_ACCESS_KEY_ID`.
    pub access_key_id: Option<String>,
    /// `AWS_SECRET_ACCESS_KEY`.
    pub secret_access_key: Option<String>,
    /// `AWS_REGION` (default `us-east-1`).
    pub region: Option<String>,
    /// `AWS_ALLOW_HTTP=true`: talk to the endpoint without TLS.
    pub allow_http: bool,
    /// Where fetched packs are kept (`SESSCTL_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/sessctl/packs`, else `~/.cache/sessctl/packs`;
    /// `None`: in memory only). Packs are immutable and named by their
    /// hash, so one cache serves every store and is never stale; a file
    /// that does not hash to its name is fetched again.
    pub cache_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "..."),
            )
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("cache_dir", &self.cache_dir)
            .finish()
    }
}

impl S3Settings {
    /// The settings the standard AWS variables give.
    pub fn from_env() -> S3Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        S3Settings {
            endpoint: var("AWS_ENDPOINT_URL"),
            access_key_id: var("AWS_ACCESS_KEY_ID"),
            secret_access_key: var("AWS_SECRET_ACCESS_KEY"),
            region: var("AWS_REGION").or_else(|| var("AWS_DEFAULT_REGION")),
            allow_http: var("AWS_ALLOW_HTTP").is_some_and(|v| v.eq_ignore_ascii_case("true")),
            cache_dir: var("SESSCTL_CACHE_DIR")
                .map(std::path::PathBuf::from)
                .or_else(|| {
                    var("XDG_CACHE_HOME")
                        .map(std::path::PathBuf::from)
                        .or_else(|| var("HOME").map(|h| std::path::Path::new(&h).join(".cache")))
                        .map(|c| c.join("sessctl").join("packs"))
                }),
        }
    }
}

/// What a prefix's `sessctl-store` object says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Marker {
    /// sessctl's, naming the store whose objects the prefix holds (schema
    /// version 7 on), or none (written before).
    Store(Option<String>),
    /// Not sessctl's.
    Foreign,
}

impl Marker {
    /// `sessctl remote store, schema N\n`, then `store <32 hex>\n` from
    /// version 7 on (objects-format.md, "Store identity").
    fn parse(body: &[u8]) -> Marker {
        let Ok(text) = std::str::from_utf8(body) else {
            return Marker::Foreign;
        };
        let mut lines = text.lines();
        if !lines
            .next()
            .is_some_and(|l| l.starts_with("sessctl remote store"))
        {
            return Marker::Foreign;
        }
        let id = lines
            .filter_map(|l| l.strip_prefix("store "))
            .find(|id| is_store_id(id))
            .map(str::to_owned);
        Marker::Store(id)
    }
}

/// 32 lowercase hex digits.
fn is_store_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A new store's id: 128 bits that no other store's init draws (the time,
/// this process, this call and the server named, hashed).
fn new_store_id(server: &str) -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut h = blake3::Hasher::new();
    h.update(b"sessctl store id\0");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    h.update(&now.as_nanos().to_le_bytes());
    h.update(&std::process::id().to_le_bytes());
    h.update(&CALLS.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.update(format!("{:?}", std::thread::current().id()).as_bytes());
    h.update(server.as_bytes());
    h.finalize().to_hex()[..32].to_owned()
}

/// Whether `store` names a remote store (`postgres://` or `postgresql://`)
/// rather than a directory.
pub fn is_remote_url(store: &str) -> bool {
    store.starts_with("postgres://") || store.starts_with("postgresql://")
}

/// A parsed `postgres://USER@HOST:PORT/DB?objects=s3://BUCKET/PREFIX`.
#[derive(Clone)]
struct StoreUrl {
    pg: postgres::Config,
    /// The PostgreSQL side as errors name it (no password).
    shown: String,
    bucket: String,
    /// Key prefix in the bucket, without a trailing `/` ("" for none).
    prefix: String,
    /// `inline=BYTES`: a write whose pack is no larger keeps it in
    /// PostgreSQL (0, the default: every pack goes to the bucket).
    inline_max: u64,
}

/// The largest `inline=` a store URL takes: an inline pack is a `bytea`
/// value, read whole by every reader of one of its objects.
const INLINE_MAX_LIMIT: u64 = 64 << 20;

impl StoreUrl {
    fn parse(url: &str) -> Result<StoreUrl> {
        let bad = |reason: &str| {
            Error::Invalid(format!(
                "bad store URL {}: {reason}",
                crate::url::redact_url(url)
            ))
        };
        if !is_remote_url(url) {
            return Err(bad("it must start with postgres://"));
        }
        let (base, query) = url
            .split_once('?')
            .ok_or_else(|| bad("it names no bucket (add ?objects=s3://BUCKET/PREFIX)"))?;
        let mut objects = None;
        let mut inline_max = 0;
        let mut rest = Vec::new();
        let mut seen = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let name = pair.split_once('=').map_or(pair, |(k, _)| k);
            if seen.contains(&name) {
                return Err(bad(&format!("{name}= is given twice")));
            }
            seen.push(name);
            match pair.split_once('=') {
                Some(("objects", v)) => objects = Some(v.to_owned()),
                Some(("inline", v)) => {
                    inline_max = v
                        .parse::<u64>()
                        .ok()
                        .filter(|n| *n <= INLINE_MAX_LIMIT)
                        .ok_or_else(|| {
                            bad(&format!(
                                "inline= takes a number of bytes from 0 to {INLINE_MAX_LIMIT}, not {v:?}"
                            ))
                        })?;
                }
                _ => rest.push(pair),
            }
        }
        let objects =
            objects.ok_or_else(|| bad("it names no bucket (add ?objects=s3://BUCKET/PREFIX)"))?;
        let path = objects
            .strip_prefix("s3://")
            .ok_or_else(|| bad("objects= takes s3://BUCKET/PREFIX"))?;
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        if bucket.is_empty() {
            return Err(bad("objects= names no bucket"));
        }
        let pg_url = if rest.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let mut pg = postgres::Config::from_str(&pg_url)
            .map_err(|e| bad(&explain_pg_url(base, &rest, &e)))?;
        if pg.get_hosts().is_empty() {
            return Err(bad(
                "it names no server (postgres://USER@HOST:PORT/DB?objects=...)",
            ));
        }
        if pg.get_connect_timeout().is_none() {
            pg.connect_timeout(Duration::from_secs(10));
        }
        if pg.get_application_name().is_none() {
            pg.application_name("sessctl");
        }
        Ok(StoreUrl {
            shown: show_pg(&pg),
            pg,
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
            inline_max,
        })
    }

    fn s3_shown(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// The key of a bucket object under the prefix.
    fn key(&self, rest: &str) -> S3Path {
        if self.prefix.is_empty() {
            S3Path::from(rest)
        } else {
            S3Path::from(format!("{}/{rest}", self.prefix))
        }
    }
}

/// Which part of a store URL PostgreSQL's client refused (its own error
/// says only "invalid connection string"): a parameter it does not take
/// (or a value it does not), or the server part's port.
fn explain_pg_url(base: &str, params: &[&str], e: &postgres::Error) -> String {
    for pair in params {
        if postgres::Config::from_str(&format!("postgres://localhost/db?{pair}")).is_err() {
            let name = pair.split_once('=').map_or(*pair, |(k, _)| k);
            return format!(
                "{name}= is not a parameter PostgreSQL's client takes, or {pair:?} not a value it \
                 takes ({e})"
            );
        }
    }
    let authority = base.split_once("://").map_or(base, |(_, rest)| {
        rest.split(['/', '?']).next().unwrap_or_default()
    });
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    for hp in host_port.split(',') {
        // `[::1]` alone has no port.
        let port = match hp.ends_with(']') {
            true => None,
            false => hp.rsplit_once(':').map(|(_, p)| p),
        };
        if let Some(port) = port.filter(|p| !p.is_empty() && p.parse::<u16>().is_err()) {
            return format!("its port {port:?} is not a number from 0 to 65535 ({e})");
        }
    }
    e.to_string()
}

/// `postgres://USER@HOST:PORT/DB`, as errors name a server.
fn show_pg(pg: &postgres::Config) -> String {
    let host = match pg.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        pg.get_user().unwrap_or_default(),
        pg.get_dbname().unwrap_or_default()
    )
}

/// What names the store at `url` wherever it is opened from, as text, for
/// a machine's local caches to key on (`sessctl hook`'s capture cursors,
/// objects-format.md "Remote store"): `postgres://HOST:PORT[,...]/DB
/// ?objects=s3://BUCKET/PREFIX`, host names in lowercase, the default port
/// and database filled in. Never the password; nor the user or other
/// connection parameters (sslmode, ...), which change how the store is
/// reached, not which store it is.
pub fn store_identity(url: &str) -> Result<String> {
    let url = StoreUrl::parse(url)?;
    let ports = url.pg.get_ports();
    let hosts: Vec<String> = url
        .pg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                postgres::config::Host::Tcp(h) => h.to_ascii_lowercase(),
                postgres::config::Host::Unix(p) => p.display().to_string(),
            };
            // One port serves every host; several go with them in order.
            let port = match ports {
                [one] => *one,
                _ => ports.get(i).copied().unwrap_or(5432),
            };
            format!("{host}:{port}")
        })
        .collect();
    // PostgreSQL's default database is the user's name.
    let db = url
        .pg
        .get_dbname()
        .or(url.pg.get_user())
        .unwrap_or_default();
    Ok(format!(
        "postgres://{}/{db}?objects={}",
        hosts.join(","),
        url.s3_shown()
    ))
}

/// Where an object lives.
#[derive(Debug, Clone, Copy)]
struct Loc {
    pack: i64,
    kind: ObjectKind,
    off: u64,
    len: u64,
}

#[derive(Debug, Clone)]
struct PackRow {
    key: String,
    bytes: u64,
    created_at: i64,
    /// Kept in PostgreSQL (`packs.body`), not in the bucket.
    inline: bool,
}

/// What this handle has read of the `objects` and `packs` tables: the
/// places of the objects it looked up (see `locate.rs`), never an absence,
/// and the packs they name.
#[derive(Debug, Default)]
struct Known {
    objects: IdMap<Loc>,
    /// Objects a write's lock found stored whose place this handle has
    /// not read: a hint of what not to pack before the lock, nothing more
    /// (under the lock PostgreSQL says; see [`KNOWN_STORED_MAX`]).
    stored: IdSet,
    packs: HashMap<i64, PackRow>,
    /// The highest pack row a read of the whole table has covered (0: none
    /// yet): rows are numbered in commit order (see the migration), so the
    /// next such read reads only those above it
    /// ([`RemoteBackend::load_rows`]).
    seen: i64,
}

/// A pack uploaded before the write lock, for the write that follows.
#[derive(Debug)]
struct Staged {
    name: String,
    bytes: u64,
    entries: IdMap<pack::Entry>,
    /// `chain_head.sweeps` as last read before the upload began (see
    /// [`RemoteBackend::staged_still_there`]).
    sweeps_seen: Option<i64>,
    /// The inflated body, kept for reads once the write commits (the next
    /// commit reads its parent from it).
    body: Arc<Vec<u8>>,
    /// The pack's bytes when it goes in its row (`packs.body`) rather than
    /// the bucket: nothing was uploaded.
    inline: Option<Vec<u8>>,
}

/// Index keys, and ids whether stored, to read with the write lock.
type LockReads = (Vec<Vec<u8>>, Vec<ObjectId>);

/// Objects at most a handle notes as stored without their place
/// ([`Known::stored`]); past it, the notes start again.
const KNOWN_STORED_MAX: usize = 65_536;

/// Objects at most that a write whose pack goes inline packs without
/// asking first which are stored (see [`ObjectBackend::stage`]): a turn's
/// few, not the whole history a fresh process may give.
const INLINE_UNASKED: usize = 8;

/// Keys and ids read with the write lock at most (see
/// [`RemoteBackend::lock_chain`]): spelled out in the lock's query, a
/// commit's few dozen are a few KiB of text.
const LOCK_READS_MAX: usize = 1024;

/// The remote backend (see the module's documentation).
pub struct RemoteBackend {
    url: StoreUrl,
    read_only: bool,
    wait: Option<Duration>,
    /// Reads (`ops`, `objects`), never inside a write's transaction.
    reader: Mutex<Option<Conn>>,
    /// Writes: held, with its transaction open, by a [`RemoteLock`].
    writer: Mutex<Option<Conn>>,
    /// object_store's client is async: one small runtime per backend,
    /// driven by `block_on` in the trait's synchronous methods.
    rt: tokio::runtime::Runtime,
    s3: AmazonS3,
    known: RwLock<Known>,
    /// What this handle read under the write lock while it holds it (see
    /// [`UnderLock`]); `None` the rest of the time.
    under_lock: Mutex<Option<UnderLock>>,
    /// Holds of the write lock so far ([`UnderLock::epoch`]).
    lock_epochs: std::sync::atomic::AtomicU64,
    /// The highest `chain_head.sweeps` this handle has read (-1: none).
    sweeps_seen: std::sync::atomic::AtomicI64,
    /// Inflated pack bodies fetched or written, by pack row (see
    /// [`RemoteBackend::remember_body`]).
    bodies: Mutex<HashMap<i64, Arc<Vec<u8>>>>,
    /// Fetched packs as fetched, by name (see [`S3Settings::cache_dir`]).
    cache_dir: Option<std::path::PathBuf>,
    staged: Mutex<Option<Staged>>,
    /// The runs this handle has claimed, held as advisory locks (see
    /// `claims.rs`).
    claims: Mutex<claims::Claims>,
    /// The schema version found at open (after upgrading it, for a
    /// writable handle): below 2, there are no index keys to keep.
    schema: i32,
    /// The index keys the next append writes (see [`KeptIndex::index_stage`]).
    staged_keys: Mutex<Option<Vec<KeyWrite>>>,
    /// A write of this handle brought the inline packs to [`SEAL_BYTES`]:
    /// its upkeep seals them ([`ObjectBackend::maintain`]).
    seal_due: AtomicBool,
    /// What the next write reads with its lock ([`KeptIndex::read_with_lock`]).
    lock_reads: Mutex<Option<LockReads>>,
    /// This handle's writes committed without waiting for the WAL's flush,
    /// and which of them are known flushed (see `write.rs`, "the flush
    /// after the lock").
    flushes: Mutex<Flushes>,
    /// Test-only figures: statements run on the reader connection,
    /// operation rows and object rows read.
    counts: Counts,
}

/// A handle's writes committed before the WAL that holds them reached the
/// disk, counted per writer connection: a write's [`SyncTicket`] is
/// (connection, its number on it). Whether one landed can be learnt only
/// on the connection that committed it: a new one may follow a restart of
/// the server that lost it.
#[derive(Debug, Default)]
pub(super) struct Flushes {
    /// The writer connection: counts the connections made so far.
    conn: u64,
    /// Writes committed on it without waiting for their flush.
    committed: u64,
    /// Of those, how many are known flushed (the first ones).
    flushed: u64,
    /// The connection before, and how many of its writes were known
    /// flushed when it went.
    before: (u64, u64),
}

impl Flushes {
    /// A new writer connection: what the last one committed and did not
    /// see flushed stays unknown.
    fn reconnected(&mut self) {
        if self.committed > 0 {
            // (A connection that committed nothing, one that failed to
            // connect say, leaves the one before as it was.)
            self.before = (self.conn, self.flushed);
        }
        self.conn += 1;
        self.committed = 0;
        self.flushed = 0;
    }

    /// A write committed without its flush: its ticket.
    fn committed(&mut self) -> SyncTicket {
        self.committed += 1;
        SyncTicket((self.conn, self.committed))
    }

    /// Whether the write of `ticket` is known flushed (`Some(true)`), is
    /// still to flush on the current connection (`Some(false)`), or was
    /// committed on a connection since lost and not seen flushed (`None`).
    fn state(&self, SyncTicket((conn, n)): SyncTicket) -> Option<bool> {
        if n == 0 || (conn == self.before.0 && n <= self.before.1) {
            return Some(true);
        }
        (conn == self.conn).then_some(self.flushed >= n)
    }
}

/// What a handle asked PostgreSQL, for tests that check that opening a
/// store replays nothing ([`RemoteBackend::counts`]) and that a read looks
/// up only the objects it needs ([`RemoteBackend::object_rows`]).
#[derive(Debug, Default)]
struct Counts {
    queries: std::sync::atomic::AtomicU64,
    op_rows: std::sync::atomic::AtomicU64,
    object_rows: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RemoteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBackend")
            .field("postgres", &self.url.shown)
            .field("objects", &self.url.s3_shown())
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// What a writer reads of the committed state while it holds the write
/// lock, kept until it lets go: nothing committed can change meanwhile
/// (every writer, gc and reindex included, commits under that lock), so
/// each answer holds for the whole write and is asked once. The chain head
/// comes with the lock; keys and object rows are read ahead in one round
/// trip ([`KeptIndex::read_ahead_locked`]) and on a miss.
#[derive(Debug, Default)]
struct UnderLock {
    /// Which hold of the lock this is (a count per handle): an answer is
    /// kept only by the hold it was asked in.
    epoch: u64,
    /// `chain_head` as locked: `seq`, `hash`, `index_seq`.
    head: (i64, Option<Vec<u8>>, Option<i64>),
    /// `chain_head.sweeps` as locked (schema version 4).
    sweeps: Option<i64>,
    /// Index keys read: a value, or `None` for a key that is not there.
    keys: HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Whether an `objects` row names each object asked about.
    stored: IdMap<bool>,
}

/// The remote backend's write lock: the writer connection, inside a
/// transaction that holds the chain-head row. Dropped without a commit, it
/// rolls back.
pub(crate) struct RemoteLock<'a> {
    conn: RefCell<MutexGuard<'a, Option<Conn>>>,
    open: Cell<bool>,
    head_seq: i64,
    head_hash: Option<Vec<u8>>,
    under_lock: &'a Mutex<Option<UnderLock>>,
}

impl RemoteLock<'_> {
    /// Forgets what was read under the lock: called when its transaction
    /// ends (a write that commits with its rows calls it on the answer),
    /// so no answer outlives it.
    fn forget_reads(&self) {
        *self.under_lock.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Commits the lock's transaction, which lets go of the lock.
    fn commit(&self, c: &mut postgres::Client) -> std::result::Result<(), postgres::Error> {
        self.forget_reads();
        c.batch_execute("COMMIT")?;
        self.open.set(false);
        Ok(())
    }
}

impl std::fmt::Debug for RemoteLock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteLock")
            .field("open", &self.open.get())
            .field("head_seq", &self.head_seq)
            .finish_non_exhaustive()
    }
}

impl Drop for RemoteLock<'_> {
    fn drop(&mut self) {
        self.forget_reads();
        if !self.open.get() {
            return;
        }
        let mut conn = self.conn.borrow_mut();
        let failed = conn
            .as_mut()
            .is_some_and(|c| c.batch_execute("ROLLBACK").is_err());
        if failed {
            // A connection in an unknown state is not reused.
            **conn = None;
        }
    }
}

impl RemoteBackend {
    /// Opens the remote store `url` (`postgres://...?objects=s3://...`)
    /// with the S3 settings of the standard variables.
    pub fn open(url: &str, opts: &OpenOptions) -> Result<RemoteBackend> {
        RemoteBackend::open_with(url, opts, &S3Settings::from_env())
    }

    /// [`RemoteBackend::open`] with explicit S3 settings. Connects to
    /// PostgreSQL and checks the schema; the bucket is first used by the
    /// first read or write of an object.
    pub fn open_with(url: &str, opts: &OpenOptions, s3: &S3Settings) -> Result<RemoteBackend> {
        let mut backend = RemoteBackend::connect(url, opts, s3)?;
        let version = backend.with_reader(|c| {
            match c.query_one("SELECT max(version) FROM sessctl.schema_version", &[]) {
                Ok(r) => Ok(r.get::<_, Option<i32>>(0)),
                // No schema, or no table: nothing was initialised there.
                Err(e)
                    if e.code() == Some(&SqlState::UNDEFINED_TABLE)
                        || e.code() == Some(&SqlState::INVALID_SCHEMA_NAME) =>
                {
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        })?;
        let no_store = || Error::Invalid(format!("{} holds no sessctl store", backend.url.shown));
        match version {
            None => return Err(no_store()),
            Some(v) if v > SCHEMA_VERSION => {
                return Err(Error::UnsupportedFormat {
                    path: backend.url.shown.clone().into(),
                    found: v.to_string(),
                    supported: SCHEMA_VERSION as u32,
                })
            }
            Some(v) if v < OLDEST_SCHEMA_VERSION => {
                return Err(Error::Invalid(format!(
                    "{} has schema version {v}; initialising the store again upgrades it to {SCHEMA_VERSION}",
                    backend.url.shown
                )))
            }
            Some(v) if v < SCHEMA_VERSION && !opts.read_only => {
                // The first writable open upgrades it; the keys are built
                // from the operations next, under the write lock
                // (`Store::open_remote`).
                backend.migrate()?;
                backend.schema = SCHEMA_VERSION;
            }
            Some(v) => backend.schema = v,
        }
        if backend.schema >= IDENTITY_SCHEMA {
            let recorded = backend.with_reader(|c| {
                match c.query_opt("SELECT objects FROM sessctl.store", &[]) {
                    Ok(row) => Ok(row.map(|r| r.get::<_, String>(0))),
                    // A role granted its tables before the upgrade that
                    // added this one (GRANT ... ON ALL TABLES is not for
                    // tables made later) may not read it: it opens
                    // unchecked, as before version 7, rather than not at
                    // all (a reader through a wrong prefix still finds no
                    // sessctl-store object there; a writer owns the table).
                    Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Ok(None),
                    Err(e) => Err(e),
                }
            })?;
            if let Some(objects) = recorded {
                backend.check_objects(&objects)?;
            }
        }
        Ok(backend)
    }

    /// Refuses a URL whose `objects=` is not where the store's objects are
    /// (`recorded`, from `sessctl.store`): read there, the store would look
    /// damaged, and written or swept there, it would be.
    fn check_objects(&self, recorded: &str) -> Result<()> {
        let given = self.url.s3_shown();
        if recorded == given {
            return Ok(());
        }
        Err(Error::Remote {
            what: self.url.shown.clone(),
            reason: format!(
                "this store keeps its objects in {recorded}, not in {given}: \
                 the URL's objects= must name {recorded}"
            ),
        })
    }

    /// Statements run on the reader connection and operation rows read by
    /// this handle so far (for tests: opening a store with index keys
    /// reads no operation).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.counts.queries.load(Ordering::Relaxed),
            self.counts.op_rows.load(Ordering::Relaxed),
        )
    }

    /// `sessctl.objects` rows this handle has read so far (for tests: a
    /// read looks up the objects it needs, not the whole table).
    pub fn object_rows(&self) -> u64 {
        self.counts.object_rows.load(Ordering::Relaxed)
    }

    /// Applies the migrations the schema lacks, in one transaction under
    /// the advisory lock that orders initialisers. Returns whether the
    /// schema was new.
    fn migrate(&self) -> Result<bool> {
        self.migrate_to(SCHEMA_VERSION)
    }

    /// Test-only: initialises the remote store `url` at an older schema
    /// version (the migrations up to `version`), as an older sessctl would
    /// have, to check that such a store still opens.
    #[doc(hidden)]
    pub fn init_at_version(url: &str, s3: &S3Settings, version: i32) -> Result<bool> {
        let backend = RemoteBackend::connect(url, &OpenOptions::default(), s3)?;
        if version < IDENTITY_SCHEMA {
            // As that version's init did: the marker without an id.
            backend.write_marker(None)?;
        }
        backend.migrate_to(version)
    }

    /// [`RemoteBackend::migrate`], up to `version` only.
    fn migrate_to(&self, target: i32) -> Result<bool> {
        self.with_writer_conn(|c| -> std::result::Result<Result<bool>, postgres::Error> {
            let mut tx = c.transaction()?;
            // One initialiser at a time (the lock ends with the transaction).
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('sessctl init'))",
                &[],
            )?;
            tx.batch_execute(
                "CREATE SCHEMA IF NOT EXISTS sessctl;
                 CREATE TABLE IF NOT EXISTS sessctl.schema_version (
                     version    integer PRIMARY KEY,
                     applied_at bigint  NOT NULL
                 );",
            )?;
            let have: Option<i32> = tx
                .query_one("SELECT max(version) FROM sessctl.schema_version", &[])?
                .get(0);
            let have = have.unwrap_or(0);
            for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > have && *v <= target) {
                tx.batch_execute(sql)?;
                tx.execute(
                    "INSERT INTO sessctl.schema_version (version, applied_at) VALUES ($1, $2)",
                    &[version, &crate::time::now_ms()],
                )?;
            }
            if target >= IDENTITY_SCHEMA {
                // Under the advisory lock, so that initialisers of one new
                // store agree on its id; an error rolls everything back
                // (the transaction is dropped uncommitted).
                let row = tx
                    .query_opt("SELECT id, objects FROM sessctl.store", &[])?
                    .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)));
                let claimed = match row {
                    Some((id, objects)) => self
                        .check_objects(&objects)
                        .and_then(|()| self.check_marker(&id))
                        .map(|()| None),
                    None => self.claim_bucket(have).map(Some),
                };
                match claimed {
                    Err(e) => return Ok(Err(e)),
                    Ok(Some(id)) => {
                        tx.execute(
                            "INSERT INTO sessctl.store (id, objects) VALUES ($1, $2)",
                            &[&id, &self.url.s3_shown()],
                        )?;
                    }
                    Ok(None) => {}
                }
            }
            tx.commit()?;
            Ok(Ok(have == 0))
        })?
    }

    /// A new store's id, or that of an older store adopting its bucket
    /// (`have`, its schema version, 0 for a new one), once the bucket says
    /// the URL's prefix is this store's to take: a new store writes its
    /// `sessctl-store` object (create-only) and refuses a prefix that holds
    /// another's; an older store's must already be there, without an id,
    /// as the init of its version wrote it (else `objects=` names a place
    /// that is not its).
    fn claim_bucket(&self, have: i32) -> Result<String> {
        let id = new_store_id(&self.url.shown);
        if have == 0 {
            return match self.write_marker(Some(&id))? {
                Marker::Store(Some(ours)) if ours == id => Ok(id),
                other => Err(self.taken(&other)),
            };
        }
        match self.read_marker()? {
            Some(Marker::Store(None)) => Ok(id),
            None => Err(Error::Remote {
                what: self.url.s3_shown(),
                reason: format!(
                    "holds no sessctl-store object, so it is not where {}'s objects are: \
                     the URL's objects= must name the bucket and prefix its init named",
                    self.url.shown
                ),
            }),
            Some(other) => Err(self.taken(&other)),
        }
    }

    /// For a store that knows its id: its prefix's `sessctl-store` object
    /// is there (written again if it was lost) and names no other store.
    fn check_marker(&self, id: &str) -> Result<()> {
        match self.write_marker(Some(id))? {
            Marker::Store(None) => Ok(()),
            Marker::Store(Some(other)) if other == id => Ok(()),
            other => Err(self.taken(&other)),
        }
    }

    /// The error of a prefix that holds what this store may not take.
    fn taken(&self, found: &Marker) -> Error {
        let marker = format!("{}/{MARKER}", self.url.s3_shown());
        let reason = match found {
            Marker::Store(Some(other)) => format!(
                "holds the objects of another store (its {MARKER} object names store {other}): \
                 give this store a prefix of its own (if no store keeps its objects there, as \
                 after an init that stopped half-way, delete {marker} and run init again)"
            ),
            Marker::Store(None) => format!(
                "holds the objects of another store (its {MARKER} object was written by an \
                 older sessctl): give this store a prefix of its own"
            ),
            Marker::Foreign => format!("its {MARKER} object is not sessctl's"),
        };
        Error::Remote {
            what: self.url.s3_shown(),
            reason,
        }
    }

    /// Checks that the bucket of the remote store `url` takes a create-only
    /// write and gives it back, then creates (or upgrades) the schema,
    /// applying the migrations it lacks in one transaction. Returns whether
    /// the schema was new. Safe to run again, and from several processes.
    pub fn init(url: &str, s3: &S3Settings) -> Result<bool> {
        let backend = RemoteBackend::connect(url, &OpenOptions::default(), s3)?;
        // The bucket is checked in the migrations' transaction: an init
        // that fails there leaves no schema.
        backend.migrate_to(SCHEMA_VERSION)
    }

    fn connect(url: &str, opts: &OpenOptions, s3: &S3Settings) -> Result<RemoteBackend> {
        let url = StoreUrl::parse(url)?;
        let s3_settings_cache = s3.cache_dir.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Remote {
                what: url.s3_shown(),
                reason: format!("no runtime for the S3 client: {e}"),
            })?;
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(&url.bucket)
            .with_region(s3.region.as_deref().unwrap_or("us-east-1"))
            .with_allow_http(s3.allow_http)
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(5))
                    .with_timeout(Duration::from_secs(60))
                    .with_allow_http(s3.allow_http),
            )
            .with_retry(RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(20),
                ..RetryConfig::default()
            });
        if let Some(e) = &s3.endpoint {
            b = b.with_endpoint(e);
        }
        if let Some(k) = &s3.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(k) = &s3.secret_access_key {
            b = b.with_secret_access_key(k);
        }
        let s3 = b.build().map_err(|e| Error::Remote {
            what: url.s3_shown(),
            reason: e.to_string(),
        })?;
        let backend = RemoteBackend {
            url,
            read_only: opts.read_only,
            wait: opts.wait,
            reader: Mutex::new(None),
            writer: Mutex::new(None),
            rt,
            s3,
            known: RwLock::new(Known::default()),
            under_lock: Mutex::new(None),
            lock_epochs: Default::default(),
            sweeps_seen: std::sync::atomic::AtomicI64::new(-1),
            bodies: Mutex::new(HashMap::new()),
            cache_dir: s3_settings_cache,
            staged: Mutex::new(None),
            claims: Mutex::new(claims::Claims::default()),
            schema: SCHEMA_VERSION,
            staged_keys: Mutex::new(None),
            seal_due: AtomicBool::new(false),
            flushes: Mutex::default(),
            counts: Counts::default(),
            lock_reads: Mutex::new(None),
        };
        // Connect now: an unreachable server is one clear error at open.
        backend.with_reader(|_| Ok(()))?;
        Ok(backend)
    }

    fn pg_error(&self, e: postgres::Error) -> Error {
        if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
            return Error::Locked {
                path: self.url.shown.clone().into(),
                pid: None,
            };
        }
        let reason = match e.as_db_error() {
            Some(db) => format!("{}: {}", db.severity().to_lowercase(), db.message()),
            None => one_line(&e),
        };
        Error::Remote {
            what: self.url.shown.clone(),
            reason,
        }
    }

    /// A table whose rows say what no write leaves (a row gone that the
    /// schema keeps, a value out of its range): damage to report as such
    /// (fsck's exit 3), not a server that failed a request.
    fn damaged_table(&self, table: &str, reason: String) -> Error {
        Error::CorruptTable {
            table: format!("{} sessctl.{table}", self.url.shown),
            reason,
        }
    }

    fn s3_error(&self, e: object_store::Error) -> Error {
        Error::Remote {
            what: self.url.s3_shown(),
            reason: one_line(&e),
        }
    }

    /// Runs `f` on the reader connection, connecting (again) as needed; a
    /// statement that fails because the server dropped the connection (a
    /// restart) is run once more on a new one (reads only).
    fn with_reader<T>(
        &self,
        f: impl Fn(&mut Conn) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let mut slot = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        self.counts.queries.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..2 {
            let client = self.client(&mut slot)?;
            match f(client) {
                Ok(v) => return Ok(v),
                Err(e) if attempt == 0 && (e.is_closed() || client.is_closed()) => {
                    *slot = None;
                }
                Err(e) => {
                    if client.is_closed() {
                        *slot = None;
                    }
                    return Err(self.pg_error(e));
                }
            }
        }
        unreachable!("the second attempt returns")
    }

    /// Runs `f` on the writer connection (outside the write lock: init).
    fn with_writer_conn<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        let mut slot = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let client = self.writer_client(&mut slot)?;
        f(client).map_err(|e| self.pg_error(e))
    }

    /// [`RemoteBackend::client`] for the writer connection: a new one
    /// cannot see the flush of what an earlier one committed without
    /// waiting for it (the server may have restarted in between).
    fn writer_client<'c>(&self, slot: &'c mut Option<Conn>) -> Result<&'c mut Conn> {
        if slot.as_ref().is_none_or(|c| c.is_closed()) {
            *slot = None;
            self.flushes().reconnected();
        }
        self.client(slot)
    }

    /// The writers' flush state (see [`Flushes`]); taken after the writer
    /// connection's lock when both are.
    fn flushes(&self) -> MutexGuard<'_, Flushes> {
        self.flushes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn client<'c>(&self, slot: &'c mut Option<Conn>) -> Result<&'c mut Conn> {
        if slot.as_ref().is_none_or(|c| c.is_closed()) {
            let client = self.url.pg.connect(NoTls).map_err(|e| self.pg_error(e))?;
            *slot = Some(Conn::new(client));
        }
        Ok(slot.as_mut().expect("connected just now"))
    }

    /// Writes the prefix's `sessctl-store` object with a create-only PUT
    /// (naming the store `id`; or none, as versions 1 to 6 wrote it, for
    /// the tests that make such a store) and
    /// reads back what is there: the bucket exists, these credentials may
    /// write it, and the server honours conditional writes. A marker
    /// already there is kept as it is.
    fn write_marker(&self, id: Option<&str>) -> Result<Marker> {
        let key = self.url.key(MARKER);
        let mut body = format!("sessctl remote store, schema {SCHEMA_VERSION}\n");
        match id {
            Some(id) => body.push_str(&format!("store {id}\n")),
            None => body = "sessctl remote store, schema 6\n".to_owned(),
        }
        let put = self.rt.block_on(self.s3.put_opts(
            &key,
            PutPayload::from(body.into_bytes()),
            PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            },
        ));
        match put {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(object_store::Error::NotFound { .. }) => {
                return Err(Error::Remote {
                    what: self.url.s3_shown(),
                    reason: format!(
                        "there is no bucket {} (sessctl does not create buckets)",
                        self.url.bucket
                    ),
                })
            }
            Err(e) => return Err(self.s3_error(e)),
        }
        self.read_marker()?.ok_or_else(|| Error::Remote {
            what: self.url.s3_shown(),
            reason: format!("its {MARKER} object, just written, is not there"),
        })
    }

    /// The prefix's `sessctl-store` object, if there is one.
    fn read_marker(&self) -> Result<Option<Marker>> {
        let key = self.url.key(MARKER);
        match self
            .rt
            .block_on(async { self.s3.get(&key).await?.bytes().await })
        {
            Ok(body) => Ok(Some(Marker::parse(&body))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.s3_error(e)),
        }
    }

    /// Uploads a pack (create-only: one already there is these bytes).
    fn put_pack(&self, built: &pack::Built) -> Result<()> {
        let key = self.url.key(&pack_key(&built.name));
        let put = self.rt.block_on(self.s3.put_opts(
            &key,
            PutPayload::from(built.bytes.clone()),
            PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            },
        ));
        match put {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(self.s3_error(e)),
        }
    }

    /// The objects among `objects` this handle does not know to be stored
    /// (after [`RemoteBackend::locate`] asked about them), each once.
    fn unknown<'o>(&self, objects: &'o [EncodedObject]) -> Vec<&'o EncodedObject> {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let mut seen = IdSet::default();
        objects
            .iter()
            .filter(|o| {
                !known.objects.contains_key(&o.id())
                    && !known.stored.contains(&o.id())
                    && seen.insert(o.id())
            })
            .collect()
    }

    /// The pack to record `new` in: the one staged for it, or one built and
    /// uploaded now.
    fn pack_for(&self, new: &[&EncodedObject]) -> Result<Staged> {
        let staged = self.staged.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(s) = staged {
            if new.iter().all(|o| s.entries.contains_key(&o.id())) {
                return Ok(s);
            }
        }
        self.upload(new)
    }

    /// Builds the pack of `objects` and puts it where it goes: in the
    /// bucket (create-only), or, when the store URL keeps packs of its size
    /// inline (`inline=BYTES`), nowhere yet: its row will hold its bytes, and
    /// the write makes no S3 request.
    fn upload(&self, objects: &[&EncodedObject]) -> Result<Staged> {
        // Read before the upload begins, by definition of the field.
        let sweeps_seen = Some(self.sweeps_seen.load(Ordering::Acquire)).filter(|s| *s >= 0);
        let built = self.build_pack(objects)?;
        if self.schema >= INLINE_SCHEMA && built.bytes.len() as u64 <= self.url.inline_max {
            return Ok(self.staged_inline(built));
        }
        self.put_pack(&built)?;
        // As a fetched pack: another process of this machine reading it
        // (the next command, a reader) finds it in the cache, not in the
        // bucket. An inline pack is not kept: a reader finds it in its row,
        // and creating a file a commit took a third of a busy writer's time
        // (the file system's inode allocation).
        self.keep(&built.name, &built.bytes);
        Ok(Staged {
            bytes: built.bytes.len() as u64,
            entries: built.entries.iter().map(|e| (e.id, *e)).collect(),
            name: built.name,
            sweeps_seen,
            body: Arc::new(built.body),
            inline: None,
        })
    }

    /// The pack of `objects`.
    fn build_pack(&self, objects: &[&EncodedObject]) -> Result<pack::Built> {
        pack::build(objects).map_err(|e| Error::Remote {
            what: self.url.s3_shown(),
            reason: format!("packing {} objects: {e}", objects.len()),
        })
    }

    /// `built`, staged to go in its row: nothing is uploaded.
    fn staged_inline(&self, built: pack::Built) -> Staged {
        Staged {
            bytes: built.bytes.len() as u64,
            entries: built.entries.iter().map(|e| (e.id, *e)).collect(),
            name: built.name,
            sweeps_seen: Some(self.sweeps_seen.load(Ordering::Acquire)).filter(|s| *s >= 0),
            body: Arc::new(built.body),
            inline: Some(built.bytes),
        }
    }

    /// Reads every object row of the packs committed since the last such
    /// read (one query): where each object lives. The first call reads
    /// them all (O(objects)); later ones only the packs committed since.
    /// For the verbs that need the whole set (gc's marking, fsck, a scan,
    /// a reindex), and only those: a read looks up what it needs
    /// ([`RemoteBackend::locate`]).
    fn load_rows(&self) -> Result<()> {
        let seen = self.known.read().unwrap_or_else(|p| p.into_inner()).seen;
        let sql = format!("SELECT {} WHERE o.pack > $1", self.row_columns());
        let rows = self.with_reader(|c| c.query_typed(&sql, &[(&seen, Type::INT8)]))?;
        self.remember_rows(&rows)?;
        let top = rows.iter().map(|r| r.get::<_, i64>(1)).max();
        if let Some(top) = top {
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            known.seen = known.seen.max(top);
        }
        Ok(())
    }

    /// What a query of `packs p` selects for [`PackRow::inline`]: a store
    /// below version 6 has no `body` column (and no inline packs).
    fn inline_column(&self) -> &'static str {
        if self.schema >= INLINE_SCHEMA {
            "p.body IS NOT NULL"
        } else {
            "false"
        }
    }

    /// Where `id` lives: as this handle found it, else asked of
    /// PostgreSQL (one row). An absence is not remembered: the next ask
    /// asks again, and finds an object stored meanwhile.
    fn lookup(&self, id: &ObjectId) -> Result<Option<Loc>> {
        let hit = |s: &Self| {
            s.known
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .objects
                .get(id)
                .copied()
        };
        if let Some(l) = hit(self) {
            return Ok(Some(l));
        }
        if self.under_lock(|u| u.stored.get(id) == Some(&false)) == Some(true) {
            // Asked under the write lock already: not stored.
            return Ok(None);
        }
        self.locate(std::slice::from_ref(id))?;
        Ok(hit(self))
    }

    /// The inflated body of pack row `pack`, fetched once and verified.
    fn body(&self, pack: i64) -> Result<Arc<Vec<u8>>> {
        if let Some(b) = self
            .bodies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&pack)
        {
            return Ok(Arc::clone(b));
        }
        let row = self
            .known
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .packs
            .get(&pack)
            .cloned()
            .ok_or_else(|| {
                self.damaged_table(
                    "objects",
                    format!("an object names pack row {pack}, which is not there"),
                )
            })?;
        let key = self.url.key(&pack_key(&row.key));
        if let Some(body) = self.cached(&row.key) {
            let body = Arc::new(body);
            self.remember_body(pack, &body);
            return Ok(body);
        }
        if row.inline {
            return self.inline_body(pack, &row.key);
        }
        let bytes = match self
            .rt
            .block_on(async { self.s3.get(&key).await?.bytes().await })
        {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => {
                // A bucket or prefix that is not this store's (a wrong
                // URL) says so; in this store's bucket a missing pack is
                // damage.
                let marker = self.url.key(MARKER);
                return Err(match self.rt.block_on(self.s3.head(&marker)) {
                    Err(object_store::Error::NotFound { .. }) => Error::Remote {
                        what: self.url.s3_shown(),
                        reason: "holds no sessctl store (no sessctl-store object there)".into(),
                    },
                    _ => Error::CorruptFile {
                        path: format!("s3://{}/{key}", self.url.bucket).into(),
                        offset: 0,
                        reason: "the pack is missing from the bucket".into(),
                    },
                });
            }
            Err(e) => return Err(self.s3_error(e)),
        };
        let body = pack::open(&row.key, &bytes).map_err(|reason| Error::CorruptFile {
            path: format!("s3://{}/{key}", self.url.bucket).into(),
            offset: 0,
            reason,
        })?;
        self.keep(&row.key, &bytes);
        let body = Arc::new(body);
        self.remember_body(pack, &body);
        Ok(body)
    }

    /// The inflated body of inline pack row `pack`, named `name`, read from
    /// its row and verified. A row that is gone was sealed into the bucket
    /// (or dropped) by the compactor since this handle read where its
    /// objects live: an error, on which a read looks its object up again.
    fn inline_body(&self, pack: i64, name: &str) -> Result<Arc<Vec<u8>>> {
        let bytes = self.with_reader(|c| {
            c.query_opt("SELECT body FROM sessctl.packs WHERE id = $1", &[&pack])
                .map(|r| r.and_then(|r| r.get::<_, Option<Vec<u8>>>(0)))
        })?;
        let Some(bytes) = bytes else {
            return Err(Error::Remote {
                what: self.url.shown.clone(),
                reason: format!(
                    "inline pack {name} (row {pack}) is no longer in PostgreSQL: sealed or dropped"
                ),
            });
        };
        self.inline_pack(pack, name, &bytes)
    }

    /// Checks the bytes of inline pack row `pack` against its name,
    /// inflates them and keeps the body (in memory and in the cache, as a
    /// fetched pack).
    fn inline_pack(&self, pack: i64, name: &str, bytes: &[u8]) -> Result<Arc<Vec<u8>>> {
        let body = pack::open(name, bytes).map_err(|reason| Error::CorruptFile {
            path: format!("{} (sessctl.packs row {pack})", self.url.shown).into(),
            offset: 0,
            reason,
        })?;
        self.keep(name, bytes);
        let body = Arc::new(body);
        self.remember_body(pack, &body);
        Ok(body)
    }

    /// Reads the bodies of the inline packs `packs` (row and name) this
    /// handle does not hold, a thousand to a query: the seal reads every
    /// object of the packs it merges. A row gone meanwhile is left to the
    /// read of its objects, which looks them up again.
    fn prefetch_inline(&self, packs: &[(i64, String)]) -> Result<()> {
        let want: Vec<&(i64, String)> = {
            let bodies = self.bodies.lock().unwrap_or_else(|p| p.into_inner());
            packs
                .iter()
                .filter(|(p, _)| !bodies.contains_key(p))
                .collect()
        };
        for chunk in want.chunks(1000) {
            let ids: Vec<i64> = chunk.iter().map(|(p, _)| *p).collect();
            let rows = self.with_reader(|c| {
                c.query(
                    "SELECT id, body FROM sessctl.packs WHERE id = ANY($1) AND body IS NOT NULL",
                    &[&ids],
                )
            })?;
            let names: HashMap<i64, &String> = chunk.iter().map(|(p, n)| (*p, n)).collect();
            for r in rows {
                let pack: i64 = r.get(0);
                let bytes: Vec<u8> = r.get(1);
                self.inline_pack(pack, names[&pack], &bytes)?;
            }
        }
        Ok(())
    }

    /// An object row's fields, checked: its id and where it lives.
    fn loc(&self, id: &[u8], pack: i64, kind: i16, off: i64, len: i64) -> Result<(ObjectId, Loc)> {
        let id = ObjectId::from_slice(id).ok_or_else(|| {
            self.damaged_table(
                "objects",
                format!("an object row has a {}-byte id", id.len()),
            )
        })?;
        let kind = u8::try_from(kind)
            .ok()
            .and_then(ObjectKind::from_code)
            .ok_or_else(|| Error::corrupt(id, format!("its object row has unknown kind {kind}")))?;
        Ok((
            id,
            Loc {
                pack,
                kind,
                off: off.max(0) as u64,
                len: len.max(0) as u64,
            },
        ))
    }

    /// Object `id` where `loc` places it, verified; looked up again when
    /// that pack is gone (merged or sealed meanwhile).
    fn read_at(&self, id: &ObjectId, loc: Loc) -> Result<EncodedObject> {
        let body = match self.body(loc.pack) {
            Ok(b) => b,
            Err(e) => {
                return match self.relocate(id)? {
                    Some(p) if p != loc.pack => self.read(id)?.ok_or(Error::NotFound { id: *id }),
                    Some(_) => Err(e),
                    None => Err(Error::NotFound { id: *id }),
                }
            }
        };
        let payload = pack::payload(&body, loc.off, loc.len).map_err(|r| Error::corrupt(*id, r))?;
        EncodedObject::verified(*id, loc.kind, payload.to_vec()).map_err(|r| Error::corrupt(*id, r))
    }

    /// Keeps pack row `pack`'s inflated body for this handle's reads. The
    /// bodies kept are bounded ([`BODIES_KEPT_BYTES`]): past that, the
    /// older ones are let go (they are read again from the cache
    /// directory, else fetched).
    fn remember_body(&self, pack: i64, body: &Arc<Vec<u8>>) {
        let mut bodies = self.bodies.lock().unwrap_or_else(|p| p.into_inner());
        let held: usize = bodies.values().map(|b| b.len()).sum();
        if held + body.len() > BODIES_KEPT_BYTES {
            // Newest first: pack rows grow in commit order.
            let mut rows: Vec<i64> = bodies.keys().copied().collect();
            rows.sort_unstable_by(|a, b| b.cmp(a));
            let mut kept = 0;
            for r in rows {
                let n = bodies[&r].len();
                if kept + n + body.len() > BODIES_KEPT_BYTES / 2 {
                    bodies.remove(&r);
                } else {
                    kept += n;
                }
            }
        }
        bodies.insert(pack, Arc::clone(body));
    }

    /// The inflated body of the pack `name` from the cache, when a file
    /// there hashes to its name (one that does not is removed).
    fn cached(&self, name: &str) -> Option<Vec<u8>> {
        let path = self.cache_dir.as_ref()?.join(format!("{name}.srpk"));
        let bytes = std::fs::read(&path).ok()?;
        match pack::open(name, &bytes) {
            Ok(body) => Some(body),
            Err(_) => {
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Keeps a fetched pack in the cache: written under a temporary name
    /// and renamed, so that a reader never sees half a file. A cache that
    /// cannot be written is no error: the pack is fetched again next time.
    fn keep(&self, name: &str, bytes: &[u8]) {
        let Some(dir) = &self.cache_dir else {
            return;
        };
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let kept = std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, dir.join(format!("{name}.srpk"))));
        if kept.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

impl RemoteBackend {
    /// See [`ObjectBackend::verify_storage`]: the table side.
    fn verify_tables(&self) -> Result<Vec<String>> {
        let (ops, head, refs) = self.with_reader(|c| {
            // One snapshot: a commit meanwhile cannot look like damage.
            let mut tx = c
                .build_transaction()
                .read_only(true)
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .start()?;
            let ops = tx.query("SELECT seq, hash, body FROM sessctl.ops ORDER BY seq", &[])?;
            let head = tx.query_one("SELECT seq, hash FROM sessctl.chain_head", &[])?;
            let refs = tx.query("SELECT name, target FROM sessctl.refs", &[])?;
            tx.commit()?;
            Ok((ops, head, refs))
        })?;
        let shown = &self.url.shown;
        let mut problems = Vec::new();
        let mut derived: HashMap<String, String> = HashMap::new();
        let mut last: (i64, Option<Vec<u8>>) = (0, None);
        for row in &ops {
            let seq: i64 = row.get(0);
            let hash: Vec<u8> = row.get(1);
            let body: Vec<u8> = row.get(2);
            let op = match Operation::decode(&body) {
                Ok(op) => op,
                Err(e) => {
                    problems.push(format!("{shown}: operation row {seq} does not decode: {e}"));
                    continue;
                }
            };
            if op.seq as i64 != seq || seq != last.0 + 1 {
                problems.push(format!(
                    "{shown}: operation row {seq} holds operation {} after operation {}",
                    op.seq, last.0
                ));
            }
            if op.hash()[..] != hash[..] {
                problems.push(format!(
                    "{shown}: operation row {seq}'s hash column is not its operation's hash"
                ));
            }
            for u in &op.refs {
                match &u.new {
                    Some(t) => derived.insert(u.name.to_string(), t.to_string()),
                    None => derived.remove(&u.name.to_string()),
                };
            }
            last = (seq, Some(hash));
        }
        let head: (i64, Option<Vec<u8>>) = (head.get(0), head.get(1));
        if head != last {
            problems.push(format!(
                "{shown}: the chain head names operation {}, the last operation row is {}",
                head.0, last.0
            ));
        }
        let table: HashMap<String, String> = refs
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
        let mut names: Vec<&String> = table.keys().chain(derived.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            if table.get(name) != derived.get(name) {
                problems.push(format!(
                    "{shown}: the refs table says {name} is {}, the operations leave it at {}",
                    table.get(name).map_or("absent", String::as_str),
                    derived.get(name).map_or("absent", String::as_str)
                ));
            }
        }
        Ok(problems)
    }
}

impl RemoteBackend {
    /// Waits for the WAL's flush past everything committed so far, on the
    /// writer connection in `slot`, the one that committed this handle's
    /// first `upto` writes not known flushed (never on a new one: see
    /// [`Flushes`]).
    fn flush_on(&self, slot: &mut Option<Conn>, upto: u64) -> Result<()> {
        let Some(client) = slot.as_mut().filter(|c| !c.is_closed()) else {
            return Err(Error::Remote {
                what: self.url.shown.clone(),
                reason: "the write committed, and the connection was lost before its flush: \
                         it may or may not have landed"
                    .into(),
            });
        };
        client
            .batch_execute(write::FLUSH)
            .map_err(|e| write::unflushed(self, e))?;
        let mut f = self.flushes();
        f.flushed = f.flushed.max(upto);
        Ok(())
    }

    /// The head and whether the keys describe it, from `chain_head`'s
    /// `seq`, `hash` and `index_seq`.
    fn head_from(
        &self,
        (seq, hash, index_seq): (i64, Option<Vec<u8>>, Option<i64>),
    ) -> Result<(Option<(u64, crate::refs::Hash)>, bool)> {
        let head = match hash {
            Some(h) => Some((
                seq.max(0) as u64,
                h.as_slice().try_into().map_err(|_| Error::Remote {
                    what: self.url.shown.clone(),
                    reason: format!("the chain head's hash has {} bytes", h.len()),
                })?,
            )),
            None => None,
        };
        Ok((head, index_seq == Some(seq)))
    }
}

impl KeptIndex for RemoteBackend {
    fn index_head(&self) -> Result<(Option<(u64, crate::refs::Hash)>, bool)> {
        let (head, built, _) = self.index_head_reading(&[])?;
        Ok((head, built))
    }

    /// One statement, so one snapshot: the head's row and the keys' rows,
    /// told apart by the key, which the head's row lacks.
    fn index_head_reading(&self, keys: &[Vec<u8>]) -> Result<HeadReading> {
        if let Some(head) = self.under_lock(|u| u.head.clone()) {
            // Read with the lock: neither it nor the keys move while it
            // is held.
            let found = if keys.is_empty() {
                Vec::new()
            } else {
                self.index_get_many(keys)?
            };
            let (head, built) = self.head_from(head)?;
            return Ok((head, built, found));
        }
        let sweeps = if self.schema >= SWEEPS_SCHEMA {
            "sweeps"
        } else {
            "NULL::int8"
        };
        let sql = format!(
            "SELECT seq, hash, index_seq, {sweeps}, NULL::bytea, NULL::bytea FROM sessctl.chain_head
             UNION ALL
             SELECT NULL, NULL, NULL, NULL, key, value FROM sessctl.index_keys WHERE key = ANY($1)"
        );
        let rows = self.with_reader(|c| {
            let st = c.prepared(&sql, &[Type::BYTEA_ARRAY])?;
            c.query(&st, &[&keys])
        })?;
        let mut head = None;
        let mut found = Vec::with_capacity(keys.len());
        for row in rows {
            match row.get::<_, Option<Vec<u8>>>(4) {
                Some(key) => found.push((key, row.get(5))),
                None => {
                    if let Some(v) = row.get::<_, Option<i64>>(3) {
                        self.sweeps_seen.fetch_max(v, Ordering::AcqRel);
                    }
                    head = Some((row.get(0), row.get(1), row.get(2)));
                }
            }
        }
        let head =
            head.ok_or_else(|| self.damaged_table("chain_head", "the row is missing".into()))?;
        let (head, built) = self.head_from(head)?;
        Ok((head, built, found))
    }

    fn index_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let epoch = self.under_lock(|u| u.epoch);
        if let Some(v) = self.key_under_lock(key) {
            return Ok(v);
        }
        let row = self.with_reader(|c| {
            let st = c.prepared(
                "SELECT value FROM sessctl.index_keys WHERE key = $1",
                &[Type::BYTEA],
            )?;
            c.query_opt(&st, &[&key])
        })?;
        let v = row.map(|r| r.get(0));
        if let Some(epoch) = epoch {
            self.remember_key(epoch, key, &v);
        }
        Ok(v)
    }

    fn index_get_many(&self, keys: &[Vec<u8>]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let rows = self.with_reader(|c| {
            let st = c.prepared(
                "SELECT key, value FROM sessctl.index_keys WHERE key = ANY($1)",
                &[Type::BYTEA_ARRAY],
            )?;
            c.query(&st, &[&keys])
        })?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn read_ahead_locked(&self, keys: &[Vec<u8>], ids: &[ObjectId]) -> Result<()> {
        self.read_ahead(keys, ids)
    }

    fn read_with_lock(&self, keys: &[Vec<u8>], ids: &[ObjectId]) {
        *self.lock_reads.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((keys.to_vec(), ids.to_vec()));
    }

    fn index_scan(
        &self,
        prefix: &[u8],
        cursor: Option<&[u8]>,
        reverse: bool,
        n: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        // bytea compares byte by byte, as the index's keys sort.
        let mut lower = prefix.to_vec();
        let mut upper = super::prefix_end(prefix);
        match (reverse, cursor) {
            (false, Some(c)) => lower = [c, &[0u8][..]].concat(),
            (true, Some(c)) => upper = Some(c.to_vec()),
            _ => {}
        }
        let limit = i64::try_from(n).unwrap_or(i64::MAX);
        let sql = match (reverse, upper.is_some()) {
            (false, true) => "SELECT key, value FROM sessctl.index_keys WHERE key >= $1 AND key < $2 ORDER BY key LIMIT $3",
            (true, true) => "SELECT key, value FROM sessctl.index_keys WHERE key >= $1 AND key < $2 ORDER BY key DESC LIMIT $3",
            (false, false) => "SELECT key, value FROM sessctl.index_keys WHERE key >= $1 AND $2::bytea IS NULL ORDER BY key LIMIT $3",
            (true, false) => "SELECT key, value FROM sessctl.index_keys WHERE key >= $1 AND $2::bytea IS NULL ORDER BY key DESC LIMIT $3",
        };
        let rows = self.with_reader(|c| c.query(sql, &[&lower, &upper, &limit]))?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// One query: a range scan of the primary key per prefix, side by
    /// side (`LATERAL`), whatever the number of prefixes.
    fn index_scan_prefixes(&self, prefixes: &[Vec<u8>]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if prefixes.is_empty() {
            return Ok(Vec::new());
        }
        let ends = prefixes
            .iter()
            .map(|p| {
                super::prefix_end(p).ok_or_else(|| {
                    Error::Invalid("a prefix scan of every key, in a batch of prefixes".into())
                })
            })
            .collect::<Result<Vec<Vec<u8>>>>()?;
        let rows = self.with_reader(|c| {
            let st = c.prepared(
                "SELECT k.key, k.value FROM unnest($1::bytea[], $2::bytea[]) WITH ORDINALITY AS p(lo, hi, n)
                 CROSS JOIN LATERAL (SELECT key, value FROM sessctl.index_keys
                                     WHERE key >= p.lo AND key < p.hi) AS k
                 ORDER BY p.n, k.key",
                &[Type::BYTEA_ARRAY, Type::BYTEA_ARRAY],
            )?;
            c.query(&st, &[&prefixes, &ends])
        })?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn index_stage(&self, writes: Vec<KeyWrite>) {
        *self.staged_keys.lock().unwrap_or_else(|p| p.into_inner()) = Some(writes);
    }

    fn index_replace(&self, lock: WriteLock<'_>, keys: Vec<(Vec<u8>, Vec<u8>)>) -> Result<()> {
        let Held::Remote(lock) = &lock.0 else {
            return Err(Error::Invalid(
                "a remote store written under another backend's lock".into(),
            ));
        };
        let mut conn = lock.conn.borrow_mut();
        let c = conn.as_mut().expect("a held lock has its connection");
        let pg = |e| self.pg_error(e);
        c.batch_execute("DELETE FROM sessctl.index_keys")
            .map_err(pg)?;
        for chunk in keys.chunks(10_000) {
            let (ks, vs): (Vec<&[u8]>, Vec<&[u8]>) = chunk
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .unzip();
            c.execute(
                "INSERT INTO sessctl.index_keys (key, value)
                 SELECT k, v FROM unnest($1::bytea[], $2::bytea[]) AS t(k, v)",
                &[&ks, &vs],
            )
            .map_err(pg)?;
        }
        c.batch_execute("UPDATE sessctl.chain_head SET index_seq = seq; COMMIT")
            .map_err(pg)?;
        lock.open.set(false);
        Ok(())
    }

    fn index_forget(&self, lock: WriteLock<'_>, doomed: Vec<(Vec<u8>, Vec<u8>)>) -> Result<usize> {
        let Held::Remote(lock) = &lock.0 else {
            return Err(Error::Invalid(
                "a remote store written under another backend's lock".into(),
            ));
        };
        let mut conn = lock.conn.borrow_mut();
        let c = conn.as_mut().expect("a held lock has its connection");
        let pg = |e| self.pg_error(e);
        let mut gone = 0;
        for chunk in doomed.chunks(10_000) {
            let (ks, vs): (Vec<&[u8]>, Vec<&[u8]>) = chunk
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_slice()))
                .unzip();
            gone += c
                .execute(
                    "DELETE FROM sessctl.index_keys i
                     USING unnest($1::bytea[], $2::bytea[]) AS t(k, v)
                     WHERE i.key = t.k
                       AND CASE WHEN substring(t.k FROM 1 FOR 2) = 's:'::bytea
                                THEN NOT EXISTS (SELECT 1 FROM sessctl.objects o
                                                 WHERE o.id = substring(t.k FROM 3))
                                ELSE i.value = t.v END",
                    &[&ks, &vs],
                )
                .map_err(pg)?;
        }
        c.batch_execute("COMMIT").map_err(pg)?;
        lock.open.set(false);
        Ok(gone as usize)
    }
}

/// An error and its sources on one line, each said once.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out = format!("{out}: {s_text}");
        }
        src = s.source();
    }
    out.replace('\n', " ")
}

/// A pack's key under the prefix: objects-format.md, "Remote store".
fn pack_key(name: &str) -> String {
    format!("packs/{name}.srpk")
}

/// How a write transaction's statements are planned: see
/// [`RemoteBackend::lock_chain`].
#[derive(Clone, Copy, Debug)]
pub(super) enum Plans {
    /// Once per prepared statement and connection (a commit's few, small
    /// statements).
    Generic,
    /// As the planner chooses for the values given (gc's and repack's
    /// large arrays).
    Chosen,
}

impl RemoteBackend {
    /// Opens the write transaction and locks the chain head (see the
    /// module's documentation, step 2), waiting as the store was opened to.
    ///
    /// With [`Plans::Generic`] (a commit), the transaction's prepared
    /// statements run on their generic plans: the server plans the
    /// write's statement once per connection instead of on every commit,
    /// under the lock (it judged the plan for the arrays it was given
    /// cheaper each time, and planning it took half of its time there).
    /// gc and repack keep the planner's choice for their large arrays.
    ///
    /// What the writer said it will read under the lock
    /// ([`KeptIndex::read_with_lock`]) is read in the same round trip, by
    /// [`READ_AHEAD`] prepared on the connection beforehand.
    pub(super) fn lock_chain(&self, plans: Plans) -> Result<WriteLock<'_>> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let mut slot = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        // lock_timeout 0 would wait for ever: no wait is the shortest one.
        let ms = self
            .wait
            .map_or(1, |w| w.as_millis().clamp(1, i32::MAX as u128));
        // One round trip: the transaction, its lock timeout, and the
        // chain-head row locked (as text: a simple query).
        let sweeps = if self.schema >= SWEEPS_SCHEMA {
            "sweeps"
        } else {
            "NULL"
        };
        let generic = match plans {
            Plans::Generic => "SET LOCAL plan_cache_mode = force_generic_plan;",
            Plans::Chosen => "",
        };
        let reads = self
            .lock_reads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .filter(|(k, i)| !k.is_empty() || !i.is_empty())
            // A large write (an import) reads them after the lock, bound
            // as parameters rather than spelled out in the query's text.
            .filter(|(k, i)| k.len() + i.len() <= LOCK_READS_MAX);
        // The write's reads ahead, after the lock in the same round trip.
        let ahead = match &reads {
            Some((keys, ids)) => format!(
                "; EXECUTE {READ_AHEAD}({}, {})",
                bytea_array(keys.iter().map(Vec::as_slice)),
                bytea_array(ids.iter().map(|id| id.as_bytes().as_slice()))
            ),
            None => String::new(),
        };
        let begin = format!(
            "BEGIN; SET LOCAL lock_timeout = {ms}; {generic}
             SELECT seq, encode(hash, 'hex'), index_seq, {sweeps} FROM sessctl.chain_head FOR UPDATE{ahead}"
        );
        let mut head = None;
        let mut read = Vec::new();
        for attempt in 0..2 {
            let client = self.writer_client(&mut slot)?;
            // Parsed before the lock, not under it.
            let prepared = self.write_prepared(client).and_then(|_| match &reads {
                Some(_) => self.read_ahead_prepared(client),
                None => Ok(()),
            });
            if let Err(e) = prepared {
                if attempt == 0 && client.is_closed() {
                    // Dropped by the server (a restart): a new one.
                    *slot = None;
                    continue;
                }
                return Err(e);
            }
            match client.simple_query(&begin) {
                Ok(msgs) => {
                    // The head's row, then the reads' rows.
                    let mut rows = msgs.into_iter().filter_map(|m| match m {
                        postgres::SimpleQueryMessage::Row(r) => Some(r),
                        _ => None,
                    });
                    head = rows.next();
                    read.extend(rows);
                    break;
                }
                // A connection the server dropped (a restart): nothing was
                // done on it, so a new one may begin again.
                Err(e) if attempt == 0 && (e.is_closed() || client.is_closed()) => *slot = None,
                Err(e) => {
                    if client.is_closed() || client.batch_execute("ROLLBACK").is_err() {
                        *slot = None;
                    }
                    return Err(self.pg_error(e));
                }
            }
        }
        // Rolled back when dropped, as from here on.
        let mut lock = RemoteLock {
            conn: RefCell::new(slot),
            open: Cell::new(true),
            head_seq: 0,
            head_hash: None,
            under_lock: &self.under_lock,
        };
        let bad = |reason: String| Error::Remote {
            what: self.url.shown.clone(),
            reason,
        };
        let row =
            head.ok_or_else(|| self.damaged_table("chain_head", "the row is missing".into()))?;
        let seq = row
            .get(0)
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| bad("the chain head's seq is not a number".into()))?;
        let hash = match row.get(1) {
            None => None,
            Some(h) => Some(
                crate::hash::ObjectId::from_hex(h)
                    .map_err(|e| bad(format!("the chain head's hash: {e}")))?
                    .as_bytes()
                    .to_vec(),
            ),
        };
        let index_seq = match row.get(2) {
            None => None,
            Some(v) => Some(
                v.parse::<i64>()
                    .map_err(|_| bad("the chain head's index_seq is not a number".into()))?,
            ),
        };
        let sweeps = match row.get(3) {
            None => None,
            Some(v) => Some(
                v.parse::<i64>()
                    .map_err(|_| bad("the chain head's sweeps is not a number".into()))?,
            ),
        };
        if let Some(v) = sweeps {
            self.sweeps_seen.fetch_max(v, Ordering::AcqRel);
        }
        lock.head_seq = seq;
        lock.head_hash = hash.clone();
        let mut under = UnderLock {
            epoch: self.lock_epochs.fetch_add(1, Ordering::Relaxed) + 1,
            head: (seq, hash, index_seq),
            sweeps,
            ..UnderLock::default()
        };
        if let Some((keys, ids)) = reads {
            let rows = read
                .iter()
                .map(|r| {
                    let key = r.get(0).and_then(hex_bytes);
                    let value = r.get(1).map(hex_bytes);
                    match (key, value) {
                        (Some(k), None) => Ok((k, None)),
                        (Some(k), Some(Some(v))) => Ok((k, Some(v))),
                        _ => Err(bad("a read ahead's row is not hex".into())),
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            under.absorb(
                keys.iter().map(Vec::as_slice),
                ids.iter().map(|id| id.as_bytes().as_slice()),
                rows,
            );
        }
        *self.under_lock.lock().unwrap_or_else(|p| p.into_inner()) = Some(under);
        Ok(WriteLock(Held::Remote(lock)))
    }
}

impl ObjectBackend for RemoteBackend {
    fn kept_index(&self) -> Option<&dyn KeptIndex> {
        (self.schema >= 2).then_some(self as &dyn KeptIndex)
    }

    /// One recursive query on `sessctl.lineage` (see `lineage.rs`).
    fn lineage_closure(&self, id: &ObjectId, n: usize) -> Result<Option<Vec<LineageRow>>> {
        self.closure(id, n)
    }

    fn lineage_rebuild(&self) -> Result<Option<usize>> {
        self.rebuild_lineage()
    }

    fn stage(&self, objects: &[EncodedObject]) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        // What is stored already is left out: PostgreSQL asked, in one
        // query, about the objects this handle does not know to be stored.
        // Except for a turn's few objects going inline: its pack holds
        // them all, and the write's lock reads which are stored anyway
        // (step 3), so the rows name only the new ones; a copy of one
        // stored already is dropped when the inline packs are sealed.
        let unknown = self.unknown(objects);
        let small = unknown.len() <= INLINE_UNASKED
            && unknown
                .iter()
                .map(|o| o.payload().len() as u64)
                .sum::<u64>()
                <= self.url.inline_max;
        if small && self.schema >= INLINE_SCHEMA && self.url.inline_max > 0 {
            let built = self.build_pack(&unknown)?;
            if built.bytes.len() as u64 <= self.url.inline_max {
                *self.staged.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(self.staged_inline(built));
                return Ok(());
            }
            // Larger packed than its payloads: to the bucket, asked first.
        }
        let ids: Vec<ObjectId> = unknown.iter().map(|o| o.id()).collect();
        self.locate(&ids)?;
        let new = self.unknown(objects);
        if new.is_empty() {
            return Ok(());
        }
        let staged = self.upload(&new)?;
        *self.staged.lock().unwrap_or_else(|p| p.into_inner()) = Some(staged);
        Ok(())
    }

    /// The write lock, for a commit: see [`RemoteBackend::lock_chain`].
    fn write_lock(&self) -> Result<WriteLock<'_>> {
        self.lock_chain(Plans::Generic)
    }

    fn append_locked(
        &self,
        lock: &WriteLock<'_>,
        objects: &[EncodedObject],
        ops: &[RawOp],
    ) -> Result<(usize, SyncTicket)> {
        let Held::Remote(lock) = &lock.0 else {
            return Err(Error::Invalid(
                "a remote store written under another backend's lock".into(),
            ));
        };
        // What no row names, as PostgreSQL says under the lock (read ahead
        // with the write's checks): a gc may have dropped an object this
        // handle saw, and another writer may have stored one since.
        let mut seen = IdSet::default();
        let ids: Vec<ObjectId> = objects
            .iter()
            .map(EncodedObject::id)
            .filter(|id| seen.insert(*id))
            .collect();
        let stored = self.stored_locked(&ids)?;
        {
            // Not packed again by this handle's next writes.
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            if known.stored.len() + stored.len() > KNOWN_STORED_MAX {
                known.stored.clear();
            }
            for id in &stored {
                if !known.objects.contains_key(id) {
                    known.stored.insert(*id);
                }
            }
        }
        let mut seen = IdSet::default();
        let new: Vec<&EncodedObject> = objects
            .iter()
            .filter(|o| !stored.contains(&o.id()) && seen.insert(o.id()))
            .collect();
        let pack = if new.is_empty() {
            None
        } else {
            // Under the lock: a gc may have deleted the staged pack.
            Some(self.staged_still_there(self.pack_for(&new)?, &new)?)
        };
        if std::env::var_os(CRASH_BEFORE_COMMIT_VAR).is_some() {
            // Test-only: wait here to be killed, between the upload and
            // the commit.
            eprintln!("{STOPPED_BEFORE_COMMIT}");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        let mut conn = lock.conn.borrow_mut();
        let c = conn.as_mut().expect("a held lock has its connection");
        // The rows and the commit, which lets go of the lock.
        let write::Recorded {
            pack_row,
            flush_after,
        } = self.record(c, lock, pack.as_ref().map(|p| (p, &new[..])), ops)?;
        drop(conn);
        if let (Some(p), Some((row, inline))) = (pack, pack_row) {
            self.remember_body(row, &p.body);
            let mut known = self.known.write().unwrap_or_else(|p| p.into_inner());
            for o in &new {
                let e = p.entries[&o.id()];
                known.objects.insert(
                    o.id(),
                    Loc {
                        pack: row,
                        kind: e.kind,
                        off: e.off,
                        len: e.len,
                    },
                );
            }
            known.packs.insert(
                row,
                PackRow {
                    key: p.name,
                    bytes: p.bytes,
                    created_at: crate::time::now_ms(),
                    inline,
                },
            );
        }
        // What `sync` waits for; nothing when the commit waited for its
        // own flush. Counted while the writer connection is this lock's.
        let ticket = if flush_after {
            self.flushes().committed()
        } else {
            SyncTicket((0, 0))
        };
        Ok((new.len(), ticket))
    }

    /// A write committed under the lock without waiting for its flush
    /// (see `write.rs`): waits for it now, lock released, in one round
    /// trip that needs the WAL flushed past its own commit, and so past
    /// every commit before it. Writers of other handles wait at the same
    /// time, and PostgreSQL flushes for them together.
    fn sync(&self, ticket: SyncTicket) -> Result<()> {
        if self.flushes().state(ticket) == Some(true) {
            return Ok(());
        }
        // Holding the writer connection: no write of this handle commits
        // meanwhile, so everything it committed on it so far is before the
        // flush asked for here.
        let mut slot = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let upto = {
            let f = self.flushes();
            match f.state(ticket) {
                Some(true) => return Ok(()),
                Some(false) => f.committed,
                // Committed on a connection since lost: `flush_on` with
                // none says so.
                None => return self.flush_on(&mut None, 0),
            }
        };
        self.flush_on(&mut slot, upto)
    }

    /// Every write of this handle flushed: [`ObjectBackend::sync`] of its
    /// last one. (Writes by others are flushed by their writers before
    /// they are acknowledged.)
    fn sync_all(&self) -> Result<()> {
        let last = {
            let f = self.flushes();
            SyncTicket((f.conn, f.committed))
        };
        self.sync(last)
    }

    /// After a write that brought the inline packs to [`SEAL_BYTES`]: seals
    /// them into the bucket (see `sweep.rs`).
    fn maintain(&self) -> Result<Option<RepackStats>> {
        if self.read_only || !self.seal_due.swap(false, Ordering::AcqRel) {
            return Ok(None);
        }
        self.seal()
    }

    fn maintenance_due(&self) -> bool {
        self.seal_due.load(Ordering::Acquire)
    }

    fn hold_claim(&self, run: u64) -> Result<()> {
        self.hold_claim_lock(run)
    }

    fn release_claim(&self, run: u64) {
        self.release_claim_lock(run)
    }

    fn claim_held(&self, run: u64) -> Result<Option<bool>> {
        self.claim_lock_held(run).map(Some)
    }

    fn ops_after(&self, after: u64) -> Result<Vec<RawOp>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let rows = self.with_reader(|c| {
            c.query(
                "SELECT seq, body FROM sessctl.ops WHERE seq > $1 ORDER BY seq",
                &[&after],
            )
        })?;
        self.counts
            .op_rows
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        Ok(rows
            .into_iter()
            .map(|r| (r.get::<_, i64>(0) as u64, r.get::<_, Vec<u8>>(1)))
            .collect())
    }

    fn read(&self, id: &ObjectId) -> Result<Option<EncodedObject>> {
        let Some(loc) = self.lookup(id)? else {
            return Ok(None);
        };
        // Moved by a gc (the old pack deleted past the grace period) or a
        // seal (an inline pack's row goes at once): looked up again.
        match self.read_at(id, loc) {
            Ok(o) => Ok(Some(o)),
            Err(Error::NotFound { id: gone }) if gone == *id => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The places of the objects not known yet looked up first, in one
    /// query, and the bodies of the inline packs they are in read in one
    /// more; then each read pack by pack (each pack's body fetched once).
    fn read_many(&self, ids: &[ObjectId], visit: &mut super::Visit<'_>) -> Result<()> {
        self.locate(ids)?;
        let inline: Vec<(i64, String)> = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            let packs: std::collections::BTreeSet<i64> = ids
                .iter()
                .filter_map(|id| known.objects.get(id).map(|l| l.pack))
                .collect();
            packs
                .into_iter()
                .filter_map(|p| {
                    let row = known.packs.get(&p)?;
                    row.inline.then(|| (p, row.key.clone()))
                })
                .collect()
        };
        self.prefetch_inline(&inline)?;
        let order: Vec<usize> = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            let mut v: Vec<(i64, u64, usize)> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| match known.objects.get(id) {
                    Some(l) => (l.pack, l.off, i),
                    // Not stored: its read says so, in its turn.
                    None => (i64::MAX, 0, i),
                })
                .collect();
            v.sort_unstable();
            v.into_iter().map(|(_, _, i)| i).collect()
        };
        for i in order {
            let obj = self.read(&ids[i])?.ok_or(Error::NotFound { id: ids[i] })?;
            visit(i, obj.kind(), obj.payload())?;
        }
        Ok(())
    }

    fn locate_ahead(&self, ids: &[ObjectId]) -> Result<()> {
        self.locate(ids)
    }

    fn contains(&self, id: &ObjectId) -> Result<bool> {
        if self.holds_lock() {
            return self.contains_locked(id);
        }
        Ok(self.lookup(id)?.is_some())
    }

    /// A range scan of the primary key (see `locate.rs`).
    fn ids_with_prefix(&self, prefix: &Prefix) -> Result<Vec<ObjectId>> {
        self.located_with_prefix(prefix)
    }

    fn ids(&self) -> Result<Vec<ObjectId>> {
        self.load_rows()?;
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<ObjectId> = known.objects.keys().copied().collect();
        v.sort_unstable();
        Ok(v)
    }

    /// Pack by pack, so that each pack is fetched once.
    fn ids_in_storage_order(&self) -> Result<Vec<ObjectId>> {
        self.load_rows()?;
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(i64, u64, ObjectId)> = known
            .objects
            .iter()
            .map(|(id, l)| (l.pack, l.off, *id))
            .collect();
        v.sort_unstable();
        Ok(v.into_iter().map(|(_, _, id)| id).collect())
    }

    /// gc's sweep without a list of what to drop (`keep` rejects it), or
    /// repack: see `sweep.rs`.
    fn repack_filtered(
        &self,
        _opts: &RepackOptions,
        keep: Option<&dyn Fn(&ObjectId) -> bool>,
        rescue: Option<&super::Rescue<'_>>,
    ) -> Result<RepackStats> {
        let doomed: IdSet = match keep {
            Some(keep) => self.ids()?.into_iter().filter(|id| !keep(id)).collect(),
            None => IdSet::default(),
        };
        self.sweep_rows(&doomed, rescue)
    }

    /// Drops rows, merges small packs, retires packs: see `sweep.rs`.
    fn sweep(
        &self,
        _opts: &RepackOptions,
        doomed: &IdSet,
        rescue: Option<&super::Rescue<'_>>,
    ) -> Result<RepackStats> {
        self.sweep_rows(doomed, rescue)
    }

    /// Deletes unnamed packs from the bucket: see `sweep.rs`.
    fn prune_storage(&self, before_ms: i64) -> Result<usize> {
        Ok(self.prune_bucket(before_ms)?.deleted)
    }

    fn stored_at_of(&self, ids: &[ObjectId]) -> Result<IdMap<i64>> {
        self.locate(ids)?;
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        Ok(ids
            .iter()
            .filter_map(|id| {
                let l = known.objects.get(id)?;
                Some((*id, known.packs.get(&l.pack).map_or(0, |p| p.created_at)))
            })
            .collect())
    }

    fn stored_at(&self) -> Result<HashMap<ObjectId, i64>> {
        self.load_rows()?;
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        Ok(known
            .objects
            .iter()
            .map(|(id, l)| (*id, known.packs.get(&l.pack).map_or(0, |p| p.created_at)))
            .collect())
    }

    fn stats(&self) -> Result<OdbStats> {
        self.counted_stats()
    }

    /// Fetches every pack and checks it against its name, and every
    /// object row against the pack's own entry for it; checks PostgreSQL's
    /// own records against the operations: each `ops.hash`, the chain head,
    /// and the `refs` table (the refs the operations leave).
    fn verify_storage(&self) -> Vec<String> {
        let mut problems = match self.verify_tables() {
            Ok(p) => p,
            Err(e) => return vec![e.to_string()],
        };
        match self.verify_lineage() {
            Ok(p) => problems.extend(p),
            Err(e) => problems.push(e.to_string()),
        }
        if let Err(e) = self.load_rows() {
            return vec![e.to_string()];
        }
        let (packs, objects) = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            let mut by_pack: HashMap<i64, Vec<(ObjectId, Loc)>> = HashMap::new();
            for (id, l) in &known.objects {
                by_pack.entry(l.pack).or_default().push((*id, *l));
            }
            (known.packs.keys().copied().collect::<Vec<_>>(), by_pack)
        };
        for p in packs {
            let body = match self.body(p) {
                Ok(b) => b,
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            };
            let entries = match pack::entries(&body) {
                Ok(e) => e,
                Err(r) => {
                    problems.push(format!("remote pack row {p}: {r}"));
                    continue;
                }
            };
            let listed: IdMap<pack::Entry> = entries.into_iter().map(|e| (e.id, e)).collect();
            for (id, l) in objects.get(&p).into_iter().flatten() {
                match listed.get(id) {
                    Some(e) if e.off == l.off && e.len == l.len && e.kind == l.kind => {}
                    _ => problems.push(format!(
                        "object {id}: PostgreSQL places it in remote pack row {p} where the pack does not hold it"
                    )),
                }
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write is known flushed only by a flush on the connection that
    /// committed it; once that connection is replaced, whether a write not
    /// seen flushed landed is unknown, however far later writes got.
    #[test]
    fn a_write_is_flushed_only_on_its_own_connection() {
        let mut f = Flushes::default();
        f.reconnected();
        let a = f.committed();
        let b = f.committed();
        assert_eq!(f.state(a), Some(false));
        // A flush that covered the first write only.
        f.flushed = 1;
        assert_eq!(f.state(a), Some(true));
        assert_eq!(f.state(b), Some(false));
        // The connection is lost: `b` was not seen flushed, `a` was.
        f.reconnected();
        assert_eq!(f.state(b), None);
        assert_eq!(f.state(a), Some(true));
        // A later write on the new connection, flushed, says nothing of it.
        let c = f.committed();
        f.flushed = f.committed;
        assert_eq!(f.state(c), Some(true));
        assert_eq!(f.state(b), None);
        // A write that waited for its own flush needs nothing.
        assert_eq!(f.state(SyncTicket((0, 0))), Some(true));
    }

    #[test]
    fn a_password_never_shows() {
        for (url, shown) in [
            (
                "postgres://u:p@ss@h:1/db?objects=s3://b",
                "postgres://u:***@h:1/db?objects=s3://b",
            ),
            ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
            ("postgres://u@h/db?x=a@b", "postgres://u@h/db?x=a@b"),
        ] {
            assert_eq!(crate::url::redact_url(url), shown);
        }
        for url in [
            "postgres://u:secret@h:notaport/db?objects=s3://b",
            "postgres://u@h:notaport/db?password=secret&objects=s3://b",
        ] {
            let err = StoreUrl::parse(url).err().unwrap().to_string();
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[test]
    fn a_bad_url_says_which_part_is_bad() {
        for (url, words) in [
            (
                "postgres://u@h/db?objects=s3://b&bogus=1",
                "bogus= is not a parameter",
            ),
            (
                "postgres://u@h/db?objects=s3://b&sslmode=bogus",
                "sslmode= is not a parameter",
            ),
            (
                "postgres://u@h:99999/db?objects=s3://b",
                "its port \"99999\" is not a number",
            ),
            (
                "postgres://u@h:abc/db?objects=s3://b",
                "its port \"abc\" is not a number",
            ),
            ("postgres:///db?objects=s3://b", "it names no server"),
        ] {
            let err = StoreUrl::parse(url).err().unwrap().to_string();
            assert!(err.contains(words), "{url}: {err}");
        }
        assert!(StoreUrl::parse("postgres://u@[::1]/db?objects=s3://b").is_ok());
        assert!(StoreUrl::parse("postgres://u@[::1]:5433/db?objects=s3://b").is_ok());
    }

    #[test]
    fn a_parameter_given_twice_is_refused() {
        for (url, name) in [
            (
                "postgres://u@h/db?objects=s3://b/p1&objects=s3://b/p2",
                "objects",
            ),
            (
                "postgres://u@h/db?objects=s3://b&inline=1&inline=2",
                "inline",
            ),
            (
                "postgres://u@h/db?objects=s3://b&sslmode=disable&sslmode=require",
                "sslmode",
            ),
        ] {
            let err = StoreUrl::parse(url).err().unwrap().to_string();
            assert!(err.contains(&format!("{name}= is given twice")), "{err}");
        }
    }

    #[test]
    fn a_marker_says_which_store_it_belongs_to() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            Marker::parse(format!("sessctl remote store, schema 7\nstore {id}\n").as_bytes()),
            Marker::Store(Some(id.to_owned()))
        );
        assert_eq!(
            Marker::parse(b"sessctl remote store, schema 6\n"),
            Marker::Store(None)
        );
        // The golden fixture (objects-format.md, "Store identity").
        assert_eq!(
            Marker::parse(include_bytes!(
                "../../../../tests/fixtures/remote-store-v7/sessctl-store"
            )),
            Marker::Store(Some("5e55c7100000000000000000000c0ffe".to_owned()))
        );
        assert_eq!(Marker::parse(b"hello"), Marker::Foreign);
        assert_eq!(Marker::parse(&[0xff, 0xfe]), Marker::Foreign);
        // An id that is not one is no id.
        assert_eq!(
            Marker::parse(b"sessctl remote store, schema 7\nstore XYZ\n"),
            Marker::Store(None)
        );
        let a = new_store_id("postgres://h/db");
        let b = new_store_id("postgres://h/db");
        assert!(is_store_id(&a) && is_store_id(&b) && a != b, "{a} {b}");
    }
}
