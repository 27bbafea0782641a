//! A Cacher over a three-member etcd cluster keeps serving its watchers when the member its
//! reflector watches is cut off from the others: etcd ends the reflector's watch (it has no
//! leader), the etcd client moves on to the next member, and the reflector's re-watch from its
//! last revision brings every write of the majority to the cache's watchers, in order, once.
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
async fn the_cacher_resumes_on_another_member_when_its_member_loses_the_quorum() {
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
    let mut created = Vec::new();
    for name in ["c", "d", "e"] {
        let k = key(name);
        let deadline = Instant::now() + BOUND;
        let obj = loop {
            match majority.create(&k, pod(name), None).await {
                Ok(o) => break o,
                Err(Error::Unreachable { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("the majority refused a write: {e:?}"),
            }
        };
        created.push(obj);
    }
    for want in created {
        match next(&mut w).await {
            Some(WatchEvent::Added(o)) => assert_eq!(o, want),
            other => panic!("expected {want:?}, got {other:?}"),
        }
    }
    eprintln!(
        "the cacher's watcher had every write of the majority {:?} after the cut",
        cut.elapsed()
    );
    cluster.heal();
}
