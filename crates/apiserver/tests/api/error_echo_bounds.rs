//! Error answers that quote the request or a stored object are bounded (issue 24, bounded
//! request cost): each test sends a red-team reproduction to the built server — a value of
//! `"` characters, which every quoting layer escapes again (8 bytes each once a message is
//! JSON) — and asserts the error body is under a constant whatever the input, and that the
//! quoted value carries the truncation marker. Without the bound these answered 6 to 18 MB.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Response, Server, http};
use serde_json::{Value, json};

const CM: &str = "/api/v1/namespaces/default/configmaps";

/// An error body's bound: the 256 KiB a 422 may list plus its name, message prefix and the
/// Status framing (`listwatch_api::echo::MAX_STATUS_TEXT_BYTES` is 264 KiB of text).
const ERROR_BODY_BOUND: usize = 272 * 1024;

/// The marker a cut value ends with.
const MARKER: &str = "...<truncated from ";

fn send(s: &Server, method: &str, path: &str, ctype: &str, body: &[u8]) -> Response {
    http(&s.addr, method, path, &[("Content-Type", ctype)], body)
}

/// Asserts `r` is a `code` error whose body is within [`ERROR_BODY_BOUND`] and whose
/// message quotes a cut value.
fn assert_bounded(r: &Response, code: u16, what: &str) -> Value {
    assert!(
        r.body.len() <= ERROR_BODY_BOUND,
        "{what}: a {} error body of {} bytes, over the bound of {ERROR_BODY_BOUND}",
        r.status,
        r.body.len()
    );
    assert_eq!(
        r.status,
        code,
        "{what}: {}",
        String::from_utf8_lossy(&r.body[..r.body.len().min(300)])
    );
    let v = r.json();
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(MARKER),
        "{what}: the quoted value is not marked as cut: {}",
        &message[..message.len().min(300)]
    );
    v
}

/// A ConfigMap named `big` whose one value is 750 000 `"` (1.5 MB).
fn store_big(s: &Server) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
        "data": {"q": "\"".repeat(750_000)}});
    let r = send(s, "POST", CM, "application/json", cm.to_string().as_bytes());
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

/// A Strict merge patch (also strategic and JSON patch) adding one unknown field to a large
/// stored object: upstream's patcher quotes the whole patched object (6.0 MB here).
#[test]
fn a_strict_patch_of_a_large_object_answers_a_bounded_422() {
    let s = Server::start(&[]);
    store_big(&s);
    let path = format!("{CM}/big?fieldValidation=Strict");
    for (ctype, body) in [
        ("application/merge-patch+json", r#"{"unk":1}"#),
        ("application/strategic-merge-patch+json", r#"{"unk":1}"#),
        (
            "application/json-patch+json",
            r#"[{"op":"add","path":"/unk","value":1}]"#,
        ),
    ] {
        let r = send(&s, "PATCH", &path, ctype, body.as_bytes());
        let v = assert_bounded(&r, 422, ctype);
        let message = v["message"].as_str().unwrap();
        assert!(
            message.ends_with("strict decoding error: unknown field \"unk\""),
            "{ctype}: {}",
            &message[message.len().saturating_sub(300)..]
        );
    }
}

/// A 103-byte JSON patch copying the large value twice into unknown fields (18.0 MB).
#[test]
fn a_strict_json_patch_copying_a_large_value_answers_a_bounded_422() {
    let s = Server::start(&[]);
    store_big(&s);
    let patch = json!([
        {"op": "copy", "from": "/data/q", "path": "/unk"},
        {"op": "copy", "from": "/data/q", "path": "/unk2"},
    ]);
    let r = send(
        &s,
        "PATCH",
        &format!("{CM}/big?fieldValidation=Strict"),
        "application/json-patch+json",
        patch.to_string().as_bytes(),
    );
    assert_bounded(&r, 422, "two copies");
}

/// POSTs `obj` (a ConfigMap holding 1.4 M `"` somewhere: a 2.8 MB body) and asserts a
/// bounded 422 with `details.name` and every cause cut too, and nothing stored.
fn create_is_bounded(what: &str, obj: &Value) {
    let s = Server::start(&[]);
    let r = send(
        &s,
        "POST",
        CM,
        "application/json",
        obj.to_string().as_bytes(),
    );
    let v = assert_bounded(&r, 422, what);
    let name = v["details"]["name"].as_str().unwrap_or_default();
    assert!(
        name.len() <= 2048,
        "{what}: details.name of {} bytes",
        name.len()
    );
    for c in v["details"]["causes"].as_array().unwrap() {
        let text = c["message"].as_str().unwrap_or_default().len()
            + c["field"].as_str().unwrap_or_default().len();
        assert!(text <= 8 * 1024, "{what}: a cause of {text} bytes");
    }
    let r = http(&s.addr, "GET", CM, &[], b"");
    assert_eq!(r.json()["items"].as_array().map(Vec::len), Some(0));
}

fn huge() -> String {
    "\"".repeat(1_400_000)
}

/// A name of 1.4 M `"`: quoted in the message, the first cause and `details.name`
/// (16.8 MB); the name's validation does not bound it since it is the invalid value.
#[test]
fn a_create_with_a_huge_name_answers_a_bounded_422() {
    create_is_bounded(
        "name",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": huge()}}),
    );
}

/// A label value of 1.4 M `"` (11.2 MB).
#[test]
fn a_create_with_a_huge_label_value_answers_a_bounded_422() {
    create_is_bounded(
        "label value",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "l", "labels": {"a": huge()}}}),
    );
}

