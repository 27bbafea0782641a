//! The namespace controller: empties a terminating namespace, reports on it in its status
//! conditions, and lets it go, as upstream's namespace controller
//! (`pkg/controller/namespace/namespace_controller.go` and
//! `deletion/namespaced_resources_deleter.go`).
//!
//! Its interface is narrow ([`Server`]): the registry [`Store`] of every kind served now
//! (read again for every pass, so a kind served after start — `Api::add_resource`, a custom
//! resource — is emptied like any other), the wake-up a local namespace DELETE sends and
//! whether the server is shutting down. It reads and deletes through the stores (list in
//! pages, delete with the kind's lifecycle: finalizers, grace periods, the kubelet's
//! acknowledgement as the server's DELETEs have it) and writes the namespace's status
//! conditions and `/finalize` through the registry's field manager as
//! `kube-controller-manager`. [`ApiServer`] is the [`Server`] of a
//! [`listwatch_endpoints::Api`]; the binary runs [`NamespaceController::run`] as a singleton.
//!
//! What it does: it lists namespaces when woken (a local namespace DELETE) and at least
//! every 5 s (`POLL_IDLE`: a namespace marked by another server); each terminating namespace
//! that holds its `kubernetes` finalizer and is due gets a *sync*:
//! 1. passes deleting every object of every namespaced resource in it (background
//!    propagation, through `lifecycle`, so finalizers and grace periods hold objects), until
//!    a pass deletes nothing more;
//! 2. its status conditions updated from what the last pass left (`conditions`; written
//!    only when they change);
//! 3. if nothing is left, `kubernetes` removed from `spec.finalizers` and the namespace
//!    deleted if nothing else holds it.
//!
//! When it comes back (upstream's work queue): a namespace whose content is held is synced
//! again after `estimate / 2 + 1` seconds, where the estimate is the longest pod grace
//! period still running or, for objects held by finalizers, 15 s (so every 8 s); a sync
//! that failed (a storage error, objects left that nothing explains) is retried after 5 ms
//! doubling per failure up to 60 s. Wake-ups do not make a namespace due earlier: a flood of
//! DELETEs costs one list of namespaces per round, never a pass over content. A namespace
//! whose `kubernetes` finalizer is gone but that others hold is left to them (upstream's
//! `finalized` check).
//!
//! Invariants: at most one queue entry per terminating namespace (entries of namespaces
//! gone or no longer terminating are dropped each round); every wait is bounded by
//! `POLL_IDLE` (5 s); the controller stops when its server shuts down (or its future is dropped).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use listwatch_api::Object;
use listwatch_kinds::{GracefulDeletion, KindSpec};
use listwatch_registry::clock;
use listwatch_registry::fieldmanager::FieldManager;
use listwatch_registry::lifecycle::{self, Deletion, State};
use listwatch_registry::namespaces::NAMESPACE_FINALIZER;
use listwatch_registry::namespaces::conditions::{self, Report};
use listwatch_registry::options::{DeleteRequest, Propagation};
use listwatch_registry::{Store, StoreError};
use listwatch_schema::Catalog;
use listwatch_storage::{Error as StorageError, Key, ListOptions, Preconditions, Updated};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::sync::Notify;

/// How often the controller lists namespaces when nothing told it to.
const POLL_IDLE: Duration = Duration::from_secs(5);
/// Objects listed per page while emptying a namespace.
const PAGE: u64 = 500;
/// Passes over a namespace's resources per sync (while a pass still deletes something).
const PASSES_PER_SYNC: usize = 8;
/// The manager the controller's writes of a namespace are recorded under: upstream's
/// namespace controller runs in kube-controller-manager, whose client's user agent names its
/// managedFields entries (`kube-controller-manager`, subresource `status` or `finalize`).
const MANAGER: &str = "kube-controller-manager";

