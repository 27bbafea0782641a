//! Watch dispatch latency: upstream's `apiserver_watch_events_dispatch_duration_seconds`
//! histogram, by resource and pipeline stage, observed without contention on the per-event
//! and per-delivery paths.
//!
//! The stages of a live event on its way to one watcher (each a label value of `stage`):
//! - `storage_to_cache`: the backend's watch stream hands the event to the cacher's lister-
//!   watcher → the event is applied to the watch cache (the reflector and the feeder);
//! - `cacher_queue`: applied to the cache → the dispatcher takes it up (the incoming queue);
//! - `cache_to_watcher`: the dispatcher takes it up → it is in this watcher's buffer (the
//!   fan-out loop, and a blocked watcher's wait when stall-and-resume is off); stamped on the
//!   buffered item and observed when the watcher delivers it, so an event the watcher's start
//!   already covered (pushed while it registered, then dropped) is not counted;
//! - `watcher_queue`: the dispatcher takes it up → this watcher's consumer (the HTTP watch
//!   server, which writes it to the connection at once) takes it from the buffer;
//! - `total`: the backend hands it over → the watcher's consumer takes it: the storage →
//!   client latency of the watch-latency SLO (docs/benchmarks.md).
//!
//! Stages overlap (`watcher_queue` includes `cache_to_watcher`) and only live deliveries are
//! observed: events replayed from the window or sent as initial state are not dispatch
//! latency. Buckets are upstream's. Upstream's stages are `storage_to_cache`,
//! `cache_to_watcher` and `total` (etcd decode → the watcher's result channel); the two queue
//! stages are ours. There is no `group` label: a cacher knows its resource only.
//!
//! Invariants: an observation touches no lock and no cache line another thread writes: each
//! thread adds to its own shard of relaxed atomic counters ([`StageHistogram`]), and only
//! scraping `/metrics` reads (and sums) every shard. A thread's shard is fixed the first
//! time it observes; with more threads than [`SHARDS`] two threads share one, which costs
//! cache-line traffic between them but stays correct.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Upstream's buckets for `apiserver_watch_events_dispatch_duration_seconds`, in seconds.
pub const BUCKETS: [f64; 13] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Counter shards per histogram.
pub const SHARDS: usize = 16;

/// A pipeline stage (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Backend → watch cache.
    StorageToCache,
    /// Watch cache → dispatcher.
    CacherQueue,
    /// Dispatcher → the watcher's buffer.
    CacheToWatcher,
    /// Dispatcher → the watcher's consumer.
    WatcherQueue,
    /// Backend → the watcher's consumer.
    Total,
}

impl Stage {
    /// Every stage, in label order.
    pub const ALL: [Stage; 5] = [
        Stage::StorageToCache,
        Stage::CacherQueue,
        Stage::CacheToWatcher,
        Stage::WatcherQueue,
        Stage::Total,
    ];

    /// The `stage` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::StorageToCache => "storage_to_cache",
            Stage::CacherQueue => "cacher_queue",
            Stage::CacheToWatcher => "cache_to_watcher",
            Stage::WatcherQueue => "watcher_queue",
            Stage::Total => "total",
        }
    }
}

/// The labels of one dispatch-latency series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// The resource, e.g. `pods`.
    pub resource: String,
    /// The stage's label value ([`Stage::as_str`]).
    pub stage: &'static str,
}

/// One thread's counters: a count per bucket (the last is +Inf) and the sum in nanoseconds,
/// on cache lines of their own.
#[repr(align(128))]
#[derive(Default)]
struct Shard {
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

/// A histogram whose observations go to the observing thread's shard (see the module docs).
/// Cloning shares it.
#[derive(Clone, Default)]
pub struct StageHistogram {
    shards: Arc<[Shard; SHARDS]>,
}

impl std::fmt::Debug for StageHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (_, count, _) = self.snapshot();
        f.debug_struct("StageHistogram")
            .field("count", &count)
            .finish()
    }
}

