//! `v1` Binding as routes: `POST /api/v1/namespaces/{ns}/pods/{name}/binding` and the
//! legacy `POST /api/v1/namespaces/{ns}/bindings` assign a pod to a node (upstream's
//! `BindingREST`/`LegacyBindingREST`). Nothing is stored as a Binding: the pod is
//! read-modify-written in its storage, as upstream's `assignPod` does through the pod
//! store's `GuaranteedUpdate`, with the rules of `listwatch_kinds::builtin::core::binding`.
//!
//! Invariants: the filter has authorized `create` on `pods/binding` (or `bindings`); each
//! request goes through the API's flow control as a create ([`Api::virtual_create`]); a
//! pod already bound or being deleted is never changed (409), a missing one is a 404;
//! `dryRun=All` checks without writing; the answer is upstream's `Success` Status, 201.

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use listwatch_api::Object;
use listwatch_endpoints::query::Query;
use listwatch_endpoints::{Api, ApiError, KindSpec};
use listwatch_kinds::builtin::core::binding;
use listwatch_storage::{Error as StorageError, GetOptions, Key};
use serde_json::{Value, json};

async fn pod_binding(
    State(api): State<Api>,
    Path((ns, name)): Path<(String, String)>,
    req: Request,
) -> Response {
    let inner = api.clone();
    api.virtual_create("bindings", req, |parts, b| async move {
        bind(&inner, &ns, Some(&name), &parts, &b).await
    })
    .await
}

async fn bindings(State(api): State<Api>, Path(ns): Path<String>, req: Request) -> Response {
    let inner = api.clone();
    api.virtual_create("bindings", req, |parts, b| async move {
        bind(&inner, &ns, None, &parts, &b).await
    })
    .await
}

fn binding_kind() -> KindSpec {
    KindSpec::new("", "v1", "bindings", "Binding")
}

async fn bind(
    api: &Api,
    ns: &str,
    url_name: Option<&str>,
    parts: &Parts,
    body: &[u8],
) -> Result<Response, ApiError> {
    let dry_run = Query::parse(parts.uri.query()).dry_run()?;
    let v = crate::security::reviews::decode(&parts.headers, body, "Binding")?;
    if !body.is_empty() {
        listwatch_endpoints::RequestObject::record(&parts.extensions, || v.clone());
    }
    // Upstream decodes the body into its Go type first: a mistyped field (a numeric
    // `target.name`) is that decoder's 400, not a validation 422.
    listwatch_registry::typed::check_body(
        &binding_kind(),
        &listwatch_schema::Catalog::builtin(),
        &v,
    )?;
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if url_name.is_some_and(|u| u != name) {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    let body_ns = v
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if name.is_empty() {
        return Err(ApiError::invalid(
            &binding_kind(),
            name,
            &[listwatch_endpoints::FieldError::required(
                "metadata.name",
                "name or generateName is required",
            )],
        ));
    }
    if let Some(why) = binding::malformed(&v) {
        return Err(ApiError::bad_request(why));
    }
    let node = binding::check(&v).map_err(|errs| {
        let causes: Vec<listwatch_endpoints::FieldError> = errs.iter().map(Into::into).collect();
        ApiError::invalid(&binding_kind(), name, &causes)
    })?;
    let annotations = binding::annotations(&v);
    let pods = api
        .resources()
        .get("", "v1", "pods")
        .cloned()
        .ok_or_else(ApiError::path_not_found)?;
    let info = &pods.info;
    let key = Key::object(&info.storage_resource, Some(ns), name)
        .map_err(|e| ApiError::storage(&e, info))?;
    let now = listwatch_endpoints::clock::format_rfc3339(listwatch_endpoints::clock::now_unix());
    let bound = |cur: &Object| -> Result<Object, StorageError> {
        let mut pod = cur.to_value().map_err(|e| StorageError::Internal {
            message: e.to_string(),
        })?;
        binding::preconditions(&v, &pod)
            .and_then(|()| binding::assign(&mut pod, &node, &annotations, &now))
            .map_err(|r| key.conflict(r.to_string()))?;
        Object::from_value(pod, &info.selectable_fields).map_err(|e| StorageError::Internal {
            message: e.to_string(),
        })
    };
    let result = if dry_run {
        match pods.storage.get(&key, &GetOptions::default()).await {
            Ok(Some(cur)) => bound(&cur).map(|_| ()),
            Ok(None) => Err(key.not_found()),
            Err(e) => Err(e),
        }
    } else {
        let mut update = |cur: Option<&Object>| match cur {
            Some(cur) => bound(cur).map(Into::into),
            None => Err(key.not_found()),
        };
        pods.storage
            .guaranteed_update(&key, None, false, &mut update, None)
            .await
            .map(|_| ())
    };
    result.map_err(|e| ApiError::storage(&e, info))?;
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

/// The paths this module serves (axum's syntax).
pub const PATHS: [&str; 2] = [
    "/api/v1/namespaces/{ns}/pods/{name}/binding",
    "/api/v1/namespaces/{ns}/bindings",
];

/// The routes, to merge with the API's router (inside the filter).
pub fn router(api: &Api) -> Router {
    Router::new()
        .route(PATHS[0], post(pod_binding))
        .route(PATHS[1], post(bindings))
        .with_state(api.clone())
}
