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

/// One write, as a mutating hook sees it (the object itself is passed apart, mutable).
#[derive(Debug, Clone, Copy)]
pub struct MutationRequest<'a> {
    /// Create or update.
    pub operation: Operation,
    /// The resource.
    pub info: &'a KindSpec,
    /// The stored object, on update.
    pub old: Option<&'a Value>,
    /// `dryRun=All`: the hook must not keep anything it reserves (upstream's dry-run
    /// allocators check without allocating).
    pub dry_run: bool,
    /// The request's extensions (set by the server's filters: the user, for hooks that
    /// record who asked, e.g. a CertificateSigningRequest's `spec.username`).
    pub extensions: &'a Extensions,
}

/// Mutates and validates writes; installed with the endpoints' `Installer::admission`.
pub trait Admission: Send + Sync {
    /// Upstream's mutating admission and the registry's `BeginCreate`/`BeginUpdate` hooks:
    /// may change the object about to be stored (e.g. allocate a Service's cluster IP); runs
    /// before [`validate`](Self::validate). An error is the response.
    fn mutate(&self, _request: &MutationRequest<'_>, _object: &mut Value) -> ApiResult<()> {
        Ok(())
    }

    /// `Ok` lets the write proceed; an error is the response.
    fn validate(&self, request: &AdmissionRequest<'_>) -> ApiResult<()>;

    /// An object of `info` was removed from storage (upstream's `AfterDelete`): what a
    /// mutating hook reserved for it may be released.
    fn deleted(&self, _info: &KindSpec, _object: &listwatch_api::Object) {}

    /// A create [`mutate`](Self::mutate) admitted for the object of uid `uid` was not
    /// stored (the write failed, e.g. the name exists): what it reserved may be released.
    fn abandoned(&self, _info: &KindSpec, _uid: &str) {}
}

/// Several hooks, run in order (the first error stops the write).
#[derive(Default)]
pub struct Chain(pub Vec<std::sync::Arc<dyn Admission>>);

impl Admission for Chain {
    fn mutate(&self, request: &MutationRequest<'_>, object: &mut Value) -> ApiResult<()> {
        self.0.iter().try_for_each(|h| h.mutate(request, object))
    }

    fn validate(&self, request: &AdmissionRequest<'_>) -> ApiResult<()> {
        self.0.iter().try_for_each(|h| h.validate(request))
    }

    fn deleted(&self, info: &KindSpec, object: &listwatch_api::Object) {
        for h in &self.0 {
            h.deleted(info, object);
        }
    }

    fn abandoned(&self, info: &KindSpec, uid: &str) {
        for h in &self.0 {
            h.abandoned(info, uid);
        }
    }
}
