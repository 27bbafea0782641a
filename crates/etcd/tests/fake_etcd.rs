//! Behaviour that needs etcd to answer in a precise way, against a fake etcd
//! (`support::fake`): a compaction landing between two internal pages of one continued
//! list. These run without a real etcd.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use listwatch_api::{LabelSelector, Object, SelectableFields};
use listwatch_etcd::testing::test_config;
use listwatch_etcd::{EtcdClient, EtcdStore};
use listwatch_storage::{Error, Key, ListOptions, SelectionPredicate, Storage};
use support::fake::FakeEtcd;
use tonic::Status;

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
