//! listwatch-client with custom resources made by kube-rs's `#[derive(CustomResource)]` (its
//! `kube` feature) against the built server, no trait implemented by hand: the CRDs installed
//! from the derive's `crd()` through listwatch's `Api<CustomResourceDefinition>`; then, on a
//! namespaced kind with status and scale subresources, create, get, list, the status and
//! scale subresources, a metadata-only list, an informer following an update, owner
//! references and Events; on a cluster-scoped kind, `Api::cluster`.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

use crate::common;

use std::time::{Duration, Instant};

use common::{PATIENCE, Server};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{CustomResource, CustomResourceExt};
use listwatch_client::events::{EventData, EventType, Recorder, object_reference};
use listwatch_client::relations::{controller_owner_key, controller_owner_reference};
use listwatch_client::{
    Api, HttpClient, HttpConfig, Informer, InformerConfig, ListRequest, Patch, PatchParams,
    Resource,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The namespaced kind: a status and a scale subresource.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "derive.example.com",
    version = "v1",
    kind = "Widget",
    namespaced
)]
#[kube(status = "WidgetStatus")]
#[kube(scale(
    spec_replicas_path = ".spec.replicas",
    status_replicas_path = ".status.replicas"
))]
pub struct WidgetSpec {
    color: String,
    replicas: i32,
}

/// Its status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
pub struct WidgetStatus {
    replicas: i32,
}

/// The cluster-scoped kind.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "derive.example.com", version = "v1", kind = "Fleet")]
pub struct FleetSpec {
    size: i64,
}

async fn established(crds: &Api<CustomResourceDefinition>, name: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let crd = crds.get(name).await.unwrap();
        let done = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "{name} never Established");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn widget(name: &str, replicas: i32) -> Widget {
    let mut w = Widget::new(
        name,
        WidgetSpec {
            color: "red".into(),
            replicas,
        },
    );
    w.metadata.namespace = Some("dv".into());
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_derived_custom_resources_work_with_listwatch_client() {
    let server = Server::start(&[]);
    let client = HttpClient::new(HttpConfig::new(server.url.clone()).unwrap()).unwrap();
    let crds = Api::<CustomResourceDefinition>::cluster(client.clone());
    for crd in [Widget::crd(), Fleet::crd()] {
        let name = crd.metadata.name.clone().unwrap();
        crds.create(&crd).await.unwrap();
        established(&crds, &name).await;
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("dv".into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::cluster(client.clone())
        .create(&ns)
        .await
        .unwrap();

    // An informer first, so that it sees the create and the update.
    let informer = Informer::spawn(
        Api::<Widget>::all(client.clone()),
        InformerConfig::default(),
    );
    informer.store().wait_until_synced().await.unwrap();

    // CRUD through the derived type's own path.
    let widgets = Api::<Widget>::namespaced(client.clone(), "dv");
    assert_eq!(
        widgets.collection_path().unwrap(),
        "/apis/derive.example.com/v1/namespaces/dv/widgets"
    );
    let created = widgets.create(&widget("w1", 2)).await.unwrap();
    assert_eq!(created.key().as_str(), "dv/w1");
    assert!(!created.resource_version().is_empty());
    let got = widgets.get("w1").await.unwrap();
    assert_eq!((got.spec.color.as_str(), got.spec.replicas), ("red", 2));
    let page = widgets.list(&ListRequest::default()).await.unwrap();
    assert_eq!(page.items.len(), 1);

    // Status subresource: the status written, the spec kept.
    let patched = widgets
        .patch_status(
            "w1",
            &Patch::Merge(json!({"spec": {"replicas": 9}, "status": {"replicas": 2}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.as_ref().map(|s| s.replicas), Some(2));
    assert_eq!(widgets.get_status("w1").await.unwrap().spec.replicas, 2);

    // Scale subresource, from the derive's `scale` paths.
    let scale: Scale = widgets
        .patch_scale(
            "w1",
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(4));
    let updated = widgets.get("w1").await.unwrap();
    assert_eq!(updated.spec.replicas, 4);

    // Metadata only.
    let meta = widgets
        .metadata()
        .list(&ListRequest::default())
        .await
        .unwrap();
    assert_eq!(meta.items[0].metadata.name.as_deref(), Some("w1"));

    // The informer follows the update (the scale write).
    let deadline = Instant::now() + PATIENCE;
    loop {
        let seen = informer.store().get(&updated.key());
        if seen.is_some_and(|w| w.spec.replicas == 4) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the informer never saw replicas 4"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A child with the derived owner's reference maps back to it; an Event names it.
    let owner = controller_owner_reference(&updated).unwrap();
    assert_eq!(
        (owner.api_version.as_str(), owner.kind.as_str()),
        ("derive.example.com/v1", "Widget")
    );
    let child = ConfigMap {
        metadata: ObjectMeta {
            name: Some("w1-child".into()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    let child = Api::<ConfigMap>::namespaced(client.clone(), "dv")
        .create(&child)
        .await
        .unwrap();
    assert_eq!(
        controller_owner_key::<Widget, _>(&child).map(|k| k.to_string()),
        Some("dv/w1".to_owned())
    );
    let recorder = Recorder::new(client.clone(), "derive-test", "derive-test-0");
    let event = EventData {
        type_: EventType::Normal,
        reason: "Checked".into(),
        action: "Check".into(),
        note: None,
    };
    recorder
        .publish(&object_reference(&updated), &event)
        .await
        .unwrap();
    // Written in the background: wait for the queue.
    assert!(recorder.flush(Duration::from_secs(30)).await);
    let events = client
        .get("/api/v1/namespaces/dv/events")
        .await
        .unwrap()
        .unwrap();
    let involved = &events["items"][0]["involvedObject"];
    assert_eq!(
        (
            &involved["kind"],
            &involved["apiVersion"],
            &involved["name"]
        ),
        (
            &json!("Widget"),
            &json!("derive.example.com/v1"),
            &json!("w1")
        )
    );

    // The cluster-scoped kind.
    let fleets = Api::<Fleet>::cluster(client.clone());
    let fleet = fleets
        .create(&Fleet::new("f1", FleetSpec { size: 3 }))
        .await
        .unwrap();
    assert_eq!(fleet.key().as_str(), "f1");
    assert_eq!(fleets.get("f1").await.unwrap().spec.size, 3);
    assert!(fleets.delete("f1").await.unwrap());
    assert!(widgets.delete("w1").await.unwrap());
    assert!(widgets.get_opt("w1").await.unwrap().is_none());
}
