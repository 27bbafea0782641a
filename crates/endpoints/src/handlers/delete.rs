//! The delete verbs: delete (one object) and deletecollection.
//!
//! Invariants: what a DELETE does to an object is the registry's `Store::delete` (the
//! kind's deletion lifecycle: an object it must keep, for its finalizers or a grace period,
//! is only marked); a collection delete is the registry's `Store::delete_collection` (it
//! checks that every object listed may be deleted before it deletes any). Both stores act
//! as the kubelet for pods as the server's config says.

use axum::http::{StatusCode, header};
use axum::response::Response;

use super::read::list_response;
use super::{Request, object_response};
use crate::error::{ApiError, ApiResult};
use crate::negotiate::negotiate_write;
use crate::stream_list::{Items, ListExtras};
use listwatch_api::Status;
use listwatch_registry::options::DeleteRequest;

pub(super) async fn delete(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    // Before the body is read, as upstream: an immortal namespace is refused whatever the
    // options (the store checks it again).
    crate::validation::check_delete(req.info(), req.name())?;
    let opts = req
        .query
        .delete_options(&crate::cbor::options_body(&req.headers, bytes)?)?;
    let warning = default_propagation_warning(req, &opts);
    let done = req
        .deleting_store()
        .delete(req.ns(), req.name(), &opts)
        .await
        .map_err(|e| e.to_api_error(req.info()))?;
    if crate::lifecycle::is_namespaces(req.info()) && !opts.dry_run {
        req.shared.namespace_wake.notify_one();
    }
    if let (crate::lifecycle::Deletion::Gone(o), false) = (&done, opts.dry_run) {
        req.deleted(o);
    }
    // Upstream: 202 only for an object kept after a DELETE with `orphanDependents: false`.
    let code = match &done {
        crate::lifecycle::Deletion::Pending(_) if opts.orphan_dependents == Some(false) => {
            StatusCode::ACCEPTED
        }
        _ => StatusCode::OK,
    };
    match done {
        // Upstream's `Store.finalizeDelete`: a removed object is answered with a Status
        // unless the resource returns deleted objects (a dry run answers as the real one).
        crate::lifecycle::Deletion::Gone(o) if !req.info().return_deleted_object => {
            let info = req.info();
            let status =
                Status::deleted(&info.group, &info.plural, o.name(), o.uid().unwrap_or(""));
            Ok(with_warning(
                crate::encoded_response(code, "application/json", &status.to_json()),
                warning,
            ))
        }
        crate::lifecycle::Deletion::Gone(o) | crate::lifecycle::Deletion::Pending(o) => {
            Ok(with_warning(object_response(code, &o), warning))
        }
    }
}

/// The kind's warning for a DELETE that leaves the propagation to the kind's default
/// (upstream's job storage: only when neither `propagationPolicy` nor `orphanDependents`
/// was given).
fn default_propagation_warning(req: &Request, opts: &DeleteRequest) -> Option<&'static str> {
    let unset = opts.propagation.is_none() && opts.orphan_dependents.is_none();
    req.info().delete_warning.filter(|_| unset)
}

fn with_warning(mut resp: Response, warning: Option<&'static str>) -> Response {
    if let Some(v) = warning.and_then(listwatch_registry::field_validation::warning_header) {
        resp.headers_mut().append(header::WARNING, v);
    }
    resp
}

pub(super) async fn delete_collection(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    if crate::lifecycle::is_namespaces(req.info()) {
        // Upstream's namespace registry has no collection delete.
        return Err(ApiError::method_not_allowed());
    }
    let opts = req
        .query
        .delete_options(&crate::cbor::options_body(&req.headers, bytes)?)?;
    let warning = default_propagation_warning(req, &opts);
    let lr = req.query.list_options(req.info(), false, None)?;
    let list = req
        .deleting_store()
        .delete_collection(req.ns(), &lr.opts, &opts)
        .await
        .map_err(|e| e.to_api_error(req.info()))?;
    Ok(with_warning(
        list_response(req, Items::Json, ListExtras::default(), list)?,
        warning,
    ))
}
