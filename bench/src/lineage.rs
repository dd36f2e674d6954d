//! Scenario 3: lineage over a deep chain and a wide forest: log, count,
//! is-ancestor and merge-base, through the library in-process, through the
//! `sessctl` CLI in fresh processes, and through git (the same DAG by
//! fast-import, with a commit-graph) in fresh processes. Every answer is
//! checked against the DAG the harness generated, for all three.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use sessctl_store::graph::{self, Follow};
use sessctl_store::{ObjectId, OpenOptions, RepackOptions, Store};

use crate::bulk::{self, Spec, Writer};
use crate::report::{Better, Group, Row};
use crate::support::Rng;
use crate::{git, ms, spawn, Ctx, R, T0};

/// A generated DAG: nodes in creation order, a parent before its children.
#[derive(Debug, Default)]
struct Dag {
    parent: Vec<Option<usize>>,
    /// Whether the node starts a conversation (a root or a fork).
    starts: Vec<bool>,
    /// Ref name and node of every tip.
    tips: Vec<(String, usize)>,
}

impl Dag {
    fn push(&mut self, parent: Option<usize>, starts: bool) -> usize {
        self.parent.push(parent);
        self.starts.push(starts);
        self.parent.len() - 1
    }

    fn len(&self) -> usize {
        self.parent.len()
    }

    fn depth(&self) -> Vec<usize> {
        let mut d = vec![0; self.len()];
        for i in 0..self.len() {
            if let Some(p) = self.parent[i] {
                d[i] = d[p] + 1;
            }
        }
        d
    }

    fn ancestors(&self, mut at: usize) -> Vec<bool> {
        let mut seen = vec![false; self.len()];
        loop {
            seen[at] = true;
            match self.parent[at] {
                Some(p) => at = p,
                None => return seen,
            }
        }
    }

    fn root_of(&self, mut at: usize) -> usize {
        while let Some(p) = self.parent[at] {
            at = p;
        }
        at
    }
}

/// The questions asked of a DAG, with the answers the generator knows.
#[derive(Debug)]
struct Queries {
    /// Ref names `log` and `count` start from (`None`: every ref, `--all`).
    starts: Option<Vec<String>>,
    reachable: usize,
    /// (ancestor, descendant): is-ancestor is true.
    ancestor: (usize, usize),
    /// Two tips and their merge base.
    merge: (usize, usize, usize),
}

/// A chain of `n` sessions, and a 10-session side branch forked from its
/// tenth: the merge base of the two tips is near the root.
fn chain(n: usize) -> (Dag, Queries) {
    let mut d = Dag::default();
    let side_len = 10.min(n / 2);
    let main_len = n - side_len;
    for i in 0..main_len {
        d.push(i.checked_sub(1), i == 0);
    }
    let fork_at = 10.min(main_len - 1);
    let mut at = fork_at;
    for k in 0..side_len {
        at = d.push(Some(at), k == 0);
    }
    d.tips = vec![("chain".into(), main_len - 1), ("side".into(), at)];
    let q = Queries {
        starts: Some(vec!["chain".into()]),
        reachable: main_len,
        ancestor: (0, main_len - 1),
        merge: (main_len - 1, at, fork_at),
    };
    (d, q)
}

/// `n` sessions from `roots` roots: each new session extends a random open
/// line of history, or (one in twenty) forks any earlier session into a new
/// line. Queries run between the deepest tip and the tip of the same tree
/// whose history parted from it the earliest.
fn forest(n: usize, roots: usize) -> (Dag, Queries) {
    let roots = roots.clamp(1, n);
    let mut rng = Rng::new(3);
    let mut d = Dag::default();
    let mut lines: Vec<usize> = Vec::new();
    for i in 0..n {
        if i < roots {
            lines.push(d.push(None, true));
        } else if rng.below(20) == 0 {
            let p = rng.below(i as u64) as usize;
            lines.push(d.push(Some(p), true));
        } else {
            let l = rng.below(lines.len() as u64) as usize;
            lines[l] = d.push(Some(lines[l]), false);
        }
    }
    d.tips = lines
        .iter()
        .enumerate()
        .map(|(k, &t)| (format!("t{k:05}"), t))
        .collect();
    let depth = d.depth();
    let a = *lines
        .iter()
        .max_by_key(|&&t| (depth[t], std::cmp::Reverse(t)))
        .expect("a forest has a line");
    let root = d.root_of(a);
    let of_a = d.ancestors(a);
    // (tip, merge base with a): the shallowest base, then the deepest tip.
    let mut best: Option<(usize, usize)> = None;
    for &t in &lines {
        if t == a || d.root_of(t) != root {
            continue;
        }
        let mut at = t;
        while !of_a[at] {
            at = d.parent[at].expect("the same tree meets A's line");
        }
        let key = |(t, base): (usize, usize)| (depth[base], std::cmp::Reverse(depth[t]));
        if best.is_none_or(|b| key((t, at)) < key(b)) {
            best = Some((t, at));
        }
    }
    let (b, base) = best.unwrap_or((a, a));
    let q = Queries {
        starts: None,
        reachable: n,
        ancestor: (root, a),
        merge: (a, b, base),
    };
    (d, q)
}

