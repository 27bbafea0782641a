//! The garbage collector of listwatch: it deletes objects whose owners are gone, and it
//! carries out the foreground and orphan deletions a DELETE's propagation policy asks for, as
//! upstream's `pkg/controller/garbagecollector` does.
//!
//! It owns
//! - following every served resource (custom ones included; events excepted, as upstream)
//!   through metadata-only informers over each resource's storage, indexed by owner uid
//!   (`graph`);
//! - deciding, on live reads, what happens to an object whose owner references point at
//!   owners that are absent (uid-checked: an object of the same name with another uid does
//!   not own it), replaced, or being deleted in the foreground (`worker`), and to owners held
//!   by the `orphan` and `foregroundDeletion` finalizers;
//! - carrying the decisions out as API requests (`calls`).
//!
//! What it does not own: *what a DELETE does* — the finalizers a propagation policy sets,
//! grace periods, the update that removes the last finalizer removing the object — is
//! `listwatch-endpoints`' deletion lifecycle. The collector is a client of it.
//!
//! # Why a crate above the endpoints, not inside them
//!
//! Upstream's collector is a controller talking to the API server, so its every write obeys
//! the API's rules. Here it sends its writes through the endpoints' router in process
//! ([`listwatch_endpoints::Api::router`]), as the user
//! `system:serviceaccount:kube-system:generic-garbage-collector` for flow control, so it
//! needs nothing internal to the endpoints and cannot get a deletion rule wrong by
//! reimplementing it. It reads through the storage directly (a consistent read). Layers:
//! it depends on `listwatch-endpoints`, `listwatch-runtime` (informers, work queue) and
//! `listwatch-cacher` (the in-process lister-watcher); only the server binary depends on it.
//! Requests from it do not pass the server's authentication, authorization or audit (those
//! wrap the router outside): it is part of the server, as the namespace controller is.
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
//! - cycles do not hang: an object deleted in the foreground because its owner is, whose
//!   own dependents include one deleting in the foreground, first stops blocking its owners
//!   (upstream's rule), so a ring of blocking references unwinds;
//! - cancel safe: the future returned by [`GarbageCollector::run`] may be dropped at any
//!   await (a lost leader election); every step is an idempotent, conditional write, so a
//!   successor redoing it is harmless.
//!
//! What still differs from upstream: no metrics of its own; no `GarbageCollectorSyncPeriod`
//! re-discovery (the served resources are fixed at start); owner references whose kind no
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

use futures::{FutureExt, StreamExt};
use listwatch_runtime::{RateLimits, WorkQueue};

use crate::calls::Calls;
use crate::catalog::Catalog;
use crate::graph::{Graph, Item, Queues};
use crate::worker::Workers;

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

/// The garbage collector of one [`listwatch_endpoints::Api`].
#[derive(Debug, Clone)]
pub struct GarbageCollector {
    api: listwatch_endpoints::Api,
    config: Config,
}

impl GarbageCollector {
    /// A collector of `api`'s served resources, with the default [`Config`].
    pub fn new(api: &listwatch_endpoints::Api) -> Self {
        Self::with_config(api, Config::default())
    }

    /// A collector with `config`.
    pub fn with_config(api: &listwatch_endpoints::Api, config: Config) -> Self {
        Self {
            api: api.clone(),
            config,
        }
    }

    /// Runs the collector on the current tokio runtime until the future is dropped. At most
    /// one should run per storage (a server with replicas runs it under its leader election).
    ///
    /// # Cancel safety
    /// Dropping the future stops everything it started (informers, workers); see the crate
    /// invariants for why an interrupted step is harmless.
    pub async fn run(self) {
        let catalog = Catalog::new(&self.api.resources());
        let queues = Queues {
            delete: WorkQueue::new(self.config.rate_limits.clone()),
            orphan: WorkQueue::new(self.config.rate_limits.clone()),
        };
        let graph = Graph::start(catalog);
        let events = graph.subscribe();
        let w = Arc::new(Workers {
            graph,
            calls: Calls::new(self.api.router()),
            queues: queues.clone(),
            absent: Mutex::new(worker::AbsentOwners::default()),
            orphaned: Mutex::new(worker::AbsentOwners::default()),
        });
        tracing::info!(
            resources = w.graph.catalog.len(),
            "garbage collector: starting"
        );
        let feed = {
            let w = Arc::clone(&w);
            events.for_each(move |(res, delta)| {
                w.graph.on_delta(res, &delta, &w.queues);
                futures::future::ready(())
            })
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
    while let Some(item) = q.get().await {
        let step = async {
            match kind {
                Kind::Delete => w.attempt_to_delete(&item).await,
                Kind::Orphan => w.attempt_to_orphan(&item).await,
            }
        };
        match tokio::time::timeout(deadline, step).await {
            Ok(Ok(())) => q.forget(&item),
            Ok(Err(e)) => {
                log_failure(&item, &e);
                q.add_rate_limited(item.clone());
            }
            Err(_) => {
                tracing::warn!(item = %item.name, "garbage collector: an item took too long; retrying later");
                q.add_rate_limited(item.clone());
            }
        }
        q.done(&item);
    }
}

fn log_failure(item: &Item, e: &GcError) {
    match e {
        // Expected while a custom kind is not served (yet): quiet.
        GcError::Unresolvable { .. } => {
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
