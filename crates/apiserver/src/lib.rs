//! The listwatch API server: flags, backend choice, built-in and declared resources, the
//! endpoint installer, and graceful shutdown.
//!
//! It sits at the top of the pipeline and composes everything below: a storage backend
//! (the embedded store by default, etcd by flag), one `listwatch-cacher` Cacher per
//! resource, the REST endpoints of `listwatch-endpoints`, the connection layer that serves
//! them with bounded connections ([`serve`], optional TLS in [`tls`]), the validation of
//! its flags ([`flags`]), and the metrics registry they share. Nothing depends on it.
//!
//! ```no_run
//! use clap::Parser;
//! use listwatch_apiserver::{Options, run};
//! # async fn demo() -> Result<(), listwatch_apiserver::ServerError> {
//! let opts = Options::parse_from(["listwatch-apiserver", "--bind", "127.0.0.1:0"]);
//! run(opts, |addr| println!("serving on {addr}")).await
//! # }
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use listwatch_api::Object;
use listwatch_cacher::{Cacher, CacherConfig, CacherMetrics};
use listwatch_endpoints::{Config, Installer, ResourceInfo};
use listwatch_etcd::{Compactor, EtcdClient, EtcdConfig, EtcdStore};
use listwatch_memstore::{MemStore, MemStoreConfig};
use listwatch_storage::{Key, Storage};
use serde_json::json;

pub mod builtin;
mod conn;
pub mod custom;
pub mod flags;
pub mod security;
pub mod serve;
pub mod singletons;
pub mod tls;

