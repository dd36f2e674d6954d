//! The whole-graph work on petgraph: a loaded part of the session DAG, its
//! lanes and its Graphviz rendering.

use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::Direction;

use crate::error::Result;
use crate::hash::ObjectId;

use super::topo::{priority, Priority};
use super::{Follow, Lineage, Node};

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
    pub(super) fn load_from(
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

/// Kahn's algorithm over a loaded graph, the ready set ordered by
/// [`priority`].
#[derive(Debug)]
pub(super) struct Kahn {
    indegree: Vec<usize>,
    ready: BinaryHeap<(Priority, usize)>,
}

impl Kahn {
    pub(super) fn new(graph: &SessionGraph) -> Kahn {
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

    pub(super) fn next<'g>(&mut self, graph: &'g SessionGraph) -> Option<&'g Node> {
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
