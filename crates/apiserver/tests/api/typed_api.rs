//! listwatch-client's typed access (`Api<K>`, feature `k8s-openapi`) against the built server:
//! CRUD of k8s-openapi types with paths derived from the type (checked against the server
//! with raw HTTP), and a reflector and an informer of `Pod` (core, namespaced), `Deployment`
//! (apps/v1) and `ClusterRole` (cluster-scoped) following creates, updates and deletes, and a
//! metadata-only reflector and informer of `PartialObjectMetadata<Pod>`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use listwatch_client::{
    Api, ApiResource, Config, Error, EventHandler, HttpClient, HttpConfig, Informer,
    InformerConfig, ListRequest, PartialObjectMetadata, Patch, PatchParams, Resource, ResourceType,
    Store, Writer, reflector, watcher,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// A raw GET from async code: the status and body of `path`.
async fn raw_get(server: &Server, path: &str) -> common::Response {
    let (addr, path) = (server.addr.clone(), path.to_owned());
    tokio::task::spawn_blocking(move || http(&addr, "GET", &path, &[], b""))
        .await
        .unwrap()
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

fn container() -> Container {
    Container {
        name: "c".into(),
        image: Some("registry.example/app:1".into()),
        ..Container::default()
    }
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: meta(name),
        spec: Some(PodSpec {
            containers: vec![container()],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let app = labels(&[("app", name)]);
    Deployment {
        metadata: meta(name),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: app.clone(),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: app,
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container()],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

fn cluster_role(name: &str) -> ClusterRole {
    ClusterRole {
        metadata: meta(name),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["pods".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..PolicyRule::default()
        }]),
        ..ClusterRole::default()
    }
}

async fn start() -> (Server, HttpClient) {
    let server = Server::start(&[]);
    let client = HttpClient::new(HttpConfig::new(server.url.clone()).unwrap()).unwrap();
    let ns = Namespace {
        metadata: meta("t"),
        ..Namespace::default()
    };
    Api::<Namespace>::cluster(client.clone())
        .create(&ns)
        .await
        .unwrap();
    (server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_api_crud_with_paths_from_the_type() {
    let (server, client) = start().await;

    // Cluster-scoped, core group: the namespace made by `start` is where the type says.
    let nss = Api::<Namespace>::cluster(client.clone());
    assert_eq!(
        nss.get("t").await.unwrap().metadata.name.as_deref(),
        Some("t")
    );
    assert_eq!(raw_get(&server, "/api/v1/namespaces/t").await.status, 200);

    // Namespaced, core group: create, get, list, replace (with its precondition), the four
    // patch types, delete.
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "t");
    assert_eq!(
        cms.collection_path().unwrap(),
        "/api/v1/namespaces/t/configmaps"
    );
    let created = cms
        .create(&ConfigMap {
            metadata: meta("a"),
            data: labels(&[("k", "v")]),
            ..ConfigMap::default()
        })
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some() && num(&created.resource_version()) > 0);
    let raw = raw_get(&server, "/api/v1/namespaces/t/configmaps/a").await;
    assert_eq!(raw.status, 200);
    assert_eq!(raw.json()["data"], json!({"k": "v"}));
    let got = cms.get("a").await.unwrap();
    assert_eq!(got.data, labels(&[("k", "v")]));
    assert_eq!(got.key().as_str(), "t/a");
    assert!(cms.get_opt("missing").await.unwrap().is_none());
    assert_eq!(cms.get("missing").await.unwrap_err().code(), Some(404));

    let mut edited = got.clone();
    edited.data = labels(&[("k", "edited")]);
    let replaced = cms.replace("a", &edited).await.unwrap();
    assert_eq!(replaced.data, labels(&[("k", "edited")]));
    // The stale copy's resourceVersion is the precondition: 409.
    let stale = cms.replace("a", &edited).await.unwrap_err();
    assert_eq!(stale.code(), Some(409), "{stale}");

    let merged = cms
        .patch(
            "a",
            &Patch::Merge(json!({"data": {"m": "1"}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(merged.data, labels(&[("k", "edited"), ("m", "1")]));
    let jsoned = cms
        .patch(
            "a",
            &Patch::Json(json!([{"op": "remove", "path": "/data/m"}])),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(jsoned.data, labels(&[("k", "edited")]));
    let strategic = cms
        .patch(
            "a",
            &Patch::Strategic(json!({"metadata": {"labels": {"s": "1"}}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(strategic.metadata.labels, labels(&[("s", "1")]));
    // Server-side apply of a typed intent (k8s-openapi writes apiVersion and kind), which
    // also creates.
    let intent = ConfigMap {
        metadata: meta("b"),
        data: labels(&[("applied", "yes")]),
        ..ConfigMap::default()
    };
    let applied = cms
        .patch(
            "b",
            &Patch::Apply(&intent),
            &PatchParams::apply("typed-test"),
        )
        .await
        .unwrap();
    assert_eq!(applied.data, labels(&[("applied", "yes")]));
    let missing_manager = cms
        .patch("b", &Patch::Apply(&intent), &PatchParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(missing_manager, Error::Request(_)),
        "{missing_manager}"
    );
    // A dry run changes nothing.
    let dry = cms
        .patch(
            "b",
            &Patch::Merge(json!({"data": {"dry": "1"}})),
            &PatchParams::default().dry_run(),
        )
        .await
        .unwrap();
    assert!(dry.data.unwrap().contains_key("dry"));
    assert!(
        !cms.get("b")
            .await
            .unwrap()
            .data
            .unwrap()
            .contains_key("dry")
    );

    let page = cms.list(&ListRequest::default()).await.unwrap();
    let names: BTreeSet<&str> = page.items.iter().map(|c| c.name()).collect();
    assert_eq!(names, BTreeSet::from(["a", "b"]));
    assert!(num(&page.resource_version) > 0);
    // All namespaces: a list, never an object call.
    let all = Api::<ConfigMap>::all(client.clone());
    assert_eq!(all.collection_path().unwrap(), "/api/v1/configmaps");
    let keys: BTreeSet<String> = all
        .list(&ListRequest::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.key().to_string())
        .collect();
    assert!(keys.contains("t/a") && keys.contains("t/b"), "{keys:?}");
    assert!(matches!(all.get("a").await, Err(Error::Request(_))));
    assert!(matches!(all.create(&intent).await, Err(Error::Request(_))));

    assert!(cms.delete("a").await.unwrap());
    assert!(!cms.delete("a").await.unwrap());
    assert!(cms.get_opt("a").await.unwrap().is_none());
    assert_eq!(
        raw_get(&server, "/api/v1/namespaces/t/configmaps/a")
            .await
            .status,
        404
    );

    // A named group: apps/v1 Deployments.
    let deploys = Api::<Deployment>::namespaced(client.clone(), "t");
    deploys.create(&deployment("web", 2)).await.unwrap();
    let raw = raw_get(&server, "/apis/apps/v1/namespaces/t/deployments/web").await;
    assert_eq!(
        (raw.status, raw.json()["spec"]["replicas"].clone()),
        (200, json!(2))
    );
    let scaled = deploys
        .patch(
            "web",
            &Patch::Json(json!([{"op": "replace", "path": "/spec/replicas", "value": 3}])),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(3));
    assert!(deploys.delete("web").await.unwrap());

    // Cluster-scoped, named group.
    let roles = Api::<ClusterRole>::cluster(client.clone());
    roles.create(&cluster_role("t-reader")).await.unwrap();
    let raw = raw_get(
        &server,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/t-reader",
    )
    .await;
    assert_eq!(raw.status, 200);
    let role = roles.get("t-reader").await.unwrap();
    assert_eq!(role.rules.unwrap()[0].verbs, ["get", "list"]);
    assert!(roles.delete("t-reader").await.unwrap());

    // Bad names and namespaces never reach the server.
    assert!(matches!(cms.get("../t").await, Err(Error::Request(_))));
    let escaped = Api::<Pod>::namespaced(client.clone(), "t/../../x");
    assert!(matches!(
        escaped.list(&ListRequest::default()).await,
        Err(Error::Request(_))
    ));
    // A dynamic handle: a kind described by a value.
    let dynamic =
        Api::<ConfigMap>::namespaced_with(client.clone(), "t", &ApiResource::of::<ConfigMap>());
    assert_eq!(dynamic.get("b").await.unwrap().name(), "b");
    // A URL-only configuration names no namespace: kubectl's "default".
    assert_eq!(
        Api::<ConfigMap>::default_namespaced(client).namespace(),
        Some("default")
    );
}

/// What an informer handler saw, for objects whose name starts with `t-`.
struct Recorder(tokio::sync::mpsc::UnboundedSender<String>);

impl<K: Resource> EventHandler<K> for Recorder {
    fn on_add(&mut self, o: &Arc<K>, initial: bool) {
        if o.name().starts_with("t-") {
            let how = if initial { "listed" } else { "added" };
            let _ = self.0.send(format!("{how} {}", o.name()));
        }
    }
    fn on_update(&mut self, _old: &Arc<K>, new: &Arc<K>) {
        if new.name().starts_with("t-") {
            let _ = self.0.send(format!("updated {}", new.name()));
        }
    }
    fn on_delete(&mut self, o: &Arc<K>, _unknown: bool) {
        if o.name().starts_with("t-") {
            let _ = self.0.send(format!("deleted {}", o.name()));
        }
    }
}

/// A version of this server's, as the number it is: the client carries versions as opaque
/// strings, listwatch's own are etcd-style revisions.
fn num(rv: &str) -> u64 {
    listwatch_api::rv::parse(rv).unwrap()
}

/// The `t-` objects of a store: name → resource version.
fn t_objects<K: Resource>(store: &Store<K>) -> BTreeMap<String, u64> {
    store
        .list()
        .iter()
        .filter(|o| o.name().starts_with("t-"))
        .map(|o| (o.name().to_owned(), num(&o.resource_version())))
        .collect()
}

async fn converges<K: Resource>(what: &str, store: &Store<K>, want: &BTreeMap<String, u64>) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = t_objects(store);
        if &got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got:?}, want {want:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A reflector and an informer over `read` (typed, no URL written) follow a create, an update
/// and a delete made through `write`; the stored objects are `R`s with their typed fields
/// (`R` is `W`, or its metadata-only form), checked by `check` in both stores.
async fn reflector_and_informer_follow<R, W>(
    read: Api<R>,
    write: Api<W>,
    make: impl Fn(&str) -> W,
    check: impl Fn(&R),
) where
    R: ResourceType + DeserializeOwned + Debug,
    W: ResourceType + Serialize + DeserializeOwned + Debug,
{
    let pre = write.create(&make("t-pre")).await.unwrap();

    let writer = Writer::default();
    let store: Store<R> = writer.store();
    let driver = tokio::spawn(
        reflector(
            writer,
            watcher(read.clone(), Config::default().page_size(2)),
        )
        .for_each(|_| async {}),
    );
    let informer = Informer::spawn(read, InformerConfig::default());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let _handler = informer.add_handler(Recorder(tx));
    tokio::time::timeout(PATIENCE, store.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(PATIENCE, informer.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    let mut want = BTreeMap::from([("t-pre".to_owned(), num(&pre.resource_version()))]);
    converges("the initial list", &store, &want).await;

    let new = write.create(&make("t-new")).await.unwrap();
    let updated = write
        .patch(
            "t-new",
            &Patch::Merge(json!({"metadata": {"labels": {"round": "1"}}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert!(num(&updated.resource_version()) > num(&new.resource_version()));
    assert!(write.delete("t-pre").await.unwrap());
    want = BTreeMap::from([("t-new".to_owned(), num(&updated.resource_version()))]);
    converges("create, update, delete", &store, &want).await;
    converges("the informer's store", &informer.store(), &want).await;
    let stored = store.get(&updated.key()).unwrap();
    check(&stored);
    check(&informer.store().get(&updated.key()).unwrap());

    // A pod's DELETE writes its deletionTimestamp before it removes it (upstream's graceful
    // deletion strategy, with grace 0 for an unscheduled pod): one more update first.
    let graceful = W::plural() == "pods";
    let events: &[&str] = if graceful {
        &[
            "listed t-pre",
            "added t-new",
            "updated t-new",
            "updated t-pre",
            "deleted t-pre",
        ]
    } else {
        &[
            "listed t-pre",
            "added t-new",
            "updated t-new",
            "deleted t-pre",
        ]
    };
    let mut got = Vec::new();
    while got.len() < events.len() {
        got.push(
            tokio::time::timeout(PATIENCE, rx.recv())
                .await
                .expect("handler events")
                .unwrap(),
        );
    }
    // The first list asks for RV "0", which the watch cache may serve from just before t-pre
    // (any version is allowed, as upstream): then it comes as a watch add.
    if got[0] == "added t-pre" {
        got[0] = "listed t-pre".into();
    }
    assert_eq!(got, events);
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_and_informer_of_pods() {
    let (_server, client) = start().await;
    reflector_and_informer_follow(
        Api::<Pod>::namespaced(client.clone(), "t"),
        Api::<Pod>::namespaced(client, "t"),
        pod,
        |p: &Pod| {
            assert_eq!(p.metadata.labels, labels(&[("round", "1")]));
            assert_eq!(p.spec.as_ref().unwrap().containers[0].name, "c");
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_and_informer_of_deployments_in_all_namespaces() {
    let (_server, client) = start().await;
    reflector_and_informer_follow(
        Api::<Deployment>::all(client.clone()),
        Api::<Deployment>::namespaced(client, "t"),
        |name| deployment(name, 2),
        |d: &Deployment| {
            assert_eq!(d.metadata.namespace.as_deref(), Some("t"));
            assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_and_informer_of_cluster_roles() {
    let (_server, client) = start().await;
    reflector_and_informer_follow(
        Api::<ClusterRole>::cluster(client.clone()),
        Api::<ClusterRole>::cluster(client),
        cluster_role,
        |r: &ClusterRole| {
            assert_eq!(Resource::namespace(r), None);
            assert_eq!(
                r.rules.as_ref().unwrap()[0].resources,
                Some(vec!["pods".into()])
            );
        },
    )
    .await;
}

/// A metadata-only informer and reflector (`PartialObjectMetadata<Pod>`): the server sends
/// `PartialObjectMetadata` (no spec or status) on the list, the watch and a get; labels and
/// versions follow the writes made through a full `Api<Pod>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_and_informer_of_pod_metadata() {
    let (server, client) = start().await;
    let check = |p: &PartialObjectMetadata<Pod>| {
        // What the server sent: the metadata form, nothing of the pod's body.
        assert_eq!(
            (p.api_version.as_str(), p.kind.as_str()),
            ("meta.k8s.io/v1", "PartialObjectMetadata"),
            "{p:?}"
        );
        assert_eq!(p.metadata.labels, labels(&[("round", "1")]));
        assert_eq!(p.metadata.namespace.as_deref(), Some("t"));
        let wire = serde_json::to_value(p).unwrap();
        assert!(wire.get("spec").is_none() && wire.get("status").is_none());
    };
    reflector_and_informer_follow(
        Api::<PartialObjectMetadata<Pod>>::namespaced(client.clone(), "t"),
        Api::<Pod>::namespaced(client.clone(), "t"),
        pod,
        check,
    )
    .await;
    // The same through a full handle's `metadata()`, on a get and a list, and what the server
    // answers that Accept with on the wire (no spec).
    let pods = Api::<Pod>::namespaced(client, "t");
    let meta = pods.metadata();
    let got = meta.get("t-new").await.unwrap();
    check(&got);
    let page = meta.list(&ListRequest::default()).await.unwrap();
    assert!(page.items.iter().any(|p| p.name() == "t-new"));
    page.items
        .iter()
        .for_each(|p| assert_eq!(p.kind, "PartialObjectMetadata"));
    assert!(
        pods.get("t-new").await.unwrap().spec.is_some(),
        "the pod has a spec"
    );
    let (addr, path) = (
        server.addr.clone(),
        "/api/v1/namespaces/t/pods/t-new".to_owned(),
    );
    let raw = tokio::task::spawn_blocking(move || {
        http(
            &addr,
            "GET",
            &path,
            &[(
                "Accept",
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            )],
            b"",
        )
    })
    .await
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&raw.body).unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadata");
    assert!(v.get("spec").is_none(), "{v}");
}
