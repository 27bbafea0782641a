//! kube-rs 5 against the built server: typed CRUD, the runtime watcher in list-watch and
//! streaming-list modes, a reflector converging under random writes, and relist after 410.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{PATIENCE, Server};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event, watcher};
use kube::runtime::{WatchStreamExt, reflector as reflect};
use kube::{Client, ResourceExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

async fn client(server: &Server) -> Client {
    let config = kube::Config::new(server.url.parse().unwrap());
    Client::try_from(config).unwrap()
}

async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata":{"name":name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.26"}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_pod_crud_round_trips() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    namespace(&client, "e2e").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "e2e");

    let created = pods
        .create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    let err = pods
        .create(&PostParams::default(), &pod("a"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err:?}"
    );

    let got = pods.get("a").await.unwrap();
    assert_eq!(got.resource_version(), created.resource_version());
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());

    let mut changed = got.clone();
    changed.spec.as_mut().unwrap().containers[0].image = Some("nginx:1.27".into());
    let replaced = pods
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    let stale = pods
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    assert!(
        matches!(stale, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{stale:?}"
    );

    let merged = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"labels":{"tier":"fe"}}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.labels().get("tier").map(String::as_str), Some("fe"));
    // Strategic merge adds the container by name (two containers, where a replaced list
    // would hold one), which a pod update may not do (upstream's `ValidatePodUpdate`).
    let strategic = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec":{"containers":[{"name":"sidecar","image":"busybox"}]}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(strategic, kube::Error::Api(ref s) if s.code == 422
            && s.message.contains("pod updates may not add or remove containers")),
        "{strategic:?}"
    );
    let applied = pods
        .patch(
            "b",
            &PatchParams::apply("e2e-test"),
            &Patch::Apply(json!({"apiVersion":"v1","kind":"Pod",
            "metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"x"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.name_any(), "b");
    let status = pods
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status":{"phase":"Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().phase.as_deref(), Some("Running"));

    let deleted = pods.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(deleted.left().is_some_and(|p| p.name_any() == "a"));
    let missing = pods.get("a").await.unwrap_err();
    assert!(
        matches!(missing, kube::Error::Api(ref s) if s.code == 404),
        "{missing:?}"
    );
    assert!(pods.get_opt("a").await.unwrap().is_none());
}

/// Collects watcher events until `pred` holds for the list so far.
async fn events_until(
    stream: &mut (impl futures::Stream<Item = Result<Event<Pod>, watcher::Error>> + Unpin),
    seen: &mut Vec<Event<Pod>>,
    pred: impl Fn(&[Event<Pod>]) -> bool,
) {
    tokio::time::timeout(PATIENCE, async {
        while !pred(seen) {
            match stream.next().await {
                Some(Ok(ev)) => seen.push(ev),
                Some(Err(e)) => panic!("watcher error: {e}"),
                None => panic!("watcher ended"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("condition not reached; saw {} events", seen.len()));
}

fn applied(seen: &[Event<Pod>], name: &str) -> bool {
    seen.iter()
        .any(|e| matches!(e, Event::Apply(p) if p.name_any() == name))
}

async fn watcher_sees_initial_state_then_changes(config: watcher::Config) {
    let server = Server::start(&[]);
    let client = client(&server).await;
    namespace(&client, "e2e").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "e2e");
    pods.create(&PostParams::default(), &pod("before"))
        .await
        .unwrap();
    // kube-rs starts a streaming list at resourceVersion "0" ("any state", which the watch
    // cache serves at once, as upstream's does, possibly before it applied a write made a
    // millisecond ago): a consistent list first makes sure the cache has "before".
    pods.list(&ListParams::default()).await.unwrap();

    let mut stream = watcher(pods.clone(), config).boxed();
    let mut seen = Vec::new();
    events_until(&mut stream, &mut seen, |s| {
        s.iter().any(|e| matches!(e, Event::InitDone))
    })
    .await;
    assert!(matches!(seen[0], Event::Init));
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::InitApply(p) if p.name_any() == "before"))
    );

    pods.create(&PostParams::default(), &pod("after"))
        .await
        .unwrap();
    events_until(&mut stream, &mut seen, |s| applied(s, "after")).await;
    pods.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    events_until(&mut stream, &mut seen, |s| {
        s.iter()
            .any(|e| matches!(e, Event::Delete(p) if p.name_any() == "before"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_in_list_watch_mode_sees_initial_state_then_changes() {
    watcher_sees_initial_state_then_changes(watcher::Config::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_in_streaming_list_mode_sees_initial_state_then_changes() {
    watcher_sees_initial_state_then_changes(watcher::Config::default().streaming_lists()).await;
}

fn snapshot(store: &Store<Pod>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|p| (p.name_any(), p.resource_version().unwrap_or_default()))
        .collect()
}

async fn server_state(pods: &Api<Pod>) -> BTreeMap<String, String> {
    let list = pods.list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .map(|p| (p.name_any(), p.resource_version().unwrap_or_default()))
        .collect()
}

/// Waits until the reflector's store equals the server's list.
async fn converges(store: &Store<Pod>, pods: &Api<Pod>) {
    let want = server_state(pods).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = snapshot(store);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "store never converged: {} vs {} objects",
            got.len(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_converges_under_a_thousand_random_writes() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    namespace(&client, "e2e").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "e2e");
    let (store, writer) = reflector::store();
    let driver = tokio::spawn(
        reflect(writer, watcher(pods.clone(), watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    store.wait_until_ready().await.unwrap();

    let mut rng = StdRng::seed_from_u64(7);
    for i in 0..1000 {
        let name = format!("p{}", rng.random_range(0..40));
        let result = match rng.random_range(0..3) {
            0 => pods
                .create(&PostParams::default(), &pod(&name))
                .await
                .map(drop),
            1 => pods
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata":{"labels":{"i":i.to_string()}}})),
                )
                .await
                .map(drop),
            _ => pods.delete(&name, &DeleteParams::default()).await.map(drop),
        };
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => panic!("write {i} failed: {e}"),
        }
    }
    converges(&store, &pods).await;
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_relists_after_a_forced_410() {
    // A short history, and watches that end every second so they restart from an old version.
    let server = Server::start(common::SHORT_HISTORY);
    let client = client(&server).await;
    namespace(&client, "e2e").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "e2e");
    pods.create(&PostParams::default(), &pod("first"))
        .await
        .unwrap();
    let inits = Arc::new(AtomicUsize::new(0));
    let (store, writer) = reflector::store();
    let counter = Arc::clone(&inits);
    let driver = tokio::spawn(
        reflect(
            writer,
            watcher(pods.clone(), watcher::Config::default().timeout(1)),
        )
        .inspect_ok(move |e| {
            if matches!(e, Event::Init) {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        })
        .for_each(|_| async {}),
    );
    store.wait_until_ready().await.unwrap();
    assert_eq!(inits.load(Ordering::SeqCst), 1);

    // Writes elsewhere move the history past the pods watcher's version.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "e2e");
    for i in 0..60 {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata":{"name":format!("c{i}")}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    // No pod event moves the watcher's version meanwhile, so its next watch is too old.
    let deadline = Instant::now() + PATIENCE;
    while inits.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "the watcher never relisted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pods.create(&PostParams::default(), &pod("second"))
        .await
        .unwrap();
    converges(&store, &pods).await;
    assert!(snapshot(&store).contains_key("second"));
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_reads_and_the_metadata_watcher_work() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    namespace(&client, "e2e").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "e2e");
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    let list = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].labels().get("app").map(String::as_str),
        Some("web")
    );
    let one = pods.get_metadata("a").await.unwrap();
    assert_eq!(one.name_any(), "a");
    assert!(one.metadata.uid.is_some());

    // `Api<PartialObjectMeta<K>>` makes every request metadata-only.
    let meta: Api<kube::core::PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), "e2e");
    let mut stream = watcher(meta, watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    tokio::time::timeout(PATIENCE, async {
        loop {
            let ev = stream.next().await.expect("stream").expect("event");
            let done = matches!(ev, Event::InitDone);
            seen.push(ev);
            if done {
                break;
            }
        }
    })
    .await
    .unwrap();
    assert!(
        seen.iter()
            .any(|e| matches!(e, Event::InitApply(m) if m.name_any() == "a"))
    );
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"labels":{"v":"2"}}})),
    )
    .await
    .unwrap();
    tokio::time::timeout(PATIENCE, async {
        loop {
            if let Event::Apply(m) = stream.next().await.expect("stream").expect("event")
                && m.labels().get("v").map(String::as_str) == Some("2")
            {
                break;
            }
        }
    })
    .await
    .unwrap();
}

/// Issue 29 item 4: a write asked for as `PartialObjectMetadata` (kube-rs `patch_metadata`)
/// is answered with the partial metadata, as upstream's `transformResponseObject` converts
/// writes too (it was 406 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_metadata_answers_partial_object_metadata() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    namespace(&client, "e2e").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "e2e");
    pods.create(&PostParams::default(), &pod("a"))
        .await
        .unwrap();
    let patched = pods
        .patch_metadata(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"labels":{"patched":"yes"}}})),
        )
        .await
        .unwrap();
    let types = patched.types.clone().unwrap_or_default();
    assert_eq!(
        (types.kind.as_str(), types.api_version.as_str()),
        ("PartialObjectMetadata", "meta.k8s.io/v1")
    );
    assert_eq!(
        patched.labels().get("patched").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        pods.get("a")
            .await
            .unwrap()
            .labels()
            .get("patched")
            .map(String::as_str),
        Some("yes")
    );
}

