//! A custom resource's structural schema through the binary: a `--resources` CRD manifest
//! whose writes are pruned, defaulted and validated as upstream's apiextensions-apiserver
//! does, seen by kubectl (its printed 422 cause, `--validate=strict`) and by raw HTTP (the
//! Status causes, Warn warnings, updates and `/status`), and a non-structural schema that
//! stops the start with upstream's reasons.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http, run_err, run_ok};
use serde_json::json;

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [color]
            properties:
              color: {type: string, enum: [red, blue]}
              replicas: {type: integer, minimum: 1, maximum: 10, default: 1}
              mode: {type: string, default: auto}
              name: {type: string, maxLength: 8, pattern: '^[a-z]+$'}
              size: {x-kubernetes-int-or-string: true}
              tags:
                type: array
                items: {type: string}
                x-kubernetes-list-type: set
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer, default: 80}
              template:
                type: object
                x-kubernetes-embedded-resource: true
                properties:
                  spec: {type: object, properties: {image: {type: string}}}
              free:
                type: object
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            properties:
              phase: {type: string, enum: [Pending, Ready]}
"#;

const BASE: &str = "/apis/example.com/v1/namespaces/default/widgets";

fn server(dir: &std::path::Path) -> Server {
    let f = dir.join("crd.yaml");
    std::fs::write(&f, CRD).unwrap();
    Server::start(&["--resources", f.to_str().unwrap()])
}

