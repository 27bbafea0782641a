//! Namespace termination: the admission rule for creates in a namespace (exists, and is not
//! being terminated) and the namespace controller that empties a terminating namespace and
//! then lets it go, as upstream's `NamespaceLifecycle` admission plugin and namespace
//! controller do.
//!
//! A DELETE of a namespace only marks it (`lifecycle`: `deletionTimestamp`, phase
//! `Terminating`; its `spec.finalizers` hold `kubernetes` from its creation). The controller
//! — a background task of the [`Api`](crate::Api), started by `Installer::build` when it runs
//! on a tokio runtime — finds terminating namespaces (at once for a local DELETE, else by
//! polling, so a namespace marked by another server is handled too), deletes every object of
//! every namespaced resource in them (custom ones included; through `lifecycle`, so
//! finalizers are honoured and such objects hold the namespace until they go), and once a
//! full pass finds nothing, removes `kubernetes` from `spec.finalizers` and deletes the
//! namespace (if nothing else holds it). A namespace whose content is still held is looked at
//! again after a backoff (1 s doubling to 8 s, per namespace), not at every wake, and one it
//! has finalized that other finalizers hold is left to them: a stream of cheap DELETEs of
//! held namespaces costs a list of namespaces per wake, not a pass over their content. Pods are deleted gracefully, as upstream's
//! controller deletes them; one whose grace period is over is deleted with grace 0 (what its
//! kubelet would do), so a namespace with scheduled pods goes once their grace periods end
//! (at once with `Config::acknowledge_pod_deletion`: `lifecycle` acknowledges every DELETE).
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

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use listwatch_api::Object;
use listwatch_storage::{
    Error as StorageError, GetOptions, Key, ListOptions, Preconditions, Updated,
};
use serde_json::Value;
use tokio::sync::Notify;

use crate::Shared;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle::{self, Deletion, State};
use crate::query::DeleteRequest;
use crate::resource::{Resource, ResourceInfo};

/// The finalizer the namespace controller owns, in a namespace's `spec.finalizers`.
pub(crate) const NAMESPACE_FINALIZER: &str = "kubernetes";

/// How often the controller looks for terminating namespaces when nothing told it to.
const POLL_IDLE: Duration = Duration::from_secs(5);
/// How soon it looks again while a namespace still has objects (held by finalizers).
const POLL_BUSY: Duration = Duration::from_secs(1);
/// Objects listed per page while emptying a namespace.
const PAGE: u64 = 500;
/// Passes over a namespace's resources per round before other namespaces get a turn.
const PASSES_PER_ROUND: usize = 8;

/// Wakes the controller (a local namespace DELETE).
#[derive(Debug, Default)]
pub(crate) struct Wake(Notify);

impl Wake {
    pub(crate) fn wake(&self) {
        self.0.notify_one();
    }
}

fn terminating_message(ns: &str) -> String {
    format!("unable to create new content in namespace {ns} because it is being terminated")
}

/// 403 for a create of `name` in the terminating namespace `ns`, as upstream's
/// `NamespaceLifecycle` (with its `NamespaceTerminating` cause).
pub(crate) fn terminating(info: &ResourceInfo, name: &str, ns: &str) -> ApiError {
    let msg = terminating_message(ns);
    let mut e = ApiError::forbidden(info, name, &msg);
    let status = (*e.0)
        .clone()
        .with_cause("NamespaceTerminating", &msg, "metadata.namespace");
    e.0 = Box::new(status);
    e
}

/// The namespaces resource, when installed.
fn namespaces(shared: &Shared) -> Option<&Resource> {
    shared.namespaces.and_then(|i| shared.resources.get(i))
}

/// Reads namespace `ns` (consistently): `None` when missing.
async fn read_namespace(shared: &Shared, ns: &str) -> ApiResult<Option<(Resource, Object)>> {
    let Some(nsres) = namespaces(shared) else {
        return Ok(None);
    };
    let key = Key::object(&nsres.info.storage_resource, None, ns)
        .map_err(|e| ApiError::storage(&e, &nsres.info))?;
    let found = nsres
        .storage
        .get(
            &key,
            &GetOptions {
                resource_version: None,
                ignore_not_found: true,
            },
        )
        .await
        .map_err(|e| ApiError::storage(&e, &nsres.info))?;
    Ok(found.map(|o| (nsres.clone(), o)))
}

