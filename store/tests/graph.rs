//! Lineage walks against git: the same random DAGs are built as sessions in
//! a sessctl store and as commits in a git repository (`git commit-tree`
//! with `-p` parents), and ancestors, first-parent lists, counts, merge
//! bases and ancestry must agree with `git rev-list` and `git merge-base`.
//! Log order and the `--graph` lanes are checked against their definitions.
//! Each on a local store and on a remote one (`name::local`,
//! `name::remote`).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

#[path = "support/backends.rs"]
mod backends;
mod support;
use backends::Backend;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::process::Command;

use sessctl_store::graph::{self, Follow, Lanes, Lineage, Node, SessionGraph};
use sessctl_store::{Durability, ObjectId, Session, Store, WriteBatch};
use support::Rng;

/// A random DAG: node k's parents are earlier nodes.
struct Dag {
    parents: Vec<Vec<usize>>,
    created_at: Vec<i64>,
}

impl Dag {
    fn random(seed: u64) -> Dag {
        let mut rng = Rng::new(seed);
        let n = 30 + rng.below(51) as usize;
        let mut parents = Vec::with_capacity(n);
        let mut created_at = Vec::with_capacity(n);
        for k in 0..n {
            let mut ps: Vec<usize> = Vec::new();
            if k > 0 && rng.below(10) != 0 {
                // Mostly continue a recent session, sometimes fork an old one.
                let first = if rng.below(10) < 7 {
                    k - 1 - rng.below(k.min(4) as u64) as usize
                } else {
                    rng.below(k as u64) as usize
                };
                ps.push(first);
                let extra = match rng.below(20) {
                    0 => 2,
                    1..=5 => 1,
                    _ => 0,
                };
                for _ in 0..extra {
                    let p = rng.below(k as u64) as usize;
                    if !ps.contains(&p) {
                        ps.push(p);
                    }
                }
            }
            parents.push(ps);
            // Skewed clocks: creation times are not monotonic along edges.
            created_at.push(1_763_000_000_000 + rng.below(1_000_000) as i64);
        }
        Dag {
            parents,
            created_at,
        }
    }

    fn len(&self) -> usize {
        self.parents.len()
    }

    fn tips(&self) -> Vec<usize> {
        let mut has_child = vec![false; self.len()];
        for ps in &self.parents {
            for p in ps {
                has_child[*p] = true;
            }
        }
        (0..self.len()).filter(|k| !has_child[*k]).collect()
    }
}

/// The DAG as sessions in a new store of its own on `b`'s backend (the
/// returned backend keeps it), the tips tagged so that the index holds
/// every session. Returns the store and the id of each node.
fn build_store(b: &Backend, dag: &Dag) -> (Backend, Store, Vec<ObjectId>) {
    let b = b.another();
    let store = b.open();
    let mut batch = WriteBatch::new();
    let mut ids: Vec<ObjectId> = Vec::with_capacity(dag.len());
    for k in 0..dag.len() {
        let mut s = Session::new_root(dag.created_at[k]);
        s.parents = dag.parents[k].iter().map(|p| ids[*p]).collect();
        s.title = Some(format!("n{k}"));
        ids.push(batch.session(&s).unwrap());
    }
    store.odb().write(&batch, Durability::NoSync).unwrap();
    support::tag(&store, dag.tips().into_iter().map(|k| (k, ids[k])));
    (b, store, ids)
}

struct Git<'a> {
    dir: &'a Path,
}

