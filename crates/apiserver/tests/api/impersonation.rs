//! Impersonation end to end (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-*`), through the
//! binary with static bearer tokens and RBAC: a user allowed to impersonate (an impersonating
//! proxy) sends the headers raw, and `SelfSubjectReview` says who the request ran as.
//! Headers that cannot be used are a 400, never the proxy's own identity; the groups follow
//! upstream's `WithImpersonation`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use common::{PATIENCE, Server, http, parse_response};
use serde_json::Value;

const TOKENS: &str = "root-token,root,uid-root,system:masters\nproxy-token,proxy,uid-proxy\n";
const WHOAMI: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
const REVIEW: &[u8] = br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#;

/// One request with raw header bytes (a value may be any bytes a client puts on the wire).
fn raw(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> common::Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n").into_bytes();
    for (k, v) in headers {
        req.extend_from_slice(k.as_bytes());
        req.extend_from_slice(b": ");
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(
        format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    req.extend_from_slice(body);
    s.write_all(&req).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    parse_response(&out)
}

/// A server where `proxy` may impersonate any user, group, ServiceAccount, uid and extra.
fn start() -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let server = Server::start(&[
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--authorization-mode",
        "RBAC",
    ]);
    let root = [
        ("Authorization", "Bearer root-token"),
        ("Content-Type", "application/json"),
    ];
    let role = br#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"impersonator"},
        "rules":[{"apiGroups":[""],"resources":["users","groups","serviceaccounts"],"verbs":["impersonate"]},
                 {"apiGroups":["authentication.k8s.io"],"resources":["*"],"verbs":["impersonate"]}]}"#;
    let r = http(
        &server.addr,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &root,
        role,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let binding = br#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"impersonator"},
        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"impersonator"},
        "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":"proxy"}]}"#;
    let r = http(
        &server.addr,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &root,
        binding,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    // Anonymous callers may ask who they are, so that an impersonated `system:anonymous`
    // shows its groups.
    let anonymous_whoami = br#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"anonymous-whoami"},
        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:basic-user"},
        "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"system:unauthenticated"}]}"#;
    let r = http(
        &server.addr,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        &root,
        anonymous_whoami,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    // The bindings are in force once the RBAC informers have them.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = as_proxy(&server, &[("Impersonate-User", b"someone")]);
        let anonymous = raw(&server.addr, "POST", WHOAMI, &[], REVIEW);
        if r.status == 201 && anonymous.status == 201 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the binding never took effect: {}",
            r.status
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (server, dir)
}

fn as_proxy(server: &Server, headers: &[(&str, &[u8])]) -> common::Response {
    let mut all: Vec<(&str, &[u8])> = vec![("Authorization", b"Bearer proxy-token")];
    all.extend_from_slice(headers);
    raw(&server.addr, "POST", WHOAMI, &all, REVIEW)
}

/// Who the request ran as (`status.userInfo` of the review), asserting it was served.
fn who(server: &Server, headers: &[(&str, &[u8])]) -> Value {
    let r = as_proxy(server, headers);
    assert_eq!(
        r.status,
        201,
        "{headers:?}: {}",
        String::from_utf8_lossy(&r.body)
    );
    r.json()["status"]["userInfo"].clone()
}

/// Asserts a 400 whose message contains `needle` (never the proxy's own identity).
fn refused(server: &Server, headers: &[(&str, &[u8])], needle: &str) {
    let r = as_proxy(server, headers);
    let body = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 400, "{headers:?} was served: {body}");
    let v = r.json();
    assert_eq!(v["reason"], "BadRequest", "{body}");
    assert!(v["message"].as_str().unwrap().contains(needle), "{body}");
}

