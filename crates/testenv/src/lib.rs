//! A Kubernetes API server for tests, in process: envtest's role, without downloading
//! kube-apiserver and etcd.
//!
//! [`TestEnv::start`] (or [`TestEnv::builder`]) starts a `listwatch-apiserver` on a free
//! loopback port, in memory (the embedded store, nothing on disk), with the
//! CustomResourceDefinitions you give it, and returns once every cache is ready. It hands
//! out its address, a kubeconfig (as a file and as YAML, for tools and other languages'
//! clients), a ready [`listwatch_client::HttpClient`], and with the `kube` feature a ready
//! `kube::Client`. Dropping it stops the server (watches end, connections close) and
//! removes its files.
//!
//! It owns the life of one embedded server: a thread of its own running a multi-threaded
//! tokio runtime, so that the server keeps serving while the test's own runtime (often
//! `current_thread`, as `#[tokio::test]`'s) is blocked or busy, and so that drop can stop it
//! from any context.
//!
//! Invariants:
//! - the server is reachable and every cache has listed before `start` returns; a server
//!   that fails to start is an [`Error`] (never a hang: start has a deadline, 60 s by
//!   default);
//! - the server serves loopback only, over TLS with a CA made for this environment alone
//!   (the server's `--pki-dir` setup, in the environment's private directory, mode 0700),
//!   and authenticates every request: the admin client certificate (`kubernetes-admin` in
//!   `system:masters`) is the only credential it hands out, anonymous requests are off (401)
//!   and RBAC authorizes the rest. So another local user of the machine, or a client of an
//!   earlier environment that had the same port, cannot use it (envtest's posture);
//! - the kubeconfig (file mode 0600) and every client it returns carry the CA and the admin
//!   certificate;
//! - drop stops the server and waits for its thread, at most the shutdown grace period
//!   (1 s) plus a bound; nothing of it outlives the `TestEnv` but a thread that failed to
//!   stop in time, which is logged.
//!
//! CRDs are created through the API once the server is ready, as envtest installs them,
//! and `start` returns once each is `Established` (its resource served, with its schema in
//! OpenAPI and its printer columns): they are CustomResourceDefinition objects like any
//! other, so code that reads, applies or waits for its own CRD works as on a cluster; see
//! docs/testing.md for what of a CRD is served.
//!
//! It depends on the server (`listwatch-apiserver`) and the HTTP client; nothing in the
//! workspace depends on it but tests.
//!
//! ```no_run
//! use listwatch_testenv::TestEnv;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let env = TestEnv::builder()
//!     .crd_yaml(
//!         "apiVersion: apiextensions.k8s.io/v1
//! kind: CustomResourceDefinition
//! metadata: {name: widgets.example.com}
//! spec:
//!   group: example.com
//!   names: {plural: widgets, singular: widget, kind: Widget}
//!   scope: Namespaced
//!   versions:
//!   - {name: v1, served: true, storage: true,
//!      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
//! ",
//!     )
//!     .start()
//!     .await?;
//! let client = env.client()?;
//! let widgets = client.get("/apis/example.com/v1/namespaces/default/widgets").await?;
//! assert!(widgets.is_some());
//! println!("KUBECONFIG={}", env.kubeconfig_path().display());
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use listwatch_apiserver::Options;

pub mod private_file;

/// How long [`Builder::start`] waits for the server by default.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a stopping server may finish its requests.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// The environment's `--pki-dir`, inside its private directory.
const PKI_DIR: &str = "pki";

