//! Raw HTTP against the built server: every error path answers a Kubernetes Status with
//! upstream's code and reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http};
use serde_json::json;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn post(addr: &str, path: &str, body: &serde_json::Value) -> common::Response {
    http(addr, "POST", path, &[JSON], body.to_string().as_bytes())
}

fn assert_status(resp: &common::Response, code: u16, reason: &str) {
    assert_eq!(
        resp.status,
        code,
        "{:?}",
        String::from_utf8_lossy(&resp.body)
    );
    let s = resp.json();
    assert_eq!(s["kind"], "Status");
    assert_eq!(s["apiVersion"], "v1");
    assert_eq!(s["status"], "Failure");
    assert_eq!(s["code"], code);
    assert_eq!(s["reason"], reason, "{s}");
    assert_eq!(resp.header("content-type"), Some("application/json"));
}

#[test]
fn every_error_path_is_a_status_with_upstreams_code_and_reason() {
    let server = Server::start(common::SHORT_HISTORY);
    let a = server.addr.as_str();
    assert_eq!(
        post(a, "/api/v1/namespaces", &json!({"metadata":{"name":"e2e"}})).status,
        201
    );
    let pods = "/api/v1/namespaces/e2e/pods";
    let pod = json!({"metadata":{"name":"p"},"spec":{"containers":[{"name":"c","image":"x"}]}});
    let created = post(a, pods, &pod).json();

    assert_status(
        &http(
            a,
            "GET",
            &format!("{pods}?labelSelector=app%20in%20(a"),
            &[],
            b"",
        ),
        400,
        "BadRequest",
    );
    assert_status(
        &http(
            a,
            "GET",
            &format!("{pods}?fieldSelector=spec.nodeName"),
            &[],
            b"",
        ),
        400,
        "BadRequest",
    );
    assert_status(
        &http(a, "GET", &format!("{pods}?resourceVersion=-5"), &[], b""),
        400,
        "BadRequest",
    );
    assert_status(
        &http(a, "GET", &format!("{pods}?limit=ten"), &[], b""),
        400,
        "BadRequest",
    );
    assert_status(
        &http(
            a,
            "GET",
            &format!("{pods}?watch=1&sendInitialEvents=true"),
            &[],
            b"",
        ),
        400,
        "BadRequest",
    );
    assert_status(
        &http(
            a,
            "GET",
            &format!("{pods}?continue=bm90LWEtdG9rZW4"),
            &[],
            b"",
        ),
        400,
        "BadRequest",
    );

    assert_status(
        &http(a, "GET", &format!("{pods}/missing"), &[], b""),
        404,
        "NotFound",
    );
    assert_status(
        &post(a, "/api/v1/namespaces/nope/pods", &pod),
        404,
        "NotFound",
    );
    assert_status(&post(a, pods, &pod), 409, "AlreadyExists");
    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["metadata"]["labels"] = json!({"x":"y"});
    assert_status(
        &http(
            a,
            "PUT",
            &format!("{pods}/p"),
            &[JSON],
            stale.to_string().as_bytes(),
        ),
        409,
        "Conflict",
    );
    let wrong_uid = json!({"preconditions":{"uid":"nope"}});
    assert_status(
        &http(
            a,
            "DELETE",
            &format!("{pods}/p"),
            &[JSON],
            wrong_uid.to_string().as_bytes(),
        ),
        409,
        "Conflict",
    );
    assert_status(
        &post(a, pods, &json!({"metadata":{"name":"Not_Valid"}})),
        422,
        "Invalid",
    );

    let huge = vec![b' '; 3 * 1024 * 1024 + 1];
    assert_status(
        &http(a, "POST", pods, &[JSON], &huge),
        413,
        "RequestEntityTooLarge",
    );
    assert_status(
        &http(a, "PUT", pods, &[JSON], b"{}"),
        405,
        "MethodNotAllowed",
    );
    assert_status(
        &http(a, "POST", "/api/v1/pods", &[JSON], b"{}"),
        405,
        "MethodNotAllowed",
    );
    assert_status(
        &http(
            a,
            "GET",
            pods,
            &[("Accept", "application/vnd.kubernetes.protobuf")],
            b"",
        ),
        406,
        "NotAcceptable",
    );
    assert_status(
        &http(a, "POST", pods, &[("Content-Type", "text/plain")], b"x"),
        415,
        "UnsupportedMediaType",
    );
    assert_status(
        &http(
            a,
            "PATCH",
            &format!("{pods}/p"),
            &[("Content-Type", "application/xml")],
            b"<x/>",
        ),
        415,
        "UnsupportedMediaType",
    );

    // Too old: write past the retained history, then ask for revision 2.
    for i in 0..60 {
        let r = post(
            a,
            "/api/v1/namespaces/e2e/configmaps",
            &json!({"metadata":{"name":format!("c{i}")}}),
        );
        assert_eq!(r.status, 201);
    }
    let expired = http(
        a,
        "GET",
        "/api/v1/namespaces/e2e/configmaps?resourceVersion=2&resourceVersionMatch=Exact",
        &[],
        b"",
    );
    assert_status(&expired, 410, "Expired");
    assert!(
        expired.json()["message"]
            .as_str()
            .unwrap()
            .contains("too old resource version")
    );
    let watch = http(
        a,
        "GET",
        "/api/v1/namespaces/e2e/configmaps?watch=1&resourceVersion=2&timeoutSeconds=5",
        &[],
        b"",
    );
    let status = if watch.status == 200 {
        let frames = watch.lines();
        assert_eq!(frames.len(), 1, "one ERROR frame, then the end: {frames:?}");
        assert_eq!(frames[0]["type"], "ERROR");
        frames[0]["object"].clone()
    } else {
        watch.json()
    };
    assert_eq!(
        (status["code"].as_u64(), status["reason"].as_str()),
        (Some(410), Some("Expired"))
    );
}

