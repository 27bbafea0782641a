//! What the adapter stores in etcd, read back with the raw etcd API: Kubernetes' key layout,
//! JSON values without `resourceVersion`, resource version = `mod_revision`, TTLs as leases,
//! and list metadata (remainingItemCount only without selectors).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use listwatch_api::{LabelSelector, Object, SelectableFields};
use listwatch_etcd::EtcdStore;
use listwatch_etcd::proto::etcdserverpb::kv_client::KvClient;
use listwatch_etcd::proto::etcdserverpb::{PutRequest, RangeRequest};
use listwatch_etcd::proto::mvccpb::KeyValue;
use listwatch_etcd::testing::EtcdServer;
use listwatch_storage::{Error, GetOptions, Key, ListOptions, SelectionPredicate, Storage};

fn obj(json: &str) -> Object {
    Object::from_json(json.as_bytes(), &SelectableFields::none()).unwrap()
}

async fn raw(server: &EtcdServer) -> KvClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(server.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    KvClient::new(channel)
}

async fn raw_get(server: &EtcdServer, key: &str) -> Option<KeyValue> {
    raw(server)
        .await
        .range(RangeRequest {
            key: Bytes::from(key.to_owned()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .kvs
        .pop()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn objects_live_at_kubernetes_keys_as_json_without_resource_version() {
    let server = EtcdServer::start().await.unwrap();
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    let pod = store
        .create(
            &Key::object("pods", Some("ns1"), "web").unwrap(),
            obj(r#"{"kind":"Pod","metadata":{"name":"web","namespace":"ns1"}}"#),
            None,
        )
        .await
        .unwrap();
    let node = store
        .create(
            &Key::object("nodes", None, "n1").unwrap(),
            obj(r#"{"kind":"Node","metadata":{"name":"n1"}}"#),
            None,
        )
        .await
        .unwrap();

    let kv = raw_get(&server, "/registry/pods/ns1/web").await.unwrap();
    assert_eq!(&kv.value, pod.stored_json());
    assert!(!String::from_utf8_lossy(&kv.value).contains("resourceVersion"));
    assert_eq!(kv.mod_revision as u64, pod.resource_version());
    assert_eq!(kv.lease, 0);
    let kv = raw_get(&server, "/registry/nodes/n1").await.unwrap();
    assert_eq!(kv.mod_revision as u64, node.resource_version());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn the_resource_version_is_the_mod_revision_whatever_the_value_says() {
    let server = EtcdServer::start().await.unwrap();
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    // Written by another tool, with a stale resourceVersion inside.
    let put = raw(&server)
        .await
        .put(PutRequest {
            key: Bytes::from_static(b"/registry/pods/ns/x"),
            value: Bytes::from_static(
                br#"{"metadata":{"name":"x","namespace":"ns","resourceVersion":"999999"}}"#,
            ),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let got = store
        .get(
            &Key::object("pods", Some("ns"), "x").unwrap(),
            &GetOptions::default(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.resource_version(), put.header.unwrap().revision as u64);

    raw(&server)
        .await
        .put(PutRequest {
            key: Bytes::from_static(b"/registry/pods/ns/broken"),
            value: Bytes::from_static(b"not json"),
            ..Default::default()
        })
        .await
        .unwrap();
    let err = store
        .get(
            &Key::object("pods", Some("ns"), "broken").unwrap(),
            &GetOptions::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidObject { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_ttl_becomes_a_lease_on_the_key() {
    let server = EtcdServer::start().await.unwrap();
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    let key = Key::object("events", Some("ns"), "e1").unwrap();
    store
        .create(
            &key,
            obj(r#"{"metadata":{"name":"e1","namespace":"ns"}}"#),
            Some(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let lease = raw_get(&server, "/registry/events/ns/e1")
        .await
        .unwrap()
        .lease;
    assert_ne!(lease, 0);
    // Objects whose TTLs end close together share a lease (upstream's lease manager).
    let other = Key::object("events", Some("ns"), "e2").unwrap();
    let e2 = obj(r#"{"metadata":{"name":"e2","namespace":"ns"}}"#);
    store
        .create(&other, e2, Some(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(
        raw_get(&server, "/registry/events/ns/e2")
            .await
            .unwrap()
            .lease,
        lease
    );
    // A failed create (the key is taken) does not touch the stored key.
    let err = store
        .create(
            &key,
            obj(r#"{"metadata":{"name":"e1","namespace":"ns"}}"#),
            Some(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn remaining_item_count_is_given_only_without_selectors() {
    let server = EtcdServer::start().await.unwrap();
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    for i in 0..5 {
        let json = format!(
            r#"{{"metadata":{{"name":"p{i}","namespace":"ns","labels":{{"even":"{}"}}}}}}"#,
            i % 2 == 0
        );
        store
            .create(
                &Key::object("pods", Some("ns"), &format!("p{i}")).unwrap(),
                obj(&json),
                None,
            )
            .await
            .unwrap();
    }
    let all = Key::collection("pods", Some("ns")).unwrap();
    let page = store
        .list(
            &all,
            &ListOptions {
                limit: Some(2),
                ..ListOptions::recursive()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.remaining_item_count, Some(3));
    let selective = ListOptions {
        limit: Some(2),
        predicate: SelectionPredicate {
            label: LabelSelector::parse("even=true").unwrap(),
            ..Default::default()
        },
        ..ListOptions::recursive()
    };
    let page = store.list(&all, &selective).await.unwrap();
    assert_eq!(
        page.items
            .iter()
            .map(|o| o.name().to_owned())
            .collect::<Vec<_>>(),
        ["p0", "p2"]
    );
    assert_eq!(page.remaining_item_count, None);
    assert!(page.continue_token.is_some());
}
