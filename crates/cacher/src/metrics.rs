//! The cacher's metrics, registered once in a prometheus-client registry and shared by every
//! cacher (each labels its series with its resource).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cache_metrics::{ResourceHook, WatchCacheFamilies};
use crate::latency::{StageHistogram, StageLabels, Stages};
pub use crate::metric_label::ResourceLabel;

fn latency_histogram() -> Histogram {
    // 10 µs to ~5 s.
    Histogram::new(exponential_buckets(0.000_01, 3.0, 12))
}

/// Metric families of all cachers. Cloning shares them.
#[derive(Debug, Clone)]
pub struct CacherMetrics {
    events_dispatched: Family<ResourceLabel, Counter>,
    watchers_active: Family<ResourceLabel, Gauge>,
    watchers_terminated: Family<ResourceLabel, Counter>,
    watchers_stalled: Family<ResourceLabel, Counter>,
    dispatch_latency: Family<ResourceLabel, Histogram, fn() -> Histogram>,
    cache_lag: Family<ResourceLabel, Gauge>,
    init_events: Family<ResourceLabel, Counter>,
    resyncs: Family<ResourceLabel, Counter>,
    consistent_reads_fallen_back: Family<ResourceLabel, Counter>,
    consistent_reads_refused: Family<ResourceLabel, Counter>,
    continues_from_backend: Family<ResourceLabel, Counter>,
    exact_reads_from_backend: Family<ResourceLabel, Counter>,
    relists: Family<ResourceLabel, Counter>,
    storage_watch_failures: Family<ResourceLabel, Counter>,
    freshness_waits: Family<ResourceLabel, Counter>,
    freshness_timeouts: Family<ResourceLabel, Counter>,
    dispatch_stages: Family<StageLabels, StageHistogram>,
    consistency_checks: Family<CheckLabels, Counter>,
    inconsistent: Family<ResourceLabel, Gauge>,
    inconsistent_reads_from_backend: Family<ResourceLabel, Counter>,
    /// The watch caches' own families (see `cache_metrics`).
    watch_cache: WatchCacheFamilies,
}

impl Default for CacherMetrics {
    /// Metrics that are counted but registered nowhere.
    fn default() -> Self {
        Self {
            events_dispatched: Family::default(),
            watchers_active: Family::default(),
            watchers_terminated: Family::default(),
            watchers_stalled: Family::default(),
            dispatch_latency: Family::new_with_constructor(latency_histogram),
            cache_lag: Family::default(),
            init_events: Family::default(),
            resyncs: Family::default(),
            consistent_reads_fallen_back: Family::default(),
            consistent_reads_refused: Family::default(),
            continues_from_backend: Family::default(),
            exact_reads_from_backend: Family::default(),
            relists: Family::default(),
            storage_watch_failures: Family::default(),
            freshness_waits: Family::default(),
            freshness_timeouts: Family::default(),
            dispatch_stages: Family::default(),
            consistency_checks: Family::default(),
            inconsistent: Family::default(),
            inconsistent_reads_from_backend: Family::default(),
            watch_cache: WatchCacheFamilies::default(),
        }
    }
}

