//! The in-process metadata-only lister-watcher: what a metadata informer inside the server
//! (the garbage collector's) lists and watches, holding and receiving an object's metadata
//! only.
//!
//! It lists and watches like [`StorageListerWatcher`] (whose requests, recovery rules and
//! one-to-one event translation it reuses unchanged), but hands its consumer each object's
//! `PartialObjectMetadata` projection ([`listwatch_api::Object::partial_metadata_json`])
//! decoded into the consumer's type `K`, never the object: the consumer's store holds what `K`
//! keeps of the metadata, and no event it is given refers to the cache's objects.
//!
//! Invariants:
//! - computed once per event for all metadata consumers: a watch event's object is the
//!   dispatcher's shared form, so its projection is built by the first consumer that asks —
//!   this lister-watcher, or an HTTP `PartialObjectMetadata` watcher of the same event — and
//!   the others reuse those bytes; the event's whole wire JSON is not built for it;
//! - spec and status are never decoded or copied: `K` is decoded from the projection, which
//!   holds the metadata member alone;
//! - order and completeness are the underlying watch's: one event out per event in, in the
//!   same order; an object whose projection or decoding fails is an
//!   [`ClientError::SkippedObject`] (the reflector relists a list with one, and a watch goes
//!   on), as [`listwatch_runtime::Typed`] reports one.

use std::marker::PhantomData;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use listwatch_api::Object;
use listwatch_runtime::{
    Error as ClientError, ListRequest, ListerWatcher, Page, Resource, WatchRequest, WatchStream,
};
use serde::de::DeserializeOwned;

use crate::lw::StorageListerWatcher;

/// Lists and watches one collection of a storage backend (or of a cacher), giving its
/// consumer each object's metadata only, decoded into `K` (see the module doc).
pub struct MetadataListerWatcher<K> {
    inner: StorageListerWatcher,
    _k: PhantomData<fn() -> K>,
}

impl<K> MetadataListerWatcher<K> {
    /// Metadata of everything `inner` lists and watches.
    pub fn new(inner: StorageListerWatcher) -> Self {
        Self {
            inner,
            _k: PhantomData,
        }
    }
}

impl<K> Clone for MetadataListerWatcher<K> {
    fn clone(&self) -> Self {
        Self::new(self.inner.clone())
    }
}

impl<K> std::fmt::Debug for MetadataListerWatcher<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetadataListerWatcher")
            .field("inner", &self.inner)
            .finish()
    }
}

/// `o`'s metadata as a `K`.
fn decode<K: DeserializeOwned>(o: &Object) -> listwatch_runtime::Result<K> {
    let skipped = |source| ClientError::SkippedObject {
        key: Resource::key(o).to_string(),
        resource_version: Resource::resource_version(o).into_owned(),
        source,
    };
    let projection = o
        .partial_metadata_json()
        .map_err(|e| skipped(<serde_json::Error as serde::de::Error>::custom(e)))?;
    serde_json::from_slice(&projection).map_err(skipped)
}

#[async_trait]
impl<K> ListerWatcher for MetadataListerWatcher<K>
where
    K: Resource + DeserializeOwned,
{
    type Object = K;

    async fn list(&self, request: &ListRequest) -> listwatch_runtime::Result<Page<K>> {
        let page = self.inner.list(request).await?;
        let mut items = Vec::with_capacity(page.items.len());
        for o in &page.items {
            match decode(o) {
                Ok(k) => items.push(k),
                Err(e) => tracing::warn!(error = %e, "list: object skipped"),
            }
        }
        Ok(Page {
            items,
            resource_version: page.resource_version,
            continue_token: page.continue_token,
        })
    }

    async fn watch(&self, request: &WatchRequest) -> listwatch_runtime::Result<WatchStream<K>> {
        let events = self.inner.watch(request).await?;
        Ok(events
            .and_then(|e| futures::future::ready(e.try_map(|o| decode(&o))))
            .boxed())
    }
}
