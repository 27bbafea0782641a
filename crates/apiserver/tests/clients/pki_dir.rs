//! `--pki-dir` end to end with kubectl: the serving certificate names what clients dial
//! (`--tls-san` addresses and names, the machine's addresses for a wildcard bind) and
//! verifies against the generated CA; a restart with other names makes a new serving
//! certificate with the same CA, so a kubeconfig written before keeps working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::IpAddr;
use std::path::Path;
use std::process::Command;

use common::{Server, run_err, run_ok};

/// kubectl with `kubeconfig`, its cache in `home`.
fn kubectl(kubeconfig: &Path, home: &Path) -> Command {
    let mut c = Command::new("kubectl");
    c.env("HOME", home)
        .env_remove("KUBECONFIG")
        .arg("--kubeconfig")
        .arg(kubeconfig);
    c
}

fn port(server: &Server) -> u16 {
    server.addr.rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
#[ignore = "needs kubectl"]
fn clients_verify_the_server_by_every_name_it_is_given() {
    common::require("kubectl");
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    // 127.0.0.2 reaches a wildcard bind through loopback, yet is no default name.
    let server = Server::start_at(
        "0.0.0.0:0",
        &[
            "--pki-dir",
            pki.to_str().unwrap(),
            "--tls-san",
            "127.0.0.2,API.listwatch.example",
            "--tls-san",
            "*.apps.listwatch.example",
        ],
    );
    let p = port(&server);
    let kc = pki.join("admin.kubeconfig");
    // The kubeconfig as written (127.0.0.1 for a wildcard bind).
    run_ok(kubectl(&kc, home.path()).args(["get", "namespaces"]));
    let ip = listwatch_apiserver::security::pki::interface_addresses()
        .into_iter()
        .find(IpAddr::is_ipv4)
        .expect("this machine has a non-loopback IPv4 address");
    for url in [
        format!("https://127.0.0.2:{p}"),
        format!("https://{ip}:{p}"),
        format!("https://localhost:{p}"),
    ] {
        let who = run_ok(kubectl(&kc, home.path()).args(["--server", &url, "auth", "whoami"]));
        assert!(who.contains("kubernetes-admin"), "{url}: {who}");
    }
    // Names checked as the certificate's (kubectl dials 127.0.0.1 and verifies the name).
    for name in [
        "api.listwatch.example",
        "x.apps.listwatch.example",
        "kubernetes.default.svc",
    ] {
        run_ok(kubectl(&kc, home.path()).args(["--tls-server-name", name, "get", "namespaces"]));
    }
    if let Some(h) = listwatch_apiserver::security::pki::hostname() {
        run_ok(kubectl(&kc, home.path()).args(["--tls-server-name", &h, "get", "namespaces"]));
    }
    // Verification is on: a name the certificate lacks is refused.
    let e = run_err(kubectl(&kc, home.path()).args([
        "--tls-server-name",
        "other.example",
        "get",
        "namespaces",
    ]));
    assert!(e.contains("x509") || e.contains("certificate"), "{e}");
}

#[test]
#[ignore = "needs kubectl"]
fn a_restart_with_new_names_keeps_the_ca_and_the_kubeconfig_written_before() {
    common::require("kubectl");
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let first = Server::start(&["--pki-dir", pki.to_str().unwrap()]);
    let kc = pki.join("admin.kubeconfig");
    run_ok(kubectl(&kc, home.path()).args(["create", "namespace", "kept"]));
    let old = dir.path().join("old.kubeconfig");
    std::fs::copy(&kc, &old).unwrap();
    let ca = std::fs::read(pki.join("ca.crt")).unwrap();
    let serving = std::fs::read(pki.join("server.crt")).unwrap();
    assert!(first.terminate());

    let second = Server::start_at(
        "0.0.0.0:0",
        &["--pki-dir", pki.to_str().unwrap(), "--tls-san", "127.0.0.3"],
    );
    assert_eq!(
        std::fs::read(pki.join("ca.crt")).unwrap(),
        ca,
        "the CA is kept"
    );
    assert_ne!(
        std::fs::read(pki.join("server.crt")).unwrap(),
        serving,
        "a new serving certificate for the new names"
    );
    // The kubeconfig of the first run (its CA, its admin certificate) against the new
    // serving certificate, by the new name.
    let url = format!("https://127.0.0.3:{}", port(&second));
    let who = run_ok(kubectl(&old, home.path()).args(["--server", &url, "auth", "whoami"]));
    assert!(who.contains("kubernetes-admin"), "{who}");
    let e = run_err(kubectl(&old, home.path()).args([
        "--server",
        &url,
        "--tls-server-name",
        "other.example",
        "get",
        "namespaces",
    ]));
    assert!(e.contains("x509") || e.contains("certificate"), "{e}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for key in ["server.key", "admin.key", "ca.key", "admin.kubeconfig"] {
            let mode = std::fs::metadata(pki.join(key))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{key}");
        }
    }
}

#[test]
fn a_bad_tls_san_is_a_usage_error() {
    for (args, message) in [
        (
            vec!["--pki-dir", "/nonexistent", "--tls-san", "a_b.example"],
            "neither an IP address nor a DNS name",
        ),
        (vec!["--tls-san", "api.example.com"], "--pki-dir"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(message), "{args:?}: {e}");
    }
}
