//! Object deletion lifecycle, as upstream's generic registry store does it: grace periods
//! (pods), finalizers that hold a deleted object, the garbage collector's `orphan` and
//! `foregroundDeletion` finalizers from a DELETE's propagation policy, and the update that
//! removes the last finalizer removing the object from storage. Namespaces add their own
//! hold: a deleted namespace turns `Terminating` and stays until the namespace controller
//! has emptied it and removed the `kubernetes` finalizer from `spec.finalizers`.
//!
//! This module owns every decision about *whether* a DELETE or an update removes an object;
//! the handlers only route requests here. What one DELETE does to one object is [`plan`]'s
//! pure function; [`delete`] carries it out. Invariants:
//! - an object that a DELETE must keep (finalizers after the DELETE's own, a pending grace
//!   period, a namespace that is not finalized) is never removed by it: it is written marked
//!   (see [`plan`]) and returned; a removal is always conditional on the state it removes
//!   (checked by storage on that very state, or by uid and resourceVersion of what the
//!   DELETE wrote), so a finalizer added concurrently is never skipped;
//! - a deletionTimestamp once set never goes away, and only a DELETE moves it (earlier, by
//!   shortening a pod's grace period); updates keep it and `deletionGracePeriodSeconds`
//!   (see `validation::prepare_update`), and no finalizer can be added while it is set (422,
//!   as upstream's `ValidateNoNewFinalizers`);
//! - an update whose result is deleting, free of finalizers and not in a grace period
//!   (`deletionGracePeriodSeconds` 0 or unset, upstream's `shouldDeleteDuringUpdate`)
//!   removes the object instead of writing it, on condition that the object is still the one
//!   the update was computed from (uid and resourceVersion preconditions; on a conflict the
//!   update is recomputed);
//! - preconditions (uid, resourceVersion) of a DELETE are checked on every write it makes
//!   (409 Conflict); `dryRun=All` writes nothing and answers what would have happened;
//! - a namespace's `spec.finalizers` change only through `PUT .../finalize` (the namespace
//!   controller's removal of `kubernetes` writes storage directly): other updates keep them.
//!
//! Nothing here ends a grace period by default: upstream a kubelet finishes a pod's graceful
//! deletion with a DELETE of grace 0; without one, a client must (or the pod stays, as on a
//! cluster whose node is gone). [`kubelet`] sends that DELETE itself when the config asks for
//! it (`Config::acknowledge_pod_deletion`, for test environments): [`delete`] follows every
//! DELETE that leaves a pod in its grace period with it.

pub mod kubelet;
pub mod plan;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use listwatch_api::Object;
use listwatch_storage::{Error as StorageError, GetOptions, Key, Preconditions, Storage, Updated};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::clock;
use crate::error::{ApiError, ApiResult, FieldError};
use crate::options::DeleteRequest;
use listwatch_kinds::KindSpec;

pub use kubelet::{Kubelet, acknowledge_once, waits_for_kubelet};
pub use plan::{DEFAULT_POD_GRACE_SECONDS, Plan};

/// The garbage collector's finalizer that orphans an object's dependents.
pub const FINALIZER_ORPHAN: &str = "orphan";
/// The garbage collector's finalizer that holds an object until its blocking dependents
/// are gone.
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// How often a DELETE or an update-that-deletes recomputes after losing a race to another
/// writer before it answers 409.
const MAX_ATTEMPTS: usize = 16;

/// Whether `info` is the core `namespaces` resource.
pub fn is_namespaces(info: &KindSpec) -> bool {
    info.group.is_empty() && info.plural == "namespaces"
}

#[derive(Debug, Default, Deserialize)]
struct Head {
    #[serde(default)]
    metadata: HeadMeta,
    #[serde(default)]
    spec: Option<HeadSpec>,
}

#[derive(Debug, Default, Deserialize)]
struct HeadMeta {
    #[serde(default, rename = "deletionTimestamp")]
    deletion_timestamp: Option<Value>,
    #[serde(default, rename = "deletionGracePeriodSeconds")]
    deletion_grace_period_seconds: Option<Value>,
    #[serde(default)]
    finalizers: Option<Vec<Value>>,
}

#[derive(Debug, Default, Deserialize)]
struct HeadSpec {
    #[serde(default)]
    finalizers: Option<Vec<Value>>,
}

/// The lifecycle-relevant part of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.finalizers` is not empty.
    pub finalizers: bool,
    /// `spec.finalizers` is not empty (namespaces).
    pub spec_finalizers: bool,
    /// `metadata.deletionGracePeriodSeconds` is above 0: a graceful deletion is pending.
    pub grace_pending: bool,
}

