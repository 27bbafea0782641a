//! A bounded soak of the binary on etcd started with its **default flags** (no
//! `--experimental-watch-progress-notify-interval`) and a 2 s `--etcd-compaction-interval`,
//! which compresses minutes of history into seconds (issue 26): a quiet resource (ConfigMaps,
//! written once) and a busy one (Secrets, written every 100 ms); a watcher of each that only
//! watches for the whole run; informers that list at RV=0 and consistently, then watch from
//! what they got, over and over; kubectl-style paginated walks of 10 objects by 2; and the
//! server's own garbage collector and RBAC informers all along. Asserted: no relist of any
//! cache, no 429/410/504 answered to anyone (the server's `apiserver_request_total`) and no
//! ERROR event on any watch, every write delivered once and in order to the watcher of its
//! resource, every walk complete, and no read that waited for a cache (the server's
//! `listwatch_cacher_*` metrics). Counts, never wall time.
//!
//! It runs 120 s by default (`cargo xtask test` includes it); `LISTWATCH_SOAK_SECS=660`
//! runs the 11 minutes of the issue, and `LISTWATCH_ETCD_PROGRESS_NOTIFY_MS=1000` the same on
//! etcd with the progress interval:
//!
//! ```text
//! LISTWATCH_ETCD_BIN=/usr/bin/etcd LISTWATCH_SOAK_SECS=660 cargo test -p listwatch-apiserver \
//!   --test etcd_soak -- --include-ignored --nocapture
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;

use std::time::{Duration, Instant};

use common::metrics::{plain_metrics, sum_of};
use common::{Server, WatchEvents, http, open_stream};
use listwatch_etcd::testing::EtcdServer;
use serde_json::{Value, json};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const NS: &str = "/api/v1/namespaces/soak";