/// Before a create of `name` (a `info` object) in `ns`: 404 when the namespace is missing,
/// 403 when it is being terminated. Nothing to check without a namespaces resource.
pub(crate) async fn check_open(
    shared: &Shared,
    info: &ResourceInfo,
    ns: Option<&str>,
    name: &str,
) -> ApiResult<()> {
    let Some(ns) = ns else {
        return Ok(());
    };
    let Some(nsres) = namespaces(shared) else {
        return Ok(());
    };
    match read_namespace(shared, ns).await? {
        None => {
            let key = Key::object(&nsres.info.storage_resource, None, ns)
                .map_err(|e| ApiError::storage(&e, &nsres.info))?;
            Err(ApiError::storage(&key.not_found(), &nsres.info))
        }
        Some((_, o)) if State::of(&o).deleting => Err(terminating(info, name, ns)),
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
async fn read_namespace_patiently(
    shared: &Shared,
    ns: &str,
) -> ApiResult<Option<(Resource, Object)>> {
    let deadline = Instant::now() + RECHECK_PATIENCE;
    let mut wait = RECHECK_BACKOFF;
    loop {
        match read_namespace(shared, ns).await {
            Err(e) if (e.code() >= 500 || e.code() == 429) && Instant::now() + wait < deadline => {
                tracing::debug!(namespace = ns, error = %e.0.message, "re-reading the namespace after a create failed; trying again");
                // A pause is a wait: no place in the request compute pool meanwhile.
                crate::compute::waiting(tokio::time::sleep(wait)).await;
                wait = (wait * 2).min(RECHECK_BACKOFF_MAX);
            }
            other => return other,
        }
    }
}

/// After a create wrote `created` at `key` in `ns`: if the namespace is by now terminating
/// or gone, removes the object (in its own task: a request deadline dropping this future
/// does not stop it) and answers as [`check_open`] would have.
///
/// The namespace is re-read through storage failures for up to [`RECHECK_PATIENCE`]. If it
/// still cannot be read, the object is removed (the namespace may have been terminated
/// before the write) and the answer says so and carries no `Retry-After`: the create was
/// applied and undone (or, if the removal failed too, its outcome is unknown), and clients
/// resend any verb on that header — upstream's rule for a write whose effect the server
/// cannot vouch for is to let the client decide.
pub(crate) async fn recheck_after_create(
    shared: &Shared,
    res: &Resource,
    ns: Option<&str>,
    key: &Key,
    created: &Object,
) -> ApiResult<()> {
    let Some(ns) = ns else {
        return Ok(());
    };
    if namespaces(shared).is_none() {
        return Ok(());
    }
    let (verdict, known) = match read_namespace_patiently(shared, ns).await {
        Ok(Some((_, o))) if !State::of(&o).deleting => return Ok(()),
        Ok(_) => (
            check_open(shared, &res.info, Some(ns), created.name())
                .await
                .err()
                .unwrap_or_else(|| terminating(&res.info, created.name(), ns)),
            true,
        ),
        // Cannot tell: remove what was written, to be safe, and say why.
        Err(e) => (e, false),
    };
    let storage = Arc::clone(&res.storage);
    let key = key.clone();
    let pre = Preconditions {
        uid: created.uid().map(str::to_owned),
        resource_version: None,
    };
    let kubelet = lifecycle::Kubelet::of(&shared.config);
    let cleanup = tokio::spawn(async move {
        // The object is ours (uid); a finalizer on it is honoured like any delete's.
        let info = ResourceInfo::new("", "", "", "");
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
            res.info.qualified_resource(),
            created.name(),
            status.message
        )
    } else {
        format!(
            "{} \"{}\" was written, but namespace {ns} could not be read afterwards to confirm \
             that it is still open, and removing the object failed: it may or may not exist: {}",
            res.info.qualified_resource(),
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

/// Starts the namespace controller for `shared` on the current tokio runtime, if there is
/// one and namespaces are served. It stops when the API is dropped or shuts down.
pub(crate) fn start(shared: &Arc<Shared>) {
    if shared.namespaces.is_none() {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!("no tokio runtime at build: the namespace controller is not running");
        return;
    };
    rt.spawn(controller(shared));
}

/// The namespace controller of `shared` as a future, for an embedder that decides where and
/// when it runs (under a leader election: `Installer::without_namespace_controller`).
/// Dropping it stops it at its next step; it also ends when the API is dropped or shuts down.
pub(crate) fn controller(shared: &Arc<Shared>) -> impl Future<Output = ()> + Send + 'static {
    let weak = Arc::downgrade(shared);
    let wake = Arc::clone(&shared.namespace_wake);
    let served = shared.namespaces.is_some();
    async move {
        if served {
            run(weak, wake).await;
        }
    }
}

async fn run(weak: Weak<Shared>, wake: Arc<Wake>) {
    let mut backoff = Backoff::default();
    loop {
        let busy = {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            if shared.shutting_down() {
                return;
            }
            round(&shared, &mut backoff).await
        };
        let wait = if busy { POLL_BUSY } else { POLL_IDLE };
        let _ = tokio::time::timeout(wait, wake.0.notified()).await;
    }
}

/// When the controller looks again at a namespace whose content is held (by finalizers or
/// grace periods): after 1 s, then twice as long each time up to [`BACKOFF_MAX`], whatever
/// wakes it in between (a DELETE of the namespace, of another one). Keyed by the
/// namespace's uid; entries of namespaces no longer terminating are dropped each round, so
/// it holds at most one per terminating namespace.
#[derive(Debug, Default)]
struct Backoff(HashMap<String, (Instant, Duration)>);

/// The longest wait between two passes over a held namespace (upstream's controller
/// requeues such a namespace after an estimate of a few seconds; its rate limiter backs
/// off failures exponentially).
const BACKOFF_MAX: Duration = Duration::from_secs(8);

impl Backoff {
    fn due(&self, uid: &str, now: Instant) -> bool {
        self.0.get(uid).is_none_or(|(next, _)| *next <= now)
    }

    fn held(&mut self, uid: &str, now: Instant) {
        let delay = self
            .0
            .get(uid)
            .map_or(POLL_BUSY, |(_, d)| (*d * 2).min(BACKOFF_MAX));
        self.0.insert(uid.to_owned(), (now + delay, delay));
    }
}

/// Whether the namespace's `spec.finalizers` still holds the controller's finalizer.
fn holds_namespace_finalizer(ns: &Object) -> bool {
    ns.to_value().ok().is_some_and(|v| {
        v.pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(NAMESPACE_FINALIZER)))
    })
}

/// One round over every terminating namespace; `true` when one is still not gone. A
/// namespace the controller has finalized (its finalizer gone) but that others still hold
/// is left to them, as upstream's controller returns for a `finalized` namespace; one whose
/// content is held waits for its [`Backoff`].
async fn round(shared: &Shared, backoff: &mut Backoff) -> bool {
    let Some(nsres) = namespaces(shared) else {
        return false;
    };
    let Ok(key) = Key::collection(&nsres.info.storage_resource, None) else {
        return false;
    };
    let list = match nsres.storage.list(&key, &ListOptions::recursive()).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "namespace controller: listing namespaces failed");
            return true;
        }
    };
    let mut busy = false;
    let now = Instant::now();
    let terminating: Vec<&Object> = list
        .items
        .iter()
        .filter(|o| State::of(o).deleting)
        .collect();
    let uid_of = |o: &Object| o.uid().unwrap_or(o.name()).to_owned();
    let live: HashSet<String> = terminating.iter().map(|o| uid_of(o)).collect();
    backoff.0.retain(|uid, _| live.contains(uid));
    for ns in terminating {
        let state = State::of(ns);
        if !holds_namespace_finalizer(ns) && (state.finalizers || state.spec_finalizers) {
            // Finalized by this controller; whoever holds it lets it go.
            continue;
        }
        let uid = uid_of(ns);
        if !backoff.due(&uid, now) {
            busy = true;
            continue;
        }
        match terminate(shared, nsres, ns).await {
            Ok(true) => {
                backoff.0.remove(&uid);
            }
            Ok(false) => {
                busy = true;
                backoff.held(&uid, Instant::now());
            }
            Err(e) => {
                busy = true;
                backoff.held(&uid, Instant::now());
                tracing::warn!(namespace = ns.name(), error = %e, "namespace controller: terminating failed");
            }
        }
    }
    busy
}

