//! Where loading a long history spends its time: the harness's scenario 2
//! (10,000 generated messages, 4 a turn, packed), timed whole and by part
//! (reading and verifying, inflating, decoding), against parsing the same
//! history from a JSONL file with serde_json.
//!
//! `cargo run --release -p sessctl-store --example load_history [N] [RUNS]`
//! Prints the fastest and the median of RUNS runs of each, in ms: the
//! machine may be shared, and the fastest run is the one least disturbed.
//! For `perf record`, set `ONLY=<part>` to run one part only.

#![allow(clippy::unwrap_used)] // a measuring program: a panic is the report

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use serde_json::Value;
use sessctl_store::{Durability, Messages, RepackOptions, Store, Turn};
use support::{message, Rng};

/// CPU time of the whole process so far (all threads), in ms: on a shared
/// machine, what a run costs is steadier than how long it takes.
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |k: usize| f.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime, fields 14 and 15 of the line (11 and 12 here), at 100 Hz.
    (ticks(11) + ticks(12)) * 10.0
}

/// Runs `f` on each item, keeping what it returns from being optimized
/// away; returns how many.
fn each<T, R>(items: &[T], f: impl Fn(&T) -> R) -> usize {
    for item in items {
        std::hint::black_box(f(item));
    }
    items.len()
}

fn time(name: &str, runs: usize, f: &mut dyn FnMut() -> usize, want: usize) {
    if std::env::var("ONLY").is_ok_and(|o| o != name) {
        return;
    }
    let cpu = cpu_ms();
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let n = std::hint::black_box(f());
        v.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(n, want, "{name}");
    }
    let cpu = (cpu_ms() - cpu) / runs as f64;
    v.sort_by(f64::total_cmp);
    println!(
        "{name:<28} min {:>8.2} ms   median {:>8.2} ms   cpu {cpu:>8.2} ms",
        v[0],
        v[runs / 2]
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(10_000, |a| a.parse().unwrap());
    let runs: usize = args.next().map_or(30, |a| a.parse().unwrap());
    let mut rng = Rng::new(2);
    let msgs: Vec<Value> = (0..n).map(|i| message(&mut rng, i)).collect();

    let tmp = tempfile::tempdir().unwrap();
    let store = Store::init(&tmp.path().join("s")).unwrap();
    let turn = |m: &[Value]| Turn {
        messages: Messages::Added(m.to_vec()),
        ..Turn::default()
    };
    let mut chunks = msgs.chunks(4);
    let (_, mut head) = store
        .create(Some("c"), turn(chunks.next().unwrap()), Durability::NoSync)
        .unwrap();
    for ch in chunks {
        head = store
            .commit("c", None, turn(ch), Durability::NoSync)
            .unwrap();
    }
    store.repack(&RepackOptions::default()).unwrap();
    let jsonl = tmp.path().join("s.jsonl");
    let mut text = String::new();
    for m in &msgs {
        text.push_str(&serde_json::to_string(m).unwrap());
        text.push('\n');
    }
    std::fs::write(&jsonl, &text).unwrap();
    println!(
        "{n} messages, {} bytes of JSONL, store {:?}",
        text.len(),
        store.odb().stats().unwrap()
    );
    let odb = store.odb();
    assert_eq!(odb.load_messages(&head).unwrap(), msgs);

    time(
        "jsonl (serde_json)",
        runs,
        &mut || {
            let text = std::fs::read_to_string(&jsonl).unwrap();
            let mut out: Vec<Value> = Vec::new();
            for line in text.lines() {
                out.push(serde_json::from_str(line).unwrap());
            }
            out.len()
        },
        n,
    );
    time(
        "load_messages",
        runs,
        &mut || odb.load_messages(&head).unwrap().len(),
        n,
    );
    time(
        "load_message_bytes",
        runs,
        &mut || odb.load_message_bytes(&head).unwrap().len(),
        n,
    );
    time(
        "bytes -> jsonl text",
        runs,
        &mut || {
            let b = odb.load_message_bytes(&head).unwrap();
            b.to_jsonl().unwrap();
            b.len()
        },
        n,
    );
    time(
        "history (ids)",
        runs,
        &mut || odb.history(&head).unwrap().len(),
        n,
    );
    time(
        "history + blob() each",
        runs,
        &mut || {
            let ids = odb.history(&head).unwrap();
            let v: Vec<Value> = ids.iter().map(|id| odb.blob(id).unwrap()).collect();
            v.len()
        },
        n,
    );
    let ids = odb.history(&head).unwrap();
    time(
        "read each (verified)",
        runs,
        &mut || each(&ids, |id| odb.read(id).unwrap()),
        n,
    );
    let objs: Vec<_> = ids.iter().map(|id| odb.read(id).unwrap()).collect();
    time(
        "blake3 only",
        runs,
        &mut || each(&objs, |o| sessctl_store::object_id(o.kind(), o.payload())),
        n,
    );
    let all: Vec<u8> = objs.iter().flat_map(|o| o.payload().to_vec()).collect();
    time(
        "blake3 of all as one input",
        runs,
        &mut || {
            std::hint::black_box(blake3::hash(&all));
            n
        },
        n,
    );
    time(
        "decode only (cbor->Value)",
        runs,
        &mut || each(&objs, |o| sessctl_store::Blob::decode(o.payload()).unwrap()),
        n,
    );
    let payload: usize = objs.iter().map(|o| o.payload().len()).sum();
    println!("{payload} bytes of canonical CBOR");
}
