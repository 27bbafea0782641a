//! Hostile bodies against the installed router: each attack gets its exact Status, and
//! nothing it sent is stored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use listwatch_endpoints::{Config, Installer, KindSpec, NameValidation};
use listwatch_memstore::MemStore;
use serde_json::{Value, json};
use tower::ServiceExt;

fn router_with(config: Config, store: MemStore) -> Router {
    let s: Arc<dyn listwatch_storage::Storage> = Arc::new(store);
    Installer::new(config)
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label)
                .status_subresource(true),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap").short_names(["cm"]),
            s.clone(),
        )
        .resource(KindSpec::new("", "v1", "pods", "Pod"), s.clone())
        // A kind without a schema keeps every field (typed kinds drop unknown ones, as
        // upstream), so the hostile bodies below can put anything anywhere.
        .resource(KindSpec::new("example.com", "v1", "blobs", "Blob"), s)
        .build()
        .router()
}

async fn router() -> Router {
    let r = router_with(Config::default(), MemStore::new());
    let resp = send(
        &r,
        "POST",
        "/api/v1/namespaces",
        JSON,
        r#"{"metadata":{"name":"ns"}}"#,
    )
    .await;
    assert_eq!(resp.status, StatusCode::CREATED);
    r
}

struct Resp {
    status: StatusCode,
    body: Bytes,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    fn message(&self) -> String {
        self.json()["message"].as_str().unwrap_or("").to_owned()
    }

    /// Asserts a Status with this code and reason, and returns its message.
    fn status(&self, code: u16, reason: &str) -> String {
        let v = self.json();
        assert_eq!(self.status.as_u16(), code, "{v}");
        assert_eq!(
            (v["kind"].as_str(), v["code"].as_u64()),
            (Some("Status"), Some(u64::from(code))),
            "{v}"
        );
        assert_eq!(v["reason"], reason, "{v}");
        self.message()
    }
}

const JSON: &str = "application/json";
const YAML: &str = "application/yaml";
const JSON_PATCH: &str = "application/json-patch+json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const STRATEGIC: &str = "application/strategic-merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

async fn send(r: &Router, method: &str, uri: &str, ct: &str, body: impl Into<Body>) -> Resp {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", ct)
        .body(body.into())
        .unwrap();
    let resp = r.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    Resp { status, body }
}

async fn get(r: &Router, uri: &str) -> Resp {
    send(r, "GET", uri, JSON, "").await
}

const CM: &str = "/api/v1/namespaces/ns/configmaps";
const BLOB: &str = "/apis/example.com/v1/namespaces/ns/blobs";

async fn create_blob(r: &Router, body: Value) {
    let resp = send(r, "POST", BLOB, JSON, body.to_string()).await;
    assert_eq!(resp.status, StatusCode::CREATED, "{:?}", resp.body);
}

async fn create_cm(r: &Router, body: Value) {
    let resp = send(r, "POST", CM, JSON, body.to_string()).await;
    assert_eq!(resp.status, StatusCode::CREATED, "{:?}", resp.body);
}

/// Nine levels of nine aliases each: a 400-byte "billion laughs" under `key`.
fn laughs(prefix: &str) -> String {
    let mut y = String::from(prefix);
    y.push_str("l0: &l0 [\"lol\"]\n");
    for i in 1..=9 {
        let refs = vec![format!("*l{}", i - 1); 9].join(", ");
        y.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
    }
    y
}

