//! The REST endpoint installer of listwatch: Kubernetes API handlers as an axum [`Router`].
//!
//! This crate owns the HTTP face of the pipeline: per-resource handlers (GET, LIST, WATCH,
//! POST, PUT, PATCH, DELETE, `/status`, `/scale`), the watch server (chunked JSON stream
//! whose object frames share the cached encoding, or a websocket), content negotiation
//! (JSON, YAML, server-side printed Tables, aggregated discovery; JSON, YAML and — for the
//! kinds kubectl's typed `create` sends — protobuf request bodies), discovery and OpenAPI
//! documents (from one schema catalog per API, which the field manager and strategic merge
//! read too), health endpoints, request limits, deadlines and metrics, list responses streamed
//! item by item and gzipped for clients that accept it (`stream_list`, [`compress`]), the
//! request compute pool where writes and Table/YAML reads compute, off the threads that
//! drive the sockets (`compute`, [`Config::request_workers`]), and the one mapping of
//! failures to Kubernetes `Status` responses ([`ApiError`]). `docs/endpoints.md` lists the
//! behaviour and where it differs from upstream.
//!
//! It sits above the storage interface: every resource is served from an
//! `Arc<dyn Storage>`, which may be a backend itself or a cacher over one — the installer
//! cannot tell, so a cache slots in per resource without changing anything here. The
//! served resources are a live `listwatch_kinds::KindSet` of (spec, storage) pairs: a request
//! resolves in one snapshot; [`Api::add_resource`] and [`Api::remove_resource`] change it at
//! run time, and discovery, OpenAPI and the schema catalog follow per generation. What a
//! write means (validation, the deletion lifecycle, the field manager, patches, admission,
//! the typed error) is `listwatch-registry`'s; this crate decodes, calls it and encodes. It
//! depends only on `listwatch-api`, `listwatch-kinds`, `listwatch-registry`,
//! `listwatch-storage`, `listwatch-apply` and `listwatch-schema`; it must never depend on a
//! particular backend (memstore, etcd) or on the cacher.
//!
//! ```no_run
//! use std::sync::Arc;
//! use listwatch_endpoints::{Config, Installer, KindSpec};
//! # async fn demo(store: Arc<dyn listwatch_storage::Storage>) -> std::io::Result<()> {
//! let api = Installer::new(Config::default())
//!     .resource(KindSpec::new("", "v1", "namespaces", "Namespace").namespaced(false), store.clone())
//!     .resource(KindSpec::new("", "v1", "configmaps", "ConfigMap").short_names(["cm"]), store)
//!     .build();
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let shutdown = api.shutdown_handle();
//! axum::serve(listener, api.router())
//!     .with_graceful_shutdown(async move { shutdown.wait().await })
//!     .await
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

pub use listwatch_registry::admission;
pub mod authorize;
mod cbor;
pub use listwatch_registry::clock;
pub mod compress;
use listwatch_server::compute;
mod discovery;
mod error;
use listwatch_registry::fieldmanager;
use listwatch_server::flowcontrol;
mod handlers;
mod health;
use listwatch_registry::lifecycle;
pub mod limits;
use listwatch_server::metrics;
pub mod negotiate;
mod openapi;
mod openapi_v2;
pub use listwatch_registry::patch;
pub mod path;
pub use listwatch_protobuf as protobuf;
pub mod query;
mod recover;
pub mod request_info;
mod resource;
pub use listwatch_registry::scale;
mod stop;
mod stream_list;
pub mod table;
pub use listwatch_registry::validation;
mod virtual_create;
mod watch_server;
mod write_answer;
mod yaml;

pub use discovery::{BuildInfo, KUBE_GIT_VERSION, KUBE_MAJOR, KUBE_MINOR};
pub use error::{
    ApiError, ApiResult, ErrorResponse, FieldError, MAX_INVALID_REPORT_BYTES, SentStatus,
};
pub use fieldmanager::{SERVER_MANAGER, record_create};
pub use flowcontrol::{ClientKey, EXEMPT_GROUP, Exempt};
pub use handlers::{RequestObject, RequestObjectName};
pub use metrics::Metrics;
pub use request_info::RequestInfo;
pub use resource::{
    DefaultStrategy, GcPolicy, Generation, GracefulDeletion, KindSpec, KindStrategy,
    NameValidation, Printer, PrinterColumn, Resource, ScaleSubresource, StatusUpdate, TableColumn,
};
pub use watch_server::{LongRunning, watch_timeout};

