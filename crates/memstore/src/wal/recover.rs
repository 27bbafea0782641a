//! Opening a data directory: checking its permissions, locking it, reading the newest
//! snapshot and every log segment, checking that the history they hold is whole, and making
//! what was read durable before anything is served.
//!
//! Invariants: a torn last batch (in flight at a crash, never acknowledged: see the `wal`
//! module docs for exactly when damage counts as one) is copied aside, zeroed on disk and
//! synced before anything is appended; so is the tail a failed-sync marker names (only a
//! batch boundary the log reached, followed by at most the failed batch). Any other damage
//! refuses to start, naming the file and offset, and changes nothing on disk; so does a log
//! ending before the place `REACHED` records, and a segment before a snapshot gap holding
//! revisions above the snapshot. Every start appends an `OPEN` batch and syncs it, then
//! records where it reached, before returning. Records are framed first, then decoded in
//! parallel.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

mod marker;

use marker::{check_marker, honoured, parse_marker, remove_markers};

use super::reached::{self, Reached};
use super::snapshot::read_snapshot;
use super::vfs::Vfs;
use super::{
    FAILED, Log, OpenError, Recovered, Sealed, Writer, batch, epoch, io_err, prepare_segment,
    segment_name,
};
use crate::codec::{self, Frame, Record};

/// What is at an offset of a segment.
enum Step {
    /// An intact batch continuing the chain: its `hcrc`, its body, where the next begins.
    Batch {
        hcrc: u32,
        body: std::ops::Range<usize>,
        next: usize,
    },
    /// Only zeros from here on.
    End,
    /// Not an intact batch; what a torn write there would have to end before.
    Damage { message: String, window: Window },
}

/// How far a torn batch at the damage could reach.
enum Window {
    /// Its header is not readable: anywhere, as long as no intact header follows.
    Unknown,
    /// Its header is intact: nothing but zeros may follow this offset.
    Until(usize),
    /// Not a torn write whatever follows.
    NotTorn,
}

/// A replay logs its progress after this many bytes read...
const REPLAY_REPORT_BYTES: u64 = 256 << 20;
/// ...or this long since the last report, whichever comes first.
const REPLAY_REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

fn step(data: &[u8], at: usize, index: u64, chain: Option<u32>) -> Step {
    let zero_header = data
        .get(at..at + batch::HEADER)
        .is_none_or(|h| h.iter().all(|b| *b == 0));
    if zero_header {
        return if data.get(at..).is_none_or(|r| r.iter().all(|b| *b == 0)) {
            Step::End
        } else {
            Step::Damage {
                message: "non-zero bytes where no batch header is".into(),
                window: Window::Unknown,
            }
        };
    }
    let Some(h) = batch::header(data, at, index) else {
        return Step::Damage {
            message: "a batch header is damaged".into(),
            window: Window::Unknown,
        };
    };
    if chain.is_some_and(|c| c != h.prev) {
        return Step::Damage {
            message: "the batch does not continue the log (the checksum it chains to is not \
                      the previous batch's): a stale or misplaced batch"
                .into(),
            window: Window::NotTorn,
        };
    }
    let (Some(end), Some(body_end)) = (
        batch::end(at, &h),
        usize::try_from(h.body_len)
            .ok()
            .and_then(|n| n.checked_add(at + batch::HEADER)),
    ) else {
        return Step::Damage {
            message: "the batch's length is impossible".into(),
            window: Window::NotTorn,
        };
    };
    if body_end > data.len() {
        return Step::Damage {
            message: "the batch runs past the end of the file".into(),
            window: Window::Until(data.len()),
        };
    }
    if batch::body(data, at, &h).is_none() {
        return Step::Damage {
            message: "the batch's checksum fails".into(),
            window: Window::Until(end),
        };
    }
    let start = at + batch::HEADER;
    Step::Batch {
        hcrc: h.hcrc,
        body: start..start + (h.body_len as usize),
        next: end,
    }
}

/// The frames of an intact batch's body, as payload ranges of `data`.
fn frames(data: &[u8], body: std::ops::Range<usize>) -> Result<Vec<std::ops::Range<usize>>, usize> {
    let Some(bytes) = data.get(body.clone()) else {
        return Err(body.start);
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match codec::read_frame(bytes, at) {
            Frame::Valid { payload, next } => {
                let start = body.start + at + codec::HEADER;
                out.push(start..start + payload.len());
                at = next;
            }
            _ => return Err(body.start + at),
        }
    }
    Ok(out)
}

