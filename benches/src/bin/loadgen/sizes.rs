//! **P19 — P3 across object sizes, 4 KB to 1 MB** (issue 31 item 4): the kubelet pattern of
//! P3 (one `spec.nodeName` watcher per node, h2c streams 250 per connection, each write
//! reaching exactly one watcher) with pods padded to 4 KiB, 64 KiB, 256 KiB and 1 MiB of JSON
//! (the value of an environment variable: annotations are limited to 256 KiB), each size on
//! a fresh server.
//!
//! What changes with the size: the number of pods (the stored JSON is held to one budget,
//! 1 GiB at full scale, at most P3's 150 000 pods) and the write rate (100/s as P3's, but at
//! most 25 MiB/s of objects, so 1 MiB pods are written 25 times a second). Writes are merge
//! PATCHes of one label, scheduled at the fixed rate; latency is from the scheduled send
//! time to the watcher's receipt of the whole event. Figures per size: the write→watcher
//! p99 (worst round; P3's SLO of 20 ms as the goal, not failing the run) beside the first
//! size's, and server CPU per write.
//!
//! Easy configuration (in memory, plaintext); sizes scale with `$LISTWATCH_BENCH_SCALE`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::http::{Conn, h2_connect, h2_open_watch};
use crate::inproc::bar;
use crate::netscen::percentile;
use crate::report::{Bound, Goal, Metric, Report, Spread};
use crate::sys::{self, Server};

type Result<T> = std::result::Result<T, String>;

const JSON: &str = "application/json";
const STREAMS_PER_CONN: usize = 250;
const SIZES: [usize; 4] = [4 << 10, 64 << 10, 256 << 10, 1 << 20];
/// P3's published watch-latency SLO, the goal of every size here.
const SLO_MS: f64 = 20.0;

fn rounds_n() -> usize {
    crate::meta::scaled(3, 2)
}

fn secs() -> u64 {
    crate::meta::scaled(10, 3) as u64
}

/// Writes per second at `size`: 100, or fewer so that at most 25 MiB/s of objects are written.
fn rate(size: usize) -> u64 {
    ((25usize << 20) / size).clamp(1, 100) as u64
}

/// Pods at `size`: a budget of stored JSON (1 GiB scaled), at most 150 000 (scaled).
fn pods(size: usize) -> usize {
    let budget = crate::meta::scaled(1 << 30, 16 << 20);
    (budget / size).clamp(20, crate::meta::scaled(150_000, 3_000))
}

