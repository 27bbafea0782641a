//! A storage that forwards every call to an inner one, with hooks a test sets around a few
//! calls ([`Hooked`], [`Hooks`]): the wrapper the storage-fault tests of endpoints,
//! controllers and memstore each wrote out in full (feature `storage`).
//!
//! Invariants: a call no hook answers reaches the inner storage unchanged, and its answer
//! comes back unchanged; hooks are synchronous and run on the calling task; `list_cost` and
//! `max_object_bytes` keep the trait's defaults (as the copies it replaces did), so a test
//! sees the plain storage contract, not the inner backend's estimates.

use std::time::Duration;

use listwatch_api::Object;
use listwatch_storage::{
    GetOptions, Key, ListOptions, ObjectList, Preconditions, Result, Stats, Storage, UpdateFn,
    ValidateDeleteFn, WatchStream,
};

/// What a test does around some calls of a [`Hooked`] storage; every hook does nothing by
/// default. A `before_*` hook that returns an error answers the call with it: the inner
/// storage is not called.
pub trait Hooks: Send + Sync + 'static {
    /// After a create the inner storage accepted (not after a refused one).
    fn after_create(&self, _key: &Key) {}
    /// Before a get.
    ///
    /// # Errors
    /// The error that answers the get instead of the inner storage.
    fn before_get(&self, _key: &Key) -> Result<()> {
        Ok(())
    }
    /// After a get was answered (either way).
    fn after_get(&self, _key: &Key) {}
    /// After a list was answered (either way).
    fn after_list(&self, _key: &Key) {}
    /// Before a watch.
    ///
    /// # Errors
    /// The error that answers the watch instead of the inner storage.
    fn before_watch(&self, _key: &Key, _opts: &ListOptions) -> Result<()> {
        Ok(())
    }
}

/// No hooks: the inner storage as it is.
impl Hooks for () {}

/// The storage `inner` with `hooks` around its calls.
#[derive(Debug, Default)]
pub struct Hooked<S, H> {
    /// The storage every call reaches unless a hook answers it.
    pub inner: S,
    /// What runs around the calls (and the state a test reads back).
    pub hooks: H,
}

impl<S, H> Hooked<S, H> {
    /// `inner` with `hooks` around its calls.
    pub fn new(inner: S, hooks: H) -> Self {
        Self { inner, hooks }
    }
}

#[async_trait::async_trait]
impl<S: Storage, H: Hooks> Storage for Hooked<S, H> {
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object> {
        let created = self.inner.create(key, obj, ttl).await?;
        self.hooks.after_create(key);
        Ok(created)
    }
    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        self.hooks.before_get(key)?;
        let got = self.inner.get(key, opts).await;
        self.hooks.after_get(key);
        got
    }
    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let listed = self.inner.list(key, opts).await;
        self.hooks.after_list(key);
        listed
    }
    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        self.hooks.before_watch(key, opts)?;
        self.inner.watch(key, opts).await
    }
    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        self.inner
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
        self.inner
            .delete(key, preconditions, validate, suggestion)
            .await
    }
    async fn stats(&self, key: &Key) -> Result<Stats> {
        self.inner.stats(key).await
    }
    async fn request_watch_progress(&self) -> Result<()> {
        self.inner.request_watch_progress().await
    }
    async fn current_resource_version(&self) -> Result<u64> {
        self.inner.current_resource_version().await
    }
    async fn readiness(&self) -> Result<()> {
        self.inner.readiness().await
    }
    fn compacted_revision(&self) -> u64 {
        self.inner.compacted_revision()
    }
}
