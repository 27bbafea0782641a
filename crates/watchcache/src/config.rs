//! Configuration of a watch cache: window bounds, freshness rules, indexes, memory budget,
//! and the two injectable collaborators (a clock and a metrics hook).
//!
//! Defaults mirror upstream's `k8s.io/apiserver/pkg/storage/cacher` constants; each default
//! says which one.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use listwatch_api::Object;
use listwatch_api::fields::Fields;

/// Upstream `defaultLowerBoundCapacity`: the window never shrinks below this many events.
pub const DEFAULT_MIN_CAPACITY: usize = 100;
/// Upstream `defaultUpperBoundCapacity` (100 × 1024): the window never grows beyond this.
pub const DEFAULT_MAX_CAPACITY: usize = 100 * 1024;
/// Upstream `DefaultEventFreshDuration` (bookmark frequency 60 s + 15 s): events younger than
/// this are "fresh"; a full window of fresh events grows, a full window of stale ones shrinks.
pub const DEFAULT_EVENT_FRESHNESS: Duration = Duration::from_secs(75);
/// How many past states lists may pin at once (see [`Config::max_snapshots`]).
pub const DEFAULT_MAX_SNAPSHOTS: usize = 16;
/// How long a pinned past state lives after its last use (see [`Config::snapshot_ttl`]):
/// upstream keeps a past state while its event is in the window, which the resize rule
/// shrinks once events are older than the freshness age; the same age here.
pub const DEFAULT_SNAPSHOT_TTL: Duration = DEFAULT_EVENT_FRESHNESS;
/// Upstream `blockTimeout`: how long a read waits for the cache to reach its resource version
/// before failing with "Too large resource version".
pub const DEFAULT_FRESHNESS_TIMEOUT: Duration = Duration::from_secs(3);

/// Where the cache reads the time it stamps on events (and compares for resizing).
///
/// Injectable so that tests are deterministic: [`TokioClock`] follows tokio's clock (paused
/// in `#[tokio::test(start_paused = true)]`), [`ManualClock`] moves only when told.
pub trait Clock: Send + Sync + 'static {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The default clock: tokio's notion of now (so a paused test runtime controls it; outside a
/// runtime this is the system's monotonic clock).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// A clock that stands still until [`ManualClock::advance`] moves it. Clones share the time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// The current instant; only `advance` writes it.
    now: Arc<Mutex<Instant>>,
}

impl ManualClock {
    /// A clock stopped at the current system instant.
    pub fn new() -> Self {
        Self {
            now: Arc::new(Mutex::new(Instant::now())),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why events left the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EvictionReason {
    /// The window was full (or shrank by the freshness rule).
    Capacity,
    /// The cache was over its byte budget.
    Budget,
}

/// Approximate memory held by one cache, as accounted by the writer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Serialized bytes (plus keys) of the objects in the current state.
    pub state_bytes: usize,
    /// Serialized bytes of object versions kept alive only by the event window: the previous
    /// states its events carry and the last states of deleted objects.
    pub window_bytes: usize,
    /// Estimated bytes of the pinned past states beyond the current state (the map nodes the
    /// writer copied since each was pinned).
    pub snapshot_bytes: usize,
    /// The configured budget of the total, if any ([`Config::byte_budget`]).
    pub budget: Option<usize>,
    /// The configured budget of the history, if any ([`Config::window_byte_budget`]).
    pub window_budget: Option<usize>,
}

impl MemoryUsage {
    /// State, window and snapshots.
    pub fn total(&self) -> usize {
        self.state_bytes + self.window_bytes + self.snapshot_bytes
    }

    /// What the cache keeps beyond the current state: window and snapshots.
    pub fn history(&self) -> usize {
        self.window_bytes + self.snapshot_bytes
    }

    /// Whether either budget is exceeded (the writer then squeezes the window).
    pub fn over_budget(&self) -> bool {
        self.budget.is_some_and(|b| self.total() > b)
            || self.window_budget.is_some_and(|b| self.history() > b)
    }
}

/// Hooks the cache calls as it works, for metrics. Every method defaults to doing nothing,
/// and each is called by the writer, inline: implementations must be cheap and never block.
pub trait CacheMetrics: Send + Sync + 'static {
    /// The window's capacity changed (growth, shrink, or a budget squeeze).
    fn capacity_changed(&self, resource: &str, old: usize, new: usize) {
        let _ = (resource, old, new);
    }

    /// `count` events left the window.
    fn events_evicted(&self, resource: &str, count: usize, reason: EvictionReason) {
        let _ = (resource, count, reason);
    }

    /// The accounted memory after a change of state.
    fn memory(&self, resource: &str, usage: MemoryUsage) {
        let _ = (resource, usage);
    }
}

/// The metrics hook that records nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl CacheMetrics for NoMetrics {}

/// The value an object has for an index. It must agree with field selectors: for the field an
/// index answers, it returns what [`Fields::field_value`] gives, so that an
/// index lookup finds exactly the objects an exact-match selector on that field selects.
pub type IndexFn = dyn Fn(&Object) -> Box<str> + Send + Sync;

/// A secondary index: objects grouped by the value of one selectable field, used to answer
/// lists whose field selector fixes that field (e.g. pods by `spec.nodeName`).
#[derive(Clone)]
pub struct Index {
    /// The field-selector path the index answers, e.g. `spec.nodeName`.
    field: Arc<str>,
    /// Computes an object's value; agrees with the field (see [`IndexFn`]).
    func: Arc<IndexFn>,
}

impl Index {
    /// Indexes by a selectable field, as field selectors read it (absent reads as `""`).
    ///
    /// ```
    /// use listwatch_watchcache::Index;
    /// let by_node = Index::field("spec.nodeName");
    /// assert_eq!(by_node.field_path(), "spec.nodeName");
    /// ```
    pub fn field(path: &str) -> Self {
        let owned: Arc<str> = path.into();
        let read = Arc::clone(&owned);
        Self {
            field: owned,
            func: Arc::new(move |o: &Object| o.field_value(&read).into()),
        }
    }