/// Limits and timeouts of the installed API. A count limit of 0 means no limit, as
/// upstream's `--max-requests-inflight 0` does; [`flowcontrol`](crate::ClientKey) says how
/// the per-client limits share the global ones.
#[derive(Debug, Clone)]
pub struct Config {
    /// The base of the randomized default watch timeout (upstream `--min-request-timeout`,
    /// 1800 s).
    pub min_request_timeout: Duration,
    /// Non-mutating requests served at once (upstream `--max-requests-inflight`, 400).
    pub max_requests_inflight: usize,
    /// Mutating requests served at once (upstream `--max-mutating-requests-inflight`, 200).
    pub max_mutating_requests_inflight: usize,
    /// Watches open at once; beyond it a new watch gets 429.
    pub max_watches: usize,
    /// Watches one client may have open at once; beyond it its new watch gets 429.
    pub max_watches_per_client: usize,
    /// Requests of one client that may wait at once, per kind (read-only, mutating): for
    /// their body or for a seat (upstream APF's `queueLengthLimit`, 50). Beyond it: 429.
    pub max_queued_requests_per_client: usize,
    /// Bytes of request bodies held in memory at once (being read, waiting or being
    /// served); a body that does not fit gets 429.
    pub max_buffered_body_bytes: usize,
    /// Largest request body accepted (upstream: 3 MiB); beyond it 413.
    pub max_body_bytes: usize,
    /// Longest a non-watch request may take from its arrival (upstream `--request-timeout`,
    /// 1 minute); a request's own `timeout` parameter can only shorten it. A body not
    /// received by then is a 408, a response not ready by then a 504. A streamed list must
    /// also be sent within this time of its start.
    pub request_timeout: Duration,
    /// Gzip compressors alive at once (large lists and watch-list streams of clients that
    /// accept gzip); a response that finds none free goes out uncompressed. 0 disables
    /// compression (upstream: the `APIResponseCompression` feature gate off).
    pub max_gzip_streams: usize,
    /// The build `/version` reports.
    pub build_info: BuildInfo,
    /// Threads of the request compute pool: the handlers of writes and of Table/YAML reads run there, off the threads that drive
    /// the sockets, at most this many at once. 0: no pool, every handler runs on the
    /// caller's runtime. Default: the machine's available parallelism. At most twice this
    /// many requests are in the pool at once (computing or queued for a thread); the others
    /// wait at its fair admission gate, by client ([`ClientKey`]).
    pub request_workers: usize,
    /// Act as every node's kubelet for pods' graceful deletion: a DELETE that leaves a pod in
    /// its grace period (a scheduled pod, `spec.nodeName` set) is followed at once by the
    /// kubelet's acknowledgement, a DELETE of grace 0 with the pod's uid as precondition, so
    /// the pod goes (watchers see the mark, MODIFIED, then DELETED) unless finalizers hold
    /// it; pods whose graceful deletion was pending before are acknowledged by the start-up
    /// pass the embedder runs (`listwatch-controllers`' `kubelet_pass`). Off (upstream without a kubelet): such a pod stays `Terminating` until a client
    /// sends that DELETE. For test environments, where no kubelet runs. Default: off.
    pub acknowledge_pod_deletion: bool,
    /// The create-only resources and subresources the embedding server routes itself
    /// (reviews, Binding, TokenRequest), listed in discovery with the verb `create`.
    /// Default: none.
    pub create_only: &'static [listwatch_kinds::builtin::create_only::CreateOnly],
}

impl Config {
    /// The limits of flow control (`listwatch-server`'s), from this config.
    fn flow_limits(&self) -> flowcontrol::Limits {
        flowcontrol::Limits {
            max_requests_inflight: self.max_requests_inflight,
            max_mutating_requests_inflight: self.max_mutating_requests_inflight,
            max_watches: self.max_watches,
            max_watches_per_client: self.max_watches_per_client,
            max_queued_requests_per_client: self.max_queued_requests_per_client,
            max_buffered_body_bytes: self.max_buffered_body_bytes,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            min_request_timeout: Duration::from_secs(1800),
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            max_watches: 10_000,
            max_watches_per_client: 1_000,
            max_queued_requests_per_client: 50,
            max_buffered_body_bytes: 256 * 1024 * 1024,
            max_body_bytes: 3 * 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            max_gzip_streams: 64,
            build_info: BuildInfo::default(),
            request_workers: default_request_workers(),
            acknowledge_pod_deletion: false,
            create_only: &[],
        }
    }
}

