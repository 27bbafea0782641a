//! The file layer under the log: every file operation the write-ahead log, its recovery and
//! its snapshots perform goes through [`Vfs`], so that tests can record them (and cut them at
//! any point, as a power failure would) or make them fail (`EIO`, `ENOSPC`).
//!
//! Invariants: the real implementation ([`RealFs`]) creates directories `0700` (syncing the
//! parent that gained an entry) and files `0600`; it locks a data directory by `flock` on the
//! directory itself (an open descriptor of the directory, which no unlink can take away) and
//! on `LOCK` inside it (which older binaries lock).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// An open file of the log.
pub(crate) trait VFile: Send + Sync {
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// `fdatasync`.
    fn sync_data(&self) -> io::Result<()>;
}

/// What a held directory lock keeps alive.
pub(crate) type DirLock = Box<dyn std::any::Any + Send + Sync>;

/// The file operations of a data directory.
pub(crate) trait Vfs: Send + Sync {
    /// The permission bits of `path` (`None`: it does not exist).
    fn mode(&self, path: &Path) -> io::Result<Option<u32>>;
    /// Creates `path` (and missing parents) `0700`, syncing the parent directory.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Locks `dir` for this process; `Ok(None)`: another holds it.
    fn lock(&self, dir: &Path) -> io::Result<Option<DirLock>>;
    /// The names in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Reads all of `path` into `buf` (cleared first).
    fn read(&self, path: &Path, buf: &mut Vec<u8>) -> io::Result<()>;
    /// Reads at most the first `max` bytes of `path` into `buf` (cleared first).
    fn read_prefix(&self, path: &Path, max: usize, buf: &mut Vec<u8>) -> io::Result<()>;
    /// Creates (or truncates) `path`, `0600`, for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn VFile>>;
    /// Opens an existing `path` for writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn VFile>>;
    /// Renames `from` to `to` (same directory).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Unlinks `path`.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// `fsync` of the directory `dir` (makes creates, renames and unlinks in it durable).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The operating system's files.
#[derive(Debug, Default)]
pub(crate) struct RealFs;

struct RealFile(File);

impl VFile for RealFile {
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl Vfs for RealFs {
    fn mode(&self, path: &Path) -> io::Result<Option<u32>> {
        match fs::metadata(path) {
            Ok(m) => Ok(Some(m.permissions().mode() & 0o7777)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
    }

    fn lock(&self, dir: &Path) -> io::Result<Option<DirLock>> {
        use rustix::fs::{FlockOperation, flock};
        // The directory itself: unlinking a file inside it cannot undo this lock.
        let d = File::open(dir)?;
        if flock(&d, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(None);
        }
        // LOCK too, which binaries from before the directory lock take.
        let path = dir.join("LOCK");
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)?;
        if flock(&f, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(None);
        }
        Ok(Some(Box::new((d, f))))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in fs::read_dir(dir)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn read(&self, path: &Path, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        File::open(path)?.read_to_end(buf).map(|_| ())
    }

    fn read_prefix(&self, path: &Path, max: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        buf.clear();
        File::open(path)?
            .take(max as u64)
            .read_to_end(buf)
            .map(|_| ())
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn VFile>> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(path)?;
        Ok(Box::new(RealFile(f)))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn VFile>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(RealFile(f)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
