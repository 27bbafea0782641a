//! The default path of a relist when nothing changed: `Config::default()` over HTTP against
//! a server that answers the relist at the last version with one unpaginated list, as
//! kube-apiserver's watch cache does. The whole collection arrives in one body; the client
//! must decode it one object at a time and drop each unchanged copy as it arrives, so the
//! peak of live heap bytes (body bytes included) stays within 1.5× the synced store.
//! (`relist_harness/http.rs` is the harness; one test per binary because the allocator's
//! maximum is process-wide.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod relist_harness;

use std::alloc::System;

use cap::Cap;

#[global_allocator]
static ALLOC: Cap<System> = Cap::new(System, usize::MAX);

#[test]
fn a_default_relist_where_nothing_changed_stays_within_one_and_a_half_times_the_store() {
    let m = relist_harness::http::measure_default_relist(&ALLOC, None);
    assert!(
        m.ratio() <= 1.5,
        "peak {} B is {:.2}× the store's {} B",
        m.peak,
        m.ratio(),
        m.store_bytes
    );
}
