//! The start-up pass of the server's kubelet acknowledgements
//! ([`Config::acknowledge_pod_deletion`](crate::Config)): when the API is built, every pod
//! whose graceful deletion was already pending is acknowledged through the registry's
//! kubelet DELETE ([`listwatch_registry::lifecycle::acknowledge_once`]).
//!
//! Invariants: it keeps no state across pods beyond one page of a list; it retries a failed
//! pass after a backoff, and stops when the API shuts down or is dropped.

use std::sync::{Arc, Weak};
use std::time::Duration;

use listwatch_registry::lifecycle::{Kubelet, acknowledge_once, is_namespaces, waits_for_kubelet};
use listwatch_storage::{Error as StorageError, Key, ListOptions};

use crate::Shared;
use crate::resource::GracefulDeletion;

/// Objects listed per page by the start-up pass.
const PAGE: u64 = 500;
/// The first wait before the start-up pass is tried again after a failure; it doubles up
/// to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two tries of the start-up pass.
const RETRY_MAX: Duration = Duration::from_secs(8);

/// Starts the start-up pass for `shared` on the current tokio runtime when its config asks
/// for acknowledgements (and there is a runtime). It ends once done, or when the API shuts
/// down or is dropped.
pub(crate) fn start(shared: &Arc<Shared>) {
    if Kubelet::of(shared.config.acknowledge_pod_deletion) != Kubelet::Acknowledges {
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

    #[test]
    fn the_default_config_leaves_pods_to_their_kubelets() {
        let config = crate::Config::default();
        assert_eq!(
            Kubelet::of(config.acknowledge_pod_deletion),
            Kubelet::Absent
        );
    }
}
