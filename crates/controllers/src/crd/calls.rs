//! The CRD controller's writes of CRDs: JSON merge patches through the registry's store of
//! the CRD kind as the API serves it ([`listwatch_endpoints::Api::store`], never HTTP),
//! recorded in managedFields as an Update by [`MANAGER`] (the server's own manager), so they
//! follow the CRD kind's rules exactly (its `/status` strategy, the update that removes the
//! last finalizer removing the object, resourceVersion conflicts).
//!
//! Every call has a deadline ([`CALL_TIMEOUT`]); every write is conditional on the
//! resourceVersion it was computed from (the caller recomputes after a conflict); a refusal
//! is reported as the API would answer it ([`CrdError::Api`], a conflict with code 409).

use std::time::Duration;

use listwatch_endpoints::Api;
use listwatch_kinds::crd;
use listwatch_registry::PatchOptions;
use listwatch_registry::patch::Patch;
use listwatch_registry::write::Subresource;
use serde_json::{Value, json};

use super::CrdError;

/// The longest one write may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The manager the controller's writes are recorded under in managedFields: upstream's
/// apiextensions controllers run in `kube-apiserver`, whose loopback client's User-Agent
/// names it.
pub(crate) const MANAGER: &str = "kube-apiserver";

const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// The in-process API of the controller.
#[derive(Clone)]
pub(crate) struct Calls {
    api: Api,
}

impl Calls {
    pub(crate) fn new(api: &Api) -> Self {
        Self { api: api.clone() }
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
        self.patch(name, Subresource::Status, body).await
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
        self.patch(name, Subresource::Main, body).await
    }

    /// One merge patch of the CRD `name` through `subresource`.
    async fn patch(
        &self,
        name: &str,
        subresource: Subresource,
        body: Value,
    ) -> Result<(), CrdError> {
        let suffix = if subresource == Subresource::Status {
            "/status"
        } else {
            ""
        };
        let what = || format!("PATCH {CRDS}/{name}{suffix}");
        let Some(res) = self
            .api
            .resources()
            .get(crd::GROUP, crd::VERSION, "customresourcedefinitions")
            .cloned()
        else {
            return Err(CrdError::Api {
                code: 404,
                message: format!("{}: the CRD kind is not served", what()),
            });
        };
        let opts = PatchOptions {
            subresource,
            ..PatchOptions::by(MANAGER)
        };
        let patch = Patch::Merge(body);
        let store = self.api.store(&res);
        let sent = tokio::time::timeout(CALL_TIMEOUT, store.patch(None, name, &patch, &opts))
            .await
            .map_err(|_| CrdError::Timeout(what()))?;
        match sent {
            Ok(_) => Ok(()),
            Err(e) => {
                let status = e.to_api_error(&res.info);
                Err(CrdError::Api {
                    code: status.code(),
                    message: format!("{}: {}", what(), status.0.message),
                })
            }
        }
    }
}
