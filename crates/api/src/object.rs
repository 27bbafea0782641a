//! [`Object`]: an object's canonical JSON bytes plus the small parsed view the pipeline reads.
//!
//! Invariants:
//! - the stored bytes never contain `metadata.resourceVersion`; the version lives beside them
//!   and is spliced in when the wire bytes are produced (a copy, never a re-serialization);
//! - cloning, and changing the resource version, share the bytes and the parsed view (an
//!   `Arc` bump);
//! - the parsed view (name, namespace, uid, labels, declared selectable fields) is computed
//!   once, when the object is built from JSON, and always agrees with the bytes.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::fields::Fields;
use crate::labels::Labels;
use crate::rv;

/// Why bytes could not become an [`Object`].
#[derive(Debug, Error)]
pub enum ObjectError {
    /// Not JSON at all.
    #[error("object is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// JSON, but not of an object's shape.
    #[error("invalid object: {0}")]
    Shape(String),
}

/// The fields of a resource that field selectors may name, beyond `metadata.name` and
/// `metadata.namespace` (which every object has). Cheap to clone; shared by all objects of a
/// resource.
///
/// A field may declare the value it reads as when the object lacks it (upstream's
/// `*ToSelectableFields` read Go fields, so an unset `bool` is `"false"` and a field the
/// defaulting always fills has its default). Invariant: the default is applied when an
/// object is parsed ([`Object::from_value`]), so every reader — selector matching in the
/// stores, the watch cache's indexes, watcher triggers, the old/new matching of watch
/// events — sees the same value, and a store that persists [`Object::field_values`] keeps it.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SelectableFields(Arc<[SelectableField]>);

/// One selectable field: its name (a dotted path), where its value is read when that is
/// not the path itself, and the value it reads as when unset.
#[derive(Clone, PartialEq, Eq)]
struct SelectableField {
    path: Box<str>,
    /// Paths read in order, the first with a non-empty value winning (e.g. an event's
    /// `source`: `source.component`, else `reportingComponent`); `None`: the path itself.
    reads: Option<Box<[Box<str>]>>,
    default: Option<Box<str>>,
}

impl SelectableField {
    /// The field's value in `v`.
    fn read(&self, v: &Value) -> Option<Box<str>> {
        let found = match &self.reads {
            None => scalar_at(v, &self.path),
            Some(paths) => paths
                .iter()
                .find_map(|p| scalar_at(v, p).filter(|s| !s.is_empty())),
        };
        // Upstream's defaulting fills a field that is unset or empty (`if x == ""`), so an
        // empty value reads as the default too.
        match (found, &self.default) {
            (Some(v), Some(d)) if v.is_empty() => Some(d.clone()),
            (None, d) => d.clone(),
            (found, _) => found,
        }
    }
}

impl SelectableFields {
    /// Declares dotted JSON paths such as `spec.nodeName`, which read as `""` when unset.
    pub fn new<I, S>(paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<Box<str>>,
    {
        Self(
            paths
                .into_iter()
                .map(|p| SelectableField {
                    path: p.into(),
                    reads: None,
                    default: None,
                })
                .collect(),
        )
    }

    /// The same fields, where `path` reads as `value` in objects that lack it (e.g. a
    /// Node's `spec.unschedulable` as `"false"`). Adds `path` if it was not declared.
    #[must_use]
    pub fn with_default(self, path: &str, value: &str) -> Self {
        let mut fields: Vec<SelectableField> = self.0.iter().cloned().collect();
        match fields.iter_mut().find(|f| &*f.path == path) {
            Some(f) => f.default = Some(value.into()),
            None => fields.push(SelectableField {
                path: path.into(),
                reads: None,
                default: Some(value.into()),
            }),
        }
        Self(fields.into())
    }

    /// The same fields, where `name` (added if it was not declared) reads the first of
    /// `paths` with a non-empty value, as upstream's computed fields do (an event's
    /// `source`: `source.component`, else `reportingComponent`).
    #[must_use]
    pub fn with_reads(self, name: &str, paths: &[&str]) -> Self {
        let reads: Box<[Box<str>]> = paths.iter().map(|p| (*p).into()).collect();
        let mut fields: Vec<SelectableField> = self.0.iter().cloned().collect();
        match fields.iter_mut().find(|f| &*f.path == name) {
            Some(f) => f.reads = Some(reads),
            None => fields.push(SelectableField {
                path: name.into(),
                reads: Some(reads),
                default: None,
            }),
        }
        Self(fields.into())
    }

    /// Only `metadata.name` and `metadata.namespace`.
    pub fn none() -> Self {
        Self::default()
    }

    /// The declared paths.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|f| &*f.path)
    }

    /// The value `path` reads as in an object that lacks it, when declared.
    pub fn default_of(&self, path: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|f| &*f.path == path)
            .and_then(|f| f.default.as_deref())
    }

    /// Whether a field selector may name `path` for this resource.
    pub fn supports(&self, path: &str) -> bool {
        path == "metadata.name" || path == "metadata.namespace" || self.paths().any(|p| p == path)
    }
}

impl fmt::Debug for SelectableFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        for field in self.0.iter() {
            match &field.default {
                Some(d) => list.entry(&format_args!("{}(default {d:?})", field.path)),
                None => list.entry(&field.path),
            };
        }
        list.finish()
    }
}

/// An object's labels, sorted by key for binary search.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LabelSet(Box<[(Box<str>, Box<str>)]>);

impl LabelSet {
    /// Iterates over `(key, value)` in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Labels for LabelSet {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|(_, v)| &**v)
    }
}

impl fmt::Debug for LabelSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

