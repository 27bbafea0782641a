//! Security of the server: the authentication, authorization and audit flags, the safe
//! defaults, and how the pieces of `listwatch-auth` and `listwatch-audit` are wired into the
//! request path.
//!
//! Submodules: [`filter`] (the request filter: attributes → authentication → audit →
//! authorization), [`audit_body`] (the request body a `Request`-level event records),
//! [`handler_authz`] (what the handlers ask the authorizer themselves: the `create` check of
//! a PUT or apply that creates), [`impersonation`] (the `Impersonate-*` headers),
//! [`local_only`] (the unauthenticated mode's Host and Origin checks), [`rbac`] (the RBAC
//! resources' informers, bootstrap reconciliation, aggregation and the escalation
//! admission), [`reviews`] (the review APIs and the
//! TokenRequest subresource), [`pki`] (the one-flag secure setup, `--pki-dir`), [`hint`]
//! (the kubectl command printed at start).
//!
//! Invariants:
//! - with no authenticator configured the server serves only loopback addresses (every
//!   client is then `system:unsecured` in `system:masters`, as upstream's old insecure
//!   port), unless `--insecure-allow-unauthenticated` says otherwise; any other address
//!   needs TLS and an authenticator; in that mode only requests addressed to a local host
//!   name and from no foreign web origin are served ([`local_only`]);
//! - every request under authentication passes the filter before any handler: a bad
//!   credential is a 401, a denied request a 403, and neither reaches storage;
//! - `docs/security.md` describes every flag here and its upstream counterpart.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use listwatch_audit::{AuditMetrics, LogBackend, LogConfig, Policy};
use listwatch_auth::authn::{ClientCa, ServiceAccountTokens, TokenFile, TokenIssuer};
use listwatch_auth::authz::{AlwaysAllow, AlwaysDeny, Chain, PrivilegedGroups};
use listwatch_auth::{Authentication, Authorizer, UserInfo};

pub mod audit_body;
mod certificates;
pub mod filter;
pub mod handler_authz;
pub mod hint;
pub mod impersonation;
pub mod local_only;
pub mod pki;
pub mod rbac;
pub mod reviews;

/// The default `--service-account-issuer` (what kubeadm and k3s set).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// An authorization mode of `--authorization-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthorizationMode {
    /// Allow everything.
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
    /// Deny everything (but `system:masters`).
    #[value(name = "AlwaysDeny")]
    AlwaysDeny,
    /// `rbac.authorization.k8s.io/v1`.
    #[value(name = "RBAC")]
    Rbac,
}

/// `--audit-log-mode` (upstream's names): what the audit log does while its queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum AuditLogMode {
    /// The request waits for room (at most 30 s, then the event is dropped and counted),
    /// as upstream's default blocking log backend.
    #[default]
    #[value(name = "blocking")]
    Blocking,
    /// The event is dropped and counted at once.
    #[value(name = "batch")]
    Batch,
}

