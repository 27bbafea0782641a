//! What clients see when etcd goes away: SIGKILL mid-watch and a restart, and a TCP proxy that
//! cuts or stalls the connection in the middle of a paginated list and of a watch. Requests
//! fail with `Unreachable`; a watch whose connection broke resumes after its last revision
//! when etcd is back within the request timeout and otherwise ends with one error event —
//! nothing hangs — and once etcd is reachable again new requests succeed on the same client,
//! with nothing lost.
//!
//! Every wait is bounded by `BOUND`, a hang detector far above the few seconds the client's
//! keepalive and request timeouts need.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::testing::{EtcdServer, FaultProxy, MIN_KEEPALIVE_INTERVAL, test_config};
use listwatch_etcd::{EtcdClient, EtcdStore};
use listwatch_storage::{Error, GetOptions, Key, ListOptions, Storage, WatchEvent, WatchStream};

const BOUND: Duration = Duration::from_secs(60);

fn pod(name: &str) -> Object {
    Object::from_json(
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"nodeName":"n1"}}}}"#
        )
        .as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

fn collection() -> Key {
    Key::collection("pods", Some("ns")).unwrap()
}

fn store_for(endpoint: String) -> EtcdStore {
    let config = test_config(endpoint).request_timeout(Duration::from_secs(2));
    EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    )
}

async fn next(w: &mut WatchStream) -> Option<WatchEvent> {
    tokio::time::timeout(BOUND, w.next())
        .await
        .expect("the watch neither delivered nor ended")
}

/// Waits for the watch's error event (skipping bookmarks) and checks that the stream ends.
async fn expect_unreachable_then_end(w: &mut WatchStream) {
    loop {
        match next(w).await {
            Some(WatchEvent::Bookmark(_)) => {}
            Some(WatchEvent::Error(e)) => {
                assert!(
                    matches!(e, Error::Unreachable { .. }),
                    "expected Unreachable, got {e:?}"
                );
                break;
            }
            other => panic!("expected an error event, got {other:?}"),
        }
    }
    assert!(next(w).await.is_none(), "nothing may follow an error event");
}

