//! The part of a kubeconfig file the client reads: the current context's cluster (server,
//! CA) and user (bearer token or client certificate).
//!
//! File references (`certificate-authority`, `client-certificate`, `client-key`,
//! `tokenFile`) are resolved relative to the kubeconfig's directory, as kubectl does.

use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Kubeconfig {
    #[serde(default)]
    current_context: String,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    value: T,
}

#[derive(Debug, Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    #[serde(default)]
    certificate_authority: Option<String>,
    #[serde(default)]
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct User {
    #[serde(default)]
    token: Option<String>,
    #[serde(default, rename = "tokenFile")]
    token_file: Option<String>,
    #[serde(default)]
    client_certificate: Option<String>,
    #[serde(default)]
    client_certificate_data: Option<String>,
    #[serde(default)]
    client_key: Option<String>,
    #[serde(default)]
    client_key_data: Option<String>,
}

/// What a kubeconfig's current context says about how to reach the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub(crate) server: String,
    pub(crate) namespace: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) client_cert_pem: Option<Vec<u8>>,
    pub(crate) client_key_pem: Option<Vec<u8>>,
}

fn cfg_err(msg: impl Into<String>) -> Error {
    Error::Config(format!("kubeconfig: {}", msg.into()))
}

fn data_or_file(
    data: Option<&str>,
    file: Option<&str>,
    dir: &Path,
    what: &str,
) -> Result<Option<Vec<u8>>> {
    if let Some(d) = data {
        return STANDARD
            .decode(d.trim())
            .map(Some)
            .map_err(|e| cfg_err(format!("{what}-data is not base64: {e}")));
    }
    match file {
        Some(f) => {
            let path = resolve(dir, f);
            std::fs::read(&path)
                .map(Some)
                .map_err(|e| cfg_err(format!("cannot read {what} {}: {e}", path.display())))
        }
        None => Ok(None),
    }
}

fn resolve(dir: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// Parses kubeconfig YAML; `dir` is where relative file references point.
pub(crate) fn resolve_current(yaml: &str, dir: &Path) -> Result<Resolved> {
    let kc: Kubeconfig = serde_yaml::from_str(yaml).map_err(|e| cfg_err(e.to_string()))?;
    if kc.current_context.is_empty() {
        return Err(cfg_err("no current-context"));
    }
    let ctx = kc
        .contexts
        .iter()
        .find(|c| c.name == kc.current_context)
        .map(|c| &c.value)
        .ok_or_else(|| cfg_err(format!("context {:?} not found", kc.current_context)))?;
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .map(|c| &c.value)
        .ok_or_else(|| cfg_err(format!("cluster {:?} not found", ctx.cluster)))?;
    if cluster.insecure_skip_tls_verify {
        return Err(cfg_err(
            "insecure-skip-tls-verify is not supported; give the cluster's CA",
        ));
    }
    let default_user = User::default();
    let user = if ctx.user.is_empty() {
        &default_user
    } else {
        kc.users
            .iter()
            .find(|u| u.name == ctx.user)
            .map(|u| &u.value)
            .ok_or_else(|| cfg_err(format!("user {:?} not found", ctx.user)))?
    };
    let token = match (&user.token, &user.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => {
            let path = resolve(dir, f);
            Some(
                std::fs::read_to_string(&path)
                    .map_err(|e| cfg_err(format!("cannot read tokenFile {}: {e}", path.display())))?
                    .trim()
                    .to_owned(),
            )
        }
        (None, None) => None,
    };
    Ok(Resolved {
        server: cluster.server.clone(),
        namespace: ctx.namespace.clone().filter(|n| !n.is_empty()),
        token,
        ca_pem: data_or_file(
            cluster.certificate_authority_data.as_deref(),
            cluster.certificate_authority.as_deref(),
            dir,
            "certificate-authority",
        )?,
        client_cert_pem: data_or_file(
            user.client_certificate_data.as_deref(),
            user.client_certificate.as_deref(),
            dir,
            "client-certificate",
        )?,
        client_key_pem: data_or_file(
            user.client_key_data.as_deref(),
            user.client_key.as_deref(),
            dir,
            "client-key",
        )?,
    })
}

/// `$KUBECONFIG` (its first entry) or `~/.kube/config`.
pub(crate) fn default_path() -> Option<PathBuf> {
    if let Some(v) = std::env::var_os("KUBECONFIG") {
        if let Some(first) = std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty()) {
            return Some(first);
        }
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".kube").join("config"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = r#"
apiVersion: v1
kind: Config
current-context: dev
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: dev
  context:
    cluster: local
    user: admin
    namespace: team-a
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Q0EtUEVN
users:
- name: admin
  user:
    token: s3cret
"#;

    #[test]
    fn current_context_selects_cluster_user_and_namespace() {
        let r = resolve_current(KUBECONFIG, Path::new("/nonexistent")).unwrap();
        assert_eq!(r.server, "https://127.0.0.1:6443");
        assert_eq!(r.namespace.as_deref(), Some("team-a"));
        assert_eq!(r.token.as_deref(), Some("s3cret"));
        assert_eq!(r.ca_pem.as_deref(), Some(&b"CA-PEM"[..]));
        assert_eq!(r.client_cert_pem, None);
    }

    #[test]
    fn relative_files_resolve_against_the_kubeconfig_directory() {
        let dir = std::env::temp_dir().join(format!("lw-kubeconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), b"FILE-CA").unwrap();
        std::fs::write(dir.join("token"), b"tok\n").unwrap();
        let yaml = KUBECONFIG
            .replace(
                "certificate-authority-data: Q0EtUEVN",
                "certificate-authority: ca.pem",
            )
            .replace("token: s3cret", "tokenFile: token");
        let r = resolve_current(&yaml, &dir).unwrap();
        assert_eq!(r.ca_pem.as_deref(), Some(&b"FILE-CA"[..]));
        assert_eq!(r.token.as_deref(), Some("tok"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn missing_pieces_are_configuration_errors() {
        let no_ctx = KUBECONFIG.replace("current-context: dev", "current-context: gone");
        assert!(
            matches!(resolve_current(&no_ctx, Path::new("/")), Err(Error::Config(m)) if m.contains("gone"))
        );
        assert!(resolve_current("::not yaml", Path::new("/")).is_err());
        let insecure = KUBECONFIG.replace(
            "certificate-authority-data: Q0EtUEVN",
            "insecure-skip-tls-verify: true",
        );
        assert!(resolve_current(&insecure, Path::new("/")).is_err());
    }
}
