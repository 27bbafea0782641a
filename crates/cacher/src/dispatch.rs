//! The dispatcher: watcher indexes and the fan-out of each event to the watchers it concerns.
//!
//! # Indexes
//!
//! A watcher sits in exactly one scope, `(namespace, name)`, each part `""` when the watch does
//! not fix it (from the key, or from an exact `metadata.namespace`/`metadata.name` field
//! selector), and within the scope either under the trigger value its field selector fixes
//! (pods: `spec.nodeName=N`) or among the untriggered. An event for `ns/name` with trigger
//! values `cur` and `prev` goes to the scopes `{ns,name}`, `{ns,""}`, `{"",name}`, `{"",""}`,
//! and within each to the untriggered watchers and those under `cur` or `prev`.
//!
//! # Fan-out
//!
//! Each event is wrapped once in a [`Dispatched`] whose objects carry a shared lazy encoding,
//! so every watcher sends the same bytes. The dispatcher filters for each candidate (turning a
//! `Modified` that enters or leaves its selection into `Added`/`Deleted`) and tries a
//! non-blocking send. Watchers whose buffer is full share a time budget (refilled at 50 ms per
//! second, at most 100 ms); one still blocked when its wait ends is closed, or, with
//! stall-and-resume on, detached: it drains its buffer, then catches up from the event window
//! by itself and re-registers (or gets 410 Expired if its version left the window).
//!
//! Invariants: the registry lock is held only for index updates, candidate collection and
//! non-blocking sends, never across an `.await`; a watcher receives live events in the order
//! the dispatcher handles them, which is resource-version order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use listwatch_api::fields::Fields;
use listwatch_api::{EventType, Object};
use listwatch_storage::{SelectionPredicate, WatchEvent};
use listwatch_watchcache::CacheEvent;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::metrics::ResourceMetrics;

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
}

impl Dispatched {
    /// Wraps a cache event; `shared` gives its objects one shared encoding.
    pub(crate) fn new(ev: &CacheEvent, shared: bool) -> Self {
        let enc = |o: Object| if shared { o.with_shared_encoding() } else { o };
        Self {
            rv: ev.resource_version,
            event_type: ev.event_type,
            object: enc(ev.object.clone()),
            prev: ev.prev_object.clone(),
            prev_at_rv: match ev.event_type {
                EventType::Modified => ev
                    .prev_object
                    .as_ref()
                    .map(|p| enc(p.with_resource_version(ev.resource_version))),
                _ => None,
            },
        }
    }

    /// What this event is for a watcher with `pred`, if anything.
    pub(crate) fn event_type_for(&self, pred: &SelectionPredicate) -> Option<EventType> {
        match self.event_type {
            EventType::Added | EventType::Deleted => {
                pred.matches(&self.object).then_some(self.event_type)
            }
            _ => {
                let cur = pred.matches(&self.object);
                let old = self.prev.as_ref().is_some_and(|p| pred.matches(p));
                match (cur, old) {
                    (true, true) => Some(EventType::Modified),
                    (true, false) => Some(EventType::Added),
                    (false, true) => Some(EventType::Deleted),
                    (false, false) => None,
                }
            }
        }
    }

    /// The storage event a watcher sends for `event_type` (from [`Self::event_type_for`]).
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
    fn scope(&self) -> (&str, &str) {
        (self.object.namespace().unwrap_or(""), self.object.name())
    }
}

/// What a watcher's buffer carries.
#[derive(Debug)]
pub(crate) enum Item {
    Event(Arc<Dispatched>, EventType),
    Bookmark(u64),
}

pub(crate) const ACTIVE: u8 = 0;
/// Detached for being slow: catch up from the window, then re-register.
pub(crate) const DETACHED: u8 = 1;
/// Closed (too slow without stall-and-resume, cache reinitialized, or shut down).
pub(crate) const CLOSED: u8 = 2;

/// State shared between a registered watcher and its stream.
#[derive(Debug, Default)]
pub(crate) struct Control {
    state: AtomicU8,
}

impl Control {
    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }
    fn set(&self, s: u8) {
        self.state.store(s, Ordering::Release);
    }
}

/// A registered watcher, as the dispatcher sees it.
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) scope: (Box<str>, Box<str>),
    pub(crate) trigger: Option<Box<str>>,
    pub(crate) predicate: SelectionPredicate,
    pub(crate) tx: mpsc::Sender<Item>,
    pub(crate) allow_bookmarks: bool,
    /// Whether backend progress reaches this watcher as bookmarks right away.
    pub(crate) progress_notify: bool,
    /// Milliseconds since the registry's epoch at which the next bookmark is due. Only the
    /// dispatcher reads and writes it.
    pub(crate) next_bookmark_ms: AtomicU64,
    pub(crate) control: Arc<Control>,
}

