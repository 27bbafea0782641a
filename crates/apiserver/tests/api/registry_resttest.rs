//! The registry's per-kind conformance suite (`listwatch_registry::resttest`, upstream's
//! `resttest`) run for every built-in kind the binary serves and a sample custom resource,
//! each over a fresh embedded store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use listwatch_memstore::MemStore;
use listwatch_registry::resttest::{self, Case};
use listwatch_registry::{KindSpec, Store};
use serde_json::{Map, Value, json};

/// A valid object of `info`'s kind, without a name.
fn sample(info: &KindSpec) -> Map<String, Value> {
    let api_version = if info.group.is_empty() {
        info.version.clone()
    } else {
        format!("{}/{}", info.group, info.version)
    };
    // A label: a create records fields it sets (an object of nothing but a name has no
    // managedFields entry, as upstream).
    let mut v = json!({"apiVersion": api_version, "kind": info.kind,
                       "metadata": {"labels": {"resttest": "yes"}}});
    match info.kind.as_str() {
        "Pod" => v["spec"] = json!({"containers": [{"name": "c", "image": "i"}]}),
        "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet" => {
            v["spec"] = json!({
                "selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a"}},
                             "spec": {"containers": [{"name": "c", "image": "i"}]}}
            });
        }
        "ReplicationController" => {
            v["spec"] = json!({
                "selector": {"app": "a"},
                "template": {"metadata": {"labels": {"app": "a"}},
                             "spec": {"containers": [{"name": "c", "image": "i"}]}}
            });
        }
        // Upstream's `ValidateService`: a ClusterIP service needs ports.
        "Service" => v["spec"] = json!({"ports": [{"port": 80}]}),
        "PodTemplate" => {
            v["template"] = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        }
        // The kinds with rules of their own (`KindStrategy::validate`).
        "Job" => {
            v["spec"] = json!({"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "i"}]}}});
        }
        "CronJob" => {
            v["spec"] = json!({"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "i"}]}}}}});
        }
        // Upstream requires `maxReplicas` of at least 1 (and at least `minReplicas`).
        "HorizontalPodAutoscaler" => {
            v["spec"] = json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
                "maxReplicas": 1});
        }
        "CertificateSigningRequest" => {
            v["spec"] = json!({"request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIcU1JR1NBZ0VBTURBeEZ6QVZCZ05WQkFNTURuTjVjM1JsYlRwdWIyUmxPbTR4TVJVd0V3WURWUVFLREF4egplWE4wWlcwNmJtOWtaWE13V1RBVEJnY3Foa2pPUFFJQkJnZ3Foa2pPUFFNQkJ3TkNBQVRQRDhIWUU0cDI5V25LCmN1dDBBRi95QXo4WTA3MzZOTC9RMTRxN0xHMVkrMjhyaVVmL3V6UkVRSHlmTTRKU1JVSmxCR2s0UlhrS2QwOFoKNkVIdkh2eUdvQUF3Q2dZSUtvWkl6ajBFQXdJRFJ3QXdSQUlnU3pzQ0RZUVFyZDlBQzZQRHAxeXhVOGRZVlNKYgpFMFNXYXNZbUdEelJuS2NDSUgvUjlsdmp0Wm5NVTZudXJva2R6U3NrMHQxRlJsK2hVNzJ2QXVOL3Rzc1cKLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==", "signerName": "example.com/s", "usages": ["client auth"]});
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            v["roleRef"] = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"});
        }
        // events.k8s.io/v1 (upstream's ValidateEventCreate for the group: eventTime, the
        // reporting controller and instance, action, reason and type are required).
        "Event" if info.group == "events.k8s.io" => {
            v["regarding"] = json!({"kind": "Pod", "name": "p", "namespace": "default"});
            v["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
            v["reportingController"] = json!("example.com/resttest");
            v["reportingInstance"] = json!("resttest-1");
            v["action"] = json!("Testing");
            v["reason"] = json!("Tested");
            v["type"] = json!("Normal");
        }
        "Event" => {
            v["involvedObject"] = json!({"kind": "Pod", "name": "p", "namespace": "default"})
        }
        _ => {}
    }
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

async fn check(info: KindSpec) {
    let store = Store::new(Arc::new(info), Arc::new(MemStore::new()));
    let object = sample(store.info());
    let case = Case {
        store,
        namespace: Some("default".into()),
        object,
    };
    if let Err(f) = resttest::run(&case).await {
        panic!("{f}");
    }
}

#[tokio::test]
async fn every_built_in_kind_passes_the_registry_conformance_suite() {
    let kinds = listwatch_apiserver::builtin::resources();
    assert!(kinds.len() >= 10, "{} kinds", kinds.len());
    // A CRD's name must be `<plural>.<group>`, and an APIService's `<version>.<group>` of its
    // spec, which the suite's names (`resttest-a`, generated ones) cannot be: they have their
    // own tests (`crds_kube_rs`, clients' `crds` and `apiservices_secrets`).
    for info in kinds
        .into_iter()
        .filter(|k| k.kind != "CustomResourceDefinition" && k.kind != "APIService")
    {
        check(info).await;
    }
}

#[tokio::test]
async fn a_custom_resource_passes_the_registry_conformance_suite() {
    let mut info = KindSpec::new("example.com", "v1", "widgets", "Widget");
    info.custom_resource = true;
    info.storage_resource = "widgets.example.com".into();
    check(info).await;
}