#[test]
fn limits_answer_429_with_retry_after_and_watch_headers_come_at_once() {
    let server = Server::start(&["--max-watches", "1"]);
    // The response head of a watch arrives before any event: reading it proves the watch
    // holds the only slot.
    // From the current version: the server's first revision comes from the wall clock.
    let rv = http(&server.addr, "GET", "/api/v1/namespaces", &[], b"").json()["metadata"]
        ["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_held, status) = common::open_stream(
        &server.addr,
        &format!("/api/v1/namespaces?watch=1&resourceVersion={rv}"),
    );
    assert_eq!(status, 200);
    let refused = http(&server.addr, "GET", "/api/v1/pods?watch=1", &[], b"");
    assert_status(&refused, 429, "TooManyRequests");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.json()["details"]["retryAfterSeconds"], 1);
}

/// Reads one HTTP/1.1 response (head and `Content-Length` body) from `stream`.
fn read_response(stream: &mut std::net::TcpStream) -> (u16, Vec<u8>) {
    use std::io::Read;
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "connection closed");
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let status: u16 = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .unwrap();
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).unwrap();
    (status, body)
}

/// An answer given before the body is read (here 403: the insecure mode refuses a `Host`
/// that is not its own, before any handler) keeps the connection usable: the server reads the
/// rest of a small body after the handler, as Go's server does. Without it the connection is
/// closed with the body unread, the kernel resets it, and a client still sending may lose the
/// answer (curl's `000`, the flake of `testenv kubectl_with_the_kubeconfig_works_…`).
#[test]
fn an_early_answer_keeps_the_connection_when_the_body_is_small() {
    use std::io::Write;
    let server = Server::start(&[]);
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let body = format!("{{\"a\":\"{}\"}}", "x".repeat(100_000));
    for _ in 0..3 {
        write!(
            stream,
            "POST /api/v1/namespaces/default/nonexistents HTTP/1.1\r\nHost: x\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let (status, answer) = read_response(&mut stream);
        assert!(
            status == 403 || status == 404,
            "{status} {}",
            String::from_utf8_lossy(&answer)
        );
    }
    // Still the same connection: a request after three early answers is served.
    write!(stream, "GET /version HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let (status, answer) = read_response(&mut stream);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&answer));
}

/// A body declared larger than the drain limit is not read after an early answer: the
/// connection closes (the server does not take in what it refused).
#[test]
fn an_early_answer_does_not_read_a_large_body() {
    use std::io::{Read, Write};
    let server = Server::start(&[]);
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    // Declares 10 MiB, sends only the head: the answer comes, then the server closes.
    write!(
        stream,
        "POST /api/v1/namespaces/default/nonexistents HTTP/1.1\r\nHost: x\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        10 << 20
    )
    .unwrap();
    let (status, _) = read_response(&mut stream);
    assert!(status == 403 || status == 404, "{status}");
    let mut rest = Vec::new();
    // EOF (or a reset) rather than waiting for the 10 MiB.
    let _ = stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
}
