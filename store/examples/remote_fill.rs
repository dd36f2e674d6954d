//! Fills a remote store with N conversations of one two-message session
//! each, in bulk: sessions written in batches, conversations registered
//! 512 to an operation (as an import does). For measuring `ls` and commit
//! on a remote store of a given size.
//!
//! `cargo run --release -p sessctl-store --features remote --example remote_fill -- URL N`
//! (the S3 settings from the standard AWS variables; the store is
//! initialised first).

#![allow(clippy::unwrap_used)] // a measuring program: a panic is the report

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::json;
use sessctl_store::odb::{RemoteBackend, S3Settings};
use sessctl_store::refs::{
    ConversationRecord, ConversationStatus, ConversationUpdate, PreviousValue, RefEdit,
};
use sessctl_store::{
    Durability, MessageDelta, OpenOptions, RefName, RefTarget, Session, Store, Transaction,
    WriteBatch,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, n): (&str, usize) = (&args[1], args[2].parse().unwrap());
    let s3 = S3Settings::from_env();
    RemoteBackend::init(url, &s3).unwrap();
    let store = Store::open_remote_with(url, &OpenOptions::default(), &s3).unwrap();
    let t = Instant::now();
    let base_time = 1_700_000_000_000i64;
    let mut heads = Vec::with_capacity(n);
    let mut batch = WriteBatch::new();
    for i in 0..n {
        let user = batch
            .blob(&json!({"role": "user", "content": format!("question {i}")}))
            .unwrap();
        let reply = batch
            .blob(&json!({"role": "assistant", "content": format!("answer {i}")}))
            .unwrap();
        let mut s = Session::new_root(base_time + i as i64);
        s.messages = MessageDelta {
            base: 0,
            added: vec![user, reply],
        };
        s.display_messages = s.messages.clone();
        heads.push(batch.session(&s).unwrap());
        if batch.len() >= 4096 {
            store
                .odb()
                .write(&std::mem::take(&mut batch), Durability::NoSync)
                .unwrap();
        }
    }
    if !batch.is_empty() {
        store.odb().write(&batch, Durability::NoSync).unwrap();
    }
    eprintln!("objects written in {:?}", t.elapsed());
    for (c, chunk) in heads.chunks(512).enumerate() {
        let mut tx = Transaction {
            reason: "import".into(),
            ..Transaction::default()
        };
        for (j, head) in chunk.iter().enumerate() {
            let i = c * 512 + j;
            let name = format!("conv-{i:07}");
            tx.edits.push(RefEdit {
                name: RefName::conversation(&name).unwrap(),
                expected: PreviousValue::MustNotExist,
                new: Some(RefTarget::Session(*head)),
            });
            tx.conversations.push(ConversationUpdate {
                name,
                record: Some(ConversationRecord {
                    conversation_id: Some(*head),
                    title: None,
                    default_preset_id: None,
                    metadata: BTreeMap::new(),
                    status: ConversationStatus::Active,
                    created_at: base_time + i as i64,
                    updated_at: base_time + i as i64,
                }),
            });
        }
        store.transact(tx, Durability::NoSync).unwrap();
    }
    eprintln!("{n} conversations in {:?}", t.elapsed());
}
