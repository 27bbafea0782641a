//! Issue 28 item 2 (red team): `pods/eviction` served as upstream's `EvictionREST`, storage
//! only (a PodDisruptionBudget's status is what a client wrote; no disruption controller).
//! `kubectl drain` of a node evicts its pods through it; the Python client's
//! `create_namespaced_pod_eviction` meets a budget's 429 and then spends it; raw HTTP
//! checks upstream's answers: 429 with the DisruptionBudget cause, 500 for two budgets,
//! 400 for a name that is not the path's, dry run, terminal and unhealthy pods.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{PATIENCE, Server, http, run_ok};
use serde_json::{Value, json};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const MERGE: (&str, &str) = ("Content-Type", "application/merge-patch+json");

fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let r = http(
        &server.addr,
        "POST",
        path,
        &[JSON],
        body.to_string().as_bytes(),
    );
    (r.status, r.json())
}

fn patch_status(server: &Server, path: &str, status: &Value) {
    let r = http(
        &server.addr,
        "PATCH",
        &format!("{path}/status"),
        &[MERGE],
        json!({ "status": status }).to_string().as_bytes(),
    );
    assert_eq!(
        r.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&r.body)
    );
}

fn get(server: &Server, path: &str) -> (u16, Value) {
    let r = http(&server.addr, "GET", path, &[], b"");
    (r.status, r.json())
}

/// A pod on `node` with `labels`, made Running and Ready (`ready`) through `/status`.
fn pod(server: &Server, ns: &str, name: &str, node: &str, app: &str, ready: bool) {
    let body = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "nginx"}]}});
    let (code, v) = post(server, &format!("/api/v1/namespaces/{ns}/pods"), &body);
    assert_eq!(code, 201, "{v}");
    let ready = if ready { "True" } else { "False" };
    patch_status(
        server,
        &format!("/api/v1/namespaces/{ns}/pods/{name}"),
        &json!({"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}),
    );
}

/// A budget over `app` whose status allows `allowed` disruptions.
fn budget(server: &Server, ns: &str, name: &str, app: &str, allowed: i64, extra: Value) {
    let mut spec = json!({"minAvailable": 1, "selector": {"matchLabels": {"app": app}}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    let body = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name}, "spec": spec});
    let coll = format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets");
    let (code, v) = post(server, &coll, &body);
    assert_eq!(code, 201, "{v}");
    patch_status(
        server,
        &format!("{coll}/{name}"),
        &json!({"observedGeneration": 1, "disruptionsAllowed": allowed,
            "desiredHealthy": 1, "currentHealthy": 2, "expectedPods": 2}),
    );
}

fn evict(server: &Server, ns: &str, name: &str, extra: Value) -> (u16, Value) {
    let mut body = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns}});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    post(
        server,
        &format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"),
        &body,
    )
}

fn allowed(server: &Server, ns: &str, name: &str) -> Value {
    let (code, v) = get(
        server,
        &format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}"),
    );
    assert_eq!(code, 200, "{v}");
    v["status"]["disruptionsAllowed"].clone()
}

fn pod_code(server: &Server, ns: &str, name: &str) -> u16 {
    get(server, &format!("/api/v1/namespaces/{ns}/pods/{name}")).0
}