/// The default of [`Config::request_workers`]: the machine's available parallelism (1 when
/// it cannot be told).
pub fn default_request_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// What is derived from a whole table of served kinds: built once per generation of the
/// [`KindSet`](listwatch_kinds::KindSet) (see [`Shared::derived`]).
///
/// The schema catalog is built with the generation (every write reads it); discovery and
/// the OpenAPI documents on first use, the first generation's (at start) included, so that
/// a burst of kind changes (CRDs created one after the other) costs one catalog per
/// generation and the documents only for the generations someone reads, and a start pays
/// for none of them.
pub(crate) struct Derived {
    kinds: Kinds,
    build_info: BuildInfo,
    create_only: &'static [listwatch_kinds::builtin::create_only::CreateOnly],
    docs: std::sync::OnceLock<discovery::Documents>,
    /// The OpenAPI v3 index and documents.
    openapi: std::sync::OnceLock<openapi::Documents>,
    /// The OpenAPI v2 document (JSON and protobuf).
    openapi_v2: std::sync::OnceLock<openapi_v2::Document>,
    /// The schemas of the served kinds (built-in definitions and custom resources'): the
    /// field manager, strategic merge and the OpenAPI documents read them.
    pub(crate) catalog: Arc<listwatch_schema::Catalog>,
}

impl Derived {
    /// The discovery documents.
    pub(crate) fn docs(&self) -> &discovery::Documents {
        self.docs
            .get_or_init(|| discovery::build(&self.kinds, &self.build_info, self.create_only))
    }

    /// The OpenAPI v3 index and documents.
    pub(crate) fn openapi(&self) -> &openapi::Documents {
        self.openapi
            .get_or_init(|| openapi::build(&self.kinds, &self.catalog, self.create_only))
    }

    /// The OpenAPI v2 document, derived from the v3 group-version documents.
    pub(crate) fn openapi_v2(&self) -> &openapi_v2::Document {
        self.openapi_v2.get_or_init(|| {
            let docs: Vec<serde_json::Value> =
                openapi::group_documents(&self.kinds, &self.catalog, self.create_only)
                    .into_iter()
                    .map(|(_, v)| v)
                    .collect();
            openapi_v2::build(&docs)
        })
    }
}

/// The served kinds as one request sees them.
pub(crate) type Kinds = Arc<listwatch_kinds::Snapshot<Resource>>;

/// State shared by every handler.
pub(crate) struct Shared {
    /// The served kinds, live: a request resolves its kind, and what is derived from the
    /// table, in one snapshot ([`Shared::kinds`]); [`Api::add_resource`] and
    /// [`Api::remove_resource`] change it.
    pub(crate) kinds: listwatch_kinds::KindSet<Resource>,
    /// Discovery, OpenAPI and the schema catalog of the newest generation asked for.
    pub(crate) derived: listwatch_kinds::PerGeneration<Derived>,
    pub(crate) config: Config,
    /// Seats, watch slots and body memory, per client.
    pub(crate) flow: flowcontrol::FlowControl,
    /// Becomes `true` once, at shutdown; new requests observe it.
    pub(crate) shutdown: watch::Sender<bool>,
    /// Shutdown as open watches observe it (set with `shutdown`).
    pub(crate) watch_stop: Arc<stop::StopSignal>,
    /// What start-up is still waiting for (e.g. the storage backend to answer); `/readyz`
    /// fails (its `start-up` check) while it is set. See [`Api::set_waiting_for`].
    pub(crate) waiting_for: watch::Sender<Option<String>>,
    /// The post-start hooks `/readyz` lists as `poststarthook/<name>` (each fails until its
    /// receiver is `true`). See [`Api::add_post_start_hook`].
    pub(crate) post_start: std::sync::RwLock<Vec<(String, watch::Receiver<bool>)>>,
    pub(crate) metrics: Metrics,
    pub(crate) registry: Registry,
    /// Validates writes before they are stored.
    pub(crate) admission: Option<Arc<dyn admission::Admission>>,
    /// Answers the authorization questions handlers ask (the `create` check of a write
    /// that creates).
    pub(crate) authorizer: Option<Arc<dyn authorize::Authorize>>,
    /// Compressors alive at once.
    pub(crate) gzip: compress::GzipBudget,
    /// Wakes the namespace controller (a namespace was marked for deletion here):
    /// [`Api::namespace_deletions`].
    pub(crate) namespace_wake: Arc<tokio::sync::Notify>,
    /// Set when the server is about to shut down: `/readyz` fails (so load balancers take
    /// it out) while requests are still served. See [`ShutdownHandle::drain`].
    pub(crate) draining: std::sync::atomic::AtomicBool,
    /// Where the handlers that compute run (`None`: on the caller's runtime).
    pub(crate) compute: Option<compute::ComputePool>,
}

