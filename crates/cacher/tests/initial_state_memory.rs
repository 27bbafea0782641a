//! A watch that starts with the current state (RV=0, `sendInitialEvents`) reads that state
//! through a cursor on the view it started from, a chunk at a time as its consumer reads
//! (issue 26 item 4): what it holds does not grow with the state. Measured with a counting
//! global allocator (this file is its own test binary, with a single test, because the
//! allocator counts every thread).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::alloc::System;
use std::collections::BTreeSet;
use std::sync::Arc;

use common::{next, pod, put};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Objects in the state.
const OBJECTS: u64 = 5_000;
/// Watchers opened from the state and not read.
const WATCHERS: usize = 200;
/// What one such watcher may hold: a chunk of events and a view handle, whatever the state's
/// size (materialising the state took about 80 B per object: 400 KB here).
const PER_WATCHER: isize = 32 * 1024;

fn held(region: &Region<'_, System>) -> isize {
    let s = region.change();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

#[tokio::test(flavor = "current_thread")]
async fn a_watch_from_the_state_holds_a_chunk_not_the_state() {
    let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    let mut last = 0;
    for i in 0..OBJECTS {
        last = put(&cacher, pod("ns", &format!("p{i:05}"), "n1", 0))
            .await
            .resource_version();
    }
    cacher.wait_until_fresh(last).await.unwrap();
    let all = Key::collection("pods", Some("ns")).unwrap();
    let from_state = ListOptions {
        resource_version: Some(0),
        ..ListOptions::recursive()
    };
    let with_bookmark = ListOptions {
        resource_version: Some(last),
        send_initial_events: Some(true),
        allow_watch_bookmarks: true,
        ..ListOptions::recursive()
    };
    // Warm up what is shared.
    drop(cacher.watch(&all, &from_state).await.unwrap());

    let region = Region::new(GLOBAL);
    let mut watchers = Vec::with_capacity(WATCHERS);
    for i in 0..WATCHERS {
        let opts = if i % 2 == 0 {
            &from_state
        } else {
            &with_bookmark
        };
        watchers.push(cacher.watch(&all, opts).await.unwrap());
    }
    let per_watcher = held(&region) / WATCHERS as isize;
    eprintln!("per watcher from a state of {OBJECTS} objects, unread: {per_watcher} B");
    assert!(
        per_watcher <= PER_WATCHER,
        "{per_watcher} B per watcher from a state of {OBJECTS} objects"
    );

    // Read whole, they still get every object once, in key order, then (if asked) the
    // initial-events-end bookmark at the state's version; a write after it comes live once.
    for (i, w) in watchers.iter_mut().enumerate().take(2) {
        let mut names = Vec::new();
        for _ in 0..OBJECTS {
            match next(w).await {
                Some(WatchEvent::Added(o)) => names.push(o.name().to_owned()),
                other => panic!("watcher {i}: expected ADDED, got {other:?}"),
            }
        }
        let want: Vec<String> = (0..OBJECTS).map(|i| format!("p{i:05}")).collect();
        assert_eq!(names, want, "watcher {i}");
        assert_eq!(names.iter().collect::<BTreeSet<_>>().len(), names.len());
        if i % 2 == 1 {
            match next(w).await {
                Some(WatchEvent::Bookmark(b)) => {
                    assert!(b.initial_events_end);
                    assert_eq!(b.resource_version, last);
                }
                other => panic!("watcher {i}: expected the end bookmark, got {other:?}"),
            }
        }
    }
    let after = put(&cacher, pod("ns", "after", "n1", 0)).await;
    for w in watchers.iter_mut().take(2) {
        match next(w).await {
            Some(WatchEvent::Added(o)) => assert_eq!(o, after),
            other => panic!("expected the later write, got {other:?}"),
        }
    }
    drop(watchers);
    assert_eq!(cacher.watcher_count(), 0);
    let _ = cacher.current_resource_version().await;
}
