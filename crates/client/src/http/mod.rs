//! [`HttpListerWatcher`]: lists and watches a collection of any Kubernetes-compatible server
//! over HTTP/1.1 (hyper's client; TLS with the `rustls` feature).
//!
//! - list: `GET {path}?limit=..&continue=..&resourceVersion=..`, one page per call;
//! - watch: `GET {path}?watch=1&..`, decoded frame by frame as the chunks arrive;
//! - a non-2xx answer becomes [`Error::Api`] with the server's `Status` (or one built from
//!   the HTTP code when the body is not a Status); a refused connection is
//!   [`Error::Connect`], which the reflector retries with backoff.

mod decode;
mod kubeconfig;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::header::{ACCEPT, AUTHORIZATION, HeaderValue, USER_AGENT};
use http::{Method, Request, Uri};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use listwatch_api::{Object, SelectableFields};

use crate::error::{Error, Result};
use crate::lister::{ListRequest, ListerWatcher, Page, WatchRequest, WatchStream};

#[cfg(feature = "rustls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
#[cfg(not(feature = "rustls"))]
type Connector = HttpConnector;

/// The largest error body read (only its `Status` is wanted).
const MAX_ERROR_BODY: usize = 64 << 10;

/// How to reach a server: base URL, credentials, trust and deadlines.
#[derive(Clone)]
pub struct HttpConfig {
    /// `http(s)://host:port`, optionally with a path prefix.
    pub base_url: String,
    /// Sent as `Authorization: Bearer ..`.
    pub bearer_token: Option<String>,
    /// PEM CA bundle that signs the server's certificate (https only).
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate chain and private key (https only).
    pub client_identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The kubeconfig context's namespace, when read from one.
    pub default_namespace: Option<String>,
    /// Deadline of a whole list (headers and body), and of opening a watch (until the
    /// response headers); `None` waits as long as the server takes. Default 60 s, the
    /// apiserver's own `--request-timeout` for lists. A watch's body is bounded by the
    /// reflector's idle deadline instead ([`Config::watch_idle_margin`](crate::Config)).
    pub request_timeout: Option<Duration>,
    /// Deadline of a TCP connect (default 30 s, client-go's dialer).
    pub connect_timeout: Option<Duration>,
    /// TCP keepalive: probes start after this long idle, then every third of it, and the
    /// connection is dropped after three unanswered probes, so a peer gone without a reset
    /// is noticed within twice this (default 30 s, client-go's dialer `KeepAlive`).
    pub tcp_keepalive: Option<Duration>,
    /// The largest list response body accepted (default 1 GiB); larger is an error, never
    /// an unbounded allocation. Error bodies are read up to 64 KiB and watch frames up to
    /// 16 MiB.
    pub max_list_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            bearer_token: None,
            ca_pem: None,
            client_identity_pem: None,
            default_namespace: None,
            request_timeout: Some(Duration::from_secs(60)),
            connect_timeout: Some(Duration::from_secs(30)),
            tcp_keepalive: Some(Duration::from_secs(30)),
            max_list_bytes: 1 << 30,
        }
    }
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print credentials.
        f.debug_struct("HttpConfig")
            .field("base_url", &self.base_url)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("client_identity_pem", &self.client_identity_pem.is_some())
            .field("default_namespace", &self.default_namespace)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tcp_keepalive", &self.tcp_keepalive)
            .field("max_list_bytes", &self.max_list_bytes)
            .finish()
    }
}

impl HttpConfig {
    /// A configuration for `base_url` with no credentials.
    pub fn new(base_url: impl Into<String>) -> Result<Self> {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        let uri: Uri = base_url
            .parse()
            .map_err(|e| Error::Config(format!("invalid base url {base_url:?}: {e}")))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => {
                return Err(Error::Config(format!(
                    "base url {base_url:?} must be http:// or https://"
                )));
            }
        }
        Ok(Self {
            base_url,
            ..Self::default()
        })
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

    /// Reads the current context of a kubeconfig file.
    pub fn from_kubeconfig(path: &Path) -> Result<Self> {
        let yaml = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!("cannot read kubeconfig {}: {e}", path.display()))
        })?;
        Self::from_kubeconfig_yaml(&yaml, path.parent().unwrap_or(Path::new(".")))
    }

    /// Reads `$KUBECONFIG` (its first file) or `~/.kube/config`.
    pub fn from_default_kubeconfig() -> Result<Self> {
        let path = kubeconfig::default_path()
            .ok_or_else(|| Error::Config("no KUBECONFIG and no HOME".into()))?;
        Self::from_kubeconfig(&path)
    }

    /// Reads the current context of kubeconfig YAML; relative file references are resolved
    /// against `dir`.
    pub fn from_kubeconfig_yaml(yaml: &str, dir: &Path) -> Result<Self> {
        let r = kubeconfig::resolve_current(yaml, dir)?;
        let mut config = Self::new(r.server)?;
        config.bearer_token = r.token;
        config.ca_pem = r.ca_pem;
        config.default_namespace = r.namespace;
        config.client_identity_pem = r.client_cert_pem.zip(r.client_key_pem);
        Ok(config)
    }
}

