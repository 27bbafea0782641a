//! What the server does at start with each security configuration, and identity beyond
//! authorization, end to end: the refused public binds; the start-up hint (a command that
//! works as printed, and the quick start's warning that it does not authenticate);
//! `--anonymous-auth=false` (upstream's 401 for a request without credentials);
//! `--insecure-allow-unauthenticated` on a non-loopback bind; the per-user request metric
//! with its bounded labels; fair queuing keyed on the authenticated user; a closed stdout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::IpAddr;
use std::process::Command;
use std::time::Instant;

use common::{PATIENCE, Server, http, run_err, run_ok};

const TOKENS: &str = "alice-token,alice,uid-alice,\"dev,qa\"\nroot-token,root,uid-root,system:masters\ncarol-token,carol,uid-carol,system:masters\n";

/// Upstream's 401 body, byte for byte.
const UNAUTHORIZED: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}
"#;

fn token_file(dir: &tempfile::TempDir, text: &str) -> String {
    let p = dir.path().join("tokens.csv");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

/// The server's hint exactly as printed (program and arguments), with `TOKEN` replaced by
/// `token`, `HOME` in `home` so that kubectl's cache and config stay in the test.
fn as_hinted(hint: &[String], token: Option<&str>, home: &std::path::Path) -> Command {
    let mut c = Command::new(&hint[0]);
    c.env("HOME", home).env_remove("KUBECONFIG");
    for a in &hint[1..] {
        match (a.as_str(), token) {
            ("TOKEN", Some(t)) => c.arg(t),
            _ => c.arg(a),
        };
    }
    c
}

/// kubectl with its cache and config in `home`.
fn kubectl(home: &std::path::Path) -> Command {
    let mut c = Command::new("kubectl");
    c.env("HOME", home).env_remove("KUBECONFIG");
    c
}

/// The port of `addr` (`HOST:PORT`).
fn port(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
#[ignore = "needs kubectl"]
fn the_quick_start_says_it_does_not_authenticate_and_its_hint_works() {
    common::require("kubectl");
    let home = tempfile::tempdir().unwrap();
    let (server, logs) = Server::start_logged("127.0.0.1:0", &[]);
    let hint = logs.hint();
    assert_eq!(
        hint,
        ["kubectl", "--server", &server.url, "get", "pods", "-A"]
    );
    let printed = logs.stdout(2).join("\n");
    assert!(printed.contains("does not authenticate"), "{printed}");
    // The warning of upstream's old insecure port, on stderr (the log).
    let stderr = logs.stderr().join("\n");
    assert!(stderr.contains("no authenticator configured"), "{stderr}");
    assert!(stderr.contains("cluster administrator"), "{stderr}");
    run_ok(&mut as_hinted(&hint, None, home.path()));
}

#[test]
#[ignore = "needs kubectl"]
fn the_pki_dir_hint_is_its_kubeconfig_and_works_as_printed() {
    common::require("kubectl");
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let (_server, logs) =
        Server::start_logged("127.0.0.1:0", &["--pki-dir", pki.to_str().unwrap()]);
    let hint = logs.hint();
    let kubeconfig = pki.join("admin.kubeconfig");
    let kubeconfig = kubeconfig.to_str().unwrap();
    assert_eq!(
        hint,
        ["kubectl", "--kubeconfig", kubeconfig, "get", "pods", "-A"]
    );
    let printed = logs.stdout(2).join("\n");
    assert!(!printed.contains("does not authenticate"), "{printed}");
    assert!(!printed.contains("--token"), "{printed}");
    let stderr = logs.stderr().join("\n");
    assert!(!stderr.contains("no authenticator configured"), "{stderr}");
    run_ok(&mut as_hinted(&hint, None, home.path()));
    let who = run_ok(as_hinted(&hint[..3], None, home.path()).args(["auth", "whoami"]));
    assert!(who.contains("kubernetes-admin"), "{who}");
}

#[test]
#[ignore = "needs kubectl and curl"]
fn an_authenticating_servers_hint_asks_for_a_real_credential() {
    common::require("kubectl");
    common::require("curl");
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(&dir, TOKENS);
    // Over TLS: kubectl with the serving certificate as CA and a token of the file.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress(IpAddr::from([127, 0, 0, 1])));
    let cert = params.self_signed(&key).unwrap();
    let (crt, pem) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&pem, key.serialize_pem()).unwrap();
    let (crt, pem) = (crt.to_str().unwrap(), pem.to_str().unwrap());
    let tls = [
        "--token-auth-file",
        &tokens,
        "--tls-cert-file",
        crt,
        "--tls-private-key-file",
        pem,
    ];
    let (server, logs) = Server::start_logged("127.0.0.1:0", &tls);
    let hint = logs.hint();
    assert_eq!(
        hint,
        [
            "kubectl",
            "--server",
            &server.url,
            "--certificate-authority",
            crt,
            "--token",
            "TOKEN",
            "get",
            "pods",
            "-A"
        ]
    );
    let printed = logs.stdout(2).join("\n");
    assert!(
        printed.contains(&format!("a token of {tokens}")),
        "{printed}"
    );
    assert!(!printed.contains("does not authenticate"), "{printed}");
    assert!(!printed.contains("unused"), "{printed}");
    assert!(
        !logs
            .stderr()
            .join("\n")
            .contains("no authenticator configured")
    );
    // With a token of the file it works; with any other it is upstream's 401.
    run_ok(&mut as_hinted(&hint, Some("root-token"), home.path()));
    let e = run_err(&mut as_hinted(&hint, Some("unused"), home.path()));
    assert!(e.contains("You must be logged in to the server"), "{e}");

    // Over plain HTTP kubectl sends no credentials: the hint is curl with the token.
    let (plain, logs) = Server::start_logged("127.0.0.1:0", &["--token-auth-file", &tokens]);
    let hint = logs.hint();
    let pods = format!("{}/api/v1/pods", plain.url);
    assert_eq!(hint, ["curl", "--oauth2-bearer", "TOKEN", &pods]);
    let printed = logs.stdout(2).join("\n");
    assert!(
        printed.contains("kubectl sends credentials only over TLS"),
        "{printed}"
    );
    let list = run_ok(&mut as_hinted(&hint, Some("root-token"), home.path()));
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["kind"], "PodList", "{list}");
    let denied = run_ok(&mut as_hinted(&hint, Some("alice-token"), home.path()));
    assert!(
        denied.contains(r#"User \"alice\" cannot list resource \"pods\""#),
        "{denied}"
    );
    // What the hint says of kubectl: with a token over plain HTTP it is still anonymous.
    let e = run_err(kubectl(home.path()).args([
        "--server",
        &plain.url,
        "--token",
        "root-token",
        "get",
        "pods",
        "-A",
    ]));
    // (root, in system:masters, would be allowed everything; kubectl shows only "unknown"
    // for the refused discovery.)
    assert!(e.contains("Error from server (Forbidden)"), "{e}");
}

#[test]
#[ignore = "needs kubectl and curl"]
fn without_anonymous_auth_a_request_without_credentials_is_upstreams_401() {
    common::require("kubectl");
    common::require("curl");
    let home = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(&dir, TOKENS);
    let off = Server::start(&["--token-auth-file", &tokens, "--anonymous-auth=false"]);
    for path in [
        "/api/v1/namespaces/default/pods",
        "/healthz",
        "/version",
        "/api",
    ] {
        let r = http(&off.addr, "GET", path, &[], b"");
        assert_eq!(r.status, 401, "{path}");
        assert_eq!(String::from_utf8_lossy(&r.body), UNAUTHORIZED, "{path}");
        assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
    }
    // curl shows the Status as sent.
    let out = run_ok(Command::new("curl").args([
        "-s",
        "-w",
        "\n%{http_code}",
        &format!("{}/api/v1/pods", off.url),
    ]));
    assert_eq!(out, format!("{UNAUTHORIZED}\n401"));
    // kubectl: its discovery is refused, and it asks for credentials.
    let e = run_err(kubectl(home.path()).args(["--server", &off.url, "get", "pods"]));
    assert!(
        e.contains("You must be logged in to the server (the server has asked for the client to provide credentials)"),
        "{e}"
    );
    // A credential is still authenticated (alice, then RBAC's answer).
    let alice = [("Authorization", "Bearer alice-token")];
    let r = http(
        &off.addr,
        "GET",
        "/api/v1/namespaces/default/pods",
        &alice,
        b"",
    );
    assert_eq!(r.status, 403);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains(r#"User "alice""#)
    );
    // The default (anonymous on): the same request is system:anonymous, and RBAC's 403.
    let on = Server::start(&["--token-auth-file", &tokens]);
    let r = http(&on.addr, "GET", "/api/v1/namespaces/default/pods", &[], b"");
    assert_eq!(r.status, 403);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains(r#"User "system:anonymous" cannot list resource "pods""#),
        "{:?}",
        r.json()
    );
}

#[test]
#[ignore = "needs kubectl"]
fn insecure_allow_unauthenticated_serves_a_non_loopback_bind() {
    common::require("kubectl");
    let home = tempfile::tempdir().unwrap();
    let (server, logs) = Server::start_logged("0.0.0.0:0", &["--insecure-allow-unauthenticated"]);
    let stderr = logs.stderr().join("\n");
    assert!(
        stderr.contains("--insecure-allow-unauthenticated"),
        "{stderr}"
    );
    let p = port(&server.addr);
    // Reached through the machine's own address, not only loopback.
    let ip = listwatch_apiserver::security::pki::interface_addresses()
        .into_iter()
        .find(IpAddr::is_ipv4)
        .expect("this machine has a non-loopback IPv4 address");
    for host in [ip.to_string(), "127.0.0.1".to_owned()] {
        let url = format!("http://{host}:{p}");
        let ns = format!("ns-{}", host.replace('.', "-"));
        run_ok(kubectl(home.path()).args(["--server", &url, "create", "namespace", &ns]));
        let who = run_ok(kubectl(home.path()).args(["--server", &url, "auth", "whoami"]));
        assert!(who.contains("system:unsecured"), "{who}");
    }
    // The hint says it does not authenticate, with an address a client can dial.
    let hint = logs.hint();
    assert_eq!(hint[2], format!("http://127.0.0.1:{p}"));
    assert!(logs.stdout(2).join("\n").contains("does not authenticate"));
}

/// The `apiserver_authenticated_user_requests_total` samples: `username` label → count.
fn user_requests(addr: &str) -> std::collections::BTreeMap<String, u64> {
    let r = http(
        addr,
        "GET",
        "/metrics",
        &[("Authorization", "Bearer root-token")],
        b"",
    );
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("apiserver_authenticated_user_requests_total{username=\""))
        .map(|rest| {
            let (label, count) = rest.split_once("\"} ").unwrap();
            (label.to_owned(), count.trim().parse().unwrap())
        })
        .collect()
}

