//! The built-in resources: a small core of Kubernetes' own, with the selectable fields,
//! short names and printer columns upstream gives them.

use crate::strategy::{
    prepare_deployment, prepare_namespace, prepare_pod, prepare_secret, prepare_service,
};
use listwatch_endpoints::{
    GcPolicy, Generation, GracefulDeletion, KindSpec, NameValidation, Printer, PrinterColumn,
    ScaleSubresource, StatusUpdate,
};

/// Pod fields a field selector may name (upstream's `pod.ToSelectableFields`;
/// `spec.hostNetwork` is declared with its default in [`resources`]).
pub const POD_FIELDS: [&str; 7] = [
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// Event fields a field selector may name (upstream's `event.ToSelectableFields`, whose
/// `source` — declared with how it is read in [`resources`] — is `source.component`, else
/// `reportingComponent`; `source.component` is accepted too).
pub const EVENT_FIELDS: [&str; 11] = [
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source.component",
    "type",
];

/// An `rbac.authorization.k8s.io/v1` resource (served through the same cacher pipeline as
/// every other; the RBAC authorizer reads them through in-process informers).
fn rbac(plural: &str, kind: &str, namespaced: bool) -> KindSpec {
    KindSpec::new("rbac.authorization.k8s.io", "v1", plural, kind)
        .generation(Generation::None)
        .namespaced(namespaced)
        .name_validation(NameValidation::PathSegment)
        .allow_create_on_update(true)
}

/// Every built-in resource, namespaces first.
///
/// A DELETE that removes an object answers with the object for namespaces, pods, services
/// and service accounts, whose upstream storage sets `ReturnDeletedObject`
/// (pkg/registry/core/{namespace,pod,service,serviceaccount}/storage/storage.go), and with a
/// `Success` Status for the others.
///
/// `metadata.generation` is set and bumped only for pods (spec changes,
/// pkg/registry/core/pod/strategy.go) and deployments (spec or annotation changes,
/// pkg/registry/apps/deployment/strategy.go); the other strategies here leave it unset.
/// A `/status` write keeps the request's metadata but `ownerReferences` for pods
/// (`podStatusStrategy.PrepareForUpdate`), but the labels for deployments
/// (`deploymentStatusStrategy`), all of it for services (`serviceStatusStrategy`, which
/// resets only the spec), namespaces and nodes (`namespaceStatusStrategy`,
/// `nodeStatusStrategy`: the spec only); other kinds keep the stored metadata.
///
/// Selectable fields read as upstream's `*ToSelectableFields` read them: a field the v1
/// defaulting always fills (pkg/apis/core/v1/defaults.go: a namespace's `status.phase`, a
/// secret's `type`, a service's `spec.type`, a pod's `spec.restartPolicy` and
/// `spec.schedulerName`) reads as its default when a stored object lacks it, and a `bool`
/// read with `strconv.FormatBool` (a node's `spec.unschedulable`, a pod's
/// `spec.hostNetwork`) reads as `"false"` ([`KindSpec::field_default`]).
///
/// A PUT of a missing object creates it where
/// upstream's strategy allows create-on-update: services, endpoints, events, leases and
/// the RBAC kinds (not namespaces, nodes, pods, config maps, secrets, service accounts or
/// deployments).
pub fn resources() -> Vec<KindSpec> {
    let col = PrinterColumn::new;
    vec![
        KindSpec::new("", "v1", "namespaces", "Namespace")
            .namespaced(false)
            .short_names(["ns"])
            .name_validation(NameValidation::Label)
            .selectable_fields(["status.phase"])
            .field_default("status.phase", "Active")
            .generation(Generation::None)
            .return_deleted_object(true)
            .status_subresource(true)
            // namespaceStatusStrategy.PrepareForUpdate resets only the spec.
            .status_update(StatusUpdate::StatusAndMetadataExcept(&[]))
            .finalize_subresource(true)
            .printer(Printer::Columns(vec![col(
                "Status",
                "string",
                ".status.phase",
            )]))
            .prepare_for_create(prepare_namespace),
        KindSpec::new("", "v1", "nodes", "Node")
            .namespaced(false)
            .short_names(["no"])
            .selectable_fields(["spec.unschedulable"])
            .field_default("spec.unschedulable", "false")
            .generation(Generation::None)
            .status_subresource(true)
            // nodeStatusStrategy.PrepareForUpdate resets only the spec.
            .status_update(StatusUpdate::StatusAndMetadataExcept(&[]))
            .printer(Printer::Columns(vec![
                col(
                    "Ready",
                    "string",
                    ".status.conditions[?(@.type==\"Ready\")].status",
                ),
                col("Version", "string", ".status.nodeInfo.kubeletVersion"),
                col(
                    "Internal-IP",
                    "string",
                    ".status.addresses[?(@.type==\"InternalIP\")].address",
                )
                .wide(),
            ])),
        KindSpec::new("", "v1", "pods", "Pod")
            .short_names(["po"])
            .categories(["all"])
            .selectable_fields(POD_FIELDS)
            .field_default("spec.restartPolicy", "Always")
            .field_default("spec.schedulerName", "default-scheduler")
            .field_default("spec.hostNetwork", "false")
            .trigger_field("spec.nodeName")
            .status_subresource(true)
            .status_update(StatusUpdate::StatusAndMetadataExcept(&["ownerReferences"]))
            .printer(Printer::Pod)
            .graceful_deletion(GracefulDeletion::Pod)
            .return_deleted_object(true)
            .prepare_for_create(prepare_pod),
        KindSpec::new("", "v1", "configmaps", "ConfigMap")
            .short_names(["cm"])
            .generation(Generation::None),
        KindSpec::new("", "v1", "secrets", "Secret")
            .selectable_fields(["type"])
            .field_default("type", "Opaque")
            .generation(Generation::None)
            .printer(Printer::Columns(vec![col("Type", "string", ".type")]))
            .prepare_for_create(prepare_secret),
        KindSpec::new("", "v1", "services", "Service")
            .short_names(["svc"])
            .categories(["all"])
            .name_validation(NameValidation::Label1035)
            .selectable_fields(["spec.clusterIP", "spec.type"])
            .field_default("spec.type", "ClusterIP")
            .generation(Generation::None)
            .status_update(StatusUpdate::StatusAndMetadataExcept(&[]))
            .status_subresource(true)
            .printer(Printer::Columns(vec![
                col("Type", "string", ".spec.type"),
                col("Cluster-IP", "string", ".spec.clusterIP"),
                col("Selector", "string", ".spec.selector").wide(),
            ]))
            .allow_create_on_update(true)
            .return_deleted_object(true)
            .prepare_for_create(prepare_service),
        KindSpec::new("", "v1", "endpoints", "Endpoints")
            .short_names(["ep"])
            .singular("endpoints")
            .generation(Generation::None)
            .allow_create_on_update(true),
        KindSpec::new("", "v1", "events", "Event")
            .short_names(["ev"])
            .selectable_fields(EVENT_FIELDS)
            .field_reads("source", &["source.component", "reportingComponent"])
            .generation(Generation::None)
            .name_validation(NameValidation::PathSegment)
            .allow_create_on_update(true)
            // Upstream: events take no part in garbage collection.
            .gc_policy(GcPolicy::Unsupported)
            .printer(Printer::Columns(vec![
                col("Type", "string", ".type"),
                col("Reason", "string", ".reason"),
                col("Object", "string", ".involvedObject.name"),
                col("Message", "string", ".message"),
            ])),
        KindSpec::new("", "v1", "serviceaccounts", "ServiceAccount")
            .short_names(["sa"])
            .generation(Generation::None)
            .return_deleted_object(true),
        KindSpec::new("coordination.k8s.io", "v1", "leases", "Lease")
            .generation(Generation::None)
            .allow_create_on_update(true)
            .printer(Printer::Columns(vec![col(
                "Holder",
                "string",
                ".spec.holderIdentity",
            )])),
        rbac("roles", "Role", true),
        rbac("rolebindings", "RoleBinding", true),
        rbac("clusterroles", "ClusterRole", false),
        rbac("clusterrolebindings", "ClusterRoleBinding", false),
        KindSpec::new("apps", "v1", "deployments", "Deployment")
            .short_names(["deploy"])
            .categories(["all"])
            .status_subresource(true)
            .scale(ScaleSubresource::replicas().label_selector("spec.selector"))
            .generation(Generation::SpecAndAnnotations)
            .status_update(StatusUpdate::StatusAndMetadataExcept(&["labels"]))
            .printer(Printer::Deployment)
            .prepare_for_create(prepare_deployment),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_trigger_on_a_selectable_node_name() {
        let all = resources();
        let pods = all.iter().find(|r| r.plural == "pods").unwrap();
        assert_eq!(pods.trigger_field.as_deref(), Some("spec.nodeName"));
        assert!(pods.selectable_fields.supports("spec.nodeName"));
        assert!(pods.selectable_fields.supports("status.phase"));
        assert_eq!(all[0].plural, "namespaces");
    }

    #[test]
    fn deleted_objects_and_generations_follow_upstreams_storage_and_strategies() {
        let all = resources();
        let returned: Vec<&str> = all
            .iter()
            .filter(|r| r.return_deleted_object)
            .map(|r| r.plural.as_str())
            .collect();
        assert_eq!(
            returned,
            ["namespaces", "pods", "services", "serviceaccounts"]
        );
        let generation: Vec<(&str, Generation)> = all
            .iter()
            .filter(|r| r.generation != Generation::None)
            .map(|r| (r.plural.as_str(), r.generation))
            .collect();
        assert_eq!(
            generation,
            [
                ("pods", Generation::Spec),
                ("deployments", Generation::SpecAndAnnotations)
            ]
        );
    }

    #[test]
    fn create_on_update_follows_upstreams_strategies() {
        let allowed: Vec<String> = resources()
            .into_iter()
            .filter(|r| r.allow_create_on_update)
            .map(|r| r.qualified_resource())
            .collect();
        assert_eq!(
            allowed,
            [
                "services",
                "endpoints",
                "events",
                "leases.coordination.k8s.io",
                "roles.rbac.authorization.k8s.io",
                "rolebindings.rbac.authorization.k8s.io",
                "clusterroles.rbac.authorization.k8s.io",
                "clusterrolebindings.rbac.authorization.k8s.io",
            ]
        );
    }
}
