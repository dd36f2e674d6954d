//! Large fields of conversation records kept as blobs
//! (`refs::large_fields`): what an import writes, what gc keeps, what fsck
//! checks.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;

use serde_json::{json, Value};
use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::{GcOptions, Prune};
use sessctl_store::import::{import_sources, Format, ImportOptions, ImportReport, SourceFile};
use sessctl_store::refs::large_fields::{blob_ref, inline, metadata_blobs, LARGE_FIELD_BYTES};
use sessctl_store::refs::{ConversationRecord, ConversationStatus, ConversationUpdate};
use sessctl_store::{Durability, ObjectId, Store, Transaction};

/// A two-line Codex rollout whose `session_meta` has a big system prompt.
fn rollout(prompt: &str) -> SourceFile {
    let meta = json!({"timestamp": "2026-01-01T00:00:00Z", "type": "session_meta",
                      "payload": {"id": "019e0000-aaaa", "cwd": "/w", "base_instructions": {"text": prompt}}});
    let user = json!({"timestamp": "2026-01-01T00:00:01Z", "type": "response_item",
                      "payload": {"type": "message", "role": "user",
                                  "content": [{"type": "input_text", "text": "hi"}]}});
    SourceFile {
        path: "rollout-1.jsonl".into(),
        text: format!("{meta}\n{user}\n"),
    }
}

fn fsck_problems(store: &Store) -> Vec<String> {
    store
        .fsck(&FsckOptions { full: false }, &mut |_, _| {})
        .unwrap()
        .problems
}

#[test]
fn a_large_source_field_is_a_blob_gc_keeps_and_fsck_checks() {
    let store = Store::in_memory().unwrap();
    let prompt = "p".repeat(LARGE_FIELD_BYTES * 2);
    import_sources(
        &store,
        Format::Codex,
        &[rollout(&prompt)],
        &ImportOptions {
            // The rollout is whole: its one turn too.
            finished: true,
            ..ImportOptions::default()
        },
        ImportReport::default(),
    )
    .unwrap();
    let c = store.conversations(None).unwrap().remove(0);
    let reference = &c.record.metadata["session_meta"]["base_instructions"];
    let id = blob_ref(reference).unwrap();
    assert_eq!(metadata_blobs(&c.record.metadata), vec![id]);
    assert_eq!(c.record.metadata["session_meta"]["cwd"], "/w");
    assert_eq!(store.odb().blob(&id).unwrap(), json!({"text": prompt}));
    let mut whole = c.record.metadata.clone();
    inline(&mut whole, &mut |i| store.odb().blob(i).ok());
    assert_eq!(
        whole["session_meta"]["base_instructions"]["text"],
        json!(prompt)
    );
    // gc keeps it, with nothing else naming it.
    store
        .gc(&GcOptions {
            prune: Prune::Now,
            ..GcOptions::default()
        })
        .unwrap();
    assert!(store.odb().contains(&id).unwrap());
    assert!(fsck_problems(&store).is_empty());

    // A record naming a blob the store lacks is refused under the write
    // lock (gc may have pruned it since the writer looked: the writer tries
    // again with it), and the store stays clean.
    let missing = ObjectId::from_bytes([7; 32]);
    let mut metadata: BTreeMap<String, Value> = BTreeMap::new();
    metadata.insert(
        "system".into(),
        json!({"sessctl_blob": missing.to_hex(), "bytes": 9000}),
    );
    let r = store.transact(
        Transaction {
            reason: "test".into(),
            conversations: vec![ConversationUpdate {
                name: c.name.clone(),
                record: Some(ConversationRecord {
                    metadata,
                    status: ConversationStatus::Active,
                    ..c.record.clone()
                }),
            }],
            ..Transaction::default()
        },
        Durability::NoSync,
    );
    assert!(
        matches!(
            r,
            Err(sessctl_store::Error::MissingRecordBlob { ref conversation, named })
                if *conversation == c.name && named == missing
        ),
        "{r:?}"
    );
    assert!(fsck_problems(&store).is_empty());
    assert_eq!(
        store.conversations(None).unwrap().remove(0).record,
        c.record
    );
}
