//! Watch fan-out through the Cacher beside a bare tokio fan-out of the same events.
//!
//! Shared by the `cacher` criterion bench and the load generator's P1 and P4, so that both
//! measure exactly the same thing. Every watcher is a task that drains its stream and takes
//! the event's wire bytes, as the HTTP layer does; the bare fan-out sends `Arc`'d events over
//! bounded tokio channels to as many tasks, which is the floor any dispatcher pays.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use listwatch_api::Object;
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use tokio::sync::{Notify, mpsc};

fn key() -> Key {
    Key::object("pods", Some("default"), "web").unwrap_or_else(|e| panic!("{e}"))
}

/// Writes `obj` at the fixed key through `store`; returns the new resource version.
pub async fn put(store: &impl Storage, obj: &Object) -> u64 {
    let mut update = |_: Option<&Object>| Ok(obj.clone().into());
    match store
        .guaranteed_update(&key(), None, true, &mut update, None)
        .await
    {
        Ok(o) => o.resource_version(),
        Err(e) => panic!("write failed: {e}"),
    }
}

/// Counts deliveries; wakes the producer when all `target` arrived.
struct Done {
    delivered: AtomicU64,
    target: u64,
    notify: Notify,
}

impl Done {
    fn new(target: u64) -> Arc<Self> {
        Arc::new(Self {
            delivered: AtomicU64::new(0),
            target,
            notify: Notify::new(),
        })
    }

    fn add(&self) {
        if self.delivered.fetch_add(1, Ordering::AcqRel) + 1 == self.target {
            self.notify.notify_one();
        }
    }
}

/// A Cacher over an empty MemStore with `watchers` watchers of all pods, ready to write.
pub struct CacherFanout {
    /// The cacher the writes go through.
    pub cacher: Cacher,
    done: Arc<Done>,
}

impl CacherFanout {
    /// Starts the cacher and `watchers` draining tasks, expecting `iters` events each.
    pub async fn start(watchers: usize, iters: u64, first: &Object) -> Self {
        let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
        cacher.wait_ready().await;
        let start = put(&cacher, first).await;
        let all = Key::collection("pods", None).unwrap_or_else(|e| panic!("{e}"));
        let opts = ListOptions {
            resource_version: Some(start),
            ..ListOptions::recursive()
        };
        let done = Done::new(iters * watchers as u64);
        for _ in 0..watchers {
            let mut w = cacher
                .watch(&all, &opts)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                while let Some(ev) = w.next().await {
                    if let WatchEvent::Modified { object, .. } = ev {
                        std::hint::black_box(object.to_json_bytes());
                        done.add();
                    }
                }
            });
        }
        Self { cacher, done }
    }

    /// Writes `iters` updates alternating between `versions`; returns when every watcher
    /// had every one of them.
    pub async fn run(&self, iters: u64, versions: &[Object; 2]) -> Duration {
        let notified = self.done.notify.notified();
        let t = Instant::now();
        for i in 0..iters {
            put(&self.cacher, &versions[usize::from(i % 2 == 0)]).await;
        }
        notified.await;
        t.elapsed()
    }
}

/// Time for `iters` writes to reach `watchers` cacher watchers.
pub async fn cacher_fanout(watchers: usize, iters: u64, versions: &[Object; 2]) -> Duration {
    CacherFanout::start(watchers, iters, &versions[0])
        .await
        .run(iters, versions)
        .await
}

/// Time for `iters` Arc'd events to reach `watchers` tasks over bounded channels.
pub async fn bare_fanout(watchers: usize, iters: u64, event: &Object) -> Duration {
    let done = Done::new(iters * watchers as u64);
    let mut senders = Vec::with_capacity(watchers);
    for _ in 0..watchers {
        let (tx, mut rx) = mpsc::channel::<Arc<Object>>(100);
        senders.push(tx);
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            while let Some(o) = rx.recv().await {
                std::hint::black_box(o.to_json_bytes());
                done.add();
            }
        });
    }
    let notified = done.notify.notified();
    let t = Instant::now();
    for i in 0..iters {
        let ev = Arc::new(event.with_resource_version(i + 2).with_shared_encoding());
        for tx in &senders {
            if tx.send(Arc::clone(&ev)).await.is_err() {
                panic!("receiver gone");
            }
        }
    }
    notified.await;
    t.elapsed()
}

/// A pod carrying a ~1 MiB annotation, tagged so that two versions differ.
pub fn big_pod(tag: &str) -> Object {
    let mut v = match crate::pod("default", "web", "node-1").to_value() {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    };
    v["metadata"]["annotations"]["blob"] =
        serde_json::Value::String(format!("{tag}{}", "x".repeat(1 << 20)));
    match Object::from_value(v, &crate::pod_fields()) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    }
}

/// A label selector of `n` requirements that `pod` matches: `app=web` and `n - 1`
/// `!absent-i` (each a map lookup that misses), the shape of the cap's worst case.
pub fn heavy_selector(n: usize) -> String {
    let mut s = String::from("app=web");
    for i in 1..n {
        s.push_str(&format!(",!absent-{i}"));
    }
    s
}

/// Time for `iters` writes to reach every matching watcher of a mix: `heavy` watchers with
/// `heavy_selector` and `plain` watchers with `plain_selector` (`None`: everything). Only
/// watchers whose selector matches the pod count; `plain_matches` says whether the plain
/// ones do. The writes alternate between `versions` (both match `heavy_selector`).
pub async fn selector_fanout(
    heavy: usize,
    heavy_selector: &str,
    plain: usize,
    plain_selector: Option<&str>,
    plain_matches: bool,
    iters: u64,
    versions: &[Object; 2],
) -> Duration {
    let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
    cacher.wait_ready().await;
    let start = put(&cacher, &versions[0]).await;
    let all = Key::collection("pods", None).unwrap_or_else(|e| panic!("{e}"));
    let matching = heavy + if plain_matches { plain } else { 0 };
    let done = Done::new(iters * matching as u64);
    let selectors = std::iter::repeat_n(Some(heavy_selector), heavy)
        .chain(std::iter::repeat_n(plain_selector, plain));
    for sel in selectors {
        let mut opts = ListOptions {
            resource_version: Some(start),
            ..ListOptions::recursive()
        };
        if let Some(sel) = sel {
            opts.predicate.label = sel.parse().unwrap_or_else(|e| panic!("{e}"));
        }
        let mut w = cacher
            .watch(&all, &opts)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            while let Some(ev) = w.next().await {
                if let WatchEvent::Modified { object, .. } = ev {
                    std::hint::black_box(object.to_json_bytes());
                    done.add();
                }
            }
        });
    }
    let notified = done.notify.notified();
    let t = Instant::now();
    for i in 0..iters {
        put(&cacher, &versions[usize::from(i % 2 == 0)]).await;
    }
    notified.await;
    t.elapsed()
}
