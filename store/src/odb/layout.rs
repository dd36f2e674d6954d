//! The store's layout on disk: the `FORMAT` file that makes a directory a
//! store (objects-format.md, "Versioning"), and the directories a new store
//! starts with.

use std::fs;
use std::path::Path;

use super::{journal, Durability};
use crate::error::{Error, IoResultExt, Result};
use crate::odb::atomic_file::AtomicFile;

/// Version of the store layout, written to `FORMAT` (objects-format.md, "Versioning").
pub const STORE_FORMAT_VERSION: u32 = 1;
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
    let text = format!("{FORMAT_PREFIX}{STORE_FORMAT_VERSION}\n");
    AtomicFile::replace(&format, text.as_bytes(), Durability::Sync)?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        journal::sync_dir(parent)?;
    }
    Ok(())
}

/// Checks that `path` is a store of the format this sessctl reads: its
/// `FORMAT` file says `sessctl store format 1`. Every open goes through it,
/// readers included, and so does every shortcut that reads a store's files
/// without opening it (`ls`'s listing).
pub fn check_format(path: &Path) -> Result<()> {
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
        Some(STORE_FORMAT_VERSION) => Ok(()),
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
