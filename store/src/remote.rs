//! Transfers between stores: `unbundle`, `push`, `pull` and `clone` all
//! apply a [`Bundle`] (the objects the receiver lacks, plus ref values) to a
//! receiving store with one compare-and-swap transaction.
//!
//! A ref that does not exist is created; one the incoming value descends
//! from fast-forwards; one holding the same value (or a descendant of it)
//! is left alone; one that has diverged is refused, and then nothing moves
//! at all, unless a push forces it ([`push_forced`]: always, or under a
//! lease on what the ref holds). Every object is checked (hash, decoding, closure, prerequisites)
//! before any ref moves. This module never deletes a ref.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::bundle::{select, Bundle, ProblemKind, Selected, Selection};
use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::odb::{Durability, OpenOptions};
use crate::progress::{Progress, Silent};
use crate::reach;
use crate::refs::{ConversationUpdate, PreviousValue, RefEdit, RefName, RefTarget, ReflogEntry};
use crate::store::{Store, Transaction};

/// What a transfer did, or would have done, to one ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefOutcome {
    Created(ObjectId),
    FastForward {
        from: ObjectId,
        to: ObjectId,
    },
    /// It had diverged and was overwritten (a forced push).
    Forced {
        from: ObjectId,
        to: ObjectId,
    },
    /// It already holds the value, or a session descending from it.
    UpToDate,
    /// It has diverged; the message names both heads.
    Refused(String),
}

impl std::fmt::Display for RefOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefOutcome::Created(id) => write!(f, "created {}", id.to_hex_prefix(12)),
            RefOutcome::FastForward { from, to } => write!(
                f,
                "fast-forward {}..{}",
                from.to_hex_prefix(12),
                to.to_hex_prefix(12)
            ),
            RefOutcome::Forced { from, to } => write!(
                f,
                "forced update {}...{}",
                from.to_hex_prefix(12),
                to.to_hex_prefix(12)
            ),
            RefOutcome::UpToDate => f.write_str("up to date"),
            RefOutcome::Refused(m) => write!(f, "refused: {m}"),
        }
    }
}

/// What a transfer did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TransferReport {
    /// Every ref the transfer carried, by name.
    pub refs: Vec<(RefName, RefOutcome)>,
    /// Objects written to the receiver (0 when refused).
    pub objects: usize,
    /// Their canonical payload bytes.
    pub bytes: u64,
    /// False when a ref was refused: then nothing was written.
    pub applied: bool,
}

