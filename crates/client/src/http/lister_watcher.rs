//! [`HttpListerWatcher`]: the [`ListerWatcher`] of one collection over an [`HttpClient`]:
//! one page per list call, watches decoded frame by frame as the chunks arrive.
//!
//! Invariants: a list's body is read under the client's request deadline and its size bound;
//! a watch's body is bounded per frame and by the reflector's idle deadline; a watch cut
//! mid-stream, or found idle past its deadline, counts as a failure of the server it was
//! opened on (so the next one goes to another server).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use http::Method;
use listwatch_api::{Object, SelectableFields};

use super::{HttpClient, HttpConfig, client, decode, list_body};
use crate::Result;
use crate::{
    ListRequest, ListerWatcher, Page, PageStream, WatchRequest, WatchStream, collect_page,
};

/// `Accept` of a metadata-only list (upstream's metadata client asks for exactly this kind).
pub(crate) const METADATA_LIST: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
/// `Accept` of a metadata-only watch or object: each object is a `PartialObjectMetadata`.
pub(crate) const METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
/// The three above asking the server to leave `metadata.managedFields` out (upstream's
/// KEP-5958 `drop` parameter; a server without it ignores the parameter).
const JSON_DROP: &str = "application/json;drop=metadata.managedFields";
const METADATA_LIST_DROP: &str =
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1;drop=metadata.managedFields";
const METADATA_DROP: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;drop=metadata.managedFields";

/// A [`ListerWatcher`] of dynamic [`Object`]s over HTTP. Wrap it in
/// [`Typed`](crate::Typed) for a serde type.
#[derive(Clone)]
pub struct HttpListerWatcher {
    pub(crate) client: HttpClient,
    /// The collection path from the server root, without a query.
    path: String,
    fields: SelectableFields,
    /// Lists and watches ask for `PartialObjectMetadata` (see [`Self::metadata_only`]).
    metadata_only: bool,
    /// Objects without `metadata.managedFields` (see [`Self::without_managed_fields`]).
    drop_managed_fields: bool,
    /// The server the last watch was opened on, blamed when the reflector finds that watch
    /// idle past its deadline ([`ListerWatcher::watch_idle`]); `usize::MAX` before any.
    watch_server: Arc<AtomicUsize>,
}

impl std::fmt::Debug for HttpListerWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpListerWatcher")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl HttpListerWatcher {
    /// A lister-watcher of the collection at `path`, e.g. `/api/v1/pods` or
    /// `/apis/apps/v1/namespaces/ns/deployments`, with a connection pool of its own; make
    /// several from one [`HttpClient`] to share one.
    pub fn new(config: HttpConfig, path: &str) -> Result<Self> {
        Self::with_client(HttpClient::new(config)?, path)
    }

    /// A lister-watcher of the collection at `path` over `client`'s connections.
    pub fn with_client(client: HttpClient, path: &str) -> Result<Self> {
        let path = client.path(path)?;
        Ok(Self {
            client,
            path,
            fields: SelectableFields::none(),
            metadata_only: false,
            drop_managed_fields: false,
            watch_server: Arc::new(AtomicUsize::new(usize::MAX)),
        })
    }

    /// Declares the resource's selectable fields, so stored objects can be matched against
    /// field selectors locally (e.g. `spec.nodeName` for pods).
    #[must_use]
    pub fn with_selectable_fields(mut self, fields: SelectableFields) -> Self {
        self.fields = fields;
        self
    }

    /// Lists and watches of metadata only, as client-go's metadata informers and kube-rs's
    /// `metadata_watcher`: the server answers `meta.k8s.io/v1` `PartialObjectMetadataList`
    /// and `PartialObjectMetadata` (apiVersion, kind and metadata; no spec or status), so a
    /// cache of a large collection holds and decodes a fraction of it. Labels, annotations,
    /// owner references and finalizers are all there; a field selector is still applied by
    /// the server, but fields outside `metadata` cannot be matched locally.
    #[must_use]
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// Objects without `metadata.managedFields`: lists and watches send
    /// `Accept: ...;drop=metadata.managedFields` (upstream's KEP-5958 opt-out, so the server
    /// neither encodes nor sends them), and what still carries them (a server that ignores
    /// the parameter) is stripped here as it is decoded, as client-go's defensive strip.
    #[must_use]
    pub fn without_managed_fields(mut self) -> Self {
        self.drop_managed_fields = true;
        self
    }

    /// Remembers its watches' server in `cell` (shared with an [`Api`] handle).
    pub(crate) fn with_watch_server(mut self, cell: Arc<AtomicUsize>) -> Self {
        self.watch_server = cell;
        self
    }

    /// A GET of the collection; the response and the index of the server that gave it.
    pub(crate) async fn get(
        &self,
        query: String,
    ) -> Result<(hyper::Response<hyper::body::Incoming>, usize)> {
        let uri = if query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, query)
        };
        // Lists and watch-lists may come gzipped (kube-apiserver 1.37 gzips a watch-list for
        // a client that accepts it, `WatchListCompression`, one gzip member per flush, and so
        // does this server); a plain watch is asked for as is, as no server compresses one.
        let watch = query.starts_with("watch=");
        let compressible = !watch || query.contains("sendInitialEvents=true");
        let accept = match (self.metadata_only, !watch, self.drop_managed_fields) {
            (false, _, false) => client::JSON,
            (true, true, false) => METADATA_LIST,
            (true, false, false) => METADATA,
            (false, _, true) => JSON_DROP,
            (true, true, true) => METADATA_LIST_DROP,
            (true, false, true) => METADATA_DROP,
        };
        self.client
            .request(Method::GET, &uri, None, compressible, accept)
            .await
    }
}

fn query(pairs: &[(&str, Option<String>)]) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v {
            q.append_pair(k, v);
        }
    }
    q.finish()
}

