//! Concurrency stress: many writers, many watchers, every event exactly once and in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};

const WRITERS: usize = 8;
const WRITES_PER_WRITER: usize = 10_000;
const WATCHERS: usize = 100;
const KEYS_PER_WRITER: usize = 50;

fn pod(ns: &str, name: &str, generation: usize) -> Object {
    let v = serde_json::json!({"kind":"Pod","metadata":{"name":name,"namespace":ns},"spec":{"generation":generation}});
    Object::from_value(v, &SelectableFields::none()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_sees_every_write_exactly_once_in_revision_order() {
    let store = MemStore::new();
    let all = Key::collection("pods", None).unwrap();
    // A seed write gives a non-zero start revision, so the watches replay no initial state.
    let seed_key = Key::object("pods", Some("seed"), "s").unwrap();
    let seed = store
        .create(&seed_key, pod("seed", "s", 0), None)
        .await
        .unwrap();
    let opts = ListOptions {
        resource_version: Some(seed.resource_version()),
        ..ListOptions::recursive()
    };

    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut stream = store.watch(&all, &opts).await.unwrap();
        watchers.push(tokio::spawn(async move {
            let mut revs = Vec::with_capacity(WRITERS * WRITES_PER_WRITER);
            let total = WRITERS * WRITES_PER_WRITER;
            while revs.len() < total {
                match tokio::time::timeout(Duration::from_secs(60), stream.next()).await {
                    Ok(Some(WatchEvent::Added(o) | WatchEvent::Modified { object: o, .. })) => {
                        revs.push(o.resource_version());
                    }
                    other => panic!(
                        "unexpected watch item after {} events: {other:?}",
                        revs.len()
                    ),
                }
            }
            revs
        }));
    }

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        writers.push(tokio::spawn(async move {
            let ns = format!("ns{w}");
            for i in 0..WRITES_PER_WRITER {
                let name = format!("p{}", i % KEYS_PER_WRITER);
                let key = Key::object("pods", Some(&ns), &name).unwrap();
                let obj = pod(&ns, &name, i);
                let mut update = |_: Option<&Object>| Ok(obj.clone().into());
                store
                    .guaranteed_update(&key, None, true, &mut update, None)
                    .await
                    .unwrap();
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let end = store.current_revision();
    let expected: Vec<u64> = (seed.resource_version() + 1..=end).collect();
    assert_eq!(expected.len(), WRITERS * WRITES_PER_WRITER);
    for w in watchers {
        assert_eq!(w.await.unwrap(), expected);
    }
}