impl TransferReport {
    /// The refusal messages, if any.
    pub fn refusals(&self) -> Vec<&str> {
        self.refs
            .iter()
            .filter_map(|(_, o)| match o {
                RefOutcome::Refused(m) => Some(m.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Whether a push may overwrite a receiver's ref that has diverged, as
/// git's `push --force` and `--force-with-lease`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Force {
    /// Never: only creations and fast-forwards (the default).
    #[default]
    No,
    /// Always (`--force`).
    All,
    /// Only the refs a lease covers, and each only while the receiver's ref
    /// holds what the lease expects; a ref whose lease fails is refused
    /// (then nothing moves), even for a fast-forward. Refs no lease covers
    /// are not forced.
    Leases(Vec<Lease>),
}

/// One lease of [`Force::Leases`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The ref it covers; `None`: every ref the push carries that no other
    /// lease names.
    pub name: Option<RefName>,
    pub expect: LeaseExpect,
}

/// What a lease expects the receiver's ref to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseExpect {
    /// The value the sender last saw at that ref, standing for git's
    /// remote-tracking value (sessctl keeps no remote-tracking refs): the
    /// newest value its own ref log shows the ref took (nothing when it
    /// never existed), the newest a pull or clone brought it, or what the
    /// receiver holds when a push put it there and the sender's log shows
    /// it. An older value the log shows that the receiver was set back to
    /// by other means does not hold: that is someone else's work.
    Seen,
    /// Nothing: the ref must not exist.
    Absent,
    /// Exactly this session.
    At(ObjectId),
}

/// What one ref of an apply may do beyond creating and fast-forwarding.
#[derive(Debug, Clone)]
enum RefForce {
    No,
    Yes,
    /// Forced, once the receiver's value is one of these (`None`: absent).
    IfHolds(HashSet<Option<ObjectId>>),
}

/// Whether `ancestor` is `from` or one of its ancestors. Parents come from
/// the bundle's sessions first, then from the store's index.
fn descends_from(
    store: &Store,
    bundle_parents: &HashMap<ObjectId, Vec<ObjectId>>,
    from: ObjectId,
    ancestor: ObjectId,
) -> Result<bool> {
    let mut seen = HashSet::new();
    let mut stack = vec![from];
    while let Some(id) = stack.pop() {
        if id == ancestor {
            return Ok(true);
        }
        if !seen.insert(id) {
            continue;
        }
        if let Some(ps) = bundle_parents.get(&id) {
            stack.extend(ps);
        } else if let Some(info) = store.session_info(&id)? {
            stack.extend(info.parents);
        } else if store.odb().contains(&id)? {
            stack.extend(store.odb().session(&id)?.parents);
        }
    }
    Ok(false)
}

/// Applies `bundle` to `store`: checks every object first, then writes the
/// objects the store lacks and moves the refs in one transaction (recorded
/// with `reason`). `source` names the sender in refusal messages ("the
/// bundle", a remote's path). A refused ref makes the whole transfer a
/// no-op, reported with `applied: false`. A corrupt bundle is
/// [`Error::Corrupt`]; missing prerequisites are [`Error::Invalid`].
pub fn apply(
    store: &Store,
    bundle: &Bundle,
    reason: &str,
    source: &str,
    durability: Durability,
) -> Result<TransferReport> {
    apply_with(store, bundle, reason, source, durability, &Silent)
}

/// [`apply`], telling `progress` of the objects checked and written.
pub fn apply_with(
    store: &Store,
    bundle: &Bundle,
    reason: &str,
    source: &str,
    durability: Durability,
    progress: &dyn Progress,
) -> Result<TransferReport> {
    apply_forced(
        store,
        bundle,
        reason,
        source,
        &|_| RefForce::No,
        durability,
        progress,
    )
}

/// [`apply_with`], overwriting the refs `force` says may be overwritten.
fn apply_forced(
    store: &Store,
    bundle: &Bundle,
    reason: &str,
    source: &str,
    force: &dyn Fn(&RefName) -> RefForce,
    durability: Durability,
    progress: &dyn Progress,
) -> Result<TransferReport> {
    let problems = bundle.problems_with(Some(store), progress)?;
    if let Some(p) = problems.iter().find(|p| p.kind == ProblemKind::Corrupt) {
        return Err(p.clone().into_error());
    }
    if !problems.is_empty() {
        let more = match problems.len() {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        return Err(Error::Invalid(format!("{}{more}", problems[0])));
    }
    let parents = bundle.session_parents();
    let mut report = TransferReport::default();
    let mut edits = Vec::new();
    let mut moved: HashSet<String> = HashSet::new();
    let mut fast_forwarded: HashSet<String> = HashSet::new();
    for (name, target) in &bundle.refs {
        let (mut outcome, diverged) = ref_outcome(store, &parents, name, *target, source)?;
        let allowed = match force(name) {
            RefForce::No => false,
            RefForce::Yes => true,
            RefForce::IfHolds(accepted) => {
                let current = match store.get_ref(name)? {
                    Some(RefTarget::Session(id)) => Some(id),
                    _ => None,
                };
                if accepted.contains(&current) {
                    true
                } else {
                    outcome = RefOutcome::Refused(format!(
                        "refusing to update {name} (stale info): it is at {}, not at what the lease expects",
                        current.map_or("nothing".to_owned(), |c| c.to_hex_prefix(12))
                    ));
                    false
                }
            }
        };
        if let (true, Some(from)) = (allowed, diverged) {
            outcome = RefOutcome::Forced { from, to: *target };
        }
        match &outcome {
            RefOutcome::Created(id) => edits.push(RefEdit {
                name: name.clone(),
                expected: PreviousValue::MustNotExist,
                new: Some(RefTarget::Session(*id)),
            }),
            RefOutcome::FastForward { from, to } | RefOutcome::Forced { from, to } => {
                if let RefName::Conversation(n) | RefName::Archived(n) = name {
                    fast_forwarded.insert(n.clone());
                }
                edits.push(RefEdit {
                    name: name.clone(),
                    expected: PreviousValue::MustMatch(RefTarget::Session(*from)),
                    new: Some(RefTarget::Session(*to)),
                })
            }
            RefOutcome::UpToDate | RefOutcome::Refused(_) => {}
        }
        if let RefName::Conversation(n) | RefName::Archived(n) = name {
            moved.insert(n.clone());
        }
        report.refs.push((name.clone(), outcome));
    }
    if !report.refusals().is_empty() {
        return Ok(report);
    }
    // A new conversation takes the sender's record; one that moves takes it
    // when the sender's is newer (its title and times follow the turns).
    let mut conversations = Vec::new();
    for (name, record) in &bundle.conversations {
        let take = match store.conversation(name)? {
            None => moved.contains(name),
            Some(local) => {
                fast_forwarded.contains(name) && record.updated_at > local.record.updated_at
            }
        };
        if take {
            conversations.push(ConversationUpdate {
                name: name.clone(),
                record: Some(record.clone()),
            });
        }
    }
    let mut objects = Vec::new();
    for o in &bundle.objects {
        if !store.odb().contains(&o.id())? {
            report.bytes += o.payload().len() as u64;
            objects.push(o.clone());
        }
    }
    report.objects = objects.len();
    progress.phase("writing objects", Some(objects.len() as u64));
    store.transact(
        Transaction {
            reason: reason.to_owned(),
            edits,
            conversations,
            objects,
            ..Transaction::default()
        },
        durability,
    )?;
    progress.advance(report.objects as u64);
    report.applied = true;
    Ok(report)
}

/// A ref's outcome, and the value a force would overwrite (`Some` when it
/// differs from the sender's and is not a fast-forward).
fn ref_outcome(
    store: &Store,
    parents: &HashMap<ObjectId, Vec<ObjectId>>,
    name: &RefName,
    target: ObjectId,
    source: &str,
) -> Result<(RefOutcome, Option<ObjectId>)> {
    // A conversation is live or archived, never both.
    let other = match name {
        RefName::Conversation(n) => Some((RefName::archived(n)?, "archived")),
        RefName::Archived(n) => Some((RefName::conversation(n)?, "live")),
        _ => None,
    };
    if let Some((other, state)) = other {
        if store.get_ref(&other)?.is_some() {
            return Ok((
                RefOutcome::Refused(format!(
                    "refusing to update {name}: conversation {} is {state} here ({other})",
                    name.short()
                )),
                None,
            ));
        }
    }
    let current = match store.get_ref(name)? {
        None => return Ok((RefOutcome::Created(target), None)),
        Some(RefTarget::Session(id)) => id,
        Some(RefTarget::Symbolic(r)) => {
            return Ok((
                RefOutcome::Refused(format!(
                    "refusing to update {name}: it points at {r}, not a session"
                )),
                None,
            ))
        }
    };
    if current == target {
        return Ok((RefOutcome::UpToDate, None));
    }
    if descends_from(store, parents, target, current)? {
        return Ok((
            RefOutcome::FastForward {
                from: current,
                to: target,
            },
            None,
        ));
    }
    // The receiver has more: up to date, unless forced back (as git's
    // `push --force` rewinds a branch that is ahead).
    if store.odb().contains(&target)? && descends_from(store, parents, current, target)? {
        return Ok((RefOutcome::UpToDate, Some(current)));
    }
    Ok((
        RefOutcome::Refused(format!(
            "refusing to update {name}: it is at {}, {source} has {}, and neither contains the other",
            current.to_hex_prefix(12),
            target.to_hex_prefix(12)
        )),
        Some(current),
    ))
}

/// Which conversations a push or pull carries: none named means every ref
/// but `HEAD`, and every record.
fn selection(conversations: &[String]) -> Result<Selection> {
    if conversations.is_empty() {
        return Ok(Selection::All);
    }
    for c in conversations {
        crate::refs::validate_name(c)?;
    }
    Ok(Selection::Revs(conversations.to_vec()))
}

/// The transfer from `sender` to `receiver`: the selected refs and records,
/// and the objects `receiver` lacks (the walk stops at every session it
/// holds already).
pub fn pack_for(sender: &Store, receiver: &Store, conversations: &[String]) -> Result<Bundle> {
    pack_for_with(sender, receiver, conversations, &Silent)
}

/// [`pack_for`], telling `progress` of the objects found.
pub fn pack_for_with(
    sender: &Store,
    receiver: &Store,
    conversations: &[String],
    progress: &dyn Progress,
) -> Result<Bundle> {
    for c in conversations {
        if sender.conversation(c)?.is_none() {
            return Err(Error::NoSuchConversation { name: c.clone() });
        }
    }
    let Selected {
        refs,
        records,
        tips,
    } = select(sender, &selection(conversations)?)?;
    let odb = receiver.odb();
    // Counted as the walk examines them: what goes and where it stops.
    progress.phase("counting objects", None);
    let (mut objects, prerequisites) = reach::missing_from(sender.odb(), &tips, &mut |id| {
        progress.advance(1);
        odb.contains(id)
    })?;
    objects.extend(reach::record_blobs_missing(
        sender.odb(),
        &records,
        &mut |id| odb.contains(id),
    )?);
    Ok(Bundle::new(refs, records, prerequisites, objects))
}

/// Sends `local`'s conversations (all when none are named) to `remote`.
pub fn push(
    local: &Store,
    remote: &Store,
    conversations: &[String],
    durability: Durability,
) -> Result<TransferReport> {
    push_forced(local, remote, conversations, &Force::No, durability)
}

/// [`push`], overwriting refs as `force` allows, as git does: a forced ref
/// is set to the sender's value whether it had diverged or was ahead.
pub fn push_forced(
    local: &Store,
    remote: &Store,
    conversations: &[String],
    force: &Force,
    durability: Durability,
) -> Result<TransferReport> {
    push_with(local, remote, conversations, force, durability, &Silent)
}

/// [`push_forced`], telling `progress` how it goes.
pub fn push_with(
    local: &Store,
    remote: &Store,
    conversations: &[String],
    force: &Force,
    durability: Durability,
    progress: &dyn Progress,
) -> Result<TransferReport> {
    let bundle = pack_for_with(local, remote, conversations, progress)?;
    let (reflog, remote_reflog) = match force {
        Force::Leases(l) if l.iter().any(|l| l.expect == LeaseExpect::Seen) => {
            (local.reflog_entries()?, remote.reflog_entries()?)
        }
        _ => (Vec::new(), Vec::new()),
    };
    let rule = |name: &RefName| -> RefForce {
        let leases = match force {
            Force::No => return RefForce::No,
            Force::All => return RefForce::Yes,
            Force::Leases(l) => l,
        };
        let lease = leases
            .iter()
            .find(|l| l.name.as_ref() == Some(name))
            .or_else(|| leases.iter().find(|l| l.name.is_none()));
        let Some(lease) = lease else {
            return RefForce::No;
        };
        RefForce::IfHolds(match lease.expect {
            LeaseExpect::Absent => HashSet::from([None]),
            LeaseExpect::At(id) => HashSet::from([Some(id)]),
            LeaseExpect::Seen => seen_values(&reflog, &remote_reflog, name),
        })
    };
    apply_forced(
        remote,
        &bundle,
        "push",
        "this store",
        &rule,
        durability,
        progress,
    )
}

/// What a bare lease expects of `name` on the receiver, standing for git's
/// remote-tracking value (sessctl keeps no remote-tracking refs): the newest
/// value this store's ref log shows the ref took (absent when it never
/// existed or was deleted last); the newest value a pull or clone brought
/// it (what the other store held when this one last fetched it); and what
/// the receiver holds when a push put it there last and this store's log
/// shows it (a value pushed from here, then rewritten here, as after
/// `commit --amend`). Never an older value of the log the receiver was
/// set back to since by other means (a reset there): that is someone
/// else's work.
fn seen_values(
    reflog: &[ReflogEntry],
    remote_reflog: &[ReflogEntry],
    name: &RefName,
) -> HashSet<Option<ObjectId>> {
    let value = |e: &ReflogEntry| match &e.new {
        Some(RefTarget::Session(id)) => Some(Some(*id)),
        None => Some(None),
        Some(RefTarget::Symbolic(_)) => None,
    };
    let mine = || reflog.iter().rev().filter(|e| e.name == *name);
    let newest = mine().next().map_or(Some(None), value);
    let fetched = mine()
        .find(|e| matches!(e.reason.as_str(), "pull" | "clone"))
        .and_then(value);
    let pushed = remote_reflog
        .iter()
        .rev()
        .find(|e| e.name == *name)
        .filter(|e| e.reason == "push")
        .and_then(|e| match &e.new {
            Some(RefTarget::Session(id)) => Some(*id),
            _ => None,
        })
        .filter(|id| {
            let held = Some(RefTarget::Session(*id));
            mine().any(|e| e.new == held || e.old == held)
        })
        .map(Some);
    newest.into_iter().chain(fetched).chain(pushed).collect()
}

/// Fetches `remote`'s conversations (all when none are named) into `local`.
pub fn pull(
    local: &Store,
    remote: &Store,
    conversations: &[String],
    durability: Durability,
) -> Result<TransferReport> {
    pull_with(local, remote, conversations, durability, &Silent)
}

/// [`pull`], telling `progress` how it goes.
pub fn pull_with(
    local: &Store,
    remote: &Store,
    conversations: &[String],
    durability: Durability,
    progress: &dyn Progress,
) -> Result<TransferReport> {
    let bundle = pack_for_with(remote, local, conversations, progress)?;
    let source = match remote.root() {
        Some(p) => p.display().to_string(),
        None => "the remote".to_owned(),
    };
    apply_with(local, &bundle, "pull", &source, durability, progress)
}

/// Creates a store at `dest` (which must not exist, or be an empty
/// directory) holding every ref, record and reachable object of the store
/// at `source`, opened read-only (no lock taken). `HEAD` follows the
/// source's when it names a conversation. A clone that fails leaves no
/// store behind (see [`clone_from`]).
pub fn clone(source: &Path, dest: &Path) -> Result<(Store, TransferReport)> {
    clone_with(source, dest, &Silent)
}

/// [`clone`], telling `progress` how it goes.
pub fn clone_with(
    source: &Path,
    dest: &Path,
    progress: &dyn Progress,
) -> Result<(Store, TransferReport)> {
    if let (Ok(a), Ok(b)) = (source.canonicalize(), dest.canonicalize()) {
        if a == b {
            return Err(Error::Invalid(format!(
                "cannot clone {} onto itself",
                source.display()
            )));
        }
    }
    if dest.exists() && std::fs::read_dir(dest).is_ok_and(|mut d| d.next().is_some()) {
        // Checked before the source is opened, as clone_from checks it.
        return Err(Error::NotEmpty {
            path: dest.to_path_buf(),
        });
    }
    let from = Store::open(
        source,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )?;
    clone_from(&from, &source.display().to_string(), dest, progress)
}

/// [`clone`] of a store already open (whatever its backend), named
/// `source`, into a new local store at `dest`. A clone that fails removes
/// what it created, as git's does, so that the same clone can be run
/// again: `dest` and the parents it had to create, or, when `dest` was an
/// empty directory, what it put in it.
pub fn clone_from(
    from: &Store,
    source: &str,
    dest: &Path,
    progress: &dyn Progress,
) -> Result<(Store, TransferReport)> {
    let created = if dest.exists() {
        let empty = std::fs::read_dir(dest)
            .map_err(|e| Error::Io {
                path: dest.to_path_buf(),
                source: e,
            })?
            .next()
            .is_none();
        if !empty {
            return Err(Error::NotEmpty {
                path: dest.to_path_buf(),
            });
        }
        None
    } else {
        Some(outermost_missing(dest))
    };
    // The store is closed (dropped) before what it wrote is removed.
    let cloned = Store::init(dest).and_then(|store| {
        let report = clone_into(from, &store, source, progress)?;
        Ok((store, report))
    });
    if cloned.is_err() {
        // Best effort: the clone's own error is the one to report, and a
        // directory left behind says so itself on the next attempt.
        let _ = match &created {
            Some(top) => std::fs::remove_dir_all(top),
            None => empty_dir(dest),
        };
    }
    cloned
}

/// The outermost of `path` and its parents that does not exist: what
/// creating `path` creates.
fn outermost_missing(path: &Path) -> std::path::PathBuf {
    let mut top = path;
    for parent in path.ancestors().skip(1) {
        if parent.as_os_str().is_empty() || parent.symlink_metadata().is_ok() {
            break;
        }
        top = parent;
    }
    top.to_path_buf()
}

/// Removes everything in directory `dir`, leaving it.
fn empty_dir(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// [`clone`] between stores already open, whatever their backends (a
/// local store into a remote one, or back): copies every ref, record and
/// reachable object of `from` into `into`, which must hold no ref yet, and
/// points `into`'s `HEAD` where `from`'s does when it names a conversation.
/// `source` names `from` in the ref log.
pub fn clone_into(
    from: &Store,
    into: &Store,
    source: &str,
    progress: &dyn Progress,
) -> Result<TransferReport> {
    if into.refs()?.iter().any(|(n, _)| *n != RefName::Head) {
        return Err(Error::Invalid(
            "the store to clone into already holds conversations".into(),
        ));
    }
    let bundle = pack_for_with(from, into, &[], progress)?;
    let report = apply_with(into, &bundle, "clone", source, Durability::Sync, progress)?;
    if let Some(RefTarget::Symbolic(head)) = from.get_ref(&RefName::Head)? {
        if into.get_ref(&head)?.is_some() {
            into.transact(
                Transaction {
                    reason: "clone".into(),
                    edits: vec![RefEdit {
                        name: RefName::Head,
                        expected: PreviousValue::Any,
                        new: Some(RefTarget::Symbolic(head)),
                    }],
                    ..Transaction::default()
                },
                Durability::Sync,
            )?;
        }
    }
    Ok(report)
}
