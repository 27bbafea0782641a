//! [`Informer`]: one reflector, one store, many subscribers, each at its own pace.
//!
//! The informer runs the [`watcher`](crate::watcher) loop in a task, applies each event to its
//! store and hands the resulting [`Delta`]s to every subscriber's own queue, without ever
//! waiting for a subscriber. Handlers ([`EventHandler`]) are subscribers driven by a task of
//! their own; they can be added and removed at any time.
//!
//! # Ordering and late subscribers
//!
//! A subscriber first receives the store's current state as `Added { in_initial_list: true }`
//! and then every delta applied after that state, in order, with nothing missed and nothing
//! twice: the driver applies an event to the store and queues its deltas under one lock, and
//! [`Informer::subscribe`] snapshots the store and registers under the same lock.
//!
//! # Slow subscribers: bounded, coalesced, never blocking the others
//!
//! A slow subscriber delays only itself. Each subscriber's queue holds at most
//! [`InformerConfig::subscriber_buffer`] deltas (plus one event's worth: a relist's deltas are
//! queued together). When a delta arrives for a full queue, the subscriber *lags*: it stops
//! queuing and keeps instead one snapshot of the store (shared with every subscriber that
//! lagged at the same event) — the state it will have seen once its queue is drained. When
//! it has drained its queue it is caught up with the store's state at that moment, the way a
//! relist catches a store up: one `Updated { old, new }` per changed key (intermediate
//! versions skipped), `Added` for new keys and `Deleted { final_state_unknown: true }` for
//! vanished ones; then exact deltas resume. So a subscriber's memory is bounded by its buffer
//! plus the store's size (`Arc`s, not copies), whatever the churn, and it is never left with
//! a wrong view without being told. client-go instead buffers every notification of a slow
//! listener without bound; kube-runtime's shared streams make the slowest subscriber hold
//! back the others.
//!
//! # Sync, resync, transforms and filters
//!
//! - [`HandlerRegistration::has_synced`] (client-go's per-registration `HasSynced`) turns true
//!   once the informer has synced *and* the handler has processed the initial state.
//! - With a resync period (the informer's, or one per handler), every object in the store is
//!   re-delivered as [`Delta::Sync`] on that period once the store has synced (client-go's
//!   resync; at least 1 s apart). A lagging subscriber skips resyncs until it has caught up.
//! - [`InformerConfig::transform`] rewrites every object before it reaches the store
//!   (client-go `SetTransform`, kube-runtime's `modify`), e.g. to drop managed fields.
//! - [`Filtered`](crate::Filtered) wraps a handler with a predicate, client-go's
//!   `FilteringResourceEventHandler`.
//! - A resync is queued for a subscriber only when it fits its buffer or its queue is empty,
//!   else that period is skipped for it: a subscriber's queue never holds more than its
//!   buffer or the store's size (plus one event), however many periods pass while it does
//!   not read.
//!
//! # Failures are visible to code
//!
//! Every failure is sent, typed, to [`Informer::errors`] (client-go's
//! `SetWatchErrorHandler`, and more): the reflector's errors (it recovers from them by
//! itself), an object its transform or an index function panicked on (the event is skipped,
//! reported with the object's key, and the informer goes on; a transform panic on an object
//! of a list fails that whole list instead, which is retried after a backoff, so the store
//! keeps its last good state rather than a relist deleting the object), a handler that panicked (the
//! delta is skipped, the handler keeps running). [`Informer::wait_until_synced`] fails with
//! [`SyncError::Fatal`] when the list before the first sync fails in a way retries will not
//! mend (400, 401, 403, 404, 405, 406: a selector the server refuses, a wrong resource or
//! missing rights; an object the type cannot decode or an answer that is not the list's
//! JSON, at the first such failure), instead of hanging, and
//! [`Informer::wait_until_synced_within`] bounds the wait through retriable failures; the
//! informer keeps retrying in the background, so a later wait succeeds once the cause is
//! fixed.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::{Stream, StreamExt};
use listwatch_api::Object;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::informer_error::{ERROR_BUFFER, describe, panic_message, transformed};
pub use crate::informer_error::{InformerError, SyncError};
use crate::lister::ListerWatcher;
use crate::reflector::{Config, Event, watcher_with_abandon};
use crate::resource::{ObjectKey, Resource};
use crate::store::{Delta, IndexFn, Store, Writer};

