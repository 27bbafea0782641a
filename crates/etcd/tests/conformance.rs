//! The storage conformance suite against a real etcd: every case of
//! `listwatch_storage::conformance` runs here as its own test, each against its own etcd
//! server (so compaction in one case cannot disturb another), ignored unless etcd is there
//! (`cargo xtask test` runs them with `--include-ignored` after installing it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::SelectableFields;
use listwatch_etcd::testing::EtcdServer;
use listwatch_etcd::{EtcdStore, compact_now};
use listwatch_storage::Result;
use listwatch_storage::conformance::{Capabilities, Harness};

/// One etcd per case; each store gets its own key root on it.
struct EtcdHarness {
    server: EtcdServer,
    next_root: AtomicU64,
}

#[async_trait]
impl Harness for EtcdHarness {
    type Store = EtcdStore;

    async fn new_store(&self) -> EtcdStore {
        let n = self.next_root.fetch_add(1, Ordering::Relaxed);
        EtcdStore::new(
            self.server.client(),
            format!("/registry-{n}"),
            SelectableFields::new(["spec.nodeName", "status.phase"]),
        )
    }

    async fn compact(&self, store: &EtcdStore, revision: u64) -> Result<()> {
        compact_now(store.client(), revision).await
    }

    fn capabilities(&self) -> Capabilities {
        // Revisions are etcd's: one counter for every store of the server.
        Capabilities {
            isolated_revisions: false,
            ..Capabilities::all()
        }
    }
}

async fn harness() -> EtcdHarness {
    // etcd 3.4 answers progress requests out of order (etcd issue 15220); the adapter then
    // waits for etcd's own periodic progress notification, made frequent here.
    let server = EtcdServer::builder()
        .progress_notify_interval(Duration::from_millis(500))
        .start()
        .await
        .expect("start etcd");
    EtcdHarness {
        server,
        next_root: AtomicU64::new(0),
    }
}

listwatch_storage::conformance_tests!(harness, #[ignore = "needs etcd"]);
