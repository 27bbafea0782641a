//! [`HttpListerWatcher`]: lists and watches a collection of any Kubernetes-compatible server
//! over HTTP/1.1, or HTTP/2 when an https server offers it by ALPN (hyper's client; TLS with the
//! `rustls` feature).
//!
//! - list: `GET {path}?limit=..&continue=..&resourceVersion=..`, one page per call;
//! - watch: `GET {path}?watch=1&..`, decoded frame by frame as the chunks arrive;
//! - a non-2xx answer becomes [`Error::Api`] with the server's `Status` (or one built from
//!   the HTTP code when the body is not a Status); a refused connection is
//!   [`Error::Connect`], which the reflector retries with backoff;
//! - credentials ([`HttpConfig`]): a bearer token, a token file re-read on rotation, basic
//!   auth, an exec credential plugin, client certificates, impersonation; a 401 drops a
//!   refreshable credential and the request is sent once more with a fresh one;
//! - configuration from kubeconfig files (a `KUBECONFIG` list merged as kubectl merges it)
//!   or from inside a pod ([`HttpConfig::in_cluster`]); https trusts the configured CA, or
//!   the system's roots when none is given; `tls-server-name` and `proxy-url` (HTTP
//!   `CONNECT`) as client-go, and without a `proxy-url` the environment's `HTTPS_PROXY`,
//!   `HTTP_PROXY` and `NO_PROXY` as client-go's transports (Go's
//!   `http.ProxyFromEnvironment`);
//! - several servers of one cluster ([`HttpConfig::failover_urls`], or a kubeconfig cluster's
//!   `listwatch.dev/failover-servers` extension): a connection failure moves the client to
//!   the next and the reflector's watch resumes there from its last version (`servers.rs`).

mod api;
mod auth;
mod client;
mod decode;
mod env_proxy;
mod kubeconfig;
mod patch;
mod proxy;
mod servers;
mod typed;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Uri};
use http_body_util::BodyExt;
use hyper_util::client::legacy::connect::HttpConnector;
use listwatch_api::{Object, SelectableFields};

use crate::error::{Error, Result};
use crate::lister::{ListRequest, ListerWatcher, Page, WatchRequest, WatchStream};
pub use api::Api;
use auth::Auth;
pub use auth::{ExecCluster, ExecConfig, Impersonate};
pub use client::{HttpClient, MAX_OBJECT_BODY};
pub use patch::{Patch, PatchParams};
pub use typed::HttpTyped;

#[cfg(feature = "rustls")]
type Connector = hyper_rustls::HttpsConnector<proxy::Connector>;
#[cfg(not(feature = "rustls"))]
type Connector = proxy::Connector;

/// Where a pod's ServiceAccount credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The largest error body read (only its `Status` is wanted).
const MAX_ERROR_BODY: usize = 64 << 10;