/// The largest CRD manifest file read (a bundle of many CRDs fits; `/dev/zero` does not).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// Why a test environment did not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags (the builder's and the extra ones given) were refused.
    #[error("invalid server flags: {0}")]
    Flags(String),
    /// A CRD manifest could not be read or written.
    #[error("CRD manifest {path}: {source}")]
    Manifest {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A file of the environment (its directory, the kubeconfig) could not be written.
    #[error("test environment files: {0}")]
    Io(#[from] std::io::Error),
    /// The server stopped before it was ready (a bad CRD, a port problem, ...).
    #[error("the server did not start: {0}")]
    Server(String),
    /// The server was not ready within the start deadline.
    #[error("the server was not ready within {0:?}")]
    Timeout(Duration),
    /// The HTTP client could not be built.
    #[error("client: {0}")]
    Client(#[from] listwatch_client::Error),
    /// The kube-rs client could not be built.
    #[cfg(feature = "kube")]
    #[error("kube client: {0}")]
    Kube(String),
}

/// Configures a [`TestEnv`]; [`TestEnv::builder`] makes one.
#[derive(Debug, Default, Clone)]
pub struct Builder {
    crds: Vec<String>,
    crd_paths: Vec<PathBuf>,
    args: Vec<String>,
    start_timeout: Option<Duration>,
}

impl Builder {
    /// Installs the CRDs of a YAML text: one manifest, several separated by `---`, or a
    /// `kind: List` of them (as `kubectl get crd -o yaml` prints).
    #[must_use]
    pub fn crd_yaml(mut self, yaml: &str) -> Self {
        self.crds.push(yaml.to_owned());
        self
    }

    /// Installs one CRD given as a value (e.g. `serde_json::to_value` of kube-rs's
    /// `CustomResourceExt::crd()` or of a k8s-openapi `CustomResourceDefinition`).
    #[must_use]
    pub fn crd(mut self, crd: &serde_json::Value) -> Self {
        // JSON is YAML: the manifest reader takes it as it is.
        self.crds.push(crd.to_string());
        self
    }

    /// Installs the CRDs of a file, or of every `*.yaml`, `*.yml` and `*.json` file of a
    /// directory (not recursive), read when the environment starts. As envtest's CRD paths,
    /// documents of other kinds in those files (a kubebuilder `kustomization.yaml`) are
    /// skipped.
    #[must_use]
    pub fn crds_from(mut self, path: impl Into<PathBuf>) -> Self {
        self.crd_paths.push(path.into());
        self
    }

    /// Adds a server flag, as on its command line (e.g. `--watch-cache=false`).
    #[must_use]
    pub fn arg(mut self, flag: impl Into<String>) -> Self {
        self.args.push(flag.into());
        self
    }

    /// How long [`start`](Self::start) waits for the server (default
    /// [`DEFAULT_START_TIMEOUT`]).
    #[must_use]
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = Some(timeout);
        self
    }

    /// Starts the server and waits until it is ready.
    ///
    /// # Errors
    /// A CRD that cannot be read or is refused, flags the server refuses, a server that
    /// stops or is not ready within the start deadline.
    pub async fn start(self) -> Result<TestEnv, Error> {
        let deadline = self.start_timeout.unwrap_or(DEFAULT_START_TIMEOUT);
        // The blocking parts (files, the thread) are short; the wait is async.
        let dir = tempfile::Builder::new()
            .prefix("listwatch-testenv-")
            .tempdir()?;
        // Private: it holds the CA key and the admin key (tempfile makes it 0700 already;
        // said here, not assumed).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        }
        let mut args: Vec<String> = vec![
            "listwatch-apiserver".into(),
            "--bind".into(),
            "127.0.0.1:0".into(),
            "--shutdown-grace-period".into(),
            format!("{}ms", SHUTDOWN_GRACE.as_millis()),
            "--log-level".into(),
            "warn".into(),
        ];
        // Read and split before the server starts: a file or document that is not a CRD
        // manifest fails at once.
        let mut crds = Vec::new();
        for (source, text, from_file) in self.manifests()? {
            // Files are read as envtest reads its CRD paths: other kinds' documents (a
            // kustomization, a sample) are skipped; a text given as a CRD must be one.
            let read = if from_file {
                listwatch_apiserver::custom::crd_manifests_skipping_others
            } else {
                listwatch_apiserver::custom::crd_manifests
            };
            crds.extend(read(&text, &source).map_err(|e| Error::Server(e.to_string()))?);
        }
        args.extend(self.args);
        let mut opts = Options::try_parse_checked_from(&args)
            .map_err(|e| Error::Flags(e.to_string().trim().to_owned()))?;
        refuse_unreachable(&opts)?;
        // TLS with a CA of this environment, client certificates, RBAC; no anonymous user.
        let pki = dir.path().join(PKI_DIR);
        opts.security.pki_dir = Some(pki.clone());
        // Removed with the environment: not flushed to disk file by file.
        opts.security.pki_ephemeral = true;
        opts.security.anonymous_auth = false;
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<SocketAddr, String>>();
        let thread = std::thread::Builder::new()
            .name("listwatch-testenv".into())
            .spawn(move || serve(opts, stop_rx, ready_tx))?;
        let mut env = TestEnv {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubeconfig: PathBuf::new(),
            credentials: Credentials::default(),
            stop,
            thread: Some(thread),
            dir,
        };
        let started = Instant::now();
        let addr = match tokio::time::timeout(deadline, ready_rx).await {
            Ok(Ok(Ok(addr))) => addr,
            Ok(Ok(Err(e))) => return Err(Error::Server(e)),
            Ok(Err(_)) => return Err(Error::Server("the server thread ended".into())),
            Err(_) => return Err(Error::Timeout(deadline)),
        };
        env.addr = addr;
        // The server made them before it listened.
        env.credentials = Credentials::read(&pki)?;
        env.kubeconfig = env.dir.path().join("kubeconfig");
        private_file::write(&env.kubeconfig, env.kubeconfig_yaml().as_bytes())?;
        let left = deadline.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, install(&env.client()?, &crds)).await {
            Ok(r) => r?,
            Err(_) => return Err(Error::Timeout(deadline)),
        }
        Ok(env)
    }

    /// The manifests, in order, each with what it came from: the texts, then the files (each
    /// a regular file of at most [`MAX_MANIFEST_BYTES`]; a directory's other entries — fifos,
    /// devices, sockets, subdirectories — are skipped, a path naming one is an error).
    fn manifests(&self) -> Result<Vec<(String, String, bool)>, Error> {
        let mut out: Vec<(String, String, bool)> = self
            .crds
            .iter()
            .enumerate()
            .map(|(i, text)| (format!("CRD text {i}"), text.clone(), false))
            .collect();
        for path in &self.crd_paths {
            let read = |p: &Path| {
                read_manifest(p).map_err(|source| Error::Manifest {
                    path: p.to_owned(),
                    source,
                })
            };
            let meta = std::fs::metadata(path).map_err(|source| Error::Manifest {
                path: path.clone(),
                source,
            })?;
            if meta.is_dir() {
                let entries = std::fs::read_dir(path).map_err(|source| Error::Manifest {
                    path: path.clone(),
                    source,
                })?;
                let mut files: Vec<PathBuf> = entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.is_file()
                            && p.extension()
                                .and_then(|e| e.to_str())
                                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
                    })
                    .collect();
                // A stable order, whatever the directory's.
                files.sort();
                for f in files {
                    out.push((f.display().to_string(), read(&f)?, true));
                }
            } else {
                out.push((path.display().to_string(), read(path)?, true));
            }
        }
        Ok(out)
    }
}

