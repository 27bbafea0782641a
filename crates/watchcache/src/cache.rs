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
//! oldest events, while the accounted bytes (state + window + pinned states, see
//! [`MemoryUsage`]) exceed it, and lowers the capacity to what is left. The current state is
//! never dropped; the metrics hook reports the squeeze.
//!
//! # Freshness
//!
//! [`WatchCacheReader::wait_until_fresh`] waits (at most the configured 3 s) for a view at or
//! above a resource version, else fails with `TooLargeResourceVersion`. While anyone waits,
//! [`WatchCacheReader::has_waiters`] is true, so the owner can ask the backend for progress
//! notifications (upstream: every 100 ms while anyone waits).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use listwatch_api::{EventType, Object};
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, ResourceVersionMatch, Result, WatchEvent,
    decode_continue, encode_continue,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{Config, EvictionReason, MemoryUsage};
use crate::event::{CacheEvent, Events};
use crate::snapshots::{Base, Pins, rebuild};
use crate::store::NAMESPACE;
use crate::store::Store;
use crate::window::{Sizing, Window};

/// Upstream etcd3's message for a continue token whose revision was compacted.
const CONTINUE_EXPIRED: &str = "The provided continue parameter is too old to display a \
    consistent list result. You can start a new list without the continue parameter, or use \
    the continue token in this response to retrieve the remainder of the results. Continuing \
    with the provided token results in an inconsistent list - objects that were created, \
    modified, or deleted between the time the first chunk was returned and now may show up in \
    the list.";

/// Bytes a pinned state keeps per event after it, per map (the object map, and each index's,
/// whose members are key/object handles too): the writer copies the leaf it changes (up
/// to 16 key/object handles, imbl's B-tree node) and, the first time, the branches above it
/// (the memory test measures ~1 100 bytes per change over the first hundred changes spread
/// over 10 000 objects, ~530 by a thousand, as changes start to share leaves).
const SNAPSHOT_BYTES_PER_CHANGE: usize = 800;

/// Bytes of a pinned state that shares nothing with the live one any more, per object and
/// per map (the object map, and each index's): a copy of the maps' nodes (key and object handles plus node overhead), never of the objects
/// (the memory test measures ~88 bytes per object).
const SNAPSHOT_BYTES_PER_OBJECT: usize = 96;

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

/// One immutable version of the cache, as readers see it.
///
/// Every read method answers from this version alone; take a new view (or wait for one) to
/// see later changes. Only the writer builds views (its working copy is one); once published
/// a view is never changed.
#[derive(Clone)]
pub struct CacheView {
    /// Shared configuration.
    config: Arc<Config>,
    /// The highest resource version seen (events, lists and progress); `store_rv <= rv`.
    /// Never decreases except through a relist at a lower version.
    rv: u64,
    /// Resource version of the last change of `store` (last event, or the list): the state
    /// at every version in `store_rv..=rv` is `store`.
    store_rv: u64,
    /// The current state, with indexes.
    store: Store,
    /// Recent events, all with `list_rv < resource_version <= store_rv`.
    window: Window,
    /// The last list's resource version (0 before any list).
    list_rv: u64,
    /// Past states pinned by lists (shared by every view and the writer; see the
    /// `snapshots` module). Never used when snapshots are off.
    pins: Arc<Pins>,
    /// The backend's compaction revision: Exact reads below it are expired.
    compacted_rv: u64,
    /// Whether a list has been applied; reads before that are `NotReady`.
    initialized: bool,
    /// How many lists have been applied (each `replace` starts a new generation).
    generation: u64,
    /// Bytes kept alive by the window alone (see [`MemoryUsage::window_bytes`]): the sum of
    /// the buffered events' retained bytes.
    window_bytes: usize,
}

impl std::fmt::Debug for CacheView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheView")
            .field("resource", &self.config.resource)
            .field("resource_version", &self.rv)
            .field("objects", &self.store.len())
            .field("window", &self.window.len())
            .field("capacity", &self.window.capacity())
            .field("pinned", &self.pins.len())
            .finish_non_exhaustive()
    }
}

impl CacheView {
    /// The highest resource version the cache has seen.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Whether a list has been applied (before that, reads fail with `NotReady`).
    pub fn is_initialized(&self) -> bool {
        self.initialized
    }

    /// How many lists the cache has applied: a view of another generation is another
    /// history (events between two generations are not in the window).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of objects in the current state.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether the current state is empty.
    pub fn is_empty(&self) -> bool {
        self.store.len() == 0
    }

    /// The window's capacity.
    pub fn capacity(&self) -> usize {
        self.window.capacity()
    }

    /// Every buffered event, oldest first.
    pub fn window(&self) -> Events {
        Events::new(self.window.events().clone(), 0)
    }

    /// Resource versions an Exact list can be served at, as `(oldest, newest)`.
    pub fn snapshot_range(&self) -> Option<(u64, u64)> {
        if !self.initialized {
            return None;
        }
        Some((self.rebuild_floor().max(self.compacted_rv), self.rv))
    }

    /// The oldest version whose state can be rebuilt from the current one and the window:
    /// every event after it is buffered. Without snapshots, the last change's.
    fn rebuild_floor(&self) -> u64 {
        if !self.config.snapshots {
            self.store_rv
        } else if self.window.evicted() {
            self.window.last_evicted_rv()
        } else {
            self.list_rv
        }
    }

    /// How many pinned past states there are (see the module docs).
    pub fn pinned_snapshots(&self) -> usize {
        self.pins.len()
    }

