//! The OpenAPI v3 documents: `/openapi/v3` (the index) and one document per group-version
//! (`/openapi/v3/api/v1`, `/openapi/v3/apis/{group}/{version}`), as upstream's
//! kube-openapi `handler3` serves them.
//!
//! What it owns:
//! - **The documents**: every path and operation of the group-version's resources
//!   (collection, object, `/status`, `/scale`; with their query parameters, so kubectl
//!   sees `fieldValidation` and leaves validation to the server), each operation tagged
//!   with its `x-kubernetes-action` and `x-kubernetes-group-version-kind` (what `kubectl
//!   explain` looks a resource's kind up by), bodies and responses referring to the real
//!   definitions (`io.k8s.api.core.v1.Pod`, `PodList`, meta's `Status`, `DeleteOptions`,
//!   `Patch`, ...), and `components.schemas` holding exactly the definitions those reach,
//!   from the [`Catalog`] (upstream's definitions with their `x-kubernetes-*` extensions;
//!   custom resources' declared schemas).
//! - **Caching as kube-openapi does it**: each document's ETag is the upper-case hex
//!   SHA-512 of its bytes; the index names each document by a `serverRelativeURL` carrying
//!   `?hash=<etag>`; a request with the current hash gets `Cache-Control: public,
//!   immutable` and an `Expires` a year ahead (kubectl's disk cache keeps it), one with a
//!   stale hash a 301 to the current URL; `If-None-Match` with the ETag is a 304.
//!
//! Invariants: the documents are built once, when the API is built, and never change
//! (the server's resources are fixed at start); a document's hash is its ETag; every
//! `$ref` in a document resolves within its own `components.schemas`. Protobuf documents
//! are not served: a request that accepts only them is 406. `/openapi/v2` (the
//! `openapi_v2` module) is derived from the same per-group-version documents.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use listwatch_schema::Catalog;
use serde_json::{Map, Value, json};

use crate::ErrorResponse;
use crate::Shared;
use crate::resource::{KindSpec, Resource};

const COMPONENTS: &str = "#/components/schemas/";
const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.";
/// How long a client may keep a document fetched by its current hash (kube-openapi: a
/// year).
const IMMUTABLE_FOR_SECS: i64 = 365 * 86_400;

/// One served document.
#[derive(Debug, Default)]
struct Doc {
    body: Bytes,
    etag: String,
}

/// The index and every group-version's document, encoded once.
#[derive(Debug, Default)]
pub(crate) struct Documents {
    index: Doc,
    /// `api/v1` or `apis/{group}/{version}` → its document.
    groups: HashMap<String, Doc>,
}

pub(crate) fn etag(body: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA512, body);
    digest.as_ref().iter().map(|b| format!("{b:02X}")).collect()
}

fn doc(v: &Value) -> Doc {
    let body = Bytes::from(serde_json::to_vec(v).unwrap_or_default());
    Doc {
        etag: etag(&body),
        body,
    }
}

fn server_relative_url(key: &str, etag: &str) -> String {
    format!("/openapi/v3/{key}?hash={etag}")
}

/// The catalog of a server's resources: upstream's definitions, plus every custom resource
/// (and any other resource the built-in definitions do not know, with a schema that keeps
/// every field) added with its declared schema.
pub(crate) fn catalog(resources: &[Resource]) -> Catalog {
    let mut catalog = Catalog::new();
    for r in resources {
        let i = &r.info;
        let known = catalog
            .definition_name(&i.group, &i.version, &i.kind)
            .is_some();
        if known && !i.custom_resource {
            continue;
        }
        let declared = i.custom_schema.as_deref().filter(|_| i.custom_resource);
        if let Err(e) = catalog.add_custom(&i.group, &i.version, &i.kind, declared) {
            tracing::error!(resource = %i.qualified_resource(), error = %e, "the schema of a resource was refused");
            if declared.is_some() && !known {
                // Keep every field rather than serve the kind without a schema.
                let _ = catalog.add_custom(&i.group, &i.version, &i.kind, None);
            }
        }
    }
    catalog
}

