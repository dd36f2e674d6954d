//! `replay`: a conversation read back turn by turn, from its root to a
//! session along first parents.

use clap::Args;
use serde_json::{json, Value};
use sessctl_store::message::view;
use sessctl_store::replay::{Replay, ReplayTurn};

use crate::output::print;
use crate::{CmdResult, Ctx};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The last turn's session: a conversation, a session id or prefix, a tag.
    #[arg(default_value = "HEAD", add = clap_complete::engine::ArgValueCandidates::new(crate::complete::revisions))]
    rev: String,
    /// One JSON object a line, one line a turn: turn, session, parent,
    /// status, created_at, duration_ms, usage, base, request_messages,
    /// input, output, tool_calls, tool_results, compaction.
    #[arg(long)]
    json: bool,
}

/// How much of a turn's last answer the text form shows.
const PREVIEW_CHARS: usize = 60;

fn turn_json(t: &ReplayTurn) -> Value {
    let u = &t.usage;
    json!({
        "turn": t.number,
        "session": t.session.to_hex(),
        "parent": t.parent.map(|p| p.to_hex()),
        "status": t.status.as_str(),
        "created_at": t.created_at,
        "duration_ms": t.duration_ms,
        "usage": {"total_tokens": u.total_tokens, "prompt_tokens": u.prompt_tokens,
                  "completion_tokens": u.completion_tokens, "requests": u.requests},
        "base": t.base,
        "request_messages": t.request_len,
        "input": t.input,
        "output": t.output,
        "tool_calls": t.tool_calls.iter().map(|c| json!({
            "id": c.id, "name": c.name, "arguments": c.arguments,
        })).collect::<Vec<_>>(),
        "tool_results": t.tool_results.iter().map(|r| json!({
            "call_id": r.call_id, "content": r.content, "is_error": r.is_error,
        })).collect::<Vec<_>>(),
        "compaction": t.compaction.map(|c| json!({
            "session": c.session.to_hex(),
            "messages": c.messages,
            "summary": c.summary.to_hex(),
        })),
    })
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The text of a message, for a preview.
fn message_text(m: &Value) -> Option<String> {
    let text = view(m).text;
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

fn turn_text(t: &ReplayTurn) -> String {
    let head = format!(
        "turn {} {} {}",
        t.number,
        t.session.to_hex_prefix(12),
        t.status
    );
    if let Some(c) = &t.compaction {
        return format!(
            "{head}: compaction of {} of {}\n",
            plural(c.messages as usize, "message", "messages"),
            c.session.to_hex_prefix(12)
        );
    }
    let mut line = format!(
        "{head}: {} in, {} out, {}, {}; {} tokens, {} ms",
        t.input.len(),
        t.output.len(),
        plural(t.tool_calls.len(), "tool call", "tool calls"),
        plural(t.tool_results.len(), "tool result", "tool results"),
        t.usage.total_tokens,
        t.duration_ms
    );
    if let Some(text) = t.output.iter().rev().find_map(message_text) {
        let mut preview: String = text.chars().take(PREVIEW_CHARS).collect();
        if text.chars().count() > PREVIEW_CHARS {
            preview.pop();
            preview.push('…');
        }
        line.push_str(": ");
        line.push_str(&preview);
    }
    line.push('\n');
    line
}

pub fn replay(ctx: &Ctx, args: ReplayArgs) -> CmdResult {
    let store = ctx.open_store_read()?;
    let id = store.resolve_rev(&args.rev)?;
    let replay = Replay::load(&store, &id)?;
    let mut out = String::new();
    for t in &replay.turns {
        if args.json {
            out.push_str(&turn_json(t).to_string());
            out.push('\n');
        } else {
            out.push_str(&turn_text(t));
        }
    }
    print(&out)
}
