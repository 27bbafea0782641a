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

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use listwatch_api::Object;

use crate::codec::{self, Frame, Record};
use crate::core::Core;

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

impl Log {
    /// Opens (or creates) the data directory and reads everything in it.
    pub(crate) fn open(
        dir: &Path,
        segment_bytes: u64,
        snapshot_min_log_bytes: u64,
        initial_rev: u64,
    ) -> Result<Recovered, OpenError> {
        fs::create_dir_all(dir).map_err(io_err(dir))?;
        let lock_path = dir.join("LOCK");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(OpenError::Locked {
                path: dir.to_owned(),
            });
        }
        let mut segments = Vec::new();
        let mut snapshots = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                // An unfinished segment or snapshot: never part of the store.
                let _ = fs::remove_file(entry.path());
            } else if let Some(i) = name
                .strip_suffix(".wal")
                .and_then(|n| n.parse::<u64>().ok())
            {
                segments.push((i, entry.path()));
            } else if let Some(r) = name
                .strip_prefix("snapshot-")
                .and_then(|n| n.strip_suffix(".snap"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                snapshots.push((r, entry.path()));
            }
        }
        segments.sort();
        snapshots.sort();
        let fresh = segments.is_empty() && snapshots.is_empty();
        let (snap_rev, snapshot, snap_bytes) = match snapshots.last() {
            Some((rev, path)) => {
                let (objects, bytes) = read_snapshot(path, *rev)?;
                (Some(*rev), objects, bytes)
            }
            None => (None, Vec::new(), 0),
        };
        let log = Arc::new(Log {
            dir: dir.to_owned(),
            segment_bytes,
            snapshot_min_log_bytes,
            sealed: Mutex::new(Vec::new()),
            snapshotting: AtomicBool::new(false),
            last_snapshot_bytes: AtomicU64::new(snap_bytes),
            _lock: lock,
        });
        if fresh {
            // An empty directory: a store at `initial_rev`, whose first record says so.
            let tmp = prepare_segment(dir, 0, segment_bytes).map_err(io_err(dir))?;
            let path = dir.join(segment_name(0));
            fs::rename(&tmp, &path).map_err(io_err(&path))?;
            sync_dir(dir).map_err(io_err(dir))?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(io_err(&path))?;
            let mut buf = Vec::new();
            codec::bare(&mut buf, codec::START, initial_rev);
            file.write_all_at(&buf, 0).map_err(io_err(&path))?;
            file.sync_data().map_err(io_err(&path))?;
            let writer = Writer::new(file, path, 0, buf.len() as u64, initial_rev, &log);
            return Ok(Recovered {
                log,
                writer,
                rev: initial_rev,
                compacted: initial_rev,
                snapshot: Vec::new(),
                records: Vec::new(),
                fresh: true,
            });
        }
        let Some((last_index, _)) = segments.last().cloned() else {
            return Err(OpenError::Corrupt {
                path: dir.to_owned(),
                offset: 0,
                message: "a snapshot without any log segment after it".into(),
            });
        };
        // Segment by segment, in one reused buffer (a restart reads the whole log: fresh
        // buffers for all of it cost as much in page faults as the reading): frames first
        // (cheap), then decode them in parallel, then check the revisions follow.
        let mut buf = Vec::new();
        let mut segs: Vec<(PathBuf, u64, usize, u64)> = Vec::with_capacity(segments.len());
        let mut tail = None;
        let mut records = Vec::new();
        let mut rev = snap_rev;
        let mut compacted = snap_rev.unwrap_or(0);
        for (index, path) in &segments {
            buf.clear();
            File::open(path)
                .and_then(|mut f| io::Read::read_to_end(&mut f, &mut buf))
                .map_err(io_err(path))?;
            let data = &buf;
            let last = *index == last_index;
            let mut payloads: Vec<std::ops::Range<usize>> = Vec::new();
            let mut at = 0;
            loop {
                match codec::read_frame(data, at) {
                    Frame::End => break,
                    Frame::Valid { payload, next } => {
                        let start = at + codec::HEADER;
                        payloads.push(start..start + payload.len());
                        at = next;
                    }
                    Frame::Truncated if last => {
                        tail = Some((path.clone(), at, data.len()));
                        break;
                    }
                    Frame::Corrupt { span } if last && codec::is_torn(data, span.clone()) => {
                        tail = Some((path.clone(), at, data.len()));
                        break;
                    }
                    Frame::Truncated | Frame::Corrupt { .. } => {
                        return Err(OpenError::Corrupt {
                            path: path.clone(),
                            offset: at as u64,
                            message: if last {
                                "a record fails its checksum and is not a torn write".into()
                            } else {
                                "a record in a sealed segment fails its checksum".into()
                            },
                        });
                    }
                }
            }
            let mut seg_last_rev = 0;
            let decoded = decode_all(data, &payloads, snap_rev.unwrap_or(0));
            records.reserve(decoded.len());
            for (range, rec) in payloads.iter().zip(decoded) {
                let corrupt = |message: String| OpenError::Corrupt {
                    path: path.clone(),
                    offset: (range.start - codec::HEADER) as u64,
                    message,
                };
                let rec = rec.map_err(corrupt)?;
                match &rec {
                    Record::Start { rev: r } => match rev {
                        None => {
                            rev = Some(*r);
                            compacted = *r;
                        }
                        Some(_) if snap_rev.is_some() => {}
                        Some(cur) => {
                            return Err(corrupt(format!(
                                "a second start record at revision {cur}"
                            )));
                        }
                    },
                    Record::Put { rev: r, .. }
                    | Record::Delete { rev: r, .. }
                    | Record::Covered { rev: r } => {
                        let Some(cur) = rev else {
                            return Err(corrupt(
                                "the log does not begin with its start record or a snapshot: \
                                 segments are missing"
                                    .into(),
                            ));
                        };
                        if *r <= cur && snap_rev.is_some_and(|s| *r <= s) {
                            // Covered by the snapshot.
                            seg_last_rev = *r;
                            continue;
                        }
                        if *r != cur + 1 {
                            return Err(corrupt(format!(
                                "revision {r} follows {cur}: history has a gap"
                            )));
                        }
                        rev = Some(*r);
                        seg_last_rev = *r;
                        records.push(rec);
                    }
                    Record::Compact { rev: r } => {
                        compacted = compacted.max(*r);
                    }
                    Record::End { .. } => {
                        return Err(corrupt("a snapshot frame in the log".into()));
                    }
                }
            }
            segs.push((path.clone(), data.len() as u64, at, seg_last_rev));
        }
        drop(buf);
        let Some(rev) = rev else {
            return Err(OpenError::Corrupt {
                path: dir.to_owned(),
                offset: 0,
                message: "the log has no start record and there is no snapshot".into(),
            });
        };
        if let Some(s) = snap_rev {
            if rev < s {
                return Err(OpenError::Corrupt {
                    path: dir.to_owned(),
                    offset: 0,
                    message: format!("the log ends at {rev}, before the snapshot at {s}"),
                });
            }
        }
        // Drop a torn tail: zero it on disk so appends never sit before stale bytes.
        let Some((last_path, _, last_end, last_rev)) = segs.pop() else {
            return Err(OpenError::Corrupt {
                path: dir.to_owned(),
                offset: 0,
                message: "no segment".into(),
            });
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&last_path)
            .map_err(io_err(&last_path))?;
        if let Some((path, at, len)) = tail {
            tracing::warn!(
                file = %path.display(),
                offset = at,
                dropped_bytes = len - at,
                "embedded store log ends in a torn write (a crash during an unacknowledged \
                 commit): dropping it"
            );
            let zeros = vec![0u8; len - at];
            file.write_all_at(&zeros, at as u64)
                .map_err(io_err(&path))?;
            file.sync_data().map_err(io_err(&path))?;
        }
        let sealed = segs
            .into_iter()
            .map(|(path, bytes, _, last_rev)| Sealed {
                path,
                bytes,
                last_rev,
            })
            .collect();
        if let Ok(mut s) = log.sealed.lock() {
            *s = sealed;
        }
        let writer = Writer::new(file, last_path, last_index, last_end as u64, last_rev, &log);
        Ok(Recovered {
            log,
            writer,
            rev,
            compacted: compacted.min(rev),
            snapshot,
            records,
            fresh: false,
        })
    }

    /// After a compaction at `at`: write a snapshot when enough log is obsolete.
    pub(crate) fn after_compaction(self: &Arc<Self>, core: &Core, at: u64) {
        let obsolete: u64 = match self.sealed.lock() {
            Ok(s) => s.iter().filter(|s| s.last_rev <= at).map(|s| s.bytes).sum(),
            Err(_) => return,
        };
        let due = self
            .last_snapshot_bytes
            .load(Ordering::Relaxed)
            .max(self.snapshot_min_log_bytes);
        if obsolete < due || self.snapshotting.swap(true, Ordering::AcqRel) {
            return;
        }
        // The state at `at`, taken now (Arc clones), written by a thread of its own.
        let mut objects = Vec::new();
        let Ok(parts) = core.partitions() else {
            self.snapshotting.store(false, Ordering::Release);
            return;
        };
        for part in parts {
            let Ok(st) = part.state.read() else {
                self.snapshotting.store(false, Ordering::Release);
                return;
            };
            if st.compacted > at {
                // Compacted further meanwhile: the next compaction will snapshot.
                self.snapshotting.store(false, Ordering::Release);
                return;
            }
            for (k, versions) in &st.keys {
                let i = versions.partition_point(|v| v.mod_rev <= at);
                if let Some(v) = i.checked_sub(1).and_then(|i| versions.get(i)) {
                    if let Some(o) = &v.value {
                        objects.push((Arc::clone(k), o.clone(), v.ttl));
                    }
                }
            }
        }
        let log = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("memstore-snapshot".into())
            .spawn(move || {
                match log.write_snapshot(at, &objects) {
                    Ok(bytes) => {
                        log.last_snapshot_bytes.store(bytes, Ordering::Relaxed);
                        tracing::info!(revision = at, bytes, objects = objects.len(),
                            "embedded store snapshot written");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "embedded store snapshot failed; the log is kept");
                    }
                }
                log.snapshotting.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.snapshotting.store(false, Ordering::Release);
        }
    }

    fn write_snapshot(
        &self,
        rev: u64,
        objects: &[(Arc<str>, Object, Option<Duration>)],
    ) -> io::Result<u64> {
        let name = snapshot_name(rev);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let path = self.dir.join(&name);
        let file = File::create(&tmp)?;
        let mut out = io::BufWriter::with_capacity(1 << 20, file);
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(SNAPSHOT_MAGIC);
        buf.extend_from_slice(&rev.to_le_bytes());
        let mut bytes = 0u64;
        for (k, o, ttl) in objects {
            codec::put(&mut buf, o.resource_version(), k, o, *ttl);
            if buf.len() >= 1 << 16 {
                out.write_all(&buf)?;
                bytes += buf.len() as u64;
                buf.clear();
            }
        }
        codec::end(&mut buf, objects.len() as u64);
        out.write_all(&buf)?;
        bytes += buf.len() as u64;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        fs::rename(&tmp, &path)?;
        sync_dir(&self.dir)?;
        // The snapshot is durable: older snapshots and the segments it covers can go.
        if let Ok(rd) = fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with("snapshot-") && n.ends_with(".snap") && n != name {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        if let Ok(mut sealed) = self.sealed.lock() {
            sealed.retain(|s| {
                if s.last_rev <= rev {
                    let _ = fs::remove_file(&s.path);
                    false
                } else {
                    true
                }
            });
        }
        sync_dir(&self.dir)?;
        Ok(bytes)
    }
}