/// A pod of about `size` bytes of JSON on `node`.
fn pod_body(i: usize, node: usize, size: usize) -> String {
    let base = format!(
        r#"{{"metadata":{{"name":"pod-{i:06}","labels":{{"app":"web"}}}},"spec":{{"nodeName":"node-{node:04}","containers":[{{"name":"c","image":"registry.example/app:1.0","env":[{{"name":"PAD","value":""}}]}}]}}}}"#
    );
    // The server adds ~300 bytes (uid, timestamps, defaults); pad the rest. The filler is an
    // environment variable's value: annotations are limited to 256 KiB in all, as upstream's.
    let pad = size.saturating_sub(base.len() + 300);
    base.replacen(
        r#""name":"PAD","value":"""#,
        &format!(r#""name":"PAD","value":"{}""#, "x".repeat(pad)),
        1,
    )
}

/// Scheduled send times by pod name, and the latencies seen.
#[derive(Default)]
struct Clock {
    sent: Mutex<HashMap<String, Instant>>,
    lat: Mutex<Vec<f64>>,
}

/// The pod name of a MODIFIED event frame, found without parsing the (large) object: the
/// pod's name is the only `"name":"pod-` in it.
fn modified_pod(frame: &[u8]) -> Option<&str> {
    let head = frame.get(..frame.len().min(40))?;
    let ty = br#""type":"MODIFIED""#;
    if !head.windows(ty.len()).any(|w| w == ty) {
        return None;
    }
    let key = br#""name":"pod-"#;
    let at = frame.windows(key.len()).position(|w| w == key)? + 8;
    std::str::from_utf8(frame.get(at..at + 10)?).ok()
}

struct Run {
    cpu: Vec<f64>,
    p99: Vec<f64>,
    pods: usize,
    watchers: usize,
    rss: u64,
}

async fn one_size(size: usize) -> Result<Run> {
    let n = pods(size);
    let watchers = crate::meta::scaled(1_000, 50).min(n);
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
        br#"{"metadata":{"name":"p19"}}"#,
    )
    .await?;
    let pb = bar(n as u64, &format!("P19 {} KiB pods", size >> 10));
    let mut creators = Vec::new();
    for k in 0..4 {
        let (addr, pb) = (server.addr, pb.clone());
        creators.push(tokio::spawn(async move {
            let mut c = Conn::open(addr).await?;
            for i in (k..n).step_by(4) {
                c.expect(
                    201,
                    "POST",
                    "/api/v1/namespaces/p19/pods",
                    JSON,
                    pod_body(i, i % watchers, size).as_bytes(),
                )
                .await?;
                pb.inc(1);
            }
            Ok::<(), String>(())
        }));
    }
    for t in creators {
        t.await.map_err(|e| e.to_string())??;
    }
    pb.finish_and_clear();
    let clock = Arc::new(Clock::default());
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    let addr = server.addr;
    for first in (0..watchers).step_by(STREAMS_PER_CONN) {
        let (send, driver) = h2_connect(addr).await?;
        tasks.push(driver);
        for w in first..(first + STREAMS_PER_CONN).min(watchers) {
            let uri = format!(
                "http://{addr}/api/v1/namespaces/p19/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-{w:04}&resourceVersion=0&timeoutSeconds=3600&allowWatchBookmarks=false"
            );
            let mut body = h2_open_watch(&send, &uri, Duration::from_secs(60)).await?;
            let clock = Arc::clone(&clock);
            tasks.push(tokio::spawn(async move {
                let mut partial: Vec<u8> = Vec::new();
                while let Some(Ok(data)) = body.data().await {
                    let now = Instant::now();
                    let _ = body.flow_control().release_capacity(data.len());
                    partial.extend_from_slice(&data);
                    // Only a chunk with a newline ends a frame: looking for one in the whole
                    // partial frame at every chunk would cost this client O(size²) a frame.
                    if !data.contains(&b'\n') {
                        continue;
                    }
                    let Some(end) = partial.iter().rposition(|b| *b == b'\n') else {
                        continue;
                    };
                    for f in partial[..end].split(|b| *b == b'\n') {
                        let Some(name) = modified_pod(f) else {
                            continue;
                        };
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
    // The initial ADDED events (resourceVersion=0) drain before the first round.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rate = rate(size);
    let period = Duration::from_micros(1_000_000 / rate);
    let total = (rate * secs()) as usize;
    let (mut cpu, mut p99) = (Vec::new(), Vec::new());
    for round in 0..rounds_n() {
        if let Ok(mut l) = clock.lat.lock() {
            l.clear();
        }
        let cpu0 = server.cpu();
        let t = Instant::now();
        for j in 0..total {
            let due = t + period * j as u32;
            tokio::time::sleep_until(due.into()).await;
            let i = (j * 7_919 + round * 13) % n;
            let name = format!("pod-{i:06}");
            if let Ok(mut s) = clock.sent.lock() {
                s.insert(name.clone(), due);
            }
            let body = format!(r#"{{"metadata":{{"labels":{{"p19":"r{round}w{j}"}}}}}}"#);
            conn.expect(
                200,
                "PATCH",
                &format!("/api/v1/namespaces/p19/pods/{name}"),
                "application/merge-patch+json",
                body.as_bytes(),
            )
            .await?;
        }
        cpu.push((server.cpu() - cpu0) / total as f64 * 1e6);
        // Every write reaches its watcher, within a deadline.
        let until = Instant::now() + Duration::from_secs(60);
        let mut l = loop {
            let l = clock.lat.lock().map(|l| l.clone()).unwrap_or_default();
            if l.len() >= total || Instant::now() > until {
                break l;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        if l.len() < total {
            return Err(format!(
                "P19 {} KiB: {} of {total} writes reached their watcher",
                size >> 10,
                l.len()
            ));
        }
        l.sort_by(f64::total_cmp);
        p99.push(percentile(&l, 0.99));
    }
    let rss = server.rss();
    for t in tasks {
        t.abort();
    }
    Ok(Run {
        cpu,
        p99,
        pods: n,
        watchers,
        rss,
    })
}

/// P19: P3's write→watcher latency at four object sizes.
pub(crate) async fn p19() -> Result<Report> {
    let limit = sys::raise_nofile();
    let mut r = Report::new(
        "P19",
        "P3 across object sizes 4 KiB–1 MiB",
        &format!(
            "pods of 4, 64, 256 and 1 024 KiB; stored JSON ≤ {} MiB per size; {} rounds of {} s per size",
            crate::meta::scaled(1 << 30, 16 << 20) >> 20,
            rounds_n(),
            secs()
        ),
    );
    let worst = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
    let mut first: Option<f64> = None;
    for size in SIZES {
        let run = one_size(size).await?;
        let kib = size >> 10;
        let w = worst(&run.p99);
        let mut m = Metric::new(
            &format!(
                "{kib} KiB pods ({} pods, {} watchers, {} writes/s): write→watcher p99, worst round",
                run.pods,
                run.watchers,
                rate(size)
            ),
            "ms",
            w,
        )
        .goal(Goal::Value(Bound::AtMost(SLO_MS)))
        .note(format!(
            "p99 per round {:?} ms; server RSS at the end {} MiB",
            run.p99.iter().map(|v| (v * 100.0).round() / 100.0).collect::<Vec<_>>(),
            run.rss >> 20
        ));
        if let Some(f) = first {
            m = m.baseline(f, "4 KiB pods, same run");
        }
        r.push(m);
        first.get_or_insert(w);
        let c = Spread::of(&run.cpu);
        r.push(
            Metric::new(
                &format!("{kib} KiB pods: server CPU per write"),
                "µs",
                c.median,
            )
            .note(c.text("µs")),
        );
    }
    r.notes.push(format!(
        "Each size on a fresh server; sizes run one after another (not alternated). A pod is padded \
         to its size by one environment variable's value; each write merge-PATCHes one label of one pod, so the server \
         re-encodes and sends the whole object to one watcher. Watches are h2c streams, \
         {STREAMS_PER_CONN} per connection, one per node. Open-file limit {limit}."
    ));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_padded_pod_is_about_its_size_and_names_itself_once() {
        for size in SIZES {
            let body = pod_body(7, 3, size);
            assert!(
                body.len() + 300 >= size && body.len() <= size,
                "{size}: {}",
                body.len()
            );
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            assert_eq!(v["metadata"]["name"], "pod-000007");
            assert_eq!(body.matches(r#""name":"pod-"#).count(), 1);
        }
    }

    #[test]
    fn only_modified_events_name_their_pod() {
        let obj = pod_body(42, 0, 64 << 10);
        let modified = format!(r#"{{"type":"MODIFIED","object":{obj}}}"#);
        assert_eq!(modified_pod(modified.as_bytes()), Some("pod-000042"));
        let added = format!(r#"{{"type":"ADDED","object":{obj}}}"#);
        assert_eq!(modified_pod(added.as_bytes()), None);
        assert_eq!(modified_pod(br#"{"type":"MODIFIED","object":{}}"#), None);
        assert_eq!(modified_pod(b""), None);
    }
}
