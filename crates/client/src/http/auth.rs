//! Request credentials: a fixed bearer token or basic auth, a token file re-read on rotation,
//! an exec credential plugin (`client.authentication.k8s.io/v1` and `v1beta1`: a token, a
//! client certificate, or both), and impersonation headers.
//!
//! Invariants:
//! - [`Auth::header`] never waits without a deadline: a token file is one small bounded
//!   read, an exec plugin runs under [`EXEC_TIMEOUT`] with its output bounded by
//!   [`MAX_EXEC_OUTPUT`] and is killed when the wait is dropped;
//! - a credential the server refused (401) is dropped by [`Auth::rejected`], so the next
//!   request re-reads the file or re-runs the plugin (client-go's `ResetTokenOlderThan` and
//!   exec authenticator's refresh on 401);
//! - an exec credential is cached until its `expirationTimestamp` (forever without one, as
//!   client-go), and one plugin run is shared by concurrent requests; a client certificate
//!   it returns is part of the [`Credential`], and the client presents it on its connections
//!   (rebuilding its connector when it changes, `client.rs`);
//! - credentials are never logged or printed by `Debug`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;
use http::header::HeaderName;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::sync::Mutex;

use crate::{Error, Result};

/// Longest wait for an exec plugin.
pub(crate) const EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest exec plugin output read (stdout; stderr is cut to a few KiB for the error).
pub(crate) const MAX_EXEC_OUTPUT: u64 = 1 << 20;
/// Largest token file read.
const MAX_TOKEN_FILE: u64 = 64 << 10;
/// A token file is re-read once its cached copy is this old (client-go's
/// `NewCachedFileTokenSource`: a 1 min period less 10 s leeway).
pub(crate) const TOKEN_FILE_PERIOD: Duration = Duration::from_secs(50);

const EXEC_V1: &str = "client.authentication.k8s.io/v1";
const EXEC_V1BETA1: &str = "client.authentication.k8s.io/v1beta1";

/// An exec credential plugin (a kubeconfig user's `exec`).
#[derive(Clone, PartialEq, Eq)]
pub struct ExecConfig {
    /// The program (looked up on `PATH` unless it holds a path separator).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// `client.authentication.k8s.io/v1` or `v1beta1`.
    pub api_version: String,
    /// `Never`, `IfAvailable` or `Always` (required for v1). This client has no terminal:
    /// `Always` is an error, the others run the plugin without standard input.
    pub interactive_mode: Option<String>,
    /// The cluster passed in `KUBERNETES_EXEC_INFO` when `provideClusterInfo` is set.
    pub cluster: Option<ExecCluster>,
}

impl std::fmt::Debug for ExecConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Environment values may be secrets.
        f.debug_struct("ExecConfig")
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("api_version", &self.api_version)
            .field("interactive_mode", &self.interactive_mode)
            .finish_non_exhaustive()
    }
}

/// The cluster an exec plugin is told about (`spec.cluster` of its input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecCluster {
    /// The server URL.
    pub server: String,
    /// The CA bundle (PEM).
    pub ca_pem: Option<Vec<u8>>,
    /// The TLS server name.
    pub tls_server_name: Option<String>,
    /// The proxy URL.
    pub proxy_url: Option<String>,
}

/// Impersonation (kubeconfig `as`, `as-uid`, `as-groups`, `as-user-extra`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Impersonate {
    /// `Impersonate-User`; required when anything else is set.
    pub user: String,
    /// `Impersonate-Uid`.
    pub uid: Option<String>,
    /// One `Impersonate-Group` header each.
    pub groups: Vec<String>,
    /// One `Impersonate-Extra-{key}` header per value.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Impersonate {
    /// The headers, validated.
    pub(crate) fn headers(&self) -> Result<Vec<(HeaderName, HeaderValue)>> {
        if self.user.is_empty() {
            return Err(Error::Config(
                "impersonating a uid, groups or extra without a user".into(),
            ));
        }
        let value = |v: &str| {
            HeaderValue::from_str(v)
                .map_err(|_| Error::Config(format!("impersonation value {v:?} is not a header")))
        };
        let mut out = vec![(
            HeaderName::from_static("impersonate-user"),
            value(&self.user)?,
        )];
        if let Some(uid) = &self.uid {
            out.push((HeaderName::from_static("impersonate-uid"), value(uid)?));
        }
        for g in &self.groups {
            out.push((HeaderName::from_static("impersonate-group"), value(g)?));
        }
        for (k, vs) in &self.extra {
            // client-go escapes the key as a URL path segment (headers are case-insensitive
            // and cannot hold every character a key may).
            let escaped: String = form_urlencoded::byte_serialize(k.as_bytes()).collect::<String>();
            let name = HeaderName::try_from(format!("impersonate-extra-{escaped}"))
                .map_err(|_| Error::Config(format!("impersonation extra key {k:?}")))?;
            for v in vs {
                out.push((name.clone(), value(v)?));
            }
        }
        Ok(out)
    }
}

