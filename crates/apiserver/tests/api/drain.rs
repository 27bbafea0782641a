//! Draining a replica for a load balancer (docs/deployment.md): after SIGTERM with
//! `--shutdown-delay-duration`, `/readyz` fails first while every request — reads, writes,
//! new and open watches — is still served; only when the delay is over (or a second signal
//! cuts it short) do open watches end, cleanly, and the process exit with success.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Read;
use std::process::Command;
use std::time::Instant;

use common::{PATIENCE, Server, http, open_stream};

const JSON_HEADER: (&str, &str) = ("Content-Type", "application/json");

fn sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn readyz_fails_first_then_requests_and_watches_end() {
    // A delay far longer than the test needs: the second signal ends it.
    let server = Server::start(&["--shutdown-delay-duration", "600"]);
    let addr = server.addr.clone();
    assert_eq!(http(&addr, "GET", "/readyz", &[], b"").status, 200);
    let body = br#"{"metadata":{"name":"d"}}"#;
    assert_eq!(
        http(&addr, "POST", "/api/v1/namespaces", &[JSON_HEADER], body).status,
        201
    );
    let (mut watch, status) = open_stream(
        &addr,
        "/api/v1/namespaces/d/configmaps?watch=1&resourceVersion=0",
    );
    assert_eq!(status, 200);

    sigterm(server.pid());
    let deadline = Instant::now() + PATIENCE;
    let not_ready = loop {
        let r = http(&addr, "GET", "/readyz", &[], b"");
        if r.status != 200 {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz kept answering 200 after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(not_ready.status, 500);
    assert!(
        String::from_utf8_lossy(&not_ready.body).contains("[-]shutdown failed: reason withheld"),
        "{:?}",
        String::from_utf8_lossy(&not_ready.body)
    );
    // The reason is the check's own path's (upstream's per-check endpoints).
    let why = http(&addr, "GET", "/readyz/shutdown", &[], b"");
    assert_eq!(
        (why.status, String::from_utf8_lossy(&why.body).as_ref()),
        (500, "internal server error: shutting down")
    );
    // Still serving: reads, writes (seen by the open watch) and new watches.
    let livez = http(&addr, "GET", "/livez", &[], b"");
    assert_eq!(livez.status, 200);
    assert_eq!(
        http(&addr, "GET", "/api/v1/namespaces", &[], b"").status,
        200
    );
    let cm = br#"{"metadata":{"name":"during-drain"}}"#;
    let made = http(
        &addr,
        "POST",
        "/api/v1/namespaces/d/configmaps",
        &[JSON_HEADER],
        cm,
    );
    assert_eq!(made.status, 201, "{}", String::from_utf8_lossy(&made.body));
    let (_second, status) = open_stream(&addr, "/api/v1/namespaces/d/configmaps?watch=1");
    assert_eq!(status, 200);

    // The second signal ends the delay: the open watch ends (after delivering the write
    // made during the drain) with the chunked stream's terminator, and the server exits 0.
    sigterm(server.pid());
    let mut rest = Vec::new();
    watch
        .read_to_end(&mut rest)
        .expect("the watch ends, not times out");
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("during-drain"), "{text}");
    assert!(
        text.ends_with("0\r\n\r\n"),
        "a clean end of the stream: {text:?}"
    );
    assert!(server.wait_exit(), "the server exits with success");
}
