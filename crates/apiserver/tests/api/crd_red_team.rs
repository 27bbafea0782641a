//! Session 9's red team (issue 28) on custom resources: regressions found live against the
//! binary, each as upstream's apiextensions-apiserver behaves. They fail on the build they
//! were found on (22ccf57); the report names the reproduction and upstream's source.
//!
//! - the storage version's own reads (get, list, watch) answer objects stored under an
//!   earlier storage version with that version's `apiVersion` (None conversion converts every
//!   read to the requested version);
//! - deleting a CRD ends open watches of its resource before they see the deletion of its
//!   objects (upstream's watchers get a DELETED event per object);
//! - integer-valued JSON numbers (`2.0`, `2e0`) of custom resources are kept as floats,
//!   which typed clients (client-go, kube-rs) cannot decode into integers, and `/scale`
//!   reads them as 0; an integer beyond 2^53 is accepted where upstream refuses it;
//! - a deprecated version's `deprecationWarning` is never sent;
//! - `spec.preserveUnknownFields: true` and `x-kubernetes-preserve-unknown-fields: false`
//!   are accepted (upstream's v1 validation refuses both);
//! - a terminating namespace counts a multi-version CRD's objects once per served version.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use crate::common;

use std::time::{Duration, Instant};

use common::{PATIENCE, Server, http, watch_from_list};
use serde_json::{Value, json};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn post(addr: &str, path: &str, body: &Value) -> Value {
    let r = http(addr, "POST", path, &[JSON], body.to_string().as_bytes());
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// Creates `crd` and waits until its `Established` condition is true.
fn establish(addr: &str, crd: &Value) {
    post(addr, CRDS, crd);
    let name = crd["metadata"]["name"].as_str().unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = http(addr, "GET", &format!("{CRDS}/{name}"), &[], b"").json();
        let ok = got["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True");
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never Established");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn open_schema() -> Value {
    json!({"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}})
}

/// After the storage version moves from v1 to v2, objects stored under v1 are still read
/// through v2 as v2 (and through v1 as v1), in gets, lists and watches. Before: v2 answered
/// them with `apiVersion: .../v1` (a v2 list of v1 items), as stored.
#[test]
fn the_new_storage_version_reads_objects_stored_under_the_old_one_in_its_own_version() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "movers.rt9.example.com"},
        "spec": {"group": "rt9.example.com", "scope": "Namespaced",
            "names": {"plural": "movers", "kind": "Mover"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": open_schema()},
                {"name": "v2", "served": true, "storage": false, "schema": open_schema()}
            ]}
    });
    establish(addr, &crd);
    let v1 = "/apis/rt9.example.com/v1/namespaces/default/movers";
    let v2 = "/apis/rt9.example.com/v2/namespaces/default/movers";
    post(
        addr,
        v1,
        &json!({"apiVersion": "rt9.example.com/v1", "kind": "Mover", "metadata": {"name": "old"}}),
    );

    // Storage moves to v2; a printer column added to v2 in the same update says when the
    // new definition is served.
    let patch = json!([
        {"op": "replace", "path": "/spec/versions/0/storage", "value": false},
        {"op": "replace", "path": "/spec/versions/1/storage", "value": true},
        {"op": "add", "path": "/spec/versions/1/additionalPrinterColumns",
         "value": [{"name": "Marker", "type": "string", "jsonPath": ".metadata.name"}]}
    ]);
    let r = http(
        addr,
        "PATCH",
        &format!("{CRDS}/movers.rt9.example.com"),
        &[("Content-Type", "application/json-patch+json")],
        patch.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let table = ("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let t = http(addr, "GET", v2, &[table], b"").json();
        let served = t["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["name"] == "Marker");
        if served {
            break;
        }
        assert!(Instant::now() < deadline, "the update was never served");
        std::thread::sleep(Duration::from_millis(20));
    }
    post(
        addr,
        v1,
        &json!({"apiVersion": "rt9.example.com/v1", "kind": "Mover", "metadata": {"name": "new"}}),
    );

    for (path, want) in [(v1, "rt9.example.com/v1"), (v2, "rt9.example.com/v2")] {
        for name in ["old", "new"] {
            let got = http(addr, "GET", &format!("{path}/{name}"), &[], b"").json();
            assert_eq!(got["apiVersion"], want, "GET {path}/{name}: {got}");
        }
        let list = http(addr, "GET", path, &[], b"").json();
        let items: Vec<(&str, &str)> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                (
                    i["metadata"]["name"].as_str().unwrap(),
                    i["apiVersion"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(items.len(), 2, "{list}");
        assert!(
            items.iter().all(|(_, v)| *v == want),
            "LIST {path}: {items:?}"
        );
    }
    // A watch from the start replays both objects in the watched version.
    for (path, want) in [(v1, "rt9.example.com/v1"), (v2, "rt9.example.com/v2")] {
        let (stream, status) =
            common::open_stream(addr, &format!("{path}?watch=1&resourceVersion=0"));
        assert_eq!(status, 200);
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut events = common::WatchEvents::new(stream);
        for _ in 0..2 {
            let e = events.next().expect("an ADDED event");
            assert_eq!(e["object"]["apiVersion"], want, "WATCH {path}: {e}");
        }
    }
}

/// Deleting a CRD deletes its objects, and a watch of its resource open at that moment
/// gets a DELETED event for each before it ends, as upstream's (the finalizer's
/// deletions go through the watch cache before the storage is torn down). Before: the watch
/// ended right after the deletions, with none of them (5 of 5 lost in every run), so an
/// informer or kube-rs reflector kept every object of the deleted CRD.
#[test]
fn deleting_a_crd_tells_open_watches_of_each_objects_deletion() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "goners.rt9.example.com"},
        "spec": {"group": "rt9.example.com", "scope": "Namespaced",
            "names": {"plural": "goners", "kind": "Goner"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": open_schema()}]}
    });
    establish(addr, &crd);
    let path = "/apis/rt9.example.com/v1/namespaces/default/goners";
    for i in 0..5 {
        post(
            addr,
            path,
            &json!({"apiVersion": "rt9.example.com/v1", "kind": "Goner",
                "metadata": {"name": format!("g{i}")}}),
        );
    }
    let mut watch = watch_from_list(addr, path, PATIENCE);
    let r = http(
        addr,
        "DELETE",
        &format!("{CRDS}/goners.rt9.example.com"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let mut deleted = Vec::new();
    while let Some(e) = watch.next() {
        if e["type"] == "DELETED" {
            deleted.push(e["object"]["metadata"]["name"].as_str().unwrap().to_owned());
        }
    }
    deleted.sort();
    assert_eq!(
        deleted,
        ["g0", "g1", "g2", "g3", "g4"],
        "DELETED events before the watch ended"
    );
}

/// JSON numbers of a custom resource are upstream's: an integer-valued number (`2.0`,
/// `2e0`) is an integer (Go's decoder reads it as float64 and encodes it back as `2`), so
/// typed clients decode it and `/scale` reads it; an integer field past 2^53 is refused
/// (kube-openapi's integer check). Before: stored and answered as `2.0`, `/scale` said 0
/// replicas, and 9223372036854775808 was stored.
#[test]
fn integer_valued_numbers_of_custom_resources_are_integers() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "counts.rt9.example.com"},
        "spec": {"group": "rt9.example.com", "scope": "Namespaced",
            "names": {"plural": "counts", "kind": "Count"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"scale": {"specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas"}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "ratio": {"type": "number"}}},
                    "status": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}}}}}}}]}
    });
    establish(addr, &crd);
    let path = "/apis/rt9.example.com/v1/namespaces/default/counts";
    for (name, literal) in [("dot", "2.0"), ("exp", "2e0")] {
        let body = format!(
            r#"{{"apiVersion":"rt9.example.com/v1","kind":"Count","metadata":{{"name":"{name}"}},"spec":{{"replicas":{literal},"ratio":1.5}}}}"#
        );
        let r = http(addr, "POST", path, &[JSON], body.as_bytes());
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let text = String::from_utf8_lossy(&r.body).into_owned();
        assert!(
            text.contains(r#""replicas":2"#) && !text.contains(r#""replicas":2."#),
            "{text}"
        );
        let got = http(addr, "GET", &format!("{path}/{name}"), &[], b"").json();
        assert_eq!(got["spec"]["replicas"].as_i64(), Some(2), "{got}");
        assert_eq!(got["spec"]["ratio"].as_f64(), Some(1.5), "{got}");
        let scale = http(addr, "GET", &format!("{path}/{name}/scale"), &[], b"").json();
        assert_eq!(scale["spec"]["replicas"], 2, "{scale}");
    }
    let body = r#"{"apiVersion":"rt9.example.com/v1","kind":"Count","metadata":{"name":"huge"},"spec":{"replicas":9223372036854775808}}"#;
    let r = http(addr, "POST", path, &[JSON], body.as_bytes());
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
}

