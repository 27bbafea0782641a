//! The garbage collector over the endpoints' router and an in-memory store (issue 17 items 3
//! and 6): background deletion of dependents whose owners are gone (uid-checked), orphaning,
//! foreground deletion with `blockOwnerDeletion`, chains and cycles, custom resources, dry
//! runs, and a collector cut off mid-way and restarted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::StreamExt;
use futures::stream::BoxStream;
use listwatch_controllers::gc::{GarbageCollector, Kinds};
use listwatch_endpoints::{
    Api, Config, GracefulDeletion, Installer, KindSpec, NameValidation, Resource,
};
use listwatch_memstore::MemStore;
use listwatch_storage::Storage;
use listwatch_testkit::router::eventually;
use serde_json::{Value, json};
use tower::ServiceExt;

struct T {
    api: Api,
    r: Router,
    gc: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for T {
    fn drop(&mut self) {
        if let Some(gc) = self.gc.take() {
            gc.abort();
        }
    }
}

fn api() -> Api {
    let s: Arc<dyn Storage> = Arc::new(MemStore::new());
    api_over(s.clone(), s)
}

/// The API over `s`, with widgets served by `widgets` (the same store, possibly slower).
fn api_over(s: Arc<dyn Storage>, widgets: Arc<dyn Storage>) -> Api {
    Installer::new(Config::default())
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
        .resource(
            KindSpec::new("", "v1", "pods", "Pod").graceful_deletion(GracefulDeletion::Pod),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "nodes", "Node").namespaced(false),
            s.clone(),
        )
        .resource(
            KindSpec::new("apps", "v1", "deployments", "Deployment"),
            s.clone(),
        )
        .resource(
            KindSpec::new("example.com", "v1", "widgets", "Widget"),
            widgets,
        )
        .build()
}

/// The API with a running collector and namespace `ns1`.
async fn setup() -> T {
    setup_on(api()).await
}

async fn setup_on(api: Api) -> T {
    let r = api.router();
    let gc = tokio::spawn(GarbageCollector::new(&api).run());
    let t = T {
        api,
        r,
        gc: Some(gc),
    };
    let (s, _) = t
        .call(
            "POST",
            "/api/v1/namespaces",
            r#"{"metadata":{"name":"ns1"}}"#,
        )
        .await;
    assert_eq!(s, StatusCode::CREATED);
    t
}

const CM: &str = "/api/v1/namespaces/ns1/configmaps";
const PODS: &str = "/api/v1/namespaces/ns1/pods";
const DEPLOY: &str = "/apis/apps/v1/namespaces/ns1/deployments";
const WIDGETS: &str = "/apis/example.com/v1/namespaces/ns1/widgets";

impl T {
    async fn call(&self, method: &str, uri: &str, body: &str) -> (StatusCode, Value) {
        let ct = if method == "PATCH" {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        let resp = self
            .r
            .clone()
            .oneshot(
                Request::builder()
                    .method(method)
                    .uri(uri)
                    .header("content-type", ct)
                    .body(Body::from(body.to_owned()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn create(&self, collection: &str, obj: Value) -> Value {
        let (s, v) = self.call("POST", collection, &obj.to_string()).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    async fn exists(&self, url: &str) -> bool {
        match self.call("GET", url, "").await.0 {
            StatusCode::OK => true,
            StatusCode::NOT_FOUND => false,
            s => panic!("GET {url}: {s}"),
        }
    }

    async fn get(&self, url: &str) -> Value {
        let (s, v) = self.call("GET", url, "").await;
        assert_eq!(s, StatusCode::OK, "{url}: {v}");
        v
    }
}

/// An owner reference to `owner` (as created), blocking or not.
fn owner_ref(owner: &Value, block: bool) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": block,
    })
}

fn owned(name: &str, refs: &[Value]) -> Value {
    json!({"metadata": {"name": name, "ownerReferences": refs}})
}

fn deployment(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"replicas": 1}})
}

/// Waits until `url` is gone (404).
async fn gone(t: &T, url: &str) {
    eventually(&format!("{url} collected"), || async move {
        !t.exists(url).await
    })
    .await;
}

