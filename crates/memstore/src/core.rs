//! The store's shared core: partitions, the one global revision, visibility, retention and
//! the durable log's hand-off.
//!
//! Commit protocol (every write):
//! 1. take the key's partition write lock and check the compare-and-swap against the newest
//!    *applied* version (so concurrent writers of a key serialize correctly);
//! 2. take the sequencer lock (`seq`) — held for a few hundred nanoseconds, never across I/O —
//!    allocate `rev = applied + 1`, apply the write to the partition, account its history
//!    bytes, and, in durable mode, append its record to the pending batch;
//! 3. release both; in memory mode the write is visible at once (`visible = rev` under `seq`);
//!    in durable mode it becomes visible when the log thread has written and `fdatasync`ed the
//!    batch holding it (group commit), and only then is it acknowledged.
//!
//! Compaction in durable mode takes effect (readers get `Expired` below it) only once its
//! record is on disk, so a crash never brings back history a reader was told is gone.
//!
//! Invariants: revisions are allocated and applied under `seq`, so when `visible` is `v` every
//! revision `<= v` is applied in its partition; readers read at `visible` and never see a
//! write that is not durable; the log holds records in revision order, so what survives a
//! crash is a prefix of the history, and a revision lost in a crash was never seen by anyone.
//! Lock order: partition → `seq`; `parts` (the partition map) is never held with either.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use listwatch_api::Object;
use listwatch_storage::{Error, Result};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::MemStoreConfig;
use crate::codec;
use crate::part::{Partition, resource_of};

/// One retained revision, for the retention policy.
#[derive(Debug, Clone, Copy)]
struct Ledger {
    rev: u64,
    at: Instant,
    bytes: u64,
}

/// Writes waiting for the log thread: their records and whom to wake once durable.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub(crate) buf: Vec<u8>,
    pub(crate) last_rev: u64,
    /// The newest compaction revision among its records (0: none).
    pub(crate) compact: u64,
    pub(crate) writes: u64,
    pub(crate) wakes: Vec<(Arc<Partition>, Arc<str>)>,
}

/// State behind the sequencer lock.
#[derive(Debug)]
pub(crate) struct Seq {
    pub(crate) applied: u64,
    ledger: VecDeque<Ledger>,
    history_bytes: u64,
    /// Bytes of live objects: each live key's length and its object's size.
    live_bytes: u64,
    writes_since_policy: u64,
    /// Durable mode only.
    pub(crate) pending: Pending,
    /// Set when the log thread is told to stop.
    pub(crate) stop: bool,
}

/// What writers waiting for durability watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Durable {
    pub(crate) rev: u64,
    pub(crate) failed: Option<Arc<str>>,
}

/// The store's metrics (registered by [`crate::MemStore::register_metrics`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Metrics {
    pub(crate) history_bytes: Gauge,
    pub(crate) history_revisions: Gauge,
    pub(crate) live_bytes: Gauge,
    pub(crate) quota_bytes: Gauge,
    pub(crate) nospace: Gauge,
    pub(crate) retain_bytes: Gauge,
    pub(crate) revision: Gauge,
    pub(crate) compacted: Gauge,
    pub(crate) compactions_by_bytes: Counter,
    pub(crate) log_syncs: Counter,
    pub(crate) log_synced_writes: Counter,
    pub(crate) log_bytes: Counter,
}

#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) config: MemStoreConfig,
    parts: RwLock<HashMap<Box<str>, Arc<Partition>>>,
    pub(crate) seq: Mutex<Seq>,
    /// Wakes the log thread when `pending` fills.
    pub(crate) pending_cv: Condvar,
    visible: AtomicU64,
    compacted: AtomicU64,
    durable: watch::Sender<Durable>,
    pub(crate) progress: watch::Sender<u64>,
    compacting: AtomicBool,
    /// The NOSPACE alarm: raised when a write is refused for the quota, cleared once the
    /// live bytes are back under [`crate::QUOTA_CLEAR_PERCENT`] % of it.
    nospace: AtomicBool,
    /// Whether writes go to a log (set once at open).
    pub(crate) logged: bool,
    pub(crate) metrics: Metrics,
    /// The durable log's files (durable mode).
    pub(crate) log: Option<Arc<crate::wal::Log>>,
    /// The newest compaction revision whose record is on disk (durable mode).
    compact_durable: Mutex<u64>,
    /// Wakes compactions waiting for their record to be on disk.
    compact_cv: Condvar,
}