/// How to reach a server: base URL, credentials, trust and deadlines.
#[derive(Clone)]
pub struct HttpConfig {
    /// `http(s)://host:port`, optionally with a path prefix.
    pub base_url: String,
    /// Further servers of the same cluster (replicas over one etcd), tried in this order
    /// after `base_url` when a connection fails: refused, reset, TLS handshake, no response
    /// headers within `request_timeout`, a watch cut mid-stream or idle past the reflector's
    /// deadline. Credentials, trust and `tls_server_name` apply to all of them. Empty by
    /// default (one server, as client-go).
    pub failover_urls: Vec<String>,
    /// Sent as `Authorization: Bearer ..`.
    pub bearer_token: Option<String>,
    /// A file holding the bearer token, read again every 50 s and after a 401, so a rotated
    /// token (a projected ServiceAccount token) is picked up; wins over `bearer_token`
    /// (client-go's `BearerTokenFile`).
    pub bearer_token_file: Option<PathBuf>,
    /// Basic auth user and password (not with a token).
    pub basic_auth: Option<(String, String)>,
    /// An exec credential plugin, used when no token or token file is set: run on the
    /// first request, its token cached until its expiry, run again after a 401.
    pub exec: Option<ExecConfig>,
    /// Impersonation headers sent with every request.
    pub impersonate: Option<Impersonate>,
    /// The name the server's certificate is checked against instead of the URL's host.
    pub tls_server_name: Option<String>,
    /// An `http://` proxy every connection tunnels through with `CONNECT`. When unset, the
    /// proxy comes from the environment as client-go's: `HTTPS_PROXY` (or `HTTP_PROXY` for
    /// an `http://` server) unless `NO_PROXY` names the server; never for `localhost` or a
    /// loopback address. Read when the client is built.
    pub proxy_url: Option<String>,
    /// PEM CA bundle that signs the server's certificate (https only).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate chain and private key (https only).
    pub client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The kubeconfig context's namespace, when read from one.
    pub default_namespace: Option<String>,
    /// Deadline of the response headers of every request on each server tried (a server
    /// that misses it counts as failed and a GET goes to the next), then of reading a list's
    /// or an object's body; `None` waits as long as the server takes. Default 60 s, the
    /// apiserver's own `--request-timeout` for lists. A watch's body is bounded by the
    /// reflector's idle deadline instead ([`Config::watch_idle_margin`](crate::Config)).
    pub request_timeout: Option<Duration>,
    /// Deadline of a TCP connect (default 30 s, client-go's dialer).
    pub connect_timeout: Option<Duration>,
    /// TCP keepalive: probes start after this long idle, then every third of it, and the
    /// connection is dropped after three unanswered probes, so a peer gone without a reset
    /// is noticed within twice this (default 30 s, client-go's dialer `KeepAlive`).
    pub tcp_keepalive: Option<Duration>,
    /// On HTTP/2 connections (https servers that offer `h2` by ALPN), a PING after this long
    /// without a frame, and the connection dropped when its answer does not come within half
    /// of it (client-go: 30 s read-idle, 15 s ping timeout). `None`: no pings.
    pub http2_ping: Option<Duration>,
    /// The largest list response body accepted (default 1 GiB); larger is an error, never
    /// an unbounded allocation. Error bodies are read up to 64 KiB and watch frames up to
    /// 16 MiB.
    pub max_list_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            failover_urls: Vec::new(),
            bearer_token: None,
            bearer_token_file: None,
            basic_auth: None,
            exec: None,
            impersonate: None,
            tls_server_name: None,
            proxy_url: None,
            ca_pem: None,
            client_identity_pem: None,
            default_namespace: None,
            request_timeout: Some(Duration::from_secs(60)),
            connect_timeout: Some(Duration::from_secs(30)),
            tcp_keepalive: Some(Duration::from_secs(30)),
            http2_ping: Some(Duration::from_secs(30)),
            max_list_bytes: 1 << 30,
        }
    }
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print credentials.
        f.debug_struct("HttpConfig")
            .field("base_url", &self.base_url)
            .field("failover_urls", &self.failover_urls)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("bearer_token_file", &self.bearer_token_file)
            .field("basic_auth", &self.basic_auth.as_ref().map(|(u, _)| u))
            .field("exec", &self.exec)
            .field("impersonate", &self.impersonate)
            .field("tls_server_name", &self.tls_server_name)
            .field("proxy_url", &self.proxy_url.as_ref().map(|_| "<set>"))
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("client_identity_pem", &self.client_identity_pem.is_some())
            .field("default_namespace", &self.default_namespace)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tcp_keepalive", &self.tcp_keepalive)
            .field("http2_ping", &self.http2_ping)
            .field("max_list_bytes", &self.max_list_bytes)
            .finish()
    }
}

impl HttpConfig {
    /// A configuration for `base_url` with no credentials.
    pub fn new(base_url: impl Into<String>) -> Result<Self> {
        Ok(Self {
            base_url: checked_base_url(base_url.into())?,
            ..Self::default()
        })
    }

    /// A configuration for several servers of one cluster: the first is `base_url`, the
    /// rest are [`failover_urls`](Self::failover_urls).
    pub fn with_servers<S: Into<String>>(urls: impl IntoIterator<Item = S>) -> Result<Self> {
        let mut urls = urls.into_iter();
        let first = urls
            .next()
            .ok_or_else(|| Error::Config("no server url".into()))?;
        Self::new(first)?.failover_urls(urls)
    }

    /// Sets the further servers tried after `base_url` on a connection failure.
    pub fn failover_urls<S: Into<String>>(
        mut self,
        urls: impl IntoIterator<Item = S>,
    ) -> Result<Self> {
        self.failover_urls = urls
            .into_iter()
            .map(|u| checked_base_url(u.into()))
            .collect::<Result<_>>()?;
        Ok(self)
    }