/// A version marked `deprecated` answers every request with a `Warning` header carrying its
/// `deprecationWarning` (upstream's crdHandler adds it before serving; kubectl prints it).
/// Before: no warning at all.
#[test]
fn a_deprecated_version_sends_its_deprecation_warning() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "olds.rt9.example.com"},
        "spec": {"group": "rt9.example.com", "scope": "Namespaced",
            "names": {"plural": "olds", "kind": "Old"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "deprecated": true,
                 "deprecationWarning": "rt9 v1 is going away", "schema": open_schema()}]}
    });
    establish(addr, &crd);
    let r = http(
        addr,
        "GET",
        "/apis/rt9.example.com/v1/namespaces/default/olds",
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.header("warning"),
        Some(r#"299 - "rt9 v1 is going away""#),
        "{:?}",
        r.headers
    );
}

/// A merge patch's integral floats are integers too (every write path normalises, as
/// upstream's decoder of the patched object).
#[test]
fn integral_floats_written_by_a_patch_are_integers() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "patches.rt9.example.com"},
        "spec": {"group": "rt9.example.com", "scope": "Namespaced",
            "names": {"plural": "patches", "kind": "Patch"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": open_schema()}]}
    });
    establish(addr, &crd);
    let path = "/apis/rt9.example.com/v1/namespaces/default/patches";
    post(
        addr,
        path,
        &json!({"apiVersion": "rt9.example.com/v1", "kind": "Patch", "metadata": {"name": "p"}}),
    );
    let r = http(
        addr,
        "PATCH",
        &format!("{path}/p"),
        &[("Content-Type", "application/merge-patch+json")],
        br#"{"spec":{"n":3.0,"big":1e300,"half":0.5}}"#,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let got = http(addr, "GET", &format!("{path}/p"), &[], b"").json();
    assert_eq!(got["spec"]["n"].as_i64(), Some(3), "{got}");
    assert_eq!(got["spec"]["half"].as_f64(), Some(0.5), "{got}");
    assert!(got["spec"]["big"].is_f64(), "{got}");
}

