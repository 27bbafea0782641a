//! P13: slow consumers over HTTP. Among 150 watchers of one namespace, 50 never read while
//! 16 KB pods are created at 40 per second, so their sockets and buffers fill; the healthy
//! watchers' write→receipt latency is compared with the same run without the stalled
//! watchers (issue 12 item 10: goal p99 ratio ≤ 1.5).
//!
//! Each round has two phases of `PHASE` writes on the same server, in alternating order: the
//! 100 healthy watchers alone, and the same 100 plus 50 fresh watchers that never read (their
//! sockets fill during the phase). A healthy watcher counts complete frames without parsing
//! them: it watches from the resource version before the phase's first write and there are no
//! bookmarks, so its k-th frame is the k-th write of the phase, timed from just before its
//! POST was sent (the request's round trip included, as in P3). Every healthy watcher must
//! receive every write of the phase, or the scenario fails.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::http::{Conn, Watch};
use crate::inproc::bar;
use crate::report::{Bound, Goal, Metric, Report};
use crate::sys::Server;

type Result<T> = std::result::Result<T, String>;

const HEALTHY: usize = 100;
const STALLED: usize = 50;
const RATE: u64 = 40;
const PHASE: usize = 400;
const ROUNDS: usize = 3;
const FILLER: usize = 16 << 10;
const NS: &str = "p13";
const JSON: &str = "application/json";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn spread(v: &[f64]) -> (f64, f64) {
    (
        v.iter().copied().fold(f64::INFINITY, f64::min),
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    )
}

/// One phase's healthy latencies (ms, sorted) and server CPU seconds.
struct Phase {
    latencies: Vec<f64>,
    cpu: f64,
}

async fn phase(server: &Server, conn: &mut Conn, stalled: usize, first: usize) -> Result<Phase> {
    let path = format!("/api/v1/namespaces/{NS}/pods");
    let body = conn
        .expect(200, "GET", &format!("{path}?limit=1"), JSON, b"")
        .await?;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .ok_or("list without resourceVersion")?
        .to_owned();
    let watch = format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=600");
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::with_capacity(PHASE)));
    let done = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..HEALTHY {
        let mut w = Watch::open(server.addr, &watch).await?;
        let (sent, done) = (Arc::clone(&sent), Arc::clone(&done));
        readers.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(PHASE);
            while lat.len() < PHASE {
                let n = w.count().await?;
                let now = Instant::now();
                let sent = sent.lock().map_err(|_| "poisoned")?;
                for k in lat.len()..lat.len() + n {
                    let t0 = sent.get(k).ok_or("a frame before its write")?;
                    lat.push((now - *t0).as_secs_f64() * 1e3);
                }
            }
            done.fetch_add(1, Ordering::Relaxed);
            Ok::<Vec<f64>, String>(lat)
        }));
    }
    // Opened, never read: their sockets fill, then the server's buffers for them.
    let mut idle = Vec::new();
    for _ in 0..stalled {
        idle.push(Watch::open(server.addr, &watch).await?);
    }
    let filler = "x".repeat(FILLER);
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    let cpu0 = server.cpu();
    for k in 0..PHASE {
        tick.tick().await;
        let pod = format!(
            r#"{{"metadata":{{"name":"w{}","annotations":{{"filler":"{filler}"}}}},"spec":{{"containers":[{{"name":"c","image":"x"}}]}}}}"#,
            first + k
        );
        sent.lock().map_err(|_| "poisoned")?.push(Instant::now());
        conn.expect(201, "POST", &path, JSON, pod.as_bytes())
            .await?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.load(Ordering::Relaxed) < HEALTHY as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let cpu = server.cpu() - cpu0;
    let mut latencies = Vec::with_capacity(HEALTHY * PHASE);
    // Each reader is awaited (to the same deadline), not polled with `is_finished`: a reader
    // that has counted itself done may not have returned yet when the loop above sees the
    // count, and taking it for a stuck one failed the scenario for nothing.
    for r in readers {
        let abort = r.abort_handle();
        match tokio::time::timeout_at(deadline.into(), r).await {
            Ok(joined) => latencies.extend(joined.map_err(|e| e.to_string())??),
            Err(_) => {
                abort.abort();
                return Err(format!(
                    "a healthy watcher did not receive all {PHASE} events within 30 s (stalled: {stalled})"
                ));
            }
        }
    }
    drop(idle);
    latencies.sort_by(f64::total_cmp);
    // Let the server see the closed connections before the next phase.
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(Phase { latencies, cpu })
}

