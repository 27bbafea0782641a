//! The review APIs and the TokenRequest subresource as routes: thin HTTP wrappers around
//! `listwatch_auth::review` and the token issuer. Each is a create-only virtual resource
//! (nothing is stored); the filter has already authenticated and authorized the request
//! (`create` on the review resource, `create` on `serviceaccounts/token`). Each request goes
//! through the API's flow control as any create does ([`Api::virtual_create`]): admitted to
//! its client's flow, its body read within the request-body cap, the body-memory budget and
//! the request deadline, then served on a mutating seat.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use listwatch_api::{Object, SelectableFields};
use listwatch_auth::authn::TokenRequestSpec;
use listwatch_auth::review::{self, ReviewError};
use listwatch_endpoints::{Api, ApiError, Resource};
use listwatch_storage::{GetOptions, Key};
use serde_json::{Value, json};

use super::Security;
use super::filter::Identity;

#[derive(Clone)]
struct Ctx {
    sec: Arc<Security>,
    /// The API whose flow control every review and token request goes through.
    api: Api,
    service_accounts: Option<Resource>,
}

/// A review's answer as upstream's serializer writes it: the typed object's members in its
/// Go struct order (`kind` first; `Object`'s encoding) and a trailing newline.
fn created(v: &Value) -> Response {
    let mut body = match Object::from_value(v.clone(), &SelectableFields::none()) {
        Ok(o) => o.with_json(<[u8]>::to_vec),
        Err(_) => serde_json::to_vec(v).unwrap_or_default(),
    };
    body.push(b'\n');
    let mut resp = (StatusCode::CREATED, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The body as JSON: JSON as sent, or protobuf (what kubectl's typed clients send) decoded
/// for `kind`.
/// Recorded for the audit log as decoded ([`listwatch_endpoints::RequestObject`]).
fn body(parts: &Parts, bytes: &[u8], kind: &str) -> Result<Value, ApiError> {
    let v = decode(&parts.headers, bytes, kind)?;
    if !bytes.is_empty() {
        listwatch_endpoints::RequestObject::record(&parts.extensions, || v.clone());
    }
    Ok(v)
}

pub(crate) fn decode(headers: &HeaderMap, bytes: &[u8], kind: &str) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(json!({}));
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct.starts_with("application/vnd.kubernetes.protobuf") {
        return listwatch_endpoints::protobuf::decode(bytes, kind)
            .map(Value::Object)
            .map_err(|e| ApiError::bad_request(e.to_string()));
    }
    // YAML as upstream's serializer takes it for these bodies too (an Eviction or Binding
    // from a YAML client), within the same decode limits.
    let essence = ct.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/yaml") {
        return listwatch_endpoints::limits::decode_yaml(bytes)
            .map_err(|e| e.into_api_error("YAML"));
    }
    // And CBOR (KEP-4222), as the resource handlers take it (rt6: these endpoints read a
    // CBOR body as JSON and answered 400).
    if essence.eq_ignore_ascii_case("application/cbor") {
        return listwatch_endpoints::limits::decode_cbor_object(bytes).map(Value::Object);
    }
    listwatch_endpoints::limits::decode_json(bytes).map_err(|e| e.into_api_error("JSON"))
}

fn review_err(e: ReviewError) -> ApiError {
    match e {
        ReviewError::BadRequest(m) => ApiError::bad_request(m),
        ReviewError::Invalid(m) => ApiError::unprocessable(m),
    }
}

async fn ssar(State(c): State<Ctx>, req: Request) -> Response {
    c.api
        .virtual_create("selfsubjectaccessreviews", req, |parts, b| async move {
            let id = identity(&parts)?;
            let v = body(&parts, &b, "SelfSubjectAccessReview")?;
            review::self_subject_access_review(c.sec.authz.as_ref(), &id.0, v)
                .map_err(review_err)
                .map(|v| created(&v))
        })
        .await
}

async fn ssrr(State(c): State<Ctx>, req: Request) -> Response {
    c.api
        .virtual_create("selfsubjectrulesreviews", req, |parts, b| async move {
            let id = identity(&parts)?;
            let v = body(&parts, &b, "SelfSubjectRulesReview")?;
            review::self_subject_rules_review(c.sec.authz.as_ref(), &id.0, v)
                .map_err(review_err)
                .map(|v| created(&v))
        })
        .await
}

async fn sar(State(c): State<Ctx>, req: Request) -> Response {
    c.api
        .virtual_create("subjectaccessreviews", req, |parts, b| async move {
            let v = body(&parts, &b, "SubjectAccessReview")?;
            review::subject_access_review(c.sec.authz.as_ref(), v, None)
                .map_err(review_err)
                .map(|v| created(&v))
        })
        .await
}

async fn lsar(State(c): State<Ctx>, Path(ns): Path<String>, req: Request) -> Response {
    c.api
        .virtual_create("localsubjectaccessreviews", req, |parts, b| async move {
            let v = body(&parts, &b, "LocalSubjectAccessReview")?;
            review::subject_access_review(c.sec.authz.as_ref(), v, Some(&ns))
                .map_err(review_err)
                .map(|v| created(&v))
        })
        .await
}

async fn ssr(State(c): State<Ctx>, req: Request) -> Response {
    c.api
        .virtual_create("selfsubjectreviews", req, |parts, b| async move {
            let id = identity(&parts)?;
            let v = body(&parts, &b, "SelfSubjectReview")?;
            review::self_subject_review(&id.0, v)
                .map_err(review_err)
                .map(|v| created(&v))
        })
        .await
}

/// `TokenReview`: the server's token authenticators over `spec.token`
/// (`listwatch_auth::token_review`); `create tokenreviews` was authorized by the filter
/// (upstream's `system:auth-delegator` grants it).
async fn token_review(State(c): State<Ctx>, req: Request) -> Response {
    c.api
        .virtual_create("tokenreviews", req, |parts, b| async move {
            let v = body(&parts, &b, "TokenReview")?;
            let authn = match &c.sec.mode {
                super::Mode::Secure { authn } => Some(authn),
                super::Mode::Insecure => None,
            };
            listwatch_auth::token_review::token_review(authn, &c.sec.api_audiences, v)
                .await
                .map_err(review_err)
                .map(|v| created(&v))
        })
        .await
}

/// The authenticated user the filter put on the request.
fn identity(parts: &Parts) -> Result<Identity, ApiError> {
    parts
        .extensions
        .get::<Identity>()
        .cloned()
        .ok_or_else(|| ApiError::internal("the request carries no user"))
}

async fn token(
    State(c): State<Ctx>,
    Path((ns, name)): Path<(String, String)>,
    req: Request,
) -> Response {
    let api = c.api.clone();
    api.virtual_create("serviceaccounts", req, |parts, b| async move {
        issue_token(&c, &ns, &name, &parts.headers, &b)
            .await
            .map(|v| created(&v))
    })
    .await
}

async fn issue_token(
    c: &Ctx,
    ns: &str,
    name: &str,
    h: &HeaderMap,
    b: &[u8],
) -> Result<Value, ApiError> {
    let (Some(issuer), Some(sa)) = (&c.sec.issuer, &c.service_accounts) else {
        return Err(ApiError::from_status(
            listwatch_api::status::Status::failure(
                404,
                "NotFound",
                "the server could not find the requested resource (TokenRequest needs --service-account-signing-key-file)",
            ),
        ));
    };
    let v = decode(h, b, "TokenRequest")?;
    let spec: TokenRequestSpec = match v.get("spec") {
        Some(s) if !s.is_null() => serde_json::from_value(s.clone()).map_err(|e| {
            ApiError::bad_request(format!(
                "spec: {}",
                listwatch_api::echo::echo(&e.to_string())
            ))
        })?,
        _ => TokenRequestSpec::default(),
    };
    let key = Key::object(&sa.info.storage_resource, Some(ns), name)
        .map_err(|e| ApiError::storage(&e, &sa.info))?;
    let account = sa
        .storage
        .get(&key, &GetOptions::default())
        .await
        .map_err(|e| ApiError::storage(&e, &sa.info))?
        .ok_or_else(|| ApiError::storage(&key.not_found(), &sa.info))?;
    let uid = account.uid().unwrap_or("").to_owned();
    let (token, exp) = issuer.issue(ns, name, &uid, &spec).map_err(|m| {
        ApiError::unprocessable(format!(
            "TokenRequest.authentication.k8s.io {name:?} is invalid: {m}"
        ))
    })?;
    let expiration = listwatch_endpoints::clock::format_rfc3339(exp);
    let audiences = spec.audiences.clone().unwrap_or_default();
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
        "spec": {
            "audiences": audiences,
            "expirationSeconds": spec.expiration_seconds.unwrap_or(listwatch_auth::authn::service_account::DEFAULT_EXPIRATION_SECONDS),
            "boundObjectRef": null,
        },
        "status": {"token": token, "expirationTimestamp": expiration},
    }))
}

