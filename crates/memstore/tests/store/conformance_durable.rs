//! The storage conformance suite against the durable embedded store: each case gets a store
//! in a fresh data directory (every write goes through the log and its fsync).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use listwatch_memstore::{MemStore, MemStoreConfig};
use listwatch_storage::Result;
use listwatch_storage::conformance::{Capabilities, Harness};
use listwatch_testkit::storage::{Hooked, Hooks};

/// A durable store and its directory, removed when the case ends (after the store).
type Durable = Hooked<MemStore, Dir>;

/// The data directory of a durable store (no hooks: every call reaches the store).
struct Dir {
    _dir: tempfile::TempDir,
}

impl Hooks for Dir {}

struct DurableHarness;

#[async_trait]
impl Harness for DurableHarness {
    type Store = Durable;

    async fn new_store(&self) -> Durable {
        let dir = tempfile::tempdir().unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        let config = MemStoreConfig {
            segment_bytes: 1 << 20,
            ..MemStoreConfig::default()
        };
        let store = MemStore::open(dir.path(), config).unwrap();
        Hooked::new(store, Dir { _dir: dir })
    }

    async fn compact(&self, store: &Durable, revision: u64) -> Result<()> {
        store.inner.compact(revision)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }
}

async fn harness() -> DurableHarness {
    DurableHarness
}

listwatch_storage::conformance_tests!(harness);
