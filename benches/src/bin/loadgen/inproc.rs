//! The in-process scenarios: P1, P4, P5, P7 (against a throwaway etcd), P8, P11 (P6 is in
//! `lists`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use listwatch_api::{FieldSelector, Object, wire_encode_count};
use listwatch_benches::fanout::{CacherFanout, bare_fanout, big_pod};
use listwatch_benches::{pod, pod_fields};
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, SelectionPredicate, Storage, WatchEvent};

use crate::report::{Bound, Goal, Metric, Report, Spread, fmt_num};
use crate::sys;

type Result<T> = std::result::Result<T, String>;

pub(crate) fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("  {msg:24} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
    {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_message(what.to_owned());
    pb
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn pod_key(o: &Object) -> Result<Key> {
    Key::object("pods", o.namespace(), o.name()).map_err(|e| e.to_string())
}

/// Creates `objects` straight on `store` from `writers` concurrent tasks (objects dealt
/// round-robin), ticking `pb` once per create.
pub(crate) async fn create_all<S: Storage + 'static>(
    store: &Arc<S>,
    objects: Vec<Object>,
    writers: usize,
    pb: &ProgressBar,
) -> Result<()> {
    let writers = writers.max(1);
    let mut batches: Vec<Vec<Object>> = (0..writers).map(|_| Vec::new()).collect();
    for (i, o) in objects.into_iter().enumerate() {
        if let Some(b) = batches.get_mut(i % writers) {
            b.push(o);
        }
    }
    let mut tasks = Vec::new();
    for batch in batches {
        let (store, pb) = (Arc::clone(store), pb.clone());
        tasks.push(tokio::spawn(async move {
            for o in batch {
                let key = pod_key(&o)?;
                store
                    .create(&key, o, None)
                    .await
                    .map_err(|e| e.to_string())?;
                pb.inc(1);
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// `n` realistic pods (~2 KB JSON) over 100 namespaces and 1 000 nodes.
pub(crate) fn pods(n: usize) -> Vec<Object> {
    let pb = bar(n as u64, "generating pods");
    let out = (0..n)
        .map(|i| {
            pb.inc(1);
            pod(
                &format!("ns-{:03}", i % 100),
                &format!("pod-{i:06}"),
                &format!("node-{:04}", i % 1000),
            )
        })
        .collect();
    pb.finish_and_clear();
    out
}

fn self_cpu() -> f64 {
    sys::own_cpu_seconds()
}

/// P1: one write through the Cacher to 10 000 watchers vs Arc'd events over bare mpsc.
///
/// Each round measures both sides back to back (which goes first alternates), so that a
/// round's ratio compares two runs under the same load from the rest of the machine; the
/// figures are the medians and ranges of the rounds.
pub(crate) async fn p1() -> Result<Report> {
    const WATCHERS: usize = 10_000;
    const ITERS: u64 = 100;
    const ROUNDS: usize = 9;
    let mut r = Report::new("P1", "in-process fan-out to 10k watchers", "");
    let versions = [
        pod("default", "web", "node-1"),
        pod("default", "web", "node-2"),
    ];
    let per_event = |t: Duration| t.as_nanos() as f64 / (ITERS as f64 * WATCHERS as f64);
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    let pb = bar(ROUNDS as u64, "rounds");
    for round in 0..ROUNDS {
        for side in [round % 2, 1 - round % 2] {
            if side == 0 {
                let f = CacherFanout::start(WATCHERS, ITERS, &versions[0]).await;
                let t = f.run(ITERS, &versions).await;
                drop(f);
                ours.push(per_event(t));
            } else {
                base.push(per_event(bare_fanout(WATCHERS, ITERS, &versions[0]).await));
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    let ratios: Vec<f64> = ours.iter().zip(&base).map(|(o, b)| o / b).collect();
    let (o, b, q) = (Spread::of(&ours), Spread::of(&base), Spread::of(&ratios));
    r.push(
        Metric::new(
            &format!("cost per delivered event (median of {ROUNDS} rounds of {ITERS} writes)"),
            "ns",
            o.median,
        )
        .baseline(b.median, "bare tokio mpsc of Arc'd events to 10k tasks")
        .goal(Goal::Ratio(Bound::AtMost(1.5)))
        .note(format!("ours {}; bare {}", o.text("ns"), b.text("ns"))),
    );
    r.push(
        Metric::new(
            "ratio per round (ours ÷ bare, measured back to back): median",
            "×",
            q.median,
        )
        .goal(Goal::Value(Bound::AtMost(1.5)))
        .note(format!("ratio per round {}", q.text(""))),
    );
    r.notes.push(format!(
        "Per round (ns per delivered event), ours: {}; bare: {}; ratio: {} — median [range] of {ROUNDS}: \
         ours {}, bare {}, ratio {}.",
        list(&ours),
        list(&base),
        list(&ratios),
        o.text("ns"),
        b.text("ns"),
        q.text("")
    ));
    Ok(r)
}

/// `[a, b, c]` with each figure as the tables print it.
pub(crate) fn list(v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|x| fmt_num(*x)).collect();
    format!("[{}]", items.join(", "))
}

/// RSS high-water mark of this process, after resetting it when `reset`.
fn hwm(reset: bool) -> u64 {
    if reset {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .unwrap_or(0)
        * 1024
}

/// P4: a 1 MB object updated with 1 and with 5 000 all-object watchers.
pub(crate) async fn p4() -> Result<Report> {
    const ITERS: u64 = 10;
    let mut r = Report::new(
        "P4",
        "kube-proxy pattern: 5k all-object watchers, one 1 MB object updated",
        "",
    );
    let versions = [big_pod("a"), big_pod("b")];
    let mut per = Vec::new();
    for watchers in [1usize, 5_000] {
        let f = CacherFanout::start(watchers, ITERS, &versions[0]).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let rss0 = sys::rss_bytes(std::process::id()).unwrap_or(0);
        hwm(true);
        let enc0 = wire_encode_count();
        let t = f.run(ITERS, &versions).await;
        let encodes = (wire_encode_count() - enc0) as f64 / ITERS as f64;
        let grew = hwm(false).saturating_sub(rss0);
        drop(f);
        eprintln!("  {watchers} watchers: {ITERS} updates delivered in {t:.2?}");
        per.push((encodes, grew as f64 / (1 << 20) as f64, t));
    }
    r.push(
        Metric::new("encodes per event, 5k watchers", "encodes", per[1].0)
            .baseline(per[0].0, "1 watcher")
            .goal(Goal::Value(Bound::AtMost(1.0))),
    );
    r.push(
        Metric::new("RSS growth while 10 updates fan out, 5k watchers", "MiB", per[1].1)
            .baseline(per[0].1, "1 watcher")
            .goal(Goal::Ratio(Bound::AtMost(1.5)))
            .note("peak RSS (VmHWM, reset before the writes) minus RSS before them; watchers' own state excluded"),
    );
    r.notes.push(format!(
        "Delivery: 10 updates of the 1 MB pod reached 1 watcher in {:.1?} and 5 000 watchers in {:.1?}. \
         The goal for RSS (\"flat in N\") is read as at most 1.5× the 1-watcher growth.",
        per[0].2, per[1].2
    ));
    Ok(r)
}

/// P5: writes through the Cacher over the embedded store with 20 watchers and 25 writers.
pub(crate) async fn p5() -> Result<Report> {
    const WRITERS: usize = 25;
    let per_writer = crate::meta::scaled(8_000, 200);
    let mut r = Report::new(
        "P5",
        "write throughput: etcd PATCH through the cacher like for like with upstream's; embedded-store creates as our own figure; 10 all-pod + 10 nodeName watchers, 25 writers",
        &format!(
            "embedded: {} creates (25 writers × {per_writer}); etcd: {}",
            WRITERS * per_writer,
            crate::p5::scale_text()
        ),
    );
    let cacher = Cacher::new(
        Arc::new(MemStore::new()),
        CacherConfig::new("pods").with_trigger("spec.nodeName"),
    );
    cacher.wait_ready().await;
    let all = Key::collection("pods", None).map_err(|e| e.to_string())?;
    let delivered = Arc::new(AtomicU64::new(0));
    for i in 0..20 {
        let mut opts = ListOptions {
            resource_version: Some(0),
            ..ListOptions::recursive()
        };
        if i >= 10 {
            opts.predicate = SelectionPredicate {
                field: FieldSelector::equals("spec.nodeName", &format!("node-{:04}", i)),
                ..Default::default()
            };
        }
        let mut w = cacher.watch(&all, &opts).await.map_err(|e| e.to_string())?;
        let delivered = Arc::clone(&delivered);
        tokio::spawn(async move {
            while let Some(ev) = w.next().await {
                if let WatchEvent::Added(object) = ev {
                    std::hint::black_box(object.to_json_bytes());
                    delivered.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let objects = pods(WRITERS * per_writer);
    let mut batches: Vec<Vec<Object>> = (0..WRITERS)
        .map(|_| Vec::with_capacity(per_writer))
        .collect();
    for (i, o) in objects.into_iter().enumerate() {
        batches[i % WRITERS].push(o);
    }
    let pb = bar((WRITERS * per_writer) as u64, "creates");
    let cpu0 = self_cpu();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for batch in batches {
        let cacher = cacher.clone();
        let pb = pb.clone();
        tasks.push(tokio::spawn(async move {
            for o in batch {
                let key = pod_key(&o)?;
                cacher
                    .create(&key, o, None)
                    .await
                    .map_err(|e| e.to_string())?;
                pb.inc(1);
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let acked = t.elapsed().as_secs_f64();
    // Every all-pod watcher gets every pod; each node watcher the pods of its node.
    let want = (10 * WRITERS * per_writer + 10 * (WRITERS * per_writer / 1000)) as u64;
    let end = Instant::now() + Duration::from_secs(120);
    while delivered.load(Ordering::Relaxed) < want && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let wall = t.elapsed().as_secs_f64();
    let cpu = self_cpu() - cpu0;
    pb.finish_and_clear();
    if delivered.load(Ordering::Relaxed) < want {
        return Err(format!(
            "watchers got {} of {want} events",
            delivered.load(Ordering::Relaxed)
        ));
    }
    let writes = (WRITERS * per_writer) as f64;
    r.push(Metric::new(
        "embedded store, creates (our own throughput, not a comparison): writes/s (wall)",
        "writes/s",
        writes / wall,
    ));
    // No baseline and no goal: in-memory creates of pre-built objects are not the work
    // upstream's figure measures (PATCHes over etcd); the etcd rows below are the comparison.
    r.push(
        Metric::new(
            "embedded store, creates (our own throughput, not a comparison): writes per CPU-second (whole process: writers, store, cache, watchers)",
            "writes/core-s",
            writes / cpu.max(1e-9),
        )
        .note("in-memory creates of pre-built objects; upstream's figure is PATCHes over etcd, so it is no baseline for this row"),
    );
    r.notes.push(format!(
        "All {} events reached the 20 watchers; the writers had their acknowledgements after {acked:.2} s, the \
         last event was delivered after {wall:.2} s (the figures above count to that point); the process used {cpu:.2} CPU-s.",
        delivered.load(Ordering::Relaxed)
    ));
    crate::p5::on_etcd(&mut r).await?;
    Ok(r)
}

/// P7: cache init of 150 000 pods from etcd vs one raw range read + JSON parse of them.
pub(crate) async fn p7() -> Result<Report> {
    const N: usize = 150_000;
    let mut r = Report::new("P7", "cache init of 150k pods from etcd", "");
    let server = listwatch_etcd::testing::EtcdServer::start()
        .await
        .map_err(|e| e.to_string())?;
    let store = Arc::new(listwatch_etcd::EtcdStore::new(
        server.client(),
        "/registry",
        pod_fields(),
    ));
    let objects = pods(N);
    let pb = bar(N as u64, "writing pods to etcd");
    create_all(&store, objects, 64, &pb).await?;
    pb.finish_and_clear();
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        let c = Cacher::new(
            store.clone(),
            CacherConfig::new("pods").with_trigger("spec.nodeName"),
        );
        c.wait_ready().await;
        ours.push(t.elapsed().as_secs_f64());
        drop(c);
        let t = Instant::now();
        let n = raw_range_parse(&server.endpoint()).await?;
        base.push(t.elapsed().as_secs_f64());
        if n != N {
            return Err(format!("raw range read {n} pods, want {N}"));
        }
    }
    r.push(
        Metric::new("time to a ready cache (median of 3)", "s", median(ours))
            .baseline(
                median(base),
                "one raw etcd range + JSON parse of every value",
            )
            .goal(Goal::Ratio(Bound::AtMost(1.3))),
    );
    Ok(r)
}

/// One Range of everything under /registry/pods/ over a plain gRPC channel, every value parsed.
async fn raw_range_parse(endpoint: &str) -> Result<usize> {
    use listwatch_etcd::proto::etcdserverpb::RangeRequest;
    use listwatch_etcd::proto::etcdserverpb::kv_client::KvClient;
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut kv = KvClient::new(channel).max_decoding_message_size(usize::MAX);
    let resp = kv
        .range(RangeRequest {
            key: "/registry/pods/".into(),
            range_end: "/registry/pods0".into(),
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    let fields = pod_fields();
    let mut n = 0;
    for kv in resp.kvs {
        let o = Object::from_json(&kv.value, &fields).map_err(|e| e.to_string())?;
        std::hint::black_box(o);
        n += 1;
    }
    Ok(n)
}

/// P8: bytes the watch cache holds per object, against the objects' JSON: after a list, and
/// in the steady state with the window full (more events than its maximum of 102 400).
pub(crate) async fn p8() -> Result<Report> {
    const N: usize = 150_000;
    let mut r = Report::new(
        "P8",
        "cache bytes per object",
        "150 000 pods, as 150 000 ADDED events for the window rows (the window full at 102 400)",
    );
    let jsons: Vec<Vec<u8>> = pods(N).iter().map(|o| o.to_json_bytes().to_vec()).collect();
    let json_total: usize = jsons.iter().map(Vec::len).sum();
    let fields = pod_fields();
    let config = CacherConfig::new("pods")
        .with_trigger("spec.nodeName")
        .watch_cache;
    // One list (the cacher's init): parse and replace.
    let before = crate::heap();
    let objects: Vec<Object> = jsons
        .iter()
        .filter_map(|j| Object::from_json(j, &fields).ok())
        .collect();
    let mut cache = listwatch_watchcache::WatchCache::new(config.clone());
    cache.replace(objects, 1).map_err(|e| e.to_string())?;
    let listed = crate::heap().saturating_sub(before);
    drop(cache);
    // Events (the steady state): each object arrives as ADDED, more of them than the window
    // holds, so it ends full; past states are pinned only by paginated lists (none here).
    let by_events = |config: listwatch_watchcache::Config| -> Result<usize> {
        let before = crate::heap();
        let mut cache = listwatch_watchcache::WatchCache::new(config);
        cache.replace(Vec::new(), 1).map_err(|e| e.to_string())?;
        for (i, j) in jsons.iter().enumerate() {
            let o = Object::from_json(j, &fields)
                .map_err(|e| e.to_string())?
                .with_resource_version(i as u64 + 2);
            cache
                .apply(WatchEvent::Added(o))
                .map_err(|e| e.to_string())?;
        }
        let view = cache.view();
        if view.window().len() != listwatch_watchcache::DEFAULT_MAX_CAPACITY {
            return Err(format!(
                "the window holds {} events, not its maximum",
                view.window().len()
            ));
        }
        Ok(crate::heap().saturating_sub(before))
    };
    let evented = by_events(config.clone())?;
    let no_snapshots = by_events(config.clone().with_snapshots(false))?;
    let per_json = json_total as f64 / N as f64;
    // Each figure is bytes held per pod, against the pod's own JSON size.
    for (what, held) in [
        ("bytes held per pod after one list", listed),
        (
            "bytes held per pod with the window full of ADDED events (snapshots on, the default)",
            evented,
        ),
        (
            "bytes held per pod with the window full of ADDED events, snapshots off",
            no_snapshots,
        ),
    ] {
        r.push(
            Metric::new(what, "B", held as f64 / N as f64)
                .baseline(per_json, "the pod's JSON size")
                .goal(Goal::Ratio(Bound::AtMost(1.5))),
        );
    }
    r.notes.push(format!(
        "JSON of the {N} pods: {:.1} MiB; held after the list {:.1} MiB, with the window full \
         {:.1} MiB (snapshots on), {:.1} MiB (off). Past states are no longer copied per event: \
         a paginated list pins the state it read, and Exact lists rebuild from the window.",
        json_total as f64 / 1048576.0,
        listed as f64 / 1048576.0,
        evented as f64 / 1048576.0,
        no_snapshots as f64 / 1048576.0,
    ));
    p8_history(&mut r, &jsons[..MODIFIED_PODS.min(jsons.len())], &config)?;
    Ok(r)
}

/// Pods whose versions P8's history rows keep (each modified many times).
const MODIFIED_PODS: usize = 20_000;

/// P8's history rows (issue 33 item 7): the bytes a cache holds beyond its current objects
/// when the window fills with MODIFIED events, each keeping the version it replaced, with no
/// byte bound (upstream's count bound alone) and with the apiserver's default history budget
/// (`--watch-cache-window-bytes`, 64 MiB per resource).
fn p8_history(
    r: &mut Report,
    jsons: &[Vec<u8>],
    config: &listwatch_watchcache::Config,
) -> Result<()> {
    const BUDGET: usize = 64 << 20;
    let events =
        listwatch_watchcache::DEFAULT_MAX_CAPACITY + listwatch_watchcache::DEFAULT_MAX_CAPACITY / 2;
    let fields = pod_fields();
    let n = jsons.len().max(1);
    // Heap held by the cache after `events` modifications, and its accounted history.
    let run = |budget: Option<usize>| -> Result<(usize, usize, usize)> {
        let before = crate::heap();
        let mut cache =
            listwatch_watchcache::WatchCache::new(config.clone().with_window_byte_budget(budget));
        let first: Vec<Object> = jsons
            .iter()
            .filter_map(|j| Object::from_json(j, &fields).ok())
            .collect();
        cache.replace(first, 1).map_err(|e| e.to_string())?;
        for i in 0..events {
            // Decoded afresh, as off the wire: each version owns its bytes.
            let j = jsons.get(i % n).ok_or("no pods")?;
            let o = Object::from_json(j, &fields)
                .map_err(|e| e.to_string())?
                .with_resource_version(i as u64 + 2);
            cache
                .apply(WatchEvent::Modified {
                    object: o,
                    prev: None,
                })
                .map_err(|e| e.to_string())?;
        }
        let view = cache.view();
        let held = crate::heap().saturating_sub(before);
        Ok((held, view.memory().history(), view.window().len()))
    };
    let (open_held, open_history, open_len) = run(None)?;
    let (held, history, len) = run(Some(BUDGET))?;
    let mib = |b: usize| b as f64 / 1048576.0;
    r.push(
        Metric::new(
            "MiB held by one resource's cache, window full of MODIFIED events, 64 MiB history budget (the default)",
            "MiB",
            mib(held),
        )
        .baseline(mib(open_held), "the same events with no byte budget (upstream's count bound alone)")
        .goal(Goal::None),
    );
    r.push(
        Metric::new(
            "MiB of history the cache accounts, 64 MiB history budget",
            "MiB",
            mib(history),
        )
        .baseline(mib(BUDGET), "the budget")
        .goal(Goal::Ratio(Bound::AtMost(1.0))),
    );
    r.notes.push(format!(
        "History rows: {n} pods, {events} MODIFIED events (each version decoded afresh, so the \
         window keeps every replaced version). No byte budget: the window holds {open_len} \
         events, {:.1} MiB of history accounted, {:.1} MiB held in all. Budget 64 MiB: {len} \
         events, {:.1} MiB accounted, {:.1} MiB held. A watch older than the window gets 410 and \
         relists either way; the budget trades window length for memory.",
        mib(open_history),
        mib(open_held),
        mib(history),
        mib(held),
    ));
    Ok(())
}

/// An in-process lister-watcher of `jsons` (decoded afresh on every list, as off the wire):
/// pages by offset, a new resourceVersion per list, and a watch that fails with 410 Expired
/// when `expire` is notified, which makes the reflector relist.
struct ConfigMaps {
    jsons: std::sync::Mutex<Arc<Vec<bytes::Bytes>>>,
    rv: AtomicU64,
    expire: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl listwatch_runtime::ListerWatcher for ConfigMaps {
    type Object = Object;

    async fn list(
        &self,
        req: &listwatch_runtime::ListRequest,
    ) -> listwatch_runtime::Result<listwatch_runtime::Page<Object>> {
        let start: usize = req
            .continue_token
            .as_deref()
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        let jsons = self
            .jsons
            .lock()
            .map(|j| Arc::clone(&j))
            .map_err(|_| listwatch_runtime::Error::Decode("poisoned".into()))?;
        if start == 0 {
            self.rv.fetch_add(100, Ordering::AcqRel);
        }
        let limit = req
            .limit
            .filter(|l| *l > 0)
            .map_or(jsons.len(), |l| l as usize);
        let end = (start + limit).min(jsons.len());
        let fields = listwatch_api::SelectableFields::none();
        let items = jsons[start..end]
            .iter()
            .map(|j| {
                Object::from_json(j, &fields)
                    .map_err(|e| listwatch_runtime::Error::Decode(e.to_string()))
            })
            .collect::<listwatch_runtime::Result<Vec<_>>>()?;
        Ok(listwatch_runtime::Page {
            items,
            resource_version: self.rv.load(Ordering::Acquire).to_string(),
            continue_token: (end < jsons.len()).then(|| end.to_string()),
        })
    }

    async fn watch(
        &self,
        _req: &listwatch_runtime::WatchRequest,
    ) -> listwatch_runtime::Result<listwatch_runtime::WatchStream<Object>> {
        let expire = Arc::clone(&self.expire);
        let expired = futures::stream::once(async move {
            expire.notified().await;
            let status = listwatch_api::Status::failure(410, "Expired", "too old resource version");
            Err(listwatch_runtime::Error::Api(Box::new(status)))
        });
        Ok(expired.chain(futures::stream::pending()).boxed())
    }
}

fn configmap_json(i: usize, rv: usize) -> Vec<u8> {
    let data: serde_json::Map<String, serde_json::Value> = (0..8)
        .map(|k| {
            (
                format!("key-{k}.conf"),
                format!(
                    "setting-{k} = value-{i}-{k} {}",
                    "x".repeat(60 + (i + k) % 40)
                )
                .into(),
            )
        })
        .collect();
    let v = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": format!("config-{i:05}"),
            "namespace": format!("ns-{:02}", i % 20),
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "component": format!("c{}", i % 7)},
        },
        "data": data,
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Shares one lister-watcher between the reflector and the scenario (which swaps its data).
struct Shared(Arc<ConfigMaps>);

#[async_trait::async_trait]
impl listwatch_runtime::ListerWatcher for Shared {
    type Object = Object;

    async fn list(
        &self,
        req: &listwatch_runtime::ListRequest,
    ) -> listwatch_runtime::Result<listwatch_runtime::Page<Object>> {
        self.0.list(req).await
    }

    async fn watch(
        &self,
        req: &listwatch_runtime::WatchRequest,
    ) -> listwatch_runtime::Result<listwatch_runtime::WatchStream<Object>> {
        self.0.watch(req).await
    }
}

/// P11: peak heap of a client reflector's relist of 10 000 configmaps against its store size.
pub(crate) async fn p11() -> Result<Report> {
    const N: usize = 10_000;
    let mut r = Report::new("P11", "client reflector relist of 10k configmaps", "");
    let set = |bump: usize| -> Arc<Vec<bytes::Bytes>> {
        Arc::new(
            (0..N)
                .map(|i| bytes::Bytes::from(configmap_json(i, i + 1 + bump)))
                .collect(),
        )
    };
    let (jsons, changed) = (set(0), set(N));
    let json_total: usize = jsons.iter().map(bytes::Bytes::len).sum();
    let expire = Arc::new(tokio::sync::Notify::new());
    // Kept alive to the end, so that swapping the data frees nothing the figures would miss.
    let _first = Arc::clone(&jsons);
    let lw = ConfigMaps {
        jsons: std::sync::Mutex::new(jsons),
        rv: AtomicU64::new(0),
        expire: Arc::clone(&expire),
    };
    let swap = |lw: &ConfigMaps| {
        if let Ok(mut j) = lw.jsons.lock() {
            *j = Arc::clone(&changed);
        }
    };
    let base = crate::heap();
    let lw = Arc::new(lw);
    let reflector = listwatch_runtime::Reflector::new(
        Shared(Arc::clone(&lw)),
        listwatch_runtime::Config::default(),
    );
    let store = reflector.store();
    let task = tokio::spawn(reflector.run());
    let wait_rv = |rv: u64| {
        let store = store.clone();
        async move {
            // The versions are this lister-watcher's own numbers; the store keeps them as
            // the opaque strings it was given.
            let seen = || store.resource_version().parse::<u64>().unwrap_or(0);
            let end = Instant::now() + Duration::from_secs(60);
            while seen() < rv && Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            seen() >= rv
        }
    };
    if !wait_rv(100).await {
        return Err("the reflector did not sync".into());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let store_bytes = crate::heap().saturating_sub(base);
    let first_peak = crate::heap_peak().saturating_sub(base);
    expire.notify_one();
    if !wait_rv(200).await {
        return Err("the reflector did not relist".into());
    }
    let peak = crate::heap_peak().saturating_sub(base);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = crate::heap().saturating_sub(base);
    // Now a relist in which every object changed: the worst case, two copies at the peak.
    swap(&lw);
    expire.notify_one();
    if !wait_rv(300).await {
        return Err("the reflector did not relist".into());
    }
    let worst = crate::heap_peak().saturating_sub(base);
    task.abort();
    if store.len() != N {
        return Err(format!(
            "the store holds {} configmaps, want {N}",
            store.len()
        ));
    }
    r.push(
        Metric::new(
            "peak heap during a relist, nothing changed (upper bound: includes the first sync)",
            "MiB",
            peak as f64 / (1u64 << 20) as f64,
        )
        .baseline(
            store_bytes as f64 / (1u64 << 20) as f64,
            "the synced store's heap",
        )
        .goal(Goal::Ratio(Bound::AtMost(1.5))),
    );
    r.push(
        Metric::new("peak heap during a relist in which every configmap changed", "MiB", worst as f64 / (1u64 << 20) as f64)
            .baseline(store_bytes as f64 / (1u64 << 20) as f64, "the synced store's heap")
            .goal(Goal::Ratio(Bound::AtMost(1.5)))
            .note("old and new objects must coexist until the relist commits (readers see the old state until then)"),
    );
    r.notes.push(format!(
        "{N} configmaps of {:.0} B JSON each ({:.1} MiB in all); the store holds {:.1} MiB, {:.1} MiB after the relist. \
         The peak is the process's high-water mark (it cannot be reset): the first sync peaked at {:.1} MiB, so the \
         relist's own peak is the figure when it is higher, and at most it otherwise.",
        json_total as f64 / N as f64,
        json_total as f64 / (1u64 << 20) as f64,
        store_bytes as f64 / (1u64 << 20) as f64,
        after as f64 / (1u64 << 20) as f64,
        first_peak as f64 / (1u64 << 20) as f64,
    ));
    Ok(r)
}
