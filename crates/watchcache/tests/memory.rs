//! Bytes held per cached object (after a list, and through a full window of events), and
//! what a pinned past state keeps, measured with a counting global allocator (this file is its
//! own test binary, so the allocator is test-only). The allocator counts every thread, so this
//! binary holds a single test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;

use listwatch_api::{Object, SelectableFields};
use listwatch_storage::{Key, ListOptions, WatchEvent};
use listwatch_watchcache::{Config, Index, WatchCache};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const PODS: usize = 10_000;

/// A pod shaped like real ones (labels, annotations, owner reference, managed fields, a
/// couple of containers with env, mounts and resources, status with conditions), its size
/// spread over roughly 3 to 10 KB by the number of env vars and annotations.
fn pod_json(i: usize, rv: u64) -> Vec<u8> {
    let ns = format!("team-{}", i % 50);
    let name = format!("web-{i:05}-7c9f8d6b5-{:05x}", i * 7919 % 0xfffff);
    let node = format!("node-{:04}", i % 1000);
    let extra = i * 37 % 48;
    let env: Vec<_> = (0..4 + extra)
        .map(|j| serde_json::json!({"name": format!("SETTING_{j}"), "value": format!("value-{i}-{j}-abcdefgh")}))
        .collect();
    let annotations: serde_json::Map<String, serde_json::Value> = (0..2 + extra / 10)
        .map(|j| {
            (
                format!("example.com/annotation-{j}"),
                format!("{:x}", i * 31 + j).repeat(4).into(),
            )
        })
        .collect();
    let container = |c: &str| {
        serde_json::json!({
            "name": c,
            "image": format!("registry.example.com/{c}:1.{}.{}", i % 10, i % 7),
            "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
            "env": env,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
            "volumeMounts": [
                {"name": "config", "mountPath": "/etc/config", "readOnly": true},
                {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
            ],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        })
    };
    let conditions: Vec<_> = ["Initialized", "Ready", "ContainersReady", "PodScheduled"]
        .iter()
        .map(|t| {
            serde_json::json!({"type": t, "status": "True", "lastProbeTime": null,
                "lastTransitionTime": "2026-11-01T10:00:05Z"})
        })
        .collect();
    let v = serde_json::json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": format!("web-{i:05}-7c9f8d6b5-"),
            "namespace": ns,
            "uid": format!("{:08x}-1f2e-4d3c-8b7a-{:012x}", i, i * 104_729),
            "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-11-01T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7c9f8d6b5", "team": ns, "tier": "frontend"},
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("web-{i:05}-7c9f8d6b5"),
                "uid": format!("{:08x}-aaaa-bbbb-cccc-{:012x}", i / 3, i), "controller": true, "blockOwnerDeletion": true,
            }],
            "managedFields": [{
                "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                "time": "2026-11-01T10:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}},
            }],
        },
        "spec": {
            "nodeName": node,
            "containers": [container("app"), container("sidecar")],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "volumes": [{"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": format!("10.0.{}.{}", i / 250 % 250, i % 250),
            "podIP": format!("10.244.{}.{}", i / 250 % 250, i % 250),
            "startTime": "2026-11-01T10:00:01Z",
            "conditions": conditions,
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "started": true,
                "image": "registry.example.com/app:1.2.3", "imageID": format!("registry.example.com/app@sha256:{:064x}", i),
                "containerID": format!("containerd://{:064x}", i * 3), "state": {"running": {"startedAt": "2026-11-01T10:00:04Z"}}}],
            "qosClass": "Burstable",
        },
    });
    serde_json::to_vec(&v).unwrap()
}