/// The storage backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// The embedded MVCC store: in memory (data is lost on exit), or durable with
    /// `--data-dir`.
    Embedded,
    /// An etcd cluster (`--etcd-servers`).
    Etcd,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Command-line options.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "listwatch-apiserver",
    version,
    about = "A Kubernetes-compatible API server over listwatch's storage"
)]
pub struct Options {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Where objects are stored.
    #[arg(long, value_enum, default_value_t = Backend::Embedded)]
    pub storage: Backend,
    /// etcd client URLs, comma-separated (with `--storage etcd`).
    #[arg(long, value_delimiter = ',', default_value = "http://127.0.0.1:2379")]
    pub etcd_servers: Vec<String>,
    /// Key prefix in etcd.
    #[arg(long, default_value = "/registry")]
    pub etcd_prefix: String,
    /// PEM CA bundle that signed etcd's serving certificate (for `https://` endpoints).
    #[arg(long)]
    pub etcd_cafile: Option<PathBuf>,
    /// PEM client certificate for etcd's `--client-cert-auth` (needs `--etcd-keyfile`).
    #[arg(long, requires = "etcd_keyfile")]
    pub etcd_certfile: Option<PathBuf>,
    /// PEM private key of `--etcd-certfile`.
    #[arg(long, requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,
    /// PEM certificate chain to serve HTTPS with (needs `--tls-private-key-file`).
    #[arg(long, requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `--tls-cert-file`.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// YAML file declaring extra, CRD-like resources.
    #[arg(long)]
    pub resources: Option<PathBuf>,
    /// Base of the randomized watch timeout, in seconds (upstream default 1800; at least 1:
    /// upstream's 0 ends every watch without timeoutSeconds at once).
    #[arg(long, default_value_t = 1800, value_parser = flags::min_request_timeout)]
    pub min_request_timeout: u64,
    /// Longest a non-watch request may take from its arrival, in seconds (upstream
    /// `--request-timeout`, 60; at least 1: upstream's 0 times every request out at once).
    #[arg(long, default_value_t = 60, value_parser = flags::request_timeout)]
    pub request_timeout: u64,
    /// Seconds to let requests finish after SIGTERM/SIGINT before exiting.
    #[arg(long, default_value_t = 10, value_parser = flags::seconds)]
    pub shutdown_grace_period: u64,
    /// Seconds between SIGTERM/SIGINT and the start of the shutdown, during which `/readyz`
    /// fails while every request is still served, so that load balancers take this replica
    /// out before it refuses anything (upstream's `--shutdown-delay-duration`; 0: none).
    #[arg(long, default_value_t = 0, value_parser = flags::seconds)]
    pub shutdown_delay_duration: u64,
    /// With `--storage etcd`: run the background controllers (the namespace controller, the
    /// garbage collector) on one replica at a time, elected through a coordination.k8s.io
    /// Lease (upstream's `--leader-elect`). `false`: this server runs them whatever the
    /// others do.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Run the garbage collector (upstream kube-controller-manager's
    /// `--enable-garbage-collector`): dependents of deleted owners are deleted, and
    /// foreground and orphan deletions complete. `false`: objects deleted with
    /// `propagationPolicy` Foreground or Orphan stay, held by their finalizers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_garbage_collector: bool,
    /// Seconds a leader's lease lasts after its last renewal; a replica waits this long
    /// after the last change it saw before taking a lease over.
    #[arg(long, default_value_t = 15, value_parser = flags::positive_seconds)]
    pub leader_elect_lease_duration: u64,
    /// Seconds a leader keeps leading without a successful renewal; must be below the lease
    /// duration.
    #[arg(long, default_value_t = 10, value_parser = flags::positive_seconds)]
    pub leader_elect_renew_deadline: u64,
    /// Seconds between a leader's renewals and a candidate's tries (candidates add jitter).
    #[arg(long, default_value_t = 2, value_parser = flags::positive_seconds)]
    pub leader_elect_retry_period: u64,
    /// The Lease the replicas elect through: its namespace.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// The Lease the replicas elect through: its name.
    #[arg(long, default_value = "listwatch-controllers")]
    pub leader_elect_resource_name: String,
    /// This replica's identity in the Lease (default: the host name and a random suffix).
    #[arg(long)]
    pub leader_elect_identity: Option<String>,
    /// Non-mutating requests served at once (0: no limit, as upstream).
    #[arg(long, default_value_t = 400, value_parser = flags::limit)]
    pub max_requests_inflight: usize,
    /// Mutating requests served at once (0: no limit, as upstream).
    #[arg(long, default_value_t = 200, value_parser = flags::limit)]
    pub max_mutating_requests_inflight: usize,
    /// Watches open at once (0: no limit).
    #[arg(long, default_value_t = 10_000, value_parser = flags::limit)]
    pub max_watches: usize,
    /// Watches one client (user, or remote address before authentication) may have open
    /// at once (0: no limit).
    #[arg(long, default_value_t = 1_000, value_parser = flags::limit)]
    pub max_watches_per_client: usize,
    /// Requests of one client that may wait at once for their body or a seat, per kind
    /// (read-only, mutating); upstream APF's queue length limit.
    #[arg(long, default_value_t = 50, value_parser = flags::positive_count)]
    pub max_queued_requests_per_client: usize,
    /// Bytes of request bodies held in memory at once (0: no limit).
    #[arg(long, default_value_t = 256 * 1024 * 1024, value_parser = flags::bytes_limit)]
    pub max_buffered_request_bytes: usize,
    /// Connections open at once, TLS handshakes included; one more is accepted and closed
    /// (0: no limit). Keep it above --max-watches (an HTTP/1.1 watch is a connection).
    #[arg(long, default_value_t = 12_000, value_parser = flags::limit)]
    pub max_connections: usize,
    /// Seconds a connection has for its first request head, and a later head from its
    /// first byte (Go's ReadHeaderTimeout, which upstream sets to 32 s).
    #[arg(long, default_value_t = 32, value_parser = flags::positive_seconds)]
    pub read_header_timeout: u64,
    /// Seconds a keep-alive connection may wait for its next request (upstream's
    /// IdleTimeout, 90 s).
    #[arg(long, default_value_t = 90, value_parser = flags::positive_seconds)]
    pub idle_connection_timeout: u64,
    /// Seconds a write may make no progress before the connection is closed (a client that
    /// stopped reading).
    #[arg(long, default_value_t = 60, value_parser = flags::positive_seconds)]
    pub write_stall_timeout: u64,
    /// Streams a client may have open at once on one HTTP/2 connection; one more is refused
    /// (upstream's flag; 0 means upstream's default of 250).
    #[arg(long, default_value_t = 0, value_parser = flags::http2_max_streams)]
    pub http2_max_streams_per_connection: u32,
    /// TLS handshakes past their ClientHello at once (0: no limit).
    #[arg(long, default_value_t = 128, value_parser = flags::limit)]
    pub max_tls_handshakes: usize,
    /// Seconds a TLS client has for each step: sending its ClientHello, getting a handshake
    /// slot, completing the handshake.
    #[arg(long, default_value_t = 10, value_parser = flags::positive_seconds)]
    pub tls_handshake_timeout: u64,
    /// Serve reads and watches from a watch cache per resource (upstream `--watch-cache`);
    /// `--watch-cache=false` serves the backend directly.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub watch_cache: bool,
    /// When a consistent list waits for a watch cache that does not catch up with the
    /// backend in time (3 s): read the backend (`true`), or answer 429 with Retry-After: 1
    /// (`false`, upstream's newer behaviour), so a lagging cache cannot turn into a storm of
    /// backend lists.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub watch_cache_consistent_read_fallback: bool,
    /// Embedded store: compaction keeps at least this many recent revisions.
    #[arg(long, default_value_t = 10_000, value_parser = flags::count)]
    pub embedded_retain_revisions: u64,
    /// Embedded store: compaction keeps at least this many seconds of history.
    #[arg(long, default_value_t = 300, value_parser = flags::seconds)]
    pub embedded_retain_window: u64,
    /// Embedded store: history is compacted before it holds more than this many bytes
    /// (default: 1/16 of the machine's memory).
    #[arg(long, value_parser = flags::count)]
    pub embedded_retain_bytes: Option<u64>,
    /// Embedded store: the largest object it stores, in bytes of JSON (0: no limit); larger
    /// writes are 413. Default: etcd's default `--max-request-bytes` (1.5 MiB), so what this
    /// store accepts a default etcd accepts too.
    #[arg(long, default_value_t = listwatch_storage::DEFAULT_MAX_OBJECT_BYTES, value_parser = flags::bytes_limit)]
    pub embedded_max_object_bytes: usize,
    /// etcd backend: seconds between compactions of etcd's history (upstream's
    /// `--etcd-compaction-interval`, 5 minutes), coordinated with the other servers through
    /// `compact_rev_key`; 0: this server never compacts. Either way it reads that key every
    /// 15 s, so that its watch cache answers 410 below what any server compacted.
    #[arg(long, default_value_t = 300, value_parser = flags::seconds)]
    pub etcd_compaction_interval: u64,
    /// etcd backend: the etcd servers' `--max-request-bytes` (default etcd's own, 1.5 MiB);
    /// an object that would not fit a request of this size with its key is refused with 413
    /// before it is sent, instead of etcd's "request is too large".
    #[arg(long, default_value_t = listwatch_storage::DEFAULT_MAX_OBJECT_BYTES, value_parser = flags::positive_count)]
    pub etcd_max_request_bytes: usize,
    /// Embedded store: keep the data in this directory (a write-ahead log and snapshots),
    /// so that it survives restarts; without it the data lives in memory only.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Log filter (tracing `EnvFilter` syntax, e.g. `info` or `listwatch_endpoints=debug`);
    /// `RUST_LOG` overrides it.
    #[arg(long, default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Authentication, authorization and audit (docs/security.md).
    #[command(flatten)]
    pub security: security::SecurityOptions,
}

