//! The two configurations HTTP scenarios run in, side by side in one run (issue 31 item 3):
//!
//! - **easy**: the server as the scenarios always started it — in memory, plaintext, no
//!   authentication, every request allowed;
//! - **realistic**: the deployment users run — `--data-dir` on a real disk (not tmpfs),
//!   HTTPS (`--pki-dir`: a generated CA and serving certificate), a static-token
//!   authenticator (`--token-auth-file`) and RBAC (`--authorization-mode RBAC`). Every
//!   request of the scenario carries the bearer token of a user who is *not* a cluster
//!   administrator: a ClusterRole granting what the scenario does (pods, namespaces, `/metrics`),
//!   bound to the user's group by a ClusterRoleBinding, so that each request is
//!   authenticated and authorized by rule, as an operator's or a kubelet's would be.
//!
//! The data directory is made under `$LISTWATCH_BENCH_DATA_DIR`, else `target/bench-data`
//! of the current directory (the workspace root under `cargo xtask bench`): on this
//! machine's root disk. Its file system type is recorded in the report; a tmpfs is refused
//! (the point is a real disk). It is removed when the server stops.
//!
//! Invariants: the server is stopped before its directory is removed; every wait has a
//! deadline; the credentials are made for this run only and never leave its directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::http::{Conn, Target, Tls};
use crate::sys::Server;

type Result<T> = std::result::Result<T, String>;

/// Which configuration a server runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Config {
    Easy,
    Realistic,
}

impl Config {
    /// How the configuration is named in figures.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Config::Easy => "easy (in memory, plaintext, no auth)",
            Config::Realistic => "realistic (--data-dir on disk, TLS, token + RBAC)",
        }
    }
}

/// The admin's token (group `system:masters`): used only to set up the RBAC objects.
const ADMIN_TOKEN: &str = "loadgen-admin-token";
/// The scenario user's token, user `loadgen`, group `loadgen-clients`.
const USER_TOKEN: &str = "loadgen-user-token";

/// A started server, how to reach it, and its directory (removed after the server stops).
pub(crate) struct Deployed {
    pub server: Server,
    pub target: Target,
    /// The data directory's file system type (realistic only).
    pub fs_type: Option<String>,
    _dir: Option<DirGuard>,
}

impl Deployed {
    /// The server, how to reach it, and what keeps its directory: drop the server first.
    pub(crate) fn split(self) -> (Server, Target, Option<DirGuard>) {
        (self.server, self.target, self._dir)
    }
}

/// Removes a directory when dropped (declared after the server, so dropped after it).
pub(crate) struct DirGuard(pub(crate) PathBuf);

impl Drop for DirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The file system type of the mount holding `path` (longest mount-point prefix).
pub(crate) fn fs_type(path: &Path) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    let path = path.canonicalize().ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, at, ty) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(at).then(|| (at.len(), ty.to_owned()))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, t)| t)
}

/// A fresh directory for one realistic server.
pub(crate) fn fresh_dir() -> Result<PathBuf> {
    static N: AtomicUsize = AtomicUsize::new(0);
    let parent = std::env::var_os("LISTWATCH_BENCH_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target").join("bench-data"));
    let parent = if parent.is_absolute() {
        parent
    } else {
        std::env::current_dir()
            .map_err(|e| e.to_string())?
            .join(parent)
    };
    let dir = parent.join(format!(
        "loadgen-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// rustls client configs trusting the CA of `pki` (one without ALPN, one offering `h2`).
fn tls(pki: &Path) -> Result<Tls> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let ca = pki.join("ca.crt");
    for c in CertificateDer::pem_file_iter(&ca).map_err(|e| format!("{}: {e}", ca.display()))? {
        roots
            .add(c.map_err(|e| format!("{}: {e}", ca.display()))?)
            .map_err(|e| format!("{}: {e}", ca.display()))?;
    }
    let config = || {
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.with_root_certificates(roots.clone())
                .with_no_client_auth()
        })
        .map_err(|e| e.to_string())
    };
    let h1 = config()?;
    let mut h2 = config()?;
    h2.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Tls {
        h1: tokio_rustls::TlsConnector::from(Arc::new(h1)),
        h2: tokio_rustls::TlsConnector::from(Arc::new(h2)),
    })
}

