//! Many processes on one store at once: `sessctl` and library writers
//! committing side by side while readers read, writers SIGKILLed in the
//! middle of their writes, a library handle that stays open while other
//! processes change the store, gc and repack beside writers, a store
//! written before any of this, and a busy write lock.
//!
//! Each test asserts what a user would notice: what was acknowledged
//! survives and reads back whole, every read succeeds and names only
//! sessions that exist, a failed write says why in one line, fsck is
//! clean. None asserts how long anything took. Sizes are small enough for
//! a debug build on two cores.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/procs.rs"]
mod procs;
mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sessctl_store::gc::{GcOptions, Prune};
use sessctl_store::refs::ConversationStatus;
use sessctl_store::{Cut, Durability, Error, ForkOptions, ObjectId, OpenOptions, Store};

use procs::{
    acks, assert_acknowledged, assert_fsck_clean, assert_no_leftovers, cli_commit,
    cli_commit_killed, copy_dir, create, disk_bytes, files, history_lengths, messages_json, noise,
    ok, parse_id, read_until, turn, user_message, Ack, Event, Failure, LibraryWriter, MaybeKilled,
    Rng, WriterPlan,
};
use support::{new_store, sessctl};

/// A summarizer that ignores its input and answers with a checkpoint.
const CHECKPOINT_CMD: &str = r#"cat >/dev/null; echo '{"completed":["x"]}'"#;

/// The journal segment size of library writers: small, so that they seal
/// segments and pack them while other processes read and write.
const SMALL_SEGMENTS: u64 = 48 * 1024;

/// The child side of every library writer below; in a normal run it
/// returns at once.
#[test]
fn library_writer_child() {
    procs::library_writer_entry();
}

/// The lost races among `events`, counted by conversation; any other
/// failure fails the test.
fn lost_races(events: &[Event]) -> BTreeMap<String, usize> {
    let mut lost = BTreeMap::new();
    for e in events {
        if let Event::Failed {
            conv,
            failure,
            message,
        } = e
        {
            assert_eq!(*failure, Failure::LostRace, "{conv}: {message}");
            *lost.entry(conv.clone()).or_default() += 1;
        }
    }
    lost
}

/// The acknowledgements among `events`, which must all be commits.
fn all_committed(events: &[Event]) -> Vec<Ack> {
    assert_eq!(lost_races(events), BTreeMap::new(), "no writer here races");
    acks(events)
}

/// Asserts that each conversation's history is its first message plus
/// exactly one for each acknowledged commit on it (no process was killed,
/// so every commit that landed was acknowledged), or at least that many
/// when `killed` (a killed commit may land unacknowledged).
fn assert_no_turn_lost(store: &Path, convs: &[&str], acks: &[Ack], killed: bool) {
    let lengths = history_lengths(store);
    for c in convs {
        let acked = 1 + acks.iter().filter(|a| a.conv == *c).count() as u64;
        if killed {
            assert!(lengths[*c] >= acked, "{c}: {} < {acked}", lengths[*c]);
        } else {
            assert_eq!(lengths[*c], acked, "{c}");
        }
    }
}

/// Starts `n` reader threads ([`read_until`]) that stop when `stop` is
/// set; they read the conversations `stable` accepts.
fn start_readers(
    store: &Path,
    n: u64,
    stop: &Arc<AtomicBool>,
    stable: fn(&str) -> bool,
) -> Vec<thread::JoinHandle<usize>> {
    (0..n)
        .map(|r| {
            let (store, stop) = (store.to_owned(), stop.clone());
            thread::spawn(move || read_until(&store, &stop, 100 + r, stable))
        })
        .collect()
}

