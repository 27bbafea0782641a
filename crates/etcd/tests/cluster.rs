//! A three-member etcd cluster behind one client with three endpoints: losing a member costs
//! at most a few `Unreachable` answers (the watches on it resume on another member), losing
//! the quorum makes every request fail with `Unreachable` instead of hanging, and when the
//! quorum is back the same client serves the same data. A watch on a member that has no
//! leader — cut off from the others, or the last one standing — ends with an error within a
//! few election timeouts (etcd's require-leader), and the watch that resumes from its last
//! revision goes to another member and misses nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::{Duration, Instant};

use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::testing::EtcdCluster;
use listwatch_etcd::{EtcdClient, EtcdStore};
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, Result, Storage, WatchEvent, WatchStream,
};

/// A hang detector, far above the client's timeouts and an etcd election.
const BOUND: Duration = Duration::from_secs(60);

fn pod(name: &str) -> Object {
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#).as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

fn key(name: &str) -> Key {
    Key::object("pods", Some("ns"), name).unwrap()
}

/// Retries `op` while it fails with `Unreachable` (any other error fails the test).
async fn eventually<T, F, Fut>(mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(Error::Unreachable { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("expected success or Unreachable, got {e:?}"),
        }
    }
}

/// Creates `name`, retrying while the cluster is unreachable. A create whose outcome is
/// unknown (`Timeout`: its answer was lost, e.g. to an election) is resolved as a client
/// must: retried, and an `AlreadyExists` then means the first attempt landed — the object
/// is read back.
async fn create(store: &EtcdStore, name: &str) -> Object {
    let k = key(name);
    let deadline = tokio::time::Instant::now() + BOUND;
    let mut ambiguous = false;
    loop {
        match store.create(&k, pod(name), None).await {
            Ok(o) => return o,
            Err(Error::AlreadyExists { .. }) if ambiguous => {
                let get = GetOptions::default();
                return eventually(|| store.get(&k, &get)).await.unwrap();
            }
            Err(Error::Timeout { .. }) if tokio::time::Instant::now() < deadline => {
                ambiguous = true;
            }
            Err(Error::Unreachable { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("expected success or Unreachable, got {e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_cluster_survives_a_member_and_fails_fast_without_quorum() {
    let mut cluster = EtcdCluster::start(3).await.unwrap();
    let config = cluster.config().request_timeout(Duration::from_secs(2));
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let collection = Key::collection("pods", Some("ns")).unwrap();
    let from_a = ListOptions {
        resource_version: Some(a.resource_version()),
        ..ListOptions::recursive()
    };
    let mut w = store.watch(&collection, &from_a).await.unwrap();

    // The first endpoint, which every request and the watch use so far, dies: the watch
    // resumes on another member and misses nothing.
    cluster.member(0).unwrap().kill();
    let (key_a, get_opts) = (key("a"), GetOptions::default());
    let b = create(&store, "b").await;
    match tokio::time::timeout(BOUND, w.next())
        .await
        .expect("the watch hung")
    {
        Some(WatchEvent::Added(o)) => assert_eq!(o, b),
        other => panic!("expected the watch to resume and deliver b, got {other:?}"),
    }
    let got = eventually(|| store.get(&key_a, &get_opts)).await;
    assert_eq!(got, Some(a.clone()));
    // A new watch from the old revision replays what the lost one missed.
    let mut w = eventually(|| store.watch(&collection, &from_a)).await;
    match tokio::time::timeout(BOUND, w.next())
        .await
        .expect("the watch hung")
    {
        Some(WatchEvent::Added(o)) => assert_eq!(o, b),
        other => panic!("expected b, got {other:?}"),
    }

    // A second member dies: no quorum. Requests fail, they do not hang.
    cluster.member(1).unwrap().kill();
    let err = tokio::time::timeout(BOUND, store.get(&key("a"), &GetOptions::default()))
        .await
        .expect("a read hung without quorum")
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    let err = tokio::time::timeout(BOUND, store.readiness())
        .await
        .expect("readiness hung")
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");

    // Quorum is back: the same client works and nothing was lost.
    cluster.member(1).unwrap().restart().await.unwrap();
    let everything = ListOptions::recursive();
    let list = eventually(|| store.list(&collection, &everything)).await;
    assert_eq!(list.items, vec![a, b]);
    eventually(|| store.readiness()).await;
}

fn store_on(endpoints: Vec<String>, template: &listwatch_etcd::EtcdConfig) -> EtcdStore {
    let mut config = template.clone().request_timeout(Duration::from_secs(2));
    config.endpoints = endpoints;
    EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    )
}

fn collection() -> Key {
    Key::collection("pods", Some("ns")).unwrap()
}

fn after(rv: u64) -> ListOptions {
    ListOptions {
        resource_version: Some(rv),
        ..ListOptions::recursive()
    }
}

async fn next(w: &mut WatchStream) -> Option<WatchEvent> {
    tokio::time::timeout(BOUND, w.next())
        .await
        .expect("the watch neither delivered nor ended")
}

/// Waits for the watch's end: one `Unreachable` error event, then nothing; returns how long
/// it took from `since`.
async fn ends_unreachable(w: &mut WatchStream, since: Instant) -> Duration {
    match next(w).await {
        Some(WatchEvent::Error(Error::Unreachable { message })) => {
            let took = since.elapsed();
            eprintln!("the watch ended after {took:?}: {message}");
            assert!(next(w).await.is_none(), "nothing may follow an error event");
            took
        }
        other => panic!("expected the watch to end with Unreachable, got {other:?}"),
    }
}

/// A watch on a member cut off from its peers (the minority side of a partition, while the
/// majority goes on accepting writes) must not stay open and silent: etcd's require-leader
/// ends it once the member has had no leader for a few election timeouts, the client moves
/// to the next member, and the watch resumed from the last delivered revision gets what the
/// majority wrote meanwhile. Without require-leader the watch hung here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_watch_on_a_member_cut_off_from_its_quorum_ends_and_resumes_on_the_majority() {
    let cluster = EtcdCluster::start(3).await.unwrap();
    let template = cluster.config();
    let endpoints = cluster.endpoints();
    let store = store_on(endpoints.clone(), &template);
    let majority = store_on(endpoints[1..].to_vec(), &template);
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let mut w = store
        .watch(&collection(), &after(a.resource_version()))
        .await
        .unwrap();
    let b = majority.create(&key("b"), pod("b"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(b.clone())));

    let cut = Instant::now();
    cluster.isolate(0).await.unwrap();
    let c = create(&majority, "c").await;
    ends_unreachable(&mut w, cut).await;

    // Resumed from the last delivered revision, on another member: c is there, and so is
    // what follows.
    let (all, from_b) = (collection(), after(b.resource_version()));
    let mut w = eventually(|| store.watch(&all, &from_b)).await;
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(c)));
    let d = create(&majority, "d").await;
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(d)));
    cluster.heal();
}

