//! The server's accept loop and connections: our own loop on hyper-util's connection
//! builder (HTTP/1.1 and HTTP/2), instead of `axum::serve`, so that every connection is
//! bounded.
//!
//! Protocols: over TLS, ALPN offers `h2` and `http/1.1` and the connection is served with
//! what was negotiated (HTTP/1.1 when the client offered no ALPN protocol but sends an HTTP/1
//! request, HTTP/2 when it sends the HTTP/2 preface); in plaintext, HTTP/1.1 or h2c with prior
//! knowledge, told apart by the client's preface. There is no h2c upgrade from HTTP/1.1
//! (upstream has none either).
//!
//! Bounds:
//! - at most [`ServeConfig::max_connections`] connections are open, TLS handshakes
//!   included. One more is accepted and closed at once (counted in
//!   `apiserver_rejected_connections_total`) rather than left unaccepted: a client then
//!   sees its connection refused immediately and can retry, instead of hanging in the
//!   listen backlog with no deadline, and every excess connection costs one accept;
//! - TLS: a client has [`TlsSettings::handshake_timeout`] for each step: to send its
//!   ClientHello, to get one of [`TlsSettings::max_handshakes`] handshake slots, to complete
//!   the handshake ([`crate::tls`]); a connection that never sends a ClientHello holds only
//!   its connection slot until then;
//! - reads and writes have the deadlines of `conn.rs`: the first request's head within
//!   the read-header timeout, the idle timeout between requests, a stalled write fails, and
//!   a response that is not long-running (a watch's carries [`LongRunning`]) is written out
//!   within [`ServeConfig::response_timeout`] of its start;
//! - TCP keep-alive on every connection ([`TCP_KEEPALIVE_IDLE`]), as upstream's listener,
//!   so that half-open connections (the peer vanished) fail and free their slots;
//! - the kernel holds at most [`TCP_NOTSENT_LOWAT`] unsent bytes per connection: a peer that
//!   stops reading stops the server's writes once its receive window and that much are
//!   queued (and the cacher then detaches its watch), instead of after the send buffer has
//!   grown to `tcp_wmem`'s maximum (4 MiB by default) — megabytes copied per stalled watch
//!   for nothing, which the healthy watchers paid for in CPU. Bytes in flight are not
//!   limited, so a fast peer far away is not slowed;
//! - the request head is bounded by hyper: at most 100 header fields and its buffer
//!   ([`HTTP1_MAX_BUF_BYTES`], 64 KiB), else 431; on HTTP/2 the decoded header list by
//!   [`HTTP2_MAX_HEADER_LIST_BYTES`] (the same size);
//! - what hyper holds of a response ahead of the socket is that same buffer on HTTP/1 and
//!   [`HTTP2_MAX_SEND_BUF_BYTES`] per HTTP/2 stream (hyper's default is ~400 KiB each): a
//!   watch or list whose client stops reading holds that plus the batch being written,
//!   not 400 KiB more (a red team held 1.7 GB with 4 000 unread watches replaying a
//!   namespace, ~420 KB each);
//! - HTTP/2 ([`Http2Settings`]): at most `--http2-max-streams-per-connection` streams open
//!   at once per connection (upstream's 250 by default); a stream past it is refused with
//!   RST_STREAM(REFUSED_STREAM) before it reaches the service. Every stream is a request, so
//!   it goes through the same flow control, in-flight and watch limits as an HTTP/1.1
//!   request of the same client. Receive windows as upstream: [`HTTP2_STREAM_WINDOW`] per
//!   stream, that times the stream cap for the connection, so a stream whose body is not
//!   being read never blocks another's; at most that much of a client's request bodies is
//!   buffered per connection. Send side: a watch stream whose client stops granting window
//!   waits (its watcher's buffer fills and the cacher treats it as any slow watcher)
//!   while the connection's other streams go on; hyper buffers at most
//!   [`HTTP2_MAX_SEND_BUF_BYTES`] per stream. A
//!   client that opens and resets streams faster than they are served is cut after
//!   [`HTTP2_MAX_PENDING_RESETS`] pending resets (the "rapid reset" attack). A PING goes
//!   out after [`Http2Settings::keep_alive_interval`] without a frame from the client, and
//!   the connection closes when its ACK does not come within
//!   [`Http2Settings::keep_alive_timeout`]: a vanished peer is found within a minute,
//!   whatever its streams are doing.
//!
//! Every request carries `ConnectInfo<SocketAddr>` (the peer address, axum's extractor),
//! `ConnectInfo<Peer>` (the address and, over TLS, the client's certificate chain, which the
//! authenticator verifies) and a [`ClientKey`] of the peer's IP address, which flow control
//! keys on unless the security filter replaces it with the authenticated user.
//!
//! Shutdown, as `axum::serve`'s graceful shutdown did: when the API's shutdown begins the
//! loop stops accepting, handshakes in progress are dropped, idle connections close, and a
//! busy one finishes its response (watches end through the API's own shutdown) before
//! [`serve`] returns.
//!
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode, Version};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use listwatch_endpoints::{ClientKey, LongRunning, ShutdownHandle};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

