//! Issue 30 item 9: no kubelet runs here, so a scheduled pod's graceful deletion never ends
//! by itself; `--acknowledge-pod-deletion` acts as the kubelet's acknowledgement (its DELETE
//! of grace 0) for test environments. With kubectl against the binary: `kubectl delete pod`
//! of a scheduled pod returns and the pod is gone, a watcher sees the mark (MODIFIED, with
//! deletionTimestamp) before the removal (DELETED), finalizers still hold the pod, a
//! namespace with scheduled pods goes, and deletions pending across a restart with
//! `--data-dir` complete at start. Without the flag the grace period holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::mpsc::Receiver;
use std::time::Instant;

use common::{PATIENCE, Server, run_err, run_ok, spawn_lines};

/// A scheduled pod with a grace period no test would wait out (10 minutes).
fn pod(name: &str, ns: &str, finalizer: bool) -> String {
    let finalizers = if finalizer {
        "\n  finalizers: [example.com/hold]"
    } else {
        ""
    };
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}{finalizers}
spec:
  nodeName: n1
  terminationGracePeriodSeconds: 600
  containers:
  - name: c
    image: nginx:1.26
"
    )
}

fn apply(k: &dyn Fn() -> Command, dir: &Path, manifest: &str) {
    let file = dir.join("manifest.yaml");
    std::fs::write(&file, manifest).unwrap();
    run_ok(k().arg("apply").arg("-f").arg(&file));
}

fn not_found(k: &dyn Fn() -> Command, args: &[&str]) {
    let err = run_err(k().arg("get").args(args));
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
}

/// The watch lines (`EVENT NAME DELETION GRACE`) of `name` up to its DELETED one.
fn events_until_deleted(rx: &Receiver<String>, name: &str) -> Vec<Vec<String>> {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no DELETED event of {name}; saw {seen:#?}"));
        let cols: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        if cols.get(1).map(String::as_str) != Some(name) {
            continue;
        }
        let deleted = cols.first().map(String::as_str) == Some("DELETED");
        seen.push(cols);
        if deleted {
            return seen;
        }
    }
}

