//! The window of a cache that (re)initialized starts at or below every version a list
//! answered by the backend handed out while the cache listed (`floor` in the crate): a
//! client is never given a version from a list that a watch then refuses with 410 — the
//! loop a server started before etcd fell into (its informers listed at etcd's revision 2,
//! the caches then listed at 39–43 and refused their watches from 2, again and again).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{HELD_PAGE_SIZE, Probe, next, pod, put};
use listwatch_cacher::{Cacher, CacherConfig, ReadyState};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, Storage, WatchEvent};

fn all() -> Key {
    Key::collection("pods", None).unwrap()
}

/// A cacher over `probe` whose own lists `probe.hold_lists` holds.
fn cacher_over(probe: &Probe) -> Cacher {
    let mut config = CacherConfig::new("pods");
    config.list_page_size = u32::try_from(HELD_PAGE_SIZE).unwrap();
    Cacher::new(Arc::new(probe.clone()), config)
}

/// A page of everything while the cache lists: the backend answers it (KEP-4568).
async fn page_while_pending(cacher: &Cacher) -> u64 {
    assert_eq!(cacher.ready_state().0, ReadyState::Pending);
    let page = ListOptions {
        limit: Some(10),
        ..ListOptions::recursive()
    };
    let list = cacher.list(&all(), &page).await.unwrap();
    assert_eq!(cacher.ready_state().0, ReadyState::Pending);
    list.resource_version
}

async fn wait_ready(cacher: &Cacher) {
    tokio::time::timeout(Duration::from_secs(30), cacher.wait_ready())
        .await
        .expect("the cache never turned ready");
    assert_eq!(cacher.ready_state().0, ReadyState::Ready);
}

fn from(rv: u64) -> ListOptions {
    ListOptions {
        resource_version: Some(rv),
        ..ListOptions::recursive()
    }
}

/// The page list hands out `a`'s version; `b` is written before the cache's own list, which
/// reads at `b`'s. The cache relists at exactly the page's version, so a watch from it gets
/// `b` (before the fix: 410 "too old resource version", the cache's window began at `b`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_a_page_answered_while_the_cache_listed_is_served() {
    let probe = Probe::new(MemStore::new());
    probe.hold_lists(true);
    let cacher = cacher_over(&probe);
    let a = put(&probe.inner, pod("ns", "a", "n1", 0)).await;
    let handed_out = page_while_pending(&cacher).await;
    assert_eq!(handed_out, a.resource_version());
    let b = put(&probe.inner, pod("ns", "b", "n1", 0)).await;
    probe.hold_lists(false);
    wait_ready(&cacher).await;

    let mut w = cacher
        .watch(&all(), &from(handed_out))
        .await
        .expect("a watch from the version a list handed out");
    match next(&mut w).await {
        Some(WatchEvent::Added(o)) => {
            assert_eq!(
                (o.name(), o.resource_version()),
                ("b", b.resource_version())
            );
        }
        other => panic!("{other:?}"),
    }
    let c = put(&probe.inner, pod("ns", "c", "n1", 0)).await;
    match next(&mut w).await {
        Some(WatchEvent::Added(o)) => assert_eq!(o.resource_version(), c.resource_version()),
        other => panic!("{other:?}"),
    }
    // The state is the latest, as any list of a ready cache.
    let listed = cacher
        .list(&all(), &from(c.resource_version()))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 3);
    let lists = probe.reflector_lists.lock().unwrap().clone();
    assert_eq!(
        lists.last(),
        Some(&(Some(handed_out), Some(ResourceVersionMatch::Exact))),
        "{lists:?}"
    );
}