fn poisoned() -> Error {
    Error::internal("memstore lock poisoned")
}

impl Core {
    pub(crate) fn new(
        config: MemStoreConfig,
        start: u64,
        log: Option<Arc<crate::wal::Log>>,
    ) -> Self {
        let metrics = Metrics::default();
        metrics.retain_bytes.set(gauge(config.retain_bytes));
        metrics
            .quota_bytes
            .set(gauge(config.quota_bytes.unwrap_or(0)));
        metrics.revision.set(gauge(start));
        metrics.compacted.set(gauge(start));
        Self {
            config,
            parts: RwLock::new(HashMap::new()),
            seq: Mutex::new(Seq {
                applied: start,
                ledger: VecDeque::new(),
                history_bytes: 0,
                live_bytes: 0,
                writes_since_policy: 0,
                pending: Pending::default(),
                stop: false,
            }),
            pending_cv: Condvar::new(),
            visible: AtomicU64::new(start),
            compacted: AtomicU64::new(start),
            durable: watch::channel(Durable {
                rev: start,
                failed: None,
            })
            .0,
            progress: watch::channel(0).0,
            compacting: AtomicBool::new(false),
            nospace: AtomicBool::new(false),
            logged: log.is_some(),
            metrics,
            log,
            compact_durable: Mutex::new(0),
            compact_cv: Condvar::new(),
        }
    }

    /// The newest revision readers may see.
    pub(crate) fn visible(&self) -> u64 {
        self.visible.load(Ordering::Acquire)
    }

    /// Revisions below this are compacted.
    pub(crate) fn compacted(&self) -> u64 {
        self.compacted.load(Ordering::Acquire)
    }