#[test]
fn the_user_metric_counts_authenticated_users_under_a_fixed_set_of_labels() {
    let dir = tempfile::tempdir().unwrap();
    let mut tokens = TOKENS.to_owned();
    for i in 0..40 {
        tokens.push_str(&format!("u{i}-token,user-{i},uid-{i}\n"));
    }
    tokens.push_str("mail-token,dev@example.com,uid-mail\n");
    let tokens = token_file(&dir, &tokens);
    let server = Server::start(&["--token-auth-file", &tokens]);
    let before = user_requests(&server.addr);
    for i in 0..40 {
        let auth = format!("Bearer u{i}-token");
        let r = http(
            &server.addr,
            "GET",
            "/api/v1/namespaces/default/pods",
            &[("Authorization", &auth)],
            b"",
        );
        assert_eq!(r.status, 403, "user-{i} is authenticated, not authorized");
    }
    for _ in 0..3 {
        let r = http(
            &server.addr,
            "GET",
            "/version",
            &[("Authorization", "Bearer mail-token")],
            b"",
        );
        assert_eq!(r.status, 200);
    }
    for _ in 0..2 {
        assert_eq!(http(&server.addr, "GET", "/version", &[], b"").status, 200);
    }
    // A rejected credential authenticates nobody: not counted.
    let r = http(
        &server.addr,
        "GET",
        "/version",
        &[("Authorization", "Bearer nope")],
        b"",
    );
    assert_eq!(r.status, 401);
    let after = user_requests(&server.addr);
    let delta = |label: &str| {
        after.get(label).copied().unwrap_or(0) - before.get(label).copied().unwrap_or(0)
    };
    // 40 users and root's second /metrics read are "other".
    assert_eq!(delta("other"), 41, "{after:?}");
    assert_eq!(delta("email_id"), 3, "{after:?}");
    assert_eq!(delta("system:anonymous"), 2, "{after:?}");
    let fixed = [
        "system:anonymous",
        "system:unsecured",
        "system:admin",
        "kubernetes-admin",
        "serviceaccount",
        "email_id",
        "other",
    ];
    for label in after.keys() {
        assert!(
            fixed.contains(&label.as_str()),
            "unbounded label {label:?}: {after:?}"
        );
    }
    assert!(!after.keys().any(|l| l.starts_with("user-")), "{after:?}");
}

