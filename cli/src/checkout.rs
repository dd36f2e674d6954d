//! `checkout` and `resume`: picking a conversation back up.
//!
//! `checkout` moves `HEAD` (and with `-o` writes the seed files a runtime
//! starts from); `resume` prints what a runtime resumes from. Both go
//! through `sessctl_store::resume`.

use std::fmt::Write;
use std::path::PathBuf;

use clap::Args;
use serde_json::json;
use sessctl_store::resume::{self, ResumeSummary, Seed};
use sessctl_store::time::format_rfc3339_ms;
use sessctl_store::Durability;

use crate::output::print;
use crate::{CmdResult, Ctx};

#[derive(Debug, Args)]
pub struct CheckoutArgs {
    /// A conversation (HEAD then names it), or any other revision: a session
    /// id or prefix, a tag, archive/NAME (HEAD is then detached there).
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: String,
    /// Also write the seed layout into DIR (created if missing):
    /// state.json ({"context_state", "environment_state",
    /// "message_history"}) and display_messages.json, pretty JSON with
    /// sorted keys, each replaced atomically. message_history is
    /// model-ready OpenAI chat ({role, content, tool_calls}, {role: "tool",
    /// tool_call_id, content}); when that took converting imported
    /// messages, raw_messages.json holds them as stored.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    output: Option<PathBuf>,
}

/// Prints nothing; with `-o`, one line naming the two files written.
pub fn checkout(ctx: &Ctx, args: CheckoutArgs) -> CmdResult {
    let store = ctx.open_store()?;
    let mut said = String::new();
    if let Some(dir) = &args.output {
        // The seed is written first: if that fails, HEAD has not moved.
        let (_, target) = resume::checkout_target(&store, &args.rev)?;
        let paths: Vec<String> = Seed::load(&store, &target.session)?
            .write_all(dir)?
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        said = match paths.split_last() {
            Some((last, rest)) => format!("wrote {} and {last}\n", rest.join(", ")),
            None => String::new(),
        };
    }
    resume::checkout(&store, &args.rev, Durability::Sync)?;
    print(&said)
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The session to resume: a conversation, a session id or prefix, a tag.
    #[arg(default_value = "HEAD", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: String,
    /// Print {"history": [...], "summary": {...}} as one line of JSON
    /// (and "raw_history", the stored lines, when the history is a
    /// conversion of them: an imported session).
    #[arg(long)]
    json: bool,
}

/// Whitespace runs become one space, so that a field stays one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn summary_text(s: &ResumeSummary) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "session {}", s.session);
    let _ = writeln!(t, "conversation {}", s.conversation);
    let _ = writeln!(t, "description {}", one_line(&s.description));
    let _ = writeln!(t, "first-topic {}", one_line(&s.first_topic));
    let _ = writeln!(t, "created {}", format_rfc3339_ms(s.created));
    let _ = writeln!(t, "last-activity {}", format_rfc3339_ms(s.last_activity));
    let roles: Vec<String> = s.messages.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let _ = write!(t, "messages {}", s.message_count);
    if !roles.is_empty() {
        let _ = write!(t, " ({})", roles.join(", "));
    }
    t.push('\n');
    if let Some(c) = &s.compaction {
        let _ = writeln!(
            t,
            "compacted {} messages of {}, summary {}",
            c.messages, c.session, c.summary
        );
    }
    let u = &s.usage;
    if u.total_tokens > 0 || u.requests > 0 {
        let _ = writeln!(
            t,
            "usage {} tokens ({} prompt, {} completion), {} requests",
            u.total_tokens, u.prompt_tokens, u.completion_tokens, u.requests
        );
    }
    t
}

pub fn resume(ctx: &Ctx, args: ResumeArgs) -> CmdResult {
    let store = ctx.open_store_read()?;
    let id = store.resolve_rev(&args.rev)?;
    let r = resume::resume(&store, &id)?;
    if args.json {
        let mut v = json!({"history": r.history, "summary": r.summary.to_json()});
        if let Some(raw) = r.raw_history {
            v["raw_history"] = json!(raw);
        }
        print(&format!("{v}\n"))
    } else {
        print(&summary_text(&r.summary))
    }
}
