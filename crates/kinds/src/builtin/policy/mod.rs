//! The `policy` group.

pub mod poddisruptionbudget;
