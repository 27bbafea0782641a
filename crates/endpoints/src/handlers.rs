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

use std::sync::Arc;

use axum::body::Body;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{FromRequestParts, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use listwatch_api::Object;
use listwatch_storage::{Error as StorageError, GetOptions, Key, ObjectList, Updated, WatchEvent};
use serde_json::Value;
use tokio::time::Instant;

use crate::error::{ApiError, ApiResult};
use crate::fieldmanager::FieldManager;
use crate::flowcontrol::{ClientKey, WatchSlot, queue_wait_limit};
use crate::negotiate::{Format, Offer, negotiate};
use crate::patch::{Patch, PatchLimits, PatchType};
use crate::path::{self, ApiPath, PathError, Target};
use crate::query::{IncludeObject, Query};
use crate::resource::{Resource, ResourceInfo};
use crate::stream_list::{self, Items};
use crate::validation::{UpdateError, prepare_create, prepare_update};
use crate::watch_server::{self, Encoder, WatchState};
use crate::{Shared, json_response, table};

/// Upstream's message for an optimistic-concurrency failure.
const MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

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

    /// Whether the verb reads a request body.
    fn has_body(self) -> bool {
        !matches!(self, Verb::Get | Verb::List | Verb::Watch)
    }
}

/// Which part of an object a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sub {
    /// The object itself.
    Main,
    /// `/status`: writes change only the status.
    Status,
    /// `/scale`: an `autoscaling/v1` Scale view of the replica count.
    Scale,
}

/// The name of the object a create writes, for the audit filter (upstream's
/// `LogRequestObject` completes the event's `objectRef` from the decoded object): a filter
/// inserts an empty slot into the request's extensions and the create handler fills it once
/// the body is decoded and the name settled (for a `generateName` create, the generated
/// name) — before admission and storage, so a refused create is named too.
#[derive(Debug, Clone, Default)]
pub struct RequestObjectName(Arc<std::sync::OnceLock<String>>);

impl RequestObjectName {
    /// The name, once the handler has set it.
    pub fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    fn set(&self, name: &str) {
        let _ = self.0.set(name.to_owned());
    }
}

/// One resource request, resolved.
struct Request {
    shared: Arc<Shared>,
    res: Resource,
    target: Target,
    query: Query,
    headers: HeaderMap,
    sub: Sub,
    /// The request's extensions (the server's filters put the user there).
    extensions: axum::http::Extensions,
}

impl Request {
    fn info(&self) -> &ResourceInfo {
        &self.res.info
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

    /// Runs the admission hook, if one is installed, on the object about to be stored.
    fn admit(&self, object: &Value, old: Option<&Value>) -> ApiResult<()> {
        let Some(hook) = &self.shared.admission else {
            return Ok(());
        };
        hook.validate(&crate::admission::AdmissionRequest {
            operation: if old.is_some() {
                crate::admission::Operation::Update
            } else {
                crate::admission::Operation::Create
            },
            info: self.info(),
            namespace: self.ns(),
            object,
            old,
            extensions: &self.extensions,
        })
    }

    /// The subresource, as managedFields name it.
    fn subresource(&self) -> &'static str {
        match self.sub {
            Sub::Main => "",
            Sub::Status => "status",
            Sub::Scale => "scale",
        }
    }