impl Shared {
    /// The served kinds now.
    pub(crate) fn kinds(&self) -> Kinds {
        self.kinds.snapshot()
    }

    /// The kind served at `group/version/plural` now.
    pub(crate) fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Resource> {
        self.kinds().get(group, version, plural).cloned()
    }

    /// The namespaces resource, when served (namespaced writes check existence in it).
    pub(crate) fn namespaces(&self) -> Option<Resource> {
        self.resource("", "v1", "namespaces")
    }

    /// Discovery, OpenAPI and the schema catalog of `kinds`, built once per generation.
    pub(crate) fn derived(&self, kinds: &Kinds) -> Arc<Derived> {
        self.derived.get(kinds, |k| Derived {
            kinds: Arc::clone(kinds),
            build_info: self.config.build_info.clone(),
            create_only: self.config.create_only,
            docs: std::sync::OnceLock::new(),
            openapi: std::sync::OnceLock::new(),
            openapi_v2: std::sync::OnceLock::new(),
            catalog: Arc::new(openapi::catalog(k)),
        })
    }

    pub(crate) fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}

/// Collects resources and builds the [`Api`].
pub struct Installer {
    config: Config,
    resources: Vec<Resource>,
    registry: Registry,
    admission: Option<Arc<dyn admission::Admission>>,
    authorizer: Option<Arc<dyn authorize::Authorize>>,
}

impl std::fmt::Debug for Installer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Installer")
            .field("resources", &self.resources)
            .finish_non_exhaustive()
    }
}

impl Installer {
    /// An installer with no resources.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            resources: Vec::new(),
            registry: Registry::default(),
            admission: None,
            authorizer: None,
        }
    }

    /// Installs the admission hook every create and update passes before it is stored.
    #[must_use]
    pub fn admission(mut self, hook: Arc<dyn admission::Admission>) -> Self {
        self.admission = Some(hook);
        self
    }

    /// Installs the authorizer handlers ask when a request turns out to need more than the
    /// server's filter authorized: a PUT or server-side apply that creates its object must
    /// also be allowed to `create` it ([`authorize`]).
    #[must_use]
    pub fn authorizer(mut self, hook: Arc<dyn authorize::Authorize>) -> Self {
        self.authorizer = Some(hook);
        self
    }

    /// Adds a resource served by `storage` (a backend, or a cacher over one). A later
    /// resource with the same group, version and plural replaces an earlier one.
    #[must_use]
    pub fn resource(
        mut self,
        info: KindSpec,
        storage: Arc<dyn listwatch_storage::Storage>,
    ) -> Self {
        self.resources.retain(|r| {
            (
                r.info.group.as_str(),
                r.info.version.as_str(),
                r.info.plural.as_str(),
            ) != (
                info.group.as_str(),
                info.version.as_str(),
                info.plural.as_str(),
            )
        });
        self.resources.push(Resource::new(info, storage));
        self
    }

    /// The shared metrics registry, for the embedding binary's own metrics; `/metrics`
    /// serves everything registered here.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The resources added so far.
    pub fn resources(&self) -> &[Resource] {
        &self.resources
    }

    /// Builds the API. The pass acknowledging the pod deletions already pending (with
    /// [`Config::acknowledge_pod_deletion`]) is the embedder's to run
    /// (`listwatch-controllers`' `kubelet_pass`), as is the namespace
    /// controller, which empties terminating namespaces, is the embedder's to run
    /// (`listwatch-controllers`' `namespaces`; without it a deleted namespace stays
    /// `Terminating`).
    pub fn build(mut self) -> Api {
        let metrics = Metrics::register(&mut self.registry);
        let (shutdown, _) = watch::channel(false);
        let (waiting_for, _) = watch::channel(None);
        let compute = compute::ComputePool::new(self.config.request_workers, &metrics)
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, workers = self.config.request_workers,
                "cannot start the request compute pool: requests compute on the I/O threads");
                None
            });
        let shared = Arc::new(Shared {
            flow: flowcontrol::FlowControl::new(&self.config.flow_limits(), &metrics),
            gzip: compress::GzipBudget::new(self.config.max_gzip_streams),
            kinds: listwatch_kinds::KindSet::new(self.resources),
            derived: listwatch_kinds::PerGeneration::default(),
            config: self.config,
            shutdown,
            watch_stop: Arc::default(),
            waiting_for,
            post_start: std::sync::RwLock::default(),
            metrics,
            registry: self.registry,
            admission: self.admission,
            authorizer: self.authorizer,
            namespace_wake: Arc::default(),
            draining: std::sync::atomic::AtomicBool::new(false),
            compute,
        });
        // Discovery and the OpenAPI documents are not built here: like those of every later
        // generation, they are built on first read, so a start (a test environment's above
        // all) does not pay for documents nobody may read.
        Api { shared }
    }
}