fn read_snapshot(path: &Path, rev: u64) -> Result<(Vec<SnapshotEntry>, u64), OpenError> {
    let data = fs::read(path).map_err(io_err(path))?;
    let corrupt = |offset: usize, message: String| OpenError::Corrupt {
        path: path.to_owned(),
        offset: offset as u64,
        message,
    };
    if data.len() < 16 || &data[..8] != SNAPSHOT_MAGIC {
        return Err(corrupt(0, "not a snapshot".into()));
    }
    let mut r = [0u8; 8];
    r.copy_from_slice(&data[8..16]);
    if u64::from_le_bytes(r) != rev {
        return Err(corrupt(8, "its revision does not match its name".into()));
    }
    let mut at = 16;
    let mut payloads = Vec::new();
    let end;
    loop {
        match codec::read_frame(&data, at) {
            Frame::Valid { payload, next } => {
                if payload.first() == Some(&codec::END) {
                    end = Some((at, payload));
                    break;
                }
                payloads.push(at + codec::HEADER..next);
                at = next;
            }
            _ => return Err(corrupt(at, "a record is damaged or missing".into())),
        }
    }
    let Some((end_at, end_payload)) = end else {
        return Err(corrupt(at, "no closing record".into()));
    };
    match codec::decode(end_payload, 0, &mut codec::FieldsCache::default()) {
        Ok(Record::End { count }) if count == payloads.len() as u64 => {}
        _ => {
            return Err(corrupt(
                end_at,
                "the closing record's count is wrong".into(),
            ));
        }
    }
    let bytes = data.len() as u64;
    let mut objects = Vec::with_capacity(payloads.len());
    for (range, rec) in payloads.iter().zip(decode_all(&data, &payloads, 0)) {
        match rec {
            Ok(Record::Put {
                key, ttl, object, ..
            }) => objects.push((key, object, ttl)),
            Ok(_) => return Err(corrupt(range.start, "not an object record".into())),
            Err(e) => return Err(corrupt(range.start, e)),
        }
    }
    Ok((objects, bytes))
}

