//! Authorization a handler must ask for itself: a hook the embedding server installs for
//! the checks that only the handler can make, because only it knows what a request turns
//! out to do. Today that is the `create` check of a write that creates: a PUT of a missing
//! object where the resource allows create-on-update (authorized by the server's filter as
//! `update`) and a server-side apply of a missing object (authorized as `patch`) must also
//! be allowed to `create` that name — upstream's `withAuthorization` around the create
//! validation in `handlers/update.go` and `handlers/patch.go`.
//!
//! Invariants: this crate knows nothing of users or policies — it hands the hook upstream's
//! attributes (verb, group, version, resource, subresource, namespace, name, path) and the
//! request's extensions (where the server's filter put the user); a refusal is the
//! response and nothing is written: the check runs before admission and storage, dry run
//! included, and again on every retry of a read-modify-write that creates. With no hook
//! installed (an API embedded without authorization) every write proceeds, as every other
//! request of such an API does.

use axum::http::Extensions;

use crate::error::ApiResult;
use crate::resource::KindSpec;

/// The verb a creating write is also authorized for.
pub const CREATE: &str = "create";

/// One authorization question, as upstream's `authorizer.AttributesRecord` of a resource
/// request.
#[derive(Debug)]
pub struct AuthorizationRequest<'a> {
    /// The verb (`create`).
    pub verb: &'a str,
    /// The resource (its group, version and plural).
    pub info: &'a KindSpec,
    /// The subresource (`""` for the object itself).
    pub subresource: &'a str,
    /// The namespace of the request (`None`: cluster-scoped).
    pub namespace: Option<&'a str>,
    /// The object's name (from the URL).
    pub name: &'a str,
    /// The request's path.
    pub path: &'a str,
    /// The request's extensions (set by the server's filters).
    pub extensions: &'a Extensions,
}

/// Answers authorization questions inside handlers; installed with
/// [`Installer::authorizer`](crate::Installer::authorizer).
pub trait Authorize: Send + Sync {
    /// `Ok` lets the request proceed; an error (upstream: 403 Forbidden) is the response.
    fn authorize(&self, request: &AuthorizationRequest<'_>) -> ApiResult<()>;
}
