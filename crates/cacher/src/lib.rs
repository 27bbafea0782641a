//! The cacher: a [`Storage`] served from a watch cache over another [`Storage`], with the
//! dispatcher that fans each event out to many watchers.
//!
//! One [`Cacher`] serves one resource. Inside it:
//! - a reflector (listwatch-client's, over an in-process lister-watcher on the backend) lists
//!   and watches the backend and feeds a `listwatch_watchcache::WatchCache`;
//! - each event then goes, in order, to the dispatcher, which hands it to the watchers it
//!   concerns (see `dispatch` for indexes, budgets and stall-and-resume);
//! - reads are served from the cache when their resource-version semantics allow it, and
//!   delegated to the backend otherwise; writes always go to the backend, with the cached
//!   object as a suggestion.
//!
//! It sits above listwatch-storage, listwatch-watchcache and listwatch-client, below the
//! endpoints; it must never depend on a concrete backend or on HTTP.
//!
//! Readiness goes Pending → Ready (a generation number counts each Ready) → Stopped, and
//! back to Pending while the reflector relists. While not ready, watches fail with 429 and a
//! retry-after growing with the downtime; gets and lists go to the backend.
//!
//! ```no_run
//! use std::sync::Arc;
//! use listwatch_cacher::{Cacher, CacherConfig};
//! use listwatch_memstore::MemStore;
//! use listwatch_storage::{Key, ListOptions, Storage};
//!
//! # async fn demo() -> listwatch_storage::Result<()> {
//! let backend = Arc::new(MemStore::new());
//! let pods = Cacher::new(backend, CacherConfig::new("pods").with_trigger("spec.nodeName"));
//! pods.wait_ready().await;
//! let list = pods.list(&Key::collection("pods", None)?, &ListOptions::recursive()).await?;
//! # Ok(()) }
//! ```

