//! The namespace registry's pure rules: the namespace strategy ([`strategy`]) and the status
//! conditions the namespace controller writes ([`conditions`]). The controller itself and
//! the checks that read the namespaces' storage stay with the server that runs them.

pub mod conditions;
pub mod strategy;

/// The finalizer the namespace controller owns, in a namespace's `spec.finalizers`.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";