impl Options {
    /// `https` when serving TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls_cert_file.is_some() || self.security.pki_dir.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A bad `--resources` file.
    #[error(transparent)]
    Resources(#[from] custom::ResourcesFileError),
    /// etcd misconfigured.
    #[error("etcd: {0}")]
    Etcd(String),
    /// The embedded store's `--data-dir` cannot be used.
    #[error("embedded store: {0}")]
    EmbeddedStore(#[from] listwatch_memstore::OpenError),
    /// The leader election flags break its invariants.
    #[error("leader election: {0}")]
    LeaderElection(String),
    /// Bootstrapping the default namespaces failed.
    #[error("creating namespace {name}: {source}")]
    Bootstrap {
        /// The namespace.
        name: String,
        /// Why.
        #[source]
        source: listwatch_storage::Error,
    },
    /// The TLS certificate or key is unusable.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// Authentication, authorization or audit refused to start.
    #[error(transparent)]
    Security(#[from] security::SecurityError),
    /// Listening or serving failed.
    #[error("serving on {addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Storage for each resource, by backend. Every resource gets its own `Arc<dyn Storage>`
/// so a per-resource cache can wrap it.
pub(crate) enum Backends {
    Embedded(MemStore),
    Etcd {
        client: EtcdClient,
        prefix: String,
        max_request_bytes: usize,
        _compactor: Compactor,
    },
}

impl Backends {
    fn open(opts: &Options) -> Result<Self, ServerError> {
        match opts.storage {
            Backend::Embedded => {
                let config = MemStoreConfig {
                    retain_revisions: opts.embedded_retain_revisions,
                    retain_window: Duration::from_secs(opts.embedded_retain_window),
                    retain_bytes: opts
                        .embedded_retain_bytes
                        .unwrap_or_else(default_retain_bytes),
                    // A short history is also looked at often, so it stays short.
                    compaction_check_every: opts.embedded_retain_revisions.clamp(1, 1024),
                    max_object_bytes: (opts.embedded_max_object_bytes > 0)
                        .then_some(opts.embedded_max_object_bytes),
                    ..MemStoreConfig::default()
                };
                let store = match &opts.data_dir {
                    Some(dir) => MemStore::open(dir, config)?,
                    None => {
                        let store = MemStore::with_config(config);
                        tracing::info!(
                            revision = store.current_revision(),
                            "embedded store in memory only: data is lost when the server \
                             stops (use --data-dir to keep it)"
                        );
                        store
                    }
                };
                Ok(Backends::Embedded(store))
            }
            Backend::Etcd => {
                let mut config = EtcdConfig::new(opts.etcd_servers.iter().cloned());
                config.tls = etcd_tls(opts)?;
                let client =
                    EtcdClient::new(config).map_err(|e| ServerError::Etcd(e.to_string()))?;
                // Upstream compacts every 5 minutes by default, coordinating through this key.
                let compactor = Compactor::spawn(
                    client.clone(),
                    Duration::from_secs(opts.etcd_compaction_interval),
                    listwatch_etcd::DEFAULT_COMPACT_KEY,
                );
                Ok(Backends::Etcd {
                    client,
                    prefix: opts.etcd_prefix.clone(),
                    max_request_bytes: opts.etcd_max_request_bytes,
                    _compactor: compactor,
                })
            }
        }
    }

    fn storage_for(&self, info: &ResourceInfo) -> Arc<dyn Storage> {
        match self {
            Backends::Embedded(m) => Arc::new(m.clone()),
            Backends::Etcd {
                client,
                prefix,
                max_request_bytes,
                ..
            } => Arc::new(
                EtcdStore::new(
                    client.clone(),
                    prefix.clone(),
                    info.selectable_fields.clone(),
                )
                .with_max_request_bytes(*max_request_bytes),
            ),
        }
    }
}

/// The embedded store's default history bound: 1/16 of the machine's memory (1 GiB if
/// unknown), so the history of a busy server cannot take the machine's memory.
fn default_retain_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024 / 16)
        })
        .unwrap_or(1 << 30)
}

