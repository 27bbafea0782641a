//! The write verbs: create, update (PUT) and patch, through the main resource, `/status`
//! or `/scale`.
//!
//! Invariants: writes go to the resource's storage only (never a cache); `dryRun=All`
//! writes nothing; every object stored is validated, has its managedFields recorded and
//! passes admission first; a PUT or apply that creates its object is authorized for
//! `create` first ([`crate::authorize`]); an update or patch is a read-modify-write that
//! storage retries on conflict, and whose request errors are returned as they are.

use axum::http::StatusCode;
use axum::response::Response;
use listwatch_api::Object;
use listwatch_api::echo::echo;
use listwatch_registry::store;
use listwatch_storage::{Error as StorageError, GetOptions, Key, Updated};
use serde_json::{Map, Value};

use super::{
    Request, RequestObject, RequestObjectName, Sub, decoded, object_response, scale_response,
};
use crate::error::{ApiError, ApiResult};
use crate::field_validation::{Directive, Findings};
use crate::negotiate::negotiate_write;
use crate::patch::{Patch, PatchLimits, PatchType};
use crate::resource::KindSpec;
use crate::validation::{UpdateError, prepare_create, prepare_update};

/// Upstream's message for an optimistic-concurrency failure.
const MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// The object about to be written, refused (413) when its encoded size is over what the
/// resource's storage accepts.
fn to_object(req: &Request, v: Value) -> ApiResult<Object> {
    let obj = Object::from_value(v, &req.info().selectable_fields)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    crate::limits::check_object_size(&obj, req.res.storage.as_ref())?;
    Ok(obj)
}

/// The `fieldValidation` directive of the request.
fn directive(req: &Request) -> Directive {
    Directive::from_param(req.query.get("fieldValidation"))
}

/// The schema of the request's kind (`None`: none known; nothing is pruned).
fn kind_schema(req: &Request) -> Option<listwatch_schema::Node<'_>> {
    let info = req.info();
    req.catalog().kind(&info.group, &info.version, &info.kind)
}

/// Field validation of a create's or update's body: its duplicate and unknown fields
/// (removed from `body`) refuse it under `Strict`, else are returned to answer as warnings.
fn check_body(
    req: &Request,
    body: &mut Map<String, Value>,
    duplicates: Vec<String>,
) -> ApiResult<Findings> {
    let mut found = Findings::duplicates(duplicates);
    if req.sub != Sub::Scale {
        let mut v = Value::Object(std::mem::take(body));
        found.extend(crate::field_validation::prune(kind_schema(req), &mut v));
        if let Value::Object(m) = v {
            *body = m;
        }
    }
    found.settle_body(directive(req), req.info())
}

/// Records a decoded body for the audit log, with the URL's `apiVersion`/`kind` filled in
/// when the body left them out (upstream records the object as its handler typed it).
fn record_object(req: &Request, obj: &serde_json::Map<String, Value>) {
    RequestObject::record(&req.extensions, || {
        let mut o = obj.clone();
        if req.sub == Sub::Main {
            // A mismatch fails the request itself; the event records the body as sent.
            let _ = crate::validation::check_type(req.info(), &mut o);
        }
        Value::Object(o)
    });
}

