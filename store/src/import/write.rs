//! What an import does to the store: each tree's sessions are grafted onto
//! what earlier imports of the same source wrote, and written with their
//! refs and records in batched transactions, the last one synced.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::error::Result;
use crate::hash::ObjectId;
use crate::object::ObjectKind;
use crate::odb::Durability;
use crate::refs::{ConversationUpdate, PreviousValue, RefEdit, RefName, RefTarget};
use crate::store::{Store, Transaction};

use super::builder::{blob_object, build, Boundary, Graft};
use super::*;

pub(super) fn import_trees(
    store: &Store,
    format: Format,
    trees: Vec<Tree>,
    opts: &ImportOptions,
    report: &mut ImportReport,
) -> Result<()> {
    let mut pending: Option<(Transaction, usize)> = None;
    let existing_refs = store.refs()?;
    let mut names_used: HashSet<String> = HashSet::new();
    let mut queued: HashSet<ObjectId> = HashSet::new();
    let mut claimed: HashSet<RefName> = HashSet::new();
    // The most recently active conversation the import brings (ties: the
    // later one), for HEAD.
    let mut newest: Option<(i64, String)> = None;
    if let Some(p) = &opts.progress {
        p.phase("importing conversations", Some(trees.len() as u64));
    }
    // Every ref name the ref log has seen, read when first needed.
    let mut ever_held: Option<HashSet<RefName>> = None;
    for mut tree in sources_first(trees) {
        if let Some(p) = &opts.progress {
            p.advance(1);
        }
        if tree.nodes.is_empty() {
            continue;
        }
        // Two sources with one name (two trajectories with one file name):
        // the later ones get a number, in path order.
        if !names_used.insert(tree.name.clone()) {
            let base = tree.name.clone();
            let mut k = 2;
            while !names_used.insert(format!("{base}-{k}")) {
                k += 1;
            }
            tree.name = format!("{base}-{k}");
        }
        let first_file = tree.nodes[0].file.clone();
        let boundaries = existing_boundaries(store, &existing_refs, &tree.name)?;
        let graft = match tree.forked_from.clone() {
            Some(source) => {
                // Its source may be in the batch not yet written: write it,
                // or only the next import would find the graft (and rewrite
                // the fork then).
                if let Some((prev, _)) = pending.take() {
                    store.transact(prev, Durability::NoSync)?;
                }
                graft_point(store, &source, &mut tree)?
            }
            None => None,
        };
        let mut built = build(format, tree, &boundaries, graft, opts.finished, report)?;
        // Never take a ref an earlier source of this import makes (`x.fork-1`
        // is a fork of `x` and may be a conversation of its own): the first
        // keeps it.
        if let Some(name) = built
            .refs
            .iter()
            .map(|r| &r.0)
            .find(|n| claimed.contains(*n))
        {
            report.skipped.push(Skipped {
                file: PathBuf::from(&first_file),
                line: 0,
                reason: format!(
                    "{name} is also made by an earlier source of this import; left to it"
                ),
            });
            continue;
        }
        claimed.extend(built.refs.iter().map(|r| r.0.clone()));
        // Where each branch goes: its own ref while that only ever
        // fast-forwards; `<name>.imported` once the user moved the ref
        // elsewhere (a local commit, fork or compaction, or a conversation
        // of that name made by hand); nowhere when the user archived or
        // removed it.
        let mut refs = Vec::with_capacity(built.refs.len());
        for (name, head, record) in std::mem::take(&mut built.refs) {
            match destination(
                store,
                format,
                &name,
                head,
                &built.first_parent,
                &mut ever_held,
            )? {
                Destination::Own => refs.push((name, head, record)),
                Destination::Imported(alt, newly) => {
                    if newly {
                        report
                            .redirected
                            .push((name.short().to_owned(), alt.short().to_owned()));
                    }
                    let record = record.map(|(_, r)| (alt.short().to_owned(), r));
                    refs.push((alt, head, record));
                }
                Destination::LeftAlone(which, why) => {
                    report.left_alone.push((which, why.to_owned()));
                }
                Destination::Behind => {}
            }
        }
        built.refs = refs;
        report.sessions_total += built.sessions;
        report.messages += built.messages;
        report.forks += built.forks;
        report.compactions += built.compactions;
        report.conversations += 1;
        // A batch not yet committed is not in the store: an object two
        // sources share goes into both batches (the journal keeps one) but
        // counts once.
        let mut seen = HashSet::new();
        let mut objects = Vec::new();
        let mut new_objects = 0;
        for o in built.objects {
            if seen.insert(o.id()) && !store.odb().contains(&o.id())? {
                if queued.insert(o.id()) {
                    new_objects += 1;
                    if o.kind() == ObjectKind::Session {
                        report.sessions_written += 1;
                    }
                }
                objects.push(o);
            }
        }
        let mut tx = Transaction {
            reason: "import".into(),
            objects,
            ..Transaction::default()
        };
        for (name, head, record) in built.refs {
            if let (RefName::Conversation(n), Some((_, rec))) = (&name, &record) {
                if newest.as_ref().is_none_or(|(t, _)| rec.updated_at >= *t) {
                    newest = Some((rec.updated_at, n.clone()));
                }
            }
            let current = store.get_ref(&name)?;
            if current != Some(RefTarget::Session(head)) {
                tx.edits.push(RefEdit {
                    name: name.clone(),
                    expected: match current {
                        Some(t) => PreviousValue::MustMatch(t),
                        None => PreviousValue::MustNotExist,
                    },
                    new: Some(RefTarget::Session(head)),
                });
            }
            if let Some((conv, rec)) = record {
                let old = store.conversation(&conv)?.map(|c| c.record);
                if old.as_ref() != Some(&rec) {
                    tx.conversations.push(ConversationUpdate {
                        name: conv,
                        record: Some(rec),
                    });
                }
            }
        }
        if tx.objects.is_empty() && tx.edits.is_empty() && tx.conversations.is_empty() {
            continue;
        }
        let n_edits = tx.edits.len();
        if let Some((prev, _)) = pending.take() {
            store.transact(prev, Durability::NoSync)?;
        }
        pending = Some((tx, new_objects));
        report.objects_written += new_objects;
        report.refs_moved += n_edits;
    }
    if let Some((tx, _)) = pending {
        let d = if opts.no_sync {
            Durability::NoSync
        } else {
            Durability::Sync
        };
        store.transact(tx, d)?;
        if let Some((_, name)) = newest {
            report.head = head_to_imported(store, &name, d)?.then_some(name);
        }
    }
    Ok(())
}

