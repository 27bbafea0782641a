//! The watch cache's consistency check in the running binary over etcd: a cache made to
//! miss an object's events is found out by a check, kubectl and curl read the object from
//! etcd meanwhile, and once the cache agrees again reads come from it again (the scenario:
//! `common/consistency.rs`). etcd notifies progress every 200 ms, which is what moves an
//! idle cache past the missed event on etcd 3.4 (see the scenario's doc).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use listwatch_etcd::testing::EtcdServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn missed_events_are_found_and_reads_fall_back_on_etcd() {
    let etcd = EtcdServer::builder()
        .progress_notify_interval(Duration::from_millis(200))
        .start()
        .await
        .expect("etcd");
    let endpoint = etcd.endpoint();
    tokio::task::spawn_blocking(move || {
        common::consistency::missed_events_are_found_and_reads_fall_back(
            &["--storage", "etcd", "--etcd-servers", endpoint.as_str()],
            false,
        );
    })
    .await
    .unwrap();
}
