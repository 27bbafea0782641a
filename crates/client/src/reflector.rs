//! The reflector: list, then watch from the list's version, forever, with client-go's
//! recovery rules (`k8s.io/client-go/tools/cache/reflector.go`).
//!
//! [`watcher`] is the loop itself, a [`Stream`] of [`Event`]s (like kube-rs's `watcher()`);
//! [`reflector`] applies those events to a store [`Writer`] and yields the resulting
//! [`Delta`]s. Dropping either stream cancels the list or watch in flight.
//!
//! Errors come out of the stream as `Err` items for the caller to log or count; they are
//! never fatal: the loop recovers by itself (relist, re-watch or back off) and keeps going.
//!
//! # Rules (UPSTREAM.md, "Client reflector")
//!
//! - Lists page by [`Config::page_size`]. The first list asks for RV `"0"` (any version, served
//!   from a cache), later ones for the last synced version; a list failing with 410 Expired or
//!   504 "Too large resource version" is retried at once with RV `""` (a consistent read),
//!   which later relists keep using until one succeeds. A 410 on a continuation page restarts
//!   the list from the first page at `""`.
//! - The watch starts from the last synced version, always with bookmarks, and with a
//!   server timeout drawn uniformly from `[min_watch_timeout, 2 × min_watch_timeout)`.
//! - A watch that cannot be opened because of 429 or a refused connection is retried after a
//!   backoff without relisting; any other failure (410 included) relists after a backoff.
//! - A watch stream that ends normally is reopened at once from the last version seen; one
//!   that ends within [`Config::min_watch_duration`] with no events is an error (relist
//!   after a backoff); a transport failure mid-stream is a dropped watch (re-watch); an
//!   `ERROR` event relists.
//! - Bookmarks only advance the version.
//! - Every watch (streaming lists included) has a client-side idle deadline: its server
//!   timeout plus [`Config::watch_idle_margin`], counted from the last event or bookmark. A
//!   watch past it is a dead connection ([`Error::WatchIdle`]) and is reopened from the last
//!   version, so a half-open connection never leaves the store silently stale.
//! - Streaming list ([`Config::streaming_list`]): a watch with `sendInitialEvents=true`,
//!   `resourceVersionMatch=NotOlderThan`, whose events until the initial-events-end bookmark
//!   form the relist; the same stream then goes on as the watch. Any failure falls back to a
//!   plain list for that relist.

use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use listwatch_api::{FieldSelector, LabelSelector};
use rand::Rng;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::lister::{
    ListRequest, ListerWatcher, VersionMatch, WatchEvent, WatchRequest, WatchStream,
};
use crate::resource::Resource;
use crate::store::{Delta, Writer};

/// What the reflector tells its consumer.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<K> {
    /// A relist starts; the objects that follow (until `InitDone`) are the whole new state.
    Init,
    /// One object of the relist.
    InitApply(K),
    /// The relist is complete at this version; keys not seen since `Init` are gone.
    InitDone {
        /// The version the new state reflects.
        resource_version: u64,
    },
    /// An object was added or modified.
    Apply(K),
    /// An object was deleted (its last state).
    Delete(K),
    /// Progress without a change.
    Bookmark {
        /// The version reached.
        resource_version: u64,
    },
}

