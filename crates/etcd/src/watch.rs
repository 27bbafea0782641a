//! Watches over etcd: each storage watch is one etcd Watch stream (one gRPC bidi call with one
//! watcher), driven by a task that turns etcd events into storage events.
//!
//! Invariants:
//! - events leave in etcd's revision order and each revision at most once; a watch from RV `n`
//!   starts etcd's watch at `n + 1` with `prev_kv`, so DELETED carries the last state (at the
//!   deletion's revision) and a MODIFIED that leaves the selection becomes DELETED;
//! - a failure (etcd unreachable, compaction, an event without its previous value) is sent as
//!   one `Error` event and the stream ends; nothing follows it;
//! - dropping the stream ends the task, which drops the gRPC call and so cancels etcd's watcher;
//! - bookmark revisions never go below an earlier event or bookmark and **never run ahead of
//!   what was delivered** (the progress guard below).
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
//! - one at R > `delivered` is trusted only if the server's version has the fix; otherwise it is
//!   held back (remembered, not emitted). An event beyond it, or etcd's own periodic progress
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
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_storage::{
    Bookmark, Error, Key, ListOptions, Result, SelectionPredicate, WatchEvent, WatchStream,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Failure;
use crate::proto::etcdserverpb::watch_client::WatchClient;
use crate::proto::etcdserverpb::{
    RangeRequest, WatchCreateRequest, WatchProgressRequest, WatchRequest, WatchResponse,
    watch_request,
};
use crate::proto::mvccpb::{Event, event::EventType};
use crate::store::{EtcdStore, MAX_PAGE, rev_of};

/// Events buffered between the watch task and the consumer (upstream's outgoing buffer).
const OUT_BUFFER: usize = 100;

/// The watch id etcd puts on answers to progress requests (broadcast to the stream).
const PROGRESS_REQUEST_ID: i64 = -1;

/// What a storage watch asked for.
pub(crate) struct WatchSpec {
    key: Key,
    opts: ListOptions,
}

impl WatchSpec {
    pub(crate) fn new(key: &Key, opts: &ListOptions) -> Self {
        Self {
            key: key.clone(),
            opts: opts.clone(),
        }
    }
}

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
    fn register(self: &Arc<Self>) -> (Registration, mpsc::Receiver<()>) {
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
struct Registration {
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

    /// The revision through which everything is known delivered.
    #[cfg(test)]
    pub(crate) fn delivered(&self) -> u64 {
        self.delivered
    }
}

/// Starts a watch; see the module docs.
pub(crate) async fn start(store: &EtcdStore, spec: WatchSpec) -> Result<WatchStream> {
    let opts = &spec.opts;
    let rv = opts.resource_version.unwrap_or(0);
    let initial = opts.send_initial_events.unwrap_or(rv == 0);
    // "Now", for a watch that wants neither a past revision nor the state: pin it here so that
    // a write right after this call returns is seen.
    let now = if !initial && rv == 0 {
        let resp = store
            .range(RangeRequest {
                key: Bytes::from(store.root.as_bytes().to_vec()),
                count_only: true,
                ..Default::default()
            })
            .await
            .map_err(|f| f.into_error(0))?;
        Some(rev_of(resp.header.map_or(0, |h| h.revision)))
    } else {
        None
    };
    // etcd lets a watch start at the compaction revision itself, but the previous values its
    // events need (prev_kv) are gone then: a watch from RV n needs the history at n, so a
    // compacted n is Expired, as everywhere else.
    if !initial && rv > 0 {
        // Compaction is global, so one key is enough to ask about a revision (a range over
        // the collection would make etcd 3.4 walk its whole index).
        let (key, _) = store.watch_range(&spec.key);
        let probe = RangeRequest {
            key,
            revision: i64::try_from(rv).unwrap_or(i64::MAX),
            count_only: true,
            ..Default::default()
        };
        match store.range(probe).await {
            Ok(_) | Err(Failure::FutureRevision) => {}
            Err(Failure::Compacted) => {
                return Err(Error::Expired {
                    message: format!("too old resource version: {rv} (compacted)"),
                    continue_token: None,
                });
            }
            Err(f) => return Err(f.into_error(rv)),
        }
    }
    let (tx, rx) = mpsc::channel(OUT_BUFFER);
    let task = WatchTask {
        store: store.clone(),
        spec,
        initial,
        start_after: now.unwrap_or(rv),
    };
    tokio::spawn(task.run(tx));
    Ok(Box::pin(ReceiverStream::new(rx)))
}

struct WatchTask {
    store: EtcdStore,
    spec: WatchSpec,
    /// Whether to send the current state first.
    initial: bool,
    /// Without initial state: the revision after which events are wanted.
    start_after: u64,
}

/// Why the watch loop ended.
enum End {
    /// The consumer went away.
    Dropped,
    /// A failure to report.
    Failed(Error),
}

impl WatchTask {
    async fn run(self, tx: mpsc::Sender<WatchEvent>) {
        match self.drive(&tx).await {
            End::Dropped => {}
            End::Failed(e) => {
                tracing::debug!(key = %self.spec.key, error = %e, "etcd watch ended with an error");
                let _ = tx.send(WatchEvent::Error(e)).await;
            }
        }
    }

    fn pred(&self) -> &SelectionPredicate {
        &self.spec.opts.predicate
    }

    fn matches(&self, o: &Object) -> bool {
        let p = self.pred();
        p.is_empty() || p.matches(o)
    }

    async fn send(
        &self,
        tx: &mpsc::Sender<WatchEvent>,
        ev: WatchEvent,
    ) -> std::result::Result<(), End> {
        tx.send(ev).await.map_err(|_| End::Dropped)
    }

    /// Lists the current state as ADDED events; returns the listing's revision.
    async fn send_state(&self, tx: &mpsc::Sender<WatchEvent>) -> std::result::Result<u64, End> {
        let (key, range_end) = self.store.watch_range(&self.spec.key);
        let mut start = key.to_vec();
        let mut rev = 0u64;
        loop {
            let req = RangeRequest {
                key: Bytes::from(start.clone()),
                range_end: range_end.clone(),
                limit: if range_end.is_empty() { 0 } else { MAX_PAGE },
                revision: i64::try_from(rev).unwrap_or(0),
                ..Default::default()
            };
            let resp = self
                .store
                .range(req)
                .await
                .map_err(|f| End::Failed(f.into_error(rev)))?;
            if rev == 0 {
                rev = rev_of(resp.header.as_ref().map_or(0, |h| h.revision));
            }
            for kv in &resp.kvs {
                let obj = self.store.decode(kv).map_err(End::Failed)?;
                if self.matches(&obj) {
                    self.send(tx, WatchEvent::Added(obj)).await?;
                }
            }
            match resp.kvs.last() {
                Some(last) if resp.more => {
                    start = last.key.to_vec();
                    start.push(0);
                }
                _ => return Ok(rev),
            }
        }
    }

    async fn drive(&self, tx: &mpsc::Sender<WatchEvent>) -> End {
        match self.drive_inner(tx).await {
            Ok(never) => match never {},
            Err(end) => end,
        }
    }

    async fn drive_inner(
        &self,
        tx: &mpsc::Sender<WatchEvent>,
    ) -> std::result::Result<std::convert::Infallible, End> {
        let opts = &self.spec.opts;
        let bookmarks = opts.allow_watch_bookmarks;
        let client = self.store.client.clone();
        let (endpoint, channel) = client.channel();
        // Whether etcd's answers to progress requests can be trusted is a property of the
        // member this stream goes to, asked of it now: members of one cluster may run
        // different versions (a rolling upgrade). No answer: not trusted.
        let trust_requested = opts.progress_notify
            && client
                .version_of(endpoint)
                .await
                .is_some_and(|v| v.progress_requests_are_ordered());
        let mut guard;
        let after = if self.initial {
            let rev = self.send_state(tx).await?;
            guard = ProgressGuard::new(rev, trust_requested);
            if opts.send_initial_events == Some(true) && bookmarks {
                self.send(
                    tx,
                    WatchEvent::Bookmark(Bookmark {
                        resource_version: rev,
                        initial_events_end: true,
                    }),
                )
                .await?;
                guard.on_bookmark(rev);
            }
            rev
        } else {
            guard = ProgressGuard::new(self.start_after, trust_requested);
            self.start_after
        };

        let (key, range_end) = self.store.watch_range(&self.spec.key);
        let (req_tx, req_rx) = mpsc::channel::<WatchRequest>(4);
        let create = WatchRequest {
            request_union: Some(watch_request::RequestUnion::CreateRequest(
                WatchCreateRequest {
                    key,
                    range_end,
                    start_revision: i64::try_from(after + 1).unwrap_or(i64::MAX),
                    progress_notify: opts.progress_notify,
                    prev_kv: true,
                    ..Default::default()
                },
            )),
        };
        req_tx
            .send(create)
            .await
            .map_err(|_| End::Failed(Error::internal("watch request stream closed")))?;
        // A broken connection moves the client's next requests (and the re-watch that follows
        // the error event) to the next endpoint.
        let fail = |f: Failure| {
            if matches!(f, Failure::Unreachable(_)) {
                client.rotate_from(endpoint);
            }
            End::Failed(f.into_error(after))
        };
        let mut grpc = WatchClient::new(channel).max_decoding_message_size(i32::MAX as usize);
        let timeout = client.config().request_timeout;
        let mut stream =
            match tokio::time::timeout(timeout, grpc.watch(ReceiverStream::new(req_rx))).await {
                Ok(Ok(resp)) => resp.into_inner(),
                Ok(Err(status)) => return Err(fail(Failure::from_status(&status))),
                Err(_) => {
                    return Err(fail(Failure::Unreachable(format!(
                        "etcd did not open a watch within {timeout:?}"
                    ))));
                }
            };

        let (_registration, mut progress_rx) = if opts.progress_notify {
            let (r, rx) = self.store.progress.register();
            (Some(r), Some(rx))
        } else {
            (None, None)
        };

        loop {
            tokio::select! {
                () = tx.closed() => return Err(End::Dropped),
                Some(()) = async {
                    match progress_rx.as_mut() {
                        Some(rx) => rx.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    let req = WatchRequest {
                        request_union: Some(watch_request::RequestUnion::ProgressRequest(WatchProgressRequest {})),
                    };
                    // The response stream reports it if the call is gone.
                    let _ = req_tx.try_send(req);
                }
                msg = stream.next() => {
                    let resp = match msg {
                        Some(Ok(resp)) => resp,
                        Some(Err(status)) => return Err(fail(Failure::from_status(&status))),
                        None => {
                            return Err(fail(Failure::Unreachable("etcd closed the watch stream".into())));
                        }
                    };
                    self.handle(tx, resp, &mut guard, after).await?;
                }
            }
        }
    }

    async fn handle(
        &self,
        tx: &mpsc::Sender<WatchEvent>,
        resp: WatchResponse,
        guard: &mut ProgressGuard,
        after: u64,
    ) -> std::result::Result<(), End> {
        if resp.compact_revision != 0 {
            self.store
                .client
                .note_compacted(rev_of(resp.compact_revision));
            return Err(End::Failed(Error::too_old(
                after,
                rev_of(resp.compact_revision),
            )));
        }
        if resp.canceled {
            let reason = if resp.cancel_reason.is_empty() {
                "no reason given".into()
            } else {
                resp.cancel_reason
            };
            return Err(End::Failed(Error::internal(format!(
                "etcd canceled the watch: {reason}"
            ))));
        }
        let header = rev_of(resp.header.as_ref().map_or(0, |h| h.revision));
        if resp.created {
            return Ok(());
        }
        if resp.events.is_empty() {
            if header == 0 {
                return Ok(());
            }
            let requested = resp.watch_id == PROGRESS_REQUEST_ID;
            if let Some(rv) = guard.on_progress(header, requested)
                && self.spec.opts.allow_watch_bookmarks
            {
                self.send(
                    tx,
                    WatchEvent::Bookmark(Bookmark {
                        resource_version: rv,
                        initial_events_end: false,
                    }),
                )
                .await?;
            }
            return Ok(());
        }
        let mut max = 0;
        for ev in resp.events {
            let rev = ev.kv.as_ref().map_or(0, |kv| rev_of(kv.mod_revision));
            max = max.max(rev);
            if let Some(out) = self.transform(ev).map_err(End::Failed)? {
                self.send(tx, out).await?;
            }
        }
        guard.on_events(max);
        Ok(())
    }

    /// One etcd event as a storage event, filtered by the selection (upstream's `transform`).
    fn transform(&self, ev: Event) -> Result<Option<WatchEvent>> {
        let Some(kv) = ev.kv.as_ref() else {
            return Err(Error::internal("etcd watch event without a key-value"));
        };
        let rev = rev_of(kv.mod_revision);
        let deleted = ev.r#type == EventType::Delete as i32;
        let created = !deleted && kv.create_revision == kv.mod_revision;
        if !created && ev.prev_kv.is_none() {
            return Err(Error::internal(format!(
                "etcd event received with PrevKv=nil (key={:?}, modRevision={rev}, type={})",
                String::from_utf8_lossy(&kv.key),
                if deleted { "DELETE" } else { "PUT" },
            )));
        }
        let old = match ev.prev_kv.as_ref() {
            Some(p) => Some(self.store.decode(p)?),
            None => None,
        };
        if deleted {
            let Some(old) = old else { return Ok(None) };
            return Ok(self
                .matches(&old)
                .then(|| WatchEvent::Deleted(old.with_resource_version(rev))));
        }
        let cur = self.store.decode(kv)?;
        if created {
            return Ok(self.matches(&cur).then_some(WatchEvent::Added(cur)));
        }
        let cur_passes = self.matches(&cur);
        let old_passes = old.as_ref().is_some_and(|o| self.matches(o));
        Ok(match (cur_passes, old_passes, old) {
            (true, true, prev) => Some(WatchEvent::Modified { object: cur, prev }),
            (true, false, _) => Some(WatchEvent::Added(cur)),
            (false, true, Some(o)) => Some(WatchEvent::Deleted(o.with_resource_version(rev))),
            _ => None,
        })
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
