//! The progress long operations report: phases in order, each with its
//! total when known, advanced to that total (the library prints nothing).
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::sync::{Arc, Mutex};

use serde_json::json;
use sessctl_store::gc::GcOptions;
use sessctl_store::import::{import_paths, import_paths_as, Format, ImportOptions};
use sessctl_store::odb::RepackOptions;
use sessctl_store::progress::Progress;
use sessctl_store::remote::clone_with;
use sessctl_store::{Durability, Messages, Store, Turn};

/// Records every report: (phase, total, units advanced in it).
#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<(String, Option<u64>, u64)>>);

impl Progress for Recorder {
    fn phase(&self, name: &str, total: Option<u64>) {
        self.0.lock().unwrap().push((name.to_owned(), total, 0));
    }
    fn advance(&self, n: u64) {
        let mut v = self.0.lock().unwrap();
        v.last_mut().expect("advance after a phase").2 += n;
    }
}

impl Recorder {
    fn take(&self) -> Vec<(String, Option<u64>, u64)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn turn(text: &str) -> Turn {
    Turn {
        messages: Messages::Added(vec![json!({"role": "user", "content": text})]),
        ..Turn::default()
    }
}

fn phase(name: &str, total: Option<u64>, done: u64) -> (String, Option<u64>, u64) {
    (name.to_owned(), total, done)
}

#[test]
fn clone_gc_repack_and_reindex_report_their_phases_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let a_path = dir.path().join("a");
    {
        let a = Store::init(&a_path).unwrap();
        a.create(Some("fix"), turn("one"), Durability::Sync)
            .unwrap();
        a.commit("fix", None, turn("two"), Durability::Sync)
            .unwrap();
        a.create(Some("other"), turn("three"), Durability::Sync)
            .unwrap();
    }
    let rec = Recorder::default();
    let (b, report) = clone_with(&a_path, &dir.path().join("b"), &rec).unwrap();
    assert_eq!(report.objects, 6);
    assert_eq!(
        rec.take(),
        [
            phase("counting objects", None, 6),
            phase("checking objects", Some(6), 6),
            phase("writing objects", Some(6), 6),
        ]
    );

    b.gc_with(&GcOptions::default(), &rec).unwrap();
    assert_eq!(
        rec.take(),
        [
            phase("marking reachable objects", None, 6),
            phase("sweeping", Some(6), 6),
            phase("repacking", Some(6), 6),
            phase("writing indexes", None, 0),
        ]
    );
    b.repack_with(&RepackOptions::default(), &rec).unwrap();
    let phases = rec.take();
    assert_eq!(phases[0], phase("repacking objects", None, 6));
    b.reindex_with(&rec).unwrap();
    let phases = rec.take();
    assert_eq!(phases[0].0, "applying operations");
    assert!(phases[0].2 >= 1, "{phases:?}");
}

#[test]
fn import_reports_files_read_of_all_and_conversations_written() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("in");
    std::fs::create_dir(&files).unwrap();
    for k in 1..=3 {
        std::fs::write(
            files.join(format!("c{k}.json")),
            json!({"messages": [{"role": "user", "content": format!("q{k}")}]}).to_string(),
        )
        .unwrap();
    }
    let store = Store::init(&dir.path().join("s")).unwrap();
    let rec = Arc::new(Recorder::default());
    let opts = ImportOptions {
        progress: Some(rec.clone()),
        ..ImportOptions::default()
    };
    let r = import_paths(&store, Format::OpenAi, std::slice::from_ref(&files), &opts).unwrap();
    assert_eq!(r.files, 3);
    assert_eq!(
        rec.take(),
        [
            phase("reading files", Some(3), 3),
            phase("importing files", Some(3), 3),
        ]
    );

    // Files of several formats: still one count over the whole import.
    std::fs::write(
        files.join("cc.jsonl"),
        format!(
            "{}\n",
            json!({"type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "cc",
                   "timestamp": "2025-01-01T00:00:00Z",
                   "message": {"role": "user", "content": "hi"}})
        ),
    )
    .unwrap();
    let r = import_paths_as(&store, None, &[files], &opts).unwrap();
    assert_eq!(r.files, 4);
    assert_eq!(
        rec.take(),
        [
            phase("reading files", Some(4), 4),
            phase("importing files", Some(4), 4),
        ]
    );
}
