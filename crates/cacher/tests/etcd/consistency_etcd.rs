//! The consistency check over etcd 3.4 (no reliable progress requests, so consistent reads
//! from the cache off, as the binary configures it there): an idle resource's cache stays at
//! its last write's revision, which a compaction passes. Its checks then compare with etcd's
//! current state instead of failing with "too old" (rt5: 1336 errors against 324 successes
//! in a minute, and a corrupted cache flagged until a write to it), and a corruption of such
//! a resource is still found, and cleared once the cache agrees again.
//! Ignored unless etcd is there (`cargo xtask test` runs them).

use std::sync::Arc;
use std::time::Duration;

use listwatch_api::{Object, SelectableFields};
use listwatch_cacher::fault::MissEvents;
use listwatch_cacher::{Cacher, CacherConfig, CacherMetrics, ConsistencyCheck};
use listwatch_etcd::testing::EtcdServer;
use listwatch_etcd::{EtcdStore, compact_now};
use listwatch_storage::{Key, Storage};
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

struct Setup {
    _etcd: EtcdServer,
    store: EtcdStore,
    cacher: Cacher,
    registry: Registry,
}

impl Setup {
    /// etcd on its default flags and a cacher of pods configured as the binary configures it
    /// there; no periodic check (the test runs each one).
    async fn start() -> Self {
        let etcd = EtcdServer::start().await.expect("start etcd");
        let client = listwatch_etcd::EtcdClient::new(etcd.config()).unwrap();
        let store = EtcdStore::new(client.clone(), "/registry", SelectableFields::none());
        let mut registry = Registry::default();
        let mut config = CacherConfig::new("pods")
            .with_metrics(CacherMetrics::register(&mut registry))
            .with_consistency_check_period(Duration::ZERO);
        config.consistent_reads_from_cache = client.progress_requests_are_ordered().await;
        assert!(
            !config.consistent_reads_from_cache,
            "this test is about etcd before 3.5.13"
        );
        // Pages of two: both sides are walked in several pages.
        config.consistency_check_page_size = 2;
        let cacher = Cacher::new(Arc::new(store.clone()), config);
        tokio::time::timeout(BOUND, cacher.wait_ready())
            .await
            .expect("cacher ready");
        Self {
            _etcd: etcd,
            store,
            cacher,
            registry,
        }
    }

    async fn create_pod(&self, name: &str) -> u64 {
        self.store
            .create(&key("pods", name), object(name), None)
            .await
            .unwrap()
            .resource_version()
    }

    /// Writes to another resource and compacts etcd there: the idle pods cache's version
    /// is compacted away. Returns the compacted revision.
    async fn compact_past_the_cache(&self) -> u64 {
        let mut now = 0;
        for i in 0..3 {
            let name = format!("c{i}-{}", self.cacher.cache_resource_version());
            now = self
                .store
                .create(&key("configmaps", &name), object(&name), None)
                .await
                .unwrap()
                .resource_version();
        }
        compact_now(self.store.client(), now).await.unwrap();
        assert!(self.cacher.compacted_revision() > self.cacher.cache_resource_version());
        now
    }

    fn checks(&self, status: &str) -> u64 {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).unwrap();
        let series = format!(
            "apiserver_storage_consistency_checks_total{{resource=\"pods\",status=\"{status}\"}} "
        );
        text.lines()
            .find_map(|l| l.strip_prefix(&series))
            .map_or(0, |v| v.trim().parse().unwrap())
    }

    async fn check(&self) -> ConsistencyCheck {
        tokio::time::timeout(BOUND, self.cacher.check_consistency())
            .await
            .expect("the check hung")
    }
}

/// Before: the check listed etcd at the cache's compacted version and counted an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn an_idle_resource_compacted_past_its_cache_version_still_checks_consistent() {
    let s = Setup::start().await;
    for name in ["a", "b", "c"] {
        s.create_pod(name).await;
    }
    let last = s.create_pod("d").await;
    s.cacher.wait_until_fresh(last).await.unwrap();
    assert!(matches!(
        s.check().await,
        ConsistencyCheck::Consistent { .. }
    ));

    let compacted = s.compact_past_the_cache().await;
    let check = s.check().await;
    let ConsistencyCheck::Consistent { rv, digest } = check else {
        panic!("a faithful idle cache after a compaction: {check:?}");
    };
    assert!(
        rv >= compacted,
        "compared at {rv}, before etcd's {compacted}"
    );
    assert_eq!(digest.objects, 4);
    assert!(s.cacher.cache_resource_version() < compacted, "still idle");
    assert_eq!((s.checks("success"), s.checks("error")), (2, 0));
    assert!(s.cacher.is_consistent());
}

/// A cache that missed the last write to an idle resource is found out after a compaction
/// passed its version, and is cleared once it agrees again, with no further write to the
/// resource after the one that set it right. Before: both checks counted errors; the flag
/// was never set, and once set it stayed until the next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_corruption_of_an_idle_compacted_resource_is_found_and_cleared() {
    let s = Setup::start().await;
    let last = s.create_pod("a").await;
    s.cacher.wait_until_fresh(last).await.unwrap();
    s.cacher
        .set_faults(vec![MissEvents::new(Some("ns"), "lost")]);
    let lost = s.create_pod("lost").await;
    s.compact_past_the_cache().await;

    let check = s.check().await;
    let ConsistencyCheck::Inconsistent { cache, backend, .. } = check else {
        panic!("a cache missing an object: {check:?}");
    };
    assert_eq!((cache.objects, backend.objects), (1, 2));
    assert!(!s.cacher.is_consistent());

    // The cache hears of the object's deletion, then the resource is idle again and
    // compacted past once more.
    s.cacher.set_faults(Vec::new());
    let deleted = s
        .store
        .delete(
            &key("pods", "lost"),
            None,
            listwatch_storage::no_validation(),
            None,
        )
        .await
        .unwrap()
        .resource_version();
    assert!(deleted > lost);
    s.cacher.wait_until_fresh(deleted).await.unwrap();
    s.compact_past_the_cache().await;
    let check = s.check().await;
    assert!(
        matches!(check, ConsistencyCheck::Consistent { .. }),
        "the cache agrees again: {check:?}"
    );
    assert!(s.cacher.is_consistent());
    assert_eq!(
        (s.checks("success"), s.checks("failure"), s.checks("error")),
        (1, 1, 0)
    );
}
