//! History: the commands that read the session DAG and what sessions
//! hold: `log` and `graph` (`log.rs`), `merge-base` and `rev-parse`
//! (`revs.rs`), `show` and `diff` (`show.rs`). This file holds what they
//! share: revision checks, decorations, a session's printable summary.
//!
//! Walks go through `sessctl_store::graph`, which reads parents and times
//! from the index and never a message body; bodies are read only for what
//! is printed (a log entry's line, `show`'s and `diff`'s messages). Every
//! revision's syntax is checked before the store is opened.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};

use clap::{Args, ValueEnum};
use serde_json::{json, Map, Value};
use sessctl_store::diff::{json_diff, Change, ChangeOp};
use sessctl_store::graph::{self, Follow, Lanes, LogIds, Node, SessionGraph, TopoWalk};
use sessctl_store::index::SessionInfo;
use sessctl_store::message::{first_line, view, Shape};
use sessctl_store::rev::RevSpec;
use sessctl_store::time::format_rfc3339_ms;
use sessctl_store::{Error, ObjectId, RefName, RefTarget, Session, Store, Usage};

use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

mod log;
mod revs;
mod show;

pub use log::{graph, log, GraphArgs, LogArgs};
pub use revs::{merge_base, rev_parse, MergeBaseArgs, RevParseArgs};
pub use show::{diff, show, DiffArgs, ShowArgs};

/// Refuses a malformed revision (exit 2) before anything is opened.
fn check_revs<'a>(revs: impl IntoIterator<Item = &'a String>) -> CmdResult {
    for r in revs {
        RevSpec::parse(r).map_err(Error::from)?;
    }
    Ok(())
}

fn resolve_all(store: &Store, revs: &[String]) -> CmdResult<Vec<ObjectId>> {
    Ok(revs
        .iter()
        .map(|r| store.resolve_rev(r))
        .collect::<Result<_, _>>()?)
}

/// Every session a ref names, `HEAD` included (`--all`).
fn all_starts(store: &Store) -> CmdResult<Vec<ObjectId>> {
    let mut out = Vec::new();
    if let Some(h) = store.resolve_ref(&RefName::Head)? {
        out.push(h);
    }
    for (_, t) in store.refs()? {
        if let RefTarget::Session(id) = t {
            if !out.contains(&id) {
                out.push(id);
            }
        }
    }
    Ok(out)
}

// ---- stdout that stops at a closed pipe ----

/// Buffered stdout for long listings: once the reader has gone
/// (`sessctl log | head`), the listing stops quietly.
struct Out {
    w: BufWriter<crate::pager::Sink>,
    closed: bool,
}

impl Out {
    fn new() -> Out {
        Out {
            w: BufWriter::with_capacity(64 << 10, crate::pager::Sink),
            closed: false,
        }
    }

    /// Writes `text`; false once the reader is gone.
    fn put(&mut self, text: &str) -> CmdResult<bool> {
        if self.closed {
            return Ok(false);
        }
        match self.w.write_all(text.as_bytes()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(false)
            }
            Err(e) => Err(CommandError::Failed(format!("writing to stdout: {e}"))),
        }
    }

    fn finish(mut self) -> CmdResult {
        match self.w.flush() {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            Err(e) => Err(CommandError::Failed(format!("writing to stdout: {e}"))),
        }
    }
}

// ---- what is known of a session for printing ----

/// One name of a session in a decoration.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Decoration {
    /// HEAD first, then conversations, archived ones, tags.
    rank: u8,
    /// `HEAD -> fix`, `fix`, `archive/old`, `tag: golden`.
    text: String,
    /// The same without HEAD (empty for a detached HEAD).
    name: String,
    /// The full ref names it stands for.
    refs: Vec<String>,
}

/// The refs that name each session, for `(HEAD -> fix, tag: golden)`.
#[derive(Default)]
struct Decorations {
    by_id: HashMap<ObjectId, Vec<Decoration>>,
    /// Where `HEAD` was, for the decorations [`Decorations::add`] adds.
    head: Option<RefTarget>,
}

impl Decorations {
    /// Every ref's decoration.
    fn load(store: &Store) -> CmdResult<Decorations> {
        let refs = store.refs()?;
        let head = refs
            .iter()
            .find(|(n, _)| *n == RefName::Head)
            .map(|(_, t)| t.clone());
        Ok(Decorations::of_refs(head, &refs))
    }