struct Body {
    /// Canonical JSON, without `metadata.resourceVersion`.
    json: Bytes,
    /// Offset just inside `"metadata":{`, where the resource version is spliced in.
    rv_at: usize,
    /// Whether metadata has members after the splice point (so a comma must follow).
    meta_has_members: bool,
    name: Box<str>,
    namespace: Option<Box<str>>,
    uid: Option<Box<str>>,
    labels: LabelSet,
    fields: SelectableFields,
    /// Parallel to `fields`; `None` where the object lacks the field.
    field_values: Box<[Option<Box<str>>]>,
    /// The shared encodings of the replays in progress of this body at one version
    /// ([`Object::with_replay_encoding`]), held weakly: a stored object never keeps bytes
    /// alive by it.
    replay: Mutex<(u64, Weak<SharedWire>)>,
}

/// Everything an [`Object`] is made of, as plain values: for a store that persists an object's
/// parsed view beside its stored JSON, so that loading it back needs no JSON parsing (see
/// [`Object::from_parts`]; [`Object::splice_point`] and the accessors give the parts).
#[derive(Debug, Clone)]
pub struct ObjectParts {
    /// The stored JSON ([`Object::stored_json`]).
    pub json: Bytes,
    /// Where the resource version is spliced in, and whether metadata members follow it
    /// ([`Object::splice_point`]).
    pub splice_point: (usize, bool),
    /// `metadata.name`.
    pub name: Box<str>,
    /// `metadata.namespace`.
    pub namespace: Option<Box<str>>,
    /// `metadata.uid`.
    pub uid: Option<Box<str>>,
    /// `metadata.labels`, in any order.
    pub labels: Vec<(Box<str>, Box<str>)>,
    /// The resource's selectable fields...
    pub fields: SelectableFields,
    /// ...and the object's value of each, in the same order.
    pub field_values: Vec<Option<Box<str>>>,
}

/// A Kubernetes object as the pipeline holds it.
///
/// ```
/// use listwatch_api::{Object, SelectableFields, fields::Fields};
/// let fields = SelectableFields::new(["spec.nodeName"]);
/// let pod = Object::from_json(
///     br#"{"kind":"Pod","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"},"spec":{"nodeName":"n1"}}"#,
///     &fields,
/// ).unwrap();
/// assert_eq!(pod.resource_version(), 7);
/// assert_eq!(pod.get_field("spec.nodeName"), Some("n1"));
/// let v8 = pod.with_resource_version(8);
/// assert!(std::str::from_utf8(&v8.to_json_bytes()).unwrap().contains(r#""resourceVersion":"8""#));
/// ```
#[derive(Clone)]
pub struct Object {
    body: Arc<Body>,
    rv: u64,
    /// When set, the wire bytes at `rv` and other encodings of it, computed at most once
    /// and shared by every clone (see [`Object::with_shared_encoding`]).
    wire: Option<Arc<SharedWire>>,
}

/// How many other encodings (besides the wire JSON) one shared object keeps: enough for
/// every variant a watch can ask for, so that W watchers of one variant cost one encoding,
/// not W — a Table (`meta.k8s.io/v1` or `v1beta1`) with `includeObject` `None`, `Metadata`
/// or `Object` (six), `PartialObjectMetadata` with and without `metadata.managedFields`
/// (two), the JSON without them (one), CBOR with and without them (two) — plus one spare
/// for the same object served through a second resource description. The slots are
/// allocated on first use (12 × 40 bytes) and live as long as the event.
const OTHER_ENCODINGS: usize = 12;

/// The encodings shared by the clones of one [`Object::with_shared_encoding`] result.
#[derive(Default)]
struct SharedWire {
    json: OnceLock<Bytes>,
    /// The `meta.k8s.io/v1` `PartialObjectMetadata` projection ([`crate::partial_meta`]),
    /// shared by every metadata consumer of the event.
    metadata: OnceLock<Bytes>,
    /// Other encodings by their caller's key; allocated on first use.
    others: OnceLock<Box<OtherEncodings>>,
}

/// Slots of other encodings, each set once to a key and its bytes.
type OtherEncodings = [OnceLock<(u64, Bytes)>; OTHER_ENCODINGS];

/// Wire encodings performed by [`Object::write_json`] since the process started. Tests use it
/// to prove that an event fanned out to many watchers is encoded once.
static WIRE_ENCODES: AtomicU64 = AtomicU64::new(0);

/// How many times an object's wire JSON has been produced in this process.
pub fn wire_encode_count() -> u64 {
    WIRE_ENCODES.load(Ordering::Relaxed)
}

impl Object {
    /// Parses JSON bytes. A `metadata.resourceVersion` in them becomes the object's version.
    pub fn from_json(json: &[u8], fields: &SelectableFields) -> Result<Self, ObjectError> {
        let value: Value = serde_json::from_slice(json)?;
        Self::from_value(value, fields)
    }

