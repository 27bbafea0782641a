//! Issue 17 item 5 through the router: PUT creating where upstream's strategy allows it,
//! dry-run creates of a taken name, `generateName` retries on a collision, and YAML
//! responses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use listwatch_endpoints::{Config, Installer, KindSpec};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, Storage};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::common;
use common::CollidingCreates;

fn installer(store: Arc<dyn Storage>) -> Installer {
    Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace").namespaced(false),
            store.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap"),
            store.clone(),
        )
        .resource(
            KindSpec::new("coordination.k8s.io", "v1", "leases", "Lease")
                .allow_create_on_update(true),
            store.clone(),
        )
        .resource(
            KindSpec::new("example.com", "v1", "widgets", "Widget")
                .custom_resource(None)
                .storage_resource("widgets.example.com"),
            store,
        )
}

fn router() -> (Router, MemStore) {
    let store = MemStore::new();
    let r = installer(Arc::new(store.clone())).build().router();
    (r, store)
}

struct Resp {
    status: StatusCode,
    content_type: String,
    body: Bytes,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    fn yaml(&self) -> Value {
        assert_eq!(self.content_type, "application/yaml");
        let text = std::str::from_utf8(&self.body).unwrap();
        serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

async fn call(r: &Router, method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = r
        .clone()
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    Resp {
        status,
        content_type,
        body,
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");
const YAML: (&str, &str) = ("accept", "application/yaml");
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";

async fn namespace(r: &Router, name: &str) {
    let resp = call(
        r,
        "POST",
        "/api/v1/namespaces",
        &[JSON],
        &json!({"metadata": {"name": name}}).to_string(),
    )
    .await;
    assert_eq!(resp.status, StatusCode::CREATED);
}

fn lease(name: &str, holder: &str) -> String {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "resourceVersion": "12345"},
        "spec": {"holderIdentity": holder}})
    .to_string()
}

/// Before: a PUT of a missing object was 404 for every resource.
#[tokio::test]
async fn put_creates_where_the_resource_allows_create_on_update() {
    let (r, store) = router();
    namespace(&r, "ns").await;
    let created = call(&r, "PUT", &format!("{LEASES}/l"), &[JSON], &lease("l", "a")).await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    let v = created.json();
    assert_eq!(v["spec"]["holderIdentity"], "a");
    assert!(v["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(v["metadata"]["creationTimestamp"].is_string());
    assert_eq!(v["metadata"]["generation"], 1);
    assert_eq!(v["metadata"]["managedFields"][0]["operation"], "Update");
    let key = Key::object("leases", Some("ns"), "l").unwrap();
    assert!(
        store
            .get(&key, &Default::default())
            .await
            .unwrap()
            .is_some()
    );
    // The next PUT updates it (the body's resourceVersion must match now).
    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let body = lease("l", "b").replace("12345", &rv);
    let updated = call(&r, "PUT", &format!("{LEASES}/l"), &[JSON], &body).await;
    assert_eq!(updated.status, StatusCode::OK);
    assert_eq!(updated.json()["metadata"]["uid"], v["metadata"]["uid"]);

    // The create path's rules: the name must be the URL's, the body validated, a uid in
    // the body is a precondition nothing meets.
    let other = call(&r, "PUT", &format!("{LEASES}/m"), &[JSON], &lease("x", "a")).await;
    assert_eq!(other.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        other.json()["message"],
        "the name of the object (x) does not match the name on the URL (m)"
    );
    let bad = lease("Bad_Name", "a");
    assert_eq!(
        call(&r, "PUT", &format!("{LEASES}/Bad_Name"), &[JSON], &bad)
            .await
            .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let with_uid = json!({"metadata": {"name": "u", "uid": "0000"}}).to_string();
    let pre = call(&r, "PUT", &format!("{LEASES}/u"), &[JSON], &with_uid).await;
    assert_eq!(pre.status, StatusCode::CONFLICT);
    assert!(
        pre.json()["message"]
            .as_str()
            .unwrap()
            .contains("Precondition failed: UID in precondition: 0000")
    );
    // A dry run creates nothing.
    let dry = call(
        &r,
        "PUT",
        &format!("{LEASES}/d?dryRun=All"),
        &[JSON],
        &lease("d", "a"),
    )
    .await;
    assert_eq!(dry.status, StatusCode::CREATED);
    let dkey = Key::object("leases", Some("ns"), "d").unwrap();
    let absent = store.get(&dkey, &Default::default()).await;
    assert!(absent.is_err_and(|e| e.is_not_found()));

    // Resources whose strategy does not allow it stay 404: config maps, custom resources,
    // and a status subresource.
    let cm = json!({"metadata": {"name": "c"}}).to_string();
    assert_eq!(
        call(
            &r,
            "PUT",
            "/api/v1/namespaces/ns/configmaps/c",
            &[JSON],
            &cm
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
        .to_string();
    assert_eq!(
        call(
            &r,
            "PUT",
            "/apis/example.com/v1/namespaces/ns/widgets/w",
            &[JSON],
            &w
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );

    // A create through PUT in a terminating namespace is refused as a POST would be; an
    // update of an existing object there is not a create.
    namespace(&r, "gone").await;
    let gone = "/apis/coordination.k8s.io/v1/namespaces/gone/leases";
    let kept = call(
        &r,
        "PUT",
        &format!("{gone}/kept"),
        &[JSON],
        &lease("kept", "a"),
    )
    .await;
    assert_eq!(kept.status, StatusCode::CREATED);
    let rv = kept.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        call(&r, "DELETE", "/api/v1/namespaces/gone", &[], "")
            .await
            .status,
        StatusCode::OK
    );
    let refused = call(
        &r,
        "PUT",
        &format!("{gone}/new"),
        &[JSON],
        &lease("new", "a"),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{:?}", refused.body);
    assert_eq!(
        refused.json()["message"],
        "leases.coordination.k8s.io \"new\" is forbidden: unable to create new content in namespace gone because it is being terminated"
    );
    let body = lease("kept", "b").replace("12345", &rv);
    assert_eq!(
        call(&r, "PUT", &format!("{gone}/kept"), &[JSON], &body)
            .await
            .status,
        StatusCode::OK
    );
    let missing_ns = "/apis/coordination.k8s.io/v1/namespaces/nope/leases/x";
    assert_eq!(
        call(&r, "PUT", missing_ns, &[JSON], &lease("x", "a"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

/// Before: a dry-run create answered 201 for a name that was taken.
#[tokio::test]
async fn a_dry_run_create_of_a_taken_name_is_409() {
    let (r, _) = router();
    namespace(&r, "ns").await;
    let path = "/api/v1/namespaces/ns/configmaps";
    let cm = json!({"metadata": {"name": "c"}, "data": {"k": "v"}}).to_string();
    assert_eq!(
        call(&r, "POST", path, &[JSON], &cm).await.status,
        StatusCode::CREATED
    );
    let dry = call(&r, "POST", &format!("{path}?dryRun=All"), &[JSON], &cm).await;
    assert_eq!(dry.status, StatusCode::CONFLICT);
    let status = dry.json();
    assert_eq!(status["reason"], "AlreadyExists");
    assert_eq!(status["message"], "configmaps \"c\" already exists");
    let free = json!({"metadata": {"name": "free"}}).to_string();
    assert_eq!(
        call(&r, "POST", &format!("{path}?dryRun=All"), &[JSON], &free)
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        call(&r, "GET", &format!("{path}/free"), &[], "")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

fn colliding(collisions: usize) -> (Router, Arc<CollidingCreates>) {
    let store = Arc::new(CollidingCreates {
        store: MemStore::new(),
        prefix: "gen-".into(),
        collisions,
        creates: AtomicUsize::new(0),
    });
    let r = installer(store.clone()).build().router();
    (r, store)
}

/// Before: the first collision of a generated name was the client's 409.
#[tokio::test]
async fn generated_names_are_retried_on_a_collision_up_to_eight_times() {
    let body = json!({"metadata": {"generateName": "gen-"}, "data": {"k": "v"}}).to_string();
    let path = "/api/v1/namespaces/ns/configmaps";
    // Seven collisions: the eighth name is free.
    let (r, store) = colliding(7);
    namespace(&r, "ns").await;
    let made = call(&r, "POST", path, &[JSON], &body).await;
    assert_eq!(made.status, StatusCode::CREATED, "{:?}", made.body);
    assert!(
        made.json()["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("gen-")
    );
    assert_eq!(store.creates.load(Ordering::SeqCst), 8);
    // Eight: upstream's GenerateNameConflict after its eight attempts.
    let (r, store) = colliding(8);
    namespace(&r, "ns").await;
    let refused = call(&r, "POST", path, &[JSON], &body).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(store.creates.load(Ordering::SeqCst), 8);
    let status = refused.json();
    assert_eq!(status["reason"], "AlreadyExists");
    assert_eq!(status["details"]["retryAfterSeconds"], 1);
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with("configmaps \"gen-")
            && message.ends_with(
                "already exists, the server was not able to generate a unique name for the object"
            ),
        "{message}"
    );
    // A name the client chose is not retried.
    let (r, store) = colliding(1);
    namespace(&r, "ns").await;
    let named = json!({"metadata": {"name": "gen-fixed"}}).to_string();
    let taken = call(&r, "POST", path, &[JSON], &named).await;
    assert_eq!(taken.status, StatusCode::CONFLICT);
    assert_eq!(
        taken.json()["message"],
        "configmaps \"gen-fixed\" already exists"
    );
    assert_eq!(store.creates.load(Ordering::SeqCst), 1);
}

/// Before: `Accept: application/yaml` was 406 everywhere.
#[tokio::test]
async fn yaml_responses_for_objects_lists_writes_and_errors() {
    let (r, _) = router();
    namespace(&r, "ns").await;
    let path = "/api/v1/namespaces/ns/configmaps";
    let cm = json!({"metadata": {"name": "c", "labels": {"a": "b"}},
        "data": {"script": "#!/bin/sh\necho 'hi: there'\n", "n": "007", "t": "true"}})
    .to_string();
    let created = call(&r, "POST", path, &[JSON, YAML], &cm).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let c = created.yaml();
    assert_eq!(c["data"]["script"], "#!/bin/sh\necho 'hi: there'\n");
    assert_eq!(c["data"]["n"], "007");
    assert_eq!(c["data"]["t"], "true");
    let got = call(&r, "GET", &format!("{path}/c"), &[YAML], "").await;
    assert_eq!(got.status, StatusCode::OK);
    let json_got = call(&r, "GET", &format!("{path}/c"), &[], "").await.json();
    assert_eq!(got.yaml(), json_got);
    let list = call(&r, "GET", path, &[YAML], "").await;
    assert_eq!(list.status, StatusCode::OK);
    let l = list.yaml();
    assert_eq!(l["kind"], "ConfigMapList");
    assert_eq!(l["items"][0], json_got);
    let patched = call(
        &r,
        "PATCH",
        &format!("{path}/c"),
        &[("content-type", "application/merge-patch+json"), YAML],
        r#"{"data":{"n":"8"}}"#,
    )
    .await;
    assert_eq!(patched.yaml()["data"]["n"], "8");
    let missing = call(&r, "GET", &format!("{path}/nope"), &[YAML], "").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let status = missing.yaml();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["message"], "configmaps \"nope\" not found");
    // A watch has no YAML (406, as upstream), nor do discovery documents.
    let watch = call(&r, "GET", &format!("{path}?watch=true"), &[YAML], "").await;
    assert_eq!(watch.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(
        call(&r, "GET", "/api/v1", &[YAML], "").await.status,
        StatusCode::NOT_ACCEPTABLE
    );
    // JSON is still preferred where the client ranks it first.
    let both = call(
        &r,
        "GET",
        &format!("{path}/c"),
        &[("accept", "application/json, application/yaml")],
        "",
    )
    .await;
    assert_eq!(both.content_type, "application/json");
}
