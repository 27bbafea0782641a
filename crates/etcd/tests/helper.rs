//! The test etcd helper itself: it answers once started, and its process is gone after the
//! server is dropped — also when a test panics while holding it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use listwatch_etcd::testing::EtcdServer;

fn alive(pid: u32) -> bool {
    // A killed child is reaped by `Drop`, so its /proc entry disappears.
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_dropped_server_leaves_no_etcd_behind() {
    let server = EtcdServer::start().await.unwrap();
    server.client().health().await.unwrap();
    let pid = server.pid().unwrap();
    assert!(alive(pid));
    drop(server);
    assert!(!alive(pid), "etcd {pid} outlived its server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn a_panicking_test_still_kills_its_etcd() {
    let server = EtcdServer::start().await.unwrap();
    let pid = server.pid().unwrap();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _held = server;
        panic!("a failing test");
    }));
    assert!(outcome.is_err());
    assert!(!alive(pid), "etcd {pid} outlived a panicking test");
}

#[tokio::test]
async fn a_missing_binary_says_what_to_install() {
    let err = EtcdServer::builder()
        .binary("/nonexistent/etcd")
        .start()
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("apt-get install etcd-server"),
        "{err}"
    );
}
