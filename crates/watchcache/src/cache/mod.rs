//! The watch cache: one writer, many readers, immutable published versions.
//!
//! # Semantics
//!
//! [`WatchCache`] is the single writer. The reflector feeds it: [`WatchCache::replace`] after
//! each (re)list, [`WatchCache::apply`] for each watch event, [`WatchCache::progress`] for
//! bookmarks. After every change the writer publishes a new [`CacheView`]: an immutable value
//! holding the current state (objects + indexes), the event window and the resource version,
//! plus a handle on the pinned past states (see below). Readers ([`WatchCacheReader`], cheap to clone) take the latest
//! view and answer everything from it, so one request sees one consistent version even while
//! the writer moves on: a list and the events after its version come from the same view.
//!
//! # Publication and the writer's progress
//!
//! The published view sits in a `tokio::sync::watch` channel. Publishing is a pointer swap
//! under the channel's lock; taking a view is an `Arc` clone under the same lock. No one holds
//! that lock for longer, never across an `.await`, so a reader delays the writer by at most
//! one pointer swap, and the writer never waits for a reader to finish with an old view:
//! old views stay alive, untouched, while anyone holds them.
//!
//! All the data structures in a view are persistent (imbl): the writer keeps a private working
//! copy and changes it in place; where a node is shared with a published view it copies the
//! O(log n) nodes on the path it changes. A published view is therefore never mutated.
//!
//! # The window and "too old"
//!
//! The window keeps the most recent events. Its capacity starts at 100 and, checked when an
//! event arrives at a full window, doubles (up to 102 400) while the oldest event is younger
//! than 75 s, and halves (down to 100) once the event a quarter of the capacity from the
//! newest end is older than that (all configurable, see [`Config`]). A watch from
//! resource version `rv` can be served when every event after `rv` is still buffered. As
//! upstream: let `oldest` be the resource version after the last list when no event has left
//! the window since that list, else the oldest buffered event's; then `rv < oldest − 1` is
//! `Expired` with the message `too old resource version: rv (oldest − 1)`.
//!
//! # Past states (snapshots)
//!
//! With snapshots on, an Exact list at `rv` and a continue token at `rv` read the state at
//! `rv`, though the writer keeps no copy per event (see the `snapshots` module): a list that
//! hands out a continue token pins the state it read (an O(1) clone of the persistent maps,
//! bounded in number and age); a past state not pinned is rebuilt from the current state or
//! the nearest pin and the window's events in between, which is possible exactly when every
//! event after `rv` is still in the window (`rv` at or above the newest evicted event, or
//! the list's version when none was evicted), and is pinned if its page hands out a token. Below that, and below the
//! compaction revision ([`WatchCache::compact`]), the read is `Expired`, as it is from etcd.
//! A relist drops every pin (a new generation); so does a compaction above them.
//!
//! # Memory budget
//!
//! With a byte budget, after each change the writer drops pinned states, then evicts the
//! oldest events, while the accounted bytes exceed it, and lowers the capacity to what is
//! left. Two budgets exist (see [`MemoryUsage::over_budget`](crate::MemoryUsage::over_budget)): one of the total (state +
//! window + pinned states, [`Config::byte_budget`]) and one of the history alone (window +
//! pinned states, [`Config::window_byte_budget`], what the apiserver sets). The current state
//! is never dropped; the metrics hook reports the squeeze. A squeeze is an eviction like any
//! other: a watch or replay from a version that left the window is `Expired`, never served
//! with a gap.
//!
//! # Freshness
//!
//! [`WatchCacheReader::wait_until_fresh`] waits (at most the configured 3 s) for a view at or
//! above a resource version, else fails with `TooLargeResourceVersion`. While anyone waits,
//! [`WatchCacheReader::has_waiters`] is true, so the owner can ask the backend for progress
//! notifications (upstream: every 100 ms while anyone waits).

mod reader;
#[cfg(test)]
mod tests;
mod view;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use listwatch_api::{EventType, Object};
use listwatch_storage::{Error, Key, Result, WatchEvent};
use tokio::sync::watch;

use crate::config::{Config, EvictionReason};
use crate::event::CacheEvent;
use crate::snapshots::Pins;
use crate::store::Store;
use crate::window::{Sizing, Window};

pub use reader::WatchCacheReader;
pub use view::CacheView;

/// What writer and readers share.
struct Shared {
    /// The configuration; never changes.
    config: Arc<Config>,
    /// The latest published view. Only the writer sends; the lock inside is held for a swap
    /// or an `Arc` clone, never longer.
    published: watch::Sender<Arc<CacheView>>,
    /// Readers currently inside `wait_until_fresh`.
    waiters: AtomicUsize,
    /// Notified when the number of waiters leaves zero.
    first_waiter: tokio::sync::Notify,
}

