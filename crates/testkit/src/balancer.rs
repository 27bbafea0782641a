//! [`Balancer`]: round-robin TCP load balancing over backends a test can drain, kill and
//! revive, optionally health-checked over HTTP ([`HealthCheck`]) as a load balancer in front
//! of kube-apiservers checks `/readyz`.
//!
//! Invariants:
//! - a backend is in rotation when it is up (not drained or killed) and, with a health
//!   check, healthy (see [`crate::health`] for how checks move it; they run on every
//!   backend all the time, up or not, and never touch open connections: a backend taken out
//!   by its checks keeps carrying what it carries, as a drain does);
//! - a new connection goes to the next backend in turn that is in rotation; when connecting
//!   to it fails, the next one is tried, each at most once; with none left the client's
//!   connection is reset (as an L4 balancer with no healthy target does);
//! - [`kill`](Balancer::kill) takes a backend out and resets (RST, not FIN) both sides of every
//!   connection it carries, so clients see what they see when a replica dies or a balancer
//!   loses its state; [`drain`](Balancer::drain) only stops new connections;
//! - bytes are forwarded as they come, in both directions, with no buffering beyond one read;
//! - every task ends when the `Balancer` is dropped (its accept loop is aborted and its
//!   connections reset).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::health::{Health, HealthCheck, probe};

/// The most rotation changes [`Balancer::rotation_changes`] keeps (the oldest go first).
const MAX_CHANGES: usize = 1024;

/// A backend entering or leaving rotation because of its health checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationChange {
    /// The backend's index.
    pub backend: usize,
    /// Whether it entered (`true`) or left rotation.
    pub healthy: bool,
    /// When the check that decided it ended.
    pub at: Instant,
}

struct Backend {
    addr: SocketAddr,
    up: bool,
    /// `None` without a health check (always healthy).
    health: Option<Health>,
    /// Health checks of this backend so far.
    checks: u64,
    /// Bumped by `kill`: connections born in an older generation are reset.
    generation: watch::Sender<u64>,
    /// Connections accepted for this backend so far.
    connections: Arc<AtomicU64>,
}

impl Backend {
    fn in_rotation(&self) -> bool {
        self.up && self.health.as_ref().is_none_or(|h| h.healthy)
    }
}

struct State {
    backends: Vec<Backend>,
    next: usize,
    changes: Vec<RotationChange>,
}

/// A round-robin TCP load balancer on a loopback port. Dropping it stops it.
pub struct Balancer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
    /// One per backend with a health check.
    checkers: Vec<JoinHandle<()>>,
    /// Bumped whenever a backend enters or leaves rotation.
    rotation: watch::Sender<u64>,
    /// Closed on drop: every connection task ends.
    stop: watch::Sender<bool>,
}

impl Balancer {
    /// Starts on a free loopback port in front of `backends`, all up and in rotation.
    pub async fn start(backends: &[SocketAddr]) -> std::io::Result<Self> {
        Self::start_inner(backends, None).await
    }

    /// Starts on a free loopback port in front of `backends`, each checked by `check`: out
    /// of rotation until it passes `check.healthy_threshold` checks in a row.
    pub async fn with_health_check(
        backends: &[SocketAddr],
        check: HealthCheck,
    ) -> std::io::Result<Self> {
        Self::start_inner(backends, Some(check)).await
    }

