//! Kinds added and removed at run time (`Api::add_resource`, `Api::remove_resource`) while
//! requests run: the served kind appears in and leaves discovery (read with curl over a real
//! socket) and OpenAPI, requests on it get 404 once removed, its open watch ends cleanly, and
//! list/watch/create on the other kinds carry on without an error throughout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::StreamExt;
use listwatch_endpoints::{Config, Installer, KindSpec, NameValidation};
use listwatch_memstore::MemStore;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Generous: only to turn a hang into a failure.
const DEADLINE: Duration = Duration::from_secs(60);

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

async fn call(
    router: &Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let resp = tokio::time::timeout(DEADLINE, router.clone().oneshot(req.body(body).unwrap()))
        .await
        .expect("request deadline")
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

/// `curl` of `path` on the served socket, with `accept`: status and body.
async fn curl(addr: std::net::SocketAddr, path: &str, accept: &str) -> (u16, Value) {
    let (accept, url) = (format!("Accept: {accept}"), format!("http://{addr}{path}"));
    // curl's own --max-time is the deadline.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "30",
                "-H",
                &accept,
                "-w",
                "\n%{http_code}",
                &url,
            ])
            .output()
    })
    .await
    .unwrap()
    .expect("curl runs");
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (
        code.parse().unwrap(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn group_names(groups: &Value) -> Vec<String> {
    groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_owned())
        .collect()
}

fn aggregated_names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["metadata"]["name"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn widgets() -> KindSpec {
    KindSpec::new("example.com", "v1", "widgets", "Widget")
        .custom_resource(None)
        .storage_resource("widgets.example.com")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_added_and_removed_while_requests_run() {
    let store: Arc<dyn listwatch_storage::Storage> = Arc::new(MemStore::new());
    let api = Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label),
            Arc::clone(&store),
        )
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap"),
            Arc::clone(&store),
        )
        .build();
    let router = api.router();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = router.clone();
    tokio::spawn(async move { axum::serve(listener, served).await });
    let (st, _) = call(
        &router,
        "POST",
        "/api/v1/namespaces",
        Some(json!({"metadata": {"name": "a"}})),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED);

    // Requests on another kind run throughout: creates, lists and a watch.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..2 {
        let (r, stop, done) = (router.clone(), Arc::clone(&stop), Arc::clone(&done));
        workers.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) || i < 5 {
                let cm = json!({"metadata": {"name": format!("cm-{w}-{i}")}});
                let (st, body) =
                    call(&r, "POST", "/api/v1/namespaces/a/configmaps", Some(cm)).await;
                assert_eq!(st, StatusCode::CREATED, "{body}");
                let (st, body) = call(&r, "GET", "/api/v1/namespaces/a/configmaps", None).await;
                assert_eq!(st, StatusCode::OK, "{body}");
                i += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            i
        }));
    }
    let cm_watch = router
        .clone()
        .oneshot(
            Request::get("/api/v1/namespaces/a/configmaps?watch=true")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(cm_watch.status(), StatusCode::OK);
    let mut cm_events = cm_watch.into_body().into_data_stream();

    // Added: served, in discovery and OpenAPI.
    let (st, _) = call(
        &router,
        "GET",
        "/apis/example.com/v1/namespaces/a/widgets",
        None,
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "not served yet");
    let generation = api.add_resource(widgets(), Arc::clone(&store));
    assert!(generation >= 1);
    let (code, groups) = curl(addr, "/apis", "application/json").await;
    assert_eq!(code, 200);
    assert!(
        group_names(&groups).contains(&"example.com".to_owned()),
        "{groups}"
    );
    let (code, list) = curl(addr, "/apis/example.com/v1", "application/json").await;
    assert_eq!(
        (code, list["resources"][0]["name"].as_str()),
        (200, Some("widgets")),
        "{list}"
    );
    let (code, agg) = curl(addr, "/apis", AGGREGATED).await;
    assert_eq!(code, 200);
    assert!(
        aggregated_names(&agg).contains(&"example.com".to_owned()),
        "{agg}"
    );
    let (code, index) = curl(addr, "/openapi/v3", "application/json").await;
    assert_eq!(code, 200);
    assert!(
        index["paths"].get("apis/example.com/v1").is_some(),
        "{index}"
    );

    let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"x": 1}});
    let (st, body) = call(
        &router,
        "POST",
        "/apis/example.com/v1/namespaces/a/widgets",
        Some(w),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let watch = router
        .clone()
        .oneshot(
            Request::get("/apis/example.com/v1/namespaces/a/widgets?watch=true")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(watch.status(), StatusCode::OK);
    let mut events = watch.into_body().into_data_stream();
    let first = tokio::time::timeout(DEADLINE, events.next())
        .await
        .expect("the widget's ADDED event")
        .unwrap()
        .unwrap();
    let first: Value = serde_json::from_slice(&first).unwrap();
    assert_eq!(
        (
            first["type"].as_str(),
            first["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("w1"))
    );

    // Removed: the open watch ends, requests get 404, discovery and OpenAPI drop it.
    let (_, removed) = api.remove_resource("example.com", "v1", "widgets").unwrap();
    assert_eq!(removed.info.kind, "Widget");
    let rest = tokio::time::timeout(DEADLINE, async {
        let mut rest = Vec::new();
        while let Some(chunk) = events.next().await {
            rest.push(chunk.expect("the watch ends cleanly, not with a body error"));
        }
        rest
    })
    .await
    .expect("the watch on the removed kind ends");
    assert!(rest.is_empty(), "no event after the removal: {rest:?}");
    for (method, uri, body) in [
        ("GET", "/apis/example.com/v1/namespaces/a/widgets", None),
        ("GET", "/apis/example.com/v1/namespaces/a/widgets/w1", None),
        (
            "GET",
            "/apis/example.com/v1/namespaces/a/widgets?watch=true",
            None,
        ),
        (
            "POST",
            "/apis/example.com/v1/namespaces/a/widgets",
            Some(json!({"metadata": {"name": "w2"}})),
        ),
        (
            "DELETE",
            "/apis/example.com/v1/namespaces/a/widgets/w1",
            None,
        ),
    ] {
        let (st, body) = call(&router, method, uri, body).await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{method} {uri}: {body}");
    }
    let (code, groups) = curl(addr, "/apis", "application/json").await;
    assert_eq!(code, 200);
    assert!(
        !group_names(&groups).contains(&"example.com".to_owned()),
        "{groups}"
    );
    let (code, _) = curl(addr, "/apis/example.com/v1", "application/json").await;
    assert_eq!(code, 404);
    let (_, agg) = curl(addr, "/apis", AGGREGATED).await;
    assert!(
        !aggregated_names(&agg).contains(&"example.com".to_owned()),
        "{agg}"
    );
    let (_, index) = curl(addr, "/openapi/v3", "application/json").await;
    assert!(
        index["paths"].get("apis/example.com/v1").is_none(),
        "{index}"
    );
    assert!(api.remove_resource("example.com", "v1", "widgets").is_err());

    // The other kind was served throughout, and its watch is still open and delivering.
    stop.store(true, Ordering::Relaxed);
    let mut created = 0;
    for w in workers {
        created += tokio::time::timeout(DEADLINE, w)
            .await
            .expect("workers end")
            .unwrap();
    }
    assert!(created >= 10);
    let cm = json!({"metadata": {"name": "after"}});
    let (st, _) = call(&router, "POST", "/api/v1/namespaces/a/configmaps", Some(cm)).await;
    assert_eq!(st, StatusCode::CREATED);
    let mut seen = 0;
    let mut buf = Vec::new();
    while seen <= created {
        let chunk = tokio::time::timeout(DEADLINE, cm_events.next())
            .await
            .expect("config map events keep coming")
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk);
        seen = buf.iter().filter(|b| **b == b'\n').count();
    }
    assert!(String::from_utf8_lossy(&buf).contains("\"after\""));
    let _ = done.load(Ordering::Relaxed);
}