/// The built API: its router and its shutdown control.
#[derive(Clone)]
pub struct Api {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("resources", &self.shared.kinds().len())
            .finish()
    }
}

/// Starts and observes the shutdown of an [`Api`]: open watches end cleanly, new requests
/// get 503, `/readyz` fails.
#[derive(Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ShutdownHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShutdownHandle")
            .field("shutting_down", &self.shared.shutting_down())
            .finish()
    }
}

impl ShutdownHandle {
    /// Announces a coming shutdown: from now on `/readyz` fails (its `shutdown` check), so
    /// that load balancers stop sending new requests, while everything is still served
    /// normally (upstream's `--shutdown-delay-duration`). [`shutdown`](Self::shutdown)
    /// follows. Idempotent.
    pub fn drain(&self) {
        self.shared
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Begins shutdown (idempotent).
    pub fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
        self.shared.watch_stop.stop();
    }

    /// Resolves once shutdown has begun.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses nothing.
    pub async fn wait(&self) {
        let mut rx = self.shared.shutdown.subscribe();
        // An error means the sender is gone, which only happens when everything is dropped.
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// A route outside `/api` and `/apis`: its path (axum's syntax) and its handlers.
type NonResourceRoute = (
    &'static str,
    fn() -> axum::routing::MethodRouter<Arc<Shared>>,
);

/// Every route [`Api::router`] serves outside `/api` and `/apis` (one table, so that
/// [`non_resource_paths`] cannot miss one).
const NON_RESOURCE_ROUTES: &[NonResourceRoute] = &[
    // A go-restful GET route upstream: HEAD is 405 there (axum would answer it).
    ("/version", || get(version).head(head_not_allowed)),
    ("/healthz", || get(health::healthz)),
    ("/healthz/{check}", || get(health::healthz_check)),
    ("/livez", || get(health::livez)),
    ("/livez/{check}", || get(health::livez_check)),
    ("/readyz", || get(health::readyz)),
    ("/readyz/{check}", || get(health::readyz_check)),
    ("/readyz/poststarthook/{*hook}", || get(health::readyz_hook)),
    ("/metrics", || get(metrics_text)),
    ("/openapi/v2", || get(openapi_v2::serve)),
    ("/openapi/v3", || get(openapi::index)),
    ("/openapi/v3/{*path}", || get(openapi::group_version)),
];

/// The paths [`Api::router`] serves outside `/api` and `/apis`, in axum's syntax
/// (`{*path}`: any tail): `/version`, the health checks, `/metrics`, OpenAPI v3. Requests
/// to them are non-resource requests to an authorizer.
pub fn non_resource_paths() -> impl Iterator<Item = &'static str> {
    NON_RESOURCE_ROUTES.iter().map(|(path, _)| *path)
}

/// The discovery documents served under `/api` and `/apis` (GET): non-resource requests
/// to an authorizer, as upstream's `RequestInfoFactory` has it.
pub const DISCOVERY_PATHS: &[&str] = &[
    "/api",
    "/api/{version}",
    "/apis",
    "/apis/{group}",
    "/apis/{group}/{version}",
];

impl Api {
    /// The axum router serving every endpoint.
    pub fn router(&self) -> Router {
        let mut router = Router::new();
        for (path, handlers) in NON_RESOURCE_ROUTES {
            router = router.route(path, handlers());
        }
        router
            .route("/api", any(handlers::serve))
            .route("/api/{*rest}", any(handlers::serve))
            .route("/apis", any(handlers::serve))
            .route("/apis/{*rest}", any(handlers::serve))
            // Upstream routes on the decoded path, so `/%61pi/v1/pods` is `/api/v1/pods`:
            // whatever the routes above do not match raw is resolved after decoding.
            .fallback(handlers::serve)
            .with_state(Arc::clone(&self.shared))
            .layer(axum::middleware::from_fn(recover::catch_panics))
    }

