//! [`Api`]: typed access to one kind's collection, kube-rs style, with the path derived from
//! the type ([`ResourceType`]) or from an [`ApiResource`] value.
//!
//! It owns no HTTP code of its own: reads and writes go through [`HttpClient`]'s single-object
//! call (same deadline, body bound, gzip and 401 refresh), lists and watches through
//! [`HttpTyped`](super::HttpTyped) (decoded once, straight into `K`), so an `Api` is also a
//! [`ListerWatcher`] that [`watcher`](crate::watcher), [`Reflector`](crate::Reflector) and
//! [`Informer`](crate::Informer) take directly.
//!
//! A handle of [`PartialObjectMetadata<K>`](crate::PartialObjectMetadata) (or one made by
//! [`Api::metadata`]) reads the metadata-only form: gets and watches ask for
//! `PartialObjectMetadata`, lists for `PartialObjectMetadataList`.
//!
//! Invariants: every path is built by [`ApiResource`] from validated, encoded segments; an
//! object call on an [`Api::all`] handle of a namespaced kind, or a namespace for a
//! cluster-scoped kind, is an [`Error::Request`] before anything is sent.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use async_trait::async_trait;
use http::Method;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::client::{JSON, json_body, patch_request};
use super::lister_watcher::METADATA;
use super::params::{DeleteParams, PostParams};
use super::patch::{Patch, PatchParams};
use super::{HttpClient, HttpListerWatcher};
use crate::api_resource::{ApiResource, ClusterScoped, Namespaced, ResourceType};
use crate::metadata::PartialObjectMetadata;
use crate::{Error, Result};
use crate::{HasMetadata, Resource};
use crate::{ListRequest, ListerWatcher, Page, PageStream, WatchRequest, WatchStream};

