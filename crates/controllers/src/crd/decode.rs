//! What a custom resource read from storage is made into before anything serves it:
//! upstream's apiextensions-apiserver decodes every object it reads from etcd through a
//! codec that prunes it by the schema of the version it is stored in (unknown fields and
//! non-nullable `null`s without a default dropped), repairs a missing `metadata.generation`
//! (`1`) and applies that version's structural defaults. So a `default:` added to a CRD's
//! schema shows on existing objects at their next read or watch event, without a write, and
//! a field removed from the schema stops being answered.
//!
//! [`Decoded`] is a [`Storage`] over the backend that does this to every object coming out
//! of it (gets, lists, watch events, the current object an update is computed from, what a
//! write or delete returns); writes go through unchanged (the registry's strategy already
//! pruned and defaulted them), so the stored bytes are never rewritten by a read. It sits
//! *under* the watch cache (the CRD controller's [`StorageFactory`](super::StorageFactory)
//! receives it): the cache's reflector lists and watches through it, so an event is decoded
//! once when it enters the cache, not per watcher or per read, and the cache holds the
//! decoded objects (whose wire form is then encoded once per event as for any kind). Reads
//! the cache sends to the backend (a consistent read without the cache, a paginated list at
//! a past version) decode here as well.
//!
//! Invariants:
//! - the decoding is a pure function of the object and the CRD's schemas ([`ReadSchemas`]),
//!   idempotent, and bounded as the schema's walks are (`listwatch_kinds::custom::schema`);
//! - an object the decoding leaves as it is keeps its bytes (no re-encoding); one that does
//!   not parse, or whose `apiVersion` names no version of the CRD, is passed through as
//!   stored;
//! - the schemas are fixed for the life of a `Decoded`: when a CRD update changes them, the
//!   controller builds a new storage (and cache), which lists again, as upstream rebuilds a
//!   CRD's storage on an update ([`ReadSchemas::same_as`] decides).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use listwatch_api::{Object, SelectableFields};
use listwatch_kinds::crd::Definition;
use listwatch_kinds::custom::numbers;
use listwatch_kinds::custom::schema::Structural;
use listwatch_storage::{
    GetOptions, Key, ListCost, ListOptions, ObjectList, Preconditions, Result, Stats, Storage,
    UpdateFn, Updated, ValidateDeleteFn, WatchEvent, WatchStream,
};
use serde_json::Value;

/// The schemas a CRD's objects are decoded by, per `apiVersion` (every version of the
/// CRD, served or not: an object may be stored in any of them).
#[derive(Clone)]
pub struct ReadSchemas {
    /// `apiVersion` → the version's compiled schema (`None`: no schema, nothing pruned or
    /// defaulted).
    by_api_version: HashMap<String, Option<Arc<Structural>>>,
    /// What the schemas were compiled from, to tell whether an update changed them.
    source: Vec<(String, Option<Value>)>,
    /// The selectable fields the decoded objects are indexed by (the storage version's).
    fields: SelectableFields,
}