impl Git<'_> {
    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .arg("-C")
            .arg(self.dir)
            .args(args)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", self.dir)
            .output()
            .unwrap()
    }

    fn lines(&self, args: &[&str]) -> Vec<String> {
        let out = self.run(args);
        assert!(
            out.status.success() || out.status.code() == Some(1),
            "git {args:?}: {out:?}"
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The DAG as commits; commit dates follow the node order so that git's
    /// date-guided walks are exact.
    fn build(&self, dag: &Dag) -> Vec<String> {
        let out = self.run(&["init", "-q"]);
        assert!(out.status.success(), "{out:?}");
        let tree = self.lines(&["hash-object", "-w", "-t", "tree", "/dev/null"]);
        let mut shas: Vec<String> = Vec::with_capacity(dag.len());
        for k in 0..dag.len() {
            let date = format!("{} +0000", 1_700_000_000 + k);
            let msg = format!("n{k}");
            let mut args: Vec<&str> = vec!["commit-tree", &tree[0], "-m", &msg];
            for p in &dag.parents[k] {
                args.push("-p");
                args.push(&shas[*p]);
            }
            let out = Command::new("git")
                .arg("-C")
                .arg(self.dir)
                .args(&args)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
                .env("GIT_AUTHOR_DATE", &date)
                .env("GIT_COMMITTER_DATE", &date)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("HOME", self.dir)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            shas.push(String::from_utf8(out.stdout).unwrap().trim().to_owned());
        }
        shas
    }
}

fn have_git() -> bool {
    Command::new("git").arg("--version").output().is_ok()
}

/// Compares every walk with git on one random DAG, for the index-backed
/// lineage of a store and for the session objects read directly.
fn compare_with_git(b: &Backend, seed: u64) {
    let dag = Dag::random(seed);
    let (_b, store, ids) = build_store(b, &dag);
    let dir = tempfile::tempdir().unwrap();
    let git = Git { dir: dir.path() };
    let shas = git.build(&dag);
    let node_of: HashMap<&str, usize> = shas
        .iter()
        .enumerate()
        .map(|(k, s)| (s.as_str(), k))
        .collect();
    let to_nodes =
        |lines: Vec<String>| -> Vec<usize> { lines.iter().map(|l| node_of[l.as_str()]).collect() };
    let of_ids = |found: &HashMap<ObjectId, usize>, v: Vec<ObjectId>| -> Vec<usize> {
        v.iter().map(|i| found[i]).collect()
    };
    let index_of: HashMap<ObjectId, usize> = ids.iter().enumerate().map(|(k, i)| (*i, k)).collect();
    let lineages: [(&str, &dyn Lineage); 2] = [("store", &store), ("odb", store.odb())];

    for k in 0..dag.len() {
        let from_git: BTreeSet<usize> = to_nodes(git.lines(&["rev-list", &shas[k]]))
            .into_iter()
            .collect();
        let first_parent = to_nodes(git.lines(&["rev-list", "--first-parent", &shas[k]]));
        for (name, l) in lineages {
            let ours: BTreeSet<usize> = graph::ancestors(l, &[ids[k]], Follow::All)
                .unwrap()
                .iter()
                .map(|i| index_of[i])
                .collect();
            assert_eq!(ours, from_git, "seed {seed}, ancestors of n{k} ({name})");
            assert_eq!(
                graph::count(l, &[ids[k]], Follow::All).unwrap(),
                from_git.len(),
                "seed {seed}, count of n{k} ({name})"
            );
            let chain = graph::first_parent_chain(l, ids[k]).unwrap();
            assert_eq!(
                of_ids(&index_of, chain),
                first_parent,
                "seed {seed}, first parents of n{k}"
            );
            let fp_log = graph::log_order(l, &[ids[k]], Follow::FirstParent, None).unwrap();
            assert_eq!(
                fp_log.iter().map(|n| index_of[&n.id]).collect::<Vec<_>>(),
                first_parent,
                "seed {seed}, log --first-parent n{k}"
            );
        }
    }

    let mut rng = Rng::new(seed ^ 0x5eed);
    for _ in 0..40 {
        let a = rng.below(dag.len() as u64) as usize;
        let b = rng.below(dag.len() as u64) as usize;
        let bases_git: BTreeSet<usize> =
            to_nodes(git.lines(&["merge-base", "--all", &shas[a], &shas[b]]))
                .into_iter()
                .collect();
        let is_anc_git = git
            .run(&["merge-base", "--is-ancestor", &shas[a], &shas[b]])
            .status
            .code()
            .unwrap();
        assert!(is_anc_git == 0 || is_anc_git == 1);
        let count_git: usize = git.lines(&["rev-list", "--count", &shas[a], &shas[b]])[0]
            .parse()
            .unwrap();
        for (name, l) in lineages {
            let bases: BTreeSet<usize> = graph::merge_bases_all(l, ids[a], ids[b])
                .unwrap()
                .iter()
                .map(|i| index_of[i])
                .collect();
            assert_eq!(
                bases, bases_git,
                "seed {seed}, merge-base --all n{a} n{b} ({name})"
            );
            let one = graph::merge_base(l, ids[a], ids[b]).unwrap();
            assert_eq!(one.is_some(), !bases_git.is_empty());
            assert!(one.is_none_or(|o| bases_git.contains(&index_of[&o])));
            assert_eq!(
                graph::is_ancestor(l, ids[a], ids[b]).unwrap(),
                is_anc_git == 0,
                "seed {seed}, is n{a} an ancestor of n{b} ({name})"
            );
            assert_eq!(
                graph::count(l, &[ids[a], ids[b]], Follow::All).unwrap(),
                count_git,
                "seed {seed}, rev-list --count n{a} n{b} ({name})"
            );
        }
    }
}

fn walks_agree_with_git_on_random_dags(b: &Backend) {
    if !have_git() {
        eprintln!("note: git is not on PATH; skipping the comparison with git");
        return;
    }
    for seed in [1, 2, 3, 4, 5, 6, 7] {
        compare_with_git(b, seed);
    }
}

/// The log order by its definition, the slow way: repeatedly take the
/// newest (then smallest id) session none of whose children is left.
fn reference_order(nodes: &HashMap<ObjectId, Node>) -> Vec<ObjectId> {
    let mut left: HashSet<ObjectId> = nodes.keys().copied().collect();
    let mut out = Vec::new();
    while !left.is_empty() {
        let available = left
            .iter()
            .filter(|c| !left.iter().any(|other| nodes[other].parents.contains(c)));
        let best = *available
            .max_by_key(|c| (nodes[*c].created_at, std::cmp::Reverse(**c)))
            .unwrap();
        left.remove(&best);
        out.push(best);
    }
    out
}

fn log_order_is_topological_newest_first(b: &Backend) {
    for seed in 10..16 {
        let dag = Dag::random(seed);
        let (_b, store, ids) = build_store(b, &dag);
        let tips: Vec<ObjectId> = dag.tips().iter().map(|k| ids[*k]).collect();
        for follow in [Follow::All, Follow::FirstParent] {
            let order = graph::log_order(&store, &tips, follow, None).unwrap();
            let nodes: HashMap<ObjectId, Node> = order.iter().map(|n| (n.id, n.clone())).collect();
            assert_eq!(nodes.len(), order.len(), "no session twice");
            let expected_set = graph::ancestors(&store, &tips, follow).unwrap();
            assert_eq!(nodes.keys().copied().collect::<HashSet<_>>(), expected_set);
            let got: Vec<ObjectId> = order.iter().map(|n| n.id).collect();
            assert_eq!(got, reference_order(&nodes), "seed {seed} {follow:?}");
            // -n takes a prefix of the same order.
            let five = graph::log_order(&store, &tips, follow, Some(5)).unwrap();
            assert_eq!(five.as_slice(), &order[..5.min(order.len())]);
            // A single start streams along one line and agrees too.
            let one = graph::log_order(&store, &tips[..1], follow, None).unwrap();
            let one_nodes: HashMap<ObjectId, Node> =
                one.iter().map(|n| (n.id, n.clone())).collect();
            assert_eq!(
                one.iter().map(|n| n.id).collect::<Vec<_>>(),
                reference_order(&one_nodes)
            );
        }
    }
}

/// Where a line at character `x` goes in `line`: the session it reaches
/// (a `*` there), and the characters it continues from.
fn step(line: &str, commit_row: bool, x: usize) -> (bool, Vec<usize>) {
    let ch = |c: usize| line.as_bytes().get(c).copied().unwrap_or(b' ');
    if commit_row {
        return match ch(x) {
            b'*' => (true, vec![]),
            b'|' => (false, vec![x]),
            _ => (false, vec![]),
        };
    }
    let mut to = Vec::new();
    if ch(x) == b'|' {
        to.push(x);
    }
    if ch(x + 1) == b'\\' {
        to.push(x + 2);
    }
    if x >= 1 && ch(x - 1) == b'/' {
        let mut y = x - 1;
        while y >= 2 && ch(y - 2) == b'_' {
            y -= 2;
        }
        to.push(y - 1);
    }
    (false, to)
}

/// Follows the lines of a `--graph` drawing down from each `*` and returns
/// the sessions they reach; panics where a line leads nowhere. A `*` with
/// nothing below it is a session without parents.
fn trace(rows: &[(Option<ObjectId>, String)]) -> HashMap<ObjectId, BTreeSet<ObjectId>> {
    let mut reached: HashMap<ObjectId, BTreeSet<ObjectId>> = HashMap::new();
    for (r, (id, text)) in rows.iter().enumerate() {
        let Some(id) = id else { continue };
        assert_eq!(text.matches('*').count(), 1, "{text:?}");
        let mut found = BTreeSet::new();
        let mut active: BTreeSet<usize> = BTreeSet::new();
        if r + 1 < rows.len() {
            active.insert(text.find('*').unwrap());
        }
        for (k, (below, line)) in rows[r + 1..].iter().enumerate() {
            if active.is_empty() {
                break;
            }
            let mut next = BTreeSet::new();
            for &x in &active {
                let (hit, to) = step(line, below.is_some(), x);
                if hit {
                    found.insert(below.unwrap());
                } else {
                    assert!(
                        k == 0 || !to.is_empty(),
                        "a line of {id:?} stops at {x} of {line:?}"
                    );
                    next.extend(to);
                }
            }
            active = next;
        }
        assert!(active.is_empty(), "lines of {id:?} run off the bottom");
        reached.insert(*id, found);
    }
    reached
}

fn draw(order: &[Node]) -> Vec<(Option<ObjectId>, String)> {
    let mut lanes = Lanes::new();
    let mut rows = Vec::new();
    for n in order {
        let r = lanes.next(n.id, &n.parents);
        assert!(!r.commit.contains(['/', '\\', '_']));
        rows.extend(r.before.into_iter().map(|b| (None, b)));
        rows.push((Some(n.id), r.commit));
        rows.extend(r.after.into_iter().map(|a| (None, a)));
    }
    rows
}

fn graph_lines_lead_each_session_to_exactly_its_parents(b: &Backend) {
    for seed in 20..60 {
        let dag = Dag::random(seed);
        let (_b, store, ids) = build_store(b, &dag);
        let tips: Vec<ObjectId> = dag.tips().iter().map(|k| ids[*k]).collect();
        for follow in [Follow::All, Follow::FirstParent] {
            let order = graph::log_order(&store, &tips, follow, None).unwrap();
            let rows = draw(&order);
            let reached = trace(&rows);
            for n in &order {
                let parents: BTreeSet<ObjectId> = n.parents.iter().copied().collect();
                if reached[&n.id] != parents {
                    let picture: Vec<String> = rows
                        .iter()
                        .map(|(id, t)| match id {
                            Some(i) => format!("{t}  {}", ids.iter().position(|x| x == i).unwrap()),
                            None => t.clone(),
                        })
                        .collect();
                    panic!(
                        "seed {seed} {follow:?}: n{} reaches {:?}, its parents are {:?}\n{}",
                        ids.iter().position(|x| *x == n.id).unwrap(),
                        reached[&n.id]
                            .iter()
                            .map(|i| ids.iter().position(|x| x == i).unwrap())
                            .collect::<Vec<_>>(),
                        parents
                            .iter()
                            .map(|i| ids.iter().position(|x| x == i).unwrap())
                            .collect::<Vec<_>>(),
                        picture.join("\n")
                    );
                }
            }
        }
    }
}

fn the_dot_graph_has_every_session_and_edge_once(b: &Backend) {
    let dag = Dag::random(99);
    let (_b, store, ids) = build_store(b, &dag);
    let tips: Vec<ObjectId> = dag.tips().iter().map(|k| ids[*k]).collect();
    let g = SessionGraph::load(&store, &tips, Follow::All).unwrap();
    assert_eq!(g.len(), dag.len());
    let dot = g.to_dot(|n| vec![n.id.to_hex_prefix(12)]);
    assert_eq!(
        dot,
        g.to_dot(|n| vec![n.id.to_hex_prefix(12)]),
        "deterministic"
    );
    let edges: usize = dag.parents.iter().map(Vec::len).sum();
    let merges: usize = dag.parents.iter().map(|p| p.len().saturating_sub(1)).sum();
    assert_eq!(dot.matches(" -> ").count(), edges);
    assert_eq!(dot.matches("[style=dashed]").count(), merges);
    assert_eq!(dot.matches("[label=").count(), dag.len());
    for (k, ps) in dag.parents.iter().enumerate() {
        for (j, p) in ps.iter().enumerate() {
            let style = if j == 0 { "" } else { " [style=dashed]" };
            assert!(dot.contains(&format!("\"{}\" -> \"{}\"{style};\n", ids[k], ids[*p])));
        }
    }
}

fn a_session_missing_from_the_index_is_read_from_its_object(b: &Backend) {
    let dag = Dag::random(7);
    let (_b, store, ids) = build_store(b, &dag);
    // A session no ref reaches: the index has never seen it.
    let mut s = Session::new_root(1);
    s.parents = vec![ids[dag.len() - 1], ids[0]];
    let mut batch = WriteBatch::new();
    let loose = batch.session(&s).unwrap();
    store.odb().write(&batch, Durability::NoSync).unwrap();
    assert!(store.session_info(&loose).unwrap().is_none());
    assert_eq!(store.parents(&loose).unwrap(), s.parents);
    let via_store = graph::log_order(&store, &[loose], Follow::All, None).unwrap();
    let via_odb = graph::log_order(store.odb(), &[loose], Follow::All, None).unwrap();
    assert_eq!(via_store, via_odb);
    assert_eq!(via_store[0].id, loose);
}

two_backends!(
    walks_agree_with_git_on_random_dags,
    log_order_is_topological_newest_first,
    graph_lines_lead_each_session_to_exactly_its_parents,
    the_dot_graph_has_every_session_and_edge_once,
    a_session_missing_from_the_index_is_read_from_its_object,
);
