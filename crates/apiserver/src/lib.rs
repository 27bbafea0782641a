//! The listwatch API server: flags, backend choice, built-in and declared resources, the
//! endpoint installer, and graceful shutdown.
//!
//! It sits at the top of the pipeline and composes everything below: a storage backend
//! (the embedded store by default, etcd by flag), one `listwatch-cacher` Cacher per
//! resource, the REST endpoints of `listwatch-endpoints`, the connection layer that serves
//! them with bounded connections ([`serve`], optional TLS in [`tls`]), the validation of
//! its flags ([`flags`]), and the metrics registry they share. Nothing depends on it.
//!
//! ```no_run
//! use clap::Parser;
//! use listwatch_apiserver::{Options, run};
//! # async fn demo() -> Result<(), listwatch_apiserver::ServerError> {
//! let opts = Options::parse_from(["listwatch-apiserver", "--bind", "127.0.0.1:0"]);
//! run(opts, |addr| println!("serving on {addr}")).await
//! # }
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use listwatch_cacher::{Cacher, CacherConfig, CacherMetrics};
use listwatch_endpoints::{Config, Installer, KindSpec};
use listwatch_storage::Storage;

mod backends;
pub mod binding;
pub mod builtin;
mod componentstatus;
mod conn;
mod conn_limit;
pub mod custom;
pub mod eviction;
pub mod flag_checks;
pub mod flags;
mod options;
pub mod routes;
pub mod security;
pub mod serve;
pub mod tls;

