//! Field validation (`fieldValidation=Strict|Warn|Ignore`) through the binary: create,
//! update and patch with JSON, YAML and apply-patch YAML bodies, the default (Warn), kinds
//! without a schema, and kubectl's `--validate`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http, run_err, run_ok};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

const RESOURCES: &str = "resources:
- group: example.com
  version: v1
  kind: Widget
  openAPIV3Schema:
    type: object
    properties:
      spec:
        type: object
        properties:
          color: {type: string}
- group: example.com
  version: v1
  kind: Blob
";

/// A ConfigMap body with an unknown top-level field, an unknown metadata field and a
/// repeated `data`.
fn json_body(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","bogus":1}},"data":{{"a":"b"}},"dat":{{"x":"y"}},"data":{{"c":"d"}}}}"#
    )
}

fn yaml_body(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  bogus: 1\ndata:\n  a: b\ndat:\n  x: y\ndata:\n  c: d\n"
    )
}

fn text(r: &common::Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn warnings(r: &common::Response) -> Vec<String> {
    r.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("warning"))
        .map(|(_, v)| v.clone())
        .collect()
}

const EXPECTED_WARNINGS: [&str; 3] = [
    r#"299 - "duplicate field \"data\"""#,
    r#"299 - "unknown field \"dat\"""#,
    r#"299 - "unknown field \"metadata.bogus\"""#,
];

fn get(addr: &str, path: &str) -> serde_json::Value {
    let r = http(addr, "GET", path, &[], b"");
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json()
}

#[test]
fn create_and_update_follow_each_directive_for_json_and_yaml() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    for (ct, body) in [
        ("application/json", json_body as fn(&str) -> String),
        ("application/yaml", yaml_body),
    ] {
        let tag = if ct.ends_with("json") { "j" } else { "y" };
        // Strict: 400 with upstream's decode-error wording, nothing stored.
        let name = format!("strict-{tag}");
        let r = http(
            addr,
            "POST",
            &format!("{CMS}?fieldValidation=Strict"),
            &[("Content-Type", ct)],
            body(&name).as_bytes(),
        );
        assert_eq!(r.status, 400, "{ct}: {}", text(&r));
        assert_eq!(
            r.json()["message"],
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: \
             duplicate field \"data\", unknown field \"dat\", unknown field \"metadata.bogus\"",
            "{ct}"
        );
        let missing = http(addr, "GET", &format!("{CMS}/{name}"), &[], b"");
        assert_eq!(missing.status, 404, "{ct}");

        // Warn (explicit and by default): stored without the fields, one warning each.
        for (q, name) in [
            ("?fieldValidation=Warn", format!("warn-{tag}")),
            ("", format!("default-{tag}")),
        ] {
            let r = http(
                addr,
                "POST",
                &format!("{CMS}{q}"),
                &[("Content-Type", ct)],
                body(&name).as_bytes(),
            );
            assert_eq!(r.status, 201, "{ct}{q}: {}", text(&r));
            assert_eq!(warnings(&r), EXPECTED_WARNINGS, "{ct}{q}");
            let stored = get(addr, &format!("{CMS}/{name}"));
            assert!(stored.get("dat").is_none(), "{ct}{q}: {stored}");
            assert!(
                stored["metadata"].get("bogus").is_none(),
                "{ct}{q}: {stored}"
            );
            assert_eq!(stored["data"], serde_json::json!({"c": "d"}), "{ct}{q}");
        }

        // Ignore: stored without the fields, no warning.
        let name = format!("ignore-{tag}");
        let r = http(
            addr,
            "POST",
            &format!("{CMS}?fieldValidation=Ignore"),
            &[("Content-Type", ct)],
            body(&name).as_bytes(),
        );
        assert_eq!(r.status, 201, "{ct}: {}", text(&r));
        assert!(warnings(&r).is_empty(), "{ct}: {:?}", warnings(&r));
        assert!(get(addr, &format!("{CMS}/{name}")).get("dat").is_none());

        // Update (PUT): Strict refuses, Warn warns.
        let path = format!("{CMS}/ignore-{tag}");
        let r = http(
            addr,
            "PUT",
            &format!("{path}?fieldValidation=Strict"),
            &[("Content-Type", ct)],
            body(&name).as_bytes(),
        );
        assert_eq!(r.status, 400, "{ct}: {}", text(&r));
        let r = http(
            addr,
            "PUT",
            &format!("{path}?fieldValidation=Warn"),
            &[("Content-Type", ct)],
            body(&name).as_bytes(),
        );
        assert_eq!(r.status, 200, "{ct}: {}", text(&r));
        assert_eq!(warnings(&r), EXPECTED_WARNINGS, "{ct}");
    }
}

