//! The harness of the HTTP relist-memory test binaries (`relist_memory_default.rs`,
//! `relist_memory_default_worst.rs`): `http.rs`, the default path over loopback HTTP, measured
//! with the runtime's relist harness (`crates/runtime/tests/relist_harness`, which the
//! runtime's in-process relist tests use), included here for [`Measured`] and the sizes.
#![allow(dead_code)]

#[path = "../../../runtime/tests/relist_harness/mod.rs"]
mod runtime;

pub(crate) mod http;

pub(crate) use runtime::{Measured, OBJECTS, PAYLOAD};
