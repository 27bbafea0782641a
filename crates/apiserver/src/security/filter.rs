//! The request filter, upstream's `WithAuthentication` → `WithAudit` → `WithAuthorization`
//! in one axum middleware: resolve what the request asks once ([`RequestInfo`], put in the request's
//! extensions for the handlers, and its [`attributes`]), authenticate it (401 on a bad credential),
//! record it (audit), authorize it (403 with upstream's message), and only then hand it on
//! with the user in its extensions ([`Identity`]).
//!
//! It also names the request's flow for the endpoints' fair queuing ([`ClientKey`]): the
//! authenticated user, or the peer address for anonymous and unauthenticated clients.
//!
//! Around all of it, as upstream's `WithAuditInit`, every request gets an audit ID — the
//! client's `Audit-ID` header when it sent a usable one, else a fresh UUID — that every
//! response carries back as `Audit-Id` (audit on or off, 401 and 403 included) and every
//! audit event of the request records.
//!
//! Invariants: nothing reaches a handler unauthenticated or unauthorized; the verb
//! authorized is the verb the handlers will serve (a `watch=1` GET of a collection is
//! authorized as `watch`; a named GET with `watch=1` is a `get`, as upstream); logs
//! inside a request carry its user; the user metric's label comes from a fixed set.

use listwatch_endpoints::ErrorResponse;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use listwatch_audit::{Event, Level, ObjectRef, ResponseStatus, Stage};
use listwatch_auth::authn::{bearer_token, websocket_bearer_token};
use listwatch_auth::{Attributes, Credentials, UserInfo};
use listwatch_endpoints::{
    ClientKey, EXEMPT_GROUP, Exempt, RequestInfo, RequestObject, RequestObjectName,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rustls_pki_types::CertificateDer;
use tracing::Instrument;

use super::{Mode, Security};

/// The authenticated user of a request (request extension).
#[derive(Debug, Clone)]
pub struct Identity(pub Arc<UserInfo>);

/// The client end of a connection: its address and, over TLS, the certificate chain it
/// presented (request extension `ConnectInfo<Peer>`, set by [`crate::serve`] on every
/// request of the connection).
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The address the connection was accepted on (the server's end), when known.
    pub local: Option<SocketAddr>,
    /// Its TLS client certificates, end entity first.
    pub certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

/// Metrics of the filter.
#[derive(Debug, Clone, Default)]
pub struct FilterMetrics {
    /// `apiserver_authenticated_user_requests{username}` (username from a fixed set).
    users: Family<Vec<(String, String)>, Counter>,
    /// `apiserver_authorization_decisions{decision}`.
    decisions: Family<Vec<(String, String)>, Counter>,
    /// `apiserver_authentication_attempts{result}`.
    attempts: Family<Vec<(String, String)>, Counter>,
}

impl FilterMetrics {
    /// Registers the metrics.
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> Self {
        let m = Self::default();
        registry.register(
            "apiserver_authenticated_user_requests",
            "Requests by authenticated user (user names compressed to a fixed set of labels)",
            m.users.clone(),
        );
        registry.register(
            "apiserver_authorization_decisions",
            "Authorization decisions",
            m.decisions.clone(),
        );
        registry.register(
            "apiserver_authentication_attempts",
            "Authentication attempts by result",
            m.attempts.clone(),
        );
        m
    }

    fn inc(f: &Family<Vec<(String, String)>, Counter>, k: &str, v: &str) {
        f.get_or_create(&vec![(k.to_owned(), v.to_owned())]).inc();
    }
}

/// What a request asks to do, as the handlers will serve it (upstream's `RequestInfo`,
/// resolved by [`RequestInfo::new`]).
pub fn attributes(method: &Method, uri: &Uri) -> Attributes {
    attributes_of(&RequestInfo::new(method, uri))
}

/// The authorization attributes of a resolved request.
fn attributes_of(info: &RequestInfo) -> Attributes {
    if !info.resource_request {
        return Attributes::non_resource(&info.verb, &info.non_resource_path);
    }
    Attributes {
        verb: info.verb.clone(),
        resource_request: true,
        namespace: info.namespace.clone(),
        api_group: info.api_group.clone(),
        api_version: info.api_version.clone(),
        resource: info.resource.clone(),
        subresource: info.subresource.clone(),
        name: info.name.clone(),
        path: info.path.clone(),
    }
}

/// The bearer token of an `Authorization` header's bytes, as upstream reads it (Go
/// compares bytes): a UTF-8 value by [`bearer_token`]; a value that is not UTF-8 but whose
/// scheme is `Bearer` is a token that can match none, reported as `(None, true)` so that it
/// fails authentication (401) instead of being dropped. Any other value is no token.
fn authorization_bearer(value: &[u8]) -> (Option<String>, bool) {
    if let Ok(text) = std::str::from_utf8(value) {
        return (bearer_token(text).map(str::to_owned), false);
    }
    let text = String::from_utf8_lossy(value);
    (None, bearer_token(&text).is_some())
}

/// Whether a request asks for a websocket upgrade, as upstream's `IsWebSocketRequest`:
/// `Upgrade: websocket` and `upgrade` among the `Connection` header's tokens.
fn is_websocket_request(headers: &axum::http::HeaderMap) -> bool {
    let websocket = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"));
    websocket
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Upstream's 401 Status.
fn unauthorized_status() -> listwatch_api::Status {
    listwatch_api::status::Status::failure(401, "Unauthorized", "Unauthorized")
}

/// Upstream's 401.
pub fn unauthorized() -> Response {
    listwatch_endpoints::ApiError::from_status(unauthorized_status()).into_response()
}

struct AuditCtx {
    sec: Arc<Security>,
    level: Level,
    omit: Vec<Stage>,
    id: String,
    received: SystemTime,
    uri: String,
    attrs: Attributes,
    user: Arc<UserInfo>,
    /// The user the request impersonates, once impersonation was allowed.
    impersonated: Option<Arc<UserInfo>>,
    source: String,
    agent: String,
    annotations: std::collections::BTreeMap<String, String>,
    request_object: Option<serde_json::Value>,
    /// Filled by the create handler with the name of the object it writes.
    created: RequestObjectName,
}

impl AuditCtx {
    fn event(
        &self,
        stage: Stage,
        code: Option<u16>,
        sent: Option<&listwatch_api::Status>,
    ) -> Option<Event> {
        if self.level == Level::None || self.omit.contains(&stage) {
            return None;
        }
        let mut e = Event::new(self.level, &self.id, stage, self.received);
        e.request_uri.clone_from(&self.uri);
        e.verb.clone_from(&self.attrs.verb);
        e.user = UserInfo::clone(&self.user);
        e.impersonated_user = self.impersonated.as_deref().cloned();
        e.source_ips = vec![self.source.clone()];
        e.user_agent.clone_from(&self.agent);
        if self.attrs.resource_request {
            // A create names its object in the body: as upstream's LogRequestObject (at
            // Metadata level too), the decoded object supplies the name — the handler
            // reports it; a recorded body (Request level) is the fallback.
            let name = if self.attrs.name.is_empty() {
                self.created
                    .get()
                    .or_else(|| {
                        self.request_object
                            .as_ref()
                            .and_then(|o| o["metadata"]["name"].as_str())
                            .map(str::to_owned)
                    })
                    .unwrap_or_default()
            } else {
                self.attrs.name.clone()
            };
            e.object_ref = Some(ObjectRef {
                resource: self.attrs.resource.clone(),
                namespace: self.attrs.namespace.clone(),
                name,
                api_group: self.attrs.api_group.clone(),
                api_version: self.attrs.api_version.clone(),
                subresource: self.attrs.subresource.clone(),
            });
        }
        e.response_status = code.map(|code| response_status(code, sent));
        e.annotations.clone_from(&self.annotations);
        if stage != Stage::RequestReceived {
            e.request_object.clone_from(&self.request_object);
        }
        Some(e)
    }

    /// Records the event; while the log's queue is full this waits as the backend's mode
    /// says (upstream's blocking log backend by default).
    async fn emit(&self, stage: Stage, code: Option<u16>, sent: Option<&listwatch_api::Status>) {
        if let (Some(e), Some((_, backend))) = (self.event(stage, code, sent), &self.sec.audit) {
            backend.log(&e).await;
        }
    }
}

/// An event's `responseStatus`: the code, and for a failure what upstream's
/// `LogResponseObject` copies of the Status sent (status, message, reason, details).
fn response_status(code: u16, sent: Option<&listwatch_api::Status>) -> ResponseStatus {
    let mut r = ResponseStatus {
        code,
        ..ResponseStatus::default()
    };
    match sent {
        Some(s) if code >= 400 || s.status == "Failure" => {
            r.status.clone_from(&s.status);
            r.message.clone_from(&s.message);
            r.reason.clone_from(&s.reason);
            r.details = s
                .details
                .as_ref()
                .and_then(|d| serde_json::to_value(d).ok());
        }
        _ if code >= 400 => r.status = "Failure".into(),
        _ => {}
    }
    r
}

/// Emits `ResponseComplete` when a long-running response's body ends or is dropped.
struct CompleteOnDrop(AuditCtx, u16);

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        let Some(e) = self.0.event(Stage::ResponseComplete, Some(self.1), None) else {
            return;
        };
        let sec = Arc::clone(&self.0.sec);
        // A drop cannot wait: a task records the event as any other (waiting for room in
        // the log's queue as the mode says); outside a runtime it is queued or dropped.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Some((_, backend)) = &sec.audit {
                        backend.log(&e).await;
                    }
                });
            }
            Err(_) => {
                if let Some((_, backend)) = &sec.audit {
                    backend.log_nowait(&e);
                }
            }
        }
    }
}

