//! Deletion lifecycle through the router (issue 17 items 3 and 4): finalizers hold a deleted
//! object, the update removing the last one removes it, preconditions and dry runs, pods'
//! grace periods, and the garbage collector's finalizers from propagation policies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use futures::StreamExt;
use listwatch_endpoints::{Api, Config, GracefulDeletion, Installer, KindSpec, NameValidation};
use listwatch_memstore::MemStore;
use listwatch_storage::{Key, ListOptions, Storage, WatchEvent};
use listwatch_testkit::router::{JSON, MERGE, call, create_namespace};
use serde_json::{Value, json};

struct T {
    #[allow(dead_code)]
    api: Api,
    router: Router,
    store: MemStore,
}

fn setup() -> T {
    let store = MemStore::new();
    let s: Arc<dyn Storage> = Arc::new(store.clone());
    let api = Installer::new(Config::default())
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
        .resource(
            KindSpec::new("example.com", "v1", "widgets", "Widget").status_subresource(true),
            s,
        )
        .build();
    let router = api.router();
    T { api, router, store }
}

const CM: &str = "/api/v1/namespaces/ns1/configmaps";

async fn create_held(r: &Router, name: &str) -> Value {
    let (s, v) = call(
        r,
        "POST",
        CM,
        JSON,
        &json!({"metadata":{"name":name,"finalizers":["example.com/hold"]},"data":{"k":"v"}})
            .to_string(),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    v
}

/// Before: the DELETE removed the object at once (the GET after it was 404).
#[tokio::test]
async fn a_finalizer_holds_a_deleted_object_until_the_update_that_removes_it() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    let ckey = Key::collection("configmaps", Some("ns1")).unwrap();
    let rv = t.store.current_resource_version().await.unwrap();
    let mut watch = t
        .store
        .watch(&ckey, &ListOptions::recursive().at(Some(rv), None))
        .await
        .unwrap();
    let created = create_held(r, "held").await;
    let url = format!("{CM}/held");

    let (s, marked) = call(r, "DELETE", &url, "", "").await;
    assert_eq!(s, StatusCode::OK, "{marked}");
    let ts = marked["metadata"]["deletionTimestamp"].clone();
    assert!(ts.is_string(), "{marked}");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(
        marked["metadata"]["finalizers"],
        json!(["example.com/hold"])
    );
    let (s, got) = call(r, "GET", &url, "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(got["metadata"]["deletionTimestamp"], ts);

    // A second DELETE changes nothing.
    let (s, again) = call(r, "DELETE", &url, "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        again["metadata"]["resourceVersion"],
        got["metadata"]["resourceVersion"]
    );

    // No new finalizer while deleting (422), and the timestamp cannot be unset.
    let (s, e) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"finalizers":["example.com/hold","example.com/more"]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("no new finalizers can be added if the object is being deleted"),
        "{e}"
    );
    let (s, kept) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"deletionTimestamp":null},"data":{"k":"w"}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{kept}");
    assert_eq!(kept["metadata"]["deletionTimestamp"], ts);

    // Removing the last finalizer removes the object; the answer is the updated object.
    let (s, last) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{last}");
    assert!(last["metadata"].get("finalizers").is_none(), "{last}");
    let (s, _) = call(r, "GET", &url, "", "").await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Watchers saw ADDED, MODIFIED (marked), MODIFIED (data), DELETED.
    let mut kinds = Vec::new();
    while kinds.len() < 4 {
        let ev = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("watch event")
            .expect("watch open");
        match ev {
            WatchEvent::Added(o) => kinds.push(("ADDED", o.to_value().unwrap())),
            WatchEvent::Modified { object, .. } => {
                kinds.push(("MODIFIED", object.to_value().unwrap()));
            }
            WatchEvent::Deleted(o) => kinds.push(("DELETED", o.to_value().unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e}"),
        }
    }
    let names: Vec<&str> = kinds.iter().map(|(k, _)| *k).collect();
    assert_eq!(names, ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]);
    assert_eq!(kinds[1].1["metadata"]["deletionTimestamp"], ts);
    assert_eq!(kinds[0].1["metadata"]["uid"], created["metadata"]["uid"]);
}

