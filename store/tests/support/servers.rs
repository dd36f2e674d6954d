//! Real servers on loopback for the remote-store tests: a throwaway
//! PostgreSQL cluster (`initdb` in a temp dir, run as the `postgres` user
//! when the tests run as root, since PostgreSQL refuses root) and an S3
//! server (moto's `moto_server`). No mocks.
//!
//! Where the binaries are: `SESSCTL_PG_BIN` (a directory holding `initdb`,
//! `pg_ctl`, `psql`), else the newest `/usr/lib/postgresql/*/bin` (Debian),
//! else `PATH`; `SESSCTL_MOTO_SERVER` (the `moto_server` program, as
//! `tests/remote-servers.sh` installs it into a venv), else `PATH`. A test that finds
//! neither FAILS with one line saying what is missing: CI never skips these
//! tests silently. A developer opts out explicitly with
//! `SESSCTL_REMOTE_TESTS=skip`.
//!
//! One cluster and one moto serve every test of a test binary that runs at
//! the same time (each test gets its own database and bucket); they stop
//! when the last such test ends. Shared by store/tests, cli/tests and the
//! benchmark harness (bench/, scenario 8), which starts its servers with
//! [`Servers::try_start`]: it skips with a note rather than failing, and
//! runs PostgreSQL durable (`fsync` on, as a default server has it) where
//! the tests turn `fsync` off for speed.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// An Authorization header moto takes (it reads the access key and checks
/// no signature): its account owns the buckets the tests make.
pub const MOTO_AUTH: &str = "Authorization: AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0\r\n";

/// The variable a developer sets to `skip` to opt out.
pub const OPT_OUT: &str = "SESSCTL_REMOTE_TESTS";

/// One test's remote store: its URL and the S3 variables that reach it.
pub struct Remote {
    pub url: String,
    /// The database's and the bucket's name.
    pub name: String,
    /// `AWS_*` variables for a `sessctl` child process.
    pub env: Vec<(String, String)>,
    pub servers: Arc<Servers>,
}

impl Remote {
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The S3 settings of [`Remote::env`], for a library handle on this
    /// store (what a `sessctl` child reads from the variables). Every
    /// includer builds with sessctl-store's `remote` feature.
    pub fn s3_settings(&self) -> sessctl_store::odb::S3Settings {
        sessctl_store::odb::S3Settings {
            endpoint: self.var("AWS_ENDPOINT_URL").map(str::to_owned),
            access_key_id: self.var("AWS_ACCESS_KEY_ID").map(str::to_owned),
            secret_access_key: self.var("AWS_SECRET_ACCESS_KEY").map(str::to_owned),
            region: self.var("AWS_REGION").map(str::to_owned),
            allow_http: true,
            cache_dir: self.var("SESSCTL_CACHE_DIR").map(Into::into),
        }
    }
}

/// The running servers.
pub struct Servers {
    bin: PathBuf,
    dir: tempfile::TempDir,
    run_as: Option<(u32, u32)>,
    /// PostgreSQL with `fsync` on (the benchmark) or off (the tests).
    durable: bool,
    pub pg_port: u16,
    moto: Mutex<Option<Child>>,
    moto_cmd: PathBuf,
    pub moto_port: u16,
}

