//! The server's command-line options ([`Options`], parsed by clap) and what they configure
//! directly: the URL scheme and the connection layer's bounds ([`Options::serve_config`]).
//!
//! Invariants: a numeric option is checked as it is parsed (its clap value parser is in
//! [`crate::flags`]: a bad value is a usage error before anything starts); the checks that
//! span several options (the TLS files, leader election, the security flags) run where the
//! options are used, not here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::{ServerError, flags, security, serve, tls};

/// `--max-connections-per-client`'s default: the default per-client watch cap (1 000, each
/// an HTTP/1.1 connection at worst) plus room for that client's requests (its 2 × 50 queue
/// places and more), and a tenth of the default `--max-connections`, so that one address
/// cannot take the server's connections (or its file descriptors) from the others.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1_200;

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

/// `--help` sections, in upstream's order where upstream has the section
/// (`cliflag.NamedFlagSets`).
pub(crate) mod heading {
    /// Listening, logging, declared resources.
    pub(crate) const GENERIC: &str = "Generic";
    /// The storage backend: the embedded store or etcd.
    pub(crate) const STORAGE: &str = "Etcd / storage";
    /// TLS serving and connection handling.
    pub(crate) const SECURE_SERVING: &str = "Secure serving";
    /// Who a request is.
    pub(crate) const AUTHENTICATION: &str = "Authentication";
    /// What a user may do.
    pub(crate) const AUTHORIZATION: &str = "Authorization";
    /// The audit log.
    pub(crate) const AUDIT: &str = "Audit";
    /// Request, watch and connection limits and timeouts.
    pub(crate) const LIMITS: &str = "Limits / flow control";
    /// The watch cache.
    pub(crate) const WATCH_CACHE: &str = "Watch cache";
    /// The built-in controllers and their leader election.
    pub(crate) const CONTROLLERS: &str = "Controllers / leader election";
}

