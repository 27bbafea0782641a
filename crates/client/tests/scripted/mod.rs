//! A scripted HTTP/1.1 server on loopback for client tests: every request gets what the
//! test's script answers for it (a body with a status and content type, or an open watch),
//! and is logged.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What one request gets.
pub enum Reply {
    /// A status and a JSON body, then the connection closes.
    Body(u16, String),
    /// A status, a Content-Type and a body, then the connection closes.
    Typed(u16, &'static str, String),
    /// A 200 watch: these frames (chunked), then the connection stays open.
    Watch(Vec<String>),
}

/// (method, request target) of every request.
pub type Log = Arc<Mutex<Vec<(String, String)>>>;

/// A scripted server: `script(method, target, n-th list or watch of its kind)`; its URL
/// and its request log.
pub async fn scripted(
    script: impl Fn(&str, &str, usize) -> Reply + Send + Sync + 'static,
) -> (String, Log) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    let script = Arc::new(script);
    let lists = Arc::new(AtomicUsize::new(0));
    let watches = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let (l, script, lists, watches) = (
                Arc::clone(&l),
                Arc::clone(&script),
                Arc::clone(&lists),
                Arc::clone(&watches),
            );
            tokio::spawn(async move {
                let Some((mut sock, method, target)) = read_head(sock).await else {
                    return;
                };
                l.lock().unwrap().push((method.clone(), target.clone()));
                let watch = target.contains("watch=true") || target.contains("watch=1");
                let n = if watch { &watches } else { &lists }.fetch_add(1, Ordering::SeqCst);
                let (code, ctype, body) = match script(&method, &target, n) {
                    Reply::Body(code, body) => (code, "application/json", body),
                    Reply::Typed(code, ctype, body) => (code, ctype, body),
                    Reply::Watch(frames) => {
                        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                        sock.write_all(head.as_bytes()).await.ok();
                        for f in frames {
                            let f = format!("{f}\n");
                            let chunk = format!("{:x}\r\n{f}\r\n", f.len());
                            sock.write_all(chunk.as_bytes()).await.ok();
                        }
                        sock.flush().await.ok();
                        let mut buf = [0u8; 64];
                        while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
                        return;
                    }
                };
                let res = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(res.as_bytes()).await.ok();
            });
        }
    });
    (url, log)
}

/// Reads the request head and body (by Content-Length); (socket, method, target).
async fn read_head(mut sock: TcpStream) -> Option<(TcpStream, String, String)> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(sock.read_u8().await.ok()?);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut first = text.lines().next()?.split(' ');
    let (method, target) = (first.next()?.to_owned(), first.next()?.to_owned());
    let len = text
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body).await.ok()?;
    Some((sock, method, target))
}

/// A pod's JSON; `node` is the JSON of `spec.nodeName` (a number makes it undecodable).
pub fn pod(name: &str, rv: u64, node: &str) -> String {
    format!(
        r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"{rv}"}},"spec":{{"nodeName":{node},"containers":[]}}}}"#
    )
}

/// A pod list's JSON at `rv`.
pub fn pod_list(rv: u64, items: &[String]) -> String {
    format!(
        r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}