/// Empties `ns` and lets it go; `Ok(true)` when done (or nothing is left to do).
async fn terminate(shared: &Shared, nsres: &Resource, ns: &Object) -> Result<bool, StorageError> {
    let name = ns.name();
    let mut empty = false;
    for _ in 0..PASSES_PER_ROUND {
        if shared.shutting_down() {
            return Ok(false);
        }
        let (found, held) = delete_all_content(shared, name).await?;
        if found == 0 {
            empty = true;
            break;
        }
        if held == found {
            // Only objects held by finalizers are left: look again later.
            return Ok(false);
        }
    }
    if !empty {
        return Ok(false);
    }
    let key = Key::object(&nsres.info.storage_resource, None, name)?;
    let uid = ns.uid().map(str::to_owned);
    let pre = Preconditions {
        uid: uid.clone(),
        resource_version: None,
    };
    let info = &nsres.info;
    let mut update = |cur: Option<&Object>| -> listwatch_storage::Result<Updated> {
        let cur = cur.ok_or_else(|| key.not_found())?;
        let mut v = cur.to_value().map_err(|e| {
            StorageError::internal(format!("stored namespace does not decode: {e}"))
        })?;
        if let Some(f) = v
            .pointer_mut("/spec/finalizers")
            .and_then(Value::as_array_mut)
        {
            f.retain(|x| x.as_str() != Some(NAMESPACE_FINALIZER));
        }
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
        }
        Object::from_value(v, &info.selectable_fields)
            .map(Updated::from)
            .map_err(|e| StorageError::internal(e.to_string()))
    };
    let updated = match nsres
        .storage
        .guaranteed_update(&key, Some(&pre), false, &mut update, None)
        .await
    {
        Ok(o) => o,
        Err(e) if e.is_not_found() || e.is_conflict() => return Ok(true),
        Err(e) => return Err(e),
    };
    if !State::of(&updated).finalized(true) {
        // Another finalizer holds it: whoever owns it lets it go.
        return Ok(true);
    }
    let opts = DeleteRequest {
        preconditions: Some(pre),
        ..DeleteRequest::default()
    };
    let kubelet = lifecycle::Kubelet::of(&shared.config);
    match lifecycle::delete(nsres.storage.as_ref(), info, &key, &opts, kubelet).await {
        Ok(Deletion::Gone(_) | Deletion::Pending(_)) => Ok(true),
        Err(e) if e.is_not_found() || e.is_conflict() => Ok(true),
        Err(e) => Err(e),
    }
}

