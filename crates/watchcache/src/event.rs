//! The events the window holds.
//!
//! Invariants: an event is immutable once built and shared as `Arc<CacheEvent>` by the window,
//! every reader and every watcher, so whatever is derived from it (e.g. its encoded frame) can
//! be computed once by its consumer and shared; `object` carries the event's resource version,
//! `prev_object` its own older one.

use std::sync::Arc;
use std::time::Instant;

use listwatch_api::{EventType, Object};
use listwatch_storage::WatchEvent;

/// One change of the cached resource, as the window keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEvent {
    /// `Added`, `Modified` or `Deleted` (never a bookmark or an error).
    pub event_type: EventType,
    /// The object's storage key path, e.g. `/pods/ns/name`.
    pub key: Arc<str>,
    /// The new state; for `Deleted`, the last state at the deletion's version.
    pub object: Object,
    /// The state before this event, when the cache had one (watchers use it to turn a
    /// `Modified` that leaves their selection into `Deleted`, and to pick trigger values).
    pub prev_object: Option<Object>,
    /// The event's resource version (the object's).
    pub resource_version: u64,
    /// When the cache received it (for latency metrics and the resize rule).
    pub received_at: Instant,
}

impl CacheEvent {
    /// The event as a storage watch event (objects are shared, not copied).
    pub fn to_watch_event(&self) -> WatchEvent {
        match self.event_type {
            EventType::Added => WatchEvent::Added(self.object.clone()),
            EventType::Deleted => WatchEvent::Deleted(self.object.clone()),
            _ => WatchEvent::Modified {
                object: self.object.clone(),
                prev: self.prev_object.clone(),
            },
        }
    }

    /// Bytes this event keeps alive once newer versions replace its objects: the event
    /// itself, the previous state, and a deleted object's last state.
    pub(crate) fn retained_bytes(&self) -> usize {
        let prev = self.prev_object.as_ref().map_or(0, Object::size);
        let gone = if self.event_type == EventType::Deleted {
            self.object.size()
        } else {
            0
        };
        std::mem::size_of::<Self>() + prev + gone
    }
}

/// A run of consecutive window events, oldest first, sharing the window's storage (taking it
/// costs O(log n), never a copy of the events).
#[derive(Debug, Clone, Default)]
pub struct Events(pub(crate) imbl::Vector<Arc<CacheEvent>>);

impl Events {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The events, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Arc<CacheEvent>> + ExactSizeIterator {
        self.0.iter()
    }

    /// The event at `i` (0 is the oldest).
    pub fn get(&self, i: usize) -> Option<&Arc<CacheEvent>> {
        self.0.get(i)
    }

    /// The oldest event.
    pub fn first(&self) -> Option<&Arc<CacheEvent>> {
        self.0.front()
    }

    /// The newest event.
    pub fn last(&self) -> Option<&Arc<CacheEvent>> {
        self.0.back()
    }

    /// Copies the `Arc`s into a `Vec`.
    pub fn to_vec(&self) -> Vec<Arc<CacheEvent>> {
        self.0.iter().cloned().collect()
    }
}
