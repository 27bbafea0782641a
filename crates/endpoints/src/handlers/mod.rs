//! Request handling: routing a parsed path to a verb, limits, and the per-verb handlers.
//!
//! Invariants:
//! - every request passes flow control ([`crate::flowcontrol`]) before it touches storage:
//!   a watch takes a watch slot; any other request is admitted to its client's flow, has
//!   its body read (within its deadline: 408 past it), then takes a read-only or mutating
//!   seat; a refusal is a 429 and nothing else happens;
//! - bodies are read with a hard cap (413 beyond it) and into the body-memory budget before
//!   anything is parsed;
//! - writes go to the resource's storage only (never a cache), and `dryRun=All` writes
//!   nothing at all;
//! - handlers return `ApiResult<Response>`; errors become responses in one place
//!   ([`ApiError`]'s `IntoResponse`).
//!
//! This module routes and limits; the verbs live in its submodules: `read` (get, list,
//! watch), `write` (create, update, patch: decode, the registry's `Store`, encode) and
//! `delete` (delete, deletecollection). The helpers every verb uses (the resolved
//! [`Request`], the object and `/scale` responses) stay here.

mod delete;
mod read;
mod work;
mod write;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::Response;
use bytes::Bytes;
use listwatch_api::Object;
use listwatch_registry::Store;
use listwatch_registry::write::decoded;
use listwatch_storage::{Error as StorageError, Key};
use serde_json::Value;
use tokio::time::Instant;

use crate::ErrorResponse;
use crate::error::{ApiError, ApiResult};
use crate::flowcontrol::{ClientKey, Exempt, queue_wait_limit};
use crate::negotiate::{Format, Offer, negotiate};
use crate::path::{self, ApiPath, PathError, Target};
use crate::query::Query;
use crate::request_info::RequestInfo;
use crate::resource::{KindSpec, Resource};
use crate::{Shared, json_response};

use self::delete::{delete, delete_collection};
use self::read::{get, list, watch_request};
use self::write::{create, patch, update};

/// The verb of a resource request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    fn metric_name(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::List => "LIST",
            Verb::Watch => "WATCH",
            Verb::Create => "POST",
            Verb::Update => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
            Verb::DeleteCollection => "DELETECOLLECTION",
        }
    }

    /// The verb as discovery names it.
    fn discovery_name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// Whether the verb reads a request body.
    fn has_body(self) -> bool {
        !matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

/// Which part of an object a request addresses (the registry's [`Subresource`]).
use listwatch_registry::Subresource as Sub;

/// The name of the object a create writes, for the audit filter (upstream's
/// `LogRequestObject` completes the event's `objectRef` from the decoded object): a filter
/// inserts an empty slot into the request's extensions and the create handler fills it once
/// the body is decoded and the name settled (for a `generateName` create, the generated
/// name) — before admission and storage, so a refused create is named too.
#[derive(Debug, Clone, Default)]
pub struct RequestObjectName(Arc<std::sync::Mutex<Option<String>>>);

impl RequestObjectName {
    /// The name, once the handler has set it (a `generateName` create that retried on a
    /// name collision: the last name tried).
    pub fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, name: &str) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(name.to_owned());
    }
}

/// The object a write's handler decoded from its body, for the audit filter: upstream's
/// `LogRequestObject` / `LogRequestPatch` record what the handler decoded, so the audit
/// event's `requestObject` follows the handler's decoding rules (the URL's kind for a
/// protobuf body, YAML for both apply types) rather than a second reading of the body. A
/// filter inserts an empty slot into the request's extensions; the create, update and patch
/// handlers (and the review APIs) fill it once the body decodes.
#[derive(Debug, Clone, Default)]
pub struct RequestObject(Arc<std::sync::Mutex<Option<Value>>>);

impl RequestObject {
    /// The decoded body, once a handler has set it; taken, so it is recorded once.
    pub fn take(&self) -> Option<Value> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Records the decoded body.
    pub fn set(&self, v: Value) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(v);
    }

    /// Records `v` into the request's slot, if a filter inserted one (cloned only then).
    pub fn record(extensions: &axum::http::Extensions, v: impl FnOnce() -> Value) {
        if let Some(slot) = extensions.get::<Self>() {
            slot.set(v());
        }
    }
}