mod dispatch;
mod lw;
mod metrics;
mod watcher;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_client::Event as ReflectorEvent;
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, Preconditions, ResourceVersionMatch, Result,
    Stats, Storage, UpdateFn, ValidateDeleteFn, WatchEvent, WatchStream,
};
use listwatch_watchcache::{Index, WatchCache, WatchCacheReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

pub use crate::lw::StorageListerWatcher;
pub use crate::metrics::{CacherMetrics, ResourceLabel};

use crate::dispatch::{DispatchConfig, Dispatcher, Incoming, Registry};
use crate::metrics::ResourceMetrics;
use crate::watcher::{Spec, Start};

/// Configuration of one [`Cacher`]. [`CacherConfig::new`] mirrors upstream's constants.
#[derive(Clone)]
pub struct CacherConfig {
    /// The resource (the key's first segment), e.g. `pods`.
    pub resource: String,
    /// The field whose exact-match selector indexes watchers (pods: `spec.nodeName`).
    pub trigger_field: Option<String>,
    /// The watch cache's configuration (window sizes, indexes, freshness timeout).
    pub watch_cache: listwatch_watchcache::Config,
    /// Detach slow watchers and let them catch up from the window instead of closing them.
    pub stall_resume: bool,
    /// Most time the dispatcher may wait on blocked watchers (upstream: 100 ms)...
    pub max_dispatch_budget: Duration,
    /// ...refilled at this much per second (upstream: 50 ms).
    pub budget_refill_per_sec: Duration,
    /// A watcher with bookmarks gets one this often (upstream: 1 minute).
    pub bookmark_frequency: Duration,
    /// The bookmark timer's period, jittered ±25 % (upstream: 1 s).
    pub bookmark_tick: Duration,
    /// Events queued between the cache and the dispatcher (upstream: 100).
    pub incoming_queue: usize,
    /// While a consistent read waits, progress is requested this often (upstream: 100 ms).
    pub progress_request_interval: Duration,
    /// Page size of the reflector's lists of the backend (upstream: 10 000).
    pub list_page_size: u32,
    /// How often the backend's compaction revision is read, to drop cached history no read
    /// may use any more (upstream `compactorPollPeriod`, 15 s). Reads and watches at a past
    /// revision check it themselves, at once.
    pub compaction_poll_interval: Duration,
    /// Serve consistent lists (no resource version) from the cache once it has caught up
    /// with the backend's revision. Turn it off for a backend whose progress notifications
    /// cannot be requested reliably (etcd before 3.5.13, see docs/etcd.md): the wait would
    /// otherwise run into its 3 s limit on quiet resources. Upstream gates this the same way.
    pub consistent_reads_from_cache: bool,
    /// Where the metrics go.
    pub metrics: CacherMetrics,
}

impl CacherConfig {
    /// The configuration for `resource`, with a namespace index and upstream's constants.
    pub fn new(resource: impl Into<String>) -> Self {
        let resource = resource.into();
        Self {
            watch_cache: listwatch_watchcache::Config::new(resource.clone())
                .with_index(Index::namespace()),
            resource,
            trigger_field: None,
            stall_resume: true,
            max_dispatch_budget: Duration::from_millis(100),
            budget_refill_per_sec: Duration::from_millis(50),
            bookmark_frequency: Duration::from_secs(60),
            bookmark_tick: Duration::from_secs(1),
            incoming_queue: 100,
            progress_request_interval: Duration::from_millis(100),
            list_page_size: 10_000,
            compaction_poll_interval: Duration::from_secs(15),
            consistent_reads_from_cache: true,
            metrics: CacherMetrics::default(),
        }
    }

    /// Indexes the cache and the watchers by `field` (an exact-match field selector on it
    /// then reads only its index and reaches only its watchers).
    #[must_use]
    pub fn with_trigger(mut self, field: &str) -> Self {
        self.watch_cache = self.watch_cache.with_index(Index::field(field));
        self.trigger_field = Some(field.to_owned());
        self
    }

    /// Sets the metrics families.
    #[must_use]
    pub fn with_metrics(mut self, metrics: CacherMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Turns stall-and-resume on or off.
    #[must_use]
    pub fn with_stall_resume(mut self, on: bool) -> Self {
        self.stall_resume = on;
        self
    }

    /// Changes the watch cache's configuration.
    #[must_use]
    pub fn with_watch_cache(
        mut self,
        f: impl FnOnce(listwatch_watchcache::Config) -> listwatch_watchcache::Config,
    ) -> Self {
        self.watch_cache = f(self.watch_cache);
        self
    }
}

/// Where the cacher is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyState {
    /// Listing the backend; not serving watches.
    Pending,
    /// Serving from the cache.
    Ready,
    /// Stopped for good.
    Stopped,
}

#[derive(Debug, Clone, Copy)]
struct Readiness {
    state: ReadyState,
    /// Bumped on every transition to Ready.
    generation: u64,
    /// When `state` was entered.
    since: Instant,
}

pub(crate) struct Inner {
    backend: Arc<dyn Storage>,
    config: CacherConfig,
    reader: WatchCacheReader,
    registry: Arc<Registry>,
    ready: watch::Sender<Readiness>,
    metrics: ResourceMetrics,
    epoch: Instant,
    stop: watch::Sender<bool>,
}

impl Inner {
    /// Per-watcher buffer size, as upstream sizes it: about a second of history, at least
    /// 10, at most 10 with a trigger, 1000 with an index but no trigger, 100 without index.
    fn watcher_buffer(&self, trigger_used: bool) -> usize {
        let capacity = self.reader.view().capacity();
        let freshness = self.config.watch_cache.event_freshness.as_secs().max(1);
        let size = capacity
            .div_ceil(usize::try_from(freshness).unwrap_or(75))
            .max(10);
        let max = match (self.config.trigger_field.is_some(), trigger_used) {
            (true, true) => 10,
            (true, false) => 1000,
            (false, _) => 100,
        };
        size.min(max)
    }

    /// `Expired` when the backend's history below `rv` is compacted away: reads and watches
    /// at such a version fail as they would on the backend, even where the cache still
    /// holds what they ask for.
    fn check_compacted(&self, rv: u64) -> Result<()> {
        let compacted = self.backend.compacted_revision();
        if rv < compacted {
            Err(Error::too_old(rv, compacted))
        } else {
            Ok(())
        }
    }

    fn not_ready(&self) -> Option<Error> {
        let r = *self.ready.borrow();
        match r.state {
            ReadyState::Ready => None,
            ReadyState::Stopped => Some(Error::NotReady {
                message: format!("the cache of {} is stopped", self.config.resource),
                retry_after_seconds: 1,
            }),
            ReadyState::Pending => {
                // Upstream: clamp(exp(0.06 × downtime), 1, 30) seconds.
                let secs = (0.06 * r.since.elapsed().as_secs_f64())
                    .exp()
                    .clamp(1.0, 30.0);
                Some(Error::NotReady {
                    message: format!("the cache of {} is not ready yet", self.config.resource),
                    retry_after_seconds: secs.ceil() as u32,
                })
            }
        }
    }

    fn set_ready(&self, state: ReadyState) {
        self.ready.send_modify(|r| {
            if r.state == state {
                return;
            }
            if state == ReadyState::Ready {
                r.generation += 1;
            }
            r.state = state;
            r.since = Instant::now();
        });
    }

    /// Waits until the cache has caught up with the backend's current revision.
    async fn wait_consistent(&self) -> Result<Arc<listwatch_watchcache::CacheView>> {
        let rv = self.backend.current_resource_version().await?;
        let lag = rv.saturating_sub(self.reader.resource_version());
        self.metrics
            .cache_lag
            .set(i64::try_from(lag).unwrap_or(i64::MAX));
        self.reader.wait_until_fresh(rv, None).await
    }
}

/// Stops the background tasks when the last [`Cacher`] handle goes.
struct StopOnDrop(Arc<Inner>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.set_ready(ReadyState::Stopped);
        let _ = self.0.stop.send(true);
    }
}