/// client-go `minimumResyncPeriod`.
const MIN_RESYNC: Duration = Duration::from_secs(1);

/// A function applied to every object before it is stored.
pub type Transform<K> = Arc<dyn Fn(K) -> K + Send + Sync>;

/// Informer configuration.
#[derive(Clone)]
pub struct InformerConfig<K> {
    /// The reflector's configuration.
    pub reflector: Config,
    /// Re-deliver the whole store to every subscriber this often (`None`: never), unless a
    /// handler asks for its own period. At least 1 s.
    pub resync_period: Option<Duration>,
    /// The most deltas a subscriber's queue holds before the subscriber lags (see the module
    /// doc).
    pub subscriber_buffer: usize,
    /// Index functions of the store.
    pub indexers: Vec<(String, IndexFn<K>)>,
    /// Applied to every object before the store sees it.
    pub transform: Option<Transform<K>>,
}

impl<K> Default for InformerConfig<K> {
    fn default() -> Self {
        Self {
            reflector: Config::default(),
            // client-go: a resync period of 0 means no resync
            resync_period: None,
            // ours: client-go's processorListener buffers without bound (see the module doc)
            subscriber_buffer: 1024,
            indexers: Vec::new(),
            transform: None,
        }
    }
}

impl<K> InformerConfig<K> {
    /// Sets the reflector configuration.
    #[must_use]
    pub fn reflector(mut self, config: Config) -> Self {
        self.reflector = config;
        self
    }

    /// Sets the resync period (clamped to at least 1 s).
    #[must_use]
    pub fn resync_period(mut self, period: Duration) -> Self {
        self.resync_period = Some(period.max(MIN_RESYNC));
        self
    }

    /// Sets each subscriber's queue length (at least 1).
    #[must_use]
    pub fn subscriber_buffer(mut self, n: usize) -> Self {
        self.subscriber_buffer = n.max(1);
        self
    }

    /// Adds an index function.
    #[must_use]
    pub fn index(mut self, name: impl Into<String>, f: IndexFn<K>) -> Self {
        self.indexers.push((name.into(), f));
        self
    }

    /// Sets the transform applied to every object before it is stored. It must keep the
    /// object's name, namespace and resource version.
    #[must_use]
    pub fn transform(mut self, f: impl Fn(K) -> K + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(f));
        self
    }
}

impl InformerConfig<Object> {
    /// Stores objects without `metadata.managedFields` (the client-side strip transform of
    /// upstream's KEP-5958: controllers that never read field ownership keep 20–60 % less
    /// per object). Replaces any transform set before. A server that honours
    /// `Accept: ...;drop=metadata.managedFields` sends them without it already; this holds
    /// the store to it whatever the server sends.
    #[must_use]
    pub fn drop_managed_fields(self) -> Self {
        self.transform(|o: Object| o.without_managed_fields())
    }
}

/// Callbacks for changes, client-go's `ResourceEventHandler`.
pub trait EventHandler<K>: Send + 'static {
    /// A key appeared (`in_initial_list`: it is part of the state the handler started from:
    /// the informer's first list, or the store's content when the handler was added).
    fn on_add(&mut self, object: &Arc<K>, in_initial_list: bool) {
        let _ = (object, in_initial_list);
    }
    /// A key's object changed; on resync `old` and `new` are the same object.
    fn on_update(&mut self, old: &Arc<K>, new: &Arc<K>) {
        let _ = (old, new);
    }
    /// A key went away; `final_state_unknown` when it vanished across a relist or while the
    /// handler lagged, so `object` is the last state it was told of, not necessarily the
    /// final one.
    fn on_delete(&mut self, object: &Arc<K>, final_state_unknown: bool) {
        let _ = (object, final_state_unknown);
    }
}