impl CacherMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "apiserver_watch_events_dispatch_duration_seconds",
            "Watch event dispatch latency by resource and pipeline stage; 'total' is storage to the watcher's consumer (see listwatch-cacher's latency module)",
            m.dispatch_stages.clone(),
        );
        m.watch_cache.register(registry);
        registry.register(
            "apiserver_storage_consistency_checks",
            "Consistency checks between the backend and the watch cache, by resource and status: success (the keys and versions agree), failure (they differ: reads of the resource go to the backend until a check agrees), error (no comparison could be made)",
            m.consistency_checks.clone(),
        );
        let r = registry.sub_registry_with_prefix("listwatch_cacher");
        r.register(
            "events_dispatched",
            "Events fanned out by the dispatcher",
            m.events_dispatched.clone(),
        );
        r.register(
            "watchers_active",
            "Watchers currently registered",
            m.watchers_active.clone(),
        );
        r.register(
            "watchers_terminated",
            "Watchers closed because they could not keep up",
            m.watchers_terminated.clone(),
        );
        r.register(
            "watchers_stalled",
            "Slow watchers detached to catch up from the event window",
            m.watchers_stalled.clone(),
        );
        r.register(
            "dispatch_latency_seconds",
            "Time from the cache receiving an event to the dispatcher handing it to every watcher",
            m.dispatch_latency.clone(),
        );
        r.register(
            "cache_lag_revisions",
            "Revisions the cache is behind the backend at the last consistent read",
            m.cache_lag.clone(),
        );
        r.register(
            "init_events",
            "Events sent as watches' initial state",
            m.init_events.clone(),
        );
        r.register(
            "resyncs",
            "Relists forced because the backend sent an event the cache was already past",
            m.resyncs.clone(),
        );
        r.register(
            "consistent_reads_fallen_back",
            "Consistent lists read from the backend because the cache did not catch up in time",
            m.consistent_reads_fallen_back.clone(),
        );
        r.register(
            "consistent_reads_refused",
            "Consistent lists answered 429 because the cache did not catch up in time",
            m.consistent_reads_refused.clone(),
        );
        r.register(
            "continues_from_backend",
            "Continued lists read from the backend: the cache had not reached their version and could not be asked for progress, or no longer held it",
            m.continues_from_backend.clone(),
        );
        r.register(
            "exact_reads_from_backend",
            "Exact lists (and lists at a version with a limit) read from the backend: the cache had not reached their version and could not be asked for progress, or no longer held it",
            m.exact_reads_from_backend.clone(),
        );
        r.register(
            "relists",
            "Relists of the backend after the first list: each ended every watcher of the resource (429 'storage is (re)initializing')",
            m.relists.clone(),
        );
        r.register(
            "storage_watch_failures",
            "Failures of the cacher's own watch of the backend (each ends every watcher of the resource and relists, as upstream's terminateAllWatchers)",
            m.storage_watch_failures.clone(),
        );
        r.register(
            "freshness_waits",
            "Reads and watches that waited for the cache to reach a version it had not seen yet",
            m.freshness_waits.clone(),
        );
        r.register(
            "freshness_timeouts",
            "Waits for the cache to reach a version that ran out of time (the freshness timeout, 3 s)",
            m.freshness_timeouts.clone(),
        );
        r.register(
            "inconsistent",
            "1 while the last consistency check found the watch cache disagreeing with the backend (lists and gets of the resource read the backend), else 0",
            m.inconsistent.clone(),
        );
        r.register(
            "inconsistent_reads_from_backend",
            "Lists and gets read from the backend because the last consistency check found the watch cache disagreeing with it",
            m.inconsistent_reads_from_backend.clone(),
        );
        m
    }

    /// The watch cache's metrics hook for `config`'s resource, in front of its own hook.
    pub(crate) fn watch_cache_hook(&self, config: &listwatch_watchcache::Config) -> ResourceHook {
        self.watch_cache.hook(
            &config.resource,
            config.initial_capacity,
            config.window_byte_budget,
            std::sync::Arc::clone(&config.metrics),
        )
    }

    pub(crate) fn for_resource(&self, resource: &str) -> ResourceMetrics {
        let l = ResourceLabel {
            resource: resource.to_owned(),
        };
        ResourceMetrics {
            events_dispatched: self.events_dispatched.get_or_create(&l).clone(),
            watchers_active: self.watchers_active.get_or_create(&l).clone(),
            watchers_terminated: self.watchers_terminated.get_or_create(&l).clone(),
            watchers_stalled: self.watchers_stalled.get_or_create(&l).clone(),
            dispatch_latency: self.dispatch_latency.get_or_create(&l).clone(),
            cache_lag: self.cache_lag.get_or_create(&l).clone(),
            init_events: self.init_events.get_or_create(&l).clone(),
            resyncs: self.resyncs.get_or_create(&l).clone(),
            consistent_reads_fallen_back: self
                .consistent_reads_fallen_back
                .get_or_create(&l)
                .clone(),
            consistent_reads_refused: self.consistent_reads_refused.get_or_create(&l).clone(),
            continues_from_backend: self.continues_from_backend.get_or_create(&l).clone(),
            exact_reads_from_backend: self.exact_reads_from_backend.get_or_create(&l).clone(),
            relists: self.relists.get_or_create(&l).clone(),
            storage_watch_failures: self.storage_watch_failures.get_or_create(&l).clone(),
            freshness_waits: self.freshness_waits.get_or_create(&l).clone(),
            freshness_timeouts: self.freshness_timeouts.get_or_create(&l).clone(),
            checks: ["success", "failure", "error"].map(|status| {
                self.consistency_checks
                    .get_or_create(&CheckLabels {
                        resource: resource.to_owned(),
                        status,
                    })
                    .clone()
            }),
            inconsistent: self.inconsistent.get_or_create(&l).clone(),
            inconsistent_reads_from_backend: self
                .inconsistent_reads_from_backend
                .get_or_create(&l)
                .clone(),
            stages: Stages::new(|stage| {
                self.dispatch_stages
                    .get_or_create(&StageLabels {
                        resource: resource.to_owned(),
                        stage: stage.as_str(),
                    })
                    .clone()
            }),
        }
    }
}

/// One resource's series.
#[derive(Debug, Clone)]
pub(crate) struct ResourceMetrics {
    pub(crate) events_dispatched: Counter,
    pub(crate) watchers_active: Gauge,
    pub(crate) watchers_terminated: Counter,
    pub(crate) watchers_stalled: Counter,
    pub(crate) dispatch_latency: Histogram,
    pub(crate) cache_lag: Gauge,
    pub(crate) init_events: Counter,
    pub(crate) resyncs: Counter,
    pub(crate) consistent_reads_fallen_back: Counter,
    pub(crate) consistent_reads_refused: Counter,
    pub(crate) continues_from_backend: Counter,
    pub(crate) exact_reads_from_backend: Counter,
    pub(crate) relists: Counter,
    pub(crate) storage_watch_failures: Counter,
    pub(crate) freshness_waits: Counter,
    pub(crate) freshness_timeouts: Counter,
    /// Consistency checks by status: success, failure, error (`consistency`).
    pub(crate) checks: [Counter; 3],
    pub(crate) inconsistent: Gauge,
    pub(crate) inconsistent_reads_from_backend: Counter,
    /// Dispatch latency by stage (`latency`).
    pub(crate) stages: Stages,
}

/// The labels of upstream's `apiserver_storage_consistency_checks_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub(crate) struct CheckLabels {
    resource: String,
    status: &'static str,
}
