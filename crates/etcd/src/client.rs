//! The shared connection to an etcd cluster: one lazily connected gRPC channel per endpoint,
//! request timeouts, failover, and the mapping of gRPC failures to storage errors.
//!
//! Invariants:
//! - nothing here ever blocks forever: every unary call is bounded by
//!   [`EtcdConfig::request_timeout`], connecting by [`EtcdConfig::dial_timeout`], and a
//!   silent connection is detected by HTTP/2 keepalive pings
//!   ([`EtcdConfig::keepalive_interval`], [`EtcdConfig::keepalive_timeout`]), which also ends
//!   open watch streams;
//! - channels connect lazily and reconnect by themselves, so a client built while etcd is down
//!   works as soon as etcd is back, without a restart;
//! - reads fail over to the next endpoint when one is unreachable or does not answer within
//!   [`EtcdConfig::read_attempt_timeout`] (the last endpoint tried gets the whole request
//!   timeout), and a read answered "leader changed" goes round the endpoints once more;
//!   writes never retry on
//!   their own (a write whose answer was lost may have been applied), they fail with
//!   `Unreachable` and the next request starts at the next endpoint.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use listwatch_storage::Error;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::{RangeRequest, ResponseHeader, StatusRequest, StatusResponse};
use tonic::metadata::MetadataValue;

/// How to reach etcd.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// Client URLs, e.g. `http://127.0.0.1:2379` (a bare `host:port` gets `https://` when
    /// [`tls`](Self::tls) is set, `http://` otherwise; `http://` with `tls` set is refused).
    pub endpoints: Vec<String>,
    /// Longest wait for a TCP/HTTP2 connection to come up.
    pub dial_timeout: Duration,
    /// Interval of HTTP/2 keepalive pings, sent only while a request or watch is open and
    /// only after that long without a frame from etcd.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection counts as dead.
    pub keepalive_timeout: Duration,
    /// Longest wait for the answer to one unary request.
    pub request_timeout: Duration,
    /// Longest wait for the readiness probe.
    pub health_timeout: Duration,
    /// TLS for `https://` endpoints (`--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`);
    /// when set, every endpoint must be https.
    pub tls: Option<EtcdTls>,
    /// HTTP/2 flow-control window of one stream (a watch or a request): how much of its data
    /// may be in flight unread.
    pub stream_window: u32,
    /// HTTP/2 flow-control window of a whole connection, shared by every stream on it.
    pub connection_window: u32,
    /// How long a watch waits for its consumer to take an event before it gives its etcd
    /// stream up (and resumes from the last revision delivered once the consumer drains).
    pub watch_stall_timeout: Duration,
    /// How long one attempt of a read (an idempotent request) may take on a member before the
    /// read moves to the next member; the last member tried gets the whole
    /// [`request_timeout`](Self::request_timeout). A member cut off from its quorum that still
    /// believes it has a leader holds a linearizable read until etcd's own 7 s "request timed
    /// out": this moves the read to a member with quorum well before that.
    pub read_attempt_timeout: Duration,
}

/// Client TLS to etcd: the CA that signed etcd's serving certificate and, for etcd's
/// `--client-cert-auth`, this client's certificate and key (all PEM).
#[derive(Clone, Default)]
pub struct EtcdTls {
    /// CA certificates trusted for etcd's serving certificate.
    pub ca_pem: Vec<u8>,
    /// The client certificate chain, when etcd asks for one.
    pub cert_pem: Option<Vec<u8>>,
    /// The client certificate's private key.
    pub key_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdTls")
            .field("client_certificate", &self.cert_pem.is_some())
            .finish_non_exhaustive()
    }
}

impl EtcdTls {
    fn client_config(&self) -> tonic::transport::ClientTlsConfig {
        let mut c = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem));
        if let (Some(cert), Some(key)) = (&self.cert_pem, &self.key_pem) {
            c = c.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        c
    }
}

/// The default keepalive ping interval: a ping goes out once a connection with an open
/// stream has received nothing for this long (hyper counts from the last frame read, so pings
/// are never closer together than this). etcd's server enforces `--grpc-keepalive-min-time`
/// (default 5 s) and refuses pings on a connection without streams (PermitWithoutStream
/// false): three pings closer than that earn a GOAWAY "too_many_pings", closing every watch
/// on the connection. 6 s keeps a second of margin; pings are never sent while idle.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(6);

/// The default wait for a keepalive ping's answer before the connection, and every stream on
/// it, is given up.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);

/// The largest HTTP/2 flow-control window (2³¹ − 1 bytes).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

