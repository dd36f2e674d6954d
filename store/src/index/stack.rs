//! The stack of index tables on disk: which files make up the index, how a
//! new one is written and how they merge (objects-format.md, "Index").
//!
//! A table covers a run of operations, `<first>-<last>`; the stack is the
//! chain of tables from operation 1 on, each starting where the previous
//! ended, the longest table chosen at each step. Files outside the chain
//! (superseded by a merge, or left by a writer that died) are never read,
//! and the next table writer deletes them. Every file is written once,
//! under a temporary name, and renamed into place; a process that maps a
//! table keeps reading it after it is deleted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::table::{self, Table, TableMeta};
use super::Source;
use crate::error::{Error, Result};
use crate::refs::Hash;

/// A writer folds its overlay into a table once it holds this many
/// operations, or [`TABLE_KEYS`] keys, whichever comes first: a process
/// that opens the store applies at most about that much from the journal.
pub const TABLE_EVERY: u64 = 256;
/// See [`TABLE_EVERY`]: an import's operation may touch thousands of keys.
pub const TABLE_KEYS: usize = 2048;

/// Which entries (key, value or tombstone) a rewrite leaves out.
pub(super) type DoomedEntry<'a> = dyn Fn(&[u8], Option<&[u8]>) -> bool + 'a;

/// One mapped table and where it lives.
#[derive(Debug)]
pub(super) struct Loaded {
    table: Table,
    path: PathBuf,
}

/// A table's error as the store's, naming the file once.
pub(super) fn table_error(path: &Path, e: table::TableError) -> Error {
    let text = e.to_string();
    let prefix = format!("index table {} is corrupt: ", path.display());
    Error::CorruptFile {
        path: path.to_path_buf(),
        offset: 0,
        reason: text.strip_prefix(&prefix).unwrap_or(&text).to_owned(),
    }
}

impl Loaded {
    fn corrupt(&self, e: table::TableError) -> Error {
        table_error(&self.path, e)
    }

    fn meta(&self) -> &TableMeta {
        self.table.meta()
    }

    /// Hands `f` every entry under `prefix`, ascending, as borrowed bytes
    /// (a tombstone's value `None`): a scan that copies nothing.
    pub(super) fn each_under(
        &self,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], Option<&[u8]>),
    ) -> Result<()> {
        let t = &self.table;
        let mut i = t.lower_bound(prefix).map_err(|e| self.corrupt(e))?;
        while i < t.len() {
            let (k, v) = t.entry(i).map_err(|e| self.corrupt(e))?;
            if !k.starts_with(prefix) {
                break;
            }
            f(k, v);
            i += 1;
        }
        Ok(())
    }

    /// Entries under `prefix` past `cursor` (exclusive), in the scan's
    /// direction.
    pub(super) fn range<'a>(
        &'a self,
        prefix: &'a [u8],
        cursor: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Source<'a>> {
        let t = &self.table;
        let lb = |k: &[u8]| t.lower_bound(k).map_err(|e| self.corrupt(e));
        if !reverse {
            let mut i = match cursor {
                Some(c) => {
                    let i = lb(c)?;
                    match t.entry(i) {
                        Ok((k, _)) if k == c => i + 1,
                        _ => i,
                    }
                }
                None => lb(prefix)?,
            };
            return Ok(Box::new(std::iter::from_fn(move || {
                if i >= t.len() {
                    return None;
                }
                let item = match t.entry(i) {
                    Ok((k, _)) if !k.starts_with(prefix) => return None,
                    Ok((k, v)) => Ok((k.to_vec(), v.map(<[u8]>::to_vec))),
                    Err(e) => {
                        i = t.len();
                        return Some(Err(self.corrupt(e)));
                    }
                };
                i += 1;
                Some(item)
            })));
        }
        // Reverse: start below the cursor, or below the first key past the
        // prefix.
        let mut end = match cursor {
            Some(c) => lb(c)?,
            None => match super::prefix_end(prefix) {
                Some(e) => lb(&e)?,
                None => t.len(),
            },
        };
        Ok(Box::new(std::iter::from_fn(move || {
            if end == 0 {
                return None;
            }
            end -= 1;
            match t.entry(end) {
                Ok((k, _)) if !k.starts_with(prefix) => {
                    end = 0;
                    None
                }
                Ok((k, v)) => Some(Ok((k.to_vec(), v.map(<[u8]>::to_vec)))),
                Err(e) => {
                    end = 0;
                    Some(Err(self.corrupt(e)))
                }
            }
        })))
    }
}

/// Tables newest first.
#[derive(Debug, Default, Clone)]
pub(super) struct Stack {
    tables: Vec<Arc<Loaded>>,
}

