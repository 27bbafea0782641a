//! The collector's reads and writes. Reads go to the resource's storage (a consistent read
//! of the latest state); writes are requests through the endpoints' router, in process, so
//! they follow exactly the rules every client's do (a DELETE's propagation policy and
//! preconditions, the update that removes the last finalizer removing the object,
//! resourceVersion conflicts), as upstream's collector uses the API server.
//!
//! Every call has a deadline ([`CALL_TIMEOUT`]); a write that loses an optimistic-concurrency
//! race is recomputed from a fresh read at most [`MAX_CONFLICTS`] times (then it fails, and
//! the work queue retries the item later with backoff).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use listwatch_api::{Object, Status};
use listwatch_endpoints::{ClientKey, Resource};
use listwatch_storage::{GetOptions, Key};
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::gc::GcError;
use crate::gc::catalog::object_path;
use crate::gc::meta::OwnerRef;

/// The longest one read or write may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a write is recomputed after a conflict before the item is retried later.
pub(crate) const MAX_CONFLICTS: usize = 5;
/// The largest response body read.
const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;
/// The user the collector's requests are flow-controlled as (upstream's service account).
pub(crate) const USER: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
/// The User-Agent of the collector's requests, shaped as upstream's controller clients
/// send it (`<binary>/<version> ... /<service account>`, client-go's `AddUserAgent`): its
/// writes are recorded in managedFields under the part before the first `/`,
/// `kube-controller-manager`, the manager upstream's collector writes as.
pub(crate) const USER_AGENT: &str = concat!(
    "kube-controller-manager/v",
    env!("CARGO_PKG_VERSION"),
    " (listwatch) system:serviceaccount:kube-system:generic-garbage-collector"
);

/// How a DELETE propagates to the deleted object's own dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    Orphan,
    Background,
    Foreground,
}

impl Policy {
    fn as_str(self) -> &'static str {
        match self {
            Policy::Orphan => "Orphan",
            Policy::Background => "Background",
            Policy::Foreground => "Foreground",
        }
    }
}

/// What a decision to delete was made on: the object's resourceVersion and its owner
/// references (as stored, compared whole as upstream's `reflect.DeepEqual`).
#[derive(Debug, Clone)]
pub(crate) struct Decided {
    pub(crate) resource_version: String,
    pub(crate) owner_references: Value,
}

/// The in-process API of the collector.
#[derive(Clone)]
pub(crate) struct Calls {
    router: Router,
}

impl Calls {
    pub(crate) fn new(router: Router) -> Self {
        Self { router }
    }

