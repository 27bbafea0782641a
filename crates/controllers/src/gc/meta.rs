//! What the collector keeps of an object: its identity, whether it is being deleted, its
//! finalizers and its owner references — nothing else (the caches hold one per object of
//! every served resource, so they must stay small). It is decoded from each event's shared
//! metadata-only projection (`listwatch_cacher::MetadataListerWatcher`), so the spec and the
//! status are neither decoded nor copied for the collector.
//!
//! Decoding is lenient: the server does not validate `finalizers` or `ownerReferences`, and
//! one malformed object must not stop a whole resource's informer (a typed list fails as a
//! whole). A malformed list counts as empty; an owner reference without a uid, name, kind or
//! apiVersion is ignored (upstream refuses to store one).

use listwatch_api::resource::{HasMetadata, MetadataFields};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The garbage collector's finalizer that orphans dependents.
pub const FINALIZER_ORPHAN: &str = "orphan";
/// The garbage collector's finalizer that deletes blocking dependents first.
pub const FINALIZER_FOREGROUND: &str = "foregroundDeletion";

/// One owner reference (`metadata.ownerReferences[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerRef {
    /// `apiVersion` of the owner, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind` of the owner.
    pub kind: String,
    /// `name` of the owner (in the dependent's namespace when the owner is namespaced).
    pub name: String,
    /// `uid` of the owner: a live object with another uid is not the owner.
    pub uid: String,
    /// `blockOwnerDeletion`: a foreground deletion of the owner waits for this dependent.
    pub block_owner_deletion: bool,
}

impl OwnerRef {
    /// Reads one entry; `None` when it lacks what identifies an owner.
    pub fn from_value(v: &Value) -> Option<Self> {
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Some(Self {
            api_version: s("apiVersion")?,
            kind: s("kind")?,
            name: s("name")?,
            uid: s("uid")?,
            block_owner_deletion: v
                .get("blockOwnerDeletion")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// All well-formed entries of `metadata.ownerReferences` (`v` is that value).
    pub fn all(v: Option<&Value>) -> Vec<Self> {
        v.and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Self::from_value).collect())
            .unwrap_or_default()
    }
}

/// An object's metadata as the collector sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.finalizers` (strings only).
    pub finalizers: Vec<String>,
    /// `metadata.ownerReferences` (well-formed ones).
    pub owner_references: Vec<OwnerRef>,
}

impl Fields {
    /// Reads the metadata map of an object.
    pub fn from_metadata(m: &Value) -> Self {
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_owned);
        Self {
            name: s("name"),
            namespace: s("namespace").filter(|n| !n.is_empty()),
            uid: s("uid"),
            resource_version: s("resourceVersion"),
            deleting: m.get("deletionTimestamp").is_some_and(|t| !t.is_null()),
            finalizers: m
                .get("finalizers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
            owner_references: OwnerRef::all(m.get("ownerReferences")),
        }
    }

    /// Whether `f` is among the finalizers.
    pub fn has_finalizer(&self, f: &str) -> bool {
        self.finalizers.iter().any(|x| x == f)
    }

    /// Being deleted and held by the `orphan` finalizer: its dependents are to be orphaned.
    pub fn orphaning(&self) -> bool {
        self.deleting && self.has_finalizer(FINALIZER_ORPHAN)
    }

    /// Being deleted in the foreground: its blocking dependents are to go first.
    pub fn deleting_dependents(&self) -> bool {
        self.deleting && self.has_finalizer(FINALIZER_FOREGROUND)
    }

    /// The reference to owner `uid`, if any.
    pub fn reference_to(&self, uid: &str) -> Option<&OwnerRef> {
        self.owner_references.iter().find(|r| r.uid == uid)
    }
}

impl MetadataFields for Fields {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
    fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
}

/// An object reduced to [`Fields`]: what the collector's informers store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// The metadata.
    pub metadata: Fields,
}

