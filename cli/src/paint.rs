//! Colour for `log`, `show` and `diff`, as git colours them: ids yellow,
//! HEAD cyan, conversations green, archived ones red, tags yellow, a diff's
//! `-` lines red and `+` lines green.
//!
//! The commands write plain text; when colour is on, it is painted here
//! line by line, so that what a pipe receives is byte for byte what it
//! always was. Whether colour is on is decided once, in `main`
//! ([`decide`]), from `--color`, `NO_COLOR`, `TERM` and whether stdout is a
//! terminal.

use std::borrow::Cow;
use std::sync::OnceLock;

use clap::ValueEnum;

/// `--color`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    /// On a terminal, unless NO_COLOR is set or TERM is dumb.
    Auto,
    /// Always, also in pipes and under NO_COLOR.
    Always,
    /// Never.
    Never,
}

static ENABLED: OnceLock<bool> = OnceLock::new();

/// Whether `log`, `show` and `diff` colour their text: `always`; `never`;
/// `auto`: stdout is a terminal, `NO_COLOR` is unset or empty, and `TERM`
/// is not `dumb`.
pub fn decide(when: ColorWhen, stdout_is_terminal: bool) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            stdout_is_terminal
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        }
    }
}

/// Sets the decision for this process (once; later calls change nothing).
pub fn set_enabled(on: bool) {
    let _ = ENABLED.set(on);
}

fn enabled() -> bool {
    ENABLED.get().copied().unwrap_or(false)
}

const RESET: &str = "\x1b[m";
const ID: &str = "\x1b[33m";
const HEAD: &str = "\x1b[1;36m";
const CONVERSATION: &str = "\x1b[1;32m";
const ARCHIVED: &str = "\x1b[1;31m";
const TAG: &str = "\x1b[1;33m";
const OLD: &str = "\x1b[31m";
const NEW: &str = "\x1b[32m";

/// `log`'s text, painted when colour is on.
pub fn log(text: &str) -> Cow<'_, str> {
    paint(text, Kind::Log)
}

/// `show`'s text, painted when colour is on.
pub fn show(text: &str) -> Cow<'_, str> {
    paint(text, Kind::Show)
}

/// `diff`'s text, painted when colour is on.
pub fn diff(text: &str) -> Cow<'_, str> {
    paint(text, Kind::Diff)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Log,
    Show,
    Diff,
}

fn paint(text: &str, kind: Kind) -> Cow<'_, str> {
    if !enabled() {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for line in text.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        paint_line(body, kind, &mut out);
        out.push_str(end);
    }
    Cow::Owned(out)
}

fn is_hex_id(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn paint_line(line: &str, kind: Kind, out: &mut String) {
    if kind == Kind::Diff {
        for (mark, colour) in [("- ", OLD), ("+ ", NEW), ("  - ", OLD), ("  + ", NEW)] {
            if line.starts_with(mark) {
                out.push_str(colour);
                out.push_str(line);
                out.push_str(RESET);
                return;
            }
        }
        for label in ["a:", "b:", "merge base:"] {
            if let Some(rest) = line.strip_prefix(label) {
                let id = rest.trim_start();
                if is_hex_id(id, 64) {
                    out.push_str(&line[..line.len() - id.len()]);
                    push_id(out, id);
                    return;
                }
            }
        }
        out.push_str(line);
        return;
    }
    // The graph's lanes come first (`* | `); then `session ID (refs)`, or
    // (log --oneline) `ID12 (refs) summary`.
    let rest = line.trim_start_matches(['*', '|', '/', '\\', ' ']);
    let lanes = &line[..line.len() - rest.len()];
    let (head, id, tail) = if let Some(after) = rest.strip_prefix("session ") {
        match after.get(..64).filter(|id| is_hex_id(id, 64)) {
            Some(id) => ("session ", id, &after[64..]),
            None => return out.push_str(line),
        }
    } else if kind == Kind::Log && (lanes.is_empty() || lanes.contains('*')) {
        match rest.get(..12).filter(|id| is_hex_id(id, 12)) {
            Some(id) if rest[12..].is_empty() || rest[12..].starts_with(' ') => {
                ("", id, &rest[12..])
            }
            _ => return out.push_str(line),
        }
    } else {
        return out.push_str(line);
    };
    out.push_str(lanes);
    out.push_str(ID);
    out.push_str(head);
    out.push_str(id);
    out.push_str(RESET);
    match tail.strip_prefix(" (").and_then(|t| t.split_once(')')) {
        Some((names, after)) => {
            out.push(' ');
            push_decorations(out, names);
            out.push_str(after);
        }
        None => out.push_str(tail),
    }
}

fn push_id(out: &mut String, id: &str) {
    out.push_str(ID);
    out.push_str(id);
    out.push_str(RESET);
}

/// `(HEAD -> fix, archive/old, tag: golden)`, each name in its colour.
fn push_decorations(out: &mut String, names: &str) {
    let wrap = |out: &mut String, colour: &str, s: &str| {
        out.push_str(colour);
        out.push_str(s);
        out.push_str(RESET);
    };
    wrap(out, ID, "(");
    for (k, name) in names.split(", ").enumerate() {
        if k > 0 {
            wrap(out, ID, ", ");
        }
        if let Some(to) = name.strip_prefix("HEAD -> ") {
            wrap(out, HEAD, "HEAD");
            wrap(out, ID, " -> ");
            push_name(out, to);
        } else if name == "HEAD" {
            wrap(out, HEAD, name);
        } else {
            push_name(out, name);
        }
    }
    wrap(out, ID, ")");
}

fn push_name(out: &mut String, name: &str) {
    let colour = if name.starts_with("tag: ") || name.starts_with("tags/") {
        TAG
    } else if name.starts_with("archive/") {
        ARCHIVED
    } else {
        CONVERSATION
    };
    out.push_str(colour);
    out.push_str(name);
    out.push_str(RESET);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_refs_and_diff_lines_are_painted_and_nothing_else() {
        let id = "ab".repeat(32);
        let mut out = String::new();
        paint_line(
            &format!("| * session {id} (HEAD -> fix, tag: v1)"),
            Kind::Log,
            &mut out,
        );
        assert_eq!(
            out,
            format!(
                "| * \x1b[33msession {id}\x1b[m \x1b[33m(\x1b[m\x1b[1;36mHEAD\x1b[m\x1b[33m -> \x1b[m\
                 \x1b[1;32mfix\x1b[m\x1b[33m, \x1b[m\x1b[1;33mtag: v1\x1b[m\x1b[33m)\x1b[m"
            )
        );
        let mut out = String::new();
        paint_line(
            "* abababababab (archive/old) a summary",
            Kind::Log,
            &mut out,
        );
        assert!(
            out.starts_with("* \x1b[33mabababababab\x1b[m \x1b[33m(\x1b[m\x1b[1;31marchive/old"),
            "{out:?}"
        );
        assert!(out.ends_with(" a summary"), "{out:?}");
        // A summary line that happens to be hex is a summary.
        let mut out = String::new();
        paint_line("    abababababab", Kind::Log, &mut out);
        assert_eq!(out, "    abababababab");
        let mut out = String::new();
        paint_line("- [1] user: y", Kind::Diff, &mut out);
        assert_eq!(out, "\x1b[31m- [1] user: y\x1b[m");
        let mut out = String::new();
        paint_line("  + title: \"x\"", Kind::Diff, &mut out);
        assert_eq!(out, "\x1b[32m  + title: \"x\"\x1b[m");
    }
}
