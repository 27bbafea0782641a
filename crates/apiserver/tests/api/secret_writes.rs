//! Secrets and config maps as upstream writes them: `stringData` is write-only and folded
//! into `data` (base64, over `data`'s entry of the same key) on create, update, merge patch
//! and server-side apply; a secret's `type` never changes; a secret or config map marked
//! `immutable` keeps its contents and the mark.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http};
use serde_json::{Value, json};

const SECRETS: &str = "/api/v1/namespaces/default/secrets";
const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn send(addr: &str, method: &str, path: &str, content_type: &str, body: &Value) -> (u16, Value) {
    let r = http(
        addr,
        method,
        path,
        &[("Content-Type", content_type)],
        body.to_string().as_bytes(),
    );
    let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, v)
}

fn get(addr: &str, path: &str) -> Value {
    serde_json::from_slice(&http(addr, "GET", path, &[], b"").body).unwrap()
}

#[test]
fn string_data_is_folded_into_data_and_immutable_contents_stay() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let json_type = "application/json";

    // Create: stringData overrides data's entry and is neither stored nor returned.
    let (code, created) = send(
        addr,
        "POST",
        SECRETS,
        json_type,
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
            "data": {"user": "YWRtaW4=", "password": "b2xk"},
            "stringData": {"password": "hunter2"}}),
    );
    assert_eq!(code, 201, "{created}");
    for s in [&created, &get(addr, &format!("{SECRETS}/db"))] {
        assert_eq!(
            s["data"],
            json!({"user": "YWRtaW4=", "password": "aHVudGVyMg=="}),
            "{s}"
        );
        assert!(s.get("stringData").is_none(), "stringData kept: {s}");
    }
    // Merge patch and server-side apply fold it too.
    let (code, patched) = send(
        addr,
        "PATCH",
        &format!("{SECRETS}/db"),
        "application/merge-patch+json",
        &json!({"stringData": {"token": "t0k"}}),
    );
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["data"]["token"], "dDBr", "{patched}");
    assert!(patched.get("stringData").is_none(), "{patched}");
    let (code, applied) = send(
        addr,
        "PATCH",
        &format!("{SECRETS}/applied?fieldManager=t"),
        "application/apply-patch+yaml",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "applied"},
            "stringData": {"k": "v"}}),
    );
    assert_eq!(code, 201, "{applied}");
    assert_eq!(applied["data"], json!({"k": "dg=="}), "{applied}");
    assert!(applied.get("stringData").is_none(), "{applied}");
    // A non-string value is refused, as upstream's decoder refuses it.
    let (code, refused) = send(
        addr,
        "POST",
        SECRETS,
        json_type,
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "n"},
            "stringData": {"n": 1}}),
    );
    // 400 as upstream: its decoder refuses a non-string in a map of strings.
    assert_eq!(code, 400, "{refused}");

    // type is immutable.
    let (code, v) = send(
        addr,
        "PATCH",
        &format!("{SECRETS}/db"),
        "application/merge-patch+json",
        &json!({"type": "kubernetes.io/tls"}),
    );
    assert_eq!(code, 422, "type changed: {v}");

    // immutable: contents and the mark stay, for secrets and config maps.
    let (code, v) = send(
        addr,
        "POST",
        SECRETS,
        json_type,
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "imm"},
            "data": {"a": "YQ=="}, "immutable": true}),
    );
    assert_eq!(code, 201, "{v}");
    let (code, v) = send(
        addr,
        "POST",
        CONFIGMAPS,
        json_type,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "imm"},
            "data": {"a": "a"}, "immutable": true}),
    );
    assert_eq!(code, 201, "{v}");
    for (path, patch) in [
        (format!("{SECRETS}/imm"), json!({"data": {"a": "Yg=="}})),
        (format!("{SECRETS}/imm"), json!({"stringData": {"b": "b"}})),
        (format!("{SECRETS}/imm"), json!({"immutable": false})),
        (format!("{CONFIGMAPS}/imm"), json!({"data": {"a": "b"}})),
        (
            format!("{CONFIGMAPS}/imm"),
            json!({"binaryData": {"b": "Yg=="}}),
        ),
        (format!("{CONFIGMAPS}/imm"), json!({"immutable": null})),
    ] {
        let (code, v) = send(addr, "PATCH", &path, "application/merge-patch+json", &patch);
        assert_eq!(code, 422, "{path} {patch}: {v}");
    }
    // Metadata still changes.
    let (code, v) = send(
        addr,
        "PATCH",
        &format!("{CONFIGMAPS}/imm"),
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"l": "v"}}}),
    );
    assert_eq!(code, 200, "{v}");

    // A PUT without `type` is defaulted to Opaque before the immutability check, as Go's
    // decoder defaults every body (the authorization matrix's `update secrets` sends one).
    let (code, v) = send(
        addr,
        "PUT",
        &format!("{SECRETS}/imm"),
        json_type,
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "imm"},
            "data": {"a": "YQ=="}, "immutable": true}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["type"], "Opaque", "{v}");
}
