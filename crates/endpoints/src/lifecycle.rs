//! Object deletion lifecycle, as upstream's generic registry store does it: finalizers hold
//! a deleted object, `metadata.deletionTimestamp` marks it, and the update that removes its
//! last finalizer removes it from storage. Namespaces add their own hold: a deleted
//! namespace turns `Terminating` and stays until the namespace controller
//! has emptied it and removed the `kubernetes` finalizer from
//! `spec.finalizers`.
//!
//! This module owns every decision about *whether* a DELETE or an update removes an object;
//! the handlers only route requests here. Invariants:
//! - an object with finalizers (or a namespace that is not finalized) is never removed from
//!   storage: a DELETE marks it (deletionTimestamp, and for other resources than namespaces
//!   `deletionGracePeriodSeconds: 0` and a generation bump, as upstream's `markAsDeleting`)
//!   and returns it; the removal itself is conditional on the object still being free of
//!   finalizers (checked by storage on the object it removes), so a finalizer added
//!   concurrently is never skipped;
//! - a deletionTimestamp once set never changes or goes away (updates keep it; see
//!   `validation::prepare_update`), and no finalizer can be added while it is set (422, as
//!   upstream's `ValidateNoNewFinalizers`);
//! - an update whose result is deleting and free of finalizers removes the object instead
//!   of writing it, on condition that the object is still the one the update was computed
//!   from (uid and resourceVersion preconditions; on a conflict the update is recomputed);
//! - preconditions (uid, resourceVersion) of a DELETE are checked on every write it makes
//!   (409 Conflict); `dryRun=All` writes nothing and answers what would have happened;
//! - a namespace's `spec.finalizers` only shrink through the namespace controller: updates
//!   keep them (upstream changes them only through `/finalize`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use listwatch_api::Object;
use listwatch_storage::{Error as StorageError, GetOptions, Key, Preconditions, Storage, Updated};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::clock;
use crate::error::{ApiError, ApiResult, FieldError};
use crate::resource::ResourceInfo;

/// How often a DELETE or an update-that-deletes recomputes after losing a race to another
/// writer before it answers 409.
const MAX_ATTEMPTS: usize = 16;

/// Whether `info` is the core `namespaces` resource.
pub(crate) fn is_namespaces(info: &ResourceInfo) -> bool {
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
pub(crate) struct State {
    /// `metadata.deletionTimestamp` is set.
    pub(crate) deleting: bool,
    /// `metadata.finalizers` is not empty.
    pub(crate) finalizers: bool,
    /// `spec.finalizers` is not empty (namespaces).
    pub(crate) spec_finalizers: bool,
}

impl State {
    /// Reads the state of a stored object; one that does not decode counts as free.
    pub(crate) fn of(obj: &Object) -> Self {
        let h: Head = obj.deserialize().unwrap_or_default();
        Self {
            deleting: h.metadata.deletion_timestamp.is_some_and(|t| !t.is_null()),
            finalizers: h.metadata.finalizers.is_some_and(|f| !f.is_empty()),
            spec_finalizers: h
                .spec
                .and_then(|s| s.finalizers)
                .is_some_and(|f| !f.is_empty()),
        }
    }

    /// Whether a DELETE must keep the object (mark it) rather than remove it.
    fn held(self, namespace: bool) -> bool {
        self.finalizers || (namespace && (!self.deleting || self.spec_finalizers))
    }

    /// Whether the object is being deleted and nothing holds it any more: it must not be
    /// written again but removed.
    pub(crate) fn finalized(self, namespace: bool) -> bool {
        self.deleting && !self.finalizers && !(namespace && self.spec_finalizers)
    }
}

/// What a DELETE did.
#[derive(Debug)]
pub(crate) enum Deletion {
    /// The object is gone; its last state.
    Gone(Object),
    /// The object stays, marked as being deleted; its current state.
    Pending(Object),
}

/// Marks `v` as being deleted at `now` (RFC 3339), as upstream's `markAsDeleting` (and,
/// for namespaces, the namespace registry's first DELETE: phase `Terminating`).
fn mark(info: &ResourceInfo, v: &mut Value, now: &str) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    let namespace = is_namespaces(info);
    if namespace && let Some(status) = obj_entry(obj, "status") {
        status.insert("phase".into(), Value::String("Terminating".into()));
    }
    let Some(meta) = obj_entry(obj, "metadata") else {
        return;
    };
    if namespace {
        if meta.get("deletionTimestamp").is_none_or(Value::is_null) {
            meta.insert("deletionTimestamp".into(), Value::String(now.into()));
        }
        return;
    }
    if meta.get("deletionTimestamp").is_none_or(Value::is_null) {
        if let Some(g) = meta
            .get("generation")
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
        {
            meta.insert("generation".into(), Value::from(g.saturating_add(1)));
        }
        meta.insert("deletionTimestamp".into(), Value::String(now.into()));
    }
    meta.insert("deletionGracePeriodSeconds".into(), Value::from(0));
}

