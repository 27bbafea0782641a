//! The events the window holds.
//!
//! Invariants: an event is immutable once built and shared as `Arc<CacheEvent>` by the window,
//! every reader and every watcher, so whatever is derived from it (e.g. its encoded frame) can
//! be computed once by its consumer and shared; `object` carries the event's resource version,
//! `prev_object` its own older one. What a consumer derived can be attached to the event
//! ([`CacheEvent::attach`], [`CacheEvent::derived_or_attach`]), held weakly: the window never
//! keeps it alive, so the cache's memory does not grow by it, and whoever holds it strongly
//! decides how long it is shared. Once it is gone, the next consumer derives it again and
//! attaches that; consumers racing to derive it get one value.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use listwatch_api::{EventType, Object};
use listwatch_storage::WatchEvent;

/// One change of the cached resource, as the window keeps it.
#[derive(Debug)]
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
    /// What a consumer derived from this event, held weakly (see [`CacheEvent::attach`]);
    /// a dangling `Weak` when there is none. Locked only to read or replace the pointer.
    derived: Mutex<Weak<dyn Any + Send + Sync>>,
    /// Whether `prev_object` is the cache's own state of the key before this event (false
    /// when the cache had none and the backend supplied it): rolling the state back to
    /// before this event restores `prev_object` only then, else removes the key.
    prev_from_state: bool,
}

impl Clone for CacheEvent {
    /// A copy of the change, sharing what was derived from it while that lives.
    fn clone(&self) -> Self {
        Self {
            event_type: self.event_type,
            key: Arc::clone(&self.key),
            object: self.object.clone(),
            prev_object: self.prev_object.clone(),
            resource_version: self.resource_version,
            received_at: self.received_at,
            derived: Mutex::new(self.derived_weak()),
            prev_from_state: self.prev_from_state,
        }
    }
}

/// No value derived (a dangling pointer; allocates nothing).
fn nothing() -> Weak<dyn Any + Send + Sync> {
    Weak::<()>::new()
}

impl PartialEq for CacheEvent {
    /// Events are equal when they describe the same change (what was derived aside).
    fn eq(&self, other: &Self) -> bool {
        self.event_type == other.event_type
            && self.key == other.key
            && self.object == other.object
            && self.prev_object == other.prev_object
            && self.resource_version == other.resource_version
            && self.received_at == other.received_at
    }
}

impl Eq for CacheEvent {}

impl CacheEvent {
    /// An event; `object` must carry `resource_version`.
    pub fn new(
        event_type: EventType,
        key: Arc<str>,
        object: Object,
        prev_object: Option<Object>,
        received_at: Instant,
    ) -> Self {
        Self {
            event_type,
            key,
            resource_version: object.resource_version(),
            object,
            prev_object,
            received_at,
            derived: Mutex::new(nothing()),
            prev_from_state: true,
        }
    }

    /// Marks whether `prev_object` came from the cache's state (see `state_before`).
    pub(crate) fn with_prev_from_state(mut self, from_state: bool) -> Self {
        self.prev_from_state = from_state;
        self
    }

    /// The cache's state of the key right before this event: `None` when the key was absent.
    pub(crate) fn state_before(&self) -> Option<&Object> {
        self.prev_object.as_ref().filter(|_| self.prev_from_state)
    }

    /// Attaches what a consumer derived from this event (the dispatcher: the event with its
    /// one shared wire encoding), so that later readers of the window (watchers catching up)
    /// reuse it instead of deriving it again. Held weakly: it is available while someone
    /// holds `value`. Replaces what was attached before.
    pub fn attach<T: Any + Send + Sync>(&self, value: &Arc<T>) {
        let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(value) as _;
        *self.derived.lock().unwrap_or_else(PoisonError::into_inner) = weak;
    }