impl HasMetadata for Meta {
    type Metadata = Fields;
    fn metadata(&self) -> &Fields {
        &self.metadata
    }
}

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// Only what the collector keeps is decoded; everything else (the spec, the status,
        /// `managedFields`, labels, annotations) is skipped unread. Each kept member is a
        /// `Value`, so a member of the wrong type makes it absent, not the object undecodable.
        #[derive(Deserialize)]
        struct Outer {
            #[serde(default)]
            metadata: Option<Inner>,
        }
        #[derive(Deserialize, Default)]
        #[serde(rename_all = "camelCase")]
        struct Inner {
            #[serde(default)]
            name: Option<Value>,
            #[serde(default)]
            namespace: Option<Value>,
            #[serde(default)]
            uid: Option<Value>,
            #[serde(default)]
            resource_version: Option<Value>,
            #[serde(default)]
            deletion_timestamp: Option<serde::de::IgnoredAny>,
            #[serde(default)]
            finalizers: Option<Value>,
            #[serde(default)]
            owner_references: Option<Value>,
        }
        let m = Outer::deserialize(d)?.metadata.unwrap_or_default();
        let s = |v: Option<Value>| match v {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        Ok(Self {
            metadata: Fields {
                name: s(m.name),
                namespace: s(m.namespace).filter(|n| !n.is_empty()),
                uid: s(m.uid),
                resource_version: s(m.resource_version),
                deleting: m.deletion_timestamp.is_some(),
                finalizers: m
                    .finalizers
                    .as_ref()
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default(),
                owner_references: OwnerRef::all(m.owner_references.as_ref()),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn malformed_lists_and_references_do_not_fail_the_object() {
        let m: Meta = serde_json::from_value(json!({
            "metadata": {
                "name": "a", "namespace": "n", "uid": "u1", "resourceVersion": "7",
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": ["orphan", 5, {"x": 1}],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u0", "blockOwnerDeletion": true},
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "no-uid"},
                    "junk"
                ]
            },
            "spec": {"huge": [1, 2, 3]}
        }))
        .unwrap();
        assert!(m.metadata.orphaning());
        assert!(!m.metadata.deleting_dependents());
        assert_eq!(m.metadata.finalizers, ["orphan"]);
        assert_eq!(m.metadata.owner_references.len(), 1);
        assert!(m.metadata.reference_to("u0").unwrap().block_owner_deletion);
        let junk: Meta =
            serde_json::from_value(json!({"metadata": {"finalizers": "x", "ownerReferences": 7}}))
                .unwrap();
        assert!(junk.metadata.finalizers.is_empty());
        assert!(junk.metadata.owner_references.is_empty());
        let none: Meta = serde_json::from_value(json!({"kind": "X"})).unwrap();
        assert_eq!(none, Meta::default());
        let odd: Meta = serde_json::from_value(json!({"metadata": {"name": 5, "uid": ["u"],
            "deletionTimestamp": null, "managedFields": [{"huge": true}]}}))
        .unwrap();
        assert_eq!(
            odd,
            Meta::default(),
            "a null deletionTimestamp is no deletion"
        );
        let null_meta: Meta = serde_json::from_value(json!({"metadata": null})).unwrap();
        assert_eq!(null_meta, Meta::default());
    }

    /// Issue 33 item 7: the collector's informers decode `Meta` from each event's shared
    /// metadata-only projection (`listwatch_cacher::MetadataListerWatcher`), not from the
    /// whole object: it must lose nothing the collector reads.
    #[test]
    fn the_metadata_projection_gives_the_collector_what_the_whole_object_does() {
        let o = listwatch_api::Object::from_value(
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": "a", "namespace": "n", "uid": "u1",
                    "deletionTimestamp": "2026-01-01T00:00:00Z",
                    "finalizers": ["foregroundDeletion", "x/y"],
                    "ownerReferences": [
                        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                         "uid": "u0", "blockOwnerDeletion": true, "controller": true}
                    ],
                    "labels": {"app": "web"},
                    "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]
                },
                "spec": {"containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running"}
            }),
            &listwatch_api::SelectableFields::none(),
        )
        .unwrap()
        .with_resource_version(42);
        let whole: Meta = o.deserialize().unwrap();
        let projection = o.partial_metadata_json().unwrap();
        let meta: Meta = serde_json::from_slice(&projection).unwrap();
        assert_eq!(meta, whole);
        assert_eq!(meta.metadata.resource_version.as_deref(), Some("42"));
        assert!(meta.metadata.deleting_dependents());
        assert!(
            meta.metadata
                .reference_to("u0")
                .unwrap()
                .block_owner_deletion
        );
    }
}
