//! The garbage collector of listwatch: it deletes objects whose owners are gone, and it
//! carries out the foreground and orphan deletions a DELETE's propagation policy asks for, as
//! upstream's `pkg/controller/garbagecollector` does.
//!
//! It owns
//! - following every served resource (custom ones included; events excepted, as upstream)
//!   through metadata-only informers over each resource's storage, indexed by owner uid
//!   (`graph`): their lister-watcher (`listwatch_cacher::MetadataListerWatcher`) gives them
//!   each event's shared `PartialObjectMetadata` projection, never the object, and their
//!   stores hold [`meta::Meta`] (identity, deletion, finalizers, owner references) only;
//! - deciding, on live reads, what happens to an object whose owner references point at
//!   owners that are absent (uid-checked: an object of the same name with another uid does
//!   not own it), replaced, or being deleted in the foreground (`worker`), and to owners held
//!   by the `orphan` and `foregroundDeletion` finalizers;
//! - carrying the decisions out (`calls`): reads and deletes through the registry's store of
//!   the kind, metadata edits as API requests.
//!
//! What it does not own: *what a DELETE does* — the finalizers a propagation policy sets,
//! grace periods, the update that removes the last finalizer removing the object — is
//! `listwatch-registry`'s deletion lifecycle. The collector is a client of it.
//!
//! # Why a crate above the endpoints, not inside them
//!
//! Upstream's collector is a controller talking to the API server, so its every write obeys
//! the API's rules. Here every read and write goes through the registry's store of each kind
//! as the API serves it ([`listwatch_endpoints::Api::store`]), never through HTTP: a get is a
//! consistent read, a delete the same lifecycle, with the same kubelet acknowledgement, as
//! the API's DELETE, and a metadata edit (finalizers, owner references) is
//! [`listwatch_registry::Store::patch`] with a JSON merge patch conditional on the
//! resourceVersion read and the object's uid, recorded in managedFields as an `Update` by
//! `kube-controller-manager` (the manager upstream's collector writes as) — so it cannot get
//! a deletion or update rule wrong by reimplementing it. Layers: it depends on
//! `listwatch-endpoints` (for `Api::store` and the served kinds), `listwatch-registry`,
//! `listwatch-runtime` (informers, work queue) and `listwatch-cacher` (the in-process
//! lister-watcher); only the server binary depends on it. Its calls do not pass the server's
//! authentication, authorization, admission or audit, nor take a flow-control seat or count
//! in the API's request metrics: it
//! is part of the server, as the namespace controller is.
//!
//! # Invariants
//! - nothing is deleted on a cached view: an object goes only after live reads found each
//!   of its owners absent, replaced or deleting in the foreground, and the DELETE carries a
//!   uid precondition (a recreated object of the same name is never deleted for its
//!   predecessor) and the resourceVersion those reads saw: an object whose owner references
//!   changed meanwhile (re-parented) is decided again, not deleted; one that changed
//!   otherwise is deleted with the uid precondition alone (upstream's `deleteObject`);
//!   references are removed with resourceVersion-conditional patches;
//! - bounded: one informer per resource (each subscriber queue bounded, lagging subscribers
//!   coalesced by the client crate), two de-duplicating work queues whose size is bounded by
//!   the number of objects, a bounded cache of absent owners, a fixed number of workers;
//!   every call has a deadline, every failure is retried with per-item exponential backoff
//!   (the work queue's rate limits), and a periodic sweep re-queues every object still held
//!   by a collector finalizer, so a missed event delays work but never loses it;
//! - no owner's deletion goes unseen: a dependent is left alone only when each of its live
//!   owners is in the caches (whose deletion then arrives as an event, or as a relist's
//!   `final_state_unknown` deletion); a dependent whose owner was found live but is not cached
//!   yet is verified again, with backoff, until it is (`worker`);
//! - cycles do not hang: an object deleted in the foreground because its owner is, whose
//!   own dependents include one deleting in the foreground, first stops blocking its owners
//!   (upstream's rule), so a ring of blocking references unwinds;
//! - cancel safe: the future returned by [`GarbageCollector::run`] may be dropped at any
//!   await (a lost leader election); every step is an idempotent, conditional write, so a
//!   successor redoing it is harmless.
//!
//! # The kinds it follows
//! The set of served kinds is an input that changes ([`Kinds`]): each set it yields is applied
//! as it comes — an informer started for each kind new to the set, stopped for each kind gone
//! from it — so a custom resource served after start is collected like any other (upstream's
//! `GarbageCollectorSyncPeriod` re-discovery, event-driven here). The workers start once the
//! first set's informers have listed once; a kind added later is worked on as its informer
//! fills (decisions are on live reads, so an unsynced cache delays work but never misleads
//! it). A kind's catalog index is never reused within a run. Without [`GarbageCollector::with_kinds`]
//! the set is the API's served resources as they change ([`ServedKinds`]: the live `KindSet`'s
//! notification, so `Api::add_resource` after start is followed).
//!
//! What still differs from upstream: no metrics of its own; owner references whose kind no
//! served resource has are retried with backoff forever, as upstream's are until discovery
//! knows the kind; an owner reference naming another version of a served kind resolves to
//! that kind.

