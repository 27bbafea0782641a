//! The listwatch API server: flags, backend choice, built-in and declared resources, the
//! endpoint installer, and graceful shutdown.
//!
//! It sits at the top of the pipeline and composes everything below: a storage backend
//! (the embedded store by default, etcd by flag), one `listwatch-cacher` Cacher per
//! resource, the REST endpoints of `listwatch-endpoints` and the in-process controllers (wired
//! in the `compose` module: [`build_api`], [`Running`]), the connection layer that serves
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
use std::time::Duration;

mod backends;
pub mod binding;
pub mod builtin;
mod componentstatus;
mod compose;
mod conn;
mod conn_limit;
mod crd_patterns;
pub mod custom;
pub mod drain;
pub mod eviction;
pub mod flag_checks;
pub mod flags;
mod options;
pub mod routes;
pub mod security;
pub mod serve;
pub mod tls;

pub use crate::compose::{Running, all_resources, build_api, router};
pub use crate::flag_checks::FlagConflict;
pub use crate::options::{Backend, DEFAULT_MAX_CONNECTIONS_PER_CLIENT, LogFormat, Options};
use listwatch_controllers::bootstrap::bootstrap_until_done;

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
    running.register_hooks(&api);
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
            running.bootstrapped();
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
