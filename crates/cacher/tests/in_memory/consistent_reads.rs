//! Consistent lists (no resource version) on a cache that lags the backend: progress is
//! asked for as soon as a reader waits and then periodically while any does, never when no
//! one waits; when the cache cannot catch up in time, the backend answers, or 429 when so
//! configured. Time is tokio's paused clock: the durations are exact, not measured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Probe, pod, put, put_in};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Error, Key, ListOptions, Storage};
use tokio::time::Instant;

fn all() -> Key {
    Key::collection("pods", None).unwrap()
}

#[tokio::test(start_paused = true)]
async fn progress_is_asked_for_at_once_and_never_while_no_one_waits() {
    let probe = Probe::new(MemStore::new());
    let cacher = Cacher::new(Arc::new(probe.clone()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    put(&cacher, pod("ns", "a", "n1", 0)).await;
    // Idle: a minute passes without a single request.
    let before = probe.progress_requests();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(probe.progress_requests(), before);
    for i in 0..5 {
        // The pods cache now lags the backend's revision.
        let other = put_in(
            &probe.inner,
            "configmaps",
            pod("ns", &format!("c{i}"), "", 0),
        )
        .await;
        let t = Instant::now();
        let list = cacher
            .list(&all(), &ListOptions::recursive())
            .await
            .unwrap();
        assert_eq!(
            t.elapsed(),
            Duration::ZERO,
            "the first request is not delayed"
        );
        assert!(list.resource_version >= other.resource_version());
        assert_eq!(list.items.len(), 1);
    }
    assert_eq!(
        probe.progress_requests(),
        before + 5,
        "one request per lagging read"
    );
}

/// A backend that never answers progress requests: the read waits the freshness timeout
/// (3 s), asking every 100 ms, then reads the backend (the default) or answers 429.
#[tokio::test(start_paused = true)]
async fn a_cache_that_cannot_catch_up_falls_back_or_answers_429() {
    for fallback in [true, false] {
        let probe = Probe::new(MemStore::new());
        let mut config = CacherConfig::new("pods");
        config.consistent_read_fallback = fallback;
        let cacher = Cacher::new(Arc::new(probe.clone()), config);
        cacher.wait_ready().await;
        put(&cacher, pod("ns", "a", "n1", 0)).await;
        probe.progress_answered.store(false, Ordering::SeqCst);
        let other = put_in(&probe.inner, "configmaps", pod("ns", "c", "", 0)).await;
        let before = probe.progress_requests();
        let t = Instant::now();
        let got = cacher.list(&all(), &ListOptions::recursive()).await;
        assert_eq!(t.elapsed(), Duration::from_secs(3));
        let asked = probe.progress_requests() - before;
        assert!(
            (29..=31).contains(&asked),
            "{asked} progress requests in 3 s"
        );
        match (fallback, got) {
            (true, Ok(list)) => {
                assert_eq!(
                    list.resource_version,
                    other.resource_version(),
                    "from the backend"
                );
                assert_eq!(list.items.len(), 1);
            }
            (
                false,
                Err(Error::TooManyRequests {
                    retry_after_seconds,
                    ..
                }),
            ) => {
                assert_eq!(retry_after_seconds, 1);
            }
            (_, other) => panic!("fallback {fallback}: {other:?}"),
        }
        // Once no one waits, the requests stop.
        let after = probe.progress_requests();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(probe.progress_requests(), after);
    }
}
