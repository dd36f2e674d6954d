//! Scenario 2's catch-up rows: what `import --watch` pays to import the
//! last 10 lines an agent wrote, on a short and a long transcript. The
//! transcripts are the largest real Claude Code file of `../shared/data`
//! repeated, each copy with fresh ids and chained to the one before, so that
//! it reads as one long conversation. Two ways: going on from where the last
//! catch-up left (`import::tail`, what the watcher does), and reading the
//! file whole (what every catch-up did before, and still does when it must).
//! Each sample is a real catch-up (its sessions written), of the next 10
//! lines.

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::Value;
use sessctl_store::import::tail::{import_more, import_resumable};
use sessctl_store::import::{import_sources, Format, ImportOptions, ImportReport, SourceFile};
use sessctl_store::Store;

use crate::report::{Better, Group, Row};
use crate::{ms, Ctx, R};

/// Lines each catch-up imports.
const STEP: usize = 10;

/// `n` lines of Claude Code transcript: copies of `lines`, each with its
/// ids suffixed and its first root hung on the copy before.
fn synthetic(lines: &[Value], n: usize) -> Vec<String> {
    let mut ids = HashSet::new();
    for v in lines {
        collect_ids(v, &mut ids);
    }
    let mut out = Vec::with_capacity(n);
    let mut last_uuid: Option<String> = None;
    let mut copy = 0;
    while out.len() < n {
        let mut first_root = true;
        for v in lines {
            if out.len() == n {
                break;
            }
            let mut v = v.clone();
            if copy > 0 {
                rename(&mut v, &ids, copy);
            }
            if copy > 0 && first_root && v.get("parentUuid").is_some_and(Value::is_null) {
                if let (Some(p), Some(o)) = (&last_uuid, v.as_object_mut()) {
                    o.insert("parentUuid".into(), Value::String(p.clone()));
                    first_root = false;
                }
            }
            let is_message = matches!(
                v.get("type").and_then(Value::as_str),
                Some("user" | "assistant")
            );
            if is_message {
                last_uuid = v.get("uuid").and_then(Value::as_str).map(str::to_owned);
            }
            out.push(format!("{v}\n"));
        }
        copy += 1;
    }
    out
}

/// The ids a copy must not share: uuids, message and tool ids.
fn collect_ids(v: &Value, ids: &mut HashSet<String>) {
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let id_key = matches!(
                    k.as_str(),
                    "uuid" | "parentUuid" | "logicalParentUuid" | "leafUuid" | "id" | "tool_use_id"
                );
                match x {
                    Value::String(s) if id_key => {
                        ids.insert(s.clone());
                    }
                    _ => collect_ids(x, ids),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_ids(x, ids)),
        _ => {}
    }
}

fn rename(v: &mut Value, ids: &HashSet<String>, copy: usize) {
    match v {
        Value::String(s) if ids.contains(s.as_str()) => *s = format!("{s}-{copy}"),
        Value::Object(o) => o.values_mut().for_each(|x| rename(x, ids, copy)),
        Value::Array(a) => a.iter_mut().for_each(|x| rename(x, ids, copy)),
        _ => {}
    }
}

fn opts() -> ImportOptions {
    ImportOptions {
        no_sync: true,
        ..ImportOptions::default()
    }
}

/// Times `reps` catch-ups of `STEP` lines each at the end of a transcript
/// of `lines`: (going on, reading whole), in ms.
fn measure(tmp: &Path, lines: &[String], reps: usize) -> R<(Vec<f64>, Vec<f64>)> {
    let start = lines.len() - STEP * reps;
    let dir = tempfile::tempdir_in(tmp)?;
    let mut resumed = Vec::with_capacity(reps);
    let mut whole = Vec::with_capacity(reps);
    for going_on in [true, false] {
        let store = Store::init(&dir.path().join(if going_on { "on" } else { "whole" }))?;
        let file: PathBuf = dir.path().join("session.jsonl");
        std::fs::write(&file, lines[..start].concat())?;
        let text = std::fs::read_to_string(&file)?;
        let src = SourceFile {
            path: file.clone(),
            text,
        };
        let (_, mut resume) = import_resumable(
            &store,
            Format::ClaudeCode,
            &[src],
            &opts(),
            ImportReport::default(),
        )?;
        let mut read = start_len(lines, start);
        for k in 0..reps {
            let more = lines[start + k * STEP..start + (k + 1) * STEP].concat();
            std::fs::OpenOptions::new()
                .append(true)
                .open(&file)?
                .write_all(more.as_bytes())?;
            let t = Instant::now();
            if going_on {
                let r = resume
                    .take()
                    .ok_or("the transcript cannot be gone on from")?;
                let mut f = std::fs::File::open(&file)?;
                f.seek(SeekFrom::Start(read))?;
                let mut new = String::new();
                f.read_to_string(&mut new)?;
                read += new.len() as u64;
                let (_, next) =
                    import_more(&store, r, &[new.as_str()], &opts(), ImportReport::default())?
                        .ok_or("a catch-up read the transcript whole")?;
                resume = next;
                resumed.push(ms(t));
            } else {
                let text = std::fs::read_to_string(&file)?;
                let src = SourceFile {
                    path: file.clone(),
                    text,
                };
                import_sources(
                    &store,
                    Format::ClaudeCode,
                    &[src],
                    &opts(),
                    ImportReport::default(),
                )?;
                whole.push(ms(t));
            }
        }
    }
    Ok((resumed, whole))
}

fn start_len(lines: &[String], start: usize) -> u64 {
    lines[..start].iter().map(|l| l.len() as u64).sum()
}

/// The catch-up rows (see the module docs).
pub fn rows(ctx: &Ctx, out: &mut Vec<Row>) -> R<()> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/claude-code/session-3fe1b6bc.jsonl");
    let text = std::fs::read_to_string(&src)
        .map_err(|e| format!("{}: {e} (the real transcripts)", src.display()))?;
    let real: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let (short, long) = if ctx.s.quick {
        (300, 2_000)
    } else {
        (1_000, 50_000)
    };
    // Whole copies, so that both end on the same lines (the same turn in
    // progress).
    let copies = |n: usize| (n / real.len()).max(1) * real.len();
    let (short, long) = (copies(short), copies(long));
    let reps = ctx.s.reps.max(2);
    let mut medians = Vec::new();
    for n in [short, long] {
        let lines = synthetic(&real, n);
        let (resumed, whole) = measure(&ctx.tmp, &lines, reps)?;
        let mut g = Group::new(
            format!("2 catch-up of {STEP} new lines, {n}-line transcript"),
            "ms",
            Better::Lower,
        );
        medians.push((median(&resumed), median(&whole)));
        g.add("sessctl (going on, import --watch)", resumed);
        g.add("read whole (every catch-up before)", whole);
        crate::report::emit(out, g);
    }
    // What the long transcript costs over the short one: near 1 when a
    // catch-up costs what its new lines do.
    let mut g = Group::new(
        format!("2 catch-up of {STEP} lines, {long}-line over {short}-line transcript"),
        "x",
        Better::Lower,
    );
    g.add(
        "sessctl (going on, import --watch)",
        vec![medians[1].0 / medians[0].0],
    );
    g.add(
        "read whole (every catch-up before)",
        vec![medians[1].1 / medians[0].1],
    );
    crate::report::emit(out, g);
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
