//! A tiny Kubernetes-style HTTP server for one collection of pods, on loopback, in the test's
//! own runtime (so it works under tokio's paused clock), and a TCP proxy that can drop its
//! connections silently.
//!
//! The server keeps objects and an event log: a list answers the current state; a watch
//! sends every logged event after its `resourceVersion`, then the new ones as they are
//! written, and never ends by itself. Misbehaviours are queued per request kind and
//! consumed in order. Every request is logged with the virtual time it arrived at.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// How the server misbehaves on one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misbehave {
    /// Send the response headers, then nothing, forever (connection open).
    SilentAfterHeaders,
    /// Send the headers and the first half of the next frame (watch) or of the body (list),
    /// then nothing, forever.
    StallMidFrame,
    /// Answer with this status code and a Status body.
    Status(u16),
    /// Answer with this status code, a `Retry-After` header of this value and a Status body
    /// (a draining replica's `503`, a cache's `429`).
    Refuse(u16, &'static str),
}

/// One request the server saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub watch: bool,
    /// The raw query string.
    pub query: String,
}

impl Seen {
    /// A query parameter.
    pub fn param(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

#[derive(Default)]
struct State {
    rv: u64,
    objects: BTreeMap<String, String>,
    /// (rv, event frame without newline)
    log: Vec<(u64, String)>,
    list_faults: VecDeque<Misbehave>,
    watch_faults: VecDeque<Misbehave>,
    seen: Vec<Seen>,
}

/// The fake server. Cheap to clone.
#[derive(Clone)]
pub struct FakeApi {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// The current resource version, for watchers to wait on.
    rv: Arc<watch::Sender<u64>>,
}

pub fn pod_json(name: &str, rv: u64) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}}}}"#
    )
}

