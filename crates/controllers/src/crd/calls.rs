//! The CRD controller's writes of CRDs: requests through the endpoints' router in process, as
//! the server's own manager (`kube-apiserver` in managedFields), so they follow the CRD
//! kind's rules exactly (its `/status` strategy, the update that removes the last finalizer
//! removing the object, resourceVersion conflicts).
//!
//! Every call has a deadline ([`CALL_TIMEOUT`]); every write is conditional on the
//! resourceVersion it was computed from (the caller recomputes after a conflict).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use listwatch_endpoints::ClientKey;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::CrdError;

/// The longest one write may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest response body read.
const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// The user the controller's requests are flow-controlled as.
const USER: &str = "system:apiserver";
/// The User-Agent of its requests: managedFields record them under `kube-apiserver`.
const USER_AGENT: &str = concat!(
    "kube-apiserver/v",
    env!("CARGO_PKG_VERSION"),
    " (listwatch)"
);

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// The in-process API of the controller.
#[derive(Clone)]
pub(crate) struct Calls {
    router: Router,
}

impl Calls {
    pub(crate) fn new(router: Router) -> Self {
        Self { router }
    }

    /// Replaces the CRD's status with `status`, on condition that it is still at
    /// `resource_version`.
    pub(crate) async fn put_status(
        &self,
        name: &str,
        resource_version: &str,
        status: &Value,
    ) -> Result<(), CrdError> {
        let body = json!({"metadata": {"resourceVersion": resource_version}, "status": status});
        self.call(
            Method::PATCH,
            &format!("{CRDS}/{name}/status?fieldManager=kube-apiserver"),
            body,
        )
        .await
    }

    /// Sets the CRD's finalizers to `finalizers`, on condition that it is still at
    /// `resource_version` (the last one removed from a deleted CRD removes it).
    pub(crate) async fn put_finalizers(
        &self,
        name: &str,
        resource_version: &str,
        finalizers: Vec<Value>,
    ) -> Result<(), CrdError> {
        let body =
            json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}});
        self.call(
            Method::PATCH,
            &format!("{CRDS}/{name}?fieldManager=kube-apiserver"),
            body,
        )
        .await
    }

    /// One merge patch through the router: `Ok` for a 2xx answer.
    async fn call(&self, method: Method, path: &str, body: Value) -> Result<(), CrdError> {
        let what = || format!("{method} {path}");
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, USER_AGENT)
            .header(header::CONTENT_TYPE, "application/merge-patch+json")
            .body(Body::from(body.to_string()))
            .map_err(|e| CrdError::Request(format!("{}: {e}", what())))?;
        req.extensions_mut().insert(ClientKey::user(USER));
        let resp = tokio::time::timeout(CALL_TIMEOUT, self.router.clone().oneshot(req))
            .await
            .map_err(|_| CrdError::Timeout(what()))?
            .map_err(|e| CrdError::Request(format!("{}: {e}", what())))?;
        let code = resp.status().as_u16();
        if resp.status().is_success() {
            return Ok(());
        }
        let bytes = axum::body::to_bytes(resp.into_body(), MAX_RESPONSE_BYTES)
            .await
            .unwrap_or_default();
        let message = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        Err(CrdError::Api {
            code,
            message: format!("{}: {message}", what()),
        })
    }
}
