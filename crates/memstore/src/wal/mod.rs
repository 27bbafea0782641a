//! The durable store's files: a write-ahead log with group commit, and snapshots.
//!
//! Layout of the data directory:
//! - `LOCK`: held (`flock`) by the process that owns the directory;
//! - `NNNNNNNNNNNNNNNN.wal`: log segments in order, each preallocated with zeros so that an
//!   `fdatasync` writes data, not metadata; records are [`crate::codec`] frames;
//! - `snapshot-RRRRRRRRRRRRRRRRRRRR.snap`: the state at revision R (every live key), after
//!   which the log continues. Written to a temporary name, synced, renamed, directory synced.
//!
//! One thread (the log thread) takes whatever records writers have queued, writes them with
//! one `write` and one `fdatasync` (group commit), then makes them visible and wakes their
//! waiters: a write is acknowledged only once it is on disk. Before the next sync it waits,
//! briefly, for the writers it just acknowledged to queue again, so that a steady set of
//! writers shares each sync instead of alternating in two half-full batches (see
//! `Coalesce`). A segment is rolled when full;
//! the next one is zero-filled in the background beforehand.
//!
//! Recovery (what a restart after `kill -9` or a power cut finds) follows etcd's WAL:
//! - a zero header ends a segment's data;
//! - in the last segment, a record cut short by the end of the file, or failing its checksum
//!   while containing a whole zeroed 512-byte sector or ending in a zero byte (see
//!   `codec::is_torn`), is a torn write of a batch whose `fdatasync` never returned (so never
//!   acknowledged: a batch is written only after the previous one is synced): it and
//!   everything after it are dropped (zeroed on disk), with a warning;
//! - any other bad record (a checksum mismatch in an earlier record or segment, a gap in the
//!   revisions, a missing start) refuses to start with an error naming the file and offset,
//!   rather than silently dropping history.
//!
//! Snapshots bound the replay: once compaction has made more sealed log bytes obsolete than
//! the last snapshot's size (at least [`crate::MemStoreConfig::snapshot_min_log_bytes`]), the
//! state at the compaction revision is written and the segments it covers are deleted. The
//! history a restart rebuilds is therefore exactly the retained one.
//!
//! Layout: this module holds the directory's types ([`Log`], the segment [`Writer`], what
//! recovery returns) and the segment helpers; `recover` opens a directory and replays it,
//! `commit` is the log thread (group commit, segment rolling), `snapshot` writes and reads
//! snapshots.

mod commit;
mod recover;
mod snapshot;

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use listwatch_api::Object;

use crate::codec::Record;

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
         empty)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where.
        offset: u64,
        /// What is wrong.
        message: String,
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
#[derive(Debug)]
pub(crate) struct Log {
    dir: PathBuf,
    segment_bytes: u64,
    snapshot_min_log_bytes: u64,
    sealed: Mutex<Vec<Sealed>>,
    snapshotting: AtomicBool,
    last_snapshot_bytes: AtomicU64,
    /// Keeps the directory locked while the store lives.
    _lock: File,
}

/// The segment the log thread appends to.
pub(crate) struct Writer {
    file: File,
    path: PathBuf,
    index: u64,
    offset: u64,
    /// The newest revision written to this segment.
    last_rev: u64,
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

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates a zero-filled segment under a temporary name, synced.
fn prepare_segment(dir: &Path, index: u64, bytes: u64) -> io::Result<PathBuf> {
    let tmp = dir.join(format!("{}.tmp", segment_name(index)));
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&tmp)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        f.write_all(&zeros[..n])?;
        left -= n as u64;
    }
    f.sync_all()?;
    Ok(tmp)
}
