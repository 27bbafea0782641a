//! Deletion lifecycle with real clients (issue 17 items 3 and 4): `kubectl delete` of an
//! object with a finalizer waits until a kube-rs controller (kube::runtime's finalizer
//! helper) removes it; `kubectl delete
//! namespace` with 200 objects; a kube-rs watch sees MODIFIED (deletionTimestamp) then
//! DELETED; raw HTTP for preconditions and dry runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http, run_ok};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};
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

/// The cleanup step of the kube-rs controller below fails until the test opens the gate.
#[derive(Debug, thiserror::Error)]
#[error("the test has not let the finalizer go yet")]
struct NotYet;

/// The finalizer is kube-rs's own: a `kube::runtime::Controller` whose reconciler uses
/// `kube::runtime::finalizer`, which adds it (a JSON patch with a `test` operation) and, once
/// the object is being deleted and its cleanup succeeds, removes it (another JSON patch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl"]
async fn kubectl_delete_waits_for_the_finalizer_a_kube_rs_controller_removes() {
    use kube::runtime::controller::{Action, Controller};
    use kube::runtime::finalizer::{Event as Finalizer, finalizer};

    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let c = client(&server).await;
    namespace(&c, "fin").await;
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "fin");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata":{"name":"held"},"data":{"k":"v"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let (open, gate) = tokio::sync::watch::channel(false);
    let ctx = std::sync::Arc::new((cms.clone(), gate));
    let controller = tokio::spawn(
        Controller::new(cms.clone(), watcher::Config::default())
            .run(
                |cm, ctx: std::sync::Arc<(Api<ConfigMap>, tokio::sync::watch::Receiver<bool>)>| async move {
                    let let_go = *ctx.1.borrow();
                    finalizer(&ctx.0, "example.com/hold", cm, |e| async move {
                        match e {
                            Finalizer::Apply(_) => Ok(Action::await_change()),
                            Finalizer::Cleanup(_) if let_go => Ok(Action::await_change()),
                            Finalizer::Cleanup(_) => Err(NotYet),
                        }
                    })
                    .await
                },
                |_, _, _| Action::requeue(Duration::from_millis(100)),
                ctx,
            )
            .for_each(|_| async {}),
    );
    // The controller adds its finalizer.
    let deadline = Instant::now() + PATIENCE;
    while cms.get("held").await.unwrap().finalizers() != ["example.com/hold"] {
        assert!(
            Instant::now() < deadline,
            "the controller never added its finalizer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut events = watcher(cms.clone(), watcher::Config::default()).boxed();
    loop {
        let e = tokio::time::timeout(PATIENCE, events.next()).await.unwrap();
        if matches!(e, Some(Ok(Event::InitDone))) {
            break;
        }
    }

    let mut kubectl = server.kubectl(dir.path());
    kubectl
        .args(["delete", "configmap", "held", "-n", "fin", "--timeout=60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = kubectl.spawn().unwrap();

    // Marked, kept (the controller's cleanup keeps failing), and kubectl still waiting.
    let marked = loop {
        let e = tokio::time::timeout(PATIENCE, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Event::Apply(o) = e
            && o.metadata.deletion_timestamp.is_some()
        {
            break o;
        }
    };
    assert_eq!(marked.finalizers(), ["example.com/hold"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(child.try_wait().unwrap().is_none(), "kubectl did not wait");
    assert!(
        cms.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );

    // Let the cleanup succeed: kube-rs removes its finalizer, the update removes the object.
    open.send_replace(true);
    let deleted = loop {
        let e = tokio::time::timeout(PATIENCE, events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Event::Delete(o) = e {
            break o;
        }
    };
    assert_eq!(deleted.name_any(), "held");

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
        String::from_utf8_lossy(&out.stdout).contains("configmap \"held\" deleted"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(cms.get_opt("held").await.unwrap().is_none());
    controller.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl"]
async fn kubectl_delete_namespace_with_200_objects_leaves_nothing() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let c = client(&server).await;
    namespace(&c, "many").await;
    let pp = PostParams::default();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "many");
    let secrets: Api<Secret> = Api::namespaced(c.clone(), "many");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "many");
    for i in 0..80 {
        let o = serde_json::from_value(json!({"metadata":{"name":format!("cm-{i}")}})).unwrap();
        cms.create(&pp, &o).await.unwrap();
    }
    for i in 0..70 {
        let o = serde_json::from_value(json!({"metadata":{"name":format!("s-{i}")}})).unwrap();
        secrets.create(&pp, &o).await.unwrap();
    }
    for i in 0..50 {
        let o = serde_json::from_value(json!({"metadata":{"name":format!("p-{i}")},
            "spec":{"containers":[{"name":"c","image":"nginx:1.26"}]}}))
        .unwrap();
        pods.create(&pp, &o).await.unwrap();
    }
    let k = || server.kubectl(dir.path());
    let started = Instant::now();
    let out = run_ok(k().args(["delete", "namespace", "many", "--timeout=60s"]));
    let took = started.elapsed();
    assert!(out.contains("namespace \"many\" deleted"), "{out}");
    let nss: Api<Namespace> = Api::all(c.clone());
    assert!(nss.get_opt("many").await.unwrap().is_none());
    let lp = ListParams::default();
    assert!(cms.list(&lp).await.unwrap().items.is_empty());
    assert!(secrets.list(&lp).await.unwrap().items.is_empty());
    assert!(pods.list(&lp).await.unwrap().items.is_empty());
    eprintln!("kubectl delete namespace with 200 objects took {took:?}");
}

/// Raw HTTP (what curl sends): preconditions are 409, a dry run writes nothing, and a
/// create in a terminating namespace is 403.
#[test]
fn delete_preconditions_dry_run_and_terminating_namespaces_over_http() {
    let server = Server::start(&[]);
    let a = server.addr.as_str();
    let json = [("Content-Type", "application/json")];
    let r = http(
        a,
        "POST",
        "/api/v1/namespaces",
        &json,
        br#"{"metadata":{"name":"p"}}"#,
    );
    assert_eq!(r.status, 201);
    let cm = br#"{"metadata":{"name":"h","finalizers":["example.com/hold"]}}"#;
    let r = http(a, "POST", "/api/v1/namespaces/p/configmaps", &json, cm);
    assert_eq!(r.status, 201);
    let created = r.json();
    let url = "/api/v1/namespaces/p/configmaps/h";
    let r = http(
        a,
        "DELETE",
        url,
        &json,
        br#"{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"nope"}}"#,
    );
    assert_eq!(r.status, 409);
    let msg = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("Precondition failed: UID in precondition: nope"),
        "{msg}"
    );
    let r = http(a, "DELETE", &format!("{url}?dryRun=All"), &[], b"");
    assert_eq!(r.status, 200);
    assert!(r.json()["metadata"]["deletionTimestamp"].is_string());
    let r = http(a, "GET", url, &[], b"");
    assert!(r.json()["metadata"].get("deletionTimestamp").is_none());
    let body = json!({"preconditions":{"uid":created["metadata"]["uid"]}}).to_string();
    let r = http(a, "DELETE", url, &json, body.as_bytes());
    assert_eq!(r.status, 200);
    assert!(r.json()["metadata"]["deletionTimestamp"].is_string());

    let r = http(a, "DELETE", "/api/v1/namespaces/p", &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"]["phase"], "Terminating");
    let r = http(
        a,
        "POST",
        "/api/v1/namespaces/p/configmaps",
        &json,
        br#"{"metadata":{"name":"late"}}"#,
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        "configmaps \"late\" is forbidden: unable to create new content in namespace p because it is being terminated"
    );
    // The held object holds the namespace; its finalizer removed, both go.
    let r = http(
        a,
        "PATCH",
        url,
        &[("Content-Type", "application/merge-patch+json")],
        br#"{"metadata":{"finalizers":null}}"#,
    );
    assert_eq!(r.status, 200);
    let deadline = Instant::now() + PATIENCE;
    while http(a, "GET", "/api/v1/namespaces/p", &[], b"").status != 404 {
        assert!(Instant::now() < deadline, "the namespace stayed");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A write naming the uid of an object deleted and recreated under the same name since the
/// client read it must not land on the new object (red-team finding of issue 29): a PUT
/// carries the uid as a precondition (409, upstream's `defaultUpdatedObjectInfo`), a patch
/// or an apply that sets it changes an immutable field (422, `ValidateObjectMetaAccessorUpdate`)
/// — which is how a kubelet's status patch, carrying the pod's uid, misses a successor pod.
#[tokio::test]
async fn kube_rs_writes_carrying_a_predecessors_uid_do_not_land_on_its_successor() {
    use kube::api::{Patch, PatchParams};
    let server = Server::start(&[]);
    let client = client(&server).await;
    namespace(&client, "succ").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "succ");
    let make = |v: &str| -> ConfigMap {
        serde_json::from_value(json!({"metadata":{"name":"c"},"data":{"v":v}})).unwrap()
    };
    let old = cms
        .create(&PostParams::default(), &make("old"))
        .await
        .unwrap();
    let old_uid = old.uid().unwrap();
    cms.delete("c", &Default::default()).await.unwrap();
    let new = cms
        .create(&PostParams::default(), &make("new"))
        .await
        .unwrap();
    assert_ne!(new.uid().unwrap(), old_uid);

    let code = |e: kube::Error| match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("not an API error: {other}"),
    };
    // PUT with the old uid and no resourceVersion.
    let mut stale = make("from the old one's reader");
    stale.metadata.uid = Some(old_uid.clone());
    let (c, m) = code(
        cms.replace("c", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(c, 409, "{m}");
    assert!(
        m.contains("Precondition failed: UID in precondition"),
        "{m}"
    );
    // Merge patch and apply with the old uid.
    let patch = json!({"metadata":{"uid":old_uid},"data":{"v":"patched"}});
    let (c, m) = code(
        cms.patch("c", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(c, 422, "{m}");
    assert!(
        m.contains("metadata.uid") && m.contains("field is immutable"),
        "{m}"
    );
    let apply = json!({"apiVersion":"v1","kind":"ConfigMap",
        "metadata":{"name":"c","uid":old_uid},"data":{"v":"applied"}});
    let (c, m) = code(
        cms.patch("c", &PatchParams::apply("t").force(), &Patch::Apply(&apply))
            .await
            .unwrap_err(),
    );
    assert_eq!(c, 422, "{m}");
    // The successor is untouched; its own uid still works.
    let now = cms.get("c").await.unwrap();
    assert_eq!(now.data.unwrap()["v"], "new");
    let ok = json!({"metadata":{"uid":new.uid().unwrap()},"data":{"v":"mine"}});
    cms.patch("c", &PatchParams::default(), &Patch::Merge(&ok))
        .await
        .unwrap();

    // The kubelet's form: a pod's status patch carrying the pod's uid.
    let pods: Api<Pod> = Api::namespaced(client, "succ");
    let pod = |_: ()| -> Pod {
        serde_json::from_value(json!({"metadata":{"name":"p"},
            "spec":{"containers":[{"name":"c","image":"i"}]}}))
        .unwrap()
    };
    let first = pods.create(&PostParams::default(), &pod(())).await.unwrap();
    pods.delete("p", &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod(())).await.unwrap();
    let status = json!({"metadata":{"uid":first.uid().unwrap()},"status":{"phase":"Failed"}});
    let (c, m) = code(
        pods.patch_status("p", &PatchParams::default(), &Patch::Strategic(&status))
            .await
            .unwrap_err(),
    );
    assert_eq!(c, 422, "{m}");
    let phase = pods.get("p").await.unwrap().status.and_then(|s| s.phase);
    assert_ne!(phase.as_deref(), Some("Failed"));
}
