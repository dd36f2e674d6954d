//! The builder: one source tree becomes sessions, the same way for every
//! format (see the module docs of `import`): where sessions start, which
//! branch is the main line, forks and subagents, and the objects to write.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::{json, Value};

use crate::error::Result;
use crate::hash::ObjectId;
use crate::object::{
    blob, Compaction, EncodedObject, MessageDelta, ObjectKind, Raw, RunSummary, Session,
    SessionMetadata, SessionStatus, SessionType, Usage,
};
use crate::refs::{large_fields, ConversationRecord, ConversationStatus, RefName};

use super::*;

pub(super) fn blob_object(v: &Value) -> Result<EncodedObject> {
    Ok(EncodedObject::new(ObjectKind::Blob, blob::encode_value(v)?))
}

/// The object a node's message is kept in where its conversation keeps
/// messages raw: its source lines byte for byte, or, for a message that is
/// no line of its own, a blob of its value.
pub(super) fn message_object(node: &Node) -> Result<EncodedObject> {
    match &node.raw {
        Some(lines) => {
            let raw = Raw::from_parsed_lines(lines);
            debug_assert_eq!(
                raw.value().ok().as_ref(),
                Some(&node.message),
                "a node's raw lines read as its message"
            );
            Ok(raw.encode())
        }
        None => blob_object(&node.message),
    }
}

