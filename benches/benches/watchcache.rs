//! Watch cache benchmarks: applying events (with and without per-event snapshots), lists by
//! index / namespace / whole cluster over 150k pods, paginated lists, and reading the window.
//!
//! Results and the command that produced them: docs/benchmarks.md, "Watch cache".
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use listwatch_api::{FieldSelector, Object, SelectableFields};
use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, WatchEvent};
use listwatch_watchcache::{Config, Index, WatchCache};

const PODS: usize = 150_000;
const NODES: usize = 1_000;
const NAMESPACES: usize = 100;
const LIST_RV: u64 = 1_000_000;

fn fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName", "status.phase"])
}

/// A pod of realistic shape (~1.5 KB of JSON).
fn pod(i: usize, rv: u64) -> Object {
    let v = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("web-{i:06}"),
            "namespace": format!("ns-{:03}", i % NAMESPACES),
            "uid": format!("{i:08x}-0000-4000-8000-000000000000"),
            "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d4b9c8f5"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f5",
                "uid": "00000000-0000-0000-0000-000000000001", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": format!("node-{:04}", i % NODES),
            "restartPolicy": "Always",
            "serviceAccountName": "default",
            "containers": [{
                "name": "web", "image": "registry.example/web:1.27.3",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "production"}, {"name": "LOG", "value": "info"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "imagePullPolicy": "IfNotPresent"
            }],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running",
            "podIP": format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255),
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}]
        }
    });
    Object::from_value(v, &fields()).unwrap()
}

fn config(snapshots: bool) -> Config {
    Config::new("pods")
        .with_index(Index::field("spec.nodeName"))
        .with_index(Index::namespace())
        .with_snapshots(snapshots)
}

/// A cache listed with 150k pods, then 1000 modifications (so the window and snapshots are
/// populated as in a live cluster).
fn loaded(pods: &[Object], snapshots: bool) -> WatchCache {
    loaded_with(pods, config(snapshots))
}

fn loaded_with(pods: &[Object], config: Config) -> WatchCache {
    let mut cache = WatchCache::new(config);
    cache.replace(pods.to_vec(), LIST_RV).unwrap();
    for i in 0..1000u64 {
        let o = pods[(i as usize * 149) % PODS].with_resource_version(LIST_RV + 1 + i);
        cache
            .apply(WatchEvent::Modified {
                object: o,
                prev: None,
            })
            .unwrap();
    }
    cache
}

fn bench_apply(c: &mut Criterion, pods: &[Object]) {
    let mut group = c.benchmark_group("watchcache/apply");
    group.throughput(Throughput::Elements(1));
    // The window grows to its bound (102 400) while events are fresh; the third case caps it
    // at 1 000 to show how much of the snapshot cost is the size of what is kept.
    let cases = [
        ("modify_150k_snapshots", config(true)),
        ("modify_150k_no_snapshots", config(false)),
        (
            "modify_150k_snapshots_window_1000",
            config(true).with_capacity(1000, 1000, 1000),
        ),
    ];
    for (name, config) in cases {
        let mut cache = loaded_with(pods, config);
        let mut rv = cache.view().resource_version();
        let mut i = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                rv += 1;
                i = (i + 7919) % PODS;
                let o = pods[i].with_resource_version(rv);
                cache
                    .apply(WatchEvent::Modified {
                        object: o,
                        prev: None,
                    })
                    .unwrap();
            });
        });
    }
    group.finish();
}

fn bench_list(c: &mut Criterion, pods: &[Object]) {
    let cache = loaded(pods, true);
    let view = cache.reader().view();
    let all = Key::collection("pods", None).unwrap();
    let ns = Key::collection("pods", Some("ns-007")).unwrap();
    let mut group = c.benchmark_group("watchcache/list");

    let mut by_node = ListOptions::recursive();
    by_node.predicate.field = FieldSelector::equals("spec.nodeName", "node-0007");
    group.throughput(Throughput::Elements(
        view.list(&all, &by_node).unwrap().items.len() as u64,
    ));
    group.bench_function("index_node_150k", |b| {
        b.iter(|| black_box(view.list(&all, &by_node).unwrap()))
    });

    let mut by_node_exact = by_node.clone();
    by_node_exact.resource_version = Some(LIST_RV + 500);
    by_node_exact.resource_version_match = Some(ResourceVersionMatch::Exact);
    group.bench_function("node_selector_exact_snapshot_150k", |b| {
        b.iter(|| black_box(view.list(&all, &by_node_exact).unwrap()))
    });

    let plain = ListOptions::recursive();
    group.throughput(Throughput::Elements(
        view.list(&ns, &plain).unwrap().items.len() as u64,
    ));
    group.bench_function("namespace_150k", |b| {
        b.iter(|| black_box(view.list(&ns, &plain).unwrap()))
    });

    let mut by_ns_field = ListOptions::recursive();
    by_ns_field.predicate.field = FieldSelector::equals("metadata.namespace", "ns-007");
    group.bench_function("namespace_field_index_150k", |b| {
        b.iter(|| black_box(view.list(&all, &by_ns_field).unwrap()))
    });

    group.throughput(Throughput::Elements(PODS as u64));
    group.sample_size(20);
    group.bench_function("cluster_150k", |b| {
        b.iter(|| black_box(view.list(&all, &plain).unwrap()))
    });
    group.sample_size(100);

    let first = ListOptions {
        limit: Some(1000),
        ..ListOptions::recursive()
    };
    group.throughput(Throughput::Elements(1000));
    group.bench_function("paginated_limit_1000_first_page", |b| {
        b.iter(|| black_box(view.list(&all, &first).unwrap()))
    });
    // A page in the middle of the walk, read at the first page's version from its snapshot.
    let mut opts = first.clone();
    for _ in 0..75 {
        opts.continue_token = view.list(&all, &opts).unwrap().continue_token;
    }
    group.bench_function("paginated_limit_1000_continue_mid", |b| {
        b.iter(|| black_box(view.list(&all, &opts).unwrap()))
    });
    group.finish();
}

fn bench_events(c: &mut Criterion, pods: &[Object]) {
    let cache = loaded(pods, true);
    let view = cache.reader().view();
    let mut group = c.benchmark_group("watchcache/events_since");
    // The window holds the last 1000 events (capacity grew while they were fresh).
    let from = LIST_RV + 500;
    group.throughput(Throughput::Elements(500));
    group.bench_function("take_500_of_window", |b| {
        b.iter(|| black_box(view.events_since(from).unwrap()))
    });
    group.bench_function("take_and_walk_500", |b| {
        b.iter(|| {
            let events = view.events_since(from).unwrap();
            black_box(events.iter().map(|e| e.resource_version).sum::<u64>())
        })
    });
    group.finish();

    let reader = cache.reader();
    c.bench_function("watchcache/reader/take_view", |b| {
        b.iter(|| black_box(reader.view()))
    });
}

fn bench_replace(c: &mut Criterion, pods: &[Object]) {
    let mut group = c.benchmark_group("watchcache/replace");
    group.sample_size(10);
    group.throughput(Throughput::Elements(PODS as u64));
    group.bench_function("relist_150k", |b| {
        b.iter_batched(
            || (WatchCache::new(config(true)), pods.to_vec()),
            |(mut cache, list)| {
                cache.replace(list, LIST_RV).unwrap();
                cache
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let pods: Vec<Object> = (0..PODS).map(|i| pod(i, i as u64 + 1)).collect();
    bench_apply(c, &pods);
    bench_list(c, &pods);
    bench_events(c, &pods);
    bench_replace(c, &pods);
}

criterion_group!(watchcache, benches);
criterion_main!(watchcache);
