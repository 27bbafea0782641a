//! The watch cache in the running binary: what it answers depends on the backend's state as
//! upstream's does (compaction, ...), driven over raw HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http};
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn post(addr: &str, path: &str, body: &serde_json::Value) -> common::Response {
    let resp = http(addr, "POST", path, &[JSON], body.to_string().as_bytes());
    assert_eq!(
        resp.status,
        201,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    resp
}

fn rv_of(v: &serde_json::Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The embedded store compacts its history as it goes (here: all but the last 20 revisions).
/// The pods cache still holds the state and events at an early version, but the backend no
/// longer does: an Exact list from there gets 410 Expired, as it would from the backend; a
/// watch from there is served, since the cache's window covers it (a watch is judged by the
/// window alone, as upstream's cacher: issue 26), and so is a watch from a retained version.
#[test]
fn exact_lists_below_the_backends_compaction_are_expired_and_watches_the_window_covers_are_served()
{
    let server = Server::start(&[
        "--embedded-retain-revisions",
        "20",
        "--embedded-retain-window",
        "0",
    ]);
    let a = server.addr.as_str();
    post(a, "/api/v1/namespaces", &json!({"metadata":{"name":"e2e"}}));
    let pods = "/api/v1/namespaces/e2e/pods";
    let pod = json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}});
    let early = rv_of(&post(a, pods, &pod).json());
    // Writes to another resource move the global revision; the pods cache sees none of them
    // as events, so its window still reaches back to `early`.
    let mut last = 0;
    for i in 0..60 {
        let cm = json!({"metadata":{"name":format!("c{i}")}});
        last = rv_of(&post(a, "/api/v1/namespaces/e2e/configmaps", &cm).json());
    }
    assert!(last > early + 40);

    let watch = http(
        a,
        "GET",
        &format!("{pods}?watch=1&resourceVersion={early}&timeoutSeconds=5"),
        &[],
        b"",
    );
    assert_eq!(watch.status, 200);
    let lines = watch.lines();
    assert!(
        lines.is_empty(),
        "a watch the window covers must be served to its timeout: {lines:?}"
    );

    let exact = http(
        a,
        "GET",
        &format!("{pods}?resourceVersion={early}&resourceVersionMatch=Exact"),
        &[],
        b"",
    );
    assert_eq!(
        exact.status,
        410,
        "{}",
        String::from_utf8_lossy(&exact.body)
    );
    assert_eq!(exact.json()["reason"], "Expired");

    // From a retained version: served, and the next pod arrives.
    let (mut stream, status) = common::open_stream(
        a,
        &format!("{pods}?watch=1&resourceVersion={last}&timeoutSeconds=10"),
    );
    assert_eq!(status, 200);
    let second = json!({"metadata":{"name":"q"},"spec":{"containers":[{"name":"c","image":"x"}]}});
    let created = rv_of(&post(a, pods, &second).json());
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\"ADDED\"") {
        let n = std::io::Read::read(&mut stream, &mut buf).unwrap();
        assert!(n > 0, "the watch ended: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains(&format!("\"resourceVersion\":\"{created}\"")),
        "{text}"
    );
    assert!(!text.contains("ERROR"), "{text}");
}

/// Upstream sends a bookmark shortly (2 s) before a watch's timeout, so that the client
/// resumes from a recent resourceVersion: the endpoints pass the timeout to the cache.
#[test]
fn a_watch_gets_a_bookmark_just_before_its_timeout() {
    let server = Server::start(&[]);
    let a = server.addr.as_str();
    post(a, "/api/v1/namespaces", &json!({"metadata":{"name":"e2e"}}));
    let pods = "/api/v1/namespaces/e2e/pods";
    let pod = json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}});
    let rv = rv_of(&post(a, pods, &pod).json());
    let started = std::time::Instant::now();
    let watch = http(
        a,
        "GET",
        &format!("{pods}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=4"),
        &[],
        b"",
    );
    assert!(started.elapsed() >= std::time::Duration::from_secs(4));
    assert_eq!(watch.status, 200);
    let lines = watch.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["type"], "BOOKMARK", "{lines:?}");
    // The bookmark carries the cache's progress, which is the whole store's revision: at
    // least the watch's start, and more when the server's own bootstrap controllers (local
    // APIServices, flow-control defaults) write in the meantime, as upstream's would.
    let bookmarked: u64 = lines[0]["object"]["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    assert!(bookmarked >= rv, "{lines:?}");
}

