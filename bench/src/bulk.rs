//! Building large stores fast through the library: sessions written in
//! unsynced batches with `Odb::write`, then conversations registered at
//! their heads many to an operation, as an import does. The objects are
//! the ones `Store::create` and `Store::commit` would write; what is
//! skipped is an operation (and index update) per session, which is what
//! scenario 1 measures, not what a lineage or gc measurement is about.

use std::collections::BTreeMap;

use serde_json::Value;
use sessctl_store::refs::{
    ConversationRecord, ConversationStatus, ConversationUpdate, PreviousValue, RefEdit,
};
use sessctl_store::{
    Durability, MessageDelta, ObjectId, RefName, RefTarget, Session, Store, Transaction, WriteBatch,
};

use crate::R;

/// One session to write: its parents (ids already written), creation
/// time, conversation (None: it starts its own) and the messages it adds
/// to its first parent's history of `base` messages.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    pub parents: Vec<ObjectId>,
    pub created_at: i64,
    pub conversation: Option<ObjectId>,
    pub base: u64,
    pub added: &'a [Value],
}

/// Collects sessions and blobs and writes them, unsynced, a batch at a time.
#[derive(Debug)]
pub struct Writer<'s> {
    store: &'s Store,
    batch: WriteBatch,
    pub objects: usize,
}

impl<'s> Writer<'s> {
    pub fn new(store: &'s Store) -> Self {
        Writer {
            store,
            batch: WriteBatch::new(),
            objects: 0,
        }
    }

    /// Adds one session (and its message blobs); returns its id.
    pub fn session(&mut self, spec: Spec<'_>) -> R<ObjectId> {
        let mut added = Vec::with_capacity(spec.added.len());
        for m in spec.added {
            added.push(self.batch.blob(m)?);
        }
        let mut s = Session::new_root(spec.created_at);
        s.parents = spec.parents;
        s.conversation = spec.conversation;
        s.messages = MessageDelta {
            base: spec.base,
            added,
        };
        // As `Store::commit` writes it: display messages mirror messages.
        s.display_messages = s.messages.clone();
        let id = self.batch.session(&s)?;
        self.objects += 1 + spec.added.len();
        if self.batch.len() >= 4096 {
            self.flush()?;
        }
        Ok(id)
    }

    pub fn flush(&mut self) -> R<()> {
        if !self.batch.is_empty() {
            let batch = std::mem::take(&mut self.batch);
            self.store.odb().write(&batch, Durability::NoSync)?;
        }
        Ok(())
    }
}

/// A conversation to register: its name, head session, conversation id and
/// times.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub name: String,
    pub head: ObjectId,
    pub id: ObjectId,
    pub created_at: i64,
    pub updated_at: i64,
}

/// Creates the conversations' refs and records, 512 to an operation
/// (reason `import`: their times are the records', not the clock's).
pub fn register(store: &Store, convs: &[Conversation]) -> R<()> {
    for chunk in convs.chunks(512) {
        let mut tx = Transaction {
            reason: "import".into(),
            ..Transaction::default()
        };
        for c in chunk {
            tx.edits.push(RefEdit {
                name: RefName::conversation(&c.name)?,
                expected: PreviousValue::MustNotExist,
                new: Some(RefTarget::Session(c.head)),
            });
            tx.conversations.push(ConversationUpdate {
                name: c.name.clone(),
                record: Some(ConversationRecord {
                    conversation_id: Some(c.id),
                    title: None,
                    default_preset_id: None,
                    metadata: BTreeMap::new(),
                    status: ConversationStatus::Active,
                    created_at: c.created_at,
                    updated_at: c.updated_at,
                }),
            });
        }
        store.transact(tx, Durability::NoSync)?;
    }
    Ok(())
}
