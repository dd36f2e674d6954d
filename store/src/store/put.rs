//! Sessions written under any parent, with the refs that follow them moved
//! in the same transaction: what checkpointers and session adapters build
//! on (a LangGraph checkpoint is a session whose parent is its parent
//! checkpoint's, whatever the conversation's head is).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::odb::Durability;
use crate::refs::{
    validate_name, ConversationRecord, ConversationStatus, ConversationUpdate, PreviousValue,
    RefEdit, RefName, RefTarget,
};

use super::{Store, Transaction, Turn};
use crate::store::Messages;

/// What a ref must hold for a write to go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expect {
    /// Whatever it holds, or nothing.
    #[default]
    Any,
    /// It must not exist.
    Missing,
    /// It must hold this session.
    Is(ObjectId),
}

impl Expect {
    fn previous(self) -> PreviousValue {
        match self {
            Expect::Any => PreviousValue::Any,
            Expect::Missing => PreviousValue::MustNotExist,
            Expect::Is(id) => PreviousValue::MustMatch(RefTarget::Session(id)),
        }
    }
}

/// The conversation a [`Put`] moves to its session.
#[derive(Debug, Clone, Default)]
pub struct PutConversation {
    pub name: String,
    /// What its head must be; [`Expect::Missing`] creates it, and so does
    /// [`Expect::Any`] when it does not exist.
    pub expected: Expect,
    /// The record's metadata when the put creates the conversation.
    pub metadata: BTreeMap<String, Value>,
}

/// One session under any parent, and the refs moved to it.
#[derive(Debug, Clone, Default)]
pub struct Put {
    /// Recorded in the ref log.
    pub reason: String,
    pub parent: Option<ObjectId>,
    /// Keep the first `keep` of the parent's messages (default: all), then
    /// add `turn.messages`, which must be [`Messages::Added`].
    pub keep: Option<u64>,
    pub turn: Turn,
    pub conversation: Option<PutConversation>,
    /// Tags (`refs/tags/NAME`) pointed at the session, each with what it
    /// must hold now.
    pub tags: Vec<(String, Expect)>,
}

impl Store {
    /// Writes `put`'s session and moves its refs to it in one transaction
    /// (all or nothing; a lost compare-and-swap is `RefOutOfDate`). `HEAD`
    /// does not move.
    pub fn put(&self, put: Put, durability: Durability) -> Result<ObjectId> {
        if !matches!(put.turn.messages, Messages::Added(_)) {
            return Err(Error::Invalid(
                "a put adds messages after the ones it keeps; it takes no whole history".into(),
            ));
        }
        for (t, _) in &put.tags {
            validate_name(t)?;
        }
        self.catch_up()?;
        let cut = match (put.parent, put.keep) {
            (None, Some(k)) if k > 0 => {
                return Err(Error::Invalid(format!(
                    "keep={k} without a parent: a root session keeps nothing"
                )))
            }
            (Some(p), Some(k)) => {
                let len = self.odb.session(&p)?.messages.len();
                if k > len {
                    return Err(Error::Invalid(format!(
                        "keep={k}, but session {} has {len} messages",
                        p.to_hex_prefix(12)
                    )));
                }
                Some((k, k))
            }
            _ => None,
        };
        let mut edits = Vec::new();
        let mut conversations = Vec::new();
        let mut require_unclaimed = Vec::new();
        let mut expect_records = Vec::new();
        let mut existing = None;
        if let Some(c) = &put.conversation {
            validate_name(&c.name)?;
            existing = self.index.conversation(&c.name)?;
            #[cfg(test)]
            super::conversation::tests::after_record_read();
            if let Some(info) = &existing {
                if info.record.status == ConversationStatus::Archived {
                    return Err(Error::ConversationArchived {
                        name: c.name.clone(),
                    });
                }
            }
        }
        let conversation_id = existing.as_ref().and_then(|i| i.record.conversation_id);
        let title = put.turn.title.clone();
        let built = self.build_session(put.parent, conversation_id, put.turn, &[], cut, None)?;
        let id = built.id;
        if let Some(c) = put.conversation {
            let conv_ref = RefName::conversation(&c.name)?;
            match existing {
                Some(info) => {
                    expect_records.push((c.name.clone(), Some(info.record.clone())));
                    let mut record = info.record;
                    if record.conversation_id.is_none() {
                        record.conversation_id = Some(id);
                    }
                    if let Some(t) = title {
                        record.title = Some(t);
                    }
                    record.updated_at = built.session.created_at.max(record.updated_at);
                    edits.push(RefEdit {
                        name: conv_ref,
                        expected: match c.expected {
                            // The head read above: a write that moved it
                            // since loses, as with any compare-and-swap.
                            Expect::Any => match info.head {
                                Some(h) => Expect::Is(h).previous(),
                                None => PreviousValue::MustExist,
                            },
                            e => e.previous(),
                        },
                        new: Some(RefTarget::Session(id)),
                    });
                    conversations.push(ConversationUpdate {
                        name: c.name.clone(),
                        record: Some(record),
                    });
                }
                None => {
                    if let Expect::Is(_) = c.expected {
                        return Err(Error::NoSuchConversation { name: c.name });
                    }
                    let created_at = built.session.created_at;
                    edits.push(RefEdit {
                        name: conv_ref,
                        expected: PreviousValue::MustNotExist,
                        new: Some(RefTarget::Session(id)),
                    });
                    edits.push(RefEdit {
                        name: RefName::archived(&c.name)?,
                        expected: PreviousValue::MustNotExist,
                        new: None,
                    });
                    conversations.push(ConversationUpdate {
                        name: c.name.clone(),
                        record: Some(ConversationRecord {
                            conversation_id: Some(built.session.conversation_id(id)),
                            title,
                            default_preset_id: built.session.metadata.preset_id.clone(),
                            metadata: c.metadata,
                            status: ConversationStatus::Active,
                            created_at,
                            updated_at: created_at,
                        }),
                    });
                }
            }
            require_unclaimed.push(c.name);
        }
        for (t, expected) in put.tags {
            edits.push(RefEdit {
                name: RefName::tag(&t)?,
                expected: expected.previous(),
                new: Some(RefTarget::Session(id)),
            });
        }
        let mut tx = Transaction {
            reason: put.reason,
            edits,
            conversations,
            objects: built.objects,
            require_unclaimed,
            expect_records,
            ..Transaction::default()
        };
        let decoded = [(id, built.session)];
        loop {
            match self.transact_decoded(tx.clone(), &decoded, durability) {
                // Another process replaced the record read above: the
                // change is made again on the current one (the head's
                // compare-and-swap still guards the rest).
                Err(Error::RecordOutOfDate { name }) => {
                    let current = self
                        .index
                        .current_record(&name)?
                        .ok_or_else(|| Error::NoSuchConversation { name: name.clone() })?;
                    for cu in tx.conversations.iter_mut().filter(|c| c.name == name) {
                        let mut record = current.clone();
                        if let Some(mine) = &cu.record {
                            record.conversation_id =
                                record.conversation_id.or(mine.conversation_id);
                            if decoded[0].1.title.is_some() {
                                record.title.clone_from(&mine.title);
                            }
                            record.updated_at = record.updated_at.max(mine.updated_at);
                        }
                        cu.record = Some(record);
                    }
                    tx.expect_records = vec![(name, Some(current))];
                }
                r => return r.map(|_| id),
            }
        }
    }