/// Decodes the frames of `data` at `payloads` in parallel (building the objects is most of
/// a restart); a put or delete at or below `covered` is left undecoded.
fn decode_all(
    data: &[u8],
    payloads: &[std::ops::Range<usize>],
    covered: u64,
) -> Vec<Result<Record, String>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let chunk = payloads.len().div_ceil(threads).max(1);
    let decode_chunk = |c: &[std::ops::Range<usize>]| {
        let mut cache = codec::FieldsCache::default();
        c.iter()
            .map(|range| {
                data.get(range.clone())
                    .ok_or_else(|| "record out of bounds".to_owned())
                    .and_then(|p| codec::decode(p, covered, &mut cache))
            })
            .collect::<Vec<_>>()
    };
    if threads == 1 || payloads.len() < 1024 {
        return decode_chunk(payloads);
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = payloads
            .chunks(chunk)
            .map(|c| s.spawn(move || decode_chunk(c)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![Err("decoder thread panicked".to_owned())])
            })
            .collect()
    })
}

impl Writer {
    fn new(file: File, path: PathBuf, index: u64, offset: u64, last_rev: u64, log: &Log) -> Self {
        let mut w = Self {
            file,
            path,
            index,
            offset,
            last_rev,
            next: None,
        };
        w.prepare_next(log);
        w
    }