/// Delivers a delta to a handler.
pub fn dispatch<K, H: EventHandler<K> + ?Sized>(handler: &mut H, delta: &Delta<K>) {
    match delta {
        Delta::Added {
            object,
            in_initial_list,
        } => handler.on_add(object, *in_initial_list),
        Delta::Updated { old, new } => handler.on_update(old, new),
        Delta::Deleted {
            object,
            final_state_unknown,
        } => handler.on_delete(object, *final_state_unknown),
        Delta::Sync(o) => handler.on_update(o, o),
    }
}

enum Item<K> {
    Delta(Delta<K>),
    /// Everything before this was the state at the informer's first sync.
    Synced,
}

/// The store's content by key, as a lagging subscriber will have seen it.
type View<K> = Arc<HashMap<ObjectKey, Arc<K>>>;

struct Queue<K> {
    items: VecDeque<Item<K>>,
    /// Set while the subscriber lags: its view once `items` is drained.
    lag: Option<View<K>>,
    /// The subscriber was created before the first sync and has not been sent `Synced`.
    sync_pending: bool,
    /// Resync period and next due time.
    resync: Option<(Duration, Instant)>,
    waker: Option<Waker>,
    /// The informer is gone: end after draining.
    closed: bool,
    /// The subscription is gone: prune it.
    dropped: bool,
}

struct Sub<K> {
    queue: Mutex<Queue<K>>,
    synced: Arc<AtomicBool>,
}

