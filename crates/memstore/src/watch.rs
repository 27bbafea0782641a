//! Watchers: each is a cursor into its resource's event log, served by its own task.
//!
//! A watcher never has events pushed at it. Its task reads the partition's log after its
//! cursor, up to the visible revision, in batches (taking the partition's read lock only to
//! clone `Arc`s), filters them, and sends them into a
//! small bounded channel that the consumer's stream drains. A slow consumer therefore costs
//! nothing but its cursor; if compaction passes the cursor, the watcher ends with an
//! `Expired` error event, so nothing is buffered without limit and no gap is ever silent.
//!
//! Invariant: events go out in revision order, each at most once; a bookmark at revision `r`
//! is sent only when every event up to `r` has been sent. A watcher sleeps until a write to
//! its resource or directory (namespace) becomes visible, a progress request, or its
//! bookmark interval: writes elsewhere never wake it.

use std::sync::Arc;
use std::time::Duration;

use listwatch_api::Object;
use listwatch_storage::{Bookmark, Error, Key, SelectionPredicate, WatchEvent};
use tokio::sync::{mpsc, watch};

use crate::core::Core;
use crate::part::{LogEntry, Partition};

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
    core: Arc<Core>,
    part: Arc<Partition>,
    mut ticks: watch::Receiver<u64>,
    mut progress: watch::Receiver<u64>,
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
    let mut seen_requests = *progress.borrow();
    loop {
        // Mark the wake-ups seen *before* reading the log: a write made visible after this
        // point makes `changed()` fire below, while one made visible before it is in the
        // batch. Marking them after the read would lose the wake-up of a write in between.
        ticks.borrow_and_update();
        let requests = *progress.borrow_and_update();
        let visible = core.visible();
        // Take a batch under the read lock; only Arc clones happen while it is held. Expired
        // only if compaction dropped an entry this watcher has not delivered: a watcher that
        // is caught up on its resource survives compaction, however far it moves.
        let batch: Result<Vec<Arc<LogEntry>>, Error> = match part.state.read() {
            Ok(st) => {
                if cursor < st.dropped {
                    Err(Error::too_old(cursor, core.compacted()))
                } else {
                    Ok(st.entries(cursor, visible, BATCH))
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
        // Caught up: every write of this resource up to `visible` has been sent.
        cursor = cursor.max(visible);
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
                changed = progress.changed(), if bookmarks => changed.is_ok(),
                () = tx.closed() => false,
            }
        };
        if bookmarks {
            match tokio::time::timeout(progress_interval, wait).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(_) => {
                    let b = Bookmark {
                        resource_version: core.visible().max(cursor),
                        initial_events_end: false,
                    };
                    // Only if nothing of ours is pending below that revision.
                    let pending = part
                        .state
                        .read()
                        .map(|st| !st.entries(cursor, b.resource_version, 1).is_empty())
                        .unwrap_or(true);
                    if pending {
                        continue;
                    }
                    cursor = b.resource_version;
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