/// Points HEAD at `name` when it names nothing usable (it is absent, or
/// follows a ref that does not exist), so that `log`, `show` and `resume`
/// work right after a first import. A HEAD another process sets meanwhile
/// is left to it. Returns whether HEAD moved.
fn head_to_imported(store: &Store, name: &str, durability: Durability) -> Result<bool> {
    let current = store.get_ref(&RefName::Head)?;
    let usable = match &current {
        None => false,
        Some(RefTarget::Session(_)) => true,
        Some(RefTarget::Symbolic(r)) => store.get_ref(r)?.is_some(),
    };
    if usable {
        return Ok(false);
    }
    let tx = Transaction {
        reason: "import".into(),
        edits: vec![RefEdit {
            name: RefName::Head,
            expected: match current {
                Some(t) => PreviousValue::MustMatch(t),
                None => PreviousValue::MustNotExist,
            },
            new: Some(RefTarget::Symbolic(RefName::conversation(name)?)),
        }],
        ..Transaction::default()
    };
    match store.transact(tx, durability) {
        Ok(_) => Ok(true),
        Err(crate::error::Error::RefOutOfDate { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The suffix of the ref an import follows once the user moved its own.
const IMPORTED: &str = ".imported";

enum Destination {
    /// The branch's own ref.
    Own,
    /// `<name>.imported`; `true` when this import starts following it.
    Imported(RefName, bool),
    /// Archived or removed by the user: which ref, and why.
    LeftAlone(String, &'static str),
    /// The ref is ahead of what this import read: left where it is.
    Behind,
}

/// Where an import writes the branch whose ref is `name` and new head
/// `head` (see objects-format.md, "Imported sessions").
fn destination(
    store: &Store,
    format: Format,
    name: &RefName,
    head: ObjectId,
    first_parent: &HashMap<ObjectId, Option<ObjectId>>,
    ever_held: &mut Option<HashSet<RefName>>,
) -> Result<Destination> {
    let alt_short = format!("{}{IMPORTED}", name.short());
    let alt = match name {
        RefName::Tag(_) => RefName::tag(&alt_short)?,
        _ => RefName::conversation(&alt_short)?,
    };
    // Once followed, always (the import's own line: not moved back).
    if let Some(t) = store.get_ref(&alt)? {
        if let RefTarget::Session(cur) = t {
            if cur != head
                && !descends(store, head, cur, first_parent)?
                && descends(store, cur, head, first_parent)?
            {
                return Ok(Destination::Behind);
            }
        }
        return Ok(Destination::Imported(alt, false));
    }
    match store.get_ref(name)? {
        // The common case first: a fast-forward (a walk of the new
        // sessions only).
        Some(RefTarget::Session(cur))
            if cur == head || descends(store, head, cur, first_parent)? =>
        {
            Ok(Destination::Own)
        }
        // Already past it: another import read a longer copy of the file.
        Some(RefTarget::Session(cur)) if descends(store, cur, head, first_parent)? => {
            Ok(Destination::Behind)
        }
        Some(RefTarget::Session(cur)) if imported_from(store, cur, format)? => {
            // Not descending, yet written by an import of this format: an
            // import with `finished` (or by an older sessctl) ended a turn
            // the file went on with; its line is the import's to move.
            Ok(Destination::Own)
        }
        Some(_) => Ok(match put_aside(store, &alt, ever_held)? {
            Some(why) => Destination::LeftAlone(alt_short, why),
            None => Destination::Imported(alt, true),
        }),
        None => Ok(match put_aside(store, name, ever_held)? {
            Some(why) => Destination::LeftAlone(name.short().to_owned(), why),
            None => Destination::Own,
        }),
    }
}

/// Why `name`, which does not exist, must not be made again: the user
/// archived it, or removed it (the ref log has seen it).
fn put_aside(
    store: &Store,
    name: &RefName,
    ever_held: &mut Option<HashSet<RefName>>,
) -> Result<Option<&'static str>> {
    if let RefName::Conversation(n) = name {
        if store.get_ref(&RefName::archived(n)?)?.is_some() {
            return Ok(Some("archived"));
        }
    }
    if ever_held.is_none() {
        *ever_held = Some(
            store
                .reflog_entries()?
                .into_iter()
                .map(|e| e.name)
                .collect(),
        );
    }
    Ok(ever_held
        .as_ref()
        .is_some_and(|h| h.contains(name))
        .then_some("removed"))
}

/// Whether session `id` is one an import of `format` wrote.
fn imported_from(store: &Store, id: ObjectId, format: Format) -> Result<bool> {
    let s = store.odb().session(&id)?;
    Ok(s.metadata.transport.as_deref() == Some("import")
        && s.metadata.extra.get("source").and_then(Value::as_str) == Some(format.as_str()))
}

/// Whether `cur` is on `head`'s first-parent chain (`head` may be a session
/// this import has not written yet).
fn descends(
    store: &Store,
    head: ObjectId,
    cur: ObjectId,
    first_parent: &HashMap<ObjectId, Option<ObjectId>>,
) -> Result<bool> {
    let mut at = Some(head);
    while let Some(id) = at {
        if id == cur {
            return Ok(true);
        }
        at = match first_parent.get(&id) {
            Some(p) => *p,
            None => store.odb().session(&id)?.first_parent(),
        };
    }
    Ok(false)
}

/// The trees in their order, except that a fork comes after the tree it was
/// forked from (its graft needs that tree in the store). Forks in a cycle
/// are imported as plain conversations, so that a second import does the same.
fn sources_first(mut trees: Vec<Tree>) -> Vec<Tree> {
    let mut out = Vec::with_capacity(trees.len());
    while !trees.is_empty() {
        let waiting: HashSet<String> = trees.iter().map(|t| t.name.clone()).collect();
        let (ready, mut rest): (Vec<Tree>, Vec<Tree>) = trees.into_iter().partition(|t| {
            t.forked_from
                .as_ref()
                .is_none_or(|f| *f == t.name || !waiting.contains(f))
        });
        if ready.is_empty() {
            for t in &mut rest {
                t.forked_from = None;
            }
        }
        out.extend(ready);
        trees = rest;
    }
    out
}

/// Where a forked copy joins its source conversation: the source's
/// session that added the last message both share, and how many they share.
/// The shared nodes are dropped from the tree (their events move to the
/// first node kept). Chosen so that the source growing later does not move
/// it.
fn graft_point(store: &Store, source: &str, tree: &mut Tree) -> Result<Option<Graft>> {
    let Some(head) = store.conversation(source)?.and_then(|c| c.head) else {
        return Ok(None);
    };
    let history = store.odb().history(&head)?;
    let mut k = 0;
    for (node, id) in tree.nodes.iter().zip(&history) {
        if blob_object(&node.message)?.id() != *id {
            break;
        }
        k += 1;
    }
    if k == 0 || k == tree.nodes.len() {
        return Ok(None);
    }
    let mut at = head;
    loop {
        let s = store.odb().session(&at)?;
        match s.first_parent() {
            Some(p) if s.messages.base >= k as u64 => at = p,
            _ => break,
        }
    }
    let shared: Vec<Node> = tree.nodes.drain(..k).collect();
    let mut events: Vec<Value> = shared.into_iter().flat_map(|n| n.events).collect();
    events.append(&mut tree.nodes[0].events);
    tree.nodes[0].events = events;
    tree.nodes[0].parent = None;
    let mut counted = HashMap::new();
    count_compactions(store, at, &mut counted)?;
    Ok(Some(Graft {
        session: at,
        shared: k as u64,
        compactions: counted[&at],
    }))
}

/// Counts, for every session on the first-parent chain ending at `head`
/// that `counted` does not hold yet, the compaction sessions from the root
/// to it (itself included), and records it there. Returns those sessions,
/// oldest first, with their last added message, history length and count.
fn count_compactions(
    store: &Store,
    head: ObjectId,
    counted: &mut HashMap<ObjectId, u32>,
) -> Result<Vec<(Option<ObjectId>, u64, u32)>> {
    let mut chain = Vec::new();
    let mut at = Some(head);
    while let Some(id) = at {
        if counted.contains_key(&id) {
            break;
        }
        let s = store.odb().session(&id)?;
        at = s.first_parent();
        let last = s.messages.added.last().copied();
        chain.push((id, last, s.messages.len(), s.compaction.is_some()));
    }
    let mut count = at.map_or(0, |id| counted[&id]);
    let mut out = Vec::with_capacity(chain.len());
    for (id, last, len, compaction) in chain.into_iter().rev() {
        count += u32::from(compaction);
        counted.insert(id, count);
        out.push((last, len, count));
    }
    Ok(out)
}

/// Where an earlier import ended each session the store holds for this
/// conversation, its forks and its subagents (see [`Boundary`]).
fn existing_boundaries(
    store: &Store,
    refs: &[(RefName, RefTarget)],
    name: &str,
) -> Result<HashSet<Boundary>> {
    let mut out = HashSet::new();
    let mut counted = HashMap::new();
    for (r, t) in refs {
        let short = match r {
            RefName::Conversation(n) | RefName::Tag(n) => n.as_str(),
            _ => continue,
        };
        let short = short.strip_suffix(IMPORTED).unwrap_or(short);
        let ours = short == name
            || short
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(".fork-") || rest.starts_with(".agent-"));
        let RefTarget::Session(id) = t.clone() else {
            continue;
        };
        if !ours {
            continue;
        }
        for (last, len, count) in count_compactions(store, id, &mut counted)? {
            if let Some(last) = last {
                out.insert((last, len, count));
            }
        }
    }
    Ok(out)
}
