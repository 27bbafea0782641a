//! A three-member etcd cluster behind one client with three endpoints: losing a member costs
//! at most a few `Unreachable` answers (and ends the watches on it with an error event), losing
//! the quorum makes every request fail with `Unreachable` instead of hanging, and when the
//! quorum is back the same client serves the same data.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::testing::EtcdCluster;
use listwatch_etcd::{EtcdClient, EtcdStore};
use listwatch_storage::{Error, GetOptions, Key, ListOptions, Result, Storage, WatchEvent};

/// A hang detector, far above the client's timeouts and an etcd election.
const BOUND: Duration = Duration::from_secs(60);

fn pod(name: &str) -> Object {
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#).as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

/// Retries `op` while it fails with `Unreachable` (any other error fails the test).
async fn eventually<T, F, Fut>(mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(Error::Unreachable { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("expected success or Unreachable, got {e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_cluster_survives_a_member_and_fails_fast_without_quorum() {
    let mut cluster = EtcdCluster::start(3).await.unwrap();
    let config = cluster.config().request_timeout(Duration::from_secs(2));
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let collection = Key::collection("pods", Some("ns")).unwrap();
    let from_a = ListOptions {
        resource_version: Some(a.resource_version()),
        ..ListOptions::recursive()
    };
    let mut w = store.watch(&collection, &from_a).await.unwrap();

    // The first endpoint, which every request and the watch use so far, dies.
    cluster.member(0).unwrap().kill();
    match tokio::time::timeout(BOUND, w.next())
        .await
        .expect("the watch hung")
    {
        Some(WatchEvent::Error(Error::Unreachable { .. })) => {}
        other => panic!("expected the watch to end with Unreachable, got {other:?}"),
    }
    let (key_a, key_b, get_opts) = (key("a"), key("b"), GetOptions::default());
    let b = eventually(|| store.create(&key_b, pod("b"), None)).await;
    let got = eventually(|| store.get(&key_a, &get_opts)).await;
    assert_eq!(got, Some(a.clone()));
    // A new watch from the old revision replays what the lost one missed.
    let mut w = eventually(|| store.watch(&collection, &from_a)).await;
    match tokio::time::timeout(BOUND, w.next())
        .await
        .expect("the watch hung")
    {
        Some(WatchEvent::Added(o)) => assert_eq!(o, b),
        other => panic!("expected b, got {other:?}"),
    }

    // A second member dies: no quorum. Requests fail, they do not hang.
    cluster.member(1).unwrap().kill();
    let err = tokio::time::timeout(BOUND, store.get(&key("a"), &GetOptions::default()))
        .await
        .expect("a read hung without quorum")
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    let err = tokio::time::timeout(BOUND, store.readiness())
        .await
        .expect("readiness hung")
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");

    // Quorum is back: the same client works and nothing was lost.
    cluster.member(1).unwrap().restart().await.unwrap();
    let everything = ListOptions::recursive();
    let list = eventually(|| store.list(&collection, &everything)).await;
    assert_eq!(list.items, vec![a, b]);
    eventually(|| store.readiness()).await;
}
