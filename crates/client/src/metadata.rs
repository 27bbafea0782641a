//! [`PartialObjectMetadata<K>`]: the metadata-only form of a `K` (`meta.k8s.io/v1`
//! `PartialObjectMetadata`), as client-go's metadata informers and kube-rs's
//! `PartialObjectMeta<K>` use it.
//!
//! A cache of a large collection that only needs names, labels, annotations, owner
//! references or finalizers holds and decodes a fraction of each object: the server sends
//! `apiVersion`, `kind` and `metadata` and nothing else. `PartialObjectMetadata<K>` is a
//! [`Resource`](crate::Resource) (store key, resource version) and, when `K` is a
//! [`ResourceType`], one of the same collection with [`ResourceType::METADATA_ONLY`] set, so
//! `Api::<PartialObjectMetadata<Pod>>::all(client)` (or `Api::<Pod>::all(client).metadata()`)
//! lists, watches and gets metadata only, and a [`Reflector`](crate::Reflector) or
//! [`Informer`](crate::Informer) over that `Api` caches it.
//!
//! Invariants: the type carries no field outside `apiVersion`, `kind` and `metadata`, so
//! nothing else is kept even if a server sends more; `K` only names the kind (its path, its
//! scope and its metadata type), no `K` value is ever built.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::HasMetadata;
use crate::api_resource::ResourceType;

/// The `apiVersion` of a metadata-only object as the server sends it.
pub const PARTIAL_OBJECT_METADATA_API_VERSION: &str = "meta.k8s.io/v1";
/// The `kind` of a metadata-only object as the server sends it.
pub const PARTIAL_OBJECT_METADATA_KIND: &str = "PartialObjectMetadata";

/// The metadata of a `K` without the rest of it (`meta.k8s.io/v1` `PartialObjectMetadata`).
///
/// ```no_run
/// use k8s_openapi::api::core::v1::Pod;
/// use listwatch_client::{
///     Api, HttpClient, HttpConfig, Informer, InformerConfig, PartialObjectMetadata,
/// };
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let client = HttpClient::new(HttpConfig::from_default_kubeconfig()?)?;
/// let pods = Api::<PartialObjectMetadata<Pod>>::all(client);
/// let informer = Informer::spawn(pods, InformerConfig::default());
/// informer.wait_until_synced().await?; // fails (not hangs) on a 403
/// for pod in informer.store().list() {
///     // metadata only: k8s-openapi's ObjectMeta, as on a Pod
///     println!("{:?} {:?}", pod.metadata.name, pod.metadata.labels);
/// }
/// # Ok(()) }
/// ```
pub struct PartialObjectMetadata<K: HasMetadata> {
    /// `meta.k8s.io/v1` from the server (the full object's when decoded from one).
    pub api_version: String,
    /// `PartialObjectMetadata` from the server (the full object's when decoded from one).
    pub kind: String,
    /// The object's metadata, of the same type as on a `K`.
    pub metadata: K::Metadata,
    _k: PhantomData<fn() -> K>,
}

impl<K: HasMetadata> PartialObjectMetadata<K> {
    /// A metadata-only object with the server's `apiVersion` and `kind`.
    pub fn new(metadata: K::Metadata) -> Self {
        Self {
            api_version: PARTIAL_OBJECT_METADATA_API_VERSION.to_owned(),
            kind: PARTIAL_OBJECT_METADATA_KIND.to_owned(),
            metadata,
            _k: PhantomData,
        }
    }
}

impl<K: HasMetadata> HasMetadata for PartialObjectMetadata<K> {
    type Metadata = K::Metadata;
    fn metadata(&self) -> &K::Metadata {
        &self.metadata
    }
}

impl<K> ResourceType for PartialObjectMetadata<K>
where
    K: ResourceType + HasMetadata,
    K::Metadata: Clone + Send + Sync + 'static,
{
    type Scope = K::Scope;
    fn group() -> Cow<'static, str> {
        K::group()
    }
    fn version() -> Cow<'static, str> {
        K::version()
    }
    fn kind() -> Cow<'static, str> {
        K::kind()
    }
    fn plural() -> Cow<'static, str> {
        K::plural()
    }
    const METADATA_ONLY: bool = true;
}

impl<K: HasMetadata> Clone for PartialObjectMetadata<K>
where
    K::Metadata: Clone,
{
    fn clone(&self) -> Self {
        Self {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            metadata: self.metadata.clone(),
            _k: PhantomData,
        }
    }
}

impl<K: HasMetadata> fmt::Debug for PartialObjectMetadata<K>
where
    K::Metadata: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartialObjectMetadata")
            .field("api_version", &self.api_version)
            .field("kind", &self.kind)
            .field("metadata", &self.metadata)
            .finish()
    }
}

impl<K: HasMetadata> PartialEq for PartialObjectMetadata<K>
where
    K::Metadata: PartialEq,
{
    fn eq(&self, other: &Self) -> bool {
        self.api_version == other.api_version
            && self.kind == other.kind
            && self.metadata == other.metadata
    }
}

/// The wire form, read: `apiVersion`, `kind`, `metadata`; anything else is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire<M> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    metadata: M,
}

/// The wire form, written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireRef<'a, M> {
    api_version: &'a str,
    kind: &'a str,
    metadata: &'a M,
}

impl<K: HasMetadata> Serialize for PartialObjectMetadata<K>
where
    K::Metadata: Serialize,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        WireRef {
            api_version: &self.api_version,
            kind: &self.kind,
            metadata: &self.metadata,
        }
        .serialize(serializer)
    }
}

impl<'de, K: HasMetadata> Deserialize<'de> for PartialObjectMetadata<K>
where
    K::Metadata: DeserializeOwned,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::<K::Metadata>::deserialize(deserializer)?;
        Ok(Self {
            api_version: wire.api_version,
            kind: wire.kind,
            metadata: wire.metadata,
            _k: PhantomData,
        })
    }
}