use crate::conn::{Activity, TimedIo, Timeouts, TrackedBody};
use crate::security::filter::Peer;
use crate::tls::Handshaker;

/// How connections are bounded.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Connections open at once (0: no limit).
    pub max_connections: usize,
    /// Connections open at once from one remote IP address (0: no limit).
    pub max_connections_per_client: usize,
    /// The first request's head must arrive within this of the connection's start, a later
    /// head within this of its first byte.
    pub read_header_timeout: Duration,
    /// Longest a connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Longest a write may make no progress.
    pub write_stall_timeout: Duration,
    /// Longest a response that is not long-running (not a watch, not an upgrade) may take
    /// to be written out, from the moment the handler hands it over.
    pub response_timeout: Duration,
    /// HTTPS, when set.
    pub tls: Option<TlsSettings>,
    /// HTTP/2's limits.
    pub http2: Http2Settings,
}

/// HTTP/2's per-connection limits.
#[derive(Debug, Clone, Copy)]
pub struct Http2Settings {
    /// Streams a client may have open at once on one connection (advertised in SETTINGS;
    /// one more is refused with REFUSED_STREAM).
    pub max_streams: u32,
    /// Silence from the client after which the server sends a PING.
    pub keep_alive_interval: Duration,
    /// How long the PING's ACK may take before the connection is closed.
    pub keep_alive_timeout: Duration,
}

impl Default for Http2Settings {
    fn default() -> Self {
        Self {
            max_streams: DEFAULT_HTTP2_MAX_STREAMS,
            keep_alive_interval: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(20),
        }
    }
}

/// Upstream's streams per HTTP/2 connection (`--http2-max-streams-per-connection` 0 means
/// this, as upstream's 0 means Go's default of 250).
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 250;

/// Receive window of one HTTP/2 stream: upstream's 256 KiB (its 99th percentile of
/// resource bodies), so that most request bodies arrive without a WINDOW_UPDATE.
pub const HTTP2_STREAM_WINDOW: u32 = 256 * 1024;

/// The largest HTTP/2 window (2^31 - 1).
const HTTP2_MAX_WINDOW: u32 = (1 << 31) - 1;

/// hyper's buffer of one HTTP/1 connection: the largest request head it reads (past it,
/// 431) and how much of a response it holds ahead of the socket. 64 KiB (hyper's default is
/// ~400 KiB; upstream's Go server reads heads up to 1 MiB and holds 4 KiB of a response):
/// a request line is at most 64 KiB anyway (414 past it), and every unread watch or list
/// costs the server this much, so it is kept small.
pub const HTTP1_MAX_BUF_BYTES: usize = 64 * 1024;