    /// What was attached, if it is a `T` and still alive.
    pub fn derived<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.derived_weak().upgrade()?.downcast::<T>().ok()
    }

    /// What was attached if it is a `T` and still alive; otherwise `make`'s value, attached.
    /// Callers racing here get the same value (`make` runs under the event's lock, so it
    /// should be cheap: build a lazy form, not the bytes).
    pub fn derived_or_attach<T: Any + Send + Sync>(&self, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let mut slot = self.derived.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = slot.upgrade().and_then(|v| v.downcast::<T>().ok()) {
            return v;
        }
        let v = make();
        let weak: Weak<dyn Any + Send + Sync> = Arc::downgrade(&v) as _;
        *slot = weak;
        v
    }

    fn derived_weak(&self) -> Weak<dyn Any + Send + Sync> {
        self.derived
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

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

/// A run of consecutive window events, oldest first, sharing the window's storage: a view
/// of the window from a position (taking it costs a clone of the window's root, never a copy
/// of events or of the chunks they sit in, as splitting the window would).
#[derive(Debug, Clone, Default)]
pub struct Events {
    all: imbl::Vector<Arc<CacheEvent>>,
    start: usize,
}

impl Events {
    /// The events of `all` from index `start` on.
    pub(crate) fn new(all: imbl::Vector<Arc<CacheEvent>>, start: usize) -> Self {
        let start = start.min(all.len());
        Self { all, start }
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.all.len() - self.start
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The events, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Arc<CacheEvent>> + ExactSizeIterator {
        self.all.focus().narrow(self.start..).into_iter()
    }

    /// The event at `i` (0 is the oldest).
    pub fn get(&self, i: usize) -> Option<&Arc<CacheEvent>> {
        self.all.get(self.start.checked_add(i)?)
    }

    /// The oldest event.
    pub fn first(&self) -> Option<&Arc<CacheEvent>> {
        self.get(0)
    }

    /// The newest event.
    pub fn last(&self) -> Option<&Arc<CacheEvent>> {
        if self.is_empty() {
            None
        } else {
            self.all.back()
        }
    }

    /// Copies the `Arc`s into a `Vec`.
    pub fn to_vec(&self) -> Vec<Arc<CacheEvent>> {
        self.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use listwatch_api::SelectableFields;

    fn event() -> CacheEvent {
        let v = serde_json::json!({"metadata":{"name":"a","resourceVersion":"3"}});
        let o = Object::from_value(v, &SelectableFields::none()).unwrap();
        CacheEvent::new(EventType::Added, "/x/a".into(), o, None, Instant::now())
    }

    fn at(rv: u64) -> Arc<CacheEvent> {
        let v = serde_json::json!({"metadata":{"name":"a"}});
        let o = Object::from_value(v, &SelectableFields::none())
            .unwrap()
            .with_resource_version(rv);
        Arc::new(CacheEvent::new(
            EventType::Added,
            "/x/a".into(),
            o,
            None,
            Instant::now(),
        ))
    }

    #[test]
    fn events_from_a_position_read_the_window_from_there_without_copying_it() {
        // Larger than one chunk of the persistent vector, so that a split would copy one.
        let all: imbl::Vector<Arc<CacheEvent>> = (1..=200).map(at).collect();
        for start in [0, 1, 63, 64, 65, 150, 199, 200, 300] {
            let e = Events::new(all.clone(), start);
            let want: Vec<u64> = (1..=200u64).skip(start).collect();
            let got: Vec<u64> = e.iter().map(|ev| ev.resource_version).collect();
            assert_eq!(got, want, "from {start}");
            assert_eq!(e.len(), want.len());
            assert_eq!(e.is_empty(), want.is_empty());
            assert_eq!(
                e.first().map(|ev| ev.resource_version),
                want.first().copied()
            );
            assert_eq!(e.last().map(|ev| ev.resource_version), want.last().copied());
            assert_eq!(e.get(1).map(|ev| ev.resource_version), want.get(1).copied());
            let back: Vec<u64> = e.iter().rev().map(|ev| ev.resource_version).collect();
            assert_eq!(back, want.iter().rev().copied().collect::<Vec<_>>());
        }
        // The events are the window's own: no reference taken per event.
        assert_eq!(Arc::strong_count(&all[100]), 1);
        let e = Events::new(all.clone(), 100);
        assert_eq!(Arc::strong_count(&all[100]), 1);
        assert!(Arc::ptr_eq(e.first().unwrap(), &all[100]));
    }

    #[test]
    fn what_was_derived_is_shared_while_alive_then_derived_again() {
        let ev = event();
        assert!(ev.derived::<u32>().is_none());
        let a = ev.derived_or_attach(|| Arc::new(1u32));
        // Alive: every caller (and a clone of the event) gets the same value.
        let b = ev.derived_or_attach(|| Arc::new(2u32));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(Arc::ptr_eq(&ev.clone().derived::<u32>().unwrap(), &a));
        drop((a, b));
        // Gone: the next consumer derives it again, and that one is attached.
        assert!(ev.derived::<u32>().is_none());
        let c = ev.derived_or_attach(|| Arc::new(3u32));
        assert_eq!(*c, 3);
        assert_eq!(ev.derived::<u32>().as_deref(), Some(&3));
        // Attaching replaces.
        let d = Arc::new(4u32);
        ev.attach(&d);
        assert_eq!(ev.derived::<u32>().as_deref(), Some(&4));
    }
}