impl FakeApi {
    /// Starts serving on a free loopback port, with `rv` as the starting version.
    pub async fn start(rv: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, _) = watch::channel(rv);
        let api = Self {
            addr,
            state: Arc::new(Mutex::new(State {
                rv,
                ..State::default()
            })),
            rv: Arc::new(tx),
        };
        let a = api.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(a.clone().serve(sock));
            }
        });
        api
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Creates or updates a pod; returns its new version.
    pub fn put(&self, name: &str) -> u64 {
        let mut s = self.state.lock().unwrap();
        s.rv += 1;
        let rv = s.rv;
        let json = pod_json(name, rv);
        let kind = if s.objects.insert(name.to_owned(), json.clone()).is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        s.log
            .push((rv, format!(r#"{{"type":"{kind}","object":{json}}}"#)));
        drop(s);
        self.rv.send_replace(rv);
        rv
    }

    pub fn fail_lists(&self, m: impl IntoIterator<Item = Misbehave>) {
        self.state.lock().unwrap().list_faults.extend(m);
    }

    pub fn fail_watches(&self, m: impl IntoIterator<Item = Misbehave>) {
        self.state.lock().unwrap().watch_faults.extend(m);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    pub fn watches(&self) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| s.watch).collect()
    }

    pub fn lists(&self) -> Vec<Seen> {
        self.seen().into_iter().filter(|s| !s.watch).collect()
    }

    async fn serve(self, mut sock: TcpStream) {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let query = target
            .split_once('?')
            .map(|(_, q)| q.to_owned())
            .unwrap_or_default();
        let seen = Seen {
            at: Instant::now(),
            watch: false,
            query,
        };
        let watch = seen.param("watch").is_some();
        let seen = Seen { watch, ..seen };
        let fault = {
            let mut s = self.state.lock().unwrap();
            s.seen.push(seen.clone());
            if watch {
                s.watch_faults.pop_front()
            } else {
                s.list_faults.pop_front()
            }
        };
        let refusal = match &fault {
            Some(Misbehave::Status(code)) => Some((*code, String::new())),
            Some(Misbehave::Refuse(code, after)) => {
                Some((*code, format!("retry-after: {after}\r\n")))
            }
            _ => None,
        };
        if let Some((code, extra)) = refusal {
            let body = format!(
                r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"scripted","reason":"InternalError","code":{code}}}"#
            );
            let resp = format!(
                "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
            return;
        }
        if watch {
            self.serve_watch(sock, &seen, fault).await;
        } else {
            self.serve_list(sock, fault).await;
        }
    }

    async fn serve_list(self, mut sock: TcpStream, fault: Option<Misbehave>) {
        let body = {
            let s = self.state.lock().unwrap();
            let items: Vec<&str> = s.objects.values().map(String::as_str).collect();
            format!(
                r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{}"}},"items":[{}]}}"#,
                s.rv,
                items.join(",")
            )
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        let _ = sock.write_all(head.as_bytes()).await;
        match fault {
            Some(Misbehave::SilentAfterHeaders) => hang(sock).await,
            Some(Misbehave::StallMidFrame) => {
                let _ = sock.write_all(&body.as_bytes()[..body.len() / 2]).await;
                hang(sock).await;
            }
            _ => {
                let _ = sock.write_all(body.as_bytes()).await;
            }
        }
    }

    async fn serve_watch(self, mut sock: TcpStream, seen: &Seen, fault: Option<Misbehave>) {
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
        if sock.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        if fault == Some(Misbehave::SilentAfterHeaders) {
            return hang(sock).await;
        }
        let mut after: u64 = seen
            .param("resourceVersion")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut rv = self.rv.subscribe();
        loop {
            let frames: Vec<(u64, String)> = {
                let s = self.state.lock().unwrap();
                s.log.iter().filter(|(v, _)| *v > after).cloned().collect()
            };
            for (v, frame) in frames {
                let line = format!("{frame}\n");
                if fault == Some(Misbehave::StallMidFrame) {
                    let half = &line.as_bytes()[..line.len() / 2];
                    let _ = sock
                        .write_all(format!("{:x}\r\n", half.len()).as_bytes())
                        .await;
                    let _ = sock.write_all(half).await;
                    let _ = sock.write_all(b"\r\n").await;
                    return hang(sock).await;
                }
                let chunk = format!("{:x}\r\n{line}\r\n", line.len());
                if sock.write_all(chunk.as_bytes()).await.is_err() {
                    return;
                }
                after = v;
            }
            if rv.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Keeps the connection open and sends nothing until the peer goes away.
async fn hang(mut sock: TcpStream) {
    let mut buf = [0u8; 64];
    while let Ok(n) = sock.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

/// A TCP proxy whose open connections can be made to go silent, the way a NAT or a load
/// balancer that lost their state does: nothing is forwarded and nothing is closed or reset
/// (the proxy's own TCP stack still acknowledges, so keepalive probes are answered). New
/// connections are forwarded normally.
pub struct SilentDropProxy {
    pub addr: SocketAddr,
    /// Connections of an older generation are black-holed.
    generation: Arc<watch::Sender<u64>>,
}

impl SilentDropProxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, _) = watch::channel(0u64);
        let generation = Arc::new(tx);
        let g = Arc::clone(&generation);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let g = Arc::clone(&g);
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let born = *g.borrow();
                    let (ri, wi) = inbound.into_split();
                    let (ro, wo) = outbound.into_split();
                    // Both halves live until both pumps end: a black-holed connection stays open.
                    tokio::join!(
                        pump(ri, wo, g.subscribe(), born),
                        pump(ro, wi, g.subscribe(), born)
                    );
                });
            }
        });
        Self { addr, generation }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every connection open now stops forwarding, silently and for good.
    pub fn drop_open_connections_silently(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

async fn pump<R, W>(mut from: R, mut to: W, mut generation: watch::Receiver<u64>, born: u64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            Ok(()) = generation.changed() => 0,
        };
        if *generation.borrow() != born {
            // Black-holed: read and discard forever, forward nothing, close nothing.
            let mut sink = vec![0u8; 16 * 1024];
            while let Ok(n) = from.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
            // Keep the write half open as well (dropping it would send a FIN).
            std::future::pending::<()>().await;
        }
        if n > 0 && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