impl<K> Sub<K> {
    fn lock(&self) -> MutexGuard<'_, Queue<K>> {
        // Every critical section leaves the queue consistent (pushes and pops only).
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Registry<K> {
    subs: Vec<Arc<Sub<K>>>,
    /// The earliest resync due among the subscribers.
    next_resync: Option<Instant>,
}

struct Shared<K> {
    /// Orders store changes against subscriptions and catch-ups (see the module doc). Never
    /// held across an await; taken before any queue lock.
    registry: Mutex<Registry<K>>,
    /// Wakes the driver when a subscription with a resync period registers.
    resync_changed: tokio::sync::Notify,
    store: Store<K>,
    buffer: usize,
    default_resync: Option<Duration>,
    /// Every failure, for [`Informer::errors`].
    errors: tokio::sync::broadcast::Sender<InformerError>,
    /// A receiver made before the driver started, for the first [`Informer::errors`] call,
    /// so that a failure reported between `spawn` and that call is not lost.
    first_errors: Mutex<Option<tokio::sync::broadcast::Receiver<InformerError>>>,
}

impl<K> Shared<K> {
    /// Sends `e` to the error receivers (none listening is fine).
    fn report(&self, e: InformerError) {
        tracing::warn!(error = %e, "informer failure");
        let _ = self.errors.send(e);
    }
}

impl<K> Shared<K> {
    fn lock(&self) -> MutexGuard<'_, Registry<K>> {
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running informer. Dropping it stops the reflector and ends every subscription (after
/// each has drained what was queued for it).
pub struct Informer<K: Resource> {
    shared: Arc<Shared<K>>,
    driver: JoinHandle<()>,
}

impl<K: Resource> Drop for Informer<K> {
    fn drop(&mut self) {
        self.driver.abort();
        close_all(&self.shared);
    }
}

fn close_all<K: Resource>(shared: &Shared<K>) {
    let reg = shared.lock();
    for sub in &reg.subs {
        let waker = {
            let mut q = sub.lock();
            q.closed = true;
            q.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<K: Resource> Informer<K> {
    /// Starts an informer over `lw` on the current tokio runtime.
    ///
    /// ```no_run
    /// use listwatch_runtime::{EventHandler, Informer, InformerConfig, ListerWatcher};
    /// use listwatch_api::Object;
    /// use std::sync::Arc;
    ///
    /// struct Print;
    /// impl EventHandler<Object> for Print {
    ///     fn on_add(&mut self, o: &Arc<Object>, _: bool) { println!("added {}", o.name()) }
    /// }
    /// # async fn demo(lw: impl ListerWatcher<Object = Object> + 'static) {
    /// let informer = Informer::spawn(lw, InformerConfig::default());
    /// let registration = informer.add_handler(Print);
    /// informer.store().wait_until_synced().await.ok();
    /// registration.remove();
    /// # }
    /// ```
    pub fn spawn<L: ListerWatcher<Object = K>>(lw: L, config: InformerConfig<K>) -> Self {
        let writer = Writer::new(config.indexers);
        let (errors, first_errors) = tokio::sync::broadcast::channel(ERROR_BUFFER);
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry {
                subs: Vec::new(),
                next_resync: None,
            }),
            resync_changed: tokio::sync::Notify::new(),
            store: writer.store(),
            buffer: config.subscriber_buffer.max(1),
            default_resync: config.resync_period.map(|p| p.max(MIN_RESYNC)),
            errors,
            first_errors: Mutex::new(Some(first_errors)),
        });
        let driver = tokio::spawn(drive(
            lw,
            config.reflector,
            config.transform,
            writer,
            Arc::clone(&shared),
        ));
        Self { shared, driver }
    }

    /// A reader of the informer's store.
    pub fn store(&self) -> Store<K> {
        self.shared.store.clone()
    }

    /// Whether the first list has completed.
    pub fn has_synced(&self) -> bool {
        self.shared.store.has_synced()
    }

    /// Waits for the first list; fails at once when the first list's last try failed
    /// fatally ([`SyncError::Fatal`]: 400, 401, 403, 404, 405, 406, an object the type
    /// cannot decode, an answer that is not the list's JSON) or the informer stopped. A
    /// first list failing with retriable errors (refused, 5xx, 429) is waited through: use
    /// [`wait_until_synced_within`](Self::wait_until_synced_within) to bound that.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`Store::wait_until_synced`].
    pub async fn wait_until_synced(&self) -> Result<(), SyncError> {
        // The informer reports its fatal failures to its store: every reader of the store
        // waits the same way.
        self.shared.store.wait_until_synced().await
    }

    /// [`wait_until_synced`](Self::wait_until_synced) for at most `deadline`: also fails,
    /// with [`SyncError::TimedOut`], when the first list keeps failing in ways retries may
    /// mend (refused connections, 5xx, 429: see [`errors`](Self::errors) for which) or is
    /// that slow. The informer keeps retrying either way.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`Store::wait_until_synced`].
    pub async fn wait_until_synced_within(&self, deadline: Duration) -> Result<(), SyncError> {
        self.shared.store.wait_until_synced_within(deadline).await
    }

    /// A receiver of the informer's failures (see the module doc). The first call's receiver
    /// has every failure since [`Informer::spawn`] (so one reported before the call, say by a
    /// first list that failed at once, is not lost); later calls' receive those from the call
    /// on. Each holds the last 64 its reader has not read; older ones are dropped (`recv`
    /// reports `Lagged`).
    pub fn errors(&self) -> tokio::sync::broadcast::Receiver<InformerError> {
        let first = self
            .shared
            .first_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        first.unwrap_or_else(|| self.shared.errors.subscribe())
    }

    /// Subscribes: the current state as `Added { in_initial_list: true }`, then every change.
    /// Resyncs follow the informer's period. Dropping the subscription unregisters it.
    pub fn subscribe(&self) -> Subscription<K> {
        self.subscribe_inner(self.shared.default_resync)
    }

    /// [`Informer::subscribe`] with a resync period of its own (at least 1 s).
    pub fn subscribe_with_resync(&self, period: Duration) -> Subscription<K> {
        self.subscribe_inner(Some(period.max(MIN_RESYNC)))
    }

    fn subscribe_inner(&self, resync: Option<Duration>) -> Subscription<K> {
        let mut reg = self.shared.lock();
        let synced = self.shared.store.has_synced();
        let initial = self.shared.store.list();
        let resync = resync.map(|p| (p, crate::instant::from_now(p)));
        let sub = Arc::new(Sub {
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                lag: None,
                sync_pending: !synced,
                resync,
                waker: None,
                closed: self.driver.is_finished(),
                dropped: false,
            }),
            synced: Arc::new(AtomicBool::new(false)),
        });
        reg.subs.push(Arc::clone(&sub));
        if let Some((_, due)) = resync {
            reg.next_resync = Some(reg.next_resync.map_or(due, |n| n.min(due)));
            self.shared.resync_changed.notify_one();
        }
        Subscription {
            initial: initial.into_iter(),
            synced_after_initial: synced,
            sub,
            shared: Arc::clone(&self.shared),
        }
    }

