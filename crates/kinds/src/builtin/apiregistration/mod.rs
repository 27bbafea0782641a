//! The `apiregistration.k8s.io` group: stored only (nothing is proxied).

pub mod apiservice;
