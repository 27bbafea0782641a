//! Flags are checked before anything starts: a bad value is a usage error (exit code 2, a
//! message naming the flag), and 0 means "no limit" where upstream's flag does; they take
//! kube-apiserver's forms (Go durations, quantities, bare booleans, host names); flags that
//! contradict each other are refused naming both; a busy port fails at once, saying so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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
        ("--request-timeout", "1x"),
        ("--request-timeout", "500ms"),
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
        ("--etcd-compaction-interval", "5 m"),
        ("--etcd-compaction-interval", "-5m"),
        ("--max-buffered-request-bytes", "1KiB"),
        ("--embedded-max-object-bytes", "0.5"),
        ("--watch-cache", "yes"),
        ("--watch-cache-window-bytes", "-1"),
        ("--watch-cache-window-bytes", "64MB"),
        ("--log-level", "verbose"),
        ("--log-level", "warning"),
        ("--bind", "localhost"),
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
        "--watch-cache-window-bytes",
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

    // 0: no storage limit; the request body limit (3 MiB) still holds. A 2 MiB Event (a
    // ConfigMap's data may not pass 1 MiB, as upstream's validation).
    let server = Server::start(&["--embedded-max-object-bytes", "0"]);
    let event = serde_json::json!({"metadata": {"name": "big"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "message": "x".repeat(2 << 20)});
    let r = http(
        &server.addr,
        "POST",
        "/api/v1/namespaces/default/events",
        &ct,
        event.to_string().as_bytes(),
    );
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

/// Issue 30 item 2: `-1` given as its own argument is the flag's value (refused by the
/// flag's own check), not an unknown argument.
#[test]
fn a_negative_number_is_a_value_not_an_unknown_argument() {
    for flag in [
        "--max-watches",
        "--request-timeout",
        "--max-buffered-request-bytes",
    ] {
        let (code, stderr) = exit_of(&[flag, "-1"]);
        assert_eq!(code, Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("invalid value '-1' for '{flag}")),
            "{flag}: {stderr}"
        );
    }
}

/// Issue 30 item 1: flags that contradict each other are refused at start (exit code 2)
/// with a message naming both, instead of one being ignored (`--storage etcd --data-dir D`
/// ignored D; etcd TLS flags without etcd were ignored).
#[test]
fn contradicting_flags_are_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &[
                "--storage",
                "embedded",
                "--etcd-servers",
                "http://127.0.0.1:1",
            ],
            "--etcd-servers",
            "--storage embedded",
        ),
        (
            &["--storage", "etcd", "--data-dir", data],
            "--data-dir",
            "--storage etcd",
        ),
        (
            &["--etcd-servers", "http://127.0.0.1:1", "--data-dir", data],
            "--data-dir",
            "--etcd-servers",
        ),
        (
            &[
                "--etcd-servers",
                "http://127.0.0.1:1",
                "--embedded-quota-bytes",
                "1Gi",
            ],
            "--embedded-quota-bytes",
            "--etcd-servers",
        ),
        (
            &["--etcd-cafile", "/nonexistent/ca.crt"],
            "--etcd-cafile",
            "embedded store",
        ),
        (
            &["--etcd-prefix", "/other"],
            "--etcd-prefix",
            "embedded store",
        ),
        (
            &["--storage", "embedded", "--etcd-compaction-interval", "1m"],
            "--etcd-compaction-interval",
            "--storage embedded",
        ),
        (
            &["--bind", "127.0.0.1:0", "--secure-port", "0"],
            "--bind",
            "--secure-port",
        ),
    ];
    for (args, first, second) in cases {
        let (code, stderr) = exit_of(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(first) && stderr.contains(second),
            "{args:?}: the message names {first} and {second}: {stderr}"
        );
    }
    assert!(
        !std::path::Path::new(data).exists(),
        "nothing was opened in --data-dir"
    );
}

/// Issue 30 item 1: `--etcd-servers` alone selects etcd (as upstream, where etcd is the
/// only store); before, it started the in-memory store, ready at once, and every write was
/// lost at exit. Here no etcd answers at the address: the server serves with /readyz
/// failing on the storage, and says it waits for etcd.
#[test]
fn etcd_servers_alone_select_etcd() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let etcd = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let bind = port.local_addr().unwrap().to_string();
    drop(port);
    let server = common::Server::spawn_at(&bind, &["--etcd-servers", &etcd]);
    let deadline = Instant::now() + PATIENCE;
    let body = loop {
        if let Ok(mut s) = std::net::TcpStream::connect(&bind) {
            use std::io::{Read, Write};
            s.set_read_timeout(Some(PATIENCE)).unwrap();
            let req =
                "GET /readyz?verbose HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
            if s.write_all(req.as_bytes()).is_ok() {
                let mut out = String::new();
                let _ = s.read_to_string(&mut out);
                if !out.is_empty() {
                    break out;
                }
            }
        }
        assert!(Instant::now() < deadline, "the server never answered");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        body.starts_with("HTTP/1.1 5"),
        "the embedded store would be ready at once: {body}"
    );
    assert!(body.contains("[-]"), "{body}");
    drop(server);
}

