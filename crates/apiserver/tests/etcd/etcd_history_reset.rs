//! etcd wiped (or restored from an older snapshot) under a running server: its revision goes
//! back. The server's storage watches resumed after the last revision they had delivered and
//! etcd simply waited, so the caches kept the dead history forever — the old objects in every
//! RV=0 list, no new write ever in the cache (issue 26, red-team F1). The etcd watch now ends
//! with 410 when a stream's header is below what it delivered and a linearizable read
//! confirms the cluster went back; the cacher relists (accepting the lower version) and ends
//! its watchers with an error. Needs Debian's `etcd-server`; `cargo xtask test` provisions it
//! and runs these ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::Server;
use listwatch_etcd::testing::EtcdServer;

const PATH: &str = "/api/v1/namespaces/default/configmaps";

/// Deadline for what must happen after the wipe (only to avoid a hang).
const DEADLINE: Duration = Duration::from_secs(60);

fn post(addr: &str, path: &str, body: serde_json::Value) -> u16 {
    common::http(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
    .status
}

fn cm(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"k": "v"}
    })
}

fn names_at_rv0(addr: &str) -> Option<Vec<String>> {
    let r = common::http(addr, "GET", &format!("{PATH}?resourceVersion=0"), &[], b"");
    if r.status != 200 {
        return None;
    }
    let mut names: Vec<String> = r.json()["items"]
        .as_array()?
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    Some(names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_wiped_etcd_under_a_running_server_is_relisted_and_watchers_are_told() {
    let mut etcd = EtcdServer::start().await.unwrap();
    let endpoint = etcd.endpoint();
    let server = tokio::task::spawn_blocking(move || {
        Server::start(&["--storage", "etcd", "--etcd-servers", &endpoint])
    })
    .await
    .unwrap();
    let addr = server.addr.clone();
    // Enough history that the wiped etcd's revisions stay below it for the whole test.
    for i in 0..30 {
        assert_eq!(post(&addr, PATH, cm(&format!("old-{i}"))), 201);
    }
    let mut events = common::watch_from_list(&addr, PATH, DEADLINE);

    // The wipe: etcd killed, its data removed, started again on the same ports.
    etcd.kill();
    let data = etcd.dir().unwrap().join("data");
    std::fs::remove_dir_all(&data).unwrap();
    etcd.restart().await.unwrap();
    let wiped = Instant::now();

    // The watch is told (an ERROR, then the end), not left waiting for the old history.
    let (first, end) = tokio::task::spawn_blocking(move || {
        let first = events.next();
        (first, events.next())
    })
    .await
    .unwrap();
    let first = first.unwrap_or_else(|| {
        panic!("the watch said nothing for {DEADLINE:?} after etcd was wiped under it")
    });
    assert_eq!(first["type"], "ERROR", "{first}");
    assert!(end.is_none(), "the watch went on after its ERROR: {end:?}");

    // A new write lands in the cache; the old objects are gone from it.
    let addr2 = addr.clone();
    let names = tokio::task::spawn_blocking(move || {
        let until = Instant::now() + DEADLINE;
        let mut last = None;
        while Instant::now() < until {
            // The wipe took the namespace too (the system-namespaces loop brings it back
            // within a minute; the test does not wait for it).
            let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "default"}});
            let _ = post(&addr2, "/api/v1/namespaces", ns);
            let created = post(&addr2, PATH, cm("new"));
            if created == 201 || created == 409 {
                last = names_at_rv0(&addr2);
                if last.as_deref() == Some(&["new".to_owned()][..]) {
                    return last;
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        last
    })
    .await
    .unwrap();
    assert_eq!(
        names.as_deref(),
        Some(&["new".to_owned()][..]),
        "the RV=0 list {DEADLINE:?} after the wipe"
    );
    eprintln!(
        "the cache served the new history {:?} after the wipe",
        wiped.elapsed()
    );
}

/// The built-in namespaces come back after a wipe: the system-namespaces loop (here every
/// 10 s, so that the test sees the namespace gone first) re-creates what went, as upstream's system-namespaces controller does every minute.
/// Without it `kube-public` stayed 404 for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn the_system_namespaces_come_back_after_a_wipe() {
    let mut etcd = EtcdServer::start().await.unwrap();
    let endpoint = etcd.endpoint();
    let server = tokio::task::spawn_blocking(move || {
        Server::start(&[
            "--storage",
            "etcd",
            "--etcd-servers",
            &endpoint,
            "--system-namespaces-interval",
            "10s",
        ])
    })
    .await
    .unwrap();
    let addr = server.addr.clone();
    let ns = "/api/v1/namespaces/kube-public";
    assert_eq!(common::http(&addr, "GET", ns, &[], b"").status, 200);
    etcd.kill();
    std::fs::remove_dir_all(etcd.dir().unwrap().join("data")).unwrap();
    etcd.restart().await.unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let until = Instant::now() + DEADLINE;
        let mut last = 0;
        // First gone (the wipe seen), then back.
        let mut gone = false;
        while Instant::now() < until {
            last = common::http(&addr, "GET", ns, &[], b"").status;
            gone |= last == 404;
            if gone && last == 200 {
                return (gone, last);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        (gone, last)
    })
    .await
    .unwrap();
    assert_eq!(
        status.1, 200,
        "kube-public {DEADLINE:?} after the wipe (seen gone: {})",
        status.0
    );
}
