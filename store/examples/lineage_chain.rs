//! Builds a store whose conversation `long` is a chain of N sessions (one
//! message each), for timing lineage walks on deep histories.
//!
//! ```sh
//! cargo run --release -p sessctl-store --example lineage_chain -- DIR [N]   # N: 100000
//! time sessctl --store DIR log -n 20 >/dev/null
//! time sessctl --store DIR log --oneline | wc -l
//! ```
//!
//! Sessions are written in large batches with `Durability::NoSync`, then one
//! operation moves `refs/heads/long` to the tip (the index reads the chain
//! once, there). Prints how long each part took.

#![allow(clippy::unwrap_used)] // a measuring program: a panic is the report

use std::path::PathBuf;
use std::time::Instant;

use serde_json::json;
use sessctl_store::refs::{PreviousValue, RefEdit};
use sessctl_store::{
    Durability, MessageDelta, Messages, RefName, RefTarget, Session, Store, Transaction, Turn,
    WriteBatch,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().expect("usage: lineage_chain DIR [N]"));
    let n: u64 = args
        .next()
        .map_or(100_000, |a| a.parse().expect("N is a number"));
    let t0 = 1_763_000_000_000;
    let started = Instant::now();
    let store = Store::init(&dir).unwrap();
    let (_, root) = store
        .create(
            Some("long"),
            Turn {
                messages: Messages::Added(vec![json!({"role": "user", "content": "turn 0"})]),
                created_at: Some(t0),
                ..Turn::default()
            },
            Durability::NoSync,
        )
        .unwrap();
    let mut tip = root;
    let mut k = 1;
    while k < n {
        let mut batch = WriteBatch::new();
        for _ in 0..10_000.min(n - k) {
            let role = if k % 2 == 0 { "user" } else { "assistant" };
            let m = batch
                .blob(&json!({"role": role, "content": format!("turn {k}")}))
                .unwrap();
            let mut s = Session::new_root(t0 + k as i64 * 1000);
            s.parents = vec![tip];
            s.conversation = Some(root);
            s.messages = MessageDelta {
                base: k,
                added: vec![m],
            };
            s.display_messages = s.messages.clone();
            tip = batch.session(&s).unwrap();
            k += 1;
        }
        store.odb().write(&batch, Durability::NoSync).unwrap();
    }
    let written = started.elapsed();
    store
        .transact(
            Transaction {
                reason: "import".into(),
                edits: vec![RefEdit {
                    name: RefName::conversation("long").unwrap(),
                    expected: PreviousValue::MustMatch(RefTarget::Session(root)),
                    new: Some(RefTarget::Session(tip)),
                }],
                ..Transaction::default()
            },
            Durability::Sync,
        )
        .unwrap();
    println!(
        "{n} sessions in {}: written in {:.2?}, indexed in {:.2?}; tip {tip}",
        dir.display(),
        written,
        started.elapsed() - written
    );
}
