//! The memory of CRD schemas' compiled `pattern`s across the server: the limit
//! `--max-crd-pattern-bytes` sets (`listwatch_kinds::custom::schema::set_pattern_limit`:
//! a CRD whose new patterns would take the live total past it is refused with a 422), and
//! the gauges that show it (`apiserver_crd_pattern_bytes`: the live compiled patterns'
//! `memory_usage` — the served CRDs' schemas, schemas being validated, the recent
//! compilations — which drops when a CRD is deleted or its schema replaced;
//! `apiserver_crd_pattern_limit_bytes`).
//!
//! Invariants: the gauges read the process-wide counters when `/metrics` is encoded, so
//! they cost nothing between scrapes and are never stale; the limit is process-wide, as the
//! compiled patterns are shared by everything in the process.

use listwatch_kinds::custom::schema::{pattern_bytes, pattern_limit, set_pattern_limit};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder};
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

/// A gauge read from a function when encoded.
#[derive(Debug)]
struct ReadGauge(fn() -> usize);

impl TypedMetric for ReadGauge {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for ReadGauge {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&(self.0)())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }
}

/// Sets the server-wide limit (`--max-crd-pattern-bytes`, 0: none) and registers the gauges.
pub(crate) fn install(limit: usize, registry: &mut Registry) {
    set_pattern_limit(limit);
    registry.register(
        "apiserver_crd_pattern_bytes",
        "Heap of the compiled patterns of CRD schemas held now (served CRDs, validations in progress, recent compilations)",
        ReadGauge(pattern_bytes),
    );
    registry.register(
        "apiserver_crd_pattern_limit_bytes",
        "The most heap the compiled patterns of CRD schemas may take before a CRD adding more is refused (0: no limit)",
        ReadGauge(pattern_limit),
    );
}
