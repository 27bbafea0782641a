//! Measures the embedded store: acknowledged fsync'd writes/s with 25 concurrent writers
//! (durable, beside the bare group-commit fsync baseline and the in-memory store), restart
//! time with 150k pods, a paginated walk of 150k pods, and lease-write latency while pod
//! lists run. Run: `cargo run --release -p listwatch-memstore --example durable_bench [DIR]`
//! (DIR: where the data directories go, default the system temp dir; use the disk to
//! measure).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use listwatch_api::{Object, SelectableFields};
use listwatch_memstore::{MemStore, MemStoreConfig};
use listwatch_storage::{Key, ListOptions, Storage};

const WRITERS: usize = 25;

fn pod(ns: &str, name: &str, node: &str) -> Object {
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

/// Creates `per_writer` pods from each of 25 tasks; returns writes/s.
async fn create_many(store: &MemStore, tag: &str, per_writer: usize) -> f64 {
    let start = Instant::now();
    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = store.clone();
            let tag = tag.to_owned();
            tokio::spawn(async move {
                for i in 0..per_writer {
                    let name = format!("{tag}-{w}-{i}");
                    let ns = format!("ns-{}", i % 100);
                    let key = Key::object("pods", Some(&ns), &name).unwrap();
                    store
                        .create(&key, pod(&ns, &name, &format!("node-{}", i % 1000)), None)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (WRITERS * per_writer) as f64 / start.elapsed().as_secs_f64()
}

/// The physical limit: 25 threads hand 2 KB records to one thread that appends each batch
/// with one write and one fdatasync to a zero-filled file, and wait for their batch.
fn bare_group_commit(dir: &std::path::Path, per_writer: usize, record: usize) -> f64 {
    let path = dir.join("bare.log");
    let mut f = std::fs::File::create(&path).unwrap();
    let total = WRITERS * per_writer * (record + 8);
    f.write_all(&vec![0u8; total + (1 << 20)]).unwrap();
    f.sync_all().unwrap();
    struct Q {
        buf: Vec<u8>,
        queued: u64,
        synced: u64,
        done: bool,
    }
    let q = Arc::new((
        Mutex::new(Q {
            buf: Vec::new(),
            queued: 0,
            synced: 0,
            done: false,
        }),
        Condvar::new(),
        Condvar::new(),
    ));
    let syncer = {
        let q = Arc::clone(&q);
        std::thread::spawn(move || {
            let mut off = 0u64;
            loop {
                let (buf, upto) = {
                    let mut g = q.0.lock().unwrap();
                    while g.buf.is_empty() && !g.done {
                        g = q.1.wait(g).unwrap();
                    }
                    if g.buf.is_empty() {
                        return;
                    }
                    (std::mem::take(&mut g.buf), g.queued)
                };
                f.write_all_at(&buf, off).unwrap();
                f.sync_data().unwrap();
                off += buf.len() as u64;
                q.0.lock().unwrap().synced = upto;
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
    q.0.lock().unwrap().done = true;
    q.1.notify_all();
    syncer.join().unwrap();
    let _ = std::fs::remove_file(&path);
    rate
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let base = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let rounds = 3;
    let record = pod("ns-0", "x", "node-0").size();
    println!(
        "pod JSON: {record} bytes; {WRITERS} concurrent writers; data under {}",
        base.display()
    );

    let (mut durable, mut bare, mut memory) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
        durable.push(create_many(&store, &format!("r{r}"), 2000).await);
        drop(store);
        let d2 = dir.path().to_owned();
        bare.push(
            tokio::task::spawn_blocking(move || bare_group_commit(&d2, 2000, record))
                .await
                .unwrap(),
        );
        memory.push(create_many(&MemStore::new(), &format!("m{r}"), 2000).await);
    }
    println!(
        "acknowledged creates/s, durable store:       {}",
        stats(durable)
    );
    println!(
        "acknowledged records/s, bare group commit:   {}",
        stats(bare)
    );
    println!(
        "creates/s, in-memory store:                  {}",
        stats(memory)
    );

    // 150k pods: fill, then restart.
    let dir = tempfile::tempdir_in(&base).unwrap();
    {
        let store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
        let rate = create_many(&store, "p", 6000).await;
        println!("filled 150000 pods at {rate:.0} creates/s");
    }
    let mut opens = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        let store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
        opens.push(start.elapsed().as_secs_f64() * 1000.0);
        let n = store
            .stats(&Key::collection("pods", None).unwrap())
            .await
            .unwrap()
            .object_count;
        assert_eq!(n, 150_000);
    }
    println!(
        "restart with 150000 pods (ms):               {}",
        stats(opens)
    );

    // Paginated walk of 150k pods at one revision, 1000 per page.
    let store = MemStore::open(dir.path(), MemStoreConfig::default()).unwrap();
    let all = Key::collection("pods", None).unwrap();
    let mut walks = Vec::new();
    let mut pages = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        let mut opts = ListOptions {
            limit: Some(1000),
            ..ListOptions::recursive()
        };
        let mut n = 0;
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
        walks.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "paginated walk of 150000 pods, limit 1000 (ms): {}",
        stats(walks)
    );
    println!(
        "one continued page of 1000 (µs):             {}",
        stats(pages)
    );

    // Lease writes while two tasks list all pods in a loop.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let listers: Vec<_> = (0..2)
        .map(|_| {
            let (store, stop, all) = (store.clone(), Arc::clone(&stop), all.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = store.list(&all, &ListOptions::recursive()).await;
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut lat = Vec::new();
    let lease = |i: usize| {
        Object::from_value(
            serde_json::json!({"metadata":{"name":"l","namespace":"kube-node-lease"},"spec":{"renewTime":i}}),
            &SelectableFields::none(),
        )
        .unwrap()
    };
    let key = Key::object("leases", Some("kube-node-lease"), "l").unwrap();
    for i in 0..200 {
        let t = Instant::now();
        let obj = lease(i);
        let mut f = |_: Option<&Object>| Ok(obj.clone().into());
        store
            .guaranteed_update(&key, None, true, &mut f, None)
            .await
            .unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in listers {
        let _ = l.await;
    }
    lat.sort_by(|a, b| a.total_cmp(b));
    println!(
        "durable lease write while pods are listed (µs): p50 {:.0}  p99 {:.0}  max {:.0}",
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100],
        lat[lat.len() - 1]
    );
}