mod calls;
mod catalog;
mod graph;
pub mod meta;
mod worker;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use listwatch_endpoints::Resource;
use listwatch_runtime::{RateLimits, WorkQueue};

use crate::gc::calls::Calls;
use crate::gc::graph::{Graph, Item, Queues};
use crate::gc::worker::Workers;

/// Why one step of the collector failed (it is retried later, with backoff).
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// A storage read failed.
    #[error("storage: {0}")]
    Storage(#[from] listwatch_storage::Error),
    /// An owner reference names a kind no served resource has.
    #[error("no served resource has apiVersion {api_version:?}, kind {kind:?}")]
    Unresolvable {
        /// The reference's `apiVersion`.
        api_version: String,
        /// The reference's `kind`.
        kind: String,
    },
    /// An owner exists (a live read found it) but the collector's caches have not shown it
    /// yet: its dependent is verified again later, since the owner's deletion would reach
    /// the collector only through a cache that holds it.
    #[error("owner {kind} {name:?} (uid {uid}) exists but is not in the collector's caches yet")]
    OwnerNotObserved {
        /// The owner reference's `kind`.
        kind: String,
        /// The owner reference's `name`.
        name: String,
        /// The owner reference's `uid`.
        uid: String,
    },
    /// The API refused a request.
    #[error("{request}: {code}: {message}")]
    Api {
        /// Method and path.
        request: String,
        /// The HTTP status.
        code: u16,
        /// The Status message.
        message: String,
    },
    /// A request could not be made or its answer not read.
    #[error("request: {0}")]
    Request(String),
    /// A call did not finish within its deadline.
    #[error("{0}: no answer in time")]
    Timeout(String),
    /// A write kept losing optimistic-concurrency races.
    #[error("{0}: the object kept changing")]
    Conflicts(String),
    /// A stored object did not decode.
    #[error("decode: {0}")]
    Decode(String),
}

/// How the collector runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Workers checking objects (upstream's `--concurrent-gc-syncs`, 20; fewer here: each
    /// is a short in-process call).
    pub workers: usize,
    /// Workers orphaning dependents.
    pub orphan_workers: usize,
    /// How often every object still held by a collector finalizer is queued again.
    pub sweep_period: Duration,
    /// Retry backoff of failed items (client-go's default controller rate limits).
    pub rate_limits: RateLimits,
    /// The longest one item may be worked on before it is retried.
    pub item_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 4,
            orphan_workers: 2,
            sweep_period: Duration::from_secs(30),
            rate_limits: RateLimits {
                // Upstream's collector backs off to 1000 s too; a retry within seconds
                // matters more here than a quiet log.
                max_delay: Duration::from_secs(60),
                ..RateLimits::default()
            },
            item_timeout: Duration::from_secs(120),
        }
    }
}

/// The served kinds, as they change: the seam through which the collector follows a kind set
/// that changes at run time (custom resources added or removed).
///
/// Each [`Kinds::subscribe`] is one run's subscription (a new leader subscribes again): it
/// first yields the whole current set of served resources, then the whole set again each time
/// it changes. A subscription that ends leaves the collector on the last set it yielded.
pub trait Kinds: Send + Sync + 'static {
    /// The current set of served resources, then each new set.
    fn subscribe(&self) -> BoxStream<'static, Vec<Resource>>;
}

/// A set of kinds fixed for the collector's life.
#[derive(Debug, Clone)]
pub struct FixedKinds(pub Vec<Resource>);

impl Kinds for FixedKinds {
    fn subscribe(&self) -> BoxStream<'static, Vec<Resource>> {
        futures::stream::once(futures::future::ready(self.0.clone())).boxed()
    }
}