/// Typed access to one kind's objects, in one namespace, in all of them, or cluster-wide.
///
/// ```no_run
/// # async fn demo() -> listwatch_client::Result<()> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use listwatch_client::{Api, HttpClient, HttpConfig, Patch, PatchParams};
///
/// let client = HttpClient::new(HttpConfig::new("http://127.0.0.1:8080")?)?;
/// let cms = Api::<ConfigMap>::namespaced(client, "default"); // /api/v1/namespaces/default/configmaps
/// let mut cm = ConfigMap::default();
/// cm.metadata.name = Some("settings".into());
/// let created = cms.create(&cm).await?;
/// let patch = serde_json::json!({"data": {"mode": "fast"}});
/// let patched = cms.patch("settings", &Patch::Merge(&patch), &PatchParams::default()).await?;
/// assert!(cms.delete("settings").await?);
/// # let _ = (created, patched);
/// # Ok(()) }
/// ```
pub struct Api<K> {
    client: HttpClient,
    resource: Arc<ApiResource>,
    namespace: Option<String>,
    /// The server of this handle's last watch (see [`HttpListerWatcher`]'s).
    watch_server: Arc<AtomicUsize>,
    /// Reads ask for `PartialObjectMetadata` ([`ResourceType::METADATA_ONLY`], or
    /// [`Api::metadata`]).
    metadata_only: bool,
    _k: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Self {
            client: self.client.clone(),
            resource: Arc::clone(&self.resource),
            namespace: self.namespace.clone(),
            watch_server: Arc::clone(&self.watch_server),
            metadata_only: self.metadata_only,
            _k: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<K: ResourceType> Api<K> {
    /// Every object of `K`: across all namespaces for a namespaced kind (lists and watches;
    /// object calls need a namespace), the cluster's for a cluster-scoped one (kube-rs's
    /// `Api::all`).
    pub fn all(client: HttpClient) -> Self {
        Self {
            metadata_only: K::METADATA_ONLY,
            ..Self::all_with(client, &ApiResource::of::<K>())
        }
    }

    /// `K`'s objects in `namespace` (namespaced kinds only; checked at compile time).
    ///
    /// ```compile_fail
    /// # fn demo(client: listwatch_client::HttpClient) {
    /// use k8s_openapi::api::core::v1::Node;
    /// // Nodes are cluster-scoped: Api::<Node>::cluster or Api::<Node>::all.
    /// let nodes = listwatch_client::Api::<Node>::namespaced(client, "ns");
    /// # }
    /// ```
    pub fn namespaced(client: HttpClient, namespace: &str) -> Self
    where
        K::Scope: Namespaced,
    {
        Self {
            metadata_only: K::METADATA_ONLY,
            ..Self::namespaced_with(client, namespace, &ApiResource::of::<K>())
        }
    }

    /// `K`'s objects in the configuration's namespace (its kubeconfig context's, or the
    /// pod's in cluster), `default` when it names none (as kubectl).
    pub fn default_namespaced(client: HttpClient) -> Self
    where
        K::Scope: Namespaced,
    {
        let ns = client.default_namespace().unwrap_or("default").to_owned();
        Self::namespaced(client, &ns)
    }

    /// `K`'s objects, a cluster-scoped kind (checked at compile time; the same handle as
    /// [`all`](Self::all)).
    ///
    /// ```compile_fail
    /// # fn demo(client: listwatch_client::HttpClient) {
    /// use k8s_openapi::api::core::v1::Pod;
    /// // Pods are namespaced: Api::<Pod>::namespaced or Api::<Pod>::all.
    /// let pods = listwatch_client::Api::<Pod>::cluster(client);
    /// # }
    /// ```
    pub fn cluster(client: HttpClient) -> Self
    where
        K::Scope: ClusterScoped,
    {
        Self::all(client)
    }
}

impl<K> Api<K> {
    /// The objects of the kind `resource` describes, across all namespaces or cluster-wide
    /// (for a `K` with no [`ResourceType`], e.g. a custom resource's serde type).
    pub fn all_with(client: HttpClient, resource: &ApiResource) -> Self {
        Self {
            client,
            resource: Arc::new(resource.clone()),
            namespace: None,
            watch_server: Arc::new(AtomicUsize::new(usize::MAX)),
            metadata_only: false,
            _k: PhantomData,
        }
    }

    /// The objects of the kind `resource` describes in `namespace` (a namespace for a
    /// cluster-scoped kind makes every call an [`Error::Request`]).
    pub fn namespaced_with(client: HttpClient, namespace: &str, resource: &ApiResource) -> Self {
        Self {
            namespace: Some(namespace.to_owned()),
            ..Self::all_with(client, resource)
        }
    }

    /// The kind.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The same collection in metadata-only form (kube-rs's `list_metadata`,
    /// `watch_metadata`, `get_metadata` and `metadata_watcher` in one handle): gets, lists
    /// and watches ask the server for `PartialObjectMetadata`, so a reflector or informer
    /// over the result caches names, labels, annotations, owners and finalizers without the
    /// objects' bodies. Patches and deletes work as on `self` (a patch's answer is decoded
    /// into the metadata form); creates and replaces are refused (they would need the whole
    /// object).
    pub fn metadata(&self) -> Api<PartialObjectMetadata<K>>
    where
        K: HasMetadata,
    {
        Api {
            client: self.client.clone(),
            resource: Arc::clone(&self.resource),
            namespace: self.namespace.clone(),
            watch_server: Arc::new(AtomicUsize::new(usize::MAX)),
            metadata_only: true,
            _k: PhantomData,
        }
    }

    /// Whether reads ask for `PartialObjectMetadata` (see [`metadata`](Self::metadata)).
    pub fn is_metadata_only(&self) -> bool {
        self.metadata_only
    }

    /// The namespace, `None` for all namespaces or a cluster-scoped kind.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The client.
    pub fn client(&self) -> &HttpClient {
        &self.client
    }

    /// The path of the collection, e.g. `/apis/apps/v1/namespaces/ns/deployments`.
    pub fn collection_path(&self) -> Result<String> {
        self.resource.collection_path(self.namespace.as_deref())
    }

    /// The path of the object `name`.
    pub fn object_path(&self, name: &str) -> Result<String> {
        self.resource.object_path(self.namespace.as_deref(), name)
    }

    /// A dynamic lister-watcher of the same collection, over the same connections: for
    /// [`metadata_only`](HttpListerWatcher::metadata_only) caches or local field selectors.
    pub fn lister_watcher(&self) -> Result<HttpListerWatcher> {
        let lw = HttpListerWatcher::with_client(self.client.clone(), &self.collection_path()?)?;
        Ok(if self.metadata_only {
            lw.metadata_only()
        } else {
            lw
        })
    }

    /// [`lister_watcher`](Self::lister_watcher) remembering its watches' server in this
    /// handle, so that [`ListerWatcher::watch_idle`] blames the right one.
    fn tracked_lister_watcher(&self) -> Result<HttpListerWatcher> {
        Ok(self
            .lister_watcher()?
            .with_watch_server(Arc::clone(&self.watch_server)))
    }

    /// The path of `name`'s subresource `sub` (`status`, `scale`).
    pub(crate) fn subresource_path(&self, name: &str, sub: &str) -> Result<String> {
        Ok(format!("{}/{sub}", self.object_path(name)?))
    }

    /// The collection objects are created in: a namespaced kind needs the namespace.
    fn create_path(&self) -> Result<String> {
        self.refuse_metadata_only("create")?;
        if self.resource.namespaced && self.namespace.is_none() {
            return Err(Error::Request(format!(
                "{} is namespaced: create through Api::namespaced, not Api::all",
                self.resource.kind
            )));
        }
        self.collection_path()
    }
}

impl<K> Api<K> {
    /// Writes of whole objects make no sense in metadata-only form.
    pub(crate) fn refuse_metadata_only(&self, what: &str) -> Result<()> {
        if self.metadata_only {
            return Err(Error::Request(format!(
                "a metadata-only Api cannot {what} {} objects (it would need the whole object)",
                self.resource.kind
            )));
        }
        Ok(())
    }
}

pub(crate) fn decode<K: DeserializeOwned>(bytes: &[u8]) -> Result<K> {
    serde_json::from_slice(bytes).map_err(Error::Typed)
}

impl<K: Resource + DeserializeOwned> Api<K> {
    /// The object `name`; a 404 is an error (see [`get_opt`](Self::get_opt)).
    pub async fn get(&self, name: &str) -> Result<K> {
        let path = self.object_path(name)?;
        let accept = if self.metadata_only { METADATA } else { JSON };
        decode(
            &self
                .client
                .call_accepting(Method::GET, &path, "", None, accept)
                .await?,
        )
    }

    /// The object `name`, `None` when the server says 404.
    pub async fn get_opt(&self, name: &str) -> Result<Option<K>> {
        match self.get(name).await {
            Ok(k) => Ok(Some(k)),
            Err(e) if e.code() == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One page of the collection (follow `continue_token` for the next; the
    /// [`watcher`](crate::watcher) does the paging, relists and watches for a cache).
    pub async fn list(&self, request: &ListRequest) -> Result<Page<K>> {
        ListerWatcher::list(self, request).await
    }

    /// A watch of the collection.
    pub async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<K>> {
        ListerWatcher::watch(self, request).await
    }

    /// Patches the object `name`; the server's copy.
    pub async fn patch<P: Serialize>(
        &self,
        name: &str,
        patch: &Patch<P>,
        params: &PatchParams,
    ) -> Result<K> {
        let path = self.object_path(name)?;
        let (query, body) = patch_request(patch, params)?;
        decode(
            &self
                .client
                .call(Method::PATCH, &path, &query, Some(body))
                .await?,
        )
    }

    /// Deletes the object `name` with options (propagation, preconditions, dry run, grace
    /// period); `false` when it was already gone. A precondition that does not hold is a
    /// 409 Conflict error.
    ///
    /// ```no_run
    /// # async fn demo(cms: listwatch_client::Api<k8s_openapi::api::core::v1::ConfigMap>, uid: String) -> listwatch_client::Result<()> {
    /// use listwatch_client::{DeleteParams, PropagationPolicy};
    /// // Only the object read earlier (not a successor of the same name), dependents first.
    /// let params = DeleteParams::default()
    ///     .precondition_uid(uid)
    ///     .propagation(PropagationPolicy::Foreground);
    /// cms.delete_with("settings", &params).await?;
    /// # Ok(()) }
    /// ```
    pub async fn delete_with(&self, name: &str, params: &DeleteParams) -> Result<bool> {
        let path = self.object_path(name)?;
        let body = params.body().map(|b| json_body(&b)).transpose()?;
        match self
            .client
            .call(Method::DELETE, &path, &params.query(), body)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes the object `name`; `false` when it was already gone.
    pub async fn delete(&self, name: &str) -> Result<bool> {
        let path = self.object_path(name)?;
        match self.client.call(Method::DELETE, &path, "", None).await {
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(404) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl<K: Resource + Serialize + DeserializeOwned> Api<K> {
    /// Creates `object` (in this handle's namespace); the server's copy.
    pub async fn create(&self, object: &K) -> Result<K> {
        self.create_with(object, &PostParams::default()).await
    }

    /// Creates `object` with options (`dryRun`, `fieldManager`); the server's copy (for a dry
    /// run, what would have been stored).
    ///
    /// ```no_run
    /// # async fn demo(cms: listwatch_client::Api<k8s_openapi::api::core::v1::ConfigMap>, cm: k8s_openapi::api::core::v1::ConfigMap) -> listwatch_client::Result<()> {
    /// use listwatch_client::PostParams;
    /// let would_be = cms.create_with(&cm, &PostParams::default().dry_run()).await?;
    /// # let _ = would_be; Ok(()) }
    /// ```
    pub async fn create_with(&self, object: &K, params: &PostParams) -> Result<K> {
        let path = self.create_path()?;
        decode(
            &self
                .client
                .call(
                    Method::POST,
                    &path,
                    &params.query(),
                    Some(json_body(object)?),
                )
                .await?,
        )
    }

    /// Server-side apply of `object` as `field_manager` (`force`: take over fields other
    /// managers own); the server's copy. The object must carry `apiVersion` and `kind`
    /// (k8s-openapi types serialize them).
    ///
    /// ```no_run
    /// # async fn demo(cms: listwatch_client::Api<k8s_openapi::api::core::v1::ConfigMap>) -> listwatch_client::Result<()> {
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.name = Some("settings".into());
    /// cm.data = Some([("mode".to_owned(), "fast".to_owned())].into());
    /// let applied = cms.apply("settings", &cm, "my-operator", true).await?;
    /// # let _ = applied; Ok(()) }
    /// ```
    pub async fn apply(
        &self,
        name: &str,
        object: &K,
        field_manager: &str,
        force: bool,
    ) -> Result<K> {
        let mut params = PatchParams::apply(field_manager);
        params.force = force;
        self.patch(name, &Patch::Apply(object), &params).await
    }

    /// Replaces the object `name` with `object`, whose `metadata.resourceVersion` is the
    /// precondition (a 409 Conflict means it changed meanwhile); the server's copy.
    pub async fn replace(&self, name: &str, object: &K) -> Result<K> {
        self.refuse_metadata_only("replace")?;
        let path = self.object_path(name)?;
        decode(
            &self
                .client
                .call(Method::PUT, &path, "", Some(json_body(object)?))
                .await?,
        )
    }
}

/// An `Api` lists and watches its collection, decoding `K` straight from the wire: hand it to
/// [`watcher`](crate::watcher), [`Reflector`](crate::Reflector) or
/// [`Informer::spawn`](crate::Informer::spawn).
#[async_trait]
impl<K: Resource + DeserializeOwned> ListerWatcher for Api<K> {
    type Object = K;

    async fn list(&self, request: &ListRequest) -> Result<Page<K>> {
        self.lister_watcher()?.typed::<K>().list(request).await
    }

    async fn list_stream(&self, request: &ListRequest) -> Result<PageStream<K>> {
        self.lister_watcher()?
            .typed::<K>()
            .list_stream(request)
            .await
    }

    async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<K>> {
        self.tracked_lister_watcher()?
            .typed::<K>()
            .watch(request)
            .await
    }

    fn watch_idle(&self) {
        if let Ok(lw) = self.tracked_lister_watcher() {
            lw.typed::<K>().watch_idle();
        }
    }
}