impl State {
    /// Reads the state of a stored object; one that does not decode counts as free.
    pub fn of(obj: &Object) -> Self {
        let h: Head = obj.deserialize().unwrap_or_default();
        Self {
            deleting: h.metadata.deletion_timestamp.is_some_and(|t| !t.is_null()),
            finalizers: h.metadata.finalizers.is_some_and(|f| !f.is_empty()),
            spec_finalizers: h
                .spec
                .and_then(|s| s.finalizers)
                .is_some_and(|f| !f.is_empty()),
            grace_pending: h
                .metadata
                .deletion_grace_period_seconds
                .and_then(|g| g.as_i64())
                .is_some_and(|g| g != 0),
        }
    }

    /// Whether the object is being deleted and nothing holds it any more: it must not be
    /// written again but removed (upstream's `shouldDeleteDuringUpdate`: no finalizers left,
    /// and no grace period pending).
    pub fn finalized(self, namespace: bool) -> bool {
        let held = self.finalizers || self.grace_pending || (namespace && self.spec_finalizers);
        self.deleting && !held
    }
}

/// What a DELETE did.
#[derive(Debug)]
pub enum Deletion {
    /// The object is gone; its last state.
    Gone(Object),
    /// The object stays, marked as being deleted; its current state.
    Pending(Object),
}

/// The map at `obj[k]`, made an empty map when missing or not a map (`None` never happens).
fn obj_entry<'a>(obj: &'a mut Map<String, Value>, k: &str) -> Option<&'a mut Map<String, Value>> {
    if !obj.get(k).is_some_and(Value::is_object) {
        obj.insert(k.into(), Value::Object(Map::new()));
    }
    obj.get_mut(k).and_then(Value::as_object_mut)
}

/// `v` as the object to write at `key`: without its resourceVersion, encoded.
fn encode(info: &KindSpec, mut v: Value) -> Result<Object, StorageError> {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    Object::from_value(v, &info.selectable_fields)
        .map_err(|e| StorageError::internal(format!("marked object does not encode: {e}")))
}

/// The plan of a DELETE with `opts` of the stored object `o`, now.
fn plan_of(info: &KindSpec, o: &Object, opts: &DeleteRequest) -> Result<Plan, StorageError> {
    let v = o
        .to_value()
        .map_err(|e| StorageError::internal(format!("stored object does not decode: {e}")))?;
    Ok(plan::plan(info, &v, opts, clock::now_unix()))
}

/// Whether a DELETE with `opts` of `o` (a stored object, as listed) would write nothing and
/// keep it: already marked and held, nothing to change. The namespace controller skips
/// such DELETEs of what it finds held pass after pass (a DELETE would read, decode and plan
/// the object twice to come to the same). An object changed since it was listed is seen by
/// the next pass.
pub fn delete_changes_nothing(info: &KindSpec, o: &Object, opts: &DeleteRequest) -> bool {
    let Ok(v) = o.to_value() else {
        return false;
    };
    match plan::plan(info, &v, opts, clock::now_unix()) {
        Plan::Pending => true,
        Plan::Write {
            object,
            then_remove: false,
        } => object == v,
        _ => false,
    }
}

/// Deletes the object at `key` as upstream's registry does (see [`plan`]): removed at once
/// when nothing needs writing first; else written as the plan says, then removed (grace 0,
/// no finalizers) or kept — see the module invariants. A pod left in its grace period is
/// then acknowledged as its kubelet would when `kubelet` says so ([`kubelet`]): the answer
/// is then the pod's state after that.
pub async fn delete(
    storage: &dyn Storage,
    info: &KindSpec,
    key: &Key,
    opts: &DeleteRequest,
    kubelet: Kubelet,
) -> Result<Deletion, StorageError> {
    Ok(match delete_as_asked(storage, info, key, opts).await? {
        Deletion::Pending(marked) if kubelet.acknowledges(info, opts, &marked) => {
            kubelet::acknowledge(storage, info, key, marked).await
        }
        done => done,
    })
}

