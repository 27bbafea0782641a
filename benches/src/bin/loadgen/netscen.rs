//! Scenarios over HTTP against listwatch-apiserver as a child process: P2, P3, P9, P10.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use listwatch_api::Object;
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};

use crate::http::{Conn, Watch};
use crate::inproc::bar;
use crate::report::{Bound, Goal, Metric, Report};
use crate::sys::{self, Server};

type Result<T> = std::result::Result<T, String>;

const JSON: &str = "application/json";

fn small_pod(i: usize) -> String {
    format!(
        r#"{{"metadata":{{"name":"p{i}","labels":{{"app":"load"}}}},"spec":{{"nodeName":"n{}","containers":[{{"name":"c","image":"x"}}]}}}}"#,
        i % 10
    )
}

async fn create_namespace(conn: &mut Conn, ns: &str) -> Result<()> {
    conn.expect(
        201,
        "POST",
        "/api/v1/namespaces",
        JSON,
        format!(r#"{{"metadata":{{"name":"{ns}"}}}}"#).as_bytes(),
    )
    .await
    .map(|_| ())
}

/// The collection's current resourceVersion (from a list of one).
async fn list_rv(conn: &mut Conn, path: &str) -> Result<String> {
    let body = conn
        .expect(200, "GET", &format!("{path}?limit=1"), JSON, b"")
        .await?;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    v["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "list without resourceVersion".into())
}

/// Counts frames on `watch` into `counter` until it ends.
/// Watches that ended early (the server closed them), with the last reason seen.
static ENDED: AtomicU64 = AtomicU64::new(0);
static LAST_END: Mutex<String> = Mutex::new(String::new());

fn spawn_counter(mut w: Watch, counter: Arc<AtomicU64>) {
    tokio::spawn(async move {
        loop {
            match w.count().await {
                Ok(n) => {
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) => {
                    ENDED.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut l) = LAST_END.lock() {
                        *l = e;
                    }
                    return;
                }
            }
        }
    });
}

async fn wait_for(counter: &AtomicU64, want: u64, limit: Duration) -> Instant {
    let end = Instant::now() + limit;
    while counter.load(Ordering::Relaxed) < want && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Instant::now()
}

/// P2: one HTTP watcher, small pods: the server's CPU per delivered event vs writing the same
/// pre-encoded frames to a loopback socket.
pub(crate) async fn p2() -> Result<Report> {
    const M: usize = 20_000;
    const ROUNDS: usize = 3;
    let mut r = Report::new("P2", "HTTP watch, 1 watcher, small pod, events/s", "");
    let server = Server::start(&["--storage", "embedded"])?;
    let mut conn = Conn::open(server.addr).await?;
    create_namespace(&mut conn, "p2").await?;
    let path = "/api/v1/namespaces/p2/pods";
    let pb = bar((2 * M * ROUNDS) as u64, "creates");
    let (mut costs, mut rates, mut cpus) = (Vec::new(), Vec::new(), Vec::new());
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut next = 0usize;
    for _ in 0..ROUNDS {
        // Phase A: the writes alone.
        let cpu0 = server.cpu();
        for _ in 0..M {
            conn.expect(201, "POST", path, JSON, small_pod(next).as_bytes())
                .await?;
            next += 1;
            pb.inc(1);
        }
        let cpu_writes = server.cpu() - cpu0;
        // Phase B: as many writes with one watcher.
        let rv = list_rv(&mut conn, path).await?;
        let mut w =
            Watch::open(server.addr, &format!("{path}?watch=1&resourceVersion={rv}")).await?;
        let seen = Arc::new(Mutex::new(Vec::with_capacity(M)));
        let got = Arc::new(AtomicU64::new(0));
        let reader = {
            let (seen, got) = (Arc::clone(&seen), Arc::clone(&got));
            tokio::spawn(async move {
                let mut batch = Vec::new();
                while w.frames(&mut batch).await.is_ok() {
                    got.fetch_add(batch.len() as u64, Ordering::Relaxed);
                    if let Ok(mut f) = seen.lock() {
                        f.append(&mut batch);
                    }
                    batch.clear();
                }
            })
        };
        let cpu0 = server.cpu();
        let t = Instant::now();
        for _ in 0..M {
            conn.expect(201, "POST", path, JSON, small_pod(next).as_bytes())
                .await?;
            next += 1;
            pb.inc(1);
        }
        let done = wait_for(&got, M as u64, Duration::from_secs(60)).await;
        let cpu_watch = server.cpu() - cpu0;
        reader.abort();
        let delivered = got.load(Ordering::Relaxed);
        if delivered < M as u64 {
            return Err(format!("the watcher got {delivered} of {M} events"));
        }
        rates.push(M as f64 / (done - t).as_secs_f64());
        costs.push((cpu_watch - cpu_writes).max(0.0) / M as f64 * 1e6);
        cpus.push((cpu_writes, cpu_watch));
        frames = seen.lock().map(|f| f.clone()).unwrap_or_default();
    }
    pb.finish_and_clear();
    let ours = median(costs.clone());
    let rate = median(rates);
    let base = bare_loopback_cost(&frames, 10, None)?;
    let paced = bare_loopback_cost(&frames, 1, Some(Duration::from_secs_f64(1.0 / rate)))?;
    r.push(
        Metric::new(
            "server CPU per delivered event (with watcher − without, same writes; median of 3)",
            "µs",
            ours,
        )
        .baseline(
            base,
            "writing the same pre-encoded frames as HTTP chunks to a loopback socket",
        )
        .goal(Goal::Ratio(Bound::AtMost(1.5))),
    );
    r.push(
        Metric::new(
            "the same, against bare writes paced at the watch's event rate",
            "µs",
            ours,
        )
        .baseline(
            paced,
            "the same frames written one at a time at the same rate (the writer sleeps in between)",
        ),
    );
    r.push(
        Metric::new("server CPU per event vs upstream Go", "µs", ours)
            .baseline(33.0, "upstream Go apiserver, 33 µs/event"),
    );
    r.push(Metric::new(
        "events/s delivered (bounded by the one writer's create rate)",
        "events/s",
        rate,
    ));
    r.notes.push(format!(
        "Per-round cost {:?} µs; server CPU for {M} creates without / with the watcher per round: {:?} s; /proc ticks are 10 ms.",
        costs.iter().map(|c| (c * 10.0).round() / 10.0).collect::<Vec<_>>(),
        cpus.iter().map(|(a, b)| ((a * 100.0).round() / 100.0, (b * 100.0).round() / 100.0)).collect::<Vec<_>>()
    ));
    Ok(r)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Writer-thread CPU per frame for writing `frames` (× `reps`) as chunks on a loopback socket,
/// back to back or one every `pace`.
fn bare_loopback_cost(frames: &[Vec<u8>], reps: usize, pace: Option<Duration>) -> Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let reader = std::thread::spawn(move || {
        let mut total = 0usize;
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                total += n;
            }
        }
        total
    });
    let encoded: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| {
            let mut c = format!("{:x}\r\n", f.len() + 1).into_bytes();
            c.extend_from_slice(f);
            c.extend_from_slice(b"\n\r\n");
            c
        })
        .collect();
    let writer = std::thread::spawn(move || -> Result<f64> {
        let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
        let _ = s.set_nodelay(true);
        let cpu0 = sys::thread_cpu_seconds().unwrap_or(0.0);
        let start = Instant::now();
        let mut k = 0u32;
        for _ in 0..reps {
            for c in &encoded {
                if let Some(p) = pace {
                    k += 1;
                    let due = start + p * k;
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                }
                s.write_all(c).map_err(|e| e.to_string())?;
            }
        }
        let cpu = sys::thread_cpu_seconds().unwrap_or(0.0) - cpu0;
        Ok(cpu / (encoded.len() * reps).max(1) as f64 * 1e6)
    });
    let cost = writer.join().map_err(|_| "writer panicked".to_owned())??;
    let _ = reader.join();
    Ok(cost)
}

