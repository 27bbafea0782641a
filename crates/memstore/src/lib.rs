//! The embedded MVCC store: listwatch's default [`Storage`](listwatch_storage::Storage)
//! backend, so that a server and most tests run with nothing installed — in memory, or
//! durable in a data directory.
//!
//! It keeps etcd's semantics where the pipeline depends on them: one global revision that
//! every write increments; per-key history readable at any retained revision; compaction
//! (explicit, and automatic by a policy that keeps at least a time window and a number of
//! revisions, and at most a number of bytes); TTLs; watches from any retained revision, on a
//! prefix or a single key, with the previous value; progress notification on request and on an
//! interval. A watch whose start was compacted, or that falls behind compaction, ends with an
//! `Expired` error.
//!
//! Resource versions are never reused: an empty store (a new one, or one whose data directory
//! was wiped) starts at a revision taken from the wall clock (microseconds since the Unix
//! epoch), above anything an earlier store could have handed out (that would take more than
//! a million writes per second, sustained since it started), and everything older than its
//! start is `Expired`. A client resuming from a version of an earlier history is told to relist
//! instead of silently following a different one.
//!
//! Durability ([`MemStore::open`]; on-disk format and crash behaviour: docs/storage.md):
//! every write is appended to a write-ahead log and
//! acknowledged only once `fdatasync` returned (group commit: one sync for all writes queued
//! meanwhile); readers and watchers never see a write before it is durable, so a crash loses
//! only unacknowledged writes and no revision anyone saw is ever reused. Snapshots bound the
//! replay; see the `wal` module docs for the files and what recovery accepts.
//!
//! Locking: each resource (the first segment of a key) has its own partition behind its own
//! `RwLock`, so writes to leases never wait for a list of pods; one short sequencer lock
//! allocates revisions. No lock is held across an `.await`. A write wakes only the watchers of
//! its resource and directory (namespace). See the `core` module for the commit protocol.
//!
//! Layout: this module holds the configuration, the store handle and its constructors
//! (recovery included); the `Storage` methods are in `storage`, TTL expiry in `ttl`.
//!
//! It sits directly above listwatch-storage and must never depend on etcd, HTTP or the cache.
//!
//! ```
//! use listwatch_api::{Object, SelectableFields};
//! use listwatch_memstore::MemStore;
//! use listwatch_storage::{GetOptions, Key, Storage};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> listwatch_storage::Result<()> {
//! let store = MemStore::new();
//! let key = Key::object("pods", Some("default"), "web-1")?;
//! let pod = Object::from_json(br#"{"metadata":{"name":"web-1","namespace":"default"}}"#,
//!     &SelectableFields::none()).map_err(|e| listwatch_storage::Error::bad_request(e.to_string()))?;
//! let created = store.create(&key, pod, None).await?;
//! let got = store.get(&key, &GetOptions::default()).await?;
//! assert_eq!(got.map(|o| o.resource_version()), Some(created.resource_version()));
//! # Ok(()) }
//! ```

mod codec;
mod core;
#[cfg(test)]
mod crashtest;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod part;
mod storage;
#[cfg(test)]
mod tests;
mod ttl;
mod wal;
mod watch;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use listwatch_api::Object;
use listwatch_storage::{Error, Key, Result};
use prometheus_client::registry::Registry;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::core::Core;
use crate::part::{Partition, resource_of};
use crate::ttl::TtlQueue;

pub use crate::wal::OpenError;