/// [`delete`] without a kubelet's acknowledgement: what the DELETE itself does.
async fn delete_as_asked(
    storage: &dyn Storage,
    info: &KindSpec,
    key: &Key,
    opts: &DeleteRequest,
) -> Result<Deletion, StorageError> {
    let preconditions = opts.preconditions.as_ref();
    if opts.dry_run {
        let cur = storage
            .get(key, &GetOptions::default())
            .await?
            .ok_or_else(|| key.not_found())?;
        if let Some(p) = preconditions {
            p.check(key, &cur)?;
        }
        let rv = cur.resource_version();
        return Ok(match plan_of(info, &cur, opts)? {
            Plan::Remove => Deletion::Gone(cur),
            Plan::Pending => Deletion::Pending(cur),
            Plan::Write {
                object,
                then_remove,
            } => {
                let o = encode(info, object)?.with_resource_version(rv);
                if then_remove {
                    Deletion::Gone(o)
                } else {
                    Deletion::Pending(o)
                }
            }
        });
    }
    for _ in 0..MAX_ATTEMPTS {
        // Remove, on condition that nothing needs writing first (checked by storage on the
        // very state it removes).
        let held = AtomicBool::new(false);
        let validate = |o: &Object| match plan_of(info, o, opts)? {
            Plan::Remove => Ok(()),
            _ => {
                held.store(true, Ordering::Relaxed);
                Err(key.conflict("the object is held"))
            }
        };
        match storage.delete(key, preconditions, &validate, None).await {
            Ok(o) => return Ok(Deletion::Gone(o)),
            Err(_) if held.load(Ordering::Relaxed) => {}
            Err(e) => return Err(e),
        }
        // Held: write what the plan says, on condition that it still says so.
        let freed = AtomicBool::new(false);
        let then_remove = AtomicBool::new(false);
        let mut update = |cur: Option<&Object>| -> listwatch_storage::Result<Updated> {
            freed.store(false, Ordering::Relaxed);
            then_remove.store(false, Ordering::Relaxed);
            let cur = cur.ok_or_else(|| key.not_found())?;
            match plan_of(info, cur, opts)? {
                Plan::Remove => {
                    freed.store(true, Ordering::Relaxed);
                    Err(key.conflict("the object is no longer held"))
                }
                // Unchanged: storage writes nothing.
                Plan::Pending => Ok(cur.clone().into()),
                Plan::Write {
                    object,
                    then_remove: remove,
                } => {
                    then_remove.store(remove, Ordering::Relaxed);
                    Ok(encode(info, object)?.into())
                }
            }
        };
        let written = match storage
            .guaranteed_update(key, preconditions, false, &mut update, None)
            .await
        {
            Ok(o) => o,
            Err(_) if freed.load(Ordering::Relaxed) => continue,
            Err(e) => return Err(e),
        };
        if !then_remove.load(Ordering::Relaxed) {
            return Ok(Deletion::Pending(written));
        }
        // Grace 0 and no finalizers: remove what was just written, if it is still that.
        let exact = Preconditions {
            uid: written.uid().map(str::to_owned),
            resource_version: Some(written.resource_version()),
        };
        match storage
            .delete(key, Some(&exact), listwatch_storage::no_validation(), None)
            .await
        {
            Ok(o) => return Ok(Deletion::Gone(o)),
            // Another writer removed it first (upstream tolerates the race the same way).
            Err(e) if e.is_not_found() => return Ok(Deletion::Gone(written)),
            Err(e) if e.is_conflict() => {}
            Err(e) => return Err(e),
        }
    }
    Err(key.conflict("the object kept changing while it was being deleted; please try again"))
}

/// On create: a namespace's `spec.finalizers` hold `kubernetes` (appended when missing, as
/// upstream's namespace strategy), so that only the namespace controller lets it go; they
/// are validated, and the namespace carries its `kubernetes.io/metadata.name` label
/// (`namespaces::strategy`).
pub fn prepare_create(info: &KindSpec, obj: &mut Map<String, Value>) -> ApiResult<()> {
    if !is_namespaces(info) {
        return Ok(());
    }
    crate::namespaces::strategy::canonicalize(obj);
    let Some(spec) = obj_entry(obj, "spec") else {
        return Ok(());
    };
    let f = spec
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if f.is_null() {
        *f = Value::Array(Vec::new());
    }
    if let Some(a) = f.as_array_mut()
        && !a
            .iter()
            .any(|x| x.as_str() == Some(crate::namespaces::NAMESPACE_FINALIZER))
    {
        a.push(Value::String(crate::namespaces::NAMESPACE_FINALIZER.into()));
    }
    let v = Value::Object(std::mem::take(obj));
    let errs = crate::namespaces::strategy::validate_finalizers(&v, false);
    if let Value::Object(m) = v {
        *obj = m;
    }
    if errs.is_empty() {
        return Ok(());
    }
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    Err(ApiError::invalid(info, name, &errs))
}

