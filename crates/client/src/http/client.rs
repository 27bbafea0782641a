//! [`HttpClient`]: one connection pool, credentials and deadlines per [`HttpConfig`], shared
//! by every [`HttpListerWatcher`] and [`Api`](crate::Api) made from it, plus the few writes a
//! controller needs (get, create, replace, patch, delete of JSON objects; [`Api`](crate::Api)
//! makes the same calls for typed objects).
//!
//! Invariants: every request has the config's deadline until its response headers, and an
//! error's body until the same instant; every body read is bounded (objects by
//! [`MAX_OBJECT_BODY`], lists by the config's `max_list_bytes`, errors cut at 64 KiB); a
//! 401 with a refreshable credential is retried once with a fresh one. With several servers
//! ([`HttpConfig::failover_urls`]) a request goes to the current one; a connection failure
//! moves the client to the next ([`Servers`]), and the request is sent there too when that
//! cannot repeat a write: a GET after any connection failure, any method when the request
//! never left (refused, TLS), each server at most once per request.
//!
//! A refusal with `Retry-After` (429 or 5xx) is sent again after the wait, every verb with
//! its body, at most `max_retries` times and within the request timeout (`retry.rs`); with
//! several servers the refusing one counts as failed and the retry goes to the next.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{
    ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, USER_AGENT,
};
use http::{Method, Request, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde_json::Value;
use tokio::time::Instant;

use super::auth::{Auth, ClientIdentity, Credential};
use super::retry::{self, Retries};
use super::servers::Servers;
use serde::Serialize;

use super::connector::connector;
use super::patch::{Patch, PatchParams};
use super::{Connector, HttpConfig, HttpListerWatcher, MAX_ERROR_BODY, body, decode};
use crate::{Error, Result};

/// The largest single-object response read (kube-apiserver's objects are at most 1.5 MiB in
/// etcd and 3 MiB per request).
pub const MAX_OBJECT_BODY: usize = 16 << 20;

/// The `Accept` of every request but metadata-only lists and watches.
pub(crate) const JSON: &str = "application/json";

/// The hyper client (connection pool and connector) and the client certificate its
/// connector presents.
struct Transport {
    client: Client<Connector, Full<Bytes>>,
    identity: Option<Arc<ClientIdentity>>,
}

pub(crate) struct Inner {
    /// Replaced when an exec plugin's client certificate changes (see [`HttpClient::new`]).
    transport: std::sync::RwLock<Arc<Transport>>,
    /// What the transport is built from (to rebuild it with another client certificate).
    config: HttpConfig,
    https: bool,
    pub(crate) servers: Servers,
    auth: Auth,
    /// Impersonation headers.
    headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) max_list_bytes: usize,
    max_retries: u32,
    /// The client-side rate limiter, when configured.
    limiter: Option<super::limiter::Limiter>,
    default_namespace: Option<String>,
    /// Request counts and times (`metrics.rs`).
    metrics: super::metrics::Metrics,
}