/// The response header carrying the request's audit ID (upstream's `Audit-ID`; header
/// names are case-insensitive, HTTP/2 sends them lower-case).
pub const AUDIT_ID_HEADER: &str = "audit-id";

/// Longest client-chosen audit ID kept; a longer one is replaced by a fresh ID (upstream
/// keeps any length; here every audit line would carry it).
const MAX_CLIENT_AUDIT_ID: usize = 128;

/// The request's audit ID: the client's `Audit-ID` header when it is short printable ASCII,
/// else a fresh UUID.
fn request_audit_id(headers: &axum::http::HeaderMap) -> String {
    headers
        .get(AUDIT_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| {
            !v.is_empty()
                && v.len() <= MAX_CLIENT_AUDIT_ID
                && v.bytes().all(|b| b.is_ascii_graphic())
        })
        .map_or_else(audit_id, str::to_owned)
}

fn audit_id() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        u16::from_be_bytes([b[4], b[5]]),
        u16::from_be_bytes([b[6], b[7]]) & 0x0fff,
        (u16::from_be_bytes([b[8], b[9]]) & 0x3fff) | 0x8000,
        u64::from_be_bytes([0, 0, b[10], b[11], b[12], b[13], b[14], b[15]])
    )
}

/// The middleware: the audit ID (upstream's `WithAuditInit`) around authentication, audit
/// and authorization.
pub async fn filter(State(sec): State<Arc<Security>>, req: Request, next: Next) -> Response {
    let id = request_audit_id(req.headers());
    let mut resp = secure(sec, req, next, &id).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(AUDIT_ID_HEADER, v);
    }
    resp
}

