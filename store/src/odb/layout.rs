//! The store's layout on disk: the `FORMAT` file that makes a directory a
//! store (objects-format.md, "Versioning"), and the directories a new store
//! starts with.

use std::fs;
use std::path::Path;

use super::{journal, Durability};
use crate::error::{Error, IoResultExt, Result};
use crate::odb::atomic_file::AtomicFile;

/// The newest store format, in `FORMAT` (objects-format.md, "Versioning"):
/// 4, a store with a version-2 pack or a version-3 op-log file. This
/// sessctl reads formats 1 to 4.
pub const STORE_FORMAT_VERSION: u32 = 4;
/// The format a new store is written in (no operation expires ref-log
/// entries, no raw object): a store stays at it until something an older
/// sessctl cannot read is first written, which raises it ([`raise_format`])
/// so that an older sessctl refuses the store as newer instead of reading
/// what it does not know as damage.
pub const STORE_FORMAT_INITIAL: u32 = 1;
/// Format 2: some operation expires ref-log entries (an `expire` key).
pub const STORE_FORMAT_EXPIRE: u32 = 2;
/// Format 3: the store holds a raw object (kind code 3).
pub const STORE_FORMAT_RAW: u32 = 3;
/// Format 4: the store holds a version-2 pack (zstd dictionaries) or a
/// version-3 op-log file (compressed whole).
pub const STORE_FORMAT_PACK2: u32 = 4;
/// The first line of `FORMAT`, before the version number.
pub const FORMAT_PREFIX: &str = "sessctl store format ";

/// Creates an empty store layout at `path`: `journal/`, `packs/` and, last,
/// `FORMAT`, whose presence is what makes the directory a store.
///
/// Several processes may create one store at once (each agent worker
/// opening it with `create`): `FORMAT` is written whole under a temporary
/// name and linked to its name, which only the first of them gets; the
/// others are told `AlreadyExists`, and never rewrite a `FORMAT` another
/// process may since have raised. Until then the directory holds only
/// what this makes ([`INIT_ENTRIES`]): an init under way, or one a crash
/// stopped, which the next init finishes.
pub fn init_layout(path: &Path) -> Result<()> {
    let format = path.join("FORMAT");
    let exists = || Error::AlreadyExists {
        path: path.to_path_buf(),
    };
    if format.exists() {
        return Err(exists());
    }
    fs::create_dir_all(path.join("journal")).at(path)?;
    fs::create_dir_all(path.join("packs")).at(path)?;
    let text = format!("{FORMAT_PREFIX}{STORE_FORMAT_INITIAL}\n");
    // Its own name, for each thread of each process.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.join(format!(".tmp-FORMAT-{}-{n}", std::process::id()));
    let linked = fs::write(&tmp, text.as_bytes())
        .and_then(|()| fs::File::open(&tmp)?.sync_all())
        .and_then(|()| fs::hard_link(&tmp, &format));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => journal::sync_dir(path)?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Err(exists()),
        // A file system without hard links (some refuse them as a
        // permission): renamed over, as before; a directory that takes no
        // file at all fails there, naming it.
        Err(_) => AtomicFile::replace(&format, text.as_bytes(), Durability::Sync)?,
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        journal::sync_dir(parent)?;
    }
    Ok(())
}

/// What a directory holds while [`init_layout`] makes a store of it, before
/// `FORMAT` (and its temporary files, `.tmp-FORMAT-<pid>-<n>`).
pub const INIT_ENTRIES: [&str; 2] = ["journal", "packs"];

/// Whether `path` is free to become a store: it does not exist, or it is a
/// directory without `FORMAT` that holds nothing but what an init makes
/// (empty, or an init under way or stopped by a crash).
pub fn may_init(path: &Path) -> bool {
    if path.join("FORMAT").exists() {
        return false;
    }
    match fs::read_dir(path) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(entries) => entries.flatten().all(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            INIT_ENTRIES.contains(&name.as_ref()) || name.starts_with(".tmp-FORMAT-")
        }),
    }
}

/// Checks that `path` is a store of a format this sessctl reads: its
/// `FORMAT` file says `sessctl store format 1`, `2`, `3` or `4`. Every open goes
/// through it, readers included, and so does every shortcut that reads a
/// store's files without opening it (`ls`'s listing).
pub fn check_format(path: &Path) -> Result<()> {
    format_version(path).map(|_| ())
}

/// Raises the store at `path` to format `to` if its `FORMAT` says less
/// (written whole, fsynced, renamed). Called under the write lock, before
/// the operation that needs it is appended.
pub(crate) fn raise_format(path: &Path, to: u32) -> Result<()> {
    if format_version(path)? >= to {
        return Ok(());
    }
    let text = format!("{FORMAT_PREFIX}{to}\n");
    AtomicFile::replace(&path.join("FORMAT"), text.as_bytes(), Durability::Sync)
}

/// The format `FORMAT` names, if this sessctl reads it.
fn format_version(path: &Path) -> Result<u32> {
    let format = path.join("FORMAT");
    let text = match fs::read(&format) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotAStore {
                path: path.to_path_buf(),
                exists: path.exists(),
            })
        }
        Err(e) => return Err(Error::io(&format, e)),
    };
    let text = String::from_utf8_lossy(&text);
    let version = text
        .strip_suffix('\n')
        .and_then(|t| t.strip_prefix(FORMAT_PREFIX))
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0'))
        .and_then(|v| v.parse::<u32>().ok());
    match version {
        Some(v @ STORE_FORMAT_INITIAL..=STORE_FORMAT_VERSION) => Ok(v),
        Some(v) => Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            found: v.to_string(),
            supported: STORE_FORMAT_VERSION,
        }),
        None => Err(Error::BadFormatFile {
            path: format,
            found: text.chars().take(64).collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report
    use super::*;

    /// Eight threads making one store at once: exactly one makes it, the
    /// others are told it exists, and it reads as a new store.
    #[test]
    fn one_of_many_concurrent_inits_makes_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let go = std::sync::Barrier::new(8);
        let outcomes: Vec<Result<()>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        go.wait();
                        init_layout(&path)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1);
        for o in outcomes.iter().filter(|o| o.is_err()) {
            assert!(matches!(o, Err(Error::AlreadyExists { .. })), "{o:?}");
        }
        assert_eq!(format_version(&path).unwrap(), STORE_FORMAT_INITIAL);
        let mut left: Vec<String> = fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["FORMAT", "journal", "packs"]);
    }

    /// A directory may become a store while it is missing, empty, or holds
    /// only what an init makes before `FORMAT`; never once it holds
    /// anything else, nor a store.
    #[test]
    fn what_may_become_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        assert!(may_init(&path));
        fs::create_dir(&path).unwrap();
        assert!(may_init(&path));
        for d in INIT_ENTRIES {
            fs::create_dir(path.join(d)).unwrap();
        }
        fs::write(path.join(".tmp-FORMAT-1"), "").unwrap();
        assert!(may_init(&path));
        fs::write(path.join("notes.txt"), "mine").unwrap();
        assert!(!may_init(&path));
        fs::remove_file(path.join("notes.txt")).unwrap();
        init_layout(&path).unwrap();
        assert!(!may_init(&path));
        assert!(matches!(
            init_layout(&path),
            Err(Error::AlreadyExists { .. })
        ));
    }
}
