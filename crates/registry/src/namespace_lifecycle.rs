//! The admission rule for creates in a namespace (exists, and is not being terminated), as
//! upstream's `NamespaceLifecycle` admission plugin: [`check_open`] before a create's write,
//! [`recheck_after_create`] after it. The HTTP layer calls them from its `WriteHooks`
//! (`check_namespace`, `after_create`), with the store of the served `v1` namespaces.
//!
//! A DELETE of a namespace only marks it (`lifecycle`: `deletionTimestamp`, phase
//! `Terminating`; its `spec.finalizers` hold `kubernetes` from its creation); the namespace
//! controller — `listwatch-controllers`' `namespaces`, which the embedder runs — removes that
//! finalizer once the namespace is empty. Other finalizers in `spec.finalizers` are released
//! through `PUT .../finalize`.
//!
//! Invariant (no orphans): an object of a namespace is never left behind once the namespace
//! is gone. A create checks the namespace before it writes (404 when missing, 403 Forbidden
//! `... is forbidden: unable to create new content in namespace X because it is being
//! terminated`) and reads it again, consistently, after its write: if by then the namespace
//! is terminating or gone, the create removes what it wrote (in a task of its own, so a
//! request deadline cannot interrupt it) and answers the same 403 (or 404). Otherwise the
//! namespace's termination was written after the object, so the controller's passes (which
//! start after the termination, with consistent lists) see the object. What is not covered:
//! a server that crashes between a create's write and its removal.
//!
//! The re-read goes through storage failures (an etcd leader election answers reads
//! "leader changed" for a moment) for up to 10 s before the create gives up on knowing:
//! the object is already visible, and removing it then answering a retryable error made
//! clients resend the create — watchers saw a create, a delete and a second create for one
//! write. If the namespace still cannot be read, the object is removed and the answer says
//! so without `Retry-After` (the client decides whether to send the create again).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Store;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle::{self, State};
use crate::options::DeleteRequest;
use listwatch_api::Object;
use listwatch_kinds::KindSpec;
use listwatch_storage::{GetOptions, Key, Preconditions};

fn terminating_message(ns: &str) -> String {
    format!("unable to create new content in namespace {ns} because it is being terminated")
}

/// 403 for a create of `name` in the terminating namespace `ns`, as upstream's
/// `NamespaceLifecycle` (with its `NamespaceTerminating` cause).
pub fn terminating(info: &KindSpec, name: &str, ns: &str) -> ApiError {
    let msg = terminating_message(ns);
    let mut e = ApiError::forbidden(info, name, &msg);
    // The cause's own message is the short form (plugin/pkg/admission/namespace/lifecycle
    // admission.go: `namespace <ns> is being terminated`).
    let status = (*e.0).clone().with_cause(
        "NamespaceTerminating",
        &format!("namespace {ns} is being terminated"),
        "metadata.namespace",
    );
    e.0 = Box::new(status);
    e
}

/// Reads namespace `ns` (consistently) from `namespaces`: `None` when missing.
async fn read_namespace(namespaces: Option<&Store>, ns: &str) -> ApiResult<Option<Object>> {
    let Some(nsres) = namespaces else {
        return Ok(None);
    };
    let key = Key::object(&nsres.info().storage_resource, None, ns)
        .map_err(|e| ApiError::storage(&e, nsres.info()))?;
    let found = nsres
        .storage()
        .get(
            &key,
            &GetOptions {
                resource_version: None,
                ignore_not_found: true,
            },
        )
        .await
        .map_err(|e| ApiError::storage(&e, nsres.info()))?;
    Ok(found)
}

/// Before a create of `name` (a `info` object) in `ns`: 404 when the namespace is missing
/// from `namespaces` (the store of the served namespaces), 403 when it is being
/// terminated. Nothing to check without a namespaces resource.
pub async fn check_open(
    namespaces: Option<&Store>,
    info: &KindSpec,
    ns: Option<&str>,
    name: &str,
) -> ApiResult<()> {
    let Some(ns) = ns else {
        return Ok(());
    };
    let Some(nsres) = namespaces else {
        return Ok(());
    };
    match read_namespace(Some(nsres), ns).await? {
        None => {
            let key = Key::object(&nsres.info().storage_resource, None, ns)
                .map_err(|e| ApiError::storage(&e, nsres.info()))?;
            Err(ApiError::storage(&key.not_found(), nsres.info()))
        }
        Some(o) if State::of(&o).deleting => Err(terminating(info, name, ns)),
        Some(_) => Ok(()),
    }
}

