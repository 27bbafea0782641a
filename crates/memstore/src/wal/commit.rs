//! The log thread: group commit (one `write` and one `fdatasync` for every write queued
//! meanwhile), the pause that joins the writers' cohorts ([`Coalesce`]), and segment rolling.
//!
//! Invariants: a write is made visible and acknowledged only after the `fdatasync` that
//! covers it returned; a batch is written only after the previous one is synced; a failed
//! write or sync fails the store, which refuses writes from then on.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::reached::{self, Reached};
use super::vfs::VFile;
use super::{Log, Sealed, Writer, batch, prepare_segment, segment_name};
use crate::core::Core;

impl Writer {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        file: Box<dyn VFile>,
        path: PathBuf,
        index: u64,
        offset: u64,
        last_rev: u64,
        chain: u32,
        log: &Arc<Log>,
    ) -> Self {
        let mut w = Self {
            file,
            path,
            index,
            offset,
            last_rev,
            chain,
            out: Vec::new(),
            next: None,
        };
        w.prepare_next(log);
        w
    }

    fn prepare_next(&mut self, log: &Arc<Log>) {
        // Not the `Log` itself: holding it would hold the directory's lock past the store.
        let fs = Arc::clone(&log.fs);
        let dir = log.dir.clone();
        let bytes = log.segment_bytes;
        let index = self.index + 1;
        self.next = std::thread::Builder::new()
            .name("memstore-segment".into())
            .spawn(move || prepare_segment(&*fs, &dir, index, bytes, &[]))
            .ok();
    }

    /// Writes `body` (frames) as one batch and makes it durable.
    pub(super) fn write(&mut self, body: &[u8], last_rev: u64, log: &Arc<Log>) -> io::Result<()> {
        let len = batch::padded(batch::HEADER + body.len()) as u64;
        let mut sealed = None;
        if self.offset > 0 && self.offset + len > log.segment_bytes {
            sealed = Some(self.roll(log)?);
        }
        self.append(body)?;
        self.last_rev = self.last_rev.max(last_rev);
        if self.out.capacity() > 4 << 20 {
            self.out = Vec::new();
        }
        // A snapshot may remove the old segment only once the new one holds a batch: a
        // segment after a gap in the numbering always holds one (recovery checks that).
        if let Some(s) = sealed {
            if let Ok(mut list) = log.sealed.lock() {
                list.push(s);
            }
        }
        Ok(())
    }

    /// Writes `body` as one batch at the end of the segment and syncs it.
    fn append(&mut self, body: &[u8]) -> io::Result<()> {
        let hcrc = batch::encode(&mut self.out, body, self.index, self.offset, self.chain);
        self.file
            .write_at(&self.out, self.offset)
            .and_then(|()| self.file.sync_data())
            .map_err(named(&self.path))?;
        self.chain = hcrc;
        self.offset += self.out.len() as u64;
        Ok(())
    }

    /// Moves to the next segment: renames it into place (directory synced), then records
    /// in `REACHED` that the log reaches it, so that a start that does not find it refuses
    /// rather than lose it silently. Returns the segment sealed (for snapshots).
    fn roll(&mut self, log: &Arc<Log>) -> io::Result<Sealed> {
        let index = self.index + 1;
        let tmp = match self.next.take().map(JoinHandle::join) {
            Some(Ok(Ok(tmp))) => tmp,
            Some(Ok(Err(e))) => return Err(e),
            _ => prepare_segment(&*log.fs, &log.dir, index, log.segment_bytes, &[])?,
        };
        let path = log.dir.join(segment_name(index));
        log.fs.rename(&tmp, &path).map_err(named(&path))?;
        log.fs.sync_dir(&log.dir).map_err(named(&log.dir))?;
        let file = log.fs.open(&path).map_err(named(&path))?;
        // The log now reaches the new segment: a start that does not find it refuses.
        reached::write(
            &*log.fs,
            &log.dir,
            Reached {
                segment: index,
                offset: 0,
                rev: self.last_rev,
            },
        )
        .map_err(named(&log.dir.join(reached::NAME)))?;
        let old = std::mem::replace(&mut self.path, path);
        let sealed = Sealed {
            path: old,
            bytes: self.offset,
            last_rev: self.last_rev,
        };
        self.file = file;
        self.index = index;
        self.offset = 0;
        self.prepare_next(log);
        Ok(sealed)
    }
}

/// An error naming the file it is about.
fn named(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
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

/// Fails the store if the log thread ends without being told to stop (a panic, a poisoned
/// lock): writers then fail at once instead of waiting forever, and readiness says why.
struct Exit<'a> {
    core: &'a Core,
    clean: bool,
}

impl Drop for Exit<'_> {
    fn drop(&mut self) {
        if !self.clean {
            self.core
                .fail("the log thread ended unexpectedly".to_owned());
        }
    }
}

/// The log thread: group commit until the store stops.
pub(crate) fn run(core: Arc<Core>, mut writer: Writer) {
    let mut exit = Exit {
        core: &core,
        clean: false,
    };
    let Some(log) = core.log.clone() else {
        exit.clean = true;
        return;
    };
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
                exit.clean = true;
                return;
            }
            next.waited(seq.pending.writes);
            std::mem::take(&mut seq.pending)
        };
        let started = std::time::Instant::now();
        let (index, offset) = (writer.index, writer.offset);
        if let Err(e) = writer.write(&batch.buf, batch.last_rev, &log) {
            // The error names the file that failed (a roll's new segment, not the old one).
            let why = e.to_string();
            // Whatever the page cache still holds of this batch must never be served.
            log.mark_failed(index, offset, &why);
            core.fail(why);
            exit.clean = true;
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
        if batch.compact > 0 {
            core.compaction_durable(batch.compact);
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
