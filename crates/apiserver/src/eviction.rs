//! `pods/eviction` as a route: `POST /api/v1/namespaces/{ns}/pods/{name}/eviction` with a
//! `policy/v1` (or `policy/v1beta1`) Eviction deletes the pod when its PodDisruptionBudget
//! allows it (upstream's `EvictionREST`). Storage only: no disruption controller keeps the
//! budgets' status, so `status.disruptionsAllowed` is what a client (or a test) wrote. The
//! rules are `listwatch_kinds::builtin::policy::eviction`'s; this module reads and writes.
//!
//! Invariants: the filter has authorized `create` on `pods/eviction`; each request goes
//! through the API's flow control as a create ([`Api::virtual_create`]). The
//! `deleteOptions` preconditions (uid, resourceVersion) are checked against the pod before
//! any budget is read or spent: a mismatch is the deletion's 409 and changes nothing. A pod that has
//! ended, is `Pending` or is being deleted, or that no budget covers, is deleted with the
//! eviction's `deleteOptions`; a pod covered by more than one budget is a 500 and nothing
//! changes; with one budget, a ready pod is deleted only after `disruptionsAllowed` was
//! lowered by one in the budget's storage (a read-modify-write that retries on conflict),
//! and a pod that is not ready only as [`eviction::unhealthy_may_go`] allows (then with a
//! resourceVersion precondition, so a pod that became ready meanwhile stays). Before a
//! deletion the pod gets the `DisruptionTarget` condition. `dryRun=All` (in the query or the
//! eviction's `deleteOptions`) writes nothing. The answer is upstream's `Success` Status,
//! 201.

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use listwatch_api::{Object, Status};
use listwatch_endpoints::query::Query;
use listwatch_endpoints::{Api, ApiError, KindSpec, Resource};
use listwatch_kinds::builtin::policy::eviction;
use listwatch_registry::options::DeleteRequest;
use listwatch_storage::{Error as StorageError, GetOptions, Key, ListOptions, Preconditions};
use serde_json::{Value, json};

async fn pod_eviction(
    State(api): State<Api>,
    Path((ns, name)): Path<(String, String)>,
    req: Request,
) -> Response {
    let inner = api.clone();
    api.virtual_create("pods", req, |parts, b| async move {
        evict(&inner, &ns, &name, &parts, &b).await
    })
    .await
}

fn resource(api: &Api, group: &str, plural: &str) -> Result<Resource, ApiError> {
    api.resources()
        .get(group, "v1", plural)
        .cloned()
        .ok_or_else(ApiError::path_not_found)
}

fn internal(e: impl std::fmt::Display) -> StorageError {
    StorageError::Internal {
        message: e.to_string(),
    }
}

/// The eviction's delete options: its `deleteOptions` with the query's `dryRun` (upstream's
/// `propagateDryRun`: both set and different is a 400).
fn delete_request(query: &Query, v: &Value) -> Result<DeleteRequest, ApiError> {
    let query_dry = query.dry_run()?;
    let body = eviction::delete_options(v);
    let mut d = if body.is_empty() {
        DeleteRequest::default()
    } else {
        Query::parse(None).delete_options(&body)?
    };
    let body_dry = v
        .pointer("/deleteOptions/dryRun")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if query_dry && body_dry != d.dry_run {
        return Err(ApiError::bad_request(
            "Non-matching dry-run options in request and content",
        ));
    }
    if query_dry && !body_dry {
        // The query's dry run with no dryRun in the body: the body's options are dry too.
        d.dry_run = true;
    }
    Ok(d)
}