    fn prepare_next(&mut self, log: &Log) {
        let dir = log.dir.clone();
        let index = self.index + 1;
        let bytes = log.segment_bytes;
        self.next = std::thread::Builder::new()
            .name("memstore-segment".into())
            .spawn(move || prepare_segment(&dir, index, bytes))
            .ok();
    }

    /// Writes one batch and makes it durable.
    fn write(&mut self, buf: &[u8], last_rev: u64, log: &Log) -> io::Result<()> {
        if self.offset > 0 && self.offset + buf.len() as u64 > log.segment_bytes {
            self.roll(log)?;
        }
        self.file.write_all_at(buf, self.offset)?;
        self.file.sync_data()?;
        self.offset += buf.len() as u64;
        self.last_rev = self.last_rev.max(last_rev);
        Ok(())
    }

    fn roll(&mut self, log: &Log) -> io::Result<()> {
        let index = self.index + 1;
        let tmp = match self.next.take().map(JoinHandle::join) {
            Some(Ok(Ok(tmp))) => tmp,
            Some(Ok(Err(e))) => return Err(e),
            _ => prepare_segment(&log.dir, index, log.segment_bytes)?,
        };
        let path = log.dir.join(segment_name(index));
        fs::rename(&tmp, &path)?;
        sync_dir(&log.dir)?;
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        let old = std::mem::replace(&mut self.path, path);
        if let Ok(mut sealed) = log.sealed.lock() {
            sealed.push(Sealed {
                path: old,
                bytes: self.offset,
                last_rev: self.last_rev,
            });
        }
        self.file = file;
        self.index = index;
        self.offset = 0;
        self.prepare_next(log);
        Ok(())
    }
}

