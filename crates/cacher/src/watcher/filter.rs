//! A watcher's filter: which events concern one watcher, and as what. Evaluated on the
//! watcher's own task, never on the dispatcher's.
//!
//! The dispatcher chooses the candidates of an event from the registry's indexes only
//! (scope and trigger value, see `registry`) and queues the shared event to each without
//! looking at its selectors, O(1) per candidate; the watcher applies its label and field
//! selectors here when its stream takes the event from its buffer. This is upstream's split
//! (the cacher's `dispatchEvent` picks watchers by trigger and does a non-blocking add; each
//! `cacheWatcher`'s goroutine filters in `convertToWatchEvent`): a selector, however costly,
//! spends its own consumer's time and cannot delay any other watcher's delivery.
//!
//! For a watcher, a `Modified` that brings the object into its selection is `Added`, one that
//! takes it out is `Deleted` (of the previous content at the event's version), and one that
//! neither the old nor the new state matches is nothing.
//!
//! The cost of the split (as upstream's): a watcher's buffer also holds the candidate events
//! its selector rejects until its consumer next polls. The watcher drops those as fast as it
//! pops them, so a consumer that keeps reading never fills its buffer with them; one that
//! stops reading for as long as it takes `capacity` candidate events to arrive is detached as
//! slow and catches up from the window by itself (filtering there), or gets 410 Expired if it
//! fell out of the window — never a silent gap.
//!
//! Invariants: nothing here runs under a lock the dispatcher takes; the result depends only
//! on the event and the watcher's predicate.

use listwatch_api::{EventType, Object};
use listwatch_storage::SelectionPredicate;

use crate::watcher::spec::Spec;

/// What an event of `event_type` changing `prev` into `object` is for a watcher with `pred`:
/// a `Modified` that enters or leaves its selection is `Added` or `Deleted` for it.
pub(crate) fn event_type_for(
    event_type: EventType,
    object: &Object,
    prev: Option<&Object>,
    pred: &SelectionPredicate,
) -> Option<EventType> {
    match event_type {
        EventType::Added | EventType::Deleted => pred.matches(object).then_some(event_type),
        _ => {
            let cur = pred.matches(object);
            let old = prev.is_some_and(|p| pred.matches(p));
            match (cur, old) {
                (true, true) => Some(EventType::Modified),
                (true, false) => Some(EventType::Added),
                (false, true) => Some(EventType::Deleted),
                (false, false) => None,
            }
        }
    }
}

/// Filters of at most this many label requirements and field terms count as quick.
const QUICK_FILTER: usize = 4;

/// Whether `pred` is quick to evaluate (at most [`QUICK_FILTER`] requirements and terms):
/// the dispatcher wakes such watchers first. O(1).
pub(crate) fn is_quick(pred: &SelectionPredicate) -> bool {
    pred.label.requirements().len() + pred.field.terms().len() <= QUICK_FILTER
}

impl Spec {
    /// What an event is for this watcher, if anything (see [`event_type_for`]).
    pub(crate) fn event_type_for(
        &self,
        event_type: EventType,
        object: &Object,
        prev: Option<&Object>,
    ) -> Option<EventType> {
        #[cfg(test)]
        if let Some(hook) = &self.filter_hook {
            hook(object);
        }
        event_type_for(event_type, object, prev, &self.predicate)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Condvar, Mutex};
    use std::time::Duration;

    use futures::StreamExt;
    use listwatch_api::{Object, SelectableFields};
    use listwatch_memstore::MemStore;
    use listwatch_storage::{Key, ListOptions, Storage, WatchEvent, WatchStream};

    use crate::watcher::{self, Spec, Start};
    use crate::{Cacher, CacherConfig};

    use crate::watcher::spec::FilterHook;

    /// Generous enough only to avoid hanging when something is wrong.
    const DEADLINE: Duration = Duration::from_secs(20);