/// Reads a watch's chunked body until `want` object events arrived; returns their
/// resourceVersions in order.
fn read_events(stream: &mut std::net::TcpStream, want: usize) -> Vec<u64> {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 16];
    // Raw bytes not yet de-chunked, and the de-chunked body not yet split into lines.
    let (mut raw, mut body) = (Vec::new(), Vec::new());
    let mut rvs = Vec::new();
    while rvs.len() < want {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "the watch ended after {} events", rvs.len());
        raw.extend_from_slice(&buf[..n]);
        // Chunks: a hex size line, that many bytes, CRLF.
        while let Some(nl) = raw.windows(2).position(|w| w == b"\r\n") {
            let size = std::str::from_utf8(&raw[..nl])
                .ok()
                .and_then(|h| usize::from_str_radix(h.trim(), 16).ok())
                .expect("a chunk size line");
            if raw.len() < nl + 2 + size + 2 {
                break;
            }
            body.extend_from_slice(&raw[nl + 2..nl + 2 + size]);
            raw.drain(..nl + 2 + size + 2);
        }
        while let Some(end) = body.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = body.drain(..=end).collect();
            let ev: serde_json::Value = serde_json::from_slice(&line).unwrap();
            let t = ev["type"].as_str().unwrap_or_default();
            assert!(t == "ADDED" || t == "MODIFIED", "{ev}");
            rvs.push(rv_of(&ev["object"]));
        }
    }
    rvs
}

/// A third of the watchers never read while large pods are written, so their sockets fill
/// and their watches stall. With stall-and-resume, each stalled watch is detached at once:
/// every healthy watcher receives every event, in order, and so does every stalled one once
/// it reads again (from the window). The latency figure is the loadgen's, not this test's.
#[test]
fn stalled_watchers_cost_healthy_ones_nothing_over_http() {
    const HEALTHY: usize = 10;
    const STALLED: usize = 5;
    const WRITES: usize = 300;
    let server = Server::start(&[]);
    let a = server.addr.clone();
    post(
        &a,
        "/api/v1/namespaces",
        &json!({"metadata":{"name":"e2e"}}),
    );
    let pods = "/api/v1/namespaces/e2e/pods";
    let rv = rv_of(&http(&a, "GET", pods, &[], b"").json());
    let path = format!("{pods}?watch=1&resourceVersion={rv}&timeoutSeconds=300");
    let mut healthy = Vec::new();
    for _ in 0..HEALTHY {
        let (mut s, status) = common::open_stream(&a, &path);
        assert_eq!(status, 200);
        healthy.push(std::thread::spawn(move || read_events(&mut s, WRITES)));
    }
    let stalled: Vec<_> = (0..STALLED)
        .map(|_| {
            let (s, status) = common::open_stream(&a, &path);
            assert_eq!(status, 200);
            s
        })
        .collect();
    // ~48 KB pods: 300 of them (14 MB per watch) overflow any loopback socket's buffers.
    let filler = "x".repeat(48 << 10);
    let mut written = Vec::new();
    for i in 0..WRITES {
        let pod = json!({"metadata":{"name":format!("p{i}"),"annotations":{"filler":filler}},
            "spec":{"containers":[{"name":"c","image":"x"}]}});
        written.push(rv_of(&post(&a, pods, &pod).json()));
    }
    for h in healthy {
        assert_eq!(h.join().unwrap(), written);
    }
    // The stalled watches were detached (their sockets did fill).
    let metrics = http(&a, "GET", "/metrics", &[], b"");
    let text = String::from_utf8_lossy(&metrics.body);
    let detached: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("listwatch_cacher_watchers_stalled_total{resource=\"pods\"} "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the stalled-watchers metric");
    assert!(detached >= STALLED as u64, "{detached} detached");
    for mut s in stalled {
        assert_eq!(read_events(&mut s, WRITES), written);
    }
}

/// The bytes the kernel holds in the send queue of the server's end of the connection from
/// `client_port` to `server_port` (`tx_queue` of /proc/net/tcp: unsent plus unacknowledged).
fn server_send_queue(server_port: u16, client_port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap(), 16).unwrap();
    table
        .lines()
        .skip(1)
        .find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            (port(f[1]) == server_port && port(f[2]) == client_port).then(|| {
                let tx = f[4].split(':').next().unwrap();
                u64::from_str_radix(tx, 16).unwrap()
            })
        })
        .expect("the server's end of the watch connection in /proc/net/tcp")
}

/// A watcher that never reads costs the server a bounded send queue: once its socket is full
/// the server stops writing to it (and the cacher detaches the watch), instead of letting
/// the kernel queue megabytes for it (the send buffer grows up to `tcp_wmem`'s maximum,
/// 4 MiB by default, when nothing bounds the unsent bytes). Each such megabyte is copied in
/// for nothing and is CPU taken from the healthy watchers (P13). The watcher still gets every
/// event, in order, once it reads again.
#[test]
fn a_watcher_that_never_reads_holds_a_bounded_send_queue() {
    const WRITES: usize = 120;
    let server = Server::start(&[]);
    let a = server.addr.clone();
    let server_port: u16 = a.rsplit(':').next().unwrap().parse().unwrap();
    post(
        &a,
        "/api/v1/namespaces",
        &json!({"metadata":{"name":"e2e"}}),
    );
    let pods = "/api/v1/namespaces/e2e/pods";
    let rv = rv_of(&http(&a, "GET", pods, &[], b"").json());
    let path = format!("{pods}?watch=1&resourceVersion={rv}&timeoutSeconds=300");
    let (mut stalled, status) = common::open_stream(&a, &path);
    assert_eq!(status, 200);
    let client_port = stalled.local_addr().unwrap().port();
    // 120 pods of ~48 KB: 5.8 MB for a watch that reads nothing.
    let filler = "x".repeat(48 << 10);
    let mut written = Vec::new();
    let mut most = 0;
    for i in 0..WRITES {
        let pod = json!({"metadata":{"name":format!("p{i}"),"annotations":{"filler":filler}},
            "spec":{"containers":[{"name":"c","image":"x"}]}});
        written.push(rv_of(&post(&a, pods, &pod).json()));
        most = most.max(server_send_queue(server_port, client_port));
    }
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        most = most.max(server_send_queue(server_port, client_port));
    }
    eprintln!("largest send queue of the stalled watch: {most} bytes");
    assert!(
        most <= 1 << 20,
        "the server queued {most} bytes for a watcher that reads nothing"
    );
    assert_eq!(read_events(&mut stalled, WRITES), written);
}

