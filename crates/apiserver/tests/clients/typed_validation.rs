//! Typed validation of built-in bodies through the binary: a body that would not decode
//! into upstream's Go type is refused as upstream's decoder refuses it — create and update
//! 400 `... cannot be handled as a ...: json: cannot unmarshal ...`, every patch type 422
//! `patch: Invalid value`, apply 400 `failed to create typed patch object` — and nothing is
//! stored; the Python client (dict bodies, including the red team's mistyped Event) and
//! kubectl (client-side and server-side apply) see those answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::{PATIENCE, Server, http, run_err, run_ok};
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

fn text(r: &common::Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn send(addr: &str, method: &str, path: &str, ct: &str, body: &Value) -> common::Response {
    http(
        addr,
        method,
        path,
        &[("Content-Type", ct)],
        body.to_string().as_bytes(),
    )
}

fn deployment(name: &str, replicas: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "a"}},
            "template": {"metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
}

#[test]
fn mistyped_bodies_are_refused_at_create_update_every_patch_and_apply() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    let json_ct = "application/json";

    // Create: 400 with the decoder's wording, whatever fieldValidation says.
    for q in ["", "?fieldValidation=Ignore", "?fieldValidation=Strict"] {
        let r = send(
            addr,
            "POST",
            &format!("{DEPLOYS}{q}"),
            json_ct,
            &deployment("d", json!("3")),
        );
        assert_eq!(r.status, 400, "{}", text(&r));
        let s = r.json();
        assert_eq!(s["reason"], "BadRequest");
        assert_eq!(
            s["message"],
            "Deployment in version \"v1\" cannot be handled as a Deployment: json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"
        );
    }
    assert_eq!(
        http(addr, "GET", &format!("{DEPLOYS}/d"), &[], b"").status,
        404
    );
    let cases = [
        // A quantity outside upstream's grammar.
        (
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"}, "spec": {"containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"cpu": "two"}}}]}}),
            "/api/v1/namespaces/default/pods",
            "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        // A boolean where an int-or-string is.
        (
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
                "spec": {"ports": [{"port": 80, "targetPort": true}]}}),
            "/api/v1/namespaces/default/services",
            "Service in version \"v1\" cannot be handled as a Service: json: cannot unmarshal bool into Go struct field ServicePort.spec.ports.targetPort of type int32",
        ),
        // A label value that is not a string.
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l", "labels": {"a": 1}}}),
            CMS,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string",
        ),
        // Secret data that is not base64.
        (
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}, "data": {"k": "YQ"}}),
            "/api/v1/namespaces/default/secrets",
            "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 0",
        ),
    ];
    for (body, path, message) in cases {
        let r = send(addr, "POST", path, json_ct, &body);
        assert_eq!(r.status, 400, "{}", text(&r));
        assert_eq!(r.json()["message"], message);
    }

    // A well-typed object, then an update and each patch type that would mistype it.
    let r = send(addr, "POST", DEPLOYS, json_ct, &deployment("d", json!(1)));
    assert_eq!(r.status, 201, "{}", text(&r));
    let mut put = r.json();
    put["spec"]["replicas"] = json!(2.5);
    let r = send(addr, "PUT", &format!("{DEPLOYS}/d"), json_ct, &put);
    assert_eq!(r.status, 400, "{}", text(&r));
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("json: cannot unmarshal number 2.5 into Go struct field DeploymentSpec.spec.replicas of type int32"),
        "{}",
        text(&r)
    );
    for (ct, patch) in [
        (
            "application/merge-patch+json",
            json!({"spec": {"replicas": "2"}}),
        ),
        (
            "application/strategic-merge-patch+json",
            json!({"spec": {"replicas": "2"}}),
        ),
        (
            "application/json-patch+json",
            json!([{"op": "replace", "path": "/spec/replicas", "value": "2"}]),
        ),
    ] {
        let r = send(addr, "PATCH", &format!("{DEPLOYS}/d"), ct, &patch);
        assert_eq!(r.status, 422, "{ct}: {}", text(&r));
        let s = r.json();
        assert_eq!(s["reason"], "Invalid");
        let m = s["message"].as_str().unwrap();
        assert!(
            m.starts_with(" \"\" is invalid: patch: Invalid value: \"{"),
            "{m}"
        );
        assert!(
            m.ends_with("json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"),
            "{m}"
        );
    }
    let r = http(
        addr,
        "PATCH",
        &format!("{DEPLOYS}/d?fieldManager=t"),
        &[("Content-Type", "application/apply-patch+yaml")],
        deployment("d", json!("2")).to_string().as_bytes(),
    );
    assert_eq!(r.status, 400, "{}", text(&r));
    assert_eq!(
        r.json()["message"],
        "failed to create typed patch object (apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string"
    );
    let stored = http(addr, "GET", &format!("{DEPLOYS}/d"), &[], b"").json();
    assert_eq!(
        stored["spec"]["replicas"], 1,
        "nothing mistyped was written"
    );
    // Well-typed writes of every kind of value still pass: quantities as numbers, int-or-
    // string as a name, times, base64 with newlines, nulls.
    for (path, body) in [
        (
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ok", "creationTimestamp": null},
                "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": 1, "memory": "1Gi"}},
                    "readinessProbe": {"httpGet": {"port": "http"}}, "ports": [{"containerPort": 80, "name": "http"}]}]}}),
        ),
        (
            "/api/v1/namespaces/default/secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ok"}, "data": {"k": "YWJj\nZA=="}}),
        ),
        (
            "/api/v1/namespaces/default/events",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "ok"}, "count": 3,
                "involvedObject": {"kind": "Pod", "name": "ok", "namespace": "default"},
                "firstTimestamp": "2026-12-07T05:00:00Z", "lastTimestamp": "2026-12-07T06:00:00+01:00"}),
        ),
    ] {
        let r = send(addr, "POST", path, json_ct, &body);
        assert_eq!(r.status, 201, "{path}: {}", text(&r));
    }
}

const MISTYPED: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: typed
spec:
  replicas: \"3\"
  selector:
    matchLabels: {app: a}
  template:
    metadata:
      labels: {app: a}
    spec:
      containers:
      - {name: c, image: i}
";

#[test]
#[ignore = "needs kubectl"]
fn kubectl_apply_of_a_mistyped_manifest_is_refused_by_the_server() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("d.yaml");
    std::fs::write(&file, MISTYPED).unwrap();
    let f = file.to_str().unwrap();
    let err = run_err(server.kubectl(dir.path()).args(["apply", "-f", f]));
    assert!(
        err.contains("json: cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"),
        "{err}"
    );
    let err = run_err(
        server
            .kubectl(dir.path())
            .args(["apply", "--server-side", "-f", f]),
    );
    assert!(
        err.contains(".spec.replicas: expected numeric (int or float), got string"),
        "{err}"
    );
    let got = run_ok(
        server
            .kubectl(dir.path())
            .args(["get", "deployments", "-o", "name"]),
    );
    assert!(got.trim().is_empty(), "{got}");
    std::fs::write(&file, MISTYPED.replace("\"3\"", "3")).unwrap();
    run_ok(server.kubectl(dir.path()).args(["apply", "-f", f]));
}

#[test]
#[ignore = "needs the Python kubernetes client"]
fn python_client_mistyped_bodies_are_refused_and_lists_still_parse() {
    let python = std::env::var("LISTWATCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let server = Server::start(&[]);
    let script = format!(
        "{}/tests/python/typed_checks.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut child = Command::new(&python)
        .args([script.as_str(), server.url.as_str()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + 2 * PATIENCE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("python typed checks passed"),
        "python typed checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
