//! The example controller of listwatch-client (`examples/configmap_per_namespace.rs`: a
//! ConfigMap per namespace, built on `WorkQueue`, `Controller`, informers and `HttpClient`)
//! end to end against the built server: it creates the ConfigMaps, follows new namespaces,
//! restores an edited ConfigMap, recreates a deleted one, and shuts down with a drain.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

#[path = "../../../client/examples/configmap_per_namespace.rs"]
#[allow(dead_code, unreachable_pub)]
mod example;

use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http};
use listwatch_client::HttpConfig;
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");

async fn call(addr: &str, method: &'static str, path: String, body: String) -> common::Response {
    let addr = addr.to_owned();
    tokio::task::spawn_blocking(move || http(&addr, method, &path, &[JSON], body.as_bytes()))
        .await
        .unwrap()
}

/// The ConfigMap's data in `ns`, when it exists.
async fn data(server: &Server, ns: &str) -> Option<serde_json::Value> {
    let r = call(
        &server.addr,
        "GET",
        format!("/api/v1/namespaces/{ns}/configmaps/{}", example::NAME),
        String::new(),
    )
    .await;
    (r.status == 200).then(|| r.json()["data"].clone())
}

async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_controller_keeps_a_configmap_in_every_namespace() {
    let server = Server::start(&[]);
    for ns in ["a", "b"] {
        let r = call(
            &server.addr,
            "POST",
            "/api/v1/namespaces".into(),
            json!({"metadata":{"name":ns}}).to_string(),
        )
        .await;
        assert_eq!(r.status, 201);
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(example::run(
        HttpConfig::new(server.url.clone()).unwrap(),
        "hello".into(),
        2,
        async move {
            stopped.await.ok();
        },
    ));
    let want = |ns: &str| json!({"namespace": ns, "message": "hello"});

    // Every namespace, the server's own included.
    let all = call(
        &server.addr,
        "GET",
        "/api/v1/namespaces".into(),
        String::new(),
    )
    .await
    .json();
    let names: Vec<String> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(names.len() >= 3, "{names:?}");
    for ns in &names {
        until(&format!("a ConfigMap in {ns}"), async || {
            data(&server, ns).await == Some(want(ns))
        })
        .await;
    }

    // A new namespace gets one.
    call(
        &server.addr,
        "POST",
        "/api/v1/namespaces".into(),
        json!({"metadata":{"name":"c"}}).to_string(),
    )
    .await;
    until("a ConfigMap in c", async || {
        data(&server, "c").await == Some(want("c"))
    })
    .await;

    // An edit is undone.
    let current = call(
        &server.addr,
        "GET",
        format!("/api/v1/namespaces/b/configmaps/{}", example::NAME),
        String::new(),
    )
    .await
    .json();
    let mut edited = current.clone();
    edited["data"]["message"] = "edited by hand".into();
    let r = call(
        &server.addr,
        "PUT",
        format!("/api/v1/namespaces/b/configmaps/{}", example::NAME),
        edited.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    until("the replace undone", async || {
        data(&server, "b").await == Some(want("b"))
    })
    .await;

    // A deletion is undone.
    let r = call(
        &server.addr,
        "DELETE",
        format!("/api/v1/namespaces/b/configmaps/{}", example::NAME),
        String::new(),
    )
    .await;
    assert_eq!(r.status, 200);
    until("b's ConfigMap recreated", async || {
        data(&server, "b").await == Some(want("b"))
    })
    .await;

    stop.send(()).unwrap();
    let drained = tokio::time::timeout(PATIENCE, run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(drained, "the reconciles in flight finished");
}
