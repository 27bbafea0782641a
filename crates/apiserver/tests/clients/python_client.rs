//! The Python `kubernetes` client against the built server: list, watch from a resource
//! version, 410 handling, a percent-encoded name (tests/python/client_checks.py, over
//! HTTP/1.1); and creates, a list and a watch receiving events over HTTP/2 on TLS with the
//! `--pki-dir` admin certificate (tests/python/http2_checks.py, urllib3's HTTP/2 with a
//! streaming response: the script's doc says why urllib3's own cannot carry a watch).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use common::metrics::{H1_REQUESTS, H2_REQUESTS, sum_of, tls_metrics};
use common::python::{python, run_script};
use common::{PATIENCE, Server};

/// Panics unless Python can import `module`: `cargo xtask test` installs the kubernetes
/// client and `h2`.
fn require_python_module(module: &str, pip: &str) {
    let ok = Command::new(python())
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "{} cannot import the `{module}` module: `cargo xtask test` installs it \
         (or pip install '{pip}')",
        python()
    );
}

fn require_python_client() {
    require_python_module("kubernetes", "kubernetes");
}

fn script(name: &str) -> String {
    format!("{}/tests/python/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
#[ignore = "needs the Python kubernetes client"]
fn python_client_lists_watches_and_handles_410() {
    require_python_client();
    let server = Server::start(common::SHORT_HISTORY);
    let out = run_script(&[&script("client_checks.py"), &server.url], 2 * PATIENCE);
    assert!(
        out.status.success(),
        "python checks failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python client checks passed"));
}

#[test]
#[ignore = "needs the Python kubernetes client and h2"]
fn python_client_creates_lists_and_watches_over_http2_on_tls() {
    require_python_client();
    require_python_module("h2", "h2>=4,<5");
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let server = Server::start(&["--pki-dir", pki.to_str().unwrap()]);
    assert!(server.url.starts_with("https://"), "{}", server.url);
    let before = tls_metrics(&server.addr, &pki);
    let out = run_script(
        &[
            &script("http2_checks.py"),
            &server.url,
            pki.to_str().unwrap(),
        ],
        2 * PATIENCE,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("python http2 checks passed"),
        "python http2 checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests: f64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("requests: "))
        .expect("the script counts its requests")
        .parse()
        .unwrap();
    // Namespace, 5 creates, 2 lists, the watch.
    assert!(requests >= 9.0, "{stdout}");
    // The server saw every request of the client as HTTP/2, and as HTTP/1.1 only the one
    // metrics read below.
    let after = tls_metrics(&server.addr, &pki);
    assert_eq!(
        sum_of(&after, H2_REQUESTS) - sum_of(&before, H2_REQUESTS),
        requests,
        "{after}"
    );
    assert_eq!(
        sum_of(&after, H1_REQUESTS) - sum_of(&before, H1_REQUESTS),
        1.0,
        "{after}"
    );
}

/// Issue 33 item 1: the Python client's `shard_selector` (KEP-5866) — two shard lists split
/// a namespace, each echoes `metadata.shardInfo.selector`, each shard's watch sees only its
/// objects' changes, a malformed selector is a 400 (tests/python/sharded_checks.py).
#[test]
#[ignore = "needs the Python kubernetes client"]
fn python_client_lists_and_watches_one_shard() {
    require_python_client();
    let server = Server::start(&[]);
    let out = run_script(&[&script("sharded_checks.py"), &server.url], 2 * PATIENCE);
    assert!(
        out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("python shard checks passed"),
        "python shard checks failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
