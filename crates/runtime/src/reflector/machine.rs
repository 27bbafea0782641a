//! The reflector's state machine: one [`Machine::step`] per yielded item.
//!
//! Invariants: the machine holds at most one list page stream (objects come out of it one at
//! a time, so with a lister-watcher that decodes as the bytes arrive no page is ever whole in
//! memory) or one watch stream; every wait in it
//! (a list, a watch's next event, a backoff) has a deadline, the list's from the lister-
//! watcher, the watch's from [`IdleDeadline`]; `last_rv` only moves forward except through a
//! completed relist.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use tokio::time::Instant;

use super::Event;
use super::config::{Config, DEFAULT_PAGE_SIZE};
use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::lister::{
    ListRequest, ListerWatcher, PageItem, PageStream, VersionMatch, WatchEvent, WatchRequest,
    WatchStream,
};
use crate::resource::Resource;

/// The state of the loop.
///
/// Transitions (anything may also go to `Backoff { then }` after a failure):
/// - `Empty` → `Listing` (first page fetched; emits `Init`) or `StreamingList` (streaming
///   watch opened; emits `Init`). A list failing with 410/504-too-large retries at once at
///   `""`; a streaming list refused with 410/504-too-large retries at once at `""`, with
///   429/refused after a backoff; other list failures → `Backoff { then: Empty }`, other
///   streaming failures → a plain list.
/// - `Listing` → emits `InitApply` per object as the page stream yields it; at the page's
///   end fetches the next page, and after the last emits `InitDone` → `Listed`; a page
///   without a resource version, or a stream failing mid-page, → `Backoff { then: Empty }`;
///   a 410 on a continuation page → one unpaginated list at the version asked (client-go's
///   pager fallback; at `""` if that is gone too), which restarts the relist with `Init`.
/// - `StreamingList` → `InitApply` per ADDED; the initial-events-end bookmark emits
///   `InitDone` → `Watching` on the same stream; an in-stream error follows the rules of a
///   refused one; a MODIFIED or DELETED (a server ignoring sendInitialEvents) or nothing
///   for `streaming_list_idle` → `Empty` with plain lists from then on; any other failure →
///   `Empty` with a plain list.
/// - `Listed` → `Watching` (watch opened); 429/refused → `Backoff { then: Listed }`;
///   other errors → `Backoff { then: Empty }`.
/// - `Watching` → events; normal end, dropped connection or idle deadline → `Listed`; a
///   frame that does not decode (or an event without a version) → `Backoff { then: Listed }`;
///   an object that does not decode and whose metadata does not read either
///   (`Error::Typed`: it cannot even be named) → `Backoff { then: Empty }`;
///   an `ERROR` event with 429 → `Backoff { then: Listed }`, with 500 → the same while within
///   the retry window; very short watch or any other `ERROR` → `Backoff { then: Empty }`.
/// - `Backoff` → `then` when the delay is over.
/// - In `Listing` and `StreamingList`, an object that does not decode into the type
///   ([`Error::SkippedObject`]) fails the list as a whole → `Backoff { then: Empty }` (as
///   client-go and kube-rs): a list that went on without it would, at `InitDone`, delete the
///   live object from the store. In `Watching` it is yielded as an error and the state stays:
///   the watch goes on past its version; for a DELETED it is [`Error::SkippedDelete`],
///   which the store's feeder applies by key.
/// - [`Machine::abandon_list`] (the informer, when its transform panicked on an `InitApply`)
///   fails the list in progress the same way.
pub(super) enum State<K> {
    Empty,
    Listing {
        items: PageStream<K>,
        /// The version the relist asked for (what the pager falls back to).
        asked: Option<String>,
        /// This is the first page of a list at RV "0": a continue token at its end means the
        /// server has no watch cache for the resource (client-go's `paginatedResult`).
        probe: bool,
    },
    StreamingList {
        stream: WatchStream<K>,
        /// The streaming list's own idle deadline ([`Config::streaming_list_idle`]).
        idle: IdleDeadline,
        /// The idle limit of the watch it becomes after its bookmark.
        watch_idle: Duration,
    },
    Listed,
    Watching {
        stream: WatchStream<K>,
        started: Instant,
        events: u64,
        idle: IdleDeadline,
    },
    Backoff {
        sleep: Pin<Box<tokio::time::Sleep>>,
        then: Box<State<K>>,
    },
}

