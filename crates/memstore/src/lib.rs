//! The embedded MVCC store: listwatch's default [`Storage`] backend, so that a server and most
//! tests run with nothing installed.
//!
//! It keeps etcd's semantics where the pipeline depends on them: one global revision that
//! every write increments; per-key history readable at any retained revision; compaction
//! (explicit, and automatic by a policy that keeps at least a time window and a number of
//! revisions); TTLs; watches from any retained revision, on a prefix or a single key, with the
//! previous value; progress notification on request and on an interval. A watch whose start
//! was compacted, or that falls behind compaction, ends with an `Expired` error.
//!
//! It sits directly above listwatch-storage and must never depend on etcd, HTTP or the cache.
//!
//! Locking: all state sits behind one `std::sync::RwLock`, held only for in-memory work and
//! never across an `.await`. Writers are serialized by it; readers and watcher tasks share it.
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

mod state;
mod watch;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::Object;
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, Preconditions, ResourceVersionMatch, Result,
    Stats, Storage, UpdateFn, Updated, ValidateDeleteFn, WatchStream, decode_continue,
    encode_continue,
};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use crate::state::State;
use crate::watch::{Tick, WatchSpec};

/// Configuration of a [`MemStore`].
#[derive(Debug, Clone)]
pub struct MemStoreConfig {
    /// How often an idle watch with progress notification gets a bookmark.
    pub progress_notify_interval: Duration,
    /// Automatic compaction keeps at least this many recent revisions...
    pub retain_revisions: u64,
    /// ...and at least every revision younger than this.
    pub retain_window: Duration,
    /// How many writes pass between two looks of the automatic compaction policy.
    pub compaction_check_every: u64,
    /// Capacity of each watcher's outgoing channel (events ready for its consumer).
    pub watch_channel_capacity: usize,
    /// The largest object stored (its JSON without resource version); a larger write is
    /// `RequestTooLarge` (413). Default: etcd's default request limit,
    /// [`listwatch_storage::DEFAULT_MAX_OBJECT_BYTES`], so that what this store accepts etcd
    /// accepts too. `None`: no limit.
    pub max_object_bytes: Option<usize>,
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
            compaction_check_every: 1024,
            watch_channel_capacity: 128,
            max_object_bytes: Some(listwatch_storage::DEFAULT_MAX_OBJECT_BYTES),
        }
    }
}

struct Shared {
    /// The MVCC state; see `state.rs` for its invariants.
    state: Arc<RwLock<State>>,
    /// Wakes idle watchers after writes and progress requests.
    ticks: tokio::sync::watch::Sender<Tick>,
    config: MemStoreConfig,
    /// Keys with a TTL: (deadline, key) → the revision whose write set it. It has its own
    /// lock, never held together with `state`'s.
    ttl: std::sync::Mutex<BTreeMap<(Instant, Arc<str>), u64>>,
    /// Wakes the TTL reaper when an earlier deadline appears.
    ttl_wake: Arc<Notify>,
    /// Whether the reaper task runs.
    reaper_started: std::sync::atomic::AtomicBool,
}

/// The embedded store. Cloning is cheap and shares the data.
#[derive(Clone)]
pub struct MemStore {
    shared: Arc<Shared>,
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
            .finish()
    }
}

impl MemStore {
    /// An empty store with the default configuration.
    pub fn new() -> Self {
        Self::with_config(MemStoreConfig::default())
    }

