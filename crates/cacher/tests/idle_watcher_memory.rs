//! An idle watcher is small (issue 15 item 3: at most 512 B of heap per in-process watcher):
//! its buffer is allocated only when something is queued and given back once a backlog has
//! been drained. Measured with a counting global allocator (this file is its own test binary,
//! with a single test, because the allocator counts every thread).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::alloc::System;
use std::sync::Arc;

use common::{pod, put};
use futures::FutureExt;
use futures::StreamExt;
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent, WatchStream};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// As many as P9 opens, so that what all watchers share is a few bytes each.
const WATCHERS: usize = 10_000;
/// Issue 15's goal per in-process watcher.
const GOAL: isize = 512;
/// Events of the burst every watcher receives (more than the smallest kept buffer).
const BURST: u64 = 40;

fn held(region: &Region<'_, System>) -> isize {
    let s = region.change();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// Reads every event already there; returns how many.
fn drain_ready(w: &mut WatchStream) -> usize {
    let mut n = 0;
    while let Some(Some(ev)) = w.next().now_or_never() {
        assert!(!matches!(ev, WatchEvent::Error(_)), "{ev:?}");
        n += 1;
    }
    n
}

#[tokio::test(flavor = "current_thread")]
async fn an_idle_watcher_holds_at_most_512_bytes_before_and_after_a_burst() {
    let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    // Warm up what is shared (the dispatcher's vectors, the registry's maps' first sizes).
    let warm = put(&cacher, pod("ns", "warm", "n1", 0)).await;
    cacher
        .wait_until_fresh(warm.resource_version())
        .await
        .unwrap();
    let all = Key::collection("pods", Some("ns")).unwrap();
    let opts = ListOptions {
        resource_version: Some(warm.resource_version()),
        ..ListOptions::recursive()
    };
    let region = Region::new(GLOBAL);
    let mut watchers = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        watchers.push(cacher.watch(&all, &opts).await.unwrap());
    }
    let idle = held(&region) / WATCHERS as isize;
    // A burst every watcher receives and reads; then all are idle again.
    let mut last = 0;
    for i in 0..BURST {
        last = put(&cacher, pod("ns", "p", "n1", i))
            .await
            .resource_version();
    }
    cacher.wait_until_fresh(last).await.unwrap();
    // Let the dispatcher hand the burst out, then read it.
    let mut delivered = vec![0usize; WATCHERS];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        tokio::task::yield_now().await;
        for (w, n) in watchers.iter_mut().zip(&mut delivered) {
            *n += drain_ready(w);
        }
        if delivered.iter().all(|n| *n as u64 == BURST) {
            break;
        }
    }
    assert!(
        delivered.iter().all(|n| *n as u64 == BURST),
        "every watcher reads the whole burst"
    );
    let after = held(&region) / WATCHERS as isize;
    // From version 0 (the current state, empty here), as P9 watches: as small.
    let empty = Key::collection("pods", Some("empty")).unwrap();
    let from_state = ListOptions {
        resource_version: Some(0),
        ..ListOptions::recursive()
    };
    let region0 = Region::new(GLOBAL);
    let mut state_watchers = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        state_watchers.push(cacher.watch(&empty, &from_state).await.unwrap());
    }
    let idle_from_state = held(&region0) / WATCHERS as isize;
    drop(state_watchers);
    assert!(
        idle_from_state <= GOAL,
        "{idle_from_state} B per idle watcher from version 0"
    );
    drop(watchers);
    eprintln!(
        "per idle watcher: {idle} B ({idle_from_state} B from version 0); after a burst of {BURST} events, read: {after} B \
         (shared window and dispatcher ring included)"
    );
    assert!(idle <= GOAL, "{idle} B per idle watcher");
    assert!(after <= GOAL, "{after} B per watcher after a burst");
}