    /// Indexes by namespace (`metadata.namespace`, `""` for cluster-scoped objects).
    pub fn namespace() -> Self {
        Self::field("metadata.namespace")
    }

    /// An index with its own function, answering selectors on `field`. The function must
    /// agree with the field's value (see [`IndexFn`]).
    pub fn with_fn(
        field: &str,
        func: impl Fn(&Object) -> Box<str> + Send + Sync + 'static,
    ) -> Self {
        Self {
            field: field.into(),
            func: Arc::new(func),
        }
    }

    /// The field path this index answers.
    pub fn field_path(&self) -> &str {
        &self.field
    }

    /// The object's value for this index.
    pub fn value_of(&self, object: &Object) -> Box<str> {
        (self.func)(object)
    }
}

impl fmt::Debug for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Index")
            .field("field", &self.field)
            .finish_non_exhaustive()
    }
}

/// Configuration of one resource's watch cache.
///
/// ```
/// use listwatch_watchcache::{Config, Index};
/// let config = Config::new("pods")
///     .with_index(Index::field("spec.nodeName"))
///     .with_index(Index::namespace())
///     .with_byte_budget(Some(512 << 20));
/// assert_eq!(config.initial_capacity, 100);
/// ```
#[derive(Clone)]
pub struct Config {
    /// The resource (plural, e.g. `pods`): cached objects live at
    /// [`Key::object`](listwatch_storage::Key::object)`(resource, namespace, name)`.
    pub resource: String,
    /// Window capacity at start (upstream starts at the lower bound, 100).
    pub initial_capacity: usize,
    /// The window never shrinks below this by the freshness rule (upstream 100).
    pub min_capacity: usize,
    /// The window never grows beyond this (upstream 102 400).
    pub max_capacity: usize,
    /// The freshness age of the resize rule (upstream 75 s).
    pub event_freshness: Duration,
    /// How long [`WatchCacheReader::wait_until_fresh`](crate::WatchCacheReader::wait_until_fresh)
    /// waits at most (upstream 3 s).
    pub freshness_timeout: Duration,
    /// Secondary indexes.
    pub indexes: Vec<Index>,
    /// Serve Exact lists and continue tokens at past versions from the cache (upstream
    /// `ListFromCacheSnapshot`, on by default): from states pinned when a list hands out a
    /// continue token, or rebuilt from the window (see the crate's `snapshots` module). Off:
    /// only the current state is served.
    pub snapshots: bool,
    /// At most this many past states are pinned at once; the least recently used goes
    /// first. Each costs nothing until the writer changes the state, then at most one copy
    /// of the maps' nodes (never of the objects).
    pub max_snapshots: usize,
    /// A pinned past state unused for this long is dropped (its continue tokens are then
    /// served by rebuilding from the window, or by the backend).
    pub snapshot_ttl: Duration,
    /// Accounted bytes (see [`MemoryUsage`]) above which the window is squeezed. The current
    /// state is never dropped, so the budget can still be exceeded by the state alone.
    pub byte_budget: Option<usize>,
    /// Accounted bytes of the history alone (window and pinned states, see
    /// [`MemoryUsage::history`]) above which the window is squeezed. Unlike
    /// [`Config::byte_budget`] the current state does not count, so a large state never
    /// empties the window; what the state holds is the backend's to bound.
    pub window_byte_budget: Option<usize>,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// Metrics hook.
    pub metrics: Arc<dyn CacheMetrics>,
}

