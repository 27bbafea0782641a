//! Watches over etcd: each storage watch is an etcd Watch stream (one gRPC bidi call with one
//! watcher) at a time, driven by a task that turns etcd events into storage events.
//!
//! Invariants:
//! - events leave in etcd's revision order and each revision at most once; a watch from RV `n`
//!   starts etcd's watch at `n + 1` with `prev_kv`, so DELETED carries the last state (at the
//!   deletion's revision) and a MODIFIED that leaves the selection becomes DELETED;
//! - a broken connection (etcd restarted, a reset, refused, a stream closed without a cancel)
//!   does not end the watch: like clientv3, a new stream resumes after the last revision
//!   delivered, on the client's next endpoint, with a backoff (100 ms doubling to 1 s), for
//!   up to the request timeout since the failures began (a stream that answered anything
//!   starts that budget afresh); so nothing is missed or repeated;
//! - any other failure (compaction, an event without its previous value, a member without a
//!   leader, a cancel, resuming that ran out of time) is sent as one `Error` event and the
//!   stream ends; nothing follows it. An `Unreachable` failure moves the client to its next
//!   endpoint, so the re-watch that follows goes to another member;
//! - every stream is opened with etcd's require-leader metadata (clientv3's
//!   `WithRequireLeader`): a member cut off from its quorum ends it with "no leader" after a
//!   few election timeouts (etcd checks every election timeout and gives up after three
//!   misses) instead of keeping it silently open;
//! - a consumer that does not take an event within [`EtcdConfig::watch_stall_timeout`]
//!   (`crate::EtcdConfig`) never holds the connection: the task drops its etcd stream (h2 then
//!   releases the stream's unread data and connection-level flow-control credit), keeps the
//!   events already received, and once the consumer has taken them opens a new stream after
//!   the last revision delivered. So a stalled watch cannot freeze the other watches and
//!   requests multiplexed on the same HTTP/2 connection (docs/etcd.md, "Flow control");
//! - dropping the stream ends the task, which drops the gRPC call and so cancels etcd's watcher;
//! - bookmark revisions never go below an earlier event or bookmark and **never run ahead of
//!   what was delivered** (the progress guard, [`crate::progress`]).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_storage::{
    Bookmark, Error, Key, ListOptions, Result, SelectionPredicate, WatchEvent, WatchStream,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;

use crate::client::{Failure, REQUIRE_LEADER_KEY};
use crate::progress::ProgressGuard;
use crate::proto::etcdserverpb::watch_client::WatchClient;
use crate::proto::etcdserverpb::{
    RangeRequest, ResponseHeader, WatchCreateRequest, WatchProgressRequest, WatchRequest,
    WatchResponse, watch_request,
};
use crate::proto::mvccpb::{Event, event::EventType};
use crate::store::{EtcdStore, MAX_PAGE, rev_of};

/// Events buffered between the watch task and the consumer (upstream's outgoing buffer).
const OUT_BUFFER: usize = 100;

/// The watch id etcd puts on answers to progress requests (broadcast to the stream).
const PROGRESS_REQUEST_ID: i64 = -1;

/// Hands `events` to the consumer in order. An event it does not take within `stall` makes
/// the rest (that one included) come back as the backlog: the caller gives up its etcd
/// stream, so that a stalled consumer never leaves unread data — and the connection's
/// flow-control credit — behind on a connection other watches and requests share.
async fn deliver(
    tx: &mpsc::Sender<WatchEvent>,
    mut events: VecDeque<WatchEvent>,
    stall: Duration,
) -> std::result::Result<Option<VecDeque<WatchEvent>>, End> {
    while let Some(ev) = events.pop_front() {
        let ev = match tx.try_send(ev) {
            Ok(()) => continue,
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(End::Dropped),
            Err(mpsc::error::TrySendError::Full(ev)) => ev,
        };
        match tokio::time::timeout(stall, tx.reserve()).await {
            Ok(Ok(permit)) => permit.send(ev),
            Ok(Err(_)) => return Err(End::Dropped),
            Err(_) => {
                events.push_front(ev);
                return Ok(Some(events));
            }
        }
    }
    Ok(None)
}

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
    // compacted n is Expired, as everywhere else. Like upstream's etcd3 watcher (and like a
    // compaction etcd reports on the stream), it is the stream's one ERROR event, not a
    // failure of the call.
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
                let e = Error::Expired {
                    message: format!("too old resource version: {rv} (compacted)"),
                    continue_token: None,
                };
                return Ok(futures::stream::once(async move { WatchEvent::Error(e) }).boxed());
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

/// The first pause before resuming a broken stream; doubled up to [`RESUME_BACKOFF_MAX`].
const RESUME_BACKOFF_MIN: Duration = Duration::from_millis(100);