pub fn run(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    let (d, q) = chain(ctx.s.chain);
    measure(ctx, &format!("chain {}", d.len()), &d, &q, out)?;
    let (d, q) = forest(ctx.s.forest, ctx.s.roots);
    let name = format!("forest {} ({} tips)", d.len(), d.tips.len());
    measure(ctx, &name, &d, &q, out)
}

/// Writes the DAG as sessions with no messages, a conversation per tip;
/// repacks. Returns the store's path and the sessions' ids.
fn build_sessctl(dir: &Path, d: &Dag) -> R<Vec<ObjectId>> {
    let store = Store::init(dir)?;
    let mut w = Writer::new(&store);
    let mut ids: Vec<ObjectId> = Vec::with_capacity(d.len());
    // Each node's conversation: the session that started its line.
    let mut conv: Vec<usize> = Vec::with_capacity(d.len());
    for i in 0..d.len() {
        let parent = d.parent[i];
        conv.push(match parent {
            Some(p) if !d.starts[i] => conv[p],
            _ => i,
        });
        let id = w.session(Spec {
            parents: parent.map(|p| ids[p]).into_iter().collect(),
            created_at: T0 + i as i64 * 1000,
            conversation: (conv[i] != i).then(|| ids[conv[i]]),
            base: 0,
            added: &[],
        })?;
        ids.push(id);
    }
    w.flush()?;
    let convs: Vec<bulk::Conversation> = d
        .tips
        .iter()
        .map(|(name, t)| bulk::Conversation {
            name: name.clone(),
            head: ids[*t],
            id: ids[conv[*t]],
            created_at: T0 + conv[*t] as i64 * 1000,
            updated_at: T0 + *t as i64 * 1000,
        })
        .collect();
    bulk::register(&store, &convs)?;
    store.repack(&RepackOptions::default())?;
    Ok(ids)
}

/// The same DAG in a bare git repository: empty-tree commits made by
/// fast-import at the same times, a branch per tip, a commit-graph.
/// Returns the commits' hashes.
fn build_git(dir: &Path, d: &Dag) -> R<(git::Repo, Vec<String>)> {
    let repo = git::Repo::init(dir)?;
    let marks = dir.join("bench.marks");
    repo.fast_import(Some(&marks), |w| {
        for i in 0..d.len() {
            if d.parent[i].is_none() {
                writeln!(w, "reset refs/heads/building")?;
            }
            writeln!(w, "commit refs/heads/building\nmark :{}", i + 1)?;
            git::committer(w, T0 / 1000 + i as i64)?;
            git::data(w, format!("n{i}").as_bytes())?;
            if let Some(p) = d.parent[i] {
                writeln!(w, "from :{}", p + 1)?;
            }
            writeln!(w)?;
        }
        for (name, t) in &d.tips {
            writeln!(w, "reset refs/heads/{name}\nfrom :{}\n", t + 1)?;
        }
        Ok(())
    })?;
    repo.run(&["update-ref", "-d", "refs/heads/building"])?;
    // As `git gc` leaves them: fast-import writes a file per branch.
    repo.run(&["pack-refs", "--all"])?;
    repo.run(&["commit-graph", "write", "--reachable"])?;
    let mut hashes = vec![String::new(); d.len()];
    for line in std::fs::read_to_string(&marks)?.lines() {
        let (mark, hash) = line.split_once(' ').ok_or("a malformed marks line")?;
        let i: usize = mark.trim_start_matches(':').parse()?;
        hashes[i - 1] = hash.to_owned();
    }
    Ok((repo, hashes))
}

