//! The consistency checker (upstream's `DetectCacheInconsistency`): a cache made to miss
//! events (the `fault-injection` feature) is found out by the first check after, its reads
//! fall back to the backend (lists at every resource version, with a limit and continue
//! tokens, and gets), the check is counted in `apiserver_storage_consistency_checks_total`,
//! and once a check agrees again reads come from the cache again. A check neither holds up
//! writes nor watches while it lists the backend.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Probe, next, pod, put};
use listwatch_cacher::fault::MissEvents;
use listwatch_cacher::{Cacher, CacherConfig, CacherMetrics, ConsistencyCheck};
use listwatch_memstore::MemStore;
use listwatch_storage::{GetOptions, Key, ListOptions, ObjectList, Storage, WatchEvent};
use prometheus_client::registry::Registry;

const PERIOD: Duration = Duration::from_millis(200);

fn all() -> Key {
    Key::collection("pods", None).unwrap()
}

fn metrics_text(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
    text
}

fn checks(registry: &Registry, status: &str) -> u64 {
    let series = format!(
        "apiserver_storage_consistency_checks_total{{resource=\"pods\",status=\"{status}\"}} "
    );
    metrics_text(registry)
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// `namespace/name@rv` of every item, in order.
fn items(list: &ObjectList) -> Vec<String> {
    list.items
        .iter()
        .map(|o| {
            format!(
                "{}/{}@{}",
                o.namespace().unwrap_or(""),
                o.name(),
                o.resource_version()
            )
        })
        .collect()
}

/// Every page of a list with `limit`, from `first` on.
async fn walk(s: &impl Storage, first: ListOptions) -> Vec<String> {
    let mut opts = first;
    let mut got = Vec::new();
    loop {
        let page = s.list(&all(), &opts).await.unwrap();
        got.extend(items(&page));
        match page.continue_token {
            Some(t) => {
                opts = ListOptions {
                    continue_token: Some(t),
                    limit: opts.limit,
                    ..ListOptions::recursive()
                };
            }
            None => return got,
        }
    }
}

/// Waits (at most 30 s) until `f` holds.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not in time: {what}"));
}

