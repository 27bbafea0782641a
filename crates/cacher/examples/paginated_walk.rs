//! A full paginated walk of 150 000 pods by 500 through the Cacher's storage API, in process
//! (as upstream's BenchmarkListFromCacheSnapshot measures it), beside the same walk read from
//! the embedded store itself in the same run.
//!
//! ```text
//! cargo run --release -p listwatch-cacher --example paginated_walk -- [PODS] [ROUNDS] [WRITES]
//! ```
//!
//! Pods are upstream's benchmark shape: 30 per node, 5 000 nodes, 50 namespaces. Each round
//! is one walk (a consistent first page, then continue tokens to the end); the output is the
//! median and the spread (min..max) of the rounds, in wall-clock time and in this thread's CPU
//! time (everything runs on one thread, so the CPU time is the walk's cost without the waits
//! for a core that a shared machine adds), and of a first and a continued page.
//!
//! A third set of rounds walks the Cacher while WRITES pods (default 10) are created between
//! any two pages (each awaited into the cache before the next page): the continued pages then
//! read the state the first page pinned, while the live state moves on; only the list calls
//! are timed, and every walk must return exactly the pods that existed at its first page.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use listwatch_api::{Object, SelectableFields};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage};

const PAGE: u64 = 500;

fn pod(i: usize) -> Object {
    let v = serde_json::json!({"kind":"Pod","apiVersion":"v1",
        "metadata":{"name":format!("pod-{i}"),"namespace":format!("ns-{}", i % 50),
            "labels":{"app":format!("app-{}", i % 100)}},
        "spec":{"nodeName":format!("node-{}", i / 30),"containers":[{"name":"c","image":"busybox"}]},
        "status":{"phase":"Running"}});
    Object::from_value(v, &SelectableFields::new(["spec.nodeName"])).unwrap()
}

/// This thread's time on a CPU (the first field of `/proc/thread-self/schedstat`).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    Duration::from_nanos(
        stat.split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    )
}

/// One walk: (total, its CPU time, first page, the continued pages' median, items).
async fn walk(s: &dyn Storage) -> (Duration, Duration, Duration, Duration, usize) {
    let all = Key::collection("pods", None).unwrap();
    let mut opts = ListOptions {
        limit: Some(PAGE),
        ..ListOptions::recursive()
    };
    let start = Instant::now();
    let cpu = thread_cpu();
    let mut items = 0;
    let mut pages = Vec::new();
    loop {
        let t = Instant::now();
        let list = s.list(&all, &opts).await.unwrap();
        pages.push(t.elapsed());
        items += list.items.len();
        match list.continue_token {
            Some(token) => opts.continue_token = Some(token),
            None => break,
        }
    }
    let total = start.elapsed();
    let cpu = thread_cpu().saturating_sub(cpu);
    let first = pages[0];
    let mut rest = pages[1..].to_vec();
    rest.sort();
    let continued = rest.get(rest.len() / 2).copied().unwrap_or_default();
    (total, cpu, first, continued, items)
}

fn summary(mut d: Vec<Duration>) -> String {
    d.sort();
    format!(
        "median {:.2?} (min {:.2?}, max {:.2?})",
        d[d.len() / 2],
        d[0],
        d[d.len() - 1]
    )
}

/// One walk of the Cacher with `writes` creates between pages; only the list calls count.
/// Returns (the list calls' wall-clock, their CPU time, first page, continued median, items).
async fn walk_with_writes(
    cacher: &Cacher,
    writes: usize,
    created: &mut usize,
) -> (Duration, Duration, Duration, Duration, usize) {
    let all = Key::collection("pods", None).unwrap();
    let mut opts = ListOptions {
        limit: Some(PAGE),
        ..ListOptions::recursive()
    };
    let (mut total, mut cpu, mut items, mut pages) =
        (Duration::ZERO, Duration::ZERO, 0, Vec::new());
    loop {
        let (t, c) = (Instant::now(), thread_cpu());
        let list = cacher.list(&all, &opts).await.unwrap();
        let took = t.elapsed();
        cpu += thread_cpu().saturating_sub(c);
        total += took;
        pages.push(took);
        items += list.items.len();
        match list.continue_token {
            Some(token) => opts.continue_token = Some(token),
            None => break,
        }
        let mut last = 0;
        for _ in 0..writes {
            let v = serde_json::json!({"kind":"Pod","apiVersion":"v1",
                "metadata":{"name":format!("new-{created}"),"namespace":"ns-0"},
                "spec":{"nodeName":"node-0"}});
            let o = Object::from_value(v, &SelectableFields::new(["spec.nodeName"])).unwrap();
            let key = Key::object("pods", o.namespace(), o.name()).unwrap();
            last = cacher
                .create(&key, o, None)
                .await
                .unwrap()
                .resource_version();
            *created += 1;
        }
        cacher.wait_until_fresh(last).await.unwrap();
    }
    let mut rest = pages[1..].to_vec();
    rest.sort();
    let continued = rest.get(rest.len() / 2).copied().unwrap_or_default();
    (total, cpu, pages[0], continued, items)
}

async fn rounds(name: &str, s: &dyn Storage, n: usize, pods: usize) {
    let (mut totals, mut cpus, mut firsts, mut continued) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let (t, cpu, f, c, items) = walk(s).await;
        assert_eq!(items, pods);
        totals.push(t);
        cpus.push(cpu);
        firsts.push(f);
        continued.push(c);
    }
    println!("{name}: walk, wall-clock {}", summary(totals));
    println!("{name}: walk, CPU time {}", summary(cpus));
    println!("{name}:   first page {}", summary(firsts));
    println!("{name}:   continued page {}", summary(continued));
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let pods: usize = args.next().map_or(150_000, |a| a.parse().unwrap());
    let n: usize = args.next().map_or(7, |a| a.parse().unwrap());
    let store = Arc::new(MemStore::new());
    for i in 0..pods {
        let p = pod(i);
        let key = Key::object("pods", p.namespace(), p.name()).unwrap();
        store.create(&key, p, None).await.unwrap();
    }
    let cacher = Cacher::new(
        Arc::clone(&store) as Arc<dyn Storage>,
        CacherConfig::new("pods").with_trigger("spec.nodeName"),
    );
    cacher.wait_ready().await;
    println!("{pods} pods, pages of {PAGE}, {n} rounds each");
    rounds("cacher", &cacher, n, pods).await;
    rounds("embedded store", store.as_ref(), n, pods).await;
    let writes: usize = args.next().map_or(10, |a| a.parse().unwrap());
    let name = format!("cacher, {writes} creates between pages");
    let (mut totals, mut cpus, mut firsts, mut continued) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut created = 0;
    for _ in 0..n {
        let before = created;
        let (t, cpu, f, c, items) = walk_with_writes(&cacher, writes, &mut created).await;
        assert_eq!(
            items,
            pods + before,
            "the walk is the state at its first page"
        );
        totals.push(t);
        cpus.push(cpu);
        firsts.push(f);
        continued.push(c);
    }
    println!(
        "{name}: walk (list calls only), wall-clock {}",
        summary(totals)
    );
    println!("{name}: walk (list calls only), CPU time {}", summary(cpus));
    println!("{name}:   first page {}", summary(firsts));
    println!("{name}:   continued page {}", summary(continued));
}
