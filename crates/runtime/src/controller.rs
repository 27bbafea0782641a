//! [`Controller`]: a reconcile loop over informers and a [`WorkQueue`] (client-go's
//! controller pattern; kube-runtime's `Controller`).
//!
//! Informer handlers ([`Controller::enqueue`]) turn changes into keys; `workers` tasks take
//! keys from the queue and call the reconcile function with each. Invariants:
//! - a key is never reconciled by two workers at once and is reconciled again after any
//!   change seen while it was being reconciled (the queue's rules);
//! - an `Err` (or a panic, whether the reconcile function panics while building its future
//!   or the future panics while running: controller-runtime's `RecoverPanic`) requeues the key with the per-key exponential backoff and the
//!   overall token bucket; `Ok(Action::RequeueAfter(d))` forgets the failures and requeues
//!   after `d`; `Ok(Action::Done)` forgets them;
//! - shutdown stops this run's workers from taking keys (a backlog of thousands of keys does
//!   not delay it) and waits, at most a deadline, for the reconciles in flight only. The
//!   queue itself is not shut down: the backlog, delayed keys and keys added after the stop
//!   wait in it, so a later `run` over the same controller (the next leadership term)
//!   reconciles them — a graceful stop is never a silent end of the controller;
//! - **a cancelled reconcile strands no key**: dropping the future of [`Controller::run`]
//!   (as a [`LeaderElector`](crate::LeaderElector) does when its lease is lost), aborting it
//!   at the drain deadline or a panic hands each key being reconciled back to the queue, so
//!   the next `run` over the same controller (after re-election) reconciles it again;
//! - **a panic never kills a worker**: it is caught, logged, counted
//!   ([`Controller::panics`]) and the key requeued with backoff, so one bad key cannot take
//!   every worker down (which would leave `run` waiting for its shutdown, reconciling
//!   nothing).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;

use crate::informer::EventHandler;
use crate::resource::{ObjectKey, Resource};
use crate::store::Store;
use crate::workqueue::WorkQueue;

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the next change.
    Done,
    /// Reconcile again after this long (periodic checks), even without a change.
    RequeueAfter(Duration),
}

/// A reconcile loop: a work queue of [`ObjectKey`]s and the workers that drain it.
#[derive(Clone)]
pub struct Controller {
    queue: WorkQueue<ObjectKey>,
    /// Reconciles that panicked (shared by the clones).
    panics: Arc<AtomicU64>,
}

impl Default for Controller {
    fn default() -> Self {
        Self::new(WorkQueue::default())
    }
}

/// An [`EventHandler`] that queues the keys `map` gives for each changed object.
pub struct Enqueue<F> {
    queue: WorkQueue<ObjectKey>,
    map: F,
}

impl<K, F> EventHandler<K> for Enqueue<F>
where
    K: Resource,
    F: Fn(&K) -> Option<ObjectKey> + Send + 'static,
{
    fn on_add(&mut self, object: &Arc<K>, _in_initial_list: bool) {
        if let Some(k) = (self.map)(object) {
            self.queue.add(k);
        }
    }
    fn on_update(&mut self, _old: &Arc<K>, new: &Arc<K>) {
        if let Some(k) = (self.map)(new) {
            self.queue.add(k);
        }
    }
    fn on_delete(&mut self, object: &Arc<K>, _final_state_unknown: bool) {
        if let Some(k) = (self.map)(object) {
            self.queue.add(k);
        }
    }
}

impl Controller {
    /// A controller over `queue` (e.g. one with other [`RateLimits`](crate::RateLimits)).
    pub fn new(queue: WorkQueue<ObjectKey>) -> Self {
        Self {
            queue,
            panics: Arc::default(),
        }
    }

    /// How many reconciles panicked so far (in any `run` of this controller or its clones);
    /// each was caught and its key requeued with backoff.
    pub fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// The work queue (to add keys from elsewhere).
    pub fn queue(&self) -> &WorkQueue<ObjectKey> {
        &self.queue
    }

    /// A handler for an informer whose changes queue the key `map` returns: the object's
    /// own key for the primary resource, its owner's for a secondary one.
    pub fn enqueue<K, F>(&self, map: F) -> Enqueue<F>
    where
        K: Resource,
        F: Fn(&K) -> Option<ObjectKey> + Send + 'static,
    {
        Enqueue {
            queue: self.queue.clone(),
            map,
        }
    }

