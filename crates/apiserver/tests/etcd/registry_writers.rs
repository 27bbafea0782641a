//! The server's own writers create through the registry as named managers (issue 27 step 3,
//! item 3), seen through the binary: the bootstrap namespaces and the RBAC bootstrap policy
//! carry a managedFields entry of `kube-apiserver` (upstream writes them through its loopback
//! client), and the leader-election Lease one of `kube-controller-manager` (upstream's
//! leader-election client's manager).
//!
//! The Lease test needs Debian's `etcd-server` (leader election runs on etcd only);
//! `cargo xtask test` runs ignored tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::replicas::Replicas;
use common::{PATIENCE, Server, http};

/// The managers of `path`'s object, with their operations, once it exists (waits for it:
/// the bootstrap writers run while the server already listens).
fn managers(addr: &str, path: &str, headers: &[(&str, &str)]) -> Vec<(String, String)> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let resp = http(addr, "GET", path, headers, b"");
        if resp.status == 200 {
            let obj = resp.json();
            return obj["metadata"]["managedFields"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| {
                            (
                                e["manager"].as_str().unwrap_or_default().to_owned(),
                                e["operation"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
        }
        assert!(
            Instant::now() < deadline,
            "{path}: {} {}",
            resp.status,
            String::from_utf8_lossy(&resp.body)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn bootstrap_namespaces_and_rbac_policy_carry_a_kube_apiserver_managed_fields_entry() {
    // An authenticator turns RBAC (and its bootstrap policy) on; `root` is a system:masters.
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "root-token,root,uid-root,system:masters\n").unwrap();
    let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
    let root = [("Authorization", "Bearer root-token")];
    let want = vec![("kube-apiserver".to_owned(), "Update".to_owned())];
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert_eq!(
            managers(&server.addr, &format!("/api/v1/namespaces/{ns}"), &root),
            want,
            "namespace {ns}"
        );
    }
    for path in [
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:discovery",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin",
    ] {
        assert_eq!(managers(&server.addr, path, &root), want, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd"]
async fn the_leader_election_lease_is_recorded_under_kube_controller_manager() {
    let replicas = Replicas::start(1, &[]).await;
    let addr = replicas.replica(0).addr.clone();
    let path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/listwatch-controllers";
    let found = tokio::task::spawn_blocking(move || managers(&addr, path, &[]))
        .await
        .unwrap();
    assert_eq!(
        found,
        vec![("kube-controller-manager".to_owned(), "Update".to_owned())],
        "the lease's managedFields"
    );
}

/// Upstream's namespace controller writes a terminating namespace's conditions with
/// UpdateStatus from kube-controller-manager: its managedFields entry names that manager and
/// the `status` subresource.
#[test]
fn the_namespace_controllers_status_writes_are_recorded_under_kube_controller_manager() {
    const JSON: (&str, &str) = ("Content-Type", "application/json");
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let ns = br#"{"metadata":{"name":"held"}}"#;
    assert_eq!(
        http(addr, "POST", "/api/v1/namespaces", &[JSON], ns).status,
        201
    );
    // A finalizer nobody removes keeps the namespace terminating, with its conditions.
    let cm = br#"{"metadata":{"name":"c","finalizers":["example.com/hold"]}}"#;
    let path = "/api/v1/namespaces/held/configmaps";
    assert_eq!(http(addr, "POST", path, &[JSON], cm).status, 201);
    assert_eq!(
        http(addr, "DELETE", "/api/v1/namespaces/held", &[], b"").status,
        200
    );
    let deadline = Instant::now() + PATIENCE;
    loop {
        let obj = http(addr, "GET", "/api/v1/namespaces/held", &[], b"").json();
        let entries = obj["metadata"]["managedFields"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let status_writer = entries.iter().find(|e| e["subresource"] == "status");
        if let Some(e) = status_writer {
            assert_eq!(e["manager"], "kube-controller-manager", "{e}");
            assert_eq!(e["operation"], "Update", "{e}");
            assert!(e["fieldsV1"]["f:status"]["f:conditions"].is_object(), "{e}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no status entry in {entries:?} of {obj}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Let the namespace go.
    let patch = br#"{"metadata":{"finalizers":null}}"#;
    let merge = ("Content-Type", "application/merge-patch+json");
    assert_eq!(
        http(
            addr,
            "PATCH",
            "/api/v1/namespaces/held/configmaps/c",
            &[merge],
            patch
        )
        .status,
        200
    );
}

/// The bootstrap reconcile restores a changed bootstrap role as kube-apiserver: the fields it
/// writes back are owned by `kube-apiserver` again, not by whoever changed them.
#[test]
fn the_rbac_reconcile_records_its_updates_under_kube_apiserver() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "root-token,root,uid-root,system:masters\n").unwrap();
    let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
    let addr = server.addr.as_str();
    let root = ("Authorization", "Bearer root-token");
    let path = "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:discovery";
    managers(addr, path, &[root]);
    let merge = ("Content-Type", "application/merge-patch+json");
    let resp = http(
        addr,
        "PATCH",
        &format!("{path}?fieldManager=tester"),
        &[root, merge],
        br#"{"rules":[]}"#,
    );
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let obj = http(addr, "GET", path, &[root], b"").json();
        let restored = obj["rules"].as_array().is_some_and(|r| !r.is_empty());
        if restored {
            let owners: Vec<&str> = obj["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["fieldsV1"].get("f:rules").is_some())
                .filter_map(|e| e["manager"].as_str())
                .collect();
            assert_eq!(owners, ["kube-apiserver"], "{obj}");
            break;
        }
        assert!(Instant::now() < deadline, "never restored: {obj}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