#[test]
fn eviction_honours_budgets_as_upstream() {
    let server = Server::start(&["--acknowledge-pod-deletion"]);
    let ns = "default";
    pod(&server, ns, "web-1", "n1", "web", true);
    pod(&server, ns, "web-2", "n1", "web", true);
    budget(&server, ns, "web", "web", 0, json!({}));

    // Upstream's 429 with the DisruptionBudget cause; the pod stays.
    let (code, v) = evict(&server, ns, "web-1", json!({}));
    assert_eq!(code, 429, "{v}");
    assert_eq!(v["reason"], "TooManyRequests", "{v}");
    assert_eq!(
        v["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(
        v["details"]["causes"],
        json!([{"reason": "DisruptionBudget",
            "message": "The disruption budget web needs 1 healthy pods and has 2 currently"}]),
        "{v}"
    );
    assert_eq!(pod_code(&server, ns, "web-1"), 200);

    // The name of the body must be the path's.
    let (code, v) = post(
        &server,
        "/api/v1/namespaces/default/pods/web-1/eviction",
        &json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-2"}}),
    );
    assert_eq!(code, 400, "{v}");
    assert_eq!(
        v["message"],
        "name in URL does not match name in Eviction object"
    );
    // A missing pod is a 404.
    let (code, v) = evict(&server, ns, "nope", json!({}));
    assert_eq!(code, 404, "{v}");

    // One disruption allowed: a dry run spends nothing and keeps the pod...
    patch_status(
        &server,
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
        &json!({"disruptionsAllowed": 1}),
    );
    let (code, v) = evict(
        &server,
        ns,
        "web-1",
        json!({"deleteOptions": {"dryRun": ["All"]}}),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(allowed(&server, ns, "web"), 1);
    assert_eq!(pod_code(&server, ns, "web-1"), 200);
    // ... the eviction spends it, records the pod and deletes it (policy/v1beta1 too).
    let (code, v) = evict(
        &server,
        ns,
        "web-1",
        json!({"apiVersion": "policy/v1beta1"}),
    );
    assert_eq!((code, &v["status"]), (201, &json!("Success")), "{v}");
    assert_eq!(allowed(&server, ns, "web"), 0);
    let (_, b) = get(
        &server,
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
    );
    assert!(b["status"]["disruptedPods"]["web-1"].is_string(), "{b}");
    assert_eq!(pod_code(&server, ns, "web-1"), 404);

    // A terminal pod goes whatever its budget says.
    patch_status(
        &server,
        "/api/v1/namespaces/default/pods/web-2",
        &json!({"phase": "Failed"}),
    );
    let (code, v) = evict(&server, ns, "web-2", json!({}));
    assert_eq!(code, 201, "{v}");
    assert_eq!(pod_code(&server, ns, "web-2"), 404);
    assert_eq!(allowed(&server, ns, "web"), 0);

    // An unready pod under an AlwaysAllow budget goes without spending it.
    pod(&server, ns, "sick", "n1", "sick", false);
    budget(
        &server,
        ns,
        "sick",
        "sick",
        0,
        json!({"unhealthyPodEvictionPolicy": "AlwaysAllow"}),
    );
    let (code, v) = evict(&server, ns, "sick", json!({}));
    assert_eq!(code, 201, "{v}");
    assert_eq!(pod_code(&server, ns, "sick"), 404);
    assert_eq!(allowed(&server, ns, "sick"), 0);

    // Two budgets over one pod: upstream's 500, nothing changes.
    pod(&server, ns, "db", "n1", "db", true);
    budget(&server, ns, "db-a", "db", 1, json!({}));
    budget(&server, ns, "db-b", "db", 1, json!({}));
    let (code, v) = evict(&server, ns, "db", json!({}));
    assert_eq!(code, 500, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("more than one PodDisruptionBudget"),
        "{v}"
    );
    assert_eq!(pod_code(&server, ns, "db"), 200);
    assert_eq!(allowed(&server, ns, "db-a"), 1);
}

/// Issue 28 (red team): an eviction whose uid or resourceVersion precondition does not
/// match the pod is the deletion's 409 and spends nothing. Before, the budget was lowered
/// first and the deletion's precondition failed after: each such request burned one
/// disruption of the budget without evicting anything.
#[test]
fn a_failed_precondition_spends_no_budget() {
    let server = Server::start(&["--acknowledge-pod-deletion"]);
    let ns = "default";
    pod(&server, ns, "web-1", "n1", "web", true);
    budget(&server, ns, "web", "web", 2, json!({}));
    let (_, p) = get(&server, "/api/v1/namespaces/default/pods/web-1");
    let uid = p["metadata"]["uid"].as_str().unwrap().to_owned();
    let rv = p["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    for pre in [
        json!({"uid": "00000000-0000-0000-0000-000000000000"}),
        json!({"uid": uid, "resourceVersion": "1"}),
    ] {
        let (code, v) = evict(
            &server,
            ns,
            "web-1",
            json!({"deleteOptions": {"preconditions": pre}}),
        );
        assert_eq!(code, 409, "{pre}: {v}");
        assert_eq!(v["reason"], "Conflict", "{v}");
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains("Precondition failed"),
            "{v}"
        );
        assert_eq!(
            allowed(&server, ns, "web"),
            2,
            "{pre}: the budget is untouched"
        );
        assert_eq!(pod_code(&server, ns, "web-1"), 200);
    }
    // Matching preconditions evict and spend one.
    let (code, v) = evict(
        &server,
        ns,
        "web-1",
        json!({"deleteOptions": {"preconditions": {"uid": uid, "resourceVersion": rv}}}),
    );
    assert_eq!(code, 201, "{v}");
    assert_eq!(allowed(&server, ns, "web"), 1);
    assert_eq!(pod_code(&server, ns, "web-1"), 404);
}

/// Issue 28 (red team): eight budgets of 30 000 expressions each (all holding for the pod
/// but the last, so every one is read to its end) are judged, and the pod they do not
/// cover is evicted. Each expression is read once per eviction (see
/// `listwatch_kinds::builtin::policy::eviction::covers`).
#[test]
fn budgets_of_many_expressions_are_judged() {
    let server = Server::start(&["--acknowledge-pod-deletion"]);
    let ns = "default";
    pod(&server, ns, "web-1", "n1", "web", true);
    let coll = format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets");
    for b in 0..8 {
        let mut exprs: Vec<Value> = (0..30_000)
            .map(|i| json!({"key": format!("k{i}"), "operator": "DoesNotExist"}))
            .collect();
        exprs.push(json!({"key": "app", "operator": "NotIn", "values": ["web"]}));
        let body = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": format!("big-{b}")},
            "spec": {"minAvailable": 1, "selector": {"matchExpressions": exprs}}});
        let (code, v) = post(&server, &coll, &body);
        assert_eq!(code, 201, "{}", v["message"]);
    }
    let (code, v) = evict(&server, ns, "web-1", json!({}));
    assert_eq!(code, 201, "{v}");
    assert_eq!(pod_code(&server, ns, "web-1"), 404);
}

