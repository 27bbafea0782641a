//! Unit tests of the partitions' locking and wake-ups and of paginated reads.

use std::sync::Arc;
use std::time::Duration;

use listwatch_api::{Object, SelectableFields};
use listwatch_storage::{Key, ListOptions, Storage};

use super::MemStore;
use crate::part::VISITS;

fn obj(name: &str) -> Object {
    let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns"}});
    Object::from_value(v, &SelectableFields::none()).unwrap_or_else(|e| panic!("{e}"))
}

async fn create(store: &MemStore, resource: &str, ns: &str, name: &str) -> u64 {
    let key = Key::object(resource, Some(ns), name).unwrap_or_else(|e| panic!("{e}"));
    match store.create(&key, obj(name), None).await {
        Ok(o) => o.resource_version(),
        Err(e) => panic!("{e}"),
    }
}

/// Regression: each page used to count the whole remaining range (O(n²/limit) a walk).
#[tokio::test]
async fn a_paginated_walk_reads_each_key_a_bounded_number_of_times() {
    let store = MemStore::new();
    const N: usize = 2000;
    for i in 0..N {
        create(&store, "pods", "ns", &format!("p{i:05}")).await;
    }
    let all = Key::collection("pods", None).unwrap_or_else(|e| panic!("{e}"));
    VISITS.with(|v| v.set(0));
    let mut opts = ListOptions {
        limit: Some(10),
        ..ListOptions::recursive()
    };
    let mut seen = 0;
    loop {
        let page = store
            .list(&all, &opts)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        seen += page.items.len();
        let left = page.remaining_item_count.unwrap_or(0) as usize;
        assert_eq!(left, N - seen, "remaining count after {seen}");
        match page.continue_token {
            Some(t) => opts.continue_token = Some(t),
            None => break,
        }
    }
    assert_eq!(seen, N);
    let visits = VISITS.with(std::cell::Cell::get);
    // One count of the range on the first page, then each page's own keys.
    assert!(
        visits <= 3 * N as u64,
        "{visits} key reads for a walk of {N}"
    );
}

/// Regression: every write used to wake every watcher of every resource.
#[tokio::test]
async fn a_write_wakes_only_watchers_of_its_resource_and_namespace() {
    let store = MemStore::new();
    create(&store, "pods", "a", "x").await;
    create(&store, "leases", "a", "x").await;
    let pods = store
        .core()
        .partition("pods")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut all_pods = pods.subscribe("/pods/", true);
    let mut ns_a = pods.subscribe("/pods/a/", true);
    let mut one_in_a = pods.subscribe("/pods/a/x", false);
    let mut ns_b = pods.subscribe("/pods/b/", true);
    for rx in [&mut all_pods, &mut ns_a, &mut one_in_a, &mut ns_b] {
        rx.borrow_and_update();
    }
    create(&store, "leases", "a", "y").await;
    for rx in [&all_pods, &ns_a, &one_in_a, &ns_b] {
        assert!(
            !rx.has_changed().unwrap_or(true),
            "a lease write woke a pod watcher"
        );
    }
    create(&store, "pods", "b", "y").await;
    assert!(all_pods.has_changed().unwrap_or(false));
    assert!(ns_b.has_changed().unwrap_or(false));
    assert!(
        !ns_a.has_changed().unwrap_or(true),
        "a write in b woke a watcher of a"
    );
    assert!(!one_in_a.has_changed().unwrap_or(true));
    create(&store, "pods", "a", "z").await;
    assert!(ns_a.has_changed().unwrap_or(false));
    assert!(one_in_a.has_changed().unwrap_or(false));
}

/// Regression: one global lock made every write wait for any list of any resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_one_resource_do_not_wait_for_readers_of_another() {
    let store = MemStore::new();
    create(&store, "pods", "ns", "p").await;
    let pods = store
        .core()
        .partition("pods")
        .unwrap_or_else(|e| panic!("{e}"));
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn({
        let pods = Arc::clone(&pods);
        move || {
            let _reading = pods.state.read();
            let _ = held_tx.send(());
            let _ = release_rx.recv_timeout(Duration::from_secs(30));
        }
    });
    held_rx
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
    // A pod list is in progress (its read lock is held); a lease write goes through.
    let wrote =
        tokio::time::timeout(Duration::from_secs(10), create(&store, "leases", "ns", "l")).await;
    let _ = release_tx.send(());
    let _ = holder.join();
    assert!(wrote.is_ok(), "a lease write waited for a pod reader");
}

fn padded(name: &str, bytes: usize) -> Object {
    let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns"}, "pad": "x".repeat(bytes)});
    Object::from_value(v, &SelectableFields::none()).unwrap_or_else(|e| panic!("{e}"))
}

/// The live-bytes quota: a write past it is etcd's NOSPACE and raises the alarm; while it is
/// raised writes that add bytes are refused, reads, deletes and shrinking writes are not;
/// deletes clear it. A durable store counts what it recovers.
#[tokio::test]
async fn the_quota_refuses_growth_raises_and_clears_the_alarm_and_survives_a_restart() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // A data directory others may read is refused at open.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .unwrap_or_else(|e| panic!("{e}"));
    let config = crate::MemStoreConfig {
        quota_bytes: Some(10_000),
        ..crate::MemStoreConfig::default()
    };
    let store = MemStore::open(dir.path(), config.clone()).unwrap_or_else(|e| panic!("{e}"));
    let key = |n: &str| Key::object("pods", Some("ns"), n).unwrap_or_else(|e| panic!("{e}"));
    let mut kept = Vec::new();
    let refused = loop {
        let name = format!("p{}", kept.len());
        match store.create(&key(&name), padded(&name, 2_000), None).await {
            Ok(o) => kept.push((name, o)),
            Err(e) => break e,
        }
        assert!(kept.len() < 10, "never refused");
    };
    assert_eq!(kept.len(), 4, "four objects of ~2 KB fit in 10 000 bytes");
    assert!(
        matches!(&refused, listwatch_storage::Error::TooManyRequests { message, retry_after_seconds: 10 }
            if message.contains("mvcc: database space exceeded")),
        "{refused:?}"
    );
    let live = store.live_bytes();
    assert!(live <= 10_000 && live > 8_000, "{live}");
    // The alarm: readiness says NOSPACE, a small create is refused too.
    let not_ready = store.readiness().await.map(|()| String::new());
    assert!(
        matches!(&not_ready, Err(listwatch_storage::Error::NotReady { message, .. }) if message.contains("NOSPACE")),
        "{not_ready:?}"
    );
    assert!(
        store
            .create(&key("small"), obj("small"), None)
            .await
            .is_err()
    );
    // Reads and deletes are served; a delete that brings live bytes under 90 % clears it.
    let (first, _) = &kept[0];
    assert!(store.get(&key(first), &Default::default()).await.is_ok());
    store
        .delete(&key(first), None, listwatch_storage::no_validation(), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(store.readiness().await.is_ok());
    store
        .create(&key("small"), obj("small"), None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // A restart counts the recovered objects.
    let before = store.live_bytes();
    drop(store);
    let store = MemStore::open(dir.path(), config).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(store.live_bytes(), before);
}