/// Times `f` `n` times in ms.
fn times(n: usize, f: &mut dyn FnMut() -> R<f64>) -> R<Vec<f64>> {
    (0..n).map(|_| f()).collect()
}

fn measure(ctx: &Ctx, name: &str, d: &Dag, q: &Queries, out: &mut Vec<Row>) -> R<()> {
    let s = &ctx.s;
    let tmp = tempfile::tempdir_in(&ctx.tmp)?;
    let spath = tmp.path().join("sessctl");
    let t = Instant::now();
    let ids = build_sessctl(&spath, d)?;
    eprintln!(
        "sessctl-bench: 3 {name}: sessctl store built in {:.0} ms",
        ms(t)
    );
    let git = if ctx.git(3) {
        let t = Instant::now();
        let g = build_git(&tmp.path().join("git"), d)?;
        eprintln!(
            "sessctl-bench: 3 {name}: git repository built in {:.0} ms",
            ms(t)
        );
        Some(g)
    } else {
        None
    };
    // Read-only: a writer would hold the store's lock, and every CLI
    // process below would then have to rebuild a temporary index.
    let store = Store::open(
        &spath,
        &OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        },
    )?;
    let starts: Vec<ObjectId> = match &q.starts {
        Some(names) => names
            .iter()
            .map(|n| store.resolve_rev(n))
            .collect::<Result<_, _>>()?,
        None => d.tips.iter().map(|(_, t)| ids[*t]).collect(),
    };
    let hex = |i: usize| ids[i].to_string();
    let sessctl_cli = ctx.sessctl(3);
    let cli = |args: &[String]| -> Command {
        let mut c = Command::new(sessctl_cli.unwrap_or(Path::new("sessctl")));
        c.arg("--store").arg(&spath).args(args);
        c
    };
    let log_args = |oneline: &str| -> Vec<String> {
        let mut a = vec!["log".to_owned(), oneline.to_owned()];
        match &q.starts {
            Some(names) => a.extend(names.iter().cloned()),
            None => a.push("--all".into()),
        }
        a
    };
    let git_args = |first: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = first.iter().map(|s| (*s).to_owned()).collect();
        match &q.starts {
            Some(names) => a.extend(names.iter().cloned()),
            None => a.push("--all".into()),
        }
        a
    };
    let lines = |o: &std::process::Output| {
        o.stdout
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count()
    };
    let want = q.reachable;
    let check = |what: &str, got: usize| -> R<()> {
        if got != want {
            return Err(format!("3 {name}: {what} found {got} sessions, not {want}").into());
        }
        Ok(())
    };

    // log
    let mut cli_log = Vec::new();
    let mut g = Group::new(format!("3 {name}: log"), "ms", Better::Lower);
    if sessctl_cli.is_some() {
        let args = log_args("--oneline");
        cli_log = times(s.lineage_runs, &mut || {
            let (dt, o) = spawn(&mut cli(&args), &[0])?;
            check("sessctl log", lines(&o))?;
            Ok(dt)
        })?;
        g.add("sessctl log --oneline (process)", cli_log.clone());
    }
    g.add(
        "sessctl log_order (library)",
        times(s.lineage_runs, &mut || {
            let t = Instant::now();
            let n = graph::log_order(&store, &starts, Follow::All, None)?.len();
            let dt = ms(t);
            check("log_order", n)?;
            Ok(dt)
        })?,
    );
    let mut git_log = Vec::new();
    if let Some((repo, _)) = &git {
        let args = git_args(&["log", "--format=%H"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        git_log = times(s.lineage_runs, &mut || {
            let (dt, o) = spawn(&mut repo.cmd(&args), &[0])?;
            check("git log", lines(&o))?;
            Ok(dt)
        })?;
        g.add("git log --format=%H (process)", git_log.clone());
    }
    crate::report::emit(out, g);

    // log, ids only: what `log --format=%H` needs (the same git runs).
    let mut g = Group::new(format!("3 {name}: log ids"), "ms", Better::Lower);
    g.add(
        "sessctl LogIds (library)",
        times(s.lineage_runs, &mut || {
            let t = Instant::now();
            let mut n = 0usize;
            for id in graph::LogIds::new(&store, &starts, Follow::All)? {
                id?;
                n += 1;
            }
            let dt = ms(t);
            check("LogIds", n)?;
            Ok(dt)
        })?,
    );
    if !git_log.is_empty() {
        g.add("git log --format=%H (process)", git_log);
    }
    crate::report::emit(out, g);

    // count
    let mut g = Group::new(format!("3 {name}: count"), "ms", Better::Lower);
    if sessctl_cli.is_some() {
        // The CLI has no `rev-list --count`: a user counts log's lines
        // (the same runs as the log row's).
        g.add("sessctl log --oneline | wc -l", cli_log);
    }
    g.add(
        "sessctl count (library)",
        times(s.lineage_runs, &mut || {
            let t = Instant::now();
            let n = graph::count(&store, &starts, Follow::All)?;
            let dt = ms(t);
            check("count", n)?;
            Ok(dt)
        })?,
    );
    if let Some((repo, _)) = &git {
        let args = git_args(&["rev-list", "--count"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        g.add(
            "git rev-list --count (process)",
            times(s.lineage_runs, &mut || {
                let (dt, o) = spawn(&mut repo.cmd(&args), &[0])?;
                let got: usize = String::from_utf8_lossy(&o.stdout).trim().parse()?;
                check("git rev-list --count", got)?;
                Ok(dt)
            })?,
        );
    }
    crate::report::emit(out, g);

    // is-ancestor (true: the walk covers the whole line between them)
    let (anc, desc) = q.ancestor;
    let mut g = Group::new(format!("3 {name}: is-ancestor"), "ms", Better::Lower);
    if sessctl_cli.is_some() {
        let args = vec![
            "merge-base".to_owned(),
            "--is-ancestor".into(),
            hex(anc),
            hex(desc),
        ];
        g.add(
            "sessctl merge-base --is-ancestor",
            times(s.lineage_runs, &mut || Ok(spawn(&mut cli(&args), &[0])?.0))?,
        );
    }
    g.add(
        "sessctl is_ancestor (library)",
        times(s.lineage_runs, &mut || {
            let t = Instant::now();
            let yes = graph::is_ancestor(&store, ids[anc], ids[desc])?;
            let dt = ms(t);
            if !yes {
                return Err(format!("3 {name}: is_ancestor said no").into());
            }
            Ok(dt)
        })?,
    );
    if let Some((repo, hashes)) = &git {
        let args = ["merge-base", "--is-ancestor", &hashes[anc], &hashes[desc]];
        g.add(
            "git merge-base --is-ancestor",
            times(s.lineage_runs, &mut || {
                Ok(spawn(&mut repo.cmd(&args), &[0])?.0)
            })?,
        );
    }
    crate::report::emit(out, g);

    // merge-base of two tips whose histories parted early
    let (a, b, base) = q.merge;
    let mut g = Group::new(format!("3 {name}: merge-base"), "ms", Better::Lower);
    if sessctl_cli.is_some() {
        let args = vec!["merge-base".to_owned(), hex(a), hex(b)];
        g.add(
            "sessctl merge-base (process)",
            times(s.lineage_runs, &mut || {
                let (dt, o) = spawn(&mut cli(&args), &[0])?;
                let got = String::from_utf8_lossy(&o.stdout).trim().to_owned();
                if got != hex(base) {
                    return Err(format!("3 {name}: sessctl merge-base said {got}").into());
                }
                Ok(dt)
            })?,
        );
    }
    g.add(
        "sessctl merge_base (library)",
        times(s.lineage_runs, &mut || {
            let t = Instant::now();
            let got = graph::merge_base(&store, ids[a], ids[b])?;
            let dt = ms(t);
            if got != Some(ids[base]) {
                return Err(format!("3 {name}: merge_base said {got:?}").into());
            }
            Ok(dt)
        })?,
    );
    if let Some((repo, hashes)) = &git {
        let args = ["merge-base", &hashes[a], &hashes[b]];
        g.add(
            "git merge-base (process)",
            times(s.lineage_runs, &mut || {
                let (dt, o) = spawn(&mut repo.cmd(&args), &[0])?;
                let got = String::from_utf8_lossy(&o.stdout).trim().to_owned();
                if got != hashes[base] {
                    return Err(format!("3 {name}: git merge-base said {got}").into());
                }
                Ok(dt)
            })?,
        );
    }
    crate::report::emit(out, g);
    // Every commit of the DAG is in git, none twice.
    if let Some((repo, _)) = &git {
        let all = repo.run(&["rev-list", "--count", "--all"])?;
        if all != d.len().to_string() {
            return Err(format!("3 {name}: git holds {all} commits, not {}", d.len()).into());
        }
    }
    Ok(())
}
