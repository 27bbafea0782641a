//! [`Store::update`]: upstream's generic store `Update` (a PUT, through the object, `/status`,
//! `/scale` or `/finalize`), and the read-modify-write every update and patch shares.
//!
//! Invariants: writes go to the kind's storage only (never a cache); a dry run writes
//! nothing; every object stored is validated ([`prepare_update`](crate::validation::prepare_update), the deletion lifecycle's
//! update rules), has its managedFields recorded and passes the caller's admission first;
//! an update that leaves the object as stored but for managedFields times keeps the stored
//! times (so it writes nothing);
//! an update that creates its object (create-on-update) is checked as a create, authorized
//! for `create` ([`WriteHooks::authorize_create`]) and its namespace checked; an update is
//! a read-modify-write that storage retries on conflict, and whose request errors are
//! returned as they are; an update whose result is a deleting object without finalizers
//! removes the object instead.

use listwatch_api::Object;
use listwatch_api::echo::echo;
use listwatch_storage::{Error as StorageError, GetOptions, Key, Preconditions, Updated};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::field_validation::Directive;
use crate::store::{Store, StoreError};
use crate::validation::{UpdateError, prepare_create_in, prepare_update_in};
use crate::write::{NoHooks, Subresource, WriteHooks, Written, decoded};

/// Upstream's message for an optimistic-concurrency failure.
pub(crate) const MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// Options of [`Store::update`] (upstream's `metav1.UpdateOptions`, with the subresource
/// of the request and the preconditions of its store call).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdateOptions {
    /// `dryRun=All`: everything but the write.
    pub dry_run: bool,
    /// The manager the update is recorded under in managedFields.
    pub field_manager: String,
    /// `fieldValidation`: what unknown and duplicate fields of the body do.
    pub field_validation: Directive,
    /// The keys the decoded body repeated in one object (the decoder's findings).
    pub duplicate_fields: Vec<String>,
    /// The uid and resourceVersion the stored object must have (a conflict otherwise);
    /// a body's own `metadata.resourceVersion` and `metadata.uid` are checked too.
    pub preconditions: Option<Preconditions>,
    /// The part of the object written.
    pub subresource: Subresource,
}

impl UpdateOptions {
    /// An update recorded under `manager`.
    pub fn by(manager: &str) -> Self {
        Self {
            field_manager: manager.to_owned(),
            ..Self::default()
        }
    }
}

/// One write's target and hooks: what the update and patch steps share.
pub(crate) struct Target<'a> {
    pub(crate) store: &'a Store,
    pub(crate) namespace: Option<&'a str>,
    pub(crate) name: &'a str,
    pub(crate) sub: Subresource,
    pub(crate) hooks: &'a dyn WriteHooks,
}

impl Target<'_> {
    pub(crate) fn key(&self) -> Result<Key, StoreError> {
        let info = self.store.info();
        Ok(Key::object(
            &info.storage_resource,
            self.namespace,
            self.name,
        )?)
    }

    /// The optimistic-concurrency conflict of this object.
    pub(crate) fn modified(&self) -> StoreError {
        match self.key() {
            Ok(key) => key.conflict(MODIFIED).into(),
            Err(e) => e,
        }
    }

    /// A PUT or apply of a missing object whose body names another object.
    pub(crate) fn name_mismatch(&self, body: &Map<String, Value>) -> Result<(), StoreError> {
        let body_name = body
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if body_name != self.name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({})",
                echo(body_name),
                echo(self.name)
            ))
            .into());
        }
        Ok(())
    }
}

impl Store {
    /// Updates `name` in `namespace` to `obj` as a PUT does (no hooks: see
    /// [`Store::update_with`]).
    pub async fn update(
        &self,
        namespace: Option<&str>,
        name: &str,
        obj: Map<String, Value>,
        opts: &UpdateOptions,
    ) -> Result<Written, StoreError> {
        self.update_with(namespace, name, obj, opts, &NoHooks).await
    }

