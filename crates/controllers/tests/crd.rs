//! The CRD controller over the endpoints' API and an in-memory store: its writes of a CRD
//! (the status that accepts and establishes it, the finalizer removed on deletion) go
//! through the registry's store of the CRD kind and are recorded in managedFields under the
//! server's own manager (issue 27: every in-process writer goes through the registry as a
//! named manager).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use listwatch_controllers::crd::{CrdController, StorageFactory};
use listwatch_endpoints::{Config, Installer, KindSpec};
use listwatch_memstore::MemStore;
use listwatch_storage::Storage;
use listwatch_testkit::router;
use serde_json::{Value, json};

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const NAME: &str = "gadgets.example.org";

/// One JSON request through the router (testkit's `call`).
async fn call(r: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
    router::call(r, method, uri, router::JSON, body).await
}

/// Polls `f` until it yields, for at most 30 s (only a hang reaches that).
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME},
        "spec": {
            "group": "example.org",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

fn condition_true(crd: &Value, kind: &str) -> bool {
    crd["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == kind && c["status"] == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_crd_controllers_writes_are_recorded_as_kube_apiserver() {
    let s: Arc<dyn Storage> = Arc::new(MemStore::new());
    let api = Installer::new(Config::default())
        .resource(
            listwatch_kinds::builtin::apiextensions::customresourcedefinition::spec(),
            s,
        )
        .build();
    let factory: StorageFactory = Arc::new(
        |_: &KindSpec,
         read: &listwatch_controllers::crd::decode::ReadSchemas|
         -> Arc<dyn Storage> { read.over(Arc::new(MemStore::new())) },
    );
    let controller = tokio::spawn(CrdController::new(&api, factory).run());
    let r = api.router();

    let (s, v) = call(&r, "POST", CRDS, &crd().to_string()).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let url = format!("{CRDS}/{NAME}");
    let established = eventually("the CRD established", || {
        let (r, url) = (&r, &url);
        async move {
            let (_, v) = call(r, "GET", url, "").await;
            condition_true(&v, "Established").then_some(v)
        }
    })
    .await;
    let entries = established["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .clone();
    let mine: Vec<&Value> = entries
        .iter()
        .filter(|e| e["manager"] == json!("kube-apiserver"))
        .collect();
    assert_eq!(mine.len(), 1, "{entries:?}");
    assert_eq!(mine[0]["operation"], json!("Update"), "{entries:?}");
    assert_eq!(mine[0]["subresource"], json!("status"), "{entries:?}");
    let owned = &mine[0]["fieldsV1"]["f:status"];
    assert!(owned.get("f:acceptedNames").is_some(), "{entries:?}");
    assert!(owned.get("f:conditions").is_some(), "{entries:?}");
    assert!(
        !entries.iter().any(|e| e["manager"] == json!("unknown")),
        "{entries:?}"
    );
    // Its resource is served.
    let (s, v) = call(&r, "GET", "/apis/example.org/v1/namespaces/ns1/gadgets", "").await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // Deleting it: the controller's `Terminating` status and its removal of the cleanup
    // finalizer (a write through the store that removes the CRD).
    let (s, v) = call(&r, "DELETE", &url, "").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    eventually("the CRD gone", || {
        let (r, url) = (&r, &url);
        async move { (call(r, "GET", url, "").await.0 == StatusCode::NOT_FOUND).then_some(()) }
    })
    .await;
    let (s, _) = call(&r, "GET", "/apis/example.org/v1/namespaces/ns1/gadgets", "").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    controller.abort();
}
