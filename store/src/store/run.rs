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

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::transaction::UnderLock;
use super::{Store, Transaction, Turn};
use crate::time::now_ms;

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
        // The claim's lock file, locked before the claim exists and put in
        // place under the write lock with it, so that no process can see
        // the claim and not its lock.
        let claim = self.claim_file()?;
        let under_lock = claim.as_ref().map(|(tmp, _)| {
            let (tmp, dir) = (tmp.clone(), self.runs_dir());
            UnderLock(Arc::new(move |seq: u64| {
                let _ = std::fs::rename(&tmp, dir.join(format!("{seq}.lock")));
            }))
        });
        let committed = self.transact_hooked(
            Transaction {
                reason: "begin-run".into(),
                runs: vec![RunEvent {
                    conversation: name.to_owned(),
                    // The run's id is its begin operation's sequence
                    // number, filled in under the write lock.
                    run: 0,
                    kind: RunEventKind::Begin {
                        pid: std::process::id(),
                    },
                }],
                require_unclaimed: vec![name.to_owned()],
                ..Transaction::default()
            },
            under_lock,
            Durability::Sync,
        );
        match committed {
            Ok(c) => {
                self.runs
                    .lock()
                    .expect("runs lock")
                    .insert(c.op, claim.map(|(_, file)| file));
                Ok(Run {
                    conversation: name.to_owned(),
                    id: c.op,
                    head: info.head,
                })
            }
            Err(e) => {
                if let Some((tmp, _)) = claim {
                    let _ = std::fs::remove_file(tmp);
                }
                Err(e)
            }
        }
    }

    fn runs_dir(&self) -> PathBuf {
        self.root
            .as_deref()
            .map(|r| r.join("runs"))
            .unwrap_or_default()
    }

    /// A locked lock file under a temporary name in `runs/`; `None` for a
    /// store in memory, whose claims live and die with this process.
    fn claim_file(&self) -> Result<Option<(PathBuf, File)>> {
        if self.root.is_none() {
            return Ok(None);
        }
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = self.runs_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let tmp = dir.join(format!(
            ".claim-{}-{}-{}",
            std::process::id(),
            now_ms(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::io(&tmp, e))?;
        file.try_lock()
            .map_err(|e| Error::io(&tmp, std::io::Error::other(e.to_string())))?;
        Ok(Some((tmp, file)))
    }

    /// Whether the process that made a claim still holds it: its lock file
    /// is locked (the kernel unlocks it when the process dies). Claims of a
    /// store in memory always are.
    pub(crate) fn claim_alive(&self, claim: &RunClaim) -> Result<bool> {
        if self
            .runs
            .lock()
            .expect("runs lock")
            .contains_key(&claim.run)
        {
            return Ok(true);
        }
        // A remote store: the claiming handle's advisory lock, on any
        // machine.
        if let Some(held) = self.odb.backend().claim_held(claim.run)? {
            return Ok(held);
        }
        if self.root.is_none() {
            return Ok(true);
        }
        crate::odb::lock::is_held(&self.runs_dir().join(format!("{}.lock", claim.run)))
    }

    /// Lets go of a run's lock file (or the backend's hold) once its claim
    /// is released.
    fn release_claim(&self, run: u64) {
        if let Some(file) = self.runs.lock().expect("runs lock").remove(&run) {
            if file.is_some() {
                let _ = std::fs::remove_file(self.runs_dir().join(format!("{run}.lock")));
            }
            self.odb.backend().release_claim(run);
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
        self.release_claim(run.id);
        self.after_commit_recorded(&run.conversation, id);
        Ok(id)
    }

    /// Records that the run failed; writes no session.
    pub fn fail_run(&self, run: &Run, error: &str) -> Result<()> {
        self.fail_run_id(&run.conversation, run.id, error)
    }

    fn fail_run_id(&self, name: &str, run: u64, error: &str) -> Result<()> {
        let done = self.transact(
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
        );
        self.release_claim(run);
        done.map(|_| ())
    }

    /// The open claim on a conversation, while the process that made it
    /// is alive.
    pub fn running(&self, name: &str) -> Result<Option<RunClaim>> {
        self.catch_up()?;
        match self.index.claim(name)? {
            Some(c) if self.claim_alive(&c)? => Ok(Some(c)),
            _ => Ok(None),
        }
    }

    /// Runs left open by a process that is gone are marked failed.
    pub(super) fn recover_runs(&self) -> Result<()> {
        let mut claims = Vec::new();
        for (conv, c) in self.index.claims()? {
            if !self.claim_alive(&c)? {
                claims.push((conv, c));
            }
        }
        if claims.is_empty() {
            return Ok(());
        }
        let mut tx = Transaction {
            reason: "recover".into(),
            ..Transaction::default()
        };
        for (conv, c) in &claims {
            tx.require_claim.push((conv.clone(), c.run));
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
        match self.transact(tx, Durability::Sync) {
            // Another process failed them first.
            Ok(_) | Err(Error::RunNotOpen { .. }) => {}
            Err(e) => return Err(e),
        }
        if self.root.is_some() {
            for (_, c) in &claims {
                let _ = std::fs::remove_file(self.runs_dir().join(format!("{}.lock", c.run)));
            }
        }
        Ok(())
    }
}
