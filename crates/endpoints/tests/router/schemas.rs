//! The schemas through the router: the OpenAPI v3 documents and their caching, strategic
//! merge reading patch strategies from them, and custom resources (their declared schema
//! served, strategic merge refused).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use listwatch_endpoints::{Config, Installer, KindSpec, ScaleSubresource};
use listwatch_memstore::MemStore;
use serde_json::{Value, json};
use tower::ServiceExt;

fn router() -> Router {
    let s: Arc<dyn listwatch_storage::Storage> = Arc::new(MemStore::new());
    let widget_schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "description": "What a widget is.",
        "properties": {"color": {"type": "string", "description": "The widget's colour."},
                       "tags": {"type": "array", "items": {"type": "string"}}}}}});
    Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace").namespaced(false),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "nodes", "Node").namespaced(false),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "pods", "Pod").status_subresource(true),
            s.clone(),
        )
        .resource(
            KindSpec::new("apps", "v1", "deployments", "Deployment")
                .status_subresource(true)
                .scale(ScaleSubresource::replicas().label_selector("spec.selector")),
            s.clone(),
        )
        .resource(
            KindSpec::new("example.com", "v1", "widgets", "Widget")
                .custom_resource(Some(widget_schema))
                .storage_resource("widgets.example.com"),
            s,
        )
        .build()
        .router()
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

    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
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

const JSON: (&str, &str) = ("content-type", "application/json");
const SMP: (&str, &str) = ("content-type", "application/strategic-merge-patch+json");

