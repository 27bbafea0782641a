//! The etcd adapter against a local etcd started by the bench (Debian's `etcd-server`, data on
//! tmpfs): write latency (create, update), full and paginated lists of 10k and 150k pods, and
//! watch delivery latency (from the start of a write to the event reaching the watcher).
#![allow(missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::EtcdStore;
use listwatch_etcd::testing::EtcdServer;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};

fn runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("cannot build a runtime: {e}"),
    }
}

fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName", "status.phase"])
}

/// A pod of about 1 KiB, the size of a small real one.
fn pod(ns: &str, name: &str, i: u64) -> Object {
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"{ns}","uid":"00000000-0000-0000-0000-{i:012}","labels":{{"app":"web-{}","tier":"frontend"}},"annotations":{{"kubernetes.io/config.seen":"2024-01-01T00:00:00Z"}},"creationTimestamp":"2024-01-01T00:00:00Z"}},"spec":{{"nodeName":"node-{}","containers":[{{"name":"web","image":"registry.example/web:1.2.3","ports":[{{"containerPort":8080,"protocol":"TCP"}}],"resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}},"limits":{{"cpu":"500m","memory":"256Mi"}}}},"env":[{{"name":"MODE","value":"production"}},{{"name":"LOG_LEVEL","value":"info"}}]}}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default"}},"status":{{"phase":"Running","podIP":"10.0.{}.{}","conditions":[{{"type":"Ready","status":"True"}}]}}}}"#,
        i % 50,
        i % 500,
        (i / 250) % 250,
        i % 250
    );
    match Object::from_json(json.as_bytes(), &fields()) {
        Ok(o) => o,
        Err(e) => panic!("bad pod: {e}"),
    }
}

fn key(ns: &str, name: &str) -> Key {
    match Key::object("pods", Some(ns), name) {
        Ok(k) => k,
        Err(e) => panic!("bad key: {e}"),
    }
}

async fn start() -> EtcdServer {
    match EtcdServer::start().await {
        Ok(s) => s,
        Err(e) => panic!("the etcd bench needs a local etcd: {e}"),
    }
}

/// Writes `n` pods over 10 namespaces under `root`, 128 at a time.
async fn populate(store: &EtcdStore, n: u64) {
    let ids: Vec<u64> = (0..n).collect();
    for chunk in ids.chunks(128) {
        let writes = chunk.iter().map(|&i| {
            let ns = format!("ns-{}", i % 10);
            let name = format!("pod-{i:06}");
            async move {
                if let Err(e) = store
                    .create(&key(&ns, &name), pod(&ns, &name, i), None)
                    .await
                {
                    panic!("populate: {e}");
                }
            }
        });
        futures::future::join_all(writes).await;
    }
}

fn write(c: &mut Criterion) {
    let rt = runtime();
    // Clients spawn their connection tasks on the runtime they are built in.
    let _in_runtime = rt.enter();
    let server = rt.block_on(start());
    let store = EtcdStore::new(server.client(), "/bench-write", fields());
    let next = AtomicU64::new(0);
    let mut g = c.benchmark_group("etcd/write");
    g.throughput(Throughput::Elements(1));
    g.bench_function("create", |b| {
        b.to_async(&rt).iter(|| {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let name = format!("pod-{i}");
            let store = &store;
            async move {
                if let Err(e) = store
                    .create(&key("ns", &name), pod("ns", &name, i), None)
                    .await
                {
                    panic!("create: {e}");
                }
            }
        });
    });
    let target = key("ns", "updated");
    rt.block_on(async {
        if let Err(e) = store.create(&target, pod("ns", "updated", 0), None).await {
            panic!("create: {e}");
        }
    });
    g.bench_function("guaranteed_update", |b| {
        b.to_async(&rt).iter(|| {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let (store, target) = (&store, &target);
            async move {
                let mut update = |_: Option<&Object>| Ok(pod("ns", "updated", i).into());
                if let Err(e) = store
                    .guaranteed_update(target, None, false, &mut update, None)
                    .await
                {
                    panic!("update: {e}");
                }
            }
        });
    });
    g.finish();
}

