//! Watch (and list) requests through the installed router, as an HTTP client or a
//! websocket client's upgrade request sends them: `GET` on a collection, a named object,
//! all namespaces or the legacy `/watch/` path, with an arbitrary query string (`watch`,
//! `resourceVersion`, `resourceVersionMatch`, selectors, `timeoutSeconds`,
//! `allowWatchBookmarks`, `sendInitialEvents`, `includeObject`, anything else) and one of a
//! few `Accept` headers. The store holds one namespace and one pod. The first byte picks
//! the path and the `Accept` header; the rest is the query string (bytes a URI cannot
//! carry are percent-encoded, `%` itself is kept so that malformed escapes get through).
//!
//! Checked beyond "no panic": no request is answered 5xx (a 500 would be a handler error or
//! a caught panic) except upstream's 504 for a resource version the store has not reached; a watch that starts (200) sends, in its first frames, at most 64 KiB
//! each (the store holds one small object). The websocket upgrade itself needs a real
//! connection (`crates/apiserver/tests/stress/hostile.rs` sends it); its query is read by the
//! same code as here.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use libfuzzer_sys::fuzz_target;
use listwatch_endpoints::{Config, Installer, NameValidation, ResourceInfo};
use listwatch_memstore::MemStore;
use tower::ServiceExt;

struct World {
    rt: tokio::runtime::Runtime,
    router: Router,
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            // Paused: a wait (for a resource version ahead of the store, up to 3 s) passes
            // at once when nothing else can run.
            .start_paused(true)
            .build()
            .expect("runtime");
        let s: Arc<dyn listwatch_storage::Storage> = Arc::new(MemStore::new());
        let router = Installer::new(Config::default())
            .resource(
                ResourceInfo::new("", "v1", "namespaces", "Namespace")
                    .namespaced(false)
                    .name_validation(NameValidation::Label),
                s.clone(),
            )
            .resource(
                ResourceInfo::new("", "v1", "pods", "Pod").selectable_fields(["spec.nodeName"]),
                s,
            )
            .build()
            .router();
        rt.block_on(async {
            for (path, body) in [
                ("/api/v1/namespaces", r#"{"metadata":{"name":"ns"}}"#),
                (
                    "/api/v1/namespaces/ns/pods",
                    r#"{"metadata":{"name":"p","labels":{"app":"a"}},"spec":{"nodeName":"n1"}}"#,
                ),
            ] {
                let req = Request::post(path)
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .expect("request");
                let resp = router.clone().oneshot(req).await.expect("infallible");
                assert!(resp.status().is_success(), "{path}: {}", resp.status());
            }
        });
        World { rt, router }
    })
}

const PATHS: [&str; 4] = [
    "/api/v1/namespaces/ns/pods",
    "/api/v1/namespaces/ns/pods/p",
    "/api/v1/pods",
    "/api/v1/watch/namespaces/ns/pods",
];

const ACCEPTS: [Option<&str>; 8] = [
    None,
    Some("application/json"),
    Some("application/json;as=Table;v=v1;g=meta.k8s.io"),
    Some("application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/json"),
    Some("application/vnd.kubernetes.protobuf"),
    Some("application/yaml"),
    Some("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"),
    Some("*/*"),
];

fn query(bytes: &[u8]) -> String {
    let mut q = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b) {
            q.push(char::from(b));
        } else {
            q.push_str(&format!("%{b:02X}"));
        }
    }
    q
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, rest)) = input.split_first() else {
        return;
    };
    let path = PATHS[usize::from(selector) % PATHS.len()];
    let accept = ACCEPTS[usize::from(selector / 4) % ACCEPTS.len()];
    let uri = format!("{path}?{}", query(rest));
    let mut req = Request::get(uri.as_str());
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let Ok(req) = req.body(Body::empty()) else {
        return;
    };
    let w = world();
    w.rt.block_on(serve(&w.router, req, &uri, accept));
});

async fn serve(router: &Router, req: Request<Body>, uri: &str, accept: Option<&str>) {
    check(router, req, uri, accept).await;
    // Let the store's watch task see its receiver gone and end (the current-thread runtime
    // runs spawned tasks only while this future waits); without this, every watch of the
    // run would stay in memory, a leak of the harness, not of the server.
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

/// Sends the request; checks its answer and the first frames of a watch.
async fn check(router: &Router, req: Request<Body>, uri: &str, accept: Option<&str>) {
    {
        let resp = router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        if status.is_server_error() {
            // Upstream's answer to a read at a resource version the store has not reached
            // within 3 s: 504 Timeout "Too large resource version". Nothing else.
            let body = resp.into_body().collect().await.expect("body").to_bytes();
            let text = String::from_utf8_lossy(&body);
            assert!(
                status.as_u16() == 504 && text.contains("Too large resource version"),
                "{uri} ({accept:?}): {status} {text}"
            );
            return;
        }
        if !status.is_success() {
            return;
        }
        let mut body = resp.into_body();
        for _ in 0..3 {
            match tokio::time::timeout(Duration::ZERO, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        assert!(
                            data.len() <= 64 * 1024,
                            "{uri}: a {}-byte frame",
                            data.len()
                        );
                    }
                }
                Ok(Some(Err(e))) => panic!("{uri}: body error {e}"),
                Ok(None) | Err(_) => break,
            }
        }
    }
}
