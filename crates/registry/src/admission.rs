//! Admission: a hook the embedding server installs to validate writes after the object is
//! final (created, updated, patched) and before it is stored — upstream's validating
//! admission, used here for RBAC's validation and escalation checks.
//!
//! Invariants: the hook sees exactly the object that will be stored (after defaulting, the
//! update rules and any patch), with the request's extensions (e.g. the authenticated
//! user); an error it returns is the response and nothing is written.

use http::Extensions;
use serde_json::Value;

use crate::error::ApiResult;
use listwatch_kinds::KindSpec;

/// What is being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A create (POST, or an apply that creates).
    Create,
    /// An update (PUT, PATCH, apply of an existing object).
    Update,
}

/// One write, as the hook sees it.
#[derive(Debug)]
pub struct AdmissionRequest<'a> {
    /// Create or update.
    pub operation: Operation,
    /// The resource.
    pub info: &'a KindSpec,
    /// The namespace of the request.
    pub namespace: Option<&'a str>,
    /// The name in the request's URL (upstream's `RequestInfo.Name`): `None` for a POST to
    /// a collection, whatever name the object carries.
    pub name: Option<&'a str>,
    /// The object as it will be stored.
    pub object: &'a Value,
    /// The stored object, on update.
    pub old: Option<&'a Value>,
    /// The request's extensions (set by the server's filters).
    pub extensions: &'a Extensions,
}

/// Validates writes; installed with the endpoints' `Installer::admission`.
pub trait Admission: Send + Sync {
    /// `Ok` lets the write proceed; an error is the response.
    fn validate(&self, request: &AdmissionRequest<'_>) -> ApiResult<()>;
}