/// Reflector configuration. [`Default`] mirrors client-go.
#[derive(Debug, Clone)]
pub struct Config {
    /// Only objects whose labels match.
    pub label_selector: LabelSelector,
    /// Only objects whose fields match.
    pub field_selector: FieldSelector,
    /// Objects per list page (client-go `pager.defaultPageSize = 500`).
    pub page_size: u32,
    /// Use a streaming list (`sendInitialEvents`) instead of paginated lists, falling back to
    /// a list when it fails (client-go's `WatchListClient` feature). Off by default: client-go
    /// turned it on in 1.35, but kube-apiserver's cacher turns it off for its own reflector
    /// (`UseWatchList = false`), and the cacher is this crate's main in-process user.
    pub streaming_list: bool,
    /// Watches ask the server for a timeout random in `[this, 2 × this)` (client-go
    /// `defaultMinWatchTimeout = 5 * time.Minute`).
    pub min_watch_timeout: Duration,
    /// A watch that ends sooner than this without any event is an error (client-go's
    /// "very short watch", 1 s).
    pub min_watch_duration: Duration,
    /// Client-side idle deadline of every watch: a watch that delivers no event (bookmarks
    /// included) for its server timeout plus this margin is abandoned as a dead connection
    /// and reopened from the last version. Catches half-open connections (NAT or
    /// load-balancer state lost, a peer gone without a reset, a proxy that drops silently)
    /// and servers that stall mid-frame, which would otherwise leave the store silently
    /// stale. Ours: client-go relies on HTTP/2 pings and the server's timeout instead.
    pub watch_idle_margin: Duration,
    /// First backoff delay (800 ms).
    pub initial_backoff: Duration,
    /// Largest backoff base delay (30 s).
    pub max_backoff: Duration,
    /// Backoff returns to `initial_backoff` after this long without failures (2 min).
    pub backoff_reset: Duration,
    /// Jitter factor: a delay is `base × (1 + jitter × rand[0,1))` (client-go 1.0).
    pub backoff_jitter: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            label_selector: LabelSelector::everything(),
            field_selector: FieldSelector::everything(),
            // client-go tools/pager: defaultPageSize = 500
            page_size: 500,
            // client-go WatchListClient: beta, on by default since 1.35; off here (see the field)
            streaming_list: false,
            // client-go reflector.go: defaultMinWatchTimeout = 5 * time.Minute
            min_watch_timeout: Duration::from_secs(5 * 60),
            // client-go reflector.go handleWatch: watchDuration < time.Second && eventCount == 0
            min_watch_duration: Duration::from_secs(1),
            // ours (see the field): the server's timeout plus 30 s
            watch_idle_margin: Duration::from_secs(30),
            // client-go reflector.go: NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)
            initial_backoff: Duration::from_millis(800),
            max_backoff: Duration::from_secs(30),
            backoff_reset: Duration::from_secs(2 * 60),
            backoff_jitter: 1.0,
        }
    }
}

impl Config {
    /// Sets the label selector.
    #[must_use]
    pub fn labels(mut self, selector: LabelSelector) -> Self {
        self.label_selector = selector;
        self
    }

    /// Sets the field selector.
    #[must_use]
    pub fn fields(mut self, selector: FieldSelector) -> Self {
        self.field_selector = selector;
        self
    }

    /// Sets the list page size (at least 1).
    #[must_use]
    pub fn page_size(mut self, n: u32) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// Turns the streaming list on or off.
    #[must_use]
    pub fn streaming_list(mut self, on: bool) -> Self {
        self.streaming_list = on;
        self
    }

    /// Sets the minimum watch timeout.
    #[must_use]
    pub fn min_watch_timeout(mut self, d: Duration) -> Self {
        self.min_watch_timeout = d;
        self
    }

    /// Sets the shortest healthy watch.
    #[must_use]
    pub fn min_watch_duration(mut self, d: Duration) -> Self {
        self.min_watch_duration = d;
        self
    }

    /// Sets the margin of the watch idle deadline over the server timeout.
    #[must_use]
    pub fn watch_idle_margin(mut self, d: Duration) -> Self {
        self.watch_idle_margin = d;
        self
    }

    /// Sets the backoff: first delay, cap, healthy period that resets it, jitter factor.
    #[must_use]
    pub fn backoff(
        mut self,
        initial: Duration,
        max: Duration,
        reset: Duration,
        jitter: f64,
    ) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self.backoff_reset = reset;
        self.backoff_jitter = jitter;
        self
    }
}

