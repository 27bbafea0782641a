//! The write verbs over HTTP: create, update (PUT) and patch, through the main resource,
//! `/status` or `/scale` — each decodes the request (its options, its body), calls the
//! kind's registry [`Store`](listwatch_registry::Store) with the request as its
//! [`WriteHooks`] (admission, the `create` authorization of a write that creates, the
//! namespace lifecycle, the audit's object name) and encodes what was stored.
//!
//! Invariants: what a write means (validation, field validation, managedFields, the
//! read-modify-write, dry run) is the registry's (`store.rs`, `store_update.rs`,
//! `store_patch.rs`); this module only maps the request onto its options and the answer
//! onto a response, and records the decoded body for the audit log.

use axum::http::StatusCode;
use axum::response::Response;
use listwatch_registry::field_validation::Directive;
use listwatch_registry::patch::{Patch, PatchType};
use listwatch_registry::store_patch::require_apply_manager;
use listwatch_registry::write::{HookFuture, WriteHooks, Written};
use listwatch_registry::{CreateOptions, PatchOptions, StoreError, UpdateOptions};
use listwatch_storage::Key;
use serde_json::Value;

use super::{Request, RequestObject, RequestObjectName, Sub, object_response, scale_response};
use crate::error::{ApiError, ApiResult};
use crate::negotiate::negotiate_write;

/// The registry's checks that need the request: its user (admission, authorization), the
/// server's namespaces, the audit's slot for the object's name.
impl WriteHooks for Request {
    /// The installed admission hook, if any, on the object about to be stored: its
    /// mutation, then its validation.
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        let Some(hook) = &self.shared.admission else {
            return Ok(());
        };
        let operation = if old.is_some() {
            crate::admission::Operation::Update
        } else {
            crate::admission::Operation::Create
        };
        hook.mutate(
            &crate::admission::MutationRequest {
                operation,
                info: self.info(),
                old,
                dry_run: self.query.dry_run()?,
                extensions: &self.extensions,
            },
            object,
        )?;
        hook.validate(&crate::admission::AdmissionRequest {
            operation,
            info: self.info(),
            namespace: self.ns(),
            name: self.target.name.as_deref(),
            object,
            old,
            extensions: &self.extensions,
        })
    }

    /// Asks the installed authorizer, if any, whether the user may `create` the object this
    /// write is about to create (upstream's `withAuthorization`: the filter authorized a
    /// PUT as `update` and an apply as `patch`, neither of which implies `create`).
    fn authorize_create(&self) -> ApiResult<()> {
        let Some(hook) = &self.shared.authorizer else {
            return Ok(());
        };
        hook.authorize(&crate::authorize::AuthorizationRequest {
            verb: crate::authorize::CREATE,
            info: self.info(),
            subresource: self.sub.name(),
            namespace: self.ns(),
            name: self.name(),
            path: &self.path,
            extensions: &self.extensions,
        })
    }

    fn abandoned(&self, uid: &str) {
        Request::abandoned(self, uid);
    }

    fn named(&self, name: &str) {
        if let Some(slot) = self.extensions.get::<RequestObjectName>() {
            slot.set(name);
        }
    }

    fn check_namespace<'a>(&'a self, namespace: Option<&'a str>, name: &'a str) -> HookFuture<'a> {
        Box::pin(async move {
            let namespaces = self.namespaces_store();
            listwatch_registry::namespace_lifecycle::check_open(
                namespaces.as_ref(),
                self.info(),
                namespace,
                name,
            )
            .await
        })
    }

    fn after_create<'a>(
        &'a self,
        namespace: Option<&'a str>,
        key: &'a Key,
        created: &'a listwatch_api::Object,
    ) -> HookFuture<'a> {
        Box::pin(async move {
            let namespaces = self.namespaces_store();
            listwatch_registry::namespace_lifecycle::recheck_after_create(
                namespaces.as_ref(),
                &self.deleting_store(),
                namespace,
                key,
                created,
            )
            .await
        })
    }
}