/// The CRDs' resource, where they are created.
const CRDS_PATH: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// Creates `crds` through the API, as a client (envtest) does, and waits until each is
/// `Established` (its resource served); a refused CRD, or one whose names are taken
/// (`NamesAccepted` false), is an error naming it and the kind it would serve. The caller
/// bounds the wait.
async fn install(
    client: &listwatch_client::HttpClient,
    crds: &[serde_json::Value],
) -> Result<(), Error> {
    let named = |crd: &serde_json::Value| {
        let name = crd
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let kind = crd
            .pointer("/spec/names/kind")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        format!("CustomResourceDefinition {name:?} (kind {kind})")
    };
    for crd in crds {
        client
            .create(CRDS_PATH, crd)
            .await
            .map_err(|e| Error::Server(format!("{} was refused: {e}", named(crd))))?;
    }
    let condition = |crd: &serde_json::Value, kind: &str| {
        crd.pointer("/status/conditions")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(serde_json::Value::as_str) == Some(kind))
            .and_then(|c| c.get("status").and_then(serde_json::Value::as_str))
            .map(str::to_owned)
    };
    for crd in crds {
        let name = crd
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        let path = format!("{CRDS_PATH}/{name}");
        loop {
            let stored = client
                .get(&path)
                .await
                .map_err(|e| Error::Server(format!("{}: {e}", named(crd))))?
                .ok_or_else(|| Error::Server(format!("{} is gone", named(crd))))?;
            if condition(&stored, "Established").as_deref() == Some("True") {
                break;
            }
            if condition(&stored, "NamesAccepted").as_deref() == Some("False") {
                return Err(Error::Server(format!(
                    "{}: its names are not accepted (taken by another resource)",
                    named(crd)
                )));
            }
            // The server's CRD controller establishes it within milliseconds.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    Ok(())
}

/// A regular file's text, at most [`MAX_MANIFEST_BYTES`]. The type is checked before the
/// file is opened: opening a fifo would wait for a writer, and a device may never end.
fn read_manifest(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_MANIFEST_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_MANIFEST_BYTES} bytes"
        )));
    }
    Ok(text)
}

