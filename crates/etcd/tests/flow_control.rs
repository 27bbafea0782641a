//! HTTP/2 flow control between watches and requests that share one connection to etcd.
//!
//! Every watch and request of a client to one endpoint is a stream on one HTTP/2 connection.
//! Data etcd sent that a stream has not read counts against that stream's window *and* the
//! connection's; h2 gives connection credit back only when the data is read. So watches whose
//! consumers stopped reading could use up the connection window and freeze every other watch
//! and request on the connection (reproduced before the fix: with three stalled watches of
//! large objects a live watch stopped at 118 of 250 events and `get`s timed out). Now a watch
//! whose consumer does not take an event within the stall timeout gives its etcd stream up
//! (freeing what it held) and resumes from its last delivered revision once the consumer
//! drains, and the connection window is the protocol maximum — so the fourth watch keeps up,
//! requests keep answering, and the stalled watches, drained at last, lose nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::testing::{EtcdCluster, EtcdServer};
use listwatch_etcd::{EtcdClient, EtcdConfig, EtcdStore};
use listwatch_storage::{GetOptions, Key, ListOptions, Storage, WatchEvent, WatchStream};

/// A hang detector.
const BOUND: Duration = Duration::from_secs(60);
const OBJECTS: usize = 250;
/// 64 KiB each: 16 MiB in all, 2 MiB (a stream window) unread per stalled watch in moments.
const SIZE: usize = 64 * 1024;

