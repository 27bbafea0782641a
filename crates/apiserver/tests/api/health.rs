//! `/healthz`, `/livez`, `/readyz` as upstream serves them to the public, and
//! non-resource paths authorized on their decoded form, through the binary with static
//! tokens and RBAC: anonymous callers (allowed the root endpoints by
//! `system:public-info-viewer`) see `[-]CHECK failed: reason withheld`, never the reason;
//! the reason is on the check's own path, which needs its own permission.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Instant;

use common::{PATIENCE, Server, http};

const TOKENS: &str = "root-token,root,uid-root,system:masters\nreader-token,reader,uid-reader\n";

fn start(extra: &[&str]) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let mut flags = vec!["--token-auth-file", tokens.to_str().unwrap()];
    flags.extend_from_slice(extra);
    (Server::start(&flags), dir)
}

fn get(server: &Server, path: &str, token: Option<&str>) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    let r = http(&server.addr, "GET", path, &headers, b"");
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

/// Issue 23 item 7: `/readyz` told anonymous callers why it failed (the storage's error,
/// what start-up waits for). As upstream, the root endpoints list the checks with
/// "reason withheld"; `/readyz/CHECK` says why, to callers allowed that path.
#[test]
fn health_reasons_are_withheld_from_public_callers() {
    let (server, _dir) = start(&["--shutdown-delay-duration", "60"]);
    assert_eq!(get(&server, "/readyz", None), (200, "ok".to_owned()));
    let (code, body) = get(&server, "/readyz?verbose", None);
    assert_eq!(code, 200, "{body}");
    for line in [
        "[+]ping ok",
        "[+]shutdown ok",
        "[+]start-up ok",
        "[+]storage ok",
        "readyz check passed",
    ] {
        assert!(body.contains(line), "{line} missing: {body}");
    }
    let (code, body) = get(&server, "/livez?verbose", None);
    assert_eq!(
        (code, body.as_str()),
        (200, "[+]ping ok\nlivez check passed\n")
    );
    assert_eq!(get(&server, "/healthz", None), (200, "ok".to_owned()));
    // The per-check paths need a permission anonymous callers do not have.
    for path in [
        "/readyz/storage",
        "/readyz%2Fstorage",
        "/livez/ping",
        "/healthz%2F..",
    ] {
        assert_eq!(get(&server, path, None).0, 403, "{path}");
    }
    assert_eq!(
        get(&server, "/readyz/storage", Some("root-token")),
        (200, "ok".to_owned())
    );
    assert_eq!(get(&server, "/readyz/nope", Some("root-token")).0, 404);

    // A failing check: the drain (SIGTERM with a shutdown delay) fails `shutdown`.
    server.sigterm();
    let deadline = Instant::now() + PATIENCE;
    let (code, body) = loop {
        let r = get(&server, "/readyz", None);
        if r.0 != 200 {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz kept passing after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(code, 500, "{body}");
    assert!(
        body.contains("[-]shutdown failed: reason withheld"),
        "{body}"
    );
    assert!(body.contains("[+]storage ok"), "{body}");
    assert!(body.ends_with("readyz check failed"), "{body}");
    assert!(!body.contains("shutting down"), "the reason leaked: {body}");
    let (code, body) = get(&server, "/readyz?verbose", Some("root-token"));
    assert_eq!(
        code, 500,
        "the root endpoint withholds from everyone, as upstream: {body}"
    );
    assert!(!body.contains("shutting down"), "{body}");
    assert_eq!(
        get(&server, "/readyz/shutdown", Some("root-token")),
        (500, "internal server error: shutting down".to_owned())
    );
    let (code, body) = get(&server, "/readyz?exclude=shutdown&exclude=bogus", None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        get(&server, "/readyz?exclude=shutdown&verbose", None)
            .1
            .lines()
            .next(),
        Some("[+]ping ok")
    );
    assert!(
        get(
            &server,
            "/readyz?exclude=shutdown&exclude=bogus&verbose",
            None
        )
        .1
        .contains("[+]shutdown excluded: ok\n[+]start-up ok\n[+]storage ok\n[+]poststarthook/"),
    );
    assert!(
        get(
            &server,
            "/readyz?exclude=shutdown&exclude=bogus&verbose",
            None
        )
        .1
        .contains("[+]poststarthook/bootstrap-controller ok\n"),
    );
    assert!(
        get(&server, "/readyz?exclude=shutdown&exclude=bogus&verbose", None)
            .1
            .ends_with("\nwarn: some health checks cannot be excluded: no matches for \"bogus\"\nreadyz check passed\n"),
    );
}

/// Issue 23 item 7: non-resource rules are matched on the decoded path, as upstream's
/// RequestInfo (Go's `URL.Path`): `/%6detrics` is `/metrics` for the authorizer, whatever
/// its spelling, and `/healthz%2F..` is `/healthz/..`, which the public `/healthz` rule does
/// not grant. (No route serves an encoded spelling of `/metrics`: 404 once authorized.)
#[test]
fn non_resource_rules_match_the_decoded_path() {
    let (server, _dir) = start(&[]);
    let root = [
        ("Authorization", "Bearer root-token"),
        ("Content-Type", "application/json"),
    ];
    let role = br#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"metrics-reader"},
        "rules":[{"nonResourceURLs":["/metrics"],"verbs":["get"]}]}"#;
    let r = http(
        &server.addr,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &root,
        role,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let binding = br#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"metrics-reader"},
        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"metrics-reader"},
        "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"reader"}]}"#;
    let r = http(
        &server.addr,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &root,
        binding,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + PATIENCE;
    while get(&server, "/metrics", Some("reader-token")).0 != 200 {
        assert!(Instant::now() < deadline, "the binding never took effect");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (code, body) = get(&server, "/%6detrics", Some("reader-token"));
    assert_eq!(
        code, 404,
        "authorized as /metrics, served by no route: {body}"
    );
    for token in [None, Some("root-token")] {
        let (code, body) = get(&server, "/%61pis/apps/v1", token);
        let want = if token.is_some() { 200 } else { 403 };
        assert_eq!(code, want, "{token:?}: {body}");
    }
    let (code, body) = get(&server, "/%6detrics", None);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{body}"
    );
    let (code, body) = get(&server, "/healthz%2F..", None);
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(r#"cannot get path \"/healthz/..\""#),
        "{body}"
    );
}

/// Issue 30 item 3: `/version/`, `/healthz/`, `/livez/` and `/readyz/` answer as without
/// the slash (they were 404, and the Python client's `VersionApi` asks for `/version/`),
/// to anonymous callers too (authorized as the path without the slash); a check's own path
/// keeps its rules.
#[test]
fn trailing_slashes_answer_like_without() {
    let (server, _dir) = start(&[]);
    for path in [
        "/version",
        "/healthz",
        "/livez",
        "/readyz",
        "/readyz?verbose",
        "/livez?verbose",
    ] {
        let slashed = match path.split_once('?') {
            Some((p, q)) => format!("{p}/?{q}"),
            None => format!("{path}/"),
        };
        let want = get(&server, path, None);
        assert_eq!(want.0, 200, "{path}: {want:?}");
        assert_eq!(get(&server, &slashed, None), want, "{slashed}");
    }
    assert_eq!(get(&server, "/readyz/storage/", None).0, 403);
}

/// Issue 30 item 3: `/version` names the build (the git commit and tree state, the build
/// date) instead of the placeholder `gitCommit: listwatch` and a 1970 build date, with the
/// Kubernetes version kubectl picks its build by unchanged (1.32).
#[test]
fn version_names_the_build() {
    let (server, _dir) = start(&[]);
    let r = http(&server.addr, "GET", "/version", &[], b"");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(
        (v["major"].as_str(), v["minor"].as_str()),
        (Some("1"), Some("32")),
        "{v}"
    );
    let git_version = v["gitVersion"].as_str().unwrap();
    assert!(git_version.starts_with("v1.32.0+listwatch."), "{v}");
    let commit = v["gitCommit"].as_str().unwrap();
    // Built from this checkout (the tests run from one): the commit the build saw.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(head) => assert_eq!(commit, head, "{v}"),
        None => assert_eq!(commit, "unknown", "{v}"),
    }
    assert!(
        ["clean", "dirty", "unknown"].contains(&v["gitTreeState"].as_str().unwrap()),
        "{v}"
    );
    let date = v["buildDate"].as_str().unwrap();
    assert!(
        date.len() == 20 && date.ends_with('Z') && date.as_bytes().get(10) == Some(&b'T'),
        "RFC 3339 UTC: {v}"
    );
    assert!(date >= "2024-01-01", "{v}");
}