/// The longest the log thread waits for writers it just acknowledged (see [`Coalesce`]).
const MAX_COALESCE: Duration = Duration::from_millis(2);

/// The most syncs the log thread starts at once after its waits kept timing out.
const MAX_SKIP: u32 = 64;

/// When the log thread starts its next sync.
///
/// Without a pause, group commit splits a steady set of writers into two cohorts that
/// alternate: those that queued during sync `k` form batch `k + 1`, while those acknowledged
/// by sync `k` (who write again within microseconds) queue during sync `k + 1` and wait for
/// batch `k + 2`. Each sync then carries about half of the writers, and 25 writers get ~12.5
/// writes per sync (measured: docs/benchmarks.md). So after a sync the log thread waits until
/// the writers it just acknowledged have queued again too — at most half the last sync's
/// duration (and [`MAX_COALESCE`]). A lone sequential writer never waits (it is the whole
/// target). Writers that do not come back (independent clients writing once) would make
/// every wait run to its deadline: after a wait that timed out short of three quarters of its
/// target the next syncs start at once, 1, 2, 4 … [`MAX_SKIP`] of them, until a wait reaches
/// it again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Coalesce {
    /// Writes queued before the next sync may start, unless the deadline passes first
    /// (0: start at once).
    pub(crate) target: u64,
    /// How long to wait for them.
    pub(crate) bound: Duration,
    /// Syncs still to start at once.
    skip: u32,
    /// How many to skip after the next wait that times out.
    backoff: u32,
}

impl Coalesce {
    /// After a sync of `acked` writes that took `sync`, with `queued` writes already queued
    /// meanwhile.
    pub(crate) fn after_sync(&mut self, acked: u64, queued: u64, sync: Duration) {
        if self.skip > 0 {
            self.skip -= 1;
            self.target = 0;
        } else {
            self.target = queued.saturating_add(acked);
        }
        self.bound = (sync / 2).min(MAX_COALESCE);
    }

    /// The wait for [`Coalesce::target`] ended with `queued` writes queued. Three quarters
    /// of the target is as good as all of it: on a busy machine a writer or two may be
    /// descheduled past the deadline.
    pub(crate) fn waited(&mut self, queued: u64) {
        if self.target == 0 {
            return;
        }
        if queued.saturating_mul(4) >= self.target.saturating_mul(3) {
            self.backoff = 0;
        } else {
            self.backoff = (self.backoff * 2).clamp(1, MAX_SKIP);
            self.skip = self.backoff;
        }
    }
}

