//! The background controllers of the listwatch server, and the runner that keeps each of
//! them to one replica: what upstream's `kube-controller-manager` (and the apiserver's own
//! bootstrap controllers) run beside the API.
//!
//! It owns, a module each:
//! - [`flowcontrol_defaults`]: the mandatory FlowSchemas and PriorityLevelConfigurations
//!   (`exempt`, `catch-all`), created when missing; stored only (a singleton);
//! - [`gc`]: the garbage collector (upstream's `pkg/controller/garbagecollector`): deletes
//!   objects whose owners are gone and carries out foreground and orphan deletions, reading,
//!   deleting and patching through the registry's store of each kind as the API serves it
//!   (its invariants: the module doc). The kinds it follows
//!   are an input that changes ([`gc::Kinds`]): by default the API's live kind set
//!   ([`gc::ServedKinds`], the `KindSet`'s notification), so a kind served after start is
//!   followed from then on;
//! - [`bootstrap`]: the namespaces upstream's control plane creates at start (`default`,
//!   `kube-system`, `kube-public`, `kube-node-lease`), created once the storage answers and
//!   re-created by the system-namespaces loop;
//! - [`apiservices`]: the local `APIService` of each group version served (built-in ones
//!   with upstream's priorities, CRD ones added and removed as CRDs come and go; a
//!   singleton);
//! - [`crd`]: the CRD controller, run on every replica (not a singleton: each serves from its
//!   own kind set): serves the resource each CustomResourceDefinition defines, writes its
//!   `NamesAccepted`/`Established` status, and on deletion removes its objects and resource
//!   (docs/crds.md);
//! - [`kubelet_pass`]: with the API's `acknowledge_pod_deletion`, the start-up pass that
//!   acknowledges, as every node's kubelet would, the pods whose graceful deletion was
//!   pending when the server started (on every replica; idempotent);
//! - [`kubernetes_service`]: the `kubernetes` Service, Endpoints and EndpointSlice of
//!   `default`, pointing at this server (a singleton);
//! - [`namespace_defaults`]: each namespace's `default` ServiceAccount and `kube-root-ca.crt`
//!   ConfigMap (a singleton);
//! - [`service_ips`]: the observer that keeps the registry's Service allocator in step with
//!   the stored Services (on every replica);
//! - [`local`]: the in-process informers and the create-or-reset write these use;
//! - [`namespaces`]: the namespace controller (upstream's `pkg/controller/namespace`): empties a
//!   terminating namespace through the registry's stores of the kinds served now (list, delete
//!   with the lifecycle), reports on it in its status conditions and lets it go, over a narrow
//!   [`namespaces::Server`] ([`namespaces::ApiServer`] for the endpoints' API);
//! - [`singletons`]: the runner of the controllers that must run once across every replica
//!   over one storage, under client-go's leader election on a Lease read and written in
//!   process ([`singletons::StorageLeaseLock`]).
//!
//! # Invariants
//! - every controller here tolerates a run cut at any await point (a lost lease or a shutdown
//!   drops its future) and a successor redoing its last steps: each step is an idempotent,
//!   conditional write decided on fresh reads (the tolerance rules of [`singletons`]);
//! - at most one replica runs the singletons at a time, except for requests a leader sent
//!   before its renew deadline (the elector's invariant);
//! - bounded: every controller's queues are bounded by the objects stored, every wait and call
//!   has a deadline, every failure is retried with a bounded backoff.
//!
//! # Layers
//! It depends only on `listwatch-api`, `listwatch-storage`, `listwatch-kinds` (the live kind
//! set's snapshots; a CRD read as kinds), `listwatch-registry` (the stores the controllers go
//! through), `listwatch-runtime` (informers, work queues, leader election),
//! `listwatch-cacher` (the in-process lister-watcher) and `listwatch-endpoints` (the API whose
//! kinds and stores it follows; every write goes through the registry's stores, never the
//! router). It must never depend on HTTP serving, a concrete backend (memstore, etcd), auth,
//! audit or the server binary; only the server binary depends on it.
//!
//! ```no_run
//! # async fn demo(api: listwatch_endpoints::Api) {
//! use listwatch_controllers::gc::GarbageCollector;
//! use listwatch_controllers::singletons::{self, Singletons};
//!
//! let mut work = Singletons::default();
//! work.add(
//!     "garbage-collector",
//!     Box::new(move || Box::pin(GarbageCollector::new(&api).run())),
//! );
//! let mut registry = prometheus_client::registry::Registry::default();
//! let status = singletons::register_metrics(&mut registry);
//! // No election: the singletons simply run (one process over its own storage).
//! let mut running = singletons::start(work, None, status).expect("started");
//! running.stop(std::time::Duration::from_secs(5)).await;
//! # }
//! ```

pub mod apiservices;
pub mod bootstrap;
pub mod crd;
pub mod default_class;
pub mod flowcontrol_defaults;
pub mod gc;
pub mod kubelet_pass;
pub mod kubernetes_service;
pub mod local;
pub mod namespace_defaults;
pub mod namespaces;
pub mod poststart;
pub mod priority;
pub mod service_ips;
pub mod singletons;

/// Why a controller could not do its work (the start-up bootstrap's failures; the
/// controllers' own steps log and retry theirs).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bootstrapping the default namespaces failed.
    #[error("creating namespace {name}: {source}")]
    Bootstrap {
        /// The namespace.
        name: String,
        /// Why.
        #[source]
        source: listwatch_storage::Error,
    },
    /// Bootstrapping the system priority classes failed.
    #[error("creating priority class {name}: {source}")]
    BootstrapPriorityClass {
        /// The class.
        name: String,
        /// Why.
        #[source]
        source: listwatch_storage::Error,
    },
}
