//! Refs and the operations that move them.
//!
//! A ref names a session (`refs/heads/<conversation>`, `refs/archive/...`,
//! `refs/tags/...`) or, for `HEAD`, another ref. Refs change only through
//! operations ([`op::Operation`]): journaled, atomic across several refs,
//! checked against an expected previous value, and recorded in each ref's
//! hash-chained log.

pub mod large_fields;
pub mod name;
pub mod op;

pub use name::{validate_name, NameError, RefName, MAX_NAME_LEN};
pub use op::{
    ConversationRecord, ConversationStatus, ConversationUpdate, Hash, Operation, RefTarget,
    RefUpdate, ReflogEntry, ReflogExpiry, RunEvent, RunEventKind,
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

impl PreviousValue {
    /// Whether a ref holding `current` (`None`: absent) satisfies this
    /// expectation: the compare of a compare-and-swap.
    pub fn matches(&self, current: Option<&RefTarget>) -> bool {
        match self {
            PreviousValue::Any => true,
            PreviousValue::MustNotExist => current.is_none(),
            PreviousValue::MustExist => current.is_some(),
            PreviousValue::MustMatch(t) => current == Some(t),
        }
    }

    /// What the expectation says the ref holds, as a lost compare-and-swap
    /// reports it (`None`: nothing, or anything).
    pub fn describe(&self) -> Option<String> {
        match self {
            PreviousValue::MustMatch(t) => Some(t.to_string()),
            PreviousValue::MustExist => Some("a value".into()),
            PreviousValue::Any | PreviousValue::MustNotExist => None,
        }
    }
}

impl RefEdit {
    /// Points `HEAD` at `target` (a conversation's ref: `HEAD` follows it),
    /// whatever `HEAD` held.
    pub fn head_to(target: RefName) -> RefEdit {
        RefEdit {
            name: RefName::Head,
            expected: PreviousValue::Any,
            new: Some(RefTarget::Symbolic(target)),
        }
    }

    /// Detaches `HEAD` from the ref it follows, `from`, leaving it at the
    /// session `at`; fails the transaction if `HEAD` moved meanwhile.
    pub fn detach_head(from: RefName, at: crate::hash::ObjectId) -> RefEdit {
        RefEdit {
            name: RefName::Head,
            expected: PreviousValue::MustMatch(RefTarget::Symbolic(from)),
            new: Some(RefTarget::Session(at)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::ObjectId;

    #[test]
    fn previous_values_compare_as_a_cas_does() {
        let a = RefTarget::Session(ObjectId::from_bytes([1; 32]));
        let b = RefTarget::Session(ObjectId::from_bytes([2; 32]));
        let cases = [
            (PreviousValue::Any, [true, true]),
            (PreviousValue::MustNotExist, [true, false]),
            (PreviousValue::MustExist, [false, true]),
            (PreviousValue::MustMatch(a.clone()), [false, true]),
            (PreviousValue::MustMatch(b.clone()), [false, false]),
        ];
        for (expected, [absent, holds_a]) in cases {
            assert_eq!(expected.matches(None), absent, "{expected:?} on nothing");
            assert_eq!(expected.matches(Some(&a)), holds_a, "{expected:?} on a");
        }
        assert_eq!(
            PreviousValue::MustMatch(a.clone()).describe(),
            Some(a.to_string())
        );
        assert_eq!(PreviousValue::MustNotExist.describe(), None);
    }
}
