//! The installed router against the embedded store, request by request, as clients call it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use bytes::Bytes;
use futures::StreamExt;
use listwatch_endpoints::{
    Api, Config, Installer, KindSpec, NameValidation, Printer, PrinterColumn, ScaleSubresource,
};
use listwatch_memstore::MemStore;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::common;
use common::StalledGets;

struct TestApi {
    api: Api,
    router: Router,
    store: MemStore,
}

fn test_api(config: Config) -> TestApi {
    let store = MemStore::new();
    let s: Arc<dyn listwatch_storage::Storage> = Arc::new(store.clone());
    let api = Installer::new(config)
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label)
                .status_subresource(true),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "pods", "Pod")
                .short_names(["po"])
                .selectable_fields(["spec.nodeName", "status.phase"])
                .trigger_field("spec.nodeName")
                .strategy(listwatch_kinds::builtin::core::pod::PodStrategy)
                .status_subresource(true)
                // As upstream's pod storage (`ReturnDeletedObject`).
                .return_deleted_object(true),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap").short_names(["cm"]),
            s.clone(),
        )
        .resource(
            KindSpec::new("apps", "v1", "deployments", "Deployment")
                .printer(Printer::Columns(vec![PrinterColumn::new(
                    "Replicas",
                    "integer",
                    ".spec.replicas",
                )]))
                .status_subresource(true)
                .scale(ScaleSubresource::replicas().label_selector("spec.selector")),
            s,
        )
        .build();
    let router = api.router();
    TestApi { api, router, store }
}

struct Resp {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Bytes,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }
}

async fn call(
    router: &Router,
    method: &str,
    uri: &str,
    content_type: Option<&str>,
    body: &str,
) -> Resp {
    call_with(
        router,
        method,
        uri,
        &[("content-type", content_type.unwrap_or(""))],
        body,
    )
    .await
}

async fn call_with(
    router: &Router,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Resp {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        if !v.is_empty() {
            req = req.header(*k, *v);
        }
    }
    let resp = router
        .clone()
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    Resp {
        status,
        headers,
        body,
    }
}

const JSON: Option<&str> = Some("application/json");

async fn create_ns(r: &Router, name: &str) {
    let resp = call(
        r,
        "POST",
        "/api/v1/namespaces",
        JSON,
        &json!({"metadata":{"name":name}}).to_string(),
    )
    .await;
    assert_eq!(resp.status, StatusCode::CREATED, "{:?}", resp.body);
}

/// POSTs `pod(name, node)` into `ns`.
async fn create_pod(r: &Router, ns: &str, name: &str, node: &str) {
    let path = format!("/api/v1/namespaces/{ns}/pods");
    call(r, "POST", &path, JSON, &pod(name, node)).await;
}

fn pod(name: &str, node: &str) -> String {
    json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":name,"labels":{"app":"web"}},
        "spec":{"nodeName":node,"containers":[{"name":"c","image":"nginx:1.26","ports":[{"containerPort":80}]}]}})
    .to_string()
}

#[tokio::test]
async fn create_get_list_round_trip_with_server_set_metadata() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    let created = call(
        r,
        "POST",
        "/api/v1/namespaces/ns1/pods",
        JSON,
        &pod("web-1", "n1"),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let c = created.json();
    assert_eq!(c["metadata"]["namespace"], "ns1");
    assert_eq!(c["metadata"]["generation"], 1);
    assert!(c["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(c["metadata"]["creationTimestamp"].is_string());
    assert!(c["metadata"]["resourceVersion"].is_string());

    let got = call(r, "GET", "/api/v1/namespaces/ns1/pods/web-1", None, "").await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json(), c);

    let list = call(r, "GET", "/api/v1/namespaces/ns1/pods?&limit=500", None, "")
        .await
        .json();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["items"][0]["metadata"]["name"], "web-1");
    assert!(list["metadata"]["resourceVersion"].is_string());

    let all = call(r, "GET", "/api/v1/pods", None, "").await.json();
    assert_eq!(all["items"].as_array().unwrap().len(), 1);

    let generated = call(
        r,
        "POST",
        "/api/v1/namespaces/ns1/configmaps",
        JSON,
        r#"{"metadata":{"generateName":"cfg-"},"data":{"k":"v"},"unknownField":{"kept":true}}"#,
    )
    .await;
    assert_eq!(generated.status, StatusCode::CREATED);
    let g = generated.json();
    assert!(g["metadata"]["name"].as_str().unwrap().starts_with("cfg-"));
    // A field ConfigMap does not declare is dropped (fieldValidation defaults to Warn, as
    // upstream: the object is stored without it and a warning says so).
    assert_eq!(g["unknownField"], Value::Null);
    let warnings: Vec<_> = generated
        .headers
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(r#"unknown field \"unknownField\""#)),
        "{warnings:?}"
    );
    assert_eq!(g["kind"], "ConfigMap");
}