/// Issue 30 item 2: kube-apiserver's forms are accepted: Go durations (and bare seconds),
/// Kubernetes quantities, a boolean flag alone and `=false`, a host name in `--bind`,
/// upstream's `--bind-address`/`--secure-port`, a level filter; and they take effect (the
/// `8Ki` object limit refuses a 10 000-byte object).
#[test]
fn kube_apiserver_flag_forms_are_accepted_and_take_effect() {
    let cms = "/api/v1/namespaces/default/configmaps";
    let ct = [("Content-Type", "application/json")];
    let server = Server::start_at(
        "localhost:0",
        &[
            "--request-timeout",
            "1m30s",
            "--min-request-timeout",
            "1800",
            "--shutdown-delay-duration",
            "0s",
            "--shutdown-grace-period",
            "1500ms",
            "--embedded-retain-window",
            "1.5h",
            "--max-buffered-request-bytes",
            "512Mi",
            "--embedded-quota-bytes",
            "1G",
            "--embedded-max-object-bytes",
            "8Ki",
            "--watch-cache",
            "--enable-garbage-collector=false",
            "--leader-elect=f",
            "--anonymous-auth",
            "--log-format",
            "text",
        ],
    );
    assert!(server.addr.starts_with("127.0.0.1:"), "{}", server.addr);
    let r = http(&server.addr, "POST", cms, &ct, &configmap("small", 4096));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = http(&server.addr, "POST", cms, &ct, &configmap("big", 10_000));
    assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("8192"));
    drop(server);

    // Upstream's split address flags; the watch cache off by `=false`.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port().to_string();
    drop(free);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"));
    cmd.args([
        "--bind-address",
        "localhost",
        "--secure-port",
        &port,
        "--watch-cache=false",
        "--log-level",
        "warn,listwatch_apiserver=info",
    ]);
    let (mut child, lines) = common::spawn_lines(&mut cmd);
    let first = lines
        .recv_timeout(PATIENCE)
        .expect("the server announces itself");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        first.contains(&format!("http://127.0.0.1:{port} ")),
        "{first}"
    );
}

/// Issue 30 item 3: a busy port fails before anything starts (no cache, no store recovery:
/// `--data-dir` is not even created), exits non-zero, and says what to do.
#[test]
fn a_busy_port_fails_at_once_naming_the_address_and_the_way_out() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (code, stderr) = exit_of(&["--bind", &addr, "--data-dir", data.to_str().unwrap()]);
    assert!(code.is_some_and(|c| c != 0), "{code:?}: {stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}"))
            && stderr.contains("--bind 127.0.0.1:0"),
        "{stderr}"
    );
    assert!(
        !data.exists(),
        "the store was opened before the port was: {stderr}"
    );
    drop(busy);
}

/// Issue 30 item 2: `--help` is grouped by section as upstream's (`cliflag.NamedFlagSets`),
/// each flag with its default and, where ours differs, upstream's name.
#[test]
fn help_is_grouped_by_section_with_defaults_and_upstream_names() {
    let out = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    let mut at = 0;
    for section in [
        "Generic:",
        "Etcd / storage:",
        "Secure serving:",
        "Limits / flow control:",
        "Controllers / leader election:",
        "Watch cache:",
        "Authentication:",
        "Authorization:",
        "Audit:",
    ] {
        let found = help
            .lines()
            .position(|l| l == section)
            .unwrap_or_else(|| panic!("no section {section:?}:\n{help}"));
        assert!(found >= at, "{section} out of order:\n{help}");
        at = found;
    }
    for text in [
        "[default: 1m]",
        "[default: 256Mi]",
        "[default: 127.0.0.1:8080]",
        "[upstream: --bind-address and --secure-port, also accepted]",
        "[upstream: etcd's --quota-backend-bytes]",
        "[alias: --logging-format]",
        "[upstream: none; count only]",
    ] {
        assert!(help.contains(text), "{text} missing:\n{help}");
    }
    // Issue 24: the watch cache's byte bound is listwatch's own, in the watch-cache section.
    let lines: Vec<&str> = help.lines().collect();
    let section = lines.iter().position(|l| *l == "Watch cache:").unwrap();
    let next = lines[section + 1..]
        .iter()
        .position(|l| l.ends_with(':') && !l.starts_with(' '))
        .map_or(lines.len(), |n| section + 1 + n);
    let flag = lines
        .iter()
        .position(|l| l.trim_start().starts_with("--watch-cache-window-bytes"))
        .unwrap_or_else(|| panic!("no --watch-cache-window-bytes:\n{help}"));
    assert!(
        section < flag && flag < next,
        "not with the watch cache:\n{help}"
    );
    let text = lines[flag..next].join(" ");
    assert!(text.contains("[default: 64Mi]"), "{text}");
}