/// The etcd client TLS of `--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`.
fn etcd_tls(opts: &Options) -> Result<Option<listwatch_etcd::EtcdTls>, ServerError> {
    let read = |p: &PathBuf| {
        std::fs::read(p).map_err(|e| ServerError::Etcd(format!("reading {}: {e}", p.display())))
    };
    let Some(ca) = &opts.etcd_cafile else {
        if opts.etcd_certfile.is_some() {
            return Err(ServerError::Etcd(
                "--etcd-certfile needs --etcd-cafile".into(),
            ));
        }
        return Ok(None);
    };
    Ok(Some(listwatch_etcd::EtcdTls {
        ca_pem: read(ca)?,
        cert_pem: opts.etcd_certfile.as_ref().map(read).transpose()?,
        key_pem: opts.etcd_keyfile.as_ref().map(read).transpose()?,
    }))
}

/// Every resource to serve: the built-ins, then those of `--resources`.
pub fn all_resources(opts: &Options) -> Result<Vec<ResourceInfo>, ServerError> {
    let mut all = builtin::resources();
    if let Some(path) = &opts.resources {
        all.extend(custom::load(path)?);
    }
    Ok(all)
}

/// Creates the namespaces upstream's control plane creates at start, unless they exist:
/// `default` (its bootstrap controller), `kube-system`, `kube-public` and `kube-node-lease`
/// (its system-namespaces controller).
async fn bootstrap_namespaces(api: &listwatch_endpoints::Api) -> Result<(), ServerError> {
    let Some(ns) = api
        .resources()
        .iter()
        .find(|r| r.info.group.is_empty() && r.info.plural == "namespaces")
    else {
        return Ok(());
    };
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let bootstrap = |source| ServerError::Bootstrap {
            name: name.to_owned(),
            source,
        };
        let key = Key::object(&ns.info.storage_resource, None, name).map_err(bootstrap)?;
        let mut obj = json!({"metadata": {"name": name}});
        let Some(map) = obj.as_object_mut() else {
            continue;
        };
        listwatch_endpoints::validation::prepare_create(&ns.info, map, None)
            .map_err(|e| bootstrap(listwatch_storage::Error::internal(e.to_string())))?;
        let object = Object::from_value(obj, &ns.info.selectable_fields)
            .map_err(|e| bootstrap(listwatch_storage::Error::internal(e.to_string())))?;
        match ns.storage.create(&key, object, None).await {
            Ok(_) => tracing::info!(namespace = name, "created"),
            Err(listwatch_storage::Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(bootstrap(e)),
        }
    }
    Ok(())
}

