//! The typed in-process store of one kind, as upstream's generic registry store
//! (`k8s.io/apiserver/pkg/registry/generic/registry/store.go`): what the HTTP handlers call
//! between decoding a request and encoding its answer, and what the server's own writers
//! (bootstrap namespaces, the RBAC bootstrap policy, the leader-election lease) call instead
//! of preparing objects and writing storage by hand. This file holds the store, create, get
//! and delete; update is `store_update.rs`'s, patch `store_patch.rs`'s.
//!
//! Invariants:
//! - every object [`Store::create`] writes went through field validation of its body, the
//!   kind's create rules ([`prepare_create`](crate::validation::prepare_create): type, namespace, name or `generateName`,
//!   metadata), the caller's [`WriteHooks`] (namespace lifecycle, admission) and the
//!   storage's size limit, and has a managedFields entry for [`CreateOptions::field_manager`]
//!   (upstream records its loopback and controller clients' writes the same way);
//! - a generated name that is taken is retried with another, at most
//!   [`MAX_NAME_GENERATION_CREATE_ATTEMPTS`] times, as upstream's store;
//! - a dry run writes nothing; it reads the key, so an existing name is `AlreadyExists`;
//! - failures are a [`StoreError`]: the storage's own error, kept as it is (callers tell
//!   transient failures from others by it), or a rejection carrying upstream's Status.

use std::sync::Arc;

use listwatch_api::Object;
use listwatch_kinds::KindSpec;
use listwatch_schema::Catalog;
use listwatch_storage::{GetOptions, Key, Storage};
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::field_validation::{Directive, Findings};
use crate::fieldmanager::FieldManager;
use crate::lifecycle::{self, Deletion, Kubelet};
use crate::options::DeleteRequest;
use crate::validation::prepare_create_in;
use crate::write::{NoHooks, Subresource, WriteHooks, Written, check_object_size};

/// How many names a create with `generateName` tries (upstream's
/// `maxNameGenerationCreateAttempts`).
pub const MAX_NAME_GENERATION_CREATE_ATTEMPTS: usize = 8;

/// Whether a create body asks for a generated name: no `metadata.name`, a non-empty
/// `metadata.generateName` (then a taken name is retried with another).
pub fn generates_name(obj: &Map<String, Value>) -> bool {
    obj.get("metadata").is_some_and(|m| {
        m.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
            && m.get("generateName")
                .and_then(Value::as_str)
                .is_some_and(|g| !g.is_empty())
    })
}

/// How many names a create tries: [`MAX_NAME_GENERATION_CREATE_ATTEMPTS`] when it
/// [`generates_name`], else one.
pub fn create_attempts(generates: bool) -> usize {
    if generates {
        MAX_NAME_GENERATION_CREATE_ATTEMPTS
    } else {
        1
    }
}

/// The storage write of one create attempt: the object stored, or, for a dry run, the
/// object as it would be after reading the key (upstream's dry run: an existing name is
/// `AlreadyExists`, nothing is written).
pub async fn write_create(
    storage: &dyn Storage,
    key: &Key,
    object: Object,
    dry_run: bool,
) -> Result<Object, listwatch_storage::Error> {
    if !dry_run {
        return storage.create(key, object, None).await;
    }
    let existing = storage
        .get(
            key,
            &GetOptions {
                resource_version: None,
                ignore_not_found: true,
            },
        )
        .await?;
    match existing {
        Some(_) => Err(key.already_exists()),
        None => Ok(object),
    }
}

/// Upstream's `NewGenerateNameConflict`: every generated name was taken.
fn generate_name_conflict(info: &KindSpec, name: &str) -> ApiError {
    ApiError::from_status(
        listwatch_api::Status::failure(
            409,
            listwatch_api::status::reason::ALREADY_EXISTS,
            format!(
                "{} \"{name}\" already exists, the server was not able to generate a unique name for the object",
                info.qualified_resource()
            ),
        )
        .with_target(&info.group, &info.plural, name)
        .with_retry_after(1),
    )
}

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The storage failed (or answered `AlreadyExists`, `NotFound`, a conflict): kept as the
    /// storage said it, so that a caller can tell a transient failure.
    #[error(transparent)]
    Storage(#[from] listwatch_storage::Error),
    /// The registry refused the request (invalid, forbidden, …): upstream's Status.
    #[error(transparent)]
    Rejected(#[from] ApiError),
}

impl StoreError {
    /// The Status this failure is sent as for an object of `info`.
    pub fn to_api_error(&self, info: &KindSpec) -> ApiError {
        match self {
            Self::Storage(e) => ApiError::storage(e, info),
            Self::Rejected(e) => e.clone(),
        }
    }

    /// Whether this is the storage's `AlreadyExists`, or a `generateName` create that found
    /// every generated name taken.
    pub fn is_already_exists(&self) -> bool {
        match self {
            Self::Storage(e) => matches!(e, listwatch_storage::Error::AlreadyExists { .. }),
            Self::Rejected(e) => e.0.reason == listwatch_api::status::reason::ALREADY_EXISTS,
        }
    }
}

/// A create of a kind that is going away ([`KindSpec::terminating`]: its CRD is being
/// deleted), refused as upstream's CRD handler refuses it: 405 `MethodNotAllowed` naming the
/// group and resource, "create not allowed while custom resource definition is terminating".
pub(crate) fn terminating(info: &KindSpec) -> ApiError {
    ApiError::from_status(
        listwatch_api::Status::failure(
            405,
            listwatch_api::status::reason::METHOD_NOT_ALLOWED,
            "create not allowed while custom resource definition is terminating",
        )
        .with_target(&info.group, &info.plural, ""),
    )
}

/// Options of [`Store::create`] (upstream's `metav1.CreateOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateOptions {
    /// `dryRun=All`: everything but the write.
    pub dry_run: bool,
    /// The manager the create is recorded under in managedFields.
    pub field_manager: String,
    /// `fieldValidation`: what unknown and duplicate fields of the body do.
    pub field_validation: Directive,
    /// The keys the decoded body repeated in one object (the decoder's findings), for
    /// field validation.
    pub duplicate_fields: Vec<String>,
}

