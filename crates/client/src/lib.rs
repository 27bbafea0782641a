//! The HTTP client of listwatch: reach a Kubernetes-style server over HTTP, and run the
//! controller runtime ([`listwatch_runtime`], re-exported as [`runtime`]) against it — as
//! kube-rs's `kube` facade does with `kube-client` and `kube-runtime`.
//!
//! It owns
//! - [`HttpListerWatcher`]: the runtime's [`ListerWatcher`] over HTTP for any
//!   Kubernetes-compatible server (hyper; TLS with the `rustls` feature), configured from a URL
//!   or a kubeconfig ([`HttpConfig`]: kubeconfig files, in-cluster config, exec credential
//!   plugins, token files, client certificates, impersonation, proxies, failover servers);
//! - [`HttpClient`]: one connection pool per config, the single-object calls a controller
//!   needs, retries on `Retry-After`, request metrics ([`ClientMetrics`], no global registry);
//! - [`Api`]: typed access kube-rs style (get, list, watch, create, replace, [`Patch`],
//!   delete), the path derived from the type ([`ResourceType`]) or an [`ApiResource`]; with
//!   the `k8s-openapi` feature every k8s-openapi resource type works directly, and an `Api` is
//!   itself a [`ListerWatcher`] for the reflector and informer;
//! - [`HttpLeaseLock`]: the runtime's [`LeaseLock`] on a `coordination.k8s.io/v1` Lease over
//!   HTTP, for [`LeaderElector`];
//! - [`PartialObjectMetadata`]: a kind's metadata-only form, for `Api`s, reflectors and
//!   informers that need names, labels and owners but not the objects' bodies.
//!
//! The runtime's items ([`Reflector`], [`watcher`], [`Store`], [`Informer`], [`WorkQueue`],
//! [`Controller`], [`leaderelection`], [`Error`] …) are re-exported at the top level as well,
//! so `listwatch_client::Informer` and `listwatch_runtime::Informer` are the same type. A
//! crate that only needs the runtime over a lister-watcher of its own (in process, say)
//! depends on `listwatch-runtime` and compiles no HTTP.
//!
//! Features: `rustls` (https servers), `k8s-openapi` (k8s-openapi's resource types as
//! [`Resource`]s and [`ResourceType`]s; no Kubernetes version feature of k8s-openapi is
//! enabled, the final binary picks one), `kube` (the same for every kube-rs resource of a
//! static type: custom resources made by kube-rs's `#[derive(CustomResource)]`, with their
//! CRD and schema; module `kube`).
//!
//! It sits at the client end of the pipeline and depends only on `listwatch-api` and
//! `listwatch-runtime`: it must never depend on storage, the watch cache or the server crates.
//!
//! ```no_run
//! use futures::StreamExt;
//! use listwatch_client::{reflector, watcher, Config, HttpConfig, HttpListerWatcher, Writer};
//!
//! # async fn demo() -> listwatch_client::Result<()> {
//! let lw = HttpListerWatcher::new(HttpConfig::new("http://127.0.0.1:8080")?, "/api/v1/pods")?;
//! let writer = Writer::default();
//! let pods = writer.store();
//! tokio::spawn(reflector(writer, watcher(lw, Config::default())).for_each(|_| async {}));
//! pods.wait_until_synced().await.ok();
//! println!("{} pods", pods.len());
//! # Ok(()) }
//! ```
//!
//! The same with k8s-openapi's `Pod` (feature `k8s-openapi`), no URL written:
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::Pod;
//! use listwatch_client::{Api, HttpClient, HttpConfig, Informer, InformerConfig};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let client = HttpClient::new(HttpConfig::from_default_kubeconfig()?)?;
//! let pods = Informer::spawn(Api::<Pod>::all(client.clone()), InformerConfig::default());
//! pods.wait_until_synced().await?; // fails (not hangs) on a 403
//! for pod in pods.store().list() {
//!     let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
//!     println!("{:?} on {node:?}", pod.metadata.name);
//! }
//! let web = Api::<Pod>::namespaced(client, "web");
//! let p = web.get("frontend-0").await?;
//! # let _ = p;
//! # Ok(()) }
//! ```

mod api_resource;
#[cfg(feature = "k8s-openapi")]
pub mod events;
#[cfg(feature = "k8s-openapi")]
pub mod finalizer;
pub mod http;
#[cfg(feature = "k8s-openapi")]
mod k8s;
#[cfg(feature = "kube")]
pub mod kube;
mod metadata;
#[cfg(feature = "k8s-openapi")]
pub mod relations;

/// The controller runtime, [`listwatch_runtime`]: reflector, store, informer, work queue,
/// controller runner, leader election.
pub use listwatch_runtime as runtime;

/// Leader election ([`listwatch_runtime::leaderelection`]) and its lock over HTTP,
/// [`HttpLeaseLock`].
pub mod leaderelection {
    pub use crate::http::HttpLeaseLock;
    pub use listwatch_runtime::leaderelection::*;
}

pub use api_resource::{
    ApiResource, ClusterScope, ClusterScoped, NamespaceScope, Namespaced, ResourceType, Scope,
};
pub use http::{
    Api, ClientMetrics, DeleteParams, ExecCluster, ExecConfig, HttpClient, HttpConfig,
    HttpLeaseLock, HttpListerWatcher, HttpTyped, Impersonate, Patch, PatchParams, PostParams,
    Preconditions, PropagationPolicy, RequestKey, RequestStats,
};
pub use metadata::{
    PARTIAL_OBJECT_METADATA_API_VERSION, PARTIAL_OBJECT_METADATA_KIND, PartialObjectMetadata,
};
pub use runtime::{
    Action, Config, Controller, Delta, Error, Event, EventHandler, Filtered, HandlerRegistration,
    HasMetadata, IndexFn, Informer, InformerConfig, InformerError, LeaderElectionConfig,
    LeaderElector, LeaseLock, LeaseRecord, LeaseState, ListRequest, ListerWatcher, MetadataFields,
    ObjectKey, Page, PageEnd, PageItem, PageStream, Processing, RateLimits, Reflector, Resource,
    Result, Store, Subscription, SyncError, Transform, Typed, VersionMatch, WatchEvent,
    WatchRequest, WatchStream, WorkQueue, Writer, collect_page, controller, dispatch, page_stream,
    predicate, reflector, store, watcher, workqueue,
};
