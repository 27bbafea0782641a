//! Bookmarks as upstream: storage progress only moves the cache's version (no fan-out), each
//! watcher gets one on its own schedule (a minute apart) and one 2 s before its deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Probe, drain_for, pod, put, put_in};
use futures::StreamExt;
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use tokio::time::Instant;

fn all() -> Key {
    Key::collection("pods", None).unwrap()
}

fn with_bookmarks(rv: u64, deadline: Option<Instant>) -> ListOptions {
    ListOptions {
        resource_version: Some(rv),
        allow_watch_bookmarks: true,
        // What the HTTP layer asks for a watch that allows bookmarks.
        progress_notify: true,
        deadline: deadline.map(Instant::into_std),
        ..ListOptions::recursive()
    }
}

/// Each consistent list on a cache that lags the backend (another resource was written)
/// makes the cache ask the backend for progress. That progress moves the cache's version
/// and nothing else: watchers do not get a bookmark per list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_progress_is_not_fanned_out_to_watchers() {
    let probe = Probe::new(MemStore::new());
    let cacher = Cacher::new(Arc::new(probe.clone()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    let start = put(&cacher, pod("ns", "a", "n1", 0))
        .await
        .resource_version();
    let mut watchers = Vec::new();
    for _ in 0..3 {
        watchers.push(
            cacher
                .watch(&all(), &with_bookmarks(start, None))
                .await
                .unwrap(),
        );
    }
    for i in 0..20 {
        let other = put_in(
            &probe.inner,
            "configmaps",
            pod("ns", &format!("c{i}"), "", 0),
        )
        .await;
        let list = cacher
            .list(&all(), &ListOptions::recursive())
            .await
            .unwrap();
        assert!(list.resource_version >= other.resource_version());
    }
    assert!(
        probe.progress_requests() >= 20,
        "the lists did not wait for progress: {} requests",
        probe.progress_requests()
    );
    for w in &mut watchers {
        let got = drain_for(w, Duration::from_millis(300)).await;
        assert!(got.is_empty(), "{got:?}");
    }
}

/// When the next event, a bookmark at or after `rv`, comes (since `t0`).
async fn bookmark_at(w: &mut listwatch_storage::WatchStream, rv: u64, t0: Instant) -> Duration {
    // Virtual time: a long bound costs nothing.
    match tokio::time::timeout(Duration::from_secs(300), w.next())
        .await
        .expect("no bookmark")
    {
        Some(WatchEvent::Bookmark(b)) => {
            assert!(!b.initial_events_end);
            assert!(b.resource_version >= rv);
            t0.elapsed()
        }
        other => panic!("{other:?}"),
    }
}

/// Upstream's schedule: a bookmark a minute after the watch starts and every minute after,
/// and one 2 s before the watch's deadline (the client then resumes from a recent version);
/// nothing after that one. Time is tokio's paused clock: the numbers are exact, not measured.
#[tokio::test(start_paused = true)]
async fn bookmarks_come_every_minute_and_two_seconds_before_the_deadline() {
    let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    let rv = put(&cacher, pod("ns", "a", "n1", 0))
        .await
        .resource_version();
    let t0 = Instant::now();
    let mut endless = cacher
        .watch(&all(), &with_bookmarks(rv, None))
        .await
        .unwrap();
    let deadline = t0 + Duration::from_secs(90);
    let mut ending = cacher
        .watch(&all(), &with_bookmarks(rv, Some(deadline)))
        .await
        .unwrap();
    let mut plain = cacher
        .watch(
            &all(),
            &ListOptions {
                allow_watch_bookmarks: false,
                ..with_bookmarks(rv, Some(deadline))
            },
        )
        .await
        .unwrap();

    // Buckets are whole seconds: a bookmark due at X comes in (X − 1 s, X].
    let in_second = |got: Duration, due: u64| {
        assert!(
            got <= Duration::from_secs(due) && got > Duration::from_secs(due - 1),
            "due at {due} s, came at {got:?}"
        );
    };
    in_second(bookmark_at(&mut endless, rv, t0).await, 60);
    in_second(bookmark_at(&mut ending, rv, t0).await, 60);
    in_second(bookmark_at(&mut ending, rv, t0).await, 88);
    // Nothing more for the ending watch before its deadline.
    let left = deadline.saturating_duration_since(Instant::now());
    assert!(drain_for(&mut ending, left).await.is_empty());
    in_second(bookmark_at(&mut endless, rv, t0).await, 120);
    assert!(
        drain_for(&mut ending, Duration::from_secs(60))
            .await
            .is_empty()
    );
    // And nothing at all without bookmarks.
    assert!(
        tokio::time::timeout(Duration::from_millis(1), plain.next())
            .await
            .is_err()
    );
}
