//! The collector's reads and writes, all through the registry's store of the resource
//! ([`listwatch_registry::Store`], as the API serves it: `Api::store`), never through HTTP:
//! a get is a consistent read of the latest state; a delete is the kind's deletion lifecycle
//! with the propagation policy and preconditions a client's DELETE carries (the same
//! lifecycle the API's DELETE handler calls); a metadata edit (finalizers, owner references)
//! is [`Store::patch`] with a JSON merge patch of the metadata carrying the resourceVersion
//! read (upstream's `removeFinalizer`, and the merge-patch forms of its owner-reference
//! edits, pkg/controller/garbagecollector/patch.go), with the uid of the object decided on
//! as a precondition, recorded in managedFields as an Update by [`MANAGER`]. A patch
//! follows exactly the rules every client's does (the update that removes the last
//! finalizer removing the object, resourceVersion conflicts).
//!
//! Invariants: every call has a deadline ([`CALL_TIMEOUT`]); a write that loses an
//! optimistic-concurrency race is recomputed from a fresh read at most [`MAX_CONFLICTS`]
//! times (then it fails, and the work queue retries the item later with backoff); a write
//! never touches an object with another uid than the one decided on.

use std::time::Duration;

use listwatch_api::Object;
use listwatch_endpoints::{Api, Resource};
use listwatch_registry::options::{DeleteRequest, Propagation};
use listwatch_registry::patch::Patch;
use listwatch_registry::{PatchOptions, Store, StoreError};
use listwatch_storage::Preconditions;
use serde_json::{Value, json};

use crate::gc::GcError;
use crate::gc::catalog::object_path;
use crate::gc::meta::OwnerRef;

/// The longest one read or write may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a write is recomputed after a conflict before the item is retried later.
pub(crate) const MAX_CONFLICTS: usize = 5;
/// The manager the collector's writes are recorded under in managedFields: upstream's
/// collector runs in `kube-controller-manager`, whose client's User-Agent names it.
pub(crate) const MANAGER: &str = "kube-controller-manager";

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
}

/// Whether `e` is the storage's `NotFound`.
fn not_found(e: &GcError) -> bool {
    matches!(e, GcError::Storage(e) if e.is_not_found())
}

/// Whether `e` is the storage's conflict (a precondition that did not hold).
fn conflict(e: &GcError) -> bool {
    matches!(e, GcError::Storage(e) if e.is_conflict())
}

/// Whether `e` is a `NotFound`, from storage or as the registry refused the write.
fn gone(e: &GcError) -> bool {
    not_found(e) || matches!(e, GcError::Api { code: 404, .. })
}

/// Whether `e` is an optimistic-concurrency conflict, from storage or from the registry.
fn lost_race(e: &GcError) -> bool {
    conflict(e) || matches!(e, GcError::Api { code: 409, .. })
}

impl Calls {
    pub(crate) fn new(api: &Api) -> Self {
        Self { api: api.clone() }
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
    /// `None`: nothing to change) as a JSON merge patch conditional on the resourceVersion
    /// read and on `uid`, through the registry's store as [`MANAGER`], recomputed after a
    /// conflict. `Ok` when done, unneeded, or the object (with `uid`) is gone.
    pub(crate) async fn edit_metadata(
        &self,
        res: &Resource,
        ns: Option<&str>,
        name: &str,
        uid: &str,
        edit: impl Fn(&serde_json::Map<String, Value>) -> Option<Value>,
    ) -> Result<(), GcError> {
        let what = || format!("PATCH {}", object_path(&res.info, ns, name));
        let opts = PatchOptions {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..PatchOptions::by(MANAGER)
        };
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
            let patch = Patch::Merge(json!({"metadata": patch}));
            let sent =
                tokio::time::timeout(CALL_TIMEOUT, self.store(res).patch(ns, name, &patch, &opts))
                    .await
                    .map_err(|_| GcError::Timeout(what()))?
                    .map_err(|e| Self::failed(res, what(), e));
            match sent {
                Ok(_) => return Ok(()),
                Err(e) if gone(&e) => return Ok(()),
                // A uid that no longer holds is an object recreated under the name: not
                // the one decided on, left alone (the read above sees it).
                Err(e) if lost_race(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Err(GcError::Conflicts(what()))
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
}