/// A client of one server: a shared connection pool, credentials and deadlines. Cheap to
/// clone; lister-watchers made with [`lister_watcher`](Self::lister_watcher) share its
/// connections.
#[derive(Clone)]
pub struct HttpClient {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("servers", &self.inner.servers.all())
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client for `config` (validates its credentials and TLS material).
    ///
    /// An exec plugin may return a client certificate (with or without a token): the client
    /// then presents it, building a new connector and pool when the certificate changes (on
    /// expiry or after a 401, when the plugin runs again), so new connections carry the new
    /// certificate; connections already open finish on the old one. A certificate in the
    /// configuration itself takes precedence over the plugin's (client-go: static
    /// certificate data wins over the exec callback).
    pub fn new(config: HttpConfig) -> Result<Self> {
        let urls = config.server_urls()?;
        let https = urls.iter().any(|u| u.starts_with("https://"));
        let client = build_client(&config, https)?;
        let auth = config.auth()?;
        let headers = match &config.impersonate {
            Some(i) => i.headers()?,
            None => Vec::new(),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                transport: std::sync::RwLock::new(Arc::new(Transport {
                    client,
                    identity: None,
                })),
                servers: Servers::new(urls).ok_or_else(|| Error::Config("no server url".into()))?,
                auth,
                headers,
                timeout: config.request_timeout,
                max_list_bytes: config.max_list_bytes,
                max_retries: config.max_retries,
                limiter: config
                    .rate_limit
                    .and_then(|(qps, burst)| super::limiter::Limiter::new(qps, burst)),
                default_namespace: config.default_namespace.clone(),
                metrics: super::metrics::Metrics::default(),
                https,
                config,
            }),
        })
    }

    /// A snapshot of this client's request metrics (shared by its clones, lister-watchers
    /// and `Api`s): attempts by method and status code with their time until the response
    /// headers, retries after `Retry-After`, and the time spent waiting for the rate limiter
    /// (see [`ClientMetrics`](super::ClientMetrics)).
    pub fn metrics(&self) -> super::ClientMetrics {
        self.inner.metrics.snapshot()
    }

    /// The hyper client that presents `identity` (an exec plugin's certificate; `None`: the
    /// configuration's own, if any), rebuilt when it is not the current one's.
    fn transport_for(
        &self,
        identity: Option<&Arc<ClientIdentity>>,
    ) -> Result<Client<Connector, Full<Bytes>>> {
        let inner = &self.inner;
        let wanted = if inner.config.client_identity_pem.is_some() {
            // The configuration's certificate wins (see `new`).
            None
        } else {
            identity
        };
        {
            let t = inner
                .transport
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if t.identity.as_ref() == wanted {
                return Ok(t.client.clone());
            }
        }
        let mut config = inner.config.clone();
        if let Some(id) = wanted {
            config.client_identity_pem = Some((id.cert_pem.clone(), id.key_pem.clone()));
        }
        let client = build_client(&config, inner.https)
            .map_err(|e| Error::Config(format!("the exec plugin's client certificate: {e}")))?;
        tracing::debug!("client certificate changed: new connections present the new one");
        let mut t = inner
            .transport
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *t = Arc::new(Transport {
            client: client.clone(),
            identity: wanted.cloned(),
        });
        Ok(client)
    }

    /// The namespace of the configuration's kubeconfig context or pod, if any
    /// ([`HttpConfig::default_namespace`]).
    pub fn default_namespace(&self) -> Option<&str> {
        self.inner.default_namespace.as_deref()
    }

    /// A lister-watcher of the collection at `path` over this client's connections.
    pub fn lister_watcher(&self, path: &str) -> Result<HttpListerWatcher> {
        HttpListerWatcher::with_client(self.clone(), path)
    }

    /// `path` (a path from the server root) checked to make a valid URL on every server, with
    /// one leading and no trailing `/`.
    pub(crate) fn path(&self, path: &str) -> Result<String> {
        let path = if path.starts_with('/') {
            path.trim_end_matches('/').to_owned()
        } else {
            format!("/{}", path.trim_end_matches('/'))
        };
        for base in self.inner.servers.all() {
            let url = format!("{base}{path}");
            url.parse::<Uri>()
                .map_err(|e| Error::Config(format!("invalid url {url:?}: {e}")))?;
        }
        Ok(path)
    }

    /// The base URL requests go to now (it changes on a connection failure when the client has
    /// several servers).
    pub fn current_server(&self) -> &str {
        self.inner.servers.current().1
    }

    /// The object at `path`, or `None` when the server says 404.
    pub async fn get(&self, path: &str) -> Result<Option<Value>> {
        match self.object(Method::GET, path, None).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.code() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates `object` in the collection at `path`; the server's copy.
    pub async fn create(&self, path: &str, object: &Value) -> Result<Value> {
        self.object(Method::POST, path, Some(object)).await
    }

    /// Replaces the object at `path` (its `metadata.resourceVersion` is the precondition);
    /// the server's copy. A 409 Conflict means it changed meanwhile.
    pub async fn replace(&self, path: &str, object: &Value) -> Result<Value> {
        self.object(Method::PUT, path, Some(object)).await
    }

    /// Patches the object at `path`; the server's copy.
    pub async fn patch<P: Serialize>(
        &self,
        path: &str,
        patch: &Patch<P>,
        params: &PatchParams,
    ) -> Result<Value> {
        let (query, body) = patch_request(patch, params)?;
        let bytes = self.call(Method::PATCH, path, &query, Some(body)).await?;
        decode_object(&bytes)
    }

    /// Deletes the object at `path`; `false` when it was already gone.
    pub async fn delete(&self, path: &str) -> Result<bool> {
        match self.object(Method::DELETE, path, None).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn object(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let body = match body {
            Some(v) => Some(json_body(v)?),
            None => None,
        };
        decode_object(&self.call(method, path, "", body).await?)
    }

    /// One write or read of a single object: `body` (bytes and content type) sent to
    /// `path?query`, the response body read up to [`MAX_OBJECT_BODY`]; the response headers
    /// under the request timeout on each server tried, then the body under it. [`Api`](crate::Api) and the JSON calls above share it.
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        query: &str,
        body: Option<(Bytes, &'static str)>,
    ) -> Result<Bytes> {
        self.call_accepting(method, path, query, body, JSON).await
    }

    /// [`call`](Self::call) asking for `accept` (e.g. a metadata-only object).
    pub(crate) async fn call_accepting(
        &self,
        method: Method,
        path: &str,
        query: &str,
        body: Option<(Bytes, &'static str)>,
        accept: &'static str,
    ) -> Result<Bytes> {
        let mut uri = self.path(path)?;
        if !query.is_empty() {
            uri.push('?');
            uri.push_str(query);
        }
        // The headers under the deadline per server tried (so that a hung server is left for
        // the next), then the body under it.
        let (res, _) = self.request(method, &uri, body, true, accept).await?;
        body::within(
            self.inner.timeout,
            "object",
            body::read_body(res, MAX_OBJECT_BODY, "object"),
        )
        .await
    }

    /// Sends a request for `path_and_query` to the current server, moving on to the next
    /// on a connection failure (see the module doc); returns the response and the index of
    /// the server that gave it. A 401 with a refreshable credential (token file, exec plugin)
    /// is sent once more with a fresh one; a refusal with `Retry-After` is sent again after
    /// the wait (`retry.rs`), on the next server when there are several. Non-2xx answers are
    /// errors.
    pub(crate) async fn request(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<(Bytes, &'static str)>,
        compressible: bool,
        accept: &'static str,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, usize)> {
        // The first try waits for its token before the request timeout starts, as client-go
        // throttles it before setting up its timeout (`limiter.rs`).
        self.throttle(None).await?;
        let mut retries = Retries::new(self.inner.max_retries, self.inner.timeout);
        let started = tokio::time::Instant::now();
        loop {
            let attempt = self
                .request_servers(
                    &method,
                    path_and_query,
                    &body,
                    compressible,
                    accept,
                    retries.attempt_deadline(),
                )
                .await;
            match attempt {
                Ok(answer) => return Ok(answer),
                Err(Attempt::Refused {
                    error,
                    wait,
                    server,
                }) => {
                    if !retries.take(wait) {
                        tracing::debug!(
                            path = path_and_query, %method, %error,
                            "refused with Retry-After: no retry left within the deadline"
                        );
                        return Err(error);
                    }
                    self.inner.servers.refused(server);
                    self.inner.metrics.retry();
                    tracing::debug!(
                        path = path_and_query, %method, %error, ?wait,
                        "refused with Retry-After: sending again after the wait"
                    );
                    tokio::time::sleep(wait).await;
                    // A retry's token must come within the request's deadline.
                    let left = self
                        .inner
                        .timeout
                        .map(|t| t.saturating_sub(started.elapsed()));
                    self.throttle(left).await?;
                }
                Err(Attempt::Failed(error)) => return Err(error),
            }
        }
    }

    /// Takes a token of the client-side rate limiter, when there is one (`limiter.rs`).
    async fn throttle(&self, deadline: Option<Duration>) -> Result<()> {
        let Some(limiter) = &self.inner.limiter else {
            return Ok(());
        };
        let waiting = Instant::now();
        let acquired = limiter.acquire(deadline).await;
        self.inner.metrics.limiter_wait(waiting.elapsed());
        acquired
    }

    /// One attempt: the current server, then the next ones on connection failures that
    /// cannot repeat a write, each at most once. After a retry (`deadline` set) a server
    /// whose headers do not come by the request's deadline is not blamed, and no other is
    /// tried.
    async fn request_servers(
        &self,
        method: &Method,
        path_and_query: &str,
        body: &Option<(Bytes, &'static str)>,
        compressible: bool,
        accept: &'static str,
        deadline: Option<Instant>,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, usize), Attempt> {
        let servers = &self.inner.servers;
        let mut tries = servers.len();
        loop {
            let (server, base) = servers.current();
            let uri = format!("{base}{path_and_query}");
            let sent = Sent {
                method: method.clone(),
                uri: &uri,
                body: body.clone(),
                compressible,
                accept,
                deadline,
            };
            match self.request_authenticated(sent).await {
                Ok(res) => return Ok((res, server)),
                Err(Failure::Refused(error, wait)) => {
                    return Err(Attempt::Refused {
                        error,
                        wait,
                        server,
                    });
                }
                Err(e) => {
                    let Some(sent) = e.connection_failure() else {
                        return Err(Attempt::Failed(e.into_error()));
                    };
                    servers.failed(server);
                    tries -= 1;
                    // A write that may have reached the server is not sent twice.
                    let repeatable = !sent || *method == Method::GET;
                    if tries == 0 || !repeatable {
                        return Err(Attempt::Failed(e.into_error()));
                    }
                    tracing::debug!(%uri, error = %e, "trying the next server");
                }
            }
        }
    }

    async fn request_authenticated(
        &self,
        req: Sent<'_>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Failure> {
        let auth = &self.inner.auth;
        let sent = auth.credential().await?;
        match self.request_once(req.clone(), &sent).await {
            Err(Failure::Other(e)) if e.code() == Some(401) && auth.rejected(&sent).await => {
                let fresh = auth.credential().await?;
                if fresh == sent {
                    return Err(Failure::Other(e));
                }
                tracing::debug!(uri = req.uri, "401, retrying with a refreshed credential");
                self.request_once(req, &fresh).await
            }
            other => other,
        }
    }

    async fn request_once(
        &self,
        sent: Sent<'_>,
        credential: &Credential,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Failure> {
        let Sent {
            method,
            uri,
            body,
            compressible,
            accept,
            deadline,
        } = sent;
        let client = self.transport_for(credential.identity.as_ref())?;
        let mut req = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(ACCEPT, accept)
            .header(
                USER_AGENT,
                concat!("listwatch-client/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(auth) = &credential.authorization {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        for (k, v) in &self.inner.headers {
            req = req.header(k, v.clone());
        }
        if let Some((_, content_type)) = &body {
            req = req.header(CONTENT_TYPE, *content_type);
        }
        if compressible && !self.inner.config.disable_compression {
            // As Go's transport does for client-go; kube-apiserver compresses large answers.
            req = req.header(ACCEPT_ENCODING, "gzip");
        }
        let req = req
            .body(Full::new(body.map(|(b, _)| b).unwrap_or_default()))
            .map_err(|e| Error::Config(format!("invalid request {uri:?}: {e}")))?;
        tracing::debug!(%uri, %method, "request");
        // The headers are due within the request timeout, or by the request's deadline after
        // a retry if that comes first (then missing it is not this server's failure).
        let start = Instant::now();
        let own = self.inner.timeout.and_then(|t| start.checked_add(t));
        let (due, cut_short) = match (own, deadline) {
            (Some(own), Some(d)) if d < own => (Some(d), true),
            (own, _) => (own, false),
        };
        let call = client.request(req);
        let res = match due {
            Some(due) => tokio::time::timeout_at(due, call).await.map_err(|_| {
                self.inner.metrics.attempt(&method, None, start.elapsed());
                let waited = due.saturating_duration_since(start);
                let e = format!("no response headers from {uri} within {waited:?}");
                if cut_short {
                    Failure::Deadline(format!("{e}, the rest of the request's deadline").into())
                } else {
                    Failure::Sent(e.into())
                }
            })?,
            None => call.await,
        };
        self.inner.metrics.attempt(
            &method,
            res.as_ref().ok().map(|r| r.status().as_u16()),
            start.elapsed(),
        );
        let res = res.map_err(|e| {
            if e.is_connect() {
                Failure::NotSent(Box::new(e))
            } else {
                Failure::Sent(Box::new(e))
            }
        })?;
        if res.status().is_success() {
            return Ok(res);
        }
        let code = res.status().as_u16();
        let wait = retry::refusal_wait(code, res.headers());
        let hint = retry::retry_after_seconds(res.headers());
        let gzip = body::is_gzip(&res);
        // An error body is only read for its Status, within the headers' deadline; a longer
        // one is cut, not refused.
        let read = body::read_prefix(res.into_body(), MAX_ERROR_BODY);
        let read = match due {
            Some(due) => tokio::time::timeout_at(due, read)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Http(
                        format!("the {code} answer's body from {uri} not complete in time").into(),
                    ))
                }),
            None => read.await,
        };
        let error = match read {
            Ok(mut body) => {
                if gzip {
                    // A cut gzip body does not inflate; the code then speaks alone.
                    body = super::gzip::gunzip(&body, MAX_ERROR_BODY).unwrap_or_default();
                }
                decode::decode_status(code, &body)
            }
            // A refusal is retried on its code and header alone (client-go discards its
            // body); if it is the last, the code speaks for it.
            Err(e) if wait.is_some() => {
                decode::decode_status(code, format!("(unreadable body: {e})").as_bytes())
            }
            Err(e) => return Err(Failure::Other(e)),
        };
        let error = with_retry_hint(error, hint);
        Err(match wait {
            Some(wait) => Failure::Refused(error, wait),
            None => Failure::Other(error),
        })
    }
}

/// What one request to one server sends (borrowed from the request it is an attempt of).
#[derive(Clone)]
struct Sent<'a> {
    method: Method,
    uri: &'a str,
    body: Option<(Bytes, &'static str)>,
    compressible: bool,
    accept: &'static str,
    /// The request's deadline, after a retry (see [`Retries::attempt_deadline`]).
    deadline: Option<Instant>,
}

/// How one attempt (a request to the current server, then to the next ones after connection
/// failures) ended without a success.
enum Attempt {
    /// Server `server` refused and asked to be asked again after `wait`.
    Refused {
        error: Error,
        wait: Duration,
        server: usize,
    },
    /// Anything else: the caller's error.
    Failed(Error),
}

/// An error whose Status has no retry hint takes the answer's `Retry-After` (client-go
/// puts the header's value in the errors it builds from answers that are not a Status;
/// kube-apiserver sends the two together), so [`Error::retry_after`] tells a caller what
/// the server asked for once the retries are spent.
fn with_retry_hint(error: Error, seconds: Option<i64>) -> Error {
    match (error, seconds) {
        (Error::Api(status), Some(s)) if s > 0 && status.retry_after() == 0 => {
            Error::api((*status).with_retry_after(u32::try_from(s).unwrap_or(u32::MAX)))
        }
        (error, _) => error,
    }
}

/// The hyper client of `config`: its connector (TCP, proxy, TLS with the configuration's
/// client certificate) and pool, HTTP/2 pings as configured.
fn build_client(config: &HttpConfig, https: bool) -> Result<Client<Connector, Full<Bytes>>> {
    let connector = connector(config, https)?;
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new());
    if let Some(ping) = config.http2_ping {
        builder
            .http2_keep_alive_interval(ping)
            .http2_keep_alive_timeout(ping / 2)
            .http2_keep_alive_while_idle(true);
    }
    Ok(builder.build(connector))
}

/// How one request to one server failed.
#[derive(Debug)]
enum Failure {
    /// No connection: refused, unreachable, TLS handshake failed. The request never left.
    NotSent(Box<dyn std::error::Error + Send + Sync>),
    /// The connection failed after the request may have been sent: reset, closed before the
    /// response, no response headers within the deadline.
    Sent(Box<dyn std::error::Error + Send + Sync>),
    /// The headers did not come by the request's deadline, which was shorter than the
    /// request timeout (an attempt after a retry): not the server's failure, and no time is
    /// left for another.
    Deadline(Box<dyn std::error::Error + Send + Sync>),
    /// The server refused and asked to be asked again after this long (429 or 5xx with a
    /// `Retry-After`, `retry.rs`).
    Refused(Error, Duration),
    /// Anything else (an answer of the server, a bad request).
    Other(Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Other(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotSent(e) | Failure::Sent(e) | Failure::Deadline(e) => e.fmt(f),
            Failure::Refused(e, _) | Failure::Other(e) => e.fmt(f),
        }
    }
}

impl Failure {
    /// For a connection failure, whether the request may have reached the server.
    fn connection_failure(&self) -> Option<bool> {
        match self {
            Failure::NotSent(_) => Some(false),
            Failure::Sent(_) => Some(true),
            Failure::Deadline(_) | Failure::Refused(..) | Failure::Other(_) => None,
        }
    }

    /// The caller's error: a connection failure (or headers missing the deadline) is
    /// [`Error::Connect`], which the reflector retries with backoff (re-watching from its
    /// last version, no relist).
    fn into_error(self) -> Error {
        match self {
            Failure::NotSent(e) | Failure::Sent(e) | Failure::Deadline(e) => Error::Connect(e),
            Failure::Refused(e, _) | Failure::Other(e) => e,
        }
    }
}

/// A JSON request body.
pub(crate) fn json_body<T: Serialize + ?Sized>(value: &T) -> Result<(Bytes, &'static str)> {
    let bytes = serde_json::to_vec(value)
        .map_err(|e| Error::Request(format!("object does not serialize: {e}")))?;
    Ok((Bytes::from(bytes), JSON))
}

fn decode_object(bytes: &[u8]) -> Result<Value> {
    serde_json::from_slice(bytes).map_err(|e| Error::Decode(format!("object response: {e}")))
}

/// The query and body of a patch.
pub(crate) fn patch_request<P: Serialize>(
    patch: &Patch<P>,
    params: &PatchParams,
) -> Result<(String, (Bytes, &'static str))> {
    let query = params.query(patch)?;
    let (bytes, _) = json_body(patch.body())?;
    Ok((query, (bytes, patch.content_type())))
}
