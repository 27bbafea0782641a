//! [`Versioned`]: one version of a custom resource served over its storage version's
//! storage, as upstream serves a CRD's versions with the `None` conversion strategy: the
//! objects are the same, only `apiVersion` differs. Reads and watch events are rewritten to
//! the served version; writes are stored in the storage version.
//!
//! Invariants: the wrapped storage only ever holds objects in the storage version (a write
//! through any version is rewritten before it is stored); an object that does not decode
//! is passed through unchanged (the wrapped storage wrote it, so it is the stored form);
//! the cost is one decode and encode per object crossing the wrapper.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_storage::{
    GetOptions, Key, ListOptions, ObjectList, Preconditions, Result, Stats, Storage, UpdateFn,
    Updated, ValidateDeleteFn, WatchEvent, WatchStream,
};
use serde_json::Value;

/// A served version over the storage version's storage.
pub struct Versioned {
    inner: Arc<dyn Storage>,
    /// The storage version's `apiVersion`, e.g. `example.com/v1`.
    stored: String,
    /// The served version's `apiVersion`, e.g. `example.com/v1beta1`.
    served: String,
    fields: SelectableFields,
}

impl std::fmt::Debug for Versioned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Versioned")
            .field("stored", &self.stored)
            .field("served", &self.served)
            .finish_non_exhaustive()
    }
}

impl Versioned {
    /// `served` over `inner`, whose objects are `stored`; `fields` are the served
    /// version's selectable fields.
    pub fn new(
        inner: Arc<dyn Storage>,
        stored: &str,
        served: &str,
        fields: SelectableFields,
    ) -> Self {
        Self {
            inner,
            stored: stored.to_owned(),
            served: served.to_owned(),
            fields,
        }
    }

    fn rewrite(&self, o: Object, to: &str) -> Object {
        let rv = o.resource_version();
        let Ok(mut v) = o.to_value() else {
            return o;
        };
        match v.get("apiVersion").and_then(Value::as_str) {
            Some(a) if a == to => return o,
            _ => {}
        }
        if let Some(m) = v.as_object_mut() {
            m.insert("apiVersion".into(), Value::from(to));
        }
        match Object::from_value(v, &self.fields) {
            Ok(n) => n.with_resource_version(rv),
            Err(_) => o,
        }
    }

    fn out(&self, o: Object) -> Object {
        self.rewrite(o, &self.served)
    }

    fn to_stored(&self, o: Object) -> Object {
        self.rewrite(o, &self.stored)
    }

    fn event(&self, e: WatchEvent) -> WatchEvent {
        match e {
            WatchEvent::Added(o) => WatchEvent::Added(self.out(o)),
            WatchEvent::Modified { object, prev } => WatchEvent::Modified {
                object: self.out(object),
                prev: prev.map(|p| self.out(p)),
            },
            WatchEvent::Deleted(o) => WatchEvent::Deleted(self.out(o)),
            other => other,
        }
    }
}

#[async_trait]
impl Storage for Versioned {
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object> {
        let stored = self.inner.create(key, self.to_stored(obj), ttl).await?;
        Ok(self.out(stored))
    }

    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        Ok(self.inner.get(key, opts).await?.map(|o| self.out(o)))
    }

    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let mut list = self.inner.list(key, opts).await?;
        list.items = std::mem::take(&mut list.items)
            .into_iter()
            .map(|o| self.out(o))
            .collect();
        Ok(list)
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        let stream = self.inner.watch(key, opts).await?;
        let this = Versioned {
            inner: Arc::clone(&self.inner),
            stored: self.stored.clone(),
            served: self.served.clone(),
            fields: self.fields.clone(),
        };
        Ok(Box::pin(stream.map(move |e| this.event(e))))
    }

    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let mut wrapped = |cur: Option<&Object>| -> Result<Updated> {
            let served = cur.map(|c| self.out(c.clone()));
            let u = update(served.as_ref())?;
            Ok(Updated {
                object: self.to_stored(u.object),
                ttl: u.ttl,
            })
        };
        let suggestion = suggestion.map(|s| self.to_stored(s));
        let o = self
            .inner
            .guaranteed_update(
                key,
                preconditions,
                ignore_not_found,
                &mut wrapped,
                suggestion,
            )
            .await?;
        Ok(self.out(o))
    }

    async fn delete(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        validate: &ValidateDeleteFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let wrapped = |o: &Object| validate(&self.out(o.clone()));
        let suggestion = suggestion.map(|s| self.to_stored(s));
        let o = self
            .inner
            .delete(key, preconditions, &wrapped, suggestion)
            .await?;
        Ok(self.out(o))
    }

    async fn stats(&self, key: &Key) -> Result<Stats> {
        self.inner.stats(key).await
    }

    async fn request_watch_progress(&self) -> Result<()> {
        self.inner.request_watch_progress().await
    }

    async fn current_resource_version(&self) -> Result<u64> {
        self.inner.current_resource_version().await
    }

    fn compacted_revision(&self) -> u64 {
        self.inner.compacted_revision()
    }

    async fn readiness(&self) -> Result<()> {
        self.inner.readiness().await
    }

    fn max_object_bytes(&self) -> Option<usize> {
        self.inner.max_object_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_version_reads_and_writes_the_storage_versions_objects() {
        let store: Arc<dyn Storage> = Arc::new(listwatch_memstore::MemStore::new());
        let fields = SelectableFields::none();
        let beta = Versioned::new(
            Arc::clone(&store),
            "example.com/v1",
            "example.com/v1beta1",
            fields.clone(),
        );
        let key = Key::object("widgets.example.com", Some("ns"), "w").unwrap();
        let obj = Object::from_value(
            json!({"apiVersion": "example.com/v1beta1", "kind": "Widget",
                   "metadata": {"name": "w", "namespace": "ns"}}),
            &fields,
        )
        .unwrap();
        let created = beta.create(&key, obj, None).await.unwrap();
        assert_eq!(
            created.to_value().unwrap()["apiVersion"],
            "example.com/v1beta1"
        );
        let stored = store
            .get(&key, &GetOptions::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.to_value().unwrap()["apiVersion"], "example.com/v1");
        let coll = Key::collection("widgets.example.com", None).unwrap();
        let list = beta.list(&coll, &ListOptions::recursive()).await.unwrap();
        assert_eq!(
            list.items[0].to_value().unwrap()["apiVersion"],
            "example.com/v1beta1"
        );
        let mut w = beta
            .watch(&coll, &ListOptions::recursive().at(Some(0), None))
            .await
            .unwrap();
        match w.next().await {
            Some(WatchEvent::Added(o)) => {
                assert_eq!(o.to_value().unwrap()["apiVersion"], "example.com/v1beta1");
            }
            other => panic!("{other:?}"),
        }
    }
}