/// The environment hands out a kubeconfig for a loopback port it picks, with the CA and
/// admin certificate it makes: flags that would make that kubeconfig wrong (TLS files of
/// another CA, other authenticators, another address) are refused rather than served
/// unreachable.
fn refuse_unreachable(opts: &Options) -> Result<(), Error> {
    let refuse = |what: &str| {
        Err(Error::Flags(format!(
            "{what}: the test environment serves TLS with a CA of its own on a loopback port \
             it picks, authenticates its admin client certificate, and its kubeconfig says so"
        )))
    };
    if opts.scheme() == "https" {
        return refuse("TLS flags (--tls-cert-file, --pki-dir) are not supported");
    }
    if opts.security.has_authenticator() {
        return refuse("authenticator flags are not supported");
    }
    if opts.bind != SocketAddr::from(([127, 0, 0, 1], 0)) {
        return refuse(
            "the address flags (--bind, --bind-address, --secure-port) are not supported",
        );
    }
    Ok(())
}

/// The server thread: its own runtime, the server until told to stop.
fn serve(
    opts: Options,
    stop: tokio::sync::watch::Receiver<bool>,
    ready: tokio::sync::oneshot::Sender<Result<SocketAddr, String>>,
) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("listwatch-testenv-worker")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("cannot start a runtime: {e}")));
            return;
        }
    };
    runtime.block_on(async move {
        // Sent from the callback when ready, or with the error if the server ends first.
        let ready = std::sync::Mutex::new(Some(ready));
        let take = || ready.lock().ok().and_then(|mut r| r.take());
        let result = listwatch_apiserver::run_until(
            opts,
            |addr| {
                if let Some(tx) = take() {
                    let _ = tx.send(Ok(addr));
                }
            },
            stop,
        )
        .await;
        if let Some(tx) = take() {
            let _ = tx.send(Err(match result {
                Ok(()) => "stopped before it was ready".into(),
                Err(e) => e.to_string(),
            }));
        } else if let Err(e) = result {
            tracing::warn!(error = %e, "the test server stopped with an error");
        }
    });
    // Whatever the server left running (a watch's task, a cacher's) ends with its runtime.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
}

/// Writes the kubeconfig of `env` at `path`, mode 0600 (it holds the admin key): a new file
/// (never through a link), or the replacement of a regular file of this user; any other
/// existing path is refused and left as it was (see [`private_file`]).
///
/// # Errors
/// `path` is a link, not a regular file, or another user's; the file could not be written.
pub fn write_kubeconfig(env: &TestEnv, path: &Path) -> std::io::Result<()> {
    private_file::write(path, env.kubeconfig_yaml().as_bytes())
}

/// The PEM files of the environment's `--pki-dir` a client needs.
#[derive(Debug, Default, Clone)]
struct Credentials {
    /// `ca.crt`: the CA that signed the serving certificate.
    ca: String,
    /// `admin.crt`: `kubernetes-admin` in `system:masters`.
    cert: String,
    /// `admin.key`.
    key: String,
}

impl Credentials {
    fn read(pki: &Path) -> std::io::Result<Self> {
        let read = |name: &str| {
            std::fs::read_to_string(pki.join(name)).map_err(|e| {
                std::io::Error::new(e.kind(), format!("{}: {e}", pki.join(name).display()))
            })
        };
        Ok(Self {
            ca: read("ca.crt")?,
            cert: read("admin.crt")?,
            key: read("admin.key")?,
        })
    }
}