/// Whether `data` starts like a segment of log format 1 (a bare frame, no batch header).
fn format_one(data: &[u8]) -> bool {
    data.get(..4).is_some_and(|m| m != batch::MAGIC)
        && matches!(codec::read_frame(data, 0), Frame::Valid { .. })
}

/// The newest revision segment `index` at `path` holds (a segment before a gap, about to be
/// dropped as covered by the snapshot at `snap`): refuses when that cannot be told.
fn covered_top(fs: &dyn Vfs, path: &Path, index: u64, snap: u64) -> Result<u64, OpenError> {
    let mut buf = Vec::new();
    fs.read(path, &mut buf).map_err(io_err(path))?;
    let mut payloads = Vec::new();
    let mut chain = None;
    let mut at = 0;
    loop {
        match step(&buf, at, index, chain) {
            Step::End => break,
            Step::Batch { hcrc, body, next } => {
                let found = frames(&buf, body).map_err(|off| OpenError::Corrupt {
                    path: path.to_owned(),
                    offset: off as u64,
                    message: "a record of an intact batch does not parse".into(),
                })?;
                payloads.extend(found);
                chain = Some(hcrc);
                at = next;
            }
            Step::Damage { message, .. } => {
                return Err(OpenError::Corrupt {
                    path: path.to_owned(),
                    offset: at as u64,
                    message: format!(
                        "{message} (in a segment before a gap in the numbering: whether the \
                         snapshot covers it cannot be told)"
                    ),
                });
            }
        }
    }
    let mut top = 0;
    for (range, rec) in payloads.iter().zip(decode_all(&buf, &payloads, snap)) {
        let rec = rec.map_err(|message| OpenError::Corrupt {
            path: path.to_owned(),
            offset: (range.start - codec::HEADER) as u64,
            message,
        })?;
        if let Record::Put { rev, .. }
        | Record::Delete { rev, .. }
        | Record::Covered { rev }
        | Record::Open { rev } = rec
        {
            top = top.max(rev);
        }
    }
    Ok(top)
}

/// One segment as read: its path, its index, where its data ends, its newest revision.
struct Seg {
    path: PathBuf,
    index: u64,
    end: usize,
    last_rev: u64,
}