/// The state of the loop.
///
/// Transitions (anything may also go to `Backoff { then }` after a failure):
/// - `Empty` → `Listing` (first page fetched; emits `Init`) or `StreamingList` (streaming
///   watch opened; emits `Init`); a list failing with 410/504-too-large retries at `""`;
///   other failures → `Backoff { then: Empty }`.
/// - `Listing` → emits `InitApply` per pending object, fetches the next page, and finally
///   emits `InitDone` → `Listed`; a 410 on a continuation page → `Empty` at `""`.
/// - `StreamingList` → `InitApply` per ADDED; the initial-events-end bookmark emits
///   `InitDone` → `Watching` on the same stream; any failure → `Empty` with a plain list.
/// - `Listed` → `Watching` (watch opened); 429/refused → `Backoff { then: Listed }`;
///   other errors → `Backoff { then: Empty }`.
/// - `Watching` → events; normal end or dropped connection → `Listed`; very short watch or
///   `ERROR` event → `Backoff { then: Empty }`.
/// - `Backoff` → `then` when the delay is over.
enum State<K> {
    Empty,
    Listing {
        pending: std::vec::IntoIter<K>,
        continue_token: Option<String>,
        list_rv: u64,
    },
    StreamingList {
        stream: WatchStream<K>,
        idle: IdleDeadline,
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
struct IdleDeadline {
    sleep: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
    last: Instant,
}

impl IdleDeadline {
    fn new(limit: Duration) -> Self {
        let now = Instant::now();
        Self {
            sleep: Box::pin(tokio::time::sleep_until(now + limit)),
            limit,
            last: now,
        }
    }

    fn touch(&mut self) {
        self.last = Instant::now();
    }

    /// Resolves once the watch has been idle for `limit`.
    async fn expired(&mut self) {
        loop {
            self.sleep.as_mut().await;
            let due = self.last + self.limit;
            if due <= Instant::now() {
                return;
            }
            self.sleep.as_mut().reset(due);
        }
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
            self.touch();
        }
        item
    }
}

struct Machine<L: ListerWatcher> {
    lw: L,
    config: Config,
    state: State<L::Object>,
    /// Version of the last completed list, event or bookmark; `None` before the first list.
    last_rv: Option<u64>,
    /// The last version cannot be served (410 / too large): list at `""` until a list works.
    rv_unavailable: bool,
    /// A streaming list failed: this relist uses a plain list.
    fallback_to_list: bool,
    backoff: Backoff,
}

/// Runs the list-watch loop of `lw`, yielding its events (and its recovered errors).
///
/// ```no_run
/// use futures::StreamExt;
/// use listwatch_client::{watcher, Config, Event, HttpConfig, HttpListerWatcher};
/// # async fn demo() -> listwatch_client::Result<()> {
/// let lw = HttpListerWatcher::new(HttpConfig::new("http://127.0.0.1:8080")?, "/api/v1/pods")?;
/// let mut events = std::pin::pin!(watcher(lw, Config::default()));
/// while let Some(event) = events.next().await {
///     if let Ok(Event::Apply(pod)) = event {
///         println!("{} at {}", pod.name(), pod.resource_version());
///     }
/// }
/// # Ok(()) }
/// ```
pub fn watcher<L: ListerWatcher>(
    lw: L,
    config: Config,
) -> impl Stream<Item = Result<Event<L::Object>>> + Send {
    let backoff = Backoff::new(
        config.initial_backoff,
        config.max_backoff,
        config.backoff_reset,
        config.backoff_jitter,
    );
    let machine = Machine {
        lw,
        config,
        state: State::Empty,
        last_rv: None,
        rv_unavailable: false,
        fallback_to_list: false,
        backoff,
    };
    futures::stream::unfold(machine, |mut m| async move {
        let item = m.step().await;
        Some((item, m))
    })
}

/// Applies `events` to `writer` and yields what changed in the store, one delta at a time.
/// Errors pass through.
pub fn reflector<K, S>(
    mut writer: Writer<K>,
    events: S,
) -> impl Stream<Item = Result<Delta<K>>> + Send
where
    K: Resource,
    S: Stream<Item = Result<Event<K>>> + Send,
{
    events.flat_map(move |e| {
        let items: Vec<Result<Delta<K>>> = match e {
            Ok(e) => writer.apply(e).into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        };
        futures::stream::iter(items)
    })
}

/// A lister-watcher feeding a store: [`watcher`] and [`reflector`] packaged together.
///
/// ```no_run
/// use listwatch_client::{Config, HttpConfig, HttpListerWatcher, Reflector};
/// # async fn demo() -> listwatch_client::Result<()> {
/// let lw = HttpListerWatcher::new(HttpConfig::new("http://127.0.0.1:8080")?, "/api/v1/pods")?;
/// let reflector = Reflector::new(lw, Config::default());
/// let pods = reflector.store();
/// tokio::spawn(reflector.run());
/// pods.wait_until_synced().await.ok();
/// # Ok(()) }
/// ```
pub struct Reflector<L: ListerWatcher> {
    lw: L,
    config: Config,
    writer: Writer<L::Object>,
}

impl<L: ListerWatcher> Reflector<L> {
    /// A reflector into a new store without indexes.
    pub fn new(lw: L, config: Config) -> Self {
        Self::with_writer(lw, config, Writer::default())
    }