/// Authentication, authorization and audit flags (upstream's names).
#[derive(Debug, Clone, Default, Args)]
pub struct SecurityOptions {
    /// PEM bundle of CAs for client certificates: a verified certificate's CN is the user,
    /// its O fields the groups (needs TLS).
    #[arg(long,
        help_heading = crate::options::heading::AUTHENTICATION)]
    pub client_ca_file: Option<PathBuf>,
    /// Static tokens, upstream's CSV: `token,user,uid,"group1,group2"`.
    #[arg(long,
        help_heading = crate::options::heading::AUTHENTICATION)]
    pub token_auth_file: Option<PathBuf>,
    /// PEM public (or private) keys that verify ServiceAccount tokens; repeatable. Defaults
    /// to the signing key.
    #[arg(long,
        help_heading = crate::options::heading::AUTHENTICATION)]
    pub service_account_key_file: Vec<PathBuf>,
    /// PEM private key (RSA, or ECDSA P-256 in PKCS#8) that signs ServiceAccount tokens
    /// (TokenRequest, `kubectl create token`).
    #[arg(long,
        help_heading = crate::options::heading::AUTHENTICATION)]
    pub service_account_signing_key_file: Option<PathBuf>,
    /// Issuer (`iss`) of ServiceAccount tokens; repeatable, the first signs.
    #[arg(long, default_value = DEFAULT_ISSUER,
        help_heading = crate::options::heading::AUTHENTICATION)]
    pub service_account_issuer: Vec<String>,
    /// Audiences a token must name to be accepted (default: the issuers).
    #[arg(long, value_delimiter = ',',
        help_heading = crate::options::heading::AUTHENTICATION)]
    pub api_audiences: Vec<String>,
    /// Serve requests without credentials as `system:anonymous` (upstream default true;
    /// turned off when `AlwaysAllow` is one of the authorization modes, as upstream).
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true",
        value_parser = crate::flags::go_bool, action = clap::ArgAction::Set,
        help_heading = crate::options::heading::AUTHENTICATION)]
    pub anonymous_auth: bool,
    /// Authorizers, in order: `AlwaysAllow`, `AlwaysDeny`, `RBAC` (comma-separated).
    /// Default: `RBAC` when an authenticator is configured.
    #[arg(long, value_enum, value_delimiter = ',',
        help_heading = crate::options::heading::AUTHORIZATION)]
    pub authorization_mode: Vec<AuthorizationMode>,
    /// Allow serving a non-loopback address without TLS or without an authenticator
    /// (everyone who reaches the port is then a cluster administrator).
    #[arg(long, default_value = "false", num_args = 0..=1, default_missing_value = "true",
        value_parser = crate::flags::go_bool, action = clap::ArgAction::Set,
        help_heading = crate::options::heading::AUTHORIZATION)]
    pub insecure_allow_unauthenticated: bool,
    /// Write audit events (audit.k8s.io/v1 JSON lines) here; `-` is standard output.
    #[arg(long,
        help_heading = crate::options::heading::AUDIT)]
    pub audit_log_path: Option<PathBuf>,
    /// Audit policy (audit.k8s.io/v1 `Policy`); default: everything at `Metadata`.
    #[arg(long,
        help_heading = crate::options::heading::AUDIT)]
    pub audit_policy_file: Option<PathBuf>,
    /// Rotate the audit log when it reaches this many megabytes (0: never).
    #[arg(long, default_value_t = 0,
        help_heading = crate::options::heading::AUDIT)]
    pub audit_log_maxsize: u64,
    /// Rotated audit logs to keep (0: all).
    #[arg(long, default_value_t = 0,
        help_heading = crate::options::heading::AUDIT)]
    pub audit_log_maxbackup: usize,
    /// While the audit log's queue is full: `blocking` (the request waits for room, at most
    /// 30 s, then its event is dropped and counted; upstream's default) or `batch` (the
    /// event is dropped and counted at once).
    #[arg(long, value_enum, default_value = "blocking",
        help_heading = crate::options::heading::AUDIT)]
    pub audit_log_mode: AuditLogMode,
    /// One-flag secure setup: create (first run) or reuse a CA, a serving certificate, an
    /// admin client certificate and a ServiceAccount key in this directory, write
    /// `DIR/admin.kubeconfig`, and serve TLS with client certificates, tokens and RBAC.
    #[arg(long,
        help_heading = crate::options::heading::SECURE_SERVING)]
    pub pki_dir: Option<PathBuf>,
    /// With `--pki-dir`: more names for the serving certificate (DNS names, `*.` wildcards
    /// or IP addresses; comma-separated, repeatable), e.g. a load balancer's. k3s'
    /// `--tls-san`, kubeadm's `--apiserver-cert-extra-sans`.
    #[arg(long, value_delimiter = ',', value_parser = pki::parse_san, requires = "pki_dir",
        help_heading = crate::options::heading::SECURE_SERVING)]
    pub tls_san: Vec<String>,
    /// Not a flag: the `--pki-dir` goes with the process (an embedding program's temporary
    /// directory, the test environment's), so its files are not flushed to disk one by
    /// one (`fsync`, milliseconds each on a disk); their modes and contents are the same.
    #[arg(skip)]
    pub pki_ephemeral: bool,
}

/// Why the security setup refused to start.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// Unsafe combination of flags.
    #[error("{0}")]
    Refused(String),
    /// A file could not be loaded.
    #[error("{0}")]
    File(String),
}

fn file_err(e: impl std::fmt::Display) -> SecurityError {
    SecurityError::File(e.to_string())
}

/// Who may do what, as decided at start.
pub enum Mode {
    /// No authenticator: every request is [`UserInfo::insecure_superuser`].
    Insecure,
    /// Requests are authenticated and authorized.
    Secure {
        /// The authenticator chain.
        authn: Authentication,
    },
}

