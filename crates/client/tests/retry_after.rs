//! Refused requests and error answers of the HTTP client, against a scripted loopback
//! server in the test's own runtime, on tokio's paused clock (so deadlines pass in virtual
//! time).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use listwatch_client::{Error, HttpClient, HttpConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// One request the scripted server saw.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    at: Instant,
    method: String,
    target: String,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// One scripted answer.
#[derive(Debug, Clone)]
enum Reply {
    /// This code and `Retry-After`, a `content-length` of 100 and 10 bytes of it, then the
    /// connection stays open and silent.
    StalledBody(u16, Option<&'static str>),
}

/// A scripted server: the n-th request (from 0) gets `script(n)`.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    async fn start(script: impl Fn(usize) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let script = Arc::new(script);
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (script, log) = (Arc::clone(&script), Arc::clone(&log));
                tokio::spawn(async move {
                    if let Some((sock, seen)) = read_request(sock).await {
                        let n = {
                            let mut log = log.lock().unwrap();
                            log.push(seen);
                            log.len() - 1
                        };
                        answer(sock, script(n)).await;
                    }
                });
            }
        });
        Self { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn read_request(mut sock: TcpStream) -> Option<(TcpStream, Seen)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or_default().to_owned();
    let target = words.next().unwrap_or_default().to_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    };
    let length: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
    let mut body = data[head_end..].to_vec();
    while body.len() < length {
        match sock.read(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    let seen = Seen {
        at: Instant::now(),
        method,
        target,
        content_type: header("content-type"),
        body,
    };
    Some((sock, seen))
}

async fn answer(mut sock: TcpStream, reply: Reply) {
    match reply {
        Reply::StalledBody(code, after) => {
            let after = after.map_or(String::new(), |a| format!("retry-after: {a}\r\n"));
            let head = format!(
                "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\n{after}content-length: 100\r\nconnection: close\r\n\r\n"
            );
            let _ = sock
                .write_all(format!("{head}{{\"kind\":\"S").as_bytes())
                .await;
            silent(sock).await;
        }
    }
}

/// Keeps the connection open, sending nothing, until the peer goes away.
async fn silent(mut sock: TcpStream) {
    let mut buf = [0u8; 64];
    while let Ok(n) = sock.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}

const POD_A: &str = "/api/v1/namespaces/ns/pods/a";
const SECOND: Duration = Duration::from_secs(1);

#[tokio::test(start_paused = true)]
async fn an_error_body_that_stalls_fails_at_the_deadline_instead_of_hanging() {
    // Before error bodies were read under the deadline, this waited forever.
    let server = Server::start(|_| Reply::StalledBody(404, None)).await;
    let config = HttpConfig::new(&server.url)
        .unwrap()
        .request_timeout(Duration::from_secs(5));
    let start = Instant::now();
    let c = HttpClient::new(config).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(3600), c.get(POD_A))
        .await
        .expect("the error body's read has a deadline")
        .unwrap_err();
    assert!(matches!(e, Error::Http(_)), "{e}");
    assert!(start.elapsed() < 6 * SECOND);
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let s = &seen[0];
    assert_eq!((s.method.as_str(), s.target.as_str()), ("GET", POD_A));
    assert!(s.content_type.is_none() && s.body.is_empty() && s.at == start);
}
