//! What a YAML body that replays an anchor many times costs before it is refused, measured
//! with a counting global allocator (this file is its own test binary, so the allocator is
//! test-only; it counts every thread, so the binary holds a single test).
//!
//! Issue 24's red team: merge keys (`<<: [*a, *a, …]`) fold every replay into the same few
//! keys, so the value never grows past its budget; the alias-replay limit was the byte
//! budget counted as events, and a 3 MB body replayed 24 million events (~32 s of CPU,
//! +1.9 GB) before its 413.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;

use listwatch_endpoints::limits::{DecodeError, decode_yaml};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// An anchor of 200 keys, then `spec` merging (or listing) it `refs` times.
fn body(refs: usize, merge: bool) -> String {
    let mut y = String::from("base: &a\n");
    for i in 0..200 {
        y.push_str(&format!("  k{i}: {i}\n"));
    }
    let list = vec!["*a"; refs].join(",");
    y.push_str(&if merge {
        format!("spec:\n  <<: [{list}]\n")
    } else {
        format!("spec: [{list}]\n")
    });
    y
}

#[test]
fn anchor_replays_cost_a_small_multiple_of_the_body_before_the_413() {
    // The reference: a flow list of as many small integers as the bomb has aliases, which
    // decodes (its value is about its size).
    let plain = format!("spec: [{}]\n", vec!["12"; 330_000].join(","));
    let region = Region::new(GLOBAL);
    assert!(decode_yaml(plain.as_bytes()).is_ok());
    let reference = region.change().bytes_allocated;
    for merge in [true, false] {
        // ~1 MB: 330 000 aliases of ~400 events each.
        let y = body(330_000, merge);
        let region = Region::new(GLOBAL);
        let got = decode_yaml(y.as_bytes());
        let allocated = region.change().bytes_allocated;
        assert!(
            matches!(got, Err(DecodeError::TooLarge { .. })),
            "merge={merge}: {got:?}"
        );
        // Measured: 21.7 MB (1.3× the reference; ~20 000 replayed events at ~850 bytes
        // each) with the bound, 2.2 GB (2 234× the body) without it.
        assert!(
            allocated < 3 * reference,
            "merge={merge}: decoding {} bytes allocated {allocated} bytes ({}× the body) before \
             refusing it; a plain list of the same length allocates {reference}",
            y.len(),
            allocated / y.len()
        );
    }
}