/// Upstream's `finalizerEstimateSeconds`: how long objects held by finalizers are expected
/// to take.
const FINALIZER_ESTIMATE_SECONDS: i64 = 15;
/// Upstream's `nsControllerRateLimiter`: a failed sync is retried after this, doubling per
/// failure, up to [`RETRY_MAX`].
const RETRY_BASE: Duration = Duration::from_millis(5);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What the namespace controller needs of the server it runs in.
pub trait Server: Send + Sync + 'static {
    /// The store of every kind served now, each acknowledging pod deletions as the server's
    /// DELETEs do. Read again for every round, so kinds served later are emptied too.
    fn stores(&self) -> Vec<Store>;
    /// What a namespace DELETE on this server notifies (`notify_one`): the controller looks
    /// at once instead of at its next poll.
    fn deletions(&self) -> Arc<Notify>;
    /// Whether the server is shutting down: the controller stops.
    fn stopping(&self) -> bool;
}

/// The [`Server`] of a [`listwatch_endpoints::Api`]: its served resources now, its namespace
/// DELETEs' wake-up, its shutdown.
#[derive(Debug, Clone)]
pub struct ApiServer(pub listwatch_endpoints::Api);

impl Server for ApiServer {
    fn stores(&self) -> Vec<Store> {
        self.0.resources().iter().map(|r| self.0.store(r)).collect()
    }

    fn deletions(&self) -> Arc<Notify> {
        self.0.namespace_deletions()
    }

    fn stopping(&self) -> bool {
        self.0.is_shutting_down()
    }
}

/// The controller's metrics.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    passes: Counter,
}

impl Metrics {
    /// The metrics, registered in `registry` (the server's `/metrics`).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "listwatch_namespace_controller_passes",
            "Passes of the namespace controller over a terminating namespace's content",
            m.passes.clone(),
        );
        m
    }
}

/// The namespace controller over one [`Server`]; see the module doc.
#[derive(Clone)]
pub struct NamespaceController {
    server: Arc<dyn Server>,
    metrics: Metrics,
}

impl std::fmt::Debug for NamespaceController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceController")
            .field("metrics", &self.metrics)
            .finish_non_exhaustive()
    }
}

impl NamespaceController {
    /// The controller of `server`, counting its passes in `metrics`.
    pub fn new(server: Arc<dyn Server>, metrics: Metrics) -> Self {
        Self { server, metrics }
    }

    /// Runs until the server shuts down. At most one should run per storage (several would
    /// only repeat each other's deletes); the binary runs it as a singleton.
    ///
    /// # Cancel safety
    /// Dropping the future stops it at its current step; every step is an idempotent,
    /// conditional write decided on fresh reads, so a successor redoing it is harmless.
    pub async fn run(self) {
        let wake = self.server.deletions();
        let mut queue = Queue::default();
        loop {
            if self.server.stopping() {
                return;
            }
            let next = round(&self, &mut queue).await;
            let wait = next
                .map_or(POLL_IDLE, |t| t.saturating_duration_since(Instant::now()))
                .min(POLL_IDLE);
            let _ = tokio::time::timeout(wait, wake.notified()).await;
        }
    }
}

/// The namespaces store among `stores`, when namespaces are served.
fn namespaces(stores: &[Store]) -> Option<&Store> {
    stores.iter().find(|s| lifecycle::is_namespaces(s.info()))
}

/// When each terminating namespace (by uid) is synced next, and how many syncs of it failed
/// in a row (upstream's delaying, rate-limited work queue).
#[derive(Debug, Default)]
struct Queue(HashMap<String, Entry>);

#[derive(Debug, Clone, Copy)]
struct Entry {
    due: Instant,
    failures: u32,
}

/// What a sync of a namespace came to.
#[derive(Debug)]
enum Synced {
    /// Finalized (or gone): nothing more to do.
    Done,
    /// Content is held; sync again after this estimate (seconds).
    Remaining(i64),
}

impl Queue {
    fn due(&self, uid: &str, now: Instant) -> bool {
        self.0.get(uid).is_none_or(|e| e.due <= now)
    }

