//! The kinds of objects the server serves, described as data.
//!
//! This crate owns [`KindSpec`]: for one resource (`group/version/plural`), everything the
//! layers above need to know to serve it — names and scope for discovery, selectable fields and
//! the cacher's trigger field, subresources, printing, name rules, defaulting on create, and the
//! registry's per-kind rules (graceful deletion, garbage collection policy, generation, what a
//! `/status` write may change, whether a DELETE answers with the object).
//!
//! Invariants: a spec is plain data, cheap to clone and share behind an `Arc`; it never holds
//! storage, a client or any I/O. It depends only on `listwatch-api` ("must never depend on
//! storage, HTTP, the registry or the server crates": `cargo xtask deps` checks it).
//!
//! ```
//! use listwatch_kinds::{KindSpec, Printer, PrinterColumn};
//!
//! let cm = KindSpec::new("", "v1", "configmaps", "ConfigMap").short_names(["cm"]);
//! assert_eq!(cm.api_version(), "v1");
//! assert_eq!(cm.list_kind(), "ConfigMapList");
//!
//! let job = KindSpec::new("batch", "v1", "jobs", "Job")
//!     .printer(Printer::Columns(vec![PrinterColumn::new("Status", "string", ".status.phase")]));
//! assert_eq!(job.qualified_resource(), "jobs.batch");
//! assert_eq!(job.type_meta().api_version, "batch/v1");
//! ```

mod spec;

pub use spec::{
    GcPolicy, Generation, GracefulDeletion, KindSpec, NameValidation, PrepareFn, Printer,
    PrinterColumn, ScaleSubresource, StatusUpdate,
};