fn big_pod(name: &str) -> Object {
    let padding = "x".repeat(SIZE);
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":"{padding}"}}"#)
            .as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

async fn watch_after(store: &EtcdStore, rv: u64) -> WatchStream {
    let opts = ListOptions {
        resource_version: Some(rv),
        ..ListOptions::recursive()
    };
    store
        .watch(&Key::collection("pods", Some("ns")).unwrap(), &opts)
        .await
        .unwrap()
}

/// Reads `n` ADDED events, in revision order, each once; returns their names.
async fn take(w: &mut WatchStream, n: usize) -> Vec<String> {
    let mut names = Vec::with_capacity(n);
    let mut last = 0;
    while names.len() < n {
        match tokio::time::timeout(BOUND, w.next()).await {
            Ok(Some(WatchEvent::Added(o))) => {
                assert!(o.resource_version() > last, "out of order or repeated");
                last = o.resource_version();
                names.push(o.name().to_owned());
            }
            Ok(other) => panic!("after {} events: {other:?}", names.len()),
            Err(_) => panic!("the watch stopped at {} of {n} events", names.len()),
        }
    }
    names
}

/// Runs the scenario on a client with `config`'s flow-control settings; `writer` (a
/// separate client, so that the writes never wait on the watched connection) writes.
async fn three_stalled_and_one_live(writer: EtcdStore, config: EtcdConfig) {
    let began = std::time::Instant::now();
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let start = store.current_resource_version().await.unwrap();
    // Three watches nobody reads (yet), one that keeps up.
    let mut stalled = Vec::new();
    for _ in 0..3 {
        stalled.push(watch_after(&store, start).await);
    }
    let mut live = watch_after(&store, start).await;

    let names: Vec<String> = (0..OBJECTS).map(|i| format!("p{i:03}")).collect();
    let writes = {
        let names = names.clone();
        tokio::spawn(async move {
            for name in names {
                writer
                    .create(&key(&name), big_pod(&name), None)
                    .await
                    .unwrap();
            }
        })
    };
    // Requests on the watched client keep answering meanwhile.
    let answered = Arc::new(AtomicUsize::new(0));
    let probe = {
        let (store, answered) = (store.clone(), Arc::clone(&answered));
        tokio::spawn(async move {
            loop {
                let got = store
                    .get(
                        &key("p000"),
                        &GetOptions {
                            ignore_not_found: true,
                            ..GetOptions::default()
                        },
                    )
                    .await;
                if let Err(e) = got {
                    panic!("a get on the watched client failed: {e:?}");
                }
                answered.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    assert_eq!(take(&mut live, OBJECTS).await, names);
    let live_done = began.elapsed();
    writes.await.unwrap();
    probe.abort();
    let probe_result = probe.await;
    assert!(
        probe_result.as_ref().is_err_and(|e| e.is_cancelled()),
        "the request probe failed: {probe_result:?}"
    );
    assert!(
        answered.load(Ordering::Relaxed) > 0,
        "no request was answered"
    );

    // Past the stall timeout the stalled watches have given their streams up; drained at
    // last, they resume and have every event, in order, once.
    tokio::time::sleep(EtcdConfig::default().watch_stall_timeout * 2).await;
    for w in &mut stalled {
        assert_eq!(take(w, OBJECTS).await, names);
    }
    eprintln!(
        "the live watch had all {OBJECTS} events of {SIZE} bytes after {live_done:?}; {} gets \
         answered meanwhile; the stalled watches, drained, had all of them too",
        answered.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn stalled_watches_never_freeze_a_live_watch_or_requests_on_the_same_connection() {
    let server = EtcdServer::start().await.unwrap();
    let writer = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    three_stalled_and_one_live(writer, server.config()).await;
}

/// The same on a three-member cluster, the watched client with every member as an endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn stalled_watches_never_freeze_a_live_watch_or_requests_on_a_three_member_cluster() {
    let cluster = EtcdCluster::start(3).await.unwrap();
    let writer = EtcdStore::new(
        EtcdClient::new(cluster.config()).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    three_stalled_and_one_live(writer, cluster.config()).await;
}

fn small_pod(name: &str) -> Object {
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#).as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

/// A consumer that keeps pausing for longer than the stall timeout, while writes go on: its
/// watch gives its etcd stream up at each pause and resumes after the last revision it
/// delivered, and the consumer sees every write once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_consumer_pausing_past_the_stall_timeout_misses_nothing_and_sees_nothing_twice() {
    let server = EtcdServer::start().await.unwrap();
    let stall = Duration::from_millis(200);
    let store = EtcdStore::new(
        EtcdClient::new(server.config().watch_stall_timeout(stall)).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let start = store.current_resource_version().await.unwrap();
    let mut w = watch_after(&store, start).await;
    let writer = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    let names: Vec<String> = (0..600).map(|i| format!("p{i:03}")).collect();
    let writes = {
        let names = names.clone();
        tokio::spawn(async move {
            for name in names {
                writer
                    .create(&key(&name), small_pod(&name), None)
                    .await
                    .unwrap();
            }
        })
    };
    let mut seen = Vec::new();
    while seen.len() < names.len() {
        let n = 150.min(names.len() - seen.len());
        seen.extend(take(&mut w, n).await);
        // Longer than the stall timeout: the watch gives its stream up meanwhile.
        tokio::time::sleep(3 * stall).await;
    }
    writes.await.unwrap();
    assert_eq!(seen, names);
}

/// A watch whose consumer stalled gave its etcd stream up; history it had not received yet
/// is compacted before the consumer drains. The consumer gets what had been received, then
/// `Expired` — told, never a silent gap (a stream kept open would have delivered everything,
/// so this also shows the stream was given up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_compaction_while_a_consumer_is_stalled_ends_its_watch_with_expired() {
    let server = EtcdServer::start().await.unwrap();
    let stall = Duration::from_millis(200);
    let store = EtcdStore::new(
        EtcdClient::new(server.config().watch_stall_timeout(stall)).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let start = store.current_resource_version().await.unwrap();
    let mut w = watch_after(&store, start).await;
    let writer = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    let mut last = 0;
    for i in 0..300 {
        let name = format!("p{i:03}");
        last = writer
            .create(&key(&name), small_pod(&name), None)
            .await
            .unwrap()
            .resource_version();
    }
    tokio::time::sleep(5 * stall).await;
    listwatch_etcd::compact_now(writer.client(), last)
        .await
        .unwrap();
    let mut events = 0;
    let mut prev = start;
    loop {
        match tokio::time::timeout(BOUND, w.next()).await.unwrap() {
            Some(WatchEvent::Added(o)) => {
                assert!(o.resource_version() > prev, "out of order or repeated");
                prev = o.resource_version();
                events += 1;
            }
            Some(WatchEvent::Error(e)) => {
                assert!(e.is_expired(), "{e:?}");
                break;
            }
            other => panic!("after {events} events: {other:?}"),
        }
    }
    assert!(
        events < 300,
        "all {events} events arrived: the stream was not given up"
    );
    assert!(
        tokio::time::timeout(BOUND, w.next())
            .await
            .unwrap()
            .is_none()
    );
}
