//! Progress notifications of etcd watches: the hub through which
//! [`Storage::request_watch_progress`](listwatch_storage::Storage::request_watch_progress)
//! reaches every open watch, and the guard that keeps bookmarks from running ahead of
//! undelivered events.
//!
//! # The progress guard (etcd issue 15220)
//!
//! etcd's API promises that after a progress notification at revision R every later event on
//! the stream has a revision above R. etcd before 3.4.31 / 3.5.13 (Debian's 3.4.23 included)
//! breaks that promise for *requested* progress: it answers a progress request at once with its
//! current revision through a control queue that overtakes the events a watcher still owes
//! (a watch that started in the past, or one that fell behind), and even a caught-up watcher's
//! answer can overtake events already queued for it. Reproduced here (`tests/progress_guard.rs`)
//! on every run: a watch with 3001 events still to replay got "progress at 3003" while the
//! events delivered so far ended at revision 2. Passed on as a bookmark, that would tell the
//! watch cache it had seen everything up to 3003 while 3001 events were missing.
//!
//! The guard keeps, per watch, `delivered`: a revision such that every event at or below it has
//! been sent downstream. It starts at the watch's start revision − 1 (nothing older is owed) or
//! at the revision of the initial listing, and rises with each event. Then:
//! - a requested progress response (etcd marks it with watch id −1) at R ≤ `delivered` only
//!   confirms what is known; the bookmark goes out at `delivered` (never lower: an answer can
//!   also lag behind events already sent);
//! - one at R > `delivered` is trusted only if the version of the member the stream is on has
//!   the fix (asked when each stream starts); otherwise it is held back (remembered, not emitted). An event beyond it, or etcd's own periodic progress
//!   notification (sent with the watcher's id, and only for watchers that have caught up, so in
//!   order with events), releases the knowledge later;
//! - etcd's periodic notification at R is trusted: `delivered` becomes R.
//!
//! The cost on affected servers: once etcd's revision has moved past a watch's last event
//! (writes to other resources), that watch reports progress beyond its last event only after
//! its next event or etcd's periodic notification
//! (`--experimental-watch-progress-notify-interval`, 10 minutes by default; run such etcd
//! with a few seconds when something waits for progress, as the tests do).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// The open watches that want progress notifications; [`ProgressHub::request_all`] asks each
/// of them to send etcd a progress request.
#[derive(Default)]
pub(crate) struct ProgressHub {
    /// Watch id → its request channel (capacity 1: one pending request is enough). Only
    /// touched briefly, never across an await.
    watches: Mutex<HashMap<u64, mpsc::Sender<()>>>,
    next: AtomicU64,
}

impl ProgressHub {
    pub(crate) fn register(self: &Arc<Self>) -> (Registration, mpsc::Receiver<()>) {
        let (tx, rx) = mpsc::channel(1);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut w) = self.watches.lock() {
            w.insert(id, tx);
        }
        (
            Registration {
                hub: Arc::clone(self),
                id,
            },
            rx,
        )
    }

    pub(crate) fn request_all(&self) {
        let senders: Vec<_> = match self.watches.lock() {
            Ok(w) => w.values().cloned().collect(),
            Err(_) => return,
        };
        for s in senders {
            // Full means a request is already pending; closed means the watch is ending.
            let _ = s.try_send(());
        }
    }
}

/// Removes a watch from the hub when its task ends.
pub(crate) struct Registration {
    hub: Arc<ProgressHub>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut w) = self.hub.watches.lock() {
            w.remove(&self.id);
        }
    }
}

/// The progress guard: decides which bookmarks may go out (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct ProgressGuard {
    /// Every event at or below this revision has been sent downstream.
    delivered: u64,
    /// A requested progress revision not yet known to be safe (diagnostics only).
    held: Option<u64>,
    /// Whether the server orders requested progress after owed events (has the fix).
    trust_requested: bool,
}

impl ProgressGuard {
    pub(crate) fn new(delivered: u64, trust_requested: bool) -> Self {
        Self {
            delivered,
            held: None,
            trust_requested,
        }
    }

    /// Events up to `rev` were sent downstream.
    pub(crate) fn on_events(&mut self, rev: u64) {
        self.delivered = self.delivered.max(rev);
        if self.held.is_some_and(|h| h <= self.delivered) {
            self.held = None;
        }
    }

    /// A bookmark at `rev` went out (the initial-events end).
    pub(crate) fn on_bookmark(&mut self, rev: u64) {
        self.delivered = self.delivered.max(rev);
    }

