//! Scenario 4: gc and fsck over a store of about `--gc-objects` objects:
//! many conversations of unique messages, a tenth of them deleted so their
//! objects are unreachable. git gets the same history (a commit per turn
//! whose tree holds the turn's messages), the same branches deleted. After
//! fsck, a second gc with nothing to drop, then a gc after one more
//! conversation is deleted (little to drop from a large pack).

use std::time::Instant;

use serde_json::Value;
use sessctl_store::fsck::FsckOptions;
use sessctl_store::gc::{GcOptions, Prune};
use sessctl_store::{Durability, ObjectId, RepackOptions, Store};

use crate::bulk::{self, Spec, Writer};
use crate::report::{Better, Group, Row};
use crate::support::Rng;
use crate::{git, ms, small_message, spawn, Ctx, R, T0};

/// Messages per turn: a turn is 4 sessctl objects, 5 git objects.
const MSGS: usize = 3;

pub fn run(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    let turns = if ctx.s.quick { 10 } else { 50 };
    let convs = (ctx.s.gc_objects / (turns * (MSGS + 1))).max(2);
    let deleted = |c: usize| c % 10 == 9 || (convs < 10 && c == 0);
    let n_deleted = (0..convs).filter(|&c| deleted(c)).count();
    let per_conv = turns * (MSGS + 1);
    let objects = convs * per_conv;
    let name = |c: usize| format!("c{c:06}");
    let history = |c: usize| -> Vec<Vec<Value>> {
        let mut rng = Rng::new(100 + c as u64);
        (0..turns)
            .map(|t| {
                (0..MSGS)
                    .map(|k| small_message(&format!("c{c} t{t}"), t * MSGS + k, &mut rng))
                    .collect()
            })
            .collect()
    };

    let tmp = tempfile::tempdir_in(&ctx.tmp)?;
    let spath = tmp.path().join("sessctl");
    let t = Instant::now();
    {
        let store = Store::init(&spath)?;
        let mut w = Writer::new(&store);
        let mut regs = Vec::with_capacity(convs);
        for c in 0..convs {
            let mut head: Option<ObjectId> = None;
            let mut root = None;
            let mut len = 0u64;
            for (t, msgs) in history(c).iter().enumerate() {
                let id = w.session(Spec {
                    parents: head.into_iter().collect(),
                    created_at: T0 + (c * turns + t) as i64,
                    conversation: root,
                    base: len,
                    added: msgs,
                })?;
                len += msgs.len() as u64;
                root = root.or(Some(id));
                head = Some(id);
            }
            regs.push(bulk::Conversation {
                name: name(c),
                head: head.ok_or("a conversation without turns")?,
                id: root.ok_or("a conversation without turns")?,
                created_at: T0 + (c * turns) as i64,
                updated_at: T0 + ((c + 1) * turns) as i64,
            });
        }
        w.flush()?;
        bulk::register(&store, &regs)?;
        for c in (0..convs).filter(|&c| deleted(c)) {
            store.delete(&name(c), Durability::NoSync)?;
        }
        store.repack(&RepackOptions::default())?;
    }
    eprintln!(
        "sessctl-bench: 4: sessctl store of {objects} objects ({convs} conversations, \
         {n_deleted} deleted) built in {:.0} ms",
        ms(t)
    );
    let git_repo = if ctx.git(4) {
        let t = Instant::now();
        let repo = git::Repo::init(&tmp.path().join("git"))?;
        repo.fast_import(None, |w| {
            for c in 0..convs {
                for (t, msgs) in history(c).iter().enumerate() {
                    writeln!(w, "commit refs/heads/{}", name(c))?;
                    git::committer(w, T0 / 1000 + (c * turns + t) as i64)?;
                    git::data(w, format!("turn {t}").as_bytes())?;
                    writeln!(w, "deleteall")?;
                    for (k, m) in msgs.iter().enumerate() {
                        writeln!(w, "M 100644 inline m{k}.json")?;
                        git::data(w, &serde_json::to_vec(m)?)?;
                    }
                    writeln!(w)?;
                }
            }
            Ok(())
        })?;
        let deletes: String = (0..convs)
            .filter(|&c| deleted(c))
            .map(|c| format!("delete refs/heads/{}\n", name(c)))
            .collect();
        repo.run_with(&["update-ref", "--stdin"], deletes.as_bytes())?;
        eprintln!(
            "sessctl-bench: 4: git repository of {} objects built in {:.0} ms",
            convs * turns * (MSGS + 2),
            ms(t)
        );
        Some(repo)
    } else {
        None
    };

    let mut g = Group::new(
        format!("4 gc --prune=now, {objects} objects"),
        "s",
        Better::Lower,
    );
    let store = Store::open(&spath, &Default::default())?;
    let opts = GcOptions {
        prune: Prune::Now,
        // As git's reflogs in a bare repository: none keeps a deleted
        // conversation alive (the CLI keeps 90 days of them by default).
        reflog_expiry_ms: 0,
        ..GcOptions::default()
    };
    let t = Instant::now();
    let r = store.gc(&opts)?;
    g.add("sessctl Store::gc", vec![ms(t) / 1e3]);
    let (kept, gone) = ((convs - n_deleted) * per_conv, n_deleted * per_conv);
    if r.objects != objects || r.reachable != kept || r.pruned != gone {
        return Err(format!(
            "4: sessctl gc saw {} objects, {} reachable, pruned {}; expected {objects}, {kept}, {gone}",
            r.objects, r.reachable, r.pruned
        )
        .into());
    }
    if let Some(repo) = &git_repo {
        let (dt, _) = spawn(&mut repo.cmd(&["gc", "--prune=now", "-q"]), &[0])?;
        g.add("git gc --prune=now", vec![dt / 1e3]);
        let want = (convs - n_deleted) * turns * (MSGS + 2);
        let (loose, packed) = repo.count_objects()?;
        if loose != 0 || packed != want as u64 {
            return Err(format!(
                "4: after git gc: {loose} loose and {packed} packed objects, expected 0 and {want}"
            )
            .into());
        }
    }
    crate::report::emit(out, g);

    let mut g = Group::new(format!("4 fsck, {kept} objects"), "s", Better::Lower);
    let t = Instant::now();
    let r = store.fsck(&FsckOptions::default(), &mut |_, _| {})?;
    g.add("sessctl Store::fsck", vec![ms(t) / 1e3]);
    if !r.is_clean() || r.objects != kept {
        return Err(format!(
            "4: sessctl fsck: {} objects, problems: {:?}",
            r.objects, r.problems
        )
        .into());
    }
    if let Some(repo) = &git_repo {
        let (dt, _) = spawn(&mut repo.cmd(&["fsck", "--no-progress"]), &[0])?;
        g.add("git fsck", vec![dt / 1e3]);
    }
    crate::report::emit(out, g);
    // A second gc with nothing to drop: what a routine gc costs. git's
    // repacks everything again (reusing its deltas).
    let mut g = Group::new(
        format!("4 gc again, nothing to drop, {kept} objects"),
        "s",
        Better::Lower,
    );
    let t = Instant::now();
    let r = store.gc(&opts)?;
    g.add("sessctl Store::gc", vec![ms(t) / 1e3]);
    if r.pruned != 0 || r.objects != kept {
        return Err(format!("4: the second gc pruned {} of {}", r.pruned, r.objects).into());
    }
    if let Some(repo) = &git_repo {
        let (dt, _) = spawn(&mut repo.cmd(&["gc", "--prune=now", "-q"]), &[0])?;
        g.add("git gc --prune=now", vec![dt / 1e3]);
    }
    crate::report::emit(out, g);

    // One more conversation deleted from the packed store: a gc that drops
    // little (one conversation's objects, a block or two) from a large pack.
    let last = (0..convs)
        .rev()
        .find(|&c| !deleted(c))
        .ok_or("4: no conversation left to delete")?;
    let mut g = Group::new(
        format!("4 gc dropping one conversation, {kept} objects packed"),
        "s",
        Better::Lower,
    );
    store.delete(&name(last), Durability::NoSync)?;
    let t = Instant::now();
    let r = store.gc(&opts)?;
    g.add("sessctl Store::gc", vec![ms(t) / 1e3]);
    if r.pruned != per_conv {
        return Err(format!(
            "4: gc of one conversation pruned {}, not {per_conv}",
            r.pruned
        )
        .into());
    }
    if let Some(repo) = &git_repo {
        repo.run_with(
            &["update-ref", "--stdin"],
            format!("delete refs/heads/{}\n", name(last)).as_bytes(),
        )?;
        let (dt, _) = spawn(&mut repo.cmd(&["gc", "--prune=now", "-q"]), &[0])?;
        g.add("git gc --prune=now", vec![dt / 1e3]);
    }
    crate::report::emit(out, g);

    Ok(())
}