/// An annotation key of 1.4 M `"`: in the cause's field path and its value (11.2 MB).
#[test]
fn a_create_with_a_huge_annotation_key_answers_a_bounded_422() {
    create_is_bounded(
        "annotation key",
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "annotations": {huge(): "v"}}}),
    );
}

/// One request of [`every_other_echo_path_answers_a_small_error`]: what it tries, method,
/// path, headers, body and the expected status code.
type Case = (
    &'static str,
    &'static str,
    String,
    Vec<(&'static str, String)>,
    String,
    u16,
);

/// Every other place an error quotes the request: headers, query parameters, the path, a
/// mismatched kind or version, preconditions, JSON and strategic patch errors. Each quotes
/// at most one or two cut values, so the body stays within a few KiB (it answered up to
/// 5.6 MB for a 2.8 MB body, and 40 KB for a 15 KB URL).
#[test]
fn every_other_echo_path_answers_a_small_error() {
    let s = Server::start(&[]);
    store_big(&s);
    let q = "\"".repeat(1_400_000);
    // 20 KB: under the 64 KiB head bound; echoed whole it would be 40 KB of JSON.
    let hq = "\"".repeat(20_000);
    let uq = "%22".repeat(5_000);
    let obj = |api: &str, kind: &str| {
        json!({"apiVersion": api, "kind": kind, "metadata": {"name": "k"}}).to_string()
    };
    let big = format!("{CM}/big");
    let cases: Vec<Case> = vec![
        (
            "Content-Type",
            "POST",
            CM.into(),
            vec![("Content-Type", format!("a/{hq}"))],
            "{}".into(),
            415,
        ),
        ("kind", "POST", CM.into(), vec![], obj("v1", &q), 400),
        (
            "apiVersion",
            "POST",
            CM.into(),
            vec![],
            obj(&q, "ConfigMap"),
            400,
        ),
        (
            "uid precondition",
            "DELETE",
            big.clone(),
            vec![],
            json!({"preconditions": {"uid": q}}).to_string(),
            409,
        ),
        (
            "resourceVersion precondition",
            "DELETE",
            big.clone(),
            vec![],
            json!({"preconditions": {"resourceVersion": q}}).to_string(),
            400,
        ),
        (
            "JSON patch path",
            "PATCH",
            big.clone(),
            vec![("Content-Type", "application/json-patch+json".into())],
            json!([{"op": "remove", "path": format!("/{q}")}]).to_string(),
            422,
        ),
        (
            "JSON patch op",
            "PATCH",
            big.clone(),
            vec![("Content-Type", "application/json-patch+json".into())],
            json!([{"op": q, "path": "/a"}]).to_string(),
            400,
        ),
        (
            "strategic directive",
            "PATCH",
            big.clone(),
            vec![(
                "Content-Type",
                "application/strategic-merge-patch+json".into(),
            )],
            json!({"data": {"$patch": q}}).to_string(),
            422,
        ),
        (
            "strategic directive map",
            "PATCH",
            big.clone(),
            vec![(
                "Content-Type",
                "application/strategic-merge-patch+json".into(),
            )],
            json!({"metadata": {"$patch": "x", "a": q}}).to_string(),
            422,
        ),
        (
            "labelSelector",
            "GET",
            format!("{CM}?labelSelector={uq}"),
            vec![],
            String::new(),
            400,
        ),
        (
            "fieldSelector",
            "GET",
            format!("{CM}?fieldSelector={uq}"),
            vec![],
            String::new(),
            400,
        ),
        (
            "resourceVersion",
            "GET",
            format!("{CM}?resourceVersion={uq}"),
            vec![],
            String::new(),
            400,
        ),
        (
            "dryRun",
            "POST",
            format!("{CM}?dryRun={uq}"),
            vec![],
            obj("v1", "ConfigMap"),
            400,
        ),
        (
            "name in the path",
            "GET",
            format!("{CM}/{uq}"),
            vec![],
            String::new(),
            404,
        ),
    ];
    for (what, method, path, mut headers, body, code) in cases {
        if !headers.iter().any(|(k, _)| *k == "Content-Type") {
            headers.push(("Content-Type", "application/json".into()));
        }
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = http(&s.addr, method, &path, &headers, body.as_bytes());
        assert!(
            r.body.len() <= 16 * 1024,
            "{what}: a {} error body of {} bytes quotes more than a cut value",
            r.status,
            r.body.len()
        );
        assert_bounded(&r, code, what);
    }
    // A 406 names the media types served, as upstream's, never the client's `Accept`.
    let accept = format!("a/{hq}");
    let r = http(&s.addr, "GET", CM, &[("Accept", accept.as_str())], b"");
    assert_eq!(r.status, 406);
    assert!(r.body.len() < 512, "{}", String::from_utf8_lossy(&r.body));
}

/// A refused apply names the conflicting path, which holds the request's keys: a 600 000
/// character key (a kind without a schema keeps any key) answered a 409 of 270 KB (the
/// Status bound cut it; without it, the key twice). The path is cut like any quoted value.
#[test]
fn an_apply_conflict_on_a_huge_key_answers_a_small_409() {
    let s = common::blob_server();
    let blobs = "/apis/example.com/v1/namespaces/default/blobs/b";
    let key = "x".repeat(600_000);
    let apply = |manager: &str, value: u32| {
        let body = format!(
            "apiVersion: example.com/v1\nkind: Blob\nmetadata: {{name: b}}\nspec:\n  ? '{key}'\n  : {value}\n"
        );
        http(
            &s.addr,
            "PATCH",
            &format!("{blobs}?fieldManager={manager}"),
            &[("Content-Type", "application/apply-patch+yaml")],
            body.as_bytes(),
        )
    };
    let r = apply("a", 1);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body[..200]));
    let r = apply("b", 2);
    assert!(
        r.body.len() <= 16 * 1024,
        "a {} conflict of {} bytes quotes more than a cut path",
        r.status,
        r.body.len()
    );
    let v = assert_bounded(&r, 409, "apply conflict");
    let field = v["details"]["causes"][0]["field"]
        .as_str()
        .unwrap_or_default();
    assert!(
        field.starts_with(".spec.xxx") && field.contains(MARKER),
        "{field:.80}"
    );
}

