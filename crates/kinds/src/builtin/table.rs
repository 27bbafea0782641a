//! The derived metadata of the storage-only built-in kinds: [`ROWS`] (group, version, kind,
//! plural, scope) is generated from the `k8s-openapi` crate's `Resource` constants
//! (`API_VERSION`, `KIND`, `URL_PATH_SEGMENT`, `Scope`), and [`NAMES`] beside it holds what
//! neither k8s-openapi nor the OpenAPI definitions carry — short names, categories and
//! subresources — as upstream's `storage.go` files declare them (`ShortNames()`,
//! `Categories()`, the `StatusREST`/`ScaleREST`/`ApprovalREST` they install).
//!
//! Invariants: every row matches k8s-openapi's type of the same kind (the crate's test
//! `tests/derived_table.rs` compares each one; `APIService`, which k8s-openapi does not
//! define, is checked against the vendored upstream OpenAPI definitions instead), no
//! `(group, version, plural)` appears twice, and every [`NAMES`] entry names a row. The
//! rows are data only: the code a kind needs (defaults, printing) is in its own file under
//! its group, and [`super::storage`] joins the two.

/// One kind as k8s-openapi describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindRow {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// The URL path segment (plural).
    pub plural: &'static str,
    /// Namespace-scoped.
    pub namespaced: bool,
}

const fn row(
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
) -> KindRow {
    KindRow {
        group,
        version,
        kind,
        plural,
        namespaced,
    }
}

const NS: bool = true;
const CLUSTER: bool = false;

/// The storage-only built-in kinds (generated from k8s-openapi 0.29, Kubernetes 1.33
/// types; the kinds of this list exist unchanged in the vendored v1.32.0 definitions).
pub const ROWS: &[KindRow] = &[
    row(
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        NS,
    ),
    row("", "v1", "ComponentStatus", "componentstatuses", CLUSTER),
    row("", "v1", "PersistentVolume", "persistentvolumes", CLUSTER),
    row(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        NS,
    ),
    row("", "v1", "LimitRange", "limitranges", NS),
    row("", "v1", "ResourceQuota", "resourcequotas", NS),
    row("", "v1", "PodTemplate", "podtemplates", NS),
    row("apps", "v1", "ReplicaSet", "replicasets", NS),
    row("apps", "v1", "DaemonSet", "daemonsets", NS),
    row("apps", "v1", "StatefulSet", "statefulsets", NS),
    row(
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        NS,
    ),
    row("batch", "v1", "Job", "jobs", NS),
    row("batch", "v1", "CronJob", "cronjobs", NS),
    row(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        NS,
    ),
    row(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        NS,
    ),
    row("networking.k8s.io", "v1", "Ingress", "ingresses", NS),
    row(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        CLUSTER,
    ),
    row(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        NS,
    ),
    row(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        CLUSTER,
    ),
    row("storage.k8s.io", "v1", "CSIDriver", "csidrivers", CLUSTER),
    row("storage.k8s.io", "v1", "CSINode", "csinodes", CLUSTER),
    row(
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        CLUSTER,
    ),
    row(
        "storage.k8s.io",
        "v1",
        "CSIStorageCapacity",
        "csistoragecapacities",
        NS,
    ),
    row(
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        CLUSTER,
    ),
    row(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        CLUSTER,
    ),
    row(
        "node.k8s.io",
        "v1",
        "RuntimeClass",
        "runtimeclasses",
        CLUSTER,
    ),
    row(
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        CLUSTER,
    ),
    row(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        CLUSTER,
    ),
    row(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        CLUSTER,
    ),
    row(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        CLUSTER,
    ),
    row(
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        CLUSTER,
    ),
    row(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "FlowSchema",
        "flowschemas",
        CLUSTER,
    ),
    row(
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
        CLUSTER,
    ),
];

/// What upstream's `storage.go` of a kind declares beyond k8s-openapi's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamNames {
    /// API group of the row.
    pub group: &'static str,
    /// Plural of the row.
    pub plural: &'static str,
    /// `ShortNames()`.
    pub short_names: &'static [&'static str],
    /// `Categories()`.
    pub categories: &'static [&'static str],
    /// The subresources installed beside the main storage (`status`, `scale`, `approval`).
    pub subresources: &'static [&'static str],
}

