//! Structural schemas of custom resources: upstream's apiextensions-apiserver
//! `pkg/apiserver/schema` (structural invariants, pruning, defaulting) and kube-openapi's
//! `pkg/validation/validate` (value validation and its messages), for one CRD version's
//! `openAPIV3Schema`.
//!
//! What it owns:
//! - [`Structural::new`]: compiles a schema, or refuses it with upstream's messages when it
//!   is not structural (a field without a `type`, `type` or `default` inside `anyOf`, ...),
//!   uses what upstream refuses in CRDs (`$ref`, `uniqueItems: true`, ...), or uses
//!   `x-kubernetes-validations` (CEL rules are not supported by this server). Errors are
//!   [`FieldError`]s with a path relative to the schema (`properties[spec].type`): the CRD
//!   API prefixes them with its own path (e.g. `spec.versions[0].schema.openAPIV3Schema`)
//!   and answers them as 422 causes.
//! - [`Structural::prune`]: drops what the schema does not declare (kept under
//!   `x-kubernetes-preserve-unknown-fields`; `apiVersion`, `kind` and `metadata` kept at the
//!   root and in `x-kubernetes-embedded-resource` objects) and returns the pruned paths.
//! - [`Structural::default`]: drops non-nullable `null`s without a default, then applies the
//!   schema's defaults, as upstream's decoder does after pruning.
//! - [`Structural::validate`]: the schema's value validations with kube-openapi's messages,
//!   then the `x-kubernetes-list-type` set/map checks and the ObjectMeta/TypeMeta of
//!   `x-kubernetes-embedded-resource` objects; [`Structural::validate_update`] the
//!   same with upstream's ratcheting of unchanged values.
//!
//! Invariants: every input is hostile. A compiled schema is at most [`MAX_DEPTH`] levels deep
//! (junctors included) and [`MAX_NODES`] nodes; every walk of an object recurses along the
//! schema, so its depth is bounded by the schema's whatever the object; a validation spends
//! at most [`VALIDATION_BUDGET`] steps (one per value visited per schema node, plus a
//! string's length times the pattern's weight, 1 plus a step per 4 KiB of its program, per
//! pattern match) and then stops with an error; patterns
//! are compiled by the `regex` crate's engine (`regex-automata`: RE2 syntax as Go's
//! `regexp`, matched by its PikeVM or one-pass DFA, linear in the string; no lazy DFA or
//! backtracker, whose per-thread caches would grow with use) within [`MAX_REGEX_BYTES`] of
//! program each and [`MAX_REGEX_TOTAL_BYTES`] of heap together per CRD ([`PatternBudget`]),
//! each distinct pattern once per process while something holds it (`pattern_cache`: the
//! sum of the live patterns, [`pattern_bytes`], is bounded across the server by
//! [`pattern_limit`] when a CRD is validated, and drops when a CRD's schema is no longer
//! served); at most [`MAX_ERRORS`] errors and [`MAX_PRUNED`] pruned paths are kept. Nothing
//! here panics on any schema or object (a property test checks it).

//!
//! ```
//! use listwatch_kinds::custom::schema::Structural;
//! use serde_json::json;
//!
//! let schema = Structural::new(&json!({"type": "object", "properties": {
//!     "spec": {"type": "object", "properties": {
//!         "replicas": {"type": "integer", "default": 1}}}}}))
//! .unwrap();
//! let mut obj = json!({"apiVersion": "example.com/v1", "kind": "Widget",
//!     "metadata": {"name": "w"}, "spec": {"extra": true}});
//! assert_eq!(schema.prune(&mut obj), ["spec.extra"]);
//! schema.default(&mut obj);
//! assert_eq!(obj["spec"]["replicas"], 1);
//! obj["spec"]["replicas"] = json!("three");
//! assert_eq!(
//!     schema.validate(&obj)[0].to_string(),
//!     r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#
//! );
//!
//! // Not structural: each reason is a field error under the schema, to be prefixed with the
//! // CRD's own path and answered as a 422 cause (`reason`, `field`, `body()`).
//! let errs = Structural::new(&json!({"type": "object", "properties": {"spec": {}}})).unwrap_err();
//! let e = errs[0].clone().prefixed("spec.versions[0].schema.openAPIV3Schema");
//! assert_eq!(e.kind.reason(), "FieldValueRequired");
//! assert_eq!(e.field, "spec.versions[0].schema.openAPIV3Schema.properties[spec].type");
//! assert_eq!(e.body(), "Required value: must not be empty for specified object fields");
//! ```

