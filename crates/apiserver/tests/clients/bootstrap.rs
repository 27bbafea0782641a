//! What upstream's control plane creates and keeps, seen with kubectl and the Python
//! client (issue 28 item 3): the `kubernetes` Service, Endpoints and EndpointSlice pointing
//! at the server; `kubectl create service clusterip` getting an address; each namespace's
//! `default` ServiceAccount and (with a CA) `kube-root-ca.crt`, re-created when deleted;
//! the bootstrap ClusterRoles and bindings in the insecure mode too; TokenReview answered
//! by the server's authenticators (the Python client with a token over TLS).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::time::Instant;

use common::{PATIENCE, Server, run_err, run_ok};
use serde_json::Value;

/// Runs `cmd` until it succeeds (at most [`PATIENCE`]); its stdout.
fn eventually(mut cmd: impl FnMut() -> Command, what: &str) -> String {
    let start = Instant::now();
    loop {
        let out = cmd().output().unwrap();
        if out.status.success() {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap()
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_sees_the_kubernetes_service_default_accounts_and_bootstrap_roles_in_the_insecure_mode() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    let port: u16 = server.addr.rsplit(':').next().unwrap().parse().unwrap();

    // Bootstrap roles without RBAC.
    for (kind, name) in [
        ("clusterrole", "cluster-admin"),
        ("clusterrole", "admin"),
        ("clusterrole", "system:auth-delegator"),
        ("clusterrolebinding", "cluster-admin"),
    ] {
        eventually(
            || {
                let mut c = k();
                c.args(["get", kind, name]);
                c
            },
            name,
        );
    }

    // The kubernetes Service, Endpoints and EndpointSlice.
    let svc = json(&eventually(
        || {
            let mut c = k();
            c.args(["get", "svc", "kubernetes", "-o", "json"]);
            c
        },
        "the kubernetes Service",
    ));
    assert_eq!(svc["spec"]["clusterIP"], "10.0.0.1");
    assert_eq!(svc["spec"]["ports"][0]["name"], "https");
    assert_eq!(svc["spec"]["ports"][0]["port"], 443);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], port);
    assert_eq!(svc["metadata"]["labels"]["provider"], "kubernetes");
    let table = run_ok(k().args(["get", "svc", "kubernetes"]));
    assert!(
        table.contains("10.0.0.1") && table.contains("443/TCP"),
        "{table}"
    );
    let ep = json(&eventually(
        || {
            let mut c = k();
            c.args(["get", "endpoints", "kubernetes", "-o", "json"]);
            c
        },
        "the kubernetes Endpoints",
    ));
    assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
    assert_eq!(ep["subsets"][0]["ports"][0]["port"], port);
    let slices = eventually(
        || {
            let mut c = k();
            c.args(["get", "endpointslices", "-n", "default", "kubernetes"]);
            c
        },
        "the kubernetes EndpointSlice",
    );
    assert!(
        slices.contains("ADDRESSTYPE") && slices.contains("IPv4"),
        "{slices}"
    );
    assert!(
        slices.contains(&port.to_string()) && slices.contains("127.0.0.1"),
        "{slices}"
    );
    let slice = json(&run_ok(k().args([
        "get",
        "endpointslice",
        "kubernetes",
        "-o",
        "json",
    ])));
    assert_eq!(
        slice["metadata"]["labels"]["kubernetes.io/service-name"],
        "kubernetes"
    );
    assert_eq!(slice["endpoints"][0]["conditions"]["ready"], true);

    // kubectl create service clusterip gets an address with the defaults.
    assert!(
        run_ok(k().args(["create", "service", "clusterip", "web", "--tcp=80:8080"]))
            .contains("service/web created")
    );
    let web = json(&run_ok(k().args(["get", "svc", "web", "-o", "json"])));
    let ip = web["spec"]["clusterIP"].as_str().unwrap();
    assert!(ip.starts_with("10.0.0.") && ip != "10.0.0.1", "{web}");
    assert_eq!(web["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(web["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(web["status"]["loadBalancer"], serde_json::json!({}));
    let err = run_err(k().args([
        "create",
        "service",
        "clusterip",
        "clash",
        "--clusterip",
        ip,
        "--tcp=80",
    ]));
    assert!(err.contains("provided IP is already allocated"), "{err}");

    // A new namespace gets its default ServiceAccount, again after a delete. No CA here:
    // no kube-root-ca.crt.
    run_ok(k().args(["create", "namespace", "fresh"]));
    eventually(
        || {
            let mut c = k();
            c.args(["get", "sa", "default", "-n", "fresh"]);
            c
        },
        "default SA",
    );
    run_ok(k().args(["delete", "sa", "default", "-n", "fresh"]));
    eventually(
        || {
            let mut c = k();
            c.args(["get", "sa", "default", "-n", "fresh"]);
            c
        },
        "default SA again",
    );
    let cms = run_ok(k().args(["get", "configmaps", "-n", "fresh", "-o", "name"]));
    assert!(!cms.contains("kube-root-ca.crt"), "{cms}");

    // The EndpointSlice comes back after a delete (the reconciler's period).
    run_ok(k().args(["delete", "endpointslice", "kubernetes"]));
    eventually(
        || {
            let mut c = k();
            c.args(["get", "endpointslice", "kubernetes"]);
            c
        },
        "slice again",
    );
}

const TOKENS: &str = "root-token,root,uid-root,system:masters\nalice-token,alice,uid-alice,\"dev,qa\"\nbob-token,bob,uid-bob\n";

const REVIEW: &str = r#"
import sys
from kubernetes import client
cfg = client.Configuration()
cfg.host = sys.argv[1]
cfg.ssl_ca_cert = sys.argv[2]
cfg.api_key = {"authorization": "Bearer " + sys.argv[3]}
api = client.AuthenticationV1Api(client.ApiClient(cfg))
try:
    out = api.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=sys.argv[4])))
