//! The dispatcher: the fan-out of each event to the watchers it concerns, bookmarks on each
//! watcher's schedule, and the cache's resets.
//!
//! # Fan-out
//!
//! Each event is wrapped once in a [`Dispatched`] whose objects carry a shared lazy encoding,
//! so every watcher sends the same bytes; the wrapper is attached (weakly) to the window's
//! event and kept alive in the bounded ring of recent forms (see `recent`), so that watchers
//! catching up from the window reuse it instead of encoding again. The
//! dispatcher picks the candidates from the registry's indexes (see `registry`: namespace,
//! name, trigger value) and tries a non-blocking send of the shared event to each, O(1) per
//! candidate. It never evaluates a selector: each watcher applies its own when it takes the
//! event from its buffer (see `filter`), so no watcher's selector delays another's delivery.
//!
//! A watcher whose buffer is full costs the others nothing with stall-and-resume on (the
//! default): it is detached at once, drains its buffer, catches up from the window by itself
//! and re-registers, or gets 410 Expired if its version left the window. With it off,
//! upstream's rule: the blocked watchers share a time budget (refilled at 50 ms per second,
//! at most 100 ms), and one still blocked when its wait ends is closed.
//!
//! # Bookmarks and progress
//!
//! Storage progress (the backend's bookmarks) only moves the version the dispatcher has
//! handled; it is never fanned out, as upstream. Watchers get bookmarks at that version on
//! their own schedule (see `registry`), plus the initial-events-end bookmark their stream
//! makes itself. An explicit progress request on the cacher reaches the watchers that asked
//! for progress notification, once every event up to the backend's revision is handed out.
//!
//! Invariants: a watcher receives live events in the order the dispatcher handles them, which
//! is resource-version order; nothing here blocks on a watcher except the budgeted wait, and
//! nothing here costs more per candidate than a queue push.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use listwatch_api::fields::Fields;
use listwatch_watchcache::CacheEvent;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::event::{Dispatched, Item};
use crate::latency::Stage;
use crate::metrics::ResourceMetrics;
use crate::watcher::filter;
use crate::watcher::queue::PushError;
use crate::watcher::state::WatcherState;

use self::recent::Recent;
use self::registry::{Entry, Registry, next_bookmark, unregister};

pub(crate) mod recent;
pub(crate) mod registry;

/// Messages to the dispatcher, in resource-version order for those from the feeder.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// An event applied to the cache, and when the backend handed it over (if known).
    Event(Arc<CacheEvent>, Option<std::time::Instant>),
    /// A bookmark from the backend: progress without an event.
    Progress(u64),
    /// The cache is being relisted: every watcher ends (with "not ready") and no one may
    /// register until [`Incoming::Ready`]. The sender learns when that is done.
    Reset(tokio::sync::oneshot::Sender<()>),
    /// The relist is in the cache at this version: watchers may register again. The sender
    /// learns when they may.
    Ready(u64, tokio::sync::oneshot::Sender<()>),
    /// An explicit progress request: the progress-notify watchers get a bookmark once
    /// everything up to this version is handed out.
    NotifyProgress(u64),
}

/// Dispatcher settings.
#[derive(Debug, Clone)]
pub(crate) struct DispatchConfig {
    pub(crate) trigger_field: Option<String>,
    pub(crate) stall_resume: bool,
    pub(crate) max_budget: Duration,
    pub(crate) budget_refill_per_sec: Duration,
    pub(crate) bookmark_frequency: Duration,
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
    registry: Arc<Registry>,
    config: DispatchConfig,
    metrics: ResourceMetrics,
    budget: Budget,
    candidates: Vec<Arc<Entry>>,
    recent: Arc<Recent>,
    /// Explicit progress requests waiting for the dispatcher to reach their version.
    progress_requests: Vec<u64>,
}

