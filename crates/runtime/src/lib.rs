//! The controller runtime of listwatch: keep a local, indexed copy of a collection in sync
//! with a Kubernetes-style server, react to its changes, and run the work a controller does
//! on them — everything of client-go's `tools/cache`, `util/workqueue` and
//! `tools/leaderelection` (kube-rs's `kube-runtime`) that does not need to know how the server
//! is reached.
//!
//! It owns
//! - [`ListerWatcher`]: the two calls a reflector makes (list a page, open a watch), the one
//!   seam between the runtime and a server; for dynamic [`Object`](listwatch_api::Object)s or,
//!   through [`Typed`], any serde type that is a [`Resource`];
//! - [`Reflector`] / [`watcher`]: client-go's reflector loop (paginated list, watch from the
//!   list's version with bookmarks, relist on 410, backoff with jitter, streaming list with
//!   fallback) as a `Stream` of [`Event`]s, and [`reflector`], which applies them to a store;
//! - [`Writer`] / [`Store`]: one writer, many cheap readers, index functions,
//!   `wait_until_synced`, atomic relists that never hold two copies of the store;
//! - [`Informer`]: one reflector shared by many subscribers and [`EventHandler`]s, with resync;
//! - [`WorkQueue`] and [`Controller`]: client-go's rate-limited de-duplicating work queue and
//!   a reconcile loop over informers; [`predicate`]: which updates wake it;
//! - [`leaderelection`]: client-go's leader election ([`LeaderElector`]) over a [`LeaseLock`],
//!   the trait through which the Lease is read and written;
//! - [`Error`]: the one error enum of the runtime and of listwatch-client; the reflector
//!   decides what to do with a failure only through its predicates.
//!
//! Invariants (each module's doc has its own): a reflector's store reflects one consistent
//! list plus the watch events after it, in resource-version order, or is being relisted
//! atomically; no wait is without a deadline (a silent watch is dropped after its idle
//! margin, every lease call is bounded); no lock is held across an `.await`.
//!
//! Layering: it depends on `listwatch-api` only (and generic crates: tokio, futures, serde).
//! It must never depend on HTTP (hyper, TLS), kubeconfig or credential plugins — that is
//! `listwatch-client`, which implements [`ListerWatcher`] and [`LeaseLock`] over HTTP and
//! re-exports this crate as `listwatch_client::runtime` — nor on storage, the watch cache or
//! the server crates: the cacher, the RBAC authorizer and the garbage collector use it through
//! in-process lister-watchers of their own. `cargo xtask deps` checks these edges.
//!
//! ```
//! use futures::StreamExt;
//! use listwatch_api::{Object, SelectableFields};
//! use listwatch_runtime::{
//!     ListRequest, ListerWatcher, Page, Result, WatchRequest, WatchStream, reflector, watcher,
//!     Config, Writer,
//! };
//!
//! /// A lister-watcher over a fixed list and a watch that never sends anything.
//! struct Fixed(Vec<Object>);
//!
//! #[async_trait::async_trait]
//! impl ListerWatcher for Fixed {
//!     type Object = Object;
//!     async fn list(&self, _: &ListRequest) -> Result<Page<Object>> {
//!         Ok(Page { items: self.0.clone(), resource_version: "7".into(), continue_token: None })
//!     }
//!     async fn watch(&self, _: &WatchRequest) -> Result<WatchStream<Object>> {
//!         Ok(futures::stream::pending().boxed())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let pod = Object::from_value(
//!     serde_json::json!({"apiVersion": "v1", "kind": "Pod",
//!         "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"}}),
//!     &SelectableFields::none(),
//! )
//! .unwrap();
//! let writer = Writer::default();
//! let pods = writer.store();
//! tokio::spawn(reflector(writer, watcher(Fixed(vec![pod]), Config::default())).for_each(|_| async {}));
//! pods.wait_until_synced().await.unwrap();
//! assert_eq!(pods.len(), 1);
//! # }
//! ```

mod backoff;
pub mod controller;
mod error;
mod informer;
mod informer_error;
pub mod instant;
pub mod leaderelection;
mod lister;
pub mod predicate;
mod reflector;
mod resource;
pub mod shard;
pub mod store;
mod token_bucket;
pub mod workqueue;

pub use controller::{Action, Controller};
pub use error::{Error, Result};
pub use informer::{
    EventHandler, HandlerRegistration, Informer, InformerConfig, InformerError, Subscription,
    SyncError, Transform, dispatch,
};
pub use leaderelection::{LeaderElectionConfig, LeaderElector, LeaseLock, LeaseRecord, LeaseState};
pub use lister::{
    ListRequest, ListerWatcher, Page, PageEnd, PageItem, PageStream, Typed, VersionMatch,
    WatchEvent, WatchRequest, WatchStream, collect_page, page_stream,
};
pub use predicate::Filtered;
pub use reflector::{Config, Event, Reflector, reflector, watcher};
pub use resource::{HasMetadata, MetadataFields, ObjectKey, Resource};
pub use shard::Sharded;
pub use store::{Delta, IndexFn, Store, Writer};
pub use token_bucket::TokenBucket;
pub use workqueue::{Processing, RateLimits, WorkQueue};