    /// Updates `name` in `namespace` to `new` through `opts.subresource`, with the caller's
    /// `hooks`: the body settled by field validation, then read-modify-written (a missing
    /// object is created when the kind allows create-on-update, its namespace checked
    /// first), recorded under `opts.field_manager`. What was stored, and whether it was
    /// created.
    pub async fn update_with(
        &self,
        namespace: Option<&str>,
        name: &str,
        mut new: Map<String, Value>,
        opts: &UpdateOptions,
        hooks: &dyn WriteHooks,
    ) -> Result<Written, StoreError> {
        let sub = opts.subresource;
        let t = Target {
            store: self,
            namespace: namespace.filter(|_| self.info().namespaced),
            name,
            sub,
            hooks,
        };
        let findings = self.check_body(
            sub,
            &mut new,
            opts.field_validation,
            opts.duplicate_fields.clone(),
        )?;
        let key = t.key()?;
        let manager = opts.field_manager.as_str();
        let creates = sub == Subresource::Main && self.info().allow_create_on_update;
        // A create checks its namespace first; an update does not, so the check runs (and
        // the write is retried) only once the object turns out to be missing.
        let wants_namespace_check = std::sync::atomic::AtomicBool::new(false);
        let mut namespace_checked = false;
        let (object, created) = loop {
            let checked = namespace_checked;
            let result = read_modify_write(
                &t,
                creates,
                opts.dry_run,
                opts.preconditions.as_ref(),
                |cur| match cur {
                    None if creates && !checked => {
                        wants_namespace_check.store(true, std::sync::atomic::Ordering::Relaxed);
                        Err(ApiError::internal("the namespace is checked before a create").into())
                    }
                    None if creates => create_on_update(&t, &new, manager),
                    None => Err(key.not_found().into()),
                    Some(cur) if sub == Subresource::Scale => {
                        apply_scale_update(&t, cur, manager, |_| Ok(Value::Object(new.clone())))
                    }
                    Some(cur) => {
                        check_uid_precondition(&t, cur, &new)?;
                        apply_update(
                            &t,
                            &mut decoded(cur)?,
                            Value::Object(new.clone()),
                            Some(manager),
                        )
                    }
                },
            )
            .await;
            if !checked && wants_namespace_check.swap(false, std::sync::atomic::Ordering::Relaxed) {
                hooks.check_namespace(t.namespace, name).await?;
                namespace_checked = true;
                continue;
            }
            break result?;
        };
        if created && !opts.dry_run {
            hooks.after_create(t.namespace, &key, &object).await?;
        }
        Ok(Written {
            object,
            created,
            warnings: findings,
        })
    }
}

/// A PUT carries its body's uid as a precondition (upstream's
/// `defaultUpdatedObjectInfo.Preconditions`, k8s.io/apiserver `pkg/registry/rest/update.go`):
/// a body naming another object's uid — one deleted and recreated under the same name since
/// the client read it — is a conflict, and nothing is written.
fn check_uid_precondition(
    t: &Target<'_>,
    cur: &Object,
    body: &Map<String, Value>,
) -> Result<(), StoreError> {
    let Some(uid) = body
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
    else {
        return Ok(());
    };
    let key = t.key()?;
    // The storage layer's own uid precondition check, with upstream's message.
    Preconditions {
        uid: Some(uid.to_owned()),
        resource_version: None,
    }
    .check(&key, cur)?;
    Ok(())
}

/// A PUT of a missing object where the kind allows it (upstream's create-on-update): the
/// body becomes a create, validated, authorized for `create` and admitted as a POST's.
fn create_on_update(
    t: &Target<'_>,
    body: &Map<String, Value>,
    manager: &str,
) -> Result<Object, StoreError> {
    let mut obj = body.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        // Upstream's update carries the body's uid as a precondition: nothing has it.
        if let Some(uid) = meta
            .get("uid")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
        {
            let key = t.key()?;
            return Err(key
                .conflict(format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: ",
                    echo(uid)
                ))
                .into());
        }
        // A create through an update ignores the body's resourceVersion.
        meta.remove("resourceVersion");
    }
    t.name_mismatch(&obj)?;
    prepare_create_in(
        t.store.info(),
        Some(t.store.catalog()),
        &mut obj,
        t.namespace,
    )?;
    // As upstream, after the create's own validation and before admission: `update` was
    // authorized, a create needs `create` too.
    t.hooks.authorize_create()?;
    let mut v = Value::Object(obj);
    t.store.field_manager(t.sub).update(None, &mut v, manager);
    t.hooks.admit(&mut v, None)?;
    Ok(t.store.to_object(v)?)
}

