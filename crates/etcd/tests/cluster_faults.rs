//! Fault tests on a three-member etcd cluster on loopback (data on tmpfs): the leader killed
//! under write load with 100 watchers resuming on their own, and compactions landing during a
//! filtered paginated walk. Every check is against ground truth — the answers to the writes
//! and a final list — never against a timing; recovery times are printed (see docs/etcd.md,
//! "Fault tests") and only bounded by hang detectors.
//!
//! The tests of this file run one at a time (each starts three etcd members; on a small
//! machine running them side by side would measure the machine, not the recovery).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use listwatch_api::{LabelSelector, Object, SelectableFields};
use listwatch_etcd::testing::EtcdCluster;
use listwatch_etcd::{EtcdClient, EtcdConfig, EtcdStore, compact_now};
use listwatch_storage::{Error, Key, ListOptions, Result, SelectionPredicate, Storage, WatchEvent};

/// A hang detector, far above an etcd election and the client's timeouts.
const BOUND: Duration = Duration::from_secs(60);

/// One test at a time (see the module docs). A tokio mutex: it is held across awaits, and
/// each test has its own runtime.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn pod(name: &str, app: &str) -> Object {
    Object::from_json(
        format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"ns","labels":{{"app":"{app}"}}}}}}"#
        )
        .as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

fn collection() -> Key {
    Key::collection("pods", Some("ns")).unwrap()
}

fn store_with(config: EtcdConfig) -> EtcdStore {
    EtcdStore::new(
        EtcdClient::new(config.request_timeout(Duration::from_secs(2))).unwrap(),
        "/registry",
        SelectableFields::none(),
    )
}

fn selecting(selector: &str) -> SelectionPredicate {
    SelectionPredicate {
        label: LabelSelector::parse(selector).unwrap(),
        ..SelectionPredicate::default()
    }
}

fn app_of(o: &Object) -> String {
    o.to_value().unwrap()["metadata"]["labels"]["app"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Retries `op` while it fails with `Unreachable` or `Timeout`, up to [`BOUND`].
async fn eventually<T, F, Fut>(mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(Error::Unreachable { .. } | Error::Timeout { .. })
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("expected success or Unreachable, got {e:?}"),
        }
    }
}

/// Median and range of a sample, for the printed numbers.
fn spread(mut xs: Vec<f64>) -> String {
    xs.sort_by(f64::total_cmp);
    match (xs.first(), xs.get(xs.len() / 2), xs.last()) {
        (Some(lo), Some(mid), Some(hi)) => format!("median {mid:.2}, range {lo:.2}..{hi:.2}"),
        _ => "no sample".into(),
    }
}

const WATCHERS: usize = 100;
const WRITERS: usize = 4;
/// Label groups: a write is in group `seq % GROUPS`; watcher `i` selects group `i % GROUPS`
/// (every fifth watcher selects everything). The fence object is selected by every watcher.
const GROUPS: usize = 4;
const FENCE: &str = "fence";

/// What one watcher saw, and how often it had to resume.
struct Seen {
    /// name → resource version of its ADDED event.
    events: BTreeMap<String, u64>,
    rewatches: u64,
}

/// A watcher as the cacher runs one: from `start`, resuming after its last revision on
/// every `Unreachable` error, until it has seen the fence. Every event must come in strictly
/// increasing revision order (so none twice).
async fn watcher(store: EtcdStore, start: u64, selector: Option<String>) -> Seen {
    let mut seen = Seen {
        events: BTreeMap::new(),
        rewatches: 0,
    };
    let mut last = start;
    loop {
        let opts = ListOptions {
            resource_version: Some(last),
            predicate: selector.as_deref().map(selecting).unwrap_or_default(),
            ..ListOptions::recursive()
        };
        let all = collection();
        let mut w = eventually(|| store.watch(&all, &opts)).await;
        loop {
            match tokio::time::timeout(BOUND, w.next()).await {
                Ok(Some(WatchEvent::Added(o))) => {
                    let rv = o.resource_version();
                    assert!(
                        rv > last,
                        "event at {rv} after {last}: out of order or repeated"
                    );
                    last = rv;
                    let name = o.name().to_owned();
                    let done = name == FENCE;
                    assert!(
                        seen.events.insert(name, rv).is_none(),
                        "an object created twice"
                    );
                    if done {
                        return seen;
                    }
                }
                Ok(Some(WatchEvent::Error(Error::Unreachable { .. }))) => {
                    assert!(w.next().await.is_none(), "an event after an error");
                    seen.rewatches += 1;
                    break;
                }
                Ok(other) => panic!("unexpected watch event: {other:?}"),
                Err(_) => panic!("a watch neither delivered nor ended for {BOUND:?}"),
            }
        }
    }
}

