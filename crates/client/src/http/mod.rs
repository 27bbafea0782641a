//! [`HttpListerWatcher`]: lists and watches a collection of any Kubernetes-compatible server
//! over HTTP/1.1, or HTTP/2 when an https server offers it by ALPN (hyper's client; TLS with the
//! `rustls` feature).
//!
//! - list: `GET {path}?limit=..&continue=..&resourceVersion=..`, one page per call;
//! - watch: `GET {path}?watch=1&..`, decoded frame by frame as the chunks arrive;
//! - a non-2xx answer becomes [`Error::Api`](crate::Error::Api) with the server's `Status` (or one built from
//!   the HTTP code when the body is not a Status); a refused connection is
//!   [`Error::Connect`](crate::Error::Connect), which the reflector retries with backoff;
//! - a refusal that asks to be retried (a 429 or 5xx with `Retry-After`: a draining replica,
//!   a watch cache not ready, an overloaded server) is sent again after the wait, as
//!   client-go's rest client does: every verb with its body, at most
//!   [`max_retries`](HttpConfig#structfield.max_retries) (10) times, each wait at most 30 s,
//!   all within the request timeout (`retry.rs`);
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
//!   the next and the reflector's watch resumes there from its last version, and a refusal
//!   with `Retry-After` sends its retry there (`servers.rs`).
//!
//! Modules: `config` ([`HttpConfig`] and its sources), `client` ([`HttpClient`]: the pool,
//! credentials, failover and single-object calls), `lister_watcher` ([`HttpListerWatcher`]),
//! `typed` and `api` (typed access), `connector` (TCP, proxy, TLS), `body` (bounded body
//! reads), `gzip` (gzip bodies of one or several members, inflated in bounded steps), `list_body` (list bodies decoded item by item as they arrive), `decode` (watch
//! frames, Status), `lease_lock` ([`HttpLeaseLock`], the leader election's lock), `auth`,
//! `kubeconfig`, `proxy`,
//! `env_proxy`, `servers`, `retry`, `patch`, `metrics` (request counts and times per client).

mod api;
mod auth;
mod body;
mod client;
mod config;
mod connector;
mod decode;
mod env_proxy;
mod gzip;
#[cfg(feature = "rustls")]
mod insecure;
mod kubeconfig;
mod lease_lock;
mod limiter;
mod list_body;
mod lister_watcher;
mod metrics;
mod params;
mod patch;
mod proxy;
mod retry;
mod servers;
mod subresource;
mod typed;

pub use api::Api;
pub use auth::{ExecCluster, ExecConfig, Impersonate};
pub use client::{HttpClient, MAX_OBJECT_BODY};
pub use config::HttpConfig;
pub use lease_lock::HttpLeaseLock;
pub use lister_watcher::HttpListerWatcher;
pub use metrics::{ClientMetrics, RequestKey, RequestStats};
pub use params::{DeleteParams, PostParams, Preconditions, PropagationPolicy};
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
