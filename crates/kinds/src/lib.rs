//! The kinds of objects the server serves: what each is, and the live set of them.
//!
//! This crate owns
//! - [`KindSpec`]: for one resource (`group/version/plural`), everything the layers above need
//!   to know to serve it — names and scope for discovery, selectable fields and the cacher's
//!   trigger field, subresources, printing columns, name rules, and the registry's per-kind
//!   rules as data (graceful deletion, garbage collection policy, generation, what a
//!   `/status` write may change, whether a DELETE answers with the object);
//! - [`KindStrategy`]: the per-kind code (upstream's `strategy.go` and table printer:
//!   defaulting on create, a kind's own Table rows), carried by each spec
//!   ([`DefaultStrategy`] for plain kinds, [`custom::CustomResourceStrategy`] for custom
//!   resources);
//! - [`builtin`]: the built-in kinds, one file per kind under its group
//!   (`builtin/core/pod.rs`, `builtin/apps/deployment.rs`, ...), the storage-only kinds of
//!   the derived metadata table ([`builtin::table`], checked against k8s-openapi by
//!   `tests/derived_table.rs`), and [`builtin::all`];
//! - [`Conversion`]: how a served version reads and writes the objects of the storage it
//!   shares with another ([`ApiVersionOnly`] for a custom resource's versions,
//!   `builtin::events::event::EventsV1` for `events.k8s.io/v1` Events over `v1` Events);
//! - [`KindSet`]: the live, versioned table of served kinds, which requests read through a
//!   cheap immutable [`Snapshot`] and which kinds join and leave at run time, with
//!   [`PerGeneration`] caching what is derived from a whole snapshot (discovery, OpenAPI),
//!   and whose subscribers ([`KindSet::subscribe`], a `tokio::sync::watch` of the current
//!   snapshot) learn of each new generation.
//!
//! The set is generic over what the layer above attaches to each spec ([`Kinded`]): the
//! endpoints keep a `KindSet<Resource>` of (spec, storage) pairs. That keeps this crate free
//! of storage (a spec is reusable over a backend or a cacher), while one table, swapped as a
//! whole, answers both "is this kind served" and "where are its objects" for a request — no
//! second table that could disagree with the first at a generation boundary.
//!
//! Invariants: a spec is data plus a stateless strategy, cheap to clone and share behind an
//! `Arc`; neither holds storage, a client or any I/O. A snapshot never changes once
//! published. This crate depends only on `listwatch-api` and `listwatch-schema` (pure: its
//! quantity parse) among the workspace's crates (and on tokio's `sync::watch` for the
//! notification) ("must never depend on storage, HTTP, the registry or the server crates":
//! `cargo xtask deps` checks it).
//!
//! ```
//! use listwatch_kinds::{KindSpec, Printer, PrinterColumn};
//!
//! let cm = KindSpec::new("", "v1", "configmaps", "ConfigMap").short_names(["cm"]);
//! assert_eq!(cm.api_version(), "v1");
//! assert_eq!(cm.list_kind(), "ConfigMapList");
//!
//! let widget = KindSpec::new("example.com", "v1", "widgets", "Widget")
//!     .printer(Printer::Columns(vec![PrinterColumn::new("Color", "string", ".spec.color")]));
//! assert_eq!(widget.qualified_resource(), "widgets.example.com");
//! assert_eq!(widget.type_meta().api_version, "example.com/v1");
//!
//! // The live set: a request's snapshot keeps its table while kinds come and go.
//! let set = listwatch_kinds::KindSet::new(listwatch_kinds::builtin::all());
//! assert!(set.snapshot().get("batch", "v1", "jobs").is_some());
//! let before = set.snapshot();
//! set.add(widget);
//! assert!(set.snapshot().get("example.com", "v1", "widgets").is_some());
//! assert!(before.get("example.com", "v1", "widgets").is_none());
//! ```

pub mod builtin;
pub mod conversion;
pub mod crd;
pub mod custom;
pub mod field;
mod set;
mod spec;
mod strategy;

pub use conversion::{ApiVersionOnly, Conversion};
pub use field::{ErrorType, FieldError};
pub use set::{KindSet, KindSetError, Kinded, PerGeneration, Snapshot};
pub use spec::{
    FieldLabels, GcPolicy, Generation, GracefulDeletion, KindSpec, NameValidation, Printer,
    PrinterColumn, ScaleSubresource, StatusUpdate, Terminating,
};
pub use strategy::{DefaultStrategy, Invalid, KindStrategy, TableColumn, Times};
