//! [`CacheView`]: one immutable published version of the cache, and every read on it.

use std::borrow::Cow;
use std::sync::Arc;

use listwatch_api::Object;
use listwatch_storage::{
    Error, GetOptions, Key, ListOptions, ObjectList, ResourceVersionMatch, Result,
    SelectionPredicate, decode_continue, encode_continue,
};

use crate::config::{Config, MemoryUsage};
use crate::event::Events;
use crate::snapshots::{Base, Pins, rebuild};
use crate::store::NAMESPACE;
use crate::store::Store;
use crate::window::Window;

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

/// One immutable version of the cache, as readers see it.
///
/// Every read method answers from this version alone; take a new view (or wait for one) to
/// see later changes. Only the writer builds views (its working copy is one); once published
/// a view is never changed.
#[derive(Clone)]
pub struct CacheView {
    /// Shared configuration.
    pub(super) config: Arc<Config>,
    /// The highest resource version seen (events, lists and progress); `store_rv <= rv`.
    /// Never decreases except through a relist at a lower version.
    pub(super) rv: u64,
    /// Resource version of the last change of `store` (last event, or the list): the state
    /// at every version in `store_rv..=rv` is `store`.
    pub(super) store_rv: u64,
    /// The current state, with indexes.
    pub(super) store: Store,
    /// Recent events, all with `list_rv < resource_version <= store_rv`.
    pub(super) window: Window,
    /// The last list's resource version (0 before any list).
    pub(super) list_rv: u64,
    /// Past states pinned by lists (shared by every view and the writer; see the
    /// `snapshots` module). Never used when snapshots are off.
    pub(super) pins: Arc<Pins>,
    /// The backend's compaction revision: Exact reads below it are expired.
    pub(super) compacted_rv: u64,
    /// Whether a list has been applied; reads before that are `NotReady`.
    pub(super) initialized: bool,
    /// How many lists have been applied (each `replace` starts a new generation).
    pub(super) generation: u64,
    /// Bytes kept alive by the window alone (see [`MemoryUsage::window_bytes`]): the sum of
    /// the buffered events' retained bytes.
    pub(super) window_bytes: usize,
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
    pub(super) fn rebuild_floor(&self) -> u64 {
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
            window_budget: self.config.window_byte_budget,
        }
    }

    /// Estimated bytes of the pinned states beyond the current one: each keeps the nodes the
    /// writer copied since, about [`SNAPSHOT_BYTES_PER_CHANGE`] per event after it, at most a
    /// copy of all the maps' nodes ([`SNAPSHOT_BYTES_PER_OBJECT`] per object); both measured
    /// by the memory test. An upper bound when changes cluster in a few leaves. A pin some of
    /// whose later events have left the window also owns the bodies those events replaced or
    /// deleted (the window no longer holds them): it is charged its own objects' bytes, an
    /// upper bound on those (what it still shares with the live state is counted twice).
    pub(super) fn snapshot_bytes(&self) -> usize {
        let versions = self.pins.versions();
        if versions.is_empty() {
            return 0;
        }
        let floor = self.rebuild_floor();
        versions
            .into_iter()
            .map(|(rv, objects)| {
                let bodies = if rv < floor { objects } else { 0 };
                self.pin_bytes(rv).saturating_add(bodies)
            })
            .sum()
    }

    /// Estimated bytes of the nodes of a state pinned at `rv` (see [`Self::snapshot_bytes`]).
    pub(super) fn pin_bytes(&self, rv: u64) -> usize {
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
    pub(super) fn oldest_watchable(&self) -> u64 {
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

    /// One chunk of this view's state as a watch's initial events: the objects under `key`
    /// matching `predicate`, in key order, from the key `start` on (inclusive; `None`: from
    /// the beginning), at most `limit`; with the key the next chunk starts from when more may
    /// follow. Reads this view's state in place — no pin, nothing copied but the chunk — so a
    /// watcher holding the view and a position replays any state in O(chunk) memory.
    pub fn state_chunk(
        &self,
        key: &Key,
        predicate: &SelectionPredicate,
        start: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Object>, Option<String>)> {
        self.ensure_initialized()?;
        self.check_key(key)?;
        // As in `list`: a selector fixing the namespace reads that namespace's key range.
        let narrowed = match predicate.field.exact_match(NAMESPACE) {
            Some(ns) if !ns.is_empty() && key.is_collection() && key.namespace().is_none() => {
                Key::collection(key.resource(), Some(ns))
                    .ok()
                    .map(|k| (k, ns))
            }
            _ => None,
        };
        let (scan, namespace) = match &narrowed {
            Some((k, ns)) => (k.path(), Some(*ns)),
            None => (key.path(), key.namespace()),
        };
        let page = self.store.page(
            &self.config.indexes,
            scan,
            namespace,
            !key.is_collection(),
            predicate,
            start,
            Some(limit.max(1)),
        );
        Ok((page.items, page.more_after.map(|last| format!("{last}\0"))))
    }

    /// The state at `rv` (≤ the view's version): the current one, a pinned one, or one
    /// rebuilt from the nearest of those through the window, else `Expired`.
    pub(super) fn store_at(&self, rv: u64) -> Result<Cow<'_, Store>> {
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
    /// and the byte budgets, if any, have room for it: the writer enforces the budget only on
    /// its next change).
    pub(super) fn pin(&self, rv: u64, store: &Store) {
        let mut after = self.memory();
        after.snapshot_bytes += self.pin_bytes(rv);
        let fits = !after.over_budget();
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

    pub(super) fn expired_continuation(&self, start: &str, prefix: &str) -> Error {
        match encode_continue(start, prefix, self.rv) {
            Ok(token) => Error::Expired {
                message: CONTINUE_EXPIRED.into(),
                continue_token: Some(token),
            },
            Err(e) => e,
        }
    }

    pub(super) fn ensure_initialized(&self) -> Result<()> {
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

    pub(super) fn check_key(&self, key: &Key) -> Result<()> {
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