/// A denied request's 403 quotes the name, the namespace, the path, the impersonated user:
/// a 15 KB URL of `%22` answered a 20 KB 403 and a 60 KB one 45 KB (cut only by the Status
/// bound), as did an `Impersonate-User` of 20 000 `"`.
#[test]
fn a_denied_request_answers_a_small_403() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "evetoken,eve,u-eve,\n").unwrap();
    let s = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
    let uq = "%22".repeat(5_000);
    let q = "\"".repeat(20_000);
    let auth = ("Authorization", "Bearer evetoken".to_owned());
    let cases: Vec<Case> = vec![
        (
            "name",
            "GET",
            format!("{CM}/{uq}"),
            vec![auth.clone()],
            String::new(),
            403,
        ),
        (
            "namespace",
            "GET",
            format!("/api/v1/namespaces/{uq}/configmaps"),
            vec![auth.clone()],
            String::new(),
            403,
        ),
        (
            "path",
            "GET",
            format!("/x/{uq}"),
            vec![auth.clone()],
            String::new(),
            403,
        ),
        (
            "Impersonate-User",
            "GET",
            CM.into(),
            vec![auth.clone(), ("Impersonate-User", q.clone())],
            String::new(),
            403,
        ),
        (
            "Impersonate-Group",
            "GET",
            CM.into(),
            vec![auth, ("Impersonate-Group", q)],
            String::new(),
            400,
        ),
    ];
    for (what, method, path, headers, body, code) in cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = http(&s.addr, method, &path, &headers, body.as_bytes());
        assert!(
            r.body.len() <= 16 * 1024,
            "{what}: a {} error body of {} bytes quotes more than a cut value",
            r.status,
            r.body.len()
        );
        assert_bounded(&r, code, what);
    }
}

