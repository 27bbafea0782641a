//! The encodings kept for catch-up: the strong owner of recent events' dispatched forms.
//!
//! A window event refers to its dispatched form ([`Dispatched`]: its objects with one lazy
//! encoding per format, shared by every clone) only weakly, so that the window never grows
//! by it. This ring keeps the most recent forms alive, so that a watcher replaying the
//! window sends the bytes that the live fan-out, or an earlier replay, already built instead
//! of encoding the event again: each event is encoded at most once per format while its
//! form is here, however many watchers replay it and whether they replay it together or
//! one after another. The dispatcher keeps every event it fans out; a replaying watcher
//! keeps each form it had to rebuild (one whose form had left the ring).
//!
//! Invariants: the charge of what is kept ([`charge`]) stays within the budget, but for the
//! single newest form; forms leave oldest kept first; a relist of the cache empties the
//! ring. Nothing here encodes: the bytes are built by whoever sends the event first. The
//! lock is held to push or pop pointers only.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crate::dispatch::Dispatched;

/// A bounded ring of dispatched forms, oldest first.
pub(crate) struct Recent {
    budget: usize,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    forms: VecDeque<(Arc<Dispatched>, usize)>,
    charged: usize,
}

/// What keeping `d` may cost in bytes: the form itself, and its encodings once built, which
/// are counted as twice the stored size of its objects (the wire JSON, and room for the
/// smaller Table and metadata-only encodings beside it). Its objects' stored bytes are
/// shared with the window while the event is in it, and not counted.
fn charge(d: &Dispatched) -> usize {
    const FORM: usize = std::mem::size_of::<Dispatched>() + 128;
    let objects = d.object.size() + d.prev_at_rv.as_ref().map_or(0, |p| p.size());
    FORM + 2 * objects
}

impl Recent {
    /// An empty ring that keeps at most about `budget` bytes (see [`charge`]).
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            budget,
            kept: Mutex::default(),
        }
    }

    /// Keeps `forms` (newest last), dropping the oldest kept beyond the budget.
    pub(crate) fn keep(&self, forms: impl IntoIterator<Item = Arc<Dispatched>>) {
        let mut dropped = Vec::new();
        {
            let mut k = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            for d in forms {
                let c = charge(&d);
                k.charged += c;
                k.forms.push_back((d, c));
                while k.charged > self.budget && k.forms.len() > 1 {
                    if let Some((old, c)) = k.forms.pop_front() {
                        k.charged -= c;
                        dropped.push(old);
                    }
                }
            }
        }
        // Freed outside the lock.
        drop(dropped);
    }

    /// Forgets everything (the cache is relisted: no form can be replayed any more).
    pub(crate) fn clear(&self) {
        let old = std::mem::take(&mut *self.kept.lock().unwrap_or_else(PoisonError::into_inner));
        drop(old);
    }

    /// How many forms and how many charged bytes are kept.
    #[cfg(test)]
    fn usage(&self) -> (usize, usize) {
        let k = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        (k.forms.len(), k.charged)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use listwatch_api::{EventType, Object, SelectableFields};
    use listwatch_watchcache::CacheEvent;

    fn form(rv: u64, data: usize) -> Arc<Dispatched> {
        let v = serde_json::json!({"metadata":{"name":"a"},"data":{"k":"x".repeat(data)}});
        let o = Object::from_value(v, &SelectableFields::none())
            .unwrap()
            .with_resource_version(rv);
        let ev = CacheEvent::new(
            EventType::Added,
            "/configmaps/a".into(),
            o,
            None,
            std::time::Instant::now(),
        );
        Arc::new(Dispatched::new(&ev))
    }

    #[test]
    fn keeps_the_newest_within_the_budget() {
        let one = charge(&form(1, 1000));
        let recent = Recent::new(3 * one);
        recent.keep((1..=10).map(|rv| form(rv, 1000)));
        let (n, bytes) = recent.usage();
        assert_eq!((n, bytes), (3, 3 * one));
        let k = recent.kept.lock().unwrap();
        let rvs: Vec<u64> = k.forms.iter().map(|(d, _)| d.rv).collect();
        assert_eq!(rvs, [8, 9, 10]);
    }

    #[test]
    fn a_form_over_the_budget_is_kept_alone_and_clear_empties() {
        let recent = Recent::new(100);
        recent.keep([form(1, 10)]);
        recent.keep([form(2, 5000)]);
        assert_eq!(recent.usage().0, 1);
        recent.clear();
        assert_eq!(recent.usage(), (0, 0));
    }
}
