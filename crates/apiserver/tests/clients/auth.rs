//! Authentication, RBAC and audit end to end, with real clients: kubectl with the admin
//! kubeconfig of `--pki-dir` (a client certificate), with a static token and with a
//! ServiceAccount token from `kubectl create token`; kube-rs and the Python client with a
//! bearer token; `kubectl auth can-i` / `can-i --list` / `whoami`; upstream's 401 and 403;
//! a binding that takes effect without a restart; a deleted ServiceAccount's token refused;
//! escalation refused; audit lines for the requests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::{PATIENCE, Server, run_err, run_ok};

const TOKENS: &str = "alice-token,alice,uid-alice,\"dev,qa\"\nbob-token,bob,uid-bob\nroot-token,root,uid-root,system:masters\ncarol-token,carol,uid-carol,system:masters\n";

struct Cluster {
    server: Server,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Plain HTTP on loopback with the static tokens (allowed: an authenticator is set).
    fn start_http() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
        assert!(server.url.starts_with("http://"), "{}", server.url);
        Self { server, dir }
    }

    fn start() -> Self {
        common::require("kubectl");
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let pki = dir.path().join("pki");
        let audit = dir.path().join("audit.log");
        let server = Server::start(&[
            "--pki-dir",
            pki.to_str().unwrap(),
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--audit-log-path",
            audit.to_str().unwrap(),
        ]);
        assert!(server.url.starts_with("https://"), "{}", server.url);
        Self { server, dir }
    }

    fn path(&self, p: &str) -> std::path::PathBuf {
        self.dir.path().join(p)
    }

    /// kubectl as the admin of the generated kubeconfig (a client certificate).
    fn admin(&self) -> Command {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(self.path("pki/admin.kubeconfig"))
            .arg("--cache-dir")
            .arg(self.path("cache-admin"));
        c
    }

    /// kubectl with a bearer token (and the generated CA over HTTPS).
    fn with_token(&self, token: &str) -> Command {
        let mut c = Command::new("kubectl");
        c.args(["--server", &self.server.url]);
        if self.server.url.starts_with("https://") {
            c.arg("--certificate-authority")
                .arg(self.path("pki/ca.crt"));
        }
        c.args(["--token", token, "--cache-dir"])
            .arg(self.path("cache-token"));
        c
    }
}

