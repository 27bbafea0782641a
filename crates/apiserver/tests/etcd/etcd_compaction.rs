//! Compaction end to end over etcd (`--storage etcd`): the running binary's watch cache
//! learns the compactions of etcd's history, its own and those another server makes through
//! the coordination key (`compact_rev_key`), and answers 410 Expired below them to an Exact
//! list, as etcd itself would, even where the cache still holds what was asked for. A watch
//! is judged by the cache's window alone (as upstream's cacher): a watch from a version the
//! window still covers is served whatever etcd compacted, so that the version a list at
//! RV=0 hands out is always one a watch accepts. Driven over raw HTTP and with kubectl.
//! Needs Debian's `etcd-server` and kubectl; `cargo xtask test` provisions both and runs
//! these ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http};
use listwatch_etcd::testing::EtcdServer;
use listwatch_etcd::{DEFAULT_COMPACT_KEY, OBSERVE_INTERVAL, observe_compaction};
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");
const PODS: &str = "/api/v1/namespaces/e2e/pods";

fn start_on(etcd: &EtcdServer, compaction_interval: &str) -> Server {
    let endpoint = etcd.endpoint();
    Server::start(&[
        "--storage",
        "etcd",
        "--etcd-servers",
        endpoint.as_str(),
        "--etcd-compaction-interval",
        compaction_interval,
    ])
}

fn post(addr: &str, path: &str, body: &serde_json::Value) -> u64 {
    let resp = http(addr, "POST", path, &[JSON], body.to_string().as_bytes());
    assert_eq!(
        resp.status,
        201,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    resp.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn pod(name: &str) -> serde_json::Value {
    json!({"metadata":{"name":name},"spec":{"containers":[{"name":"c","image":"x"}]}})
}

/// The frames a watch of pods from `rv` sends before its one-second timeout.
fn watch_frames(addr: &str, rv: u64) -> Vec<serde_json::Value> {
    let resp = http(
        addr,
        "GET",
        &format!("{PODS}?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
        &[],
        b"",
    );
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    resp.lines()
}

fn is_expired_event(frames: &[serde_json::Value]) -> bool {
    matches!(frames, [f] if f["type"] == "ERROR"
        && f["object"]["code"] == 410
        && f["object"]["reason"] == "Expired")
}

/// An Exact list of pods at `rv`: status and body.
fn exact_list(addr: &str, rv: u64) -> (u16, serde_json::Value) {
    let resp = http(
        addr,
        "GET",
        &format!("{PODS}?resourceVersion={rv}&resourceVersionMatch=Exact"),
        &[],
        b"",
    );
    (resp.status, resp.json())
}

/// Server B never compacts (`--etcd-compaction-interval 0`); its pods cache holds the pod
/// written at `early` and the (empty) events after it, so it serves a watch from there. Then
/// server A, compacting every second, compacts etcd past `early`. B learns of it from the
/// coordination key (it reads it every 15 s): an Exact list at `early` becomes 410 Expired
/// (raw HTTP and kubectl); A, which compacted, answers the same. A watch from `early` is
/// still served by B, whose window covers it: no 410, so a client that listed at RV=0
/// (which hands out `early`, B's cache's version) can watch from what it got; A, whose
/// window starts at its list after `last`, refuses it as too old.
///
/// Before the compaction interval was a flag and servers read the key, no compaction
/// happened within the test (5 minutes) and B would never have learnt of A's. Before
/// watches were judged by the window alone, the watches from `early` ended with 410
/// "too old resource version" once the server knew of the compaction (issue 26: a list at
/// RV=0 and a watch from its version looped 410 ↔ relist on a quiet resource).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd and kubectl"]
async fn exact_lists_below_another_servers_compaction_are_expired_and_watches_the_window_covers_are_served()
 {
    common::require("kubectl");
    let etcd = EtcdServer::start().await.expect("etcd");
    let b = start_on(&etcd, "0");
    let (early, last) = tokio::task::spawn_blocking({
        let b = b.addr.clone();
        move || {
            post(
                &b,
                "/api/v1/namespaces",
                &json!({"metadata":{"name":"e2e"}}),
            );
            let early = post(&b, PODS, &pod("p"));
            // Writes to another resource move etcd's revision; B's pods cache sees none of
            // them as events, so its window still reaches back to `early`.
            let mut last = early;
            for i in 0..10 {
                let cm = json!({"metadata":{"name":format!("c{i}")}});
                last = post(&b, "/api/v1/namespaces/e2e/configmaps", &cm);
            }
            // Nothing is compacted yet: B serves both from its cache.
            let frames = watch_frames(&b, early);
            assert!(frames.is_empty(), "{frames:?}");
            let (status, body) = exact_list(&b, early);
            assert_eq!(status, 200, "{body}");
            assert_eq!(body["items"].as_array().unwrap().len(), 1, "{body}");
            (early, last)
        }
    })
    .await
    .unwrap();

    let a = start_on(&etcd, "1");
    // A's second round compacts what its first saw: at least `last`.
    let client = etcd.client();
    let deadline = Instant::now() + PATIENCE;
    let compacted = loop {
        let rev = observe_compaction(&client, DEFAULT_COMPACT_KEY)
            .await
            .unwrap();
        if rev > early {
            break rev;
        }
        assert!(Instant::now() < deadline, "A never compacted past {early}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        compacted >= last,
        "compacted {compacted}, last write {last}"
    );

    let dir = tempfile::tempdir().unwrap();
    let (a_addr, b_addr) = (a.addr.clone(), b.addr.clone());
    let b_kubectl = b.kubectl(dir.path());
    let a_kubectl = a.kubectl(dir.path());
    tokio::task::spawn_blocking(move || {
        // B reads the key within OBSERVE_INTERVAL.
        let learnt_by = Instant::now() + OBSERVE_INTERVAL + PATIENCE / 2;
        loop {
            let (status, body) = exact_list(&b_addr, early);
            if status == 410 {
                break;
            }
            assert_eq!(status, 200, "{body}");
            assert!(
                Instant::now() < learnt_by,
                "B never learnt of A's compaction at {compacted}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        for (name, addr, mut kubectl) in [("B", &b_addr, b_kubectl), ("A", &a_addr, a_kubectl)] {
            let frames = watch_frames(addr, early);
            if name == "B" {
                assert!(
                    frames.is_empty(),
                    "B: a watch from {early}, which its window covers, must be served: {frames:?}"
                );
            } else {
                // A listed after `last`: its window starts there, so `early` is too old for it.
                assert!(
                    is_expired_event(&frames),
                    "A: watch from {early}: {frames:?}"
                );
            }
            let (status, body) = exact_list(addr, early);
            assert_eq!(status, 410, "{name}: {body}");
            assert_eq!(body["reason"], "Expired", "{name}: {body}");
            // kubectl's own rendering of the 410.
            let path = format!("{PODS}?resourceVersion={early}&resourceVersionMatch=Exact");
            let stderr = common::run_err(kubectl.args(["get", "--raw", &path]));
            assert!(stderr.contains("Expired"), "{name}: {stderr}");
        }
        // With A gone nothing compacts any more: B serves what is newer than its compaction.
        drop(a);
        let newer = post(&b_addr, PODS, &pod("q"));
        let (status, body) = exact_list(&b_addr, newer);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["items"].as_array().unwrap().len(), 2, "{body}");
        let frames = watch_frames(&b_addr, newer);
        assert!(frames.is_empty(), "{frames:?}");
    })
    .await
    .unwrap();
}