/// Command-line options.
///
/// Parse them with [`Options::parse_checked`] (what the binary does): it also settles the
/// storage choice (`--etcd-servers` selects etcd) and refuses contradicting flags;
/// [`run`](crate::run) does the same for options parsed otherwise.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "listwatch-apiserver",
    version,
    long_version = concat!(
        env!("CARGO_PKG_VERSION"),
        "\ngitCommit: ",
        env!("LISTWATCH_GIT_COMMIT"),
        " (",
        env!("LISTWATCH_GIT_TREE_STATE"),
        ")\nbuildDate: ",
        env!("LISTWATCH_BUILD_DATE")
    ),
    about = "A Kubernetes-compatible API server over listwatch's storage",
    long_about = "A Kubernetes-compatible API server over listwatch's storage.\n\n\
        Flags follow kube-apiserver's habits: durations as Go writes them (10s, 1m30s, \
        500ms; a bare number is seconds), sizes as Kubernetes quantities (512Mi, 1Gi, 100M, \
        or bytes), a boolean flag alone means true (--watch-cache, --watch-cache=false). \
        A flag given twice takes its last value, as upstream's (repeatable lists add up). \
        `[upstream: ...]` names kube-apiserver's flag where ours differs.",
    allow_negative_numbers = true,
    args_override_self = true
)]
pub struct Options {
    /// Address to listen on, HOST:PORT; the host may be a name (localhost:8080). Port 0
    /// picks a free port; the chosen address is printed. [upstream: --bind-address and
    /// --secure-port, also accepted]
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = flags::bind_address,
        conflicts_with_all = ["bind_address", "secure_port"], help_heading = heading::GENERIC)]
    pub bind: SocketAddr,
    /// The host of `--bind` alone (upstream's flag), with `--secure-port` or port 8080.
    #[arg(long, value_parser = flags::bind_host, help_heading = heading::GENERIC)]
    pub bind_address: Option<std::net::IpAddr>,
    /// The port of `--bind` alone (upstream's flag; here it serves TLS only with
    /// `--tls-cert-file` or `--pki-dir`), with `--bind-address` or 127.0.0.1.
    #[arg(long, help_heading = heading::GENERIC)]
    pub secure_port: Option<u16>,
    /// Where objects are stored [default: etcd with --etcd-servers, else embedded].
    /// `embedded` keeps them in memory (lost on exit) unless `--data-dir` is given.
    /// [upstream: none; etcd always]
    #[arg(long, value_enum, help_heading = heading::STORAGE)]
    pub storage: Option<Backend>,
    /// etcd client URLs, comma-separated; giving them selects etcd [default with
    /// --storage etcd: http://127.0.0.1:2379].
    #[arg(long, value_delimiter = ',', value_parser = flags::etcd_server,
        help_heading = heading::STORAGE)]
    pub etcd_servers: Vec<String>,
    /// Key prefix in etcd.
    #[arg(long, default_value = "/registry", help_heading = heading::STORAGE)]
    pub etcd_prefix: String,
    /// PEM CA bundle that signed etcd's serving certificate (for `https://` endpoints).
    #[arg(long, help_heading = heading::STORAGE)]
    pub etcd_cafile: Option<PathBuf>,
    /// PEM client certificate for etcd's `--client-cert-auth` (needs `--etcd-keyfile`).
    #[arg(long, requires = "etcd_keyfile", help_heading = heading::STORAGE)]
    pub etcd_certfile: Option<PathBuf>,
    /// PEM private key of `--etcd-certfile`.
    #[arg(long, requires = "etcd_certfile", help_heading = heading::STORAGE)]
    pub etcd_keyfile: Option<PathBuf>,
    /// PEM certificate chain to serve HTTPS with (needs `--tls-private-key-file`).
    #[arg(long, requires = "tls_private_key_file", help_heading = heading::SECURE_SERVING)]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `--tls-cert-file`.
    #[arg(long, requires = "tls_cert_file", help_heading = heading::SECURE_SERVING)]
    pub tls_private_key_file: Option<PathBuf>,
    /// YAML file declaring extra, CRD-like resources. [upstream: CRDs]
    #[arg(long, help_heading = heading::GENERIC)]
    pub resources: Option<PathBuf>,
    /// Base of the randomized watch timeout (at least 1s: upstream's 0 ends every watch
    /// without timeoutSeconds at once).
    #[arg(long, default_value = "30m", value_parser = flags::min_request_timeout,
        help_heading = heading::LIMITS)]
    pub min_request_timeout: Duration,
    /// Longest a non-watch request may take from its arrival (at least 1s: upstream's 0
    /// times every request out at once).
    #[arg(long, default_value = "1m", value_parser = flags::request_timeout,
        help_heading = heading::LIMITS)]
    pub request_timeout: Duration,
    /// How long requests may finish after SIGTERM/SIGINT before exiting. [upstream: none]
    #[arg(long, default_value = "10s", value_parser = flags::duration,
        help_heading = heading::GENERIC)]
    pub shutdown_grace_period: Duration,
    /// Between SIGTERM/SIGINT and the start of the shutdown, `/readyz` fails while every
    /// request is still served, so that load balancers take this replica out before it
    /// refuses anything (0: none).
    #[arg(long, default_value = "0s", value_parser = flags::duration,
        help_heading = heading::GENERIC)]
    pub shutdown_delay_duration: Duration,
    /// On etcd: run the background controllers (the namespace controller, the garbage
    /// collector) on one replica at a time, elected through a coordination.k8s.io Lease.
    /// `false`: this server runs them whatever the others do.
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true",
        value_parser = flags::go_bool, action = clap::ArgAction::Set,
        help_heading = heading::CONTROLLERS)]
    pub leader_elect: bool,
    /// Run the garbage collector: dependents of deleted owners are deleted, and foreground
    /// and orphan deletions complete. `false`: objects deleted with `propagationPolicy`
    /// Foreground or Orphan stay, held by their finalizers. [upstream:
    /// kube-controller-manager's]
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true",
        value_parser = flags::go_bool, action = clap::ArgAction::Set,
        help_heading = heading::CONTROLLERS)]
    pub enable_garbage_collector: bool,
    /// Act as every node's kubelet for test environments: a graceful pod deletion (of a pod
    /// with `spec.nodeName`) completes at once, as if the pod's kubelet had stopped its
    /// containers and sent its DELETE of grace 0 — watchers see the mark (MODIFIED, with
    /// deletionTimestamp) then DELETED; finalizers still hold the pod. Deletions already
    /// pending are completed at start. Off, as upstream without a kubelet: the pod stays
    /// Terminating until a DELETE with grace period 0. [upstream: none; listwatch-only]
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true",
        value_parser = flags::go_bool, action = clap::ArgAction::Set,
        help_heading = heading::CONTROLLERS)]
    pub acknowledge_pod_deletion: bool,
    /// How often the system-namespaces loop (a singleton: the leader's) makes sure `default`,
    /// `kube-system`, `kube-public` and `kube-node-lease` exist, re-creating any that went
    /// (deleted through storage, etcd wiped or restored). [upstream: kube-apiserver's
    /// system-namespaces controller, every minute]
    #[arg(long, default_value = "1m", value_parser = flags::duration,
        help_heading = heading::CONTROLLERS)]
    pub system_namespaces_interval: Duration,
    /// The CIDR Services' cluster IPs are allocated from (one IPv4 or IPv6 range); its first
    /// address is the `kubernetes` Service's. [upstream: same flag and default]
    #[arg(long, default_value = listwatch_registry::service_alloc::DEFAULT_SERVICE_CIDR,
        value_parser = flags::service_cidr, help_heading = heading::CONTROLLERS)]
    pub service_cluster_ip_range: listwatch_registry::service_alloc::Cidr,
    /// The ports NodePort and LoadBalancer Services get node ports from, FIRST-LAST.
    /// [upstream: same flag and default]
    #[arg(long, default_value = "30000-32767", value_parser = flags::port_range,
        help_heading = heading::CONTROLLERS)]
    pub service_node_port_range: listwatch_registry::service_alloc::PortRange,
    /// The address the `kubernetes` Service's Endpoints and EndpointSlice point at [default:
    /// the host of `--bind`, or 127.0.0.1 when that is unspecified (0.0.0.0, ::)].
    /// [upstream: same flag; its default is the first non-loopback interface's address]
    #[arg(long, help_heading = heading::CONTROLLERS)]
    pub advertise_address: Option<std::net::IpAddr>,
    /// How long a leader's lease lasts after its last renewal; a replica waits this long
    /// after the last change it saw before taking a lease over.
    #[arg(long, default_value = "15s", value_parser = flags::positive_duration,
        help_heading = heading::CONTROLLERS)]
    pub leader_elect_lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal; below the lease
    /// duration.
    #[arg(long, default_value = "10s", value_parser = flags::positive_duration,
        help_heading = heading::CONTROLLERS)]
    pub leader_elect_renew_deadline: Duration,
    /// Between a leader's renewals and a candidate's tries (candidates add jitter).
    #[arg(long, default_value = "2s", value_parser = flags::positive_duration,
        help_heading = heading::CONTROLLERS)]
    pub leader_elect_retry_period: Duration,
    /// The Lease the replicas elect through: its namespace.
    #[arg(long, default_value = "kube-system", help_heading = heading::CONTROLLERS)]
    pub leader_elect_resource_namespace: String,
    /// The Lease the replicas elect through: its name.
    #[arg(long, default_value = "listwatch-controllers", help_heading = heading::CONTROLLERS)]
    pub leader_elect_resource_name: String,
    /// This replica's identity in the Lease [default: the host name and a random suffix].
    #[arg(long, help_heading = heading::CONTROLLERS)]
    pub leader_elect_identity: Option<String>,
    /// Non-mutating requests served at once (0: no limit, as upstream).
    #[arg(long, default_value_t = 400, value_parser = flags::limit, help_heading = heading::LIMITS)]
    pub max_requests_inflight: usize,
    /// Mutating requests served at once (0: no limit, as upstream).
    #[arg(long, default_value_t = 200, value_parser = flags::limit, help_heading = heading::LIMITS)]
    pub max_mutating_requests_inflight: usize,
    /// Watches open at once (0: no limit). [upstream: none]
    #[arg(long, default_value_t = 10_000, value_parser = flags::limit, help_heading = heading::LIMITS)]
    pub max_watches: usize,
    /// Watches one client (user, or remote address before authentication) may have open
    /// at once (0: no limit). [upstream: none]
    #[arg(long, default_value_t = 1_000, value_parser = flags::limit, help_heading = heading::LIMITS)]
    pub max_watches_per_client: usize,
    /// Requests of one client that may wait at once for their body or a seat, per kind
    /// (read-only, mutating). [upstream: APF's queue length limit]
    #[arg(long, default_value_t = 50, value_parser = flags::positive_count,
        help_heading = heading::LIMITS)]
    pub max_queued_requests_per_client: usize,
    /// Threads of the request compute pool, where the handlers of writes and of Table or
    /// YAML reads run (decode, patch, apply, validation, encoding), apart from the threads
    /// that drive connections, watches and `/healthz`; at most twice this many requests are
    /// in the pool at once, the next place going to the client with the fewest there
    /// (default: the available parallelism; 0: no pool, everything runs on the I/O
    /// threads). [upstream: none; Go's scheduler preempts instead]
    #[arg(long, default_value_t = listwatch_endpoints::default_request_workers(),
        value_parser = flags::workers, help_heading = heading::LIMITS)]
    pub request_workers: usize,
    /// Bytes of request bodies held in memory at once (0: no limit). [upstream: none]
    #[arg(long, default_value = "256Mi", value_parser = flags::bytes_limit,
        help_heading = heading::LIMITS)]
    pub max_buffered_request_bytes: usize,
    /// Bytes the compiled `pattern`s of the served CRDs' schemas may take together
    /// (`apiserver_crd_pattern_bytes`); a CRD whose new patterns would take more is refused
    /// (422). The engine compiles a Unicode class to UTF-8 byte states, so
    /// `^(\pL|\pN){12}$` takes ~200 KiB (0: no limit). [upstream: none; Go's rune-based
    /// `regexp` holds such a pattern in a few KB]
    #[arg(long, default_value = "256Mi", value_parser = flags::bytes_limit,
        help_heading = heading::LIMITS)]
    pub max_crd_pattern_bytes: usize,
    /// Connections open at once, TLS handshakes included; one more is accepted and closed
    /// (0: no limit). Keep it above --max-watches (an HTTP/1.1 watch is a connection).
    /// [upstream: none]
    #[arg(long, default_value_t = 12_000, value_parser = flags::limit, help_heading = heading::LIMITS)]
    pub max_connections: usize,
    /// Connections open at once from one remote IP address; one more is accepted and closed
    /// (0: no limit). Keep it above --max-watches-per-client for clients that watch over
    /// HTTP/1.1 (a watch is a connection there). [upstream: none]
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS_PER_CLIENT, value_parser = flags::limit,
        help_heading = heading::LIMITS)]
    pub max_connections_per_client: usize,
    /// How long a connection has for its first request head, and a later head from its
    /// first byte. [upstream: Go's ReadHeaderTimeout, fixed at 32s]
    #[arg(long, default_value = "32s", value_parser = flags::positive_duration,
        help_heading = heading::LIMITS)]
    pub read_header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request. [upstream:
    /// IdleTimeout, fixed at 90s]
    #[arg(long, default_value = "90s", value_parser = flags::positive_duration,
        help_heading = heading::LIMITS)]
    pub idle_connection_timeout: Duration,
    /// How long a write may make no progress before the connection is closed (a client
    /// that stopped reading). [upstream: none]
    #[arg(long, default_value = "60s", value_parser = flags::positive_duration,
        help_heading = heading::LIMITS)]
    pub write_stall_timeout: Duration,
    /// Streams a client may have open at once on one HTTP/2 connection; one more is refused
    /// (0: upstream's default, 250).
    #[arg(long, default_value_t = 0, value_parser = flags::http2_max_streams,
        help_heading = heading::SECURE_SERVING)]
    pub http2_max_streams_per_connection: u32,
    /// TLS handshakes past their ClientHello at once (0: no limit). [upstream: none]
    #[arg(long, default_value_t = 128, value_parser = flags::limit,
        help_heading = heading::SECURE_SERVING)]
    pub max_tls_handshakes: usize,
    /// How long a TLS client has for each step: sending its ClientHello, getting a
    /// handshake slot, completing the handshake. [upstream: none]
    #[arg(long, default_value = "10s", value_parser = flags::positive_duration,
        help_heading = heading::SECURE_SERVING)]
    pub tls_handshake_timeout: Duration,
    /// Serve reads and watches from a watch cache per resource; `--watch-cache=false`
    /// serves the backend directly.
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true",
        value_parser = flags::go_bool, action = clap::ArgAction::Set,
        help_heading = heading::WATCH_CACHE)]
    pub watch_cache: bool,
    /// When a consistent list waits for a watch cache that does not catch up with the
    /// backend in time (3 s): read the backend (`true`), or answer 429 with Retry-After: 1
    /// (`false`, upstream's newer behaviour), so a lagging cache cannot turn into a storm of
    /// backend lists. [upstream: a feature gate]
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true",
        value_parser = flags::go_bool, action = clap::ArgAction::Set,
        help_heading = heading::WATCH_CACHE)]
    pub watch_cache_consistent_read_fallback: bool,
    /// How often each resource's watch cache is compared with the storage (the keys and
    /// resource versions of every object, at one revision); on a mismatch the resource's
    /// lists and gets read the storage until a check agrees again
    /// (`apiserver_storage_consistency_checks_total`). Each check starts between half this
    /// and this long after the previous one. 0: no checks. [upstream: 5m, the
    /// DetectCacheInconsistency feature gate]
    #[arg(long, default_value = "5m", value_parser = flags::duration,
        help_heading = heading::WATCH_CACHE)]
    pub watch_cache_consistency_check_period: Duration,
    /// Bytes of history each resource's watch cache keeps at most: the object versions only
    /// its event window (and pinned list states) hold, beyond the current objects. Past it
    /// the oldest events are dropped, whatever the event count; a watch from before the
    /// window gets 410 Expired and relists. Per resource: the caches together hold at most
    /// this times the number of cached resources (49 built-in, plus each CRD and --resources
    /// kind). 0: no byte bound, only upstream's event count (up to 102400 events).
    /// [upstream: none; count only]
    #[arg(long, default_value = "64Mi", value_parser = flags::bytes_limit,
        help_heading = heading::WATCH_CACHE)]
    pub watch_cache_window_bytes: usize,
    /// Embedded store: compaction keeps at least this many recent revisions. [upstream: none]
    #[arg(long, default_value_t = 10_000, value_parser = flags::count,
        help_heading = heading::STORAGE)]
    pub embedded_retain_revisions: u64,
    /// Embedded store: compaction keeps at least this much history. [upstream: none]
    #[arg(long, default_value = "5m", value_parser = flags::duration,
        help_heading = heading::STORAGE)]
    pub embedded_retain_window: Duration,
    /// Embedded store: history is compacted before it holds more than this many bytes
    /// [default: 1/16 of the machine's memory]. [upstream: none]
    #[arg(long, value_parser = flags::bytes, help_heading = heading::STORAGE)]
    pub embedded_retain_bytes: Option<u64>,
    /// Embedded store: the largest object it stores, in bytes of JSON (0: no limit); larger
    /// writes are 413. The default is etcd's default `--max-request-bytes`, so what this
    /// store accepts a default etcd accepts too. [upstream: etcd's --max-request-bytes]
    #[arg(long, default_value = "1536Ki", value_parser = flags::bytes_limit,
        help_heading = heading::STORAGE)]
    pub embedded_max_object_bytes: usize,
    /// Embedded store: the most bytes of live objects (keys and their JSON) it holds: a
    /// write past it is refused with etcd's "mvcc: database space exceeded" (429,
    /// Retry-After 10) and raises the NOSPACE alarm (`/readyz` fails with it; reads and
    /// deletes are served); 0: no quota [default: etcd's 2Gi, at most 1/8 of the machine's
    /// memory]. [upstream: etcd's --quota-backend-bytes]
    #[arg(long, value_parser = flags::bytes, help_heading = heading::STORAGE)]
    pub embedded_quota_bytes: Option<u64>,
    /// etcd: between compactions of etcd's history, coordinated with the other servers
    /// through `compact_rev_key`; 0: this server never compacts. Either way it reads that
    /// key every 15 s, so that its watch cache answers 410 below what any server compacted.
    #[arg(long, default_value = "5m", value_parser = flags::duration,
        help_heading = heading::STORAGE)]
    pub etcd_compaction_interval: Duration,
    /// etcd: the etcd servers' `--max-request-bytes`; an object that would not fit a
    /// request of this size with its key is refused with 413 before it is sent, instead of
    /// etcd's "request is too large". [upstream: none]
    #[arg(long, default_value = "1536Ki", value_parser = flags::positive_bytes,
        help_heading = heading::STORAGE)]
    pub etcd_max_request_bytes: usize,
    /// Embedded store: keep the data in this directory (a write-ahead log and snapshots),
    /// so that it survives restarts; without it the data lives in memory only. Not with
    /// etcd. [upstream: none]
    #[arg(long, help_heading = heading::STORAGE)]
    pub data_dir: Option<PathBuf>,
    /// Log level (trace, debug, info, warn, error, off) or filter (`info,listwatch_endpoints=debug`);
    /// `RUST_LOG` overrides it. [upstream: -v, --vmodule]
    #[arg(long, default_value = "info", value_parser = flags::log_filter,
        help_heading = heading::GENERIC)]
    pub log_level: String,
    /// Log format.
    #[arg(long, visible_alias = "logging-format", value_enum, default_value_t = LogFormat::Text,
        help_heading = heading::GENERIC)]
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

impl Options {
    /// How [`serve::serve`] bounds connections, by these options (reads the TLS files).
    pub fn serve_config(&self) -> Result<serve::ServeConfig, ServerError> {
        let tls = match (&self.tls_cert_file, &self.tls_private_key_file) {
            (Some(cert), Some(key)) => Some(serve::TlsSettings {
                config: tls::server_config(cert, key, self.security.client_ca_file.as_deref())?,
                max_handshakes: self.max_tls_handshakes,
                handshake_timeout: self.tls_handshake_timeout,
            }),
            _ => None,
        };
        Ok(serve::ServeConfig {
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            read_header_timeout: self.read_header_timeout,
            idle_timeout: self.idle_connection_timeout,
            write_stall_timeout: self.write_stall_timeout,
            // Upstream's request timeout also covers writing the response (its timeout
            // filter kills a connection still being written to); ours starts when the
            // handler is done, so that a 504 or 408 at the deadline still goes out.
            response_timeout: self.request_timeout,
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
