//! A custom resource is decoded on read as upstream's apiextensions-apiserver decodes it from
//! etcd: a `default:` added to its CRD's schema shows on an object stored before, at its
//! next read and in a watch, without a write; a field the schema no longer declares is not
//! answered; and the stored object is not rewritten (its resourceVersion stays, and taking
//! the default out of the schema again answers it as it was stored).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{PATIENCE, Server, open_stream, run_ok};
use serde_json::{Value, json};

fn crd(spec_properties: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {{plural: gadgets, kind: Gadget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties: {spec_properties}
"
    )
}

const BEFORE: &str = "{color: {type: string}, legacy: {type: string}}";
const AFTER: &str = "{color: {type: string}, size: {type: integer, default: 3}}";

const GADGET: &str = "apiVersion: example.com/v1
kind: Gadget
metadata: {name: red, namespace: default}
spec: {color: red, legacy: kept}
";

/// Runs `f` until it returns `Some` (the deadline only stops a hang).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs kubectl"]
fn a_default_added_to_a_crd_shows_on_stored_objects_without_a_write() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&[]);
    let k = || server.kubectl(dir.path());
    let apply = |yaml: &str, name: &str| {
        let f = dir.path().join(name);
        std::fs::write(&f, yaml).unwrap();
        run_ok(k().args(["apply", "-f"]).arg(&f));
    };
    let get = || -> Value {
        serde_json::from_str(&run_ok(k().args(["get", "gadget", "red", "-o", "json"]))).unwrap()
    };

    apply(&crd(BEFORE), "crd.yaml");
    run_ok(k().args([
        "wait",
        "--for",
        "condition=established",
        "crd/gadgets.example.com",
    ]));
    apply(GADGET, "gadget.yaml");
    let stored = get();
    assert_eq!(stored["spec"], json!({"color": "red", "legacy": "kept"}));
    let rv = stored["metadata"]["resourceVersion"].clone();

    // The schema gains a default and loses `legacy`: the stored object reads with the
    // default and without the field no longer declared, at the same resourceVersion.
    apply(&crd(AFTER), "crd.yaml");
    let read = eventually("the new default on read", || {
        let g = get();
        (g["spec"]["size"] == 3).then_some(g)
    });
    assert_eq!(read["spec"], json!({"color": "red", "size": 3}));
    assert_eq!(read["metadata"]["resourceVersion"], rv, "a read wrote");

    // A watch's initial events show it too (the cache holds the decoded object).
    let (stream, status) = open_stream(
        &server.addr,
        "/apis/example.com/v1/namespaces/default/gadgets?watch=1&timeoutSeconds=5",
    );
    assert_eq!(status, 200);
    let mut events = common::WatchEvents::new(stream);
    let added = events.next().expect("an ADDED event");
    assert_eq!(added["type"], "ADDED", "{added}");
    assert_eq!(added["object"]["spec"], json!({"color": "red", "size": 3}));
    assert_eq!(added["object"]["metadata"]["resourceVersion"], rv);
    // A consistent list (which the cache may answer from storage) agrees.
    let list: Value =
        serde_json::from_str(&run_ok(k().args(["get", "gadgets", "-o", "json"]))).unwrap();
    assert_eq!(list["items"][0]["spec"], json!({"color": "red", "size": 3}));

    // The stored bytes were not rewritten: with the schema as it was, the object reads as
    // it was stored.
    apply(&crd(BEFORE), "crd.yaml");
    let back = eventually("the object as stored", || {
        let g = get();
        g["spec"].get("size").is_none().then_some(g)
    });
    assert_eq!(back["spec"], json!({"color": "red", "legacy": "kept"}));
    assert_eq!(back["metadata"]["resourceVersion"], rv);
}