/// A running test server; stops when dropped.
#[derive(Debug)]
pub struct TestEnv {
    addr: SocketAddr,
    kubeconfig: PathBuf,
    credentials: Credentials,
    stop: tokio::sync::watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl TestEnv {
    /// A builder, to add CRDs or flags before starting.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Starts a server with the built-in kinds only.
    ///
    /// # Errors
    /// As [`Builder::start`].
    pub async fn start() -> Result<Self, Error> {
        Builder::default().start().await
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The environment's CA certificate (PEM): the serving certificate chains to it.
    pub fn ca_pem(&self) -> &str {
        &self.credentials.ca
    }

    /// The admin client certificate and its private key (PEM): `kubernetes-admin` in
    /// `system:masters`, the credential of every client the environment hands out.
    pub fn admin_cert_pem(&self) -> (&str, &str) {
        (&self.credentials.cert, &self.credentials.key)
    }

    /// A kubeconfig file for this server (context `listwatch-testenv`, with the CA and the
    /// admin certificate; mode 0600 in a directory only its owner reads), for kubectl and
    /// other languages' clients (`KUBECONFIG=<path>`); removed on drop.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The same kubeconfig, as YAML. It holds the admin key: write it with
    /// [`write_kubeconfig`] (mode 0600), not to a file others can read.
    pub fn kubeconfig_yaml(&self) -> String {
        use base64::Engine;
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: listwatch-testenv
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: listwatch-testenv
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: listwatch-testenv
  context:
    cluster: listwatch-testenv
    user: listwatch-testenv
    namespace: default
current-context: listwatch-testenv
",
            url = self.url(),
            ca = b64(&self.credentials.ca),
            cert = b64(&self.credentials.cert),
            key = b64(&self.credentials.key),
        )
    }

    /// A client of this server (listwatch's HTTP client).
    ///
    /// # Errors
    /// The client could not be built (does not happen for a started server's URL).
    pub fn client(&self) -> Result<listwatch_client::HttpClient, Error> {
        let config = listwatch_client::HttpConfig::from_kubeconfig_yaml(
            &self.kubeconfig_yaml(),
            self.dir.path(),
        )?;
        Ok(listwatch_client::HttpClient::new(config)?)
    }

    /// A kube-rs client of this server (feature `kube`).
    ///
    /// # Errors
    /// kube-rs refused the configuration.
    #[cfg(feature = "kube")]
    pub fn kube_client(&self) -> Result<kube::Client, Error> {
        use kube::client::ConfigExt;
        let url = self
            .url()
            .parse()
            .map_err(|e: http::uri::InvalidUri| Error::Kube(e.to_string()))?;
        let mut config = kube::Config::new(url);
        config.default_namespace = "default".into();
        // kube-rs 5 is built here without a TLS feature: its base-URI layer over a hyper-util
        // client whose rustls trusts this environment's CA alone and presents the admin
        // certificate (HTTP/1.1 or HTTP/2 by ALPN).
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.rustls_config()?)
            .https_only()
            .enable_http1()
            .enable_http2()
            .build();
        let hyper =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        let service = tower::ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .service(hyper);
        Ok(kube::Client::new(service, config.default_namespace))
    }

    /// rustls trusting this environment's CA alone, presenting the admin certificate.
    #[cfg(feature = "kube")]
    fn rustls_config(&self) -> Result<rustls::ClientConfig, Error> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        let bad = |what: &str, e: &dyn std::fmt::Display| Error::Kube(format!("{what}: {e}"));
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.credentials.ca.as_bytes()) {
            roots
                .add(cert.map_err(|e| bad("ca.crt", &e))?)
                .map_err(|e| bad("ca.crt", &e))?;
        }
        let certs = CertificateDer::pem_slice_iter(self.credentials.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("admin.crt", &e))?;
        let key = PrivateKeyDer::from_pem_slice(self.credentials.key.as_bytes())
            .map_err(|e| bad("admin.key", &e))?;
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("TLS versions", &e))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certs, key)
        .map_err(|e| bad("admin certificate", &e))
    }

    /// Stops the server now and waits for it (as drop does).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        let Some(thread) = self.thread.take() else {
            return;
        };
        // The server's grace period, its runtime's shutdown bound, and room for both.
        let deadline = Instant::now() + SHUTDOWN_GRACE * 2 + Duration::from_secs(5);
        while !thread.is_finished() {
            if Instant::now() >= deadline {
                tracing::warn!(addr = %self.addr, "the test server did not stop in time; leaving its thread");
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = thread.join();
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.shutdown();
    }
}
