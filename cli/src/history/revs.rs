//! `merge-base` and `rev-parse`: revisions resolved, and their common ancestors.

use super::*;

#[derive(Debug, Args)]
pub struct MergeBaseArgs {
    /// Print every best common ancestor, newest first, not only the newest.
    #[arg(long, conflicts_with = "is_ancestor")]
    all: bool,
    /// Print nothing; exit 0 if A is B or one of its ancestors, else 1.
    #[arg(long)]
    is_ancestor: bool,
    /// Print one JSON object: both revisions' ids and "bases" (with
    /// --is-ancestor, "is_ancestor"); the exit status is as without it.
    #[arg(long)]
    json: bool,
    /// The first session: a conversation, HEAD, a ref, an id or a prefix,
    /// with ~N and ^N steps.
    #[arg(value_name = "A", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    a: String,
    /// The second session, written as A is.
    #[arg(value_name = "B", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    b: String,
}

pub fn merge_base(ctx: &Ctx, args: MergeBaseArgs) -> CmdResult {
    check_revs([&args.a, &args.b])?;
    let store = ctx.open_store_read()?;
    let a = store.resolve_rev(&args.a)?;
    let b = store.resolve_rev(&args.b)?;
    if args.is_ancestor {
        let yes = graph::is_ancestor(&store, a, b)?;
        if args.json {
            print(&format!(
                "{}\n",
                json!({"a": a.to_hex(), "b": b.to_hex(), "is_ancestor": yes})
            ))?;
        }
        return if yes {
            Ok(())
        } else {
            Err(CommandError::Silent(1))
        };
    }
    let mut bases = graph::merge_bases_all(&store, a, b)?;
    if !args.all {
        bases.truncate(1);
    }
    if args.json {
        let v = json!({
            "a": a.to_hex(),
            "b": b.to_hex(),
            "bases": bases.iter().map(|b| b.to_hex()).collect::<Vec<_>>(),
        });
        print(&format!("{v}\n"))?;
    } else {
        let text: String = bases.iter().map(|b| format!("{b}\n")).collect();
        print(&text)?;
    }
    if bases.is_empty() {
        return Err(CommandError::Silent(1));
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct RevParseArgs {
    /// Revisions: names, tags, ids or prefixes, with ~N and ^N steps.
    #[arg(value_name = "REV", required = true, add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    revs: Vec<String>,
    /// Print one JSON array: {"rev", "id"} for each revision, in order.
    #[arg(long)]
    json: bool,
}

pub fn rev_parse(ctx: &Ctx, args: RevParseArgs) -> CmdResult {
    check_revs(&args.revs)?;
    let store = ctx.open_store_read()?;
    let ids = resolve_all(&store, &args.revs)?;
    if args.json {
        let v: Vec<Value> = args
            .revs
            .iter()
            .zip(&ids)
            .map(|(r, id)| json!({"rev": r, "id": id.to_hex()}))
            .collect();
        return print(&format!("{}\n", Value::Array(v)));
    }
    let text: String = ids.iter().map(|i| format!("{i}\n")).collect();
    print(&text)
}