pub(super) async fn create(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    req.query.validate_write("CreateOptions")?;
    let dry_run = req.query.dry_run()?;
    let (mut decoded, duplicates) =
        crate::limits::decode_object_keys(req.info(), &req.headers, bytes)?;
    record_object(req, &decoded);
    let findings = check_body(req, &mut decoded, duplicates)?;
    // A generated name that is taken is retried with another, as upstream's store does.
    let generates = store::generates_name(&decoded);
    let attempts = store::create_attempts(generates);
    let mut checked_namespace = false;
    let mut name = String::new();
    for _ in 0..attempts {
        let mut obj = decoded.clone();
        prepare_create(req.info(), &mut obj, req.ns())?;
        name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        if let Some(slot) = req.extensions.get::<RequestObjectName>() {
            slot.set(&name);
        }
        if !checked_namespace {
            crate::namespaces::check_open(&req.shared, req.info(), req.ns(), &name).await?;
            checked_namespace = true;
        }
        let key = Key::object(&req.info().storage_resource, req.ns(), &name)
            .map_err(|e| req.storage_err(&e))?;
        let mut v = Value::Object(obj);
        req.field_manager()
            .update(None, &mut v, &req.update_manager());
        req.admit(&mut v, None)?;
        let uid = v
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let object = to_object(req, v).inspect_err(|_| req.abandoned(&uid))?;
        let stored =
            match store::write_create(req.res.storage.as_ref(), &key, object, dry_run).await {
                Ok(o) => o,
                Err(StorageError::AlreadyExists { .. }) if generates => {
                    req.abandoned(&uid);
                    continue;
                }
                Err(e) => {
                    req.abandoned(&uid);
                    return Err(req.storage_err(&e));
                }
            };
        if !dry_run {
            crate::namespaces::recheck_after_create(&req.shared, &req.res, req.ns(), &key, &stored)
                .await?;
        }
        let mut resp = object_response(StatusCode::CREATED, &stored);
        findings.warn(resp.headers_mut());
        return Ok(resp);
    }
    Err(generate_name_conflict(req.info(), &name))
}

/// Upstream's `NewGenerateNameConflict`: every generated name was taken.
fn generate_name_conflict(info: &KindSpec, name: &str) -> ApiError {
    ApiError::from_status(
        listwatch_api::Status::failure(
            409,
            listwatch_api::status::reason::ALREADY_EXISTS,
            format!(
                "{} \"{name}\" already exists, the server was not able to generate a unique name for the object",
                info.qualified_resource()
            ),
        )
        .with_target(&info.group, &info.plural, name)
        .with_retry_after(1),
    )
}

/// A PUT of a missing object where the resource allows it (upstream's create-on-update):
/// the body becomes a create, validated, authorized for `create` and admitted as a POST's.
/// A PUT carries its body's uid as a precondition (upstream's
/// `defaultUpdatedObjectInfo.Preconditions`, k8s.io/apiserver `pkg/registry/rest/update.go`):
/// a body naming another object's uid — one deleted and recreated under the same name since
/// the client read it — is a conflict, and nothing is written.
fn check_uid_precondition(req: &Request, cur: &Object, body: &Map<String, Value>) -> ApiResult<()> {
    let Some(uid) = body
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
    else {
        return Ok(());
    };
    let key = req.object_key()?;
    // The storage layer's own uid precondition check, with upstream's message.
    listwatch_storage::Preconditions {
        uid: Some(uid.to_owned()),
        resource_version: None,
    }
    .check(&key, cur)
    .map_err(|e| req.storage_err(&e))
}

fn create_on_update(req: &Request, body: &Map<String, Value>, manager: &str) -> ApiResult<Object> {
    let mut obj = body.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        // Upstream's update carries the body's uid as a precondition: nothing has it.
        if let Some(uid) = meta
            .get("uid")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
        {
            let key = req.object_key()?;
            return Err(req.storage_err(&key.conflict(format!(
                "Precondition failed: UID in precondition: {}, UID in object meta: ",
                echo(uid)
            ))));
        }
        // A create through an update ignores the body's resourceVersion.
        meta.remove("resourceVersion");
    }
    let body_name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if body_name != req.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({})",
            echo(body_name),
            echo(req.name())
        )));
    }
    prepare_create(req.info(), &mut obj, req.ns())?;
    // As upstream, after the create's own validation and before admission: `update` was
    // authorized, a create needs `create` too.
    req.authorize_create()?;
    let mut v = Value::Object(obj);
    req.field_manager().update(None, &mut v, manager);
    req.admit(&mut v, None)?;
    to_object(req, v)
}

