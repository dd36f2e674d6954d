//! Whole-file writes that are all or nothing: every file the store writes in
//! one go (FORMAT, packs and their indexes, op-log archives, the lineage
//! index, the listing, the gc ledger, bundles, resume files) goes through
//! [`AtomicFile`]. It lives with the object database, whose `Durability` it
//! takes.
//!
//! The bytes go to a temporary file in the target's directory, which is
//! fsynced and then renamed over the target, and the directory is fsynced so
//! that the rename itself survives a crash (objects-format.md, "What the
//! store assumes of the disk"). A reader sees the old file or the new one,
//! never a part. The temporary file is deleted when the [`AtomicFile`] is
//! dropped uncommitted, so a failed write leaves nothing behind; only a
//! crash can, and its name starts with `.tmp-`. This module must never
//! rename a file over its target before the file is durable.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::Durability;
use crate::error::{IoResultExt, Result};

/// A file being written under a temporary name, renamed over its target
/// only by [`AtomicFile::commit`]. Writes go straight to the file (it is not
/// buffered); wrap it in a `BufWriter` for many small writes.
#[derive(Debug)]
pub(crate) struct AtomicFile {
    target: PathBuf,
    tmp: PathBuf,
    file: File,
    committed: bool,
}

impl AtomicFile {
    /// Starts a new version of `target`: an empty temporary file
    /// `.tmp-<pid>-<n>-<name>` in the target's directory, unique within this
    /// process and, by its pid, among live processes.
    pub(crate) fn create(target: &Path) -> Result<AtomicFile> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = target.with_file_name(format!(".tmp-{}-{n}-{name}", std::process::id()));
        // A file of this name is left by a dead process whose pid came back.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .at(&tmp)?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            tmp,
            file,
            committed: false,
        })
    }

    /// Writes `bytes` as the whole of `target`, atomically; with
    /// [`Durability::Sync`], durably.
    pub(crate) fn replace(target: &Path, bytes: &[u8], durability: Durability) -> Result<()> {
        let mut file = AtomicFile::create(target)?;
        file.write_all(bytes).at(&file.tmp)?;
        file.commit_with(durability)
    }

    /// The temporary file's path, which I/O errors while writing name.
    pub(crate) fn path(&self) -> &Path {
        &self.tmp
    }

    /// Renames the target within its directory, for a file named after its
    /// content (a pack), whose name is known only once it is written.
    pub(crate) fn set_file_name(&mut self, name: &str) {
        self.target.set_file_name(name);
    }

    /// Makes the file durable, renames it over its target and makes the
    /// rename durable.
    pub(crate) fn commit(self) -> Result<()> {
        AtomicFile::commit_all([self])
    }

    /// As [`AtomicFile::commit`]; with [`Durability::NoSync`] nothing is
    /// fsynced (for derived files that are checksummed and rebuilt when
    /// lost: a crash may leave the old file, or a damaged one).
    pub(crate) fn commit_with(self, durability: Durability) -> Result<()> {
        match durability {
            Durability::Sync => self.commit(),
            Durability::NoSync => {
                let mut files = [self];
                rename_all(&mut files)
            }
        }
    }

    /// Commits files that belong together: every one is durable before the
    /// first is renamed, they are renamed in the order given (the one whose
    /// presence makes the others count goes last), then each directory is
    /// fsynced once. Should a rename fail, the files renamed before it stay.
    pub(crate) fn commit_all<const N: usize>(mut files: [AtomicFile; N]) -> Result<()> {
        for f in &mut files {
            f.file.flush().at(&f.tmp)?;
            f.file.sync_all().at(&f.tmp)?;
        }
        rename_all(&mut files)?;
        let mut synced: Vec<&Path> = Vec::with_capacity(N);
        for f in &files {
            let dir = parent_dir(&f.target);
            if !synced.contains(&dir) {
                sync_dir(dir)?;
                synced.push(dir);
            }
        }
        Ok(())
    }
}

fn rename_all(files: &mut [AtomicFile]) -> Result<()> {
    for f in files {
        fs::rename(&f.tmp, &f.target).at(&f.target)?;
        f.committed = true;
    }
    Ok(())
}

/// The directory a path's rename happens in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Makes the entries of `dir` (creations, renames, deletions) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::error::Error;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_dropped_file_leaves_no_temporary_and_the_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("FORMAT");
        fs::write(&target, b"old").unwrap();
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(b"new, half written").unwrap();
        assert!(f.path().exists());
        drop(f);
        assert_eq!(fs::read(&target).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["FORMAT"]);
    }

    #[test]
    fn commit_replaces_the_target_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("ledger");
        fs::write(&target, b"old").unwrap();
        let mut f = AtomicFile::create(&target).unwrap();
        f.write_all(b"new").unwrap();
        // Until the commit, readers see the old file.
        assert_eq!(fs::read(&target).unwrap(), b"old");
        f.commit().unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert_eq!(names(dir.path()), ["ledger"]);

        AtomicFile::replace(&dir.path().join("listing"), b"l", Durability::NoSync).unwrap();
        assert_eq!(names(dir.path()), ["ledger", "listing"]);
    }

    #[test]
    fn files_committed_together_land_under_their_final_names() {
        let dir = tempfile::tempdir().unwrap();
        let mut pack = AtomicFile::create(&dir.path().join("new.pack")).unwrap();
        let mut index = AtomicFile::create(&dir.path().join("new.idx")).unwrap();
        pack.write_all(b"p").unwrap();
        index.write_all(b"i").unwrap();
        pack.set_file_name("pack-ab.pack");
        index.set_file_name("pack-ab.idx");
        AtomicFile::commit_all([pack, index]).unwrap();
        assert_eq!(names(dir.path()), ["pack-ab.idx", "pack-ab.pack"]);
        assert_eq!(fs::read(dir.path().join("pack-ab.idx")).unwrap(), b"i");
    }

    #[test]
    fn errors_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-dir").join("file");
        match AtomicFile::replace(&missing, b"x", Durability::Sync) {
            Err(Error::Io { path, .. }) => {
                assert!(path.starts_with(dir.path().join("no-such-dir")))
            }
            other => panic!("expected an I/O error, got {other:?}"),
        }
    }
}
