//! SWE-agent trajectories (`.traj`): one JSON object with `history` (OpenAI
//! chat messages, with `tool_calls` and `role: "tool"` in the
//! function-calling ones), `trajectory` (the steps), `info` and
//! `environment`. `history` is the message list, one session per file (a
//! trajectory is one task); `info`, `environment` and `trajectory` go to the
//! first session's `extra`. Named `swe-<file stem>`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{parse_json, sanitize_name, ImportReport, Node, Skipped, SourceFile, Tree};

pub(super) fn parse(sources: &[SourceFile], report: &mut ImportReport) -> Vec<Tree> {
    let mut out = Vec::new();
    for src in sources {
        let file = src.name();
        let mut v = match parse_json(&src.text) {
            Ok(v) => v,
            Err(e) => {
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
        out.push(tree);
    }
    out
}