/// The map at `obj[k]`, made an empty map when missing or not a map (`None` never happens).
fn obj_entry<'a>(obj: &'a mut Map<String, Value>, k: &str) -> Option<&'a mut Map<String, Value>> {
    if !obj.get(k).is_some_and(Value::is_object) {
        obj.insert(k.into(), Value::Object(Map::new()));
    }
    obj.get_mut(k).and_then(Value::as_object_mut)
}

/// `cur` marked as being deleted, re-encoded, or `None` when marking changes nothing.
fn marked(info: &ResourceInfo, cur: &Object) -> Result<Option<Object>, StorageError> {
    let mut v = cur
        .to_value()
        .map_err(|e| StorageError::internal(format!("stored object does not decode: {e}")))?;
    let before = v.clone();
    mark(info, &mut v, &clock::format_rfc3339(clock::now_unix()));
    if v == before {
        return Ok(None);
    }
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    Object::from_value(v, &info.selectable_fields)
        .map(Some)
        .map_err(|e| StorageError::internal(format!("marked object does not encode: {e}")))
}

/// Deletes the object at `key` as upstream's registry does: removed at once when nothing
/// holds it, else marked (and kept) — see the module invariants.
pub(crate) async fn delete(
    storage: &dyn Storage,
    info: &ResourceInfo,
    key: &Key,
    preconditions: Option<&Preconditions>,
    dry_run: bool,
) -> Result<Deletion, StorageError> {
    let ns = is_namespaces(info);
    if dry_run {
        let cur = storage
            .get(key, &GetOptions::default())
            .await?
            .ok_or_else(|| key.not_found())?;
        if let Some(p) = preconditions {
            p.check(key, &cur)?;
        }
        if !State::of(&cur).held(ns) {
            return Ok(Deletion::Gone(cur));
        }
        let rv = cur.resource_version();
        return Ok(Deletion::Pending(
            marked(info, &cur)?.map_or(cur, |m| m.with_resource_version(rv)),
        ));
    }
    for _ in 0..MAX_ATTEMPTS {
        // Remove, on condition that nothing holds the object (checked by storage on the
        // very state it removes).
        let held = AtomicBool::new(false);
        let validate = |o: &Object| {
            if State::of(o).held(ns) {
                held.store(true, Ordering::Relaxed);
                return Err(key.conflict("the object is held by finalizers"));
            }
            Ok(())
        };
        match storage.delete(key, preconditions, &validate, None).await {
            Ok(o) => return Ok(Deletion::Gone(o)),
            Err(_) if held.load(Ordering::Relaxed) => {}
            Err(e) => return Err(e),
        }
        // Held: mark it, on condition that it is still held.
        let freed = AtomicBool::new(false);
        let mut update = |cur: Option<&Object>| -> listwatch_storage::Result<Updated> {
            freed.store(false, Ordering::Relaxed);
            let cur = cur.ok_or_else(|| key.not_found())?;
            if !State::of(cur).held(ns) {
                freed.store(true, Ordering::Relaxed);
                return Err(key.conflict("the object is no longer held"));
            }
            Ok(marked(info, cur)?.unwrap_or_else(|| cur.clone()).into())
        };
        match storage
            .guaranteed_update(key, preconditions, false, &mut update, None)
            .await
        {
            Ok(o) => return Ok(Deletion::Pending(o)),
            Err(_) if freed.load(Ordering::Relaxed) => {}
            Err(e) => return Err(e),
        }
    }
    Err(key.conflict("the object kept changing while it was being deleted; please try again"))
}

/// On create: a namespace's `spec.finalizers` hold `kubernetes` (appended when missing, as
/// upstream's namespace strategy), so that only the namespace controller lets it go.
pub(crate) fn prepare_create(info: &ResourceInfo, obj: &mut Map<String, Value>) {
    if !is_namespaces(info) {
        return;
    }
    let Some(spec) = obj_entry(obj, "spec") else {
        return;
    };
    let f = spec
        .entry("finalizers")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !f.is_array() {
        *f = Value::Array(Vec::new());
    }
    if let Some(a) = f.as_array_mut()
        && !a
            .iter()
            .any(|x| x.as_str() == Some(crate::namespaces::NAMESPACE_FINALIZER))
    {
        a.push(Value::String(crate::namespaces::NAMESPACE_FINALIZER.into()));
    }
}

