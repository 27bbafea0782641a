//! Server-side apply as upstream's structured-merge-diff defines it.
//!
//! This crate owns the field-ownership model of Kubernetes objects:
//! - [`path`]: field paths (`f:`, `k:`, `v:`, `i:` steps) and their two spellings;
//! - [`set`]: sets of paths, their algebra, and their FieldsV1 encoding;
//! - [`types`]: the list and map semantics a schema gives ([`TypeInfo`]), with upstream's
//!   defaults for fields without a schema ([`Untyped`]);
//! - [`value`]: the walks over JSON values (field set, compare, merge, remove);
//! - [`update`]: who owns what after an update or an apply, and the conflicts;
//! - [`managed`]: `metadata.managedFields`, decoded and encoded as upstream does;
//! - [`fieldmanager`]: one write's field manager, as the API server calls it;
//! - [`noop`]: a write that changes nothing but its managers' times keeps the stored ones;
//! - [`schema`]: [`TypeInfo`] read from a kind's OpenAPI schema (`listwatch-schema`).
//!
//! Invariants:
//! - everything here is pure: no I/O, no clock (the caller passes the time), no global
//!   state; the same inputs give the same object and managedFields;
//! - an apply either fails without changing anything or returns the object and every
//!   manager's fields consistent with it: the applier owns exactly its configuration's
//!   fields (minus reset and server-owned fields), a field the apply changed is owned by no
//!   one else, and no manager owns a field the write removed;
//! - input bounds: FieldsV1 documents are read within [`set::FieldsLimits`] (depth and
//!   entries per manager); the number of managedFields entries is not capped (upstream
//!   caps none for appliers) but bounded by the already-decoded document they come from
//!   (a request body or a stored object); only Update managers are capped, at
//!   [`managed::MAX_UPDATE_MANAGERS`], as upstream's `capManagersManager`; the walks recurse
//!   once per nesting level of values whose depth the caller bounds (the server decodes
//!   every body and stored object within its depth limit).

pub mod fieldmanager;
pub mod managed;
pub mod noop;
pub mod path;
pub mod schema;
pub mod set;
pub mod types;
pub mod update;
pub mod value;

pub use fieldmanager::{ApplyError, Scope};
pub use managed::{Conflicts, MAX_CONFLICT_REPORT_BYTES, Managed, ManagerId, Operation};
pub use noop::keep_times_if_unchanged;
pub use path::{Path, PathElement};
pub use schema::SchemaTypes;
pub use set::{FieldSet, FieldsLimits};
pub use types::{ListType, MapType, TypeAt, TypeInfo, Untyped, type_at};
pub use update::ConflictSets;