/// What the writers did: acknowledged writes (name → revision of the answer), writes whose
/// outcome is unknown (failed with `Unreachable`/`Timeout`: etcd may have applied them), and
/// when each acknowledgement came.
#[derive(Default)]
struct Writes {
    acked: BTreeMap<String, u64>,
    unknown: BTreeSet<String>,
    ack_times: Vec<Instant>,
}

async fn writer(store: EtcdStore, id: usize, stop: Arc<AtomicBool>) -> Writes {
    let mut out = Writes::default();
    // Bounded, in case the stop never comes.
    for seq in 0..5_000usize {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let name = format!("w{id}-{seq:05}");
        let group = format!("g{}", seq % GROUPS);
        match store.create(&key(&name), pod(&name, &group), None).await {
            Ok(o) => {
                out.ack_times.push(Instant::now());
                out.acked.insert(name, o.resource_version());
            }
            Err(Error::Unreachable { .. } | Error::Timeout { .. }) => {
                out.unknown.insert(name);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // etcd refused before proposing ("too many requests": its apply loop lags far
            // behind on a loaded machine): not written; back off.
            Err(Error::TooManyRequests { .. }) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("write {name}: {e:?}"),
        }
    }
    out
}

/// The leader is SIGKILLed while four writers create objects as fast as the cluster takes
/// them and 100 watchers (on one client, as the cacher's watches are; 80 of them filtered by
/// label) follow along, each resuming from its last revision when its stream breaks. The
/// killed member comes back a few seconds later. Checked against the writes' answers and a
/// final list: every watcher sees every acknowledged write it selects exactly once, with the
/// acknowledged revision, in order, and of the writes whose answer was lost exactly those
/// that the final list holds — 0 lost, 0 duplicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn leader_kill_under_write_load_with_100_watchers_loses_and_duplicates_nothing() {
    let _serial = SERIAL.lock().await;
    let mut cluster = EtcdCluster::start(3).await.unwrap();
    // Every client starts on the leader, so that killing it breaks the watches' connection
    // and the writers' (both must fail over), not only the cluster's leadership.
    let leader = cluster
        .wait_for_leader(BOUND)
        .await
        .expect("the cluster has a leader");
    let mut config = cluster.config();
    config.endpoints.rotate_left(leader);
    let store = store_with(config.clone());
    let start = store.current_resource_version().await.unwrap();

    let mut watchers = Vec::with_capacity(WATCHERS);
    for i in 0..WATCHERS {
        let selector = (i % 5 != 0).then(|| format!("app in (g{}, {FENCE})", i % GROUPS));
        watchers.push(tokio::spawn(watcher(store.clone(), start, selector)));
    }
    // Writers on their own client: a writer's failover must not depend on the watches'.
    let write_store = store_with(config);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| tokio::spawn(writer(write_store.clone(), id, Arc::clone(&stop))))
        .collect();

    tokio::time::sleep(Duration::from_secs(2)).await;
    // Normally still the first one; if leadership moved meanwhile, the current leader.
    let leader = cluster
        .wait_for_leader(BOUND)
        .await
        .expect("the cluster has a leader");
    let killed_at = Instant::now();
    cluster.member(leader).unwrap().kill();
    eprintln!("killed the leader, member {leader}");
    let new_leader = cluster.wait_for_leader(BOUND).await.expect("a new leader");
    let elected = killed_at.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.member(leader).unwrap().restart().await.unwrap();
    let rejoined = killed_at.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);

    let mut writes = Writes::default();
    for w in writers {
        let w = w.await.unwrap();
        writes.acked.extend(w.acked);
        writes.unknown.extend(w.unknown);
        writes.ack_times.extend(w.ack_times);
    }
    let (fence_key, fence_obj) = (key(FENCE), pod(FENCE, FENCE));
    let fence = eventually(|| write_store.create(&fence_key, fence_obj.clone(), None)).await;
    let fenced = Instant::now();
    let mut seen = Vec::with_capacity(WATCHERS);
    for w in watchers {
        seen.push(
            tokio::time::timeout(BOUND, w)
                .await
                .expect("a watcher hung")
                .unwrap(),
        );
    }
    let caught_up = fenced.elapsed();

    // Ground truth for the writes whose answers were lost: the final list.
    let everything = ListOptions::recursive();
    let all = collection();
    let list = eventually(|| store.list(&all, &everything)).await;
    let listed: BTreeMap<String, (u64, String)> = list
        .items
        .iter()
        .map(|o| (o.name().to_owned(), (o.resource_version(), app_of(o))))
        .collect();
    for (name, rv) in &writes.acked {
        assert_eq!(
            listed.get(name).map(|l| l.0),
            Some(*rv),
            "acknowledged {name} lost"
        );
    }
    for name in listed.keys() {
        assert!(
            name == FENCE || writes.acked.contains_key(name) || writes.unknown.contains(name),
            "{name} was never written"
        );
    }
    let landed_unknown = writes
        .unknown
        .iter()
        .filter(|n| listed.contains_key(*n))
        .count();
    assert_eq!(
        listed.get(FENCE).map(|l| l.0),
        Some(fence.resource_version())
    );

    for (i, s) in seen.iter().enumerate() {
        let want: BTreeMap<String, u64> = listed
            .iter()
            .filter(|(_, (_, app))| {
                i % 5 == 0 || *app == format!("g{}", i % GROUPS) || app == FENCE
            })
            .map(|(name, (rv, _))| (name.clone(), *rv))
            .collect();
        if s.events != want {
            let missing: Vec<_> = want.keys().filter(|n| !s.events.contains_key(*n)).collect();
            let extra: Vec<_> = s.events.keys().filter(|n| !want.contains_key(*n)).collect();
            panic!(
                "watcher {i}: {} events, {} expected; missing {missing:?}, extra {extra:?}",
                s.events.len(),
                want.len()
            );
        }
    }

    // The longest gap between two acknowledged writes: the write outage the kill caused.
    writes.ack_times.sort();
    let outage = writes
        .ack_times
        .windows(2)
        .filter_map(|w| match w {
            [a, b] => Some(b.duration_since(*a)),
            _ => None,
        })
        .max()
        .unwrap_or_default();
    let events: usize = seen.iter().map(|s| s.events.len()).sum();
    let rewatches: Vec<f64> = seen.iter().map(|s| s.rewatches as f64).collect();
    eprintln!(
        "leader kill: {} writes acknowledged, {} unknown ({} of them landed); new leader \
         (member {new_leader}) seen {elected:?} after the kill, old leader rejoined after \
         {rejoined:?}; longest gap between acknowledged writes {outage:?}; {events} events \
         to {WATCHERS} watchers, rewatches per watcher {}; all watchers past the fence \
         {caught_up:?} after it was written; 0 lost, 0 duplicated",
        writes.acked.len(),
        writes.unknown.len(),
        landed_unknown,
        spread(rewatches),
    );
}