/// A [`Storage`] served from a watch cache over `backend`. Cheap to clone.
#[derive(Clone)]
pub struct Cacher {
    inner: Arc<Inner>,
    _stop: Arc<StopOnDrop>,
}

impl std::fmt::Debug for Cacher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cacher")
            .field("resource", &self.inner.config.resource)
            .field("state", &self.ready_state())
            .finish()
    }
}

impl Cacher {
    /// Starts caching `config.resource` of `backend`. Must be called within a tokio runtime.
    pub fn new(backend: Arc<dyn Storage>, config: CacherConfig) -> Self {
        let cache = WatchCache::new(config.watch_cache.clone());
        let (ready, _) = watch::channel(Readiness {
            state: ReadyState::Pending,
            generation: 0,
            since: Instant::now(),
        });
        let (stop, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            backend,
            reader: cache.reader(),
            registry: Arc::new(Registry::default()),
            ready,
            metrics: config.metrics.for_resource(&config.resource),
            epoch: Instant::now(),
            stop,
            config,
        });
        let (tx, rx) = mpsc::channel(inner.config.incoming_queue.max(1));
        let dispatcher = Dispatcher::new(
            Arc::clone(&inner.registry),
            DispatchConfig {
                trigger_field: inner.config.trigger_field.clone(),
                stall_resume: inner.config.stall_resume,
                max_budget: inner.config.max_dispatch_budget,
                budget_refill_per_sec: inner.config.budget_refill_per_sec,
                bookmark_frequency: inner.config.bookmark_frequency,
                bookmark_tick: inner.config.bookmark_tick,
            },
            inner.metrics.clone(),
            inner.epoch,
        );
        tokio::spawn(dispatcher.run(rx, inner.stop.subscribe()));
        tokio::spawn(feed(Arc::clone(&inner), cache, tx));
        tokio::spawn(request_progress(Arc::clone(&inner)));
        Self {
            _stop: Arc::new(StopOnDrop(Arc::clone(&inner))),
            inner,
        }
    }

    /// The readiness state and how many times the cache became ready.
    pub fn ready_state(&self) -> (ReadyState, u64) {
        let r = *self.inner.ready.borrow();
        (r.state, r.generation)
    }

    /// Waits until the cache is ready (or stopped).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_ready(&self) {
        let mut rx = self.inner.ready.subscribe();
        let _ = rx.wait_for(|r| r.state != ReadyState::Pending).await;
    }

    /// The cache's current resource version.
    pub fn cache_resource_version(&self) -> u64 {
        self.inner.reader.resource_version()
    }

    /// Waits (at most the watch cache's freshness timeout, 3 s) until the cache has seen
    /// `rv`; `TooLargeResourceVersion` otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn wait_until_fresh(&self, rv: u64) -> Result<()> {
        self.inner
            .reader
            .wait_until_fresh(rv, None)
            .await
            .map(|_| ())
    }

    /// How many watchers are registered with the dispatcher.
    pub fn watcher_count(&self) -> usize {
        self.inner.registry.lock().len()
    }

    /// The backend this cacher reads through.
    pub fn backend(&self) -> &Arc<dyn Storage> {
        &self.inner.backend
    }

    fn cached(&self, key: &Key) -> Option<Object> {
        if self.inner.not_ready().is_some() || key.is_collection() {
            return None;
        }
        self.inner
            .reader
            .view()
            .get(
                key,
                &GetOptions {
                    ignore_not_found: true,
                    ..Default::default()
                },
            )
            .ok()
            .flatten()
    }
}

