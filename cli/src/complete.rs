//! Dynamic shell completion: the shell asks the binary itself
//! (`SESSCTL_COMPLETE=bash sessctl -- sessctl log f<TAB>`), so that conversation
//! names come from the store and the values of `--from` and `--format` from
//! the formats this binary knows. `sessctl completions SHELL` prints the
//! small script that wires a shell to it.
//!
//! A completion reads the store read-only and never fails loudly: with no
//! store, or a damaged one, it offers nothing.

use std::ffi::OsString;
use std::path::PathBuf;

use clap_complete::engine::CompletionCandidate;
use sessctl_store::export::ExportFormat;
use sessctl_store::import::Format;
use sessctl_store::{OpenOptions, RefName, Store};

/// The variable that turns a run into a completion request.
/// Namespaced: a `COMPLETE` set for another program must not turn every
/// run (a hook above all) into a completion.
pub const VAR: &str = "SESSCTL_COMPLETE";

/// The store named on the line being completed (`--store DIR|URL`,
/// `--store=DIR|URL`), else `SESSCTL_STORE`, else the nearest `.sessctl`.
fn store_path() -> Option<PathBuf> {
    let args: Vec<OsString> = std::env::args_os().collect();
    for (i, a) in args.iter().enumerate() {
        if a == "--store" {
            if let Some(v) = args.get(i + 1) {
                return Some(PathBuf::from(v));
            }
        } else if let Some(v) = a.to_str().and_then(|a| a.strip_prefix("--store=")) {
            return Some(PathBuf::from(v));
        }
    }
    if let Some(s) = std::env::var_os("SESSCTL_STORE").filter(|s| !s.is_empty()) {
        return Some(PathBuf::from(s));
    }
    crate::discover_store(&std::env::current_dir().ok()?, false)
}

/// Every ref of the store, or none when it cannot be read.
fn refs() -> Vec<RefName> {
    let Some(path) = store_path() else {
        return Vec::new();
    };
    let opts = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let store = match crate::remote_url(&path) {
        Some(url) => crate::open_remote_store(url, &opts).ok(),
        None => Store::open(&path, &opts).ok(),
    };
    store
        .and_then(|s| s.refs().ok())
        .map(|r| r.into_iter().map(|(n, _)| n).collect())
        .unwrap_or_default()
}

/// Live conversations' names.
pub fn conversations() -> Vec<CompletionCandidate> {
    refs()
        .into_iter()
        .filter_map(|n| match n {
            RefName::Conversation(c) => Some(CompletionCandidate::new(c)),
            _ => None,
        })
        .collect()
}

/// Archived conversations' names, as `unarchive` takes them.
pub fn archived() -> Vec<CompletionCandidate> {
    refs()
        .into_iter()
        .filter_map(|n| match n {
            RefName::Archived(c) => Some(CompletionCandidate::new(c)),
            _ => None,
        })
        .collect()
}

/// Tags' names.
pub fn tags() -> Vec<CompletionCandidate> {
    refs()
        .into_iter()
        .filter_map(|n| match n {
            RefName::Tag(t) => Some(CompletionCandidate::new(t)),
            _ => None,
        })
        .collect()
}

/// What a revision most often starts with: HEAD, conversations,
/// `archive/NAME` and tags.
pub fn revisions() -> Vec<CompletionCandidate> {
    let mut out = vec![CompletionCandidate::new("HEAD")];
    for n in refs() {
        out.push(match n {
            RefName::Head => continue,
            RefName::Conversation(c) => CompletionCandidate::new(c),
            RefName::Archived(c) => CompletionCandidate::new(format!("archive/{c}")),
            RefName::Tag(t) => CompletionCandidate::new(t),
        });
    }
    out
}

/// What `reflog` takes: HEAD, conversation names and full ref names.
pub fn ref_names() -> Vec<CompletionCandidate> {
    let mut out = vec![CompletionCandidate::new("HEAD")];
    for n in refs() {
        if let RefName::Conversation(c) = &n {
            out.push(CompletionCandidate::new(c));
        }
        if n != RefName::Head {
            out.push(CompletionCandidate::new(n.to_string()));
        }
    }
    out
}

/// `import --from`'s values: every format the importer knows.
pub fn import_formats() -> Vec<CompletionCandidate> {
    Format::ALL
        .into_iter()
        .map(|f| CompletionCandidate::new(f.as_str()))
        .collect()
}

/// `export --format`'s values.
pub fn export_formats() -> Vec<CompletionCandidate> {
    [
        ("json", "a JSON array of the messages"),
        ("jsonl", "one message a line"),
        ("openai", "{\"messages\": [...]}, OpenAI chat shape"),
        ("claude-code", "Claude Code session JSONL"),
        ("codex", "a Codex rollout"),
    ]
    .into_iter()
    // Only what this binary's exporter parses.
    .filter(|(f, _)| ExportFormat::parse(f).is_some())
    .map(|(f, help)| CompletionCandidate::new(f).help(Some(help.into())))
    .collect()
}

/// The script that makes `shell` ask this binary for completions.
pub fn registration(shell: clap_complete::Shell) -> crate::CmdResult<String> {
    let name = shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let completer = shells
        .completer(&name)
        .ok_or_else(|| crate::CommandError::Usage(format!("no completion for {name}")))?;
    let mut script = Vec::new();
    completer.write_registration(VAR, "sessctl", "sessctl", "sessctl", &mut script)?;
    Ok(String::from_utf8_lossy(&script).into_owned())
}
