//! Revisions: how a person names a session (`fix`, `HEAD~2`, `7f3a^2`,
//! `archive/old~1^2~3`).
//!
//! A revision is a *name* followed by any number of steps:
//!
//! - `REV~N`: the N-th first-parent ancestor (`REV~` is `REV~1`, `REV~0` is
//!   REV);
//! - `REV^N`: the N-th parent (`REV^` is `REV^1`, `REV^0` is REV).
//!
//! The name may end with `@{N}`: the N-th prior value of that ref, read from
//! its ref log (`fix@{0}` is its current value, `fix@{1}` the one before
//! the last move; a bare `@{N}` is the conversation `HEAD` names), as git's
//! `@{N}`. The log goes back to the ref's newest creation; a rename, an
//! archive or an unarchive is followed (the log of the new name goes on with
//! the old name's). `HEAD@{N}` counts as git's HEAD log does: every
//! operation that moved `HEAD` or the conversation it followed then, each
//! the session `HEAD` resolved to after it.
//!
//! This module owns revision naming whole: that syntax, the walk along
//! parents it implies, and what a name means (refs, tags, prefixes:
//! [`Store::resolve_name`]). The walk reads parents through a [`Lineage`],
//! never a message body.

pub use crate::error::RevParseError;

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::graph::Lineage;
use crate::hash::ObjectId;
use crate::object::ObjectKind;
use crate::refs::{validate_name, NameError, RefName, RefTarget, ReflogEntry};
use crate::store::Store;

/// One step after a revision's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `~N`: follow the first parent N times.
    Ancestor(u64),
    /// `^N`: the N-th parent (1-based); `^0` is the session itself.
    Parent(u64),
}

/// A parsed revision: a name and the steps after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevSpec {
    text: String,
    /// Where the name ends: before `@{N}` when there is one.
    name_len: usize,
    /// `@{N}`: the N-th prior value of the named ref.
    reflog: Option<u64>,
    base_len: usize,
    /// Each step and where its text ends in the revision.
    steps: Vec<(Step, usize)>,
}

impl RevSpec {
    /// Parses a revision's syntax; names are not looked up.
    pub fn parse(rev: &str) -> Result<RevSpec, RevParseError> {
        if rev.is_empty() {
            return Err(RevParseError::Empty);
        }
        let base_len = rev.find(['~', '^']).unwrap_or(rev.len());
        let base = &rev[..base_len];
        if base.is_empty() {
            return Err(RevParseError::NoName {
                rev: rev.to_owned(),
                op: rev.chars().next().expect("not empty"),
            });
        }
        let (name_len, reflog) = match base.rfind("@{") {
            Some(at) => {
                let inner = base[at + 2..].strip_suffix('}').unwrap_or("");
                if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(RevParseError::BadReflog {
                        rev: rev.to_owned(),
                    });
                }
                let n = inner.parse::<u64>().map_err(|_| RevParseError::TooLarge {
                    rev: rev.to_owned(),
                    number: inner.to_owned(),
                })?;
                (at, Some(n))
            }
            None => (base_len, None),
        };
        let name = &rev[..name_len];
        // A bare `@{N}` names the conversation HEAD is on.
        if !(name.is_empty() && reflog.is_some()) {
            check_name(name).map_err(|reason| RevParseError::BadName {
                rev: rev.to_owned(),
                reason,
            })?;
        }
        let bytes = rev.as_bytes();
        let mut steps = Vec::new();
        let mut at = base_len;
        while at < bytes.len() {
            let op = bytes[at] as char;
            let digits_start = at + 1;
            let mut end = digits_start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            if end < bytes.len() && !matches!(bytes[end], b'~' | b'^') {
                return Err(RevParseError::BadStep {
                    rev: rev.to_owned(),
                    op,
                    found: rev[end..].chars().next().expect("not at the end"),
                });
            }
            let number = &rev[digits_start..end];
            let n = if number.is_empty() {
                1
            } else {
                number.parse::<u64>().map_err(|_| RevParseError::TooLarge {
                    rev: rev.to_owned(),
                    number: number.to_owned(),
                })?
            };
            let step = if op == '~' {
                Step::Ancestor(n)
            } else {
                Step::Parent(n)
            };
            steps.push((step, end));
            at = end;
        }
        Ok(RevSpec {
            text: rev.to_owned(),
            name_len,
            reflog,
            base_len,
            steps,
        })
    }

    /// The name the steps start from (without its `@{N}`; empty for a bare
    /// `@{N}`).
    pub fn name(&self) -> &str {
        &self.text[..self.name_len]
    }

    /// The N of `NAME@{N}`, if given.
    pub fn reflog(&self) -> Option<u64> {
        self.reflog
    }

    pub fn steps(&self) -> impl Iterator<Item = Step> + '_ {
        self.steps.iter().map(|(s, _)| *s)
    }

    /// Applies the steps to the session `name` resolved to.
    pub fn walk(&self, lineage: &(impl Lineage + ?Sized), start: ObjectId) -> Result<ObjectId> {
        let mut at = start;
        let mut done = self.base_len;
        for (step, end) in &self.steps {
            let so_far = &self.text[..done];
            let upto = &self.text[..*end];
            match *step {
                Step::Parent(0) | Step::Ancestor(0) => {}
                Step::Parent(n) => {
                    let parents = lineage.parents(&at)?;
                    at = *usize::try_from(n - 1)
                        .ok()
                        .and_then(|i| parents.get(i))
                        .ok_or_else(|| {
                            Error::Invalid(format!(
                                "{upto}: session {so_far} has {}",
                                count_of(parents.len() as u64, "parent", "parents")
                            ))
                        })?;
                }
                Step::Ancestor(n) => {
                    for k in 0..n {
                        match lineage.parents(&at)?.first() {
                            Some(p) => at = *p,
                            None => {
                                let msg = if k == 0 {
                                    format!("{upto}: {so_far} has no parents")
                                } else {
                                    format!(
                                        "{upto}: {so_far} has only {}",
                                        count_of(
                                            k,
                                            "first-parent ancestor",
                                            "first-parent ancestors"
                                        )
                                    )
                                };
                                return Err(Error::Invalid(msg));
                            }
                        }
                    }
                }
            }
            done = *end;
        }
        Ok(at)
    }
}

