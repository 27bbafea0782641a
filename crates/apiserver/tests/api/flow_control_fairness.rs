//! Flow control through the binary (red team rt5, HIGH): a user with read access only stalls
//! wide lists — ten 1 MB ConfigMaps, over connections whose answers it never reads — and
//! must not hold the whole read-only level while others wait: it holds at most half of it
//! (`flowcontrol::flow_cap`), so another user's list is answered; and when limited users
//! together hold every seat, an administrator (`system:masters`, upstream's `exempt`
//! FlowSchema) is still answered, never queued. Over TLS with static bearer tokens.
//! Without the per-flow cap bob's list waited 15 s and got a 429; without the exemption so
//! did the administrator's GET.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use common::{PATIENCE, Response, Server, connect_with, parse_response};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

const TOKENS: &str = "admin-token,admin,uid-admin,system:masters\n\
                      alice-token,alice,uid-alice\n\
                      bob-token,bob,uid-bob\n\
                      carol-token,carol,uid-carol\n";

/// Seats of the read-only level: a list takes at most 5 of them, a flow at most 15.
const SEATS: &str = "30";
/// Lists each limited user stalls: more than fill the level (6 × 5 seats).
const STALLED: usize = 8;

type Tls = rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>;

/// A TLS connection to the server trusting its generated CA, with a receive buffer of
/// `recv_buffer` bytes when given (a client that stops reading fills it at once).
fn tls(addr: &str, pki: &Path, recv_buffer: Option<u32>) -> Tls {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki.join("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let ip: std::net::IpAddr = addr.rsplit_once(':').unwrap().0.parse().unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), ServerName::from(ip)).unwrap();
    rustls::StreamOwned::new(conn, connect_with("127.0.0.1", addr, recv_buffer))
}

fn head(addr: &str, method: &str, path: &str, token: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// One request as `token`, its whole answer read (each read bounded by [`PATIENCE`]).
fn call(s: &Server, pki: &Path, method: &str, path: &str, token: &str, body: &[u8]) -> Response {
    let mut t = tls(&s.addr, pki, None);
    t.write_all(&head(&s.addr, method, path, token, body))
        .unwrap();
    let mut out = Vec::new();
    // A close without close_notify is fine: the response is what was read.
    let _ = t.read_to_end(&mut out);
    parse_response(&out)
}

/// Sends a list as `token` and never reads its answer: the connection is returned open.
fn stall(s: &Server, pki: &Path, path: &str, token: &str) -> Tls {
    let mut t = tls(&s.addr, pki, Some(4096));
    t.write_all(&head(&s.addr, "GET", path, token, b""))
        .unwrap();
    t.flush().unwrap();
    t
}

/// The sum of the samples of `series` (a metric name with its labels' opening) in `text`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn metrics(s: &Server, pki: &Path) -> String {
    let r = call(s, pki, "GET", "/metrics", "admin-token", b"");
    assert_eq!(r.status, 200);
    String::from_utf8(r.body).unwrap()
}

/// Waits (at most [`PATIENCE`]) until the read-only level counts `n` requests, executing or
/// queued; returns the metrics then.
fn wait_for_read_only_requests(s: &Server, pki: &Path, n: f64) -> String {
    let start = Instant::now();
    loop {
        let text = metrics(s, pki);
        let executing = sample(
            &text,
            "apiserver_flowcontrol_current_executing_requests{priority_level=\"readOnly\"}",
        );
        let queued = sample(
            &text,
            "apiserver_flowcontrol_current_inqueue_requests{priority_level=\"readOnly\"}",
        );
        if executing + queued >= n {
            return text;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{executing} executing and {queued} queued, want {n}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_user_stalling_wide_lists_holds_half_the_seats_and_admins_are_exempt() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let s = Server::start(&[
        "--pki-dir",
        pki.to_str().unwrap(),
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--max-requests-inflight",
        SEATS,
    ]);
    let admin = |method: &str, path: &str, body: &str| {
        call(&s, &pki, method, path, "admin-token", body.as_bytes())
    };
    let role = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole",
        "metadata":{"name":"cm-reader"},
        "rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list"]}]}"#;
    let r = admin(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        role,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let binding = r#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding",
        "metadata":{"name":"cm-readers"},
        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cm-reader"},
        "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"alice"},
                    {"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"bob"},
                    {"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"carol"}]}"#;
    let r = admin(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        binding,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    for i in 0..10 {
        let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("f{i}")}, "data": {"d": "x".repeat(1_000_000)}});
        let r = admin(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &cm.to_string(),
        );
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
    let list = "/api/v1/namespaces/default/configmaps?resourceVersion=0";

    // alice stalls more lists than the level holds: she gets half of it, the rest waits.
    let mut stalled: Vec<Tls> = (0..STALLED)
        .map(|_| stall(&s, &pki, list, "alice-token"))
        .collect();
    let text = wait_for_read_only_requests(&s, &pki, STALLED as f64);
    assert_eq!(
        sample(
            &text,
            "apiserver_flowcontrol_current_executing_seats{priority_level=\"readOnly\"}"
        ),
        15.0,
        "alice holds her cap"
    );
    // bob's list (its estimate is wide too) and the admin's read are answered.
    let r = call(
        &s,
        &pki,
        "GET",
        &format!("{list}&limit=1"),
        "bob-token",
        b"",
    );
    assert_eq!(r.status, 200, "bob: {}", String::from_utf8_lossy(&r.body));
    let r = admin("GET", "/api/v1/namespaces", "");
    assert_eq!(r.status, 200, "admin: {}", String::from_utf8_lossy(&r.body));

    // carol stalls hers too: with alice, every seat is held.
    stalled.extend((0..STALLED).map(|_| stall(&s, &pki, list, "carol-token")));
    let text = wait_for_read_only_requests(&s, &pki, 2.0 * STALLED as f64);
    assert_eq!(
        sample(
            &text,
            "apiserver_flowcontrol_current_executing_seats{priority_level=\"readOnly\"}"
        ),
        30.0,
        "the level is full"
    );
    // The admin is exempt: answered at once, in the level `exempt`.
    let r = admin("GET", "/api/v1/namespaces", "");
    assert_eq!(r.status, 200, "admin: {}", String::from_utf8_lossy(&r.body));
    let r = admin("GET", "/api/v1/namespaces/default/configmaps?limit=1", "");
    assert_eq!(r.status, 200, "admin's list");
    let text = metrics(&s, &pki);
    assert!(
        text.contains(
            "apiserver_flowcontrol_current_executing_requests{priority_level=\"exempt\"}"
        ),
        "the exempt level in the metrics"
    );
    drop(stalled);
}
