//! What every namespace gets, as upstream's kube-controller-manager gives it: the `default`
//! ServiceAccount (pkg/controller/serviceaccount, `ServiceAccountsController`) and, where
//! the server has a CA, the `kube-root-ca.crt` ConfigMap holding it
//! (pkg/controller/certificates/rootcacertpublisher). Both are created in each active
//! namespace, re-created when deleted, and the ConfigMap's data and annotation reset when
//! changed; terminating namespaces are left alone.
//!
//! Event driven over in-process informers (namespaces, serviceaccounts, configmaps): a
//! namespace is queued when it appears or changes, when its `default` ServiceAccount is
//! deleted, when its `kube-root-ca.crt` is changed or deleted; a namespace whose round
//! failed is retried after [`RETRY`]. Runs as a singleton.
//!
//! Invariants: each round reads fresh and writes only what is missing or differs (a create
//! that finds the object is no error), so a cut round and a successor redoing it are
//! harmless; the queue holds each namespace at most once.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use listwatch_api::Object;
use listwatch_endpoints::Resource;
use listwatch_runtime::Delta;
use serde_json::{Value, json};

use crate::local::{ensure, find, informer};

/// How long a failed namespace waits before its next try.
pub const RETRY: Duration = Duration::from_secs(1);

/// The ConfigMap's name.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// Upstream's description annotation of the ConfigMap.
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

/// The managers upstream's controllers write as (their clients' user agents).
const SA_MANAGER: &str = "kube-controller-manager";

fn active(ns: &Object) -> bool {
    let Ok(v) = ns.to_value() else {
        return false;
    };
    v.pointer("/metadata/deletionTimestamp").is_none()
        && v.pointer("/status/phase").and_then(Value::as_str) != Some("Terminating")
}

/// The ConfigMap as upstream's publisher writes it.
pub fn root_ca_configmap(namespace: &str, ca_pem: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": ROOT_CA_CONFIGMAP, "namespace": namespace,
            "annotations": {"kubernetes.io/description": DESCRIPTION}},
        "data": {"ca.crt": ca_pem},
    })
}

/// One namespace's round.
async fn sync(
    namespaces: &Resource,
    accounts: Option<&Resource>,
    configmaps: Option<&Resource>,
    ca: Option<&str>,
    ns: &str,
) -> Result<(), String> {
    let current = listwatch_registry::Store::new(
        std::sync::Arc::clone(&namespaces.info),
        std::sync::Arc::clone(&namespaces.storage),
    )
    .get(None, ns)
    .await
    .map_err(|e| e.to_string())?;
    if !current.as_ref().is_some_and(active) {
        return Ok(());
    }
    if let Some(sa) = accounts {
        let desired = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": ns}});
        // Created when missing; an existing one is the user's to change.
        ensure(sa, ns, "default", &desired, &[], SA_MANAGER).await?;
    }
    if let (Some(cm), Some(ca)) = (configmaps, ca) {
        let desired = root_ca_configmap(ns, ca);
        // The data reset as upstream; the annotation is set on create.
        ensure(cm, ns, ROOT_CA_CONFIGMAP, &desired, &["data"], SA_MANAGER).await?;
    }
    Ok(())
}

/// Runs the controller until dropped. `ca_pem`: the CA bundle to publish, if the server
/// has one. `done` (its post-start hook) is marked once every namespace of the first list
/// has its defaults (or at once when namespaces are not served).
pub async fn run(
    api: listwatch_endpoints::Api,
    ca_pem: Option<String>,
    done: Option<crate::poststart::Done>,
) {
    let resources = api.resources();
    let Some(namespaces) = find(&resources, "", "namespaces").cloned() else {
        if let Some(d) = &done {
            d.mark();
        }
        return;
    };
    let accounts = find(&resources, "", "serviceaccounts").cloned();
    let configmaps = find(&resources, "", "configmaps")
        .cloned()
        .filter(|_| ca_pem.is_some());
    let Some(ns_informer) = informer(&namespaces) else {
        return;
    };
    let mut ns_events = ns_informer.subscribe();
    let sa_informer = accounts.as_ref().and_then(informer);
    let mut sa_events = sa_informer.as_ref().map(|i| i.subscribe());
    let cm_informer = configmaps.as_ref().and_then(informer);
    let mut cm_events = cm_informer.as_ref().map(|i| i.subscribe());
    let mut queue: BTreeSet<String> = BTreeSet::new();
    // The first pass: every namespace of the first list (its events may still be on the
    // way; a namespace queued twice is synced twice, harmlessly).
    let mut first_pass = done;
    if first_pass.is_some() {
        match ns_informer.wait_until_synced().await {
            Ok(()) => queue.extend(
                ns_informer
                    .store()
                    .list()
                    .iter()
                    .map(|ns| ns.name().to_owned()),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "namespace defaults: the namespaces never listed");
                return;
            }
        }
    }
    let mut failed: BTreeSet<String> = BTreeSet::new();
    let mut retry = tokio::time::interval(RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Everything queued is handled before waiting again.
        while let Some(ns) = queue.pop_first() {
            if let Err(e) = sync(
                &namespaces,
                accounts.as_ref(),
                configmaps.as_ref(),
                ca_pem.as_deref(),
                &ns,
            )
            .await
            {
                tracing::warn!(namespace = %ns, error = %e, "namespace defaults: retrying");
                failed.insert(ns);
            }
        }
        if failed.is_empty()
            && let Some(d) = first_pass.take()
        {
            d.mark();
        }
        let sa_next = async {
            match sa_events.as_mut() {
                Some(s) => s.next().await,
                None => std::future::pending().await,
            }
        };
        let cm_next = async {
            match cm_events.as_mut() {
                Some(s) => s.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            d = ns_events.next() => match d {
                Some(Delta::Added { object, .. } | Delta::Updated { new: object, .. } | Delta::Sync(object)) => {
                    queue.insert(object.name().to_owned());
                }
                Some(Delta::Deleted { .. }) => {}
                None => return,
            },
            d = sa_next => match d {
                Some(Delta::Deleted { object, .. }) if object.name() == "default" => {
                    queue.extend(object.namespace().map(str::to_owned));
                }
                Some(_) => {}
                None => return,
            },
            d = cm_next => match d {
                Some(Delta::Deleted { object, .. } | Delta::Updated { new: object, .. })
                    if object.name() == ROOT_CA_CONFIGMAP =>
                {
                    queue.extend(object.namespace().map(str::to_owned));
                }
                Some(_) => {}
                None => return,
            },
            _ = retry.tick(), if !failed.is_empty() => {
                queue.append(&mut failed);
            }
        }
    }
}