/// Waits until the collector has acted on an event given after everything before this call:
/// a sentinel owner is deleted and its dependent must go. Afterwards, what the collector was
/// going to do with earlier configmap events is done (it handles one resource's events in
/// order), so "still there" means "kept".
async fn barrier(t: &T, tag: &str) {
    let owner = t
        .create(CM, json!({"metadata": {"name": format!("sentinel-{tag}")}}))
        .await;
    let dep = format!("sentinel-dep-{tag}");
    t.create(CM, owned(&dep, &[owner_ref(&owner, false)])).await;
    let (s, _) = t.call("DELETE", &format!("{CM}/sentinel-{tag}"), "").await;
    assert_eq!(s, StatusCode::OK);
    gone(t, &format!("{CM}/{dep}")).await;
}

/// Before (no collector): deleting a Deployment left everything it owned. Now a background
/// delete (the default) removes its dependents of every kind — built-in, custom — whose
/// owners are all gone; a dependent with another live owner only loses the reference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_deletion_collects_dependents_of_every_kind() {
    let t = setup().await;
    let d = t.create(DEPLOY, deployment("web")).await;
    let keeper = t.create(CM, json!({"metadata": {"name": "keeper"}})).await;
    let r = owner_ref(&d, true);
    t.create(CM, owned("cm-a", std::slice::from_ref(&r))).await;
    t.create(PODS, owned("pod-a", std::slice::from_ref(&r)))
        .await;
    t.create(WIDGETS, owned("w-a", std::slice::from_ref(&r)))
        .await;
    t.create(CM, owned("shared", &[r.clone(), owner_ref(&keeper, false)]))
        .await;
    let (s, _) = t.call("DELETE", &format!("{DEPLOY}/web"), "").await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{CM}/cm-a")).await;
    gone(&t, &format!("{PODS}/pod-a")).await;
    gone(&t, &format!("{WIDGETS}/w-a")).await;
    eventually("the reference to the deleted owner removed", || async {
        let v = t.get(&format!("{CM}/shared")).await;
        v["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|a| a.len() == 1 && a[0]["name"] == "keeper")
    })
    .await;
}

/// uid-checked: an owner of the right name but another uid is absent (the dependent goes),
/// and an owner recreated under the same name does not keep its predecessor's dependents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_with_the_same_name_and_another_uid_counts_as_absent() {
    let t = setup().await;
    let d = t.create(DEPLOY, deployment("web")).await;
    let mut wrong = owner_ref(&d, false);
    wrong["uid"] = json!("00000000-0000-0000-0000-000000000000");
    t.create(CM, owned("stale", &[wrong])).await;
    t.create(CM, owned("fresh", &[owner_ref(&d, false)])).await;
    gone(&t, &format!("{CM}/stale")).await;
    barrier(&t, "uid").await;
    assert!(
        t.exists(&format!("{CM}/fresh")).await,
        "a solid owner keeps it"
    );

    // Recreated: a dependent of the first one goes although a Deployment "again" exists
    // again (another uid).
    let first = t.create(DEPLOY, deployment("again")).await;
    let (s, _) = t.call("DELETE", &format!("{DEPLOY}/again"), "").await;
    assert_eq!(s, StatusCode::OK);
    let second = t.create(DEPLOY, deployment("again")).await;
    assert_ne!(second["metadata"]["uid"], first["metadata"]["uid"]);
    t.create(CM, owned("of-the-first", &[owner_ref(&first, false)]))
        .await;
    t.create(CM, owned("of-the-second", &[owner_ref(&second, false)]))
        .await;
    gone(&t, &format!("{CM}/of-the-first")).await;
    barrier(&t, "recreated").await;
    assert!(t.exists(&format!("{CM}/of-the-second")).await);
}

