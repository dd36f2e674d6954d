//! Processes for the concurrency tests: writers and readers that run at
//! once against one store, and what each reported.
//!
//! A writer is either the real `sessctl` (one process a commit) or a
//! library writer: this test binary re-run as a child that commits through
//! `Store` and prints one JSON line a commit (the technique of
//! store/tests/crash.rs). Every write becomes an [`Event`], so that a test
//! asserts on what was acknowledged and on how writes failed, never on how
//! long anything took.
//!
//! Include it beside `mod support;` (it runs `sessctl` through
//! `support::sessctl`) with `#[path = "support/procs.rs"] mod procs;`, and
//! give the test binary a `#[test] fn library_writer_child()` that calls
//! [`library_writer_entry`].
#![allow(dead_code)] // each test file uses its own part of this
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};
use sessctl_store::{Durability, Error, Messages, ObjectId, OpenOptions, Store, Turn};

use crate::support::{sessctl, Run};

// ---- choices ----

/// A seeded xorshift64* generator: which process dies and when. The seed
/// fixes the test's choices; the processes' timing is never repeatable.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        // xorshift never leaves zero.
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// `SESSCTL_TEST_SEED` when set (to replay a failure's choices), else
    /// `default`; prints the seed, so that a failure's log names it.
    pub fn seeded(default: u64) -> Rng {
        let seed = std::env::var("SESSCTL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default);
        eprintln!("seed {seed} (SESSCTL_TEST_SEED={seed} repeats these choices)");
        Rng::new(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// A pause of `lo..hi` milliseconds.
    pub fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo))
    }
}

// ---- messages ----

/// The message every test commits: one user message saying `text`.
pub fn user_message(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

/// What `sessctl commit --messages -` reads for [`user_message`].
pub fn messages_json(text: &str) -> String {
    Value::Array(vec![user_message(text)]).to_string()
}

/// `len` random letters: text that compresses poorly, so that a message
/// padded with it makes a journal frame of several pages.
pub fn noise(seed: u64, len: usize) -> String {
    let mut rng = Rng::new(seed);
    (0..len)
        .map(|_| char::from(b'a' + rng.below(26) as u8))
        .collect()
}

/// Starts conversation `conv` with one message; returns its root.
pub fn create(store: &Path, conv: &str) -> ObjectId {
    let run = sessctl(
        store,
        &["commit", "--new", conv, "--messages", "-"],
        Some(&messages_json(&format!("{conv} begins"))),
    );
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "creating {conv}");
    parse_id(&run.stdout).unwrap()
}

/// A printed session id: 64 hex digits and a newline, nothing else.
pub fn parse_id(out: &str) -> Option<ObjectId> {
    ObjectId::from_hex(out.strip_suffix('\n')?).ok()
}

// ---- what a write did ----

/// A commit that printed its session id: acknowledged, so it must survive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub conv: String,
    pub id: ObjectId,
    /// The text of the one message it added.
    pub text: String,
}

/// How a write failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A lost compare-and-swap: exit 1, `refs/heads/C moved: expected ID,
    /// found ID`.
    LostRace,
    /// The write lock was busy for longer than the write waits (exit 4).
    Locked,
    /// Corruption detected (exit 3).
    Corrupt,
    /// Anything else.
    Other,
}

#[derive(Debug, Clone)]
pub enum Event {
    Committed(Ack),
    Failed {
        conv: String,
        failure: Failure,
        /// The error's one line, without `sessctl: `.
        message: String,
    },
}

impl Event {
    pub fn ack(&self) -> Option<&Ack> {
        match self {
            Event::Committed(a) => Some(a),
            Event::Failed { .. } => None,
        }
    }
}

/// The acknowledged commits among `events`.
pub fn acks(events: &[Event]) -> Vec<Ack> {
    events.iter().filter_map(Event::ack).cloned().collect()
}

/// Whether `message` is what a lost compare-and-swap on conversation
/// `conv` says: `refs/heads/CONV moved: expected ID, found ID`.
pub fn is_lost_race(conv: &str, message: &str) -> bool {
    let is_id = |s: &str| ObjectId::from_hex(s).is_ok_and(|id| id.to_hex() == s);
    message
        .strip_prefix(&format!("refs/heads/{conv} moved: expected "))
        .and_then(|rest| rest.split_once(", found "))
        .is_some_and(|(expected, found)| is_id(expected) && is_id(found) && expected != found)
}

