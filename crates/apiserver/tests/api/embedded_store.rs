//! The embedded store across restarts of the built server: a reflector relists after an
//! in-memory server restarts (no resource version is reused), and with `--data-dir` a
//! `kill -9` during concurrent writes loses no acknowledged write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{PATIENCE, Server, WatchEvents, http, open_stream};
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

/// A TCP relay on a fixed loopback port that is either closed (nothing listens: connections
/// are refused, as while a server restarts) or open towards one server.
struct Relay {
    port: u16,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Relay {
    async fn new() -> Self {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        Self { port, task: None }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Listens again, relaying every connection to `target`.
    async fn open(&mut self, target: &str) {
        self.close();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap();
        let target = target.to_owned();
        self.task = Some(tokio::spawn(async move {
            // Dropped with this task: closing the relay cuts every relayed connection.
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((mut down, _)) = listener.accept().await else {
                    return;
                };
                let target = target.clone();
                conns.spawn(async move {
                    if let Ok(mut up) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
            }
        }));
    }

    /// Stops listening (connections are refused) and cuts the relayed connections.
    fn close(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Regression (issue 13): an in-memory server restarted at revision 1, so a reflector that
/// resumed its watch from its old resource version was accepted once the new history passed
/// that version, and silently followed a different history: it kept the old server's pods and
/// never saw the new ones written at revisions it had already seen.
///
/// The reflector reaches the servers through a relay that refuses connections while the server
/// restarts, so it re-watches from its version (client-go does not relist after a refused
/// connection) and only reaches the new server once that server's writes have passed the
/// reflector's version. With reused revisions the resumed watch is accepted and the store ends
/// wrong; with revisions that are never reused it is 410 Expired, and the relist makes the
/// store equal to the new server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflector_relists_after_an_in_memory_server_restarts() {
    let first = Server::start(&[]);
    let a = first.addr.clone();
    tokio::task::spawn_blocking(move || create_namespace(&a))
        .await
        .unwrap();
    let mut relay = Relay::new().await;
    relay.open(&first.addr).await;
    let lw = HttpListerWatcher::new(
        HttpConfig::new(relay.url()).unwrap(),
        "/api/v1/namespaces/lw/pods",
    )
    .unwrap()
    .with_selectable_fields(SelectableFields::new(POD_FIELDS));
    let config = Config::default().backoff(
        Duration::from_millis(200),
        Duration::from_millis(200),
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
    // Written while the reflector watches: its watch has events, so when the connection
    // drops it resumes from its version (as client-go does) rather than relisting.
    let a = first.addr.clone();
    tokio::task::spawn_blocking(move || {
        for i in 0..5 {
            create_pod(&a, &format!("old{i}"));
        }
    })
    .await
    .unwrap();
    converges(&store, &first.addr).await;
    let a = first.addr.clone();
    let (_, seen) = tokio::task::spawn_blocking(move || server_pods(&a))
        .await
        .unwrap();
    // The server goes away: the reflector's watch is cut and its reconnects are refused.
    relay.close();
    drop(first);
    // A new in-memory server, written to until its history is past everything the reflector
    // saw (with reused revisions, these writes land on revision numbers it already saw).
    let second = Server::start(&[]);
    let a = second.addr.clone();
    let new = tokio::task::spawn_blocking(move || {
        create_namespace(&a);
        let mut revs = Vec::new();
        while revs.last().is_none_or(|r| *r <= seen) {
            revs.push(create_pod(&a, &format!("new{}", revs.len())));
        }
        revs.len()
    })
    .await
    .unwrap();
    relay.open(&second.addr).await;
    converges(&store, &second.addr).await;
    assert_eq!(store.len(), new);
    assert!(
        store.list().iter().all(|o| o.name().starts_with("new")),
        "the reflector kept the old server's pods"
    );
    driver.abort();
    relay.close();
}

/// Watches pods of `lw` from `rv`: `Ok(events)` when the watch is accepted (read lazily),
/// `Err(())` when it is refused as expired (status 410, or an ERROR event with code 410).
fn watch_from(addr: &str, rv: u64) -> Result<WatchEvents, ()> {
    watch(
        addr,
        &format!("/api/v1/namespaces/lw/pods?watch=1&resourceVersion={rv}"),
    )
}

/// Opens the watch at `path`: `Err(())` when it is refused with 410.
fn watch(addr: &str, path: &str) -> Result<WatchEvents, ()> {
    let (stream, status) = open_stream(addr, path);
    if status == 410 {
        return Err(());
    }
    assert_eq!(status, 200);
    Ok(WatchEvents::new(stream))
}

/// Asserts that the watch at `path` is expired: 410, or an ERROR event with code 410 first.
fn assert_expired(addr: &str, path: &str, what: &str) {
    if let Ok(mut events) = watch(addr, path) {
        let ev = events
            .next()
            .expect("the expired watch ended without an error");
        assert_eq!(
            ev["type"], "ERROR",
            "{what}: an expired version was accepted: {ev}"
        );
        assert_eq!(ev["object"]["code"], 410, "{what}: {ev}");
    }
}

fn rv_of(ev: &serde_json::Value) -> u64 {
    ev["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// The durability test: writers over HTTP, `kill -9` while they write, restart on the same
/// `--data-dir`: every acknowledged create is there with its resource version, and so is
/// every event a watcher saw before the crash (nothing is visible before it is durable); the
/// revision numbering continues; that watcher resumes from the last version it saw and gets
/// exactly the rest of the history; and once a later restart with a short history has
/// compacted past that version, resuming from it is 410 Expired.
#[test]
fn kill_9_during_writes_loses_no_acknowledged_write() {
    const WRITERS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    // A directory the server creates (0700): it refuses one others may read.
    let data_dir = dir.path().join("data").to_str().unwrap().to_owned();
    let flags = ["--data-dir", data_dir.as_str()];
    let server = Server::start(&flags);
    let addr = server.addr.clone();
    create_namespace(&addr);
    let (_, start_rv) = server_pods(&addr);
    // A watcher from before the writes until the kill cuts it.
    let mut pre_crash = watch_from(&addr, start_rv).unwrap_or_else(|()| panic!("410"));
    let watcher = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Some(ev) = pre_crash.next() {
            assert_eq!(ev["type"], "ADDED", "{ev}");
            let name = ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned();
            seen.push((name, rv_of(&ev)));
        }
        seen
    });
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
    let seen = watcher.join().unwrap();
    drop(server);
    let acked = acked.lock().unwrap().clone();
    // Served by the store itself: a watch cache starts at the revision of its first list
    // after a restart, and answers older versions with 410 (as upstream's does), which would
    // not show whether the store kept its history.
    let uncached: Vec<&str> = flags
        .iter()
        .copied()
        .chain(["--watch-cache=false"])
        .collect();
    let restarted = Server::start_at(&addr, &uncached);
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
    // What the watcher saw before the crash is all still there, at the same versions.
    assert!(!seen.is_empty(), "the watcher saw nothing before the kill");
    for (name, rv) in &seen {
        assert_eq!(
            pods.get(name),
            Some(rv),
            "{name} was seen at {rv} before the crash"
        );
    }
    // It resumes from the last version it saw, with exactly the later creates.
    let last_seen = seen.iter().map(|(_, rv)| *rv).max().unwrap();
    let mut later: Vec<u64> = pods.values().copied().filter(|r| *r > last_seen).collect();
    later.sort_unstable();
    let mut resumed = watch_from(&restarted.addr, last_seen)
        .unwrap_or_else(|()| panic!("a retained version was refused as expired"));
    let mut got = Vec::new();
    while got.len() < later.len() {
        let ev = resumed.next().expect("the resumed watch ended");
        assert_eq!(ev["type"], "ADDED", "{ev}");
        got.push(rv_of(&ev));
    }
    assert_eq!(got, later, "the resumed watch replayed the history exactly");
    drop(resumed);
    // A restart with a short history (20 revisions, looked at every 20 writes): 45 writes
    // compact past at least `after0..after19`, written after `last_seen`, so resuming from
    // it would miss them: 410 Expired, never a silent gap.
    assert!(restarted.terminate(), "the server did not stop cleanly");
    let short: Vec<&str> = flags
        .iter()
        .copied()
        .chain(common::SHORT_HISTORY.iter().copied())
        .collect();
    let third = Server::start_at(&addr, &short);
    for i in 0..45 {
        create_pod(&third.addr, &format!("after{i}"));
    }
    assert_expired(
        &third.addr,
        &format!("/api/v1/namespaces/lw/pods?watch=1&resourceVersion={last_seen}"),
        "after compaction",
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
        assert_expired(
            &second.addr,
            &format!("/api/v1/namespaces/lw/pods?watch=1&resourceVersion={old}"),
            &format!("{flags:?}"),
        );
    }
}

/// The value of an unlabelled metric in a Prometheus text exposition.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(' ')?;
            (n == name).then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
}

/// The history byte bound (issue 13): with the revision and time minimums far above what the
/// test writes, only `--embedded-retain-bytes` can compact; rewriting a large configmap past
/// it forces compaction, the metrics show the history bytes back under the bound, and the
/// oldest versions are gone (410), as a watch or exact list of them tells.
#[test]
fn history_over_the_byte_bound_forces_compaction() {
    const BOUND: u64 = 300_000;
    let bound = BOUND.to_string();
    let server = Server::start(&[
        "--watch-cache=false",
        "--embedded-retain-revisions",
        "1000000",
        "--embedded-retain-window",
        "3600",
        "--embedded-retain-bytes",
        &bound,
    ]);
    let addr = server.addr.clone();
    create_namespace(&addr);
    let path = "/api/v1/namespaces/lw/configmaps";
    let big = |i: usize| format!("{i}-{}", "x".repeat(20_000));
    let r = post(
        &addr,
        path,
        &json!({"metadata":{"name":"big"},"data":{"v":big(0)}}),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let first: u64 = r.json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let metrics = || String::from_utf8(http(&addr, "GET", "/metrics", &[], b"").body).unwrap();
    let before = metrics();
    assert_eq!(
        metric(&before, "listwatch_memstore_retain_bytes"),
        BOUND as f64
    );
    assert_eq!(
        metric(&before, "listwatch_memstore_compactions_by_bytes_total"),
        0.0
    );
    // Each rewrite supersedes ~20 KB: 40 of them are ~800 KB of history against a 300 KB bound.
    let mut rv = first;
    let mut peak = 0.0f64;
    for i in 1..=40 {
        let body = json!({"metadata":{"name":"big","resourceVersion":rv.to_string()},
            "data":{"v":big(i)}});
        let r = http(
            &addr,
            "PUT",
            &format!("{path}/big"),
            &[JSON],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        rv = r.json()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let m = metrics();
        let bytes = metric(&m, "listwatch_memstore_history_bytes");
        assert!(
            bytes <= BOUND as f64,
            "history of {bytes} bytes after write {i}, over the {BOUND}-byte bound"
        );
        peak = peak.max(bytes);
    }
    let after = metrics();
    assert!(
        metric(&after, "listwatch_memstore_compactions_by_bytes_total") >= 1.0,
        "no compaction was forced by the byte bound:\n{after}"
    );
    // The history was really there to bound: it grew to a good part of the bound.
    assert!(peak >= BOUND as f64 / 2.0, "history peaked at {peak} bytes");
    let compacted = metric(&after, "listwatch_memstore_compacted_revision") as u64;
    assert!(
        compacted > first,
        "compacted at {compacted}, not past {first}"
    );
    // The first version is gone: an exact list of it and a watch from it are 410 Expired.
    let r = http(
        &addr,
        "GET",
        &format!("{path}?resourceVersion={first}&resourceVersionMatch=Exact"),
        &[],
        b"",
    );
    assert_eq!(r.status, 410, "{}", String::from_utf8_lossy(&r.body));
    assert_expired(
        &addr,
        &format!("{path}?watch=1&resourceVersion={first}"),
        "the oldest version",
    );
    // The newest version is still readable.
    let r = http(&addr, "GET", &format!("{path}/big"), &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["data"]["v"], big(40));
}
