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
//! single newest form; the ring is in resource-version order and the oldest event's form
//! leaves first (so a replay that rebuilds forms of events older than the ring's cannot
//! evict the newer forms it and later replays are about to reuse: with a full budget those
//! rebuilt forms are simply not kept); a relist of the cache empties the ring. Nothing here
//! encodes: the bytes are built by whoever sends the event first. The lock is held to push
//! or pop pointers only.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crate::event::Dispatched;

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

    /// Keeps `forms` (in resource-version order), dropping the oldest events' forms beyond
    /// the budget. The ring stays ordered by resource version, and what leaves it first is
    /// always the oldest event's form: so a watcher replaying events older than everything
    /// kept (it rebuilt their forms) does not push out the newer forms it, and every later
    /// replay, is about to reuse — with a full budget its rebuilt forms are not kept (they
    /// are shared only while some replaying watcher holds them).
    pub(crate) fn keep(&self, forms: impl IntoIterator<Item = Arc<Dispatched>>) {
        let mut dropped = Vec::new();
        {
            let mut k = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            let mut older = Vec::new();
            for d in forms {
                let c = charge(&d);
                k.charged += c;
                match (k.forms.front(), k.forms.back()) {
                    (_, Some((last, _))) if last.rv < d.rv => k.forms.push_back((d, c)),
                    (None, None) => k.forms.push_back((d, c)),
                    (Some((first, _)), _) if d.rv < first.rv => older.push((d, c)),
                    _ => {
                        // Between kept forms (not met in practice: what left the ring is
                        // older than all that stayed); kept in order all the same.
                        let at = k.forms.partition_point(|(f, _)| f.rv < d.rv);
                        k.forms.insert(at, (d, c));
                    }
                }
            }
            // Below every kept form (a refill reads the window in order: already sorted).
            older.sort_by_key(|(d, _)| d.rv);
            for f in older.into_iter().rev() {
                k.forms.push_front(f);
            }
            while k.charged > self.budget && k.forms.len() > 1 {
                if let Some((old, c)) = k.forms.pop_front() {
                    k.charged -= c;
                    dropped.push(old);
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
    fn forms_rebuilt_for_older_events_never_push_out_newer_ones() {
        let one = charge(&form(1, 1000));
        let recent = Recent::new(3 * one);
        recent.keep((8..=10).map(|rv| form(rv, 1000)));
        // A replay rebuilt the forms of 1..=7 (older than everything kept): with the budget
        // full they are the first to go, the newest three stay. Before, the ring kept the
        // forms last handed to it, so each replay of old events evicted the forms of the
        // very events it was about to read next.
        recent.keep((1..=7).map(|rv| form(rv, 1000)));
        let rvs = |r: &Recent| -> Vec<u64> {
            let k = r.kept.lock().unwrap();
            k.forms.iter().map(|(d, _)| d.rv).collect()
        };
        assert_eq!(rvs(&recent), [8, 9, 10]);
        // With room, older forms are kept in order before the newer ones.
        let roomy = Recent::new(10 * one);
        roomy.keep((5..=7).map(|rv| form(rv, 1000)));
        roomy.keep((2..=3).map(|rv| form(rv, 1000)));
        roomy.keep([form(4, 1000)]);
        roomy.keep([form(9, 1000)]);
        assert_eq!(rvs(&roomy), [2, 3, 4, 5, 6, 7, 9]);
        assert_eq!(roomy.usage(), (7, 7 * one));
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