    /// `base_url` then `failover_urls`, each checked, without duplicates.
    pub(crate) fn server_urls(&self) -> Result<Vec<String>> {
        let mut urls: Vec<String> = Vec::with_capacity(1 + self.failover_urls.len());
        for u in std::iter::once(&self.base_url).chain(&self.failover_urls) {
            let u = checked_base_url(u.clone())?;
            if !urls.contains(&u) {
                urls.push(u);
            }
        }
        Ok(urls)
    }

    /// Sets the bearer token.
    #[must_use]
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }

    /// Sets the CA bundle (PEM).
    #[must_use]
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Sets the request timeout.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Sets the TCP connect timeout.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Sets the TCP keepalive idle time (`None`: no keepalive).
    #[must_use]
    pub fn tcp_keepalive(mut self, idle: Option<Duration>) -> Self {
        self.tcp_keepalive = idle;
        self
    }

    /// Sets the largest list body accepted.
    #[must_use]
    pub fn max_list_bytes(mut self, n: usize) -> Self {
        self.max_list_bytes = n;
        self
    }

    /// Sets the bearer token file (re-read on rotation).
    #[must_use]
    pub fn bearer_token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.bearer_token_file = Some(path.into());
        self
    }

    /// Sets an exec credential plugin.
    #[must_use]
    pub fn exec(mut self, exec: ExecConfig) -> Self {
        self.exec = Some(exec);
        self
    }

    /// Sets the impersonation.
    #[must_use]
    pub fn impersonate(mut self, impersonate: Impersonate) -> Self {
        self.impersonate = Some(impersonate);
        self
    }

    /// Sets the client certificate chain and key (PEM).
    #[must_use]
    pub fn client_identity_pem(mut self, cert: Vec<u8>, key: Vec<u8>) -> Self {
        self.client_identity_pem = Some((cert, key));
        self
    }

    /// Sets the TLS server name.
    #[must_use]
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls_server_name = Some(name.into());
        self
    }

    /// Sets the proxy URL (`http://[user:password@]host:port`).
    #[must_use]
    pub fn proxy_url(mut self, url: impl Into<String>) -> Self {
        self.proxy_url = Some(url.into());
        self
    }

    /// Reads the current context of a kubeconfig file.
    pub fn from_kubeconfig(path: &Path) -> Result<Self> {
        Self::from_kubeconfigs(&[path.to_path_buf()])
    }

    /// Reads the current context of kubeconfig files merged as kubectl merges a
    /// `KUBECONFIG` list: the first file to name a cluster, user or context wins it, the first
    /// with a `current-context` sets it; missing files are skipped.
    pub fn from_kubeconfigs(paths: &[PathBuf]) -> Result<Self> {
        Self::from_resolved(kubeconfig::load_merged(paths)?)
    }

    /// Reads `$KUBECONFIG` (all its files, merged) or `~/.kube/config`.
    pub fn from_default_kubeconfig() -> Result<Self> {
        let paths = kubeconfig::default_paths();
        if paths.is_empty() {
            return Err(Error::Config("no KUBECONFIG and no HOME".into()));
        }
        Self::from_kubeconfigs(&paths)
    }

    /// Reads the current context of kubeconfig YAML; relative file references are resolved
    /// against `dir`.
    pub fn from_kubeconfig_yaml(yaml: &str, dir: &Path) -> Result<Self> {
        Self::from_resolved(kubeconfig::resolve_current(yaml, dir)?)
    }

    fn from_resolved(r: kubeconfig::Resolved) -> Result<Self> {
        let mut config = Self::new(r.server)?.failover_urls(r.failover_servers)?;
        config.bearer_token = r.token;
        config.bearer_token_file = r.token_file;
        config.basic_auth = r.basic;
        config.exec = r.exec;
        config.impersonate = r.impersonate;
        config.tls_server_name = r.tls_server_name;
        config.proxy_url = r.proxy_url;
        config.ca_pem = r.ca_pem;
        config.default_namespace = r.namespace;
        config.client_identity_pem = match (r.client_cert_pem, r.client_key_pem) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => {
                return Err(Error::Config(
                    "kubeconfig: a client certificate needs its key and a key its certificate"
                        .into(),
                ));
            }
        };
        Ok(config)
    }

    /// The configuration of a client running in a pod (client-go `InClusterConfig`): the
    /// server from `KUBERNETES_SERVICE_HOST` / `KUBERNETES_SERVICE_PORT`, the pod's
    /// ServiceAccount token (re-read on rotation), CA and namespace from
    /// [`SERVICE_ACCOUNT_DIR`].
    pub fn in_cluster() -> Result<Self> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
        Self::in_cluster_from(&host, &port, Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// [`in_cluster`](Self::in_cluster) with the service address and the mount directory
    /// given (for tests, and sidecars that mount the credentials elsewhere).
    pub fn in_cluster_from(host: &str, port: &str, dir: &Path) -> Result<Self> {
        if host.is_empty() || port.is_empty() {
            return Err(Error::Config(
                "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"
                    .into(),
            ));
        }
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let token = dir.join("token");
        // Fail early when there is no token at all (client-go does too).
        std::fs::metadata(&token)
            .map_err(|e| Error::Config(format!("in-cluster token {}: {e}", token.display())))?;
        let ca = std::fs::read(dir.join("ca.crt")).map_err(|e| {
            Error::Config(format!(
                "in-cluster CA {}: {e}",
                dir.join("ca.crt").display()
            ))
        })?;
        let mut config = Self::new(format!("https://{host}:{port}"))?;
        config.bearer_token_file = Some(token);
        config.ca_pem = Some(ca);
        config.default_namespace = std::fs::read_to_string(dir.join("namespace"))
            .ok()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty());
        Ok(config)
    }

    fn auth(&self) -> Result<Auth> {
        if self.basic_auth.is_some()
            && (self.bearer_token.is_some() || self.bearer_token_file.is_some())
        {
            return Err(Error::Config(
                "basic auth and a bearer token may not both be set".into(),
            ));
        }
        Ok(match (&self.bearer_token_file, &self.bearer_token) {
            (Some(f), _) => Auth::file(f.clone(), auth::TOKEN_FILE_PERIOD),
            (None, Some(t)) => Auth::Fixed(Auth::bearer(t)?),
            (None, None) => match (&self.exec, &self.basic_auth) {
                (Some(e), None) => Auth::exec(e.clone())?,
                (Some(_), Some(_)) => {
                    return Err(Error::Config(
                        "basic auth and an exec plugin may not both be set".into(),
                    ));
                }
                (None, Some((u, p))) => Auth::Fixed(Auth::basic(u, p)?),
                (None, None) => Auth::None,
            },
        })
    }
}

