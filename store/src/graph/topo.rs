//! Log order: [`TopoWalk`] streams sessions as `git log --topo-order
//! --date-order` would (see the module docs of `graph`), switching to
//! Kahn's algorithm over the loaded graph once lines branch.

use std::cmp::Reverse;
use std::collections::HashSet;

use crate::error::Result;
use crate::hash::ObjectId;

use super::positions::KeyWalk;
use super::whole::Kahn;
use super::{index_failed, Follow, Lineage, Node, SessionGraph};

/// The log order's preference among available sessions: newest first, then
/// the smaller id.
pub(super) type Priority = (i64, Reverse<ObjectId>);

pub(super) fn priority(n: &Node) -> Priority {
    (n.created_at, Reverse(n.id))
}

/// Sessions reachable from some starts, in log order (see the module
/// docs). Yields nodes whose `parents` are the followed ones. Callers that
/// need only the ids have [`LogIds`], which builds no node.
///
/// With a lineage index, the walk goes by position; should a record of the
/// file fail its check midway, the lineage is told
/// ([`Lineage::lineage_index_failed`]) and the walk starts again by id,
/// skipping what it yielded already: the order is the DAG's, whatever
/// reads it, so the caller sees one unbroken walk.
#[derive(Debug)]
pub struct TopoWalk<'a, L: ?Sized> {
    lineage: &'a L,
    follow: Follow,
    starts: Vec<ObjectId>,
    /// Nodes yielded so far (skipped by a restart).
    yielded: usize,
    /// Streaming: sessions found and not yet yielded; while there is one,
    /// nothing unseen can be its descendant.
    pending: Vec<Node>,
    seen: HashSet<ObjectId>,
    /// Once lines branch: the rest of the graph and its Kahn state.
    rest: Option<(SessionGraph, Kahn)>,
    /// With a lineage index: the walk in positions, and a parents buffer.
    positional: Option<(KeyWalk<'a, L>, Vec<u32>)>,
    failed: bool,
}

impl<'a, L: Lineage + ?Sized> TopoWalk<'a, L> {
    pub fn new(lineage: &'a L, starts: &[ObjectId], follow: Follow) -> Result<Self> {
        let mut walk = TopoWalk {
            lineage,
            follow,
            starts: starts.to_vec(),
            yielded: 0,
            pending: Vec::new(),
            seen: HashSet::new(),
            rest: None,
            positional: None,
            failed: false,
        };
        if let Some(ix) = lineage.lineage_index() {
            match KeyWalk::new(lineage, ix.clone(), starts, follow) {
                Ok(keys) => {
                    walk.positional = Some((keys, Vec::new()));
                    return Ok(walk);
                }
                Err(e) if index_failed(lineage, &ix, &e) => {}
                Err(e) => return Err(e),
            }
        }
        walk.start_by_id()?;
        Ok(walk)
    }

    /// The same walk, never by position.
    pub(super) fn by_id(lineage: &'a L, starts: &[ObjectId], follow: Follow) -> Result<Self> {
        let mut walk = TopoWalk {
            lineage,
            follow,
            starts: starts.to_vec(),
            yielded: 0,
            pending: Vec::new(),
            seen: HashSet::new(),
            rest: None,
            positional: None,
            failed: false,
        };
        walk.start_by_id()?;
        Ok(walk)
    }

    fn start_by_id(&mut self) -> Result<()> {
        for s in &self.starts {
            if self.seen.insert(*s) {
                self.pending.push(self.follow.trim(self.lineage.node(s)?));
            }
        }
        Ok(())
    }

    fn step(&mut self) -> Result<Option<Node>> {
        if let Some((keys, buf)) = &mut self.positional {
            let next = match keys.next_key() {
                Ok(Some(k)) => keys.walker.node_of(k, buf).map(Some),
                other => other.map(|_| None),
            };
            match next {
                Err(e) if index_failed(self.lineage, keys.walker.index(), &e) => {
                    self.positional = None;
                    self.start_by_id()?;
                    for _ in 0..self.yielded {
                        self.step_by_id()?;
                    }
                }
                next => return next,
            }
        }
        self.step_by_id()
    }

