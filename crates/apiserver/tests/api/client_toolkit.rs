//! listwatch-client's operator toolkit (issue 32, item 2) against the built server: create
//! and delete options, the status and scale subresources, the server-side apply helper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use common::Server;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use listwatch_client::events::{EventData, EventType, Recorder, object_reference};
use listwatch_client::finalizer::{Event, FinalizerError, finalizer};
use listwatch_client::{
    Action, Api, DeleteParams, HttpClient, HttpConfig, Patch, PatchParams, PostParams,
    PropagationPolicy,
};
use serde_json::json;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..ObjectMeta::default()
    }
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: meta(name),
        data: Some(BTreeMap::from([("k".to_owned(), "v".to_owned())])),
        ..ConfigMap::default()
    }
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    let app = Some(BTreeMap::from([("app".to_owned(), name.to_owned())]));
    Deployment {
        metadata: meta(name),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: app.clone(),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: app,
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "c".into(),
                        image: Some("x".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

async fn start() -> (Server, HttpClient) {
    let server = Server::start(&[]);
    let client = HttpClient::new(HttpConfig::new(server.url.clone()).unwrap()).unwrap();
    let ns = Namespace {
        metadata: meta("tk"),
        ..Namespace::default()
    };
    Api::<Namespace>::cluster(client.clone())
        .create(&ns)
        .await
        .unwrap();
    (server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_delete_options_reach_the_server() {
    let (_server, client) = start().await;
    let cms = Api::<ConfigMap>::namespaced(client, "tk");

    // A dry-run create answers what would be stored and stores nothing.
    let would_be = cms
        .create_with(&config_map("dry"), &PostParams::default().dry_run())
        .await
        .unwrap();
    assert_eq!(would_be.metadata.name.as_deref(), Some("dry"));
    assert!(
        cms.get_opt("dry").await.unwrap().is_none(),
        "dry run persisted"
    );

    // fieldManager is recorded.
    let created = cms
        .create_with(
            &config_map("a"),
            &PostParams::default().field_manager("toolkit"),
        )
        .await
        .unwrap();
    let managers: Vec<_> = created
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["toolkit"]);
    let uid = created.metadata.uid.unwrap();

    // A uid precondition that does not hold: 409, nothing deleted.
    let wrong = cms
        .delete_with(
            "a",
            &DeleteParams::default().precondition_uid("not-the-uid"),
        )
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Some(409), "{wrong}");
    assert!(cms.get_opt("a").await.unwrap().is_some());
    // A dry-run delete deletes nothing.
    assert!(
        cms.delete_with("a", &DeleteParams::default().dry_run())
            .await
            .unwrap()
    );
    assert!(cms.get_opt("a").await.unwrap().is_some(), "dry run deleted");
    // The right uid: deleted.
    assert!(
        cms.delete_with("a", &DeleteParams::default().precondition_uid(uid))
            .await
            .unwrap()
    );
    assert!(cms.get_opt("a").await.unwrap().is_none());
    assert!(
        !cms.delete_with("a", &DeleteParams::default())
            .await
            .unwrap()
    );

    // propagationPolicy=Foreground on an owner with a blocking dependent (held by its own
    // finalizer): the owner stays, marked for deletion with the foregroundDeletion finalizer,
    // while the dependent is there.
    let owner = cms.create(&config_map("owner")).await.unwrap();
    let mut dep = config_map("dep");
    dep.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    dep.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            block_owner_deletion: Some(true),
            controller: Some(true),
        },
    ]);
    cms.create(&dep).await.unwrap();
    assert!(
        cms.delete_with(
            "owner",
            &DeleteParams::default().propagation(PropagationPolicy::Foreground)
        )
        .await
        .unwrap()
    );
    let owner = cms.get("owner").await.unwrap();
    assert!(owner.metadata.deletion_timestamp.is_some());
    let finalizers = owner.metadata.finalizers.unwrap_or_default();
    assert!(
        finalizers.iter().any(|f| f == "foregroundDeletion"),
        "{finalizers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_scale_subresources_and_the_apply_helper() {
    let (_server, client) = start().await;
    let deploys = Api::<Deployment>::namespaced(client.clone(), "tk");
    deploys.create(&deployment("web", 1)).await.unwrap();

    // Scale: read, patch; the Deployment's spec follows.
    let scale: Scale = deploys.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(1));
    let scale: Scale = deploys
        .patch_scale(
            "web",
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(3));
    assert_eq!(
        deploys.get("web").await.unwrap().spec.unwrap().replicas,
        Some(3)
    );

    // Status: a status patch changes the status only, even when it carries a spec.
    let patched = deploys
        .patch_status(
            "web",
            &Patch::Merge(json!({"spec": {"replicas": 9}, "status": {"observedGeneration": 7}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().observed_generation, Some(7));
    let read = deploys.get_status("web").await.unwrap();
    assert_eq!(
        read.spec.unwrap().replicas,
        Some(3),
        "status write changed the spec"
    );
    assert_eq!(read.status.unwrap().observed_generation, Some(7));

    // Server-side apply helper: creates, then a second manager's conflicting apply needs
    // force.
    let cms = Api::<ConfigMap>::namespaced(client, "tk");
    let applied = cms
        .apply("settings", &config_map("settings"), "op-a", false)
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["k"], "v");
    let mut other = config_map("settings");
    other.data = Some(BTreeMap::from([("k".to_owned(), "w".to_owned())]));
    let conflict = cms
        .apply("settings", &other, "op-b", false)
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), Some(409), "{conflict}");
    let forced = cms.apply("settings", &other, "op-b", true).await.unwrap();
    assert_eq!(forced.data.unwrap()["k"], "w");
}

