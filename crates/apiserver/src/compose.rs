//! The composition of a running server: one backend, one cache per resource, the endpoint
//! installer, the security layer, and the in-process controllers (CRDs, namespaces, garbage
//! collection, bootstrap policy, the `kubernetes` Service, Service address allocation,
//! ComponentStatus), wired from the [`Options`].
//!
//! It owns [`build_api`] and [`Running`], what must live as long as the server. Invariants:
//! every controller writes through the registry's stores of the API it is given (never the
//! backend directly), and [`Running::wait_ready`] resolves only when every cache, the stored
//! CRDs' resources, the security informers and (with RBAC) the bootstrap policy are in force.
//! The connection layer and the process's lifetime (signals, draining) stay in the crate
//! root.

use std::net::SocketAddr;
use std::sync::Arc;

use listwatch_cacher::{Cacher, CacherConfig, CacherMetrics};
use listwatch_controllers::bootstrap;
use listwatch_controllers::{kubernetes_service, namespace_defaults, service_ips};
use listwatch_controllers::{namespaces, singletons};
use listwatch_endpoints::{Config, Installer, KindSpec};
use listwatch_registry::service_alloc::ServiceAllocator;
use listwatch_storage::Storage;

use crate::backends::Backends;
use crate::{
    Options, ServerError, binding, build_info, builtin, componentstatus, custom, eviction,
    security, serve,
};

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
    crate::crd_patterns::install(opts.max_crd_pattern_bytes, installer.registry_mut());
    let mut cachers = Vec::new();
    let cache = CacheOptions {
        // The built-in kinds' caches list at start: KEP-4568's 429 at once (the server
        // reports ready once they have listed).
        initial_wait: std::time::Duration::ZERO,
        on: opts.watch_cache,
        metrics: cacher_metrics.clone(),
        consistent_reads_from_cache,
        consistent_read_fallback: opts.watch_cache_consistent_read_fallback,
        consistency_check_period: opts.watch_cache_consistency_check_period,
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
                let backend = backends.storage_for(&info);
                // A custom resource's reads are decoded as upstream's CRD codec decodes
                // them (pruned, defaulted by its schema), under its cache.
                let backend = if info.custom_resource {
                    listwatch_controllers::crd::decode::ReadSchemas::single(
                        &info.api_version(),
                        info.custom_schema.as_deref(),
                        info.selectable_fields.clone(),
                    )
                    .over(backend)
                } else {
                    backend
                };
                let (storage, cacher) = cache.wrap(backend, &info);
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
    let priority = Arc::new(listwatch_controllers::priority::PriorityAdmission::start(
        installer.resources(),
    ));
    // Upstream's default-on DefaultStorageClass and DefaultIngressClass.
    let default_class = Arc::new(
        listwatch_controllers::default_class::DefaultClassAdmission::start(installer.resources()),
    );
    installer = installer.admission(Arc::new(listwatch_registry::admission::Chain(vec![
        admission,
        Arc::clone(&services_alloc) as Arc<dyn listwatch_registry::admission::Admission>,
        priority,
        default_class,
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
    // Upstream's post-start hooks: `/readyz` lists each as `poststarthook/<name>` and the
    // server reports ready once each has done its first pass (docs/architecture.md).
    let mut hooks = listwatch_controllers::poststart::Hooks::default();
    let bootstrap_done = vec![
        hooks.add("start-system-namespaces-controller"),
        hooks.add("scheduling/bootstrap-system-priority-classes"),
    ];
    // The bootstrap policy is written in every mode; ready once it is in place.
    if let Some(rx) = &rbac_in_force {
        hooks.add_signal("rbac/bootstrap-roles", rx.clone());
    }
    // The message "waiting for the bootstrap RBAC policy" only where an authorizer reads it.
    let rbac_in_force = rbac_in_force.filter(|_| sec_opts.wants_rbac());
    // CRDs: each replica serves the kinds they define (upstream's apiextensions-apiserver
    // runs on every replica too).
    // A new custom resource's first clients (an operator's informers, the garbage
    // collector's) wait for its cache's first list instead of a 429 and a backoff.
    let make = backends.factory();
    let crd_cache = CacheOptions {
        initial_wait: CRD_CACHE_INITIAL_WAIT,
        ..cache
    };
    let crd_factory: listwatch_controllers::crd::StorageFactory = Arc::new(
        move |info: &KindSpec, read: &listwatch_controllers::crd::decode::ReadSchemas| {
            crd_cache.wrap(read.over(make(info)), info).0
        },
    );
    let crd_controller = security::reviews::REVIEW_KINDS.iter().fold(
        listwatch_controllers::crd::CrdController::new(&api, crd_factory),
        |c, (group, plural, kind)| c.reserve(group, plural, kind),
    );
    let crds_synced = crd_controller.synced();
    hooks.add_signal("crd-informer-synced", crds_synced.clone());
    // The singletons' hooks gate readiness where this replica runs them at once (the
    // embedded store, or no election); under an election only the leader runs them, and
    // another replica's readiness cannot wait for them.
    let singleton_hooks = !(matches!(backends, Backends::Etcd { .. }) && election.is_some());
    let mut singleton_hook = |name: &'static str| singleton_hooks.then(|| hooks.add(name));
    let k8s_done = singleton_hook("bootstrap-controller");
    let defaults_done = singleton_hook("namespace-defaults");
    let apisvc_done = singleton_hook("kube-apiserver-autoregistration");
    let apf_done = singleton_hook("apiserver/bootstrap-system-flowcontrol-configuration");
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
    if let Some(rx) = &services_synced {
        hooks.add_signal("start-service-ip-repair-controllers", rx.clone());
    }
    let advertised = kubernetes_service::Advertised {
        cluster_ip: services_alloc.kubernetes_ip(),
        endpoint: SocketAddr::new(advertise_address(opts, addr), addr.port()),
    };
    let k8s_api = api.clone();
    work.add(
        "kubernetes-service",
        Box::new(move || {
            Box::pin(kubernetes_service::run(
                k8s_api.clone(),
                advertised.clone(),
                k8s_done.clone(),
            ))
        }),
    );
    let ca_pem = root_ca(opts)?;
    let defaults_api = api.clone();
    work.add(
        "namespace-defaults",
        Box::new(move || {
            Box::pin(namespace_defaults::run(
                defaults_api.clone(),
                ca_pem.clone(),
                defaults_done.clone(),
            ))
        }),
    );
    let apisvc_api = api.clone();
    let apisvc_crds = crds_synced.clone();
    work.add(
        "local-apiservices",
        Box::new(move || {
            let (api, done, mut crds) =
                (apisvc_api.clone(), apisvc_done.clone(), apisvc_crds.clone());
            // The first round after the CRDs stored at start are served, so that their
            // groups' APIServices are in place before the server reports ready.
            Box::pin(async move {
                let _ = crds.wait_for(|synced| *synced).await;
                listwatch_controllers::apiservices::run(api, done).await;
            })
        }),
    );
    let apf_api = api.clone();
    work.add(
        "flowcontrol-defaults",
        Box::new(move || {
            Box::pin(listwatch_controllers::flowcontrol_defaults::run(
                apf_api.clone(),
                apf_done.clone(),
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
            hooks,
            bootstrap_done,
            _services_observer: services_observer.map(AbortOnDrop),
            services_synced,
            rbac_in_force,
            conn_metrics,
            singletons,
        },
    ))
}

/// How long a custom resource's first lists and watches wait for its new cache's first
/// list (`CacherConfig::initial_wait`); the watch cache's freshness timeout.
const CRD_CACHE_INITIAL_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// How each resource's storage is cached (`--watch-cache*`).
#[derive(Clone)]
struct CacheOptions {
    /// How long a list or watch waits for the cache's first list (zero: 429 at once).
    initial_wait: std::time::Duration,
    on: bool,
    metrics: CacherMetrics,
    consistent_reads_from_cache: bool,
    consistent_read_fallback: bool,
    consistency_check_period: std::time::Duration,
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
        config.consistency_check_period = self.consistency_check_period;
        config.initial_wait = self.initial_wait;
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
        .layer(axum::middleware::from_fn(crate::drain::drain_unread_body))
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
    /// The post-start hooks `/readyz` lists; ready once each is done.
    hooks: listwatch_controllers::poststart::Hooks,
    /// The hooks of the built-in namespaces and system priority classes, done once
    /// `bootstrap_until_done` returned ([`Running::bootstrapped`]).
    bootstrap_done: Vec<listwatch_controllers::poststart::Done>,
    /// Feeds the Service allocator the stored Services.
    _services_observer: Option<AbortOnDrop>,
    /// Turns true once the Service allocator has every stored Service (when its observer
    /// runs).
    services_synced: Option<tokio::sync::watch::Receiver<bool>>,
    /// Turns true once the bootstrap RBAC policy is in the authorizer's stores.
    pub(crate) rbac_in_force: Option<tokio::sync::watch::Receiver<bool>>,
    pub(crate) conn_metrics: serve::ConnMetrics,
    /// The singletons (or the election that runs them); stopped when dropped.
    pub(crate) singletons: singletons::Running,
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
        // Every post-start hook's first pass (the bootstrap objects are in place).
        self.hooks.wait_all().await;
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

    /// The built-in namespaces and the system priority classes are in place (their
    /// post-start hooks are done).
    pub(crate) fn bootstrapped(&self) {
        for d in &self.bootstrap_done {
            d.mark();
        }
    }

    /// The post-start hooks, for `/readyz` ([`listwatch_endpoints::Api::add_post_start_hook`]).
    pub(crate) fn register_hooks(&self, api: &listwatch_endpoints::Api) {
        for (name, rx) in self.hooks.all() {
            api.add_post_start_hook(name, rx.clone());
        }
    }

    /// The connection layer's metrics, registered with the API's.
    pub fn conn_metrics(&self) -> &serve::ConnMetrics {
        &self.conn_metrics
    }
}
