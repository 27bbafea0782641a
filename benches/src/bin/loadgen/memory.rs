//! Scenarios users ask about (issue 31 item 4) that are judged on the server's memory:
//!
//! - **P15 — whole-server RSS per object after sustained updates**: N pods created over HTTP,
//!   then each merge-PATCHed K times; the server's RSS (from /proc) minus the same server's
//!   RSS when it was ready and empty, divided by N, beside the bytes of JSON the pods are
//!   stored as (each item of a paged list, serialised compactly). Goal: ≤ 2× the JSON. Two
//!   servers side by side, the update rounds alternating: one with its defaults (the embedded
//!   store keeps every version younger than 5 minutes and at least the last 10 000 revisions,
//!   up to its byte cap, as etcd's default compaction keeps 5 minutes), whose figure
//!   includes the history the updates leave in that window, as a deployed server's would;
//!   one keeping only the last 10 000 revisions (`--embedded-retain-window 0s`), which shows
//!   the share of the 5-minute window.
//! - **P18 — 1 000 clients relisting at once**: 1 000 keep-alive connections each list a
//!   namespace's pods (a few thousand) at the same instant, from the watch cache
//!   (`resourceVersion=0`) and as a consistent read (`resourceVersion` unset), the modes
//!   alternating over rounds; the server's peak RSS (sampled from /proc every 5 ms) above its
//!   idle RSS, and the time until every client has its whole list. A 429 is retried after a
//!   second, as client-go does, and counted.
//!
//! Both run in the easy configuration (in memory, plaintext); sizes scale with
//! `$LISTWATCH_BENCH_SCALE`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::http::Conn;
use crate::inproc::bar;
use crate::netscen::{create_pods, percentile};
use crate::report::{Bound, Goal, Metric, Report, Spread};
use crate::sys::{self, Server};

type Result<T> = std::result::Result<T, String>;

const JSON: &str = "application/json";
const MIB: f64 = 1024.0 * 1024.0;

/// Bytes of compact JSON of every pod, read in pages of 5 000; also their count.
pub(crate) async fn stored_json(conn: &mut Conn) -> Result<(usize, u64)> {
    let (mut n, mut bytes) = (0usize, 0u64);
    let mut cont = String::new();
    loop {
        let path = if cont.is_empty() {
            "/api/v1/pods?limit=5000".to_owned()
        } else {
            format!("/api/v1/pods?limit=5000&continue={cont}")
        };
        let body = conn.expect(200, "GET", &path, JSON, b"").await?;
        let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        for item in v["items"].as_array().map(Vec::as_slice).unwrap_or_default() {
            bytes += serde_json::to_vec(item).map_err(|e| e.to_string())?.len() as u64;
            n += 1;
        }
        match v["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => cont = c.to_owned(),
            _ => return Ok((n, bytes)),
        }
    }
}

