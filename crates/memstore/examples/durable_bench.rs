//! Measures the durable embedded store against the disk it runs on, in one run:
//!
//! - the disk: one `write` + `fdatasync` of a pod-sized record at a time, on a zero-filled
//!   file (what the log does), a `fallocate`d one and a growing one: the cost of one sync, and
//!   the ceiling it implies for 25 writers (at most 25 writes per sync);
//! - acknowledged (fdatasync'd) creates/s with 25 concurrent writers, round by round beside the
//!   bare group-commit loop (25 threads handing the same records to one thread that writes each
//!   batch with one `write` + one `fdatasync`: the same I/O with no store), with the writes
//!   per sync of each; the in-memory store as the CPU-only reference;
//! - restart (open + recovery) with 150 000 pods in the log, and with them in a snapshot.
//!
//! The pods are built before the clock starts (the store is measured, not the JSON builder).
//! Run: `cargo run --release -p listwatch-memstore --example durable_bench -- DIR [ROUNDS]`
//! (DIR on the disk to measure; default the system temp dir, 5 rounds).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::{MemStore, MemStoreConfig};
use listwatch_storage::{Key, Storage};
use prometheus_client::registry::Registry;

const WRITERS: usize = 25;

pub fn pod(ns: &str, name: &str, node: &str) -> Object {
    let v = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}-0000-0000-000000000000"),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d4b9c8f5"},
            "annotations": {"kubernetes.io/config.seen": "2026-01-01T00:00:00.000000000Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f5",
                "uid": "00000000-0000-0000-0000-000000000001", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"nodeName": node, "restartPolicy": "Always", "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "containers": [{"name": "web", "image": "registry.example/web:1.27.3",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "production"}, {"name": "LOG", "value": "info"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "hostIP": "192.168.0.1",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    });
    Object::from_value(v, &SelectableFields::new(["spec.nodeName", "status.phase"])).unwrap()
}

/// `per_writer` pods for each of the 25 writers, built ahead.
fn pods(tag: &str, per_writer: usize) -> Vec<Vec<(Key, Object)>> {
    (0..WRITERS)
        .map(|w| {
            (0..per_writer)
                .map(|i| {
                    let name = format!("{tag}-{w}-{i}");
                    let ns = format!("ns-{}", i % 100);
                    let key = Key::object("pods", Some(&ns), &name).unwrap();
                    let p = pod(&ns, &name, &format!("node-{}", i % 1000));
                    (key, p)
                })
                .collect()
        })
        .collect()
}

