//! [`ListerWatcher`]: the two calls a reflector makes, list a page and open a watch.
//!
//! Implementations: listwatch-client's `HttpListerWatcher` and `Api<K>` for any
//! Kubernetes-style server, in-process ones over a storage backend (the cacher's), and [`Typed`], which turns
//! a lister-watcher of dynamic [`Object`]s into one of a serde type.
//!
//! Contract an implementation keeps:
//! - `list` returns one page; its `resource_version` is the version the list reflects and
//!   `continue_token` is set when more pages remain;
//! - `list_stream` returns the same page one object at a time ([`PageStream`]): the objects,
//!   then exactly one [`PageItem::End`] with the version and token, or an `Err` after which
//!   the stream ends — except [`Error::SkippedObject`], one object that does not decode into
//!   the type, after which the stream goes on (in a [`WatchStream`] too). The reflector lists through it, so that an implementation that decodes
//!   objects as their bytes arrive (the HTTP ones) lets the store drop each unchanged copy
//!   before the next is decoded, instead of holding the whole page; the default collects
//!   [`list`](ListerWatcher::list);
//! - `watch` returns a stream of events in resource-version order; a server `ERROR` event is
//!   an `Err(Error::Api(..))` item, after which the stream ends;
//! - resource versions are opaque strings, carried exactly as the server sent them (client-go's
//!   and kube-rs's rule): `None` is "unset" (`""`, a consistent read), `Some("0")` is `"0"`
//!   (any version will do), any other value is one the server gave and is sent back
//!   unchanged. Nothing here parses or orders them, so a server whose versions are not
//!   numbers works; a server's own numeric versions stay with the server (the cacher's
//!   storage, [`listwatch_api::rv`]).

use std::marker::PhantomData;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use listwatch_api::{FieldSelector, LabelSelector, Object, ShardSelector};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::resource::Resource;

/// `resourceVersionMatch` of a list or streaming watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VersionMatch {
    /// Data at least as new as the version.
    NotOlderThan,
    /// Data exactly at the version.
    Exact,
}

impl VersionMatch {
    /// The wire value.
    pub fn as_str(self) -> &'static str {
        match self {
            VersionMatch::NotOlderThan => "NotOlderThan",
            VersionMatch::Exact => "Exact",
        }
    }
}

/// Parameters of one list call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListRequest {
    /// `None`: unset (consistent read); `Some("0")`: any version; `Some(rv)`: not older than
    /// `rv`, a version the server gave. Never set together with `continue_token`.
    pub resource_version: Option<String>,
    /// How to read `resource_version`.
    pub resource_version_match: Option<VersionMatch>,
    /// Page size.
    pub limit: Option<u32>,
    /// Token of the next page.
    pub continue_token: Option<String>,
    /// Label selector.
    pub label_selector: LabelSelector,
    /// Field selector.
    pub field_selector: FieldSelector,
    /// Shard selector (`shardSelector`; empty: none).
    pub shard_selector: ShardSelector,
}

/// Parameters of one watch call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchRequest {
    /// Start after this version (`None` / `Some("0")`: see the wire semantics).
    pub resource_version: Option<String>,
    /// Set with `send_initial_events` (always `NotOlderThan` then).
    pub resource_version_match: Option<VersionMatch>,
    /// Ask the server for BOOKMARK events.
    pub allow_bookmarks: bool,
    /// Send the current state first, ending with an initial-events-end bookmark.
    pub send_initial_events: bool,
    /// Server-side timeout of the watch, in seconds.
    pub timeout_seconds: Option<u64>,
    /// Label selector.
    pub label_selector: LabelSelector,
    /// Field selector.
    pub field_selector: FieldSelector,
    /// Shard selector (`shardSelector`; empty: none).
    pub shard_selector: ShardSelector,
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<K> {
    /// The objects of this page.
    pub items: Vec<K>,
    /// The version the list reflects, as sent (`""` when the server sent none).
    pub resource_version: String,
    /// Token of the next page; `None` on the last.
    pub continue_token: Option<String>,
}

/// One item of a page listed object by object ([`ListerWatcher::list_stream`]).
#[derive(Debug, Clone, PartialEq)]
pub enum PageItem<K> {
    /// The next object of the page.
    Object(K),
    /// The page is complete: the last item of a [`PageStream`].
    End(PageEnd),
}

/// What a page says about itself, known once it has been read (a server may send it after
/// the objects).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageEnd {
    /// The version the list reflects, as sent (`""` when the server sent none).
    pub resource_version: String,
    /// Token of the next page; `None` on the last.
    pub continue_token: Option<String>,
}

/// A page listed object by object: objects, then [`PageItem::End`]; dropping it abandons the
/// list.
pub type PageStream<K> = BoxStream<'static, Result<PageItem<K>>>;

/// A [`PageStream`] over a page already in memory.
pub fn page_stream<K: Send + 'static>(page: Page<K>) -> PageStream<K> {
    let end = PageEnd {
        resource_version: page.resource_version,
        continue_token: page.continue_token,
    };
    futures::stream::iter(
        page.items
            .into_iter()
            .map(|o| Ok(PageItem::Object(o)))
            .chain(std::iter::once(Ok(PageItem::End(end)))),
    )
    .boxed()
}

/// Reads a whole [`PageStream`] into a [`Page`]; a stream that ends without its
/// [`PageItem::End`] is an error.
pub async fn collect_page<K>(mut stream: PageStream<K>) -> Result<Page<K>> {
    let mut items = Vec::new();
    while let Some(item) = stream.next().await {
        let item = match item {
            Err(e) if e.is_skipped_object() => {
                tracing::warn!(error = %e, "list: object skipped");
                continue;
            }
            item => item?,
        };
        match item {
            PageItem::Object(o) => items.push(o),
            PageItem::End(end) => {
                return Ok(Page {
                    items,
                    resource_version: end.resource_version,
                    continue_token: end.continue_token,
                });
            }
        }
    }
    // Cut short: a transport failure to retry, not an answer that does not decode.
    Err(Error::Http(Box::new(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "list ended before its end",
    ))))
}

