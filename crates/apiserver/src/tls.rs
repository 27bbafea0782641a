//! HTTPS: `--tls-cert-file` / `--tls-private-key-file` (PEM), served through an axum
//! [`Listener`] whose handshakes run in their own tasks.
//!
//! Invariants: a slow or failing handshake never delays another connection (each runs in a
//! task, bounded by [`HANDSHAKE_TIMEOUT`]); only completed TLS connections reach the router;
//! dropping the listener stops accepting.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::Listener;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Longest time a client may take to complete its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("reading {path}: {message}")]
    Pem {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// rustls refused the certificate or key.
    #[error("tls configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The rustls server configuration for a certificate chain and key in PEM files; with a
/// client CA, clients are asked for a certificate (verified per request by the
/// authenticator, so that a bad one is a 401 as upstream).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let pem_err = |path: &Path, e: &dyn std::fmt::Display| TlsError::Pem {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| pem_err(cert, &e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(cert, &e))?;
    if certs.is_empty() {
        return Err(pem_err(cert, &"no certificate found"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| pem_err(key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        ServerConfig::builder_with_provider(provider).with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        Some(ca) => {
            let ca = listwatch_auth::authn::ClientCa::load(ca).map_err(|e| TlsError::Pem {
                path: e.path.clone(),
                message: e.message.clone(),
            })?;
            builder.with_client_cert_verifier(Arc::new(
                listwatch_auth::authn::RequestClientCert::new(&ca),
            ))
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts TCP connections and hands completed TLS connections to axum.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    acceptor_task: JoinHandle<()>,
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl TlsListener {
    /// Starts accepting on `tcp` with `config`.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        // Bounded: when axum stops taking connections, handshaken ones wait here.
        let (tx, ready) = mpsc::channel(64);
        let acceptor_task = tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "tls handshake failed"),
                        Err(_) => tracing::debug!(%peer, "tls handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            local,
            ready,
            acceptor_task,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor_task.abort();
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The acceptor task only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
