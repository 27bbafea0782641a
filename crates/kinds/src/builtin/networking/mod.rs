//! The `networking.k8s.io` group.

pub mod ingress;
pub mod ingressclass;
pub mod networkpolicy;
