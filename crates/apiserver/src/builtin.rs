//! The built-in resources: `listwatch_kinds::builtin`, one file per kind under its group,
//! re-exported for the binary's callers and tests.

pub use listwatch_kinds::builtin::{EVENT_FIELDS, POD_FIELDS, all as resources};
