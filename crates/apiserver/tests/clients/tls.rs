//! HTTPS with `--tls-cert-file`/`--tls-private-key-file`: kubectl and listwatch-client's
//! rustls transport trust the server's certificate; an untrusted client is refused. The
//! certificate is made by the `openssl` command, which `cargo xtask test` provisions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Server, run_err, run_ok};
use listwatch_client::{ListRequest, ListerWatcher};

/// A test CA and a server certificate it signed for 127.0.0.1 and localhost:
/// (CA certificate, server certificate, server key).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    common::require("openssl");
    let p = |name: &str| dir.join(name);
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run_ok(
        Command::new("openssl")
            .args(["req", "-x509"])
            .args(ec)
            .args(["-days", "1", "-subj", "/CN=listwatch-test-ca", "-keyout"])
            .arg(p("ca.key"))
            .arg("-out")
            .arg(p("ca.crt")),
    );
    run_ok(
        Command::new("openssl")
            .arg("req")
            .args(ec)
            .args(["-subj", "/CN=localhost", "-keyout"])
            .arg(p("tls.key"))
            .arg("-out")
            .arg(p("tls.csr")),
    );
    std::fs::write(
        p("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run_ok(
        Command::new("openssl")
            .args(["x509", "-req", "-days", "1", "-CAcreateserial", "-in"])
            .arg(p("tls.csr"))
            .arg("-CA")
            .arg(p("ca.crt"))
            .arg("-CAkey")
            .arg(p("ca.key"))
            .arg("-extfile")
            .arg(p("ext.cnf"))
            .arg("-out")
            .arg(p("tls.crt")),
    );
    (p("ca.crt"), p("tls.crt"), p("tls.key"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs openssl and kubectl"]
async fn https_serves_kubectl_and_the_rustls_client_with_a_trusted_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let server = Server::start(&[
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-private-key-file",
        key.to_str().unwrap(),
    ]);
    assert!(server.url.starts_with("https://"), "{}", server.url);

    {
        common::require("kubectl");
        let kubectl = |trust: bool| {
            let mut c = server.kubectl(dir.path());
            if trust {
                c.arg("--certificate-authority").arg(&ca);
            }
            // No credentials would make kubectl prompt; the server does not authenticate.
            c.args(["--token", "unused"]);
            c
        };
        let ns = run_ok(kubectl(true).args(["get", "namespaces", "-o", "name"]));
        assert!(ns.contains("namespace/default"), "{ns}");
        let refused = run_err(kubectl(false).args(["get", "namespaces"]));
        assert!(refused.contains("certificate"), "{refused}");
    }

    let pem = std::fs::read(&ca).unwrap();
    let config = listwatch_client::HttpConfig::new(server.url.clone())
        .unwrap()
        .ca_pem(pem);
    let lw = listwatch_client::HttpListerWatcher::new(config, "/api/v1/namespaces").unwrap();
    let page = lw.list(&ListRequest::default()).await.unwrap();
    let mut names: Vec<&str> = page.items.iter().map(|o| o.name()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );
    // Trusting something else (here the server's own leaf, which is no CA) fails the handshake.
    let wrong = listwatch_client::HttpConfig::new(server.url.clone())
        .unwrap()
        .ca_pem(std::fs::read(&cert).unwrap());
    let untrusted = listwatch_client::HttpListerWatcher::new(wrong, "/api/v1/namespaces").unwrap();
    assert!(untrusted.list(&ListRequest::default()).await.is_err());
}

/// A CA and a server certificate it signed for 127.0.0.1, made in-process:
/// (CA certificate PEM, server certificate file, server key file).
fn in_process_certificates(dir: &Path) -> (Vec<u8>, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (cert_file, key_file) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert_file, leaf.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    (ca_cert.pem().into_bytes(), cert_file, key_file)
}

/// The bytes of a TLS ClientHello, as a real client would open with.
fn client_hello() -> Vec<u8> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let mut conn =
        rustls::ClientConnection::new(std::sync::Arc::new(config), "localhost".try_into().unwrap())
            .unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    hello
}

/// Reads until the server closes the connection; returns what arrived.
fn read_until_closed(s: &mut std::net::TcpStream) -> Vec<u8> {
    use std::io::Read;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the connection is still open ({e})"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_that_never_complete_are_cut_and_a_real_client_is_served() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = in_process_certificates(dir.path());
    let server = Server::start(&[
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-private-key-file",
        key.to_str().unwrap(),
        "--tls-handshake-timeout",
        "2",
        "--max-tls-handshakes",
        "1",
    ]);
    let connect = || {
        let s = std::net::TcpStream::connect(&server.addr).unwrap();
        s.set_read_timeout(Some(common::PATIENCE)).unwrap();
        s
    };
    // One connection says nothing; another sends its ClientHello and then nothing, holding
    // the only handshake slot.
    let mut silent = connect();
    let mut stalled = connect();
    stalled.write_all(&client_hello()).unwrap();
    // Let the stalled one take the slot first: a client whose ClientHello lands within the
    // same few milliseconds has its own slot wait expire just as the slot frees (a race
    // seen once in three runs when the client offered h2 by ALPN).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // A real client is served meanwhile: its handshake waits at most for that slot.
    let config = listwatch_client::HttpConfig::new(server.url.clone())
        .unwrap()
        .ca_pem(ca);
    let lw = listwatch_client::HttpListerWatcher::new(config, "/api/v1/namespaces").unwrap();
    let page = lw.list(&ListRequest::default()).await.unwrap();
    assert!(page.items.iter().any(|o| o.name() == "default"));
    // Both are closed by the server at their handshake deadline; the second got the start
    // of the server's handshake (a TLS handshake record), never an HTTP answer.
    let (silent_got, stalled_got) = tokio::task::spawn_blocking(move || {
        (
            read_until_closed(&mut silent),
            read_until_closed(&mut stalled),
        )
    })
    .await
    .unwrap();
    assert!(silent_got.is_empty());
    assert_eq!(stalled_got.first(), Some(&0x16), "a handshake record");
}
