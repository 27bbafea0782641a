//! X.509 client certificates end to end, without external tools (so plain `cargo test` runs
//! it): a server started with `--pki-dir`, and a rustls client presenting the generated
//! admin certificate, a certificate from another CA, or none. The certificate must travel
//! from the TLS handshake through the connection layer to the authenticator: the admin is
//! `kubernetes-admin` in `system:masters`; another CA's certificate is upstream's 401, never
//! anonymous; no certificate is `system:anonymous`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use common::{PATIENCE, Server};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A client certificate and its key, PEM.
struct Identity {
    cert: String,
    key: String,
}

/// One HTTP/1.1 request over TLS (trusting `ca`, presenting `identity`); returns the status
/// code and the whole response text.
fn request(
    addr: &str,
    ca: &Path,
    identity: Option<&Identity>,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some(id) => {
            let certs = CertificateDer::pem_slice_iter(id.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(id.key.as_bytes()).unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let server = ServerName::IpAddress(
        addr.rsplit_once(':')
            .unwrap()
            .0
            .parse::<std::net::IpAddr>()
            .unwrap()
            .into(),
    );
    let conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    write!(
        tls,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    // A close without close_notify is fine here: the response is what was read.
    let _ = tls.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (code, text)
}

const WHOAMI: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const WHOAMI_BODY: &str =
    r#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview","metadata":{}}"#;

/// A CA of its own and a client certificate it signed, claiming `system:masters`.
fn foreign_identity() -> Identity {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        IsCa, Issuer, KeyPair,
    };
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name = DistinguishedName::new();
    ca.distinguished_name.push(DnType::CommonName, "mallory-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "kubernetes-admin");
    p.distinguished_name
        .push(DnType::OrganizationName, "system:masters");
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, &issuer).unwrap();
    Identity {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

#[test]
fn client_certificates_reach_the_authenticator() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let server = Server::start(&["--pki-dir", pki.to_str().unwrap()]);
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let ca = pki.join("ca.crt");
    let admin = Identity {
        cert: std::fs::read_to_string(pki.join("admin.crt")).unwrap(),
        key: std::fs::read_to_string(pki.join("admin.key")).unwrap(),
    };

    // The generated admin certificate: kubernetes-admin in system:masters, allowed to list.
    let (code, text) = request(&server.addr, &ca, Some(&admin), "POST", WHOAMI, WHOAMI_BODY);
    assert_eq!(code, 201, "{text}");
    assert!(text.contains(r#""username":"kubernetes-admin""#), "{text}");
    assert!(text.contains("system:masters"), "{text}");
    let (code, text) = request(
        &server.addr,
        &ca,
        Some(&admin),
        "GET",
        "/api/v1/namespaces/default/secrets",
        "",
    );
    assert_eq!(code, 200, "{text}");

    // A certificate from another CA, whatever it claims, is upstream's 401, not anonymous.
    let mallory = foreign_identity();
    for (method, path, body) in [
        ("POST", WHOAMI, WHOAMI_BODY),
        ("GET", "/api/v1/namespaces/default/secrets", ""),
        ("GET", "/version", ""),
    ] {
        let (code, text) = request(&server.addr, &ca, Some(&mallory), method, path, body);
        assert_eq!(code, 401, "{method} {path}: {text}");
        assert!(text.contains(r#""reason":"Unauthorized""#), "{text}");
    }

    // No certificate at all: anonymous, which RBAC lets neither review itself (as upstream:
    // system:basic-user is for system:authenticated) nor list secrets.
    let (code, text) = request(&server.addr, &ca, None, "POST", WHOAMI, WHOAMI_BODY);
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains(r#"User \"system:anonymous\" cannot create resource \"selfsubjectreviews\""#),
        "{text}"
    );
    let (code, text) = request(
        &server.addr,
        &ca,
        None,
        "GET",
        "/api/v1/namespaces/default/secrets",
        "",
    );
    assert_eq!(code, 403, "{text}");
    assert!(
        text.contains(r#"User \"system:anonymous\" cannot list resource \"secrets\""#),
        "{text}"
    );
}