    /// Accounted memory.
    pub fn memory(&self) -> MemoryUsage {
        MemoryUsage {
            state_bytes: self.store.bytes(),
            window_bytes: self.window_bytes,
            snapshot_bytes: self.snapshot_bytes(),
            budget: self.config.byte_budget,
        }
    }

    /// Estimated bytes of the pinned states beyond the current one: each keeps the nodes the
    /// writer copied since, about [`SNAPSHOT_BYTES_PER_CHANGE`] per event after it, at most a
    /// copy of all the maps' nodes ([`SNAPSHOT_BYTES_PER_OBJECT`] per object); both measured
    /// by the memory test. An upper bound when changes cluster in a few leaves.
    fn snapshot_bytes(&self) -> usize {
        let versions = self.pins.versions();
        if versions.is_empty() {
            return 0;
        }
        versions.into_iter().map(|rv| self.pin_bytes(rv)).sum()
    }

    /// Estimated bytes of a state pinned at `rv` (see [`Self::snapshot_bytes`]).
    fn pin_bytes(&self, rv: u64) -> usize {
        // The object map and one member map per index: each copies its own path.
        let maps = 1 + self.config.indexes.len();
        let whole = self
            .store
            .len()
            .saturating_mul(SNAPSHOT_BYTES_PER_OBJECT)
            .saturating_mul(maps);
        let after = if rv < self.rebuild_floor() {
            usize::MAX
        } else {
            self.window.len() - self.window.position_after(rv).min(self.window.len())
        };
        after
            .saturating_mul(SNAPSHOT_BYTES_PER_CHANGE)
            .saturating_mul(maps)
            .min(whole)
    }

    /// The oldest resource version a watch may start from (upstream's `oldest − 1`).
    fn oldest_watchable(&self) -> u64 {
        let oldest = match self.window.oldest() {
            Some(e) if self.window.evicted() || self.list_rv == 0 => e.resource_version,
            _ if self.window.evicted() => self.rv + 1,
            _ => self.list_rv + 1,
        };
        oldest.saturating_sub(1)
    }

    /// The events after `rv`, oldest first, or `Expired` when some of them have left the
    /// window (upstream's rule, see the module docs). A version above the view's is
    /// `TooLargeResourceVersion` (wait for freshness first).
    ///
    /// To start a watch from "now" with the current state first (resource version 0), list
    /// from this view and then take `events_since(view.resource_version())` — both from the
    /// same view, so nothing falls between them.
    pub fn events_since(&self, rv: u64) -> Result<Events> {
        self.ensure_initialized()?;
        if rv > self.rv {
            return Err(Error::TooLargeResourceVersion {
                requested: rv,
                current: self.rv,
            });
        }
        let oldest = self.oldest_watchable();
        if rv < oldest {
            return Err(Error::too_old(rv, oldest));
        }
        let start = self.window.position_after(rv);
        Ok(Events::new(self.window.events().clone(), start))
    }

