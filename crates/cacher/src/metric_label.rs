//! The label every cacher metric series carries (a leaf: the cacher's metric families and the
//! watch cache's memory families both use it, and neither depends on the other for it).

use prometheus_client::encoding::EncodeLabelSet;

/// The label every cacher series carries.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    /// The resource, e.g. `pods`.
    pub resource: String,
}