fn held_bytes(region: &Region<'_, System>) -> isize {
    // Reallocations already count their growth in `bytes_allocated` (shrinkage in
    // `bytes_deallocated`).
    let s = region.change();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

#[test]
fn cached_pods_hold_at_most_one_and_a_half_times_their_json() {
    let fields = SelectableFields::new(["spec.nodeName", "status.phase"]);
    let config = || {
        Config::new("pods")
            .with_index(Index::field("spec.nodeName"))
            .with_index(Index::namespace())
    };
    let inputs: Vec<Vec<u8>> = (0..PODS).map(|i| pod_json(i, i as u64 + 1)).collect();
    let json_bytes: usize = inputs.iter().map(Vec::len).sum();
    let (smallest, largest) = (
        inputs.iter().map(Vec::len).min().unwrap(),
        inputs.iter().map(Vec::len).max().unwrap(),
    );
    assert!(
        smallest >= 3_000 && largest <= 10_500,
        "pods of {smallest}..{largest} bytes"
    );

    // A list, as the reflector's relist delivers it.
    let mut cache = WatchCache::new(config());
    let region = Region::new(GLOBAL);
    let objects: Vec<Object> = inputs
        .iter()
        .map(|j| Object::from_json(j, &fields).unwrap())
        .collect();
    cache.replace(objects.clone(), PODS as u64 + 1).unwrap();
    // The bytes of `objects`' own vector are not the cache's.
    let listed = held_bytes(&region) - (objects.capacity() * size_of::<Object>()) as isize;
    assert_eq!(cache.view().len(), PODS);
    let ratio = listed as f64 / json_bytes as f64;
    eprintln!(
        "listed {PODS} pods: {json_bytes} JSON bytes ({smallest}..{largest} each), {listed} held, \
         ratio {ratio:.3}, {} bytes/object",
        listed / PODS as isize
    );
    assert!(
        ratio <= 1.5,
        "held {listed} bytes for {json_bytes} bytes of JSON (ratio {ratio:.3})"
    );
    drop(cache);
    // The objects stay alive (parsed once, to keep this test quick): from here on the regions
    // measure what a cache adds to them, and `listed` stands for them plus a state.

    // The same pods arriving one event at a time, through a window kept full (its maximum is
    // under the number of events): the window shares the objects, and no past state is
    // copied per event (snapshots on, as by default).
    let held = watch_all(config().with_capacity(100, 100, WINDOW), &objects);
    let evented = listed + held - state_only(config(), &objects);
    let ratio = evented as f64 / json_bytes as f64;
    eprintln!(
        "watched {PODS} pods through a full window of {WINDOW}: {evented} held, ratio {ratio:.3}"
    );
    assert!(
        ratio <= 1.5,
        "held {evented} bytes for {json_bytes} bytes of JSON (ratio {ratio:.3})"
    );
    let without = listed
        + watch_all(
            config()
                .with_capacity(100, 100, WINDOW)
                .with_snapshots(false),
            &objects,
        )
        - state_only(config(), &objects);
    eprintln!("the same with snapshots off: {without} held");
    assert!(
        evented <= without + (PODS as isize) * 8,
        "snapshots cost nothing per event ({evented} vs {without})"
    );

    // A pinned past state: what it keeps once the writer changes the state under it, against
    // the cache's estimate (the byte budget relies on it), for a few changes and for changes
    // all over the state.
    for changes in [100, 1000, PODS] {
        let (measured, estimated) = pinned_cost(config(), &objects, changes);
        eprintln!(
            "a pin after {changes} changes keeps {measured} bytes; the cache estimates {estimated}"
        );
        let off = estimated as f64 / measured as f64;
        assert!(
            (0.5..2.0).contains(&off),
            "estimated {estimated} pinned bytes, measured {measured} after {changes} changes"
        );
    }
}

/// The window's maximum in the memory test: under the number of events, so it fills.
const WINDOW: usize = 4096;

/// Applies every (already parsed) pod as an `Added` event to a fresh cache; the bytes the
/// cache then holds beyond the objects.
fn watch_all(config: Config, objects: &[Object]) -> isize {
    let mut cache = WatchCache::new(config);
    cache.replace(Vec::new(), 1).unwrap();
    let region = Region::new(GLOBAL);
    for (i, o) in objects.iter().enumerate() {
        cache
            .apply(WatchEvent::Added(o.with_resource_version(i as u64 + 2)))
            .unwrap();
    }
    let view = cache.view();
    assert_eq!(view.window().len(), view.capacity(), "the window is full");
    assert_eq!(view.memory().snapshot_bytes, 0);
    held_bytes(&region)
}

/// Lists `objects`, then changes `changes` of them spread over the key space (the same pods
/// at new versions, made before measuring) with and without a pin taken before the changes:
/// the bytes the pin kept, and the cache's estimate of them.
fn pinned_cost(config: Config, objects: &[Object], changes: usize) -> (isize, usize) {
    let n = objects.len() as u64;
    let changed: Vec<Object> = (0..changes)
        .map(|i| objects[i * 7919 % objects.len()].with_resource_version(n + 2 + i as u64))
        .collect();
    let run = |pin: bool| {
        let mut cache = WatchCache::new(config.clone());
        cache.replace(objects.to_vec(), n + 1).unwrap();
        let all = Key::collection("pods", None).unwrap();
        let region = Region::new(GLOBAL);
        if pin {
            let page = cache
                .view()
                .list(
                    &all,
                    &ListOptions {
                        limit: Some(1),
                        ..ListOptions::recursive()
                    },
                )
                .unwrap();
            assert!(page.continue_token.is_some());
            assert_eq!(cache.view().pinned_snapshots(), 1);
        }
        for o in &changed {
            cache
                .apply(WatchEvent::Modified {
                    object: o.clone(),
                    prev: None,
                })
                .unwrap();
        }
        let held = held_bytes(&region);
        let estimate = cache.view().memory().snapshot_bytes;
        drop(cache);
        (held, estimate)
    };
    let (without, _) = run(false);
    let (with, estimate) = run(true);
    (with - without, estimate)
}
/// The bytes a listed state (maps and indexes, no window) adds to already parsed objects.
fn state_only(config: Config, objects: &[Object]) -> isize {
    let mut cache = WatchCache::new(config);
    let list = objects.to_vec();
    let region = Region::new(GLOBAL);
    cache.replace(list, PODS as u64 + 1).unwrap();
    // The list vector was freed inside the region; it was allocated before it.
    held_bytes(&region) + size_of_val(objects) as isize
}
