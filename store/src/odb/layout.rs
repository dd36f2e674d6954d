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
pub fn init_layout(path: &Path) -> Result<()> {
    let format = path.join("FORMAT");
    if format.exists() {
        return Err(Error::AlreadyExists {
            path: path.to_path_buf(),
        });
    }
    fs::create_dir_all(path.join("journal")).at(path)?;
    fs::create_dir_all(path.join("packs")).at(path)?;
    let text = format!("{FORMAT_PREFIX}{STORE_FORMAT_INITIAL}\n");
    AtomicFile::replace(&format, text.as_bytes(), Durability::Sync)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        journal::sync_dir(parent)?;
    }
    Ok(())
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
