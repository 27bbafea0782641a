//! A write whose answer is lost after it reached etcd has an unknown outcome: the adapter
//! says so (`Timeout`, a 504 without Retry-After) instead of `Unreachable` (500 with
//! Retry-After, which clients resend on), and does not resend it itself. A write refused
//! before it was sent (nobody listening) stays `Unreachable` and retryable. Ignored unless
//! etcd is there (`cargo xtask test` runs them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use listwatch_api::{Object, SelectableFields};
use listwatch_etcd::testing::{EtcdServer, FaultProxy, test_config};
use listwatch_etcd::{EtcdClient, EtcdStore};
use listwatch_storage::{Error, GetOptions, Key, Storage};

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

/// etcd's answer to a create is held by a proxy past the request timeout: the create was
/// applied, and the error says its outcome is unknown, with no Retry-After. Before, it was
/// `Unreachable` with `Retry-After: 2`, and a client resending a `generateName` create on it
/// made a second object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_write_whose_answer_is_lost_has_an_unknown_outcome_and_no_retry_after() {
    let etcd = EtcdServer::start().await.unwrap();
    let proxy = FaultProxy::start(etcd.addr()).await.unwrap();
    let config = test_config(proxy.endpoint()).request_timeout(Duration::from_secs(1));
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    // The connection is up (its handshake answered) before the answers are held.
    store.create(&key("a"), pod("a"), None).await.unwrap();
    proxy.stall_responses_after(0);
    let err = tokio::time::timeout(BOUND, store.create(&key("b"), pod("b"), None))
        .await
        .expect("the write hung")
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let status = err.to_status();
    assert_eq!((status.code, status.retry_after()), (504, 0), "{status:?}");
    proxy.resume();
    // It was applied.
    let direct = EtcdStore::new(etcd.client(), "/registry", SelectableFields::none());
    let b = direct.get(&key("b"), &GetOptions::default()).await.unwrap();
    assert!(b.is_some(), "the held create did reach etcd");
}

/// A write to an endpoint nobody listens on surely did not happen: `Unreachable`, retryable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_write_that_was_never_sent_stays_retryable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = test_config(format!("http://127.0.0.1:{port}"));
    let store = EtcdStore::new(
        EtcdClient::new(config).unwrap(),
        "/registry",
        SelectableFields::none(),
    );
    let err = tokio::time::timeout(BOUND, store.create(&key("a"), pod("a"), None))
        .await
        .expect("the write hung")
        .unwrap_err();
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    assert_eq!(err.to_status().retry_after(), 2);
}