/// Builds the index and the documents of every group-version of `resources`, and of the
/// create-only resources the embedding server routes itself (a `POST` on the collection
/// only: what kubectl's validation of `create -f` reads).
pub(crate) fn build(
    resources: &[Resource],
    catalog: &Catalog,
    create_only: &[listwatch_kinds::builtin::create_only::CreateOnly],
) -> Documents {
    let mut out = Documents::default();
    let mut index = Map::new();
    for (key, v) in group_documents(resources, catalog, create_only) {
        let d = doc(&v);
        index.insert(
            key.clone(),
            json!({"serverRelativeURL": server_relative_url(&key, &d.etag)}),
        );
        out.groups.insert(key, d);
    }
    out.index = doc(&json!({"paths": index}));
    out
}

/// The v3 document of every group-version (`api/v1` or `apis/{group}/{version}` → its
/// document), before encoding: what [`build`] serves and `/openapi/v2` is derived from.
pub(crate) fn group_documents(
    resources: &[Resource],
    catalog: &Catalog,
    create_only: &[listwatch_kinds::builtin::create_only::CreateOnly],
) -> Vec<(String, Value)> {
    let top: Vec<KindSpec> = create_only
        .iter()
        .filter(|c| c.subresource().is_none())
        .map(|c| {
            KindSpec::new(c.group, c.version, c.resource, c.kind)
                .namespaced(c.namespaced)
                .only_verbs(&["create"])
        })
        .collect();
    let mut gvs: BTreeMap<(String, String), Vec<&KindSpec>> = BTreeMap::new();
    for info in resources.iter().map(|r| &*r.info).chain(&top) {
        gvs.entry((info.group.clone(), info.version.clone()))
            .or_default()
            .push(info);
    }
    gvs.iter()
        .map(|((group, version), infos)| {
            let key = if group.is_empty() {
                format!("api/{version}")
            } else {
                format!("apis/{group}/{version}")
            };
            (key, document(group, version, infos, catalog))
        })
        .collect()
}

/// `coreV1`, `appsV1`, `rbacAuthorizationV1`, `exampleComV1`: the group-version part of
/// upstream's operation ids.
fn op_prefix(group: &str, version: &str) -> String {
    let group = if group.is_empty() {
        "core"
    } else {
        group.strip_suffix(".k8s.io").unwrap_or(group)
    };
    let mut out = String::new();
    for (i, part) in group.split(['.', '-']).chain([version]).enumerate() {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            if i == 0 {
                out.extend(first.to_lowercase());
            } else {
                out.extend(first.to_uppercase());
            }
            out.push_str(chars.as_str());
        }
    }
    out
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("{COMPONENTS}{name}")})
}

/// A query or path parameter.
fn param(name: &str, location: &str, ty: &str, description: &str) -> Value {
    let mut p = json!({
        "name": name,
        "in": location,
        "description": description,
        "schema": {"type": ty, "uniqueItems": true},
    });
    if location == "path" {
        p["required"] = Value::Bool(true);
    }
    p
}

fn params(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| match *n {
            "allowWatchBookmarks" => param(n, "query", "boolean", "allowWatchBookmarks requests watch events with type \"BOOKMARK\"."),
            "continue" => param(n, "query", "string", "The continue option should be set when retrieving more results from the server."),
            "dryRun" => param(n, "query", "string", "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed"),
            "fieldManager" => param(n, "query", "string", "fieldManager is a name associated with the actor or entity that is making these changes."),
            "fieldSelector" => param(n, "query", "string", "A selector to restrict the list of returned objects by their fields. Defaults to everything."),
            "fieldValidation" => param(n, "query", "string", "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict"),
            "force" => param(n, "query", "boolean", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people."),
            "gracePeriodSeconds" => param(n, "query", "integer", "The duration in seconds before the object should be deleted."),
            "labelSelector" => param(n, "query", "string", "A selector to restrict the list of returned objects by their labels. Defaults to everything."),
            "limit" => param(n, "query", "integer", "limit is a maximum number of responses to return for a list call."),
            "orphanDependents" => param(n, "query", "boolean", "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7."),
            "pretty" => param(n, "query", "string", "If 'true', then the output is pretty printed."),
            "propagationPolicy" => param(n, "query", "string", "Whether and how garbage collection will be performed: 'Orphan', 'Background' or 'Foreground'."),
            "resourceVersion" => param(n, "query", "string", "resourceVersion sets a constraint on what resource versions a request may be served from."),
            "resourceVersionMatch" => param(n, "query", "string", "resourceVersionMatch determines how resourceVersion is applied to list calls."),
            "sendInitialEvents" => param(n, "query", "boolean", "`sendInitialEvents=true` may be set together with `watch=true`: the stream begins with synthetic events of the current state."),
            "timeoutSeconds" => param(n, "query", "integer", "Timeout for the list/watch call."),
            "watch" => param(n, "query", "boolean", "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications."),
            "name" => param(n, "path", "string", "name of the resource"),
            "namespace" => param(n, "path", "string", "object name and auth scope, such as for teams and projects"),
            other => param(other, "query", "string", ""),
        })
        .collect()
}