async fn evict(
    api: &Api,
    ns: &str,
    name: &str,
    parts: &Parts,
    body: &[u8],
) -> Result<Response, ApiError> {
    let query = Query::parse(parts.uri.query());
    let v = crate::security::reviews::decode(&parts.headers, body, "Eviction")?;
    if !body.is_empty() {
        listwatch_endpoints::RequestObject::record(&parts.extensions, || v.clone());
    }
    // Decoded into upstream's Go type first: a mistyped field is the decoder's 400.
    let kind = KindSpec::new("policy", "v1", "evictions", "Eviction");
    listwatch_registry::typed::check_body(&kind, &listwatch_schema::Catalog::builtin(), &v)?;
    eviction::check_body(&v, ns, name).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut opts = delete_request(&query, &v)?;
    let pods = resource(api, "", "pods")?;
    let info = &pods.info;
    let key = Key::object(&info.storage_resource, Some(ns), name)
        .map_err(|e| ApiError::storage(&e, info))?;
    let pod = match pods.storage.get(&key, &GetOptions::default()).await {
        Ok(Some(p)) => p,
        Ok(None) => return Err(ApiError::storage(&key.not_found(), info)),
        Err(e) => return Err(ApiError::storage(&e, info)),
    };
    // Every precondition of the eviction's deleteOptions (uid, resourceVersion) is checked
    // against the pod read here before a budget is read or spent: a request for a pod that
    // is gone (another with its name) or changed spends nothing. The deletion checks them
    // again, against the pod as it is then.
    if let Some(pre) = &opts.preconditions {
        pre.check(&key, &pod)
            .map_err(|e| ApiError::storage(&e, info))?;
    }
    let pod_v = pod
        .to_value()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    if !eviction::can_ignore_budgets(&pod_v) {
        let budgets = covering_budgets(api, ns, &pod_v).await?;
        match budgets.as_slice() {
            [] => {}
            [pdb] => {
                if !eviction::is_ready(&pod_v) && eviction::unhealthy_may_go(pdb) {
                    // Deleted only as it was seen (upstream's `updateDeletionOptions`).
                    let pre = opts
                        .preconditions
                        .get_or_insert_with(Preconditions::default);
                    if pre.resource_version.is_none() {
                        pre.resource_version = Some(pod.resource_version());
                    }
                } else {
                    spend_budget(api, ns, pdb, name, opts.dry_run).await?;
                }
            }
            _ => {
                return Err(ApiError::from_status(
                    Status::failure(
                        500,
                        listwatch_api::status::reason::INTERNAL_ERROR,
                        "Internal error occurred: This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                    )
                    .with_cause(
                        "",
                        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                        "",
                    ),
                ));
            }
        }
    }
    mark_and_delete(api, &pods, ns, name, &key, &mut opts).await?;
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Success", "code": 201});
    let mut resp = (
        StatusCode::CREATED,
        serde_json::to_vec(&status).unwrap_or_default(),
    )
        .into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// The budgets of `ns` covering the pod.
async fn covering_budgets(api: &Api, ns: &str, pod: &Value) -> Result<Vec<Value>, ApiError> {
    let pdbs = resource(api, "policy", "poddisruptionbudgets")?;
    let info = &pdbs.info;
    let coll = Key::collection(&info.storage_resource, Some(ns))
        .map_err(|e| ApiError::storage(&e, info))?;
    let list = pdbs
        .storage
        .list(&coll, &ListOptions::recursive())
        .await
        .map_err(|e| ApiError::storage(&e, info))?;
    Ok(list
        .items
        .iter()
        .filter_map(|o| o.to_value().ok())
        .filter(|b| eviction::covers(b, pod))
        .collect())
}

fn refused(kind: &KindSpec, pdb: &str, r: &eviction::Refused) -> ApiError {
    use eviction::Refused;
    let msg = r.to_string();
    match r {
        Refused::Processing(_) | Refused::Budget { .. } => {
            let retry = if matches!(r, Refused::Processing(_)) {
                10
            } else {
                0
            };
            ApiError::from_status(
                Status::failure(
                    429,
                    listwatch_api::status::reason::TOO_MANY_REQUESTS,
                    eviction::TOO_MANY_MESSAGE,
                )
                .with_retry_after(retry)
                .with_cause(eviction::CAUSE, &msg, ""),
            )
        }
        Refused::Negative | Refused::TooManyDisrupted => ApiError::forbidden(kind, pdb, &msg),
    }
}

/// Lowers the budget's `disruptionsAllowed` by one (upstream's `checkAndDecrement` under
/// `RetryOnConflict`: the storage's read-modify-write re-reads and re-checks on conflict).
async fn spend_budget(
    api: &Api,
    ns: &str,
    pdb: &Value,
    pod: &str,
    dry_run: bool,
) -> Result<(), ApiError> {
    let pdbs = resource(api, "policy", "poddisruptionbudgets")?;
    let info = &pdbs.info;
    let pdb_name = pdb
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let now = listwatch_endpoints::clock::format_rfc3339(listwatch_endpoints::clock::now_unix());
    if dry_run {
        let mut copy = pdb.clone();
        return eviction::decrement(&mut copy, pod, &now, true)
            .map_err(|r| refused(info, pdb_name, &r));
    }
    let key = Key::object(&info.storage_resource, Some(ns), pdb_name)
        .map_err(|e| ApiError::storage(&e, info))?;
    let mut why: Option<eviction::Refused> = None;
    let mut update = |cur: Option<&Object>| {
        let Some(cur) = cur else {
            return Err(key.not_found());
        };
        let mut b = cur.to_value().map_err(internal)?;
        match eviction::decrement(&mut b, pod, &now, false) {
            Ok(()) => Object::from_value(b, &info.selectable_fields)
                .map(Into::into)
                .map_err(internal),
            Err(r) => {
                let e = key.conflict(r.to_string());
                why = Some(r);
                Err(e)
            }
        }
    };
    let result = pdbs
        .storage
        .guaranteed_update(&key, None, false, &mut update, None)
        .await;
    match (result, why) {
        (Ok(_), _) => Ok(()),
        (Err(_), Some(r)) => Err(refused(info, pdb_name, &r)),
        (Err(e), None) => Err(ApiError::storage(&e, info)),
    }
}

/// Upstream's `addConditionAndDeletePod`: the `DisruptionTarget` condition (unless a dry
/// run), then the deletion with the eviction's options (a resourceVersion precondition
/// moved to the version the condition wrote).
async fn mark_and_delete(
    api: &Api,
    pods: &Resource,
    ns: &str,
    name: &str,
    key: &Key,
    opts: &mut DeleteRequest,
) -> Result<(), ApiError> {
    let info = &pods.info;
    if !opts.dry_run {
        let now =
            listwatch_endpoints::clock::format_rfc3339(listwatch_endpoints::clock::now_unix());
        let mut update = |cur: Option<&Object>| {
            let Some(cur) = cur else {
                return Err(key.not_found());
            };
            let mut p = cur.to_value().map_err(internal)?;
            eviction::mark_disruption_target(&mut p, &now);
            Object::from_value(p, &info.selectable_fields)
                .map(Into::into)
                .map_err(internal)
        };
        let marked = pods
            .storage
            .guaranteed_update(key, opts.preconditions.as_ref(), false, &mut update, None)
            .await
            .map_err(|e| ApiError::storage(&e, info))?;
        if let Some(pre) = opts
            .preconditions
            .as_mut()
            .filter(|p| p.resource_version.is_some())
        {
            pre.resource_version = Some(marked.resource_version());
        }
    }
    api.store(pods)
        .delete(Some(ns), name, opts)
        .await
        .map_err(|e| e.to_api_error(info))?;
    Ok(())
}

/// The path this module serves (axum's syntax).
pub const PATHS: [&str; 1] = ["/api/v1/namespaces/{ns}/pods/{name}/eviction"];

/// The routes, to merge with the API's router (inside the filter).
pub fn router(api: &Api) -> Router {
    Router::new()
        .route(PATHS[0], post(pod_eviction))
        .with_state(api.clone())
}
