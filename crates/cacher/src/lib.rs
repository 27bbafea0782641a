//! The cacher: a [`Storage`] served from a watch cache over another [`Storage`], with the
//! dispatcher that fans each event out to many watchers.
//!
//! One [`Cacher`] serves one resource. Inside it:
//! - a reflector (listwatch-runtime's, over an in-process lister-watcher on the backend) lists
//!   and watches the backend and feeds a `listwatch_watchcache::WatchCache`;
//! - each event then goes, in order, to the dispatcher, which hands it to the watchers it
//!   concerns (see `dispatch` for the fan-out, budgets and stall-and-resume,
//!   `dispatch::registry` for the indexes and bookmark schedule, `watcher` for one watch:
//!   its spec, its state machine `watcher::state`, its buffer and its stream);
//! - reads are served from the cache when their resource-version semantics allow it, and
//!   delegated to the backend otherwise; writes always go to the backend, with the cached
//!   object as a suggestion.
//!
//! It sits above listwatch-storage, listwatch-watchcache and listwatch-runtime, below the
//! endpoints; it must never depend on a concrete backend or on HTTP.
//!
//! Readiness goes Pending → Ready (a generation number counts each Ready) → Stopped, and
//! back to Pending for the whole of each relist (see `feed`). While not ready, as upstream
//! (KEP-4568): watches fail with 429 and a Retry-After growing with the downtime (upstream's
//! `exp(0.06 × downtime)`, 1 to 30 s); gets, and lists with a limit and no selector, go to the
//! backend (the lowest version those lists hand out is where the coming window starts: see
//! `floor`); other lists get the same 429. With [`CacherConfig::initial_wait`] (a resource
//! created at run time, e.g. a new custom resource), a list or watch during the cache's
//! first list waits for it that long first.
//!
//! Modules: `event` and `floor` are leaves (the shared event form and a buffer's items; the
//! floor of a (re)initialized window); `watcher::{state,
//! queue, spec, filter}` sit on it; `dispatch` (with `registry` and `recent`) and
//! `watcher::stream` sit on those; only the crate root ties them together. The
//! `import_graph` test fails on any other module cycle.
//!
//! In-process consumers list and watch a cacher through [`StorageListerWatcher`] (whole
//! objects) or [`MetadataListerWatcher`] (each object's metadata-only projection, built once
//! per dispatched event for every metadata consumer: `metadata_lw`).
//!
//! Consistent lists (no resource version) wait until the cache has the backend's current
//! revision; the backend is asked for progress as soon as the first one waits, then every
//! 100 ms while any does, and never otherwise.
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

mod cache_metrics;
mod config;
mod consistency;
mod dispatch;
mod event;
#[cfg(feature = "fault-injection")]
pub mod fault;
mod feed;
mod floor;
#[cfg(test)]
mod import_graph;
pub mod latency;
mod lw;
mod metadata_lw;
mod metric_label;
mod metrics;
mod watcher;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::Object;
use listwatch_storage::{
    Error, GetOptions, Key, ListCost, ListOptions, ObjectList, Preconditions, ResourceVersionMatch,
    Result, Stats, Storage, UpdateFn, ValidateDeleteFn, WatchStream,
};
use listwatch_watchcache::{WatchCache, WatchCacheReader};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

pub use crate::config::{
    CacherConfig, DEFAULT_CONSISTENCY_CHECK_PERIOD, DEFAULT_REPLAY_ENCODING_BUDGET,
};
pub use crate::consistency::{ConsistencyCheck, Digest};
pub use crate::lw::StorageListerWatcher;
pub use crate::metadata_lw::MetadataListerWatcher;
pub use crate::metrics::{CacherMetrics, ResourceLabel};

use crate::dispatch::recent::Recent;
use crate::dispatch::registry::Registry;
use crate::dispatch::{DispatchConfig, Dispatcher, Incoming};
use crate::metrics::ResourceMetrics;
use crate::watcher::{Spec, Start};