/// A client certificate chain and its private key (PEM), as an exec plugin returns them.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ClientIdentity {
    pub(crate) cert_pem: Vec<u8>,
    pub(crate) key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret.
        f.debug_struct("ClientIdentity")
            .field("cert_pem", &self.cert_pem.len())
            .finish_non_exhaustive()
    }
}

/// What one request authenticates with: an `Authorization` value, a client certificate, or
/// both (an exec plugin may return both, as client-go allows).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Credential {
    pub(crate) authorization: Option<HeaderValue>,
    pub(crate) identity: Option<Arc<ClientIdentity>>,
}

impl Credential {
    fn header(v: HeaderValue) -> Self {
        Self {
            authorization: Some(v),
            identity: None,
        }
    }
}

/// How requests authenticate.
pub(crate) enum Auth {
    None,
    /// A fixed `Authorization` value (bearer token or basic).
    Fixed(HeaderValue),
    /// A bearer token read from a file, re-read every [`TOKEN_FILE_PERIOD`] and after a 401.
    File {
        path: PathBuf,
        period: Duration,
        cached: Mutex<Option<(Credential, tokio::time::Instant)>>,
    },
    /// A bearer token and/or a client certificate from an exec plugin, until its expiry.
    Exec {
        config: ExecConfig,
        cached: Mutex<Option<(Credential, Option<SystemTime>)>>,
    },
}

impl Auth {
    pub(crate) fn bearer(token: &str) -> Result<HeaderValue> {
        let mut v = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::Config("bearer token is not a valid header value".into()))?;
        v.set_sensitive(true);
        Ok(v)
    }

    pub(crate) fn basic(user: &str, password: &str) -> Result<HeaderValue> {
        let encoded = STANDARD.encode(format!("{user}:{password}"));
        let mut v = HeaderValue::from_str(&format!("Basic {encoded}"))
            .map_err(|_| Error::Config("basic auth is not a valid header value".into()))?;
        v.set_sensitive(true);
        Ok(v)
    }

    pub(crate) fn file(path: PathBuf, period: Duration) -> Self {
        Auth::File {
            path,
            period,
            cached: Mutex::new(None),
        }
    }

    pub(crate) fn exec(config: ExecConfig) -> Result<Self> {
        match config.api_version.as_str() {
            EXEC_V1 | EXEC_V1BETA1 => {}
            other => {
                return Err(Error::Config(format!(
                    "exec plugin apiVersion {other:?} is not supported (want {EXEC_V1} or {EXEC_V1BETA1})"
                )));
            }
        }
        match config.interactive_mode.as_deref() {
            None if config.api_version == EXEC_V1 => {
                return Err(Error::Config(format!(
                    "exec plugin: interactiveMode must be set for {EXEC_V1}"
                )));
            }
            None | Some("Never" | "IfAvailable") => {}
            Some("Always") => {
                return Err(Error::Config(
                    "exec plugin: interactiveMode Always needs a terminal, which this client does not have".into(),
                ));
            }
            Some(other) => {
                return Err(Error::Config(format!(
                    "exec plugin: unknown interactiveMode {other:?}"
                )));
            }
        }
        Ok(Auth::Exec {
            config,
            cached: Mutex::new(None),
        })
    }

    /// The credential of the next request.
    pub(crate) async fn credential(&self) -> Result<Credential> {
        match self {
            Auth::None => Ok(Credential::default()),
            Auth::Fixed(v) => Ok(Credential::header(v.clone())),
            Auth::File {
                path,
                period,
                cached,
            } => {
                let mut c = cached.lock().await;
                if let Some((v, at)) = &*c
                    && at.elapsed() < *period
                {
                    return Ok(v.clone());
                }
                let token = read_token_file(path).await?;
                let v = Credential::header(Self::bearer(&token)?);
                *c = Some((v.clone(), tokio::time::Instant::now()));
                Ok(v)
            }
            Auth::Exec { config, cached } => {
                // Held across the run: concurrent requests share one plugin run.
                let mut c = cached.lock().await;
                if let Some((v, expiry)) = &*c
                    && expiry.is_none_or(|e| SystemTime::now() < e)
                {
                    return Ok(v.clone());
                }
                let out = run_exec(config).await?;
                let v = Credential {
                    authorization: match &out.token {
                        Some(t) => Some(Self::bearer(t)?),
                        None => None,
                    },
                    identity: out.identity.map(Arc::new),
                };
                *c = Some((v.clone(), out.expiry));
                Ok(v)
            }
        }
    }

    /// The server refused `sent` (401): drop it so the next request gets a fresh one.
    /// Returns whether a fresh credential may differ (worth one retry).
    pub(crate) async fn rejected(&self, sent: &Credential) -> bool {
        let cached = match self {
            Auth::None | Auth::Fixed(_) => return false,
            Auth::File { cached, .. } => {
                let mut c = cached.lock().await;
                drop_if_sent(&mut c, sent)
            }
            Auth::Exec { cached, .. } => {
                let mut c = cached.lock().await;
                drop_if_sent(&mut c, sent)
            }
        };
        tracing::debug!(dropped = cached, "credential refused (401), refreshing");
        true
    }
}

