//! The worst case of a relist: every object changed while the watch was down, so the new
//! copy of each is staged until `InitDone` and the peak is the store plus a whole second
//! copy (about 2×). Measured with a counting global allocator, in its own test binary
//! because the allocator's maximum is process-wide. (`relist_memory.rs` is the usual case;
//! both use relist_harness.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relist_harness;

use std::alloc::System;

use cap::Cap;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

#[test]
fn relist_peak_memory_when_everything_changed_is_the_store_plus_one_copy() {
    let m = relist_harness::measure_relist(&ALLOC, 1);
    let ratio = m.ratio();
    // Store + one full copy, plus the page in flight: bounded, never more than that.
    assert!(
        ratio > 1.5,
        "everything changed, so a second copy is staged: {ratio:.2}"
    );
    assert!(
        ratio <= 2.2,
        "peak {} B is {ratio:.2}× the store's {} B",
        m.peak,
        m.store_bytes
    );
}