/// `Accept` of a metadata-only list (upstream's metadata client asks for exactly this kind).
const METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
/// `Accept` of a metadata-only watch: each event's object is a `PartialObjectMetadata`.
const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// A [`ListerWatcher`] of dynamic [`Object`]s over HTTP. Wrap it in
/// [`Typed`](crate::Typed) for a serde type.
#[derive(Clone)]
pub struct HttpListerWatcher {
    client: HttpClient,
    /// The collection path from the server root, without a query.
    path: String,
    fields: SelectableFields,
    /// Lists and watches ask for `PartialObjectMetadata` (see [`Self::metadata_only`]).
    metadata_only: bool,
    /// The server the last watch was opened on, blamed when the reflector finds that watch
    /// idle past its deadline ([`ListerWatcher::watch_idle`]); `usize::MAX` before any.
    watch_server: Arc<AtomicUsize>,
}

impl std::fmt::Debug for HttpListerWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpListerWatcher")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl HttpListerWatcher {
    /// A lister-watcher of the collection at `path`, e.g. `/api/v1/pods` or
    /// `/apis/apps/v1/namespaces/ns/deployments`, with a connection pool of its own; make
    /// several from one [`HttpClient`] to share one.
    pub fn new(config: HttpConfig, path: &str) -> Result<Self> {
        Self::with_client(HttpClient::new(config)?, path)
    }

    /// A lister-watcher of the collection at `path` over `client`'s connections.
    pub fn with_client(client: HttpClient, path: &str) -> Result<Self> {
        let path = client.path(path)?;
        Ok(Self {
            client,
            path,
            fields: SelectableFields::none(),
            metadata_only: false,
            watch_server: Arc::new(AtomicUsize::new(usize::MAX)),
        })
    }

    /// Declares the resource's selectable fields, so stored objects can be matched against
    /// field selectors locally (e.g. `spec.nodeName` for pods).
    #[must_use]
    pub fn with_selectable_fields(mut self, fields: SelectableFields) -> Self {
        self.fields = fields;
        self
    }

    /// Lists and watches of metadata only, as client-go's metadata informers and kube-rs's
    /// `metadata_watcher`: the server answers `meta.k8s.io/v1` `PartialObjectMetadataList`
    /// and `PartialObjectMetadata` (apiVersion, kind and metadata; no spec or status), so a
    /// cache of a large collection holds and decodes a fraction of it. Labels, annotations,
    /// owner references and finalizers are all there; a field selector is still applied by
    /// the server, but fields outside `metadata` cannot be matched locally.
    #[must_use]
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// Remembers its watches' server in `cell` (shared with an [`Api`] handle).
    pub(crate) fn with_watch_server(mut self, cell: Arc<AtomicUsize>) -> Self {
        self.watch_server = cell;
        self
    }

    /// A GET of the collection; the response and the index of the server that gave it.
    async fn get(&self, query: String) -> Result<(hyper::Response<hyper::body::Incoming>, usize)> {
        let uri = if query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, query)
        };
        // Watches are never compressed (kube-apiserver does not, and frames must arrive as
        // they are sent); lists may be.
        let compressible = !query.starts_with("watch=");
        let accept = match (self.metadata_only, compressible) {
            (false, _) => client::JSON,
            (true, true) => METADATA_LIST,
            (true, false) => METADATA,
        };
        self.client
            .request(Method::GET, &uri, None, compressible, accept)
            .await
    }
}