static SHARED: Mutex<Weak<Servers>> = Mutex::new(Weak::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

fn opted_out() -> bool {
    let out = std::env::var(OPT_OUT).is_ok_and(|v| v == "skip");
    if out {
        eprintln!("remote-store test skipped: {OPT_OUT}=skip");
    }
    out
}

/// A fresh database and bucket on servers of its own, which the test may
/// stop and start; `None` only when the developer opted out.
pub fn remote_private() -> Option<Remote> {
    if opted_out() {
        return None;
    }
    Some(Remote::on(Arc::new(Servers::start())))
}

/// A fresh database and bucket on the shared servers; `None` only when the
/// developer opted out (then it says so on stderr).
pub fn remote() -> Option<Remote> {
    if opted_out() {
        return None;
    }
    let servers = {
        let mut slot = SHARED.lock().unwrap_or_else(|p| p.into_inner());
        match slot.upgrade() {
            Some(s) => s,
            None => {
                let s = Arc::new(Servers::start());
                *slot = Arc::downgrade(&s);
                s
            }
        }
    };
    Some(Remote::on(servers))
}

impl Remote {
    fn on(servers: Arc<Servers>) -> Remote {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}x{n}", std::process::id());
        servers.psql("postgres", &format!("CREATE DATABASE {name}"));
        servers.create_bucket(&name);
        Remote {
            url: format!(
                "postgres://sessctl@127.0.0.1:{}/{name}?objects=s3://{name}/store",
                servers.pg_port
            ),
            env: vec![
                (
                    "AWS_ENDPOINT_URL".into(),
                    format!("http://127.0.0.1:{}", servers.moto_port),
                ),
                ("AWS_ACCESS_KEY_ID".into(), "testing".into()),
                ("AWS_SECRET_ACCESS_KEY".into(), "testing".into()),
                ("AWS_REGION".into(), "us-east-1".into()),
                ("AWS_ALLOW_HTTP".into(), "true".into()),
                // Fetched packs: beside the servers, never in ~/.cache.
                (
                    "SESSCTL_CACHE_DIR".into(),
                    servers.dir().join("pack-cache").display().to_string(),
                ),
            ],
            name,
            servers,
        }
    }
}

/// What is missing, as the one line a test fails with (the benchmark
/// prints it as its skip note).
fn missing(what: &str) -> String {
    format!(
        "remote-store tests need {what}; install it (tests/run.sh does), or set {OPT_OUT}=skip to skip them"
    )
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn pg_bin() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("SESSCTL_PG_BIN") {
        let d = PathBuf::from(d);
        if d.join("initdb").is_file() {
            return Ok(d);
        }
        return Err(missing(&format!(
            "PostgreSQL's initdb in SESSCTL_PG_BIN={}",
            d.display()
        )));
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    debian.sort();
    if let Some((_, bin)) = debian.pop() {
        return Ok(bin);
    }
    match on_path("initdb") {
        Some(p) => Ok(p.parent().unwrap().to_path_buf()),
        None => Err(missing(
            "PostgreSQL's server binaries (initdb, pg_ctl: apt-get install postgresql; or set SESSCTL_PG_BIN)",
        )),
    }
}

/// The `postgres` user's uid and gid when this process is root.
fn run_as() -> Result<Option<(u32, u32)>, String> {
    let me = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u32>()
                .ok()
        });
    if me != Some(0) {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .ok_or_else(|| missing("a postgres user to run PostgreSQL as (the tests run as root)"))?;
    let f: Vec<&str> = line.split(':').collect();
    match (
        f.get(2).and_then(|u| u.parse().ok()),
        f.get(3).and_then(|g| g.parse().ok()),
    ) {
        (Some(uid), Some(gid)) => Ok(Some((uid, gid))),
        _ => Err(format!(
            "/etc/passwd: cannot read the postgres user's ids: {line}"
        )),
    }
}

