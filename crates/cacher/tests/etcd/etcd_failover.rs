//! A Cacher over a three-member etcd cluster whose member its reflector watches is cut off
//! from the others: etcd ends the reflector's watch (it has no leader), and the cacher, as
//! upstream's (`startCaching` → `terminateAllWatchers`), ends every watcher of the resource
//! at once with 429 — so that clients come back, through a load balancer to a server whose
//! etcd member still has quorum, instead of waiting on a silent stream — and relists on
//! another member; it then serves every write of the majority, and a watch from the relist's
//! version gets the later ones in order, once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_etcd::testing::EtcdCluster;
use listwatch_etcd::{EtcdClient, EtcdStore};
use listwatch_storage::{Error, Key, ListOptions, Storage, WatchEvent, WatchStream};

/// A hang detector, far above etcd's election timeouts and the reflector's backoff.
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

async fn next(w: &mut WatchStream) -> Option<WatchEvent> {
    tokio::time::timeout(BOUND, w.next())
        .await
        .expect("the cacher's watcher got nothing")
}

fn store_on(cluster: &EtcdCluster, endpoints: &[String]) -> EtcdStore {
    let mut config = cluster.config().request_timeout(Duration::from_secs(2));
    config.endpoints = endpoints.to_vec();
    EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn the_cacher_ends_its_watchers_and_relists_on_another_member_when_its_member_loses_the_quorum()
 {
    let cluster = EtcdCluster::start(3).await.unwrap();
    let endpoints = cluster.endpoints();
    // The cacher's client tries the member that will be cut off first.
    let backend = store_on(&cluster, &endpoints);
    let majority = store_on(&cluster, &endpoints[1..]);
    let cacher = Cacher::new(Arc::new(backend), CacherConfig::new("pods"));
    tokio::time::timeout(BOUND, cacher.wait_ready())
        .await
        .expect("cacher ready");
    let all = Key::collection("pods", Some("ns")).unwrap();
    let a = majority.create(&key("a"), pod("a"), None).await.unwrap();
    let from_a = ListOptions {
        resource_version: Some(a.resource_version()),
        ..ListOptions::recursive()
    };
    let mut w = tokio::time::timeout(BOUND, cacher.watch(&all, &from_a))
        .await
        .expect("watch hung")
        .unwrap();
    let b = majority.create(&key("b"), pod("b"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(b)));

    cluster.isolate(0).await.unwrap();
    let cut = Instant::now();
    // The watcher ends: 429 (the cache is relisting), then the end of the stream. Before the
    // cacher ended its watchers on a failed storage watch, the reflector re-watched on
    // another member and this watcher went on as if nothing had happened — and on the last
    // member standing it stayed open and silent for as long as the quorum was lost.
    match next(&mut w).await {
        Some(WatchEvent::Error(Error::NotReady { .. })) => {}
        other => panic!("expected the watcher to end with 429, got {other:?}"),
    }
    assert_eq!(next(&mut w).await, None);
    eprintln!(
        "the cacher ended its watcher {:?} after the cut",
        cut.elapsed()
    );

    let mut created = Vec::new();
    for name in ["c", "d", "e"] {
        created.push(create_on_majority(&majority, name).await);
    }
    // Ready again (relisted on another member): a consistent list has the majority's writes.
    let deadline = Instant::now() + BOUND;
    let list = loop {
        match cacher.list(&all, &ListOptions::recursive()).await {
            Ok(list) if list.items.len() == 5 => break list,
            Ok(_) | Err(Error::NotReady { .. } | Error::Unreachable { .. })
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("the cacher did not come back with 5 pods: {other:?}"),
        }
    };
    for want in &created {
        assert!(list.items.contains(want), "{want:?} missing from {list:?}");
    }
    let from = ListOptions {
        resource_version: Some(list.resource_version),
        ..ListOptions::recursive()
    };
    let mut w = tokio::time::timeout(BOUND, cacher.watch(&all, &from))
        .await
        .expect("watch hung")
        .unwrap();
    let f = create_on_majority(&majority, "f").await;
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(f)));
    eprintln!(
        "the cacher served the majority's writes {:?} after the cut",
        cut.elapsed()
    );
    cluster.heal();
}

async fn create_on_majority(majority: &EtcdStore, name: &str) -> Object {
    let k = key(name);
    let deadline = Instant::now() + BOUND;
    loop {
        match majority.create(&k, pod(name), None).await {
            Ok(o) => return o,
            Err(Error::Unreachable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the majority refused a write: {e:?}"),
        }
    }
}