/// One resource request, resolved.
struct Request {
    shared: Arc<Shared>,
    /// The served kinds the request was resolved in.
    kinds: crate::Kinds,
    /// The schema catalog of `kinds`, when first asked for.
    catalog: std::sync::OnceLock<Arc<listwatch_schema::Catalog>>,
    res: Resource,
    target: Target,
    query: Query,
    headers: HeaderMap,
    sub: Sub,
    /// The request's path, as received.
    path: String,
    /// The request's extensions (the server's filters put the user there).
    extensions: axum::http::Extensions,
}

impl Request {
    fn info(&self) -> &KindSpec {
        &self.res.info
    }

    /// The schemas of the kinds this request was resolved in.
    fn catalog(&self) -> &Arc<listwatch_schema::Catalog> {
        self.catalog
            .get_or_init(|| Arc::clone(&self.shared.derived(&self.kinds).catalog))
    }

    /// The registry store of the request's kind, reading the request's schemas.
    fn store(&self) -> Store {
        Store::with_catalog(
            Arc::clone(&self.res.info),
            Arc::clone(&self.res.storage),
            Arc::clone(self.catalog()),
        )
    }

    /// The registry store of the served `v1` namespaces, when served (what the namespace
    /// lifecycle admission reads).
    fn namespaces_store(&self) -> Option<Store> {
        self.shared
            .namespaces()
            .map(|r| Store::new(Arc::clone(&r.info), Arc::clone(&r.storage)))
    }

    /// [`store`](Self::store), acting as the kubelet for pods as the server's config says
    /// (what a DELETE and a collection DELETE use).
    fn deleting_store(&self) -> Store {
        self.store().with_kubelet(crate::lifecycle::Kubelet::of(
            self.shared.config.acknowledge_pod_deletion,
        ))
    }

    /// Runs a response body's computing pieces (Table, YAML, metadata items and watch
    /// frames) on the request compute pool in this request's client's flow; `None` without
    /// a pool.
    fn offloader(&self) -> Option<crate::compute::Offloader> {
        let client = self
            .extensions
            .get::<ClientKey>()
            .cloned()
            .unwrap_or(ClientKey::Unidentified);
        self.shared.compute.as_ref().map(|p| p.offloader(client))
    }

    fn ns(&self) -> Option<&str> {
        self.target.namespace.as_deref()
    }

    fn name(&self) -> &str {
        self.target.name.as_deref().unwrap_or("")
    }

    fn storage_err(&self, e: &StorageError) -> ApiError {
        ApiError::storage(e, &self.res.info)
    }

    fn object_key(&self) -> ApiResult<Key> {
        Key::object(&self.info().storage_resource, self.ns(), self.name())
            .map_err(|e| self.storage_err(&e))
    }

    /// Tells the admission hook, if any, that the create it admitted for `uid` was not
    /// stored.
    fn abandoned(&self, uid: &str) {
        if let Some(hook) = &self.shared.admission {
            hook.abandoned(self.info(), uid);
        }
    }

    /// Tells the admission hook, if any, that `object` was removed from storage.
    fn deleted(&self, object: &listwatch_api::Object) {
        if let Some(hook) = &self.shared.admission {
            hook.deleted(self.info(), object);
        }
    }

    /// The manager a non-apply write is recorded under.
    fn update_manager(&self) -> String {
        // As text whatever its bytes (upstream reads Go's string of them: a multibyte
        // User-Agent names its manager too; invalid UTF-8 reads as U+FFFD).
        let ua = self
            .headers
            .get(header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()));
        crate::fieldmanager::update_manager(self.query.get("fieldManager"), ua.as_deref())
    }

    fn collection_key(&self) -> ApiResult<Key> {
        Key::collection(&self.info().storage_resource, self.ns()).map_err(|e| self.storage_err(&e))
    }
}