impl Config {
    /// Upstream's defaults for `resource`, with no index and no budget.
    pub fn new(resource: impl Into<String>) -> Self {
        Self {
            resource: resource.into(),
            initial_capacity: DEFAULT_MIN_CAPACITY,
            min_capacity: DEFAULT_MIN_CAPACITY,
            max_capacity: DEFAULT_MAX_CAPACITY,
            event_freshness: DEFAULT_EVENT_FRESHNESS,
            freshness_timeout: DEFAULT_FRESHNESS_TIMEOUT,
            indexes: Vec::new(),
            snapshots: true,
            max_snapshots: DEFAULT_MAX_SNAPSHOTS,
            snapshot_ttl: DEFAULT_SNAPSHOT_TTL,
            byte_budget: None,
            window_byte_budget: None,
            clock: Arc::new(TokioClock),
            metrics: Arc::new(NoMetrics),
        }
    }

    /// Adds a secondary index.
    #[must_use]
    pub fn with_index(mut self, index: Index) -> Self {
        self.indexes.push(index);
        self
    }

    /// Sets the window bounds; the initial capacity is clamped into them.
    #[must_use]
    pub fn with_capacity(mut self, initial: usize, min: usize, max: usize) -> Self {
        self.min_capacity = min.max(1);
        self.max_capacity = max.max(self.min_capacity);
        self.initial_capacity = initial.clamp(self.min_capacity, self.max_capacity);
        self
    }

    /// Sets the freshness age of the resize rule.
    #[must_use]
    pub fn with_event_freshness(mut self, age: Duration) -> Self {
        self.event_freshness = age;
        self
    }

    /// Sets how long freshness waits last at most.
    #[must_use]
    pub fn with_freshness_timeout(mut self, timeout: Duration) -> Self {
        self.freshness_timeout = timeout;
        self
    }

    /// Turns serving past states (Exact lists, continue tokens) on or off.
    #[must_use]
    pub fn with_snapshots(mut self, on: bool) -> Self {
        self.snapshots = on;
        self
    }

    /// Sets how many past states may be pinned at once and how long one lives unused.
    #[must_use]
    pub fn with_snapshot_limits(mut self, count: usize, ttl: Duration) -> Self {
        self.max_snapshots = count;
        self.snapshot_ttl = ttl;
        self
    }

    pub(crate) fn snapshot_limits(&self) -> crate::snapshots::Limits {
        crate::snapshots::Limits {
            count: self.max_snapshots,
            ttl: self.snapshot_ttl,
        }
    }

    /// Sets the byte budget.
    #[must_use]
    pub fn with_byte_budget(mut self, budget: Option<usize>) -> Self {
        self.byte_budget = budget;
        self
    }

    /// Sets the history's byte budget (see [`Config::window_byte_budget`]).
    #[must_use]
    pub fn with_window_byte_budget(mut self, budget: Option<usize>) -> Self {
        self.window_byte_budget = budget;
        self
    }

    /// Sets the clock.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the metrics hook.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn CacheMetrics>) -> Self {
        self.metrics = metrics;
        self
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("resource", &self.resource)
            .field("initial_capacity", &self.initial_capacity)
            .field("min_capacity", &self.min_capacity)
            .field("max_capacity", &self.max_capacity)
            .field("event_freshness", &self.event_freshness)
            .field("freshness_timeout", &self.freshness_timeout)
            .field("indexes", &self.indexes)
            .field("snapshots", &self.snapshots)
            .field("max_snapshots", &self.max_snapshots)
            .field("snapshot_ttl", &self.snapshot_ttl)
            .field("byte_budget", &self.byte_budget)
            .field("window_byte_budget", &self.window_byte_budget)
            .finish_non_exhaustive()
    }
}
