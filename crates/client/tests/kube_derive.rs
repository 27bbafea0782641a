//! The `kube` feature without a server: types made by kube-rs's `#[derive(CustomResource)]`
//! are `ResourceType`s and `Resource`s with kube-rs's own names, paths and scope, and
//! k8s-openapi's types keep working through the feature's blanket implementations (kube-core
//! implements its `Resource` for them). Against the binary: `crates/apiserver/tests/api/`
//! `kube_derive.rs` and the reference operator (`website_operator.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    unreachable_pub,
    missing_docs
)]

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResource;
use listwatch_client::events::object_reference;
use listwatch_client::relations::{controller_owner_reference, owned_by};
use listwatch_client::{ApiResource, PartialObjectMetadata, Resource, ResourceType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Website", namespaced)]
#[kube(status = "WebsiteStatus", plural = "webs")]
pub struct WebsiteSpec {
    replicas: i32,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
pub struct WebsiteStatus {
    ready: bool,
}

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "example.com", version = "v2", kind = "Fleet")]
pub struct FleetSpec {
    size: i64,
}

fn place<K: ResourceType>() -> (ApiResource, bool) {
    (ApiResource::of::<K>(), K::METADATA_ONLY)
}

#[test]
fn derived_kinds_have_kube_rs_names_paths_and_scope() {
    let (web, _) = place::<Website>();
    assert_eq!(
        (
            web.group.as_str(),
            web.version.as_str(),
            web.kind.as_str(),
            web.plural.as_str(),
            web.namespaced
        ),
        ("example.com", "v1", "Website", "webs", true)
    );
    assert_eq!(
        web.object_path(Some("ns"), "home").unwrap(),
        "/apis/example.com/v1/namespaces/ns/webs/home"
    );
    let (fleet, _) = place::<Fleet>();
    assert_eq!((fleet.plural.as_str(), fleet.namespaced), ("fleets", false));
    assert_eq!(
        fleet.object_path(None, "f").unwrap(),
        "/apis/example.com/v2/fleets/f"
    );
    // The metadata-only form names the same collection.
    let (meta, only) = place::<PartialObjectMetadata<Website>>();
    assert_eq!((meta, only), (web, true));
}

#[test]
fn k8s_openapi_types_keep_their_places_under_the_kube_feature() {
    let (pod, _) = place::<Pod>();
    assert_eq!(
        pod.collection_path(Some("ns")).unwrap(),
        "/api/v1/namespaces/ns/pods"
    );
    let (deploy, _) = place::<Deployment>();
    assert_eq!(deploy.api_version(), "apps/v1");
    let p: Pod = serde_json::from_str(
        r#"{"metadata":{"name":"a","namespace":"ns","resourceVersion":"x/1","uid":"u"}}"#,
    )
    .unwrap();
    assert_eq!(
        (p.key().as_str(), &*p.resource_version(), Resource::uid(&p)),
        ("ns/a", "x/1", Some("u"))
    );
}

#[test]
fn derived_objects_are_resources_owners_and_event_subjects() {
    let site: Website = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Website",
        "metadata": {"name": "home", "namespace": "ns", "uid": "u-1", "resourceVersion": "9"},
        "spec": {"replicas": 1},
    }))
    .unwrap();
    assert_eq!(
        (site.key().as_str(), &*site.resource_version(), site.uid()),
        ("ns/home", "9", Some("u-1"))
    );
    let reference = controller_owner_reference(&site).unwrap();
    assert_eq!(
        (
            reference.api_version.as_str(),
            reference.kind.as_str(),
            reference.name.as_str(),
            reference.uid.as_str()
        ),
        ("example.com/v1", "Website", "home", "u-1")
    );
    let child = ConfigMap {
        metadata: ObjectMeta {
            name: Some("home-content".into()),
            namespace: Some("ns".into()),
            owner_references: Some(vec![reference]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    assert_eq!(
        owned_by::<Website, ConfigMap>()(&child).map(|k| k.to_string()),
        Some("ns/home".to_owned())
    );
    // Another kind's controller reference is not a Website's.
    assert_eq!(owned_by::<Fleet, ConfigMap>()(&child), None);
    let subject = object_reference(&site);
    assert_eq!(
        (subject.api_version.as_deref(), subject.kind.as_deref()),
        (Some("example.com/v1"), Some("Website"))
    );
    // A derived type without a uid yet (not read from the server) has no owner reference.
    let new = Website::new("fresh", WebsiteSpec { replicas: 0 });
    assert!(controller_owner_reference(&new).is_none());
}