/// Lists and watches the backend through the client reflector and feeds cache and dispatcher.
async fn feed(inner: Arc<Inner>, mut cache: WatchCache, tx: mpsc::Sender<Incoming>) {
    let lw = match Key::collection(&inner.config.resource, None) {
        Ok(key) => lw::StorageListerWatcher {
            backend: Arc::clone(&inner.backend),
            key,
        },
        Err(e) => {
            tracing::error!(resource = %inner.config.resource, error = %e, "cannot cache this resource");
            inner.set_ready(ReadyState::Stopped);
            return;
        }
    };
    let config = listwatch_client::Config::default().page_size(inner.config.list_page_size);
    let events = listwatch_client::watcher(lw, config);
    futures::pin_mut!(events);
    let mut stop = inner.stop.subscribe();
    let mut relist: Vec<Object> = Vec::new();
    let resource = inner.config.resource.clone();
    let every = inner
        .config
        .compaction_poll_interval
        .max(Duration::from_millis(10));
    let mut compaction_poll = tokio::time::interval_at(Instant::now() + every, every);
    compaction_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let item = tokio::select! {
            item = events.next() => item,
            _ = compaction_poll.tick() => {
                // Drops the snapshots no read may use any more (a no-op when nothing moved).
                cache.compact(inner.backend.compacted_revision());
                continue;
            }
            _ = stop.changed() => None,
        };
        let Some(item) = item else { break };
        let ev = match item {
            Ok(ev) => ev,
            Err(e) => {
                tracing::warn!(resource = %resource, error = %e, "cacher reflector error");
                continue;
            }
        };
        match ev {
            ReflectorEvent::Init => relist.clear(),
            ReflectorEvent::InitApply(o) => relist.push(o),
            ReflectorEvent::InitDone { resource_version } => {
                if let Err(e) = cache.replace(std::mem::take(&mut relist), resource_version) {
                    tracing::error!(resource = %resource, error = %e, "cannot replace the watch cache");
                    continue;
                }
                // Watchers of the old state end so that clients re-watch against the new one;
                // only then may new watchers come (see `Incoming::Reset`).
                let (done, reset) = tokio::sync::oneshot::channel();
                if tx
                    .send(Incoming::Reset(resource_version, done))
                    .await
                    .is_err()
                    || reset.await.is_err()
                {
                    break;
                }
                inner.set_ready(ReadyState::Ready);
                tracing::info!(resource = %resource, rv = resource_version, "watch cache ready");
            }
            ReflectorEvent::Apply(o) | ReflectorEvent::Delete(o)
                if o.resource_version() <= cache.view().resource_version() =>
            {
                tracing::debug!(resource = %resource, rv = o.resource_version(), "skipping an event the cache already has");
            }
            ReflectorEvent::Apply(o) => {
                let existed = Key::object(&resource, o.namespace(), o.name())
                    .ok()
                    .and_then(|k| {
                        cache
                            .view()
                            .get(
                                &k,
                                &GetOptions {
                                    ignore_not_found: true,
                                    ..Default::default()
                                },
                            )
                            .ok()
                            .flatten()
                    })
                    .is_some();
                let ev = if existed {
                    WatchEvent::Modified {
                        object: o,
                        prev: None,
                    }
                } else {
                    WatchEvent::Added(o)
                };
                if !apply(&mut cache, ev, &tx, &resource).await {
                    break;
                }
            }
            ReflectorEvent::Delete(o) => {
                if !apply(&mut cache, WatchEvent::Deleted(o), &tx, &resource).await {
                    break;
                }
            }
            ReflectorEvent::Bookmark { resource_version } => {
                cache.progress(resource_version);
                if tx.send(Incoming::Progress(resource_version)).await.is_err() {
                    break;
                }
            }
        }
    }
    inner.set_ready(ReadyState::Stopped);
}

/// Applies one event to the cache and queues it for the dispatcher; false when the
/// dispatcher is gone.
async fn apply(
    cache: &mut WatchCache,
    ev: WatchEvent,
    tx: &mpsc::Sender<Incoming>,
    resource: &str,
) -> bool {
    let rv = ev.resource_version().unwrap_or(0);
    match cache.apply(ev) {
        // The cache's own entry, even if a byte budget already squeezed it out of the window.
        Ok(Some(ev)) => tx.send(Incoming::Event(ev)).await.is_ok(),
        Ok(None) => true,
        Err(e) => {
            tracing::error!(resource, rv, error = %e, "watch cache refused an event");
            true
        }
    }
}