/// The first and the longest wait between two attempts of [`bootstrap_until_done`].
const BOOTSTRAP_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(5));

/// Storage failures that pass by themselves: the backend not reachable yet (etcd starting
/// after the server, a member without a leader), slow or shedding load.
fn passes(e: &listwatch_storage::Error) -> bool {
    use listwatch_storage::Error as E;
    matches!(
        e,
        E::Unreachable { .. } | E::Timeout { .. } | E::NotReady { .. } | E::TooManyRequests { .. }
    )
}

/// Creates the built-in namespaces, retrying with exponential backoff (100 ms doubling to
/// 5 s) for as long as the storage fails in a way that passes (upstream's apiserver also
/// keeps retrying etcd instead of exiting). Meanwhile the server already listens: `/readyz`
/// fails and `/livez` answers 200, both with the reason. Any other failure is returned.
async fn bootstrap_until_done(api: &listwatch_endpoints::Api) -> Result<(), ServerError> {
    let (mut delay, max) = BOOTSTRAP_BACKOFF;
    let mut attempts = 0u64;
    loop {
        match bootstrap_namespaces(api).await {
            Ok(()) => {
                if attempts > 0 {
                    tracing::info!(attempts, "the storage answers: default namespaces in place");
                }
                api.set_waiting_for(None);
                return Ok(());
            }
            Err(ServerError::Bootstrap { name, source }) if passes(&source) => {
                attempts += 1;
                let reason = format!("the storage: creating namespace {name}: {source}");
                // Every attempt at first, then every tenth: a long outage must not flood
                // the log.
                if attempts <= 3 || attempts.is_multiple_of(10) {
                    tracing::warn!(attempts, retry_in = ?delay, %reason, "waiting for the storage");
                }
                api.set_waiting_for(Some(reason));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(max);
            }
            Err(e) => {
                api.set_waiting_for(Some(e.to_string()));
                return Err(e);
            }
        }
    }
}

