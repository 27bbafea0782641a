//! Predicates: which updates reach a handler (controller-runtime's `predicate` package,
//! kube-runtime's `predicates`), so a controller is not woken by its own status writes or by
//! resyncs that changed nothing it reads.
//!
//! [`Filtered`] keeps a handler to the objects passing a predicate (an update across the
//! selection is an add or a delete). [`OnChange`] wraps an [`EventHandler`]: adds and deletes always pass; an update passes
//! only when its predicate says the object changed in a way the handler cares about.
//! [`changed_by`] builds the usual predicates from a projection of the object (its
//! `metadata.generation`, its labels, …). Invariant: a handler behind `OnChange` sees every
//! key appear and disappear, so a store or queue it feeds never misses a key; it only misses
//! updates the predicate ruled out.

use std::sync::Arc;

use crate::informer::EventHandler;

/// A handler that only sees objects passing a predicate (client-go's
/// `FilteringResourceEventHandler`): an update into the selection is an add, an update out
/// of it a delete.
pub struct Filtered<H, F> {
    handler: H,
    filter: F,
}

impl<H, F> Filtered<H, F> {
    /// Wraps `handler` with `filter`.
    pub fn new(handler: H, filter: F) -> Self {
        Self { handler, filter }
    }
}

impl<K, H, F> EventHandler<K> for Filtered<H, F>
where
    H: EventHandler<K>,
    F: Fn(&K) -> bool + Send + 'static,
{
    fn on_add(&mut self, object: &Arc<K>, in_initial_list: bool) {
        if (self.filter)(object) {
            self.handler.on_add(object, in_initial_list);
        }
    }
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        match ((self.filter)(old), (self.filter)(new)) {
            (true, true) => self.handler.on_update(old, new),
            (false, true) => self.handler.on_add(new, false),
            (true, false) => self.handler.on_delete(old, false),
            (false, false) => {}
        }
    }
    fn on_delete(&mut self, object: &Arc<K>, final_state_unknown: bool) {
        if (self.filter)(object) {
            self.handler.on_delete(object, final_state_unknown);
        }
    }
}

/// A handler that is told of an update only when `changed(old, new)` holds (adds and
/// deletes always).
///
/// ```
/// use listwatch_runtime::predicate::{OnChange, changed_by};
/// use listwatch_runtime::{Controller, ObjectKey, Resource};
/// use listwatch_api::Object;
///
/// let controller = Controller::default();
/// // Reconcile when the labels change, not on every status write (with k8s-openapi types,
/// // `changed_by(|d: &Deployment| d.metadata.generation)` for spec changes).
/// let handler = OnChange::new(
///     controller.enqueue(|o: &Object| Some(o.key())),
///     changed_by(|o: &Object| o.labels().clone()),
/// );
/// # let _ = handler;
/// ```
pub struct OnChange<H, P> {
    handler: H,
    changed: P,
}

impl<H, P> OnChange<H, P> {
    /// Wraps `handler` with the update predicate `changed`.
    pub fn new(handler: H, changed: P) -> Self {
        Self { handler, changed }
    }
}

impl<K, H, P> EventHandler<K> for OnChange<H, P>
where
    H: EventHandler<K>,
    P: Fn(&K, &K) -> bool + Send + 'static,
{
    fn on_add(&mut self, object: &Arc<K>, in_initial_list: bool) {
        self.handler.on_add(object, in_initial_list);
    }
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        if (self.changed)(old, new) {
            self.handler.on_update(old, new);
        }
    }
    fn on_delete(&mut self, object: &Arc<K>, final_state_unknown: bool) {
        self.handler.on_delete(object, final_state_unknown);
    }
}

/// The predicate "`project` gives another value": `changed_by(|o| o.generation())` is
/// controller-runtime's `GenerationChangedPredicate`, `changed_by(|o| o.labels().clone())`
/// its `LabelChangedPredicate`. A resync (old and new the same object) never passes.
pub fn changed_by<K, T, F>(project: F) -> impl Fn(&K, &K) -> bool + Send + 'static
where
    T: PartialEq,
    F: Fn(&K) -> T + Send + 'static,
{
    move |old, new| project(old) != project(new)
}

/// Either predicate holds (a handler that wants spec changes or label changes).
pub fn either<K, A, B>(a: A, b: B) -> impl Fn(&K, &K) -> bool + Send + 'static
where
    A: Fn(&K, &K) -> bool + Send + 'static,
    B: Fn(&K, &K) -> bool + Send + 'static,
{
    move |old, new| a(old, new) || b(old, new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Clone)]
    struct Obj {
        generation: i64,
        label: &'static str,
        status: u32,
    }

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl EventHandler<Obj> for Seen {
        fn on_add(&mut self, o: &Arc<Obj>, _: bool) {
            self.0.lock().unwrap().push(format!("add {}", o.generation));
        }
        fn on_update(&mut self, _: &Arc<Obj>, new: &Arc<Obj>) {
            self.0
                .lock()
                .unwrap()
                .push(format!("update {} {}", new.generation, new.label));
        }
        fn on_delete(&mut self, o: &Arc<Obj>, _: bool) {
            self.0
                .lock()
                .unwrap()
                .push(format!("delete {}", o.generation));
        }
    }

    #[test]
    fn only_updates_the_predicate_passes_reach_the_handler() {
        let seen = Seen::default();
        let mut h = OnChange::new(
            seen.clone(),
            either(
                changed_by(|o: &Obj| o.generation),
                changed_by(|o: &Obj| o.label),
            ),
        );
        let v1 = Arc::new(Obj {
            generation: 1,
            label: "a",
            status: 0,
        });
        let status_only = Arc::new(Obj {
            status: 1,
            ..(*v1).clone()
        });
        let spec = Arc::new(Obj {
            generation: 2,
            ..(*status_only).clone()
        });
        let relabeled = Arc::new(Obj {
            label: "b",
            ..(*spec).clone()
        });
        h.on_add(&v1, true);
        h.on_update(&v1, &status_only);
        h.on_update(&status_only, &status_only);
        h.on_update(&status_only, &spec);
        h.on_update(&spec, &relabeled);
        h.on_delete(&relabeled, false);
        assert_eq!(
            *seen.0.lock().unwrap(),
            ["add 1", "update 2 a", "update 2 b", "delete 2"]
        );
        assert_eq!(relabeled.status, 1);
    }
}
