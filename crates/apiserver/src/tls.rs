//! HTTPS: `--tls-cert-file` / `--tls-private-key-file` (PEM) with rustls, and the bounded
//! handshake every accepted connection goes through (`Handshaker`).
//!
//! Invariants: a client has `--tls-handshake-timeout` for each step — to send its
//! ClientHello, to get a handshake slot, to complete the handshake once it has one (at most
//! three times the timeout in all) — else the connection is dropped; at most
//! `--max-tls-handshakes` handshakes run past their ClientHello at once (from the key
//! exchange and signature to the client's Finished), waiting in arrival order for a slot —
//! reading a ClientHello costs no crypto, so a connection that never sends one holds only
//! its connection slot; a slow or failing handshake never delays another connection beyond
//! that wait (each runs in its connection's task); only completed TLS connections reach
//! HTTP.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::server::Acceptor;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use crate::serve::{ConnMetrics, GaugeGuard, TlsSettings};

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
    // HTTP/2 first, as upstream; the connection is served with what was negotiated.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Runs the server side of TLS handshakes within their bounds.
pub(crate) struct Handshaker {
    config: Arc<ServerConfig>,
    slots: Option<Arc<Semaphore>>,
    timeout: Duration,
    metrics: ConnMetrics,
}

impl Handshaker {
    pub(crate) fn new(settings: &TlsSettings, metrics: ConnMetrics) -> Self {
        Self {
            config: Arc::clone(&settings.config),
            slots: (settings.max_handshakes > 0)
                .then(|| Arc::new(Semaphore::new(settings.max_handshakes))),
            timeout: settings.handshake_timeout,
            metrics,
        }
    }

    /// The TLS connection, or `None` when the handshake failed or ran out of time. Each
    /// step has the timeout: sending the ClientHello (from the accept), getting a handshake
    /// slot, completing the handshake (from getting the slot). A slot is held at most the
    /// timeout, and slots go in arrival order, so a client that waits behind a stalled
    /// handshake gets its turn within its own timeout, and then its full time.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the connection and frees its slot.
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
    ) -> Option<TlsStream<TcpStream>> {
        let start = self
            .within(peer, LazyConfigAcceptor::new(Acceptor::default(), tcp))
            .await?;
        let _slot = match &self.slots {
            None => None,
            Some(slots) => {
                let _waiting = GaugeGuard::new(&self.metrics.handshakes_waiting);
                // The semaphore is never closed.
                let acquire = async { Ok(Arc::clone(slots).acquire_owned().await.ok()) };
                self.within(peer, acquire).await?
            }
        };
        let _running = GaugeGuard::new(&self.metrics.handshakes);
        self.within(peer, start.into_stream(Arc::clone(&self.config)))
            .await
    }

    async fn within<T>(
        &self,
        peer: SocketAddr,
        step: impl Future<Output = std::io::Result<T>>,
    ) -> Option<T> {
        match tokio::time::timeout(self.timeout, step).await {
            Ok(Ok(t)) => Some(t),
            Ok(Err(e)) => {
                self.metrics.handshake_failures.inc();
                tracing::debug!(%peer, error = %e, "tls handshake failed");
                None
            }
            Err(_) => {
                self.metrics.timed_out("tls_handshake");
                tracing::debug!(%peer, "tls handshake timed out");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::time::Instant;
    use tokio::io::AsyncWriteExt;

    fn settings(max_handshakes: usize) -> (TlsSettings, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        let settings = TlsSettings {
            config: server_config(&cert, &key, None).unwrap(),
            max_handshakes,
            handshake_timeout: Duration::from_secs(60),
        };
        (settings, dir)
    }

    fn client_hello() -> Vec<u8> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut conn =
            rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap())
                .unwrap();
        let mut hello = Vec::new();
        conn.write_tls(&mut hello).unwrap();
        hello
    }

    /// Waits until the gauges read (running, waiting).
    async fn gauges_reach(metrics: &ConnMetrics, want: (i64, i64)) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = (metrics.handshakes.get(), metrics.handshakes_waiting.get());
            if got == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "gauges stayed at {got:?}, not {want:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_the_cap_of_handshakes_run_and_the_rest_wait_their_turn() {
        let (settings, _dir) = settings(1);
        let metrics = ConnMetrics::register(&mut prometheus_client::registry::Registry::default());
        let handshaker = Arc::new(Handshaker::new(&settings, metrics.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::new();
        let mut handshakes = Vec::new();
        // Two clients send their ClientHello and then stall.
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(&client_hello()).await.unwrap();
            clients.push(c);
            let (s, peer) = listener.accept().await.unwrap();
            let h = Arc::clone(&handshaker);
            handshakes.push(tokio::spawn(
                async move { h.accept(s, peer).await.is_some() },
            ));
        }
        gauges_reach(&metrics, (1, 1)).await;
        // The first client goes away: its handshake fails and the second takes the slot.
        drop(clients.remove(0));
        gauges_reach(&metrics, (1, 0)).await;
        assert!(!handshakes.remove(0).await.unwrap());
        assert_eq!(metrics.handshake_failures.get(), 1);
        drop(clients);
        assert!(!handshakes.remove(0).await.unwrap());
        gauges_reach(&metrics, (0, 0)).await;
    }
}
