//! Work a store runs after a commit that stands. The store declares the
//! hook and knows nothing of what it does; `compact.rs` implements it for
//! auto-compaction. A hook that fails leaves the commit in place: the
//! failure is returned (`commit_and_compact`) or kept for the caller to
//! take.

use std::any::Any;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::odb::Durability;

use super::Store;

/// Work run after each commit, continuation, merge or run commit.
pub trait AfterCommit: Any + Send + Sync + std::fmt::Debug {
    /// What the hook does, as a failure report names it
    /// ("auto-compaction").
    fn name(&self) -> &'static str;

    /// Runs after `session` became `conversation`'s head. `None`: nothing
    /// was due; `Some(Ok(id))`: the hook committed `id` on top;
    /// `Some(Err(_))`: it failed, and the commit stands.
    fn after_commit(
        &self,
        store: &Store,
        conversation: &str,
        session: ObjectId,
        durability: Durability,
    ) -> Option<Result<ObjectId>>;
}

/// A hook that failed after a commit that stands.
#[derive(Debug)]
pub struct AfterCommitError {
    /// The hook's [`AfterCommit::name`].
    pub hook: &'static str,
    pub conversation: String,
    /// The session that was committed.
    pub session: ObjectId,
    pub error: Error,
}

impl std::fmt::Display for AfterCommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} after {} failed: {}",
            self.hook, self.conversation, self.session, self.error
        )
    }
}

impl Store {
    /// Sets (or with `None` clears) the work run after each commit.
    pub fn set_after_commit(&self, hook: Option<Arc<dyn AfterCommit>>) {
        *self.after_commit.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// The work run after each commit, if any.
    pub fn after_commit_hook(&self) -> Option<Arc<dyn AfterCommit>> {
        self.after_commit
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Hooks that failed since the last call, oldest first.
    pub fn take_after_commit_errors(&self) -> Vec<AfterCommitError> {
        std::mem::take(
            &mut *self
                .after_commit_errors
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// Runs the hook after `session` was committed on `conversation`.
    pub fn run_after_commit(
        &self,
        conversation: &str,
        session: ObjectId,
        durability: Durability,
    ) -> Option<Result<ObjectId>> {
        // Cloned out of the lock: a hook may take minutes.
        let hook = self.after_commit_hook()?;
        hook.after_commit(self, conversation, session, durability)
    }

    /// Runs the hook; a failure is kept for [`Store::take_after_commit_errors`].
    pub(super) fn after_commit_recorded(&self, conversation: &str, session: ObjectId) {
        let Some(hook) = self.after_commit_hook() else {
            return;
        };
        if let Some(Err(error)) = hook.after_commit(self, conversation, session, Durability::Sync) {
            self.after_commit_errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(AfterCommitError {
                    hook: hook.name(),
                    conversation: conversation.to_owned(),
                    session,
                    error,
                });
        }
    }
}