    /// Every ref whose full name starts with `prefix` (`refs/tags/lg.`),
    /// sorted by name, without reading the others.
    pub fn refs_with_prefix(&self, prefix: &str) -> Result<Vec<(RefName, RefTarget)>> {
        self.catch_up()?;
        self.index.refs_with_prefix(prefix)
    }

    /// Sets (or, with `None`, removes) keys of a conversation record's
    /// metadata.
    pub fn set_conversation_metadata(
        &self,
        name: &str,
        changes: BTreeMap<String, Option<Value>>,
        durability: Durability,
    ) -> Result<()> {
        // Made again on the current record if another process replaced
        // the one read meanwhile (`RecordOutOfDate`).
        loop {
            match self.set_metadata_once(name, &changes, durability) {
                Err(Error::RecordOutOfDate { .. }) => continue,
                r => return r,
            }
        }
    }

    fn set_metadata_once(
        &self,
        name: &str,
        changes: &BTreeMap<String, Option<Value>>,
        durability: Durability,
    ) -> Result<()> {
        let info = self.require_conversation(name)?;
        let read = info.record.clone();
        let mut record = info.record;
        for (k, v) in changes {
            match v {
                Some(v) => record.metadata.insert(k.clone(), v.clone()),
                None => record.metadata.remove(k),
            };
        }
        let conv_ref = match record.status {
            ConversationStatus::Active => RefName::conversation(name)?,
            ConversationStatus::Archived => RefName::archived(name)?,
        };
        let expected = match info.head {
            Some(h) => PreviousValue::MustMatch(RefTarget::Session(h)),
            None => PreviousValue::MustExist,
        };
        self.transact(
            Transaction {
                reason: "metadata".into(),
                // The record changes with the ref it describes: a
                // conversation removed meanwhile is not brought back.
                edits: vec![RefEdit {
                    name: conv_ref,
                    expected,
                    new: info.head.map(RefTarget::Session),
                }],
                conversations: vec![ConversationUpdate {
                    name: name.to_owned(),
                    record: Some(record),
                }],
                expect_records: vec![(name.to_owned(), Some(read))],
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(())
    }
}