impl Dispatcher {
    pub(crate) fn new(
        registry: Arc<Registry>,
        config: DispatchConfig,
        metrics: ResourceMetrics,
        recent: Arc<Recent>,
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
            budget,
            candidates: Vec::new(),
            recent,
            progress_requests: Vec::new(),
        }
    }

    pub(crate) async fn run(
        mut self,
        mut incoming: mpsc::Receiver<Incoming>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        // Far enough to mean "no bookmark is due"; recomputed after every change.
        let never = || Instant::now() + Duration::from_secs(3600);
        let mut next_tick = never();
        loop {
            tokio::select! {
                msg = incoming.recv() => match msg {
                    Some(Incoming::Event(ev, origin)) => self.dispatch(&ev, origin).await,
                    Some(Incoming::Progress(rv)) => self.handled(rv),
                    Some(Incoming::Reset(done)) => {
                        self.close_all(WatcherState::Reset, false);
                        self.recent.clear();
                        let _ = done.send(());
                    }
                    Some(Incoming::Ready(rv, done)) => {
                        self.registry.last_rv.store(rv, Ordering::Release);
                        {
                            let mut w = self.registry.lock();
                            w.started_rv = rv;
                            w.accepting = true;
                        }
                        let _ = done.send(());
                    }
                    Some(Incoming::NotifyProgress(rv)) => {
                        self.progress_requests.push(rv);
                        self.answer_progress_requests();
                    }
                    None => break,
                },
                () = tokio::time::sleep_until(next_tick) => self.bookmarks(),
                () = self.registry.bookmark_wake.notified() => {}
                _ = stop.changed() => break,
            }
            next_tick = self
                .registry
                .lock()
                .bookmarks
                .next_due()
                .unwrap_or_else(never);
        }
        self.close_all(WatcherState::Closed, true);
    }

    /// Ends every watcher with `state`; when `stop`, none may register again.
    fn close_all(&mut self, state: WatcherState, stop: bool) {
        let all = {
            let mut w = self.registry.lock();
            w.epoch += 1;
            w.accepting = false;
            if stop {
                w.started_rv = u64::MAX;
            }
            w.drain()
        };
        for e in &all {
            e.queue.close(state);
        }
        self.metrics.watchers_active.set(0);
    }

    /// Everything up to `rv` has been handed out (an event, or storage progress).
    fn handled(&mut self, rv: u64) {
        self.registry.last_rv.fetch_max(rv, Ordering::AcqRel);
        if !self.progress_requests.is_empty() {
            self.answer_progress_requests();
        }
    }

    /// Sends a bookmark to the progress-notify watchers for each request the dispatcher has
    /// reached (everything up to its version has been queued to them).
    fn answer_progress_requests(&mut self) {
        let at = self.registry.last_rv.load(Ordering::Acquire);
        let before = self.progress_requests.len();
        self.progress_requests.retain(|rv| *rv > at);
        if self.progress_requests.len() == before {
            return;
        }
        let targets: Vec<Arc<Entry>> = self.registry.lock().progress_watchers().cloned().collect();
        for e in targets {
            // A full buffer has events to read anyway.
            let _ = e.queue.try_push(Item::Bookmark(at));
        }
    }

    /// Sends the due bookmarks at the last handled version and schedules each watcher's next.
    fn bookmarks(&mut self) {
        let now = Instant::now();
        let due: Vec<Arc<Entry>> = {
            let mut w = self.registry.lock();
            let ids = w.bookmarks.pop_due(now);
            ids.into_iter()
                .filter_map(|id| w.get(id).cloned())
                .collect()
        };
        if due.is_empty() {
            return;
        }
        let rv = self.registry.last_rv.load(Ordering::Acquire);
        for e in &due {
            // A full buffer means the watcher has events to read anyway; skip, as upstream.
            let _ = e.queue.try_push(Item::Bookmark(rv));
        }
        let every = self.config.bookmark_frequency;
        let mut w = self.registry.lock();
        for e in due {
            if w.get(e.id).is_none() {
                continue;
            }
            // One due within the second just served would be a duplicate (buckets are whole
            // seconds): the pre-deadline bookmark is sent once.
            let next = next_bookmark(now, every, e.spec.allow_bookmarks, e.spec.deadline)
                .filter(|next| *next > now + Duration::from_secs(1));
            if let Some(next) = next {
                w.bookmarks.add(e.id, next);
            }
        }
    }

    pub(crate) async fn dispatch(&mut self, ev: &CacheEvent, origin: Option<std::time::Instant>) {
        let taken_up = std::time::Instant::now();
        let stages = &self.metrics.stages;
        stages.observe(
            Stage::CacherQueue,
            taken_up.saturating_duration_since(ev.received_at),
        );
        let d = Arc::new(Dispatched {
            origin,
            dispatched_at: Some(taken_up),
            ..Dispatched::new(ev)
        });
        // Attached before anyone can see it, so that a watcher catching up meanwhile finds it;
        // kept alive by the ring.
        ev.attach(&d);
        self.recent.keep([Arc::clone(&d)]);
        let triggers: [Option<&str>; 2] = match &self.config.trigger_field {
            // Absent reads as "", as selectors and the cache's indexes read it.
            Some(f) => [
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
        // O(1) per candidate: the shared event goes to each unfiltered; every watcher
        // applies its own selectors on its own task (see `filter`). Watchers with a quick
        // filter are woken first, so that the runtime (which runs woken tasks roughly in
        // the order they were woken) tends to give them their turn before the costly ones.
        for quick in [true, false] {
            for e in &candidates {
                if filter::is_quick(&e.spec.predicate) != quick {
                    continue;
                }
                match e.queue.try_push(Item::event(Arc::clone(&d), taken_up)) {
                    Ok(()) => {}
                    // Lossless and free for the others: it catches up from the window.
                    Err(PushError::Full(_)) if self.config.stall_resume => {
                        self.too_slow(e);
                    }
                    Err(PushError::Full(item)) => blocked.push((Arc::clone(e), item)),
                    Err(PushError::Closed) => gone.push(e.id),
                }
            }
        }
        candidates.clear();
        self.candidates = candidates;
        if !blocked.is_empty() {
            // Upstream's rule when slow watchers cannot resume: a shared, refilled budget.
            let mut budget = self.budget.take();
            for (e, item) in blocked {
                let started = Instant::now();
                let sent = if budget.is_zero() {
                    None
                } else {
                    let mut slot = Some(item);
                    let push = std::future::poll_fn(|cx| {
                        if let Some(item) = slot.as_mut() {
                            item.restamp(taken_up);
                        }
                        e.queue.poll_push(&mut slot, cx)
                    });
                    tokio::time::timeout(budget, push).await.ok()
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
            unregister(&self.registry, id, WatcherState::Closed, &self.metrics);
        }
        self.handled(d.rv);
        self.metrics.events_dispatched.inc();
        self.metrics
            .dispatch_latency
            .observe(ev.received_at.elapsed().as_secs_f64());
    }

    fn too_slow(&self, e: &Entry) {
        if self.config.stall_resume {
            if unregister(&self.registry, e.id, WatcherState::Detached, &self.metrics) {
                self.metrics.watchers_stalled.inc();
                tracing::debug!(
                    watcher = e.id,
                    "slow watcher detached; it will catch up from the window"
                );
            }
        } else if unregister(&self.registry, e.id, WatcherState::Closed, &self.metrics) {
            self.metrics.watchers_terminated.inc();
            tracing::info!(watcher = e.id, "closing a watcher that cannot keep up");
        }
    }
}
