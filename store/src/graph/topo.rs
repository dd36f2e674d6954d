//! Log order: [`TopoWalk`] streams sessions as `git log --topo-order
//! --date-order` would (see the module docs of `graph`), switching to
//! Kahn's algorithm over the loaded graph once lines branch.

use std::cmp::Reverse;
use std::collections::HashSet;

use crate::error::Result;
use crate::hash::ObjectId;

use super::positions::{self, Walker};
use super::whole::Kahn;
use super::{Follow, Lineage, Node, SessionGraph};

/// The log order's preference among available sessions: newest first, then
/// the smaller id.
pub(super) type Priority = (i64, Reverse<ObjectId>);

pub(super) fn priority(n: &Node) -> Priority {
    (n.created_at, Reverse(n.id))
}

/// Sessions reachable from some starts, in log order (see the module
/// docs). Yields nodes whose `parents` are the followed ones.
#[derive(Debug)]
pub struct TopoWalk<'a, L: ?Sized> {
    lineage: &'a L,
    follow: Follow,
    /// Streaming: sessions found and not yet yielded; while there is one,
    /// nothing unseen can be its descendant.
    pending: Vec<Node>,
    seen: HashSet<ObjectId>,
    /// Once lines branch: the rest of the graph and its Kahn state.
    rest: Option<(SessionGraph, Kahn)>,
    /// Once lines branch, with a lineage index: the rest, in order.
    ordered: Option<std::vec::IntoIter<Node>>,
    /// With a lineage index: the streaming state in positions.
    positional: Option<Streaming<'a, L>>,
    failed: bool,
}

/// [`TopoWalk`]'s streaming state over positions in the lineage index.
struct Streaming<'a, L: ?Sized> {
    walker: Walker<'a, L>,
    pending: Vec<u32>,
    seen: positions::Bits,
    buf: Vec<u32>,
}

impl<L: ?Sized> std::fmt::Debug for Streaming<'_, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streaming")
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl<'a, L: Lineage + ?Sized> TopoWalk<'a, L> {
    pub fn new(lineage: &'a L, starts: &[ObjectId], follow: Follow) -> Result<Self> {
        let mut walk = TopoWalk {
            lineage,
            follow,
            pending: Vec::new(),
            seen: HashSet::new(),
            rest: None,
            ordered: None,
            positional: None,
            failed: false,
        };
        if let Some(ix) = lineage.lineage_index() {
            let mut walker = Walker::new(lineage, ix, follow);
            let mut seen = positions::Bits::with_capacity(walker.indexed());
            let mut pending = Vec::new();
            for s in starts {
                let k = walker.key_of(s)?;
                if seen.insert(k) {
                    pending.push(k);
                }
            }
            walk.positional = Some(Streaming {
                walker,
                pending,
                seen,
                buf: Vec::new(),
            });
            return Ok(walk);
        }
        for s in starts {
            if walk.seen.insert(*s) {
                walk.pending.push(follow.trim(lineage.node(s)?));
            }
        }
        Ok(walk)
    }

    fn step(&mut self) -> Result<Option<Node>> {
        if let Some((graph, kahn)) = &mut self.rest {
            return Ok(kahn.next(graph).cloned());
        }
        if let Some(rest) = &mut self.ordered {
            return Ok(rest.next());
        }
        if let Some(p) = &mut self.positional {
            return match p.pending.len() {
                0 => Ok(None),
                1 => {
                    let k = p.pending.pop().expect("one pending");
                    let node = p.walker.node_of(k, &mut p.buf)?;
                    for &q in &p.buf {
                        if p.seen.insert(q) {
                            p.pending.push(q);
                        }
                    }
                    Ok(Some(node))
                }
                _ => {
                    let ids: Vec<ObjectId> = p.pending.iter().map(|&k| p.walker.id(k)).collect();
                    let mut rest = p.walker.topo_order(&ids)?.into_iter();
                    let first = rest.next();
                    self.ordered = Some(rest);
                    Ok(first)
                }
            };
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
            Ok(n) => n.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
