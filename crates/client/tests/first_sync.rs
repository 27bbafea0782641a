//! `wait_until_synced` against servers whose first list never succeeds (rtcl2 M1, M2): an
//! answer that is not a list of the type fails the wait at once (`SyncError::Fatal`), as a
//! 403 does; transient failures (refused connections, 5xx) are waited through, and
//! `wait_until_synced_within` bounds that wait (`SyncError::TimedOut`). Against a scripted
//! server (`scripted/`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod scripted;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use listwatch_client::{
    Api, HttpClient, HttpConfig, Informer, InformerConfig, InformerError, SyncError,
};
use scripted::{Reply, pod, pod_list, scripted};

fn informer(url: &str) -> Informer<Pod> {
    let client = HttpClient::new(HttpConfig::new(url).unwrap()).unwrap();
    Informer::spawn(Api::<Pod>::all(client), InformerConfig::default())
}

/// The reason of a fatal wait, as text.
fn fatal_reason(wait: Result<Result<(), SyncError>, tokio::time::error::Elapsed>) -> String {
    match wait {
        Ok(Err(SyncError::Fatal(InformerError::Reflector(e)))) => e.to_string(),
        other => panic!("wait_until_synced did not fail fatally: {other:?}"),
    }
}

/// One object of the first list does not decode into the type (the server holds it, so
/// every retry gets it again): the wait fails at the first such list instead of hanging.
#[tokio::test]
async fn an_undecodable_object_in_the_first_list_fails_the_wait_for_sync() {
    let (url, _log) = scripted(|_, target, _| {
        if target.contains("watch=") {
            Reply::Watch(vec![])
        } else {
            Reply::Body(200, pod_list(10, &[pod("a", 5, "\"n\""), pod("b", 5, "7")]))
        }
    })
    .await;
    let informer = informer(&url);
    let wait = tokio::time::timeout(Duration::from_secs(20), informer.wait_until_synced()).await;
    let reason = fatal_reason(wait);
    assert!(reason.contains("ns/b"), "{reason}");
}

/// A wrong URL: a web server answering HTML to everything, labelled JSON.
#[tokio::test]
async fn a_server_answering_html_as_json_fails_the_wait_for_sync() {
    let (url, _log) =
        scripted(|_, _, _| Reply::Body(200, "<html><body>Welcome to nginx!</body></html>".into()))
            .await;
    let informer = informer(&url);
    let wait = tokio::time::timeout(Duration::from_secs(20), informer.wait_until_synced()).await;
    fatal_reason(wait);
}

/// A wrong URL answering `text/html`: the error says so.
#[tokio::test]
async fn a_server_answering_text_html_fails_the_wait_for_sync_and_says_why() {
    let (url, _log) = scripted(|_, _, _| {
        Reply::Typed(
            200,
            "text/html; charset=utf-8",
            "<html><body>Welcome to nginx!</body></html>".into(),
        )
    })
    .await;
    let informer = informer(&url);
    let wait = tokio::time::timeout(Duration::from_secs(20), informer.wait_until_synced()).await;
    let reason = fatal_reason(wait);
    assert!(reason.contains("text/html"), "{reason}");
}

/// A server that keeps answering 503: retriable, so not fatal; the bounded wait ends with
/// `TimedOut` instead of hanging.
#[tokio::test]
async fn a_bounded_wait_ends_against_a_server_answering_503() {
    let (url, log) = scripted(|_, _, _| {
        Reply::Body(
            503,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":503,"reason":"ServiceUnavailable"}"#.into(),
        )
    })
    .await;
    let informer = informer(&url);
    let wait = informer
        .wait_until_synced_within(Duration::from_secs(2))
        .await;
    assert!(
        matches!(wait, Err(SyncError::TimedOut(d)) if d == Duration::from_secs(2)),
        "{wait:?}"
    );
    assert!(!log.lock().unwrap().is_empty(), "the server was asked");
}

/// Refused connections (nothing listens): the bounded wait ends with `TimedOut`.
#[tokio::test]
async fn a_bounded_wait_ends_against_refused_connections() {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let informer = informer(&url);
    let wait = informer
        .wait_until_synced_within(Duration::from_secs(2))
        .await;
    assert!(matches!(wait, Err(SyncError::TimedOut(_))), "{wait:?}");
}