/// The rules an update of a stored object must keep (after `prepare_update`): no new
/// finalizer on an object being deleted (422); for a namespace, its `spec.finalizers` kept —
/// unless the update is a `PUT .../finalize` (`finalize`), whose finalizers are validated
/// instead and whose status is the stored one — and its `kubernetes.io/metadata.name` label
/// set (`namespaces::strategy`).
pub fn check_update(
    info: &KindSpec,
    cur: &Value,
    new: &mut Value,
    finalize: bool,
) -> ApiResult<()> {
    let finalizers = |v: &Value| -> Vec<String> {
        v.pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let deleting = cur
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    if deleting {
        let old: std::collections::HashSet<String> = finalizers(cur).into_iter().collect();
        let mut extra: Vec<String> = finalizers(new)
            .into_iter()
            .filter(|f| !old.contains(f))
            .collect();
        if !extra.is_empty() {
            extra.sort();
            extra.dedup();
            let name = cur
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            let list = extra
                .iter()
                .map(|f| format!("{f:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(ApiError::invalid(
                info,
                name,
                &[FieldError::forbidden(
                    "metadata.finalizers",
                    format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
                    ),
                )],
            ));
        }
    }
    if !is_namespaces(info) {
        return Ok(());
    }
    if finalize {
        crate::namespaces::strategy::prepare_finalize(cur, new);
        let errs = crate::namespaces::strategy::validate_finalizers(new, true);
        if !errs.is_empty() {
            let name = cur
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(ApiError::invalid(info, name, &errs));
        }
    }
    if let Some(obj) = new.as_object_mut() {
        if !finalize {
            let kept = cur.pointer("/spec/finalizers").cloned();
            if let Some(spec) = obj_entry(obj, "spec") {
                match kept {
                    Some(f) => spec.insert("finalizers".into(), f),
                    None => spec.remove("finalizers"),
                };
            }
        }
        crate::namespaces::strategy::canonicalize(obj);
    }
    Ok(())
}

/// What an update found when its result is to be removed rather than written: the state it
/// was computed from (for the removal's preconditions) and the result (the response).
#[derive(Debug)]
pub struct Finalized {
    /// Preconditions naming the state the update read.
    pub preconditions: Preconditions,
    /// The object the update computed.
    pub object: Object,
}

/// A slot an update function fills when its result is finalized (see [`Finalized`]).
#[derive(Debug, Default)]
pub struct FinalizedSlot(Mutex<Option<Finalized>>);

impl FinalizedSlot {
    /// Records that `new`, computed from `cur`, is to be removed; `true` when it is so.
    pub fn check(&self, info: &KindSpec, cur: &Object, new: &Object) -> bool {
        if !State::of(new).finalized(is_namespaces(info)) {
            return false;
        }
        let f = Finalized {
            preconditions: Preconditions {
                uid: cur.uid().map(str::to_owned),
                resource_version: Some(cur.resource_version()),
            },
            object: new.clone(),
        };
        if let Ok(mut g) = self.0.lock() {
            *g = Some(f);
        }
        true
    }

    /// Clears the slot (at the start of each attempt).
    pub fn clear(&self) {
        if let Ok(mut g) = self.0.lock() {
            *g = None;
        }
    }

    /// What was recorded.
    pub fn take(&self) -> Option<Finalized> {
        self.0.lock().ok().and_then(|mut g| g.take())
    }
}

/// Removes the object an update finalized. `Ok(true)`: removed (or already gone);
/// `Ok(false)`: the object changed since the update read it, recompute.
pub async fn remove_finalized(
    storage: &dyn Storage,
    key: &Key,
    f: &Finalized,
) -> Result<bool, StorageError> {
    match storage
        .delete(
            key,
            Some(&f.preconditions),
            listwatch_storage::no_validation(),
            None,
        )
        .await
    {
        Ok(_) => Ok(true),
        // Another writer removed it first (upstream tolerates the race the same way).
        Err(e) if e.is_not_found() => Ok(true),
        Err(e) if e.is_conflict() => Ok(false),
        Err(e) => Err(e),
    }
}

