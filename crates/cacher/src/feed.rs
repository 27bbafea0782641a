//! The feeder: lists and watches the backend through the client reflector, applies each event
//! to the watch cache, then queues it for the dispatcher; and the progress requester, which
//! asks the backend for progress while consistent reads wait.
//!
//! Readiness follows the reflector: a relist makes the cacher Pending and ends every watcher
//! (they get "not ready", 429, once) before the first object of the new list arrives; the
//! cache is replaced and the cacher Ready again (a new generation) once the list is complete.
//!
//! The backend's watch is opened once and kept until it fails (no timeout, no idle deadline),
//! as upstream's cacher does. When it fails while the cache is ready, every watcher ends (as
//! in a relist, below) and a new reflector relists: clients then reconnect, possibly to
//! another server whose backend still works, instead of waiting on a silent stream.
//!
//! An event at or below the version the cache already holds cannot be placed: the backend's
//! stream and the cache disagree. It is never dropped silently: the feeder starts a new
//! reflector, which relists, so watchers are told (as above) and the state is rebuilt.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::Object;
use listwatch_runtime::Event as ReflectorEvent;
use listwatch_storage::{GetOptions, Key, WatchEvent};
use listwatch_watchcache::WatchCache;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::dispatch::Incoming;
use crate::latency::Stage;
use crate::{Inner, ReadyState, floor, lw};

/// Why one reflector's run ended.
enum Ended {
    /// The cacher stops (or the dispatcher is gone).
    Stop,
    /// The backend's stream and the cache disagree: start over with a relist.
    Resync,
    /// The list read above the floor of the window (see `floor`): relist at once, at
    /// exactly the floor.
    RelistAtFloor,
}

/// Runs reflectors until the cacher stops; see the module docs.
pub(crate) async fn feed(inner: Arc<Inner>, mut cache: WatchCache, tx: mpsc::Sender<Incoming>) {
    let key = match Key::collection(&inner.config.resource, None) {
        Ok(key) => key,
        Err(e) => {
            tracing::error!(resource = %inner.config.resource, error = %e, "cannot cache this resource");
            inner.set_ready(ReadyState::Stopped);
            return;
        }
    };
    let mut lw = lw::StorageListerWatcher::new(Arc::clone(&inner.backend), key);
    let arrivals = lw::Arrivals::default();
    lw.arrivals = Some(arrivals.clone());
    let mut stop = inner.stop.subscribe();
    // The floor an exact relist tried in this pending period (see `floor::relist_at`).
    let mut tried = None;
    loop {
        match run_reflector(&inner, &mut cache, &tx, lw.clone(), &arrivals, &mut tried).await {
            Ended::Stop => break,
            // Each such relist is at a strictly lower floor than the last: no hot loop.
            Ended::RelistAtFloor => {}
            // A backend that keeps disagreeing must not make this a hot loop.
            Ended::Resync => tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => break,
            },
        }
    }
    inner.set_ready(ReadyState::Stopped);
}

