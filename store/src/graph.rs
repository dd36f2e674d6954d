//! Lineage walks over the session DAG: log order, ancestors, counts,
//! merge bases, and the whole-graph work (`graph`, Graphviz) on petgraph.
//!
//! Every walk reads parents and creation times through [`Lineage`], never a
//! message body: for a [`Store`](crate::Store) that is its lineage index (`lineage_index`, a
//! memory-mapped commit-graph with generation numbers), then the derived
//! index, with the session object read only when both lack it.
//!
//! When a lineage offers a [`LineageIndex`], counts, ancestry and merge
//! bases walk by position (bitsets, no hashing) inside the file, and by id
//! only over the sessions written after it (the journal tail); generation
//! numbers cut `is_ancestor` and stop merge-base early, as git's
//! commit-graph does. The file is closed under parents, so a walk that
//! enters it never leaves it. Answers never depend on what the file covers.
//!
//! Order. [`TopoWalk`] yields sessions as `git log --topo-order` would,
//! with git's `--date-order` tie-break: a session never comes after any of
//! its ancestors, and among the sessions all of whose children have been
//! shown, the newest `created_at` comes first (ties: the smaller id). It
//! streams while the walk follows one line of history and loads the rest of
//! the reachable graph only when lines branch (proving that no unseen
//! session is a descendant needs the whole set, or generation numbers).

mod lanes;
mod positions;
mod topo;
mod whole;

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::hash::ObjectId;
use crate::lineage_index::LineageIndex;
use crate::odb::Odb;

pub use lanes::{LaneRows, Lanes};
use positions::Walker;
use topo::priority;
pub use topo::{LogIds, TopoWalk};
pub use whole::{EdgeKind, SessionGraph};

/// What a walk needs of one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: ObjectId,
    /// The first is the lineage (first) parent.
    pub parents: Vec<ObjectId>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
}

impl Node {
    /// The node of the session at `pos` in a lineage index (`None`: out of
    /// range), its record checked (`CorruptFile` when it fails).
    pub fn at(ix: &LineageIndex, pos: u32) -> Result<Option<Node>> {
        let Some(id) = ix.id(pos) else {
            return Ok(None);
        };
        Ok(Some(Node {
            id,
            parents: ix.parents(pos)?.filter_map(|p| ix.id(p)).collect(),
            created_at: ix.created_at(pos),
        }))
    }
}

/// Where walks get parents and creation times from.
pub trait Lineage {
    /// The session's parents and creation time; `NotFound` when absent.
    fn node(&self, id: &ObjectId) -> Result<Node>;

    fn parents(&self, id: &ObjectId) -> Result<Vec<ObjectId>> {
        Ok(self.node(id)?.parents)
    }

    fn created_at(&self, id: &ObjectId) -> Result<i64> {
        Ok(self.node(id)?.created_at)
    }

    /// The session's generation number (1 + the largest of its parents'),
    /// when known cheaply; `None` means unknown, never "no ancestors".
    fn generation(&self, _id: &ObjectId) -> Result<Option<u32>> {
        Ok(None)
    }

    /// A lineage index whose answers agree with [`Lineage::node`], for
    /// walks by position; `None` when there is none.
    fn lineage_index(&self) -> Option<Arc<LineageIndex>> {
        None
    }

    /// Told that the lineage index failed a check while a walk read it
    /// (`error` names the file): from now on, [`Lineage::lineage_index`]
    /// should give none and [`Lineage::node`] should not read it. The walk
    /// that found it goes on by id. A lineage that cannot let go of it
    /// ignores this; its walks still go on by id.
    fn lineage_index_failed(&self, _error: &Error) {}
}

/// Whether `e` is `ix` failing a check; if so, `lineage` is told, and the
/// caller walks again by id.
fn index_failed(lineage: &(impl Lineage + ?Sized), ix: &LineageIndex, e: &Error) -> bool {
    if !ix.is_own_error(e) {
        return false;
    }
    lineage.lineage_index_failed(e);
    true
}

