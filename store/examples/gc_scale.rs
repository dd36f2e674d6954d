//! gc and fsck on about a million objects.
//!
//! `cargo run --release -p sessctl-store --example gc_scale [CONVERSATIONS] [TURNS] [DIR]`
//! (default 1000 x 500: 500k sessions and 500k messages). Prints timings.

#![allow(clippy::unwrap_used)] // a measuring program: a panic is the report

use std::time::Instant;

use serde_json::json;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::{GcOptions, Prune};
use sessctl_store::refs::{
    ConversationRecord, ConversationStatus, ConversationUpdate, PreviousValue, RefEdit,
};
use sessctl_store::{
    Durability, MessageDelta, RefName, RefTarget, Session, Store, Transaction, WriteBatch,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let convs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let turns: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(500);
    let base = args
        .get(3)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(base).unwrap();
    let store = Store::init(&dir.path().join("store")).unwrap();
    let t = Instant::now();
    let mut tx = Transaction {
        reason: "import".into(),
        ..Transaction::default()
    };
    for c in 0..convs {
        let mut parent = None;
        let mut root = None;
        let mut b = WriteBatch::new();
        for i in 0..turns {
            let m = b
                .blob(&json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("conversation {c} turn {i}: let me check the parser for the empty-input case")}))
                .unwrap();
            let mut s = Session::new_root(1_763_000_000_000 + (c * turns + i) as i64);
            if let Some(p) = parent {
                s.parents = vec![p];
                s.conversation = root;
            }
            s.messages = MessageDelta {
                base: i as u64,
                added: vec![m],
            };
            s.display_messages = s.messages.clone();
            let id = b.session(&s).unwrap();
            root.get_or_insert(id);
            parent = Some(id);
        }
        store.odb().write(&b, Durability::NoSync).unwrap();
        let name = format!("c{c}");
        tx.edits.push(RefEdit {
            name: RefName::conversation(&name).unwrap(),
            expected: PreviousValue::MustNotExist,
            new: Some(RefTarget::Session(parent.unwrap())),
        });
        tx.conversations.push(ConversationUpdate {
            name,
            record: Some(ConversationRecord {
                conversation_id: root,
                title: None,
                default_preset_id: None,
                metadata: Default::default(),
                status: ConversationStatus::Active,
                created_at: 0,
                updated_at: 0,
            }),
        });
    }
    store.transact(tx, Durability::Sync).unwrap();
    println!(
        "wrote {} objects in {:.1} s",
        2 * convs * turns,
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    store.odb().repack(&Default::default()).unwrap();
    println!(
        "repack: {:.1} s, {} bytes",
        t.elapsed().as_secs_f64(),
        store.odb().stats().unwrap().disk_bytes()
    );
    let t = Instant::now();
    let r = store
        .gc(&GcOptions {
            prune: Prune::Now,
            ..GcOptions::default()
        })
        .unwrap();
    println!(
        "gc --prune=now: {:.1} s ({} objects, {} reachable, {} pruned)",
        t.elapsed().as_secs_f64(),
        r.objects,
        r.reachable,
        r.pruned
    );
    let t = Instant::now();
    let r = store
        .fsck(&FsckOptions { full: true }, &mut |_, _| {})
        .unwrap();
    println!(
        "fsck --full: {:.1} s ({} objects, clean: {})",
        t.elapsed().as_secs_f64(),
        r.objects,
        r.is_clean()
    );
}
