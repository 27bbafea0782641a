//! One watch on the cacher, as a stream.
//!
//! Attaching registers the watcher with the dispatcher and, under the same lock, reads the
//! version `S` of the newest event whose recipients the dispatcher has already chosen: every
//! event after `S` will reach this watcher live. The window holds every event up to `S` (the
//! feeder applies an event to the cache before queuing it). So:
//! - a watch from a version replays the window's events up to `S` and takes the rest live;
//! - a watch with initial state sends the state of a view at `V ≥ S` and skips live events at
//!   or below `V`, which the state already contains.
//!
//! Each change is thus delivered exactly once, with no gap and in order.
//!
//! # Catch-up is a cursor
//!
//! The replay keeps only a position: it reads the window from the latest view in chunks of at
//! most [`CHUNK`] events, so a watcher catching up (or stalled while it does) holds O(1)
//! memory whatever the backlog, and pins no old version of the window. Events are reused in
//! the form the dispatcher gave them (their one shared encoding) while the dispatcher keeps
//! them alive. If the window moves past the cursor, the watch ends with 410 Expired.
//!
//! A detached (slow) watcher drains its buffer, then attaches again from the last version it
//! delivered. A watcher ended by a relist of the cache ends with "not ready" (429) once; one
//! that was detached across a relist learns it when it comes back. A closed watcher drains
//! its buffer and ends. Dropping the stream unregisters it.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::StreamExt;
use listwatch_storage::{
    Bookmark, Error, Key, ListOptions, Result, SelectionPredicate, WatchEvent, WatchStream,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::Inner;
use crate::dispatch::Dispatched;
use crate::registry::{
    ACTIVE, CLOSED, Control, DETACHED, Entry, Item, RESET, next_bookmark, unregister,
};

/// At most this many matching events are buffered per catching-up watcher...
pub(crate) const CHUNK: usize = 64;
/// ...from at most this many window events read per refill.
const SCAN: usize = 1024;

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// The current state as ADDED events, then changes; optionally the
    /// initial-events-end bookmark after the state.
    State { end_bookmark: bool },
    /// Every change after this version.
    Since(u64),
}

pub(crate) struct Spec {
    pub(crate) key: Key,
    pub(crate) predicate: SelectionPredicate,
    pub(crate) scope: (Box<str>, Box<str>),
    pub(crate) trigger: Option<Box<str>>,
    pub(crate) allow_bookmarks: bool,
    pub(crate) progress_notify: bool,
    pub(crate) deadline: Option<Instant>,
}

/// The part of the window a watcher still has to read: the events after `after`, up to and
/// including `until`.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    after: u64,
    until: u64,
}

struct Watcher {
    inner: Arc<Inner>,
    spec: Spec,
    /// Events to send before anything else: the initial state, or a chunk of the window.
    pending: VecDeque<WatchEvent>,
    /// What is left of the window to replay.
    cursor: Option<Cursor>,
    rx: Option<mpsc::Receiver<Item>>,
    id: u64,
    control: Arc<Control>,
    /// The registry epoch and cache generation this watch belongs to (see `registry`).
    epoch: Option<u64>,
    generation: u64,
    /// Live items at or below this version were covered by the state or the replay.
    floor: u64,
    /// The last version delivered to the consumer.
    last_rv: u64,
    done: bool,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        unregister(&self.inner.registry, self.id, CLOSED, &self.inner.metrics);
    }
}

pub(crate) fn open(inner: Arc<Inner>, spec: Spec, start: Start) -> Result<WatchStream> {
    let mut w = Watcher {
        inner,
        spec,
        pending: VecDeque::new(),
        cursor: None,
        rx: None,
        id: 0,
        control: Arc::default(),
        epoch: None,
        generation: 0,
        floor: 0,
        last_rv: 0,
        done: false,
    };
    w.attach(start)?;
    Ok(futures::stream::unfold(w, |mut w| async move {
        let ev = w.next().await?;
        Some((ev, w))
    })
    .boxed())
}