fn drop_if_sent<T>(c: &mut Option<(Credential, T)>, sent: &Credential) -> bool {
    if c.as_ref().is_some_and(|(v, _)| v == sent) {
        *c = None;
        return true;
    }
    false
}

async fn read_token_file(path: &PathBuf) -> Result<String> {
    let file = tokio::fs::File::open(path)
        .await
        .map_err(|e| Error::Config(format!("cannot read token file {}: {e}", path.display())))?;
    let mut buf = String::new();
    file.take(MAX_TOKEN_FILE)
        .read_to_string(&mut buf)
        .await
        .map_err(|e| Error::Config(format!("cannot read token file {}: {e}", path.display())))?;
    let token = buf.trim();
    if token.is_empty() {
        return Err(Error::Config(format!(
            "token file {} is empty",
            path.display()
        )));
    }
    Ok(token.to_owned())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecCredential {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    status: Option<ExecStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecStatus {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    expiration_timestamp: Option<String>,
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
}

/// What an exec plugin returned.
struct ExecOutput {
    token: Option<String>,
    identity: Option<ClientIdentity>,
    expiry: Option<SystemTime>,
}

fn exec_input(config: &ExecConfig) -> String {
    let mut spec = serde_json::json!({ "interactive": false });
    if let Some(c) = &config.cluster {
        let mut cluster = serde_json::json!({ "server": c.server });
        if let Some(ca) = &c.ca_pem {
            cluster["certificate-authority-data"] = STANDARD.encode(ca).into();
        }
        if let Some(n) = &c.tls_server_name {
            cluster["tls-server-name"] = n.clone().into();
        }
        if let Some(p) = &c.proxy_url {
            cluster["proxy-url"] = p.clone().into();
        }
        spec["cluster"] = cluster;
    }
    serde_json::json!({
        "apiVersion": config.api_version,
        "kind": "ExecCredential",
        "spec": spec,
    })
    .to_string()
}

/// Runs the plugin; its token and/or client certificate, and their expiry.
async fn run_exec(config: &ExecConfig) -> Result<ExecOutput> {
    let err = |m: String| Error::Config(format!("exec plugin {:?}: {m}", config.command));
    let mut child = tokio::process::Command::new(&config.command)
        .args(&config.args)
        .envs(config.env.iter().map(|(k, v)| (k, v)))
        .env("KUBERNETES_EXEC_INFO", exec_input(config))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| err(format!("cannot start: {e}")))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(err("no pipes".into()));
    };
    let run = async {
        let stdout = async move {
            let mut out = Vec::new();
            stdout
                .take(MAX_EXEC_OUTPUT + 1)
                .read_to_end(&mut out)
                .await
                .map(|_| out)
        };
        // stderr: the first 4 KiB kept for the error, the rest drained so the plugin never
        // blocks on it.
        let stderr = async move {
            let mut stderr = stderr;
            let mut buf = Vec::new();
            (&mut stderr).take(4096).read_to_end(&mut buf).await.ok();
            tokio::io::copy(&mut stderr, &mut tokio::io::sink())
                .await
                .ok();
            buf
        };
        tokio::pin!(stdout, stderr);
        let mut errout = None;
        let out = loop {
            tokio::select! {
                r = &mut stdout => break r,
                e = &mut stderr, if errout.is_none() => errout = Some(e),
            }
        };
        let out = out.map_err(|e| err(format!("reading its output: {e}")))?;
        if out.len() as u64 > MAX_EXEC_OUTPUT {
            // Dropping the child kills it.
            return Err(err(format!("output larger than {MAX_EXEC_OUTPUT} bytes")));
        }
        let errout = match errout {
            Some(e) => e,
            None => stderr.await,
        };
        let status = child
            .wait()
            .await
            .map_err(|e| err(format!("waiting for it: {e}")))?;
        Ok::<_, Error>((out, errout, status))
    };
    let (out, errout, status) = tokio::time::timeout(EXEC_TIMEOUT, run)
        .await
        .map_err(|_| err(format!("no answer within {EXEC_TIMEOUT:?}")))??;
    if !status.success() {
        return Err(err(format!(
            "{status}: {}",
            String::from_utf8_lossy(&errout).trim()
        )));
    }
    let cred: ExecCredential = serde_json::from_slice(&out)
        .map_err(|e| err(format!("output is not an ExecCredential: {e}")))?;
    if cred.kind != "ExecCredential" || cred.api_version != config.api_version {
        return Err(err(format!(
            "output is {}/{}, want {}/ExecCredential",
            cred.api_version, cred.kind, config.api_version
        )));
    }
    let status = cred
        .status
        .ok_or_else(|| err("output has no status".into()))?;
    // client-go's exec authenticator: a token, a certificate and key (PEM, not base64), or
    // both; a certificate without its key (or a key without its certificate) is an error.
    let token = status.token.filter(|t| !t.is_empty());
    let identity = match (
        status.client_certificate_data.filter(|c| !c.is_empty()),
        status.client_key_data.filter(|k| !k.is_empty()),
    ) {
        (Some(cert), Some(key)) => Some(checked_identity(cert, key).map_err(err)?),
        (None, None) => None,
        _ => {
            return Err(err(
                "returned only a client certificate or only its key, not both".into(),
            ));
        }
    };
    if token.is_none() && identity.is_none() {
        return Err(err("returned neither a token nor a certificate".into()));
    }
    let expiry = match status.expiration_timestamp.filter(|t| !t.is_empty()) {
        Some(t) => {
            let at =
                time::OffsetDateTime::parse(&t, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| err(format!("expirationTimestamp {t:?}: {e}")))?;
            Some(SystemTime::from(at))
        }
        None => None,
    };
    Ok(ExecOutput {
        token,
        identity,
        expiry,
    })
}

