//! The watch-latency histogram on the server's /metrics: a live event delivered to an HTTP
//! watch is counted at every stage of upstream's `apiserver_watch_events_dispatch_duration_seconds`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Read;
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http, open_stream};

fn create(addr: &str, name: &str) {
    let body = serde_json::json!({"metadata": {"name": name}, "data": {"v": "x"}});
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

fn stage_count(addr: &str, stage: &str) -> u64 {
    let body = http(addr, "GET", "/metrics", &[], b"").body;
    let series = format!(
        "apiserver_watch_events_dispatch_duration_seconds_count{{resource=\"configmaps\",stage=\"{stage}\"}}"
    );
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_live_event_to_an_http_watch_is_timed_at_every_stage() {
    let server = Server::start(&[]);
    create(&server.addr, "first");
    let list = http(
        &server.addr,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        &[],
        b"",
    )
    .json();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (mut watch, code) = open_stream(
        &server.addr,
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"),
    );
    assert_eq!(code, 200);
    create(&server.addr, "second");
    // The event reaches the client...
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + PATIENCE;
    while !String::from_utf8_lossy(&got).contains("\"name\":\"second\"") {
        assert!(Instant::now() < deadline, "no event");
        let n = watch.read(&mut buf).unwrap();
        assert!(n > 0, "the watch ended");
        got.extend_from_slice(&buf[..n]);
    }
    // ...and every stage of its way counts it (the dispatcher's own record may trail).
    let deadline = Instant::now() + PATIENCE;
    for stage in [
        "storage_to_cache",
        "cacher_queue",
        "cache_to_watcher",
        "watcher_queue",
        "total",
    ] {
        while stage_count(&server.addr, stage) < 1 {
            assert!(Instant::now() < deadline, "{stage} never counted");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
