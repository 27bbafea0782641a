//! The namespace lifecycle as a user meets it with kubectl (issue 29 items 8, 9, 10, 14):
//! a namespace held by a finalizer besides `kubernetes` is released with `kubectl replace
//! --raw /api/v1/namespaces/<n>/finalize -f -` (also after a restart with `--data-dir`);
//! a terminating namespace shows upstream's conditions in `kubectl get ns -o yaml`; the
//! namespace controller comes back to a stuck namespace every 8 s whatever DELETEs arrive;
//! namespaces carry `kubernetes.io/metadata.name`; a second DELETE changes nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Server, http};
use serde_json::{Value, json};

const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

fn get_ns(s: &Server, name: &str) -> (u16, Value) {
    let r = http(
        &s.addr,
        "GET",
        &format!("/api/v1/namespaces/{name}"),
        &[],
        b"",
    );
    let v = if r.status == 200 {
        r.json()
    } else {
        Value::Null
    };
    (r.status, v)
}

fn create(s: &Server, path: &str, body: &Value) {
    let r = http(&s.addr, "POST", path, &JSON, body.to_string().as_bytes());
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// Item 14: a second DELETE of a Terminating namespace changes nothing (upstream's
/// namespace registry answers the namespace as it is while `spec.finalizers` hold it):
/// its garbage-collector finalizers are not rewritten.
#[test]
fn a_second_delete_of_a_terminating_namespace_changes_nothing() {
    let s = Server::start(&[]);
    let a = s.addr.as_str();
    create(
        &s,
        "/api/v1/namespaces",
        &json!({"metadata": {"name": "twice"},
        "spec": {"finalizers": ["example.com/hold"]}}),
    );
    let first = br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#;
    let r = http(a, "DELETE", "/api/v1/namespaces/twice", &JSON, first);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    let (_, before) = get_ns(&s, "twice");
    for policy in ["Orphan", "Background"] {
        let body =
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy});
        let r = http(
            a,
            "DELETE",
            "/api/v1/namespaces/twice",
            &JSON,
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200);
        let (_, now) = get_ns(&s, "twice");
        assert_eq!(
            now["metadata"]["finalizers"],
            json!(["foregroundDeletion"]),
            "a {policy} DELETE rewrote the finalizers"
        );
        // Written by nobody but the controller (its status conditions).
        assert_eq!(
            now["metadata"]["deletionTimestamp"],
            before["metadata"]["deletionTimestamp"]
        );
    }
}
