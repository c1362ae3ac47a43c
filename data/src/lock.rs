//! An exclusive advisory lock on a folder, so that two processes never write into one run or
//! dataset at once. The lock is the operating system's on `DIR/.swax.lock` (`File::try_lock`):
//! it goes with the process, so one killed mid-run never blocks the next, and the file left
//! behind is harmless. The holder writes its process id into the file for the other's message.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{DataError, Result};

/// The lock file's name inside the locked folder.
pub const LOCK_FILE: &str = ".swax.lock";

/// Held until dropped (or the process ends).
#[derive(Debug)]
pub struct FolderLock {
    // Closing the file releases the lock.
    _file: File,
}

impl FolderLock {
    /// Locks `dir` (which must exist), or fails at once naming the process that holds it.
    pub fn acquire(dir: &Path) -> Result<FolderLock> {
        let (path, mut file) = open(dir)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                // The holder's id is only for the message: an unreadable one is left out.
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => String::new(),
                    pid => format!(" (process {pid})"),
                };
                return Err(DataError::Busy {
                    dir: dir.to_owned(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(DataError::io(&path)(e)),
        }
        held(path, file)
    }

    /// Locks `dir` (which must exist), waiting while another process holds it: for writes that
    /// take moments and merge with what the holder wrote (evaluation results).
    pub fn wait(dir: &Path) -> Result<FolderLock> {
        let (path, file) = open(dir)?;
        file.lock().map_err(DataError::io(&path))?;
        held(path, file)
    }
}

/// The lock file of `dir`, opened for reading and writing (created if need be).
fn open(dir: &Path) -> Result<(PathBuf, File)> {
    let path = dir.join(LOCK_FILE);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(DataError::io(&path))?;
    Ok((path, file))
}

/// The lock on `file`, now held, with this process's id written in it.
fn held(path: PathBuf, mut file: File) -> Result<FolderLock> {
    file.set_len(0).map_err(DataError::io(&path))?;
    file.seek(SeekFrom::Start(0))
        .map_err(DataError::io(&path))?;
    writeln!(file, "{}", std::process::id()).map_err(DataError::io(&path))?;
    Ok(FolderLock { _file: file })
}
