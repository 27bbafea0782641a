//! The delete verbs: delete (one object) and deletecollection.
//!
//! Invariants: what a DELETE does to an object is `lifecycle`'s decision (an object it must
//! keep, for its finalizers or a grace period, is only marked); a collection delete checks
//! that every object listed may be deleted before it deletes any.

use axum::http::StatusCode;
use axum::response::Response;
use listwatch_storage::Key;

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
        req.shared.namespace_wake.wake();
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
    let key = req.collection_key()?;
    let mut list = req
        .res
        .storage
        .list(&key, &lr.opts)
        .await
        .map_err(|e| req.storage_err(&e))?;
    for o in &list.items {
        crate::validation::check_delete(req.info(), o.name())?;
    }
    let mut deleted = Vec::with_capacity(list.items.len());
    let kubelet = crate::lifecycle::Kubelet::of(req.shared.config.acknowledge_pod_deletion);
    for o in std::mem::take(&mut list.items) {
        let k = Key::object(&req.info().storage_resource, o.namespace(), o.name())
            .map_err(|e| req.storage_err(&e))?;
        match crate::lifecycle::delete(req.res.storage.as_ref(), req.info(), &k, &opts, kubelet)
            .await
        {
            Ok(crate::lifecycle::Deletion::Gone(d)) => {
                if !opts.dry_run {
                    req.deleted(&d);
                }
                deleted.push(d);
            }
            Ok(crate::lifecycle::Deletion::Pending(d)) => deleted.push(d),
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(req.storage_err(&e)),
        }
    }
    list.items = deleted;
    list.continue_token = None;
    list.remaining_item_count = None;
    list_response(req, Items::Json, list)
}
