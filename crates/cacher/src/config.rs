//! The configuration of a [`Cacher`](crate::Cacher): upstream's constants by default.

use std::time::Duration;

use listwatch_watchcache::Index;

use crate::metrics::CacherMetrics;

/// Configuration of one [`Cacher`](crate::Cacher). [`CacherConfig::new`] mirrors upstream's constants.
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
    /// Events queued between the cache and the dispatcher (upstream: 100).
    pub incoming_queue: usize,
    /// While a consistent read waits, progress is requested at once, then this often
    /// (upstream: 100 ms).
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
    /// What a consistent list does when the cache does not catch up with the backend within
    /// the freshness timeout (3 s): read the backend (`true`, the default), or answer 429
    /// with a Retry-After (`false`, upstream's `ConsistentListFromCacheSkipTimeoutFallback`),
    /// so that a lagging cache cannot turn into a storm of lists against the backend.
    pub consistent_read_fallback: bool,
    /// About how many bytes of recent events' shared encodings are kept for watchers
    /// catching up from the window (see `recent`; 32 MiB): within it, a replayed event is
    /// encoded once per format, not once per watcher. Upstream encodes each replayed event
    /// per watcher.
    pub replay_encoding_budget: usize,
    /// How long a list or watch that finds the cache listing for the first time (it never
    /// served yet) waits for it before the not-ready answer (429, or a page delegated to the
    /// backend); zero (the default) answers at once, as upstream's KEP-4568 does at server
    /// start. A cache that lists again after it served is never waited for. Meant for a
    /// resource created at run time (a new custom resource's cache lists an empty or small
    /// collection in milliseconds), whose first clients would otherwise pay a backoff.
    pub initial_wait: Duration,
    /// How often the cache's state is compared with the backend's (see `consistency`):
    /// each check starts between half this and this long after the previous one ended
    /// (upstream's `DetectCacheInconsistency`, 5 minutes); zero turns the checks off.
    pub consistency_check_period: Duration,
    /// Objects per page of the backend lists a consistency check reads (and per chunk of
    /// the cache's state it hashes): what a check holds at once.
    pub consistency_check_page_size: u32,
    /// Where the metrics go.
    pub metrics: CacherMetrics,
}

/// The default [`CacherConfig::consistency_check_period`] (upstream's `CheckPeriod`).
pub const DEFAULT_CONSISTENCY_CHECK_PERIOD: Duration = Duration::from_secs(5 * 60);

/// The default [`CacherConfig::replay_encoding_budget`].
pub const DEFAULT_REPLAY_ENCODING_BUDGET: usize = 32 << 20;

impl CacherConfig {
    /// The configuration for `resource`, with upstream's constants and no index: a list of
    /// one namespace (by path or by a `metadata.namespace` selector) reads that namespace's
    /// key range, so a namespace index would only duplicate key order.
    pub fn new(resource: impl Into<String>) -> Self {
        let resource = resource.into();
        Self {
            watch_cache: listwatch_watchcache::Config::new(resource.clone()),
            resource,
            trigger_field: None,
            stall_resume: true,
            max_dispatch_budget: Duration::from_millis(100),
            budget_refill_per_sec: Duration::from_millis(50),
            bookmark_frequency: Duration::from_secs(60),
            incoming_queue: 100,
            progress_request_interval: Duration::from_millis(100),
            list_page_size: 10_000,
            compaction_poll_interval: Duration::from_secs(15),
            consistent_reads_from_cache: true,
            consistent_read_fallback: true,
            replay_encoding_budget: DEFAULT_REPLAY_ENCODING_BUDGET,
            initial_wait: Duration::ZERO,
            consistency_check_period: DEFAULT_CONSISTENCY_CHECK_PERIOD,
            consistency_check_page_size: 1000,
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

    /// Sets [`CacherConfig::initial_wait`].
    #[must_use]
    pub fn with_initial_wait(mut self, wait: Duration) -> Self {
        self.initial_wait = wait;
        self
    }

    /// Sets [`CacherConfig::consistency_check_period`] (zero: no checks).
    #[must_use]
    pub fn with_consistency_check_period(mut self, period: Duration) -> Self {
        self.consistency_check_period = period;
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