impl std::fmt::Debug for ReadSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadSchemas")
            .field(
                "versions",
                &self.source.iter().map(|s| &s.0).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl ReadSchemas {
    /// The schemas of every version of `def`; `fields` are the storage version's selectable
    /// fields. A schema that does not compile (the CRD's validation refused it, so only an
    /// object stored by an earlier build can meet it) decodes nothing.
    pub fn of(def: &Definition, fields: SelectableFields) -> Self {
        let source: Vec<(String, Option<Value>)> = def
            .versions
            .iter()
            .map(|v| (format!("{}/{}", def.group, v.name), v.schema.clone()))
            .collect();
        Self::from_source(source, fields)
    }

    /// The schema of one version (`--resources`' custom resources: one kind each).
    pub fn single(api_version: &str, schema: Option<&Value>, fields: SelectableFields) -> Self {
        Self::from_source(vec![(api_version.to_owned(), schema.cloned())], fields)
    }

    fn from_source(source: Vec<(String, Option<Value>)>, fields: SelectableFields) -> Self {
        let by_api_version = source
            .iter()
            .map(|(av, schema)| {
                let compiled = schema
                    .as_ref()
                    .and_then(|s| Structural::new(s).ok())
                    .map(Arc::new);
                (av.clone(), compiled)
            })
            .collect();
        Self {
            by_api_version,
            source,
            fields,
        }
    }

    /// Whether `other` decodes as these do (same versions, same schemas, same fields).
    pub fn same_as(&self, other: &ReadSchemas) -> bool {
        self.source == other.source && self.fields == other.fields
    }

    /// `inner` with every object read from it decoded by these schemas.
    pub fn over(&self, inner: Arc<dyn Storage>) -> Arc<dyn Storage> {
        Arc::new(Decoded {
            inner,
            schemas: Arc::new(self.clone()),
        })
    }

    /// Decodes one JSON object in place as upstream's storage codec does; `false` when
    /// its `apiVersion` names no version of the CRD (then it is left alone).
    pub fn decode_value(&self, v: &mut Value) -> bool {
        let Some(schema) = v
            .get("apiVersion")
            .and_then(Value::as_str)
            .and_then(|av| self.by_api_version.get(av))
        else {
            return false;
        };
        numbers::normalize(v);
        if let Some(s) = schema {
            s.prune(v);
            s.default(v);
        }
        // Upstream's `repairGeneration`: very old objects were stored without one.
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
            if generation == 0 {
                meta.insert("generation".to_owned(), Value::from(1));
            }
        }
        true
    }

    /// `o` decoded; `o` itself (its bytes shared) when decoding changes nothing or it does
    /// not decode.
    pub fn decode(&self, o: Object) -> Object {
        let Ok(stored) = o.to_value() else {
            return o;
        };
        let mut v = stored.clone();
        if !self.decode_value(&mut v) || v == stored {
            return o;
        }
        let rv = o.resource_version();
        match Object::from_value(v, &self.fields) {
            Ok(n) => n.with_resource_version(rv),
            Err(e) => {
                tracing::debug!(error = %e, "a decoded custom resource is not an object; served as stored");
                o
            }
        }
    }

    fn event(&self, e: WatchEvent) -> WatchEvent {
        match e {
            WatchEvent::Added(o) => WatchEvent::Added(self.decode(o)),
            WatchEvent::Modified { object, prev } => WatchEvent::Modified {
                object: self.decode(object),
                prev: prev.map(|p| self.decode(p)),
            },
            WatchEvent::Deleted(o) => WatchEvent::Deleted(self.decode(o)),
            other => other,
        }
    }
}

/// A custom resource's backend with every object read from it decoded ([`ReadSchemas`]).
pub struct Decoded {
    inner: Arc<dyn Storage>,
    schemas: Arc<ReadSchemas>,
}