impl Watcher {
    fn attach(&mut self, start: Start) -> Result<()> {
        let inner = Arc::clone(&self.inner);
        if let Start::Since(rv) = start {
            inner.check_compacted(rv)?;
        }
        let (tx, rx) = mpsc::channel(inner.watcher_buffer(self.spec.trigger.is_some()));
        let control = Arc::new(Control::default());
        let first_bookmark = next_bookmark(
            Instant::now(),
            inner.config.bookmark_frequency,
            self.spec.allow_bookmarks,
            self.spec.deadline,
        );
        let (dispatched, earliest) = {
            let mut w = inner.registry.lock();
            if !w.accepting || self.epoch.is_some_and(|e| e != w.epoch) {
                drop(w);
                return Err(inner.reinitializing());
            }
            self.epoch = Some(w.epoch);
            let id = w.next_id();
            let entry = Arc::new(Entry {
                id,
                scope: self.spec.scope.clone(),
                trigger: self.spec.trigger.clone(),
                predicate: self.spec.predicate.clone(),
                tx,
                allow_bookmarks: self.spec.allow_bookmarks,
                progress_notify: self.spec.progress_notify,
                deadline: self.spec.deadline,
                control: Arc::clone(&control),
            });
            let earliest = w.add(entry, first_bookmark);
            self.id = id;
            (w.started_rv, earliest)
        };
        if earliest {
            inner.registry.bookmark_wake.notify_one();
        }
        inner.metrics.watchers_active.inc();
        self.control = control;
        self.rx = Some(rx);
        // Registered: every event after `dispatched` reaches us live. The view holds every
        // event up to `dispatched` (the feeder applies before queuing).
        let view = inner.reader.view();
        self.generation = view.generation();
        match start {
            Start::State { end_bookmark } => {
                self.floor = view.resource_version();
                let opts = ListOptions {
                    resource_version: Some(0),
                    predicate: self.spec.predicate.clone(),
                    recursive: self.spec.key.is_collection(),
                    ..ListOptions::default()
                };
                let list = view.list(&self.spec.key, &opts)?;
                inner.metrics.init_events.inc_by(list.items.len() as u64);
                self.pending
                    .extend(list.items.into_iter().map(WatchEvent::Added));
                if end_bookmark {
                    self.pending.push_back(WatchEvent::Bookmark(Bookmark {
                        resource_version: self.floor,
                        initial_events_end: true,
                    }));
                }
            }
            Start::Since(rv) => {
                // Checked now, so that a version out of the window fails the watch itself.
                view.events_since(rv)?;
                // Replay only what the dispatcher already passed us by; later events (even
                // those the view holds) come live, sharing the dispatcher's encoding.
                self.floor = dispatched.max(rv);
                self.cursor = (self.floor > rv).then_some(Cursor {
                    after: rv,
                    until: self.floor,
                });
            }
        }
        self.last_rv = self.last_rv.max(self.floor);
        Ok(())
    }

    /// Reads the next chunk of the window into `pending`; an error ends the watch.
    fn refill(&mut self, cursor: Cursor) -> Result<()> {
        let view = self.inner.reader.view();
        if view.generation() != self.generation {
            return Err(self.inner.reinitializing());
        }
        let events = view.events_since(cursor.after)?;
        let mut after = cursor.after;
        for ev in events.iter().take(SCAN) {
            if ev.resource_version > cursor.until || self.pending.len() >= CHUNK {
                break;
            }
            after = ev.resource_version;
            if !self.spec.key.contains(&ev.key) {
                continue;
            }
            // The dispatched form (and its one encoding) while the dispatcher keeps it.
            let d = ev
                .derived::<Dispatched>()
                .unwrap_or_else(|| Arc::new(Dispatched::new(ev, false)));
            if let Some(t) = d.event_type_for(&self.spec.predicate) {
                self.pending.push_back(d.to_watch_event(t));
            }
        }
        self.cursor = (after < cursor.until && after > cursor.after).then_some(Cursor {
            after,
            until: cursor.until,
        });
        if self.cursor.is_none() && after < cursor.until {
            // Nothing read although events remain: the window cannot have them any more.
            return Err(Error::internal(format!(
                "the watch cache's window ends before {}",
                cursor.until
            )));
        }
        Ok(())
    }

    async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                if let Some(rv) = ev.resource_version() {
                    self.last_rv = self.last_rv.max(rv);
                }
                return Some(ev);
            }
            if self.done {
                return None;
            }
            if let Some(cursor) = self.cursor.take() {
                if let Err(e) = self.refill(cursor) {
                    self.done = true;
                    return Some(WatchEvent::Error(e));
                }
                continue;
            }
            let item = self.rx.as_mut()?.recv().await;
            match item {
                Some(Item::Event(d, t)) => {
                    if d.rv <= self.floor {
                        continue;
                    }
                    self.last_rv = d.rv;
                    return Some(d.to_watch_event(t));
                }
                Some(Item::Bookmark(rv)) => {
                    // A bookmark at the last delivered version still tells the client it is
                    // current (upstream's progress notifications do the same); older ones do not.
                    if !self.spec.allow_bookmarks || rv < self.last_rv {
                        continue;
                    }
                    self.last_rv = rv;
                    return Some(WatchEvent::Bookmark(Bookmark {
                        resource_version: rv,
                        initial_events_end: false,
                    }));
                }
                None => {
                    self.rx = None;
                    match self.control.state() {
                        DETACHED => {
                            let from = self.last_rv;
                            if let Err(e) = self.attach(Start::Since(from)) {
                                self.done = true;
                                let e = match e {
                                    Error::Expired { .. } | Error::NotReady { .. } => e,
                                    other => Error::internal(format!(
                                        "cannot resume a detached watch: {other}"
                                    )),
                                };
                                return Some(WatchEvent::Error(e));
                            }
                        }
                        RESET => {
                            self.done = true;
                            return Some(WatchEvent::Error(self.inner.reinitializing()));
                        }
                        ACTIVE | CLOSED => return None,
                        _ => return None,
                    }
                }
            }
        }
    }
}

/// The dispatcher scope of a watch: namespace and name fixed by the key or by exact
/// `metadata.namespace` / `metadata.name` field selectors, `""` where free.
pub(crate) fn scope_of(key: &Key, pred: &SelectionPredicate) -> (Box<str>, Box<str>) {
    let ns = key
        .namespace()
        .or_else(|| pred.field.exact_match("metadata.namespace"))
        .unwrap_or("");
    let name = key
        .name()
        .or_else(|| pred.field.exact_match("metadata.name"))
        .unwrap_or("");
    (ns.into(), name.into())
}
