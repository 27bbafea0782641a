//! The last line of defence: a panic while a request is handled becomes a 500 `Status` and
//! an error log line, never a dropped connection.
//!
//! No handler is meant to panic (caller-controlled input is never indexed or sliced
//! unchecked, and unwrap/expect are lints); this layer, installed where the router is built,
//! keeps a bug from turning into an empty reply. It covers producing the response; a panic
//! inside a watch stream already under way ends that stream (its headers are sent).

use std::panic::AssertUnwindSafe;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use futures::FutureExt;

use crate::ErrorResponse;
use crate::error::ApiError;

/// Upstream's answer to a handler panic (`WithPanicRecovery`).
pub(crate) const PANIC_MESSAGE: &str =
    "This request caused apiserver to panic. Look in the logs for details.";

/// Runs the rest of the stack, turning a panic into a 500.
pub(crate) async fn catch_panics(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(resp) => resp,
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(%method, path, panic = what, "request handler panicked");
            ApiError::internal(PANIC_MESSAGE).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    async fn boom() -> &'static str {
        panic!("bug")
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_with_a_status() {
        let app = Router::new()
            .route("/boom", get(boom))
            .route("/ok", get(|| async { "fine" }))
            .layer(axum::middleware::from_fn(catch_panics));
        let resp = app
            .clone()
            .oneshot(Request::get("/boom").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), 500);
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (
                v["kind"].as_str(),
                v["reason"].as_str(),
                v["message"].as_str()
            ),
            (Some("Status"), Some("InternalError"), Some(PANIC_MESSAGE))
        );
        let resp = app
            .oneshot(Request::get("/ok").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
}
