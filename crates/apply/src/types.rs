//! What the merge needs to know of a type: how its lists and maps merge. A schema (the
//! `listwatch-schema` catalog, through an adapter in the server) answers by field path;
//! [`Untyped`] answers as upstream does for a type without a schema.
//!
//! Paths here are schema paths: field names from the root, list items stepped through
//! (`["spec", "containers", "ports"]` is the ports list of every container).

use serde_json::Value;

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

/// List and map semantics by schema path.
pub trait TypeInfo {
    /// The list at `path`.
    fn list_type(&self, path: &[&str]) -> ListType;

    /// The object at `path` (the root is `[]`).
    fn map_type(&self, path: &[&str]) -> MapType;

    /// The default of key field `key` of the items of the map-list at `path`, used when
    /// an item leaves it out (upstream: `protocol` of container and service ports).
    fn key_default(&self, path: &[&str], key: &str) -> Option<Value> {
        let _ = (path, key);
        None
    }
}

/// No schema: lists are atomic and objects are structs, as upstream treats a field its
/// schema declares nothing about.
#[derive(Debug, Clone, Copy, Default)]
pub struct Untyped;

impl TypeInfo for Untyped {
    fn list_type(&self, _path: &[&str]) -> ListType {
        ListType::Atomic
    }

    fn map_type(&self, _path: &[&str]) -> MapType {
        MapType::Struct
    }
}