    fn pod(name: &str, app: &str) -> Object {
        let v = serde_json::json!({"kind":"Pod","metadata":{"name":name,"namespace":"ns",
            "labels":{"app":app}},"spec":{"nodeName":"n1"}});
        Object::from_value(v, &SelectableFields::new(["spec.nodeName"]))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    async fn create(c: &Cacher, o: Object) -> u64 {
        let key = Key::object("pods", o.namespace(), o.name()).unwrap_or_else(|e| panic!("{e}"));
        match c.create(&key, o, None).await {
            Ok(o) => o.resource_version(),
            Err(e) => panic!("create: {e}"),
        }
    }

    /// A gate that blocks every caller until opened, or until three deadlines have passed
    /// (then it remembers that it gave up: the test must not count what happened after).
    #[derive(Default)]
    struct Gate {
        open: Mutex<bool>,
        cv: Condvar,
        gave_up: AtomicBool,
    }

    impl Gate {
        fn wait(&self) {
            let open = self
                .open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (_open, waited) = self
                .cv
                .wait_timeout_while(open, 3 * DEADLINE, |open| !*open)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if waited.timed_out() {
                self.gave_up.store(true, Ordering::SeqCst);
            }
        }
        fn open(&self) {
            *self
                .open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
            self.cv.notify_all();
        }
    }

    /// Opens the gate when dropped, so that a failing test never leaves a thread blocked.
    struct OpenOnDrop(Arc<Gate>);
    impl Drop for OpenOnDrop {
        fn drop(&mut self) {
            self.0.open();
        }
    }

    fn watch(c: &Cacher, from: u64, label: &str, hook: Option<FilterHook>) -> WatchStream {
        let key = Key::collection("pods", Some("ns")).unwrap_or_else(|e| panic!("{e}"));
        let opts = ListOptions {
            resource_version: Some(from),
            ..ListOptions::recursive()
        };
        let predicate = listwatch_storage::SelectionPredicate {
            label: label.parse().unwrap_or_else(|e| panic!("{e}")),
            ..opts.predicate.clone()
        };
        let spec = Spec {
            key: key.clone(),
            scope: watcher::scope_of(&key, &predicate),
            predicate,
            trigger: None,
            allow_bookmarks: false,
            progress_notify: false,
            deadline: None,
            filter_hook: hook,
        };
        watcher::open(Arc::clone(&c.inner), spec, Start::Since(from))
            .unwrap_or_else(|e| panic!("watch: {e}"))
    }

    async fn next(w: &mut WatchStream, what: &str) -> WatchEvent {
        match tokio::time::timeout(DEADLINE, w.next()).await {
            Ok(Some(ev)) => ev,
            Ok(None) => panic!("{what}: the watch ended"),
            Err(_) => panic!("{what}: nothing arrived"),
        }
    }

    fn added_name(ev: &WatchEvent) -> String {
        match ev {
            WatchEvent::Added(o) => o.name().to_owned(),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }

    /// Issue 24 ("selectors on the dispatcher's path"): one watcher's filter, blocked
    /// outright, must not hold up another watcher's events. Shown by causality: the
    /// expensive filter is blocked (it has signalled that it entered and is never released
    /// until the end) while the cheap watcher receives two events.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_blocked_filter_does_not_delay_another_watchers_delivery() {
        let store = Arc::new(MemStore::new());
        let cacher = Cacher::new(store, CacherConfig::new("pods"));
        cacher.wait_ready().await;
        let start = create(&cacher, pod("seed", "db")).await;

        let gate = Arc::new(Gate::default());
        let _open = OpenOnDrop(Arc::clone(&gate));
        let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
        let hook: FilterHook = {
            let gate = Arc::clone(&gate);
            Arc::new(move |o: &Object| {
                // The seed may still be on its way to the dispatcher when the watchers
                // register; only the events under test count.
                if o.name() == "seed" {
                    return;
                }
                let _ = entered_tx.send(o.name().to_owned());
                gate.wait();
            })
        };
        let mut expensive = watch(&cacher, start, "app=web", Some(hook));
        let mut cheap = watch(&cacher, start, "app=web", None);
        // The expensive watcher's consumer polls (and so filters) on its own task.
        let expensive_task = tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..2 {
                got.push(added_name(&next(&mut expensive, "expensive watcher").await));
            }
            got
        });

        create(&cacher, pod("a", "web")).await;
        let entered_for = tokio::time::timeout(DEADLINE, entered.recv()).await;
        assert_eq!(
            entered_for.ok().flatten().as_deref(),
            Some("a"),
            "the expensive filter never ran"
        );
        create(&cacher, pod("b", "web")).await;
        // The expensive filter is still blocked on the first event: the cheap watcher must
        // have both anyway.
        let first = tokio::time::timeout(DEADLINE, cheap.next()).await;
        let second = match first {
            Ok(Some(ev)) => {
                assert_eq!(added_name(&ev), "a");
                tokio::time::timeout(DEADLINE, cheap.next()).await
            }
            other => other,
        };
        let second = match second {
            Ok(Some(ev)) => ev,
            _ => panic!(
                "the cheap watcher did not get its events while another watcher's filter was \
                 blocked: filtering holds up the dispatcher"
            ),
        };
        assert_eq!(added_name(&second), "b");
        assert!(
            !gate.gave_up.load(Ordering::SeqCst),
            "the blocked filter gave up before the cheap watcher had its events"
        );

        gate.open();
        let got = match tokio::time::timeout(DEADLINE, expensive_task).await {
            Ok(Ok(got)) => got,
            other => panic!("the expensive watcher did not finish: {other:?}"),
        };
        assert_eq!(
            got,
            ["a", "b"],
            "the expensive watcher still gets everything, in order"
        );
    }

    /// The cost of filtering on the watcher's task: rejected events fill the buffer of a
    /// watcher that is not read. Such a watcher is detached as slow and catches up from the
    /// window by itself, so it still gets exactly the events its selector takes, in order,
    /// and keeps getting them live afterwards.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unread_watcher_full_of_rejected_events_resumes_with_exactly_its_own() {
        let cacher = Cacher::new(Arc::new(MemStore::new()), CacherConfig::new("pods"));
        cacher.wait_ready().await;
        let start = create(&cacher, pod("seed", "db")).await;
        let mut w = watch(&cacher, start, "app=web", None);
        // Far more rejected candidates than any watcher buffer holds (at most 1 000).
        for i in 0..1_500 {
            create(&cacher, pod(&format!("db-{i}"), "db")).await;
        }
        create(&cacher, pod("web-1", "web")).await;
        assert_eq!(
            added_name(&next(&mut w, "after the backlog").await),
            "web-1"
        );
        create(&cacher, pod("db-last", "db")).await;
        create(&cacher, pod("web-2", "web")).await;
        assert_eq!(added_name(&next(&mut w, "live again").await), "web-2");
    }
}