    /// A reflector into the store of `writer` (e.g. one with index functions).
    pub fn with_writer(lw: L, config: Config, writer: Writer<L::Object>) -> Self {
        Self { lw, config, writer }
    }

    /// A reader of the store.
    pub fn store(&self) -> crate::store::Store<L::Object> {
        self.writer.store()
    }

    /// The store's changes as a stream; nothing happens until it is polled.
    pub fn into_stream(self) -> impl Stream<Item = Result<Delta<L::Object>>> + Send {
        reflector(self.writer, watcher(self.lw, self.config))
    }

    /// Runs until dropped, logging the errors it recovers from.
    pub async fn run(self) {
        self.into_stream()
            .for_each(|d| {
                if let Err(e) = d {
                    tracing::warn!(error = %e, "reflector error, recovering");
                }
                futures::future::ready(())
            })
            .await;
    }
}

impl<L: ListerWatcher> Machine<L> {
    /// Advances until one item can be yielded.
    async fn step(&mut self) -> Result<Event<L::Object>> {
        loop {
            let state = std::mem::replace(&mut self.state, State::Empty);
            match state {
                State::Empty => {
                    if self.config.streaming_list && !self.fallback_to_list {
                        match self.open_streaming_list().await {
                            Ok((stream, idle)) => {
                                self.state = State::StreamingList { stream, idle };
                                return Ok(Event::Init);
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "streaming list failed, falling back to list");
                                self.fallback_to_list = true;
                                return Err(e);
                            }
                        }
                    }
                    let rv = self.relist_rv();
                    return self.first_page(rv).await;
                }
                State::Listing {
                    mut pending,
                    continue_token,
                    list_rv,
                } => {
                    if let Some(obj) = pending.next() {
                        self.state = State::Listing {
                            pending,
                            continue_token,
                            list_rv,
                        };
                        return Ok(Event::InitApply(obj));
                    }
                    match continue_token {
                        Some(token) => {
                            if let Some(item) = self.next_page(token).await {
                                return item;
                            }
                        }
                        None => {
                            self.last_rv = Some(list_rv);
                            self.rv_unavailable = false;
                            self.fallback_to_list = false;
                            self.state = State::Listed;
                            return Ok(Event::InitDone {
                                resource_version: list_rv,
                            });
                        }
                    }
                }
                State::StreamingList {
                    mut stream,
                    mut idle,
                } => match idle.next(&mut stream).await {
                    None => {
                        tracing::warn!(
                            "streaming list idle past its deadline, falling back to list"
                        );
                        self.fallback_to_list = true;
                        return Err(Error::WatchIdle(idle.limit));
                    }
                    Some(Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)))) => {
                        self.state = State::StreamingList { stream, idle };
                        return Ok(Event::InitApply(obj));
                    }
                    Some(Some(Ok(WatchEvent::Bookmark {
                        resource_version,
                        initial_events_end: true,
                    }))) => {
                        self.last_rv = Some(resource_version);
                        self.rv_unavailable = false;
                        self.state = State::Watching {
                            stream,
                            started: Instant::now(),
                            events: 1,
                            idle,
                        };
                        return Ok(Event::InitDone { resource_version });
                    }
                    Some(Some(Ok(WatchEvent::Bookmark { .. }))) => {
                        self.state = State::StreamingList { stream, idle }
                    }
                    Some(Some(Ok(WatchEvent::Deleted(_))) | None) => {
                        self.fallback_to_list = true;
                        return Err(Error::StreamingListIncomplete);
                    }
                    Some(Some(Err(e))) => {
                        tracing::warn!(error = %e, "streaming list failed, falling back to list");
                        if e.is_expired() {
                            self.rv_unavailable = true;
                        }
                        self.fallback_to_list = true;
                        return Err(e);
                    }
                },
                State::Listed => {
                    let request = self.watch_request(self.last_rv, false);
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
                        self.after_watch_end(started, events);
                        return Err(Error::WatchIdle(idle.limit));
                    }
                    Some(Some(Ok(event))) => {
                        let out = match event {
                            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                                self.last_rv = Some(o.resource_version());
                                Event::Apply(o)
                            }
                            WatchEvent::Deleted(o) => {
                                self.last_rv = Some(o.resource_version());
                                Event::Delete(o)
                            }
                            WatchEvent::Bookmark {
                                resource_version, ..
                            } => {
                                self.last_rv = Some(resource_version);
                                Event::Bookmark { resource_version }
                            }
                        };
                        self.state = State::Watching {
                            stream,
                            started,
                            events: events + 1,
                            idle,
                        };
                        return Ok(out);
                    }
                    Some(Some(Err(e @ Error::Api(_)))) => {
                        // An ERROR event: 410 relists from the last version (a list at that
                        // version is "not older than", so it may still be served).
                        self.back_off(State::Empty, e.retry_after());
                        return Err(e);
                    }
                    Some(Some(Err(e))) => {
                        // A dropped connection or garbled frame: the watch is gone, the state
                        // is fine. Re-watch unless it was a very short watch.
                        drop(stream);
                        self.after_watch_end(started, events);
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

    fn back_off(&mut self, then: State<L::Object>, hint: Option<Duration>) {
        let delay = self.backoff.next_delay().max(hint.unwrap_or_default());
        tracing::debug!(?delay, "backing off");
        self.state = State::Backoff {
            sleep: Box::pin(tokio::time::sleep(delay)),
            then: Box::new(then),
        };
    }

    /// client-go `relistResourceVersion`.
    fn relist_rv(&self) -> Option<u64> {
        if self.rv_unavailable {
            None
        } else {
            Some(self.last_rv.unwrap_or(0))
        }
    }

    fn list_request(&self, rv: Option<u64>, continue_token: Option<String>) -> ListRequest {
        ListRequest {
            resource_version: if continue_token.is_some() { None } else { rv },
            resource_version_match: None,
            limit: Some(self.config.page_size),
            continue_token,
            label_selector: self.config.label_selector.clone(),
            field_selector: self.config.field_selector.clone(),
        }
    }

    fn watch_request(&self, rv: Option<u64>, streaming: bool) -> WatchRequest {
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
        }
    }

    async fn open_streaming_list(&mut self) -> Result<(WatchStream<L::Object>, IdleDeadline)> {
        // client-go `rewatchResourceVersion`: the last version, or "" when unavailable.
        let rv = if self.rv_unavailable {
            None
        } else {
            self.last_rv
        };
        let request = self.watch_request(rv, true);
        let stream = self.lw.watch(&request).await?;
        Ok((stream, IdleDeadline::new(self.idle_limit(&request))))
    }

    /// How long a watch opened with `request` may go without an event.
    fn idle_limit(&self, request: &WatchRequest) -> Duration {
        let server = request
            .timeout_seconds
            .map_or(self.config.min_watch_timeout * 2, Duration::from_secs);
        server.saturating_add(self.config.watch_idle_margin)
    }

    /// Lists the first page at `rv`; on 410 / too-large retries at once at `""`.
    async fn first_page(&mut self, rv: Option<u64>) -> Result<Event<L::Object>> {
        let mut rv = rv;
        loop {
            match self.lw.list(&self.list_request(rv, None)).await {
                Ok(page) => {
                    self.state = State::Listing {
                        pending: page.items.into_iter(),
                        continue_token: page.continue_token,
                        list_rv: page.resource_version,
                    };
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
    async fn next_page(&mut self, token: String) -> Option<Result<Event<L::Object>>> {
        match self.lw.list(&self.list_request(None, Some(token))).await {
            Ok(page) => {
                self.state = State::Listing {
                    pending: page.items.into_iter(),
                    continue_token: page.continue_token,
                    list_rv: page.resource_version,
                };
                None
            }
            Err(e) if e.is_expired() => {
                // The snapshot behind the token is gone: start a full list over at "".
                tracing::debug!(error = %e, "continuation expired, relisting from the start");
                self.rv_unavailable = true;
                self.state = State::Empty;
                Some(Err(e))
            }
            Err(e) => {
                self.back_off(State::Empty, e.retry_after());
                Some(Err(e))
            }
        }
    }
}
