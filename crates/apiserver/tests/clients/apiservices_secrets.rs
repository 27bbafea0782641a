//! Issue 28 (red team items 9 and 11), through the binary with kubectl: the local
//! APIServices upstream registers (one per group version served, `Local`, Available), a
//! user's APIService getting its `Available` condition so `kubectl wait` ends, a CRD's group
//! version registered and unregistered with it; the mandatory FlowSchemas and
//! PriorityLevelConfigurations stored; each built-in secret type refused (422)
//! without what upstream's `ValidateSecret` requires.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{PATIENCE, Server, run_ok};
use serde_json::Value;

/// Runs `cmd` until its stdout satisfies `ok` (at most [`PATIENCE`]); that stdout.
fn until(mut cmd: impl FnMut() -> Command, ok: impl Fn(&str) -> bool, what: &str) -> String {
    let start = Instant::now();
    loop {
        let out = cmd().output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && ok(&stdout) {
            return stdout;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "{what}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `kubectl apply -f -` of `yaml`: (success, stdout + stderr).
fn apply(mut cmd: Command, yaml: &str) -> (bool, String) {
    let mut child = cmd
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_sees_local_apiservices_and_waits_for_available() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());

    // One per built-in group version, Local and Available.
    let table = until(
        || {
            let mut c = k();
            c.args(["get", "apiservices"]);
            c
        },
        |t| t.contains("v1.apps") && t.contains("v1.coordination.k8s.io"),
        "the local API services",
    );
    for name in [
        "v1.",
        "v1.apps",
        "v2.autoscaling",
        "v1.rbac.authorization.k8s.io",
    ] {
        let row = table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing: {table}"));
        assert!(row.contains("Local") && row.contains("True"), "{row}");
    }
    let core: Value = serde_json::from_str(&run_ok(k().args([
        "get",
        "apiservice",
        "v1.",
        "-o",
        "json",
    ])))
    .unwrap();
    assert_eq!(core["spec"]["groupPriorityMinimum"], 18000);
    assert_eq!(core["spec"]["versionPriority"], 1);
    assert!(core["spec"]["service"].is_null(), "{core}");
    let apps = run_ok(k().args([
        "get",
        "apiservice",
        "v1.apps",
        "-o",
        "jsonpath={.spec.groupPriorityMinimum}/{.spec.versionPriority}/{.status.conditions[0].reason}",
    ]));
    assert_eq!(apps, "17800/15/Local");
    run_ok(k().args([
        "wait",
        "--for=condition=Available",
        "apiservice/v1.apps",
        "--timeout=30s",
    ]));

    // A user's: local is Available at once; one with a service is not, and says so.
    let (ok, out) = apply(
        k(),
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.local.example.com}\nspec: {group: local.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 10}\n---\napiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.remote.example.com}\nspec: {group: remote.example.com, version: v1, groupPriorityMinimum: 100, versionPriority: 10, service: {namespace: default, name: api}}\n",
    );
    assert!(ok, "{out}");
    run_ok(k().args([
        "wait",
        "--for=condition=Available",
        "apiservice/v1.local.example.com",
        "--timeout=30s",
    ]));
    run_ok(k().args([
        "wait",
        "--for=condition=Available=False",
        "apiservice/v1.remote.example.com",
        "--timeout=30s",
    ]));
    let remote = run_ok(k().args(["get", "apiservice", "v1.remote.example.com"]));
    assert!(remote.contains("False (FailedDiscoveryCheck)"), "{remote}");

    // The mandatory flow control objects are stored.
    for kind in ["flowschemas", "prioritylevelconfigurations"] {
        let names = until(
            || {
                let mut c = k();
                c.args(["get", kind, "-o", "name"]);
                c
            },
            |t| t.contains("/exempt") && t.contains("/catch-all"),
            kind,
        );
        assert!(names.contains("/catch-all"), "{names}");
    }
    let catch_all = run_ok(k().args([
        "get",
        "flowschema",
        "catch-all",
        "-o",
        "jsonpath={.spec.matchingPrecedence}/{.spec.priorityLevelConfiguration.name}",
    ]));
    assert_eq!(catch_all, "10000/catch-all");

    // A CRD's group version is registered, then unregistered with the CRD.
    let (ok, out) = apply(
        k(),
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.crd.example.com}\nspec:\n  group: crd.example.com\n  scope: Namespaced\n  names: {plural: widgets, singular: widget, kind: Widget}\n  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}]\n",
    );
    assert!(ok, "{out}");
    let crd_svc = until(
        || {
            let mut c = k();
            c.args(["get", "apiservice", "v1.crd.example.com", "-o", "json"]);
            c
        },
        |_| true,
        "the CRD's API service",
    );
    let crd_svc: Value = serde_json::from_str(&crd_svc).unwrap();
    assert_eq!(crd_svc["spec"]["groupPriorityMinimum"], 1000);
    assert_eq!(crd_svc["spec"]["versionPriority"], 100);
    run_ok(k().args(["delete", "crd", "widgets.crd.example.com"]));
    until(
        || {
            let mut c = k();
            c.args(["get", "apiservices", "-o", "name"]);
            c
        },
        |t| !t.contains("v1.crd.example.com"),
        "the CRD's API service gone",
    );
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_gets_422_for_each_secret_type_without_what_it_requires() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = || server.kubectl(dir.path());
    let secret = |name: &str, rest: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: default}}\n{rest}\n"
        )
    };
    for (name, body, want) in [
        (
            "tls",
            "type: kubernetes.io/tls\nstringData: {a: b}",
            "data[tls.crt]: Required value",
        ),
        (
            "tls-half",
            "type: kubernetes.io/tls\nstringData: {tls.crt: x}",
            "data[tls.key]: Required value",
        ),
        (
            "dcj-missing",
            "type: kubernetes.io/dockerconfigjson",
            "data[.dockerconfigjson]: Required value",
        ),
        (
            "dcj-bad",
            "type: kubernetes.io/dockerconfigjson\nstringData: {.dockerconfigjson: nope}",
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'o' in literal null",
        ),
        (
            "dcfg-bad",
            "type: kubernetes.io/dockercfg\nstringData: {.dockercfg: \"[1]\"}",
            "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
        (
            "sat",
            "type: kubernetes.io/service-account-token",
            "metadata.annotations[kubernetes.io/service-account.name]: Required value",
        ),
        (
            "basic",
            "type: kubernetes.io/basic-auth\nstringData: {user: x}",
            "data[password]: Required value",
        ),
        (
            "ssh",
            "type: kubernetes.io/ssh-auth\nstringData: {ssh-privatekey: \"\"}",
            "data[ssh-privatekey]: Required value",
        ),
    ] {
        let (ok, out) = apply(k(), &secret(name, body));
        assert!(!ok, "{name} accepted: {out}");
        assert!(
            out.contains("is invalid") && out.contains(want),
            "{name}: {out}"
        );
    }
    // The same types with what they need are accepted.
    for (name, body) in [
        (
            "tls-ok",
            "type: kubernetes.io/tls\nstringData: {tls.crt: c, tls.key: k}",
        ),
        (
            "dcj-ok",
            "type: kubernetes.io/dockerconfigjson\nstringData: {.dockerconfigjson: '{\"auths\": {}}'}",
        ),
        (
            "basic-ok",
            "type: kubernetes.io/basic-auth\nstringData: {password: \"\"}",
        ),
        (
            "ssh-ok",
            "type: kubernetes.io/ssh-auth\nstringData: {ssh-privatekey: k}",
        ),
    ] {
        let (ok, out) = apply(k(), &secret(name, body));
        assert!(ok, "{name}: {out}");
    }
    let (ok, out) = apply(
        k(),
        "apiVersion: v1\nkind: Secret\nmetadata: {name: sat-ok, namespace: default, annotations: {kubernetes.io/service-account.name: default}}\ntype: kubernetes.io/service-account-token\n",
    );
    assert!(ok, "{out}");
}