/// Upstream's `resourceVersionTooHighRetrySeconds`: the Retry-After of a consistent list
/// refused because the cache did not catch up in time.
const STALE_CACHE_RETRY_SECONDS: u32 = 1;

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
    stop: watch::Sender<bool>,
    /// To the dispatcher, for explicit progress requests (the feeder holds its own).
    incoming: mpsc::Sender<Incoming>,
    /// Recent events' dispatched forms, kept for watchers catching up (see `recent`).
    recent: Arc<Recent>,
    /// Why the storage's last list or watch attempt failed, while the cache lists (cleared
    /// when a listing starts over); shown by [`Storage::readiness`] (the `/readyz/storage`
    /// reason), never in a client's 429.
    pub(crate) last_error: std::sync::Mutex<Option<String>>,
    /// When [`Inner::warn_stale`] last warned.
    last_stale_warning: std::sync::Mutex<Option<Instant>>,
    /// False while the last consistency check found the cache disagreeing with the
    /// backend: lists and gets then read the backend (see `consistency`, the only writer).
    consistent: std::sync::atomic::AtomicBool,
    /// The rate limits of the consistency checks' repeated log lines.
    check_logs: consistency::CheckLogs,
    /// Events the feeder is to miss (see `fault`).
    #[cfg(feature = "fault-injection")]
    faults: fault::Faults,
    /// The lowest version a list answered by the backend handed out while the cache was not
    /// ready (see `floor`).
    floor: floor::Floor,
}