    fn step_by_id(&mut self) -> Result<Option<Node>> {
        if let Some((graph, kahn)) = &mut self.rest {
            return Ok(kahn.next(graph).cloned());
        }
        match self.pending.len() {
            0 => Ok(None),
            1 => {
                let node = self.pending.pop().expect("one pending");
                for p in &node.parents {
                    if self.seen.insert(*p) {
                        self.pending.push(self.follow.trim(self.lineage.node(p)?));
                    }
                }
                Ok(Some(node))
            }
            _ => {
                let from = std::mem::take(&mut self.pending);
                let graph = SessionGraph::load_from(self.lineage, from, self.follow)?;
                let mut kahn = Kahn::new(&graph);
                let first = kahn.next(&graph).cloned();
                self.rest = Some((graph, kahn));
                Ok(first)
            }
        }
    }
}

impl<L: Lineage + ?Sized> Iterator for TopoWalk<'_, L> {
    type Item = Result<Node>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.step() {
            Ok(n) => {
                self.yielded += usize::from(n.is_some());
                n.map(Ok)
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// The ids of the sessions reachable from some starts, in log order: the
/// order of [`TopoWalk`], for callers that need only ids (counting, `log
/// --format=%H`, membership).
///
/// With a lineage index it walks by position in the mapped file and builds
/// nothing per session (no [`Node`], no parents list): a step on one line of
/// history is a few reads of the file and a bit set. Sessions written after
/// the file (the journal tail) are walked by id first, as [`TopoWalk`]
/// walks them; the file is closed under parents, so once a walk enters it,
/// it stays. Without a lineage index it is [`TopoWalk`]'s ids. A record of
/// the file that fails its check is handled as [`TopoWalk`] handles it.
///
/// ```
/// use sessctl_store::graph::{Follow, LogIds};
/// use sessctl_store::{Durability, Messages, Store, Turn};
/// use serde_json::json;
///
/// let store = Store::in_memory()?;
/// let turn = |m: serde_json::Value| Turn { messages: Messages::Added(vec![m]), ..Turn::default() };
/// let (name, root) = store.create(Some("fix"), turn(json!({"role": "user", "content": "hi"})), Durability::Sync)?;
/// let next = store.commit(&name, None, turn(json!({"role": "assistant", "content": "hello"})), Durability::Sync)?;
/// let ids = LogIds::new(&store, &[next], Follow::All)?.collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(ids, vec![next, root]);
/// # Ok::<(), sessctl_store::Error>(())
/// ```
#[derive(Debug)]
pub struct LogIds<'a, L: ?Sized> {
    lineage: &'a L,
    starts: Vec<ObjectId>,
    follow: Follow,
    yielded: usize,
    by_key: Option<KeyWalk<'a, L>>,
    by_node: Option<TopoWalk<'a, L>>,
    failed: bool,
}

impl<'a, L: Lineage + ?Sized> LogIds<'a, L> {
    /// Starts the walk; fails when a start cannot be read.
    pub fn new(lineage: &'a L, starts: &[ObjectId], follow: Follow) -> Result<Self> {
        let mut walk = LogIds {
            lineage,
            starts: starts.to_vec(),
            follow,
            yielded: 0,
            by_key: None,
            by_node: None,
            failed: false,
        };
        if let Some(ix) = lineage.lineage_index() {
            match KeyWalk::new(lineage, ix.clone(), starts, follow) {
                Ok(keys) => {
                    walk.by_key = Some(keys);
                    return Ok(walk);
                }
                Err(e) if index_failed(lineage, &ix, &e) => {}
                Err(e) => return Err(e),
            }
        }
        walk.by_node = Some(TopoWalk::by_id(lineage, starts, follow)?);
        Ok(walk)
    }

    fn step(&mut self) -> Result<Option<ObjectId>> {
        if let Some(keys) = &mut self.by_key {
            match keys.next_key() {
                Ok(k) => return Ok(k.map(|k| keys.walker.id(k))),
                Err(e) if index_failed(self.lineage, keys.walker.index(), &e) => {
                    self.by_key = None;
                    let mut walk = TopoWalk::by_id(self.lineage, &self.starts, self.follow)?;
                    for _ in 0..self.yielded {
                        walk.step()?;
                    }
                    self.by_node = Some(walk);
                }
                Err(e) => return Err(e),
            }
        }
        match &mut self.by_node {
            Some(walk) => Ok(walk.step()?.map(|n| n.id)),
            None => Ok(None),
        }
    }
}

impl<L: Lineage + ?Sized> Iterator for LogIds<'_, L> {
    type Item = Result<ObjectId>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.step() {
            Ok(id) => {
                self.yielded += usize::from(id.is_some());
                id.map(Ok)
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