/// Before: a PUT that emptied the finalizers of a deleting object stored it (it stayed).
#[tokio::test]
async fn a_put_removing_the_last_finalizer_removes_and_one_keeping_some_does_not() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    let (s, _) = call(
        r,
        "POST",
        CM,
        JSON,
        r#"{"metadata":{"name":"two","finalizers":["a.io/x","b.io/y"]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let url = format!("{CM}/two");
    call(r, "DELETE", &url, "", "").await;
    let (_, cur) = call(r, "GET", &url, "", "").await;
    let mut one = cur.clone();
    one["metadata"]["finalizers"] = json!(["b.io/y"]);
    let (s, v) = call(r, "PUT", &url, JSON, &one.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::OK);
    // A stale resourceVersion is still a conflict, not a removal.
    let mut stale = cur.clone();
    stale["metadata"]["finalizers"] = json!([]);
    assert_eq!(
        call(r, "PUT", &url, JSON, &stale.to_string()).await.0,
        StatusCode::CONFLICT
    );
    let mut none = v.clone();
    none["metadata"]["finalizers"] = json!([]);
    let (s, v) = call(r, "PUT", &url, JSON, &none.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn delete_preconditions_are_409_and_dry_runs_write_nothing() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    let c = create_held(r, "p").await;
    let url = format!("{CM}/p");
    for pre in [json!({"uid":"not-it"}), json!({"resourceVersion":"1"})] {
        let body = json!({"kind":"DeleteOptions","apiVersion":"v1","preconditions":pre});
        let (s, e) = call(r, "DELETE", &url, JSON, &body.to_string()).await;
        assert_eq!(s, StatusCode::CONFLICT, "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("Precondition failed"),
            "{e}"
        );
    }
    let (_, cur) = call(r, "GET", &url, "", "").await;
    assert!(cur["metadata"].get("deletionTimestamp").is_none());

    // Dry run of a held object: the answer is marked, storage is not.
    let (s, v) = call(r, "DELETE", &format!("{url}?dryRun=All"), "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["metadata"]["deletionTimestamp"].is_string(), "{v}");
    let (_, cur) = call(r, "GET", &url, "", "").await;
    assert!(cur["metadata"].get("deletionTimestamp").is_none());
    assert_eq!(
        cur["metadata"]["resourceVersion"],
        c["metadata"]["resourceVersion"]
    );

    // Right preconditions: marked.
    let body = json!({"preconditions":{"uid":c["metadata"]["uid"],"resourceVersion":c["metadata"]["resourceVersion"]}});
    let (s, v) = call(r, "DELETE", &url, JSON, &body.to_string()).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["metadata"]["deletionTimestamp"].is_string());

    // A dry-run update removing the last finalizer removes nothing.
    let (s, _) = call(
        r,
        "PATCH",
        &format!("{url}?dryRun=All"),
        MERGE,
        r#"{"metadata":{"finalizers":[]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::OK);

    // Objects without finalizers go at once, as before.
    let (s, _) = call(r, "POST", CM, JSON, r#"{"metadata":{"name":"free"}}"#).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = call(r, "DELETE", &format!("{CM}/free?dryRun=All"), "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        call(r, "GET", &format!("{CM}/free"), "", "").await.0,
        StatusCode::OK
    );
    let (s, _) = call(r, "DELETE", &format!("{CM}/free"), "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        call(r, "GET", &format!("{CM}/free"), "", "").await.0,
        StatusCode::NOT_FOUND
    );
}

/// A collection delete marks held objects and removes the others.
#[tokio::test]
async fn delete_collection_honours_finalizers() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    create_held(r, "h").await;
    call(r, "POST", CM, JSON, r#"{"metadata":{"name":"f"}}"#).await;
    let (s, list) = call(r, "DELETE", CM, "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let (_, left) = call(r, "GET", CM, "", "").await;
    let items = left["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["metadata"]["name"], "h");
    assert!(items[0]["metadata"]["deletionTimestamp"].is_string());
}

const PODS: &str = "/api/v1/namespaces/ns1/pods";

/// Collects the next `n` object events of `watch` as (type, object).
async fn events(
    watch: &mut listwatch_storage::WatchStream,
    n: usize,
) -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    while out.len() < n {
        let ev = tokio::time::timeout(Duration::from_secs(5), watch.next())
            .await
            .expect("watch event")
            .expect("watch open");
        match ev {
            WatchEvent::Added(o) => out.push(("ADDED", o.to_value().unwrap())),
            WatchEvent::Modified { object, .. } => {
                out.push(("MODIFIED", object.to_value().unwrap()));
            }
            WatchEvent::Deleted(o) => out.push(("DELETED", o.to_value().unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e}"),
        }
    }
    out
}

async fn watch_from_now(t: &T, resource: &str) -> listwatch_storage::WatchStream {
    let rv = t.store.current_resource_version().await.unwrap();
    t.store
        .watch(
            &Key::collection(resource, Some("ns1")).unwrap(),
            &ListOptions::recursive().at(Some(rv), None),
        )
        .await
        .unwrap()
}

/// Before: `gracePeriodSeconds` was ignored and every pod went at once. Now a scheduled pod
/// stays for its grace period until a DELETE of grace 0 (a kubelet's, upstream), a longer
/// grace never lengthens it, a shorter one shortens it, and an unscheduled pod goes at once
/// (written with its deletionTimestamp first: MODIFIED then DELETED, as upstream).
#[tokio::test]
async fn pods_are_deleted_gracefully_as_upstream() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    let mut watch = watch_from_now(&t, "pods").await;
    let pod = json!({"metadata":{"name":"web"},"spec":{"nodeName":"node-1","terminationGracePeriodSeconds":45,"containers":[{"name":"c","image":"nginx"}]},"status":{"phase":"Running"}});
    let (s, created) = call(r, "POST", PODS, JSON, &pod.to_string()).await;
    assert_eq!(s, StatusCode::CREATED, "{created}");
    let url = format!("{PODS}/web");
    let before = listwatch_endpoints::clock::now_unix();
    let (s, marked) = call(r, "DELETE", &url, "", "").await;
    assert_eq!(s, StatusCode::OK, "{marked}");
    assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 45);
    let ts = listwatch_endpoints::clock::parse_rfc3339(
        marked["metadata"]["deletionTimestamp"].as_str().unwrap(),
    )
    .unwrap();
    let after = listwatch_endpoints::clock::now_unix();
    assert!(ts >= before + 45 && ts <= after + 45, "{marked}");
    assert_eq!(marked["metadata"]["generation"], 2);
    // Still there; an update without finalizers does not remove it (grace pending).
    let (s, _) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"labels":{"a":"b"}}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::OK);
    // A longer grace (query) changes nothing; a shorter one (body) moves the deadline.
    let (s, same) = call(
        r,
        "DELETE",
        &format!("{url}?gracePeriodSeconds=100"),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(same["metadata"]["deletionGracePeriodSeconds"], 45);
    assert_eq!(
        same["metadata"]["deletionTimestamp"],
        marked["metadata"]["deletionTimestamp"]
    );
    let (s, shorter) = call(r, "DELETE", &url, JSON, r#"{"gracePeriodSeconds":5}"#).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(shorter["metadata"]["deletionGracePeriodSeconds"], 5);
    assert_eq!(
        shorter["metadata"]["deletionTimestamp"],
        listwatch_endpoints::clock::format_rfc3339(ts - 40)
    );
    // Grace 0 (what a kubelet sends when the containers are gone): removed.
    let (s, gone) = call(r, "DELETE", &url, JSON, r#"{"gracePeriodSeconds":0}"#).await;
    assert_eq!(s, StatusCode::OK, "{gone}");
    assert_eq!(gone["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::NOT_FOUND);
    let seen = events(&mut watch, 6).await;
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| *k).collect();
    assert_eq!(
        kinds,
        [
            "ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"
        ]
    );

    // Unscheduled: written with grace 0, then removed, whatever grace was asked.
    let (s, _) = call(
        r,
        "POST",
        PODS,
        JSON,
        r#"{"metadata":{"name":"pending"},"spec":{"terminationGracePeriodSeconds":45}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, v) = call(
        r,
        "DELETE",
        &format!("{PODS}/pending?gracePeriodSeconds=60"),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(
        call(r, "GET", &format!("{PODS}/pending"), "", "").await.0,
        StatusCode::NOT_FOUND
    );
    let seen = events(&mut watch, 3).await;
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    assert!(seen[1].1["metadata"]["deletionTimestamp"].is_string());

    // Other resources ignore a grace period.
    let (s, _) = call(r, "POST", CM, JSON, r#"{"metadata":{"name":"c"}}"#).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, _) = call(
        r,
        "DELETE",
        &format!("{CM}/c?gracePeriodSeconds=30"),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        call(r, "GET", &format!("{CM}/c"), "", "").await.0,
        StatusCode::NOT_FOUND
    );
}

/// Before: removing the last finalizer of a deleting pod removed it even in its grace
/// period. Now (upstream's `shouldDeleteDuringUpdate`) only once the grace is 0.
#[tokio::test]
async fn a_pod_in_its_grace_period_outlives_its_last_finalizer() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    let pod =
        json!({"metadata":{"name":"f","finalizers":["example.com/hold"]},"spec":{"nodeName":"n"}});
    assert_eq!(
        call(r, "POST", PODS, JSON, &pod.to_string()).await.0,
        StatusCode::CREATED
    );
    let url = format!("{PODS}/f");
    let (_, v) = call(r, "DELETE", &url, "", "").await;
    assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 30);
    let (s, _) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, still) = call(r, "GET", &url, "", "").await;
    assert_eq!(s, StatusCode::OK, "removed during its grace period");
    assert!(still["metadata"].get("finalizers").is_none());
    let (s, _) = call(r, "DELETE", &format!("{url}?gracePeriodSeconds=0"), "", "").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::NOT_FOUND);

    // With a finalizer left, grace 0 marks it (deletionGracePeriodSeconds 0); then the
    // update removing the finalizer removes it.
    assert_eq!(
        call(r, "POST", PODS, JSON, &pod.to_string()).await.0,
        StatusCode::CREATED
    );
    let (_, v) = call(r, "DELETE", &format!("{url}?gracePeriodSeconds=0"), "", "").await;
    assert_eq!(v["metadata"]["deletionGracePeriodSeconds"], 0);
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::OK);
    let (s, _) = call(
        r,
        "PATCH",
        &url,
        MERGE,
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::NOT_FOUND);
}

