//! Snapshots: the state at a compaction revision, written once compaction has made enough
//! sealed log obsolete, and read back at recovery.
//!
//! Invariants: a snapshot is written to a temporary name, synced, renamed and the directory
//! synced before the segments it covers and older snapshots are deleted; one is written at
//! a time (by a thread of its own, from `Arc` clones of the state); a snapshot whose magic,
//! revision, records or closing count is wrong refuses to start.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use listwatch_api::Object;

use super::recover::decode_all;
use super::vfs::{VFile, Vfs};
use super::{Log, OpenError, SNAPSHOT_MAGIC, SnapshotEntry, io_err, snapshot_name};
use crate::codec::{self, Frame, Record};
use crate::core::Core;

impl Log {
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
        match spawned {
            Ok(handle) => {
                // One snapshot is written at a time, so a previous thread has ended (or is
                // ending): joining it here is brief.
                if let Ok(mut slot) = self.snapshot_thread.lock()
                    && let Some(previous) = slot.replace(handle)
                {
                    let _ = previous.join();
                }
            }
            Err(_) => self.snapshotting.store(false, Ordering::Release),
        }
    }

    /// Waits for the snapshot being written, if any (when the store is dropped): a
    /// snapshot's unlinks never outlive the store.
    pub(crate) fn join_snapshot(&self) {
        let handle = self.snapshot_thread.lock().ok().and_then(|mut s| s.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }

    fn write_snapshot(
        &self,
        rev: u64,
        objects: &[(Arc<str>, Object, Option<Duration>)],
    ) -> io::Result<u64> {
        let name = snapshot_name(rev);
        let tmp = self.dir.join(super::tmp_name(&name));
        let path = self.dir.join(&name);
        let written = self
            .write_snapshot_file(&tmp, rev, objects)
            .and_then(|bytes| {
                self.fs.rename(&tmp, &path)?;
                self.fs.sync_dir(&self.dir)?;
                Ok(bytes)
            });
        let bytes = match written {
            Ok(b) => b,
            Err(e) => {
                // A failed snapshot leaves nothing behind (a start would remove it anyway).
                let _ = self.fs.remove(&tmp);
                return Err(e);
            }
        };
        // The snapshot is durable: older snapshots and the segments it covers can go. Which
        // ones is decided under the lock; the unlinks happen after it (the log thread takes
        // it to roll a segment).
        let mut obsolete = Vec::new();
        if let Ok(names) = self.fs.list(&self.dir) {
            for n in names {
                if n.starts_with("snapshot-") && n.ends_with(".snap") && n != name {
                    obsolete.push(self.dir.join(n));
                }
            }
        }
        if let Ok(mut sealed) = self.sealed.lock() {
            sealed.retain(|s| {
                if s.last_rev <= rev {
                    obsolete.push(s.path.clone());
                    false
                } else {
                    true
                }
            });
        }
        // No directory sync: an unlink a crash loses brings back a covered segment or an
        // older snapshot, which the next start ignores and removes again.
        for p in &obsolete {
            let _ = self.fs.remove(p);
        }
        Ok(bytes)
    }

    /// Writes the snapshot file at `tmp` and syncs it; returns its size.
    fn write_snapshot_file(
        &self,
        tmp: &Path,
        rev: u64,
        objects: &[(Arc<str>, Object, Option<Duration>)],
    ) -> io::Result<u64> {
        let file: Box<dyn VFile> = self.fs.create(tmp)?;
        let mut buf = Vec::with_capacity(1 << 16);
        buf.extend_from_slice(SNAPSHOT_MAGIC);
        buf.extend_from_slice(&rev.to_le_bytes());
        let mut bytes = 0u64;
        for (k, o, ttl) in objects {
            codec::put(&mut buf, o.resource_version(), k, o, *ttl);
            if buf.len() >= 1 << 20 {
                file.write_at(&buf, bytes)?;
                bytes += buf.len() as u64;
                buf.clear();
            }
        }
        codec::end(&mut buf, objects.len() as u64);
        file.write_at(&buf, bytes)?;
        bytes += buf.len() as u64;
        file.sync_data()?;
        Ok(bytes)
    }
}

pub(super) fn read_snapshot(
    fs: &dyn Vfs,
    path: &Path,
    rev: u64,
) -> Result<(Vec<SnapshotEntry>, u64), OpenError> {
    let mut data = Vec::new();
    fs.read(path, &mut data).map_err(io_err(path))?;
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