/// The sample of `series` (name and labels as the server encodes them) in `/metrics`.
fn metric(addr: &str, series: &str) -> f64 {
    let text = String::from_utf8(http(addr, "GET", "/metrics", &[], b"").body).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

/// Issue 24: the watch cache's history is bounded in bytes, not only in events. Large
/// ConfigMaps rewritten in a loop under `--watch-cache-window-bytes 8Mi` keep the configmaps
/// cache's accounted history (window + pinned states) within 8 MiB and one object, and the
/// squeeze is counted. A watch from a version squeezed out gets 410 Expired ("exactly once or
/// told") and a relist and watch from its version are served.
#[test]
fn large_writes_keep_the_watch_cache_history_within_its_byte_budget() {
    const BUDGET: f64 = (8 << 20) as f64;
    // Just under a ConfigMap's 1 MiB of data (upstream's `MaxSecretSize`, which
    // `ValidateConfigMap` applies too).
    const OBJECT: usize = (1 << 20) - 64;
    let server = Server::start(&["--watch-cache-window-bytes", "8Mi"]);
    let a = server.addr.as_str();
    post(a, "/api/v1/namespaces", &json!({"metadata":{"name":"wb"}}));
    let cms = "/api/v1/namespaces/wb/configmaps";
    let cm = |name: &str, i: usize| {
        let fill = char::from(b'a' + (i % 26) as u8).to_string().repeat(OBJECT);
        json!({"metadata":{"name":name},"data":{"q":fill,"i":i.to_string()}})
    };
    let mut early = 0;
    for n in 0..4 {
        let rv = rv_of(&post(a, cms, &cm(&format!("c{n}"), 0)).json());
        if n == 0 {
            early = rv;
        }
    }
    for i in 1..=40 {
        let name = format!("c{}", i % 4);
        let body = cm(&name, i).to_string();
        let resp = http(a, "PUT", &format!("{cms}/{name}"), &[JSON], body.as_bytes());
        assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    }
    // The last write's event is in the cache once a list at its version is served from it.
    let list = http(a, "GET", cms, &[], b"");
    assert_eq!(list.status, 200);
    let listed = rv_of(&list.json());

    let series = |part: &str| {
        format!(r#"listwatch_watch_cache_memory_bytes{{resource="configmaps",part="{part}"}}"#)
    };
    let history = metric(a, &series("window")) + metric(a, &series("snapshots"));
    let one = (OBJECT + 4096) as f64;
    assert!(
        history <= BUDGET + one,
        "the configmaps cache holds {history} B of history, over its budget {BUDGET} + one object"
    );
    assert!(metric(a, &series("state")) >= (4 * OBJECT) as f64);
    let squeezed =
        r#"listwatch_watch_cache_events_evicted_total{resource="configmaps",reason="budget"}"#;
    assert!(metric(a, squeezed) > 0.0, "no squeeze counted");
    assert_eq!(
        metric(
            a,
            r#"listwatch_watch_cache_window_budget_bytes{resource="configmaps"}"#
        ),
        BUDGET
    );

    // From a version the squeeze dropped: told, not served with a gap.
    let old = http(
        a,
        "GET",
        &format!("{cms}?watch=1&resourceVersion={early}&timeoutSeconds=5"),
        &[],
        b"",
    );
    let told = match old.status {
        200 => old.lines().into_iter().next().expect("an event"),
        other => panic!("a watch from {early} answered {other}"),
    };
    assert_eq!(told["type"], "ERROR", "{told}");
    assert_eq!(told["object"]["code"], 410, "{told}");
    assert_eq!(told["object"]["reason"], "Expired", "{told}");

    // The relist a client then does, and a watch from its version.
    let mut w = common::watch_from_list(a, cms, common::PATIENCE);
    let body = cm("c0", 99).to_string();
    let put = http(a, "PUT", &format!("{cms}/c0"), &[JSON], body.as_bytes());
    assert_eq!(put.status, 200);
    let ev = w.next().expect("the relisted watch's event");
    assert_eq!(ev["type"], "MODIFIED", "{}", ev["type"]);
    assert!(rv_of(&ev["object"]) > listed);
}