/// The log thread: group commit until the store stops.
pub(crate) fn run(core: Arc<Core>, mut writer: Writer) {
    let Some(log) = core.log.clone() else { return };
    let mut next = Coalesce::default();
    loop {
        let batch = {
            let Ok(mut seq) = core.seq.lock() else { return };
            while seq.pending.buf.is_empty() && !seq.stop {
                seq = match core.pending_cv.wait(seq) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            }
            let deadline = std::time::Instant::now() + next.bound;
            while seq.pending.writes < next.target && !seq.stop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                seq = match core.pending_cv.wait_timeout(seq, left) {
                    Ok((s, _)) => s,
                    Err(_) => return,
                };
            }
            if seq.pending.buf.is_empty() {
                return;
            }
            next.waited(seq.pending.writes);
            std::mem::take(&mut seq.pending)
        };
        let started = std::time::Instant::now();
        if let Err(e) = writer.write(&batch.buf, batch.last_rev, &log) {
            core.fail(format!("{}: {e}", writer.path.display()));
            return;
        }
        let sync = started.elapsed();
        // Counted before anyone is acknowledged: these queued during the sync.
        let queued = core.seq.lock().map_or(0, |s| s.pending.writes);
        core.metrics.log_syncs.inc();
        core.metrics.log_synced_writes.inc_by(batch.writes);
        core.metrics.log_bytes.inc_by(batch.buf.len() as u64);
        if batch.last_rev > 0 {
            core.publish(batch.last_rev);
        }
        for (part, key) in &batch.wakes {
            part.wake(key, batch.last_rev);
        }
        next.after_sync(batch.writes, queued, sync);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two cohorts of a steady writer set are joined into one sync: the target counts the
    /// writers just acknowledged and those that queued meanwhile.
    #[test]
    fn the_next_sync_waits_for_both_cohorts_briefly() {
        let mut c = Coalesce::default();
        c.after_sync(13, 12, Duration::from_millis(4));
        assert_eq!(c.target, 25);
        assert_eq!(c.bound, MAX_COALESCE);
        c.waited(25);
        c.after_sync(13, 12, Duration::from_micros(600));
        assert_eq!((c.target, c.bound), (25, Duration::from_micros(300)));
    }

    /// A lone sequential writer is its whole target: it never waits for anyone.
    #[test]
    fn a_lone_writer_never_waits() {
        let mut c = Coalesce::default();
        c.after_sync(1, 0, Duration::from_millis(4));
        assert_eq!(c.target, 1);
    }

    /// Writers that do not come back: after each wait that timed out, twice as many syncs
    /// start at once (up to MAX_SKIP); one wait that reaches its target restores waiting.
    #[test]
    fn waits_that_time_out_back_off() {
        let mut c = Coalesce::default();
        let mut waits = Vec::new();
        for _ in 0..200 {
            c.after_sync(5, 0, Duration::from_millis(4));
            waits.push(c.target > 0);
            c.waited(1);
        }
        // Waits at syncs 0, 2, 5, 10, 19, 36, 69, 134 (skipping 1, 2, 4, ... 64 between).
        let at: Vec<usize> = (0..200).filter(|i| waits[*i]).collect();
        assert_eq!(at, [0, 2, 5, 10, 19, 36, 69, 134, 199]);
        // Once a wait succeeds, the next sync waits again.
        c.skip = 0;
        c.after_sync(5, 0, Duration::from_millis(4));
        c.waited(5);
        c.after_sync(5, 0, Duration::from_millis(4));
        assert_eq!(c.target, 5);
    }

    /// Three quarters of the target counts as reached; less backs off.
    #[test]
    fn nearly_all_of_the_target_is_enough() {
        let mut c = Coalesce::default();
        c.after_sync(13, 12, Duration::from_millis(4));
        c.waited(19);
        c.after_sync(13, 12, Duration::from_millis(4));
        assert_eq!(c.target, 25, "19 of 25 is not a timeout");
        c.waited(18);
        c.after_sync(13, 12, Duration::from_millis(4));
        assert_eq!(c.target, 0, "18 of 25 backs off");
    }
}
