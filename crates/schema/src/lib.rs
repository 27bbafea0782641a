//! The schemas of the kinds listwatch serves, and the list/map semantics read from them.
//!
//! What it owns:
//! - **Upstream's definitions** of every built-in kind: Kubernetes v1.32.0's OpenAPI
//!   definitions, vendored unmodified under `upstream/` (with their licence and provenance;
//!   see `upstream/README.md`) and turned into upstream's OpenAPI v3 form once per process
//!   (the rules are in `src/normalize.rs`). Descriptions, types and the
//!   `x-kubernetes-*` extensions (`patch-strategy`, `patch-merge-key`, `list-type`,
//!   `list-map-keys`, `map-type`, `group-version-kind`) are upstream's; nothing is
//!   hand-written.
//! - **Custom resources' schemas** ([`Catalog::add_custom`]): the declared
//!   `openAPIV3Schema`, or one that keeps every field, named and completed as upstream
//!   publishes CRDs.
//! - **Typed validation** ([`Node::check_types`], [`TypeError`]): whether a body would
//!   decode into upstream's Go types (shapes, scalar types, integer ranges, base64,
//!   `IntOrString`, `Quantity`, times), worded as upstream's decoder and apply conversion.
//! - **Canonical form** ([`Node::canonicalize`]): what upstream's decoding makes of a
//!   well-typed body — quantities as upstream's canonical strings ([`quantity`]), `null`
//!   items of typed lists and values of typed maps as their Go zero values.
//! - **Label selectors** ([`Node::label_selectors`]): where a body holds a
//!   `metav1.LabelSelector`, for the registry's validation of them.
//! - **Plans** ([`Catalog::plan`], [`Plan`]): a kind's schema compiled once into a table
//!   the write path's walks (typed check, canonical form, label selectors, field
//!   validation's unknown fields) read with one binary search per field instead of the
//!   definitions' JSON; the walks are written once against [`SchemaView`], which [`Node`]
//!   (the reference) and [`PlanNode`] answer alike.
//! - **The lookup API** ([`Node`]) that strategic merge and server-side apply use instead
//!   of tables keyed by field name, and the `components.schemas` of the `/openapi/v3`
//!   documents ([`Catalog::components`]). Serving those documents (paths, hashing, caching)
//!   is the endpoints crate's.
//!
//! # Using the lookup (strategic merge, server-side apply)
//!
//! Start from a kind and walk the object alongside its schema:
//!
//! ```
//! use listwatch_schema::{Catalog, ListType, Shape};
//!
//! let catalog = Catalog::builtin();
//! let pod = catalog.kind("", "v1", "Pod").unwrap();
//! let containers = pod.field("spec").and_then(|s| s.field("containers")).unwrap();
//! // Strategic merge: merge the list by `name`.
//! assert_eq!(containers.patch_merge_key(), Some("name"));
//! assert!(containers.patch_strategy().merge);
//! // Server-side apply: an associative list keyed by `name`.
//! assert_eq!(containers.list_type(), ListType::Map(vec!["name"]));
//! // Paths name fields only; lists are stepped through.
//! let ports = catalog.lookup("", "v1", "Pod", &["spec", "containers", "ports"]).unwrap();
//! assert_eq!(ports.list_type(), ListType::Map(vec!["containerPort", "protocol"]));
//! assert_eq!(ports.items().unwrap().shape(), Shape::Struct);
//! ```
//!
//! - Strategic merge reads [`Node::patch_strategy`] and [`Node::patch_merge_key`]
//!   (upstream's `x-kubernetes-patch-*`, which is what upstream's Go struct tags say).
//! - Server-side apply reads [`Node::list_type`] (atomic / set / map with keys, with
//!   upstream's fallback from the patch strategy when a list declares no list type, as
//!   kube-openapi's schema conversion does), [`Node::map_type`] (granular / atomic), and
//!   [`Node::shape`] (struct / map / list / scalar / untyped) to know how to descend.
//! - A field the schema does not declare: [`Node::field`] is `None` for a closed struct
//!   (the caller decides: strategic merge treats it as untyped JSON, SSA may refuse it),
//!   and an untyped node where unknown fields are preserved. Untyped lists are atomic.
//!
//! Invariants: a [`Catalog`] is immutable once built and cheap to share; the built-in
//! definitions are parsed at most once per process; every `$ref` in what this crate hands
//! out names `#/components/schemas/…` and resolves within the catalog (an unresolvable
//! one, or a reference cycle, reads as untyped rather than looping); custom schemas are
//! refused if they contain `$ref` or nest deeper than [`MAX_CUSTOM_SCHEMA_DEPTH`].

mod canonical;
mod catalog;
mod node;
mod normalize;
mod plan;
pub mod quantity;
mod selectors;
mod typecheck;

pub use canonical::rounds_resource_lists;
pub use catalog::{BUILTIN_VERSION, Catalog, MAX_CUSTOM_SCHEMA_DEPTH, SchemaError};
pub use node::{ListType, MapType, Node, PatchStrategy, Shape};
pub use plan::{Plan, PlanNode, Scalar, SchemaView, Special};
pub use typecheck::TypeError;
