//! Deletion lifecycle through the router (issue 17 items 3 and 4): finalizers hold a deleted
//! object, the update removing the last one removes it, preconditions and dry runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::StreamExt;
use listwatch_endpoints::{Api, Config, Installer, NameValidation, ResourceInfo};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use serde_json::{Value, json};
use tower::ServiceExt;

struct T {
    #[allow(dead_code)]
    api: Api,
    router: Router,
    store: MemStore,
}

fn setup() -> T {
    let store = MemStore::new();
    let s: Arc<dyn Storage> = Arc::new(store.clone());
    let api = Installer::new(Config::default())
        .resource(
            ResourceInfo::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label)
                .status_subresource(true),
            s.clone(),
        )
        .resource(
            ResourceInfo::new("", "v1", "configmaps", "ConfigMap"),
            s.clone(),
        )
        .resource(
            ResourceInfo::new("example.com", "v1", "widgets", "Widget").status_subresource(true),
            s,
        )
        .build();
    let router = api.router();
    T { api, router, store }
}

async fn call(r: &Router, method: &str, uri: &str, ct: &str, body: &str) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if !ct.is_empty() {
        req = req.header("content-type", ct);
    }
    let resp = r
        .clone()
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, v)
}

const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const CM: &str = "/api/v1/namespaces/ns1/configmaps";

