//! Runs: at most one running agent session per conversation. A claim is a
//! journaled operation; the run's commit must continue the head it began
//! from, and a run left open by a process that is gone is marked failed by
//! the next writer that opens the store.

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::index::RunClaim;
use crate::object::SessionStatus;
use crate::odb::Durability;
use crate::refs::{RunEvent, RunEventKind};

use super::{Store, Transaction, Turn};

/// A run in progress on a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub conversation: String,
    pub id: u64,
    /// The head when the run began; its commit must continue it.
    pub head: Option<ObjectId>,
}

impl Store {
    /// Claims a conversation for one running agent session. A second claim
    /// while one is open is `Busy`, naming the running one.
    pub fn begin_run(&self, name: &str) -> Result<Run> {
        let info = self.require_conversation(name)?;
        if let Some(c) = &info.running {
            return Err(Error::Busy {
                conversation: name.to_owned(),
                run: c.run,
                pid: c.pid,
            });
        }
        let seq = {
            // The run's id is the sequence number of its begin operation.
            let st = self.state.lock().expect("state lock");
            st.seq + 1
        };
        let committed = self.transact(
            Transaction {
                reason: "begin-run".into(),
                runs: vec![RunEvent {
                    conversation: name.to_owned(),
                    run: seq,
                    kind: RunEventKind::Begin {
                        pid: std::process::id(),
                    },
                }],
                require_unclaimed: vec![name.to_owned()],
                ..Transaction::default()
            },
            Durability::Sync,
        );
        match committed {
            Ok(c) if c.op == seq => Ok(Run {
                conversation: name.to_owned(),
                id: seq,
                head: info.head,
            }),
            Ok(c) => {
                // Another operation slipped in between: the claim names a
                // run id that is not its own sequence number. Release it.
                self.fail_run_id(name, seq, "claim raced; released")?;
                Err(Error::ClaimRaced {
                    conversation: name.to_owned(),
                    op: c.op,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Writes the run's session on the head it began from and releases the
    /// claim. With `awaiting_tool_results`, the session says deferred tool
    /// calls are pending.
    pub fn commit_run(
        &self,
        run: &Run,
        mut turn: Turn,
        awaiting_tool_results: bool,
        durability: Durability,
    ) -> Result<ObjectId> {
        turn.status = Some(if awaiting_tool_results {
            SessionStatus::AwaitingToolResults
        } else {
            SessionStatus::Committed
        });
        let id = self.commit_with(
            &run.conversation,
            run.head,
            turn,
            &[],
            Some(run),
            None,
            durability,
        )?;
        self.after_commit_recorded(&run.conversation, id);
        Ok(id)
    }

    /// Records that the run failed; writes no session.
    pub fn fail_run(&self, run: &Run, error: &str) -> Result<()> {
        self.fail_run_id(&run.conversation, run.id, error)
    }

    fn fail_run_id(&self, name: &str, run: u64, error: &str) -> Result<()> {
        self.transact(
            Transaction {
                reason: "fail-run".into(),
                runs: vec![RunEvent {
                    conversation: name.to_owned(),
                    run,
                    kind: RunEventKind::Fail {
                        error: error.to_owned(),
                    },
                }],
                require_claim: vec![(name.to_owned(), run)],
                ..Transaction::default()
            },
            Durability::Sync,
        )?;
        Ok(())
    }

    /// The open claim on a conversation.
    pub fn running(&self, name: &str) -> Result<Option<RunClaim>> {
        self.index.claim(name)
    }

    /// Runs left open by a process that is gone are marked failed.
    pub(super) fn recover_runs(&self) -> Result<()> {
        let claims = self.index.claims()?;
        if claims.is_empty() {
            return Ok(());
        }
        let mut tx = Transaction {
            reason: "recover".into(),
            ..Transaction::default()
        };
        for (conv, c) in &claims {
            tx.runs.push(RunEvent {
                conversation: conv.clone(),
                run: c.run,
                kind: RunEventKind::Fail {
                    error: format!("process {} ended without committing", c.pid),
                },
            });
            self.note(format!(
                "run {} on {conv} (pid {}) was left open by a process that is gone; marked failed",
                c.run, c.pid
            ));
        }
        self.transact(tx, Durability::Sync)?;
        Ok(())
    }
}