/// Before: `propagationPolicy` and `orphanDependents` were validated and ignored. Now they set
/// the garbage collector's finalizers as upstream (the object is then held until the
/// collector removes them), in the query or the body, on single and collection deletes;
/// dry runs add nothing; conflicting or unknown policies are 422.
#[tokio::test]
async fn propagation_policies_set_the_garbage_collector_finalizers() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    for name in ["o", "f", "b", "d", "x"] {
        let (s, _) = call(
            r,
            "POST",
            CM,
            JSON,
            &json!({"metadata":{"name":name}}).to_string(),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let get = |name: &str| {
        let url = format!("{CM}/{name}");
        async move { call(r, "GET", &url, "", "").await }
    };
    // Dry run: the answer shows the finalizer, storage has none.
    let (s, v) = call(
        r,
        "DELETE",
        &format!("{CM}/o?dryRun=All&propagationPolicy=Orphan"),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["metadata"]["finalizers"], json!(["orphan"]));
    let (_, cur) = get("o").await;
    assert!(cur["metadata"].get("finalizers").is_none(), "{cur}");
    assert!(cur["metadata"].get("deletionTimestamp").is_none());

    let (s, v) = call(
        r,
        "DELETE",
        &format!("{CM}/o?propagationPolicy=Orphan"),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["metadata"]["finalizers"], json!(["orphan"]));
    assert!(v["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(get("o").await.0, StatusCode::OK);

    let (s, v) = call(
        r,
        "DELETE",
        &format!("{CM}/f"),
        JSON,
        r#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    // A later DELETE with another policy replaces the collector's finalizer.
    let (_, v) = call(
        r,
        "DELETE",
        &format!("{CM}/f"),
        JSON,
        r#"{"propagationPolicy":"Orphan"}"#,
    )
    .await;
    assert_eq!(v["metadata"]["finalizers"], json!(["orphan"]));

    // Background (the default) removes at once; orphanDependents=true orphans.
    let (s, _) = call(
        r,
        "DELETE",
        &format!("{CM}/b?propagationPolicy=Background"),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(get("b").await.0, StatusCode::NOT_FOUND);
    let (s, v) = call(
        r,
        "DELETE",
        &format!("{CM}/d?orphanDependents=true"),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["metadata"]["finalizers"], json!(["orphan"]));
    // orphanDependents=false drops it; nothing holds the object then: removed, 200.
    let (s, _) = call(
        r,
        "DELETE",
        &format!("{CM}/d"),
        JSON,
        r#"{"orphanDependents":false}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        get("d").await.0,
        StatusCode::NOT_FOUND,
        "nothing held it any more"
    );
    // orphanDependents=false on an object another finalizer holds: 202 Accepted, as
    // upstream (the only case it answers 202).
    create_held(r, "h").await;
    let (s, v) = call(
        r,
        "DELETE",
        &format!("{CM}/h"),
        JSON,
        r#"{"orphanDependents":false}"#,
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{v}");
    assert_eq!(v["metadata"]["finalizers"], json!(["example.com/hold"]));

    // 422 for conflicting or unknown policies; nothing changes.
    for (q, body) in [
        ("?propagationPolicy=Sideways", ""),
        (
            "",
            r#"{"propagationPolicy":"Orphan","orphanDependents":true}"#,
        ),
    ] {
        let (s, e) = call(r, "DELETE", &format!("{CM}/x{q}"), JSON, body).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
        assert_eq!(e["reason"], "Invalid");
        assert_eq!(e["details"]["kind"], "DeleteOptions");
    }
    assert!(
        get("x").await.1["metadata"]
            .get("deletionTimestamp")
            .is_none()
    );

    // Collection delete: every object gets the finalizer; a dry run adds none.
    let (s, list) = call(
        r,
        "DELETE",
        &format!("{CM}?propagationPolicy=Orphan&dryRun=All"),
        "",
        "",
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert!(list["items"].as_array().unwrap().iter().all(|i| {
        i["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!("orphan"))
    }));
    assert!(get("x").await.1["metadata"].get("finalizers").is_none());
    let (s, _) = call(
        r,
        "DELETE",
        CM,
        JSON,
        r#"{"propagationPolicy":"Foreground"}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (_, x) = get("x").await;
    assert_eq!(x["metadata"]["finalizers"], json!(["foregroundDeletion"]));
    assert!(x["metadata"]["deletionTimestamp"].is_string());
}

/// Before: any `ownerReferences` and `finalizers` were stored, so the collector could meet
/// references without a uid. Now creates and updates are validated as upstream's
/// `ValidateOwnerReferences` / `ValidateFinalizers` (422).
#[tokio::test]
async fn owner_references_and_finalizers_are_validated_on_writes() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    let (s, e) = call(
        r,
        "POST",
        CM,
        JSON,
        r#"{"metadata":{"name":"a","ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"o"}]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert_eq!(
        e["message"],
        "ConfigMap \"a\" is invalid: metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty"
    );
    let (s, e) = call(
        r,
        "POST",
        CM,
        JSON,
        r#"{"metadata":{"name":"a","finalizers":["orphan","foregroundDeletion"]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("finalizer orphan and foregroundDeletion cannot be both set"),
        "{e}"
    );
    let (s, _) = call(r, "POST", CM, JSON, r#"{"metadata":{"name":"a"}}"#).await;
    assert_eq!(s, StatusCode::CREATED);
    let (s, e) = call(
        r,
        "PATCH",
        &format!("{CM}/a"),
        MERGE,
        r#"{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Event","name":"e","uid":"u"}]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{e}");
}

/// Before: a JSON patch `test` of a missing `/metadata/finalizers` against null failed (422),
/// so kube-rs's finalizer helper could never add a first finalizer. Upstream's json-patch
/// takes a missing member as null; kube-rs's exact patches now add, then remove, the finalizer
/// (the removal of the last one, on a deleting object, removes it).
#[tokio::test]
async fn kube_rs_finalizer_helper_patches_add_and_remove_the_first_finalizer() {
    let t = setup();
    let r = &t.router;
    create_namespace(r, "ns1").await;
    let (s, _) = call(r, "POST", CM, JSON, r#"{"metadata":{"name":"k"}}"#).await;
    assert_eq!(s, StatusCode::CREATED);
    let url = format!("{CM}/k");
    let add = r#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"add","path":"/metadata/finalizers","value":["example.com/k"]}]"#;
    let (s, v) = call(r, "PATCH", &url, "application/json-patch+json", add).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["metadata"]["finalizers"], json!(["example.com/k"]));
    // Now present: the same test fails (the helper retries from a fresh read).
    let (s, _) = call(r, "PATCH", &url, "application/json-patch+json", add).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    // A missing parent is still a failure, as upstream.
    let (s, _) = call(
        r,
        "PATCH",
        &url,
        "application/json-patch+json",
        r#"[{"op":"test","path":"/nothing/here","value":null}]"#,
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    call(r, "DELETE", &url, "", "").await;
    let remove = r#"[{"op":"test","path":"/metadata/finalizers/0","value":"example.com/k"},{"op":"remove","path":"/metadata/finalizers/0"}]"#;
    let (s, v) = call(r, "PATCH", &url, "application/json-patch+json", remove).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(call(r, "GET", &url, "", "").await.0, StatusCode::NOT_FOUND);
}
