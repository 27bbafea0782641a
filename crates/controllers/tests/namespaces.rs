//! The namespace controller (`listwatch_controllers::namespaces`) over the endpoints' router
//! and an in-memory store: a deleted namespace terminates and is emptied (finalizers and
//! grace periods holding it), creates racing its deletion leave no orphans, a scheduled
//! pod's grace period ends, and a kind served after start is emptied too. Moved from the
//! endpoints' lifecycle tests with the controller (issue 27 step 4).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use listwatch_controllers::gc::GarbageCollector;
use listwatch_controllers::namespaces::{ApiServer, Metrics, NamespaceController};
use listwatch_endpoints::{Api, Config, GracefulDeletion, Installer, KindSpec, NameValidation};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage};
use listwatch_testkit::router::{JSON, MERGE, call, create_namespace, eventually};
use serde_json::json;

/// A running task, aborted when dropped.
struct Running(tokio::task::JoinHandle<()>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The namespace controller of `api`, running until the result is dropped.
fn controller(api: &Api) -> Running {
    let c = NamespaceController::new(Arc::new(ApiServer(api.clone())), Metrics::default());
    Running(tokio::spawn(c.run()))
}

struct T {
    _api: Api,
    router: Router,
    store: MemStore,
    _controller: Running,
}

fn installer(s: &Arc<dyn Storage>) -> Installer {
    Installer::new(Config::default())
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label)
                .status_subresource(true),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "configmaps", "ConfigMap"),
            s.clone(),
        )
        .resource(
            KindSpec::new("", "v1", "pods", "Pod")
                .status_subresource(true)
                .graceful_deletion(GracefulDeletion::Pod)
                // As upstream's pod storage (`ReturnDeletedObject`).
                .return_deleted_object(true),
            s.clone(),
        )
}

fn widgets() -> KindSpec {
    KindSpec::new("example.com", "v1", "widgets", "Widget").status_subresource(true)
}

fn setup() -> T {
    let store = MemStore::new();
    let s: Arc<dyn Storage> = Arc::new(store.clone());
    let api = installer(&s).resource(widgets(), s).build();
    let router = api.router();
    let _controller = controller(&api);
    T {
        _api: api,
        router,
        store,
        _controller,
    }
}

const PODS: &str = "/api/v1/namespaces/ns1/pods";

async fn count(store: &MemStore, resource: &str, ns: &str) -> usize {
    let key = Key::collection(resource, Some(ns)).unwrap();
    store
        .list(&key, &ListOptions::recursive())
        .await
        .unwrap()
        .items
        .len()
}