/// How long a create re-reads its namespace after its write, through storage failures
/// (an etcd leader election, a member cut off), before it gives up on knowing. The object is
/// already written and visible to watchers: removing it on a failed read would show a
/// create and a delete for a request whose answer is then an error.
const RECHECK_PATIENCE: Duration = Duration::from_secs(10);
/// The first wait between two re-reads (doubling, at most [`RECHECK_BACKOFF_MAX`]).
const RECHECK_BACKOFF: Duration = Duration::from_millis(50);
const RECHECK_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// [`read_namespace`] again while it fails with a server-side error (5xx, 429), within
/// [`RECHECK_PATIENCE`]: a read is safe to repeat, and only an answer tells whether the
/// object just written may stay.
async fn read_namespace_patiently(namespaces: &Store, ns: &str) -> ApiResult<Option<Object>> {
    let deadline = Instant::now() + RECHECK_PATIENCE;
    let mut wait = RECHECK_BACKOFF;
    loop {
        match read_namespace(Some(namespaces), ns).await {
            Err(e) if (e.code() >= 500 || e.code() == 429) && Instant::now() + wait < deadline => {
                tracing::debug!(namespace = ns, error = %e.0.message, "re-reading the namespace after a create failed; trying again");
                // A pause is a wait: no place in the request compute pool meanwhile.
                listwatch_server::compute::waiting(tokio::time::sleep(wait)).await;
                wait = (wait * 2).min(RECHECK_BACKOFF_MAX);
            }
            other => return other,
        }
    }
}

/// After a create wrote `created` at `key` in `ns` through `objects` (the store of its kind,
/// acknowledging pods as the server's DELETEs do): if the namespace is by now terminating
/// or gone from `namespaces`, removes the object (in its own task: a request deadline
/// dropping this future does not stop it) and answers as [`check_open`] would have.
///
/// The namespace is re-read through storage failures for up to 10 s. If it
/// still cannot be read, the object is removed (the namespace may have been terminated
/// before the write) and the answer says so and carries no `Retry-After`: the create was
/// applied and undone (or, if the removal failed too, its outcome is unknown), and clients
/// resend any verb on that header — upstream's rule for a write whose effect the server
/// cannot vouch for is to let the client decide.
pub async fn recheck_after_create(
    namespaces: Option<&Store>,
    objects: &Store,
    ns: Option<&str>,
    key: &Key,
    created: &Object,
) -> ApiResult<()> {
    let Some(ns) = ns else {
        return Ok(());
    };
    let Some(nsres) = namespaces else {
        return Ok(());
    };
    let info = objects.info();
    let (verdict, known) = match read_namespace_patiently(nsres, ns).await {
        Ok(Some(o)) if !State::of(&o).deleting => return Ok(()),
        Ok(_) => (
            check_open(Some(nsres), info, Some(ns), created.name())
                .await
                .err()
                .unwrap_or_else(|| terminating(info, created.name(), ns)),
            true,
        ),
        // Cannot tell: remove what was written, to be safe, and say why.
        Err(e) => (e, false),
    };
    let storage = Arc::clone(objects.storage());
    let key = key.clone();
    let pre = Preconditions {
        uid: created.uid().map(str::to_owned),
        resource_version: None,
    };
    let kubelet = objects.kubelet;
    let cleanup = tokio::spawn(async move {
        // The object is ours (uid); a finalizer on it is honoured like any delete's.
        let info = KindSpec::new("", "", "", "");
        for attempt in 0..5u32 {
            let opts = DeleteRequest {
                preconditions: Some(pre.clone()),
                ..DeleteRequest::default()
            };
            match lifecycle::delete(storage.as_ref(), &info, &key, &opts, kubelet).await {
                Ok(_) => return true,
                Err(e) if e.is_not_found() || e.is_conflict() => return true,
                Err(e) => {
                    tracing::warn!(%key, error = %e, attempt, "removing an object created in a terminating namespace failed");
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                }
            }
        }
        false
    });
    let removed = cleanup.await.unwrap_or(false);
    if known {
        return Err(verdict);
    }
    let mut status = *verdict.0;
    status.message = if removed {
        format!(
            "{} \"{}\" was written, but namespace {ns} could not be read afterwards to confirm \
             that it is still open, so the object was removed: {}",
            info.qualified_resource(),
            created.name(),
            status.message
        )
    } else {
        format!(
            "{} \"{}\" was written, but namespace {ns} could not be read afterwards to confirm \
             that it is still open, and removing the object failed: it may or may not exist: {}",
            info.qualified_resource(),
            created.name(),
            status.message
        )
    };
    tracing::warn!(%ns, object = created.name(), removed, "a create could not re-read its namespace");
    if let Some(details) = status.details.as_mut() {
        details.retry_after_seconds = 0;
    }
    Err(ApiError::from_status(status))
}
