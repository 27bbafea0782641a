//! An HTTP watch through the binary ends when etcd loses its quorum (issue 26 item 5): the
//! server's cache of the resource loses its etcd watch ("no leader" on the last member
//! standing, or the dead members' connections), ends every watcher of the resource — so that
//! clients reconnect, through a load balancer to a server whose etcd still has quorum — and
//! relists once etcd answers again. Before, the HTTP watch stayed open and silent (45 s and
//! more). Needs Debian's `etcd-server`; `cargo xtask test` provisions it and runs these
//! ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::replicas::Replicas;

/// Two of the three etcd members die: the watch through the server ends with a 429 ERROR
/// event ("storage is (re)initializing") and then the end of the stream, well before the
/// hang detector (60 s without a byte). Without the cacher ending its watchers on a failed
/// storage watch, nothing arrived and the detector fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn an_http_watch_ends_when_etcd_loses_its_quorum() {
    let mut replicas = Replicas::start(1, &[]).await;
    let addr = replicas.replica(0).addr.clone();
    let path = "/api/v1/namespaces/default/configmaps";
    // The hang detector: 60 s without a byte ends the read.
    let mut events = common::watch_from_list(&addr, path, Duration::from_secs(60));
    replicas.etcd.member(1).unwrap().kill();
    replicas.etcd.member(2).unwrap().kill();
    let lost = Instant::now();
    let (first, end) = tokio::task::spawn_blocking(move || {
        let first = events.next();
        let end = events.next();
        (first, end)
    })
    .await
    .unwrap();
    let first = first.expect("the watch said nothing within 60 s of the quorum loss");
    assert_eq!(first["type"], "ERROR", "{first}");
    assert_eq!(first["object"]["code"], 429, "{first}");
    assert!(end.is_none(), "the watch went on after its ERROR: {end:?}");
    eprintln!(
        "the HTTP watch ended {:?} after two of three etcd members died",
        lost.elapsed()
    );
}
