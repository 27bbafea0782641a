//! The cacher over etcd 3.4 started with its default flags — no
//! `--experimental-watch-progress-notify-interval`, as most clusters run it — configured as
//! `listwatch-apiserver` configures it there: consistent reads from the cache off, because
//! etcd before 3.5.13 cannot be asked for progress reliably (docs/etcd.md). A quiet resource's
//! cache then never learns etcd's revision from anyone: these tests hold what must not depend
//! on it (issue 26). Ignored unless etcd is there (`cargo xtask test` runs them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_cacher::{Cacher, CacherConfig, CacherMetrics, StorageListerWatcher};
use listwatch_etcd::testing::EtcdServer;
use listwatch_etcd::{EtcdStore, compact_now};
use listwatch_runtime::{ListerWatcher, WatchRequest};
use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, Storage, WatchEvent};
use prometheus_client::registry::Registry;

/// A hang detector, far above anything the tests wait for.
const BOUND: Duration = Duration::from_secs(60);

fn object(name: &str) -> Object {
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#).as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn key(resource: &str, name: &str) -> Key {
    Key::object(resource, Some("ns"), name).unwrap()
}

fn pods() -> Key {
    Key::collection("pods", Some("ns")).unwrap()
}

struct Setup {
    etcd: EtcdServer,
    store: EtcdStore,
    cacher: Cacher,
    registry: Registry,
    /// Whether consistent reads are served from the cache (false on etcd before 3.5.13).
    consistent_from_cache: bool,
}

impl Setup {
    /// etcd on its default flags, and a cacher of pods configured as the binary configures
    /// it on that etcd.
    async fn start() -> Self {
        Self::start_with_request_timeout(None).await
    }

    /// [`Setup::start`], with the etcd client's request timeout set.
    async fn start_with_request_timeout(timeout: Option<Duration>) -> Self {
        let etcd = EtcdServer::start().await.expect("start etcd");
        let mut config = etcd.config();
        if let Some(t) = timeout {
            config = config.request_timeout(t);
        }
        let client = listwatch_etcd::EtcdClient::new(config).unwrap();
        let store = EtcdStore::new(client.clone(), "/registry", SelectableFields::none());
        let mut registry = Registry::default();
        let metrics = CacherMetrics::register(&mut registry);
        let mut config = CacherConfig::new("pods").with_metrics(metrics);
        // What listwatch-apiserver decides at start-up (false on etcd 3.4.23).
        let consistent_from_cache = client.progress_requests_are_ordered().await;
        config.consistent_reads_from_cache = consistent_from_cache;
        let cacher = Cacher::new(Arc::new(store.clone()), config);
        tokio::time::timeout(BOUND, cacher.wait_ready())
            .await
            .expect("cacher ready");
        Self {
            etcd,
            store,
            cacher,
            registry,
            consistent_from_cache,
        }
    }

