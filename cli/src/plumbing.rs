//! Plumbing: `init`, `hash-object`, `cat-object`, `repack`.

use std::io::Read;
use std::path::PathBuf;

use clap::{ArgGroup, Args};
use sessctl_store::odb::{init_layout, RepackOptions};
use sessctl_store::time::format_rfc3339_ms;
use sessctl_store::{Blob, Durability, Object, ObjectId, Session};

use crate::output::print;
use crate::{CmdResult, CommandError, Ctx};

pub fn init(ctx: &Ctx) -> CmdResult {
    if let Some(url) = ctx.remote_url() {
        return init_remote(url);
    }
    // `cd .sessctl/journal && sessctl init` would nest a store in a store's
    // own files, where gc and repack do not expect one.
    let target = std::env::current_dir()?.join(&ctx.store);
    if let Some(outer) = target
        .parent()
        .into_iter()
        .flat_map(std::path::Path::ancestors)
        .find(|a| sessctl_store::odb::check_format(a).is_ok())
    {
        return Err(CommandError::Failed(format!(
            "{} is inside the store {}: create a store elsewhere",
            ctx.store.display(),
            outer.display()
        )));
    }
    init_layout(&ctx.store)?;
    print(&format!(
        "Initialized empty sessctl store in {}\n",
        ctx.store.display()
    ))
}

/// `init --store postgres://...`: the schema (migrations it lacks) and a
/// check that the bucket takes a create-only write.
#[cfg(feature = "remote")]
fn init_remote(url: &str) -> CmdResult {
    let s3 = sessctl_store::odb::S3Settings::from_env();
    let new = sessctl_store::odb::RemoteBackend::init(url, &s3)?;
    // Open it as every other command will: the URL, the schema, the bucket.
    let store = sessctl_store::Store::open_remote_with(url, &Default::default(), &s3)?;
    drop(store);
    let shown = crate::show_store(std::path::Path::new(url.split('?').next().unwrap_or(url)));
    print(&format!(
        "{} sessctl store in {shown} (objects in {})\n",
        if new {
            "Initialized empty"
        } else {
            "Reinitialized existing"
        },
        url.split("objects=")
            .nth(1)
            .map_or("", |o| o.split('&').next().unwrap_or(o))
    ))
}

#[cfg(not(feature = "remote"))]
fn init_remote(_url: &str) -> CmdResult {
    Err(crate::no_remote())
}

#[derive(Debug, Args)]
pub struct HashObjectArgs {
    /// Store the blob, not only print its id.
    #[arg(short = 'w')]
    write: bool,
    /// Read the JSON value from standard input.
    #[arg(long, conflicts_with = "file")]
    stdin: bool,
    /// Read the JSON value from this file ("-" for standard input).
    file: Option<PathBuf>,
}

pub fn hash_object(ctx: &Ctx, args: HashObjectArgs) -> CmdResult {
    let (bytes, source) = match (&args.file, args.stdin) {
        (Some(p), false) if p.as_os_str() != "-" => (
            std::fs::read(p).map_err(|e| CommandError::Failed(format!("{}: {e}", p.display())))?,
            p.display().to_string(),
        ),
        (None, false) => {
            return Err(CommandError::Usage(
                "hash-object needs a FILE or --stdin".into(),
            ))
        }
        _ => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| CommandError::Failed(format!("reading standard input: {e}")))?;
            (buf, "standard input".to_owned())
        }
    };
    let blob = Blob::from_json_slice(&bytes)
        .map_err(|e| CommandError::Failed(format!("{source}: {e}")))?;
    let id = if args.write {
        ctx.open_write()?.put_blob(blob.value(), Durability::Sync)?
    } else {
        blob.encode().id()
    };
    print(&format!("{id}\n"))
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("mode").required(true).args(["kind", "size", "pretty", "json"])))]
pub struct CatObjectArgs {
    /// Print the object's type (blob or session).
    #[arg(short = 't')]
    kind: bool,
    /// Print the size of the object's canonical payload in bytes.
    #[arg(short = 's')]
    size: bool,
    /// Pretty-print the object for people.
    #[arg(short = 'p')]
    pretty: bool,
    /// Print the object as JSON (a blob's value, or a session's fields).
    #[arg(long)]
    json: bool,
    /// Object id or unique prefix (4+ hex digits).
    id: String,
}