impl Default for EtcdConfig {
    /// Kubernetes' etcd3 client settings (dial timeout 20 s, health checks bounded by 2 s,
    /// requests bounded by 60 s: the apiserver's default request timeout, one local
    /// endpoint) except keepalive: a ping after 6 s without a frame from etcd, given up 3 s
    /// later ([`DEFAULT_KEEPALIVE_INTERVAL`], [`DEFAULT_KEEPALIVE_TIMEOUT`]) instead of
    /// 30 s + 10 s, so that a frozen member (SIGSTOP, a paused VM, a stalled disk: no reset,
    /// no answer) is given up within ~9 s and the watches it carried move to another member
    /// or end.
    fn default() -> Self {
        Self {
            endpoints: vec!["http://127.0.0.1:2379".to_owned()],
            dial_timeout: Duration::from_secs(20),
            keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            request_timeout: Duration::from_secs(60),
            health_timeout: Duration::from_secs(2),
            tls: None,
            stream_window: 2 * 1024 * 1024,
            connection_window: MAX_WINDOW,
            watch_stall_timeout: Duration::from_secs(1),
            read_attempt_timeout: Duration::from_secs(1),
        }
    }
}

impl EtcdConfig {
    /// The defaults with these endpoints.
    pub fn new<I, S>(endpoints: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Sets the dial timeout.
    #[must_use]
    pub fn dial_timeout(mut self, d: Duration) -> Self {
        self.dial_timeout = d;
        self
    }

    /// Sets the keepalive ping interval and timeout.
    #[must_use]
    pub fn keepalive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keepalive_interval = interval;
        self.keepalive_timeout = timeout;
        self
    }

    /// Sets the per-request timeout.
    #[must_use]
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.request_timeout = d;
        self
    }

    /// Sets the HTTP/2 flow-control windows of a stream and of a connection (at most
    /// [`MAX_WINDOW`]).
    #[must_use]
    pub fn windows(mut self, stream: u32, connection: u32) -> Self {
        self.stream_window = stream.min(MAX_WINDOW);
        self.connection_window = connection.min(MAX_WINDOW);
        self
    }

    /// Sets how long a watch waits for a stalled consumer before giving its etcd stream up.
    #[must_use]
    pub fn watch_stall_timeout(mut self, d: Duration) -> Self {
        self.watch_stall_timeout = d;
        self
    }

    /// Sets how long one attempt of a read may take before it moves to the next member.
    #[must_use]
    pub fn read_attempt_timeout(mut self, d: Duration) -> Self {
        self.read_attempt_timeout = d;
        self
    }

    /// Sets the readiness probe timeout.
    #[must_use]
    pub fn health_timeout(mut self, d: Duration) -> Self {
        self.health_timeout = d;
        self
    }
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No endpoint was given.
    #[error("no etcd endpoints configured")]
    NoEndpoints,
    /// An `https://` endpoint without TLS settings (a CA to trust).
    #[error("etcd endpoint {endpoint:?} is https: give the CA to trust (--etcd-cafile)")]
    TlsRequired {
        /// The endpoint as given.
        endpoint: String,
    },
    /// An `http://` endpoint although TLS settings were given: the settings would not
    /// apply to it and its traffic (every object, Secrets included) would go in clear.
    #[error(
        "etcd endpoint {endpoint:?} is plain http but etcd TLS is configured (--etcd-cafile, --etcd-certfile, --etcd-keyfile): use https://"
    )]
    PlainWithTls {
        /// The endpoint as given.
        endpoint: String,
    },
    /// An endpoint is not a valid URL.
    #[error("invalid etcd endpoint {endpoint:?}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why.
        #[source]
        source: tonic::transport::Error,
    },
}

/// A cheap-to-clone handle on an etcd cluster, shared by every [`EtcdStore`](crate::EtcdStore)
/// (one per resource) and the [`Compactor`](crate::Compactor).
#[derive(Clone)]
pub struct EtcdClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// One lazily connected channel per endpoint, in configuration order; never empty.
    channels: Vec<(String, Channel)>,
    /// Index of the endpoint the next request tries first; moved on when one is unreachable.
    current: AtomicUsize,
    config: EtcdConfig,
    /// The version each endpoint last reported in Maintenance Status (same order as
    /// `channels`); members of one cluster may run different versions (a rolling upgrade).
    /// Only locked briefly, never across an await.
    versions: Vec<Mutex<Option<ServerVersion>>>,
    /// The newest compaction revision seen (by this process's compactor, the coordination
    /// key another server's compactor wrote, or a watch that met a compaction); 0 if none.
    compacted: AtomicU64,
    /// How many read attempts were abandoned at [`EtcdConfig::read_attempt_timeout`] and
    /// moved to the next member.
    read_attempts_abandoned: AtomicU64,
    /// How many reads met etcd's "leader changed" and went round the members once more.
    reads_retried_after_election: AtomicU64,
    /// The cluster ID of the last response header seen (0: none yet).
    cluster_id: AtomicU64,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("endpoints", &self.inner.config.endpoints)
            .finish_non_exhaustive()
    }
}