/// The writer: the only handle that changes the cache. Not `Clone`; the reflector owns it.
///
/// ```
/// use listwatch_api::{Object, SelectableFields};
/// use listwatch_storage::{Key, ListOptions, WatchEvent};
/// use listwatch_watchcache::{Config, Index, WatchCache};
///
/// let fields = SelectableFields::new(["spec.nodeName"]);
/// let pod = |name: &str, node: &str, rv: u64| {
///     let json = format!(r#"{{"metadata":{{"name":"{name}","namespace":"ns"}},"spec":{{"nodeName":"{node}"}}}}"#);
///     Object::from_json(json.as_bytes(), &fields).unwrap().with_resource_version(rv)
/// };
/// let mut cache = WatchCache::new(Config::new("pods").with_index(Index::field("spec.nodeName")));
/// let reader = cache.reader();
/// cache.replace(vec![pod("a", "n1", 5)], 10)?;
/// cache.apply(WatchEvent::Added(pod("b", "n2", 11)))?;
///
/// let view = reader.view();
/// let events = view.events_since(10)?;
/// assert_eq!(events.len(), 1);
/// let all = view.list(&Key::collection("pods", None)?, &ListOptions::recursive())?;
/// assert_eq!(all.items.len(), 2);
/// assert!(view.events_since(5).unwrap_err().is_expired());
/// # Ok::<(), listwatch_storage::Error>(())
/// ```
pub struct WatchCache {
    shared: Arc<Shared>,
    /// The working copy; published (cloned) after every change.
    master: CacheView,
}

impl std::fmt::Debug for WatchCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCache")
            .field("view", &self.master)
            .finish()
    }
}

impl WatchCache {
    /// An empty, uninitialized cache.
    pub fn new(config: Config) -> Self {
        let config = Arc::new(config);
        let master = CacheView {
            rv: 0,
            store_rv: 0,
            store: Store::new(&config.indexes),
            window: Window::new(config.initial_capacity),
            list_rv: 0,
            pins: Arc::new(Pins::default()),
            compacted_rv: 0,
            initialized: false,
            generation: 0,
            window_bytes: 0,
            config: Arc::clone(&config),
        };
        let (published, _) = watch::channel(Arc::new(master.clone()));
        Self {
            shared: Arc::new(Shared {
                config,
                published,
                waiters: AtomicUsize::new(0),
                first_waiter: tokio::sync::Notify::new(),
            }),
            master,
        }
    }

