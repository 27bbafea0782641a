//! The collector's reads and writes. Reads and deletes go through the registry's store of
//! the resource ([`listwatch_registry::Store`], as the API serves it: `Api::store`): a get is
//! a consistent read of the latest state, a delete is the kind's deletion lifecycle with the
//! propagation policy and preconditions a client's DELETE carries (the same lifecycle the
//! API's DELETE handler calls). The metadata edits (finalizers, owner references) are still
//! merge patches through the endpoints' router in process, as the user and User-Agent of
//! upstream's collector, until the registry's store has patch; they follow exactly the rules
//! every client's do (the update that removes the last finalizer removing the object,
//! resourceVersion conflicts).
//!
//! Every call has a deadline ([`CALL_TIMEOUT`]); a write that loses an optimistic-concurrency
//! race is recomputed from a fresh read at most [`MAX_CONFLICTS`] times (then it fails, and
//! the work queue retries the item later with backoff).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, header};
use listwatch_api::{Object, Status};
use listwatch_endpoints::{Api, ClientKey, Resource};
use listwatch_registry::options::{DeleteRequest, Propagation};
use listwatch_registry::{Store, StoreError};
use listwatch_storage::Preconditions;
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
    fn propagation(self) -> Propagation {
        match self {
            Policy::Orphan => Propagation::Orphan,
            Policy::Background => Propagation::Background,
            Policy::Foreground => Propagation::Foreground,
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
    api: Api,
    router: Router,
}

/// Whether `e` is the storage's `NotFound`.
fn not_found(e: &GcError) -> bool {
    matches!(e, GcError::Storage(e) if e.is_not_found())
}

/// Whether `e` is the storage's conflict (a precondition that did not hold).
fn conflict(e: &GcError) -> bool {
    matches!(e, GcError::Storage(e) if e.is_conflict())
}

impl Calls {
    pub(crate) fn new(api: &Api) -> Self {
        Self {
            api: api.clone(),
            router: api.router(),
        }
    }

    /// The registry store of `res`, as the API serves it.
    fn store(&self, res: &Resource) -> Store {
        self.api.store(res)
    }

    /// `e` as the collector reports it: the storage's own error kept (its conflicts and
    /// `NotFound` are decisions), a rejection as the API would answer it.
    fn failed(res: &Resource, what: String, e: StoreError) -> GcError {
        match e {
            StoreError::Storage(e) => GcError::Storage(e),
            StoreError::Rejected(_) => {
                let status = e.to_api_error(&res.info);
                GcError::Api {
                    request: what,
                    code: status.code(),
                    message: status.0.message.clone(),
                }
            }
        }
    }

    /// The live object `name` (in `ns`) of `res`, as JSON.
    pub(crate) async fn get(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, GcError> {
        let what = || format!("GET {}", object_path(&res.info, ns, name));
        let found = tokio::time::timeout(CALL_TIMEOUT, self.store(res).get(ns, name))
            .await
            .map_err(|_| GcError::Timeout(what()))?
            .map_err(|e| Self::failed(res, what(), e))?;
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
        let rv = at.map(|d| d.resource_version.as_str());
        match self.send_delete(res, ns, name, uid, rv, policy).await {
            Ok(()) => Ok(()),
            Err(e) if not_found(&e) => Ok(()),
            Err(lost) if conflict(&lost) => {
                let Some(d) = at else {
                    return Err(lost);
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
                    match self.send_delete(res, ns, name, uid, None, policy).await {
                        Ok(()) => Ok(()),
                        Err(e) if not_found(&e) => Ok(()),
                        Err(e) => Err(e),
                    }
                } else {
                    Err(lost)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// One delete of the object with these preconditions, through the registry's store (the
    /// kind's lifecycle, as the API's DELETE). A namespace deleted wakes the namespace
    /// controller, as a DELETE of one on the API does.
    async fn send_delete(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        uid: &str,
        resource_version: Option<&str>,
        policy: Policy,
    ) -> Result<(), GcError> {
        let what = || format!("DELETE {}", object_path(&res.info, ns, name));
        let resource_version = match resource_version.filter(|rv| !rv.is_empty()) {
            // As the API's DELETE options parse it: a version that is not one is a 400.
            Some(rv) => Some(listwatch_api::rv::parse(rv).map_err(|e| GcError::Api {
                request: what(),
                code: 400,
                message: e.to_string(),
            })?),
            None => None,
        };
        let opts = DeleteRequest {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version,
            }),
            propagation: Some(policy.propagation()),
            ..DeleteRequest::default()
        };
        tokio::time::timeout(CALL_TIMEOUT, self.store(res).delete(ns, name, &opts))
            .await
            .map_err(|_| GcError::Timeout(what()))?
            .map_err(|e| Self::failed(res, what(), e))?;
        if res.info.group.is_empty() && res.info.plural == "namespaces" {
            self.api.namespace_deletions().notify_one();
        }
        Ok(())
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
                Ok(()) | Err(GcError::Api { code: 404, .. }) => return Ok(()),
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
