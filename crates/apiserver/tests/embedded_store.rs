//! The embedded store across restarts of the built server: a reflector relists after an
//! in-memory server restarts (no resource version is reused), and with `--data-dir` a
//! `kill -9` during concurrent writes loses no acknowledged write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http, open_stream};
use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_apiserver::builtin::POD_FIELDS;
use listwatch_client::{Config, HttpConfig, HttpListerWatcher, Store, Writer, reflector, watcher};
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn post(addr: &str, path: &str, body: &serde_json::Value) -> common::Response {
    http(addr, "POST", path, &[JSON], body.to_string().as_bytes())
}

fn create_namespace(addr: &str) {
    let r = post(
        addr,
        "/api/v1/namespaces",
        &json!({"metadata":{"name":"lw"}}),
    );
    assert!(r.status == 201 || r.status == 409, "{}", r.status);
}

fn create_pod(addr: &str, name: &str) -> u64 {
    let pod = json!({"metadata":{"name":name},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"x"}]}});
    let r = post(addr, "/api/v1/namespaces/lw/pods", &pod);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn server_pods(addr: &str) -> (BTreeMap<String, u64>, u64) {
    let list = http(addr, "GET", "/api/v1/namespaces/lw/pods", &[], b"").json();
    let items = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let m = &p["metadata"];
            (
                m["name"].as_str().unwrap().to_owned(),
                m["resourceVersion"].as_str().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    (items, rv)
}

async fn converges(store: &Store<Object>, addr: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let addr2 = addr.to_owned();
        let (want, _) = tokio::task::spawn_blocking(move || server_pods(&addr2))
            .await
            .unwrap();
        let got: BTreeMap<String, u64> = store
            .list()
            .iter()
            .map(|o| (o.name().to_owned(), o.resource_version()))
            .collect();
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the reflector never converged: {got:?} vs the server's {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Regression (issue 13): an in-memory server restarted at revision 1, so a reflector that
/// resumed its watch from its old resource version was accepted once the new history passed
/// it, and silently followed a different history: it kept the old server's pods and never saw
/// the new ones whose versions were below its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflector_relists_after_an_in_memory_server_restarts() {
    let first = Server::start(&[]);
    let addr = first.addr.clone();
    let url = first.url.clone();
    let a = addr.clone();
    tokio::task::spawn_blocking(move || create_namespace(&a))
        .await
        .unwrap();
    let lw = HttpListerWatcher::new(HttpConfig::new(url).unwrap(), "/api/v1/namespaces/lw/pods")
        .unwrap()
        .with_selectable_fields(SelectableFields::new(POD_FIELDS));
    // The reflector retries after 2 s: the new server has its history by then.
    let config = Config::default().backoff(
        Duration::from_secs(2),
        Duration::from_secs(2),
        Duration::from_secs(10),
        0.0,
    );
    let writer = Writer::default();
    let store = writer.store();
    let driver = tokio::spawn(reflector(writer, watcher(lw, config)).for_each(|_| async {}));
    tokio::time::timeout(PATIENCE, store.wait_until_synced())
        .await
        .unwrap()
        .unwrap();
    // Written while the reflector watches: its watch has events, so when the server goes
    // away it resumes from its version (as client-go does) rather than relisting.
    let a = addr.clone();
    tokio::task::spawn_blocking(move || {
        for i in 0..5 {
            create_pod(&a, &format!("old{i}"));
        }
    })
    .await
    .unwrap();
    converges(&store, &addr).await;
    drop(first);
    // The same address, a new in-memory store.
    let second = Server::start_at(&addr, &[]);
    let a = addr.clone();
    tokio::task::spawn_blocking(move || {
        create_namespace(&a);
        // More writes than the old server saw, so the new history passes the reflector's
        // old version while it tries to resume.
        for i in 0..30 {
            create_pod(&a, &format!("new{i}"));
        }
    })
    .await
    .unwrap();
    converges(&store, &second.addr).await;
    assert_eq!(store.len(), 30);
    driver.abort();
}

/// The durability test: writers over HTTP, `kill -9` while they write, restart on the same
/// `--data-dir`: every acknowledged create is there with its resource version, the revision
/// numbering continues, and a watch from a pre-crash version resumes exactly or gets 410.
#[test]
fn kill_9_during_writes_loses_no_acknowledged_write() {
    const WRITERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap().to_owned();
    let flags = ["--data-dir", data_dir.as_str()];
    let server = Server::start(&flags);
    let addr = server.addr.clone();
    create_namespace(&addr);
    let (_, start_rv) = server_pods(&addr);
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (addr, acked, stop) = (addr.clone(), Arc::clone(&acked), Arc::clone(&stop));
            std::thread::spawn(move || {
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    let name = format!("w{w}-{i}");
                    let pod = json!({"metadata":{"name":name},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"x"}]}});
                    // After the kill, connections fail: those writes were not acknowledged.
                    let res = std::panic::catch_unwind(|| {
                        post(&addr, "/api/v1/namespaces/lw/pods", &pod)
                    });
                    match res {
                        Ok(r) if r.status == 201 => {
                            let rv = r.json()["metadata"]["resourceVersion"]
                                .as_str()
                                .unwrap()
                                .parse()
                                .unwrap();
                            acked.lock().unwrap().insert(name, rv);
                        }
                        _ => {
                            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
            })
        })
        .collect();
    // Kill while the writers are busy.
    let deadline = Instant::now() + PATIENCE;
    while acked.lock().unwrap().len() < 400 {
        assert!(Instant::now() < deadline, "the writers made no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = server.pid();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    drop(server);
    let acked = acked.lock().unwrap().clone();
    let restarted = Server::start_at(&addr, &flags);
    let (pods, rv) = server_pods(&restarted.addr);
    let max_acked = acked.values().copied().max().unwrap();
    assert!(rv >= max_acked, "revision went back: {rv} < {max_acked}");
    let mut missing = Vec::new();
    for (name, want) in &acked {
        match pods.get(name) {
            Some(got) if got == want => {}
            other => missing.push((name.clone(), *want, other.copied())),
        }
    }
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged writes lost or changed: {:?}",
        missing.len(),
        acked.len(),
        &missing[..missing.len().min(10)]
    );
    // Only writes that were in flight at the kill may be there unacknowledged.
    assert!(pods.len() <= acked.len() + WRITERS, "{} pods", pods.len());
    // A watch from a pre-crash version resumes with exactly the later creates, or is 410.
    let mut later: Vec<u64> = pods
        .values()
        .copied()
        .filter(|r| *r > max_acked / 2 + start_rv / 2)
        .collect();
    later.sort_unstable();
    let from = max_acked / 2 + start_rv / 2;
    let (stream, status) = open_stream(
        &restarted.addr,
        &format!("/api/v1/namespaces/lw/pods?watch=1&resourceVersion={from}"),
    );
    assert_eq!(status, 200);
    let mut lines = BufReader::new(stream).lines();
    let mut seen = Vec::new();
    while seen.len() < later.len() {
        let line = loop {
            let l = lines.next().unwrap().unwrap();
            // Chunk-size lines of the chunked encoding.
            if l.starts_with('{') {
                break l;
            }
        };
        let ev: serde_json::Value = serde_json::from_str(&line).unwrap();
        if ev["type"] == "ERROR" {
            assert_eq!(ev["object"]["code"], 410, "{ev}");
            assert!(seen.is_empty(), "410 after events: {ev}");
            return;
        }
        assert_eq!(ev["type"], "ADDED", "{ev}");
        seen.push(
            ev["object"]["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap(),
        );
    }
    assert_eq!(
        seen, later,
        "the resumed watch replayed the history exactly"
    );
}

/// Regression (issue 13): after an in-memory server restarted (at revision 1) and its new
/// history passed an old version, a watch from that version was accepted and streamed the new
/// history as if it continued the old one. Now it is 410 Expired, with or without the cache.
#[test]
fn a_watch_from_before_a_restart_is_expired() {
    for flags in [&[][..], &["--watch-cache=false"][..]] {
        let first = Server::start(flags);
        let addr = first.addr.clone();
        create_namespace(&addr);
        let old = (0..3)
            .map(|i| create_pod(&addr, &format!("old{i}")))
            .max()
            .unwrap();
        drop(first);
        let second = Server::start_at(&addr, flags);
        create_namespace(&addr);
        let mut new = 0;
        while new <= old {
            new = create_pod(&second.addr, &format!("new{new}"));
        }
        let (stream, status) = open_stream(
            &second.addr,
            &format!("/api/v1/namespaces/lw/pods?watch=1&resourceVersion={old}"),
        );
        if status == 410 {
            continue;
        }
        assert_eq!(status, 200, "{flags:?}");
        let line = BufReader::new(stream)
            .lines()
            .map(|l| l.unwrap())
            .find(|l| l.starts_with('{'))
            .unwrap();
        let ev: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            ev["type"], "ERROR",
            "{flags:?}: the old version was accepted: {ev}"
        );
        assert_eq!(ev["object"]["code"], 410, "{ev}");
    }
}
