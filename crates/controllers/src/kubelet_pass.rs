//! The start-up pass of the server's kubelet acknowledgements (the endpoints'
//! `Config::acknowledge_pod_deletion`): once the API is built, every pod whose graceful
//! deletion was already pending is acknowledged through the registry's kubelet DELETE
//! ([`listwatch_registry::lifecycle::acknowledge_once`]), as the DELETEs the API serves
//! from then on are. The embedder runs it ([`spawn`]); it was the endpoints' until issue 27.
//!
//! Invariants: it keeps no state across pods beyond one page of a list; it retries a failed
//! pass after a backoff (at most 8 s apart), and stops once done, when the API
//! shuts down, or when its task is aborted.

use std::time::Duration;

use listwatch_endpoints::{Api, GracefulDeletion};
use listwatch_registry::lifecycle::{Kubelet, acknowledge_once, is_namespaces, waits_for_kubelet};
use listwatch_storage::{Error as StorageError, Key, ListOptions};

/// Objects listed per page by the start-up pass.
const PAGE: u64 = 500;
/// The first wait before the start-up pass is tried again after a failure; it doubles up
/// to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two tries of the start-up pass.
const RETRY_MAX: Duration = Duration::from_secs(8);

/// Starts the start-up pass over `api` on the current tokio runtime when `kubelet` is
/// [`Kubelet::Acknowledges`] (the API's own setting); `None` otherwise. The task ends once
/// done or when the API shuts down; the embedder aborts it when it stops.
pub fn spawn(api: &Api, kubelet: Kubelet) -> Option<tokio::task::JoinHandle<()>> {
    if kubelet != Kubelet::Acknowledges {
        return None;
    }
    tracing::info!(
        "pods' graceful deletions complete at once, as if their kubelets acknowledged them"
    );
    Some(tokio::spawn(pending_pass(api.clone())))
}

/// Acknowledges every pod whose graceful deletion is pending, retrying after failures.
async fn pending_pass(api: Api) {
    let mut wait = RETRY_FIRST;
    loop {
        if api.is_shutting_down() {
            return;
        }
        match acknowledge_pending(&api).await {
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
async fn acknowledge_pending(api: &Api) -> Result<usize, StorageError> {
    let mut done = 0usize;
    let kinds = api.resources();
    let pods = kinds
        .iter()
        .filter(|r| r.info.graceful_deletion == GracefulDeletion::Pod && !is_namespaces(&r.info));
    for r in pods {
        let key = Key::collection(&r.info.storage_resource, None)?;
        let mut opts = ListOptions::recursive();
        opts.limit = Some(PAGE);
        loop {
            if api.is_shutting_down() {
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
        let config = listwatch_endpoints::Config::default();
        assert_eq!(
            Kubelet::of(config.acknowledge_pod_deletion),
            Kubelet::Absent
        );
    }
}
