//! The watch cache's consistency check in the running binary over the embedded store:
//! a cache made to miss an object's events is found out by the first check after, kubectl
//! and curl read the object from the storage meanwhile, and once the cache agrees again reads
//! come from it again (the scenario: `common/consistency.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

#[test]
fn missed_events_are_found_and_reads_fall_back_on_the_embedded_store() {
    common::consistency::missed_events_are_found_and_reads_fall_back(&[], true);
}