/// Quorum lost under a live watch: the two other members die, the watch on the survivor
/// ends promptly instead of hanging, requests fail, and once one member is back the watch
/// resumed from its last revision sees every write — the ones acknowledged before the loss
/// were never lost, and new ones arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn quorum_loss_ends_a_live_watch_and_it_resumes_when_quorum_returns() {
    let mut cluster = EtcdCluster::start(3).await.unwrap();
    let store = store_on(cluster.endpoints(), &cluster.config());
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    let mut w = store
        .watch(&collection(), &after(a.resource_version()))
        .await
        .unwrap();
    let b = store.create(&key("b"), pod("b"), None).await.unwrap();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(b.clone())));

    let lost = Instant::now();
    cluster.member(1).unwrap().kill();
    cluster.member(2).unwrap().kill();
    ends_unreachable(&mut w, lost).await;
    let err = tokio::time::timeout(BOUND, store.create(&key("x"), pod("x"), None))
        .await
        .expect("a write hung without quorum")
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");

    let restarting = Instant::now();
    cluster.member(1).unwrap().restart().await.unwrap();
    let member_up = restarting.elapsed();
    let (all, from_b) = (collection(), after(b.resource_version()));
    let mut w = eventually(|| store.watch(&all, &from_b)).await;
    let c = create(&store, "c").await;
    let writable = restarting.elapsed();
    assert_eq!(next(&mut w).await, Some(WatchEvent::Added(c.clone())));
    eprintln!(
        "quorum back: the member answered {member_up:?} after its restart began, the first \
         write was acknowledged after {writable:?}, and the resumed watch delivered it after \
         {:?}",
        restarting.elapsed()
    );
    let everything = ListOptions::recursive();
    let list = eventually(|| store.list(&all, &everything)).await;
    assert_eq!(list.items, vec![a, b, c]);
}

