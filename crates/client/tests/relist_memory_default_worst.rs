//! The default path of a relist when everything changed (`relist_memory_default.rs` is the
//! nothing-changed case, same harness): every object's new copy is staged until `InitDone`,
//! so the peak is the store plus one copy of each object, and no more — the list body is
//! never held whole beside them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relist_harness;

use std::alloc::System;

use cap::Cap;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

#[test]
fn a_default_relist_where_everything_changed_is_the_store_plus_one_copy() {
    let m = relist_harness::http::measure_default_relist(&ALLOC, Some(1));
    let ratio = m.ratio();
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