/// A [`ListerWatcher`] of dynamic [`Object`]s over HTTP. Wrap it in
/// [`Typed`](crate::Typed) for a serde type.
#[derive(Clone)]
pub struct HttpListerWatcher {
    client: Client<Connector, Empty<Bytes>>,
    /// Base URL + collection path, without a query.
    url: String,
    auth: Option<HeaderValue>,
    fields: SelectableFields,
    timeout: Option<Duration>,
    max_list_bytes: usize,
}

impl std::fmt::Debug for HttpListerWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpListerWatcher")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl HttpListerWatcher {
    /// A lister-watcher of the collection at `path`, e.g. `/api/v1/pods` or
    /// `/apis/apps/v1/namespaces/ns/deployments`.
    pub fn new(config: HttpConfig, path: &str) -> Result<Self> {
        let https = config.base_url.starts_with("https://");
        let connector = connector(&config, https)?;
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let auth =
            match &config.bearer_token {
                Some(t) => Some(HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                    Error::Config("bearer token is not a valid header value".into())
                })?),
                None => None,
            };
        let path = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("/{path}")
        };
        let url = format!("{}{}", config.base_url, path.trim_end_matches('/'));
        url.parse::<Uri>()
            .map_err(|e| Error::Config(format!("invalid url {url:?}: {e}")))?;
        Ok(Self {
            client,
            url,
            auth,
            fields: SelectableFields::none(),
            timeout: config.request_timeout,
            max_list_bytes: config.max_list_bytes,
        })
    }

    /// Declares the resource's selectable fields, so stored objects can be matched against
    /// field selectors locally (e.g. `spec.nodeName` for pods).
    #[must_use]
    pub fn with_selectable_fields(mut self, fields: SelectableFields) -> Self {
        self.fields = fields;
        self
    }

    async fn get(&self, query: String) -> Result<hyper::Response<hyper::body::Incoming>> {
        let uri = if query.is_empty() {
            self.url.clone()
        } else {
            format!("{}?{}", self.url, query)
        };
        let mut req = Request::builder()
            .method(Method::GET)
            .uri(&uri)
            .header(ACCEPT, "application/json")
            .header(
                USER_AGENT,
                concat!("listwatch-client/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        let req = req
            .body(Empty::new())
            .map_err(|e| Error::Config(format!("invalid request {uri:?}: {e}")))?;
        tracing::debug!(%uri, "GET");
        let call = self.client.request(req);
        let res = match self.timeout {
            Some(t) => tokio::time::timeout(t, call)
                .await
                .map_err(|_| Error::Http(format!("no response within {t:?}").into()))?,
            None => call.await,
        };
        let res = res.map_err(|e| {
            if e.is_connect() {
                Error::Connect(Box::new(e))
            } else {
                Error::Http(Box::new(e))
            }
        })?;
        if res.status().is_success() {
            return Ok(res);
        }
        let code = res.status().as_u16();
        // An error body is only read for its Status; a longer one is cut, not refused.
        let body = read_prefix(res.into_body(), MAX_ERROR_BODY).await?;
        Err(decode::decode_status(code, &body))
    }
}

/// Reads a whole body of at most `limit` bytes; a longer one is an error.
async fn read_body(body: hyper::body::Incoming, limit: usize, what: &str) -> Result<Bytes> {
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Error::Decode(format!(
            "{what} body larger than {limit} bytes"
        ))),
        Err(e) => Err(Error::Http(e)),
    }
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
        let list = async {
            let res = self.get(list_query(request)).await?;
            let body = read_body(res.into_body(), self.max_list_bytes, "list").await?;
            decode::decode_list(&body, &self.fields)
        };
        // The whole list (headers and body) is under the request timeout.
        match self.timeout {
            Some(t) => tokio::time::timeout(t, list)
                .await
                .map_err(|_| Error::Http(format!("list not complete within {t:?}").into()))?,
            None => list.await,
        }
    }

    async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<Object>> {
        let res = self.get(watch_query(request)).await?;
        Ok(decode::watch_events(res.into_body(), self.fields.clone()).boxed())
    }
}

/// The TCP layer: no Nagle, a connect deadline, keepalive probes (see [`HttpConfig`]).
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
    Ok(tcp_connector(config))
}

#[cfg(feature = "rustls")]
fn connector(config: &HttpConfig, https: bool) -> Result<Connector> {
    use std::sync::Arc;

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let mut http = tcp_connector(config);
    http.enforce_http(false);
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
            return Err(Error::Config(
                "https:// needs a CA bundle (ca_pem or the kubeconfig's)".into(),
            ));
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
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
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
