//! Embedded store: write cost, and watch fan-out of one write stream to 1k watchers.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_memstore::MemStore;
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

async fn put(store: &MemStore, key: &Key, obj: &Object) {
    let mut update = |_: Option<&Object>| Ok(obj.clone().into());
    if let Err(e) = store
        .guaranteed_update(key, None, true, &mut update, None)
        .await
    {
        panic!("write failed: {e}");
    }
}

fn write(c: &mut Criterion) {
    let rt = runtime();
    let store = MemStore::new();
    // Two versions of each object, written alternately, so that no write is a no-op.
    let objects: Vec<(Key, [Object; 2])> = (0..1000)
        .map(|i| {
            let name = format!("web-{i}");
            let key = Key::object("pods", Some("default"), &name).unwrap_or_else(|e| panic!("{e}"));
            let versions = [
                listwatch_benches::pod("default", &name, &format!("node-{}", i % 100)),
                listwatch_benches::pod("default", &name, &format!("node-{}", (i + 1) % 100)),
            ];
            (key, versions)
        })
        .collect();
    let mut g = c.benchmark_group("memstore");
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    g.bench_function("guaranteed_update", |b| {
        b.to_async(&rt).iter(|| {
            i += 1;
            let (key, versions) = &objects[i % objects.len()];
            put(&store, key, &versions[(i / objects.len()) % 2])
        })
    });
    g.finish();
}

/// Time for N writes to reach all of 1000 watchers (every watcher drains every event).
fn fan_out(c: &mut Criterion) {
    const WATCHERS: usize = 1000;
    let rt = runtime();
    let mut g = c.benchmark_group("memstore_fanout_1k_watchers");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(WATCHERS as u64));
    g.bench_function("write_to_all_delivered", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let store = MemStore::new();
                let key =
                    Key::object("pods", Some("default"), "web").unwrap_or_else(|e| panic!("{e}"));
                let versions = [
                    listwatch_benches::pod("default", "web", "node-1"),
                    listwatch_benches::pod("default", "web", "node-2"),
                ];
                put(&store, &key, &versions[0]).await;
                let all = Key::collection("pods", None).unwrap_or_else(|e| panic!("{e}"));
                let opts = ListOptions {
                    resource_version: Some(store.current_revision()),
                    ..ListOptions::recursive()
                };
                let target = store.current_revision() + iters;
                let mut tasks = Vec::with_capacity(WATCHERS);
                for _ in 0..WATCHERS {
                    let mut w = store
                        .watch(&all, &opts)
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                    tasks.push(tokio::spawn(async move {
                        while let Some(ev) = w.next().await {
                            if let WatchEvent::Modified { object, .. } = ev
                                && object.resource_version() >= target
                            {
                                return;
                            }
                        }
                    }));
                }
                let start = Instant::now();
                for i in 0..iters {
                    // Alternate versions: every write is a real change.
                    put(&store, &key, &versions[usize::from(i % 2 == 0)]).await;
                }
                for t in tasks {
                    let _ = t.await;
                }
                start.elapsed()
            })
        })
    });
    g.finish();
}

criterion_group!(benches, write, fan_out);
criterion_main!(benches);
