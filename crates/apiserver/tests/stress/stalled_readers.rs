//! What a client that stops reading costs the server: a watch replaying a namespace into a
//! socket nobody reads holds hyper's connection buffer (64 KiB,
//! `serve::HTTP1_MAX_BUF_BYTES`) and the batch being written — not hyper's default buffer
//! of ~400 KiB, with which a red team held 1.7 GB by opening 4 000 such watches.
//!
//! Memory is read from `/proc/PID/status` (`VmHWM` reset through `clear_refs` before the
//! watches open), so the bound is on bytes, not time; the wait for the server to have
//! written what it can is on its own counter of watch events sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, connect_with, http};
use serde_json::json;

const CM: &str = "/api/v1/namespaces/default/configmaps";

/// Watch events the server has sent, all resources.
fn events_sent(addr: &str) -> f64 {
    let r = http(addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    String::from_utf8_lossy(&r.body)
        .lines()
        .filter(|l| l.starts_with("apiserver_watch_events_sent"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn unread_watches_replaying_a_namespace_hold_little_each() {
    let server = Server::start(&[]);
    let addr = server.addr.clone();
    let pid = server.pid();
    // 1 500 ConfigMaps of ~600 bytes: about 900 KB of replay per watch, more than any
    // buffer on the way holds.
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                for i in (w..1_500).step_by(4) {
                    let body = json!({
                        "metadata": {"name": format!("cm-{i}"), "labels": {"app": format!("a{}", i % 50)}},
                        "data": {"k": "v".repeat(400)},
                    })
                    .to_string();
                    let r = http(
                        &addr,
                        "POST",
                        CM,
                        &[("Content-Type", "application/json")],
                        body.as_bytes(),
                    );
                    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    // The peak from here on.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = common::proc_kib(pid, "VmRSS:");

    const WATCHES: u64 = 200;
    let watches: Vec<TcpStream> = (0..WATCHES)
        .map(|_| {
            let mut s = connect_with("127.0.0.3", &addr, Some(4096));
            write!(
                s,
                "GET {CM}?watch=1&resourceVersion=0 HTTP/1.1\r\nHost: {addr}\r\n\r\n"
            )
            .unwrap();
            s
        })
        .collect();
    // Until the server has written all it can: its count of events sent stands still.
    let deadline = Instant::now() + PATIENCE;
    let (mut last, mut steady) = (-1.0, 0);
    while steady < 5 {
        assert!(Instant::now() < deadline, "the watches never settled");
        std::thread::sleep(Duration::from_millis(200));
        let now = events_sent(&addr);
        if now == last && now > 0.0 {
            steady += 1;
        } else {
            (last, steady) = (now, 0);
        }
    }
    let peak = common::proc_kib(pid, "VmHWM:");
    let each = peak.saturating_sub(before) * 1024 / WATCHES;
    eprintln!(
        "{WATCHES} unread watches of 1 500 objects: {last} events sent; RSS {before} KiB before, \
         peak {peak} KiB: {each} bytes each"
    );
    assert!(
        each < 256 * 1024,
        "each unread watch holds {each} bytes (hyper's default buffer held ~420 KB)"
    );
    // Still serving others.
    assert_eq!(http(&addr, "GET", "/readyz", &[], b"").status, 200);
    drop(watches);
}