/// Objects of the walk; every third is selected.
const OBJECTS: usize = 600;

/// Compacts the history at `rev`; a compaction already past it (from the other compacting
/// task) is as good.
async fn compact_to(store: &EtcdStore, rev: u64) {
    match compact_now(store.client(), rev).await {
        Ok(()) | Err(Error::Expired { .. }) => {}
        Err(e) => panic!("compacting at {rev}: {e:?}"),
    }
}

/// A filtered walk in small pages (each page reads several etcd pages to fill it) while the
/// history is compacted under it: after every page deliberately, and continuously from a
/// background task (so compactions also land between the etcd pages of one page). Each
/// continuation that finds its revision compacted gets 410 with a fresh token, and following
/// the fresh tokens reaches every matching object exactly once, in key order — none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn compactions_during_a_filtered_paginated_walk_skip_no_object() {
    let _serial = SERIAL.lock().await;
    let cluster = EtcdCluster::start(3).await.unwrap();
    let store = store_with(cluster.config());
    let mut want = Vec::new();
    let mut creates = Vec::new();
    for i in 0..OBJECTS {
        let name = format!("p{i:03}");
        let app = if i % 3 == 0 { "x" } else { "y" };
        if app == "x" {
            want.push(name.clone());
        }
        let store = store.clone();
        creates.push(async move { store.create(&key(&name), pod(&name, app), None).await });
    }
    // A few at a time.
    let created: Vec<_> = futures::stream::iter(creates)
        .buffer_unordered(8)
        .collect()
        .await;
    assert!(created.iter().all(Result::is_ok), "a create failed");

    // The background compactor: a write (not selected) then a compaction at the newest
    // revision, every 5 ms or so.
    let stop = Arc::new(AtomicBool::new(false));
    let compactions = Arc::new(AtomicU64::new(0));
    let churn = {
        let (store, stop, compactions) =
            (store.clone(), Arc::clone(&stop), Arc::clone(&compactions));
        tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) && n < 10_000 {
                n += 1;
                let name = format!("z{n:05}");
                let o = store
                    .create(&key(&name), pod(&name, "y"), None)
                    .await
                    .unwrap();
                compact_to(&store, o.resource_version()).await;
                compactions.fetch_add(1, Ordering::Relaxed);
                // Paced, so that a page usually finishes between two compactions (a walk
                // whose every continuation is compacted before it is read never ends).
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    let page = |token: Option<String>| ListOptions {
        limit: Some(5),
        continue_token: token,
        predicate: selecting("app=x"),
        ..ListOptions::recursive()
    };
    let mut got = Vec::new();
    let (mut pages, mut expired, mut restarts) = (0u32, 0u32, 0u32);
    let mut token: Option<String> = None;
    let began = Instant::now();
    loop {
        assert!(began.elapsed() < BOUND, "the walk did not finish");
        match store.list(&collection(), &page(token.clone())).await {
            Ok(list) => {
                pages += 1;
                got.extend(list.items.iter().map(|o| o.name().to_owned()));
                match list.continue_token {
                    Some(t) => token = Some(t),
                    None => break,
                }
                // And a compaction past the token's revision, every time.
                let name = format!("q{pages:05}");
                let o = store
                    .create(&key(&name), pod(&name, "y"), None)
                    .await
                    .unwrap();
                compact_to(&store, o.resource_version()).await;
            }
            Err(Error::Expired {
                continue_token: Some(fresh),
                ..
            }) if token.is_some() => {
                expired += 1;
                token = Some(fresh);
            }
            // A first page at the newest revision compacted under it: start again.
            Err(Error::Expired {
                continue_token: None,
                ..
            }) if token.is_none() => restarts += 1,
            Err(e) => panic!("page {pages} (token {token:?}): {e:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.await.unwrap();
    if got != want {
        let missing: Vec<_> = want.iter().filter(|n| !got.contains(n)).collect();
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        panic!(
            "the walk skipped {missing:?}; {} repeated; in key order: {}",
            got.len() - sorted.len(),
            got.is_sorted()
        );
    }
    assert!(expired > 0, "no continuation met a compaction");
    // Each page but the last was followed by a deliberate compaction, so its continuation
    // met one; any 410 beyond those came from a background compaction landing during a
    // continuation (after its token was made, possibly between its etcd pages).
    let by_background = expired.saturating_sub(pages.saturating_sub(1));
    eprintln!(
        "compaction during a walk: {} matches of {OBJECTS} objects in {pages} pages of 5, \
         {expired} continuations answered 410 with a fresh token ({by_background} beyond the \
         deliberate ones), {restarts} first pages restarted, {} background compactions, \
         walk {:?}; none skipped, none repeated",
        got.len(),
        compactions.load(Ordering::Relaxed),
        began.elapsed()
    );
}
