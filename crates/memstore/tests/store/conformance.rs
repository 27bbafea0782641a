//! The storage conformance suite against the embedded store: every case of
//! `listwatch_storage::conformance` runs here as its own test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use listwatch_memstore::MemStore;
use listwatch_storage::Result;
use listwatch_storage::conformance::{Capabilities, Harness};

/// A fresh `MemStore` per case: its own revision counter, so revisions are isolated.
struct MemHarness;

#[async_trait]
impl Harness for MemHarness {
    type Store = MemStore;

    async fn new_store(&self) -> MemStore {
        MemStore::new()
    }

    async fn compact(&self, store: &MemStore, revision: u64) -> Result<()> {
        store.compact(revision)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }
}

async fn harness() -> MemHarness {
    MemHarness
}

listwatch_storage::conformance_tests!(harness);