impl Log {
    /// Opens (or creates) the data directory and reads everything in it.
    pub(crate) fn open(
        fs: Arc<dyn Vfs>,
        dir: &Path,
        segment_bytes: u64,
        snapshot_min_log_bytes: u64,
        initial_rev: u64,
    ) -> Result<Recovered, OpenError> {
        match fs.mode(dir).map_err(io_err(dir))? {
            None => fs.create_dir(dir).map_err(io_err(dir))?,
            Some(mode) if mode & 0o077 != 0 => {
                return Err(OpenError::Permissions {
                    path: dir.to_owned(),
                    mode,
                });
            }
            Some(_) => {}
        }
        // The directory's entry, and those of any parent this start or a previous one (killed
        // before they were durable) created, are durable only once each parent is synced:
        // sync every parent, at every start.
        let mut at = dir.parent();
        while let Some(parent) = at {
            let p = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            match fs.sync_dir(p) {
                Ok(()) => {}
                // A parent this user may not read: not one a start created.
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {}
                Err(e) => return Err(io_err(p)(e)),
            }
            at = parent.parent().filter(|_| !parent.as_os_str().is_empty());
        }
        let Some(lock) = fs.lock(dir).map_err(io_err(dir))? else {
            return Err(OpenError::Locked {
                path: dir.to_owned(),
            });
        };
        let mut segments = Vec::new();
        let mut snapshots = Vec::new();
        let mut markers = Vec::new();
        for name in fs.list(dir).map_err(io_err(dir))? {
            let path = dir.join(&name);
            if name.ends_with(".tmp") {
                // An unfinished segment or snapshot: never part of the store.
                let _ = fs.remove(&path);
            } else if name.starts_with(FAILED) {
                let Some(at) = parse_marker(&name) else {
                    return Err(OpenError::Corrupt {
                        path,
                        offset: 0,
                        message: "an unreadable failed-sync marker (its name should be \
                                  FAILED-SEGMENT-OFFSET)"
                            .into(),
                    });
                };
                markers.push((at, path));
            } else if let Some(i) = name
                .strip_suffix(".wal")
                .and_then(|n| n.parse::<u64>().ok())
            {
                segments.push((i, path));
            } else if let Some(r) = name
                .strip_prefix("snapshot-")
                .and_then(|n| n.strip_suffix(".snap"))
                .and_then(|n| n.parse::<u64>().ok())
            {
                snapshots.push((r, path));
            }
        }
        segments.sort();
        snapshots.sort();
        markers.sort();
        // A marker whose removal a crash lost names a place where the start that honoured
        // it appended its open batch (or a segment removed since): honouring it again would
        // drop acknowledged writes. The earliest other one counts.
        let live = markers
            .iter()
            .find(|((s, x), _)| !honoured(&*fs, dir, *s, *x));
        if markers.first().map(|m| &m.0) != live.map(|m| &m.0) {
            tracing::info!(
                "embedded store: a failed-sync marker was already honoured; removing it"
            );
        }
        let limit = live.map(|(at, _)| *at);
        let fresh = segments.is_empty() && snapshots.is_empty();
        let reached = reached::read(&*fs, dir)?;
        if let (true, Some(r)) = (fresh, reached) {
            return Err(OpenError::Corrupt {
                path: dir.join(reached::NAME),
                offset: 0,
                message: format!(
                    "the directory has no log segment and no snapshot, but an earlier start \
                     had made the log durable up to byte {} of segment {} (revision {}): the \
                     log was removed",
                    r.offset, r.segment, r.rev
                ),
            });
        }
        let (snap_rev, snapshot, snap_bytes) = match snapshots.last() {
            Some((rev, path)) => {
                let (objects, bytes) = read_snapshot(&*fs, path, *rev)?;
                (Some(*rev), objects, bytes)
            }
            None => (None, Vec::new(), 0),
        };
        let log = Arc::new(Log {
            dir: dir.to_owned(),
            fs: Arc::clone(&fs),
            segment_bytes,
            snapshot_min_log_bytes,
            sealed: Mutex::new(Vec::new()),
            snapshotting: AtomicBool::new(false),
            snapshot_thread: Mutex::new(None),
            last_snapshot_bytes: AtomicU64::new(snap_bytes),
            _lock: lock,
        });
        if fresh {
            // An empty directory: a store at `initial_rev`. Its first segment is complete
            // (zero-filled, its `OPEN` batch written and synced) before it gets its name, so
            // a crash at any point of a first start leaves a directory that opens.
            let mut body = Vec::new();
            codec::open(&mut body, initial_rev, epoch());
            let mut first = Vec::new();
            let chain = batch::encode(&mut first, &body, 0, 0, 0);
            let tmp = prepare_segment(&*fs, dir, 0, segment_bytes, &first).map_err(io_err(dir))?;
            let path = dir.join(segment_name(0));
            fs.rename(&tmp, &path).map_err(io_err(&path))?;
            fs.sync_dir(dir).map_err(io_err(dir))?;
            reached::write(
                &*fs,
                dir,
                Reached {
                    segment: 0,
                    offset: first.len() as u64,
                    rev: initial_rev,
                },
            )
            .map_err(io_err(&dir.join(reached::NAME)))?;
            remove_markers(&*fs, &markers)?;
            let file = fs.open(&path).map_err(io_err(&path))?;
            let writer = Writer::new(file, path, 0, first.len() as u64, initial_rev, chain, &log);
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
        // Segments a failed sync's marker names as never acknowledged.
        let (segments, dropped): (Vec<_>, Vec<_>) = segments
            .into_iter()
            .partition(|(i, _)| limit.is_none_or(|(s, _)| *i <= s));
        // A snapshot's clean-up unlinks the segments it covers; after a crash any subset of
        // those unlinks may have reached the disk. Segments before the last gap go too, but
        // only when each holds nothing above the snapshot (a stray file numbered past a gap
        // must not make acknowledged segments "covered"), and the segment after the gap
        // must hold a batch continuing from the snapshot (checked in the replay below).
        let mut dropped = dropped;
        let mut segments = segments;
        let mut after_gap = None;
        if let Some(s) = snap_rev {
            let last_gap = segments
                .windows(2)
                .rposition(|w| w[0].0 + 1 != w[1].0)
                .map(|i| i + 1);
            if let Some(g) = last_gap {
                if let (Some((before, _)), Some((first, first_path))) =
                    (segments.get(g - 1), segments.get(g))
                {
                    for (index, path) in segments.get(..g).unwrap_or_default() {
                        let top = covered_top(&*fs, path, *index, s)?;
                        if top > s {
                            return Err(OpenError::Corrupt {
                                path: first_path.clone(),
                                offset: 0,
                                message: format!(
                                    "segment {} is missing before it, and {} (before the gap) \
                                     holds revision {top}, above the snapshot's {s}: it is not \
                                     covered by the snapshot (a stray segment file, or segments \
                                     lost)",
                                    before + 1,
                                    path.display()
                                ),
                            });
                        }
                    }
                    after_gap = Some(*first);
                }
                dropped.extend(segments.drain(..g));
            }
        }
        if segments.is_empty() {
            return Err(OpenError::Corrupt {
                path: dir.to_owned(),
                offset: 0,
                message: "a snapshot without any log segment after it".into(),
            });
        }
        let last_index = segments.last().map_or(0, |(i, _)| *i);
        // Segment by segment, in one reused buffer (a restart reads the whole log: fresh
        // buffers for all of it cost as much in page faults as the reading): batches first
        // (cheap), then decode their records in parallel, then check the revisions follow.
        let mut buf = Vec::new();
        let mut segs: Vec<Seg> = Vec::with_capacity(segments.len());
        let mut records = Vec::new();
        let mut rev = snap_rev;
        let mut compacted = snap_rev.unwrap_or(0);
        let mut chain: Option<u32> = None;
        let mut prev_index: Option<u64> = None;
        let mut torn: Option<String> = None;
        let mut last_nonzero = 0;
        // Replay progress: a start line, then one every REPLAY_REPORT_BYTES or
        // REPLAY_REPORT_EVERY, whichever comes first; the end is `embedded store opened`.
        let total = segments.len();
        let replay_started = std::time::Instant::now();
        let mut last_report = replay_started;
        let mut read_bytes = 0u64;
        let mut reported_bytes = 0u64;
        tracing::info!(
            dir = %dir.display(),
            segments = total,
            mib = (total as u64).saturating_mul(segment_bytes) >> 20,
            "replaying the write-ahead log"
        );
        for (done, (index, path)) in segments.iter().enumerate() {
            if read_bytes.saturating_sub(reported_bytes) >= REPLAY_REPORT_BYTES
                || last_report.elapsed() >= REPLAY_REPORT_EVERY
            {
                tracing::info!(
                    segments_read = done,
                    segments = total,
                    mib_read = read_bytes >> 20,
                    writes = records.len(),
                    elapsed_ms = replay_started.elapsed().as_millis() as u64,
                    "replaying the write-ahead log"
                );
                last_report = std::time::Instant::now();
                reported_bytes = read_bytes;
            }
            if prev_index.is_some_and(|p| p + 1 != *index) {
                return Err(OpenError::Corrupt {
                    path: path.clone(),
                    offset: 0,
                    message: format!(
                        "segment {} is missing before it",
                        prev_index.map_or(0, |p| p + 1)
                    ),
                });
            }
            prev_index = Some(*index);
            fs.read(path, &mut buf).map_err(io_err(path))?;
            read_bytes = read_bytes.saturating_add(buf.len() as u64);
            if format_one(&buf) {
                return Err(OpenError::OldFormat { path: path.clone() });
            }
            // Segments are preallocated to `segment_bytes` (and synced) before they are
            // named: a shorter one lost its end.
            if (buf.len() as u64) < segment_bytes {
                return Err(OpenError::Corrupt {
                    path: path.clone(),
                    offset: buf.len() as u64,
                    message: format!(
                        "the segment is {} bytes, shorter than the {segment_bytes} every \
                         segment is preallocated to: its end was cut off",
                        buf.len()
                    ),
                });
            }
            let last = *index == last_index;
            if last {
                last_nonzero = buf.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
            }
            // Where a failed-sync marker cuts this segment: it must be a batch boundary the
            // log reached, with at most the failed batch after it (see `check_marker`).
            let cut = match limit {
                Some((s, off)) if s == *index => Some(usize::try_from(off).unwrap_or(usize::MAX)),
                _ => None,
            };
            let data = &buf[..];
            let mut payloads: Vec<std::ops::Range<usize>> = Vec::new();
            let mut at = 0;
            loop {
                if cut == Some(at) {
                    if let Some((_, marker)) = live {
                        check_marker(&*fs, marker, data, at, *index, chain, &dropped)?;
                    }
                    break;
                }
                let step = step(data, at, *index, chain);
                if let (Some(x), Some((_, marker))) = (cut, live) {
                    let past = match &step {
                        Step::Batch { next, .. } => x < *next,
                        _ => true,
                    };
                    if past {
                        return Err(OpenError::Corrupt {
                            path: marker.clone(),
                            offset: x as u64,
                            message: format!(
                                "the failed-sync marker names byte {x} of {}, which is not a \
                                 batch boundary the log reached (the batch there begins at \
                                 byte {at}): the marker does not belong to this log",
                                path.display()
                            ),
                        });
                    }
                }
                match step {
                    Step::End => break,
                    Step::Batch { hcrc, body, next } => {
                        let found = frames(data, body).map_err(|off| OpenError::Corrupt {
                            path: path.clone(),
                            offset: off as u64,
                            message: "a record of an intact batch does not parse".into(),
                        })?;
                        payloads.extend(found);
                        chain = Some(hcrc);
                        at = next;
                    }
                    Step::Damage { message, window } => {
                        let after = match window {
                            Window::NotTorn => Some(String::new()),
                            Window::Until(end) => data
                                .get(end..)
                                .and_then(|r| r.iter().position(|b| *b != 0))
                                .map(|p| {
                                    format!(
                                        "; data follows at byte {} (after that batch's end), so \
                                         it was acknowledged",
                                        end + p
                                    )
                                }),
                            Window::Unknown => batch::next_header(data, at + 1, *index).map(|y| {
                                format!(
                                    "; an intact batch follows at byte {y}, so it was acknowledged"
                                )
                            }),
                        };
                        match after {
                            None if last => {
                                torn = Some(message);
                                break;
                            }
                            after => {
                                return Err(OpenError::Corrupt {
                                    path: path.clone(),
                                    offset: at as u64,
                                    message: format!(
                                        "{message}{}{}",
                                        after.unwrap_or_default(),
                                        if last { "" } else { " (in a sealed segment)" }
                                    ),
                                });
                            }
                        }
                    }
                }
            }
            if after_gap == Some(*index) && payloads.is_empty() {
                return Err(OpenError::Corrupt {
                    path: path.clone(),
                    offset: at as u64,
                    message: format!(
                        "segments before it were removed as covered by the snapshot at {}, \
                         but it holds no batch continuing from the snapshot (a stray segment \
                         file, or the segments after the snapshot are lost)",
                        snap_rev.unwrap_or(0)
                    ),
                });
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
                    Record::Open { rev: r } => match rev {
                        None => {
                            rev = Some(*r);
                            compacted = *r;
                        }
                        Some(_) if snap_rev.is_some_and(|s| *r <= s) => {}
                        Some(cur) if cur == *r => {}
                        Some(cur) => {
                            return Err(corrupt(format!(
                                "a start at revision {r} follows revision {cur}: history has a gap"
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
                    Record::Start | Record::End { .. } => {
                        return Err(corrupt("a record that does not belong in the log".into()));
                    }
                }
            }
            segs.push(Seg {
                path: path.clone(),
                index: *index,
                end: at,
                last_rev: seg_last_rev,
            });
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
        let Some(tail) = segs.pop() else {
            return Err(OpenError::Corrupt {
                path: dir.to_owned(),
                offset: 0,
                message: "no segment".into(),
            });
        };
        // A roll whose write or sync failed records the new segment (offset 0: nothing in it
        // acknowledged) and leaves a marker naming the old segment: the start honouring it
        // drops the new segment (and a crash may lose that start's own record, leaving the
        // marker, then stale, behind).
        let rolled_then_failed = |r: &Reached| {
            (r.segment, r.offset) == (tail.index + 1, 0)
                && markers.iter().any(|((s, _), _)| *s == tail.index)
        };
        if let Some(r) = reached.filter(|r| !rolled_then_failed(r)) {
            if (tail.index, tail.end as u64) < (r.segment, r.offset) {
                return Err(OpenError::Corrupt {
                    path: tail.path.clone(),
                    offset: tail.end as u64,
                    message: format!(
                        "the log ends here, but an earlier start had made it durable up to \
                         byte {} of segment {} (revision {}, recorded in {}): the log's tail \
                         was lost (cut off, zeroed, or its newest segment removed)",
                        r.offset,
                        r.segment,
                        r.rev,
                        reached::NAME
                    ),
                });
            }
        }
        // Only now that the marker is checked against the log (and nothing refused).
        if let Some((at, path)) = live {
            let mut why = Vec::new();
            let _ = fs.read_prefix(path, 4096, &mut why);
            tracing::warn!(
                segment = at.0,
                offset = at.1,
                cause = %String::from_utf8_lossy(&why).trim(),
                "embedded store: a write or sync of the log failed before the last stop; \
                 dropping the log from there (it was never acknowledged)"
            );
        }
        let file = fs.open(&tail.path).map_err(io_err(&tail.path))?;
        // Whatever follows the end of the log (a torn batch, or what a failed sync's marker
        // names) is copied aside, then zeroed and synced before anything is appended: bytes
        // left behind could otherwise come back once the log grows past them.
        if last_nonzero > tail.end {
            if let Some(why) = &torn {
                tracing::warn!(
                    file = %tail.path.display(),
                    offset = tail.end,
                    dropped_bytes = last_nonzero - tail.end,
                    damage = %why,
                    "embedded store log ends in a torn write (a crash during an unacknowledged \
                     commit): dropping it"
                );
            }
            let mut bytes = Vec::new();
            fs.read(&tail.path, &mut bytes)
                .map_err(io_err(&tail.path))?;
            let dropped = bytes.get(tail.end..last_nonzero).unwrap_or_default();
            let aside = dir.join(format!("torn-{:016}-{}.bin", tail.index, tail.end));
            fs.create(&aside)
                .and_then(|f| {
                    f.write_at(dropped, 0)?;
                    f.sync_data()
                })
                .map_err(io_err(&aside))?;
            let zeros = vec![0u8; last_nonzero - tail.end];
            file.write_at(&zeros, tail.end as u64)
                .map_err(io_err(&tail.path))?;
        }
        // What was replayed may be only in the page cache (a batch written before a kill -9,
        // never synced): it is made durable — and the zeros after it — before anything is
        // appended after it (in this segment or the next), and before anything is served.
        file.sync_data().map_err(io_err(&tail.path))?;
        for (_, path) in &dropped {
            fs.remove(path).map_err(io_err(path))?;
        }
        // Renames and unlinks the replay relied on (or just made) are durable from here.
        fs.sync_dir(dir).map_err(io_err(dir))?;
        let sealed = segs
            .into_iter()
            .map(|s| Sealed {
                path: s.path,
                bytes: s.end as u64,
                last_rev: s.last_rev,
            })
            .collect();
        if let Ok(mut s) = log.sealed.lock() {
            *s = sealed;
        }
        let mut writer = Writer::new(
            file,
            tail.path,
            tail.index,
            tail.end as u64,
            tail.last_rev,
            chain.unwrap_or(0),
            &log,
        );
        // The start's own batch: its sync also makes durable whatever this start replayed
        // from the page cache (a batch written before a kill -9 but never synced).
        let mut body = Vec::new();
        codec::open(&mut body, rev, epoch());
        writer.write(&body, 0, &log).map_err(io_err(dir))?;
        // Everything up to here is durable: a later start finding less refuses.
        reached::write(
            &*fs,
            dir,
            Reached {
                segment: writer.index,
                offset: writer.offset,
                rev,
            },
        )
        .map_err(io_err(&dir.join(reached::NAME)))?;
        remove_markers(&*fs, &markers)?;
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