/// Configuration of a [`MemStore`].
#[derive(Debug, Clone)]
pub struct MemStoreConfig {
    /// How often an idle watch with progress notification gets a bookmark.
    pub progress_notify_interval: Duration,
    /// Automatic compaction keeps at least this many recent revisions...
    pub retain_revisions: u64,
    /// ...and at least every revision younger than this...
    pub retain_window: Duration,
    /// ...but never more history than this many bytes (superseded and deleted objects, their
    /// keys, and a fixed cost per revision): past it, compaction drops the oldest revisions
    /// down to three quarters of it, whatever the two minimums above say.
    pub retain_bytes: u64,
    /// How many writes pass between two looks of the automatic compaction policy (the byte
    /// bound is looked at on every write).
    pub compaction_check_every: u64,
    /// Capacity of each watcher's outgoing channel (events ready for its consumer).
    pub watch_channel_capacity: usize,
    /// The largest object stored (its JSON without resource version); a larger write is
    /// `RequestTooLarge` (413). Default: etcd's default request limit,
    /// [`listwatch_storage::DEFAULT_MAX_OBJECT_BYTES`], so that what this store accepts etcd
    /// accepts too. `None`: no limit.
    pub max_object_bytes: Option<usize>,
    /// The most bytes of live objects (each key and its object's JSON) the store holds, like
    /// etcd's `--quota-backend-bytes`: a write that would take it past this is refused with
    /// etcd's "mvcc: database space exceeded" (`TooManyRequests`, retry after 10 s) and
    /// raises the NOSPACE alarm, which [`Storage::readiness`](listwatch_storage::Storage)
    /// reports; while it is raised, every write that adds bytes is refused, and reads,
    /// deletes and writes that shrink an object are served. It clears once deletes bring
    /// the live bytes to at most [`QUOTA_CLEAR_PERCENT`] % of the quota. `None`: no quota.
    pub quota_bytes: Option<u64>,
    /// The revision an empty store starts at; `None`: the wall clock in microseconds since
    /// the Unix epoch (never below what an earlier store handed out).
    pub initial_revision: Option<u64>,
    /// Durable mode: the size of a log segment.
    pub segment_bytes: u64,
    /// Durable mode: a snapshot is written once compaction has made at least this many bytes
    /// of sealed log obsolete (and at least as many as the last snapshot's size).
    pub snapshot_min_log_bytes: u64,
}

impl Default for MemStoreConfig {
    fn default() -> Self {
        Self {
            // etcd's progress notify interval is configurable; the cacher asks for progress
            // explicitly when it needs it, so this only keeps idle watches alive.
            progress_notify_interval: Duration::from_secs(5),
            retain_revisions: 10_000,
            // Kubernetes compacts every 5 minutes, keeping at least 5 minutes of history.
            retain_window: Duration::from_secs(300),
            retain_bytes: 1 << 30,
            compaction_check_every: 1024,
            watch_channel_capacity: 128,
            max_object_bytes: Some(listwatch_storage::DEFAULT_MAX_OBJECT_BYTES),
            quota_bytes: None,
            initial_revision: None,
            segment_bytes: 64 << 20,
            snapshot_min_log_bytes: 64 << 20,
        }
    }
}

/// The NOSPACE alarm clears once live bytes are at most this percentage of the quota.
pub const QUOTA_CLEAR_PERCENT: u64 = 90;

/// Microseconds since the Unix epoch (at least 1).
fn wall_clock_revision() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
        .unwrap_or(1)
        .max(1)
}

/// What lives exactly as long as some handle of the store: dropping the last one stops the
/// log thread and the TTL reaper (watchers keep only the core).
struct Life {
    core: Arc<Core>,
    ttl: std::sync::Mutex<TtlQueue>,
    /// Wakes the TTL reaper when an earlier deadline appears.
    ttl_wake: Arc<Notify>,
    reaper_started: AtomicBool,
    log_thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Life {
    fn drop(&mut self) {
        self.core.stop();
        if let Ok(mut t) = self.log_thread.lock() {
            if let Some(t) = t.take() {
                // The thread flushes what is queued, then ends.
                let _ = t.join();
            }
        }
        // A snapshot being written unlinks the segments it covers when it is durable: that
        // ends before the store is gone, so a store opened again on the directory (in this
        // process) never sees its files vanish.
        if let Some(log) = &self.core.log {
            log.join_snapshot();
        }
    }
}

/// The embedded store. Cloning is cheap and shares the data.
#[derive(Clone)]
pub struct MemStore {
    life: Arc<Life>,
}

impl Default for MemStore {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for MemStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemStore")
            .field("revision", &self.current_revision())
            .field("durable", &self.is_durable())
            .finish()
    }
}

fn poisoned() -> Error {
    Error::internal("memstore lock poisoned")
}

