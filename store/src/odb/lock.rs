//! The store lock: one writer process per store.
//!
//! An OS advisory lock (`flock`) on `LOCK`, held for the life of the
//! [`StoreLock`]. The kernel drops it when the process dies, SIGKILL
//! included, so a crash never leaves the store locked. The holder writes its
//! pid into the file only so that a second opener can say who holds it; the
//! pid is never used to decide anything.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, IoResultExt, Result};

/// A held store lock; dropping it releases the lock.
#[derive(Debug)]
pub struct StoreLock {
    file: File,
    path: PathBuf,
}

impl StoreLock {
    /// Takes the lock at `path`, waiting up to `wait` for another holder to
    /// let go (`None`: do not wait).
    pub fn acquire(path: &Path, wait: Option<Duration>) -> Result<StoreLock> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .at(path)?;
        // A wait too long to add to the clock is a wait with no end.
        let deadline = wait.map(|w| Instant::now().checked_add(w));
        let mut pause = Duration::from_millis(5);
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    let now = Instant::now();
                    match deadline {
                        Some(None) => {
                            std::thread::sleep(pause);
                            pause = (pause * 2).min(Duration::from_millis(100));
                        }
                        Some(Some(d)) if now < d => {
                            std::thread::sleep(pause.min(d - now));
                            pause = (pause * 2).min(Duration::from_millis(100));
                        }
                        _ => {
                            return Err(Error::Locked {
                                path: path.parent().unwrap_or(path).to_path_buf(),
                                pid: read_pid(&mut file),
                            })
                        }
                    }
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(path, e)),
            }
        }
        // Best effort: the pid is for messages only, so a failure to record
        // it must not fail the open.
        let _ = file
            .set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{}", std::process::id()));
        Ok(StoreLock {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

fn read_pid(file: &mut File) -> Option<u32> {
    let mut s = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut s).ok()?;
    s.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_told_the_pid_and_can_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("LOCK");
        let first = StoreLock::acquire(&path, None).unwrap();
        let err = StoreLock::acquire(&path, None).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("in use by pid {}", std::process::id())),
            "{msg}"
        );
        let err = StoreLock::acquire(&path, Some(Duration::from_millis(50))).unwrap_err();
        assert!(matches!(err, Error::Locked { .. }));
        let t = std::thread::spawn({
            let path = path.clone();
            move || StoreLock::acquire(&path, Some(Duration::from_secs(10))).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(first);
        t.join().unwrap().unwrap();
    }
}