fn selector(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// The query of a list request (exposed for tests of the wire shape).
pub(crate) fn list_query(r: &ListRequest) -> String {
    query(&[
        ("labelSelector", selector(r.label_selector.to_string())),
        ("fieldSelector", selector(r.field_selector.to_string())),
        ("shardSelector", selector(r.shard_selector.canonical())),
        ("limit", r.limit.filter(|l| *l > 0).map(|l| l.to_string())),
        ("continue", r.continue_token.clone()),
        ("resourceVersion", r.resource_version.clone()),
        (
            "resourceVersionMatch",
            r.resource_version_match.map(|m| m.as_str().to_owned()),
        ),
    ])
}

/// The query of a watch request.
pub(crate) fn watch_query(r: &WatchRequest) -> String {
    query(&[
        ("watch", Some("1".into())),
        ("labelSelector", selector(r.label_selector.to_string())),
        ("fieldSelector", selector(r.field_selector.to_string())),
        ("shardSelector", selector(r.shard_selector.canonical())),
        ("resourceVersion", r.resource_version.clone()),
        (
            "resourceVersionMatch",
            r.resource_version_match.map(|m| m.as_str().to_owned()),
        ),
        (
            "allowWatchBookmarks",
            r.allow_bookmarks.then(|| "true".into()),
        ),
        (
            "sendInitialEvents",
            r.send_initial_events.then(|| "true".into()),
        ),
        ("timeoutSeconds", r.timeout_seconds.map(|t| t.to_string())),
    ])
}

#[async_trait::async_trait]
impl ListerWatcher for HttpListerWatcher {
    type Object = Object;

    async fn list(&self, request: &ListRequest) -> Result<Page<Object>> {
        collect_page(self.list_stream(request).await?).await
    }

    async fn list_stream(&self, request: &ListRequest) -> Result<PageStream<Object>> {
        let fields = self.fields.clone();
        let drop = self.drop_managed_fields;
        self.list_items(request, move |item| {
            Object::from_json(item, &fields)
                .map(|o| if drop { o.without_managed_fields() } else { o })
                .map_err(|e| super::typed::skipped_or_dynamic_item(item, &e))
        })
        .await
    }

    async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<Object>> {
        let body = self.open_watch(request).await?;
        let events = decode::watch_events(body, self.fields.clone());
        if !self.drop_managed_fields {
            return Ok(events.boxed());
        }
        Ok(events
            .map(|e| {
                e.map(|e| match e {
                    crate::WatchEvent::Added(o) => {
                        crate::WatchEvent::Added(o.without_managed_fields())
                    }
                    crate::WatchEvent::Modified(o) => {
                        crate::WatchEvent::Modified(o.without_managed_fields())
                    }
                    crate::WatchEvent::Deleted(o) => {
                        crate::WatchEvent::Deleted(o.without_managed_fields())
                    }
                    other => other,
                })
            })
            .boxed())
    }

    fn watch_idle(&self) {
        self.blame_watch_server();
    }
}

impl HttpListerWatcher {
    /// Lists one page, each object decoded by `decode` as soon as its bytes are complete: the
    /// headers under the request timeout on each server tried, then the body under it
    /// (`list_body`).
    pub(crate) async fn list_items<K, F>(
        &self,
        request: &ListRequest,
        decode: F,
    ) -> Result<PageStream<K>>
    where
        K: Send + 'static,
        F: Fn(&[u8]) -> Result<K> + Send + 'static,
    {
        let (res, _) = self.get(list_query(request)).await?;
        decode::expect_json(res.headers(), "list")?;
        let inner = &self.client.inner;
        Ok(list_body::page_stream(
            res,
            inner.max_list_bytes,
            inner.timeout,
            decode,
        ))
    }

    /// Opens a watch; its body reports a cut connection as a failure of its server.
    pub(crate) async fn open_watch(&self, request: &WatchRequest) -> Result<decode::WatchBody> {
        let (res, server) = self.get(watch_query(request)).await?;
        decode::expect_json(res.headers(), "watch")?;
        self.watch_server.store(server, Ordering::Release);
        let servers = self.client.clone();
        Ok(decode::WatchBody::new(
            res,
            Box::new(move || {
                servers.inner.servers.failed(server);
            }),
        ))
    }

    /// The last watch's connection is taken as dead: the client moves off its server.
    pub(crate) fn blame_watch_server(&self) {
        let server = self.watch_server.load(Ordering::Acquire);
        if server != usize::MAX {
            self.client.inner.servers.failed(server);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::LabelSelector;

    #[test]
    fn list_and_watch_queries_use_the_kubernetes_parameter_names() {
        let l = ListRequest {
            resource_version: Some("0".into()),
            limit: Some(500),
            label_selector: LabelSelector::parse("app=web").unwrap(),
            ..Default::default()
        };
        assert_eq!(
            list_query(&l),
            "labelSelector=app%3Dweb&limit=500&resourceVersion=0"
        );
        let w = WatchRequest {
            resource_version: Some("12".into()),
            allow_bookmarks: true,
            timeout_seconds: Some(301),
            ..Default::default()
        };
        assert_eq!(
            watch_query(&w),
            "watch=1&resourceVersion=12&allowWatchBookmarks=true&timeoutSeconds=301"
        );
        let sharded = WatchRequest {
            shard_selector: listwatch_api::ShardSelector::nth_of(
                listwatch_api::shard::ShardField::Uid,
                1,
                2,
            )
            .unwrap(),
            ..Default::default()
        };
        assert_eq!(
            watch_query(&sharded),
            "watch=1&shardSelector=shardRange%28object.metadata.uid%2C+%270x8000000000000000%27%2C+%270x10000000000000000%27%29"
        );
    }
}