impl MemStore {
    /// An empty in-memory store with the default configuration.
    pub fn new() -> Self {
        Self::with_config(MemStoreConfig::default())
    }

    /// An empty in-memory store.
    pub fn with_config(config: MemStoreConfig) -> Self {
        let start = config
            .initial_revision
            .unwrap_or_else(wall_clock_revision)
            .max(1);
        Self::from_core(Arc::new(Core::new(config, start, None)), None)
    }

    /// A durable store in `dir` (created if missing): recovers what the directory holds, or
    /// starts empty (at the wall-clock revision) if it holds nothing. Fails, naming the file
    /// and offset, on damage a crash cannot cause; a torn last write is dropped with a warning.
    pub fn open(dir: &Path, config: MemStoreConfig) -> std::result::Result<Self, OpenError> {
        Self::open_with(dir, config, Arc::new(wal::vfs::RealFs))
    }

    /// [`MemStore::open`] through the file layer `fs` (tests record or fail its operations).
    pub(crate) fn open_with(
        dir: &Path,
        config: MemStoreConfig,
        fs: Arc<dyn wal::vfs::Vfs>,
    ) -> std::result::Result<Self, OpenError> {
        let started = std::time::Instant::now();
        let initial = config
            .initial_revision
            .unwrap_or_else(wall_clock_revision)
            .max(1);
        let rec = wal::Log::open(
            fs,
            dir,
            config.segment_bytes.max(4096),
            config.snapshot_min_log_bytes,
            initial,
        )?;
        let wal::Recovered {
            log,
            writer,
            rev,
            compacted,
            snapshot,
            records,
            fresh,
        } = rec;
        // The revision before the first replayed write: the snapshot's, or the log's start.
        let start = match records.first() {
            Some(codec::Record::Put { rev, .. } | codec::Record::Delete { rev, .. }) => rev - 1,
            _ => rev,
        };
        let core = Arc::new(Core::new(config, start, Some(log)));
        let corrupt = |e: Error| OpenError::Corrupt {
            path: dir.to_owned(),
            offset: 0,
            message: e.to_string(),
        };
        let objects = snapshot.len();
        let replayed = records.len();
        // Snapshot state is at the snapshot's revision; the log continues from there.
        core.recover(snapshot, records, Instant::now())
            .map_err(corrupt)?;
        core.set_compacted(compacted.min(core.visible()))
            .map_err(corrupt)?;
        let store = Self::from_core(Arc::clone(&core), None);
        // Keys with a TTL get it again in full, as etcd renews leases after a restart.
        for part in core.partitions().map_err(corrupt)? {
            let st = part.state.read().map_err(|_| corrupt(poisoned()))?;
            for (k, versions) in &st.keys {
                if let Some(v) = versions.last() {
                    if let (Some(_), Some(ttl)) = (&v.value, v.ttl) {
                        store.queue_ttl(k, v.mod_rev, ttl);
                    }
                }
            }
        }
        let thread = std::thread::Builder::new()
            .name("memstore-log".into())
            .spawn({
                let core = Arc::clone(&core);
                move || wal::run(core, writer)
            })
            .map_err(|source| OpenError::Io {
                path: dir.to_owned(),
                source,
            })?;
        if let Ok(mut t) = store.life.log_thread.lock() {
            *t = Some(thread);
        }
        // Keys recovered with a TTL expire without waiting for a write to start the reaper
        // (which needs a runtime: opened outside one, the first write starts it).
        if tokio::runtime::Handle::try_current().is_ok() {
            store.ensure_reaper();
        }
        tracing::info!(
            dir = %dir.display(),
            fresh,
            revision = core.visible(),
            compacted = core.compacted(),
            snapshot_objects = objects,
            replayed_writes = replayed,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "embedded store opened"
        );
        Ok(store)
    }

    fn from_core(core: Arc<Core>, log_thread: Option<std::thread::JoinHandle<()>>) -> Self {
        Self {
            life: Arc::new(Life {
                core,
                ttl: std::sync::Mutex::new(BTreeMap::new()),
                ttl_wake: Arc::new(Notify::new()),
                reaper_started: AtomicBool::new(false),
                log_thread: std::sync::Mutex::new(log_thread),
            }),
        }
    }