/// What hyper holds of one HTTP/2 stream's response beyond its send window (hyper's
/// default is ~400 KiB): a stream whose client grants no window costs this much.
pub const HTTP2_MAX_SEND_BUF_BYTES: usize = 64 * 1024;

/// Largest decoded header list of an HTTP/2 request: the HTTP/1 head bound
/// ([`HTTP1_MAX_BUF_BYTES`]), so that a request valid on one protocol is valid on the other.
pub const HTTP2_MAX_HEADER_LIST_BYTES: u32 = HTTP1_MAX_BUF_BYTES as u32;

/// Streams reset by the client before the server accepted them that a connection may have
/// pending; past it the connection closes (hyper's and the h2 crate's default).
pub const HTTP2_MAX_PENDING_RESETS: usize = 20;

/// The receive window of a whole connection: the stream window times the stream cap, as
/// upstream, so that the streams cannot use up the connection's window between them.
pub fn http2_connection_window(max_streams: u32) -> u32 {
    HTTP2_STREAM_WINDOW
        .saturating_mul(max_streams.max(1))
        .min(HTTP2_MAX_WINDOW)
}

/// The connection builder for a connection whose ALPN negotiation gave `alpn` (`None`:
/// plaintext, or TLS without ALPN: the preface decides).
fn builder(h2: &Http2Settings, alpn: Option<&[u8]>) -> auto::Builder<TokioExecutor> {
    let mut b = auto::Builder::new(TokioExecutor::new());
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(h2.max_streams)
        .initial_stream_window_size(HTTP2_STREAM_WINDOW)
        .initial_connection_window_size(http2_connection_window(h2.max_streams))
        .adaptive_window(false)
        .keep_alive_interval(h2.keep_alive_interval)
        .keep_alive_timeout(h2.keep_alive_timeout)
        .max_pending_accept_reset_streams(HTTP2_MAX_PENDING_RESETS)
        .max_header_list_size(HTTP2_MAX_HEADER_LIST_BYTES)
        .max_send_buf_size(HTTP2_MAX_SEND_BUF_BYTES);
    b.http1().max_buf_size(HTTP1_MAX_BUF_BYTES);
    match alpn {
        Some(b"h2") => b.http2_only(),
        Some(_) => b.http1_only(),
        None => b,
    }
}

/// HTTPS and its handshake bounds.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The rustls configuration ([`crate::tls::server_config`]).
    pub config: Arc<rustls::ServerConfig>,
    /// Handshakes past their ClientHello at once (0: no limit).
    pub max_handshakes: usize,
    /// Longest each step of a handshake may take: the ClientHello, getting a handshake slot,
    /// the handshake itself.
    pub handshake_timeout: Duration,
}

/// The connection layer's metrics.
#[derive(Clone)]
pub struct ConnMetrics {
    open: Gauge,
    rejected: Counter,
    rejected_per_client: Counter,
    timeouts: Family<Vec<(&'static str, &'static str)>, Counter>,
    pub(crate) handshakes: Gauge,
    pub(crate) handshakes_waiting: Gauge,
    pub(crate) handshake_failures: Counter,
    requests_http1: Counter,
    requests_http2: Counter,
}

impl std::fmt::Debug for ConnMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnMetrics")
    }
}

