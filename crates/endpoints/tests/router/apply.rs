//! Server-side apply and managedFields through the router, request by request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use listwatch_endpoints::{Config, Installer, KindSpec, ScaleSubresource};
use listwatch_memstore::MemStore;
use serde_json::{Value, json};
use tower::ServiceExt;

fn router() -> Router {
    let s: Arc<dyn listwatch_storage::Storage> = Arc::new(MemStore::new());
    Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap"),
            s.clone(),
        )
        .resource(
            KindSpec::new("apps", "v1", "deployments", "Deployment")
                .status_subresource(true)
                .scale(ScaleSubresource::replicas().label_selector("spec.selector")),
            s,
        )
        .build()
        .router()
}

async fn call(
    r: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Value) {
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
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

const APPLY: (&str, &str) = ("content-type", "application/apply-patch+yaml");
const CM: &str = "/api/v1/namespaces/default/configmaps";

async fn apply(r: &Router, name: &str, query: &str, body: &str) -> (StatusCode, Value) {
    call(r, "PATCH", &format!("{CM}/{name}?{query}"), &[APPLY], body).await
}

fn entry<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
    obj["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager)
}

#[tokio::test]
async fn creates_record_an_update_and_appliers_conflict_with_it_until_they_force() {
    let r = router();
    let (code, created) = call(
        &r,
        "POST",
        CM,
        &[
            ("content-type", "application/json"),
            (
                "user-agent",
                "kubectl/v1.33.0 (linux/amd64) kubernetes/abcdef",
            ),
        ],
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1"}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    let e = entry(&created, "kubectl").expect("the User-Agent names the manager");
    assert_eq!(e["operation"], "Update");
    assert_eq!(e["apiVersion"], "v1");
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert_eq!(e["fieldsV1"], json!({"f:data":{".":{},"f:a":{}}}));
    assert!(e["time"].as_str().is_some_and(|t| t.ends_with('Z')));

    let body =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: \"2\"\n  b: \"3\"\n";
    let (code, status) = apply(&r, "c", "fieldManager=alice", body).await;
    assert_eq!(code, StatusCode::CONFLICT, "{status}");
    assert_eq!(status["reason"], "Conflict");
    assert_eq!(
        status["message"],
        r#"Apply failed with 1 conflict: conflict with "kubectl" using v1: .data.a"#
    );
    assert_eq!(
        status["details"]["causes"],
        json!([{"reason":"FieldManagerConflict","message":"conflict with \"kubectl\" using v1","field":".data.a"}])
    );

    let (code, forced) = apply(&r, "c", "fieldManager=alice&force=true", body).await;
    assert_eq!(code, StatusCode::OK, "{forced}");
    assert_eq!(forced["data"], json!({"a":"2","b":"3"}));
    assert_eq!(
        entry(&forced, "alice").unwrap()["fieldsV1"],
        json!({"f:data":{"f:a":{},"f:b":{}}})
    );
    assert_eq!(entry(&forced, "alice").unwrap()["operation"], "Apply");
    // kubectl keeps only the map it created.
    assert_eq!(
        entry(&forced, "kubectl").unwrap()["fieldsV1"],
        json!({"f:data":{}})
    );

    // alice drops b from her configuration: it goes (nobody else owns it).
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: \"2\"\n";
    let (code, dropped) = apply(&r, "c", "fieldManager=alice", body).await;
    assert_eq!(code, StatusCode::OK, "{dropped}");
    assert_eq!(dropped["data"], json!({"a":"2"}));

    // A dry run conflicts the same way and changes nothing.
    let (code, _) = apply(
        &r,
        "c",
        "fieldManager=bob&dryRun=All",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: \"9\"\n",
    )
    .await;
    assert_eq!(code, StatusCode::CONFLICT);
}

#[tokio::test]
async fn updates_and_patches_take_the_fields_they_change() {
    let r = router();
    let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: u\ndata:\n  a: \"1\"\n";
    let (code, created) = apply(&r, "u", "fieldManager=alice", body).await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    let (code, patched) = call(
        &r,
        "PATCH",
        &format!("{CM}/u?fieldManager=editor"),
        &[("content-type", "application/merge-patch+json")],
        r#"{"data":{"a":"2"}}"#,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{patched}");
    assert_eq!(
        entry(&patched, "editor").unwrap()["fieldsV1"],
        json!({"f:data":{"f:a":{}}})
    );
    assert!(entry(&patched, "alice").is_none());
    // A PUT without managedFields keeps them (and records its own manager).
    let mut put = patched.clone();
    put["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    put["data"]["z"] = json!("9");
    let (code, replaced) = call(
        &r,
        "PUT",
        &format!("{CM}/u"),
        &[
            ("content-type", "application/json"),
            ("user-agent", "python-requests/2"),
        ],
        &put.to_string(),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{replaced}");
    assert!(entry(&replaced, "editor").is_some());
    assert_eq!(
        entry(&replaced, "python-requests").unwrap()["fieldsV1"],
        json!({"f:data":{"f:z":{}}})
    );
    // alice's apply of the old value now conflicts with the patcher.
    let (code, status) = apply(&r, "u", "fieldManager=alice", body).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert_eq!(
        status["message"],
        r#"Apply failed with 1 conflict: conflict with "editor" using v1: .data.a"#
    );
}

#[tokio::test]
async fn lists_merge_by_their_schema_keys_and_status_is_owned_through_status() {
    let r = router();
    let url = "/apis/apps/v1/namespaces/default/deployments/d";
    let deploy = |containers: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  selector:\n    matchLabels: {{app: d}}\n  \
             template:\n    metadata:\n      labels: {{app: d}}\n    spec:\n      containers:\n{containers}"
        )
    };
    let (code, a) = call(
        &r,
        "PATCH",
        &format!("{url}?fieldManager=alice"),
        &[APPLY],
        &deploy("      - name: app\n        image: nginx\n        ports:\n        - containerPort: 80\n"),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{a}");
    assert_eq!(
        entry(&a, "alice").unwrap()["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"],
        json!({"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{},
            "f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{}}}}})
    );
    // bob applies a sidecar: merged by name (containers are a map-list), no conflict.
    let (code, b) = call(
        &r,
        "PATCH",
        &format!("{url}?fieldManager=bob"),
        &[APPLY],
        &deploy("      - name: sidecar\n        image: busybox\n"),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{b}");
    let names: Vec<&str> = b["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app", "sidecar"]);
    // The selector is atomic (its schema says so): bob's differing one conflicts whole.
    let (code, status) = call(
        &r,
        "PATCH",
        &format!("{url}?fieldManager=bob"),
        &[APPLY],
        &deploy("      - name: sidecar\n        image: busybox\n")
            .replace("matchLabels: {app: d}", "matchLabels: {app: e}"),
    )
    .await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains(r#"conflict with "alice": .spec.selector"#),
        "{status}"
    );
    // Status applied through /status is owned there, with its subresource.
    let (code, s) = call(
        &r,
        "PATCH",
        &format!("{url}/status?fieldManager=ctrl"),
        &[APPLY],
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nstatus:\n  replicas: 3\n",
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{s}");
    assert_eq!(s["status"]["replicas"], 3);
    let e = entry(&s, "ctrl").unwrap();
    assert_eq!(e["subresource"], "status");
    assert_eq!(e["fieldsV1"], json!({"f:status":{"f:replicas":{}}}));
}

#[tokio::test]
async fn bad_apply_bodies_are_400() {
    let r = router();
    for (body, want) in [
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  managedFields: []\n",
            "metadata.managedFields must be nil",
        ),
        (
            "apiVersion: v2\nkind: ConfigMap\nmetadata:\n  name: x\n",
            "invalid object type: /v2, Kind=ConfigMap",
        ),
        (
            "apiVersion: v1\nmetadata:\n  name: x\n",
            "invalid object type: /v1, Kind=",
        ),
    ] {
        let (code, status) = apply(&r, "x", "fieldManager=m", body).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{status}");
        assert!(
            status["message"].as_str().unwrap().contains(want),
            "{status}"
        );
    }
    let dup = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  template:\n    spec:\n      containers:\n      - name: a\n      - name: a\n";
    let (code, status) = call(
        &r,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/d?fieldManager=m",
        &[APPLY],
        dup,
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains(r#".spec.template.spec.containers: duplicate entries for key [name="a"]"#),
        "{status}"
    );
}
