//! States at past resource versions, for Exact lists and continue tokens (upstream's
//! ListFromCacheSnapshot), without a copy per event.
//!
//! The cache keeps no snapshot as events arrive: the writer's cost per event is the state's
//! own O(log n) update. A past state is obtained in one of two ways:
//!
//! - **Pinned** ([`Pins`]): when a list hands out a continue token, the state it read
//!   (current or rebuilt) is pinned under `(generation, resource version)`: an O(1)
//!   clone of the persistent maps. A pin shares every node with the live state until the
//!   writer changes it; from then on it keeps the nodes the writer replaced (at most one copy
//!   of the maps' inner nodes) and the bodies of the objects replaced or deleted since, which
//!   the window's events also hold (their previous states) until they leave the window; past
//!   that, the pin alone owns them and is charged for them (`CacheView::pin_bytes`). Pins are bounded in
//!   number (`Config::max_snapshots`, the least recently used goes first) and in age
//!   (`Config::snapshot_ttl` since last use), are dropped by a relist (a new generation), by a
//!   compaction above them, and first when the cache is over its byte budget.
//! - **Rebuilt** ([`rebuild`]): the state at `rv` is any base state whose version is on the
//!   same side of the window, changed by the window's events in between: rolled back
//!   (restoring each event's state before it, newest first) from the current state or a
//!   newer pin, or rolled forward (applying each event) from an older pin, whichever reads
//!   fewer events. This is possible exactly when every event after `rv` is still in the
//!   window (`rv` at or above the newest evicted event, or the list's version when none was
//!   evicted) — the same events a watch from `rv` needs. Otherwise the caller answers
//!   `Expired` and the cacher asks the backend, as before.
//!
//! Invariants:
//! - a pin under `(g, rv)` holds the state at `rv` of generation `g`; only pins of the
//!   current generation are kept (inserting for an older generation does nothing; the writer
//!   resets the generation before publishing a relist's view, so no published view is newer
//!   than the pins' generation);
//! - `len` equals the number of pins (read without the lock to skip it when there are none);
//! - the lock is held for map operations only, never while a state is rebuilt or a page read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::config::Index;
use crate::event::CacheEvent;
use crate::store::Store;

/// How many pins to keep and for how long.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// At most this many pins (0: pin nothing).
    pub(crate) count: usize,
    /// A pin unused for this long is dropped.
    pub(crate) ttl: Duration,
}

/// One pinned state.
struct Pin {
    store: Store,
    last_used: Instant,
}

#[derive(Default)]
struct Inner {
    /// The generation the pins belong to.
    generation: u64,
    /// Pins by resource version.
    by_rv: BTreeMap<u64, Pin>,
}

/// The pinned states of one cache, shared by the writer and every view.
#[derive(Default)]
pub(crate) struct Pins {
    inner: Mutex<Inner>,
    len: AtomicUsize,
}

impl std::fmt::Debug for Pins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pins").field("len", &self.len()).finish()
    }
}

impl Pins {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update_len(&self, inner: &Inner) {
        self.len.store(inner.by_rv.len(), Ordering::Relaxed);
    }

    /// Number of pins.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The state pinned at exactly `rv` in `generation`, marking it used at `now`.
    pub(crate) fn get(&self, generation: u64, rv: u64, now: Instant) -> Option<Store> {
        if self.len() == 0 {
            return None;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            return None;
        }
        let pin = inner.by_rv.get_mut(&rv)?;
        pin.last_used = now;
        Some(pin.store.clone())
    }

    /// The versions pinned in `generation` within `lo..=hi`, with their states (a few O(1)
    /// clones), for choosing a base to rebuild from.
    pub(crate) fn within(&self, generation: u64, lo: u64, hi: u64) -> Vec<(u64, Store)> {
        if self.len() == 0 || lo > hi {
            return Vec::new();
        }
        let inner = self.lock();
        if inner.generation != generation {
            return Vec::new();
        }
        inner
            .by_rv
            .range(lo..=hi)
            .map(|(rv, p)| (*rv, p.store.clone()))
            .collect()
    }