/// The running security state every filter and handler shares.
pub struct Security {
    /// Insecure or secure.
    pub mode: Mode,
    /// The authorizer chain (`system:masters` first).
    pub authz: Arc<dyn Authorizer>,
    /// The RBAC authorizer, when `RBAC` is a mode.
    pub rbac: Option<listwatch_auth::rbac::Rbac>,
    /// Signs TokenRequest tokens, when a signing key is configured.
    pub issuer: Option<TokenIssuer>,
    /// The API audiences (`--api-audiences`, default the issuers): what a TokenReview
    /// without `spec.audiences` checks tokens against.
    pub api_audiences: Vec<String>,
    /// The audit policy and backend, when `--audit-log-path` is set.
    pub audit: Option<(Policy, LogBackend)>,
    /// The user of insecure mode.
    pub superuser: Arc<UserInfo>,
    /// Metrics of the filter.
    pub metrics: filter::FilterMetrics,
}

impl std::fmt::Debug for Security {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Security")
            .field("secure", &matches!(self.mode, Mode::Secure { .. }))
            .finish_non_exhaustive()
    }
}

impl SecurityOptions {
    /// Whether any authenticator is configured.
    pub fn has_authenticator(&self) -> bool {
        self.client_ca_file.is_some()
            || self.token_auth_file.is_some()
            || self.service_account_signing_key_file.is_some()
            || !self.service_account_key_file.is_empty()
    }

    /// Refuses unsafe combinations; says at start what the server will do.
    pub fn check(&self, bind: SocketAddr, tls: bool) -> Result<(), SecurityError> {
        let loopback = bind.ip().is_loopback();
        let configured = self.has_authenticator() || !self.authorization_mode.is_empty();
        if self.client_ca_file.is_some() && !tls {
            return Err(SecurityError::Refused(
                "--client-ca-file needs TLS (--tls-cert-file and --tls-private-key-file, or --pki-dir)".into(),
            ));
        }
        if self.insecure_allow_unauthenticated {
            tracing::warn!(%bind, "--insecure-allow-unauthenticated: serving without the TLS and authentication checks");
            return Ok(());
        }
        // An authorization mode alone identifies nobody: beyond loopback, a client must be
        // identified (upstream has no unauthenticated secure port either).
        let safe = loopback || (self.has_authenticator() && tls);
        if !safe {
            return Err(SecurityError::Refused(format!(
                "refusing to serve {bind} without TLS and an authenticator: anyone who reaches it could read every Secret. \
                 Use --pki-dir DIR for a ready TLS + client-certificate + RBAC setup, configure --tls-cert-file/--tls-private-key-file \
                 with --client-ca-file, --token-auth-file or ServiceAccount keys, bind a loopback address, \
                 or pass --insecure-allow-unauthenticated"
            )));
        }
        if !configured {
            tracing::warn!(
                %bind,
                "no authenticator configured: every client of this loopback address is a cluster administrator \
                 (system:unsecured in system:masters), like upstream's old insecure port; --pki-dir DIR secures it"
            );
        }
        Ok(())
    }