/// The client-side deadline of one watch: expires when no event arrived for `limit`.
///
/// Events only record the time; the timer is re-armed when it fires early, so a busy watch
/// touches the timer wheel once per `limit`, not once per event.
pub(super) struct IdleDeadline {
    sleep: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
    last: Instant,
}

impl IdleDeadline {
    fn new(limit: Duration) -> Self {
        let now = Instant::now();
        Self {
            sleep: Box::pin(tokio::time::sleep_until(crate::instant::after(now, limit))),
            limit,
            last: now,
        }
    }

    /// Resolves once the watch has been idle for `limit`.
    async fn expired(&mut self) {
        loop {
            self.sleep.as_mut().await;
            let due = crate::instant::after(self.last, self.limit);
            if due <= Instant::now() {
                return;
            }
            self.sleep.as_mut().reset(due);
        }
    }

    /// [`next`](Self::next) for a streaming list's initial events: a progress bookmark does
    /// not count as activity (a server that ignores sendInitialEvents may still send those).
    async fn next_initial<K>(
        &mut self,
        stream: &mut WatchStream<K>,
    ) -> Option<Option<Result<WatchEvent<K>>>> {
        let before = self.last;
        let item = self.next(stream).await;
        if let Some(Some(Ok(WatchEvent::Bookmark {
            initial_events_end: false,
            ..
        }))) = &item
        {
            self.last = before;
        }
        item
    }

    /// The next item of `stream`, or `None` when the deadline expires first.
    async fn next<K>(
        &mut self,
        stream: &mut WatchStream<K>,
    ) -> Option<Option<Result<WatchEvent<K>>>> {
        let item = tokio::select! {
            biased;
            item = stream.next() => Some(item),
            () = self.expired() => None,
        };
        if item.is_some() {
            self.last = Instant::now();
        }
        item
    }
}

pub(super) struct Machine<L: ListerWatcher> {
    pub(super) lw: L,
    pub(super) config: Config,
    pub(super) state: State<L::Object>,
    /// Version of the last completed list, event or bookmark; `None` before the first list.
    pub(super) last_rv: Option<String>,
    /// The last version cannot be served (410 / too large): list at `""` until a list works.
    pub(super) rv_unavailable: bool,
    /// A streaming list failed: this relist uses a plain list.
    pub(super) fallback_to_list: bool,
    /// The server ignored `sendInitialEvents` (a streaming list went idle before its
    /// bookmark): every relist uses a plain list from now on.
    pub(super) streaming_unsupported: bool,
    /// The version the current (or last) streaming list asked for.
    pub(super) streaming_rv: Option<String>,
    /// The first list (at RV "0") came back paginated: the server has no watch cache for
    /// this resource, so relists keep their pages (client-go's `paginatedResult`).
    pub(super) paginated_result: bool,
    /// When the current run of in-stream 500 errors began.
    pub(super) internal_errors_since: Option<Instant>,
    pub(super) backoff: Backoff,
    /// Set by the consumer to fail the list in progress ([`Machine::abandon_list`]).
    pub(super) abandon: Arc<AtomicBool>,
}

impl<L: ListerWatcher> Machine<L> {
    pub(super) fn new(lw: L, config: Config) -> Self {
        let backoff = Backoff::new(
            config.initial_backoff,
            config.max_backoff,
            config.backoff_reset,
            config.backoff_jitter,
        );
        Self {
            lw,
            config,
            state: State::Empty,
            last_rv: None,
            rv_unavailable: false,
            fallback_to_list: false,
            streaming_unsupported: false,
            streaming_rv: None,
            paginated_result: false,
            internal_errors_since: None,
            backoff,
            abandon: Arc::default(),
        }
    }

