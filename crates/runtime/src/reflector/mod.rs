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
//! # Rules (UPSTREAM.md, "Client reflector"; client-go's `reflector.go` and `pager.go`)
//!
//! - Lists: the first asks for RV `"0"` (any version, served from a cache), later ones for
//!   the last synced version. Pages of 500 at `"0"` or `""`; a relist at a specific version
//!   is one unpaginated list, which kube-apiserver's watch cache can serve (a `limit` with a
//!   non-zero RV goes to etcd) — unless the first list came back paginated (no watch cache)
//!   or [`Config::page_size`] fixes the size. A list failing with 410 Expired or 504 "Too
//!   large resource version" is retried at once with RV `""` (a consistent read), which
//!   later relists keep using until one succeeds. A 410 on a continuation page (a walk
//!   slower than the compaction window) falls back to one unpaginated list at the version
//!   the relist asked for (at `""` if that one is gone too).
//! - A list or event without a resource version is an error, never version 0 (which would
//!   make the next watch replay history).
//! - The watch starts from the last synced version, always with bookmarks, and with a
//!   server timeout drawn uniformly from `[min_watch_timeout, 2 × min_watch_timeout)`.
//! - A watch that cannot be opened because of 429 or a refused connection is retried after a
//!   backoff without relisting; any other failure (410 included) relists after a backoff.
//! - A watch stream that ends normally is reopened at once from the last version seen; one
//!   that ends within [`Config::min_watch_duration`] with no events is an error (relist
//!   after a backoff); a transport failure mid-stream is a dropped watch (re-watch).
//! - An `ERROR` event: 429 backs off and re-watches; 500 backs off and re-watches while such
//!   errors keep coming within [`Config::max_internal_error_retry`], then relists; anything
//!   else (410 Expired included) relists after a backoff.
//! - Bookmarks only advance the version.
//! - Every watch (streaming lists included) has a client-side idle deadline: its server
//!   timeout plus [`Config::watch_idle_margin`], counted from the last event or bookmark. A
//!   watch past it is a dead connection ([`Error::WatchIdle`](crate::Error::WatchIdle)) and
//!   is reopened from the last version, so a half-open connection never leaves the store
//!   silently stale.
//! - Streaming list ([`Config::streaming_list`]): a watch with `sendInitialEvents=true`,
//!   `resourceVersionMatch=NotOlderThan`, whose events until the initial-events-end bookmark
//!   form the relist; the same stream then goes on as the watch. Refused or failing
//!   in-stream with 410 or 504 too-large at a version, it is retried at once at `""`; with
//!   429 or a refused connection, after a backoff; any other failure falls back to a plain
//!   list for that relist.

mod config;
mod machine;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures::{Stream, StreamExt};

pub use config::Config;
use machine::Machine;

use crate::error::Result;
use crate::lister::ListerWatcher;
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
        /// The version the new state reflects (opaque, as the server sent it).
        resource_version: String,
    },
    /// An object was added or modified.
    Apply(K),
    /// An object was deleted (its last state).
    Delete(K),
    /// Progress without a change.
    Bookmark {
        /// The version reached (opaque, as the server sent it).
        resource_version: String,
    },
}

/// Runs the list-watch loop of `lw`, yielding its events (and its recovered errors).
///
/// ```no_run
/// use futures::StreamExt;
/// use listwatch_api::Object;
/// use listwatch_runtime::{watcher, Config, Event, ListerWatcher};
/// # async fn demo(lw: impl ListerWatcher<Object = Object>) -> listwatch_runtime::Result<()> {
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
    // A sharded reflector keeps to its shard whatever the server sends (`Config::shard`).
    watcher_with_abandon(lw, config, Arc::default())
}

/// [`watcher`] whose list in progress the consumer can fail as a whole by setting `abandon`
/// (the informer does, when its transform panicked on an object of a relist): the next
/// item is the relist starting over after a backoff, never that list's `InitDone`.
pub(crate) fn watcher_with_abandon<L: ListerWatcher>(
    lw: L,
    config: Config,
    abandon: Arc<AtomicBool>,
) -> impl Stream<Item = Result<Event<L::Object>>> + Send {
    let lw = crate::shard::Sharded::new(lw, config.shard_selector.clone());
    let mut machine = Machine::new(lw, config);
    machine.abandon = abandon;
    futures::stream::unfold(machine, |mut m| async move {
        let item = m.step().await;
        Some((item, m))
    })
}

/// Applies `events` to `writer` and yields what changed in the store, one delta at a time.
/// Errors pass through, and [`Writer::apply_error`] reads them: one that retries will not
/// mend before the first sync (400, 401, 403, 404, 405, 406) makes the store's
/// [`Store::wait_until_synced`](crate::Store) fail until a later try fails otherwise or
/// succeeds; a delete whose object does not decode ([`Error::SkippedDelete`](crate::Error))
/// removes its key, its delta following the error.
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
            Err(e) => {
                // A failure retries will not mend, before the first sync, fails the store's
                // waits (`Store::wait_until_synced`); a skipped delete removes its key.
                let removed = writer.apply_error(&e);
                std::iter::once(Err(e)).chain(removed.map(Ok)).collect()
            }
        };
        futures::stream::iter(items)
    })
}

/// A lister-watcher feeding a store: [`watcher`] and [`reflector`] packaged together.
///
/// ```no_run
/// use listwatch_api::Object;
/// use listwatch_runtime::{Config, ListerWatcher, Reflector};
/// # async fn demo(lw: impl ListerWatcher<Object = Object> + 'static) {
/// let reflector = Reflector::new(lw, Config::default());
/// let pods = reflector.store();
/// tokio::spawn(reflector.run());
/// pods.wait_until_synced().await.ok();
/// # }
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
