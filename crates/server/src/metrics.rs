//! Request metrics, registered in the one shared prometheus-client registry.
//!
//! Names follow upstream's `apiserver_*` metrics where one exists. Invariant: gauges are
//! decremented by guards, so a dropped request or watch never leaves them high; what a watch
//! counts per event goes to a per-thread shard ([`PerCore`]), never to a cache line every
//! watch of the resource shares.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus_client::metrics::counter::{Atomic, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The installer's metrics.
#[derive(Clone)]
pub struct Metrics {
    requests: Family<Labels, Counter>,
    duration: Family<Labels, Histogram, fn() -> Histogram>,
    inflight: Family<Labels, Gauge>,
    watches: Gauge,
    watch_events: Family<Labels, WatchEvents>,
    rejected: Family<Labels, Counter>,
    flow_rejected: Family<Labels, Counter>,
    inqueue: Family<Labels, Gauge>,
    /// Seats held by executing requests, per level.
    executing_seats: Family<Labels, Gauge>,
    /// Requests executing, per level (the exempt level's too, which holds no seats).
    executing_requests: Family<Labels, Gauge>,
    /// The seats each request asked for, per level (its work estimate, capped by the level).
    estimated_seats: Family<Labels, Histogram, fn() -> Histogram>,
    /// Requests waiting at the compute pool's admission gate, and tasks admitted to the pool.
    compute_waiting: Gauge,
    compute_admitted: Gauge,
    /// Responses sent gzipped, by kind (`list`, `watch`): counted once per response.
    gzipped: Family<Labels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 4.0, 10))
}

/// Upstream's buckets of `apiserver_flowcontrol_work_estimated_seats` (up to the list
/// maximum, 100).
fn seats_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 10.0, 25.0, 50.0, 100.0])
}

impl Metrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(histogram as fn() -> Histogram),
            inflight: Family::default(),
            watches: Gauge::default(),
            watch_events: Family::default(),
            rejected: Family::default(),
            flow_rejected: Family::default(),
            inqueue: Family::default(),
            executing_seats: Family::default(),
            executing_requests: Family::default(),
            estimated_seats: Family::new_with_constructor(seats_histogram as fn() -> Histogram),
            compute_waiting: Gauge::default(),
            compute_admitted: Gauge::default(),
            gzipped: Family::default(),
        };
        registry.register(
            "apiserver_request",
            "Requests by verb, resource and HTTP code",
            m.requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Time to the response headers, by verb and resource (watches excluded)",
            m.duration.clone(),
        );
        registry.register(
            "apiserver_current_inflight_requests",
            "Requests being served, by kind (readOnly, mutating)",
            m.inflight.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "Open watches",
            m.watches.clone(),
        );
        registry.register(
            "apiserver_watch_events_sent",
            "Watch events sent, by resource",
            m.watch_events.clone(),
        );
        registry.register(
            "apiserver_dropped_requests",
            "Requests rejected with 429 by a limit, by kind (readOnly, mutating, watch)",
            m.rejected.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_rejected_requests",
            "Requests rejected by flow control, by priority level (readOnly, mutating, watch) and reason",
            m.flow_rejected.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_inqueue_requests",
            "Requests waiting for a seat, by priority level",
            m.inqueue.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_executing_seats",
            "Seats held by executing requests, by priority level (a list holds its estimated width)",
            m.executing_seats.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_current_executing_requests",
            "Requests executing, by priority level (exempt requests hold no seat)",
            m.executing_requests.clone(),
        );
        registry.register(
            "apiserver_flowcontrol_work_estimated_seats",
            "Seats requests asked for (their work estimate as the level counts it), by priority level",
            m.estimated_seats.clone(),
        );
        registry.register(
            "apiserver_request_compute_current_waiting_requests",
            "Requests holding a seat and waiting for a place in the request compute pool",
            m.compute_waiting.clone(),
        );
        registry.register(
            "apiserver_request_compute_current_admitted_requests",
            "Requests admitted to the request compute pool (computing or in its run queue)",
            m.compute_admitted.clone(),
        );
        registry.register(
            "listwatch_gzip_responses",
            "Responses sent gzipped, by kind (list, watch)",
            m.gzipped.clone(),
        );
        m
    }

    /// Counts a gzipped response of `kind` (`list` or `watch`).
    pub fn gzipped(&self, kind: &'static str) {
        self.gzipped
            .get_or_create(&vec![("kind", kind.to_owned())])
            .inc();
    }

    /// Counts a request answered with `code` (`apiserver_request_total`) and, when given,
    /// observes its duration (`apiserver_request_duration_seconds`).
    pub fn observe(&self, verb: &str, resource: &str, code: u16, seconds: Option<f64>) {
        self.requests
            .get_or_create(&vec![
                ("verb", verb.to_owned()),
                ("resource", resource.to_owned()),
                ("code", code.to_string()),
            ])
            .inc();
        if let Some(s) = seconds {
            self.duration
                .get_or_create(&vec![
                    ("verb", verb.to_owned()),
                    ("resource", resource.to_owned()),
                ])
                .observe(s);
        }
    }

    /// Counts a request of `kind` refused for lack of a seat or slot
    /// (`apiserver_dropped_requests_total`).
    pub fn rejected(&self, kind: &'static str) {
        self.rejected
            .get_or_create(&vec![("request_kind", kind.to_owned())])
            .inc();
    }

    /// Counts a refusal of flow control's `level` for `reason`
    /// (`apiserver_flowcontrol_rejected_requests_total`).
    pub fn flowcontrol_rejected(&self, level: &'static str, reason: &'static str) {
        self.flow_rejected
            .get_or_create(&vec![
                ("priority_level", level.to_owned()),
                ("reason", reason.to_owned()),
            ])
            .inc();
    }

    /// The gauge of requests waiting for a seat of `level`.
    pub fn inqueue(&self, level: &'static str) -> Gauge {
        self.inqueue
            .get_or_create(&vec![("priority_level", level.to_owned())])
            .clone()
    }

    /// The gauge of the seats held in `level`.
    pub fn executing_seats(&self, level: &'static str) -> Gauge {
        self.executing_seats
            .get_or_create(&vec![("priority_level", level.to_owned())])
            .clone()
    }

    /// Counts a request executing in `level` until the guard is dropped.
    pub fn executing_request(&self, level: &'static str) -> GaugeGuard {
        let g = self
            .executing_requests
            .get_or_create(&vec![("priority_level", level.to_owned())])
            .clone();
        g.inc();
        GaugeGuard(g)
    }

    /// The histogram of the seats requests of `level` ask for.
    pub fn estimated_seats(&self, level: &'static str) -> Histogram {
        self.estimated_seats
            .get_or_create(&vec![("priority_level", level.to_owned())])
            .clone()
    }

    /// The gauges of the compute pool's gate: waiting requests, admitted tasks.
    pub fn compute_gate(&self) -> (Gauge, Gauge) {
        (self.compute_waiting.clone(), self.compute_admitted.clone())
    }

    /// Counts a request of `kind` in flight until the guard is dropped.
    pub fn inflight(&self, kind: &'static str) -> GaugeGuard {
        let g = self
            .inflight
            .get_or_create(&vec![("request_kind", kind.to_owned())])
            .clone();
        g.inc();
        GaugeGuard(g)
    }

    /// Counts an open watch until the guard is dropped.
    pub fn watch_started(&self) -> GaugeGuard {
        self.watches.inc();
        GaugeGuard(self.watches.clone())
    }

    /// The per-thread counters of events sent to watchers of `resource`.
    pub fn watch_events(&self, resource: &str) -> WatchEvents {
        self.watch_events
            .get_or_create(&vec![("resource", resource.to_owned())])
            .clone()
    }
}