fn kubectl_ok(k: &dyn Fn() -> Command, args: &[&str]) -> String {
    run_ok(k().args(args))
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let f = dir.join(name);
    std::fs::write(&f, text).unwrap();
    f
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_drain_evicts_the_pods_of_a_node() {
    common::require("kubectl");
    let server = Server::start(&["--acknowledge-pod-deletion"]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    let nodes = write(
        dir.path(),
        "nodes.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: node-1}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata: {name: node-2}\n",
    );
    kubectl_ok(&k, &["apply", "-f", nodes.to_str().unwrap()]);
    pod(&server, "default", "web-1", "node-1", "web", true);
    pod(&server, "default", "web-2", "node-1", "web", true);
    pod(&server, "default", "other", "node-2", "web", true);
    budget(&server, "default", "web", "web", 2, json!({}));

    let out = kubectl_ok(
        &k,
        &[
            "drain",
            "node-1",
            "--ignore-daemonsets",
            "--force",
            "--timeout=60s",
        ],
    );
    assert!(out.contains("evicting pod default/web-1"), "{out}");
    assert!(out.contains("node/node-1 drained"), "{out}");
    let left = kubectl_ok(&k, &["get", "pods", "-o", "name"]);
    assert_eq!(left.trim(), "pod/other", "{left}");
    let (_, b) = get(
        &server,
        "/apis/policy/v1/namespaces/default/poddisruptionbudgets/web",
    );
    assert_eq!(b["status"]["disruptionsAllowed"], 0, "{b}");
    let mut disrupted: Vec<&String> = b["status"]["disruptedPods"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    disrupted.sort();
    assert_eq!(disrupted, ["web-1", "web-2"], "{b}");
    let unsched = kubectl_ok(
        &k,
        &[
            "get",
            "node",
            "node-1",
            "-o",
            "jsonpath={.spec.unschedulable}",
        ],
    );
    assert_eq!(unsched, "true");
}

#[test]
#[ignore = "needs the Python kubernetes client"]
fn python_client_evicts_a_pod() {
    let server = Server::start(&["--acknowledge-pod-deletion"]);
    let script = format!(
        "{}/tests/python/eviction_checks.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = common::python::run_script(&[&script, &server.url], 2 * PATIENCE);
    assert!(
        out.status.success(),
        "python eviction checks failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("python eviction checks passed"));
}
