//! The normalized message view (`sessctl_store::message::view`) and the
//! model-ready chat history, on the real agent files in `../shared/data`
//! (each test skips, saying why, when they are absent) and on small
//! messages of the shapes no file there has (Agents SDK items).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use support::data;

use serde_json::{json, Value};
use sessctl_store::message::{chat_history, user_text, view, Role, Shape};

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.to_string_lossy().ends_with(ext) {
            out.push(p);
        }
    }
}

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The rules an OpenAI-compatible chat API holds a message list to.
fn check_chat(messages: &[Value]) {
    let mut open: Vec<String> = Vec::new();
    for (k, m) in messages.iter().enumerate() {
        let role = m["role"]
            .as_str()
            .unwrap_or_else(|| panic!("[{k}] no role: {m}"));
        if role != "tool" {
            assert!(open.is_empty(), "[{k}] calls {open:?} left unanswered");
        }
        match role {
            "system" | "user" => assert!(m["content"].is_string(), "[{k}] {m}"),
            "assistant" => {
                let calls = m.get("tool_calls").and_then(Value::as_array);
                assert!(
                    m["content"].is_string() || (m["content"].is_null() && calls.is_some()),
                    "[{k}] {m}"
                );
                for c in calls.into_iter().flatten() {
                    assert_eq!(c["type"], "function");
                    assert!(c["function"]["name"].is_string());
                    assert!(c["function"]["arguments"].is_string());
                    open.push(c["id"].as_str().unwrap().to_owned());
                }
            }
            "tool" => {
                assert!(m["content"].is_string());
                let id = m["tool_call_id"].as_str().unwrap();
                assert_eq!(open.first().map(String::as_str), Some(id), "[{k}] {m}");
                open.remove(0);
            }
            other => panic!("[{k}] role {other}"),
        }
    }
    assert!(open.is_empty(), "calls {open:?} left unanswered");
}

#[test]
fn codex_rollout_lines_read_as_chat() {
    let Some(dir) = data("codex") else { return };
    let mut fs = Vec::new();
    files(&dir, ".jsonl", &mut fs);
    assert!(!fs.is_empty());
    for f in fs {
        let ls = lines(&f);
        let views: Vec<_> = ls.iter().map(view).collect();
        let items = |ty: &str, pty: &str| {
            ls.iter()
                .filter(|v| v["type"] == ty && v["payload"]["type"] == pty)
                .count()
        };
        assert!(views.iter().all(|v| v.shape == Shape::Codex));
        // Every event_msg but prompts, turn_context and session_meta are meta.
        for (v, l) in views.iter().zip(&ls) {
            let meta = matches!(l["type"].as_str(), Some("turn_context" | "session_meta"))
                || (l["type"] == "event_msg" && l["payload"]["type"] != "user_message");
            assert_eq!(v.meta, meta, "{l}");
            // Never the encrypted blob.
            if let Some(r) = &v.reasoning {
                assert!(!r.contains("gAAAA"), "{r}");
            }
        }
        let calls: usize = views.iter().map(|v| v.tool_calls.len()).sum();
        assert_eq!(
            calls,
            items("response_item", "function_call") + items("response_item", "custom_tool_call")
        );
        let results = views.iter().filter(|v| v.role == Role::Tool).count();
        assert_eq!(results, calls);
        let answers = views
            .iter()
            .filter(|v| v.role == Role::Assistant && !v.text.is_empty())
            .count();
        assert!(answers > 0 && answers == items_role(&ls, "assistant"));
        // Prompts: real user text, never the injected context.
        let prompts: Vec<String> = ls.iter().filter_map(user_text).collect();
        assert!(!prompts.is_empty(), "{}", f.display());
        assert!(prompts.iter().all(|p| !p.starts_with('<')));
        // token_count events carry usage, turn_context the model.
        let counted = ls
            .iter()
            .filter(|l| l["payload"]["info"]["last_token_usage"].is_object())
            .count();
        let with_usage = views
            .iter()
            .filter(|v| v.usage.is_some_and(|u| u.output_tokens > 0))
            .count();
        assert_eq!(with_usage, counted);
        assert_eq!(
            views.iter().filter(|v| v.model.is_some()).count(),
            ls.iter().filter(|l| l["type"] == "turn_context").count()
        );
        let chat = chat_history(&ls);
        check_chat(&chat);
        let tool_msgs = chat.iter().filter(|m| m["role"] == "tool").count();
        assert_eq!(tool_msgs, calls);
    }
}