/// Issue 23 item 3: a header value that is not visible ASCII used to be dropped, and the
/// request ran as the impersonator. UTF-8 is decoded as upstream (Go keeps the bytes);
/// other bytes, and unusable headers, are a 400.
#[test]
fn unusable_impersonation_headers_fail_the_request() {
    let (server, _dir) = start();
    // UTF-8, as upstream: `josé` is the user `josé`.
    let u = who(&server, &[("Impersonate-User", "josé".as_bytes())]);
    assert_eq!(u["username"], "josé");
    let u = who(
        &server,
        &[
            ("Impersonate-User", b"bob"),
            ("Impersonate-Group", "équipe".as_bytes()),
        ],
    );
    assert_eq!(
        u["groups"],
        serde_json::json!(["équipe", "system:authenticated"])
    );
    // Latin-1 `é` (one byte 0xE9) is not UTF-8: refused, in every header.
    refused(
        &server,
        &[("Impersonate-User", b"jos\xe9")],
        "Impersonate-User header value is not valid UTF-8",
    );
    for (name, value) in [
        ("Impersonate-Group", b"dev\xff".as_slice()),
        ("Impersonate-Uid", b"\xe9"),
        ("Impersonate-Extra-scopes", b"\xe9"),
    ] {
        refused(
            &server,
            &[("Impersonate-User", b"bob"), (name, value)],
            "not valid UTF-8",
        );
    }
    // An extra key percent-decoding to bytes that are not UTF-8.
    refused(
        &server,
        &[
            ("Impersonate-User", b"bob"),
            ("Impersonate-Extra-k%FF", b"v"),
        ],
        "not valid UTF-8 once percent-decoded",
    );
    // Extra keys are percent-decoded, as upstream.
    let u = who(
        &server,
        &[
            ("Impersonate-User", b"bob"),
            ("Impersonate-Extra-example.com%2Fteam", b"a"),
            ("Impersonate-Extra-example.com%2Fteam", b"b"),
        ],
    );
    assert_eq!(
        u["extra"]["example.com/team"],
        serde_json::json!(["a", "b"])
    );
    // A second Impersonate-User (as a proxy appending after the client's) is not ignored.
    refused(
        &server,
        &[("Impersonate-User", b"alice"), ("Impersonate-User", b"bob")],
        "only once",
    );
    // Without impersonation the proxy is itself.
    assert_eq!(who(&server, &[])["username"], "proxy");
}

/// Issue 23 item 7, each as upstream's `WithImpersonation`: an impersonated ServiceAccount
/// with explicit groups gets exactly those (no `system:serviceaccounts*`), an empty
/// `Impersonate-User` is a 400 (never the proxy), `system:anonymous` is in
/// `system:unauthenticated` (not `system:authenticated`), groups, uid or extra without a
/// user are a 400, and a name that is not a valid ServiceAccount name is a plain user.
#[test]
fn impersonated_groups_follow_upstream() {
    let (server, _dir) = start();
    let sa = b"system:serviceaccount:demo:bot".as_slice();
    let u = who(&server, &[("Impersonate-User", sa)]);
    assert_eq!(
        u["groups"],
        serde_json::json!([
            "system:serviceaccounts",
            "system:serviceaccounts:demo",
            "system:authenticated"
        ])
    );
    let u = who(
        &server,
        &[("Impersonate-User", sa), ("Impersonate-Group", b"dev")],
    );
    assert_eq!(u["username"], "system:serviceaccount:demo:bot");
    assert_eq!(
        u["groups"],
        serde_json::json!(["dev", "system:authenticated"])
    );
    let u = who(&server, &[("Impersonate-User", b"system:anonymous")]);
    assert_eq!(u["groups"], serde_json::json!(["system:unauthenticated"]));
    let u = who(
        &server,
        &[
            ("Impersonate-User", b"bob"),
            ("Impersonate-Group", b"system:unauthenticated"),
        ],
    );
    assert_eq!(u["groups"], serde_json::json!(["system:unauthenticated"]));
    let u = who(
        &server,
        &[("Impersonate-User", b"bob"), ("Impersonate-Uid", b"u-7")],
    );
    assert_eq!(
        (u["username"].as_str(), u["uid"].as_str()),
        (Some("bob"), Some("u-7"))
    );
    // Upper case is no valid namespace: a plain user, as upstream's SplitUsername decides.
    let u = who(
        &server,
        &[("Impersonate-User", b"system:serviceaccount:Demo:bot")],
    );
    assert_eq!(u["groups"], serde_json::json!(["system:authenticated"]));
    refused(
        &server,
        &[("Impersonate-User", b"")],
        "Impersonate-User header is empty",
    );
    refused(
        &server,
        &[
            ("Impersonate-User", b""),
            ("Impersonate-Group", b"system:masters"),
        ],
        "Impersonate-User header is empty",
    );
    for h in [
        ("Impersonate-Group", b"dev".as_slice()),
        ("Impersonate-Uid", b"u-1"),
        ("Impersonate-Uid", b""),
        ("Impersonate-Extra-scopes", b"view"),
    ] {
        refused(&server, &[h], "without impersonating a user");
    }
    // A refused check is upstream's 403 and runs nothing as anyone.
    let root = [("Authorization", "Bearer root-token")];
    let r = http(
        &server.addr,
        "POST",
        WHOAMI,
        &[
            root[0],
            ("Impersonate-User", "x"),
            ("Content-Type", "application/json"),
        ],
        REVIEW,
    );
    assert_eq!(r.status, 201, "system:masters may impersonate");
    let r = raw(
        &server.addr,
        "GET",
        "/api/v1/namespaces/default/secrets",
        &[
            ("Authorization", b"Bearer proxy-token"),
            ("Impersonate-User", b"bob"),
        ],
        b"",
    );
    assert_eq!(r.status, 403, "bob may not list secrets");
}
