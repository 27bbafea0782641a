//! HTTP/2 flow control between watches on one etcd connection: the measurement behind the
//! adapter's choice (docs/etcd.md, "Flow control").
//!
//! Scenario (as `crates/etcd/tests/flow_control.rs`): one client, three watches whose
//! consumers never read, one that keeps up, and a `get` every 50 ms on the same client, while
//! another client writes 250 objects of 64 KiB (16 MiB). Each option of the adapter is run
//! for `ROUNDS` rounds against one local etcd (Debian's 3.4.23, data on tmpfs); reported per
//! option, median and range over the rounds: how long the live watch took for all 250 events
//! (or where it stopped within `LIMIT`), the slowest `get` and the failed ones, the time
//! the stalled watches took to hand over all events once read, and how many TCP connections
//! the client held to etcd.
//!
//! The options:
//! - `shared, 5 MiB conn window` — hyper's defaults (2 MiB stream, 5 MiB connection window)
//!   on one connection, no stall handling: what the adapter did before;
//! - `connection per watch` — the same windows, each watch (and the requests) on a client of
//!   its own;
//! - `max conn window` — one connection, the connection window at the protocol maximum
//!   (2³¹ − 1), stalled streams kept;
//! - `stall give-up 1 s` — one connection, hyper's windows, a watch whose consumer takes
//!   nothing for 1 s drops its etcd stream and resumes after its last revision once drained;
//! - `max window + give-up 1 s` — both (the adapter's defaults).
//!
//! Run: `cargo bench -p listwatch-benches --bench etcd_flow` (needs etcd on PATH or
//! `LISTWATCH_ETCD_BIN`).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::testing::EtcdServer;
use listwatch_etcd::{EtcdClient, EtcdConfig, EtcdStore, MAX_WINDOW};
use listwatch_storage::{GetOptions, Key, ListOptions, Storage, WatchEvent, WatchStream};

const ROUNDS: usize = 3;
const OBJECTS: usize = 250;
const SIZE: usize = 64 * 1024;
/// How long the live watch may take before the round counts as frozen.
const LIMIT: Duration = Duration::from_secs(20);
const MIB: u32 = 1024 * 1024;

#[derive(Clone, Copy)]
enum Layout {
    Shared,
    ConnectionPerWatch,
}

struct Variant {
    name: &'static str,
    layout: Layout,
    stream_window: u32,
    connection_window: u32,
    stall: Duration,
}

struct Round {
    /// Live watch: all events after this long, or stopped at this many.
    live: Result<Duration, usize>,
    slowest_get: Duration,
    failed_gets: usize,
    /// Time for the three stalled watches to hand over everything, once read.
    drain: Option<Duration>,
    connections: usize,
}

fn big_pod(name: &str) -> Object {
    let padding = "x".repeat(SIZE);
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"data":"{padding}"}}"#)
            .as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

fn store(config: &EtcdConfig, root: &str) -> EtcdStore {
    EtcdStore::new(
        EtcdClient::new(config.clone()).unwrap(),
        root,
        SelectableFields::none(),
    )
}

async fn watch_after(store: &EtcdStore, rv: u64) -> WatchStream {
    let opts = ListOptions {
        resource_version: Some(rv),
        ..ListOptions::recursive()
    };
    store
        .watch(&Key::collection("pods", Some("ns")).unwrap(), &opts)
        .await
        .unwrap()
}

/// Reads up to `n` events within `limit`; how many arrived.
async fn take(w: &mut WatchStream, n: usize, limit: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + limit;
    let mut got = 0;
    while got < n {
        match tokio::time::timeout_at(deadline, w.next()).await {
            Ok(Some(WatchEvent::Added(_))) => got += 1,
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => break,
        }
    }
    got
}

/// TCP connections from this process to `port`.
fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let hex = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            // remote address, state 01 = ESTABLISHED
            cols.get(2).is_some_and(|r| r.ends_with(&hex)) && cols.get(3) == Some(&"01")
        })
        .count()
}

