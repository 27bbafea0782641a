//! Each event is encoded once however many watchers send it. This file holds a single test
//! because the encode counter is process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields, wire_encode_count};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};

const WATCHERS: usize = 1000;
const EVENTS: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_encode_per_event_with_a_thousand_watchers() {
    let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    let key = Key::object("pods", Some("ns"), "big").unwrap();
    let pod = |i: u64| {
        let v = serde_json::json!({"kind":"Pod","metadata":{"name":"big","namespace":"ns"},"spec":{"i":i}});
        Object::from_value(v, &SelectableFields::none()).unwrap()
    };
    let first = cacher.create(&key, pod(0), None).await.unwrap();
    let all = Key::collection("pods", None).unwrap();
    let opts = ListOptions {
        resource_version: Some(first.resource_version()),
        ..ListOptions::recursive()
    };
    let (mut eager, mut stalled) = (Vec::new(), Vec::new());
    // Half the watchers do not read until every write is done: they fill their buffers, are
    // detached and catch up from the window, which must reuse the same encodings.
    let (go, _) = tokio::sync::watch::channel(false);
    for i in 0..WATCHERS {
        let mut w = cacher.watch(&all, &opts).await.unwrap();
        let mut go = go.subscribe();
        let task = tokio::spawn(async move {
            if i % 2 == 0 {
                go.wait_for(|g| *g).await.unwrap();
            }
            let mut bytes = 0usize;
            for _ in 0..EVENTS {
                match tokio::time::timeout(Duration::from_secs(30), w.next()).await {
                    // What the HTTP layer does with each event: take its wire bytes.
                    Ok(Some(WatchEvent::Modified { object, .. })) => {
                        bytes += object.to_json_bytes().len()
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            bytes
        });
        if i % 2 == 0 {
            stalled.push(task)
        } else {
            eager.push(task)
        }
    }
    let before = wire_encode_count();
    for i in 1..=EVENTS {
        let o = pod(i);
        let mut update = |_: Option<&Object>| Ok(o.clone().into());
        cacher
            .guaranteed_update(&key, None, false, &mut update, None)
            .await
            .unwrap();
    }
    // Once the eager half has everything, the dispatcher is past every event: the stalled
    // half has been detached by then and must catch up from the window.
    for t in eager {
        assert!(t.await.unwrap() > 0);
    }
    assert!(cacher.watcher_count() < WATCHERS, "no watcher was detached");
    eprintln!(
        "DEBUG after eager: {} encodes, {} watchers",
        wire_encode_count() - before,
        cacher.watcher_count()
    );
    go.send_replace(true);
    for t in stalled {
        assert!(t.await.unwrap() > 0);
    }
    let encodes = wire_encode_count() - before;
    assert_eq!(
        encodes, EVENTS,
        "{WATCHERS} watchers × {EVENTS} events took {encodes} encodes"
    );
}
