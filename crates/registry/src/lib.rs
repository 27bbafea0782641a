//! The registry of listwatch: the typed, in-process write path of every kind, as upstream's
//! generic registry store (`k8s.io/apiserver/pkg/registry/generic/registry`) and the
//! per-kind strategies under it.
//!
//! This crate owns what a write means, independent of how it arrived: create-time
//! preparation and validation ([`validation`]: names, `generateName`, metadata, ownership
//! ([`ownership`]), status and generation rules), the deletion lifecycle ([`lifecycle`]:
//! graceful deletion, finalizers, propagation policies, the kubelet's acknowledgement), the
//! namespace strategy ([`namespaces`]), the field manager that records `managedFields`
//! ([`fieldmanager`]), strategic merge ([`strategic`]), field validation
//! ([`field_validation`]), the `/scale` subresource ([`scale`]), the admission hook
//! ([`admission`]), the options of the operations ([`options`]), the typed error every
//! rule reports ([`error::ApiError`], which carries upstream's `Status`) and the typed
//! in-process store of a kind ([`Store`]) the server's own writers create through, each
//! recorded under its manager in managedFields.
//!
//! Invariants:
//! - nothing here is HTTP: requests arrive already decoded and their options validated;
//!   the endpoints map [`ApiError`] to a response;
//! - every write that reaches storage went through the kind's [`KindSpec`] rules here;
//! - input-driven work is bounded (depth [`MAX_DEPTH`], the apply limits, the report
//!   limits of [`error::MAX_INVALID_REPORT_BYTES`]).
//!
//! It depends on `listwatch-api`, `listwatch-kinds`, `listwatch-storage`, `listwatch-apply`
//! and `listwatch-schema`; it must never depend on HTTP serving (axum, the endpoints), a
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
pub mod error;
pub mod field_validation;
pub mod fieldmanager;
pub mod lifecycle;
pub mod namespaces;
pub mod options;
pub mod ownership;
#[cfg(feature = "resttest")]
pub mod resttest;
pub mod scale;
pub mod service_alloc;
pub mod store;
pub mod strategic;
pub mod validation;

pub use error::{ApiError, ApiResult, FieldError};
pub use listwatch_kinds::KindSpec;
pub use store::{CreateOptions, Store, StoreError};

/// How deep a JSON document may nest (request bodies, patches and their results), as
/// upstream's decoder limit.
pub const MAX_DEPTH: usize = 100;