/// The API's served kinds as they change ([`listwatch_endpoints::Api::subscribe_resources`],
/// the live `KindSet`'s notification): what [`GarbageCollector::new`] follows. Each
/// subscription yields the table current when it starts, then each newer one (a subscriber
/// slower than the changes gets the newest: the whole table, so nothing is lost); it ends
/// when the API is dropped.
#[derive(Debug, Clone)]
pub struct ServedKinds(pub tokio::sync::watch::Receiver<Arc<listwatch_kinds::Snapshot<Resource>>>);

impl ServedKinds {
    /// The served kinds of `api`.
    pub fn of(api: &listwatch_endpoints::Api) -> Self {
        Self(api.subscribe_resources())
    }
}

impl Kinds for ServedKinds {
    fn subscribe(&self) -> BoxStream<'static, Vec<Resource>> {
        let mut rx = self.0.clone();
        // The current table first, whatever this receiver has seen.
        rx.mark_changed();
        futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok()?;
            // The borrow holds the set's lock: only for the `Arc` clone.
            let set = Arc::clone(&rx.borrow_and_update()).to_vec();
            Some((set, rx))
        })
        .boxed()
    }
}

/// The garbage collector of one [`listwatch_endpoints::Api`].
#[derive(Clone)]
pub struct GarbageCollector {
    api: listwatch_endpoints::Api,
    kinds: Arc<dyn Kinds>,
    config: Config,
}

impl std::fmt::Debug for GarbageCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GarbageCollector")
            .field("api", &self.api)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl GarbageCollector {
    /// A collector of `api`'s served resources as they change ([`ServedKinds`]), with the
    /// default [`Config`].
    pub fn new(api: &listwatch_endpoints::Api) -> Self {
        Self::with_config(api, Config::default())
    }

    /// A collector with `config`.
    pub fn with_config(api: &listwatch_endpoints::Api, config: Config) -> Self {
        Self {
            api: api.clone(),
            kinds: Arc::new(ServedKinds::of(api)),
            config,
        }
    }

    /// Follows the kinds `kinds` yields instead of the API's served resources (e.g. a
    /// [`FixedKinds`]). Every kind it yields must be served by the API, through
    /// whose registry stores the collector writes.
    #[must_use]
    pub fn with_kinds(mut self, kinds: Arc<dyn Kinds>) -> Self {
        self.kinds = kinds;
        self
    }

    /// Runs the collector on the current tokio runtime until the future is dropped. At most
    /// one should run per storage (a server with replicas runs it under its leader election).
    ///
    /// # Cancel safety
    /// Dropping the future stops everything it started (informers, workers); see the crate
    /// invariants for why an interrupted step is harmless.
    pub async fn run(self) {
        let queues = Queues {
            delete: WorkQueue::new(self.config.rate_limits.clone()),
            orphan: WorkQueue::new(self.config.rate_limits.clone()),
        };
        let mut kinds = self.kinds.subscribe();
        let w = Arc::new(Workers {
            graph: Graph::new(),
            calls: Calls::new(&self.api),
            queues: queues.clone(),
            absent: Mutex::new(worker::AbsentOwners::default()),
            orphaned: Mutex::new(worker::AbsentOwners::default()),
        });
        tracing::info!("garbage collector: starting");
        let feed = {
            let w = Arc::clone(&w);
            async move {
                let mut events = futures::stream::SelectAll::new();
                let mut kinds_open = true;
                loop {
                    tokio::select! {
                        set = kinds.next(), if kinds_open => match set {
                            Some(set) => {
                                events.extend(w.graph.follow(&set));
                                tracing::info!(
                                    resources = w.graph.catalog.len(),
                                    "garbage collector: following the served kinds"
                                );
                            }
                            None => kinds_open = false,
                        },
                        Some((res, delta)) = events.next(), if !events.is_empty() => {
                            w.graph.on_delta(res, &delta, &w.queues);
                        }
                        else => std::future::pending::<()>().await,
                    }
                }
            }
        };
        let work = {
            let w = Arc::clone(&w);
            let config = self.config.clone();
            async move {
                wait_for_sync(&w.graph).await;
                tracing::info!("garbage collector: caches synced, working");
                let mut all = Vec::new();
                for _ in 0..config.workers.max(1) {
                    all.push(drain(Arc::clone(&w), Kind::Delete, config.item_timeout).boxed());
                }
                for _ in 0..config.orphan_workers.max(1) {
                    all.push(drain(Arc::clone(&w), Kind::Orphan, config.item_timeout).boxed());
                }
                all.push(sweep(Arc::clone(&w), config.sweep_period).boxed());
                futures::future::join_all(all).await;
            }
        };
        futures::future::join(feed, work).await;
        queues.delete.shut_down();
        queues.orphan.shut_down();
    }
}