    /// An empty store.
    pub fn with_config(config: MemStoreConfig) -> Self {
        let (ticks, _) = tokio::sync::watch::channel(Tick::default());
        Self {
            shared: Arc::new(Shared {
                state: Arc::new(RwLock::new(State::default())),
                ticks,
                config,
                ttl: std::sync::Mutex::new(BTreeMap::new()),
                ttl_wake: Arc::new(Notify::new()),
                reaper_started: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    fn read(&self) -> Result<RwLockReadGuard<'_, State>> {
        self.shared
            .state
            .read()
            .map_err(|_| Error::internal("memstore lock poisoned"))
    }

    fn write_lock(&self) -> Result<RwLockWriteGuard<'_, State>> {
        self.shared
            .state
            .write()
            .map_err(|_| Error::internal("memstore lock poisoned"))
    }

    /// Compacts history: revisions below `revision` can no longer be read or watched from.
    pub fn compact(&self, revision: u64) -> Result<()> {
        self.write_lock()?.compact(revision)
    }

    /// The revision of the last compaction (1, the empty store's revision, if none).
    pub fn compacted_revision(&self) -> u64 {
        self.read().map(|s| s.compacted).unwrap_or(0)
    }

    /// The current revision.
    pub fn current_revision(&self) -> u64 {
        self.read().map(|s| s.rev).unwrap_or(0)
    }

    /// Writes `value` (or deletes) when the key's latest revision is still `expected`
    /// (0: absent). Returns the new revision, or `None` when the key moved on.
    fn commit(&self, key: &Key, expected: u64, value: Option<Object>) -> Result<Option<u64>> {
        if let (Some(v), Some(max)) = (&value, self.shared.config.max_object_bytes) {
            if v.size() > max {
                return Err(Error::object_too_large(v.size(), max));
            }
        }
        let now = Instant::now();
        let rev = {
            let mut s = self.write_lock()?;
            let actual = s.latest(key.path()).map_or(0, Object::resource_version);
            if actual != expected {
                return Ok(None);
            }
            let rev = s.write(key.path(), value, now);
            let c = &self.shared.config;
            if s.writes_since_policy >= c.compaction_check_every {
                s.auto_compact(c.retain_revisions, c.retain_window, now);
            }
            rev
        };
        self.shared.ticks.send_modify(|t| t.rev = rev);
        Ok(Some(rev))
    }

    fn schedule_ttl(&self, key: &Key, rev: u64, ttl: Duration) -> Result<()> {
        let deadline = Instant::now() + ttl;
        {
            let mut q = self
                .shared
                .ttl
                .lock()
                .map_err(|_| Error::internal("ttl lock poisoned"))?;
            q.insert((deadline, Arc::from(key.path())), rev);
        }
        self.shared.ttl_wake.notify_one();
        if !self
            .shared
            .reaper_started
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let wake = Arc::clone(&self.shared.ttl_wake);
            tokio::spawn(reap(Arc::downgrade(&self.shared), wake));
        }
        Ok(())
    }

    /// Where a list starts and at which revision it reads.
    fn list_plan(&self, s: &State, key: &Key, opts: &ListOptions) -> Result<(String, u64)> {
        if let Some(token) = &opts.continue_token {
            let (start, rev) = decode_continue(token, key.path())?;
            if rev < s.compacted {
                // Upstream lets the client carry on inconsistently, at the latest revision.
                let fresh = encode_continue(&start, key.path(), s.rev)?;
                return Err(Error::Expired {
                    message: "the provided continue parameter is too old to display a consistent \
                              list result; start a new list without the continue parameter, or use \
                              the continue token in this response to retrieve the remainder of the \
                              results (an inconsistent list)"
                        .into(),
                    continue_token: Some(fresh),
                });
            }
            if rev > s.rev {
                return Err(Error::TooLargeResourceVersion {
                    requested: rev,
                    current: s.rev,
                });
            }
            return Ok((start, rev));
        }
        let rev = match (opts.resource_version, opts.resource_version_match) {
            (None | Some(0), _) => s.rev,
            (Some(n), Some(ResourceVersionMatch::Exact)) => {
                if n > s.rev {
                    return Err(Error::TooLargeResourceVersion {
                        requested: n,
                        current: s.rev,
                    });
                }
                s.check_readable(n)?;
                n
            }
            (Some(n), _) => {
                if n > s.rev {
                    return Err(Error::TooLargeResourceVersion {
                        requested: n,
                        current: s.rev,
                    });
                }
                s.rev
            }
        };
        Ok((key.path().to_owned(), rev))
    }
}

/// Deletes keys whose TTL ran out, as DELETED events, until the store is dropped.
async fn reap(shared: Weak<Shared>, ttl_wake: Arc<Notify>) {
    loop {
        // Hold the store only while working, so dropping the store ends this task.
        let Some(sh) = shared.upgrade() else { return };
        let wake = ttl_wake.notified();
        let next = sh
            .ttl
            .lock()
            .ok()
            .and_then(|q| q.keys().next().map(|(d, _)| *d));
        let now = Instant::now();
        match next {
            Some(d) if d <= now => {
                let due = sh.ttl.lock().ok().and_then(|mut q| q.pop_first());
                if let Some(((_, path), rev)) = due {
                    let store = MemStore {
                        shared: Arc::clone(&sh),
                    };
                    // Delete only if nothing rewrote the key since the TTL was set.
                    let expected = store.read().ok().and_then(|s| {
                        s.latest(&path)
                            .map(Object::resource_version)
                            .filter(|r| *r == rev)
                    });
                    if let Some(rev) = expected {
                        let now = Instant::now();
                        if let Ok(mut s) = store.write_lock() {
                            let still = s.latest(&path).map(Object::resource_version) == Some(rev);
                            let new = still.then(|| s.write(&path, None, now));
                            drop(s);
                            if let Some(new) = new {
                                sh.ticks.send_modify(|t| t.rev = new);
                                tracing::debug!(key = %path, "ttl expired");
                            }
                        }
                    }
                }
            }
            Some(d) => {
                drop(sh);
                tokio::select! {
                    () = tokio::time::sleep_until(d) => {}
                    () = wake => {}
                }
            }
            None => {
                drop(sh);
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
        let Some(rev) = self.commit(key, 0, Some(obj.clone()))? else {
            return Err(key.already_exists());
        };
        if let Some(ttl) = ttl {
            self.schedule_ttl(key, rev, ttl)?;
        }
        Ok(obj.with_resource_version(rev))
    }

    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        let s = self.read()?;
        if let Some(n) = opts.resource_version.filter(|n| *n > s.rev) {
            return Err(too_large(n, s.rev));
        }
        match s.latest(key.path()) {
            Some(o) => Ok(Some(o.clone())),
            None if opts.ignore_not_found => Ok(None),
            None => Err(key.not_found()),
        }
    }

    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        opts.validate_list()?;
        let s = self.read()?;
        let (start, rev) = self.list_plan(&s, key, opts)?;
        let pred = &opts.predicate;
        if !key.is_collection() {
            let items = s
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
        let mut items = Vec::new();
        let mut range = s
            .keys
            .range::<str, _>((Bound::Included(start.as_str()), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .filter_map(|(k, _)| s.value_at(k, rev).map(|o| (k, o)));
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
            let remaining = if pred.is_empty() {
                range.count()
            } else {
                usize::from(range.next().is_some())
            };
            if remaining > 0 {
                if let Some(k) = last_key {
                    list.continue_token = Some(encode_continue(&format!("{k}\0"), prefix, rev)?);
                    if pred.is_empty() {
                        list.remaining_item_count = i64::try_from(remaining).ok();
                    }
                }
            }
        }
        Ok(list)
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        let shared = &self.shared;
        let ticks = shared.ticks.subscribe();
        let spec = {
            let s = self.read()?;
            let wants_state = match opts.send_initial_events {
                Some(send) => send,
                None => matches!(opts.resource_version, None | Some(0)),
            };
            let (cursor, initial) = if wants_state {
                if let Some(n) = opts.resource_version.filter(|n| *n > s.rev) {
                    return Err(too_large(n, s.rev));
                }
                let objects: Vec<Object> = if key.is_collection() {
                    s.keys
                        .range::<str, _>((Bound::Included(key.path()), Bound::Unbounded))
                        .take_while(|(k, _)| k.starts_with(key.path()))
                        .filter_map(|(_, v)| v.last()?.value.as_ref())
                        .filter(|o| opts.predicate.matches(o))
                        .cloned()
                        .collect()
                } else {
                    s.latest(key.path())
                        .filter(|o| opts.predicate.matches(o))
                        .cloned()
                        .into_iter()
                        .collect()
                };
                let end = opts.send_initial_events == Some(true) && opts.allow_watch_bookmarks;
                (s.rev, Some((objects, end)))
            } else {
                let from = opts.resource_version.filter(|n| *n > 0).unwrap_or(s.rev);
                s.check_readable(from)?;
                (from, None)
            };
            WatchSpec {
                key: key.clone(),
                predicate: opts.predicate.clone(),
                cursor,
                initial,
                bookmarks: opts.allow_watch_bookmarks && opts.progress_notify,
                progress_interval: shared.config.progress_notify_interval,
            }
        };
        let (tx, mut rx) = mpsc::channel(shared.config.watch_channel_capacity.max(1));
        tokio::spawn(watch::run(Arc::clone(&shared.state), ticks, spec, tx));
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
        let mut suggestion = suggestion;
        loop {
            // A suggestion is a cached copy that may be stale; anything it makes us decide
            // is re-checked against fresh data before it becomes an answer.
            let (current, from_suggestion) = match suggestion.take() {
                Some(s) => (Some(s), true),
                None => (self.read()?.latest(key.path()).cloned(), false),
            };
            let fresh = || -> Result<bool> {
                let latest = self
                    .read()?
                    .latest(key.path())
                    .map(Object::resource_version);
                Ok(latest == current.as_ref().map(Object::resource_version))
            };
            let Some(cur) = current.as_ref() else {
                if !ignore_not_found {
                    return Err(key.not_found());
                }
                let Updated { object: new, ttl } = update(None)?;
                match self.commit(key, 0, Some(new.clone()))? {
                    Some(rev) => {
                        if let Some(ttl) = ttl {
                            self.schedule_ttl(key, rev, ttl)?;
                        }
                        return Ok(new.with_resource_version(rev));
                    }
                    None => continue,
                }
            };
            if let Some(p) = preconditions {
                if let Err(e) = p.check(key, cur) {
                    if from_suggestion && !fresh()? {
                        continue;
                    }
                    return Err(e);
                }
            }
            let Updated { object: new, ttl } = match update(Some(cur)) {
                Ok(n) => n,
                Err(e) if from_suggestion && !fresh()? => {
                    tracing::trace!(error = %e, "update failed on a stale suggestion; retrying");
                    continue;
                }
                Err(e) => return Err(e),
            };
            if new.same_content(cur) {
                if from_suggestion && !fresh()? {
                    continue;
                }
                return Ok(cur.clone());
            }
            if let Some(rev) = self.commit(key, cur.resource_version(), Some(new.clone()))? {
                // A TTL set earlier ends with this write (the reaper checks the revision).
                if let Some(ttl) = ttl {
                    self.schedule_ttl(key, rev, ttl)?;
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
                None => (self.read()?.latest(key.path()).cloned(), false),
            };
            let Some(cur) = current else {
                return Err(key.not_found());
            };
            let checked = preconditions
                .map_or(Ok(()), |p| p.check(key, &cur))
                .and_then(|()| validate(&cur));
            if let Err(e) = checked {
                let latest = self
                    .read()?
                    .latest(key.path())
                    .map(Object::resource_version);
                if from_suggestion && latest != Some(cur.resource_version()) {
                    continue;
                }
                return Err(e);
            }
            if let Some(rev) = self.commit(key, cur.resource_version(), None)? {
                return Ok(cur.with_resource_version(rev));
            }
        }
    }

    async fn stats(&self, key: &Key) -> Result<Stats> {
        let s = self.read()?;
        let count = if key.is_collection() {
            s.keys
                .range::<str, _>((Bound::Included(key.path()), Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(key.path()))
                .filter(|(_, v)| v.last().is_some_and(|v| v.value.is_some()))
                .count()
        } else {
            usize::from(s.latest(key.path()).is_some())
        };
        Ok(Stats {
            object_count: count as u64,
        })
    }

    async fn request_watch_progress(&self) -> Result<()> {
        self.shared.ticks.send_modify(|t| t.progress_requests += 1);
        Ok(())
    }

    async fn current_resource_version(&self) -> Result<u64> {
        Ok(self.read()?.rev)
    }

    async fn readiness(&self) -> Result<()> {
        self.read().map(|_| ())
    }

    fn compacted_revision(&self) -> u64 {
        MemStore::compacted_revision(self)
    }

    fn max_object_bytes(&self) -> Option<usize> {
        self.shared.config.max_object_bytes
    }
}
