//! Shared fixtures for listwatch's benchmarks: realistic objects and stores to measure on.
//!
//! Benchmarks are not tests: nothing here asserts a timing. `cargo xtask bench` runs them and
//! docs/benchmarks.md records the results with the command that produced them.

use listwatch_api::{Object, SelectableFields};

pub mod fanout;

/// The selectable fields of pods used across benchmarks.
pub fn pod_fields() -> SelectableFields {
    SelectableFields::new(["spec.nodeName", "status.phase"])
}

/// A pod of roughly realistic shape and size (~2 KB of JSON), on `node`.
pub fn pod(namespace: &str, name: &str, node: &str) -> Object {
    let v = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": format!("{namespace}-{name}-0000-0000-000000000000"),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d4b9c8f5"},
            "annotations": {"kubernetes.io/config.seen": "2026-01-01T00:00:00.000000000Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f5",
                "uid": "00000000-0000-0000-0000-000000000001", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "default",
            "containers": [{
                "name": "web", "image": "registry.example/web:1.27.3",
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "production"}, {"name": "LOG", "value": "info"}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"
            }],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "hostIP": "192.0.2.1",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}],
            "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0, "image": "registry.example/web:1.27.3",
                "state": {"running": {"startedAt": "2026-01-01T00:00:04Z"}}}]
        }
    });
    // The literal above is a valid object; a failure here is a bug in this fixture.
    match Object::from_value(v, &pod_fields()) {
        Ok(o) => o,
        Err(e) => panic!("benchmark fixture pod is invalid: {e}"),
    }
}
