//! One watch on the cacher, as a stream.
//!
//! Attaching registers the watcher with the dispatcher and, under the same lock, reads the
//! version `S` of the newest event whose recipients the dispatcher has already chosen: every
//! event after `S` will reach this watcher live. The window holds every event up to `S` (the
//! feeder applies an event to the cache before queuing it). So:
//! - a watch from a version replays the window's events up to `S` and takes the rest live;
//! - a watch with initial state sends the state of a view at `V ≥ S` and skips live events at
//!   or below `V`, which the state already contains. The state is read through a cursor on
//!   that view, [`CHUNK`] objects at a time as the consumer reads, never materialised whole.
//!
//! Each change is thus delivered exactly once, with no gap and in order.
//!
//! # Catch-up is a cursor
//!
//! The replay keeps only a position: it reads the window from the latest view in chunks of at
//! most [`CHUNK`] events, so a watcher catching up (or stalled while it does) holds O(1)
//! memory whatever the backlog, and pins no old version of the window. Events are reused in
//! the form the dispatcher gave them (their one shared encoding per format) while the ring of
//! recent forms keeps them (see `dispatch::recent`); an event whose form has left it gets a new shared
//! form, attached to the window's event and kept in the ring, so that watchers replaying it
//! at once or later share that one. If the window moves past the cursor, the watch ends with
//! 410 Expired.
//!
//! A detached (slow) watcher drains its buffer, then attaches again from the last version it
//! delivered. A watcher ended by a relist of the cache ends with "not ready" (429) once; one
//! that was detached across a relist learns it when it comes back. A closed watcher drains
//! its buffer and ends. Dropping the stream unregisters it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use listwatch_storage::{Bookmark, Error, Result, WatchEvent, WatchStream};
use tokio::time::Instant;

use crate::Inner;
use crate::dispatch::registry::{Entry, next_bookmark, unregister};
use crate::event::{Dispatched, Item};
use crate::latency::Stage;
use crate::watcher::queue::Queue;
use crate::watcher::spec::{Spec, Start};
use crate::watcher::state::{AfterDrain, WatcherState};

/// At most this many matching events are buffered per catching-up watcher...
pub(crate) const CHUNK: usize = 64;
/// ...from at most this many window events read per refill.
const SCAN: usize = 1024;

/// At most this many live events a watcher's selectors reject are passed over in one poll
/// before it yields (the queue is refilled as fast as it is read, so an unbounded loop could
/// hold a worker thread).
const PASS_OVER_BUDGET: usize = 256;

/// A watcher's epoch before it first registers (registry epochs count up from 0).
const NO_EPOCH: u64 = u64::MAX;

/// The part of the window a watcher still has to read: the events after `after`, up to and
/// including `until`.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    after: u64,
    until: u64,
}

/// One watch's stream: a plain struct polled in place (no boxed future per watch), holding
/// its registration while attached.
/// What is left of a watch's initial state: the view it is read from (held, so the state
/// stays that version's whatever the writer does; persistent maps share all but what
/// changed since) and the key the next chunk starts at.
struct StateCursor {
    view: Arc<listwatch_watchcache::CacheView>,
    next: String,
    end_bookmark: bool,
}

/// What a watcher sends before its live events.
#[derive(Default)]
struct Replay {
    /// Events to send before anything else: a chunk of the initial state, or of the window.
    pending: VecDeque<WatchEvent>,
    /// What is left of the initial state to send.
    state: Option<StateCursor>,
    /// What is left of the window to replay.
    cursor: Option<Cursor>,
}

struct Watcher {
    inner: Arc<Inner>,
    /// The registration (spec and buffer); the last one once detached or closed.
    entry: Arc<Entry>,
    /// What to send before live events, if anything (boxed: an idle watcher has none).
    replay: Option<Box<Replay>>,
    /// The registry epoch and cache generation this watch belongs to (see `registry`); the
    /// epoch is [`NO_EPOCH`] until the first registration.
    epoch: u64,
    generation: u64,
    /// Live items at or below this version were covered by the state or the replay.
    floor: u64,
    /// The last version delivered to the consumer, or passed over because the watcher's
    /// selectors reject it: a resume after being detached starts after it.
    last_rv: u64,
    done: bool,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        unregister(
            &self.inner.registry,
            self.entry.id,
            WatcherState::Closed,
            &self.inner.metrics,
        );
    }
}

pub(crate) fn open(inner: Arc<Inner>, spec: Spec, start: Start) -> Result<WatchStream> {
    let capacity = inner.watcher_buffer(spec.trigger.is_some());
    let entry = Arc::new(Entry {
        id: inner.registry.next_id(),
        spec,
        queue: Queue::new(capacity),
    });
    let mut w = Watcher {
        inner,
        entry,
        replay: None,
        epoch: NO_EPOCH,
        generation: 0,
        floor: 0,
        last_rv: 0,
        done: false,
    };
    w.attach(start, false)?;
    Ok(Box::pin(w))
}

impl Stream for Watcher {
    type Item = WatchEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        self.get_mut().poll_event(cx)
    }
}