/// `fut` within `timeout` (`None`: no deadline); past it, an [`Error::Http`] naming `what`.
async fn within<T>(
    timeout: Option<Duration>,
    what: &str,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match timeout {
        Some(t) => tokio::time::timeout(t, fut)
            .await
            .map_err(|_| Error::Http(format!("{what} not complete within {t:?}").into()))?,
        None => fut.await,
    }
}

/// Reads a whole body of at most `limit` bytes; a longer one is an error.
/// A gzip-encoded answer (`Content-Encoding: gzip`) is decompressed, also to at most
/// `limit` bytes: a small body that inflates past it is the same error.
async fn read_body(
    res: hyper::Response<hyper::body::Incoming>,
    limit: usize,
    what: &str,
) -> Result<Bytes> {
    let gzip = is_gzip(&res);
    let body = match http_body_util::Limited::new(res.into_body(), limit)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return Err(Error::Decode(format!(
                "{what} body larger than {limit} bytes"
            )));
        }
        Err(e) => return Err(Error::Http(e)),
    };
    if !gzip {
        return Ok(body);
    }
    gunzip(&body, limit).map_err(|e| Error::Decode(format!("{what} body: {e}")))
}

fn is_gzip<B>(res: &hyper::Response<B>) -> bool {
    res.headers()
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"))
}

/// Inflates a gzip body to at most `limit` bytes.
fn gunzip(body: &[u8], limit: usize) -> std::result::Result<Bytes, String> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("bad gzip: {e}"))?;
    if out.len() > limit {
        return Err(format!("larger than {limit} bytes once decompressed"));
    }
    Ok(Bytes::from(out))
}

/// Reads the first `limit` bytes of a body (or all of a shorter one).
async fn read_prefix(mut body: hyper::body::Incoming, limit: usize) -> Result<Bytes> {
    let mut out = bytes::BytesMut::new();
    while out.len() < limit {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let take = data.len().min(limit - out.len());
                    out.extend_from_slice(data.get(..take).unwrap_or_default());
                }
            }
            Some(Err(e)) => return Err(Error::Http(Box::new(e))),
            None => break,
        }
    }
    Ok(out.freeze())
}

fn query(pairs: &[(&str, Option<String>)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v {
            q.append_pair(k, v);
        }
    }
    q.finish()
}

