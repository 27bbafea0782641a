//! The `apiextensions.k8s.io` group.

pub mod customresourcedefinition;