impl Servers {
    /// The tests' servers (`fsync` off); a missing binary fails the test
    /// with one line.
    fn start() -> Servers {
        Servers::try_start(false).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Finds the binaries and starts both servers, PostgreSQL with `fsync`
    /// on when `durable`; the error is one line saying what is missing or
    /// what failed to start.
    pub fn try_start(durable: bool) -> Result<Servers, String> {
        let bin = pg_bin()?;
        let moto_cmd = std::env::var_os("SESSCTL_MOTO_SERVER")
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .or_else(|| on_path("moto_server"))
            .ok_or_else(|| {
                missing("moto_server (pip install 'moto[server]'; or set SESSCTL_MOTO_SERVER)")
            })?;
        let run_as = run_as()?;
        let dir = tempfile::Builder::new()
            .prefix("sessctl-remote-")
            .tempdir()
            .map_err(|e| format!("a temporary directory for the servers: {e}"))?;
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| format!("chown {} to postgres: {e}", dir.path().display()))?;
        }
        let servers = Servers {
            bin,
            dir,
            run_as,
            durable,
            pg_port: free_port(),
            moto: Mutex::new(None),
            moto_cmd,
            moto_port: free_port(),
        };
        let data = servers.data();
        let out = servers
            .pg_command("initdb")
            .args(["-D"])
            .arg(&data)
            .args(["-U", "sessctl", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        servers.try_start_postgres()?;
        servers.try_start_moto()?;
        Ok(servers)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn pg_command(&self, prog: &str) -> Command {
        let mut c = Command::new(self.bin.join(prog));
        c.current_dir(self.dir.path());
        if let Some((uid, gid)) = self.run_as {
            c.uid(uid).gid(gid);
        }
        c
    }

    /// Starts the cluster and waits until it takes connections.
    pub fn start_postgres(&self) {
        self.try_start_postgres().unwrap_or_else(|e| panic!("{e}"));
    }

    fn try_start_postgres(&self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync={} -c max_connections=200",
            self.pg_port,
            self.dir.path().display(),
            if self.durable { "on" } else { "off" }
        );
        let out = self
            .pg_command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("postgres.log"))
            .args(["-w", "-t", "60", "-o", &opts, "start"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_ctl start failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// Stops the cluster at once (as a crash would).
    pub fn stop_postgres(&self) {
        let _ = self
            .pg_command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .output();
    }

    /// Runs one SQL command with psql as the cluster's superuser.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "sessctl",
                "-d",
                db,
                "-AtX",
                "-c",
                sql,
            ])
            .arg("-p")
            .arg(self.pg_port.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Starts psql running `sql` (which should hold something for a
    /// while); the caller waits for it.
    pub fn psql_background(&self, db: &str, sql: &str) -> Child {
        Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "sessctl",
                "-d",
                db,
                "-AtX",
                "-c",
                sql,
            ])
            .arg("-p")
            .arg(self.pg_port.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub fn start_moto(&self) {
        self.try_start_moto().unwrap_or_else(|e| panic!("{e}"));
    }

    fn try_start_moto(&self) -> Result<(), String> {
        let log_path = self.dir.path().join("moto.log");
        let log = std::fs::File::create(&log_path)
            .and_then(|l| Ok((l.try_clone()?, l)))
            .map_err(|e| format!("{}: {e}", log_path.display()))?;
        let child = Command::new(&self.moto_cmd)
            .args(["-H", "127.0.0.1", "-p", &self.moto_port.to_string()])
            .stdin(Stdio::null())
            .stdout(log.0)
            .stderr(log.1)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.moto_cmd.display()))?;
        *self.moto.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", self.moto_port)).is_err() {
            if Instant::now() >= deadline {
                return Err(format!(
                    "moto_server did not listen within 60 s: {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    pub fn stop_moto(&self) {
        if let Some(mut c) = self.moto.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Makes a bucket with one plain HTTP request (moto does not check
    /// signatures).
    pub fn create_bucket(&self, name: &str) {
        let mut s = TcpStream::connect(("127.0.0.1", self.moto_port)).unwrap();
        write!(
            s,
            "PUT /{name} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n{MOTO_AUTH}Connection: close\r\n\r\n",
            self.moto_port
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"),
            "creating bucket {name}: {answer}"
        );
    }

    /// Puts `body` at `key` in `bucket` (a plain PUT, overwriting).
    pub fn put_key(&self, bucket: &str, key: &str, body: &[u8]) {
        let mut s = TcpStream::connect(("127.0.0.1", self.moto_port)).unwrap();
        write!(
            s,
            "PUT /{bucket}/{key} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{MOTO_AUTH}Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.moto_port,
            body.len()
        )
        .unwrap();
        s.write_all(body).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "putting {bucket}/{key}: {answer}"
        );
    }

    /// Makes the store in `bucket` (prefix `store/`) look as an init before
    /// schema version 7 left it, once the test has undone migration 7 in
    /// the database: its `sessctl-store` object names no store.
    pub fn undo_identity(&self, bucket: &str) {
        self.psql(bucket, "DROP TABLE sessctl.store");
        self.put_key(
            bucket,
            "store/sessctl-store",
            b"sessctl remote store, schema 6\n",
        );
    }

    /// The bytes of `key` in `bucket`, if it is there (a plain GET).
    pub fn get_key(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let mut s = TcpStream::connect(("127.0.0.1", self.moto_port)).unwrap();
        write!(
            s,
            "GET /{bucket}/{key} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{MOTO_AUTH}Connection: close\r\n\r\n",
            self.moto_port
        )
        .unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&answer[..head_end]).into_owned();
        if head.starts_with("HTTP/1.1 404") || head.starts_with("HTTP/1.0 404") {
            return None;
        }
        assert!(
            head.starts_with("HTTP/1.1 200"),
            "getting {bucket}/{key}: {head}"
        );
        Some(answer[head_end..].to_vec())
    }

    /// The keys under `prefix` in `bucket`.
    pub fn list_keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        self.list_objects(bucket, prefix)
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    }

    /// The keys under `prefix` in `bucket` with their sizes in bytes (plain
    /// ListObjectsV2 requests, a page of up to 1,000 keys at a time).
    pub fn list_objects(&self, bucket: &str, prefix: &str) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut s = TcpStream::connect(("127.0.0.1", self.moto_port)).unwrap();
            let next = token
                .as_deref()
                .map(|t| format!("&continuation-token={}", query_escape(t)))
                .unwrap_or_default();
            write!(
                s,
                "GET /{bucket}?list-type=2&prefix={prefix}{next} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n{MOTO_AUTH}Connection: close\r\n\r\n",
                self.moto_port
            )
            .unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            assert!(
                answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200"),
                "listing bucket {bucket}: {answer}"
            );
            for c in answer.split("<Contents>").skip(1) {
                let key = element(c, "Key").unwrap_or_else(|| panic!("no Key in {c}"));
                let size = element(c, "Size")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("no Size in {c}"));
                out.push((key.to_owned(), size));
            }
            match element(&answer, "NextContinuationToken") {
                Some(t) if element(&answer, "IsTruncated") == Some("true") => {
                    token = Some(t.to_owned())
                }
                _ => return out,
            }
        }
    }
}