impl Watcher {
    /// Registers the watcher (`again`: with a new registration, after being detached) and
    /// sets up what it replays.
    fn attach(&mut self, start: Start, again: bool) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        if again {
            let spec = self.entry.spec.clone();
            let capacity = inner.watcher_buffer(spec.trigger.is_some());
            self.entry = Arc::new(Entry {
                id: inner.registry.next_id(),
                spec,
                queue: Queue::new(capacity),
            });
        }
        let spec = &self.entry.spec;
        let first_bookmark = next_bookmark(
            Instant::now(),
            inner.config.bookmark_frequency,
            spec.allow_bookmarks,
            spec.deadline,
        );
        let (dispatched, earliest) = {
            let mut w = inner.registry.lock();
            if !w.accepting || (self.epoch != NO_EPOCH && self.epoch != w.epoch) {
                drop(w);
                return Err(inner.reinitializing());
            }
            self.epoch = w.epoch;
            let earliest = w.add(Arc::clone(&self.entry), first_bookmark);
            (w.started_rv, earliest)
        };
        if earliest {
            inner.registry.bookmark_wake.notify_one();
        }
        inner.metrics.watchers_active.inc();
        // Registered: every event after `dispatched` reaches us live. The view holds every
        // event up to `dispatched` (the feeder applies before queuing).
        let view = inner.reader.view();
        self.generation = view.generation();
        match start {
            Start::State { end_bookmark } => {
                self.floor = view.resource_version();
                // The first chunk now (so that a bad key fails the watch itself, and an empty
                // state with nothing after it needs no replay buffer); the rest through a
                // cursor on this view, a chunk at a time as the consumer reads.
                let mut replay = Replay::default();
                self.read_state(&mut replay, &view, None, end_bookmark)?;
                if !replay.pending.is_empty() || replay.state.is_some() {
                    self.replay = Some(Box::new(replay));
                }
            }
            Start::Since(rv) => {
                // Checked now, so that a version out of the window fails the watch itself
                // (the window alone decides, as upstream; the backend's compaction does not).
                // A version the cache has not reached yet is accepted: every event after it
                // comes live, and the floor skips the ones up to it.
                if rv <= view.resource_version() {
                    view.events_since(rv)?;
                }
                // Replay only what the dispatcher already passed us by; later events (even
                // those the view holds) come live, sharing the dispatcher's encoding.
                self.floor = dispatched.max(rv);
                if self.floor > rv {
                    self.replay.get_or_insert_default().cursor = Some(Cursor {
                        after: rv,
                        until: self.floor,
                    });
                }
            }
        }
        self.last_rv = self.last_rv.max(self.floor);
        Ok(())
    }

    /// Reads the next chunk of the initial state (from the key `start`) of `view` into
    /// `replay`, leaving a cursor when more may follow, else the end bookmark if asked for.
    fn read_state(
        &self,
        replay: &mut Replay,
        view: &Arc<listwatch_watchcache::CacheView>,
        start: Option<&str>,
        end_bookmark: bool,
    ) -> Result<()> {
        let spec = &self.entry.spec;
        let (items, next) = view.state_chunk(&spec.key, &spec.predicate, start, CHUNK)?;
        self.inner.metrics.init_events.inc_by(items.len() as u64);
        replay
            .pending
            // One encoding per format for every watcher replaying the same object at once.
            .extend(
                items
                    .into_iter()
                    .map(|o| WatchEvent::Added(o.with_replay_encoding())),
            );
        replay.state = match next {
            Some(next) => Some(StateCursor {
                view: Arc::clone(view),
                next,
                end_bookmark,
            }),
            None => {
                if end_bookmark {
                    replay.pending.push_back(WatchEvent::Bookmark(Bookmark {
                        resource_version: self.floor,
                        initial_events_end: true,
                    }));
                }
                None
            }
        };
        Ok(())
    }

    /// Reads the next chunk of the window into `replay`; an error ends the watch.
    fn refill(&self, replay: &mut Replay, cursor: Cursor) -> Result<()> {
        let view = self.inner.reader.view();
        if view.generation() != self.generation {
            return Err(self.inner.reinitializing());
        }
        let events = view.events_since(cursor.after)?;
        let mut after = cursor.after;
        let mut rebuilt = Vec::new();
        for ev in events.iter().take(SCAN) {
            if ev.resource_version > cursor.until || replay.pending.len() >= CHUNK {
                break;
            }
            after = ev.resource_version;
            if !self.entry.spec.key.contains(&ev.key) {
                continue;
            }
            let spec = &self.entry.spec;
            let Some(t) = spec.event_type_for(ev.event_type, &ev.object, ev.prev_object.as_ref())
            else {
                continue;
            };
            // The dispatched form (and its one encoding per format), rebuilt and shared if
            // it left the ring.
            let d = ev.derived_or_attach(|| {
                let d = Arc::new(Dispatched::new(ev));
                rebuilt.push(Arc::clone(&d));
                d
            });
            replay.pending.push_back(d.to_watch_event(t));
        }
        if !rebuilt.is_empty() {
            self.inner.recent.keep(rebuilt);
        }
        replay.cursor = (after < cursor.until && after > cursor.after).then_some(Cursor {
            after,
            until: cursor.until,
        });
        if replay.cursor.is_none() && after < cursor.until {
            // Nothing read although events remain: the window cannot have them any more.
            return Err(Error::internal(format!(
                "the watch cache's window ends before {}",
                cursor.until
            )));
        }
        Ok(())
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<WatchEvent>> {
        let mut passed_over = 0usize;
        loop {
            if let Some(mut replay) = self.replay.take() {
                if let Some(ev) = replay.pending.pop_front() {
                    if let Some(rv) = ev.resource_version() {
                        self.last_rv = self.last_rv.max(rv);
                    }
                    // Once sent, the replay's buffer goes: an idle watcher keeps none.
                    if !replay.pending.is_empty()
                        || replay.cursor.is_some()
                        || replay.state.is_some()
                    {
                        self.replay = Some(replay);
                    }
                    return Poll::Ready(Some(ev));
                }
                if self.done {
                    return Poll::Ready(None);
                }
                if let Some(state) = replay.state.take() {
                    if let Err(e) = self.read_state(
                        &mut replay,
                        &state.view,
                        Some(&state.next),
                        state.end_bookmark,
                    ) {
                        self.done = true;
                        return Poll::Ready(Some(WatchEvent::Error(e)));
                    }
                    self.replay = Some(replay);
                    continue;
                }
                if let Some(cursor) = replay.cursor.take() {
                    if let Err(e) = self.refill(&mut replay, cursor) {
                        self.done = true;
                        return Poll::Ready(Some(WatchEvent::Error(e)));
                    }
                    self.replay = Some(replay);
                }
                continue;
            }
            if self.done {
                return Poll::Ready(None);
            }
            let item = std::task::ready!(self.entry.queue.poll_pop(cx));
            match item {
                Some(Item::Event(d, pushed_after)) => {
                    // Covered by the state or replay this watch started with: not a delivery,
                    // so no stage observes it.
                    if d.rv <= self.floor {
                        continue;
                    }
                    // This watcher's selectors, on its own task (see `filter`). What they
                    // reject is passed over: the resume point moves past it, and the loop
                    // goes on to the next item, so rejected events leave the buffer as fast
                    // as the consumer polls — but a poll passes over at most
                    // `PASS_OVER_BUDGET` of them before yielding to the runtime.
                    let spec = &self.entry.spec;
                    let Some(t) = spec.event_type_for(d.event_type, &d.object, d.prev.as_ref())
                    else {
                        self.last_rv = self.last_rv.max(d.rv);
                        passed_over += 1;
                        if passed_over >= PASS_OVER_BUDGET {
                            cx.waker().wake_by_ref();
                            return Poll::Pending;
                        }
                        continue;
                    };
                    self.last_rv = d.rv;
                    // Handed to the consumer (the watch server writes it out at once).
                    let now = std::time::Instant::now();
                    let stages = &self.inner.metrics.stages;
                    stages.observe(Stage::CacheToWatcher, Item::pushed_after(pushed_after));
                    if let Some(at) = d.dispatched_at {
                        stages.observe(Stage::WatcherQueue, now.saturating_duration_since(at));
                    }
                    if let Some(at) = d.origin {
                        stages.observe(Stage::Total, now.saturating_duration_since(at));
                    }
                    return Poll::Ready(Some(d.to_watch_event(t)));
                }
                Some(Item::Bookmark(rv)) => {
                    // A bookmark at the last delivered version still tells the client it is
                    // current (upstream's progress notifications do the same); older ones do not.
                    if !self.entry.spec.allow_bookmarks || rv < self.last_rv {
                        continue;
                    }
                    self.last_rv = rv;
                    return Poll::Ready(Some(WatchEvent::Bookmark(Bookmark {
                        resource_version: rv,
                        initial_events_end: false,
                    })));
                }
                None => {
                    // Drained and no longer registered (the dispatcher unregistered it).
                    match self.entry.queue.status().after_drain() {
                        AfterDrain::Resume => {
                            let from = self.last_rv;
                            if let Err(e) = self.attach(Start::Since(from), true) {
                                self.done = true;
                                let e = match e {
                                    Error::Expired { .. } | Error::NotReady { .. } => e,
                                    other => Error::internal(format!(
                                        "cannot resume a detached watch: {other}"
                                    )),
                                };
                                return Poll::Ready(Some(WatchEvent::Error(e)));
                            }
                        }
                        AfterDrain::NotReady => {
                            self.done = true;
                            return Poll::Ready(Some(WatchEvent::Error(
                                self.inner.reinitializing(),
                            )));
                        }
                        // `poll_pop` ends only once the state has left `Active`, so `Wait`
                        // is not reached here; were it, ending is the safe reading.
                        AfterDrain::End | AfterDrain::Wait => return Poll::Ready(None),
                    }
                }
            }
        }
    }
}
