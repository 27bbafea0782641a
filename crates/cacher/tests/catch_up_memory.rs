//! A watcher catching up from the window reads it through a cursor: what it holds does not
//! grow with the backlog. Measured with a counting global allocator (this file is its own
//! test binary, with a single test, because the allocator counts every thread).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::alloc::System;
use std::sync::Arc;

use common::{pod, put};
use futures::StreamExt;
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent, WatchStream};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const WINDOW: usize = 10_000;
const WATCHERS: usize = 1_000;

/// Opens `WATCHERS` watches from `from`, reads one event from each (so each is catching up,
/// and then stalls), and returns the heap bytes each holds.
async fn per_watcher(cacher: &Cacher, from: u64) -> (isize, Vec<WatchStream>) {
    let all = Key::collection("pods", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(from),
        ..ListOptions::recursive()
    };
    let region = Region::new(GLOBAL);
    let mut watchers = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        let mut w = cacher.watch(&all, &opts).await.unwrap();
        match w.next().await.and_then(|ev| ev.resource_version()) {
            Some(rv) => assert!(rv > from),
            None => panic!("the watch ended"),
        }
        watchers.push(w);
    }
    let s = region.change();
    let held = s.bytes_allocated as isize - s.bytes_deallocated as isize;
    (held / WATCHERS as isize, watchers)
}

#[tokio::test(flavor = "current_thread")]
async fn a_thousand_stalled_watchers_hold_the_same_whatever_the_backlog() {
    let config =
        CacherConfig::new("pods").with_watch_cache(|c| c.with_capacity(WINDOW, WINDOW, WINDOW));
    let cacher = Cacher::new(Arc::new(MemStore::new()), config);
    cacher.wait_ready().await;
    let first = put(&cacher, pod("ns", "p0", "n1", 0))
        .await
        .resource_version();
    let mut last = first;
    for i in 1..=WINDOW as u64 {
        last = put(&cacher, pod("ns", &format!("p{}", i % 50), "n1", i))
            .await
            .resource_version();
    }
    cacher.wait_until_fresh(last).await.unwrap();
    // The window is full: the oldest version a watch may start from replays all of it.
    let oldest = last - WINDOW as u64;
    let (short, a) = per_watcher(&cacher, last - 10).await;
    let (long, b) = per_watcher(&cacher, oldest).await;
    drop((a, b));
    let event = std::mem::size_of::<WatchEvent>() as isize;
    eprintln!(
        "per catching-up watcher: {short} B with 10 events to replay, {long} B with {WINDOW}; \
         a buffered event is {event} B"
    );
    // At most a chunk of buffered events more, whatever the backlog (a copied backlog would
    // be WINDOW × `event` bytes per watcher).
    assert!(
        long <= short + 64 * event,
        "{long} B per watcher with a backlog of {WINDOW}, {short} B with 10"
    );
}
