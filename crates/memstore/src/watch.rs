//! Watchers: each is a cursor into the store's event log, served by its own task.
//!
//! A watcher never has events pushed at it. Its task reads the log after its cursor in
//! batches (taking the read lock only to clone `Arc`s), filters them, and sends them into a
//! small bounded channel that the consumer's stream drains. A slow consumer therefore costs
//! nothing but its cursor; if compaction passes the cursor, the watcher ends with an
//! `Expired` error event, so nothing is buffered without limit and no gap is ever silent.
//!
//! Invariant: events go out in revision order, each at most once; a bookmark at revision `r`
//! is sent only when every event up to `r` has been sent.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use listwatch_api::Object;
use listwatch_storage::{Bookmark, Error, Key, SelectionPredicate, WatchEvent};
use tokio::sync::{mpsc, watch};

use crate::state::{LogEntry, State};

/// What a write or progress request broadcasts to idle watchers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tick {
    pub(crate) rev: u64,
    pub(crate) progress_requests: u64,
}

pub(crate) struct WatchSpec {
    pub(crate) key: Key,
    pub(crate) predicate: SelectionPredicate,
    /// Deliver events with revisions above this.
    pub(crate) cursor: u64,
    /// Initial state to send first, already filtered, and whether to end it with a bookmark.
    pub(crate) initial: Option<(Vec<Object>, bool)>,
    /// Whether progress (interval and requested) becomes bookmarks.
    pub(crate) bookmarks: bool,
    pub(crate) progress_interval: Duration,
}

const BATCH: usize = 256;

/// Converts one log entry for a watcher, turning selector transitions into ADDED/DELETED.
fn convert(entry: &LogEntry, key: &Key, pred: &SelectionPredicate) -> Option<WatchEvent> {
    if !key.contains(&entry.key) {
        return None;
    }
    let cur = entry.value.as_ref().filter(|o| pred.matches(o));
    // The previous state, at this write's revision, as upstream sends it on a DELETED.
    let prev_passes = entry.prev.as_ref().is_some_and(|o| pred.matches(o));
    match (cur, &entry.prev) {
        (Some(o), Some(p)) if prev_passes => Some(WatchEvent::Modified {
            object: o.clone(),
            prev: Some(p.clone()),
        }),
        (Some(o), _) => Some(WatchEvent::Added(o.clone())),
        (None, Some(p)) if prev_passes => {
            Some(WatchEvent::Deleted(p.with_resource_version(entry.rev)))
        }
        (None, _) => None,
    }
}

pub(crate) async fn run(
    state: Arc<RwLock<State>>,
    mut ticks: watch::Receiver<Tick>,
    spec: WatchSpec,
    tx: mpsc::Sender<WatchEvent>,
) {
    let WatchSpec {
        key,
        predicate,
        mut cursor,
        initial,
        bookmarks,
        progress_interval,
    } = spec;
    if let Some((objects, end_bookmark)) = initial {
        for o in objects {
            if tx.send(WatchEvent::Added(o)).await.is_err() {
                return;
            }
        }
        if end_bookmark {
            let b = Bookmark {
                resource_version: cursor,
                initial_events_end: true,
            };
            if tx.send(WatchEvent::Bookmark(b)).await.is_err() {
                return;
            }
        }
    }
    let mut seen_requests = ticks.borrow().progress_requests;
    loop {
        // Mark the ticks seen *before* reading the log: a write committed after this point
        // makes `changed()` fire below, while one committed before it is in the batch. Marking
        // them after the read would lose the wake-up of a write landing in between.
        let requests = ticks.borrow_and_update().progress_requests;
        // Take a batch under the read lock; only Arc clones happen while it is held.
        let batch: Result<Vec<Arc<LogEntry>>, Error> = match state.read() {
            Ok(s) => {
                if cursor < s.compacted {
                    Err(Error::too_old(cursor, s.compacted))
                } else {
                    let first = s.compacted + 1;
                    let skip = usize::try_from(cursor + 1 - first).unwrap_or(usize::MAX);
                    Ok(s.log.iter().skip(skip).take(BATCH).cloned().collect())
                }
            }
            Err(_) => Err(Error::internal("memstore lock poisoned")),
        };
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                let _ = tx.send(WatchEvent::Error(e)).await;
                return;
            }
        };
        if !batch.is_empty() {
            for entry in &batch {
                cursor = entry.rev;
                if let Some(ev) = convert(entry, &key, &predicate) {
                    if tx.send(ev).await.is_err() {
                        return;
                    }
                }
            }
            continue;
        }
        // Caught up: everything at or below `cursor` has been sent.
        if bookmarks && requests != seen_requests {
            seen_requests = requests;
            let b = Bookmark {
                resource_version: cursor,
                initial_events_end: false,
            };
            if tx.send(WatchEvent::Bookmark(b)).await.is_err() {
                return;
            }
            continue;
        }
        let wait = async {
            tokio::select! {
                changed = ticks.changed() => changed.is_ok(),
                () = tx.closed() => false,
            }
        };
        if bookmarks {
            match tokio::time::timeout(progress_interval, wait).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(_) => {
                    let b = Bookmark {
                        resource_version: cursor,
                        initial_events_end: false,
                    };
                    if tx.send(WatchEvent::Bookmark(b)).await.is_err() {
                        return;
                    }
                }
            }
        } else if !wait.await {
            return;
        }
    }
}