    /// Upstream's `AddAfter(key, estimate/2 + 1 seconds)`.
    fn after_estimate(&mut self, uid: &str, estimate: i64, now: Instant) {
        let secs = u64::try_from(estimate / 2 + 1).unwrap_or(1);
        let failures = self.0.get(uid).map_or(0, |e| e.failures);
        self.0.insert(
            uid.to_owned(),
            Entry {
                due: now + Duration::from_secs(secs),
                failures,
            },
        );
    }

    /// Upstream's `AddRateLimited`: 5 ms, doubling per failure, at most 60 s.
    fn failed(&mut self, uid: &str, now: Instant) -> Duration {
        let failures = self.0.get(uid).map_or(0, |e| e.failures);
        let delay = RETRY_BASE
            .checked_mul(1u32.checked_shl(failures).unwrap_or(u32::MAX))
            .unwrap_or(RETRY_MAX)
            .min(RETRY_MAX);
        self.0.insert(
            uid.to_owned(),
            Entry {
                due: now + delay,
                failures: failures.saturating_add(1),
            },
        );
        delay
    }

    fn earliest(&self) -> Option<Instant> {
        self.0.values().map(|e| e.due).min()
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

/// One round over every terminating namespace that is due; returns when the next one is.
async fn round(c: &NamespaceController, queue: &mut Queue) -> Option<Instant> {
    let stores = c.server.stores();
    let nsres = namespaces(&stores)?;
    let list = match nsres.list(None, &ListOptions::recursive()).await {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "namespace controller: listing namespaces failed");
            return Some(Instant::now() + Duration::from_secs(1));
        }
    };
    let terminating: Vec<&Object> = list
        .items
        .iter()
        .filter(|o| State::of(o).deleting)
        .collect();
    let uid_of = |o: &Object| o.uid().unwrap_or(o.name()).to_owned();
    let live: std::collections::HashSet<String> = terminating.iter().map(|o| uid_of(o)).collect();
    queue.0.retain(|uid, _| live.contains(uid));
    for ns in terminating {
        if c.server.stopping() {
            break;
        }
        let state = State::of(ns);
        if !holds_namespace_finalizer(ns) && (state.finalizers || state.spec_finalizers) {
            // Finalized by this controller; whoever holds it lets it go.
            queue.0.remove(&uid_of(ns));
            continue;
        }
        let uid = uid_of(ns);
        if !queue.due(&uid, Instant::now()) {
            continue;
        }
        match sync(c, &stores, nsres, ns).await {
            Ok(Synced::Done) => {
                queue.0.remove(&uid);
            }
            Ok(Synced::Remaining(estimate)) => {
                tracing::debug!(
                    namespace = ns.name(),
                    estimate,
                    "content remaining in namespace"
                );
                queue.after_estimate(&uid, estimate, Instant::now());
            }
            Err(e) => {
                let delay = queue.failed(&uid, Instant::now());
                tracing::warn!(namespace = ns.name(), error = %e, retry_in = ?delay, "namespace controller: deletion of the namespace failed");
            }
        }
    }
    queue.earliest()
}

/// Why a sync failed (retried after the rate limiter's delay).
#[derive(Debug, thiserror::Error)]
enum SyncError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Content(String),
}

/// Empties `ns`, updates its conditions, and lets it go once empty.
async fn sync(
    c: &NamespaceController,
    stores: &[Store],
    nsres: &Store,
    ns: &Object,
) -> Result<Synced, SyncError> {
    let mut pass = Pass::default();
    for _ in 0..PASSES_PER_SYNC {
        if c.server.stopping() {
            return Ok(Synced::Remaining(0));
        }
        pass = delete_all_content(c, stores, ns).await;
        let left = pass.report.total_remaining();
        // Done when nothing was found, or this pass deleted nothing it found.
        if pass.found == left || !pass.report.errors.is_empty() {
            break;
        }
    }
    update_conditions(nsres, ns, &pass.report).await;
    if !pass.report.errors.is_empty() {
        return Err(SyncError::Content(pass.report.errors.join(", ")));
    }
    if pass.report.total_remaining() > 0 {
        return Ok(Synced::Remaining(pass.estimate));
    }
    finalize(nsres, ns).await?;
    Ok(Synced::Done)
}

