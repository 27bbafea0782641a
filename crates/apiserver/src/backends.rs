//! The storage backends: the embedded store (in memory, or durable in `--data-dir`) or an
//! etcd cluster (with its compactor), and one `Arc<dyn Storage>` per resource over it.
//!
//! Invariants: every resource gets its own storage value, so that a per-resource cache can
//! wrap it; on etcd, every resource's store shares one client and writes under
//! `--etcd-prefix`; the embedded store's history is bounded by default (1/16 of the
//! machine's memory), and so are its live objects (a quota of 2 GiB, at most 1/8 of the
//! machine's memory, answered as etcd's NOSPACE).

use std::path::PathBuf;
use std::sync::Arc;

use listwatch_endpoints::KindSpec;
use listwatch_etcd::{Compactor, EtcdClient, EtcdConfig, EtcdStore};
use listwatch_memstore::{MemStore, MemStoreConfig};
use listwatch_storage::Storage;

use crate::{Backend, Options, ServerError};

/// Storage for each resource, by backend. Every resource gets its own `Arc<dyn Storage>`
/// so a per-resource cache can wrap it.
pub(crate) enum Backends {
    Embedded(MemStore),
    Etcd {
        client: EtcdClient,
        prefix: String,
        max_request_bytes: usize,
        _compactor: Compactor,
    },
}

/// The part of [`Backends`] that makes a resource's storage.
enum Shared {
    Embedded(MemStore),
    Etcd(EtcdClient, String, usize),
}

impl Backends {
    pub(crate) fn open(opts: &Options) -> Result<Self, ServerError> {
        match opts.backend() {
            Backend::Embedded => {
                let config = MemStoreConfig {
                    retain_revisions: opts.embedded_retain_revisions,
                    retain_window: opts.embedded_retain_window,
                    retain_bytes: opts
                        .embedded_retain_bytes
                        .unwrap_or_else(default_retain_bytes),
                    // A short history is also looked at often, so it stays short.
                    compaction_check_every: opts.embedded_retain_revisions.clamp(1, 1024),
                    max_object_bytes: (opts.embedded_max_object_bytes > 0)
                        .then_some(opts.embedded_max_object_bytes),
                    quota_bytes: match opts.embedded_quota_bytes {
                        None => Some(default_quota_bytes()),
                        Some(0) => None,
                        Some(n) => Some(n),
                    },
                    ..MemStoreConfig::default()
                };
                let store = match &opts.data_dir {
                    Some(dir) => MemStore::open(dir, config)?,
                    None => {
                        let store = MemStore::with_config(config);
                        tracing::info!(
                            revision = store.current_revision(),
                            "embedded store in memory only: data is lost when the server \
                             stops (use --data-dir to keep it)"
                        );
                        store
                    }
                };
                Ok(Backends::Embedded(store))
            }
            Backend::Etcd => {
                let mut config = EtcdConfig::new(opts.etcd_endpoints());
                config.tls = etcd_tls(opts)?;
                let client =
                    EtcdClient::new(config).map_err(|e| ServerError::Etcd(e.to_string()))?;
                // Upstream compacts every 5 minutes by default, coordinating through this key.
                let compactor = Compactor::spawn(
                    client.clone(),
                    opts.etcd_compaction_interval,
                    listwatch_etcd::DEFAULT_COMPACT_KEY,
                );
                Ok(Backends::Etcd {
                    client,
                    prefix: opts.etcd_prefix.clone(),
                    max_request_bytes: opts.etcd_max_request_bytes,
                    _compactor: compactor,
                })
            }
        }
    }