    /// The decorations of `ids` only: what a `show` or a `log -n` prints,
    /// without building one for every ref of a store of many.
    fn for_ids(store: &Store, ids: &[ObjectId]) -> Result<Decorations, sessctl_store::Error> {
        let head = store.get_ref(&RefName::Head)?;
        let refs: Vec<(RefName, RefTarget)> = store
            .refs_to(ids)?
            .into_iter()
            .map(|(n, id)| (n, RefTarget::Session(id)))
            .collect();
        Ok(Decorations::of_refs(head, &refs))
    }

    fn of_refs(head: Option<RefTarget>, refs: &[(RefName, RefTarget)]) -> Decorations {
        let mut by_id: HashMap<ObjectId, Vec<Decoration>> = HashMap::new();
        if let Some(RefTarget::Session(id)) = head {
            by_id.entry(id).or_default().push(Decoration {
                rank: 0,
                text: "HEAD".into(),
                name: String::new(),
                refs: vec!["HEAD".into()],
            });
        }
        for (name, target) in refs {
            let RefTarget::Session(id) = target else {
                continue;
            };
            let (rank, text) = match name {
                RefName::Head => continue,
                RefName::Conversation(n) => (2, n.clone()),
                RefName::Archived(n) => (3, format!("archive/{n}")),
                RefName::Tag(n) => (4, format!("tag: {n}")),
            };
            let d = if head == Some(RefTarget::Symbolic(name.clone())) {
                let label = text.clone();
                let to = match name {
                    RefName::Tag(n) => format!("tags/{n}"),
                    _ => text,
                };
                Decoration {
                    rank: 1,
                    text: format!("HEAD -> {to}"),
                    name: label,
                    refs: vec!["HEAD".into(), name.to_string()],
                }
            } else {
                Decoration {
                    rank,
                    name: text.clone(),
                    text,
                    refs: vec![name.to_string()],
                }
            };
            by_id.entry(*id).or_default().push(d);
        }
        for list in by_id.values_mut() {
            list.sort();
        }
        Decorations { by_id, head }
    }

    /// None yet, with `HEAD` where it is: a whole log's, which
    /// [`Decorations::add`]s each step's as it reads them.
    fn at_head(head: Option<RefTarget>) -> Decorations {
        Decorations {
            by_id: HashMap::new(),
            head,
        }
    }

    /// Adds the decorations of `ids` (the refs at them now, `HEAD` where
    /// it was when this began), replacing any this held of them.
    fn add(&mut self, store: &Store, ids: &[ObjectId]) -> Result<(), sessctl_store::Error> {
        let refs: Vec<(RefName, RefTarget)> = store
            .refs_to(ids)?
            .into_iter()
            .map(|(n, id)| (n, RefTarget::Session(id)))
            .collect();
        let more = Decorations::of_refs(self.head.clone(), &refs);
        self.by_id.extend(more.by_id);
        Ok(())
    }

    fn of(&self, id: &ObjectId) -> &[Decoration] {
        self.by_id.get(id).map_or(&[], Vec::as_slice)
    }

    /// ` (HEAD -> fix, tag: golden)`, or nothing.
    fn text(&self, id: &ObjectId) -> String {
        let names: Vec<&str> = self.of(id).iter().map(|d| d.text.as_str()).collect();
        if names.is_empty() {
            String::new()
        } else {
            format!(" ({})", names.join(", "))
        }
    }

    /// Full names, `HEAD` first: `["HEAD", "refs/heads/fix"]`.
    fn refs(&self, id: &ObjectId) -> Vec<String> {
        let mut out: Vec<String> = self.of(id).iter().flat_map(|d| d.refs.clone()).collect();
        out.sort_by_key(|r| (r != "HEAD", r.clone()));
        out
    }

    /// The names other than HEAD, for graph labels.
    fn names(&self, id: &ObjectId) -> Vec<String> {
        self.of(id)
            .iter()
            .filter(|d| !d.name.is_empty())
            .map(|d| d.name.clone())
            .collect()
    }
}

fn info(store: &Store, id: &ObjectId) -> CmdResult<SessionInfo> {
    Ok(store.describe_session(id)?)
}

fn summary(store: &Store, info: &SessionInfo) -> CmdResult<String> {
    Ok(store.summary_line(info)?)
}

fn conversation_name(store: &Store, info: &SessionInfo) -> CmdResult<Option<String>> {
    Ok(store.index().conversation_name(&info.conversation)?)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn usage_text(u: &Usage) -> String {
    format!(
        "{} ({} prompt, {} completion), {}",
        plural(u.total_tokens, "token", "tokens"),
        u.prompt_tokens,
        u.completion_tokens,
        plural(u.requests, "request", "requests")
    )
}

fn hexes(ids: &[ObjectId]) -> Vec<String> {
    ids.iter().map(ObjectId::to_hex).collect()
}