/// With the flag: `kubectl delete pod` returns at once and the pod is gone; a watcher sees
/// MODIFIED (deletionTimestamp, the pod's grace period), MODIFIED (the kubelet's grace 0),
/// DELETED; a pod with a finalizer is marked and kept until the finalizer goes; a namespace
/// with scheduled pods goes (its controller's deletions are acknowledged too).
#[test]
#[ignore = "needs kubectl"]
fn kubectl_delete_of_a_scheduled_pod_completes_when_the_server_acknowledges() {
    common::require("kubectl");
    let server = Server::start(&["--acknowledge-pod-deletion"]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    run_ok(k().args(["create", "namespace", "ack"]));
    apply(&k, dir.path(), &pod("web", "ack", false));

    let (mut watch, rx) = spawn_lines(k().args([
        "get",
        "pods",
        "-n",
        "ack",
        "-w",
        "--output-watch-events",
        "-o",
        "custom-columns=EVENT:.type,NAME:.object.metadata.name,\
         DELETION:.object.metadata.deletionTimestamp,\
         GRACE:.object.metadata.deletionGracePeriodSeconds",
    ]));
    // The watch has started once it has listed the pod.
    let mut seen = Vec::new();
    common::expect_line(&rx, &["ADDED", "web"], &mut seen);

    // kubectl waits for the pod to be gone: a deadline only against a hang (a pod in a
    // 10-minute grace period would hold it that long).
    let out = run_ok(k().args(["delete", "pod", "web", "-n", "ack", "--timeout=60s"]));
    assert!(out.contains("pod \"web\" deleted"), "{out}");
    not_found(&k, &["pod", "web", "-n", "ack"]);

    let events = events_until_deleted(&rx, "web");
    let kinds: Vec<&str> = events.iter().map(|e| e[0].as_str()).collect();
    assert_eq!(
        kinds,
        ["MODIFIED", "MODIFIED", "DELETED"],
        "the mark, the kubelet's mark, the removal: {events:#?}"
    );
    assert_ne!(events[0][2], "<none>", "the mark has a deletionTimestamp");
    assert_eq!(events[0][3], "600", "the pod's own grace period first");
    assert_eq!(events[1][3], "0", "then the kubelet's grace 0");
    let _ = watch.kill();
    let _ = watch.wait();

    // Finalizers hold the pod, as upstream's grace-0 DELETE leaves it: marked, grace 0.
    apply(&k, dir.path(), &pod("held", "ack", true));
    let out = run_ok(k().args(["delete", "pod", "held", "-n", "ack", "--wait=false"]));
    assert!(out.contains("pod \"held\" deleted"), "{out}");
    let marked = run_ok(k().args([
        "get",
        "pod",
        "held",
        "-n",
        "ack",
        "-o",
        "jsonpath={.metadata.deletionTimestamp} {.metadata.deletionGracePeriodSeconds} \
         {.metadata.finalizers}",
    ]));
    let fields: Vec<&str> = marked.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{marked}");
    assert_eq!(fields[1], "0", "{marked}");
    assert_eq!(fields[2], "[\"example.com/hold\"]", "{marked}");
    // Removing the finalizer removes the pod: no grace period is pending any more.
    run_ok(k().args([
        "patch",
        "pod",
        "held",
        "-n",
        "ack",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]));
    not_found(&k, &["pod", "held", "-n", "ack"]);

    // A namespace with scheduled pods: its controller's DELETEs are acknowledged too.
    let many: String = (0..20)
        .map(|i| pod(&format!("p-{i}"), "ack", false))
        .collect::<Vec<_>>()
        .join("---\n");
    apply(&k, dir.path(), &many);
    let out = run_ok(k().args(["delete", "namespace", "ack", "--timeout=60s"]));
    assert!(out.contains("namespace \"ack\" deleted"), "{out}");
    not_found(&k, &["namespace", "ack"]);
    let left = run_ok(k().args(["get", "pods", "-A", "-o", "name"]));
    assert_eq!(left.trim(), "", "the namespace took its pods");
}

/// Without the flag (the default, upstream without a kubelet): a DELETE of a scheduled pod
/// only marks it, and it stays in its grace period.
#[test]
#[ignore = "needs kubectl"]
fn without_the_flag_a_scheduled_pod_stays_in_its_grace_period() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    run_ok(k().args(["create", "namespace", "wait"]));
    apply(&k, dir.path(), &pod("web", "wait", false));
    let out = run_ok(k().args(["delete", "pod", "web", "-n", "wait", "--wait=false"]));
    assert!(out.contains("pod \"web\" deleted"), "{out}");
    let marked = run_ok(k().args([
        "get",
        "pod",
        "web",
        "-n",
        "wait",
        "-o",
        "jsonpath={.metadata.deletionTimestamp} {.metadata.deletionGracePeriodSeconds}",
    ]));
    let fields: Vec<&str> = marked.split_whitespace().collect();
    assert_eq!(fields.len(), 2, "{marked}");
    assert_eq!(fields[1], "600", "{marked}");
}

/// A deletion pending when the server stopped (written without the flag) completes when it
/// starts again on the same `--data-dir` with the flag; one held by a finalizer is marked
/// with grace 0 and kept.
#[test]
#[ignore = "needs kubectl"]
fn deletions_pending_across_a_restart_complete_at_start() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    {
        let server = Server::start(&["--data-dir", data]);
        let k = || server.kubectl(dir.path());
        run_ok(k().args(["create", "namespace", "r"]));
        apply(&k, dir.path(), &pod("web", "r", false));
        apply(&k, dir.path(), &pod("held", "r", true));
        run_ok(k().args(["delete", "pod", "web", "held", "-n", "r", "--wait=false"]));
        assert!(server.terminate(), "graceful shutdown exits 0");
    }
    let server = Server::start(&["--data-dir", data, "--acknowledge-pod-deletion"]);
    let k = || server.kubectl(dir.path());
    // The start-up pass runs in the background: wait for it (a deadline against a hang).
    run_ok(k().args([
        "wait",
        "--for=delete",
        "pod/web",
        "-n",
        "r",
        "--timeout=60s",
    ]));
    run_ok(k().args([
        "wait",
        "--for=jsonpath={.metadata.deletionGracePeriodSeconds}=0",
        "pod/held",
        "-n",
        "r",
        "--timeout=60s",
    ]));
    let held = run_ok(k().args([
        "get",
        "pod",
        "held",
        "-n",
        "r",
        "-o",
        "jsonpath={.metadata.finalizers}",
    ]));
    assert_eq!(
        held.trim(),
        "[\"example.com/hold\"]",
        "held by its finalizer"
    );
}