    /// A read handle.
    pub fn reader(&self) -> WatchCacheReader {
        WatchCacheReader {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The writer's current view (what was last published).
    pub fn view(&self) -> &CacheView {
        &self.master
    }

    /// Replaces the state with a list's result at `rv` and empties the window, so the "too
    /// old" rule starts from the list. Invalid objects (no name) reject the whole list and
    /// leave the cache as it was.
    pub fn replace(&mut self, objects: Vec<Object>, rv: u64) -> Result<()> {
        let specs = &self.shared.config.indexes;
        let mut store = Store::new(specs);
        for o in objects {
            let key = self.key_of(&o)?;
            store.upsert(specs, key, o);
        }
        let m = &mut self.master;
        if rv < m.rv {
            tracing::warn!(resource = %m.config.resource, list_rv = rv, cache_rv = m.rv, "relist went back in resource version");
        }
        m.store = store;
        m.store_rv = rv;
        m.rv = rv;
        m.list_rv = rv;
        m.window.reset();
        m.window_bytes = 0;
        m.initialized = true;
        m.generation += 1;
        // Before the new generation's view is published: no pin of the old one survives.
        m.pins.reset(m.generation);
        tracing::debug!(resource = %m.config.resource, objects = m.store.len(), rv, "watch cache replaced");
        self.enforce_budget();
        self.publish();
        Ok(())
    }

    /// Applies one event of the backend's watch and returns the window's entry for it (the
    /// same `Arc` readers see), for the owner to hand to its dispatcher; `None` for a
    /// bookmark, which is [`progress`](Self::progress). Object events must come in strictly
    /// increasing resource-version order (else `Internal`, and nothing changes); an error
    /// event is refused with `BadRequest` (the reflector handles those).
    pub fn apply(&mut self, event: WatchEvent) -> Result<Option<Arc<CacheEvent>>> {
        let (event_type, object, given_prev) = match event {
            WatchEvent::Added(o) => (EventType::Added, o, None),
            WatchEvent::Modified { object, prev } => (EventType::Modified, object, prev),
            WatchEvent::Deleted(o) => (EventType::Deleted, o, None),
            WatchEvent::Bookmark(b) => {
                self.progress(b.resource_version);
                return Ok(None);
            }
            WatchEvent::Error(e) => {
                return Err(Error::bad_request(format!(
                    "the watch cache cannot apply an error event: {e}"
                )));
            }
        };
        let rv = object.resource_version();
        if rv <= self.master.rv {
            return Err(Error::internal(format!(
                "event at resource version {rv} is not newer than the watch cache's {}",
                self.master.rv
            )));
        }
        let key = self.key_of(&object)?;
        let received_at = self.shared.config.clock.now();
        let specs = &self.shared.config.indexes;
        let m = &mut self.master;
        let prev = match event_type {
            EventType::Deleted => m.store.remove(specs, &key),
            _ => m.store.upsert(specs, Arc::clone(&key), object.clone()),
        };
        let from_state = prev.is_some();
        let event = Arc::new(
            CacheEvent::new(event_type, key, object, prev.or(given_prev), received_at)
                .with_prev_from_state(from_state),
        );
        m.rv = rv;
        m.store_rv = rv;
        m.pins.expire(received_at, m.config.snapshot_limits());
        m.window_bytes += event.retained_bytes();
        let sizing = Sizing {
            min: m.config.min_capacity,
            max: m.config.max_capacity,
            freshness: m.config.event_freshness,
        };
        let outcome = m.window.push(Arc::clone(&event), received_at, sizing);
        if let Some((old, new)) = outcome.resized {
            tracing::debug!(resource = %m.config.resource, old, new, "watch cache window resized");
            m.config
                .metrics
                .capacity_changed(&m.config.resource, old, new);
        }
        if !outcome.evicted.is_empty() {
            m.config.metrics.events_evicted(
                &m.config.resource,
                outcome.evicted.len(),
                EvictionReason::Capacity,
            );
            self.forget(&outcome.evicted);
        }
        self.enforce_budget();
        self.publish();
        Ok(Some(event))
    }

    /// Records that the backend has reached `rv` with no change to this resource (a bookmark
    /// or progress notification). Lower versions are ignored.
    pub fn progress(&mut self, rv: u64) {
        if rv > self.master.rv {
            self.master.rv = rv;
            self.publish();
        }
    }

    /// Records the backend's compaction revision: Exact reads below it are `Expired`, and
    /// the pinned states below it are dropped.
    pub fn compact(&mut self, revision: u64) {
        let m = &mut self.master;
        if revision <= m.compacted_rv {
            return;
        }
        m.compacted_rv = revision;
        m.pins.drop_below(revision);
        self.publish();
    }

    /// Drops what only the evicted events kept: their accounted bytes.
    fn forget(&mut self, evicted: &[Arc<CacheEvent>]) {
        let m = &mut self.master;
        for e in evicted {
            m.window_bytes = m.window_bytes.saturating_sub(e.retained_bytes());
        }
    }

    /// Squeezes the window while over a byte budget (see [`MemoryUsage::over_budget`](crate::MemoryUsage::over_budget)).
    fn enforce_budget(&mut self) {
        let mut evicted = 0;
        while self.master.memory().over_budget() {
            // Pinned states first (a paginated walk then rebuilds or asks the backend), then
            // the oldest events, one at a time: the pins' estimate depends on the window.
            if self.master.pins.drop_one() {
                continue;
            }
            let Some(e) = self.master.window.pop_oldest() else {
                break;
            };
            self.forget(std::slice::from_ref(&e));
            evicted += 1;
        }
        let m = &self.master;
        if evicted > 0 {
            tracing::debug!(resource = %m.config.resource, evicted, budget = ?m.config.byte_budget,
                window_budget = ?m.config.window_byte_budget, "watch cache over its byte budget");
            m.config
                .metrics
                .events_evicted(&m.config.resource, evicted, EvictionReason::Budget);
            let min = m.config.min_capacity;
            if let Some((old, new)) = self.master.window.shrink_to_fit(min) {
                let m = &self.master;
                m.config
                    .metrics
                    .capacity_changed(&m.config.resource, old, new);
            }
        }
        let m = &self.master;
        m.config.metrics.memory(&m.config.resource, m.memory());
    }

    fn key_of(&self, o: &Object) -> Result<Arc<str>> {
        let key = Key::object(&self.shared.config.resource, o.namespace(), o.name())?;
        Ok(key.path().into())
    }

    /// Swaps the new version in; the old one is dropped outside the channel's lock.
    fn publish(&mut self) {
        let old = self
            .shared
            .published
            .send_replace(Arc::new(self.master.clone()));
        drop(old);
    }
}
