//! The kubelet's acknowledgement of a pod's graceful deletion, done by the server itself for
//! test environments ([`Config::acknowledge_pod_deletion`](crate::Config), off by default).
//!
//! Upstream, a DELETE of a scheduled pod only marks it (`deletionTimestamp`,
//! `deletionGracePeriodSeconds`); the pod's kubelet stops its containers and then sends a
//! DELETE with `gracePeriodSeconds: 0` and the pod's uid as precondition, which writes the
//! mark with grace 0 and removes the pod unless finalizers hold it. There is no kubelet here,
//! so without this a scheduled pod stays `Terminating` until a client sends that DELETE. With
//! it, every DELETE that leaves a pod in a pending grace period is followed at once by the
//! kubelet's DELETE, and a pass when the API is built acknowledges the pods whose graceful
//! deletion was already pending (written before a restart, or by a server without the flag).
//!
//! Invariants:
//! - the acknowledgement is exactly upstream's kubelet DELETE (grace 0, uid precondition),
//!   carried out by [`super::delete_as_asked`]: watchers see the client's mark (MODIFIED),
//!   the kubelet's mark with grace 0 (MODIFIED), then the removal (DELETED); a pod that
//!   finalizers hold is marked with grace 0 and kept, and goes with its last finalizer (an
//!   update then finds no grace period pending);
//! - only a pod with a grace period pending is acknowledged (nothing else waits for a
//!   kubelet); a dry run is never acknowledged (it wrote no mark);
//! - an acknowledgement that fails leaves the pod marked, as the client's DELETE did: the
//!   client's DELETE still succeeds, and the failure is logged (a later DELETE of the pod,
//!   or the next start, acknowledges it);
//! - the start-up pass keeps no state across pods beyond one page of a list; it retries a
//!   failed pass after a backoff, and stops when the API shuts down or is dropped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use listwatch_api::Object;
use listwatch_storage::{Error as StorageError, Key, ListOptions, Preconditions, Storage};

use super::{Deletion, State, is_namespaces};
use crate::query::DeleteRequest;
use crate::resource::{GracefulDeletion, KindSpec};
use crate::{Config, Shared};

/// Objects listed per page by the start-up pass.
const PAGE: u64 = 500;
/// The first wait before the start-up pass is tried again after a failure; it doubles up
/// to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two tries of the start-up pass.
const RETRY_MAX: Duration = Duration::from_secs(8);

/// Who ends a pod's graceful deletion on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kubelet {
    /// Nobody: a scheduled pod stays until a client's DELETE of grace 0 (upstream without
    /// a kubelet).
    Absent,
    /// The server, as the pod's kubelet would once its containers have stopped.
    Acknowledges,
}

impl Kubelet {
    /// What `config` asks for.
    pub(crate) fn of(config: &Config) -> Self {
        if config.acknowledge_pod_deletion {
            Self::Acknowledges
        } else {
            Self::Absent
        }
    }

    /// Whether `marked`, which a DELETE with `opts` of an `info` object left in storage,
    /// is to be acknowledged now.
    pub(super) fn acknowledges(
        self,
        info: &KindSpec,
        opts: &DeleteRequest,
        marked: &Object,
    ) -> bool {
        self == Self::Acknowledges && !opts.dry_run && waits_for_kubelet(info, marked)
    }
}

/// Whether `o`, an object of `info`, is a pod in a pending graceful deletion.
fn waits_for_kubelet(info: &KindSpec, o: &Object) -> bool {
    info.graceful_deletion == GracefulDeletion::Pod && !is_namespaces(info) && {
        let s = State::of(o);
        s.deleting && s.grace_pending
    }
}

/// The kubelet's DELETE of `marked` (a pod in its grace period at `key`): grace 0, on
/// condition that it is still the same pod. What the client's DELETE answers: the pod's last
/// state, gone or held by finalizers; `marked` itself when the acknowledgement failed.
pub(super) async fn acknowledge(
    storage: &dyn Storage,
    info: &KindSpec,
    key: &Key,
    marked: Object,
) -> Deletion {
    match acknowledge_once(storage, info, key, &marked).await {
        Ok(d) => d,
        // Another writer removed it first (upstream's kubelet tolerates this the same way).
        Err(e) if e.is_not_found() => Deletion::Gone(marked),
        Err(e) => {
            tracing::warn!(%key, error = %e, "acknowledging a pod's graceful deletion failed: it stays marked");
            Deletion::Pending(marked)
        }
    }
}

