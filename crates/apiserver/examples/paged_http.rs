//! A paginated list over HTTP against a running server: what a first page costs beside a
//! continued one (issue 12: continued pages come from the watch cache's pinned state, so
//! they should cost about what a first page does).
//!
//! ```text
//! cargo run --release -p listwatch-apiserver &
//! cargo run --release -p listwatch-apiserver --example paged_http -- 127.0.0.1:8080 20000 5
//! ```
//!
//! Creates PODS pods in a fresh namespace (8 keep-alive connections), then ROUNDS times walks
//! them by pages of 500 over one keep-alive connection (`limit=500`, then `continue=`),
//! timing each request from its first byte sent to its last byte read. Prints, for first and
//! for continued pages, the median over all rounds and the spread of the rounds' medians.
//! Loopback only; bounded by its arguments.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const PAGE: usize = 500;

/// One request on a keep-alive connection; returns the status code and the body (read by
/// Content-Length or chunked transfer coding).
async fn request(
    conn: &mut BufReader<TcpStream>,
    addr: &str,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, Vec<u8>) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(req.as_bytes()).await.unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).await.unwrap();
    let code = status.split_whitespace().nth(1).unwrap().parse().unwrap();
    let (mut len, mut chunked) = (0, false);
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let mut out = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            conn.read_line(&mut size).await.unwrap();
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap(), 16).unwrap();
            let mut chunk = vec![0u8; n + 2];
            conn.read_exact(&mut chunk).await.unwrap();
            out.extend_from_slice(&chunk[..n]);
            if n == 0 {
                break;
            }
        }
    } else {
        out.resize(len, 0);
        conn.read_exact(&mut out).await.unwrap();
    }
    (code, out)
}

/// The list's `metadata.continue`, if any.
fn continue_of(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    v["metadata"]["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
}

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let addr = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let pods: usize = args.get(2).map_or(20_000, |a| a.parse().unwrap());
    let rounds: usize = args.get(3).map_or(5, |a| a.parse().unwrap());
    let ns = format!("paged-{}", std::process::id());
    let mut conn = BufReader::new(TcpStream::connect(&addr).await.unwrap());
    let (code, _) = request(
        &mut conn,
        &addr,
        "POST",
        "/api/v1/namespaces",
        &format!(r#"{{"metadata":{{"name":"{ns}"}}}}"#),
    )
    .await;
    assert_eq!(code, 201);
    let created = Instant::now();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (addr, ns) = (addr.clone(), ns.clone());
            tokio::spawn(async move {
                let mut conn = BufReader::new(TcpStream::connect(&addr).await.unwrap());
                for i in (w..pods).step_by(8) {
                    let body = format!(
                        r#"{{"metadata":{{"name":"pod-{i:06}","labels":{{"app":"app-{}"}}}},"spec":{{"nodeName":"node-{}","containers":[{{"name":"c","image":"busybox"}}]}}}}"#,
                        i % 100,
                        i / 30
                    );
                    let path = format!("/api/v1/namespaces/{ns}/pods");
                    let (code, _) = request(&mut conn, &addr, "POST", &path, &body).await;
                    assert_eq!(code, 201);
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    println!(
        "created {pods} pods in {:.1} s",
        created.elapsed().as_secs_f64()
    );
    let base = format!("/api/v1/namespaces/{ns}/pods?limit={PAGE}");
    let (mut firsts, mut continued) = (Vec::new(), Vec::new());
    let (mut first_medians, mut continued_medians) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let mut path = base.clone();
        let mut items = 0;
        let mut round = Vec::new();
        let mut first = None;
        loop {
            let t = Instant::now();
            let (code, body) = request(&mut conn, &addr, "GET", &path, "").await;
            let took = t.elapsed();
            assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
            items += serde_json::from_slice::<serde_json::Value>(&body).unwrap()["items"]
                .as_array()
                .map_or(0, Vec::len);
            if first.is_none() {
                first = Some(took);
            } else {
                round.push(took);
            }
            match continue_of(&body) {
                Some(token) => path = format!("{base}&continue={token}"),
                None => break,
            }
        }
        assert_eq!(items, pods, "the walk saw every pod once");
        let first = first.unwrap();
        firsts.push(first);
        first_medians.push(first);
        continued.extend(round.iter().copied());
        continued_medians.push(median(round));
    }
    let spread = |mut d: Vec<Duration>| {
        d.sort();
        format!("{:.2?}–{:.2?}", d[0], d[d.len() - 1])
    };
    println!(
        "first page of {PAGE}: median {:.2?} over {rounds} rounds (rounds {})",
        median(firsts),
        spread(first_medians)
    );
    println!(
        "continued page of {PAGE}: median {:.2?} over {} pages (round medians {})",
        median(continued.clone()),
        continued.len(),
        spread(continued_medians)
    );
}
