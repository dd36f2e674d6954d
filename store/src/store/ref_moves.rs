//! Moves of refs a person asks for by name: tags (`tag`), renaming a
//! conversation (`rename`) and setting it to another session (`reset`).
//! Each is one transaction with compare-and-swap edits, recorded in the ref
//! log with its reason; none writes an object.

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::odb::Durability;
use crate::refs::{
    validate_name, ConversationStatus, ConversationUpdate, PreviousValue, RefEdit, RefName,
    RefTarget,
};
use crate::time::now_ms;

use super::{Store, Transaction};

/// How often a rename retries when `HEAD` moved between its read and its
/// write (another process checking out meanwhile).
const HEAD_RETRIES: usize = 8;

impl Store {
    /// Every tag and the session it names, by name.
    pub fn tags(&self) -> Result<Vec<(String, ObjectId)>> {
        Ok(self
            .refs_with_prefix("refs/tags/")?
            .into_iter()
            .filter_map(|(r, t)| match (r, t) {
                (RefName::Tag(n), RefTarget::Session(id)) => Some((n, id)),
                _ => None,
            })
            .collect())
    }

    /// Points `refs/tags/<name>` at `target`. A tag that exists is
    /// [`Error::TagExists`] unless `force`, which moves it (as `git tag -f`).
    /// Returns the session it named before, if any.
    pub fn tag(
        &self,
        name: &str,
        target: ObjectId,
        force: bool,
        durability: Durability,
    ) -> Result<Option<ObjectId>> {
        let tag = RefName::tag(name)?;
        let (expected, old) = match self.get_ref(&tag)? {
            None => (PreviousValue::MustNotExist, None),
            Some(_) if !force => {
                return Err(Error::TagExists {
                    name: name.to_owned(),
                })
            }
            Some(t) => {
                let old = match &t {
                    RefTarget::Session(id) => Some(*id),
                    RefTarget::Symbolic(_) => None,
                };
                (PreviousValue::MustMatch(t), old)
            }
        };
        self.transact(
            Transaction {
                reason: "tag".into(),
                edits: vec![RefEdit {
                    name: tag,
                    expected,
                    new: Some(RefTarget::Session(target)),
                }],
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(old)
    }

    /// Deletes `refs/tags/<name>`; returns the session it named.
    pub fn delete_tag(&self, name: &str, durability: Durability) -> Result<ObjectId> {
        let tag = RefName::tag(name)?;
        let Some(RefTarget::Session(id)) = self.get_ref(&tag)? else {
            return Err(Error::NoSuchTag {
                name: name.to_owned(),
            });
        };
        self.transact(
            Transaction {
                reason: "tag".into(),
                edits: vec![RefEdit {
                    name: tag,
                    expected: PreviousValue::MustMatch(RefTarget::Session(id)),
                    new: None,
                }],
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(id)
    }

    /// Renames a conversation, live or archived: its ref moves to the new
    /// name (both moves in the ref log, reason `rename`), its record goes
    /// with it, and `HEAD` follows when it named the old one. A
    /// conversation (or a ref) of the new name is [`Error::ConversationExists`].
    pub fn rename(&self, old: &str, new: &str, durability: Durability) -> Result<()> {
        validate_name(new)?;
        let mut head_tries = 0;
        loop {
            match self.rename_once(old, new, durability) {
                // The record changed between its read and the write (an
                // import, a metadata write): made again on the current one.
                Err(Error::RecordOutOfDate { .. }) => {}
                // HEAD is compared and set in the same transaction: if it
                // moves meanwhile the rename is tried again, never left
                // half-followed.
                Err(Error::RefOutOfDate { name, .. })
                    if name == RefName::Head && head_tries < HEAD_RETRIES =>
                {
                    head_tries += 1;
                }
                r => return r,
            }
        }
    }

    fn rename_once(&self, old: &str, new: &str, durability: Durability) -> Result<()> {
        let info = self.require_conversation(old)?;
        if old == new || self.conversation(new)?.is_some() {
            return Err(Error::ConversationExists {
                name: new.to_owned(),
            });
        }
        let archived = info.record.status == ConversationStatus::Archived;
        let (from, to, other) = if archived {
            (
                RefName::archived(old)?,
                RefName::archived(new)?,
                RefName::conversation(new)?,
            )
        } else {
            (
                RefName::conversation(old)?,
                RefName::conversation(new)?,
                RefName::archived(new)?,
            )
        };
        let Some(RefTarget::Session(head)) = self.get_ref(&from)? else {
            return Err(Error::NoSuchConversation {
                name: old.to_owned(),
            });
        };
        // A rename is no activity: `updated_at` (what `ls --since` and the
        // order of `ls` read) stays as it was.
        let record = info.record.clone();
        let current = self.get_ref(&RefName::Head)?;
        let follows = current == Some(RefTarget::Symbolic(from.clone()));
        let head_edit = RefEdit {
            name: RefName::Head,
            expected: match &current {
                Some(t) => PreviousValue::MustMatch(t.clone()),
                None => PreviousValue::MustNotExist,
            },
            new: if follows {
                Some(RefTarget::Symbolic(to.clone()))
            } else {
                current.clone()
            },
        };
        let tx = Transaction {
            reason: "rename".into(),
            edits: vec![
                RefEdit {
                    name: from,
                    expected: PreviousValue::MustMatch(RefTarget::Session(head)),
                    new: None,
                },
                RefEdit {
                    name: other,
                    expected: PreviousValue::MustNotExist,
                    new: None,
                },
                RefEdit {
                    name: to,
                    expected: PreviousValue::MustNotExist,
                    new: Some(RefTarget::Session(head)),
                },
                head_edit,
            ],
            // The new name first: the index carries the old one's
            // figures over before the old record goes (index/apply.rs).
            conversations: vec![
                ConversationUpdate {
                    name: new.to_owned(),
                    record: Some(record),
                },
                ConversationUpdate {
                    name: old.to_owned(),
                    record: None,
                },
            ],
            require_unclaimed: vec![old.to_owned()],
            expect_records: vec![(old.to_owned(), Some(info.record)), (new.to_owned(), None)],
            ..Transaction::default()
        };
        self.transact(tx, durability).map(|_| ())
    }

    /// Sets a live conversation's head to `target` (any session), recorded
    /// in the ref log with reason `reset`, as `git reset --soft` moves a
    /// branch. Returns the head it had.
    pub fn reset(&self, name: &str, target: ObjectId, durability: Durability) -> Result<ObjectId> {
        loop {
            match self.reset_once(name, target, durability) {
                // The record changed between its read and the write: made
                // again on the current one, never written back stale.
                Err(Error::RecordOutOfDate { .. }) => {}
                r => return r,
            }
        }
    }

    fn reset_once(&self, name: &str, target: ObjectId, durability: Durability) -> Result<ObjectId> {
        let info = self.require_conversation(name)?;
        if info.record.status == ConversationStatus::Archived {
            return Err(Error::ConversationArchived {
                name: name.to_owned(),
            });
        }
        let conv = RefName::conversation(name)?;
        let Some(RefTarget::Session(head)) = self.get_ref(&conv)? else {
            return Err(Error::NoHeadYet {
                name: name.to_owned(),
            });
        };
        let mut record = info.record.clone();
        record.updated_at = now_ms().max(record.updated_at);
        self.transact(
            Transaction {
                reason: "reset".into(),
                edits: vec![RefEdit {
                    name: conv,
                    expected: PreviousValue::MustMatch(RefTarget::Session(head)),
                    new: Some(RefTarget::Session(target)),
                }],
                conversations: vec![ConversationUpdate {
                    name: name.to_owned(),
                    record: Some(record),
                }],
                require_unclaimed: vec![name.to_owned()],
                expect_records: vec![(name.to_owned(), Some(info.record))],
                ..Transaction::default()
            },
            durability,
        )?;
        Ok(head)
    }
}
