//! The etcd 3.4.23 progress-ordering bug (etcd issue 15220) against the real etcd: a watch that
//! starts in the past with thousands of events to replay, asked for progress at once, must
//! never report a bookmark ahead of the events it has delivered.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::EtcdStore;
use listwatch_etcd::proto::etcdserverpb::watch_client::WatchClient;
use listwatch_etcd::proto::etcdserverpb::{
    WatchCreateRequest, WatchProgressRequest, WatchRequest, watch_request,
};
use listwatch_etcd::testing::EtcdServer;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use tokio_stream::wrappers::ReceiverStream;

const PENDING: usize = 3001;

fn pod(name: &str) -> Object {
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#).as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

/// Writes `PENDING` objects after a first one; returns the first one's revision.
async fn fill(store: &EtcdStore) -> u64 {
    let first = store
        .create(
            &Key::object("pods", Some("ns"), "p0").unwrap(),
            pod("p0"),
            None,
        )
        .await
        .unwrap();
    for chunk in (1..=PENDING).collect::<Vec<_>>().chunks(64) {
        futures::future::join_all(chunk.iter().map(|i| {
            let name = format!("p{i}");
            let key = Key::object("pods", Some("ns"), &name).unwrap();
            async move { store.create(&key, pod(&name), None).await.unwrap() }
        }))
        .await;
    }
    first.resource_version()
}

/// What raw etcd does in the same situation: whether its answer to the progress request
/// overtook events it still owed. Only reported, since it is etcd's behaviour, not ours.
async fn raw_progress_overtakes_events(
    server: &EtcdServer,
    key: &str,
    from: u64,
    last: u64,
) -> bool {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(WatchRequest {
        request_union: Some(watch_request::RequestUnion::CreateRequest(
            WatchCreateRequest {
                key: Bytes::from(key.to_owned()),
                range_end: Bytes::from(listwatch_etcd_prefix_end(key)),
                start_revision: (from + 1) as i64,
                progress_notify: true,
                prev_kv: true,
                ..Default::default()
            },
        )),
    })
    .await
    .unwrap();
    tx.send(WatchRequest {
        request_union: Some(watch_request::RequestUnion::ProgressRequest(
            WatchProgressRequest {},
        )),
    })
    .await
    .unwrap();
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut stream = WatchClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .watch(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut seen = from;
    while seen < last {
        let resp = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(max) = resp
            .events
            .iter()
            .filter_map(|e| e.kv.as_ref())
            .map(|kv| kv.mod_revision as u64)
            .max()
        {
            seen = max;
        } else if !resp.created {
            let progress = resp.header.map_or(0, |h| h.revision) as u64;
            eprintln!(
                "raw etcd: progress at {progress} (watch id {}) after events up to {seen}",
                resp.watch_id
            );
            if progress > seen {
                return true;
            }
        }
    }
    false
}

fn listwatch_etcd_prefix_end(key: &str) -> Vec<u8> {
    let mut end = key.as_bytes().to_vec();
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn progress_is_never_reported_ahead_of_undelivered_events() {
    let server = EtcdServer::start().await.unwrap();
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    let from = fill(&store).await;
    let last = store.current_resource_version().await.unwrap();
    assert_eq!(last - from, PENDING as u64);

    let collection = Key::collection("pods", Some("ns")).unwrap();
    let opts = ListOptions {
        resource_version: Some(from),
        allow_watch_bookmarks: true,
        progress_notify: true,
        ..ListOptions::recursive()
    };
    let mut watch = store.watch(&collection, &opts).await.unwrap();
    // Ask for progress right away, while the whole backlog is still owed, and again as
    // events come in.
    store.request_watch_progress().await.unwrap();
    let mut delivered = from;
    let mut events = 0;
    let mut bookmarks = Vec::new();
    while delivered < last {
        let ev = tokio::time::timeout(Duration::from_secs(30), watch.next())
            .await
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Added(o) => {
                assert!(o.resource_version() > delivered, "events in order");
                if let Some(&b) = bookmarks.last() {
                    assert!(
                        o.resource_version() > b,
                        "event at {} after a bookmark at {b}",
                        o.resource_version()
                    );
                }
                delivered = o.resource_version();
                events += 1;
                if events % 500 == 0 {
                    store.request_watch_progress().await.unwrap();
                }
            }
            WatchEvent::Bookmark(b) => {
                assert!(
                    b.resource_version <= delivered,
                    "bookmark at {} while events were delivered only up to {delivered}",
                    b.resource_version
                );
                bookmarks.push(b.resource_version);
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(events, PENDING);

    let reproduced =
        raw_progress_overtakes_events(&server, &store.etcd_key(&collection), from, last).await;
    eprintln!("etcd's own progress answer overtook owed events in this run: {reproduced}");
}
