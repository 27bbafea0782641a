//! A create re-reads its namespace after its write (no orphans in a namespace terminated
//! meanwhile, `namespaces/mod.rs`). When that re-read fails — etcd electing a leader, a member
//! cut off — the write is already applied and visible to watchers. Before: the create
//! removed the object and answered the read's `500 ServerTimeout` with `Retry-After: 2`,
//! so a client (client-go, listwatch-client) sent the create again and watchers saw a
//! create, a delete and a second create for one write (the chaos test on etcd, issue 26).
//! Now the re-read is repeated through transient failures; and if the namespace still
//! cannot be read, the answer carries no `Retry-After`: the client decides.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use futures::StreamExt;
use listwatch_endpoints::{Api, Config, Installer, KindSpec, NameValidation};
use listwatch_memstore::MemStore;
use listwatch_storage::{
    Error as StorageError, Key, ListOptions, Result, Storage, WatchEvent, WatchStream,
};
use listwatch_testkit::storage::{Hooked, Hooks};
use serde_json::Value;
use tower::ServiceExt;

/// The hooks of the storage shared by the namespaces and the ConfigMaps: the namespaces'
/// `get`s (`gets_fail`) fail with `Unreachable` (as the etcd adapter reports a read no
/// member answered) while `failing` is above zero, one failure per get; a ConfigMap create
/// (`arm_on_create` > 0) sets `failing` to it once written, so the reads after it fail.
struct Faults {
    failing: Arc<AtomicUsize>,
    gets_fail: bool,
    arm_on_create: usize,
}

impl Hooks for Faults {
    fn after_create(&self, _key: &Key) {
        if self.arm_on_create > 0 {
            self.failing.store(self.arm_on_create, Ordering::SeqCst);
        }
    }
    fn before_get(&self, _key: &Key) -> Result<()> {
        let failed = self.gets_fail
            && self
                .failing
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if failed {
            return Err(StorageError::Unreachable {
                message: "http://127.0.0.1:2379: Unavailable: etcdserver: leader changed".into(),
            });
        }
        Ok(())
    }
}

/// A router whose namespace reads fail `fails` times right after each ConfigMap create.
fn setup(fails: usize) -> (Api, Router, MemStore) {
    let store = MemStore::new();
    let failing = Arc::new(AtomicUsize::new(0));
    let namespaces: Arc<dyn Storage> = Arc::new(Hooked::new(
        store.clone(),
        Faults {
            failing: Arc::clone(&failing),
            gets_fail: true,
            arm_on_create: 0,
        },
    ));
    let configmaps: Arc<dyn Storage> = Arc::new(Hooked::new(
        store.clone(),
        Faults {
            failing,
            gets_fail: false,
            arm_on_create: fails,
        },
    ));
    let api = Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label),
            namespaces,
        )
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap"),
            configmaps,
        )
        .build();
    let router = api.router();
    (api, router, store)
}

async fn call(r: &Router, method: &str, uri: &str, body: &str) -> (StatusCode, HeaderMap, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap();
    let resp = r.clone().oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    (
        parts.status,
        parts.headers,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Every event of `watch` until it is quiet for a moment, as (type, name).
async fn drain(watch: &mut WatchStream) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(300), watch.next()).await {
        match ev {
            WatchEvent::Added(o) => out.push(("ADDED", o.name().to_owned())),
            WatchEvent::Modified { object, .. } => out.push(("MODIFIED", object.name().to_owned())),
            WatchEvent::Deleted(o) => out.push(("DELETED", o.name().to_owned())),
            _ => {}
        }
    }
    out
}

/// The Api (kept for the test's length: dropping it stops its background tasks), its router,
/// the store, and a watch of the ConfigMaps of `ns1` from before any was written.
async fn start(fails: usize) -> (Api, Router, MemStore, WatchStream) {
    let (api, r, store) = setup(fails);
    let (s, _, v) = call(
        &r,
        "POST",
        "/api/v1/namespaces",
        r#"{"metadata":{"name":"ns1"}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let watch = store
        .watch(
            &Key::collection("configmaps", Some("ns1")).unwrap(),
            &ListOptions::recursive(),
        )
        .await
        .unwrap();
    (api, r, store, watch)
}

const CM: &str = "/api/v1/namespaces/ns1/configmaps";

/// The namespace read after the write fails twice (an etcd leader election): the create
/// reads again, answers 201, and watchers see one ADDED — nothing removed, nothing for a
/// client to resend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_namespace_recheck_fails_for_a_moment_is_applied_once() {
    let (_api, r, _store, mut watch) = start(2).await;
    let (s, headers, v) = call(
        &r,
        "POST",
        CM,
        r#"{"metadata":{"name":"cm-1"},"data":{"seq":"1"}}"#,
    )
    .await;
    assert_eq!(
        s,
        StatusCode::CREATED,
        "a create whose namespace re-read failed for a moment (Retry-After {:?}): {v}",
        headers.get("retry-after")
    );
    let (s, _, v) = call(&r, "GET", &format!("{CM}/cm-1"), "").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        drain(&mut watch).await,
        vec![("ADDED", "cm-1".to_owned())],
        "one write, one event"
    );
}

/// The namespace cannot be read at all after the write: the object is removed (the
/// namespace may have been terminated before it), and the answer says so without
/// `Retry-After` — a client that resends on it would apply the create a second time
/// (watchers see ADDED, DELETED, ADDED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_namespace_cannot_be_reread_is_not_marked_retryable() {
    let (_api, r, store, mut watch) = start(usize::MAX).await;
    let (s, headers, v) = call(
        &r,
        "POST",
        CM,
        r#"{"metadata":{"name":"cm-1"},"data":{"seq":"1"}}"#,
    )
    .await;
    assert!(s.is_server_error(), "{s}: {v}");
    assert!(
        headers.get("retry-after").is_none(),
        "a create that was applied and removed was marked retryable: {s} Retry-After {:?}: {v}",
        headers.get("retry-after")
    );
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("could not be read afterwards") && message.contains("removed"),
        "{v}"
    );
    assert_eq!(
        v.pointer("/details/retryAfterSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        0,
        "{v}"
    );
    let list = store
        .list(
            &Key::collection("configmaps", Some("ns1")).unwrap(),
            &ListOptions::recursive(),
        )
        .await
        .unwrap();
    assert!(
        list.items.is_empty(),
        "the object was not removed: {list:?}"
    );
    assert_eq!(
        drain(&mut watch).await,
        vec![("ADDED", "cm-1".to_owned()), ("DELETED", "cm-1".to_owned())]
    );
}