impl ConnMetrics {
    /// Creates the metrics and registers them.
    pub fn register(registry: &mut Registry) -> Self {
        // The family shares the two counters, so that a request increments its counter
        // without taking the family's lock.
        let by_protocol = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        let m = Self {
            open: Gauge::default(),
            rejected: Counter::default(),
            rejected_per_client: Counter::default(),
            timeouts: Family::default(),
            handshakes: Gauge::default(),
            handshakes_waiting: Gauge::default(),
            handshake_failures: Counter::default(),
            requests_http1: by_protocol.get_or_create_owned(&vec![("protocol", "HTTP/1.1")]),
            requests_http2: by_protocol.get_or_create_owned(&vec![("protocol", "HTTP/2")]),
        };
        registry.register(
            "apiserver_requests_by_protocol",
            "Requests by HTTP version (HTTP/1.1, HTTP/2: one per stream)",
            by_protocol,
        );
        registry.register(
            "apiserver_open_connections",
            "Connections open, TLS handshakes included",
            m.open.clone(),
        );
        registry.register(
            "apiserver_rejected_connections",
            "Connections closed at once for the connection limit",
            m.rejected.clone(),
        );
        registry.register(
            "apiserver_rejected_client_connections",
            "Connections closed at once for the per-client connection limit (also counted in apiserver_rejected_connections)",
            m.rejected_per_client.clone(),
        );
        registry.register(
            "apiserver_connection_timeouts",
            "Connections closed by a deadline, by phase (tls_handshake, read_header, idle, write_stall, response)",
            m.timeouts.clone(),
        );
        registry.register(
            "apiserver_tls_handshakes_in_progress",
            "TLS handshakes past their ClientHello",
            m.handshakes.clone(),
        );
        registry.register(
            "apiserver_tls_handshakes_waiting",
            "TLS handshakes waiting for a handshake slot",
            m.handshakes_waiting.clone(),
        );
        registry.register(
            "apiserver_tls_handshake_errors",
            "TLS handshakes that failed (not by their deadline)",
            m.handshake_failures.clone(),
        );
        m
    }

    pub(crate) fn timed_out(&self, phase: &'static str) {
        self.timeouts.get_or_create(&vec![("phase", phase)]).inc();
    }
}

/// Increments a gauge until dropped.
pub(crate) struct GaugeGuard(Gauge);

impl GaugeGuard {
    pub(crate) fn new(g: &Gauge) -> Self {
        g.inc();
        Self(g.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Serves `router` on `listener` until `shutdown` begins and every connection has ended.
///
/// # Errors
/// None today: accept errors are logged and retried (a full file table waits a moment).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: ServeConfig,
    shutdown: ShutdownHandle,
    metrics: ConnMetrics,
) -> std::io::Result<()> {
    let slots = (config.max_connections > 0).then(|| {
        Arc::new(Semaphore::new(
            config.max_connections.min(Semaphore::MAX_PERMITS),
        ))
    });
    let handshaker = config
        .tls
        .as_ref()
        .map(|t| Arc::new(Handshaker::new(t, metrics.clone())));
    let timeouts = Timeouts {
        read_header: config.read_header_timeout,
        idle: config.idle_timeout,
        write_stall: config.write_stall_timeout,
    };
    let response_timeout = config.response_timeout;
    let per_client = crate::conn_limit::PerClient::new(config.max_connections_per_client);
    // Every connection task holds a receiver; `closed()` resolves when the last ends.
    let (all_closed, conn_rx) = watch::channel(());
    let mut last_warning: Option<tokio::time::Instant> = None;
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = shutdown.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    accept_failed(&e, &mut last_warning).await;
                    continue;
                }
            },
        };
        let permit = match &slots {
            None => None,
            Some(s) => match Arc::clone(s).try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    metrics.rejected.inc();
                    tracing::debug!(%peer, "connection limit reached: closing a new connection");
                    drop(stream);
                    continue;
                }
            },
        };
        let Some(client_slot) = per_client.open(peer.ip()) else {
            metrics.rejected.inc();
            metrics.rejected_per_client.inc();
            tracing::debug!(%peer, "the client's connection limit reached: closing a new connection");
            drop(stream);
            continue;
        };
        let local = stream.local_addr().ok();
        let _ = stream.set_nodelay(true);
        if let Err(e) = keep_alive(&stream) {
            tracing::debug!(%peer, error = %e, "cannot set TCP keep-alive");
        }
        if let Err(e) = socket2::SockRef::from(&stream).set_tcp_notsent_lowat(TCP_NOTSENT_LOWAT) {
            tracing::debug!(%peer, error = %e, "cannot bound the unsent bytes");
        }
        let task = Connection {
            peer,
            router: router.clone(),
            timeouts,
            response_timeout,
            http2: config.http2,
            shutdown: shutdown.clone(),
            metrics: metrics.clone(),
        };
        let handshaker = handshaker.clone();
        let conn_rx = conn_rx.clone();
        // The task's own future stays small: each branch's state (the TLS handshake, the
        // connection over TLS or plaintext) is boxed at its own size, so that a plaintext
        // connection does not carry room for the TLS states (a union of all of them, 8 KiB
        // unboxed, fully written when the task is spawned).
        tokio::spawn(async move {
            let _open = GaugeGuard::new(&task.metrics.open);
            let _slot = permit;
            let _client_slot = client_slot;
            let _alive = conn_rx;
            match handshaker {
                None => {
                    let peer = Peer {
                        addr: peer,
                        local,
                        certs: None,
                    };
                    Box::pin(task.serve(stream, peer, None)).await;
                }
                Some(h) => {
                    let tls = tokio::select! {
                        tls = Box::pin(h.accept(stream, peer)) => tls,
                        () = task.shutdown.wait() => None,
                    };
                    if let Some(tls) = tls {
                        // The chain is verified per request by the authenticator (a bad
                        // one is a 401, as upstream), so it travels with each request.
                        let certs = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .filter(|c| !c.is_empty())
                            .map(|c| Arc::new(c.iter().map(|d| d.clone().into_owned()).collect()));
                        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                        Box::pin(task.serve(
                            tls,
                            Peer {
                                addr: peer,
                                local,
                                certs,
                            },
                            alpn.as_deref(),
                        ))
                        .await;
                    }
                }
            }
        });
    }
    drop(listener);
    drop(conn_rx);
    all_closed.closed().await;
    Ok(())
}