/// A temporary directory only its owner may use (a data directory must be).
fn private_tempdir(base: &Path) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir_in(base).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// Creates the pods from 25 tasks at once; returns creates/s.
async fn create_all(store: &MemStore, pods: Vec<Vec<(Key, Object)>>) -> f64 {
    let n: usize = pods.iter().map(Vec::len).sum();
    let start = Instant::now();
    let tasks: Vec<_> = pods
        .into_iter()
        .map(|mine| {
            let store = store.clone();
            tokio::spawn(async move {
                for (key, pod) in mine {
                    store.create(&key, pod, None).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// A counter of the store's metrics.
fn counter(store: &MemStore, name: &str) -> f64 {
    let mut registry = Registry::default();
    store.register_metrics(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(' ')?;
            (n == name).then(|| v.parse().ok())?
        })
        .unwrap_or(0.0)
}

fn zero_filled(path: &Path, bytes: usize) -> std::fs::File {
    let f = std::fs::File::create(path).unwrap();
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < bytes {
        f.write_all_at(&zeros, at as u64).unwrap();
        at += zeros.len();
    }
    f.sync_all().unwrap();
    f
}

/// One record at a time: `write` + `fdatasync`, `n` times; the latency of each in µs.
fn sync_latencies(dir: &Path, how: &str, record: usize, n: usize) -> Vec<f64> {
    let path = dir.join(format!("probe-{how}"));
    let f = match how {
        "zero-filled" => zero_filled(&path, (n + 1) * record),
        "fallocated" => {
            let f = std::fs::File::create(&path).unwrap();
            rustix::fs::fallocate(
                &f,
                rustix::fs::FallocateFlags::empty(),
                0,
                ((n + 1) * record) as u64,
            )
            .unwrap();
            f.sync_all().unwrap();
            f
        }
        _ => {
            let f = std::fs::File::create(&path).unwrap();
            f.sync_all().unwrap();
            f
        }
    };
    let rec = vec![7u8; record];
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        f.write_all_at(&rec, (i * record) as u64).unwrap();
        f.sync_data().unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let _ = std::fs::remove_file(&path);
    lat
}

/// The same I/O with no store: 25 threads hand records to one thread that appends each batch
/// with one `write` and one `fdatasync` to a zero-filled file, and wait for their batch.
/// `coalesce`: after a sync, wait (at most half its duration, 2 ms) until the writers just
/// acknowledged have queued again, as the store's log thread does; otherwise start the next
/// sync at once (naive group commit). Returns (records/s, records per sync).
fn bare_group_commit(dir: &Path, per_writer: usize, record: usize, coalesce: bool) -> (f64, f64) {
    let path = dir.join("bare.log");
    let f = zero_filled(&path, WRITERS * per_writer * (record + 8) + (1 << 20));
    struct Q {
        buf: Vec<u8>,
        queued: u64,
        synced: u64,
        syncs: u64,
        done: bool,
    }
    let q = Arc::new((
        Mutex::new(Q {
            buf: Vec::new(),
            queued: 0,
            synced: 0,
            syncs: 0,
            done: false,
        }),
        Condvar::new(),
        Condvar::new(),
    ));
    let syncer = {
        let q = Arc::clone(&q);
        std::thread::spawn(move || {
            let mut off = 0u64;
            let (mut target, mut bound) = (0u64, Duration::ZERO);
            loop {
                let (buf, upto, from) = {
                    let mut g = q.0.lock().unwrap();
                    while g.buf.is_empty() && !g.done {
                        g = q.1.wait(g).unwrap();
                    }
                    let deadline = Instant::now() + bound;
                    while coalesce && g.queued - g.synced < target && !g.done {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        g = q.1.wait_timeout(g, left).unwrap().0;
                    }
                    if g.buf.is_empty() {
                        return;
                    }
                    (std::mem::take(&mut g.buf), g.queued, g.synced)
                };
                let t = Instant::now();
                f.write_all_at(&buf, off).unwrap();
                f.sync_data().unwrap();
                let sync = t.elapsed();
                off += buf.len() as u64;
                let mut g = q.0.lock().unwrap();
                // Queued during the sync, and acknowledged by it.
                target = (g.queued - upto) + (upto - from);
                bound = (sync / 2).min(Duration::from_millis(2));
                g.synced = upto;
                g.syncs += 1;
                q.2.notify_all();
            }
        })
    };
    let start = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let q = Arc::clone(&q);
            std::thread::spawn(move || {
                let rec = vec![7u8; record];
                for _ in 0..per_writer {
                    let mut g = q.0.lock().unwrap();
                    g.buf.extend_from_slice(&(record as u64).to_le_bytes());
                    g.buf.extend_from_slice(&rec);
                    g.queued += 1;
                    let mine = g.queued;
                    q.1.notify_one();
                    while g.synced < mine {
                        g = q.2.wait(g).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let rate = (WRITERS * per_writer) as f64 / start.elapsed().as_secs_f64();
    let syncs = {
        let mut g = q.0.lock().unwrap();
        g.done = true;
        g.syncs
    };
    q.1.notify_all();
    syncer.join().unwrap();
    let _ = std::fs::remove_file(&path);
    (rate, (WRITERS * per_writer) as f64 / syncs.max(1) as f64)
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.total_cmp(b));
    format!(
        "median {:.0}  [min {:.0}  max {:.0}]  ({} rounds)",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1],
        v.len()
    )
}

/// CPU seconds (user + system) this process has used so far (`/proc/self/stat`, 10 ms
/// resolution): a restart's cost apart from how busy the machine is.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // Fields 14 and 15 of the line; 12 and 13 after the command name.
    (f.get(11).copied().unwrap_or(0.0) + f.get(12).copied().unwrap_or(0.0)) / 100.0
}

fn pct(v: &mut [f64], p: usize) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[(v.len() * p / 100).min(v.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(5);
    // "writes", "restart" or both (default); for profiling, "fill" fills DIR itself with
    // 150 000 pods and "open" only opens DIR (filled before) ROUNDS times.
    let only = args.next().unwrap_or_default();
    if only == "fill" {
        let store = MemStore::open(&base, MemStoreConfig::default()).unwrap();
        let rate = create_all(&store, pods("p", 6000)).await;
        println!("filled 150000 pods at {rate:.0} creates/s");
        return;
    }
    if only == "open" {
        let (mut opens, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (start, c0) = (Instant::now(), cpu_seconds());
            let store = MemStore::open(&base, MemStoreConfig::default()).unwrap();
            opens.push(start.elapsed().as_secs_f64() * 1000.0);
            cpu.push((cpu_seconds() - c0) * 1000.0);
            drop(store);
        }
        println!("open (ms): {}", stats(opens));
        println!("  CPU (ms): {}", stats(cpu));
        return;
    }
    let per_writer = 2000;
    let sample = pod("ns-0", "x-0-0", "node-0");
    // The log record: the JSON plus the key and the parsed view (~150 bytes).
    let record = sample.size() + 150;
    println!(
        "pod JSON {} bytes (log record ~{record}); {WRITERS} concurrent writers; data under {}",
        sample.size(),
        base.display()
    );

    // The disk, in this run.
    let probe = tempfile::tempdir_in(&base).unwrap();
    for how in ["zero-filled", "fallocated", "growing"] {
        let mut lat = sync_latencies(probe.path(), how, record, 300);
        let (p50, p90, p99) = (pct(&mut lat, 50), pct(&mut lat, 90), pct(&mut lat, 99));
        println!(
            "one {record}-byte write + fdatasync, {how:<11}: p50 {p50:.0} µs  p90 {p90:.0}  p99 {p99:.0}  \
             → {:.0} syncs/s, ceiling {:.0} writes/s at {WRITERS} writes per sync",
            1e6 / p50,
            WRITERS as f64 * 1e6 / p50
        );
    }

    if only != "restart" {
        writes(&base, rounds, per_writer, record).await;
    }
    if only != "writes" {
        restarts(&base, rounds).await;
    }
}

async fn writes(base: &Path, rounds: usize, per_writer: usize, record: usize) {
    let (mut durable, mut durable_batch) = (Vec::new(), Vec::new());
    let (mut bare, mut bare_batch) = (Vec::new(), Vec::new());
    let (mut naive, mut naive_batch) = (Vec::new(), Vec::new());
    let mut memory = Vec::new();
    for r in 0..rounds {
        let dir = private_tempdir(base);
        for (coalesce, rates, batches) in [
            (true, &mut bare, &mut bare_batch),
            (false, &mut naive, &mut naive_batch),
        ] {
            let (rate, batch) = tokio::task::spawn_blocking({
                let d = dir.path().to_owned();
                move || bare_group_commit(&d, per_writer, record, coalesce)
            })
            .await
            .unwrap();
            rates.push(rate);
            batches.push(batch);
        }
        let store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
        let work = pods(&format!("r{r}"), per_writer);
        let (s0, w0) = (
            counter(&store, "listwatch_memstore_log_syncs_total"),
            counter(&store, "listwatch_memstore_log_synced_writes_total"),
        );
        durable.push(create_all(&store, work).await);
        let (s1, w1) = (
            counter(&store, "listwatch_memstore_log_syncs_total"),
            counter(&store, "listwatch_memstore_log_synced_writes_total"),
        );
        durable_batch.push((w1 - w0) / (s1 - s0).max(1.0));
        drop(store);
        memory.push(create_all(&MemStore::new(), pods(&format!("m{r}"), per_writer)).await);
        println!(
            "round {r}: durable {:.0}/s ({:.1} writes/sync), bare {:.0}/s ({:.1} records/sync), \
             bare naive {:.0}/s ({:.1}), memory {:.0}/s",
            durable[r],
            durable_batch[r],
            bare[r],
            bare_batch[r],
            naive[r],
            naive_batch[r],
            memory[r]
        );
    }
    println!(
        "acknowledged creates/s, durable store:     {}",
        stats(durable)
    );
    println!(
        "  writes per fdatasync:                    {}",
        stats(durable_batch)
    );
    println!("acknowledged records/s, bare group commit: {}", stats(bare));
    println!(
        "  records per fdatasync:                   {}",
        stats(bare_batch)
    );
    println!(
        "acknowledged records/s, bare, naive:       {}",
        stats(naive)
    );
    println!(
        "  records per fdatasync:                   {}",
        stats(naive_batch)
    );
    println!(
        "creates/s, in-memory store (no disk):      {}",
        stats(memory)
    );
}

async fn restarts(base: &Path, rounds: usize) {
    // 150k pods: fill, then restart from the log; then from a snapshot.
    let dir = private_tempdir(base);
    {
        let store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
        let rate = create_all(&store, pods("p", 6000)).await;
        println!("filled 150000 pods at {rate:.0} creates/s");
    }
    let restart = |dir: &Path| {
        let (start, c0) = (Instant::now(), cpu_seconds());
        let store = MemStore::open(dir, MemStoreConfig::default()).unwrap();
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        (store, ms, (cpu_seconds() - c0) * 1000.0)
    };
    let (mut opens, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (store, ms, c) = restart(dir.path());
        opens.push(ms);
        cpu.push(c);
        let n = store
            .stats(&Key::collection("pods", None).unwrap())
            .await
            .unwrap()
            .object_count;
        assert_eq!(n, 150_000);
    }
    println!(
        "restart, 150000 pods in the log (ms):      {}",
        stats(opens)
    );
    println!("  CPU used by the restart (ms):            {}", stats(cpu));
    {
        // Compact everything: the next snapshot holds all 150k pods and the log is dropped.
        let config = MemStoreConfig {
            snapshot_min_log_bytes: 1,
            ..MemStoreConfig::default()
        };
        let store = MemStore::open(dir.path(), config).unwrap();
        store.compact(store.current_revision()).unwrap();
        // The snapshot is written by a thread of its own.
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".wal"))
            .count()
            > 1
        {
            assert!(Instant::now() < deadline, "no snapshot");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (mut opens, mut cpu) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (store, ms, c) = restart(dir.path());
        opens.push(ms);
        cpu.push(c);
        let n = store
            .stats(&Key::collection("pods", None).unwrap())
            .await
            .unwrap()
            .object_count;
        assert_eq!(n, 150_000);
    }
    println!(
        "restart, 150000 pods in a snapshot (ms):   {}",
        stats(opens)
    );
    println!("  CPU used by the restart (ms):            {}", stats(cpu));
}
