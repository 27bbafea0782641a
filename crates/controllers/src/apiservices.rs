//! The local API services: one `APIService` per group version this server serves, as
//! kube-apiserver's autoregister controller keeps them (named `<version>.<group>`, `v1.`
//! for the core group; `spec.service` null, i.e. served here; the group and version
//! priorities of upstream's table; built-in ones labelled
//! `kube-aggregator.kubernetes.io/automanaged: onstart`). A CRD's group version gets one
//! too, as upstream's crdregistration controller does (priorities 1000/100, label
//! `automanaged: true`), and loses it when no CRD serves it any more. The `Available`
//! condition is the API service strategy's (listwatch-kinds).
//!
//! Runs as a singleton, a round at once and then every [`INTERVAL`]. Invariants: each round
//! reads fresh and writes only what differs (a missing service created, a changed spec
//! reset; a user's own API services, without the label, are never touched); a built-in
//! group version not in upstream's table gets no API service, as upstream skips it.

use std::collections::BTreeSet;
use std::time::Duration;

use listwatch_endpoints::Resource;
use serde_json::{Value, json};

use crate::local::{APISERVER_MANAGER, ensure, find};

/// How often the API services are checked.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// The longest one round may take.
const ROUND_DEADLINE: Duration = Duration::from_secs(30);

/// The label upstream's autoregister controller marks its API services with.
pub const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// `(group, version) → (groupPriorityMinimum, versionPriority)` for built-in group
/// versions, upstream's table (kube-apiserver's default API service priorities).
const PRIORITIES: &[(&str, &str, u32, u32)] = &[
    ("", "v1", 18000, 1),
    ("apiregistration.k8s.io", "v1", 18000, 15),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v1", 17500, 15),
    ("autoscaling", "v2", 17500, 30),
    ("batch", "v1", 17400, 15),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("networking.k8s.io", "v1", 17200, 15),
    ("policy", "v1", 17100, 15),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("node.k8s.io", "v1", 16300, 15),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
];

/// The name of `group`/`version`'s API service.
pub fn name(group: &str, version: &str) -> String {
    format!("{version}.{group}")
}

/// The API service upstream registers for `group`/`version`; `custom` for a CRD's.
/// `None` for a built-in group version upstream's table does not list.
pub fn desired(group: &str, version: &str, custom: bool) -> Option<Value> {
    let (managed, gp, vp) = if custom {
        ("true", 1000, 100)
    } else {
        let (_, _, gp, vp) = PRIORITIES
            .iter()
            .find(|(g, v, _, _)| *g == group && *v == version)?;
        ("onstart", *gp, *vp)
    };
    Some(json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name(group, version), "labels": {AUTOMANAGED: managed}},
        "spec": {"group": group, "version": version, "service": null,
            "groupPriorityMinimum": gp, "versionPriority": vp},
    }))
}

/// The group versions `resources` serve, each with whether a CRD serves it.
fn served(resources: &[Resource]) -> BTreeSet<(String, String, bool)> {
    let mut out = BTreeSet::new();
    for r in resources {
        let custom = r.info.custom_resource;
        let gv = (r.info.group.clone(), r.info.version.clone());
        // A group version served by both kinds counts as built-in.
        if custom && out.contains(&(gv.0.clone(), gv.1.clone(), false)) {
            continue;
        }
        if !custom {
            out.remove(&(gv.0.clone(), gv.1.clone(), true));
        }
        out.insert((gv.0, gv.1, custom));
    }
    out
}

/// One round: every served group version's API service in place; a CRD group version's
/// gone when nothing serves it.
pub async fn reconcile(resources: &[Resource]) -> Result<(), String> {
    let Some(apisvc) = find(resources, "apiregistration.k8s.io", "apiservices") else {
        return Ok(());
    };
    let served = served(resources);
    let mut names = BTreeSet::new();
    for (group, version, custom) in &served {
        let Some(want) = desired(group, version, *custom) else {
            continue;
        };
        let n = name(group, version);
        ensure(apisvc, "", &n, &want, &["spec"], APISERVER_MANAGER).await?;
        names.insert(n);
    }
    // A CRD's API service whose group version is no longer served goes.
    let store = listwatch_registry::Store::new(
        std::sync::Arc::clone(&apisvc.info),
        std::sync::Arc::clone(&apisvc.storage),
    );
    let current = store
        .list(None, &listwatch_storage::ListOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    for obj in current.items {
        let v = obj.to_value().map_err(|e| e.to_string())?;
        let Some(n) = v.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        let ours = v
            .pointer("/metadata/labels")
            .and_then(|l| l.get(AUTOMANAGED))
            == Some(&json!("true"));
        if ours && !names.contains(n) {
            let opts = listwatch_registry::options::DeleteRequest::default();
            match store.delete(None, n, &opts).await {
                Ok(_) => tracing::info!(apiservice = n, "CRD group version gone: deleted"),
                Err(listwatch_registry::StoreError::Storage(e)) if e.is_not_found() => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    Ok(())
}

/// Keeps the local API services in place: a round at once, then every [`INTERVAL`]
/// (sooner, after a second, when a round failed); marks `done` (its post-start hook) after
/// the first round that succeeded. Runs until dropped.
pub async fn run(api: listwatch_endpoints::Api, done: Option<crate::poststart::Done>) {
    loop {
        let resources = api.resources();
        let round = tokio::time::timeout(ROUND_DEADLINE, reconcile(&resources)).await;
        let wait = match round.unwrap_or_else(|_| Err("the round timed out".into())) {
            Ok(()) => {
                if let Some(d) = &done {
                    d.mark();
                }
                INTERVAL
            }
            Err(e) => {
                tracing::warn!(error = %e, "local API services: reconciling failed; retrying");
                Duration::from_secs(1)
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_take_upstream_s_priorities_and_crds_theirs() {
        let core = desired("", "v1", false).unwrap_or_default();
        assert_eq!(core["metadata"]["name"], "v1.");
        assert_eq!(core["spec"]["groupPriorityMinimum"], 18000);
        assert_eq!(core["spec"]["versionPriority"], 1);
        assert!(core["spec"]["service"].is_null());
        let apps = desired("apps", "v1", false).unwrap_or_default();
        assert_eq!(apps["metadata"]["name"], "v1.apps");
        assert_eq!(apps["metadata"]["labels"][AUTOMANAGED], "onstart");
        assert!(desired("example.com", "v1", false).is_none());
        let crd = desired("example.com", "v1", true).unwrap_or_default();
        assert_eq!(crd["spec"]["groupPriorityMinimum"], 1000);
        assert_eq!(crd["metadata"]["labels"][AUTOMANAGED], "true");
    }
}
