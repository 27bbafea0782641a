//! Scenarios users ask about (issue 31 item 4), the two cheapest:
//!
//! - **P16 — list p99 over HTTP while the same resource takes writes**: one client lists a
//!   namespace's pods (3 000 at full size) back to back over one keep-alive connection, in
//!   rounds that alternate between *quiet* (no writes) and *written* (merge PATCHes of pods
//!   of the same namespace at [`WRITE_RATE`]/s from another connection); the list latency
//!   p99 of the written rounds beside the quiet rounds' (the worst round of each).
//! - **P17 — 1 000 watchers with label selectors no index answers**: 1 000 watch streams
//!   (h2c, 250 per connection), each `labelSelector=watcher=wNNNN`, on one server, against the
//!   same 1 000 watchers selecting `spec.nodeName` (which the cache indexes) on a second server
//!   with the same pods, set up beside it, the rounds alternating; every write (a merge PATCH
//!   of one pod's other label, at [`WRITE_RATE`]/s) reaches exactly one watcher on each. The
//!   figures: server CPU per write and the write→watcher latency p99 (from the scheduled send
//!   time), unindexed ÷ indexed.
//!
//! Both run in the easy configuration only (in memory, plaintext); sizes scale with
//! `$LISTWATCH_BENCH_SCALE`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::http::{Conn, h2_connect, h2_open_watch};
use crate::inproc::bar;
use crate::netscen::{create_pods, percentile};
use crate::report::{Metric, Report, Spread};
use crate::sys::{self, Server};

type Result<T> = std::result::Result<T, String>;

const JSON: &str = "application/json";
/// Writes per second in both scenarios.
const WRITE_RATE: u64 = 100;
/// Streams per h2c connection (the server's default cap).
const STREAMS_PER_CONN: usize = 250;

fn rounds_n() -> usize {
    crate::meta::scaled(3, 2)
}

fn secs() -> u64 {
    crate::meta::scaled(10, 3) as u64
}