fn count_of(n: u64, one: &str, many: &str) -> String {
    match n {
        0 => format!("no {many}"),
        1 => format!("1 {one}"),
        n => format!("{n} {many}"),
    }
}

/// Whether `name` could name a session at all: `HEAD`, `@`, a full ref
/// name, `archive/NAME`, `tags/NAME`, a conversation or tag name, or hex.
fn check_name(name: &str) -> Result<(), NameError> {
    if name == "HEAD" || name == "@" {
        return Ok(());
    }
    if name.starts_with("refs/") {
        return RefName::parse(name).map(|_| ());
    }
    if let Some(n) = name
        .strip_prefix("archive/")
        .or_else(|| name.strip_prefix("tags/"))
    {
        return validate_name(n);
    }
    validate_name(name)
}

/// What a name means, and a whole revision, against a store: the one place
/// that turns what a person types into a session id. Uses only the store's
/// public reads.
impl Store {
    /// Resolves a revision to a session: a name as [`Store::resolve_name`]
    /// takes it, then any number of `~N` (N-th first-parent ancestor) and
    /// `^N` (N-th parent) steps, as in git (see [`crate::rev`]).
    pub fn resolve_rev(&self, rev: &str) -> Result<ObjectId> {
        let spec = RevSpec::parse(rev)?;
        // Ids and prefixes are looked up in the journal as this handle
        // knows it: bring it up to date with other processes first.
        self.catch_up()?;
        let start = match spec.reflog() {
            Some(n) => self.resolve_reflog(&spec.text[..spec.base_len], spec.name(), n)?,
            None => self.resolve_name(spec.name())?,
        };
        spec.walk(self, start)
    }

    /// The ref a `NAME@{N}` reads the log of: HEAD's conversation for an
    /// empty name, else as [`Store::resolve_name`] reads names (the first of
    /// conversation, tag, archived conversation that has a log).
    fn reflog_ref(&self, name: &str) -> Result<RefName> {
        if name.is_empty() {
            return match self.get_ref(&RefName::Head)? {
                Some(RefTarget::Symbolic(r)) => Ok(r),
                Some(RefTarget::Session(id)) => Err(Error::HeadDetached { id }),
                None => Err(Error::NoHead),
            };
        }
        if name == "HEAD" || name == "@" {
            return Ok(RefName::Head);
        }
        if name.starts_with("refs/") {
            return Ok(RefName::parse(name)?);
        }
        if let Some(n) = name.strip_prefix("archive/") {
            return Ok(RefName::archived(n)?);
        }
        if let Some(n) = name.strip_prefix("tags/") {
            return Ok(RefName::tag(n)?);
        }
        let candidates = [
            RefName::conversation(name)?,
            RefName::tag(name)?,
            RefName::archived(name)?,
        ];
        for c in &candidates {
            if self.get_ref(c)?.is_some() {
                return Ok(c.clone());
            }
        }
        let entries = self.live_reflog_entries()?;
        for c in candidates {
            if entries.iter().any(|e| e.name == c) {
                return Ok(c);
            }
        }
        Err(Error::UnknownRevision {
            rev: name.to_owned(),
        })
    }

