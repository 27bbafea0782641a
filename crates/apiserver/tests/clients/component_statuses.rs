//! `componentstatuses`, computed on each read as upstream computes them (issue 28 item 5:
//! kube-runtime's event recorder gets `componentstatuses/scheduler`): kubectl lists the
//! scheduler and the controller manager, each probed on its default local port (nothing
//! listens there on a test machine: Unhealthy, with the probe's error), prints upstream's
//! columns, and gets one by name; an unknown name is 404.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, run_ok};
use serde_json::Value;

#[test]
#[ignore = "needs kubectl"]
fn kubectl_gets_the_computed_component_statuses() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());

    let table = run_ok(k().args(["get", "cs"]));
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines
        .first()
        .map_or(vec![], |l| l.split_whitespace().collect());
    assert_eq!(header, ["NAME", "STATUS", "MESSAGE", "ERROR"], "{table}");
    let names: Vec<&str> = lines
        .iter()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // The embedded store is not etcd: no `etcd-N` rows.
    assert_eq!(names, ["controller-manager", "scheduler"], "{table}");
    for (line, port) in lines.iter().skip(1).zip(["10257", "10259"]) {
        assert!(
            line.contains("Unhealthy")
                && line.contains(&format!("Get \"https://127.0.0.1:{port}/healthz\"")),
            "(is something listening on 127.0.0.1:{port}?) {table}"
        );
    }

    let yaml = run_ok(k().args(["get", "cs", "scheduler", "-o", "yaml"]));
    assert!(yaml.contains("kind: ComponentStatus"), "{yaml}");
    let json: Value =
        serde_json::from_str(&run_ok(k().args(["get", "cs", "scheduler", "-o", "json"]))).unwrap();
    assert_eq!(json["metadata"]["name"], "scheduler", "{json}");
    let cond = &json["conditions"][0];
    assert_eq!(
        (cond["type"].as_str(), cond["status"].as_str()),
        (Some("Healthy"), Some("False")),
        "{json}"
    );
    assert!(
        cond["error"]
            .as_str()
            .unwrap()
            .starts_with("Get \"https://127.0.0.1:10259/healthz\": "),
        "{json}"
    );
    // Upstream's `omitempty`: an unreachable component has no message.
    assert!(cond.get("message").is_none(), "{json}");

    for name in ["etcd-0", "kube-proxy"] {
        let out = k().args(["get", "cs", name]).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("componentstatuses \"{name}\" not found")),
            "{err}"
        );
    }
    // Selectors apply to the computed list.
    let one = run_ok(k().args([
        "get",
        "cs",
        "--field-selector=metadata.name=scheduler",
        "-o",
        "name",
    ]));
    assert_eq!(one.trim(), "componentstatus/scheduler", "{one}");
}