    /// etcd reported progress at `rev`; `requested` when it answers a progress request.
    /// Returns the revision of the bookmark to send, if any.
    pub(crate) fn on_progress(&mut self, rev: u64, requested: bool) -> Option<u64> {
        if requested && !self.trust_requested && rev > self.delivered {
            tracing::debug!(
                progress = rev,
                delivered = self.delivered,
                "holding back a progress notification that may run ahead of undelivered events"
            );
            self.held = Some(self.held.map_or(rev, |h| h.max(rev)));
            return None;
        }
        self.delivered = self.delivered.max(rev);
        if self.held.is_some_and(|h| h <= self.delivered) {
            self.held = None;
        }
        // A bookmark may repeat the last event's revision (upstream does too: it confirms
        // progress), but never goes below it: `delivered` covers every event sent.
        Some(self.delivered)
    }

    /// A new etcd stream serves the watch: whether its member orders progress answers.
    pub(crate) fn set_trust(&mut self, trust_requested: bool) {
        self.trust_requested = trust_requested;
    }

    /// The revision through which everything is known delivered.
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requested_progress_ahead_of_delivery_is_held_on_unfixed_servers() {
        let mut g = ProgressGuard::new(10, false);
        // etcd 3.4.23: the answer overtakes 3001 owed events.
        assert_eq!(g.on_progress(3011, true), None);
        g.on_events(1000);
        assert_eq!(g.on_progress(3011, true), None);
        g.on_events(3011);
        // Now it only confirms what the last event already carried.
        assert_eq!(g.on_progress(3011, true), Some(3011));
        assert_eq!(g.delivered(), 3011);
        // Writes elsewhere moved etcd on; a periodic (ordered) notification is trusted.
        assert_eq!(g.on_progress(3050, false), Some(3050));
    }

    #[test]
    fn requested_progress_at_or_below_delivery_confirms_it() {
        let mut g = ProgressGuard::new(40, false);
        assert_eq!(g.on_progress(40, true), Some(40));
        assert_eq!(g.on_progress(40, true), Some(40));
        assert_eq!(g.on_progress(12, true), Some(40), "never backwards");
    }

    #[test]
    fn fixed_servers_have_requested_progress_trusted() {
        let mut g = ProgressGuard::new(10, true);
        assert_eq!(g.on_progress(3011, true), Some(3011));
    }

    /// What etcd 3.4 may send one watcher: events in revision order, requested progress at
    /// any revision up to the store's (early, late or on time), and periodic progress at the
    /// store's revision once the watcher has caught up.
    #[derive(Debug, Clone)]
    enum Step {
        Event(u64),
        Requested(u64),
        Periodic,
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec(
            prop_oneof![
                (1u64..5).prop_map(Step::Event),
                (0u64..20).prop_map(Step::Requested),
                Just(Step::Periodic),
            ],
            0..60,
        )
    }

    proptest! {
        #[test]
        fn no_bookmark_ever_runs_ahead_of_delivered_events(start in 0u64..10, steps in steps()) {
            let mut g = ProgressGuard::new(start, false);
            // The model: etcd's revision, and what the watcher truly delivered.
            let (mut store, mut delivered, mut last_out) = (start, start, 0u64);
            for step in steps {
                match step {
                    Step::Event(gap) => {
                        // Writes elsewhere may come first; the event is the newest write.
                        store += gap;
                        delivered = store;
                        prop_assert!(delivered >= last_out, "event at {delivered} after a bookmark at {last_out}");
                        g.on_events(delivered);
                        last_out = delivered;
                    }
                    Step::Requested(ahead) => {
                        // Writes elsewhere, then an answer at some revision up to the store's
                        // (below what was delivered when it lags, above when it overtakes).
                        store += ahead;
                        let rev = store.saturating_sub(ahead / 2);
                        if let Some(b) = g.on_progress(rev, true) {
                            prop_assert!(b <= delivered.max(start), "bookmark {b} ahead of delivered {delivered}");
                            prop_assert!(b >= last_out, "bookmark {b} went back from {last_out}");
                            last_out = b;
                        }
                    }
                    Step::Periodic => {
                        // Only sent once the watcher caught up: nothing owed up to `store`.
                        delivered = store;
                        let b = g.on_progress(store, false);
                        prop_assert_eq!(b, Some(store));
                        prop_assert!(store >= last_out);
                        last_out = store;
                    }
                }
            }
        }
    }

    #[test]
    fn bookmarks_never_run_backwards_past_events() {
        let mut g = ProgressGuard::new(0, true);
        g.on_events(20);
        assert_eq!(g.on_progress(15, false), Some(20));
        assert_eq!(g.on_progress(21, false), Some(21));
    }
}
