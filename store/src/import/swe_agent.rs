//! SWE-agent trajectories (`.traj`): one JSON object with `history` (OpenAI
//! chat messages, with `tool_calls` and `role: "tool"` in the
//! function-calling ones), `trajectory` (the steps), `info` and
//! `environment`. `history` is the message list, one session per file (a
//! trajectory is one task); `info`, `environment` and `trajectory` go to the
//! first session's `extra`. Named `swe-<file stem>`. `info.model_stats`
//! (`tokens_sent`, `tokens_received`, `api_calls`) is the run's usage, on
//! its last message, and `replay_config.agent.model.name` its model.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{sanitize_name, whole_json, ImportReport, Node, Skipped, SourceFile, Tree};
use crate::object::Usage;

pub(super) fn parse(sources: &[SourceFile], report: &mut ImportReport) -> Vec<Tree> {
    let mut out = Vec::new();
    for src in sources {
        let file = src.name();
        let mut v = match whole_json(src, report) {
            None => continue,
            Some(Ok(v)) => v,
            Some(Err(e)) => {
                report.skipped.push(Skipped {
                    file: src.path.clone(),
                    line: 0,
                    reason: e,
                });
                continue;
            }
        };
        let Some(Value::Array(history)) = v.get_mut("history").map(Value::take) else {
            report.skipped.push(Skipped {
                file: src.path.clone(),
                line: 0,
                reason: "no \"history\" array".into(),
            });
            continue;
        };
        if history.is_empty() {
            continue;
        }
        let stem = file.strip_suffix(".traj").unwrap_or(&file);
        let mut tree = Tree {
            name: format!("swe-{}", sanitize_name(stem, 100)),
            source_session: Some(stem.to_owned()),
            ..Tree::default()
        };
        tree.metadata.insert("source".into(), json!("swe-agent"));
        tree.metadata.insert("source_file".into(), json!(file));
        // `info.model_stats`: what the whole run cost, on its last message.
        let stats = v.get("info").and_then(|i| i.get("model_stats")).cloned();
        // The model, from `replay_config` (an object, or the same as JSON text).
        let model = v.get("replay_config").and_then(|c| {
            let c = match c {
                Value::String(text) => serde_json::from_str::<Value>(text).ok()?,
                c => c.clone(),
            };
            c.get("agent")?
                .get("model")?
                .get("name")?
                .as_str()
                .map(str::to_owned)
        });
        let mut root_extra = BTreeMap::new();
        if let Value::Object(o) = v {
            for (k, val) in o {
                root_extra.insert(k, val);
            }
        }
        tree.root_extra = root_extra;
        let mut last: Option<String> = None;
        for (i, m) in history.into_iter().enumerate() {
            let id = i.to_string();
            tree.nodes
                .push(Node::new(id.clone(), last.clone(), m, &file));
            last = Some(id);
        }
        if let Some(node) = tree.nodes.last_mut() {
            node.model = model;
        }
        if let (Some(stats), Some(node)) = (stats, tree.nodes.last_mut()) {
            let g = |k: &str| stats.get(k).and_then(Value::as_u64).unwrap_or(0);
            let (sent, received) = (g("tokens_sent"), g("tokens_received"));
            if sent > 0 || received > 0 || g("api_calls") > 0 {
                node.usage = Some(Usage {
                    prompt_tokens: sent,
                    completion_tokens: received,
                    total_tokens: sent.saturating_add(received),
                    requests: g("api_calls"),
                });
            }
        }
        out.push(tree);
    }
    out
}
