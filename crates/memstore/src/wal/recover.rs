//! Opening a data directory: locking it, reading the newest snapshot and every log segment,
//! and checking that the history they hold is whole.
//!
//! Invariants: a torn write at the end of the last segment (a batch whose `fdatasync` never
//! returned, so never acknowledged) is dropped and zeroed on disk, with a warning; any other
//! damage (a bad checksum elsewhere, a gap in the revisions, a missing start) refuses to
//! start, naming the file and offset. Records are framed first, then decoded in parallel.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use super::snapshot::read_snapshot;
use super::{
    Log, OpenError, Recovered, Sealed, Writer, io_err, prepare_segment, segment_name, sync_dir,
};
use crate::codec::{self, Frame, Record};

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
}

/// Decodes the frames of `data` at `payloads` in parallel (building the objects is most of
/// a restart); a put or delete at or below `covered` is left undecoded.
pub(super) fn decode_all(
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
