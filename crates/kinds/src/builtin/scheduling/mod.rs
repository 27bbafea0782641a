//! The `scheduling.k8s.io` group.

pub mod priorityclass;
