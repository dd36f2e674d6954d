//! Durability under SIGKILL: a child process commits in a loop (several
//! threads, several conversations) and prints each acknowledged session id;
//! the parent kills it at random moments. After every kill the store opens,
//! every acknowledged commit is on its conversation's ref log and readable,
//! and nothing is corrupt. The test re-runs its own binary as the child.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sessctl_store::{Durability, Messages, ObjectId, OpenOptions, RefName, RefTarget, Store, Turn};

const CHILD_ENV: &str = "SESSCTL_TEST_CRASH_CHILD";
const CONVERSATIONS: usize = 4;

/// In the child: commit forever on every conversation, one thread each.
#[test]
fn crash_child_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Arc::new(Store::open(Path::new(&path), &OpenOptions::default()).unwrap());
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let threads: Vec<_> = (0..CONVERSATIONS)
        .map(|c| {
            let store = store.clone();
            let out = out.clone();
            std::thread::spawn(move || {
                let name = format!("c{c}");
                for i in 0.. {
                    let turn = Turn {
                        messages: Messages::Added(vec![
                            json!({"role": "user", "content": format!("{name} turn {i} {}", "x".repeat(i % 700))}),
                        ]),
                        ..Turn::default()
                    };
                    let id = if store.conversation(&name).unwrap().is_none() {
                        store.create(Some(&name), turn, Durability::Sync).unwrap().1
                    } else {
                        store.commit(&name, None, turn, Durability::Sync).unwrap()
                    };
                    use std::io::Write;
                    let mut o = out.lock().unwrap();
                    writeln!(o, "{name} {id}").unwrap();
                    o.flush().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn every_acknowledged_commit_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    Store::init(&path).unwrap();
    let mut acked: BTreeMap<String, Vec<ObjectId>> = BTreeMap::new();
    let mut seed = 0x5eed_u64;
    let rounds = 12;
    for round in 0..rounds {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "crash_child_entry",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                lines.push(line);
            }
            lines
        });
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(30 + seed % 300));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let lines = reader.join().unwrap();
        for line in &lines {
            // A line cut by the kill is not an acknowledgement.
            let Some((conv, id)) = line.split_once(' ') else {
                continue;
            };
            let Ok(id) = ObjectId::from_hex(id) else {
                continue;
            };
            acked.entry(conv.to_owned()).or_default().push(id);
        }

        let store = Store::open(&path, &OpenOptions::default()).unwrap();
        let broken = store.verify_chains().unwrap();
        assert!(broken.is_empty(), "round {round}: {broken:?}");
        let log = store.reflog_entries().unwrap();
        for (conv, ids) in &acked {
            let name = RefName::conversation(conv).unwrap();
            let moved_to: Vec<ObjectId> = log
                .iter()
                .filter(|e| e.name == name)
                .filter_map(|e| match &e.new {
                    Some(RefTarget::Session(id)) => Some(*id),
                    _ => None,
                })
                .collect();
            for id in ids {
                assert!(
                    moved_to.contains(id),
                    "round {round}: acknowledged {id} on {conv} is not in its ref log"
                );
                store.odb().session(id).unwrap();
            }
            store.odb().load_messages(ids.last().unwrap()).unwrap();
            // The head is at or after the last acknowledged commit.
            let head = store.resolve_rev(conv).unwrap();
            let history = store.odb().history(&head).unwrap();
            assert!(
                history.len() >= ids.len(),
                "round {round}: {conv} lost turns"
            );
        }
        for id in store.odb().backend().ids().unwrap() {
            store.odb().read(&id).unwrap();
        }
        drop(store);
    }
    let total: usize = acked.values().map(Vec::len).sum();
    eprintln!("{total} acknowledged commits over {rounds} kills, all present");
    assert!(
        total > rounds,
        "the child acknowledged too few commits to prove anything"
    );
}