fn soak_secs() -> u64 {
    std::env::var("LISTWATCH_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120)
}

/// Opens the chunked watch at `path`, each read bounded by `idle`.
fn open_watch(addr: &str, path: &str, idle: Duration) -> WatchEvents {
    let (stream, status) = open_stream(addr, path);
    assert_eq!(status, 200, "{path}");
    stream.set_read_timeout(Some(idle)).unwrap();
    WatchEvents::new(stream)
}

fn rv(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

fn post(addr: &str, path: &str, body: &Value) -> u64 {
    let resp = http(addr, "POST", path, &[JSON], body.to_string().as_bytes());
    assert_eq!(
        resp.status,
        201,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    rv(&resp.json()["metadata"]["resourceVersion"])
}

/// Deletes `path`. Upstream answers a DELETE of a secret with a `Success` Status, which
/// carries no resource version: the deletion's version is the one its watch event shows.
fn delete(addr: &str, path: &str) {
    let resp = http(addr, "DELETE", path, &[], b"");
    assert_eq!(
        resp.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    assert_eq!(resp.json()["status"], "Success", "{path}");
}

/// A deletion's acknowledged version is unknown (see [`delete`]).
const UNKNOWN_RV: u64 = 0;

/// A list: its items' names and its resource version.
fn list(addr: &str, path: &str) -> (Vec<String>, u64, Option<String>) {
    let resp = http(addr, "GET", path, &[], b"");
    assert_eq!(
        resp.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    let body = resp.json();
    let names = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    let token = body["metadata"]["continue"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    (names, rv(&body["metadata"]["resourceVersion"]), token)
}

fn secret(name: &str) -> Value {
    json!({"metadata":{"name":name},"stringData":{"k":"v"}})
}

/// (type, name, resource version) of an object event; panics on ERROR.
fn summary(ev: &Value, what: &str) -> Option<(String, String, u64)> {
    let t = ev["type"].as_str().unwrap();
    assert_ne!(t, "ERROR", "{what}: {ev}");
    (t != "BOOKMARK").then(|| {
        (
            t.to_owned(),
            ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
            rv(&ev["object"]["metadata"]["resourceVersion"]),
        )
    })
}

/// Watches `path` until an event for `fence` arrives; every object event before it.
fn watch_until(mut events: WatchEvents, fence: &str, what: &str) -> Vec<(String, String, u64)> {
    let mut seen = Vec::new();
    while let Some(ev) = events.next() {
        if let Some(s) = summary(&ev, what) {
            if s.1 == fence {
                return seen;
            }
            seen.push(s);
        }
    }
    panic!(
        "{what}: the watch ended before the fence; saw {} events",
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn default_etcd_flags_serve_every_client_without_relists_or_errors() {
    let secs = soak_secs();
    // etcd exactly as it starts without flags (no periodic progress notification), unless
    // LISTWATCH_ETCD_PROGRESS_NOTIFY_MS asks for the progress interval.
    let mut builder = EtcdServer::builder();
    if let Some(every) = common::replicas::progress_notify_interval() {
        builder = builder.progress_notify_interval(every);
    }
    let etcd = builder.start().await.expect("etcd");
    let endpoint = etcd.endpoint();
    let server = Server::start(&[
        "--storage",
        "etcd",
        "--etcd-servers",
        endpoint.as_str(),
        "--etcd-compaction-interval",
        "2",
    ]);
    let addr = server.addr.clone();
    tokio::task::spawn_blocking(move || soak(&addr, secs))
        .await
        .unwrap();
    drop(server);
}

fn soak(addr: &str, secs: u64) {
    let idle = Duration::from_secs(secs + 120);
    post(
        addr,
        "/api/v1/namespaces",
        &json!({"metadata":{"name":"soak"}}),
    );
    let cms = format!("{NS}/configmaps");
    let busy_path = format!("{NS}/secrets");
    let walk: Vec<String> = (0..10).map(|i| format!("walk-{i:02}")).collect();
    for name in &walk {
        post(addr, &cms, &json!({"metadata":{"name":name}}));
    }
    // Watchers that only watch: the quiet resource from a list at RV=0 (the cache's
    // version), the busy one from a consistent list (etcd's).
    let (_, quiet_rv, _) = list(addr, &format!("{cms}?resourceVersion=0"));
    let quiet = open_watch(
        addr,
        &format!(
            "{cms}?watch=1&resourceVersion={quiet_rv}&allowWatchBookmarks=true&timeoutSeconds={}",
            secs + 600
        ),
        idle,
    );
    let (_, busy_rv, _) = list(addr, &busy_path);
    let busy = open_watch(
        addr,
        &format!(
            "{busy_path}?watch=1&resourceVersion={busy_rv}&allowWatchBookmarks=true&timeoutSeconds={}",
            secs + 600
        ),
        idle,
    );
    let quiet = std::thread::spawn(move || watch_until(quiet, "fence", "quiet watcher"));
    let busy = std::thread::spawn(move || watch_until(busy, "fence", "busy watcher"));

    let deadline = Instant::now() + Duration::from_secs(secs);
    let writer = {
        let (addr, busy_path) = (addr.to_owned(), busy_path.clone());
        std::thread::spawn(move || {
            let mut acked = Vec::new();
            let mut i = 0u64;
            while Instant::now() < deadline {
                let name = format!("b{i}");
                acked.push((
                    "ADDED".to_owned(),
                    name.clone(),
                    post(&addr, &busy_path, &secret(&name)),
                ));
                if i >= 2 && i.is_multiple_of(3) {
                    let old = format!("b{}", i - 2);
                    delete(&addr, &format!("{busy_path}/{old}"));
                    acked.push(("DELETED".to_owned(), old, UNKNOWN_RV));
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            acked
        })
    };
    // Informers: list at RV=0 or consistently, then watch from what the list said, a few
    // seconds each, over and over, on both resources.
    let informer = {
        let (addr, cms, busy_path) = (addr.to_owned(), cms.clone(), busy_path.clone());
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while Instant::now() < deadline {
                for base in [&cms, &busy_path] {
                    for at in ["?resourceVersion=0", ""] {
                        let (_, from, _) = list(&addr, &format!("{base}{at}"));
                        let mut w = open_watch(
                            &addr,
                            &format!(
                                "{base}?watch=1&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=2"
                            ),
                            Duration::from_secs(60),
                        );
                        let mut last = from;
                        while let Some(ev) = w.next() {
                            if let Some((_, _, rv)) = summary(&ev, "informer watch") {
                                assert!(rv > last, "informer: {rv} after {last}: {ev}");
                                last = rv;
                            }
                        }
                    }
                }
                rounds += 1;
            }
            rounds
        })
    };
    // kubectl --chunk-size=2 over the 10 quiet objects: a consistent first page, then
    // continue tokens.
    let walker = {
        let (addr, cms, walk) = (addr.to_owned(), cms.clone(), walk.clone());
        std::thread::spawn(move || {
            let mut walks = 0u64;
            while Instant::now() < deadline {
                let mut names = Vec::new();
                let mut path = format!("{cms}?limit=2");
                loop {
                    let (page, _, token) = list(&addr, &path);
                    names.extend(page);
                    match token {
                        Some(t) => path = format!("{cms}?limit=2&continue={t}"),
                        None => break,
                    }
                }
                assert_eq!(names, walk, "walk {walks}");
                walks += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            walks
        })
    };
    let acked = writer.join().unwrap();
    let rounds = informer.join().unwrap();
    let walks = walker.join().unwrap();
    post(addr, &busy_path, &secret("fence"));
    post(addr, &cms, &json!({"metadata":{"name":"fence"}}));
    let busy = busy.join().unwrap();
    let quiet = quiet.join().unwrap();

    let metrics = plain_metrics(addr);
    let counter = |name: &str| sum_of(&metrics, &format!("listwatch_cacher_{name}_total"));
    let refused: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total"))
        .filter(|l| {
            ["429", "410", "504"]
                .iter()
                .any(|c| l.contains(&format!("code=\"{c}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b);
    eprintln!(
        "soak {secs} s: {} writes, {rounds} informer rounds (8 lists + watches each), {walks} walks of 5 pages; \
         relists {}, storage watch failures {}, freshness waits {} (timed out {}), \
         continues from etcd {}, exact reads from etcd {}, consistent lists fallen back {}, 429/410/504 answered {refused}",
        acked.len(),
        counter("relists"),
        counter("storage_watch_failures"),
        counter("freshness_waits"),
        counter("freshness_timeouts"),
        counter("continues_from_backend"),
        counter("exact_reads_from_backend"),
        counter("consistent_reads_fallen_back"),
    );
    assert_eq!(
        busy.len(),
        acked.len(),
        "busy watcher: events vs acknowledged writes"
    );
    // Every write once, in order; a deletion's version is the watch's to tell, so it is
    // compared by type and name only, and checked to be between its neighbours below.
    let seen: Vec<_> = busy
        .iter()
        .map(|(t, n, rv)| {
            (
                t.clone(),
                n.clone(),
                if t == "DELETED" { UNKNOWN_RV } else { *rv },
            )
        })
        .collect();
    assert_eq!(seen, acked, "busy watcher: every write once, in order");
    assert!(quiet.is_empty(), "quiet watcher: {quiet:?}");
    assert!(
        busy.windows(2).all(|w| w[0].2 < w[1].2),
        "busy watcher: versions strictly increase"
    );
    let distinct: BTreeSet<u64> = busy.iter().map(|e| e.2).collect();
    assert_eq!(distinct.len(), busy.len());

    assert!(walks > 0 && rounds > 0);
    assert_eq!(counter("relists"), 0.0, "a cache relisted");
    assert_eq!(counter("storage_watch_failures"), 0.0);
    assert_eq!(counter("resyncs"), 0.0);
    assert_eq!(
        counter("freshness_waits"),
        0.0,
        "a read or watch waited for a cache"
    );
    assert_eq!(refused, 0.0, "429/410/504 answered");
}