fn cacher(probe: &Probe, registry: &mut Registry, period: Duration, page: u32) -> Cacher {
    let mut config = CacherConfig::new("pods")
        .with_metrics(CacherMetrics::register(registry))
        .with_consistency_check_period(period);
    config.consistency_check_page_size = page;
    Cacher::new(Arc::new(probe.clone()), config)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_that_missed_events_is_found_out_reads_fall_back_and_come_back() {
    let probe = Probe::new(MemStore::new());
    let mut registry = Registry::default();
    // Pages of two objects: the check walks both sides in several pages.
    let cacher = cacher(&probe, &mut registry, PERIOD, 2);
    cacher.wait_ready().await;
    for (ns, name) in [("ns1", "a"), ("ns1", "b"), ("ns2", "a"), ("ns2", "c")] {
        put(&cacher, pod(ns, name, "n1", 0)).await;
    }
    eventually("a first check passes", || checks(&registry, "success") >= 1).await;
    assert!(cacher.is_consistent());

    // The cache misses the creation of ns1/lost and the update of ns2/a.
    cacher.set_faults(vec![
        MissEvents::new(Some("ns1"), "lost"),
        MissEvents::new(Some("ns2"), "a"),
    ]);
    let passed_before = checks(&registry, "success");
    let lost = put(&cacher, pod("ns1", "lost", "n1", 0)).await;
    let moved = put(&cacher, pod("ns2", "a", "n2", 1)).await;
    let truth = items(
        &probe
            .inner
            .list(&all(), &ListOptions::recursive())
            .await
            .unwrap(),
    );
    assert!(truth.contains(&format!("ns1/lost@{}", lost.resource_version())));
    assert!(truth.contains(&format!("ns2/a@{}", moved.resource_version())));

    eventually("the corruption is detected", || !cacher.is_consistent()).await;
    assert!(checks(&registry, "failure") >= 1);
    // Found by the first check after the corruption (one already under way may pass).
    assert!(checks(&registry, "success") <= passed_before + 1);
    let text = metrics_text(&registry);
    assert!(
        text.contains("listwatch_cacher_inconsistent{resource=\"pods\"} 1"),
        "{text}"
    );

    // Every kind of list now answers the backend's truth.
    let consistent = cacher
        .list(&all(), &ListOptions::recursive())
        .await
        .unwrap();
    assert_eq!(items(&consistent), truth, "resourceVersion unset");
    let any = ListOptions::recursive().at(Some(0), None);
    assert_eq!(
        items(&cacher.list(&all(), &any).await.unwrap()),
        truth,
        "resourceVersion=0"
    );
    let paged = ListOptions {
        limit: Some(2),
        ..ListOptions::recursive()
    };
    assert_eq!(
        walk(&cacher, paged).await,
        truth,
        "limit=2 and its continue pages"
    );
    let got = cacher
        .get(
            &Key::object("pods", Some("ns1"), "lost").unwrap(),
            &GetOptions {
                resource_version: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        got.map(|o| o.resource_version()),
        Some(lost.resource_version())
    );
    assert!(
        metrics_text(&registry)
            .contains("listwatch_cacher_inconsistent_reads_from_backend_total{resource=\"pods\"} ")
    );

    // The cache gets the objects' next events: it agrees again, and reads come from it.
    cacher.set_faults(Vec::new());
    let lost = put(&cacher, pod("ns1", "lost", "n1", 2)).await;
    put(&cacher, pod("ns2", "a", "n2", 3)).await;
    eventually("a check agrees again", || cacher.is_consistent()).await;
    assert!(metrics_text(&registry).contains("listwatch_cacher_inconsistent{resource=\"pods\"} 0"));
    // With the backend's lists failing, the cache still answers.
    probe.lists_fail.store(true, Ordering::SeqCst);
    let from_cache = cacher.list(&all(), &any).await.unwrap();
    assert!(items(&from_cache).contains(&format!("ns1/lost@{}", lost.resource_version())));
    let from_cache = cacher
        .list(&all(), &ListOptions::recursive())
        .await
        .unwrap();
    assert_eq!(from_cache.items.len(), 5);
    probe.lists_fail.store(false, Ordering::SeqCst);
}

#[tokio::test]
async fn an_object_deleted_behind_the_caches_back_is_found_by_a_check() {
    let probe = Probe::new(MemStore::new());
    let mut registry = Registry::default();
    let cacher = cacher(&probe, &mut registry, Duration::ZERO, 1000);
    cacher.wait_ready().await;
    put(&cacher, pod("ns", "a", "n1", 0)).await;
    let b = put(&cacher, pod("ns", "b", "n1", 0)).await;
    let ConsistencyCheck::Consistent { digest, .. } = cacher.check_consistency().await else {
        panic!("a faithful cache is consistent");
    };
    assert_eq!(digest.objects, 2);

    cacher.set_faults(vec![MissEvents::new(Some("ns"), "b")]);
    let key = Key::object("pods", Some("ns"), "b").unwrap();
    cacher
        .delete(&key, None, listwatch_storage::no_validation(), None)
        .await
        .unwrap();
    let check = cacher.check_consistency().await;
    let ConsistencyCheck::Inconsistent { cache, backend, .. } = check else {
        panic!("the cache still holds b: {check:?}");
    };
    assert_eq!((cache.objects, backend.objects), (2, 1));
    assert_eq!(checks(&registry, "failure"), 1);
    let exact = ListOptions::recursive().at(
        Some(b.resource_version()),
        Some(listwatch_storage::ResourceVersionMatch::Exact),
    );
    assert_eq!(
        cacher.list(&all(), &exact).await.unwrap().items.len(),
        2,
        "an Exact list at b's version, from the backend"
    );
    assert_eq!(
        cacher
            .list(&all(), &ListOptions::recursive())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_holds_up_neither_writes_nor_watches() {
    let probe = Probe::new(MemStore::new());
    let mut registry = Registry::default();
    // The check lists the backend in pages of the probe's held size: its lists wait.
    let page = u32::try_from(common::HELD_PAGE_SIZE).unwrap();
    let cacher = cacher(&probe, &mut registry, Duration::ZERO, page);
    cacher.wait_ready().await;
    let a = put(&cacher, pod("ns", "a", "n1", 0)).await;
    let mut watch = cacher
        .watch(
            &all(),
            &ListOptions::recursive().at(Some(a.resource_version()), None),
        )
        .await
        .unwrap();
    probe.hold_lists(true);
    let listed = probe.lists.load(Ordering::SeqCst);
    let check = {
        let cacher = cacher.clone();
        tokio::spawn(async move { cacher.check_consistency().await })
    };
    eventually("the check lists the backend", || {
        probe.lists.load(Ordering::SeqCst) > listed
    })
    .await;
    // While the check's list is held: a write, its event, and a list from the cache.
    let b = put(&cacher, pod("ns", "b", "n1", 0)).await;
    match next(&mut watch).await {
        Some(WatchEvent::Added(o)) => assert_eq!(o.resource_version(), b.resource_version()),
        other => panic!("expected b's ADDED, got {other:?}"),
    }
    let any = ListOptions::recursive().at(Some(0), None);
    assert_eq!(cacher.list(&all(), &any).await.unwrap().items.len(), 2);
    assert!(!check.is_finished());
    probe.hold_lists(false);
    let outcome = tokio::time::timeout(Duration::from_secs(30), check)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(outcome, ConsistencyCheck::Consistent { .. }),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_rebuilds_a_wrong_cache_and_the_next_check_agrees() {
    let probe = Probe::new(MemStore::new());
    let mut registry = Registry::default();
    let cacher = cacher(&probe, &mut registry, PERIOD, 1000);
    cacher.wait_ready().await;
    put(&cacher, pod("ns", "a", "n1", 0)).await;
    cacher.set_faults(vec![MissEvents::new(Some("ns"), "lost")]);
    put(&cacher, pod("ns", "lost", "n1", 0)).await;
    eventually("the corruption is detected", || !cacher.is_consistent()).await;

    // The cache relists (its storage watch fails): the new list has the object.
    cacher.set_faults(Vec::new());
    let generation = cacher.ready_state().1;
    probe.cut_watches();
    eventually("the cache relists", || cacher.ready_state().1 > generation).await;
    eventually("a check agrees again", || cacher.is_consistent()).await;
    probe.lists_fail.store(true, Ordering::SeqCst);
    let any = ListOptions::recursive().at(Some(0), None);
    let from_cache = cacher.list(&all(), &any).await.unwrap();
    assert_eq!(from_cache.items.len(), 2, "the rebuilt cache answers");
    probe.lists_fail.store(false, Ordering::SeqCst);
}

/// A cache whose version is compacted away (an idle resource on a backend that cannot be
/// asked for progress) and that lags a write made just before a check: the check compares
/// with the backend's current state, sees the difference, waits for the cache to catch up
/// (the write's event is released only once the check has listed the backend) and then
/// agrees. A lagging cache is never flagged. Before: the check listed the backend at the
/// cache's compacted version and counted an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_waits_for_a_lagging_cache_whose_version_is_compacted() {
    let probe = Probe::new(MemStore::new());
    probe.progress_answered.store(false, Ordering::SeqCst);
    let mut registry = Registry::default();
    let mut config = CacherConfig::new("pods")
        .with_metrics(CacherMetrics::register(&mut registry))
        .with_consistency_check_period(Duration::ZERO);
    config.consistent_reads_from_cache = false;
    config.consistency_check_page_size = 1;
    let cacher = Cacher::new(Arc::new(probe.clone()), config);
    cacher.wait_ready().await;
    let a = put(&probe, pod("ns", "a", "n1", 0)).await;
    cacher.wait_until_fresh(a.resource_version()).await.unwrap();
    let mut now = 0;
    for name in ["x", "y"] {
        now = common::put_in(&probe, "configmaps", pod("ns", name, "n1", 0))
            .await
            .resource_version();
    }
    probe.inner.compact(now).unwrap();
    assert!(cacher.cache_resource_version() < probe.compacted_revision());

    probe.hold_events(true);
    put(&probe, pod("ns", "b", "n1", 0)).await;
    let lists = probe.lists.load(Ordering::SeqCst);
    let check = tokio::spawn({
        let cacher = cacher.clone();
        async move { cacher.check_consistency().await }
    });
    // The Exact list at the cache's version (compacted), then the current state's pages.
    eventually("the check listed the backend's current state", || {
        probe.lists.load(Ordering::SeqCst) >= lists + 3
    })
    .await;
    probe.hold_events(false);
    let check = check.await.unwrap();
    let ConsistencyCheck::Consistent { digest, .. } = check else {
        panic!("a cache that only lagged: {check:?}");
    };
    assert_eq!(digest.objects, 2);
    assert!(cacher.is_consistent());
    assert_eq!(
        (checks(&registry, "success"), checks(&registry, "error")),
        (1, 0)
    );
}