/// What a `sessctl commit CONV` run that added `text` did. A success
/// prints the id and nothing on stderr; a failure one line on stderr.
pub fn commit_event(conv: &str, text: &str, run: &Run) -> Event {
    if run.code == 0 {
        for line in run.stderr.lines() {
            assert!(is_torn_cut(line), "commit {conv} succeeded with: {line}");
        }
        let id = parse_id(&run.stdout)
            .unwrap_or_else(|| panic!("commit {conv} printed {:?}", run.stdout));
        return Event::Committed(Ack {
            conv: conv.to_owned(),
            id,
            text: text.to_owned(),
        });
    }
    let line = run
        .stderr
        .strip_prefix("sessctl: ")
        .and_then(|s| s.strip_suffix('\n'))
        .filter(|l| !l.contains('\n') && run.stdout.is_empty());
    let failure = match run.code {
        1 if line.is_some_and(|l| is_lost_race(conv, l)) => Failure::LostRace,
        3 => Failure::Corrupt,
        4 => Failure::Locked,
        _ => Failure::Other,
    };
    Event::Failed {
        conv: conv.to_owned(),
        failure,
        message: format!("exit {}: {}", run.code, line.unwrap_or(&run.stderr)),
    }
}

/// `sessctl --wait 5 commit CONV --messages -` adding `text`, with `extra`
/// flags (`--no-sync`).
pub fn cli_commit(store: &Path, conv: &str, text: &str, extra: &[&str]) -> Event {
    let mut args = vec!["--wait", "5", "commit", conv, "--messages", "-"];
    args.extend_from_slice(extra);
    let run = sessctl(store, &args, Some(&messages_json(text)));
    commit_event(conv, text, &run)
}

/// How a commit that may be killed ended.
#[derive(Debug)]
pub enum MaybeKilled {
    /// It ended on its own.
    Ended(Event),
    /// SIGKILL ended it, after it had printed its id or before.
    Killed(Option<Ack>),
}

/// [`cli_commit`], SIGKILLed `kill_after` it started unless it has ended by
/// then.
pub fn cli_commit_killed(
    store: &Path,
    conv: &str,
    text: &str,
    extra: &[&str],
    kill_after: Option<Duration>,
) -> MaybeKilled {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(store)
        .args(["--wait", "5", "commit", conv, "--messages", "-"])
        .args(extra)
        .env_remove("SESSCTL_STORE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = messages_json(text);
    // One small write: the pipe holds it whether or not the child reads.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    if let Some(after) = kill_after {
        std::thread::sleep(after);
        // Not reaped yet, so the pid is still this child's.
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    };
    if out.status.signal() == Some(9) {
        // Only a whole id line was an acknowledgement.
        let ack = parse_id(&run.stdout).map(|id| Ack {
            conv: conv.to_owned(),
            id,
            text: text.to_owned(),
        });
        return MaybeKilled::Killed(ack);
    }
    MaybeKilled::Ended(commit_event(conv, text, &run))
}

// ---- library writers ----

/// The environment variable that turns the test binary into a library
/// writer; it holds the store's path and the [`WriterPlan`] as JSON.
pub const LIBRARY_WRITER_ENV: &str = "SESSCTL_TEST_LIBRARY_WRITER";
/// The `#[test]` that runs [`library_writer_entry`].
pub const LIBRARY_WRITER_TEST: &str = "library_writer_child";

/// What a library writer does.
#[derive(Debug, Clone, Default)]
pub struct WriterPlan {
    /// Conversations to commit on, in turn.
    pub convs: Vec<String>,
    /// How many commits (`None`: until killed).
    pub commits: Option<u64>,
    /// Pass the head just read as the expected head, so that another
    /// writer moving it first makes the commit lose the race.
    pub expect_head: bool,
    /// At most this many milliseconds between reading the head and
    /// committing: a wider window for the race.
    pub pause_ms: u64,
    /// A conversation only this writer writes: after its first commit
    /// there, one more commit expects the head before it, and must lose.
    pub stale_once: Option<String>,
    pub no_sync: bool,
    /// Every n-th message is 12 KB, so that its journal frame spans pages
    /// and a kill can tear it.
    pub big_every: Option<u64>,
    /// Seal journal segments past this many bytes (`None`: the default,
    /// 2 MiB): small segments make this writer rotate and pack as it goes,
    /// under the feet of every other process.
    pub segment_target: Option<u64>,
    /// Starts every message's text: whose it is.
    pub tag: String,
    pub seed: u64,
}

