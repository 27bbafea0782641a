//! The watch cache of listwatch: the current state of one resource with secondary indexes,
//! a bounded, resizable window of recent events, and past states for Exact lists and
//! continue tokens (pinned on demand or rebuilt from the window, never copied per event).
//!
//! It sits between the backend and the clients, inside the cacher: a reflector lists and
//! watches the backend and feeds the [`WatchCache`] writer (`replace`, `apply`, `progress`);
//! the dispatcher reads the window's events, and lists and gets are served from
//! [`CacheView`]s taken through cheap [`WatchCacheReader`] handles. It answers "the state at
//! resource version N" and "the events since N", or `Expired` when they are gone, with
//! Kubernetes' semantics and messages (see `cache` module docs for the rules it keeps).
//!
//! Objects are held as [`listwatch_api::Object`]: serialized bytes plus a small parsed view,
//! shared (never copied) between the state, the window, the pinned states and every reader.
//! Errors are [`listwatch_storage::Error`], so the cacher passes them through unchanged.
//!
//! This crate depends only on `listwatch-api` and `listwatch-storage`. It must never depend on
//! a backend (etcd, memstore), on HTTP, or on the cacher above it.
//!
//! ```
//! use listwatch_api::{Object, SelectableFields, FieldSelector};
//! use listwatch_storage::{Key, ListOptions, ResourceVersionMatch, WatchEvent};
//! use listwatch_watchcache::{Config, Index, WatchCache};
//!
//! let fields = SelectableFields::new(["spec.nodeName"]);
//! let pod = |name: &str, node: &str, rv: u64| {
//!     let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"nodeName":"{node}"}}}}"#);
//!     Object::from_json(json.as_bytes(), &fields).unwrap().with_resource_version(rv)
//! };
//! let mut cache = WatchCache::new(Config::new("pods").with_index(Index::field("spec.nodeName")));
//! let reader = cache.reader();
//! cache.replace(vec![pod("a", "n1", 3)], 10)?;
//! cache.apply(WatchEvent::Added(pod("b", "n1", 11)))?;
//! cache.apply(WatchEvent::Deleted(pod("a", "n1", 12)))?;
//!
//! let view = reader.view();
//! let pods = Key::collection("pods", None)?;
//! // The state at 11, rebuilt from the current one and the window, through the index.
//! let mut opts = ListOptions::recursive().at(Some(11), Some(ResourceVersionMatch::Exact));
//! opts.predicate.field = FieldSelector::equals("spec.nodeName", "n1");
//! let at_11 = view.list(&pods, &opts)?;
//! assert_eq!(at_11.items.iter().map(|o| o.name()).collect::<Vec<_>>(), ["a", "b"]);
//! // What a watcher from 10 receives.
//! let since: Vec<u64> = view.events_since(10)?.iter().map(|e| e.resource_version).collect();
//! assert_eq!(since, [11, 12]);
//! # Ok::<(), listwatch_storage::Error>(())
//! ```

mod cache;
mod config;
mod event;
mod snapshots;
mod store;
mod window;

pub use cache::{CacheView, WatchCache, WatchCacheReader};
pub use config::{
    CacheMetrics, Clock, Config, DEFAULT_EVENT_FRESHNESS, DEFAULT_FRESHNESS_TIMEOUT,
    DEFAULT_MAX_CAPACITY, DEFAULT_MAX_SNAPSHOTS, DEFAULT_MIN_CAPACITY, DEFAULT_SNAPSHOT_TTL,
    EvictionReason, Index, IndexFn, ManualClock, MemoryUsage, NoMetrics, TokioClock,
};
pub use event::{CacheEvent, Events};
