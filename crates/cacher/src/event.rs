//! What flows from the dispatcher to the watchers: an event in the one form every watcher
//! shares ([`Dispatched`]) and the items of a watcher's buffer ([`Item`]).
//!
//! A leaf: it depends on the API, storage and watch-cache crates only, never on another module
//! of this crate, so the dispatcher, the registry, the ring of recent forms and the watcher's
//! stream can all name an event without depending on one another.
//!
//! Invariants: a [`Dispatched`] is immutable once made and shared by `Arc`; its objects carry
//! one lazy encoding per format, so every watcher that sends it sends the same bytes.

use std::sync::Arc;

use listwatch_api::{EventType, Object};
use listwatch_storage::WatchEvent;
use listwatch_watchcache::CacheEvent;

/// One event as every watcher shares it.
#[derive(Debug)]
pub(crate) struct Dispatched {
    pub(crate) rv: u64,
    pub(crate) event_type: EventType,
    /// The new state (the last state for a deletion), with a shared encoding.
    pub(crate) object: Object,
    /// The state before, as the cache knew it.
    pub(crate) prev: Option<Object>,
    /// The state before at this event's version, for watchers the change makes leave.
    pub(crate) prev_at_rv: Option<Object>,
    /// When the backend handed the event to the cacher, and when the dispatcher took it
    /// up: the starts of the `total` and `watcher_queue` latency stages (`None` for events
    /// wrapped outside the dispatcher).
    pub(crate) origin: Option<std::time::Instant>,
    pub(crate) dispatched_at: Option<std::time::Instant>,
}

impl Dispatched {
    /// Wraps a cache event, its objects with one shared lazy encoding each.
    pub(crate) fn new(ev: &CacheEvent) -> Self {
        Self {
            rv: ev.resource_version,
            event_type: ev.event_type,
            object: ev.object.with_shared_encoding(),
            prev: ev.prev_object.clone(),
            prev_at_rv: match ev.event_type {
                EventType::Modified => ev.prev_object.as_ref().map(|p| {
                    p.with_resource_version(ev.resource_version)
                        .with_shared_encoding()
                }),
                _ => None,
            },
            origin: None,
            dispatched_at: None,
        }
    }

    /// The storage event a watcher sends for `event_type` (from the watcher's filter).
    pub(crate) fn to_watch_event(&self, event_type: EventType) -> WatchEvent {
        match (event_type, self.event_type) {
            (EventType::Added, _) => WatchEvent::Added(self.object.clone()),
            (EventType::Modified, _) => WatchEvent::Modified {
                object: self.object.clone(),
                prev: self.prev.clone(),
            },
            // Leaving the selection: the previous content at this event's version.
            (_, EventType::Modified) => WatchEvent::Deleted(
                self.prev_at_rv
                    .clone()
                    .unwrap_or_else(|| self.object.clone()),
            ),
            _ => WatchEvent::Deleted(self.object.clone()),
        }
    }

    /// The object's namespace and name.
    pub(crate) fn scope(&self) -> (&str, &str) {
        (self.object.namespace().unwrap_or(""), self.object.name())
    }
}

/// What a watcher's buffer carries.
#[derive(Debug)]
pub(crate) enum Item {
    /// A candidate event, not yet filtered (the watcher applies its selectors when it takes
    /// it, see `filter`), and how long after the dispatcher took it up it entered this
    /// buffer ([`Item::pushed_after`]): the `cache_to_watcher` stage, observed by the watcher
    /// only if it delivers the event (one its start already covered, or its selector
    /// rejects, is dropped).
    Event(Arc<Dispatched>, u32),
    Bookmark(u64),
}

impl Item {
    /// A live event taken up by the dispatcher at `taken_up`, stamped as pushed now.
    pub(crate) fn event(d: Arc<Dispatched>, taken_up: std::time::Instant) -> Self {
        Item::Event(d, Self::micros_since(taken_up))
    }

    /// Restamps an event that waited for room in a full buffer (the blocked path).
    pub(crate) fn restamp(&mut self, taken_up: std::time::Instant) {
        if let Item::Event(_, at) = self {
            *at = Self::micros_since(taken_up);
        }
    }

    fn micros_since(taken_up: std::time::Instant) -> u32 {
        u32::try_from(taken_up.elapsed().as_micros()).unwrap_or(u32::MAX)
    }

    /// The `cache_to_watcher` time recorded with an event.
    pub(crate) fn pushed_after(micros: u32) -> std::time::Duration {
        std::time::Duration::from_micros(u64::from(micros))
    }
}
