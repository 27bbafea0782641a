//! What the merge needs to know of a type: how its lists and maps merge. A schema (the
//! `listwatch-schema` catalog, through [`crate::SchemaTypes`]) answers;
//! [`Untyped`] answers as upstream does for a type without a schema.
//!
//! A walk over a value carries a [`TypeAt`] beside it: the type of the value it is at,
//! stepped into with [`TypeInfo::field`] as the walk steps into a field. List items share
//! their list's position (`spec.containers` then `ports` is the ports list of every
//! container), as upstream's schema paths step through lists. Nothing is keyed by the
//! path walked, so a walk costs the same per node whatever the node's depth or the length
//! of the names above it.

use serde_json::Value;

/// Where a walk is in a type: a handle given out by a [`TypeInfo`] ([`TypeInfo::root`],
/// [`TypeInfo::field`]) and understood by that one alone. Copy and small, so a walk keeps
/// one per level instead of the path it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TypeAt(pub u32);

/// How a list merges (`x-kubernetes-list-type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole; owned as one field (upstream's default).
    Atomic,
    /// Scalars, each owned on its own (`v:` steps).
    Set,
    /// Objects identified by these key fields (`x-kubernetes-list-map-keys`; `k:` steps).
    Map(Vec<String>),
}

/// How an object merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapType {
    /// A struct: its keys are named fields, owned one by one; the struct itself is not a
    /// member of a field set unless it is empty.
    Struct,
    /// A map (`additionalProperties`, `x-kubernetes-map-type: granular`): every entry is
    /// a member of its own, beside whatever is owned under it.
    Granular,
    /// Replaced whole (`x-kubernetes-map-type: atomic`).
    Atomic,
}

/// List and map semantics, walked alongside a value.
pub trait TypeInfo {
    /// The type of the whole object.
    fn root(&self) -> TypeAt {
        TypeAt(0)
    }

    /// The type of field `name` of a value of type `at` (of its items', if `at` is a
    /// list). Must not grow with the names asked about: an implementation that remembers
    /// positions keys them by the schema's own nodes, never by what a caller sent.
    fn field(&self, at: TypeAt, name: &str) -> TypeAt;

    /// A list of type `at`.
    fn list_type(&self, at: TypeAt) -> ListType;

    /// An object of type `at` (a list's items, if `at` is a list).
    fn map_type(&self, at: TypeAt) -> MapType;

    /// The default of key field `key` of the items of the map-list of type `at`, used
    /// when an item leaves it out (upstream: `protocol` of container and service ports).
    fn key_default(&self, at: TypeAt, key: &str) -> Option<Value> {
        let _ = (at, key);
        None
    }
}

/// The type at a path of field names from the root (list items stepped through).
pub fn type_at(types: &dyn TypeInfo, path: &[&str]) -> TypeAt {
    path.iter()
        .fold(types.root(), |at, name| types.field(at, name))
}

/// No schema: lists are atomic and objects are structs, as upstream treats a field its
/// schema declares nothing about.
#[derive(Debug, Clone, Copy, Default)]
pub struct Untyped;

impl TypeInfo for Untyped {
    fn field(&self, at: TypeAt, _name: &str) -> TypeAt {
        at
    }

    fn list_type(&self, _at: TypeAt) -> ListType {
        ListType::Atomic
    }

    fn map_type(&self, _at: TypeAt) -> MapType {
        MapType::Struct
    }
}
