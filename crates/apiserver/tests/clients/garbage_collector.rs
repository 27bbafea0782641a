//! Cascading deletion with real clients (issue 17 items 3 and 6): objects created by a kube-rs
//! client with ownerReferences to a Deployment's uid (there is no deployment controller, so
//! the test plays its part), then `kubectl delete deployment` with each `--cascade` mode,
//! against the built server and its garbage collector.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, run_ok};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

async fn client(server: &Server) -> Client {
    Client::try_from(kube::Config::new(server.url.parse().unwrap())).unwrap()
}

struct Fixture {
    deploy: Api<Deployment>,
    cms: Api<ConfigMap>,
    pods: Api<Pod>,
    owner: Value,
}

/// Namespace `ns`, Deployment `web`, and what a deployment controller would have made:
/// `cms` ConfigMaps and `pods` unscheduled Pods, each with a controller reference to the
/// Deployment (blocking its deletion, as controllers set them).
async fn fixture(server: &Server, ns: &str, cms: usize, pods: usize) -> Fixture {
    let c = client(server).await;
    let n: Namespace = serde_json::from_value(json!({"metadata":{"name":ns}})).unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &n)
        .await
        .unwrap();
    let deploy: Api<Deployment> = Api::namespaced(c.clone(), ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1.26"}]}}
        }
    }))
    .unwrap();
    let d = deploy.create(&PostParams::default(), &d).await.unwrap();
    let owner = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
        "uid": d.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true,
    });
    let f = Fixture {
        deploy,
        cms: Api::namespaced(c.clone(), ns),
        pods: Api::namespaced(c, ns),
        owner,
    };
    for i in 0..cms {
        let cm = serde_json::from_value(
            json!({"metadata":{"name":format!("cm-{i}"),"ownerReferences":[f.owner]}}),
        )
        .unwrap();
        f.cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    for i in 0..pods {
        let p = serde_json::from_value(json!({
            "metadata": {"name": format!("web-{i}"), "labels": {"app": "web"}, "ownerReferences": [f.owner]},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.26"}]}
        }))
        .unwrap();
        f.pods.create(&PostParams::default(), &p).await.unwrap();
    }
    f
}

impl Fixture {
    async fn counts(&self) -> (usize, usize) {
        let lp = ListParams::default();
        (
            self.cms.list(&lp).await.unwrap().items.len(),
            self.pods.list(&lp).await.unwrap().items.len(),
        )
    }
}

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn kubectl_delete(server: &Server, dir: &std::path::Path, ns: &str, extra: &[&str]) -> String {
    let mut k = server.kubectl(dir);
    k.args(["delete", "deployment", "web", "-n", ns, "--timeout=60s"])
        .args(extra);
    run_ok(&mut k)
}

/// `kubectl delete deployment` (kubectl's default `--cascade=background`): the Deployment goes
/// at once, and the garbage collector then deletes the ConfigMaps and Pods it owned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl"]
async fn kubectl_delete_deployment_collects_what_it_owned() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(&server, "bg", 5, 3).await;
    // A ConfigMap the Deployment does not own stays.
    let free = serde_json::from_value(json!({"metadata":{"name":"free"}})).unwrap();
    f.cms.create(&PostParams::default(), &free).await.unwrap();
    assert_eq!(f.counts().await, (6, 3));

    let out = tokio::task::block_in_place(|| kubectl_delete(&server, dir.path(), "bg", &[]));
    assert!(out.contains("deployment.apps \"web\" deleted"), "{out}");
    assert!(f.deploy.get_opt("web").await.unwrap().is_none());
    eventually("the dependents collected", || async {
        f.counts().await == (1, 0)
    })
    .await;
    assert!(f.cms.get_opt("free").await.unwrap().is_some());
}

/// `--cascade=orphan`: kubectl waits while the Deployment is held by the `orphan` finalizer;
/// the collector removes the references from every dependent, then the finalizer, and the
/// Deployment goes; the dependents stay, without references.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl"]
async fn kubectl_delete_cascade_orphan_leaves_the_dependents_unowned() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(&server, "orph", 4, 2).await;
    let out = tokio::task::block_in_place(|| {
        kubectl_delete(&server, dir.path(), "orph", &["--cascade=orphan"])
    });
    assert!(out.contains("deployment.apps \"web\" deleted"), "{out}");
    // kubectl waited for the deletion, which the collector completes after orphaning.
    assert!(f.deploy.get_opt("web").await.unwrap().is_none());
    assert_eq!(f.counts().await, (4, 2));
    let lp = ListParams::default();
    for cm in f.cms.list(&lp).await.unwrap() {
        assert!(cm.owner_references().is_empty(), "{:?}", cm.metadata);
    }
    for p in f.pods.list(&lp).await.unwrap() {
        assert!(p.owner_references().is_empty(), "{:?}", p.metadata);
    }
}