async fn setup_ns(r: &Router) {
    let (s, _) = call(
        r,
        "POST",
        "/api/v1/namespaces",
        JSON,
        r#"{"metadata":{"name":"ns1"}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
}

async fn create_held(r: &Router, name: &str) -> Value {
    let (s, v) = call(
        r,
        "POST",
        CM,
        JSON,
        &json!({"metadata":{"name":name,"finalizers":["example.com/hold"]},"data":{"k":"v"}})
            .to_string(),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    v
}

/// Before: the DELETE removed the object at once (the GET after it was 404).
#[tokio::test]
async fn a_finalizer_holds_a_deleted_object_until_the_update_that_removes_it() {
    let t = setup();
    let r = &t.router;
    setup_ns(r).await;
    let ckey = Key::collection("configmaps", Some("ns1")).unwrap();
    let rv = t.store.current_resource_version().await.unwrap();
    let mut watch = t
        .store
        .watch(&ckey, &ListOptions::recursive().at(Some(rv), None))
        .await
        .unwrap();
    let created = create_held(r, "held").await;
    let url = format!("{CM}/held");

    let (s, marked) = call(r, "DELETE", &url, "", "").await;
    assert_eq!(s, StatusCode::OK, "{marked}");
    let ts = marked["metadata"]["deletionTimestamp"].clone();
    assert!(ts.is_string(), "{marked}");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    let (s, got) = call(r, "GET", &url, "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(got["metadata"]["deletionTimestamp"], ts);

    // A second DELETE changes nothing.
    let (s, again) = call(r, "DELETE", &url, "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        got["metadata"]["resourceVersion"]
    );

    // No new finalizer while deleting (422), and the timestamp cannot be unset.
    let (s, e) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"finalizers":["example.com/hold","example.com/more"]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no new finalizers can be added if the object is being deleted"),
        "{e}"
    );
    let (s, kept) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"deletionTimestamp":null},"data":{"k":"w"}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{kept}");
    assert_eq!(kept["metadata"]["deletionTimestamp"], ts);

    // Removing the last finalizer removes the object; the answer is the updated object.
    let (s, last) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{last}");
    assert!(last["metadata"].get("finalizers").is_none(), "{last}");
    let (s, _) = call(r, "GET", &url, "", "").await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Watchers saw ADDED, MODIFIED (marked), MODIFIED (data), DELETED.
    let mut kinds = Vec::new();
    while kinds.len() < 4 {
        let ev = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("watch event")
            .expect("watch open");
        match ev {
            WatchEvent::Added(o) => kinds.push(("ADDED", o.to_value().unwrap())),
            WatchEvent::Modified { object, .. } => {
                kinds.push(("MODIFIED", object.to_value().unwrap()));
            }
            WatchEvent::Deleted(o) => kinds.push(("DELETED", o.to_value().unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e}"),
        }
    }
    let names: Vec<&str> = kinds.iter().map(|(k, _)| *k).collect();
    assert_eq!(names, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    assert_eq!(kinds[1].1["metadata"]["deletionTimestamp"], ts);
    assert_eq!(kinds[0].1["metadata"]["uid"], created["metadata"]["uid"]);
}

/// Before: a PUT that emptied the finalizers of a deleting object stored it (it stayed).
#[tokio::test]
async fn a_put_removing_the_last_finalizer_removes_and_one_keeping_some_does_not() {
    let t = setup();
    let r = &t.router;
    setup_ns(r).await;
    let (s, _) = call(
        r,
        "POST",
        CM,
        JSON,
        r#"{"metadata":{"name":"two","finalizers":["a.io/x","b.io/y"]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let url = format!("{CM}/two");
    call(r, "DELETE", &url, "", "").await;
    let (_, cur) = call(r, "GET", &url, "", "").await;
    let mut one = cur.clone();
    one["metadata"]["finalizers"] = json!(["b.io/y"]);
    let (s, v) = call(r, "PUT", &url, JSON, &one.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::OK);
    // A stale resourceVersion is still a conflict, not a removal.
    let mut stale = cur.clone();
    stale["metadata"]["finalizers"] = json!([]);
    assert_eq!(
        call(r, "PUT", &url, JSON, &stale.to_string()).await.0,
        StatusCode::CONFLICT
    );
    let mut none = v.clone();
    none["metadata"]["finalizers"] = json!([]);
    let (s, v) = call(r, "PUT", &url, JSON, &none.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn delete_preconditions_are_409_and_dry_runs_write_nothing() {
    let t = setup();
    let r = &t.router;
    setup_ns(r).await;
    let c = create_held(r, "p").await;
    let url = format!("{CM}/p");
    for pre in [json!({"uid":"not-it"}), json!({"resourceVersion":"1"})] {
        let body = json!({"kind":"DeleteOptions","apiVersion":"v1","preconditions":pre});
        let (s, e) = call(r, "DELETE", &url, JSON, &body.to_string()).await;
        assert_eq!(s, StatusCode::CONFLICT, "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("Precondition failed"),
            "{e}"
        );
    }
    let (_, cur) = call(r, "GET", &url, "", "").await;
    assert!(cur["metadata"].get("deletionTimestamp").is_none());

    // Dry run of a held object: the answer is marked, storage is not.
    let (s, v) = call(r, "DELETE", &format!("{url}?dryRun=All"), "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["metadata"]["deletionTimestamp"].is_string(), "{v}");
    let (_, cur) = call(r, "GET", &url, "", "").await;
    assert!(cur["metadata"].get("deletionTimestamp").is_none());
    assert_eq!(
        cur["metadata"]["resourceVersion"],
        c["metadata"]["resourceVersion"]
    );

    // Right preconditions: marked.
    let body = json!({"preconditions":{"uid":c["metadata"]["uid"],"resourceVersion":c["metadata"]["resourceVersion"]}});
    let (s, v) = call(r, "DELETE", &url, JSON, &body.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["metadata"]["deletionTimestamp"].is_string());

    // A dry-run update removing the last finalizer removes nothing.
    let (s, _) = call(
        r,
        "PATCH",
        &format!("{url}?dryRun=All"),
        MERGE,
        r#"{"metadata":{"finalizers":[]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::OK);

    // Objects without finalizers go at once, as before.
    let (s, _) = call(r, "POST", CM, JSON, r#"{"metadata":{"name":"free"}}"#).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = call(r, "DELETE", &format!("{CM}/free?dryRun=All"), "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        call(r, "GET", &format!("{CM}/free"), "", "").await.0,
        StatusCode::OK
    );
    let (s, _) = call(r, "DELETE", &format!("{CM}/free"), "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        call(r, "GET", &format!("{CM}/free"), "", "").await.0,
        StatusCode::NOT_FOUND
    );
}

/// A collection delete marks held objects and removes the others.
#[tokio::test]
async fn delete_collection_honours_finalizers() {
    let t = setup();
    let r = &t.router;
    setup_ns(r).await;
    create_held(r, "h").await;
    call(r, "POST", CM, JSON, r#"{"metadata":{"name":"f"}}"#).await;
    let (s, list) = call(r, "DELETE", CM, "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let (_, left) = call(r, "GET", CM, "", "").await;
    let items = left["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "h");
    assert!(items[0]["metadata"]["deletionTimestamp"].is_string());
}