/// The DELETE a kubelet sends once `marked`'s containers are gone: grace period 0, for
/// this very object (its uid as a precondition). Also what the namespace controller sends
/// for a pod whose grace period is over.
pub(crate) fn acknowledgement(marked: &Object) -> DeleteRequest {
    DeleteRequest {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: marked.uid().map(str::to_owned),
            resource_version: None,
        }),
        ..DeleteRequest::default()
    }
}

async fn acknowledge_once(
    storage: &dyn Storage,
    info: &KindSpec,
    key: &Key,
    marked: &Object,
) -> Result<Deletion, StorageError> {
    super::delete_as_asked(storage, info, key, &acknowledgement(marked)).await
}

/// Starts the start-up pass for `shared` on the current tokio runtime when its config asks
/// for acknowledgements (and there is a runtime). It ends once done, or when the API shuts
/// down or is dropped.
pub(crate) fn start(shared: &Arc<Shared>) {
    if Kubelet::of(&shared.config) != Kubelet::Acknowledges {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            "no tokio runtime at build: pod deletions pending from before are not acknowledged"
        );
        return;
    };
    tracing::info!(
        "pods' graceful deletions complete at once, as if their kubelets acknowledged them"
    );
    rt.spawn(pending_pass(Arc::downgrade(shared)));
}

/// Acknowledges every pod whose graceful deletion is pending, retrying after failures.
async fn pending_pass(weak: Weak<Shared>) {
    let mut wait = RETRY_FIRST;
    loop {
        let result = {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            if shared.shutting_down() {
                return;
            }
            acknowledge_pending(&shared).await
        };
        match result {
            Ok(0) => return,
            Ok(n) => {
                tracing::info!(
                    pods = n,
                    "acknowledged the graceful deletions pending at start, as their kubelets would"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?wait, "acknowledging the pod deletions pending at start failed");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// One pass over every pod-like resource: acknowledges each pod in a pending grace period;
/// how many it acknowledged. A failed pass is safe to redo: a pod it acknowledged no longer
/// waits.
async fn acknowledge_pending(shared: &Shared) -> Result<usize, StorageError> {
    let mut done = 0usize;
    let kinds = shared.kinds();
    let pods = kinds
        .iter()
        .filter(|r| r.info.graceful_deletion == GracefulDeletion::Pod && !is_namespaces(&r.info));
    for r in pods {
        let key = Key::collection(&r.info.storage_resource, None)?;
        let mut opts = ListOptions::recursive();
        opts.limit = Some(PAGE);
        loop {
            if shared.shutting_down() {
                return Ok(done);
            }
            let page = r.storage.list(&key, &opts).await?;
            for o in page.items.iter().filter(|o| waits_for_kubelet(&r.info, o)) {
                let k = Key::object(&r.info.storage_resource, o.namespace(), o.name())?;
                match acknowledge_once(r.storage.as_ref(), &r.info, &k, o).await {
                    Ok(_) => done += 1,
                    // Gone, or another pod by now: nothing to acknowledge.
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) => return Err(e),
                }
            }
            match page.continue_token {
                Some(c) if !page.items.is_empty() => opts.continue_token = Some(c),
                _ => break,
            }
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> KindSpec {
        KindSpec::new("", "v1", "pods", "Pod").graceful_deletion(GracefulDeletion::Pod)
    }

    fn obj(v: serde_json::Value) -> Object {
        Object::from_value(v, &listwatch_api::SelectableFields::none()).unwrap()
    }

    #[test]
    fn only_pods_in_a_pending_grace_period_wait_for_the_kubelet() {
        let graceful = obj(
            json!({"metadata":{"name":"p","deletionTimestamp":"2026-01-01T00:00:00Z","deletionGracePeriodSeconds":30}}),
        );
        let held = obj(
            json!({"metadata":{"name":"p","deletionTimestamp":"2026-01-01T00:00:00Z","deletionGracePeriodSeconds":0,"finalizers":["a/b"]}}),
        );
        let live = obj(json!({"metadata":{"name":"p"}}));
        let on = Kubelet::Acknowledges;
        let asked = DeleteRequest::default();
        assert!(on.acknowledges(&pods(), &asked, &graceful));
        assert!(!on.acknowledges(&pods(), &asked, &held));
        assert!(!on.acknowledges(&pods(), &asked, &live));
        let cm = KindSpec::new("", "v1", "configmaps", "ConfigMap");
        assert!(!on.acknowledges(&cm, &asked, &graceful));
        let dry = DeleteRequest {
            dry_run: true,
            ..DeleteRequest::default()
        };
        assert!(!on.acknowledges(&pods(), &dry, &graceful));
        assert!(!Kubelet::Absent.acknowledges(&pods(), &asked, &graceful));
        assert_eq!(Kubelet::of(&Config::default()), Kubelet::Absent);
    }
}
