//! Consistent lists (no resource version) of one namespace through a pods Cacher whose cache
//! lags the backend's global revision because another resource (configmaps, in the same
//! backend) is being written, beside two baselines in the same run: the same list with no
//! writer, and the backend's own list (with and without the writer).
//!
//! ```text
//! cargo run --release -p listwatch-cacher --example consistent_list -- \
//!     [memstore|etcd] [PODS] [LISTS] [ROUNDS] [WRITES_PER_SEC] [GAP_MS] [ETCD_NOTIFY_MS] [PROGRESS_MS]
//! ```
//!
//! With `etcd`, a throwaway etcd is started (`$LISTWATCH_ETCD_BIN`, else `etcd` on `PATH`) with
//! `--experimental-watch-progress-notify-interval` of `ETCD_NOTIFY_MS` (default 100 ms): etcd
//! before 3.4.31 / 3.5.13 answers progress requests out of order (etcd issue 15220), so on such
//! an etcd the adapter only trusts the periodic notifications for a watch that has no events
//! of its own, and that interval bounds a consistent read's wait (see docs/etcd.md).
//!
//! `PROGRESS_MS` sets the cacher's `progress_request_interval` (default: upstream's 100 ms).
//!
//! Pods: 50 namespaces, 30 per node; each list reads one namespace. Every round runs `LISTS`
//! lists per case, `GAP_MS` apart (default 5 ms, more than the writer's period at the default
//! 500 writes/s, so that nearly every list finds the cache behind: lists back to back would
//! mostly find it just caught up by the previous one); the output is, per case, the median and p99 over all lists,
//! the spread (min..max) of the rounds' medians and p99s, how many lists found the cache
//! behind the backend's revision just before they started, and the writes the writer made.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use listwatch_api::{Object, SelectableFields};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_storage::{Key, ListOptions, Storage};

const NAMESPACES: usize = 50;

fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName"])
}

fn pod(i: usize) -> Object {
    let v = serde_json::json!({"kind":"Pod","apiVersion":"v1",
        "metadata":{"name":format!("pod-{i}"),"namespace":format!("ns-{}", i % NAMESPACES),
            "labels":{"app":format!("app-{}", i % 100)}},
        "spec":{"nodeName":format!("node-{}", i / 30),"containers":[{"name":"c","image":"busybox"}]},
        "status":{"phase":"Running"}});
    Object::from_value(v, &fields()).unwrap()
}

fn configmap(i: u64) -> Object {
    let v = serde_json::json!({"kind":"ConfigMap","apiVersion":"v1",
        "metadata":{"name":format!("cm-{i}"),"namespace":"writer"},
        "data":{"k":"v"}});
    Object::from_value(v, &fields()).unwrap()
}

/// Writes configmaps at `rate` per second until `stop`; returns how many and for how long.
async fn writer(
    store: Arc<dyn Storage>,
    rate: u64,
    next: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> (u64, Duration) {
    let start = Instant::now();
    let mut written = 0;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(1) as f64));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let i = next.fetch_add(1, Ordering::Relaxed);
        let key = Key::object("configmaps", Some("writer"), &format!("cm-{i}")).unwrap();
        store.create(&key, configmap(i), None).await.unwrap();
        written += 1;
    }
    (written, start.elapsed())
}