fn apply(cmd: &mut Command, yaml: &str, dir: &Path, name: &str) -> Result<String, String> {
    let file = dir.join(name);
    std::fs::write(&file, yaml).unwrap();
    let out = cmd.arg("apply").arg("-f").arg(&file).output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Polls a command until it succeeds (a change made through the API reaches the
/// authorizer's informers without a restart).
fn until_ok(mut make: impl FnMut() -> Command) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = make().output().unwrap();
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            Instant::now() < deadline,
            "never succeeded: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_certificates_tokens_rbac_and_audit() {
    let c = Cluster::start();
    let d = c.dir.path();

    // The admin kubeconfig works over TLS with RBAC on, nothing else to configure.
    let who = run_ok(c.admin().args(["auth", "whoami"]));
    assert!(who.contains("kubernetes-admin"), "{who}");
    assert!(who.contains("system:masters"), "{who}");
    run_ok(c.admin().args(["create", "namespace", "demo"]));
    run_ok(c.admin().args(["create", "namespace", "other"]));
    let roles = run_ok(c.admin().args(["get", "clusterroles", "-o", "name"]));
    for r in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:basic-user",
        "system:public-info-viewer",
    ] {
        assert!(
            roles.contains(&format!("clusterrole.rbac.authorization.k8s.io/{r}\n")),
            "{r} missing: {roles}"
        );
    }

    // A bad token is upstream's 401, never anonymous.
    let e = run_err(c.with_token("nope").args(["get", "pods", "-n", "demo"]));
    assert!(e.contains("You must be logged in to the server"), "{e}");

    // alice (static token) is denied with upstream's message, and can-i says no.
    let e = run_err(
        c.with_token("alice-token")
            .args(["get", "pods", "-n", "demo"]),
    );
    assert!(
        e.contains(r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "demo""#),
        "{e}"
    );
    let out = c
        .with_token("alice-token")
        .args(["auth", "can-i", "list", "pods", "-n", "demo"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    assert!(!out.status.success());
    let who = run_ok(c.with_token("alice-token").args(["auth", "whoami"]));
    assert!(
        who.contains("alice") && who.contains("[dev qa system:authenticated]"),
        "{who}"
    );

    // A Role and a binding added while she is denied take effect without a restart.
    apply(
        &mut c.admin(),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: pod-reader, namespace: demo}\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get, list, watch]\n",
        d,
        "role.yaml",
    )
    .unwrap();
    run_ok(c.admin().args([
        "create",
        "rolebinding",
        "alice-reads",
        "-n",
        "demo",
        "--role",
        "pod-reader",
        "--user",
        "alice",
    ]));
    until_ok(|| {
        let mut k = c.with_token("alice-token");
        k.args(["get", "pods", "-n", "demo"]);
        k
    });
    let yes = run_ok(
        c.with_token("alice-token")
            .args(["auth", "can-i", "list", "pods", "-n", "demo"]),
    );
    assert_eq!(yes.trim(), "yes");
    let out = c
        .with_token("alice-token")
        .args(["auth", "can-i", "create", "pods", "-n", "demo"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    let list = run_ok(
        c.with_token("alice-token")
            .args(["auth", "can-i", "--list", "-n", "demo"]),
    );
    assert!(
        list.lines()
            .any(|l| l.starts_with("pods ") && l.contains("[get list watch]")),
        "{list}"
    );
    // ... and nowhere else.
    let e = run_err(
        c.with_token("alice-token")
            .args(["get", "pods", "-n", "other"]),
    );
    assert!(
        e.contains(r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "other""#),
        "{e}"
    );
    let e = run_err(c.with_token("alice-token").args(["get", "pods", "-A"]));
    assert!(
        e.contains(r#"cannot list resource "pods" in API group "" at the cluster scope"#),
        "{e}"
    );

    // The admin may impersonate (kubectl --as); alice may not.
    let as_alice = run_ok(c.admin().args([
        "auth", "can-i", "list", "pods", "-n", "demo", "--as", "alice",
    ]));
    assert_eq!(as_alice.trim(), "yes");
    let out = c
        .admin()
        .args([
            "auth", "can-i", "list", "pods", "-n", "other", "--as", "alice",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    let e = run_err(
        c.with_token("alice-token")
            .args(["get", "pods", "-n", "demo", "--as", "bob"]),
    );
    assert!(
        e.contains(r#"User "alice" cannot impersonate resource "users" in API group """#),
        "{e}"
    );

    // She can watch there: a pod the admin creates reaches her watch.
    let (mut watch, rx) = common::spawn_lines(c.with_token("alice-token").args([
        "get",
        "pods",
        "-n",
        "demo",
        "-w",
        "--no-headers",
    ]));
    run_ok(
        c.admin()
            .args(["run", "web", "-n", "demo", "--image", "nginx"]),
    );
    let mut seen = Vec::new();
    common::expect_line(&rx, &["web"], &mut seen);
    let _ = watch.kill();
    let _ = watch.wait();

    // Escalation: with rights to write roles and bindings in demo, alice still cannot grant
    // what she does not hold.
    apply(
        &mut c.admin(),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: rbac-editor, namespace: demo}\n\
         rules:\n- apiGroups: [rbac.authorization.k8s.io]\n  resources: [roles, rolebindings]\n  verbs: [create, get, list, update, patch]\n",
        d,
        "editor.yaml",
    )
    .unwrap();
    run_ok(c.admin().args([
        "create",
        "rolebinding",
        "alice-edits-rbac",
        "-n",
        "demo",
        "--role",
        "rbac-editor",
        "--user",
        "alice",
    ]));
    let secrets_role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: secret-reader, namespace: demo}\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [secrets]\n  verbs: [get]\n";
    let deadline = Instant::now() + PATIENCE;
    let e = loop {
        let e = apply(
            &mut c.with_token("alice-token"),
            secrets_role,
            d,
            "secrets.yaml",
        )
        .unwrap_err();
        if e.contains("attempting to grant RBAC permissions not currently held")
            || Instant::now() > deadline
        {
            break e;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(
        e.contains("attempting to grant RBAC permissions not currently held"),
        "{e}"
    );
    assert!(e.contains(r#"Resources:["secrets"]"#), "{e}");
    let pods_role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: pod-getter, namespace: demo}\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get]\n";
    apply(&mut c.with_token("alice-token"), pods_role, d, "pods.yaml").unwrap();
    let e = run_err(c.with_token("alice-token").args([
        "create",
        "rolebinding",
        "sneaky",
        "-n",
        "demo",
        "--clusterrole",
        "cluster-admin",
        "--user",
        "alice",
    ]));
    assert!(
        e.contains("forbidden") && e.contains("not currently held"),
        "{e}"
    );

    // A ServiceAccount token from `kubectl create token`: denied, then bound, then refused
    // once the account is deleted.
    run_ok(
        c.admin()
            .args(["create", "serviceaccount", "builder", "-n", "demo"]),
    );
    let token = run_ok(c.admin().args(["create", "token", "builder", "-n", "demo"]));
    let token = token.trim();
    let who = run_ok(c.with_token(token).args(["auth", "whoami"]));
    assert!(who.contains("system:serviceaccount:demo:builder"), "{who}");
    let e = run_err(c.with_token(token).args(["get", "pods", "-n", "demo"]));
    assert!(
        e.contains(r#"User "system:serviceaccount:demo:builder" cannot list resource "pods""#),
        "{e}"
    );
    run_ok(c.admin().args([
        "create",
        "rolebinding",
        "builder-reads",
        "-n",
        "demo",
        "--role",
        "pod-reader",
        "--serviceaccount",
        "demo:builder",
    ]));
    until_ok(|| {
        let mut k = c.with_token(token);
        k.args(["get", "pods", "-n", "demo"]);
        k
    });
    run_ok(
        c.admin()
            .args(["delete", "serviceaccount", "builder", "-n", "demo"]),
    );
    let deadline = Instant::now() + PATIENCE;
    let e = loop {
        let out = c
            .with_token(token)
            .args(["get", "pods", "-n", "demo"])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() || Instant::now() > deadline {
            break e;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(e.contains("Unauthorized"), "{e}");

    // Audit: every request above left JSON lines; a denied list and an allowed one are there.
    let audit = std::fs::read_to_string(c.path("audit.log")).unwrap();
    let events: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        events
            .iter()
            .all(|e| e["kind"] == "Event" && e["apiVersion"] == "audit.k8s.io/v1")
    );
    let alice_lists = |code: u64| {
        events.iter().any(|e| {
            e["user"]["username"] == "alice"
                && e["verb"] == "list"
                && e["stage"] == "ResponseComplete"
                && e["objectRef"]["resource"] == "pods"
                && e["objectRef"]["namespace"] == "demo"
                && e["responseStatus"]["code"] == code
        })
    };
    assert!(alice_lists(403), "no audit event of alice's denied list");
    assert!(alice_lists(200), "no audit event of alice's allowed list");
    assert!(events.iter().any(|e| e["stage"] == "RequestReceived"));
    assert!(events.iter().any(|e| e["responseStatus"]["code"] == 401));
    assert!(
        events
            .iter()
            .any(|e| e["user"]["username"] == "kubernetes-admin"
                && e["verb"] == "create"
                && e["objectRef"]["resource"] == "namespaces")
    );
    assert!(
        events
            .iter()
            .any(|e| e["annotations"]["authorization.k8s.io/decision"] == "forbid")
    );
}

fn kube_client(url: &str, token: &str) -> kube::Client {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.auth_info.token = Some(token.to_owned().into());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_with_a_bearer_token_and_bootstrap_reconciliation() {
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    let c = Cluster::start_http();
    let root = kube_client(&c.server.url, "root-token");
    let ns: kube::Api<Namespace> = kube::Api::all(root.clone());
    let pp = kube::api::PostParams::default();
    let demo: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "demo"}})).unwrap();
    ns.create(&pp, &demo).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "alice-view", "namespace": "demo"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }))
    .unwrap();
    kube::Api::<RoleBinding>::namespaced(root.clone(), "demo")
        .create(&pp, &binding)
        .await
        .unwrap();
    let bound = Instant::now();

    // alice, with her token
    let alice = kube_client(&c.server.url, "alice-token");
    let pods: kube::Api<Pod> = kube::Api::namespaced(alice.clone(), "demo");
    let deadline = Instant::now() + PATIENCE;
    loop {
        match pods.list(&Default::default()).await {
            Ok(l) => {
                assert!(l.items.is_empty());
                // Reported, not asserted (timings on a shared machine are noise): the
                // informer path takes milliseconds.
                eprintln!("the binding took effect after {:?}", bound.elapsed());
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let other: kube::Api<Pod> = kube::Api::namespaced(alice, "other");
    match other.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(s.reason, "Forbidden");
            assert_eq!(
                s.message,
                r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "other""#
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let wrong: kube::Api<Pod> = kube::Api::namespaced(kube_client(&c.server.url, "wrong"), "demo");
    match wrong.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized")),
        other => panic!("expected 401, got {other:?}"),
    }

    // The bootstrap policy comes back when edited away.
    let roles: kube::Api<ClusterRole> = kube::Api::all(root);
    roles.delete("view", &Default::default()).await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Ok(Some(view)) = roles.get_opt("view").await {
            let rules = view.rules.unwrap_or_default();
            if rules.iter().any(|r| {
                r.resources
                    .as_ref()
                    .is_some_and(|x| x.iter().any(|x| x == "pods"))
            }) {
                break;
            }
        }
        assert!(Instant::now() < deadline, "view was not recreated");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[test]
#[ignore = "needs the Python kubernetes client"]
fn python_client_with_a_bearer_token() {
    let c = Cluster::start_http();
    let python = common::python::python();
    let importable = Command::new(&python)
        .args(["-c", "import kubernetes"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        importable,
        "{python} cannot import `kubernetes`: `cargo xtask test` installs it"
    );
    let script = r#"
import sys, time
from kubernetes import client
cfg = client.Configuration()
cfg.host = sys.argv[1]
cfg.api_key = {"authorization": "alice-token"}
cfg.api_key_prefix = {"authorization": "Bearer"}
root = client.Configuration()
root.host = sys.argv[1]
root.api_key = {"authorization": "root-token"}
root.api_key_prefix = {"authorization": "Bearer"}
client.CoreV1Api(client.ApiClient(root)).create_namespace({"metadata": {"name": "demo"}})
client.RbacAuthorizationV1Api(client.ApiClient(root)).create_namespaced_role_binding("demo", {
    "metadata": {"name": "alice-view"},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
})
api = client.CoreV1Api(client.ApiClient(cfg))
deadline = time.time() + 60
while True:
    try:
        api.list_namespaced_pod("demo")
        break
    except client.exceptions.ApiException as e:
        if time.time() > deadline:
            raise
        time.sleep(0.05)
try:
    api.list_namespaced_pod("other")
    raise SystemExit("listing another namespace was allowed")
except client.exceptions.ApiException as e:
    assert e.status == 403, e.status
    assert 'cannot list resource \\"pods\\" in API group \\"\\" in the namespace \\"other\\"' in e.body, e.body
cfg.api_key = {"authorization": "wrong"}
try:
    client.CoreV1Api(client.ApiClient(cfg)).list_namespaced_pod("demo")
    raise SystemExit("a bad token was accepted")
except client.exceptions.ApiException as e:
    assert e.status == 401, e.status
print("python auth checks passed")
"#;
    let out = Command::new(python)
        .args(["-c", script, &c.server.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python checks failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python auth checks passed"));
}

#[test]
fn subject_access_reviews_are_for_admins() {
    // An admin asks about another user (SubjectAccessReview, LocalSubjectAccessReview); a
    // user without the right to create them is refused, as upstream.
    let c = Cluster::start_http();
    let addr = &c.server.addr;
    let root = [
        ("Authorization", "Bearer root-token"),
        ("Content-Type", "application/json"),
    ];
    let review = |headers: &[(&str, &str)], path: &str, ns: &str| {
        let body = serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": if ns.is_empty() { "SubjectAccessReview" } else { "LocalSubjectAccessReview" },
            "metadata": if ns.is_empty() { serde_json::json!({}) } else { serde_json::json!({"namespace": ns}) },
            "spec": {
                "user": "alice",
                "groups": ["dev"],
                "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "demo"},
            },
        });
        common::http(addr, "POST", path, headers, body.to_string().as_bytes())
    };
    let cluster = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let local = "/apis/authorization.k8s.io/v1/namespaces/demo/localsubjectaccessreviews";
    let r = review(&root, cluster, "");
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["status"]["allowed"], false);
    let binding = br#"{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding",
        "metadata":{"name":"dev-view","namespace":"demo"},
        "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
        "subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"dev"}]}"#;
    let ns = br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"demo"}}"#;
    assert_eq!(
        common::http(addr, "POST", "/api/v1/namespaces", &root, ns).status,
        201
    );
    let r = common::http(
        addr,
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/demo/rolebindings",
        &root,
        binding,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = review(&root, cluster, "");
        if r.json()["status"]["allowed"] == true {
            assert!(
                r.json()["status"]["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("dev-view"),
                "{}",
                r.json()
            );
            break;
        }
        assert!(Instant::now() < deadline, "{}", r.json());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let r = review(&root, local, "demo");
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["status"]["allowed"], true);

    let alice = [
        ("Authorization", "Bearer alice-token"),
        ("Content-Type", "application/json"),
    ];
    let r = review(&alice, cluster, "");
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        r#"subjectaccessreviews.authorization.k8s.io is forbidden: User "alice" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope"#
    );
}

#[test]
fn the_bootstrap_policy_is_in_force_when_the_server_announces_itself() {
    // Upstream's /readyz waits for its rbac/bootstrap-roles hook: the first request after
    // start must find the bootstrap ClusterRoles and bindings in the authorizer, so an
    // ordinary user may review itself (system:basic-user) at once. Servers start side by
    // side (as under `cargo test`'s parallelism) to widen any gap between the announcement
    // and the policy.
    let checks: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..2 {
                    first_requests_see_the_bootstrap_policy();
                }
            })
        })
        .collect();
    for c in checks {
        c.join().unwrap();
    }
}

fn first_requests_see_the_bootstrap_policy() {
    let c = Cluster::start_http();
    let alice = [
        ("Authorization", "Bearer alice-token"),
        ("Content-Type", "application/json"),
    ];
    // Denied, and for no other reason than having no binding: no RBAC error about
    // bootstrap ClusterRoles that the authorizer has not seen yet.
    let r = common::http(
        &c.server.addr,
        "GET",
        "/api/v1/namespaces/default/secrets",
        &alice,
        b"",
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json()["message"],
        r#"secrets is forbidden: User "alice" cannot list resource "secrets" in API group "" in the namespace "default""#
    );
    let r = common::http(
        &c.server.addr,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &alice,
        br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let root = [("Authorization", "Bearer root-token")];
    let roles = common::http(
        &c.server.addr,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &root,
        b"",
    )
    .json();
    let names: Vec<&str> = roles["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    for want in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:basic-user",
        "system:public-info-viewer",
    ] {
        assert!(names.contains(&want), "{want} missing: {names:?}");
    }
}

/// The race of issue 14, end to end and without kubectl's process start-up in between: a
/// ServiceAccount is created, a token requested for it and used at once, many times over.
/// The token verifier's informer may not have seen the create yet; storage has, so every
/// token is accepted. Then the accounts are deleted and every token is refused (storage
/// confirming the absence).
#[test]
fn tokens_of_just_created_service_accounts_are_accepted_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let sa_key = dir.path().join("sa.key");
    std::fs::write(&sa_key, key.serialize_pem()).unwrap();
    let server = Server::start(&[
        "--token-auth-file",
        tokens.to_str().unwrap(),
        "--service-account-signing-key-file",
        sa_key.to_str().unwrap(),
    ]);
    let addr = &server.addr;
    let root = [
        ("Authorization", "Bearer root-token"),
        ("Content-Type", "application/json"),
    ];
    const ROUNDS: usize = 100;
    let mut issued = Vec::new();
    for i in 0..ROUNDS {
        let name = format!("fresh-{i}");
        let sa = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}});
        let r = common::http(
            addr,
            "POST",
            "/api/v1/namespaces/default/serviceaccounts",
            &root,
            sa.to_string().as_bytes(),
        );
        assert_eq!(r.status, 201, "{:?}", String::from_utf8_lossy(&r.body));
        let r = common::http(
            addr,
            "POST",
            &format!("/api/v1/namespaces/default/serviceaccounts/{name}/token"),
            &root,
            br#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}"#,
        );
        assert_eq!(r.status, 201, "{:?}", String::from_utf8_lossy(&r.body));
        let token = r.json()["status"]["token"].as_str().unwrap().to_owned();
        let bearer = format!("Bearer {token}");
        let who = common::http(
            addr,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &[
                ("Authorization", bearer.as_str()),
                ("Content-Type", "application/json"),
            ],
            br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#,
        );
        assert_eq!(
            who.status,
            201,
            "round {i}: the token of a just-created account: {:?}",
            String::from_utf8_lossy(&who.body)
        );
        assert_eq!(
            who.json()["status"]["userInfo"]["username"],
            format!("system:serviceaccount:default:{name}")
        );
        issued.push((name, bearer));
    }
    for (name, _) in &issued {
        let r = common::http(
            addr,
            "DELETE",
            &format!("/api/v1/namespaces/default/serviceaccounts/{name}"),
            &root,
            b"",
        );
        assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    }
    for (name, bearer) in &issued {
        // The informer may still hold a deleted account for a moment (as upstream's
        // lister may): the token is refused once it has caught up.
        let deadline = Instant::now() + PATIENCE;
        loop {
            let r = common::http(
                addr,
                "GET",
                "/api",
                &[("Authorization", bearer.as_str())],
                b"",
            );
            if r.status == 401 {
                assert_eq!(r.json()["reason"], "Unauthorized");
                break;
            }
            assert!(Instant::now() < deadline, "{name}: still {}", r.status);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// The status line of a raw `GET /version` sent with `authorization` as the
/// Authorization header's bytes (no client can send a value that is not text).
fn raw_version_status(addr: &str, authorization: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut req =
        b"GET /version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nAuthorization: "
            .to_vec();
    req.extend_from_slice(authorization);
    req.extend_from_slice(b"\r\n\r\n");
    s.write_all(&req).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// Red-team finding F5 (issue 23): an Authorization header whose value is not visible
/// ASCII (`Bearer root-token\xe9`, or a UTF-8 token) was dropped and the request served as
/// system:anonymous. As upstream (which compares the token's bytes): a bearer token no
/// authenticator accepts is a 401, never a fallback to anonymous.
#[test]
fn a_bearer_token_that_is_not_ascii_is_refused_not_anonymous() {
    let c = Cluster::start_http();
    let addr = &c.server.addr;
    assert!(
        raw_version_status(addr, b"Bearer root-token").contains(" 200 "),
        "the token itself is accepted"
    );
    for value in [
        b"Bearer root-token\xe9".as_slice(),
        "Bearer root-token\u{e9}".as_bytes(),
        b"bearer \xff\xfe".as_slice(),
    ] {
        let status = raw_version_status(addr, value);
        assert!(
            status.contains(" 401 "),
            "{}: {status}",
            String::from_utf8_lossy(value)
        );
    }
    // No bearer scheme is no token, as upstream: anonymous (allowed /version).
    assert!(raw_version_status(addr, b"Basic \xe9").contains(" 200 "));
}

/// Red-team finding F6 (issue 23): a token in `Sec-WebSocket-Protocol` was read on any
/// request. As upstream's websocket protocol authenticator: only on a websocket upgrade
/// request; elsewhere the header carries no credentials (the request is anonymous).
#[test]
fn a_websocket_protocol_token_counts_only_on_websocket_requests() {
    use base64::Engine;
    let c = Cluster::start_http();
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("root-token");
    let protocol = format!("base64url.bearer.authorization.k8s.io.{token}, base64.binary.k8s.io");
    let r = common::http(
        &c.server.addr,
        "GET",
        "/api/v1/namespaces/default/secrets",
        &[
            ("Sec-WebSocket-Protocol", &protocol),
            ("Accept", "application/json"),
        ],
        b"",
    );
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        String::from_utf8_lossy(&r.body).contains("system:anonymous"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}