async fn run_reflector(
    inner: &Inner,
    cache: &mut WatchCache,
    tx: &mpsc::Sender<Incoming>,
    lw: lw::StorageListerWatcher,
    arrivals: &lw::Arrivals,
    tried: &mut Option<u64>,
) -> Ended {
    // The storage watch never times out (see `lw`) and a dead backend connection ends it with
    // an error, so no idle deadline: a quiet resource may see no event for hours.
    let config = lw::StorageListerWatcher::reflector_config(
        listwatch_runtime::Config::default().page_size(inner.config.list_page_size),
    );
    let mut relists = lw.relists.subscribe();
    // The relists begun up to the last one whose objects started arriving.
    let mut seen = *relists.borrow_and_update();
    // The reflector takes the lister-watcher; this handle asks it for an exact relist.
    let relister = lw.clone();
    let events = listwatch_runtime::watcher(lw, config);
    futures::pin_mut!(events);
    let mut stop = inner.stop.subscribe();
    if *stop.borrow() {
        return Ended::Stop;
    }
    let mut relist: Vec<Object> = Vec::new();
    let resource = inner.config.resource.as_str();
    let every = inner
        .config
        .compaction_poll_interval
        .max(Duration::from_millis(10));
    let mut compaction_poll = tokio::time::interval_at(Instant::now() + every, every);
    compaction_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let item = tokio::select! {
            item = events.next() => item,
            _ = compaction_poll.tick() => {
                // Drops what no read may use any more (a no-op when nothing moved).
                cache.compact(inner.backend.compacted_revision());
                continue;
            }
            Ok(()) = relists.changed() => {
                let begun = *relists.borrow_and_update();
                if begun > seen && !begin_relist(inner, tx).await {
                    return Ended::Stop;
                }
                continue;
            }
            _ = stop.changed() => None,
        };
        let Some(item) = item else {
            return Ended::Stop;
        };
        let ev = match item {
            Ok(ev) => ev,
            Err(e) if inner.ready_state() == ReadyState::Ready => {
                // The storage watch failed (e.g. etcd lost its quorum: "no leader"). As
                // upstream's startCaching → terminateAllWatchers: every watcher ends now (429,
                // so clients come back, perhaps through another server), and the cache
                // relists; until the relist succeeds the resource is Pending.
                tracing::warn!(resource, error = %e, "the cacher's storage watch failed; ending every watcher and relisting");
                inner.metrics.storage_watch_failures.inc();
                // A 410 says the storage's history moved away (compacted past the cache, or
                // reset under it): no resuming from the cache's version then.
                if !begin_relist_from(inner, tx, !e.is_expired()).await {
                    return Ended::Stop;
                }
                return Ended::Resync;
            }
            Err(e) => {
                tracing::warn!(resource, error = %e, "cacher reflector error");
                if let Ok(mut last) = inner.last_error.lock() {
                    *last = Some(e.to_string());
                }
                continue;
            }
        };
        #[cfg(feature = "fault-injection")]
        if let ReflectorEvent::Apply(o) | ReflectorEvent::Delete(o) = &ev
            && inner.faults.misses(o)
        {
            let _ = arrivals.take(o.resource_version());
            tracing::warn!(
                resource,
                rv = o.resource_version(),
                name = o.name(),
                "fault injection: the watch cache misses this event"
            );
            continue;
        }
        match ev {
            ReflectorEvent::Init => {
                relist.clear();
                if let Ok(mut last) = inner.last_error.lock() {
                    *last = None;
                }
                seen = *relists.borrow();
                // Normally Pending already (the relist's start was signalled).
                if !begin_relist(inner, tx).await {
                    return Ended::Stop;
                }
            }
            ReflectorEvent::InitApply(o) => relist.push(o),
            ReflectorEvent::InitDone { resource_version } => {
                let Some(resource_version) = own_version(resource, &resource_version) else {
                    inner.metrics.resyncs.inc();
                    return Ended::Resync;
                };
                // Held until the cacher is Ready: no list answered by the backend records a
                // version in between (see `floor`).
                let mut floor = inner.floor.lock().await;
                let compacted = inner.backend.compacted_revision();
                if let Some(at) = floor::relist_at(&floor, resource_version, compacted, *tried) {
                    tracing::info!(
                        resource,
                        listed = resource_version,
                        floor = at,
                        "a list answered by the storage while the cache listed handed out an \
                         older version; relisting at it, so that a watch from it is served"
                    );
                    *tried = Some(at);
                    relister.list_next_at(at);
                    return Ended::RelistAtFloor;
                }
                if let Err(e) = cache.replace(std::mem::take(&mut relist), resource_version) {
                    tracing::error!(resource, error = %e, "cannot replace the watch cache");
                    inner.metrics.resyncs.inc();
                    return Ended::Resync;
                }
                let (done, ready) = tokio::sync::oneshot::channel();
                if tx
                    .send(Incoming::Ready(resource_version, done))
                    .await
                    .is_err()
                    || ready.await.is_err()
                {
                    return Ended::Stop;
                }
                inner.set_ready(ReadyState::Ready);
                *floor = None;
                *tried = None;
                drop(floor);
                tracing::info!(resource, rv = resource_version, "watch cache ready");
            }
            ReflectorEvent::Apply(o) | ReflectorEvent::Delete(o)
                if o.resource_version() <= cache.view().resource_version() =>
            {
                tracing::error!(
                    resource,
                    rv = o.resource_version(),
                    cache_rv = cache.view().resource_version(),
                    "the backend sent an event the cache is already past; relisting"
                );
                inner.metrics.resyncs.inc();
                return Ended::Resync;
            }
            ReflectorEvent::Apply(o) => {
                let existed = Key::object(resource, o.namespace(), o.name())
                    .ok()
                    .and_then(|k| {
                        cache
                            .view()
                            .get(
                                &k,
                                &GetOptions {
                                    ignore_not_found: true,
                                    ..Default::default()
                                },
                            )
                            .ok()
                            .flatten()
                    })
                    .is_some();
                let ev = if existed {
                    WatchEvent::Modified {
                        object: o,
                        prev: None,
                    }
                } else {
                    WatchEvent::Added(o)
                };
                let origin = arrivals.take(ev.resource_version().unwrap_or(0));
                if let Some(ended) = apply(inner, cache, ev, origin, tx).await {
                    return ended;
                }
            }
            ReflectorEvent::Delete(o) => {
                let origin = arrivals.take(o.resource_version());
                if let Some(ended) = apply(inner, cache, WatchEvent::Deleted(o), origin, tx).await {
                    return ended;
                }
            }
            ReflectorEvent::Bookmark { resource_version } => {
                let Some(resource_version) = own_version(resource, &resource_version) else {
                    inner.metrics.resyncs.inc();
                    return Ended::Resync;
                };
                // Storage progress moves the cache's version, nothing else (as upstream).
                cache.progress(resource_version);
                if tx.send(Incoming::Progress(resource_version)).await.is_err() {
                    return Ended::Stop;
                }
            }
        }
    }
}

