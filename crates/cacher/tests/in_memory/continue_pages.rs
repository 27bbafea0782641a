//! Continued lists (a continue token) are served from the cache's state at the token's
//! version, as upstream's ListFromCacheSnapshot: the backend is not asked, and the pages are
//! one consistent list even while the resource changes between them. When the cache no
//! longer holds that state, the backend answers the continuation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::{Probe, pod, put};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage};

fn all() -> Key {
    Key::collection("pods", None).unwrap()
}

fn page(limit: u64, token: Option<String>) -> ListOptions {
    ListOptions {
        limit: Some(limit),
        continue_token: token,
        ..ListOptions::recursive()
    }
}

/// Walks every page after `first`; returns the names and the version of each page.
async fn walk(cacher: &Cacher, mut token: Option<String>) -> (Vec<String>, BTreeSet<u64>) {
    let (mut names, mut versions) = (Vec::new(), BTreeSet::new());
    while let Some(t) = token {
        let list = cacher.list(&all(), &page(7, Some(t))).await.unwrap();
        names.extend(list.items.iter().map(|o| o.name().to_owned()));
        versions.insert(list.resource_version);
        token = list.continue_token;
    }
    (names, versions)
}

#[tokio::test]
async fn continue_pages_come_from_the_cache_at_the_tokens_version() {
    let probe = Probe::new(MemStore::new());
    let cacher = Cacher::new(Arc::new(probe.clone()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    let mut last = 0;
    for i in 0..30 {
        last = put(&cacher, pod("ns", &format!("p{i:02}"), "n1", 0))
            .await
            .resource_version();
    }
    cacher.wait_until_fresh(last).await.unwrap();
    let first = cacher.list(&all(), &page(7, None)).await.unwrap();
    assert_eq!(first.items.len(), 7);
    let at = first.resource_version;
    // Changes after the first page: none of them may show in the rest of the list.
    put(&cacher, pod("ns", "p20", "n2", 1)).await;
    put(&cacher, pod("ns", "p99", "n1", 0)).await;
    let key = Key::object("pods", Some("ns"), "p25").unwrap();
    let gone = cacher
        .delete(&key, None, listwatch_storage::no_validation(), None)
        .await
        .unwrap();
    cacher
        .wait_until_fresh(gone.resource_version())
        .await
        .unwrap();

    let lists_before = probe.lists.load(Ordering::SeqCst);
    let (rest, versions) = walk(&cacher, first.continue_token.clone()).await;
    assert_eq!(
        probe.lists.load(Ordering::SeqCst),
        lists_before,
        "a continued page went to the backend"
    );
    assert_eq!(versions, BTreeSet::from([at]));
    let mut names: Vec<String> = first.items.iter().map(|o| o.name().to_owned()).collect();
    names.extend(rest);
    let want: Vec<String> = (0..30).map(|i| format!("p{i:02}")).collect();
    assert_eq!(names, want, "the pages are the state at {at}");
}

/// The first page pins the state it read: ten writes later, with a window of 4 events that
/// no longer reaches back to the token's version, the rest of the walk still comes from the
/// cache.
#[tokio::test]
async fn a_pinned_continuation_outlives_the_window() {
    let probe = Probe::new(MemStore::new());
    let config = CacherConfig::new("pods").with_watch_cache(|c| c.with_capacity(4, 4, 4));
    let cacher = Cacher::new(Arc::new(probe.clone()), config);
    cacher.wait_ready().await;
    let mut last = 0;
    for i in 0..10 {
        last = put(&cacher, pod("ns", &format!("p{i:02}"), "n1", 0))
            .await
            .resource_version();
    }
    cacher.wait_until_fresh(last).await.unwrap();
    let first = cacher.list(&all(), &page(7, None)).await.unwrap();
    for i in 10..20 {
        last = put(&cacher, pod("ns", &format!("p{i:02}"), "n1", 0))
            .await
            .resource_version();
    }
    cacher.wait_until_fresh(last).await.unwrap();
    let lists_before = probe.lists.load(Ordering::SeqCst);
    let (rest, versions) = walk(&cacher, first.continue_token.clone()).await;
    assert_eq!(probe.lists.load(Ordering::SeqCst), lists_before);
    assert_eq!(versions, BTreeSet::from([first.resource_version]));
    assert_eq!(rest, ["p07", "p08", "p09"]);
}

/// Regression for the fallback path: with a window of 4 events and one pin at most, a token
/// whose pin was pushed out by another walk's, and whose version the window no longer
/// reaches, is answered by the backend (the embedded store still has that revision): still
/// the state at the token's version.
#[tokio::test]
async fn a_continuation_the_cache_no_longer_holds_goes_to_the_backend() {
    let probe = Probe::new(MemStore::new());
    let config = CacherConfig::new("pods").with_watch_cache(|c| {
        c.with_capacity(4, 4, 4)
            .with_snapshot_limits(1, std::time::Duration::from_secs(600))
    });
    let cacher = Cacher::new(Arc::new(probe.clone()), config);
    cacher.wait_ready().await;
    let mut last = 0;
    for i in 0..10 {
        last = put(&cacher, pod("ns", &format!("p{i:02}"), "n1", 0))
            .await
            .resource_version();
    }
    cacher.wait_until_fresh(last).await.unwrap();
    let first = cacher.list(&all(), &page(7, None)).await.unwrap();
    for i in 10..20 {
        last = put(&cacher, pod("ns", &format!("p{i:02}"), "n1", 0))
            .await
            .resource_version();
    }
    cacher.wait_until_fresh(last).await.unwrap();
    // Another walk's first page takes the only pin.
    let other = cacher.list(&all(), &page(7, None)).await.unwrap();
    assert!(other.continue_token.is_some());
    let lists_before = probe.lists.load(Ordering::SeqCst);
    let (rest, versions) = walk(&cacher, first.continue_token.clone()).await;
    assert!(probe.lists.load(Ordering::SeqCst) > lists_before);
    assert_eq!(versions, BTreeSet::from([first.resource_version]));
    assert_eq!(rest, ["p07", "p08", "p09"]);
}
