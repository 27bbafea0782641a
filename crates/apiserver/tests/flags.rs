//! Numeric flags are checked before anything starts: a bad value is a usage error (exit
//! code 2, a message naming the flag), and 0 means "no limit" where upstream's flag does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::Instant;

use common::{PATIENCE, Server, http, open_stream};

/// Runs the binary with `args`; returns its exit code and stderr. Kills it (and fails) if
/// it is still running after [`PATIENCE`], i.e. if it accepted the flags and started.
fn exit_of(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"));
    if !args.iter().any(|a| a.starts_with("--bind")) {
        cmd.args(["--bind", "127.0.0.1:0"]);
    }
    let mut child = cmd
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?} was accepted: the server started");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_bad_numeric_flag_is_a_usage_error_naming_the_flag() {
    let cases: &[(&str, &str)] = &[
        // Upstream accepts these zeros and then times every request / watch out at once.
        ("--request-timeout", "0"),
        ("--min-request-timeout", "0"),
        ("--request-timeout", "-1"),
        ("--request-timeout", "1m"),
        ("--min-request-timeout", "999999999999"),
        ("--shutdown-grace-period", "-1"),
        ("--shutdown-grace-period", "forever"),
        ("--max-requests-inflight", "-1"),
        ("--max-requests-inflight", "1e3"),
        ("--max-mutating-requests-inflight", "99999999999999999999"),
        ("--max-watches", "-5"),
        ("--max-watches-per-client", "x"),
        ("--max-queued-requests-per-client", "0"),
        ("--request-workers", "-1"),
        ("--request-workers", "1025"),
        ("--max-buffered-request-bytes", "-1"),
        ("--max-connections", "2147483648"),
        ("--http2-max-streams-per-connection", "-1"),
        ("--http2-max-streams-per-connection", "2147483648"),
        ("--read-header-timeout", "0"),
        ("--idle-connection-timeout", "0"),
        ("--write-stall-timeout", "0"),
        ("--max-tls-handshakes", "-1"),
        ("--tls-handshake-timeout", "0"),
        ("--embedded-retain-revisions", "-1"),
        ("--embedded-retain-window", "1e9"),
        ("--embedded-retain-bytes", "-1"),
        ("--embedded-max-object-bytes", "-1"),
        ("--etcd-max-request-bytes", "0"),
        ("--etcd-compaction-interval", "-1"),
        ("--etcd-compaction-interval", "5m"),
        ("--audit-log-maxsize", "-1"),
        ("--audit-log-maxbackup", "many"),
        ("--bind", "127.0.0.1:99999"),
    ];
    for (flag, value) in cases {
        // `--flag=value`, so that a negative number is a value, not a flag.
        let (code, stderr) = exit_of(&[&format!("{flag}={value}")]);
        assert_eq!(code, Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{flag}")),
            "{flag} {value}: {stderr}"
        );
    }
}

#[test]
fn zero_means_no_limit_for_the_limit_flags() {
    let server = Server::start(&[
        "--max-requests-inflight",
        "0",
        "--max-mutating-requests-inflight",
        "0",
        "--max-watches",
        "0",
        "--max-watches-per-client",
        "0",
        "--max-connections",
        "0",
        "--max-buffered-request-bytes",
        "0",
        "--max-tls-handshakes",
        "0",
    ]);
    let r = http(&server.addr, "GET", "/api/v1/namespaces", &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = http(
        &server.addr,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        br#"{"metadata":{"name":"a"}}"#,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let (_watch, code) = open_stream(&server.addr, "/api/v1/namespaces?watch=1");
    assert_eq!(code, 200);
}

/// A ConfigMap whose `data` holds `bytes` bytes.
fn configmap(name: &str, bytes: usize) -> Vec<u8> {
    serde_json::json!({"metadata": {"name": name}, "data": {"k": "x".repeat(bytes)}})
        .to_string()
        .into_bytes()
}

#[test]
fn the_embedded_object_limit_is_a_flag_and_zero_lifts_it() {
    let cms = "/api/v1/namespaces/default/configmaps";
    let ct = [("Content-Type", "application/json")];
    let server = Server::start(&["--embedded-max-object-bytes", "8192"]);
    let r = http(&server.addr, "POST", cms, &ct, &configmap("small", 4096));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = http(&server.addr, "POST", cms, &ct, &configmap("big", 10_000));
    assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        String::from_utf8_lossy(&r.body).contains("8192"),
        "the Status names the limit: {}",
        String::from_utf8_lossy(&r.body)
    );
    let r = http(&server.addr, "GET", &format!("{cms}/big"), &[], b"");
    assert_eq!(r.status, 404, "nothing was written");

    // 0: no storage limit; the request body limit (3 MiB) still holds.
    let server = Server::start(&["--embedded-max-object-bytes", "0"]);
    let r = http(&server.addr, "POST", cms, &ct, &configmap("big", 2 << 20));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// Issue 23 item 7: etcd TLS flags with a plain `http://` endpoint are refused at start
/// with a message naming the endpoint; before, the TLS settings were ignored for it and
/// every object went to etcd in clear.
#[test]
fn etcd_tls_flags_with_a_plain_http_endpoint_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).unwrap();
    let (ca_file, key_file) = (dir.path().join("ca.crt"), dir.path().join("client.key"));
    std::fs::write(&ca_file, ca.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();
    let (ca_file, key_file) = (ca_file.to_str().unwrap(), key_file.to_str().unwrap());
    let cases: &[&[&str]] = &[
        &[
            "--etcd-servers",
            "http://127.0.0.1:1",
            "--etcd-cafile",
            ca_file,
        ],
        &[
            "--etcd-servers",
            "https://127.0.0.1:1,http://127.0.0.1:2",
            "--etcd-cafile",
            ca_file,
            "--etcd-certfile",
            ca_file,
            "--etcd-keyfile",
            key_file,
        ],
        // The default endpoint is plain http.
        &["--etcd-cafile", ca_file],
    ];
    for extra in cases {
        let mut args = vec!["--storage", "etcd"];
        args.extend_from_slice(extra);
        let (code, stderr) = exit_of(&args);
        assert!(code.is_some_and(|c| c != 0), "{args:?}: {code:?} {stderr}");
        assert!(
            stderr.contains("is plain http but etcd TLS is configured")
                && stderr.contains("use https://"),
            "{args:?}: {stderr}"
        );
    }
}