#[tokio::test]
async fn create_failures_have_upstream_codes() {
    let t = test_api(Config::default());
    let r = &t.router;
    let missing_ns = call(
        r,
        "POST",
        "/api/v1/namespaces/nope/pods",
        JSON,
        &pod("a", "n"),
    )
    .await;
    assert_eq!(missing_ns.status, StatusCode::NOT_FOUND);
    assert_eq!(missing_ns.json()["details"]["kind"], "namespaces");
    create_ns(r, "ns1").await;
    assert_eq!(
        call(
            r,
            "POST",
            "/api/v1/namespaces/ns1/pods",
            JSON,
            &pod("a", "n")
        )
        .await
        .status,
        StatusCode::CREATED
    );
    let dup = call(
        r,
        "POST",
        "/api/v1/namespaces/ns1/pods",
        JSON,
        &pod("a", "n"),
    )
    .await;
    assert_eq!(
        (dup.status, dup.json()["reason"].as_str()),
        (StatusCode::CONFLICT, Some("AlreadyExists"))
    );
    let bad = call(
        r,
        "POST",
        "/api/v1/namespaces/ns1/pods",
        JSON,
        &pod("Bad_Name", "n"),
    )
    .await;
    assert_eq!(
        (bad.status, bad.json()["reason"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("Invalid"))
    );
    let bad_ns = call(
        r,
        "POST",
        "/api/v1/namespaces",
        JSON,
        r#"{"metadata":{"name":"a.b"}}"#,
    )
    .await;
    assert_eq!(bad_ns.status, StatusCode::UNPROCESSABLE_ENTITY);
    let not_json = call(r, "POST", "/api/v1/namespaces/ns1/pods", JSON, "{").await;
    assert_eq!(not_json.status, StatusCode::BAD_REQUEST);
    let other_ns = call(
        r,
        "POST",
        "/api/v1/namespaces/ns1/pods",
        JSON,
        r#"{"metadata":{"name":"x","namespace":"ns2"}}"#,
    )
    .await;
    assert_eq!(other_ns.status, StatusCode::BAD_REQUEST);
    let dry = call(
        r,
        "POST",
        "/api/v1/namespaces/ns1/pods?dryRun=All",
        JSON,
        &pod("dry", "n"),
    )
    .await;
    assert_eq!(dry.status, StatusCode::CREATED);
    assert_eq!(
        call(r, "GET", "/api/v1/namespaces/ns1/pods/dry", None, "")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

/// Method, URI, headers, body, expected code.
type ErrorCase = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    String,
    u16,
);

#[tokio::test]
async fn request_errors_are_statuses_with_the_right_codes() {
    let t = test_api(Config {
        max_body_bytes: 1024,
        ..Config::default()
    });
    let r = &t.router;
    create_ns(r, "ns1").await;
    let cases: Vec<ErrorCase> = vec![
        (
            "GET",
            "/api/v1/namespaces/ns1/pods?labelSelector=a%20in",
            vec![],
            String::new(),
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns1/pods?fieldSelector=spec.unknown%3Dx",
            vec![],
            String::new(),
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns1/pods?resourceVersion=abc",
            vec![],
            String::new(),
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns1/pods?watch=1&resourceVersionMatch=Exact&resourceVersion=1",
            vec![],
            String::new(),
            400,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns1/pods/missing",
            vec![],
            String::new(),
            404,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns1/widgets",
            vec![],
            String::new(),
            404,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns1/pods/a/exec",
            vec![],
            String::new(),
            404,
        ),
        (
            "PUT",
            "/api/v1/namespaces/ns1/pods",
            vec![("content-type", "application/json")],
            "{}".into(),
            405,
        ),
        (
            "POST",
            "/api/v1/pods",
            vec![("content-type", "application/json")],
            "{}".into(),
            405,
        ),
        (
            "GET",
            "/api/v1/namespaces/ns1/pods",
            vec![("accept", "application/vnd.kubernetes.protobuf")],
            String::new(),
            406,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns1/pods",
            vec![("content-type", "text/plain")],
            "x".into(),
            415,
        ),
        (
            "PATCH",
            "/api/v1/namespaces/ns1/pods/a",
            vec![("content-type", "application/json")],
            "{}".into(),
            415,
        ),
        (
            "POST",
            "/api/v1/namespaces/ns1/pods",
            vec![("content-type", "application/json")],
            "x".repeat(2000),
            413,
        ),
        ("GET", "/nowhere", vec![], String::new(), 404),
    ];
    for (method, uri, headers, body, code) in cases {
        let resp = call_with(r, method, uri, &headers, &body).await;
        assert_eq!(
            resp.status.as_u16(),
            code,
            "{method} {uri}: {:?}",
            String::from_utf8_lossy(&resp.body)
        );
        let s = resp.json();
        assert_eq!(
            (s["kind"].as_str(), s["code"].as_u64()),
            (Some("Status"), Some(u64::from(code))),
            "{method} {uri}"
        );
        assert_eq!(resp.headers[header::CONTENT_TYPE], "application/json");
    }
}

#[tokio::test]
async fn too_old_resource_versions_are_410_expired() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    for i in 0..5 {
        call(
            r,
            "POST",
            "/api/v1/namespaces/ns1/configmaps",
            JSON,
            &json!({"metadata":{"name":format!("c{i}")}}).to_string(),
        )
        .await;
    }
    let rev = t.store.current_revision();
    t.store.compact(rev).unwrap();
    let resp = call(
        r,
        "GET",
        "/api/v1/namespaces/ns1/configmaps?resourceVersion=2&resourceVersionMatch=Exact",
        None,
        "",
    )
    .await;
    assert_eq!(resp.status, StatusCode::GONE);
    assert_eq!(resp.json()["reason"], "Expired");
    // A watch gets the error in a 200 stream, as upstream's cacher sends it, then the end.
    let watch = open_watch(
        r,
        "/api/v1/namespaces/ns1/configmaps?watch=1&resourceVersion=2",
        None,
    )
    .await;
    assert_eq!(watch.status(), StatusCode::OK);
    let got = frames(watch.into_body(), 2).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["type"], "ERROR");
    assert_eq!(
        (
            got[0]["object"]["code"].as_u64(),
            got[0]["object"]["reason"].as_str()
        ),
        (Some(410), Some("Expired"))
    );
}

