//! Times lineage walks before and after the lineage index is written, on a
//! chain of N sessions (default 100000) and a forest of M sessions (default
//! 200000: conversations of 100 with forks and merges).
//!
//! ```sh
//! cargo run --release -p sessctl-store --example lineage_walks -- DIR [N] [M]
//! ```
//!
//! "before" is the store without `lineage/graph.lgi` (the derived index,
//! then the objects); "after" is with it. Prints one line per walk.

#![allow(clippy::unwrap_used)] // a measuring program: a panic is the report

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sessctl_store::graph::{self, Follow};
use sessctl_store::refs::{PreviousValue, RefEdit};
use sessctl_store::{
    Durability, ObjectId, RefName, RefTarget, Session, Store, Transaction, WriteBatch,
};

fn tag(store: &Store, name: &str, id: ObjectId) {
    store
        .transact(
            Transaction {
                reason: "import".into(),
                edits: vec![RefEdit {
                    name: RefName::tag(name).unwrap(),
                    expected: PreviousValue::MustNotExist,
                    new: Some(RefTarget::Session(id)),
                }],
                ..Transaction::default()
            },
            Durability::NoSync,
        )
        .unwrap();
}

/// A chain; returns (root, middle, tip).
fn chain(dir: &Path, n: usize) -> (ObjectId, ObjectId, ObjectId) {
    let store = Store::init(dir).unwrap();
    let mut ids: Vec<ObjectId> = Vec::with_capacity(n);
    let mut batch = WriteBatch::new();
    for k in 0..n {
        let mut s = Session::new_root(1_763_000_000_000 + k as i64);
        if let Some(p) = ids.last() {
            s.parents = vec![*p];
            s.conversation = Some(ids[0]);
        }
        ids.push(batch.session(&s).unwrap());
        if batch.len() == 10_000 {
            store.odb().write(&batch, Durability::NoSync).unwrap();
            batch = WriteBatch::new();
        }
    }
    store.odb().write(&batch, Durability::NoSync).unwrap();
    tag(&store, "tip", ids[n - 1]);
    (ids[0], ids[n / 2], ids[n - 1])
}

/// Conversations of 100 sessions, each forking from a random session of an
/// earlier one, with a merge of two tips every 10 conversations; returns
/// two tips far apart and the last tip.
fn forest(dir: &Path, m: usize) -> (ObjectId, ObjectId, ObjectId) {
    let store = Store::init(dir).unwrap();
    let mut ids: Vec<ObjectId> = Vec::with_capacity(m);
    let mut tips: Vec<ObjectId> = Vec::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut batch = WriteBatch::new();
    while ids.len() < m {
        let c = tips.len();
        let mut prev = if ids.is_empty() || next() % 5 == 0 {
            None
        } else {
            Some(ids[(next() % ids.len() as u64) as usize])
        };
        for k in 0..100 {
            let mut s = Session::new_root(1_763_000_000_000 + (ids.len() as i64) * 7 % 1_000_003);
            s.parents.extend(prev);
            if k == 99 && c % 10 == 9 {
                s.parents.push(tips[(next() % c as u64) as usize]);
            }
            let id = batch.session(&s).unwrap();
            ids.push(id);
            prev = Some(id);
        }
        tips.extend(prev);
        if batch.len() >= 10_000 {
            store.odb().write(&batch, Durability::NoSync).unwrap();
            batch = WriteBatch::new();
        }
    }
    store.odb().write(&batch, Durability::NoSync).unwrap();
    for (k, t) in tips.iter().enumerate().step_by(50) {
        tag(&store, &format!("t{k}"), *t);
    }
    (
        tips[tips.len() / 3],
        tips[tips.len() - 2],
        tips[tips.len() - 1],
    )
}

fn time<T>(f: impl Fn() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = f();
    for _ in 0..3 {
        let t = Instant::now();
        out = f();
        best = best.min(t.elapsed());
    }
    (best, out)
}

fn measure(what: &str, store: &Store, (a, b, tip): (ObjectId, ObjectId, ObjectId)) {
    let (t, n) = time(|| graph::count(store, &[tip], Follow::All).unwrap());
    println!("  {what:6} count              {t:>10.2?}  ({n} sessions)");
    let (t, n) = time(|| {
        graph::log_order(store, &[tip], Follow::All, None)
            .unwrap()
            .len()
    });
    println!("  {what:6} log order (all)    {t:>10.2?}  ({n} sessions)");
    let (t, n) = time(|| {
        graph::log_order(store, &[tip], Follow::All, Some(20))
            .unwrap()
            .len()
    });
    println!("  {what:6} log -n 20          {t:>10.2?}  ({n} sessions)");
    let (t, r) = time(|| graph::is_ancestor(store, a, tip).unwrap());
    println!("  {what:6} is-ancestor a tip  {t:>10.2?}  ({r})");
    let (t, r) = time(|| graph::is_ancestor(store, tip, a).unwrap());
    println!("  {what:6} is-ancestor tip a  {t:>10.2?}  ({r})");
    let (t, r) = time(|| graph::merge_bases_all(store, b, tip).unwrap());
    println!(
        "  {what:6} merge-base b tip   {t:>10.2?}  ({} bases)",
        r.len()
    );
    let (t, r) = time(|| graph::merge_bases_all(store, a, b).unwrap());
    println!(
        "  {what:6} merge-base a b     {t:>10.2?}  ({} bases)",
        r.len()
    );
}

fn run(name: &str, dir: PathBuf, build: impl Fn(&Path) -> (ObjectId, ObjectId, ObjectId)) {
    let t = Instant::now();
    let ends = build(&dir);
    println!("{name}: built in {:.2?}", t.elapsed());
    let opts = sessctl_store::OpenOptions::default();
    let store = Store::open(&dir, &opts).unwrap();
    measure("before", &store, ends);
    let t = Instant::now();
    let stats = store.refresh_lineage().unwrap().unwrap();
    println!(
        "{name}: lineage index of {} sessions written in {:.2?}",
        stats.sessions,
        t.elapsed()
    );
    let t = Instant::now();
    let again = store.refresh_lineage().unwrap().unwrap();
    println!(
        "{name}: incremental rewrite ({} reused, {} decoded) in {:.2?}",
        again.reused,
        again.decoded,
        t.elapsed()
    );
    drop(store);
    let store = Store::open(&dir, &opts).unwrap();
    let t = Instant::now();
    let ix = store.lineage_index().unwrap();
    println!("{name}: opened and checked in {:.2?}", t.elapsed());
    drop(ix);
    measure("after", &store, ends);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: lineage_walks DIR [N] [M]"));
    let n: usize = args.next().map_or(100_000, |a| a.parse().unwrap());
    let m: usize = args.next().map_or(200_000, |a| a.parse().unwrap());
    run("chain", dir.join("chain"), |d| chain(d, n));
    run("forest", dir.join("forest"), |d| forest(d, m));
}
