//! kube-rs interop (feature `kube`): a custom resource made by kube-rs's
//! `#[derive(CustomResource)]` is a listwatch resource as it stands — [`Api`](crate::Api),
//! [`Store`](crate::Store), [`Informer`](crate::Informer), the [`Controller`](crate::Controller),
//! the finalizer helper, owner references and owns relations, Events and the `status`/`scale`
//! subresources take it like `Pod` — and kube-rs's derive writes its CRD and schema
//! ([`CustomResourceExt::crd`]). listwatch has no derive of its own: kube-rs's is the one Rust
//! operators know, and this crate interoperates with it rather than re-invent it.
//!
//! What it owns: one blanket implementation of [`ResourceType`] for every
//! `kube_core::Resource<DynamicType = ()>` (a kind known at compile time: kube-rs's derived
//! types, and k8s-openapi's through kube-core's own blanket implementation), with
//! `listwatch-api`'s `kube` feature giving the same types [`Resource`](crate::Resource)
//! (store key, resource version) through [`HasMetadata`](crate::HasMetadata).
//!
//! Invariants:
//! - group, version, kind, plural and scope are kube-rs's own for the type (`Resource::group`,
//!   `plural`, `Scope`), so a listwatch `Api<K>` and a kube-rs `Api<K>` of one type reach the
//!   same path; only `NamespaceResourceScope` and `ClusterResourceScope` types are
//!   [`ResourceType`]s (a subresource or a dynamic scope has no collection of its own);
//! - the feature only widens: it replaces the `k8s-openapi` feature's blanket implementations
//!   (over `k8s_openapi::Metadata`) with these, and kube-core implements its `Resource` for
//!   every type those covered, so enabling it breaks no k8s-openapi type. Two blanket
//!   implementations side by side would overlap (a k8s-openapi type is both), hence a switch.
//!   The price: with it, a type that implements kube-rs's `Resource` cannot also implement
//!   [`HasMetadata`](crate::HasMetadata) or [`ResourceType`] by hand (it needs neither).
//!
//! In `Cargo.toml`: `kube = { version = "5", default-features = false, features = ["derive"] }`
//! (the derive only, no kube-rs client) and `schemars = "1"` next to
//! `listwatch-client = { features = ["kube"] }`.
//!
//! ```
//! use std::borrow::Cow;
//!
//! use kube::{CustomResource, CustomResourceExt};
//! use listwatch_client::relations::controller_owner_reference;
//! use listwatch_client::{Api, ApiResource, HttpClient, HttpConfig, Resource, ResourceType};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// A Website: what to serve and how many replicas serve it.
//! #[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Website", namespaced)]
//! #[kube(status = "WebsiteStatus")]
//! pub struct WebsiteSpec {
//!     pub content: String,
//!     #[schemars(range(min = 0))]
//!     pub replicas: i32,
//! }
//!
//! #[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema)]
//! pub struct WebsiteStatus {
//!     pub ready: bool,
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The kind's place comes from the derive.
//! assert_eq!(Website::kind(), "Website");
//! assert_eq!(
//!     ApiResource::of::<Website>().collection_path(Some("web"))?,
//!     "/apis/example.com/v1/namespaces/web/websites"
//! );
//! // A typed handle, as for `Pod` (no request is made until a call).
//! let client = HttpClient::new(HttpConfig::new("http://127.0.0.1:8080")?)?;
//! let websites = Api::<Website>::namespaced(client, "web");
//! # let _ = websites;
//!
//! // Store key and version for reflectors and informers; owner references for children.
//! let site: Website = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "example.com/v1", "kind": "Website",
//!     "metadata": {"name": "home", "namespace": "web", "uid": "u-1", "resourceVersion": "7"},
//!     "spec": {"content": "hi", "replicas": 2},
//! }))?;
//! assert_eq!((site.key().as_str(), &*site.resource_version()), ("web/home", "7"));
//! let owner = controller_owner_reference(&site).ok_or("no owner reference")?;
//! assert_eq!((owner.api_version.as_str(), owner.kind.as_str()), ("example.com/v1", "Website"));
//!
//! // The CRD, with the spec's and status's schema, from the same derive.
//! let crd = Website::crd();
//! assert_eq!(crd.metadata.name.as_deref(), Some("websites.example.com"));
//! let schema = serde_json::to_value(&crd.spec.versions[0].schema)?;
//! assert_eq!(
//!     schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["replicas"]["minimum"],
//!     0.0
//! );
//! # Ok(()) }
//! ```
//!
//! The scope is kube-rs's too, checked at compile time: a cluster-scoped kind has no
//! namespaced `Api`.
//!
//! ```compile_fail
//! use kube::CustomResource;
//! use listwatch_client::{Api, HttpClient};
//!
//! #[derive(CustomResource, Clone, Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Fleet")]
//! pub struct FleetSpec {
//!     pub size: i64,
//! }
//!
//! fn fleets(client: HttpClient) -> Api<Fleet> {
//!     Api::<Fleet>::namespaced(client, "ns")
//! }
//! ```
//!
//! To install the CRD from the program, apply it like any object:
//! `Api::<CustomResourceDefinition>::cluster(client).apply(Website::crd_name(), &Website::crd(),
//! "my-operator", true)`.

use std::borrow::Cow;

use crate::api_resource::{ResourceType, Scope};

/// kube-rs's trait that gives a derived custom resource its CRD (`crd()`, `crd_name()`),
/// re-exported so a program can name it without depending on kube-core.
pub use kube_core::CustomResourceExt;

impl<K> ResourceType for K
where
    K: kube_core::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    <K as kube_core::Resource>::Scope: Scope,
{
    type Scope = <K as kube_core::Resource>::Scope;
    // `&()` is a promoted constant, so the borrowed names kube-rs returns are `'static`.
    fn group() -> Cow<'static, str> {
        <K as kube_core::Resource>::group(&())
    }
    fn version() -> Cow<'static, str> {
        <K as kube_core::Resource>::version(&())
    }
    fn kind() -> Cow<'static, str> {
        <K as kube_core::Resource>::kind(&())
    }
    fn plural() -> Cow<'static, str> {
        <K as kube_core::Resource>::plural(&())
    }
}