#[tokio::test]
async fn updates_need_the_current_resource_version_and_keep_status() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    let c = call(
        r,
        "POST",
        "/api/v1/namespaces/ns1/pods",
        JSON,
        &pod("a", "n1"),
    )
    .await
    .json();
    let mut stale = c.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    let conflict = call(
        r,
        "PUT",
        "/api/v1/namespaces/ns1/pods/a",
        JSON,
        &stale.to_string(),
    )
    .await;
    assert_eq!(
        (conflict.status, conflict.json()["reason"].as_str()),
        (StatusCode::CONFLICT, Some("Conflict"))
    );

    let mut next = c.clone();
    next["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    next["status"] = json!({"phase":"Failed"});
    let updated = call(
        r,
        "PUT",
        "/api/v1/namespaces/ns1/pods/a",
        JSON,
        &next.to_string(),
    )
    .await;
    assert_eq!(updated.status, StatusCode::OK);
    let u = updated.json();
    assert_eq!(u["metadata"]["generation"], 2);
    assert_eq!(u["metadata"]["uid"], c["metadata"]["uid"]);
    assert_ne!(
        u["status"]["phase"], "Failed",
        "main resource writes keep the status"
    );

    let status = json!({"metadata":{"name":"a"},"status":{"phase":"Running"}});
    let s = call(
        r,
        "PUT",
        "/api/v1/namespaces/ns1/pods/a/status",
        JSON,
        &status.to_string(),
    )
    .await;
    assert_eq!(s.status, StatusCode::OK);
    assert_eq!(s.json()["status"]["phase"], "Running");
    assert_eq!(s.json()["spec"]["containers"][0]["image"], "nginx:1.27");

    let renamed = call(
        r,
        "PUT",
        "/api/v1/namespaces/ns1/pods/a",
        JSON,
        r#"{"metadata":{"name":"b"}}"#,
    )
    .await;
    assert_eq!(renamed.status, StatusCode::BAD_REQUEST);
    let missing = call(
        r,
        "PUT",
        "/api/v1/namespaces/ns1/pods/zz",
        JSON,
        r#"{"metadata":{"name":"zz"}}"#,
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn patches_of_every_type_apply() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    create_pod(r, "ns1", "a", "n1").await;
    let url = "/api/v1/namespaces/ns1/pods/a";

    let merge = call(
        r,
        "PATCH",
        url,
        Some("application/merge-patch+json"),
        r#"{"metadata":{"labels":{"tier":"fe"}}}"#,
    )
    .await;
    assert_eq!(merge.status, StatusCode::OK);
    assert_eq!(
        merge.json()["metadata"]["labels"],
        json!({"app":"web","tier":"fe"})
    );

    let jp = call(
        r,
        "PATCH",
        url,
        Some("application/json-patch+json"),
        r#"[{"op":"remove","path":"/metadata/labels/tier"}]"#,
    )
    .await;
    assert_eq!(jp.json()["metadata"]["labels"], json!({"app":"web"}));
    let failed = call(
        r,
        "PATCH",
        url,
        Some("application/json-patch+json"),
        r#"[{"op":"test","path":"/spec/nodeName","value":"x"}]"#,
    )
    .await;
    assert_eq!(failed.status, StatusCode::UNPROCESSABLE_ENTITY);

    let smp = r#"{"spec":{"$setElementOrder/containers":[{"name":"c"}],"containers":[{"name":"c","image":"nginx:1.27"}]}}"#;
    let s = call(
        r,
        "PATCH",
        url,
        Some("application/strategic-merge-patch+json"),
        smp,
    )
    .await
    .json();
    assert_eq!(s["spec"]["containers"][0]["image"], "nginx:1.27");
    assert_eq!(s["spec"]["containers"][0]["ports"][0]["containerPort"], 80);
    assert_eq!(s["metadata"]["generation"], 2);

    let stale = call(
        r,
        "PATCH",
        url,
        Some("application/merge-patch+json"),
        r#"{"metadata":{"resourceVersion":"1","labels":{"x":"y"}}}"#,
    )
    .await;
    assert_eq!(stale.status, StatusCode::CONFLICT);

    let apply = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fresh\nspec:\n  containers:\n  - name: c\n    image: busybox\n";
    let created = call(
        r,
        "PATCH",
        "/api/v1/namespaces/ns1/pods/fresh?fieldManager=kubectl",
        Some("application/apply-patch+yaml"),
        apply,
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.json()["metadata"]["namespace"], "ns1");
    let no_manager = call(
        r,
        "PATCH",
        "/api/v1/namespaces/ns1/pods/fresh",
        Some("application/apply-patch+yaml"),
        apply,
    )
    .await;
    assert_eq!(no_manager.status, StatusCode::BAD_REQUEST);
    let missing = call(
        r,
        "PATCH",
        "/api/v1/namespaces/ns1/pods/none",
        Some("application/merge-patch+json"),
        "{}",
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn deletes_check_preconditions_and_namespaces_take_their_objects() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    let c = call(
        r,
        "POST",
        "/api/v1/namespaces/ns1/pods",
        JSON,
        &pod("a", "n1"),
    )
    .await
    .json();
    let wrong = json!({"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"not-it"}});
    let resp = call(
        r,
        "DELETE",
        "/api/v1/namespaces/ns1/pods/a",
        JSON,
        &wrong.to_string(),
    )
    .await;
    assert_eq!(resp.status, StatusCode::CONFLICT);
    let right = json!({"preconditions":{"uid":c["metadata"]["uid"],"resourceVersion":c["metadata"]["resourceVersion"]}});
    let resp = call(
        r,
        "DELETE",
        "/api/v1/namespaces/ns1/pods/a",
        JSON,
        &right.to_string(),
    )
    .await;
    assert_eq!(resp.status, StatusCode::OK);
    assert_eq!(resp.json()["metadata"]["name"], "a");
    assert_eq!(
        call(r, "DELETE", "/api/v1/namespaces/ns1/pods/a", None, "")
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    for (n, node) in [("x", "n1"), ("y", "n2"), ("z", "n2")] {
        call(
            r,
            "POST",
            "/api/v1/namespaces/ns1/pods",
            JSON,
            &pod(n, node),
        )
        .await;
    }
    let dc = call(
        r,
        "DELETE",
        "/api/v1/namespaces/ns1/pods?fieldSelector=spec.nodeName%3Dn2",
        None,
        "",
    )
    .await;
    assert_eq!(dc.status, StatusCode::OK);
    assert_eq!(dc.json()["items"].as_array().unwrap().len(), 2);
    let left = call(r, "GET", "/api/v1/namespaces/ns1/pods", None, "")
        .await
        .json();
    assert_eq!(left["items"].as_array().unwrap().len(), 1);

    // A namespace DELETE marks it; emptying it and letting it go is the namespace
    // controller's, which `listwatch-controllers` runs (its tests/namespaces.rs take the
    // objects of a deleted namespace through this router).
    let marked = call(r, "DELETE", "/api/v1/namespaces/ns1", None, "").await;
    assert_eq!(marked.status, StatusCode::OK);
    assert_eq!(marked.json()["status"]["phase"], "Terminating");
}

#[tokio::test]
async fn tables_print_pods_and_printer_columns() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    create_pod(r, "ns1", "a", "n1").await;
    call(
        r,
        "POST",
        "/apis/apps/v1/namespaces/ns1/deployments",
        JSON,
        r#"{"metadata":{"name":"d"},"spec":{"replicas":3}}"#,
    )
    .await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let resp = call_with(
        r,
        "GET",
        "/api/v1/namespaces/ns1/pods?limit=500",
        &[("accept", accept)],
        "",
    )
    .await;
    assert_eq!(resp.headers[header::CONTENT_TYPE], "application/json");
    let table = resp.json();
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
    assert_eq!(table["rows"][0]["cells"][0], "a");
    assert_eq!(table["rows"][0]["cells"][1], "0/1");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    let one = call_with(
        r,
        "GET",
        "/apis/apps/v1/namespaces/ns1/deployments/d",
        &[("accept", accept)],
        "",
    )
    .await
    .json();
    assert_eq!(one["rows"][0]["cells"][1], 3);
    assert_eq!(one["columnDefinitions"][1]["name"], "Replicas");
}

/// Aggregated discovery carries upstream's ETag (quoted SHA-512 hex of the document),
/// `Vary: Accept` and `Cache-Control: public`, and answers a matching `If-None-Match` with
/// 304 and no body (client-go's disk cache revalidates this way); the legacy documents on the
/// same paths carry no ETag.
#[tokio::test]
async fn aggregated_discovery_has_an_etag_and_a_matching_if_none_match_is_304() {
    let t = test_api(Config::default());
    let r = &t.router;
    let agg = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
    for path in ["/api", "/apis"] {
        let first = call_with(r, "GET", path, &[("accept", agg)], "").await;
        assert_eq!(first.status, StatusCode::OK);
        let etag = first.headers[header::ETAG].to_str().unwrap().to_owned();
        assert!(
            etag.len() == 130 && etag.starts_with('"') && etag.ends_with('"'),
            "{etag}"
        );
        assert_eq!(first.headers[header::VARY], "Accept");
        assert_eq!(first.headers[header::CACHE_CONTROL], "public");
        let again = call_with(
            r,
            "GET",
            path,
            &[("accept", agg), ("if-none-match", &etag)],
            "",
        )
        .await;
        assert_eq!(again.status, StatusCode::NOT_MODIFIED, "{path}");
        assert!(again.body.is_empty());
        assert_eq!(again.headers[header::ETAG], etag.as_str());
        let other = call_with(
            r,
            "GET",
            path,
            &[("accept", agg), ("if-none-match", "\"0\"")],
            "",
        )
        .await;
        assert_eq!(other.status, StatusCode::OK);
        assert_eq!(other.body, first.body);
        let legacy = call_with(r, "GET", path, &[("if-none-match", &etag)], "").await;
        assert_eq!(legacy.status, StatusCode::OK);
        assert!(legacy.headers.get(header::ETAG).is_none());
    }
}

#[tokio::test]
async fn discovery_version_and_openapi_are_served() {
    let t = test_api(Config::default());
    let r = &t.router;
    let v = call(r, "GET", "/version?timeout=5s", None, "").await.json();
    assert_eq!(
        (v["major"].as_str(), v["minor"].as_str()),
        (Some("1"), Some("32"))
    );
    let agg =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let core = call_with(r, "GET", "/api?timeout=32s", &[("accept", agg)], "").await;
    assert_eq!(
        core.headers[header::CONTENT_TYPE],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    let resources = &core.json()["items"][0]["versions"][0]["resources"];
    assert!(
        resources
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resource"] == "pods" && r["shortNames"][0] == "po")
    );
    let legacy = call(r, "GET", "/api", None, "").await.json();
    assert_eq!(legacy["versions"], json!(["v1"]));
    let groups = call(r, "GET", "/apis", None, "").await.json();
    assert_eq!(groups["groups"][0]["name"], "apps");
    assert_eq!(
        call(r, "GET", "/apis/apps/v1", None, "").await.json()["resources"][0]["name"],
        "deployments"
    );
    assert_eq!(
        call(r, "GET", "/apis/apps", None, "").await.json()["kind"],
        "APIGroup"
    );
    assert_eq!(
        call(r, "GET", "/apis/nope/v1", None, "").await.status,
        StatusCode::NOT_FOUND
    );
    let idx = call(r, "GET", "/openapi/v3", None, "").await.json();
    let url = idx["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let doc = call(r, "GET", &url, None, "").await.json();
    assert_eq!(doc["openapi"], "3.0.0");
    openapi_v2(r).await;
    assert_eq!(call(r, "GET", "/healthz", None, "").await.body, "ok");
    assert_eq!(
        call(r, "GET", "/readyz", None, "").await.status,
        StatusCode::OK
    );
    call(r, "GET", "/api/v1/pods", None, "").await;
    let metrics = call(r, "GET", "/metrics", None, "").await;
    assert!(String::from_utf8_lossy(&metrics.body).contains("apiserver_request_total"));
}

/// Reads watch frames until `n` arrived or the body ended.
async fn frames(body: Body, n: usize) -> Vec<Value> {
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while out.len() < n {
        let Some(chunk) = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .expect("watch stalled")
        else {
            break;
        };
        buf.extend_from_slice(&chunk.unwrap());
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            out.push(serde_json::from_slice(&line).unwrap());
        }
    }
    out
}

async fn open_watch(r: &Router, uri: &str, accept: Option<&str>) -> axum::response::Response {
    let mut req = Request::builder().uri(uri);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    r.clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn watch_streams_added_modified_deleted_then_ends_at_its_timeout() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    let rv = call(r, "GET", "/api/v1/namespaces/ns1/pods", None, "")
        .await
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = open_watch(
        r,
        &format!("/api/v1/namespaces/ns1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=2"),
        None,
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
    create_pod(r, "ns1", "a", "n1").await;
    call(
        r,
        "PATCH",
        "/api/v1/namespaces/ns1/pods/a",
        Some("application/merge-patch+json"),
        r#"{"metadata":{"labels":{"v":"2"}}}"#,
    )
    .await;
    call(r, "DELETE", "/api/v1/namespaces/ns1/pods/a", None, "").await;
    // Asking for more than will come: the stream must end by itself at its timeout.
    let got = frames(resp.into_body(), 10).await;
    let types: Vec<&str> = got.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
    assert_eq!(got[1]["object"]["metadata"]["labels"]["v"], "2");
}

#[tokio::test]
async fn table_watches_and_single_object_watches_filter_and_print() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    create_pod(r, "ns1", "a", "n1").await;
    create_pod(r, "ns1", "b", "n2").await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let table = open_watch(
        r,
        "/api/v1/namespaces/ns1/pods?watch=1&resourceVersion=0",
        Some(accept),
    )
    .await;
    assert_eq!(table.headers()[header::CONTENT_TYPE], "application/json");
    let got = frames(table.into_body(), 2).await;
    assert_eq!(got[0]["object"]["kind"], "Table");
    let mut names: Vec<&str> = got
        .iter()
        .map(|f| f["object"]["rows"][0]["cells"][0].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b"]);

    let one = open_watch(
        r,
        "/api/v1/watch/namespaces/ns1/pods/b?resourceVersion=0&timeoutSeconds=1",
        None,
    )
    .await;
    let got = frames(one.into_body(), 5).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["object"]["metadata"]["name"], "b");

    let by_node = open_watch(
        r,
        "/api/v1/pods?watch=1&resourceVersion=0&fieldSelector=spec.nodeName%3Dn1&timeoutSeconds=1",
        None,
    )
    .await;
    let got = frames(by_node.into_body(), 5).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["object"]["metadata"]["name"], "a");
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_a_bookmark() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    create_pod(r, "ns1", "a", "n1").await;
    let resp = open_watch(
        r,
        "/api/v1/namespaces/ns1/pods?&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0",
        None,
    )
    .await;
    let got = frames(resp.into_body(), 2).await;
    assert_eq!(got[0]["type"], "ADDED");
    assert_eq!(got[1]["type"], "BOOKMARK");
    assert_eq!(
        got[1]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(got[1]["object"]["kind"], "Pod");
}

#[tokio::test]
async fn watch_limit_is_429_and_shutdown_ends_open_watches() {
    let t = test_api(Config {
        max_watches: 1,
        ..Config::default()
    });
    let r = &t.router;
    let first = open_watch(r, "/api/v1/namespaces?watch=1", None).await;
    assert_eq!(first.status(), StatusCode::OK);
    let second = open_watch(r, "/api/v1/namespaces?watch=1", None).await;
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.headers()[header::RETRY_AFTER], "1");
    t.api.shutdown_handle().shutdown();
    // The open watch ends on its own (its body completes) rather than at its 30-minute timeout.
    let got = frames(first.into_body(), 1).await;
    assert!(got.is_empty());
    assert_eq!(
        call(r, "GET", "/api/v1/namespaces", None, "").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        call(r, "GET", "/readyz", None, "").await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

#[tokio::test]
async fn scale_subresource_reads_and_writes_the_replica_count() {
    let t = test_api(Config::default());
    let r = &t.router;
    create_ns(r, "ns1").await;
    let d =
        r#"{"metadata":{"name":"d"},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"d"}}}}"#;
    call(
        r,
        "POST",
        "/apis/apps/v1/namespaces/ns1/deployments",
        JSON,
        d,
    )
    .await;
    let url = "/apis/apps/v1/namespaces/ns1/deployments/d/scale";
    let scale = call(r, "GET", url, None, "").await.json();
    assert_eq!(
        (scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()),
        (Some("Scale"), Some(2))
    );
    assert_eq!(scale["status"]["selector"], "app=d");
    let patched = call(
        r,
        "PATCH",
        url,
        Some("application/merge-patch+json"),
        r#"{"spec":{"replicas":5}}"#,
    )
    .await;
    assert_eq!(patched.json()["spec"]["replicas"], 5);
    let mut stale = scale.clone();
    stale["spec"]["replicas"] = json!(1);
    let conflict = call(r, "PUT", url, JSON, &stale.to_string()).await;
    assert_eq!(conflict.status, StatusCode::CONFLICT);
    let mut fresh = patched.json();
    fresh["spec"]["replicas"] = json!(0);
    assert_eq!(
        call(r, "PUT", url, JSON, &fresh.to_string()).await.json()["spec"]["replicas"],
        0
    );
    let obj = call(
        r,
        "GET",
        "/apis/apps/v1/namespaces/ns1/deployments/d",
        None,
        "",
    )
    .await
    .json();
    assert_eq!(obj["spec"]["replicas"], 0);
    assert_eq!(obj["spec"]["selector"]["matchLabels"]["app"], "d");
    assert_eq!(
        call(r, "GET", "/api/v1/namespaces/ns1/pods/x/scale", None, "")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let list = call(r, "GET", "/apis/apps/v1", None, "").await.json();
    assert!(
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "deployments/scale" && r["group"] == "autoscaling")
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_past_its_deadline_is_504_and_frees_its_slot() {
    let store: Arc<dyn listwatch_storage::Storage> = Arc::new(StalledGets(MemStore::new()));
    let api = Installer::new(Config {
        max_requests_inflight: 1,
        ..Config::default()
    })
    .resource(
        KindSpec::new("", "v1", "configmaps", "ConfigMap").namespaced(false),
        store,
    )
    .build();
    let r = api.router();
    let slow = call(&r, "GET", "/api/v1/configmaps/a?timeout=5s", None, "").await;
    assert_eq!(slow.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(slow.json()["reason"], "Timeout");
    assert_eq!(slow.headers[header::RETRY_AFTER], "1");
    // The only read-only slot is free again: a list goes through.
    assert_eq!(
        call(&r, "GET", "/api/v1/configmaps", None, "").await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(&r, "GET", "/api/v1/configmaps/a?timeout=never", None, "")
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
}

/// An admission hook with a bug: it panics on the object named `boom`.
struct PanickingAdmission;

impl listwatch_endpoints::admission::Admission for PanickingAdmission {
    fn validate(
        &self,
        request: &listwatch_endpoints::admission::AdmissionRequest<'_>,
    ) -> listwatch_endpoints::ApiResult<()> {
        assert_ne!(request.object["metadata"]["name"], "boom", "admission bug");
        Ok(())
    }
}

#[tokio::test]
async fn a_panic_while_a_write_computes_on_the_pool_is_a_500_and_the_pool_serves_on() {
    let api = Installer::new(Config {
        request_workers: 1,
        ..Config::default()
    })
    .admission(Arc::new(PanickingAdmission))
    .resource(
        KindSpec::new("", "v1", "configmaps", "ConfigMap").namespaced(false),
        Arc::new(MemStore::new()),
    )
    .build();
    assert_eq!(api.request_workers(), 1);
    let r = api.router();
    let boom = call(
        &r,
        "POST",
        "/api/v1/configmaps",
        Some("application/json"),
        r#"{"metadata":{"name":"boom"}}"#,
    )
    .await;
    assert_eq!(boom.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        boom.json()["message"],
        "This request caused apiserver to panic. Look in the logs for details."
    );
    // The pool's one thread survived the panic, and the write's seat came back.
    let ok = call(
        &r,
        "POST",
        "/api/v1/configmaps",
        Some("application/json"),
        r#"{"metadata":{"name":"fine"}}"#,
    )
    .await;
    assert_eq!(ok.status, StatusCode::CREATED, "{:?}", ok.json());
}

/// `/openapi/v2` as kube-openapi serves it: JSON (every `$ref` resolving within its
/// `definitions`, the kinds' GVK extensions kept), protobuf under the dotted media type,
/// an ETag of each encoding's own (issue 28: they shared the JSON's), `-gzip` for a gzipped
/// body, 304 on a match of the encoding asked for, 406 otherwise.
const PB_ACCEPT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

async fn openapi_v2(r: &Router) {
    let v2 = call(r, "GET", "/openapi/v2", None, "").await;
    assert_eq!(v2.status, StatusCode::OK);
    let doc = v2.json();
    assert_eq!(doc["swagger"], "2.0");
    let defs = doc["definitions"].as_object().unwrap();
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r.clone());
                }
                m.values().for_each(|c| refs(c, out));
            }
            Value::Array(a) => a.iter().for_each(|c| refs(c, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in &all {
        let name = r
            .strip_prefix("#/definitions/")
            .unwrap_or_else(|| panic!("{r}"));
        assert!(defs.contains_key(name), "{r} does not resolve");
    }
    assert_eq!(
        defs["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"][0]["kind"],
        "Pod"
    );
    assert!(!doc.to_string().contains("allOf"), "a v3 wrapper was left");
    let etag = v2.headers["etag"].to_str().unwrap().to_owned();
    assert_eq!(v2.headers["content-type"], "application/json");

    let pb = call_with(
        r,
        "GET",
        "/openapi/v2",
        &[(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )],
        "",
    )
    .await;
    assert_eq!(pb.status, StatusCode::OK);
    assert_eq!(
        pb.headers["content-type"],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    let pb_etag = pb.headers["etag"].to_str().unwrap().to_owned();
    assert!(
        pb_etag.len() == 130 && pb_etag.starts_with('"'),
        "{pb_etag}"
    );
    assert_ne!(pb_etag, etag, "each encoding has its own ETag");
    // Document.swagger (field 1, length-delimited) = "2.0".
    assert_eq!(&pb.body[..5], b"\x0a\x032.0");
    // A cache holding both variants revalidates with both ETags: the 304 names the one
    // asked for; the JSON's ETag alone does not validate the protobuf.
    let both_tags = format!("{etag}, {pb_etag}");
    let ask = |tags| [("accept", PB_ACCEPT), ("if-none-match", tags)];
    let both = call_with(r, "GET", "/openapi/v2", &ask(&both_tags), "").await;
    assert_eq!(both.status, StatusCode::NOT_MODIFIED);
    assert_eq!(both.headers["etag"].to_str().unwrap(), pb_etag);
    let json_tag = call_with(r, "GET", "/openapi/v2", &ask(&etag), "").await;
    assert_eq!(json_tag.status, StatusCode::OK);
    assert_eq!(&json_tag.body[..5], b"\x0a\x032.0");
    let again = call_with(r, "GET", "/openapi/v2", &[("if-none-match", &etag)], "").await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    let gz = call_with(r, "GET", "/openapi/v2", &[("accept-encoding", "gzip")], "").await;
    assert_eq!(gz.headers["content-encoding"], "gzip");
    assert_eq!(
        gz.headers["etag"].to_str().unwrap(),
        format!("{}-gzip\"", etag.trim_end_matches('"'))
    );
    let html = call_with(r, "GET", "/openapi/v2", &[("accept", "text/html")], "").await;
    assert_eq!(html.status, StatusCode::NOT_ACCEPTABLE);
}