impl Stack {
    /// The chain of tables in `dir` (none when there is no directory).
    pub(super) fn load(dir: &Path) -> Result<Stack> {
        // A merge may delete a table between the listing and its opening;
        // the merged table is then in the next listing.
        let mut last_err = None;
        for _ in 0..8 {
            match Stack::try_load(dir) {
                Ok(s) => return Ok(s),
                Err(Error::Io { source, path })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    if path == dir {
                        return Ok(Stack::default());
                    }
                    last_err = Some(Error::Io { source, path });
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.expect("set in the loop"))
    }

    fn try_load(dir: &Path) -> Result<Stack> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
            let entry = entry.map_err(|e| Error::io(dir, e))?;
            if let Some(r) = entry
                .file_name()
                .to_str()
                .and_then(table::parse_table_file_name)
            {
                ranges.push(r);
            }
        }
        // From operation 1, the longest table starting where the chain ends.
        ranges.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut chain = Vec::new();
        let mut next = 1u64;
        while let Some(&(first, last)) = ranges.iter().find(|r| r.0 == next && r.1 >= r.0) {
            let meta_name = table::table_file_name(&TableMeta {
                first,
                last,
                last_hash: [0; 32],
            });
            let path = dir.join(meta_name);
            let t = Table::open(&path).map_err(|e| match std::fs::metadata(&path) {
                Err(io) if io.kind() == std::io::ErrorKind::NotFound => Error::io(&path, io),
                _ => table_error(&path, e),
            })?;
            if t.meta().first != first || t.meta().last != last {
                return Err(Error::CorruptFile {
                    path,
                    offset: 8,
                    reason: format!(
                        "covers operations {}..{}, its name says {first}..{last}",
                        t.meta().first,
                        t.meta().last
                    ),
                });
            }
            chain.push(Arc::new(Loaded { table: t, path }));
            next = last + 1;
        }
        chain.reverse();
        Ok(Stack { tables: chain })
    }

    /// Whether every table of the stack is still the file at its name: gc
    /// writes tables again under their names without the text of what it
    /// dropped, and a writer that merged the copies it mapped before would
    /// write that text back.
    pub(super) fn is_current(&self) -> bool {
        self.tables.iter().all(|t| t.table.is_current())
    }

    /// Whether the tables' `t:` keys name every ref's target: none of them
    /// is a version-1 table (objects-format.md, "Index tables").
    pub(super) fn reverse_refs_complete(&self) -> bool {
        self.tables
            .iter()
            .all(|t| t.table.version() != table::INDEX_FORMAT_V1)
    }

    /// The last operation the tables cover, and its hash.
    pub(super) fn covered(&self) -> Option<(u64, Hash)> {
        self.tables
            .first()
            .map(|t| (t.meta().last, t.meta().last_hash))
    }

    pub(super) fn tables(&self) -> impl Iterator<Item = &Loaded> {
        self.tables.iter().map(|t| &**t)
    }

    /// A key's value in the newest table that holds it (`None` for a
    /// removed or absent key).
    pub(super) fn get(&self, k: &[u8]) -> Result<Option<&[u8]>> {
        for t in &self.tables {
            match t.table.get(k).map_err(|e| t.corrupt(e))? {
                Some(v) => return Ok(v),
                None => continue,
            }
        }
        Ok(None)
    }

    /// Writes a table of what the operations after this stack up to
    /// `applied` changed (`delta`), merges tables while the newer is at
    /// least half the size of the one below it, and returns the new stack.
    /// The files it replaces are left for [`clear_leftovers`].
    pub(super) fn push(
        &self,
        dir: &Path,
        applied: (u64, Hash),
        delta: &BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    ) -> Result<Stack> {
        let first = self.covered().map_or(1, |c| c.0 + 1);
        let meta = TableMeta {
            first,
            last: applied.0,
            last_hash: applied.1,
        };
        // The bottom table has nothing below it to hide.
        let bottom = first == 1;
        let entries = delta
            .iter()
            .filter(|(_, v)| !(bottom && v.is_none()))
            .map(|(k, v)| (k.as_slice(), v.as_deref()));
        // This handle applied every operation of the delta, `t:` keys
        // and all.
        let new = write(dir, &meta, table::INDEX_FORMAT_VERSION, entries)?;
        let mut tables = vec![new];
        tables.extend(self.tables.iter().cloned());
        while tables.len() >= 2 && tables[0].table.file_len() * 2 >= tables[1].table.file_len() {
            let (newer, older) = (&tables[0], &tables[1]);
            let meta = TableMeta {
                first: older.meta().first,
                last: newer.meta().last,
                last_hash: newer.meta().last_hash,
            };
            let bottom = meta.first == 1;
            let merged: Vec<(&[u8], Option<&[u8]>)> =
                table::merge(&[&newer.table, &older.table], bottom)
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| newer.corrupt(e))?;
            let v1 = newer.table.version() == table::INDEX_FORMAT_V1
                || older.table.version() == table::INDEX_FORMAT_V1;
            let m = if !v1 {
                write(dir, &meta, table::INDEX_FORMAT_VERSION, merged.into_iter())?
            } else if bottom {
                // A bottom table holds every live ref: its `t:` keys are
                // made from its `r:` entries, and it is version 2 from then on.
                let reverse = reverse_refs_of(&merged);
                let entries = with_reverse_refs(&merged, &reverse);
                write(dir, &meta, table::INDEX_FORMAT_VERSION, entries.into_iter())?
            } else {
                write(dir, &meta, table::INDEX_FORMAT_V1, merged.into_iter())?
            };
            tables.splice(0..2, [m]);
        }
        Ok(Stack { tables })
    }

    /// Writes again, under the same names, the tables that hold an entry
    /// `doomed` accepts, without those entries; the others are left as
    /// they are. Returns how many were written. Readers that map a table
    /// keep the old file; the caller holds the index lock and loads the
    /// stack again after.
    pub(super) fn rewrite_without(&self, dir: &Path, doomed: &DoomedEntry<'_>) -> Result<usize> {
        let mut written = 0;
        for t in &self.tables {
            let mut kept: Vec<(&[u8], Option<&[u8]>)> = Vec::with_capacity(t.table.len());
            let mut dropped = 0;
            for i in 0..t.table.len() {
                let (k, v) = t.table.entry(i).map_err(|e| t.corrupt(e))?;
                if doomed(k, v) {
                    dropped += 1;
                } else {
                    kept.push((k, v));
                }
            }
            if dropped > 0 {
                write(dir, t.meta(), t.table.version(), kept.into_iter())?;
                written += 1;
            }
        }
        Ok(written)
    }

    /// Every table file in `dir` checked in full, the stack's and any
    /// other (a damaged file outside the chain may still be chosen by the
    /// next reader); one line per problem.
    pub(super) fn verify_dir(dir: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(table::parse_table_file_name)
                    .is_some()
            })
            .collect();
        paths.sort();
        paths
            .into_iter()
            .filter_map(|p| {
                let checked = Table::open(&p).and_then(|t| t.verify());
                checked.err().map(|e| {
                    format!(
                        "{} (derived: sessctl reindex replaces it)",
                        table_error(&p, e)
                    )
                })
            })
            .collect()
    }

    pub(super) fn describe(&self) -> Vec<(String, u64, u64)> {
        self.tables
            .iter()
            .map(|t| {
                (
                    t.path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    t.meta().first,
                    t.meta().last,
                )
            })
            .collect()
    }
}