/// etcd's `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl ServerVersion {
    /// Parses `3.4.23` (anything after a `-` or `+` is ignored).
    pub fn parse(s: &str) -> Option<Self> {
        let core = s.split(['-', '+']).next()?;
        let mut it = core.split('.').map(|p| p.parse::<u32>().ok());
        Some(Self {
            major: it.next()??,
            minor: it.next()??,
            patch: it.next().flatten().unwrap_or(0),
        })
    }

    /// Whether this version answers a watch progress request only once the watchers on the
    /// stream have delivered every event up to the reported revision (etcd issue 15220, fixed
    /// by etcd PR 15237; and a quiet new watch gets an answer at all, PR 17557: both are in
    /// 3.4.31, 3.5.13 and every 3.6+).
    pub fn progress_requests_are_ordered(&self) -> bool {
        match (self.major, self.minor) {
            (3, 4) => self.patch >= 31,
            (3, 5) => self.patch >= 13,
            (3, m) => m >= 6,
            (m, _) => m > 3,
        }
    }
}

impl EtcdClient {
    /// Builds a client; connections are made on first use and remade as needed.
    ///
    /// Must be called inside a tokio runtime.
    pub fn new(config: EtcdConfig) -> Result<Self, ConfigError> {
        if config.endpoints.is_empty() {
            return Err(ConfigError::NoEndpoints);
        }
        let mut channels = Vec::with_capacity(config.endpoints.len());
        for ep in &config.endpoints {
            // A bare `host:port` is https when TLS is configured (etcd's client uses
            // the credentials it has for a scheme-less endpoint), http otherwise; an
            // explicit `http://` with TLS configured is refused, never silently plain.
            let url = match (ep.contains("://"), config.tls.is_some()) {
                (true, _) => ep.clone(),
                (false, true) => format!("https://{ep}"),
                (false, false) => format!("http://{ep}"),
            };
            let https = url.starts_with("https://");
            if !https && config.tls.is_some() {
                return Err(ConfigError::PlainWithTls {
                    endpoint: ep.clone(),
                });
            }
            let endpoint = Endpoint::from_shared(url)
                .map_err(|source| ConfigError::InvalidEndpoint {
                    endpoint: ep.clone(),
                    source,
                })?
                .connect_timeout(config.dial_timeout)
                .http2_keep_alive_interval(config.keepalive_interval)
                .keep_alive_timeout(config.keepalive_timeout)
                // Never while idle: etcd answers pings on a connection without streams
                // with strikes and, after three, GOAWAY "too_many_pings".
                .keep_alive_while_idle(false)
                .initial_stream_window_size(config.stream_window)
                .initial_connection_window_size(config.connection_window)
                .tcp_nodelay(true);
            let endpoint = if https {
                let tls = config
                    .tls
                    .as_ref()
                    .ok_or_else(|| ConfigError::TlsRequired {
                        endpoint: ep.clone(),
                    })?;
                endpoint.tls_config(tls.client_config()).map_err(|source| {
                    ConfigError::InvalidEndpoint {
                        endpoint: ep.clone(),
                        source,
                    }
                })?
            } else {
                endpoint
            };
            channels.push((ep.clone(), endpoint.connect_lazy()));
        }
        let versions = channels.iter().map(|_| Mutex::new(None)).collect();
        Ok(Self {
            inner: Arc::new(Inner {
                channels,
                current: AtomicUsize::new(0),
                config,
                versions,
                compacted: AtomicU64::new(0),
                read_attempts_abandoned: AtomicU64::new(0),
                reads_retried_after_election: AtomicU64::new(0),
                cluster_id: AtomicU64::new(0),
            }),
        })
    }

    /// The newest compaction revision this client has seen (0 if none); see
    /// [`Storage::compacted_revision`](listwatch_storage::Storage::compacted_revision).
    pub fn compacted_revision(&self) -> u64 {
        self.inner.compacted.load(Ordering::Acquire)
    }