/// Builds the API for the options (exposed for tests and embedding): one storage per
/// resource, wrapped in a [`Cacher`] unless `--watch-cache=false`.
pub async fn build_api(opts: &Options) -> Result<(listwatch_endpoints::Api, Running), ServerError> {
    let election = election_options(opts)?;
    let backends = Backends::open(opts)?;
    // Consistent lists are served from the caches only where the backend's progress
    // notifications can be requested reliably: etcd before 3.4.31/3.5.13 answers them early
    // (etcd issue 15220, docs/etcd.md), as upstream's ConsistentListFromCache gate knows.
    let consistent_reads_from_cache = match &backends {
        Backends::Embedded(_) => true,
        Backends::Etcd { client, .. } => {
            // Every member must have the fix: a watch may land on any of them.
            let ordered = client.progress_requests_are_ordered().await;
            if !ordered {
                tracing::info!(
                    versions = ?client.endpoint_versions(),
                    "etcd cannot order progress requests: consistent lists read etcd"
                );
            }
            ordered
        }
    };
    let config = Config {
        min_request_timeout: Duration::from_secs(opts.min_request_timeout),
        max_requests_inflight: opts.max_requests_inflight,
        max_mutating_requests_inflight: opts.max_mutating_requests_inflight,
        max_watches: opts.max_watches,
        max_watches_per_client: opts.max_watches_per_client,
        max_queued_requests_per_client: opts.max_queued_requests_per_client,
        max_buffered_body_bytes: opts.max_buffered_request_bytes,
        request_timeout: Duration::from_secs(opts.request_timeout),
        ..Config::default()
    };
    let mut installer = Installer::new(config);
    // The singletons run from `Running` (under a leader election on etcd), not from the
    // installer.
    installer = installer.without_namespace_controller();
    let election_status = singletons::register_metrics(installer.registry_mut());
    let cacher_metrics = CacherMetrics::register(installer.registry_mut());
    if let Backends::Embedded(store) = &backends {
        store.register_metrics(installer.registry_mut());
    }
    let conn_metrics = serve::ConnMetrics::register(installer.registry_mut());
    let mut cachers = Vec::new();
    for info in all_resources(opts)? {
        let backend = backends.storage_for(&info);
        let storage: Arc<dyn Storage> = if opts.watch_cache {
            let mut config = CacherConfig::new(info.storage_resource.clone())
                .with_metrics(cacher_metrics.clone());
            config.consistent_reads_from_cache = consistent_reads_from_cache;
            config.consistent_read_fallback = opts.watch_cache_consistent_read_fallback;
            if let Some(trigger) = &info.trigger_field {
                config = config.with_trigger(trigger);
            }
            let cacher = Arc::new(Cacher::new(backend, config));
            cachers.push(Arc::clone(&cacher));
            cacher
        } else {
            backend
        };
        installer = installer.resource(info, storage);
    }
    let sec_opts = &opts.security;
    let informers = (sec_opts.wants_rbac() || sec_opts.wants_service_accounts())
        .then(|| security::rbac::Informers::start(installer.resources()))
        .flatten();
    let rbac = informers
        .as_ref()
        .filter(|_| sec_opts.wants_rbac())
        .map(security::rbac::Informers::rbac);
    let accounts = informers
        .as_ref()
        .and_then(|i| security::rbac::accounts(i, installer.resources()));
    let security = Arc::new(sec_opts.build(installer.registry_mut(), accounts, rbac)?);
    let admission = Arc::new(security::rbac::RbacAdmission(std::sync::OnceLock::new()));
    let _ = admission.0.set(Arc::clone(&security));
    installer = installer.admission(admission);
    let api = installer.build();
    let (reconciler, rbac_in_force) = informers
        .as_ref()
        .and_then(|i| i.spawn_reconciler(api.resources()))
        .unzip();
    let mut work = singletons::Singletons::default();
    let ns_api = api.clone();
    work.add(
        "namespace-controller",
        Box::new(move || Box::pin(ns_api.namespace_controller())),
    );
    if opts.enable_garbage_collector {
        let gc_api = api.clone();
        work.add(
            "garbage-collector",
            Box::new(move || Box::pin(listwatch_gc::GarbageCollector::new(&gc_api).run())),
        );
    }
    let elect_on = match (&backends, election) {
        (Backends::Etcd { .. }, Some(e)) => {
            let leases = api
                .resources()
                .iter()
                .find(|r| r.info.group == "coordination.k8s.io" && r.info.plural == "leases")
                .ok_or_else(|| {
                    ServerError::LeaderElection("the leases resource is not served".into())
                })?;
            Some((e, leases))
        }
        _ => None,
    };
    let singletons =
        singletons::start(work, elect_on, election_status).map_err(ServerError::LeaderElection)?;
    Ok((
        api,
        Running {
            _backends: backends,
            cachers,
            security,
            informers,
            _reconciler: reconciler.map(AbortOnDrop),
            rbac_in_force,
            conn_metrics,
            singletons,
        },
    ))
}

