//! [`Versioned`]: one version of a kind served over its storage version's storage, through
//! the version's [`Conversion`]: a custom resource's versions with the `None` conversion
//! strategy (the objects are the same, only `apiVersion` differs), and built-in kinds
//! served in two groups from one storage (`events.k8s.io/v1` Events over `v1` Events,
//! whose fields are renamed). Reads and watch events are converted to the served version;
//! writes are stored in the storage version; the field selectors of lists and watches are
//! read as the storage version names its fields.
//!
//! Invariants: every write through any version is converted to the storage version before
//! it is stored; the wrapped storage may still hold objects of an earlier storage version
//! (a custom resource's storage version can move), so every read is converted to the served
//! version, the storage version's own route included when the kind has several versions;
//! an object that does not decode is passed through unchanged (the wrapped storage wrote
//! it, so it is the stored form); the cost is one decode and encode per object whose
//! `apiVersion` differs, a prefix compare of its stored bytes for the others.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use listwatch_api::fields::FieldTerm;
use listwatch_api::{FieldSelector, Object, SelectableFields};
use listwatch_kinds::conversion::{ApiVersionOnly, Conversion};
use listwatch_storage::{
    GetOptions, Key, ListOptions, ObjectList, Preconditions, Result, Stats, Storage, UpdateFn,
    Updated, ValidateDeleteFn, WatchEvent, WatchStream,
};
use serde_json::Value;

/// A served version over the storage version's storage.
pub struct Versioned {
    inner: Arc<dyn Storage>,
    /// Between the storage version and the served version.
    conversion: Arc<dyn Conversion>,
    /// The served version's selectable fields.
    fields: SelectableFields,
    /// The storage version's selectable fields (what the wrapped storage's objects are
    /// indexed by).
    stored_fields: SelectableFields,
}

impl std::fmt::Debug for Versioned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Versioned")
            .field("stored", &self.conversion.stored())
            .field("served", &self.conversion.served())
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
        Self::converted(
            inner,
            Arc::new(ApiVersionOnly::new(stored, served)),
            fields.clone(),
            fields,
        )
    }

    /// `conversion`'s served version over `inner`, whose objects are its storage version;
    /// `fields` are the served version's selectable fields, `stored_fields` the storage
    /// version's.
    pub fn converted(
        inner: Arc<dyn Storage>,
        conversion: Arc<dyn Conversion>,
        fields: SelectableFields,
        stored_fields: SelectableFields,
    ) -> Self {
        Self {
            inner,
            conversion,
            fields,
            stored_fields,
        }
    }

    fn rewrite(&self, o: Object, to_stored: bool) -> Object {
        let (to, fields) = if to_stored {
            (self.conversion.stored(), &self.stored_fields)
        } else {
            (self.conversion.served(), &self.fields)
        };
        if has_api_version(&o, to) {
            return o;
        }
        let rv = o.resource_version();
        let Ok(mut v) = o.to_value() else {
            return o;
        };
        match v.get("apiVersion").and_then(Value::as_str) {
            Some(a) if a == to => return o,
            _ => {}
        }
        if let Some(m) = v.as_object_mut() {
            if to_stored {
                self.conversion.to_stored(m);
            } else {
                self.conversion.to_served(m);
            }
        }
        match Object::from_value(v, fields) {
            Ok(n) => n.with_resource_version(rv),
            Err(_) => o,
        }
    }

    fn out(&self, o: Object) -> Object {
        self.rewrite(o, false)
    }

    fn to_stored(&self, o: Object) -> Object {
        self.rewrite(o, true)
    }

    /// The options with their field selector naming the storage version's fields.
    fn stored_options(&self, opts: &ListOptions) -> ListOptions {
        let mut opts = opts.clone();
        if !opts.predicate.field.is_empty() {
            let terms = opts
                .predicate
                .field
                .terms()
                .iter()
                .map(|t| FieldTerm {
                    field: self.conversion.stored_field(&t.field).into_owned(),
                    ..t.clone()
                })
                .collect();
            opts.predicate.field = FieldSelector::from_terms(terms);
        }
        opts
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

/// Whether `o` is already of `api_version`, read off its stored bytes without decoding: a
/// custom resource's canonical JSON is in key order, so `apiVersion` leads it. `false` when
/// it does not lead (the caller then decodes and compares).
fn has_api_version(o: &Object, api_version: &str) -> bool {
    let json: &[u8] = o.stored_json();
    json.strip_prefix(b"{\"apiVersion\":\"".as_slice())
        .and_then(|rest| rest.strip_prefix(api_version.as_bytes()))
        .is_some_and(|rest| rest.first() == Some(&b'"'))
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
        let mut list = self.inner.list(key, &self.stored_options(opts)).await?;
        list.items = std::mem::take(&mut list.items)
            .into_iter()
            .map(|o| self.out(o))
            .collect();
        Ok(list)
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        let stream = self.inner.watch(key, &self.stored_options(opts)).await?;
        let this = Versioned {
            inner: Arc::clone(&self.inner),
            conversion: Arc::clone(&self.conversion),
            fields: self.fields.clone(),
            stored_fields: self.stored_fields.clone(),
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
