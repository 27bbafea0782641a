//! `autoscaling/v1` horizontal pod autoscalers beside `autoscaling/v2` (issue 28 item 5),
//! through the binary: `kubectl autoscale` (kubectl 1.32 writes v1) creates an autoscaler
//! that v2 reads with the cpu metric, and a v2 autoscaler's other metrics and behavior
//! survive a v1 read-modify-write in upstream's round-trip annotations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use crate::common;

use common::{Server, http, run_ok};

const NS: &str = "hpa";

fn send(server: &Server, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = http(
        &server.addr,
        method,
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

fn get(server: &Server, path: &str) -> Value {
    let r = http(&server.addr, "GET", path, &[], b"");
    assert_eq!(r.status, 200, "GET {path}");
    r.json()
}

/// Before: `kubectl autoscale` failed (`autoscaling/v1` was not served: 404).
#[test]
#[ignore = "needs kubectl"]
fn kubectl_autoscale_writes_v1_that_v2_reads_and_back() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run_ok(server.kubectl(d).args(["create", "namespace", NS]));
    run_ok(
        server
            .kubectl(d)
            .args(["create", "deployment", "web", "--image=nginx", "-n", NS]),
    );
    run_ok(server.kubectl(d).args([
        "autoscale",
        "deployment",
        "web",
        "--min=2",
        "--max=5",
        "--cpu-percent=60",
        "-n",
        NS,
    ]));
    let v2 = get(
        &server,
        &format!("/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/web"),
    );
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(
        v2["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 60}}}])
    );
    assert_eq!(
        (
            v2["spec"]["minReplicas"].as_i64(),
            v2["spec"]["maxReplicas"].as_i64()
        ),
        (Some(2), Some(5))
    );
    let out = run_ok(server.kubectl(d).args([
        "get",
        "horizontalpodautoscalers.v1.autoscaling",
        "web",
        "-n",
        NS,
        "-o",
        "jsonpath={.apiVersion} {.spec.targetCPUUtilizationPercentage}",
    ]));
    assert_eq!(out.trim(), "autoscaling/v1 60");

    // A v2 autoscaler with more than v1 can say, rewritten through v1.
    let path = format!("/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers");
    let (code, body) = send(
        &server,
        "POST",
        &path,
        &json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "rich"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 4,
                "metrics": [{"type": "Pods", "pods": {"metric": {"name": "qps"},
                    "target": {"type": "AverageValue", "averageValue": "10"}}},
                    {"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 70}}}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}}),
    );
    assert_eq!(code, 201, "{body}");
    let v1_path = format!("/apis/autoscaling/v1/namespaces/{NS}/horizontalpodautoscalers/rich");
    let mut v1 = get(&server, &v1_path);
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 70);
    let other = v1["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(other).unwrap(),
        json!([{"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}}])
    );
    v1["spec"]["maxReplicas"] = json!(6);
    let (code, body) = send(&server, "PUT", &v1_path, &v1);
    assert_eq!(code, 200, "{body}");
    let v2 = get(&server, &format!("{path}/rich"));
    assert_eq!(v2["spec"]["maxReplicas"], 6);
    assert_eq!(v2["spec"]["metrics"][0]["pods"]["metric"]["name"], "qps");
    assert_eq!(
        v2["spec"]["metrics"][1]["resource"]["target"]["averageUtilization"],
        70
    );
    assert_eq!(
        v2["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"],
        60
    );
    assert!(
        v2["metadata"].get("annotations").is_none(),
        "the round-trip annotations are not stored: {v2}"
    );
    let group = get(&server, "/apis/autoscaling");
    assert_eq!(group["preferredVersion"]["version"], "v2");
    let versions: Vec<&str> = group["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    assert!(
        versions.contains(&"v1") && versions.contains(&"v2"),
        "{versions:?}"
    );
}