    /// [`run`](Self::run) with a reconcile that receives the object: the primary resource's
    /// current state from `store` (`None` when it is gone: clean up), read when the key is
    /// handed out, so a reconcile never acts on a state older than the store's.
    ///
    /// Every key of `store` is queued when it starts, so each start — the first, and every
    /// one after a [`LeaderElector`](crate::LeaderElector) re-election — reconciles every
    /// object again, as a controller-runtime or kube-runtime controller does from its
    /// informer's initial list (what another leader did meanwhile is not assumed).
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use listwatch_api::Object;
    /// use listwatch_runtime::{Action, Controller, ObjectKey, Store};
    /// # async fn demo(store: Store<Object>) {
    /// let controller = Controller::default();
    /// controller
    ///     .run_with_objects(store, 2, |key: ObjectKey, object: Option<Arc<Object>>| async move {
    ///         match object {
    ///             Some(o) => println!("reconcile {} at {}", key, o.resource_version()),
    ///             None => println!("{key} is gone"),
    ///         }
    ///         Ok::<_, String>(Action::Done)
    ///     }, std::future::pending::<()>(), std::time::Duration::from_secs(10))
    ///     .await;
    /// # }
    /// ```
    pub async fn run_with_objects<K, R, Fut, E>(
        self,
        store: Store<K>,
        workers: usize,
        reconcile: R,
        shutdown: impl Future<Output = ()>,
        drain: Duration,
    ) -> bool
    where
        K: Resource,
        R: Fn(ObjectKey, Option<Arc<K>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        for key in store.keys() {
            self.queue.add(key);
        }
        self.run(
            workers,
            move |key: ObjectKey| {
                let object = store.get(&key);
                reconcile(key, object)
            },
            shutdown,
            drain,
        )
        .await
    }