    /// The handle that starts shutdown.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The threads of the request compute pool (0: handlers run on the caller's runtime;
    /// see [`Config::request_workers`]).
    pub fn request_workers(&self) -> usize {
        self.shared
            .compute
            .as_ref()
            .map_or(0, compute::ComputePool::workers)
    }

    /// How many requests may be in the request compute pool at once (computing or in its
    /// run queue); the others wait at its fair admission gate, by client. 0 without a pool.
    pub fn request_admission_limit(&self) -> usize {
        self.shared
            .compute
            .as_ref()
            .map_or(0, compute::ComputePool::admission_limit)
    }

    /// The served resources now: a snapshot, which later
    /// [`add_resource`](Self::add_resource)s and [`remove_resource`](Self::remove_resource)s do
    /// not change (it derefs to `[Resource]`).
    pub fn resources(&self) -> Arc<listwatch_kinds::Snapshot<Resource>> {
        self.shared.kinds()
    }

    /// A subscription to the served resources: each new table (a
    /// [`add_resource`](Self::add_resource) or [`remove_resource`](Self::remove_resource)),
    /// as `listwatch_kinds::KindSet::subscribe` describes (the first `changed()` resolves at
    /// once; a slow subscriber ends with the latest table). It ends when the API is dropped.
    pub fn subscribe_resources(
        &self,
    ) -> tokio::sync::watch::Receiver<Arc<listwatch_kinds::Snapshot<Resource>>> {
        self.shared.kinds.subscribe()
    }

    /// Serves a resource from now on (a later request sees it; discovery and the OpenAPI
    /// documents list it), replacing one with the same group, version and plural, whose open
    /// watches then end as after [`remove_resource`](Self::remove_resource). Returns the
    /// generation of the table that serves it.
    pub fn add_resource(
        &self,
        info: KindSpec,
        storage: Arc<dyn listwatch_storage::Storage>,
    ) -> u64 {
        let (generation, replaced) = self.shared.kinds.add(Resource::new(info, storage));
        if let Some(old) = replaced {
            old.removed.stop();
            // What the cached documents hold of the old kind (its schema) goes with it.
            self.shared.derived.forget_before(generation);
        }
        tracing::info!(generation, "served kinds changed: added a resource");
        generation
    }

    /// Stops serving `group/version/plural`: from now on requests for it get 404 and
    /// discovery and the OpenAPI documents leave it out; its open watches end cleanly (the
    /// stream closes, as at a watch timeout, and a client relists into the 404). Requests
    /// already resolved finish against the storage they resolved. The storage itself and its
    /// objects are the caller's. Returns the removed resource and the new generation.
    pub fn remove_resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Result<(u64, Resource), listwatch_kinds::KindSetError> {
        let (generation, removed) = self.shared.kinds.remove(group, version, plural)?;
        removed.removed.stop();
        // What the cached documents hold of the removed kind (its schema) goes with it.
        self.shared.derived.forget_before(generation);
        tracing::info!(generation, resource = %removed.info.qualified_resource(),
            "served kinds changed: removed a resource");
        Ok((generation, removed))
    }

