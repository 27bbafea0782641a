//! The watch cache's own metrics: its window's capacity, its evictions and its accounted
//! memory, per resource, fed by the [`CacheMetrics`] hook the watch cache calls as it works.
//!
//! Owns the metric families (registered once, shared by every cacher) and the per-resource
//! hook that [`Cacher::new`](crate::Cacher::new) installs in front of whatever hook the
//! watch cache's configuration already has (that one is still called, after these).
//!
//! Invariants: the hook resolves its series once, when the cacher starts, so the writer's
//! calls are a few atomic stores and never take a family's lock; every series carries the
//! `resource` label. The capacity families keep upstream's names (`watch_cache_capacity`,
//! `watch_cache_capacity_increase_total`, `watch_cache_capacity_decrease_total`); the others
//! are listwatch's (`listwatch_watch_cache_*`), as upstream accounts no bytes.

use std::sync::Arc;

use listwatch_watchcache::{CacheMetrics, EvictionReason, MemoryUsage};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metric_label::ResourceLabel;

/// A resource and a part of its accounted memory.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MemoryLabels {
    /// The resource, e.g. `pods`.
    pub(crate) resource: String,
    /// `state` (the current objects), `window` (what only the event window keeps) or
    /// `snapshots` (what only pinned past states keep).
    pub(crate) part: &'static str,
}

/// A resource and why events left its window.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct EvictionLabels {
    /// The resource, e.g. `pods`.
    pub(crate) resource: String,
    /// `capacity` (the window was full, or shrank by the freshness rule) or `budget` (the
    /// history was over `--watch-cache-window-bytes`).
    pub(crate) reason: &'static str,
}

/// The watch caches' metric families. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatchCacheFamilies {
    capacity: Family<ResourceLabel, Gauge>,
    capacity_increase: Family<ResourceLabel, Counter>,
    capacity_decrease: Family<ResourceLabel, Counter>,
    memory: Family<MemoryLabels, Gauge>,
    window_budget: Family<ResourceLabel, Gauge>,
    evicted: Family<EvictionLabels, Counter>,
}

impl WatchCacheFamilies {
    /// Registers the families in `registry` (at its top level: the names are complete).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "watch_cache_capacity",
            "Total capacity of the watch cache's event window, by resource",
            self.capacity.clone(),
        );
        registry.register(
            "watch_cache_capacity_increase",
            "Increases of the watch cache's window capacity, by resource",
            self.capacity_increase.clone(),
        );
        registry.register(
            "watch_cache_capacity_decrease",
            "Decreases of the watch cache's window capacity (by the freshness rule or a byte-budget squeeze), by resource",
            self.capacity_decrease.clone(),
        );
        registry.register(
            "listwatch_watch_cache_memory_bytes",
            "Bytes the watch cache accounts, by resource and part: state (current objects), window (object versions only the event window keeps), snapshots (what only pinned past states keep); window + snapshots is what --watch-cache-window-bytes bounds",
            self.memory.clone(),
        );
        registry.register(
            "listwatch_watch_cache_window_budget_bytes",
            "The watch cache's history budget (--watch-cache-window-bytes), by resource; 0: none",
            self.window_budget.clone(),
        );
        registry.register(
            "listwatch_watch_cache_events_evicted",
            "Events that left the watch cache's window, by resource and reason: capacity (full window) or budget (history over --watch-cache-window-bytes); a watcher behind an evicted event gets 410 Expired",
            self.evicted.clone(),
        );
    }

    /// The hook for one resource, calling `then` after recording.
    pub(crate) fn hook(
        &self,
        resource: &str,
        initial_capacity: usize,
        window_budget: Option<usize>,
        then: Arc<dyn CacheMetrics>,
    ) -> ResourceHook {
        let r = ResourceLabel {
            resource: resource.to_owned(),
        };
        let memory = |part| {
            self.memory
                .get_or_create(&MemoryLabels {
                    resource: resource.to_owned(),
                    part,
                })
                .clone()
        };
        let evicted = |reason| {
            self.evicted
                .get_or_create(&EvictionLabels {
                    resource: resource.to_owned(),
                    reason,
                })
                .clone()
        };
        let hook = ResourceHook {
            capacity: self.capacity.get_or_create(&r).clone(),
            increase: self.capacity_increase.get_or_create(&r).clone(),
            decrease: self.capacity_decrease.get_or_create(&r).clone(),
            state: memory("state"),
            window: memory("window"),
            snapshots: memory("snapshots"),
            by_capacity: evicted("capacity"),
            by_budget: evicted("budget"),
            then,
        };
        hook.capacity.set(gauge_value(initial_capacity));
        self.window_budget
            .get_or_create(&r)
            .set(gauge_value(window_budget.unwrap_or(0)));
        hook
    }
}

/// A byte or event count as a gauge's value (saturating: a gauge is an `i64`).
fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One resource's series, as the watch cache's [`CacheMetrics`] hook.
pub(crate) struct ResourceHook {
    capacity: Gauge,
    increase: Counter,
    decrease: Counter,
    state: Gauge,
    window: Gauge,
    snapshots: Gauge,
    by_capacity: Counter,
    by_budget: Counter,
    /// The hook the configuration had (tests' recorders; [`NoMetrics`] by default).
    ///
    /// [`NoMetrics`]: listwatch_watchcache::NoMetrics
    then: Arc<dyn CacheMetrics>,
}

impl CacheMetrics for ResourceHook {
    fn capacity_changed(&self, resource: &str, old: usize, new: usize) {
        self.capacity.set(gauge_value(new));
        if new > old {
            self.increase.inc();
        } else if new < old {
            self.decrease.inc();
        }
        self.then.capacity_changed(resource, old, new);
    }

    fn events_evicted(&self, resource: &str, count: usize, reason: EvictionReason) {
        let counter = match reason {
            EvictionReason::Capacity => &self.by_capacity,
            EvictionReason::Budget => &self.by_budget,
        };
        counter.inc_by(u64::try_from(count).unwrap_or(u64::MAX));
        self.then.events_evicted(resource, count, reason);
    }

    fn memory(&self, resource: &str, usage: MemoryUsage) {
        self.state.set(gauge_value(usage.state_bytes));
        self.window.set(gauge_value(usage.window_bytes));
        self.snapshots.set(gauge_value(usage.snapshot_bytes));
        self.then.memory(resource, usage);
    }
}