/// The leader election of `--leader-elect*` (validated), or `None` when it is off.
fn election_options(opts: &Options) -> Result<Option<singletons::ElectionOptions>, ServerError> {
    if !opts.leader_elect {
        return Ok(None);
    }
    let secs = Duration::from_secs;
    let config = listwatch_client::LeaderElectionConfig {
        identity: opts
            .leader_elect_identity
            .clone()
            .unwrap_or_else(listwatch_client::leaderelection::default_identity),
        lease_duration: secs(opts.leader_elect_lease_duration),
        renew_deadline: secs(opts.leader_elect_renew_deadline),
        retry_period: secs(opts.leader_elect_retry_period),
        release_on_cancel: true,
    };
    config
        .validate()
        .map_err(|e| ServerError::LeaderElection(e.to_string()))?;
    Ok(Some(singletons::ElectionOptions {
        config,
        namespace: opts.leader_elect_resource_namespace.clone(),
        name: opts.leader_elect_resource_name.clone(),
    }))
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The router of the running server: the API and the review routes behind the security
/// filter.
pub fn router(api: &listwatch_endpoints::Api, running: &Running) -> axum::Router {
    let sec = Arc::clone(&running.security);
    axum::Router::new()
        .merge(security::reviews::router(Arc::clone(&sec), api.resources()))
        .merge(api.router())
        .layer(axum::middleware::from_fn_with_state(
            sec,
            security::filter::filter,
        ))
}

/// What must live as long as the server: the backends (and etcd's compactor) and the
/// cachers (each stops when dropped).
pub struct Running {
    _backends: Backends,
    cachers: Vec<Arc<Cacher>>,
    security: Arc<security::Security>,
    informers: Option<security::rbac::Informers>,
    _reconciler: Option<AbortOnDrop>,
    /// Turns true once the bootstrap RBAC policy is in the authorizer's stores.
    rbac_in_force: Option<tokio::sync::watch::Receiver<bool>>,
    conn_metrics: serve::ConnMetrics,
    /// The singletons (or the election that runs them); stopped when dropped.
    singletons: singletons::Running,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("cachers", &self.cachers.len())
            .finish_non_exhaustive()
    }
}

impl Running {
    /// Resolves once every cache has listed its backend and is serving, the security
    /// informers have synced, and (with RBAC) the bootstrap policy is in force.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn wait_ready(&self) {
        futures::future::join_all(self.cachers.iter().map(|c| c.wait_ready())).await;
        if let Some(i) = &self.informers {
            i.wait_synced().await;
        }
        if let Some(rx) = &self.rbac_in_force {
            // An error means the reconciler stopped (the informers ended): nothing to wait for.
            let _ = rx.clone().wait_for(|in_force| *in_force).await;
        }
    }

    /// The connection layer's metrics, registered with the API's.
    pub fn conn_metrics(&self) -> &serve::ConnMetrics {
        &self.conn_metrics
    }
}

impl Options {
    /// How [`serve::serve`] bounds connections, by these options (reads the TLS files).
    pub fn serve_config(&self) -> Result<serve::ServeConfig, ServerError> {
        let secs = Duration::from_secs;
        let tls = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => Some(serve::TlsSettings {
                config: tls::server_config(cert, key, self.security.client_ca_file.as_deref())?,
                max_handshakes: self.max_tls_handshakes,
                handshake_timeout: secs(self.tls_handshake_timeout),
            }),
            _ => None,
        };
        Ok(serve::ServeConfig {
            max_connections: self.max_connections,
            read_header_timeout: secs(self.read_header_timeout),
            idle_timeout: secs(self.idle_connection_timeout),
            write_stall_timeout: secs(self.write_stall_timeout),
            // Upstream's request timeout also covers writing the response (its timeout
            // filter kills a connection still being written to); ours starts when the
            // handler is done, so that a 504 or 408 at the deadline still goes out.
            response_timeout: secs(self.request_timeout),
            tls,
            http2: serve::Http2Settings {
                max_streams: match self.http2_max_streams_per_connection {
                    0 => serve::DEFAULT_HTTP2_MAX_STREAMS,
                    n => n,
                },
                ..serve::Http2Settings::default()
            },
        })
    }
}