/// Runs a read-modify-write whose update step may fail with a request error: such an
/// error is kept aside (storage only sees a placeholder) and returned as is.
async fn read_modify_write(
    req: &Request,
    ignore_not_found: bool,
    dry_run: bool,
    mut step: impl FnMut(Option<&Object>) -> ApiResult<Object> + Send,
) -> ApiResult<(Object, bool)> {
    let key = req.object_key()?;
    if dry_run {
        let cur = req
            .res
            .storage
            .get(
                &key,
                &GetOptions {
                    resource_version: None,
                    ignore_not_found,
                },
            )
            .await
            .map_err(|e| req.storage_err(&e))?;
        let created = cur.is_none();
        let out = step(cur.as_ref())?;
        let rv = cur.map_or(0, |c| c.resource_version());
        return Ok((out.with_resource_version(rv), created));
    }
    // An update whose result is a deleting object without finalizers removes it instead
    // (`lifecycle`); if the object changed meanwhile, the update is recomputed.
    let finalized = crate::lifecycle::FinalizedSlot::default();
    for _ in 0..crate::lifecycle::MAX_UPDATE_ATTEMPTS {
        let mut failure: Option<ApiError> = None;
        let mut created = false;
        let result = {
            let mut update = |cur: Option<&Object>| -> listwatch_storage::Result<Updated> {
                created = cur.is_none();
                finalized.clear();
                let out = step(cur).map_err(|e| {
                    let placeholder = StorageError::bad_request(e.0.message.clone());
                    failure = Some(e);
                    placeholder
                })?;
                if let Some(cur) = cur
                    && finalized.check(req.info(), cur, &out)
                {
                    return Err(StorageError::bad_request("finalized: removed instead"));
                }
                Ok(Updated::from(out))
            };
            req.res
                .storage
                .guaranteed_update(&key, None, ignore_not_found, &mut update, None)
                .await
        };
        match (result, failure, finalized.take()) {
            (Ok(o), _, _) => return Ok((o, created)),
            (Err(_), Some(f), _) => return Err(f),
            (Err(_), None, Some(f)) => {
                let storage = req.res.storage.as_ref();
                if crate::lifecycle::remove_finalized(storage, &key, &f)
                    .await
                    .map_err(|e| req.storage_err(&e))?
                {
                    return Ok((f.object, false));
                }
            }
            (Err(e), None, None) => return Err(req.storage_err(&e)),
        }
    }
    Err(req.storage_err(&key.conflict(MODIFIED)))
}

/// Validates and completes an update of the stored object to `new`; `manager` records it
/// as an Update in managedFields (`None`: an apply already recorded it). `cur_v` is the
/// stored object as decoded once per write by the caller (`decoded`): the patch, the
/// field manager, the update checks and admission all read that one value.
fn apply_update(
    req: &Request,
    cur_v: &Value,
    new: Value,
    manager: Option<&str>,
) -> ApiResult<Object> {
    // An apply's managedFields are its own (a `/status` update keeps the stored metadata).
    let applied_fields = match manager {
        None => new
            .get("metadata")
            .and_then(|m| m.get("managedFields"))
            .cloned(),
        Some(_) => None,
    };
    match prepare_update(req.info(), cur_v, new, req.sub == Sub::Status) {
        Ok(mut v) => {
            match (manager, applied_fields) {
                (Some(manager), _) => req.field_manager().update(Some(cur_v), &mut v, manager),
                (None, fields) => {
                    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                        match fields {
                            Some(f) => meta.insert("managedFields".into(), f),
                            None => meta.remove("managedFields"),
                        };
                    }
                }
            }
            crate::lifecycle::check_update(req.info(), cur_v, &mut v, req.sub == Sub::Finalize)?;
            req.admit(&mut v, Some(cur_v))?;
            to_object(req, v)
        }
        Err(UpdateError::Api(e)) => Err(e),
        Err(UpdateError::Conflict) => {
            let key = req.object_key()?;
            Err(req.storage_err(&key.conflict(MODIFIED)))
        }
    }
}