/// Unsent bytes the kernel may hold for one connection (`TCP_NOTSENT_LOWAT`): a socket is
/// writable again once fewer than half of them wait. Two watch batches (the watch server's
/// 64 KiB), so that a batch can be written while the previous one is still being sent.
pub const TCP_NOTSENT_LOWAT: u32 = 128 * 1024;

/// Silence before the first TCP keep-alive probe: upstream's listener's 3 minutes.
pub const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(180);

/// Between unanswered keep-alive probes (the kernel gives up after 9 of them).
pub const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// TCP keep-alive on an accepted connection, so that a peer gone without a FIN or RST (a
/// half-open connection: power loss, a dropped NAT entry) is found by the kernel and the
/// connection fails, freeing its connection and watch slots. Without it a quiet watch of
/// such a peer is found only at its timeout (30 to 60 min) and an idle keep-alive
/// connection at the idle timeout; a busy one by the write-stall timeout.
fn keep_alive(stream: &tokio::net::TcpStream) -> std::io::Result<()> {
    let params = socket2::TcpKeepalive::new()
        .with_time(TCP_KEEPALIVE_IDLE)
        .with_interval(TCP_KEEPALIVE_INTERVAL);
    socket2::SockRef::from(stream).set_tcp_keepalive(&params)
}