/// The `t:` keys of a bottom table's live `r:` entries (ascending).
fn reverse_refs_of(entries: &[(&[u8], Option<&[u8]>)]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = entries
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix(b"r:")?;
            match super::refs::target_from(v.as_ref()?)? {
                crate::refs::RefTarget::Session(id) => Some(super::refs::reverse_key(&id, name)),
                crate::refs::RefTarget::Symbolic(_) => None,
            }
        })
        .collect();
    out.sort_unstable();
    out
}

/// `entries` with their `t:` keys replaced by `reverse` (all sorted).
fn with_reverse_refs<'a>(
    entries: &[(&'a [u8], Option<&'a [u8]>)],
    reverse: &'a [Vec<u8>],
) -> Vec<(&'a [u8], Option<&'a [u8]>)> {
    let mut out: Vec<(&[u8], Option<&[u8]>)> = Vec::with_capacity(entries.len() + reverse.len());
    let mut rest = entries
        .iter()
        .filter(|(k, _)| !k.starts_with(b"t:"))
        .peekable();
    while let Some(e) = rest.next_if(|(k, _)| *k < &b"t:"[..]) {
        out.push(*e);
    }
    out.extend(reverse.iter().map(|k| (k.as_slice(), Some(&b""[..]))));
    out.extend(rest.copied());
    out
}

fn write<'a>(
    dir: &Path,
    meta: &TableMeta,
    version: u32,
    entries: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> Result<Arc<Loaded>> {
    let corrupt = |e: table::TableError| table_error(&dir.join(table::table_file_name(meta)), e);
    let bytes = table::encode_table_as(meta, version, entries).map_err(corrupt)?;
    let path = table::write_table_file(dir, meta, &bytes).map_err(corrupt)?;
    let t = Table::open(&path).map_err(corrupt)?;
    Ok(Arc::new(Loaded { table: t, path }))
}

/// Deletes what no reader of `stack` needs: tables outside its chain that
/// end at or before what it covers (with `all`, after a rebuild that
/// distrusts them, every table outside it), a sled index left by an
/// earlier version, the retired listing, and temporary files of writers
/// that died. The caller holds the index lock.
pub(super) fn clear_leftovers(dir: &Path, stack: &Stack, all: bool) {
    let covered = stack.covered().map_or(0, |c| c.0);
    let in_use: Vec<&Path> = stack.tables.iter().map(|t| t.path.as_path()).collect();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let stale = match table::parse_table_file_name(&name) {
            Some((_, last)) => (all || last <= covered) && !in_use.contains(&path.as_path()),
            // sled's files (format 1 of the index), and unfinished tables.
            None => {
                name == "db"
                    || name == "conf"
                    || name == "blobs"
                    || name.starts_with("snap.")
                    || name.starts_with(".tmp-")
            }
        };
        if stale {
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
    if let Some(root) = dir.parent() {
        let _ = std::fs::remove_file(root.join("listing"));
    }
}
