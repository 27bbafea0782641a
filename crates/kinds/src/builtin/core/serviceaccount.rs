//! Service accounts (`v1`): a DELETE answers with the deleted object; no strategy code.

use crate::{Generation, KindSpec};

/// `v1` service accounts.
pub fn spec() -> KindSpec {
    KindSpec::new("", "v1", "serviceaccounts", "ServiceAccount")
        .short_names(["sa"])
        .generation(Generation::None)
        .return_deleted_object(true)
}