/// Starts the server build `bin` with `args` in `config`; in the realistic configuration,
/// waits until it is ready over TLS and sets up the scenario user's RBAC.
pub(crate) async fn start(bin: &Path, config: Config, args: &[&str]) -> Result<Deployed> {
    if config == Config::Easy {
        let server = Server::start_bin(bin, args)?;
        let target = Target::from(server.addr);
        return Ok(Deployed {
            server,
            target,
            fs_type: None,
            _dir: None,
        });
    }
    let dir = fresh_dir()?;
    let guard = DirGuard(dir.clone());
    let fs = fs_type(&dir);
    if fs.as_deref() == Some("tmpfs") {
        return Err(format!(
            "{} is on tmpfs: set LISTWATCH_BENCH_DATA_DIR to a directory on a real disk",
            dir.display()
        ));
    }
    let tokens = dir.join("tokens.csv");
    std::fs::write(
        &tokens,
        format!(
            "{ADMIN_TOKEN},loadgen-admin,loadgen-admin,\"system:masters\"\n\
             {USER_TOKEN},loadgen,loadgen,\"loadgen-clients\"\n"
        ),
    )
    .map_err(|e| format!("cannot write {}: {e}", tokens.display()))?;
    let (data, pki) = (dir.join("data"), dir.join("pki"));
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let (data_s, pki_s, tokens_s) = (path(&data), path(&pki), path(&tokens));
    let mut all: Vec<&str> = args.to_vec();
    all.extend([
        "--data-dir",
        &data_s,
        "--pki-dir",
        &pki_s,
        "--token-auth-file",
        &tokens_s,
        "--authorization-mode",
        "RBAC",
    ]);
    let server = Server::start_bin(bin, &all)?;
    if !server.https {
        return Err("the realistic server does not serve HTTPS".into());
    }
    let tls = Arc::new(tls(&pki)?);
    let admin = Target {
        addr: server.addr,
        tls: Some(Arc::clone(&tls)),
        token: Some(ADMIN_TOKEN.into()),
    };
    wait_ready(&admin).await?;
    let mut c = Conn::open(admin).await?;
    c.expect(
        201,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "application/json",
        br#"{"metadata":{"name":"loadgen"},"rules":[{"apiGroups":[""],"resources":["pods","namespaces"],"verbs":["get","list","watch","create","update","patch","delete"]},{"nonResourceURLs":["/metrics"],"verbs":["get"]}]}"#,
    )
    .await?;
    c.expect(
        201,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "application/json",
        br#"{"metadata":{"name":"loadgen"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"loadgen"},"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"loadgen-clients"}]}"#,
    )
    .await?;
    let target = Target {
        addr: server.addr,
        tls: Some(tls),
        token: Some(USER_TOKEN.into()),
    };
    // The binding is in effect once the user can list pods (the authorizer's cache).
    let mut u = Conn::open(target.clone()).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, body) = u
            .request("GET", "/api/v1/pods?limit=1", "application/json", b"")
            .await?;
        if code == 200 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the scenario user cannot list pods after 30 s: {code} {}",
                String::from_utf8_lossy(&body)
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And is not an administrator: reading secrets is forbidden.
    let (code, _) = u
        .request("GET", "/api/v1/secrets?limit=1", "application/json", b"")
        .await?;
    if code != 403 {
        return Err(format!(
            "the scenario user should be refused secrets (403), got {code}"
        ));
    }
    Ok(Deployed {
        server,
        target,
        fs_type: fs,
        _dir: Some(guard),
    })
}

/// `/readyz` over TLS as the admin, for at most 60 s.
async fn wait_ready(admin: &Target) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = match Conn::open(admin.clone()).await {
            Ok(mut c) => c.request("GET", "/readyz", "text/plain", b"").await,
            Err(e) => Err(e),
        };
        match answer {
            Ok((200, _)) => return Ok(()),
            other if Instant::now() > deadline => {
                return Err(format!(
                    "the realistic server is not ready after 60 s: {other:?}"
                ));
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The configurations a scenario runs in: both, unless `$LISTWATCH_BENCH_CONFIGS` names one
/// (`easy` or `realistic`).
pub(crate) fn configs() -> Vec<Config> {
    match std::env::var("LISTWATCH_BENCH_CONFIGS").as_deref() {
        Ok("easy") => vec![Config::Easy],
        Ok("realistic") => vec![Config::Realistic],
        _ => vec![Config::Easy, Config::Realistic],
    }
}

/// A note on how the realistic server was set up, for a report.
pub(crate) fn note(fs: Option<&str>) -> String {
    format!(
        "Realistic configuration: --data-dir on a {} file system (under $LISTWATCH_BENCH_DATA_DIR or \
         target/bench-data), HTTPS from --pki-dir, --token-auth-file and --authorization-mode RBAC; every \
         request carries the token of a user outside system:masters whose ClusterRole (pods, namespaces, /metrics) is \
         bound to its group; the watch clients verify the server's certificate against the generated CA.",
        fs.unwrap_or("(unknown)")
    )
}