/// How many times an update that finalizes an object may be recomputed.
pub const MAX_UPDATE_ATTEMPTS: usize = MAX_ATTEMPTS;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm() -> KindSpec {
        KindSpec::new("", "v1", "configmaps", "ConfigMap")
    }

    fn ns() -> KindSpec {
        KindSpec::new("", "v1", "namespaces", "Namespace").namespaced(false)
    }

    #[test]
    fn finalized_follows_finalizers_grace_and_namespace_rules() {
        let s = |deleting, finalizers, spec_finalizers, grace_pending| State {
            deleting,
            finalizers,
            spec_finalizers,
            grace_pending,
        };
        assert!(s(true, false, false, false).finalized(false));
        assert!(!s(true, true, false, false).finalized(false));
        assert!(!s(true, false, true, false).finalized(true));
        assert!(s(true, false, true, false).finalized(false));
        assert!(!s(false, false, false, false).finalized(false));
        // A pod in its grace period stays until a DELETE of grace 0.
        assert!(!s(true, false, false, true).finalized(false));
        let pod = Object::from_value(
            json!({"metadata":{"name":"p","deletionTimestamp":"2026-01-01T00:00:00Z","deletionGracePeriodSeconds":30}}),
            &listwatch_api::SelectableFields::none(),
        )
        .unwrap();
        assert!(State::of(&pod).grace_pending);
    }

    #[test]
    fn a_delete_of_what_is_already_marked_and_held_changes_nothing() {
        let none = listwatch_api::SelectableFields::none();
        let obj = |v| Object::from_value(v, &none).unwrap();
        let bg = DeleteRequest {
            propagation: Some(crate::options::Propagation::Background),
            ..DeleteRequest::default()
        };
        let held = obj(json!({"metadata":{"name":"a","finalizers":["a.io/x"],
            "deletionTimestamp":"2026-01-01T00:00:00Z","deletionGracePeriodSeconds":0}}));
        assert!(delete_changes_nothing(&cm(), &held, &bg));
        let fresh = obj(json!({"metadata":{"name":"a","finalizers":["a.io/x"]}}));
        assert!(!delete_changes_nothing(&cm(), &fresh, &bg));
        let orphaning = obj(
            json!({"metadata":{"name":"a","finalizers":["a.io/x","orphan"],
            "deletionTimestamp":"2026-01-01T00:00:00Z","deletionGracePeriodSeconds":0}}),
        );
        assert!(!delete_changes_nothing(&cm(), &orphaning, &bg));
        let free = obj(json!({"metadata":{"name":"a"}}));
        assert!(!delete_changes_nothing(&cm(), &free, &bg));
    }

    #[test]
    fn updates_may_not_add_finalizers_while_deleting_and_keep_namespace_finalizers() {
        let cur = json!({"metadata":{"name":"a","deletionTimestamp":"t","finalizers":["a/b"]}});
        let mut new = json!({"metadata":{"name":"a","finalizers":["a/b","c/d"]}});
        let e = check_update(&cm(), &cur, &mut new, false).unwrap_err();
        assert_eq!(e.code(), 422);
        assert!(
            e.0.message.contains(
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"c/d\"}"
            ),
            "{}",
            e.0.message
        );
        let mut fewer = json!({"metadata":{"name":"a","finalizers":[]}});
        check_update(&cm(), &cur, &mut fewer, false).unwrap();
        let live = json!({"metadata":{"name":"a"}});
        check_update(&cm(), &live, &mut new, false).unwrap();

        let cur = json!({"metadata":{"name":"n"},"spec":{"finalizers":["kubernetes"]}});
        let mut new = json!({"metadata":{"name":"n"},"spec":{"finalizers":[]}});
        check_update(&ns(), &cur, &mut new, false).unwrap();
        assert_eq!(new["spec"]["finalizers"], json!(["kubernetes"]));
        assert_eq!(
            new["metadata"]["labels"]["kubernetes.io/metadata.name"],
            "n"
        );
        // Through `/finalize`: the body's finalizers, validated; the stored status.
        let cur = json!({"metadata":{"name":"n"},"spec":{"finalizers":["kubernetes","a.io/b"]},
            "status":{"phase":"Terminating"}});
        let mut new = json!({"metadata":{"name":"n"},"spec":{"finalizers":["a.io/b"]},
            "status":{"phase":"Active"}});
        check_update(&ns(), &cur, &mut new, true).unwrap();
        assert_eq!(new["spec"]["finalizers"], json!(["a.io/b"]));
        assert_eq!(new["status"]["phase"], "Terminating");
        let mut bad = json!({"metadata":{"name":"n"},"spec":{"finalizers":["mine"]}});
        let e = check_update(&ns(), &cur, &mut bad, true).unwrap_err();
        assert_eq!(e.code(), 422);
    }
}