/// P13: slow consumers cost the healthy nothing.
pub(crate) async fn p13() -> Result<Report> {
    let mut r = Report::new(
        "P13",
        "slow consumers over HTTP: 100 healthy + 50 never-reading watchers, 16 KB pods, 40 writes/s",
        &format!("{ROUNDS} rounds of two {PHASE}-write phases (10 s each)"),
    );
    let server = Server::start(&[
        "--storage",
        "embedded",
        // One load generator stands for 150 clients.
        "--max-watches-per-client",
        "0",
        "--idle-connection-timeout",
        "3600",
    ])?;
    let mut conn = Conn::open(server.addr).await?;
    conn.expect(
        201,
        "POST",
        "/api/v1/namespaces",
        JSON,
        format!(r#"{{"metadata":{{"name":"{NS}"}}}}"#).as_bytes(),
    )
    .await?;
    let (mut with, mut without, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut p50_with, mut p50_without) = (Vec::new(), Vec::new());
    let (mut cpu_with, mut cpu_without) = (Vec::new(), Vec::new());
    let pb = bar((ROUNDS * 2) as u64, "phases");
    let mut first = 0;
    for round in 0..ROUNDS {
        let mut stalled_first = round % 2 == 1;
        let (mut a, mut b) = (None, None);
        for _ in 0..2 {
            let stalled = if stalled_first { STALLED } else { 0 };
            let p = phase(&server, &mut conn, stalled, first).await?;
            first += PHASE;
            if stalled_first {
                a = Some(p);
            } else {
                b = Some(p);
            }
            stalled_first = !stalled_first;
            pb.inc(1);
        }
        let (Some(a), Some(b)) = (a, b) else {
            return Err("a phase is missing".into());
        };
        let (pa, pb99) = (
            percentile(&a.latencies, 0.99),
            percentile(&b.latencies, 0.99),
        );
        with.push(pa);
        without.push(pb99);
        ratios.push(pa / pb99);
        p50_with.push(percentile(&a.latencies, 0.5));
        p50_without.push(percentile(&b.latencies, 0.5));
        cpu_with.push(a.cpu);
        cpu_without.push(b.cpu);
    }
    pb.finish_and_clear();
    let (rlo, rhi) = spread(&ratios);
    let (wlo, whi) = spread(&with);
    let (olo, ohi) = spread(&without);
    r.push(
        Metric::new(
            &format!(
                "healthy watchers' write→receipt p99 with 50 stalled (median of {ROUNDS} rounds)"
            ),
            "ms",
            median(with.clone()),
        )
        .baseline(
            median(without.clone()),
            "the same 100 watchers, no stalled ones, same run",
        )
        .goal(Goal::Ratio(Bound::AtMost(1.5)))
        .note(format!(
            "rounds {wlo:.2}–{whi:.2} ms vs {olo:.2}–{ohi:.2} ms"
        )),
    );
    r.push(
        Metric::new(
            &format!("p99 ratio per round, with ÷ without (median of {ROUNDS})"),
            "×",
            median(ratios.clone()),
        )
        .goal(Goal::Value(Bound::AtMost(1.5)))
        .note(format!("rounds {rlo:.2}–{rhi:.2}")),
    );
    r.push(
        Metric::new(
            "healthy watchers' write→receipt p50 with 50 stalled",
            "ms",
            median(p50_with.clone()),
        )
        .baseline(median(p50_without.clone()), "no stalled watchers"),
    );
    r.push(
        Metric::new(
            "server CPU per phase with 50 stalled",
            "CPU-s",
            median(cpu_with.clone()),
        )
        .baseline(median(cpu_without.clone()), "no stalled watchers"),
    );
    r.notes.push(format!(
        "p99 with stalled watchers per round: {with:.2?} ms; without: {without:.2?} ms; ratios {ratios:.2?}. \
         Every healthy watcher received every write of every phase ({} events per phase)."
        , HEALTHY * PHASE
    ));
    Ok(r)
}
