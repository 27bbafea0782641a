//! The embedded store's hot paths, before (the store of commit db26e38) and after (the current
//! listwatch-memstore), in one run, in memory, through the `Storage` trait:
//!
//! - a paginated walk of 150 000 pods (100 namespaces), limit 1000: the whole walk and each
//!   continued page (the old store counted the whole remaining range for every page);
//! - lease writes while two tasks list all 150 000 pods in a loop (the old store had one lock
//!   for everything; now each resource has its own);
//! - pod writes in one namespace while 1 000 idle watchers watch pods of other namespaces (the
//!   old store woke every watcher on every write; now only watchers of the written resource
//!   and namespace), against the same writes with no watcher.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_storage::{Key, ListOptions, Storage};

type Store = Arc<dyn Storage>;

fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName", "status.phase"])
}

fn pod(ns: &str, name: &str, n: usize) -> Object {
    let v = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}"),
            "labels": {"app": format!("app-{}", n % 50), "tier": "backend"}},
        "spec": {"nodeName": format!("node-{}", n % 1000),
            "containers": [{"name": "main", "image": "registry.example/app:1.2.3",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "env": [{"name": "A", "value": "x".repeat(400)}]}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1"}
    });
    Object::from_value(v, &fields()).unwrap()
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!(
        "median {:.1}  [min {:.1}  max {:.1}]  ({} samples)",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1],
        v.len()
    )
}

fn pct(v: &mut [f64], p: usize) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[(v.len() * p / 100).min(v.len() - 1)]
}

async fn fill(store: &Store, n: usize) {
    for i in 0..n {
        let ns = format!("ns-{}", i % 100);
        let name = format!("p-{i}");
        let key = Key::object("pods", Some(&ns), &name).unwrap();
        store.create(&key, pod(&ns, &name, i), None).await.unwrap();
    }
}

/// (walk ms, each continued page in µs).
async fn walk(store: &Store) -> (f64, Vec<f64>) {
    let all = Key::collection("pods", None).unwrap();
    let start = Instant::now();
    let mut opts = ListOptions {
        limit: Some(1000),
        ..ListOptions::recursive()
    };
    let (mut n, mut pages) = (0, Vec::new());
    loop {
        let t = Instant::now();
        let page = store.list(&all, &opts).await.unwrap();
        if opts.continue_token.is_some() {
            pages.push(t.elapsed().as_secs_f64() * 1e6);
        }
        n += page.items.len();
        match page.continue_token {
            Some(c) => opts.continue_token = Some(c),
            None => break,
        }
    }
    assert_eq!(n, 150_000);
    (start.elapsed().as_secs_f64() * 1000.0, pages)
}