use crate::backends::Backends;
pub use crate::flag_checks::FlagConflict;
pub use crate::options::{Backend, DEFAULT_MAX_CONNECTIONS_PER_CLIENT, LogFormat, Options};
use listwatch_controllers::bootstrap::{self, bootstrap_until_done};
use listwatch_controllers::{kubernetes_service, namespace_defaults, service_ips};
use listwatch_controllers::{namespaces, singletons};
use listwatch_registry::service_alloc::ServiceAllocator;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Contradicting flags.
    #[error(transparent)]
    Flags(#[from] FlagConflict),
    /// The address to listen on cannot be had (in use, not this machine's, not allowed).
    #[error(
        "cannot listen on {addr}: {source}{hint}",
        hint = bind_hint(source)
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A bad `--resources` file.
    #[error(transparent)]
    Resources(#[from] custom::ResourcesFileError),
    /// etcd misconfigured.
    #[error("etcd: {0}")]
    Etcd(String),
    /// The embedded store's `--data-dir` cannot be used.
    #[error("embedded store: {0}")]
    EmbeddedStore(#[from] listwatch_memstore::OpenError),
    /// The leader election flags break its invariants.
    #[error("leader election: {0}")]
    LeaderElection(String),
    /// A controller could not start its work (bootstrapping the default namespaces failed).
    #[error(transparent)]
    Controllers(#[from] listwatch_controllers::Error),
    /// The TLS certificate or key is unusable.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The TLS client of the `componentstatuses` probes cannot be built.
    #[error("componentstatuses probe TLS: {0}")]
    ComponentStatusTls(#[source] rustls::Error),
    /// Authentication, authorization or audit refused to start.
    #[error(transparent)]
    Security(#[from] security::SecurityError),
    /// The CA to publish in `kube-root-ca.crt` cannot be read.
    #[error("reading the CA of --client-ca-file {path}: {source}")]
    RootCa {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Listening or serving failed.
    #[error("serving on {addr}: {source}")]
    Io {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What to do about a failed bind, by its cause.
fn bind_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            "; another process listens there: stop it, or choose another address with \
             --bind (--bind 127.0.0.1:0 picks a free port and prints it)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            "; it is not an address of this machine: choose one with --bind (--bind \
             127.0.0.1:0 picks a free port on loopback)"
        }
        std::io::ErrorKind::PermissionDenied => {
            "; ports below 1024 need privileges: choose another with --bind (--bind \
             127.0.0.1:0 picks a free port)"
        }
        _ => "",
    }
}

/// This build, as `build.rs` recorded it: what `/version` reports.
pub fn build_info() -> listwatch_endpoints::BuildInfo {
    listwatch_endpoints::BuildInfo {
        git_commit: env!("LISTWATCH_GIT_COMMIT").to_owned(),
        git_tree_state: env!("LISTWATCH_GIT_TREE_STATE").to_owned(),
        build_date: env!("LISTWATCH_BUILD_DATE").to_owned(),
        ..listwatch_endpoints::BuildInfo::default()
    }
}

/// Every resource to serve: the built-ins, then those of `--resources`. An entry naming a
/// built-in kind the server serves already (e.g. `batch/v1` `Job`) is served as that
/// built-in, with its upstream rules, and otherwise ignored; a custom resource taking a
/// built-in's `group/version/plural` stops the start.
pub fn all_resources(opts: &Options) -> Result<Vec<KindSpec>, ServerError> {
    let mut all = builtin::resources();
    if let Some(path) = &opts.resources {
        let builtins = all.len();
        for (index, spec) in custom::load(path)?.into_iter().enumerate() {
            let served = all.get(..builtins).unwrap_or_default().iter().any(|b| {
                b.group == spec.group && b.version == spec.version && b.plural == spec.plural
            });
            if !served {
                all.push(spec);
            } else if spec.custom_resource {
                return Err(custom::ResourcesFileError::Invalid {
                    index,
                    kind: spec.kind.clone(),
                    message: format!(
                        "{} is a built-in resource of the server",
                        spec.qualified_resource()
                    ),
                }
                .into());
            } else {
                tracing::info!(
                    resource = %spec.qualified_resource(),
                    "--resources names a built-in kind: served as the built-in"
                );
            }
        }
    }
    Ok(all)
}

/// Builds the API for the options (exposed for tests and embedding): one storage per
/// resource, wrapped in a [`Cacher`] unless `--watch-cache=false`.
pub async fn build_api(
    opts: &Options,
    addr: SocketAddr,
) -> Result<(listwatch_endpoints::Api, Running), ServerError> {
    let election = election_options(opts)?;
    let backends = Backends::open(opts)?;
    // Consistent lists are served from the caches only where the backend's progress
    // notifications can be requested reliably: etcd before 3.4.31/3.5.13 answers them early
    // (etcd issue 15220, docs/etcd.md), as upstream's ConsistentListFromCache gate knows.
    let consistent_reads_from_cache = match &backends {
        Backends::Embedded(_) => true,
        Backends::Etcd { client, .. } => {
            // Every member must have the fix: a watch may land on any of them.
            let ordered = client.progress_requests_are_ordered().await;
            if !ordered {
                tracing::info!(
                    versions = ?client.endpoint_versions(),
                    "etcd cannot order progress requests: consistent lists read etcd"
                );
            }
            ordered
        }
    };
    let config = Config {
        min_request_timeout: opts.min_request_timeout,
        max_requests_inflight: opts.max_requests_inflight,
        max_mutating_requests_inflight: opts.max_mutating_requests_inflight,
        max_watches: opts.max_watches,
        max_watches_per_client: opts.max_watches_per_client,
        max_queued_requests_per_client: opts.max_queued_requests_per_client,
        max_buffered_body_bytes: opts.max_buffered_request_bytes,
        request_timeout: opts.request_timeout,
        build_info: build_info(),
        request_workers: opts.request_workers,
        acknowledge_pod_deletion: opts.acknowledge_pod_deletion,
        create_only: listwatch_kinds::builtin::create_only::ALL,
        ..Config::default()
    };
    let mut installer = Installer::new(config);
    // The singletons (the namespace controller among them) run from `Running`, under a
    // leader election on etcd.
    let election_status = singletons::register_metrics(installer.registry_mut());
    let namespace_metrics = namespaces::Metrics::register(installer.registry_mut());
    let cacher_metrics = CacherMetrics::register(installer.registry_mut());
    if let Backends::Embedded(store) = &backends {
        store.register_metrics(installer.registry_mut());
    }
    let conn_metrics = serve::ConnMetrics::register(installer.registry_mut());
    let mut cachers = Vec::new();
    let cache = CacheOptions {
        on: opts.watch_cache,
        metrics: cacher_metrics.clone(),
        consistent_reads_from_cache,
        consistent_read_fallback: opts.watch_cache_consistent_read_fallback,
        window_bytes: (opts.watch_cache_window_bytes > 0).then_some(opts.watch_cache_window_bytes),
    };
    // The versions of one CRD share the storage version's storage (listed first); the
    // others read and write it with their `apiVersion` rewritten. A built-in kind with a
    // conversion (`events.k8s.io/v1` Events) is served over the storage listed before it
    // in the same way, with its fields converted.
    type Base = (String, listwatch_api::SelectableFields, Arc<dyn Storage>);
    let mut shared: std::collections::HashMap<String, Base> = std::collections::HashMap::new();
    for info in all_resources(opts)? {
        let storage = match shared.get(&info.storage_resource) {
            Some((stored, stored_fields, base))
                if info.custom_resource || info.conversion.is_some() =>
            {
                let conversion = info.conversion.clone().unwrap_or_else(|| {
                    Arc::new(listwatch_kinds::ApiVersionOnly::new(
                        stored,
                        &info.api_version(),
                    ))
                });
                Arc::new(listwatch_controllers::crd::versions::Versioned::converted(
                    Arc::clone(base),
                    conversion,
                    info.selectable_fields.clone(),
                    stored_fields.clone(),
                )) as Arc<dyn Storage>
            }
            // Computed on each read, never stored (upstream's componentstatus REST).
            _ if info.group.is_empty() && info.plural == "componentstatuses" => Arc::new(
                componentstatus::ComponentStatuses::new(
                    backends.etcd_client(),
                    info.selectable_fields.clone(),
                )
                .map_err(ServerError::ComponentStatusTls)?,
            )
                as Arc<dyn Storage>,
            _ => {
                let (storage, cacher) = cache.wrap(backends.storage_for(&info), &info);
                cachers.extend(cacher);
                shared.insert(
                    info.storage_resource.clone(),
                    (
                        info.api_version(),
                        info.selectable_fields.clone(),
                        Arc::clone(&storage),
                    ),
                );
                storage
            }
        };
        installer = installer.resource(info, storage);
    }
    let sec_opts = &opts.security;
    // Started in every mode: the bootstrap policy (`cluster-admin`, `system:*` roles and
    // bindings) is kept in place whether or not RBAC authorizes, as upstream's
    // rbac/bootstrap-roles hook does whatever the authorization mode.
    let informers = security::rbac::Informers::start(installer.resources());
    let rbac = informers
        .as_ref()
        .filter(|_| sec_opts.wants_rbac())
        .map(security::rbac::Informers::rbac);
    let accounts = informers
        .as_ref()
        .and_then(|i| security::rbac::accounts(i, installer.resources()));
    let security = Arc::new(sec_opts.build(installer.registry_mut(), accounts, rbac)?);
    let admission = Arc::new(security::rbac::RbacAdmission(std::sync::OnceLock::new()));
    let _ = admission.0.set(Arc::clone(&security));
    let services_alloc = Arc::new(ServiceAllocator::new(
        opts.service_cluster_ip_range,
        opts.service_node_port_range,
    ));
    installer = installer.admission(Arc::new(listwatch_registry::admission::Chain(vec![
        admission,
        Arc::clone(&services_alloc) as Arc<dyn listwatch_registry::admission::Admission>,
    ])));
    let handler_authz = Arc::new(security::handler_authz::HandlerAuthorizer::default());
    let _ = handler_authz.0.set(Arc::clone(&security));
    installer = installer.authorizer(handler_authz);
    let api = installer.build();
    tracing::info!(
        request_workers = api.request_workers(),
        request_admission = api.request_admission_limit(),
        io_workers = tokio::runtime::Handle::current().metrics().num_workers(),
        "request compute pool: writes and Table/YAML reads compute on request_workers threads, \
         at most request_admission in the pool at once (admitted fairly by client), \
         connections, watches and health checks run on io_workers threads"
    );
    // Pod deletions pending from before this start, acknowledged as their kubelets would.
    let kubelet_pass = listwatch_controllers::kubelet_pass::spawn(
        &api,
        listwatch_registry::lifecycle::Kubelet::of(opts.acknowledge_pod_deletion),
    );
    let (reconciler, rbac_in_force) = informers
        .as_ref()
        .and_then(|i| i.spawn_reconciler(&api.resources()))
        .unzip();
    // Readiness waits for the policy only where an authorizer reads it.
    let rbac_in_force = rbac_in_force.filter(|_| sec_opts.wants_rbac());
    // CRDs: each replica serves the kinds they define (upstream's apiextensions-apiserver
    // runs on every replica too).
    let make = backends.factory();
    let crd_factory: listwatch_controllers::crd::StorageFactory =
        Arc::new(move |info: &KindSpec| cache.wrap(make(info), info).0);
    let crd_controller = security::reviews::REVIEW_KINDS.iter().fold(
        listwatch_controllers::crd::CrdController::new(&api, crd_factory),
        |c, (group, plural, kind)| c.reserve(group, plural, kind),
    );
    let crds_synced = crd_controller.synced();
    let crd_controller = AbortOnDrop(tokio::spawn(crd_controller.run()));
    let mut work = singletons::Singletons::default();
    let ns_controller = namespaces::NamespaceController::new(
        Arc::new(namespaces::ApiServer(api.clone())),
        namespace_metrics,
    );
    let services_observer = api
        .resources()
        .iter()
        .find(|r| r.info.group.is_empty() && r.info.plural == "services")
        .and_then(|svc| service_ips::spawn(svc, Arc::clone(&services_alloc)));
    let (services_observer, services_synced) = services_observer.unzip();
    let advertised = kubernetes_service::Advertised {
        cluster_ip: services_alloc.kubernetes_ip(),
        endpoint: SocketAddr::new(advertise_address(opts, addr), addr.port()),
    };
    let k8s_api = api.clone();
    work.add(
        "kubernetes-service",
        Box::new(move || Box::pin(kubernetes_service::run(k8s_api.clone(), advertised.clone()))),
    );
    let ca_pem = root_ca(opts)?;
    let defaults_api = api.clone();
    work.add(
        "namespace-defaults",
        Box::new(move || {
            Box::pin(namespace_defaults::run(
                defaults_api.clone(),
                ca_pem.clone(),
            ))
        }),
    );
    work.add(
        "namespace-controller",
        Box::new(move || Box::pin(ns_controller.clone().run())),
    );
    let sys_api = api.clone();
    let every = opts.system_namespaces_interval;
    work.add(
        "system-namespaces",
        Box::new(move || Box::pin(bootstrap::ensure_system_namespaces(sys_api.clone(), every))),
    );
    if opts.enable_garbage_collector {
        let gc_api = api.clone();
        work.add(
            "garbage-collector",
            Box::new(move || {
                Box::pin(listwatch_controllers::gc::GarbageCollector::new(&gc_api).run())
            }),
        );
    }
    let elect_on = match (&backends, election) {
        (Backends::Etcd { .. }, Some(e)) => {
            let leases = api
                .resources()
                .iter()
                .find(|r| r.info.group == "coordination.k8s.io" && r.info.plural == "leases")
                .cloned()
                .ok_or_else(|| {
                    ServerError::LeaderElection("the leases resource is not served".into())
                })?;
            Some((e, leases))
        }
        _ => None,
    };
    let singletons = singletons::start(
        work,
        elect_on.as_ref().map(|(e, l)| (e.clone(), l)),
        election_status,
    )
    .map_err(ServerError::LeaderElection)?;
    Ok((
        api,
        Running {
            _backends: backends,
            cachers,
            security,
            informers,
            _reconciler: reconciler.map(AbortOnDrop),
            _kubelet_pass: kubelet_pass.map(AbortOnDrop),
            _crd_controller: crd_controller,
            crds_synced,
            _services_observer: services_observer.map(AbortOnDrop),
            services_synced,
            rbac_in_force,
            conn_metrics,
            singletons,
        },
    ))
}

/// How each resource's storage is cached (`--watch-cache*`).
#[derive(Clone)]
struct CacheOptions {
    on: bool,
    metrics: CacherMetrics,
    consistent_reads_from_cache: bool,
    consistent_read_fallback: bool,
    window_bytes: Option<usize>,
}

impl CacheOptions {
    /// `backend` for `info`, behind its own [`Cacher`] unless the cache is off (the cacher
    /// is also returned, for readiness).
    fn wrap(
        &self,
        backend: Arc<dyn Storage>,
        info: &KindSpec,
    ) -> (Arc<dyn Storage>, Option<Arc<Cacher>>) {
        if !self.on {
            return (backend, None);
        }
        let mut config =
            CacherConfig::new(info.storage_resource.clone()).with_metrics(self.metrics.clone());
        config.consistent_reads_from_cache = self.consistent_reads_from_cache;
        config.consistent_read_fallback = self.consistent_read_fallback;
        let window_bytes = self.window_bytes;
        config = config.with_watch_cache(|c| c.with_window_byte_budget(window_bytes));
        if let Some(trigger) = &info.trigger_field {
            config = config.with_trigger(trigger);
        }
        let cacher = Arc::new(Cacher::new(backend, config));
        (Arc::clone(&cacher) as Arc<dyn Storage>, Some(cacher))
    }
}

/// The address the `kubernetes` Endpoints advertise: `--advertise-address`, else the
/// bound host, else (bound to every address) loopback.
fn advertise_address(opts: &Options, addr: SocketAddr) -> std::net::IpAddr {
    opts.advertise_address.unwrap_or_else(|| {
        if addr.ip().is_unspecified() {
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
        } else {
            addr.ip()
        }
    })
}

/// The CA bundle published in each namespace's `kube-root-ca.crt`: the client CA
/// (`--client-ca-file`, or `--pki-dir`'s CA, which also signed the serving certificate);
/// `None` without one. Read once at start; a file that cannot be read stops the start.
fn root_ca(opts: &Options) -> Result<Option<String>, ServerError> {
    let Some(path) = &opts.security.client_ca_file else {
        return Ok(None);
    };
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|source| ServerError::RootCa {
            path: path.clone(),
            source,
        })
}

/// The leader election of `--leader-elect*` (validated), or `None` when it is off.
fn election_options(opts: &Options) -> Result<Option<singletons::ElectionOptions>, ServerError> {
    if !opts.leader_elect {
        return Ok(None);
    }
    let config = listwatch_runtime::LeaderElectionConfig {
        identity: opts
            .leader_elect_identity
            .clone()
            .unwrap_or_else(listwatch_runtime::leaderelection::default_identity),
        lease_duration: opts.leader_elect_lease_duration,
        renew_deadline: opts.leader_elect_renew_deadline,
        retry_period: opts.leader_elect_retry_period,
        release_on_cancel: true,
    };
    config
        .validate()
        .map_err(|e| ServerError::LeaderElection(e.to_string()))?;
    Ok(Some(singletons::ElectionOptions {
        config,
        namespace: opts.leader_elect_resource_namespace.clone(),
        name: opts.leader_elect_resource_name.clone(),
    }))
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The router of the running server: the API and the review routes behind the security
/// filter.
pub fn router(api: &listwatch_endpoints::Api, running: &Running) -> axum::Router {
    let sec = Arc::clone(&running.security);
    axum::Router::new()
        .merge(security::reviews::router(Arc::clone(&sec), api))
        .merge(binding::router(api))
        .merge(eviction::router(api))
        .merge(api.router())
        .layer(axum::middleware::from_fn_with_state(
            sec,
            security::filter::filter,
        ))
}

/// What must live as long as the server: the backends (and etcd's compactor) and the
/// cachers (each stops when dropped).
pub struct Running {
    _backends: Backends,
    cachers: Vec<Arc<Cacher>>,
    security: Arc<security::Security>,
    informers: Option<security::rbac::Informers>,
    _reconciler: Option<AbortOnDrop>,
    /// Acknowledges the pod deletions pending at start (`--acknowledge-pod-deletion`).
    _kubelet_pass: Option<AbortOnDrop>,
    /// Serves the kinds CRDs define.
    _crd_controller: AbortOnDrop,
    /// Turns true once the CRDs stored at start are served.
    crds_synced: tokio::sync::watch::Receiver<bool>,
    /// Feeds the Service allocator the stored Services.
    _services_observer: Option<AbortOnDrop>,
    /// Turns true once the Service allocator has every stored Service (when its observer
    /// runs).
    services_synced: Option<tokio::sync::watch::Receiver<bool>>,
    /// Turns true once the bootstrap RBAC policy is in the authorizer's stores.
    rbac_in_force: Option<tokio::sync::watch::Receiver<bool>>,
    conn_metrics: serve::ConnMetrics,
    /// The singletons (or the election that runs them); stopped when dropped.
    singletons: singletons::Running,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("cachers", &self.cachers.len())
            .finish_non_exhaustive()
    }
}

impl Running {
    /// Resolves once every cache has listed its backend and is serving, the resources of
    /// the stored CRDs are served, the security informers have synced, and (with RBAC) the
    /// bootstrap policy is in force.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn wait_ready(&self) {
        futures::future::join_all(self.cachers.iter().map(|c| c.wait_ready())).await;
        // The CRDs stored before this start are served (an error: the controller is gone).
        let _ = self.crds_synced.clone().wait_for(|synced| *synced).await;
        if let Some(i) = &self.informers {
            i.wait_synced().await;
        }
        if let Some(rx) = &self.services_synced {
            // Service writes are refused (429) until the stored Services are in. An error
            // means the observer is gone: nothing to wait for.
            let _ = rx.clone().wait_for(|synced| *synced).await;
        }
        if let Some(rx) = &self.rbac_in_force {
            // An error means the reconciler stopped (the informers ended): nothing to wait for.
            let _ = rx.clone().wait_for(|in_force| *in_force).await;
        }
    }

    /// The connection layer's metrics, registered with the API's.
    pub fn conn_metrics(&self) -> &serve::ConnMetrics {
        &self.conn_metrics
    }
}

/// Runs the server until SIGTERM/SIGINT; `on_listening` gets the bound address once every
/// cache is ready.
pub async fn run(opts: Options, on_listening: impl FnOnce(SocketAddr)) -> Result<(), ServerError> {
    run_with(opts, on_listening, Terminate::new()).await
}

/// Runs the server until `stop` turns `true` (or its sender is dropped), then shuts down as
/// on SIGTERM (the shutdown delay, then the grace period); `on_listening` gets the bound
/// address once every cache is ready. No signal handler is installed: this is the entry of
/// a server embedded in another program (`listwatch-testenv` starts one per test).
pub async fn run_until(
    opts: Options,
    on_listening: impl FnOnce(SocketAddr),
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ServerError> {
    run_with(opts, on_listening, Terminate::on(stop)).await
}

async fn run_with(
    mut opts: Options,
    on_listening: impl FnOnce(SocketAddr),
    mut terminate: Terminate,
) -> Result<(), ServerError> {
    // Before anything opens a file: the store, the listener, every connection.
    opts.settle()?;
    let files = conn_limit::raise_open_file_limit();
    let pki = match opts.security.pki_dir.clone() {
        Some(dir) => Some(security::pki::apply(&mut opts, &dir)?),
        None => None,
    };
    let tls_on = opts.tls_cert_file.is_some();
    opts.security.check(opts.bind, tls_on)?;
    // Bound before anything starts (caches, the store's recovery, etcd connections): a
    // busy port fails at once, saying so.
    let bind = |source| ServerError::Bind {
        addr: opts.bind,
        source,
    };
    let listener = tokio::net::TcpListener::bind(opts.bind)
        .await
        .map_err(bind)?;
    let addr = listener.local_addr().map_err(bind)?;
    let io = |source| ServerError::Io { addr, source };
    let (api, running) = build_api(&opts, addr).await?;
    // Served before the storage answers: a server started together with etcd (as a service
    // manager does) waits for it, with /readyz failing and /livez saying why.
    api.set_waiting_for(Some("creating the default namespaces".into()));
    let shutdown = api.shutdown_handle();
    let serve_config = opts.serve_config()?;
    warn_if_files_run_out(serve_config.max_connections, files.soft);
    let mut server = tokio::spawn(serve::serve(
        listener,
        router(&api, &running),
        serve_config,
        shutdown.clone(),
        running.conn_metrics.clone(),
    ));
    if let Some(pki) = &pki {
        let path = pki.write_kubeconfig(addr).map_err(io)?;
        tracing::info!(kubeconfig = %path.display(), "admin kubeconfig written");
    }
    // Already serving (with /readyz failing); announce once every cache is ready, so what a
    // person (or a test) does next is not answered with 429s.
    // From here SIGTERM/SIGINT are this server's to handle (before, their default action
    // ends the process, e.g. during a long log replay); one listener for the rest of its life.
    terminate.listen();
    let announced = tokio::select! {
        res = async {
            bootstrap_until_done(&api).await?;
            // /readyz fails until the bootstrap RBAC policy is in force, as upstream's
            // rbac/bootstrap-roles hook.
            if running.rbac_in_force.is_some() {
                api.set_waiting_for(Some("the bootstrap RBAC policy".into()));
            }
            running.wait_ready().await;
            api.set_waiting_for(None);
            Ok::<_, ServerError>(())
        } => {
            if let Err(e) = res {
                // Not a storage outage (those are retried): stop serving and say why.
                shutdown.shutdown();
                server.abort();
                return Err(e);
            }
            true
        }
        () = terminate.recv() => false,
        () = async {
            // Only reached when readiness takes long (e.g. etcd unreachable): say so.
            let mut every = tokio::time::interval(Duration::from_secs(5));
            every.tick().await;
            loop {
                every.tick().await;
                match api.ready().await {
                    Ok(()) => tracing::info!("caches are becoming ready"),
                    Err(e) => tracing::warn!(%addr, reason = %e, "waiting for the storage to become ready"),
                }
            }
        } => false,
    };
    if announced {
        on_listening(addr);
        tracing::info!(%addr, storage = %opts.storage_description(), resources = api.resources().len(),
            watch_cache = opts.watch_cache, request_workers = api.request_workers(), "serving");
        tokio::select! {
            res = &mut server => {
                return match res {
                    Ok(r) => r.map_err(|source| ServerError::Io { addr, source }),
                    Err(e) => Err(ServerError::Io { addr, source: std::io::Error::other(e) }),
                };
            }
            () = terminate.recv() => {}
        }
    }
    if announced && !opts.shutdown_delay_duration.is_zero() {
        // /readyz fails from now on; everything else is served as before until the delay
        // is over, so that load balancers stop sending requests before any is refused.
        tracing::info!(
            delay = ?opts.shutdown_delay_duration,
            "shutdown requested: /readyz fails, still serving until the delay is over"
        );
        shutdown.drain();
        tokio::select! {
            () = tokio::time::sleep(opts.shutdown_delay_duration) => {}
            // A second signal skips the rest of the delay.
            () = terminate.recv() => {}
        }
    }
    tracing::info!(
        grace = ?opts.shutdown_grace_period,
        "shutting down: ending watches, refusing new requests"
    );
    shutdown.shutdown();
    let mut running = running;
    // The singletons stop first and the lease is released, so another replica takes over
    // at its next try rather than a lease duration later.
    running
        .singletons
        .stop(opts.leader_elect_renew_deadline)
        .await;
    match tokio::time::timeout(opts.shutdown_grace_period, &mut server).await {
        Ok(_) => tracing::info!("stopped"),
        Err(_) => {
            tracing::warn!("grace period over with requests still open; exiting");
            server.abort();
        }
    }
    drop(running);
    Ok(())
}

/// Warns when the connection cap does not fit the open-file limit (`soft`, after raising
/// it; `None`: unlimited): accepts would fail (and wait) before the cap is reached.
fn warn_if_files_run_out(max_connections: usize, soft: Option<u64>) {
    // Room for the store, etcd connections, logs and the listener.
    const RESERVE: u64 = 256;
    let Some(files) = soft else { return };
    if max_connections == 0 || (max_connections as u64).saturating_add(RESERVE) > files {
        tracing::warn!(
            max_connections,
            open_file_limit = files,
            "the open-file limit is below --max-connections plus a reserve of {RESERVE}: \
             connections beyond it wait to be accepted; raise the limit (ulimit -n) or \
             lower --max-connections"
        );
    }
}

/// Resolves on SIGINT or SIGTERM.
/// SIGTERM and SIGINT, listened for from before the server announces itself until it
/// exits, on one listener each: a signal that arrives between two waits is kept for the
/// next one. (A listener made per wait lost it: once tokio handles a signal its default
/// action is gone, and a listener created after the signal does not see it — a SIGTERM
/// sent right after the announcement was ignored and the server never stopped.)
struct Terminate {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
    /// Set for an embedded server ([`run_until`]): the only way it is told to stop.
    stop: Option<tokio::sync::watch::Receiver<bool>>,
}

/// The next delivery of `s`; never, without a listener.
#[cfg(unix)]
async fn next_signal(s: Option<&mut tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

impl Terminate {
    /// Signals, listened to from [`Terminate::listen`] on.
    fn new() -> Self {
        Self {
            #[cfg(unix)]
            term: None,
            #[cfg(unix)]
            int: None,
            stop: None,
        }
    }

    /// `stop` turning `true` (or its sender dropped), and never a signal.
    fn on(stop: tokio::sync::watch::Receiver<bool>) -> Self {
        Self {
            stop: Some(stop),
            ..Self::new()
        }
    }

    /// Takes over SIGTERM and SIGINT (unless told to stop by a channel instead).
    fn listen(&mut self) {
        if self.stop.is_some() {
            return;
        }
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for {name}");
                    None
                }
            };
            self.term = listen(SignalKind::terminate(), "SIGTERM");
            self.int = listen(SignalKind::interrupt(), "SIGINT");
        }
    }

    /// Waits for the next SIGTERM or SIGINT (returns at once for one already received).
    async fn recv(&mut self) {
        if let Some(stop) = &mut self.stop {
            // A dropped sender counts as a stop: nobody is left to send one.
            let _ = stop.wait_for(|stop| *stop).await;
            return;
        }
        #[cfg(unix)]
        {
            let Self { term, int, .. } = self;
            tokio::select! {
                () = next_signal(term.as_mut()) => {}
                () = next_signal(int.as_mut()) => {}
            }
        }
        #[cfg(not(unix))]
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}
