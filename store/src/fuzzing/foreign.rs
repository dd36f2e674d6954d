//! Entry points for the bytes sessctl reads from other people and programs:
//! bundles a teammate sends, and the four formats `import` reads. Each
//! asserts more than "no panic" where an oracle exists.

use crate::bundle::Bundle;
use crate::fsck::FsckOptions;
use crate::import::{import_sources, Format, ImportOptions, ImportReport, SourceFile};
use crate::odb::Durability;
use crate::refs::RefTarget;
use crate::store::Store;

/// A bundle file. The first byte is a selector: odd, the bundle's trailing
/// blake3 is recomputed first, so that the decoder's checks behind the
/// checksum are reached. A bundle that decodes re-encodes to a bundle that
/// decodes to the same refs, records, prerequisites and objects; one with
/// no problems against an empty store applies there, after which every ref
/// it carried names the bundle's session and fsck is clean.
pub fn bundle_decode(data: &[u8]) {
    let Some(bytes) = super::with_trailer(data) else {
        return;
    };
    let path = std::path::Path::new("fuzz.bundle");
    let Ok(bundle) = Bundle::decode(&bytes, path) else {
        return;
    };
    for o in &bundle.objects {
        assert_eq!(
            crate::object::object_id(o.kind(), o.payload()),
            o.id(),
            "a decoded object does not hash to its id"
        );
    }
    let again = Bundle::decode(&bundle.encode(), path)
        .unwrap_or_else(|e| panic!("a decoded bundle re-encodes to one that does not decode: {e}"));
    assert_eq!(again, bundle, "a bundle changed through encode and decode");
    let store = Store::in_memory().expect("a store in memory");
    let problems = bundle
        .problems(Some(&store))
        .expect("checking a bundle against a store in memory");
    if !problems.is_empty() {
        let applied =
            crate::remote::apply(&store, &bundle, "fuzz", "the bundle", Durability::NoSync);
        assert!(
            applied.is_err(),
            "a bundle with problems applied: {problems:?}"
        );
        assert!(
            store.refs().expect("refs").is_empty(),
            "a refused bundle moved a ref"
        );
        return;
    }
    let report = crate::remote::apply(&store, &bundle, "fuzz", "the bundle", Durability::NoSync)
        .unwrap_or_else(|e| panic!("a bundle without problems does not apply: {e}"));
    assert!(
        report.applied,
        "an empty store refused a bundle: {report:?}"
    );
    for (name, id) in &bundle.refs {
        assert_eq!(
            store.get_ref(name).expect("a ref"),
            Some(RefTarget::Session(*id)),
            "{name} does not name the bundle's session"
        );
    }
    let fsck = store
        .fsck(&FsckOptions::default(), &mut |_, _| {})
        .expect("fsck of a store in memory");
    assert!(
        fsck.problems.is_empty(),
        "fsck after applying: {:?}",
        fsck.problems
    );
}

/// Import of Claude Code transcripts (see [`import`]).
pub fn import_claude_code(data: &[u8]) {
    import(Format::ClaudeCode, "jsonl", data);
}

/// Import of Codex rollouts (see [`import`]).
pub fn import_codex(data: &[u8]) {
    import(Format::Codex, "jsonl", data);
}

/// Import of OpenAI chat files (see [`import`]).
pub fn import_openai(data: &[u8]) {
    import(Format::OpenAi, "json", data);
}

/// Import of SWE-agent trajectories (see [`import`]).
pub fn import_swe_agent(data: &[u8]) {
    import(Format::SweAgent, "traj", data);
}

/// The input, split at each `\0\0` into up to four files (a main
/// transcript and its subagents or forks), imported into a store in memory
/// through the path every import takes. Whatever the bytes: no panic; every
/// refusal names its file and, for a line, a line that exists; a second
/// import of the same files writes nothing and moves no ref; fsck is clean.
pub fn import(format: Format, ext: &str, data: &[u8]) {
    let sources: Vec<SourceFile> = split_files(data)
        .into_iter()
        .take(4)
        .enumerate()
        .map(|(k, bytes)| SourceFile {
            path: format!("fuzz-{k}.{ext}").into(),
            text: String::from_utf8_lossy(bytes).into_owned(),
        })
        .collect();
    let store = Store::in_memory().expect("a store in memory");
    let opts = ImportOptions {
        no_sync: true,
        ..ImportOptions::default()
    };
    let Ok(first) = import_sources(&store, format, &sources, &opts, ImportReport::default()) else {
        return;
    };
    for s in &first.skipped {
        let Some(src) = sources.iter().find(|f| f.path == s.file) else {
            panic!("a refusal names a file that was not given: {s:?}");
        };
        assert!(!s.reason.is_empty(), "a refusal without a reason: {s:?}");
        assert!(
            s.line <= src.text.lines().count().max(1),
            "a refusal names line {} of a {}-line file",
            s.line,
            src.text.lines().count()
        );
    }
    let second = import_sources(&store, format, &sources, &opts, ImportReport::default())
        .unwrap_or_else(|e| panic!("a second import of the same files fails: {e}"));
    assert_eq!(
        (second.objects_written, second.refs_moved),
        (0, 0),
        "a second import of the same files changed the store"
    );
    let fsck = store
        .fsck(&FsckOptions::default(), &mut |_, _| {})
        .expect("fsck of a store in memory");
    assert!(
        fsck.problems.is_empty(),
        "fsck after an import: {:?}",
        fsck.problems
    );
}

/// The files of one fuzz input: split at each `\0\0`.
fn split_files(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < data.len() {
        if data[i] == 0 && data[i + 1] == 0 {
            out.push(&data[start..i]);
            i += 2;
            start = i;
        } else {
            i += 1;
        }
    }
    out.push(&data[start..]);
    out
}