fn text(r: &common::Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn post(addr: &str, query: &str, body: &serde_json::Value) -> common::Response {
    http(
        addr,
        "POST",
        &format!("{BASE}{query}"),
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

fn widget(name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec})
}

#[test]
fn writes_are_pruned_defaulted_and_validated_as_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    let addr = &server.addr;

    // Invalid: 422 with upstream's message and one cause per error.
    let r = post(
        addr,
        "",
        &widget(
            "bad",
            json!({"color": "green", "replicas": "three", "name": "Abc"}),
        ),
    );
    assert_eq!(r.status, 422, "{}", text(&r));
    let st = r.json();
    assert_eq!(st["reason"], "Invalid");
    assert_eq!(st["details"]["kind"], "Widget");
    assert_eq!(st["details"]["group"], "example.com");
    let causes: Vec<(String, String, String)> = st["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or("").to_owned(),
                c["field"].as_str().unwrap_or("").to_owned(),
                c["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    for want in [
        (
            "FieldValueNotSupported",
            "spec.color",
            "Unsupported value: \"green\": supported values: \"red\", \"blue\"",
        ),
        (
            "FieldValueTypeInvalid",
            "spec.replicas",
            "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
        ),
        (
            "FieldValueInvalid",
            "spec.name",
            "Invalid value: \"Abc\": spec.name in body should match '^[a-z]+$'",
        ),
    ] {
        assert!(
            causes
                .iter()
                .any(|(r, f, m)| (r.as_str(), f.as_str(), m.as_str()) == want),
            "{want:?} in {causes:#?}"
        );
    }
    assert!(
        st["message"]
            .as_str()
            .unwrap()
            .starts_with("Widget.example.com \"bad\" is invalid: ["),
        "{st}"
    );
    let missing = http(addr, "GET", &format!("{BASE}/bad"), &[], b"");
    assert_eq!(missing.status, 404);

    // Required, list-type duplicates, nulls.
    let r = post(
        addr,
        "",
        &widget(
            "req",
            json!({"tags": ["a", "a"], "ports": [{"name": "x"}, {"name": "x"}]}),
        ),
    );
    assert_eq!(r.status, 422, "{}", text(&r));
    let msg = r.json()["message"].as_str().unwrap().to_owned();
    for want in [
        "spec.color: Required value",
        "spec.tags[1]: Duplicate value: \"a\"",
        "spec.ports[1]: Duplicate value: {\"name\":\"x\"}",
    ] {
        assert!(msg.contains(want), "{want} in {msg}");
    }

    // Valid, with unknown fields: pruned (Warn answers each as a warning), defaulted, the
    // embedded resource keeping its apiVersion/kind/metadata, preserved fields kept.
    let r = post(
        addr,
        "?fieldValidation=Warn",
        &widget(
            "good",
            json!({
                "color": "red", "extra": 1, "mode": null, "size": "50%",
                "ports": [{"name": "http"}],
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"image": "x", "bogus": 1}},
                "free": {"anything": {"goes": true}},
            }),
        ),
    );
    assert_eq!(r.status, 201, "{}", text(&r));
    let warnings: Vec<&str> = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("warning"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        warnings,
        [
            r#"299 - "unknown field \"spec.extra\"""#,
            r#"299 - "unknown field \"spec.template.spec.bogus\"""#
        ]
    );
    let spec = &r.json()["spec"];
    assert_eq!(
        *spec,
        json!({
            "color": "red", "replicas": 1, "mode": "auto", "size": "50%",
            "ports": [{"name": "http", "port": 80}],
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"image": "x"}},
            "free": {"anything": {"goes": true}},
        }),
        "{spec}"
    );

    // Strict refuses the unknown field as upstream's decoder does (400).
    let r = post(
        addr,
        "?fieldValidation=Strict",
        &widget("strict", json!({"color": "red", "extra": 1})),
    );
    assert_eq!(r.status, 400, "{}", text(&r));
    assert!(
        text(&r).contains(r#"strict decoding error: unknown field \"spec.extra\""#),
        "{}",
        text(&r)
    );

    // An update is validated (and defaulted) too: a merge patch that breaks the schema.
    let r = http(
        addr,
        "PATCH",
        &format!("{BASE}/good"),
        &[("Content-Type", "application/merge-patch+json")],
        br#"{"spec":{"replicas":11,"mode":null}}"#,
    );
    assert_eq!(r.status, 422, "{}", text(&r));
    assert!(
        text(&r).contains("spec.replicas: Invalid value: 11: spec.replicas in body should be less than or equal to 10"),
        "{}",
        text(&r)
    );
    let r = http(
        addr,
        "PATCH",
        &format!("{BASE}/good"),
        &[("Content-Type", "application/merge-patch+json")],
        br#"{"spec":{"replicas":3,"mode":null}}"#,
    );
    assert_eq!(r.status, 200, "{}", text(&r));
    assert_eq!(r.json()["spec"]["replicas"], 3);
    assert_eq!(
        r.json()["spec"]["mode"],
        "auto",
        "a null is defaulted again"
    );

    // `/status` writes are validated against the whole schema.
    let mut cur = http(addr, "GET", &format!("{BASE}/good"), &[], b"").json();
    cur["status"] = json!({"phase": "Gone"});
    let r = http(
        addr,
        "PUT",
        &format!("{BASE}/good/status"),
        &[("Content-Type", "application/json")],
        cur.to_string().as_bytes(),
    );
    assert_eq!(r.status, 422, "{}", text(&r));
    assert!(
        text(&r).contains("status.phase: Unsupported value: \\\"Gone\\\""),
        "{}",
        text(&r)
    );
}