/// The review resources of this module's routes, `(group, plural, kind)`: served outside
/// the kind set, so the CRD controller is told their names are taken.
pub const REVIEW_KINDS: &[(&str, &str, &str)] = &[
    (
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
    ),
    (
        "authorization.k8s.io",
        "subjectaccessreviews",
        "SubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
    ),
    (
        "authentication.k8s.io",
        "selfsubjectreviews",
        "SelfSubjectReview",
    ),
    ("authentication.k8s.io", "tokenreviews", "TokenReview"),
];

/// A route of this module: its path (axum's syntax) and its handler.
type ReviewRoute = (&'static str, fn() -> axum::routing::MethodRouter<Ctx>);

/// Every route of this module (one table, so that [`paths`] cannot miss one): each a
/// POST-only virtual resource, authorized by the filter as `create` on it.
const ROUTES: &[ReviewRoute] = &[
    (
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        || post(ssar),
    ),
    (
        "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
        || post(ssrr),
    ),
    ("/apis/authorization.k8s.io/v1/subjectaccessreviews", || {
        post(sar)
    }),
    (
        "/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews",
        || post(lsar),
    ),
    ("/apis/authentication.k8s.io/v1/selfsubjectreviews", || {
        post(ssr)
    }),
    ("/apis/authentication.k8s.io/v1/tokenreviews", || {
        post(token_review)
    }),
    (
        "/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        || post(token),
    ),
];

/// The paths this module serves (axum's syntax: `{ns}`, `{name}` are path segments).
pub fn paths() -> impl Iterator<Item = &'static str> {
    ROUTES.iter().map(|(path, _)| *path)
}

/// The routes, to merge with the API's router (inside the filter).
pub fn router(sec: Arc<Security>, api: &Api) -> Router {
    let service_accounts = api
        .resources()
        .iter()
        .find(|r| r.info.group.is_empty() && r.info.plural == "serviceaccounts")
        .cloned();
    let mut router = Router::new();
    for (path, handler) in ROUTES {
        router = router.route(path, handler());
    }
    router.with_state(Ctx {
        sec,
        api: api.clone(),
        service_accounts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_review_route_is_a_reserved_kind() {
        for path in paths().filter(|p| !p.ends_with("/token")) {
            assert!(
                REVIEW_KINDS.iter().any(|(group, plural, _)| path
                    .starts_with(&format!("/apis/{group}/"))
                    && path.ends_with(&format!("/{plural}"))),
                "{path} is not in REVIEW_KINDS"
            );
        }
        assert_eq!(REVIEW_KINDS.len(), paths().count() - 1);
    }
}
