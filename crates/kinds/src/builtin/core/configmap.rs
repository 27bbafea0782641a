//! Config maps (`v1`): no status, no generation, no strategy code.

use crate::{Generation, KindSpec};

/// `v1` config maps.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "configmaps", "ConfigMap")
        .short_names(["cm"])
        .generation(Generation::None)
}