    /// The session `name@{n}` names: the value the ref took in the n-th
    /// newest live entry of its log (expired entries do not count). The log
    /// goes back to the ref's newest creation; where that creation moved the
    /// ref from another name (a rename, an archive, an unarchive: the same
    /// operation deleted the other ref) it goes on with the other ref's log
    /// before that operation, whose deletion half does not count. `HEAD@{n}`
    /// is the n-th newest session `HEAD` resolved to, as git's HEAD log
    /// counts them (see `head_values`), never what a conversation it once
    /// named holds now.
    pub fn resolve_reflog(&self, rev: &str, name: &str, n: u64) -> Result<ObjectId> {
        let mut r = self.reflog_ref(name)?;
        // Expired entries are gone from the log `reflog` shows, as from git's.
        let all = self.live_reflog_entries()?;
        if r == RefName::Head {
            let values = head_values(&all);
            return usize::try_from(n)
                .ok()
                .and_then(|i| values.get(i).copied())
                .ok_or_else(|| Error::ReflogTooShort {
                    rev: rev.to_owned(),
                    name: RefName::Head,
                    entries: values.len(),
                });
        }
        let mut values: Vec<&ReflogEntry> = Vec::new();
        let mut before = u64::MAX;
        loop {
            let mut created = None;
            for e in all.iter().rev().filter(|e| e.name == r && e.op < before) {
                values.push(e);
                if e.old.is_none() {
                    created = Some(e);
                    break;
                }
            }
            let Some(created) = created else {
                break;
            };
            if !matches!(created.reason.as_str(), "rename" | "archive" | "unarchive") {
                break;
            }
            // The ref the same operation deleted, holding what this one
            // was created with.
            let Some(from) = all.iter().find(|e| {
                e.op == created.op
                    && e.new.is_none()
                    && e.old.is_some()
                    && e.old == created.new
                    && e.name != r
                    && e.name != RefName::Head
            }) else {
                break;
            };
            r = from.name.clone();
            before = created.op;
        }
        let entry = usize::try_from(n)
            .ok()
            .and_then(|i| values.get(i))
            .ok_or_else(|| Error::ReflogTooShort {
                rev: rev.to_owned(),
                name: self.reflog_ref(name).unwrap_or(RefName::Head),
                entries: values.len(),
            })?;
        match &entry.new {
            Some(RefTarget::Session(id)) => Ok(*id),
            // Only HEAD is symbolic, and HEAD's values are read above.
            Some(RefTarget::Symbolic(s)) => Err(Error::NoHeadYet {
                name: s.short().to_owned(),
            }),
            None => Err(Error::RefGoneThen {
                rev: rev.to_owned(),
                name: entry.name.clone(),
            }),
        }
    }

    /// Resolves a name to a session: `HEAD` or `@`, a conversation
    /// name (its head), `archive/<name>`, `tags/<name>` or a tag name, a
    /// full ref name, a full id or a unique prefix of 4+ hex digits. Names
    /// win over prefixes, as in git.
    pub fn resolve_name(&self, rev: &str) -> Result<ObjectId> {
        if rev == "HEAD" || rev == "@" {
            return self.resolve_ref(&RefName::Head)?.ok_or(Error::NoHead);
        }
        let mut candidates: Vec<RefName> = Vec::new();
        if rev.starts_with("refs/") {
            candidates.push(RefName::parse(rev)?);
        } else if let Some(n) = rev.strip_prefix("archive/") {
            candidates.push(RefName::archived(n)?);
        } else if let Some(n) = rev.strip_prefix("tags/") {
            candidates.push(RefName::tag(n)?);
        } else if validate_name(rev).is_ok() {
            candidates.push(RefName::conversation(rev)?);
            candidates.push(RefName::tag(rev)?);
            candidates.push(RefName::archived(rev)?);
        }
        for c in &candidates {
            if let Some(RefTarget::Session(id)) = self.get_ref(c)? {
                return Ok(id);
            }
        }
        if rev.len() >= crate::hash::MIN_PREFIX_LEN && rev.bytes().all(|b| b.is_ascii_hexdigit()) {
            let id = self.odb().resolve(rev)?;
            let obj = self.odb().read(&id)?;
            if obj.kind() != ObjectKind::Session {
                return Err(Error::NotASession {
                    rev: rev.to_owned(),
                    id,
                    kind: obj.kind(),
                });
            }
            return Ok(id);
        }
        if !candidates.is_empty() || rev.starts_with("refs/") {
            if let Some(RefName::Conversation(n)) = candidates.first() {
                if self.conversation(n)?.is_some() {
                    return Err(Error::NoHeadYet { name: n.clone() });
                }
            }
        }
        Err(Error::UnknownRevision {
            rev: rev.to_owned(),
        })
    }
}

