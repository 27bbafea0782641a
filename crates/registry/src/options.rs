//! The options of the registry's operations, as upstream's `metav1.*Options` after
//! validation: what a DELETE asks for ([`DeleteRequest`], [`Propagation`]).
//!
//! Invariant: an options value here is already validated (the endpoints parse and check the
//! query and body into it); the registry never sees an unparsed option.

use listwatch_storage::Preconditions;

/// Validated delete options (`DeleteOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteRequest {
    /// UID / resource version the object must have.
    pub preconditions: Option<Preconditions>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `gracePeriodSeconds`, as given (a negative value is taken as 1 when deleting).
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy`.
    pub propagation: Option<Propagation>,
    /// `orphanDependents` (deprecated; never set together with `propagation`).
    pub orphan_dependents: Option<bool>,
}

/// A DELETE's `propagationPolicy`: what happens to the object's dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents lose their owner reference (the `orphan` finalizer holds the owner until
    /// the garbage collector has done it).
    Orphan,
    /// The owner goes at once; the garbage collector deletes the dependents afterwards.
    Background,
    /// The owner stays (the `foregroundDeletion` finalizer) until the garbage collector has
    /// deleted the dependents that block it.
    Foreground,
}