    fn errors_sender(&self) -> tokio::sync::broadcast::Sender<InformerError> {
        self.shared.errors.clone()
    }

    /// Runs `handler` on its own task over a new subscription, until the registration is
    /// removed or the informer stops.
    ///
    /// A panic in the handler skips that delta, is reported to [`Informer::errors`] as
    /// [`InformerError::HandlerPanicked`], and the handler goes on with the next delta.
    pub fn add_handler<H: EventHandler<K>>(&self, handler: H) -> HandlerRegistration {
        Self::run_handler(self.subscribe(), handler, self.errors_sender())
    }

    /// [`Informer::add_handler`] with a resync period of its own (client-go's
    /// `AddEventHandlerWithResyncPeriod`).
    pub fn add_handler_with_resync<H: EventHandler<K>>(
        &self,
        handler: H,
        period: Duration,
    ) -> HandlerRegistration {
        Self::run_handler(
            self.subscribe_with_resync(period),
            handler,
            self.errors_sender(),
        )
    }

    fn run_handler<H: EventHandler<K>>(
        mut sub: Subscription<K>,
        mut handler: H,
        errors: tokio::sync::broadcast::Sender<InformerError>,
    ) -> HandlerRegistration {
        let synced = Arc::clone(&sub.sub.synced);
        let task = tokio::spawn(async move {
            while let Some(delta) = sub.next().await {
                let call = std::panic::AssertUnwindSafe(|| dispatch(&mut handler, &delta));
                if let Err(p) = std::panic::catch_unwind(call) {
                    let e = InformerError::HandlerPanicked {
                        key: delta.object().key(),
                        message: panic_message(p.as_ref()),
                    };
                    tracing::error!(error = %e, "informer handler panicked; delta skipped");
                    let _ = errors.send(e);
                }
            }
        });
        HandlerRegistration { synced, task }
    }
}

/// A handler added to an informer (client-go's `ResourceEventHandlerRegistration`).
///
/// Dropping it leaves the handler running; [`HandlerRegistration::remove`] stops it. Awaiting
/// it waits until the handler has stopped (the informer is gone and its queue drained).
#[derive(Debug)]
pub struct HandlerRegistration {
    synced: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl HandlerRegistration {
    /// Whether the informer has synced and this handler has processed the state it started
    /// from.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Stops the handler: it is called no more, and its queue is freed.
    pub fn remove(self) {
        self.task.abort();
    }
}

impl Future for HandlerRegistration {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.task).poll(cx).map(|_| ())
    }
}

/// A subscriber's stream of deltas. Dropping it unregisters the subscriber.
pub struct Subscription<K: Resource> {
    /// The snapshot taken at subscription, delivered first.
    initial: std::vec::IntoIter<Arc<K>>,
    /// The store had synced when the snapshot was taken.
    synced_after_initial: bool,
    sub: Arc<Sub<K>>,
    shared: Arc<Shared<K>>,
}

impl<K: Resource> Subscription<K> {
    /// Whether the informer has synced and this subscriber has consumed the state it
    /// started from.
    pub fn has_synced(&self) -> bool {
        self.sub.synced.load(Ordering::Acquire)
    }

    /// How many deltas are waiting for this subscriber (its initial state not yet read
    /// included): at most its buffer or the store's size, plus one event's deltas.
    pub fn queued(&self) -> usize {
        self.initial.len() + self.sub.lock().items.len()
    }

