//! The durable store's files: a write-ahead log with group commit, and snapshots.
//!
//! Layout of the data directory (mode `0700`, files `0600`; a directory that group or others
//! may read or write is refused):
//! - the directory itself is locked (`flock` on it; `LOCK` is locked too, for older binaries);
//! - `NNNNNNNNNNNNNNNN.wal`: log segments in order, each preallocated with zeros (so that an
//!   `fdatasync` writes data, not metadata) under a `.tmp` name, synced, then renamed; they
//!   hold [`batch`]es of [`crate::codec`] frames;
//! - `snapshot-RRRRRRRRRRRRRRRRRRRR.snap`: the state at revision R (every live key), after
//!   which the log continues. Written to a temporary name, synced, renamed, directory synced;
//! - `FAILED-<segment>-<offset>`: left (synced) when a write or `fdatasync` of the log
//!   failed, naming where the batch that was never acknowledged begins; the next start drops
//!   the log from there (the page cache may still hold it; the disk may not) and removes
//!   the marker — only when it names a batch boundary the log reached with at most that
//!   batch after it (otherwise the start is refused, naming the marker);
//! - `REACHED`: where the log reached at the last start or roll (module `reached`); a start
//!   whose log ends before it refuses (the log's tail was lost);
//! - `torn-<segment>-<offset>.bin`: the bytes of a torn last batch a start dropped, kept for
//!   inspection (never read by the store).
//!
//! One thread (the log thread) takes whatever records writers have queued, writes them as one
//! batch with one `write` and one `fdatasync` (group commit), then makes them visible and
//! wakes their waiters: a write is acknowledged only once it is on disk, and a batch is
//! written only after the previous one is synced. Before the next sync it waits, briefly, for
//! the writers it just acknowledged to queue again, so that a steady set of writers shares
//! each sync instead of alternating in two half-full batches (see `Coalesce`). A segment is
//! rolled when full; the next one is zero-filled in the background beforehand.
//!
//! Recovery (what a restart after `kill -9` or a power cut finds): batches are read while
//! their header and body checksums hold and each continues the chain. At the first that does
//! not, at offset X:
//! - in the last segment, when X can be the batch in flight at the crash — its header is
//!   intact and nothing but zeros follows its end, or its header is not (never written, or
//!   torn) and no intact batch header follows anywhere in the segment — it is a torn write of
//!   a batch whose `fdatasync` never returned (never acknowledged). It is copied aside, zeroed
//!   on disk and synced before anything is appended (etcd's `ZeroToEnd`), with a warning;
//! - anything else (damage in a sealed segment, a batch that does not continue the chain, an
//!   intact batch after the damage, a record that does not decode, a gap in the revisions, a
//!   missing start, a segment shorter than the segment size, a log ending before the place
//!   `REACHED` records) refuses to start with an error naming the file and offset,
//!   changing nothing on disk.
//!
//! Every start then appends an `OPEN` batch (its revision and a random epoch) and syncs it —
//! which also makes durable whatever the start replayed from the page cache — before serving.
//!
//! Snapshots bound the replay: once compaction has made more sealed log bytes obsolete than
//! the last snapshot's size (at least [`crate::MemStoreConfig::snapshot_min_log_bytes`]), the
//! state at the compaction revision is written and the segments it covers are deleted. The
//! history a restart rebuilds is therefore exactly the retained one.
//!
//! Layout: this module holds the directory's types ([`Log`], the segment [`Writer`], what
//! recovery returns) and the segment helpers; `vfs` is the file layer every operation goes
//! through, `batch` the batch format, `reached` the `REACHED` record, `recover` opens a
//! directory and replays it, `commit` is the log thread (group commit, segment rolling),
//! `snapshot` writes and reads snapshots.

pub(crate) mod batch;
mod commit;
mod reached;
mod recover;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod simfs;
mod snapshot;
pub(crate) mod vfs;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use listwatch_api::Object;

use crate::codec::Record;
use vfs::{DirLock, VFile, Vfs};

pub(crate) use commit::run;

/// Why a data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Another process holds the directory.
    #[error("{path} is in use by another process")]
    Locked {
        /// The directory.
        path: PathBuf,
    },
    /// The log or a snapshot is damaged in a way a crash cannot cause.
    #[error(
        "{path}: damaged at byte {offset}: {message}; refusing to start rather than drop \
         acknowledged history (restore the directory from a backup, or move it away to start \
         empty; docs/storage.md describes what to keep)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What is wrong.
        message: String,
    },
    /// The data directory is open to other users.
    #[error(
        "{path}: the data directory's permissions are {mode:04o}; group and others must have \
         no access to it (it holds every object, Secrets included): run `chmod 700 {path}`"
    )]
    Permissions {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A log written in a format this binary does not read.
    #[error(
        "{path}: written by an older listwatch (log format 1); this binary reads log format 2 \
         only: start the older binary on it, or move the directory away to start empty \
         (docs/storage.md)"
    )]
    OldFormat {
        /// The segment.
        path: PathBuf,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> OpenError + '_ {
    move |source| OpenError::Io {
        path: path.to_owned(),
        source,
    }
}

fn segment_name(index: u64) -> String {
    format!("{index:016}.wal")
}

fn snapshot_name(rev: u64) -> String {
    format!("snapshot-{rev:020}.snap")
}

/// The marker a failed `fdatasync` leaves: `FAILED-<segment>-<offset>`.
const FAILED: &str = "FAILED";

const SNAPSHOT_MAGIC: &[u8; 8] = b"LWSNAP1\n";