pub(super) async fn update(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    req.query.validate_write("UpdateOptions")?;
    let dry_run = req.query.dry_run()?;
    let (mut new, duplicates) = crate::limits::decode_object_keys(req.info(), &req.headers, bytes)?;
    record_object(req, &new);
    let findings = check_body(req, &mut new, duplicates)?;
    let key = req.object_key()?;
    let manager = req.update_manager();
    let creates = req.sub == Sub::Main && req.info().allow_create_on_update;
    // A create checks its namespace first; an update does not, so the check runs (and the
    // write is retried) only once the object turns out to be missing.
    let wants_namespace_check = std::sync::atomic::AtomicBool::new(false);
    let mut namespace_checked = false;
    let (obj, created) = loop {
        let checked = namespace_checked;
        let result = read_modify_write(req, creates, dry_run, |cur| match cur {
            None if creates && !checked => {
                wants_namespace_check.store(true, std::sync::atomic::Ordering::Relaxed);
                Err(ApiError::internal(
                    "the namespace is checked before a create",
                ))
            }
            None if creates => create_on_update(req, &new, &manager),
            None => Err(req.storage_err(&key.not_found())),
            Some(cur) if req.sub == Sub::Scale => {
                apply_scale_update(req, cur, &manager, |_| Ok(Value::Object(new.clone())))
            }
            Some(cur) => {
                check_uid_precondition(req, cur, &new)?;
                apply_update(
                    req,
                    &decoded(cur)?,
                    Value::Object(new.clone()),
                    Some(&manager),
                )
            }
        })
        .await;
        if !checked && wants_namespace_check.swap(false, std::sync::atomic::Ordering::Relaxed) {
            crate::namespaces::check_open(&req.shared, req.info(), req.ns(), req.name()).await?;
            namespace_checked = true;
            continue;
        }
        break result?;
    };
    if created && !dry_run {
        crate::namespaces::recheck_after_create(&req.shared, &req.res, req.ns(), &key, &obj)
            .await?;
    }
    if req.sub == Sub::Scale {
        return scale_response(req, &obj);
    }
    let mut resp = object_response(
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        &obj,
    );
    findings.warn(resp.headers_mut());
    Ok(resp)
}

/// A write through `/scale`: `new_scale` turns the current Scale into the wanted one (the
/// body of a PUT, or the current Scale patched); only the replica count changes.
fn apply_scale_update(
    req: &Request,
    cur: &Object,
    manager: &str,
    new_scale: impl FnOnce(&Value) -> ApiResult<Value>,
) -> ApiResult<Object> {
    let spec = req
        .info()
        .scale
        .as_ref()
        .ok_or_else(ApiError::path_not_found)?;
    let cur_v = decoded(cur)?;
    let wanted = new_scale(&crate::scale::to_scale(spec, &cur_v))?;
    match crate::scale::apply_scale(req.info(), spec, &cur_v, &wanted) {
        Ok(v) => apply_update(req, &cur_v, v, Some(manager)),
        Err(crate::scale::ScaleError::Api(e)) => Err(e),
        Err(crate::scale::ScaleError::Conflict) => {
            let key = req.object_key()?;
            Err(req.storage_err(&key.conflict(MODIFIED)))
        }
    }
}

