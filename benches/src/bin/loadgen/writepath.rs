//! W1, the watch server's write path (issue 15, item 2): one build of the server against a
//! baseline build (`$LISTWATCH_BASELINE_APISERVER_BIN`, e.g. main before a change), in the
//! same run, rounds alternating between them.
//!
//! Each round starts a fresh server (embedded store), times a burst of creates alone, then the
//! same burst with `WATCHERS` HTTP/1.1 watchers (each on its own connection) receiving every
//! event; the writers are saturating (four connections creating back to back), so events
//! queue for each watcher faster than one at a time. Per delivered event: the server's CPU
//! (with watchers − without) and its write system calls (`syscw` of /proc/PID/io: `write`,
//! `writev`, … — hyper writes a watch's frames with `writev`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::http::{Conn, Watch};
use crate::report::{Metric, Report};
use crate::sys::{self, Server};

type Result<T> = std::result::Result<T, String>;

const WATCHERS: usize = 200;
const CREATES: usize = 2_000;
const WRITERS: usize = 4;
const ROUNDS: usize = 3;
const JSON: &str = "application/json";

/// Write system calls of process `pid` so far.
fn syscw(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
}

fn pod(i: usize) -> String {
    format!(
        r#"{{"metadata":{{"name":"p{i}","labels":{{"app":"load"}}}},"spec":{{"nodeName":"n{}","containers":[{{"name":"c","image":"x"}}]}}}}"#,
        i % 10
    )
}

/// Creates pods `from..from + CREATES` over `WRITERS` connections, back to back.
async fn burst(addr: SocketAddr, from: usize) -> Result<()> {
    let mut tasks = Vec::new();
    for k in 0..WRITERS {
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(addr).await?;
            for i in (from + k..from + CREATES).step_by(WRITERS) {
                c.expect(
                    201,
                    "POST",
                    "/api/v1/namespaces/w1/pods",
                    JSON,
                    pod(i).as_bytes(),
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

/// One round: (server CPU µs per delivered event, write syscalls per delivered event).
async fn round(bin: &std::path::Path) -> Result<(f64, f64)> {
    let server = Server::start_bin(
        bin,
        &[
            "--storage",
            "embedded",
            "--max-watches",
            "20000",
            "--max-watches-per-client",
            "0",
            "--idle-connection-timeout",
            "3600",
        ],
    )?;
    let pid = server.pid();
    let mut conn = Conn::open(server.addr).await?;
    conn.expect(
        201,
        "POST",
        "/api/v1/namespaces",
        JSON,
        br#"{"metadata":{"name":"w1"}}"#,
    )
    .await?;
    // The writes alone.
    let (cpu0, w0) = (server.cpu(), syscw(pid).unwrap_or(0));
    burst(server.addr, 0).await?;
    let (cpu_alone, w_alone) = (server.cpu() - cpu0, syscw(pid).unwrap_or(0) - w0);
    // The same writes with every watcher receiving them.
    let got = Arc::new(AtomicU64::new(0));
    for _ in 0..WATCHERS {
        let mut w = Watch::open(
            server.addr,
            "/api/v1/namespaces/w1/pods?watch=1&resourceVersion=0&timeoutSeconds=3600",
        )
        .await?;
        let got = Arc::clone(&got);
        tokio::spawn(async move {
            while let Ok(n) = w.count().await {
                got.fetch_add(n as u64, Ordering::Relaxed);
            }
        });
    }
    // Each watcher first receives the CREATES pods as its initial state.
    let initial = (WATCHERS * CREATES) as u64;
    let end = Instant::now() + Duration::from_secs(120);
    while got.load(Ordering::Relaxed) < initial && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (cpu0, w0) = (server.cpu(), syscw(pid).unwrap_or(0));
    burst(server.addr, CREATES).await?;
    let want = initial * 2;
    while got.load(Ordering::Relaxed) < want && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (cpu, w) = (server.cpu() - cpu0, syscw(pid).unwrap_or(0) - w0);
    let delivered = got.load(Ordering::Relaxed).saturating_sub(initial);
    if delivered < initial {
        return Err(format!("the watchers got {delivered} of {initial} events"));
    }
    let per = delivered as f64;
    Ok((
        (cpu - cpu_alone).max(0.0) / per * 1e6,
        w.saturating_sub(w_alone) as f64 / per,
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn spread(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{min:.2}–{max:.2}")
}

pub(crate) async fn w1() -> Result<Report> {
    let limit = sys::raise_nofile();
    let mut r = Report::new(
        "W1",
        "watch write path: 200 HTTP/1.1 watchers, saturating writers",
        "",
    );
    let ours_bin = sys::apiserver_bin()?;
    let base_bin = std::env::var_os("LISTWATCH_BASELINE_APISERVER_BIN")
        .map(std::path::PathBuf::from)
        .ok_or("W1 needs LISTWATCH_BASELINE_APISERVER_BIN (the build to compare with)")?;
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        base.push(round(&base_bin).await?);
        ours.push(round(&ours_bin).await?);
    }
    let cpu = |v: &[(f64, f64)]| v.iter().map(|x| x.0).collect::<Vec<_>>();
    let writes = |v: &[(f64, f64)]| v.iter().map(|x| x.1).collect::<Vec<_>>();
    r.push(
        Metric::new(
            "server CPU per delivered event (with watchers − without; median of 3)",
            "µs",
            median(cpu(&ours)),
        )
        .baseline(median(cpu(&base)), "the baseline build, same run"),
    );
    r.push(
        Metric::new(
            "write system calls per delivered event (median of 3)",
            "calls",
            median(writes(&ours)),
        )
        .baseline(median(writes(&base)), "the baseline build, same run"),
    );
    r.notes.push(format!(
        "{WATCHERS} watchers × {CREATES} creates by {WRITERS} writers per round, rounds alternating \
         baseline/ours; CPU µs per event, ours {} (spread {}), baseline {} (spread {}); write calls per \
         event, ours {}, baseline {}. Baseline: `{}`. Open-file limit {limit}.",
        fmt(&cpu(&ours)),
        spread(&cpu(&ours)),
        fmt(&cpu(&base)),
        spread(&cpu(&base)),
        fmt(&writes(&ours)),
        fmt(&writes(&base)),
        base_bin.display(),
    ));
    Ok(r)
}

fn fmt(v: &[f64]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
    format!("[{}]", parts.join(", "))
}