    /// Builds an object from a JSON value (see [`Object::from_json`]).
    pub fn from_value(value: Value, fields: &SelectableFields) -> Result<Self, ObjectError> {
        let Value::Object(mut top) = value else {
            return Err(ObjectError::Shape("must be a JSON object".into()));
        };
        let meta = match top
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()))
        {
            Value::Object(m) => m,
            _ => return Err(ObjectError::Shape("metadata must be an object".into())),
        };
        let rv = match meta.remove("resourceVersion") {
            None | Some(Value::Null) => 0,
            Some(Value::String(s)) => {
                rv::parse(&s).map_err(|e| ObjectError::Shape(e.to_string()))?
            }
            Some(_) => {
                return Err(ObjectError::Shape(
                    "metadata.resourceVersion must be a string".into(),
                ));
            }
        };
        let name = opt_str(meta, "name")?.unwrap_or_default().into();
        let namespace = opt_str(meta, "namespace")?
            .filter(|s| !s.is_empty())
            .map(Into::into);
        let uid = opt_str(meta, "uid")?.map(Into::into);
        let labels = match meta.get("labels") {
            None | Some(Value::Null) => LabelSet::default(),
            Some(Value::Object(m)) => {
                let mut pairs = Vec::with_capacity(m.len());
                for (k, v) in m {
                    let Value::String(v) = v else {
                        return Err(ObjectError::Shape(format!("label {k:?} must be a string")));
                    };
                    pairs.push((k.as_str().into(), v.as_str().into()));
                }
                pairs.sort_unstable_by(|a: &(Box<str>, Box<str>), b| a.0.cmp(&b.0));
                LabelSet(pairs.into_boxed_slice())
            }
            Some(_) => return Err(ObjectError::Shape("metadata.labels must be a map".into())),
        };
        let top_value = Value::Object(top);
        let field_values = fields.0.iter().map(|f| f.read(&top_value)).collect();
        let Value::Object(top) = top_value else {
            return Err(ObjectError::Shape("must be a JSON object".into()));
        };
        let (json, rv_at, meta_has_members) = canonical(&top)?;
        Ok(Self {
            body: Arc::new(Body {
                // Exact-size: a Vec grown by doubling can hold up to twice its length, and
                // the cache keeps these bytes for every object (see the watch cache memory test).
                json: Bytes::from(json.into_boxed_slice()),
                rv_at,
                meta_has_members,
                name,
                namespace,
                uid,
                labels,
                fields: fields.clone(),
                field_values,
                replay: Mutex::default(),
            }),
            rv,
            wire: None,
        })
    }

    /// Rebuilds an object from parts taken from an object earlier (by a store that persisted
    /// them with a checksum), without parsing its JSON. The splice point and the number of
    /// field values are checked against the JSON and the fields (so a damaged part cannot make
    /// later use of the object panic); the name, namespace, uid, labels and field values are
    /// trusted to be what [`Object::from_json`] found in these bytes.
    pub fn from_parts(parts: ObjectParts, rv: u64) -> Result<Self, ObjectError> {
        let ObjectParts {
            json,
            splice_point: (rv_at, meta_has_members),
            name,
            namespace,
            uid,
            mut labels,
            fields,
            field_values,
        } = parts;
        let head = json
            .get(..rv_at)
            .ok_or_else(|| ObjectError::Shape("splice point past the end".into()))?;
        if !head.ends_with(b"\"metadata\":{")
            || meta_has_members == (json.get(rv_at) == Some(&b'}'))
        {
            return Err(ObjectError::Shape(
                "splice point is not just inside metadata".into(),
            ));
        }
        if field_values.len() != fields.0.len() {
            return Err(ObjectError::Shape(
                "one value per selectable field expected".into(),
            ));
        }
        labels.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(Self {
            body: Arc::new(Body {
                json,
                rv_at,
                meta_has_members,
                name,
                namespace: namespace.filter(|n| !n.is_empty()),
                uid,
                labels: LabelSet(labels.into_boxed_slice()),
                fields,
                field_values: field_values.into_boxed_slice(),
                replay: Mutex::default(),
            }),
            rv,
            wire: None,
        })
    }

    /// Where the resource version is spliced into the stored JSON (just inside
    /// `"metadata":{`), and whether other metadata members follow it: with
    /// [`Object::stored_json`] and the parsed view, what [`Object::from_parts`] needs.
    pub fn splice_point(&self) -> (usize, bool) {
        (self.body.rv_at, self.body.meta_has_members)
    }

    /// The object's value of each of its resource's selectable fields
    /// ([`Object::selectable_fields`]), in their order.
    pub fn field_values(&self) -> impl Iterator<Item = Option<&str>> {
        self.body.field_values.iter().map(|v| v.as_deref())
    }

    /// The same object, whose wire bytes are computed on first use and then shared by every
    /// clone of the result. A dispatcher calls this once per event so that however many
    /// watchers send it, the object is encoded once; caches should not keep such objects
    /// (they would hold the bytes twice).
    #[must_use]
    pub fn with_shared_encoding(&self) -> Self {
        Self {
            body: Arc::clone(&self.body),
            rv: self.rv,
            wire: Some(Arc::default()),
        }
    }

    /// The same object with a shared encoding ([`Object::with_shared_encoding`]) that every
    /// replay of this stored object at this version reuses while any replay still holds it:
    /// W watchers replaying one object at once (a watch from the cache's state) encode it
    /// once per format, not W times. The stored object refers to the encodings only weakly,
    /// so they are dropped with the last replay's event and a cache holds no bytes by it.
    #[must_use]
    pub fn with_replay_encoding(&self) -> Self {
        if self.wire.is_some() {
            return self.clone();
        }
        let mut slot = self
            .body
            .replay
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let wire = match slot.1.upgrade() {
            Some(w) if slot.0 == self.rv => w,
            _ => {
                let w = Arc::<SharedWire>::default();
                *slot = (self.rv, Arc::downgrade(&w));
                w
            }
        };
        Self {
            body: Arc::clone(&self.body),
            rv: self.rv,
            wire: Some(wire),
        }
    }

    /// Decodes a typed value (e.g. a `Pod` struct) from the wire bytes.
    pub fn deserialize<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.to_json_bytes())
    }

    /// The object as a JSON value, with its resource version, for read-modify-write.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_slice(&self.to_json_bytes())
    }

    /// The resource version (0 for an object never stored).
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The same object at another resource version; shares bytes and view.
    #[must_use]
    pub fn with_resource_version(&self, rv: u64) -> Self {
        Self {
            body: Arc::clone(&self.body),
            rv,
            wire: None,
        }
    }

    /// `metadata.name` (empty when unset, e.g. before generateName is resolved).
    pub fn name(&self) -> &str {
        &self.body.name
    }

    /// `metadata.namespace`, `None` for cluster-scoped objects.
    pub fn namespace(&self) -> Option<&str> {
        self.body.namespace.as_deref()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> Option<&str> {
        self.body.uid.as_deref()
    }

    /// The 64-bit FNV-1a hash of `field` (`""` when the object has none), which a
    /// [`crate::shard::ShardSelector`] ranges over. Computed when asked, not kept: hashing a
    /// uid is a few dozen multiply-xors, cheaper than the bytes a cached hash would add to
    /// every stored object of a server that never sees a shard selector.
    pub fn shard_hash(&self, field: crate::shard::ShardField) -> u64 {
        use crate::shard::{ShardField, fnv1a64};
        let value = match field {
            ShardField::Uid => self.uid(),
            ShardField::Namespace => self.namespace(),
        };
        fnv1a64(value.unwrap_or("").as_bytes())
    }

    /// Whether `selector` selects this object.
    pub fn in_shard(&self, selector: &crate::shard::ShardSelector) -> bool {
        match selector.field() {
            None => true,
            Some(f) => selector.contains(self.shard_hash(f)),
        }
    }

    /// `metadata.labels`.
    pub fn labels(&self) -> &LabelSet {
        &self.body.labels
    }

    /// The declared selectable fields of this object's resource.
    pub fn selectable_fields(&self) -> &SelectableFields {
        &self.body.fields
    }

    /// The canonical JSON as stored: everything but `metadata.resourceVersion`.
    pub fn stored_json(&self) -> &Bytes {
        &self.body.json
    }

    /// Length of the stored JSON in bytes.
    pub fn size(&self) -> usize {
        self.body.json.len()
    }

    /// Whether two objects hold the same stored bytes (resource versions aside).
    pub fn same_content(&self, other: &Object) -> bool {
        Arc::ptr_eq(&self.body, &other.body) || self.body.json == other.body.json
    }

    /// Appends the wire JSON (with `metadata.resourceVersion`) to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        if let Some(bytes) = self.wire.as_ref().and_then(|w| w.json.get()) {
            out.extend_from_slice(bytes);
            return;
        }
        WIRE_ENCODES.fetch_add(1, Ordering::Relaxed);
        let b = &self.body;
        out.reserve(b.json.len() + 48);
        out.extend_from_slice(&b.json[..b.rv_at]);
        if self.rv != 0 {
            out.extend_from_slice(b"\"resourceVersion\":\"");
            out.extend_from_slice(self.rv.to_string().as_bytes());
            out.push(b'"');
            if b.meta_has_members {
                out.push(b',');
            }
        }
        out.extend_from_slice(&b.json[b.rv_at..]);
    }

    /// The wire JSON. With no resource version set this shares the stored bytes.
    pub fn to_json_bytes(&self) -> Bytes {
        if self.rv == 0 {
            return self.body.json.clone();
        }
        let encode = || {
            let mut out = Vec::new();
            self.write_json(&mut out);
            Bytes::from(out)
        };
        match &self.wire {
            Some(w) => w.json.get_or_init(encode).clone(),
            None => encode(),
        }
    }

    /// The wire JSON without `metadata.managedFields` (upstream's
    /// `drop=metadata.managedFields`, [`crate::drop_fields`]); the wire JSON itself when the
    /// object has none. Not kept: a caller that sends it to many watchers shares it through
    /// [`Object::shared_encoding`].
    pub fn to_json_bytes_without_managed_fields(&self) -> Bytes {
        let wire = self.to_json_bytes();
        match crate::drop_fields::without_managed_fields(&wire) {
            Some(cut) => Bytes::from(cut),
            None => wire,
        }
    }

    /// The same object without `metadata.managedFields` (a client that does not read them
    /// keeps less: the informer's strip transform, client-go's `TransformStripManagedFields`
    /// idiom); the object itself when it has none.
    #[must_use]
    pub fn without_managed_fields(&self) -> Object {
        let Some(cut) = crate::drop_fields::without_managed_fields(&self.body.json) else {
            return self.clone();
        };
        match Object::from_json(&cut, &self.body.fields) {
            Ok(o) => o.with_resource_version(self.rv),
            Err(_) => self.clone(),
        }
    }

    /// The object's `meta.k8s.io/v1` `PartialObjectMetadata` JSON at its version, cut from the
    /// stored bytes without decoding them ([`crate::partial_meta`]). On a
    /// [`Object::with_shared_encoding`] (or replay) result it is built at most once and shared
    /// by every clone, so every metadata consumer of one event (HTTP metadata watchers,
    /// in-process metadata informers) gets the same bytes; otherwise each call builds it.
    /// An error only for a persisted body whose metadata cannot be followed.
    pub fn partial_metadata_json(&self) -> Result<Bytes, ObjectError> {
        let Some(wire) = &self.wire else {
            return self.partial_metadata_json_at(false);
        };
        if let Some(b) = wire.metadata.get() {
            return Ok(b.clone());
        }
        let b = self.partial_metadata_json_at(false)?;
        // Two racing first callers may both build it; one result is kept and shared.
        Ok(wire.metadata.get_or_init(|| b).clone())
    }

    /// The `PartialObjectMetadata` JSON at `meta.k8s.io/v1` or, when `beta`, `v1beta1`, built
    /// for this call (never shared).
    pub fn partial_metadata_json_at(&self, beta: bool) -> Result<Bytes, ObjectError> {
        let b = &self.body;
        crate::partial_meta::project(&b.json, b.rv_at, b.meta_has_members, self.rv, beta)
    }

    /// Whether this object's shared `PartialObjectMetadata` projection is built already
    /// ([`Object::partial_metadata_json`]); always false without a shared encoding.
    pub fn has_partial_metadata(&self) -> bool {
        self.wire
            .as_ref()
            .is_some_and(|w| w.metadata.get().is_some())
    }

    /// Calls `f` with the wire JSON, without a new reference to it: the shared encoding when
    /// the object has one (built on first use, as [`Object::to_json_bytes`] does), otherwise
    /// bytes encoded for this call. For a writer that copies the bytes anyway (a watch batch),
    /// this saves the reference count traffic of a [`Bytes`] clone and drop per event.
    pub fn with_json<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        if self.rv == 0 {
            return f(&self.body.json);
        }
        let encode = || {
            let mut out = Vec::new();
            self.write_json(&mut out);
            out
        };
        match &self.wire {
            Some(w) => f(w.json.get_or_init(|| Bytes::from(encode()))),
            None => f(&encode()),
        }
    }

    /// The encoding known by `key` ([`Object::shared_encoding`]) if one is already kept
    /// for this object, without computing it (a caller that moves the encoding elsewhere
    /// when it is not ready yet, e.g. to the request compute pool).
    pub fn cached_encoding(&self, key: u64) -> Option<Bytes> {
        let slots = self.wire.as_ref()?.others.get()?;
        slots.iter().find_map(|slot| match slot.get() {
            Some((k, b)) if *k == key => Some(b.clone()),
            _ => None,
        })
    }

    /// Another encoding of the object at its version (a Table row, its partial metadata…),
    /// known by `key`: the caller's name for the encoding and everything it depends on (a
    /// different key for every different output). On a [`Object::with_shared_encoding`]
    /// result it is kept and shared by every clone, like the wire bytes: `encode` runs for
    /// the first caller of a key (two racing first callers may both run it; one result is
    /// kept), up to a few keys per object; otherwise, and on failure, each call encodes.
    pub fn shared_encoding<E>(
        &self,
        key: u64,
        encode: impl FnOnce(&Object) -> Result<Bytes, E>,
    ) -> Result<Bytes, E> {
        let Some(wire) = &self.wire else {
            return encode(self);
        };
        let slots = wire.others.get_or_init(Box::default);
        for slot in slots.iter() {
            match slot.get() {
                Some((k, b)) if *k == key => return Ok(b.clone()),
                Some(_) => {}
                None => break,
            }
        }
        let bytes = encode(self)?;
        for slot in slots.iter() {
            if slot.set((key, bytes.clone())).is_ok() {
                break;
            }
            // Taken meanwhile: by the same key (share its bytes) or another (next slot).
            if let Some((k, b)) = slot.get()
                && *k == key
            {
                return Ok(b.clone());
            }
        }
        Ok(bytes)
    }
}