/// Retries `get` until etcd answers again (bounded).
async fn until_reachable(store: &EtcdStore, name: &str) -> Option<Object> {
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match store
            .get(
                &key(name),
                &GetOptions {
                    ignore_not_found: true,
                    ..Default::default()
                },
            )
            .await
        {
            Ok(o) => return o,
            Err(Error::Unreachable { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("etcd did not come back: {e:?}"),
        }
    }
}

/// A watch of the whole collection after `rv`.
async fn watch_from(store: &EtcdStore, rv: u64) -> WatchStream {
    let opts = ListOptions {
        resource_version: Some(rv),
        ..ListOptions::recursive()
    };
    store.watch(&collection(), &opts).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn sigkill_mid_watch_ends_the_watch_and_a_restart_serves_the_same_data() {
    let mut server = EtcdServer::start().await.unwrap();
    let store = store_for(server.endpoint());
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let mut w = watch_from(&store, a.resource_version()).await;
    let b = store.create(&key("b"), pod("b"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(b.clone())));

    server.kill();
    expect_unreachable_then_end(&mut w).await;
    let err = store
        .get(&key("a"), &GetOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert!(matches!(
        store.readiness().await,
        Err(Error::Unreachable { .. })
    ));

    server.restart().await.unwrap();
    assert_eq!(until_reachable(&store, "a").await, Some(a.clone()));
    store.readiness().await.unwrap();
    // Nothing was lost or rewritten, and a new watch resumes from the last delivered revision.
    let list = store
        .list(&collection(), &ListOptions::recursive())
        .await
        .unwrap();
    assert_eq!(list.items, vec![a, b.clone()]);
    let mut w = watch_from(&store, b.resource_version()).await;
    let c = store.create(&key("c"), pod("c"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(c)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_cut_connection_resumes_the_watch_and_the_client_reconnects() {
    let server = EtcdServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let store = store_for(proxy.endpoint());
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let mut w = watch_from(&store, a.resource_version()).await;
    let b = store.create(&key("b"), pod("b"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(b.clone())));

    proxy.cut();
    assert_eq!(until_reachable(&store, "b").await, Some(b));
    // The watch resumed after b on a new connection: c arrives, once, and nothing else.
    let c = store.create(&key("c"), pod("c"), None).await.unwrap();
    let d = store.create(&key("d"), pod("d"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(c)));
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(d)));
}

/// etcd restarted on the same data (down for about a second): the watch does not end, it
/// resumes after the last revision it delivered and sees every later write exactly once
/// (clientv3's behaviour; the cacher would otherwise relist every resource and end every
/// watcher).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_watch_resumes_across_an_etcd_restart() {
    let mut server = EtcdServer::start().await.unwrap();
    // Resuming may take up to the request timeout: above etcd's restart time here.
    let config = test_config(server.endpoint()).request_timeout(Duration::from_secs(30));
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let mut w = watch_from(&store, a.resource_version()).await;
    let b = store.create(&key("b"), pod("b"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(b.clone())));

    server.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart().await.unwrap();
    assert_eq!(until_reachable(&store, "b").await, Some(b));
    let c = store.create(&key("c"), pod("c"), None).await.unwrap();
    let d = store.create(&key("d"), pod("d"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(c)));
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(d)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_stalled_connection_ends_the_watch_by_keepalive_and_recovers() {
    let server = EtcdServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    // The shortest keepalive etcd tolerates, so that the stall is noticed in seconds.
    let config = test_config(proxy.endpoint())
        .request_timeout(Duration::from_secs(2))
        .keepalive(MIN_KEEPALIVE_INTERVAL, Duration::from_secs(3));
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let mut w = watch_from(&store, a.resource_version()).await;
    let b = store.create(&key("b"), pod("b"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(b)));

    // A silent network: no reset, no bytes. Only keepalive pings can notice.
    proxy.stall();
    expect_unreachable_then_end(&mut w).await;
    let err = store
        .get(&key("a"), &GetOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");

    proxy.resume();
    proxy.cut(); // drop the connection the stalled bytes belong to
    assert_eq!(until_reachable(&store, "a").await, Some(a));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_paginated_list_survives_a_stall_and_a_cut_between_pages() {
    let server = EtcdServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let store = store_for(proxy.endpoint());
    let mut created = Vec::new();
    for i in 0..30 {
        created.push(
            store
                .create(&key(&format!("p{i:02}")), pod(&format!("p{i:02}")), None)
                .await
                .unwrap(),
        );
    }
    let page = |token: Option<String>| ListOptions {
        limit: Some(10),
        continue_token: token,
        ..ListOptions::recursive()
    };
    let first = store.list(&collection(), &page(None)).await.unwrap();
    let token = first.continue_token.clone().unwrap();

    proxy.stall();
    let err = store
        .list(&collection(), &page(Some(token.clone())))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    proxy.resume();
    proxy.cut();
    // The same token still continues the same snapshot once etcd is reachable again.
    let deadline = tokio::time::Instant::now() + BOUND;
    let second = loop {
        match store.list(&collection(), &page(Some(token.clone()))).await {
            Ok(l) => break l,
            Err(Error::Unreachable { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    // A write between pages is not seen: the pages read at the first page's revision.
    store.create(&key("p99"), pod("p99"), None).await.unwrap();
    let third = store
        .list(&collection(), &page(second.continue_token.clone()))
        .await
        .unwrap();
    assert_eq!(second.resource_version, first.resource_version);
    assert!(third.continue_token.is_none());
    let all: Vec<Object> = [first.items, second.items, third.items].concat();
    assert_eq!(all, created);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn reads_fail_over_to_the_next_endpoint_and_writes_follow() {
    let server = EtcdServer::start().await.unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = test_config(format!("http://{dead}")).request_timeout(Duration::from_secs(2));
    config.endpoints.push(server.endpoint());
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    // The first endpoint refuses; the read goes on to the second.
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
    assert_eq!(got, None);
    // Writes never retry by themselves, but start at the endpoint that answered last.
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    assert_eq!(
        store.get(&key("a"), &GetOptions::default()).await.unwrap(),
        Some(a)
    );
    store.readiness().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_list_stalled_in_the_middle_of_its_response_fails_and_then_succeeds() {
    let server = EtcdServer::start().await.unwrap();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let store = store_for(proxy.endpoint());
    // About 1 MiB of pods, so that the list answer spans many TCP reads.
    let padding = "x".repeat(1000);
    for chunk in (0..1000).collect::<Vec<_>>().chunks(100) {
        futures::future::join_all(chunk.iter().map(|i| {
            let name = format!("p{i:04}");
            let json = format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":"{padding}"}}"#
            );
            let obj = Object::from_json(json.as_bytes(), &SelectableFields::none()).unwrap();
            let store = &store;
            async move { store.create(&key(&name), obj, None).await.unwrap() }
        }))
        .await;
    }
    proxy.stall_responses_after(64 * 1024);
    let err = tokio::time::timeout(BOUND, store.list(&collection(), &ListOptions::recursive()))
        .await
        .expect("a stalled list hung")
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    proxy.resume();
    proxy.cut();
    let deadline = tokio::time::Instant::now() + BOUND;
    let list = loop {
        match store.list(&collection(), &ListOptions::recursive()).await {
            Ok(l) => break l,
            Err(Error::Unreachable { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{e:?}"),
        }
    };
    assert_eq!(list.items.len(), 1000);
}

/// etcd answers keepalive pings sent more often than its minimum interval (5 s) with GOAWAY
/// after three of them, closing the connection and every watch on it. A watch that stays
/// quiet for longer than that, with the client pinging at the shortest interval etcd allows,
/// must still be open and deliver (with the tests' old 1 s pings it ended after ~3 s with
/// "error reading a body from connection").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_quiet_watch_outlives_etcds_ping_policy() {
    let server = EtcdServer::start().await.unwrap();
    let config = server
        .config()
        .keepalive(MIN_KEEPALIVE_INTERVAL, Duration::from_secs(3));
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let mut w = watch_from(&store, a.resource_version()).await;
    // Three ping intervals and more without a byte on the watch.
    let quiet = 3 * MIN_KEEPALIVE_INTERVAL + Duration::from_secs(2);
    match tokio::time::timeout(quiet, w.next()).await {
        Err(_) => {}
        Ok(other) => panic!("a quiet watch produced {other:?}"),
    }
    let b = store.create(&key("b"), pod("b"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(b)));
}