/// Writes the conditions `report` makes into the namespace's status, if they change it.
/// A failure is logged (upstream's controller goes on as well).
async fn update_conditions(nsres: &Store, ns: &Object, report: &Report) {
    let Ok(key) = Key::object(&nsres.info().storage_resource, None, ns.name()) else {
        return;
    };
    let pre = Preconditions {
        uid: ns.uid().map(str::to_owned),
        resource_version: None,
    };
    let now = clock::format_rfc3339(clock::now_unix());
    let info = nsres.info();
    let catalog = Catalog::builtin();
    let mut update = |cur: Option<&Object>| -> listwatch_storage::Result<Updated> {
        let cur = cur.ok_or_else(|| key.not_found())?;
        let mut v = cur.to_value().map_err(|e| {
            StorageError::internal(format!("stored namespace does not decode: {e}"))
        })?;
        let (list, changed) = conditions::merge(v.pointer("/status/conditions"), report, &now);
        if !changed {
            return Ok(cur.clone().into());
        }
        let old = v.clone();
        let Some(obj) = v.as_object_mut() else {
            return Ok(cur.clone().into());
        };
        let status = obj
            .entry("status")
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        if let Some(s) = status.as_object_mut() {
            s.insert("conditions".into(), Value::Array(list));
        }
        // Recorded as upstream's controller's UpdateStatus.
        FieldManager::new(info, "status", &catalog).update(Some(&old), &mut v, MANAGER);
        encode(info, v)
    };
    if let Err(e) = nsres
        .storage()
        .guaranteed_update(&key, Some(&pre), false, &mut update, None)
        .await
        && !e.is_not_found()
    {
        tracing::warn!(namespace = ns.name(), error = %e, "couldn't update the status conditions of the namespace");
    }
}

fn encode(info: &KindSpec, mut v: Value) -> listwatch_storage::Result<Updated> {
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    Object::from_value(v, &info.selectable_fields)
        .map(Updated::from)
        .map_err(|e| StorageError::internal(e.to_string()))
}

/// Removes `kubernetes` from the namespace's `spec.finalizers` (upstream's
/// `finalizeNamespace`) and deletes it if nothing else holds it.
async fn finalize(nsres: &Store, ns: &Object) -> Result<(), StoreError> {
    let name = ns.name();
    let key = Key::object(&nsres.info().storage_resource, None, name)?;
    let pre = Preconditions {
        uid: ns.uid().map(str::to_owned),
        resource_version: None,
    };
    let info = nsres.info();
    let catalog = Catalog::builtin();
    let mut update = |cur: Option<&Object>| -> listwatch_storage::Result<Updated> {
        let cur = cur.ok_or_else(|| key.not_found())?;
        let mut v = cur.to_value().map_err(|e| {
            StorageError::internal(format!("stored namespace does not decode: {e}"))
        })?;
        let old = v.clone();
        if let Some(f) = v
            .pointer_mut("/spec/finalizers")
            .and_then(Value::as_array_mut)
        {
            f.retain(|x| x.as_str() != Some(NAMESPACE_FINALIZER));
        }
        // Recorded as upstream's controller's Finalize.
        FieldManager::new(info, "finalize", &catalog).update(Some(&old), &mut v, MANAGER);
        encode(info, v)
    };
    let updated = match nsres
        .storage()
        .guaranteed_update(&key, Some(&pre), false, &mut update, None)
        .await
    {
        Ok(o) => o,
        Err(e) if e.is_not_found() || e.is_conflict() => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if !State::of(&updated).finalized(true) {
        // Another finalizer holds it: whoever owns it lets it go.
        return Ok(());
    }
    let opts = DeleteRequest {
        preconditions: Some(pre),
        ..DeleteRequest::default()
    };
    match nsres.delete(None, name, &opts).await {
        Ok(Deletion::Gone(_) | Deletion::Pending(_)) => Ok(()),
        Err(StoreError::Storage(e)) if e.is_not_found() || e.is_conflict() => Ok(()),
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
                .and_then(clock::parse_rfc3339)
        })
        .is_some_and(|t| t <= clock::now_unix())
}

