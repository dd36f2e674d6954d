//! A Claude Code transcript that went through a compaction exports back
//! whole: the lines before its `compact_boundary` are the summarised
//! messages, which a Claude Code session file keeps, so the export follows
//! the compaction to them (objects-format.md, "Imported sessions"); the
//! histories given to a model (`json`, `openai`) stop at the compaction.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::path::PathBuf;

use sessctl_store::export::{export, ExportFormat};
use sessctl_store::import::{import_sources, Format, ImportOptions, ImportReport, SourceFile};
use sessctl_store::Store;

#[test]
fn a_compacted_claude_code_session_exports_byte_for_byte() {
    let Some(path) = support::data("claude-code/session-624a4a58.jsonl") else {
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::init(dir.path()).unwrap();
    let src = SourceFile {
        path: PathBuf::from("session-624a4a58.jsonl"),
        text: text.clone(),
    };
    let opts = ImportOptions {
        no_sync: true,
        finished: true,
        ..ImportOptions::default()
    };
    let r = import_sources(
        &store,
        Format::ClaudeCode,
        &[src],
        &opts,
        ImportReport::default(),
    )
    .unwrap();
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    let convs = store.conversations(None).unwrap();
    assert_eq!(convs.len(), 1);
    let head = convs[0].head.unwrap();
    // The transcript holds a compaction: a history given to a model is
    // what the compaction left (the summary and what came after it).
    let given: Vec<serde_json::Value> =
        serde_json::from_str(&export(&store, head, ExportFormat::Json).unwrap()).unwrap();
    let lines = text.lines().count();
    assert!(given.len() < lines / 2, "{} of {lines}", given.len());
    // The session file is the source's, line for line and byte for byte.
    assert_eq!(
        export(&store, head, ExportFormat::ClaudeCode).unwrap(),
        text
    );
}
