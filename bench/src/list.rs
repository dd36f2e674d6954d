//! Scenario 6: a fresh process opens a store of many conversations and
//! lists the 20 most recently active: `sessctl ls`, against this binary
//! re-run as a process that asks SQLite the same. Both must list the same
//! names in the same order.

use std::process::Command;
use std::time::Instant;

use serde_json::Value;
use sessctl_store::Store;

use crate::anchors::Sqlite;
use crate::bulk::{self, Spec, Writer};
use crate::report::{Better, Group, Row};
use crate::support::Rng;
use crate::{ms, small_message, spawn, Ctx, R, T0};

pub fn run(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    let n = ctx.s.conversations;
    let dir = tempfile::tempdir_in(&ctx.tmp)?;
    let spath = dir.path().join("sessctl");
    let dbpath = dir.path().join("s.db");
    let t = Instant::now();
    {
        let store = Store::init(&spath)?;
        let mut w = Writer::new(&store);
        let q = Sqlite::open(&dbpath, false)?;
        let mut rng = Rng::new(4);
        let mut regs = Vec::with_capacity(n);
        let tx = q.conn.unchecked_transaction()?;
        for i in 0..n {
            let name = format!("c{i:06}");
            let msgs: Vec<Value> = (0..2).map(|k| small_message(&name, k, &mut rng)).collect();
            let at = T0 + i as i64 * 1000;
            let id = w.session(Spec {
                parents: Vec::new(),
                created_at: at,
                conversation: None,
                base: 0,
                added: &msgs,
            })?;
            regs.push(bulk::Conversation {
                name: name.clone(),
                head: id,
                id,
                created_at: at,
                updated_at: at,
            });
            tx.execute(
                "INSERT INTO sessions VALUES (?1, ?2, ?2)",
                rusqlite::params![name, at],
            )?;
            for (k, m) in msgs.iter().enumerate() {
                tx.execute(
                    "INSERT INTO messages VALUES (?1, ?2, ?3)",
                    rusqlite::params![name, k as i64, serde_json::to_string(m)?],
                )?;
            }
        }
        tx.commit()?;
        q.checkpoint()?;
        w.flush()?;
        bulk::register(&store, &regs)?;
    }
    eprintln!(
        "sessctl-bench: 6: {n} conversations built in {:.0} ms",
        ms(t)
    );
    let want: Vec<String> = (0..n).rev().take(20).map(|i| format!("c{i:06}")).collect();
    let names = |o: &std::process::Output| -> R<Vec<String>> {
        let v: Value = serde_json::from_slice(&o.stdout)?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    };
    let mut g = Group::new(
        format!("6 open + ls 20 newest of {n}"),
        "ms per process",
        Better::Lower,
    )
    .p99();
    let listed = |cmd: &mut Command, who: &str| -> R<f64> {
        let (dt, o) = spawn(cmd, &[0])?;
        let got = names(&o)?;
        if got != want {
            return Err(format!("6: {who} listed {got:?}, not {want:?}").into());
        }
        Ok(dt)
    };
    if let Some(sessctl) = ctx.sessctl(6) {
        let mut v = Vec::new();
        for _ in 0..ctx.s.spawns {
            v.push(listed(
                Command::new(sessctl)
                    .arg("--store")
                    .arg(&spath)
                    .args(["ls", "--limit", "20", "--json"]),
                "sessctl ls",
            )?);
        }
        g.add("sessctl ls (process)", v);
    }
    let mut v = Vec::new();
    for _ in 0..ctx.s.spawns {
        v.push(listed(
            Command::new(&ctx.exe).arg("--sqlite-ls").arg(&dbpath),
            "the SQLite listing",
        )?);
    }
    g.add("sqlite (process)", v);
    crate::report::emit(out, g);
    Ok(())
}
