//! The part of kubeconfig files the client reads: the current context's cluster (server, CA,
//! `tls-server-name`, `proxy-url`) and user (token, `tokenFile`, client certificate,
//! username/password, `exec` plugin, impersonation).
//!
//! Invariants, as kubectl (client-go `clientcmd`):
//! - several files (a `KUBECONFIG` list) merge so that the first file to name a cluster, user
//!   or context wins it, and the first file with a `current-context` sets it; files in the
//!   list that do not exist are skipped, but a list with none is an error;
//! - file references (`certificate-authority`, `client-certificate`, `client-key`,
//!   `tokenFile`, an `exec` command with a path separator) are resolved relative to the
//!   directory of the file that holds the stanza;
//! - a user stanza with a mechanism this client does not implement (`auth-provider`) is an
//!   error, never an anonymous client;
//! - a cluster names one `server`, as upstream's; further servers of the same cluster (for
//!   failover) come from the cluster extension [`FAILOVER_EXTENSION`], which kubectl and
//!   client-go ignore, at most 64 of them; other extensions are not read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use super::auth::{ExecConfig, Impersonate};
use crate::{Error, Result};

#[derive(Debug, Default, Deserialize)]
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

#[derive(Debug, Clone, Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    server: String,
    #[serde(default)]
    certificate_authority: Option<String>,
    #[serde(default)]
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    #[serde(default)]
    disable_compression: bool,
    #[serde(default)]
    tls_server_name: Option<String>,
    #[serde(default)]
    proxy_url: Option<String>,
    /// Named extensions (client-go keeps them opaque; minikube and others put their own
    /// data here, and kubectl ignores what it does not know).
    #[serde(default)]
    extensions: Vec<NamedExtension>,
}

/// A cluster's `extensions` item.
#[derive(Debug, Clone, Deserialize)]
struct NamedExtension {
    name: String,
    #[serde(default)]
    extension: serde_json::Value,
}

/// The cluster extension listing further servers of the cluster, tried after `server` when a
/// connection fails: `{name: listwatch.dev/failover-servers, extension: {servers: [url, ..]}}`.
/// kubectl and client-go ignore it and use `server` alone.
pub(crate) const FAILOVER_EXTENSION: &str = "listwatch.dev/failover-servers";

/// The most servers read from the failover extension.
const MAX_FAILOVER_SERVERS: usize = 64;

