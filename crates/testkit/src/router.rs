//! Requests to an in-process axum `Router` (an `Api::router()`), and polling with a
//! deadline: the helpers the router-level tests of endpoints and controllers shared as
//! copies (feature `router`).
//!
//! Invariants: every wait has a deadline ([`eventually`]: 30 s, reached only by a hang); a
//! response body that is not JSON reads as `Value::Null`.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

/// `application/json`.
pub const JSON: &str = "application/json";
/// `application/merge-patch+json`.
pub const MERGE: &str = "application/merge-patch+json";

/// How long [`eventually`] polls.
pub const EVENTUALLY: Duration = Duration::from_secs(30);

/// One request (`ct`: its content type, none when empty): the status and the body as JSON.
///
/// # Panics
/// When the request cannot be built or the body read (a test's own mistake).
#[allow(clippy::unwrap_used)] // test-only
pub async fn call(
    r: &Router,
    method: &str,
    uri: &str,
    ct: &str,
    body: &str,
) -> (StatusCode, Value) {
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

/// Creates namespace `name`.
///
/// # Panics
/// When it is not created (201).
pub async fn create_namespace(r: &Router, name: &str) {
    let body = serde_json::json!({"metadata": {"name": name}}).to_string();
    let (s, v) = call(r, "POST", "/api/v1/namespaces", JSON, &body).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
}

/// Polls `f` every 20 ms until it is true, for at most [`EVENTUALLY`].
///
/// # Panics
/// `timed out: <what>` when the deadline passes.
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + EVENTUALLY;
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