mod build;
mod embedded;
mod format;
mod mutate;
mod pattern;
mod pattern_cache;

pub use pattern_cache::{
    DEFAULT_LIMIT_BYTES as DEFAULT_PATTERN_LIMIT_BYTES, MAX_RECENT_BYTES, MAX_RECENT_ENTRIES,
    compiles as pattern_compiles, limit as pattern_limit, live_bytes as pattern_bytes,
    release_recent as release_unused_patterns, set_limit as set_pattern_limit,
};
mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::field::FieldError;

/// The deepest a schema may nest (properties, items, additionalProperties and junctors each
/// count one level).
pub const MAX_DEPTH: usize = 64;

/// The most schema nodes one schema may have.
pub const MAX_NODES: usize = 20_000;

/// The most compiled program one `pattern` may take (its NFA's size limit). The engine
/// compiles a Unicode class to UTF-8 byte states, so `^\p{L}{1,100}$` takes ~1.5 MiB and
/// `^[\p{L}\p{N}][\p{L}\p{N} ._-]{0,252}$` ~4.4 MiB; Go's `regexp` accepts both.
pub const MAX_REGEX_BYTES: usize = 8 << 20;

/// The most heap all of one CRD's compiled patterns may take together, summed over all its
/// versions' schemas (identical patterns count once; a pattern refused as too large counts
/// [`MAX_REGEX_BYTES`]), so a CRD write compiles at most this much program.
pub const MAX_REGEX_TOTAL_BYTES: usize = 32 << 20;

/// The patterns one CRD's schemas have compiled, and the heap they take together: the
/// CRD's validation compiles every version's schema with one budget
/// ([`Structural::new_within`]), so [`MAX_REGEX_TOTAL_BYTES`] bounds the CRD, not each
/// version. A budget for admission ([`PatternBudget::admission`]) also refuses a pattern
/// that the served schemas do not hold already while the server's live patterns take more
/// than [`pattern_limit`] ([`pattern_bytes`]): the server-wide bound of what CRDs compile.
#[derive(Debug, Default)]
pub struct PatternBudget {
    patterns: std::collections::HashMap<String, pattern_cache::Shared>,
    bytes: usize,
    /// Whether [`pattern_limit`] applies (a CRD's validation; not the strategies built
    /// from a stored CRD, which must serve it).
    admission: bool,
    /// Whether a pattern was refused for the server's limit (the rest are then refused
    /// without compiling).
    server_full: bool,
}

impl PatternBudget {
    /// The budget of a CRD's validation: bounded per CRD and by the server's limit.
    pub fn admission() -> Self {
        Self {
            admission: true,
            ..Self::default()
        }
    }
}

/// The most steps one validation may take before it stops with an error.
pub const VALIDATION_BUDGET: u64 = 20_000_000;

/// The most errors one validation (or one schema compilation) keeps.
pub const MAX_ERRORS: usize = 1000;

/// The most pruned paths [`Structural::prune`] returns (it still prunes everything).
pub const MAX_PRUNED: usize = 1000;

/// A JSON type of a schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Object => "object",
            Ty::Array => "array",
            Ty::String => "string",
            Ty::Integer => "integer",
            Ty::Number => "number",
            Ty::Boolean => "boolean",
        }
    }
}

