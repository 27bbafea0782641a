//! The derived kind table (`listwatch_kinds::builtin::table::ROWS`) against its maintained
//! sources: every row equals the `k8s-openapi` type of the same kind (`API_VERSION`, `KIND`,
//! `URL_PATH_SEGMENT`, `Scope`), and every row's kind has a definition in the vendored
//! upstream OpenAPI documents (APIService, which k8s-openapi does not define, is checked
//! there only).

use std::any::TypeId;

use k8s_openapi::api;
use k8s_openapi::{NamespaceResourceScope, Resource};
use listwatch_kinds::builtin::table::{KindRow, ROWS};

/// A kind as k8s-openapi describes it: (apiVersion, kind, plural, namespaced).
type Described = (&'static str, &'static str, &'static str, bool);

fn describe<T: Resource>() -> Described
where
    T::Scope: 'static,
{
    (
        T::API_VERSION,
        T::KIND,
        T::URL_PATH_SEGMENT,
        TypeId::of::<T::Scope>() == TypeId::of::<NamespaceResourceScope>(),
    )
}

fn k8s_openapi_kinds() -> Vec<Described> {
    vec![
        describe::<api::core::v1::ReplicationController>(),
        describe::<api::core::v1::ComponentStatus>(),
        describe::<api::core::v1::PersistentVolume>(),
        describe::<api::core::v1::PersistentVolumeClaim>(),
        describe::<api::core::v1::LimitRange>(),
        describe::<api::core::v1::ResourceQuota>(),
        describe::<api::core::v1::PodTemplate>(),
        describe::<api::apps::v1::ReplicaSet>(),
        describe::<api::apps::v1::DaemonSet>(),
        describe::<api::apps::v1::StatefulSet>(),
        describe::<api::apps::v1::ControllerRevision>(),
        describe::<api::batch::v1::Job>(),
        describe::<api::batch::v1::CronJob>(),
        describe::<api::autoscaling::v2::HorizontalPodAutoscaler>(),
        describe::<api::policy::v1::PodDisruptionBudget>(),
        describe::<api::networking::v1::Ingress>(),
        describe::<api::networking::v1::IngressClass>(),
        describe::<api::networking::v1::NetworkPolicy>(),
        describe::<api::storage::v1::StorageClass>(),
        describe::<api::storage::v1::CSIDriver>(),
        describe::<api::storage::v1::CSINode>(),
        describe::<api::storage::v1::VolumeAttachment>(),
        describe::<api::storage::v1::CSIStorageCapacity>(),
        describe::<api::certificates::v1::CertificateSigningRequest>(),
        describe::<api::scheduling::v1::PriorityClass>(),
        describe::<api::node::v1::RuntimeClass>(),
        describe::<api::admissionregistration::v1::MutatingWebhookConfiguration>(),
        describe::<api::admissionregistration::v1::ValidatingWebhookConfiguration>(),
        describe::<api::admissionregistration::v1::ValidatingAdmissionPolicy>(),
        describe::<api::admissionregistration::v1::ValidatingAdmissionPolicyBinding>(),
        describe::<api::flowcontrol::v1::FlowSchema>(),
        describe::<api::flowcontrol::v1::PriorityLevelConfiguration>(),
    ]
}

fn api_version(row: &KindRow) -> String {
    if row.group.is_empty() {
        row.version.to_owned()
    } else {
        format!("{}/{}", row.group, row.version)
    }
}

/// Kinds of the table that k8s-openapi does not define (kube-aggregator's).
const NOT_IN_K8S_OPENAPI: [&str; 1] = ["APIService"];

#[test]
fn every_row_matches_k8s_openapi() {
    let described = k8s_openapi_kinds();
    for row in ROWS {
        let want = (api_version(row), row.kind, row.plural, row.namespaced);
        match described.iter().find(|d| d.0 == want.0 && d.1 == row.kind) {
            Some(d) => assert_eq!(
                (d.0.to_owned(), d.1, d.2, d.3),
                want,
                "the table's row differs from k8s-openapi"
            ),
            None => assert!(
                NOT_IN_K8S_OPENAPI.contains(&row.kind),
                "{} {} is not checked against k8s-openapi",
                want.0,
                row.kind
            ),
        }
    }
    // And every kind named here is a row (none forgotten in the table).
    for d in &described {
        assert!(
            ROWS.iter().any(|r| api_version(r) == d.0 && r.kind == d.1),
            "{} {} is not in the table",
            d.0,
            d.1
        );
    }
}

#[test]
fn every_row_has_an_upstream_definition() {
    let catalog = listwatch_schema::Catalog::builtin();
    for row in ROWS {
        assert!(
            catalog.kind(row.group, row.version, row.kind).is_some(),
            "{} {} has no definition in the vendored OpenAPI documents",
            api_version(row),
            row.kind
        );
    }
}
