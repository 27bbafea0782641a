//! The in-process lister-watcher that feeds the cache: listwatch-runtime's reflector, pointed
//! at a [`Storage`] instead of an HTTP server.
//!
//! It translates client requests into storage options and storage events into client events
//! one to one, except that a list always reads the latest state, whatever version it asks
//! for, and a watch never ends by a timeout (both as upstream's cacher lister-watcher: one
//! storage watch per resource until it fails); storage errors become the `Status` the wire
//! would carry, so the reflector's recovery rules (relist on 410, back off on 429) apply
//! unchanged. The one exception is the cacher's own: a relist the feeder asks to read at
//! exactly the floor of the cache's window (see `floor`) reads there.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use listwatch_api::Object;
use listwatch_runtime::{
    Error as ClientError, ListRequest, ListerWatcher, Page, VersionMatch,
    WatchEvent as ClientEvent, WatchRequest, WatchStream,
};
use listwatch_storage::{
    Error, Key, ListOptions, ResourceVersionMatch, SelectionPredicate, Storage, WatchEvent,
};

/// Lists and watches one collection of a storage backend (or of a cacher): the in-process
/// lister-watcher the cache's reflector uses, and any in-process informer (e.g. the RBAC
/// authorizer's) can use.
#[derive(Clone)]
pub struct StorageListerWatcher {
    pub(crate) backend: Arc<dyn Storage>,
    pub(crate) key: Key,
    /// Counts relists as they begin (the reflector asks for a first page), so that the
    /// feeder goes Pending before the first object of the new list arrives.
    pub(crate) relists: Arc<tokio::sync::watch::Sender<u64>>,
    /// When set, when each object event left the backend's watch stream, by version (the
    /// start of the dispatch-latency stages; see `Arrivals`).
    pub(crate) arrivals: Option<Arrivals>,
    /// When set, the next list reads at exactly this version (the feeder's relist at the
    /// floor of the cache's window); cleared once a list read there or found it compacted.
    pub(crate) exact: Arc<std::sync::Mutex<Option<u64>>>,
}

impl StorageListerWatcher {
    /// The reflector idle margin for a reflector or informer over a `StorageListerWatcher`:
    /// effectively none (ten years). Its watch never ends by a timeout, a quiet resource may
    /// see no event for hours, and a broken backend connection is resumed or ends the watch
    /// with an error by itself; an idle deadline would only re-watch every 5–10 minutes
    /// (and, on a quiet resource whose version was compacted meanwhile, relist).
    pub const NO_IDLE_DEADLINE: std::time::Duration =
        std::time::Duration::from_secs(10 * 365 * 24 * 3600);

    /// The largest backoff of a reflector over a `StorageListerWatcher` (client-go's is
    /// 30 s): a retry is an in-process call, or (the cache's own reflector) one list of its
    /// backend, and what an in-process reflector waits for — a backend coming up, a cache
    /// turning ready — should be seen within seconds: the server's own informers gate its
    /// readiness, and with a 30 s cap a server started before etcd stayed unready for up
    /// to a minute after etcd came up. A 429's Retry-After is capped by it too.
    pub const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(2);

    /// A reflector configuration for this lister-watcher: `base` with
    /// [`Self::NO_IDLE_DEADLINE`] as its idle margin and its backoff capped at
    /// [`Self::MAX_BACKOFF`].
    pub fn reflector_config(base: listwatch_runtime::Config) -> listwatch_runtime::Config {
        let (initial, reset, jitter) = (
            base.initial_backoff.min(Self::MAX_BACKOFF),
            base.backoff_reset,
            base.backoff_jitter,
        );
        base.watch_idle_margin(Self::NO_IDLE_DEADLINE).backoff(
            initial,
            Self::MAX_BACKOFF,
            reset,
            jitter,
        )
    }
}

/// Versions of object events and when the backend handed them over, oldest first, at most
/// [`Arrivals::CAPACITY`]: written by the watch stream and read by the feeder, which polls
/// that stream, so the lock is never contended.
#[derive(Clone, Default)]
pub(crate) struct Arrivals(
    Arc<std::sync::Mutex<std::collections::VecDeque<(u64, std::time::Instant)>>>,
);

impl Arrivals {
    const CAPACITY: usize = 4096;

    fn record(&self, rv: u64) {
        let now = std::time::Instant::now();
        let mut q = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() >= Self::CAPACITY {
            q.pop_front();
        }
        q.push_back((rv, now));
    }

    /// When the event at `rv` arrived, forgetting it and anything older.
    pub(crate) fn take(&self, rv: u64) -> Option<std::time::Instant> {
        let mut q = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(&(r, at)) = q.front() {
            if r > rv {
                return None;
            }
            q.pop_front();
            if r == rv {
                return Some(at);
            }
        }
        None
    }
}

impl StorageListerWatcher {
    /// Lists and watches everything under `key` in `backend`.
    pub fn new(backend: Arc<dyn Storage>, key: Key) -> Self {
        Self {
            backend,
            key,
            relists: Arc::new(tokio::sync::watch::channel(0).0),
            arrivals: None,
            exact: Arc::default(),
        }
    }

    /// Makes the next list (its first page) read at exactly `rv`.
    pub(crate) fn list_next_at(&self, rv: u64) {
        *self
            .exact
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(rv);
    }

