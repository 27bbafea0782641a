//! Flow control through the router: bodies are read before a seat is taken, a client
//! flooding the seats or the watches gets 429s while another client is served, and request
//! bodies in memory stay within their budget. Clients are told apart by the `ClientKey`
//! request extension, as the connection layer sets it. Paused clock: deadlines are exact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use bytes::Bytes;
use common::StalledGets;
use futures::StreamExt;
use listwatch_endpoints::{ClientKey, Config, Installer, KindSpec};
use listwatch_memstore::MemStore;
use tower::ServiceExt;

fn client(n: u8) -> ClientKey {
    ClientKey::address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)))
}

/// Cluster-scoped configmaps (no namespace to create first) over `store`.
fn router(config: Config, store: Arc<dyn listwatch_storage::Storage>) -> Router {
    Installer::new(config)
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap").namespaced(false),
            store,
        )
        .build()
        .router()
}

async fn send(
    r: &Router,
    who: &ClientKey,
    method: &str,
    uri: &str,
    body: Body,
) -> (StatusCode, Bytes, axum::http::HeaderMap) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap();
    req.extensions_mut().insert(who.clone());
    let resp = r.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, bytes, headers)
}

fn configmap(name: &str) -> Body {
    Body::from(format!(r#"{{"metadata":{{"name":"{name}"}}}}"#))
}

/// A body that sends `first` and then nothing, ever.
fn stalled_body(first: &'static [u8]) -> Body {
    Body::from_stream(
        futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from_static(first)) })
            .chain(futures::stream::pending()),
    )
}

#[tokio::test(start_paused = true)]
async fn a_slow_body_holds_no_seat_and_is_408_at_the_deadline() {
    let r = router(
        Config {
            max_mutating_requests_inflight: 1,
            request_timeout: Duration::from_secs(10),
            // The clock is paused: a handler on the compute pool's runtime would leave
            // this one idle, and its clock would jump to the deadline.
            request_workers: 0,
            ..Config::default()
        },
        Arc::new(MemStore::new()),
    );
    let slow = tokio::spawn({
        let r = r.clone();
        async move {
            send(
                &r,
                &client(1),
                "POST",
                "/api/v1/configmaps",
                stalled_body(br#"{"metadata":"#),
            )
            .await
        }
    });
    tokio::task::yield_now().await;
    // The only mutating seat is free while that body trickles: another client writes.
    let (code, body, _) = send(&r, &client(2), "POST", "/api/v1/configmaps", configmap("a")).await;
    assert_eq!(code, StatusCode::CREATED, "{body:?}");
    let (code, body, headers) = slow.await.unwrap();
    assert_eq!(code, StatusCode::REQUEST_TIMEOUT, "{body:?}");
    let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(headers[header::CONNECTION], "close");
}

#[tokio::test(start_paused = true)]
async fn a_client_flooding_the_seats_gets_429_while_another_is_served_first() {
    let r = router(
        Config {
            max_requests_inflight: 1,
            max_queued_requests_per_client: 2,
            ..Config::default()
        },
        Arc::new(StalledGets(MemStore::new())),
    );
    let (a, b) = (client(1), client(2));
    let get = |who: &ClientKey, uri: &'static str| {
        let (r, who) = (r.clone(), who.clone());
        tokio::spawn(async move { send(&r, &who, "GET", uri, Body::empty()).await })
    };
    // a holds the only seat for 5 s, and queues two more (whose own deadlines are long).
    let a1 = get(&a, "/api/v1/configmaps/x?timeout=5s");
    tokio::task::yield_now().await;
    let a2 = get(&a, "/api/v1/configmaps/x");
    let a3 = get(&a, "/api/v1/configmaps/x");
    tokio::task::yield_now().await;
    // A third waiting request of a is refused at once.
    let (code, _, headers) = send(&r, &a, "GET", "/api/v1/configmaps/x", Body::empty()).await;
    assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers[header::RETRY_AFTER], "1");
    // The queue (room for 2) is full of a's: b takes the place of a's newest...
    let b1 = get(&b, "/api/v1/configmaps");
    assert_eq!(a3.await.unwrap().0, StatusCode::TOO_MANY_REQUESTS);
    // ...and is seated before a's older one when a's seat frees: it holds no seat and was
    // never served.
    assert_eq!(a1.await.unwrap().0, StatusCode::GATEWAY_TIMEOUT);
    let (code, body, _) = b1.await.unwrap();
    assert_eq!(code, StatusCode::OK, "{body:?}");
    assert!(!a2.is_finished(), "a2 is seated after b");
    assert_eq!(a2.await.unwrap().0, StatusCode::GATEWAY_TIMEOUT);
}

#[tokio::test]
async fn a_client_over_its_watch_cap_gets_429_and_another_still_watches() {
    let r = router(
        Config {
            max_watches_per_client: 2,
            ..Config::default()
        },
        Arc::new(MemStore::new()),
    );
    let (a, b) = (client(1), client(2));
    let open = |who: &ClientKey| {
        let mut req = Request::builder()
            .uri("/api/v1/configmaps?watch=1")
            .body(Body::empty())
            .unwrap();
        req.extensions_mut().insert(who.clone());
        r.clone().oneshot(req)
    };
    let w1 = open(&a).await.unwrap();
    let w2 = open(&a).await.unwrap();
    assert_eq!((w1.status(), w2.status()), (StatusCode::OK, StatusCode::OK));
    let refused = open(&a).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(open(&b).await.unwrap().status(), StatusCode::OK);
    // A closed watch frees its client's slot.
    drop(w1);
    assert_eq!(open(&a).await.unwrap().status(), StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn bodies_in_memory_stay_within_their_budget() {
    let r = router(
        Config {
            max_buffered_body_bytes: 64,
            request_timeout: Duration::from_secs(10),
            // The clock is paused: a handler on the compute pool's runtime would leave
            // this one idle, and its clock would jump to the deadline.
            request_workers: 0,
            ..Config::default()
        },
        Arc::new(MemStore::new()),
    );
    // 40 bytes held by a body that never ends...
    let slow = tokio::spawn({
        let r = r.clone();
        async move {
            send(
                &r,
                &client(1),
                "POST",
                "/api/v1/configmaps",
                stalled_body(br#"{"metadata":{"name":"slow"},"data":{"#),
            )
            .await
        }
    });
    tokio::task::yield_now().await;
    // ...leave no room for another 40.
    let body = r#"{"metadata":{"name":"fits-once-freed"}}"#;
    assert!(body.len() > 64 - 37);
    let (code, _, _) = send(
        &r,
        &client(2),
        "POST",
        "/api/v1/configmaps",
        Body::from(body),
    )
    .await;
    assert_eq!(code, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(slow.await.unwrap().0, StatusCode::REQUEST_TIMEOUT);
    let (code, _, _) = send(
        &r,
        &client(2),
        "POST",
        "/api/v1/configmaps",
        Body::from(body),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED);
}
