//! [`Balancer`]: round-robin TCP load balancing over backends a test can drain, kill and revive.
//!
//! Invariants:
//! - a new connection goes to the next backend in turn that is up; when connecting to it
//!   fails, the next one is tried, each at most once; with none left the client's connection
//!   is reset (as an L4 balancer with no healthy target does);
//! - [`kill`](Balancer::kill) takes a backend out and resets (RST, not FIN) both sides of every
//!   connection it carries, so clients see what they see when a replica dies or a balancer
//!   loses its state; [`drain`](Balancer::drain) only stops new connections;
//! - bytes are forwarded as they come, in both directions, with no buffering beyond one read;
//! - every task ends when the `Balancer` is dropped (its accept loop is aborted and its
//!   connections reset).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

struct Backend {
    addr: SocketAddr,
    up: bool,
    /// Bumped by `kill`: connections born in an older generation are reset.
    generation: watch::Sender<u64>,
    /// Connections accepted for this backend so far.
    connections: Arc<AtomicU64>,
}

struct State {
    backends: Vec<Backend>,
    next: usize,
}

/// A round-robin TCP load balancer on a loopback port. Dropping it stops it.
pub struct Balancer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
    /// Closed on drop: every connection task ends.
    stop: watch::Sender<bool>,
}

impl Balancer {
    /// Starts on a free loopback port in front of `backends`, all up.
    pub async fn start(backends: &[SocketAddr]) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            backends: backends
                .iter()
                .map(|a| Backend {
                    addr: *a,
                    up: true,
                    generation: watch::channel(0).0,
                    connections: Arc::default(),
                })
                .collect(),
            next: 0,
        }));
        let (stop, _) = watch::channel(false);
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&state), stop.subscribe()));
        Ok(Self {
            addr,
            state,
            accept,
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
    }

    /// Backend `i` gets no new connections and every open one is reset on both sides.
    pub fn kill(&self, i: usize) {
        self.with(|s| {
            if let Some(b) = s.backends.get_mut(i) {
                b.up = false;
                b.generation.send_modify(|g| *g += 1);
            }
        });
    }

    /// Backend `i` takes new connections again, at `addr` when given (a restarted server on
    /// another port).
    pub fn revive(&self, i: usize, addr: Option<SocketAddr>) {
        self.with(|s| {
            if let Some(b) = s.backends.get_mut(i) {
                b.up = true;
                if let Some(a) = addr {
                    b.addr = a;
                }
            }
        });
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
        self.stop.send_replace(true);
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, stop: watch::Receiver<bool>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            // Out of descriptors, most likely: let others close theirs.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
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
            b.up.then(|| {
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
        let outbound = match tokio::time::timeout(
            std::time::Duration::from_secs(5),
            TcpStream::connect(addr),
        )
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
}