/// A relist begins: Pending for the whole of it; watchers of the old state end now (with
/// "not ready"), and no one registers until the new state is in (see `Incoming::Reset`).
/// False when the dispatcher is gone.
async fn begin_relist(inner: &Inner, tx: &mpsc::Sender<Incoming>) -> bool {
    begin_relist_from(inner, tx, false).await
}

/// [`begin_relist`]; with `resume`, the cache's version is the floor of the new window (see
/// `floor`): the storage's watch failed (etcd restarted, lost its quorum) without a 410, so
/// nothing says the cache's history is gone, and the watchers it ends now, and the clients
/// of its last lists,
/// come back from versions up to it — served, if the storage still has that history,
/// instead of a 410 and a relist each.
async fn begin_relist_from(inner: &Inner, tx: &mpsc::Sender<Incoming>, resume: bool) -> bool {
    if inner.ready_state() != ReadyState::Ready {
        return true;
    }
    tracing::info!(resource = %inner.config.resource, "watch cache relisting");
    inner.metrics.relists.inc();
    {
        let mut floor = inner.floor.lock().await;
        inner.set_ready(ReadyState::Pending);
        let rv = inner.reader.resource_version();
        if resume && rv > 0 {
            floor::record(&mut floor, rv);
        }
    }
    let (done, reset) = tokio::sync::oneshot::channel();
    tx.send(Incoming::Reset(done)).await.is_ok() && reset.await.is_ok()
}

/// Applies one event to the cache and queues it for the dispatcher; `Some` when the run ends.
async fn apply(
    inner: &Inner,
    cache: &mut WatchCache,
    ev: WatchEvent,
    origin: Option<std::time::Instant>,
    tx: &mpsc::Sender<Incoming>,
) -> Option<Ended> {
    let resource = inner.config.resource.as_str();
    let rv = ev.resource_version().unwrap_or(0);
    match cache.apply(ev) {
        // The cache's own entry, even if a byte budget already squeezed it out of the window.
        Ok(Some(ev)) => {
            if let Some(at) = origin {
                inner.metrics.stages.observe(
                    Stage::StorageToCache,
                    ev.received_at.saturating_duration_since(at),
                );
            }
            tx.send(Incoming::Event(ev, origin))
                .await
                .is_err()
                .then_some(Ended::Stop)
        }
        Ok(None) => None,
        Err(e) => {
            // Only an object the cache cannot key (no name) gets here: nothing can watch or
            // list it by key, so it is left out, loudly.
            tracing::error!(resource, rv, error = %e, "watch cache refused an event");
            None
        }
    }
}

/// While consistent reads wait for the cache, asks the backend for progress: at once when the
/// first one starts waiting, then every `interval` while any waits. Sleeps otherwise.
pub(crate) async fn request_progress(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    loop {
        tokio::select! {
            () = inner.reader.waiter_arrived() => {}
            _ = stop.changed() => return,
        }
        while inner.reader.has_waiters() {
            // A reader arriving after the others left is answered at once, not after the pause.
            let arrival = inner.reader.next_first_waiter();
            if let Err(e) = inner.backend.request_watch_progress().await {
                tracing::debug!(error = %e, "progress request failed");
            }
            tokio::select! {
                () = tokio::time::sleep(inner.config.progress_request_interval) => {}
                () = arrival => {}
                _ = stop.changed() => return,
            }
        }
    }
}

/// A version the reflector passed on, read as the number it is: the reflector carries
/// versions as opaque strings (as any client must), but these come from the cache's own
/// storage, whose versions are decimal revisions ([`listwatch_api::rv`]) that the cache
/// orders (the comparable-version side of upstream's split). One that is not a number
/// cannot come from a backend; it is logged and the cache relists.
fn own_version(resource: &str, rv: &str) -> Option<u64> {
    match listwatch_api::rv::parse(rv) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(resource, error = %e, "the backend sent a version that is not a revision; relisting");
            None
        }
    }
}