/// Authentication, audit and authorization of one request with audit ID `id`.
async fn secure(sec: Arc<Security>, mut req: Request, next: Next, id: &str) -> Response {
    let received = SystemTime::now();
    // Resolved once: the handlers read the path from the request's `RequestInfo`.
    let info = RequestInfo::new(req.method(), req.uri());
    let attrs = attributes_of(&info);
    req.extensions_mut().insert(info);
    let peer = req
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|c| c.0.clone());
    let user = match &sec.mode {
        Mode::Insecure => {
            // Nothing authenticates: keep web pages out (DNS rebinding, cross-site
            // websockets and POSTs), before anything else runs.
            let local = peer.as_ref().and_then(|p| p.local);
            if let Err(message) = super::local_only::check(req.headers(), req.uri(), local) {
                tracing::debug!(peer = ?peer.as_ref().map(|p| p.addr), %message, "refused a request from outside the machine's own origins");
                let status = listwatch_api::status::Status::failure(403, "Forbidden", message);
                let ctx = audit_ctx(
                    &sec,
                    &req,
                    &attrs,
                    Arc::clone(&sec.superuser),
                    received,
                    peer.as_ref(),
                    id,
                );
                if let Some(ctx) = ctx {
                    ctx.emit(Stage::ResponseComplete, Some(403), Some(&status))
                        .await;
                }
                return listwatch_endpoints::ApiError::from_status(status).into_response();
            }
            Arc::clone(&sec.superuser)
        }
        Mode::Secure { authn } => {
            let headers = req.headers();
            // Upstream's websocket protocol authenticator reads only websocket requests.
            let ws_token = headers
                .get(header::SEC_WEBSOCKET_PROTOCOL)
                .filter(|_| is_websocket_request(headers))
                .and_then(|v| v.to_str().ok())
                .and_then(websocket_bearer_token);
            let (bearer, undecodable) = match headers.get(header::AUTHORIZATION) {
                None => (None, false),
                Some(v) => authorization_bearer(v.as_bytes()),
            };
            let bearer = bearer.or(ws_token);
            let certs = peer.as_ref().and_then(|p| p.certs.clone());
            let creds = Credentials {
                bearer: bearer.as_deref(),
                client_certs: certs.as_ref().map(|c| c.as_slice()),
            };
            let result = match authn.authenticate(&creds).await {
                // A bearer token that is not text matches no token: it fails like any
                // token no authenticator accepts (a client certificate still counts), never
                // falling back to anonymous.
                Ok(u) if undecodable && u.name == listwatch_auth::user::ANONYMOUS => {
                    Err(listwatch_auth::authn::AuthnError::InvalidToken)
                }
                other => other,
            };
            match result {
                Ok(u) => {
                    FilterMetrics::inc(&sec.metrics.attempts, "result", "success");
                    u
                }
                Err(e) => {
                    FilterMetrics::inc(&sec.metrics.attempts, "result", "error");
                    tracing::debug!(peer = ?peer.as_ref().map(|p| p.addr), error = %e, "unauthorized");
                    let ctx = audit_ctx(
                        &sec,
                        &req,
                        &attrs,
                        Arc::new(UserInfo::default()),
                        received,
                        peer.as_ref(),
                        id,
                    );
                    if let Some(ctx) = ctx {
                        ctx.emit(
                            Stage::ResponseComplete,
                            Some(401),
                            Some(&unauthorized_status()),
                        )
                        .await;
                    }
                    return unauthorized();
                }
            }
        }
    };
    // As upstream (WithAudit before WithImpersonation): the event and its policy level are
    // the requester's, and an impersonation refused is recorded too.
    let mut ctx = audit_ctx(
        &sec,
        &req,
        &attrs,
        Arc::clone(&user),
        received,
        peer.as_ref(),
        id,
    );
    if let Some(c) = &ctx {
        c.emit(Stage::RequestReceived, None, None).await;
    }
    let requester = Arc::clone(&user);
    let user = match impersonate(&sec, &req, user) {
        Ok(u) => u,
        Err(resp) => {
            if let Some(c) = &ctx {
                let sent = resp
                    .extensions()
                    .get::<listwatch_endpoints::SentStatus>()
                    .map(|s| &*s.0);
                c.emit(Stage::ResponseComplete, Some(resp.status().as_u16()), sent)
                    .await;
            }
            return *resp;
        }
    };
    if !Arc::ptr_eq(&user, &requester)
        && let Some(c) = ctx.as_mut()
    {
        c.impersonated = Some(Arc::clone(&user));
    }
    FilterMetrics::inc(&sec.metrics.users, "username", user.metric_label());
    let decision = sec.authz.authorize(&user, &attrs);
    let allowed = decision.allowed();
    FilterMetrics::inc(
        &sec.metrics.decisions,
        "decision",
        if allowed { "allowed" } else { "denied" },
    );
    if let Some(c) = ctx.as_mut() {
        c.annotations.insert(
            "authorization.k8s.io/decision".into(),
            if allowed { "allow" } else { "forbid" }.into(),
        );
        let reason = decision.reason().to_string();
        if !reason.is_empty() {
            c.annotations
                .insert("authorization.k8s.io/reason".into(), reason);
        }
    }
    if !allowed {
        let status = listwatch_auth::authz::forbidden_status(&user, &attrs, decision.reason());
        tracing::debug!(user = %user.name, message = %status.message, "forbidden");
        if let Some(c) = &ctx {
            c.emit(Stage::ResponseComplete, Some(403), Some(&status))
                .await;
        }
        return listwatch_endpoints::ApiError::from_status(status).into_response();
    }
    let captured = if ctx.as_ref().is_some_and(|c| c.level >= Level::Request) {
        let (r, captured) = super::audit_body::tee_body(req);
        req = r;
        let decoded = RequestObject::default();
        req.extensions_mut().insert(decoded.clone());
        Some((captured, decoded))
    } else {
        None
    };
    if let Some(c) = &ctx {
        req.extensions_mut().insert(c.created.clone());
    }
    req.extensions_mut().insert(Identity(Arc::clone(&user)));
    // Fairness keys on who the client is: its user once authenticated, else its address
    // (anonymous and insecure-mode requests share a user name, not an identity).
    let identified =
        matches!(sec.mode, Mode::Secure { .. }) && user.name != listwatch_auth::user::ANONYMOUS;
    let key = match (identified, &peer) {
        (true, _) => Some(ClientKey::user(user.name.clone())),
        (false, Some(p)) => Some(ClientKey::address(p.addr.ip())),
        (false, None) => None,
    };
    if let Some(key) = key {
        req.extensions_mut().insert(key);
    }
    // Upstream's `exempt` FlowSchema: the cluster's administrators are never queued.
    if identified && user.groups.iter().any(|g| g == EXEMPT_GROUP) {
        req.extensions_mut().insert(Exempt);
    }
    let span = tracing::info_span!("request", user = %user.name, verb = %attrs.verb);
    let resp = next.run(req).instrument(span).await;
    let code = resp.status().as_u16();
    let Some(mut ctx) = ctx else {
        return resp;
    };
    if let Some((c, decoded)) = captured {
        // What the handler decoded, as upstream records it; the filter's own reading only
        // for a handler that records nothing (TokenRequest).
        let had_body = c.had_body();
        ctx.request_object = decoded.take().or_else(|| c.object());
        let write = matches!(attrs.verb.as_str(), "create" | "update" | "patch");
        if ctx.request_object.is_none() && had_body && write && resp.status().is_success() {
            // Never a silent gap: a successful write whose body is not in the event says so.
            ctx.annotations.insert(
                super::audit_body::NOT_RECORDED.into(),
                "the request body could not be decoded for the audit log".into(),
            );
        }
    }
    if attrs.verb == "watch" && resp.status() == StatusCode::OK {
        ctx.emit(Stage::ResponseStarted, Some(code), None).await;
        let (parts, body) = resp.into_parts();
        let guard = CompleteOnDrop(ctx, code);
        let stream = body.into_data_stream().map(move |chunk| {
            let _ = &guard;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(stream));
    }
    let sent = resp
        .extensions()
        .get::<listwatch_endpoints::SentStatus>()
        .map(|s| &*s.0);
    ctx.emit(Stage::ResponseComplete, Some(code), sent).await;
    resp
}

