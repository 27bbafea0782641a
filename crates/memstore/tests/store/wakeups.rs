//! Regression test: a write landing while an idle watcher re-checks the log must still wake it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};

/// Each write is followed by a wait for its event with no further write to rescue a lost
/// wake-up, so a watcher that marked a tick seen without reading its entry hangs here. The
/// race window is small; many rounds make it show (it did, within 20 000, before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_wakes_an_idle_watcher() {
    let store = MemStore::new();
    let collection = Key::collection("pods", Some("ns")).unwrap();
    let from = store.current_resource_version().await.unwrap();
    let opts = ListOptions {
        resource_version: Some(from),
        ..ListOptions::recursive()
    };
    let mut watch = store.watch(&collection, &opts).await.unwrap();
    for i in 0..50_000u32 {
        let name = format!("p{i}");
        let key = Key::object("pods", Some("ns"), &name).unwrap();
        let obj = Object::from_value(
            serde_json::json!({"metadata": {"name": name, "namespace": "ns"}}),
            &SelectableFields::none(),
        )
        .unwrap();
        let rev = store
            .create(&key, obj, None)
            .await
            .unwrap()
            .resource_version();
        match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
            Ok(Some(WatchEvent::Added(o))) => assert_eq!(o.resource_version(), rev),
            other => panic!("write {i} at {rev} was not delivered: {other:?}"),
        }
    }
}
