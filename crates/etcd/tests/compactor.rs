//! The compactor's coordination protocol against a real etcd: two servers' compactors take
//! turns through one key, exactly one compacts per round, and it compacts the revision seen
//! one round earlier.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::testing::EtcdServer;
use listwatch_etcd::{CompactorState, EtcdStore, RoundOutcome, compact_round};
use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, Storage};

fn pod(name: &str) -> Object {
    Object::from_json(
        format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}}}}"#).as_bytes(),
        &SelectableFields::none(),
    )
    .unwrap()
}

async fn write(store: &EtcdStore, name: &str) -> u64 {
    store
        .create(
            &Key::object("pods", Some("ns"), name).unwrap(),
            pod(name),
            None,
        )
        .await
        .unwrap()
        .resource_version()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn two_compactors_take_turns_and_compact_the_previous_rounds_revision() {
    let server = EtcdServer::start().await.unwrap();
    let (a, b) = (server.client(), server.client());
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    let key = "compact_rev_key";
    let early = write(&store, "early").await;

    // Round 1: A wins the empty key and only records the revision; B learns it lost.
    let (sa, out) = compact_round(&a, key, CompactorState::default())
        .await
        .unwrap();
    assert_eq!(out, RoundOutcome::Started);
    let (sb, out) = compact_round(&b, key, CompactorState::default())
        .await
        .unwrap();
    assert_eq!(out, RoundOutcome::Lost);
    assert_eq!(sb.time, sa.time);
    let seen = sa.revision;
    assert!(seen > early);

    let later = write(&store, "later").await;
    // Round 2: A wins again and compacts what it saw in round 1; B loses again.
    let (sa, out) = compact_round(&a, key, sa).await.unwrap();
    assert_eq!(out, RoundOutcome::Compacted(seen));
    let (sb, out) = compact_round(&b, key, sb).await.unwrap();
    assert_eq!(out, RoundOutcome::Lost);
    // Both servers now know the compaction revision (Storage::compacted_revision): A made it,
    // B read it from the coordination key when it lost.
    assert_eq!(
        (a.compacted_revision(), b.compacted_revision()),
        (seen, seen)
    );

    let all = Key::collection("pods", Some("ns")).unwrap();
    let exact = |rv| ListOptions::recursive().at(Some(rv), Some(ResourceVersionMatch::Exact));
    let err = store.list(&all, &exact(early)).await.unwrap_err();
    assert!(err.is_expired(), "{err:?}");
    assert_eq!(
        store.list(&all, &exact(later)).await.unwrap().items.len(),
        2
    );

    // A stops (say its server died): B takes over on its next round, compacting what it saw
    // when it last lost.
    write(&store, "after").await;
    let (_, out) = compact_round(&b, key, sb).await.unwrap();
    assert_eq!(out, RoundOutcome::Compacted(sb.revision));
    assert!(sb.revision >= sa.revision);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_running_compactor_eventually_compacts_old_history() {
    let server = EtcdServer::start().await.unwrap();
    let store = EtcdStore::new(server.client(), "/registry", SelectableFields::none());
    let early = write(&store, "early").await;
    write(&store, "later").await;
    let compactor = listwatch_etcd::Compactor::spawn(
        server.client(),
        std::time::Duration::from_millis(100),
        "compact_rev_key",
    );
    let all = Key::collection("pods", Some("ns")).unwrap();
    let exact = ListOptions::recursive().at(Some(early), Some(ResourceVersionMatch::Exact));
    // Bounded wait: the second round (after two intervals) compacts what the first saw.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match store.list(&all, &exact).await {
            Err(e) if e.is_expired() => break,
            Ok(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => panic!("history was not compacted: {other:?}"),
        }
    }
    compactor.stop();
    // The latest state is intact.
    assert_eq!(
        store
            .list(&all, &ListOptions::recursive())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
}