    /// The live object `name` (in `ns`) of `res`, as JSON.
    pub(crate) async fn get(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, GcError> {
        let ns = ns.filter(|_| res.info.namespaced);
        let key = Key::object(&res.info.storage_resource, ns, name)?;
        let opts = GetOptions {
            resource_version: None,
            ignore_not_found: true,
        };
        let found = tokio::time::timeout(CALL_TIMEOUT, res.storage.get(&key, &opts))
            .await
            .map_err(|_| GcError::Timeout(format!("GET {key}")))??;
        found
            .as_ref()
            .map(Object::to_value)
            .transpose()
            .map_err(|e| GcError::Decode(e.to_string()))
    }

    /// DELETE with a propagation policy, on condition that the object is still the one
    /// decided on: its uid, and (with `at`) the resourceVersion the decision read. `Ok` also
    /// when the object is already gone.
    ///
    /// Upstream's `deleteObject` (pkg/controller/garbagecollector/operations.go, kubernetes
    /// #132632): a conflict on the resourceVersion re-reads the object; when only its
    /// resourceVersion moved and its owner references are what the decision saw, the DELETE
    /// is sent again with the uid precondition alone (unrelated updates must not starve the
    /// collector); when the owner references changed (an object re-parented between the
    /// decision and the DELETE), the conflict is returned, and the item is decided again.
    pub(crate) async fn delete(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        uid: &str,
        at: Option<&Decided>,
        policy: Policy,
    ) -> Result<(), GcError> {
        let path = object_path(&res.info, ns, name);
        let rv = at.map(|d| d.resource_version.as_str());
        match self.send_delete(&path, uid, rv, policy).await {
            Ok(()) | Err(GcError::Api { code: 404, .. }) => Ok(()),
            Err(conflict @ GcError::Api { code: 409, .. }) => {
                let Some(d) = at else {
                    return Err(conflict);
                };
                let Some(live) = self.get(res, ns, name).await? else {
                    return Ok(());
                };
                let meta = live.get("metadata");
                let same_uid = meta.and_then(|m| m.get("uid")).and_then(Value::as_str) == Some(uid);
                let moved = meta
                    .and_then(|m| m.get("resourceVersion"))
                    .and_then(Value::as_str)
                    != Some(d.resource_version.as_str());
                let owners = meta
                    .and_then(|m| m.get("ownerReferences"))
                    .unwrap_or(&Value::Null);
                if same_uid && moved && *owners == d.owner_references {
                    match self.send_delete(&path, uid, None, policy).await {
                        Ok(()) | Err(GcError::Api { code: 404, .. }) => Ok(()),
                        Err(e) => Err(e),
                    }
                } else {
                    Err(conflict)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// One DELETE of `path` with these preconditions.
    async fn send_delete(
        &self,
        path: &str,
        uid: &str,
        resource_version: Option<&str>,
        policy: Policy,
    ) -> Result<(), GcError> {
        let mut preconditions = json!({"uid": uid});
        if let Some(rv) = resource_version.filter(|rv| !rv.is_empty()) {
            preconditions["resourceVersion"] = json!(rv);
        }
        let body = json!({
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": preconditions,
            "propagationPolicy": policy.as_str(),
        });
        self.call(Method::DELETE, path, Some(body)).await
    }

    /// Rewrites the object's metadata with `edit` (applied to the live object's metadata;
    /// `None`: nothing to change) as a merge patch conditional on the resourceVersion read,
    /// recomputed after a conflict. `Ok` when done, unneeded, or the object (with `uid`) is
    /// gone.
    pub(crate) async fn edit_metadata(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        uid: &str,
        edit: impl Fn(&serde_json::Map<String, Value>) -> Option<Value>,
    ) -> Result<(), GcError> {
        let path = object_path(&res.info, ns, name);
        for _ in 0..MAX_CONFLICTS {
            let Some(live) = self.get(res, ns, name).await? else {
                return Ok(());
            };
            let Some(meta) = live.get("metadata").and_then(Value::as_object) else {
                return Ok(());
            };
            if meta.get("uid").and_then(Value::as_str) != Some(uid) {
                return Ok(());
            }
            let Some(mut patch) = edit(meta) else {
                return Ok(());
            };
            if let Some(m) = patch.as_object_mut() {
                m.insert(
                    "resourceVersion".into(),
                    meta.get("resourceVersion").cloned().unwrap_or(Value::Null),
                );
            }
            match self
                .call(Method::PATCH, &path, Some(json!({"metadata": patch})))
                .await
            {
                Ok(_) | Err(GcError::Api { code: 404, .. }) => return Ok(()),
                Err(GcError::Api { code: 409, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Err(GcError::Conflicts(format!("PATCH {path}")))
    }

    /// Removes `finalizer` from the object (upstream's `removeFinalizer`).
    pub(crate) async fn remove_finalizer(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        uid: &str,
        finalizer: &str,
    ) -> Result<(), GcError> {
        self.edit_metadata(res, ns, name, uid, |m| {
            let list = m.get("finalizers").and_then(Value::as_array)?;
            if !list.iter().any(|f| f.as_str() == Some(finalizer)) {
                return None;
            }
            let rest: Vec<Value> = list
                .iter()
                .filter(|f| f.as_str() != Some(finalizer))
                .cloned()
                .collect();
            Some(json!({"finalizers": rest}))
        })
        .await
    }

    /// Removes the owner references to any of `owners` (uids) from the object.
    pub(crate) async fn remove_owner_refs(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        uid: &str,
        owners: &[String],
    ) -> Result<(), GcError> {
        self.edit_metadata(res, ns, name, uid, |m| {
            let refs = m.get("ownerReferences").and_then(Value::as_array)?;
            let names_owner = |r: &Value| {
                r.get("uid")
                    .and_then(Value::as_str)
                    .is_some_and(|u| owners.iter().any(|o| o == u))
            };
            if !refs.iter().any(names_owner) {
                return None;
            }
            let rest: Vec<Value> = refs.iter().filter(|r| !names_owner(r)).cloned().collect();
            Some(if rest.is_empty() {
                json!({"ownerReferences": null})
            } else {
                json!({"ownerReferences": rest})
            })
        })
        .await
    }

    /// Sets `blockOwnerDeletion: false` on every blocking owner reference of the object
    /// (upstream's `unblockOwnerReferences`), so that an owner deleted in the foreground does
    /// not wait for it.
    pub(crate) async fn unblock_owner_refs(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        uid: &str,
    ) -> Result<(), GcError> {
        self.edit_metadata(res, ns, name, uid, |m| {
            let refs = m.get("ownerReferences").and_then(Value::as_array)?;
            let blocking =
                |r: &Value| OwnerRef::from_value(r).is_some_and(|o| o.block_owner_deletion);
            if !refs.iter().any(blocking) {
                return None;
            }
            let unblocked: Vec<Value> = refs
                .iter()
                .map(|r| {
                    let mut r = r.clone();
                    if blocking(&r)
                        && let Some(o) = r.as_object_mut()
                    {
                        o.insert("blockOwnerDeletion".into(), Value::Bool(false));
                    }
                    r
                })
                .collect();
            Some(json!({"ownerReferences": unblocked}))
        })
        .await
    }

    /// One request through the router, as the collector's user: `Ok` for a 2xx answer.
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Result<(), GcError> {
        let what = || format!("{method} {path}");
        let content_type = if method == Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, USER_AGENT);
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, content_type);
        }
        let mut req = req
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .map_err(|e| GcError::Request(format!("{}: {e}", what())))?;
        req.extensions_mut().insert(ClientKey::user(USER));
        let resp = tokio::time::timeout(CALL_TIMEOUT, self.router.clone().oneshot(req))
            .await
            .map_err(|_| GcError::Timeout(what()))?
            .map_err(|e| GcError::Request(format!("{}: {e}", what())))?;
        let code = resp.status();
        let bytes = tokio::time::timeout(
            CALL_TIMEOUT,
            axum::body::to_bytes(resp.into_body(), MAX_RESPONSE_BYTES),
        )
        .await
        .map_err(|_| GcError::Timeout(what()))?
        .map_err(|e| GcError::Request(format!("{}: {e}", what())))?;
        if code.is_success() {
            return Ok(());
        }
        let message = serde_json::from_slice::<Status>(&bytes)
            .map(|s| s.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        Err(GcError::Api {
            request: what(),
            code: code.as_u16(),
            message,
        })
    }
}