/// Runs the server until SIGTERM/SIGINT; `on_listening` gets the bound address once every
/// cache is ready.
pub async fn run(
    mut opts: Options,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), ServerError> {
    let pki = match opts.security.pki_dir.clone() {
        Some(dir) => Some(security::pki::apply(&mut opts, &dir)?),
        None => None,
    };
    let tls_on = opts.tls_cert_file.is_some();
    opts.security.check(opts.bind, tls_on)?;
    let (api, running) = build_api(&opts).await?;
    // Listen before the storage answers: a server started together with etcd (as a service
    // manager does) waits for it, with /readyz failing and /livez saying why.
    api.set_waiting_for(Some("creating the default namespaces".into()));
    let io = |source| ServerError::Io {
        addr: opts.bind,
        source,
    };
    let listener = tokio::net::TcpListener::bind(opts.bind).await.map_err(io)?;
    let addr = listener.local_addr().map_err(io)?;
    let shutdown = api.shutdown_handle();
    let serve_config = opts.serve_config()?;
    warn_if_files_run_out(serve_config.max_connections);
    let mut server = tokio::spawn(serve::serve(
        listener,
        router(&api, &running),
        serve_config,
        shutdown.clone(),
        running.conn_metrics.clone(),
    ));
    if let Some(pki) = &pki {
        let path = pki.write_kubeconfig(addr).map_err(io)?;
        tracing::info!(kubeconfig = %path.display(), "admin kubeconfig written");
    }
    // Already serving (with /readyz failing); announce once every cache is ready, so what a
    // person (or a test) does next is not answered with 429s.
    let announced = tokio::select! {
        res = async {
            bootstrap_until_done(&api).await?;
            // /readyz fails until the bootstrap RBAC policy is in force, as upstream's
            // rbac/bootstrap-roles hook.
            if running.rbac_in_force.is_some() {
                api.set_waiting_for(Some("the bootstrap RBAC policy".into()));
            }
            running.wait_ready().await;
            api.set_waiting_for(None);
            Ok::<_, ServerError>(())
        } => {
            if let Err(e) = res {
                // Not a storage outage (those are retried): stop serving and say why.
                shutdown.shutdown();
                server.abort();
                return Err(e);
            }
            true
        }
        () = terminate_signal() => false,
        () = async {
            // Only reached when readiness takes long (e.g. etcd unreachable): say so.
            let mut every = tokio::time::interval(Duration::from_secs(5));
            every.tick().await;
            loop {
                every.tick().await;
                match api.ready().await {
                    Ok(()) => tracing::info!("caches are becoming ready"),
                    Err(e) => tracing::warn!(%addr, reason = %e, "waiting for the storage to become ready"),
                }
            }
        } => false,
    };
    if announced {
        on_listening(addr);
        tracing::info!(%addr, storage = ?opts.storage, resources = api.resources().len(),
            watch_cache = opts.watch_cache, "serving");
        tokio::select! {
            res = &mut server => {
                return match res {
                    Ok(r) => r.map_err(|source| ServerError::Io { addr, source }),
                    Err(e) => Err(ServerError::Io { addr, source: std::io::Error::other(e) }),
                };
            }
            () = terminate_signal() => {}
        }
    }
    if announced && opts.shutdown_delay_duration > 0 {
        // /readyz fails from now on; everything else is served as before until the delay
        // is over, so that load balancers stop sending requests before any is refused.
        tracing::info!(
            delay_seconds = opts.shutdown_delay_duration,
            "shutdown requested: /readyz fails, still serving until the delay is over"
        );
        shutdown.drain();
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(opts.shutdown_delay_duration)) => {}
            // A second signal skips the rest of the delay.
            () = terminate_signal() => {}
        }
    }
    tracing::info!(
        grace_seconds = opts.shutdown_grace_period,
        "shutting down: ending watches, refusing new requests"
    );
    shutdown.shutdown();
    let mut running = running;
    // The singletons stop first and the lease is released, so another replica takes over
    // at its next try rather than a lease duration later.
    running
        .singletons
        .stop(Duration::from_secs(opts.leader_elect_renew_deadline))
        .await;
    match tokio::time::timeout(Duration::from_secs(opts.shutdown_grace_period), &mut server).await {
        Ok(_) => tracing::info!("stopped"),
        Err(_) => {
            tracing::warn!("grace period over with requests still open; exiting");
            server.abort();
        }
    }
    drop(running);
    Ok(())
}

/// Warns when the connection cap does not fit the open-file limit: accepts would fail
/// (and wait) before the cap is reached. Linux only (reads `/proc/self/limits`).
fn warn_if_files_run_out(max_connections: usize) {
    let soft_limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|limits| {
            limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|n| n.parse::<usize>().ok())
        });
    // Room for the store, etcd connections, logs and the listener.
    const RESERVE: usize = 256;
    if let Some(files) = soft_limit
        && (max_connections == 0 || max_connections.saturating_add(RESERVE) > files)
    {
        tracing::warn!(
            max_connections,
            open_file_limit = files,
            "the open-file limit is below --max-connections plus a reserve of {RESERVE}: \
             connections beyond it wait to be accepted; raise the limit (ulimit -n) or \
             lower --max-connections"
        );
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn terminate_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