/// Waits until every informer has listed once, saying so every 30 s while it waits.
async fn wait_for_sync(graph: &Graph) {
    let mut waited = Duration::ZERO;
    let step = Duration::from_millis(50);
    while !graph.synced() {
        tokio::time::sleep(step).await;
        waited += step;
        if waited.as_millis().is_multiple_of(30_000) {
            tracing::warn!(waited = ?waited, "garbage collector: still waiting for its caches to sync");
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Delete,
    Orphan,
}

/// One worker: takes items from its queue until the queue shuts down.
async fn drain(w: Arc<Workers>, kind: Kind, deadline: Duration) {
    let q = match kind {
        Kind::Delete => w.queues.delete.clone(),
        Kind::Orphan => w.queues.orphan.clone(),
    };
    drain_queue(q, deadline, |item| {
        let w = Arc::clone(&w);
        async move {
            match kind {
                Kind::Delete => w.attempt_to_delete(&item).await,
                Kind::Orphan => w.attempt_to_orphan(&item).await,
            }
        }
    })
    .await;
}

/// Takes items from `q` until it shuts down, each through `step` within `deadline`; a
/// failed or late item is queued again with backoff.
///
/// Each item is held by a [`Processing`](listwatch_runtime::Processing) guard, so a worker
/// dropped mid-item (the collector's future dropped on a lost lease, a panic) hands the item
/// back to the queue instead of stranding it in processing, where the queue would never
/// hand it out again.
async fn drain_queue<F, Fut>(q: WorkQueue<Item>, deadline: Duration, step: F)
where
    F: Fn(Item) -> Fut,
    Fut: std::future::Future<Output = Result<(), GcError>>,
{
    while let Some(guard) = q.get_guarded().await {
        let item = guard.key().clone();
        match tokio::time::timeout(deadline, step(item.clone())).await {
            Ok(Ok(())) => q.forget(&item),
            Ok(Err(e)) => {
                log_failure(&item, &e);
                q.add_rate_limited(item);
            }
            Err(_) => {
                tracing::warn!(item = %item.name, "garbage collector: an item took too long; retrying later");
                q.add_rate_limited(item);
            }
        }
        guard.done();
    }
}

fn log_failure(item: &Item, e: &GcError) {
    match e {
        // Expected while a custom kind is not served (yet), or while an informer catches up
        // with an owner created since it last listed (upstream logs it at V(5)): quiet.
        GcError::Unresolvable { .. } | GcError::OwnerNotObserved { .. } => {
            tracing::debug!(item = %item.name, error = %e, "garbage collector: retrying later");
        }
        _ => tracing::warn!(item = %item.name, error = %e, "garbage collector: retrying later"),
    }
}

/// Queues every cached object still held by a collector finalizer, every `period`.
async fn sweep(w: Arc<Workers>, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let (orphaning, foreground) = w.graph.held_by_collector();
        for i in orphaning {
            w.queues.orphan.add(i);
        }
        for i in foreground {
            w.queues.delete.add(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str) -> Item {
        Item {
            res: 0,
            namespace: Some(Arc::from("ns")),
            name: Arc::from(name),
            uid: Arc::from(format!("uid-{name}")),
        }
    }

    /// Issue 32 item 1 for the collector: a worker dropped mid-item (a lost lease drops the
    /// collector's future) must not strand the item in the queue's processing set.
    #[tokio::test]
    async fn a_worker_dropped_mid_item_hands_the_item_back() {
        let q = WorkQueue::new(RateLimits::default());
        q.add(item("a"));
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let started_tx = std::sync::Mutex::new(Some(started_tx));
        let worker = tokio::spawn(drain_queue(
            q.clone(),
            Duration::from_secs(3600),
            move |_| {
                if let Some(tx) = started_tx.lock().ok().and_then(|mut t| t.take()) {
                    let _ = tx.send(());
                }
                std::future::pending::<Result<(), GcError>>()
            },
        ));
        tokio::time::timeout(Duration::from_secs(30), started_rx)
            .await
            .expect("the worker never took the item")
            .expect("the worker dropped its signal");
        worker.abort();
        assert!(worker.await.is_err_and(|e| e.is_cancelled()));
        // A new worker (the next term's) gets the item again.
        let again = tokio::time::timeout(Duration::from_secs(30), q.get())
            .await
            .expect("the aborted worker's item was stranded in processing");
        assert_eq!(again, Some(item("a")));
    }
}