fn selector(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// The query of a list request (exposed for tests of the wire shape).
pub(crate) fn list_query(r: &ListRequest) -> String {
    query(&[
        ("labelSelector", selector(r.label_selector.to_string())),
        ("fieldSelector", selector(r.field_selector.to_string())),
        ("limit", r.limit.filter(|l| *l > 0).map(|l| l.to_string())),
        ("continue", r.continue_token.clone()),
        ("resourceVersion", r.resource_version.map(|v| v.to_string())),
        (
            "resourceVersionMatch",
            r.resource_version_match.map(|m| m.as_str().to_owned()),
        ),
    ])
}

/// The query of a watch request.
pub(crate) fn watch_query(r: &WatchRequest) -> String {
    query(&[
        ("watch", Some("1".into())),
        ("labelSelector", selector(r.label_selector.to_string())),
        ("fieldSelector", selector(r.field_selector.to_string())),
        ("resourceVersion", r.resource_version.map(|v| v.to_string())),
        (
            "resourceVersionMatch",
            r.resource_version_match.map(|m| m.as_str().to_owned()),
        ),
        (
            "allowWatchBookmarks",
            r.allow_bookmarks.then(|| "true".into()),
        ),
        (
            "sendInitialEvents",
            r.send_initial_events.then(|| "true".into()),
        ),
        ("timeoutSeconds", r.timeout_seconds.map(|t| t.to_string())),
    ])
}

#[async_trait::async_trait]
impl ListerWatcher for HttpListerWatcher {
    type Object = Object;

    async fn list(&self, request: &ListRequest) -> Result<Page<Object>> {
        // The headers under the request timeout on each server tried, then the body under it.
        let (res, _) = self.get(list_query(request)).await?;
        let inner = &self.client.inner;
        let body = within(
            inner.timeout,
            "list",
            read_body(res, inner.max_list_bytes, "list"),
        )
        .await?;
        decode::decode_list(&body, &self.fields)
    }

    async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<Object>> {
        let body = self.open_watch(request).await?;
        Ok(decode::watch_events(body, self.fields.clone()).boxed())
    }

    fn watch_idle(&self) {
        self.blame_watch_server();
    }
}

impl HttpListerWatcher {
    /// Opens a watch; its body reports a cut connection as a failure of its server.
    async fn open_watch(&self, request: &WatchRequest) -> Result<decode::WatchBody> {
        let (res, server) = self.get(watch_query(request)).await?;
        self.watch_server.store(server, Ordering::Release);
        let servers = self.client.clone();
        Ok(decode::WatchBody::new(
            res.into_body(),
            Box::new(move || {
                servers.inner.servers.failed(server);
            }),
        ))
    }

    /// The last watch's connection is taken as dead: the client moves off its server.
    fn blame_watch_server(&self) {
        let server = self.watch_server.load(Ordering::Acquire);
        if server != usize::MAX {
            self.client.inner.servers.failed(server);
        }
    }
}

/// A base URL checked to be `http(s)://..`, without a trailing `/`.
fn checked_base_url(base_url: String) -> Result<String> {
    let base_url = base_url.trim_end_matches('/').to_owned();
    let uri: Uri = base_url
        .parse()
        .map_err(|e| Error::Config(format!("invalid base url {base_url:?}: {e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => Ok(base_url),
        _ => Err(Error::Config(format!(
            "base url {base_url:?} must be http:// or https://"
        ))),
    }
}

/// The TCP layer: no Nagle, a connect deadline, keepalive probes (see [`HttpConfig`]);
/// through the proxy when one is set.
fn proxied(config: &HttpConfig) -> Result<proxy::Connector> {
    let mut tcp = tcp_connector(config);
    tcp.enforce_http(false);
    Ok(proxy::Connector {
        tcp,
        proxy: match &config.proxy_url {
            Some(u) => Some(proxy::Proxy::parse(u, config.connect_timeout)?),
            None => match env_proxy_for(config)? {
                Some(u) => Some(
                    proxy::Proxy::parse(&u, config.connect_timeout)
                        .map_err(|e| Error::Config(format!("from the environment: {e}")))?,
                ),
                None => None,
            },
        },
    })
}

/// The proxy the environment names for the config's servers; every server must get the same
/// answer (one connector serves them all).
fn env_proxy_for(config: &HttpConfig) -> Result<Option<String>> {
    let env = env_proxy::EnvProxy::from_env();
    let mut answer: Option<Option<String>> = None;
    for url in config.server_urls()? {
        let this = url
            .parse::<http::Uri>()
            .ok()
            .and_then(|server| env.proxy_for(&server));
        match &answer {
            None => answer = Some(this),
            Some(first) if *first == this => {}
            Some(_) => {
                return Err(Error::Config(format!(
                    "the environment's HTTPS_PROXY/HTTP_PROXY/NO_PROXY proxy some servers and \
                     not others ({url}); set proxy-url or make NO_PROXY name all or none"
                )));
            }
        }
    }
    Ok(answer.flatten())
}

fn tcp_connector(config: &HttpConfig) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    http.set_keepalive(config.tcp_keepalive);
    if let Some(idle) = config.tcp_keepalive {
        http.set_keepalive_interval(Some((idle / 3).max(Duration::from_secs(1))));
        http.set_keepalive_retries(Some(3));
    }
    http
}

#[cfg(not(feature = "rustls"))]
fn connector(config: &HttpConfig, https: bool) -> Result<Connector> {
    if https {
        return Err(Error::Config(
            "https:// needs the `rustls` feature of listwatch-client".into(),
        ));
    }
    proxied(config)
}

#[cfg(feature = "rustls")]
fn connector(config: &HttpConfig, https: bool) -> Result<Connector> {
    use std::sync::Arc;

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let http = proxied(config)?;
    let tls_err = |e: &dyn std::fmt::Display| Error::Config(format!("tls: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    match &config.ca_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.map_err(|e| tls_err(&e))?)
                    .map_err(|e| tls_err(&e))?;
            }
        }
        None if https => {
            // client-go: no CA given means the system's roots.
            let found = rustls_native_certs::load_native_certs();
            for e in &found.errors {
                tracing::debug!(error = %e, "system root CAs");
            }
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(Error::Config(
                    "https:// without a CA bundle and no system root CAs found".into(),
                ));
            }
        }
        None => {}
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls_err(&e))?
    .with_root_certificates(roots);
    let tls = match &config.client_identity_pem {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| tls_err(&e))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| tls_err(&e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| tls_err(&e))?
        }
        None => builder.with_no_client_auth(),
    };
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = rustls_pki_types::ServerName::try_from(name.clone())
                .map_err(|e| tls_err(&format!("tls-server-name {name:?}: {e}")))?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    // ALPN offers h2 and http/1.1; the pool uses one multiplexed connection when the server
    // picks h2 (client-go does the same; plain http:// stays HTTP/1.1).
    Ok(builder.enable_all_versions().wrap_connector(http))
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::LabelSelector;

    #[test]
    fn list_and_watch_queries_use_the_kubernetes_parameter_names() {
        let l = ListRequest {
            resource_version: Some(0),
            limit: Some(500),
            label_selector: LabelSelector::parse("app=web").unwrap(),
            ..Default::default()
        };
        assert_eq!(
            list_query(&l),
            "labelSelector=app%3Dweb&limit=500&resourceVersion=0"
        );
        let w = WatchRequest {
            resource_version: Some(12),
            allow_bookmarks: true,
            timeout_seconds: Some(301),
            ..Default::default()
        };
        assert_eq!(
            watch_query(&w),
            "watch=1&resourceVersion=12&allowWatchBookmarks=true&timeoutSeconds=301"
        );
    }

    #[test]
    fn base_urls_must_be_http_or_https() {
        assert!(HttpConfig::new("ftp://x").is_err());
        assert!(HttpConfig::new("not a url").is_err());
        assert_eq!(
            HttpConfig::new("http://127.0.0.1:1/").unwrap().base_url,
            "http://127.0.0.1:1"
        );
    }

    #[tokio::test]
    async fn connections_have_keepalive_probes_and_no_nagle() {
        use tower::ServiceExt;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let config = HttpConfig::new("http://127.0.0.1:1").unwrap();
        let conn = tcp_connector(&config).oneshot(uri.clone()).await.unwrap();
        let sock = socket2::SockRef::from(conn.inner());
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(30));
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(10)
        );
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), 3);
        assert!(sock.tcp_nodelay().unwrap());

        let off = config.tcp_keepalive(None);
        let conn = tcp_connector(&off).oneshot(uri).await.unwrap();
        assert!(!socket2::SockRef::from(conn.inner()).keepalive().unwrap());
    }

    #[test]
    fn debug_output_never_shows_the_token() {
        let c = HttpConfig::new("http://h").unwrap().bearer_token("s3cret");
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