#[derive(Default)]
struct ScopeSet {
    untriggered: HashMap<u64, Arc<Entry>>,
    by_trigger: HashMap<Box<str>, HashMap<u64, Arc<Entry>>>,
}

impl ScopeSet {
    fn is_empty(&self) -> bool {
        self.untriggered.is_empty() && self.by_trigger.is_empty()
    }
}

/// Every registered watcher, indexed. Guarded by [`Registry`]'s mutex.
#[derive(Default)]
pub(crate) struct Watchers {
    /// The version of the newest event whose candidates have been collected. A watcher
    /// registering now receives every later event live and must replay the earlier ones.
    pub(crate) started_rv: u64,
    next_id: u64,
    scopes: HashMap<(Box<str>, Box<str>), ScopeSet>,
    all: HashMap<u64, Arc<Entry>>,
}

impl Watchers {
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(crate) fn add(&mut self, e: Arc<Entry>) {
        let set = self.scopes.entry(e.scope.clone()).or_default();
        match &e.trigger {
            Some(t) => {
                set.by_trigger
                    .entry(t.clone())
                    .or_default()
                    .insert(e.id, Arc::clone(&e));
            }
            None => {
                set.untriggered.insert(e.id, Arc::clone(&e));
            }
        }
        self.all.insert(e.id, e);
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<Arc<Entry>> {
        let e = self.all.remove(&id)?;
        if let Some(set) = self.scopes.get_mut(&e.scope) {
            match &e.trigger {
                Some(t) => {
                    if let Some(m) = set.by_trigger.get_mut(t) {
                        m.remove(&id);
                        if m.is_empty() {
                            set.by_trigger.remove(t);
                        }
                    }
                }
                None => {
                    set.untriggered.remove(&id);
                }
            }
            if set.is_empty() {
                self.scopes.remove(&e.scope);
            }
        }
        Some(e)
    }

    pub(crate) fn len(&self) -> usize {
        self.all.len()
    }

    fn candidates(
        &self,
        ns: &str,
        name: &str,
        triggers: [Option<&str>; 2],
        out: &mut Vec<Arc<Entry>>,
    ) {
        let scopes = [(ns, name), (ns, ""), ("", name), ("", "")];
        for (i, (sn, sm)) in scopes.iter().enumerate() {
            // Cluster-scoped objects have ns == "", which makes scopes repeat.
            if scopes[..i].contains(&(*sn, *sm)) {
                continue;
            }
            let Some(set) = self.scopes.get(&(Box::from(*sn), Box::from(*sm))) else {
                continue;
            };
            out.extend(set.untriggered.values().cloned());
            for (j, t) in triggers.iter().enumerate() {
                let Some(t) = t else { continue };
                if triggers[..j].contains(&Some(*t)) {
                    continue;
                }
                if let Some(m) = set.by_trigger.get(*t) {
                    out.extend(m.values().cloned());
                }
            }
        }
    }

    fn drain(&mut self) -> Vec<Arc<Entry>> {
        self.scopes.clear();
        self.all.drain().map(|(_, e)| e).collect()
    }
}

/// The registry: watchers behind a mutex, plus what the dispatcher publishes.
#[derive(Default)]
pub(crate) struct Registry {
    watchers: Mutex<Watchers>,
    /// The last resource version the dispatcher handled (events and progress).
    pub(crate) last_rv: AtomicU64,
    /// The most recently dispatched events, oldest first, so that watchers catching up from
    /// the window reuse their shared encodings instead of encoding again. Bounded by
    /// [`RECENT_EVENTS`] and [`RECENT_BYTES`]; only the dispatcher writes it.
    recent: Mutex<Recent>,
}

/// Recently dispatched events and the bytes of their objects.
#[derive(Default)]
struct Recent {
    events: std::collections::VecDeque<Arc<Dispatched>>,
    bytes: usize,
}

/// At most this many recently dispatched events are kept for catch-up...
const RECENT_EVENTS: usize = 1024;
/// ...and at most this many bytes of their objects.
const RECENT_BYTES: usize = 64 << 20;

impl Registry {
    /// Remembers a dispatched event for catch-up (see `recent`).
    fn remember(&self, d: &Arc<Dispatched>) {
        let mut r = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        r.bytes += d.object.size();
        r.events.push_back(Arc::clone(d));
        while r.events.len() > RECENT_EVENTS || (r.bytes > RECENT_BYTES && r.events.len() > 1) {
            if let Some(old) = r.events.pop_front() {
                r.bytes -= old.object.size();
            }
        }
    }