thread_local! {
    /// This thread's shard, chosen on its first observation.
    static SHARD: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Hands shards to threads in turn.
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

fn my_shard() -> usize {
    SHARD.with(|s| match s.get() {
        Some(i) => i,
        None => {
            let i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(Some(i));
            i
        }
    })
}

impl StageHistogram {
    /// Records one latency.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        let Some(shard) = self.shards.get(my_shard()) else {
            return;
        };
        if let Some(b) = shard.buckets.get(i) {
            b.fetch_add(1, Ordering::Relaxed);
        }
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        shard.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Sum (seconds), count and per-bucket counts (upper bound, count; the last is +Inf)
    /// over every shard.
    pub fn snapshot(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut counts = [0u64; BUCKETS.len() + 1];
        let mut nanos = 0u64;
        for s in self.shards.iter() {
            for (c, b) in counts.iter_mut().zip(&s.buckets) {
                *c += b.load(Ordering::Relaxed);
            }
            nanos = nanos.wrapping_add(s.sum_nanos.load(Ordering::Relaxed));
        }
        let bounds = BUCKETS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY));
        let buckets: Vec<(f64, u64)> = bounds.zip(counts).collect();
        let count = counts.iter().sum();
        (nanos as f64 / 1e9, count, buckets)
    }

    /// The smallest bucket bound at or under which at least `q` (0..=1) of the observations
    /// lie (`None` when there are none): an upper bound of the `q` quantile.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let (_, count, buckets) = self.snapshot();
        if count == 0 {
            return None;
        }
        let want = (q * count as f64).ceil() as u64;
        let mut seen = 0;
        for (bound, c) in buckets {
            seen += c;
            if seen >= want {
                return Some(bound);
            }
        }
        Some(f64::INFINITY)
    }
}

impl TypedMetric for StageHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for StageHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.snapshot();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The five stage histograms of one resource, resolved once (no label lookup per event).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stages([StageHistogram; 5]);

impl Stages {
    pub(crate) fn new(of: impl Fn(Stage) -> StageHistogram) -> Self {
        Self(Stage::ALL.map(of))
    }

    pub(crate) fn observe(&self, stage: Stage, d: Duration) {
        if let Some(h) = self.0.get(stage as usize) {
            h.observe(d);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn observations_from_many_threads_add_up_in_their_buckets() {
        let h = StageHistogram::default();
        std::thread::scope(|s| {
            for t in 0..24u64 {
                let h = h.clone();
                s.spawn(move || {
                    for _ in 0..1000 {
                        h.observe(Duration::from_micros(50 + t));
                    }
                    h.observe(Duration::from_secs(10));
                });
            }
        });
        let (sum, count, buckets) = h.snapshot();
        assert_eq!(count, 24 * 1001);
        assert_eq!(buckets.first().map(|b| b.1), Some(24_000), "≤ 100 µs");
        assert_eq!(buckets.last().map(|b| b.1), Some(24), "+Inf");
        assert!(
            (sum - (24.0 * 10.0 + 24_000.0 * 61.5e-6)).abs() < 1e-3,
            "{sum}"
        );
        assert_eq!(h.quantile_bound(0.99), Some(0.0001));
        assert_eq!(h.quantile_bound(1.0), Some(f64::INFINITY));
    }

    #[test]
    fn each_stage_has_its_label_and_the_text_format_is_a_histogram() {
        let mut registry = prometheus_client::registry::Registry::default();
        let family =
            prometheus_client::metrics::family::Family::<StageLabels, StageHistogram>::default();
        registry.register(
            "apiserver_watch_events_dispatch_duration_seconds",
            "x",
            family.clone(),
        );
        let stages = Stages::new(|s| {
            family
                .get_or_create(&StageLabels {
                    resource: "pods".into(),
                    stage: s.as_str(),
                })
                .clone()
        });
        stages.observe(Stage::Total, Duration::from_millis(3));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for s in Stage::ALL {
            assert!(out.contains(&format!("stage=\"{}\"", s.as_str())), "{out}");
        }
        assert!(out.contains(
            "apiserver_watch_events_dispatch_duration_seconds_bucket{le=\"0.005\",resource=\"pods\",stage=\"total\"} 1"
        ) || out.contains(
            "apiserver_watch_events_dispatch_duration_seconds_bucket{resource=\"pods\",stage=\"total\",le=\"0.005\"} 1"
        ), "{out}");
    }
}
