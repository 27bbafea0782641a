//! P14: load spreading over replicas (issue 18 item 5) — the P3 kubelet load (5k
//! `spec.nodeName` HTTP watchers, 100 pod writes/s; 50 000 pods instead of 150 000) on listwatch-apiserver over etcd, served by
//! one replica, then by two replicas over the same etcd with the watchers and the writes split
//! between them as a load balancer would (round-robin by connection). The baseline is the
//! one-replica run of the same round.
//!
//! Figures per configuration, median and range over the rounds: write→watcher latency p99
//! (a write sent to one replica and seen by a watcher on another crosses etcd), CPU of each
//! replica and of etcd during the writes, and how many watchers etcd holds (it must be one
//! per watched resource per replica, never one per client: each replica's watch cache is
//! the only etcd watcher of its resource).
//!
//! (The name P13 was taken by the slow-consumer scenario, so the issue's "P13" is P14 here.)

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::http::{Conn, Watch};
use crate::inproc::bar;
use crate::netscen::{create_pods, list_rv, percentile};
use crate::report::{Metric, Report, Spread};
use crate::sys::{self, Server};

type Result<T> = std::result::Result<T, String>;

/// Scaled down from P3's 150 000: two replicas each cache every pod, and creating them
/// through the server into etcd is most of the run on a 2-core machine.
const PODS: usize = 50_000;
const NODES: usize = 5_000;
const RATE: u64 = 100;
const SECS: u64 = 20;
const ROUNDS: usize = 3;

fn replica(etcd: &str) -> Result<Server> {
    Server::start(&[
        "--storage",
        "etcd",
        "--etcd-servers",
        etcd,
        "--max-watches",
        "20000",
        // One load generator stands for thousands of clients.
        "--max-watches-per-client",
        "0",
        "--idle-connection-timeout",
        "3600",
    ])
}

/// What one configuration measured in one round.
struct Round {
    p99_ms: f64,
    p50_ms: f64,
    /// CPU cores of each replica during the writes.
    replica_cpu: Vec<f64>,
    etcd_cpu: f64,
    etcd_watchers: f64,
    seen: usize,
}