/// Entry point for everything under `/api` and `/apis`.
pub(crate) async fn serve(
    State(shared): State<Arc<Shared>>,
    req: axum::extract::Request,
) -> Response {
    if shared.shutting_down() {
        return ApiError::shutting_down().into_response();
    }
    let (mut parts, body) = req.into_parts();
    // The path as the server's filter resolved it, when it did (`RequestInfo`).
    let api_path = match RequestInfo::for_path(&parts.extensions, parts.uri.path()) {
        Some(info) => info.api_path.clone(),
        None => path::parse(parts.uri.path()),
    };
    match api_path {
        Err(PathError::NotFound) => ApiError::path_not_found().into_response(),
        Err(PathError::Malformed(m)) => ApiError::bad_request(m).into_response(),
        Ok(ApiPath::Resource(t)) => {
            let ws = if wants_websocket(&parts.headers) {
                match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
                    Ok(ws) => Some(ws),
                    Err(rejection) => {
                        return ApiError::bad_request(format!(
                            "websocket upgrade failed: {}",
                            rejection.body_text()
                        ))
                        .into_response();
                    }
                }
            } else {
                None
            };
            resource_request(shared, parts, t, body, ws).await
        }
        Ok(p) => discovery_request(&shared, &parts.method, p, &parts.headers)
            .unwrap_or_else(ErrorResponse::into_response),
    }
}