const fn names(
    group: &'static str,
    plural: &'static str,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    subresources: &'static [&'static str],
) -> UpstreamNames {
    UpstreamNames {
        group,
        plural,
        short_names,
        categories,
        subresources,
    }
}

const ALL: &[&str] = &["all"];
const API_MACHINERY: &[&str] = &["api-extensions"];
const STATUS: &[&str] = &["status"];
const STATUS_SCALE: &[&str] = &["status", "scale"];

/// Short names, categories and subresources from upstream's `storage.go` files (v1.32:
/// `pkg/registry/<group>/<kind>/storage/storage.go`; kube-aggregator's for APIService). A row
/// without an entry has none of them.
pub const NAMES: &[UpstreamNames] = &[
    names("", "replicationcontrollers", &["rc"], ALL, STATUS_SCALE),
    names("", "componentstatuses", &["cs"], &[], &[]),
    names("", "persistentvolumes", &["pv"], &[], STATUS),
    names("", "persistentvolumeclaims", &["pvc"], &[], STATUS),
    names("", "limitranges", &["limits"], &[], &[]),
    names("", "resourcequotas", &["quota"], &[], STATUS),
    names("apps", "replicasets", &["rs"], ALL, STATUS_SCALE),
    names("apps", "daemonsets", &["ds"], ALL, STATUS),
    names("apps", "statefulsets", &["sts"], ALL, STATUS_SCALE),
    names("batch", "jobs", &[], ALL, STATUS),
    names("batch", "cronjobs", &["cj"], ALL, STATUS),
    names(
        "autoscaling",
        "horizontalpodautoscalers",
        &["hpa"],
        ALL,
        STATUS,
    ),
    names("policy", "poddisruptionbudgets", &["pdb"], &[], STATUS),
    names("networking.k8s.io", "ingresses", &["ing"], &[], STATUS),
    names(
        "networking.k8s.io",
        "networkpolicies",
        &["netpol"],
        &[],
        &[],
    ),
    names("storage.k8s.io", "storageclasses", &["sc"], &[], &[]),
    names("storage.k8s.io", "volumeattachments", &[], &[], STATUS),
    names(
        "certificates.k8s.io",
        "certificatesigningrequests",
        &["csr"],
        &[],
        &["status", "approval"],
    ),
    names("scheduling.k8s.io", "priorityclasses", &["pc"], &[], &[]),
    names(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        &[],
        API_MACHINERY,
        &[],
    ),
    names(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        &[],
        API_MACHINERY,
        &[],
    ),
    names(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        &[],
        API_MACHINERY,
        STATUS,
    ),
    names(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        &[],
        API_MACHINERY,
        &[],
    ),
    names(
        "apiregistration.k8s.io",
        "apiservices",
        &[],
        API_MACHINERY,
        STATUS,
    ),
    names(
        "flowcontrol.apiserver.k8s.io",
        "flowschemas",
        &[],
        &[],
        STATUS,
    ),
    names(
        "flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations",
        &[],
        &[],
        STATUS,
    ),
];

/// The [`NAMES`] entry of a row (none: no short names, categories or subresources).
pub fn names_of(row: &KindRow) -> UpstreamNames {
    NAMES
        .iter()
        .find(|n| n.group == row.group && n.plural == row.plural)
        .copied()
        .unwrap_or(UpstreamNames {
            group: row.group,
            plural: row.plural,
            short_names: &[],
            categories: &[],
            subresources: &[],
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_names_entry_names_a_row_and_no_row_is_listed_twice() {
        for n in NAMES {
            assert!(
                ROWS.iter()
                    .any(|r| r.group == n.group && r.plural == n.plural),
                "{}/{} has names but no row",
                n.group,
                n.plural
            );
        }
        let mut seen = std::collections::HashSet::new();
        for r in ROWS {
            assert!(seen.insert((r.group, r.version, r.plural)), "{r:?}");
        }
    }
}
