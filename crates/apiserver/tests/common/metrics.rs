//! Reading the server's `/metrics` without adding to its HTTP/2 counters: the HTTP/2 tests
//! judge a client by `apiserver_requests_by_protocol_total`, so the reader speaks HTTP/1.1.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::PATIENCE;

/// Requests the server counted as HTTP/2 (one per stream).
pub const H2_REQUESTS: &str = "apiserver_requests_by_protocol_total{protocol=\"HTTP/2\"}";
/// Requests the server counted as HTTP/1.1.
pub const H1_REQUESTS: &str = "apiserver_requests_by_protocol_total{protocol=\"HTTP/1.1\"}";
/// Watches (and other long-running requests) open now.
pub const WATCHES: &str = "apiserver_longrunning_requests";
/// Client connections open now (the reader's own included).
pub const CONNECTIONS: &str = "apiserver_open_connections ";

/// The sum of the samples in `text` whose line starts with `series`.
pub fn sum_of(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `/metrics` of a `--pki-dir` server over a TLS connection of its own, as the generated
/// admin, HTTP/1.1 (rustls offering no ALPN): each read adds exactly one HTTP/1.1 request
/// and no HTTP/2 one. The counters are read after the reader's own request is counted.
pub fn tls_metrics(addr: &str, pki: &Path) -> String {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.join("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let certs = CertificateDer::pem_file_iter(pki.join("admin.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pki.join("admin.key")).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(certs, key)
    .unwrap();
    assert!(
        config.alpn_protocols.is_empty(),
        "the reader stays HTTP/1.1"
    );
    let ip: std::net::IpAddr = addr.rsplit_once(':').unwrap().0.parse().unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), ServerName::from(ip)).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    // A close without close_notify is fine here: the response is what was read.
    let _ = tls.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text
}

/// `/metrics` of a plaintext server over HTTP/1.1 (one request on its own connection).
pub fn plain_metrics(addr: &str) -> String {
    let r = super::http(addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    String::from_utf8(r.body).unwrap()
}
