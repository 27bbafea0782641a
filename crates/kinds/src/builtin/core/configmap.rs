//! Config maps (`v1`): no status, no generation; a config map marked `immutable` keeps its
//! `data`, `binaryData` and the mark (upstream's `ValidateConfigMapUpdate`).

use serde_json::Value;

use crate::strategy::KindStrategy;
use crate::{FieldError, Generation, KindSpec};

/// `v1` config maps.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "configmaps", "ConfigMap")
        .short_names(["cm"])
        .generation(Generation::None)
        .strategy(ConfigMapStrategy)
}

/// The config map strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConfigMapStrategy;

impl KindStrategy for ConfigMapStrategy {
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        super::secret::immutable_contents(new, old, &["data", "binaryData"])
    }
}