#[test]
fn a_public_address_without_security_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
        .args(["--bind", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("refusing to serve 0.0.0.0:0 without TLS and an authenticator"),
        "{e}"
    );
}

#[test]
fn a_public_address_with_tls_but_no_authenticator_is_refused() {
    // TLS and an authorization mode identify nobody: every client would be anonymous.
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (crt, pem) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&pem, key.serialize_pem()).unwrap();
    for mode in ["RBAC", "AlwaysAllow"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
            .args(["--bind", "0.0.0.0:0", "--authorization-mode", mode])
            .arg("--tls-cert-file")
            .arg(&crt)
            .arg("--tls-private-key-file")
            .arg(&pem)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A server that starts would serve forever: give it until the deadline to refuse.
        let deadline = Instant::now() + PATIENCE;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut e = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut e).unwrap();
        assert!(
            status.is_some_and(|s| !s.success()),
            "{mode}: served 0.0.0.0 with no authenticator: {e}"
        );
        assert!(
            e.contains("refusing to serve 0.0.0.0:0 without TLS and an authenticator"),
            "{mode}: {e}"
        );
    }
}

/// Opens a watch as `token` and returns the open connection and the status code.
fn watch_as(addr: &str, token: &str) -> (std::net::TcpStream, u16) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    write!(
        s,
        "GET /api/v1/namespaces/default/configmaps?watch=1 HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).unwrap(),
            1,
            "closed before the response head"
        );
        head.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    (s, status)
}