/// The text of the first `<name>` element in `xml`.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let len = xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..start + len])
}

/// `s` percent-encoded for a query string (everything but unreserved).
fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop_moto();
        self.stop_postgres();
    }
}

/// The statements PostgreSQL ran for one database with `log_statement =
/// all`, as its log tells: counted from the end of the log as it was when
/// the count began.
pub struct StatementLog {
    path: PathBuf,
    from: u64,
}

impl StatementLog {
    /// Logs every statement of `r`'s database from its next connection on.
    pub fn enable(r: &Remote) {
        r.servers.psql(
            "postgres",
            &format!("ALTER DATABASE {} SET log_statement = 'all'", r.name),
        );
    }

    pub fn start(r: &Remote) -> StatementLog {
        let path = r.servers.dir().join("postgres.log");
        let from = std::fs::metadata(&path).unwrap().len();
        StatementLog { path, from }
    }

    /// The statements logged since the start, each as `statement: ...` or
    /// `execute NAME: ...`, its continuation lines joined to it.
    pub fn since(&self) -> Vec<String> {
        let bytes = std::fs::read(&self.path).unwrap();
        let mut records: Vec<String> = Vec::new();
        for l in String::from_utf8_lossy(&bytes[self.from as usize..]).lines() {
            match (l.strip_prefix('\t'), records.last_mut()) {
                (Some(more), Some(last)) => {
                    last.push(' ');
                    last.push_str(more.trim());
                }
                _ => records.push(l.to_string()),
            }
        }
        records
            .into_iter()
            .filter(|l| l.contains("LOG:  statement: ") || l.contains("LOG:  execute "))
            .map(|l| l.split_once("LOG:  ").unwrap().1.to_string())
            .collect()
    }
}