fn list(c: &mut Criterion) {
    let rt = runtime();
    // Clients spawn their connection tasks on the runtime they are built in.
    let _in_runtime = rt.enter();
    let server = rt.block_on(start());
    let mut g = c.benchmark_group("etcd/list");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    for n in [10_000u64, 150_000] {
        let store = EtcdStore::new(server.client(), format!("/bench-list-{n}"), fields());
        rt.block_on(populate(&store, n));
        let all = match Key::collection("pods", None) {
            Ok(k) => k,
            Err(e) => panic!("{e}"),
        };
        g.throughput(Throughput::Elements(n));
        g.bench_with_input(BenchmarkId::new("all", n), &n, |b, &n| {
            b.to_async(&rt).iter(|| {
                let (store, all) = (&store, &all);
                async move {
                    match store.list(all, &ListOptions::recursive()).await {
                        Ok(l) => assert_eq!(l.items.len() as u64, n),
                        Err(e) => panic!("list: {e}"),
                    }
                }
            });
        });
        g.bench_with_input(BenchmarkId::new("pages_of_500", n), &n, |b, &n| {
            b.to_async(&rt).iter(|| {
                let (store, all) = (&store, &all);
                async move {
                    let mut token = None;
                    let mut seen = 0u64;
                    loop {
                        let opts = ListOptions {
                            limit: Some(500),
                            continue_token: token,
                            ..ListOptions::recursive()
                        };
                        let page = match store.list(all, &opts).await {
                            Ok(p) => p,
                            Err(e) => panic!("list: {e}"),
                        };
                        seen += page.items.len() as u64;
                        token = page.continue_token;
                        if token.is_none() {
                            break;
                        }
                    }
                    assert_eq!(seen, n);
                }
            });
        });
    }
    g.finish();
}

fn watch_delivery(c: &mut Criterion) {
    let rt = runtime();
    // Clients spawn their connection tasks on the runtime they are built in.
    let _in_runtime = rt.enter();
    let server = rt.block_on(start());
    let store = EtcdStore::new(server.client(), "/bench-watch", fields());
    let collection = match Key::collection("pods", Some("ns")) {
        Ok(k) => k,
        Err(e) => panic!("{e}"),
    };
    let w = rt.block_on(async {
        let rv = match store.current_resource_version().await {
            Ok(rv) => rv,
            Err(e) => panic!("{e}"),
        };
        let opts = ListOptions {
            resource_version: Some(rv),
            ..ListOptions::recursive()
        };
        match store.watch(&collection, &opts).await {
            Ok(w) => w,
            Err(e) => panic!("watch: {e}"),
        }
    });
    // The watch is shared by every batch; criterion runs batches one at a time.
    let w = tokio::sync::Mutex::new(w);
    let next = AtomicU64::new(0);
    let mut g = c.benchmark_group("etcd/watch");
    g.throughput(Throughput::Elements(1));
    g.bench_function("delivery_latency", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (store, w) = (&store, &w);
            let first = next.fetch_add(iters, Ordering::Relaxed);
            async move {
                let mut w = w.lock().await;
                let mut total = Duration::ZERO;
                for i in first..first + iters {
                    let name = format!("pod-{i}");
                    let started = Instant::now();
                    if let Err(e) = store
                        .create(&key("ns", &name), pod("ns", &name, i), None)
                        .await
                    {
                        panic!("create: {e}");
                    }
                    match w.next().await {
                        Some(WatchEvent::Added(o)) => assert_eq!(o.name(), name),
                        other => panic!("unexpected {other:?}"),
                    }
                    total += started.elapsed();
                }
                total
            }
        });
    });
    g.finish();
}

criterion_group!(benches, write, list, watch_delivery);
criterion_main!(benches);