/// Issue 29 item 1: a single object starts `{"kind":…,"apiVersion":…`, as upstream's typed
/// objects do, so a client's decode error points at the same column (kube-rs reports serde's
/// `line 1 column N`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decode_error_points_at_upstreams_column() {
    #[derive(serde::Deserialize, Debug)]
    struct WrongType {
        #[serde(rename = "apiVersion")]
        _api_version: u32,
    }
    let server = Server::start(&[]);
    let client = client(&server).await;
    namespace(&client, "e2e").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "e2e");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata":{"name":"c"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let req = http::Request::get("/api/v1/namespaces/e2e/configmaps/c")
        .body(Vec::new())
        .unwrap();
    let err = client.request::<WrongType>(req).await.unwrap_err();
    let column = r#"{"kind":"ConfigMap","apiVersion":"v1""#.len();
    assert!(
        err.to_string()
            .ends_with(&format!("at line 1 column {column}")),
        "{err}"
    );
}

/// The eviction half of kube-rs's `can_get_pod_logs_and_evict` (excluded from the kube-rs
/// suite: its first half reads a running container's logs): `Api::<Pod>::evict` answers
/// `Success` and the pod goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_evicts_a_pod() {
    let server = Server::start(&[]);
    let client = client(&server).await;
    namespace(&client, "evict").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "evict");
    pods.create(&PostParams::default(), &pod("busybox-kube3"))
        .await
        .unwrap();
    let status = pods
        .evict("busybox-kube3", &kube::api::EvictParams::default())
        .await
        .unwrap();
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
    let err = pods.get("busybox-kube3").await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err:?}"
    );
}