/// A segment no longer written to.
#[derive(Debug, Clone)]
struct Sealed {
    path: PathBuf,
    bytes: u64,
    /// The newest revision it holds (0: none).
    last_rev: u64,
}

/// The files of a durable store (shared by the store, the log thread and snapshots).
pub(crate) struct Log {
    dir: PathBuf,
    fs: Arc<dyn Vfs>,
    segment_bytes: u64,
    snapshot_min_log_bytes: u64,
    sealed: Mutex<Vec<Sealed>>,
    snapshotting: AtomicBool,
    /// The thread writing the latest snapshot, joined when the store is dropped
    /// ([`Log::join_snapshot`]): it unlinks the segments its snapshot covers, which must not
    /// happen after the store is gone (a store opened again on the directory would be
    /// reading them).
    snapshot_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    last_snapshot_bytes: AtomicU64,
    /// Keeps the directory locked while the store lives.
    _lock: DirLock,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log").field("dir", &self.dir).finish()
    }
}

impl Log {
    /// Leaves the [`FAILED`] marker: the batch at `offset` of segment `index` (and anything
    /// after it) was never acknowledged and must never be served. Best effort: the disk is
    /// failing.
    pub(crate) fn mark_failed(&self, index: u64, offset: u64, why: &str) {
        // The place is in the name: creating it needs no data block (the disk may refuse
        // those); the cause inside is a courtesy.
        let path = self.dir.join(format!("{FAILED}-{index}-{offset}"));
        let res = self.fs.create(&path).and_then(|f| {
            let _ = f.write_at(format!("{why}\n").as_bytes(), 0);
            self.fs.sync_dir(&self.dir)
        });
        if let Err(e) = res {
            tracing::error!(file = %path.display(), error = %e,
                "embedded store: could not leave the failed-sync marker");
        }
    }
}

/// The segment the log thread appends to.
pub(crate) struct Writer {
    file: Box<dyn VFile>,
    path: PathBuf,
    index: u64,
    offset: u64,
    /// The newest revision written to this segment.
    last_rev: u64,
    /// The `hcrc` of the last batch written (the next one's `prev`).
    chain: u32,
    /// The batch being written (reused).
    out: Vec<u8>,
    /// The next segment, being zero-filled.
    next: Option<JoinHandle<io::Result<PathBuf>>>,
}

/// A key of a snapshot: its path, its object, its TTL.
pub(crate) type SnapshotEntry = (String, Object, Option<Duration>);

/// What recovery found.
pub(crate) struct Recovered {
    pub(crate) log: Arc<Log>,
    pub(crate) writer: Writer,
    /// The revision the store resumes at (no write yet: the initial revision).
    pub(crate) rev: u64,
    pub(crate) compacted: u64,
    pub(crate) snapshot: Vec<SnapshotEntry>,
    pub(crate) records: Vec<Record>,
    /// Whether the directory held no store.
    pub(crate) fresh: bool,
}

/// Creates a zero-filled segment under a temporary name, with `first` (a batch) at its start,
/// synced.
fn prepare_segment(
    fs: &dyn Vfs,
    dir: &Path,
    index: u64,
    bytes: u64,
    first: &[u8],
) -> io::Result<PathBuf> {
    let tmp = dir.join(tmp_name(&segment_name(index)));
    let fill = || {
        let f = fs.create(&tmp)?;
        let zeros = vec![0u8; (1usize << 20).min(usize::try_from(bytes).unwrap_or(usize::MAX))];
        let mut at = 0;
        while at < bytes {
            let n = (bytes - at).min(zeros.len() as u64) as usize;
            f.write_at(&zeros[..n], at)?;
            at += n as u64;
        }
        if !first.is_empty() {
            f.write_at(first, 0)?;
        }
        f.sync_data()
    };
    match fill() {
        Ok(()) => Ok(tmp),
        // Named (the log thread reports it as the failing file), and not left behind to
        // take the space a full disk lacks until the next start.
        Err(e) => {
            let _ = fs.remove(&tmp);
            Err(io::Error::new(e.kind(), format!("{}: {e}", tmp.display())))
        }
    }
}

/// A temporary name for `name`, never used before: a crash can persist a rename while losing
/// the create of its source, which must then not rename an older file of the same name.
fn tmp_name(name: &str) -> String {
    format!("{name}.{:016x}.tmp", epoch())
}

/// A random epoch for a start's `OPEN` record.
fn epoch() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::simfs::{Fault, Kind, SimFs};
    use super::*;

    /// A segment whose zero-fill fails (ENOSPC during a roll) is named in the error (the
    /// error used to name the old segment) and its `.tmp` file is removed, not left taking
    /// the space the disk lacks until the next start.
    #[test]
    fn a_failed_segment_fill_names_it_and_leaves_no_tmp() {
        let fs = SimFs::default();
        let dir = Path::new("/data");
        fs.create_dir(dir).unwrap_or_else(|e| panic!("{e}"));
        fs.fail(Fault {
            kind: Kind::Write,
            nth: 2,
            errno: 28,
            sticky: true,
        });
        let e = prepare_segment(&fs, dir, 7, 3 << 20, &[])
            .err()
            .unwrap_or_else(|| panic!("the fill succeeded"));
        assert!(
            e.to_string().contains("/data/0000000000000007.wal.") && e.raw_os_error().is_none(),
            "{e}"
        );
        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
        let left = fs.list(dir).unwrap_or_else(|e| panic!("{e}"));
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}