impl<L: Lineage + ?Sized> Lineage for &L {
    fn node(&self, id: &ObjectId) -> Result<Node> {
        (**self).node(id)
    }
    fn generation(&self, id: &ObjectId) -> Result<Option<u32>> {
        (**self).generation(id)
    }
    fn lineage_index(&self) -> Option<Arc<LineageIndex>> {
        (**self).lineage_index()
    }
    fn lineage_index_failed(&self, error: &Error) {
        (**self).lineage_index_failed(error)
    }
}

/// Straight from the session objects (no index).
impl Lineage for Odb {
    fn node(&self, id: &ObjectId) -> Result<Node> {
        let s = self.session(id)?;
        Ok(Node {
            id: *id,
            parents: s.parents,
            created_at: s.created_at,
        })
    }
}

/// Which parents a walk follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Follow {
    /// Every parent.
    #[default]
    All,
    /// The first (lineage) parent only, as `--first-parent`.
    FirstParent,
}

impl Follow {
    /// The parents of `node` this walk follows.
    pub fn parents(self, node: &Node) -> &[ObjectId] {
        match self {
            Follow::All => &node.parents,
            Follow::FirstParent => &node.parents[..node.parents.len().min(1)],
        }
    }

    fn trim(self, mut node: Node) -> Node {
        if self == Follow::FirstParent {
            node.parents.truncate(1);
        }
        node
    }
}

/// The sessions reachable from `starts`, in log order.
pub fn log_order(
    lineage: &(impl Lineage + ?Sized),
    starts: &[ObjectId],
    follow: Follow,
    limit: Option<usize>,
) -> Result<Vec<Node>> {
    TopoWalk::new(lineage, starts, follow)?
        .take(limit.unwrap_or(usize::MAX))
        .collect()
}