impl CreateOptions {
    /// A create recorded under `manager`.
    pub fn by(manager: &str) -> Self {
        Self {
            field_manager: manager.to_owned(),
            ..Self::default()
        }
    }
}

/// The registry store of one kind: its spec, the storage that serves it and the schemas its
/// field manager reads.
#[derive(Clone)]
pub struct Store {
    info: Arc<KindSpec>,
    storage: Arc<dyn Storage>,
    catalog: Arc<Catalog>,
    /// Who acknowledges a pod's graceful deletion (the server's `acknowledge_pod_deletion`).
    pub(crate) kubelet: Kubelet,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// The store of `info`'s objects in `storage`, with the built-in schemas.
    pub fn new(info: Arc<KindSpec>, storage: Arc<dyn Storage>) -> Self {
        Self::with_catalog(info, storage, Catalog::builtin())
    }

    /// The store of `info`'s objects in `storage`, with the schemas of `catalog`.
    pub fn with_catalog(
        info: Arc<KindSpec>,
        storage: Arc<dyn Storage>,
        catalog: Arc<Catalog>,
    ) -> Self {
        Self {
            info,
            storage,
            catalog,
            kubelet: Kubelet::Absent,
        }
    }

    /// The same store, with `kubelet` acknowledging pod deletions (the server's
    /// `acknowledge_pod_deletion`; without it nobody does).
    #[must_use]
    pub fn with_kubelet(mut self, kubelet: Kubelet) -> Self {
        self.kubelet = kubelet;
        self
    }

    /// The kind served.
    pub fn info(&self) -> &Arc<KindSpec> {
        &self.info
    }

    /// The storage written.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The schemas the store reads.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// Creates `obj` in `namespace` (`None` for a cluster-scoped kind, or to take the
    /// object's own): prepared by the kind's create rules, recorded under
    /// `opts.field_manager`, then written (unless a dry run). What was stored.
    pub async fn create(
        &self,
        namespace: Option<&str>,
        obj: Map<String, Value>,
        opts: &CreateOptions,
    ) -> Result<Object, StoreError> {
        let ns = namespace.map(str::to_owned).or_else(|| {
            obj.get("metadata")
                .and_then(|m| m.get("namespace"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
        });
        let ns = ns.as_deref().filter(|_| self.info.namespaced);
        Ok(self.create_with(ns, obj, opts, &NoHooks).await?.object)
    }

    /// Creates `obj` in `namespace` (as the request's URL names it) with the caller's
    /// `hooks`: the body's unknown and duplicate fields settled by `opts.field_validation`,
    /// then each attempt (a taken generated name is retried) prepared by the kind's create
    /// rules, named to the hooks, its namespace checked (once), recorded under
    /// `opts.field_manager`, admitted, size-checked and written; after a real write the
    /// hooks re-check the namespace.
    pub async fn create_with(
        &self,
        namespace: Option<&str>,
        mut obj: Map<String, Value>,
        opts: &CreateOptions,
        hooks: &dyn WriteHooks,
    ) -> Result<Written, StoreError> {
        let info = &self.info;
        if info.terminating.is_set() {
            return Err(terminating(info).into());
        }
        let findings = self.check_body(
            Subresource::Main,
            &mut obj,
            opts.field_validation,
            opts.duplicate_fields.clone(),
        )?;
        // A generated name that is taken is retried with another, as upstream's store does.
        let generates = generates_name(&obj);
        let attempts = create_attempts(generates);
        let mut checked_namespace = false;
        let mut name = String::new();
        for _ in 0..attempts {
            let mut prepared = obj.clone();
            prepare_create_in(info, Some(&self.catalog), &mut prepared, namespace)?;
            name = prepared
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            hooks.named(&name);
            if !checked_namespace {
                hooks.check_namespace(namespace, &name).await?;
                checked_namespace = true;
            }
            let key = Key::object(&info.storage_resource, namespace, &name)?;
            let mut v = Value::Object(prepared);
            self.field_manager(Subresource::Main)
                .update(None, &mut v, &opts.field_manager);
            hooks.admit(&mut v, None)?;
            let uid = v
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let object = self.to_object(v).inspect_err(|_| hooks.abandoned(&uid))?;
            let stored = match write_create(self.storage.as_ref(), &key, object, opts.dry_run).await
            {
                Ok(o) => o,
                Err(listwatch_storage::Error::AlreadyExists { .. }) if generates => {
                    hooks.abandoned(&uid);
                    continue;
                }
                Err(e) => {
                    hooks.abandoned(&uid);
                    return Err(e.into());
                }
            };
            if !opts.dry_run {
                hooks.after_create(namespace, &key, &stored).await?;
            }
            return Ok(Written {
                object: stored,
                created: true,
                warnings: findings,
            });
        }
        Err(generate_name_conflict(info, &name).into())
    }

    /// Field ownership for writes through `sub`.
    pub(crate) fn field_manager(&self, sub: Subresource) -> FieldManager<'_> {
        FieldManager::new(&self.info, sub.name(), &self.catalog)
    }

    /// The schema of the kind (`None`: none known; nothing is pruned).
    pub(crate) fn kind_schema(&self) -> Option<listwatch_schema::Node<'_>> {
        self.catalog
            .kind(&self.info.group, &self.info.version, &self.info.kind)
    }