/// Logs a failed accept (at most every few seconds) and, when the process is out of file
/// descriptors or memory, waits a moment so that the loop does not spin.
async fn accept_failed(e: &std::io::Error, last_warning: &mut Option<tokio::time::Instant>) {
    use std::io::ErrorKind;
    // The peer gave up before we accepted: nothing to do.
    if matches!(
        e.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted
    ) {
        return;
    }
    let now = tokio::time::Instant::now();
    if last_warning.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(10)) {
        *last_warning = Some(now);
        tracing::warn!(error = %e, "accepting a connection failed; retrying");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// A request's response, as the connection holds it while it is being made.
type ResponseFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Response<TrackedBody>, Infallible>> + Send>,
>;

/// One accepted connection.
struct Connection {
    peer: SocketAddr,
    router: Router,
    timeouts: Timeouts,
    response_timeout: Duration,
    http2: Http2Settings,
    shutdown: ShutdownHandle,
    metrics: ConnMetrics,
}

impl Connection {
    /// Serves HTTP on `io` until the peer leaves, a deadline passes, or shutdown completes;
    /// `alpn` is the protocol TLS negotiated.
    async fn serve<S>(self, io: S, client: Peer, alpn: Option<&[u8]>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Arc::new(Activity::default());
        if alpn == Some(b"h2") {
            activity.set_http2();
        }
        let io = TimedIo::new(
            io,
            Arc::clone(&activity),
            self.timeouts,
            self.metrics.clone(),
        );
        let (peer, router, response_timeout) = (self.peer, self.router, self.response_timeout);
        let key = ClientKey::address(peer.ip());
        let metrics = self.metrics.clone();
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            if req.version() == Version::HTTP_2 {
                activity.set_http2();
                metrics.requests_http2.inc();
            } else {
                metrics.requests_http1.inc();
            }
            // Counted from the moment hyper hands over the head, so the connection is busy.
            let mut guard = activity.request_started();
            crate::routes::trim_trailing_slash(&mut req);
            req.extensions_mut().insert(ConnectInfo(peer));
            req.extensions_mut().insert(ConnectInfo(client.clone()));
            req.extensions_mut().insert(key.clone());
            let router = router.clone();
            // Boxed, so that what the connection (HTTP/1.1) or the stream's task (HTTP/2) keeps
            // for the request is a pointer, and the router's future is freed as soon as the
            // response head is ready: a watch streaming its body does not hold it.
            let respond: ResponseFuture = Box::pin(async move {
                let resp = match router.oneshot(req.map(Body::new)).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
                    guard.upgraded();
                } else if resp.extensions().get::<LongRunning>().is_none() {
                    // Sent within its own deadline, however slowly the client reads.
                    guard.respond_by(tokio::time::Instant::now() + response_timeout);
                }
                Ok::<Response<TrackedBody>, Infallible>(resp.map(|b| TrackedBody::new(b, guard)))
            });
            respond
        });
        let builder = builder(&self.http2, alpn);
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(conn);
        let stop = self.shutdown.wait();
        tokio::pin!(stop);
        let mut stopping = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended");
                    }
                    break;
                }
                () = &mut stop, if !stopping => {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use axum::Extension;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn config() -> ServeConfig {
        ServeConfig {
            max_connections: 8,
            max_connections_per_client: 0,
            read_header_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            write_stall_timeout: Duration::from_secs(60),
            response_timeout: Duration::from_secs(60),
            tls: None,
            http2: Http2Settings::default(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_carry_the_peer_and_shutdown_closes_idle_keep_alive_connections() {
        let api =
            listwatch_endpoints::Installer::new(listwatch_endpoints::Config::default()).build();
        let shutdown = api.shutdown_handle();
        let router = Router::new().route(
            "/who",
            get(
                |ConnectInfo(peer): ConnectInfo<SocketAddr>,
                 Extension(key): Extension<ClientKey>| async move {
                    format!("{peer} {key}")
                },
            ),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = ConnMetrics::register(&mut Registry::default());
        let server = tokio::spawn(serve(listener, router, config(), shutdown.clone(), metrics));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut s = socket.connect(addr).await.unwrap();
        let local = s.local_addr().unwrap();
        // A keep-alive request: the connection stays open after the answer.
        s.write_all(b"GET /who HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 4096];
        let mut got = Vec::new();
        while !String::from_utf8_lossy(&got).contains("127.0.0.2\r\n")
            && !String::from_utf8_lossy(&got).ends_with("127.0.0.2")
        {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        let text = String::from_utf8_lossy(&got);
        assert!(text.ends_with(&format!("{local} 127.0.0.2")), "{text}");
        // Shutdown closes the idle connection, and the server returns.
        shutdown.shutdown();
        server.await.unwrap().unwrap();
        assert_eq!(s.read(&mut buf).await.unwrap(), 0);
    }
}