/// The finalizer helper: added before the first Apply, Cleanup on delete (an error keeps the
/// finalizer), removed after a successful Cleanup so the object goes; the event recorder: the
/// same event twice is one Event with count 2, another reason a second Event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizer_helper_and_event_recorder() {
    let (_server, client) = start().await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "tk");
    cms.create(&config_map("fin")).await.unwrap();
    const NAME: &str = "example.com/cleanup";
    let applies = Arc::new(AtomicUsize::new(0));
    let cleanups = Arc::new(AtomicUsize::new(0));
    let run = |fail_cleanup: bool| {
        let cms = cms.clone();
        let applies = Arc::clone(&applies);
        let cleanups = Arc::clone(&cleanups);
        async move {
            let current = Arc::new(cms.get("fin").await.unwrap());
            finalizer(&cms, NAME, current, |event| async move {
                match event {
                    Event::Apply(_) => applies.fetch_add(1, Ordering::SeqCst),
                    Event::Cleanup(_) => {
                        cleanups.fetch_add(1, Ordering::SeqCst);
                        if fail_cleanup {
                            return Err("cleanup failed (injected)");
                        }
                        0
                    }
                };
                Ok(Action::Done)
            })
            .await
        }
    };
    // First pass: only the finalizer is added.
    run(false).await.unwrap();
    assert_eq!(applies.load(Ordering::SeqCst), 0);
    let finalizers = cms.get("fin").await.unwrap().metadata.finalizers.unwrap();
    assert_eq!(finalizers, [NAME]);
    run(false).await.unwrap();
    assert_eq!(applies.load(Ordering::SeqCst), 1);
    // Deleted: the object stays while the finalizer is there; a failed cleanup keeps it.
    assert!(cms.delete("fin").await.unwrap());
    assert!(matches!(
        run(true).await,
        Err(FinalizerError::Reconcile("cleanup failed (injected)"))
    ));
    assert!(
        cms.get("fin")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    run(false).await.unwrap();
    assert_eq!(cleanups.load(Ordering::SeqCst), 2);
    assert!(
        cms.get_opt("fin").await.unwrap().is_none(),
        "finalizer not removed"
    );

    // Events.
    let cm = cms.create(&config_map("evented")).await.unwrap();
    let recorder = Recorder::new(client.clone(), "example.com/toolkit-test", "test-0");
    let synced = EventData {
        type_: EventType::Normal,
        reason: "Synced".into(),
        action: "Reconcile".into(),
        note: Some("up to date".into()),
    };
    let reference = object_reference(&cm);
    recorder.publish(&reference, &synced).await.unwrap();
    recorder.publish(&reference, &synced).await.unwrap();
    let failed = EventData {
        type_: EventType::Warning,
        reason: "Failed".into(),
        ..synced.clone()
    };
    recorder.publish(&reference, &failed).await.unwrap();
    // Written in the background: wait for the queue.
    assert!(recorder.flush(std::time::Duration::from_secs(30)).await);
    let events = client
        .get("/api/v1/namespaces/tk/events")
        .await
        .unwrap()
        .unwrap();
    let mut got: Vec<(String, i64, String, String)> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["reason"].as_str().unwrap().to_owned(),
                e["count"].as_i64().unwrap(),
                e["involvedObject"]["name"].as_str().unwrap().to_owned(),
                e["reportingComponent"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (
                "Failed".into(),
                1,
                "evented".into(),
                "example.com/toolkit-test".into()
            ),
            (
                "Synced".into(),
                2,
                "evented".into(),
                "example.com/toolkit-test".into()
            ),
        ]
    );
}