/// P16: list latency of one namespace's pods, quiet against written, alternating rounds.
pub(crate) async fn p16() -> Result<Report> {
    let pods = crate::meta::scaled(30_000, 2_000);
    let per_ns = pods / 10;
    let mut r = Report::new(
        "P16",
        "list p99 over HTTP while the same resource takes writes",
        &format!(
            "{pods} pods in 10 namespaces; {} rounds of {} s each quiet and written, {WRITE_RATE} PATCHes/s",
            rounds_n(),
            secs()
        ),
    );
    let server = Server::start(&["--storage", "embedded"])?;
    create_pods(server.addr, pods, 1_000, 4).await?;
    let path = "/api/v1/namespaces/ns-00/pods";
    let mut lister = Conn::open(server.addr).await?;
    let (mut quiet, mut written) = (Vec::new(), Vec::new());
    let mut lists = (0usize, 0usize);
    let pb = bar((2 * rounds_n()) as u64, "P16 rounds");
    for round in 0..rounds_n() {
        for phase in 0..2 {
            // Alternating which phase goes first.
            let with_writes = (round + phase) % 2 == 1;
            let writer = if with_writes {
                let addr = server.addr;
                Some(tokio::spawn(async move {
                    let mut c = Conn::open(addr).await?;
                    let mut tick =
                        tokio::time::interval(Duration::from_micros(1_000_000 / WRITE_RATE));
                    for j in 0.. {
                        tick.tick().await;
                        // Pods of ns-00: pod i is in namespace i mod 10.
                        let i = (j * 10) % pods;
                        let body =
                            format!(r#"{{"metadata":{{"labels":{{"p16":"r{round}w{j}"}}}}}}"#);
                        c.expect(
                            200,
                            "PATCH",
                            &format!("/api/v1/namespaces/ns-00/pods/pod-{i:06}"),
                            "application/merge-patch+json",
                            body.as_bytes(),
                        )
                        .await?;
                    }
                    Ok::<(), String>(())
                }))
            } else {
                None
            };
            let mut lat = Vec::new();
            let end = Instant::now() + Duration::from_secs(secs());
            while Instant::now() < end {
                let t = Instant::now();
                let body = lister.expect(200, "GET", path, JSON, b"").await?;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
                std::hint::black_box(body);
            }
            if let Some(w) = writer {
                w.abort();
                if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(5), w).await {
                    return Err(format!("P16 writer: {e}"));
                }
            }
            lat.sort_by(f64::total_cmp);
            let p99 = percentile(&lat, 0.99);
            if with_writes {
                written.push(p99);
                lists.1 += lat.len();
            } else {
                quiet.push(p99);
                lists.0 += lat.len();
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let worst = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    let (q, w) = (Spread::of(&quiet), Spread::of(&written));
    r.push(
        Metric::new(
            &format!(
                "list of {per_ns} pods (one namespace) while it takes {WRITE_RATE} PATCHes/s: latency p99, worst round"
            ),
            "ms",
            worst(&written),
        )
        .baseline(worst(&quiet), "the same lists without writes, worst round")
        .note(format!("written {}; quiet {}", w.text("ms"), q.text("ms"))),
    );
    r.notes.push(format!(
        "One client lists /api/v1/namespaces/ns-00/pods ({per_ns} pods) back to back on one connection; in the \
         written rounds another connection merge-PATCHes a label of pods of that namespace at {WRITE_RATE}/s. \
         Lists: {} quiet, {} written. p99 per round: quiet {:?} ms, written {:?} ms.",
        lists.0,
        lists.1,
        quiet.iter().map(|v| (v * 100.0).round() / 100.0).collect::<Vec<_>>(),
        written.iter().map(|v| (v * 100.0).round() / 100.0).collect::<Vec<_>>(),
    ));
    Ok(r)
}

/// Scheduled send times by pod name, and the latencies seen.
#[derive(Default)]
struct Clock {
    sent: Mutex<HashMap<String, Instant>>,
    lat: Mutex<Vec<f64>>,
}

/// One P17 server: its pods carry `watcher=wNNNN` and run on `node-NNNN` (the same NNNN).
struct Side {
    server: Server,
    conn: Conn,
    clock: Arc<Clock>,
    tasks: Vec<JoinHandle<()>>,
    cpu: Vec<f64>,
    p99: Vec<f64>,
}

/// A server with `pods` pods and one watch per `watchers`, selecting by label (`by_label`)
/// or by `spec.nodeName`.
async fn p17_side(pods: usize, watchers: usize, by_label: bool) -> Result<Side> {
    let max = (watchers + 1_000).to_string();
    let server = Server::start(&[
        "--storage",
        "embedded",
        "--max-watches",
        &max,
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
        br#"{"metadata":{"name":"p17"}}"#,
    )
    .await?;
    let pb = bar(pods as u64, "P17 pods");
    for i in 0..pods {
        let w = i % watchers;
        let body = format!(
            r#"{{"metadata":{{"name":"pod-{i:06}","labels":{{"app":"web","watcher":"w{w:04}"}}}},"spec":{{"nodeName":"node-{w:04}","containers":[{{"name":"c","image":"registry.example/app:1.0"}}]}}}}"#
        );
        conn.expect(
            201,
            "POST",
            "/api/v1/namespaces/p17/pods",
            JSON,
            body.as_bytes(),
        )
        .await?;
        pb.inc(1);
    }
    pb.finish_and_clear();
    let clock = Arc::new(Clock::default());
    let mut tasks = Vec::new();
    let addr = server.addr;
    for first in (0..watchers).step_by(STREAMS_PER_CONN) {
        let (send, driver) = h2_connect(addr).await?;
        tasks.push(driver);
        for w in first..(first + STREAMS_PER_CONN).min(watchers) {
            let selector = if by_label {
                format!("labelSelector=watcher%3Dw{w:04}")
            } else {
                format!("fieldSelector=spec.nodeName%3Dnode-{w:04}")
            };
            let uri = format!(
                "http://{addr}/api/v1/namespaces/p17/pods?watch=1&{selector}&timeoutSeconds=3600&allowWatchBookmarks=false"
            );
            let mut body = h2_open_watch(&send, &uri, Duration::from_secs(60)).await?;
            let clock = Arc::clone(&clock);
            tasks.push(tokio::spawn(async move {
                let mut partial: Vec<u8> = Vec::new();
                while let Some(Ok(data)) = body.data().await {
                    let now = Instant::now();
                    let _ = body.flow_control().release_capacity(data.len());
                    partial.extend_from_slice(&data);
                    let Some(end) = partial.iter().rposition(|b| *b == b'\n') else {
                        continue;
                    };
                    for f in partial[..end].split(|b| *b == b'\n') {
                        let Ok(v) = serde_json::from_slice::<serde_json::Value>(f) else {
                            continue;
                        };
                        if v["type"] != "MODIFIED" {
                            continue;
                        }
                        let name = v["object"]["metadata"]["name"].as_str().unwrap_or("");
                        let t0 = clock.sent.lock().ok().and_then(|s| s.get(name).copied());
                        if let (Some(t0), Ok(mut l)) = (t0, clock.lat.lock()) {
                            l.push((now - t0).as_secs_f64() * 1e3);
                        }
                    }
                    partial.drain(..=end);
                }
            }));
        }
    }
    Ok(Side {
        server,
        conn,
        clock,
        tasks,
        cpu: Vec::new(),
        p99: Vec::new(),
    })
}

/// One round of writes on `side`: [`WRITE_RATE`]/s for [`secs`], one pod per watcher in turn.
async fn p17_round(side: &mut Side, pods: usize, round: usize) -> Result<()> {
    if let Ok(mut l) = side.clock.lat.lock() {
        l.clear();
    }
    let total = (WRITE_RATE * secs()) as usize;
    let period = Duration::from_micros(1_000_000 / WRITE_RATE);
    let cpu0 = side.server.cpu();
    let t = Instant::now();
    for j in 0..total {
        let due = t + period * j as u32;
        tokio::time::sleep_until(due.into()).await;
        let i = (j * 7_919 + round * 13) % pods;
        let name = format!("pod-{i:06}");
        if let Ok(mut s) = side.clock.sent.lock() {
            s.insert(name.clone(), due);
        }
        let body = format!(r#"{{"metadata":{{"labels":{{"p17":"r{round}w{j}"}}}}}}"#);
        side.conn
            .expect(
                200,
                "PATCH",
                &format!("/api/v1/namespaces/p17/pods/{name}"),
                "application/merge-patch+json",
                body.as_bytes(),
            )
            .await?;
    }
    side.cpu
        .push((side.server.cpu() - cpu0) / total as f64 * 1e6);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut l = side.clock.lat.lock().map(|l| l.clone()).unwrap_or_default();
    if l.len() < total {
        return Err(format!(
            "P17: {} of {total} writes reached their watcher",
            l.len()
        ));
    }
    l.sort_by(f64::total_cmp);
    side.p99.push(percentile(&l, 0.99));
    Ok(())
}

/// P17: 1 000 unindexed label-selector watchers against as many indexed field-selector ones.
pub(crate) async fn p17() -> Result<Report> {
    let limit = sys::raise_nofile();
    let watchers = crate::meta::scaled(1_000, 100);
    let pods = watchers * 10;
    let mut r = Report::new(
        "P17",
        "1k watchers with label selectors no index answers, against 1k indexed spec.nodeName watchers",
        &format!(
            "{watchers} watchers per side, {pods} pods, {} rounds of {} s at {WRITE_RATE} writes/s",
            rounds_n(),
            secs()
        ),
    );
    let mut sides = [
        p17_side(pods, watchers, true).await?,
        p17_side(pods, watchers, false).await?,
    ];
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pb = bar((2 * rounds_n()) as u64, "P17 rounds");
    for round in 0..rounds_n() {
        for k in 0..2 {
            p17_round(&mut sides[(round + k) % 2], pods, round).await?;
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let [label, field] = sides;
    let (lc, fc) = (Spread::of(&label.cpu), Spread::of(&field.cpu));
    let worst = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    r.push(
        Metric::new(
            &format!("{watchers} label-selector watchers (no index): server CPU per write"),
            "µs",
            lc.median,
        )
        .baseline(
            fc.median,
            "the same watchers selecting spec.nodeName (indexed), same run",
        )
        .note(format!(
            "label {}; indexed {}",
            lc.text("µs"),
            fc.text("µs")
        )),
    );
    r.push(
        Metric::new(
            &format!(
                "{watchers} label-selector watchers (no index): write→watcher latency p99, worst round (from the scheduled send time)"
            ),
            "ms",
            worst(&label.p99),
        )
        .baseline(worst(&field.p99), "indexed spec.nodeName watchers, worst round"),
    );
    r.notes.push(format!(
        "Each pod carries labels watcher=wNNNN and runs on node-NNNN (the same NNNN), {} pods per watcher; each \
         write merge-PATCHes another label of one pod, so it reaches one watcher on each server. Watches are \
         h2c streams, {STREAMS_PER_CONN} per connection. p99 per round: label {:?} ms, indexed {:?} ms. \
         Open-file limit {limit}.",
        pods / watchers,
        label.p99.iter().map(|v| (v * 100.0).round() / 100.0).collect::<Vec<_>>(),
        field.p99.iter().map(|v| (v * 100.0).round() / 100.0).collect::<Vec<_>>(),
    ));
    for s in [label, field] {
        for t in s.tasks {
            t.abort();
        }
    }
    Ok(r)
}