impl Cluster {
    /// The failover extension's servers, in order.
    fn failover_servers(&self) -> Result<Vec<String>> {
        let Some(ext) = self
            .extensions
            .iter()
            .find(|e| e.name == FAILOVER_EXTENSION)
        else {
            return Ok(Vec::new());
        };
        let servers = ext
            .extension
            .get("servers")
            .and_then(serde_json::Value::as_array)
            .ok_or_else(|| {
                cfg_err(format!(
                    "extension {FAILOVER_EXTENSION} needs `servers`, a list of URLs"
                ))
            })?;
        if servers.len() > MAX_FAILOVER_SERVERS {
            return Err(cfg_err(format!(
                "extension {FAILOVER_EXTENSION}: more than {MAX_FAILOVER_SERVERS} servers"
            )));
        }
        servers
            .iter()
            .map(|v| {
                v.as_str().map(str::to_owned).ok_or_else(|| {
                    cfg_err(format!(
                        "extension {FAILOVER_EXTENSION}: a server is not a string"
                    ))
                })
            })
            .collect()
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
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
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    exec: Option<Exec>,
    #[serde(default)]
    auth_provider: Option<AuthProvider>,
    #[serde(default, rename = "as")]
    impersonate: Option<String>,
    #[serde(default, rename = "as-uid")]
    impersonate_uid: Option<String>,
    #[serde(default, rename = "as-groups")]
    impersonate_groups: Vec<String>,
    #[serde(default, rename = "as-user-extra")]
    impersonate_extra: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
struct AuthProvider {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Exec {
    command: String,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<EnvVar>,
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    interactive_mode: Option<String>,
    #[serde(default)]
    provide_cluster_info: bool,
}

#[derive(Debug, Clone, Deserialize)]
struct EnvVar {
    name: String,
    value: String,
}

/// What the merged kubeconfig's current context says about how to reach the server.
#[derive(Debug, Clone, Default)]
pub(crate) struct Resolved {
    pub(crate) server: String,
    /// Further servers from the cluster's [`FAILOVER_EXTENSION`].
    pub(crate) failover_servers: Vec<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) token: Option<String>,
    pub(crate) token_file: Option<PathBuf>,
    pub(crate) basic: Option<(String, String)>,
    pub(crate) exec: Option<ExecConfig>,
    pub(crate) impersonate: Option<Impersonate>,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) client_cert_pem: Option<Vec<u8>>,
    pub(crate) client_key_pem: Option<Vec<u8>>,
    pub(crate) tls_server_name: Option<String>,
    pub(crate) proxy_url: Option<String>,
    /// `insecure-skip-tls-verify`.
    pub(crate) insecure_skip_tls_verify: bool,
    /// `disable-compression`.
    pub(crate) disable_compression: bool,
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
    if let Some(d) = data.filter(|d| !d.is_empty()) {
        return STANDARD
            .decode(d.trim())
            .map(Some)
            .map_err(|e| cfg_err(format!("{what}-data is not base64: {e}")));
    }
    match file.filter(|f| !f.is_empty()) {
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

/// Several kubeconfig files merged as kubectl merges a `KUBECONFIG` list.
#[derive(Debug, Default)]
pub(crate) struct Merged {
    current_context: String,
    contexts: BTreeMap<String, Context>,
    clusters: BTreeMap<String, (Cluster, PathBuf)>,
    users: BTreeMap<String, (User, PathBuf)>,
}

impl Merged {
    /// Adds one file's YAML; `dir` is where its relative file references point. Entries
    /// already named by an earlier file are kept (the first file wins).
    pub(crate) fn add(&mut self, yaml: &str, dir: &Path) -> Result<()> {
        // An empty file is a valid, empty kubeconfig.
        let kc: Kubeconfig = if yaml.trim().is_empty() {
            Kubeconfig::default()
        } else {
            // serde-saphyr: maintained, with budgets (serde_yaml is deprecated).
            serde_saphyr::from_str(yaml).map_err(|e| cfg_err(e.to_string()))?
        };
        if self.current_context.is_empty() {
            self.current_context = kc.current_context;
        }
        for c in kc.contexts {
            self.contexts.entry(c.name).or_insert(c.value);
        }
        for c in kc.clusters {
            self.clusters
                .entry(c.name)
                .or_insert_with(|| (c.value, dir.to_path_buf()));
        }
        for u in kc.users {
            self.users
                .entry(u.name)
                .or_insert_with(|| (u.value, dir.to_path_buf()));
        }
        Ok(())
    }

    /// Nothing at all: no current context, context, cluster or user.
    fn is_empty(&self) -> bool {
        self.current_context.is_empty()
            && self.contexts.is_empty()
            && self.clusters.is_empty()
            && self.users.is_empty()
    }

    /// Resolves the current context.
    pub(crate) fn resolve(&self) -> Result<Resolved> {
        if self.current_context.is_empty() {
            return Err(cfg_err("no current-context"));
        }
        let ctx = self
            .contexts
            .get(&self.current_context)
            .ok_or_else(|| cfg_err(format!("context {:?} not found", self.current_context)))?;
        let (cluster, cluster_dir) = self
            .clusters
            .get(&ctx.cluster)
            .ok_or_else(|| cfg_err(format!("cluster {:?} not found", ctx.cluster)))?;
        let default_user = (User::default(), PathBuf::new());
        let (user, user_dir) = if ctx.user.is_empty() {
            &default_user
        } else {
            self.users
                .get(&ctx.user)
                .ok_or_else(|| cfg_err(format!("user {:?} not found", ctx.user)))?
        };
        if let Some(p) = &user.auth_provider {
            return Err(cfg_err(format!(
                "user {:?}: auth-provider {:?} is not supported (use an exec credential plugin)",
                ctx.user, p.name
            )));
        }
        let ca_pem = data_or_file(
            cluster.certificate_authority_data.as_deref(),
            cluster.certificate_authority.as_deref(),
            cluster_dir,
            "certificate-authority",
        )?;
        let exec = user.exec.as_ref().map(|e| ExecConfig {
            // client-go resolves a command with a path separator against the file's dir.
            command: if e.command.contains(std::path::MAIN_SEPARATOR) {
                resolve(user_dir, &e.command).to_string_lossy().into_owned()
            } else {
                e.command.clone()
            },
            args: e.args.clone(),
            env: e
                .env
                .iter()
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect(),
            api_version: e.api_version.clone(),
            interactive_mode: e.interactive_mode.clone(),
            cluster: e.provide_cluster_info.then(|| super::auth::ExecCluster {
                server: cluster.server.clone(),
                ca_pem: ca_pem.clone(),
                tls_server_name: cluster.tls_server_name.clone(),
                proxy_url: cluster.proxy_url.clone(),
            }),
        });
        let impersonate = if user.impersonate.is_some()
            || user.impersonate_uid.is_some()
            || !user.impersonate_groups.is_empty()
            || !user.impersonate_extra.is_empty()
        {
            Some(Impersonate {
                user: user.impersonate.clone().unwrap_or_default(),
                uid: user.impersonate_uid.clone(),
                groups: user.impersonate_groups.clone(),
                extra: user.impersonate_extra.clone(),
            })
        } else {
            None
        };
        let basic = match (&user.username, &user.password) {
            (Some(u), p) if !u.is_empty() => Some((u.clone(), p.clone().unwrap_or_default())),
            _ => None,
        };
        Ok(Resolved {
            server: cluster.server.clone(),
            failover_servers: cluster.failover_servers()?,
            namespace: ctx.namespace.clone().filter(|n| !n.is_empty()),
            token: user.token.clone().filter(|t| !t.is_empty()),
            token_file: user
                .token_file
                .as_deref()
                .filter(|f| !f.is_empty())
                .map(|f| resolve(user_dir, f)),
            basic,
            exec,
            impersonate,
            ca_pem,
            client_cert_pem: data_or_file(
                user.client_certificate_data.as_deref(),
                user.client_certificate.as_deref(),
                user_dir,
                "client-certificate",
            )?,
            client_key_pem: data_or_file(
                user.client_key_data.as_deref(),
                user.client_key.as_deref(),
                user_dir,
                "client-key",
            )?,
            tls_server_name: cluster.tls_server_name.clone().filter(|n| !n.is_empty()),
            proxy_url: cluster.proxy_url.clone().filter(|u| !u.is_empty()),
            insecure_skip_tls_verify: cluster.insecure_skip_tls_verify,
            disable_compression: cluster.disable_compression,
        })
    }
}

/// Parses one kubeconfig's YAML and resolves its current context.
pub(crate) fn resolve_current(yaml: &str, dir: &Path) -> Result<Resolved> {
    let mut m = Merged::default();
    m.add(yaml, dir)?;
    m.resolve()
}

/// Reads and merges `paths` in order (kubectl's `KUBECONFIG` list); missing files are
/// skipped, unreadable or malformed ones are errors.
pub(crate) fn load_merged(paths: &[PathBuf]) -> Result<Resolved> {
    read_merged(paths)?.resolve()
}

/// Like [`load_merged`], but `None` when no file exists or the files merged are empty (no
/// current context, context, cluster or user: an empty `~/.kube/config` in an image, a
/// `KUBECONFIG` naming an empty mount). client-go's deferred loading treats that as no
/// kubeconfig (`ErrEmptyConfig`) and goes on to the in-cluster configuration.
pub(crate) fn load_merged_unless_empty(paths: &[PathBuf]) -> Result<Option<Resolved>> {
    if !paths.iter().any(|p| p.exists()) {
        return Ok(None);
    }
    let m = read_merged(paths)?;
    if m.is_empty() {
        return Ok(None);
    }
    m.resolve().map(Some)
}

fn read_merged(paths: &[PathBuf]) -> Result<Merged> {
    let mut m = Merged::default();
    let mut found = 0;
    for path in paths {
        let yaml = match std::fs::read_to_string(path) {
            Ok(y) => y,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(cfg_err(format!("cannot read {}: {e}", path.display())));
            }
        };
        found += 1;
        m.add(&yaml, path.parent().unwrap_or(Path::new(".")))
            .map_err(|e| cfg_err(format!("{}: {e}", path.display())))?;
    }
    if found == 0 {
        return Err(cfg_err(format!("none of {paths:?} exists")));
    }
    Ok(m)
}

/// The files of `$KUBECONFIG` (all of its entries, in order) or `~/.kube/config`.
pub(crate) fn default_paths() -> Vec<PathBuf> {
    if let Some(v) = std::env::var_os("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            return paths;
        }
    }
    std::env::var_os("HOME")
        .map(|h| vec![PathBuf::from(h).join(".kube").join("config")])
        .unwrap_or_default()
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
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), b"FILE-CA").unwrap();
        let yaml = KUBECONFIG
            .replace(
                "certificate-authority-data: Q0EtUEVN",
                "certificate-authority: ca.pem",
            )
            .replace("token: s3cret", "tokenFile: token");
        let r = resolve_current(&yaml, dir.path()).unwrap();
        assert_eq!(r.ca_pem.as_deref(), Some(&b"FILE-CA"[..]));
        // The token file is read per request (rotation), not at load.
        assert_eq!(r.token_file, Some(dir.path().join("token")));
    }

    #[test]
    fn failover_servers_come_from_the_cluster_extension_and_others_are_ignored() {
        let yaml = KUBECONFIG.replace(
            "certificate-authority-data: Q0EtUEVN",
            "certificate-authority-data: Q0EtUEVN
    extensions:
    - name: cluster_info
      extension: {provider: minikube.sigs.k8s.io, version: v1.33.0}
    - name: listwatch.dev/failover-servers
      extension:
        servers: [https://127.0.0.2:6443, https://127.0.0.3:6443]",
        );
        let r = resolve_current(&yaml, Path::new("/")).unwrap();
        assert_eq!(r.server, "https://127.0.0.1:6443");
        assert_eq!(
            r.failover_servers,
            ["https://127.0.0.2:6443", "https://127.0.0.3:6443"]
        );
        // Without the extension: the one server, as upstream.
        let plain = resolve_current(KUBECONFIG, Path::new("/")).unwrap();
        assert!(plain.failover_servers.is_empty());
        let bad = KUBECONFIG.replace(
            "certificate-authority-data: Q0EtUEVN",
            "certificate-authority-data: Q0EtUEVN
    extensions: [{name: listwatch.dev/failover-servers, extension: {servers: [1]}}]",
        );
        assert!(resolve_current(&bad, Path::new("/")).is_err());
        let many: Vec<String> = (0..65).map(|i| format!("http://h{i}")).collect();
        let too_many = KUBECONFIG.replace(
            "certificate-authority-data: Q0EtUEVN",
            &format!(
                "certificate-authority-data: Q0EtUEVN
    extensions: [{{name: listwatch.dev/failover-servers, extension: {{servers: [{}]}}}}]",
                many.join(", ")
            ),
        );
        assert!(resolve_current(&too_many, Path::new("/")).is_err());
    }

    #[test]
    fn missing_pieces_and_unsupported_mechanisms_are_configuration_errors() {
        let no_ctx = KUBECONFIG.replace("current-context: dev", "current-context: gone");
        assert!(
            matches!(resolve_current(&no_ctx, Path::new("/")), Err(Error::Config(m)) if m.contains("gone"))
        );
        assert!(resolve_current("::not yaml", Path::new("/")).is_err());
        let insecure = KUBECONFIG.replace(
            "certificate-authority-data: Q0EtUEVN",
            "insecure-skip-tls-verify: true",
        );
        // Honoured now (client-go's Insecure): read, and applied by the connector.
        assert!(
            resolve_current(&insecure, Path::new("/"))
                .unwrap()
                .insecure_skip_tls_verify
        );
        // An auth-provider user was parsed as anonymous before; now it is refused by name.
        let provider = KUBECONFIG.replace(
            "token: s3cret",
            "auth-provider: {name: gcp, config: {access-token: x}}",
        );
        let e = resolve_current(&provider, Path::new("/")).unwrap_err();
        assert!(
            e.to_string()
                .contains("auth-provider \"gcp\" is not supported"),
            "{e}"
        );
    }

    #[test]
    fn exec_impersonation_tls_server_name_and_proxy_are_read() {
        let yaml = KUBECONFIG
            .replace(
                "token: s3cret",
                r#"exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./bin/get-token
      args: [--cluster, dev]
      env: [{name: A, value: b}]
      interactiveMode: Never
      provideClusterInfo: true
    as: jane
    as-uid: "42"
    as-groups: [devs, ops]
    as-user-extra: {scopes: [view]}"#,
            )
            .replace(
                "certificate-authority-data: Q0EtUEVN",
                "certificate-authority-data: Q0EtUEVN\n    tls-server-name: api.internal\n    proxy-url: http://proxy:3128",
            );
        let r = resolve_current(&yaml, Path::new("/etc/kube")).unwrap();
        let exec = r.exec.unwrap();
        assert_eq!(exec.command, "/etc/kube/./bin/get-token");
        assert_eq!(exec.args, ["--cluster", "dev"]);
        assert_eq!(exec.env, [("A".to_owned(), "b".to_owned())]);
        assert_eq!(exec.cluster.unwrap().server, "https://127.0.0.1:6443");
        let imp = r.impersonate.unwrap();
        assert_eq!(
            (imp.user.as_str(), imp.uid.as_deref(), imp.groups.len()),
            ("jane", Some("42"), 2)
        );
        assert_eq!(imp.extra["scopes"], ["view"]);
        assert_eq!(r.tls_server_name.as_deref(), Some("api.internal"));
        assert_eq!(r.proxy_url.as_deref(), Some("http://proxy:3128"));
        assert_eq!(r.token, None);
    }

    #[test]
    fn a_kubeconfig_list_merges_as_kubectl_first_file_wins() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        // File a: the context and a cluster with a relative CA; no users.
        std::fs::write(a.path().join("ca.pem"), b"CA-OF-A").unwrap();
        std::fs::write(
            a.path().join("config"),
            r#"
current-context: dev
contexts: [{name: dev, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://a:6443", certificate-authority: ca.pem}}]
"#,
        )
        .unwrap();
        // File b: another current-context and the same cluster name (both lose), the user
        // with a relative token file (resolved against b's directory).
        std::fs::write(
            b.path().join("config"),
            r#"
current-context: prod
contexts: [{name: prod, context: {cluster: c, user: u}}]
clusters: [{name: c, cluster: {server: "https://b:6443"}}]
users: [{name: u, user: {tokenFile: tok}}]
"#,
        )
        .unwrap();
        let missing = a.path().join("missing");
        let r = load_merged(&[
            missing.clone(),
            a.path().join("config"),
            b.path().join("config"),
        ])
        .unwrap();
        assert_eq!(r.server, "https://a:6443");
        assert_eq!(r.ca_pem.as_deref(), Some(&b"CA-OF-A"[..]));
        assert_eq!(r.token_file, Some(b.path().join("tok")));
        assert!(load_merged(&[missing]).is_err());
    }
}