#[test]
fn fairness_keys_on_the_authenticated_user() {
    // Both users come from the same address: with one watch per client, root's second watch
    // is refused while carol (another user) still gets one.
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let server = Server::start(&[
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--max-watches-per-client",
        "1",
    ]);
    let (_first, code) = watch_as(&server.addr, "root-token");
    assert_eq!(code, 200);
    let (_second, code) = watch_as(&server.addr, "root-token");
    assert_eq!(code, 429, "the same user's second watch");
    let (_other, code) = watch_as(&server.addr, "carol-token");
    assert_eq!(
        code, 200,
        "another user from the same address has her own share"
    );
}

#[test]
fn a_closed_stdout_does_not_stop_the_server() {
    // The announcement and hint go to stdout; a reader that went away (`| head -1`, a
    // supervisor) makes every write fail with EPIPE, which must not end the server.
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
        .args(["--bind", "127.0.0.1:0", "--log-level", "info"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            eprintln!("{line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // "serving" is logged once the announcement has been written.
    let deadline = Instant::now() + PATIENCE;
    let addr = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match rx.recv_timeout(left) {
            Ok(l) => l,
            Err(e) => {
                let status = child.try_wait().unwrap();
                let _ = child.kill();
                panic!("no \"serving\" line ({e}); exit status {status:?}");
            }
        };
        if let Some(rest) = line.split_once(": serving addr=").map(|(_, r)| r) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    let alive = child.try_wait().unwrap().is_none();
    let ready = alive && http(&addr, "GET", "/readyz", &[], b"").status == 200;
    let _ = child.kill();
    let _ = child.wait();
    assert!(alive, "the server exited after writing to a closed stdout");
    assert!(ready, "/readyz");
}