/// Runs a read-modify-write whose update step may fail with a request error: such an
/// error is kept aside (storage only sees a placeholder) and returned as is.
pub(crate) async fn read_modify_write(
    t: &Target<'_>,
    ignore_not_found: bool,
    dry_run: bool,
    preconditions: Option<&Preconditions>,
    mut step: impl FnMut(Option<&Object>) -> Result<Object, StoreError> + Send,
) -> Result<(Object, bool), StoreError> {
    let key = t.key()?;
    let storage = t.store.storage();
    if dry_run {
        let cur = storage
            .get(
                &key,
                &GetOptions {
                    resource_version: None,
                    ignore_not_found,
                },
            )
            .await?;
        if let (Some(p), Some(cur)) = (preconditions, cur.as_ref()) {
            p.check(&key, cur)?;
        }
        let created = cur.is_none();
        let out = step(cur.as_ref())?;
        let rv = cur.map_or(0, |c| c.resource_version());
        return Ok((out.with_resource_version(rv), created));
    }
    // An update whose result is a deleting object without finalizers removes it instead
    // (`lifecycle`); if the object changed meanwhile, the update is recomputed.
    let finalized = crate::lifecycle::FinalizedSlot::default();
    for _ in 0..crate::lifecycle::MAX_UPDATE_ATTEMPTS {
        let mut failure: Option<StoreError> = None;
        let mut created = false;
        let result = {
            let mut update = |cur: Option<&Object>| -> listwatch_storage::Result<Updated> {
                created = cur.is_none();
                finalized.clear();
                let out = step(cur).map_err(|e| {
                    let placeholder = StorageError::bad_request(e.to_string());
                    failure = Some(e);
                    placeholder
                })?;
                if let Some(cur) = cur
                    && finalized.check(t.store.info(), cur, &out)
                {
                    return Err(StorageError::bad_request("finalized: removed instead"));
                }
                Ok(Updated::from(out))
            };
            storage
                .guaranteed_update(&key, preconditions, ignore_not_found, &mut update, None)
                .await
        };
        match (result, failure, finalized.take()) {
            (Ok(o), _, _) => return Ok((o, created)),
            (Err(_), Some(f), _) => return Err(f),
            (Err(_), None, Some(f)) => {
                if crate::lifecycle::remove_finalized(storage.as_ref(), &key, &f).await? {
                    return Ok((f.object, false));
                }
            }
            (Err(e), None, None) => return Err(e.into()),
        }
    }
    Err(t.modified())
}

