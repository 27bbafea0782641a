//! The mandatory API priority and fairness objects upstream's apiserver creates at start
//! (its APF configuration-producing controller): the PriorityLevelConfigurations and
//! FlowSchemas `exempt` and `catch-all`, with upstream's specs and its
//! `apf.kubernetes.io/autoupdate-spec: "true"` annotation. Stored objects only: this
//! server's own fairness (`--max-requests-inflight`, docs/endpoints.md) does not read them.
//!
//! Runs as a singleton, a round at once and then every [`INTERVAL`]. Invariant: a round
//! only creates what is missing (a deleted one comes back, as upstream re-creates the
//! mandatory objects); an existing object, changed or not, is left as it is (upstream
//! resets a changed spec while the annotation says `true`; not done here).

use std::time::Duration;

use listwatch_endpoints::Resource;
use serde_json::{Value, json};

use crate::local::{APISERVER_MANAGER, ensure, find};

/// How often the objects are checked.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// The longest one round may take.
const ROUND_DEADLINE: Duration = Duration::from_secs(30);

const GROUP: &str = "flowcontrol.apiserver.k8s.io";

fn meta(name: &str) -> Value {
    json!({"name": name, "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}})
}

/// Every request, resource or not, in every namespace and at cluster scope.
fn everything() -> (Value, Value) {
    (
        json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
            "clusterScope": true, "namespaces": ["*"]}]),
        json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}]),
    )
}

/// The mandatory priority levels, as upstream defines them.
pub fn priority_levels() -> Vec<Value> {
    vec![
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": meta("exempt"),
            "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": meta("catch-all"),
            "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5,
                "lendablePercent": 0, "limitResponse": {"type": "Reject"}}}}),
    ]
}

/// The mandatory flow schemas, as upstream defines them.
pub fn flow_schemas() -> Vec<Value> {
    let (resources, non_resources) = everything();
    let group = |g: &str| json!({"kind": "Group", "group": {"name": g}});
    vec![
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": meta("exempt"),
            "spec": {"matchingPrecedence": 1, "priorityLevelConfiguration": {"name": "exempt"},
                "rules": [{"subjects": [group("system:masters")],
                    "resourceRules": resources, "nonResourceRules": non_resources}]}}),
        json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": meta("catch-all"),
            "spec": {"matchingPrecedence": 10000, "priorityLevelConfiguration": {"name": "catch-all"},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [group("system:unauthenticated"), group("system:authenticated")],
                    "resourceRules": resources, "nonResourceRules": non_resources}]}}),
    ]
}

/// One round: whichever mandatory object is missing, created.
pub async fn reconcile(resources: &[Resource]) -> Result<(), String> {
    for (plural, objects) in [
        ("prioritylevelconfigurations", priority_levels()),
        ("flowschemas", flow_schemas()),
    ] {
        let Some(res) = find(resources, GROUP, plural) else {
            continue;
        };
        for obj in objects {
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            // No fields to compare: created when missing, else left alone.
            ensure(res, "", &name, &obj, &[], APISERVER_MANAGER).await?;
        }
    }
    Ok(())
}

/// Keeps the mandatory objects in place: a round at once, then every [`INTERVAL`]
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
                tracing::warn!(error = %e, "mandatory flow control objects: reconciling failed; retrying");
                Duration::from_secs(1)
            }
        };
        tokio::time::sleep(wait).await;
    }
}