    fn forget_recent(&self) {
        *self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Recent::default();
    }

    /// The dispatched form of the event at `rv`, if still remembered.
    pub(crate) fn recent(&self, rv: u64) -> Option<Arc<Dispatched>> {
        let r = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let i = r.events.binary_search_by_key(&rv, |d| d.rv).ok()?;
        r.events.get(i).cloned()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Watchers> {
        // A panic while holding this lock leaves the indexes consistent (every mutation is a
        // single map operation), so a poisoned lock is still usable.
        self.watchers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Removes a watcher and marks it; returns whether it was still registered.
pub(crate) fn unregister(
    registry: &Registry,
    id: u64,
    state: u8,
    metrics: &ResourceMetrics,
) -> bool {
    let e = registry.lock().remove(id);
    match e {
        Some(e) => {
            e.control.set(state);
            metrics.watchers_active.dec();
            true
        }
        None => false,
    }
}

/// Messages from the cache's feeder to the dispatcher, in resource-version order.
#[derive(Debug)]
pub(crate) enum Incoming {
    Event(Arc<CacheEvent>),
    /// A bookmark from the backend: progress without an event.
    Progress(u64),
    /// The cache was relisted at this version: every watcher ends so clients re-watch. The
    /// sender learns when that is done, so no watcher of the new state is closed by it.
    Reset(u64, tokio::sync::oneshot::Sender<()>),
}

/// Dispatcher settings.
#[derive(Debug, Clone)]
pub(crate) struct DispatchConfig {
    pub(crate) trigger_field: Option<String>,
    pub(crate) stall_resume: bool,
    pub(crate) max_budget: Duration,
    pub(crate) budget_refill_per_sec: Duration,
    pub(crate) bookmark_frequency: Duration,
    pub(crate) bookmark_tick: Duration,
}

struct Budget {
    left: Duration,
    at: Instant,
    max: Duration,
    refill_per_sec: Duration,
}

impl Budget {
    fn take(&mut self) -> Duration {
        let now = Instant::now();
        let refill = self
            .refill_per_sec
            .mul_f64(now.duration_since(self.at).as_secs_f64());
        self.left = (self.left + refill).min(self.max);
        self.at = now;
        std::mem::take(&mut self.left)
    }
    fn give_back(&mut self, d: Duration) {
        self.left = (self.left + d).min(self.max);
    }
}

pub(crate) struct Dispatcher {
    pub(crate) registry: Arc<Registry>,
    pub(crate) config: DispatchConfig,
    pub(crate) metrics: ResourceMetrics,
    pub(crate) epoch: Instant,
    budget: Budget,
    candidates: Vec<Arc<Entry>>,
}

impl Dispatcher {
    pub(crate) fn new(
        registry: Arc<Registry>,
        config: DispatchConfig,
        metrics: ResourceMetrics,
        epoch: Instant,
    ) -> Self {
        let budget = Budget {
            left: config.max_budget,
            at: Instant::now(),
            max: config.max_budget,
            refill_per_sec: config.budget_refill_per_sec,
        };
        Self {
            registry,
            config,
            metrics,
            epoch,
            budget,
            candidates: Vec::new(),
        }
    }

    pub(crate) async fn run(
        mut self,
        mut incoming: mpsc::Receiver<Incoming>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut next_tick = Instant::now() + jittered(self.config.bookmark_tick);
        loop {
            tokio::select! {
                msg = incoming.recv() => match msg {
                    Some(Incoming::Event(ev)) => self.dispatch(&ev).await,
                    Some(Incoming::Progress(rv)) => self.progress(rv),
                    Some(Incoming::Reset(rv, done)) => {
                        self.close_all();
                        self.registry.lock().started_rv = rv;
                        self.registry.forget_recent();
                        self.registry.last_rv.store(rv, Ordering::Release);
                        let _ = done.send(());
                    }
                    None => break,
                },
                () = tokio::time::sleep_until(next_tick) => {
                    self.bookmarks();
                    next_tick = Instant::now() + jittered(self.config.bookmark_tick);
                }
                _ = stop.changed() => break,
            }
        }
        self.close_all();
    }

    fn close_all(&mut self) {
        let all = self.registry.lock().drain();
        for e in &all {
            e.control.set(CLOSED);
        }
        self.metrics.watchers_active.set(0);
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Backend progress: watchers that asked for progress notification get a bookmark at
    /// once (everything up to `rv` has been queued to them before this message).
    fn progress(&mut self, rv: u64) {
        let prev = self.registry.last_rv.fetch_max(rv, Ordering::AcqRel);
        if rv < prev {
            return;
        }
        let w = self.registry.lock();
        for e in w.all.values() {
            if e.allow_bookmarks && e.progress_notify {
                // A full buffer has events to read anyway; a later progress will follow.
                let _ = e.tx.try_send(Item::Bookmark(rv));
            }
        }
    }

    /// Sends a bookmark at the last handled version to watchers whose time has come. Before
    /// anything was handled there is no version to announce, so nothing is sent.
    fn bookmarks(&mut self) {
        let rv = self.registry.last_rv.load(Ordering::Acquire);
        if rv == 0 {
            return;
        }
        let now = self.now_ms();
        let every = u64::try_from(self.config.bookmark_frequency.as_millis()).unwrap_or(u64::MAX);
        let w = self.registry.lock();
        for e in w.all.values() {
            if !e.allow_bookmarks || e.next_bookmark_ms.load(Ordering::Relaxed) > now {
                continue;
            }
            // A full buffer means the watcher has events to read anyway; skip, as upstream.
            if e.tx.try_send(Item::Bookmark(rv)).is_ok() {
                e.next_bookmark_ms
                    .store(now.saturating_add(every), Ordering::Relaxed);
            }
        }
    }

    pub(crate) async fn dispatch(&mut self, ev: &CacheEvent) {
        let d = Arc::new(Dispatched::new(ev, true));
        // Remembered before anyone can see it, so a watcher catching up meanwhile finds it.
        self.registry.remember(&d);
        let triggers: [Option<&str>; 2] = match &self.config.trigger_field {
            Some(f) => [
                // Absent reads as "", as selectors and the cache's indexes read it.
                Some(d.object.field_value(f)),
                d.prev.as_ref().map(|p| p.field_value(f)),
            ],
            None => [None, None],
        };
        let (ns, name) = d.scope();
        let mut candidates = std::mem::take(&mut self.candidates);
        {
            let mut w = self.registry.lock();
            w.started_rv = d.rv;
            w.candidates(ns, name, triggers, &mut candidates);
        }
        let mut blocked = Vec::new();
        let mut gone = Vec::new();
        for e in candidates.drain(..) {
            if e.control.state() != ACTIVE {
                continue;
            }
            let Some(t) = d.event_type_for(&e.predicate) else {
                continue;
            };
            match e.tx.try_send(Item::Event(Arc::clone(&d), t)) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(item)) => blocked.push((e, item)),
                Err(mpsc::error::TrySendError::Closed(_)) => gone.push(e.id),
            }
        }
        self.candidates = candidates;
        if !blocked.is_empty() {
            let mut budget = self.budget.take();
            for (e, item) in blocked {
                let started = Instant::now();
                let sent = if budget.is_zero() {
                    None
                } else {
                    tokio::time::timeout(budget, e.tx.send(item)).await.ok()
                };
                budget = budget.saturating_sub(started.elapsed());
                match sent {
                    Some(Ok(())) => {}
                    Some(Err(_)) => gone.push(e.id),
                    None => self.too_slow(&e),
                }
            }
            self.budget.give_back(budget);
        }
        for id in gone {
            unregister(&self.registry, id, CLOSED, &self.metrics);
        }
        self.registry.last_rv.fetch_max(d.rv, Ordering::AcqRel);
        self.metrics.events_dispatched.inc();
        self.metrics
            .dispatch_latency
            .observe(ev.received_at.elapsed().as_secs_f64());
    }

    fn too_slow(&self, e: &Entry) {
        if self.config.stall_resume {
            if unregister(&self.registry, e.id, DETACHED, &self.metrics) {
                self.metrics.watchers_stalled.inc();
                tracing::debug!(
                    watcher = e.id,
                    "slow watcher detached; it will catch up from the window"
                );
            }
        } else if unregister(&self.registry, e.id, CLOSED, &self.metrics) {
            self.metrics.watchers_terminated.inc();
            tracing::info!(watcher = e.id, "closing a watcher that cannot keep up");
        }
    }
}

/// `d` ± 25 %, so that many cachers' ticks do not line up.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(rand::random_range(0.75..1.25))
}