    /// Whether every resource's storage is ready (what `/readyz` reports).
    pub async fn ready(&self) -> Result<(), String> {
        check_ready(&self.shared).await
    }

    /// What a namespace DELETE on this API notifies (`notify_one`: one waiter, or the next
    /// to wait): the namespace controller's wake-up, so that it looks at once instead of at
    /// its next poll.
    pub fn namespace_deletions(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.shared.namespace_wake)
    }

    /// Whether shutdown has begun ([`ShutdownHandle::shutdown`]): background work over the
    /// API stops.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.shutting_down()
    }

    /// The registry store of `r` (a resource this API serves), acknowledging pod deletions
    /// as this API's DELETEs do ([`Config::acknowledge_pod_deletion`]), with the schemas of
    /// the served kinds now.
    pub fn store(&self, r: &Resource) -> listwatch_registry::Store {
        let catalog = Arc::clone(&self.shared.derived(&self.shared.kinds()).catalog);
        listwatch_registry::Store::with_catalog(
            Arc::clone(&r.info),
            Arc::clone(&r.storage),
            catalog,
        )
        .with_kubelet(listwatch_registry::lifecycle::Kubelet::of(
            self.shared.config.acknowledge_pod_deletion,
        ))
    }

    /// Records what start-up is still waiting for (`None`: nothing). While set, `/readyz`
    /// fails (`/readyz/start-up` says why, to callers allowed that path) and `/livez` still
    /// answers 200 (the process is alive and keeps trying, so a supervisor must not restart
    /// it).
    pub fn set_waiting_for(&self, reason: Option<String>) {
        self.shared.waiting_for.send_replace(reason);
    }

    /// Adds a post-start hook to `/readyz`: the check `poststarthook/<name>` fails until
    /// `done` is `true` (upstream's `[-]poststarthook/<name> failed` while a hook runs), and
    /// is served alone at `/readyz/poststarthook/<name>`. A name added twice is listed once
    /// (the later receiver).
    pub fn add_post_start_hook(&self, name: &str, done: watch::Receiver<bool>) {
        let mut hooks = self
            .shared
            .post_start
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        hooks.retain(|(n, _)| n != name);
        hooks.push((name.to_owned(), done));
    }
}

async fn check_ready(shared: &Shared) -> Result<(), String> {
    if shared.shutting_down() || shared.draining.load(std::sync::atomic::Ordering::Relaxed) {
        return Err("shutting down".into());
    }
    if let Some(reason) = shared.waiting_for.borrow().as_ref() {
        return Err(format!("start-up is waiting: {reason}"));
    }
    for r in shared.kinds().iter() {
        if let Err(e) = r.storage.readiness().await {
            return Err(format!("{}: {e}", r.info.qualified_resource()));
        }
    }
    Ok(())
}

pub(crate) fn json_response(
    code: StatusCode,
    content_type: &'static str,
    body: impl Into<Body>,
) -> Response {
    let mut resp = (code, body.into()).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// A JSON response whose body is `json` and the newline upstream's serializer ends every
/// encoded object with (`json.Encoder.Encode` in k8s.io/apimachinery
/// `pkg/runtime/serializer/json/json.go`): objects, Tables, partial metadata and Status
/// bodies all end with `\n` upstream, and clients that compare bodies see it.
pub(crate) fn encoded_response(
    code: StatusCode,
    content_type: &'static str,
    json: &[u8],
) -> Response {
    let mut body = Vec::with_capacity(json.len().saturating_add(1));
    body.extend_from_slice(json);
    body.push(b'\n');
    json_response(code, content_type, body)
}

async fn version(State(s): State<Arc<Shared>>) -> Response {
    let derived = s.derived(&s.kinds());
    json_response(
        StatusCode::OK,
        "application/json",
        derived.docs().version.clone(),
    )
}

async fn head_not_allowed() -> Response {
    ApiError::method_not_allowed().into_response()
}

async fn metrics_text(State(s): State<Arc<Shared>>) -> Response {
    let mut out = String::new();
    match prometheus_client::encoding::text::encode(&mut out, &s.registry) {
        Ok(()) => {
            let mut resp = out.into_response();
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
            );
            resp
        }
        Err(e) => ApiError::internal(format!("encoding metrics failed: {e}")).into_response(),
    }
}