impl Fields for Object {
    fn get_field(&self, path: &str) -> Option<&str> {
        match path {
            "metadata.name" => Some(self.name()),
            "metadata.namespace" => Some(self.namespace().unwrap_or("")),
            _ => {
                let i = self.body.fields.paths().position(|p| p == path)?;
                self.body.field_values.get(i)?.as_deref()
            }
        }
    }
}

impl Labels for Object {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.body.labels.get_label(key)
    }
}

impl PartialEq for Object {
    fn eq(&self, other: &Self) -> bool {
        self.rv == other.rv && self.same_content(other)
    }
}

impl Eq for Object {}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Object")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .field("resource_version", &self.rv)
            .field("bytes", &self.size())
            .finish()
    }
}

fn opt_str<'a>(m: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ObjectError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(ObjectError::Shape(format!(
            "metadata.{key} must be a string"
        ))),
    }
}

/// A scalar at a dotted path, as text (strings as-is, numbers and booleans printed).
fn scalar_at(v: &Value, path: &str) -> Option<Box<str>> {
    let mut cur = v;
    for seg in path.split('.') {
        cur = cur.as_object()?.get(seg)?;
    }
    match cur {
        Value::String(s) => Some(s.as_str().into()),
        Value::Number(n) => Some(n.to_string().into()),
        Value::Bool(b) => Some(b.to_string().into()),
        _ => None,
    }
}