/// A realistic pod body for HTTP creates (server-set fields removed).
fn pod_body(i: usize, nodes: usize) -> Result<Vec<u8>> {
    let o = listwatch_benches::pod(
        &format!("ns-{:02}", i % 10),
        &format!("pod-{i:06}"),
        &format!("node-{:04}", i % nodes),
    );
    let mut v = o.to_value().map_err(|e| e.to_string())?;
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("uid");
        m.remove("creationTimestamp");
    }
    serde_json::to_vec(&v).map_err(|e| e.to_string())
}

/// Creates `n` pods over `conns` connections.
async fn create_pods(addr: SocketAddr, n: usize, nodes: usize, conns: usize) -> Result<()> {
    let mut c = Conn::open(addr).await?;
    for ns in 0..10 {
        create_namespace(&mut c, &format!("ns-{ns:02}")).await?;
    }
    let pb = bar(n as u64, "creating pods (HTTP)");
    let mut tasks = Vec::new();
    for k in 0..conns {
        let pb = pb.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(addr).await?;
            for i in (k..n).step_by(conns) {
                let body = pod_body(i, nodes)?;
                c.expect(
                    201,
                    "POST",
                    &format!("/api/v1/namespaces/ns-{:02}/pods", i % 10),
                    JSON,
                    &body,
                )
                .await?;
                pb.inc(1);
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    pb.finish_and_clear();
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// P3: the kubelet pattern.
pub(crate) async fn p3() -> Result<Report> {
    const PODS: usize = 150_000;
    const NODES: usize = 5_000;
    const RATE: u64 = 100;
    const SECS: u64 = 20;
    let limit = sys::raise_nofile();
    let mut r = Report::new(
        "P3",
        "kubelet pattern: 5k spec.nodeName HTTP watchers, 150k pods, 100 writes/s",
        "100 writes/s for 20 s (2 000 writes)",
    );
    let server = Server::start(&[
        "--storage",
        "embedded",
        "--max-watches",
        "20000",
        // One load generator stands for thousands of clients.
        "--max-watches-per-client",
        "0",
        // Its control connection idles while the watches open.
        "--idle-connection-timeout",
        "3600",
    ])?;
    create_pods(server.addr, PODS, NODES, 4).await?;
    let mut conn = Conn::open(server.addr).await?;
    let rv = list_rv(&mut conn, "/api/v1/pods").await?;
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let lat: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::new()));
    let pb = bar(NODES as u64, "opening watches");
    for n in 0..NODES {
        let path = format!(
            "/api/v1/pods?watch=1&resourceVersion={rv}&fieldSelector=spec.nodeName%3Dnode-{n:04}&timeoutSeconds=3600"
        );
        let mut w = Watch::open(server.addr, &path).await?;
        let (sent, lat) = (Arc::clone(&sent), Arc::clone(&lat));
        tokio::spawn(async move {
            let mut frames = Vec::new();
            while w.frames(&mut frames).await.is_ok() {
                let now = Instant::now();
                for f in frames.drain(..) {
                    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&f) else {
                        continue;
                    };
                    if v["type"] != "MODIFIED" {
                        continue;
                    }
                    let name = v["object"]["metadata"]["name"].as_str().unwrap_or_default();
                    let t0 = sent.lock().ok().and_then(|s| s.get(name).copied());
                    if let (Some(t0), Ok(mut l)) = (t0, lat.lock()) {
                        l.push((now - t0).as_secs_f64() * 1e3);
                    }
                }
            }
        });
        pb.inc(1);
    }
    pb.finish_and_clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle0 = server.cpu();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let idle = (server.cpu() - idle0) / 5.0;
    let total = RATE * SECS;
    let pb = bar(total, "writes (100/s)");
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    let cpu0 = server.cpu();
    let t = Instant::now();
    for j in 0..total as usize {
        tick.tick().await;
        let i = (j * 7_919) % PODS;
        let name = format!("pod-{i:06}");
        if let Ok(mut s) = sent.lock() {
            s.insert(name.clone(), Instant::now());
        }
        let body = format!(r#"{{"metadata":{{"labels":{{"bench":"w{j}"}}}}}}"#);
        conn.expect(
            200,
            "PATCH",
            &format!("/api/v1/namespaces/ns-{:02}/pods/{name}", i % 10),
            "application/merge-patch+json",
            body.as_bytes(),
        )
        .await?;
        pb.inc(1);
    }
    let wall = t.elapsed().as_secs_f64();
    let cpu = (server.cpu() - cpu0) / wall;
    pb.finish_and_clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut l = lat.lock().map(|l| l.clone()).unwrap_or_default();
    l.sort_by(f64::total_cmp);
    r.push(Metric::new(
        "write→watcher latency p50",
        "ms",
        percentile(&l, 0.5),
    ));
    r.push(
        Metric::new("write→watcher latency p99", "ms", percentile(&l, 0.99))
            .goal(Goal::Value(Bound::AtMost(20.0))),
    );
    r.push(
        Metric::new("server CPU during the writes", "cores", cpu)
            .goal(Goal::Value(Bound::AtMost(0.2))),
    );
    r.push(Metric::new(
        "server CPU idle with 5k watches open",
        "cores",
        idle,
    ));
    r.notes.push(format!(
        "{} of {total} writes were seen by their node's watcher; the write latency includes the PATCH round trip \
         (the clock starts before the request is sent). Open-file limit: {limit}. Server RSS at the end: {} MiB.",
        l.len(),
        server.rss() >> 20
    ));
    Ok(r)
}

/// P9: memory per idle watch, in-process and over HTTP.
pub(crate) async fn p9() -> Result<Report> {
    const N: usize = 10_000;
    let limit = sys::raise_nofile();
    let mut r = Report::new(
        "P9",
        "memory per idle HTTP watch, per in-process watcher",
        "",
    );
    // In-process: heap held per Cacher watcher (its stream, drained by a task as HTTP does).
    let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    let all = Key::collection("pods", None).map_err(|e| e.to_string())?;
    let opts = ListOptions {
        resource_version: Some(0),
        ..ListOptions::recursive()
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The watchers alone (streams held, not polled): what the cacher keeps per watcher.
    let before = crate::heap();
    let mut streams = Vec::with_capacity(N);
    for _ in 0..N {
        streams.push(cacher.watch(&all, &opts).await.map_err(|e| e.to_string())?);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let bare = crate::heap().saturating_sub(before) as f64 / N as f64;
    drop(streams);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // For comparison: a bare bounded tokio channel of a 16-byte item (what each watcher's
    // queue holds: an Arc'd event and its type), sender and receiver kept.
    let before = crate::heap();
    let channels: Vec<_> = (0..N)
        .map(|_| tokio::sync::mpsc::channel::<(Arc<()>, u8)>(10))
        .collect();
    let channel = crate::heap().saturating_sub(before) as f64 / N as f64;
    drop(channels);
    let before = crate::heap();
    let mut tasks = Vec::with_capacity(N);
    for _ in 0..N {
        let mut w = cacher.watch(&all, &opts).await.map_err(|e| e.to_string())?;
        tasks.push(tokio::spawn(async move {
            while let Some(ev) = w.next().await {
                if let WatchEvent::Added(o) = ev {
                    std::hint::black_box(o.to_json_bytes());
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let inproc = crate::heap().saturating_sub(before) as f64 / N as f64;
    for t in &tasks {
        t.abort();
    }
    drop(cacher);
    r.push(
        Metric::new(
            "heap per in-process watcher (the watch stream alone)",
            "B",
            bare,
        )
        .goal(Goal::Value(Bound::AtMost(1024.0)))
        .note(format!(
            "a bare bounded tokio mpsc channel of the same 16-byte item holds {channel:.0} B"
        )),
    );
    r.push(Metric::new(
        "heap per bare tokio mpsc channel (16-byte items), for comparison",
        "B",
        channel,
    ));
    r.push(
        Metric::new(
            "heap per in-process watcher with a task draining it (the consumer's task included)",
            "B",
            inproc,
        )
        .note("the tokio task and its future belong to the consumer (the HTTP handler), not to the cacher"),
    );
    // HTTP: server RSS growth over 10k idle watches.
    let server = Server::start(&[
        "--storage",
        "embedded",
        "--max-watches",
        "20000",
        // One load generator stands for thousands of clients.
        "--max-watches-per-client",
        "0",
        // Its control connection idles while the watches open.
        "--idle-connection-timeout",
        "3600",
    ])?;
    let mut conn = Conn::open(server.addr).await?;
    create_namespace(&mut conn, "p9").await?;
    let path = "/api/v1/namespaces/p9/pods";
    let rv = list_rv(&mut conn, path).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss0 = server.rss();
    let pb = bar(N as u64, "opening watches");
    let mut watches = Vec::with_capacity(N);
    for _ in 0..N {
        watches.push(
            Watch::open(
                server.addr,
                &format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=3600"),
            )
            .await?,
        );
        pb.inc(1);
    }
    pb.finish_and_clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per = server.rss().saturating_sub(rss0) as f64 / N as f64;
    r.push(
        Metric::new("server RSS per idle HTTP watch", "KiB", per / 1024.0)
            .baseline(18.0, "etcd, 18 KB per watch stream")
            .goal(Goal::Value(Bound::AtMost(16.0))),
    );
    drop(watches);
    drop(server);
    // For comparison: a fresh server's RSS per idle keep-alive connection that made one GET:
    // what a connection costs before any watch (kept open past the default idle timeout).
    let server = Server::start(&["--storage", "embedded", "--idle-connection-timeout", "3600"])?;
    let mut conn = Conn::open(server.addr).await?;
    conn.expect(200, "GET", "/readyz", JSON, b"").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss0 = server.rss();
    let pb = bar(N as u64, "opening connections");
    let mut conns = Vec::with_capacity(N);
    for _ in 0..N {
        let mut c = Conn::open(server.addr).await?;
        c.expect(200, "GET", "/readyz", JSON, b"").await?;
        conns.push(c);
        pb.inc(1);
    }
    pb.finish_and_clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_conn = server.rss().saturating_sub(rss0) as f64 / N as f64;
    drop(conns);
    r.push(Metric::new(
        "server RSS per idle keep-alive connection (one GET, no watch), for comparison",
        "KiB",
        per_conn / 1024.0,
    ));
    r.notes.push(format!(
        "Open-file limit {limit}; {N} watches each on its own connection."
    ));
    Ok(r)
}

/// P10: 1k watchers on one prefix through listwatch over etcd vs the same watches on etcd.
pub(crate) async fn p10() -> Result<Report> {
    const WATCHERS: usize = 1_000;
    const RATE: u64 = 250;
    const SECS: u64 = 8;
    let limit = sys::raise_nofile();
    let mut r = Report::new(
        "P10",
        "1k watchers on one prefix: through listwatch over etcd vs directly on etcd",
        "250 writes/s for 8 s (2 000 writes) instead of 500/s: a 2-core machine also runs the server, etcd and the clients",
    );
    let etcd = listwatch_etcd::testing::EtcdServer::start()
        .await
        .map_err(|e| e.to_string())?;
    let etcd_pid = etcd.pid().ok_or("etcd has no pid")?;
    let etcd_cpu = || sys::cpu_seconds(etcd_pid).unwrap_or(0.0);
    let total = RATE * SECS;
    let want = total * WATCHERS as u64;
    // Through listwatch.
    let (ours, ours_detail) = {
        let endpoint = etcd.endpoint();
        let server = Server::start(&[
            "--storage",
            "etcd",
            "--etcd-servers",
            &endpoint,
            "--max-watches",
            "20000",
            "--max-watches-per-client",
            "0",
            "--idle-connection-timeout",
            "3600",
        ])?;
        let mut conn = Conn::open(server.addr).await?;
        create_namespace(&mut conn, "p10").await?;
        let path = "/api/v1/namespaces/p10/pods";
        let got = Arc::new(AtomicU64::new(0));
        for _ in 0..WATCHERS {
            // No resourceVersion: the namespace is empty, so there is no initial state to send.
            // (The version of another resource would make each watch wait 3 s for the pods
            // cache to catch up: etcd 3.4 cannot be asked for progress reliably.)
            let w =
                Watch::open(server.addr, &format!("{path}?watch=1&timeoutSeconds=3600")).await?;
            spawn_counter(w, Arc::clone(&got));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let pb = bar(total, "writes via listwatch");
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
        let (s0, e0) = (server.cpu(), etcd_cpu());
        let t0 = Instant::now();
        for i in 0..total as usize {
            tick.tick().await;
            conn.expect(201, "POST", path, JSON, small_pod(i).as_bytes())
                .await?;
            pb.inc(1);
        }
        pb.finish_and_clear();
        let wrote = t0.elapsed();
        let done = wait_for(&got, want, Duration::from_secs(120)).await;
        let (s, e) = (server.cpu() - s0, etcd_cpu() - e0);
        let n = got.load(Ordering::Relaxed);
        let ended = ENDED.load(Ordering::Relaxed);
        let why = LAST_END.lock().map(|l| l.clone()).unwrap_or_default();
        (
            n as f64 / (s + e).max(1e-9),
            format!(
                "listwatch: {n} of {want} events delivered, the writes took {wrote:.1?}, the last delivery came {:.1?} \
                 after the first write; {ended} watches ended early (last: {why:?}); CPU server {s:.2} s + etcd {e:.2} s",
                done - t0
            ),
        )
    };
    // Directly on etcd: the same number of watches on one prefix, opened by the etcd adapter.
    let (base, base_detail) = {
        let store = Arc::new(listwatch_etcd::EtcdStore::new(
            etcd.client(),
            "/direct",
            listwatch_api::SelectableFields::none(),
        ));
        let key = Key::collection("pods", Some("p10")).map_err(|e| e.to_string())?;
        let rv = store
            .current_resource_version()
            .await
            .map_err(|e| e.to_string())?;
        let got = Arc::new(AtomicU64::new(0));
        let opts = ListOptions {
            resource_version: Some(rv),
            ..ListOptions::recursive()
        };
        for _ in 0..WATCHERS {
            let mut w = store.watch(&key, &opts).await.map_err(|e| e.to_string())?;
            let got = Arc::clone(&got);
            tokio::spawn(async move {
                while let Some(ev) = w.next().await {
                    if let WatchEvent::Added(_) = ev {
                        got.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let fields = listwatch_api::SelectableFields::none();
        let pb = bar(total, "writes on etcd");
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
        let e0 = etcd_cpu();
        for i in 0..total as usize {
            tick.tick().await;
            let mut v: serde_json::Value =
                serde_json::from_str(&small_pod(i)).map_err(|e| e.to_string())?;
            v["apiVersion"] = "v1".into();
            v["kind"] = "Pod".into();
            v["metadata"]["namespace"] = "p10".into();
            let o = Object::from_value(v, &fields).map_err(|e| e.to_string())?;
            let k = Key::object("pods", Some("p10"), o.name()).map_err(|e| e.to_string())?;
            store.create(&k, o, None).await.map_err(|e| e.to_string())?;
            pb.inc(1);
        }
        pb.finish_and_clear();
        wait_for(&got, want, Duration::from_secs(120)).await;
        let e = etcd_cpu() - e0;
        let n = got.load(Ordering::Relaxed);
        (
            n as f64 / e.max(1e-9),
            format!("direct: {n} of {want} events delivered; CPU etcd {e:.2} s"),
        )
    };
    r.push(
        Metric::new(
            "delivered events per CPU-second (server + etcd)",
            "events/CPU-s",
            ours,
        )
        .baseline(
            base,
            "the same 1k watches opened directly on etcd (etcd CPU)",
        )
        .goal(Goal::Ratio(Bound::AtLeast(5.0))),
    );
    r.notes.push(format!(
        "{ours_detail}. {base_detail}. Open-file limit {limit}."
    ));
    Ok(r)
}
