//! Issue 28 item 1 with kubectl: CustomResourceDefinitions created through the API — apply,
//! `wait --for condition=established`, a custom resource applied, printed with its columns,
//! selected by a selectable field, explained, read through a second version, scaled, and
//! `kubectl delete crd` taking its objects, its resource and its discovery entry with it;
//! invalid and unsupported CRDs refused with upstream's 422 causes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{PATIENCE, Server, run_err, run_ok};

const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget, shortNames: [wd], categories: [all]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    selectableFields:
    - jsonPath: .spec.color
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string, description: The widget's colour.}
              replicas: {type: integer}
          status:
            type: object
            properties:
              replicas: {type: integer}
  - name: v1beta1
    served: true
    storage: false
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

const WIDGETS: &str = "apiVersion: example.com/v1
kind: Widget
metadata: {name: red, namespace: default}
spec: {color: red, replicas: 1}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: blue, namespace: default}
spec: {color: blue, replicas: 2}
";

/// Runs `f` until it returns `true` (the deadline only stops a hang).
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_applies_a_crd_and_its_resources_and_delete_crd_takes_them_away() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&[]);
    let k = || server.kubectl(dir.path());
    let crd = dir.path().join("crd.yaml");
    std::fs::write(&crd, CRD).unwrap();
    let widgets = dir.path().join("widgets.yaml");
    std::fs::write(&widgets, WIDGETS).unwrap();

    // Before: kubectl's own validation found no CRD kind, then 404.
    let out = run_ok(k().args(["apply", "-f"]).arg(&crd));
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"),
        "{out}"
    );
    let out = run_ok(k().args([
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/widgets.example.com",
    ]));
    assert!(out.contains("condition met"), "{out}");
    let status = run_ok(k().args([
        "get",
        "crd",
        "widgets.example.com",
        "-o",
        "jsonpath={.status.acceptedNames.kind} {.status.storedVersions} {.status.conditions[?(@.type==\"NamesAccepted\")].reason}",
    ]));
    assert_eq!(status, "Widget [\"v1\"] NoConflicts");
    let out = run_ok(k().args(["get", "crds"]));
    assert!(
        out.contains("CREATED AT") && out.contains("widgets.example.com"),
        "{out}"
    );

    let out = run_ok(k().args(["apply", "-f"]).arg(&widgets));
    assert!(out.contains("widget.example.com/red created"), "{out}");
    // The printer columns, by short name.
    let out = run_ok(k().args(["get", "wd"]));
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0]
            .split_whitespace()
            .eq(["NAME", "COLOR", "REPLICAS", "AGE"]),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("red") && l.contains(" red ")),
        "{out}"
    );
    // A field selector on the selectable field.
    let out = run_ok(k().args([
        "get",
        "widgets",
        "--field-selector",
        "spec.color=blue",
        "-o",
        "name",
    ]));
    assert_eq!(out.trim(), "widget.example.com/blue");
    // The schema, in kubectl explain.
    let out = run_ok(k().args(["explain", "widgets.spec.color"]));
    assert!(out.contains("The widget's colour."), "{out}");
    // The second version reads the same objects, with its apiVersion.
    let out = run_ok(k().args([
        "get",
        "widgets.v1beta1.example.com",
        "red",
        "-o",
        "jsonpath={.apiVersion} {.spec.color}",
    ]));
    assert_eq!(out, "example.com/v1beta1 red");
    // /scale and /status.
    run_ok(k().args(["scale", "widget", "red", "--replicas", "3"]));
    let out = run_ok(k().args(["get", "widget", "red", "-o", "jsonpath={.spec.replicas}"]));
    assert_eq!(out, "3");
    // In category `all`.
    let out = run_ok(k().args(["get", "all", "-o", "name"]));
    assert!(out.contains("widget.example.com/red"), "{out}");

    let out = run_ok(k().args(["delete", "crd", "widgets.example.com"]));
    assert!(out.contains("deleted"), "{out}");
    // kubectl's delete waits for the CRD to go: by then the resource is gone.
    let err = run_err(k().args(["get", "widgets.example.com"]));
    assert!(
        err.contains("the server doesn't have a resource type")
            || err.contains("NotFound")
            || err.contains("could not find"),
        "{err}"
    );
    let out = run_ok(k().args(["api-resources", "--api-group", "example.com"]));
    assert!(!out.contains("widgets"), "{out}");
    let out = run_ok(k().args(["get", "crds", "-o", "name"]));
    assert!(!out.contains("widgets"), "{out}");

    // Created again, it starts empty: the objects went with the CRD.
    run_ok(k().args(["apply", "-f"]).arg(&crd));
    run_ok(k().args([
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/widgets.example.com",
    ]));
    eventually("the widgets resource served again", || {
        k().args(["get", "widgets", "-o", "name"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let out = run_ok(k().args(["get", "widgets", "-A", "-o", "name"]));
    assert_eq!(out.trim(), "", "objects of the deleted CRD came back");
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_is_told_what_is_wrong_with_a_crd_and_what_is_not_supported() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&[]);
    let k = || server.kubectl(dir.path());
    for (edit, needle) in [
        (
            ("name: widgets.example.com", "name: gadgets.example.com"),
            "metadata.name: Invalid value: \"gadgets.example.com\": must be spec.names.plural+\".\"+spec.group",
        ),
        (
            ("    storage: false", "    storage: true"),
            "spec.versions: Invalid value",
        ),
        (
            (
                "  scope: Namespaced",
                "  scope: Namespaced\n  conversion: {strategy: Webhook}",
            ),
            "spec.conversion.strategy: Unsupported value: \"Webhook\": supported values: \"None\"",
        ),
        (
            (
                "color: {type: string,",
                "color: {type: string, x-kubernetes-validations: [{rule: 'self != \"\"'}],",
            ),
            "x-kubernetes-validations: Forbidden: CEL validation rules (x-kubernetes-validations) are not supported by this server",
        ),
    ] {
        let path = dir.path().join("bad.yaml");
        std::fs::write(&path, CRD.replace(edit.0, edit.1)).unwrap();
        let err = run_err(k().args(["apply", "-f"]).arg(&path));
        assert!(
            err.contains("is invalid") && err.contains(needle),
            "{needle}\n{err}"
        );
    }
    let out = run_ok(k().args(["get", "crds", "-o", "name"]));
    assert_eq!(out.trim(), "");
}

#[test]
#[ignore = "needs kubectl"]
fn a_crd_whose_names_are_taken_is_not_established() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&[]);
    let k = || server.kubectl(dir.path());
    let first = dir.path().join("first.yaml");
    std::fs::write(&first, CRD).unwrap();
    run_ok(k().args(["apply", "-f"]).arg(&first));
    run_ok(k().args([
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/widgets.example.com",
    ]));
    // Another CRD of the group claiming the short name `wd`.
    let second = dir.path().join("second.yaml");
    std::fs::write(
        &second,
        CRD.replace("widgets", "gadgets")
            .replace("kind: Widget", "kind: Gadget"),
    )
    .unwrap();
    run_ok(k().args(["apply", "-f"]).arg(&second));
    let cond = |t: &str| {
        run_ok(k().args([
            "get",
            "crd",
            "gadgets.example.com",
            "-o",
            &format!("jsonpath={{.status.conditions[?(@.type==\"{t}\")].status}}/{{.status.conditions[?(@.type==\"{t}\")].reason}}"),
        ]))
    };
    eventually("NamesAccepted=False", || {
        cond("NamesAccepted") == "False/ShortNamesConflict"
    });
    assert_eq!(cond("Established"), "False/NotAccepted");
    let err = run_err(k().args(["get", "gadgets"]));
    assert!(err.contains("doesn't have a resource type"), "{err}");
    // Once the first goes, the name is free.
    run_ok(k().args(["delete", "crd", "widgets.example.com"]));
    run_ok(k().args([
        "wait",
        "--for",
        "condition=established",
        "--timeout=60s",
        "crd/gadgets.example.com",
    ]));
    assert_eq!(cond("NamesAccepted"), "True/NoConflicts");
}