    async fn start_inner(
        backends: &[SocketAddr],
        check: Option<HealthCheck>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            backends: backends
                .iter()
                .map(|a| Backend {
                    addr: *a,
                    up: true,
                    health: check.as_ref().map(|_| Health::default()),
                    checks: 0,
                    generation: watch::channel(0).0,
                    connections: Arc::default(),
                })
                .collect(),
            next: 0,
            changes: Vec::new(),
        }));
        let (stop, _) = watch::channel(false);
        let (rotation, _) = watch::channel(0);
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&state), stop.subscribe()));
        let checkers = match check {
            Some(check) => (0..backends.len())
                .map(|i| {
                    tokio::spawn(check_loop(
                        i,
                        check.clone(),
                        Arc::clone(&state),
                        rotation.clone(),
                    ))
                })
                .collect(),
            None => Vec::new(),
        };
        Ok(Self {
            addr,
            state,
            accept,
            checkers,
            rotation,
            stop,
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://` + [`addr`](Self::addr).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Backend `i` gets no new connections; open ones carry on.
    pub fn drain(&self, i: usize) {
        self.with(|s| {
            if let Some(b) = s.backends.get_mut(i) {
                b.up = false;
            }
        });
        self.rotation.send_modify(|g| *g += 1);
    }

    /// Backend `i` gets no new connections and every open one is reset on both sides.
    pub fn kill(&self, i: usize) {
        self.with(|s| {
            if let Some(b) = s.backends.get_mut(i) {
                b.up = false;
                b.generation.send_modify(|g| *g += 1);
            }
        });
        self.rotation.send_modify(|g| *g += 1);
    }

    /// Backend `i` takes new connections again (once healthy, with a health check), at
    /// `addr` when given (a restarted server on another port: a new target, unhealthy until
    /// it passes its checks).
    pub fn revive(&self, i: usize, addr: Option<SocketAddr>) {
        self.with(|s| {
            if let Some(b) = s.backends.get_mut(i) {
                b.up = true;
                if let Some(a) = addr
                    && a != b.addr
                {
                    b.addr = a;
                    if let Some(h) = &mut b.health {
                        *h = Health::default();
                    }
                }
            }
        });
        self.rotation.send_modify(|g| *g += 1);
    }

    /// Whether each backend is in rotation (up and, with a health check, healthy).
    pub fn in_rotation(&self) -> Vec<bool> {
        self.with(|s| s.backends.iter().map(Backend::in_rotation).collect())
    }

    /// How many health checks each backend has had so far.
    pub fn checks(&self) -> Vec<u64> {
        self.with(|s| s.backends.iter().map(|b| b.checks).collect())
    }

    /// The health checks' decisions so far, oldest first (at most the last 1024).
    pub fn rotation_changes(&self) -> Vec<RotationChange> {
        self.with(|s| s.changes.clone())
    }

    /// Waits until backend `i`'s being in rotation is `want`, for at most `within`;
    /// returns whether it is.
    pub async fn wait_in_rotation(&self, i: usize, want: bool, within: Duration) -> bool {
        let mut changed = self.rotation.subscribe();
        let wait = async {
            loop {
                changed.borrow_and_update();
                if self.in_rotation().get(i).copied() == Some(want) {
                    return;
                }
                if changed.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }

    /// How many connections each backend has been given so far.
    pub fn connections(&self) -> Vec<u64> {
        self.with(|s| {
            s.backends
                .iter()
                .map(|b| b.connections.load(Ordering::Relaxed))
                .collect()
        })
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.accept.abort();
        for c in &self.checkers {
            c.abort();
        }
        self.stop.send_replace(true);
    }
}

/// Checks backend `i` every `check.interval` (the next check at once when one took longer)
/// until aborted, recording each result.
async fn check_loop(
    i: usize,
    check: HealthCheck,
    state: Arc<Mutex<State>>,
    rotation: watch::Sender<u64>,
) {
    let mut every = tokio::time::interval(check.interval.max(Duration::from_millis(1)));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(addr) = state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .backends
            .get(i)
            .map(|b| b.addr)
        else {
            return;
        };
        let result = probe(addr, &check.path, check.timeout).await;
        let ok = matches!(result, Ok(200));
        let changed = {
            let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
            let s = &mut *s;
            let Some(b) = s.backends.get_mut(i) else {
                return;
            };
            b.checks += 1;
            // A revive to another address while this check ran: its result is the old one's.
            if b.addr != addr {
                continue;
            }
            let changed = b.health.as_mut().and_then(|h| h.record(ok, &check));
            if let Some(healthy) = changed {
                if s.changes.len() >= MAX_CHANGES {
                    s.changes.remove(0);
                }
                s.changes.push(RotationChange {
                    backend: i,
                    healthy,
                    at: Instant::now(),
                });
            }
            changed
        };
        if let Some(healthy) = changed {
            tracing::debug!(backend = i, %addr, healthy, result = ?result, "balancer: health changed");
            rotation.send_modify(|g| *g += 1);
        }
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, stop: watch::Receiver<bool>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            // Out of descriptors, most likely: let others close theirs.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = inbound.set_nodelay(true);
        tokio::spawn(forward(inbound, Arc::clone(&state), stop.clone()));
    }
}

/// The up backends in turn from the round-robin position (which advances by one).
fn candidates(
    state: &Mutex<State>,
) -> Vec<(usize, SocketAddr, watch::Receiver<u64>, Arc<AtomicU64>)> {
    let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
    let n = s.backends.len();
    let start = s.next;
    s.next = (start + 1) % n.max(1);
    (0..n)
        .map(|k| (start + k) % n)
        .filter_map(|i| {
            let b = s.backends.get(i)?;
            b.in_rotation().then(|| {
                (
                    i,
                    b.addr,
                    b.generation.subscribe(),
                    Arc::clone(&b.connections),
                )
            })
        })
        .collect()
}

async fn forward(inbound: TcpStream, state: Arc<Mutex<State>>, mut stop: watch::Receiver<bool>) {
    for (i, addr, mut generation, connections) in candidates(&state) {
        let born = *generation.borrow_and_update();
        let outbound = match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
        {
            Ok(Ok(s)) => s,
            _ => {
                tracing::debug!(backend = i, %addr, "balancer: backend refused, trying the next");
                continue;
            }
        };
        connections.fetch_add(1, Ordering::Relaxed);
        let _ = outbound.set_nodelay(true);
        let (mut ri, mut wi) = inbound.into_split();
        let (mut ro, mut wo) = outbound.into_split();
        let up = async {
            let mut buf = vec![0u8; 16 << 10];
            while let Ok(n) = ri.read(&mut buf).await {
                if n == 0
                    || wo
                        .write_all(buf.get(..n).unwrap_or_default())
                        .await
                        .is_err()
                {
                    break;
                }
            }
            let _ = wo.shutdown().await;
        };
        let down = async {
            let mut buf = vec![0u8; 16 << 10];
            while let Ok(n) = ro.read(&mut buf).await {
                if n == 0
                    || wi
                        .write_all(buf.get(..n).unwrap_or_default())
                        .await
                        .is_err()
                {
                    break;
                }
            }
            let _ = wi.shutdown().await;
        };
        let killed = async {
            loop {
                tokio::select! {
                    r = generation.changed() => if r.is_err() || *generation.borrow() != born { return },
                    r = stop.changed() => if r.is_err() || *stop.borrow() { return },
                }
            }
        };
        tokio::select! {
            ((), ()) = async { tokio::join!(up, down) } => {}
            () = killed => {
                // Reset both sides: a linger of zero makes the close an RST.
                if let (Ok(i), Ok(o)) = (ri.reunite(wi), ro.reunite(wo)) {
                    let _ = i.set_zero_linger();
                    let _ = o.set_zero_linger();
                }
            }
        }
        return;
    }
    // No backend: reset the client.
    let _ = inbound.set_zero_linger();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        a
    }

    async fn roundtrip(s: &mut TcpStream) -> std::io::Result<()> {
        s.write_all(b"x").await?;
        let mut b = [0u8; 1];
        let n = s.read(&mut b).await?;
        if n == 1 {
            Ok(())
        } else {
            Err(std::io::ErrorKind::UnexpectedEof.into())
        }
    }

    #[tokio::test]
    async fn connections_go_round_robin_and_a_kill_resets_the_open_ones() {
        let b = Balancer::start(&[echo().await, echo().await])
            .await
            .unwrap();
        let mut c1 = TcpStream::connect(b.addr()).await.unwrap();
        let mut c2 = TcpStream::connect(b.addr()).await.unwrap();
        roundtrip(&mut c1).await.unwrap();
        roundtrip(&mut c2).await.unwrap();
        assert_eq!(b.connections(), [1, 1]);

        b.kill(0);
        // c1 went to backend 0: reset, not a clean close.
        let e = roundtrip(&mut c1).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
        roundtrip(&mut c2).await.unwrap();
        // New connections all go to backend 1.
        let mut c3 = TcpStream::connect(b.addr()).await.unwrap();
        roundtrip(&mut c3).await.unwrap();
        assert_eq!(b.connections(), [1, 2]);

        b.revive(0, None);
        let mut c4 = TcpStream::connect(b.addr()).await.unwrap();
        let mut c5 = TcpStream::connect(b.addr()).await.unwrap();
        roundtrip(&mut c4).await.unwrap();
        roundtrip(&mut c5).await.unwrap();
        assert_eq!(b.connections().iter().sum::<u64>(), 5);
        assert!(b.connections()[0] >= 2);
    }

    #[tokio::test]
    async fn a_dead_backend_is_skipped_and_with_none_left_the_client_is_reset() {
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let b = Balancer::start(&[dead, echo().await]).await.unwrap();
        for _ in 0..3 {
            let mut c = TcpStream::connect(b.addr()).await.unwrap();
            roundtrip(&mut c).await.unwrap();
        }
        assert_eq!(b.connections(), [0, 3]);
        b.drain(1);
        let mut c = TcpStream::connect(b.addr()).await.unwrap();
        assert!(roundtrip(&mut c).await.is_err());
    }
    /// A keep-alive HTTP backend answering `GET /readyz` with the status in the returned
    /// cell (counting the answers that were not 200) and anything else with 200 and `name`.
    async fn http_backend(
        name: &'static str,
    ) -> (
        SocketAddr,
        Arc<std::sync::atomic::AtomicU16>,
        Arc<AtomicU64>,
    ) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        let ready = Arc::new(std::sync::atomic::AtomicU16::new(200));
        let failed = Arc::new(AtomicU64::new(0));
        let (r, f) = (Arc::clone(&ready), Arc::clone(&failed));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let (ready, failed) = (Arc::clone(&r), Arc::clone(&f));
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut b = [0u8; 512];
                    loop {
                        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                            match s.read(&mut b).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&b[..n]),
                            }
                            continue;
                        };
                        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                        buf.drain(..end + 4);
                        let answer = if head.starts_with("GET /readyz ") {
                            let code = ready.load(Ordering::SeqCst);
                            if code != 200 {
                                failed.fetch_add(1, Ordering::SeqCst);
                            }
                            format!("HTTP/1.1 {code} x\r\nContent-Length: 0\r\n\r\n")
                        } else {
                            format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{name}")
                        };
                        if s.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (a, ready, failed)
    }

    /// One `GET /` on `s`; the backend's name.
    async fn ask(s: &mut TcpStream) -> String {
        s.write_all(b"GET / HTTP/1.1\r\nHost: b\r\n\r\n")
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut b = [0u8; 256];
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n")
                && got.len() >= end + 6
            {
                return String::from_utf8_lossy(&got[end + 4..end + 6]).into_owned();
            }
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0, "closed mid-answer");
            got.extend_from_slice(&b[..n]);
        }
    }

    async fn ask_new(b: &Balancer) -> String {
        ask(&mut TcpStream::connect(b.addr()).await.unwrap()).await
    }

    #[tokio::test]
    async fn health_checks_take_a_failing_backend_out_and_bring_it_back_without_cutting_open_connections()
     {
        let patience = Duration::from_secs(30);
        let (a0, ready0, failed0) = http_backend("b0").await;
        let (a1, _, _) = http_backend("b1").await;
        // Accepts and never answers: every check times out.
        let hung = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a2 = hung.local_addr().unwrap();
        let _held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((s, _)) = hung.accept().await {
                open.push(s);
            }
        });
        let check = HealthCheck {
            path: "/readyz".into(),
            interval: Duration::from_millis(20),
            timeout: Duration::from_millis(200),
            unhealthy_threshold: 2,
            healthy_threshold: 2,
        };
        let b = Balancer::with_health_check(&[a0, a1, a2], check)
            .await
            .unwrap();
        assert_eq!(b.in_rotation(), [false, false, false], "out until checked");
        assert!(b.wait_in_rotation(0, true, patience).await);
        assert!(b.wait_in_rotation(1, true, patience).await);
        let deadline = Instant::now() + patience;
        while b.checks()[2] < 3 {
            assert!(Instant::now() < deadline, "the hung backend is checked");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!b.in_rotation()[2], "checks that time out never pass");

        // A connection held open to b0.
        let mut held = None;
        for _ in 0..3 {
            let mut s = TcpStream::connect(b.addr()).await.unwrap();
            if ask(&mut s).await == "b0" {
                held = Some(s);
                break;
            }
        }
        let mut held = held.expect("one of three connections goes to b0");

        ready0.store(500, Ordering::SeqCst);
        assert!(b.wait_in_rotation(0, false, patience).await);
        assert!(
            failed0.load(Ordering::SeqCst) >= 2,
            "out only after two failed checks"
        );
        for _ in 0..4 {
            assert_eq!(ask_new(&b).await, "b1", "new connections avoid b0");
        }
        assert_eq!(ask(&mut held).await, "b0", "an open connection carries on");

        ready0.store(200, Ordering::SeqCst);
        assert!(b.wait_in_rotation(0, true, patience).await);
        let mut names = Vec::new();
        for _ in 0..3 {
            names.push(ask_new(&b).await);
        }
        assert!(names.iter().any(|n| n == "b0"), "{names:?}");
        let changes: Vec<(usize, bool)> = b
            .rotation_changes()
            .iter()
            .map(|c| (c.backend, c.healthy))
            .filter(|(i, _)| *i == 0)
            .collect();
        assert_eq!(changes, [(0, true), (0, false), (0, true)]);

        // A drain takes a healthy backend out, a revive at the same address brings it back
        // at once (its health is kept).
        b.drain(1);
        assert_eq!(b.in_rotation(), [true, false, false]);
        b.revive(1, None);
        assert_eq!(b.in_rotation(), [true, true, false]);
    }
}