/// While a consistent read waits for the cache, asks the backend for progress notifications.
async fn request_progress(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    loop {
        tokio::select! {
            () = tokio::time::sleep(inner.config.progress_request_interval) => {}
            _ = stop.changed() => return,
        }
        if inner.reader.has_waiters() {
            if let Err(e) = inner.backend.request_watch_progress().await {
                tracing::debug!(error = %e, "progress request failed");
            }
        }
    }
}

#[async_trait]
impl Storage for Cacher {
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object> {
        self.inner.backend.create(key, obj, ttl).await
    }

    fn max_object_bytes(&self) -> Option<usize> {
        self.inner.backend.max_object_bytes()
    }

    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        let inner = &self.inner;
        // A consistent get (no version) reads the backend, as upstream does.
        if inner.not_ready().is_some() || opts.resource_version.is_none() {
            return inner.backend.get(key, opts).await;
        }
        let rv = opts.resource_version.unwrap_or(0);
        let view = inner.reader.wait_until_fresh(rv, None).await?;
        view.get(key, opts)
    }

    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        opts.validate_list()?;
        let inner = &self.inner;
        if inner.not_ready().is_some() || opts.continue_token.is_some() {
            return inner.backend.list(key, opts).await;
        }
        match (opts.resource_version, opts.resource_version_match) {
            (None, _) if !inner.config.consistent_reads_from_cache => {
                inner.backend.list(key, opts).await
            }
            (None, _) => match inner.wait_consistent().await {
                Ok(view) => view.list(key, opts),
                Err(e) => {
                    tracing::debug!(error = %e, "consistent list from cache failed; reading the backend");
                    inner.backend.list(key, opts).await
                }
            },
            (Some(rv), Some(ResourceVersionMatch::Exact)) => {
                inner.check_compacted(rv)?;
                let view = inner.reader.wait_until_fresh(rv, None).await?;
                match view.list(key, opts) {
                    Err(Error::Expired { .. }) => inner.backend.list(key, opts).await,
                    other => other,
                }
            }
            (Some(rv), _) => {
                let view = inner.reader.wait_until_fresh(rv, None).await?;
                view.list(key, opts)
            }
        }
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        let inner = &self.inner;
        if let Some(e) = inner.not_ready() {
            return Err(e);
        }
        let start = match (opts.send_initial_events, opts.resource_version) {
            (Some(true), rv) => {
                match rv {
                    None => {
                        inner.wait_consistent().await?;
                    }
                    Some(n) => {
                        inner.reader.wait_until_fresh(n, None).await?;
                    }
                }
                Start::State {
                    end_bookmark: opts.allow_watch_bookmarks,
                }
            }
            (None, None | Some(0)) => Start::State {
                end_bookmark: false,
            },
            (Some(false), None | Some(0)) => Start::Since(inner.reader.resource_version()),
            (_, Some(n)) => {
                inner.reader.wait_until_fresh(n, None).await?;
                Start::Since(n)
            }
        };
        let spec = Spec {
            key: key.clone(),
            predicate: opts.predicate.clone(),
            scope: watcher::scope_of(key, &opts.predicate),
            trigger: inner
                .config
                .trigger_field
                .as_deref()
                .and_then(|f| opts.predicate.field.exact_match(f))
                .map(Into::into),
            allow_bookmarks: opts.allow_watch_bookmarks,
            progress_notify: opts.progress_notify,
        };
        watcher::open(Arc::clone(inner), spec, start)
    }

    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let suggestion = suggestion.or_else(|| self.cached(key));
        self.inner
            .backend
            .guaranteed_update(key, preconditions, ignore_not_found, update, suggestion)
            .await
    }

    async fn delete(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        validate: &ValidateDeleteFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let suggestion = suggestion.or_else(|| self.cached(key));
        self.inner
            .backend
            .delete(key, preconditions, validate, suggestion)
            .await
    }

    async fn stats(&self, key: &Key) -> Result<Stats> {
        self.inner.backend.stats(key).await
    }

    async fn request_watch_progress(&self) -> Result<()> {
        self.inner.backend.request_watch_progress().await
    }

    async fn current_resource_version(&self) -> Result<u64> {
        self.inner.backend.current_resource_version().await
    }

    async fn readiness(&self) -> Result<()> {
        match self.inner.not_ready() {
            Some(e) => Err(e),
            None => self.inner.backend.readiness().await,
        }
    }

    fn compacted_revision(&self) -> u64 {
        self.inner.backend.compacted_revision()
    }
}
