//! Watch fan-out against a running server, with a client cheap enough not to be the
//! bottleneck (raw HTTP/1.1, events counted without parsing them).
//!
//! ```text
//! cargo run --release -p listwatch-apiserver &
//! cargo run --release -p listwatch-apiserver --example fanout -- 127.0.0.1:8080 100 2000
//! ```
//!
//! Opens WATCHERS watches on a fresh namespace's pods, creates WRITES pods over one
//! keep-alive connection, and prints the write rate and when every watcher had every event.
//! Loopback only; bounded by its arguments.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const MARKER: &[u8] = b"{\"type\":\"ADDED\"";

async fn watch(addr: String, path: String, want: usize) -> Instant {
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut carry: Vec<u8> = Vec::new();
    let mut seen = 0;
    loop {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "watch ended after {seen} events");
        carry.extend_from_slice(&buf[..n]);
        let mut i = 0;
        while let Some(p) = carry[i..].windows(MARKER.len()).position(|w| w == MARKER) {
            seen += 1;
            i += p + MARKER.len();
        }
        if seen >= want {
            return Instant::now();
        }
        // Keep a tail that may hold the start of a marker split across reads.
        let keep = carry.len().saturating_sub(MARKER.len() - 1).max(i);
        carry.drain(..keep);
    }
}

/// One request on a keep-alive connection; returns the status code.
async fn request(
    conn: &mut BufReader<TcpStream>,
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> u16 {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(req.as_bytes()).await.unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).await.unwrap();
    let code = status.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut len = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).await.unwrap();
    code
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let watchers: usize = args.get(2).map_or(100, |a| a.parse().unwrap());
    let writes: usize = args.get(3).map_or(2000, |a| a.parse().unwrap());
    let ns = format!("fanout-{}", std::process::id());
    let mut conn = BufReader::new(TcpStream::connect(&addr).await.unwrap());
    let code = request(
        &mut conn,
        &addr,
        "POST",
        "/api/v1/namespaces",
        &format!(r#"{{"metadata":{{"name":"{ns}"}}}}"#),
    )
    .await;
    assert_eq!(code, 201);
    // Watch from "now": resourceVersion 0 would first replay the (empty) state, which is fine too.
    let path = format!("/api/v1/namespaces/{ns}/pods?watch=1&timeoutSeconds=300");
    let tasks: Vec<_> = (0..watchers)
        .map(|_| tokio::spawn(watch(addr.clone(), path.clone(), writes)))
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let start = Instant::now();
    for i in 0..writes {
        let body = format!(
            r#"{{"metadata":{{"name":"p{i}","labels":{{"app":"load"}}}},"spec":{{"nodeName":"n{}","containers":[{{"name":"c","image":"x"}}]}}}}"#,
            i % 10
        );
        let code = request(
            &mut conn,
            &addr,
            "POST",
            &format!("/api/v1/namespaces/{ns}/pods"),
            &body,
        )
        .await;
        assert_eq!(code, 201);
    }
    let wrote = start.elapsed();
    let mut last = start;
    for t in tasks {
        last = last.max(t.await.unwrap());
    }
    let all = last - start;
    println!(
        "{writes} creates over one connection: {:.0} writes/s",
        writes as f64 / wrote.as_secs_f64()
    );
    println!(
        "{watchers} watchers x {writes} events: all delivered {:.2} s after the first write ({:.0} events/s)",
        all.as_secs_f64(),
        (watchers * writes) as f64 / all.as_secs_f64()
    );
    assert_eq!(
        request(
            &mut conn,
            &addr,
            "DELETE",
            &format!("/api/v1/namespaces/{ns}"),
            ""
        )
        .await,
        200
    );
}
