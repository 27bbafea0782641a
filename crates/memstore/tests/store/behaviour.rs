//! Behaviour specific to the embedded store (the shared suite covers the Storage contract).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::{MemStore, MemStoreConfig};
use listwatch_storage::{
    Bookmark, GetOptions, Key, ListOptions, ResourceVersionMatch, Storage, WatchEvent,
};

fn pod(name: &str, n: u64) -> Object {
    let v =
        serde_json::json!({"kind":"Pod","metadata":{"name":name,"namespace":"ns"},"spec":{"n":n}});
    Object::from_value(v, &SelectableFields::none()).unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

async fn put(store: &MemStore, name: &str, n: u64) -> u64 {
    let obj = pod(name, n);
    let mut update = |_: Option<&Object>| Ok(obj.clone().into());
    store
        .guaranteed_update(&key(name), None, true, &mut update, None)
        .await
        .unwrap()
        .resource_version()
}

async fn next(stream: &mut listwatch_storage::WatchStream) -> WatchEvent {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("no event in time")
        .expect("stream ended")
}

#[tokio::test]
async fn compaction_keeps_the_state_at_the_compacted_revision() {
    let store = MemStore::new();
    let r1 = put(&store, "a", 1).await;
    let r2 = put(&store, "a", 2).await;
    let r3 = put(&store, "b", 1).await;
    store.compact(r2).unwrap();
    let all = Key::collection("pods", None).unwrap();
    let exact = |rv| ListOptions::recursive().at(Some(rv), Some(ResourceVersionMatch::Exact));
    let at_r2 = store.list(&all, &exact(r2)).await.unwrap();
    assert_eq!(
        at_r2
            .items
            .iter()
            .map(Object::resource_version)
            .collect::<Vec<_>>(),
        [r2]
    );
    assert_eq!(store.list(&all, &exact(r3)).await.unwrap().items.len(), 2);
    assert!(store.list(&all, &exact(r1)).await.unwrap_err().is_expired());
    assert_eq!(store.compacted_revision(), r2);
}

#[tokio::test]
async fn deleted_keys_disappear_from_history_once_compacted_past() {
    let store = MemStore::new();
    put(&store, "a", 1).await;
    let deleted = store
        .delete(&key("a"), None, listwatch_storage::no_validation(), None)
        .await
        .unwrap();
    store.compact(deleted.resource_version()).unwrap();
    let got = store
        .get(
            &key("a"),
            &GetOptions {
                ignore_not_found: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(got.is_none());
    // The key can be created again from scratch.
    let again = store.create(&key("a"), pod("a", 2), None).await.unwrap();
    assert!(again.resource_version() > deleted.resource_version());
}

#[tokio::test]
async fn a_watcher_that_falls_behind_compaction_ends_with_expired() {
    let config = MemStoreConfig {
        watch_channel_capacity: 1,
        ..Default::default()
    };
    let store = MemStore::with_config(config);
    let start = put(&store, "seed", 0).await;
    let all = Key::collection("pods", None).unwrap();
    let mut w = store
        .watch(
            &all,
            &ListOptions {
                resource_version: Some(start),
                ..ListOptions::recursive()
            },
        )
        .await
        .unwrap();
    let mut last = start;
    for i in 0..50 {
        last = put(&store, "a", i).await;
    }
    // The consumer has not read anything; compaction passes its cursor.
    store.compact(last).unwrap();
    let mut got = Vec::new();
    loop {
        match next(&mut w).await {
            WatchEvent::Error(e) => {
                assert!(e.is_expired(), "{e:?}");
                break;
            }
            ev => got.push(ev.resource_version().unwrap()),
        }
    }
    // Whatever arrived before the error is a gap-free prefix of the history.
    let expected: Vec<u64> = (start + 1..start + 1 + got.len() as u64).collect();
    assert_eq!(got, expected);
    assert!(got.len() < 50);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn ttl_expiry_is_a_deleted_event() {
    let store = MemStore::new();
    let all = Key::collection("pods", None).unwrap();
    let created = store
        .create(&key("t"), pod("t", 1), Some(Duration::from_secs(3)))
        .await
        .unwrap();
    let opts = ListOptions {
        resource_version: Some(created.resource_version()),
        ..ListOptions::recursive()
    };
    let mut w = store.watch(&all, &opts).await.unwrap();
    match next(&mut w).await {
        WatchEvent::Deleted(o) => {
            assert_eq!(o.name(), "t");
            assert!(o.resource_version() > created.resource_version());
        }
        other => panic!("expected DELETED, got {other:?}"),
    }
    let got = store
        .get(
            &key("t"),
            &GetOptions {
                ignore_not_found: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(got.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_rewrite_cancels_the_ttl() {
    let store = MemStore::new();
    store
        .create(&key("t"), pod("t", 1), Some(Duration::from_secs(3)))
        .await
        .unwrap();
    put(&store, "t", 2).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(store.get(&key("t"), &GetOptions::default()).await.is_ok());
}

#[tokio::test(start_paused = true)]
async fn idle_progress_watches_get_interval_bookmarks_at_the_current_revision() {
    let config = MemStoreConfig {
        progress_notify_interval: Duration::from_secs(2),
        ..Default::default()
    };
    let store = MemStore::with_config(config);
    let r = put(&store, "a", 1).await;
    let all = Key::collection("pods", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(r),
        allow_watch_bookmarks: true,
        progress_notify: true,
        ..ListOptions::recursive()
    };
    let mut w = store.watch(&all, &opts).await.unwrap();
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Bookmark(Bookmark {
            resource_version: r,
            initial_events_end: false
        })
    );
    let r2 = put(&store, "b", 1).await;
    assert!(matches!(next(&mut w).await, WatchEvent::Added(o) if o.resource_version() == r2));
    store.request_watch_progress().await.unwrap();
    assert_eq!(
        next(&mut w).await,
        WatchEvent::Bookmark(Bookmark {
            resource_version: r2,
            initial_events_end: false
        })
    );
}

#[tokio::test]
async fn automatic_compaction_keeps_the_configured_revisions() {
    let config = MemStoreConfig {
        retain_revisions: 100,
        retain_window: Duration::ZERO,
        compaction_check_every: 10,
        ..Default::default()
    };
    let store = MemStore::with_config(config);
    let mut last = 0;
    for i in 0..500 {
        last = put(&store, "a", i).await;
    }
    let compacted = store.compacted_revision();
    assert!(compacted > 0, "nothing was compacted");
    assert!(
        last - compacted >= 100,
        "kept only {} revisions",
        last - compacted
    );
    assert!(last - compacted < 100 + 10 + 1);
}

/// The store refuses an object over its limit itself (413), on create and on update, and
/// declares the limit for writers to check first.
#[tokio::test]
async fn objects_over_the_limit_are_refused_and_the_limit_is_declared() {
    assert_eq!(
        MemStore::new().max_object_bytes(),
        Some(listwatch_storage::DEFAULT_MAX_OBJECT_BYTES)
    );
    let store = MemStore::with_config(MemStoreConfig {
        max_object_bytes: Some(256),
        ..MemStoreConfig::default()
    });
    let big = Object::from_value(
        serde_json::json!({"metadata":{"name":"a","namespace":"ns"},"x":"y".repeat(300)}),
        &SelectableFields::none(),
    )
    .unwrap();
    let e = store
        .create(&key("a"), big.clone(), None)
        .await
        .unwrap_err();
    assert_eq!(e.to_status().code, 413, "{e}");
    put(&store, "a", 1).await;
    let mut update = |_: Option<&Object>| Ok(big.clone().into());
    let e = store
        .guaranteed_update(&key("a"), None, false, &mut update, None)
        .await
        .unwrap_err();
    assert_eq!(e.to_status().code, 413, "{e}");
    let kept = store.get(&key("a"), &GetOptions::default()).await.unwrap();
    assert_eq!(kept.map(|o| o.size() < 256), Some(true));
}