/// Every request carries require-leader (`hasleader`), not only watches: once the member the
/// client talks to is cut off from its quorum and knows no leader, etcd refuses a write there
/// up front ("no leader": surely not applied), so the client sends it to the next member at
/// once and it succeeds; reads likewise go on to the next member instead of waiting out the
/// request timeout. Without it the write reached the leaderless member's raft, which dropped
/// it ("raft proposal dropped", a 500), and reads waited for the request timeout first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_write_to_a_member_cut_off_from_its_quorum_goes_to_another_member() {
    let mut cluster = EtcdCluster::start(3).await.unwrap();
    let template = cluster.config();
    let store = store_on(cluster.endpoints(), &template);
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    cluster.isolate(0).await.unwrap();
    let cut = Instant::now();
    // Until the cut-off member gives up on its leader (an election timeout or two).
    let deadline = Instant::now() + BOUND;
    loop {
        let status = cluster.member(0).unwrap().status().await.unwrap();
        if status.leader == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "member 0 never lost its leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let leaderless = cut.elapsed();
    let started = Instant::now();
    let b = tokio::time::timeout(BOUND, store.create(&key("b"), pod("b"), None))
        .await
        .expect("the write hung")
        .expect("the write should have gone to another member");
    let write = started.elapsed();
    let started = Instant::now();
    let list = tokio::time::timeout(BOUND, store.list(&collection(), &ListOptions::recursive()))
        .await
        .expect("the read hung")
        .unwrap();
    assert_eq!(list.items, vec![a, b]);
    eprintln!(
        "member 0 had no leader {leaderless:?} after the cut; the write took {write:?}, the read {:?}",
        started.elapsed()
    );
    cluster.heal();
}

/// A member cut off from its peers the moment a read arrives still believes it has a leader:
/// it holds the linearizable read (etcd answers "request timed out" only after 7 s). The read
/// moves to another member at the per-attempt deadline, and the write after it goes there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (LISTWATCH_ETCD_BIN)"]
async fn a_read_held_by_a_member_just_cut_off_moves_on_at_the_attempt_deadline() {
    let cluster = EtcdCluster::start(3).await.unwrap();
    let leader = cluster
        .wait_for_leader(BOUND)
        .await
        .expect("the cluster elected no leader");
    // A follower first: a cut-off leader may step down (and fail its reads) within an
    // election timeout, a follower forwards the read to a leader it can no longer reach.
    let follower = (0..cluster.len()).find(|&i| i != leader).unwrap();
    let mut endpoints = cluster.endpoints();
    endpoints.rotate_left(follower);
    // A request timeout far above etcd's own 7 s, so only the attempt deadline moves the read.
    let mut config = cluster
        .config()
        .request_timeout(Duration::from_secs(30))
        .read_attempt_timeout(Duration::from_millis(300));
    config.endpoints = endpoints;
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let a = store.create(&key("a"), pod("a"), None).await.unwrap();
    assert_eq!(store.client().read_attempts_abandoned(), 0);
    cluster.isolate(follower).await.unwrap();
    let started = Instant::now();
    let got = tokio::time::timeout(BOUND, store.get(&key("a"), &GetOptions::default()))
        .await
        .expect("the read hung")
        .expect("the read should have gone to another member");
    let read = started.elapsed();
    assert_eq!(got, Some(a.clone()));
    assert!(
        store.client().read_attempts_abandoned() >= 1,
        "the read was not moved on at the per-attempt deadline (took {read:?})"
    );
    let b = tokio::time::timeout(BOUND, store.create(&key("b"), pod("b"), None))
        .await
        .expect("the write hung")
        .expect("the write should have gone to another member");
    let list = tokio::time::timeout(BOUND, store.list(&collection(), &ListOptions::recursive()))
        .await
        .expect("the list hung")
        .unwrap();
    assert_eq!(list.items, vec![a, b]);
    eprintln!("the read on the cut-off member moved on and took {read:?}");
    cluster.heal();
}
