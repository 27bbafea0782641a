//! The `policy` group.

pub mod eviction;
pub mod poddisruptionbudget;
