//! The embedded MVCC store: listwatch's default [`Storage`] backend, so that a server and most
//! tests run with nothing installed — in memory, or durable in a data directory.
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
//! Durability ([`MemStore::open`]): every write is appended to a write-ahead log and
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
mod part;
mod wal;
mod watch;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use listwatch_api::Object;
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, Preconditions, ResourceVersionMatch, Result,
    Stats, Storage, UpdateFn, Updated, ValidateDeleteFn, WatchStream, decode_continue,
    encode_continue,
};
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::core::Core;
use crate::part::{PartState, Partition, resource_of};
use crate::watch::WatchSpec;

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
            initial_revision: None,
            segment_bytes: 64 << 20,
            snapshot_min_log_bytes: 64 << 20,
        }
    }
}

/// Microseconds since the Unix epoch (at least 1).
fn wall_clock_revision() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
        .unwrap_or(1)
        .max(1)
}

/// Keys with a TTL: (deadline, key) → the revision whose write set it.
type TtlQueue = BTreeMap<(Instant, Arc<str>), u64>;

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
                // The thread flushes what is queued, then ends; nothing to wait for after.
                let _ = t.join();
            }
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
        let started = std::time::Instant::now();
        let initial = config
            .initial_revision
            .unwrap_or_else(wall_clock_revision)
            .max(1);
        let rec = wal::Log::open(
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

    fn queue_ttl(&self, key: &str, rev: u64, ttl: Duration) {
        let deadline = Instant::now() + ttl;
        if let Ok(mut q) = self.life.ttl.lock() {
            q.insert((deadline, Arc::from(key)), rev);
        }
        self.life.ttl_wake.notify_one();
    }

    fn schedule_ttl(&self, key: &Key, rev: u64, ttl: Duration) {
        self.queue_ttl(key.path(), rev, ttl);
        self.ensure_reaper();
    }

    /// Starts the TTL reaper (needs a runtime: called from the async methods).
    fn ensure_reaper(&self) {
        if self.life.reaper_started.load(Ordering::Acquire)
            || self.life.ttl.lock().map(|q| q.is_empty()).unwrap_or(true)
        {
            return;
        }
        if !self.life.reaper_started.swap(true, Ordering::AcqRel) {
            tokio::spawn(reap(Arc::downgrade(&self.life)));
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

    /// Where a list starts and at which revision it reads (under the partition's lock, so
    /// that compaction cannot pass the revision while the list reads it).
    fn list_plan(&self, st: &PartState, key: &Key, opts: &ListOptions) -> Result<(String, u64)> {
        let _ = st;
        let core = self.core();
        let current = core.visible();
        let compacted = core.compacted();
        if let Some(token) = &opts.continue_token {
            let (start, rev) = decode_continue(token, key.path())?;
            if rev < compacted {
                // Upstream lets the client carry on inconsistently, at the latest revision.
                let fresh = encode_continue(&start, key.path(), current)?;
                return Err(Error::Expired {
                    message: "the provided continue parameter is too old to display a consistent \
                              list result; start a new list without the continue parameter, or use \
                              the continue token in this response to retrieve the remainder of the \
                              results (an inconsistent list)"
                        .into(),
                    continue_token: Some(fresh),
                });
            }
            if rev > current {
                return Err(too_large(rev, current));
            }
            return Ok((start, rev));
        }
        // Upstream's "legacy exact match": a version without a match but with a limit reads
        // exactly at that version, as etcd3 does (so that the pages of a walk line up).
        let exact = match opts.resource_version_match {
            Some(ResourceVersionMatch::Exact) => true,
            None => opts.page_limit().is_some(),
            Some(_) => false,
        };
        let rev = match opts.resource_version {
            None | Some(0) => current,
            Some(n) if exact => {
                if n > current {
                    return Err(too_large(n, current));
                }
                if n < compacted {
                    return Err(Error::too_old(n, compacted));
                }
                n
            }
            Some(n) => {
                if n > current {
                    return Err(too_large(n, current));
                }
                current
            }
        };
        Ok((key.path().to_owned(), rev))
    }
}

/// Deletes keys whose TTL ran out, as DELETED events, until the store is dropped.
async fn reap(life: Weak<Life>) {
    loop {
        // Hold the store only while working, so dropping the store ends this task.
        let Some(l) = life.upgrade() else { return };
        let store = MemStore { life: l };
        let notify = Arc::clone(&store.life.ttl_wake);
        let wake = notify.notified();
        let next = store
            .life
            .ttl
            .lock()
            .ok()
            .and_then(|q| q.keys().next().map(|(d, _)| *d));
        let now = Instant::now();
        match next {
            Some(d) if d <= now => {
                let due = store.life.ttl.lock().ok().and_then(|mut q| q.pop_first());
                if let Some(((_, path), rev)) = due {
                    // Delete only if nothing rewrote the key since the TTL was set.
                    match store.core().commit(&path, rev, None, None).await {
                        Ok(Ok(_)) => tracing::debug!(key = %path, "ttl expired"),
                        Ok(Err(_)) => {}
                        Err(e) => tracing::warn!(key = %path, error = %e, "ttl expiry failed"),
                    }
                }
            }
            Some(d) => {
                drop(store);
                tokio::select! {
                    () = tokio::time::sleep_until(d) => {}
                    () = wake => {}
                }
            }
            None => {
                drop(store);
                // Re-check now and then so a dropped store ends this task.
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = wake => {}
                }
            }
        }
    }
}

fn too_large(requested: u64, current: u64) -> Error {
    Error::TooLargeResourceVersion { requested, current }
}

#[async_trait]
impl Storage for MemStore {
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object> {
        if key.is_collection() {
            return Err(Error::bad_request(
                "create needs an object key, not a collection",
            ));
        }
        if obj.resource_version() != 0 {
            return Err(Error::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let Ok(rev) = self
            .core()
            .commit(key.path(), 0, Some(obj.clone()), ttl)
            .await?
        else {
            return Err(key.already_exists());
        };
        if let Some(ttl) = ttl {
            self.schedule_ttl(key, rev, ttl);
        }
        Ok(obj.with_resource_version(rev))
    }

    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        let current = self.core().visible();
        if let Some(n) = opts.resource_version.filter(|n| *n > current) {
            return Err(too_large(n, current));
        }
        let found = match self.core().existing_partition(resource_of(key.path()))? {
            Some(part) => part
                .state
                .read()
                .map_err(|_| poisoned())?
                .value_at(key.path(), current)
                .cloned(),
            None => None,
        };
        match found {
            Some(o) => Ok(Some(o)),
            None if opts.ignore_not_found => Ok(None),
            None => Err(key.not_found()),
        }
    }

    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        opts.validate_list()?;
        let part = self.partition(key)?;
        let st = part.state.read().map_err(|_| poisoned())?;
        let (start, rev) = self.list_plan(&st, key, opts)?;
        let pred = &opts.predicate;
        if !key.is_collection() {
            let items = st
                .value_at(key.path(), rev)
                .filter(|o| pred.matches(o))
                .cloned();
            return Ok(ObjectList {
                items: items.into_iter().collect(),
                resource_version: rev,
                ..Default::default()
            });
        }
        let limit = opts.page_limit().and_then(|l| usize::try_from(l).ok());
        let prefix = key.path();
        // Without a selector a paginated list reports how many objects remain. That count is
        // remembered per walk, so each page costs its own objects (see `CountMemo`).
        let counted = match (limit, pred.is_empty()) {
            (Some(_), true) => {
                let memo = part
                    .memo
                    .lock()
                    .ok()
                    .and_then(|mut m| m.take(prefix, rev, &start));
                Some(memo.unwrap_or_else(|| st.live_from(prefix, &start, rev).count() as u64))
            }
            _ => None,
        };
        let mut items = Vec::new();
        let mut range = st.live_from(prefix, &start, rev);
        let mut last_key = None;
        for (k, o) in range.by_ref() {
            if pred.matches(o) {
                items.push(o.clone());
            }
            last_key = Some(k);
            if limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
        let mut list = ObjectList {
            items,
            resource_version: rev,
            ..Default::default()
        };
        if limit.is_some() {
            let remaining = match counted {
                Some(total) => total.saturating_sub(list.items.len() as u64),
                // With a selector: whether anything at all follows (the next page reads the
                // same keys again, so a walk still reads each key at most twice).
                None => u64::from(range.next().is_some()),
            };
            if remaining > 0 {
                if let Some(k) = last_key {
                    let next = format!("{k}\0");
                    list.continue_token = Some(encode_continue(&next, prefix, rev)?);
                    if counted.is_some() {
                        list.remaining_item_count = i64::try_from(remaining).ok();
                        if let Ok(mut m) = part.memo.lock() {
                            m.put(prefix, rev, &next, remaining);
                        }
                    }
                }
            }
        }
        Ok(list)
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        let core = Arc::clone(&self.life.core);
        let part = self.partition(key)?;
        // Subscribe before reading, so that no write between the read and the wait is missed.
        let ticks = part.subscribe(key.path(), key.is_collection());
        let progress = core.progress.subscribe();
        let spec = {
            let st = part.state.read().map_err(|_| poisoned())?;
            let current = core.visible();
            let wants_state = match opts.send_initial_events {
                Some(send) => send,
                None => matches!(opts.resource_version, None | Some(0)),
            };
            let (cursor, initial) = if wants_state {
                if let Some(n) = opts.resource_version.filter(|n| *n > current) {
                    return Err(too_large(n, current));
                }
                let objects: Vec<Object> = if key.is_collection() {
                    st.live_from(key.path(), key.path(), current)
                        .map(|(_, o)| o)
                        .filter(|o| opts.predicate.matches(o))
                        .cloned()
                        .collect()
                } else {
                    st.value_at(key.path(), current)
                        .filter(|o| opts.predicate.matches(o))
                        .cloned()
                        .into_iter()
                        .collect()
                };
                let end = opts.send_initial_events == Some(true) && opts.allow_watch_bookmarks;
                (current, Some((objects, end)))
            } else {
                let from = opts.resource_version.filter(|n| *n > 0).unwrap_or(current);
                let compacted = core.compacted();
                if from < compacted {
                    return Err(Error::too_old(from, compacted));
                }
                (from, None)
            };
            WatchSpec {
                key: key.clone(),
                predicate: opts.predicate.clone(),
                cursor,
                initial,
                bookmarks: opts.allow_watch_bookmarks && opts.progress_notify,
                progress_interval: core.config.progress_notify_interval,
            }
        };
        let (tx, mut rx) = mpsc::channel(core.config.watch_channel_capacity.max(1));
        tokio::spawn(watch::run(core, part, ticks, progress, spec, tx));
        Ok(Box::pin(futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx)
        })))
    }

    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        self.ensure_reaper();
        let mut suggestion = suggestion;
        loop {
            // A suggestion is a cached copy that may be stale; anything it makes us decide
            // is re-checked against fresh data before it becomes an answer. Fresh data may
            // not be durable yet: answers derived from it wait until it is (`settled`).
            let (current, from_suggestion) = match suggestion.take() {
                Some(s) => (Some(s), true),
                None => (self.newest(key)?, false),
            };
            let fresh = || -> Result<bool> {
                let latest = self.newest(key)?.map(|o| o.resource_version());
                Ok(latest == current.as_ref().map(Object::resource_version))
            };
            let Some(cur) = current.as_ref() else {
                if !ignore_not_found {
                    return self.settled(key, Err(key.not_found())).await;
                }
                let Updated { object: new, ttl } = match update(None) {
                    Ok(n) => n,
                    Err(e) => return self.settled(key, Err(e)).await,
                };
                match self
                    .core()
                    .commit(key.path(), 0, Some(new.clone()), ttl)
                    .await?
                {
                    Ok(rev) => {
                        if let Some(ttl) = ttl {
                            self.schedule_ttl(key, rev, ttl);
                        }
                        return Ok(new.with_resource_version(rev));
                    }
                    Err(_) => continue,
                }
            };
            if let Some(p) = preconditions {
                if let Err(e) = p.check(key, cur) {
                    if from_suggestion && !fresh()? {
                        continue;
                    }
                    return self.settled(key, Err(e)).await;
                }
            }
            let Updated { object: new, ttl } = match update(Some(cur)) {
                Ok(n) => n,
                Err(e) if from_suggestion && !fresh()? => {
                    tracing::trace!(error = %e, "update failed on a stale suggestion; retrying");
                    continue;
                }
                Err(e) => return self.settled(key, Err(e)).await,
            };
            if new.same_content(cur) {
                if from_suggestion && !fresh()? {
                    continue;
                }
                return self.settled(key, Ok(cur.clone())).await;
            }
            let expected = cur.resource_version();
            if let Ok(rev) = self
                .core()
                .commit(key.path(), expected, Some(new.clone()), ttl)
                .await?
            {
                // A TTL set earlier ends with this write (the reaper checks the revision).
                if let Some(ttl) = ttl {
                    self.schedule_ttl(key, rev, ttl);
                }
                return Ok(new.with_resource_version(rev));
            }
        }
    }

    async fn delete(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        validate: &ValidateDeleteFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let mut suggestion = suggestion;
        loop {
            let (current, from_suggestion) = match suggestion.take() {
                Some(s) => (Some(s), true),
                None => (self.newest(key)?, false),
            };
            let Some(cur) = current else {
                return self.settled(key, Err(key.not_found())).await;
            };
            let checked = preconditions
                .map_or(Ok(()), |p| p.check(key, &cur))
                .and_then(|()| validate(&cur));
            if let Err(e) = checked {
                let latest = self.newest(key)?.map(|o| o.resource_version());
                if from_suggestion && latest != Some(cur.resource_version()) {
                    continue;
                }
                return self.settled(key, Err(e)).await;
            }
            if let Ok(rev) = self
                .core()
                .commit(key.path(), cur.resource_version(), None, None)
                .await?
            {
                return Ok(cur.with_resource_version(rev));
            }
        }
    }

    async fn stats(&self, key: &Key) -> Result<Stats> {
        let Some(part) = self.core().existing_partition(resource_of(key.path()))? else {
            return Ok(Stats::default());
        };
        let st = part.state.read().map_err(|_| poisoned())?;
        let current = self.core().visible();
        let count = if key.is_collection() {
            st.live_from(key.path(), key.path(), current).count()
        } else {
            usize::from(st.value_at(key.path(), current).is_some())
        };
        Ok(Stats {
            object_count: count as u64,
        })
    }

    async fn request_watch_progress(&self) -> Result<()> {
        self.core().progress.send_modify(|n| *n += 1);
        Ok(())
    }

    async fn current_resource_version(&self) -> Result<u64> {
        Ok(self.core().visible())
    }

    async fn readiness(&self) -> Result<()> {
        match self.core().failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn compacted_revision(&self) -> u64 {
        MemStore::compacted_revision(self)
    }

    fn max_object_bytes(&self) -> Option<usize> {
        self.core().config.max_object_bytes
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use listwatch_api::{Object, SelectableFields};
    use listwatch_storage::{Key, ListOptions, Storage};

    use super::MemStore;
    use crate::part::VISITS;

    fn obj(name: &str) -> Object {
        let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns"}});
        Object::from_value(v, &SelectableFields::none()).unwrap_or_else(|e| panic!("{e}"))
    }

    async fn create(store: &MemStore, resource: &str, ns: &str, name: &str) -> u64 {
        let key = Key::object(resource, Some(ns), name).unwrap_or_else(|e| panic!("{e}"));
        match store.create(&key, obj(name), None).await {
            Ok(o) => o.resource_version(),
            Err(e) => panic!("{e}"),
        }
    }

    /// Regression: each page used to count the whole remaining range (O(n²/limit) a walk).
    #[tokio::test]
    async fn a_paginated_walk_reads_each_key_a_bounded_number_of_times() {
        let store = MemStore::new();
        const N: usize = 2000;
        for i in 0..N {
            create(&store, "pods", "ns", &format!("p{i:05}")).await;
        }
        let all = Key::collection("pods", None).unwrap_or_else(|e| panic!("{e}"));
        VISITS.with(|v| v.set(0));
        let mut opts = ListOptions {
            limit: Some(10),
            ..ListOptions::recursive()
        };
        let mut seen = 0;
        loop {
            let page = store
                .list(&all, &opts)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            seen += page.items.len();
            let left = page.remaining_item_count.unwrap_or(0) as usize;
            assert_eq!(left, N - seen, "remaining count after {seen}");
            match page.continue_token {
                Some(t) => opts.continue_token = Some(t),
                None => break,
            }
        }
        assert_eq!(seen, N);
        let visits = VISITS.with(std::cell::Cell::get);
        // One count of the range on the first page, then each page's own keys.
        assert!(
            visits <= 3 * N as u64,
            "{visits} key reads for a walk of {N}"
        );
    }

    /// Regression: every write used to wake every watcher of every resource.
    #[tokio::test]
    async fn a_write_wakes_only_watchers_of_its_resource_and_namespace() {
        let store = MemStore::new();
        create(&store, "pods", "a", "x").await;
        create(&store, "leases", "a", "x").await;
        let pods = store
            .core()
            .partition("pods")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut all_pods = pods.subscribe("/pods/", true);
        let mut ns_a = pods.subscribe("/pods/a/", true);
        let mut one_in_a = pods.subscribe("/pods/a/x", false);
        let mut ns_b = pods.subscribe("/pods/b/", true);
        for rx in [&mut all_pods, &mut ns_a, &mut one_in_a, &mut ns_b] {
            rx.borrow_and_update();
        }
        create(&store, "leases", "a", "y").await;
        for rx in [&all_pods, &ns_a, &one_in_a, &ns_b] {
            assert!(
                !rx.has_changed().unwrap_or(true),
                "a lease write woke a pod watcher"
            );
        }
        create(&store, "pods", "b", "y").await;
        assert!(all_pods.has_changed().unwrap_or(false));
        assert!(ns_b.has_changed().unwrap_or(false));
        assert!(
            !ns_a.has_changed().unwrap_or(true),
            "a write in b woke a watcher of a"
        );
        assert!(!one_in_a.has_changed().unwrap_or(true));
        create(&store, "pods", "a", "z").await;
        assert!(ns_a.has_changed().unwrap_or(false));
        assert!(one_in_a.has_changed().unwrap_or(false));
    }

    /// Regression: one global lock made every write wait for any list of any resource.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_to_one_resource_do_not_wait_for_readers_of_another() {
        let store = MemStore::new();
        create(&store, "pods", "ns", "p").await;
        let pods = store
            .core()
            .partition("pods")
            .unwrap_or_else(|e| panic!("{e}"));
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn({
            let pods = Arc::clone(&pods);
            move || {
                let _reading = pods.state.read();
                let _ = held_tx.send(());
                let _ = release_rx.recv_timeout(Duration::from_secs(30));
            }
        });
        held_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}"));
        // A pod list is in progress (its read lock is held); a lease write goes through.
        let wrote =
            tokio::time::timeout(Duration::from_secs(10), create(&store, "leases", "ns", "l"))
                .await;
        let _ = release_tx.send(());
        let _ = holder.join();
        assert!(wrote.is_ok(), "a lease write waited for a pod reader");
    }
}