#[test]
fn patches_follow_each_directive_and_apply_refuses_undeclared_fields() {
    let server = Server::start(&[]);
    let addr = &server.addr;
    let r = http(
        addr,
        "POST",
        CMS,
        &[("Content-Type", "application/json")],
        br#"{"metadata":{"name":"p"},"data":{"a":"b"}}"#,
    );
    assert_eq!(r.status, 201, "{}", text(&r));
    for ct in [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        let patch = br#"{"dat":{"x":"y"},"data":{"e":"f"}}"#;
        let r = http(
            addr,
            "PATCH",
            &format!("{CMS}/p?fieldValidation=Strict"),
            &[("Content-Type", ct)],
            patch,
        );
        assert_eq!(r.status, 422, "{ct}: {}", text(&r));
        let msg = r.json()["message"].as_str().unwrap().to_owned();
        assert!(msg.contains("patch: Invalid value: "), "{ct}: {msg}");
        assert!(
            msg.ends_with("strict decoding error: unknown field \"dat\""),
            "{ct}: {msg}"
        );
        let r = http(
            addr,
            "PATCH",
            &format!("{CMS}/p"),
            &[("Content-Type", ct)],
            patch,
        );
        assert_eq!(r.status, 200, "{ct}: {}", text(&r));
        assert_eq!(warnings(&r), [r#"299 - "unknown field \"dat\"""#], "{ct}");
        assert!(r.json().get("dat").is_none(), "{ct}: {}", text(&r));
        let r = http(
            addr,
            "PATCH",
            &format!("{CMS}/p?fieldValidation=Ignore"),
            &[("Content-Type", ct)],
            patch,
        );
        assert_eq!(r.status, 200, "{ct}: {}", text(&r));
        assert!(warnings(&r).is_empty(), "{ct}");
    }

    // Apply: a duplicate field follows the directive...
    let apply =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  a: b\ndata:\n  c: d\n";
    let ct = ("Content-Type", "application/apply-patch+yaml");
    let r = http(
        addr,
        "PATCH",
        &format!("{CMS}/a?fieldManager=t&fieldValidation=Strict"),
        &[ct],
        apply.as_bytes(),
    );
    assert_eq!(r.status, 400, "{}", text(&r));
    assert_eq!(
        r.json()["message"],
        "error strict decoding patch: strict decoding error: duplicate field \"data\""
    );
    let r = http(
        addr,
        "PATCH",
        &format!("{CMS}/a?fieldManager=t"),
        &[ct],
        apply.as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(warnings(&r), [r#"299 - "duplicate field \"data\"""#]);
    let r = http(
        addr,
        "PATCH",
        &format!("{CMS}/a?fieldManager=t&fieldValidation=Ignore"),
        &[ct],
        apply.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", text(&r));
    assert!(warnings(&r).is_empty());
    // ...and an undeclared field is refused whatever it is, as upstream's typed apply.
    let r = http(
        addr,
        "PATCH",
        &format!("{CMS}/a?fieldManager=t&fieldValidation=Ignore"),
        &[ct],
        format!("{apply}dat: {{}}\n").as_bytes(),
    );
    assert_eq!(r.status, 400, "{}", text(&r));
    assert_eq!(
        r.json()["message"],
        "failed to create typed patch object (/v1, Kind=ConfigMap): .dat: field not declared in schema"
    );
}

#[test]
fn custom_kinds_prune_by_their_schema_and_keep_everything_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let decl = dir.path().join("resources.yaml");
    std::fs::write(&decl, RESOURCES).unwrap();
    let server = Server::start(&["--resources", decl.to_str().unwrap()]);
    let addr = &server.addr;
    let base = "/apis/example.com/v1/namespaces/default";
    let r = http(
        addr,
        "POST",
        &format!("{base}/widgets?fieldValidation=Strict"),
        &[("Content-Type", "application/json")],
        br#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"color":"red","colour":"red"}}"#,
    );
    assert_eq!(r.status, 400, "{}", text(&r));
    assert!(
        text(&r).contains(r#"unknown field \"spec.colour\""#),
        "{}",
        text(&r)
    );
    let r = http(
        addr,
        "POST",
        &format!("{base}/blobs?fieldValidation=Strict"),
        &[("Content-Type", "application/json")],
        br#"{"apiVersion":"example.com/v1","kind":"Blob","metadata":{"name":"b"},"spec":{"anything":{"goes":1}}}"#,
    );
    assert_eq!(r.status, 201, "{}", text(&r));
    assert!(warnings(&r).is_empty());
    assert_eq!(r.json()["spec"]["anything"]["goes"], 1);
}

const TYPO: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: typo
data:
  a: b
dat:
  x: y
";

#[test]
#[ignore = "needs kubectl"]
fn kubectl_validate_strict_refuses_a_typo_and_warn_prints_it() {
    common::require("kubectl");
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cm.yaml");
    std::fs::write(&file, TYPO).unwrap();
    let f = file.to_str().unwrap();
    let err = run_err(
        server
            .kubectl(dir.path())
            .args(["apply", "--validate=strict", "-f", f]),
    );
    assert!(
        err.contains("strict decoding error: unknown field \"dat\""),
        "{err}"
    );
    let missing = http(&server.addr, "GET", &format!("{CMS}/typo"), &[], b"");
    assert_eq!(missing.status, 404);
    let out = server
        .kubectl(dir.path())
        .args(["apply", "--validate=warn", "-f", f])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Warning: unknown field \"dat\""),
        "{stderr}"
    );
    let stored = run_ok(
        server
            .kubectl(dir.path())
            .args(["get", "cm", "typo", "-o", "json"]),
    );
    assert!(!stored.contains("\"dat\""), "{stored}");
}