    /// Brings a lagging subscriber's queue up to the store's current state.
    fn catch_up(&self) {
        let _reg = self.shared.lock();
        let mut q = self.sub.lock();
        let Some(view) = q.lag.take() else {
            return;
        };
        // Under the registry lock the store cannot change: everything the driver skipped
        // for this subscriber is in it, and nothing after.
        let now = self.shared.store.snapshot();
        for (key, new) in &now {
            match view.get(key) {
                Some(old)
                    if Arc::ptr_eq(old, new)
                        || (old.resource_version() == new.resource_version()
                            && !new.resource_version().is_empty()) => {}
                Some(old) => q.items.push_back(Item::Delta(Delta::Updated {
                    old: Arc::clone(old),
                    new: Arc::clone(new),
                })),
                None => q.items.push_back(Item::Delta(Delta::Added {
                    object: Arc::clone(new),
                    in_initial_list: false,
                })),
            }
        }
        for (key, old) in view.iter() {
            if !now.contains_key(key) {
                q.items.push_back(Item::Delta(Delta::Deleted {
                    object: Arc::clone(old),
                    final_state_unknown: true,
                }));
            }
        }
        if q.sync_pending && self.shared.store.has_synced() {
            q.sync_pending = false;
            q.items.push_back(Item::Synced);
        }
    }
}

impl<K: Resource> Drop for Subscription<K> {
    fn drop(&mut self) {
        let mut q = self.sub.lock();
        q.dropped = true;
        q.items = VecDeque::new();
        q.lag = None;
    }
}