/// Stops the readers; returns how many commands they ran.
fn stop_readers(stop: &AtomicBool, readers: Vec<thread::JoinHandle<usize>>) -> usize {
    stop.store(true, Ordering::SeqCst);
    readers
        .into_iter()
        // A reader's own panic message says what it read.
        .map(|r| r.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
        .sum()
}

// ---- 1. writers and readers at once ----

/// Two `sessctl commit` loops (one with --no-sync) and two library writers
/// whose commits expect the head they read commit at once, half of it on a
/// conversation they share, while two readers list, log, show and resume.
/// The library writers seal small journal segments and pack them as they
/// go, so files change under everyone.
/// Every acknowledged commit is on its ref log and reads back, no turn is
/// lost, every failed write lost a race and said so in one line (never a
/// lock timeout, never corruption), every read succeeded and named only
/// sessions that exist, fsck is clean, nothing is left behind and the
/// store holds no runaway duplicates.
#[test]
fn writers_and_readers_at_once() {
    let (_dir, store) = new_store();
    let convs = ["shared", "cli-0", "cli-1", "lib-0", "lib-1", "idle"];
    for c in convs {
        create(&store, c);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers = start_readers(&store, 2, &stop, |_| true);
    let library: Vec<LibraryWriter> = (0..2)
        .map(|k| {
            LibraryWriter::spawn(
                &store,
                &WriterPlan {
                    convs: vec!["shared".into(), format!("lib-{k}")],
                    commits: Some(16),
                    expect_head: true,
                    pause_ms: 3,
                    stale_once: Some(format!("lib-{k}")),
                    no_sync: k == 1,
                    big_every: Some(4),
                    segment_target: Some(SMALL_SEGMENTS),
                    tag: format!("lib{k}"),
                    seed: 7 + k,
                },
            )
        })
        .collect();
    let cli: Vec<_> = (0..2)
        .map(|k| {
            let store = store.clone();
            thread::spawn(move || {
                let own = format!("cli-{k}");
                let extra: &[&str] = if k == 1 { &["--no-sync"] } else { &[] };
                (0..15)
                    .map(|i| {
                        let conv = if i % 2 == 0 { "shared" } else { own.as_str() };
                        cli_commit(&store, conv, &format!("cli{k} {conv} {i}"), extra)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut events = Vec::new();
    for w in cli {
        events.extend(w.join().unwrap());
    }
    for w in library {
        let finished = w.finish();
        assert!(!finished.killed);
        events.extend(finished.events);
    }
    let reads = stop_readers(&stop, readers);

    // 30 CLI commits, and per library writer 16 and its stale one.
    assert_eq!(events.len(), 2 * 15 + 2 * (16 + 1));
    let lost = lost_races(&events);
    for k in 0..2 {
        let own = format!("lib-{k}");
        assert_eq!(
            lost.get(&own),
            Some(&1),
            "{own}: only the stale commit loses"
        );
    }
    let acks = acks(&events);
    assert_acknowledged(&store, &acks);
    assert_no_turn_lost(&store, &convs, &acks, false);
    assert_fsck_clean(&store, &[], false);
    assert_no_leftovers(&store);
    // What was committed, as JSON, against what the store holds: generous,
    // to catch objects written again and again, not to measure anything.
    let committed: usize = convs
        .iter()
        .map(|c| format!("{c} begins"))
        .chain(acks.iter().map(|a| a.text.clone()))
        .map(|t| messages_json(&t).len())
        .sum();
    let on_disk = disk_bytes(&store);
    assert!(
        on_disk < 10 * committed as u64 + 2 * 1024 * 1024,
        "{on_disk} bytes on disk for {committed} bytes of messages"
    );
    eprintln!(
        "{} commits acknowledged, {} races lost, {reads} reads; {on_disk} bytes on disk",
        acks.len(),
        lost.values().sum::<usize>()
    );
}

// ---- 2. kill -9 ----

/// Library writers are SIGKILLed at random moments, a round at a time, and
/// replaced; meanwhile two `sessctl commit` loops SIGKILL about one commit
/// in three of their own at a random moment (before, during or after its
/// write; some messages are 12 KB, so that a kill can tear a frame). Every
/// acknowledged commit is on its ref log with its history afterwards, no
/// writer after a kill ever waits out the lock or fails (each writes its
/// own conversation, so none can lose a race), and fsck is clean (a torn
/// tail set aside is a note, not a problem).
#[test]
fn sigkill_loses_no_acknowledged_commit() {
    const ROUNDS: usize = 8;
    let (_dir, store) = new_store();
    let mut rng = Rng::seeded(0x5eed);
    let slots = ["cli-0", "cli-1", "lib-0", "lib-1"];
    for c in slots {
        create(&store, c);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let cli: Vec<_> = (0..2)
        .map(|k| {
            let (store, stop, seed) = (store.clone(), stop.clone(), rng.next_u64());
            thread::spawn(move || {
                cli_writer_with_kills(&store, &format!("cli-{k}"), k == 1, seed, &stop)
            })
        })
        .collect();

    let mut acked = Vec::new();
    let mut library: Vec<Option<LibraryWriter>> = vec![None, None];
    let mut library_kills = 0;
    for round in 0..ROUNDS {
        for (k, slot) in library.iter_mut().enumerate() {
            if slot.is_none() {
                let plan = WriterPlan {
                    convs: vec![format!("lib-{k}")],
                    // Some rest between commits keeps the histories short
                    // enough to check whole afterwards.
                    pause_ms: 8,
                    no_sync: rng.one_in(2),
                    big_every: Some(4),
                    segment_target: Some(SMALL_SEGMENTS),
                    tag: format!("lib{k} round {round}"),
                    seed: rng.next_u64(),
                    ..WriterPlan::default()
                };
                *slot = Some(LibraryWriter::spawn(&store, &plan));
            }
        }
        thread::sleep(rng.millis(20, 200));
        let mut victim = library[rng.below(2) as usize].take().unwrap();
        victim.kill();
        let finished = victim.finish();
        library_kills += usize::from(finished.killed);
        // Its first commit included: a writer after a kill is not blocked.
        acked.extend(all_committed(&finished.events));
    }
    for mut w in library.into_iter().flatten() {
        w.kill();
        acked.extend(all_committed(&w.finish().events));
    }
    stop.store(true, Ordering::SeqCst);
    let mut cli_kills = 0;
    for t in cli {
        let (a, killed) = t.join().unwrap();
        acked.extend(a);
        cli_kills += killed;
    }

    assert!(acked.len() > ROUNDS, "too few commits to prove anything");
    assert_acknowledged(&store, &acked);
    assert_no_turn_lost(&store, &slots, &acked, true);
    // After all those deaths, each conversation takes a commit at once.
    for c in slots {
        let e = cli_commit(&store, c, &format!("{c} after the kills"), &[]);
        assert!(matches!(e, Event::Committed(_)), "{e:?}");
    }
    assert_fsck_clean(&store, &[], true);
    // What the dead left: torn tails set aside, temporary files. Not
    // asserted (a kill may leave a `.tmp-` file that no one owns); printed.
    let left: Vec<String> = files(&store)
        .into_keys()
        .filter(|n| n.contains("/torn-") || n.contains("/.tmp-") || n.starts_with(".tmp-"))
        .collect();
    eprintln!(
        "{} commits acknowledged; {library_kills} library writers and {cli_kills} sessctl commits killed; left behind: {left:?}",
        acked.len()
    );
}

/// A `sessctl commit` loop on `conv` until `stop` (20 commits at least)
/// that SIGKILLs about one commit in three 0 to 30 ms after it started.
/// The commit after a kill is left alone, and like every commit that is
/// not killed it must succeed. Returns what was acknowledged and how many
/// commits died.
fn cli_writer_with_kills(
    store: &Path,
    conv: &str,
    no_sync: bool,
    seed: u64,
    stop: &AtomicBool,
) -> (Vec<Ack>, usize) {
    let mut rng = Rng::new(seed);
    let extra: &[&str] = if no_sync { &["--no-sync"] } else { &[] };
    let (mut acked, mut killed, mut after_kill) = (Vec::new(), 0, false);
    for i in 0.. {
        if i >= 20 && stop.load(Ordering::SeqCst) {
            break;
        }
        let mut text = format!("{conv} {i}");
        if i % 4 == 3 {
            text.push(' ');
            text.push_str(&noise(seed ^ i, 12 * 1024));
        }
        let kill_after = (!after_kill && rng.one_in(3)).then(|| rng.millis(0, 30));
        after_kill = false;
        match cli_commit_killed(store, conv, &text, extra, kill_after) {
            MaybeKilled::Ended(Event::Committed(a)) => acked.push(a),
            MaybeKilled::Ended(e) => panic!("{conv} commit {i}: {e:?}"),
            MaybeKilled::Killed(a) => {
                acked.extend(a);
                killed += 1;
                after_kill = true;
            }
        }
    }
    (acked, killed)
}

// ---- 3. a handle held open ----

/// A library handle opened once, in this process, while `sessctl` in
/// other processes commits, forks, archives, compacts and deletes: the
/// CLI never waits for the handle (no exit 4 with --wait 2), and the
/// handle sees every change (conversation, resolve_rev, conversations)
/// without reopening, commits between them, expecting the heads the CLI
/// left, and loses a race when it expects one the CLI moved. A thread of
/// the handle commits on a conversation of its own all along, moving HEAD
/// (`archive` and `rm` decide about HEAD under the write lock, so they never
/// lose a race on it: see [`at_once`]).
#[test]
fn an_open_handle_sees_what_other_processes_do() {
    let (_dir, path) = new_store();
    create(&path, "bg");
    let store = Arc::new(Store::open(&path, &OpenOptions::default()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let background = {
        let (store, stop) = (store.clone(), stop.clone());
        thread::spawn(move || {
            let mut ids = Vec::new();
            for i in 0.. {
                if i >= 5 && stop.load(Ordering::SeqCst) {
                    break;
                }
                // A pause keeps the history short enough to check whole.
                thread::sleep(Duration::from_millis(5));
                let text = format!("bg {i}");
                let id = store.commit("bg", None, turn(&text), Durability::Sync);
                ids.push(Ack {
                    conv: "bg".into(),
                    id: id.unwrap(),
                    text,
                });
            }
            ids
        })
    };
    let cli = |args: &[&str], stdin: Option<&str>| -> String {
        let run = sessctl(&path, &[&["--wait", "2"], args].concat(), stdin);
        assert_ne!(run.code, 4, "{args:?} waited for the lock: {}", run.stderr);
        assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{args:?}");
        run.stdout
    };
    let commit_by_cli = |conv: &str, text: &str, new: bool| -> ObjectId {
        let mut args = vec!["commit", conv, "--messages", "-"];
        if new {
            args.push("--new");
        }
        parse_id(&cli(&args, Some(&messages_json(text)))).unwrap()
    };
    let sees_head = |name: &str, id: ObjectId| {
        assert_eq!(store.conversation(name).unwrap().unwrap().head, Some(id));
        assert_eq!(store.resolve_rev(name).unwrap(), id);
        let listed = store.conversations(None).unwrap();
        assert!(
            listed.iter().any(|c| c.name == name && c.head == Some(id)),
            "{name}"
        );
    };

    // A conversation the CLI starts and continues.
    let a0 = commit_by_cli("cli-a", "a 0", true);
    sees_head("cli-a", a0);
    let a1 = commit_by_cli("cli-a", "a 1", false);
    sees_head("cli-a", a1);
    // The handle continues it from the head the CLI left, and the CLI sees that.
    let a2 = store
        .commit("cli-a", Some(a1), turn("a 2"), Durability::Sync)
        .unwrap();
    assert_eq!(cli(&["rev-parse", "cli-a"], None), format!("{a2}\n"));
    let a3 = commit_by_cli("cli-a", "a 3", false);
    sees_head("cli-a", a3);
    // Expecting the head the CLI moved is a lost race.
    let late = store.commit("cli-a", Some(a2), turn("late"), Durability::Sync);
    assert!(matches!(late, Err(Error::RefOutOfDate { .. })), "{late:?}");

    // A fork by the CLI, cut at message 2; the handle commits on it.
    let out = cli(
        &["fork", "cli-a", "--at-message", "2", "--as", "cli-fork"],
        None,
    );
    let fork = ObjectId::from_hex(out.trim().strip_prefix("cli-fork ").unwrap()).unwrap();
    sees_head("cli-fork", fork);
    assert_eq!(store.odb().load_messages(&fork).unwrap().len(), 2);
    let f1 = store
        .commit("cli-fork", Some(fork), turn("fork 1"), Durability::Sync)
        .unwrap();

    // Archived by the CLI: the handle lists it archived and refuses to continue it.
    at_once(&path, "cli-fork", "archive");
    let info = store.conversation("cli-fork").unwrap().unwrap();
    assert_eq!(
        (info.record.status, info.head),
        (ConversationStatus::Archived, Some(f1))
    );
    let refused = store.commit("cli-fork", None, turn("no"), Durability::Sync);
    assert!(
        matches!(refused, Err(Error::ConversationArchived { .. })),
        "{refused:?}"
    );
    let listed = store.conversations(None).unwrap();
    assert!(listed
        .iter()
        .any(|c| c.name == "cli-fork" && c.record.status == ConversationStatus::Archived));

    // Compacted by the CLI: the handle's history starts with the checkpoint
    // and keeps the last message; the handle continues from there.
    let out = cli(
        &[
            "compact",
            "cli-a",
            "--summarizer",
            CHECKPOINT_CMD,
            "--keep-last",
            "1",
        ],
        None,
    );
    let compacted = parse_id(&out).unwrap();
    sees_head("cli-a", compacted);
    let session = store.odb().session(&compacted).unwrap();
    assert_eq!(session.compaction.map(|c| c.session), Some(a3));
    let history = store.odb().load_messages(&compacted).unwrap();
    let first = history[0]["content"].as_str().unwrap();
    assert!(first.starts_with("[sessctl checkpoint]"), "{first}");
    assert_eq!(history.last(), Some(&user_message("a 3")));
    let a4 = store
        .commit("cli-a", Some(compacted), turn("a 4"), Durability::Sync)
        .unwrap();
    sees_head("cli-a", a4);

    // Unarchived, then deleted, by the CLI: gone for the handle.
    cli(&["unarchive", "cli-fork"], None);
    let info = store.conversation("cli-fork").unwrap().unwrap();
    assert_eq!(info.record.status, ConversationStatus::Active);
    at_once(&path, "cli-fork", "rm");
    assert!(store.conversation("cli-fork").unwrap().is_none());
    assert!(store.resolve_rev("cli-fork").is_err());
    assert!(!store
        .conversations(None)
        .unwrap()
        .iter()
        .any(|c| c.name == "cli-fork"));

    stop.store(true, Ordering::SeqCst);
    let bg = background.join().unwrap();
    assert_acknowledged(&path, &bg);
    // The handle and a fresh process agree on every conversation.
    let mine: BTreeMap<String, Option<String>> = store
        .conversations(None)
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.head.map(|h| h.to_hex())))
        .collect();
    let listed: Value = serde_json::from_str(&ok(&path, &["ls", "--all", "--json"])).unwrap();
    let theirs: BTreeMap<String, Option<String>> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let head = c["head"].as_str().map(str::to_owned);
            (c["name"].as_str().unwrap().to_owned(), head)
        })
        .collect();
    assert_eq!(mine, theirs);
    // The deleted fork's head is dangling, as a deleted branch's tip in git.
    assert_fsck_clean(&path, &[f1], false);
    eprintln!("{} background commits", bg.len());
}

/// Runs `sessctl --wait 2 VERB NAME` (`archive` or `rm`) while other
/// processes commit and move HEAD: it succeeds the first time, with nothing
/// on stderr. (It once expected HEAD to still follow NAME when it detached
/// it, and lost to any commit that moved HEAD meanwhile; the store now
/// decides that under the write lock.)
fn at_once(store: &Path, name: &str, verb: &str) {
    let run = sessctl(store, &["--wait", "2", verb, name], None);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{verb} {name}");
}

// ---- 4. gc and repack beside writers ----

/// gc and `repack`, four times each, while a library writer (packing as
/// it goes) and a `sessctl commit` loop write and a reader reads: every
/// commit succeeds, every acknowledged one keeps its whole history, every
/// read succeeds, fsck is clean, nothing is left behind.
///
/// And a collector's hard case: what it drops, used again while it runs.
/// Before each gc, blobs are stored with `hash-object -w` (nothing reaches
/// them) and a conversation is deleted; while the gc runs, the same
/// messages are committed at random moments, so each commit finds its blob
/// stored (before gc marks, between its mark and its sweep, or after) and
/// does not store it again, and the deleted conversation's head is forked
/// back. Every session written must keep every object it names. The gc
/// alternates: `sessctl gc --prune=now` (which keeps what 90 days of ref
/// log reach: the deleted conversation stays) and the library's gc in this
/// process with no ref-log expiry (it drops the deleted conversation too,
/// unless the fork revives it in time).
#[test]
fn gc_and_repack_beside_writers() {
    const ROUNDS: u64 = 4;
    let (_dir, store) = new_store();
    let mut rng = Rng::seeded(0x6c);
    let convs = ["lib-0", "lib-1", "cli-0", "dedup"];
    for c in convs {
        create(&store, c);
    }

    // Alone first: gc drops an orphan blob, and committing its content
    // afterwards stores it again.
    let orphan = store_blob(&store, "orphan before");
    ok(&store, &["gc", "--prune=now"]);
    let gone = sessctl(&store, &["cat-object", "-t", &orphan], None);
    assert_eq!(gone.code, 1, "gc kept the orphan: {gone:?}");
    let mut reused = vec![commit_as_blob(&store, "orphan before", &orphan)];

    let stop = Arc::new(AtomicBool::new(false));
    // Deleted conversations come and go: only the others are read.
    let readers = start_readers(&store, 1, &stop, |name| !name.starts_with("doomed-"));
    let library = LibraryWriter::spawn(
        &store,
        &WriterPlan {
            convs: vec!["lib-0".into(), "lib-1".into()],
            commits: Some(40),
            big_every: Some(5),
            segment_target: Some(SMALL_SEGMENTS),
            tag: "lib".into(),
            seed: rng.next_u64(),
            ..WriterPlan::default()
        },
    );
    let cli = {
        let (store, stop) = (store.clone(), stop.clone());
        thread::spawn(move || {
            let mut events = Vec::new();
            for i in 0.. {
                if i >= 15 && stop.load(Ordering::SeqCst) {
                    break;
                }
                events.push(cli_commit(
                    &store,
                    "cli-0",
                    &format!("cli {i}"),
                    &["--no-sync"],
                ));
            }
            events
        })
    };
    let mut revived = Vec::new();
    for round in 0..ROUNDS {
        let (acks, fork) = reuse_while_gc_runs(&store, round, round % 2 == 1, &mut rng);
        reused.extend(acks);
        revived.extend(fork);
        ok(&store, &["repack"]);
    }
    stop.store(true, Ordering::SeqCst);
    let mut acked = all_committed(&cli.join().unwrap());
    let finished = library.finish();
    assert_eq!(finished.events.len(), 40);
    acked.extend(all_committed(&finished.events));
    let reads = stop_readers(&stop, readers);

    acked.extend(reused.iter().cloned());
    assert_acknowledged(&store, &acked);
    assert_no_turn_lost(&store, &convs, &acked, false);
    for id in reused.iter().map(|a| a.id).chain(revived.iter().copied()) {
        ok(&store, &["show", "--messages", &id.to_hex()]);
        ok(&store, &["resume", "--json", &id.to_hex()]);
    }
    assert_fsck_clean(&store, &[], false);
    assert_no_leftovers(&store);
    eprintln!(
        "{} commits acknowledged, {} of {ROUNDS} deleted conversations revived, {reads} reads",
        acked.len(),
        revived.len()
    );
}

/// One round of [`gc_and_repack_beside_writers`]: orphan blobs and a
/// deleted conversation, then a gc (the library's without ref-log expiry
/// when `library_gc`, else `sessctl gc --prune=now`) during which their
/// messages are committed again on `dedup` and the deleted head is forked
/// to `revived-ROUND`. Returns the commits, and the fork's session when
/// the fork came before the gc dropped its source (else it must have
/// failed in one line).
fn reuse_while_gc_runs(
    store: &Path,
    round: u64,
    library_gc: bool,
    rng: &mut Rng,
) -> (Vec<Ack>, Option<ObjectId>) {
    let doomed = format!("doomed-{round}");
    create(store, &doomed);
    let Event::Committed(head) = cli_commit(store, &doomed, &format!("{doomed} more"), &[]) else {
        panic!("commit on {doomed} failed");
    };
    at_once(store, &doomed, "rm");
    let texts: Vec<String> = (0..3)
        .map(|j| format!("orphan {round}.{j}"))
        .chain([format!("{doomed} begins"), format!("{doomed} more")])
        .collect();
    let blobs: Vec<String> = texts.iter().map(|t| store_blob(store, t)).collect();

    let gc = if library_gc {
        let path = store.to_owned();
        thread::spawn(move || {
            let opts = GcOptions {
                prune: Prune::Now,
                reflog_expiry_ms: 0,
                ..GcOptions::default()
            };
            let lib = Store::open(&path, &OpenOptions::default()).unwrap();
            lib.gc(&opts).map(|_| ()).map_err(|e| e.to_string())
        })
    } else {
        let child = spawn_sessctl(store, &["gc", "--prune=now"]);
        thread::spawn(move || {
            let out = child.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.success() && stderr.is_empty() {
                Ok(())
            } else {
                Err(format!("{}: {stderr}", out.status))
            }
        })
    };
    let fork_at = rng.below(texts.len() as u64) as usize;
    let mut acks = Vec::new();
    let mut fork = None;
    for (i, (text, blob)) in texts.iter().zip(&blobs).enumerate() {
        thread::sleep(rng.millis(0, 15));
        acks.push(commit_as_blob(store, text, blob));
        if i == fork_at {
            fork = fork_deleted(store, &head.id, &format!("revived-{round}"));
            // Only the library's gc may drop the deleted head first.
            assert!(library_gc || fork.is_some(), "{doomed}: the fork failed");
        }
    }
    gc.join().unwrap().unwrap();
    (acks, fork)
}

/// `sessctl fork SESSION --at-message 1 --as NAME`: the new session, or
/// `None` when the session is gone (exit 1, one line).
fn fork_deleted(store: &Path, session: &ObjectId, name: &str) -> Option<ObjectId> {
    let session = session.to_hex();
    let args = ["fork", &session, "--at-message", "1", "--as", name];
    let run = sessctl(store, &args, None);
    if run.code == 1 && run.stdout.is_empty() && run.stderr.lines().count() == 1 {
        return None;
    }
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{args:?}");
    let id = run.stdout.trim().strip_prefix(&format!("{name} ")).unwrap();
    Some(ObjectId::from_hex(id).unwrap())
}

/// Stores `user_message(text)` as a blob nothing reaches; returns its id.
fn store_blob(store: &Path, text: &str) -> String {
    let run = sessctl(
        store,
        &["hash-object", "-w", "--stdin"],
        Some(&user_message(text).to_string()),
    );
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "hash-object");
    run.stdout.trim().to_owned()
}

/// Commits `text` on conversation `dedup` and checks that the message the
/// new session names is `blob`; returns the acknowledgement.
fn commit_as_blob(store: &Path, text: &str, blob: &str) -> Ack {
    let Event::Committed(ack) = cli_commit(store, "dedup", text, &[]) else {
        panic!("commit of {text:?} failed");
    };
    let session: Value =
        serde_json::from_str(&ok(store, &["cat-object", "--json", &ack.id.to_hex()])).unwrap();
    assert_eq!(
        session["messages"]["added"],
        serde_json::json!([blob]),
        "{text}"
    );
    ack
}

/// Starts `sessctl ARGS` with its output piped, without waiting.
fn spawn_sessctl(store: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_sessctl"))
        .arg("--store")
        .arg(store)
        .args(args)
        .env_remove("SESSCTL_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

// ---- 5. a store written before ----

/// The fixture store, written by sessctl before many processes could share
/// a store: a sled index and a listing file.
fn sled_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-sled-index")
}

/// A store written before (a sled `index/` and a `listing`) reads as it
/// did: `ls --all --json` and `reflog` byte for byte, fsck clean, and
/// reading changes no file. Its first write and a `reindex` retire the
/// sled files and the listing, and it lists the same conversations, the
/// one written to moved on by one session.
#[test]
fn a_store_written_before_reads_the_same_and_upgrades_on_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("old");
    copy_dir(&sled_fixture(), &store);
    let fixture = |ext: &str| std::fs::read_to_string(sled_fixture().with_extension(ext)).unwrap();
    let before = files(&store);

    let ls = ok(&store, &["ls", "--all", "--json"]);
    assert_eq!(ls, fixture("ls.json"));
    assert_eq!(ok(&store, &["reflog"]), fixture("reflog.txt"));
    assert_eq!(ok(&store, &["fsck"]), "");
    let list: Value = serde_json::from_str(&ls).unwrap();
    let trip_head = by_name(&list)["trip"]["head"].as_str().unwrap().to_owned();
    for args in [
        &["log", "--all", "--oneline"][..],
        &["for-each-ref", "--json"],
        &["show", "trip"],
        &["resume", "--json", "trip"],
        &["cat-object", "-p", &trip_head],
        &["fsck", "--full"],
    ] {
        ok(&store, args);
    }
    assert_eq!(files(&store), before, "a read changed the store");

    // One write, then a reindex: the old index and the listing are gone.
    let Event::Committed(ack) = cli_commit(&store, "trip", "one more", &[]) else {
        panic!("commit on the old store failed");
    };
    ok(&store, &["reindex"]);
    let now = files(&store);
    for name in now.keys() {
        let retired = ["index/db", "index/conf", "listing"].contains(&name.as_str())
            || name.starts_with("index/snap.");
        assert!(!retired, "{name} is still there");
    }
    assert!(now
        .keys()
        .any(|n| n.starts_with("index/") && n.ends_with(".sit")));

    let mut expected = list;
    for c in expected.as_array_mut().unwrap() {
        if c["name"] == "trip" {
            c["head"] = Value::from(ack.id.to_hex());
            c["messages"] = Value::from(c["messages"].as_u64().unwrap() + 1);
            c["sessions"] = Value::from(c["sessions"].as_u64().unwrap() + 1);
        }
    }
    let after: Value = serde_json::from_str(&ok(&store, &["ls", "--all", "--json"])).unwrap();
    assert_eq!(by_name(&after), by_name(&expected));
    assert_eq!(after[0]["name"], "trip", "the newest activity comes first");
    assert_eq!(ok(&store, &["fsck"]), "");
}

/// `ls --json` rows by name, without the times of `trip` (the
/// conversation written to: its times are the clock's).
fn by_name(list: &Value) -> BTreeMap<String, Value> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if c["name"] == "trip" {
                let o = c.as_object_mut().unwrap();
                o.remove("updated_at");
                o.remove("last_activity");
            }
            (c["name"].as_str().unwrap().to_owned(), c)
        })
        .collect()
}

// ---- 6. a busy lock ----

/// While another process holds the write lock (here: this one, as pid
/// 4242 says), a write waits --wait seconds and then exits 4 with a line
/// naming the holder and --wait, changing nothing; reads answer, since
/// they take no lock; once the lock is free the same write succeeds.
#[test]
fn a_busy_lock_is_a_clear_exit_4() {
    let (_dir, store) = new_store();
    let root = create(&store, "fix");
    let lock = support::hold_lock(&store, "4242");

    let run = sessctl(
        &store,
        &["--wait", "0.3", "commit", "fix", "--messages", "-"],
        Some(&messages_json("blocked")),
    );
    assert_eq!((run.code, run.stdout.as_str()), (4, ""));
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.starts_with("sessctl: store "), "{}", run.stderr);
    assert!(run.stderr.contains("in use by pid 4242"), "{}", run.stderr);
    assert!(run.stderr.contains("--wait"), "{}", run.stderr);

    let listed: Value = serde_json::from_str(&ok(&store, &["ls", "--json"])).unwrap();
    assert_eq!(listed[0]["head"], root.to_hex());
    assert_eq!(listed[0]["messages"], 1);
    let log = ok(&store, &["log", "--oneline", "fix"]);
    assert_eq!(log.lines().count(), 1, "{log}");
    assert!(log.starts_with(&root.to_hex()[..12]), "{log}");

    drop(lock);
    let e = cli_commit(&store, "fix", "unblocked", &[]);
    assert!(matches!(e, Event::Committed(_)), "{e:?}");
}

// ---- what the tests above found, one case each ----

/// A library handle left idle while other processes seal and pack two
/// journal segments (here: commit, repack, commit, repack) still follows
/// the store: its next commit lands on top of theirs, in the store, and
/// the handle sees their commits. (The random tests above rarely leave a
/// handle idle that long; an agent runtime holding a `Store` for hours
/// always does.)
#[test]
fn a_handle_idle_across_two_repacks_still_follows_the_store() {
    let (_dir, path) = new_store();
    create(&path, "a");
    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    store
        .commit("a", None, turn("h1"), Durability::Sync)
        .unwrap();
    let mut theirs = Vec::new();
    for text in ["c1", "c2"] {
        let Event::Committed(ack) = cli_commit(&path, "a", text, &[]) else {
            panic!("commit {text} failed");
        };
        theirs.push(ack.id);
        ok(&path, &["repack"]);
    }
    assert_eq!(
        store.resolve_rev("a").unwrap(),
        theirs[1],
        "the handle sees c2"
    );
    let h2 = store
        .commit("a", None, turn("h2"), Durability::Sync)
        .unwrap();
    let ack = Ack {
        conv: "a".into(),
        id: h2,
        text: "h2".into(),
    };
    assert_acknowledged(&path, &[ack]);
    let history: Vec<Value> = ["a begins", "h1", "c1", "c2", "h2"]
        .iter()
        .map(|t| user_message(t))
        .collect();
    assert_eq!(store.odb().load_messages(&h2).unwrap(), history);
    assert_eq!(store.odb().session(&h2).unwrap().parents, vec![theirs[1]]);
    assert_eq!(ok(&path, &["rev-parse", "a"]), format!("{h2}\n"));
}

/// A blob that gc dropped (nothing reached it) and that a handle opened
/// before the gc then commits again is stored again: the commit may not
/// count on the copy in the journal segment gc deleted. (With processes
/// only, the same happens to a commit whose process opened the store
/// between gc publishing its new pack and deleting the old segments.)
#[test]
fn content_committed_again_after_gc_dropped_it_is_stored_again() {
    let (_dir, path) = new_store();
    create(&path, "a");
    ok(&path, &["repack"]);
    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    let blob = store_blob(&path, "orphan");
    ok(&path, &["gc", "--prune=now"]);
    let gone = sessctl(&path, &["cat-object", "-t", &blob], None);
    assert_eq!(gone.code, 1, "gc kept the orphan: {gone:?}");

    let id = store
        .commit("a", None, turn("orphan"), Durability::Sync)
        .unwrap();
    drop(store);
    assert_eq!(ok(&path, &["cat-object", "-t", &blob]), "blob\n");
    let ack = Ack {
        conv: "a".into(),
        id,
        text: "orphan".into(),
    };
    assert_acknowledged(&path, &[ack]);
    assert_fsck_clean(&path, &[], false);
}

/// A session that gc dropped (a deleted conversation's, with no ref-log
/// expiry) and that a handle opened before the gc then forks from: the
/// fork either fails, naming what is gone, or keeps its parent. (The same
/// race as the test above, for a session.)
#[test]
fn a_fork_of_a_session_gc_dropped_fails_or_keeps_it() {
    let (_dir, path) = new_store();
    create(&path, "a");
    ok(&path, &["repack"]);
    let store = Store::open(&path, &OpenOptions::default()).unwrap();
    let doomed = create(&path, "doomed");
    ok(&path, &["rm", "doomed"]);
    // rm left HEAD detached at the deleted head, which would keep it.
    ok(&path, &["checkout", "a"]);
    let opts = GcOptions {
        prune: Prune::Now,
        reflog_expiry_ms: 0,
        ..GcOptions::default()
    };
    let gc = Store::open(&path, &OpenOptions::default()).unwrap();
    assert_eq!(
        gc.gc(&opts).unwrap().pruned,
        2,
        "the session and its message"
    );
    drop(gc);

    let fork = store.fork(
        doomed,
        ForkOptions {
            name: Some("revived".into()),
            cut: Some(Cut::AtMessage(1)),
            turn: Some(turn("again")),
        },
        Durability::Sync,
    );
    drop(store);
    match fork {
        Err(e) => assert!(matches!(e, Error::NotFound { .. }), "{e}"),
        Ok((_, id)) => {
            ok(&path, &["resume", "--json", &id.to_hex()]);
            assert_fsck_clean(&path, &[], false);
        }
    }
}

/// A blob that gc wrote back to the journal, because a commit came to use
/// it while gc was dropping it, survives the next pack by a handle that
/// knew its first copy. Here the handle makes the commit itself, between
/// gc sealing the journal and gc publishing its pack (it waits for the
/// seal, and a pack of some hundred objects takes gc a while), then packs
/// as it goes, with small segments. (Should the commit come after gc
/// instead, there is nothing to write back and the test proves less, but
/// still passes on a correct store.)
#[test]
fn a_blob_gc_wrote_back_survives_the_next_pack_by_a_handle() {
    let (_dir, path) = new_store();
    create(&path, "a");
    let bulk = Store::open(&path, &OpenOptions::default()).unwrap();
    for i in 0..200 {
        let text = format!("bulk {i} {}", noise(i, 300));
        bulk.commit("a", None, turn(&text), Durability::NoSync)
            .unwrap();
    }
    drop(bulk);
    ok(&path, &["repack"]);
    let small = OpenOptions {
        segment_target: 4096,
        ..OpenOptions::default()
    };
    let store = Store::open(&path, &small).unwrap();
    let blob = store_blob(&path, "orphan");
    // The handle reads: it learns of the blob's first copy, in the journal.
    store.conversations(None).unwrap();

    let segments = || -> Vec<String> {
        files(&path)
            .into_keys()
            .filter(|n| n.ends_with(".journal"))
            .collect()
    };
    let before = segments();
    let gc = spawn_sessctl(&path, &["gc", "--prune=now"]);
    // gc seals the journal after it marked; then it writes its pack.
    let start = Instant::now();
    while segments() == before && start.elapsed() < Duration::from_secs(10) {
        thread::sleep(Duration::from_micros(200));
    }
    let id = store
        .commit("a", None, turn("orphan"), Durability::Sync)
        .unwrap();
    let out = gc.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // More commits: the handle seals small segments and packs them.
    for i in 0..20 {
        let text = format!("more {i} {}", noise(i, 2000));
        store
            .commit("a", None, turn(&text), Durability::Sync)
            .unwrap();
    }
    drop(store);

    assert_eq!(ok(&path, &["cat-object", "-t", &blob]), "blob\n");
    let ack = Ack {
        conv: "a".into(),
        id,
        text: "orphan".into(),
    };
    assert_acknowledged(&path, &[ack]);
    assert_fsck_clean(&path, &[], false);
}

/// `rm X` and `checkout X` run at once, again and again: HEAD never ends
/// on a ref that no longer exists. Either the checkout comes first and rm
/// detaches HEAD at X's head, or rm comes first and the checkout fails; rm
/// always succeeds (it decides about HEAD under the write lock). A race,
/// so repeated; on a correct store every round passes.
#[test]
fn rm_and_checkout_at_once_never_leave_head_on_a_deleted_ref() {
    let (_dir, path) = new_store();
    create(&path, "other");
    for i in 0..30 {
        let name = format!("x{i}");
        create(&path, &name);
        ok(&path, &["checkout", "other"]);
        let rm = spawn_sessctl(&path, &["rm", &name]);
        let checkout = sessctl(&path, &["checkout", &name], None);
        let rm = rm.wait_with_output().unwrap();
        // rm decides under the write lock whether HEAD follows what it
        // deletes: it never loses to the checkout.
        assert!(
            rm.status.success(),
            "rm: {}",
            String::from_utf8_lossy(&rm.stderr)
        );
        // The checkout loses when rm came first (the ref is gone), with one
        // line.
        assert!(
            checkout.code == 0 || (checkout.code == 1 && checkout.stderr.lines().count() == 1),
            "{checkout:?}"
        );

        let head = sessctl(&path, &["rev-parse", "HEAD"], None);
        let refs = ok(&path, &["for-each-ref"]);
        assert_eq!(head.code, 0, "round {i}: HEAD names nothing: {refs}");
    }
    // Clean but for the heads of the deleted conversations, which nothing
    // names any more (dangling, as in git).
    let r = sessctl(&path, &["fsck"], None);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.lines().all(|l| l.starts_with("dangling session ")),
        "{r:?}"
    );
}

/// A packer killed after it archived a segment's operations to the op log
/// but before it deleted the segment leaves both (objects-format.md,
/// "Operation log"); the next packer then archives those operations again,
/// with the next segment's, in a file that overlaps the first. Each
/// operation is still read once: fsck is clean, the ref log lists each
/// move once, reindex counts each operation once. (The crash is made by
/// hand: the segment, saved before `repack` archived and deleted it, is
/// put back.)
#[test]
fn operations_archived_twice_are_read_once() {
    let (_dir, path) = new_store();
    create(&path, "a");
    for text in ["2", "3"] {
        assert!(matches!(
            cli_commit(&path, "a", text, &[]),
            Event::Committed(_)
        ));
    }
    let segment = path.join("journal/0000000000000001.journal");
    let saved = std::fs::read(&segment).unwrap();
    ok(&path, &["repack"]);
    std::fs::write(&segment, &saved).unwrap();
    assert_fsck_clean(&path, &[], false);
    // A fourth operation in the next segment, without packing as it goes,
    // then one packer takes both segments.
    let opts = OpenOptions {
        auto_pack: false,
        ..OpenOptions::default()
    };
    let store = Store::open(&path, &opts).unwrap();
    store
        .commit("a", None, turn("4"), Durability::Sync)
        .unwrap();
    drop(store);
    ok(&path, &["repack"]);

    assert_fsck_clean(&path, &[], false);
    assert_eq!(ok(&path, &["reflog", "a"]).lines().count(), 4);
    assert_eq!(ok(&path, &["reindex"]), "reindexed 4 operations\n");
}