/// `--cascade=foreground`: the Deployment stays (`foregroundDeletion`) until its blocking
/// dependents are gone, and kubectl waits for it. One dependent is held by a finalizer of a
/// kube-rs "controller", which checks that the Deployment is still there, waiting, before
/// it lets go; every dependent's DELETED event comes before the Deployment's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl"]
async fn kubectl_delete_cascade_foreground_removes_the_dependents_first() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(&server, "fg", 3, 2).await;
    let held = serde_json::from_value(json!({"metadata":{"name":"held",
        "finalizers":["example.com/hold"],"ownerReferences":[f.owner]}}))
    .unwrap();
    f.cms.create(&PostParams::default(), &held).await.unwrap();
    let c = client(&server).await;
    let all_cms: Api<ConfigMap> = Api::namespaced(c.clone(), "fg");
    let mut cm_events = watcher(all_cms, watcher::Config::default()).boxed();
    let mut deploy_events = watcher(f.deploy.clone(), watcher::Config::default()).boxed();
    while !matches!(
        tokio::time::timeout(PATIENCE, cm_events.next())
            .await
            .unwrap(),
        Some(Ok(Event::InitDone))
    ) {}
    while !matches!(
        tokio::time::timeout(PATIENCE, deploy_events.next())
            .await
            .unwrap(),
        Some(Ok(Event::InitDone))
    ) {}

    let mut kubectl = server.kubectl(dir.path());
    kubectl
        .args([
            "delete",
            "deployment",
            "web",
            "-n",
            "fg",
            "--cascade=foreground",
            "--timeout=60s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = kubectl.spawn().unwrap();

    // The other dependents go; the held one is marked; the Deployment waits for it.
    eventually("the unheld dependents collected", || async {
        f.counts().await == (1, 0)
    })
    .await;
    eventually("the held dependent marked", || async {
        f.cms
            .get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    let waiting = f.deploy.get("web").await.unwrap();
    assert_eq!(waiting.finalizers(), ["foregroundDeletion"]);
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert!(child.try_wait().unwrap().is_none(), "kubectl did not wait");

    // The controller's part: let the dependent go.
    f.cms
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"finalizers":null}})),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "kubectl delete did not finish");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let out = child.wait_with_output().unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("deployment.apps \"web\" deleted"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(f.deploy.get_opt("web").await.unwrap().is_none());

    // Order, by resourceVersion (one revision counter across resources): the last
    // dependent's DELETED precedes the Deployment's.
    let mut last_dependent = 0u64;
    let mut gone = 0;
    while gone < 4 {
        if let Event::Delete(cm) = tokio::time::timeout(PATIENCE, cm_events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            gone += 1;
            last_dependent =
                last_dependent.max(cm.resource_version().unwrap().parse::<u64>().unwrap());
        }
    }
    let owner_rv = loop {
        if let Event::Delete(d) = tokio::time::timeout(PATIENCE, deploy_events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            break d.resource_version().unwrap().parse::<u64>().unwrap();
        }
    };
    assert!(
        last_dependent < owner_rv,
        "a dependent went after its owner: {last_dependent} >= {owner_rv}"
    );
}

/// `kubectl delete --dry-run=server`, with every cascade: nothing is deleted, no finalizer
/// is set, the collector has nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl"]
async fn kubectl_dry_run_deletes_delete_nothing() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(&server, "dry", 2, 1).await;
    for cascade in ["background", "orphan", "foreground"] {
        let out = tokio::task::block_in_place(|| {
            kubectl_delete(
                &server,
                dir.path(),
                "dry",
                &["--dry-run=server", &format!("--cascade={cascade}")],
            )
        });
        assert!(out.contains("(server dry run)"), "{out}");
    }
    // Something the collector must do after the dry runs: once it is done, it has seen them.
    let other = serde_json::from_value(json!({"metadata":{"name":"other"}})).unwrap();
    let other = f.cms.create(&PostParams::default(), &other).await.unwrap();
    let dep = serde_json::from_value(
        json!({"metadata":{"name":"dep-of-other","ownerReferences":[{
        "apiVersion":"v1","kind":"ConfigMap","name":"other","uid":other.metadata.uid}]}}),
    )
    .unwrap();
    f.cms.create(&PostParams::default(), &dep).await.unwrap();
    f.cms.delete("other", &Default::default()).await.unwrap();
    eventually("the sentinel dependent collected", || async {
        f.cms.get_opt("dep-of-other").await.unwrap().is_none()
    })
    .await;
    let d = f.deploy.get("web").await.unwrap();
    assert!(d.metadata.deletion_timestamp.is_none());
    assert!(d.finalizers().is_empty());
    assert_eq!(f.counts().await, (2, 1));
}

/// `--enable-garbage-collector=false`: dependents stay after their owner's deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_collector_dependents_stay() {
    let server = Server::start(&["--enable-garbage-collector=false"]);
    let f = fixture(&server, "off", 2, 0).await;
    f.deploy.delete("web", &Default::default()).await.unwrap();
    // The namespace controller (also a singleton) still runs: once it has emptied another
    // namespace, the collector, had it been running, would have had time too.
    let c = client(&server).await;
    let nss: Api<Namespace> = Api::all(c);
    let n = serde_json::from_value(json!({"metadata":{"name":"other"}})).unwrap();
    nss.create(&PostParams::default(), &n).await.unwrap();
    nss.delete("other", &Default::default()).await.unwrap();
    eventually("the other namespace gone", || async {
        nss.get_opt("other").await.unwrap().is_none()
    })
    .await;
    assert_eq!(f.counts().await, (2, 0));
}