except client.exceptions.ApiException as e:
    print("status", e.status)
    sys.exit(0)
s = out.status
print("authenticated", s.authenticated)
print("user", s.user.username if s.user else None, sorted(s.user.groups or []) if s.user else None)
print("audiences", s.audiences)
print("error", s.error)
"#;

#[test]
#[ignore = "needs kubectl and the Python kubernetes client"]
fn a_pki_server_publishes_its_ca_per_namespace_and_answers_token_reviews() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let pki = dir.path().join("pki");
    let server = Server::start(&[
        "--pki-dir",
        pki.to_str().unwrap(),
        "--token-auth-file",
        tokens.to_str().unwrap(),
    ]);
    let ca = pki.join("ca.crt");
    let ca_pem = std::fs::read_to_string(&ca).unwrap();
    let k = || {
        let mut c = Command::new("kubectl");
        c.arg("--kubeconfig")
            .arg(pki.join("admin.kubeconfig"))
            .arg("--cache-dir")
            .arg(dir.path().join("cache"));
        c
    };
    for ns in ["default", "kube-system"] {
        let cm = json(&eventually(
            || {
                let mut c = k();
                c.args([
                    "get",
                    "configmap",
                    "kube-root-ca.crt",
                    "-n",
                    ns,
                    "-o",
                    "json",
                ]);
                c
            },
            "kube-root-ca.crt",
        ));
        assert_eq!(cm["data"]["ca.crt"].as_str(), Some(ca_pem.as_str()));
        assert!(cm["metadata"]["annotations"]["kubernetes.io/description"].is_string());
    }
    // Changed or deleted, it is put back.
    run_ok(k().args([
        "patch",
        "configmap",
        "kube-root-ca.crt",
        "-p",
        r#"{"data":{"ca.crt":"forged"}}"#,
    ]));
    let start = Instant::now();
    loop {
        let cm = json(&run_ok(k().args([
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-o",
            "json",
        ])));
        if cm["data"]["ca.crt"].as_str() == Some(ca_pem.as_str()) {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "not reset: {cm}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    run_ok(k().args(["delete", "configmap", "kube-root-ca.crt"]));
    eventually(
        || {
            let mut c = k();
            c.args(["get", "configmap", "kube-root-ca.crt"]);
            c
        },
        "re-created",
    );

    // TokenReview with the Python client, a bearer token over TLS.
    let review = |caller: &str, token: &str| {
        let out = Command::new(common::python::python())
            .args([
                "-c",
                REVIEW,
                &server.url,
                ca.to_str().unwrap(),
                caller,
                token,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let alice = review("root-token", "alice-token");
    assert!(alice.contains("authenticated True"), "{alice}");
    assert!(
        alice.contains("user alice ['dev', 'qa', 'system:authenticated']"),
        "{alice}"
    );
    assert!(alice.contains("error None"), "{alice}");
    let unknown = review("root-token", "no-such-token");
    assert!(unknown.contains("authenticated None"), "{unknown}");
    assert!(
        unknown.contains("error [invalid bearer token]"),
        "{unknown}"
    );
    // create tokenreviews is system:auth-delegator's.
    assert!(review("bob-token", "alice-token").contains("status 403"));
    run_ok(k().args([
        "create",
        "clusterrolebinding",
        "bob-delegates",
        "--clusterrole",
        "system:auth-delegator",
        "--user",
        "bob",
    ]));
    let start = Instant::now();
    loop {
        let out = review("bob-token", "alice-token");
        if out.contains("authenticated True") {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "{out}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Issue 28: "ready" means the bootstrap objects exist. Right after the server announces
/// itself (it does once `/readyz` would pass), `/readyz?verbose` lists every post-start hook
/// done, as upstream's `[+]poststarthook/<name> ok`; every bootstrap object is there; and no
/// bootstrap write follows: watches of every bootstrap resource from the version read at
/// readiness see nothing for a second.
#[test]
fn at_readiness_the_bootstrap_objects_exist_and_no_bootstrap_write_follows() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    let get = |path: &str| -> Value {
        let r = common::http(addr, "GET", path, &[], b"");
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.json()
    };
    // The version of the store at readiness (a consistent list reads the newest).
    let rv = get("/api/v1/namespaces")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    let r = common::http(addr, "GET", "/readyz?verbose", &[], b"");
    assert_eq!(r.status, 200);
    let verbose = String::from_utf8_lossy(&r.body).into_owned();
    for hook in [
        "start-system-namespaces-controller",
        "scheduling/bootstrap-system-priority-classes",
        "rbac/bootstrap-roles",
        "crd-informer-synced",
        "bootstrap-controller",
        "namespace-defaults",
        "kube-apiserver-autoregistration",
        "apiserver/bootstrap-system-flowcontrol-configuration",
        "start-service-ip-repair-controllers",
    ] {
        assert!(
            verbose.contains(&format!("[+]poststarthook/{hook} ok\n")),
            "{hook}: {verbose}"
        );
        let one = common::http(
            addr,
            "GET",
            &format!("/readyz/poststarthook/{hook}"),
            &[],
            b"",
        );
        assert_eq!(one.status, 200, "{hook}");
    }

    for path in [
        "/api/v1/namespaces/default/services/kubernetes",
        "/api/v1/namespaces/default/endpoints/kubernetes",
        "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes",
        "/api/v1/namespaces/default/serviceaccounts/default",
        "/api/v1/namespaces/kube-system/serviceaccounts/default",
        "/api/v1/namespaces/kube-public/serviceaccounts/default",
        "/api/v1/namespaces/kube-node-lease/serviceaccounts/default",
        "/apis/apiregistration.k8s.io/v1/apiservices/v1.",
        "/apis/apiregistration.k8s.io/v1/apiservices/v1.apps",
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/exempt",
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/catch-all",
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/exempt",
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/catch-all",
        "/apis/scheduling.k8s.io/v1/priorityclasses/system-cluster-critical",
        "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin",
    ] {
        get(path);
    }

    // Opened together, read one after the other: each ends after its second.
    let watches: Vec<(&str, common::WatchEvents)> = [
        "/api/v1/namespaces",
        "/api/v1/services",
        "/api/v1/endpoints",
        "/apis/discovery.k8s.io/v1/endpointslices",
        "/api/v1/serviceaccounts",
        "/api/v1/configmaps",
        "/apis/apiregistration.k8s.io/v1/apiservices",
        "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
        "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/apis/rbac.authorization.k8s.io/v1/roles",
        "/apis/rbac.authorization.k8s.io/v1/rolebindings",
    ]
    .into_iter()
    .map(|path| {
        let (stream, status) = common::open_stream(
            addr,
            &format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=1"),
        );
        assert_eq!(status, 200, "{path}");
        (path, common::WatchEvents::new(stream))
    })
    .collect();
    for (path, mut events) in watches {
        while let Some(e) = events.next() {
            assert_eq!(
                e["type"], "BOOKMARK",
                "{path}: a write after readiness (from {rv}): {e}"
            );
        }
    }
}
