//! Issue 33 item 7: the metadata-only path through the binary with kube-rs. Three
//! metadata watchers (kube-rs `watcher` over `Api<PartialObjectMeta<ConfigMap>>`, what its
//! deprecated `metadata_watcher` became: `as=PartialObjectMetadata` requests) see
//! every write of a collection exactly once and in order, and the frames a metadata watch
//! receives hold metadata only (no `data`); the server builds each event's projection once
//! for all of them (proved in-process: `cacher` `metadata_only`, `endpoints`
//! `watch_server::tests::metadata_watchers_share_the_events_one_projection`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{PATIENCE, Server};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const NS: &str = "meta";
const WATCHERS: usize = 3;
const OBJECTS: usize = 5;

/// What one watcher saw after its initial list: (kind of event, name, resourceVersion).
type Seen = Vec<(&'static str, String, String)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_watchers_see_every_event_once_in_order_and_no_data() {
    let server = Server::start(&[]);
    let client = Client::try_from(kube::Config::new(server.url.parse().unwrap())).unwrap();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);

    let mut streams = Vec::new();
    for _ in 0..WATCHERS {
        let meta: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), NS);
        let mut s = watcher(meta, watcher::Config::default()).boxed();
        // Past the (empty) initial list.
        tokio::time::timeout(PATIENCE, async {
            while !matches!(s.next().await.unwrap().unwrap(), Event::InitDone) {}
        })
        .await
        .unwrap();
        streams.push(s);
    }
    let start = cms.list_metadata(&Default::default()).await.unwrap();
    let from = start.metadata.resource_version.unwrap();

    // Each object: created, patched, deleted; the versions each write answered with.
    let mut expected: Seen = Vec::new();
    for i in 0..OBJECTS {
        let name = format!("cm-{i}");
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "data": {"payload": "x".repeat(4096)},
        }))
        .unwrap();
        let c = cms.create(&PostParams::default(), &cm).await.unwrap();
        expected.push(("apply", name.clone(), c.resource_version().unwrap()));
        let p = cms
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
            )
            .await
            .unwrap();
        expected.push(("apply", name.clone(), p.resource_version().unwrap()));
        cms.delete(&name, &DeleteParams::default()).await.unwrap();
        // A deletion's version is the deletion's own (not answered): checked by order only.
        expected.push(("delete", name.clone(), String::new()));
    }

    for (w, s) in streams.iter_mut().enumerate() {
        let mut seen: Seen = Vec::new();
        tokio::time::timeout(PATIENCE, async {
            while seen.len() < expected.len() {
                match s.next().await.unwrap().unwrap() {
                    Event::Apply(m) => {
                        seen.push(("apply", m.name_any(), m.resource_version().unwrap()))
                    }
                    Event::Delete(m) => {
                        seen.push(("delete", m.name_any(), m.resource_version().unwrap()))
                    }
                    other => panic!("watcher {w}: unexpected {other:?}"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("watcher {w} saw only {seen:?}"));
        for (s, e) in seen.iter().zip(&expected) {
            assert_eq!((s.0, &s.1), (e.0, &e.1), "watcher {w}: {seen:?}");
            if !e.2.is_empty() {
                assert_eq!(s.2, e.2, "watcher {w}");
            }
        }
        let versions: Vec<u64> = seen.iter().map(|s| s.2.parse().unwrap()).collect();
        assert!(
            versions.windows(2).all(|v| v[0] < v[1]),
            "watcher {w}: {seen:?}"
        );
    }

    // The same events as raw frames of a metadata watch: metadata only.
    let uri = format!(
        "/api/v1/namespaces/{NS}/configmaps?watch=1&resourceVersion={from}&timeoutSeconds=2"
    );
    let req = http::Request::get(uri)
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .body(Vec::new())
        .unwrap();
    let body = client.request_text(req).await.unwrap();
    let frames: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames.len(), expected.len(), "{body}");
    for f in &frames {
        let o = &f["object"];
        assert_eq!(o["kind"], "PartialObjectMetadata", "{f}");
        let mut keys: Vec<_> = o.as_object().unwrap().keys().cloned().collect();
        keys.sort_unstable();
        assert_eq!(keys, ["apiVersion", "kind", "metadata"], "{f}");
        assert!(o["metadata"]["resourceVersion"].is_string(), "{f}");
    }
}