/// Issue 32 item 1 against the binary: an informer of a resource the server does not serve
/// (404) fails its wait instead of hanging; one object that does not decode into the type
/// fails the list as a whole (reported) until it is gone, then the rest syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informer_failures_reach_code_against_the_binary() {
    use listwatch_client::{ApiResource, Informer, InformerConfig, InformerError, SyncError};

    let (_server, client) = start().await;
    let widgets = ApiResource {
        group: "nope.example.com".into(),
        version: "v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
        namespaced: true,
    };
    let missing = Informer::spawn(
        Api::<ConfigMap>::all_with(client.clone(), &widgets),
        InformerConfig::default(),
    );
    let waited = tokio::time::timeout(common::PATIENCE, missing.wait_until_synced()).await;
    match waited {
        Ok(Err(SyncError::Fatal(InformerError::Reflector(e)))) => assert_eq!(e.code(), Some(404)),
        other => panic!("expected a fatal 404, got {other:?}"),
    }
    // A field selector the server does not support for the kind: 400 on every try, so the
    // wait fails with it instead of hanging.
    let unsupported = Informer::spawn(
        Api::<k8s_openapi::api::core::v1::Pod>::all(client.clone()),
        InformerConfig::default().reflector(
            listwatch_client::Config::default()
                .fields(listwatch_api::FieldSelector::parse("spec.color=red").unwrap()),
        ),
    );
    let waited = tokio::time::timeout(common::PATIENCE, unsupported.wait_until_synced()).await;
    match waited {
        Ok(Err(SyncError::Fatal(InformerError::Reflector(e)))) => {
            assert_eq!(e.code(), Some(400), "{e}");
            assert!(e.to_string().contains("spec.color"), "{e}");
        }
        other => panic!("expected a fatal 400, got {other:?}"),
    }

    /// A ConfigMap whose `data.count` must be a number.
    #[derive(Clone, Debug, serde::Deserialize)]
    struct Counted {
        metadata: listwatch_api::ObjectMeta,
        #[allow(dead_code)]
        data: CountedData,
    }
    #[derive(Clone, Debug, serde::Deserialize)]
    struct CountedData {
        #[allow(dead_code)]
        count: String,
    }
    impl listwatch_client::HasMetadata for Counted {
        type Metadata = listwatch_api::ObjectMeta;
        fn metadata(&self) -> &listwatch_api::ObjectMeta {
            &self.metadata
        }
    }
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "tk");
    for (name, key) in [("good-1", "count"), ("bad", "other"), ("good-2", "count")] {
        let mut cm = config_map(name);
        cm.data = Some(BTreeMap::from([(key.to_owned(), "1".to_owned())]));
        cms.create(&cm).await.unwrap();
    }
    let counted = Api::<Counted>::namespaced_with(
        client.clone(),
        "tk",
        &listwatch_client::ApiResource::of::<ConfigMap>(),
    );
    let informer = Informer::spawn(counted, InformerConfig::default());
    let mut errors = informer.errors();
    // The list with `bad` fails as a whole (client-go, kube-rs): reported, never synced
    // without it (and `wait_until_synced` fails with it); once `bad` is gone a relist
    // syncs: the wait that outlasts a fix made elsewhere.
    let reported = tokio::time::timeout(common::PATIENCE, errors.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(reported.to_string().contains("tk/bad"), "{reported}");
    assert!(!informer.has_synced());
    assert!(matches!(
        informer.wait_until_synced().await,
        Err(listwatch_client::SyncError::Fatal(_))
    ));
    assert!(cms.delete("bad").await.unwrap());
    tokio::time::timeout(
        common::PATIENCE,
        informer.store().wait_until_synced_ignoring_failures(),
    )
    .await
    .unwrap()
    .unwrap();
    let keys: Vec<String> = {
        let mut k: Vec<String> = informer
            .store()
            .keys()
            .iter()
            .map(|k| k.to_string())
            .collect();
        k.sort();
        k
    };
    assert_eq!(keys, ["tk/good-1", "tk/good-2"]);
}
