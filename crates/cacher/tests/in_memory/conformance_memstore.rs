//! The storage conformance suite against a Cacher over the embedded store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use listwatch_cacher::{Cacher, CacherConfig};
use listwatch_memstore::MemStore;
use listwatch_storage::Result;
use listwatch_storage::conformance::{Capabilities, Capability, Harness};

/// Each case gets a fresh MemStore and a pods Cacher over it; compaction compacts the backend.
#[derive(Default)]
struct CachedMem {
    backend: Mutex<Option<MemStore>>,
}

#[async_trait]
impl Harness for CachedMem {
    type Store = Cacher;

    async fn new_store(&self) -> Cacher {
        let backend = MemStore::new();
        *self.backend.lock().unwrap() = Some(backend.clone());
        let cacher = Cacher::new(
            Arc::new(backend),
            CacherConfig::new("pods").with_trigger("spec.nodeName"),
        );
        cacher.wait_ready().await;
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
        backend.compact(revision)?;
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        // A watch is judged by the cache's window, not by the backend's compaction (as
        // upstream's cacher): one from a compacted revision the window covers is served.
        Capabilities::all().without(Capability::ExpiredWatch)
    }
}

async fn harness() -> CachedMem {
    CachedMem::default()
}

listwatch_storage::conformance_tests!(harness);