/// `spec.preserveUnknownFields: true` and `x-kubernetes-preserve-unknown-fields: false` are
/// refused with upstream's messages (v1 validation). Before: both were stored (the first
/// ignored).
#[test]
fn preserve_unknown_fields_at_the_spec_or_false_in_a_schema_is_refused() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let base = |name: &str, schema: Value| {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{name}.rt9.example.com")},
            "spec": {"group": "rt9.example.com", "scope": "Namespaced",
                "names": {"plural": name, "kind": "Thing"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": schema}}]}
        })
    };
    let mut at_spec = base("specs", json!({"type": "object"}));
    at_spec["spec"]["preserveUnknownFields"] = json!(true);
    let r = http(addr, "POST", CRDS, &[JSON], at_spec.to_string().as_bytes());
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 422, "{text}");
    assert!(
        text.contains("spec.preserveUnknownFields: Invalid value: true: cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead"),
        "{text}"
    );
    let falsy = base(
        "falses",
        json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-preserve-unknown-fields": false}}}),
    );
    let r = http(addr, "POST", CRDS, &[JSON], falsy.to_string().as_bytes());
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 422, "{text}");
    assert!(
        text.contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"),
        "{text}"
    );
}

/// A terminating namespace counts the objects of a CRD served at two versions once (one
/// storage), as upstream's pass over the preferred versions. Before: "has 2 resource
/// instances" for one object.
#[test]
fn namespace_deletion_counts_a_multi_version_crds_objects_once() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "twins.rt9.example.com"},
        "spec": {"group": "rt9.example.com", "scope": "Namespaced",
            "names": {"plural": "twins", "kind": "Twin"},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": open_schema()},
                {"name": "v2", "served": true, "storage": false, "schema": open_schema()}]}
    });
    establish(addr, &crd);
    post(
        addr,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "twins"}}),
    );
    post(
        addr,
        "/apis/rt9.example.com/v1/namespaces/twins/twins",
        &json!({"apiVersion": "rt9.example.com/v1", "kind": "Twin",
            "metadata": {"name": "t", "finalizers": ["rt9.example.com/hold"]}}),
    );
    let r = http(addr, "DELETE", "/api/v1/namespaces/twins", &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + PATIENCE;
    let message = loop {
        let ns = http(addr, "GET", "/api/v1/namespaces/twins", &[], b"").json();
        let found = ns["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "NamespaceContentRemaining" && c["status"] == "True")
            .map(|c| c["message"].as_str().unwrap().to_owned());
        if let Some(m) = found {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "never NamespaceContentRemaining: {ns}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        message,
        "Some resources are remaining: twins.rt9.example.com has 1 resource instances"
    );
}