impl WriterPlan {
    fn to_json(&self) -> Value {
        json!({
            "convs": self.convs,
            "commits": self.commits,
            "expect_head": self.expect_head,
            "pause_ms": self.pause_ms,
            "stale_once": self.stale_once,
            "no_sync": self.no_sync,
            "big_every": self.big_every,
            "segment_target": self.segment_target,
            "tag": self.tag,
            "seed": self.seed,
        })
    }

    fn from_json(v: &Value) -> WriterPlan {
        let string = |v: &Value| v.as_str().unwrap().to_owned();
        WriterPlan {
            convs: v["convs"].as_array().unwrap().iter().map(string).collect(),
            commits: v["commits"].as_u64(),
            expect_head: v["expect_head"].as_bool().unwrap(),
            pause_ms: v["pause_ms"].as_u64().unwrap(),
            stale_once: v["stale_once"].as_str().map(str::to_owned),
            no_sync: v["no_sync"].as_bool().unwrap(),
            big_every: v["big_every"].as_u64(),
            segment_target: v["segment_target"].as_u64(),
            tag: string(&v["tag"]),
            seed: v["seed"].as_u64().unwrap(),
        }
    }

    /// The text of commit `i` on `conv`.
    fn text(&self, conv: &str, i: u64) -> String {
        let mut text = format!("{} {conv} {i}", self.tag);
        if self.big_every.is_some_and(|n| i % n == n - 1) {
            text.push(' ');
            text.push_str(&noise(self.seed ^ i, 12 * 1024));
        }
        text
    }
}

/// In the child: commits as the plan says, printing one JSON line a commit
/// (`{"conv", "id", "text"}`, or `{"conv", "failure", "message"}`), flushed
/// before the next begins. Returns at once unless [`LIBRARY_WRITER_ENV`] is
/// set.
pub fn library_writer_entry() {
    let Ok(spec) = std::env::var(LIBRARY_WRITER_ENV) else {
        return;
    };
    let spec: Value = serde_json::from_str(&spec).unwrap();
    let plan = WriterPlan::from_json(&spec["plan"]);
    let path = spec["store"].as_str().unwrap();
    let mut opts = OpenOptions::default();
    if let Some(target) = plan.segment_target {
        opts.segment_target = target;
    }
    let store = Store::open(Path::new(path), &opts).unwrap();
    let durability = if plan.no_sync {
        Durability::NoSync
    } else {
        Durability::Sync
    };
    let mut rng = Rng::new(plan.seed);
    let mut out = std::io::stdout().lock();
    // The harness has printed `test NAME ... ` without a newline: end it,
    // so that the first report is a line of its own.
    writeln!(out).unwrap();
    let mut report = |conv: &str, text: &str, r: &sessctl_store::Result<ObjectId>| {
        let line = match r {
            Ok(id) => json!({"conv": conv, "id": id.to_hex(), "text": text}),
            Err(e) => json!({"conv": conv, "failure": failure_name(e), "message": e.to_string()}),
        };
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    };
    let mut stale_done = false;
    for i in 0..plan.commits.unwrap_or(u64::MAX) {
        let conv = &plan.convs[(i % plan.convs.len() as u64) as usize];
        let text = plan.text(conv, i);
        let before = head(&store, conv);
        if plan.pause_ms > 0 {
            std::thread::sleep(rng.millis(0, plan.pause_ms));
        }
        let expected = if plan.expect_head { before } else { None };
        let r = store.commit(conv, expected, turn(&text), durability);
        report(conv, &text, &r);
        if r.is_ok() && !stale_done && plan.stale_once.as_ref() == Some(conv) {
            stale_done = true;
            let text = format!("{} {conv} stale", plan.tag);
            let r = store.commit(conv, before, turn(&text), durability);
            report(conv, &text, &r);
        }
    }
}

fn head(store: &Store, conv: &str) -> Option<ObjectId> {
    store.conversation(conv).unwrap().and_then(|c| c.head)
}

/// A turn adding [`user_message`]`(text)`.
pub fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![user_message(text)]),
        ..Turn::default()
    }
}

fn failure_name(e: &Error) -> &'static str {
    match e {
        Error::RefOutOfDate { .. } => "lost-race",
        Error::Locked { .. } => "locked",
        e if e.is_corruption() => "corrupt",
        _ => "other",
    }
}

/// A library writer running in a child process.
#[derive(Debug)]
pub struct LibraryWriter {
    child: Child,
    stdout: Option<JoinHandle<Vec<String>>>,
    stderr: Option<JoinHandle<String>>,
}