    /// If the consumer asked (through [`Machine::abandon`]) and a list is in progress, fails
    /// it as a whole: its stream is dropped and the relist starts over after a backoff, so
    /// its `InitDone` (which would delete what the consumer could not take) never comes.
    fn abandon_list(&mut self) {
        if !self.abandon.swap(false, Ordering::AcqRel) {
            return;
        }
        if matches!(
            self.state,
            State::Listing { .. } | State::StreamingList { .. }
        ) {
            tracing::warn!("list abandoned by its consumer; relisting after a backoff");
            self.back_off(State::Empty, None);
        }
    }

    /// Advances until one item can be yielded.
    pub(super) async fn step(&mut self) -> Result<Event<L::Object>> {
        self.abandon_list();
        loop {
            let state = std::mem::replace(&mut self.state, State::Empty);
            match state {
                State::Empty => {
                    if self.config.streaming_list
                        && !self.fallback_to_list
                        && !self.streaming_unsupported
                    {
                        if let Some(item) = self.start_streaming_list().await {
                            return item;
                        }
                        continue;
                    }
                    let rv = self.relist_rv();
                    return self.first_page(rv).await;
                }
                State::Listing {
                    mut items,
                    asked,
                    probe,
                } => match items.next().await {
                    Some(Ok(PageItem::Object(obj))) => {
                        self.state = State::Listing {
                            items,
                            asked,
                            probe,
                        };
                        return Ok(Event::InitApply(obj));
                    }
                    Some(Ok(PageItem::End(end))) => {
                        drop(items);
                        if no_version(&end.resource_version) {
                            // A missing version would make the watch start at "0" and replay
                            // history.
                            self.back_off(State::Empty, None);
                            return Err(Error::Decode(
                                "list without metadata.resourceVersion".into(),
                            ));
                        }
                        if probe && end.continue_token.is_some() {
                            self.paginated_result = true;
                        }
                        match end.continue_token {
                            Some(token) => {
                                if let Some(item) = self.next_page(token, asked).await {
                                    return item;
                                }
                            }
                            None => {
                                self.last_rv = Some(end.resource_version.clone());
                                self.rv_unavailable = false;
                                self.fallback_to_list = false;
                                self.state = State::Listed;
                                return Ok(Event::InitDone {
                                    resource_version: end.resource_version,
                                });
                            }
                        }
                    }
                    Some(Err(e)) => {
                        // A body cut or undecodable mid-page, or one object that does not
                        // decode into the type (`Error::SkippedObject`): the list fails as a
                        // whole and starts over after a backoff; the store keeps its last
                        // good state until a relist completes (client-go, kube-rs). Going on
                        // without the object would make the relist's commit delete it.
                        drop(items);
                        self.back_off(State::Empty, e.retry_after());
                        return Err(e);
                    }
                    None => {
                        self.back_off(State::Empty, None);
                        return Err(Error::Http(Box::new(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "list ended before its end",
                        ))));
                    }
                },
                State::StreamingList {
                    mut stream,
                    mut idle,
                    watch_idle,
                } => match idle.next_initial(&mut stream).await {
                    None => {
                        // Nothing at all, not even the bookmark: a server that ignores
                        // sendInitialEvents. Lists from now on, without waiting again.
                        tracing::warn!(
                            idle = ?idle.limit,
                            "streaming list idle before its initial-events-end bookmark: \
                             the server ignores sendInitialEvents; using plain lists from now on"
                        );
                        self.fallback_to_list = true;
                        self.streaming_unsupported = true;
                        return Err(Error::WatchIdle(idle.limit));
                    }
                    Some(Some(Ok(WatchEvent::Modified(_)))) => {
                        return Err(self.streaming_list_unsupported("MODIFIED"));
                    }
                    Some(Some(Ok(WatchEvent::Deleted(_)))) => {
                        return Err(self.streaming_list_unsupported("DELETED"));
                    }
                    Some(Some(Ok(WatchEvent::Added(obj)))) => {
                        if let Err(e) = versioned(&obj) {
                            self.fallback_to_list = true;
                            return Err(e);
                        }
                        self.state = State::StreamingList {
                            stream,
                            idle,
                            watch_idle,
                        };
                        return Ok(Event::InitApply(obj));
                    }
                    Some(Some(Ok(WatchEvent::Bookmark {
                        resource_version,
                        initial_events_end: true,
                    }))) => {
                        self.last_rv = Some(resource_version.clone());
                        self.rv_unavailable = false;
                        idle.limit = watch_idle;
                        self.state = State::Watching {
                            stream,
                            started: Instant::now(),
                            events: 1,
                            idle,
                        };
                        return Ok(Event::InitDone { resource_version });
                    }
                    Some(Some(Ok(WatchEvent::Bookmark { .. }))) => {
                        self.state = State::StreamingList {
                            stream,
                            idle,
                            watch_idle,
                        }
                    }
                    Some(None) => {
                        self.fallback_to_list = true;
                        return Err(Error::StreamingListIncomplete);
                    }
                    Some(Some(Err(e))) if e.is_skipped_object() => {
                        // As in a plain list: the list fails as a whole (its commit would
                        // delete the object), and is retried after a backoff.
                        drop(stream);
                        self.back_off(State::Empty, None);
                        return Err(e);
                    }
                    Some(Some(Err(e))) => {
                        // client-go `watchList`: the same rules in-stream as when opening
                        // (kube-apiserver's cacher reports a too-old version as an ERROR
                        // event on an opened watch, not as a refused request).
                        drop(stream);
                        self.streaming_list_failed(&e);
                        return Err(e);
                    }
                },
                State::Listed => {
                    let request = self.watch_request(self.last_rv.clone(), false);
                    match self.lw.watch(&request).await {
                        Ok(stream) => {
                            self.state = State::Watching {
                                stream,
                                started: Instant::now(),
                                events: 0,
                                idle: IdleDeadline::new(self.idle_limit(&request)),
                            };
                        }
                        Err(e) => {
                            let then = if e.is_retriable_with_backoff() {
                                State::Listed
                            } else {
                                State::Empty
                            };
                            self.back_off(then, e.retry_after());
                            return Err(e);
                        }
                    }
                }
                State::Watching {
                    mut stream,
                    started,
                    events,
                    mut idle,
                } => match idle.next(&mut stream).await {
                    None => {
                        // Nothing, not even a bookmark, for longer than the server's own
                        // timeout: the connection is dead. Re-watch, like a dropped one.
                        drop(stream);
                        tracing::warn!(idle = ?idle.limit, "watch idle past its deadline, re-watching");
                        self.lw.watch_idle();
                        self.after_watch_end(started, events);
                        return Err(Error::WatchIdle(idle.limit));
                    }
                    Some(Some(Ok(event))) => {
                        let out = match event {
                            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                                if let Err(e) = versioned(&o) {
                                    // A garbled event: the stream cannot be trusted further.
                                    drop(stream);
                                    self.after_watch_error(started, events, &e);
                                    return Err(e);
                                }
                                self.last_rv = Some(o.resource_version().into_owned());
                                Event::Apply(o)
                            }
                            WatchEvent::Deleted(o) => {
                                if let Err(e) = versioned(&o) {
                                    drop(stream);
                                    self.after_watch_error(started, events, &e);
                                    return Err(e);
                                }
                                self.last_rv = Some(o.resource_version().into_owned());
                                Event::Delete(o)
                            }
                            WatchEvent::Bookmark {
                                resource_version, ..
                            } => {
                                self.last_rv = Some(resource_version.clone());
                                Event::Bookmark { resource_version }
                            }
                        };
                        self.internal_errors_since = None;
                        self.state = State::Watching {
                            stream,
                            started,
                            events: events + 1,
                            idle,
                        };
                        return Ok(out);
                    }
                    Some(Some(Err(e))) if e.is_skipped_object() => {
                        // Skipped: the watch goes on past its version. A skipped delete
                        // (`Error::SkippedDelete`) is applied by its key by the store's
                        // feeder (`reflector`, the informer).
                        if let Some(resource_version) = e.skipped_resource_version()
                            && !no_version(resource_version)
                        {
                            self.last_rv = Some(resource_version.to_owned());
                        }
                        self.state = State::Watching {
                            stream,
                            started,
                            events: events + 1,
                            idle,
                        };
                        return Err(e);
                    }
                    Some(Some(Err(e @ Error::Api(_)))) => {
                        drop(stream);
                        let then = self.after_error_event(&e);
                        self.back_off(then, e.retry_after());
                        return Err(e);
                    }
                    Some(Some(Err(e))) => {
                        // A dropped connection or garbled frame: the watch is gone, the state
                        // is fine. Re-watch (after a backoff for a frame that did not decode).
                        drop(stream);
                        self.after_watch_error(started, events, &e);
                        return Err(e);
                    }
                    Some(None) => {
                        if let Some(e) = self.after_watch_end(started, events) {
                            return Err(e);
                        }
                    }
                },
                State::Backoff { mut sleep, then } => {
                    sleep.as_mut().await;
                    self.state = *then;
                }
            }
        }
    }

    /// What follows an `ERROR` event (client-go `handleWatch`'s callers): 429 backs off and
    /// re-watches; 500 does too while within the retry window; anything else (410 Expired
    /// included) relists from the last version, which a "not older than" list may still
    /// serve.
    fn after_error_event(&mut self, e: &Error) -> State<L::Object> {
        if e.is_too_many_requests() {
            return State::Listed;
        }
        if e.code() == Some(500) {
            let since = *self.internal_errors_since.get_or_insert_with(Instant::now);
            if since.elapsed() < self.config.max_internal_error_retry {
                return State::Listed;
            }
            self.internal_errors_since = None;
        }
        State::Empty
    }

    /// Decides what follows a watch that failed with `e`. A frame that did not decode
    /// (garbled, oversized, an event without a version) would come back at once from the same
    /// version, so the re-watch waits a backoff — client-go's `StreamWatcher` reports such a
    /// frame as an `ERROR` event, which ends `ListAndWatch` and waits its backoff; a dropped
    /// connection re-watches as a watch that ended.
    fn after_watch_error(&mut self, started: Instant, events: u64, e: &Error) {
        if matches!(e, Error::Typed(_)) {
            // An object that does not decode and cannot be named (its metadata does not
            // read): watching again from the last version would meet it again, and a delete
            // it may be cannot be applied by key. Relist, as client-go does after a watch
            // decode error (the store keeps its state until the list completes).
            self.back_off(State::Empty, None);
        } else if matches!(e, Error::Decode(_)) {
            self.back_off(State::Listed, None);
        } else {
            self.after_watch_end(started, events);
        }
    }

    /// Decides what follows a watch that ended; returns the error of a very short watch.
    fn after_watch_end(&mut self, started: Instant, events: u64) -> Option<Error> {
        let lasted = started.elapsed();
        if events == 0 && lasted < self.config.min_watch_duration {
            self.back_off(State::Empty, None);
            return Some(Error::VeryShortWatch(lasted));
        }
        self.state = State::Listed;
        None
    }

    /// Waits the next backoff delay, or the server's retry hint when longer, but never more
    /// than [`Config::max_backoff`]: a hint is a server's (or a proxy's) wish, and a
    /// `Retry-After: 86400` must not park the cache for a day (the HTTP client's own retries
    /// cap it at 30 s too, client-go's `checkWait` caps at its request timeout).
    fn back_off(&mut self, then: State<L::Object>, hint: Option<Duration>) {
        let hint = hint.unwrap_or_default().min(self.config.max_backoff);
        let delay = self.backoff.next_delay().max(hint);
        tracing::debug!(?delay, "backing off");
        self.state = State::Backoff {
            sleep: Box::pin(tokio::time::sleep(delay)),
            then: Box::new(then),
        };
    }

    /// client-go `relistResourceVersion`; with `consistent_first_list`, no version for the
    /// first list either.
    fn relist_rv(&self) -> Option<String> {
        match &self.last_rv {
            _ if self.rv_unavailable => None,
            Some(rv) => Some(rv.clone()),
            None if self.config.consistent_first_list => None,
            None => Some("0".to_owned()),
        }
    }

    /// The page size of a list at `rv` (client-go `reflector.list`'s pager setup).
    fn limit(&self, rv: Option<&str>) -> Option<u32> {
        match self.config.page_size {
            Some(n) => Some(n),
            None if self.paginated_result => Some(DEFAULT_PAGE_SIZE),
            // A specific version: unpaginated, so the watch cache can serve it.
            None if rv.is_some_and(|v| v != "0") => None,
            None => Some(DEFAULT_PAGE_SIZE),
        }
    }

    fn list_request(
        &self,
        rv: Option<String>,
        limit: Option<u32>,
        continue_token: Option<String>,
    ) -> ListRequest {
        ListRequest {
            resource_version: if continue_token.is_some() { None } else { rv },
            resource_version_match: None,
            limit,
            continue_token,
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            shard_selector: self.config.shard_selector.clone(),
        }
    }

    fn watch_request(&self, rv: Option<String>, streaming: bool) -> WatchRequest {
        let min = self.config.min_watch_timeout.as_secs_f64();
        let r: f64 = rand::rng().random();
        WatchRequest {
            resource_version: rv,
            resource_version_match: streaming.then_some(VersionMatch::NotOlderThan),
            allow_bookmarks: true,
            send_initial_events: streaming,
            // Truncation to whole seconds keeps the value in [min, 2·min).
            timeout_seconds: Some(((min * (1.0 + r)) as u64).max(1)),
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
            shard_selector: self.config.shard_selector.clone(),
        }
    }

    /// A change arrived inside a streaming list's initial events. A server that implements
    /// sendInitialEvents sends only ADDED there (the state at the version asked), then the
    /// initial-events-end bookmark; a change shows it ignores the parameter and streams the
    /// watch's changes instead. Waiting for an idle period would never end on a busy
    /// resource, so this relist and every later one use plain lists at once.
    fn streaming_list_unsupported(&mut self, event: &'static str) -> Error {
        tracing::warn!(
            event,
            "streaming list got a change before its initial-events-end bookmark: \
             the server ignores sendInitialEvents; using plain lists from now on"
        );
        self.fallback_to_list = true;
        self.streaming_unsupported = true;
        Error::StreamingListUnsupported(event)
    }

    /// Opens a streaming list (client-go `watchList`); `None` when the loop goes on (a retry
    /// or the fallback was set up).
    async fn start_streaming_list(&mut self) -> Option<Result<Event<L::Object>>> {
        // client-go `rewatchResourceVersion`: the last version, or "" when unavailable.
        let rv = if self.rv_unavailable {
            None
        } else {
            self.last_rv.clone()
        };
        let request = self.watch_request(rv.clone(), true);
        match self.lw.watch(&request).await {
            Ok(stream) => {
                let watch_idle = self.idle_limit(&request);
                let idle = IdleDeadline::new(self.config.streaming_list_idle.min(watch_idle));
                self.streaming_rv = rv;
                self.state = State::StreamingList {
                    stream,
                    idle,
                    watch_idle,
                };
                Some(Ok(Event::Init))
            }
            Err(e) => {
                self.streaming_rv = rv;
                self.streaming_list_failed(&e);
                Some(Err(e))
            }
        }
    }

    /// What follows a failed streaming list, refused or failing in-stream (client-go
    /// `watchList`'s `isErrorRetriableWithSideEffectsFn`): 410 / 504 too-large at a version
    /// → at once again at `""`; 429 or a refused connection → again after a backoff; anything
    /// else (or 410 at `""` already) → a plain list for this relist.
    fn streaming_list_failed(&mut self, e: &Error) {
        if (e.is_expired() || e.is_too_large_resource_version()) && self.streaming_rv.is_some() {
            // The version is gone or not there yet: a consistent snapshot at "" at once.
            tracing::debug!(error = %e, "streaming list at the last version refused, retrying at \"\"");
            self.rv_unavailable = true;
            self.state = State::Empty;
        } else if e.is_retriable_with_backoff() {
            self.back_off(State::Empty, e.retry_after());
        } else {
            tracing::warn!(error = %e, "streaming list failed, falling back to list");
            if e.is_expired() {
                self.rv_unavailable = true;
            }
            self.fallback_to_list = true;
            self.state = State::Empty;
        }
    }

    /// How long a watch opened with `request` may go without an event.
    fn idle_limit(&self, request: &WatchRequest) -> Duration {
        let server = request.timeout_seconds.map_or_else(
            || self.config.min_watch_timeout.saturating_mul(2),
            Duration::from_secs,
        );
        server.saturating_add(self.config.watch_idle_margin)
    }

    /// Sets up `Listing` over a page stream.
    fn listing(&mut self, items: PageStream<L::Object>, asked: Option<String>, probe: bool) {
        self.state = State::Listing {
            items,
            asked,
            probe,
        };
    }

    /// Lists the first page at `rv`; on 410 / too-large retries at once at `""`.
    async fn first_page(&mut self, rv: Option<String>) -> Result<Event<L::Object>> {
        let mut rv = rv;
        loop {
            let limit = self.limit(rv.as_deref());
            match self
                .lw
                .list_stream(&self.list_request(rv.clone(), limit, None))
                .await
            {
                Ok(items) => {
                    let probe = rv.as_deref() == Some("0");
                    self.listing(items, rv, probe);
                    return Ok(Event::Init);
                }
                Err(e) if (e.is_expired() || e.is_too_large_resource_version()) && rv.is_some() => {
                    tracing::debug!(error = %e, "list at the last version failed, listing at \"\"");
                    self.rv_unavailable = true;
                    rv = None;
                }
                Err(e) => {
                    self.back_off(State::Empty, e.retry_after());
                    return Err(e);
                }
            }
        }
    }

    /// Fetches a continuation page; `None` when the state was set and the loop goes on.
    async fn next_page(
        &mut self,
        token: String,
        asked: Option<String>,
    ) -> Option<Result<Event<L::Object>>> {
        let limit = self.limit(asked.as_deref());
        match self
            .lw
            .list_stream(&self.list_request(None, limit, Some(token)))
            .await
        {
            Ok(items) => {
                self.listing(items, asked, false);
                None
            }
            Err(e) if e.is_expired() => {
                // The snapshot behind the token was compacted away, as happens when a full
                // walk takes longer than the compaction window: client-go's pager
                // (`FullListIfExpired`) falls back to one unpaginated list at the version
                // the relist asked for, which restarts this relist; if that version is gone
                // too, the reflector lists at "" as after any expired list.
                tracing::debug!(error = %e, "continuation expired, one unpaginated list");
                match self
                    .lw
                    .list_stream(&self.list_request(asked.clone(), None, None))
                    .await
                {
                    Ok(items) => {
                        self.listing(items, asked, false);
                        Some(Ok(Event::Init))
                    }
                    Err(e)
                        if (e.is_expired() || e.is_too_large_resource_version())
                            && asked.is_some() =>
                    {
                        tracing::debug!(error = %e, "unpaginated list at the asked version failed, listing at \"\"");
                        self.rv_unavailable = true;
                        Some(self.first_page(None).await)
                    }
                    Err(e) => {
                        self.back_off(State::Empty, e.retry_after());
                        Some(Err(e))
                    }
                }
            }
            Err(e) => {
                self.back_off(State::Empty, e.retry_after());
                Some(Err(e))
            }
        }
    }
}

/// Whether `rv` names no version: `""` (unset) or `"0"` (the wire's "any version"), the two
/// values the API itself defines; a list or an event with one cannot be resumed from (a
/// watch from "0" would replay history). Every other version is opaque and never inspected.
fn no_version(rv: &str) -> bool {
    rv.is_empty() || rv == "0"
}

/// An event's object must carry its version: without one the reflector cannot resume.
fn versioned<K: Resource>(o: &K) -> Result<()> {
    if no_version(&o.resource_version()) {
        return Err(Error::Decode(format!(
            "watch event for {} without metadata.resourceVersion",
            o.key()
        )));
    }
    Ok(())
}