pub fn cat_object(ctx: &Ctx, args: CatObjectArgs) -> CmdResult {
    let odb = ctx.open_read()?;
    let id = odb.resolve(&args.id)?;
    let obj = odb.read(&id)?;
    if args.kind {
        return print(&format!("{}\n", obj.kind()));
    }
    if args.size {
        return print(&format!("{}\n", obj.payload().len()));
    }
    let decoded = obj.decode().map_err(|e| sessctl_store::Error::Corrupt {
        id,
        reason: e.to_string(),
    })?;
    let text = match (decoded, args.json) {
        (Object::Blob(b), true) => format!("{}\n", b.value()),
        (Object::Blob(b), false) => format!(
            "{}\n",
            serde_json::to_string_pretty(b.value()).expect("a JSON value serializes")
        ),
        (Object::Session(s), true) => format!("{}\n", s.to_json(id)),
        (Object::Session(s), false) => session_text(&id, &s),
        // A raw message: the value its lines read as, or the lines
        // themselves, byte for byte.
        (Object::Raw(r), true) => format!(
            "{}\n",
            r.value().map_err(|e| sessctl_store::Error::Corrupt {
                id,
                reason: e.to_string(),
            })?
        ),
        (Object::Raw(r), false) => format!("{}\n", r.lines().collect::<Vec<_>>().join("\n")),
    };
    print(&text)
}

/// The human form of a session, one field a line, in the manner of
/// `git cat-file -p` on a commit.
fn session_text(id: &ObjectId, s: &Session) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    for p in &s.parents {
        let _ = writeln!(t, "parent {p}");
    }
    match s.conversation {
        Some(c) => {
            let _ = writeln!(t, "conversation {c}");
        }
        None => {
            let _ = writeln!(t, "conversation {id} (this session starts it)");
        }
    }
    let _ = writeln!(t, "status {}", s.status);
    let _ = writeln!(
        t,
        "created {} ({} ms)",
        format_rfc3339_ms(s.created_at),
        s.created_at
    );
    if let Some(title) = &s.title {
        let _ = writeln!(t, "title {title}");
    }
    let u = &s.run.usage;
    let _ = writeln!(
        t,
        "run {} ms, {} tokens ({} prompt, {} completion), {} requests",
        s.run.duration_ms, u.total_tokens, u.prompt_tokens, u.completion_tokens, u.requests
    );
    let _ = writeln!(t, "session-type {}", s.metadata.session_type.as_str());
    if let Some(v) = &s.metadata.transport {
        let _ = writeln!(t, "transport {v}");
    }
    if let Some(v) = &s.metadata.preset_id {
        let _ = writeln!(t, "preset {v}");
    }
    if let Some(v) = &s.metadata.spawned_by {
        let _ = writeln!(t, "spawned-by {v}");
    }
    for (k, v) in &s.metadata.extra {
        let _ = writeln!(t, "meta {k} {v}");
    }
    if let Some(v) = &s.context_state {
        let _ = writeln!(t, "context-state {v}");
    }
    if let Some(v) = &s.environment_state {
        let _ = writeln!(t, "environment-state {v}");
    }
    if let Some(c) = &s.compaction {
        let _ = writeln!(
            t,
            "compaction of {} messages of {}, summary {}",
            c.messages, c.session, c.summary
        );
    }
    for (what, delta) in [
        ("messages", &s.messages),
        ("display-messages", &s.display_messages),
    ] {
        let _ = writeln!(
            t,
            "{what} {} kept from parent, {} added (history of {})",
            delta.base,
            delta.added.len(),
            delta.len()
        );
        for m in &delta.added {
            let _ = writeln!(t, "  {m}");
        }
    }
    t
}

#[derive(Debug, Args)]
pub struct RepackArgs {
    /// Print one JSON object: the objects packed, the pack's name, what was
    /// there before, the bytes before and after, and damaged objects left
    /// in place.
    #[arg(long)]
    json: bool,
}

pub fn repack(ctx: &Ctx, args: RepackArgs) -> CmdResult {
    let store = ctx.open_store()?;
    let bar = crate::progress::Bar::new("repack");
    // The lineage index and the index tables follow the objects repacked.
    let stats = store.repack_with(&RepackOptions::default(), &bar);
    drop(bar);
    let stats = stats?;
    for c in &stats.corrupt {
        eprintln!("sessctl: warning: left in place, damaged: {c}");
    }
    if args.json {
        let v = serde_json::json!({
            "objects": stats.objects,
            "pack": stats.pack_name,
            "segments_packed": stats.segments_packed,
            "packs_before": stats.packs_before,
            "bytes_before": stats.bytes_before,
            "bytes_after": stats.bytes_after,
            "corrupt": stats.corrupt,
        });
        return print(&format!("{v}\n"));
    }
    let name = stats.pack_name.as_deref().unwrap_or("(no objects)");
    print(&format!(
        "{} objects in {name}; {} segments and {} packs before; {} -> {} bytes\n",
        stats.objects,
        stats.segments_packed,
        stats.packs_before,
        stats.bytes_before,
        stats.bytes_after
    ))
}