/// Upstream's impersonation ([`super::impersonation`]): the requester unchanged without
/// impersonation headers, else the impersonated user once every `impersonate` check passed;
/// headers that cannot be used are a 400, a refused check a 403.
fn impersonate(
    sec: &Security,
    req: &Request,
    user: Arc<UserInfo>,
) -> Result<Arc<UserInfo>, Box<Response>> {
    let want = match super::impersonation::requested(req.headers()) {
        Ok(None) => return Ok(user),
        Ok(Some(w)) => w,
        Err(e) => {
            return Err(Box::new(
                listwatch_endpoints::ApiError::bad_request(e.0).into_response(),
            ));
        }
    };
    match super::impersonation::impersonate(sec.authz.as_ref(), &user, want) {
        Ok(u) => Ok(Arc::new(u)),
        Err(status) => Err(Box::new(
            listwatch_endpoints::ApiError::from_status(*status).into_response(),
        )),
    }
}

fn audit_ctx(
    sec: &Arc<Security>,
    req: &Request,
    attrs: &Attributes,
    user: Arc<UserInfo>,
    received: SystemTime,
    peer: Option<&Peer>,
    id: &str,
) -> Option<AuditCtx> {
    let (policy, _) = sec.audit.as_ref()?;
    let (level, omit) = policy.level(&user, attrs);
    if level == Level::None {
        return None;
    }
    Some(AuditCtx {
        sec: Arc::clone(sec),
        level,
        omit,
        id: id.to_owned(),
        received,
        uri: req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned()),
        attrs: attrs.clone(),
        user,
        impersonated: None,
        source: peer.map(|p| p.addr.ip().to_string()).unwrap_or_default(),
        agent: req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned(),
        annotations: Default::default(),
        request_object: None,
        created: RequestObjectName::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(method: Method, uri: &str) -> Attributes {
        attributes(&method, &uri.parse().unwrap())
    }

    #[test]
    fn verbs_follow_the_handlers() {
        let x = a(Method::GET, "/api/v1/namespaces/demo/pods");
        assert_eq!(
            (x.verb.as_str(), x.namespace.as_str(), x.resource.as_str()),
            ("list", "demo", "pods")
        );
        assert_eq!(
            a(Method::GET, "/api/v1/namespaces/demo/pods?watch=true").verb,
            "watch"
        );
        assert_eq!(
            a(Method::GET, "/api/v1/namespaces/demo/pods?watch=bogus").verb,
            "watch"
        );
        assert_eq!(
            a(Method::GET, "/api/v1/namespaces/demo/pods/p?watch=1").verb,
            "get"
        );
        let x = a(Method::GET, "/api/v1/watch/namespaces/demo/pods/p");
        assert_eq!((x.verb.as_str(), x.name.as_str()), ("watch", "p"));
        assert_eq!(
            a(Method::GET, "/api/v1/watch/namespaces/demo/pods").verb,
            "watch"
        );
        assert_eq!(a(Method::GET, "/api/v1/namespaces/demo/pods/p").verb, "get");
        assert_eq!(
            a(Method::DELETE, "/api/v1/namespaces/demo/pods").verb,
            "deletecollection"
        );
        let s = a(
            Method::PATCH,
            "/apis/apps/v1/namespaces/d/deployments/web/scale",
        );
        assert_eq!(
            (
                s.verb.as_str(),
                s.api_group.as_str(),
                s.subresource.as_str(),
                s.name.as_str()
            ),
            ("patch", "apps", "scale", "web")
        );
        let w = a(
            Method::GET,
            "/api/v1/namespaces/demo/pods?fieldSelector=metadata.name%3Dweb&watch=1",
        );
        assert_eq!((w.verb.as_str(), w.name.as_str()), ("watch", "web"));
        let ns = a(Method::GET, "/api/v1/namespaces/demo");
        assert_eq!((ns.namespace.as_str(), ns.name.as_str()), ("demo", "demo"));
        let t = a(
            Method::POST,
            "/api/v1/namespaces/demo/serviceaccounts/b/token",
        );
        assert_eq!(
            (t.verb.as_str(), t.subresource.as_str()),
            ("create", "token")
        );
    }

    #[test]
    fn other_paths_are_non_resource() {
        for p in [
            "/api",
            "/apis/apps/v1",
            "/healthz",
            "/metrics",
            "/api/v1/namespaces//pods",
        ] {
            let x = a(Method::GET, p);
            assert!(!x.resource_request, "{p}");
            assert_eq!(x.path, p);
            assert_eq!(x.verb, "get");
        }
    }

    #[test]
    fn non_resource_paths_are_decoded() {
        for (sent, seen) in [
            ("/%6detrics", "/metrics"),
            ("/healthz%2F..", "/healthz/.."),
            ("/%61pis/apps/v1", "/apis/apps/v1"),
            ("/readyz%2Fstorage", "/readyz/storage"),
            ("/bad%zz", "/bad%zz"),
        ] {
            let x = a(Method::GET, sent);
            assert!(!x.resource_request, "{sent}");
            assert_eq!(x.path, seen, "{sent}");
        }
    }

    #[test]
    fn clients_may_choose_a_bounded_audit_id() {
        let mut h = axum::http::HeaderMap::new();
        let fresh = request_audit_id(&h);
        assert_eq!(fresh.len(), 36);
        assert_ne!(request_audit_id(&h), fresh);
        h.insert("audit-id", HeaderValue::from_static("trace-42"));
        assert_eq!(request_audit_id(&h), "trace-42");
        for unusable in ["", "two words", &"x".repeat(MAX_CLIENT_AUDIT_ID + 1)] {
            h.insert("audit-id", HeaderValue::from_str(unusable).unwrap());
            assert_eq!(request_audit_id(&h).len(), 36, "{unusable:?}");
        }
        h.insert("audit-id", HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap());
        assert_eq!(request_audit_id(&h).len(), 36, "not ASCII");
    }

    #[test]
    fn audit_ids_look_like_uuids() {
        let id = audit_id();
        assert_eq!(id.len(), 36);
        assert_eq!(id.as_bytes()[14], b'4');
    }
}
