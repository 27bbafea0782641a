//! The kubelet's acknowledgement of a pod's graceful deletion, done by the server itself for
//! test environments (the endpoints' `Config::acknowledge_pod_deletion`, off by default).
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
//!   carried out by the lifecycle's `delete_as_asked`: watchers see the client's mark (MODIFIED),
//!   the kubelet's mark with grace 0 (MODIFIED), then the removal (DELETED); a pod that
//!   finalizers hold is marked with grace 0 and kept, and goes with its last finalizer (an
//!   update then finds no grace period pending);
//! - only a pod with a grace period pending is acknowledged (nothing else waits for a
//!   kubelet); a dry run is never acknowledged (it wrote no mark);
//! - an acknowledgement that fails leaves the pod marked, as the client's DELETE did: the
//!   client's DELETE still succeeds, and the failure is logged (a later DELETE of the pod,
//!   or the next start, acknowledges it);
//! - the start-up pass (the endpoints' `kubelet_pass`) acknowledges through
//!   [`acknowledge_once`] too.

use listwatch_api::Object;
use listwatch_storage::{Error as StorageError, Key, Preconditions, Storage};

use super::{Deletion, State, is_namespaces};
use crate::options::DeleteRequest;
use listwatch_kinds::{GracefulDeletion, KindSpec};

/// Who ends a pod's graceful deletion on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kubelet {
    /// Nobody: a scheduled pod stays until a client's DELETE of grace 0 (upstream without
    /// a kubelet).
    Absent,
    /// The server, as the pod's kubelet would once its containers have stopped.
    Acknowledges,
}

impl Kubelet {
    /// The server acknowledges when `acknowledge` (the endpoints'
    /// `Config::acknowledge_pod_deletion`).
    pub fn of(acknowledge: bool) -> Self {
        if acknowledge {
            Self::Acknowledges
        } else {
            Self::Absent
        }
    }

    /// Whether `marked`, which a DELETE with `opts` of an `info` object left in storage,
    /// is to be acknowledged now.
    pub fn acknowledges(self, info: &KindSpec, opts: &DeleteRequest, marked: &Object) -> bool {
        self == Self::Acknowledges && !opts.dry_run && waits_for_kubelet(info, marked)
    }
}

/// Whether `o`, an object of `info`, is a pod in a pending graceful deletion.
pub fn waits_for_kubelet(info: &KindSpec, o: &Object) -> bool {
    info.graceful_deletion == GracefulDeletion::Pod && !is_namespaces(info) && {
        let s = State::of(o);
        s.deleting && s.grace_pending
    }
}

/// The kubelet's DELETE of `marked` (a pod in its grace period at `key`): grace 0, on
/// condition that it is still the same pod. What the client's DELETE answers: the pod's last
/// state, gone or held by finalizers; `marked` itself when the acknowledgement failed.
pub async fn acknowledge(
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
pub fn acknowledgement(marked: &Object) -> DeleteRequest {
    DeleteRequest {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: marked.uid().map(str::to_owned),
            resource_version: None,
        }),
        ..DeleteRequest::default()
    }
}

/// Sends [`acknowledgement`] of `marked` (the kubelet's DELETE) at `key`: what the pod is
/// then, gone or held by finalizers.
pub async fn acknowledge_once(
    storage: &dyn Storage,
    info: &KindSpec,
    key: &Key,
    marked: &Object,
) -> Result<Deletion, StorageError> {
    super::delete_as_asked(storage, info, key, &acknowledgement(marked)).await
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
        assert_eq!(Kubelet::of(false), Kubelet::Absent);
        assert_eq!(Kubelet::of(true), Kubelet::Acknowledges);
    }
}
