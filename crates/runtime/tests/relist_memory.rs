//! A relist never holds two copies of the store: with a counting global allocator, the peak
//! of live heap bytes stays within 1.5× the synced store.
//!
//! The lister-watcher (relist_harness) generates every page afresh (as a network decode
//! would), so each relist brings a complete new copy of every object; the store must drop the
//! copies of unchanged objects as they arrive instead of building a second map beside the
//! first.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relist_harness;

use std::alloc::System;

use cap::Cap;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

#[test]
fn relist_peak_memory_stays_within_one_and_a_half_times_the_store() {
    // A fifth of the objects change while the watch is down.
    let m = relist_harness::measure_relist(&ALLOC, 5);
    // The allocator's maximum covers the initial list and the relist alike.
    assert!(
        m.ratio() <= 1.5,
        "peak {} B is {:.2}× the store's {} B",
        m.peak,
        m.ratio(),
        m.store_bytes
    );
}