/// A session being planned: which nodes it adds, on which parent.
#[derive(Debug)]
pub(super) struct Plan {
    nodes: Vec<usize>,
    parent: Option<usize>,
    base: u64,
    compaction: bool,
    branch: usize,
    spawned_by: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BranchKind {
    Main,
    Fork,
    Agent(String),
}

#[derive(Debug)]
pub(super) struct Branch {
    kind: BranchKind,
    first_node: usize,
    /// The branch's conversation id comes from this branch's (fork) or
    /// another's (agent: its spawner's).
    conv_from: Option<usize>,
}

/// A branch's ref, head, and (for a conversation) its name and record.
pub(super) type BranchRef = (RefName, ObjectId, Option<(String, ConversationRecord)>);

/// Sessions (and their objects) one tree becomes.
#[derive(Debug, Default)]
pub(super) struct Built {
    pub(super) objects: Vec<EncodedObject>,
    pub(super) sessions: usize,
    pub(super) messages: usize,
    pub(super) forks: usize,
    pub(super) compactions: usize,
    /// (ref, head, record) per branch with a ref.
    pub(super) refs: Vec<BranchRef>,
    /// Each new session's first parent, to tell whether a head descends
    /// from a session before they are written.
    pub(super) first_parent: HashMap<ObjectId, Option<ObjectId>>,
    /// Where the main line ends (`None` when nothing of it is written).
    pub(super) tail: Option<Tail>,
}

/// Where an earlier import ended a session: its last message, its history
/// length, and how many compaction sessions its first-parent chain holds
/// (itself included). The count tells apart two places with the same
/// message and length, which a compaction between them makes possible.
pub(super) type Boundary = (ObjectId, u64, u32);

/// Where a forked copy joins its source: the source's session, the number
/// of messages both share, and the compactions on that session's chain.
#[derive(Debug, Clone, Copy)]
pub(super) struct Graft {
    pub(super) session: ObjectId,
    pub(super) shared: u64,
    pub(super) compactions: u32,
    /// Set when the tree is the rest of a conversation an earlier catch-up
    /// wrote (`tail.rs`), not a fork: what that conversation's first
    /// sessions fixed.
    pub(super) resumed: Option<Resumed>,
}

/// What a catch-up's tree continues (see [`Graft::resumed`]): the
/// conversation id its sessions carry, and the times of the nodes already
/// written (the earliest of all, the latest of the main line).
#[derive(Debug, Clone, Copy)]
pub(super) struct Resumed {
    pub(super) conversation: Option<ObjectId>,
    pub(super) first_ts: Option<i64>,
    pub(super) last_ts: Option<i64>,
}

/// Where a build left its main line, for a catch-up to go on from
/// (`tail.rs`): which nodes were held back, the main line's last written
/// node and session, and the times the next build needs.
#[derive(Debug, Clone)]
pub(super) struct Tail {
    pub(super) held: Vec<bool>,
    pub(super) head_node: usize,
    pub(super) head: Graft,
    /// Whether the build can be continued: only a main line and subagents
    /// (no forks, whose records would change with the main one's), no held
    /// node at a place a stored session ends, no blobs kept from an older
    /// sessctl.
    pub(super) resumable: bool,
}

/// What the trees before this one in the same import built: a tree whose
/// branch begins with the same sessions (an identical copy of a file, two
/// chats that open alike) shares them, as a fork shares its source's, and
/// starts its own conversation at its first session of its own; a branch
/// that is nothing but shared sessions has no conversation id yet, as a
/// plain fork (objects-format.md, "Imported sessions").
#[derive(Debug, Default)]
pub(super) struct Earlier {
    /// Their sessions (the builder adds each tree's).
    pub(super) sessions: HashSet<ObjectId>,
    /// The store holds this tree's line as a sessctl before this rule wrote
    /// it: its sessions after the shared ones carry the conversation of
    /// those. They are built so again, so that their ids stay and a second
    /// import writes nothing; only its record no longer claims that id.
    pub(super) carried: bool,
}

/// Turns one tree into sessions.
#[allow(clippy::too_many_arguments)] // one import's state, threaded through
pub(super) fn build(
    format: Format,
    mut tree: Tree,
    boundaries: &HashSet<Boundary>,
    earlier: &mut Earlier,
    graft: Option<Graft>,
    keep: Option<Boundary>,
    finished: bool,
    report: &mut ImportReport,
) -> Result<Built> {
    let n = tree.nodes.len();
    let mut by_id: HashMap<String, usize> = HashMap::with_capacity(n);
    for (i, node) in tree.nodes.iter().enumerate() {
        by_id.entry(node.id.clone()).or_insert(i);
    }
    let mut parent: Vec<Option<usize>> = vec![None; n];
    for (i, node) in tree.nodes.iter().enumerate() {
        if let Some(p) = &node.parent {
            match by_id.get(p) {
                Some(&j) if j != i => parent[i] = Some(j),
                _ => report.dangling.push((node.file.clone(), p.clone())),
            }
        }
    }
    // A cycle (a corrupt source) would hide its nodes from every root: cut
    // it where it is found, keeping the node as a root.
    for i in 0..n {
        let mut steps = 0;
        let mut j = i;
        while let Some(p) = parent[j] {
            steps += 1;
            if steps > n {
                parent[i] = None;
                break;
            }
            j = p;
        }
    }
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = *p {
            children[p].push(i);
        }
    }
    // Order: parents before children.
    let roots: Vec<usize> = (0..n).filter(|&i| parent[i].is_none()).collect();
    let mut order = Vec::with_capacity(n);
    {
        let mut stack: Vec<usize> = roots.iter().rev().copied().collect();
        while let Some(i) = stack.pop() {
            order.push(i);
            stack.extend(children[i].iter().rev());
        }
    }
    // The newest leaf under each node: (timestamp, source order).
    let mut newest: Vec<(i64, usize)> = (0..n).map(|i| (tree.nodes[i].timestamp, i)).collect();
    for &i in order.iter().rev() {
        if let Some(&best) = children[i].iter().map(|&c| &newest[c]).max() {
            newest[i] = best;
        }
    }
    let mut depth = vec![0u64; n];
    // Compaction sessions on the way to each node (see `Boundary`).
    let mut compactions = vec![0u32; n];
    for &i in &order {
        depth[i] = match parent[i] {
            Some(p) if !tree.nodes[i].compaction => depth[p] + 1,
            None if i == 0 && !tree.nodes[i].compaction => graft.map_or(0, |g| g.shared) + 1,
            _ => 1,
        };
        compactions[i] = match parent[i] {
            Some(p) => compactions[p] + u32::from(tree.nodes[i].compaction),
            None if i == 0 => graft.map_or(0, |g| g.compactions),
            None => 0,
        };
    }
    // Each message's object: its raw lines, except where an earlier import
    // (by a sessctl before raw objects) kept the conversation's messages as
    // blobs: the messages those sessions hold stay blobs, so that their
    // sessions keep their ids and what comes after appends to them
    // (objects-format.md, "Imported sessions").
    // With no place an earlier session ends to find (a catch-up going on
    // from its last written session, `tail.rs`), only the messages of the
    // sessions written are encoded, after planning: a turn held back is not
    // hashed again at every catch-up.
    let lazy = boundaries.is_empty() && keep.is_none();
    let mut objects: Vec<Option<EncodedObject>> = vec![None; n];
    let mut legacy = vec![false; n];
    if !lazy {
        let all = tree
            .nodes
            .iter()
            .map(message_object)
            .collect::<Result<Vec<_>>>()?;
        legacy = legacy_nodes(&tree, &parent, &depth, &compactions, &all, boundaries, keep)?;
        for ((slot, mut o), (node, old)) in objects
            .iter_mut()
            .zip(all)
            .zip(tree.nodes.iter().zip(&legacy))
        {
            if *old && o.kind() != ObjectKind::Blob {
                o = blob_object(&node.message)?;
            }
            *slot = Some(o);
        }
    }
    let legacy_tree = legacy.iter().any(|l| *l);
    // Lazy: ids are read only for written nodes, set once they are known.
    let mut blob_ids: Vec<ObjectId> = objects
        .iter()
        .map(|o| {
            o.as_ref()
                .map_or(ObjectId::from_bytes([0; 32]), EncodedObject::id)
        })
        .collect();
    // The main line is the branch with the newest leaf, except that a
    // conversation an earlier import made keeps its line (the one its head
    // is on): a branch that appears later (a rewind) becomes a fork, and the
    // ref only ever fast-forwards.
    let mut on_line = vec![false; n];
    if let Some(k) = keep {
        let mut at = (0..n).find(|&i| (blob_ids[i], depth[i], compactions[i]) == k);
        while let Some(i) = at {
            on_line[i] = true;
            at = parent[i];
        }
    }
    let line_key = |i: usize| (on_line[i], newest[i]);
    // Partition into sessions and branches.
    let mut branches: Vec<Branch> = Vec::new();
    let mut plans: Vec<Plan> = Vec::new();
    let mut session_of = vec![usize::MAX; n];
    let main_root = roots
        .iter()
        .copied()
        .filter(|&r| tree.nodes[r].subagent.is_none())
        .max_by_key(|&r| line_key(r));
    // Roots: the main one first, then other roots, then subagents' roots
    // (whose spawner must have its session first).
    let mut root_order: Vec<usize> = main_root.into_iter().collect();
    root_order.extend(
        roots
            .iter()
            .copied()
            .filter(|&r| Some(r) != main_root && tree.nodes[r].subagent.is_none()),
    );
    root_order.extend(
        roots
            .iter()
            .copied()
            .filter(|&r| tree.nodes[r].subagent.is_some()),
    );
    let spawner_of = |key: &str, session_of: &[usize]| -> Option<usize> {
        tree.spawners
            .get(key)
            .and_then(|id| by_id.get(id))
            .map(|&j| session_of[j])
            .filter(|&s| s != usize::MAX)
    };
    for root in root_order {
        let mut stack = vec![root];
        while let Some(i) = stack.pop() {
            let node = &tree.nodes[i];
            let p = parent[i];
            let continues = match p {
                None => false,
                Some(p) => {
                    !node.user_prompt
                        && !node.compaction
                        && !tree.nodes[p].turn_end
                        && children[p].len() == 1
                        && tree.nodes[p].subagent == node.subagent
                        && !boundaries.contains(&(blob_ids[p], depth[p], compactions[p]))
                }
            };
            if continues {
                let s = session_of[p.expect("a continuation has a parent")];
                plans[s].nodes.push(i);
                session_of[i] = s;
            } else {
                let parent_session = p.map(|p| session_of[p]);
                let branch = match (p, &node.subagent) {
                    (Some(p), sub) if tree.nodes[p].subagent != *sub && sub.is_some() => {
                        let key = sub.clone().expect("matched is_some");
                        branches.push(Branch {
                            kind: BranchKind::Agent(key),
                            first_node: i,
                            conv_from: Some(plans[session_of[p]].branch),
                        });
                        branches.len() - 1
                    }
                    (Some(p), _) => {
                        let pb = plans[session_of[p]].branch;
                        let siblings: Vec<usize> = children[p]
                            .iter()
                            .copied()
                            .filter(|&c| tree.nodes[c].subagent == tree.nodes[p].subagent)
                            .collect();
                        let main_child = siblings.iter().copied().max_by_key(|&c| line_key(c));
                        if siblings.len() > 1 && main_child != Some(i) {
                            branches.push(Branch {
                                kind: BranchKind::Fork,
                                first_node: i,
                                conv_from: None,
                            });
                            branches.len() - 1
                        } else {
                            pb
                        }
                    }
                    (None, Some(key)) => {
                        let spawner = spawner_of(key, &session_of);
                        branches.push(Branch {
                            kind: BranchKind::Agent(key.clone()),
                            first_node: i,
                            conv_from: Some(spawner.map_or(0, |s| plans[s].branch)),
                        });
                        branches.len() - 1
                    }
                    (None, None) => {
                        branches.push(Branch {
                            kind: if branches.is_empty() {
                                BranchKind::Main
                            } else {
                                BranchKind::Fork
                            },
                            first_node: i,
                            conv_from: None,
                        });
                        branches.len() - 1
                    }
                };
                let spawned_by = match (&node.subagent, p) {
                    (Some(_), Some(p)) if tree.nodes[p].subagent != node.subagent => {
                        Some(session_of[p])
                    }
                    (Some(key), None) => spawner_of(key, &session_of),
                    _ => None,
                };
                plans.push(Plan {
                    nodes: vec![i],
                    parent: parent_session,
                    base: match p {
                        Some(p) if !node.compaction => depth[p],
                        None if i == 0 && !node.compaction => graft.map_or(0, |g| g.shared),
                        _ => 0,
                    },
                    compaction: node.compaction && p.is_some(),
                    branch,
                    spawned_by,
                });
                session_of[i] = plans.len() - 1;
            }
            stack.extend(children[i].iter().rev());
        }
    }
    let resumed = graft.and_then(|g| g.resumed);
    if branches.is_empty() {
        if resumed.is_none() {
            return Ok(Built::default());
        }
        // The rest of a conversation with no message yet: its record may
        // still change (entries after its last message).
        branches.push(Branch {
            kind: BranchKind::Main,
            first_node: 0,
            conv_from: None,
        });
    }
    // A session holding a message still being written is held back, with
    // every session after it or spawned from it (plans come after their
    // parent and spawner).
    let mut held = vec![false; plans.len()];
    if !finished {
        for (pi, plan) in plans.iter().enumerate() {
            held[pi] = plan.nodes.iter().any(|&i| tree.nodes[i].open)
                || plan.parent.is_some_and(|p| held[p])
                || plan.spawned_by.is_some_and(|p| held[p]);
        }
    }
    if lazy {
        for (plan, h) in plans.iter().zip(&held) {
            for &i in plan.nodes.iter().filter(|_| !*h) {
                let o = message_object(&tree.nodes[i])?;
                blob_ids[i] = o.id();
                objects[i] = Some(o);
            }
        }
    }
    let objects: Vec<EncodedObject> = objects
        .into_iter()
        .map(|o| o.unwrap_or_else(|| EncodedObject::new(ObjectKind::Blob, Vec::new())))
        .collect();
    let held_nodes: usize = plans
        .iter()
        .zip(&held)
        .filter(|(_, h)| **h)
        .map(|(p, _)| p.nodes.len())
        .sum();
    report.held_back += held_nodes;
    // Fork names follow the order of their first node's source id.
    let mut fork_order: Vec<usize> = (0..branches.len())
        .filter(|&b| branches[b].kind == BranchKind::Fork)
        .collect();
    fork_order.sort_by(|&a, &b| {
        tree.nodes[branches[a].first_node]
            .id
            .cmp(&tree.nodes[branches[b].first_node].id)
    });
    let mut branch_name: Vec<String> = vec![tree.name.clone(); branches.len()];
    for (k, &b) in fork_order.iter().enumerate() {
        branch_name[b] = format!("{}.fork-{}", tree.name, k + 1);
    }
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for (b, br) in branches.iter().enumerate() {
        if let BranchKind::Agent(key) = &br.kind {
            // Several sidechains can share a key: number the later ones.
            let base = format!("{}.agent-{}", tree.name, sanitize_name(key, 64));
            let mut name = base.clone();
            let mut k = 2;
            while !taken.insert(name.clone()) {
                name = format!("{base}-{k}");
                k += 1;
            }
            branch_name[b] = name;
        }
    }
    // Encode in plan order: a plan's parent and spawner come before it.
    let mut built = Built {
        messages: n - held_nodes,
        forks: fork_order.len() + usize::from(graft.is_some_and(|g| g.resumed.is_none())),
        ..Built::default()
    };
    let mut session_ids: Vec<ObjectId> = Vec::with_capacity(plans.len());
    let mut conv_id: Vec<Option<ObjectId>> = vec![None; branches.len()];
    // The conversation the sessions a branch shares with an earlier tree
    // carry (theirs), while it has no session of its own yet.
    let mut shared_conv: Vec<Option<ObjectId>> = vec![None; branches.len()];
    let mut head: Vec<Option<usize>> = vec![None; branches.len()];
    let mut root_extra = std::mem::take(&mut tree.root_extra);
    if let Some(r) = resumed {
        // The main line's id was fixed by its first session, written before.
        conv_id[0] = r.conversation;
    }
    for (pi, plan) in plans.iter().enumerate() {
        if held[pi] {
            // Never read: whatever names it is held back too.
            session_ids.push(ObjectId::from_bytes([0; 32]));
            continue;
        }
        let nodes: Vec<&Node> = plan.nodes.iter().map(|&i| &tree.nodes[i]).collect();
        let added: Vec<ObjectId> = plan.nodes.iter().map(|&i| blob_ids[i]).collect();
        let mut extra = BTreeMap::new();
        extra.insert("source".to_owned(), json!(format.as_str()));
        if let Some(s) = &tree.source_session {
            extra.insert("source_session".to_owned(), json!(s));
        }
        let mut events = serde_json::Map::new();
        let mut merged = serde_json::Map::new();
        for (&i, node) in plan.nodes.iter().zip(&nodes) {
            // A raw message's entries are kept as their lines' exact text,
            // and its merged lines are in the raw object itself.
            let raw = objects[i].kind() == ObjectKind::Raw;
            if !node.events.is_empty() {
                let kept = node.events.iter().map(|e| e.kept(raw)).collect();
                events.insert(node.id.clone(), Value::Array(kept));
            }
            if !node.merged.is_empty() && !raw {
                merged.insert(node.id.clone(), Value::Array(node.merged.clone()));
            }
        }
        if !events.is_empty() {
            extra.insert("events".to_owned(), Value::Object(events));
        }
        if !merged.is_empty() {
            extra.insert("merged_lines".to_owned(), Value::Object(merged));
        }
        if pi == 0 {
            extra.append(&mut root_extra);
        }
        let mut usage = Usage::default();
        let (mut cache_read, mut cache_write) = (0u64, 0u64);
        let mut model = None;
        for node in &nodes {
            if let Some(u) = node.usage {
                usage.total_tokens = usage.total_tokens.saturating_add(u.total_tokens);
                usage.prompt_tokens = usage.prompt_tokens.saturating_add(u.prompt_tokens);
                usage.completion_tokens =
                    usage.completion_tokens.saturating_add(u.completion_tokens);
                usage.requests = usage.requests.saturating_add(u.requests);
            }
            cache_read = cache_read.saturating_add(node.cache_read_tokens);
            cache_write = cache_write.saturating_add(node.cache_write_tokens);
            if node.model.is_some() {
                model = node.model.as_deref();
            }
        }
        // What the run summary has no field for (objects-format.md,
        // "Imported sessions").
        let mut detail = serde_json::Map::new();
        if cache_read > 0 {
            detail.insert("cache_read_tokens".to_owned(), json!(cache_read));
        }
        if cache_write > 0 {
            detail.insert("cache_write_tokens".to_owned(), json!(cache_write));
        }
        if let Some(m) = model {
            detail.insert("model".to_owned(), json!(m));
        }
        if !detail.is_empty() {
            extra.insert("usage".to_owned(), Value::Object(detail));
        }
        let first_ts = nodes[0].timestamp;
        let last_ts = nodes.iter().map(|n| n.timestamp).max().unwrap_or(first_ts);
        let branch = &branches[plan.branch];
        let mut from = plan.branch;
        let mut hops = 0;
        while let Some(f) = branches[from].conv_from {
            if f == from || hops > branches.len() {
                break;
            }
            from = f;
            hops += 1;
        }
        // A branch of its own (a main line or fork) still without a
        // session of its own first tries its session as the one an earlier
        // tree built (carrying that tree's conversation); an agent carries
        // its spawner's conversation, shared or its own.
        let own_start = branch.conv_from.is_none() && conv_id[plan.branch].is_none();
        let conversation = if own_start {
            shared_conv[plan.branch]
        } else {
            conv_id[from].or(shared_conv[from])
        };
        // A grafted fork's first session continues the source's session.
        let parent_id = match (plan.parent, graft) {
            (Some(p), _) => Some(session_ids[p]),
            (None, Some(g)) if plan.nodes[0] == 0 => Some(g.session),
            _ => None,
        };
        let session = Session {
            parents: parent_id.into_iter().collect(),
            conversation,
            status: SessionStatus::Committed,
            created_at: first_ts,
            title: None,
            run: RunSummary {
                duration_ms: u64::try_from(last_ts - first_ts).unwrap_or(0),
                usage,
            },
            messages: MessageDelta {
                base: plan.base,
                added: added.clone(),
            },
            display_messages: MessageDelta {
                base: plan.base,
                added,
            },
            context_state: None,
            environment_state: None,
            metadata: SessionMetadata {
                session_type: if matches!(branch.kind, BranchKind::Agent(_)) {
                    SessionType::AsyncSubagent
                } else {
                    SessionType::Agent
                },
                transport: Some("import".to_owned()),
                spawned_by: plan.spawned_by.map(|s| session_ids[s]),
                preset_id: None,
                extra,
            },
            compaction: match (plan.compaction, parent_id, plan.parent) {
                (true, Some(pid), Some(pp)) => Some(Compaction {
                    session: pid,
                    messages: depth[*plans[pp].nodes.last().expect("plans are not empty")],
                    summary: blob_ids[plan.nodes[0]],
                }),
                _ => None,
            },
        };
        if session.compaction.is_some() {
            built.compactions += 1;
        }
        let mut o = session.encode()?;
        let mut shared = false;
        if own_start && conversation.is_some() && earlier.carried {
            // Built as it was (see `Earlier::carried`).
            shared = true;
        } else if own_start {
            if earlier.sessions.contains(&o.id()) {
                shared = true;
            } else if conversation.is_some() {
                // Its first session of its own starts its conversation.
                let mut session = session;
                session.conversation = None;
                o = session.encode()?;
            }
        }
        let id = o.id();
        earlier.sessions.insert(id);
        built.first_parent.insert(id, parent_id);
        built
            .objects
            .extend(plan.nodes.iter().map(|&i| objects[i].clone()));
        built.objects.push(o);
        session_ids.push(id);
        if shared {
            shared_conv[plan.branch] = Some(conversation.unwrap_or(id));
        } else if own_start {
            conv_id[plan.branch] = Some(id);
        }
        // Plans of a branch follow its path, so the last is its head.
        head[plan.branch] = Some(pi);
    }
    built.sessions = held.iter().filter(|h| !**h).count();
    let own_first = tree.nodes.iter().map(|n| n.timestamp).min();
    let first_ts = match resumed.and_then(|r| r.first_ts) {
        Some(t) => own_first.map_or(t, |o| o.min(t)),
        None => own_first.unwrap_or(0),
    };
    // The main line's last written node, for a catch-up to go on from.
    if let Some(h) = head[0] {
        let mut node_held = vec![false; n];
        for (plan, h) in plans.iter().zip(&held) {
            for &i in &plan.nodes {
                node_held[i] = *h;
            }
        }
        let last = *plans[h].nodes.last().expect("plans are not empty");
        let resumable = branches[0].kind == BranchKind::Main
            && branches[1..]
                .iter()
                .all(|b| matches!(b.kind, BranchKind::Agent(_)))
            && !legacy_tree
            && !earlier.carried
            && (0..n).all(|i| {
                !node_held[i] || !boundaries.contains(&(blob_ids[i], depth[i], compactions[i]))
            });
        let main_last = plans
            .iter()
            .zip(&held)
            .filter(|(p, h)| p.branch == 0 && !**h)
            .flat_map(|(p, _)| p.nodes.iter().map(|&i| tree.nodes[i].timestamp))
            .max();
        let committed_first = (0..n)
            .filter(|&i| !node_held[i])
            .map(|i| tree.nodes[i].timestamp)
            .min();
        built.tail = Some(Tail {
            held: node_held,
            head_node: last,
            head: Graft {
                session: session_ids[h],
                shared: depth[last],
                compactions: compactions[last],
                resumed: Some(Resumed {
                    conversation: conv_id[0],
                    first_ts: opt_min(committed_first, resumed.and_then(|r| r.first_ts)),
                    last_ts: opt_max(main_last, resumed.and_then(|r| r.last_ts)),
                }),
            },
            resumable,
        });
    }
    for (b, br) in branches.iter().enumerate() {
        // The rest of a conversation whose new sessions are all held back:
        // its ref stays, its record is made anew.
        let head_id = match (head[b], graft.filter(|g| g.resumed.is_some() && b == 0)) {
            (Some(h), _) => session_ids[h],
            (None, Some(g)) => g.session,
            (None, None) => continue,
        };
        let name = &branch_name[b];
        let last_ts = plans
            .iter()
            .zip(&held)
            .filter(|(p, h)| p.branch == b && !**h)
            .map(|(p, _)| p)
            .flat_map(|p| p.nodes.iter().map(|&i| tree.nodes[i].timestamp))
            .max();
        let last_ts = match resumed.filter(|_| b == 0) {
            Some(r) => opt_max(last_ts, r.last_ts),
            None => last_ts,
        }
        .unwrap_or(first_ts);
        match &br.kind {
            BranchKind::Agent(_) => built.refs.push((RefName::tag(name)?, head_id, None)),
            kind => {
                let created_at = if *kind == BranchKind::Main {
                    first_ts
                } else {
                    tree.nodes[br.first_node].timestamp
                };
                let mut metadata = tree.metadata.clone();
                if !tree.trailing.is_empty() {
                    let kept = tree.trailing.iter().map(|e| e.kept(!legacy_tree)).collect();
                    metadata.insert("trailing_events".to_owned(), Value::Array(kept));
                }
                if *kind == BranchKind::Fork {
                    metadata.insert("forked_from".to_owned(), json!(tree.name));
                }
                // Large source fields (a system prompt) are kept as blobs.
                let mut large = Vec::new();
                let taken = large_fields::externalize(&mut metadata, &mut |v| {
                    let o = blob_object(v).ok()?;
                    let id = o.id();
                    large.push(o);
                    Some(id)
                });
                debug_assert_eq!(taken.len(), large.len());
                built.objects.extend(large);
                let record = ConversationRecord {
                    conversation_id: conv_id[b],
                    title: tree.title.clone(),
                    default_preset_id: None,
                    metadata,
                    status: ConversationStatus::Active,
                    created_at,
                    updated_at: last_ts.max(created_at),
                };
                built.refs.push((
                    RefName::conversation(name)?,
                    head_id,
                    Some((name.clone(), record)),
                ));
            }
        }
    }
    Ok(built)
}