    /// The kind's schema compiled for the write path's walks (`None`: none known).
    pub(crate) fn plan(&self) -> Option<Arc<listwatch_schema::Plan>> {
        self.catalog
            .plan(&self.info.group, &self.info.version, &self.info.kind)
    }

    /// The object about to be written, refused (413) when its encoded size is over what
    /// the storage accepts.
    pub(crate) fn to_object(&self, v: Value) -> ApiResult<Object> {
        let obj = Object::from_value(v, &self.info.selectable_fields)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        check_object_size(&obj, self.storage.as_ref())?;
        Ok(obj)
    }

    /// Field validation of a create's or update's body: its duplicate and unknown fields
    /// (removed from `body`) refuse it under `Strict`, else are returned to answer as
    /// warnings.
    pub(crate) fn check_body(
        &self,
        sub: Subresource,
        body: &mut Map<String, Value>,
        directive: Directive,
        duplicates: Vec<String>,
    ) -> ApiResult<Findings> {
        let mut found = Findings::duplicates(duplicates);
        if sub != Subresource::Scale {
            let mut v = Value::Object(std::mem::take(body));
            let typed = crate::typed::check_body(&self.info, &self.catalog, &v);
            if let Err(e) = typed {
                if let Value::Object(m) = v {
                    *body = m;
                }
                return Err(e);
            }
            crate::typed::canonicalize(&self.info, &self.catalog, &mut v);
            let plan = self.plan();
            found.extend(crate::field_validation::prune_kind(
                &self.info,
                plan.as_deref().map(listwatch_schema::Plan::root),
                &mut v,
            ));
            if let Value::Object(m) = v {
                *body = m;
            }
        }
        found.settle_body(directive, &self.info)
    }

    /// The object `name` in `namespace`; `None` when there is none.
    pub async fn get(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, StoreError> {
        let key = self.key(namespace, name)?;
        Ok(self
            .storage
            .get(
                &key,
                &GetOptions {
                    resource_version: None,
                    ignore_not_found: true,
                },
            )
            .await?)
    }

    /// Deletes `name` in `namespace` as a DELETE with `opts` does (the kind's deletion
    /// lifecycle: grace periods, finalizers, propagation, preconditions, dry run); the
    /// object gone, or still there marked as being deleted. Pods are acknowledged as
    /// [`with_kubelet`](Self::with_kubelet) says (by default, by nobody). A name the
    /// kind's strategy refuses to delete ([`KindStrategy::delete_forbidden`](listwatch_kinds::KindStrategy::delete_forbidden))
    /// is a 403 whatever the options.
    pub async fn delete(
        &self,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteRequest,
    ) -> Result<Deletion, StoreError> {
        if let Some(why) = self.info.strategy.delete_forbidden(name) {
            return Err(ApiError::forbidden(&self.info, name, &why).into());
        }
        self.delete_listed(namespace, name, opts).await
    }

    /// [`Store::delete`] without asking the kind's strategy: a collection delete's step
    /// (upstream's `DeleteCollection` deletes through the generic store).
    pub(crate) async fn delete_listed(
        &self,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteRequest,
    ) -> Result<Deletion, StoreError> {
        crate::validation::check_delete(&self.info, name)?;
        let key = self.key(namespace, name)?;
        Ok(lifecycle::delete(self.storage.as_ref(), &self.info, &key, opts, self.kubelet).await?)
    }

    pub(crate) fn key(&self, namespace: Option<&str>, name: &str) -> Result<Key, StoreError> {
        let ns = namespace.filter(|_| self.info.namespaced);
        Ok(Key::object(&self.info.storage_resource, ns, name)?)
    }
}
