//! One watch on the cacher, as a stream.
//!
//! Attaching registers the watcher with the dispatcher and, under the same lock, reads the
//! version `S` of the newest event whose recipients the dispatcher has already chosen: every
//! event after `S` will reach this watcher live. Only then does it take a view of the cache,
//! which holds every event up to `S` (the feeder applies an event to the cache before
//! queuing it). So:
//! - a watch from a version replays the window's events up to `S` (reusing the dispatcher's
//!   shared encodings while it remembers them) and takes the rest live;
//! - a watch with initial state sends the view's state at `V ≥ S` and skips live events at
//!   or below `V`, which the state already contains.
//!
//! Each change is thus delivered exactly once, with no gap and in order.
//!
//! A detached (slow) watcher drains its buffer, then attaches again from the last version it
//! delivered; if those events have left the window it ends with 410 Expired. A closed watcher
//! drains its buffer and ends. Dropping the stream unregisters it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use futures::StreamExt;
use listwatch_storage::{
    Bookmark, Error, Key, ListOptions, Result, SelectionPredicate, WatchEvent, WatchStream,
};
use tokio::sync::mpsc;

use crate::Inner;
use crate::dispatch::{ACTIVE, CLOSED, Control, DETACHED, Dispatched, Entry, Item, unregister};

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
}

struct Watcher {
    inner: Arc<Inner>,
    spec: Spec,
    /// Events to send before reading the buffer (initial state or window replay).
    pending: VecDeque<WatchEvent>,
    rx: Option<mpsc::Receiver<Item>>,
    id: u64,
    control: Arc<Control>,
    /// Live items at or below this version were covered by the attach-time view.
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
        rx: None,
        id: 0,
        control: Arc::default(),
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
        let epoch_ms = u64::try_from(inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let bookmark_ms =
            u64::try_from(inner.config.bookmark_frequency.as_millis()).unwrap_or(u64::MAX);
        let dispatched;
        {
            let mut w = inner.registry.lock();
            let id = w.next_id();
            dispatched = w.started_rv;
            w.add(Arc::new(Entry {
                id,
                scope: self.spec.scope.clone(),
                trigger: self.spec.trigger.clone(),
                predicate: self.spec.predicate.clone(),
                tx,
                allow_bookmarks: self.spec.allow_bookmarks,
                progress_notify: self.spec.progress_notify,
                next_bookmark_ms: AtomicU64::new(epoch_ms.saturating_add(bookmark_ms)),
                control: Arc::clone(&control),
            }));
            self.id = id;
        }
        inner.metrics.watchers_active.inc();
        self.control = control;
        self.rx = Some(rx);
        // Registered: every event after `dispatched` reaches us live. Now the view, which
        // already holds every event up to `dispatched` (the feeder applies before queuing).
        let view = inner.reader.view();
        self.floor = view.resource_version();
        let pred = &self.spec.predicate;
        match start {
            Start::State { end_bookmark } => {
                let opts = ListOptions {
                    resource_version: Some(0),
                    predicate: pred.clone(),
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
                // Replay only what the dispatcher already passed us by; later events (even
                // those the view holds) come live, sharing the dispatcher's encoding.
                self.floor = dispatched.max(rv);
                for ev in view.events_since(rv)?.iter() {
                    if ev.resource_version > self.floor {
                        break;
                    }
                    if !self.spec.key.contains(&ev.key) {
                        continue;
                    }
                    // Reuse the dispatched form (and its one encoding) while it is remembered.
                    let d = inner
                        .registry
                        .recent(ev.resource_version)
                        .unwrap_or_else(|| Arc::new(Dispatched::new(ev, false)));
                    if let Some(t) = d.event_type_for(pred) {
                        self.pending.push_back(d.to_watch_event(t));
                    }
                }
            }
        }
        self.last_rv = self.last_rv.max(self.floor);
        Ok(())
    }

    async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            if let Some(ev) = self.pending.pop_front() {
                if matches!(ev, WatchEvent::Error(_)) {
                    self.done = true;
                }
                return Some(ev);
            }
            if self.done {
                return None;
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
                                    Error::Expired { .. } => e,
                                    other => Error::internal(format!(
                                        "cannot resume a detached watch: {other}"
                                    )),
                                };
                                return Some(WatchEvent::Error(e));
                            }
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
