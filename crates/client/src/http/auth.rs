//! Request credentials: a fixed bearer token or basic auth, a token file re-read on rotation,
//! an exec credential plugin (`client.authentication.k8s.io/v1`), and impersonation headers.
//!
//! Invariants:
//! - [`Auth::header`] never waits without a deadline: a token file is one small bounded
//!   read, an exec plugin runs under [`EXEC_TIMEOUT`] with its output bounded by
//!   [`MAX_EXEC_OUTPUT`] and is killed when the wait is dropped;
//! - a credential the server refused (401) is dropped by [`Auth::rejected`], so the next
//!   request re-reads the file or re-runs the plugin (client-go's `ResetTokenOlderThan` and
//!   exec authenticator's refresh on 401);
//! - an exec credential is cached until its `expirationTimestamp` (forever without one, as
//!   client-go), and one plugin run is shared by concurrent requests;
//! - credentials are never logged or printed by `Debug`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;
use http::header::HeaderName;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::sync::Mutex;

use crate::error::{Error, Result};

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

/// How requests authenticate.
pub(crate) enum Auth {
    None,
    /// A fixed `Authorization` value (bearer token or basic).
    Fixed(HeaderValue),
    /// A bearer token read from a file, re-read every [`TOKEN_FILE_PERIOD`] and after a 401.
    File {
        path: PathBuf,
        period: Duration,
        cached: Mutex<Option<(HeaderValue, tokio::time::Instant)>>,
    },
    /// A bearer token from an exec plugin.
    Exec {
        config: ExecConfig,
        cached: Mutex<Option<(HeaderValue, Option<SystemTime>)>>,
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

    /// The `Authorization` value for the next request.
    pub(crate) async fn header(&self) -> Result<Option<HeaderValue>> {
        match self {
            Auth::None => Ok(None),
            Auth::Fixed(v) => Ok(Some(v.clone())),
            Auth::File {
                path,
                period,
                cached,
            } => {
                let mut c = cached.lock().await;
                if let Some((v, at)) = &*c {
                    if at.elapsed() < *period {
                        return Ok(Some(v.clone()));
                    }
                }
                let token = read_token_file(path).await?;
                let v = Self::bearer(&token)?;
                *c = Some((v.clone(), tokio::time::Instant::now()));
                Ok(Some(v))
            }
            Auth::Exec { config, cached } => {
                // Held across the run: concurrent requests share one plugin run.
                let mut c = cached.lock().await;
                if let Some((v, expiry)) = &*c {
                    if expiry.is_none_or(|e| SystemTime::now() < e) {
                        return Ok(Some(v.clone()));
                    }
                }
                let (token, expiry) = run_exec(config).await?;
                let v = Self::bearer(&token)?;
                *c = Some((v.clone(), expiry));
                Ok(Some(v))
            }
        }
    }

    /// The server refused `sent` (401): drop it so the next request gets a fresh one.
    /// Returns whether a fresh credential may differ (worth one retry).
    pub(crate) async fn rejected(&self, sent: Option<&HeaderValue>) -> bool {
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

fn drop_if_sent<T>(c: &mut Option<(HeaderValue, T)>, sent: Option<&HeaderValue>) -> bool {
    if c.as_ref().is_some_and(|(v, _)| Some(v) == sent) {
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

/// Runs the plugin; its token and expiry.
async fn run_exec(config: &ExecConfig) -> Result<(String, Option<SystemTime>)> {
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
    let token = match (
        status.token.filter(|t| !t.is_empty()),
        status.client_certificate_data,
    ) {
        (Some(t), _) => t,
        (None, Some(_)) => {
            return Err(err(
                "returned a client certificate; only token credentials are supported".into(),
            ));
        }
        (None, None) => return Err(err("returned neither a token nor a certificate".into())),
    };
    let expiry = match status.expiration_timestamp.filter(|t| !t.is_empty()) {
        Some(t) => {
            let at =
                time::OffsetDateTime::parse(&t, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| err(format!("expirationTimestamp {t:?}: {e}")))?;
            Some(SystemTime::from(at))
        }
        None => None,
    };
    Ok((token, expiry))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(auth.rejected(Some(&h1)).await);
        assert_eq!(auth.header().await.unwrap().unwrap(), h2);
        assert!(auth.rejected(Some(&h2)).await);
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
                "only token credentials",
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
        assert!(auth.rejected(Some(&two)).await);
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