    /// Reads one object. Version `None`/`0`: the current state; `n`: the current state,
    /// which must be at least `n` (else `TooLargeResourceVersion`).
    pub fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        self.ensure_initialized()?;
        self.check_key(key)?;
        if let Some(rv) = opts.resource_version.filter(|rv| *rv > self.rv) {
            return Err(Error::TooLargeResourceVersion {
                requested: rv,
                current: self.rv,
            });
        }
        match (self.store.get(key.path()), key.is_collection()) {
            (Some(o), false) => Ok(Some(o.clone())),
            _ if opts.ignore_not_found => Ok(None),
            _ => Err(key.not_found()),
        }
    }

    /// Lists with Kubernetes' resource-version semantics:
    /// - unset: the current state (the owner first waits until the cache has the backend's
    ///   current revision, for a consistent read);
    /// - `0`: the current state, the limit ignored (upstream serves it whole);
    /// - `n` with `NotOlderThan` (or no match): the current state, which must be at least `n`;
    /// - `n` with `Exact`: the state at `n`, pinned or rebuilt (`Expired` when it can no
    ///   longer be, see the module docs);
    /// - a continue token: the next page at the token's version, or `Expired` carrying a
    ///   token that continues at the current version when that one is gone.
    ///
    /// A page that hands out a continue token pins the state it read, so that the next pages
    /// read it in O(log n + page) (see the module docs).
    ///
    /// A version above the view's is `TooLargeResourceVersion`. Label and field selectors
    /// filter; exact-match field selectors on indexed fields read only the most selective of
    /// those indexes (pinned and rebuilt states keep the indexes too).
    /// `remaining_item_count` is never set: the cache does not count what follows a page.
    pub fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        self.ensure_initialized()?;
        self.check_key(key)?;
        opts.validate_list()?;
        let prefix = key.path();
        let (store, list_rv, start, limit) = if let Some(token) = &opts.continue_token {
            let (start, rv) = decode_continue(token, prefix)?;
            if rv > self.rv {
                return Err(Error::TooLargeResourceVersion {
                    requested: rv,
                    current: self.rv,
                });
            }
            let store = self
                .store_at(rv)
                .map_err(|_| self.expired_continuation(&start, prefix))?;
            (store, rv, Some(start), opts.page_limit())
        } else {
            let current = Cow::Borrowed(&self.store);
            match (opts.resource_version, opts.resource_version_match) {
                (None, _) => (current, self.rv, None, opts.page_limit()),
                (Some(0), _) => (current, self.rv, None, None),
                (Some(rv), _) if rv > self.rv => {
                    return Err(Error::TooLargeResourceVersion {
                        requested: rv,
                        current: self.rv,
                    });
                }
                (Some(rv), Some(ResourceVersionMatch::Exact)) => {
                    (self.store_at(rv)?, rv, None, opts.page_limit())
                }
                (Some(_), _) => (current, self.rv, None, opts.page_limit()),
            }
        };
        let limit = limit.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
        // A selector fixing the namespace of a list across namespaces reads that namespace's
        // key range: the same objects, in the same order (keys are built from the object's
        // namespace), without a namespace index. An empty namespace is left to the selector
        // (cluster-scoped objects have it, and their keys have no namespace segment).
        let narrowed = match opts.predicate.field.exact_match(NAMESPACE) {
            Some(ns) if !ns.is_empty() && key.is_collection() && key.namespace().is_none() => {
                Key::collection(key.resource(), Some(ns))
                    .ok()
                    .map(|k| (k, ns))
            }
            _ => None,
        };
        let (scan, namespace) = match &narrowed {
            Some((k, ns)) => (k.path(), Some(*ns)),
            None => (prefix, key.namespace()),
        };
        let page = store.page(
            &self.config.indexes,
            scan,
            namespace,
            !key.is_collection(),
            &opts.predicate,
            start.as_deref(),
            limit,
        );
        let continue_token = match page.more_after {
            Some(last) => {
                let token = encode_continue(&format!("{last}\0"), prefix, list_rv)?;
                // The next pages read this very state, whatever the writer does meanwhile.
                self.pin(list_rv, &store);
                Some(token)
            }
            None => None,
        };
        Ok(ObjectList {
            items: page.items,
            resource_version: list_rv,
            continue_token,
            remaining_item_count: None,
        })
    }

    /// The state at `rv` (≤ the view's version): the current one, a pinned one, or one
    /// rebuilt from the nearest of those through the window, else `Expired`.
    fn store_at(&self, rv: u64) -> Result<Cow<'_, Store>> {
        if rv < self.compacted_rv {
            return Err(Error::too_old(rv, self.compacted_rv));
        }
        if rv >= self.store_rv {
            return Ok(Cow::Borrowed(&self.store));
        }
        let floor = self.rebuild_floor();
        if !self.config.snapshots {
            return Err(Error::too_old(rv, floor.max(self.compacted_rv)));
        }
        let now = self.config.clock.now();
        if let Some(pinned) = self.pins.get(self.generation, rv, now) {
            return Ok(Cow::Owned(pinned));
        }
        if rv < floor {
            return Err(Error::too_old(rv, floor.max(self.compacted_rv)));
        }
        // The base reading the fewest events: the current state or a pin whose version is
        // also rebuildable (at or above the floor) and known to this view.
        let target = self.window.position_after(rv);
        let mut base = Base {
            rv: self.store_rv,
            position: self.window.len(),
            store: self.store.clone(),
        };
        for (pinned_rv, store) in self.pins.within(self.generation, floor, self.rv) {
            let position = self.window.position_after(pinned_rv);
            if position.abs_diff(target) < base.position.abs_diff(target) {
                base = Base {
                    rv: pinned_rv,
                    position,
                    store,
                };
            }
        }
        tracing::trace!(resource = %self.config.resource, rv, from = base.rv, events = base.position.abs_diff(target), "rebuilding a past state");
        // Pinned only if the page hands out a continue token (see `list`): Exact lists
        // without one do not push out the pins of paginated walks.
        Ok(Cow::Owned(rebuild(
            &self.config.indexes,
            base,
            self.window.events(),
            target,
        )))
    }

    /// Pins `store` as the state at `rv` of this view's generation (when snapshots are on,
    /// and a byte budget, if any, has room for it: the writer enforces the budget only on
    /// its next change).
    fn pin(&self, rv: u64, store: &Store) {
        let fits = self
            .config
            .byte_budget
            .is_none_or(|budget| self.memory().total() + self.pin_bytes(rv) <= budget);
        if self.config.snapshots && fits {
            let now = self.config.clock.now();
            self.pins.insert(
                self.generation,
                rv,
                store,
                now,
                self.config.snapshot_limits(),
            );
        }
    }

    fn expired_continuation(&self, start: &str, prefix: &str) -> Error {
        match encode_continue(start, prefix, self.rv) {
            Ok(token) => Error::Expired {
                message: CONTINUE_EXPIRED.into(),
                continue_token: Some(token),
            },
            Err(e) => e,
        }
    }

    fn ensure_initialized(&self) -> Result<()> {
        if self.initialized {
            Ok(())
        } else {
            Err(Error::NotReady {
                message: format!(
                    "watch cache of {} is not initialized yet",
                    self.config.resource
                ),
                retry_after_seconds: 1,
            })
        }
    }

    fn check_key(&self, key: &Key) -> Result<()> {
        if key.resource() == self.config.resource {
            Ok(())
        } else {
            Err(Error::bad_request(format!(
                "key {key} is not of resource {:?} served by this cache",
                self.config.resource
            )))
        }
    }
}

/// A cheap, clonable read handle. See the module docs for what it guarantees.
#[derive(Clone)]
pub struct WatchCacheReader {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WatchCacheReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchCacheReader")
            .field("view", &*self.view())
            .finish()
    }
}