/// Merge-PATCHes every one of `n` pods once (label `p15=r<round>`), over `conns` connections.
async fn update_all(server: &Server, n: usize, round: usize, conns: usize) -> Result<()> {
    let mut tasks = Vec::new();
    for k in 0..conns {
        let addr = server.addr;
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(addr).await?;
            for i in (k..n).step_by(conns) {
                let body = format!(r#"{{"metadata":{{"labels":{{"p15":"r{round}"}}}}}}"#);
                c.expect(
                    200,
                    "PATCH",
                    &format!("/api/v1/namespaces/ns-{:02}/pods/pod-{i:06}", i % 10),
                    "application/merge-patch+json",
                    body.as_bytes(),
                )
                .await?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// One P15 server: its RSS empty, after the creates and after the updates.
struct Side {
    server: Server,
    what: &'static str,
    empty: u64,
    created: u64,
    updated: u64,
}

async fn p15_side(n: usize, what: &'static str, args: &[&str]) -> Result<Side> {
    let server = Server::start(args)?;
    // Ready and empty (the system namespaces and bootstrap RBAC exist); settle first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let empty = server.rss();
    create_pods(server.addr, n, 1_000, 4).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let created = server.rss();
    Ok(Side {
        server,
        what,
        empty,
        created,
        updated: 0,
    })
}

/// P15: whole-server RSS per pod after every pod was updated K times, against its JSON; with
/// the default history and with history compacted as soon as the store may.
pub(crate) async fn p15() -> Result<Report> {
    let n = crate::meta::scaled(100_000, 2_000);
    // Three updates of every pod: each object replaced three times (the allocator's reuse
    // of freed versions is in the figure) and the default history's 10 000 revisions full
    // many times over; ten took ~20 min of a full run here for the same steady state.
    let k = crate::meta::scaled(3, 2);
    let mut r = Report::new(
        "P15",
        "whole-server RSS per object after sustained updates",
        &format!("{n} pods, each merge-PATCHed {k} times, in memory; two servers side by side"),
    );
    let mut sides = [
        p15_side(
            n,
            "default history (every version younger than 5 min, at least the last 10 000, at most the byte cap)",
            &["--storage", "embedded"],
        )
        .await?,
        p15_side(
            n,
            // Not 0 revisions: a store that compacts every write away makes its own watch
            // cache's storage watch fall off the history whenever it lags (410, relist), so
            // that server would be measured relisting, not in a steady state.
            "history of the last 10 000 revisions only (--embedded-retain-window 0s)",
            &["--storage", "embedded", "--embedded-retain-window", "0s"],
        )
        .await?,
    ];
    let pb = bar((2 * k) as u64, "P15 update rounds");
    for round in 0..k {
        for j in 0..2 {
            update_all(&sides[(round + j) % 2].server, n, round, 4).await?;
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    tokio::time::sleep(Duration::from_secs(2)).await;
    for s in &mut sides {
        s.updated = s.server.rss();
    }
    let mut conn = Conn::open(sides[0].server.addr).await?;
    let (listed, json) = stored_json(&mut conn).await?;
    if listed != n {
        return Err(format!("P15: listed {listed} pods, created {n}"));
    }
    let json_per = json as f64 / n as f64;
    for s in &sides {
        let per = |rss: u64| rss.saturating_sub(s.empty) as f64 / n as f64;
        r.push(
            Metric::new(
                &format!(
                    "{}: whole-server RSS per pod after {k} updates each ((RSS − empty server's) ÷ {n})",
                    s.what
                ),
                "B",
                per(s.updated),
            )
            .baseline(json_per, "the pod's stored JSON (compact), mean")
            .goal(Goal::Ratio(Bound::AtMost(2.0))),
        );
        r.push(
            Metric::new(
                &format!(
                    "{}: whole-server RSS per pod after the creates, before any update",
                    s.what
                ),
                "B",
                per(s.created),
            )
            .baseline(json_per, "the pod's stored JSON (compact), mean"),
        );
        r.notes.push(format!(
            "{}: server RSS empty {:.1} MiB, after {n} creates {:.1} MiB, after {k} merge PATCHes of each pod \
             {:.1} MiB (peak {:.1} MiB, VmHWM).",
            s.what,
            s.empty as f64 / MIB,
            s.created as f64 / MIB,
            s.updated as f64 / MIB,
            sys::peak_rss_bytes(s.server.pid()).unwrap_or(0) as f64 / MIB,
        ));
    }
    r.notes.push(format!(
        "Stored JSON: {:.1} MiB in all ({n} pods, benches' realistic pod). The update rounds alternate \
         between the two servers. With the default history every version superseded in the last 5 \
         minutes is held (in a run this short, the previous versions of all {} updates), as in a \
         deployed server's.",
        json as f64 / MIB,
        n * k,
    ));
    Ok(r)
}

/// One burst of P18: every client lists `path_of(c)` at once; (seconds until all have their
/// list, peak RSS in bytes, 429s retried, each client's latency in ms).
async fn burst(
    server: &Server,
    conns: Vec<Conn>,
    rv: &'static str,
) -> Result<(f64, u64, u64, Vec<f64>, Vec<Conn>)> {
    let pid = server.pid();
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(v) = sys::rss_bytes(pid) {
                    peak.fetch_max(v, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let retried = Arc::new(AtomicU64::new(0));
    let go = Arc::new(tokio::sync::Barrier::new(conns.len() + 1));
    let mut tasks = Vec::new();
    for (c, mut conn) in conns.into_iter().enumerate() {
        let (go, retried) = (Arc::clone(&go), Arc::clone(&retried));
        tasks.push(tokio::spawn(async move {
            let path = format!("/api/v1/namespaces/ns-{:02}/pods{rv}", c % 10);
            go.wait().await;
            let t = Instant::now();
            let deadline = t + Duration::from_secs(600);
            loop {
                let (code, head, len) = conn.request_discard("GET", &path).await?;
                match code {
                    200 if len > 0 => break,
                    429 if Instant::now() < deadline => {
                        retried.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    _ => {
                        return Err(format!(
                            "GET {path}: {code}: {}",
                            String::from_utf8_lossy(&head[..head.len().min(300)])
                        ));
                    }
                }
            }
            Ok::<_, String>((t.elapsed().as_secs_f64() * 1e3, conn))
        }));
    }
    go.wait().await;
    let t = Instant::now();
    let mut lat = Vec::new();
    let mut back = Vec::new();
    let mut first_err = None;
    for task in tasks {
        match task.await.map_err(|e| e.to_string()) {
            Ok(Ok((ms, conn))) => {
                lat.push(ms);
                back.push(conn);
            }
            Ok(Err(e)) | Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let all = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    if let Some(e) = first_err {
        return Err(e);
    }
    lat.sort_by(f64::total_cmp);
    Ok((
        all,
        peak.load(Ordering::Relaxed),
        retried.load(Ordering::Relaxed),
        lat,
        back,
    ))
}

/// What P18 saw of one mode over its rounds.
#[derive(Default)]
struct Seen {
    /// Seconds until every client had its list, per round.
    times: Vec<f64>,
    /// Peak RSS above idle in MiB, per round.
    peaks: Vec<f64>,
    /// 429s retried in all rounds.
    retried: u64,
    /// Per-client latency p99 in ms, per round.
    p99: Vec<f64>,
}

/// P18: 1 000 clients relisting at once, from the cache and as consistent reads.
pub(crate) async fn p18() -> Result<Report> {
    let limit = sys::raise_nofile();
    let clients = crate::meta::scaled(1_000, 50);
    let pods = crate::meta::scaled(30_000, 2_000);
    let per_ns = pods / 10;
    let rounds = crate::meta::scaled(3, 2);
    let mut r = Report::new(
        "P18",
        "1k clients relisting at once",
        &format!(
            "{clients} clients, each listing one namespace of {per_ns} pods ({pods} in 10 namespaces), {rounds} rounds per mode"
        ),
    );
    let server = Server::start(&["--storage", "embedded"])?;
    create_pods(server.addr, pods, 1_000, 4).await?;
    // One list alone, for the size of a response and the serial baseline (the server settled
    // after the creates first).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut one = Conn::open(server.addr).await?;
    let (mut alone, mut bytes) = (Vec::new(), 0usize);
    for _ in 0..5 {
        let t = Instant::now();
        let (code, _, len) = one
            .request_discard("GET", "/api/v1/namespaces/ns-00/pods?resourceVersion=0")
            .await?;
        if code != 200 {
            return Err(format!("P18: a single list answered {code}"));
        }
        alone.push(t.elapsed().as_secs_f64());
        bytes = len;
    }
    drop(one);
    alone.sort_by(f64::total_cmp);
    let alone = alone[alone.len() / 2];
    let mut conns = Vec::with_capacity(clients);
    for _ in 0..clients {
        conns.push(Conn::open(server.addr).await?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let modes: [(&str, &'static str); 2] = [
        (
            "from the watch cache (resourceVersion=0)",
            "?resourceVersion=0",
        ),
        ("consistent read (resourceVersion unset)", ""),
    ];
    let mut seen: [Seen; 2] = Default::default();
    let pb = bar((2 * rounds) as u64, "P18 bursts");
    for round in 0..rounds {
        for k in 0..2 {
            let m = (round + k) % 2;
            let idle = server.rss();
            let (all, peak, retried, lat, back) = burst(&server, conns, modes[m].1).await?;
            conns = back;
            let s = &mut seen[m];
            s.times.push(all);
            s.peaks.push(peak.saturating_sub(idle) as f64 / MIB);
            s.retried += retried;
            s.p99.push(percentile(&lat, 0.99));
            pb.inc(1);
            // Let the server return what the burst took before the next one.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    pb.finish_and_clear();
    let worst = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    for (m, (what, _)) in modes.iter().enumerate() {
        let Seen {
            times,
            peaks,
            retried,
            p99,
        } = &seen[m];
        r.push(
            Metric::new(
                &format!("{clients} lists of {per_ns} pods at once, {what}: time until all are served, worst round"),
                "s",
                worst(times),
            )
            .baseline(
                alone * clients as f64,
                &format!("{clients} × one such list alone (median of 5, from the cache)"),
            )
            .note(format!(
                "{}; per-client latency p99 per round {:?} ms; 429s retried {retried}",
                Spread::of(times).text("s"),
                p99.iter().map(|v| v.round()).collect::<Vec<_>>()
            )),
        );
        r.push(
            Metric::new(
                &format!(
                    "{clients} lists at once, {what}: server peak RSS above idle, worst round"
                ),
                "MiB",
                worst(peaks),
            )
            .baseline(
                bytes as f64 * clients as f64 / MIB,
                &format!("every response held at once ({clients} × {bytes} B)"),
            )
            .note(Spread::of(peaks).text("MiB")),
        );
    }
    r.notes.push(format!(
        "{clients} keep-alive HTTP/1.1 connections opened before the first burst; in each burst every \
         client sends its GET at the same instant (a barrier) and reads its whole list; the modes \
         alternate which goes first. RSS sampled every 5 ms from /proc; idle RSS read before each \
         burst. One list is {bytes} B of JSON and takes {:.1} ms alone. Open-file limit {limit}. \
         Server: default flags (max-requests-inflight and flow control as deployed).",
        alone * 1e3
    ));
    Ok(r)
}
