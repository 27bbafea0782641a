//! Issue 33 item 7: the metadata-only path. An in-process metadata informer's lister-watcher
//! (`MetadataListerWatcher`, the garbage collector's) and N other metadata consumers of the
//! same events (what an HTTP `PartialObjectMetadata` watcher does with an event) share one
//! projection per event; the informer is given no spec or status, and nobody builds the
//! event's whole wire JSON for it. Its own binary: the counters are process-wide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{
    HasMetadata, Object, ObjectMeta, SelectableFields, metadata_projection_count, wire_encode_count,
};
use listwatch_cacher::{Cacher, CacherConfig, MetadataListerWatcher, StorageListerWatcher};
use listwatch_memstore::MemStore;
use listwatch_runtime::{ListRequest, ListerWatcher, WatchEvent as ClientEvent, WatchRequest};
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use serde::Deserialize;

/// A type that keeps whatever it is given: the metadata, and every other top-level member.
#[derive(Debug, Clone, Deserialize)]
struct Anything {
    metadata: ObjectMeta,
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

impl HasMetadata for Anything {
    type Metadata = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

const WATCHERS: usize = 8;
const PODS: u64 = 5;

fn pod(name: &str, image: &str) -> Object {
    let v = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u0"}]},
        "spec": {"containers": [{"name": "c", "image": image}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1"}
    });
    Object::from_value(v, &SelectableFields::none()).unwrap()
}

fn only_metadata(a: &Anything) {
    let mut keys: Vec<_> = a.rest.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["apiVersion", "kind"], "{a:?}");
    assert_eq!(a.rest["kind"], "PartialObjectMetadata");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_consumers_share_one_projection_per_event_and_get_no_spec_or_status() {
    let pods = Arc::new(Cacher::new(
        Arc::new(MemStore::new()),
        CacherConfig::new("pods"),
    ));
    pods.wait_ready().await;
    let cacher: Arc<dyn Storage> = pods;
    let all = Key::collection("pods", None).unwrap();
    let seed = cacher
        .create(
            &Key::object("pods", Some("ns"), "seed").unwrap(),
            pod("seed", "i0"),
            None,
        )
        .await
        .unwrap();

    // The informer's list: metadata only.
    let lw = MetadataListerWatcher::<Anything>::new(StorageListerWatcher::new(
        Arc::clone(&cacher),
        all.clone(),
    ));
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert_eq!(page.items.len(), 1);
    only_metadata(&page.items[0]);
    assert_eq!(page.items[0].metadata.name.as_deref(), Some("seed"));

    let from = seed.resource_version();
    let mut informer = lw
        .watch(&WatchRequest {
            resource_version: Some(from.to_string()),
            ..WatchRequest::default()
        })
        .await
        .unwrap();
    let opts = ListOptions {
        resource_version: Some(from),
        ..ListOptions::recursive()
    };
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        watchers.push(cacher.watch(&all, &opts).await.unwrap());
    }

    // Each pod created, updated, deleted: 3 events a pod.
    let mut expected = Vec::new();
    for i in 0..PODS {
        let name = format!("p{i}");
        let key = Key::object("pods", Some("ns"), &name).unwrap();
        let c = cacher.create(&key, pod(&name, "i1"), None).await.unwrap();
        expected.push(("ADDED", name.clone(), c.resource_version()));
        let next = pod(&name, "i2");
        let mut update = |_: Option<&Object>| Ok(next.clone().into());
        let u = cacher
            .guaranteed_update(&key, None, false, &mut update, None)
            .await
            .unwrap();
        expected.push(("MODIFIED", name.clone(), u.resource_version()));
        cacher
            .delete(&key, None, listwatch_storage::no_validation(), None)
            .await
            .unwrap();
        expected.push(("DELETED", name.clone(), 0));
    }
    let events = expected.len();

    // Every watcher takes every event (holding the objects, not using them yet).
    let mut held = Vec::new();
    for w in &mut watchers {
        let mut objects = Vec::new();
        while objects.len() < events {
            match tokio::time::timeout(Duration::from_secs(30), w.next()).await {
                Ok(Some(WatchEvent::Added(o) | WatchEvent::Deleted(o)))
                | Ok(Some(WatchEvent::Modified { object: o, .. })) => objects.push(o),
                Ok(Some(WatchEvent::Bookmark(_))) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        held.push(objects);
    }

    // Now the consumers: the informer decodes each event, every watcher takes each event's
    // metadata-only bytes (what the HTTP metadata watcher sends).
    let (projections, encodes) = (metadata_projection_count(), wire_encode_count());
    let mut seen = Vec::new();
    while seen.len() < events {
        let ev = tokio::time::timeout(Duration::from_secs(30), informer.next())
            .await
            .expect("the informer's watch stalled")
            .expect("the informer's watch ended")
            .unwrap();
        let (ty, m) = match ev {
            ClientEvent::Added(m) => ("ADDED", m),
            ClientEvent::Modified(m) => ("MODIFIED", m),
            ClientEvent::Deleted(m) => ("DELETED", m),
            ClientEvent::Bookmark { .. } => continue,
        };
        only_metadata(&m);
        let rv: u64 = m
            .metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        seen.push((ty, m.metadata.name.clone().unwrap(), rv));
    }
    let mut informer_bytes = Vec::new();
    for objects in &held {
        for (i, o) in objects.iter().enumerate() {
            let p = o.partial_metadata_json().unwrap();
            match informer_bytes.get(i) {
                None => informer_bytes.push(p),
                Some(first) => assert_eq!(p, *first),
            }
        }
    }
    assert_eq!(
        metadata_projection_count() - projections,
        events as u64,
        "one projection per event for the informer and {WATCHERS} watchers"
    );
    assert_eq!(
        wire_encode_count() - encodes,
        0,
        "no metadata consumer built an event's whole wire JSON"
    );

    // Exactly once, in order (a deletion's version is the deletion's own).
    assert_eq!(seen.len(), expected.len());
    for (s, e) in seen.iter().zip(&expected) {
        assert_eq!((s.0, &s.1), (e.0, &e.1));
        if e.2 != 0 {
            assert_eq!(s.2, e.2);
        }
    }
    assert!(seen.windows(2).all(|w| w[0].2 < w[1].2), "{seen:?}");
}
