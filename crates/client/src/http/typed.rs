//! [`HttpTyped`]: a lister-watcher of a serde type decoded straight from the wire.
//!
//! A list body is parsed object by object as it arrives, each straight into `K`; a watch
//! frame once into a JSON tree, then into `K`. ([`Typed`](crate::Typed) over an [`HttpListerWatcher`] goes through
//! [`Object`](listwatch_api::Object): a JSON tree, the object's bytes, then `K`.)

use std::marker::PhantomData;

use async_trait::async_trait;
use futures::StreamExt;
use serde::de::DeserializeOwned;

use listwatch_api::ObjectMeta;

use super::{HttpListerWatcher, decode};
use crate::Resource;
use crate::{Error, Result};
use crate::{
    ListRequest, ListerWatcher, Page, PageStream, WatchRequest, WatchStream, collect_page,
};

/// A [`ListerWatcher`] of `K` over HTTP, decoding `K` from the wire with serde (see
/// [`HttpListerWatcher::typed`]).
pub struct HttpTyped<K> {
    inner: HttpListerWatcher,
    _k: PhantomData<fn() -> K>,
}

impl<K> Clone for HttpTyped<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _k: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for HttpTyped<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HttpTyped").field(&self.inner).finish()
    }
}

impl HttpListerWatcher {
    /// This collection as `K`s decoded straight from the wire (each list item parsed once).
    pub fn typed<K: Resource + DeserializeOwned>(self) -> HttpTyped<K> {
        HttpTyped {
            inner: self,
            _k: PhantomData,
        }
    }
}

/// The metadata of a list item, read to name an item that does not decode.
#[derive(serde::Deserialize)]
struct MetaOnly {
    metadata: ObjectMeta,
}

/// An item whose metadata reads is skipped (the list goes on); one without is a broken list.
fn skipped_or_typed(item: &[u8], e: serde_json::Error) -> Error {
    match serde_json::from_slice::<MetaOnly>(item) {
        Ok(m) => Error::skipped_object(&m.metadata, e),
        Err(_) => Error::Typed(e),
    }
}

/// A list item that is not a valid dynamic [`Object`](listwatch_api::Object) (listwatch's
/// stored form: a numeric version among other rules): skipped and reported like a typed item
/// that does not decode when its metadata reads, else a broken list.
pub(crate) fn skipped_or_dynamic_item(item: &[u8], e: &dyn std::fmt::Display) -> Error {
    match serde_json::from_slice::<MetaOnly>(item) {
        Ok(m) => Error::skipped_object(&m.metadata, serde::de::Error::custom(e)),
        Err(_) => Error::Decode(format!("list item: {e}")),
    }
}

/// [`skipped_or_dynamic_item`] for a watch event's object, `meta` its `metadata` (read
/// before the object was consumed).
pub(crate) fn skipped_or_dynamic_event(
    meta: Option<serde_json::Value>,
    e: &dyn std::fmt::Display,
) -> Error {
    match meta.and_then(|m| serde_json::from_value::<ObjectMeta>(m).ok()) {
        Some(meta) => Error::skipped_object(&meta, serde::de::Error::custom(e)),
        None => Error::Decode(format!("watch object: {e}")),
    }
}

#[async_trait]
impl<K: Resource + DeserializeOwned> ListerWatcher for HttpTyped<K> {
    type Object = K;

    async fn list(&self, request: &ListRequest) -> Result<Page<K>> {
        collect_page(self.list_stream(request).await?).await
    }

    async fn list_stream(&self, request: &ListRequest) -> Result<PageStream<K>> {
        self.inner
            .list_items(request, |item| {
                serde_json::from_slice(item).map_err(|e| skipped_or_typed(item, e))
            })
            .await
    }

    async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<K>> {
        let body = self.inner.open_watch(request).await?;
        Ok(decode::watch_events_with(body, |v| {
            let meta = v.get("metadata").cloned();
            serde_json::from_value(v).map_err(|e| {
                match meta.and_then(|m| serde_json::from_value::<ObjectMeta>(m).ok()) {
                    Some(meta) => Error::skipped_object(&meta, e),
                    None => Error::Typed(e),
                }
            })
        })
        .boxed())
    }

    fn watch_idle(&self) {
        self.inner.blame_watch_server();
    }
}
