//! The delete verbs: delete (one object) and deletecollection.
//!
//! Invariants: what a DELETE does to an object is `lifecycle`'s decision (an object it must
//! keep, for its finalizers or a grace period, is only marked); a collection delete is the
//! registry's `Store::delete_collection` (it checks that every object listed may be deleted
//! before it deletes any).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;

use super::read::list_response;
use super::{Request, object_response};
use crate::error::{ApiError, ApiResult};
use crate::negotiate::negotiate_write;
use crate::stream_list::Items;
use listwatch_api::Status;

pub(super) async fn delete(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    crate::validation::check_delete(req.info(), req.name())?;
    let opts = req.query.delete_options(bytes)?;
    let key = req.object_key()?;
    let kubelet = crate::lifecycle::Kubelet::of(req.shared.config.acknowledge_pod_deletion);
    let done = crate::lifecycle::delete(req.res.storage.as_ref(), req.info(), &key, &opts, kubelet)
        .await
        .map_err(|e| req.storage_err(&e))?;
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
            Ok(crate::encoded_response(
                code,
                "application/json",
                &status.to_json(),
            ))
        }
        crate::lifecycle::Deletion::Gone(o) | crate::lifecycle::Deletion::Pending(o) => {
            Ok(object_response(code, &o))
        }
    }
}

pub(super) async fn delete_collection(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate_write(&req.headers)?;
    if crate::lifecycle::is_namespaces(req.info()) {
        // Upstream's namespace registry has no collection delete.
        return Err(ApiError::method_not_allowed());
    }
    let opts = req.query.delete_options(bytes)?;
    let lr = req.query.list_options(req.info(), false, None)?;
    let store = listwatch_registry::Store::with_catalog(
        Arc::clone(&req.res.info),
        Arc::clone(&req.res.storage),
        Arc::clone(&req.shared.derived(&req.kinds).catalog),
    )
    .with_kubelet(crate::lifecycle::Kubelet::of(
        req.shared.config.acknowledge_pod_deletion,
    ));
    let list = store
        .delete_collection(req.ns(), &lr.opts, &opts)
        .await
        .map_err(|e| e.to_api_error(req.info()))?;
    list_response(req, Items::Json, list)
}