    /// The pods series of `listwatch_cacher_<name>`.
    fn counter(&self, name: &str) -> f64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        let series = format!("listwatch_cacher_{name}_total{{resource=\"pods\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// Writes to another resource: etcd's revision moves, the pods cache sees nothing.
    async fn write_elsewhere(&self, n: usize) -> u64 {
        let mut last = 0;
        for i in 0..n {
            let name = format!("c{i}-{}", rand_suffix());
            last = self
                .store
                .create(&key("configmaps", &name), object(&name), None)
                .await
                .unwrap()
                .resource_version();
        }
        last
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The cacher's lister-watcher keeps one storage watch until it fails, whatever timeout the
/// reflector asks for (upstream's cacher lister-watcher ignores it). Before, the watch ended
/// after the timeout and the reflector re-watched a quiet resource from a revision etcd had
/// compacted meanwhile: 410, a relist, every watcher ended with 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn the_caches_storage_watch_ignores_the_reflectors_timeout() {
    let etcd = EtcdServer::start().await.expect("start etcd");
    let store = EtcdStore::new(etcd.client(), "/registry", SelectableFields::none());
    let rv = store
        .create(&key("pods", "a"), object("a"), None)
        .await
        .unwrap()
        .resource_version();
    let lw = StorageListerWatcher::new(Arc::new(store.clone()), pods());
    let request = WatchRequest {
        resource_version: Some(rv.to_string()),
        allow_bookmarks: true,
        timeout_seconds: Some(1),
        ..WatchRequest::default()
    };
    let mut events = lw.watch(&request).await.unwrap();
    // Three times the timeout asked for: the stream neither ends nor says anything.
    let quiet = tokio::time::timeout(Duration::from_secs(3), events.next()).await;
    assert!(
        quiet.is_err(),
        "the storage watch did not outlive the reflector's 1 s timeout: {quiet:?}"
    );
    let b = store
        .create(&key("pods", "b"), object("b"), None)
        .await
        .unwrap();
    let next = tokio::time::timeout(BOUND, events.next())
        .await
        .expect("the watch hung");
    match next {
        Some(Ok(listwatch_runtime::WatchEvent::Added(o))) => assert_eq!(o, b),
        other => panic!("expected b's ADDED, got {other:?}"),
    }
}

/// A consistent list (served by etcd: the cache may not be asked for progress) hands out
/// etcd's revision, which the quiet pods cache has not reached; a watch from it is accepted
/// at once, with no wait, and delivers the next write once. A list at RV=0 hands out the
/// cache's older revision; after etcd compacted past it, a watch from it is still accepted
/// (the window covers it). Before: the first watch waited 3 s and failed with 504 "Too large
/// resource version", the second failed with 410 "too old resource version" — a client
/// relisting at RV=0 looped on it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn lists_hand_out_versions_a_watch_accepts_on_a_quiet_resource() {
    let s = Setup::start().await;
    assert!(
        !s.consistent_from_cache,
        "this test is about etcd before 3.5.13"
    );
    s.store
        .create(&key("pods", "a"), object("a"), None)
        .await
        .unwrap();
    let etcd_rev = s.write_elsewhere(5).await;

    let consistent = s
        .cacher
        .list(&pods(), &ListOptions::recursive())
        .await
        .unwrap();
    assert!(consistent.resource_version >= etcd_rev);
    assert!(s.cacher.cache_resource_version() < consistent.resource_version);
    let from = ListOptions {
        resource_version: Some(consistent.resource_version),
        ..ListOptions::recursive()
    };
    let mut w = tokio::time::timeout(BOUND, s.cacher.watch(&pods(), &from))
        .await
        .expect("watch hung")
        .expect("a watch from a consistent list's version");
    assert_eq!(s.counter("freshness_waits"), 0.0, "the watch waited");
    let b = s
        .store
        .create(&key("pods", "b"), object("b"), None)
        .await
        .unwrap();
    let got = tokio::time::timeout(BOUND, w.next()).await.expect("hung");
    assert_eq!(got, Some(WatchEvent::Added(b)));

    // RV=0: the cache's version; then etcd compacts past it.
    let any = ListOptions {
        resource_version: Some(0),
        ..ListOptions::recursive()
    };
    let at_zero = s.cacher.list(&pods(), &any).await.unwrap();
    let now = s.write_elsewhere(3).await;
    compact_now(s.store.client(), now).await.unwrap();
    assert!(s.cacher.compacted_revision() > at_zero.resource_version);
    let from = ListOptions {
        resource_version: Some(at_zero.resource_version),
        ..ListOptions::recursive()
    };
    let mut w = tokio::time::timeout(BOUND, s.cacher.watch(&pods(), &from))
        .await
        .expect("watch hung")
        .expect("a watch from the version a list at RV=0 handed out");
    let c = s
        .store
        .create(&key("pods", "c"), object("c"), None)
        .await
        .unwrap();
    let got = tokio::time::timeout(BOUND, w.next()).await.expect("hung");
    assert_eq!(got, Some(WatchEvent::Added(c)));
    assert_eq!(s.counter("relists"), 0.0);
    assert_eq!(s.counter("freshness_timeouts"), 0.0);
}

/// A paginated walk of 10 pods by 2 whose first page is a consistent list (read from etcd
/// at its revision, which the quiet cache has not reached) continues from etcd at once, and
/// so does an Exact list at that revision: no read waits for the cache (upstream's
/// shouldDelegateExactRV / ShouldDelegateContinue). Before, every continued page and the
/// Exact list waited the freshness timeout (3 s) first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn continues_and_exact_reads_delegate_at_once_when_the_cache_is_behind() {
    let s = Setup::start().await;
    assert!(
        !s.consistent_from_cache,
        "this test is about etcd before 3.5.13"
    );
    for i in 0..10 {
        let name = format!("p{i:02}");
        s.store
            .create(&key("pods", &name), object(&name), None)
            .await
            .unwrap();
    }
    s.write_elsewhere(3).await;
    let mut names = Vec::new();
    let mut opts = ListOptions {
        limit: Some(2),
        ..ListOptions::recursive()
    };
    let mut pages = 0;
    let mut first_rv = None;
    loop {
        let page = tokio::time::timeout(BOUND, s.cacher.list(&pods(), &opts))
            .await
            .expect("hung")
            .unwrap();
        pages += 1;
        first_rv.get_or_insert(page.resource_version);
        names.extend(page.items.iter().map(|o| o.name().to_owned()));
        match page.continue_token {
            Some(t) => opts.continue_token = Some(t),
            None => break,
        }
    }
    let want: Vec<String> = (0..10).map(|i| format!("p{i:02}")).collect();
    assert_eq!(names, want);
    assert_eq!(pages, 5);
    assert!(s.cacher.cache_resource_version() < first_rv.unwrap());
    assert_eq!(s.counter("continues_from_backend"), 4.0);