pub(super) async fn patch(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    req.query.validate_write("PatchOptions")?;
    let dry_run = req.query.dry_run()?;
    let ct = crate::limits::content_type(&req.headers);
    let accepted = PatchType::accepted(req.info().custom_resource);
    let kind = PatchType::from_content_type(ct)
        .filter(|k| !(req.info().custom_resource && *k == PatchType::StrategicMerge))
        .ok_or_else(|| ApiError::unsupported_patch_type(accepted))?;
    if kind == PatchType::Apply {
        req.query.bool("force")?;
        if req.query.get("fieldManager").is_none_or(str::is_empty) {
            return Err(ApiError::bad_request(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        }
    } else if req.query.get("force").is_some() {
        return Err(ApiError::bad_request(
            "force: Forbidden: may not be specified for non-apply patch",
        ));
    }
    let (patch, duplicates) = Patch::parse_keys(kind, bytes).map_err(|e| e.to_api_error())?;
    RequestObject::record(&req.extensions, || patch.to_value());
    let directive = directive(req);
    // An apply's unknown fields are refused by its typed conversion whatever the
    // directive (as upstream); its duplicates follow the directive.
    let (apply_findings, patch_duplicates) = if kind == PatchType::Apply {
        (
            Findings::duplicates(duplicates).settle_apply(directive)?,
            Findings::default(),
        )
    } else {
        (Findings::default(), Findings::duplicates(duplicates))
    };
    let patch_findings = std::sync::Mutex::new(Findings::default());
    if let Patch::Apply(config) = &patch
        && req.sub != Sub::Scale
    {
        crate::field_validation::refuse_undeclared(kind_schema(req), req.info(), config)?;
    }
    let limits = PatchLimits {
        max_copy_bytes: req.shared.config.max_body_bytes,
    };
    let creates = kind == PatchType::Apply && req.sub == Sub::Main;
    if creates {
        crate::namespaces::check_open(&req.shared, req.info(), req.ns(), req.name()).await?;
    }
    let key = req.object_key()?;
    let unprocessable = |e: crate::patch::PatchError| e.to_api_error();
    let fm = req.field_manager();
    let force = req.query.bool("force")?.unwrap_or(false);
    let applier = req.query.get("fieldManager").unwrap_or("");
    let updater = req.update_manager();
    let (obj, created) = read_modify_write(req, creates, dry_run, |cur| match (cur, &patch) {
        (None, Patch::Apply(config)) if creates => {
            let Value::Object(mut m) = fm.apply(None, config, applier, force)? else {
                return Err(ApiError::bad_request("patch must be an object"));
            };
            let body_name = m
                .get("metadata")
                .and_then(|md| md.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if body_name != req.name() {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({})",
                    echo(body_name),
                    echo(req.name())
                )));
            }
            prepare_create(req.info(), &mut m, req.ns())?;
            // `patch` was authorized; an apply that creates needs `create` too.
            req.authorize_create()?;
            let mut v = Value::Object(m);
            req.admit(&mut v, None)?;
            to_object(req, v)
        }
        (None, _) => Err(req.storage_err(&key.not_found())),
        (Some(cur), _) if req.sub == Sub::Scale => {
            let schema = req.catalog().kind("autoscaling", "v1", "Scale");
            apply_scale_update(req, cur, &updater, |scale| {
                patch.apply(scale, schema, limits).map_err(unprocessable)
            })
        }
        (Some(cur), patch) => {
            let cur_v = decoded(cur)?;
            match patch {
                Patch::Apply(config) => {
                    let applied = fm.apply(Some(&cur_v), config, applier, force)?;
                    apply_update(req, &cur_v, applied, None)
                }
                _ => {
                    let info = req.info();
                    let schema = req.catalog().kind(&info.group, &info.version, &info.kind);
                    let mut patched = patch.apply(&cur_v, schema, limits).map_err(unprocessable)?;
                    let shown = (directive == Directive::Strict).then(|| patched.clone());
                    let mut found = patch_duplicates.clone();
                    let mut unknown = crate::field_validation::prune(schema, &mut patched);
                    if !unknown.is_empty() {
                        // What the stored object already had is dropped, not reported (as
                        // upstream, whose stored objects decode without them).
                        let prior = crate::field_validation::prune(schema, &mut cur_v.clone());
                        unknown.retain(|f| !prior.contains(f));
                    }
                    found.extend(unknown);
                    let found =
                        found.settle_patch(directive, shown.as_ref().unwrap_or(&patched))?;
                    if let Ok(mut slot) = patch_findings.lock() {
                        *slot = found;
                    }
                    apply_update(req, &cur_v, patched, Some(&updater))
                }
            }
        }
    })
    .await?;
    if created && !dry_run {
        crate::namespaces::recheck_after_create(&req.shared, &req.res, req.ns(), &key, &obj)
            .await?;
    }
    if req.sub == Sub::Scale {
        return scale_response(req, &obj);
    }
    let mut resp = object_response(
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        &obj,
    );
    apply_findings.warn(resp.headers_mut());
    if let Ok(found) = patch_findings.lock() {
        found.warn(resp.headers_mut());
    }
    Ok(resp)
}
