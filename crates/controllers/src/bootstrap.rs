//! The namespaces upstream's control plane creates at start (`default`, `kube-system`,
//! `kube-public`, `kube-node-lease`), created once the storage answers, and kept: the
//! system-namespaces loop ([`ensure_system_namespaces`], a singleton) re-creates any that
//! went, as upstream's system-namespaces controller does every minute. After them, at start,
//! the system priority classes ([`crate::priority::bootstrap_system_classes`]).
//!
//! Invariants: an existing namespace is left as it is; failures that pass by themselves
//! (the storage unreachable, slow or shedding load) are retried with a bounded exponential
//! backoff while the server already listens (`/readyz` failing with the reason); any other
//! failure is returned (at start) or logged (by the loop, which tries again next period).

use std::time::Duration;

use std::sync::Arc;

use listwatch_registry::{CreateOptions, Store, StoreError};
use serde_json::{Value, json};

// The name the bootstrap had in the server crate, kept so that its body is unchanged.
use crate::Error as ServerError;

/// Creates the namespaces upstream's control plane creates at start, unless they exist:
/// `default` (its bootstrap controller), `kube-system`, `kube-public` and `kube-node-lease`
/// (its system-namespaces controller).
async fn bootstrap_namespaces(api: &listwatch_endpoints::Api) -> Result<(), ServerError> {
    let Some(ns) = api
        .resources()
        .iter()
        .find(|r| r.info.group.is_empty() && r.info.plural == "namespaces")
        .cloned()
    else {
        return Ok(());
    };
    let store = Store::new(Arc::clone(&ns.info), Arc::clone(&ns.storage));
    let opts = CreateOptions::by(listwatch_endpoints::SERVER_MANAGER);
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let bootstrap = |source| ServerError::Bootstrap {
            name: name.to_owned(),
            source,
        };
        let Value::Object(obj) = json!({"metadata": {"name": name}}) else {
            continue;
        };
        match store.create(None, obj, &opts).await {
            Ok(_) => tracing::info!(namespace = name, "created"),
            Err(e) if e.is_already_exists() => {}
            Err(StoreError::Storage(e)) => return Err(bootstrap(e)),
            Err(StoreError::Rejected(e)) => {
                return Err(bootstrap(listwatch_storage::Error::internal(e.to_string())));
            }
        }
    }
    Ok(())
}

/// The system-namespaces loop: every `every`, creates whichever of the built-in namespaces
/// is missing (an existing one, even terminating, is left alone, as upstream's controller
/// does). Runs until dropped (as a singleton: while this replica leads).
pub async fn ensure_system_namespaces(api: listwatch_endpoints::Api, every: Duration) {
    // The first round one period after this replica began to lead: the start-up bootstrap
    // (or the previous leader) has just made them.
    let every = every.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = bootstrap_namespaces(&api).await {
            tracing::warn!(error = %e, "system namespaces: ensuring failed; trying again next period");
        }
    }
}

/// The first and the longest wait between two attempts of [`bootstrap_until_done`].
const BOOTSTRAP_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(5));

/// Storage failures that pass by themselves: the backend not reachable yet (etcd starting
/// after the server, a member without a leader), slow or shedding load.
fn passes(e: &listwatch_storage::Error) -> bool {
    use listwatch_storage::Error as E;
    matches!(
        e,
        E::Unreachable { .. } | E::Timeout { .. } | E::NotReady { .. } | E::TooManyRequests { .. }
    )
}

/// Whether a bootstrap failure passes by itself ([`passes`]).
fn bootstrap_passes(e: &ServerError) -> bool {
    match e {
        ServerError::Bootstrap { source, .. }
        | ServerError::BootstrapPriorityClass { source, .. } => passes(source),
    }
}

/// Creates the built-in namespaces and then the system priority classes
/// ([`crate::priority::bootstrap_system_classes`]), retrying with exponential backoff (100 ms doubling to
/// 5 s) for as long as the storage fails in a way that passes (upstream's apiserver also
/// keeps retrying etcd instead of exiting). Meanwhile the server already listens: `/readyz`
/// fails and `/livez` answers 200, both with the reason. Any other failure is returned.
pub async fn bootstrap_until_done(api: &listwatch_endpoints::Api) -> Result<(), ServerError> {
    let (mut delay, max) = BOOTSTRAP_BACKOFF;
    let mut attempts = 0u64;
    loop {
        let done = match bootstrap_namespaces(api).await {
            Ok(()) => crate::priority::bootstrap_system_classes(api).await,
            Err(e) => Err(e),
        };
        match done {
            Ok(()) => {
                if attempts > 0 {
                    tracing::info!(attempts, "the storage answers: default namespaces in place");
                }
                api.set_waiting_for(None);
                return Ok(());
            }
            Err(
                e @ (ServerError::Bootstrap { .. } | ServerError::BootstrapPriorityClass { .. }),
            ) if bootstrap_passes(&e) => {
                attempts += 1;
                let reason = format!("the storage: {e}");
                // Every attempt at first, then every tenth: a long outage must not flood
                // the log.
                if attempts <= 3 || attempts.is_multiple_of(10) {
                    tracing::warn!(attempts, retry_in = ?delay, %reason, "waiting for the storage");
                }
                api.set_waiting_for(Some(reason));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(max);
            }
            Err(e) => {
                api.set_waiting_for(Some(e.to_string()));
                return Err(e);
            }
        }
    }
}