/// The sessions `HEAD` named, newest first, as git's HEAD log has them:
/// one for each operation that moved `HEAD` (a checkout, a rename it
/// followed, a detach) or the ref it followed then (a commit, a reset), the
/// session it resolved to after that operation. `HEAD`'s own entries only
/// say which conversation it named: read alone, `HEAD@{1}` would be another
/// conversation's head after a commit and a reset of this one. Operations
/// after which `HEAD` resolved to nothing (a conversation with no head yet)
/// add nothing.
fn head_values(entries: &[ReflogEntry]) -> Vec<ObjectId> {
    let mut refs: HashMap<&RefName, &RefTarget> = HashMap::new();
    let mut out = Vec::new();
    let mut at = 0;
    while at < entries.len() {
        let op = entries[at].op;
        let end = entries[at..]
            .iter()
            .position(|e| e.op != op)
            .map_or(entries.len(), |k| at + k);
        let moved = &entries[at..end];
        for e in moved {
            match &e.new {
                Some(t) => refs.insert(&e.name, t),
                None => refs.remove(&e.name),
            };
        }
        let followed = match refs.get(&RefName::Head) {
            Some(RefTarget::Symbolic(r)) => Some(r),
            _ => None,
        };
        let touched = moved
            .iter()
            .any(|e| e.name == RefName::Head || Some(&e.name) == followed);
        if touched {
            let value = match refs.get(&RefName::Head) {
                Some(RefTarget::Session(id)) => Some(*id),
                Some(RefTarget::Symbolic(r)) => match refs.get(r) {
                    Some(RefTarget::Session(id)) => Some(*id),
                    _ => None,
                },
                None => None,
            };
            out.extend(value);
        }
        at = end;
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(rev: &str) -> Vec<Step> {
        RevSpec::parse(rev).expect("parses").steps().collect()
    }

    #[test]
    fn steps_parse_with_implicit_ones() {
        assert_eq!(steps("fix"), vec![]);
        assert_eq!(steps("fix~"), vec![Step::Ancestor(1)]);
        assert_eq!(steps("fix^"), vec![Step::Parent(1)]);
        assert_eq!(steps("HEAD~12"), vec![Step::Ancestor(12)]);
        assert_eq!(
            steps("fix~2^2~1"),
            vec![Step::Ancestor(2), Step::Parent(2), Step::Ancestor(1)]
        );
        assert_eq!(
            steps("@^^0~"),
            vec![Step::Parent(1), Step::Parent(0), Step::Ancestor(1)]
        );
        assert_eq!(
            RevSpec::parse("archive/old~3").expect("ok").name(),
            "archive/old"
        );
        assert_eq!(
            RevSpec::parse("refs/tags/v1^2").expect("ok").name(),
            "refs/tags/v1"
        );
    }

    #[test]
    fn malformed_revisions_say_why() {
        let err = |rev: &str| RevSpec::parse(rev).expect_err(rev).to_string();
        assert_eq!(err(""), "a revision cannot be empty");
        assert_eq!(
            err("~2"),
            "'~2' is not a revision: '~' needs a name or id before it"
        );
        assert_eq!(
            err("fix~x"),
            "'fix~x' is not a revision: after '~' expected a number, '~' or '^', found 'x'"
        );
        assert_eq!(
            err("fix^{commit}"),
            "'fix^{commit}' is not a revision: after '^' expected a number, '~' or '^', found '{'"
        );
        assert_eq!(
            err("fix~99999999999999999999"),
            "'fix~99999999999999999999' is not a revision: 99999999999999999999 is too large a step"
        );
        assert!(err("fi x~1").starts_with("'fi x~1' is not a revision: name 'fi x' contains ' '"));
        assert!(err("refs/nope/x").starts_with("'refs/nope/x' is not a revision: "));
    }
}
