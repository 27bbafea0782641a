//! The `storage.k8s.io` group.

pub mod storageclass;
