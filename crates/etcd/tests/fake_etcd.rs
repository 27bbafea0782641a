//! Behaviour that needs etcd to answer in a precise way, against a fake etcd
//! (`support::fake`): a compaction landing between two internal pages of one continued
//! list, and a cluster whose members run different etcd versions (one with the fix for
//! etcd issue 15220, one without). These run without a real etcd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use futures::StreamExt;
use listwatch_api::{LabelSelector, Object, SelectableFields};
use listwatch_etcd::testing::{FaultProxy, test_config};
use listwatch_etcd::{EtcdClient, EtcdStore};
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, SelectionPredicate, Storage, WatchEvent, WatchStream,
};
use support::fake::FakeEtcd;
use tonic::Status;

/// A hang detector.
const BOUND: Duration = Duration::from_secs(30);

fn pod_json(name: &str, app: &str) -> Vec<u8> {
    format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns","labels":{{"app":"{app}"}}}}}}"#)
        .into_bytes()
}

fn collection() -> Key {
    Key::collection("pods", Some("ns")).unwrap()
}

fn store_for(endpoints: Vec<String>) -> EtcdStore {
    let mut config = test_config(String::new()).request_timeout(Duration::from_secs(2));
    config.endpoints = endpoints;
    EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    )
}

fn names(items: &[Object]) -> Vec<String> {
    items
        .iter()
        .map(|o| {
            o.to_value().unwrap()["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// A continued, filtered list reads several etcd pages to fill one page of matches. When
/// the token's revision is compacted between two of those pages, the answer is 410 with a
/// fresh token — which must continue from where the *token* pointed, not from the key the
/// list had advanced to: the matches it had collected are dropped with the error, so a token
/// from the advanced key skipped them (here `p003`) for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_between_internal_pages_of_a_continued_list_skips_nothing() {
    let etcd = FakeEtcd::start("3.4.23").await;
    let want = ["p000", "p001", "p003", "p050", "p099"];
    for i in 0..100 {
        let name = format!("p{i:03}");
        let app = if want.contains(&name.as_str()) {
            "x"
        } else {
            "y"
        };
        etcd.fake
            .put(&format!("/registry/pods/ns/{name}"), &pod_json(&name, app));
    }
    let store = store_for(vec![etcd.endpoint()]);
    let page = |token: Option<String>| ListOptions {
        limit: Some(2),
        continue_token: token,
        predicate: SelectionPredicate {
            label: LabelSelector::parse("app=x").unwrap(),
            ..SelectionPredicate::default()
        },
        ..ListOptions::recursive()
    };
    let first = store.list(&collection(), &page(None)).await.unwrap();
    assert_eq!(names(&first.items), ["p000", "p001"]);
    let token = first.continue_token.clone().unwrap();

    // The continued list reads p002..p003 (collecting p003), then its second etcd page finds
    // the token's revision compacted.
    etcd.fake.on_range(Box::new(|n, req| {
        (n == 1 && req.revision > 0)
            .then(|| Status::out_of_range("etcdserver: mvcc: required revision has been compacted"))
    }));
    let err = store
        .list(&collection(), &page(Some(token)))
        .await
        .unwrap_err();
    let Error::Expired {
        continue_token: Some(fresh),
        ..
    } = err
    else {
        panic!("expected Expired with a fresh token, got {err:?}");
    };
    etcd.fake.on_range(Box::new(|_, _| None));

    // Following the fresh token (an inconsistent continuation) reaches every match.
    let mut seen = names(&first.items);
    let mut token = Some(fresh);
    while let Some(t) = token {
        let page = store.list(&collection(), &page(Some(t))).await.unwrap();
        seen.extend(names(&page.items));
        token = page.continue_token;
    }
    assert_eq!(
        seen, want,
        "objects were skipped across the expired continuation"
    );
}

async fn next(w: &mut WatchStream) -> WatchEvent {
    tokio::time::timeout(BOUND, w.next())
        .await
        .expect("the watch neither delivered nor ended")
        .expect("the watch ended")
}

/// Opens a progress-notify watch after revision `from` and asks for progress once the fake
/// has answered it; returns the first event that follows an event written afterwards (the
/// bookmark, if one was let through, comes first).
async fn first_after_progress(store: &EtcdStore, etcd: &FakeEtcd, from: u64) -> WatchEvent {
    let opts = ListOptions {
        resource_version: Some(from),
        allow_watch_bookmarks: true,
        progress_notify: true,
        ..ListOptions::recursive()
    };
    let mut w = store.watch(&collection(), &opts).await.unwrap();
    let answered = etcd.fake.progress_answered();
    // The request reaches the watch task asynchronously: ask until the fake has answered.
    let deadline = tokio::time::Instant::now() + BOUND;
    while etcd.fake.progress_answered() == answered {
        assert!(tokio::time::Instant::now() < deadline, "no progress answer");
        store.request_watch_progress().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Give the client a moment to read the answer before the event queues behind it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    etcd.fake
        .put_and_notify("/registry/pods/ns/new", &pod_json("new", "x"));
    next(&mut w).await
}

/// Whether a requested progress answer may run ahead of undelivered events depends on the
/// version of the member the watch stream is on. A client whose first endpoint runs a fixed
/// etcd (3.5.13) and whose second runs Debian's 3.4.23 must not trust the 3.4.23 member's
/// early answer once its watch has moved there. Before the fix the client decided once, from
/// the first endpoint that answered Status, and let the early answer through as a bookmark
/// ahead of an event still to come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progress_guard_follows_the_version_of_the_member_the_watch_is_on() {
    let fixed = FakeEtcd::start("3.5.13").await;
    let unfixed = FakeEtcd::start("3.4.23").await;
    for etcd in [&fixed, &unfixed] {
        for i in 0..5 {
            etcd.fake.put(
                &format!("/registry/other/{i}"),
                b"{\"metadata\":{\"name\":\"o\"}}",
            );
        }
    }
    // Revisions 2..=6 went to other keys: a watch from 1 owes nothing, but etcd 3.4 answers
    // a progress request at 6 whatever the watcher still owes.
    let behind = 1;

    // On the fixed member the answer is trusted: a bookmark at its revision comes first.
    let store = store_for(vec![fixed.endpoint()]);
    match first_after_progress(&store, &fixed, behind).await {
        WatchEvent::Bookmark(b) => assert_eq!(b.resource_version, 6),
        other => panic!("expected a bookmark from the fixed member, got {other:?}"),
    }

    // A client that learnt the fixed member's version, then lost it and moved to the other.
    let proxy = FaultProxy::start(fixed.addr()).await.unwrap();
    let store = store_for(vec![proxy.endpoint(), unfixed.endpoint()]);
    let version = store.client().server_version().await.unwrap();
    assert!(version.progress_requests_are_ordered(), "{version:?}");
    proxy.stall();
    proxy.cut();
    match first_after_progress(&store, &unfixed, behind).await {
        WatchEvent::Added(o) => assert_eq!(names(&[o]), ["new"]),
        other => panic!("the 3.4.23 member's early progress answer went through: {other:?}"),
    }
    let versions = store.client().endpoint_versions();
    assert_eq!(versions.len(), 2);
    assert!(
        versions[1]
            .1
            .is_some_and(|v| !v.progress_requests_are_ordered())
    );
    assert!(!store.client().progress_requests_are_ordered().await);
}

/// A read that waited while etcd elected a new leader is answered "leader changed". The
/// election is over by then, so the read goes round the members once more instead of failing
/// (with the per-attempt read deadline, the attempt still open when an election ends is the
/// last member's: the read failed with 500 "storage backend unreachable" and a create that
/// re-read its namespace after writing removed what it wrote; issue 26, the chaos test).
/// Only once: a member that keeps answering it fails the read after a second round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_answered_leader_changed_goes_round_again_once() {
    let etcd = FakeEtcd::start("3.4.23").await;
    etcd.fake.put("/registry/pods/ns/p1", &pod_json("p1", "x"));
    let store = store_for(vec![etcd.endpoint()]);
    let key = Key::object("pods", Some("ns"), "p1").unwrap();
    let changed = || Status::unavailable("etcdserver: leader changed");

    etcd.fake
        .on_range(Box::new(move |n, _| (n == 0).then(changed)));
    let got = tokio::time::timeout(BOUND, store.get(&key, &GetOptions::default()))
        .await
        .expect("the read hung");
    assert!(
        matches!(got, Ok(Some(_))),
        "a read answered 'leader changed' once was not sent again: {got:?}"
    );
    assert_eq!(store.client().reads_retried_after_election(), 1);

    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&calls);
    etcd.fake.on_range(Box::new(move |_, _| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(changed())
    }));
    let got = tokio::time::timeout(BOUND, store.get(&key, &GetOptions::default()))
        .await
        .expect("the read hung");
    assert!(matches!(got, Err(Error::Unreachable { .. })), "{got:?}");
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one member answering 'leader changed' forever: two attempts, no more"
    );
}