/// How a library writer ended, and what it reported.
#[derive(Debug)]
pub struct Finished {
    pub killed: bool,
    pub events: Vec<Event>,
}

impl LibraryWriter {
    pub fn spawn(store: &Path, plan: &WriterPlan) -> LibraryWriter {
        let spec = json!({"store": store.to_str().unwrap(), "plan": plan.to_json()});
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                LIBRARY_WRITER_TEST,
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(LIBRARY_WRITER_ENV, spec.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        LibraryWriter {
            child,
            stdout: Some(std::thread::spawn(move || {
                // A line cut by a kill ends the list: it is no report.
                BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                    .collect()
            })),
            stderr: Some(std::thread::spawn(move || {
                let mut s = String::new();
                let _ = stderr.read_to_string(&mut s);
                s
            })),
        }
    }

    /// SIGKILL, wherever it is.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
    }

    /// Waits for the writer to end and returns what it reported. A writer
    /// must end by success or SIGKILL; a panic in it fails the test here.
    pub fn finish(mut self) -> Finished {
        let status = self.child.wait().unwrap();
        let lines = self.stdout.take().unwrap().join().unwrap();
        let stderr = self.stderr.take().unwrap().join().unwrap();
        let killed = status.signal() == Some(9);
        assert!(
            killed || status.success(),
            "library writer ended with {status}: {stderr}"
        );
        Finished {
            killed,
            events: lines.iter().filter_map(|l| library_event(l)).collect(),
        }
    }
}

/// A library writer's report line as an [`Event`]; `None` for the test
/// harness's own lines and a line cut short.
fn library_event(line: &str) -> Option<Event> {
    let v: Value = serde_json::from_str(line).ok()?;
    let conv = v["conv"].as_str()?.to_owned();
    if let Some(id) = v["id"].as_str() {
        return Some(Event::Committed(Ack {
            conv,
            id: ObjectId::from_hex(id).unwrap(),
            text: v["text"].as_str().unwrap().to_owned(),
        }));
    }
    let message = v["message"].as_str().unwrap().to_owned();
    let failure = match v["failure"].as_str().unwrap() {
        "lost-race" if is_lost_race(&conv, &message) => Failure::LostRace,
        "locked" => Failure::Locked,
        "corrupt" => Failure::Corrupt,
        _ => Failure::Other,
    };
    Some(Event::Failed {
        conv,
        failure,
        message,
    })
}

// ---- readers ----

/// Runs a command that must succeed without a word on stderr; returns
/// stdout.
pub fn ok(store: &Path, args: &[&str]) -> String {
    let run = sessctl(store, args, None);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{args:?}");
    run.stdout
}

/// Reads the store as a user would until `stop` (one round at least):
/// `ls --all --json`, each head it names checked with `cat-object -t`, one
/// of them resumed whole, and `log --oneline`, `show` and `resume` of one
/// conversation. Only conversations `stable` accepts are read past the
/// listing (one that a test deletes may be gone by the next command).
/// Panics at the first read that fails or names a session that is not
/// there. Returns how many commands ran.
pub fn read_until(
    store: &Path,
    stop: &AtomicBool,
    seed: u64,
    stable: impl Fn(&str) -> bool,
) -> usize {
    let mut rng = Rng::new(seed);
    let mut runs = 0;
    loop {
        let list: Value = serde_json::from_str(&ok(store, &["ls", "--all", "--json"])).unwrap();
        runs += 1;
        let list: Vec<(&str, &str)> = list
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| Some((c["name"].as_str()?, c["head"].as_str()?)))
            .filter(|(name, _)| stable(name))
            .collect();
        for (_, head) in &list {
            assert_eq!(
                ok(store, &["cat-object", "-t", head]),
                "session\n",
                "{head}"
            );
            runs += 1;
        }
        if !list.is_empty() {
            // Every message of a head's history is there to be read.
            let (_, head) = list[rng.below(list.len() as u64) as usize];
            let resumed: Value =
                serde_json::from_str(&ok(store, &["resume", "--json", head])).unwrap();
            assert!(resumed["history"].as_array().is_some_and(|a| !a.is_empty()));
            let (conv, _) = list[rng.below(list.len() as u64) as usize];
            ok(store, &["log", "--oneline", conv]);
            ok(store, &["show", conv]);
            ok(store, &["resume", conv]);
            runs += 4;
        }
        if stop.load(Ordering::SeqCst) {
            return runs;
        }
    }
}

// ---- what is on disk afterwards ----