    pub(crate) fn lock_seq(&self) -> Result<MutexGuard<'_, Seq>> {
        self.seq.lock().map_err(|_| poisoned())
    }

    /// The partition of `resource`, created on first use.
    pub(crate) fn partition(&self, resource: &str) -> Result<Arc<Partition>> {
        if let Some(p) = self.parts.read().map_err(|_| poisoned())?.get(resource) {
            return Ok(Arc::clone(p));
        }
        let mut parts = self.parts.write().map_err(|_| poisoned())?;
        let compacted = self.compacted();
        Ok(Arc::clone(
            parts
                .entry(resource.into())
                .or_insert_with(|| Arc::new(Partition::new(compacted))),
        ))
    }

    /// The partition of `resource` if it exists.
    pub(crate) fn existing_partition(&self, resource: &str) -> Result<Option<Arc<Partition>>> {
        Ok(self
            .parts
            .read()
            .map_err(|_| poisoned())?
            .get(resource)
            .cloned())
    }

    pub(crate) fn partitions(&self) -> Result<Vec<Arc<Partition>>> {
        Ok(self
            .parts
            .read()
            .map_err(|_| poisoned())?
            .values()
            .cloned()
            .collect())
    }

    /// Why writes are refused, when the log failed.
    pub(crate) fn failure(&self) -> Option<Error> {
        self.durable
            .borrow()
            .failed
            .as_ref()
            .map(|why| Error::Unreachable {
                message: format!(
                    "the embedded store stopped accepting writes: its log failed ({why}); \
                 restart the server once the disk is fixed"
                ),
            })
    }

    /// Commits a write of `key` (value `None` deletes) if the key's newest live revision is
    /// still `expected` (0: absent). `Ok(Err(actual))` when it is not. Returns once the write
    /// is visible (durable, in durable mode).
    pub(crate) async fn commit(
        &self,
        key: &str,
        expected: u64,
        value: Option<Object>,
        ttl: Option<Duration>,
    ) -> Result<std::result::Result<u64, u64>> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        if let (Some(v), Some(max)) = (&value, self.config.max_object_bytes) {
            if v.size() > max {
                return Err(Error::object_too_large(v.size(), max));
            }
        }
        let part = self.partition(resource_of(key))?;
        let now = Instant::now();
        let outcome = {
            let mut st = part.state.write().map_err(|_| poisoned())?;
            let actual = st.newest_live_rev(key);
            if actual != expected {
                Err((actual, st.newest(key).map_or(0, |v| v.mod_rev)))
            } else {
                let old_live = st
                    .newest(key)
                    .and_then(|v| v.value.as_ref())
                    .map_or(0, |v| live_size(key, v));
                let new_live = value.as_ref().map_or(0, |v| live_size(key, v));
                let mut seq = self.lock_seq()?;
                self.check_quota(&seq, old_live, new_live)?;
                let rev = seq.applied + 1;
                if self.logged {
                    let mark = seq.pending.buf.len();
                    match &value {
                        Some(o) => codec::put(&mut seq.pending.buf, rev, key, o, ttl),
                        None => codec::delete(&mut seq.pending.buf, rev, key),
                    }
                    // A record recovery would reject is never written.
                    let len = seq.pending.buf.len() - mark;
                    if len > codec::MAX_PAYLOAD + codec::HEADER {
                        seq.pending.buf.truncate(mark);
                        return Err(Error::object_too_large(len, codec::MAX_PAYLOAD));
                    }
                }
                seq.live_bytes = (seq.live_bytes + new_live).saturating_sub(old_live);
                self.live_bytes_changed(seq.live_bytes);
                seq.applied = rev;
                let (bytes, stored_key) = st.apply(rev, key, value, ttl);
                seq.ledger.push_back(Ledger {
                    rev,
                    at: now,
                    bytes,
                });
                seq.history_bytes += bytes;
                seq.writes_since_policy += 1;
                self.metrics.history_bytes.set(gauge(seq.history_bytes));
                self.metrics
                    .history_revisions
                    .set(gauge(seq.ledger.len() as u64));
                if self.logged {
                    seq.pending.last_rev = rev;
                    seq.pending.writes += 1;
                    seq.pending.wakes.push((Arc::clone(&part), stored_key));
                    self.pending_cv.notify_one();
                } else {
                    self.visible.store(rev, Ordering::Release);
                    self.metrics.revision.set(gauge(rev));
                }
                Ok(rev)
            }
        };
        let rev = match outcome {
            Ok(rev) => rev,
            Err((actual, newest)) => {
                // The newest version may not be visible yet; answer only once it is.
                self.settle(newest).await?;
                return Ok(Err(actual));
            }
        };
        if self.logged {
            self.settle(rev).await?;
        } else {
            part.wake(key, rev);
        }
        self.maybe_compact()?;
        Ok(Ok(rev))
    }

    /// Refuses a write that would take the live bytes from `old` to `new` for this key when
    /// it adds bytes past the quota, or adds any while the NOSPACE alarm is raised (etcd's
    /// limited mode: reads and deletes only; here writes that do not grow are served too).
    fn check_quota(&self, seq: &Seq, old: u64, new: u64) -> Result<()> {
        let Some(quota) = self.config.quota_bytes else {
            return Ok(());
        };
        if new <= old {
            return Ok(());
        }
        let after = (seq.live_bytes + new).saturating_sub(old);
        let alarm = self.nospace.load(Ordering::Acquire);
        if after <= quota && !alarm {
            return Ok(());
        }
        if !alarm {
            self.nospace.store(true, Ordering::Release);
            self.metrics.nospace.set(1);
            tracing::warn!(
                live_bytes = seq.live_bytes,
                quota_bytes = quota,
                "embedded store: alarm NOSPACE raised: writes that add data are refused until \
                 deletes bring the live objects under {}% of the quota (--embedded-quota-bytes)",
                crate::QUOTA_CLEAR_PERCENT
            );
        }
        Err(Error::TooManyRequests {
            message: format!(
                "etcdserver: mvcc: database space exceeded (the embedded store holds {} bytes of \
                 objects; its quota is {quota} bytes)",
                seq.live_bytes
            ),
            retry_after_seconds: NOSPACE_RETRY_AFTER_SECONDS,
        })
    }

    /// Publishes the live bytes and clears the NOSPACE alarm once they are low enough.
    fn live_bytes_changed(&self, live: u64) {
        self.metrics.live_bytes.set(gauge(live));
        if let Some(quota) = self.config.quota_bytes
            && self.nospace.load(Ordering::Acquire)
            && live <= quota / 100 * crate::QUOTA_CLEAR_PERCENT
        {
            self.nospace.store(false, Ordering::Release);
            self.metrics.nospace.set(0);
            tracing::info!(
                live_bytes = live,
                quota_bytes = quota,
                "embedded store: alarm NOSPACE cleared"
            );
        }
    }

    /// The NOSPACE alarm, as readiness reports it.
    pub(crate) fn nospace(&self) -> Option<Error> {
        if !self.nospace.load(Ordering::Acquire) {
            return None;
        }
        let quota = self.config.quota_bytes.unwrap_or(0);
        Some(Error::NotReady {
            message: format!(
                "embedded store: alarm NOSPACE: its objects ({} bytes) reached the quota of \
                 {quota} bytes (--embedded-quota-bytes); writes that add data are refused, \
                 reads and deletes are served",
                self.live_bytes()
            ),
            retry_after_seconds: NOSPACE_RETRY_AFTER_SECONDS,
        })
    }

    /// Bytes of live objects.
    pub(crate) fn live_bytes(&self) -> u64 {
        self.seq.lock().map(|s| s.live_bytes).unwrap_or(0)
    }

    /// Waits until revision `rev` is visible (durable); errors if the log failed first.
    pub(crate) async fn settle(&self, rev: u64) -> Result<()> {
        if rev <= self.visible() {
            return Ok(());
        }
        let mut rx = self.durable.subscribe();
        let d = rx
            .wait_for(|d| d.rev >= rev || d.failed.is_some())
            .await
            .map_err(|_| Error::internal("memstore log thread ended"))?
            .clone();
        if d.rev >= rev {
            return Ok(());
        }
        Err(self
            .failure()
            .unwrap_or_else(|| Error::internal("memstore log failed")))
    }

    /// Called by the log thread once everything up to `rev` is on disk.
    pub(crate) fn publish(&self, rev: u64) {
        self.visible.store(rev, Ordering::Release);
        self.metrics.revision.set(gauge(rev));
        self.durable.send_modify(|d| d.rev = rev);
    }

    /// Called by the log thread when it cannot write: nothing after `visible` will ever be.
    pub(crate) fn fail(&self, why: String) {
        tracing::error!(error = %why, "embedded store log failed: refusing writes from now on");
        self.durable.send_modify(|d| d.failed = Some(why.into()));
        self.compact_cv.notify_all();
    }

    /// Compacts history below `at` (at most the visible revision).
    pub(crate) fn compact(&self, at: u64) -> Result<()> {
        if self.logged {
            // Durable first: a compaction readers saw must never be undone by a crash.
            {
                let mut seq = self.lock_seq()?;
                let visible = self.visible();
                if at > visible {
                    return Err(Error::bad_request(format!(
                        "cannot compact at revision {at}: the current revision is {visible}"
                    )));
                }
                if at <= self.compacted() {
                    return Ok(());
                }
                codec::bare(&mut seq.pending.buf, codec::COMPACT, at);
                seq.pending.compact = seq.pending.compact.max(at);
                self.pending_cv.notify_one();
            }
            self.wait_compaction_durable(at)?;
        }
        {
            let mut seq = self.lock_seq()?;
            let visible = self.visible();
            if at > visible {
                return Err(Error::bad_request(format!(
                    "cannot compact at revision {at}: the current revision is {visible}"
                )));
            }
            if at <= self.compacted() {
                return Ok(());
            }
            // Readers learn of it first: from here on, anything below `at` is Expired.
            self.compacted.store(at, Ordering::Release);
            while seq.ledger.front().is_some_and(|l| l.rev <= at) {
                if let Some(l) = seq.ledger.pop_front() {
                    seq.history_bytes = seq.history_bytes.saturating_sub(l.bytes);
                }
            }
            self.metrics.history_bytes.set(gauge(seq.history_bytes));
            self.metrics
                .history_revisions
                .set(gauge(seq.ledger.len() as u64));
            self.metrics.compacted.set(gauge(at));
        }
        for part in self.partitions()? {
            part.state.write().map_err(|_| poisoned())?.compact(at);
        }
        if let Some(log) = &self.log {
            log.after_compaction(self, at);
        }
        Ok(())
    }

    /// Waits (blocking: one `fdatasync`) until the log thread has synced a compact record at
    /// `at` or later; errors if the log failed first.
    fn wait_compaction_durable(&self, at: u64) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut done = self.compact_durable.lock().map_err(|_| poisoned())?;
        while *done < at {
            if let Some(e) = self.failure() {
                return Err(e);
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(Error::internal(
                    "memstore: the compaction was not made durable within 60 s",
                ));
            }
            done = self
                .compact_cv
                .wait_timeout(done, left.min(Duration::from_millis(100)))
                .map_err(|_| poisoned())?
                .0;
        }
        Ok(())
    }

    /// Called by the log thread once a compact record at `at` is on disk.
    pub(crate) fn compaction_durable(&self, at: u64) {
        if let Ok(mut done) = self.compact_durable.lock() {
            *done = (*done).max(at);
        }
        self.compact_cv.notify_all();
    }

    /// Applies the retention policy when it is due: keep at least `retain_revisions` and
    /// everything younger than `retain_window`, but never more than `retain_bytes` of history
    /// (that bound wins; compaction then goes down to three quarters of it).
    pub(crate) fn maybe_compact(&self) -> Result<()> {
        let c = &self.config;
        let target = {
            let mut seq = self.lock_seq()?;
            let over_bytes = seq.history_bytes > c.retain_bytes;
            if !over_bytes && seq.writes_since_policy < c.compaction_check_every {
                return Ok(());
            }
            if self.compacting.swap(true, Ordering::AcqRel) {
                return Ok(());
            }
            seq.writes_since_policy = 0;
            let now = Instant::now();
            let by_count = seq.applied.saturating_sub(c.retain_revisions);
            let by_age = now.checked_sub(c.retain_window).and_then(|cutoff| {
                let old = seq.ledger.partition_point(|l| l.at < cutoff);
                old.checked_sub(1)
                    .and_then(|i| seq.ledger.get(i))
                    .map(|l| l.rev)
            });
            let mut target = by_age.map_or(0, |a| a.min(by_count));
            if over_bytes {
                let goal = c.retain_bytes / 4 * 3;
                let mut left = seq.history_bytes;
                let mut by_bytes = 0;
                for l in &seq.ledger {
                    if left <= goal {
                        break;
                    }
                    left = left.saturating_sub(l.bytes);
                    by_bytes = l.rev;
                }
                if by_bytes > target {
                    self.metrics.compactions_by_bytes.inc();
                    tracing::debug!(
                        revision = by_bytes,
                        history_bytes = seq.history_bytes,
                        "memstore history over its byte bound: compacting"
                    );
                    target = by_bytes;
                }
            }
            target.min(self.visible())
        };
        let res = if target > self.compacted() {
            tracing::debug!(revision = target, "memstore compacted automatically");
            self.compact(target)
        } else {
            Ok(())
        };
        self.compacting.store(false, Ordering::Release);
        res
    }

    /// Installs what recovery read, before the store is shared: a snapshot's keys (at their
    /// own revisions), then the log's writes in revision order (no log, no wake-ups). Each
    /// partition and the sequencer are locked once for all of it.
    pub(crate) fn recover(
        &self,
        snapshot: Vec<crate::wal::SnapshotEntry>,
        records: Vec<codec::Record>,
        at: Instant,
    ) -> Result<()> {
        let mut parts: HashMap<Box<str>, Arc<Partition>> = HashMap::new();
        let keys = snapshot
            .iter()
            .map(|(k, ..)| k.as_str())
            .chain(records.iter().filter_map(|r| match r {
                codec::Record::Put { key, .. } | codec::Record::Delete { key, .. } => {
                    Some(key.as_str())
                }
                _ => None,
            }));
        for key in keys {
            let resource = resource_of(key);
            if !parts.contains_key(resource) {
                parts.insert(resource.into(), self.partition(resource)?);
            }
        }
        let mut states = HashMap::with_capacity(parts.len());
        for (resource, part) in &parts {
            states.insert(&**resource, part.state.write().map_err(|_| poisoned())?);
        }
        let missing = || Error::internal("memstore recovery: a partition is missing");
        for (key, object, ttl) in snapshot {
            let st = states.get_mut(resource_of(&key)).ok_or_else(missing)?;
            st.keys.insert(
                Arc::from(key),
                vec![crate::part::Version {
                    mod_rev: object.resource_version(),
                    value: Some(object),
                    ttl,
                }],
            );
        }
        let mut seq = self.lock_seq()?;
        for r in records {
            let (rev, key, value, ttl) = match r {
                codec::Record::Put {
                    rev,
                    key,
                    ttl,
                    object,
                } => (rev, key, Some(object), ttl),
                codec::Record::Delete { rev, key } => (rev, key, None, None),
                _ => continue,
            };
            let st = states.get_mut(resource_of(&key)).ok_or_else(missing)?;
            let (bytes, _) = st.apply(rev, &key, value, ttl);
            seq.applied = rev;
            seq.ledger.push_back(Ledger { rev, at, bytes });
            seq.history_bytes += bytes;
        }
        seq.live_bytes = states
            .values()
            .flat_map(|st| st.keys.iter())
            .filter_map(|(k, versions)| {
                let v = versions.last()?.value.as_ref()?;
                Some(live_size(k, v))
            })
            .sum();
        self.live_bytes_changed(seq.live_bytes);
        drop(states);
        let rev = seq.applied;
        self.visible.store(rev, Ordering::Release);
        self.durable.send_modify(|d| d.rev = rev);
        self.metrics.revision.set(gauge(rev));
        self.metrics.history_bytes.set(gauge(seq.history_bytes));
        self.metrics
            .history_revisions
            .set(gauge(seq.ledger.len() as u64));
        Ok(())
    }

    /// Sets the compaction revision without a log record (recovery only).
    pub(crate) fn set_compacted(&self, at: u64) -> Result<()> {
        self.compacted.store(at, Ordering::Release);
        self.metrics.compacted.set(gauge(at));
        let mut seq = self.lock_seq()?;
        while seq.ledger.front().is_some_and(|l| l.rev <= at) {
            if let Some(l) = seq.ledger.pop_front() {
                seq.history_bytes = seq.history_bytes.saturating_sub(l.bytes);
            }
        }
        self.metrics.history_bytes.set(gauge(seq.history_bytes));
        drop(seq);
        for part in self.partitions()? {
            part.state.write().map_err(|_| poisoned())?.compact(at);
        }
        Ok(())
    }

    /// Bytes of history retained (what compaction can free).
    pub(crate) fn history_bytes(&self) -> u64 {
        self.seq.lock().map(|s| s.history_bytes).unwrap_or(0)
    }

    /// Asks the log thread to finish and stop.
    pub(crate) fn stop(&self) {
        if let Ok(mut seq) = self.seq.lock() {
            seq.stop = true;
        }
        self.pending_cv.notify_all();
    }
}

/// Seconds a write refused for the quota is told to wait: etcd's NOSPACE needs deletes (an
/// operator), as the etcd backend answers it.
const NOSPACE_RETRY_AFTER_SECONDS: u32 = 10;

/// What a live key and its object count against the quota.
fn live_size(key: &str, obj: &Object) -> u64 {
    (key.len() + obj.size()) as u64
}

pub(crate) fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