/// Orphan: the owner is held by the `orphan` finalizer until every dependent has lost its
/// reference to it (other references stay), then goes; the dependents stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_deletion_removes_the_references_then_the_owner() {
    let t = setup().await;
    let d = t.create(DEPLOY, deployment("web")).await;
    let other = t.create(CM, json!({"metadata": {"name": "other"}})).await;
    for i in 0..20 {
        t.create(CM, owned(&format!("cm-{i}"), &[owner_ref(&d, true)]))
            .await;
    }
    t.create(
        PODS,
        owned("pod", &[owner_ref(&d, true), owner_ref(&other, false)]),
    )
    .await;
    let (s, v) = t
        .call(
            "DELETE",
            &format!("{DEPLOY}/web"),
            r#"{"propagationPolicy":"Orphan"}"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["metadata"]["finalizers"], json!(["orphan"]));
    gone(&t, &format!("{DEPLOY}/web")).await;
    for i in 0..20 {
        let v = t.get(&format!("{CM}/cm-{i}")).await;
        assert!(v["metadata"].get("ownerReferences").is_none(), "{v}");
    }
    let pod = t.get(&format!("{PODS}/pod")).await;
    assert_eq!(
        pod["metadata"]["ownerReferences"],
        json!([owner_ref(&other, false)])
    );
    // The deprecated orphanDependents=true does the same.
    let d = t.create(DEPLOY, deployment("old")).await;
    t.create(CM, owned("dep-old", &[owner_ref(&d, false)]))
        .await;
    let (s, _) = t
        .call("DELETE", &format!("{DEPLOY}/old?orphanDependents=true"), "")
        .await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{DEPLOY}/old")).await;
    assert!(t.exists(&format!("{CM}/dep-old")).await);
}