/// Validates and completes an update of the stored object to `new`; `manager` records it
/// as an Update in managedFields (`None`: an apply already recorded it). `cur_v` is the
/// stored object as decoded once per write by the caller ([`decoded`]): the patch, the
/// field manager, the update checks and admission all read that one value (mutable only so
/// that the field manager reads it without a copy: it ends as it began).
pub(crate) fn apply_update(
    t: &Target<'_>,
    cur_v: &mut Value,
    new: Value,
    manager: Option<&str>,
) -> Result<Object, StoreError> {
    let info = t.store.info();
    // An apply's managedFields are its own (a `/status` update keeps the stored metadata).
    let applied_fields = match manager {
        None => new
            .get("metadata")
            .and_then(|m| m.get("managedFields"))
            .cloned(),
        Some(_) => None,
    };
    // Through `/ephemeralcontainers` the request changes that list and nothing else: the
    // strategy builds the object from the stored one (upstream's
    // `podEphemeralContainersStrategy`), which then passes the generic update checks.
    let new = if t.sub == Subresource::EphemeralContainers {
        match info.strategy.ephemeral_containers_update(&new, cur_v) {
            Ok(v) => v,
            Err(errs) => {
                crate::validation::check_strategy(info, cur_v, errs)?;
                return Err(ApiError::internal("an invalid update without causes").into());
            }
        }
    } else if t.sub == Subresource::Main && info.ephemeral_containers_subresource {
        keep_ephemeral_containers(cur_v, new)
    } else {
        new
    };
    let status_write = matches!(t.sub, Subresource::Status | Subresource::Approval);
    // As upstream's `csrApprovalStrategy.PrepareForUpdate`, before validation: the kind's
    // rules judge the status the write will store, not a certificate it will drop.
    let mut new = new;
    if t.sub == Subresource::Approval {
        keep_status_but_conditions(cur_v, &mut new);
    }
    match prepare_update_in(info, Some(t.store.catalog()), cur_v, new, status_write) {
        Ok(mut v) => {
            match (manager, applied_fields) {
                (Some(manager), _) => {
                    t.store
                        .field_manager(t.sub)
                        .update_live(cur_v, &mut v, manager);
                }
                (None, fields) => {
                    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                        match fields {
                            Some(f) => meta.insert("managedFields".into(), f),
                            None => meta.remove("managedFields"),
                        };
                    }
                }
            }
            crate::lifecycle::check_update(info, cur_v, &mut v, t.sub == Subresource::Finalize)?;
            t.hooks.admit(&mut v, Some(&*cur_v))?;
            // What the strategy reset (an apply's `status`, a `/status` write's `spec`)
            // may leave the object as stored but for its managers' times: then it is
            // stored as it was, and storage writes nothing (upstream's
            // `IgnoreManagedFieldsTimestampsTransformer`).
            listwatch_apply::keep_times_if_unchanged(&mut v, cur_v);
            Ok(t.store.to_object(v)?)
        }
        Err(UpdateError::Api(e)) => Err(e.into()),
        Err(UpdateError::Conflict) => Err(t.modified()),
    }
}

/// A write of a pod itself keeps the stored `spec.ephemeralContainers` (upstream's pod
/// strategy): only `/ephemeralcontainers` changes them.
fn keep_ephemeral_containers(cur: &Value, mut new: Value) -> Value {
    let stored = cur.get("spec").and_then(|s| s.get("ephemeralContainers"));
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        match stored {
            Some(list) => spec.insert("ephemeralContainers".into(), list.clone()),
            None => spec.remove("ephemeralContainers"),
        };
    }
    new
}

/// A write through `/scale`: `new_scale` turns the current Scale into the wanted one (the
/// body of a PUT, or the current Scale patched); only the replica count changes.
pub(crate) fn apply_scale_update(
    t: &Target<'_>,
    cur: &Object,
    manager: &str,
    new_scale: impl FnOnce(&Value) -> Result<Value, StoreError>,
) -> Result<Object, StoreError> {
    let info = t.store.info();
    let spec = info.scale.as_ref().ok_or_else(ApiError::path_not_found)?;
    let mut cur_v = decoded(cur)?;
    let wanted = new_scale(&crate::scale::to_scale(spec, &cur_v))?;
    match crate::scale::apply_scale(info, spec, &cur_v, &wanted) {
        Ok(v) => apply_update(t, &mut cur_v, v, Some(manager)),
        Err(crate::scale::ScaleError::Api(e)) => Err(e.into()),
        Err(crate::scale::ScaleError::Conflict) => Err(t.modified()),
    }
}

/// An `/approval` write changes only the status' `conditions` (upstream's
/// `csrApprovalStrategy.PrepareForUpdate`): the rest of the status is the stored one.
fn keep_status_but_conditions(cur: &Value, new: &mut Value) {
    let conditions = new.get("status").and_then(|s| s.get("conditions")).cloned();
    let mut status = match cur.get("status") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    match conditions {
        Some(c) if !c.is_null() => {
            status.insert("conditions".into(), c);
        }
        _ => {
            status.remove("conditions");
        }
    }
    if let Some(obj) = new.as_object_mut() {
        obj.insert("status".into(), Value::Object(status));
    }
}