    fn core(&self) -> &Core {
        &self.life.core
    }

    /// Whether writes go to a data directory.
    pub fn is_durable(&self) -> bool {
        self.core().logged
    }

    /// Compacts history: revisions below `revision` can no longer be read or watched from.
    pub fn compact(&self, revision: u64) -> Result<()> {
        self.core().compact(revision)
    }

    /// The revision of the last compaction (the store's initial revision if none).
    pub fn compacted_revision(&self) -> u64 {
        self.core().compacted()
    }

    /// The current revision.
    pub fn current_revision(&self) -> u64 {
        self.core().visible()
    }

    /// Bytes of history retained: what compaction can free (see
    /// [`MemStoreConfig::retain_bytes`]).
    pub fn history_bytes(&self) -> u64 {
        self.core().history_bytes()
    }

    /// Bytes of live objects held (keys and objects' JSON): what
    /// [`MemStoreConfig::quota_bytes`] bounds.
    pub fn live_bytes(&self) -> u64 {
        self.core().live_bytes()
    }

    /// Registers the store's metrics (`listwatch_memstore_*`: history bytes and revisions, the
    /// byte bound, current and compacted revision, compactions forced by the byte bound, and
    /// in durable mode log syncs, synced writes and bytes) in `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let m = &self.core().metrics;
        let r = registry.sub_registry_with_prefix("listwatch_memstore");
        r.register(
            "history_bytes",
            "Bytes of retained history (superseded and deleted objects, keys, per-revision cost)",
            m.history_bytes.clone(),
        );
        r.register(
            "history_revisions",
            "Revisions retained above the compaction revision",
            m.history_revisions.clone(),
        );
        r.register(
            "retain_bytes",
            "The history byte bound past which compaction is forced",
            m.retain_bytes.clone(),
        );
        r.register("revision", "The current revision", m.revision.clone());
        r.register(
            "live_bytes",
            "Bytes of live objects (keys and objects' JSON), what the quota bounds",
            m.live_bytes.clone(),
        );
        r.register(
            "quota_bytes",
            "The live-bytes quota (0: none)",
            m.quota_bytes.clone(),
        );
        r.register(
            "nospace_alarm",
            "1 while the NOSPACE alarm is raised (writes that add bytes are refused)",
            m.nospace.clone(),
        );
        r.register(
            "compacted_revision",
            "The compaction revision",
            m.compacted.clone(),
        );
        r.register(
            "compactions_by_bytes",
            "Compactions forced by the history byte bound",
            m.compactions_by_bytes.clone(),
        );
        if self.is_durable() {
            r.register(
                "log_syncs",
                "fdatasync calls of the write-ahead log (one per group commit)",
                m.log_syncs.clone(),
            );
            r.register(
                "log_synced_writes",
                "Writes made durable by the write-ahead log",
                m.log_synced_writes.clone(),
            );
            r.register(
                "log_bytes",
                "Bytes written to the write-ahead log",
                m.log_bytes.clone(),
            );
        }
    }

    fn partition(&self, key: &Key) -> Result<Arc<Partition>> {
        self.core().partition(resource_of(key.path()))
    }

    /// The newest applied live value of `key` (maybe not durable yet: see [`Self::settled`]).
    fn newest(&self, key: &Key) -> Result<Option<Object>> {
        let part = self.partition(key)?;
        let st = part.state.read().map_err(|_| poisoned())?;
        Ok(st.newest(key.path()).and_then(|v| v.value.clone()))
    }

    /// The newest revision of `key` (live or deleted), 0 if none.
    fn newest_rev(&self, key: &Key) -> Result<u64> {
        let part = self.partition(key)?;
        let st = part.state.read().map_err(|_| poisoned())?;
        Ok(st.newest(key.path()).map_or(0, |v| v.mod_rev))
    }

    /// Returns `r` once the key's newest version is durable: an answer derived from a
    /// version must never outlive a crash that loses it.
    async fn settled<T>(&self, key: &Key, r: Result<T>) -> Result<T> {
        let rev = self.newest_rev(key)?;
        self.core().settle(rev).await?;
        r
    }
}
