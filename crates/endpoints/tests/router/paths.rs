//! Request paths as upstream resolves them: percent-decoded segments, `%2F`, malformed and
//! non-UTF-8 escapes, dot segments, empty segments, trailing slashes, and HEAD. Each case
//! has its exact Status.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use listwatch_endpoints::{Config, Installer, KindSpec, NameValidation};
use listwatch_memstore::MemStore;
use serde_json::Value;
use tower::ServiceExt;

const JSON: &str = "application/json";

async fn router() -> Router {
    let s: Arc<dyn listwatch_storage::Storage> = Arc::new(MemStore::new());
    let r = Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap"),
            s.clone(),
        )
        // Events, as upstream's, only need names that are valid path segments: `a:b` is one.
        .resource(
            KindSpec::new("", "v1", "events", "Event").name_validation(NameValidation::PathSegment),
            s,
        )
        .build()
        .router();
    let resp = send(
        &r,
        "POST",
        "/api/v1/namespaces",
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
}

async fn send(r: &Router, method: &str, uri: &str, body: &str) -> Resp {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", JSON)
        .body(Body::from(body.to_owned()))
        .unwrap();
    let resp = r.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .unwrap();
    Resp { status, body }
}

#[tokio::test]
async fn an_escaped_colon_finds_the_object_it_names() {
    let r = router().await;
    let created = send(
        &r,
        "POST",
        "/api/v1/namespaces/ns/events",
        r#"{"metadata":{"name":"a:b"},"reason":"x"}"#,
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    for path in [
        "/api/v1/namespaces/ns/events/a:b",
        "/api/v1/namespaces/ns/events/a%3Ab",
        "/api/v1/namespaces/ns/events/a%3ab",
        "/api/v1/namespaces/ns/events/%61%3A%62",
        "/api/v1/namespaces/n%73/events/a%3Ab",
        "/%61pi/v1/namespaces/ns/events/a%3Ab/",
    ] {
        let got = send(&r, "GET", path, "").await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
        assert_eq!(got.json()["metadata"]["name"], "a:b", "{path}");
    }
    // Every verb on the object resolves the same way.
    let patched = send(
        &r,
        "PATCH",
        "/api/v1/namespaces/ns/events/a%3Ab",
        r#"{"reason":"y"}"#,
    )
    .await;
    assert_eq!(patched.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let req = Request::builder()
        .method("PATCH")
        .uri("/api/v1/namespaces/ns/events/a%3Ab")
        .header("content-type", "application/merge-patch+json")
        .body(Body::from(r#"{"reason":"y"}"#))
        .unwrap();
    assert_eq!(
        r.clone().oneshot(req).await.unwrap().status(),
        StatusCode::OK
    );
    let watched = send(
        &r,
        "GET",
        "/api/v1/namespaces/ns/events?fieldSelector=metadata.name%3Da%3Ab",
        "",
    )
    .await;
    assert_eq!(watched.status, StatusCode::OK);
    assert_eq!(watched.json()["items"][0]["reason"], "y");
    let deleted = send(&r, "DELETE", "/api/v1/namespaces/ns/events/a%3Ab", "").await;
    assert_eq!(deleted.status, StatusCode::OK);
    let gone = send(&r, "GET", "/api/v1/namespaces/ns/events/a:b", "").await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.message(), r#"events "a:b" not found"#);
}

#[tokio::test]
async fn an_escaped_slash_separates_segments_as_upstream() {
    let r = router().await;
    // `a%2Fb` is the name `a` with a subresource `b`, which configmaps do not have.
    let got = send(&r, "GET", "/api/v1/namespaces/ns/configmaps/a%2Fb", "").await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    assert_eq!(got.json()["reason"], "NotFound");
    assert_eq!(
        got.message(),
        "the server could not find the requested resource"
    );
    // A create whose path carries one is routed to the same place: 404, nothing created.
    let got = send(
        &r,
        "PUT",
        "/api/v1/namespaces/ns%2Fx/configmaps/a",
        r#"{"metadata":{"name":"a"}}"#,
    )
    .await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    // The whole collection path may be escaped: `namespaces%2Fns%2Fconfigmaps` is a list.
    let got = send(&r, "GET", "/api/v1/namespaces%2Fns%2Fconfigmaps", "").await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json()["kind"], "ConfigMapList");
}

#[tokio::test]
async fn malformed_escapes_and_non_utf8_names_are_400() {
    let r = router().await;
    for (path, message) in [
        (
            "/api/v1/namespaces/ns/configmaps/%zz",
            r#"invalid URL escape "%zz""#,
        ),
        (
            "/api/v1/namespaces/ns/configmaps/a%4",
            r#"invalid URL escape "%4""#,
        ),
        (
            "/api/v1/namespaces/ns/configmaps/a%",
            r#"invalid URL escape "%""#,
        ),
        (
            "/api/v1/namespaces/ns/configmaps/%FF",
            "the path is not valid UTF-8 once its percent-escapes are decoded",
        ),
        (
            "/api/v1/namespaces/%C3%28/configmaps",
            "the path is not valid UTF-8 once its percent-escapes are decoded",
        ),
        (
            "/api/v1/namespaces/ns/events/%ED%A0%80",
            "the path is not valid UTF-8 once its percent-escapes are decoded",
        ),
    ] {
        for method in ["GET", "DELETE", "PUT"] {
            let got = send(&r, method, path, r#"{"metadata":{"name":"x"}}"#).await;
            assert_eq!(got.status, StatusCode::BAD_REQUEST, "{method} {path}");
            assert_eq!(got.json()["reason"], "BadRequest", "{method} {path}");
            assert_eq!(got.message(), message, "{method} {path}");
        }
    }
    // A non-UTF-8 escape inside a discovery path is refused the same way.
    let got = send(&r, "GET", "/apis/%FF", "").await;
    assert_eq!(got.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn dot_names_are_refused_before_storage_and_dot_namespaces_by_it() {
    let r = router().await;
    for (path, message) in [
        (
            "/api/v1/namespaces/ns/configmaps/..",
            r#"Name parameter invalid: "..": may not be '..'"#,
        ),
        (
            "/api/v1/namespaces/ns/configmaps/%2E%2E",
            r#"Name parameter invalid: "..": may not be '..'"#,
        ),
        (
            "/api/v1/namespaces/ns/configmaps/.",
            r#"Name parameter invalid: ".": may not be '.'"#,
        ),
        (
            "/api/v1/namespaces/ns/configmaps/a%25b",
            r#"Name parameter invalid: "a%b": may not contain '%'"#,
        ),
        (
            "/api/v1/namespaces/..",
            r#"Name parameter invalid: "..": may not be '..'"#,
        ),
    ] {
        for method in ["GET", "DELETE", "PUT", "PATCH"] {
            let got = send(&r, method, path, "{}").await;
            assert_eq!(got.status, StatusCode::BAD_REQUEST, "{method} {path}");
            assert_eq!(got.message(), message, "{method} {path}");
        }
    }
    // `..` as a namespace never reaches another namespace's keys.
    for path in [
        "/api/v1/namespaces/../configmaps",
        "/api/v1/namespaces/%2E%2E/configmaps",
        "/api/v1/namespaces/./configmaps",
    ] {
        let got = send(&r, "GET", path, "").await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST, "{path}");
        // A create there is refused by namespace validation (422) before any key is made.
        let got = send(&r, "POST", path, r#"{"metadata":{"name":"x"}}"#).await;
        assert_eq!(got.status, StatusCode::UNPROCESSABLE_ENTITY, "{path}");
    }
    let all = send(&r, "GET", "/api/v1/configmaps", "").await;
    assert_eq!(all.json()["items"], serde_json::json!([]));
}

#[tokio::test]
async fn empty_segments_are_404_and_trailing_slashes_are_trimmed() {
    let r = router().await;
    for path in [
        "/api//v1/namespaces",
        "/api/v1//namespaces",
        "/api/v1/namespaces//ns/configmaps",
        "//api/v1/namespaces",
        "/api/v1/namespaces/ns/configmaps/a/b/c",
    ] {
        let got = send(&r, "GET", path, "").await;
        assert_eq!(got.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(got.json()["reason"], "NotFound", "{path}");
    }
    for path in [
        "/api/v1/namespaces/ns/configmaps/",
        "/api/v1/namespaces/ns/configmaps//",
        "/api/v1/namespaces/ns/configmaps%2F",
    ] {
        let got = send(&r, "GET", path, "").await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
        assert_eq!(got.json()["kind"], "ConfigMapList", "{path}");
    }
    let got = send(&r, "GET", "/api/v1/namespaces/ns/", "").await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json()["kind"], "Namespace");
}

#[tokio::test]
async fn head_is_answered_where_upstream_answers_it() {
    let r = router().await;
    // Resource routes are GET routes upstream (go-restful): HEAD is 405, with no body.
    for path in [
        "/api/v1/namespaces/ns/configmaps",
        "/api/v1/namespaces/ns",
        "/api/v1/namespaces/ns/configmaps/missing",
        "/api",
        "/api/v1",
        "/version",
    ] {
        let got = send(&r, "HEAD", path, "").await;
        assert_eq!(got.status, StatusCode::METHOD_NOT_ALLOWED, "{path}");
    }
    // An unknown path is still 404.
    let got = send(&r, "HEAD", "/api/v1/nothing", "").await;
    assert_eq!(got.status, StatusCode::NOT_FOUND);
    // `/apis`, `/apis/{group}` and the health and metrics endpoints take any method
    // upstream: HEAD is a GET without the body.
    for path in ["/apis", "/healthz", "/livez", "/readyz", "/metrics"] {
        let got = send(&r, "HEAD", path, "").await;
        assert_eq!(got.status, StatusCode::OK, "{path}");
    }
}

/// The handlers read the path the server's filter resolved (`RequestInfo` in the request's
/// extensions) instead of parsing it again, and only when it was resolved for this path.
#[tokio::test]
async fn the_handlers_serve_the_path_the_request_info_resolved() {
    use listwatch_endpoints::RequestInfo;
    use listwatch_endpoints::path::PathError;
    let r = router().await;
    let path = "/api/v1/namespaces/ns/configmaps";
    let get = |info: Option<RequestInfo>| {
        let r = r.clone();
        async move {
            let mut req = Request::builder()
                .method("GET")
                .uri(path)
                .body(Body::empty())
                .unwrap();
            if let Some(info) = info {
                req.extensions_mut().insert(info);
            }
            r.oneshot(req).await.unwrap().status()
        }
    };
    let resolved = RequestInfo::new(&axum::http::Method::GET, &path.parse().unwrap());
    assert_eq!(resolved.verb, "list");
    assert_eq!(get(Some(resolved.clone())).await, StatusCode::OK);
    // A resolution the handler must take as it is (here: no route), not parse again.
    let refused = RequestInfo {
        api_path: Err(PathError::NotFound),
        ..resolved.clone()
    };
    assert_eq!(get(Some(refused.clone())).await, StatusCode::NOT_FOUND);
    // One resolved for another path is ignored: the handler parses its own.
    let elsewhere = RequestInfo {
        path: "/api/v1/namespaces/ns/secrets".into(),
        ..refused
    };
    assert_eq!(get(Some(elsewhere)).await, StatusCode::OK);
    assert_eq!(get(None).await, StatusCode::OK);
}
