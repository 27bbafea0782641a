//! A write that creates needs `create` (issue 23 item 2): a server-side apply (authorized
//! as `patch`) or a PUT (authorized as `update`) of a missing object is also authorized for
//! `create` on that name, as upstream's `withAuthorization` in `handlers/patch.go` and
//! `handlers/update.go` does; refused, it is upstream's 403 and nothing is written (dry run
//! included). Through the binary with bearer tokens and RBAC.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Instant;

use common::{PATIENCE, Response, Server};
use serde_json::{Value, json};

const TOKENS: &str = "root-token,root,uid-root,system:masters\ndana-token,dana,uid-dana\n";
const ROOT: &str = "Bearer root-token";
const DANA: &str = "Bearer dana-token";

struct Cluster {
    server: Server,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
        Self { server, _dir: dir }
    }

    fn call(&self, who: &str, method: &str, path: &str, ct: &str, body: &Value) -> Response {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        common::http(
            &self.server.addr,
            method,
            path,
            &[("Authorization", who), ("Content-Type", ct)],
            &bytes,
        )
    }

    fn root(&self, method: &str, path: &str, body: &Value) -> Response {
        self.call(ROOT, method, path, "application/json", body)
    }

    /// Whether the object at `path` exists (asked as root).
    fn exists(&self, path: &str) -> bool {
        let r = self.root("GET", path, &Value::Null);
        assert!(
            r.status == 200 || r.status == 404,
            "{path}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        r.status == 200
    }
}

const CM: &str = "/api/v1/namespaces/demo/configmaps";
const SECRETS: &str = "/api/v1/namespaces/demo/secrets";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/demo/leases";
const APPLY: &str = "application/apply-patch+yaml";

fn config_map(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"k": "v"}})
}

fn lease(name: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": name, "namespace": "demo"}, "spec": {"holderIdentity": "dana"}})
}

fn role(verbs: &[&str]) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
    "metadata": {"name": "writer", "namespace": "demo"},
    "rules": [
        {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": verbs},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": verbs},
    ]})
}

/// Polls until `check` holds (a policy change reaches the authorizer's informers).
fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !check() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn assert_forbidden(r: &Response, message: &str) {
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    let s = r.json();
    assert_eq!(s["reason"], "Forbidden", "{s}");
    assert_eq!(s["message"], message, "{s}");
}

#[test]
fn apply_and_put_that_create_need_the_create_verb() {
    let c = Cluster::start();
    let r = c.root(
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let roles = "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/roles";
    let r = c.root("POST", roles, &role(&["get", "patch", "update"]));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = c.root(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/rolebindings",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "dana-writes", "namespace": "demo"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dana"}]}),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    // An object that exists: she may update it by apply and PUT (no create involved).
    let r = c.root("POST", CM, &config_map("existing"));
    assert_eq!(r.status, 201);
    until("dana may get configmaps", || {
        c.call(DANA, "GET", &format!("{CM}/existing"), "", &Value::Null)
            .status
            == 200
    });
    let applied = |path: &str, body: &Value, dry: bool| {
        let q = if dry { "&dryRun=All" } else { "" };
        c.call(
            DANA,
            "PATCH",
            &format!("{path}?fieldManager=dana{q}"),
            APPLY,
            body,
        )
    };
    let put = |path: &str, body: &Value, dry: bool| {
        let q = if dry { "?dryRun=All" } else { "" };
        c.call(DANA, "PUT", &format!("{path}{q}"), "application/json", body)
    };
    let r = applied(&format!("{CM}/existing"), &config_map("existing"), false);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // Without `create`: no ConfigMap or Secret by apply, no Lease by PUT, dry run or not.
    for dry in [false, true] {
        let r = applied(&format!("{CM}/by-apply"), &config_map("by-apply"), dry);
        assert_forbidden(&r, r#"configmaps "by-apply" is forbidden: "#);
        assert!(!c.exists(&format!("{CM}/by-apply")));
        let r = applied(&format!("{SECRETS}/by-apply"), &secret("by-apply"), dry);
        assert_forbidden(&r, r#"secrets "by-apply" is forbidden: "#);
        assert!(!c.exists(&format!("{SECRETS}/by-apply")));
        let r = put(&format!("{LEASES}/by-put"), &lease("by-put"), dry);
        assert_forbidden(&r, r#"leases.coordination.k8s.io "by-put" is forbidden: "#);
        assert!(!c.exists(&format!("{LEASES}/by-put")));
        // ConfigMaps are never created by PUT (upstream's strategy): NotFound either way.
        let r = put(&format!("{CM}/by-put"), &config_map("by-put"), dry);
        assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
        assert!(!c.exists(&format!("{CM}/by-put")));
    }

    // With `create` added, each of them creates.
    let r = c.root(
        "PUT",
        &format!("{roles}/writer"),
        &role(&["get", "patch", "update", "create"]),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    until("dana may create", || {
        put(&format!("{LEASES}/probe"), &lease("probe"), true).status == 201
    });
    assert!(!c.exists(&format!("{LEASES}/probe")), "a dry run wrote");
    let r = applied(&format!("{CM}/dry"), &config_map("dry"), true);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(!c.exists(&format!("{CM}/dry")), "a dry run wrote");
    let r = applied(&format!("{CM}/by-apply"), &config_map("by-apply"), false);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(c.exists(&format!("{CM}/by-apply")));
    let r = applied(&format!("{SECRETS}/by-apply"), &secret("by-apply"), false);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(c.exists(&format!("{SECRETS}/by-apply")));
    let r = put(&format!("{LEASES}/by-put"), &lease("by-put"), false);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(c.exists(&format!("{LEASES}/by-put")));
}

#[test]
fn the_create_check_names_the_object() {
    // A Role that allows `create` of one name only (upstream checks the create with the
    // object's name, so resourceNames apply): apply creates that name and no other.
    let c = Cluster::start();
    let r = c.root(
        "POST",
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}}),
    );
    assert_eq!(r.status, 201);
    let r = c.root(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/roles",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "one", "namespace": "demo"},
                "rules": [
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]},
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"], "resourceNames": ["mine"]},
                ]}),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = c.root(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/rolebindings",
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "dana-one", "namespace": "demo"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "one"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "dana"}]}),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let apply = |name: &str| {
        c.call(
            DANA,
            "PATCH",
            &format!("{CM}/{name}?fieldManager=dana"),
            APPLY,
            &config_map(name),
        )
    };
    until("dana may apply her name", || apply("mine").status == 201);
    assert!(c.exists(&format!("{CM}/mine")));
    let r = apply("theirs");
    assert_forbidden(&r, r#"configmaps "theirs" is forbidden: "#);
    assert!(!c.exists(&format!("{CM}/theirs")));
}
