//! End to end: one import of two files that begin with the same sessions
//! (an identical copy of a trajectory in two directories, or a longer
//! copy). The later file's conversation (`NAME-2`) shares those sessions
//! as a fork shares its source's: it has no conversation id of its own
//! until its first session of its own, and never takes the earlier one's.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::path::Path;

use serde_json::{json, Value};

fn sessctl(store: &Path, args: &[&str]) -> support::Run {
    let r = support::sessctl(store, args, None);
    assert_eq!(r.code, 0, "sessctl {args:?}: {}", r.stderr);
    r
}

/// A SWE-agent trajectory of `history`.
fn trajectory(history: &[(&str, &str)]) -> String {
    let history: Vec<Value> = history
        .iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    json!({"environment": "swe_main", "history": history, "info": {"exit_status": "submitted"}})
        .to_string()
}

/// Writes `text` to `dir/SUB/task.traj`.
fn put(dir: &Path, sub: &str, text: &str) {
    std::fs::create_dir_all(dir.join(sub)).unwrap();
    std::fs::write(dir.join(sub).join("task.traj"), text).unwrap();
}

/// `ls --json`, by name: (conversation id, sessions, messages).
fn listing(store: &Path) -> Vec<(String, Value, u64, u64)> {
    let out: Value = serde_json::from_str(&sessctl(store, &["ls", "--json"]).stdout).unwrap();
    let mut rows: Vec<_> = out
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["conversation_id"].clone(),
                c["sessions"].as_u64().unwrap(),
                c["messages"].as_u64().unwrap(),
            )
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

/// The conversation `log` names for a ref's head.
fn head_conversation(store: &Path, name: &str) -> Value {
    let out: Value =
        serde_json::from_str(&sessctl(store, &["log", "--json", "-n", "1", name]).stdout).unwrap();
    out[0]["conversation_name"].clone()
}

fn import_writes_nothing_again(store: &Path, dir: &Path) {
    let before = listing(store);
    let again = sessctl(store, &["import", dir.to_str().unwrap()]);
    assert!(
        again.stdout.contains("(0 new)")
            && again.stdout.contains("0 objects written, 0 refs moved"),
        "{}",
        again.stdout
    );
    assert_eq!(listing(store), before);
}

#[test]
fn an_identical_copy_is_a_plain_fork_and_a_commit_on_it_counts_for_it() {
    let (_tmp, store) = support::new_store();
    let dir = store.parent().unwrap().join("in");
    let text = trajectory(&[
        ("system", "You are an agent."),
        ("user", "fix the bug"),
        ("assistant", "fixed"),
    ]);
    put(&dir, "demonstrations", &text);
    put(&dir, "tests", &text);
    sessctl(&store, &["import", dir.to_str().unwrap()]);
    let rows = listing(&store);
    let first = rows[0].1.clone();
    assert!(first.is_string(), "{rows:?}");
    // As `sessctl fork swe-task --as swe-task-2` would leave it.
    assert_eq!(
        rows,
        [
            ("swe-task".to_owned(), first.clone(), 1, 3),
            ("swe-task-2".to_owned(), Value::Null, 0, 3),
        ]
    );
    import_writes_nothing_again(&store, &dir);

    let r = support::sessctl(
        &store,
        &["commit", "swe-task-2", "--messages", "-"],
        Some(r#"[{"role":"user","content":"go on"}]"#),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(head_conversation(&store, "swe-task-2"), "swe-task-2");
    let rows = listing(&store);
    assert_eq!(rows[0], ("swe-task".to_owned(), first.clone(), 1, 3));
    assert_eq!((rows[1].2, rows[1].3), (1, 4), "{rows:?}");
    assert!(rows[1].1.is_string() && rows[1].1 != first, "{rows:?}");
    // The user's commit is theirs: an import leaves it and writes nothing.
    import_writes_nothing_again(&store, &dir);
}

#[test]
fn conversations_that_begin_alike_each_count_their_own_sessions() {
    let (_tmp, store) = support::new_store();
    let dir = store.parent().unwrap().join("in");
    std::fs::create_dir(&dir).unwrap();
    // Two chats of one file that open with the same exchange: the second
    // shares the first's session for it, and goes on in a conversation of
    // its own.
    let opening = [
        json!({"role": "user", "content": "fix the bug"}),
        json!({"role": "assistant", "content": "fixed"}),
    ];
    let mut longer = opening.to_vec();
    longer.extend([
        json!({"role": "user", "content": "and the test"}),
        json!({"role": "assistant", "content": "added"}),
    ]);
    let text = format!("{}\n{}\n", json!(opening), json!(longer));
    std::fs::write(dir.join("chats.jsonl"), text).unwrap();
    sessctl(&store, &["import", dir.to_str().unwrap()]);
    let mut rows = listing(&store);
    rows.sort_by_key(|r| r.3);
    let (short, long) = (&rows[0], &rows[1]);
    assert!(
        short.1.is_string() && long.1.is_string() && short.1 != long.1,
        "{rows:?}"
    );
    assert_eq!((short.2, short.3, long.2, long.3), (1, 2, 1, 4), "{rows:?}");
    assert_eq!(head_conversation(&store, &long.0), long.0.as_str());
    import_writes_nothing_again(&store, &dir);
}
