//! Readiness as upstream (KEP-4568): Pending for the whole of every relist, with 429 and a
//! Retry-After for what the cache cannot serve meanwhile, watchers ended once with that
//! error, and the generation moving when the cache is ready again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{HELD_PAGE_SIZE, Probe, next, pod, put};
use listwatch_api::LabelSelector;
use listwatch_cacher::{Cacher, CacherConfig, ReadyState};
use listwatch_memstore::MemStore;
use listwatch_storage::{Error, GetOptions, Key, ListOptions, Storage, WatchEvent};

fn all() -> Key {
    Key::collection("pods", None).unwrap()
}

/// What a Pending cacher answers: 429 with a Retry-After for watches and for lists it would
/// serve, the backend's answer for gets and for a page of everything.
async fn assert_pending_answers(cacher: &Cacher, objects: usize) {
    let is_429 = |e: Error| {
        let status = e.to_status();
        assert_eq!(status.code, 429, "{status:?}");
        assert!(status.retry_after() >= 1, "{status:?}");
    };
    is_429(
        cacher
            .watch(&all(), &ListOptions::recursive())
            .await
            .err()
            .expect("a watch"),
    );
    is_429(
        cacher
            .list(&all(), &ListOptions::recursive())
            .await
            .unwrap_err(),
    );
    let selective = ListOptions {
        limit: Some(10),
        predicate: listwatch_storage::SelectionPredicate {
            label: LabelSelector::parse("app=x").unwrap(),
            ..Default::default()
        },
        ..ListOptions::recursive()
    };
    is_429(cacher.list(&all(), &selective).await.unwrap_err());
    let page = ListOptions {
        limit: Some(10),
        ..ListOptions::recursive()
    };
    assert_eq!(
        cacher.list(&all(), &page).await.unwrap().items.len(),
        objects
    );
    let a = Key::object("pods", Some("ns"), "a").unwrap();
    let got = cacher
        .get(
            &a,
            &GetOptions {
                resource_version: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(got.map(|o| o.name().to_owned()).as_deref(), Some("a"));
}

async fn wait_for_state(cacher: &Cacher, state: ReadyState) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while cacher.ready_state().0 != state {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("never {state:?}: {:?}", cacher.ready_state()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_is_pending_throughout_ends_watchers_once_and_moves_the_generation() {
    let probe = Probe::new(MemStore::new());
    probe.hold_lists(true);
    let mut config = CacherConfig::new("pods");
    config.list_page_size = u32::try_from(HELD_PAGE_SIZE).unwrap();
    let cacher = Cacher::new(Arc::new(probe.clone()), config);
    put(&probe.inner, pod("ns", "a", "n1", 0)).await;

    // The first list.
    assert_eq!(cacher.ready_state(), (ReadyState::Pending, 0));
    assert_pending_answers(&cacher, 1).await;
    probe.hold_lists(false);
    tokio::time::timeout(Duration::from_secs(30), cacher.wait_ready())
        .await
        .unwrap();
    assert_eq!(cacher.ready_state(), (ReadyState::Ready, 1));
    let start = cacher.current_resource_version().await.unwrap();
    let watching = ListOptions {
        resource_version: Some(start),
        allow_watch_bookmarks: true,
        ..ListOptions::recursive()
    };
    // A change after `start`: the page list answered by the backend during the relist below
    // hands out its version, which the new window starts at (see the next test); `start` is
    // below it.
    let a1 = put(&probe.inner, pod("ns", "a", "n1", 1)).await;
    let mut old = cacher
        .watch(
            &all(),
            &ListOptions {
                resource_version: Some(a1.resource_version()),
                ..watching.clone()
            },
        )
        .await
        .unwrap();

    // A relist (the backend's watch expired): Pending until the new list is in. The
    // reflector opens its watch after the list that made the cache ready: cut it only once
    // it is open (a cut before would miss it, and nothing would relist).
    probe.wait_for_watches(1).await;
    probe.hold_lists(true);
    probe.cut_watches();
    wait_for_state(&cacher, ReadyState::Pending).await;
    assert_eq!(cacher.ready_state(), (ReadyState::Pending, 1));
    match next(&mut old).await {
        Some(WatchEvent::Error(e)) => assert_eq!(e.to_status().code, 429, "{e:?}"),
        other => panic!("{other:?}"),
    }
    assert!(next(&mut old).await.is_none(), "ended once");
    assert_pending_answers(&cacher, 1).await;
    let b = put(&probe.inner, pod("ns", "b", "n1", 0)).await;
    assert_eq!(cacher.ready_state(), (ReadyState::Pending, 1));

    probe.hold_lists(false);
    wait_for_state(&cacher, ReadyState::Ready).await;
    assert_eq!(cacher.ready_state(), (ReadyState::Ready, 2));
    // The reflector relisted the backend's latest state, as upstream's cacher does: its
    // lister-watcher lists at no version (a consistent read), never at the reflector's last
    // version with a limit, which is a legacy Exact read of the old state. The one exception:
    // the page list answered by the backend while Pending handed out `a1`'s version, below
    // the latest state's (`b` was written since): the cache relisted at exactly that version.
    let relists = probe.reflector_lists.lock().unwrap().clone();
    assert!(relists.len() >= 3, "{relists:?}");
    let (exact, latest) = relists.split_last().unwrap();
    assert!(latest.iter().all(|l| *l == (None, None)), "{relists:?}");
    assert_eq!(
        *exact,
        (
            Some(a1.resource_version()),
            Some(listwatch_storage::ResourceVersionMatch::Exact)
        )
    );
    // The new state has what was written meanwhile; a watch from before the relist (and
    // below every version handed out since) cannot be continued (the events in between are
    // not in the new window): 410.
    let listed = cacher
        .list(&all(), &ListOptions::recursive())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
    assert!(listed.resource_version >= b.resource_version());
    let err = cacher
        .watch(&all(), &watching)
        .await
        .err()
        .expect("too old");
    assert!(err.is_expired(), "{err:?}");
    let mut new = cacher
        .watch(
            &all(),
            &ListOptions {
                resource_version: Some(listed.resource_version),
                ..ListOptions::recursive()
            },
        )
        .await
        .unwrap();
    let c = put(&probe.inner, pod("ns", "c", "n1", 0)).await;
    match next(&mut new).await {
        Some(WatchEvent::Added(o)) => assert_eq!(o.resource_version(), c.resource_version()),
        other => panic!("{other:?}"),
    }
}

/// A backend that sends an event the cache already has (at or below its version) cannot be
/// trusted to have sent everything else: the cache relists, and its watchers are told (429),
/// instead of the event being skipped with a log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_the_cache_is_past_makes_it_relist_and_tells_its_watchers() {
    let probe = Probe::new(MemStore::new());
    let cacher = Cacher::new(Arc::new(probe.clone()), CacherConfig::new("pods"));
    tokio::time::timeout(Duration::from_secs(30), cacher.wait_ready())
        .await
        .unwrap();
    assert_eq!(cacher.ready_state(), (ReadyState::Ready, 1));
    let start = cacher.current_resource_version().await.unwrap();
    let mut w = cacher
        .watch(
            &all(),
            &ListOptions {
                resource_version: Some(start),
                ..ListOptions::recursive()
            },
        )
        .await
        .unwrap();
    probe
        .duplicate_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let a = put(&probe.inner, pod("ns", "a", "n1", 0)).await;
    match next(&mut w).await {
        Some(WatchEvent::Added(o)) => assert_eq!(o.resource_version(), a.resource_version()),
        other => panic!("{other:?}"),
    }
    match next(&mut w).await {
        Some(WatchEvent::Error(e)) => assert_eq!(e.to_status().code, 429, "{e:?}"),
        other => panic!("{other:?}"),
    }
    assert!(next(&mut w).await.is_none());
    tokio::time::timeout(Duration::from_secs(30), async {
        while cacher.ready_state() != (ReadyState::Ready, 2) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("relisted");
    let listed = cacher
        .list(&all(), &ListOptions::recursive())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
}

/// With `initial_wait` (the binary sets it for a custom resource created at run time), a
/// watch and a list that find the cache on its first list wait for it instead of answering
/// 429 (before: 429 at once, and an informer's backoff); a relist is not waited for (429 at
/// once, KEP-4568); and the wait is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_initial_wait_the_first_list_is_waited_for_and_a_relist_is_not() {
    let probe = Probe::new(MemStore::new());
    probe.hold_lists(true);
    let mut config = CacherConfig::new("pods").with_initial_wait(Duration::from_secs(3600));
    config.list_page_size = u32::try_from(HELD_PAGE_SIZE).unwrap();
    let cacher = Cacher::new(Arc::new(probe.clone()), config);
    put(&probe.inner, pod("ns", "a", "n1", 0)).await;
    assert_eq!(cacher.ready_state(), (ReadyState::Pending, 0));

    // Both find the first list under way (polled before it is let go) and wait for it.
    let (key, opts) = (all(), ListOptions::recursive());
    let (watch, list, ()) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(cacher.watch(&key, &opts), cacher.list(&key, &opts), async {
            probe.hold_lists(false)
        },)
    })
    .await
    .expect("the first list never ended the wait");
    let mut watch = watch.expect("a watch during the first list waits for it");
    let list = list.expect("a list during the first list waits for it");
    assert_eq!(list.items.len(), 1);
    match next(&mut watch).await {
        Some(WatchEvent::Added(o)) => assert_eq!(o.name(), "a"),
        other => panic!("{other:?}"),
    }

    // A relist: answered at once (a wait would run into this test's deadline).
    probe.wait_for_watches(1).await;
    probe.hold_lists(true);
    probe.cut_watches();
    wait_for_state(&cacher, ReadyState::Pending).await;
    tokio::time::timeout(Duration::from_secs(30), assert_pending_answers(&cacher, 1))
        .await
        .expect("a relist was waited for");
    probe.hold_lists(false);
    drop(watch);

    // Bounded: a first list that does not end in time gets the not-ready answer.
    let held = Probe::new(MemStore::new());
    held.hold_lists(true);
    let mut config = CacherConfig::new("pods").with_initial_wait(Duration::from_millis(50));
    config.list_page_size = u32::try_from(HELD_PAGE_SIZE).unwrap();
    let cacher = Cacher::new(Arc::new(held.clone()), config);
    let e = cacher
        .watch(&all(), &ListOptions::recursive())
        .await
        .err()
        .expect("a watch past the wait");
    assert_eq!(e.to_status().code, 429, "{e:?}");
    held.hold_lists(false);
}