/// How often [`Inner::warn_stale`] may warn per resource.
const STALE_WARNING_EVERY: Duration = Duration::from_secs(60);

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

    /// `Expired` when the backend's history below `rv` is compacted away: Exact reads at
    /// such a version fail as they would on the backend, even where the cache still holds
    /// what they ask for. Never consulted for watches, which the window alone judges (as
    /// upstream): a watch from the version a list at RV=0 handed out must be accepted
    /// however long ago the resource last changed.
    fn check_compacted(&self, rv: u64) -> Result<()> {
        let compacted = self.backend.compacted_revision();
        if rv < compacted {
            Err(Error::too_old(rv, compacted))
        } else {
            Ok(())
        }
    }

    /// Whether a read at `rv` (Exact, or a continuation) goes to the backend at once because
    /// the cache has not reached `rv` and could only wait for it (upstream's
    /// `shouldDelegateExactRV`): without progress notifications that can be requested
    /// (consistent reads from the cache off), a quiet resource's cache may not move for
    /// minutes, so waiting would run into the freshness timeout every time.
    fn delegate_behind(&self, rv: u64) -> bool {
        !self.config.consistent_reads_from_cache && rv > self.reader.resource_version()
    }

    /// The reader's `wait_until_fresh`, counted in the metrics when it has to wait.
    async fn wait_fresh(
        &self,
        rv: u64,
        deadline: Option<Instant>,
    ) -> Result<Arc<listwatch_watchcache::CacheView>> {
        if rv <= self.reader.resource_version() {
            return self.reader.wait_until_fresh(rv, deadline).await;
        }
        self.metrics.freshness_waits.inc();
        let r = self.reader.wait_until_fresh(rv, deadline).await;
        if let Err(Error::TooLargeResourceVersion { current, .. }) = &r {
            self.metrics.freshness_timeouts.inc();
            self.warn_stale(rv, *current);
        }
        r
    }

    fn ready_state(&self) -> ReadyState {
        self.ready.borrow().state
    }

    /// Whether reads may come from the cache as far as the consistency checks know; when
    /// not, counts the read that goes to the backend instead.
    fn consistent_or_count(&self) -> bool {
        let consistent = self.consistent.load(std::sync::atomic::Ordering::SeqCst);
        if !consistent {
            self.metrics.inconsistent_reads_from_backend.inc();
        }
        consistent
    }

    /// Says (at most once a minute per resource) that a request waited for the cache to
    /// reach `rv` in vain, naming the resource and the usual cause: an idle resource's cache
    /// learns the storage's revision only from progress notifications, which etcd sends
    /// every `--experimental-watch-progress-notify-interval` (10 minutes by default).
    fn warn_stale(&self, rv: u64, current: u64) {
        let Ok(mut last) = self.last_stale_warning.lock() else {
            return;
        };
        if last.is_some_and(|t| t.elapsed() < STALE_WARNING_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(
            resource = %self.config.resource,
            requested = rv,
            current,
            "the watch cache of {} is behind the requested resource version and heard of no \
             newer one in time (answered 504 Too large resource version): with etcd, start \
             etcd with --experimental-watch-progress-notify-interval=5s (its default, 10m, \
             leaves an idle resource's cache behind for minutes); repeated at most once a minute",
            self.config.resource
        );
    }

    /// Upstream's Retry-After for an unready cache: clamp(exp(0.06 × downtime), 1, 30) s.
    fn retry_after(&self) -> u32 {
        let since = self.ready.borrow().since;
        let secs = (0.06 * since.elapsed().as_secs_f64())
            .exp()
            .clamp(1.0, 30.0);
        secs.ceil() as u32
    }

    /// What a watch gets when the cache is (re)initializing: 429 with a Retry-After.
    fn reinitializing(&self) -> Error {
        Error::NotReady {
            message: format!(
                "storage is (re)initializing: the watch cache of {} is listing",
                self.config.resource
            ),
            retry_after_seconds: self.retry_after(),
        }
    }

    fn not_ready(&self) -> Option<Error> {
        match self.ready_state() {
            ReadyState::Ready => None,
            ReadyState::Stopped => Some(Error::NotReady {
                message: format!("the cache of {} is stopped", self.config.resource),
                retry_after_seconds: 1,
            }),
            ReadyState::Pending => Some(self.reinitializing()),
        }
    }

    fn set_ready(&self, state: ReadyState) {
        self.ready.send_if_modified(|r| {
            if r.state == state || r.state == ReadyState::Stopped {
                return false;
            }
            if state == ReadyState::Ready {
                r.generation += 1;
            }
            r.state = state;
            r.since = Instant::now();
            true
        });
    }

    /// Waits (at most [`CacherConfig::initial_wait`]) while the cache lists for the first
    /// time; returns at once when it is ready, stopped, or was ready before (a relist).
    async fn wait_first_list(&self) {
        let bound = self.config.initial_wait;
        let mut rx = self.ready.subscribe();
        let first_list = |r: &Readiness| r.state == ReadyState::Pending && r.generation == 0;
        if bound.is_zero() || !first_list(&rx.borrow_and_update()) {
            return;
        }
        let _ = tokio::time::timeout(bound, rx.wait_for(|r| !first_list(r))).await;
    }

    /// Waits until the cache has caught up with the backend's current revision.
    async fn wait_consistent(&self) -> Result<Arc<listwatch_watchcache::CacheView>> {
        let rv = self.backend.current_resource_version().await?;
        let lag = rv.saturating_sub(self.reader.resource_version());
        self.metrics
            .cache_lag
            .set(i64::try_from(lag).unwrap_or(i64::MAX));
        self.wait_fresh(rv, None).await
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
        let hook = config.metrics.watch_cache_hook(&config.watch_cache);
        let cache = WatchCache::new(config.watch_cache.clone().with_metrics(Arc::new(hook)));
        let (ready, _) = watch::channel(Readiness {
            state: ReadyState::Pending,
            generation: 0,
            since: Instant::now(),
        });
        let (stop, _) = watch::channel(false);
        let (tx, rx) = mpsc::channel(config.incoming_queue.max(1));
        let inner = Arc::new(Inner {
            backend,
            reader: cache.reader(),
            registry: Arc::new(Registry::new(Instant::now())),
            ready,
            metrics: config.metrics.for_resource(&config.resource),
            stop,
            incoming: tx.clone(),
            recent: Arc::new(Recent::new(config.replay_encoding_budget)),
            last_error: std::sync::Mutex::new(None),
            last_stale_warning: std::sync::Mutex::new(None),
            consistent: std::sync::atomic::AtomicBool::new(true),
            check_logs: consistency::CheckLogs::default(),
            #[cfg(feature = "fault-injection")]
            faults: fault::Faults::from_env(&config.resource),
            floor: floor::Floor::default(),
            config,
        });
        let dispatcher = Dispatcher::new(
            Arc::clone(&inner.registry),
            DispatchConfig {
                trigger_field: inner.config.trigger_field.clone(),
                stall_resume: inner.config.stall_resume,
                max_budget: inner.config.max_dispatch_budget,
                budget_refill_per_sec: inner.config.budget_refill_per_sec,
                bookmark_frequency: inner.config.bookmark_frequency,
            },
            inner.metrics.clone(),
            Arc::clone(&inner.recent),
        );
        tokio::spawn(dispatcher.run(rx, inner.stop.subscribe()));
        tokio::spawn(feed::feed(Arc::clone(&inner), cache, tx));
        tokio::spawn(feed::request_progress(Arc::clone(&inner)));
        tokio::spawn(consistency::run(Arc::clone(&inner)));
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

    /// Compares the cache with the backend now, as the periodic check does (see
    /// [`CacherConfig::consistency_check_period`]), and acts on the outcome the same way.
    pub async fn check_consistency(&self) -> ConsistencyCheck {
        consistency::check(&self.inner).await
    }

    /// False while the last consistency check found the cache disagreeing with the backend
    /// (lists and gets then read the backend).
    pub fn is_consistent(&self) -> bool {
        self.inner
            .consistent
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes the cache miss the events of these objects from now on (none: every event is
    /// applied again); see `fault`. Tests only.
    #[cfg(feature = "fault-injection")]
    pub fn set_faults(&self, faults: Vec<fault::MissEvents>) {
        self.inner.faults.set(faults);
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

    /// A consistent list from the cache once it has caught up with the backend; when it does
    /// not in time, the backend's answer or 429 (see [`CacherConfig::consistent_read_fallback`]).
    async fn consistent_list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let inner = &self.inner;
        match inner.wait_consistent().await {
            Ok(view) => view.list(key, opts),
            Err(e @ Error::TooLargeResourceVersion { .. })
                if !inner.config.consistent_read_fallback =>
            {
                inner.metrics.consistent_reads_refused.inc();
                Err(Error::TooManyRequests {
                    message: format!(
                        "the watch cache of {} is not fresh enough: {e}",
                        inner.config.resource
                    ),
                    retry_after_seconds: STALE_CACHE_RETRY_SECONDS,
                })
            }
            Err(e) => {
                tracing::debug!(error = %e, "consistent list from cache failed; reading the backend");
                inner.metrics.consistent_reads_fallen_back.inc();
                inner.backend.list(key, opts).await
            }
        }
    }
}

impl Cacher {
    /// The next page of a list, from the cache's state at the token's version (upstream's
    /// ListFromCacheSnapshot); the backend answers when the cache no longer holds that state
    /// (or never reached it), with its own 410 and fresh-token behaviour.
    async fn continued_list(
        &self,
        key: &Key,
        opts: &ListOptions,
        token: &str,
    ) -> Result<ObjectList> {
        let inner = &self.inner;
        let rv = listwatch_storage::decode_continue(token, key.path())?.1;
        if rv < inner.backend.compacted_revision() {
            // The backend says what a continuation below its compaction gets.
            return inner.backend.list(key, opts).await;
        }
        if inner.delegate_behind(rv) {
            inner.metrics.continues_from_backend.inc();
            return inner.backend.list(key, opts).await;
        }
        let view = match inner.wait_fresh(rv, None).await {
            Ok(view) => view,
            Err(_) => {
                inner.metrics.continues_from_backend.inc();
                return inner.backend.list(key, opts).await;
            }
        };
        match view.list(key, opts) {
            Err(Error::Expired { .. }) => {
                inner.metrics.continues_from_backend.inc();
                inner.backend.list(key, opts).await
            }
            other => other,
        }
    }
}

impl Cacher {
    /// A page of everything while the cache is not ready: the backend's answer, its version
    /// recorded as the floor of the cache's coming window (see `floor`). When the cache
    /// turned ready meanwhile, its window may start above that version: the list is answered
    /// again from the cache (at most a few times, as the cache may turn Pending again).
    async fn list_while_not_ready(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let inner = &self.inner;
        for _ in 0..3 {
            let list = inner.backend.list(key, opts).await?;
            let mut floor = inner.floor.lock().await;
            match inner.ready_state() {
                ReadyState::Pending => {
                    floor::record(&mut floor, list.resource_version);
                    return Ok(list);
                }
                ReadyState::Stopped => break,
                ReadyState::Ready => {
                    drop(floor);
                    tracing::debug!(
                        resource = %inner.config.resource,
                        rv = list.resource_version,
                        "the cache turned ready during a list answered by the backend; answering from the cache"
                    );
                    match self.list_ready(key, opts).await {
                        Err(Error::NotReady { .. }) => continue,
                        other => return other,
                    }
                }
            }
        }
        Err(inner.not_ready().unwrap_or_else(|| inner.reinitializing()))
    }

    /// A list while the cache is ready, by its resource-version semantics.
    async fn list_ready(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let inner = &self.inner;
        if let Some(token) = &opts.continue_token {
            return self.continued_list(key, opts, token).await;
        }
        match (opts.resource_version, opts.resource_version_match) {
            (None, _) if !inner.config.consistent_reads_from_cache => {
                inner.backend.list(key, opts).await
            }
            (None, _) => self.consistent_list(key, opts).await,
            // Upstream's "legacy exact match": a version without a match but with a limit
            // reads exactly at it, as on etcd (so that the pages of a walk line up).
            (Some(rv), m @ (Some(ResourceVersionMatch::Exact) | None))
                if m.is_some() || (rv > 0 && opts.page_limit().is_some()) =>
            {
                if inner.delegate_behind(rv) {
                    inner.metrics.exact_reads_from_backend.inc();
                    return inner.backend.list(key, opts).await;
                }
                inner.check_compacted(rv)?;
                let view = inner.wait_fresh(rv, None).await?;
                let exact = ListOptions {
                    resource_version_match: Some(ResourceVersionMatch::Exact),
                    ..opts.clone()
                };
                match view.list(key, &exact) {
                    Err(Error::Expired { .. }) => {
                        inner.metrics.exact_reads_from_backend.inc();
                        inner.backend.list(key, opts).await
                    }
                    other => other,
                }
            }
            (Some(rv), _) => {
                let view = inner.wait_fresh(rv, None).await?;
                view.list(key, opts)
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
        // A consistent get (no version) reads the backend, as upstream does; so does any get
        // while the cache is not ready (KEP-4568).
        if inner.not_ready().is_some()
            || opts.resource_version.is_none()
            || !inner.consistent_or_count()
        {
            return inner.backend.get(key, opts).await;
        }
        let rv = opts.resource_version.unwrap_or(0);
        let view = inner.wait_fresh(rv, None).await?;
        view.get(key, opts)
    }

    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        opts.validate_list()?;
        let inner = &self.inner;
        if !inner.consistent_or_count() {
            // The last consistency check found the cache wrong: the backend answers every
            // list, whatever its version, limit or token (see `consistency`).
            return inner.backend.list(key, opts).await;
        }
        inner.wait_first_list().await;
        if let Some(e) = inner.not_ready() {
            // Upstream (KEP-4568): only what etcd serves cheaply is delegated, a page of
            // everything; the rest waits for the cache.
            let cheap = opts.predicate.is_empty() && opts.page_limit().is_some();
            return if cheap {
                self.list_while_not_ready(key, opts).await
            } else {
                Err(e)
            };
        }
        self.list_ready(key, opts).await
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        let inner = &self.inner;
        inner.wait_first_list().await;
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
                        inner.wait_fresh(n, None).await?;
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
            // As upstream: no wait for a version the cache has not reached (a consistent list
            // read from the backend hands those out); the watch skips what it already has.
            (_, Some(n)) => Start::Since(n),
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
            deadline: opts.deadline.map(Instant::from_std),
            #[cfg(test)]
            filter_hook: None,
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

    /// From the cache's current state: its object count and accounted bytes (the state's
    /// serialized objects and keys), and whether [`Storage::list`] would answer `opts` from
    /// the cache (by the same rules, without waiting: a version the cache has not reached
    /// yet counts as served from it, as it waits for it). `None` while the cache is not ready.
    fn list_cost(&self, opts: &ListOptions) -> Option<ListCost> {
        let inner = &self.inner;
        if inner.not_ready().is_some() {
            return None;
        }
        let view = inner.reader.view();
        let object_count = u64::try_from(view.len()).unwrap_or(u64::MAX);
        let bytes = u64::try_from(view.memory().state_bytes).unwrap_or(u64::MAX);
        let from_cache = match (&opts.continue_token, opts.resource_version) {
            // A continuation: from the cache unless it must go to the backend.
            (Some(token), _) => {
                listwatch_storage::decode_continue(token, "").is_ok_and(|(_, rv)| {
                    rv >= inner.backend.compacted_revision() && !inner.delegate_behind(rv)
                })
            }
            (None, None) => inner.config.consistent_reads_from_cache,
            (None, Some(rv)) => !inner.delegate_behind(rv),
        };
        let consistent = inner.consistent.load(std::sync::atomic::Ordering::SeqCst);
        Some(ListCost {
            object_count,
            average_object_bytes: bytes.checked_div(object_count).unwrap_or(0),
            from_cache: from_cache && consistent,
        })
    }

    /// Asks the backend for progress and, once the cache has everything up to the backend's
    /// current revision, sends a bookmark to this cacher's watchers that asked for progress
    /// notification. (The cacher's own progress requests, for consistent reads, only move
    /// the cache's version: they never reach watchers.)
    async fn request_watch_progress(&self) -> Result<()> {
        let inner = &self.inner;
        let rv = inner.backend.current_resource_version().await?;
        inner.backend.request_watch_progress().await?;
        inner.wait_fresh(rv, None).await?;
        inner
            .incoming
            .send(Incoming::NotifyProgress(rv))
            .await
            .map_err(|_| Error::NotReady {
                message: format!("the cache of {} is stopped", inner.config.resource),
                retry_after_seconds: 1,
            })
    }

    async fn current_resource_version(&self) -> Result<u64> {
        self.inner.backend.current_resource_version().await
    }

    async fn readiness(&self) -> Result<()> {
        match self.inner.not_ready() {
            Some(Error::NotReady {
                message,
                retry_after_seconds,
            }) if self.inner.ready_state() == ReadyState::Pending => {
                let last = self.inner.last_error.lock().ok().and_then(|l| l.clone());
                Err(Error::NotReady {
                    message: match last {
                        Some(why) => format!("{message}; its last attempt failed: {why}"),
                        None => message,
                    },
                    retry_after_seconds,
                })
            }
            Some(e) => Err(e),
            None => self.inner.backend.readiness().await,
        }
    }

    fn compacted_revision(&self) -> u64 {
        self.inner.backend.compacted_revision()
    }
}
