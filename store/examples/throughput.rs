//! Write and read throughput of small messages through the library.
//!
//! `cargo run --release -p sessctl-store --example throughput [DIR]`
//! (DIR: where to put the temporary stores; default: the system temp dir).
//! Prints figures only; the benchmark harness compares against anchors.

#![allow(clippy::unwrap_used)] // a measuring program: a panic is the report

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::time::Instant;

use std::sync::Arc;

use sessctl_store::{
    Durability, MessageDelta, Messages, ObjectId, Odb, RepackOptions, Session, Store, Turn,
    WriteBatch,
};
use support::{message, Rng};

/// One commit: a message blob and a session continuing `parent`.
fn commit(
    odb: &Odb,
    rng: &mut Rng,
    parent: Option<(ObjectId, u64)>,
    i: usize,
    d: Durability,
) -> (ObjectId, u64) {
    let mut b = WriteBatch::new();
    let m = b.blob(&message(rng, i)).unwrap();
    let mut s = Session::new_root(1_763_000_000_000 + i as i64);
    if let Some((p, len)) = parent {
        s.parents = vec![p];
        s.messages = MessageDelta {
            base: len,
            added: vec![m],
        };
    } else {
        s.messages.added = vec![m];
    }
    let len = s.messages.len();
    let id = b.session(&s).unwrap();
    odb.write(&b, d).unwrap();
    (id, len)
}

fn chain(odb: &Odb, seed: u64, n: usize, d: Durability) -> ObjectId {
    let mut rng = Rng::new(seed);
    let mut at = None;
    for i in 0..n {
        at = Some(commit(odb, &mut rng, at, i, d));
    }
    at.unwrap().0
}

fn rate(n: usize, t: Instant) -> String {
    format!("{:>9.0}/s", n as f64 / t.elapsed().as_secs_f64())
}

fn main() {
    let base = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&base).unwrap();
    let fresh = |name: &str| -> Odb { Odb::init(&dir.path().join(name)).unwrap() };

    let odb = fresh("durable1");
    let t = Instant::now();
    chain(&odb, 1, 500, Durability::Sync);
    println!("durable commits, 1 writer:          {}", rate(500, t));

    for threads in [16usize, 64] {
        let odb = fresh(&format!("durable{threads}"));
        let per = 3000 / threads;
        let t = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|k| {
                let odb = odb.clone();
                std::thread::spawn(move || chain(&odb, k as u64, per, Durability::Sync))
            })
            .collect();
        hs.into_iter().for_each(|h| {
            h.join().unwrap();
        });
        println!(
            "durable commits, {threads:>2} conversations: {}",
            rate(per * threads, t)
        );
    }

    let odb = fresh("nosync");
    let t = Instant::now();
    let tip = chain(&odb, 2, 10_000, Durability::NoSync);
    println!("no-sync commits, 1 writer:          {}", rate(10_000, t));

    let t = Instant::now();
    let msgs = odb.load_messages(&tip).unwrap();
    println!(
        "load 10k-message history (journal): {:>9.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let bytes: usize = msgs
        .iter()
        .map(|m| serde_json::to_vec(m).unwrap().len())
        .sum();
    odb.repack(&RepackOptions::default()).unwrap();
    let t = Instant::now();
    let again = odb.load_messages(&tip).unwrap();
    println!(
        "load 10k-message history (pack):    {:>9.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(again, msgs);
    let disk = odb.stats().unwrap().disk_bytes();
    println!(
        "bytes on disk after repack:          {disk} for {bytes} bytes of JSON messages ({:.2}x smaller)",
        bytes as f64 / disk as f64
    );
    let _ = Path::new("");

    // Through the store: a commit is its objects, an operation (ref move,
    // reflog entry, conversation record) and the index update.
    for (label, durability) in [
        ("durable", Durability::Sync),
        ("no-sync", Durability::NoSync),
    ] {
        for threads in [1usize, 16] {
            let store = Arc::new(
                Store::init(&dir.path().join(format!("store-{label}-{threads}"))).unwrap(),
            );
            let per = match (durability, threads) {
                (Durability::Sync, 1) => 300,
                (Durability::Sync, _) => 200,
                (_, 1) => 5000,
                _ => 600,
            };
            for t in 0..threads {
                store
                    .create(Some(&format!("c{t}")), Turn::default(), durability)
                    .unwrap();
            }
            let t0 = Instant::now();
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        let mut rng = Rng::new(t as u64);
                        for i in 0..per {
                            let turn = Turn {
                                messages: Messages::Added(vec![message(&mut rng, i)]),
                                ..Turn::default()
                            };
                            store
                                .commit(&format!("c{t}"), None, turn, durability)
                                .unwrap();
                        }
                    })
                })
                .collect();
            hs.into_iter().for_each(|h| h.join().unwrap());
            println!(
                "store commits, {label:>7}, {threads:>2} writer threads: {}",
                rate(per * threads, t0)
            );
        }
    }
}
