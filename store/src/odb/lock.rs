//! Short kernel locks (objects-format.md, "Concurrency").
//!
//! No handle holds a lock for its lifetime. A write takes an exclusive
//! `flock` on a lock file for the few syscalls it needs (catch up, compare,
//! append) and releases it; the kernel drops it when the process dies,
//! SIGKILL included, so a crash never leaves a store locked.
//!
//! `flock` locks belong to an open file description: two threads of one
//! process sharing the descriptor would both "hold" it. A [`LockFile`]
//! therefore pairs the descriptor with a mutex, taken first, so that it
//! excludes threads and processes alike.
//!
//! The holder writes its pid into the file only so that a waiter that gives
//! up can say who holds it; the pid is never used to decide anything.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, IoResultExt, Result};

/// A lock file kept open by one handle, locked and unlocked per use.
#[derive(Debug)]
pub struct LockFile {
    file: File,
    path: PathBuf,
    /// Whom a timeout names: the store directory.
    owner: PathBuf,
    threads: Mutex<()>,
}

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub struct LockGuard<'a> {
    lock: &'a LockFile,
    _threads: MutexGuard<'a, ()>,
}

impl LockFile {
    /// Opens (creating) the lock file at `path`; `owner` is what a timeout
    /// error names.
    pub fn open(path: &Path, owner: &Path) -> Result<LockFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .at(path)?;
        Ok(LockFile {
            file,
            path: path.to_path_buf(),
            owner: owner.to_path_buf(),
            threads: Mutex::new(()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock, waiting up to `wait` (`None`: do not wait) for
    /// another holder to let go; a timeout is [`Error::Locked`], naming the
    /// holder's pid when it recorded one.
    pub fn lock(&self, wait: Option<Duration>) -> Result<LockGuard<'_>> {
        // A wait too long to add to the clock is a wait with no end.
        let deadline = wait.map(|w| Instant::now().checked_add(w));
        // Threads of this process queue on the mutex; only the wait for
        // other processes is bounded (the mutex is held for a write's few
        // syscalls, never across a wait for the disk).
        let threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        // Short holds are the rule: poll finely first, then back off.
        let mut pause = Duration::from_micros(50);
        loop {
            match self.file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let now = Instant::now();
                    let sleep = match deadline {
                        Some(None) => pause,
                        Some(Some(d)) if now < d => pause.min(d - now),
                        _ => {
                            return Err(Error::Locked {
                                path: self.owner.clone(),
                                pid: self.holder(),
                            })
                        }
                    };
                    std::thread::sleep(sleep);
                    pause = (pause * 2).min(Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&self.path, e)),
            }
        }
        // For messages only: a failure to record it must not fail the lock.
        let _ = self
            .file
            .write_all_at(format!("{:<11}\n", std::process::id()).as_bytes(), 0);
        debug_assert_eq!(PID_LEN, 12);
        Ok(LockGuard {
            lock: self,
            _threads: threads,
        })
    }

    /// Takes the lock if no one holds it.
    pub fn try_lock(&self) -> Result<Option<LockGuard<'_>>> {
        let threads = match self.threads.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        };
        match self.file.try_lock() {
            Ok(()) => Ok(Some(LockGuard {
                lock: self,
                _threads: threads,
            })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io(&self.path, e)),
        }
    }

    /// The pid the current (or last) holder recorded.
    fn holder(&self) -> Option<u32> {
        let mut buf = [0u8; PID_LEN];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
    }
}

/// Bytes of the holder's pid, as text, at the start of a lock file.
const PID_LEN: usize = 12;
/// Where a lock file keeps its counter (see [`LockGuard::counter`]).
const COUNTER_AT: u64 = 16;

impl LockGuard<'_> {
    /// A counter kept in the lock file, read and bumped only by holders of
    /// the lock: the write lock's counts the times packs were replaced, so
    /// that a writer re-reads the pack directory only then. 0 when never
    /// bumped; it is not synced (after a crash every process starts over).
    pub fn counter(&self) -> u64 {
        let mut buf = [0u8; 8];
        match self.lock.file.read_at(&mut buf, COUNTER_AT) {
            Ok(8) => u64::from_le_bytes(buf),
            _ => 0,
        }
    }

    /// Adds one to [`LockGuard::counter`]; returns the new value.
    pub fn bump_counter(&self) -> Result<u64> {
        let next = self.counter().wrapping_add(1);
        self.lock
            .file
            .write_all_at(&next.to_le_bytes(), COUNTER_AT)
            .at(&self.lock.path)?;
        Ok(next)
    }
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        let _ = self.lock.file.unlock();
    }
}

/// Whether some process holds an `flock` on the file at `path`: false when
/// the file is missing or could be locked (its holder is gone).
pub fn is_held(path: &Path) -> Result<bool> {
    let file = match OpenOptions::new().read(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(path, e)),
    };
    match file.try_lock() {
        Ok(()) => {
            let _ = file.unlock();
            Ok(false)
        }
        Err(std::fs::TryLockError::WouldBlock) => Ok(true),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_handle_waits_then_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let a = LockFile::open(&path, dir.path()).unwrap();
        let b = LockFile::open(&path, dir.path()).unwrap();
        let held = a.lock(None).unwrap();
        assert!(is_held(&path).unwrap());
        let err = b.lock(None).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("in use by pid {}", std::process::id())),
            "{msg}"
        );
        let err = b.lock(Some(Duration::from_millis(50))).unwrap_err();
        assert!(matches!(err, Error::Locked { .. }));
        assert!(b.try_lock().unwrap().is_none());
        let t = std::thread::spawn(move || b.lock(Some(Duration::from_secs(10))).map(|_| ()));
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
        t.join().unwrap().unwrap();
        assert!(!is_held(&path).unwrap());
    }

    #[test]
    fn threads_of_one_handle_exclude_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let lock =
            std::sync::Arc::new(LockFile::open(&dir.path().join("LOCK"), dir.path()).unwrap());
        let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (lock, inside) = (lock.clone(), inside.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let _g = lock.lock(Some(Duration::from_secs(10))).unwrap();
                        assert_eq!(inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0);
                        std::thread::yield_now();
                        inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