    /// The version the next first page must read at exactly, if any.
    fn exact_at(&self) -> Option<u64> {
        *self
            .exact
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn relist_begins(&self) {
        self.relists.send_modify(|n| *n += 1);
    }
}

impl std::fmt::Debug for StorageListerWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageListerWatcher")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

fn to_client(e: &Error) -> ClientError {
    match e {
        Error::Unreachable { .. } => ClientError::Connect(e.to_string().into()),
        _ => ClientError::Api(Box::new(e.to_status())),
    }
}

fn version_match(m: Option<VersionMatch>) -> Option<ResourceVersionMatch> {
    m.map(|m| match m {
        VersionMatch::NotOlderThan => ResourceVersionMatch::NotOlderThan,
        VersionMatch::Exact => ResourceVersionMatch::Exact,
    })
}

/// The storage version of a version the reflector sends back. The reflector treats versions
/// as opaque strings; the ones it sends here are this storage's own (from a list or an event
/// of it, or `"0"`), decimal revisions, so they are read as numbers here, where the storage
/// needs them. One that is not is refused as a server would refuse it (400 Bad Request).
fn own_version(rv: Option<&str>) -> listwatch_runtime::Result<Option<u64>> {
    listwatch_api::rv::parse_optional(rv).map_err(|e| {
        ClientError::api(listwatch_api::Status::failure(
            400,
            listwatch_api::status::reason::BAD_REQUEST,
            e.to_string(),
        ))
    })
}

fn options(
    rv: Option<u64>,
    m: Option<VersionMatch>,
    label: &listwatch_api::LabelSelector,
    field: &listwatch_api::FieldSelector,
) -> ListOptions {
    ListOptions {
        resource_version: rv,
        resource_version_match: version_match(m),
        predicate: SelectionPredicate {
            label: label.clone(),
            field: field.clone(),
            ..SelectionPredicate::default()
        },
        ..ListOptions::recursive()
    }
}

#[async_trait]
impl ListerWatcher for StorageListerWatcher {
    type Object = Object;

    /// Lists the latest state (a consistent read), whatever version the reflector asks for,
    /// as upstream's cacher lister-watcher does: the reflector relists at its last version
    /// with a page size, which on etcd (and here on every backend) is a legacy Exact read at
    /// that version, so a relist would rebuild the cache at a stale state (or fail with 410
    /// once that version is compacted) instead of the current one. Only a first page the
    /// feeder asked for with `list_next_at` reads at exactly that version.
    async fn list(&self, request: &ListRequest) -> listwatch_runtime::Result<Page<Object>> {
        let r = request;
        let exact = if r.continue_token.is_none() {
            self.relist_begins();
            self.exact_at()
        } else {
            None
        };
        let opts = ListOptions {
            limit: r.limit.map(u64::from),
            continue_token: r.continue_token.clone(),
            ..options(
                exact,
                exact.map(|_| VersionMatch::Exact),
                &r.label_selector,
                &r.field_selector,
            )
        };
        let list = self.backend.list(&self.key, &opts).await;
        if exact.is_some() && !matches!(&list, Err(Error::Unreachable { .. })) {
            // Read there (the continuations follow from their token), or refused (compacted,
            // or a version the storage has not reached after a history reset): either way
            // the next relist reads the latest state. Only an unreachable storage is tried
            // again at the same version.
            *self
                .exact
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
        }
        let list = list.map_err(|e| to_client(&e))?;
        Ok(Page {
            items: list.items,
            resource_version: listwatch_api::rv::format(list.resource_version),
            continue_token: list.continue_token,
        })
    }

    async fn watch(
        &self,
        request: &WatchRequest,
    ) -> listwatch_runtime::Result<WatchStream<Object>> {
        let r = request;
        let opts = ListOptions {
            allow_watch_bookmarks: request.allow_bookmarks,
            send_initial_events: request.send_initial_events.then_some(true),
            // The cache relies on progress notifications for consistent reads.
            progress_notify: true,
            ..options(
                own_version(r.resource_version.as_deref())?,
                r.resource_version_match,
                &r.label_selector,
                &r.field_selector,
            )
        };
        let events = self
            .backend
            .watch(&self.key, &opts)
            .await
            .map_err(|e| to_client(&e))?;
        let arrivals = self.arrivals.clone();
        let events = events.map(move |ev| {
            if let (Some(a), Some(o)) = (&arrivals, ev.object()) {
                a.record(o.resource_version());
            }
            ev
        });
        let events = events.map(move |ev| match ev {
            WatchEvent::Added(o) => Ok(ClientEvent::Added(o)),
            WatchEvent::Modified { object, .. } => Ok(ClientEvent::Modified(object)),
            WatchEvent::Deleted(o) => Ok(ClientEvent::Deleted(o)),
            WatchEvent::Bookmark(b) => Ok(ClientEvent::Bookmark {
                resource_version: listwatch_api::rv::format(b.resource_version),
                initial_events_end: b.initial_events_end,
            }),
            // Whether the reflector relists or re-watches after an error is its decision
            // (client-go's rules: 410 relists, 429/500/unreachable re-watch); a relist shows
            // when it lists, not here.
            WatchEvent::Error(e) => Err(to_client(&e)),
        });
        // The reflector's timeout is ignored, as upstream's cacher lister-watcher does: one
        // storage watch per resource until it fails. Re-opening it now and then would
        // re-watch a quiet resource from a version the backend may have compacted since (410,
        // a relist, every watcher of the resource ended with 429).
        let _ = request.timeout_seconds;
        Ok(events.boxed())
    }
}