/// `fieldValidation=Warn` (the default) answers each unknown field as a `Warning` header
/// naming it: at most 100 headers, each finding cut by the same rule, so a header is at
/// most ~1.1 KiB whatever the key (keys of `"` were cut at 1 KiB before quoting, ~2 KiB).
#[test]
fn warning_headers_are_bounded_in_number_and_size() {
    let s = Server::start(&[]);
    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}});
    for i in 0..150 {
        obj[format!("{}{i}", "\"".repeat(5_000))] = json!(1);
    }
    let r = send(
        &s,
        "POST",
        CM,
        "application/json",
        obj.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let warnings: Vec<&String> = r
        .headers
        .iter()
        .filter(|(k, _)| k == "warning")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(warnings.len(), 100);
    for w in warnings {
        assert!(w.len() <= 1200, "a Warning header of {} bytes", w.len());
        assert!(w.contains(MARKER), "{w:.120}");
    }
}

/// serde's type errors quote a mistyped string whole (`invalid type: string "..."`): a
/// review's spec was decoded into types and answered 45 KB (cut only by the Status bound) for
/// a 2 MB body. A Role's mistyped rules are refused by typed validation before that, with
/// upstream's decode error, which quotes nothing of the value.
#[test]
fn a_mistyped_review_or_role_answers_a_small_error() {
    let s = Server::start(&[]);
    let q = "\"".repeat(1_000_000);
    let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": q}});
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "r"}, "rules": q});
    for (what, path, body) in [
        (
            "SelfSubjectAccessReview",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            review,
        ),
        (
            "Role",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles",
            role,
        ),
    ] {
        let r = send(
            &s,
            "POST",
            path,
            "application/json",
            body.to_string().as_bytes(),
        );
        assert!(
            r.body.len() <= 16 * 1024,
            "{what}: a {} error body of {} bytes quotes more than a cut value",
            r.status,
            r.body.len()
        );
        if what == "Role" {
            assert_eq!(r.status, 400);
            assert_eq!(
                r.json()["message"],
                "Role in version \"v1\" cannot be handled as a Role: json: cannot unmarshal string into Go struct field Role.rules of type []v1.PolicyRule"
            );
        } else {
            assert_bounded(&r, 400, what);
        }
    }
}