/// What one pass over a namespace's content did.
#[derive(Debug, Default)]
struct Pass {
    /// Objects listed.
    found: usize,
    /// What is left, and what failed.
    report: Report,
    /// Upstream's estimate: the longest time left (seconds) for what is left to go.
    estimate: i64,
}

/// Upstream's `estimateGracefulTerminationForPods`: the longest
/// `terminationGracePeriodSeconds` of a pod not terminated, if the namespace was deleted
/// less than that long ago (else 0).
fn pod_estimate(pod: &Value, deleted_at: i64, now: i64) -> i64 {
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return 0;
    }
    let grace = pod
        .pointer("/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(lifecycle::DEFAULT_POD_GRACE_SECONDS);
    if now.saturating_sub(deleted_at) >= grace {
        0
    } else {
        grace
    }
}

/// One pass deleting every object of every namespaced resource in `ns` (upstream's
/// `deleteAllContent`): what it found, what is left and why. A storage error on one resource
/// is recorded and the pass goes on with the others, as upstream's.
///
/// A pod whose grace period is over is deleted with grace 0, as its kubelet would once its
/// containers are stopped: upstream a kubelet (or, for a pod on a node that is gone, the pod
/// garbage collector) ends every graceful deletion; here nothing else would, and the
/// namespace would never go.
async fn delete_all_content(c: &NamespaceController, stores: &[Store], ns: &Object) -> Pass {
    c.metrics.passes.inc();
    let name = ns.name();
    let now = clock::now_unix();
    let deleted_at = ns
        .to_value()
        .ok()
        .and_then(|v| {
            v.pointer("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(clock::parse_rfc3339)
        })
        .unwrap_or(now);
    let mut pass = Pass::default();
    // One resource served at several versions (a multi-version CRD) is one storage: its
    // objects are deleted and counted once, as upstream's pass over the preferred versions.
    let mut seen = std::collections::HashSet::new();
    for r in stores.iter().filter(|r| r.info().namespaced) {
        let info = r.info();
        let resource = format!("{}.{}", info.plural, info.group);
        if !seen.insert(resource.clone()) {
            continue;
        }
        let mut estimate = 0i64;
        let before = pass.report.total_remaining();
        let mut with_finalizers = false;
        let outcome = delete_resource(r, name, |o, left| {
            pass.found += 1;
            if info.graceful_deletion == GracefulDeletion::Pod
                && let Ok(v) = o.to_value()
            {
                estimate = estimate.max(pod_estimate(&v, deleted_at, now));
            }
            if let Some(left) = left {
                let v = left.to_value().unwrap_or_default();
                let fins: Vec<&str> = v
                    .pointer("/metadata/finalizers")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                with_finalizers |= !fins.is_empty();
                pass.report.left(&resource, &fins);
            }
        })
        .await;
        if let Err(e) = outcome {
            pass.report.errors.push(e.to_string());
            pass.estimate = pass.estimate.max(estimate);
            continue;
        }
        let left = pass.report.total_remaining().saturating_sub(before);
        if left == 0 {
            continue;
        }
        if estimate != 0 {
            pass.estimate = pass.estimate.max(estimate);
        } else if with_finalizers {
            pass.estimate = pass.estimate.max(FINALIZER_ESTIMATE_SECONDS);
        } else {
            // Nothing explains what is left (upstream's error for it).
            pass.report.errors.push(format!(
                "unexpected items still remain in namespace: {name} for gvr: {}/{}, Resource={}",
                info.group, info.version, info.plural
            ));
        }
    }
    pass
}

/// Lists and deletes every object of `r` in namespace `ns`, with background propagation as
/// upstream's controller; calls `seen` with each object listed and, when it stays, its
/// state after the DELETE.
async fn delete_resource(
    r: &Store,
    ns: &str,
    mut seen: impl FnMut(&Object, Option<&Object>),
) -> Result<(), StoreError> {
    let mut opts = ListOptions::recursive();
    opts.limit = Some(PAGE);
    let asked = DeleteRequest {
        propagation: Some(Propagation::Background),
        ..DeleteRequest::default()
    };
    let gone = |e: &StoreError| matches!(e, StoreError::Storage(e) if e.is_not_found());
    let gone_or_changed =
        |e: &StoreError| matches!(e, StoreError::Storage(e) if e.is_not_found() || e.is_conflict());
    loop {
        let page = r.list(Some(ns), &opts).await?;
        for o in &page.items {
            if !grace_over(o) && lifecycle::delete_changes_nothing(r.info(), o, &asked) {
                // Held as it was: nothing for a DELETE to do.
                seen(o, Some(o));
                continue;
            }
            match r.delete(Some(ns), o.name(), &asked).await {
                Ok(Deletion::Gone(_)) => seen(o, None),
                Ok(Deletion::Pending(p)) if grace_over(&p) => {
                    // What a kubelet does once the grace period is over.
                    let now = lifecycle::kubelet::acknowledgement(&p);
                    match r.delete(Some(ns), o.name(), &now).await {
                        Ok(Deletion::Gone(_)) => seen(o, None),
                        Ok(Deletion::Pending(p)) => seen(o, Some(&p)),
                        Err(e) if gone_or_changed(&e) => seen(o, None),
                        Err(e) => return Err(e),
                    }
                }
                Ok(Deletion::Pending(p)) => seen(o, Some(&p)),
                Err(e) if gone(&e) => seen(o, None),
                Err(e) => return Err(e),
            }
        }
        match page.continue_token {
            Some(c) if !page.items.is_empty() => opts.continue_token = Some(c),
            _ => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_queue_follows_upstreams_estimate_and_rate_limiter() {
        let mut q = Queue::default();
        let t0 = Instant::now();
        assert!(q.due("a", t0));
        // Finalizer-held content: 15 / 2 + 1 = 8 s.
        q.after_estimate("a", FINALIZER_ESTIMATE_SECONDS, t0);
        assert!(!q.due("a", t0 + Duration::from_secs(7)));
        assert!(q.due("a", t0 + Duration::from_secs(8)));
        // Failures: 5 ms, 10 ms, 20 ms ... at most 60 s.
        let delays: Vec<Duration> = (0..16).map(|_| q.failed("b", t0)).collect();
        assert_eq!(delays[0], Duration::from_millis(5));
        assert_eq!(delays[1], Duration::from_millis(10));
        assert_eq!(delays[10], Duration::from_millis(5 * 1024));
        assert_eq!(delays[15], RETRY_MAX);
        for _ in 0..100 {
            q.failed("b", t0);
        }
        assert_eq!(q.failed("b", t0), RETRY_MAX);
        assert_eq!(q.earliest(), Some(t0 + Duration::from_secs(8)));
    }

    #[test]
    fn pod_estimates_are_upstreams() {
        let pod =
            json!({"spec": {"terminationGracePeriodSeconds": 40}, "status": {"phase": "Running"}});
        assert_eq!(pod_estimate(&pod, 100, 110), 40);
        assert_eq!(pod_estimate(&pod, 100, 140), 0);
        let done =
            json!({"spec": {"terminationGracePeriodSeconds": 40}, "status": {"phase": "Failed"}});
        assert_eq!(pod_estimate(&done, 100, 110), 0);
        assert_eq!(pod_estimate(&json!({}), 100, 110), 30);
    }
}
