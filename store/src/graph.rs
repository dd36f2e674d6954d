//! Lineage walks over the session DAG: log order, ancestors, counts,
//! merge bases, and the whole-graph work (`graph`, Graphviz) on petgraph.
//!
//! Every walk reads parents and creation times through [`Lineage`], never a
//! message body: for a [`Store`](crate::Store) that is its lineage index (`lineage.rs`, a
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

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::Direction;

use crate::error::Result;
use crate::hash::ObjectId;
use crate::lineage::LineageIndex;
use crate::odb::Odb;

pub use lanes::{LaneRows, Lanes};
use positions::Walker;

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
    /// The node of the session at `pos` in a lineage index.
    pub fn at(ix: &LineageIndex, pos: u32) -> Option<Node> {
        Some(Node {
            id: ix.id(pos)?,
            parents: ix.parents(pos).filter_map(|p| ix.id(p)).collect(),
            created_at: ix.created_at(pos),
        })
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

/// The log order's preference among available sessions: newest first, then
/// the smaller id.
type Priority = (i64, Reverse<ObjectId>);

fn priority(n: &Node) -> Priority {
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

/// Kahn's algorithm over a loaded graph, the ready set ordered by
/// [`priority`].
#[derive(Debug)]
struct Kahn {
    indegree: Vec<usize>,
    ready: BinaryHeap<(Priority, usize)>,
}

impl Kahn {
    fn new(graph: &SessionGraph) -> Kahn {
        let g = &graph.graph;
        let indegree: Vec<usize> = g
            .node_indices()
            .map(|i| g.neighbors_directed(i, Direction::Incoming).count())
            .collect();
        let ready = g
            .node_indices()
            .filter(|i| indegree[i.index()] == 0)
            .map(|i| (priority(&g[i]), i.index()))
            .collect();
        Kahn { indegree, ready }
    }

    fn next<'g>(&mut self, graph: &'g SessionGraph) -> Option<&'g Node> {
        let g = &graph.graph;
        let (_, i) = self.ready.pop()?;
        let at = NodeIndex::new(i);
        // A session with the same parent twice has two edges to it.
        for p in g.neighbors_directed(at, Direction::Outgoing) {
            let d = &mut self.indegree[p.index()];
            *d -= 1;
            if *d == 0 {
                self.ready.push((priority(&g[p]), p.index()));
            }
        }
        Some(&g[at])
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
        let mut w = Walker::new(lineage, ix, follow);
        let seen = w.reach(starts)?;
        return Ok(seen.iter().map(|k| w.id(k)).collect());
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
        return Ok(Walker::new(lineage, ix, follow).reach(starts)?.len());
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
        return Walker::new(lineage, ix, Follow::All).is_ancestor(&a, &b);
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
        return Walker::new(lineage, ix, Follow::All).merge_bases(&a, &b);
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

/// What an edge of the graph is: child to first parent, or to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgeKind {
    FirstParent,
    OtherParent,
}

/// A loaded part of the session DAG: every session reachable from some
/// starts, edges from child to parent.
#[derive(Debug, Clone)]
pub struct SessionGraph {
    graph: DiGraph<Node, EdgeKind>,
    index: HashMap<ObjectId, NodeIndex>,
}

impl SessionGraph {
    /// Loads the sessions reachable from `starts`.
    pub fn load(
        lineage: &(impl Lineage + ?Sized),
        starts: &[ObjectId],
        follow: Follow,
    ) -> Result<SessionGraph> {
        let mut nodes = Vec::new();
        let mut seen = HashSet::new();
        for s in starts {
            if seen.insert(*s) {
                nodes.push(follow.trim(lineage.node(s)?));
            }
        }
        SessionGraph::load_from(lineage, nodes, follow)
    }

    /// Loads the sessions reachable from nodes already read.
    fn load_from(
        lineage: &(impl Lineage + ?Sized),
        from: Vec<Node>,
        follow: Follow,
    ) -> Result<SessionGraph> {
        let mut graph = DiGraph::new();
        let mut index = HashMap::new();
        let mut queue: VecDeque<NodeIndex> = VecDeque::new();
        for n in from {
            if let std::collections::hash_map::Entry::Vacant(v) = index.entry(n.id) {
                let i = graph.add_node(n);
                v.insert(i);
                queue.push_back(i);
            }
        }
        while let Some(i) = queue.pop_front() {
            let parents = graph[i].parents.clone();
            for (k, p) in parents.iter().enumerate() {
                let pi = match index.get(p) {
                    Some(pi) => *pi,
                    None => {
                        let pi = graph.add_node(follow.trim(lineage.node(p)?));
                        index.insert(*p, pi);
                        queue.push_back(pi);
                        pi
                    }
                };
                let kind = if k == 0 {
                    EdgeKind::FirstParent
                } else {
                    EdgeKind::OtherParent
                };
                graph.add_edge(i, pi, kind);
            }
        }
        Ok(SessionGraph { graph, index })
    }

    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    pub fn is_empty(&self) -> bool {
        self.graph.node_count() == 0
    }

    pub fn contains(&self, id: &ObjectId) -> bool {
        self.index.contains_key(id)
    }

    pub fn node(&self, id: &ObjectId) -> Option<&Node> {
        self.index.get(id).map(|i| &self.graph[*i])
    }

    /// Every session, in log order.
    pub fn topo_order(&self) -> Vec<&Node> {
        let mut kahn = Kahn::new(self);
        let mut out = Vec::with_capacity(self.len());
        while let Some(n) = kahn.next(self) {
            out.push(n);
        }
        out
    }

    /// The graph as a Graphviz digraph: one node per session, labelled with
    /// the lines `label` gives, in log order; edges child -> parent, the
    /// first parent solid, the others dashed. Deterministic.
    pub fn to_dot(&self, mut label: impl FnMut(&Node) -> Vec<String>) -> String {
        use std::fmt::Write;
        let mut out =
            String::from("digraph sessions {\n  node [shape=box, fontname=\"monospace\"];\n");
        let order = self.topo_order();
        for n in &order {
            let text: Vec<String> = label(n).iter().map(|l| dot_escape(l)).collect();
            let _ = writeln!(out, "  \"{}\" [label=\"{}\"];", n.id, text.join("\\n"));
        }
        for n in &order {
            for (k, p) in n.parents.iter().enumerate() {
                let style = if k == 0 { "" } else { " [style=dashed]" };
                let _ = writeln!(out, "  \"{}\" -> \"{}\"{style};", n.id, p);
            }
        }
        out.push_str("}\n");
        out
    }
}

fn dot_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
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