/// The top-level members of a typed (built-in) object after `kind`, `apiVersion` and
/// `metadata`, in the order of upstream's Go struct (k8s.io/api `core/v1/types.go`,
/// `rbac/v1/types.go`; most kinds are `spec` then `status`). Members not listed follow in
/// key order.
fn typed_members(kind: &str) -> &'static [&'static str] {
    match kind {
        "ConfigMap" => &["immutable", "data", "binaryData"],
        "Secret" => &["immutable", "data", "stringData", "type"],
        "ServiceAccount" => &[
            "secrets",
            "imagePullSecrets",
            "automountServiceAccountToken",
        ],
        "Endpoints" => &["subsets"],
        "Event" => &[
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        ],
        "Role" | "ClusterRole" => &["rules", "aggregationRule"],
        "RoleBinding" | "ClusterRoleBinding" => &["subjects", "roleRef"],
        _ => &["spec", "status"],
    }
}

/// Whether upstream serves objects of `api_version` as typed structs (built-in groups:
/// the core `v1`, the unqualified `apps`, `batch`, `autoscaling`, `policy`, and `*.k8s.io`)
/// rather than as `Unstructured` maps (custom resources), which `encoding/json` writes in
/// key order — `apiVersion` first.
fn is_typed(api_version: Option<&Value>) -> bool {
    let Some(Value::String(av)) = api_version else {
        return true;
    };
    match av.split_once('/') {
        None => true,
        Some((group, _)) => {
            matches!(group, "apps" | "batch" | "autoscaling" | "policy")
                || group.ends_with(".k8s.io")
        }
    }
}