#[tokio::test]
async fn openapi_documents_are_served_and_cached_as_kube_openapi_serves_them() {
    let r = &router();
    let index = call(r, "GET", "/openapi/v3", &[], "").await;
    assert_eq!(index.status, StatusCode::OK);
    let etag = index.header("etag").to_owned();
    assert!(etag.len() == 130 && etag.starts_with('"'), "{etag}");
    let again = call(r, "GET", "/openapi/v3", &[("if-none-match", &etag)], "").await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    assert!(again.body.is_empty());

    let idx = index.json();
    let url = idx["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_owned();
    let hash = url.split_once("?hash=").unwrap().1.to_owned();
    let doc = call(r, "GET", &url, &[("accept", "application/json")], "").await;
    assert_eq!(doc.status, StatusCode::OK);
    assert_eq!(doc.header("cache-control"), "public, immutable");
    assert!(doc.header("expires").ends_with(" GMT"));
    assert_eq!(doc.header("etag"), format!("\"{hash}\""));
    assert_eq!(doc.header("vary"), "Accept");
    let v = doc.json();
    let pod = &v["components"]["schemas"]["io.k8s.api.core.v1.Pod"];
    assert_eq!(pod["x-kubernetes-group-version-kind"][0]["kind"], "Pod");
    let container = &v["components"]["schemas"]["io.k8s.api.core.v1.Container"]["properties"];
    assert!(
        container["image"]["description"]
            .as_str()
            .unwrap()
            .contains("Container image name")
    );
    assert_eq!(
        container["ports"]["x-kubernetes-list-map-keys"],
        json!(["containerPort", "protocol"])
    );
    assert!(
        v["components"]["schemas"]
            .get("io.k8s.api.apps.v1.Deployment")
            .is_none()
    );

    // Without the hash: served, not immutable. A stale hash: moved to the current one.
    let plain = call(r, "GET", "/openapi/v3/api/v1", &[], "").await;
    assert_eq!(plain.status, StatusCode::OK);
    assert_eq!(plain.header("cache-control"), "");
    assert_eq!(plain.body, doc.body);
    let stale = call(r, "GET", "/openapi/v3/api/v1?hash=0BAD", &[], "").await;
    assert_eq!(stale.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(stale.header("location"), url);
    let cached = call(
        r,
        "GET",
        &url,
        &[("if-none-match", &format!("\"{hash}\""))],
        "",
    )
    .await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    // Protobuf is not served; JSON is when also accepted.
    let pb = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf";
    assert_eq!(
        call(r, "GET", &url, &[("accept", pb)], "").await.status,
        StatusCode::NOT_ACCEPTABLE
    );
    let either = call(
        r,
        "GET",
        &url,
        &[("accept", &format!("{pb}, application/json"))],
        "",
    )
    .await;
    assert_eq!(either.status, StatusCode::OK);
    assert_eq!(
        call(r, "GET", "/openapi/v3/apis/nope/v1", &[], "")
            .await
            .status,
        StatusCode::NOT_FOUND
    );

    // The custom resource's document holds its declared schema and its list.
    let wurl = idx["paths"]["apis/example.com/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let w = call(r, "GET", wurl, &[], "").await.json();
    let widget = &w["components"]["schemas"]["com.example.v1.Widget"];
    assert_eq!(
        widget["properties"]["spec"]["properties"]["color"]["description"],
        "The widget's colour."
    );
    assert!(
        w["components"]["schemas"]
            .get("com.example.v1.WidgetList")
            .is_some()
    );
    let list = &w["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets"]["get"];
    assert_eq!(
        list["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/com.example.v1.WidgetList"
    );
}

async fn create(r: &Router, path: &str, body: Value) -> Value {
    let resp = call(r, "POST", path, &[JSON], &body.to_string()).await;
    assert_eq!(resp.status, StatusCode::CREATED, "{:?}", resp.body);
    resp.json()
}

#[tokio::test]
async fn strategic_merge_reads_patch_strategies_from_the_schema() {
    let r = &router();
    create(r, "/api/v1/namespaces", json!({"metadata": {"name": "ns"}})).await;
    create(
        r,
        "/api/v1/nodes",
        json!({"metadata": {"name": "n1"}, "spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}}),
    )
    .await;
    // Node taints are atomic upstream (the old table merged them by key).
    let node = call(
        r,
        "PATCH",
        "/api/v1/nodes/n1",
        &[SMP],
        r#"{"spec":{"taints":[{"key":"b","effect":"NoExecute"}]}}"#,
    )
    .await;
    assert_eq!(node.status, StatusCode::OK, "{:?}", node.body);
    assert_eq!(
        node.json()["spec"]["taints"],
        json!([{"key": "b", "effect": "NoExecute"}])
    );
    create(
        r,
        "/api/v1/namespaces/ns/pods",
        json!({"metadata": {"name": "p"}, "spec": {
            "containers": [{"name": "a", "image": "x"}],
            "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}}),
    )
    .await;
    let pod = call(
        r,
        "PATCH",
        "/api/v1/namespaces/ns/pods/p",
        &[SMP],
        r#"{"spec":{"topologySpreadConstraints":[{"topologyKey":"host","maxSkew":2,"whenUnsatisfiable":"ScheduleAnyway"}]}}"#,
    )
    .await;
    assert_eq!(pod.status, StatusCode::OK, "{:?}", pod.body);
    let tsc = pod.json()["spec"]["topologySpreadConstraints"].clone();
    assert_eq!(
        tsc.as_array().unwrap().len(),
        2,
        "merged by topologyKey: {tsc}"
    );
    // A malformed directive is 400 (as upstream), an item without its key 422.
    let bad = call(
        r,
        "PATCH",
        "/api/v1/namespaces/ns/pods/p",
        &[SMP],
        r#"{"spec":{"$retainKeys":["containers"],"nodeName":"n1"}}"#,
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["message"], "invalid patch format of retainKeys");
    let keyless = call(
        r,
        "PATCH",
        "/api/v1/namespaces/ns/pods/p",
        &[SMP],
        r#"{"spec":{"containers":[{"image":"y"}]}}"#,
    )
    .await;
    assert_eq!(keyless.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        keyless.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("does not contain declared merge key: name")
    );
    // Through /scale, the Scale's schema.
    create(
        r,
        "/apis/apps/v1/namespaces/ns/deployments",
        json!({"metadata": {"name": "d"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    )
    .await;
    let scaled = call(
        r,
        "PATCH",
        "/apis/apps/v1/namespaces/ns/deployments/d/scale",
        &[SMP],
        r#"{"spec":{"replicas":3}}"#,
    )
    .await;
    assert_eq!(scaled.status, StatusCode::OK, "{:?}", scaled.body);
    assert_eq!(scaled.json()["spec"]["replicas"], 3);
}

#[tokio::test]
async fn custom_resources_refuse_strategic_merge_with_upstreams_415() {
    let r = &router();
    create(r, "/api/v1/namespaces", json!({"metadata": {"name": "ns"}})).await;
    create(
        r,
        "/apis/example.com/v1/namespaces/ns/widgets",
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"color": "red", "tags": ["a"]}}),
    )
    .await;
    let path = "/apis/example.com/v1/namespaces/ns/widgets/w";
    let smp = call(r, "PATCH", path, &[SMP], r#"{"spec":{"color":"blue"}}"#).await;
    assert_eq!(smp.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let status = smp.json();
    assert_eq!(status["reason"], "UnsupportedMediaType");
    assert_eq!(
        status["message"],
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
    let merged = call(
        r,
        "PATCH",
        path,
        &[("content-type", "application/merge-patch+json")],
        r#"{"spec":{"color":"blue"}}"#,
    )
    .await;
    assert_eq!(merged.status, StatusCode::OK);
    assert_eq!(
        merged.json()["spec"],
        json!({"color": "blue", "tags": ["a"]})
    );
    // A built-in resource's 415 lists strategic merge too.
    let pod = call(
        r,
        "PATCH",
        "/api/v1/namespaces/ns/pods/p",
        &[("content-type", "application/xml")],
        "<x/>",
    )
    .await;
    assert_eq!(pod.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(
        pod.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("application/strategic-merge-patch+json, application/apply-patch+yaml")
    );
}
