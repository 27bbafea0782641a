//! The `certificates.k8s.io` group.

pub mod certificatesigningrequest;
mod csr_rules;