/// Every target each ref ever had (`reflog --json`): ref name -> ids.
pub fn reflog_targets(store: &Path) -> HashMap<String, HashSet<String>> {
    let log: Value = serde_json::from_str(&ok(store, &["reflog", "--json"])).unwrap();
    let mut out: HashMap<String, HashSet<String>> = HashMap::new();
    for e in log.as_array().unwrap() {
        if let Some(new) = e["new"].as_str() {
            out.entry(e["ref"].as_str().unwrap().to_owned())
                .or_default()
                .insert(new.to_owned());
        }
    }
    out
}

/// Asserts that every acknowledged commit is on its conversation's ref log
/// and reads back: its whole history loads (every object re-hashed) and
/// ends with the message it added.
pub fn assert_acknowledged(store: &Path, acks: &[Ack]) {
    let targets = reflog_targets(store);
    let opts = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let lib = Store::open(store, &opts).unwrap();
    for a in acks {
        let on_log = targets
            .get(&format!("refs/heads/{}", a.conv))
            .is_some_and(|t| t.contains(&a.id.to_hex()));
        assert!(
            on_log,
            "acknowledged {} on {} is not on its ref log",
            a.id, a.conv
        );
        let history = lib.odb().load_messages(&a.id).unwrap();
        assert_eq!(history.last(), Some(&user_message(&a.text)), "{}", a.id);
    }
}

/// Each conversation's history length, from `ls --all --json`.
pub fn history_lengths(store: &Path) -> BTreeMap<String, u64> {
    let list: Value = serde_json::from_str(&ok(store, &["ls", "--all", "--json"])).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let name = c["name"].as_str().unwrap().to_owned();
            (name, c["messages"].as_u64().unwrap())
        })
        .collect()
}

/// The note fsck gives for a torn tail that a writer cut and set aside.
pub fn is_torn_note(line: &str) -> bool {
    line.strip_prefix("sessctl: note: ").is_some_and(|rest| {
        rest.contains("/journal/torn-")
            && rest.ends_with(" bytes cut from a torn write; delete it once inspected")
    })
}

/// The warning of a writer that found a torn tail (a writer killed in the
/// middle of its append) and cut it.
pub fn is_torn_cut(line: &str) -> bool {
    line.strip_prefix("sessctl: warning: ")
        .is_some_and(|rest| rest.contains(": torn write, cut the last "))
}

/// Asserts that `fsck` and `fsck --full` find nothing: exit 0, on stdout
/// only the `dangling` sessions (heads of deleted conversations: fine, as
/// in git), and on stderr at most notes on torn tails (when `torn_ok`: a
/// writer killed in the middle of its append leaves one, and the next
/// writer cuts it).
pub fn assert_fsck_clean(store: &Path, dangling: &[ObjectId], torn_ok: bool) {
    let expected: BTreeSet<String> = dangling
        .iter()
        .map(|id| format!("dangling session {id}"))
        .collect();
    for args in [&["fsck"][..], &["fsck", "--full"]] {
        let run = sessctl(store, args, None);
        assert_eq!(run.code, 0, "{args:?}: {}{}", run.stdout, run.stderr);
        let found: BTreeSet<String> = run.stdout.lines().map(str::to_owned).collect();
        assert_eq!(found, expected, "{args:?}");
        for line in run.stderr.lines() {
            assert!(torn_ok && is_torn_note(line), "{args:?}: {line}");
        }
    }
}

/// Every file and directory under `dir`, by path relative to it (a
/// directory's ends with `/`), with its size (0 for a directory). One that
/// another process deletes while this looks is left out.
pub fn files(dir: &Path) -> BTreeMap<String, u64> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, u64>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().to_str().unwrap();
            if meta.is_dir() {
                out.insert(format!("{rel}/"), 0);
                walk(root, &path, out);
            } else {
                out.insert(rel.to_owned(), meta.len());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The bytes of every file under `dir`.
pub fn disk_bytes(dir: &Path) -> u64 {
    files(dir).values().sum()
}

/// Asserts that nothing is left that only a crash or a failed write
/// leaves: no `.tmp-*` file, no `torn-*` tail, no `index.broken-*`.
pub fn assert_no_leftovers(store: &Path) {
    for name in files(store).keys() {
        let base = name.trim_end_matches('/').rsplit('/').next().unwrap();
        assert!(
            !(base.starts_with(".tmp-")
                || base.starts_with("torn-")
                || base.starts_with("index.broken-")),
            "left behind: {name}"
        );
    }
}

/// Copies a directory tree (a fixture store) to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}
