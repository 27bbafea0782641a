//! HTTPS with `--tls-cert-file`/`--tls-private-key-file`: kubectl and listwatch-client's
//! rustls transport trust the server's certificate; an untrusted client is refused. The
//! certificate is made by the `openssl` command, which `cargo xtask test` provisions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

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