/// Decrements the waiter count when a wait ends, however it ends.
struct WaiterGuard<'a>(&'a AtomicUsize);

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl WatchCacheReader {
    /// The latest published view (an `Arc` clone under a lock held only for that).
    pub fn view(&self) -> Arc<CacheView> {
        Arc::clone(&self.shared.published.borrow())
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// The highest resource version the cache has seen.
    pub fn resource_version(&self) -> u64 {
        self.shared.published.borrow().rv
    }

    /// Whether some reader is waiting in [`wait_until_fresh`](Self::wait_until_fresh); the
    /// owner then asks the backend for progress notifications.
    pub fn has_waiters(&self) -> bool {
        self.shared.waiters.load(Ordering::Relaxed) > 0
    }

    /// Resolves as soon as some reader waits in [`wait_until_fresh`](Self::wait_until_fresh)
    /// (at once if one does already), so that the owner asks the backend for progress the
    /// moment a reader needs it, and sleeps otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn waiter_arrived(&self) {
        loop {
            let notified = self.next_first_waiter();
            if self.has_waiters() {
                return;
            }
            notified.await;
        }
    }

    /// Resolves the next time the number of waiters leaves zero. The wait counts from this
    /// call, not from the first poll: create it before doing what it must not miss.
    pub fn next_first_waiter(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.first_waiter.notified()
    }

    /// Waits until the cache has reached `rv` and returns that view; fails with
    /// `TooLargeResourceVersion` when it has not by `deadline` or the configured freshness
    /// timeout (upstream 3 s), whichever comes first. Version 0 returns at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait and leaves nothing behind.
    pub async fn wait_until_fresh(
        &self,
        rv: u64,
        deadline: Option<Instant>,
    ) -> Result<Arc<CacheView>> {
        let view = self.view();
        if view.rv >= rv {
            return Ok(view);
        }
        let timeout = Instant::now() + self.shared.config.freshness_timeout;
        let deadline = deadline.map_or(timeout, |d| d.min(timeout));
        if self.shared.waiters.fetch_add(1, Ordering::Relaxed) == 0 {
            self.shared.first_waiter.notify_waiters();
        }
        let _guard = WaiterGuard(&self.shared.waiters);
        let mut rx = self.shared.published.subscribe();
        let waited = tokio::time::timeout_at(deadline, rx.wait_for(|v| v.rv >= rv)).await;
        match waited {
            Ok(Ok(view)) => Ok(Arc::clone(&view)),
            // The sender lives in `shared`, which we hold: it cannot close.
            Ok(Err(_)) | Err(_) => Err(Error::TooLargeResourceVersion {
                requested: rv,
                current: self.resource_version(),
            }),
        }
    }

    /// Waits, with no time limit, for a view newer than `rv` (a dispatcher's idle wait: it
    /// then takes `events_since(rv)` from the returned view).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait and leaves nothing behind.
    pub async fn wait_for_change(&self, rv: u64) -> Arc<CacheView> {
        let mut rx = self.shared.published.subscribe();
        match rx.wait_for(|v| v.rv > rv).await {
            Ok(view) => Arc::clone(&view),
            // The sender lives in `shared`, which we hold: it cannot close. Should it ever,
            // the latest view is still the right answer for the caller to look at.
            Err(_) => self.view(),
        }
    }

    /// [`CacheView::list`] after waiting until fresh enough for `opts`' version (not for an
    /// unset one: a consistent read waits for the backend's revision, which the caller knows).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`wait_until_fresh`](Self::wait_until_fresh).
    pub async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let need = match &opts.continue_token {
            Some(token) => decode_continue(token, key.path())?.1,
            None => opts.resource_version.unwrap_or(0),
        };
        self.wait_until_fresh(need, None).await?.list(key, opts)
    }

    /// [`CacheView::get`] after waiting until fresh enough for `opts`' version.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`wait_until_fresh`](Self::wait_until_fresh).
    pub async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        let need = opts.resource_version.unwrap_or(0);
        self.wait_until_fresh(need, None).await?.get(key, opts)
    }

    /// [`CacheView::events_since`] after waiting until the cache has reached `rv`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`wait_until_fresh`](Self::wait_until_fresh).
    pub async fn events_since(&self, rv: u64) -> Result<Events> {
        self.wait_until_fresh(rv, None).await?.events_since(rv)
    }
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

    /// Squeezes the window while over the byte budget.
    fn enforce_budget(&mut self) {
        let m = &self.master;
        let Some(budget) = m.config.byte_budget else {
            m.config.metrics.memory(&m.config.resource, m.memory());
            return;
        };
        let mut evicted = 0;
        while self.master.memory().total() > budget {
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
            tracing::debug!(resource = %m.config.resource, evicted, budget, "watch cache over its byte budget");
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use listwatch_api::{FieldSelector, LabelSelector, SelectableFields};
    use listwatch_storage::{Bookmark, SelectionPredicate};

    use super::*;
    use crate::config::{CacheMetrics, Index, ManualClock};

    fn pod(ns: &str, name: &str, node: &str, rv: u64) -> Object {
        let json = serde_json::json!({
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
            "spec": {"nodeName": node},
        });
        Object::from_value(json, &SelectableFields::new(["spec.nodeName"]))
            .unwrap()
            .with_resource_version(rv)
    }

    fn config() -> Config {
        Config::new("pods")
            .with_index(Index::field("spec.nodeName"))
            .with_capacity(4, 4, 16)
            .with_clock(Arc::new(ManualClock::new()))
    }

    fn cache_at_10() -> WatchCache {
        let mut c = WatchCache::new(config());
        c.replace(vec![pod("a", "x", "n1", 5), pod("b", "y", "n2", 7)], 10)
            .unwrap();
        c
    }

    fn all() -> Key {
        Key::collection("pods", None).unwrap()
    }

    fn rvs(e: &Events) -> Vec<u64> {
        e.iter().map(|e| e.resource_version).collect()
    }

    fn names(l: &ObjectList) -> Vec<&str> {
        l.items.iter().map(Object::name).collect()
    }

    fn exact(rv: u64) -> ListOptions {
        ListOptions::recursive().at(Some(rv), Some(ResourceVersionMatch::Exact))
    }

    #[test]
    fn reads_before_the_first_list_are_not_ready() {
        let c = WatchCache::new(config());
        let v = c.reader().view();
        assert!(matches!(v.events_since(1), Err(Error::NotReady { .. })));
        assert!(matches!(
            v.list(&all(), &ListOptions::recursive()),
            Err(Error::NotReady { .. })
        ));
    }

    #[test]
    fn a_watch_from_the_list_version_is_served_and_older_ones_expire() {
        let mut c = cache_at_10();
        c.apply(WatchEvent::Added(pod("a", "z", "n1", 12))).unwrap();
        let v = c.reader().view();
        assert_eq!(rvs(&v.events_since(10).unwrap()), [12]);
        assert_eq!(rvs(&v.events_since(11).unwrap()), [12]);
        assert!(v.events_since(12).unwrap().is_empty());
        let err = v.events_since(9).unwrap_err();
        assert_eq!(err.to_string(), "too old resource version: 9 (10)");
        assert_eq!(err.to_status().code, 410);
    }

    #[test]
    fn after_an_eviction_the_oldest_buffered_event_sets_the_limit() {
        let mut c = cache_at_10();
        // Stale events (the manual clock never moves, but capacity 4 at min 4 with the
        // freshness rule doubling: push enough to evict under the max of 16).
        for rv in 11..=40 {
            c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n1", rv)))
                .unwrap();
        }
        let v = c.reader().view();
        assert_eq!(v.capacity(), 16);
        assert_eq!(v.window().len(), 16);
        let oldest = v.window().get(0).unwrap().resource_version;
        assert_eq!(oldest, 25);
        assert!(v.events_since(24).is_ok(), "oldest − 1 is still complete");
        assert_eq!(
            v.events_since(23).unwrap_err().to_string(),
            "too old resource version: 23 (24)"
        );
        assert!(
            v.events_since(10).unwrap_err().is_expired(),
            "the list version no longer counts"
        );
    }

    #[test]
    fn a_relist_empties_the_window_and_restarts_the_rule() {
        let mut c = cache_at_10();
        for rv in 11..=40 {
            c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n1", rv)))
                .unwrap();
        }
        c.replace(vec![pod("a", "x", "n1", 5)], 50).unwrap();
        let v = c.reader().view();
        assert!(v.window().is_empty());
        assert!(v.events_since(50).unwrap().is_empty());
        assert_eq!(
            v.events_since(48).unwrap_err().to_string(),
            "too old resource version: 48 (50)"
        );
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn progress_advances_the_version_without_an_event() {
        let mut c = cache_at_10();
        c.apply(WatchEvent::Bookmark(Bookmark {
            resource_version: 20,
            initial_events_end: false,
        }))
        .unwrap();
        c.progress(15);
        let v = c.reader().view();
        assert_eq!(v.resource_version(), 20);
        assert!(v.events_since(20).unwrap().is_empty());
        assert!(matches!(
            v.events_since(21),
            Err(Error::TooLargeResourceVersion {
                requested: 21,
                current: 20
            })
        ));
        // The state at 20 is the list's state.
        assert_eq!(names(&v.list(&all(), &exact(20)).unwrap()), ["x", "y"]);
    }

    #[test]
    fn out_of_order_and_error_events_are_refused_and_change_nothing() {
        let mut c = cache_at_10();
        assert!(matches!(
            c.apply(WatchEvent::Added(pod("a", "z", "n1", 10))),
            Err(Error::Internal { .. })
        ));
        assert!(matches!(
            c.apply(WatchEvent::Error(Error::internal("x"))),
            Err(Error::BadRequest { .. })
        ));
        assert!(
            c.apply(WatchEvent::Added(pod("a", "", "n1", 11))).is_err(),
            "objects need a name"
        );
        let v = c.reader().view();
        assert_eq!(v.resource_version(), 10);
        assert!(v.window().is_empty());
    }

    #[test]
    fn events_carry_the_previous_state_from_the_cache() {
        let mut c = cache_at_10();
        let returned = c
            .apply(WatchEvent::Modified {
                object: pod("a", "x", "n9", 11),
                prev: None,
            })
            .unwrap()
            .unwrap();
        c.apply(WatchEvent::Deleted(pod("a", "x", "n9", 12)))
            .unwrap();
        let events = c.reader().view().events_since(10).unwrap();
        assert!(
            Arc::ptr_eq(&returned, events.get(0).unwrap()),
            "one shared entry"
        );
        let (m, d) = (events.get(0).unwrap(), events.get(1).unwrap());
        assert_eq!(m.event_type, EventType::Modified);
        assert_eq!(
            m.prev_object.as_ref().map(Object::resource_version),
            Some(5)
        );
        assert_eq!(&*m.key, "/pods/a/x");
        assert_eq!(d.event_type, EventType::Deleted);
        assert_eq!(
            d.prev_object.as_ref().map(Object::resource_version),
            Some(11)
        );
        assert_eq!(d.object.resource_version(), 12);
        assert_eq!(
            d.to_watch_event(),
            WatchEvent::Deleted(pod("a", "x", "n9", 12))
        );
    }

    #[test]
    fn exact_lists_read_snapshots_and_other_versions_read_the_current_state() {
        let mut c = cache_at_10();
        c.apply(WatchEvent::Added(pod("a", "z", "n1", 12))).unwrap();
        c.apply(WatchEvent::Deleted(pod("a", "x", "n1", 14)))
            .unwrap();
        let v = c.reader().view();
        assert_eq!(names(&v.list(&all(), &exact(10)).unwrap()), ["x", "y"]);
        assert_eq!(names(&v.list(&all(), &exact(13)).unwrap()), ["x", "z", "y"]);
        assert_eq!(v.list(&all(), &exact(13)).unwrap().resource_version, 13);
        assert_eq!(names(&v.list(&all(), &exact(14)).unwrap()), ["z", "y"]);
        assert!(v.list(&all(), &exact(9)).unwrap_err().is_expired());
        assert!(matches!(
            v.list(&all(), &exact(15)),
            Err(Error::TooLargeResourceVersion { .. })
        ));
        let not_older =
            ListOptions::recursive().at(Some(12), Some(ResourceVersionMatch::NotOlderThan));
        let l = v.list(&all(), &not_older).unwrap();
        assert_eq!((names(&l), l.resource_version), (vec!["z", "y"], 14));
        let l = v
            .list(
                &Key::collection("pods", Some("a")).unwrap(),
                &ListOptions::recursive(),
            )
            .unwrap();
        assert_eq!(names(&l), ["z"]);
    }

    #[test]
    fn without_snapshots_only_versions_since_the_last_change_are_exact() {
        let mut c = WatchCache::new(config().with_snapshots(false));
        c.replace(vec![pod("a", "x", "n1", 5)], 10).unwrap();
        c.apply(WatchEvent::Added(pod("a", "z", "n1", 12))).unwrap();
        c.progress(20);
        let v = c.reader().view();
        assert_eq!(names(&v.list(&all(), &exact(15)).unwrap()), ["x", "z"]);
        assert!(v.list(&all(), &exact(11)).unwrap_err().is_expired());
        assert_eq!(v.snapshot_range(), Some((12, 20)));
    }

    #[test]
    fn compaction_expires_older_exact_reads_but_keeps_the_state_at_the_revision() {
        let mut c = cache_at_10();
        for rv in [12, 14, 16] {
            c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n1", rv)))
                .unwrap();
        }
        c.compact(15);
        let v = c.reader().view();
        assert_eq!(
            names(&v.list(&all(), &exact(15)).unwrap()),
            ["p12", "p14", "x", "y"]
        );
        assert_eq!(
            v.list(&all(), &exact(14)).unwrap_err().to_string(),
            "too old resource version: 14 (15)"
        );
        assert_eq!(v.snapshot_range(), Some((15, 16)));
        assert!(
            v.events_since(10).is_ok(),
            "compaction does not shorten the window"
        );
    }

    #[test]
    fn limits_and_continue_tokens_walk_a_consistent_version() {
        let mut c = cache_at_10();
        for (i, rv) in (11..=15).enumerate() {
            c.apply(WatchEvent::Added(pod("a", &format!("q{i}"), "n1", rv)))
                .unwrap();
        }
        let reader = c.reader();
        let mut opts = ListOptions {
            limit: Some(3),
            ..ListOptions::recursive()
        };
        let first = reader.view().list(&all(), &opts).unwrap();
        assert_eq!(names(&first), ["q0", "q1", "q2"]);
        let token = first.continue_token.clone().unwrap();
        assert_eq!(
            decode_continue(&token, "/pods/").unwrap(),
            ("/pods/a/q2\0".to_owned(), 15)
        );
        // Changes after the first page do not show in the next ones.
        c.apply(WatchEvent::Deleted(pod("a", "q3", "n1", 16)))
            .unwrap();
        opts.continue_token = Some(token);
        let second = reader.view().list(&all(), &opts).unwrap();
        assert_eq!(
            (names(&second), second.resource_version),
            (vec!["q3", "q4", "x"], 15)
        );
        opts.continue_token = second.continue_token.clone();
        let third = reader.view().list(&all(), &opts).unwrap();
        assert_eq!(names(&third), ["y"]);
        assert!(third.continue_token.is_none());
    }

    #[test]
    fn version_zero_ignores_the_limit() {
        let c = cache_at_10();
        let opts = ListOptions {
            limit: Some(1),
            ..ListOptions::recursive().at(Some(0), None)
        };
        let l = c.reader().view().list(&all(), &opts).unwrap();
        assert_eq!(names(&l), ["x", "y"]);
        assert!(l.continue_token.is_none());
    }

    #[test]
    fn selectors_filter_and_indexes_answer_exact_fields() {
        let c = cache_at_10();
        let v = c.reader().view();
        let mut opts = ListOptions::recursive();
        opts.predicate = SelectionPredicate {
            label: LabelSelector::parse("app in (x,y)").unwrap(),
            field: FieldSelector::parse("spec.nodeName=n2").unwrap(),
        };
        assert_eq!(names(&v.list(&all(), &opts).unwrap()), ["y"]);
        opts.predicate.field = FieldSelector::parse("spec.nodeName!=n2").unwrap();
        assert_eq!(names(&v.list(&all(), &opts).unwrap()), ["x"]);
        opts.predicate.field = FieldSelector::parse("spec.nodeName=nowhere").unwrap();
        assert!(v.list(&all(), &opts).unwrap().items.is_empty());
    }

    /// Issue 12 item 9: the node index through modifications that move pods between nodes,
    /// keep them on their node, delete them, and a relist that replaces everything: each
    /// list by node returns the current objects at their current versions.
    #[test]
    fn indexes_follow_moves_deletes_and_relists() {
        let mut c = WatchCache::new(config().with_index(Index::namespace()));
        c.replace(vec![pod("a", "x", "n1", 5), pod("b", "y", "n2", 7)], 10)
            .unwrap();
        let by_node = |c: &WatchCache, node: &str| {
            let mut opts = ListOptions::recursive();
            opts.predicate.field = FieldSelector::equals("spec.nodeName", node);
            c.reader()
                .view()
                .list(&all(), &opts)
                .unwrap()
                .items
                .iter()
                .map(|o| (o.name().to_owned(), o.resource_version()))
                .collect::<Vec<_>>()
        };
        let check = |c: &WatchCache| c.view().store.check_indexes(&c.shared.config.indexes);
        c.apply(WatchEvent::Modified {
            object: pod("a", "x", "n1", 11),
            prev: Some(pod("a", "x", "n1", 5)),
        })
        .unwrap();
        check(&c);
        assert_eq!(by_node(&c, "n1"), [("x".to_owned(), 11)]);
        c.apply(WatchEvent::Modified {
            object: pod("a", "x", "n2", 12),
            prev: Some(pod("a", "x", "n1", 11)),
        })
        .unwrap();
        check(&c);
        assert!(by_node(&c, "n1").is_empty());
        assert_eq!(
            by_node(&c, "n2"),
            [("x".to_owned(), 12), ("y".to_owned(), 7)]
        );
        c.apply(WatchEvent::Deleted(pod("b", "y", "n2", 13)))
            .unwrap();
        check(&c);
        assert_eq!(by_node(&c, "n2"), [("x".to_owned(), 12)]);
        c.replace(vec![pod("c", "z", "n1", 20), pod("a", "x", "n3", 19)], 30)
            .unwrap();
        check(&c);
        assert_eq!(by_node(&c, "n1"), [("z".to_owned(), 20)]);
        assert!(by_node(&c, "n2").is_empty());
        assert_eq!(by_node(&c, "n3"), [("x".to_owned(), 19)]);
    }

    /// A selector fixing the namespace reads the namespace's key range; the empty namespace
    /// (cluster-scoped objects) and a namespace that is not a valid key segment are left to
    /// the selector.
    #[test]
    fn a_namespace_selector_narrows_to_the_namespace_range() {
        let mut c = WatchCache::new(config());
        c.replace(
            vec![
                pod("a", "x", "n1", 5),
                pod("ab", "w", "n1", 6),
                pod("b", "y", "n2", 7),
            ],
            10,
        )
        .unwrap();
        let v = c.reader().view();
        let list = |key: &Key, field: &str| {
            let mut opts = ListOptions::recursive();
            opts.predicate.field = FieldSelector::parse(field).unwrap();
            names(&v.list(key, &opts).unwrap())
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        assert_eq!(list(&all(), "metadata.namespace=a"), ["x"]);
        assert_eq!(list(&all(), "metadata.namespace=a,spec.nodeName=n1"), ["x"]);
        assert_eq!(
            list(&all(), "metadata.namespace=b,spec.nodeName=n1"),
            Vec::<String>::new()
        );
        assert_eq!(list(&all(), "metadata.namespace!=a"), ["w", "y"]);
        assert_eq!(list(&all(), "metadata.namespace=a/b"), Vec::<String>::new());
        let ns_a = Key::collection("pods", Some("a")).unwrap();
        assert_eq!(list(&ns_a, "metadata.namespace=b"), Vec::<String>::new());
        // Continue tokens stay those of the key asked for.
        let mut opts = ListOptions::recursive();
        opts.limit = Some(1);
        opts.predicate.field = FieldSelector::parse("metadata.namespace=ab").unwrap();
        let page = v.list(&all(), &opts).unwrap();
        assert_eq!(names(&page), ["w"]);
        assert!(page.continue_token.is_none());
        // Cluster-scoped objects have the empty namespace: all of them match it.
        let node = |name: &str| {
            Object::from_value(
                serde_json::json!({"metadata": {"name": name}}),
                &SelectableFields::new(["spec.nodeName"]),
            )
            .unwrap()
            .with_resource_version(3)
        };
        let mut nodes =
            WatchCache::new(Config::new("nodes").with_clock(Arc::new(ManualClock::new())));
        nodes.replace(vec![node("n1"), node("n2")], 10).unwrap();
        let v = nodes.reader().view();
        let every = Key::collection("nodes", None).unwrap();
        let mut opts = ListOptions::recursive();
        opts.predicate.field = FieldSelector::parse("metadata.namespace=").unwrap();
        assert_eq!(names(&v.list(&every, &opts).unwrap()), ["n1", "n2"]);
        opts.predicate.field = FieldSelector::parse("metadata.namespace=n1").unwrap();
        assert!(v.list(&every, &opts).unwrap().items.is_empty());
    }

    #[test]
    fn get_reads_the_current_state_with_version_checks() {
        let c = cache_at_10();
        let v = c.reader().view();
        let x = Key::object("pods", Some("a"), "x").unwrap();
        let gone = Key::object("pods", Some("a"), "nope").unwrap();
        assert_eq!(
            v.get(&x, &GetOptions::default())
                .unwrap()
                .map(|o| o.resource_version()),
            Some(5)
        );
        assert!(
            v.get(&gone, &GetOptions::default())
                .unwrap_err()
                .is_not_found()
        );
        assert_eq!(
            v.get(
                &gone,
                &GetOptions {
                    ignore_not_found: true,
                    ..Default::default()
                }
            )
            .unwrap(),
            None
        );
        let too_new = GetOptions {
            resource_version: Some(11),
            ..Default::default()
        };
        assert!(matches!(
            v.get(&x, &too_new),
            Err(Error::TooLargeResourceVersion { .. })
        ));
        let other = Key::object("nodes", None, "x").unwrap();
        assert!(matches!(
            v.get(&other, &GetOptions::default()),
            Err(Error::BadRequest { .. })
        ));
        let one = v.list(&x, &ListOptions::default()).unwrap();
        assert_eq!(names(&one), ["x"]);
    }

    #[test]
    fn a_view_never_changes_after_it_was_taken() {
        let mut c = cache_at_10();
        let reader = c.reader();
        let before = reader.view();
        c.apply(WatchEvent::Deleted(pod("a", "x", "n1", 11)))
            .unwrap();
        assert_eq!(
            names(&before.list(&all(), &ListOptions::recursive()).unwrap()),
            ["x", "y"]
        );
        assert_eq!(before.resource_version(), 10);
        assert_eq!(reader.view().len(), 1);
        c.view().store.check_indexes(&c.shared.config.indexes);
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_version_times_out_after_three_seconds() {
        let c = cache_at_10();
        let reader = c.reader();
        let started = Instant::now();
        let err = reader.wait_until_fresh(11, None).await.unwrap_err();
        assert_eq!(
            err,
            Error::TooLargeResourceVersion {
                requested: 11,
                current: 10
            }
        );
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert!(!reader.has_waiters());
        let deadline = Instant::now() + Duration::from_secs(1);
        assert!(reader.wait_until_fresh(11, Some(deadline)).await.is_err());
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(4),
            "an earlier deadline wins"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_ends_as_soon_as_the_writer_gets_there() {
        let mut c = cache_at_10();
        let reader = c.reader();
        let waiter = tokio::spawn({
            let reader = reader.clone();
            async move {
                reader
                    .list(&all(), &ListOptions::recursive().at(Some(12), None))
                    .await
            }
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(reader.has_waiters());
        c.progress(11);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(reader.has_waiters(), "11 is not enough");
        c.apply(WatchEvent::Added(pod("a", "z", "n1", 12))).unwrap();
        let l = waiter.await.unwrap().unwrap();
        assert_eq!((names(&l), l.resource_version), (vec!["x", "z", "y"], 12));
        assert!(!reader.has_waiters());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dispatcher_wakes_for_each_newer_view_and_reads_its_events() {
        let mut c = cache_at_10();
        let reader = c.reader();
        let dispatcher = tokio::spawn({
            let reader = reader.clone();
            async move {
                let mut seen = Vec::new();
                let mut last = 10;
                while last < 13 {
                    let view = reader.wait_for_change(last).await;
                    seen.extend(
                        view.events_since(last)
                            .unwrap()
                            .iter()
                            .map(|e| e.resource_version),
                    );
                    last = view.resource_version();
                }
                seen
            }
        });
        for rv in 11..=13 {
            tokio::time::sleep(Duration::from_secs(60)).await;
            c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n1", rv)))
                .unwrap();
        }
        assert_eq!(dispatcher.await.unwrap(), [11, 12, 13]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_default_clock_follows_tokio_time_for_resizing() {
        let mut c = WatchCache::new(Config::new("pods"));
        c.replace(Vec::new(), 1).unwrap();
        for rv in 2..=101 {
            c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n", rv)))
                .unwrap();
        }
        assert_eq!(c.view().capacity(), 100);
        c.apply(WatchEvent::Added(pod("a", "p102", "n", 102)))
            .unwrap();
        assert_eq!(
            c.view().capacity(),
            200,
            "a full window of fresh events doubles"
        );
        for rv in 103..=201 {
            c.apply(WatchEvent::Added(pod("a", &format!("p{rv}"), "n", rv)))
                .unwrap();
        }
        tokio::time::advance(Duration::from_secs(76)).await;
        c.apply(WatchEvent::Added(pod("a", "p202", "n", 202)))
            .unwrap();
        assert_eq!(
            c.view().capacity(),
            100,
            "a full window of stale events halves"
        );
        assert_eq!(c.view().window().len(), 100);
    }

    #[derive(Default)]
    struct Recorder(Mutex<Vec<String>>);

    impl CacheMetrics for Recorder {
        fn capacity_changed(&self, _: &str, old: usize, new: usize) {
            self.0
                .lock()
                .unwrap()
                .push(format!("capacity {old}->{new}"));
        }
        fn events_evicted(&self, _: &str, count: usize, reason: EvictionReason) {
            self.0
                .lock()
                .unwrap()
                .push(format!("evicted {count} {reason:?}"));
        }
    }

    #[test]
    fn over_budget_the_window_shrinks_and_the_state_stays() {
        let metrics = Arc::new(Recorder::default());
        let base = pod("a", "x", "n1", 5);
        let mut c = WatchCache::new(
            config()
                .with_metrics(metrics.clone())
                .with_byte_budget(Some(1)),
        );
        c.replace(vec![base.clone()], 10).unwrap();
        for rv in 11..=14 {
            c.apply(WatchEvent::Modified {
                object: pod("a", "x", "n1", rv),
                prev: None,
            })
            .unwrap();
        }
        let v = c.reader().view();
        assert_eq!(v.len(), 1, "the current state is never dropped");
        assert!(v.window().is_empty());
        assert!(v.memory().window_bytes == 0 && v.memory().state_bytes > 1);
        assert!(v.events_since(13).unwrap_err().is_expired());
        assert!(v.events_since(14).unwrap().is_empty());
        let log = metrics.0.lock().unwrap();
        assert!(log.iter().any(|l| l == "evicted 1 Budget"), "{log:?}");
    }

    #[test]
    fn a_budget_that_fits_keeps_the_window() {
        let mut c = WatchCache::new(config().with_byte_budget(Some(1 << 20)));
        c.replace(vec![pod("a", "x", "n1", 5)], 10).unwrap();
        for rv in 11..=14 {
            c.apply(WatchEvent::Modified {
                object: pod("a", "x", "n1", rv),
                prev: None,
            })
            .unwrap();
        }
        let v = c.reader().view();
        assert_eq!(v.window().len(), 4);
        assert!(v.memory().window_bytes > 4 * pod("a", "x", "n1", 1).size());
    }
}