fn items_role(ls: &[Value], role: &str) -> usize {
    ls.iter()
        .filter(|v| {
            v["payload"]["type"] == "message"
                && v["payload"]["role"] == role
                && v["payload"]["content"].as_array().is_some_and(|a| {
                    a.iter()
                        .any(|p| p["text"].as_str().is_some_and(|t| !t.is_empty()))
                })
        })
        .count()
}

#[test]
fn claude_code_lines_read_as_chat() {
    let Some(dir) = data("claude-code") else {
        return;
    };
    let mut fs = Vec::new();
    files(&dir, ".jsonl", &mut fs);
    assert!(!fs.is_empty());
    for f in fs {
        let ls = lines(&f);
        let views: Vec<_> = ls.iter().map(view).collect();
        for (v, l) in views.iter().zip(&ls) {
            assert_eq!(v.shape, Shape::ClaudeCode, "{l}");
            let is_message = matches!(l["type"].as_str(), Some("user" | "assistant"))
                && l["isMeta"] != json!(true);
            let boundary = l["subtype"] == "compact_boundary";
            assert_eq!(!v.meta, is_message || boundary, "{l}");
            if l["type"] == "assistant" {
                assert_eq!(v.role, Role::Assistant);
                assert!(v.model.is_some(), "{l}");
                assert_eq!(v.response_id.as_deref(), l["message"]["id"].as_str());
            }
            if let Some(r) = &v.reasoning {
                let sig = l["message"]["content"][0]["signature"]
                    .as_str()
                    .unwrap_or("-");
                assert!(!r.contains(sig));
            }
        }
        // The "Caveat: ..." meta lines are no prompt.
        for p in ls.iter().filter_map(user_text) {
            assert!(!p.starts_with("Caveat:") && !p.starts_with('<'), "{p}");
        }
        let uses: HashSet<String> = views
            .iter()
            .flat_map(|v| v.tool_calls.iter().filter_map(|c| c.id.clone()))
            .collect();
        let chat = chat_history(&ls);
        check_chat(&chat);
        let called: HashSet<String> = chat
            .iter()
            .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(called, uses, "{}", f.display());
        // Lines of one response are one message: no two assistants in a row.
        for w in chat.windows(2) {
            assert!(!(w[0]["role"] == "assistant" && w[1]["role"] == "assistant"));
        }
        assert!(views.iter().any(|v| v.usage.is_some()), "{}", f.display());
    }
}

#[test]
fn swe_agent_history_reads_as_chat() {
    let Some(dir) = data("swe-agent") else { return };
    let mut fs = Vec::new();
    files(&dir, ".traj", &mut fs);
    assert!(!fs.is_empty());
    let mut with_tools = 0;
    for f in fs {
        let t: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let history = t["history"].as_array().unwrap();
        let views: Vec<_> = history.iter().map(view).collect();
        for (v, m) in views.iter().zip(history) {
            assert_eq!(v.shape, Shape::SweAgent);
            assert_eq!(v.role.as_str(), m["role"].as_str().unwrap());
            assert!(!v.meta);
            if v.role == Role::Tool {
                assert_eq!(
                    v.tool_results[0].call_id.as_deref(),
                    m["tool_call_ids"][0].as_str()
                );
            }
        }
        if views.iter().any(|v| !v.tool_calls.is_empty()) {
            with_tools += 1;
        }
        check_chat(&chat_history(history));
    }
    assert!(with_tools > 0);
}

