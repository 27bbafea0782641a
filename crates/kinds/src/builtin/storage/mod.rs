//! The `storage.k8s.io` group.

pub mod csidriver;
pub mod csinode;
pub mod csistoragecapacity;
pub mod storageclass;
pub mod volumeattachment;