/// The rules an update of a stored object must keep (after `prepare_update`): no new
/// finalizer on an object being deleted (422), and a namespace's `spec.finalizers` kept.
pub(crate) fn check_update(info: &ResourceInfo, cur: &Value, new: &mut Value) -> ApiResult<()> {
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
        let old = finalizers(cur);
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
    if is_namespaces(info)
        && let Some(obj) = new.as_object_mut()
    {
        let kept = cur.pointer("/spec/finalizers").cloned();
        if let Some(spec) = obj_entry(obj, "spec") {
            match kept {
                Some(f) => spec.insert("finalizers".into(), f),
                None => spec.remove("finalizers"),
            };
        }
    }
    Ok(())
}

/// What an update found when its result is to be removed rather than written: the state it
/// was computed from (for the removal's preconditions) and the result (the response).
#[derive(Debug)]
pub(crate) struct Finalized {
    /// Preconditions naming the state the update read.
    pub(crate) preconditions: Preconditions,
    /// The object the update computed.
    pub(crate) object: Object,
}

/// A slot an update function fills when its result is finalized (see [`Finalized`]).
#[derive(Debug, Default)]
pub(crate) struct FinalizedSlot(Mutex<Option<Finalized>>);

impl FinalizedSlot {
    /// Records that `new`, computed from `cur`, is to be removed; `true` when it is so.
    pub(crate) fn check(&self, info: &ResourceInfo, cur: &Object, new: &Object) -> bool {
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
    pub(crate) fn clear(&self) {
        if let Ok(mut g) = self.0.lock() {
            *g = None;
        }
    }

    /// What was recorded.
    pub(crate) fn take(&self) -> Option<Finalized> {
        self.0.lock().ok().and_then(|mut g| g.take())
    }
}

/// Removes the object an update finalized. `Ok(true)`: removed (or already gone);
/// `Ok(false)`: the object changed since the update read it, recompute.
pub(crate) async fn remove_finalized(
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
pub(crate) const MAX_UPDATE_ATTEMPTS: usize = MAX_ATTEMPTS;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm() -> ResourceInfo {
        ResourceInfo::new("", "v1", "configmaps", "ConfigMap")
    }

    fn ns() -> ResourceInfo {
        ResourceInfo::new("", "v1", "namespaces", "Namespace").namespaced(false)
    }

    #[test]
    fn marking_sets_the_timestamp_once_and_bumps_generation_once() {
        let mut v = json!({"metadata":{"name":"a","generation":3,"finalizers":["x/y"]}});
        mark(&cm(), &mut v, "2026-01-01T00:00:00Z");
        assert_eq!(v["metadata"]["deletionTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(v["metadata"]["generation"], 4);
        mark(&cm(), &mut v, "2027-01-01T00:00:00Z");
        assert_eq!(v["metadata"]["deletionTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(v["metadata"]["generation"], 4);

        let mut n = json!({"metadata":{"name":"n"},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}});
        mark(&ns(), &mut n, "2026-01-01T00:00:00Z");
        assert_eq!(n["status"]["phase"], "Terminating");
        assert!(n["metadata"].get("deletionGracePeriodSeconds").is_none());
    }

    #[test]
    fn held_and_finalized_follow_finalizers_and_namespace_rules() {
        let s = |deleting, finalizers, spec_finalizers| State {
            deleting,
            finalizers,
            spec_finalizers,
        };
        assert!(!s(false, false, false).held(false));
        assert!(s(false, true, false).held(false));
        // A namespace's first DELETE always marks it.
        assert!(s(false, false, false).held(true));
        assert!(s(true, false, true).held(true));
        assert!(!s(true, false, false).held(true));
        assert!(s(true, false, false).finalized(false));
        assert!(!s(true, true, false).finalized(false));
        assert!(!s(true, false, true).finalized(true));
        assert!(s(true, false, true).finalized(false));
        assert!(!s(false, false, false).finalized(false));
    }

    #[test]
    fn updates_may_not_add_finalizers_while_deleting_and_keep_namespace_finalizers() {
        let cur = json!({"metadata":{"name":"a","deletionTimestamp":"t","finalizers":["a/b"]}});
        let mut new = json!({"metadata":{"name":"a","finalizers":["a/b","c/d"]}});
        let e = check_update(&cm(), &cur, &mut new).unwrap_err();
        assert_eq!(e.code(), 422);
        assert!(
            e.0.message.contains(
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"c/d\"}"
            ),
            "{}",
            e.0.message
        );
        let mut fewer = json!({"metadata":{"name":"a","finalizers":[]}});
        check_update(&cm(), &cur, &mut fewer).unwrap();
        let live = json!({"metadata":{"name":"a"}});
        check_update(&cm(), &live, &mut new).unwrap();

        let cur = json!({"metadata":{"name":"n"},"spec":{"finalizers":["kubernetes"]}});
        let mut new = json!({"metadata":{"name":"n"},"spec":{"finalizers":[]}});
        check_update(&ns(), &cur, &mut new).unwrap();
        assert_eq!(new["spec"]["finalizers"], json!(["kubernetes"]));
    }
}
