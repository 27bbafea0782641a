//! The storage conformance suite against the durable embedded store: each case gets a store
//! in a fresh data directory (every write goes through the log and its fsync).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use async_trait::async_trait;
use listwatch_api::Object;
use listwatch_memstore::{MemStore, MemStoreConfig};
use listwatch_storage::conformance::{Capabilities, Harness};
use listwatch_storage::{
    GetOptions, Key, ListOptions, ObjectList, Preconditions, Result, Stats, Storage, UpdateFn,
    ValidateDeleteFn, WatchStream,
};

/// A durable store and its directory, removed when the case ends.
struct Durable {
    store: MemStore,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl Storage for Durable {
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object> {
        self.store.create(key, obj, ttl).await
    }
    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        self.store.get(key, opts).await
    }
    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        self.store.list(key, opts).await
    }
    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        self.store.watch(key, opts).await
    }
    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        self.store
            .guaranteed_update(key, preconditions, ignore_not_found, update, suggestion)
            .await
    }
    async fn delete(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        validate: &ValidateDeleteFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        self.store
            .delete(key, preconditions, validate, suggestion)
            .await
    }
    async fn stats(&self, key: &Key) -> Result<Stats> {
        self.store.stats(key).await
    }
    async fn request_watch_progress(&self) -> Result<()> {
        self.store.request_watch_progress().await
    }
    async fn current_resource_version(&self) -> Result<u64> {
        self.store.current_resource_version().await
    }
    async fn readiness(&self) -> Result<()> {
        self.store.readiness().await
    }
    fn compacted_revision(&self) -> u64 {
        self.store.compacted_revision()
    }
}

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
        Durable { store, _dir: dir }
    }

    async fn compact(&self, store: &Durable, revision: u64) -> Result<()> {
        store.store.compact(revision)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }
}

async fn harness() -> DurableHarness {
    DurableHarness
}

listwatch_storage::conformance_tests!(harness);
