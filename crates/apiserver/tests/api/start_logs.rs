//! What the server logs at start (issue 30 item 9): a write-ahead log replay's progress,
//! the storage in words, one summary line for the bootstrap RBAC policy, `--pki-dir` reuse.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http};

fn count(lines: &[String], needle: &str) -> usize {
    lines.iter().filter(|l| l.contains(needle)).count()
}

#[test]
fn a_restart_logs_the_replay_and_the_storage_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap();
    let args = ["--data-dir", data_s, "--log-level", "info"];
    {
        let (server, _logs) = Server::start_logged("127.0.0.1:0", &args);
        let r = http(
            &server.addr,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("Content-Type", "application/json")],
            br#"{"metadata":{"name":"kept"}}"#,
        );
        assert_eq!(r.status, 201);
        assert!(server.terminate());
    }
    let (server, logs) = Server::start_logged("127.0.0.1:0", &args);
    let r = http(
        &server.addr,
        "GET",
        "/api/v1/namespaces/default/configmaps/kept",
        &[],
        b"",
    );
    assert_eq!(r.status, 200);
    // The address is announced on stdout before the `serving` line reaches stderr (more so
    // with one `watch cache ready` line per served kind before it): wait for it.
    let deadline = std::time::Instant::now() + common::PATIENCE;
    let lines = loop {
        let lines = logs.stderr();
        if lines.iter().any(|l| l.contains(" serving ")) || std::time::Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let replay = lines
        .iter()
        .position(|l| l.contains("replaying the write-ahead log") && l.contains("segments="))
        .unwrap_or_else(|| panic!("no replay start line: {lines:#?}"));
    let opened = lines
        .iter()
        .position(|l| l.contains("embedded store opened") && l.contains("replayed_writes="))
        .unwrap_or_else(|| panic!("no replay end line: {lines:#?}"));
    assert!(replay < opened, "{lines:#?}");
    let serving = lines
        .iter()
        .find(|l| l.contains(" serving "))
        .unwrap_or_else(|| panic!("no serving line: {lines:#?}"));
    assert!(
        serving.contains(&format!("storage=embedded (durable, {data_s})")),
        "{serving}"
    );
}

#[test]
fn the_bootstrap_policy_is_one_line_and_a_reused_pki_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let args = ["--pki-dir", pki.to_str().unwrap(), "--log-level", "info"];
    {
        let (server, logs) = Server::start_logged("127.0.0.1:0", &args);
        let lines = logs.stderr();
        assert_eq!(
            count(&lines, "bootstrap policy reconciled"),
            1,
            "{lines:#?}"
        );
        assert_eq!(count(&lines, "--pki-dir: created"), 1, "{lines:#?}");
        assert!(server.terminate());
    }
    let (_server, logs) = Server::start_logged("127.0.0.1:0", &args);
    let lines = logs.stderr();
    assert_eq!(
        count(&lines, "reusing the certificates and keys of --pki-dir"),
        1,
        "{lines:#?}"
    );
    assert_eq!(count(&lines, "--pki-dir: created"), 0, "{lines:#?}");
    // In memory, so the policy is written again: still one line.
    assert_eq!(
        count(&lines, "bootstrap policy reconciled"),
        1,
        "{lines:#?}"
    );
}

/// A SIGTERM sent the moment the server announces its address stops it. The server used to
/// make a new signal listener for each wait: one sent between the wait for readiness and
/// the wait while serving was swallowed (tokio had replaced the default action) and the
/// server never stopped — start_logs' PKI test hung on it about 1 run in 8.
#[test]
fn a_sigterm_right_after_the_announcement_stops_the_server() {
    for round in 0..24 {
        let server = Server::start(&[]);
        assert!(server.terminate(), "round {round}: the server did not stop");
    }
}
