//! OpenAI chat format: a `.json` file holding an array of messages or an
//! object with `"messages"`, or a `.jsonl` file with one such conversation a
//! line. Each conversation is a linear chain; a `user` message starts a
//! session. Keys of a conversation object other than `messages` go to the
//! conversation record's metadata. There are no source ids: a message's id is
//! `<conversation index>:<message index>`, and the conversation is named
//! `openai-<12 hex of blake3(file name, index)>`.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{jsonl_lines, whole_json, ImportReport, Node, Skipped, SourceFile, Tree};
use crate::time::parse_rfc3339_ms;

pub(super) fn parse(sources: &[SourceFile], report: &mut ImportReport) -> Vec<Tree> {
    let mut out = Vec::new();
    for src in sources {
        let file = src.name();
        let mut convs: Vec<(usize, Value)> = Vec::new();
        if file.ends_with(".jsonl") {
            for (line, v, _) in jsonl_lines(src, report) {
                match v {
                    Ok(v) => convs.push((line, v)),
                    Err(e) => report.skipped.push(Skipped {
                        file: src.path.clone(),
                        line,
                        reason: e,
                    }),
                }
            }
        } else {
            match whole_json(src, report) {
                None => {}
                Some(Ok(v)) => convs.push((1, v)),
                Some(Err(e)) => report.skipped.push(Skipped {
                    file: src.path.clone(),
                    line: 0,
                    reason: e,
                }),
            }
        }
        for (index, (line, v)) in convs.into_iter().enumerate() {
            let (messages, rest) = match v {
                Value::Array(a) => (a, BTreeMap::new()),
                Value::Object(mut o) => match o.remove("messages") {
                    Some(Value::Array(a)) => (a, o.into_iter().collect()),
                    _ => {
                        report.skipped.push(Skipped {
                            file: src.path.clone(),
                            line,
                            reason: "no \"messages\" array".into(),
                        });
                        continue;
                    }
                },
                _ => {
                    report.skipped.push(Skipped {
                        file: src.path.clone(),
                        line,
                        reason: "not a conversation (an array or an object with \"messages\")"
                            .into(),
                    });
                    continue;
                }
            };
            if let Some(tree) = tree_of(&file, index, messages, rest) {
                out.push(tree);
            }
        }
    }
    out
}

fn timestamp(m: &Value) -> i64 {
    match m.get("timestamp").or_else(|| m.get("created_at")) {
        Some(Value::String(s)) => parse_rfc3339_ms(s).unwrap_or(0),
        // Seconds (OpenAI's `created`) or already milliseconds.
        Some(Value::Number(n)) => n
            .as_i64()
            .map(|t| if t < 100_000_000_000 { t * 1000 } else { t })
            .unwrap_or(0),
        _ => 0,
    }
}

fn tree_of(
    file: &str,
    index: usize,
    messages: Vec<Value>,
    rest: BTreeMap<String, Value>,
) -> Option<Tree> {
    if messages.is_empty() {
        return None;
    }
    let key = blake3::hash(format!("{file}\0{index}").as_bytes());
    let mut tree = Tree {
        name: format!("openai-{}", &key.to_hex()[..12]),
        metadata: rest,
        ..Tree::default()
    };
    tree.metadata.insert("source".into(), json!("openai"));
    tree.metadata.insert("source_file".into(), json!(file));
    tree.metadata.insert("source_index".into(), json!(index));
    let mut last: Option<String> = None;
    let mut last_ts = 0;
    for (i, m) in messages.into_iter().enumerate() {
        let id = format!("{index}:{i}");
        let mut node = Node::new(id.clone(), last.clone(), m, file);
        // Messages without times inherit the one before.
        node.timestamp = match timestamp(&node.message) {
            0 => last_ts,
            t => t,
        };
        last_ts = node.timestamp;
        node.user_prompt = node.message.get("role").and_then(Value::as_str) == Some("user");
        tree.nodes.push(node);
        last = Some(id);
    }
    Some(tree)
}
