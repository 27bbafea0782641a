//! A frozen etcd member (SIGSTOP: a paused VM, a stalled disk) neither resets its connections
//! nor answers on them: only the client's HTTP/2 keepalive can notice. With Kubernetes' 30 s
//! ping and 10 s timeout an HTTP watch through the server stayed open and silent for 34–50 s
//! (issue 26, red-team F2); the etcd client now pings a silent connection after 6 s and gives
//! it up 3 s later (within etcd's ping policy), so the server's watch moves to a live member
//! — delivering what was written meanwhile exactly once — or ends with an error within ~10 s.
//! Needs Debian's `etcd-server`; `cargo xtask test` provisions it and runs these ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::replicas::Replicas;
use common::{Server, WatchEvents};

/// The hang detector of these tests: the issue asks for 10 s; this leaves the noisy machine
/// 2.5 times that. Without the short keepalive the first sign of the frozen member came 40 s
/// after the last byte it sent (a 30 s ping, a 10 s timeout).
const HANG: Duration = Duration::from_secs(25);

const PATH: &str = "/api/v1/namespaces/default/configmaps";

fn cm(name: &str) -> Vec<u8> {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": "v"}
    })
    .to_string()
    .into_bytes()
}

fn create(addr: &str, name: &str) {
    let r = common::http(
        addr,
        "POST",
        PATH,
        &[("Content-Type", "application/json")],
        &cm(name),
    );
    assert_eq!(
        r.status,
        201,
        "creating {name}: {}",
        String::from_utf8_lossy(&r.body)
    );
}

/// SIGSTOP (`freeze`) or SIGCONT the etcd process `pid`.
fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Replica 0 (every member as `--etcd-servers`, talking to the first) with an HTTP watch on
/// ConfigMaps open from a fresh write — so that the connection to the first member has just
/// carried bytes — and a writer replica that only knows the members 2 and 3.
async fn setup() -> (Replicas, Server, WatchEvents) {
    let replicas = Replicas::start(1, &[]).await;
    let addr = replicas.replica(0).addr.clone();
    let endpoints = replicas.etcd.endpoints();
    let others = endpoints[1..].join(",");
    let writer = tokio::task::spawn_blocking(move || {
        Server::start(&["--storage", "etcd", "--etcd-servers", &others])
    })
    .await
    .unwrap();
    create(&addr, "before");
    let events = common::watch_from_list(&addr, PATH, HANG);
    (replicas, writer, events)
}

/// The member the server talks to freezes, the two others carry on: the server's watch
/// either moves to a live member and delivers every write made meanwhile exactly once, in
/// order, or ends with an ERROR event — and either happens before the hang detector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_watch_moves_off_a_frozen_etcd_member_or_ends() {
    let (mut replicas, writer, mut events) = setup().await;
    let pid = replicas.etcd.member(0).unwrap().pid().unwrap();
    signal(pid, "-STOP");
    let frozen = Instant::now();
    let waddr = writer.addr.clone();
    let names = ["a", "b", "c", "d"];
    let seen = tokio::task::spawn_blocking(move || {
        for n in names {
            create(&waddr, n);
        }
        let mut seen: Vec<String> = Vec::new();
        loop {
            let Some(ev) = events.next() else {
                panic!(
                    "the watch said nothing for {HANG:?} (or broke) after its etcd member \
                     froze; events so far: {seen:?}"
                );
            };
            if ev["type"] == "ERROR" {
                assert!(events.next().is_none(), "the watch went on after its ERROR");
                seen.push(format!("ERROR {}", ev["object"]["code"]));
                return seen;
            }
            assert_eq!(ev["type"], "ADDED", "{ev}");
            seen.push(
                ev["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
            if seen.last().map(String::as_str) == Some("d") {
                return seen;
            }
        }
    })
    .await
    .unwrap();
    eprintln!(
        "{:?} after the member froze the watch had: {seen:?}",
        frozen.elapsed()
    );
    // Exactly once and in order: a prefix of the writes, then (maybe) the error.
    let adds: Vec<&str> = seen
        .iter()
        .map(String::as_str)
        .filter(|s| !s.starts_with("ERROR"))
        .collect();
    assert_eq!(adds, names[..adds.len()], "{seen:?}");
    if let Some(last) = seen.last() {
        assert!(last == "d" || last.starts_with("ERROR"), "{seen:?}");
    }
    signal(pid, "-CONT");
}

/// Two of the three members freeze, the server talking to one of them: its watch ends with an
/// ERROR event before the hang detector (the dead connection found by keepalive, the stream
/// resumed on the next members in turn, the live one answering "no leader").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_watch_ends_when_a_majority_of_etcd_members_freezes() {
    let (mut replicas, _writer, mut events) = setup().await;
    let p0 = replicas.etcd.member(0).unwrap().pid().unwrap();
    let p1 = replicas.etcd.member(1).unwrap().pid().unwrap();
    signal(p0, "-STOP");
    signal(p1, "-STOP");
    let frozen = Instant::now();
    let (first, at) = tokio::task::spawn_blocking(move || {
        let first = events.next();
        let at = frozen.elapsed();
        assert!(
            first.is_none() || events.next().is_none(),
            "the watch went on after its first event"
        );
        (first, at)
    })
    .await
    .unwrap();
    let first = first.unwrap_or_else(|| {
        panic!(
            "the watch ended without a word or said nothing for {HANG:?} after two of three \
             etcd members froze ({at:?})"
        )
    });
    assert_eq!(first["type"], "ERROR", "{first}");
    eprintln!("the HTTP watch ended {at:?} after two of three etcd members froze");
    signal(p0, "-CONT");
    signal(p1, "-CONT");
}

/// etcd's ping policy (`--grpc-keepalive-min-time` 5 s, no pings without a stream) is kept:
/// over a quiet minute and more, the server's watch on a resource stays open (a GOAWAY
/// "too_many_pings" would close the connection and end it), delivers the next write, and no
/// member logs a ping complaint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_quiet_minute_earns_no_goaway_from_etcd() {
    let (mut replicas, _writer, mut events) = setup().await;
    let addr = replicas.replica(0).addr.clone();
    let quiet = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_secs(70));
        create(&addr, "after");
        events.next()
    })
    .await
    .unwrap()
    .expect("the watch ended or said nothing during a quiet minute");
    assert_eq!(quiet["type"], "ADDED", "{quiet}");
    assert_eq!(quiet["object"]["metadata"]["name"], "after", "{quiet}");
    for i in 0..3 {
        let log = replicas
            .etcd
            .member(i)
            .and_then(|m| m.dir().map(|d| d.join("etcd.log")))
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .unwrap_or_default();
        assert!(!log.is_empty(), "member {i} has no log to check");
        for bad in ["too_many_pings", "too many pings", "GOAWAY"] {
            assert!(!log.contains(bad), "member {i} logged {bad:?}");
        }
    }
}