#[test]
fn agents_sdk_items_read_as_chat() {
    let items = vec![
        json!({"role": "system", "content": "be brief"}),
        json!({"role": "user", "content": [{"type": "input_text", "text": "list files"}]}),
        json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text",
               "text": "I should call ls"}], "encrypted_content": "gAAAAsecret"}),
        json!({"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}",
               "id": "fc_1", "status": "completed"}),
        json!({"type": "function_call", "call_id": "c2", "name": "pwd", "arguments": "{}"}),
        json!({"type": "function_call_output", "call_id": "c2", "output": "/tmp"}),
        json!({"type": "function_call_output", "call_id": "c1", "output": "a.rs"}),
        json!({"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
               "content": [{"type": "output_text", "text": "a.rs in /tmp", "annotations": []}]}),
    ];
    let v: Vec<_> = items.iter().map(view).collect();
    assert_eq!(v[1].shape, Shape::AgentsSdk);
    assert_eq!(v[1].text, "list files");
    assert_eq!(user_text(&items[1]).as_deref(), Some("list files"));
    assert_eq!(v[2].reasoning.as_deref(), Some("I should call ls"));
    assert!(v[2].is_model_output());
    assert_eq!(v[3].tool_calls[0].id.as_deref(), Some("c1"));
    assert_eq!(v[5].role, Role::Tool);
    assert_eq!(v[5].tool_results[0].text, "/tmp");
    assert_eq!(v[7].text, "a.rs in /tmp");
    let chat = chat_history(&items);
    check_chat(&chat);
    assert_eq!(
        chat,
        vec![
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "list files"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "pwd", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "a.rs"}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "/tmp"}),
            json!({"role": "assistant", "content": "a.rs in /tmp"}),
        ]
    );
}

#[test]
fn unanswered_calls_and_stray_results_still_make_a_valid_history() {
    let items = vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
        json!({"role": "user", "content": "stop"}),
        json!({"role": "tool", "tool_call_id": "zz", "content": "late"}),
    ];
    let chat = chat_history(&items);
    check_chat(&chat);
    assert_eq!(chat[2]["content"], "(no result recorded)");
    assert_eq!(
        chat[4],
        json!({"role": "user", "content": "[tool result zz] late"})
    );
}

#[test]
fn prompts_are_what_a_person_wrote() {
    let cc = |content: Value, meta: bool| {
        json!({"type": "user", "uuid": "u", "isMeta": meta,
               "message": {"role": "user", "content": content}})
    };
    // A slash command reads as the command and its arguments.
    let command = cc(
        json!("<command-name>/review</command-name>\n<command-message>review</command-message>\n<command-args>src/</command-args>"),
        false,
    );
    assert_eq!(user_text(&command).as_deref(), Some("/review src/"));
    // Its output, the caveat, an interruption: no prompt.
    for (content, meta) in [
        (
            json!("<local-command-stdout>ok</local-command-stdout>"),
            false,
        ),
        (
            json!("Caveat: The messages below were generated by the user"),
            true,
        ),
        (
            json!([{"type": "text", "text": "[Request interrupted by user for tool use]"}]),
            false,
        ),
    ] {
        let line = cc(content, meta);
        assert_eq!(user_text(&line), None, "{line}");
        assert_eq!(view(&line).role, Role::User);
    }
    assert!(view(&cc(json!("x"), true)).meta);
    // A compaction checkpoint sessctl wrote is no prompt either.
    let checkpoint = json!({"role": "user", "content": "[sessctl checkpoint] ...",
                            "sessctl_checkpoint": {"completed": []}});
    assert_eq!(user_text(&checkpoint), None);
    assert_eq!(
        user_text(&json!({"role": "user", "content": "fix it"})).as_deref(),
        Some("fix it")
    );
    // Codex's injected context, and a Desktop rollout's prompt event.
    let codex = |payload: Value, ty: &str| json!({"timestamp": "2026-01-01T00:00:00Z", "type": ty, "payload": payload});
    let env = codex(
        json!({"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "<environment_context>x</environment_context>"}]}),
        "response_item",
    );
    assert_eq!(user_text(&env), None);
    assert!(!view(&env).meta);
    let event = codex(
        json!({"type": "user_message", "message": "ship it"}),
        "event_msg",
    );
    assert_eq!(user_text(&event).as_deref(), Some("ship it"));
    let dev = codex(
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]}),
        "response_item",
    );
    assert_eq!(
        (view(&dev).role, view(&dev).text.as_str()),
        (Role::System, "rules")
    );
}