/// One decoded watch event.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<K> {
    /// An object appeared or entered the selection.
    Added(K),
    /// An object changed.
    Modified(K),
    /// An object went away or left the selection (its last state).
    Deleted(K),
    /// Progress: every change up to `resource_version` has been delivered.
    Bookmark {
        /// The version reached, as sent.
        resource_version: String,
        /// Whether this bookmark ends a streaming list's initial events.
        initial_events_end: bool,
    },
}

impl<K> WatchEvent<K> {
    /// Converts the object of an event.
    pub fn try_map<T, E>(self, f: impl FnOnce(K) -> Result<T, E>) -> Result<WatchEvent<T>, E> {
        Ok(match self {
            WatchEvent::Added(k) => WatchEvent::Added(f(k)?),
            WatchEvent::Modified(k) => WatchEvent::Modified(f(k)?),
            WatchEvent::Deleted(k) => WatchEvent::Deleted(f(k)?),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            },
        })
    }
}

/// A stream of watch events; dropping it ends the watch.
pub type WatchStream<K> = BoxStream<'static, Result<WatchEvent<K>>>;

/// Lists pages of objects and opens watches on one collection.
///
/// # Cancel safety
///
/// Both calls are cancel safe: dropping the future abandons the request and changes nothing
/// (implementations must not keep state between calls that a dropped call could corrupt).
#[async_trait]
pub trait ListerWatcher: Send + Sync + 'static {
    /// The object type.
    type Object: Resource;

    /// Lists one page.
    async fn list(&self, request: &ListRequest) -> Result<Page<Self::Object>>;

    /// Lists one page object by object (see [`PageStream`]); errors of the request itself
    /// (410, 429, refused) are returned here, later ones (a cut body, an undecodable object)
    /// on the stream. The default collects [`list`](Self::list) first; an implementation
    /// that can decode as the bytes arrive should override it (the reflector lists through
    /// this, and a relist's peak memory depends on it).
    async fn list_stream(&self, request: &ListRequest) -> Result<PageStream<Self::Object>> {
        Ok(page_stream(self.list(request).await?))
    }

    /// Opens a watch. Errors before the first byte (e.g. 410, 429, refused) are returned
    /// here; errors later arrive on the stream.
    async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<Self::Object>>;

    /// Called by the reflector when the last watch opened here delivered nothing, not even a
    /// bookmark, past its idle deadline: the connection under it is taken as dead. An
    /// implementation with several servers moves off that watch's server (the HTTP one
    /// does); the default does nothing.
    fn watch_idle(&self) {}
}

/// A lister-watcher of `K` over one of dynamic [`Object`]s: each object is decoded with serde.
///
/// ```
/// # use listwatch_api::Object;
/// # use listwatch_runtime::{HasMetadata, ListerWatcher, Typed};
/// # #[derive(Clone, serde::Deserialize)] struct MyPod { metadata: listwatch_api::ObjectMeta }
/// # impl HasMetadata for MyPod { type Metadata = listwatch_api::ObjectMeta; fn metadata(&self) -> &listwatch_api::ObjectMeta { &self.metadata } }
/// // `pods` lists and watches dynamic objects (listwatch-client's HttpListerWatcher, say).
/// fn typed<L: ListerWatcher<Object = Object>>(pods: L) -> impl ListerWatcher<Object = MyPod> {
///     Typed::<_, MyPod>::new(pods)
/// }
/// ```
pub struct Typed<L, K> {
    inner: L,
    _k: PhantomData<fn() -> K>,
}

impl<L, K> Typed<L, K> {
    /// Wraps a dynamic lister-watcher.
    pub fn new(inner: L) -> Self {
        Self {
            inner,
            _k: PhantomData,
        }
    }
}

/// `o` as a `K`; one that does not fit `K` is an [`Error::SkippedObject`] (the list or watch
/// goes on without it).
fn decode<K: DeserializeOwned>(o: Object) -> Result<K> {
    o.deserialize().map_err(|e| Error::SkippedObject {
        key: Resource::key(&o).to_string(),
        resource_version: Resource::resource_version(&o).into_owned(),
        source: e,
    })
}

#[async_trait]
impl<L, K> ListerWatcher for Typed<L, K>
where
    L: ListerWatcher<Object = Object>,
    K: Resource + DeserializeOwned,
{
    type Object = K;

    async fn list(&self, request: &ListRequest) -> Result<Page<K>> {
        let page = self.inner.list(request).await?;
        let mut items = Vec::with_capacity(page.items.len());
        for o in page.items {
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

    async fn list_stream(&self, request: &ListRequest) -> Result<PageStream<K>> {
        let items = self.inner.list_stream(request).await?;
        Ok(items
            .and_then(|item| {
                futures::future::ready(match item {
                    PageItem::Object(o) => decode(o).map(PageItem::Object),
                    PageItem::End(end) => Ok(PageItem::End(end)),
                })
            })
            .boxed())
    }

    fn watch_idle(&self) {
        self.inner.watch_idle();
    }

    async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<K>> {
        let events = self.inner.watch(request).await?;
        Ok(events
            .and_then(|e| {
                futures::future::ready(match e {
                    // The object is gone: one that does not decode still names what to remove.
                    WatchEvent::Deleted(o) => decode(o)
                        .map(WatchEvent::Deleted)
                        .map_err(Error::for_deleted),
                    e => e.try_map(decode),
                })
            })
            .boxed())
    }
}
