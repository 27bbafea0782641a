//! The client reflector of listwatch: keep a local, indexed copy of a collection in sync
//! with a Kubernetes-style server, and react to its changes.
//!
//! It owns
//! - [`ListerWatcher`]: list a page, open a watch; for dynamic [`Object`](listwatch_api::Object)s
//!   or, through [`Typed`], any serde type that is a [`Resource`];
//! - [`Reflector`] / [`watcher`]: client-go's reflector loop (paginated list, watch from the list's version
//!   with bookmarks, relist on 410, backoff with jitter, streaming list with fallback) as a
//!   `Stream` of [`Event`]s, and [`reflector`], which applies them to a store;
//! - [`Writer`] / [`Store`]: one writer, many cheap readers, index functions,
//!   `wait_until_synced`, atomic relists that never hold two copies of the store;
//! - [`Informer`]: one reflector shared by many subscribers and [`EventHandler`]s, with resync;
//! - [`WorkQueue`] and [`Controller`]: client-go's rate-limited de-duplicating work queue and
//!   a reconcile loop over informers;
//! - [`leaderelection`]: client-go's leader election on a `coordination.k8s.io/v1` Lease
//!   ([`LeaderElector`], over [`HttpLeaseLock`] or any [`LeaseLock`]), so that one of several
//!   processes runs the work it guards;
//! - [`HttpListerWatcher`]: the HTTP lister-watcher for any Kubernetes-compatible server
//!   (hyper; TLS with the `rustls` feature), configured from a URL or a kubeconfig;
//! - [`Api`]: typed access kube-rs style (get, list, watch, create, replace, [`Patch`],
//!   delete), the path derived from the type ([`ResourceType`]) or an [`ApiResource`]; with
//!   the `k8s-openapi` feature every k8s-openapi resource type works directly, and an `Api` is
//!   itself a [`ListerWatcher`] for the reflector and informer;
//! - [`PartialObjectMetadata`]: a kind's metadata-only form, for `Api`s, reflectors and
//!   informers that need names, labels and owners but not the objects' bodies.
//!
//! Features: `rustls` (https servers), `k8s-openapi` (k8s-openapi's resource types as
//! [`Resource`]s and [`ResourceType`]s; no Kubernetes version feature of k8s-openapi is
//! enabled, the final binary picks one).
//!
//! It sits at the client end of the pipeline and depends only on `listwatch-api`: it must
//! never depend on storage, the watch cache or the server crates (the cacher uses it through
//! an in-process `ListerWatcher` of its own).
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
//! # async fn demo() -> listwatch_client::Result<()> {
//! let client = HttpClient::new(HttpConfig::from_default_kubeconfig()?)?;
//! let pods = Informer::spawn(Api::<Pod>::all(client.clone()), InformerConfig::default());
//! pods.wait_until_synced().await.ok();
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
mod backoff;
pub mod controller;
mod error;
pub mod http;
mod informer;
#[cfg(feature = "k8s-openapi")]
mod k8s;
pub mod leaderelection;
mod lister;
mod metadata;
mod reflector;
mod resource;
pub mod store;
pub mod workqueue;

pub use api_resource::{
    ApiResource, ClusterScope, ClusterScoped, NamespaceScope, Namespaced, ResourceType, Scope,
};
pub use controller::{Action, Controller};
pub use error::{Error, Result};
pub use http::{
    Api, ExecCluster, ExecConfig, HttpClient, HttpConfig, HttpListerWatcher, HttpTyped,
    Impersonate, Patch, PatchParams,
};
pub use informer::{
    EventHandler, Filtered, HandlerRegistration, Informer, InformerConfig, Subscription, Transform,
    dispatch,
};
pub use leaderelection::{
    HttpLeaseLock, LeaderElectionConfig, LeaderElector, LeaseLock, LeaseRecord, LeaseState,
};
pub use lister::{
    ListRequest, ListerWatcher, Page, PageEnd, PageItem, PageStream, Typed, VersionMatch,
    WatchEvent, WatchRequest, WatchStream, collect_page, page_stream,
};
pub use metadata::{
    PARTIAL_OBJECT_METADATA_API_VERSION, PARTIAL_OBJECT_METADATA_KIND, PartialObjectMetadata,
};
pub use reflector::{Config, Event, Reflector, reflector, watcher};
pub use resource::{HasMetadata, MetadataFields, ObjectKey, Resource};
pub use store::{Delta, IndexFn, Store, Writer, WriterDropped};
pub use workqueue::{RateLimits, WorkQueue};
