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
    /// Threads of the request compute pool, where the handlers of writes and of Table or
    /// YAML reads run (decode, patch, apply, validation, encoding), apart from the threads
    /// that drive connections, watches and `/healthz` (default: the available parallelism;
    /// 0: no pool, everything runs on the I/O threads).
    #[arg(long, default_value_t = listwatch_endpoints::default_request_workers(), value_parser = flags::workers)]
    pub request_workers: usize,
    /// Bytes of request bodies held in memory at once (0: no limit).
    #[arg(long, default_value_t = 256 * 1024 * 1024, value_parser = flags::bytes_limit)]
    pub max_buffered_request_bytes: usize,
    /// Connections open at once, TLS handshakes included; one more is accepted and closed
    /// (0: no limit). Keep it above --max-watches (an HTTP/1.1 watch is a connection).
    #[arg(long, default_value_t = 12_000, value_parser = flags::limit)]
    pub max_connections: usize,
    /// Connections open at once from one remote IP address; one more is accepted and closed
    /// (0: no limit; upstream has none). Keep it above --max-watches-per-client for clients
    /// that watch over HTTP/1.1 (a watch is a connection there).
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS_PER_CLIENT, value_parser = flags::limit)]
    pub max_connections_per_client: usize,
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
    /// Embedded store: the most bytes of live objects (keys and their JSON) it holds, as
    /// etcd's `--quota-backend-bytes`: a write past it is refused with etcd's "mvcc: database
    /// space exceeded" (429, Retry-After 10) and raises the NOSPACE alarm (`/readyz` fails
    /// with it; reads and deletes are served). Default: etcd's default quota, 2 GiB, at
    /// most 1/8 of the machine's memory; 0: no quota.
    #[arg(long, value_parser = flags::count)]
    pub embedded_quota_bytes: Option<u64>,
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
            max_connections_per_client: self.max_connections_per_client,
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
