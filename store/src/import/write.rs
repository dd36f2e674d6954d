//! What an import does to the store: each tree's sessions are grafted onto
//! what earlier imports of the same source wrote, and written with their
//! refs and records in batched transactions, the last one synced.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::object::{EncodedObject, ObjectKind};
use crate::odb::Durability;
use crate::refs::{ConversationUpdate, PreviousValue, RefEdit, RefName, RefTarget, ReflogEntry};
use crate::store::{Store, Transaction};

use super::builder::{blob_object, build, message_object, Boundary, Built, Earlier, Graft, Tail};
use super::*;

/// A tree an import wrote, as a catch-up goes on from it (`tail.rs`): the
/// tree, where its main line ends, and whether every ref went where the
/// tree named it (none redirected, left alone or behind).
#[derive(Debug)]
pub(super) struct Written {
    pub(super) tree: Tree,
    pub(super) tail: Option<Tail>,
    pub(super) own: bool,
    /// Nothing of the conversation in the store, before or after: no ref
    /// of its name, all its sessions held back.
    pub(super) fresh: bool,
}

pub(super) fn import_trees(
    store: &Store,
    format: Format,
    trees: Vec<Tree>,
    opts: &ImportOptions,
    report: &mut ImportReport,
    mut written: Option<&mut Vec<Written>>,
) -> Result<()> {
    // The batch not yet committed, with the objects left out of it as the
    // store had them (`commit`).
    let mut landing = Landing::default();
    let existing_refs = store.refs()?;
    let mut names_used: HashSet<String> = HashSet::new();
    let mut claimed: HashSet<RefName> = HashSet::new();
    // The sessions the trees built so far make: a later tree that begins
    // with them (an identical copy of a file) shares them as a fork would.
    let mut earlier = Earlier::default();
    if let Some(p) = &opts.progress {
        p.phase("importing conversations", Some(trees.len() as u64));
    }
    // The ref log, read when first needed.
    let mut ever_held: Option<Vec<ReflogEntry>> = None;
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
        let mut boundaries = existing_boundaries(store, &existing_refs, &tree.name)?;
        // A conversation the user renamed goes on under its new name.
        let main = RefName::conversation(&tree.name)?;
        let current = match store.get_ref(&main)? {
            Some(_) => None,
            None => renamed(store, &main, &mut ever_held)?,
        };
        if let Some(to) = &current {
            boundaries.extend(existing_boundaries(store, &existing_refs, to.short())?);
        }
        let graft = match tree.forked_from.clone() {
            Some(source) => {
                // Its source may be in the batch not yet written: write it,
                // or only the next import would find the graft (and rewrite
                // the fork then).
                if let Some((prev, spare)) = landing.pending.take() {
                    commit(store, prev, spare, Durability::NoSync)?;
                }
                graft_point(store, &source, &mut tree)?
            }
            None => None,
        };
        let keep = kept_head(store, current.as_ref().map_or(&tree.name, |c| c.short()))?;
        let copy = written.is_some().then(|| {
            let plain = current.is_none() && graft.is_none();
            (
                tree.clone(),
                plain,
                plain && boundaries.is_empty() && keep.is_none(),
            )
        });
        earlier.carried = carried_line(
            store,
            current.as_ref().map_or(&tree.name, |c| c.short()),
            &earlier.sessions,
        )?;
        let mut built = build(
            format,
            tree,
            &boundaries,
            &mut earlier,
            graft,
            keep,
            opts.finished,
            report,
        )?;
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
        // fast-forwards; `<name>.imported` once it would not (the user
        // moved the ref elsewhere, or the file no longer continues what an
        // import wrote); nowhere when the user archived or removed it.
        let mut refs = Vec::with_capacity(built.refs.len());
        let mut own = true;
        for (name, head, record) in std::mem::take(&mut built.refs) {
            let d = destination(
                store,
                format,
                &name,
                head,
                &built.first_parent,
                &mut ever_held,
            )?;
            own &= matches!(d, Destination::Own);
            match d {
                Destination::Own => refs.push((name, head, record)),
                Destination::Renamed(to) => {
                    let record = record.map(|(_, r)| (to.short().to_owned(), r));
                    refs.push((to, head, record));
                }
                Destination::Imported(alt, newly) => {
                    if let Some(why) = newly {
                        report.redirected.push((
                            name.short().to_owned(),
                            alt.short().to_owned(),
                            why,
                        ));
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
        if let (Some(w), Some((tree, plain, fresh))) = (written.as_deref_mut(), copy) {
            w.push(Written {
                tree,
                tail: built.tail.take(),
                own: own && plain,
                fresh: fresh && built.refs.is_empty(),
            });
        }
        land(store, built, &mut landing, report)?;
    }
    finish(store, landing, opts, report)
}

/// What the trees written so far leave for the next: the batch not yet
/// committed (with the objects left out of it as the store had them, see
/// `commit`), the objects queued, and the most recently active
/// conversation (ties: the later one), for HEAD.
#[derive(Default)]
struct Landing {
    pending: Option<(Transaction, Vec<EncodedObject>)>,
    queued: HashSet<ObjectId>,
    newest: Option<(i64, String)>,
}

/// Queues one tree's objects, refs and records, committing the batch
/// before.
fn land(
    store: &Store,
    built: Built,
    landing: &mut Landing,
    report: &mut ImportReport,
) -> Result<()> {
    let Landing {
        pending,
        queued,
        newest,
    } = landing;
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
    let mut spare = Vec::new();
    for o in built.objects {
        if !seen.insert(o.id()) {
            continue;
        }
        report.objects_considered += 1;
        if store.odb().contains(&o.id())? {
            spare.push(o);
        } else {
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
                *newest = Some((rec.updated_at, n.clone()));
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
        return Ok(());
    }
    let n_edits = tx.edits.len();
    if let Some((prev, spare)) = pending.take() {
        commit(store, prev, spare, Durability::NoSync)?;
    }
    *pending = Some((tx, spare));
    report.objects_written += new_objects;
    report.refs_moved += n_edits;
    Ok(())
}

/// Commits the last batch (synced unless `no_sync`) and points HEAD.
fn finish(
    store: &Store,
    landing: Landing,
    opts: &ImportOptions,
    report: &mut ImportReport,
) -> Result<()> {
    if let Some((tx, spare)) = landing.pending {
        let d = if opts.no_sync {
            Durability::NoSync
        } else {
            Durability::Sync
        };
        commit(store, tx, spare, d)?;
        if let Some((_, name)) = landing.newest {
            report.head = head_to_imported(store, &name, d)?.then_some(name);
        }
    }
    Ok(())
}

/// Writes a tree that continues what an earlier catch-up wrote
/// (`tail.rs`): its sessions go on from `graft`, the main line's last
/// written session, and nothing the store holds is read but the refs the
/// tree moves (no walk over the conversation's history). `None`, having
/// written nothing, when a ref is not where the tree fast-forwards it
/// (another writer moved it, the user took it over): the caller reads the
/// files again whole.
pub(super) fn import_tail_tree(
    store: &Store,
    format: Format,
    tree: Tree,
    graft: Option<Graft>,
    opts: &ImportOptions,
    report: &mut ImportReport,
) -> Result<Option<Option<Tail>>> {
    let mut built = build(
        format,
        tree,
        &HashSet::new(),
        &mut Earlier::default(),
        graft,
        None,
        false,
        report,
    )?;
    // Only the main line moves: a subagent's or fork's sessions would be
    // named and linked by the whole tree. (Without `graft`, a conversation
    // not in the store yet, all may still be held back.)
    let main_only = built.refs.len() == 1 && built.refs[0].2.is_some();
    let all_held = graft.is_none() && built.refs.is_empty();
    if !(main_only || all_held) {
        return Ok(None);
    }
    let mut ever_held = None;
    for (name, head, _) in &built.refs {
        if !matches!(
            destination(
                store,
                format,
                name,
                *head,
                &built.first_parent,
                &mut ever_held,
            )?,
            Destination::Own
        ) {
            return Ok(None);
        }
    }
    let tail = built.tail.take();
    let mut landing = Landing::default();
    land(store, built, &mut landing, report)?;
    finish(store, landing, opts, report)?;
    Ok(Some(tail))
}

/// Commits a batch. An object left out of it because the store had it may
/// be gone by the time the batch holds the write lock (gc pruned it, as
/// nothing named it yet): the batch is tried again with it (`spare` holds
/// them).
fn commit(
    store: &Store,
    mut tx: Transaction,
    mut spare: Vec<EncodedObject>,
    durability: Durability,
) -> Result<()> {
    loop {
        if spare.is_empty() {
            return store.transact(tx, durability).map(drop);
        }
        match store.transact(tx.clone(), durability) {
            Err(Error::MissingObject { named, .. } | Error::MissingRecordBlob { named, .. })
                if spare.iter().any(|o| o.id() == named) =>
            {
                let i = spare
                    .iter()
                    .position(|o| o.id() == named)
                    .expect("found just above");
                tx.objects.push(spare.swap_remove(i));
            }
            r => return r.map(drop),
        }
    }
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
    /// The ref the user renamed the branch's to (a fast-forward there).
    Renamed(RefName),
    /// `<name>.imported`; why, when this import starts following it.
    Imported(RefName, Option<Redirect>),
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
    ever_held: &mut Option<Vec<ReflogEntry>>,
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
        return Ok(Destination::Imported(alt, None));
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
        // Never moved otherwise, whoever put it there (an import with
        // `finished` or an older sessctl too: its line may be a file's that
        // was rewritten since, or that went on otherwise).
        Some(t) => Ok(match put_aside(store, &alt, ever_held)? {
            Some(why) => Destination::LeftAlone(alt_short, why),
            None => {
                let why = match t {
                    RefTarget::Session(cur) => redirect(store, format, name, cur, ever_held)?,
                    RefTarget::Symbolic(_) => Redirect::Moved,
                };
                Destination::Imported(alt, Some(why))
            }
        }),
        None => {
            if let Some(to) = renamed(store, name, ever_held)? {
                return Ok(
                    match destination(store, format, &to, head, first_parent, ever_held)? {
                        Destination::Own => Destination::Renamed(to),
                        d => d,
                    },
                );
            }
            Ok(match put_aside(store, name, ever_held)? {
                Some(why) => Destination::LeftAlone(name.short().to_owned(), why),
                None => Destination::Own,
            })
        }
    }
}

/// The ref `name`, which does not exist, was last renamed to (following
/// later renames of that one too), when that ref exists.
fn renamed(
    store: &Store,
    name: &RefName,
    ever_held: &mut Option<Vec<ReflogEntry>>,
) -> Result<Option<RefName>> {
    let log = reflog(store, ever_held)?;
    let mut at = name.clone();
    // Each step goes to a later operation: at most one per entry.
    for _ in 0..=log.len() {
        let Some(last) = log.iter().rev().find(|e| e.name == at) else {
            break;
        };
        if last.new.is_some() || last.reason != "rename" {
            break;
        }
        let Some(to) = log.iter().find(|e| {
            e.op == last.op
                && e.old.is_none()
                && e.new.is_some()
                && e.name != at
                && e.name != RefName::Head
        }) else {
            break;
        };
        at = to.name.clone();
    }
    if at == *name || !matches!(at, RefName::Conversation(_)) || store.get_ref(&at)?.is_none() {
        return Ok(None);
    }
    Ok(Some(at))
}

/// The ref log, read once.
fn reflog<'a>(store: &Store, log: &'a mut Option<Vec<ReflogEntry>>) -> Result<&'a [ReflogEntry]> {
    if log.is_none() {
        *log = Some(store.reflog_entries()?);
    }
    Ok(log.as_deref().unwrap_or_default())
}

/// Why `name`, which does not exist, must not be made again: the user
/// archived it, or removed it (the ref log has seen it).
fn put_aside(
    store: &Store,
    name: &RefName,
    ever_held: &mut Option<Vec<ReflogEntry>>,
) -> Result<Option<&'static str>> {
    if let RefName::Conversation(n) = name {
        if store.get_ref(&RefName::archived(n)?)?.is_some() {
            return Ok(Some("archived"));
        }
    }
    Ok(reflog(store, ever_held)?
        .iter()
        .any(|e| e.name == *name)
        .then_some("removed"))
}

