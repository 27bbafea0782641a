//! Helpers shared by the endpoint tests.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use listwatch_memstore::MemStore;

/// A store whose gets never answer, to exercise request deadlines.
pub struct StalledGets(pub MemStore);

#[async_trait::async_trait]
impl listwatch_storage::Storage for StalledGets {
    async fn create(
        &self,
        key: &listwatch_storage::Key,
        obj: listwatch_api::Object,
        ttl: Option<Duration>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.0.create(key, obj, ttl).await
    }
    async fn get(
        &self,
        _key: &listwatch_storage::Key,
        _opts: &listwatch_storage::GetOptions,
    ) -> listwatch_storage::Result<Option<listwatch_api::Object>> {
        std::future::pending().await
    }
    async fn list(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::ObjectList> {
        self.0.list(key, opts).await
    }
    async fn watch(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::WatchStream> {
        self.0.watch(key, opts).await
    }
    async fn guaranteed_update(
        &self,
        key: &listwatch_storage::Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        ignore_not_found: bool,
        update: &mut listwatch_storage::UpdateFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.0
            .guaranteed_update(key, preconditions, ignore_not_found, update, suggestion)
            .await
    }
    async fn delete(
        &self,
        key: &listwatch_storage::Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        validate: &listwatch_storage::ValidateDeleteFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.0
            .delete(key, preconditions, validate, suggestion)
            .await
    }
    async fn stats(
        &self,
        key: &listwatch_storage::Key,
    ) -> listwatch_storage::Result<listwatch_storage::Stats> {
        self.0.stats(key).await
    }
    async fn request_watch_progress(&self) -> listwatch_storage::Result<()> {
        self.0.request_watch_progress().await
    }
    async fn current_resource_version(&self) -> listwatch_storage::Result<u64> {
        self.0.current_resource_version().await
    }
    async fn readiness(&self) -> listwatch_storage::Result<()> {
        self.0.readiness().await
    }
    fn compacted_revision(&self) -> u64 {
        self.0.compacted_revision()
    }
}

/// A store whose first `collisions` creates of a name starting with `prefix` fail with
/// AlreadyExists (as if another client held every name the server generated), counting
/// the creates it sees.
pub struct CollidingCreates {
    pub store: MemStore,
    pub prefix: String,
    pub collisions: usize,
    pub creates: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl listwatch_storage::Storage for CollidingCreates {
    async fn create(
        &self,
        key: &listwatch_storage::Key,
        obj: listwatch_api::Object,
        ttl: Option<Duration>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        if key.name().is_some_and(|n| n.starts_with(&self.prefix)) {
            let seen = self
                .creates
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if seen < self.collisions {
                return Err(key.already_exists());
            }
        }
        self.store.create(key, obj, ttl).await
    }
    async fn get(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::GetOptions,
    ) -> listwatch_storage::Result<Option<listwatch_api::Object>> {
        self.store.get(key, opts).await
    }
    async fn list(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::ObjectList> {
        self.store.list(key, opts).await
    }
    async fn watch(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::WatchStream> {
        self.store.watch(key, opts).await
    }
    async fn guaranteed_update(
        &self,
        key: &listwatch_storage::Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        ignore_not_found: bool,
        update: &mut listwatch_storage::UpdateFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.store
            .guaranteed_update(key, preconditions, ignore_not_found, update, suggestion)
            .await
    }
    async fn delete(
        &self,
        key: &listwatch_storage::Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        validate: &listwatch_storage::ValidateDeleteFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.store
            .delete(key, preconditions, validate, suggestion)
            .await
    }
    async fn stats(
        &self,
        key: &listwatch_storage::Key,
    ) -> listwatch_storage::Result<listwatch_storage::Stats> {
        self.store.stats(key).await
    }
    async fn request_watch_progress(&self) -> listwatch_storage::Result<()> {
        self.store.request_watch_progress().await
    }
    async fn current_resource_version(&self) -> listwatch_storage::Result<u64> {
        self.store.current_resource_version().await
    }
    async fn readiness(&self) -> listwatch_storage::Result<()> {
        self.store.readiness().await
    }
    fn compacted_revision(&self) -> u64 {
        self.store.compacted_revision()
    }
}