/// etcd's `etcd_debugging_mvcc_watcher_total` (watchers it holds) from its /metrics.
async fn etcd_watchers(etcd: SocketAddr) -> Result<f64> {
    let mut c = Conn::open(etcd).await?;
    let body = c.expect(200, "GET", "/metrics", "text/plain", b"").await?;
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.starts_with("etcd_debugging_mvcc_watcher_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .ok_or_else(|| "etcd /metrics has no etcd_debugging_mvcc_watcher_total".into())
}

/// The P3 load against `replicas`: watchers and writes spread round-robin over them.
async fn run(replicas: &[&Server], etcd: SocketAddr, etcd_pid: u32) -> Result<Round> {
    let addrs: Vec<SocketAddr> = replicas.iter().map(|s| s.addr).collect();
    let n = addrs.len();
    let mut conns = Vec::with_capacity(n);
    for a in &addrs {
        conns.push(Conn::open(*a).await?);
    }
    let rv = list_rv(&mut conns[0], "/api/v1/pods").await?;
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let lat: Arc<Mutex<Vec<f64>>> = Arc::new(Mutex::new(Vec::new()));
    let pb = bar(NODES as u64, &format!("opening watches on {n} replica(s)"));
    let mut tasks = Vec::with_capacity(NODES);
    for node in 0..NODES {
        let path = format!(
            "/api/v1/pods?watch=1&resourceVersion={rv}&fieldSelector=spec.nodeName%3Dnode-{node:04}&timeoutSeconds=3600"
        );
        let mut w = Watch::open(addrs[node % n], &path).await?;
        let (sent, lat) = (Arc::clone(&sent), Arc::clone(&lat));
        tasks.push(tokio::spawn(async move {
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
        }));
        pb.inc(1);
    }
    pb.finish_and_clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let etcd_watchers = etcd_watchers(etcd).await?;
    let total = RATE * SECS;
    let pb = bar(total, "writes (100/s)");
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    let cpu0: Vec<f64> = replicas.iter().map(|s| s.cpu()).collect();
    let etcd0 = sys::cpu_seconds(etcd_pid).unwrap_or(0.0);
    let t = Instant::now();
    for j in 0..total as usize {
        tick.tick().await;
        // Another pod each round, so that every round writes fresh versions.
        let i = (j * 7_919 + 13) % PODS;
        let name = format!("pod-{i:06}");
        if let Ok(mut s) = sent.lock() {
            s.insert(name.clone(), Instant::now());
        }
        let body = format!(
            r#"{{"metadata":{{"labels":{{"bench":"w{j}-{}"}}}}}}"#,
            t.elapsed().as_nanos()
        );
        let c = &mut conns[j % n];
        c.expect(
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
    let replica_cpu = replicas
        .iter()
        .zip(&cpu0)
        .map(|(s, c0)| (s.cpu() - c0) / wall)
        .collect();
    let etcd_cpu = (sys::cpu_seconds(etcd_pid).unwrap_or(0.0) - etcd0) / wall;
    pb.finish_and_clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for t in tasks {
        t.abort();
    }
    let mut l = lat.lock().map(|l| l.clone()).unwrap_or_default();
    l.sort_by(f64::total_cmp);
    Ok(Round {
        p99_ms: percentile(&l, 0.99),
        p50_ms: percentile(&l, 0.5),
        replica_cpu,
        etcd_cpu,
        etcd_watchers,
        seen: l.len(),
    })
}

pub(crate) async fn p14() -> Result<Report> {
    let limit = sys::raise_nofile();
    let mut r = Report::new(
        "P14",
        "load spreading: the P3 kubelet load over etcd on 1 vs 2 replicas",
        "50 000 pods (P3: 150 000), 1-member etcd on tmpfs with watch progress every second; 100 writes/s for 20 s per configuration and round, 3 rounds",
    );
    // Periodic watch progress, as docs/deployment.md asks of etcd before 3.4.31 for replicas:
    // without it a replica's cache of a resource nobody writes never learns etcd's revision,
    // so a watch from a version the other replica handed out waits 3 s and fails (504 "Too
    // large resource version", then 429 while the cache relists).
    let etcd = listwatch_etcd::testing::EtcdServer::builder()
        .progress_notify_interval(Duration::from_secs(1))
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let etcd_pid = etcd.pid().ok_or("etcd has no pid")?;
    let endpoint = etcd.endpoint();
    let a = replica(&endpoint)?;
    create_pods(a.addr, PODS, NODES, 8).await?;
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        eprintln!("P14 round {round}: 1 replica");
        one.push(run(&[&a], etcd.addr(), etcd_pid).await?);
        eprintln!("P14 round {round}: 2 replicas");
        let b = replica(&endpoint)?;
        two.push(run(&[&a, &b], etcd.addr(), etcd_pid).await?);
        drop(b);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let med = |rounds: &[Round], f: &dyn Fn(&Round) -> f64| {
        Spread::of(&rounds.iter().map(f).collect::<Vec<_>>())
    };
    let figure = |name: &str, unit: &str, f: &dyn Fn(&Round) -> f64| {
        let (o, b) = (med(&two, f), med(&one, f));
        Metric::new(name, unit, o.median)
            .baseline(b.median, "1 replica, same rounds")
            .note(format!(
                "2 replicas {}; 1 replica {}",
                o.text(unit),
                b.text(unit)
            ))
    };
    r.push(figure(
        "write→watcher latency p99 (includes the PATCH round trip)",
        "ms",
        &|x| x.p99_ms,
    ));
    r.push(figure("write→watcher latency p50", "ms", &|x| x.p50_ms));
    r.push(figure(
        "CPU of the busiest replica during the writes",
        "cores",
        &|x| x.replica_cpu.iter().copied().fold(0.0, f64::max),
    ));
    r.push(figure(
        "CPU of all replicas during the writes",
        "cores",
        &|x| x.replica_cpu.iter().sum(),
    ));
    r.push(figure("etcd CPU during the writes", "cores", &|x| {
        x.etcd_cpu
    }));
    r.push(figure("watchers etcd holds", "watchers", &|x| {
        x.etcd_watchers
    }));
    let per: Vec<String> = two
        .iter()
        .map(|x| {
            x.replica_cpu
                .iter()
                .map(|c| format!("{c:.3}"))
                .collect::<Vec<_>>()
                .join(" + ")
        })
        .collect();
    r.notes.push(format!(
        "CPU per replica with 2 replicas, by round (cores): {}. Writes seen by their node's \
         watcher per round: 1 replica {:?}, 2 replicas {:?} of {}. Open-file limit: {limit}. \
         Load average at the end: {}.",
        per.join("; "),
        one.iter().map(|x| x.seen).collect::<Vec<_>>(),
        two.iter().map(|x| x.seen).collect::<Vec<_>>(),
        RATE * SECS,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    ));
    Ok(r)
}