/// Per-list latencies of each round, and how many lists started with the cache behind.
#[derive(Default)]
struct Case {
    rounds: Vec<Vec<Duration>>,
    lagging: usize,
    writes: u64,
    writing: Duration,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

impl Case {
    fn print(&self, name: &str) {
        let mut all: Vec<Duration> = self.rounds.iter().flatten().copied().collect();
        all.sort();
        let (mut medians, mut p99s) = (Vec::new(), Vec::new());
        for r in &self.rounds {
            let mut r = r.clone();
            r.sort();
            medians.push(pct(&r, 0.5));
            p99s.push(pct(&r, 0.99));
        }
        medians.sort();
        p99s.sort();
        let rate = if self.writes > 0 {
            format!(
                ", writer {:.0}/s",
                self.writes as f64 / self.writing.as_secs_f64()
            )
        } else {
            String::new()
        };
        println!(
            "{name}: median {:.2?}, p99 {:.2?}, max {:.2?} over {} lists; round medians {:.2?}..{:.2?}, round p99s {:.2?}..{:.2?}; cache behind at start: {}{rate}",
            pct(&all, 0.5),
            pct(&all, 0.99),
            all[all.len() - 1],
            all.len(),
            medians[0],
            medians[medians.len() - 1],
            p99s[0],
            p99s[p99s.len() - 1],
            self.lagging,
        );
    }
}

/// How a round runs.
#[derive(Clone, Copy)]
struct Plan {
    lists: usize,
    /// Pause between two lists, so that the writer moves the global revision between them.
    gap: Duration,
}

/// One round of `plan.lists` consistent lists of one namespace (a different one each time).
async fn round(
    case: &mut Case,
    s: &dyn Storage,
    cacher: &Cacher,
    backend: &Arc<dyn Storage>,
    plan: Plan,
    writes: Option<(u64, &Arc<AtomicU64>)>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let task = writes.map(|(rate, next)| {
        tokio::spawn(writer(
            Arc::clone(backend),
            rate,
            Arc::clone(next),
            Arc::clone(&stop),
        ))
    });
    // Let the writer get going, so the cache is behind from the first list on.
    if task.is_some() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut times = Vec::with_capacity(plan.lists);
    for i in 0..plan.lists {
        tokio::time::sleep(plan.gap).await;
        let ns = format!("ns-{}", i % NAMESPACES);
        let key = Key::collection("pods", Some(&ns)).unwrap();
        let global = backend.current_resource_version().await.unwrap();
        if cacher.cache_resource_version() < global {
            case.lagging += 1;
        }
        let t = Instant::now();
        let list = s.list(&key, &ListOptions::recursive()).await.unwrap();
        times.push(t.elapsed());
        assert!(!list.items.is_empty());
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(task) = task {
        let (written, writing) = task.await.unwrap();
        case.writes += written;
        case.writing += writing;
    }
    case.rounds.push(times);
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "memstore".to_owned());
    let pods: usize = args.next().map_or(5_000, |a| a.parse().unwrap());
    let lists: usize = args.next().map_or(500, |a| a.parse().unwrap());
    let n: usize = args.next().map_or(5, |a| a.parse().unwrap());
    let rate: u64 = args.next().map_or(500, |a| a.parse().unwrap());
    let gap_ms: u64 = args.next().map_or(5, |a| a.parse().unwrap());
    let notify_ms: u64 = args.next().map_or(100, |a| a.parse().unwrap());
    let progress_ms: u64 = args.next().map_or(100, |a| a.parse().unwrap());
    let plan = Plan {
        lists,
        gap: Duration::from_millis(gap_ms),
    };

    let mut _etcd = None;
    let backend: Arc<dyn Storage> = match kind.as_str() {
        "memstore" => Arc::new(listwatch_memstore::MemStore::new()),
        "etcd" => {
            let server = listwatch_etcd::testing::EtcdServer::builder()
                .progress_notify_interval(Duration::from_millis(notify_ms))
                .start()
                .await
                .expect("start etcd");
            let store =
                listwatch_etcd::EtcdStore::new(server.client(), "/registry".to_owned(), fields());
            _etcd = Some(server);
            Arc::new(store)
        }
        other => panic!("unknown backend {other}: memstore or etcd"),
    };
    for i in 0..pods {
        let p = pod(i);
        let key = Key::object("pods", p.namespace(), p.name()).unwrap();
        backend.create(&key, p, None).await.unwrap();
    }
    let mut config = CacherConfig::new("pods").with_trigger("spec.nodeName");
    config.progress_request_interval = Duration::from_millis(progress_ms);
    let cacher = Cacher::new(Arc::clone(&backend), config);
    tokio::time::timeout(Duration::from_secs(60), cacher.wait_ready())
        .await
        .expect("cacher ready");
    let header = if kind == "etcd" {
        format!(", etcd progress notify interval {notify_ms} ms")
    } else {
        String::new()
    };
    println!(
        "{kind}: {pods} pods in {NAMESPACES} namespaces ({} per list), {lists} lists {gap_ms} ms apart x {n} rounds per case, writer {rate} configmaps/s, progress requested every {progress_ms} ms while a read waits{header}",
        pods / NAMESPACES
    );
    let next = Arc::new(AtomicU64::new(0));
    let mut cases: [Case; 4] = Default::default();
    for _ in 0..n {
        // Interleaved, so that the machine's load falls on every case alike.
        let [quiet, busy, backend_quiet, backend_busy] = &mut cases;
        round(quiet, &cacher, &cacher, &backend, plan, None).await;
        round(busy, &cacher, &cacher, &backend, plan, Some((rate, &next))).await;
        round(
            backend_quiet,
            backend.as_ref(),
            &cacher,
            &backend,
            plan,
            None,
        )
        .await;
        let w = Some((rate, &next));
        round(backend_busy, backend.as_ref(), &cacher, &backend, plan, w).await;
    }
    cases[0].print("cacher, no writer          ");
    cases[1].print("cacher, configmap writer   ");
    cases[2].print("backend list, no writer    ");
    cases[3].print("backend list, config writer");
}