/// A certificate chain and key as PEM blocks of the kinds TLS needs (checked here so that a
/// plugin's garbage is an error naming the plugin, not a failed handshake later).
fn checked_identity(cert: String, key: String) -> std::result::Result<ClientIdentity, String> {
    let blocks = |pem: &str| -> Vec<String> {
        pem.lines()
            .filter_map(|l| l.trim().strip_prefix("-----BEGIN "))
            .filter_map(|l| l.strip_suffix("-----"))
            .map(str::to_owned)
            .collect()
    };
    let certs = blocks(&cert);
    if certs.is_empty() || certs.iter().any(|b| b != "CERTIFICATE") {
        return Err("clientCertificateData is not a PEM certificate chain".into());
    }
    match blocks(&key).as_slice() {
        [k] if k == "PRIVATE KEY" || k == "EC PRIVATE KEY" || k == "RSA PRIVATE KEY" => {}
        _ => return Err("clientKeyData is not one PEM private key".into()),
    }
    Ok(ClientIdentity {
        cert_pem: cert.into_bytes(),
        key_pem: key.into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Auth {
        /// The `Authorization` value of the next request.
        async fn header(&self) -> Result<Option<HeaderValue>> {
            Ok(self.credential().await?.authorization)
        }
    }

    fn sent(h: &HeaderValue) -> Credential {
        Credential::header(h.clone())
    }

    fn script(dir: &std::path::Path, body: &str) -> String {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("plugin.sh");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn exec(command: String) -> ExecConfig {
        ExecConfig {
            command,
            args: vec![],
            env: vec![],
            api_version: EXEC_V1.into(),
            interactive_mode: Some("Never".into()),
            cluster: None,
        }
    }

    #[tokio::test]
    async fn an_exec_token_is_cached_until_it_expires_and_refreshed_after_a_401() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        // Each run appends a line and answers with a token named after the run; the first
        // two tokens expire in the past (run 1) / far future (runs 2+).
        let body = format!(
            r#"echo x >> {c}; n=$(wc -l < {c} | tr -d ' ')
if [ "$n" = 1 ]; then exp=2000-01-01T00:00:00Z; else exp=2999-01-01T00:00:00Z; fi
echo "$KUBERNETES_EXEC_INFO" > {d}/input
printf '{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{{"token":"t%s","expirationTimestamp":"%s"}}}}' "$n" "$exp""#,
            c = count.display(),
            d = dir.path().display()
        );
        let auth = Auth::exec(exec(script(dir.path(), &body))).unwrap();
        let h1 = auth.header().await.unwrap().unwrap();
        assert_eq!(h1.to_str().unwrap(), "Bearer t1");
        // Expired at once: the next request runs the plugin again.
        let h2 = auth.header().await.unwrap().unwrap();
        assert_eq!(h2.to_str().unwrap(), "Bearer t2");
        // Cached now.
        for _ in 0..3 {
            assert_eq!(auth.header().await.unwrap().unwrap(), h2);
        }
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 2);
        // A 401 drops it; a stale 401 (for an older credential) does not.
        assert!(auth.rejected(&sent(&h1)).await);
        assert_eq!(auth.header().await.unwrap().unwrap(), h2);
        assert!(auth.rejected(&sent(&h2)).await);
        assert_eq!(
            auth.header().await.unwrap().unwrap().to_str().unwrap(),
            "Bearer t3"
        );
        let input: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("input")).unwrap())
                .unwrap();
        assert_eq!(input["kind"], "ExecCredential");
        assert_eq!(input["apiVersion"], EXEC_V1);
        assert_eq!(input["spec"]["interactive"], false);
    }

    #[tokio::test]
    async fn exec_failures_are_errors_never_anonymous() {
        let dir = tempfile::tempdir().unwrap();
        for (body, want) in [
            ("echo boom >&2; exit 3", "boom"),
            ("echo not json", "not an ExecCredential"),
            (
                r#"echo '{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}'"#,
                "want client.authentication.k8s.io/v1",
            ),
            (
                r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"x","clientKeyData":"y"}}'"#,
                "not a PEM certificate chain",
            ),
            (
                r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"-----BEGIN CERTIFICATE-----\\nAA==\\n-----END CERTIFICATE-----\\n"}}'"#,
                "not both",
            ),
            (
                r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientKeyData":"k"}}'"#,
                "not both",
            ),
            (
                r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientCertificateData":"-----BEGIN CERTIFICATE-----\\nAA==\\n-----END CERTIFICATE-----\\n","clientKeyData":"-----BEGIN CERTIFICATE-----\\nAA==\\n-----END CERTIFICATE-----\\n"}}'"#,
                "not one PEM private key",
            ),
            (
                r#"echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}'"#,
                "neither a token nor a certificate",
            ),
            ("head -c 2000000 /dev/zero", "larger than"),
        ] {
            let auth = Auth::exec(exec(script(dir.path(), body))).unwrap();
            let e = auth.header().await.unwrap_err().to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
        let mut missing = exec("/nonexistent/plugin".into());
        assert!(Auth::exec(missing.clone()).unwrap().header().await.is_err());
        missing.interactive_mode = Some("Always".into());
        assert!(Auth::exec(missing.clone()).is_err());
        missing.interactive_mode = None;
        assert!(
            Auth::exec(missing.clone()).is_err(),
            "v1 needs interactiveMode"
        );
        missing.api_version = "client.authentication.k8s.io/v1alpha1".into();
        assert!(Auth::exec(missing).is_err());
    }

    #[tokio::test]
    async fn an_exec_certificate_is_part_of_the_credential_cached_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let count = dir.path().join("count");
        // Run 1: certificate "one", already expired; run 2: certificate "two" and a token,
        // far in the future. v1beta1, which needs no interactiveMode.
        let body = format!(
            r#"echo x >> {c}; n=$(wc -l < {c} | tr -d ' ')
if [ "$n" = 1 ]; then exp=2000-01-01T00:00:00Z; tok=; else exp=2999-01-01T00:00:00Z; tok=t2; fi
printf '{{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{{"token":"%s","clientCertificateData":"-----BEGIN CERTIFICATE-----\\n%s\\n-----END CERTIFICATE-----\\n","clientKeyData":"-----BEGIN PRIVATE KEY-----\\nk%s\\n-----END PRIVATE KEY-----\\n","expirationTimestamp":"%s"}}}}' "$tok" "$n" "$n" "$exp""#,
            c = count.display()
        );
        let mut config = exec(script(dir.path(), &body));
        config.api_version = EXEC_V1BETA1.into();
        config.interactive_mode = None;
        let auth = Auth::exec(config).unwrap();
        let one = auth.credential().await.unwrap();
        assert_eq!(one.authorization, None, "no token in run 1");
        let id = one.identity.as_ref().unwrap();
        assert!(String::from_utf8_lossy(&id.cert_pem).contains("\n1\n"));
        assert!(String::from_utf8_lossy(&id.key_pem).contains("k1"));
        assert!(
            !format!("{id:?}").contains("k1"),
            "the key is never printed"
        );
        let two = auth.credential().await.unwrap();
        assert_ne!(two, one, "expired: the plugin ran again");
        assert_eq!(
            two.authorization.as_ref().unwrap().to_str().unwrap(),
            "Bearer t2"
        );
        assert!(
            String::from_utf8_lossy(&two.identity.as_ref().unwrap().cert_pem).contains("\n2\n")
        );
        for _ in 0..3 {
            assert_eq!(auth.credential().await.unwrap(), two, "cached");
        }
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 2);
        // A 401 drops it, certificate and all.
        assert!(auth.rejected(&two).await);
        assert_ne!(auth.credential().await.unwrap(), two);
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_file_is_re_read_after_its_period_and_after_a_401() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one\n").unwrap();
        let auth = Auth::file(path.clone(), TOKEN_FILE_PERIOD);
        let one = auth.header().await.unwrap().unwrap();
        assert_eq!(one.to_str().unwrap(), "Bearer one");
        std::fs::write(&path, "two").unwrap();
        assert_eq!(auth.header().await.unwrap().unwrap(), one, "cached");
        tokio::time::advance(TOKEN_FILE_PERIOD).await;
        let two = auth.header().await.unwrap().unwrap();
        assert_eq!(two.to_str().unwrap(), "Bearer two", "rotated");
        std::fs::write(&path, "three").unwrap();
        assert!(auth.rejected(&sent(&two)).await);
        assert_eq!(
            auth.header().await.unwrap().unwrap().to_str().unwrap(),
            "Bearer three"
        );
        std::fs::write(&path, "").unwrap();
        tokio::time::advance(TOKEN_FILE_PERIOD).await;
        assert!(auth.header().await.is_err(), "an empty file is an error");
    }

    #[test]
    fn impersonation_headers_as_client_go() {
        let imp = Impersonate {
            user: "jane".into(),
            uid: Some("42".into()),
            groups: vec!["a".into(), "b".into()],
            extra: BTreeMap::from([("scopes/x".into(), vec!["v1".into(), "v2".into()])]),
        };
        let h: Vec<(String, String)> = imp
            .headers()
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_owned()))
            .collect();
        let pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("impersonate-user", "jane"),
                ("impersonate-uid", "42"),
                ("impersonate-group", "a"),
                ("impersonate-group", "b"),
                ("impersonate-extra-scopes%2fx", "v1"),
                ("impersonate-extra-scopes%2fx", "v2"),
            ]
        );
        let no_user = Impersonate {
            groups: vec!["a".into()],
            ..Impersonate::default()
        };
        assert!(no_user.headers().is_err());
    }
}
