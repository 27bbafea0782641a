//! Scenarios over HTTP against listwatch-apiserver as a child process: P9, and the helpers
//! P3, P10 and P14 share (P2, P3 and P10 have modules of their own).
//!
//! P9 also measures a baseline build of the server in the same run when
//! `$LISTWATCH_BASELINE_APISERVER_BIN` names one (e.g. main before a change).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};

use crate::http::{Conn, Target, Watch, h2_open_watch};
use crate::inproc::bar;
use crate::report::{Bound, Goal, Metric, Report};
use crate::sys::{self, Server};

type Result<T> = std::result::Result<T, String>;

const JSON: &str = "application/json";

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
pub(crate) async fn list_rv(conn: &mut Conn, path: &str) -> Result<String> {
    let body = conn
        .expect(200, "GET", &format!("{path}?limit=1"), JSON, b"")
        .await?;
    let v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    v["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "list without resourceVersion".into())
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
pub(crate) async fn create_pods(
    to: impl Into<Target>,
    n: usize,
    nodes: usize,
    conns: usize,
) -> Result<()> {
    let to: Target = to.into();
    let mut c = Conn::open(to.clone()).await?;
    for ns in 0..10 {
        create_namespace(&mut c, &format!("ns-{ns:02}")).await?;
    }
    let pb = bar(n as u64, "creating pods (HTTP)");
    let mut tasks = Vec::new();
    for k in 0..conns {
        let (pb, to) = (pb.clone(), to.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(to).await?;
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

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// P9: memory per idle watch, in-process and over HTTP.
pub(crate) async fn p9() -> Result<Report> {
    const N: usize = 10_000;
    let limit = sys::raise_nofile();
    let mut r = Report::new(
        "P9",
        "memory per idle watch: HTTP/1.1, HTTP/2 stream, in-process watcher",
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
        .goal(Goal::Value(Bound::AtMost(512.0)))
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
    // HTTP: server RSS growth over 10k idle watches, this build and (when given) a baseline
    // build of the server, in the same run.
    let ours = http_memory(&sys::apiserver_bin()?, N).await?;
    let base = match std::env::var_os("LISTWATCH_BASELINE_APISERVER_BIN") {
        Some(b) => Some(http_memory(std::path::Path::new(&b), N).await?),
        None => None,
    };
    let with_base = |m: Metric, pick: fn(&HttpMemory) -> f64| match &base {
        Some(b) => m.baseline(pick(b), "the baseline build of the server, same run"),
        None => m,
    };
    r.push(with_base(
        Metric::new(
            "server RSS per idle HTTP/1.1 watch (own connection)",
            "KiB",
            ours.h1_watch,
        )
        .goal(Goal::Value(Bound::AtMost(8.0)))
        .note("etcd: 18 KB per watch stream"),
        |b| b.h1_watch,
    ));
    r.push(with_base(
        Metric::new(
            "server RSS per extra watch stream on a shared HTTP/2 connection",
            "KiB",
            ours.h2_stream,
        )
        .goal(Goal::Value(Bound::AtMost(2.0))),
        |b| b.h2_stream,
    ));
    r.push(with_base(
        Metric::new(
            "server RSS per HTTP/2 connection with one watch stream, for comparison",
            "KiB",
            ours.h2_conn,
        ),
        |b| b.h2_conn,
    ));
    r.push(with_base(
        Metric::new(
            "server RSS per idle keep-alive HTTP/1.1 connection (one GET, no watch), for comparison",
            "KiB",
            ours.h1_conn,
        ),
        |b| b.h1_conn,
    ));
    r.notes.push(format!(
        "Open-file limit {limit}; {N} HTTP/1.1 watches each on its own connection; {N} HTTP/2 \
         watch streams, {H2_STREAMS} on each of {} h2c connections (the extra-stream figure is the \
         growth from the first stream of each connection to all of them, divided by the extra \
         streams). Baseline: {}.",
        N / H2_STREAMS,
        match std::env::var("LISTWATCH_BASELINE_APISERVER_BIN") {
            Ok(b) => format!("the server built from `{b}`"),
            Err(_) => "none given (set LISTWATCH_BASELINE_APISERVER_BIN)".to_owned(),
        }
    ));
    Ok(r)
}

/// Watch streams per HTTP/2 connection in P9 (the server's default cap is 250).
const H2_STREAMS: usize = 250;

/// Server RSS per idle watch or connection, in KiB.
struct HttpMemory {
    h1_watch: f64,
    h1_conn: f64,
    h2_stream: f64,
    h2_conn: f64,
}

/// P9's HTTP figures for the server at `bin`: `n` idle HTTP/1.1 watches on their own
/// connections, `n` idle keep-alive connections, `n` watch streams on shared h2c connections.
async fn http_memory(bin: &std::path::Path, n: usize) -> Result<HttpMemory> {
    let args = [
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
    ];
    let per = |grown: u64, count: usize| grown as f64 / count.max(1) as f64 / 1024.0;
    let path = "/api/v1/namespaces/p9/pods";
    // HTTP/1.1 watches.
    let h1_watch = {
        let server = Server::start_bin(bin, &args)?;
        let mut conn = Conn::open(server.addr).await?;
        create_namespace(&mut conn, "p9").await?;
        let rv = list_rv(&mut conn, path).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss0 = server.rss();
        let pb = bar(n as u64, "opening HTTP/1.1 watches");
        let mut watches = Vec::with_capacity(n);
        for _ in 0..n {
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
        per(server.rss().saturating_sub(rss0), n)
    };
    // Idle keep-alive connections (one GET each), kept open past the default idle timeout.
    let h1_conn = {
        let server = Server::start_bin(bin, &args)?;
        let mut conn = Conn::open(server.addr).await?;
        conn.expect(200, "GET", "/readyz", JSON, b"").await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss0 = server.rss();
        let pb = bar(n as u64, "opening connections");
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            let mut c = Conn::open(server.addr).await?;
            c.expect(200, "GET", "/readyz", JSON, b"").await?;
            conns.push(c);
            pb.inc(1);
        }
        pb.finish_and_clear();
        tokio::time::sleep(Duration::from_secs(2)).await;
        per(server.rss().saturating_sub(rss0), n)
    };
    // HTTP/2: one stream on each connection, then the rest.
    let (h2_conn, h2_stream) = {
        let server = Server::start_bin(bin, &args)?;
        let mut conn = Conn::open(server.addr).await?;
        create_namespace(&mut conn, "p9").await?;
        let rv = list_rv(&mut conn, path).await?;
        let uri = format!(
            "http://{}{path}?watch=1&resourceVersion={rv}&timeoutSeconds=3600",
            server.addr
        );
        let conns = n / H2_STREAMS;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss0 = server.rss();
        let mut clients = Vec::with_capacity(conns);
        let mut streams = Vec::with_capacity(n);
        let pb = bar(n as u64, "opening HTTP/2 watch streams");
        for _ in 0..conns {
            let tcp = tokio::net::TcpStream::connect(server.addr)
                .await
                .map_err(|e| e.to_string())?;
            let (client, driver) = h2::client::handshake(tcp)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(driver);
            streams.push(h2_open_watch(&client, &uri, Duration::from_secs(60)).await?);
            clients.push(client);
            pb.inc(1);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss1 = server.rss();
        for client in &clients {
            for _ in 1..H2_STREAMS {
                streams.push(h2_open_watch(client, &uri, Duration::from_secs(60)).await?);
                pb.inc(1);
            }
        }
        pb.finish_and_clear();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss2 = server.rss();
        (
            per(rss1.saturating_sub(rss0), conns),
            per(rss2.saturating_sub(rss1), conns * (H2_STREAMS - 1)),
        )
    };
    Ok(HttpMemory {
        h1_watch,
        h1_conn,
        h2_stream,
        h2_conn,
    })
}