/// Serializes the top-level map, noting where metadata's members begin, in the member
/// order upstream writes: a typed (built-in) object as its Go struct, `kind`, `apiVersion`,
/// `metadata`, then its own members ([`typed_members`]; k8s.io/apimachinery
/// `pkg/apis/meta/v1/types.go` `TypeMeta`, encoded by `encoding/json` in
/// `pkg/runtime/serializer/json/json.go`), so clients that report a decode error's column
/// (kube-rs) see upstream's; a custom resource in key order, as upstream's `Unstructured`.
fn canonical(top: &Map<String, Value>) -> Result<(Vec<u8>, usize, bool), ObjectError> {
    let mut out = Vec::with_capacity(256);
    let mut rv_at = 0;
    let mut meta_has_members = false;
    out.push(b'{');
    let lead: &[&str] = if is_typed(top.get("apiVersion")) {
        &["kind", "apiVersion", "metadata"]
    } else {
        &[]
    };
    let own = match top.get("kind") {
        Some(Value::String(kind)) if !lead.is_empty() => typed_members(kind),
        _ => &[],
    };
    let listed = |k: &str| lead.contains(&k) || own.contains(&k);
    let head = lead.iter().chain(own).filter_map(|k| top.get_key_value(*k));
    let rest = top.iter().filter(|(k, _)| !listed(k));
    for (i, (k, v)) in head.chain(rest).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, k)?;
        out.push(b':');
        match (k.as_str(), v) {
            ("metadata", Value::Object(meta)) => {
                out.push(b'{');
                rv_at = out.len();
                meta_has_members = !meta.is_empty();
                for (j, (mk, mv)) in meta.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut out, mk)?;
                    out.push(b':');
                    if mk == "managedFields" {
                        // FieldsV1 keys in upstream's order, not as text.
                        crate::fields_v1::write_managed_fields(&mut out, mv)?;
                    } else {
                        serde_json::to_writer(&mut out, mv)?;
                    }
                }
                out.push(b'}');
            }
            _ => serde_json::to_writer(&mut out, v)?,
        }
    }
    out.push(b'}');
    Ok((out, rv_at, meta_has_members))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stored_body_carries_no_per_object_caches_beyond_its_parsed_view() {
        // Every stored object of every resource has one `Body`; bytes added here multiply by
        // the object count (P8). Printed so a change shows its cost.
        let size = std::mem::size_of::<super::Body>();
        println!("size_of::<Body>() = {size}");
        assert!(
            size <= BODY_BYTES,
            "Body grew to {size} bytes (bound {BODY_BYTES})"
        );
    }
    // 168 on x86_64 (was 200 with the two cached shard hashes, session 8).
    const BODY_BYTES: usize = 168;

    use super::*;
    use proptest::prelude::*;

    fn parts_of(o: &Object) -> ObjectParts {
        ObjectParts {
            json: o.stored_json().clone(),
            splice_point: o.splice_point(),
            name: o.name().into(),
            namespace: o.namespace().map(Into::into),
            uid: o.uid().map(Into::into),
            labels: o
                .labels()
                .iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            fields: o.selectable_fields().clone(),
            field_values: o.field_values().map(|v| v.map(Into::into)).collect(),
        }
    }

    #[test]
    fn an_object_rebuilt_from_its_parts_is_the_same_object() {
        let fields = SelectableFields::new(["spec.nodeName", "status.phase"]);
        for json in [
            r#"{"kind":"Pod","metadata":{"name":"a","namespace":"ns","uid":"u","labels":{"b":"2","a":"1"}},"spec":{"nodeName":"n1"}}"#,
            r#"{"metadata":{}}"#,
            r#"{"metadata":{"name":"x"},"status":{"phase":"Running"}}"#,
        ] {
            let o = Object::from_json(json.as_bytes(), &fields).unwrap();
            let back = Object::from_parts(parts_of(&o), 7).unwrap();
            assert_eq!(back.resource_version(), 7);
            assert!(back.same_content(&o));
            assert_eq!(
                back.to_json_bytes(),
                o.with_resource_version(7).to_json_bytes()
            );
            assert_eq!(
                (back.name(), back.namespace(), back.uid()),
                (o.name(), o.namespace(), o.uid())
            );
            assert_eq!(back.labels(), o.labels());
            assert_eq!(back.get_label("a"), o.get_label("a"));
            for f in ["spec.nodeName", "status.phase", "metadata.namespace"] {
                assert_eq!(back.get_field(f), o.get_field(f), "{f}");
            }
        }
    }

    #[test]
    fn damaged_parts_are_refused_not_trusted_into_a_panic() {
        let o = Object::from_json(
            br#"{"metadata":{"name":"a"},"spec":{"nodeName":"n"}}"#,
            &SelectableFields::new(["spec.nodeName"]),
        )
        .unwrap();
        let (at, more) = o.splice_point();
        for splice in [
            (at + 1, more),
            (at - 1, more),
            (at, !more),
            (10_000, more),
            (0, more),
        ] {
            let mut p = parts_of(&o);
            p.splice_point = splice;
            assert!(Object::from_parts(p, 1).is_err(), "{splice:?}");
        }
        let mut p = parts_of(&o);
        p.field_values.push(None);
        assert!(Object::from_parts(p, 1).is_err());
    }

    fn pod(json: &str) -> Object {
        Object::from_json(
            json.as_bytes(),
            &SelectableFields::new(["spec.nodeName", "status.phase"]),
        )
        .unwrap()
    }

    #[test]
    fn an_unset_field_with_a_default_reads_as_the_default() {
        use crate::fields::FieldSelector;
        let fields =
            SelectableFields::new(["spec.nodeName"]).with_default("spec.unschedulable", "false");
        let unset = Object::from_json(br#"{"metadata":{"name":"a"},"spec":{}}"#, &fields).unwrap();
        let null = Object::from_json(
            br#"{"metadata":{"name":"b"},"spec":{"unschedulable":null}}"#,
            &fields,
        )
        .unwrap();
        let set = Object::from_json(
            br#"{"metadata":{"name":"c"},"spec":{"unschedulable":true}}"#,
            &fields,
        )
        .unwrap();
        let sel = FieldSelector::parse("spec.unschedulable==false").unwrap();
        assert!(sel.matches(&unset) && sel.matches(&null) && !sel.matches(&set));
        assert_eq!(unset.get_field("spec.nodeName"), None);
        let fields = SelectableFields::none().with_reads("source", &["source.component", "rc"]);
        let parse = |j: &str| Object::from_json(j.as_bytes(), &fields).unwrap();
        let both = parse(r#"{"metadata":{"name":"a"},"source":{"component":"k"},"rc":"c"}"#);
        let empty = parse(r#"{"metadata":{"name":"b"},"source":{"component":""},"rc":"c"}"#);
        let none = parse(r#"{"metadata":{"name":"c"}}"#);
        assert_eq!(both.get_field("source"), Some("k"));
        assert_eq!(empty.get_field("source"), Some("c"));
        assert_eq!(none.get_field("source"), None);
        // Persisted values carry the default, so a store rebuilding the object keeps it.
        let back = Object::from_parts(parts_of(&unset), 1).unwrap();
        assert_eq!(back.get_field("spec.unschedulable"), Some("false"));
    }

    /// Upstream's defaulting fills empty strings as it fills unset fields (`if x == ""`):
    /// a secret sent with `type: ""` is stored as `Opaque` there, so it selects as one here
    /// (red-team finding F2 of issue 29); a field without a default keeps `""`.
    #[test]
    fn an_empty_field_with_a_default_reads_as_the_default() {
        use crate::fields::FieldSelector;
        let fields = SelectableFields::new(["spec.nodeName"]).with_default("type", "Opaque");
        let parse = |j: &str| Object::from_json(j.as_bytes(), &fields).unwrap();
        let empty = parse(r#"{"metadata":{"name":"a"},"type":"","spec":{"nodeName":""}}"#);
        assert_eq!(empty.get_field("type"), Some("Opaque"));
        assert!(FieldSelector::parse("type=Opaque").unwrap().matches(&empty));
        assert!(
            !FieldSelector::parse("type!=Opaque")
                .unwrap()
                .matches(&empty)
        );
        assert_eq!(empty.get_field("spec.nodeName"), Some(""));
        let set = parse(r#"{"metadata":{"name":"b"},"type":"kubernetes.io/tls"}"#);
        assert_eq!(set.get_field("type"), Some("kubernetes.io/tls"));
    }

    #[test]
    fn stored_bytes_never_carry_the_resource_version() {
        let o = pod(r#"{"metadata":{"name":"a","resourceVersion":"5"},"spec":{}}"#);
        assert_eq!(o.resource_version(), 5);
        assert!(!String::from_utf8_lossy(o.stored_json()).contains("resourceVersion"));
        let wire: Value = serde_json::from_slice(&o.to_json_bytes()).unwrap();
        assert_eq!(wire["metadata"]["resourceVersion"], "5");
        assert_eq!(wire["metadata"]["name"], "a");
    }

    #[test]
    fn kind_and_api_version_lead_as_in_upstream_typed_objects() {
        let o = pod(r#"{"spec":{},"metadata":{"name":"a"},"apiVersion":"v1","kind":"Pod"}"#)
            .with_resource_version(3);
        assert_eq!(
            std::str::from_utf8(&o.to_json_bytes()).unwrap(),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"3","name":"a"},"spec":{}}"#
        );
        let bare = pod(r#"{"metadata":{},"apiVersion":"v1"}"#);
        assert_eq!(
            &bare.stored_json()[..],
            br#"{"apiVersion":"v1","metadata":{}}"#
        );
        let cm = pod(
            r#"{"data":{},"binaryData":{},"immutable":true,"kind":"ConfigMap","apiVersion":"v1","metadata":{},"x":1}"#,
        );
        assert_eq!(
            &cm.stored_json()[..],
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{},"immutable":true,"data":{},"binaryData":{},"x":1}"#
        );
        // A custom resource is an `Unstructured` upstream: key order throughout.
        let cr = pod(
            r#"{"spec":{},"kind":"CronTab","apiVersion":"stable.example.com/v1","metadata":{}}"#,
        );
        assert_eq!(
            &cr.stored_json()[..],
            br#"{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{},"spec":{}}"#
        );
        let deployment = pod(
            r#"{"status":{},"spec":{},"kind":"Deployment","apiVersion":"apps/v1","metadata":{}}"#,
        );
        assert_eq!(
            &deployment.stored_json()[..],
            br#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{},"spec":{},"status":{}}"#
        );
    }

    #[test]
    fn splices_into_empty_and_missing_metadata() {
        for json in [r#"{"kind":"X","metadata":{}}"#, r#"{"kind":"X"}"#] {
            let o = pod(json).with_resource_version(9);
            let wire: Value = serde_json::from_slice(&o.to_json_bytes()).unwrap();
            assert_eq!(wire["metadata"], serde_json::json!({"resourceVersion":"9"}));
        }
    }

    #[test]
    fn parsed_view_reads_labels_and_fields() {
        let o = pod(
            r#"{"metadata":{"name":"a","namespace":"ns","uid":"u","labels":{"z":"1","a":"2"}},
                "spec":{"nodeName":"n1"},"status":{"phase":"Running"}}"#,
        );
        assert_eq!(o.namespace(), Some("ns"));
        assert_eq!(o.uid(), Some("u"));
        assert_eq!(o.get_label("a"), Some("2"));
        assert_eq!(o.get_label("b"), None);
        assert_eq!(o.get_field("spec.nodeName"), Some("n1"));
        assert_eq!(o.get_field("status.phase"), Some("Running"));
        assert_eq!(o.get_field("metadata.namespace"), Some("ns"));
        assert_eq!(o.get_field("spec.other"), None);
    }

    #[test]
    fn rejects_malformed_objects() {
        let f = SelectableFields::none();
        for bad in [
            "[]",
            "{",
            r#"{"metadata":[]}"#,
            r#"{"metadata":{"name":1}}"#,
            r#"{"metadata":{"resourceVersion":"x"}}"#,
            r#"{"metadata":{"resourceVersion":5}}"#,
            r#"{"metadata":{"labels":{"a":1}}}"#,
        ] {
            assert!(
                Object::from_json(bad.as_bytes(), &f).is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn clone_and_version_change_share_the_body() {
        let o = pod(r#"{"metadata":{"name":"a"}}"#);
        let p = o.with_resource_version(3);
        assert!(Arc::ptr_eq(&o.body, &p.body));
        assert!(o.same_content(&p));
        assert_ne!(o, p);
    }

    #[test]
    fn replays_of_one_stored_object_share_its_encodings_while_one_holds_them() {
        let stored = pod(r#"{"metadata":{"name":"a"}}"#).with_resource_version(4);
        let runs = std::cell::Cell::new(0);
        let enc = |o: &Object| {
            runs.set(runs.get() + 1);
            Ok::<_, ()>(Bytes::from(format!("t{}", o.resource_version())))
        };
        let a = stored.with_replay_encoding();
        let b = stored.clone().with_replay_encoding();
        let (x, y) = (
            a.shared_encoding(1, enc).unwrap(),
            b.shared_encoding(1, enc).unwrap(),
        );
        assert_eq!(
            (x.as_ptr(), runs.get()),
            (y.as_ptr(), 1),
            "one encoding, shared"
        );
        // Another version of the same body is another encoding.
        let other = stored.with_resource_version(5).with_replay_encoding();
        assert_eq!(other.shared_encoding(1, enc).unwrap(), Bytes::from("t5"));
        // Once every replay dropped it, nothing is kept: a later replay encodes again.
        drop((a, b, other, x, y));
        stored
            .with_replay_encoding()
            .shared_encoding(1, enc)
            .unwrap();
        assert_eq!(runs.get(), 3);
    }

    #[test]
    fn other_encodings_are_computed_once_per_key_and_shared_by_clones() {
        let o = pod(r#"{"metadata":{"name":"a"}}"#)
            .with_resource_version(4)
            .with_shared_encoding();
        let runs = std::cell::Cell::new(0);
        let enc = |tag: &'static str| {
            let runs = &runs;
            move |o: &Object| {
                runs.set(runs.get() + 1);
                Ok::<_, ()>(Bytes::from(format!("{tag}{}", o.resource_version())))
            }
        };
        let a = o.clone().shared_encoding(1, enc("a")).unwrap();
        let a2 = o.clone().shared_encoding(1, enc("a")).unwrap();
        assert_eq!(
            (&a[..], a.as_ptr()),
            (&b"a4"[..], a2.as_ptr()),
            "one encoding, shared"
        );
        assert_eq!(runs.get(), 1);
        // Other keys get their own slots; past the slots, each call encodes.
        for k in 2..=OTHER_ENCODINGS as u64 {
            o.shared_encoding(k, enc("b")).unwrap();
        }
        assert_eq!(runs.get(), OTHER_ENCODINGS);
        let x = o.shared_encoding(99, enc("x")).unwrap();
        let y = o.shared_encoding(99, enc("x")).unwrap();
        assert_eq!((&x[..], runs.get()), (&b"x4"[..], OTHER_ENCODINGS + 2));
        assert_eq!(x, y);
        // Failures are not kept; objects without a shared encoding encode every time.
        assert_eq!(o.shared_encoding(100, |_| Err::<Bytes, _>("no")), Err("no"));
        let plain = pod(r#"{"metadata":{"name":"a"}}"#).with_resource_version(4);
        plain.shared_encoding(1, enc("a")).unwrap();
        plain.shared_encoding(1, enc("a")).unwrap();
        assert_eq!(runs.get(), OTHER_ENCODINGS + 4);
    }

    #[test]
    fn shared_encoding_is_computed_once_for_all_clones() {
        let o = pod(r#"{"metadata":{"name":"a"}}"#)
            .with_resource_version(4)
            .with_shared_encoding();
        let clones: Vec<Object> = (0..10).map(|_| o.clone()).collect();
        let first = o.to_json_bytes();
        for c in &clones {
            let b = c.to_json_bytes();
            // Same allocation: the bytes were encoded once and shared.
            assert_eq!(b.as_ptr(), first.as_ptr());
        }
        let mut out = Vec::new();
        clones[0].write_json(&mut out);
        assert_eq!(out, first);
    }

    #[test]
    fn with_json_lends_the_shared_encoding_and_matches_to_json_bytes() {
        let o = pod(r#"{"metadata":{"name":"a"}}"#)
            .with_resource_version(4)
            .with_shared_encoding();
        // First use builds the shared bytes; to_json_bytes then hands out the same ones.
        let lent = o.with_json(|j| (j.as_ptr(), j.to_vec()));
        let shared = o.clone().to_json_bytes();
        assert_eq!((lent.0, lent.1.as_slice()), (shared.as_ptr(), &shared[..]));
        // Without a shared encoding, and at version 0, the same bytes as to_json_bytes.
        let plain = o.with_resource_version(9);
        assert_eq!(plain.with_json(<[u8]>::to_vec), plain.to_json_bytes());
        let unversioned = pod(r#"{"metadata":{"name":"b"}}"#);
        assert_eq!(
            unversioned.with_json(<[u8]>::to_vec),
            unversioned.to_json_bytes()
        );
    }

    #[test]
    fn numbers_keep_their_value_when_the_stored_json_is_parsed_again() {
        // Found by the object_json fuzz target: without correctly rounded float parsing,
        // printing the parsed f64 and parsing that again gave a neighbouring f64, so the
        // stored bytes changed on every read-modify-write.
        let input = br#"{"x":1111111111111111111111311.1111111111111111111111111111111111111111111111111111111111111111111}"#;
        let fields = SelectableFields::none();
        let once = Object::from_json(input, &fields).unwrap();
        let twice = Object::from_json(once.stored_json(), &fields).unwrap();
        assert_eq!(twice.stored_json(), once.stored_json());
    }

    proptest! {
        #[test]
        fn wire_bytes_round_trip_through_from_json(
            name in "[a-z]{1,8}",
            labels in prop::collection::btree_map("[a-z]{1,5}", "[a-z]{0,5}", 0..4),
            rv in 0u64..u64::MAX,
            extra in "\\PC{0,20}",
        ) {
            let v = serde_json::json!({"kind":"Pod","metadata":{"name":name,"labels":labels,
                "annotations":{"x":extra}},"spec":{"nodeName":"n"}});
            let o = Object::from_value(v, &SelectableFields::new(["spec.nodeName"])).unwrap()
                .with_resource_version(rv);
            let back = Object::from_json(&o.to_json_bytes(), o.selectable_fields()).unwrap();
            prop_assert_eq!(back.resource_version(), rv);
            prop_assert_eq!(back.stored_json(), o.stored_json());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = Object::from_json(&bytes, &SelectableFields::none());
        }
    }
}