fn opt_min(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn opt_max(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The nodes whose messages an earlier import kept as blobs (a sessctl
/// before raw objects): every node a session the store holds ends at (a
/// boundary, or the kept head), found by its blob's id, and the nodes
/// before it. Blob ids are computed only when some boundary is not found
/// by the nodes' own objects, so that a conversation kept raw pays nothing.
fn legacy_nodes(
    tree: &Tree,
    parent: &[Option<usize>],
    depth: &[u64],
    compactions: &[u32],
    objects: &[EncodedObject],
    boundaries: &HashSet<Boundary>,
    keep: Option<Boundary>,
) -> Result<Vec<bool>> {
    let n = tree.nodes.len();
    let mut legacy = vec![false; n];
    let place = |i: usize, id: ObjectId| (id, depth[i], compactions[i]);
    let mut unfound: HashSet<Boundary> = boundaries.iter().copied().chain(keep).collect();
    for (i, o) in objects.iter().enumerate() {
        unfound.remove(&place(i, o.id()));
    }
    if unfound.is_empty() {
        return Ok(legacy);
    }
    for (i, (o, node)) in objects.iter().zip(&tree.nodes).enumerate() {
        if o.kind() != ObjectKind::Raw {
            continue;
        }
        if !unfound.contains(&place(i, blob_object(&node.message)?.id())) {
            continue;
        }
        let mut at = Some(i);
        while let Some(j) = at {
            if legacy[j] {
                break;
            }
            legacy[j] = true;
            at = parent[j];
        }
    }
    Ok(legacy)
}
