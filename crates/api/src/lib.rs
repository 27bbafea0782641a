//! Kubernetes wire types for listwatch, with no I/O.
//!
//! This crate sits at the bottom of the pipeline: every other listwatch crate speaks in its
//! types. It owns
//! - metadata and `Status` shapes ([`meta`], [`status`]),
//! - [`Object`]: canonical JSON bytes plus a small parsed view, so a watch frame is a
//!   concatenation and never a re-serialization,
//! - resource versions ([`rv`]),
//! - label and field selectors with Kubernetes' grammar ([`labels`], [`fields`]),
//! - `metadata.managedFields` cut from an object's JSON for clients that opt out
//!   ([`drop_fields`]),
//! - shard selectors (`shardSelector`, upstream's sharded list and watch: [`shard`]),
//! - watch event framing ([`watch`]),
//! - the order upstream writes FieldsV1 keys in ([`fields_v1`]), which the object encoder
//!   keeps,
//! - what a client cache keys objects by ([`resource`]: [`Resource`], [`ObjectKey`]), for
//!   dynamic objects, typed structs and (feature `k8s-openapi`) k8s-openapi's types.
//!
//! It must never depend on storage, HTTP or async runtimes.
//!
//! ```
//! use listwatch_api::{Object, SelectableFields, labels::LabelSelector, fields::FieldSelector};
//!
//! let fields = SelectableFields::new(["spec.nodeName"]);
//! let pod = Object::from_json(
//!     br#"{"metadata":{"name":"web-1","labels":{"app":"web"}},"spec":{"nodeName":"n7"}}"#,
//!     &fields,
//! )?;
//! assert!(LabelSelector::parse("app in (web,api)")?.matches(&pod));
//! assert!(FieldSelector::parse("spec.nodeName=n7")?.matches(&pod));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod drop_fields;
pub mod echo;
pub mod fields;
pub mod fields_v1;
pub mod labels;
pub mod meta;
mod object;
pub mod partial_meta;
pub mod resource;
pub mod rv;
pub mod shard;
pub mod status;
pub mod text;
pub mod watch;

pub use fields::FieldSelector;
pub use labels::LabelSelector;
pub use meta::{ListMeta, ObjectMeta, TypeMeta};
pub use object::{LabelSet, Object, ObjectError, ObjectParts, SelectableFields, wire_encode_count};
pub use partial_meta::metadata_projection_count;
pub use resource::{HasMetadata, MetadataFields, ObjectKey, Resource};
pub use shard::ShardSelector;
pub use status::Status;
pub use watch::{EventType, WatchEvent};
