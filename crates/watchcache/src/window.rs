//! The bounded, resizable window of recent events, with upstream's sizing rule.
//!
//! Invariants:
//! - events are in strictly increasing resource-version order, oldest first;
//! - `len() <= capacity`, and `min <= capacity <= max` except after a budget squeeze, which
//!   may leave fewer events than `min` (the capacity then stays at `min`);
//! - `evicted` is true exactly when an event has left the window since the last reset (the
//!   last relist): then the oldest event a watcher can be served from is the oldest buffered
//!   one, otherwise the one right after the list;
//! - `last_evicted_rv` is the resource version of the newest event that left the window since
//!   the last reset (0 when none did): every event after it is still buffered, so the state at
//!   any version from it on can be rebuilt from the state and the window.
//!
//! Sizing (upstream `resizeCacheLocked`), checked before each push, only when the window is
//! full: if its oldest event is younger than the freshness age, the capacity doubles (up to
//! `max`); else if the event at `len − capacity/4` is older than the freshness age, it halves
//! (down to `min`), dropping the oldest events beyond it. Then, still full, the oldest event
//! leaves to make room.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::event::CacheEvent;

/// What one push did to the window.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct PushOutcome {
    /// `(old, new)` capacity when it changed.
    pub(crate) resized: Option<(usize, usize)>,
    /// Events that left the window, oldest first.
    pub(crate) evicted: Vec<Arc<CacheEvent>>,
}

/// The window.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    /// The events, oldest first. A persistent vector so readers can hold a version cheaply.
    events: imbl::Vector<Arc<CacheEvent>>,
    /// Current capacity.
    capacity: usize,
    /// Whether an event was evicted since the last reset.
    evicted: bool,
    /// The newest evicted event's resource version since the last reset (0: none).
    last_evicted_rv: u64,
}

/// Window bounds and the freshness age, copied from the config.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizing {
    pub(crate) min: usize,
    pub(crate) max: usize,
    pub(crate) freshness: Duration,
}

