//! The storage interface of listwatch: what every backend (the embedded store, etcd, and the
//! cacher that wraps either) offers, with etcd's semantics.
//!
//! It owns the async [`Storage`] trait, its options and events, [`Key`]s and continue tokens,
//! and the one [`Error`] enum with its mapping to a Kubernetes `Status`. With the
//! `conformance` feature it also carries the shared test suite every backend passes.
//!
//! This crate holds traits and plain data only. It must never depend on etcd, HTTP, or the
//! watch cache.
//!
//! Resource versions are backend revisions: one global, strictly increasing counter; each
//! stored object's version is the revision of its last write.
//!
//! ```no_run
//! use listwatch_storage::{Storage, Key, ListOptions};
//! # async fn demo(store: &dyn Storage) -> listwatch_storage::Result<()> {
//! let pods = Key::collection("pods", Some("default"))?;
//! let page = store.list(&pods, &ListOptions { limit: Some(500), ..ListOptions::recursive() }).await?;
//! println!("{} pods at revision {}", page.items.len(), page.resource_version);
//! # Ok(()) }
//! ```

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;
use listwatch_api::Object;

mod error;
mod key;
mod options;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use error::{Error, Result};
pub use key::{Key, decode_continue, encode_continue};
pub use options::{
    Bookmark, GetOptions, ListCost, ListOptions, ObjectList, Preconditions, ResourceVersionMatch,
    SelectionPredicate, Stats, WatchEvent,
};

/// A stream of watch events. Dropping it cancels the watch. After an `Error` event the
/// stream ends.
pub type WatchStream = Pin<Box<dyn Stream<Item = WatchEvent> + Send>>;

/// The update function of [`Storage::guaranteed_update`]: given the current object (`None`
/// when absent and `ignore_not_found` was asked), returns the object to store and its time to
/// live ([`Updated`]; an `Object` converts with `.into()`, without a TTL). It may be called
/// several times, once per attempt, so it must not have side effects that cannot repeat. Its
/// returned object's resource version is ignored.
pub type UpdateFn<'a> = dyn FnMut(Option<&Object>) -> Result<Updated> + Send + 'a;

/// What an [`UpdateFn`] returns: the new state and how long it lives.
///
/// As upstream's `UpdateFunc` (which returns an object and a `*uint64` TTL), the TTL applies to
/// the written state: `Some(ttl)` makes the object expire `ttl` after this write (an expiry is
/// seen as a DELETED event), `None` stores it without one — a TTL the object had before does
/// not carry over, so an updater that wants an object to keep expiring (Kubernetes' Events)
/// returns a TTL on every update. An update that writes nothing (same content) changes no TTL.
#[derive(Debug, Clone, PartialEq)]
pub struct Updated {
    /// The object to store.
    pub object: Object,
    /// Its time to live from this write on; `None`: no expiry.
    pub ttl: Option<Duration>,
}

impl Updated {
    /// `object`, expiring `ttl` after the write.
    pub fn with_ttl(object: Object, ttl: Duration) -> Self {
        Self {
            object,
            ttl: Some(ttl),
        }
    }
}

impl From<Object> for Updated {
    /// The object without a TTL.
    fn from(object: Object) -> Self {
        Self { object, ttl: None }
    }
}

/// The validation function of [`Storage::delete`], called with the object about to be
/// deleted (possibly more than once).
pub type ValidateDeleteFn<'a> = dyn Fn(&Object) -> Result<()> + Send + Sync + 'a;

/// A key-value store of Kubernetes objects with etcd's versioning and watch semantics.
///
/// Semantics, common to all backends (the conformance suite checks every line):
/// - `create` fails with `AlreadyExists` on a taken key, and with `BadRequest` when the object
///   already carries a resource version. It returns the object at its new version.
/// - `get` with version `None`/`0` reads the latest; with `n` the latest, which must be at
///   least `n` (else `TooLargeResourceVersion`).
/// - `list`: unset version is a consistent read of the latest; `0` or `NotOlderThan n` the
///   latest (at least `n`); `Exact n` the state at `n` (`Expired` if compacted away). A
///   continue token reads at the token's revision; when that was compacted the error is
///   `Expired` with a token that continues at the latest revision.
/// - `watch` from version `n > 0` delivers every change after `n`; from `None`/`0` it first
///   delivers the current state as `Added` events. `send_initial_events == Some(true)` does
///   the same from any version and, with bookmarks allowed, ends the initial state with a
///   bookmark marked `initial_events_end` at the state's version; `Some(false)` with `0` or
///   `None` starts at the current revision with no state. A version older than the retained
///   history is `Expired` (as the result, or as the stream's first event).
/// - writes never go through a cache; deletes return the last state at the deletion's version.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Stores a new object at `key`, optionally expiring after `ttl`.
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object>;

    /// Reads one object.
    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>>;

    /// Lists objects under a collection key (or the one object of an object key).
    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList>;

    /// Watches a collection or one object.
    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream>;

    /// Read-modify-write with optimistic concurrency: reads the current object (or trusts
    /// `suggestion`, a possibly stale cached copy, for the first attempt), calls `update`,
    /// and writes if nothing changed meanwhile, retrying on conflict. Preconditions are
    /// checked on every attempt. The written state expires after the TTL the update returned,
    /// if any ([`Updated`]). An update that changes nothing writes nothing and returns the
    /// current object.
    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object>;

    /// Deletes an object after checking preconditions and `validate`, retrying on conflict
    /// (re-validating each time). Returns the last state at the deletion's version.
    async fn delete(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        validate: &ValidateDeleteFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object>;

    /// Counts objects under a key.
    async fn stats(&self, key: &Key) -> Result<Stats>;

    /// What a list of this storage's resource with `opts` is expected to cost, from what is
    /// known without I/O (upstream's object count tracker, read by flow control's list work
    /// estimator before the request takes its seats); `None` when nothing is known, which
    /// costs a list the minimum. The default knows nothing; a cache answers from its state.
    fn list_cost(&self, opts: &ListOptions) -> Option<ListCost> {
        let _ = opts;
        None
    }

    /// Asks every watch with progress notification on to report a bookmark at the current
    /// revision, once it has delivered everything up to it.
    async fn request_watch_progress(&self) -> Result<()>;

    /// The backend's current revision (what a consistent read would see).
    async fn current_resource_version(&self) -> Result<u64>;

    /// The newest compaction revision the backend knows of (0 when it knows of none): its
    /// history below it is gone, so reads at older revisions and watches from them are
    /// `Expired`. Cheap and synchronous: a cache over the backend checks it on every read
    /// and watch at a past revision, and polls it to drop history no read can use any more.
    /// A backend may learn of a compaction late (etcd: when its compactor runs, or a read or
    /// watch meets the compaction), never before it happened.
    fn compacted_revision(&self) -> u64;

    /// `Ok` when serving; `NotReady` or `Unreachable` otherwise.
    async fn readiness(&self) -> Result<()>;

    /// The largest object this storage writes, as the length of its stored JSON (without
    /// resource version), when it has a limit. Writers check it before writing and answer
    /// [`Error::object_too_large`] (413); a backend refuses larger writes the same way. A
    /// storage wrapping another (a cache) reports the other's limit.
    fn max_object_bytes(&self) -> Option<usize> {
        None
    }
}

/// etcd's default `--max-request-bytes` (1.5 MiB), the object limit of the embedded store
/// by default, so that what the embedded store accepts etcd accepts too.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// Deletes with no validation; convenience for callers without one.
pub fn no_validation() -> &'static ValidateDeleteFn<'static> {
    &|_| Ok(())
}