/// Raw HTTP with the flag: a collection DELETE removes every scheduled pod (each answered
/// with its grace-0 mark); a dry run writes nothing and is not acknowledged; an unscheduled
/// pod and an explicit grace 0 go as without the flag; a Foreground DELETE leaves the pod
/// to the garbage collector's finalizer, which lets it go.
#[test]
fn collection_dry_run_and_grace_0_deletes_with_the_flag_over_http() {
    let server = Server::start(&["--acknowledge-pod-deletion"]);
    let a = server.addr.as_str();
    let ct = [("Content-Type", "application/json")];
    let pods = "/api/v1/namespaces/default/pods";
    let create = |name: &str, node: &str| {
        let body = serde_json::json!({"metadata":{"name":name},
            "spec":{"nodeName":node,"containers":[{"name":"c","image":"x"}]}});
        let r = common::http(a, "POST", pods, &ct, body.to_string().as_bytes());
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    };
    let status = |name: &str| common::http(a, "GET", &format!("{pods}/{name}"), &[], b"").status;

    create("dry", "n1");
    let r = common::http(a, "DELETE", &format!("{pods}/dry?dryRun=All"), &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["metadata"]["deletionGracePeriodSeconds"], 30);
    let r = common::http(a, "GET", &format!("{pods}/dry"), &[], b"");
    assert!(r.json()["metadata"].get("deletionTimestamp").is_none());

    create("unscheduled", "");
    create("zero", "n1");
    let r = common::http(a, "DELETE", &format!("{pods}/unscheduled"), &[], b"");
    assert_eq!(r.status, 200);
    let r = common::http(
        a,
        "DELETE",
        &format!("{pods}/zero?gracePeriodSeconds=0"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!((status("unscheduled"), status("zero")), (404, 404));

    create("fg", "n1");
    // A dependent that blocks the owner's deletion: the garbage collector keeps
    // `foregroundDeletion` until it has deleted it, so the DELETE's own answer is what is
    // checked (without one the collector may release the pod at any moment).
    let fg_uid = common::http(a, "GET", &format!("{pods}/fg"), &[], b"").json()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    // The dependent holds a finalizer of its own, so the collector's delete of it leaves it
    // in place and the pod keeps `foregroundDeletion` until the test lets the dependent go:
    // without it, the collector could finish before the DELETE's answer (which includes
    // the server's own kubelet acknowledgement) is read back.
    let dependent = serde_json::json!({"metadata": {"name": "fg-dependent",
        "finalizers": ["example.com/hold"], "ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "fg", "uid": fg_uid, "blockOwnerDeletion": true}]}});
    let r = common::http(
        a,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &ct,
        dependent.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = common::http(
        a,
        "DELETE",
        &format!("{pods}/fg?propagationPolicy=Foreground"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200);
    let m = &r.json()["metadata"];
    assert_eq!(m["finalizers"], serde_json::json!(["foregroundDeletion"]));
    assert_eq!(m["deletionGracePeriodSeconds"], 0, "acknowledged, held");

    for i in 0..5 {
        create(&format!("c-{i}"), "n1");
    }
    let r = common::http(a, "DELETE", &format!("{pods}?labelSelector="), &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    for item in r.json()["items"].as_array().unwrap() {
        let name = item["metadata"]["name"].as_str().unwrap();
        if name.starts_with("c-") || name == "dry" {
            assert_eq!(item["metadata"]["deletionGracePeriodSeconds"], 0, "{name}");
            assert_eq!(status(name), 404, "{name}");
        }
    }
    // The garbage collector deletes the dependent (held by its finalizer until now), then
    // removes `foregroundDeletion`: then the pod goes.
    let r = common::http(
        a,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/fg-dependent",
        &[("Content-Type", "application/merge-patch+json")],
        br#"{"metadata":{"finalizers":null}}"#,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + PATIENCE;
    while status("fg") != 404 {
        assert!(Instant::now() < deadline, "the foreground pod stayed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
