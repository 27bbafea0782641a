//! [`HttpConfig`]: how to reach a cluster — its servers, credentials, trust and deadlines —
//! from code, kubeconfig files (a `KUBECONFIG` list merged as kubectl merges it) or a pod's
//! mounted ServiceAccount ([`HttpConfig::in_cluster`]).
//!
//! Invariants: a configuration only ever holds checked `http(s)://` base URLs; `Debug` never
//! prints a credential; which credential wins when several are set is decided in one place
//! ([`HttpConfig::auth`]), and conflicting ones are an error, never a silent choice.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Uri;

use super::SERVICE_ACCOUNT_DIR;
use super::auth::{self, Auth, ExecConfig, Impersonate};
use super::kubeconfig;
use crate::{Error, Result};

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
    /// first request, its token and/or client certificate cached until their expiry, run
    /// again after a 401 (a new certificate is presented on new connections).
    pub exec: Option<ExecConfig>,
    /// Impersonation headers sent with every request.
    pub impersonate: Option<Impersonate>,
    /// The name the server's certificate is checked against instead of the URL's host.
    pub tls_server_name: Option<String>,
    /// Accept any server certificate (kubeconfig `insecure-skip-tls-verify`, client-go's
    /// `Insecure`): the connection is encrypted but the server is not authenticated. Not
    /// with a CA. Off by default.
    pub insecure_skip_tls_verify: bool,
    /// Ask for no compressed answers (kubeconfig `disable-compression`, client-go's
    /// `DisableCompression`): no `Accept-Encoding: gzip` on lists, objects and watch-lists,
    /// for fast networks where the server's gzip costs more than it saves. Off by default.
    pub disable_compression: bool,
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
    /// How many times a refused request is sent again: an answer `429`, or `5xx`, with a
    /// `Retry-After` of whole seconds is retried after that wait (at most 30 s), within
    /// `request_timeout` of the request's start, on the next server when there are several
    /// (every verb, the body re-sent; see `http/retry.rs`). Default 10, client-go's
    /// `maxRetries`; 0 returns every refusal at once.
    pub max_retries: u32,
    /// Client-side rate limit, `(qps, burst)` (client-go's `QPS`/`Burst`, 5/10 there by
    /// default): every request, each retry included, waits for a token of one bucket per
    /// client; `None` (the default, as kube-rs) sends requests as callers make them, and so
    /// does a `qps` of 0 or less. A request's first try waits for its token however long
    /// that takes, before its timeout starts (client-go: a throttled client does not time
    /// out requests it never sent; drop the call to give up); a retry's token must come
    /// within the request timeout, else the refusal is returned at once. A request dropped
    /// while it waits gives its token back.
    pub rate_limit: Option<(f64, u32)>,
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
            insecure_skip_tls_verify: false,
            disable_compression: false,
            request_timeout: Some(Duration::from_secs(60)),
            connect_timeout: Some(Duration::from_secs(30)),
            tcp_keepalive: Some(Duration::from_secs(30)),
            http2_ping: Some(Duration::from_secs(30)),
            max_list_bytes: 1 << 30,
            max_retries: super::retry::DEFAULT_MAX_RETRIES,
            rate_limit: None,
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
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("disable_compression", &self.disable_compression)
            .field("proxy_url", &self.proxy_url.as_ref().map(|_| "<set>"))
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("client_identity_pem", &self.client_identity_pem.is_some())
            .field("default_namespace", &self.default_namespace)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tcp_keepalive", &self.tcp_keepalive)
            .field("http2_ping", &self.http2_ping)
            .field("max_list_bytes", &self.max_list_bytes)
            .field("max_retries", &self.max_retries)
            .field("rate_limit", &self.rate_limit)
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

    /// Limits this client to `qps` requests per second with bursts of `burst` (see the
    /// field).
    #[must_use]
    pub fn rate_limit(mut self, qps: f64, burst: u32) -> Self {
        self.rate_limit = Some((qps, burst));
        self
    }

    /// Sets how many times a refused request (429 or 5xx with `Retry-After`) is sent again
    /// (0: never).
    #[must_use]
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
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

    /// Accepts any server certificate (see the field); a warning is logged when a client is
    /// built with it.
    #[must_use]
    pub fn insecure_skip_tls_verify(mut self, on: bool) -> Self {
        self.insecure_skip_tls_verify = on;
        self
    }

    /// Asks for no compressed answers (see the field).
    #[must_use]
    pub fn disable_compression(mut self, on: bool) -> Self {
        self.disable_compression = on;
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
        config.insecure_skip_tls_verify = r.insecure_skip_tls_verify;
        config.disable_compression = r.disable_compression;
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
        Self::in_cluster_with_dir(Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// [`in_cluster`](Self::in_cluster) with the credentials mounted in `dir` instead of
    /// [`SERVICE_ACCOUNT_DIR`]; the server still comes from `KUBERNETES_SERVICE_HOST` and
    /// `KUBERNETES_SERVICE_PORT`.
    pub fn in_cluster_with_dir(dir: &Path) -> Result<Self> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
        Self::in_cluster_from(&host, &port, dir)
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

    /// The configuration wherever the program runs (kube-rs's `Config::infer`, client-go's
    /// deferred loading): the kubeconfig files of `$KUBECONFIG` or `~/.kube/config` when one
    /// of them exists and they are not all empty (its errors are returned as they are: a
    /// broken kubeconfig does not silently become another cluster), else the pod's
    /// in-cluster configuration; when neither is there, an error naming both. Files that
    /// exist but hold nothing (no current context, context, cluster or user) count as no
    /// kubeconfig, as client-go's `ErrEmptyConfig` does.
    ///
    /// ```no_run
    /// use listwatch_client::{HttpClient, HttpConfig};
    /// let client = HttpClient::new(HttpConfig::infer()?)?;
    /// # Ok::<(), listwatch_client::Error>(())
    /// ```
    pub fn infer() -> Result<Self> {
        let host = std::env::var("KUBERNETES_SERVICE_HOST").unwrap_or_default();
        let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_default();
        Self::infer_from(
            &kubeconfig::default_paths(),
            &host,
            &port,
            Path::new(SERVICE_ACCOUNT_DIR),
        )
    }

    /// [`infer`](Self::infer) from these kubeconfig paths, service address and mount
    /// directory.
    pub fn infer_from(kubeconfigs: &[PathBuf], host: &str, port: &str, dir: &Path) -> Result<Self> {
        if let Some(resolved) = kubeconfig::load_merged_unless_empty(kubeconfigs)? {
            return Self::from_resolved(resolved);
        }
        Self::in_cluster_from(host, port, dir).map_err(|e| {
            let paths: Vec<String> = kubeconfigs
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            Error::Config(format!(
                "no kubeconfig, or only empty ones (looked for {}), and not in a cluster: {e}",
                if paths.is_empty() {
                    "none: no KUBECONFIG and no HOME".to_owned()
                } else {
                    paths.join(", ")
                }
            ))
        })
    }

    pub(crate) fn auth(&self) -> Result<Auth> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infer_prefers_an_existing_kubeconfig_then_in_cluster_then_names_both() {
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("config");
        let missing = dir.path().join("missing");
        let sa = dir.path().join("sa");
        std::fs::create_dir(&sa).unwrap();
        // Neither: one error naming both.
        let e = HttpConfig::infer_from(std::slice::from_ref(&missing), "", "", &sa).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("no kubeconfig") && msg.contains("missing"),
            "{msg}"
        );
        assert!(msg.contains("KUBERNETES_SERVICE_HOST"), "{msg}");
        // In-cluster files only.
        std::fs::write(sa.join("token"), "t").unwrap();
        std::fs::write(sa.join("ca.crt"), "ca").unwrap();
        std::fs::write(sa.join("namespace"), "ops\n").unwrap();
        let c =
            HttpConfig::infer_from(std::slice::from_ref(&missing), "10.0.0.1", "443", &sa).unwrap();
        assert_eq!(c.base_url, "https://10.0.0.1:443");
        assert_eq!(c.default_namespace.as_deref(), Some("ops"));
        // A kubeconfig that exists wins, even in a cluster.
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: http://127.0.0.1:6443\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\nusers:\n- name: u\n  user: {}\n",
        )
        .unwrap();
        let c = HttpConfig::infer_from(&[missing, kc], "10.0.0.1", "443", &sa).unwrap();
        assert_eq!(c.base_url, "http://127.0.0.1:6443");
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

    #[test]
    fn debug_output_never_shows_the_token() {
        let c = HttpConfig::new("http://h").unwrap().bearer_token("s3cret");
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