/// Every session reachable from `starts` (the starts included), as
/// `git rev-list`'s set.
pub fn ancestors(
    lineage: &(impl Lineage + ?Sized),
    starts: &[ObjectId],
    follow: Follow,
) -> Result<HashSet<ObjectId>> {
    if let Some(ix) = lineage.lineage_index() {
        let mut w = Walker::new(lineage, ix.clone(), follow);
        match w.reach(starts) {
            Ok(seen) => return Ok(seen.iter().map(|k| w.id(k)).collect()),
            Err(e) if index_failed(lineage, &ix, &e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(reach(lineage, starts, follow)?.into_keys().collect())
}

/// How many sessions are reachable from `starts` (`rev-list --count`).
pub fn count(
    lineage: &(impl Lineage + ?Sized),
    starts: &[ObjectId],
    follow: Follow,
) -> Result<usize> {
    if let Some(ix) = lineage.lineage_index() {
        match Walker::new(lineage, ix.clone(), follow).reach(starts) {
            Ok(seen) => return Ok(seen.len()),
            Err(e) if index_failed(lineage, &ix, &e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(reach(lineage, starts, follow)?.len())
}

/// `start` and its first-parent ancestors, newest first.
pub fn first_parent_chain(
    lineage: &(impl Lineage + ?Sized),
    start: ObjectId,
) -> Result<Vec<ObjectId>> {
    let mut out = vec![start];
    let mut at = start;
    while let Some(p) = lineage.parents(&at)?.first().copied() {
        out.push(p);
        at = p;
    }
    Ok(out)
}

/// Whether `a` is `b` or one of its ancestors (`merge-base --is-ancestor`).
pub fn is_ancestor(lineage: &(impl Lineage + ?Sized), a: ObjectId, b: ObjectId) -> Result<bool> {
    if let Some(ix) = lineage.lineage_index() {
        match Walker::new(lineage, ix.clone(), Follow::All).is_ancestor(&a, &b) {
            Err(e) if index_failed(lineage, &ix, &e) => {}
            answer => return answer,
        }
    }
    let mut seen = HashSet::from([b]);
    let mut queue = VecDeque::from([b]);
    while let Some(at) = queue.pop_front() {
        if at == a {
            return Ok(true);
        }
        for p in lineage.parents(&at)? {
            if seen.insert(p) {
                queue.push_back(p);
            }
        }
    }
    Ok(false)
}

/// Every best common ancestor of `a` and `b`: the common ancestors that are
/// not ancestors of another common ancestor (`git merge-base --all`).
/// Newest first (ties: the smaller id); empty when they share no history.
pub fn merge_bases_all(
    lineage: &(impl Lineage + ?Sized),
    a: ObjectId,
    b: ObjectId,
) -> Result<Vec<ObjectId>> {
    if let Some(ix) = lineage.lineage_index() {
        match Walker::new(lineage, ix.clone(), Follow::All).merge_bases(&a, &b) {
            Err(e) if index_failed(lineage, &ix, &e) => {}
            answer => return answer,
        }
    }
    let of_a = reach(lineage, &[a], Follow::All)?;
    // Walk from b, stopping at a's ancestors: every best common ancestor is
    // such a first hit (a path through another common ancestor would make
    // it that one's ancestor).
    let mut hits: Vec<&Node> = Vec::new();
    let mut seen = HashSet::from([b]);
    let mut queue = VecDeque::from([b]);
    while let Some(at) = queue.pop_front() {
        if let Some(n) = of_a.get(&at) {
            hits.push(n);
            continue;
        }
        for p in lineage.parents(&at)? {
            if seen.insert(p) {
                queue.push_back(p);
            }
        }
    }
    // A hit is redundant when it is a proper ancestor of another hit.
    let mut below: HashSet<ObjectId> = HashSet::new();
    let mut queue: VecDeque<ObjectId> = hits
        .iter()
        .flat_map(|n| n.parents.iter().copied())
        .collect();
    while let Some(at) = queue.pop_front() {
        if below.insert(at) {
            if let Some(n) = of_a.get(&at) {
                queue.extend(n.parents.iter().copied());
            }
        }
    }
    let mut best: Vec<&Node> = hits
        .into_iter()
        .filter(|n| !below.contains(&n.id))
        .collect();
    best.sort_by_key(|n| Reverse(priority(n)));
    Ok(best.into_iter().map(|n| n.id).collect())
}

/// The newest best common ancestor, if any (`git merge-base`).
pub fn merge_base(
    lineage: &(impl Lineage + ?Sized),
    a: ObjectId,
    b: ObjectId,
) -> Result<Option<ObjectId>> {
    Ok(merge_bases_all(lineage, a, b)?.into_iter().next())
}

/// Loads every session reachable from `starts`.
fn reach(
    lineage: &(impl Lineage + ?Sized),
    starts: &[ObjectId],
    follow: Follow,
) -> Result<HashMap<ObjectId, Node>> {
    let mut nodes: HashMap<ObjectId, Node> = HashMap::new();
    let mut queue: VecDeque<ObjectId> = starts.iter().copied().collect();
    while let Some(at) = queue.pop_front() {
        if nodes.contains_key(&at) {
            continue;
        }
        let node = follow.trim(lineage.node(&at)?);
        queue.extend(node.parents.iter().filter(|p| !nodes.contains_key(p)));
        nodes.insert(at, node);
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lineage in a map: ids are made from small numbers.
    #[derive(Default)]
    struct Map(HashMap<ObjectId, Node>);

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes([n; 32])
    }

    impl Map {
        fn add(&mut self, n: u8, parents: &[u8], created_at: i64) {
            self.0.insert(
                id(n),
                Node {
                    id: id(n),
                    parents: parents.iter().map(|p| id(*p)).collect(),
                    created_at,
                },
            );
        }
    }

    impl Lineage for Map {
        fn node(&self, i: &ObjectId) -> Result<Node> {
            self.0
                .get(i)
                .cloned()
                .ok_or(crate::error::Error::NotFound { id: *i })
        }
    }

    fn ids(nodes: &[Node]) -> Vec<ObjectId> {
        nodes.iter().map(|n| n.id).collect()
    }

    #[test]
    fn log_never_shows_a_parent_before_its_child_even_with_skewed_clocks() {
        // 1 <- 2 <- 4 (merge of 2 and 3), 1 <- 3; 2 claims to be older than 1.
        let mut m = Map::default();
        m.add(1, &[], 100);
        m.add(2, &[1], 50);
        m.add(3, &[1], 300);
        m.add(4, &[2, 3], 400);
        let order = log_order(&m, &[id(4)], Follow::All, None).expect("walks");
        assert_eq!(ids(&order), vec![id(4), id(3), id(2), id(1)]);
        let fp = log_order(&m, &[id(4)], Follow::FirstParent, None).expect("walks");
        assert_eq!(ids(&fp), vec![id(4), id(2), id(1)]);
        assert_eq!(fp[0].parents, vec![id(2)]);
        // A start that is another's ancestor still comes after it.
        let two = log_order(&m, &[id(1), id(3)], Follow::All, None).expect("walks");
        assert_eq!(ids(&two), vec![id(3), id(1)]);
        let limited = log_order(&m, &[id(4)], Follow::All, Some(2)).expect("walks");
        assert_eq!(ids(&limited), vec![id(4), id(3)]);
    }

    #[test]
    fn merge_bases_are_the_best_common_ancestors() {
        // Criss-cross: 4 and 5 both merge 2 and 3.
        let mut m = Map::default();
        m.add(1, &[], 1);
        m.add(2, &[1], 2);
        m.add(3, &[1], 3);
        m.add(4, &[2, 3], 4);
        m.add(5, &[3, 2], 5);
        m.add(9, &[], 9);
        assert_eq!(
            merge_bases_all(&m, id(4), id(5)).expect("walks"),
            vec![id(3), id(2)]
        );
        assert_eq!(merge_base(&m, id(4), id(5)).expect("walks"), Some(id(3)));
        assert_eq!(
            merge_bases_all(&m, id(4), id(1)).expect("walks"),
            vec![id(1)]
        );
        assert_eq!(merge_bases_all(&m, id(4), id(9)).expect("walks"), vec![]);
        assert!(is_ancestor(&m, id(1), id(5)).expect("walks"));
        assert!(is_ancestor(&m, id(5), id(5)).expect("walks"));
        assert!(!is_ancestor(&m, id(4), id(5)).expect("walks"));
        assert_eq!(count(&m, &[id(4)], Follow::All).expect("walks"), 4);
        assert_eq!(
            first_parent_chain(&m, id(5)).expect("walks"),
            vec![id(5), id(3), id(1)]
        );
    }

    #[test]
    fn dot_output_is_deterministic() {
        let mut m = Map::default();
        m.add(1, &[], 1);
        m.add(2, &[1], 2);
        m.add(3, &[2, 1], 3);
        let g = SessionGraph::load(&m, &[id(3)], Follow::All).expect("loads");
        let dot = g.to_dot(|n| vec![n.id.to_hex_prefix(4), "a \"b\"".into()]);
        let (i1, i2, i3) = (id(1), id(2), id(3));
        assert_eq!(
            dot,
            format!(
                "digraph sessions {{\n  node [shape=box, fontname=\"monospace\"];\n  \
                 \"{i3}\" [label=\"0303\\na \\\"b\\\"\"];\n  \
                 \"{i2}\" [label=\"0202\\na \\\"b\\\"\"];\n  \
                 \"{i1}\" [label=\"0101\\na \\\"b\\\"\"];\n  \
                 \"{i3}\" -> \"{i2}\";\n  \"{i3}\" -> \"{i1}\" [style=dashed];\n  \
                 \"{i2}\" -> \"{i1}\";\n}}\n"
            )
        );
    }
}