fn wants_websocket(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

fn discovery_request(
    shared: &Shared,
    method: &Method,
    p: ApiPath,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    // Upstream serves `/apis` and `/apis/{group}` with method-agnostic handlers (HEAD is
    // a GET without the body) and the rest through go-restful GET routes (HEAD is 405).
    let head_allowed = matches!(p, ApiPath::Groups | ApiPath::Group(_));
    if method != Method::GET && !(head_allowed && method == Method::HEAD) {
        return Err(ApiError::method_not_allowed());
    }
    let derived = shared.derived(&shared.kinds());
    let docs = derived.docs();
    let (fmt, body) = match p {
        ApiPath::CoreVersions => match negotiate(headers, Offer::JsonOrDiscovery)? {
            Format::DiscoveryV2 => {
                let (body, etag) = (&docs.core_aggregated, &docs.core_aggregated_etag);
                return Ok(aggregated_discovery(headers, body, etag));
            }
            _ => (Format::Json, docs.core_versions.clone()),
        },
        ApiPath::Groups => match negotiate(headers, Offer::JsonOrDiscovery)? {
            Format::DiscoveryV2 => {
                let (body, etag) = (&docs.groups_aggregated, &docs.groups_aggregated_etag);
                return Ok(aggregated_discovery(headers, body, etag));
            }
            _ => (Format::Json, docs.groups.clone()),
        },
        ApiPath::Group(g) => {
            let fmt = negotiate(headers, Offer::Json)?;
            (
                fmt,
                docs.group_docs
                    .get(&g)
                    .cloned()
                    .ok_or_else(ApiError::path_not_found)?,
            )
        }
        ApiPath::Resources { group, version } => {
            let fmt = negotiate(headers, Offer::Json)?;
            (
                fmt,
                docs.resource_lists
                    .get(&(group, version))
                    .cloned()
                    .ok_or_else(ApiError::path_not_found)?,
            )
        }
        ApiPath::Resource(_) => return Err(ApiError::path_not_found()),
    };
    Ok(json_response(StatusCode::OK, fmt.content_type(), body))
}

/// An aggregated discovery document with its ETag, or 304 when the client's
/// `If-None-Match` names it (upstream compares the header with the quoted hash as a whole).
/// `Vary: Accept`: the same path answers the legacy document to other `Accept`s.
fn aggregated_discovery(headers: &HeaderMap, body: &Bytes, etag: &str) -> Response {
    let cached = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut resp = if cached {
        axum::response::IntoResponse::into_response(StatusCode::NOT_MODIFIED)
    } else {
        json_response(
            StatusCode::OK,
            Format::DiscoveryV2.content_type(),
            body.clone(),
        )
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    resp
}

/// Picks the verb for a method on a target, or the error upstream would give.
fn verb_for(method: &Method, t: &Target, info: &KindSpec, watch: bool) -> ApiResult<Verb> {
    let not_allowed = || Err(ApiError::method_not_allowed());
    if t.namespace.is_some() && !info.namespaced {
        return Err(ApiError::path_not_found());
    }
    if info.namespaced && t.namespace.is_none() && t.name.is_some() {
        return Err(ApiError::path_not_found());
    }
    if let Some(sub) = &t.subresource {
        let known = info.subresources().contains(&sub.as_str());
        if !known || t.legacy_watch {
            return Err(ApiError::path_not_found());
        }
        if sub == "finalize" {
            // Upstream's `FinalizeREST` only updates.
            return if *method == Method::PUT {
                Ok(Verb::Update)
            } else {
                not_allowed()
            };
        }
        return match *method {
            Method::GET => Ok(Verb::Get),
            Method::PUT => Ok(Verb::Update),
            Method::PATCH => Ok(Verb::Patch),
            _ => not_allowed(),
        };
    }
    let cluster_wide = info.namespaced && t.namespace.is_none();
    let verb = if t.legacy_watch {
        if *method != Method::GET {
            return not_allowed();
        }
        Verb::Watch
    } else {
        main_verb(method, t, watch, cluster_wide)?
    };
    // A kind serving only some verbs (upstream's read-only `componentstatuses`) refuses the
    // others as upstream's installer does for a storage without them: 405.
    if !info.serves_verb(verb.discovery_name()) {
        return not_allowed();
    }
    Ok(verb)
}

/// The verb of a request on the resource itself (no subresource).
fn main_verb(method: &Method, t: &Target, watch: bool, cluster_wide: bool) -> ApiResult<Verb> {
    let not_allowed = || Err(ApiError::method_not_allowed());
    match (t.name.is_some(), method.clone()) {
        (false, Method::GET) => Ok(if watch { Verb::Watch } else { Verb::List }),
        (false, Method::POST) if !cluster_wide => Ok(Verb::Create),
        (false, Method::DELETE) if !cluster_wide => Ok(Verb::DeleteCollection),
        // Upstream serves a named GET as a get whatever its `watch` parameter says (a single
        // object is watched by a field selector, or through `/watch/`).
        (true, Method::GET) => Ok(Verb::Get),
        (true, Method::PUT) => Ok(Verb::Update),
        (true, Method::PATCH) => Ok(Verb::Patch),
        (true, Method::DELETE) => Ok(Verb::Delete),
        _ => not_allowed(),
    }
}

async fn resource_request(
    shared: Arc<Shared>,
    parts: Parts,
    target: Target,
    body: Body,
    ws: Option<WebSocketUpgrade>,
) -> Response {
    let started = Instant::now();
    let client = parts
        .extensions
        .get::<ClientKey>()
        .cloned()
        .unwrap_or(ClientKey::Unidentified);
    let (method, headers, extensions) = (parts.method, parts.headers, parts.extensions);
    let query = Query::parse(parts.uri.query());
    let path = parts.uri.path().to_owned();
    let kinds = shared.kinds();
    let Some(res) = kinds
        .get(&target.group, &target.version, &target.resource)
        .cloned()
    else {
        return ApiError::path_not_found().into_response();
    };
    let watch = match query.is_watch() {
        Ok(w) => w,
        Err(e) => return e.into_response(),
    };
    let verb = match verb_for(&method, &target, &res.info, watch) {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    if let Some(Err(m)) = target.name.as_deref().map(path::check_name) {
        return ApiError::bad_request(m).into_response();
    }
    let metrics = shared.metrics.clone();
    let plural = res.info.plural.clone();
    let sub = Sub::of(target.subresource.as_deref());
    let req = Arc::new(Request {
        shared,
        kinds,
        catalog: std::sync::OnceLock::new(),
        res,
        target,
        query,
        headers,
        sub,
        path,
        extensions,
    });
    let result = if verb == Verb::Watch {
        match req.shared.flow.watches.try_open(&client) {
            Ok(slot) => watch_request(&req, ws, slot).await,
            Err(_) => Err(ApiError::too_many_requests()),
        }
    } else {
        limited(&req, verb, &client, body, started).await
    };
    let resp = match result {
        Ok(r) => r,
        Err(e) => {
            if e.code() >= 500 {
                tracing::warn!(verb = verb.metric_name(), resource = %plural, code = e.code(), message = %e.0.message, "request failed");
            }
            let unread_body = e.code() == 408;
            let mut resp = e.into_response();
            if crate::yaml::wanted(&req.headers, Offer::Object) {
                resp = crate::yaml::from_json(resp).await;
            } else if crate::cbor::wanted(&req.headers, Offer::Object) {
                // Upstream writes a failure's Status with the negotiated serializer.
                resp = crate::cbor::from_json(resp).await;
            }
            if unread_body {
                // The rest of the body may still come: this connection cannot be reused.
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            resp
        }
    };
    let mut resp = resp;
    if let Some(w) = req.res.info.warning.as_deref() {
        // A deprecated custom resource version: every answer carries it, as upstream's CRD
        // handler adds it before serving.
        if let Some(v) = listwatch_registry::field_validation::warning_header(w) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    let code = resp.status().as_u16();
    let seconds = (verb != Verb::Watch).then(|| started.elapsed().as_secs_f64());
    tracing::debug!(verb = verb.metric_name(), resource = %plural, code, seconds, "request");
    metrics.observe(verb.metric_name(), &plural, code, seconds);
    resp
}

/// A non-watch request through flow control: admitted to its client's flow, its body read
/// within the deadline, then served on a seat until the deadline (both counted from the
/// request's arrival).
async fn limited(
    req: &Arc<Request>,
    verb: Verb,
    client: &ClientKey,
    body: Body,
    started: Instant,
) -> ApiResult<Response> {
    let admission = Admission {
        shared: &req.shared,
        headers: &req.headers,
        query: &req.query,
        client,
        exempt: req.extensions.get::<Exempt>().is_some(),
        body: verb.has_body().then_some(body),
        started,
        compute: computes(verb, req.sub, &req.headers),
        width: match verb {
            Verb::List => work::list_seats(req),
            _ => 1,
        },
    };
    let req = Arc::clone(req);
    admission
        .serve(move |bytes| async move { handle(&req, verb, bytes).await })
        .await
}

/// Whether a request's handler computes (runs on the request compute pool, `crate::compute`):
/// every verb with a body (decode, patch, apply, validation, the update closure, encoding
/// the answer), a `/scale` read (the stored object is decoded), and reads answered in
/// anything but plain JSON (Table rows, YAML, partial metadata are built from the decoded
/// objects). A GET or LIST answered as JSON stays on the I/O runtime: a GET sends the
/// stored (cached) encoding, and a list's body is encoded batch by batch as it is sent.
fn computes(verb: Verb, sub: Sub, headers: &HeaderMap) -> bool {
    verb.has_body()
        || sub == Sub::Scale
        || !matches!(
            negotiate(headers, Offer::JsonOrTable),
            Ok(Format::Json) | Err(_)
        )
}

/// What flow control needs to know of a non-watch request.
pub(crate) struct Admission<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) query: &'a Query,
    pub(crate) client: &'a ClientKey,
    /// Flow control does not limit it ([`Exempt`]): it takes no seat.
    pub(crate) exempt: bool,
    /// The body to read (a mutating request), or `None` (a read-only one).
    pub(crate) body: Option<Body>,
    /// When the request arrived: its deadline counts from here.
    pub(crate) started: Instant,
    /// Whether the handler runs on the request compute pool (when the API has one).
    pub(crate) compute: bool,
    /// The seats it takes (its work estimate: 1, or a list's, `handlers::work`).
    pub(crate) width: usize,
}

impl Admission<'_> {
    /// Admits the request to its client's flow, reads its body within the deadline and the
    /// body budget, takes a seat, and runs `serve` on it until the deadline (every write
    /// of this API, and the embedder's create-only virtual resources, pass here) — on the
    /// request compute pool when [`Admission::compute`] is set and the API has one, holding
    /// the seat and the body's budget there until the task ends.
    pub(crate) async fn serve<F, Fut>(self, serve: F) -> ApiResult<Response>
    where
        F: FnOnce(Bytes) -> Fut,
        Fut: Future<Output = ApiResult<Response>> + Send + 'static,
    {
        let shared = self.shared;
        // Only a read may be sent again after a timeout: a write's outcome is unknown.
        let read_only = self.body.is_none();
        let kind = if read_only { "readOnly" } else { "mutating" };
        let level = shared.flow.level(!read_only, self.exempt);
        let allowed = self.query.timeout(shared.config.request_timeout)?;
        let deadline = self.started + allowed;
        let ticket = level
            .admit(self.client)
            .map_err(|_| ApiError::too_many_requests())?
            .width(self.width);
        let mut hold = shared.flow.bodies.hold();
        let bytes = match self.body {
            Some(body) => {
                let limit = shared.config.max_body_bytes;
                let read = crate::limits::read_body(self.headers, body, limit, &mut hold);
                tokio::time::timeout_at(deadline, read)
                    .await
                    .map_err(|_| ApiError::body_timeout(allowed))??
            }
            None => Bytes::new(),
        };
        let wait =
            queue_wait_limit(allowed).min(deadline.saturating_duration_since(Instant::now()));
        let seat = ticket
            .seat(wait)
            .await
            .map_err(|_| ApiError::too_many_requests())?;
        let inflight = shared.metrics.inflight(kind);
        let guards = (seat, hold, inflight);
        // Past the deadline the handler is dropped (a pooled one aborted at its next await,
        // its guards released when it ends): a write already sent to storage may still
        // land, as with upstream's timeout filter, so a write's 504 is not marked retryable.
        let timed_out = || Err(ApiError::request_timeout(read_only));
        let (r, guards) = match shared.compute.as_ref().filter(|_| self.compute) {
            Some(pool) => {
                let work = serve(bytes);
                let task = pool.run(self.client.clone(), async move { (work.await, guards) });
                match tokio::time::timeout_at(deadline, task).await {
                    Ok(Ok((r, guards))) => (r, Some(guards)),
                    Ok(Err(stopped)) => (Err(ApiError::internal(stopped.to_string())), None),
                    Err(_) => (timed_out(), None),
                }
            }
            None => (
                tokio::time::timeout_at(deadline, serve(bytes))
                    .await
                    .unwrap_or_else(|_| timed_out()),
                Some(guards),
            ),
        };
        // A streamed list is sent on its seat; anything else gives it back now.
        r.map(|resp| crate::stream_list::hold_until_sent(resp, guards))
    }
}

async fn handle(req: &Request, verb: Verb, body: Bytes) -> ApiResult<Response> {
    let conversion = match verb {
        Verb::Get | Verb::List | Verb::Watch => None,
        _ => crate::write_answer::Conversion::of(
            req.info(),
            &req.headers,
            req.query.include_object()?,
            verb == Verb::DeleteCollection,
        )?,
    };
    let mut resp = handle_verb(req, verb, body).await?;
    if let Some(c) = conversion {
        resp = c.apply(req.info(), resp).await;
    }
    let offer = match verb {
        Verb::Get | Verb::List => Offer::JsonOrTable,
        _ => Offer::Object,
    };
    Ok(if crate::yaml::wanted(&req.headers, offer) {
        crate::yaml::from_json(resp).await
    } else if crate::cbor::wanted(&req.headers, offer) {
        // Whatever was answered as JSON (a write's object, a Scale, a Status, a collection
        // delete's list); objects and lists read as CBOR are CBOR already.
        crate::cbor::from_json(resp).await
    } else {
        resp
    })
}

async fn handle_verb(req: &Request, verb: Verb, body: Bytes) -> ApiResult<Response> {
    match verb {
        Verb::Get => get(req).await,
        Verb::List => list(req).await,
        Verb::Create => create(req, &body).await,
        Verb::Update => update(req, &body).await,
        Verb::Patch => patch(req, &body).await,
        Verb::Delete => delete(req, &body).await,
        Verb::DeleteCollection => delete_collection(req, &body).await,
        // Watches take a watch slot instead (`resource_request`).
        Verb::Watch => Err(ApiError::internal("a watch was routed as a request")),
    }
}

fn object_response(code: StatusCode, obj: &Object) -> Response {
    obj.with_json(|json| crate::encoded_response(code, "application/json", json))
}

/// The Scale view of an object, as the response of a `/scale` request.
fn scale_response(req: &Request, obj: &Object) -> ApiResult<Response> {
    let spec = req
        .info()
        .scale
        .as_ref()
        .ok_or_else(ApiError::path_not_found)?;
    let v = decoded(obj)?;
    // Written as every object is (`Object`'s encoding: `kind` first as upstream's typed
    // `Scale`, a trailing newline).
    let scale = Object::from_value(
        crate::scale::to_scale(spec, &v),
        &listwatch_api::SelectableFields::none(),
    )
    .map_err(|e| ApiError::internal(format!("the Scale view does not encode: {e}")))?;
    Ok(object_response(StatusCode::OK, &scale))
}
