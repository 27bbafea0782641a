//! The system priority classes through the binary and kubectl (red team rt10 finding 5):
//! `kubectl delete pc system-node-critical` is upstream's 403 (`REST.Delete` of
//! pkg/registry/scheduling/priorityclass/storage), dry run or not; an update of one is
//! judged as upstream's `ValidatePriorityClassUpdate` judges any class (a label may be
//! added, `value` may not change); a collection delete removes them as upstream's does
//! (its `DeleteCollection` deletes through the generic store), and the next start creates
//! them again from `--data-dir`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use crate::common;

use common::{PATIENCE, Server, http, run_err, run_ok};
use serde_json::Value;

const PCS: &str = "/apis/scheduling.k8s.io/v1/priorityclasses";

/// The names of the stored classes whose name starts with `system-`.
fn system_classes(s: &Server) -> Vec<String> {
    let r = http(&s.addr, "GET", PCS, &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v: Value = r.json();
    let mut names: Vec<String> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .filter(|n| n.starts_with("system-"))
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

/// Waits until the start-up has created both system classes.
fn wait_for_system_classes(s: &Server) {
    let deadline = Instant::now() + PATIENCE;
    while system_classes(s) != ["system-cluster-critical", "system-node-critical"] {
        assert!(
            Instant::now() < deadline,
            "the system classes never appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_cannot_delete_a_system_priority_class() {
    common::require("kubectl");
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = data.path().join("data").to_str().unwrap().to_owned();
    let flags = ["--data-dir", dir.as_str()];
    let s = Server::start(&flags);
    wait_for_system_classes(&s);
    let k = |s: &Server| s.kubectl(cache.path());

    // Before: the class was deleted (200) and never came back.
    for name in ["system-node-critical", "system-cluster-critical"] {
        for dry in [&["--dry-run=server"][..], &[]] {
            let err = run_err(k(&s).args(["delete", "priorityclass", name]).args(dry));
            assert!(
                err.contains(&format!(
                    "Error from server (Forbidden): priorityclasses.scheduling.k8s.io \"{name}\" \
                     is forbidden: this is a system priority class and cannot be deleted"
                )),
                "{err}"
            );
        }
    }
    assert_eq!(
        system_classes(&s),
        ["system-cluster-critical", "system-node-critical"]
    );
    // The raw answer is upstream's Status.
    let r = http(
        &s.addr,
        "DELETE",
        &format!("{PCS}/system-node-critical"),
        &[],
        b"",
    );
    assert_eq!(r.status, 403);
    let status: Value = r.json();
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(status["details"]["name"], "system-node-critical");
    assert_eq!(status["details"]["group"], "scheduling.k8s.io");
    assert_eq!(status["details"]["kind"], "priorityclasses");

    // Updates are judged as any class's: a label is fine, the value is immutable.
    run_ok(k(&s).args(["label", "priorityclass", "system-node-critical", "team=x"]));
    let err = run_err(k(&s).args([
        "patch",
        "priorityclass",
        "system-node-critical",
        "--type",
        "merge",
        "-p",
        r#"{"value": 5}"#,
    ]));
    assert!(
        err.contains("value: Forbidden: may not be changed in an update."),
        "{err}"
    );

    // Other classes delete as before.
    run_ok(k(&s).args(["create", "priorityclass", "mine", "--value", "10"]));
    let out = run_ok(k(&s).args(["delete", "priorityclass", "mine"]));
    assert!(out.contains("\"mine\" deleted"), "{out}");

    // A collection delete removes them, as upstream's does; the next start re-creates them.
    let r = http(&s.addr, "DELETE", PCS, &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(system_classes(&s).is_empty());
    let addr = s.addr.clone();
    drop(s);
    let s = Server::start_at(&addr, &flags);
    wait_for_system_classes(&s);
    let out = run_ok(k(&s).args([
        "get",
        "priorityclass",
        "system-node-critical",
        "-o",
        "jsonpath={.value}",
    ]));
    assert_eq!(out, "2000001000");
}