/// Before: the DELETE removed the namespace and its objects inside the request, so there
/// was no Terminating phase, no 403 for creates, and finalizers of its objects were ignored.
#[tokio::test]
async fn a_deleted_namespace_terminates_and_the_controller_empties_it() {
    let t = setup();
    let r = &t.router;
    let (s, ns) = call(
        r,
        "POST",
        "/api/v1/namespaces",
        JSON,
        r#"{"metadata":{"name":"big"}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
    for i in 0..120 {
        let (s, _) = call(
            r,
            "POST",
            "/api/v1/namespaces/big/configmaps",
            JSON,
            &json!({"metadata":{"name":format!("cm-{i}")}}).to_string(),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    for i in 0..80 {
        let (s, _) = call(
            r,
            "POST",
            "/apis/example.com/v1/namespaces/big/widgets",
            JSON,
            &json!({"metadata":{"name":format!("w-{i}")}}).to_string(),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let (s, _) = call(
        r,
        "POST",
        "/api/v1/namespaces/big/configmaps",
        JSON,
        r#"{"metadata":{"name":"held","finalizers":["example.com/hold"]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);

    let (s, marked) = call(r, "DELETE", "/api/v1/namespaces/big", "", "").await;
    assert_eq!(s, StatusCode::OK, "{marked}");
    assert_eq!(marked["status"]["phase"], "Terminating");
    assert!(marked["metadata"]["deletionTimestamp"].is_string());

    // Creates in it are refused with upstream's message.
    let (s, e) = call(
        r,
        "POST",
        "/api/v1/namespaces/big/configmaps",
        JSON,
        r#"{"metadata":{"name":"late"}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{e}");
    assert_eq!(
        e["message"],
        "configmaps \"late\" is forbidden: unable to create new content in namespace big because it is being terminated"
    );
    assert_eq!(e["details"]["causes"][0]["reason"], "NamespaceTerminating");
    // Upstream's cause carries the short message (red-team finding F10 of issue 29).
    assert_eq!(
        e["details"]["causes"][0]["message"],
        "namespace big is being terminated"
    );
    assert_eq!(e["details"]["causes"][0]["field"], "metadata.namespace");

    // Everything but the held object goes; the held object holds the namespace.
    eventually("the namespace emptied but for the held object", || async {
        count(&t.store, "configmaps", "big").await == 1
            && count(&t.store, "widgets", "big").await == 0
    })
    .await;
    let (s, _) = call(r, "GET", "/api/v1/namespaces/big", "", "").await;
    assert_eq!(s, StatusCode::OK);
    let (_, held) = call(r, "GET", "/api/v1/namespaces/big/configmaps/held", "", "").await;
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");

    // Its finalizer removed, the object and then the namespace go.
    let (s, _) = call(
        r,
        "PATCH",
        "/api/v1/namespaces/big/configmaps/held",
        MERGE,
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    eventually("the namespace gone", || async {
        call(r, "GET", "/api/v1/namespaces/big", "", "").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    assert_eq!(count(&t.store, "configmaps", "big").await, 0);
}

/// A store whose creates wait before they write: a create checks its namespace, then the
/// namespace is deleted and emptied, then the create writes.
struct SlowCreates(MemStore, Duration);

#[async_trait::async_trait]
impl Storage for SlowCreates {
    async fn create(
        &self,
        key: &Key,
        obj: listwatch_api::Object,
        ttl: Option<Duration>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        tokio::time::sleep(self.1).await;
        self.0.create(key, obj, ttl).await
    }
    async fn get(
        &self,
        key: &Key,
        opts: &listwatch_storage::GetOptions,
    ) -> listwatch_storage::Result<Option<listwatch_api::Object>> {
        self.0.get(key, opts).await
    }
    async fn list(
        &self,
        key: &Key,
        opts: &ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::ObjectList> {
        self.0.list(key, opts).await
    }
    async fn watch(
        &self,
        key: &Key,
        opts: &ListOptions,
    ) -> listwatch_storage::Result<listwatch_storage::WatchStream> {
        self.0.watch(key, opts).await
    }
    async fn guaranteed_update(
        &self,
        key: &Key,
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
        key: &Key,
        preconditions: Option<&listwatch_storage::Preconditions>,
        validate: &listwatch_storage::ValidateDeleteFn<'_>,
        suggestion: Option<listwatch_api::Object>,
    ) -> listwatch_storage::Result<listwatch_api::Object> {
        self.0
            .delete(key, preconditions, validate, suggestion)
            .await
    }
    async fn stats(&self, key: &Key) -> listwatch_storage::Result<listwatch_storage::Stats> {
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

/// Before: a create that checked its namespace before the namespace's deletion and wrote
/// after it left an orphan (answered 201, object in no namespace). Now it removes what it
/// wrote and answers 403 or 404; many concurrent creates leave nothing either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_racing_a_namespace_delete_leave_no_orphans() {
    let store = MemStore::new();
    let plain: Arc<dyn Storage> = Arc::new(store.clone());
    let slow: Arc<dyn Storage> = Arc::new(SlowCreates(store.clone(), Duration::from_millis(300)));
    // No compute pool: its fair gate serves one client's requests in order, and these all
    // come from one client, so the namespace's DELETE would wait for the slow creates to
    // finish (each then rightly answering 201 before the namespace goes) and the race this
    // test needs — a create's write landing after the deletion — would never happen.
    let config = Config {
        request_workers: 0,
        ..Config::default()
    };
    let api = Installer::new(config)
        .resource(
            KindSpec::new("", "v1", "namespaces", "Namespace")
                .namespaced(false)
                .name_validation(NameValidation::Label),
            plain.clone(),
        )
        .resource(KindSpec::new("", "v1", "configmaps", "ConfigMap"), slow)
        .resource(KindSpec::new("", "v1", "secrets", "Secret"), plain)
        .build();
    let _controller = controller(&api);
    let r = api.router();
    for round in 0..3 {
        let ns = format!("race-{round}");
        let (s, _) = call(
            &r,
            "POST",
            "/api/v1/namespaces",
            JSON,
            &json!({"metadata":{"name":ns}}).to_string(),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
        // Slow creates: checked now, written after the namespace is gone.
        let mut slow = Vec::new();
        for i in 0..4 {
            let (r, ns) = (r.clone(), ns.clone());
            slow.push(tokio::spawn(async move {
                call(
                    &r,
                    "POST",
                    &format!("/api/v1/namespaces/{ns}/configmaps"),
                    JSON,
                    &json!({"metadata":{"name":format!("slow-{i}")}}).to_string(),
                )
                .await
                .0
            }));
        }
        // Fast creates in a loop until refused.
        let mut fast = Vec::new();
        for w in 0..2 {
            let (r, ns) = (r.clone(), ns.clone());
            fast.push(tokio::spawn(async move {
                let mut i = 0;
                loop {
                    let (s, _) = call(
                        &r,
                        "POST",
                        &format!("/api/v1/namespaces/{ns}/secrets"),
                        JSON,
                        &json!({"metadata":{"name":format!("s-{w}-{i}")}}).to_string(),
                    )
                    .await;
                    if s != StatusCode::CREATED {
                        return s;
                    }
                    i += 1;
                    // The in-memory store never makes a task wait: let the others run.
                    tokio::task::yield_now().await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        let (s, _) = call(&r, "DELETE", &format!("/api/v1/namespaces/{ns}"), "", "").await;
        assert_eq!(s, StatusCode::OK);
        eventually("the namespace gone", || async {
            call(&r, "GET", &format!("/api/v1/namespaces/{ns}"), "", "")
                .await
                .0
                == StatusCode::NOT_FOUND
        })
        .await;
        for h in slow.into_iter().chain(fast) {
            let s = h.await.unwrap();
            assert!(
                s == StatusCode::FORBIDDEN || s == StatusCode::NOT_FOUND,
                "a create in a deleted namespace answered {s}"
            );
        }
        assert_eq!(
            count(&store, "configmaps", &ns).await,
            0,
            "orphaned configmaps"
        );
        assert_eq!(count(&store, "secrets", &ns).await, 0, "orphaned secrets");
    }
}

/// Before: a scheduled pod in a deleted namespace was deleted gracefully and, with no kubelet
/// to end its grace period, held the namespace forever. Now the namespace controller deletes
/// it with grace 0 once its grace period is over, and the namespace goes.
#[tokio::test]
async fn a_namespace_with_a_scheduled_pod_goes_once_the_grace_period_is_over() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    let pod =
        json!({"metadata":{"name":"p"},"spec":{"nodeName":"n1","terminationGracePeriodSeconds":1}});
    assert_eq!(
        call(r, "POST", PODS, JSON, &pod.to_string()).await.0,
        StatusCode::CREATED
    );
    let (s, _) = call(r, "DELETE", "/api/v1/namespaces/ns1", "", "").await;
    assert_eq!(s, StatusCode::OK);
    eventually("the pod marked with its grace period", || async {
        let (_, p) = call(r, "GET", &format!("{PODS}/p"), "", "").await;
        p["metadata"]["deletionGracePeriodSeconds"] == 1
    })
    .await;
    eventually("the namespace gone", || async {
        call(r, "GET", "/api/v1/namespaces/ns1", "", "").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    assert_eq!(count(&t.store, "pods", "ns1").await, 0);
}

/// Issue 27 step 4: a kind served after start (`Api::add_resource`, as a custom resource
/// definition does) is followed by the garbage collector (its dependents collected: before,
/// the collector followed the kinds served at its start) and emptied by the namespace
/// controller when its namespace is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_added_after_start_is_collected_and_emptied_by_namespace_deletion() {
    let store = MemStore::new();
    let s: Arc<dyn Storage> = Arc::new(store.clone());
    let api = installer(&s).build();
    let r = api.router();
    let _controller = controller(&api);
    let _gc = Running(tokio::spawn(GarbageCollector::new(&api).run()));
    create_namespace(&r, "ns1").await;
    let cm = "/api/v1/namespaces/ns1/configmaps";
    let w = "/apis/example.com/v1/namespaces/ns1/widgets";
    assert_eq!(call(&r, "GET", w, "", "").await.0, StatusCode::NOT_FOUND);

    api.add_resource(widgets(), s);
    let (st, owner) = call(&r, "POST", cm, JSON, r#"{"metadata":{"name":"owner"}}"#).await;
    assert_eq!(st, StatusCode::CREATED, "{owner}");
    let dependent = json!({"metadata": {"name": "dependent", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner["metadata"]["uid"]}]}});
    let (st, v) = call(&r, "POST", w, JSON, &dependent.to_string()).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    for i in 0..30 {
        let (st, v) = call(
            &r,
            "POST",
            w,
            JSON,
            &json!({"metadata": {"name": format!("w-{i}")}}).to_string(),
        )
        .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    let (st, _) = call(&r, "DELETE", &format!("{cm}/owner"), "", "").await;
    assert_eq!(st, StatusCode::OK);
    eventually("the widget whose owner went collected", || async {
        call(&r, "GET", &format!("{w}/dependent"), "", "").await.0 == StatusCode::NOT_FOUND
    })
    .await;

    let (st, _) = call(&r, "DELETE", "/api/v1/namespaces/ns1", "", "").await;
    assert_eq!(st, StatusCode::OK);
    eventually("the namespace gone", || async {
        call(&r, "GET", "/api/v1/namespaces/ns1", "", "").await.0 == StatusCode::NOT_FOUND
    })
    .await;
    assert_eq!(count(&store, "widgets", "ns1").await, 0);
}