    /// Builds the security state. `accounts` looks ServiceAccounts up (for token
    /// verification); `rbac` is the RBAC authorizer over the informers.
    pub fn build(
        &self,
        registry: &mut prometheus_client::registry::Registry,
        accounts: Option<Box<dyn listwatch_auth::authn::ServiceAccountLookup>>,
        rbac: Option<listwatch_auth::rbac::Rbac>,
    ) -> Result<Security, SecurityError> {
        let metrics = filter::FilterMetrics::register(registry);
        let audit = match &self.audit_log_path {
            None => None,
            Some(path) => {
                let policy = match &self.audit_policy_file {
                    Some(p) => Policy::load(p).map_err(file_err)?,
                    None => Policy::default(),
                };
                let mut config = LogConfig::new(path);
                config.max_size_bytes = self.audit_log_maxsize.saturating_mul(1024 * 1024);
                config.max_backups = self.audit_log_maxbackup;
                config.mode = match self.audit_log_mode {
                    AuditLogMode::Blocking => listwatch_audit::Mode::Blocking,
                    AuditLogMode::Batch => listwatch_audit::Mode::Batch,
                };
                let backend = LogBackend::start(config, AuditMetrics::register(registry))
                    .map_err(|e| file_err(format!("audit log {}: {e}", path.display())))?;
                Some((policy, backend))
            }
        };
        let issuers = self.service_account_issuer.clone();
        let audiences = if self.api_audiences.is_empty() {
            issuers.clone()
        } else {
            self.api_audiences.clone()
        };
        let issuer = match &self.service_account_signing_key_file {
            Some(p) => Some(
                TokenIssuer::load(
                    p,
                    issuers.first().map_or(DEFAULT_ISSUER, String::as_str),
                    audiences.clone(),
                )
                .map_err(file_err)?,
            ),
            None => None,
        };
        let configured = self.has_authenticator() || !self.authorization_mode.is_empty();
        let superuser = Arc::new(UserInfo::insecure_superuser());
        if !configured {
            return Ok(Security {
                mode: Mode::Insecure,
                authz: Arc::new(AlwaysAllow),
                rbac: None,
                issuer,
                api_audiences: audiences.clone(),
                audit,
                superuser,
                metrics,
            });
        }
        let mut authn = Authentication {
            x509: None,
            tokens: Vec::new(),
            anonymous: self.anonymous_auth,
        };
        if let Some(p) = &self.client_ca_file {
            authn.x509 = Some(Arc::new(ClientCa::load(p).map_err(file_err)?));
        }
        if let Some(p) = &self.token_auth_file {
            let t = TokenFile::load(p).map_err(file_err)?;
            tracing::info!(tokens = t.len(), file = %p.display(), "static tokens loaded");
            authn.tokens.push(Arc::new(t));
        }
        let mut key_files: Vec<&std::path::Path> = self
            .service_account_key_file
            .iter()
            .map(PathBuf::as_path)
            .collect();
        if key_files.is_empty()
            && let Some(p) = &self.service_account_signing_key_file
        {
            key_files.push(p);
        }
        if !key_files.is_empty() {
            let Some(accounts) = accounts else {
                return Err(SecurityError::Refused(
                    "ServiceAccount tokens need the serviceaccounts resource".into(),
                ));
            };
            let sa = ServiceAccountTokens::load(&key_files, issuers, audiences.clone(), accounts)
                .map_err(file_err)?;
            authn.tokens.push(Arc::new(sa));
        }
        let modes = if self.authorization_mode.is_empty() {
            vec![AuthorizationMode::Rbac]
        } else {
            self.authorization_mode.clone()
        };
        // Upstream's `ApplyAuthorization`: AlwaysAllow anywhere in the chain (e.g.
        // `RBAC,AlwaysAllow`, where it allows whatever RBAC has no opinion on) would
        // otherwise allow anonymous requests everything.
        if modes.contains(&AuthorizationMode::AlwaysAllow) && authn.anonymous {
            tracing::warn!(
                "anonymous requests are not allowed with the AlwaysAllow authorizer: --anonymous-auth is turned off"
            );
            authn.anonymous = false;
        }
        let mut chain: Vec<Arc<dyn Authorizer>> = vec![Arc::new(PrivilegedGroups::default())];
        let mut rbac_out = None;
        for m in &modes {
            match m {
                AuthorizationMode::AlwaysAllow => chain.push(Arc::new(AlwaysAllow)),
                AuthorizationMode::AlwaysDeny => chain.push(Arc::new(AlwaysDeny)),
                AuthorizationMode::Rbac => {
                    let Some(r) = rbac.clone() else {
                        return Err(SecurityError::Refused(
                            "RBAC needs the rbac.authorization.k8s.io resources".into(),
                        ));
                    };
                    chain.push(Arc::new(r.clone()));
                    rbac_out = Some(r);
                }
            }
        }
        tracing::info!(
            client_certificates = authn.x509.is_some(),
            token_authenticators = authn.tokens.len(),
            anonymous = authn.anonymous,
            authorization = ?modes,
            audit = audit.is_some(),
            "authentication and authorization on"
        );
        Ok(Security {
            mode: Mode::Secure { authn },
            authz: Arc::new(Chain(chain)),
            rbac: rbac_out,
            issuer,
            api_audiences: audiences.clone(),
            audit,
            superuser,
            metrics,
        })
    }

    /// Whether RBAC will be among the authorizers.
    pub fn wants_rbac(&self) -> bool {
        let configured = self.has_authenticator() || !self.authorization_mode.is_empty();
        configured
            && (self.authorization_mode.is_empty()
                || self.authorization_mode.contains(&AuthorizationMode::Rbac))
    }

    /// Whether ServiceAccount tokens will be verified.
    pub fn wants_service_accounts(&self) -> bool {
        self.service_account_signing_key_file.is_some() || !self.service_account_key_file.is_empty()
    }
}