/// Foreground: the owner stays (`foregroundDeletion`) while a dependent with
/// `blockOwnerDeletion` exists; non-blocking dependents are deleted too but do not hold it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_deletion_waits_for_blocking_dependents_only() {
    let t = setup().await;
    let d = t.create(DEPLOY, deployment("web")).await;
    // Both held by a finalizer of their own, so they stay (marked) after the collector's
    // DELETE: the blocking one holds the owner, the other does not.
    for (name, block) in [("blocking", true), ("loose", false)] {
        t.create(
            CM,
            json!({"metadata": {"name": name, "finalizers": ["example.com/hold"],
                "ownerReferences": [owner_ref(&d, block)]}}),
        )
        .await;
    }
    t.create(CM, owned("plain", &[owner_ref(&d, true)])).await;
    let (s, v) = t
        .call(
            "DELETE",
            &format!("{DEPLOY}/web"),
            r#"{"propagationPolicy":"Foreground"}"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    gone(&t, &format!("{CM}/plain")).await;
    for name in ["blocking", "loose"] {
        let t = &t;
        eventually(&format!("{name} marked for deletion"), || async move {
            t.get(&format!("{CM}/{name}")).await["metadata"]["deletionTimestamp"].is_string()
        })
        .await;
    }
    barrier(&t, "fg").await;
    let owner = t.get(&format!("{DEPLOY}/web")).await;
    assert_eq!(
        owner["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );

    // The blocking dependent released: it goes, then the owner.
    let (s, _) = t
        .call(
            "PATCH",
            &format!("{CM}/blocking"),
            r#"{"metadata":{"finalizers":null}}"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{CM}/blocking")).await;
    gone(&t, &format!("{DEPLOY}/web")).await;
    assert!(
        t.exists(&format!("{CM}/loose")).await,
        "held by its own finalizer"
    );
}

/// A foreground deletion goes down a chain (owner → middle → leaf, all blocking): the
/// middle is deleted in the foreground since it has dependents, and everything goes
/// bottom-up. A cycle of blocking references (a ↔ b) does not hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_chains_unwind_and_cycles_do_not_hang() {
    let t = setup().await;
    let d = t.create(DEPLOY, deployment("top")).await;
    let mid = t
        .create(WIDGETS, owned("mid", &[owner_ref(&d, true)]))
        .await;
    let leaf = t
        .create(PODS, owned("leaf", &[owner_ref(&mid, true)]))
        .await;
    t.create(CM, owned("leaf-cm", &[owner_ref(&leaf, true)]))
        .await;
    let (s, _) = t
        .call(
            "DELETE",
            &format!("{DEPLOY}/top?propagationPolicy=Foreground"),
            "",
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{DEPLOY}/top")).await;
    for url in [
        format!("{WIDGETS}/mid"),
        format!("{PODS}/leaf"),
        format!("{CM}/leaf-cm"),
    ] {
        assert!(!t.exists(&url).await, "{url} outlived its owner");
    }

    let a = t.create(CM, json!({"metadata": {"name": "a"}})).await;
    let b = t.create(CM, owned("b", &[owner_ref(&a, true)])).await;
    let (s, v) = t
        .call(
            "PATCH",
            &format!("{CM}/a"),
            &json!({"metadata": {"ownerReferences": [owner_ref(&b, true)]}}).to_string(),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = t
        .call(
            "DELETE",
            &format!("{CM}/a?propagationPolicy=Foreground"),
            "",
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{CM}/a")).await;
    gone(&t, &format!("{CM}/b")).await;
}

/// A dry-run DELETE adds no finalizer and deletes nothing: the collector has nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_deletes_start_no_collection() {
    let t = setup().await;
    let d = t.create(DEPLOY, deployment("web")).await;
    t.create(CM, owned("dep", &[owner_ref(&d, true)])).await;
    for policy in ["Foreground", "Orphan", "Background"] {
        let (s, v) = t
            .call(
                "DELETE",
                &format!("{DEPLOY}/web?dryRun=All&propagationPolicy={policy}"),
                "",
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    barrier(&t, "dry").await;
    let owner = t.get(&format!("{DEPLOY}/web")).await;
    assert!(owner["metadata"].get("finalizers").is_none(), "{owner}");
    assert!(owner["metadata"].get("deletionTimestamp").is_none());
    let dep = t.get(&format!("{CM}/dep")).await;
    assert_eq!(
        dep["metadata"]["ownerReferences"][0]["uid"],
        d["metadata"]["uid"]
    );
}

/// References the collector cannot act on: a kind no resource serves (retried, the object
/// stays), and a cluster-scoped object naming a namespaced owner (left alone, as upstream).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kinds_and_invalid_scopes_leave_the_object() {
    let t = setup().await;
    t.create(
        CM,
        owned(
            "unknown",
            &[json!({"apiVersion": "nowhere.io/v1", "kind": "Ghost", "name": "g", "uid": "u-g"})],
        ),
    )
    .await;
    t.create(
        "/api/v1/nodes",
        owned(
            "n1",
            &[json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u-c"})],
        ),
    )
    .await;
    barrier(&t, "unknown").await;
    assert!(t.exists(&format!("{CM}/unknown")).await);
    assert!(t.exists("/api/v1/nodes/n1").await);
}

/// A collector stopped at any point (a lost leader election drops its future) and started
/// again finishes the job: every step is conditional and redone safely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_cut_off_and_restarted_finishes_the_job() {
    let mut t = setup().await;
    let d = t.create(DEPLOY, deployment("web")).await;
    for i in 0..50 {
        t.create(CM, owned(&format!("cm-{i}"), &[owner_ref(&d, true)]))
            .await;
    }
    let (s, _) = t
        .call(
            "DELETE",
            &format!("{DEPLOY}/web?propagationPolicy=Foreground"),
            "",
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    // Cut it off as soon as it has started working on the dependents.
    eventually("some dependents collected", || async {
        let (_, l) = t.call("GET", CM, "").await;
        l["items"].as_array().is_some_and(|a| a.len() < 50)
    })
    .await;
    if let Some(gc) = t.gc.take() {
        gc.abort();
        let _ = gc.await;
    }
    t.gc = Some(tokio::spawn(GarbageCollector::new(&t.api).run()));
    gone(&t, &format!("{DEPLOY}/web")).await;
    let (_, l) = t.call("GET", CM, "").await;
    assert_eq!(l["items"].as_array().map(Vec::len), Some(0), "{l}");
}

/// A store whose watch events arrive late: the collector's informer of a resource served
/// by it lags behind the others.
struct SlowWatch(MemStore, Duration);

#[async_trait::async_trait]
impl Storage for SlowWatch {
    async fn create(
        &self,
        key: &listwatch_storage::Key,
        obj: listwatch_api::Object,
        ttl: Option<Duration>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.0.create(key, obj, ttl).await
    }
    async fn get(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::GetOptions,
    ) -> listwatch_storage::Result<Option<listwatch_api::Object>> {
        self.0.get(key, opts).await
    }
    async fn list(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::ObjectList> {
        self.0.list(key, opts).await
    }
    async fn watch(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::WatchStream> {
        use futures::StreamExt;
        let delay = self.1;
        let events = self.0.watch(key, opts).await?;
        Ok(Box::pin(events.then(move |e| async move {
            tokio::time::sleep(delay).await;
            e
        })))
    }
    async fn guaranteed_update(
        &self,
        key: &listwatch_storage::Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        ignore_not_found: bool,
        update: &mut listwatch_storage::UpdateFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.0
            .guaranteed_update(key, preconditions, ignore_not_found, update, suggestion)
            .await
    }
    async fn delete(
        &self,
        key: &listwatch_storage::Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        validate: &listwatch_storage::ValidateDeleteFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.0
            .delete(key, preconditions, validate, suggestion)
            .await
    }
    async fn stats(
        &self,
        key: &listwatch_storage::Key,
    ) -> listwatch_storage::Result<listwatch_storage::Stats> {
        self.0.stats(key).await
    }
    async fn request_watch_progress(&self) -> listwatch_storage::Result<()> {
        self.0.request_watch_progress().await
    }
    async fn current_resource_version(&self) -> listwatch_storage::Result<u64> {
        self.0.current_resource_version().await
    }
    async fn readiness(&self) -> listwatch_storage::Result<()> {
        self.0.readiness().await
    }
    fn compacted_revision(&self) -> u64 {
        self.0.compacted_revision()
    }
}

/// Before: a dependent created just before its owner's orphaning DELETE, and not yet seen by
/// the collector's (lagging) informer, was found later with its owner gone and deleted. Now
/// the collector remembers owners it orphaned for: the late dependent loses its reference
/// and stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_seen_after_its_owner_was_orphaned_is_orphaned_too() {
    let store = MemStore::new();
    let widgets: Arc<dyn Storage> = Arc::new(SlowWatch(store.clone(), Duration::from_secs(2)));
    let t = setup_on(api_over(Arc::new(store), widgets)).await;
    let d = t.create(DEPLOY, deployment("web")).await;
    t.create(WIDGETS, owned("late", &[owner_ref(&d, true)]))
        .await;
    let (s, _) = t
        .call(
            "DELETE",
            &format!("{DEPLOY}/web?propagationPolicy=Orphan"),
            "",
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{DEPLOY}/web")).await;
    eventually("the late dependent orphaned", || async {
        t.get(&format!("{WIDGETS}/late")).await["metadata"]
            .get("ownerReferences")
            .is_none()
    })
    .await;
}

/// A store that, on the first DELETE of a widget named in `edit`, first rewrites that
/// widget's metadata as another writer would (between the collector's decision and its
/// DELETE), then deletes as asked.
struct EditBeforeDelete {
    inner: MemStore,
    edit: std::sync::Mutex<Option<(String, Value)>>,
    fired: std::sync::atomic::AtomicBool,
}

impl EditBeforeDelete {
    fn new(inner: MemStore) -> Self {
        Self {
            inner,
            edit: std::sync::Mutex::new(None),
            fired: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Arms the rewrite: `metadata_patch`'s members replace the widget's metadata's.
    fn arm(&self, name: &str, metadata_patch: Value) {
        *self.edit.lock().unwrap() = Some((name.to_owned(), metadata_patch));
    }
}

#[async_trait::async_trait]
impl Storage for EditBeforeDelete {
    async fn create(
        &self,
        key: &listwatch_storage::Key,
        obj: listwatch_api::Object,
        ttl: Option<Duration>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.inner.create(key, obj, ttl).await
    }
    async fn get(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::GetOptions,
    ) -> listwatch_storage::Result<Option<listwatch_api::Object>> {
        self.inner.get(key, opts).await
    }
    async fn list(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::ObjectList> {
        self.inner.list(key, opts).await
    }
    async fn watch(
        &self,
        key: &listwatch_storage::Key,
        opts: &listwatch_storage::ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::WatchStream> {
        self.inner.watch(key, opts).await
    }
    async fn guaranteed_update(
        &self,
        key: &listwatch_storage::Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        ignore_not_found: bool,
        update: &mut listwatch_storage::UpdateFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.inner
            .guaranteed_update(key, preconditions, ignore_not_found, update, suggestion)
            .await
    }
    async fn delete(
        &self,
        key: &listwatch_storage::Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        validate: &listwatch_storage::ValidateDeleteFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        let edit = {
            let mut e = self.edit.lock().unwrap();
            match e.as_ref() {
                Some((name, _)) if key.to_string().ends_with(&format!("/{name}")) => e.take(),
                _ => None,
            }
        };
        let armed = edit.is_some();
        if let Some((_, patch)) = edit {
            let mut rewrite = |cur: Option<&listwatch_api::Object>| {
                let cur = cur.expect("the widget to rewrite");
                let mut v = cur.to_value().unwrap();
                for (k, val) in patch.as_object().unwrap() {
                    v["metadata"][k] = val.clone();
                }
                Ok(
                    listwatch_api::Object::from_value(v, cur.selectable_fields())
                        .unwrap()
                        .into(),
                )
            };
            self.inner
                .guaranteed_update(key, None, false, &mut rewrite, None)
                .await?;
        }
        let done = self
            .inner
            .delete(key, preconditions, validate, suggestion)
            .await;
        if armed {
            // Set once the DELETE it raced with is answered.
            self.fired.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        done
    }
    async fn stats(
        &self,
        key: &listwatch_storage::Key,
    ) -> listwatch_storage::Result<listwatch_storage::Stats> {
        self.inner.stats(key).await
    }
    async fn request_watch_progress(&self) -> listwatch_storage::Result<()> {
        self.inner.request_watch_progress().await
    }
    async fn current_resource_version(&self) -> listwatch_storage::Result<u64> {
        self.inner.current_resource_version().await
    }
    async fn readiness(&self) -> listwatch_storage::Result<()> {
        self.inner.readiness().await
    }
    fn compacted_revision(&self) -> u64 {
        self.inner.compacted_revision()
    }
}

/// Before: the collector deleted with a uid precondition only, so a dependent re-parented
/// between its decision (every owner gone) and its DELETE was deleted with its new, live
/// owner (kubernetes#114603). Now, as upstream's `deleteObject` (kubernetes#132632), the
/// DELETE also names the resourceVersion decided on; the conflict re-reads the object, its
/// owner references changed, and the item is decided again: the new owner keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependent_re_parented_before_the_collectors_delete_is_kept() {
    let store = MemStore::new();
    let hook = Arc::new(EditBeforeDelete::new(store.clone()));
    let t = setup_on(api_over(Arc::new(store.clone()), hook.clone())).await;
    let adopter = t.create(DEPLOY, deployment("adopter")).await;
    hook.arm(
        "w",
        json!({"ownerReferences": [owner_ref(&adopter, false)]}),
    );
    let old = t.create(DEPLOY, deployment("old")).await;
    t.create(WIDGETS, owned("w", &[owner_ref(&old, false)]))
        .await;
    let (s, _) = t.call("DELETE", &format!("{DEPLOY}/old"), "").await;
    assert_eq!(s, StatusCode::OK);
    eventually("the collector's DELETE of the widget", || async {
        hook.fired.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    barrier(&t, "reparent").await;
    let (s, w) = t.call("GET", &format!("{WIDGETS}/w"), "").await;
    assert_eq!(
        s,
        StatusCode::OK,
        "the widget re-parented to a live owner was collected: {w}"
    );
    assert_eq!(
        w["metadata"]["ownerReferences"],
        json!([owner_ref(&adopter, false)])
    );
}

/// The other side of upstream's rule: a conflict caused by an update that left the owner
/// references alone does not starve the collector — the DELETE is sent again with the uid
/// precondition alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrelated_update_before_the_collectors_delete_does_not_save_the_dependent() {
    let store = MemStore::new();
    let hook = Arc::new(EditBeforeDelete::new(store.clone()));
    hook.arm("w", json!({"labels": {"touched": "yes"}}));
    let t = setup_on(api_over(Arc::new(store.clone()), hook.clone())).await;
    let old = t.create(DEPLOY, deployment("old")).await;
    t.create(WIDGETS, owned("w", &[owner_ref(&old, false)]))
        .await;
    let (s, _) = t.call("DELETE", &format!("{DEPLOY}/old"), "").await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{WIDGETS}/w")).await;
    assert!(hook.fired.load(std::sync::atomic::Ordering::SeqCst));
}

/// Item 8 of issue 29: the collector's writes are recorded under the manager upstream's
/// collector writes as (`kube-controller-manager`, the part of its User-Agent before the
/// first `/`), not `unknown`; a request without a User-Agent has no manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_collectors_writes_are_recorded_as_kube_controller_manager() {
    let t = setup().await;
    // A cycle of blocking references (a <-> b), b held by a finalizer of its own: deleting
    // a in the foreground, the collector unblocks b's reference to a (a PATCH of b) and
    // deletes b, which stays.
    let a = t.create(CM, json!({"metadata": {"name": "a"}})).await;
    let b = t
        .create(
            CM,
            json!({"metadata": {"name": "b", "finalizers": ["example.com/hold"],
                "ownerReferences": [owner_ref(&a, true)]}}),
        )
        .await;
    let (s, v) = t
        .call(
            "PATCH",
            &format!("{CM}/a"),
            &json!({"metadata": {"ownerReferences": [owner_ref(&b, true)]}}).to_string(),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = t
        .call(
            "DELETE",
            &format!("{CM}/a?propagationPolicy=Foreground"),
            "",
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let t = &t;
    eventually("b's reference unblocked", || async move {
        t.get(&format!("{CM}/b")).await["metadata"]["ownerReferences"][0]["blockOwnerDeletion"]
            == json!(false)
    })
    .await;
    let b = t.get(&format!("{CM}/b")).await;
    let entries = b["metadata"]["managedFields"].as_array().unwrap();
    let managers: Vec<Option<&str>> = entries.iter().map(|e| e["manager"].as_str()).collect();
    assert!(
        managers.contains(&Some("kube-controller-manager")),
        "{entries:?}"
    );
    // Issue 27: through the registry's store, still an Update (not an Apply), once.
    let gc: Vec<&Value> = entries
        .iter()
        .filter(|e| e["manager"] == json!("kube-controller-manager"))
        .collect();
    assert_eq!(gc.len(), 1, "{entries:?}");
    assert_eq!(gc[0]["operation"], json!("Update"), "{entries:?}");
    assert!(managers.contains(&None), "the test's create: {entries:?}");
    assert!(!managers.contains(&Some("unknown")), "{entries:?}");
}

/// The served kinds as a watch channel: each subscription yields the current set, then each
/// new one (what a live kind set feeds the collector).
struct LiveKinds(tokio::sync::watch::Receiver<Vec<Resource>>);

impl Kinds for LiveKinds {
    fn subscribe(&self) -> BoxStream<'static, Vec<Resource>> {
        let rx = self.0.clone();
        futures::stream::unfold((rx, true), |(mut rx, first)| async move {
            if !first {
                rx.changed().await.ok()?;
            }
            let set = rx.borrow_and_update().clone();
            Some((set, (rx, false)))
        })
        .boxed()
    }
}

/// Before (issue 27 step 4): the collector followed the kinds served when it started, so the
/// dependents of a kind served later (a custom resource added at run time) were never
/// collected. Now it follows the kind set as it changes: a kind added after start is
/// collected, what it held while unfollowed included (removal: the catalog's unit test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_served_after_start_is_collected() {
    let api = api();
    let all = api.resources().to_vec();
    let without_widgets: Vec<Resource> = all
        .iter()
        .filter(|r| r.info.plural != "widgets")
        .cloned()
        .collect();
    let (kinds, rx) = tokio::sync::watch::channel(without_widgets.clone());
    let gc = GarbageCollector::new(&api).with_kinds(Arc::new(LiveKinds(rx)));
    let t = T {
        r: api.router(),
        gc: Some(tokio::spawn(gc.run())),
        api,
    };
    t.create("/api/v1/namespaces", json!({"metadata": {"name": "ns1"}}))
        .await;

    // Not followed yet: a widget whose owner goes stays.
    let early = t.create(CM, json!({"metadata": {"name": "early"}})).await;
    t.create(WIDGETS, owned("w-early", &[owner_ref(&early, false)]))
        .await;
    let (s, _) = t.call("DELETE", &format!("{CM}/early"), "").await;
    assert_eq!(s, StatusCode::OK);
    barrier(&t, "before").await;
    assert!(
        t.exists(&format!("{WIDGETS}/w-early")).await,
        "widgets are not followed yet"
    );

    // Served from now on: the widget left behind goes, and so does one created later.
    kinds.send_replace(all);
    gone(&t, &format!("{WIDGETS}/w-early")).await;
    let late = t.create(CM, json!({"metadata": {"name": "late"}})).await;
    t.create(WIDGETS, owned("w-late", &[owner_ref(&late, false)]))
        .await;
    let (s, _) = t.call("DELETE", &format!("{CM}/late"), "").await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{WIDGETS}/w-late")).await;
}

/// Before (issue 27 step 4): `GarbageCollector::new` followed the kinds served when it
/// started (`FixedKinds`), so a kind served later with `Api::add_resource` (a custom resource
/// added at run time) was never collected. Now it follows the API's live kind set
/// (`ServedKinds`, the `KindSet`'s notification).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_added_to_the_api_after_start_is_collected() {
    let s: Arc<dyn Storage> = Arc::new(MemStore::new());
    let api = api_over(s.clone(), s.clone());
    api.remove_resource("example.com", "v1", "widgets").unwrap();
    let t = setup_on(api).await;
    barrier(&t, "before").await;
    t.api
        .add_resource(KindSpec::new("example.com", "v1", "widgets", "Widget"), s);
    let owner = t.create(CM, json!({"metadata": {"name": "owner"}})).await;
    t.create(WIDGETS, owned("w", &[owner_ref(&owner, false)]))
        .await;
    let (s, _) = t.call("DELETE", &format!("{CM}/owner"), "").await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{WIDGETS}/w")).await;
}

/// Issue 27: the collector's orphaning write goes through the registry's store (not the
/// router) and its field manager: it only removes a reference, so (as upstream, whose
/// managedFields drop a manager left owning nothing) the removed reference leaves its
/// creator's entry and no entry of `kube-controller-manager`, `unknown` or anyone else
/// appears. (A write of the collector that sets a field — unblocking a reference — is
/// recorded as an `Update` by `kube-controller-manager`:
/// `the_collectors_writes_are_recorded_as_kube_controller_manager`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaning_write_goes_through_the_field_manager() {
    let t = setup().await;
    let d = t.create(DEPLOY, deployment("orphaner")).await;
    let other = t.create(CM, json!({"metadata": {"name": "keeper"}})).await;
    let dep = t
        .create(
            CM,
            json!({"metadata": {"name": "orphaned", "labels": {"a": "b"},
                "ownerReferences": [owner_ref(&d, true), owner_ref(&other, false)]}}),
        )
        .await;
    let before = dep["metadata"]["managedFields"].as_array().unwrap().clone();
    assert_eq!(before.len(), 1, "the test's create: {before:?}");
    let d_uid = d["metadata"]["uid"].as_str().unwrap();
    let d_key = format!("k:{{\"uid\":\"{d_uid}\"}}");
    assert!(
        before[0]["fieldsV1"]["f:metadata"]["f:ownerReferences"]
            .get(&d_key)
            .is_some(),
        "{before:?}"
    );
    let (s, _) = t
        .call(
            "DELETE",
            &format!("{DEPLOY}/orphaner"),
            r#"{"propagationPolicy":"Orphan"}"#,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    gone(&t, &format!("{DEPLOY}/orphaner")).await;
    let dep = t.get(&format!("{CM}/orphaned")).await;
    assert_eq!(
        dep["metadata"]["ownerReferences"],
        json!([owner_ref(&other, false)]),
        "{dep}"
    );
    let entries = dep["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["manager"], before[0]["manager"], "{entries:?}");
    assert!(
        entries[0]["fieldsV1"]["f:metadata"]["f:ownerReferences"]
            .get(&d_key)
            .is_none(),
        "the removed reference is nobody's: {entries:?}"
    );
    assert!(
        !entries.iter().any(|e| e["manager"] == json!("unknown")),
        "{entries:?}"
    );
}