#[tokio::test]
async fn json_patch_copy_bombs_are_refused_and_nothing_is_stored() {
    let r = router().await;
    create_blob(
        &r,
        json!({"metadata":{"name":"c"},"x":["0123456789abcdef".repeat(64)]}),
    )
    .await;
    // Issue 11's attack: 18 copies, each doubling /x (2^18 times 1 KiB if it ran).
    let ops = vec![r#"{"op":"copy","from":"/x","path":"/x/-"}"#; 18].join(",");
    let body = format!("[{ops}]");
    assert!(body.len() < 2048);
    let resp = send(&r, "PATCH", &format!("{BLOB}/c"), JSON_PATCH, body).await;
    let msg = resp.status(422, "Invalid");
    assert!(
        msg.starts_with("Unable to complete the copy, the accumulated size increase of copy is ")
            && msg.ends_with(", exceeding the limit 3145728"),
        "{msg}"
    );
    let stored = get(&r, &format!("{BLOB}/c")).await.json();
    assert_eq!(stored["x"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn json_patches_of_more_than_ten_thousand_operations_are_413() {
    let r = router().await;
    create_cm(&r, json!({"metadata":{"name":"c"}})).await;
    let op = r#"{"op":"add","path":"/data","value":{}}"#;
    let body = format!("[{}]", vec![op; 10_001].join(","));
    let resp = send(&r, "PATCH", &format!("{CM}/c"), JSON_PATCH, body).await;
    assert_eq!(
        resp.status(413, "RequestEntityTooLarge"),
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    let body = format!("[{}]", vec![op; 10_000].join(","));
    let resp = send(&r, "PATCH", &format!("{CM}/c"), JSON_PATCH, body).await;
    assert_eq!(resp.status, StatusCode::OK);
}

#[tokio::test]
async fn yaml_alias_bombs_are_413_for_bodies_and_apply_patches() {
    let r = router().await;
    let bomb = laughs("apiVersion: example.com/v1\nkind: Blob\nmetadata:\n  name: bomb\n");
    assert!(bomb.len() < 1536, "{}", bomb.len());
    let resp = send(&r, "POST", BLOB, YAML, bomb.clone()).await;
    let msg = resp.status(413, "RequestEntityTooLarge");
    assert!(
        msg.starts_with("Request entity too large: the body expands to more than "),
        "{msg}"
    );
    let resp = send(
        &r,
        "PATCH",
        &format!("{BLOB}/bomb?fieldManager=m"),
        APPLY,
        bomb,
    )
    .await;
    resp.status(413, "RequestEntityTooLarge");
    assert_eq!(
        get(&r, &format!("{BLOB}/bomb")).await.status,
        StatusCode::NOT_FOUND
    );
    // A YAML body with a few aliases is fine.
    let ok = "metadata:\n  name: ok\ndata: &d {a: \"1\"}\nextra: *d\n";
    let resp = send(&r, "POST", BLOB, YAML, ok).await;
    assert_eq!(resp.status, StatusCode::CREATED, "{:?}", resp.body);
    assert_eq!(resp.json()["extra"], json!({"a":"1"}));
}

fn deep_object(levels: usize) -> String {
    format!(
        r#"{{"metadata":{{"name":"deep"}},"x":{}1{}}}"#,
        r#"{"a":"#.repeat(levels),
        "}".repeat(levels)
    )
}

#[tokio::test]
async fn deeply_nested_bodies_are_400_on_every_body_path() {
    let r = router().await;
    create_blob(&r, json!({"metadata":{"name":"c"}})).await;
    let too_deep = "the body nests objects and arrays deeper than the limit of 100 levels";
    for levels in [200, 100_000] {
        let body = deep_object(levels);
        let resp = send(&r, "POST", BLOB, JSON, body.clone()).await;
        assert_eq!(resp.status(400, "BadRequest"), too_deep);
        let resp = send(&r, "PUT", &format!("{BLOB}/c"), JSON, body.clone()).await;
        assert_eq!(resp.status(400, "BadRequest"), too_deep);
        let resp = send(&r, "POST", BLOB, YAML, body.clone()).await;
        resp.status(400, "BadRequest");
        for ct in [MERGE_PATCH, STRATEGIC] {
            let resp = send(&r, "PATCH", &format!("{BLOB}/c"), ct, body.clone()).await;
            assert_eq!(resp.status(400, "BadRequest"), too_deep, "{ct}");
        }
        let resp = send(
            &r,
            "PATCH",
            &format!("{BLOB}/c?fieldManager=m"),
            APPLY,
            body.clone(),
        )
        .await;
        resp.status(400, "BadRequest");
        let patch = format!(
            r#"[{{"op":"add","path":"/x","value":{}1{}}}]"#,
            "[".repeat(levels),
            "]".repeat(levels)
        );
        let resp = send(&r, "PATCH", &format!("{BLOB}/c"), JSON_PATCH, patch).await;
        assert_eq!(resp.status(400, "BadRequest"), too_deep);
        let opts = format!(
            r#"{{"kind":"DeleteOptions","x":{}1{}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        );
        let resp = send(&r, "DELETE", &format!("{BLOB}/c"), JSON, opts.clone()).await;
        assert_eq!(resp.status(400, "BadRequest"), too_deep);
        let resp = send(&r, "DELETE", BLOB, JSON, opts).await;
        assert_eq!(resp.status(400, "BadRequest"), too_deep);
    }
    // 60 levels is an object like any other.
    let resp = send(&r, "POST", BLOB, JSON, deep_object(60)).await;
    assert_eq!(resp.status, StatusCode::CREATED);
    // A JSON patch cannot nest the stored object past the limit either, 40 levels at a time.
    let step = format!("{}1{}", r#"{"a":"#.repeat(40), "}".repeat(40));
    let path = format!("/x{}", "/a".repeat(60));
    let patch = format!(r#"[{{"op":"add","path":"{path}","value":{step}}}]"#);
    let resp = send(&r, "PATCH", &format!("{BLOB}/deep"), JSON_PATCH, patch).await;
    assert_eq!(resp.status(400, "BadRequest"), too_deep);
    assert_eq!(get(&r, &format!("{BLOB}/c")).await.status, StatusCode::OK);
}

#[tokio::test]
async fn bodies_over_the_limit_are_413_in_upstreams_words() {
    let config = Config {
        max_body_bytes: 1024,
        ..Config::default()
    };
    let r = router_with(config, MemStore::new());
    let big = format!(
        r#"{{"metadata":{{"name":"ns"}},"x":"{}"}}"#,
        "y".repeat(2000)
    );
    // With a Content-Length (refused before reading) ...
    let resp = send(&r, "POST", "/api/v1/namespaces", JSON, big.clone()).await;
    assert_eq!(
        resp.status(413, "RequestEntityTooLarge"),
        "Request entity too large: limit is 1024"
    );
    // ... and streamed without one.
    let chunks = futures::stream::iter(
        big.into_bytes()
            .chunks(100)
            .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    let resp = send(
        &r,
        "POST",
        "/api/v1/namespaces",
        JSON,
        Body::from_stream(chunks),
    )
    .await;
    assert_eq!(
        resp.status(413, "RequestEntityTooLarge"),
        "Request entity too large: limit is 1024"
    );
}

/// 1.5 MiB: etcd's default request limit, the embedded store's default object limit.
const STORE_LIMIT: usize = 1536 * 1024;

fn too_large_object(msg: &str) -> bool {
    msg.starts_with("Request entity too large: the object is ")
        && msg.ends_with(&format!(
            " bytes, more than the storage limit of {STORE_LIMIT} bytes"
        ))
}

#[tokio::test]
async fn objects_over_the_storage_limit_are_413_before_anything_is_written() {
    let r = router().await;
    let big = "x".repeat(STORE_LIMIT);
    // Create (under the 3 MiB body limit, over the store's), also as a dry run.
    for uri in [CM.to_owned(), format!("{CM}?dryRun=All")] {
        let body = json!({"metadata":{"name":"big"},"data":{"k":big}}).to_string();
        let msg = send(&r, "POST", &uri, JSON, body)
            .await
            .status(413, "RequestEntityTooLarge");
        assert!(too_large_object(&msg), "{msg}");
    }
    assert_eq!(
        get(&r, &format!("{CM}/big")).await.status,
        StatusCode::NOT_FOUND
    );
    // Apply creating it.
    let body =
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"k":big}})
            .to_string();
    let msg = send(
        &r,
        "PATCH",
        &format!("{CM}/big?fieldManager=m"),
        APPLY,
        body,
    )
    .await
    .status(413, "RequestEntityTooLarge");
    assert!(too_large_object(&msg), "{msg}");
    assert_eq!(
        get(&r, &format!("{CM}/big")).await.status,
        StatusCode::NOT_FOUND
    );
    // Growing an existing object past the limit: update, merge, strategic, JSON patch
    // (two halves that each fit), apply.
    create_cm(&r, json!({"metadata":{"name":"c"},"data":{"a":"1"}})).await;
    let half = "y".repeat(STORE_LIMIT / 2 + 1);
    let attempts = [
        ("PUT", JSON, json!({"metadata":{"name":"c"},"data":{"k":big}}).to_string()),
        ("PATCH", MERGE_PATCH, json!({"data":{"k":big}}).to_string()),
        ("PATCH", STRATEGIC, json!({"data":{"k":big}}).to_string()),
        (
            "PATCH",
            JSON_PATCH,
            json!([{"op":"add","path":"/data/h1","value":half},{"op":"add","path":"/data/h2","value":half}]).to_string(),
        ),
    ];
    for (method, ct, body) in attempts {
        let msg = send(&r, method, &format!("{CM}/c"), ct, body)
            .await
            .status(413, "RequestEntityTooLarge");
        assert!(too_large_object(&msg), "{ct}: {msg}");
    }
    let body =
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":big}})
            .to_string();
    let msg = send(&r, "PATCH", &format!("{CM}/c?fieldManager=m"), APPLY, body)
        .await
        .status(413, "RequestEntityTooLarge");
    assert!(too_large_object(&msg), "{msg}");
    // A JSON patch whose copies stay within the copy budget can still not grow past the store.
    let msg = send(
        &r,
        "PATCH",
        &format!("{CM}/c"),
        JSON_PATCH,
        json!([{"op":"add","path":"/data/h1","value":half},{"op":"copy","from":"/data/h1","path":"/data/h2"}]).to_string(),
    )
    .await
    .status(413, "RequestEntityTooLarge");
    assert!(too_large_object(&msg), "{msg}");
    assert_eq!(
        get(&r, &format!("{CM}/c")).await.json()["data"],
        json!({"a":"1"})
    );
    // Just under the limit is fine.
    let fits = "z".repeat(STORE_LIMIT - 1024);
    let resp = send(
        &r,
        "PATCH",
        &format!("{CM}/c"),
        MERGE_PATCH,
        json!({"data":{"k":fits}}).to_string(),
    )
    .await;
    assert_eq!(resp.status, StatusCode::OK);
}

#[tokio::test]
async fn the_object_limit_is_the_storages_and_configurable() {
    let store = MemStore::with_config(listwatch_memstore::MemStoreConfig {
        max_object_bytes: Some(4096),
        ..Default::default()
    });
    let r = router_with(Config::default(), store);
    let body = json!({"metadata":{"name":"ns","annotations":{"a":"y".repeat(5000)}}}).to_string();
    let msg = send(&r, "POST", "/api/v1/namespaces", JSON, body)
        .await
        .status(413, "RequestEntityTooLarge");
    assert!(
        msg.ends_with("more than the storage limit of 4096 bytes"),
        "{msg}"
    );
}

#[tokio::test]
async fn immortal_namespaces_cannot_be_deleted() {
    let r = router().await;
    for ns in ["default", "kube-system", "kube-public", "other"] {
        let body = json!({"metadata":{"name":ns}}).to_string();
        let resp = send(&r, "POST", "/api/v1/namespaces", JSON, body).await;
        assert_eq!(resp.status, StatusCode::CREATED);
    }
    for ns in ["default", "kube-system", "kube-public"] {
        for uri in [
            format!("/api/v1/namespaces/{ns}"),
            format!("/api/v1/namespaces/{ns}?dryRun=All"),
        ] {
            let resp = send(&r, "DELETE", &uri, JSON, "").await;
            let v = resp.json();
            assert_eq!(
                resp.status(403, "Forbidden"),
                format!("namespaces \"{ns}\" is forbidden: this namespace may not be deleted")
            );
            assert_eq!(
                v["details"],
                json!({"name": ns, "kind": "namespaces"}),
                "{v}"
            );
        }
        assert_eq!(
            get(&r, &format!("/api/v1/namespaces/{ns}")).await.status,
            StatusCode::OK
        );
    }
    // Upstream's namespace registry has no collection delete at all.
    let resp = send(&r, "DELETE", "/api/v1/namespaces", JSON, "").await;
    resp.status(405, "MethodNotAllowed");
    assert_eq!(
        get(&r, "/api/v1/namespaces/other").await.status,
        StatusCode::OK
    );
    let resp = send(&r, "DELETE", "/api/v1/namespaces/other", JSON, "").await;
    assert_eq!(resp.status, StatusCode::OK);
}

#[tokio::test]
async fn generate_name_cut_inside_a_character_is_422_not_a_dropped_connection() {
    let r = router().await;
    // Issue 11: 57 ASCII bytes and 'é' (bytes 58-59) panicked where the prefix was cut at 58.
    let prefix = format!("{}é", "a".repeat(57));
    let body = json!({"metadata":{"generateName": prefix}}).to_string();
    let resp = send(&r, "POST", CM, JSON, body).await;
    let msg = resp.status(422, "Invalid");
    // Upstream names the object before validating it, so the message shows the name made.
    assert!(
        msg.starts_with(&format!("ConfigMap \"{}", "a".repeat(57))),
        "{msg}"
    );
    assert!(
        msg.contains("\" is invalid: metadata.generateName: Invalid value: "),
        "{msg}"
    );
    let causes = resp.json()["details"]["causes"].clone();
    assert_eq!(causes[0]["field"], "metadata.generateName", "{causes}");
    // Valid prefixes of any length get a 63-byte name.
    let long = format!("{}-", "b".repeat(70));
    let body = json!({"metadata":{"generateName": long}}).to_string();
    let resp = send(&r, "POST", CM, JSON, body).await;
    assert_eq!(resp.status, StatusCode::CREATED, "{:?}", resp.body);
    assert_eq!(
        resp.json()["metadata"]["name"].as_str().map(str::len),
        Some(63)
    );
}

#[tokio::test]
async fn annotations_over_256_kib_are_422_in_upstreams_words() {
    let r = router().await;
    let key = "a";
    let fits = "v".repeat(256 * 1024 - key.len());
    let body = json!({"metadata":{"name":"fits","annotations":{key: fits}}}).to_string();
    assert_eq!(
        send(&r, "POST", CM, JSON, body).await.status,
        StatusCode::CREATED
    );
    let over = "v".repeat(256 * 1024 - key.len() + 1);
    let body = json!({"metadata":{"name":"over","annotations":{key: over.clone()}}}).to_string();
    let resp = send(&r, "POST", CM, JSON, body).await;
    assert_eq!(
        resp.status(422, "Invalid"),
        "ConfigMap \"over\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes"
    );
    let cause = &resp.json()["details"]["causes"][0];
    assert_eq!(
        (cause["reason"].as_str(), cause["field"].as_str()),
        (Some("FieldValueTooLong"), Some("metadata.annotations"))
    );
    // Many small annotations add up the same way, on a patch of an existing object too.
    let many: serde_json::Map<String, Value> = (0..300)
        .map(|i| (format!("k{i}"), Value::String("v".repeat(1000))))
        .collect();
    let patch = json!({"metadata":{"annotations": many}}).to_string();
    let resp = send(&r, "PATCH", &format!("{CM}/fits"), MERGE_PATCH, patch).await;
    resp.status(422, "Invalid");
    assert_eq!(
        get(&r, &format!("{CM}/over")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn label_and_annotation_keys_and_values_are_checked_as_upstream() {
    let r = router().await;
    let regex_name = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let cases = [
        (
            json!({"labels":{"app":"not ok"}}),
            "metadata.labels: Invalid value: \"not ok\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned(),
        ),
        (
            json!({"labels":{"app":"v".repeat(64)}}),
            format!("metadata.labels: Invalid value: \"{}\": must be no more than 63 characters", "v".repeat(64)),
        ),
        (
            json!({"labels":{"a/b/c":"x"}}),
            format!("metadata.labels: Invalid value: \"a/b/c\": a qualified name {regex_name} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
        ),
        (
            json!({"labels":{"Bad_Prefix/x":"x"}}),
            "metadata.labels: Invalid value: \"Bad_Prefix/x\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned(),
        ),
        (
            json!({"annotations":{"é":"x"}}),
            format!("metadata.annotations: Invalid value: \"é\": name part {regex_name}"),
        ),
    ];
    for (meta, want) in cases {
        let mut meta = meta;
        meta["name"] = json!("bad");
        let body = json!({"metadata": meta}).to_string();
        let resp = send(&r, "POST", CM, JSON, body).await;
        assert_eq!(
            resp.status(422, "Invalid"),
            format!("ConfigMap \"bad\" is invalid: {want}")
        );
    }
    // Two problems with one key: both, in brackets, as upstream aggregates them.
    let body = json!({"metadata":{"name":"bad","labels":{"/":"x"}}}).to_string();
    let msg = send(&r, "POST", CM, JSON, body)
        .await
        .status(422, "Invalid");
    assert!(msg.starts_with("ConfigMap \"bad\" is invalid: [metadata.labels: Invalid value: \"/\": prefix part must be non-empty, metadata.labels: Invalid value: \"/\": name part must be non-empty, "), "{msg}");
    // Upper case annotation keys are fine (upstream lowers them before checking).
    let body = json!({"metadata":{"name":"ok","annotations":{"Example.COM/Key":"x"},"labels":{"example.com/MyName":"MyValue"}}}).to_string();
    assert_eq!(
        send(&r, "POST", CM, JSON, body).await.status,
        StatusCode::CREATED
    );
}
