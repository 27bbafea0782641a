//! The unauthenticated loopback mode (no authenticator: every client is a cluster
//! administrator) refuses what a web page in a browser on the machine could send: a request
//! addressed to another host name (DNS rebinding) and a request from a foreign `Origin`
//! (a cross-site websocket watch, a cross-site POST) — 403 with a Status naming the reason,
//! before any handler; raw HTTP/1.1 and a websocket handshake against the binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{PATIENCE, Server, http, parse_response};

/// One request with the given Host header (and extra headers), read to the end.
fn with_host(
    addr: &str,
    method: &str,
    path: &str,
    host: &str,
    extra: &[(&str, &str)],
    body: &[u8],
) -> common::Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

fn refused(r: &common::Response, needle: &str) {
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 403, "{body}");
    let v = r.json();
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("Status"), Some("Forbidden")),
        "{body}"
    );
    assert!(v["message"].as_str().unwrap().contains(needle), "{body}");
}

/// The websocket handshake of a watch; returns the response head.
fn websocket_watch(addr: &str, origin: Option<&str>) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let origin = origin
        .map(|o| format!("Origin: {o}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET /api/v1/secrets?watch=1&timeoutSeconds=1 HTTP/1.1\r\nHost: {addr}\r\n{origin}\
         Upgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// Issue 23 item 5: `Host: evil.example.com` listed Secrets and a websocket watch with
/// `Origin: http://evil.example.com` got 101.
#[test]
fn the_unauthenticated_mode_refuses_foreign_hosts_and_origins() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    let port = addr.rsplit_once(':').unwrap().1;
    let secret =
        br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"k":"v"}}"#;
    let json = ("Content-Type", "application/json");
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces/default/secrets",
        &[json],
        secret,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    // DNS rebinding: the attacker's name, with or without the port.
    for host in [
        "evil.example.com".to_owned(),
        format!("evil.example.com:{port}"),
        format!("127.0.0.1.evil.example.com:{port}"),
    ] {
        let r = with_host(addr, "GET", "/api/v1/secrets", &host, &[], b"");
        refused(&r, "DNS rebinding");
        assert!(
            !String::from_utf8_lossy(&r.body).contains("\"k\""),
            "a Secret leaked"
        );
    }
    // Local names and addresses, with or without the port.
    for host in [
        "localhost".to_owned(),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("[::1]:{port}"),
        "[::1]".to_owned(),
    ] {
        let r = with_host(addr, "GET", "/api/v1/secrets", &host, &[], b"");
        assert_eq!(
            r.status,
            200,
            "{host}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }

    // A cross-site request: refused, and nothing is written.
    let evil = ("Origin", "http://evil.example.com");
    let other = br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"planted"}}"#;
    let r = with_host(
        addr,
        "POST",
        "/api/v1/namespaces/default/secrets",
        "localhost",
        &[json, evil],
        other,
    );
    refused(&r, "Origin \"http://evil.example.com\"");
    assert_eq!(
        http(
            addr,
            "GET",
            "/api/v1/namespaces/default/secrets/planted",
            &[],
            b""
        )
        .status,
        404
    );
    for origin in [
        "null",
        "https://evil.example.com:443",
        "http://localhost.evil.example.com",
    ] {
        let r = with_host(
            addr,
            "GET",
            "/api/v1/secrets",
            "localhost",
            &[("Origin", origin)],
            b"",
        );
        refused(&r, "Origin");
    }
    // A local page may.
    let r = with_host(
        addr,
        "GET",
        "/api/v1/secrets",
        "localhost",
        &[("Origin", "http://localhost:3000")],
        b"",
    );
    assert_eq!(r.status, 200);

    // The cross-site websocket watch: 403, never 101.
    let head = websocket_watch(addr, Some("http://evil.example.com"));
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let head = websocket_watch(addr, Some(&format!("http://127.0.0.1:{port}")));
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let head = websocket_watch(addr, None);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
}
