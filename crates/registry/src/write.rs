//! The request-scoped side of the store's writes (create, update, patch): which part of an
//! object a write addresses ([`Subresource`]), the checks only the caller can make
//! ([`WriteHooks`]: admission, the `create` authorization of a write that creates, the
//! namespace lifecycle), and what a write answers ([`Written`]). Upstream passes the same
//! hooks to its generic store as `createValidation` / `updateValidation` functions.
//!
//! Invariants:
//! - a hook runs on the object exactly as it will be stored, before the storage write, and
//!   an error it returns is the answer: nothing is written (or, for
//!   [`WriteHooks::after_create`], what was written has been removed);
//! - with [`NoHooks`] (the server's own writers) every hook lets the write proceed;
//! - every object written is at most the storage's
//!   [`max_object_bytes`](listwatch_storage::Storage::max_object_bytes) ([`check_object_size`]).

use std::future::Future;
use std::pin::Pin;

use listwatch_api::Object;
use listwatch_storage::{Error, Key, Storage};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::field_validation::Findings;

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself.
    #[default]
    Main,
    /// `/status`: a write changes only the status.
    Status,
    /// `/scale`: an `autoscaling/v1` Scale view of the replica count.
    Scale,
    /// `/finalize` (namespaces): an update that changes `spec.finalizers` and nothing of
    /// the status.
    Finalize,
    /// `/approval` (certificate signing requests): a status write that changes only the
    /// status' `conditions` (upstream's `csrApprovalStrategy`).
    Approval,
    /// `/ephemeralcontainers` (pods): an update that changes `spec.ephemeralContainers` and
    /// nothing else (the kind's strategy builds and checks it).
    EphemeralContainers,
}

impl Subresource {
    /// The subresource of a request path's segment (`None`: the object; an unknown name is
    /// taken as `status`, the endpoints having refused any the kind does not serve).
    pub fn of(segment: Option<&str>) -> Self {
        match segment {
            None => Self::Main,
            Some("scale") => Self::Scale,
            Some("finalize") => Self::Finalize,
            Some("approval") => Self::Approval,
            Some("ephemeralcontainers") => Self::EphemeralContainers,
            Some(_) => Self::Status,
        }
    }

    /// The subresource as managedFields and authorization name it (`""`: the object).
    pub fn name(self) -> &'static str {
        match self {
            Self::Main => "",
            Self::Status => "status",
            Self::Scale => "scale",
            Self::Finalize => "finalize",
            Self::Approval => "approval",
            Self::EphemeralContainers => "ephemeralcontainers",
        }
    }
}

/// The future of an asynchronous hook.
pub type HookFuture<'a> = Pin<Box<dyn Future<Output = ApiResult<()>> + Send + 'a>>;

/// The checks of a write that only its caller can make (the HTTP layer: the request's user,
/// the server's admission chain, the namespaces resource). Every method has a default that
/// lets the write proceed.
pub trait WriteHooks: Send + Sync {
    /// Admission of `object` as it will be stored (`old`: the stored object, on update):
    /// the mutating phase (which may change it, e.g. allocate a Service's cluster IP), then
    /// the validating phase.
    fn admit(&self, object: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        let _ = (object, old);
        Ok(())
    }

    /// Whether the caller may `create` the object an update or apply is about to create
    /// (upstream's `withAuthorization` around the create validation).
    fn authorize_create(&self) -> ApiResult<()> {
        Ok(())
    }

    /// The create admitted for the object of `uid` was not stored (its write failed or is
    /// retried under another generated name): what admission reserved for it may be
    /// released at once (upstream's allocator rollback on a failed create).
    fn abandoned(&self, uid: &str) {
        let _ = uid;
    }

    /// The name a create settled on (a `generateName` create: each name tried), before
    /// admission and storage.
    fn named(&self, name: &str) {
        let _ = name;
    }

    /// Before a create of `name` in `namespace`: whether the namespace takes new objects
    /// (upstream's `NamespaceLifecycle` admission).
    fn check_namespace<'a>(&'a self, namespace: Option<&'a str>, name: &'a str) -> HookFuture<'a> {
        let _ = (namespace, name);
        Box::pin(async { Ok(()) })
    }

    /// After a create wrote `created` at `key` in `namespace` (not on a dry run): an error
    /// once the namespace turns out to have closed meanwhile, the object removed.
    fn after_create<'a>(
        &'a self,
        namespace: Option<&'a str>,
        key: &'a Key,
        created: &'a Object,
    ) -> HookFuture<'a> {
        let _ = (namespace, key, created);
        Box::pin(async { Ok(()) })
    }
}

/// The hooks of the server's own writers: none refuses anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl WriteHooks for NoHooks {}

/// What a write stored (or, for a dry run, would have stored).
#[derive(Debug, Clone)]
pub struct Written {
    /// The object as stored.
    pub object: Object,
    /// Whether the write created it (a create, an update or apply of a missing object).
    pub created: bool,
    /// The unknown and duplicate fields dropped from the body, to answer as warnings.
    pub warnings: Findings,
}

/// Refuses (413) an object whose encoded size is over `storage`'s
/// [`max_object_bytes`](listwatch_storage::Storage::max_object_bytes), before it is written.
pub fn check_object_size(obj: &Object, storage: &dyn Storage) -> ApiResult<()> {
    match storage.max_object_bytes() {
        Some(max) if obj.size() > max => Err(Error::object_too_large(obj.size(), max).into()),
        _ => Ok(()),
    }
}

/// The stored object as JSON (500 if it does not decode, which only a bug can cause).
pub fn decoded(obj: &Object) -> ApiResult<Value> {
    obj.to_value()
        .map_err(|e| ApiError::internal(format!("stored object does not decode: {e}")))
}
