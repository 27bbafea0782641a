//! Create-only virtual resources that the embedding server routes itself (the access
//! reviews, `SelfSubjectReview`, a service account's `token` subresource): nothing is
//! stored, but their requests cost the same as any write — a body to hold, work to do —
//! so they go through this API's flow control exactly as a create does.
//!
//! Invariants (the same as every write of [`crate::handlers`]):
//! - the request is admitted to its client's mutating flow before its body is read (429
//!   when the flow's queue is full);
//! - its body is read with the request-body cap (413), into the body-memory budget as its
//!   bytes arrive (429 when spent), and within the request's deadline (`--request-timeout`,
//!   shortened by a `timeout` parameter): 408 and `Connection: close` past it;
//! - the handler runs on a mutating seat, until the same deadline (504 past it);
//! - requests are counted in `apiserver_request_total` as `POST` on their resource.

use std::future::Future;

use axum::http::{HeaderMap, HeaderValue, header, request::Parts};
use axum::response::Response;
use bytes::Bytes;
use tokio::time::Instant;

use crate::ErrorResponse;
use crate::error::ApiResult;
use crate::flowcontrol::{ClientKey, Exempt};
use crate::handlers::Admission;
use crate::query::Query;
use crate::{Api, ApiError};

impl Api {
    /// Serves one request of a create-only virtual resource named `resource` (its plural,
    /// for metrics) through flow control: `serve` gets the request's head and its body,
    /// read within the limits the module docs list, and runs on a mutating seat until the
    /// request's deadline, on the API's request compute pool (see
    /// [`Config::request_workers`](crate::Config::request_workers)).
    pub async fn virtual_create<F, Fut>(
        &self,
        resource: &str,
        req: axum::extract::Request,
        serve: F,
    ) -> Response
    where
        F: FnOnce(Parts, Bytes) -> Fut,
        Fut: Future<Output = ApiResult<Response>> + Send + 'static,
    {
        let started = Instant::now();
        let shared = &self.shared;
        if shared.shutting_down() {
            return ApiError::shutting_down().into_response();
        }
        let (parts, body) = req.into_parts();
        let client = parts
            .extensions
            .get::<ClientKey>()
            .cloned()
            .unwrap_or(ClientKey::Unidentified);
        let query = Query::parse(parts.uri.query());
        let headers: HeaderMap = parts.headers.clone();
        let admission = Admission {
            shared,
            headers: &headers,
            query: &query,
            client: &client,
            exempt: parts.extensions.get::<Exempt>().is_some(),
            body: Some(body),
            started,
            compute: true,
            width: 1,
        };
        let result = admission.serve(|bytes| serve(parts, bytes)).await;
        let resp = match result {
            Ok(r) => r,
            Err(e) => {
                let unread_body = e.code() == 408;
                let mut resp = e.into_response();
                if unread_body {
                    // The rest of the body may still come: this connection cannot be reused.
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                resp
            }
        };
        let code = resp.status().as_u16();
        shared.metrics.observe(
            "POST",
            resource,
            code,
            Some(started.elapsed().as_secs_f64()),
        );
        resp
    }
}