/// Whether `o` is in a grace period (a pod being deleted gracefully) that is over.
fn grace_over(o: &Object) -> bool {
    let state = State::of(o);
    if !state.grace_pending {
        return false;
    }
    o.to_value()
        .ok()
        .and_then(|v| {
            v.pointer("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(crate::clock::parse_rfc3339)
        })
        .is_some_and(|t| t <= crate::clock::now_unix())
}

/// One pass deleting every object of every namespaced resource in `ns`: how many objects it
/// found, and how many of those stay (held by finalizers, or in a grace period). A pod whose
/// grace period is over is deleted with grace 0, as its kubelet would once its containers
/// are stopped: upstream a kubelet (or, for a pod on a node that is gone, the pod garbage
/// collector) ends every graceful deletion; here nothing else would, and the namespace
/// would never go.
async fn delete_all_content(shared: &Shared, ns: &str) -> Result<(usize, usize), StorageError> {
    shared.metrics.namespace_pass();
    let (mut found, mut held) = (0usize, 0usize);
    let kubelet = lifecycle::Kubelet::of(&shared.config);
    for r in shared.resources.iter().filter(|r| r.info.namespaced) {
        let key = Key::collection(&r.info.storage_resource, Some(ns))?;
        let mut opts = ListOptions::recursive();
        opts.limit = Some(PAGE);
        loop {
            let page = r.storage.list(&key, &opts).await?;
            for o in &page.items {
                found += 1;
                let k = Key::object(&r.info.storage_resource, Some(ns), o.name())?;
                let asked = DeleteRequest::default();
                match lifecycle::delete(r.storage.as_ref(), &r.info, &k, &asked, kubelet).await {
                    Ok(Deletion::Gone(_)) => {}
                    Ok(Deletion::Pending(o)) if grace_over(&o) => {
                        // What a kubelet does once the grace period is over.
                        let now = lifecycle::kubelet::acknowledgement(&o);
                        match lifecycle::delete(r.storage.as_ref(), &r.info, &k, &now, kubelet)
                            .await
                        {
                            Ok(Deletion::Gone(_)) => {}
                            Ok(Deletion::Pending(_)) => held += 1,
                            Err(e) if e.is_not_found() || e.is_conflict() => {}
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(Deletion::Pending(_)) => held += 1,
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
            match page.continue_token {
                Some(c) if !page.items.is_empty() => opts.continue_token = Some(c),
                _ => break,
            }
        }
    }
    Ok((found, held))
}
