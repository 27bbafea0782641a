//! The storage conformance suite against a Cacher over a real etcd (one etcd per case),
//! ignored unless etcd is there (`cargo xtask test` installs it and runs them).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::SelectableFields;
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_etcd::testing::EtcdServer;
use listwatch_etcd::{EtcdStore, compact_now};
use listwatch_storage::Result;
use listwatch_storage::conformance::{Capabilities, Harness};

struct CachedEtcd {
    server: EtcdServer,
    backend: Mutex<Option<EtcdStore>>,
}

#[async_trait]
impl Harness for CachedEtcd {
    type Store = Cacher;

    async fn new_store(&self) -> Cacher {
        let backend = EtcdStore::new(
            self.server.client(),
            "/registry".to_owned(),
            SelectableFields::new(["spec.nodeName", "status.phase"]),
        );
        *self.backend.lock().unwrap() = Some(backend.clone());
        let cacher = Cacher::new(
            Arc::new(backend),
            CacherConfig::new("pods").with_trigger("spec.nodeName"),
        );
        tokio::time::timeout(Duration::from_secs(30), cacher.wait_ready())
            .await
            .expect("cacher ready");
        cacher
    }

    async fn compact(&self, store: &Cacher, revision: u64) -> Result<()> {
        let backend = self
            .backend
            .lock()
            .unwrap()
            .clone()
            .expect("a store was made");
        // Let the cache catch up first: compacting under a lagging reflector would make it
        // relist and end every watch, which is correct but not what a case is about.
        store.wait_until_fresh(revision).await?;
        compact_now(backend.client(), revision).await?;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            isolated_revisions: false,
            ..Capabilities::all()
        }
    }
}

async fn harness() -> CachedEtcd {
    // etcd 3.4's progress answers can come early (etcd issue 15220): the adapter falls back
    // to etcd's periodic notifications, made frequent here.
    let server = EtcdServer::builder()
        .progress_notify_interval(Duration::from_millis(500))
        .start()
        .await
        .expect("start etcd");
    CachedEtcd {
        server,
        backend: Mutex::new(None),
    }
}

listwatch_storage::conformance_tests!(harness, #[ignore = "needs etcd"]);