    /// Pins `store` as the state at `rv` in `generation` (or marks the existing pin used),
    /// then drops expired pins and the least recently used beyond the count.
    pub(crate) fn insert(
        &self,
        generation: u64,
        rv: u64,
        store: &Store,
        now: Instant,
        limits: Limits,
    ) {
        if limits.count == 0 {
            return;
        }
        let mut inner = self.lock();
        if inner.generation != generation {
            // A view of an older generation (the writer has moved on), or of a newer one the
            // writer has not reset for (impossible: it resets before publishing).
            return;
        }
        inner
            .by_rv
            .entry(rv)
            .and_modify(|p| p.last_used = now)
            .or_insert_with(|| Pin {
                store: store.clone(),
                last_used: now,
            });
        Self::trim(&mut inner, now, limits);
        self.update_len(&inner);
    }

    fn trim(inner: &mut Inner, now: Instant, limits: Limits) {
        inner
            .by_rv
            .retain(|_, p| now.saturating_duration_since(p.last_used) < limits.ttl);
        while inner.by_rv.len() > limits.count {
            let Some(lru) = inner
                .by_rv
                .iter()
                .min_by_key(|(_, p)| p.last_used)
                .map(|(rv, _)| *rv)
            else {
                break;
            };
            inner.by_rv.remove(&lru);
        }
    }

    /// Drops the pins unused for the TTL (the writer calls this as events arrive).
    pub(crate) fn expire(&self, now: Instant, limits: Limits) {
        if self.len() == 0 {
            return;
        }
        let mut inner = self.lock();
        Self::trim(&mut inner, now, limits);
        self.update_len(&inner);
    }

    /// A relist: every pin goes, and only `generation`'s are accepted from now on.
    pub(crate) fn reset(&self, generation: u64) {
        let mut inner = self.lock();
        inner.generation = generation;
        inner.by_rv.clear();
        self.update_len(&inner);
    }

    /// Drops every pin, keeping the generation (the cache's state was found corrupt).
    pub(crate) fn clear(&self) {
        let mut inner = self.lock();
        inner.by_rv.clear();
        self.update_len(&inner);
    }

    /// A compaction to `revision`: the pins below it can no longer be read.
    pub(crate) fn drop_below(&self, revision: u64) {
        if self.len() == 0 {
            return;
        }
        let mut inner = self.lock();
        inner.by_rv = inner.by_rv.split_off(&revision);
        self.update_len(&inner);
    }

    /// Drops the least recently used pin (over the byte budget); whether there was one.
    pub(crate) fn drop_one(&self) -> bool {
        if self.len() == 0 {
            return false;
        }
        let mut inner = self.lock();
        let lru = inner
            .by_rv
            .iter()
            .min_by_key(|(_, p)| p.last_used)
            .map(|(rv, _)| *rv);
        let dropped = lru.is_some_and(|rv| inner.by_rv.remove(&rv).is_some());
        self.update_len(&inner);
        dropped
    }

    /// The pinned versions, oldest first, with the accounted bytes of each pinned state's
    /// objects (for memory estimates).
    pub(crate) fn versions(&self) -> Vec<(u64, usize)> {
        if self.len() == 0 {
            return Vec::new();
        }
        self.lock()
            .by_rv
            .iter()
            .map(|(rv, p)| (*rv, p.store.bytes()))
            .collect()
    }
}

/// A state to rebuild from: its version and its position in the window (how many buffered
/// events are at or below its version).
pub(crate) struct Base {
    pub(crate) rv: u64,
    pub(crate) position: usize,
    pub(crate) store: Store,
}

/// The state at `target` from `base`, by the window's events between them: rolled back when
/// the base is newer, forward when it is older. `events` is the whole window (oldest first)
/// and `target_position` the number of its events at or below `target`; every event between
/// the two positions must be one the base's and the target's histories share (the caller
/// checks that both versions are at or above the newest evicted event).
pub(crate) fn rebuild(
    specs: &[Index],
    base: Base,
    events: &imbl::Vector<Arc<CacheEvent>>,
    target_position: usize,
) -> Store {
    let mut store = base.store;
    if base.position > target_position {
        // Undo the events after the target, newest first.
        let between = events
            .skip(target_position)
            .take(base.position - target_position);
        for e in between.iter().rev() {
            match e.state_before() {
                Some(before) => {
                    store.upsert(specs, Arc::clone(&e.key), before.clone());
                }
                None => {
                    store.remove(specs, &e.key);
                }
            }
        }
    } else {
        // Apply the events up to the target, oldest first.
        let between = events
            .skip(base.position)
            .take(target_position - base.position);
        for e in &between {
            if e.event_type == listwatch_api::EventType::Deleted {
                store.remove(specs, &e.key);
            } else {
                store.upsert(specs, Arc::clone(&e.key), e.object.clone());
            }
        }
    }
    store
}