    let exact = ListOptions {
        resource_version: first_rv,
        resource_version_match: Some(ResourceVersionMatch::Exact),
        ..ListOptions::recursive()
    };
    let list = s.cacher.list(&pods(), &exact).await.unwrap();
    assert_eq!(list.items.len(), 10);
    let legacy = ListOptions {
        resource_version: first_rv,
        limit: Some(2),
        ..ListOptions::recursive()
    };
    let page = s.cacher.list(&pods(), &legacy).await.unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(s.counter("exact_reads_from_backend"), 2.0);
    assert_eq!(
        s.counter("freshness_waits"),
        0.0,
        "a read waited for the cache"
    );
}

/// etcd restarted on the same data, down about a second, under a running cacher: its storage
/// watch resumes after the last revision (as clientv3's does), so the cache neither relists
/// nor ends its watchers, and a watcher sees every later write once. Before, the reset
/// connection failed the storage watch like a quorum loss: a relist, and every watcher ended
/// with 429 "storage is (re)initializing".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn an_etcd_restart_neither_relists_nor_ends_watchers() {
    // Resuming is bounded by the request timeout: above etcd's restart time here.
    let mut setup = Setup::start_with_request_timeout(Some(Duration::from_secs(30))).await;
    let a = setup
        .store
        .create(&key("pods", "a"), object("a"), None)
        .await
        .unwrap();
    let from_a = ListOptions {
        resource_version: Some(a.resource_version()),
        ..ListOptions::recursive()
    };
    let mut w = tokio::time::timeout(BOUND, setup.cacher.watch(&pods(), &from_a))
        .await
        .expect("watch hung")
        .unwrap();
    let relists = setup.counter("relists");

    setup.etcd.kill();
    tokio::time::sleep(Duration::from_secs(1)).await;
    setup.etcd.restart().await.unwrap();
    let deadline = tokio::time::Instant::now() + BOUND;
    let b = loop {
        match setup
            .store
            .create(&key("pods", "b"), object("b"), None)
            .await
        {
            Ok(b) => break b,
            Err(listwatch_storage::Error::Unreachable { .. })
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("etcd did not come back: {e:?}"),
        }
    };
    let c = setup
        .store
        .create(&key("pods", "c"), object("c"), None)
        .await
        .unwrap();
    for want in [b, c] {
        let got = loop {
            match tokio::time::timeout(BOUND, w.next())
                .await
                .expect("the watcher got nothing")
            {
                Some(WatchEvent::Bookmark(_)) => {}
                other => break other,
            }
        };
        assert_eq!(got, Some(WatchEvent::Added(want)));
    }
    assert_eq!(
        setup.counter("relists"),
        relists,
        "the cache relisted after etcd's restart"
    );
}