impl<K: Resource> Stream for Subscription<K> {
    type Item = Delta<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Delta<K>>> {
        if let Some(object) = self.initial.next() {
            return Poll::Ready(Some(Delta::Added {
                object,
                in_initial_list: true,
            }));
        }
        if self.synced_after_initial {
            self.synced_after_initial = false;
            self.sub.synced.store(true, Ordering::Release);
        }
        loop {
            let mut q = self.sub.lock();
            match q.items.pop_front() {
                Some(Item::Delta(d)) => return Poll::Ready(Some(d)),
                Some(Item::Synced) => {
                    self.sub.synced.store(true, Ordering::Release);
                    continue;
                }
                None => {}
            }
            if q.lag.is_some() {
                drop(q);
                self.catch_up();
                continue;
            }
            if q.closed {
                return Poll::Ready(None);
            }
            q.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
    }
}

/// Queues `deltas` (and, at the first sync, the sync marker) for every subscriber. Called
/// with the registry lock held, right after the store applied them.
fn publish<K: Resource>(
    shared: &Shared<K>,
    reg: &mut Registry<K>,
    deltas: &[Delta<K>],
    first_sync: bool,
) {
    let mut snapshot: Option<View<K>> = None;
    let mut wake = Vec::new();
    let mut pruned = false;
    for sub in &reg.subs {
        let mut q = sub.lock();
        if q.dropped {
            pruned = true;
            continue;
        }
        if q.lag.is_none() && !deltas.is_empty() {
            q.items.extend(deltas.iter().cloned().map(Item::Delta));
            if q.items.len() > shared.buffer {
                // Full: from now on this subscriber catches up from a snapshot of the store,
                // which is what it will have seen once this queue is drained (module doc).
                let view = snapshot.get_or_insert_with(|| Arc::new(shared.store.snapshot()));
                q.lag = Some(Arc::clone(view));
                tracing::debug!(
                    queued = q.items.len(),
                    "informer subscriber lags, coalescing"
                );
            }
        }
        if first_sync && q.sync_pending && q.lag.is_none() {
            q.sync_pending = false;
            q.items.push_back(Item::Synced);
        }
        if let Some(w) = q.waker.take() {
            wake.push(w);
        }
    }
    if pruned {
        reg.subs.retain(|s| !s.lock().dropped);
    }
    for w in wake {
        w.wake();
    }
}

/// Queues a resync for every subscriber that is due.
fn resync<K: Resource>(shared: &Shared<K>, reg: &mut Registry<K>) {
    let now = Instant::now();
    let mut objects: Option<Vec<Arc<K>>> = None;
    let mut next: Option<Instant> = None;
    let mut wake = Vec::new();
    for sub in &reg.subs {
        let mut q = sub.lock();
        let Some((period, due)) = q.resync else {
            continue;
        };
        let due = if due <= now {
            if q.lag.is_none() && !q.dropped && shared.store.has_synced() {
                let objects = objects.get_or_insert_with(|| shared.store.list());
                if !q.items.is_empty() && q.items.len() + objects.len() > shared.buffer {
                    // It would not fit: this subscriber skips this period's resync rather
                    // than grow its queue past the bound (module doc).
                    tracing::debug!(
                        queued = q.items.len(),
                        "informer subscriber busy, resync skipped for this period"
                    );
                    let due = crate::instant::after(now, period);
                    q.resync = Some((period, due));
                    next = Some(next.map_or(due, |n| n.min(due)));
                    continue;
                }
                q.items.extend(
                    objects
                        .iter()
                        .map(|o| Item::Delta(Delta::Sync(Arc::clone(o)))),
                );
                if let Some(w) = q.waker.take() {
                    wake.push(w);
                }
            }
            crate::instant::after(now, period)
        } else {
            due
        };
        q.resync = Some((period, due));
        next = Some(next.map_or(due, |n| n.min(due)));
    }
    reg.next_resync = next;
    for w in wake {
        w.wake();
    }
}

/// Closes every subscription when the driver ends or is aborted.
struct CloseOnDrop<K: Resource>(Arc<Shared<K>>);

impl<K: Resource> Drop for CloseOnDrop<K> {
    fn drop(&mut self) {
        close_all(&self.0);
    }
}

async fn drive<L: ListerWatcher>(
    lw: L,
    config: Config,
    transform: Option<Transform<L::Object>>,
    mut writer: Writer<L::Object>,
    shared: Arc<Shared<L::Object>>,
) {
    let _close = CloseOnDrop(Arc::clone(&shared));
    let abandon = Arc::new(AtomicBool::new(false));
    let mut events = std::pin::pin!(watcher_with_abandon(lw, config, Arc::clone(&abandon)));
    loop {
        let next_resync = shared.lock().next_resync;
        let resync_due = async {
            match next_resync {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(event)) => {
                    let event = match &transform {
                        Some(f) => {
                            let relist_item = matches!(event, Event::InitApply(_));
                            match transformed(event, f) {
                                Ok(e) => e,
                                Err(e) => {
                                    if relist_item {
                                        // Skipping the object would make the relist's
                                        // commit delete it: the list fails as a whole
                                        // instead, the store keeps its last good state.
                                        abandon.store(true, Ordering::Release);
                                        writer.report_sync_failure(Some(e.clone()));
                                    }
                                    shared.report(e);
                                    continue;
                                }
                            }
                        }
                        None => event,
                    };
                    let what = describe(&event);
                    let mut reg = shared.lock();
                    let was_synced = shared.store.has_synced();
                    // An index function is the caller's code: a panic in it skips the event
                    // (the writer computes index values before changing anything).
                    let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        writer.apply(event)
                    }));
                    let deltas = match applied {
                        Ok(deltas) => deltas,
                        Err(p) => {
                            drop(reg);
                            let e = InformerError::IndexPanicked {
                                event: what,
                                message: panic_message(p.as_ref()),
                            };
                            if !was_synced {
                                writer.report_sync_failure(Some(e.clone()));
                            }
                            shared.report(e);
                            continue;
                        }
                    };
                    let first_sync = !was_synced && shared.store.has_synced();
                    if !deltas.is_empty() || first_sync {
                        publish(&shared, &mut reg, &deltas, first_sync);
                    }
                }
                Some(Err(e)) => {
                    // A fatal failure before the first sync fails the store's waits; a
                    // delete whose object does not decode removes its key (an index
                    // function runs on the removed object: caught as for an event).
                    let mut reg = shared.lock();
                    let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        writer.apply_error(&e)
                    }));
                    match applied {
                        Ok(Some(removed)) => {
                            publish(&shared, &mut reg, std::slice::from_ref(&removed), false);
                        }
                        Ok(None) => {}
                        Err(p) => {
                            drop(reg);
                            shared.report(InformerError::IndexPanicked {
                                event: e.deleted_key().map_or_else(String::new, |k| k.to_string()),
                                message: panic_message(p.as_ref()),
                            });
                        }
                    }
                    shared.report(InformerError::Reflector(Arc::new(e)));
                }
                None => return,
            },
            () = resync_due => resync(&shared, &mut shared.lock()),
            () = shared.resync_changed.notified() => {}
        }
    }
}
