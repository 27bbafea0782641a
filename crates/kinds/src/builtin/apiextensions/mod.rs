//! The `apiextensions.k8s.io` group.

pub mod api_approval;
pub mod customresourcedefinition;