impl Window {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            events: imbl::Vector::new(),
            capacity: capacity.max(1),
            evicted: false,
            last_evicted_rv: 0,
        }
    }

    pub(crate) fn events(&self) -> &imbl::Vector<Arc<CacheEvent>> {
        &self.events
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn len(&self) -> usize {
        self.events.len()
    }

    pub(crate) fn evicted(&self) -> bool {
        self.evicted
    }

    /// The newest evicted event's resource version since the last reset (0 when none).
    pub(crate) fn last_evicted_rv(&self) -> u64 {
        self.last_evicted_rv
    }

    /// How many buffered events have a resource version at or below `rv` (the index of the
    /// first event after `rv`).
    pub(crate) fn position_after(&self, rv: u64) -> usize {
        self.events
            .binary_search_by(|e| e.resource_version.cmp(&rv))
            .map_or_else(|i| i, |i| i + 1)
    }

    pub(crate) fn oldest(&self) -> Option<&Arc<CacheEvent>> {
        self.events.front()
    }

    /// Empties the window after a relist; the capacity stays.
    pub(crate) fn reset(&mut self) {
        self.events = imbl::Vector::new();
        self.evicted = false;
        self.last_evicted_rv = 0;
    }

    /// Appends an event received at `now`, resizing and evicting by the rule.
    pub(crate) fn push(
        &mut self,
        event: Arc<CacheEvent>,
        now: Instant,
        sizing: Sizing,
    ) -> PushOutcome {
        let mut out = PushOutcome::default();
        if self.is_full() {
            let age = |e: &Arc<CacheEvent>| now.saturating_duration_since(e.received_at);
            let old = self.capacity;
            let oldest_is_fresh = self
                .events
                .front()
                .is_some_and(|e| age(e) < sizing.freshness);
            if oldest_is_fresh {
                self.capacity = (old * 2).min(sizing.max).max(old);
            } else {
                // Upstream indexes its ring at `end − capacity/4`; with a capacity under 4
                // that wraps to the oldest event, hence the modulo.
                let quarter_back = (self.events.len() - old / 4) % old.max(1);
                if self
                    .events
                    .get(quarter_back)
                    .is_some_and(|e| age(e) > sizing.freshness)
                {
                    self.capacity = (old / 2).max(sizing.min).min(old);
                }
            }
            if self.capacity != old {
                out.resized = Some((old, self.capacity));
            }
        }
        while self.events.len() >= self.capacity {
            out.evicted.extend(self.pop_oldest());
        }
        self.events.push_back(event);
        out
    }

    /// Removes the oldest event (for a budget squeeze, or when full).
    pub(crate) fn pop_oldest(&mut self) -> Option<Arc<CacheEvent>> {
        let e = self.events.pop_front()?;
        self.evicted = true;
        self.last_evicted_rv = e.resource_version;
        Some(e)
    }

    /// Lowers the capacity after a budget squeeze, never under `min` nor under the length.
    pub(crate) fn shrink_to_fit(&mut self, min: usize) -> Option<(usize, usize)> {
        let old = self.capacity;
        self.capacity = self.events.len().max(min).min(old).max(1);
        (self.capacity != old).then_some((old, self.capacity))
    }

    fn is_full(&self) -> bool {
        self.events.len() >= self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::{EventType, Object, SelectableFields};

    fn ev(rv: u64, at: Instant) -> Arc<CacheEvent> {
        let o = Object::from_json(br#"{"metadata":{"name":"a"}}"#, &SelectableFields::none())
            .unwrap()
            .with_resource_version(rv);
        Arc::new(CacheEvent::new(
            EventType::Added,
            "/x/a".into(),
            o,
            None,
            at,
        ))
    }

    const SIZING: Sizing = Sizing {
        min: 4,
        max: 16,
        freshness: Duration::from_secs(75),
    };

    #[test]
    fn a_full_window_of_fresh_events_doubles_up_to_the_bound() {
        let t0 = Instant::now();
        let mut w = Window::new(4);
        let mut caps = Vec::new();
        for rv in 1..=40 {
            w.push(ev(rv, t0), t0, SIZING);
            caps.push(w.capacity());
        }
        assert_eq!(caps[..4], [4, 4, 4, 4]);
        assert_eq!(caps[4], 8, "the fifth push finds the window full and fresh");
        assert_eq!(w.capacity(), 16);
        assert_eq!(w.len(), 16);
        assert!(w.evicted());
        assert_eq!(w.oldest().map(|e| e.resource_version), Some(25));
        assert_eq!(w.last_evicted_rv(), 24);
        assert_eq!(w.position_after(24), 0);
        assert_eq!(w.position_after(30), 6);
        assert_eq!(w.position_after(99), 16);
    }

    #[test]
    fn a_full_window_of_stale_events_halves_down_to_the_bound() {
        let t0 = Instant::now();
        let mut w = Window::new(16);
        for rv in 1..=16 {
            w.push(ev(rv, t0), t0, SIZING);
        }
        let later = t0 + Duration::from_secs(76);
        let out = w.push(ev(17, later), later, SIZING);
        assert_eq!(out.resized, Some((16, 8)));
        assert_eq!(
            out.evicted.len(),
            9,
            "down to 8, then one more to make room"
        );
        assert_eq!(w.len(), 8);
        assert_eq!(w.oldest().map(|e| e.resource_version), Some(10));
    }

    #[test]
    fn the_quarter_back_event_decides_the_shrink() {
        let t0 = Instant::now();
        let mut w = Window::new(8);
        // Six stale events, then two fresh ones: the event at len − cap/4 = 6 is fresh.
        for rv in 1..=6 {
            w.push(ev(rv, t0), t0, SIZING);
        }
        let t1 = t0 + Duration::from_secs(80);
        for rv in 7..=8 {
            w.push(ev(rv, t1), t1, SIZING);
        }
        let out = w.push(ev(9, t1), t1, SIZING);
        assert_eq!(
            out.resized, None,
            "neither fresh at the front nor stale at the quarter"
        );
        assert_eq!(out.evicted.len(), 1);
        assert_eq!(w.capacity(), 8);
    }

    #[test]
    fn exactly_the_freshness_age_neither_grows_nor_shrinks() {
        let t0 = Instant::now();
        let mut w = Window::new(4);
        for rv in 1..=4 {
            w.push(ev(rv, t0), t0, SIZING);
        }
        let t1 = t0 + SIZING.freshness;
        let out = w.push(ev(5, t1), t1, SIZING);
        assert_eq!(out.resized, None);
        assert_eq!(w.capacity(), 4);
    }

    #[test]
    fn reset_forgets_evictions_but_keeps_capacity() {
        let t0 = Instant::now();
        let mut w = Window::new(4);
        for rv in 1..=10 {
            w.push(ev(rv, t0), t0, SIZING);
        }
        let cap = w.capacity();
        w.reset();
        assert!(!w.evicted());
        assert_eq!(w.last_evicted_rv(), 0);
        assert_eq!(w.len(), 0);
        assert_eq!(w.capacity(), cap);
    }
}