    /// What [`storage_for`](Self::storage_for) gives, as a value that outlives `self`'s
    /// borrow (the CRD controller builds storage for kinds served after start).
    pub(crate) fn factory(&self) -> impl Fn(&KindSpec) -> Arc<dyn Storage> + Send + Sync + 'static {
        let this = match self {
            Backends::Embedded(m) => Shared::Embedded(m.clone()),
            Backends::Etcd {
                client,
                prefix,
                max_request_bytes,
                ..
            } => Shared::Etcd(client.clone(), prefix.clone(), *max_request_bytes),
        };
        move |info: &KindSpec| match &this {
            Shared::Embedded(m) => Arc::new(m.clone()) as Arc<dyn Storage>,
            Shared::Etcd(client, prefix, max) => Arc::new(
                EtcdStore::new(
                    client.clone(),
                    prefix.clone(),
                    info.selectable_fields.clone(),
                )
                .with_max_request_bytes(*max),
            ),
        }
    }

    /// The etcd client, when on etcd (`componentstatuses` probes its members).
    pub(crate) fn etcd_client(&self) -> Option<EtcdClient> {
        match self {
            Backends::Embedded(_) => None,
            Backends::Etcd { client, .. } => Some(client.clone()),
        }
    }

    pub(crate) fn storage_for(&self, info: &KindSpec) -> Arc<dyn Storage> {
        match self {
            Backends::Embedded(m) => Arc::new(m.clone()),
            Backends::Etcd {
                client,
                prefix,
                max_request_bytes,
                ..
            } => Arc::new(
                EtcdStore::new(
                    client.clone(),
                    prefix.clone(),
                    info.selectable_fields.clone(),
                )
                .with_max_request_bytes(*max_request_bytes),
            ),
        }
    }
}

/// The embedded store's default history bound: 1/16 of the machine's memory (1 GiB if
/// unknown), so the history of a busy server cannot take the machine's memory.
fn default_retain_bytes() -> u64 {
    memory_bytes().map_or(1 << 30, |m| m / 16)
}

/// etcd's default `--quota-backend-bytes`.
const ETCD_DEFAULT_QUOTA_BYTES: u64 = 2 << 30;

/// The embedded store's default live-bytes quota: etcd's default (2 GiB), at most 1/8 of the
/// machine's memory — every live byte is also held by the watch cache and its encodings, so
/// live data of an eighth of the memory is what the process can afford beside its history
/// (1/16) and request buffers.
fn default_quota_bytes() -> u64 {
    memory_bytes().map_or(ETCD_DEFAULT_QUOTA_BYTES, |m| {
        (m / 8).min(ETCD_DEFAULT_QUOTA_BYTES)
    })
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), if known.
fn memory_bytes() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// The etcd client TLS of `--etcd-cafile`, `--etcd-certfile`, `--etcd-keyfile`, checked at
/// start: each file must be readable and hold what it is for (PEM certificates, a PEM private
/// key), and a certificate needs its key; a failure names TLS, the flag and the file, where
/// etcd's refusal would only read `transport error`, retried for ever.
fn etcd_tls(opts: &Options) -> Result<Option<listwatch_etcd::EtcdTls>, ServerError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |flag: &str, p: &PathBuf, what: String| {
        ServerError::Etcd(format!("etcd client TLS: {flag} {}: {what}", p.display()))
    };
    let read = |flag: &str, p: &PathBuf| {
        std::fs::read(p).map_err(|e| bad(flag, p, format!("cannot be read: {e}")))
    };
    let certs = |flag: &str, p: &PathBuf| {
        let pem = read(flag, p)?;
        let n = CertificateDer::pem_slice_iter(&pem)
            .map(|c| c.map_err(|e| bad(flag, p, format!("not a PEM certificate: {e}"))))
            .try_fold(0usize, |n, c| c.map(|_| n + 1))?;
        if n == 0 {
            return Err(bad(flag, p, "holds no PEM certificate".into()));
        }
        Ok(pem)
    };
    let Some(ca) = &opts.etcd_cafile else {
        if opts.etcd_certfile.is_some() {
            return Err(ServerError::Etcd(
                "--etcd-certfile needs --etcd-cafile".into(),
            ));
        }
        return Ok(None);
    };
    let key_pem = match (&opts.etcd_certfile, &opts.etcd_keyfile) {
        (Some(_), None) => {
            return Err(ServerError::Etcd(
                "etcd client TLS: --etcd-certfile needs --etcd-keyfile (its private key)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(ServerError::Etcd(
                "etcd client TLS: --etcd-keyfile needs --etcd-certfile (its certificate)".into(),
            ));
        }
        (_, Some(k)) => {
            let pem = read("--etcd-keyfile", k)?;
            PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
                bad(
                    "--etcd-keyfile",
                    k,
                    format!("holds no PEM private key: {e}"),
                )
            })?;
            Some(pem)
        }
        (_, None) => None,
    };
    Ok(Some(listwatch_etcd::EtcdTls {
        ca_pem: certs("--etcd-cafile", ca)?,
        cert_pem: opts
            .etcd_certfile
            .as_ref()
            .map(|c| certs("--etcd-certfile", c))
            .transpose()?,
        key_pem,
    }))
}