async fn round(server: &EtcdServer, v: &Variant, n: usize) -> Round {
    let config = server
        .config()
        .windows(v.stream_window, v.connection_window)
        .watch_stall_timeout(v.stall);
    let root = format!("/flow-{}-{n}", v.name.replace(' ', "-"));
    let shared = store(&config, &root);
    let watcher = |_: usize| match v.layout {
        Layout::Shared => shared.clone(),
        Layout::ConnectionPerWatch => store(&config, &root),
    };
    let start = shared.current_resource_version().await.unwrap();
    let mut stalled = Vec::new();
    for i in 0..3 {
        stalled.push(watch_after(&watcher(i), start).await);
    }
    let mut live = watch_after(&watcher(3), start).await;
    let requests = watcher(4);

    let writer = EtcdStore::new(server.client(), root.as_str(), SelectableFields::none());
    let writes = tokio::spawn(async move {
        for i in 0..OBJECTS {
            let name = format!("p{i:03}");
            writer
                .create(&key(&name), big_pod(&name), None)
                .await
                .unwrap();
        }
    });
    let stats = Arc::new(Mutex::new((Duration::ZERO, 0usize)));
    let probe = {
        let stats = Arc::clone(&stats);
        tokio::spawn(async move {
            loop {
                let t = Instant::now();
                let got = requests
                    .get(
                        &key("p000"),
                        &GetOptions {
                            ignore_not_found: true,
                            ..GetOptions::default()
                        },
                    )
                    .await;
                if let Ok(mut s) = stats.lock() {
                    s.0 = s.0.max(t.elapsed());
                    s.1 += usize::from(got.is_err());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let t = Instant::now();
    let got = take(&mut live, OBJECTS, LIMIT).await;
    let live = if got == OBJECTS {
        Ok(t.elapsed())
    } else {
        Err(got)
    };
    let connections = connections_to(server.addr().port());
    let _ = tokio::time::timeout(LIMIT, writes).await;
    probe.abort();
    let (slowest_get, failed_gets) = stats.lock().map(|s| *s).unwrap_or_default();
    let t = Instant::now();
    let mut drained = true;
    for w in &mut stalled {
        drained &= take(w, OBJECTS, LIMIT).await == OBJECTS;
    }
    let drain = drained.then(|| t.elapsed());
    Round {
        live,
        slowest_get,
        failed_gets,
        drain,
        connections,
    }
}

fn median_range(mut xs: Vec<f64>) -> String {
    if xs.is_empty() {
        return "–".into();
    }
    xs.sort_by(f64::total_cmp);
    let mid = xs[xs.len() / 2];
    format!("{mid:.2} ({:.2}–{:.2})", xs[0], xs[xs.len() - 1])
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let _in_runtime = rt.enter();
    let server = rt.block_on(EtcdServer::start()).unwrap();
    let never = Duration::from_secs(24 * 3600);
    let variants = [
        Variant {
            name: "shared, 5 MiB conn window",
            layout: Layout::Shared,
            stream_window: 2 * MIB,
            connection_window: 5 * MIB,
            stall: never,
        },
        Variant {
            name: "connection per watch",
            layout: Layout::ConnectionPerWatch,
            stream_window: 2 * MIB,
            connection_window: 5 * MIB,
            stall: never,
        },
        Variant {
            name: "max conn window",
            layout: Layout::Shared,
            stream_window: 2 * MIB,
            connection_window: MAX_WINDOW,
            stall: never,
        },
        Variant {
            name: "stall give-up 1 s",
            layout: Layout::Shared,
            stream_window: 2 * MIB,
            connection_window: 5 * MIB,
            stall: Duration::from_secs(1),
        },
        Variant {
            name: "max window + give-up 1 s",
            layout: Layout::Shared,
            stream_window: 2 * MIB,
            connection_window: MAX_WINDOW,
            stall: Duration::from_secs(1),
        },
    ];
    println!(
        "| option | live watch, 250 events (s) | slowest get (s) | failed gets | stalled watches drained (s) | connections |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for v in &variants {
        let rounds: Vec<Round> = (0..ROUNDS)
            .map(|n| rt.block_on(round(&server, v, n)))
            .collect();
        let done: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.live.ok())
            .map(|d| d.as_secs_f64())
            .collect();
        let stuck: Vec<String> = rounds
            .iter()
            .filter_map(|r| r.live.err())
            .map(|n| n.to_string())
            .collect();
        let live = if stuck.is_empty() {
            median_range(done)
        } else {
            format!(
                "stopped at {} of 250 within {}s in {}/{ROUNDS} rounds",
                stuck.join(", "),
                LIMIT.as_secs(),
                stuck.len()
            )
        };
        let gets = median_range(rounds.iter().map(|r| r.slowest_get.as_secs_f64()).collect());
        let failed: Vec<String> = rounds.iter().map(|r| r.failed_gets.to_string()).collect();
        let drains: Vec<f64> = rounds
            .iter()
            .filter_map(|r| r.drain)
            .map(|d| d.as_secs_f64())
            .collect();
        let drained = if drains.len() == ROUNDS {
            median_range(drains)
        } else {
            format!("incomplete in {}/{ROUNDS}", ROUNDS - drains.len())
        };
        let conns: Vec<String> = rounds.iter().map(|r| r.connections.to_string()).collect();
        println!(
            "| {} | {live} | {gets} | {} | {drained} | {} |",
            v.name,
            failed.join(", "),
            conns.join(", ")
        );
    }
}