const LIST_PARAMS: [&str; 10] = [
    "allowWatchBookmarks",
    "continue",
    "fieldSelector",
    "labelSelector",
    "limit",
    "resourceVersion",
    "resourceVersionMatch",
    "sendInitialEvents",
    "timeoutSeconds",
    "watch",
];
const WRITE_PARAMS: [&str; 3] = ["dryRun", "fieldManager", "fieldValidation"];

/// Responses by code, each with the media types served (JSON and YAML).
fn responses(codes: &[&str], schema: &Value, list: bool) -> Value {
    let mut content = json!({
        "application/json": {"schema": schema},
        "application/yaml": {"schema": schema},
    });
    if list {
        content["application/json;stream=watch"] = json!({"schema": schema});
    }
    let mut out = Map::new();
    for code in codes {
        let description = match *code {
            "201" => "Created",
            "202" => "Accepted",
            _ => "OK",
        };
        out.insert(
            (*code).into(),
            json!({"description": description, "content": content}),
        );
    }
    out.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(out)
}

fn body(schema: &Value) -> Value {
    json!({"content": {"*/*": {"schema": schema}}, "required": true})
}

/// The schema a resource's kind is referred to by (its definition, or anything when the
/// catalog has none).
fn kind_schema(
    catalog: &Catalog,
    group: &str,
    version: &str,
    kind: &str,
) -> (Value, Option<String>) {
    match catalog.definition_name(group, version, kind) {
        Some(name) => (reference(name), Some(name.to_owned())),
        None => (
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            None,
        ),
    }
}

/// One operation.
struct Op<'a> {
    id: String,
    action: &'a str,
    gvk: &'a Value,
    params: Vec<Value>,
    body: Option<Value>,
    responses: Value,
    tag: &'a str,
}

impl Op<'_> {
    fn json(self) -> Value {
        let mut op = json!({
            "operationId": self.id,
            "tags": [self.tag],
            "responses": self.responses,
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        });
        if !self.params.is_empty() {
            op["parameters"] = Value::Array(self.params);
        }
        if let Some(b) = self.body {
            op["requestBody"] = b;
        }
        op
    }
}

