//! Refs and the operations that move them.
//!
//! A ref names a session (`refs/heads/<conversation>`, `refs/archive/...`,
//! `refs/tags/...`) or, for `HEAD`, another ref. Refs change only through
//! operations ([`op::Operation`]): journaled, atomic across several refs,
//! checked against an expected previous value, and recorded in each ref's
//! hash-chained log.

pub mod name;
pub mod op;

pub use name::{validate_name, NameError, RefName, MAX_NAME_LEN};
pub use op::{
    ConversationRecord, ConversationStatus, ConversationUpdate, Hash, Operation, RefTarget,
    RefUpdate, ReflogEntry, RunEvent, RunEventKind,
};

/// What a ref must hold for an edit to apply (a compare-and-swap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreviousValue {
    /// Whatever it holds, or nothing.
    Any,
    /// The ref must not exist (create-only).
    MustNotExist,
    /// The ref must exist.
    MustExist,
    /// The ref must hold exactly this.
    MustMatch(RefTarget),
}

/// One ref change requested in a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefEdit {
    pub name: RefName,
    pub expected: PreviousValue,
    /// `None` deletes the ref.
    pub new: Option<RefTarget>,
}
