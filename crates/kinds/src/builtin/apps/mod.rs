//! The `apps` group.

pub mod deployment;