impl std::fmt::Debug for Decoded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoded")
            .field("schemas", &self.schemas)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Storage for Decoded {
    async fn create(&self, key: &Key, obj: Object, ttl: Option<Duration>) -> Result<Object> {
        let o = self.inner.create(key, obj, ttl).await?;
        Ok(self.schemas.decode(o))
    }

    async fn get(&self, key: &Key, opts: &GetOptions) -> Result<Option<Object>> {
        Ok(self
            .inner
            .get(key, opts)
            .await?
            .map(|o| self.schemas.decode(o)))
    }

    async fn list(&self, key: &Key, opts: &ListOptions) -> Result<ObjectList> {
        let mut list = self.inner.list(key, opts).await?;
        list.items = std::mem::take(&mut list.items)
            .into_iter()
            .map(|o| self.schemas.decode(o))
            .collect();
        Ok(list)
    }

    async fn watch(&self, key: &Key, opts: &ListOptions) -> Result<WatchStream> {
        let stream = self.inner.watch(key, opts).await?;
        let schemas = Arc::clone(&self.schemas);
        Ok(Box::pin(stream.map(move |e| schemas.event(e))))
    }

    async fn guaranteed_update(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        ignore_not_found: bool,
        update: &mut UpdateFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        // The update is computed from the object as a read answers it (upstream decodes the
        // current state before calling the update function).
        let mut wrapped = |cur: Option<&Object>| -> Result<Updated> {
            let decoded = cur.map(|c| self.schemas.decode(c.clone()));
            update(decoded.as_ref())
        };
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
        Ok(self.schemas.decode(o))
    }

    async fn delete(
        &self,
        key: &Key,
        preconditions: Option<&Preconditions>,
        validate: &ValidateDeleteFn<'_>,
        suggestion: Option<Object>,
    ) -> Result<Object> {
        let wrapped = |o: &Object| validate(&self.schemas.decode(o.clone()));
        let o = self
            .inner
            .delete(key, preconditions, &wrapped, suggestion)
            .await?;
        Ok(self.schemas.decode(o))
    }

    async fn stats(&self, key: &Key) -> Result<Stats> {
        self.inner.stats(key).await
    }

    fn list_cost(&self, opts: &ListOptions) -> Option<ListCost> {
        self.inner.list_cost(opts)
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

    fn schemas(schema: Value) -> ReadSchemas {
        ReadSchemas::single("example.com/v1", Some(&schema), SelectableFields::none())
    }

    fn widget(spec: Value) -> Object {
        Object::from_value(
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w", "namespace": "ns", "generation": 1}, "spec": spec}),
            &SelectableFields::none(),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn reads_are_pruned_and_defaulted_and_the_stored_bytes_are_not() {
        let store: Arc<dyn Storage> = Arc::new(listwatch_memstore::MemStore::new());
        let key = Key::object("widgets.example.com", Some("ns"), "w").unwrap();
        // Stored before the schema had a default, with a field it no longer declares.
        store
            .create(&key, widget(json!({"color": "red", "gone": 1})), None)
            .await
            .unwrap();
        let decoded = schemas(json!({"type": "object", "properties": {"spec": {
            "type": "object", "properties": {
                "color": {"type": "string"},
                "size": {"type": "integer", "default": 3}}}}}))
        .over(Arc::clone(&store));
        let got = decoded
            .get(&key, &GetOptions::default())
            .await
            .unwrap()
            .unwrap()
            .to_value()
            .unwrap();
        assert_eq!(got["spec"], json!({"color": "red", "size": 3}));
        let coll = Key::collection("widgets.example.com", None).unwrap();
        let list = decoded
            .list(&coll, &ListOptions::recursive())
            .await
            .unwrap();
        assert_eq!(list.items[0].to_value().unwrap()["spec"]["size"], 3);
        let mut w = decoded
            .watch(&coll, &ListOptions::recursive().at(Some(0), None))
            .await
            .unwrap();
        match w.next().await {
            Some(WatchEvent::Added(o)) => assert_eq!(o.to_value().unwrap()["spec"]["size"], 3),
            other => panic!("{other:?}"),
        }
        let raw = store
            .get(&key, &GetOptions::default())
            .await
            .unwrap()
            .unwrap()
            .to_value()
            .unwrap();
        assert_eq!(raw["spec"], json!({"color": "red", "gone": 1}));
    }

    #[test]
    fn an_object_decoding_leaves_alone_keeps_its_bytes_and_generation_is_repaired() {
        let s = schemas(json!({"type": "object", "properties": {"spec": {
            "type": "object", "properties": {"color": {"type": "string"}}}}}));
        let o = widget(json!({"color": "red"}));
        let same = s.decode(o.clone());
        assert_eq!(o.stored_json().as_ptr(), same.stored_json().as_ptr());
        let old = Object::from_value(
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "metadata": {"name": "w"}, "spec": {"color": "red", "n": 2.0}}),
            &SelectableFields::none(),
        )
        .unwrap();
        let v = s.decode(old).to_value().unwrap();
        assert_eq!(v["metadata"]["generation"], 1);
        // Pruned: `n` is not declared.
        assert_eq!(v["spec"], json!({"color": "red"}));
        // Another kind's apiVersion is left as stored.
        let other = Object::from_value(
            json!({"apiVersion": "other.com/v1", "kind": "Widget",
                   "metadata": {"name": "w"}, "spec": {"x": 1}}),
            &SelectableFields::none(),
        )
        .unwrap();
        assert_eq!(s.decode(other).to_value().unwrap()["spec"]["x"], 1);
    }
}