fn document(group: &str, version: &str, infos: &[&KindSpec], catalog: &Catalog) -> Value {
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let ids = op_prefix(group, version);
    let tag = if group.is_empty() {
        format!("core_{version}")
    } else {
        format!("{}_{version}", op_prefix(group, "").trim_end_matches('_'))
    };
    let mut roots: Vec<String> = ["Status", "DeleteOptions", "Patch", "APIResourceList"]
        .iter()
        .map(|n| format!("{META}{n}"))
        .collect();
    let status = reference(&format!("{META}Status"));
    let delete_options = body(&reference(&format!("{META}DeleteOptions")));
    let mut paths = Map::new();
    paths.insert(
        format!("{prefix}/"),
        json!({"get": {
            "operationId": format!("get{}APIResources", upper_first(&ids)),
            "tags": [tag],
            "description": "get available resources",
            "responses": responses(&["200"], &reference(&format!("{META}APIResourceList")), false),
        }}),
    );
    for info in infos {
        let kind = info.kind.as_str();
        let (item, item_name) = kind_schema(catalog, group, version, kind);
        roots.extend(item_name);
        let (list, list_name) = kind_schema(catalog, group, version, &info.list_kind());
        if info.serves_verb("list") {
            roots.extend(list_name);
        }
        let gvk = json!({"group": group, "version": version, "kind": kind});
        let scoped = if info.namespaced {
            format!("Namespaced{kind}")
        } else {
            kind.to_owned()
        };
        let (collection, object, scope_params): (String, String, &[&str]) = if info.namespaced {
            (
                format!("{prefix}/namespaces/{{namespace}}/{}", info.plural),
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", info.plural),
                &["namespace", "pretty"],
            )
        } else {
            (
                format!("{prefix}/{}", info.plural),
                format!("{prefix}/{}/{{name}}", info.plural),
                &["pretty"],
            )
        };
        let op = |verb: &str, action: &'static str, suffix: &str| Op {
            id: format!("{verb}{}{scoped}{suffix}", upper_first(&ids)),
            action,
            gvk: &gvk,
            params: Vec::new(),
            body: None,
            responses: Value::Null,
            tag: &tag,
        };
        let mut coll = Map::new();
        coll.insert("parameters".into(), Value::Array(params(scope_params)));
        if info.verbs.is_some_and(|v| v == ["create"]) {
            coll.insert(
                "post".into(),
                Op {
                    params: params(&WRITE_PARAMS),
                    body: Some(body(&item)),
                    responses: responses(&["200", "201", "202"], &item, false),
                    ..op("create", "post", "")
                }
                .json(),
            );
            paths.insert(collection, Value::Object(coll));
            continue;
        }
        coll.insert(
            "get".into(),
            Op {
                params: params(&LIST_PARAMS),
                responses: responses(&["200"], &list, true),
                ..op("list", "list", "")
            }
            .json(),
        );
        coll.insert(
            "post".into(),
            Op {
                params: params(&WRITE_PARAMS),
                body: Some(body(&item)),
                responses: responses(&["200", "201", "202"], &item, false),
                ..op("create", "post", "")
            }
            .json(),
        );
        if !crate::lifecycle::is_namespaces(info) {
            let mut p = params(&["continue", "dryRun", "fieldSelector", "gracePeriodSeconds"]);
            p.extend(params(&[
                "labelSelector",
                "limit",
                "orphanDependents",
                "propagationPolicy",
                "resourceVersion",
                "resourceVersionMatch",
                "sendInitialEvents",
                "timeoutSeconds",
            ]));
            coll.insert(
                "delete".into(),
                Op {
                    params: p,
                    body: Some(delete_options.clone()),
                    responses: responses(&["200"], &status, false),
                    ..op("delete", "deletecollection", "")
                }
                .json(),
            );
        }
        paths.insert(collection, Value::Object(coll));
        if info.namespaced {
            let all = Op {
                id: format!("list{}{kind}ForAllNamespaces", upper_first(&ids)),
                params: params(&LIST_PARAMS),
                responses: responses(&["200"], &list, true),
                ..op("list", "list", "")
            };
            paths.insert(
                format!("{prefix}/{}", info.plural),
                json!({"get": all.json(), "parameters": params(&["pretty"])}),
            );
        }
        let mut object_params = params(&["name"]);
        object_params.extend(params(scope_params));
        let mut patch_types = vec![
            "application/json-patch+json",
            "application/merge-patch+json",
        ];
        if !info.custom_resource {
            patch_types.push("application/strategic-merge-patch+json");
        }
        patch_types.push("application/apply-patch+yaml");
        let patch_body = {
            let schema = reference(&format!("{META}Patch"));
            let content: Map<String, Value> = patch_types
                .iter()
                .map(|t| ((*t).to_owned(), json!({"schema": schema})))
                .collect();
            json!({"content": content, "required": true})
        };
        let object_ops = |suffix: &str, schema: &Value, gvk_here: &Value| {
            let opx = |verb: &str, action: &'static str| Op {
                gvk: gvk_here,
                ..op(verb, action, suffix)
            };
            let mut m = Map::new();
            m.insert("parameters".into(), Value::Array(object_params.clone()));
            m.insert(
                "get".into(),
                Op {
                    responses: responses(&["200"], schema, false),
                    ..opx("read", "get")
                }
                .json(),
            );
            m.insert(
                "put".into(),
                Op {
                    params: params(&WRITE_PARAMS),
                    body: Some(body(schema)),
                    responses: responses(&["200", "201"], schema, false),
                    ..opx("replace", "put")
                }
                .json(),
            );
            let mut patch_params = params(&WRITE_PARAMS);
            patch_params.extend(params(&["force"]));
            m.insert(
                "patch".into(),
                Op {
                    params: patch_params,
                    body: Some(patch_body.clone()),
                    responses: responses(&["200", "201"], schema, false),
                    ..opx("patch", "patch")
                }
                .json(),
            );
            m
        };
        let mut obj = object_ops("", &item, &gvk);
        obj.insert(
            "delete".into(),
            Op {
                params: params(&[
                    "dryRun",
                    "gracePeriodSeconds",
                    "orphanDependents",
                    "propagationPolicy",
                ]),
                body: Some(delete_options.clone()),
                responses: responses(&["200", "202"], &status, false),
                ..op("delete", "delete", "")
            }
            .json(),
        );
        paths.insert(object.clone(), Value::Object(obj));
        if info.status_subresource {
            paths.insert(
                format!("{object}/status"),
                Value::Object(object_ops("Status", &item, &gvk)),
            );
        }
        if info.finalize_subresource {
            // Upstream's `FinalizeREST` only updates (`replace…Finalize`).
            let mut ops = object_ops("Finalize", &item, &gvk);
            ops.remove("get");
            ops.remove("patch");
            paths.insert(format!("{object}/finalize"), Value::Object(ops));
        }
        if info.scale.is_some() {
            let (scale, scale_name) = kind_schema(catalog, "autoscaling", "v1", "Scale");
            roots.extend(scale_name);
            let scale_gvk = json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
            paths.insert(
                format!("{object}/scale"),
                Value::Object(object_ops("Scale", &scale, &scale_gvk)),
            );
        }
    }
    let names: Vec<&str> = roots.iter().map(String::as_str).collect();
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::KUBE_GIT_VERSION},
        "paths": paths,
        "components": {"schemas": catalog.components(&names)},
    })
}

fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Whether `If-None-Match` names `etag` (or is `*`), weak tags compared weakly.
pub(crate) fn not_modified(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim())
        .any(|t| t == "*" || t.trim_start_matches("W/").trim_matches('"') == etag)
}

fn served(d: &Doc, headers: &HeaderMap, extra: &[(header::HeaderName, String)]) -> Response {
    let quoted = format!("\"{}\"", d.etag);
    let mut resp = if not_modified(headers, &d.etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = (StatusCode::OK, d.body.clone()).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&quoted) {
        h.insert(header::ETAG, v);
    }
    for (name, value) in extra {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name.clone(), v);
        }
    }
    resp
}

/// `GET /openapi/v3`.
pub(crate) async fn index(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let derived = s.derived(&s.kinds());
    served(&derived.openapi().index, &headers, &[])
}

/// Whether `Accept` lets a JSON document be served (as kube-openapi's negotiation: JSON,
/// `application/*`, `*/*`; protobuf, which is not served here, does not count).
fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    if accept.trim().is_empty() {
        return true;
    }
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let refused = parts.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        !refused
            && matches!(
                essence.as_str(),
                "application/json" | "application/*" | "*/*"
            )
    })
}

/// `GET /openapi/v3/{api/v1 | apis/group/version}[?hash=...]`.
pub(crate) async fn group_version(
    State(s): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let key = uri
        .path()
        .trim_start_matches("/openapi/v3/")
        .trim_end_matches('/');
    let derived = s.derived(&s.kinds());
    let Some(d) = derived.openapi().groups.get(key) else {
        return crate::ApiError::path_not_found().into_response();
    };
    let vary = (header::VARY, "Accept".to_owned());
    if !accepts_json(&headers) {
        let mut r = StatusCode::NOT_ACCEPTABLE.into_response();
        r.headers_mut()
            .insert(header::VARY, HeaderValue::from_static("Accept"));
        return r;
    }
    let hash = uri.query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "hash")
            .map(|(_, v)| v.into_owned())
    });
    match hash.filter(|h| !h.is_empty()) {
        None => served(d, &headers, &[vary]),
        Some(h) if h != d.etag => {
            let location = server_relative_url(key, &d.etag);
            let mut r = StatusCode::MOVED_PERMANENTLY.into_response();
            if let Ok(v) = HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r.headers_mut()
                .insert(header::VARY, HeaderValue::from_static("Accept"));
            r
        }
        Some(_) => {
            let expires =
                crate::clock::format_http_date(crate::clock::now_unix() + IMMUTABLE_FOR_SECS);
            served(
                d,
                &headers,
                &[
                    vary,
                    (header::CACHE_CONTROL, "public, immutable".to_owned()),
                    (header::EXPIRES, expires),
                ],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources() -> Vec<Resource> {
        let store: Arc<dyn listwatch_storage::Storage> =
            Arc::new(listwatch_memstore::MemStore::new());
        let mk = |info: KindSpec| Resource::new(info, Arc::clone(&store));
        vec![
            mk(KindSpec::new("", "v1", "pods", "Pod").status_subresource(true)),
            mk(KindSpec::new("", "v1", "namespaces", "Namespace").namespaced(false)),
            mk(KindSpec::new("apps", "v1", "deployments", "Deployment")
                .scale(crate::ScaleSubresource::replicas())),
            mk(
                KindSpec::new("example.com", "v1", "widgets", "Widget").custom_resource(Some(
                    json!({"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"color": {"type": "string", "description": "The colour."}}}}}),
                )),
            ),
        ]
    }

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    if k == "$ref" {
                        out.extend(x.as_str().map(str::to_owned));
                    } else {
                        refs(x, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn documents_refer_to_the_real_definitions_and_hold_all_they_reach() {
        let rs = resources();
        let catalog = catalog(&rs);
        let docs = build(&rs, &catalog, &[]);
        let index: Value = serde_json::from_slice(&docs.index.body).unwrap();
        for (key, d) in &docs.groups {
            assert_eq!(
                index["paths"][key]["serverRelativeURL"],
                format!("/openapi/v3/{key}?hash={}", d.etag)
            );
            assert_eq!(d.etag.len(), 128);
            assert_eq!(d.etag, etag(&d.body));
            let v: Value = serde_json::from_slice(&d.body).unwrap();
            let mut all = Vec::new();
            refs(&v, &mut all);
            let schemas = v["components"]["schemas"].as_object().unwrap();
            for r in &all {
                let name = r.strip_prefix(COMPONENTS).unwrap();
                assert!(schemas.contains_key(name), "{key}: {r} does not resolve");
            }
        }
        let core: Value = serde_json::from_slice(&docs.groups["api/v1"].body).unwrap();
        let pods = &core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"];
        assert_eq!(
            pods["get"]["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.Pod"
        );
        assert_eq!(
            pods["patch"]["x-kubernetes-group-version-kind"]["kind"],
            "Pod"
        );
        assert!(
            pods["patch"]["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        let containers = &core["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]
            ["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-list-type"], "map");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        let schemas = core["components"]["schemas"].as_object().unwrap();
        assert!(!schemas.contains_key("io.k8s.api.apps.v1.Deployment"));
        assert!(
            core["paths"]
                .get("/api/v1/namespaces/{namespace}/pods/{name}/status")
                .is_some()
        );
        assert!(
            core["paths"]["/api/v1/namespaces"].get("delete").is_none(),
            "namespaces have no collection delete"
        );
        let apps: Value = serde_json::from_slice(&docs.groups["apis/apps/v1"].body).unwrap();
        let scale = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"];
        assert_eq!(
            scale["get"]["x-kubernetes-group-version-kind"]["kind"],
            "Scale"
        );
        assert!(
            apps["components"]["schemas"]
                .get("io.k8s.api.autoscaling.v1.Scale")
                .is_some()
        );
        let custom: Value =
            serde_json::from_slice(&docs.groups["apis/example.com/v1"].body).unwrap();
        let w = &custom["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(
            w["properties"]["spec"]["properties"]["color"]["description"],
            "The colour."
        );
        let patch = &custom["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]
            ["patch"]["requestBody"]["content"];
        assert!(patch.get("application/merge-patch+json").is_some());
        assert!(
            patch
                .get("application/strategic-merge-patch+json")
                .is_none()
        );
        assert_eq!(
            core["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"]["operationId"],
            "listCoreV1NamespacedPod"
        );
        assert_eq!(
            op_prefix("rbac.authorization.k8s.io", "v1"),
            "rbacAuthorizationV1"
        );
        assert_eq!(op_prefix("example.com", "v1"), "exampleComV1");
    }

    #[test]
    fn conditional_requests_and_negotiation() {
        let d = doc(&json!({"a": 1}));
        let mut h = HeaderMap::new();
        assert_eq!(served(&d, &h, &[]).status(), StatusCode::OK);
        h.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(&format!("\"x\", W/\"{}\"", d.etag)).unwrap(),
        );
        assert_eq!(served(&d, &h, &[]).status(), StatusCode::NOT_MODIFIED);
        let accept = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            accepts_json(&h)
        };
        assert!(accepts_json(&HeaderMap::new()));
        assert!(accept("application/json"));
        assert!(accept(
            "application/com.github.proto-openapi.spec.v3@v1.0+protobuf, */*;q=0.1"
        ));
        assert!(!accept(
            "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"
        ));
        assert!(!accept("application/json;q=0"));
        assert!(!accept("text/html"));
    }
}