/// Watch events sent, counted per thread (see [`PerCore`]).
pub type WatchEvents = Counter<u64, PerCore>;

/// How many shards a [`PerCore`] value has (threads beyond it share them round robin).
const SHARDS: usize = 16;

/// One shard on a cache line of its own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(AtomicU64);

/// A counter's value spread over 16 (`SHARDS`) cache-line-padded shards, each thread adding to
/// its own (threads are given shards round robin on first use): an increment never touches
/// a line that every watch of the resource writes, and a read sums the shards. The value
/// [`Atomic::inc_by`] returns is the shard's, not the counter's.
#[derive(Debug)]
pub struct PerCore([Shard; SHARDS]);

impl Default for PerCore {
    fn default() -> Self {
        Self(std::array::from_fn(|_| Shard::default()))
    }
}

fn shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

impl Atomic<u64> for PerCore {
    fn inc(&self) -> u64 {
        self.inc_by(1)
    }

    fn inc_by(&self, v: u64) -> u64 {
        self.0
            .get(shard())
            .map_or(0, |s| s.0.fetch_add(v, Ordering::Relaxed))
    }

    fn get(&self) -> u64 {
        self.0
            .iter()
            .fold(0u64, |sum, s| sum.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}

/// Decrements its gauge when dropped.
#[derive(Debug)]
pub struct GaugeGuard(Gauge);

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_core_counter_sums_what_every_thread_added() {
        let c = WatchEvents::default();
        std::thread::scope(|s| {
            for _ in 0..(SHARDS + 3) {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.inc();
                    }
                    c.inc_by(5);
                });
            }
        });
        assert_eq!(c.get(), (SHARDS as u64 + 3) * 1005);
        let mut registry = Registry::default();
        let m = Metrics::register(&mut registry);
        m.watch_events("pods").inc_by(7);
        m.watch_events("pods").inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("apiserver_watch_events_sent_total{resource=\"pods\"} 8"),
            "{text}"
        );
    }
}
