//! Endpoints (`v1`): a PUT of missing endpoints creates them; no strategy code.

use crate::{Generation, KindSpec};

/// `v1` endpoints.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "endpoints", "Endpoints")
        .short_names(["ep"])
        .singular("endpoints")
        .generation(Generation::None)
        .allow_create_on_update(true)
}