/// `x-kubernetes-list-type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListType {
    Atomic,
    Set,
    /// With its `x-kubernetes-list-map-keys`.
    Map(Vec<String>),
}

/// A compiled `pattern`.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    source: String,
    re: pattern_cache::Shared,
    /// Steps per byte matched: the PikeVM's work grows with the program's size.
    weight: u64,
}

/// One node of a compiled schema: the structural part (types, properties, items, defaults,
/// extensions) and its value validations. Nodes under a junctor (`allOf`, ...) have only
/// the latter (the compiler refuses anything else there).
#[derive(Debug, Clone, Default)]
pub(crate) struct Node {
    ty: Option<Ty>,
    nullable: bool,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded: bool,
    properties: BTreeMap<String, Node>,
    /// `additionalProperties` as a schema (`true` is an empty node).
    additional: Option<Box<Node>>,
    items: Option<Box<Node>>,
    default: Option<Value>,
    list_type: Option<ListType>,
    format: Option<String>,
    maximum: Option<f64>,
    exclusive_maximum: bool,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    multiple_of: Option<f64>,
    max_length: Option<u64>,
    min_length: Option<u64>,
    pattern: Option<Pattern>,
    max_items: Option<u64>,
    min_items: Option<u64>,
    max_properties: Option<u64>,
    min_properties: Option<u64>,
    enumeration: Option<Vec<Value>>,
    required: Vec<String>,
    all_of: Vec<Node>,
    any_of: Vec<Node>,
    one_of: Vec<Node>,
    not: Option<Box<Node>>,
}

/// A compiled structural schema of one custom resource version.
#[derive(Debug, Clone)]
pub struct Structural {
    root: Node,
}

impl Structural {
    /// Compiles `open_api_v3_schema`, or refuses it with every reason (upstream's messages,
    /// paths relative to the schema, sorted as upstream sorts them).
    pub fn new(open_api_v3_schema: &Value) -> Result<Structural, Vec<FieldError>> {
        Self::new_within(open_api_v3_schema, &mut PatternBudget::default())
    }

    /// [`Structural::new`] with its patterns charged to `budget`, shared with the other
    /// schemas of the same CRD.
    pub fn new_within(
        open_api_v3_schema: &Value,
        budget: &mut PatternBudget,
    ) -> Result<Structural, Vec<FieldError>> {
        build::compile(open_api_v3_schema, budget).map(|root| Structural { root })
    }

    /// Removes every field the schema does not declare and returns their paths
    /// (`spec.foo`, `spec.items[0].bar`; at most [`MAX_PRUNED`]), as upstream's pruning of
    /// a decoded custom resource (its root's `apiVersion`, `kind` and `metadata` kept).
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        mutate::prune(&self.root, obj)
    }

    /// Drops non-nullable `null`s that have no default, then applies the schema's defaults
    /// (upstream's `PruneNonNullableNullsWithoutDefaults` then `Default`): a missing field,
    /// or a `null` where the schema is not nullable, gets its default, and defaults are
    /// themselves defaulted inside.
    pub fn default(&self, obj: &mut Value) {
        mutate::prune_nulls(&self.root, obj, 0);
        mutate::default(&self.root, obj, 0);
    }

    /// The object's errors against the schema (empty when valid), as upstream's
    /// `ValidateCustomResource` and `ValidateListSetsAndMaps` report them.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate::validate(&self.root, obj, "")
    }

    /// [`validate`](Self::validate) for an update from `old`, with upstream's ratcheting
    /// (`CRDValidationRatcheting`, on by default in v1.32): what did not change is not
    /// validated again (values compared at the same map key, and for
    /// `x-kubernetes-list-type: map` items at the same list keys), so an object stored
    /// before a schema tightened can still be updated elsewhere; list-type duplicates are
    /// checked only when `old` had none.
    pub fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        validate::validate_update(&self.root, new, old)
    }
}