#[test]
fn a_non_structural_schema_stops_the_start_with_upstreams_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("crd.yaml");
    let bad = CRD
        .replace("color: {type: string, enum: [red, blue]}", "color: {enum: [red, blue]}")
        .replace(
            "free:\n                type: object",
            "free:\n                type: object\n                x-kubernetes-validations: [{rule: \"self.x > 0\"}]",
        );
    std::fs::write(&f, bad).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_listwatch-apiserver"))
        .args(["--bind", "127.0.0.1:0", "--resources", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "openAPIV3Schema.properties[spec].properties[color].type: Required value: must not be empty for specified object fields",
        "openAPIV3Schema.properties[spec].properties[free].x-kubernetes-validations: Forbidden: CEL validation rules (x-kubernetes-validations) are not supported by this server",
    ] {
        assert!(err.contains(want), "{want} in {err}");
    }
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_prints_the_cause_sees_defaults_and_strict_refuses_unknown_fields() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    let file = dir.path().join("w.yaml");
    let f = file.to_str().unwrap();

    std::fs::write(
        &file,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: bad}\nspec: {color: red, replicas: three}\n",
    )
    .unwrap();
    let err = run_err(
        server
            .kubectl(dir.path())
            .args(["apply", "--validate=false", "-f", f]),
    );
    assert!(
        err.contains(
            "The Widget \"bad\" is invalid: spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        ),
        "{err}"
    );

    std::fs::write(
        &file,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {color: blue, extra: 1}\n",
    )
    .unwrap();
    let err = run_err(
        server
            .kubectl(dir.path())
            .args(["apply", "--validate=strict", "-f", f]),
    );
    assert!(err.contains("unknown field \"spec.extra\""), "{err}");
    assert_eq!(
        http(&server.addr, "GET", &format!("{BASE}/w"), &[], b"").status,
        404
    );

    let out = server
        .kubectl(dir.path())
        .args(["apply", "--validate=warn", "-f", f])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unknown field \"spec.extra\""),
        "{out:?}"
    );
    let stored: serde_json::Value = serde_json::from_str(&run_ok(
        server
            .kubectl(dir.path())
            .args(["get", "widget", "w", "-o", "json"]),
    ))
    .unwrap();
    assert_eq!(
        stored["spec"],
        json!({"color": "blue", "replicas": 1, "mode": "auto"}),
        "{stored}"
    );
}

/// Ordinary Unicode name patterns (Go's `regexp` accepts them; the engine compiles their
/// classes to megabytes of UTF-8 states) are accepted in a CRD posted through the API and
/// enforced on its custom resources.
#[test]
fn unicode_patterns_are_accepted_and_enforced() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    let patterns = [
        (r"^[\p{L}\p{N}_-]{1,63}$", "émile_2", "a b"),
        (r"^\p{L}{1,100}$", "Ωmega", "abc1"),
        (
            r"^[\p{L}\p{N}][\p{L}\p{N} ._-]{0,252}$",
            "東京 2.0",
            " lead",
        ),
        (r"^[^/]{1,255}(/[^/]{1,255}){0,10}$", "a/b/ç", "a//b"),
    ];
    let props: serde_json::Map<String, serde_json::Value> = patterns
        .iter()
        .enumerate()
        .map(|(i, (p, _, _))| (format!("f{i}"), json!({"type": "string", "pattern": p})))
        .collect();
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "names.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "names", "singular": "name", "kind": "Name", "listKind": "NameList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": props}}}}}]}});
    let r = http(
        addr,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        &[("Content-Type", "application/json")],
        crd.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", text(&r));
    let post_name = |name: &str, spec: serde_json::Value| {
        http(
            addr,
            "POST",
            "/apis/example.com/v1/namespaces/default/names",
            &[("Content-Type", "application/json")],
            json!({"apiVersion": "example.com/v1", "kind": "Name",
                "metadata": {"name": name}, "spec": spec})
            .to_string()
            .as_bytes(),
        )
    };
    let good: serde_json::Map<String, serde_json::Value> = patterns
        .iter()
        .enumerate()
        .map(|(i, (_, ok, _))| (format!("f{i}"), json!(ok)))
        .collect();
    // Served once established (the deadline only stops a hang).
    let deadline = std::time::Instant::now() + common::PATIENCE;
    let r = loop {
        let r = post_name("good", good.clone().into());
        if r.status != 404 || std::time::Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(r.status, 201, "{}", text(&r));
    for (i, (p, _, bad)) in patterns.iter().enumerate() {
        let r = post_name(&format!("bad{i}"), json!({format!("f{i}"): bad}));
        assert_eq!(r.status, 422, "{p}: {}", text(&r));
        let causes = r.json()["details"]["causes"].clone();
        assert_eq!(causes[0]["field"], format!("spec.f{i}"), "{causes}");
        let message = causes[0]["message"].as_str().unwrap_or("");
        assert!(
            message.contains(&format!("should match '{p}'")),
            "{p}: {message}"
        );
    }
}