/// The `fieldValidation` directive of the request.
fn directive(req: &Request) -> Directive {
    Directive::from_param(req.query.get("fieldValidation"))
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

/// The answer to a write: the stored object (201 when created), or its Scale for a
/// `/scale` write; the body's dropped fields as warnings.
fn written(req: &Request, w: Result<Written, StoreError>) -> ApiResult<Response> {
    let w = w.map_err(|e| e.to_api_error(req.info()))?;
    if req.sub == Sub::Scale {
        return scale_response(req, &w.object);
    }
    let code = if w.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut resp = object_response(code, &w.object);
    w.warnings.warn(resp.headers_mut());
    Ok(resp)
}

pub(super) async fn create(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    req.query.validate_write("CreateOptions")?;
    let dry_run = req.query.dry_run()?;
    let (decoded, duplicates) = crate::limits::decode_object_keys(req.info(), &req.headers, bytes)?;
    record_object(req, &decoded);
    let opts = CreateOptions {
        dry_run,
        field_manager: req.update_manager(),
        field_validation: directive(req),
        duplicate_fields: duplicates,
    };
    let w = req.store().create_with(req.ns(), decoded, &opts, req).await;
    written(req, w)
}

pub(super) async fn update(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    req.query.validate_write("UpdateOptions")?;
    let dry_run = req.query.dry_run()?;
    let (new, duplicates) = crate::limits::decode_object_keys(req.info(), &req.headers, bytes)?;
    record_object(req, &new);
    let opts = UpdateOptions {
        dry_run,
        field_manager: req.update_manager(),
        field_validation: directive(req),
        duplicate_fields: duplicates,
        preconditions: None,
        subresource: req.sub,
    };
    let w = req
        .store()
        .update_with(req.ns(), req.name(), new, &opts, req)
        .await;
    written(req, w)
}

pub(super) async fn patch(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    req.query.validate_write("PatchOptions")?;
    let dry_run = req.query.dry_run()?;
    let ct = crate::limits::content_type(&req.headers);
    // A server-side apply in CBOR (KEP-4222's `application/apply-patch+cbor`) is the same
    // apply as its JSON form; upstream accepts no other patch type in CBOR.
    let cbor_apply = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case(crate::cbor::APPLY_PATCH_CONTENT_TYPE);
    let transcoded;
    let (ct, bytes) = if cbor_apply {
        transcoded = crate::cbor::apply_patch_json(bytes)?;
        ("application/apply-patch+yaml", transcoded.as_slice())
    } else {
        (ct, bytes)
    };
    let accepted = PatchType::accepted(req.info().custom_resource);
    let kind = PatchType::from_content_type(ct)
        .filter(|k| !(req.info().custom_resource && *k == PatchType::StrategicMerge))
        .ok_or_else(|| ApiError::unsupported_patch_type(accepted))?;
    if kind == PatchType::Apply {
        req.query.bool("force")?;
        require_apply_manager(req.query.get("fieldManager").unwrap_or(""))?;
    } else if req.query.get("force").is_some() {
        return Err(ApiError::bad_request(
            "force: Forbidden: may not be specified for non-apply patch",
        ));
    }
    let (patch, duplicates) = Patch::parse_keys(kind, bytes).map_err(|e| e.to_api_error())?;
    RequestObject::record(&req.extensions, || patch.to_value());
    let opts = PatchOptions {
        dry_run,
        // An apply's manager is its `fieldManager` (required above), as `update_manager`
        // reads it.
        field_manager: req.update_manager(),
        force: req.query.bool("force")?.unwrap_or(false),
        field_validation: directive(req),
        duplicate_fields: duplicates,
        preconditions: None,
        subresource: req.sub,
        max_copy_bytes: req.shared.config.max_body_bytes,
    };
    let w = req
        .store()
        .patch_with(req.ns(), req.name(), &patch, &opts, req)
        .await;
    written(req, w)
}