/// The longest pause between attempts to resume a broken stream.
const RESUME_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How one etcd stream ended without ending the watch.
enum Outcome {
    /// Given up for a stalled consumer: the events received but not yet taken.
    Stalled(VecDeque<WatchEvent>),
    /// The connection broke (reset, refused, closed without a cancel): resume after the last
    /// revision delivered.
    Broken {
        /// What broke it (the watch's error if resuming runs out of time).
        failure: Failure,
        /// Whether etcd answered anything on the stream (a working stream: the retry budget
        /// starts afresh).
        answered: bool,
        /// The endpoint it broke on (the resumed stream goes to the next one).
        endpoint: usize,
    },
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

    /// The initial state (if wanted), then one etcd stream after another: a stream given up
    /// for a stalled consumer is followed, once the consumer has taken what was received, by
    /// a new one from the last revision delivered.
    async fn drive_inner(
        &self,
        tx: &mpsc::Sender<WatchEvent>,
    ) -> std::result::Result<std::convert::Infallible, End> {
        let opts = &self.spec.opts;
        let mut guard;
        if self.initial {
            let rev = self.send_state(tx).await?;
            guard = ProgressGuard::new(rev, false);
            if opts.send_initial_events == Some(true) && opts.allow_watch_bookmarks {
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
        } else {
            guard = ProgressGuard::new(self.start_after, false);
        }
        let (_registration, mut progress_rx) = if opts.progress_notify {
            let (r, rx) = self.store.progress.register();
            (Some(r), Some(rx))
        } else {
            (None, None)
        };
        // Since when streams have been breaking without one answering (a run of transport
        // failures), and the pause before the next attempt.
        let mut broken_since: Option<tokio::time::Instant> = None;
        let mut backoff = RESUME_BACKOFF_MIN;
        // The endpoint the last stream broke on: the next stream goes round the endpoints
        // from there, whatever other requests did to the client's current one.
        let mut resume_after: Option<usize> = None;
        loop {
            match self
                .stream(tx, &mut guard, &mut progress_rx, resume_after.take())
                .await?
            {
                Outcome::Stalled(backlog) => {
                    // The etcd stream is gone (its unread data and flow-control credit with
                    // it): wait for the consumer here, where waiting holds nothing of the
                    // connection.
                    tracing::debug!(
                        key = %self.spec.key,
                        delivered = guard.delivered(),
                        "etcd watch consumer stalled: stream given up, resuming once it drains"
                    );
                    broken_since = None;
                    backoff = RESUME_BACKOFF_MIN;
                    for ev in backlog {
                        self.send(tx, ev).await?;
                    }
                }
                Outcome::Broken {
                    failure,
                    answered,
                    endpoint,
                } => {
                    resume_after = Some(endpoint);
                    // A lost connection (etcd restarted, a reset, a stream ended without a
                    // cancel) is not a verdict on the watch: like clientv3, resume after the
                    // last revision delivered, on the next member, for up to the request
                    // timeout since the failures began.
                    let now = tokio::time::Instant::now();
                    if answered {
                        broken_since = None;
                        backoff = RESUME_BACKOFF_MIN;
                    }
                    let since = *broken_since.get_or_insert(now);
                    let limit = self.store.client.config().request_timeout;
                    if now.duration_since(since) >= limit {
                        return Err(End::Failed(failure.into_error(guard.delivered())));
                    }
                    tracing::debug!(
                        key = %self.spec.key,
                        delivered = guard.delivered(),
                        error = ?failure,
                        "etcd watch stream broken: resuming after the last revision delivered"
                    );
                    tokio::select! {
                        () = tx.closed() => return Err(End::Dropped),
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(RESUME_BACKOFF_MAX);
                }
            }
        }
    }

    /// Runs one etcd watch stream after `guard.delivered()` until it fails (the error), the
    /// consumer goes away, the consumer stops taking events for the stall timeout (then the
    /// events received but not yet taken, in order), or the connection breaks (then the
    /// failure, to resume from).
    async fn stream(
        &self,
        tx: &mpsc::Sender<WatchEvent>,
        guard: &mut ProgressGuard,
        progress_rx: &mut Option<mpsc::Receiver<()>>,
        resume_after: Option<usize>,
    ) -> std::result::Result<Outcome, End> {
        let opts = &self.spec.opts;
        let client = self.store.client.clone();
        let (endpoint, channel) = match resume_after {
            Some(broken) => client.channel_after(broken),
            None => client.channel(),
        };
        // Whether etcd's answers to progress requests can be trusted is a property of the
        // member this stream goes to, asked of it now: members of one cluster may run
        // different versions (a rolling upgrade). No answer: not trusted.
        let trust_requested = opts.progress_notify
            && client
                .version_of(endpoint)
                .await
                .is_some_and(|v| v.progress_requests_are_ordered());
        guard.set_trust(trust_requested);
        let after = guard.delivered();

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
        // A broken connection, or a member without a leader, moves the client's next requests
        // (and the resumed stream, or the re-watch that follows the error event) to the next
        // endpoint. A broken connection is resumed; "no leader" ends the watch (the member is
        // cut off from its quorum: the consumer must learn that its view may be stale).
        let mut answered = false;
        let fail = |f: Failure, answered: bool| {
            if matches!(f, Failure::Unreachable(_)) {
                client.rotate_from(endpoint);
            }
            match f {
                Failure::Unreachable(ref m) if !m.contains("no leader") => Ok(Outcome::Broken {
                    failure: f,
                    answered,
                    endpoint,
                }),
                f => Err(End::Failed(f.into_error(after))),
            }
        };
        let mut grpc = WatchClient::new(channel).max_decoding_message_size(i32::MAX as usize);
        // As clientv3's WithRequireLeader (what Kubernetes watches with): a member that has no
        // leader for a few election timeouts ends the stream with "no leader" instead of
        // keeping it open and silent while the majority goes on without it.
        let mut request = tonic::Request::new(ReceiverStream::new(req_rx));
        request
            .metadata_mut()
            .insert(REQUIRE_LEADER_KEY, MetadataValue::from_static("true"));
        let timeout = client.config().request_timeout;
        let mut stream = match tokio::time::timeout(timeout, grpc.watch(request)).await {
            Ok(Ok(resp)) => resp.into_inner(),
            Ok(Err(status)) => return fail(Failure::from_status(&status), false),
            Err(_) => {
                return fail(
                    Failure::Unreachable(format!("etcd did not open a watch within {timeout:?}")),
                    false,
                );
            }
        };
        let stall = client.config().watch_stall_timeout;

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
                        Some(Err(status)) => return fail(Failure::from_status(&status), answered),
                        None => {
                            return fail(Failure::Unreachable("etcd closed the watch stream".into()), answered);
                        }
                    };
                    answered = true;
                    self.check_history(resp.header.as_ref(), guard.delivered()).await?;
                    let out = self.handle(resp, guard, after)?;
                    if let Some(backlog) = deliver(tx, out, stall).await? {
                        return Ok(Outcome::Stalled(backlog));
                    }
                }
            }
        }
    }

    /// Ends the watch when etcd's history went back below what was already delivered (etcd
    /// wiped, or restored from an older snapshot, under a running watch): a stream resumed
    /// after `delivered` on such an etcd would wait for revisions that belong to another
    /// history, and its consumer would keep the old state forever. A header below
    /// `delivered` may also come from a member that lags behind the one the stream was on;
    /// a linearizable read (which waits for the member to catch up with the leader) tells
    /// the two apart: only a cluster whose current revision is below `delivered` went back.
    /// The error is `Expired` (410), so that a reflector relists: its cache is replaced at
    /// the new history's revision and its watchers end.
    async fn check_history(
        &self,
        header: Option<&ResponseHeader>,
        delivered: u64,
    ) -> std::result::Result<(), End> {
        let revision = rev_of(header.map_or(0, |h| h.revision));
        if revision == 0 || revision >= delivered {
            return Ok(());
        }
        let Ok(current) = self.store.current_rev().await else {
            // No answer: the stream's own failure, if any, tells.
            return Ok(());
        };
        if current >= delivered {
            return Ok(());
        }
        tracing::error!(
            key = %self.spec.key,
            delivered,
            current,
            "etcd's history went back (wiped or restored from an older snapshot): ending the \
             watch so that its consumer relists"
        );
        Err(End::Failed(Error::Expired {
            message: format!(
                "etcd's history went back: its revision {current} is below the {delivered} \
                 already delivered (etcd was wiped or restored from an older snapshot)"
            ),
            continue_token: None,
        }))
    }

    /// What one etcd response means for the consumer, in order; updates the guard.
    fn handle(
        &self,
        resp: WatchResponse,
        guard: &mut ProgressGuard,
        after: u64,
    ) -> std::result::Result<VecDeque<WatchEvent>, End> {
        let mut out = VecDeque::new();
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
            return Ok(out);
        }
        if resp.events.is_empty() {
            if header == 0 {
                return Ok(out);
            }
            let requested = resp.watch_id == PROGRESS_REQUEST_ID;
            if let Some(rv) = guard.on_progress(header, requested)
                && self.spec.opts.allow_watch_bookmarks
            {
                out.push_back(WatchEvent::Bookmark(Bookmark {
                    resource_version: rv,
                    initial_events_end: false,
                }));
            }
            return Ok(out);
        }
        let mut max = 0;
        for ev in resp.events {
            let rev = ev.kv.as_ref().map_or(0, |kv| rev_of(kv.mod_revision));
            max = max.max(rev);
            if let Some(ev) = self.transform(ev).map_err(End::Failed)? {
                out.push_back(ev);
            }
        }
        // Everything up to `max` is now sent or queued ahead of anything later.
        guard.on_events(max);
        Ok(out)
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