/// The same on a relist (the backend's watch expired while the cache was ready), with two
/// pages handed out: the window starts at the lower one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_relist_the_window_starts_at_the_lowest_version_handed_out() {
    let probe = Probe::new(MemStore::new());
    let cacher = cacher_over(&probe);
    wait_ready(&cacher).await;
    probe.wait_for_watches(1).await;
    probe.hold_lists(true);
    probe.cut_watches();
    tokio::time::timeout(Duration::from_secs(30), async {
        while cacher.ready_state().0 != ReadyState::Pending {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the cut made the cache relist");
    put(&probe.inner, pod("ns", "a", "n1", 0)).await;
    let low = page_while_pending(&cacher).await;
    let b = put(&probe.inner, pod("ns", "b", "n1", 0)).await;
    let high = page_while_pending(&cacher).await;
    assert!(low < high);
    put(&probe.inner, pod("ns", "c", "n1", 0)).await;
    probe.hold_lists(false);
    wait_ready(&cacher).await;
    for (rv, first) in [(low, &b), (high, &b)] {
        let mut w = cacher.watch(&all(), &from(rv)).await.expect("served");
        match next(&mut w).await {
            Some(WatchEvent::Added(o)) if rv == low => {
                assert_eq!(o.resource_version(), first.resource_version());
            }
            Some(WatchEvent::Added(o)) => assert_eq!(o.name(), "c"),
            other => panic!("{other:?}"),
        }
    }
}

/// A version the backend compacted away cannot be relisted at: the cache turns ready at its
/// latest list, and a watch from that version gets 410, as the backend itself answers it
/// (the client relists; nothing loops).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_below_the_compaction_is_not_relisted_at() {
    let probe = Probe::new(MemStore::new());
    probe.hold_lists(true);
    let cacher = cacher_over(&probe);
    put(&probe.inner, pod("ns", "a", "n1", 0)).await;
    let handed_out = page_while_pending(&cacher).await;
    let b = put(&probe.inner, pod("ns", "b", "n1", 0)).await;
    probe.inner.compact(b.resource_version()).unwrap();
    probe.hold_lists(false);
    wait_ready(&cacher).await;
    let lists = probe.reflector_lists.lock().unwrap().clone();
    assert!(lists.iter().all(|l| *l == (None, None)), "{lists:?}");
    let err = cacher
        .watch(&all(), &from(handed_out))
        .await
        .err()
        .expect("too old");
    assert!(err.is_expired(), "{err:?}");
    let backend = probe.inner.watch(&all(), &from(handed_out)).await;
    let refused = match backend {
        Err(e) => e.is_expired(),
        Ok(mut w) => matches!(next(&mut w).await, Some(WatchEvent::Error(e)) if e.is_expired()),
    };
    assert!(refused, "the backend refuses it too");
}

/// The backend's watch breaks without a 410 (etcd lost its quorum): the cache relists at
/// exactly its last version, so its ended watcher, coming back from its last version, gets
/// what was written meanwhile instead of a 410. A 410 (history compacted or reset) relists
/// at the latest state, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_broken_without_a_410_resumes_from_the_caches_last_version() {
    let probe = Probe::new(MemStore::new());
    let cacher = cacher_over(&probe);
    wait_ready(&cacher).await;
    let a = put(&probe.inner, pod("ns", "a", "n1", 0)).await;
    let mut w = cacher
        .watch(&all(), &from(a.resource_version()))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), async {
        while cacher.cache_resource_version() < a.resource_version() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the cache saw a");
    probe.wait_for_watches(1).await;
    probe.hold_lists(true);
    probe
        .cut_unreachable
        .store(true, std::sync::atomic::Ordering::SeqCst);
    probe.cut_watches();
    match next(&mut w).await {
        Some(WatchEvent::Error(e)) => assert_eq!(e.to_status().code, 429, "{e:?}"),
        other => panic!("{other:?}"),
    }
    let b = put(&probe.inner, pod("ns", "b", "n1", 0)).await;
    probe.hold_lists(false);
    wait_ready(&cacher).await;
    let mut again = cacher
        .watch(&all(), &from(a.resource_version()))
        .await
        .expect("resumed from the version the ended watcher had");
    match next(&mut again).await {
        Some(WatchEvent::Added(o)) => assert_eq!(o.resource_version(), b.resource_version()),
        other => panic!("{other:?}"),
    }
    let lists = probe.reflector_lists.lock().unwrap().clone();
    assert_eq!(
        lists.last(),
        Some(&(
            Some(a.resource_version()),
            Some(ResourceVersionMatch::Exact)
        )),
        "{lists:?}"
    );
}
