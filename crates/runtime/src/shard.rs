//! A sharded lister-watcher: one shard of a collection, as client-go's
//! `cache.NewShardedListWatch` (KEP-5866, server-side sharded list and watch).
//!
//! [`Sharded`] wraps any [`ListerWatcher`]: it sends its [`ShardSelector`] with every list and
//! watch (the server then sends only that shard), and drops from what comes back every object
//! outside the shard — a server that ignores `shardSelector` (an older one, or one replica of
//! several during an upgrade) sends everything, and the reflector must still hold its shard
//! alone. The reflector wraps its lister-watcher in it ([`crate::Config::shard`]).
//!
//! Invariants: with an empty selector it passes requests and results through untouched; a
//! shard's membership never changes over an object's life (uid and namespace are
//! immutable), so dropping an event never turns into a missed add or delete; bookmarks and
//! errors always pass; an object whose type does not expose its uid
//! ([`Resource::uid`] is `None`) is kept — the server's filtering is then what holds.

use async_trait::async_trait;
use futures::StreamExt;
use listwatch_api::ShardSelector;
use listwatch_api::shard::{ShardField, fnv1a64};

use crate::error::Result;
use crate::lister::{
    ListRequest, ListerWatcher, Page, PageItem, PageStream, WatchEvent, WatchRequest, WatchStream,
};
use crate::resource::Resource;

/// A lister-watcher of one shard (see the module docs).
pub struct Sharded<L> {
    inner: L,
    selector: ShardSelector,
}

impl<L> Sharded<L> {
    /// `inner` kept to `selector`'s shard (everything when it is empty).
    pub fn new(inner: L, selector: ShardSelector) -> Self {
        Self { inner, selector }
    }
}

/// Whether `selector` keeps `o` (see the module docs for an object without a uid).
pub fn in_shard<K: Resource>(selector: &ShardSelector, o: &K) -> bool {
    match selector.field() {
        None => true,
        Some(ShardField::Uid) => o
            .uid()
            .is_none_or(|uid| selector.contains(fnv1a64(uid.as_bytes()))),
        Some(ShardField::Namespace) => {
            selector.contains(fnv1a64(o.namespace().unwrap_or("").as_bytes()))
        }
    }
}

impl<L> Sharded<L> {
    fn list_request(&self, r: &ListRequest) -> ListRequest {
        let mut r = r.clone();
        if !self.selector.is_empty() {
            r.shard_selector = self.selector.clone();
        }
        r
    }

    fn watch_request(&self, r: &WatchRequest) -> WatchRequest {
        let mut r = r.clone();
        if !self.selector.is_empty() {
            r.shard_selector = self.selector.clone();
        }
        r
    }
}

#[async_trait]
impl<L: ListerWatcher> ListerWatcher for Sharded<L> {
    type Object = L::Object;

    async fn list(&self, request: &ListRequest) -> Result<Page<Self::Object>> {
        let mut page = self.inner.list(&self.list_request(request)).await?;
        page.items.retain(|o| in_shard(&self.selector, o));
        Ok(page)
    }

    async fn list_stream(&self, request: &ListRequest) -> Result<PageStream<Self::Object>> {
        let items = self.inner.list_stream(&self.list_request(request)).await?;
        if self.selector.is_empty() {
            return Ok(items);
        }
        let sel = self.selector.clone();
        Ok(items
            .filter(move |item| {
                futures::future::ready(match item {
                    Ok(PageItem::Object(o)) => in_shard(&sel, o),
                    _ => true,
                })
            })
            .boxed())
    }

    async fn watch(&self, request: &WatchRequest) -> Result<WatchStream<Self::Object>> {
        let events = self.inner.watch(&self.watch_request(request)).await?;
        if self.selector.is_empty() {
            return Ok(events);
        }
        let sel = self.selector.clone();
        Ok(events
            .filter(move |e| {
                futures::future::ready(match e {
                    Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)) => {
                        in_shard(&sel, o)
                    }
                    _ => true,
                })
            })
            .boxed())
    }

    fn watch_idle(&self) {
        self.inner.watch_idle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use listwatch_api::{Object, SelectableFields};

    fn obj(uid: &str) -> Object {
        Object::from_json(
            format!(r#"{{"metadata":{{"name":"{uid}","namespace":"ns","uid":"{uid}"}}}}"#)
                .as_bytes(),
            &SelectableFields::none(),
        )
        .unwrap()
    }

    #[test]
    fn every_object_is_in_exactly_one_of_n_shards() {
        for n in [1u64, 2, 3, 5] {
            let shards: Vec<_> = (0..n)
                .map(|i| ShardSelector::nth_of(ShardField::Uid, i, n).unwrap())
                .collect();
            for i in 0..200 {
                let o = obj(&format!("uid-{i}"));
                assert_eq!(shards.iter().filter(|s| in_shard(s, &o)).count(), 1);
                // The server's hash (kept with the object) and the client's agree.
                assert_eq!(
                    shards.iter().position(|s| o.in_shard(s)),
                    shards.iter().position(|s| in_shard(s, &o))
                );
            }
        }
    }
}