/// Why the ref `name`, at `cur`, which the import would not fast-forward,
/// is not the import's to move: who put it there, as its ref log tells
/// (from its newest entry back past the renames, archives and unarchives
/// that carried its value from another name). Where the log does not tell
/// (it came with a clone, pull or bundle), whether an import of `format`
/// wrote `cur`.
fn redirect(
    store: &Store,
    format: Format,
    name: &RefName,
    cur: ObjectId,
    ever_held: &mut Option<Vec<ReflogEntry>>,
) -> Result<Redirect> {
    let log = reflog(store, ever_held)?;
    let mut at = name.clone();
    let mut before = u64::MAX;
    let mut reason = None;
    // Each step goes to an earlier operation: at most one per entry.
    for _ in 0..=log.len() {
        let Some(e) = log.iter().rev().find(|e| e.name == at && e.op < before) else {
            break;
        };
        let carried =
            e.old.is_none() && matches!(e.reason.as_str(), "rename" | "archive" | "unarchive");
        let from = log.iter().find(|d| {
            d.op == e.op && d.new.is_none() && d.old.is_some() && d.old == e.new && d.name != at
        });
        match from {
            Some(d) if carried => {
                at = d.name.clone();
                before = e.op;
            }
            _ => {
                reason = Some(e.reason.as_str());
                break;
            }
        }
    }
    Ok(match reason {
        Some("import") => Redirect::Rewritten,
        None | Some("clone" | "pull" | "push" | "unbundle") => {
            if imported_from(store, cur, format)? {
                Redirect::Rewritten
            } else {
                Redirect::Moved
            }
        }
        Some(_) => Redirect::Moved,
    })
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
        // The same object (the same line, or, where an older sessctl
        // imported the source, the same blob), or another spelling of the
        // same message (a fork re-serializes the lines it copies): the
        // source's message stands for it.
        if message_object(node)?.id() != *id
            && blob_object(&node.message)?.id() != *id
            && store.odb().blob(id)? != node.message
        {
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
    let mut events: Vec<SourceLine> = shared.into_iter().flat_map(|n| n.events).collect();
    events.append(&mut tree.nodes[0].events);
    tree.nodes[0].events = events;
    tree.nodes[0].parent = None;
    let mut counted = HashMap::new();
    count_compactions(store, at, &mut counted)?;
    Ok(Some(Graft {
        session: at,
        shared: k as u64,
        compactions: counted[&at],
        resumed: None,
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

/// Where the conversation `name` an earlier import made ends now (the
/// `.imported` ref once the import follows that), for the builder to keep
/// its line.
fn kept_head(store: &Store, name: &str) -> Result<Option<Boundary>> {
    for n in [format!("{name}{IMPORTED}"), name.to_owned()] {
        let Ok(r) = RefName::conversation(&n) else {
            continue;
        };
        if let Some(RefTarget::Session(id)) = store.get_ref(&r)? {
            let chain = count_compactions(store, id, &mut HashMap::new())?;
            return Ok(chain
                .last()
                .and_then(|&(last, len, count)| last.map(|l| (l, len, count))));
        }
    }
    Ok(None)
}

/// Whether the store holds the conversation `name` (its `.imported` ref
/// once the import follows that) as a sessctl before `Earlier` wrote it,
/// when it began with sessions an earlier tree of the import built: a
/// session on its line after those (before any the user added on it)
/// carries the conversation of one of them.
fn carried_line(store: &Store, name: &str, earlier: &HashSet<ObjectId>) -> Result<bool> {
    if earlier.is_empty() {
        return Ok(false);
    }
    for n in [format!("{name}{IMPORTED}"), name.to_owned()] {
        let Ok(r) = RefName::conversation(&n) else {
            continue;
        };
        if let Some(RefTarget::Session(head)) = store.get_ref(&r)? {
            let mut at = Some(head);
            while let Some(id) = at.filter(|id| !earlier.contains(id)) {
                let s = store.odb().session(&id)?;
                if s.conversation.is_some_and(|c| earlier.contains(&c)) {
                    return Ok(true);
                }
                at = s.first_parent();
            }
            return Ok(false);
        }
    }
    Ok(false)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refs::large_fields;
    use crate::refs::{ConversationRecord, ConversationStatus};

    /// gc prunes a blob the import found in the store before the batch
    /// naming it holds the write lock: the batch goes in with the blob.
    #[test]
    fn a_blob_gone_since_the_import_looked_is_written_with_the_batch() {
        let store = Store::in_memory().expect("a store");
        let big = Value::String("p".repeat(large_fields::LARGE_FIELD_BYTES * 2));
        let blob = blob_object(&big).expect("a blob");
        let mut metadata = std::collections::BTreeMap::new();
        metadata.insert(
            "system".to_owned(),
            serde_json::json!({"sessctl_blob": blob.id().to_hex(), "bytes": 9000}),
        );
        let tx = Transaction {
            reason: "import".into(),
            conversations: vec![ConversationUpdate {
                name: "c".into(),
                record: Some(ConversationRecord {
                    conversation_id: None,
                    title: None,
                    default_preset_id: None,
                    metadata,
                    status: ConversationStatus::Active,
                    created_at: 0,
                    updated_at: 0,
                }),
            }],
            ..Transaction::default()
        };
        let id = blob.id();
        commit(&store, tx, vec![blob], Durability::NoSync).expect("committed");
        assert!(store.odb().contains(&id).expect("read"));
        assert!(store.conversation("c").expect("read").is_some());
    }
}