    /// How many read attempts this client abandoned at the per-attempt deadline
    /// ([`EtcdConfig::read_attempt_timeout`]) to try the next member.
    pub fn read_attempts_abandoned(&self) -> u64 {
        self.inner.read_attempts_abandoned.load(Ordering::Relaxed)
    }

    /// How many reads this client sent round the members once more because etcd answered
    /// "leader changed" (a leader election ended while they waited).
    pub fn reads_retried_after_election(&self) -> u64 {
        self.inner
            .reads_retried_after_election
            .load(Ordering::Relaxed)
    }

    /// Records that etcd's history is compacted at least up to `revision`.
    pub(crate) fn note_compacted(&self, revision: u64) {
        self.inner.compacted.fetch_max(revision, Ordering::AcqRel);
    }

    /// Learns from a response header that the remembered compaction may no longer hold: a
    /// different cluster ID (another cluster behind the same endpoints), or a current
    /// revision below the remembered compaction (etcd was wiped or restored from an older
    /// snapshot: its revision went back). Either forgets it — otherwise every Exact read at
    /// a valid revision of the new history would be refused with 410 forever; compactions of
    /// the new history are learnt again as before.
    pub(crate) fn observe_header(&self, header: Option<&ResponseHeader>) {
        let Some(h) = header else { return };
        let revision = u64::try_from(h.revision).unwrap_or(0);
        let previous = self.inner.cluster_id.swap(h.cluster_id, Ordering::AcqRel);
        let other_cluster = previous != 0 && h.cluster_id != 0 && previous != h.cluster_id;
        let compacted = self.inner.compacted.load(Ordering::Acquire);
        if other_cluster || (revision > 0 && revision < compacted) {
            tracing::warn!(
                revision,
                compacted,
                other_cluster,
                "etcd's history is not the one a compaction was remembered for: forgetting it"
            );
            let _ = self.inner.compacted.compare_exchange(
                compacted,
                0,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EtcdConfig {
        &self.inner.config
    }

    /// The channel requests should use now (for streams).
    /// The endpoint index and channel a stream should use now; report a failure on it with
    /// [`EtcdClient::rotate_from`].
    pub(crate) fn channel(&self) -> (usize, Channel) {
        let n = self.inner.channels.len();
        let i = self.inner.current.load(Ordering::Relaxed) % n;
        (i, self.inner.channels[i].1.clone())
    }

    /// The endpoint after `failed` and its channel: where a broken watch stream resumes. Not
    /// the shared [`channel`](Self::channel): reads answered "no leader" move that one on
    /// too, so with two members of three frozen it could keep pointing a resuming watch at a
    /// frozen member instead of the live one (whose "no leader" ends the watch).
    pub(crate) fn channel_after(&self, failed: usize) -> (usize, Channel) {
        let n = self.inner.channels.len();
        let i = (failed + 1) % n;
        (i, self.inner.channels[i].1.clone())
    }

    /// Moves the next request to the endpoint after `failed`.
    pub(crate) fn rotate_from(&self, failed: usize) {
        let n = self.inner.channels.len();
        // Only move if nobody moved already, so concurrent failures rotate once.
        let _ = self.inner.current.compare_exchange(
            failed % n,
            (failed + 1) % n,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Runs one unary request with the request timeout. `idempotent` requests (reads) try
    /// every endpoint once when one is unreachable, and once more after etcd answered one
    /// "leader changed".
    pub(crate) async fn unary<T, F, Fut>(
        &self,
        what: &'static str,
        idempotent: bool,
        call: F,
    ) -> Result<T, Failure>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.unary_with_timeout(what, idempotent, self.inner.config.request_timeout, call)
            .await
    }

    async fn unary_with_timeout<T, F, Fut>(
        &self,
        what: &'static str,
        idempotent: bool,
        timeout: Duration,
        call: F,
    ) -> Result<T, Failure>
    where
        F: Fn(Channel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let n = self.inner.channels.len();
        let start = self.inner.current.load(Ordering::Relaxed);
        let mut last = None;
        // Each member once; a read interrupted by a leader election goes round once more.
        let mut attempts = n;
        let mut went_round_again = false;
        let mut attempt = 0;
        while attempt < attempts {
            let idx = (start + attempt) % n;
            attempt += 1;
            let (name, channel) = &self.inner.channels[idx];
            // A read that is not on its last member gets the short per-attempt deadline: a
            // member that lost its quorum may hold it for etcd's whole request timeout.
            let short = idempotent && attempt < attempts;
            let limit = if short {
                timeout.min(self.inner.config.read_attempt_timeout)
            } else {
                timeout
            };
            let failure = match tokio::time::timeout(limit, call(channel.clone())).await {
                Ok(Ok(resp)) => return Ok(resp.into_inner()),
                Ok(Err(status)) => Failure::from_status(&status),
                Err(_) => {
                    if short && limit < timeout {
                        self.inner
                            .read_attempts_abandoned
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    Failure::Unreachable(format!(
                        "etcd {what} to {name} did not answer within {limit:?}"
                    ))
                }
            };
            let Failure::Unreachable(msg) = failure else {
                return Err(failure);
            };
            tracing::debug!(endpoint = %name, request = what, error = %msg, "etcd endpoint unreachable");
            self.rotate_from(idx);
            if !idempotent && !surely_not_applied(&msg) {
                // The write went out and may have been applied: neither retried here nor
                // marked retryable for the client (no Retry-After).
                return Err(Failure::Indeterminate(format!("{name}: {msg}")));
            }
            // A read, or a write that surely did not happen: the next member may serve it.
            // etcd answers "leader changed" to a read that waited while a new leader was
            // elected: the election is over, so a read that met it goes round the members
            // once more rather than fail (with the per-attempt deadline, the attempt still
            // open when an election ends is the last member's).
            if idempotent && !went_round_again && msg.contains(LEADER_CHANGED) {
                went_round_again = true;
                attempts += n;
                self.inner
                    .reads_retried_after_election
                    .fetch_add(1, Ordering::Relaxed);
            }
            last = Some(Failure::Unreachable(format!("{name}: {msg}")));
        }
        Err(last.unwrap_or_else(|| Failure::Unreachable("no etcd endpoint".into())))
    }

    /// Maintenance Status of endpoint `idx` alone (no failover), bounded by the health
    /// timeout; remembers the version it reports.
    async fn status_of(&self, idx: usize) -> Result<StatusResponse, Failure> {
        let Some((name, channel)) = self.inner.channels.get(idx) else {
            return Err(Failure::Other(format!("no etcd endpoint {idx}")));
        };
        let timeout = self.inner.config.health_timeout;
        let mut maintenance = MaintenanceClient::new(channel.clone());
        let call = maintenance.status(StatusRequest {});
        let resp = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(resp)) => resp.into_inner(),
            Ok(Err(status)) => return Err(Failure::from_status(&status)),
            Err(_) => {
                return Err(Failure::Unreachable(format!(
                    "etcd status of {name} did not answer within {timeout:?}"
                )));
            }
        };
        if let (Some(v), Some(slot)) = (
            ServerVersion::parse(&resp.version),
            self.inner.versions.get(idx),
        ) && let Ok(mut slot) = slot.lock()
        {
            *slot = Some(v);
        }
        Ok(resp)
    }

    /// The version endpoint `idx` runs, asked of it now (`None` when it does not answer).
    pub(crate) async fn version_of(&self, idx: usize) -> Option<ServerVersion> {
        self.status_of(idx)
            .await
            .ok()
            .and_then(|r| ServerVersion::parse(&r.version))
    }

    /// Checks that the cluster answers, has no alarm raised, and serves linearizable reads.
    pub async fn health(&self) -> Result<(), Error> {
        let n = self.inner.channels.len();
        let start = self.inner.current.load(Ordering::Relaxed);
        let mut status = Err(Failure::Unreachable("no etcd endpoint".into()));
        for attempt in 0..n {
            let idx = (start + attempt) % n;
            status = self.status_of(idx).await;
            match &status {
                // A member cut off from its quorum answers Status but knows no leader: its
                // reads would hang until etcd's own timeout. Move on to the next member.
                Ok(resp) if resp.leader == 0 => {
                    let name = self.inner.channels.get(idx).map_or("?", |c| c.0.as_str());
                    status = Err(Failure::Unreachable(format!(
                        "etcd member {name} has no leader"
                    )));
                    self.rotate_from(idx);
                }
                Err(Failure::Unreachable(_)) => self.rotate_from(idx),
                _ => break,
            }
        }
        let resp = status.map_err(|f| f.into_error(0))?;
        if resp.errors.iter().any(|e| e.contains("no leader")) {
            return Err(Error::Unreachable {
                message: format!("etcd reports: {}", resp.errors.join("; ")),
            });
        }
        if !resp.errors.is_empty() {
            return Err(Error::NotReady {
                message: format!("etcd reports: {}", resp.errors.join("; ")),
                retry_after_seconds: 1,
            });
        }
        // Status is answered by any member on its own; a linearizable read proves the cluster
        // has a leader and commits (what etcd's own /health does, reading the key "health").
        let probe = RangeRequest {
            key: Bytes::from_static(b"health"),
            count_only: true,
            ..Default::default()
        };
        self.unary_with_timeout(
            "health read",
            true,
            self.inner.config.health_timeout,
            |ch| {
                let probe = probe.clone();
                async move { KvClient::new(ch).range(require_leader(probe)).await }
            },
        )
        .await
        .map_err(|f| f.into_error(0))?;
        Ok(())
    }

    /// Each endpoint's own health, in configuration order, asked of every endpoint at once
    /// (each bounded by the health timeout): `Ok` when it answers Status knowing a leader and
    /// reporting no error, else why not (what upstream's `componentstatuses` shows per
    /// member as `etcd-N`).
    pub async fn member_health(&self) -> Vec<(String, Result<(), String>)> {
        let probes = self
            .inner
            .channels
            .iter()
            .enumerate()
            .map(|(idx, (name, _))| async move {
                let health = match self.status_of(idx).await {
                    Ok(resp) if resp.leader == 0 => {
                        Err(format!("etcd member {name} has no leader"))
                    }
                    Ok(resp) if !resp.errors.is_empty() => Err(format!(
                        "etcd member {name} reports: {}",
                        resp.errors.join("; ")
                    )),
                    Ok(_) => Ok(()),
                    Err(f) => Err(format!("etcd member {name}: {}", f.into_error(0))),
                };
                (name.clone(), health)
            });
        futures::future::join_all(probes).await
    }

    /// The version of the endpoint requests go to now, asked of it (`None` while no
    /// endpoint answers).
    pub async fn server_version(&self) -> Option<ServerVersion> {
        let n = self.inner.channels.len();
        let start = self.inner.current.load(Ordering::Relaxed);
        for attempt in 0..n {
            if let Some(v) = self.version_of((start + attempt) % n).await {
                return Some(v);
            }
        }
        None
    }

    /// Whether every endpoint runs a version that orders progress answers after owed events
    /// ([`ServerVersion::progress_requests_are_ordered`]), each asked now: a cluster is only as
    /// good as its oldest member, and an endpoint that does not answer counts as not.
    pub async fn progress_requests_are_ordered(&self) -> bool {
        for idx in 0..self.inner.channels.len() {
            match self.version_of(idx).await {
                Some(v) if v.progress_requests_are_ordered() => {}
                _ => return false,
            }
        }
        true
    }

    /// The versions the endpoints last reported (in configuration order; `None`: not known).
    pub fn endpoint_versions(&self) -> Vec<(String, Option<ServerVersion>)> {
        self.inner
            .channels
            .iter()
            .zip(&self.inner.versions)
            .map(|((name, _), v)| (name.clone(), v.lock().ok().and_then(|v| *v)))
            .collect()
    }
}

/// The gRPC metadata that makes etcd refuse work on a member that has no leader (clientv3's
/// `WithRequireLeader`: key `hasleader`, value `true`).
pub(crate) const REQUIRE_LEADER_KEY: &str = "hasleader";

/// `msg` as a request carrying require-leader: a member cut off from its quorum answers
/// `Unavailable: etcdserver: no leader` at once (etcd's unary interceptor checks it before
/// the request does anything) instead of waiting out its own request timeout, so the client
/// moves to the next member at once — for writes too, since such a request surely did not
/// happen.
pub(crate) fn require_leader<T>(msg: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(msg);
    request
        .metadata_mut()
        .insert(REQUIRE_LEADER_KEY, MetadataValue::from_static("true"));
    request
}

/// etcd's answer to a request that waited while a new leader was elected
/// (`ErrLeaderChanged`): a read may be sent again at once; a write's outcome is unknown.
const LEADER_CHANGED: &str = "etcdserver: leader changed";

/// Whether a failed call surely never reached etcd's state machine: the connection could not
/// be made, or etcd refused it up front for want of a leader (require-leader). Anything else
/// that fails a write (etcd's "request timed out", "leader changed", a deadline, a reset
/// stream after the request went out) leaves its outcome unknown.
pub(crate) fn surely_not_applied(message: &str) -> bool {
    const MARKERS: [&str; 5] = [
        "tcp connect error",
        "Connection refused",
        "error trying to connect",
        "dns error",
        "etcdserver: no leader",
    ];
    MARKERS.iter().any(|m| message.contains(m))
}

/// A failed etcd request, classified before it becomes a storage error (the caller knows the
/// key and revisions the message needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Connection refused, reset, timed out, no leader: try again later.
    Unreachable(String),
    /// A write was sent and failed in a way that leaves its outcome unknown (etcd's "request
    /// timed out", "leader changed", a deadline, a connection lost after sending).
    Indeterminate(String),
    /// The requested revision was compacted; etcd's compaction revision when known.
    Compacted,
    /// The requested revision is newer than etcd's current one.
    FutureRevision,
    /// etcd refuses work for now (`ResourceExhausted`: too many requests, out of space); retry
    /// after the seconds given.
    Exhausted(String, u32),
    /// The request is larger than etcd accepts (`--max-request-bytes`, or gRPC's message limit
    /// a little above it).
    TooLarge(String),
    /// Anything else etcd answered.
    Other(String),
}

impl Failure {
    pub(crate) fn from_status(s: &Status) -> Self {
        let msg = s.message();
        match s.code() {
            Code::OutOfRange if msg.contains("compacted") => Failure::Compacted,
            Code::OutOfRange if msg.contains("future revision") => Failure::FutureRevision,
            // etcd's own check ("etcdserver: request is too large") is InvalidArgument; gRPC's
            // message limit (max-request-bytes + 512 KiB) answers ResourceExhausted "received
            // message larger than max".
            Code::InvalidArgument if msg.contains("request is too large") => {
                Failure::TooLarge(describe(s))
            }
            Code::ResourceExhausted if msg.contains("larger than max") => {
                Failure::TooLarge(describe(s))
            }
            // "database space exceeded" lasts until an operator frees space and disarms the
            // alarm; "too many requests" (the apply loop lags) clears in moments.
            Code::ResourceExhausted if msg.contains("space exceeded") => {
                Failure::Exhausted(describe(s), 10)
            }
            Code::ResourceExhausted => Failure::Exhausted(describe(s), 1),
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Aborted => {
                Failure::Unreachable(describe(s))
            }
            // Transport trouble (reset streams, broken connections) surfaces as Unknown or
            // Internal with an underlying error rather than a server-sent status.
            Code::Unknown | Code::Internal
                if std::error::Error::source(s).is_some()
                    || msg.contains("transport")
                    || msg.contains("h2") =>
            {
                Failure::Unreachable(describe(s))
            }
            _ => Failure::Other(describe(s)),
        }
    }

    /// The storage error, for a request that read at `rev` (0: latest).
    pub(crate) fn into_error(self, rev: u64) -> Error {
        match self {
            Failure::Unreachable(message) => Error::Unreachable { message },
            Failure::Indeterminate(m) => Error::Timeout {
                message: format!(
                    "the outcome of the write is unknown (it may or may not have been applied): etcd: {m}"
                ),
            },
            Failure::Compacted => Error::Expired {
                message: format!("too old resource version: {rev} (compacted)"),
                continue_token: None,
            },
            Failure::FutureRevision => Error::TooLargeResourceVersion {
                requested: rev,
                current: 0,
            },
            Failure::Exhausted(m, retry_after_seconds) => Error::TooManyRequests {
                message: format!("etcd: {m}"),
                retry_after_seconds,
            },
            Failure::TooLarge(m) => Error::RequestTooLarge {
                message: format!("etcd: {m}"),
            },
            Failure::Other(m) => Error::internal(format!("etcd: {m}")),
        }
    }
}

fn describe(s: &Status) -> String {
    // The whole source chain: a transport error's own text is only `transport error`; what
    // went wrong (a refused connection, a TLS alert) is further down.
    let mut chain: Vec<String> = Vec::new();
    let mut src = std::error::Error::source(s);
    while let Some(e) = src {
        if chain.len() >= 8 {
            break;
        }
        let t = e.to_string();
        if !chain.iter().any(|c| c.contains(&t)) {
            chain.push(t);
        }
        src = e.source();
    }
    let joined = chain.join(": ");
    let mut out = match (s.message().is_empty(), joined.is_empty()) {
        (true, true) => format!("{:?}", s.code()),
        (true, false) => format!("{:?}: {joined}", s.code()),
        (false, true) => format!("{:?}: {}", s.code(), s.message()),
        (false, false) => format!("{:?}: {}: {joined}", s.code(), s.message()),
    };
    let lower = joined.to_ascii_lowercase();
    if [
        "certificate",
        "handshake",
        "alert",
        "tls",
        "invalidcontenttype",
    ]
    .iter()
    .any(|m| lower.contains(m))
    {
        out.push_str(
            " (TLS with etcd failed: check the client certificate, key and CA given to the \
             etcd client, and that etcd trusts the certificate's issuer)",
        );
    } else if ["broken pipe", "connection reset"]
        .iter()
        .any(|m| lower.contains(m))
    {
        // With TLS 1.3 the client's handshake ends before etcd checks its certificate, so a
        // refused (or missing) client certificate often shows only as the connection
        // closing right after it: say what it may mean without claiming it.
        out.push_str(
            " (the connection was closed: over https this is how TLS with etcd failed \
             usually shows when etcd refuses or misses the client certificate — check the \
             certificate, key and CA given to the etcd client)",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_know_the_progress_fix() {
        let v = |s| ServerVersion::parse(s).unwrap();
        assert_eq!(
            v("3.4.23"),
            ServerVersion {
                major: 3,
                minor: 4,
                patch: 23
            }
        );
        assert!(!v("3.4.23").progress_requests_are_ordered());
        assert!(v("3.4.31").progress_requests_are_ordered());
        assert!(!v("3.5.12").progress_requests_are_ordered());
        assert!(v("3.5.13").progress_requests_are_ordered());
        assert!(v("3.6.0-rc.1").progress_requests_are_ordered());
        assert!(ServerVersion::parse("garbage").is_none());
    }

    #[test]
    fn etcd_status_codes_map_to_storage_failures() {
        let compacted =
            Status::out_of_range("etcdserver: mvcc: required revision has been compacted");
        assert_eq!(Failure::from_status(&compacted), Failure::Compacted);
        let future =
            Status::out_of_range("etcdserver: mvcc: required revision is a future revision");
        assert_eq!(Failure::from_status(&future), Failure::FutureRevision);
        assert!(matches!(
            Failure::from_status(&Status::unavailable("etcdserver: no leader")),
            Failure::Unreachable(_)
        ));
        assert!(matches!(
            Failure::from_status(&Status::invalid_argument("etcdserver: key is not provided")),
            Failure::Other(_)
        ));
        assert!(matches!(
            Failure::Unreachable("x".into()).into_error(0),
            Error::Unreachable { .. }
        ));
        assert!(Failure::Compacted.into_error(5).is_expired());
    }

    #[test]
    fn only_writes_that_surely_did_not_happen_are_retryable() {
        for not_sent in [
            "Unavailable: etcdserver: no leader",
            "Unavailable: error trying to connect: tcp connect error: Connection refused (os error 111)",
        ] {
            assert!(surely_not_applied(not_sent), "{not_sent}");
        }
        for unknown in [
            "Unavailable: etcdserver: request timed out",
            "Unavailable: etcdserver: leader changed",
            "etcd txn to http://127.0.0.1:1 did not answer within 1s",
            "Unknown: transport error: connection reset",
        ] {
            assert!(!surely_not_applied(unknown), "{unknown}");
        }
        let status = Failure::Indeterminate("x".into()).into_error(0).to_status();
        assert_eq!((status.code, status.retry_after()), (504, 0));
        let status = Failure::Unreachable("x".into()).into_error(0).to_status();
        assert_eq!((status.code, status.retry_after()), (500, 2));
    }

    #[test]
    fn resource_exhaustion_is_429_and_oversized_requests_are_413() {
        let status = |s: &Status| Failure::from_status(s).into_error(0).to_status();
        let busy = status(&Status::resource_exhausted("etcdserver: too many requests"));
        assert_eq!((busy.code, busy.retry_after()), (429, 1));
        let full = status(&Status::resource_exhausted(
            "etcdserver: mvcc: database space exceeded",
        ));
        assert_eq!((full.code, full.retry_after()), (429, 10));
        let large = status(&Status::invalid_argument(
            "etcdserver: request is too large",
        ));
        assert_eq!(
            (large.code, large.reason.as_str()),
            (413, "RequestEntityTooLarge")
        );
        let grpc_large = status(&Status::resource_exhausted(
            "grpc: received message larger than max (3145774 vs. 2097152)",
        ));
        assert_eq!(grpc_large.code, 413);
    }

    #[tokio::test]
    async fn a_client_for_a_closed_port_reports_unreachable_promptly() {
        // Bind and drop to get a port nobody listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = EtcdClient::new(
            EtcdConfig::new([format!("127.0.0.1:{port}")]).dial_timeout(Duration::from_secs(2)),
        )
        .unwrap();
        let err = c.health().await.unwrap_err();
        assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    }

    #[test]
    fn empty_endpoint_lists_are_rejected() {
        assert!(matches!(
            EtcdClient::new(EtcdConfig::new(Vec::<String>::new())),
            Err(ConfigError::NoEndpoints)
        ));
    }
}