    /// Field ownership for writes through this request's endpoint.
    fn field_manager(&self) -> FieldManager<'_> {
        FieldManager::new(self.info(), self.subresource())
    }

    /// The manager a non-apply write is recorded under.
    fn update_manager(&self) -> String {
        let ua = self
            .headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok());
        crate::fieldmanager::update_manager(self.query.get("fieldManager"), ua)
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
    match path::parse(parts.uri.path()) {
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
            .unwrap_or_else(IntoResponse::into_response),
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
        return Err(ApiError::method_not_allowed(method.as_str()));
    }
    let docs = &shared.docs;
    let (fmt, body) = match p {
        ApiPath::CoreVersions => match negotiate(headers, Offer::JsonOrDiscovery)? {
            Format::DiscoveryV2 => (Format::DiscoveryV2, docs.core_aggregated.clone()),
            _ => (Format::Json, docs.core_versions.clone()),
        },
        ApiPath::Groups => match negotiate(headers, Offer::JsonOrDiscovery)? {
            Format::DiscoveryV2 => (Format::DiscoveryV2, docs.groups_aggregated.clone()),
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

/// Picks the verb for a method on a target, or the error upstream would give.
fn verb_for(method: &Method, t: &Target, info: &ResourceInfo, watch: bool) -> ApiResult<Verb> {
    let not_allowed = || Err(ApiError::method_not_allowed(method.as_str()));
    if t.namespace.is_some() && !info.namespaced {
        return Err(ApiError::path_not_found());
    }
    if info.namespaced && t.namespace.is_none() && t.name.is_some() {
        return Err(ApiError::path_not_found());
    }
    if let Some(sub) = &t.subresource {
        let known = match sub.as_str() {
            "status" => info.status_subresource,
            "scale" => info.scale.is_some(),
            _ => false,
        };
        if !known || t.legacy_watch {
            return Err(ApiError::path_not_found());
        }
        return match *method {
            Method::GET => Ok(Verb::Get),
            Method::PUT => Ok(Verb::Update),
            Method::PATCH => Ok(Verb::Patch),
            _ => not_allowed(),
        };
    }
    if t.legacy_watch {
        return if *method == Method::GET {
            Ok(Verb::Watch)
        } else {
            not_allowed()
        };
    }
    let cluster_wide = info.namespaced && t.namespace.is_none();
    match (t.name.is_some(), method.clone()) {
        (false, Method::GET) => Ok(if watch { Verb::Watch } else { Verb::List }),
        (false, Method::POST) if !cluster_wide => Ok(Verb::Create),
        (false, Method::DELETE) if !cluster_wide => Ok(Verb::DeleteCollection),
        (true, Method::GET) => Ok(if watch { Verb::Watch } else { Verb::Get }),
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
    let Some(res) = shared
        .resource(&target.group, &target.version, &target.resource)
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
    let sub = match target.subresource.as_deref() {
        None => Sub::Main,
        Some("scale") => Sub::Scale,
        Some(_) => Sub::Status,
    };
    let req = Request {
        shared,
        res,
        target,
        query,
        headers,
        sub,
        extensions,
    };
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
            if unread_body {
                // The rest of the body may still come: this connection cannot be reused.
                resp.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            resp
        }
    };
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
    req: &Request,
    verb: Verb,
    client: &ClientKey,
    body: Body,
    started: Instant,
) -> ApiResult<Response> {
    let (kind, level) = if verb.has_body() {
        ("mutating", &req.shared.flow.mutating)
    } else {
        ("readOnly", &req.shared.flow.read_only)
    };
    let allowed = req.query.timeout(req.shared.config.request_timeout)?;
    let deadline = started + allowed;
    let ticket = level
        .admit(client)
        .map_err(|_| ApiError::too_many_requests())?;
    let mut hold = req.shared.flow.bodies.hold();
    let bytes = if verb.has_body() {
        let limit = req.shared.config.max_body_bytes;
        let read = crate::limits::read_body(&req.headers, body, limit, &mut hold);
        tokio::time::timeout_at(deadline, read)
            .await
            .map_err(|_| ApiError::body_timeout(allowed))??
    } else {
        Bytes::new()
    };
    let wait = queue_wait_limit(allowed).min(deadline.saturating_duration_since(Instant::now()));
    let seat = ticket
        .seat(wait)
        .await
        .map_err(|_| ApiError::too_many_requests())?;
    let inflight = req.shared.metrics.inflight(kind);
    // Past the deadline the handler is dropped: a write already sent to storage may still
    // land, as with upstream's timeout filter.
    let r = tokio::time::timeout_at(deadline, handle(req, verb, bytes))
        .await
        .unwrap_or_else(|_| Err(ApiError::request_timeout()));
    // A streamed list is sent on its seat; anything else gives it back now.
    r.map(|resp| crate::stream_list::hold_until_sent(resp, (seat, hold, inflight)))
}

async fn handle(req: &Request, verb: Verb, body: Bytes) -> ApiResult<Response> {
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
    json_response(code, "application/json", obj.to_json_bytes())
}

fn table_response(
    info: &ResourceInfo,
    objects: &[Object],
    rv: u64,
    cont: Option<&str>,
    include: IncludeObject,
    beta: bool,
) -> ApiResult<Response> {
    let body = table::table(info, objects, Some(rv), cont, include, beta)
        .map_err(|e| ApiError::internal(format!("printing a table failed: {e}")))?;
    Ok(json_response(
        StatusCode::OK,
        Format::Table { beta }.content_type(),
        body,
    ))
}

async fn get(req: &Request) -> ApiResult<Response> {
    let fmt = negotiate(&req.headers, Offer::JsonOrTable)?;
    let include = req.query.include_object()?;
    let opts = GetOptions {
        resource_version: req.query.get_resource_version()?,
        ignore_not_found: false,
    };
    let key = req.object_key()?;
    let obj = req
        .res
        .storage
        .get(&key, &opts)
        .await
        .map_err(|e| req.storage_err(&e))?
        .ok_or_else(|| req.storage_err(&key.not_found()))?;
    if req.sub == Sub::Scale {
        return scale_response(req, &obj);
    }
    match fmt {
        Format::Table { beta } => table_response(
            req.info(),
            std::slice::from_ref(&obj),
            obj.resource_version(),
            None,
            include,
            beta,
        ),
        Format::Metadata => {
            let v = decoded(&obj)?;
            let body = serde_json::to_vec(&table::partial_metadata(&v))
                .map_err(|e| ApiError::internal(e.to_string()))?;
            Ok(json_response(
                StatusCode::OK,
                Format::Metadata.content_type(),
                body,
            ))
        }
        _ => Ok(object_response(StatusCode::OK, &obj)),
    }
}

/// The stored object as JSON (500 if it does not decode, which only a bug can cause).
fn decoded(obj: &Object) -> ApiResult<Value> {
    obj.to_value()
        .map_err(|e| ApiError::internal(format!("stored object does not decode: {e}")))
}

async fn list(req: &Request) -> ApiResult<Response> {
    let fmt = negotiate(&req.headers, Offer::JsonOrTable)?;
    let include = req.query.include_object()?;
    let lr = req.query.list_options(req.info(), false, None)?;
    let key = req.collection_key()?;
    let list = req
        .res
        .storage
        .list(&key, &lr.opts)
        .await
        .map_err(|e| req.storage_err(&e))?;
    list_response(req, Items::for_format(fmt, include), list)
}

/// A list's response: whole, or streamed and (for clients that accept it) gzipped.
fn list_response(req: &Request, items: Items, list: ObjectList) -> ApiResult<Response> {
    let gzip = crate::compress::accepts_gzip(&req.headers)
        .then(|| req.shared.gzip.try_take())
        .flatten();
    let resp = stream_list::respond(
        Arc::clone(&req.res.info),
        items,
        list,
        gzip,
        // The server's response deadline (the request timeout) comes first; this is a backstop.
        req.shared.config.request_timeout.saturating_mul(2),
    )?;
    if resp.headers().contains_key(header::CONTENT_ENCODING) {
        req.shared.metrics.gzipped("list");
    }
    Ok(resp)
}

async fn watch_request(
    req: &Request,
    ws: Option<WebSocketUpgrade>,
    slot: WatchSlot,
) -> ApiResult<Response> {
    let format = negotiate(&req.headers, Offer::JsonOrTable)?;
    let include = req.query.include_object()?;
    let mut lr = req
        .query
        .list_options(req.info(), true, req.target.name.as_deref())?;
    let single = req.target.name.is_some() && (req.ns().is_some() || !req.info().namespaced);
    let key = if single {
        lr.opts.recursive = false;
        req.object_key()?
    } else {
        req.collection_key()?
    };
    let shared = &req.shared;
    // The storage learns when the watch will end, so that a cache can send a bookmark just
    // before (upstream: 2 s), and the client resumes from a recent resourceVersion.
    let timeout = watch_server::watch_timeout(lr.timeout, shared.config.min_request_timeout);
    let deadline = tokio::time::Instant::now() + timeout;
    lr.opts.deadline = Some(deadline.into_std());
    let stream = match req.res.storage.watch(&key, &lr.opts).await {
        Ok(s) => s,
        // Like upstream's cacher (an "error watcher"): a version too old or too new is an
        // ERROR event in a 200 stream, which is what clients' relist logic reacts to.
        Err(e @ (StorageError::Expired { .. } | StorageError::TooLargeResourceVersion { .. })) => {
            Box::pin(futures::stream::once(async move { WatchEvent::Error(e) }))
        }
        Err(e) => return Err(req.storage_err(&e)),
    };
    let state = WatchState {
        stream,
        encoder: Encoder::new(
            Arc::clone(&req.res.info),
            format,
            include,
            lr.opts.allow_watch_bookmarks,
        ),
        deadline: Box::pin(tokio::time::sleep_until(deadline)),
        stop: shared.watch_stop.listen(),
        sent: shared.metrics.watch_events(&req.info().plural),
        _slot: slot,
        _gauge: shared.metrics.watch_started(),
    };
    if let Some(ws) = ws {
        // One message per event on the same route, as upstream's websocket watch does.
        return Ok(watch_server::bounded(ws)
            .on_upgrade(move |socket| watch_server::forward_to_websocket(socket, state)));
    }
    // A watch-list's initial events are as large as a list: gzipped for clients that
    // accept it (upstream compresses no watch; see `compress`).
    let gzip = (lr.opts.send_initial_events == Some(true)
        && crate::compress::accepts_gzip(&req.headers))
    .then(|| shared.gzip.try_take())
    .flatten();
    let compressed = gzip.is_some();
    let mut resp = match gzip {
        Some(permit) => Body::from_stream(crate::compress::GzipWatch::new(
            watch_server::byte_stream(state),
            permit,
        )),
        None => watch_server::body(state),
    }
    .into_response();
    resp.extensions_mut().insert(watch_server::LongRunning);
    let h = resp.headers_mut();
    if compressed {
        shared.metrics.gzipped("watch");
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    }
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

/// The object about to be written, refused (413) when its encoded size is over what the
/// resource's storage accepts.
fn to_object(req: &Request, v: Value) -> ApiResult<Object> {
    let obj = Object::from_value(v, &req.info().selectable_fields)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    crate::limits::check_object_size(&obj, req.res.storage.as_ref())?;
    Ok(obj)
}

async fn create(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate(&req.headers, Offer::Json)?;
    req.query.validate_write()?;
    let dry_run = req.query.dry_run()?;
    let mut obj = crate::limits::decode_object(req.info(), &req.headers, bytes)?;
    prepare_create(req.info(), &mut obj, req.ns())?;
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
    if let Some(slot) = req.extensions.get::<RequestObjectName>() {
        slot.set(&name);
    }
    crate::namespaces::check_open(&req.shared, req.info(), req.ns(), &name).await?;
    let key = Key::object(&req.info().storage_resource, req.ns(), &name)
        .map_err(|e| req.storage_err(&e))?;
    let mut v = Value::Object(obj);
    req.field_manager()
        .update(None, &mut v, &req.update_manager());
    req.admit(&v, None)?;
    let object = to_object(req, v)?;
    let stored = if dry_run {
        object
    } else {
        req.res
            .storage
            .create(&key, object, None)
            .await
            .map_err(|e| req.storage_err(&e))?
    };
    if !dry_run {
        crate::namespaces::recheck_after_create(&req.shared, &req.res, req.ns(), &key, &stored)
            .await?;
    }
    Ok(object_response(StatusCode::CREATED, &stored))
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
            crate::lifecycle::check_update(req.info(), cur_v, &mut v)?;
            req.admit(&v, Some(cur_v))?;
            to_object(req, v)
        }
        Err(UpdateError::Api(e)) => Err(e),
        Err(UpdateError::Conflict) => {
            let key = req.object_key()?;
            Err(req.storage_err(&key.conflict(MODIFIED)))
        }
    }
}

async fn update(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate(&req.headers, Offer::Json)?;
    req.query.validate_write()?;
    let dry_run = req.query.dry_run()?;
    let new = crate::limits::decode_object(req.info(), &req.headers, bytes)?;
    let key = req.object_key()?;
    let manager = req.update_manager();
    let (obj, _) = read_modify_write(req, false, dry_run, |cur| match cur {
        None => Err(req.storage_err(&key.not_found())),
        Some(cur) if req.sub == Sub::Scale => {
            apply_scale_update(req, cur, &manager, |_| Ok(Value::Object(new.clone())))
        }
        Some(cur) => apply_update(
            req,
            &decoded(cur)?,
            Value::Object(new.clone()),
            Some(&manager),
        ),
    })
    .await?;
    if req.sub == Sub::Scale {
        return scale_response(req, &obj);
    }
    Ok(object_response(StatusCode::OK, &obj))
}

/// The Scale view of an object, as the response of a `/scale` request.
fn scale_response(req: &Request, obj: &Object) -> ApiResult<Response> {
    let spec = req
        .info()
        .scale
        .as_ref()
        .ok_or_else(ApiError::path_not_found)?;
    let v = decoded(obj)?;
    let body = serde_json::to_vec(&crate::scale::to_scale(spec, &v))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(json_response(StatusCode::OK, "application/json", body))
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

async fn patch(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate(&req.headers, Offer::Json)?;
    req.query.validate_write()?;
    let dry_run = req.query.dry_run()?;
    let ct = crate::limits::content_type(&req.headers);
    let kind = PatchType::from_content_type(ct)
        .ok_or_else(|| ApiError::unsupported_media_type(ct, PatchType::SUPPORTED))?;
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
    let patch = Patch::parse(kind, bytes).map_err(|e| e.to_api_error())?;
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
                    "the name of the object ({body_name}) does not match the name on the URL ({})",
                    req.name()
                )));
            }
            prepare_create(req.info(), &mut m, req.ns())?;
            let v = Value::Object(m);
            req.admit(&v, None)?;
            to_object(req, v)
        }
        (None, _) => Err(req.storage_err(&key.not_found())),
        (Some(cur), _) if req.sub == Sub::Scale => {
            apply_scale_update(req, cur, &updater, |scale| {
                patch.apply(scale, limits).map_err(unprocessable)
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
                    let patched = patch.apply(&cur_v, limits).map_err(unprocessable)?;
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
    Ok(object_response(
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        &obj,
    ))
}

async fn delete(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate(&req.headers, Offer::Json)?;
    crate::validation::check_delete(req.info(), req.name())?;
    let opts = req.query.delete_options(bytes)?;
    let key = req.object_key()?;
    let done = crate::lifecycle::delete(
        req.res.storage.as_ref(),
        req.info(),
        &key,
        opts.preconditions.as_ref(),
        opts.dry_run,
    )
    .await
    .map_err(|e| req.storage_err(&e))?;
    if crate::lifecycle::is_namespaces(req.info()) && !opts.dry_run {
        req.shared.namespace_wake.wake();
    }
    let (crate::lifecycle::Deletion::Gone(o) | crate::lifecycle::Deletion::Pending(o)) = done;
    Ok(object_response(StatusCode::OK, &o))
}

async fn delete_collection(req: &Request, bytes: &[u8]) -> ApiResult<Response> {
    negotiate(&req.headers, Offer::Json)?;
    if crate::lifecycle::is_namespaces(req.info()) {
        // Upstream's namespace registry has no collection delete.
        return Err(ApiError::method_not_allowed("DELETE"));
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
    for o in std::mem::take(&mut list.items) {
        let k = Key::object(&req.info().storage_resource, o.namespace(), o.name())
            .map_err(|e| req.storage_err(&e))?;
        match crate::lifecycle::delete(
            req.res.storage.as_ref(),
            req.info(),
            &k,
            opts.preconditions.as_ref(),
            opts.dry_run,
        )
        .await
        {
            Ok(crate::lifecycle::Deletion::Gone(d) | crate::lifecycle::Deletion::Pending(d)) => {
                deleted.push(d);
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(req.storage_err(&e)),
        }
    }
    list.items = deleted;
    list.continue_token = None;
    list.remaining_item_count = None;
    list_response(req, Items::Json, list)
}