    /// Runs `workers` workers calling `reconcile` until `shutdown` resolves, then stops them
    /// taking keys and waits at most `drain` for the reconciles in flight (those still running
    /// then are cancelled and their keys handed back); returns whether they all finished.
    /// The keys still waiting stay in the queue, and keys added afterwards are kept: a later
    /// `run` of a clone of this controller reconciles them. Only
    /// [`WorkQueue::shut_down`] on [`queue`](Self::queue) ends the controller for good.
    ///
    /// # Cancel safety
    /// Dropping the returned future cancels the reconciles in flight; their keys go back to
    /// the queue, and a later `run` of a clone of this controller reconciles them.
    pub async fn run<R, Fut, E>(
        self,
        workers: usize,
        reconcile: R,
        shutdown: impl Future<Output = ()>,
        drain: Duration,
    ) -> bool
    where
        R: Fn(ObjectKey) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let reconcile = Arc::new(reconcile);
        // This run's stop signal: the queue is shared with later runs and not shut down.
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..workers.max(1) {
            let queue = self.queue.clone();
            let panics = Arc::clone(&self.panics);
            let reconcile = Arc::clone(&reconcile);
            let mut stopped = stopped.clone();
            tasks.spawn(async move {
                loop {
                    // `get_guarded` takes a key only when it returns it, so dropping it for
                    // the stop loses none.
                    let taken = tokio::select! {
                        biased;
                        _ = stopped.wait_for(|s| *s) => break,
                        taken = queue.get_guarded() => taken,
                    };
                    let Some(taken) = taken else { break };
                    // The guard hands the key back if this task is aborted mid-reconcile.
                    let key = taken.key().clone();
                    // Both the call (a closure that panics before it returns its future) and
                    // the future are guarded: an unguarded panic would kill this worker.
                    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        reconcile(key.clone())
                    }));
                    let outcome = match built {
                        Ok(fut) => std::panic::AssertUnwindSafe(fut).catch_unwind().await,
                        Err(p) => Err(p),
                    };
                    match outcome {
                        Ok(Ok(Action::Done)) => queue.forget(&key),
                        Ok(Ok(Action::RequeueAfter(d))) => {
                            queue.forget(&key);
                            queue.add_after(key.clone(), d);
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(key = %key.as_str(), error = %e, requeues = queue.num_requeues(&key), "reconcile failed, requeued with backoff");
                            queue.add_rate_limited(key.clone());
                        }
                        Err(p) => {
                            panics.fetch_add(1, Ordering::Relaxed);
                            let message = crate::informer_error::panic_message(p.as_ref());
                            tracing::error!(key = %key.as_str(), panic = %message, "reconcile panicked, requeued with backoff");
                            queue.add_rate_limited(key.clone());
                        }
                    }
                    taken.done();
                }
            });
        }
        // Dropping `tasks` (this future dropped) aborts the workers: their guards requeue.
        shutdown.await;
        stop.send_replace(true);
        let drained =
            tokio::time::timeout(drain, async { while tasks.join_next().await.is_some() {} })
                .await
                .is_ok();
        if !drained {
            // Their guards hand the keys back to the queue for the next run.
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
        }
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicI32, Ordering};

    /// Dropping `run` mid-reconcile (a lost lease) must not strand the key: the next `run`
    /// reconciles it again.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_run_hands_its_keys_to_the_next_run() {
        let c = Controller::default();
        c.queue().add(ObjectKey::new(Some("ns"), "a"));
        let calls = Arc::new(AtomicI32::new(0));
        let seen = Arc::clone(&calls);
        let hanging = c.clone().run(
            1,
            move |_key: ObjectKey| {
                seen.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<Result<Action, String>>()
            },
            std::future::pending::<()>(),
            Duration::from_secs(5),
        );
        // The first run takes the key and hangs in its reconcile; then it is dropped.
        let _ = tokio::time::timeout(Duration::from_secs(1), hanging).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        tokio::task::yield_now().await;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(c.clone().run(
            1,
            move |key: ObjectKey| {
                let tx = tx.clone();
                async move {
                    tx.send(key.as_str().to_owned()).ok();
                    Ok::<_, String>(Action::Done)
                }
            },
            async move {
                stopped.await.ok();
            },
            Duration::from_secs(5),
        ));
        let mut rx = rx;
        let again = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await;
        assert_eq!(
            again.ok().flatten().as_deref(),
            Some("ns/a"),
            "the key of the dropped run was never reconciled again"
        );
        stop.send(()).ok();
        assert!(run.await.unwrap());
    }

    /// The reconcile receives the store's current object, or `None` for a key that is gone.
    #[tokio::test(start_paused = true)]
    async fn run_with_objects_hands_the_current_object_or_none() {
        use crate::reflector::Event;
        use listwatch_api::{Object, SelectableFields};
        let mut writer = crate::store::Writer::<Object>::default();
        let store = writer.store();
        let o = Object::from_json(
            br#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}"#,
            &SelectableFields::none(),
        )
        .unwrap();
        writer.apply(Event::Init);
        writer.apply(Event::InitApply(o));
        writer.apply(Event::InitDone {
            resource_version: "7".into(),
        });
        let c = Controller::default();
        c.queue().add(ObjectKey::new(Some("ns"), "a"));
        c.queue().add(ObjectKey::new(Some("ns"), "gone"));
        type Seen = Vec<(String, Option<String>)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let s = Arc::clone(&seen);
        let ran = c
            .clone()
            .run_with_objects(
                store,
                1,
                move |key: ObjectKey, object: Option<Arc<Object>>| {
                    s.lock().unwrap().push((
                        key.as_str().to_owned(),
                        object.map(|o| Resource::resource_version(&*o).into_owned()),
                    ));
                    async { Ok::<_, String>(Action::Done) }
                },
                tokio::time::sleep(Duration::from_secs(1)),
                Duration::from_secs(5),
            )
            .await;
        assert!(ran);
        assert_eq!(
            *seen.lock().unwrap(),
            [
                ("ns/a".to_owned(), Some("7".to_owned())),
                ("ns/gone".to_owned(), None)
            ]
        );
    }

    /// Shutdown waits for the reconciles in flight, not for the whole backlog.
    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_the_reconciles_in_flight_not_the_backlog() {
        let c = Controller::default();
        for i in 0..100 {
            c.queue().add(ObjectKey::new(None, &format!("k{i}")));
        }
        let calls = Arc::new(AtomicI32::new(0));
        let seen = Arc::clone(&calls);
        let run = c.clone().run(
            1,
            move |_key: ObjectKey| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, String>(Action::Done)
                }
            },
            tokio::time::sleep(Duration::from_millis(2500)),
            Duration::from_secs(600),
        );
        assert!(run.await, "the reconcile in flight finished");
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "reconciles after the shutdown signal (backlog drained)"
        );
    }

    /// A graceful stop leaves the backlog and the delayed keys in the queue: the next run
    /// (the next leadership term) reconciles them, and keys added in between.
    #[tokio::test(start_paused = true)]
    async fn a_graceful_stop_keeps_the_backlog_for_the_next_run() {
        let c = Controller::default();
        for i in 0..3 {
            c.queue().add(ObjectKey::new(None, &format!("k{i}")));
        }
        c.queue()
            .add_after(ObjectKey::new(None, "later"), Duration::from_secs(30));
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let reconcile = |seen: Arc<Mutex<Vec<String>>>| {
            move |key: ObjectKey| {
                seen.lock().unwrap().push(key.as_str().to_owned());
                async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, String>(Action::Done)
                }
            }
        };
        let first = c.clone().run(
            1,
            reconcile(Arc::clone(&seen)),
            tokio::time::sleep(Duration::from_millis(1500)),
            Duration::from_secs(60),
        );
        assert!(first.await);
        assert_eq!(
            *seen.lock().unwrap(),
            ["k0", "k1"],
            "k1 was in flight at the stop"
        );
        c.queue().add(ObjectKey::new(None, "between"));
        let second = c.clone().run(
            1,
            reconcile(Arc::clone(&seen)),
            tokio::time::sleep(Duration::from_secs(60)),
            Duration::from_secs(60),
        );
        assert!(second.await);
        assert_eq!(
            *seen.lock().unwrap(),
            ["k0", "k1", "k2", "between", "later"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn errors_back_off_successes_forget_and_requeue_after_repeats() {
        let c = Controller::default();
        let log: Arc<Mutex<Vec<(String, Duration)>>> = Arc::default();
        let start = tokio::time::Instant::now();
        let l = Arc::clone(&log);
        let fails = Arc::new(AtomicI32::new(2));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        c.queue().add(ObjectKey::new(Some("ns"), "flaky"));
        c.queue().add(ObjectKey::new(None, "periodic"));
        let run = tokio::spawn(c.clone().run(
            2,
            move |key: ObjectKey| {
                let l = Arc::clone(&l);
                let fails = Arc::clone(&fails);
                async move {
                    l.lock()
                        .unwrap()
                        .push((key.as_str().to_owned(), start.elapsed()));
                    if key.name() == "periodic" {
                        return Ok(Action::RequeueAfter(Duration::from_secs(10)));
                    }
                    match fails.fetch_sub(1, Ordering::SeqCst) {
                        2 => Err("not yet"),
                        1 => panic!("a panic is an error too"),
                        _ => Ok(Action::Done),
                    }
                }
            },
            async move {
                stopped.await.ok();
            },
            Duration::from_secs(5),
        ));
        tokio::time::sleep(Duration::from_secs(25)).await;
        stop.send(()).unwrap();
        assert!(run.await.unwrap());
        let log = log.lock().unwrap().clone();
        let times = |k: &str| -> Vec<u128> {
            log.iter()
                .filter(|(n, _)| n == k)
                .map(|(_, t)| t.as_millis())
                .collect()
        };
        // Failed, panicked, then succeeded: after 5 ms and 10 ms of backoff.
        assert_eq!(times("ns/flaky"), [0, 5, 15]);
        assert_eq!(times("periodic"), [0, 10_000, 20_000]);
        assert_eq!(
            c.queue().num_requeues(&ObjectKey::new(Some("ns"), "flaky")),
            0
        );
    }

    /// A reconcile closure that panics before returning its future (a cache-miss `unwrap`
    /// in `move |key| { … async move { … } }`) must not kill the workers: the panic is
    /// caught and counted, the key backs off, and other keys are still reconciled.
    #[tokio::test(start_paused = true)]
    async fn a_closure_panicking_before_its_future_does_not_kill_the_workers() {
        let c = Controller::default();
        let bad = ObjectKey::new(Some("ns"), "bad");
        c.queue().add(bad.clone());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let run = tokio::spawn(c.clone().run(
            2,
            move |key: ObjectKey| {
                assert!(key.as_str() != "ns/bad", "cache miss unwrap");
                let tx = tx.clone();
                async move {
                    tx.send(key.as_str().to_owned()).ok();
                    Ok::<_, String>(Action::Done)
                }
            },
            std::future::pending::<()>(),
            Duration::from_secs(5),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.queue().add(ObjectKey::new(Some("ns"), "good"));
        let good = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
        run.abort();
        assert_eq!(good.ok().flatten().as_deref(), Some("ns/good"));
        assert!(c.panics() >= 1);
        assert!(c.queue().num_requeues(&bad) >= 1, "the key backs off");
    }

    /// `Ok(Action::RequeueAfter(Duration::MAX))` ("no need to look again") overflowed
    /// `Instant` in `add_after` and killed the worker; it now waits "for ever" (saturated)
    /// and the other keys are reconciled.
    #[tokio::test(start_paused = true)]
    async fn a_huge_requeue_after_does_not_kill_the_workers() {
        let c = Controller::default();
        c.queue().add(ObjectKey::new(Some("ns"), "far"));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let run = tokio::spawn(c.clone().run(
            2,
            move |key: ObjectKey| {
                let tx = tx.clone();
                async move {
                    tx.send(key.as_str().to_owned()).ok();
                    if key.as_str() == "ns/far" {
                        Ok::<_, String>(Action::RequeueAfter(Duration::MAX))
                    } else {
                        Ok(Action::Done)
                    }
                }
            },
            std::future::pending::<()>(),
            Duration::from_secs(5),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.queue().add(ObjectKey::new(Some("ns"), "next"));
        let mut seen = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(k) = rx.recv().await {
                seen.push(k.clone());
                if k == "ns/next" {
                    break;
                }
            }
        })
        .await;
        run.abort();
        assert_eq!(
            seen,
            ["ns/far", "ns/next"],
            "far is not due again, next is reconciled"
        );
        assert_eq!(c.panics(), 0, "no overflow panic");
    }
}
