//! `--resources` with a real CustomResourceDefinition manifest, and upstream's plurals for
//! entries that do not name one (issue 30 item 6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http};

/// A CRD as `kubectl get crd -o yaml` or a Helm chart has it (with fields the declaration
/// does not use: metadata, conversion, a second version that is not the storage one).
const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  conversion:
    strategy: None
  names:
    plural: crontabs
    singular: crontab
    kind: CronTab
    listKind: CronTabList
    shortNames: [ct]
  scope: Namespaced
  versions:
  - name: v1beta1
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object}
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Spec
      type: string
      jsonPath: .spec.cronSpec
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cronSpec: {type: string}
              replicas: {type: integer}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusterthings.example.com
spec:
  group: example.com
  names: {plural: clusterthings, kind: ClusterThing}
  scope: Cluster
  versions:
  - {name: v1alpha1, served: true, storage: true}
";

#[test]
fn a_crd_manifest_is_a_declaration_and_ingress_is_pluralized_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let crd = dir.path().join("crd.yaml");
    // A `resources:` document may follow in the same file; no plural given: upstream's.
    std::fs::write(
        &crd,
        format!(
            "{CRD}---\nresources:\n- {{group: networking.k8s.io, version: v1, kind: Ingress}}\n\
             - {{group: example.com, version: v1, kind: Policy}}\n"
        ),
    )
    .unwrap();
    let server = Server::start(&["--resources", crd.to_str().unwrap()]);
    let addr = &server.addr;
    let d = http(addr, "GET", "/apis/stable.example.com/v1", &[], b"").json();
    let r = &d["resources"];
    let crontabs = r
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "crontabs")
        .unwrap_or_else(|| panic!("{d}"));
    assert_eq!(crontabs["kind"], "CronTab");
    assert_eq!(crontabs["singularName"], "crontab");
    assert_eq!(crontabs["namespaced"], true);
    assert_eq!(crontabs["shortNames"], serde_json::json!(["ct"]));
    assert!(
        r.as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "crontabs/status"),
        "{d}"
    );
    // The storage version is served; the one not served is not.
    assert_eq!(
        http(addr, "GET", "/apis/stable.example.com/v1beta1", &[], b"").status,
        404
    );
    // The schema is used: a typo field is refused under Strict.
    let body = br#"{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"c"},"spec":{"cronSpec":"* * * * *","replica":1}}"#;
    let resp = http(
        addr,
        "POST",
        "/apis/stable.example.com/v1/namespaces/default/crontabs?fieldValidation=Strict",
        &[("Content-Type", "application/json")],
        body,
    );
    assert_eq!(resp.status, 400, "{}", String::from_utf8_lossy(&resp.body));
    // Cluster scope.
    let d = http(addr, "GET", "/apis/example.com/v1alpha1", &[], b"").json();
    assert_eq!(d["resources"][0]["name"], "clusterthings", "{d}");
    assert_eq!(d["resources"][0]["namespaced"], false, "{d}");
    let resp = http(
        addr,
        "POST",
        "/apis/example.com/v1alpha1/clusterthings",
        &[("Content-Type", "application/json")],
        br#"{"apiVersion":"example.com/v1alpha1","kind":"ClusterThing","metadata":{"name":"t"}}"#,
    );
    assert_eq!(resp.status, 201, "{}", String::from_utf8_lossy(&resp.body));
    // Plurals.
    let d = http(addr, "GET", "/apis/networking.k8s.io/v1", &[], b"").json();
    assert!(
        d["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["name"] == "ingresses"),
        "{d}"
    );
    assert_eq!(
        http(
            addr,
            "GET",
            "/apis/networking.k8s.io/v1/ingresses",
            &[],
            b""
        )
        .status,
        200
    );
    let d = http(addr, "GET", "/apis/example.com/v1", &[], b"").json();
    assert_eq!(d["resources"][0]["name"], "policies", "{d}");
}

#[test]
fn a_document_that_is_not_a_crd_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.yaml");
    std::fs::write(&f, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
        .args(["--bind", "127.0.0.1:0", "--resources", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("expected a `resources:` list or a CustomResourceDefinition"),
        "{err}"
    );
}