/// Issue 30 item 9: `--acknowledge-pod-deletion` is a boolean as kube-apiserver's are (alone
/// or with a Go boolean value), refused with any other value naming the flag, off by
/// default, listed under "Controllers / leader election" as listwatch-only; and its values
/// take effect (a DELETE of a scheduled pod removes it, or leaves it marked).
#[test]
fn acknowledge_pod_deletion_is_a_go_boolean_listed_with_the_controllers() {
    let (code, stderr) = exit_of(&["--acknowledge-pod-deletion=maybe"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'maybe' for '--acknowledge-pod-deletion"),
        "{stderr}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = help.lines().collect();
    let section = |name: &str| lines.iter().position(|l| *l == name).unwrap();
    let (start, end) = (
        section("Controllers / leader election:"),
        section("Watch cache:"),
    );
    let at = lines
        .iter()
        .position(|l| l.trim_start().starts_with("--acknowledge-pod-deletion"))
        .unwrap_or_else(|| panic!("no --acknowledge-pod-deletion:\n{help}"));
    assert!(start < at && at < end, "not with the controllers:\n{help}");
    let entry = lines[at..end].join(" ");
    assert!(
        entry.contains("[upstream: none; listwatch-only]") && entry.contains("[default: false]"),
        "{entry}"
    );

    let ct = [("Content-Type", "application/json")];
    let pods = "/api/v1/namespaces/default/pods";
    let pod = br#"{"metadata":{"name":"p"},"spec":{"nodeName":"n1","containers":[{"name":"c","image":"x"}]}}"#;
    for (flags, gone) in [
        (&[][..], false),
        (&["--acknowledge-pod-deletion"][..], true),
        (&["--acknowledge-pod-deletion=t"][..], true),
        (&["--acknowledge-pod-deletion=false"][..], false),
    ] {
        let server = Server::start(flags);
        let r = http(&server.addr, "POST", pods, &ct, pod);
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let r = http(&server.addr, "DELETE", &format!("{pods}/p"), &[], b"");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let r = http(&server.addr, "GET", &format!("{pods}/p"), &[], b"");
        if gone {
            assert_eq!(
                r.status,
                404,
                "{flags:?}: {}",
                String::from_utf8_lossy(&r.body)
            );
        } else {
            assert_eq!(r.status, 200, "{flags:?}");
            assert_eq!(
                r.json()["metadata"]["deletionGracePeriodSeconds"],
                30,
                "{flags:?}"
            );
        }
    }
}

/// A resources file (or CRD manifest) whose YAML costs far more than its length — nesting
/// libyaml scans in quadratic time, an anchor replayed by thousands of aliases — is refused
/// at once, naming the budget, instead of parsing for hours or building gigabytes.
#[test]
fn a_resources_file_too_costly_to_read_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // 1 MB of `[`: serde_yaml alone took 14 s for 40 KB, growing with the square.
    let deep = dir.path().join("deep.yaml");
    std::fs::write(&deep, format!("x: {}", "[".repeat(1 << 20))).unwrap();
    // 10 KB: one anchor of 2 000 items, aliased 2 000 times (690 MB and 10 s before).
    let n = 2000;
    let bomb = dir.path().join("bomb.yaml");
    std::fs::write(
        &bomb,
        format!(
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata: {{name: bombs.example.com}}\nx: &a [{}]\ny: [{}]\n",
            vec!["x"; n].join(","),
            vec!["*a"; n].join(",")
        ),
    )
    .unwrap();
    for file in [&deep, &bomb] {
        let (code, stderr) = exit_of(&["--resources", file.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("too costly to read"), "{stderr}");
    }
}
