//! The registry of listwatch: the typed, in-process write path of every kind, as upstream's
//! generic registry store (`k8s.io/apiserver/pkg/registry/generic/registry`) and the
//! per-kind strategies under it.
//!
//! This crate owns what a write means, independent of how it arrived: the decoding of
//! bodies within bounds ([`decode`]) and of patches ([`patch`]: JSON, merge, strategic
//! merge, apply), create-time
//! preparation and validation ([`validation`]: names, `generateName`, metadata, ownership
//! ([`ownership`]), status and generation rules), the deletion lifecycle ([`lifecycle`]:
//! graceful deletion, finalizers, propagation policies, the kubelet's acknowledgement), the
//! namespace strategy ([`namespaces`]), upstream's `NamespaceLifecycle` admission rule for
//! creates in a namespace ([`namespace_lifecycle`]), the field manager that records `managedFields`
//! ([`fieldmanager`]), strategic merge ([`strategic`]), field validation
//! ([`field_validation`]), typed validation of built-in bodies ([`typed`]), the `/scale` subresource ([`scale`]), the admission hook
//! ([`admission`]), the options of the operations ([`options`]), the typed error every
//! rule reports ([`error::ApiError`], which carries upstream's `Status`) and the typed
//! store of a kind ([`Store`]: create, get, list, watch, update, patch, delete and
//! deletecollection with their options, the caller's checks as [`WriteHooks`]) that the
//! HTTP handlers call between decoding and encoding and the server's own writers and
//! controllers call directly, each write recorded under its manager in managedFields.
//!
//! Invariants:
//! - nothing here is HTTP: requests arrive already decoded and their options validated;
//!   the endpoints map [`ApiError`] to a response;
//! - every write that reaches storage went through the kind's [`KindSpec`] rules here;
//! - input-driven work is bounded (depth [`MAX_DEPTH`], the apply limits, the report
//!   limits of [`error::MAX_INVALID_REPORT_BYTES`]).
//!
//! It depends on `listwatch-api`, `listwatch-kinds`, `listwatch-storage`, `listwatch-apply`,
//! `listwatch-schema` and `listwatch-server` (the request compute pool's `waiting`); it must never depend on HTTP serving (axum, the endpoints), a
//! particular backend (memstore, etcd) or the cacher.
//!
//! ```
//! use listwatch_registry::{KindSpec, validation};
//! use serde_json::json;
//!
//! let info = KindSpec::new("", "v1", "configmaps", "ConfigMap");
//! let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cm-"}});
//! let map = obj.as_object_mut().ok_or("not an object")?;
//! validation::prepare_create(&info, map, Some("default"))?;
//! let name = map["metadata"]["name"].as_str().unwrap_or_default();
//! assert!(name.starts_with("cm-") && name.len() == 8);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod admission;
pub mod clock;
pub mod decode;
pub mod error;
pub mod field_validation;
pub mod fieldmanager;
pub mod label_selectors;
pub mod lifecycle;
pub mod namespace_lifecycle;
pub mod namespaces;
pub mod options;
pub mod ownership;
pub mod patch;
#[cfg(feature = "resttest")]
pub mod resttest;
pub mod scale;
pub mod service_alloc;
pub mod store;
mod store_delete_collection;
mod store_list;
pub mod store_patch;
pub mod store_update;
pub mod strategic;
pub mod typed;
pub mod validation;
pub mod write;

pub use error::{ApiError, ApiResult, FieldError};
pub use listwatch_kinds::KindSpec;
pub use store::{CreateOptions, Store, StoreError};
pub use store_patch::PatchOptions;
pub use store_update::UpdateOptions;
pub use write::{NoHooks, Subresource, WriteHooks, Written};

/// How deep a JSON document may nest (request bodies, patches and their results), as
/// upstream's decoder limit.
pub const MAX_DEPTH: usize = 100;