/// Lease write latencies (µs) while two tasks list all pods, and how many lists completed
/// meanwhile. The writer is a task too, as a request handler is.
async fn leases_under_lists(store: &Store, writes: usize) -> (Vec<f64>, usize) {
    let stop = Arc::new(AtomicBool::new(false));
    let all = Key::collection("pods", None).unwrap();
    let listers: Vec<_> = (0..2)
        .map(|_| {
            let (store, stop, all) = (Arc::clone(store), Arc::clone(&stop), all.clone());
            tokio::spawn(async move {
                let mut lists = 0;
                while !stop.load(Ordering::Relaxed) {
                    let l = store.list(&all, &ListOptions::recursive()).await.unwrap();
                    assert_eq!(l.items.len(), 150_000);
                    lists += 1;
                    tokio::task::yield_now().await;
                }
                lists
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let key = Key::object("leases", Some("kube-node-lease"), "l").unwrap();
    let writer = {
        let store = Arc::clone(store);
        tokio::spawn(async move {
            let mut lat = Vec::with_capacity(writes);
            for i in 0..writes {
                let obj = Object::from_value(
            serde_json::json!({"metadata":{"name":"l","namespace":"kube-node-lease"},"spec":{"renewTime":i}}),
            &SelectableFields::none(),
        )
        .unwrap();
                let t = Instant::now();
                let mut f = |_: Option<&Object>| Ok(obj.clone().into());
                store
                    .guaranteed_update(&key, None, true, &mut f, None)
                    .await
                    .unwrap();
                lat.push(t.elapsed().as_secs_f64() * 1e6);
                // About one lease renewal per millisecond, so that lists run in between.
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            lat
        })
    };
    let lat = writer.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    let mut lists = 0;
    for l in listers {
        lists += l.await.unwrap();
    }
    (lat, lists)
}

/// CPU seconds (user + system) this process has used so far (`/proc/self/stat`).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

/// Pod writes in namespace `hot` with `watchers` idle watchers of other namespaces' pods:
/// (writes/s, CPU µs per write, the watchers' included).
async fn writes_beside_watchers(store: Store, watchers: usize, writes: usize) -> (f64, f64) {
    let mut tasks = Vec::new();
    for w in 0..watchers {
        let key = Key::collection("pods", Some(&format!("other-{w}"))).unwrap();
        let mut stream = store.watch(&key, &ListOptions::recursive()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            while stream.next().await.is_some() {}
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let objs: Vec<Object> = (0..writes)
        .map(|i| pod("hot", &format!("p-{}", i % 100), i))
        .collect();
    let (start, cpu) = (Instant::now(), cpu_seconds());
    for (i, obj) in objs.into_iter().enumerate() {
        let key = Key::object("pods", Some("hot"), &format!("p-{}", i % 100)).unwrap();
        let mut f = |_: Option<&Object>| Ok(obj.clone().into());
        store
            .guaranteed_update(&key, None, true, &mut f, None)
            .await
            .unwrap();
    }
    let rate = writes as f64 / start.elapsed().as_secs_f64();
    // Let woken watchers finish what the writes gave them before reading the CPU.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let cpu_per_write = (cpu_seconds() - cpu) * 1e6 / writes as f64;
    for t in tasks {
        t.abort();
    }
    (rate, cpu_per_write)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let stores: [(&str, fn() -> Store); 2] = [
        ("before (db26e38)", || {
            Arc::new(listwatch_memstore_old::MemStore::new())
        }),
        ("after (current)", || {
            Arc::new(listwatch_memstore::MemStore::new())
        }),
    ];
    for (name, make) in stores {
        let store = make();
        let t = Instant::now();
        fill(&store, 150_000).await;
        println!(
            "{name}: filled 150000 pods in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let (mut walks, mut pages) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (ms, p) = walk(&store).await;
            walks.push(ms);
            pages.extend(p);
        }
        println!(
            "{name}: paginated walk of 150000 pods, limit 1000 (ms): {}",
            stats(walks)
        );
        println!("{name}: one continued page of 1000 (µs): {}", stats(pages));
        let (mut lat, lists) = leases_under_lists(&store, 200 * rounds).await;
        println!(
            "{name}: lease write while 2 tasks list all 150000 pods (µs): p50 {:.0}  p99 {:.0}  max {:.0}  ({} writes, {lists} lists meanwhile)",
            pct(&mut lat, 50),
            pct(&mut lat, 99),
            pct(&mut lat, 100),
            lat.len()
        );
        drop(store);
        let (mut none, mut many) = (Vec::new(), Vec::new());
        let (mut none_cpu, mut many_cpu) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (r, c) = writes_beside_watchers(make(), 0, 20_000).await;
            none.push(r);
            none_cpu.push(c);
            let (r, c) = writes_beside_watchers(make(), 1000, 20_000).await;
            many.push(r);
            many_cpu.push(c);
        }
        println!("{name}: pod writes/s, no watcher: {}", stats(none));
        println!(
            "{name}:   CPU µs per write (incl. the 200 ms after): {}",
            stats(none_cpu)
        );
        println!(
            "{name}: pod writes/s, 1000 idle watchers of other namespaces: {}",
            stats(many)
        );
        println!(
            "{name}:   CPU µs per write (incl. the 200 ms after): {}",
            stats(many_cpu)
        );
    }
}
